//! The hello: who may connect, and what its first frame must say.
//!
//! [`hello`] is the decision, a pure function of the first frame, the pid
//! the kernel reports for the peer and the supervisor's fingerprint.
//! [`greet`] does the I/O around it: the peer's user (`SO_PEERCRED`, checked
//! before anything is read), the first frame under [`HELLO_TIMEOUT`], and
//! the one answer, `Welcome` or `Refused` (see [`RefuseReason`] for the
//! texts).

use std::time::Duration;

use strata_protocol::wire::{
    FrameReader, PROTOCOL_VERSION, ProxyMessage, RefuseReason, SupervisorMessage, WireError,
    write_frame,
};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::LinkShared;
use crate::sockets;

/// A proxy that connects but says nothing is dropped after this long.
pub(super) const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the first frame welcomes its proxy: the hello's pid, or why not.
/// `peer_pid` is the connecting process's, as the kernel reports it (`None`
/// if it cannot tell); `fingerprint` is the supervisor's config fingerprint.
/// The checks run in this order: the protocol version, the pid, the
/// fingerprint.
pub(super) fn hello(
    first: Result<ProxyMessage, WireError>,
    peer_pid: Option<u32>,
    fingerprint: u64,
) -> Result<u32, RefuseReason> {
    let (protocol_version, theirs, pid) = match first {
        Ok(ProxyMessage::Hello {
            protocol_version,
            fingerprint,
            pid,
        }) => (protocol_version, fingerprint, pid),
        Ok(_) => return Err(RefuseReason::NotAHello),
        Err(err) => return Err(RefuseReason::BadHello(err.to_string())),
    };
    if protocol_version != PROTOCOL_VERSION {
        return Err(RefuseReason::ProtocolVersion {
            proxy: protocol_version,
            supervisor: PROTOCOL_VERSION,
        });
    }
    // The hello's pid names the proxy in logs and `strata-ctl status`; it
    // must be the connecting process's own.
    if let Some(peer) = peer_pid
        && peer != pid
    {
        return Err(RefuseReason::PidMismatch { hello: pid, peer });
    }
    if theirs != fingerprint {
        return Err(RefuseReason::Fingerprint);
    }
    Ok(pid)
}

/// The whole hello exchange of one connection: the proxy's pid and its
/// frame reader once it is welcomed; `None` when the connection is over
/// (refused, closed, or silent for [`HELLO_TIMEOUT`]).
pub(super) async fn greet(
    reader: OwnedReadHalf,
    writer: &mut OwnedWriteHalf,
    shared: &LinkShared,
) -> Option<(u32, FrameReader<OwnedReadHalf>)> {
    if !sockets::peer_is_allowed(reader.as_ref()) {
        shared.refused(&RefuseReason::WrongUser);
        let _ = write_frame(writer, &SupervisorMessage::from(RefuseReason::WrongUser)).await;
        return None;
    }
    let peer_pid = reader
        .as_ref()
        .peer_cred()
        .ok()
        .and_then(|cred| cred.pid())
        .and_then(|pid| u32::try_from(pid).ok());
    let mut reader = FrameReader::with_limit(reader, shared.proxy_frame_limit);
    let first = match tokio::time::timeout(HELLO_TIMEOUT, reader.next::<ProxyMessage>()).await {
        Ok(Ok(Some(message))) => Ok(message),
        Ok(Ok(None)) | Err(_) => return None,
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "bad hello");
            Err(err)
        }
    };
    let pid = match hello(first, peer_pid, shared.fingerprint) {
        Ok(pid) => pid,
        Err(reason) => {
            shared.refused(&reason);
            let _ = write_frame(writer, &SupervisorMessage::from(reason)).await;
            return None;
        }
    };
    let welcome = SupervisorMessage::Welcome {
        protocol_version: PROTOCOL_VERSION,
        instance_id: shared.instance_id.clone(),
        supervisor_pid: std::process::id(),
    };
    write_frame(writer, &welcome).await.ok()?;
    Some((pid, reader))
}

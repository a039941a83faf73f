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

/// How a hello ended.
pub(super) enum Greeted {
    /// Welcomed: the proxy's pid and its frame reader.
    Welcome(u32, FrameReader<OwnedReadHalf>),
    /// Refused for its settings alone (the same build, another config): the
    /// connection stays open for that proxy's records, which do not depend
    /// on the settings, so requests it answered during the mismatch are not
    /// lost. Nothing else is taken from it.
    RecordsOnly(FrameReader<OwnedReadHalf>),
}

/// The whole hello exchange of one connection; `None` when the connection
/// is over (refused, closed, or silent for [`HELLO_TIMEOUT`]).
pub(super) async fn greet(
    reader: OwnedReadHalf,
    writer: &mut OwnedWriteHalf,
    shared: &LinkShared,
) -> Option<Greeted> {
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
            let records_only = reason == RefuseReason::Fingerprint;
            write_frame(writer, &SupervisorMessage::from(reason))
                .await
                .ok()?;
            return records_only.then_some(Greeted::RecordsOnly(reader));
        }
    };
    let welcome = SupervisorMessage::Welcome {
        protocol_version: PROTOCOL_VERSION,
        instance_id: shared.instance_id.clone(),
        supervisor_pid: std::process::id(),
    };
    write_frame(writer, &welcome).await.ok()?;
    Some(Greeted::Welcome(pid, reader))
}

/// The records of a proxy refused for its settings ([`Greeted::RecordsOnly`]):
/// each `SubmitRecord` is stored; anything else, the end of the connection,
/// or [`HELLO_TIMEOUT`] without a frame ends it.
pub(super) async fn take_records(mut reader: FrameReader<OwnedReadHalf>, shared: &LinkShared) {
    let mut taken = 0usize;
    loop {
        match tokio::time::timeout(HELLO_TIMEOUT, reader.next::<ProxyMessage>()).await {
            Ok(Ok(Some(ProxyMessage::SubmitRecord { record }))) => {
                shared.store(*record);
                taken += 1;
            }
            Ok(Ok(Some(_))) => {
                tracing::debug!("a proxy with other settings sent more than records; closed");
                break;
            }
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => break,
        }
    }
    if taken > 0 {
        tracing::info!(
            records = taken,
            "stored the records of a proxy with other settings"
        );
    }
}

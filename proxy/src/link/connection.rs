//! The task that owns the supervisor socket.
//!
//! Frames are read by a separate reader task because a frame read is not
//! cancel-safe: inside a `select!` with the command channel, a partly read
//! frame would be lost. Everything else happens in this one task, so the
//! pending-lease table needs no lock.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use strata_protocol::record::RequestRecord;
use strata_protocol::wire::{
    LeaseId, PROTOCOL_VERSION, ProxyMessage, RequestLogStats, SupervisorMessage, read_frame,
    write_frame,
};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot, watch};

use super::{LeaseEvent, LinkCommand, LinkState};

const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection ended.
enum Ended {
    /// Try again after a backoff.
    Lost,
    /// Refused for good, or every handle is gone: stop the task.
    Stop,
}

pub(super) async fn run(
    socket: PathBuf,
    fingerprint: u64,
    mut commands: mpsc::UnboundedReceiver<LinkCommand>,
    state: watch::Sender<LinkState>,
) {
    let mut draining = false;
    let mut unsent = VecDeque::new();
    let mut backoff = BACKOFF_START;
    loop {
        match UnixStream::connect(&socket).await {
            Ok(stream) => {
                match serve(
                    stream,
                    fingerprint,
                    &mut commands,
                    &state,
                    &mut draining,
                    &mut unsent,
                )
                .await
                {
                    Ended::Stop => return,
                    Ended::Lost => backoff = BACKOFF_START,
                }
                state.send_modify(|state| state.connected = false);
                tracing::warn!(socket = %socket.display(), "lost the supervisor; reconnecting");
            }
            Err(err) => {
                tracing::debug!(socket = %socket.display(), error = %err, "supervisor not reachable");
            }
        }
        // Keep answering commands while disconnected: nothing may wait for
        // a supervisor that is not there.
        let sleep = tokio::time::sleep(backoff);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => break,
                command = commands.recv() => match command {
                    None => return,
                    Some(command) => refuse_while_disconnected(command, &mut draining, &mut unsent),
                },
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Records kept for the supervisor while it is unreachable; beyond this
/// the oldest are dropped (and the loss logged).
const MAX_UNSENT_RECORDS: usize = 8192;

fn keep_unsent(unsent: &mut VecDeque<Box<RequestRecord>>, record: Box<RequestRecord>) {
    if unsent.len() == MAX_UNSENT_RECORDS {
        unsent.pop_front();
        tracing::warn!("supervisor unreachable too long: dropped an accounting record");
    }
    unsent.push_back(record);
}

fn refuse_while_disconnected(
    command: LinkCommand,
    draining: &mut bool,
    unsent: &mut VecDeque<Box<RequestRecord>>,
) {
    match command {
        LinkCommand::Acquire { events, .. } => {
            let _ = events.send(LeaseEvent::LinkLost);
        }
        // Dropping the reply senders answers `None`.
        // A flush while disconnected is not answered: the caller's bound
        // runs out, and records stay in `unsent`.
        LinkCommand::Release { .. }
        | LinkCommand::Arrive { .. }
        | LinkCommand::QueryRecords { .. }
        | LinkCommand::QueryRequestLog { .. }
        | LinkCommand::Flush { .. } => {}
        LinkCommand::SetDraining(value) => *draining = value,
        LinkCommand::SubmitRecord(record) => keep_unsent(unsent, record),
    }
}

/// Says hello; on success serves the connection until it ends.
async fn serve(
    stream: UnixStream,
    fingerprint: u64,
    commands: &mut mpsc::UnboundedReceiver<LinkCommand>,
    state: &watch::Sender<LinkState>,
    draining: &mut bool,
    unsent: &mut VecDeque<Box<RequestRecord>>,
) -> Ended {
    let (mut reader, mut writer) = stream.into_split();
    let hello = ProxyMessage::Hello {
        protocol_version: PROTOCOL_VERSION,
        fingerprint,
        pid: std::process::id(),
    };
    if write_frame(&mut writer, &hello).await.is_err() {
        return Ended::Lost;
    }
    let answer = tokio::time::timeout(
        HELLO_TIMEOUT,
        read_frame::<_, SupervisorMessage>(&mut reader),
    )
    .await;
    match answer {
        Ok(Ok(Some(SupervisorMessage::Welcome {
            protocol_version,
            instance_id,
            supervisor_pid,
        }))) if protocol_version == PROTOCOL_VERSION => {
            tracing::info!(instance_id, supervisor_pid, "connected to the supervisor");
            state.send_modify(|state| {
                state.connected = true;
                state.instance_id = Some(instance_id);
            });
        }
        Ok(Ok(Some(SupervisorMessage::Refused { reason }))) => {
            tracing::error!(reason, "the supervisor refused this proxy");
            state.send_modify(|state| state.refused = Some(reason));
            return Ended::Stop;
        }
        Ok(Ok(Some(other))) => {
            let reason = format!("unexpected answer to hello: {other:?}");
            state.send_modify(|state| state.refused = Some(reason));
            return Ended::Stop;
        }
        _ => return Ended::Lost,
    }
    if *draining
        && write_frame(&mut writer, &ProxyMessage::SetDraining { draining: true })
            .await
            .is_err()
    {
        return Ended::Lost;
    }
    while let Some(record) = unsent.pop_front() {
        let message = ProxyMessage::SubmitRecord { record };
        if write_frame(&mut writer, &message).await.is_err() {
            if let ProxyMessage::SubmitRecord { record } = message {
                unsent.push_front(record);
            }
            return Ended::Lost;
        }
    }

    let (frames_tx, mut frames) = mpsc::unbounded_channel();
    let reader_task = tokio::spawn(async move {
        while let Ok(Some(message)) = read_frame::<_, SupervisorMessage>(&mut reader).await {
            if frames_tx.send(message).is_err() {
                break;
            }
        }
    });
    let mut session = Session {
        writer,
        leases: HashMap::new(),
        arrivals: HashMap::new(),
        pages: HashMap::new(),
        stats: HashMap::new(),
        next_token: 1,
    };
    let ended = loop {
        tokio::select! {
            frame = frames.recv() => match frame {
                Some(message) => session.dispatch(message, state),
                None => break Ended::Lost,
            },
            command = commands.recv() => match command {
                None => break Ended::Stop,
                Some(command) => {
                    if let LinkCommand::SetDraining(value) = &command {
                        *draining = *value;
                    }
                    if let Err(lost) = session.send(command).await {
                        if let Some(record) = lost {
                            keep_unsent(unsent, record);
                        }
                        break Ended::Lost;
                    }
                }
            },
        }
    };
    reader_task.abort();
    // Every lease of this connection ended with it (the supervisor releases
    // them when the socket closes); tell the requests.
    for (_, events) in session.leases.drain() {
        let _ = events.send(LeaseEvent::LinkLost);
    }
    ended
}

struct Session {
    writer: OwnedWriteHalf,
    leases: HashMap<LeaseId, mpsc::UnboundedSender<LeaseEvent>>,
    arrivals: HashMap<u64, oneshot::Sender<u64>>,
    pages: HashMap<u64, oneshot::Sender<String>>,
    stats: HashMap<u64, oneshot::Sender<RequestLogStats>>,
    next_token: u64,
}

impl Session {
    fn token(&mut self) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        token
    }

    /// Writes the frame for `command`. On failure a record that could not
    /// be sent is handed back so it is not lost.
    async fn send(&mut self, command: LinkCommand) -> Result<(), Option<Box<RequestRecord>>> {
        let message = match command {
            LinkCommand::Acquire {
                lease,
                model,
                tier,
                events,
            } => {
                self.leases.insert(lease, events);
                ProxyMessage::AcquireLease { lease, model, tier }
            }
            LinkCommand::Release { lease } => {
                if self.leases.remove(&lease).is_none() {
                    // Already failed or revoked: nothing to release.
                    return Ok(());
                }
                ProxyMessage::ReleaseLease { lease }
            }
            LinkCommand::Arrive { reply } => {
                let token = self.token();
                self.arrivals.insert(token, reply);
                ProxyMessage::Arrive { token }
            }
            LinkCommand::SetDraining(draining) => ProxyMessage::SetDraining { draining },
            LinkCommand::SubmitRecord(record) => ProxyMessage::SubmitRecord { record },
            LinkCommand::QueryRecords {
                after,
                limit,
                reply,
            } => {
                let query = self.token();
                self.pages.insert(query, reply);
                ProxyMessage::QueryRecords {
                    query,
                    after,
                    limit,
                }
            }
            LinkCommand::QueryRequestLog { reply } => {
                let query = self.token();
                self.stats.insert(query, reply);
                ProxyMessage::QueryRequestLog { query }
            }
            // Commands are written in order, so everything before this one
            // is already on the socket.
            LinkCommand::Flush { reply } => {
                let _ = reply.send(());
                return Ok(());
            }
        };
        match write_frame(&mut self.writer, &message).await {
            Ok(()) => Ok(()),
            Err(err) => {
                tracing::warn!(error = %err, "writing to the supervisor failed");
                match message {
                    ProxyMessage::SubmitRecord { record } => Err(Some(record)),
                    _ => Err(None),
                }
            }
        }
    }

    fn dispatch(&mut self, message: SupervisorMessage, state: &watch::Sender<LinkState>) {
        match message {
            SupervisorMessage::State(router) => {
                state.send_modify(|state| state.router = Some(router));
            }
            SupervisorMessage::LeaseProgress { lease, phase, .. } => {
                self.route_to_lease(lease, LeaseEvent::Progress(phase), false);
            }
            SupervisorMessage::LeaseGranted(grant) => {
                let lease = grant.lease;
                self.route_to_lease(lease, LeaseEvent::Granted(grant), false);
            }
            SupervisorMessage::LeaseFailed { lease, failure } => {
                self.route_to_lease(lease, LeaseEvent::Failed(failure), true);
            }
            // Still held until the request releases it.
            SupervisorMessage::LeaseRevoked { lease, reason } => {
                self.route_to_lease(lease, LeaseEvent::Revoked(reason), false);
            }
            SupervisorMessage::Arrival { token, arrival_seq } => {
                if let Some(reply) = self.arrivals.remove(&token) {
                    let _ = reply.send(arrival_seq);
                }
            }
            SupervisorMessage::Records { query, body } => {
                if let Some(reply) = self.pages.remove(&query) {
                    let _ = reply.send(body);
                }
            }
            SupervisorMessage::RequestLog { query, stats } => {
                if let Some(reply) = self.stats.remove(&query) {
                    let _ = reply.send(stats);
                }
            }
            SupervisorMessage::ProtocolError { message } => {
                tracing::warn!(message, "the supervisor could not read a frame");
            }
            SupervisorMessage::Welcome { .. } | SupervisorMessage::Refused { .. } => {
                tracing::warn!("unexpected hello answer after the handshake");
            }
        }
    }

    fn route_to_lease(&mut self, lease: LeaseId, event: LeaseEvent, last: bool) {
        let sender = if last {
            self.leases.remove(&lease)
        } else {
            self.leases.get(&lease).cloned()
        };
        if let Some(sender) = sender {
            let _ = sender.send(event);
        }
    }
}

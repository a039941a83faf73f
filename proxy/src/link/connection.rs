//! The task that owns the supervisor socket.
//!
//! Frames are read by a separate reader task because a frame read is not
//! cancel-safe: inside a `select!` with the command channel, a partly read
//! frame would be lost. Everything else happens in this one task, so the
//! ticket table needs no lock. Cache lookups run as tasks of their own and
//! report back here.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use strata_protocol::page::RecordsPage;
use strata_protocol::wire::{
    ArrivalInfo, CacheScores, FrameReader, LookupFailure, PROTOCOL_VERSION, ProxyMessage,
    RefuseReason, RouterMetrics, SubmittedRecord, SupervisorMessage, TicketId, encode_frame_into,
    write_frame,
};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, oneshot, watch};

use super::lookup;
use super::state::{LinkCommand, LinkState, Mismatch, TicketEvent};

const BACKOFF_START: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a connection ended.
enum Ended {
    /// Try again after a backoff.
    Lost,
    /// A supervisor with another build or settings answered: say hello
    /// again after a backoff, until one with the same does.
    Mismatch,
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
    let mut unsent = Unsent::default();
    let mut backoff = BACKOFF_START;
    loop {
        match UnixStream::connect(&socket).await {
            Ok(stream) => {
                let ended = serve(
                    stream,
                    fingerprint,
                    &mut commands,
                    &state,
                    &mut draining,
                    &mut unsent,
                )
                .await;
                unsent.publish(&state);
                attempted(&state);
                match ended {
                    Ended::Stop => return,
                    Ended::Lost => {
                        backoff = BACKOFF_START;
                        state.send_modify(|state| state.connected = false);
                        tracing::warn!(socket = %socket.display(), "lost the supervisor; reconnecting");
                    }
                    // The backoff keeps growing: a mismatch lasts until an
                    // operator restarts one of the two.
                    Ended::Mismatch => {}
                }
            }
            Err(err) => {
                tracing::debug!(socket = %socket.display(), error = %err, "supervisor not reachable");
                attempted(&state);
                // Nobody to hand the records to: a flush that waited for this try says so.
                unsent.flushes.clear();
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
                    Some(LinkCommand::Flush { reply }) => {
                        // An exiting proxy: try to hand its records over now, not after
                        // the backoff (a supervisor with other settings takes them too).
                        unsent.flushes.push(reply);
                        break;
                    }
                    Some(command) => {
                        refuse_while_disconnected(command, &mut draining, &mut unsent);
                        unsent.publish(&state);
                    }
                },
            }
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// The first try to reach a supervisor is over (whatever its outcome).
fn attempted(state: &watch::Sender<LinkState>) {
    state.send_if_modified(|state| !std::mem::replace(&mut state.first_attempt_done, true));
}

/// Records kept for the supervisor while it is unreachable; beyond this
/// the oldest are dropped (and the loss logged).
const MAX_UNSENT_RECORDS: usize = 8192;

/// While a supervisor with other settings answers, records are handed to it
/// once this many wait (otherwise only when the proxy exits).
const HAND_OVER_AT: usize = MAX_UNSENT_RECORDS / 2;

/// What waits for a supervisor: the records not yet handed over, and the
/// flushes that wait for them.
#[derive(Default)]
struct Unsent {
    records: VecDeque<Box<SubmittedRecord>>,
    flushes: Vec<oneshot::Sender<()>>,
}

impl Unsent {
    fn keep(&mut self, record: Box<SubmittedRecord>) {
        if self.records.len() == MAX_UNSENT_RECORDS {
            self.records.pop_front();
            tracing::warn!("supervisor unreachable too long: dropped an accounting record");
        }
        self.records.push_back(record);
    }

    /// Every kept record is written: the waiting flushes are answered.
    fn all_sent(&mut self) {
        for reply in self.flushes.drain(..) {
            let _ = reply.send(());
        }
    }

    fn publish(&self, state: &watch::Sender<LinkState>) {
        let count = self.records.len();
        state.send_if_modified(|state| {
            let changed = state.unsent_records != count;
            state.unsent_records = count;
            changed
        });
    }

    /// Writes the kept records, in order; on a failed write the rest (and
    /// the one that failed) stay kept.
    async fn write(&mut self, writer: &mut OwnedWriteHalf) -> bool {
        while let Some(record) = self.records.pop_front() {
            let message = ProxyMessage::SubmitRecord { record };
            if write_frame(writer, &message).await.is_err() {
                if let ProxyMessage::SubmitRecord { record } = message {
                    self.records.push_front(record);
                }
                return false;
            }
        }
        self.all_sent();
        true
    }
}

fn refuse_while_disconnected(command: LinkCommand, draining: &mut bool, unsent: &mut Unsent) {
    match command {
        LinkCommand::Enqueue { events, .. } => {
            let _ = events.send(TicketEvent::LinkLost);
        }
        // Dropping the reply senders answers `None`.
        LinkCommand::HeadersReceived { .. }
        | LinkCommand::Arrive { .. }
        | LinkCommand::QueryRecords { .. }
        | LinkCommand::QueryMetrics { .. } => {}
        LinkCommand::Flush { reply } => unsent.flushes.push(reply),
        LinkCommand::SetDraining(value) => *draining = value,
        // The ticket died with the old connection; the record is kept.
        LinkCommand::SubmitRecord(record) | LinkCommand::Finish { record, .. } => {
            unsent.keep(record)
        }
    }
}

/// Says hello; on success serves the connection until it ends.
async fn serve(
    stream: UnixStream,
    fingerprint: u64,
    commands: &mut mpsc::UnboundedReceiver<LinkCommand>,
    state: &watch::Sender<LinkState>,
    draining: &mut bool,
    unsent: &mut Unsent,
) -> Ended {
    let (reader, mut writer) = stream.into_split();
    let mut reader = FrameReader::new(reader);
    let hello = ProxyMessage::Hello {
        protocol_version: PROTOCOL_VERSION,
        fingerprint,
        pid: std::process::id(),
    };
    if write_frame(&mut writer, &hello).await.is_err() {
        return Ended::Lost;
    }
    let answer = tokio::time::timeout(HELLO_TIMEOUT, reader.next::<SupervisorMessage>()).await;
    match answer {
        Ok(Ok(Some(SupervisorMessage::Welcome {
            protocol_version,
            instance_id,
            supervisor_pid,
        }))) if protocol_version == PROTOCOL_VERSION => {
            tracing::info!(instance_id, supervisor_pid, "connected to the supervisor");
            // `connected` waits for the first `State` (it follows the welcome at once): a
            // proxy that says it is connected always knows routing and the serving backend.
            state.send_modify(|state| {
                state.instance_id = Some(instance_id);
                state.mismatch = None;
            });
        }
        Ok(Ok(Some(SupervisorMessage::Refused { reason: text }))) => {
            let mismatch = RefuseReason::parse(&text).and_then(|reason| Mismatch::of(&reason));
            let Some(mismatch) = mismatch else {
                tracing::error!(reason = text, "the supervisor refused this proxy");
                state.send_modify(|state| state.refused = Some(text));
                return Ended::Stop;
            };
            // Logged once per mismatch, not at every retry.
            if state.borrow().mismatch != Some(mismatch) {
                tracing::error!(
                    reason = text,
                    "the supervisor runs another build or other settings; serving 503 and \
                     saying hello again until one with the same answers"
                );
            }
            state.send_modify(|state| {
                state.mismatch = Some(mismatch);
                state.first_attempt_done = true;
            });
            // Other settings, same build: the supervisor still takes this proxy's records on
            // the refused connection (a record does not depend on the settings; another
            // build's encoding might differ, so a version mismatch keeps them). They are
            // kept for a supervisor that matches (it is usually the next to answer, and
            // then they are in its `/requests`) unless this proxy is exiting or holds many.
            let hand_over = !unsent.flushes.is_empty() || unsent.records.len() >= HAND_OVER_AT;
            if mismatch == Mismatch::Config && hand_over {
                let count = unsent.records.len();
                if unsent.write(&mut writer).await {
                    let _ = writer.shutdown().await;
                    if count > 0 {
                        tracing::info!(
                            records = count,
                            "handed this proxy's accounting records to the supervisor despite the mismatch"
                        );
                    }
                }
            }
            return Ended::Mismatch;
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
    if !unsent.write(&mut writer).await {
        return Ended::Lost;
    }
    unsent.publish(state);

    let (lookups_tx, mut lookups) = mpsc::unbounded_channel();
    let mut session = Session {
        writer,
        tickets: HashMap::new(),
        arrivals: HashMap::new(),
        pages: HashMap::new(),
        metrics: HashMap::new(),
        lookups: lookups_tx,
        next_token: 1,
    };
    let ended = loop {
        tokio::select! {
            // `FrameReader::next` is cancel-safe: a frame half read when
            // another branch wins stays in its buffer.
            frame = reader.next::<SupervisorMessage>() => match frame {
                Ok(Some(message)) => session.dispatch(message, state),
                Ok(None) | Err(_) => break Ended::Lost,
            },
            Some((lookup, scores)) = lookups.recv() => {
                let message = ProxyMessage::TicketScores { lookup, scores };
                if write_frame(&mut session.writer, &message).await.is_err() {
                    break Ended::Lost;
                }
            }
            command = commands.recv() => match command {
                None => break Ended::Stop,
                Some(command) => {
                    // Whatever else is already waiting goes out in the same write.
                    let mut batch = Batch::default();
                    let mut next = Some(command);
                    let mut closed = false;
                    while let Some(command) = next.take() {
                        if let LinkCommand::SetDraining(value) = &command {
                            *draining = *value;
                        }
                        session.queue(command, &mut batch);
                        if batch.out.len() >= BATCH_BYTES {
                            break;
                        }
                        match commands.try_recv() {
                            Ok(command) => next = Some(command),
                            Err(mpsc::error::TryRecvError::Disconnected) => closed = true,
                            Err(mpsc::error::TryRecvError::Empty) => {}
                        }
                    }
                    if let Err(err) = session.writer.write_all(&batch.out).await {
                        tracing::warn!(error = %err, "writing to the supervisor failed");
                        for record in batch.records {
                            unsent.keep(record);
                        }
                        break Ended::Lost;
                    }
                    // Everything queued before a flush is on the socket now.
                    for reply in batch.flushed {
                        let _ = reply.send(());
                    }
                    if closed {
                        break Ended::Stop;
                    }
                }
            },
        }
    };
    // Every ticket of this connection ended with it (the supervisor drops
    // them when the socket closes); tell the requests.
    for (_, ticket) in session.tickets.drain() {
        let _ = ticket.events.send(TicketEvent::LinkLost);
    }
    ended
}

/// Stop adding commands to one write past this many bytes.
const BATCH_BYTES: usize = 64 * 1024;

/// Commands encoded for one write to the supervisor.
#[derive(Default)]
struct Batch {
    out: Vec<u8>,
    /// The records in `out`, kept until the write succeeded. Boxed as the
    /// messages and the unsent queue hold them, so none is moved twice.
    #[allow(clippy::vec_box)]
    records: Vec<Box<SubmittedRecord>>,
    /// Flushes to answer once `out` is written.
    flushed: Vec<oneshot::Sender<()>>,
}

/// One ticket of this connection.
struct Ticket {
    events: mpsc::UnboundedSender<TicketEvent>,
    /// The request body, while the ticket waits (cache lookups need it).
    body: Option<Bytes>,
}

struct Session {
    writer: OwnedWriteHalf,
    tickets: HashMap<TicketId, Ticket>,
    arrivals: HashMap<u64, oneshot::Sender<ArrivalInfo>>,
    pages: HashMap<u64, oneshot::Sender<RecordsPage>>,
    metrics: HashMap<u64, oneshot::Sender<RouterMetrics>>,
    /// Finished cache lookups, to be written to the supervisor.
    lookups: mpsc::UnboundedSender<(u64, Result<CacheScores, LookupFailure>)>,
    next_token: u64,
}

impl Session {
    fn token(&mut self) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        token
    }

    /// Encodes the frame for `command` into `batch`, keeping its record (if
    /// any) until the batch is written, so a failed write loses none.
    fn queue(&mut self, command: LinkCommand, batch: &mut Batch) {
        let message = match command {
            LinkCommand::Enqueue {
                ticket,
                model,
                tier,
                request,
                body,
                events,
            } => {
                self.tickets.insert(
                    ticket,
                    Ticket {
                        events,
                        body: Some(body),
                    },
                );
                ProxyMessage::Enqueue {
                    ticket,
                    model,
                    tier,
                    request,
                }
            }
            LinkCommand::HeadersReceived { ticket } => ProxyMessage::HeadersReceived { ticket },
            LinkCommand::Finish { ticket, record } => {
                if self.tickets.remove(&ticket).is_none() {
                    // The ticket belonged to an earlier connection (the
                    // supervisor dropped it then): only the record is left.
                    ProxyMessage::SubmitRecord { record }
                } else {
                    ProxyMessage::Finish { ticket, record }
                }
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
            LinkCommand::QueryMetrics { reply } => {
                let query = self.token();
                self.metrics.insert(query, reply);
                ProxyMessage::QueryMetrics { query }
            }
            // Answered once the batch holding everything before it is written.
            LinkCommand::Flush { reply } => {
                batch.flushed.push(reply);
                return;
            }
        };
        if let Err(err) = encode_frame_into(&mut batch.out, &message) {
            // Only a message past the frame limit cannot be encoded; a record never is.
            tracing::warn!(error = %err, "a message to the supervisor could not be encoded");
        }
        if let ProxyMessage::SubmitRecord { record } | ProxyMessage::Finish { record, .. } = message
        {
            batch.records.push(record);
        }
    }

    fn dispatch(&mut self, message: SupervisorMessage, state: &watch::Sender<LinkState>) {
        match message {
            SupervisorMessage::State(router) => {
                state.send_modify(|state| {
                    state.router = Some(router);
                    state.router_at = Some(std::time::Instant::now());
                    state.connected = true;
                    state.first_attempt_done = true;
                });
            }
            SupervisorMessage::Queued { ticket, arrival } => {
                self.to_ticket(ticket, TicketEvent::Queued(arrival));
            }
            SupervisorMessage::Admitted { ticket } => {
                self.to_ticket(ticket, TicketEvent::Admitted);
            }
            SupervisorMessage::Progress {
                ticket,
                phase,
                elapsed_ms,
                typical_load_ms,
            } => {
                self.to_ticket(
                    ticket,
                    TicketEvent::Progress(phase, elapsed_ms, typical_load_ms),
                );
            }
            SupervisorMessage::Granted(grant) => {
                let ticket = grant.ticket;
                if grant.model_switch {
                    // The benchmark's switch breakdown reads these `strata::switch` lines.
                    tracing::debug!(target: "strata::switch", ticket, "switch grant received");
                }
                if let Some(entry) = self.tickets.get_mut(&ticket) {
                    entry.body = None;
                }
                self.to_ticket(ticket, TicketEvent::Granted(Box::new(grant)));
            }
            SupervisorMessage::Failed {
                ticket,
                arrival,
                failure,
            } => {
                if let Some(entry) = self.tickets.get_mut(&ticket) {
                    entry.body = None;
                }
                self.to_ticket(ticket, TicketEvent::Failed { arrival, failure });
            }
            // Still held until the request finishes it.
            SupervisorMessage::Revoked { ticket, reason } => {
                self.to_ticket(ticket, TicketEvent::Revoked(reason));
            }
            SupervisorMessage::ScoreTickets {
                lookup,
                backend,
                tickets,
                budget_ms,
            } => self.score(lookup, backend, tickets, budget_ms),
            SupervisorMessage::Arrival { token, arrival } => {
                if let Some(reply) = self.arrivals.remove(&token) {
                    let _ = reply.send(arrival);
                }
            }
            SupervisorMessage::Records { query, page } => {
                if let Some(reply) = self.pages.remove(&query) {
                    let _ = reply.send(page);
                }
            }
            SupervisorMessage::Metrics { query, metrics } => {
                if let Some(reply) = self.metrics.remove(&query) {
                    let _ = reply.send(*metrics);
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

    fn to_ticket(&self, ticket: TicketId, event: TicketEvent) {
        if let Some(entry) = self.tickets.get(&ticket) {
            let _ = entry.events.send(event);
        }
    }

    /// Starts a cache lookup of `tickets` with the bodies this proxy holds.
    fn score(
        &self,
        lookup: u64,
        backend: std::net::SocketAddr,
        tickets: Vec<TicketId>,
        budget_ms: u64,
    ) {
        let bodies: Option<Vec<(TicketId, Bytes)>> = tickets
            .iter()
            .map(|ticket| {
                let body = self.tickets.get(ticket)?.body.clone()?;
                Some((*ticket, body))
            })
            .collect();
        let done = self.lookups.clone();
        let Some(bodies) = bodies else {
            let _ = done.send((lookup, Err(LookupFailure::UnknownTickets)));
            return;
        };
        let budget = Duration::from_millis(budget_ms);
        tokio::spawn(async move {
            let scores = lookup::run(backend, bodies, budget).await;
            let _ = done.send((lookup, scores));
        });
    }
}

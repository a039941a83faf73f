//! The private supervisor socket: one task per connected proxy.
//!
//! A connection goes through three steps: the hello (`hello.rs`: the peer's
//! user, then its versioned hello, answered `Welcome` or `Refused`), then two
//! tasks until it ends: the dispatch loop (`Connection::dispatch`) reads the
//! proxy's frames, hands ticket traffic to the engine and answers arrival
//! numbers, records and figures itself; the writer task (`write_events`)
//! writes everything meant for this proxy, the engine's messages and the
//! link's answers, from one channel in order, so a `Welcome` always precedes
//! the first `State`. What every connection shares is [`LinkShared`]
//! (`shared.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use strata_protocol::wire::{
    FrameReader, ProxyMessage, SupervisorMessage, WireError, encode_frame_into,
};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::engine::{Command, EngineHandle};

mod hello;
pub mod orphans;
mod shared;

pub use shared::{LinkShared, REFUSALS_REPORTED_EVERY};

/// At most this many connections may be waiting to finish their hello; more are closed at
/// once. A proxy connects once (twice for a moment while it restarts), so this only stops a
/// same-user peer from holding many connections (and their buffers) open without a hello.
const MAX_UNWELCOMED: usize = 16;

/// The link's own answers to a proxy (pages, figures, arrival numbers) that
/// are queued but not yet written may hold at most this much; a peer that
/// keeps asking and never reads is disconnected past it. A proxy reads all
/// the time, and a full `/requests` page is about 1.5 MB.
const MAX_UNWRITTEN_ANSWERS: usize = 32 * 1024 * 1024;

/// What an answer counts against [`MAX_UNWRITTEN_ANSWERS`]; `None` for the
/// engine's messages (bounded by the proxy's own tickets).
fn answer_cost(message: &SupervisorMessage) -> Option<usize> {
    match message {
        SupervisorMessage::Records { page, .. } => Some(
            256 + page
                .records
                .iter()
                .map(|record| record.len())
                .sum::<usize>(),
        ),
        SupervisorMessage::Metrics { .. } => Some(METRICS_COST),
        SupervisorMessage::Arrival { .. } | SupervisorMessage::ProtocolError { .. } => Some(256),
        _ => None,
    }
}

/// The budget of a `/metrics` answer (its counters and the held list: a few KiB).
const METRICS_COST: usize = 16 * 1024;

/// The bytes of answers queued for one proxy and not yet written.
#[derive(Default)]
struct UnwrittenAnswers(AtomicUsize);

impl UnwrittenAnswers {
    /// Counts `cost` more; false (and nothing counted) past the limit.
    fn take(&self, cost: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held + cost <= MAX_UNWRITTEN_ANSWERS).then_some(held + cost)
            })
            .is_ok()
    }

    fn release(&self, cost: usize) {
        self.0.fetch_sub(cost, Ordering::AcqRel);
    }
}

/// How many of the oldest held requests `/metrics` lists.
const IN_FLIGHT_SHOWN: usize = 50;

/// At most this many events to one proxy are written together.
const EVENTS_PER_WRITE: usize = 64;

/// A connection counted among those that have not finished their hello; dropping it (when
/// the hello is done, or the connection ends first) frees its place.
pub(crate) struct HelloSlot(Arc<AtomicUsize>);

impl Drop for HelloSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts proxy connections until the listener fails.
pub async fn serve(listener: UnixListener, engine: EngineHandle, shared: Arc<LinkShared>) {
    let next_conn = Arc::new(AtomicU64::new(1));
    let unwelcomed = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                tracing::warn!(error = %err, "supervisor socket accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Counted here, in accept order, so the limit holds however the tasks are scheduled.
        if unwelcomed.load(Ordering::Acquire) >= MAX_UNWELCOMED {
            tracing::debug!("too many connections without a hello; closing a new one");
            drop(stream);
            continue;
        }
        unwelcomed.fetch_add(1, Ordering::AcqRel);
        let slot = HelloSlot(unwelcomed.clone());
        let conn = next_conn.fetch_add(1, Ordering::Relaxed);
        let engine = engine.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            handle_connection(stream, conn, engine, shared, Some(slot)).await;
        });
    }
}

/// One proxy connection, from its hello to its end.
async fn handle_connection(
    stream: UnixStream,
    conn: u64,
    engine: EngineHandle,
    shared: Arc<LinkShared>,
    hello_slot: Option<HelloSlot>,
) {
    let (reader, mut writer) = stream.into_split();
    let (pid, mut reader) = match hello::greet(reader, &mut writer, &shared).await {
        Some(hello::Greeted::Welcome(pid, reader)) => (pid, reader),
        // Still counted among the connections without a welcome (its slot is held).
        Some(hello::Greeted::RecordsOnly(reader)) => {
            hello::take_records(reader, &shared).await;
            return;
        }
        None => return,
    };
    drop(hello_slot);
    let (events, events_rx) = mpsc::unbounded_channel();
    if !engine.send(Command::Connect {
        conn,
        pid,
        events: events.clone(),
    }) {
        return;
    }
    let unwritten = Arc::new(UnwrittenAnswers::default());
    let writer_task = tokio::spawn(write_events(conn, writer, events_rx, unwritten.clone()));
    let connection = Connection {
        conn,
        engine,
        shared,
        events,
        unwritten,
    };
    connection.dispatch(&mut reader).await;
    let Connection {
        engine,
        shared,
        events,
        ..
    } = connection;
    let (orphans_tx, orphans_rx) = tokio::sync::oneshot::channel();
    engine.send(Command::Disconnect {
        conn,
        orphans: orphans_tx,
    });
    drop(events);
    writer_task.abort();
    // The tickets whose `Finish` never came (the engine answers after
    // every command this connection sent before, so after every `Finish`).
    if let Ok(open) = orphans_rx.await {
        shared.orphaned(pid, open);
    }
}

/// The writer task of connection `conn`: everything queued for its proxy, in
/// order, every event already waiting in one write; the answers' bytes are
/// released from [`UnwrittenAnswers`] once written. Ends when the socket
/// fails or every sender is gone.
async fn write_events(
    conn: u64,
    mut writer: OwnedWriteHalf,
    mut events: mpsc::UnboundedReceiver<SupervisorMessage>,
    unwritten: Arc<UnwrittenAnswers>,
) {
    let mut batch = Vec::new();
    let mut out = Vec::new();
    while events.recv_many(&mut batch, EVENTS_PER_WRITE).await > 0 {
        out.clear();
        let mut answers = 0;
        for message in batch.drain(..) {
            answers += answer_cost(&message).unwrap_or(0);
            if let Err(err) = encode_frame_into(&mut out, &message) {
                tracing::warn!(conn, error = %err, "an event for a proxy could not be encoded");
            }
        }
        if writer.write_all(&out).await.is_err() {
            break;
        }
        unwritten.release(answers);
    }
}

/// A welcomed proxy connection, as its dispatch loop sees it.
struct Connection {
    conn: u64,
    engine: EngineHandle,
    shared: Arc<LinkShared>,
    /// To the writer task: the link's answers (the engine has its own
    /// sender, given with `Connect`).
    events: mpsc::UnboundedSender<SupervisorMessage>,
    unwritten: Arc<UnwrittenAnswers>,
}

impl Connection {
    /// Counts `cost` bytes of answers against [`MAX_UNWRITTEN_ANSWERS`];
    /// false when the peer has let too many go unread (the connection then
    /// ends).
    fn reserve(&self, cost: usize) -> bool {
        if self.unwritten.take(cost) {
            return true;
        }
        tracing::warn!(
            conn = self.conn,
            "a proxy left too many answers unread; closing its connection"
        );
        false
    }

    /// Queues one of the link's own answers; false as [`Connection::reserve`].
    fn answer(&self, message: SupervisorMessage) -> bool {
        if !self.reserve(answer_cost(&message).unwrap_or(0)) {
            return false;
        }
        let _ = self.events.send(message);
        true
    }

    /// Reads the proxy's frames until the connection ends (it closes, a
    /// frame cannot be read, the engine is gone, or too many answers wait
    /// unread).
    async fn dispatch(&self, reader: &mut FrameReader<OwnedReadHalf>) {
        let conn = self.conn;
        loop {
            let command = match reader.next::<ProxyMessage>().await {
                Ok(Some(ProxyMessage::Enqueue {
                    ticket,
                    model,
                    tier,
                    request,
                })) => Command::Enqueue {
                    conn,
                    ticket,
                    model,
                    tier,
                    request,
                },
                Ok(Some(ProxyMessage::HeadersReceived { ticket })) => {
                    Command::HeadersReceived { conn, ticket }
                }
                // The record is stored before the engine hears that the lease
                // ended, so a supervisor that waits for leases has every record.
                Ok(Some(ProxyMessage::Finish { ticket, record })) => {
                    self.shared.store(*record);
                    Command::Finish { conn, ticket }
                }
                Ok(Some(ProxyMessage::TicketScores { lookup, scores })) => Command::Scores {
                    conn,
                    lookup,
                    scores,
                },
                Ok(Some(ProxyMessage::SetDraining { draining })) => {
                    Command::SetDraining { conn, draining }
                }
                // Answered here, not by the engine: it is a counter, and an
                // arrival must not wait behind a model load.
                Ok(Some(ProxyMessage::Arrive { token })) => {
                    let arrival = self.shared.counters.arrive();
                    if !self.answer(SupervisorMessage::Arrival { token, arrival }) {
                        break;
                    }
                    continue;
                }
                // Accounting is answered here too: it never touches the backend.
                Ok(Some(ProxyMessage::SubmitRecord { record })) => {
                    self.shared.store(*record);
                    continue;
                }
                Ok(Some(ProxyMessage::QueryRecords {
                    query,
                    after,
                    limit,
                })) => {
                    let page = self
                        .shared
                        .accounting
                        .page(after, limit)
                        .into_records_page(&self.shared.instance_id);
                    if !self.answer(SupervisorMessage::Records { query, page }) {
                        break;
                    }
                    continue;
                }
                Ok(Some(ProxyMessage::QueryMetrics { query })) => {
                    if !self.reserve(METRICS_COST) {
                        break;
                    }
                    self.answer_metrics(query);
                    continue;
                }
                Ok(Some(ProxyMessage::Hello { .. })) => {
                    if !self.answer(SupervisorMessage::ProtocolError {
                        message: "hello was already accepted".into(),
                    }) {
                        break;
                    }
                    continue;
                }
                Ok(None) => break,
                // The frame was read whole, so the stream is still in sync.
                Err(WireError::Decode(message)) => {
                    if !self.answer(SupervisorMessage::ProtocolError {
                        message: format!("malformed frame: {message}"),
                    }) {
                        break;
                    }
                    continue;
                }
                Err(err) => {
                    tracing::debug!(conn, error = %err, "proxy connection failed");
                    break;
                }
            };
            if !self.engine.send(command) {
                break;
            }
        }
    }

    /// Answers a `/metrics` query (its budget already reserved). The counts
    /// come from the shared counters; the list of held requests from the
    /// engine, which never blocks: asked in a task of its own, so this
    /// connection goes on reading.
    fn answer_metrics(&self, query: u64) {
        let mut metrics = self.shared.metrics();
        let (engine, events) = (self.engine.clone(), self.events.clone());
        tokio::spawn(async move {
            let (reply, answer) = tokio::sync::oneshot::channel();
            if engine.send(Command::InFlight {
                limit: IN_FLIGHT_SHOWN,
                reply,
            }) && let Ok(held) = answer.await
            {
                metrics.in_flight_requests = held;
            }
            let _ = events.send(SupervisorMessage::Metrics {
                query,
                metrics: Box::new(metrics),
            });
        });
    }
}

#[cfg(test)]
mod tests;

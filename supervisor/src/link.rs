//! The private supervisor socket: one task per connected proxy.
//!
//! The connection task checks the peer's user and the versioned hello, then
//! relays frames between the proxy and the engine. Everything the engine
//! says to this proxy arrives on one channel and is written in order, so a
//! `Welcome` always precedes the first `State`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use strata_protocol::record::RequestRecord;
use strata_protocol::stats::RequestStats;
use strata_protocol::wire::{
    FrameReader, PROTOCOL_VERSION, ProxyMessage, RequestLogStats, RouterMetrics, ServiceTier,
    SubmittedRecord, SupervisorMessage, WireError, encode_frame_into, write_frame,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::accounting::Accounting;
use crate::engine::{Command, Counters, EngineHandle, OpenTicket};
use crate::sockets;

pub mod orphans;

use orphans::{Claim, Orphans};

/// A proxy that connects but says nothing is dropped after this long.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

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

/// What every proxy connection shares: the identity checks a hello must
/// pass, and the instance-wide state that must stay unique and survive
/// while proxies come and go (arrival numbers and the engine's counts, the
/// accounting store).
pub struct LinkShared {
    pub fingerprint: u64,
    /// The largest frame a proxy may send ([`Config::proxy_frame_limit`]);
    /// a longer one ends the connection when its length prefix arrives.
    ///
    /// [`Config::proxy_frame_limit`]: strata_protocol::config::Config::proxy_frame_limit
    pub proxy_frame_limit: u32,
    pub instance_id: String,
    /// Arrival numbers and router-wide counts, shared with the engine.
    pub counters: Arc<Counters>,
    pub accounting: Accounting,
    /// Substitute records for the tickets of closed connections.
    pub orphans: Orphans,
    /// Counters and histograms over every stored record.
    pub stats: std::sync::Mutex<RequestStats>,
}

impl LinkShared {
    /// Stores a finished request's record: assigns its completion `seq`
    /// (and its arrival number if the proxy could not get one), then keeps
    /// and writes the one serialized text.
    fn store(&self, submitted: SubmittedRecord) {
        let SubmittedRecord { record, tier } = submitted;
        if self.orphans.claim(&record.request_id) == Claim::Duplicate {
            tracing::info!(
                request_id = %record.request_id,
                "a record arrived after the supervisor wrote one for its lost connection; dropped"
            );
            return;
        }
        self.store_new(record, tier);
    }

    /// Stores a record no substitute can stand for.
    fn store_new(&self, mut record: RequestRecord, tier: ServiceTier) {
        if record.arrival_seq == 0 {
            record.arrival_seq = self.counters.next_arrival();
        }
        // A request that ended before the proxy could number it (its
        // handler was dropped mid-upload) still gets a unique ID.
        if record.request_id.is_empty() {
            record.request_id =
                strata_protocol::ids::request_id(&self.instance_id, record.arrival_seq);
        }
        self.stats
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .observe(&record, tier);
        self.accounting.submit(|seq| {
            record.seq = seq;
            Arc::from(record.to_json())
        });
    }

    /// A connection of proxy `pid` closed with these tickets open: writes
    /// their substitute records now if the process is gone, or once it is
    /// (while it lives, it may still send the real ones).
    fn orphaned(self: &Arc<Self>, pid: u32, open: Vec<OpenTicket>) {
        if open.is_empty() {
            return;
        }
        let ended = strata_protocol::record::unix_ms(std::time::SystemTime::now());
        let records: Vec<SubmittedRecord> = open
            .iter()
            .map(|ticket| SubmittedRecord {
                record: ticket.substitute_record(&self.instance_id, ended),
                tier: ticket.tier,
            })
            .collect();
        tracing::warn!(
            pid,
            tickets = records.len(),
            "a proxy connection closed with open tickets; the supervisor writes their records"
        );
        if !self.orphans.is_alive(pid) {
            self.orphans.written(&records);
            for SubmittedRecord { record, tier } in records {
                self.store_new(record, tier);
            }
            return;
        }
        let ids = self.orphans.wait(pid, records);
        let shared = self.clone();
        tokio::spawn(async move {
            while shared.orphans.is_alive(pid) && !shared.orphans.all_claimed(&ids) {
                tokio::time::sleep(orphans::PEER_POLL).await;
            }
            for SubmittedRecord { record, tier } in shared.orphans.take_unclaimed(&ids) {
                shared.store_new(record, tier);
            }
        });
    }

    /// At exit: writes the waiting substitutes whose proxy is gone.
    pub fn write_orphans_of_gone_proxies(&self) {
        for SubmittedRecord { record, tier } in self.orphans.take_of_gone_proxies() {
            self.store_new(record, tier);
        }
    }

    fn metrics(&self) -> RouterMetrics {
        let stats = self.accounting.stats();
        let (queue_depth, queue_depth_by_tier, in_flight) = self.counters.totals();
        let (queue_depth_by_model, proxies) = self.counters.by_model_and_proxies();
        RouterMetrics {
            queue_depth,
            queue_depth_by_tier,
            queue_depth_by_model,
            in_flight,
            proxies,
            model_loads: self.counters.loads(),
            in_flight_requests: Vec::new(),
            requests: self
                .stats
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .clone(),
            request_log: RequestLogStats {
                write_errors: stats.write_errors,
                write_drops: stats.write_drops,
                evicted: stats.evicted,
                records_in_ring: stats.records_in_ring,
                next_seq: stats.next_seq,
                instance_id: self.instance_id.clone(),
            },
        }
    }
}

/// A connection counted among those that have not finished their hello; dropping it (when
/// the hello is done, or the connection ends first) frees its place.
pub(crate) struct HelloSlot(Arc<AtomicUsize>);

impl Drop for HelloSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts proxy connections until the listener fails.
pub async fn serve(listener: UnixListener, engine: EngineHandle, identity: Arc<LinkShared>) {
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
        let identity = identity.clone();
        tokio::spawn(async move {
            handle_connection(stream, conn, engine, identity, Some(slot)).await;
        });
    }
}

async fn handle_connection(
    stream: UnixStream,
    conn: u64,
    engine: EngineHandle,
    identity: Arc<LinkShared>,
    hello_slot: Option<HelloSlot>,
) {
    let (reader, mut writer) = stream.into_split();
    let refuse = |reason: String| SupervisorMessage::Refused { reason };
    if !sockets::peer_is_allowed(reader.as_ref()) {
        let _ = write_frame(&mut writer, &refuse("permission denied: wrong user".into())).await;
        return;
    }
    // The hello's pid names the proxy in logs and `strata-ctl status`; it must be the
    // connecting process's own, as the kernel reports it.
    let peer_pid = reader
        .as_ref()
        .peer_cred()
        .ok()
        .and_then(|cred| cred.pid())
        .and_then(|pid| u32::try_from(pid).ok());
    let mut reader = FrameReader::with_limit(reader, identity.proxy_frame_limit);
    let hello = tokio::time::timeout(HELLO_TIMEOUT, reader.next::<ProxyMessage>());
    let pid = match hello.await {
        Ok(Ok(Some(ProxyMessage::Hello {
            protocol_version,
            fingerprint,
            pid,
        }))) => {
            if protocol_version != PROTOCOL_VERSION {
                let reason = format!(
                    "protocol version {protocol_version} is not supported (supervisor speaks {PROTOCOL_VERSION}); run matching strata-proxy and strata-supervisor builds"
                );
                let _ = write_frame(&mut writer, &refuse(reason)).await;
                return;
            }
            if let Some(peer_pid) = peer_pid
                && peer_pid != pid
            {
                let reason =
                    format!("the hello's pid {pid} is not the connecting process's ({peer_pid})");
                let _ = write_frame(&mut writer, &refuse(reason)).await;
                return;
            }
            if fingerprint != identity.fingerprint {
                let reason = "config fingerprint differs: the proxy and the supervisor were started with different configurations (models or settings); restart both with the same config".to_string();
                let _ = write_frame(&mut writer, &refuse(reason)).await;
                return;
            }
            pid
        }
        Ok(Ok(Some(_))) => {
            let _ = write_frame(&mut writer, &refuse("expected a hello first".into())).await;
            return;
        }
        Ok(Ok(None)) => return,
        Ok(Err(err)) => {
            tracing::debug!(error = %err, "bad hello");
            let _ = write_frame(&mut writer, &refuse(format!("bad hello: {err}"))).await;
            return;
        }
        Err(_) => return,
    };
    let welcome = SupervisorMessage::Welcome {
        protocol_version: PROTOCOL_VERSION,
        instance_id: identity.instance_id.clone(),
        supervisor_pid: std::process::id(),
    };
    if write_frame(&mut writer, &welcome).await.is_err() {
        return;
    }
    drop(hello_slot);
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    if !engine.send(Command::Connect {
        conn,
        pid,
        events: events_tx.clone(),
    }) {
        return;
    }
    let unwritten = Arc::new(UnwrittenAnswers::default());
    let written = unwritten.clone();
    let writer_task = tokio::spawn(async move {
        // Every event already waiting goes out in one write.
        let mut batch = Vec::new();
        let mut out = Vec::new();
        while events_rx.recv_many(&mut batch, EVENTS_PER_WRITE).await > 0 {
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
            written.release(answers);
        }
    });
    // Queues one of the link's own answers; false when the peer has let too
    // many go unread (the connection then ends).
    let answer = |message: SupervisorMessage| -> bool {
        if !unwritten.take(answer_cost(&message).unwrap_or(0)) {
            tracing::warn!(
                conn,
                "a proxy left too many answers unread; closing its connection"
            );
            return false;
        }
        let _ = events_tx.send(message);
        true
    };
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
                identity.store(*record);
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
                let arrival = identity.counters.arrive();
                if !answer(SupervisorMessage::Arrival { token, arrival }) {
                    break;
                }
                continue;
            }
            // Accounting is answered here too: it never touches the backend.
            Ok(Some(ProxyMessage::SubmitRecord { record })) => {
                identity.store(*record);
                continue;
            }
            Ok(Some(ProxyMessage::QueryRecords {
                query,
                after,
                limit,
            })) => {
                let page = identity
                    .accounting
                    .page(after, limit)
                    .into_records_page(&identity.instance_id);
                if !answer(SupervisorMessage::Records { query, page }) {
                    break;
                }
                continue;
            }
            Ok(Some(ProxyMessage::QueryMetrics { query })) => {
                // The counts come from the shared counters; the list of held
                // requests from the engine, which never blocks: asked in a
                // task of its own, so this connection goes on reading.
                if !unwritten.take(METRICS_COST) {
                    tracing::warn!(
                        conn,
                        "a proxy left too many answers unread; closing its connection"
                    );
                    break;
                }
                let mut metrics = identity.metrics();
                let (engine, events) = (engine.clone(), events_tx.clone());
                tokio::spawn(async move {
                    let (reply, answer) = tokio::sync::oneshot::channel();
                    if engine.send(Command::InFlight {
                        limit: IN_FLIGHT_SHOWN,
                        reply,
                    }) && let Ok(held) = answer.await
                    {
                        metrics.in_flight_requests = held;
                    }
                    let _ = events.send(SupervisorMessage::Metrics { query, metrics });
                });
                continue;
            }
            Ok(Some(ProxyMessage::Hello { .. })) => {
                if !answer(SupervisorMessage::ProtocolError {
                    message: "hello was already accepted".into(),
                }) {
                    break;
                }
                continue;
            }
            Ok(None) => break,
            // The frame was read whole, so the stream is still in sync.
            Err(WireError::Decode(message)) => {
                if !answer(SupervisorMessage::ProtocolError {
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
        if !engine.send(command) {
            break;
        }
    }
    let (orphans_tx, orphans_rx) = tokio::sync::oneshot::channel();
    engine.send(Command::Disconnect {
        conn,
        orphans: orphans_tx,
    });
    drop(events_tx);
    writer_task.abort();
    // The tickets whose `Finish` never came (the engine answers after
    // every command this connection sent before, so after every `Finish`).
    if let Ok(open) = orphans_rx.await {
        identity.orphaned(pid, open);
    }
}

#[cfg(test)]
mod tests;

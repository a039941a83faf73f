//! [`LinkShared`]: what every proxy connection shares, and the accounting
//! it does for them.
//!
//! Records are stored here (numbered, counted for `/metrics`, written once),
//! so a record is stored the same way whichever connection brought it, and
//! the substitute records of a closed connection's open tickets are made
//! here too.

use std::sync::Arc;

use strata_os::WarnLimit;

use strata_protocol::record::RequestRecord;
use strata_protocol::stats::RequestStats;
use strata_protocol::wire::{
    ProcessFigures, RefuseReason, RequestLogStats, RouterMetrics, ServiceTier, SubmittedRecord,
};

use super::orphans::{self, Claim, Orphans};
use crate::accounting::Accounting;
use crate::counters::Counters;
use crate::engine::OpenTicket;

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
    /// Refused hellos: a proxy with another config or build says hello
    /// again every few seconds while it waits, so they are logged rate
    /// limited ([`REFUSALS_REPORTED_EVERY`]).
    pub refusals: std::sync::Mutex<WarnLimit>,
}

/// How often refused hellos are reported (the first at once).
pub const REFUSALS_REPORTED_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl LinkShared {
    /// A hello was refused for `reason`: logged, rate limited.
    pub(super) fn refused(&self, reason: &RefuseReason) {
        let mut refusals = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = refusals.note(std::time::Instant::now()) {
            tracing::warn!(%reason, refused = count, "refused a proxy's hello");
        }
    }

    /// Stores a finished request's record: assigns its completion `seq`
    /// (and its arrival number if the proxy could not get one), then keeps
    /// and writes the one serialized text.
    pub(super) fn store(&self, submitted: SubmittedRecord) {
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
    pub(super) fn orphaned(self: &Arc<Self>, pid: u32, open: Vec<OpenTicket>) {
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

    /// The router-wide figures of `/metrics`, from the shared counters and
    /// the store; the held requests are the engine's to add.
    pub(super) fn metrics(&self) -> RouterMetrics {
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
            model_switches: self.counters.switches(),
            prefetch: self.counters.prefetch(),
            in_flight_requests: Vec::new(),
            requests: self
                .stats
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .clone(),
            supervisor_process: own_process_figures(),
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

/// This process's `process_*` figures, for the proxy to export beside its
/// own.
fn own_process_figures() -> ProcessFigures {
    let usage = strata_os::own_process_usage();
    ProcessFigures {
        cpu_seconds: usage.cpu_seconds,
        resident_memory_bytes: usage.resident_memory_bytes,
        virtual_memory_bytes: usage.virtual_memory_bytes,
        open_fds: usage.open_fds,
        max_fds: usage.max_fds,
        start_time_seconds: usage.start_time_seconds,
    }
}

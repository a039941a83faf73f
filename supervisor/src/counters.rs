//! The router-wide counts: the engine publishes its queue, lease and load
//! counts after every change, the weights prefetch writes its own figures,
//! and the link reads them all without waiting for the engine. A leaf that
//! engine, link and prefetch import, so no part reaches into another.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use strata_protocol::wire::{ArrivalInfo, PrefetchFigures};

/// Router-wide counts, published by the engine after every change so the
/// link can answer arrivals and `/metrics` without waiting for the engine.
#[derive(Debug, Default)]
pub struct Counters {
    /// The last arrival number handed out; the next is one more.
    arrivals: AtomicU64,
    queue_depth: AtomicU64,
    queue_by_tier: [AtomicU64; 3],
    in_flight: AtomicU64,
    /// Waiting tickets per configured model.
    queue_by_model: Mutex<BTreeMap<String, u64>>,
    proxies: AtomicU64,
    /// Finished loads by (model, outcome).
    loads: Mutex<BTreeMap<(String, String), u64>>,
    /// Switches and unloads by reason (`SwitchReason::as_str`).
    switches: Mutex<BTreeMap<String, u64>>,
    /// The weights prefetch's figures per model (its worker thread and
    /// the residency check at each load's start write them).
    prefetch: Mutex<BTreeMap<String, PrefetchFigures>>,
}

impl Counters {
    /// Numbers one more arrival and snapshots the counts it found.
    pub fn arrive(&self) -> ArrivalInfo {
        ArrivalInfo {
            arrival_seq: self.next_arrival(),
            queue_depth: self.queue_depth.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
        }
    }

    /// The next arrival number alone (for a record that has none).
    pub fn next_arrival(&self) -> u64 {
        self.arrivals.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Waiting requests, by tier, and admitted ones.
    pub fn totals(&self) -> (u64, [u64; 3], u64) {
        (
            self.queue_depth.load(Ordering::Relaxed),
            [0, 1, 2].map(|i| self.queue_by_tier[i].load(Ordering::Relaxed)),
            self.in_flight.load(Ordering::Relaxed),
        )
    }

    pub(super) fn publish(
        &self,
        by_tier: [u64; 3],
        in_flight: u64,
        count_by_model: impl FnOnce(&mut BTreeMap<String, u64>),
        proxies: u64,
    ) {
        for (slot, count) in self.queue_by_tier.iter().zip(by_tier) {
            slot.store(count, Ordering::Relaxed);
        }
        self.queue_depth
            .store(by_tier.iter().sum(), Ordering::Relaxed);
        self.in_flight.store(in_flight, Ordering::Relaxed);
        count_by_model(&mut lock(&self.queue_by_model));
        self.proxies.store(proxies, Ordering::Relaxed);
    }

    /// Waiting tickets per model, and connected proxies.
    pub fn by_model_and_proxies(&self) -> (BTreeMap<String, u64>, u64) {
        (
            lock(&self.queue_by_model).clone(),
            self.proxies.load(Ordering::Relaxed),
        )
    }

    /// One finished load of `model`: `verified`, `failed`, `cancelled` or
    /// `abandoned`.
    pub(super) fn count_load(&self, model: &str, outcome: &str) {
        *lock(&self.loads)
            .entry((model.to_owned(), outcome.to_owned()))
            .or_default() += 1;
    }

    /// Finished loads so far.
    pub fn loads(&self) -> BTreeMap<(String, String), u64> {
        lock(&self.loads).clone()
    }

    /// One switch or unload, for `reason`.
    pub(super) fn count_switch(&self, reason: &str) {
        *lock(&self.switches).entry(reason.to_owned()).or_default() += 1;
    }

    /// Switches and unloads so far, by reason.
    pub fn switches(&self) -> BTreeMap<String, u64> {
        lock(&self.switches).clone()
    }

    /// The prefetch of `model` read `bytes` more in `seconds`.
    pub fn count_prefetched(&self, model: &str, bytes: u64, seconds: f64) {
        let mut figures = lock(&self.prefetch);
        let entry = figures.entry(model.to_owned()).or_default();
        entry.bytes += bytes;
        entry.seconds += seconds;
    }

    /// The fraction of `model`'s weights resident when its load started.
    pub fn set_resident_at_load(&self, model: &str, fraction: f64) {
        lock(&self.prefetch)
            .entry(model.to_owned())
            .or_default()
            .resident_at_load = Some(fraction);
    }

    /// The prefetch figures so far.
    pub fn prefetch(&self) -> BTreeMap<String, PrefetchFigures> {
        lock(&self.prefetch).clone()
    }
}

/// Every change under these locks is one assignment, so a poisoned lock
/// still holds consistent data.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poison| poison.into_inner())
}

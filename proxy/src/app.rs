//! State shared by every request handler.
//!
//! Counters are atomics because many request tasks update them and
//! `/metrics` reads them without waiting; the last-stream figures sit
//! behind a std `Mutex` that is only held to copy two numbers (never across
//! an `.await`).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use strata_protocol::config::Config;
use strata_protocol::wire::ServiceTier;
use tokio::sync::Semaphore;

use crate::link::SupervisorLink;

/// Tier order used for arrays indexed by tier.
pub const TIERS: [ServiceTier; 3] = [
    ServiceTier::Priority,
    ServiceTier::Default,
    ServiceTier::Flex,
];

fn tier_index(tier: ServiceTier) -> usize {
    match tier {
        ServiceTier::Priority => 0,
        ServiceTier::Default => 1,
        ServiceTier::Flex => 2,
    }
}

/// Figures of the most recent streamed request that produced tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LastStream {
    pub ttft_ms: Option<u64>,
    /// Completion tokens per second of observed generation; `None` when the
    /// stream carried no completion token usage.
    pub decode_tokens_per_second: Option<f64>,
}

/// Live request counts.
#[derive(Debug, Default)]
pub struct Counters {
    /// Requests waiting for admission, by tier.
    queued: [AtomicUsize; 3],
    /// Admitted requests (holding a lease: loading, waiting for headers or
    /// streaming).
    in_flight: AtomicUsize,
    /// Local fallback numbering when the supervisor cannot allocate one.
    pub unlinked_requests: AtomicU64,
}

impl Counters {
    pub fn queued_total(&self) -> usize {
        self.queued.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    pub fn queued_by_tier(&self) -> [usize; 3] {
        [0, 1, 2].map(|i| self.queued[i].load(Ordering::Relaxed))
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// Counts one request in a state for as long as the guard lives.
#[derive(Debug)]
pub struct CountGuard {
    app: Arc<App>,
    slot: Slot,
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Queued(usize),
    InFlight,
}

impl CountGuard {
    pub fn queued(app: &Arc<App>, tier: ServiceTier) -> CountGuard {
        let index = tier_index(tier);
        app.counters.queued[index].fetch_add(1, Ordering::Relaxed);
        CountGuard {
            app: app.clone(),
            slot: Slot::Queued(index),
        }
    }

    pub fn in_flight(app: &Arc<App>) -> CountGuard {
        app.counters.in_flight.fetch_add(1, Ordering::Relaxed);
        CountGuard {
            app: app.clone(),
            slot: Slot::InFlight,
        }
    }
}

impl Drop for CountGuard {
    fn drop(&mut self) {
        let counter = match self.slot {
            Slot::Queued(index) => &self.app.counters.queued[index],
            Slot::InFlight => &self.app.counters.in_flight,
        };
        counter.fetch_sub(1, Ordering::Relaxed);
    }
}

pub struct App {
    pub config: Arc<Config>,
    pub link: SupervisorLink,
    pub counters: Counters,
    /// Legacy mode: active plus waiting requests (`max_pending`); a request
    /// that finds no permit gets 429.
    pub pending: Option<Arc<Semaphore>>,
    /// Wait-first mode: requests dispatched upstream (`max_pending`).
    pub dispatch: Option<Arc<Semaphore>>,
    /// Both modes: generations dispatched at once (`cache_max_active`).
    pub cache_active: Option<Arc<Semaphore>>,
    last_stream: Mutex<LastStream>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").finish_non_exhaustive()
    }
}

impl App {
    pub fn new(config: Arc<Config>, link: SupervisorLink) -> Arc<App> {
        let max_pending = config.scheduling.max_pending;
        let wait_first = config.scheduling.wait_when_busy;
        let semaphore = |permits: usize| Some(Arc::new(Semaphore::new(permits)));
        Arc::new(App {
            pending: if wait_first {
                None
            } else {
                semaphore(max_pending)
            },
            dispatch: if wait_first {
                semaphore(max_pending)
            } else {
                None
            },
            cache_active: config.cache_active_limit().and_then(semaphore),
            config,
            link,
            counters: Counters::default(),
            last_stream: Mutex::new(LastStream::default()),
        })
    }

    pub fn last_stream(&self) -> LastStream {
        *self
            .last_stream
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    pub fn set_last_stream(&self, figures: LastStream) {
        *self
            .last_stream
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = figures;
    }
}

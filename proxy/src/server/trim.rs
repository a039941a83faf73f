//! Giving memory back after a burst.
//!
//! Every open client connection costs the proxy about 29 KiB (hyper's buffers,
//! the request task, its waiting ticket). All of it is freed when the
//! connection ends, but glibc keeps freed heap memory for reuse, and a heap
//! fragmented by thousands of connections that ended in another order than
//! they began cannot shrink from its top: after 2000 waiting clients the
//! proxy stayed at about 60 MB with nothing left to serve
//! (docs/benchmarks.md#memory-after-load). So a task counts open
//! connections, and when their number
//! has been high and has fallen back, it hands the free memory back
//! ([`strata_os::release_free_memory`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How often the task looks.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// A burst worth trimming after: this many connections open at once (about
/// 7 MiB at ~29 KiB each).
const BURST: usize = 256;

/// The burst is over when at most this many connections are still open
/// (idle keep-alive clients may hold a few for good).
const SETTLED: usize = 16;

/// Open client connections, and the most open at once since the last trim.
#[derive(Debug, Default)]
pub struct ConnectionGauge {
    open: AtomicUsize,
    peak: AtomicUsize,
}

/// One open connection; dropping it closes it in the count.
pub struct OpenConnection(Arc<ConnectionGauge>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnectionGauge {
    pub fn opened(self: &Arc<Self>) -> OpenConnection {
        let open = self.open.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(open, Ordering::Relaxed);
        OpenConnection(self.clone())
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Whether a burst has ended since the last trim; if so, starts counting
    /// the next one from now.
    fn burst_ended(&self) -> bool {
        let open = self.open();
        if self.peak.load(Ordering::Relaxed) >= BURST && open <= SETTLED {
            self.peak.store(open, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// Runs for the life of the proxy: after each burst, hands free memory back.
pub async fn trim_after_bursts(gauge: Arc<ConnectionGauge>) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if gauge.burst_ended() {
            strata_os::release_free_memory();
            tracing::debug!("a burst of connections ended: free memory handed back");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_ends_once_when_the_connections_fall_back() {
        let gauge = Arc::new(ConnectionGauge::default());
        let few: Vec<OpenConnection> = (0..SETTLED).map(|_| gauge.opened()).collect();
        assert!(!gauge.burst_ended(), "no burst yet");
        let many: Vec<OpenConnection> = (0..BURST).map(|_| gauge.opened()).collect();
        assert!(!gauge.burst_ended(), "still in the burst");
        drop(many);
        assert_eq!(gauge.open(), SETTLED);
        assert!(gauge.burst_ended(), "the burst is over");
        assert!(!gauge.burst_ended(), "and counted once");
        drop(few);
        assert_eq!(gauge.open(), 0);
    }
}

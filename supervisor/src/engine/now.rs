//! The engine's clock: read once per event, so every decision an event
//! leads to sees the same instant.

use std::time::SystemTime;

use strata_protocol::record::unix_ms;
use tokio::time::Instant;

/// The clock, read once per event: the monotonic instant every timer uses
/// and the wall clock of records and ages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub at: Instant,
    pub unix_ms: u64,
}

impl Now {
    pub fn read() -> Now {
        Now {
            at: Instant::now(),
            unix_ms: unix_ms(SystemTime::now()),
        }
    }
}

/// Sleeps until `at`; forever without it.
pub async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

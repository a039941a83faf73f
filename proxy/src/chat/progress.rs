//! What a waiting streaming client is told: the SSE comments sent while a
//! wait-first stream waits for its lease say why, one line each, e.g.
//! `: queued for qwen3.6-35b-a3b-q4_k_s (priority), 2 ahead at arrival, 12s`
//! or `: loading qwen3.8-flash-next-q4_k_m, 12s, usually 20s` (the median
//! of the model's last loads; before the first, the limit:
//! `23s of 120s`).
//!
//! They hold only the configured model ID, the tier, counts and seconds:
//! never a prompt, a profile's contents or backend text. They are still
//! comments (clients skip them), sent on the keepalive clock (at least every
//! 5 s), only between frames, and counted in `response_bytes` like any byte.

use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use strata_protocol::wire::{LoadPhase, ServiceTier, typical_load_seconds};

/// Where a waiting request is; shared between the admission (which learns
/// it from the ticket's events) and the keepalive clock (which says it).
#[derive(Debug)]
pub struct WaitProgress {
    model: String,
    tier: ServiceTier,
    /// Waiting tickets when it arrived (the supervisor's count).
    ahead_at_arrival: u64,
    arrived: Instant,
    /// `startup_ms` in whole seconds: what a load is bounded by.
    startup_s: u64,
    stage: Mutex<Stage>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    Queued,
    /// Admitted to a load; `elapsed_ms` of it at `at`.
    Loading {
        phase: Option<LoadPhase>,
        elapsed_ms: u64,
        /// How long the model's loads usually take, once learned.
        typical_ms: Option<u64>,
        at: Instant,
    },
    /// Granted: the request went to the backend, which has not answered.
    Sent {
        at: Instant,
    },
}

impl WaitProgress {
    pub fn new(
        model: &str,
        tier: ServiceTier,
        ahead_at_arrival: u64,
        arrived: Instant,
        startup_ms: u64,
    ) -> WaitProgress {
        WaitProgress {
            model: model.to_owned(),
            tier,
            ahead_at_arrival,
            arrived,
            startup_s: startup_ms.div_ceil(1000),
            stage: Mutex::new(Stage::Queued),
        }
    }

    fn set(&self, stage: Stage) {
        *self
            .stage
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = stage;
    }

    fn stage(&self) -> Stage {
        *self
            .stage
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// The ticket left the queue for a load.
    pub fn admitted(&self, now: Instant) {
        if self.stage() == Stage::Queued {
            self.set(Stage::Loading {
                phase: None,
                elapsed_ms: 0,
                typical_ms: None,
                at: now,
            });
        }
    }

    /// The load moved on.
    pub fn load_progress(
        &self,
        phase: LoadPhase,
        elapsed_ms: u64,
        typical_ms: Option<u64>,
        now: Instant,
    ) {
        self.set(Stage::Loading {
            phase: Some(phase),
            elapsed_ms,
            typical_ms,
            at: now,
        });
    }

    /// The lease was granted and the request sent.
    pub fn sent(&self, now: Instant) {
        self.set(Stage::Sent { at: now });
    }

    /// The comment line for `now`, without the `: ` and the blank line.
    fn line(&self, now: Instant) -> String {
        let secs = |from: Instant| now.saturating_duration_since(from).as_secs();
        match self.stage() {
            Stage::Queued => {
                let waited = secs(self.arrived);
                match self.ahead_at_arrival {
                    0 => format!(
                        "queued for {} ({}), {waited}s",
                        self.model,
                        self.tier.as_str()
                    ),
                    ahead => format!(
                        "queued for {} ({}), {ahead} ahead at arrival, {waited}s",
                        self.model,
                        self.tier.as_str()
                    ),
                }
            }
            Stage::Loading {
                phase,
                elapsed_ms,
                typical_ms,
                at,
            } => {
                let elapsed = (elapsed_ms / 1000) + secs(at);
                match (phase, typical_ms) {
                    (Some(LoadPhase::StoppingOldBackend), _) => format!(
                        "stopping the previous model to load {}, {elapsed}s",
                        self.model
                    ),
                    (_, Some(typical)) => format!(
                        "loading {}, {elapsed}s, usually {}s",
                        self.model,
                        typical_load_seconds(typical)
                    ),
                    (_, None) => {
                        format!("loading {}, {elapsed}s of {}s", self.model, self.startup_s)
                    }
                }
            }
            Stage::Sent { at } => format!("waiting for {} to answer, {}s", self.model, secs(at)),
        }
    }

    /// One SSE comment frame saying where the request is.
    pub fn comment(&self, now: Instant) -> Bytes {
        Bytes::from(format!(": {}\n\n", self.line(now)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn each_stage_says_why_in_one_comment_line() {
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let progress = WaitProgress::new("m-q4", ServiceTier::Priority, 2, start, 120_000);
        assert_eq!(
            progress.comment(at(12)),
            ": queued for m-q4 (priority), 2 ahead at arrival, 12s\n\n"
        );
        progress.admitted(at(13));
        assert_eq!(progress.comment(at(15)), ": loading m-q4, 2s of 120s\n\n");
        progress.load_progress(LoadPhase::StoppingOldBackend, 1500, None, at(15));
        assert_eq!(
            progress.comment(at(16)),
            ": stopping the previous model to load m-q4, 2s\n\n"
        );
        progress.load_progress(LoadPhase::WaitingForReadiness, 23_400, None, at(20));
        assert_eq!(progress.comment(at(20)), ": loading m-q4, 23s of 120s\n\n");
        // A late Admitted does not undo the progress.
        progress.admitted(at(21));
        assert_eq!(progress.comment(at(21)), ": loading m-q4, 24s of 120s\n\n");
        progress.sent(at(30));
        assert_eq!(
            progress.comment(at(34)),
            ": waiting for m-q4 to answer, 4s\n\n"
        );
        // A model whose loads were learned: the usual time, not the limit.
        let learned = WaitProgress::new("m-q4", ServiceTier::Default, 0, start, 120_000);
        learned.admitted(at(1));
        learned.load_progress(LoadPhase::WaitingForReadiness, 11_800, Some(19_600), at(12));
        assert_eq!(
            learned.comment(at(12)),
            ": loading m-q4, 11s, usually 20s\n\n"
        );
        learned.load_progress(LoadPhase::StoppingOldBackend, 200, Some(19_600), at(1));
        assert_eq!(
            learned.comment(at(2)),
            ": stopping the previous model to load m-q4, 1s\n\n"
        );
        let alone = WaitProgress::new("m", ServiceTier::Default, 0, start, 1);
        assert_eq!(alone.comment(at(5)), ": queued for m (default), 5s\n\n");
        // Every comment is one line ending a frame.
        let text = String::from_utf8(progress.comment(at(40)).to_vec()).unwrap();
        assert_eq!(text.matches('\n').count(), 2);
        assert!(text.starts_with(": ") && text.ends_with("\n\n"));
    }
}

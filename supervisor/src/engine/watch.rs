//! What the probes of the serving backend add up to (`backend_probe_ms`).
//!
//! A probe task (started through the engine's `OpRunner`) asks the
//! backend's `GET /health` on a connection of its own every interval,
//! bounded in time (`crate::backend::probe_once`), and reports each outcome
//! to the engine; it never blocks the engine and creates no request or
//! record. This part is data only: for the one serving instance, when the
//! last good answer came, the misses in a row, and whether the backend is
//! `unresponsive` (and why). A report about another instance is stale. What
//! the engine does about it is the watchdog's (`watchdog.rs`).

use strata_protocol::wire::BackendInstance;
use tokio::time::Instant;

use crate::backend::ProbeOutcome;

/// What an outcome changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Nothing,
    /// The backend just became unresponsive, for this cause.
    Unresponsive(String),
    /// It answers again after being unresponsive.
    Recovered,
}

/// The probe state of the serving instance.
#[derive(Debug, Default)]
pub struct BackendWatch {
    instance: Option<BackendInstance>,
    /// When the last good probe answered (or the backend was verified).
    last_good: Option<Instant>,
    misses: u32,
    unresponsive: Option<String>,
}

impl BackendWatch {
    /// A newly verified, probed `instance`: good as of `now`.
    pub fn start(&mut self, instance: BackendInstance, now: Instant) {
        self.stop();
        self.instance = Some(instance);
        self.last_good = Some(now);
    }

    /// The instance is gone (stopped, died, replaced) or not probed.
    pub fn stop(&mut self) {
        self.instance = None;
        self.last_good = None;
        self.misses = 0;
        self.unresponsive = None;
    }

    /// Takes one probe's outcome; `misses` in a row make it unresponsive.
    pub fn observe(
        &mut self,
        instance: BackendInstance,
        outcome: ProbeOutcome,
        misses: u32,
        now: Instant,
    ) -> Verdict {
        if self.instance != Some(instance) {
            return Verdict::Nothing;
        }
        match outcome {
            ProbeOutcome::Good => {
                self.last_good = Some(now);
                self.misses = 0;
                if self.unresponsive.take().is_some() {
                    Verdict::Recovered
                } else {
                    Verdict::Nothing
                }
            }
            ProbeOutcome::Miss => {
                self.misses = self.misses.saturating_add(1);
                if self.misses >= misses && self.unresponsive.is_none() {
                    let cause = format!(
                        "no answer to GET /health for {} probes in a row",
                        self.misses
                    );
                    self.unresponsive = Some(cause.clone());
                    Verdict::Unresponsive(cause)
                } else {
                    Verdict::Nothing
                }
            }
            ProbeOutcome::Changed(cause) => {
                if self.unresponsive.as_deref() == Some(cause.as_str()) {
                    return Verdict::Nothing;
                }
                self.unresponsive = Some(cause.clone());
                Verdict::Unresponsive(cause)
            }
        }
    }

    /// Why the serving instance is unresponsive, if it is.
    pub fn unresponsive(&self, serving: Option<BackendInstance>) -> Option<&str> {
        (self.instance.is_some() && self.instance == serving)
            .then_some(self.unresponsive.as_deref())
            .flatten()
    }

    /// How long ago the serving instance last answered well.
    pub fn last_good_age_ms(&self, serving: Option<BackendInstance>, now: Instant) -> Option<u64> {
        if self.instance.is_none() || self.instance != serving {
            return None;
        }
        self.last_good
            .map(|at| now.saturating_duration_since(at).as_millis() as u64)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn instance(epoch: u64) -> BackendInstance {
        BackendInstance { epoch, pid: 42 }
    }

    #[tokio::test(start_paused = true)]
    async fn misses_in_a_row_make_it_unresponsive_and_a_good_answer_clears_it() {
        let now = Instant::now();
        let mut watch = BackendWatch::default();
        watch.start(instance(1), now);
        let serving = Some(instance(1));
        assert_eq!(
            watch.observe(instance(1), ProbeOutcome::Miss, 3, now),
            Verdict::Nothing
        );
        // A good answer between misses starts the count again.
        assert_eq!(
            watch.observe(instance(1), ProbeOutcome::Good, 3, now),
            Verdict::Nothing
        );
        for _ in 0..2 {
            assert_eq!(
                watch.observe(instance(1), ProbeOutcome::Miss, 3, now),
                Verdict::Nothing
            );
        }
        let later = now + Duration::from_secs(15);
        let verdict = watch.observe(instance(1), ProbeOutcome::Miss, 3, later);
        assert_eq!(
            verdict,
            Verdict::Unresponsive("no answer to GET /health for 3 probes in a row".into())
        );
        assert!(watch.unresponsive(serving).is_some());
        assert_eq!(watch.last_good_age_ms(serving, later), Some(15_000));
        // Said once; more misses change nothing.
        assert_eq!(
            watch.observe(instance(1), ProbeOutcome::Miss, 3, later),
            Verdict::Nothing
        );
        // A stale report (another instance) is ignored.
        assert_eq!(
            watch.observe(instance(2), ProbeOutcome::Good, 3, later),
            Verdict::Nothing
        );
        assert_eq!(
            watch.observe(instance(1), ProbeOutcome::Good, 3, later),
            Verdict::Recovered
        );
        assert_eq!(watch.unresponsive(serving), None);
        assert_eq!(watch.last_good_age_ms(serving, later), Some(0));
    }

    #[tokio::test(start_paused = true)]
    async fn another_model_or_not_loaded_is_unresponsive_at_once() {
        let now = Instant::now();
        let mut watch = BackendWatch::default();
        watch.start(instance(1), now);
        let changed = ProbeOutcome::Changed("/health says loaded: false".into());
        assert_eq!(
            watch.observe(instance(1), changed.clone(), 3, now),
            Verdict::Unresponsive("/health says loaded: false".into())
        );
        assert_eq!(
            watch.observe(instance(1), changed, 3, now),
            Verdict::Nothing
        );
        // Nothing is reported about an instance that no longer serves.
        assert_eq!(watch.unresponsive(Some(instance(2))), None);
        watch.stop();
        assert_eq!(watch.unresponsive(Some(instance(1))), None);
    }
}

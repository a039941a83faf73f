//! The watchdog of the serving backend, as pure steps: what the engine does
//! about its liveness probes (`backend_probe_ms`, `backend_probe_misses`,
//! `backend_unresponsive_action`).
//!
//! Each probe's outcome goes through [`Watchdog::observe`]: the proxies
//! learn of every good answer (their `/health` and gauge age from the last
//! one) and of every change of verdict, and the log says when the backend
//! becomes unresponsive or recovers. With the action `"report"` that is
//! all. With `"restart"` the unresponsive instance's leases are revoked
//! once, and from then on every scheduling round asks [`Watchdog::step`]:
//! while the revoked leases last nothing is scheduled, and once they have
//! ended the backend is stopped and the queue loads it again. That wait and
//! stop is the operator's `off` path ([`unload_when_quiet`]), taken here
//! without turning routing off. None of these steps does anything itself:
//! each returns the [`WatchdogAction`]s the engine carries out, in order.

use strata_protocol::config::UnresponsiveAction;
use strata_protocol::wire::BackendInstance;
use tokio::time::Instant;

use super::operator::{Unload, unload_when_quiet};
use super::watch::{BackendWatch, Verdict};
use crate::backend::ProbeOutcome;

/// What the watchdog needs to know of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The verified instance that serves, if one does.
    pub serving: Option<BackendInstance>,
    /// The leases that exist (revoked ones too, until their request ends).
    pub leases: usize,
}

/// What the engine does for the watchdog, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchdogAction {
    /// Send the proxies the router state: the time of the last good probe
    /// or the verdict changed.
    BroadcastState,
    /// The backend `pid` answers its probes again (a log line).
    Recovered { pid: u32 },
    /// The backend `pid` just became unresponsive, for `cause` (a log line).
    Unresponsive { pid: u32, cause: String },
    /// `restart`: ask every proxy to end its leases on the unresponsive
    /// backend.
    RevokeAll,
    /// `restart`: the revoked leases have not all ended; schedule nothing
    /// this round (no grant to the unresponsive backend, no load, no unload).
    Hold,
    /// `restart`: the revoked leases have ended; stop the backend (the
    /// queue loads it again).
    StopBackend,
}

/// The probes of the serving instance and the restart they may have asked
/// for.
#[derive(Debug)]
pub struct Watchdog {
    watch: BackendWatch,
    /// `backend_probe_misses`: misses in a row that make it unresponsive.
    misses: u32,
    /// `backend_unresponsive_action`.
    action: UnresponsiveAction,
    /// The unresponsive instance whose leases were revoked and which is
    /// stopped once they have ended.
    restart: Option<BackendInstance>,
}

impl Watchdog {
    pub fn new(misses: u32, action: UnresponsiveAction) -> Watchdog {
        Watchdog {
            watch: BackendWatch::default(),
            misses,
            action,
            restart: None,
        }
    }

    /// What the probes found, for the status and the router state.
    pub fn watch(&self) -> &BackendWatch {
        &self.watch
    }

    /// `instance` was just verified; `probed` unless `backend_probe_ms` is 0.
    pub fn verified(&mut self, instance: BackendInstance, probed: bool, now: Instant) {
        if probed {
            self.watch.start(instance, now);
        } else {
            self.watch.stop();
        }
    }

    /// The serving instance stops (a switch, an unload, its death): its
    /// probes end. A restart already asked for still waits for its leases.
    pub fn backend_gone(&mut self) {
        self.watch.stop();
    }

    /// One probe of `instance` found `outcome`.
    pub fn observe(
        &mut self,
        instance: BackendInstance,
        outcome: ProbeOutcome,
        facts: &Facts,
        now: Instant,
    ) -> Vec<WatchdogAction> {
        if facts.serving != Some(instance) {
            return Vec::new();
        }
        let good = outcome == ProbeOutcome::Good;
        let pid = instance.pid;
        match self.watch.observe(instance, outcome, self.misses, now) {
            // The proxies learn the new time of the last good probe (a state
            // per probe interval): without it their `/health` and gauge would
            // age from the last change.
            Verdict::Nothing if good => vec![WatchdogAction::BroadcastState],
            Verdict::Nothing => Vec::new(),
            Verdict::Recovered => vec![
                WatchdogAction::Recovered { pid },
                WatchdogAction::BroadcastState,
            ],
            Verdict::Unresponsive(cause) => {
                let mut actions = vec![WatchdogAction::Unresponsive { pid, cause }];
                if self.action == UnresponsiveAction::Restart && self.restart.is_none() {
                    self.restart = Some(instance);
                    actions.push(WatchdogAction::RevokeAll);
                }
                actions.push(WatchdogAction::BroadcastState);
                actions
            }
        }
    }

    /// A scheduling round: holds it while a restart waits for its revoked
    /// leases, then stops the backend once.
    pub fn step(&mut self, facts: &Facts) -> Vec<WatchdogAction> {
        let Some(instance) = self.restart else {
            return Vec::new();
        };
        let serving = facts.serving.filter(|serving| *serving == instance);
        match unload_when_quiet(facts.leases, serving) {
            Unload::Wait => vec![WatchdogAction::Hold],
            Unload::Stop(_) => {
                self.restart = None;
                vec![WatchdogAction::StopBackend]
            }
            // It died or was stopped meanwhile: nothing left to restart.
            Unload::NothingToStop => {
                self.restart = None;
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(epoch: u64) -> BackendInstance {
        BackendInstance { epoch, pid: 42 }
    }

    const SERVING: Facts = Facts {
        serving: Some(BackendInstance { epoch: 1, pid: 42 }),
        leases: 0,
    };

    fn leased(leases: usize) -> Facts {
        Facts { leases, ..SERVING }
    }

    fn watching(action: UnresponsiveAction, now: Instant) -> Watchdog {
        let mut watchdog = Watchdog::new(2, action);
        watchdog.verified(instance(1), true, now);
        watchdog
    }

    fn unresponsive(cause: &str) -> WatchdogAction {
        WatchdogAction::Unresponsive {
            pid: 42,
            cause: cause.into(),
        }
    }

    const MISSES: &str = "no answer to GET /health for 2 probes in a row";

    #[tokio::test(start_paused = true)]
    async fn each_outcome_leads_to_its_actions() {
        use ProbeOutcome::{Changed, Good, Miss};
        use UnresponsiveAction::{Report, Restart};
        use WatchdogAction::{BroadcastState, Recovered, RevokeAll};
        let now = Instant::now();
        let not_loaded = || Changed("/health says loaded: false".into());
        // (action, outcomes fed in order, the actions after the last one).
        let cases: Vec<(UnresponsiveAction, Vec<ProbeOutcome>, Vec<WatchdogAction>)> = vec![
            // A good answer refreshes the proxies' age of the last one.
            (Report, vec![Good], vec![BroadcastState]),
            (Report, vec![Miss], vec![]),
            (
                Report,
                vec![Miss, Miss],
                vec![unresponsive(MISSES), BroadcastState],
            ),
            // Said once: more misses change nothing.
            (Report, vec![Miss, Miss, Miss], vec![]),
            (
                Report,
                vec![Miss, Miss, Good],
                vec![Recovered { pid: 42 }, BroadcastState],
            ),
            (
                Restart,
                vec![Miss, Miss],
                vec![unresponsive(MISSES), RevokeAll, BroadcastState],
            ),
            (
                Restart,
                vec![not_loaded()],
                vec![
                    unresponsive("/health says loaded: false"),
                    RevokeAll,
                    BroadcastState,
                ],
            ),
            // Recovering does not take back a restart asked for; a second
            // verdict does not revoke again.
            (
                Restart,
                vec![not_loaded(), Good, Miss, Miss],
                vec![unresponsive(MISSES), BroadcastState],
            ),
        ];
        for (action, outcomes, expected) in cases {
            let mut watchdog = watching(action, now);
            let mut last = Vec::new();
            for outcome in &outcomes {
                last = watchdog.observe(instance(1), outcome.clone(), &SERVING, now);
            }
            assert_eq!(last, expected, "{action:?} {outcomes:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_of_an_instance_that_does_not_serve_is_stale() {
        let now = Instant::now();
        let mut watchdog = watching(UnresponsiveAction::Restart, now);
        let changed = ProbeOutcome::Changed("/health names model b".into());
        let after_switch = Facts {
            serving: Some(instance(2)),
            leases: 0,
        };
        for facts in [
            after_switch,
            Facts {
                serving: None,
                leases: 0,
            },
        ] {
            assert_eq!(
                watchdog.observe(instance(1), changed.clone(), &facts, now),
                []
            );
        }
        assert_eq!(watchdog.step(&SERVING), []);
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_holds_every_round_until_the_leases_end_then_stops_once() {
        let now = Instant::now();
        let mut watchdog = watching(UnresponsiveAction::Restart, now);
        // Nothing asked for: rounds go on as usual.
        assert_eq!(watchdog.step(&leased(3)), []);
        let changed = ProbeOutcome::Changed("/health says loaded: false".into());
        let actions = watchdog.observe(instance(1), changed, &leased(3), now);
        assert!(actions.contains(&WatchdogAction::RevokeAll), "{actions:?}");
        // (facts, the round's actions), in order.
        let rounds = [
            (leased(3), vec![WatchdogAction::Hold]),
            (leased(1), vec![WatchdogAction::Hold]),
            (leased(0), vec![WatchdogAction::StopBackend]),
            // Stopped once; the next rounds are free.
            (leased(0), vec![]),
            (leased(2), vec![]),
        ];
        for (facts, expected) in rounds {
            assert_eq!(watchdog.step(&facts), expected, "{facts:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_whose_backend_is_gone_meanwhile_stops_nothing() {
        let now = Instant::now();
        for gone in [None, Some(instance(2))] {
            let mut watchdog = watching(UnresponsiveAction::Restart, now);
            let changed = ProbeOutcome::Changed("/health says loaded: false".into());
            watchdog.observe(instance(1), changed, &leased(1), now);
            // It died: its probes end, its leases still run out.
            watchdog.backend_gone();
            let died = |leases| Facts {
                serving: gone,
                leases,
            };
            assert_eq!(watchdog.step(&died(1)), [WatchdogAction::Hold]);
            assert_eq!(watchdog.step(&died(0)), []);
            assert_eq!(watchdog.step(&died(0)), []);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn report_never_holds_or_stops() {
        let now = Instant::now();
        let mut watchdog = watching(UnresponsiveAction::Report, now);
        for _ in 0..3 {
            watchdog.observe(instance(1), ProbeOutcome::Miss, &leased(2), now);
        }
        assert!(watchdog.watch().unresponsive(Some(instance(1))).is_some());
        assert_eq!(watchdog.step(&leased(2)), []);
        assert_eq!(watchdog.step(&leased(0)), []);
    }
}

//! Progress of a backend start, reported as it happens.
//!
//! [`StartProgress::message`] renders the operator line the spec shows for `strata-router on`
//! (without the `[   2.0s]` timestamp, which the caller adds from its own clock):
//!
//! ```text
//! starting backend for model qwen3.8-flash-next-gsq-rco-iq3_xxs
//! backend pid 48390 started, waiting for readiness (loading model qwen3.8-flash-next-gsq-rco-iq3_xxs)
//! still waiting for readiness (2s of 120s allowed)
//! backend reported ready, running health check
//! health check passed, model identity verified
//! ```

use std::fmt;
use std::time::Duration;

use strata_protocol::config::ReadinessChoice;

use super::spec::LaunchSpec;

/// One step of [`start`](super::start), in the order they occur. A successful start reports
/// `Starting`, `Spawned`, zero or more `StillWaiting`, `ReadyFileSeen` (or, in the `health`
/// readiness mode, `Listening`), `HealthCheckPassed`; a failed start stops after the last step
/// reached and returns the error instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartProgress {
    /// About to check the port and spawn.
    Starting,
    /// (`auto` readiness) The mode this start uses and why (what the Strata's `--help` said);
    /// reported before the spawn. A configured mode is not reported: it is the config's.
    ReadinessChosen(ReadinessChoice),
    /// The child runs with this pid; readiness polling begins (`startup_ms` counts from here).
    Spawned { pid: u32 },
    /// Sent every 2 s while waiting for the ready file; `elapsed` is counted from the spawn.
    StillWaiting { elapsed: Duration },
    /// The ready file appeared and names this child, the expected model and the backend port;
    /// `/health` is checked next.
    ReadyFileSeen,
    /// (`health` readiness) The child's process group listens on the backend port; `/health`
    /// is checked next.
    Listening,
    /// `/health` answered 200 with the expected model loaded: the start is accepted.
    HealthCheckPassed,
}

impl StartProgress {
    /// A stable machine-readable name, for the control protocol's `phase` field.
    pub fn phase(&self) -> &'static str {
        match self {
            StartProgress::Starting => "starting",
            StartProgress::ReadinessChosen(_) => "readiness",
            StartProgress::Spawned { .. } => "spawned",
            StartProgress::StillWaiting { .. } => "waiting",
            StartProgress::ReadyFileSeen => "ready_file",
            StartProgress::Listening => "listening",
            StartProgress::HealthCheckPassed => "healthy",
        }
    }

    /// The spec's operator line for this step of starting `spec`.
    pub fn message(&self, spec: &LaunchSpec) -> String {
        let model = &spec.model_id;
        match self {
            StartProgress::Starting => format!("starting backend for model {model}"),
            StartProgress::ReadinessChosen(choice) => {
                format!("readiness: {} ({})", choice.mode.as_str(), choice.why())
            }
            StartProgress::Spawned { pid } => {
                format!("backend pid {pid} started, waiting for readiness (loading model {model})")
            }
            StartProgress::StillWaiting { elapsed } => format!(
                "still waiting for readiness ({}s of {} allowed)",
                elapsed.as_secs(),
                Seconds(spec.startup)
            ),
            StartProgress::ReadyFileSeen => "backend reported ready, running health check".into(),
            StartProgress::Listening => "backend listens on its port, running health check".into(),
            StartProgress::HealthCheckPassed => {
                "health check passed, model identity verified".into()
            }
        }
    }
}

/// `120s`, or `2.5s` when the duration is not whole seconds.
struct Seconds(Duration);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.subsec_millis() == 0 {
            write!(f, "{}s", self.0.as_secs())
        } else {
            write!(f, "{:.1}s", self.0.as_secs_f64())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::spec::Readiness;

    #[test]
    fn lines_match_the_spec() {
        let mut spec = LaunchSpec {
            model_id: "qwen3.8-flash-next-gsq-rco-iq3_xxs".into(),
            python: "/usr/bin/python3".into(),
            strata_dir: "/srv".into(),
            profile: "/srv/p.json".into(),
            upstream_model: "up".into(),
            backend_port: 8095,
            ready_dir_parent: "/run".into(),
            startup: Duration::from_secs(120),
            shutdown: Duration::from_secs(10),
            readiness: Readiness::ReadyFile,
            engine_log: None,
        };
        let lines = [
            StartProgress::Starting,
            StartProgress::Spawned { pid: 48390 },
            StartProgress::StillWaiting {
                elapsed: Duration::from_millis(2030),
            },
            StartProgress::ReadyFileSeen,
            StartProgress::Listening,
            StartProgress::HealthCheckPassed,
        ]
        .map(|p| p.message(&spec));
        assert_eq!(
            lines,
            [
                "starting backend for model qwen3.8-flash-next-gsq-rco-iq3_xxs",
                "backend pid 48390 started, waiting for readiness (loading model qwen3.8-flash-next-gsq-rco-iq3_xxs)",
                "still waiting for readiness (2s of 120s allowed)",
                "backend reported ready, running health check",
                "backend listens on its port, running health check",
                "health check passed, model identity verified",
            ]
        );
        spec.startup = Duration::from_millis(2500);
        let odd = StartProgress::StillWaiting {
            elapsed: Duration::from_secs(2),
        };
        assert_eq!(
            odd.message(&spec),
            "still waiting for readiness (2s of 2.5s allowed)"
        );
    }
}

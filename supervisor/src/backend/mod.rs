//! The Strata backend process: start it, verify it, watch it, stop it.
//!
//! This module implements the backend contract (RESEARCH.md) for exactly one child:
//!
//! - [`start`] checks the backend port is free, makes a fresh private ready-file directory,
//!   spawns `PYTHON -m serve.server --engine strata --config PROFILE --host 127.0.0.1 --port PORT
//!   --idle-unload 0 --ready-file READY_PATH` (no shell, `cwd` = `strata_dir`, stdio on
//!   `/dev/null`, own process group, parent-death SIGKILL, environment minus
//!   [`SCRUBBED_ENV`]), then waits up to `startup_ms` for the ready file, checks its pid, model
//!   and port, and checks `GET /health`. Any failure kills and reaps the whole process group and
//!   returns a short, generic [`StartError`]; there are no retries and never another model.
//! - [`Backend`] is the verified, running child. [`Backend::try_exited`] notices (and reaps) a
//!   child that died later; [`Backend::stop`] stops it the way Strata expects (SIGTERM to the
//!   server alone, `shutdown_ms` for the group, then SIGKILL to the group) and confirms it is
//!   gone; [`Backend::kill`] kills the group at once. Dropping a `Backend` without either
//!   SIGKILLs the group.
//!
//! # Threading requirement
//!
//! `PR_SET_PDEATHSIG` is tied to the thread that forks, not to the process. Call [`start`] only
//! from the supervisor's current-thread tokio runtime on the main thread (tests: a
//! `current_thread` tokio test, whose thread outlives the backend), never from `spawn_blocking`
//! or a multi-thread runtime; the `spawn` module explains why. A `debug_assert!` guards it.
//!
//! Modules: `spawn`, `group` (the owned child, reaping, group liveness),
//! `readiness` (ready file and identity), woken at once by an inotify watch on the ready-file directory, `health` (HTTP/1.0 `/health` client), `stop`,
//! `ready_dir`, `progress`, `cancel`, `spec`, `error`.

mod cancel;
mod error;
mod group;
mod health;
mod listener;
mod progress;
mod readiness;
mod ready_dir;
mod ready_file_support;
mod spawn;
mod spec;
mod stop;

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

pub use cancel::CancelSignal;
pub use error::StartError;
pub use group::ExitInfo;
pub use health::{HealthError, HealthReport, ProbeOutcome, check_health, probe_once};
pub use progress::StartProgress;
pub use spawn::SCRUBBED_ENV;
pub use spec::{LaunchSpec, Readiness};
pub use stop::StopReport;

use cancel::Cancel;
use group::ChildGroup;
use readiness::Waiter;
use ready_dir::ReadyDir;
use strata_os::DirWatch;
use strata_protocol::config::ReadinessMode;

/// The running backend, verified to be the requested model on the backend port.
#[derive(Debug)]
pub struct Backend {
    group: ChildGroup,
    model_id: String,
    upstream_model: String,
    addr: SocketAddr,
    started_at: Instant,
    load_duration: Duration,
}

impl Backend {
    /// The backend process id.
    pub fn pid(&self) -> u32 {
        self.group.pid()
    }

    /// Its process group id (equal to [`pid`](Self::pid): it leads its own group).
    pub fn pgid(&self) -> u32 {
        self.group.pid()
    }

    /// The public router model ID this backend was started for.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The `model_name` it verified in its ready file and `/health`.
    pub fn upstream_model(&self) -> &str {
        &self.upstream_model
    }

    /// Where it serves HTTP (`127.0.0.1:backend_port`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// When it was spawned.
    pub fn started_at(&self) -> Instant {
        self.started_at
    }

    /// From spawn to verified readiness.
    pub fn load_duration(&self) -> Duration {
        self.load_duration
    }

    /// Non-blocking: has the backend process died?
    ///
    /// On the first call that sees it dead, the rest of its process group (Strata's engine, for
    /// one) is SIGKILLed, since nothing would otherwise stop it holding GPU memory, and the
    /// process is reaped, so no zombie is left. Later calls return the same answer. The killed
    /// members die asynchronously: call [`stop`](Self::stop) afterwards (instead of just dropping
    /// the `Backend`) to wait, bounded, until the group is confirmed gone before starting another.
    pub fn try_exited(&mut self) -> Option<ExitInfo> {
        if self.group.is_reaped() {
            return self.group.reap();
        }
        self.group.observe_exit()?;
        // Normally the leader is still an unreaped zombie here, so the pgid is pinned and this
        // cannot hit another group. If something else reaped it, only live members pin it.
        if !self.group.is_reaped() || self.group.group_state().is_live() {
            let _ = self.group.signal_group(nix::sys::signal::Signal::SIGKILL);
        }
        self.group.reap()
    }

    /// Tests: a stand-in for a verified backend of `model_id` on `addr`: a
    /// real process in its own group (a `sleep`), so the engine's child
    /// checks and stops work on it, but no Strata behind it.
    #[cfg(test)]
    pub(crate) fn stand_in(model_id: &str, upstream_model: &str, addr: SocketAddr) -> Backend {
        use std::os::unix::process::CommandExt;
        let mut sleep = std::process::Command::new("sleep");
        sleep
            .arg("3600")
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let child = sleep.spawn().expect("spawn sleep");
        // As in `spawn`: the group waits for it, not the handle.
        let group = ChildGroup::adopt(child.id());
        drop(child);
        Backend {
            group,
            model_id: model_id.to_owned(),
            upstream_model: upstream_model.to_owned(),
            addr,
            started_at: Instant::now(),
            load_duration: Duration::ZERO,
        }
    }

    /// Stop the backend: SIGTERM to the server process alone (Strata then stops its engine with
    /// `QUIT`), up to `shutdown` for the whole group to exit, then SIGKILL to what is left; reap
    /// it and confirm the group is gone (bounded). Raising `hurry` (a forced shutdown) cuts the
    /// wait short. Also fine after it died.
    pub async fn stop(mut self, shutdown: Duration, hurry: Option<&CancelSignal>) -> StopReport {
        stop::terminate(&mut self.group, shutdown, hurry).await
    }

    /// Kill the backend's whole process group at once (a forced shutdown); reap it and confirm
    /// the group is gone (bounded).
    pub async fn kill(mut self) -> StopReport {
        stop::kill(&mut self.group).await
    }
}

/// Start the backend for `spec` with the supervisor's own environment (minus
/// [`SCRUBBED_ENV`]). See [`start_with_env`].
pub async fn start(
    spec: &LaunchSpec,
    progress: &mut (dyn FnMut(StartProgress) + Send),
    cancel: &CancelSignal,
) -> Result<Backend, StartError> {
    start_with_env(spec, std::env::vars_os().collect(), progress, cancel).await
}

/// Start the backend for `spec`, giving it `base_env` minus [`SCRUBBED_ENV`] as environment.
///
/// Reports [`StartProgress`] events as it goes. Returns a verified [`Backend`], or a
/// [`StartError`] after the child's whole process group has been killed and reaped. The private
/// ready-file directory is removed in both cases. Dropping the returned future part-way also
/// kills the child and removes the directory.
pub async fn start_with_env(
    spec: &LaunchSpec,
    base_env: Vec<(OsString, OsString)>,
    progress: &mut (dyn FnMut(StartProgress) + Send),
    cancel: &CancelSignal,
) -> Result<Backend, StartError> {
    spec.validate()?;
    progress(StartProgress::Starting);
    let cancel = Cancel(cancel);
    if cancel.is_cancelled() {
        return Err(StartError::Cancelled);
    }
    spawn::check_port_free(spec.backend_port)?;
    let chosen;
    let spec = if spec.readiness == Readiness::Auto {
        let choice =
            ready_file_support::choose(spec.readiness, &spec.python, &spec.strata_dir).await;
        progress(StartProgress::ReadinessChosen(choice));
        if cancel.is_cancelled() {
            return Err(StartError::Cancelled);
        }
        chosen = LaunchSpec {
            readiness: match choice.mode {
                ReadinessMode::ReadyFile => Readiness::ReadyFile,
                ReadinessMode::Health => Readiness::Health,
            },
            ..spec.clone()
        };
        &chosen
    } else {
        spec
    };
    // The `health` readiness mode has no ready file, so no directory and no watch for one.
    let ready_dir = match spec.readiness {
        Readiness::ReadyFile => {
            Some(ReadyDir::create(&spec.ready_dir_parent).map_err(StartError::ReadyDir)?)
        }
        Readiness::Health => None,
        Readiness::Auto => unreachable!("auto is resolved above"),
    };
    let ready_path = ready_dir.as_ref().map(ReadyDir::ready_file);
    // Before the spawn, so the backend cannot write the file before the watch exists.
    let watch = match &ready_dir {
        None => None,
        Some(dir) => match DirWatch::new(dir.path()) {
            Ok(watch) => Some(watch),
            Err(err) => {
                tracing::warn!(error = %err, "no inotify watch on the ready-file directory; polling only");
                None
            }
        },
    };

    let mut group = spawn::spawn_backend(spec, ready_path.as_deref(), base_env)?;
    // startup_ms "starts after spawning".
    let spawned_at = Instant::now();
    let pid = group.pid();
    progress(StartProgress::Spawned { pid });

    let outcome = Waiter {
        spec,
        group: &mut group,
        ready_path: ready_path.as_deref(),
        watch: watch.as_ref(),
        spawned_at,
        progress,
        cancel,
    }
    .wait()
    .await;

    match outcome {
        Ok(()) => {
            // Removing it (unlink, rmdir) and closing its inotify watch took 0.5-0.75 ms on
            // the benchmark's machine, right between the health check and the grant: done off
            // the runtime's thread instead, in the same order.
            if let Some(dir) = ready_dir {
                dir.remove_in_background(watch);
            }
            Ok(Backend {
                group,
                model_id: spec.model_id.clone(),
                upstream_model: spec.upstream_model.clone(),
                addr: SocketAddr::from((Ipv4Addr::LOCALHOST, spec.backend_port)),
                started_at: spawned_at,
                load_duration: spawned_at.elapsed(),
            })
        }
        Err(err) => {
            // A failed or cancelled start is killed at once: nothing it loaded is worth saving,
            // and a wedged start would only make the caller wait `shutdown_ms` more.
            let report = stop::kill(&mut group).await;
            // Exit status 2 is argparse's for an unknown flag, and also Strata's for a taken
            // port: only the Strata's own help can tell whether it lacks `--ready-file`.
            let err = match err {
                StartError::Exited {
                    exit: ExitInfo::Code(2),
                } if spec.readiness == Readiness::ReadyFile
                    && ready_file_support::accepts_ready_file(&spec.python, &spec.strata_dir)
                        .await
                        == Some(false) =>
                {
                    StartError::ReadyFileUnsupported {
                        python: spec.python.clone(),
                    }
                }
                err => err,
            };
            // Only failures after the spawn: before it Strata wrote nothing.
            let err = match (&spec.engine_log, &err) {
                (Some(log), StartError::Exited { .. } | StartError::TimedOut { .. })
                | (
                    Some(log),
                    StartError::HealthFailed(_)
                    | StartError::HealthNotLoaded
                    | StartError::HealthWrongModel,
                ) => StartError::SeeEngineLog {
                    cause: Box::new(err),
                    log: log.clone(),
                },
                _ => err,
            };
            tracing::info!(
                pid,
                error = %err,
                forced_kill = report.forced_kill,
                group_gone = report.group_gone,
                "backend start failed; process group stopped"
            );
            // Only after the child is gone, so it cannot write into the directory meanwhile.
            drop(ready_dir);
            Err(err)
        }
    }
}

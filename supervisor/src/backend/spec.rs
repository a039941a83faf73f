//! What to launch: a plain description of one backend start, built by the caller from the
//! validated config (this module deliberately does not depend on the config types).

use std::path::PathBuf;
use std::time::Duration;

use super::error::StartError;

/// How a start is recognised as ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Readiness {
    /// Ask the Strata (`--help`, once per interpreter and directory) and use `ReadyFile` where
    /// it lists `--ready-file`, `Health` where it does not.
    #[default]
    Auto,
    /// The backend writes a ready file naming its pid, model and port (the router's extension
    /// of Strata, `--ready-file`); then `/health` must agree.
    ReadyFile,
    /// For a Strata without that extension: no `--ready-file`; the start is accepted once the
    /// port's listening socket belongs to the child's process group and `/health` names the
    /// model, loaded.
    Health,
}

/// Everything needed to start the Strata backend for one model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Public router model ID; used in progress messages only.
    pub model_id: String,
    /// Absolute path of the Python interpreter (config `python`).
    pub python: PathBuf,
    /// Absolute path of the Strata checkout; the child's working directory (config `strata_dir`).
    pub strata_dir: PathBuf,
    /// Absolute path of the model's Strata profile (config `models.ID.profile`).
    pub profile: PathBuf,
    /// The `model_name` the backend must report in its ready file and `/health`.
    pub upstream_model: String,
    /// The reserved loopback port the backend serves on (config `backend_port`).
    pub backend_port: u16,
    /// A private directory owned by the daemon (for example its 0700 runtime directory). Each
    /// start makes a fresh 0700 subdirectory in it for the ready file and removes it afterwards.
    pub ready_dir_parent: PathBuf,
    /// `startup_ms`: bounds readiness, counted from the spawn.
    pub startup: Duration,
    /// `shutdown_ms`: grace between SIGTERM to the server and SIGKILL to its group when a
    /// verified backend is stopped (a failed start is killed at once).
    pub shutdown: Duration,
    /// `readiness`.
    pub readiness: Readiness,
    /// The profile's `log`, where Strata writes its engine's stderr: named (never read) in the
    /// cause of a failed start.
    pub engine_log: Option<PathBuf>,
}

impl LaunchSpec {
    /// Cheap sanity checks that config validation should already guarantee; a violation here is
    /// a bug upstream, reported instead of launching something unexpected.
    pub(crate) fn validate(&self) -> Result<(), StartError> {
        let absolute = [
            (&self.python, "python must be an absolute path"),
            (&self.strata_dir, "strata_dir must be an absolute path"),
            (&self.profile, "the profile must be an absolute path"),
            (
                &self.ready_dir_parent,
                "the ready-file directory must be an absolute path",
            ),
        ];
        for (path, reason) in absolute {
            if !path.is_absolute() {
                return Err(StartError::InvalidSpec(reason));
            }
        }
        if self.backend_port == 0 {
            return Err(StartError::InvalidSpec("backend_port must not be 0"));
        }
        if self.startup.is_zero() {
            return Err(StartError::InvalidSpec("startup_ms must be positive"));
        }
        if self.shutdown.is_zero() {
            return Err(StartError::InvalidSpec("shutdown_ms must be positive"));
        }
        Ok(())
    }
}

//! Watching the serving backend: `backend_probe_ms`,
//! `backend_probe_misses` and `backend_unresponsive_action`.
//!
//! While a backend is verified, the supervisor asks its `GET /health`
//! every `backend_probe_ms` on a connection of its own, each probe bounded
//! by the same interval (at most [`MAX_PROBE_TIMEOUT_MS`]). A probe that
//! gets no answer in time is a miss; `backend_probe_misses` misses in a row,
//! or one answer naming another model or `loaded: false`, make the backend
//! `unresponsive`. The action says what follows: `report` (the default)
//! shows it and stops nothing, `restart` fails the leases on that backend
//! and stops it, as an unload does. These are the supervisor's keys alone.

use super::ConfigError;
use super::json_walk::Obj;

/// `backend_probe_ms` when unset: one probe every 5 s.
pub const DEFAULT_BACKEND_PROBE_MS: u64 = 5_000;
/// The longest interval accepted (10 minutes).
pub const MAX_BACKEND_PROBE_MS: u64 = 600_000;
/// A probe waits for its answer at most this long, whatever the interval.
pub const MAX_PROBE_TIMEOUT_MS: u64 = 10_000;
/// `backend_probe_misses` when unset.
pub const DEFAULT_BACKEND_PROBE_MISSES: u64 = 3;
pub const MAX_BACKEND_PROBE_MISSES: u64 = 100;

/// What an unresponsive backend leads to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnresponsiveAction {
    /// Show it everywhere; stop nothing.
    #[default]
    Report,
    /// Fail the leases on that backend (`upstream_error`) and stop it.
    Restart,
}

impl UnresponsiveAction {
    pub fn as_str(self) -> &'static str {
        match self {
            UnresponsiveAction::Report => "report",
            UnresponsiveAction::Restart => "restart",
        }
    }
}

/// The probe settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// `backend_probe_ms`: 0 turns probing off.
    pub interval_ms: u64,
    /// `backend_probe_misses`.
    pub misses: u32,
    /// `backend_unresponsive_action`.
    pub action: UnresponsiveAction,
}

impl Default for ProbeConfig {
    fn default() -> ProbeConfig {
        ProbeConfig {
            interval_ms: DEFAULT_BACKEND_PROBE_MS,
            misses: DEFAULT_BACKEND_PROBE_MISSES as u32,
            action: UnresponsiveAction::Report,
        }
    }
}

impl ProbeConfig {
    /// How long one probe waits for its answer.
    pub fn timeout_ms(&self) -> u64 {
        self.interval_ms.min(MAX_PROBE_TIMEOUT_MS)
    }
}

pub(crate) fn parse(root: &Obj<'_>) -> Result<ProbeConfig, ConfigError> {
    let action = match root.opt_string("backend_unresponsive_action")? {
        None | Some("report") => UnresponsiveAction::Report,
        Some("restart") => UnresponsiveAction::Restart,
        Some(_) => {
            return Err(root
                .path()
                .field("backend_unresponsive_action")
                .error("must be \"report\" or \"restart\""));
        }
    };
    Ok(ProbeConfig {
        interval_ms: root.u64_or(
            "backend_probe_ms",
            0..=MAX_BACKEND_PROBE_MS,
            DEFAULT_BACKEND_PROBE_MS,
        )?,
        misses: root.u64_or(
            "backend_probe_misses",
            1..=MAX_BACKEND_PROBE_MISSES,
            DEFAULT_BACKEND_PROBE_MISSES,
        )? as u32,
        action,
    })
}

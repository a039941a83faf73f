//! Why a backend start failed.
//!
//! Messages are short, bounded and generic, as the spec requires ("Startup diagnostics are
//! intentionally bounded and generic"): they carry numbers (port, pid, exit code, timeout) but
//! never profile contents, child output, or strings the child reported, so they can go to logs,
//! to `strata-ctl on`, and into 503 bodies as they are.

use std::fmt;
use std::io;

use super::group::ExitInfo;
use super::health::HealthError;

/// A failed [`start`](super::start). Whatever the variant, the child's whole process group has
/// been killed and reaped (as far as the kernel allowed within the bounded waits) and the ready
/// directory removed before this is returned. There are no retries and never another model.
#[derive(Debug)]
pub enum StartError {
    /// The launch spec is unusable (config validation should have caught it).
    InvalidSpec(&'static str),
    /// Something already listens on the backend port; nothing was spawned.
    PortInUse { port: u16 },
    /// The backend port could not be checked (for example permission denied).
    PortCheck { port: u16, source: io::Error },
    /// The private ready-file directory could not be created.
    ReadyDir(io::Error),
    /// The interpreter could not be started (missing, not executable, bad working directory).
    Spawn(io::Error),
    /// The child exited before it was verified ready.
    Exited { exit: ExitInfo },
    /// No verified readiness within `startup_ms`.
    TimedOut { after_ms: u64 },
    /// The start was cancelled (daemon shutdown, or the operator interrupted `on`).
    Cancelled,
    /// The ready file stayed unreadable or is not `{"pid","model_name","port"}` JSON.
    ReadyFileInvalid,
    /// The ready file names another process than the child.
    WrongPid { reported: i64, expected: u32 },
    /// The ready file names another model than `upstream_model`.
    WrongModel,
    /// The ready file names another port than `backend_port`.
    WrongPort { reported: i64, expected: u16 },
    /// `GET /health` failed: no connection, timeout, non-200 status, or malformed reply.
    HealthFailed(HealthError),
    /// `/health` reports another model than `upstream_model`.
    HealthWrongModel,
    /// `/health` reports `"loaded": false`.
    HealthNotLoaded,
    /// (`ready_file` readiness) The Strata at `python` has no `--ready-file` (its `--help`
    /// does not list it; it exited 2 on the flag, as argparse does).
    ReadyFileUnsupported { python: std::path::PathBuf },
    /// (`health` readiness) Another process, not the child's group, listens on the backend port:
    /// it is never asked anything.
    PortHeldByOther { port: u16 },
    /// A start that failed after the spawn, for a profile that names a `log`: Strata writes its
    /// engine's stderr there (the reason a load failed is usually in it). The router names the
    /// file and never reads it: it may hold profile secrets.
    SeeEngineLog {
        cause: Box<StartError>,
        log: std::path::PathBuf,
    },
}

impl StartError {
    /// The failure itself, under any [`StartError::SeeEngineLog`] pointer.
    pub fn cause(&self) -> &StartError {
        match self {
            StartError::SeeEngineLog { cause, .. } => cause,
            other => other,
        }
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::InvalidSpec(reason) => {
                write!(f, "invalid backend launch settings: {reason}")
            }
            StartError::PortInUse { port } => write!(f, "backend port {port} is already in use"),
            StartError::PortCheck { port, source } => {
                write!(f, "could not check backend port {port}: {source}")
            }
            StartError::ReadyDir(source) => {
                write!(
                    f,
                    "could not create the backend ready-file directory: {source}"
                )
            }
            StartError::Spawn(source) => write!(f, "could not start the backend: {source}"),
            StartError::Exited { exit } => write!(f, "backend exited during startup ({exit})"),
            StartError::TimedOut { after_ms } => {
                write!(f, "backend did not become ready within {after_ms} ms")
            }
            StartError::Cancelled => f.write_str("backend start cancelled"),
            StartError::ReadyFileInvalid => f.write_str("backend ready file is not valid"),
            StartError::WrongPid { reported, expected } => {
                write!(
                    f,
                    "backend ready file names pid {reported}, expected {expected}"
                )
            }
            StartError::WrongModel => {
                f.write_str("backend identity mismatch: ready file names a different model")
            }
            StartError::WrongPort { reported, expected } => {
                write!(
                    f,
                    "backend ready file names port {reported}, expected {expected}"
                )
            }
            StartError::HealthFailed(err) => write!(f, "backend /health check failed: {err}"),
            StartError::HealthWrongModel => {
                f.write_str("backend /health reports a different model")
            }
            StartError::HealthNotLoaded => {
                f.write_str("backend /health reports the model is not loaded")
            }
            StartError::ReadyFileUnsupported { python } => write!(
                f,
                "the Strata at {} does not accept --ready-file: set readiness to auto or health, or upgrade Strata",
                python.display()
            ),
            StartError::PortHeldByOther { port } => write!(
                f,
                "another process, not the backend, listens on backend port {port}"
            ),
            StartError::SeeEngineLog { cause, log } => write!(
                f,
                "{cause}; Strata writes the engine's messages to {} (the profile's log)",
                log.display()
            ),
        }
    }
}

// The underlying errors are already part of each message (operators see one line), so
// `source()` stays `None` to avoid printing them twice in error chains.
impl std::error::Error for StartError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_the_brief() {
        let cases: Vec<(StartError, &str)> = vec![
            (
                StartError::Exited {
                    exit: ExitInfo::Code(3),
                },
                "backend exited during startup (exit code 3)",
            ),
            (
                StartError::TimedOut { after_ms: 120000 },
                "backend did not become ready within 120000 ms",
            ),
            (
                StartError::WrongPid {
                    reported: 123,
                    expected: 456,
                },
                "backend ready file names pid 123, expected 456",
            ),
            (
                StartError::WrongModel,
                "backend identity mismatch: ready file names a different model",
            ),
            (
                StartError::WrongPort {
                    reported: 8096,
                    expected: 8095,
                },
                "backend ready file names port 8096, expected 8095",
            ),
            (
                StartError::HealthWrongModel,
                "backend /health reports a different model",
            ),
            (
                StartError::HealthNotLoaded,
                "backend /health reports the model is not loaded",
            ),
            (
                StartError::HealthFailed(HealthError::Status(500)),
                "backend /health check failed: HTTP status 500",
            ),
            (
                StartError::PortInUse { port: 8095 },
                "backend port 8095 is already in use",
            ),
            (StartError::Cancelled, "backend start cancelled"),
        ];
        for (err, want) in cases {
            assert_eq!(err.to_string(), want);
        }
    }
}

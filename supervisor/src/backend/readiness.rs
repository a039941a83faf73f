//! Waiting for a spawned backend to become ready, and verifying that it is the right one.
//!
//! At every change in the ready-file directory (an inotify watch, `strata_os::DirWatch`) and at
//! least every 50 ms, until `startup_ms` after the spawn: stop if cancelled; stop if the child
//! has exited; otherwise look for readiness:
//! - `ready_file` mode: the ready file. Once it parses, its `pid`, `model_name` and `port` must
//!   be the child's, the expected model's and the backend port.
//! - `health` mode (no ready file): the backend port's listening socket, which must be held by
//!   the child's own process group (`listener.rs`); a socket held by another process is never
//!   asked anything.
//!
//! Then `GET /health` must answer 200 with the same model and `"loaded": true`. This function
//! only decides; the caller kills the group and cleans up on any error.

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::cancel::Cancel;
use super::error::StartError;
use super::group::ChildGroup;
use super::health::{HealthError, check_health};
use super::listener::{PortListener, port_listener};
use super::progress::StartProgress;
use super::spec::LaunchSpec;
use strata_os::DirWatch;

/// How often the child (and, as a fallback to the watch, the ready file) is looked at.
const POLL: Duration = Duration::from_millis(50);
/// How often a `StillWaiting` progress event is sent.
const REPORT_EVERY: Duration = Duration::from_secs(2);
/// Upper bound for the `/health` request (also bounded by the remaining startup time).
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);
/// Consecutive unparsable reads before the ready file is declared invalid. The file is written
/// atomically (temp file + rename), so a bad read should not happen; a few retries absorb odd
/// filesystems, and the bound stops a broken backend from burning the whole startup budget.
const MAX_BAD_READS: u32 = 20;
/// A real ready file is ~60 bytes.
const MAX_READY_FILE: u64 = 64 * 1024;

/// The contents of `READY_PATH`: `{"pid": INT, "model_name": STR, "port": INT}`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub(crate) struct ReadyFile {
    pub(crate) pid: i64,
    pub(crate) model_name: String,
    pub(crate) port: i64,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadyRead {
    /// Not written yet.
    Missing,
    /// Present but not (yet) valid.
    Bad,
    Ready(ReadyFile),
}

/// Read and parse the ready file without following a symlink.
pub(crate) fn read_ready_file(path: &Path) -> ReadyRead {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return ReadyRead::Missing,
        Err(_) => return ReadyRead::Bad,
    };
    let mut data = Vec::new();
    if file
        .take(MAX_READY_FILE + 1)
        .read_to_end(&mut data)
        .is_err()
        || data.len() as u64 > MAX_READY_FILE
    {
        return ReadyRead::Bad;
    }
    match serde_json::from_slice(&data) {
        Ok(ready) => ReadyRead::Ready(ready),
        Err(_) => ReadyRead::Bad,
    }
}

/// Check the ready file's identity fields against the child and the spec.
pub(crate) fn verify_ready_file(
    ready: &ReadyFile,
    child_pid: u32,
    spec: &LaunchSpec,
) -> Result<(), StartError> {
    if ready.pid != i64::from(child_pid) {
        return Err(StartError::WrongPid {
            reported: ready.pid,
            expected: child_pid,
        });
    }
    if ready.model_name != spec.upstream_model {
        return Err(StartError::WrongModel);
    }
    if ready.port != i64::from(spec.backend_port) {
        return Err(StartError::WrongPort {
            reported: ready.port,
            expected: spec.backend_port,
        });
    }
    Ok(())
}

/// The watch's next event, or never without a watch (the poll then finds the file).
async fn dir_changed(watch: Option<&DirWatch>) {
    match watch {
        Some(watch) => watch.changed().await,
        None => std::future::pending().await,
    }
}

/// Everything the wait needs from [`start`](super::start).
pub(crate) struct Waiter<'a> {
    pub(crate) spec: &'a LaunchSpec,
    pub(crate) group: &'a mut ChildGroup,
    /// `None` in the `health` readiness mode.
    pub(crate) ready_path: Option<&'a Path>,
    pub(crate) watch: Option<&'a DirWatch>,
    pub(crate) spawned_at: Instant,
    pub(crate) progress: &'a mut (dyn FnMut(StartProgress) + Send),
    pub(crate) cancel: Cancel<'a>,
}

impl Waiter<'_> {
    fn timed_out(&self) -> StartError {
        StartError::TimedOut {
            after_ms: u64::try_from(self.spec.startup.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Wait until the backend is verified ready. Returns `Ok` only after the ready file and
    /// `/health` both confirmed the identity and the child is still running.
    pub(crate) async fn wait(self) -> Result<(), StartError> {
        let deadline = self.spawned_at + self.spec.startup;
        let mut next_report = self.spawned_at + REPORT_EVERY;
        let mut bad_reads = 0;
        let pid = self.group.pid();

        // Another process listening on the port (health mode): remembered, so a start that
        // fails explains itself.
        let mut stranger = false;
        let ready = loop {
            if self.cancel.is_cancelled() {
                return Err(StartError::Cancelled);
            }
            if let Some(exit) = self.group.observe_exit() {
                if stranger {
                    return Err(StartError::PortHeldByOther {
                        port: self.spec.backend_port,
                    });
                }
                return Err(StartError::Exited { exit });
            }
            match self.ready_path {
                Some(path) => match read_ready_file(path) {
                    ReadyRead::Ready(ready) => break Some(ready),
                    ReadyRead::Missing => {}
                    ReadyRead::Bad => {
                        bad_reads += 1;
                        if bad_reads >= MAX_BAD_READS {
                            return Err(StartError::ReadyFileInvalid);
                        }
                    }
                },
                None => match port_listener(self.spec.backend_port, pid) {
                    PortListener::Child => break None,
                    PortListener::Stranger => stranger = true,
                    PortListener::None => {}
                },
            }
            let now = Instant::now();
            if now >= deadline {
                if stranger {
                    return Err(StartError::PortHeldByOther {
                        port: self.spec.backend_port,
                    });
                }
                return Err(self.timed_out());
            }
            if now >= next_report {
                (self.progress)(StartProgress::StillWaiting {
                    elapsed: now - self.spawned_at,
                });
                // Skip missed marks rather than reporting several at once after a stall.
                while next_report <= now {
                    next_report += REPORT_EVERY;
                }
            }
            let nap = POLL.min(deadline - now);
            tokio::select! {
                () = tokio::time::sleep(nap) => {}
                () = dir_changed(self.watch) => {}
                () = self.cancel.cancelled() => return Err(StartError::Cancelled),
            }
        };

        match ready {
            Some(ready) => {
                verify_ready_file(&ready, pid, self.spec)?;
                tracing::debug!(target: "strata::switch", pid, "ready file seen");
                (self.progress)(StartProgress::ReadyFileSeen);
            }
            None => (self.progress)(StartProgress::Listening),
        }

        let now = Instant::now();
        if now >= deadline {
            return Err(self.timed_out());
        }
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.spec.backend_port));
        let budget = HEALTH_TIMEOUT.min(deadline - now);
        let health = tokio::select! {
            result = check_health(addr, budget) => result,
            () = self.cancel.cancelled() => return Err(StartError::Cancelled),
        };
        let report = match health {
            Ok(report) => report,
            Err(err) => {
                // A dead child explains a failed check better than "connection refused".
                if let Some(exit) = self.group.observe_exit() {
                    return Err(StartError::Exited { exit });
                }
                if err == HealthError::TimedOut && Instant::now() >= deadline {
                    return Err(self.timed_out());
                }
                return Err(StartError::HealthFailed(err));
            }
        };
        if report.model != self.spec.upstream_model {
            return Err(StartError::HealthWrongModel);
        }
        if !report.loaded {
            return Err(StartError::HealthNotLoaded);
        }
        // A child that answered and then died is not a healthy start.
        if let Some(exit) = self.group.observe_exit() {
            return Err(StartError::Exited { exit });
        }
        tracing::debug!(target: "strata::switch", "health check passed");
        (self.progress)(StartProgress::HealthCheckPassed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::spec::Readiness;

    fn spec() -> LaunchSpec {
        LaunchSpec {
            model_id: "id".into(),
            python: "/usr/bin/python3".into(),
            strata_dir: "/srv".into(),
            profile: "/srv/p.json".into(),
            upstream_model: "up".into(),
            backend_port: 8095,
            ready_dir_parent: "/run".into(),
            startup: Duration::from_secs(1),
            shutdown: Duration::from_secs(1),
            readiness: Readiness::ReadyFile,
            engine_log: None,
        }
    }

    #[test]
    fn ready_file_reads() {
        let dir = std::env::temp_dir().join(format!("readiness-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ready.json");
        assert_eq!(read_ready_file(&path), ReadyRead::Missing);
        std::fs::write(&path, br#"{"pid": 7, "model_na"#).unwrap();
        assert_eq!(read_ready_file(&path), ReadyRead::Bad, "partial write");
        std::fs::write(
            &path,
            br#"{"pid": 7, "model_name": "up", "port": 8095, "x": 1}"#,
        )
        .unwrap();
        assert_eq!(
            read_ready_file(&path),
            ReadyRead::Ready(ReadyFile {
                pid: 7,
                model_name: "up".into(),
                port: 8095
            })
        );
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
        assert_eq!(
            read_ready_file(&path),
            ReadyRead::Bad,
            "symlinks are refused"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn identity_checks_in_order() {
        let spec = spec();
        let good = ReadyFile {
            pid: 7,
            model_name: "up".into(),
            port: 8095,
        };
        verify_ready_file(&good, 7, &spec).unwrap();
        let wrong_pid = ReadyFile {
            pid: 8,
            ..good.clone()
        };
        assert!(matches!(
            verify_ready_file(&wrong_pid, 7, &spec),
            Err(StartError::WrongPid {
                reported: 8,
                expected: 7
            })
        ));
        let wrong_model = ReadyFile {
            model_name: "other".into(),
            ..good.clone()
        };
        assert!(matches!(
            verify_ready_file(&wrong_model, 7, &spec),
            Err(StartError::WrongModel)
        ));
        let wrong_port = ReadyFile { port: 1, ..good };
        assert!(matches!(
            verify_ready_file(&wrong_port, 7, &spec),
            Err(StartError::WrongPort {
                reported: 1,
                expected: 8095
            })
        ));
    }
}

//! Whether the configured Strata accepts `--ready-file`: asked once, when a start in the
//! `ready_file` readiness mode ends with exit status 2.
//!
//! The public `serve/server.py` has no `--ready-file`, and its argparse exits 2 on the unknown
//! flag; but Strata also exits 2 when its port is taken, so the exit status alone cannot tell.
//! The child's output is discarded (it could echo profile secrets), so instead the same
//! interpreter is asked for `python -m serve.server --help` (no profile, so nothing secret):
//! its help text is read in memory, searched for the flag, and dropped, never logged. The answer
//! is kept for the supervisor's lifetime per interpreter and Strata directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::spawn::SCRUBBED_ENV;

/// How long `--help` may take (an interpreter start and an import).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// More help text than this is not read (Strata's is a few KiB).
const MAX_HELP_BYTES: u64 = 1024 * 1024;

static ANSWERS: Mutex<Option<HashMap<(PathBuf, PathBuf), bool>>> = Mutex::new(None);

/// Whether `python -m serve.server --help`, run in `strata_dir`, lists `--ready-file`;
/// `None` when that could not be found out (the probe failed or timed out).
pub(crate) async fn accepts_ready_file(python: &Path, strata_dir: &Path) -> Option<bool> {
    let key = (python.to_path_buf(), strata_dir.to_path_buf());
    let known = ANSWERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .and_then(|answers| answers.get(&key).copied());
    if known.is_some() {
        return known;
    }
    let answer = ask(python, strata_dir).await?;
    ANSWERS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, answer);
    Some(answer)
}

async fn ask(python: &Path, strata_dir: &Path) -> Option<bool> {
    let mut command = tokio::process::Command::new(python);
    command
        .args(["-m", "serve.server", "--help"])
        .current_dir(strata_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // A probe that outlives its bound is killed with the future.
        .kill_on_drop(true);
    for key in SCRUBBED_ENV {
        command.env_remove(key);
    }
    let mut child = command.spawn().ok()?;
    let mut stdout = child.stdout.take()?;
    let read = async {
        let mut text = Vec::new();
        (&mut stdout)
            .take(MAX_HELP_BYTES)
            .read_to_end(&mut text)
            .await
            .ok()?;
        child.wait().await.ok()?;
        Some(text)
    };
    let text = tokio::time::timeout(PROBE_TIMEOUT, read).await.ok()??;
    Some(String::from_utf8_lossy(&text).contains("--ready-file"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in interpreter: a shell script that prints `help` for any arguments.
    fn interpreter(dir: &Path, help: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join("python");
        std::fs::write(&path, format!("#!/bin/sh\necho '{help}'\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[tokio::test]
    async fn the_help_text_decides_and_a_failed_probe_decides_nothing() {
        let dir = strata_test_support::TempDir::new("probe");
        let with = dir.subdir("with", 0o700);
        let without = dir.subdir("without", 0o700);
        let help_with = interpreter(
            &with,
            "usage: ... [--idle-unload SECONDS] [--ready-file PATH]",
        );
        let help_without = interpreter(&without, "usage: ... [--idle-unload SECONDS]");
        assert_eq!(accepts_ready_file(&help_with, dir.path()).await, Some(true));
        assert_eq!(
            accepts_ready_file(&help_without, dir.path()).await,
            Some(false)
        );
        // Asked once: the answer stands even if the interpreter changes under it.
        std::fs::remove_file(&help_without).unwrap();
        assert_eq!(
            accepts_ready_file(&help_without, dir.path()).await,
            Some(false)
        );
        let missing = Path::new("/nonexistent/python");
        assert_eq!(accepts_ready_file(missing, dir.path()).await, None);
    }
}

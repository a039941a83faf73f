//! Which readiness contract the configured Strata supports: whether `python -m serve.server
//! --help` lists `--ready-file`. Asked before the first start with `readiness: "auto"`, and when
//! a start in the `ready_file` mode ends with exit status 2.
//!
//! The public `serve/server.py` has no `--ready-file`, and its argparse exits 2 on the unknown
//! flag; but Strata also exits 2 when its port is taken, so the exit status alone cannot tell.
//! The child's output is discarded (it could echo profile secrets), so instead the same
//! interpreter is asked for its help (no profile, so nothing secret): the text is read in
//! memory, searched for the flag, and dropped, never logged. The answer is kept for the
//! supervisor's lifetime per interpreter and Strata directory; a probe that failed is not kept,
//! so the next start asks again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use strata_protocol::config::{ReadinessBasis, ReadinessChoice, ReadinessMode};

use super::spawn::SCRUBBED_ENV;
use super::spec::Readiness;

/// How long `--help` may take (an interpreter start and an import).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

static ANSWERS: Mutex<Option<HashMap<(PathBuf, PathBuf), bool>>> = Mutex::new(None);

/// The mode a start with `readiness` uses, and why.
pub(crate) async fn choose(
    readiness: Readiness,
    python: &Path,
    strata_dir: &Path,
) -> ReadinessChoice {
    let configured = |mode| ReadinessChoice {
        mode,
        basis: ReadinessBasis::Configured,
    };
    match readiness {
        Readiness::ReadyFile => configured(ReadinessMode::ReadyFile),
        Readiness::Health => configured(ReadinessMode::Health),
        Readiness::Auto => match accepts_ready_file(python, strata_dir).await {
            Some(true) => ReadinessChoice {
                mode: ReadinessMode::ReadyFile,
                basis: ReadinessBasis::HelpListsReadyFile,
            },
            Some(false) => ReadinessChoice {
                mode: ReadinessMode::Health,
                basis: ReadinessBasis::HelpLacksReadyFile,
            },
            // The spec's contract: the start then fails with the cause the ready-file mode
            // finds (a broken interpreter fails either way).
            None => ReadinessChoice {
                mode: ReadinessMode::ReadyFile,
                basis: ReadinessBasis::HelpUnanswered,
            },
        },
    }
}

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
    let mut command = std::process::Command::new(python);
    command
        .args(["-m", "serve.server", "--help"])
        .current_dir(strata_dir);
    for key in SCRUBBED_ENV {
        command.env_remove(key);
    }
    tokio::task::spawn_blocking(move || {
        strata_os::help_lists_flag(command, "--ready-file", PROBE_TIMEOUT)
    })
    .await
    .ok()?
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

    #[tokio::test]
    async fn auto_chooses_by_the_help_and_a_setting_by_itself() {
        let dir = strata_test_support::TempDir::new("choose");
        let stock = dir.subdir("stock", 0o700);
        let python = interpreter(&stock, "usage: ... [--idle-unload SECONDS]");
        let auto = choose(Readiness::Auto, &python, dir.path()).await;
        assert_eq!(auto.mode, ReadinessMode::Health);
        assert_eq!(auto.basis, ReadinessBasis::HelpLacksReadyFile);
        let fixed = choose(Readiness::ReadyFile, &python, dir.path()).await;
        assert_eq!(fixed.mode, ReadinessMode::ReadyFile);
        assert_eq!(fixed.basis, ReadinessBasis::Configured);
        let missing = Path::new("/nonexistent/python");
        let unanswered = choose(Readiness::Auto, missing, dir.path()).await;
        assert_eq!(unanswered.mode, ReadinessMode::ReadyFile);
        assert_eq!(unanswered.basis, ReadinessBasis::HelpUnanswered);
    }
}

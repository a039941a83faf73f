//! The Python interpreter the tests run (the fake backend, the launch helpers) and where the
//! fake backend and the other repository files are.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The interpreter that runs the fake backend, as an absolute path (the config requires one).
///
/// `STRATA_TEST_PYTHON` if set (a bare name is looked up on `PATH`), else `python3` from `PATH`,
/// resolved through `sys.executable` so that a wrapper such as a pyenv shim does not sit
/// between the supervisor and the server it spawns.
pub fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| match std::env::var_os("STRATA_TEST_PYTHON") {
        Some(explicit) if !explicit.is_empty() => {
            let explicit = PathBuf::from(explicit);
            if explicit.is_absolute() {
                explicit
            } else {
                on_path(&explicit)
            }
        }
        _ => {
            let found = on_path(Path::new("python3"));
            real_executable(&found).unwrap_or(found)
        }
    })
}

fn on_path(name: &Path) -> PathBuf {
    if name.components().count() > 1 {
        return std::fs::canonicalize(name)
            .unwrap_or_else(|err| panic!("python {}: {err}", name.display()));
    }
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .and_then(|found| {
            if found.is_absolute() {
                Some(found)
            } else {
                std::fs::canonicalize(found).ok()
            }
        })
        .unwrap_or_else(|| {
            panic!(
                "{} not found on PATH; set STRATA_TEST_PYTHON to an interpreter",
                name.display()
            )
        })
}

fn real_executable(python: &Path) -> Option<PathBuf> {
    let output = Command::new(python)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let path = PathBuf::from(String::from_utf8(output.stdout).ok()?.trim());
    (path.is_absolute() && path.is_file()).then_some(path)
}

/// The repository's root directory, found from this crate's own location (`test-support/` is a
/// top-level member), so the tests of every crate find the same files.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support sits in the repository root")
}

/// `tests/fake_strata`: the fake backend (used as `strata_dir`).
pub fn fake_strata_dir() -> PathBuf {
    repo_root().join("tests").join("fake_strata")
}

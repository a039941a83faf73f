//! Locating the workspace binaries the tests run, and the commands that run them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The path of a workspace binary (`strata-supervisor`, `strata-proxy`, `strata-ctl`).
///
/// A test executable lives in `<target>/[<triple>/]<profile>/deps/`; the binaries are one level
/// up, whatever the profile or target triple (Nix builds with `--release --target <triple>`).
/// `STRATA_TEST_BIN_DIR` overrides the directory. Panics if the binary is missing.
pub fn binary(name: &str) -> PathBuf {
    let dir = match std::env::var_os("STRATA_TEST_BIN_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => default_dir(),
    };
    let path = dir.join(name);
    if !path.is_file() {
        panic!(
            "{name} not found at {}: build the workspace binaries first (cargo test --locked at the workspace root does)",
            path.display()
        );
    }
    path
}

fn default_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the running test executable");
    let parent = exe.parent().unwrap_or(Path::new("/"));
    if parent.file_name().is_some_and(|name| name == "deps") {
        parent.parent().unwrap_or(parent).to_path_buf()
    } else {
        parent.to_path_buf()
    }
}

/// The command that runs workspace daemon `name` on the config at `config` (`NAME CONFIG`),
/// with `PYTHONDONTWRITEBYTECODE=1` (a backend it spawns inherits it, keeping `__pycache__`
/// out of the fake's source directory) and `STRATA_LOG` passed through (default `info`).
pub fn daemon_command(name: &str, config: &Path) -> Command {
    let mut command = Command::new(binary(name));
    command.arg(config).env("PYTHONDONTWRITEBYTECODE", "1").env(
        "STRATA_LOG",
        std::env::var("STRATA_LOG").unwrap_or_else(|_| "info".into()),
    );
    command
}

/// `outer` followed by `inner`'s program and arguments, with `inner`'s environment changes: a
/// launcher that exec()s the program in place, so the spawned process *is* the program (same
/// PID).
pub fn wrap_command(mut outer: Command, inner: &Command) -> Command {
    outer.arg(inner.get_program()).args(inner.get_args());
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => outer.env(key, value),
            None => outer.env_remove(key),
        };
    }
    outer
}

/// `inner` run with resource limits set by the shell's `ulimit OPTIONS` (`-n 64`: soft and hard
/// open-file limit 64; `-S -n 100`: the soft limit only): `/bin/sh -c 'ulimit OPTIONS && exec
/// "$0" "$@"' PROGRAM ARGS`, same PID as the program.
pub fn with_ulimit(options: &str, inner: &Command) -> Command {
    let mut shell = Command::new("/bin/sh");
    shell
        .arg("-c")
        .arg(format!("ulimit {options} && exec \"$0\" \"$@\""));
    wrap_command(shell, inner)
}

//! Spawning the Strata child: the backend-port pre-check, the exact argument vector, the
//! scrubbed environment, and the parent-death signal (`strata_os::die_with_parent`).
//!
//! # The parent-death pitfall
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not when the process
//! does. The supervisor therefore runs a current-thread tokio runtime on the process's main
//! thread, and [`spawn_backend`] must only be called from async code on that runtime, never from
//! `spawn_blocking` (blocking-pool threads exit after 10 s idle, which would SIGKILL a healthy
//! backend) nor from a multi-thread runtime's worker. Tokio names both kinds of pool thread
//! `tokio-runtime-worker`; a `debug_assert!` catches that case.

use std::ffi::OsString;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sys::signal::Signal;
use strata_os::die_with_parent;

use super::error::StartError;
use super::group::ChildGroup;
use super::spec::LaunchSpec;

/// Variables removed from the inherited environment: the API key must not switch on Strata's
/// authentication (the router talks to it without one), and the socket-activation and
/// notification variables belong to the daemon, not to its child.
pub const SCRUBBED_ENV: [&str; 5] = [
    "STRATA_API_KEY",
    "LISTEN_PID",
    "LISTEN_FDS",
    "LISTEN_FDNAMES",
    "NOTIFY_SOCKET",
];

/// Tokio's default name for both its multi-thread workers and its blocking-pool threads.
const TOKIO_POOL_THREAD: &str = "tokio-runtime-worker";

/// Check that nothing listens on `127.0.0.1:port` by binding it and closing it again (Strata
/// does the same check and would otherwise exit 2 with a message we never see).
pub(crate) fn check_port_free(port: u16) -> Result<(), StartError> {
    match TcpListener::bind((Ipv4Addr::LOCALHOST, port)) {
        Ok(listener) => {
            drop(listener);
            Ok(())
        }
        Err(err) if err.kind() == io::ErrorKind::AddrInUse => Err(StartError::PortInUse { port }),
        Err(source) => Err(StartError::PortCheck { port, source }),
    }
}

/// The arguments after the interpreter, exactly as the backend contract gives them:
/// `-m serve.server --engine strata --config PROFILE --host 127.0.0.1 --port PORT
/// --idle-unload 0 --ready-file READY_PATH`; without a ready file (the `health` readiness
/// mode, for a Strata without that flag) the last two are left out.
pub(crate) fn backend_args(spec: &LaunchSpec, ready_path: Option<&Path>) -> Vec<OsString> {
    let mut args: Vec<OsString> = ["-m", "serve.server", "--engine", "strata", "--config"]
        .iter()
        .map(OsString::from)
        .collect();
    args.push(spec.profile.clone().into_os_string());
    args.extend(["--host", "127.0.0.1", "--port"].iter().map(OsString::from));
    args.push(spec.backend_port.to_string().into());
    args.extend(["--idle-unload", "0"].iter().map(OsString::from));
    if let Some(ready_path) = ready_path {
        args.push("--ready-file".into());
        args.push(ready_path.as_os_str().to_owned());
    }
    args
}

/// Spawn the backend (no shell) in its own process group, with stdio on `/dev/null` (its output
/// could echo profile secrets), `cwd` = `strata_dir`, the environment `base_env` minus
/// [`SCRUBBED_ENV`], and a parent-death SIGKILL.
///
/// `base_env` is explicit so tests can pass a crafted environment without `std::env::set_var`;
/// production passes `std::env::vars_os()`.
pub(crate) fn spawn_backend(
    spec: &LaunchSpec,
    ready_path: Option<&Path>,
    base_env: Vec<(OsString, OsString)>,
) -> Result<ChildGroup, StartError> {
    debug_assert_ne!(
        std::thread::current().name(),
        Some(TOKIO_POOL_THREAD),
        "spawn the backend from the current-thread runtime on the main thread: \
         PR_SET_PDEATHSIG fires when the forking thread exits"
    );
    let mut cmd = Command::new(&spec.python);
    cmd.args(backend_args(spec, ready_path))
        .current_dir(&spec.strata_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .env_clear()
        .envs(base_env);
    for key in SCRUBBED_ENV {
        cmd.env_remove(key);
    }

    die_with_parent(&mut cmd, Signal::SIGKILL);

    let child = cmd.spawn().map_err(StartError::Spawn)?;
    // `std::process::Child` neither kills nor waits on drop; ChildGroup owns the pid from here
    // and does its own waitid/waitpid, so the handle is not needed.
    let group = ChildGroup::adopt(child.id());
    drop(child);
    Ok(group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::spec::Readiness;
    use std::path::PathBuf;
    use std::time::Duration;

    fn spec(port: u16) -> LaunchSpec {
        LaunchSpec {
            model_id: "router-id".into(),
            python: "/usr/bin/python3".into(),
            strata_dir: "/opt/strata".into(),
            profile: "/etc/strata/profile.json".into(),
            upstream_model: "upstream".into(),
            backend_port: port,
            ready_dir_parent: "/run/strata".into(),
            startup: Duration::from_secs(120),
            shutdown: Duration::from_secs(10),
            readiness: Readiness::ReadyFile,
            engine_log: None,
        }
    }

    #[test]
    fn argv_is_exactly_the_contract() {
        let ready = PathBuf::from("/run/strata/s1/ready.json");
        let args = backend_args(&spec(8095), Some(&ready));
        let args: Vec<_> = args.iter().map(|a| a.to_str().unwrap()).collect();
        assert_eq!(
            args,
            [
                "-m",
                "serve.server",
                "--engine",
                "strata",
                "--config",
                "/etc/strata/profile.json",
                "--host",
                "127.0.0.1",
                "--port",
                "8095",
                "--idle-unload",
                "0",
                "--ready-file",
                "/run/strata/s1/ready.json",
            ]
        );
        // The health readiness mode: the same, without the ready file.
        let args = backend_args(&spec(8095), None);
        assert_eq!(args.len(), 12);
        assert_eq!(args.last().unwrap(), "0");
        assert!(!args.iter().any(|a| a == "--ready-file"));
    }

    #[test]
    fn busy_port_is_its_own_error() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let err = check_port_free(port).unwrap_err();
        assert!(matches!(err, StartError::PortInUse { port: p } if p == port));
        assert_eq!(
            err.to_string(),
            format!("backend port {port} is already in use")
        );
        drop(listener);
        check_port_free(port).expect("free once the listener is closed");
    }
}

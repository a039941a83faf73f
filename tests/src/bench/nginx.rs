//! nginx as the benchmark's reference proxy, when an `nginx` binary is on `PATH`.
//!
//! A private `nginx.conf` in a 0700 directory: loopback listeners, one `upstream` block per
//! upstream with a keep-alive pool (`keepalive 64`), `proxy_http_version 1.1` with an empty
//! `Connection` header (what the pool needs), `proxy_buffering off` (SSE passes as it arrives),
//! no access log, pid file, error log and temp paths in the directory. It runs in the
//! foreground (`-g 'daemon off;'`) as a child of the benchmark and is stopped by PID.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::procstat;
use crate::Daemon;
use crate::procs;

/// The `nginx` binary on `PATH`, if any.
pub fn find_nginx() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file())
}

/// `nginx -v` (it prints to stderr), e.g. `nginx/1.22.1`.
pub fn version(nginx: &Path) -> String {
    Command::new(nginx)
        .arg("-v")
        .output()
        .ok()
        .map(|out| {
            String::from_utf8_lossy(&out.stderr)
                .trim()
                .trim_start_matches("nginx version: ")
                .to_owned()
        })
        .unwrap_or_else(|| "nginx (unknown version)".into())
}

/// The config: one server per `(listen, upstream)` pair.
pub fn config(dir: &Path, routes: &[(SocketAddr, SocketAddr)], as_root: bool) -> String {
    let d = dir.display();
    let mut conf = String::new();
    if as_root {
        // Workers would otherwise switch to `nobody`, who cannot enter the 0700 directory.
        conf.push_str("user root root;\n");
    }
    conf.push_str(&format!(
        "worker_processes auto;\nworker_rlimit_nofile 20000;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
         events {{ worker_connections 16384; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000;\n  keepalive_timeout 75s;\n\
         \x20 client_body_temp_path {d}/client_body;\n  proxy_temp_path {d}/proxy_temp;\n\
         \x20 fastcgi_temp_path {d}/fastcgi_temp;\n  uwsgi_temp_path {d}/uwsgi_temp;\n  scgi_temp_path {d}/scgi_temp;\n"
    ));
    for (i, (listen, upstream)) in routes.iter().enumerate() {
        conf.push_str(&format!(
            "  upstream up{i} {{ server {upstream}; keepalive 64; keepalive_requests 1000000; }}\n\
             \x20 server {{\n    listen {listen};\n    location / {{\n      proxy_pass http://up{i};\n\
             \x20     proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n\
             \x20     proxy_buffering off;\n      proxy_read_timeout 600s;\n    }}\n  }}\n"
        ));
    }
    conf.push_str("}\n");
    conf
}

/// A running nginx master and its workers.
pub struct Nginx {
    daemon: Daemon,
    workers: Vec<u32>,
}

impl Nginx {
    /// Writes the config into `dir` (a private directory), starts nginx and waits until every
    /// listener accepts and the workers are up.
    pub fn start(
        nginx: &Path,
        dir: &Path,
        routes: &[(SocketAddr, SocketAddr)],
    ) -> Result<Nginx, String> {
        let as_root = nix::unistd::geteuid().is_root();
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, config(dir, routes, as_root))
            .map_err(|err| format!("write {}: {err}", conf_path.display()))?;
        let mut command = Command::new(nginx);
        command
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.join("error.log"))
            .args(["-g", "daemon off;"]);
        let mut daemon = Daemon::spawn("nginx", command, dir);
        let expected_workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = daemon.try_exit() {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                return Err(format!(
                    "nginx exited with {status}\n{}\n{log}",
                    daemon.stderr_report()
                ));
            }
            let listening = routes.iter().all(|(listen, _)| {
                TcpStream::connect_timeout(listen, Duration::from_secs(1)).is_ok()
            });
            let workers = procstat::children(daemon.pid());
            if listening && workers.len() >= expected_workers {
                return Ok(Nginx { daemon, workers });
            }
            if Instant::now() >= deadline {
                return Err(format!("nginx did not come up\n{}", daemon.stderr_report()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The master's PID.
    pub fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// The workers' PIDs.
    pub fn workers(&self) -> &[u32] {
        &self.workers
    }

    /// Graceful stop: SIGQUIT to the master, then SIGKILL to whatever is left after 5 s.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.daemon.is_running() {
            self.daemon.kill(Signal::SIGQUIT);
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.daemon.is_running() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if self.daemon.is_running() {
            // Still the master's children (it has not exited), so these PIDs are its workers.
            for worker in &self.workers {
                if procstat::ppid(*worker) == Some(self.daemon.pid()) {
                    procs::signal(*worker, Signal::SIGKILL);
                }
            }
        }
        self.daemon.kill_and_reap();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.shutdown();
    }
}

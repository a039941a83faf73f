//! [`SocketHolder`]: one listening socket kept open across proxy processes, the way systemd's
//! socket unit keeps it across service restarts (`tests/socket_holder.py`).
//!
//! The holder binds the config's `listen` address and starts each proxy with that socket at fd 3
//! (`LISTEN_PID`, `LISTEN_FDS=1`). While no proxy accepts, connections wait in the one backlog
//! for the next proxy. Dropping the holder closes its input, which makes it SIGKILL and reap
//! every proxy still running, then exit; the holder itself is killed by PID too.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::python::python;

/// A running `socket_holder.py`.
#[derive(Debug)]
pub struct SocketHolder {
    child: Child,
    input: Option<ChildStdin>,
    output: BufReader<ChildStdout>,
    addr: SocketAddr,
}

impl SocketHolder {
    /// Binds `addr` (a free loopback port) and waits for `BOUND`.
    pub fn bind(addr: SocketAddr) -> SocketHolder {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("socket_holder.py");
        let mut child = Command::new(python())
            .arg(script)
            .arg("--bind")
            .arg(addr.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn socket_holder.py");
        let input = child.stdin.take();
        let output = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut holder = SocketHolder {
            child,
            input,
            output,
            addr,
        };
        let line = holder.line();
        assert!(line.starts_with("BOUND "), "socket_holder: {line}");
        holder
    }

    /// The held listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.output
            .read_line(&mut line)
            .expect("read from socket_holder");
        assert!(!line.is_empty(), "socket_holder exited");
        line.trim_end().to_owned()
    }

    fn command(&mut self, command: serde_json::Value) -> String {
        let input = self.input.as_mut().expect("holder input open");
        writeln!(input, "{command}").expect("write to socket_holder");
        input.flush().expect("flush socket_holder input");
        self.line()
    }

    /// Starts `program args` on the held socket; its output goes to `log_dir/NAME.stdout` and
    /// `NAME.stderr`. Returns its PID (also the proxy's: the launcher execs in place).
    pub fn start(&mut self, name: &str, program: &Path, args: &[&str], log_dir: &Path) -> u32 {
        let mut argv = vec![program.to_string_lossy().into_owned()];
        argv.extend(args.iter().map(|arg| arg.to_string()));
        let answer = self.command(json!({
            "start": argv,
            "stdout": log_dir.join(format!("{name}.stdout")),
            "stderr": log_dir.join(format!("{name}.stderr")),
        }));
        answer
            .strip_prefix("STARTED ")
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("socket_holder: {answer}"))
    }

    /// Waits (up to `timeout`) for child `pid` to exit; its exit code (negative: the signal),
    /// or `None` on timeout.
    pub fn wait(&mut self, pid: u32, timeout: Duration) -> Option<i32> {
        let answer = self.command(json!({"wait": pid, "timeout": timeout.as_secs_f64()}));
        if answer.starts_with("TIMEOUT ") {
            return None;
        }
        answer
            .rsplit(' ')
            .next()
            .and_then(|code| code.parse().ok())
            .or_else(|| panic!("socket_holder: {answer}"))
    }

    /// Stops the holder (and any child still running); returns the holder's exit status.
    pub fn stop(mut self) -> ExitStatus {
        self.input.take();
        self.child.wait().expect("wait for socket_holder")
    }
}

impl Drop for SocketHolder {
    fn drop(&mut self) {
        // End of input: the holder SIGKILLs and reaps its children, then exits.
        self.input.take();
        if matches!(self.child.try_wait(), Ok(None)) {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while std::time::Instant::now() < deadline {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    return;
                }
                std::thread::sleep(crate::poll::POLL_INTERVAL);
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

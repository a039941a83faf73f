//! Running a command to completion with a deadline: a hung command fails the test (and is
//! SIGKILLed by PID) instead of hanging it.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::running::Running;

/// Runs `command` (stdin from /dev/null, output captured) and waits at most `timeout`; on
/// timeout it SIGKILLs the process by PID and returns an error.
pub fn output_within(mut command: Command, timeout: Duration) -> Result<Output, String> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("spawn {command:?}: {err}"))?;
    // Both pipes are drained while the command runs, so it never blocks on a full one.
    let stdout = child.stdout.take().map(read_all);
    let stderr = child.stderr.take().map(read_all);
    let mut process = Running::new(format!("{command:?}"), child).kill_on_drop();
    let Some(status) = process.wait_exit_within(timeout) else {
        process.kill_and_reap();
        return Err(format!("{command:?} did not finish within {timeout:?}"));
    };
    let joined = |reader: Option<JoinHandle<Vec<u8>>>| {
        reader
            .map(|handle| handle.join().unwrap_or_default())
            .unwrap_or_default()
    };
    Ok(Output {
        status,
        stdout: joined(stdout),
        stderr: joined(stderr),
    })
}

/// [`output_within`] that panics when the command cannot be run or does not finish in time.
pub fn run(command: Command, timeout: Duration) -> Output {
    output_within(command, timeout).unwrap_or_else(|err| panic!("{err}"))
}

fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

//! [`FakeLog`]: the fake backend's JSON-lines event log (`fake.log` in the test directory).
//!
//! Every backend process a test's supervisor starts appends to the same file: `start` (with
//! `pid`, `model_name`, `env_keys`, `argv`), `ready`, `request`, `cancel`, `stop`, `exit`, ...
//! (see `tests/fake_strata/README.md`). Line order is the order the events happened in.
//!
//! The log is also how a test finds the backend processes it caused: [`FakeLog::live_backends`]
//! lists the started servers and their engines (`engine_start`) still alive (zombies excluded; a
//! PID is only counted while its command line still names this test's directory, so a recycled
//! PID is never blamed or killed).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;

use crate::poll::poll_until;
use crate::procs;
use crate::tempdir::TempDir;

/// A reader of one fake log. Cheap: every query re-reads the file.
#[derive(Debug, Clone)]
pub struct FakeLog {
    path: PathBuf,
    /// A path every backend of this test has on its command line (the test directory).
    marker: PathBuf,
    /// Keeps the test directory (and so the log) alive as long as this reader.
    _dir: Option<TempDir>,
}

/// One `start` event.
#[derive(Debug, Clone, PartialEq)]
pub struct StartEvent {
    /// Position of the event in the log (0-based over all events).
    pub index: usize,
    pub pid: u32,
    /// The profile's `model_name` (the config's `upstream_model`).
    pub model_name: String,
    /// Names (never values) of the backend's environment variables.
    pub env_keys: Vec<String>,
    pub argv: Vec<String>,
}

impl FakeLog {
    /// The log at `path`; its directory is the marker for [`FakeLog::live_backends`].
    pub fn new(path: impl Into<PathBuf>) -> FakeLog {
        let path = path.into();
        let marker = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        FakeLog {
            path,
            marker,
            _dir: None,
        }
    }

    /// The log at `path` inside `dir`, keeping `dir` alive as long as this reader.
    pub fn in_dir(path: impl Into<PathBuf>, dir: &TempDir) -> FakeLog {
        FakeLog {
            _dir: Some(dir.clone()),
            ..FakeLog::new(path)
        }
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every complete event so far (an unfinished last line is skipped); empty if the file does
    /// not exist yet.
    pub fn events(&self) -> Vec<Value> {
        let Ok(text) = std::fs::read_to_string(&self.path) else {
            return Vec::new();
        };
        text.split_inclusive('\n')
            .filter(|line| line.ends_with('\n'))
            .filter_map(|line| serde_json::from_str(line.trim_end()).ok())
            .collect()
    }

    /// Events named `name`, in order.
    pub fn events_named(&self, name: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|event| event["event"] == name)
            .collect()
    }

    /// `(index, event)` of every event of process `pid`, in order.
    pub fn events_of(&self, pid: u32) -> Vec<(usize, Value)> {
        self.events()
            .into_iter()
            .enumerate()
            .filter(|(_, event)| event["pid"].as_u64() == Some(u64::from(pid)))
            .collect()
    }

    /// Index of the first event `name` of process `pid`.
    pub fn index_of(&self, pid: u32, name: &str) -> Option<usize> {
        self.events_of(pid)
            .into_iter()
            .find(|(_, event)| event["event"] == name)
            .map(|(index, _)| index)
    }

    /// Every `start` event, in order.
    pub fn starts(&self) -> Vec<StartEvent> {
        self.events()
            .into_iter()
            .enumerate()
            .filter(|(_, event)| event["event"] == "start")
            .map(|(index, event)| StartEvent {
                index,
                pid: event["pid"].as_u64().unwrap_or_default() as u32,
                model_name: event["model_name"].as_str().unwrap_or_default().to_owned(),
                env_keys: strings(&event["env_keys"]),
                argv: strings(&event["argv"]),
            })
            .collect()
    }

    /// `start` events of backends serving `model_name` (an upstream model name).
    pub fn starts_for(&self, model_name: &str) -> Vec<StartEvent> {
        self.starts()
            .into_iter()
            .filter(|start| start.model_name == model_name)
            .collect()
    }

    /// How many backends were started for `model_name`.
    pub fn start_count(&self, model_name: &str) -> usize {
        self.starts_for(model_name).len()
    }

    /// PIDs of every backend started so far.
    pub fn pids(&self) -> Vec<u32> {
        self.starts().into_iter().map(|start| start.pid).collect()
    }

    /// PIDs of every engine the backends started (`engine_start`), in order.
    pub fn engine_pids(&self) -> Vec<u32> {
        self.events_named("engine_start")
            .iter()
            .filter_map(|event| event["engine_pid"].as_u64())
            .map(|pid| pid as u32)
            .collect()
    }

    /// PIDs of the engines backend `pid` started, in order.
    pub fn engines_of(&self, pid: u32) -> Vec<u32> {
        self.events_of(pid)
            .into_iter()
            .filter(|(_, event)| event["event"] == "engine_start")
            .filter_map(|(_, event)| event["engine_pid"].as_u64())
            .map(|pid| pid as u32)
            .collect()
    }

    /// How engine `engine_pid` said it ended (`engine_exit`'s `how`: `quit`, `eof`, `sigterm`,
    /// ...), or `None` if it has not logged its end (still running, or SIGKILLed).
    pub fn engine_exit(&self, engine_pid: u32) -> Option<String> {
        self.events_of(engine_pid)
            .into_iter()
            .find(|(_, event)| event["event"] == "engine_exit")
            .and_then(|(_, event)| event["how"].as_str().map(str::to_owned))
    }

    /// Started backends and their engines that are still alive (not zombies).
    pub fn live_backends(&self) -> Vec<u32> {
        self.pids()
            .into_iter()
            .chain(self.engine_pids())
            .filter(|pid| procs::is_alive_with(*pid, &self.marker))
            .collect()
    }

    /// Asserts that no backend started by this test is alive right now.
    pub fn assert_no_backends_left(&self) {
        let live = self.live_backends();
        assert!(
            live.is_empty(),
            "backend processes still running: {live:?}\n{}",
            self.dump()
        );
    }

    /// Waits (bounded) until no backend started by this test is alive.
    pub fn wait_no_backends_left(&self, timeout: Duration) {
        poll_until(
            timeout,
            format_args!("every backend of {} to exit", self.path.display()),
            || self.live_backends().is_empty(),
        );
    }

    /// Cleanup: SIGKILLs the process group of every live backend of this test.
    pub fn kill_leftovers(&self) {
        for pid in self.live_backends() {
            procs::signal_group(pid, Signal::SIGKILL);
            procs::signal(pid, Signal::SIGKILL);
        }
    }

    /// The whole log, for failure messages.
    pub fn dump(&self) -> String {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => format!("--- {} ---\n{text}", self.path.display()),
            Err(err) => format!("--- {}: {err} ---", self.path.display()),
        }
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

//! Records for tickets whose proxy connection closed before their `Finish`.
//!
//! The rule: every ticket the supervisor accepted gets exactly one record.
//! Normally the proxy sends it with the ticket's `Finish`. When a proxy's
//! connection closes with tickets still open (the engine's ledger knows
//! which), the supervisor makes a substitute record for each
//! ([`OpenTicket::substitute_record`]: `reason: "shutdown"`, `status: null`).
//!
//! A proxy that merely lost the link, and still runs, keeps those requests
//! and their records and sends the records when it reconnects. So while the
//! proxy process lives, its substitutes wait here: a real record that
//! arrives replaces its substitute. Once the process is gone, whatever is
//! still waiting is written. A real record that comes after its substitute
//! was written is dropped, so a request never has two.
//!
//! [`OpenTicket::substitute_record`]: crate::engine::OpenTicket::substitute_record

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use strata_protocol::wire::SubmittedRecord;

/// How often a waiting batch checks whether its proxy process is gone.
pub const PEER_POLL: Duration = Duration::from_millis(100);

/// How many written substitutes are remembered for dropping a late real
/// record. A late record can only come from a proxy that lived through a
/// lost link; far more than one proxy's open tickets.
const WRITTEN_REMEMBERED: usize = 65_536;

/// Whether a record a proxy sent should be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    Store,
    /// Its substitute was already written.
    Duplicate,
}

/// Substitutes waiting for their proxy, and those already written.
pub struct Orphans {
    state: Mutex<State>,
    /// Whether a process still runs (a zombie does not); replaced in tests.
    is_alive: fn(u32) -> bool,
}

#[derive(Default)]
struct State {
    /// By request ID (which names the instance, so a record from an older
    /// supervisor's request can never match).
    /// Each with the PID of the proxy that held it.
    waiting: HashMap<String, (u32, SubmittedRecord)>,
    written: HashSet<String>,
    written_order: VecDeque<String>,
}

impl Default for Orphans {
    fn default() -> Self {
        Orphans::with_liveness(process_is_alive)
    }
}

impl Orphans {
    pub fn with_liveness(is_alive: fn(u32) -> bool) -> Orphans {
        Orphans {
            state: Mutex::new(State::default()),
            is_alive,
        }
    }

    pub fn is_alive(&self, pid: u32) -> bool {
        (self.is_alive)(pid)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent across a panic (every change is one
        // insert or remove), so a poisoned lock is still usable.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Called for every record a proxy sends.
    pub fn claim(&self, request_id: &str) -> Claim {
        let mut state = self.state();
        if state.waiting.remove(request_id).is_some() {
            Claim::Store
        } else if state.written.contains(request_id) {
            Claim::Duplicate
        } else {
            Claim::Store
        }
    }

    /// Makes the substitutes of proxy `pid` wait for their real records;
    /// returns their IDs.
    pub fn wait(&self, pid: u32, records: Vec<SubmittedRecord>) -> Vec<String> {
        let mut state = self.state();
        records
            .into_iter()
            .map(|record| {
                let id = record.record.request_id.clone();
                state.waiting.insert(id.clone(), (pid, record));
                id
            })
            .collect()
    }

    /// Whether every one of `ids` was replaced by its real record.
    pub fn all_claimed(&self, ids: &[String]) -> bool {
        let state = self.state();
        ids.iter().all(|id| !state.waiting.contains_key(id))
    }

    /// Takes the substitutes of `ids` still waiting, to be written now, and
    /// remembers them as written.
    pub fn take_unclaimed(&self, ids: &[String]) -> Vec<SubmittedRecord> {
        let mut state = self.state();
        let taken: Vec<SubmittedRecord> = ids
            .iter()
            .filter_map(|id| state.waiting.remove(id))
            .map(|(_, record)| record)
            .collect();
        for record in &taken {
            state.remember_written(record.record.request_id.clone());
        }
        taken
    }

    /// At exit: takes the waiting substitutes whose proxy is gone (a proxy
    /// that still runs keeps the real records and sends them to the next
    /// supervisor), remembering them as written.
    pub fn take_of_gone_proxies(&self) -> Vec<SubmittedRecord> {
        let mut state = self.state();
        let gone: Vec<String> = state
            .waiting
            .iter()
            .filter(|(_, (pid, _))| !(self.is_alive)(*pid))
            .map(|(id, _)| id.clone())
            .collect();
        let mut taken: Vec<SubmittedRecord> = gone
            .iter()
            .filter_map(|id| state.waiting.remove(id))
            .map(|(_, record)| record)
            .collect();
        taken.sort_by_key(|record| record.record.arrival_seq);
        for record in &taken {
            state.remember_written(record.record.request_id.clone());
        }
        taken
    }

    /// Remembers substitutes written at once (their proxy was already gone).
    pub fn written(&self, records: &[SubmittedRecord]) {
        let mut state = self.state();
        for record in records {
            state.remember_written(record.record.request_id.clone());
        }
    }

    /// Substitutes waiting right now (tests and the exit path).
    pub fn waiting(&self) -> usize {
        self.state().waiting.len()
    }
}

impl State {
    fn remember_written(&mut self, id: String) {
        if self.written_order.len() == WRITTEN_REMEMBERED
            && let Some(oldest) = self.written_order.pop_front()
        {
            self.written.remove(&oldest);
        }
        self.written.insert(id.clone());
        self.written_order.push_back(id);
    }
}

/// Whether process `pid` runs: it exists and is not a zombie (a killed
/// proxy its parent has not reaped yet can send nothing more).
pub fn process_is_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state ...`: comm may contain anything, so the state is
    // the first field after the last `)`.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X' | 'x') | None)
}

#[cfg(test)]
mod tests {
    use strata_test_support::record_json;

    use super::*;

    fn record(request_id: &str) -> SubmittedRecord {
        SubmittedRecord {
            record: serde_json::from_value(record_json(request_id)).expect("a valid record"),
            tier: strata_protocol::wire::ServiceTier::Default,
        }
    }

    #[test]
    fn a_real_record_replaces_its_waiting_substitute() {
        let orphans = Orphans::default();
        let ids = orphans.wait(1, vec![record("i-1"), record("i-2")]);
        assert_eq!(orphans.claim("i-1"), Claim::Store);
        assert!(!orphans.all_claimed(&ids));
        let written = orphans.take_unclaimed(&ids);
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].record.request_id, "i-2");
        assert_eq!(orphans.waiting(), 0);
    }

    #[test]
    fn a_real_record_after_its_written_substitute_is_a_duplicate() {
        let orphans = Orphans::default();
        let ids = orphans.wait(1, vec![record("i-1")]);
        assert_eq!(orphans.take_unclaimed(&ids).len(), 1);
        assert_eq!(orphans.claim("i-1"), Claim::Duplicate);
        orphans.written(&[record("i-3")]);
        assert_eq!(orphans.claim("i-3"), Claim::Duplicate);
        // Records of other requests are stored as always.
        assert_eq!(orphans.claim("i-2"), Claim::Store);
    }

    /// At exit, only the substitutes of proxies that are gone are written.
    #[test]
    fn at_exit_only_the_substitutes_of_gone_proxies_are_taken() {
        let orphans = Orphans::with_liveness(|pid| pid == 7);
        orphans.wait(7, vec![record("i-1")]);
        orphans.wait(8, vec![record("i-2"), record("i-3")]);
        let taken: Vec<String> = orphans
            .take_of_gone_proxies()
            .into_iter()
            .map(|record| record.record.request_id)
            .collect();
        assert_eq!(taken.len(), 2);
        assert!(taken.contains(&"i-2".to_owned()) && taken.contains(&"i-3".to_owned()));
        assert_eq!(orphans.waiting(), 1);
        assert_eq!(orphans.claim("i-2"), Claim::Duplicate);
    }

    #[test]
    fn the_memory_of_written_substitutes_is_bounded() {
        let orphans = Orphans::default();
        let many: Vec<SubmittedRecord> = (0..=WRITTEN_REMEMBERED)
            .map(|n| record(&format!("i-{n}")))
            .collect();
        orphans.written(&many);
        // The oldest is forgotten, the newest remembered.
        assert_eq!(orphans.claim("i-0"), Claim::Store);
        assert_eq!(
            orphans.claim(&format!("i-{WRITTEN_REMEMBERED}")),
            Claim::Duplicate
        );
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_not() {
        assert!(process_is_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!process_is_alive(pid));
    }

    /// An exited child its parent has not reaped yet is a zombie: gone.
    #[test]
    fn a_zombie_is_not_alive() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // Poll until the kernel shows it exited (still unreaped).
        while process_is_alive(pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "the child never exited"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        child.wait().unwrap();
    }
}

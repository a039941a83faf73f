//! Helpers shared by the request-log writer tests (`accounting_writer`, `accounting_full_disk`):
//! padded JSON test lines, reading a log file back, and their deadline. Temporary directories
//! and polling come from strata-test-support.
#![allow(dead_code)]

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// Bound for anything a test waits for (with `poll_until`); a passing wait returns as soon as its
/// condition holds.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A JSON object text of exactly `len` bytes carrying `seq`.
pub fn padded(seq: u64, len: usize) -> String {
    let head = format!("{{\"seq\":{seq},\"pad\":\"");
    let tail = "\"}";
    let pad = len
        .checked_sub(head.len() + tail.len())
        .expect("len too small");
    format!("{head}{}{tail}", "x".repeat(pad))
}

/// The `seq` of every complete line of `path`; panics on a partial or non-JSON line.
pub fn file_seqs(path: &Path) -> Vec<u64> {
    let text = fs::read_to_string(path).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "{} ends in a partial line",
        path.display()
    );
    text.lines()
        .map(|l| {
            let value: Value = serde_json::from_str(l).expect("line is JSON");
            value["seq"].as_u64().expect("line has seq")
        })
        .collect()
}

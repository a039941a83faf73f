//! The JSONL file and `/metrics.request_log` through the real binaries.
//!
//! The writer's own tests (`supervisor/tests/accounting_writer.rs`, and the unit tests in
//! `supervisor/src/accounting/writer.rs`) cover rotation, zero backups, oversized lines, the
//! torn-line repair, 0600 and failing paths in detail on the writer alone; here each is checked
//! once end to end, where it matters that the supervisor wires it up: small-size rotation with
//! one and zero backups (and the documented shell recipe that reads the retained files in
//! order), the torn last line left by an earlier run, failing paths (a directory, a device, a
//! parent replaced after start) while serving continues and the ring stays intact, and every
//! `/metrics.request_log` figure.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use strata_e2e::accounting::{
    Record, all_records, chat_request, jsonl_lines, page, rejections, set_config_keys, wait_jsonl,
    wait_records, with_request_log,
};
use strata_e2e::stack::Stack;
use strata_e2e::{ConfigBuilder, DEADLINE, ModelSpec, poll_for, poll_until};
use strata_protocol::api::RequestLogMetrics;

const A: &str = "flash-a";

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn backup(path: &Path, k: u32) -> PathBuf {
    PathBuf::from(format!("{}.{k}", path.display()))
}

/// The documented recipe for reading the retained files oldest first
/// (docs/accounting.md#the-retained-files), run by `sh`.
fn recipe(path: &Path, rotate_files: u32) -> String {
    let script = format!(
        "for f in $(seq {rotate_files} -1 1); do cat {path}.$f 2>/dev/null; done; cat {path}",
        path = path.display()
    );
    let out = Command::new("sh").arg("-c").arg(&script).output().unwrap();
    assert!(out.status.success(), "{script}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Waits until the active file's last line is record `seq` (the writer is asynchronous).
fn wait_last_line(path: &Path, seq: u64) {
    poll_until(
        DEADLINE,
        format!("seq {seq} at the end of {}", path.display()),
        || {
            jsonl_lines(path)
                .last()
                .is_some_and(|line| Record::new(line).seq == seq)
        },
    );
}

#[test]
fn rotation_at_small_sizes_keeps_a_bounded_ordered_tail() {
    for rotate_files in [1u32, 0] {
        let mut config = ConfigBuilder::new("acct-rotate")
            .model(ModelSpec::new(A))
            .wait_when_busy(true)
            .build();
        let log = with_request_log(
            &mut config,
            json!({"request_log_max_bytes": 4096, "request_log_rotate_files": rotate_files}),
        );
        let stack = Stack::start(config);
        let addr = stack.addr();
        // About 800 bytes each: a 4096-byte file holds five, so 20 rotate several times.
        let n = 20u64;
        rejections(addr, n as usize);
        let records = wait_records(addr, n);
        wait_last_line(&log, n);

        let mut files = vec![log.clone()];
        if rotate_files == 1 {
            files.insert(0, backup(&log, 1));
        }
        assert!(
            !backup(&log, rotate_files + 1).exists(),
            "beyond the retention"
        );
        let mut lines = Vec::new();
        for file in &files {
            let size = std::fs::metadata(file).unwrap().len();
            assert!(size <= 4096, "{} has {size} bytes", file.display());
            assert_eq!(mode(file), 0o600, "{}", file.display());
            lines.extend(jsonl_lines(file));
        }
        // The retained lines are the newest records, oldest first, each whole and unchanged.
        assert!(
            !lines.is_empty() && (lines.len() as u64) < n,
            "{}",
            lines.len()
        );
        // The active file's first line is the one that did not fit: it caused the last
        // rotation (moved to .1, or truncated with zero backups).
        let active = jsonl_lines(&log);
        if rotate_files == 1 {
            let backup_size = std::fs::metadata(backup(&log, 1)).unwrap().len();
            assert!(
                backup_size + active[0].len() as u64 + 1 > 4096,
                "{backup_size}"
            );
        }
        let first = n + 1 - lines.len() as u64;
        for (line, seq) in lines.iter().zip(first..=n) {
            assert_eq!(line, &records[(seq - 1) as usize].raw);
        }
        // The documented recipe prints exactly these, in order.
        let text = recipe(&log, rotate_files);
        assert_eq!(
            text,
            lines.iter().map(|l| format!("{l}\n")).collect::<String>()
        );
        stack.stop();
    }
}

#[test]
fn a_torn_last_line_from_an_earlier_run_is_discarded_before_appending() {
    let mut config = ConfigBuilder::new("acct-torn")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let log = with_request_log(&mut config, json!({}));
    std::fs::write(&log, b"{\"earlier\":1}\n{\"earlier\":2,\"cut\":").unwrap();
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stack = Stack::start(config);
    let addr = stack.addr();
    rejections(addr, 1);
    let records = wait_records(addr, 1);
    let lines = wait_jsonl(&log, 2);
    assert_eq!(
        lines,
        ["{\"earlier\":1}".to_owned(), records[0].raw.clone()]
    );
    // The file is not replayed into the ring.
    assert_eq!(all_records(addr).len(), 1);
    stack.stop();
}

/// Waits until `/metrics.request_log.write_errors` is at least `n` and returns it.
fn wait_write_errors(stack: &Stack, n: u64) -> u64 {
    poll_for(DEADLINE, format!("write_errors >= {n}"), || {
        let errors = stack
            .metrics()
            .request_log
            .write_errors
            .expect("write_errors with the supervisor up");
        (errors >= n).then_some(errors)
    })
}

#[test]
fn failing_log_paths_count_errors_while_serving_and_the_ring_go_on() {
    enum Failure {
        /// The configured path is a directory.
        Directory,
        /// The configured path is a device that is always full.
        DevFull,
        /// The log's directory is replaced by a regular file after two good lines.
        ParentReplaced,
    }
    for failure in [
        Failure::Directory,
        Failure::DevFull,
        Failure::ParentReplaced,
    ] {
        let mut config = ConfigBuilder::new("acct-fail")
            .model(ModelSpec::new(A))
            .wait_when_busy(true)
            .build();
        let log = with_request_log(&mut config, json!({}));
        match failure {
            Failure::Directory => std::fs::create_dir(&log).unwrap(),
            Failure::DevFull => {
                set_config_keys(&mut config, json!({"request_log_path": "/dev/full"}));
            }
            Failure::ParentReplaced => {}
        }
        let stack = Stack::start(config);
        let addr = stack.addr();
        let mut served = 0u64;
        let mut serve = |n: usize| {
            for _ in 0..n {
                stack
                    .chat(&chat_request(A, false, "x", Value::Null))
                    .expect_status(200);
                served += 1;
            }
            wait_records(addr, served)
        };
        if let Failure::ParentReplaced = failure {
            serve(2);
            wait_jsonl(&log, 2);
            let dir = log.parent().unwrap();
            std::fs::rename(dir, dir.with_file_name("log-moved")).unwrap();
            std::fs::write(dir, b"not a directory").unwrap();
        }
        let before = stack
            .metrics()
            .request_log
            .write_errors
            .expect("write_errors with the supervisor up");
        serve(3);
        let after_three = wait_write_errors(&stack, before + 3);
        // Serving goes on, and so do the errors; the ring has every record.
        let records = serve(3);
        wait_write_errors(&stack, after_three + 3);
        assert_eq!(records.len() as u64, served);
        assert!(records.iter().all(|r| r.success));
        let metrics = stack.metrics().request_log;
        assert_eq!(metrics.records_in_ring, Some(served), "{metrics:?}");
        assert_eq!(metrics.next_seq, Some(served + 1), "{metrics:?}");
        assert_eq!(stack.get("/health").status, 200);
        stack.stop();
    }
}

#[test]
fn metrics_report_every_request_log_figure() {
    // Defaults, without a file.
    let config = ConfigBuilder::new("acct-metrics")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let stack = Stack::start(config);
    let metrics = stack.metrics().request_log;
    let instance = page(stack.addr(), "").instance_id().to_owned();
    assert_eq!(
        metrics,
        RequestLogMetrics {
            path: None,
            max_bytes: 16777216,
            rotate_files: 3,
            capacity: 2048,
            write_errors: Some(0),
            write_drops: Some(0),
            evicted: Some(0),
            records_in_ring: Some(0),
            next_seq: Some(1),
            instance_id: Some(instance),
        }
    );
    stack.stop();

    // Configured, after some traffic that overflows the ring.
    let mut config = ConfigBuilder::new("acct-metrics")
        .model(ModelSpec::new(A))
        .wait_when_busy(true)
        .build();
    let log = with_request_log(
        &mut config,
        json!({"request_log_max_bytes": 8192, "request_log_rotate_files": 2,
               "request_log_capacity": 5}),
    );
    let mut stack = Stack::start(config);
    let addr = stack.addr();
    rejections(addr, 7);
    wait_records(addr, 7);
    wait_last_line(&log, 7);
    let instance = page(addr, "").instance_id().to_owned();
    assert_eq!(stack.status().instance_id, instance);
    let last_seq = page(addr, "limit=1").next_seq();
    let metrics = stack.metrics().request_log;
    let path = Some(log.display().to_string());
    assert_eq!(
        metrics,
        RequestLogMetrics {
            path: path.clone(),
            max_bytes: 8192,
            rotate_files: 2,
            capacity: 5,
            write_errors: Some(0),
            write_drops: Some(0),
            evicted: Some(2),
            records_in_ring: Some(5),
            next_seq: Some(last_seq + 1),
            instance_id: Some(instance),
        }
    );

    // Without the supervisor: the config values stay, its counters are unknown (null), and
    // /requests answers 503 rather than an empty page.
    stack.supervisor().daemon().kill(Signal::SIGKILL);
    stack.supervisor().daemon().wait_exit(DEADLINE);
    poll_until(DEADLINE, "the proxy to notice", || {
        stack.get("/health").status == 503
    });
    let metrics = stack.metrics().request_log;
    assert_eq!(
        metrics,
        RequestLogMetrics {
            path,
            max_bytes: 8192,
            rotate_files: 2,
            capacity: 5,
            write_errors: None,
            write_drops: None,
            evicted: None,
            records_in_ring: None,
            next_seq: None,
            instance_id: None,
        }
    );
    let response = stack.get("/requests?after=0");
    assert_eq!(response.status, 503, "{response}");
    assert_eq!(response.error().code, "supervisor_unavailable");
    stack.kill_proxy(Signal::SIGTERM);
    stack.wait_proxy_exit(DEADLINE);
}

//! Tests of `strata_supervisor::accounting`: the JSONL request-log writer (rotation, retention,
//! 0600 files, torn-line recovery, failures, queue overflow, shutdown) and the `Accounting`
//! store under concurrent submitters.
//!
//! Every test uses a private 0700 temporary directory and waits by polling file contents or
//! counters against a bounded deadline (or by `shutdown`, which returns as soon as the writer is
//! done), never by fixed sleeps. Tests that push thousands of synced lines use `/dev/shm` when
//! available: `sync_data` per line on a disk-backed `/tmp` costs milliseconds.

mod common;

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{DEADLINE, file_seqs, padded};
use serde_json::Value;
use strata_supervisor::accounting::{
    Accounting, RequestLogWriter, SHUTDOWN_GRACE, WriterStats, backup_path, retained_files,
};
use strata_test_support::{TempDir, poll_until};

const MAX_BYTES: u64 = 4096;
/// Bytes per test line including its '\n'; 13 fit in 4096 bytes (13 * 300 = 3900).
const LINE_BYTES: usize = 300;
const LINES_PER_FILE: u64 = 13;
/// Generous: `shutdown` returns as soon as the writer has drained its queue.
const DRAIN: Duration = Duration::from_secs(60);

// ---- helpers ------------------------------------------------------------------------------

/// A standard test line: `LINE_BYTES` with its newline.
fn line(seq: u64) -> Arc<str> {
    Arc::from(padded(seq, LINE_BYTES - 1))
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Enqueues `lines` and asserts no call blocked (each is a `try_send`).
fn enqueue_all(writer: &RequestLogWriter, lines: impl IntoIterator<Item = Arc<str>>) {
    let started = Instant::now();
    for l in lines {
        writer.enqueue(l);
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "enqueue blocked for {:?}",
        started.elapsed()
    );
}

fn total_bytes(files: &[PathBuf]) -> u64 {
    files.iter().map(|f| fs::metadata(f).unwrap().len()).sum()
}

/// Named `accounting` so that `cargo test accounting` selects these tests.
mod accounting {
    use super::*;

    // ---- rotation and retention ---------------------------------------------------------------

    #[test]
    fn rotation_shifts_backups_and_replaces_the_oldest() {
        let dir = TempDir::new("rotate");
        let path = dir.path().join("requests.jsonl");
        let writer = RequestLogWriter::start(path.clone(), MAX_BYTES, 3);

        // 100 lines fill files of 13 lines: 1-13, 14-26, ..., 79-91, 92-100. Only the newest
        // three full files survive as backups.
        enqueue_all(&writer, (1..=100).map(line));
        writer.shutdown(DRAIN);

        assert_eq!(file_seqs(&path), (92..=100).collect::<Vec<_>>());
        assert_eq!(
            file_seqs(&backup_path(&path, 1)),
            (79..=91).collect::<Vec<_>>()
        );
        assert_eq!(
            file_seqs(&backup_path(&path, 2)),
            (66..=78).collect::<Vec<_>>()
        );
        assert_eq!(
            file_seqs(&backup_path(&path, 3)),
            (53..=65).collect::<Vec<_>>()
        );
        assert!(!backup_path(&path, 4).exists());

        let files = retained_files(&path, 3);
        assert_eq!(
            files,
            vec![
                backup_path(&path, 3),
                backup_path(&path, 2),
                backup_path(&path, 1),
                path.clone()
            ]
        );
        // Reading the retained files oldest first yields one contiguous run of records.
        let all: Vec<u64> = files.iter().flat_map(|f| file_seqs(f)).collect();
        assert_eq!(all, (53..=100).collect::<Vec<_>>());
        for f in &files {
            let len = fs::metadata(f).unwrap().len();
            assert!(len <= MAX_BYTES, "{} is {len} bytes", f.display());
        }
        assert!(total_bytes(&files) <= MAX_BYTES * 4);
    }

    #[test]
    fn retention_stays_bounded_over_many_rotations() {
        let dir = TempDir::new("retention");
        let path = dir.path().join("requests.jsonl");
        let writer = RequestLogWriter::start(path.clone(), MAX_BYTES, 2);
        enqueue_all(&writer, (1..=200).map(line));
        writer.shutdown(DRAIN);

        let files = retained_files(&path, 2);
        assert_eq!(files.len(), 3);
        assert!(!backup_path(&path, 3).exists());
        assert!(total_bytes(&files) <= MAX_BYTES * 3);
        let all: Vec<u64> = files.iter().flat_map(|f| file_seqs(f)).collect();
        // 200 = 15 * 13 + 5: the active file holds 196-200, the backups the two files before.
        assert_eq!(all, (170..=200).collect::<Vec<_>>());
        for f in &files[..2] {
            assert_eq!(file_seqs(f).len() as u64, LINES_PER_FILE);
        }
    }

    #[test]
    fn zero_backups_truncates_the_active_file() {
        let dir = TempDir::new("zero-backups");
        let path = dir.path().join("requests.jsonl");
        let writer = RequestLogWriter::start(path.clone(), MAX_BYTES, 0);
        // Truncations before lines 14 and 27.
        enqueue_all(&writer, (1..=30).map(line));
        writer.shutdown(DRAIN);

        assert_eq!(file_seqs(&path), (27..=30).collect::<Vec<_>>());
        assert!(!backup_path(&path, 1).exists());
        assert_eq!(retained_files(&path, 0), vec![path.clone()]);
        assert_eq!(mode(&path), 0o600);
    }

    #[test]
    fn oversized_line_is_dropped_and_counted_and_an_exact_fit_is_kept() {
        let dir = TempDir::new("oversized");
        let path = dir.path().join("requests.jsonl");
        let writer = RequestLogWriter::start(path.clone(), MAX_BYTES, 1);

        enqueue_all(
            &writer,
            [
                line(1),
                line(2),
                // 4096 bytes + '\n' > max_bytes: dropped.
                Arc::from(padded(3, MAX_BYTES as usize)),
                line(4),
            ],
        );
        poll_until(DEADLINE, "lines around the oversized one", || {
            writer.stats().lines_written == 3
        });
        assert_eq!(file_seqs(&path), vec![1, 2, 4]);
        assert_eq!(
            writer.stats(),
            WriterStats {
                write_errors: 0,
                write_drops: 1,
                lines_written: 3,
            }
        );

        // Exactly max_bytes with its '\n': rotates, then fills a file on its own.
        enqueue_all(&writer, [Arc::from(padded(5, MAX_BYTES as usize - 1))]);
        poll_until(DEADLINE, "exact-fit line", || {
            writer.stats().lines_written == 4
        });
        assert_eq!(file_seqs(&backup_path(&path, 1)), vec![1, 2, 4]);
        assert_eq!(file_seqs(&path), vec![5]);
        assert_eq!(fs::metadata(&path).unwrap().len(), MAX_BYTES);

        // The next line rotates again; the oldest backup is replaced.
        enqueue_all(&writer, [line(6)]);
        writer.shutdown(DRAIN);
        assert_eq!(file_seqs(&backup_path(&path, 1)), vec![5]);
        assert_eq!(file_seqs(&path), vec![6]);
        assert!(!backup_path(&path, 2).exists());
    }

    // ---- recovery and modes -------------------------------------------------------------------

    #[test]
    fn torn_last_line_is_discarded_before_appending() {
        let dir = TempDir::new("torn");
        let path = dir.path().join("requests.jsonl");
        let old = format!("{}\n{}\n", padded(1, 60), padded(2, 60));
        fs::write(&path, format!("{old}{{\"seq\":3,\"pad\":\"xx")).unwrap();

        let writer = RequestLogWriter::start(path.clone(), MAX_BYTES, 3);
        let new = padded(10, 60);
        enqueue_all(&writer, [Arc::from(new.as_str())]);
        let expected = format!("{old}{new}\n");
        poll_until(DEADLINE, "the recovered file", || {
            fs::read_to_string(&path).unwrap_or_default() == expected
        });
        assert_eq!(file_seqs(&path), vec![1, 2, 10]);
        // Nothing replayed, nothing counted: recovery is not an error.
        assert_eq!(writer.stats().write_errors, 0);
        writer.shutdown(DRAIN);
        assert_eq!(fs::read_to_string(&path).unwrap(), expected);
    }

    #[test]
    fn complete_existing_file_is_appended_to() {
        let dir = TempDir::new("append");
        let path = dir.path().join("requests.jsonl");
        let old = format!("{}\n", padded(1, 60));
        fs::write(&path, &old).unwrap();
        let writer = RequestLogWriter::start(path.clone(), MAX_BYTES, 3);
        enqueue_all(&writer, [line(2)]);
        writer.shutdown(DRAIN);
        assert_eq!(file_seqs(&path), vec![1, 2]);
    }

    #[test]
    fn created_and_rotated_files_are_0600() {
        // The test process umask is typically 022 (0077 under the service): either way the files
        // the writer creates must be exactly 0600.
        let dir = TempDir::new("modes");
        let path = dir.path().join("requests.jsonl");
        let writer = RequestLogWriter::start(path.clone(), MAX_BYTES, 2);
        // Three files: 1-13 (.2), 14-26 (.1), 27-40 (active).
        enqueue_all(&writer, (1..=40).map(line));
        writer.shutdown(DRAIN);

        for f in [path.clone(), backup_path(&path, 1), backup_path(&path, 2)] {
            assert!(f.exists(), "{}", f.display());
            assert_eq!(mode(&f), 0o600, "{}", f.display());
        }
    }

    // ---- failures -----------------------------------------------------------------------------

    #[test]
    fn path_that_is_a_directory_counts_errors_until_it_is_fixed() {
        let dir = TempDir::new("is-dir");
        let path = dir.path().join("requests.jsonl");
        fs::DirBuilder::new().mode(0o700).create(&path).unwrap();

        let writer = RequestLogWriter::start(path.clone(), MAX_BYTES, 1);
        // The open at start fails once; every line retries the open and fails.
        enqueue_all(&writer, (1..=5).map(line));
        poll_until(DEADLINE, "6 write errors", || {
            writer.stats().write_errors == 6
        });
        assert_eq!(writer.stats().lines_written, 0);
        assert_eq!(writer.stats().write_drops, 0);

        fs::remove_dir(&path).unwrap();
        enqueue_all(&writer, [line(6), line(7)]);
        poll_until(DEADLINE, "lines after the fix", || {
            writer.stats().lines_written == 2
        });
        assert_eq!(file_seqs(&path), vec![6, 7]);
        assert_eq!(mode(&path), 0o600);
        assert_eq!(writer.stats().write_errors, 6);
        writer.shutdown(DRAIN);
    }

    #[test]
    fn removed_or_replaced_parent_directory_counts_errors_and_recovers() {
        let dir = TempDir::new("parent-gone");
        let logs = dir.path().join("logs");
        fs::DirBuilder::new().mode(0o700).create(&logs).unwrap();
        let path = logs.join("requests.jsonl");
        let writer = RequestLogWriter::start(path.clone(), MAX_BYTES, 1);

        enqueue_all(&writer, [line(1)]);
        poll_until(DEADLINE, "first line", || file_seqs(&path) == vec![1]);

        // The directory disappears (with the open file): the writer notices the path no longer
        // names its file and fails to reopen. It never creates the parent directory.
        fs::remove_dir_all(&logs).unwrap();
        enqueue_all(&writer, [line(2)]);
        poll_until(DEADLINE, "error after removal", || {
            writer.stats().write_errors == 1
        });
        assert!(!logs.exists());

        // The directory is replaced by a regular file: ENOTDIR.
        fs::write(&logs, "not a directory").unwrap();
        enqueue_all(&writer, (3..=4).map(line));
        poll_until(DEADLINE, "errors after replacement", || {
            writer.stats().write_errors == 3
        });

        // Writable again: a fresh 0600 file receives the next lines.
        fs::remove_file(&logs).unwrap();
        fs::DirBuilder::new().mode(0o700).create(&logs).unwrap();
        enqueue_all(&writer, [line(5), line(6)]);
        // A line counts as written after its sync, which may come a moment after it appears.
        poll_until(DEADLINE, "lines after recovery", || {
            file_seqs(&path) == vec![5, 6] && writer.stats().lines_written == 3
        });
        assert_eq!(mode(&path), 0o600);
        assert_eq!(
            writer.stats(),
            WriterStats {
                write_errors: 3,
                write_drops: 0,
                lines_written: 3,
            }
        );
        writer.shutdown(DRAIN);
    }

    #[test]
    fn non_regular_file_is_refused() {
        // A device such as /dev/full is never written to: only regular files are log files.
        let dev = Path::new("/dev/full");
        if fs::metadata(dev).is_err() {
            eprintln!("skipping: /dev/full is not available");
            return;
        }
        let writer = RequestLogWriter::start(dev.to_path_buf(), MAX_BYTES, 0);
        enqueue_all(&writer, (1..=3).map(line));
        poll_until(DEADLINE, "errors", || writer.stats().write_errors == 4);
        assert_eq!(writer.stats().lines_written, 0);
        writer.shutdown(DRAIN);
    }

    #[test]
    fn failing_path_never_blocks_enqueue() {
        let dir = TempDir::new("failing-flood");
        let path = dir.path().join("missing-dir").join("requests.jsonl");
        let writer = RequestLogWriter::start(path, MAX_BYTES, 1);
        enqueue_all(&writer, (1..=5000).map(line));
        poll_until(DEADLINE, "errors or drops for every line", || {
            let s = writer.stats();
            // One error at start, then each line is an error (open failed) or a drop (queue full).
            s.write_errors + s.write_drops == 5001
        });
        assert_eq!(writer.stats().lines_written, 0);
        writer.shutdown(DRAIN);
    }

    // ---- queue and shutdown -------------------------------------------------------------------

    #[test]
    fn queue_overflow_drops_without_blocking() {
        let dir = TempDir::fast("overflow");
        let path = dir.path().join("requests.jsonl");
        let writer = RequestLogWriter::start(path.clone(), 16 << 20, 1);
        const N: u64 = 10_000;
        // Far faster than the writer syncs lines: the queue fills and the rest is dropped.
        enqueue_all(&writer, (1..=N).map(|seq| Arc::from(padded(seq, 60))));
        poll_until(DEADLINE, "every line written or dropped", || {
            let s = writer.stats();
            s.lines_written + s.write_drops == N
        });
        let stats = writer.stats();
        assert_eq!(stats.write_errors, 0);
        let written = file_seqs(&path);
        assert_eq!(written.len() as u64, stats.lines_written);
        assert!(
            written.windows(2).all(|w| w[0] < w[1]),
            "lines out of order"
        );
        writer.shutdown(DRAIN);
    }

    #[test]
    fn queue_overflow_counts_add_up() {
        let dir = TempDir::fast("overflow-counts");
        let path = dir.path().join("requests.jsonl");
        let acct = Accounting::new(16, Some((path.clone(), 16 << 20, 1)));
        const N: u64 = 10_000;
        let started = Instant::now();
        for _ in 0..N {
            acct.submit(|seq| Arc::from(padded(seq, 60)));
        }
        assert!(started.elapsed() < Duration::from_secs(5), "submit blocked");
        acct.shutdown(DRAIN);
        let stats = acct.stats();
        let written = file_seqs(&path);
        assert_eq!(stats.write_errors, 0);
        assert_eq!(stats.lines_written, written.len() as u64);
        assert_eq!(stats.write_drops + stats.lines_written, N);
        assert!(
            written.windows(2).all(|w| w[0] < w[1]),
            "lines out of order"
        );
        assert_eq!(stats.next_seq, N + 1);
        assert_eq!(stats.records_in_ring, 16);
    }

    #[test]
    fn clean_shutdown_writes_everything_queued_within_the_grace() {
        let dir = TempDir::new("shutdown");
        let path = dir.path().join("requests.jsonl");
        let acct = Accounting::new(1000, Some((path.clone(), 16 << 20, 1)));
        // A modest batch: each line is synced, and a disk-backed temp dir takes milliseconds each.
        for _ in 0..100 {
            acct.submit(|seq| Arc::from(padded(seq, 100)));
        }
        let started = Instant::now();
        acct.shutdown(SHUTDOWN_GRACE);
        assert!(started.elapsed() <= SHUTDOWN_GRACE + Duration::from_millis(500));
        assert_eq!(file_seqs(&path), (1..=100).collect::<Vec<_>>());
        let stats = acct.stats();
        assert_eq!((stats.lines_written, stats.write_drops), (100, 0));

        // Idempotent; later records still reach the ring but not the file.
        acct.shutdown(SHUTDOWN_GRACE);
        assert_eq!(acct.submit(|seq| Arc::from(padded(seq, 100))), 101);
        assert_eq!(acct.stats().write_drops, 1);
        assert_eq!(acct.page(None, 1).next_seq, 101);
        assert_eq!(file_seqs(&path).len(), 100);
    }

    // ---- the accounting store -----------------------------------------------------------------

    #[test]
    fn concurrent_submitters_get_dense_unique_seqs_and_identical_file_lines() {
        const THREADS: u64 = 8;
        const PER_THREAD: u64 = 1000;
        const TOTAL: u64 = THREADS * PER_THREAD;
        const CAPACITY: usize = 500;

        let dir = TempDir::fast("concurrent");
        let path = dir.path().join("requests.jsonl");
        let acct = Arc::new(Accounting::new(CAPACITY, Some((path.clone(), 16 << 20, 1))));

        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let acct = Arc::clone(&acct);
                thread::spawn(move || {
                    let mut seqs = Vec::with_capacity(PER_THREAD as usize);
                    for i in 0..PER_THREAD {
                        // Keep the writer backlog well under the 2048-line queue so that no line
                        // is dropped (8 racing submitters add at most 8 beyond the check).
                        let deadline = Instant::now() + DEADLINE;
                        loop {
                            let s = acct.stats();
                            let backlog = (s.next_seq - 1) - s.lines_written - s.write_drops;
                            if backlog < 1024 {
                                break;
                            }
                            assert!(Instant::now() < deadline, "writer stalled");
                            thread::yield_now();
                        }
                        seqs.push(acct.submit(|seq| {
                            Arc::from(format!("{{\"seq\":{seq},\"thread\":{t},\"i\":{i}}}"))
                        }));
                    }
                    seqs
                })
            })
            .collect();
        let mut seqs: Vec<u64> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=TOTAL).collect::<Vec<_>>());

        let stats = acct.stats();
        assert_eq!(stats.next_seq, TOTAL + 1);
        assert_eq!(stats.records_in_ring, CAPACITY as u64);
        assert_eq!(stats.evicted, TOTAL - CAPACITY as u64);

        // The ring holds the newest `CAPACITY` records.
        let page = acct.page(Some(0), 1000);
        assert_eq!(page.dropped, TOTAL - CAPACITY as u64);
        assert_eq!(page.oldest_seq, Some(TOTAL - CAPACITY as u64 + 1));
        assert_eq!(page.next_seq, TOTAL);
        assert_eq!(page.records.len(), CAPACITY);

        acct.shutdown(DRAIN);
        let stats = acct.stats();
        assert_eq!(
            (stats.write_errors, stats.write_drops, stats.lines_written),
            (0, 0, TOTAL)
        );
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len() as u64, TOTAL);
        // Lines are in seq order, each carries its seq, and the file line and the ring item are the
        // same bytes.
        for (i, l) in lines.iter().enumerate() {
            let value: Value = serde_json::from_str(l).unwrap();
            assert_eq!(value["seq"].as_u64(), Some(i as u64 + 1));
        }
        for (record, l) in page.records.iter().zip(&lines[lines.len() - CAPACITY..]) {
            assert_eq!(&**record, *l);
        }
    }
}

//! The request-log writer on a full disk: every record fails, and each failed write leaves an
//! incomplete line that the next open discards. The write failure and the discarded line are
//! each warned about a bounded number of times, not once per record, and the file is whole
//! again once there is space.
//!
//! The full disk is `RLIMIT_FSIZE`: a write that would pass the limit is cut short at it and
//! the next one fails (`EFBIG`), just as `ENOSPC` cuts a write short. The limit holds for every
//! file the process writes, so this test has a test binary to itself and sets it only while
//! the records fail (libtest keeps test output in memory meanwhile). The kernel also sends
//! `SIGXFSZ`, which kills by default, to the writing thread: the test thread blocks it before
//! it starts the writer, whose thread inherits the mask, so the signal stays pending and
//! harmless.
//!
//! Log lines are counted in the output of a global tracing subscriber that writes to memory.

mod common;

use std::fs;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use common::{DEADLINE, file_seqs, padded};
use nix::sys::resource::{Resource, getrlimit, rlim_t, setrlimit};
use nix::sys::signal::{SigSet, Signal};
use strata_supervisor::accounting::RequestLogWriter;
use strata_test_support::{TempDir, poll_until};

/// The simulated disk size: the log file cannot grow past this many bytes.
const FILE_SIZE_LIMIT: u64 = 1 << 20;
/// Bytes per test line, '\n' included.
const LINE_BYTES: u64 = 300;
/// Records written while the disk is full.
const FAILING_RECORDS: u64 = 200;

/// Everything the tracing subscriber wrote.
#[derive(Clone, Default)]
struct CapturedLog(Arc<Mutex<Vec<u8>>>);

impl CapturedLog {
    fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn count(&self, needle: &str) -> usize {
        self.text().lines().filter(|l| l.contains(needle)).count()
    }
}

impl Write for CapturedLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Lowers the soft `RLIMIT_FSIZE` while it lives.
struct FileSizeLimit {
    soft: rlim_t,
    hard: rlim_t,
}

impl FileSizeLimit {
    fn set(bytes: u64) -> FileSizeLimit {
        let (soft, hard) = getrlimit(Resource::RLIMIT_FSIZE).expect("getrlimit(RLIMIT_FSIZE)");
        setrlimit(Resource::RLIMIT_FSIZE, bytes.min(hard), hard).expect("lower RLIMIT_FSIZE");
        FileSizeLimit { soft, hard }
    }
}

impl Drop for FileSizeLimit {
    fn drop(&mut self) {
        setrlimit(Resource::RLIMIT_FSIZE, self.soft, self.hard).expect("restore RLIMIT_FSIZE");
    }
}

#[test]
fn a_full_disk_warns_a_bounded_number_of_times_and_the_file_recovers() {
    let log = CapturedLog::default();
    let writer_log = log.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer_log.clone())
        .with_ansi(false)
        .init();

    let dir = TempDir::fast("full-disk");
    let path = dir.path().join("requests.jsonl");
    // Complete lines up to just under the limit: the next line fits only in part.
    let prefilled = FILE_SIZE_LIMIT / LINE_BYTES;
    let text: String = (1..=prefilled)
        .map(|seq| padded(seq, LINE_BYTES as usize - 1) + "\n")
        .collect();
    fs::write(&path, text).unwrap();
    assert!(FILE_SIZE_LIMIT - prefilled * LINE_BYTES < LINE_BYTES);

    let mut xfsz = SigSet::empty();
    xfsz.add(Signal::SIGXFSZ);
    xfsz.thread_block().expect("block SIGXFSZ");
    let disk_full = FileSizeLimit::set(FILE_SIZE_LIMIT);
    let writer = RequestLogWriter::start(path.clone(), 16 << 20, 1);
    let failing = 1001..1001 + FAILING_RECORDS;
    for seq in failing.clone() {
        writer.enqueue(Arc::from(padded(seq, LINE_BYTES as usize - 1)));
    }
    // Each record fails once (its write); each open after the first discards a partial line.
    poll_until(DEADLINE, "every record to fail", || {
        writer.stats().write_errors == FAILING_RECORDS
    });
    drop(disk_full);
    let stats = writer.stats();
    assert_eq!((stats.lines_written, stats.write_drops), (0, 0));

    // The interval between repeated warnings is a minute and this takes seconds: one each,
    // allowing a second should the machine be very slow.
    let failures = log.count("request log write failed");
    let discards = log.count("request log ended in an incomplete line");
    assert!(
        (1..=2).contains(&failures) && (1..=2).contains(&discards),
        "{FAILING_RECORDS} failing records logged {failures} write failures and {discards} \
         discarded lines:\n{}",
        log.text()
    );

    // Space again: the next record is appended after the last complete line.
    writer.enqueue(Arc::from(padded(5000, LINE_BYTES as usize - 1)));
    poll_until(DEADLINE, "the record after recovery", || {
        writer.stats().lines_written == 1
    });
    writer.shutdown(Duration::from_secs(60));
    let expected: Vec<u64> = (1..=prefilled).chain([5000]).collect();
    assert_eq!(file_seqs(&path), expected);
    assert_eq!(
        log.count("request log writes recovered"),
        1,
        "{}",
        log.text()
    );
}

//! The JSONL request-log writer (router spec, "Per-request accounting").
//!
//! One dedicated std thread per log path owns the file; serving only ever calls
//! [`RequestLogWriter::enqueue`], a nonblocking `try_send` into a bounded queue of
//! [`QUEUE_LINES`] lines. A full queue drops the line and counts `write_drops`.
//!
//! For each line the thread:
//! 1. drops it (counted in `write_drops`, logged at warn without content) if it alone would
//!    exceed `max_bytes` including its `'\n'`;
//! 2. (re)opens the active file if it has none, or if the path no longer names the file it
//!    holds (removed or replaced behind its back). Opening creates a missing file with mode 0600
//!    (never the parent directory) and discards an incomplete final line left by an interrupted
//!    write, so appends always start on a line boundary;
//! 3. rotates first if the active file's size plus the line would exceed `max_bytes`: with
//!    `rotate_files = N > 0`, `.N` is removed, `.k` renamed to `.k+1` for k = N-1..1, the active
//!    file renamed to `.1` and a new active file created (0600); with N = 0 the active file is
//!    truncated;
//! 4. appends the line plus `'\n'` with one `write_all`, then calls `sync_data`.
//!
//! Any I/O error counts `write_errors`, is logged at warn (path and error only, never the line),
//! drops that line and closes the file so the next line reopens it. Serving and the memory ring
//! never depend on the file.
//!
//! Warnings that can repeat once per line (I/O failures, queue overflow, the incomplete line a
//! failed write leaves for the next open to discard) go through a [`WarnLimit`] each: the first
//! is logged at once, later ones at most once per `WARN_INTERVAL` with a count of what happened
//! since, so a full disk costs a few log lines, not one per record.
//!
//! Retention: the active file and every backup (a former active file) stay within `max_bytes`,
//! so the files total at most `max_bytes * (rotate_files + 1)` bytes. (A file left larger by an
//! earlier run with a larger limit is rotated away before the next line is appended.)
//!
//! Files are never replayed into the memory ring. Use one writer per path in a private parent
//! directory: the writer does not lock the file.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use strata_os::WarnLimit;

/// Capacity of the writer queue, in lines.
pub const QUEUE_LINES: usize = 2048;

/// How long a clean shutdown lets the writer finish queued lines.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Mode of every file the writer creates.
const FILE_MODE: u32 = 0o600;

/// Minimum interval between repeated warnings of one kind (errors, queue overflow, discarded
/// incomplete lines): each kind has its own [`WarnLimit`].
const WARN_INTERVAL: Duration = Duration::from_secs(60);

/// Counters of one writer. `write_errors` counts failed I/O operations (a failed line counts
/// once; a failed open at start counts once); `write_drops` counts lines discarded without an
/// I/O attempt: queue overflow, oversized lines, lines still queued when the shutdown grace
/// ran out, and lines submitted after shutdown. `lines_written` counts lines fully appended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    pub write_errors: u64,
    pub write_drops: u64,
    pub lines_written: u64,
}

/// The JSONL writer handle. Dropping it without [`shutdown`](Self::shutdown) closes the queue;
/// the thread then finishes what is queued in the background.
#[derive(Debug)]
pub struct RequestLogWriter {
    tx: Option<SyncSender<Arc<str>>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Dropped (disconnected) when the thread exits, however it exits.
    done: Option<Receiver<()>>,
}

/// Counters shared by the handle and the thread.
#[derive(Debug, Default)]
pub(super) struct Shared {
    counters: Mutex<WriterCounters>,
}

/// What [`Shared`] guards: one writer's counts, and the queue-overflow warnings' limit (the
/// handle notes an overflow under the same lock).
#[derive(Debug)]
struct WriterCounters {
    /// Lines accepted into the queue.
    accepted: u64,
    /// Accepted lines the thread has finished with, whatever the outcome.
    finished: u64,
    written: u64,
    errors: u64,
    drops: u64,
    /// Set when shutdown gave up waiting: the unfinished lines were counted as drops.
    abandoned: bool,
    overflow_warnings: WarnLimit,
}

impl Default for WriterCounters {
    fn default() -> Self {
        WriterCounters {
            accepted: 0,
            finished: 0,
            written: 0,
            errors: 0,
            drops: 0,
            abandoned: false,
            overflow_warnings: WarnLimit::new(WARN_INTERVAL),
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, WriterCounters> {
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn stats(&self) -> WriterStats {
        let c = self.lock();
        WriterStats {
            write_errors: c.errors,
            write_drops: c.drops,
            lines_written: c.written,
        }
    }

    pub(super) fn add_drop(&self) {
        self.lock().drops += 1;
    }

    fn add_error(&self) {
        self.lock().errors += 1;
    }

    fn abandoned(&self) -> bool {
        self.lock().abandoned
    }

    /// The thread finished one accepted line.
    fn finish(&self, written: bool) {
        let mut c = self.lock();
        c.finished += 1;
        if c.abandoned {
            // Shutdown already counted this line as a drop; its real outcome replaces that.
            c.drops = c.drops.saturating_sub(1);
        }
        if written {
            c.written += 1;
        }
    }
}

impl RequestLogWriter {
    /// Starts the writer thread for `path` (absolute; its parent directory must exist and is
    /// never created). Opening happens on the thread: a failure counts `write_errors` and is
    /// retried with each later line, so serving never stops because of the log. `max_bytes` is
    /// the per-file limit and `rotate_files` the number of backups (`path.1` ..= `path.N`).
    pub fn start(path: PathBuf, max_bytes: u64, rotate_files: u32) -> RequestLogWriter {
        Self::start_inner(path, max_bytes, rotate_files, None)
    }

    /// `gate`: the thread waits for it (message or disconnect) before handling any line; used by
    /// unit tests to hold the queue full deterministically.
    fn start_inner(
        path: PathBuf,
        max_bytes: u64,
        rotate_files: u32,
        gate: Option<Receiver<()>>,
    ) -> RequestLogWriter {
        let shared = Arc::new(Shared::default());
        let (tx, rx) = mpsc::sync_channel::<Arc<str>>(QUEUE_LINES);
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let thread_shared = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name("request-log".into())
            .spawn(move || {
                let _done = done_tx;
                let mut state = WriterState::new(path, max_bytes, rotate_files, thread_shared);
                state.open_at_start();
                if let Some(gate) = gate {
                    let _ = gate.recv();
                }
                state.run(rx);
            });
        match spawned {
            Ok(thread) => RequestLogWriter {
                tx: Some(tx),
                shared,
                thread: Some(thread),
                done: Some(done_rx),
            },
            Err(error) => {
                tracing::warn!(%error, "cannot start the request log writer thread; file records disabled");
                shared.add_error();
                RequestLogWriter {
                    tx: None,
                    shared,
                    thread: None,
                    done: None,
                }
            }
        }
    }

    /// Nonblocking: queues one line (the caller's JSON text without a newline; the writer
    /// appends `'\n'`). A full queue drops the line and counts `write_drops`.
    pub fn enqueue(&self, line: Arc<str>) {
        let sent = match &self.tx {
            Some(tx) => tx.try_send(line),
            None => Err(TrySendError::Disconnected(line)),
        };
        let mut c = self.shared.lock();
        match sent {
            Ok(()) => c.accepted += 1,
            Err(TrySendError::Full(_)) => {
                c.drops += 1;
                if let Some(dropped) = c.overflow_warnings.note(Instant::now()) {
                    drop(c);
                    tracing::warn!(
                        dropped,
                        queue = QUEUE_LINES,
                        "request log queue full; dropping file records"
                    );
                }
            }
            // The thread is gone (it only exits after shutdown or a panic).
            Err(TrySendError::Disconnected(_)) => c.drops += 1,
        }
    }

    /// The writer's counters.
    pub fn stats(&self) -> WriterStats {
        self.shared.stats()
    }

    pub(super) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Stops accepting lines and gives the thread up to `grace` ([`SHUTDOWN_GRACE`] at a clean
    /// shutdown) to write what is queued. If it has not finished by then (for example blocked
    /// in a syscall on a hung filesystem) it is detached, and the lines it has not finished are
    /// counted in `write_drops` (a line it completes later is moved back to its real outcome).
    pub fn shutdown(mut self, grace: Duration) {
        // Closing the queue lets the thread drain it and exit.
        drop(self.tx.take());
        let finished = match self.done.take() {
            Some(done) => matches!(
                done.recv_timeout(grace),
                Err(mpsc::RecvTimeoutError::Disconnected) | Ok(())
            ),
            None => true,
        };
        if finished {
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
            return;
        }
        let pending = {
            let mut c = self.shared.lock();
            c.abandoned = true;
            let pending = c.accepted.saturating_sub(c.finished);
            c.drops += pending;
            pending
        };
        tracing::warn!(
            pending,
            grace_ms = grace.as_millis() as u64,
            "request log writer did not finish within the shutdown grace; queued records dropped"
        );
        // Detach: the thread exits after its current operation.
        drop(self.thread.take());
    }
}

/// The log files that exist for `path`, oldest first: `path.N`, ..., `path.1`, then `path`
/// itself. Reading them in this order yields the retained records in completion order
/// (within one daemon instance; a restart starts seqs at 1 again, with a new `instance_id`).
/// A file may end in an incomplete line if the writer was interrupted mid-write; readers should
/// ignore a final line without `'\n'`.
pub fn retained_files(path: &Path, rotate_files: u32) -> Vec<PathBuf> {
    (1..=rotate_files)
        .rev()
        .map(|k| backup_path(path, k))
        .chain(std::iter::once(path.to_path_buf()))
        .filter(|p| p.exists())
        .collect()
}

/// `path` with `.k` appended to its file name (`requests.jsonl.1`).
pub fn backup_path(path: &Path, k: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{k}"));
    PathBuf::from(name)
}

// ---- the thread ---------------------------------------------------------------------------

struct Active {
    file: File,
    /// Bytes in the file (tracked; the writer is its only appender).
    size: u64,
    dev: u64,
    ino: u64,
}

struct WriterState {
    path: PathBuf,
    max_bytes: u64,
    rotate_files: u32,
    active: Option<Active>,
    buf: Vec<u8>,
    shared: Arc<Shared>,
    /// Consecutive failed operations since the last success.
    error_streak: u64,
    error_warnings: WarnLimit,
    /// Incomplete lines discarded on open. Not reset when writes recover: on a nearly full
    /// disk writes fail and succeed in turn, and each failure leaves an incomplete line.
    torn_warnings: WarnLimit,
}

impl WriterState {
    fn new(path: PathBuf, max_bytes: u64, rotate_files: u32, shared: Arc<Shared>) -> Self {
        WriterState {
            path,
            max_bytes,
            rotate_files,
            active: None,
            buf: Vec::new(),
            shared,
            error_streak: 0,
            error_warnings: WarnLimit::new(WARN_INTERVAL),
            torn_warnings: WarnLimit::new(WARN_INTERVAL),
        }
    }

    fn open_at_start(&mut self) {
        match self.open_active() {
            Ok(active) => self.active = Some(active),
            Err(error) => self.io_error("open", &error),
        }
    }

    fn run(&mut self, rx: Receiver<Arc<str>>) {
        while let Ok(line) = rx.recv() {
            if self.shared.abandoned() {
                // Shutdown counted everything unfinished as dropped; stop touching the file.
                return;
            }
            let written = self.write_line(&line);
            self.shared.finish(written);
        }
    }

    /// Handles one line; true if it was appended.
    fn write_line(&mut self, line: &str) -> bool {
        let needed = line.len() as u64 + 1;
        if needed > self.max_bytes {
            self.shared.add_drop();
            tracing::warn!(
                path = %self.path.display(),
                line_bytes = needed,
                max_bytes = self.max_bytes,
                "request record larger than request_log_max_bytes; dropped from the file"
            );
            return false;
        }
        if line.as_bytes().contains(&b'\n') {
            // Cannot happen for serde_json output; a raw newline would split the JSONL record.
            self.shared.add_drop();
            tracing::warn!(path = %self.path.display(), "request record contains a newline; dropped from the file");
            return false;
        }

        if let Some(active) = &self.active
            && !self.is_current(active)
        {
            tracing::info!(path = %self.path.display(), "request log file was removed or replaced; reopening");
            self.active = None;
        }
        if self.active.is_none() {
            match self.open_active() {
                Ok(active) => self.active = Some(active),
                Err(error) => {
                    self.io_error("open", &error);
                    return false;
                }
            }
        }
        let size = self.active.as_ref().map_or(0, |a| a.size);
        if size + needed > self.max_bytes
            && let Err(error) = self.rotate()
        {
            // Reopen (and retry the rotation) with the next line; never grow past the limit.
            self.active = None;
            self.io_error("rotate", &error);
            return false;
        }

        self.buf.clear();
        self.buf.extend_from_slice(line.as_bytes());
        self.buf.push(b'\n');
        let Some(active) = self.active.as_mut() else {
            return false;
        };
        if let Err(error) = active.file.write_all(&self.buf) {
            // A partial line is discarded when the file is reopened.
            self.active = None;
            self.io_error("write", &error);
            return false;
        }
        active.size += needed;
        if let Err(error) = active.file.sync_data() {
            self.active = None;
            self.io_error("sync", &error);
            return true;
        }
        self.io_ok();
        true
    }

    /// Whether `path` still names the file we hold.
    fn is_current(&self, active: &Active) -> bool {
        fs::metadata(&self.path).is_ok_and(|m| m.dev() == active.dev && m.ino() == active.ino)
    }

    /// Opens (creating with mode 0600 if missing) the active file, positioned for appending
    /// after its last complete line.
    fn open_active(&mut self) -> io::Result<Active> {
        let created = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&self.path);
        let (file, created) = match created {
            Ok(file) => (file, true),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                let file = OpenOptions::new()
                    .read(true)
                    .append(true)
                    .open(&self.path)?;
                (file, false)
            }
            Err(error) => return Err(error),
        };
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::other("not a regular file"));
        }
        if created {
            // `mode` is filtered by the umask; make 0600 exact whatever the umask.
            file.set_permissions(Permissions::from_mode(FILE_MODE))?;
            sync_parent_dir(&self.path);
        }
        let size = discard_torn_tail(&file, meta.len())?;
        if size < meta.len() {
            // At start this is a write a crash interrupted; later, the line the last failed
            // write left behind (on a full disk, one per record: hence the rate limit).
            if let Some(discarded_lines) = self.torn_warnings.note(Instant::now()) {
                tracing::warn!(
                    path = %self.path.display(),
                    discarded_bytes = meta.len() - size,
                    discarded_lines,
                    "request log ended in an incomplete line; discarded it"
                );
            }
        }
        Ok(Active {
            file,
            size,
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn rotate(&mut self) -> io::Result<()> {
        if self.rotate_files == 0 {
            let Some(active) = self.active.as_mut() else {
                return Ok(());
            };
            active.file.set_len(0)?;
            active.size = 0;
            return Ok(());
        }
        let n = self.rotate_files;
        remove_if_exists(&backup_path(&self.path, n))?;
        for k in (1..n).rev() {
            rename_if_exists(&backup_path(&self.path, k), &backup_path(&self.path, k + 1))?;
        }
        fs::rename(&self.path, backup_path(&self.path, 1))?;
        self.active = None;
        self.active = Some(self.open_active()?);
        tracing::debug!(path = %self.path.display(), backups = n, "request log rotated");
        Ok(())
    }

    fn io_error(&mut self, op: &'static str, error: &io::Error) {
        self.shared.add_error();
        self.error_streak += 1;
        if let Some(errors) = self.error_warnings.note(Instant::now()) {
            tracing::warn!(
                path = %self.path.display(),
                op,
                %error,
                errors,
                "request log write failed; record dropped from the file"
            );
        }
    }

    fn io_ok(&mut self) {
        if self.error_streak > 0 {
            tracing::info!(
                path = %self.path.display(),
                failed = self.error_streak,
                "request log writes recovered"
            );
            self.error_streak = 0;
            self.error_warnings.reset();
        }
    }
}

/// If the file's last byte is not `'\n'`, truncates it to the end of its last complete line
/// (to 0 if it has none). Returns the resulting length.
fn discard_torn_tail(file: &File, len: u64) -> io::Result<u64> {
    if len == 0 {
        return Ok(0);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] == b'\n' {
        return Ok(len);
    }
    const CHUNK: u64 = 64 * 1024;
    let mut buf = vec![0u8; CHUNK as usize];
    let mut end = len;
    let mut keep = 0;
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            keep = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    file.set_len(keep)?;
    file.sync_data()?;
    Ok(keep)
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

fn rename_if_exists(from: &Path, to: &Path) -> io::Result<()> {
    match fs::rename(from, to) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// Best effort: persist directory entries (creation, rotation renames).
fn sync_parent_dir(path: &Path) {
    if let Some(parent) = path.parent()
        && let Ok(dir) = File::open(parent)
    {
        let _ = dir.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_test_support::TempDir;

    fn lines(path: &Path) -> Vec<String> {
        fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn full_queue_drops_exactly_the_overflow_then_drains() {
        let dir = TempDir::new("overflow");
        let path = dir.join("requests.jsonl");
        let (gate_tx, gate_rx) = mpsc::channel();
        let writer = RequestLogWriter::start_inner(path.clone(), 1 << 20, 0, Some(gate_rx));
        let started = Instant::now();
        for i in 0..10_000 {
            writer.enqueue(Arc::from(format!("{{\"i\":{i}}}")));
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "enqueue blocked"
        );
        let stats = writer.stats();
        assert_eq!(stats.write_drops, 10_000 - QUEUE_LINES as u64);
        gate_tx.send(()).unwrap();
        writer.shutdown(Duration::from_secs(60));
        let written = lines(&path);
        assert_eq!(written.len(), QUEUE_LINES);
        for (i, line) in written.iter().enumerate() {
            assert_eq!(line, &format!("{{\"i\":{i}}}"));
        }
    }

    #[test]
    fn shutdown_gives_up_after_the_grace_and_counts_unwritten_lines() {
        let dir = TempDir::new("stuck");
        let path = dir.join("requests.jsonl");
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let writer = RequestLogWriter::start_inner(path.clone(), 1 << 20, 0, Some(gate_rx));
        for i in 0..100 {
            writer.enqueue(Arc::from(format!("{{\"i\":{i}}}")));
        }
        let shared = writer.shared();
        let started = Instant::now();
        writer.shutdown(Duration::from_millis(200));
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < Duration::from_secs(10), "{waited:?}");
        let stats = shared.stats();
        assert_eq!(stats.write_drops, 100);
        assert_eq!(stats.lines_written, 0);
        // Release the detached thread: it stops without writing the abandoned lines.
        drop(gate_tx);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&shared) > 1 {
            assert!(
                Instant::now() < deadline,
                "detached writer thread did not exit"
            );
            thread::yield_now();
        }
        assert_eq!(shared.stats().write_drops, 100);
        assert!(lines(&path).is_empty());
    }

    #[test]
    fn torn_tail_without_any_newline_is_discarded_entirely() {
        let dir = TempDir::new("torn-all");
        let path = dir.join("requests.jsonl");
        fs::write(&path, b"{\"partial\":").unwrap();
        let writer = RequestLogWriter::start(path.clone(), 1 << 20, 1);
        writer.enqueue(Arc::from("{\"a\":1}"));
        writer.shutdown(Duration::from_secs(60));
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"a\":1}\n");
    }

    #[test]
    fn torn_tail_is_found_across_read_chunks() {
        let dir = TempDir::new("torn-chunks");
        let path = dir.join("requests.jsonl");
        let mut content = b"{\"ok\":1}\n".to_vec();
        // A partial line longer than one 64 KiB read chunk.
        content.extend(std::iter::repeat_n(b'x', 200 * 1024));
        fs::write(&path, &content).unwrap();
        let writer = RequestLogWriter::start(path.clone(), 1 << 20, 1);
        writer.enqueue(Arc::from("{\"a\":1}"));
        writer.shutdown(Duration::from_secs(60));
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "{\"ok\":1}\n{\"a\":1}\n"
        );
    }

    #[test]
    fn line_with_newline_is_dropped() {
        let dir = TempDir::new("newline");
        let path = dir.join("requests.jsonl");
        let writer = RequestLogWriter::start(path.clone(), 1 << 20, 1);
        writer.enqueue(Arc::from("{\"a\":\n1}"));
        writer.enqueue(Arc::from("{\"b\":2}"));
        let shared = writer.shared();
        writer.shutdown(Duration::from_secs(60));
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"b\":2}\n");
        assert_eq!(shared.stats().write_drops, 1);
    }

    #[test]
    fn backup_and_retained_paths() {
        let path = Path::new("/var/lib/strata-router/requests.jsonl");
        assert_eq!(
            backup_path(path, 3),
            Path::new("/var/lib/strata-router/requests.jsonl.3")
        );
        let dir = TempDir::new("retained");
        let path = dir.join("r.jsonl");
        assert!(retained_files(&path, 3).is_empty());
        fs::write(&path, "").unwrap();
        fs::write(backup_path(&path, 1), "").unwrap();
        fs::write(backup_path(&path, 3), "").unwrap();
        assert_eq!(
            retained_files(&path, 3),
            vec![backup_path(&path, 3), backup_path(&path, 1), path.clone()]
        );
        // Backups beyond the configured count are not part of the retained set.
        assert_eq!(retained_files(&path, 0), vec![path.clone()]);
    }
}

//! Per-request accounting owned by the supervisor (router spec, "Per-request accounting" and
//! "Reading recent records").
//!
//! The long-lived supervisor owns the completion sequence numbers, the memory ring and the JSONL
//! writer, so a proxy-only restart loses nothing; proxies send it finished records. Each record
//! is one JSON object text (no newline) built by the caller with its seq inside; the same
//! `Arc<str>` goes into the ring and onto the writer queue, so the `/requests` item and the JSONL
//! line are the same bytes.
//!
//! - [`ring`]: the bounded ring and the `/requests` cursor semantics (pure).
//! - [`writer`]: the JSONL file writer thread (rotation, retention, 0600, torn-line recovery,
//!   nonblocking 2048-line queue, `sync_data` per line).

pub mod ring;
pub mod writer;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use ring::{MAX_CAPACITY, Page, Ring};
pub use writer::{
    QUEUE_LINES, RequestLogWriter, SHUTDOWN_GRACE, WriterStats, backup_path, retained_files,
};

/// Counters for `/metrics.request_log` (config values and `instance_id` come from elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountingStats {
    /// Failed file I/O operations (0 without a configured path).
    pub write_errors: u64,
    /// Records not written to the file: queue overflow, oversized lines, unfinished at the end
    /// of the shutdown grace, or submitted after shutdown (0 without a configured path).
    pub write_drops: u64,
    /// Records appended to the file (0 without a configured path).
    pub lines_written: u64,
    /// Records evicted from the memory ring.
    pub evicted: u64,
    /// Records currently in the memory ring.
    pub records_in_ring: u64,
    /// The next completion seq to allocate.
    pub next_seq: u64,
}

/// The supervisor's accounting store: the ring and the optional writer behind a std `Mutex`,
/// held only to push or read (never across an `.await`, never during file I/O).
#[derive(Debug)]
pub struct Accounting {
    inner: Mutex<Inner>,
    /// The writer's counters; outlive the writer so stats stay readable after shutdown.
    writer_counters: Option<Arc<writer::Shared>>,
}

#[derive(Debug)]
struct Inner {
    ring: Ring,
    /// `None` without a configured path, or after shutdown.
    writer: Option<RequestLogWriter>,
}

impl Accounting {
    /// `capacity`: `request_log_capacity`. `log`: `(request_log_path, request_log_max_bytes,
    /// request_log_rotate_files)` when file persistence is configured; starts the writer thread.
    pub fn new(capacity: usize, log: Option<(PathBuf, u64, u32)>) -> Accounting {
        let writer = log.map(|(path, max_bytes, rotate_files)| {
            RequestLogWriter::start(path, max_bytes, rotate_files)
        });
        let writer_counters = writer.as_ref().map(RequestLogWriter::shared);
        Accounting {
            inner: Mutex::new(Inner {
                ring: Ring::new(capacity),
                writer,
            }),
            writer_counters,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Allocates the next completion seq, stores `make_json(seq)` in the ring and queues the same
    /// text for the file (nonblocking). Returns the seq. Lines reach the queue in seq order.
    pub fn submit(&self, make_json: impl FnOnce(u64) -> Arc<str>) -> u64 {
        let mut inner = self.lock();
        let mut text = None;
        let seq = inner.ring.push(|seq| {
            let json = make_json(seq);
            text = Some(Arc::clone(&json));
            json
        });
        if let Some(text) = text {
            match &inner.writer {
                Some(writer) => writer.enqueue(text),
                None => {
                    if let Some(counters) = &self.writer_counters {
                        // Submitted after shutdown: the file never gets it.
                        counters.add_drop();
                    }
                }
            }
        }
        seq
    }

    /// One `/requests` page; see [`Ring::page`]. `limit` is clamped to 1..=1000.
    pub fn page(&self, after: Option<u64>, limit: u32) -> Page {
        self.lock().ring.page(after, limit)
    }

    /// Counters for `/metrics`.
    pub fn stats(&self) -> AccountingStats {
        // Writer counters first: a line is counted only after its record was pushed, so this
        // order keeps `lines_written + write_drops <= next_seq - 1` in every snapshot.
        let writer = self
            .writer_counters
            .as_ref()
            .map(|c| c.stats())
            .unwrap_or_default();
        let (evicted, records_in_ring, next_seq) = {
            let inner = self.lock();
            (
                inner.ring.evicted(),
                inner.ring.len() as u64,
                inner.ring.next_seq(),
            )
        };
        AccountingStats {
            write_errors: writer.write_errors,
            write_drops: writer.write_drops,
            lines_written: writer.lines_written,
            evicted,
            records_in_ring,
            next_seq,
        }
    }

    /// Flushes and stops the writer, waiting at most `grace` ([`SHUTDOWN_GRACE`] at a clean
    /// shutdown). Idempotent. The ring stays usable; records submitted afterwards are counted in
    /// `write_drops` instead of being written.
    pub fn shutdown(&self, grace: Duration) {
        let writer = self.lock().writer.take();
        if let Some(writer) = writer {
            writer.shutdown(grace);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64) -> Arc<str> {
        Arc::from(format!("{{\"seq\":{seq}}}"))
    }

    #[test]
    fn ring_only_store() {
        let acct = Accounting::new(2, None);
        assert_eq!(acct.page(None, 100).next_seq, 0);
        assert_eq!(acct.submit(record), 1);
        assert_eq!(acct.submit(record), 2);
        assert_eq!(acct.submit(record), 3);
        assert_eq!(
            acct.stats(),
            AccountingStats {
                write_errors: 0,
                write_drops: 0,
                lines_written: 0,
                evicted: 1,
                records_in_ring: 2,
                next_seq: 4,
            }
        );
        let page = acct.page(Some(0), 100);
        assert_eq!(page.dropped, 1);
        assert_eq!(&*page.records[0], "{\"seq\":2}");
        acct.shutdown(SHUTDOWN_GRACE);
        acct.shutdown(SHUTDOWN_GRACE);
        assert_eq!(acct.submit(record), 4);
        assert_eq!(acct.stats().write_drops, 0);
    }
}

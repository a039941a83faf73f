//! The prefetch thread: reads one model's weights into the page cache at a
//! time, at idle I/O priority and nice 19, and stops between two chunks as
//! soon as the engine wants something else (the shared generation moved
//! on).
//!
//! For each chunk it first asks which of its pages are resident already
//! (`mincore`) and reads only a chunk that is not all there, after a
//! `WILLNEED` hint for the next one, so the disk keeps reading while this
//! thread copies. Reading (not only hinting) is what makes the pages
//! resident for sure: a hint may be dropped under memory pressure, a read
//! cannot.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use strata_os::page_cache;
use strata_protocol::config::{PrefetchConfig, WeightsSource};

use super::files::{self, Problem};
use super::{Said, mem_available, residency};
use crate::counters::Counters;

/// Bytes read per step: small enough that a stop takes effect within one
/// read, large enough for sequential disk throughput.
const CHUNK: u64 = 8 << 20;

/// `MemAvailable` is checked again after this many bytes.
const CHECK_EVERY: u64 = 256 << 20;

/// One model to prefetch, as the engine last asked.
#[derive(Debug, Clone)]
pub(super) struct Job {
    pub model: String,
    pub source: WeightsSource,
    /// The generation this job belongs to; it is stale once the shared
    /// generation differs.
    pub generation: u64,
    /// Read ahead on `prefetch_predict`'s forecast, not the plan's.
    pub predicted: bool,
}

/// What the engine's handle and the thread share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub slot: Mutex<Slot>,
    pub wake: Condvar,
    /// Moved on by every change of what the engine wants.
    pub generation: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Default)]
pub(super) struct Slot {
    pub next: Option<Job>,
    /// The handle is gone: the thread ends.
    pub closed: bool,
}

pub(super) struct Worker {
    pub shared: Arc<Shared>,
    pub counters: Arc<Counters>,
    pub bounds: PrefetchConfig,
    /// The test hook's pause after each chunk read (`STRATA_TEST_PREFETCH_PAUSE_MS`).
    pub pause: Duration,
    /// What was said once already, shared with the residency measurements.
    pub said: Arc<Said>,
}

impl Worker {
    pub fn run(mut self) {
        if let Err(err) = page_cache::lower_thread_priority() {
            tracing::warn!(error = %err, "the weights prefetch runs at normal I/O and CPU priority");
        }
        while let Some(job) = self.next_job() {
            if self.current(job.generation) {
                self.prefetch(&job);
            }
        }
    }

    fn next_job(&self) -> Option<Job> {
        let mut slot = self
            .shared
            .slot
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        loop {
            if slot.closed {
                return None;
            }
            if let Some(job) = slot.next.take() {
                return Some(job);
            }
            slot = self
                .shared
                .wake
                .wait(slot)
                .unwrap_or_else(|poison| poison.into_inner());
        }
    }

    fn current(&self, generation: u64) -> bool {
        self.shared.generation.load(Ordering::Acquire) == generation
    }

    /// True the first time `what` is said of `model`.
    fn first_time(&self, model: &str, what: &str) -> bool {
        self.said.first_time(model, what)
    }

    fn prefetch(&mut self, job: &Job) {
        let model = job.model.as_str();
        let predicted = job.predicted;
        let found = files::expand(&job.source.paths());
        found.warn_unusable(model, &job.source, &self.said);
        let total = found.total_bytes();
        if total == 0 {
            return;
        }
        let max = self.bounds.max_bytes;
        if total > max {
            if self.first_time(model, "max_bytes") {
                tracing::info!(
                    model,
                    bytes = total,
                    prefetch_max_bytes = max,
                    "weights prefetch skipped: the weights are larger than prefetch_max_bytes"
                );
            } else {
                tracing::debug!(model, "weights prefetch skipped again (max_bytes)");
            }
            return;
        }
        let measured = residency::measure(&found.files);
        let resident = measured.resident;
        let left = total.saturating_sub(resident);
        // An estimate of all resident may still miss a chunk: the loop
        // below reads only the chunks that are not, so it runs anyway.
        if left == 0 && measured.exact {
            tracing::debug!(model, bytes = total, "weights already resident");
            return;
        }
        if !self.memory_allows(model, left, "memory") {
            return;
        }
        tracing::info!(
            model,
            bytes = left,
            total,
            resident_percent = resident * 100 / total,
            predicted,
            "prefetching weights"
        );
        let started = Instant::now();
        let mut read = 0u64;
        let mut since_check = 0u64;
        let mut buffer = vec![0u8; CHUNK as usize];
        for file in &found.files {
            let handle = match File::open(&file.path) {
                Ok(handle) => handle,
                Err(err) => {
                    // It could be opened when the list was made a moment ago.
                    let problem = Problem::of(&err);
                    files::warn_unusable(model, &job.source, &self.said, &file.path, problem);
                    continue;
                }
            };
            let resident_in = |offset: u64| {
                let len = CHUNK.min(file.len - offset);
                (
                    len,
                    page_cache::resident_bytes(&handle, offset, len).unwrap_or(0),
                )
            };
            let mut offset = 0;
            // What was resident of the chunk before this thread's own hint
            // for it: only the rest counts as prefetched.
            let (mut len, mut before) = resident_in(0);
            while offset < file.len {
                if !self.current(job.generation) {
                    tracing::info!(
                        model,
                        bytes = read,
                        predicted,
                        "weights prefetch stopped: the model is no longer next"
                    );
                    return;
                }
                let next = offset + len;
                let (next_len, next_before) = if next < file.len {
                    resident_in(next)
                } else {
                    (0, 0)
                };
                if before < len {
                    if next_before < next_len {
                        let _ = page_cache::will_need(&handle, next, next_len);
                    }
                    let chunk_started = Instant::now();
                    if let Err(err) = handle.read_exact_at(&mut buffer[..len as usize], offset) {
                        if self.first_time(model, "read_error") {
                            tracing::warn!(model, error = %err.kind(), "a weights file could not be read; it is skipped");
                        }
                        break;
                    }
                    let fresh = len - before;
                    self.counters.count_prefetched(
                        model,
                        fresh,
                        chunk_started.elapsed().as_secs_f64(),
                    );
                    read += fresh;
                    since_check += fresh;
                    if since_check >= CHECK_EVERY {
                        since_check = 0;
                        if !self.memory_allows(model, left.saturating_sub(read), "memory_later") {
                            return;
                        }
                    }
                    if !self.pause.is_zero() {
                        std::thread::sleep(self.pause);
                    }
                }
                offset = next;
                (len, before) = (next_len, next_before);
            }
        }
        tracing::info!(
            model,
            bytes = read,
            seconds = started.elapsed().as_secs_f64(),
            predicted,
            "weights prefetched"
        );
    }

    /// Whether `MemAvailable` minus the `left` bytes still to read stays at
    /// or above `prefetch_min_free_bytes`; says why not, once per model.
    fn memory_allows(&self, model: &str, left: u64, what: &str) -> bool {
        let min_free = self.bounds.min_free_bytes;
        let available = mem_available::available_bytes();
        let allowed = available
            .and_then(|bytes| bytes.checked_sub(left))
            .is_some_and(|rest| rest >= min_free);
        if allowed {
            return true;
        }
        if self.first_time(model, what) {
            tracing::info!(
                model,
                mem_available = available,
                bytes_left = left,
                prefetch_min_free_bytes = min_free,
                "weights prefetch skipped: MemAvailable minus what is left to read would fall below prefetch_min_free_bytes"
            );
        } else {
            tracing::debug!(model, "weights prefetch skipped again (min_free_bytes)");
        }
        false
    }
}

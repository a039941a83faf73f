//! The in-memory ring of finished request records and the `/requests` cursor reads.
//!
//! Pure data structure, no I/O. Completion sequence numbers are allocated here (1, 2, ...) and
//! are dense, so the ring stores only the record texts plus the next sequence to allocate; the
//! sequence of the record at index `i` is `oldest_seq + i`.
//!
//! Cursor semantics (router spec, "Reading recent records"):
//! - `after = Some(a)`: the records with seq > a, in increasing seq, at most `limit`;
//!   `next_seq` is the last returned record's seq, or `a` if none matched; `dropped` is the
//!   number of records with seq > a that the ring has already evicted (independent of `limit`).
//! - `after = None`: the newest `limit` records, `dropped` 0, `next_seq` the last returned seq
//!   (0 for an empty ring).
//! - `oldest_seq` is the oldest retained seq, or `None` when the ring is empty.
//!
//! Reads never drain the ring.

use std::collections::VecDeque;
use std::sync::Arc;

use strata_protocol::page::{RecordsPage, clamp_page_limit};

/// Largest configurable ring capacity (`request_log_capacity`).
pub const MAX_CAPACITY: usize = 100_000;

/// The bounded memory ring. Capacity is `request_log_capacity` (1..=100000).
#[derive(Debug)]
pub struct Ring {
    capacity: usize,
    /// Record texts, oldest first. Index `i` holds seq `next_seq - len + i`.
    records: VecDeque<Arc<str>>,
    /// The next completion seq to allocate (the last allocated + 1; 1 for a fresh ring).
    next_seq: u64,
}

/// One `/requests` page. `records` are the stored texts, shared with the JSONL writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// Record texts in increasing seq.
    pub records: Vec<Arc<str>>,
    /// The last returned record's seq, or the supplied cursor (0 without one) if none matched.
    pub next_seq: u64,
    /// Records after the supplied cursor that were already evicted; 0 without a cursor.
    pub dropped: u64,
    /// The oldest retained seq, or `None` for an empty ring.
    pub oldest_seq: Option<u64>,
}

impl Ring {
    /// A ring holding at most `capacity` records. `capacity` is clamped to 1..=[`MAX_CAPACITY`]
    /// (configuration validates the range; the clamp only keeps the ring well defined).
    pub fn new(capacity: usize) -> Ring {
        let capacity = capacity.clamp(1, MAX_CAPACITY);
        Ring {
            capacity,
            // Grow on demand: a large configured capacity costs nothing until used.
            records: VecDeque::with_capacity(capacity.min(1024)),
            next_seq: 1,
        }
    }

    /// Assigns the next completion seq, stores the text `make_json(seq)` built by the caller
    /// (the seq goes inside the record) and evicts the oldest record when full. Returns the seq.
    pub fn push(&mut self, make_json: impl FnOnce(u64) -> Arc<str>) -> u64 {
        let seq = self.next_seq;
        let text = make_json(seq);
        // Only advance after the caller's closure returned, so a panicking closure allocates
        // nothing and leaves the ring consistent.
        self.next_seq += 1;
        if self.records.len() == self.capacity {
            self.records.pop_front();
        }
        self.records.push_back(text);
        seq
    }

    /// One page of records; see the module docs for the exact semantics. `limit` is clamped to
    /// the page range ([`clamp_page_limit`]).
    pub fn page(&self, after: Option<u64>, limit: u32) -> Page {
        let limit = clamp_page_limit(u64::from(limit)) as usize;
        let len = self.records.len();
        let oldest_seq = self.oldest_seq();
        let Some(after) = after else {
            let start = len.saturating_sub(limit);
            let records: Vec<Arc<str>> = self.records.range(start..).cloned().collect();
            let next_seq = if records.is_empty() {
                0
            } else {
                self.next_seq - 1
            };
            return Page {
                records,
                next_seq,
                dropped: 0,
                oldest_seq,
            };
        };

        let evicted = self.evicted();
        // Evicted seqs are exactly 1..=evicted; those after the cursor were missed.
        let dropped = evicted.saturating_sub(after);
        let mut next_seq = after;
        let mut records = Vec::new();
        if let Some(oldest) = oldest_seq {
            let last = self.next_seq - 1;
            let first_wanted = after.saturating_add(1).max(oldest);
            if after < last {
                // first_wanted is within oldest..=last here, so the index fits in usize.
                let start = (first_wanted - oldest) as usize;
                let end = (start + limit).min(len);
                records.extend(self.records.range(start..end).cloned());
                next_seq = oldest + (end as u64) - 1;
            }
        }
        Page {
            records,
            next_seq,
            dropped,
            oldest_seq,
        }
    }

    /// Number of retained records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the ring holds no records (only before the first push).
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The configured capacity (after clamping).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of records evicted so far (they are seqs 1..=evicted).
    pub fn evicted(&self) -> u64 {
        self.next_seq - 1 - self.records.len() as u64
    }

    /// The next completion seq to allocate (last allocated + 1; 1 for a fresh ring).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The oldest retained seq, or `None` for an empty ring.
    pub fn oldest_seq(&self) -> Option<u64> {
        if self.records.is_empty() {
            None
        } else {
            Some(self.evicted() + 1)
        }
    }
}

impl Page {
    /// The page as the link carries it, for the router instance `instance_id`.
    pub fn into_records_page(self, instance_id: &str) -> RecordsPage {
        RecordsPage {
            records: self.records,
            next_seq: self.next_seq,
            dropped: self.dropped,
            oldest_seq: self.oldest_seq,
            instance_id: instance_id.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64) -> Arc<str> {
        Arc::from(format!("{{\"seq\":{seq}}}"))
    }

    /// A ring of `capacity` after `pushes` pushes.
    fn ring(capacity: usize, pushes: u64) -> Ring {
        let mut ring = Ring::new(capacity);
        for expected in 1..=pushes {
            assert_eq!(ring.push(record), expected);
        }
        ring
    }

    fn seqs(page: &Page) -> Vec<u64> {
        page.records
            .iter()
            .map(|text| {
                let value: serde_json::Value = serde_json::from_str(text).unwrap();
                value["seq"].as_u64().unwrap()
            })
            .collect()
    }

    struct Case {
        name: &'static str,
        capacity: usize,
        pushes: u64,
        after: Option<u64>,
        limit: u32,
        /// Expected returned seqs as an inclusive range (`None` = no records).
        records: Option<(u64, u64)>,
        next_seq: u64,
        dropped: u64,
        oldest_seq: Option<u64>,
    }

    #[test]
    fn cursor_cases() {
        let cases = [
            Case {
                name: "empty ring without after",
                capacity: 10,
                pushes: 0,
                after: None,
                limit: 100,
                records: None,
                next_seq: 0,
                dropped: 0,
                oldest_seq: None,
            },
            Case {
                name: "empty ring with after=0",
                capacity: 10,
                pushes: 0,
                after: Some(0),
                limit: 100,
                records: None,
                next_seq: 0,
                dropped: 0,
                oldest_seq: None,
            },
            Case {
                name: "empty ring with a stale cursor (previous instance)",
                capacity: 10,
                pushes: 0,
                after: Some(42),
                limit: 100,
                records: None,
                next_seq: 42,
                dropped: 0,
                oldest_seq: None,
            },
            Case {
                name: "after=0, nothing evicted",
                capacity: 10,
                pushes: 4,
                after: Some(0),
                limit: 100,
                records: Some((1, 4)),
                next_seq: 4,
                dropped: 0,
                oldest_seq: Some(1),
            },
            Case {
                name: "after=0 on a ring that evicted",
                capacity: 10,
                pushes: 25,
                after: Some(0),
                limit: 100,
                records: Some((16, 25)),
                next_seq: 25,
                dropped: 15,
                oldest_seq: Some(16),
            },
            Case {
                name: "after=0 on a ring that evicted, limited page",
                capacity: 10,
                pushes: 25,
                after: Some(0),
                limit: 3,
                records: Some((16, 18)),
                next_seq: 18,
                dropped: 15,
                oldest_seq: Some(16),
            },
            Case {
                name: "after inside the retained range",
                capacity: 10,
                pushes: 25,
                after: Some(20),
                limit: 100,
                records: Some((21, 25)),
                next_seq: 25,
                dropped: 0,
                oldest_seq: Some(16),
            },
            Case {
                name: "after inside the retained range, limited page",
                capacity: 10,
                pushes: 25,
                after: Some(17),
                limit: 2,
                records: Some((18, 19)),
                next_seq: 19,
                dropped: 0,
                oldest_seq: Some(16),
            },
            Case {
                name: "after == oldest - 1 (nothing missed)",
                capacity: 10,
                pushes: 25,
                after: Some(15),
                limit: 100,
                records: Some((16, 25)),
                next_seq: 25,
                dropped: 0,
                oldest_seq: Some(16),
            },
            Case {
                name: "after before the oldest counts only evictions after the cursor",
                capacity: 10,
                pushes: 25,
                after: Some(12),
                limit: 100,
                records: Some((16, 25)),
                next_seq: 25,
                dropped: 3,
                oldest_seq: Some(16),
            },
            Case {
                name: "dropped is independent of the limit",
                capacity: 10,
                pushes: 25,
                after: Some(12),
                limit: 1,
                records: Some((16, 16)),
                next_seq: 16,
                dropped: 3,
                oldest_seq: Some(16),
            },
            Case {
                name: "after == last",
                capacity: 10,
                pushes: 25,
                after: Some(25),
                limit: 100,
                records: None,
                next_seq: 25,
                dropped: 0,
                oldest_seq: Some(16),
            },
            Case {
                name: "after beyond last",
                capacity: 10,
                pushes: 25,
                after: Some(1000),
                limit: 100,
                records: None,
                next_seq: 1000,
                dropped: 0,
                oldest_seq: Some(16),
            },
            Case {
                name: "after = u64::MAX",
                capacity: 10,
                pushes: 25,
                after: Some(u64::MAX),
                limit: 100,
                records: None,
                next_seq: u64::MAX,
                dropped: 0,
                oldest_seq: Some(16),
            },
            Case {
                name: "limit 0 clamps to 1 (with after)",
                capacity: 10,
                pushes: 5,
                after: Some(0),
                limit: 0,
                records: Some((1, 1)),
                next_seq: 1,
                dropped: 0,
                oldest_seq: Some(1),
            },
            Case {
                name: "limit 0 clamps to 1 (without after)",
                capacity: 10,
                pushes: 5,
                after: None,
                limit: 0,
                records: Some((5, 5)),
                next_seq: 5,
                dropped: 0,
                oldest_seq: Some(1),
            },
            Case {
                name: "limit 5000 clamps to 1000 (with after)",
                capacity: 3000,
                pushes: 2500,
                after: Some(0),
                limit: 5000,
                records: Some((1, 1000)),
                next_seq: 1000,
                dropped: 0,
                oldest_seq: Some(1),
            },
            Case {
                name: "limit 5000 clamps to 1000 (without after)",
                capacity: 3000,
                pushes: 2500,
                after: None,
                limit: 5000,
                records: Some((1501, 2500)),
                next_seq: 2500,
                dropped: 0,
                oldest_seq: Some(1),
            },
            Case {
                name: "capacity 1, after=0",
                capacity: 1,
                pushes: 7,
                after: Some(0),
                limit: 100,
                records: Some((7, 7)),
                next_seq: 7,
                dropped: 6,
                oldest_seq: Some(7),
            },
            Case {
                name: "capacity 1, without after",
                capacity: 1,
                pushes: 7,
                after: None,
                limit: 100,
                records: Some((7, 7)),
                next_seq: 7,
                dropped: 0,
                oldest_seq: Some(7),
            },
            Case {
                name: "capacity 1, after == last",
                capacity: 1,
                pushes: 7,
                after: Some(7),
                limit: 100,
                records: None,
                next_seq: 7,
                dropped: 0,
                oldest_seq: Some(7),
            },
            Case {
                name: "newest limit without after",
                capacity: 10,
                pushes: 25,
                after: None,
                limit: 4,
                records: Some((22, 25)),
                next_seq: 25,
                dropped: 0,
                oldest_seq: Some(16),
            },
            Case {
                name: "without after, limit above len returns all retained",
                capacity: 10,
                pushes: 25,
                after: None,
                limit: 100,
                records: Some((16, 25)),
                next_seq: 25,
                dropped: 0,
                oldest_seq: Some(16),
            },
        ];

        for case in cases {
            let ring = ring(case.capacity, case.pushes);
            let page = ring.page(case.after, case.limit);
            let expected: Vec<u64> = match case.records {
                Some((first, last)) => (first..=last).collect(),
                None => Vec::new(),
            };
            assert_eq!(seqs(&page), expected, "{}: records", case.name);
            assert_eq!(page.next_seq, case.next_seq, "{}: next_seq", case.name);
            assert_eq!(page.dropped, case.dropped, "{}: dropped", case.name);
            assert_eq!(
                page.oldest_seq, case.oldest_seq,
                "{}: oldest_seq",
                case.name
            );
        }
    }

    #[test]
    fn counters_and_eviction() {
        let mut ring = Ring::new(3);
        assert_eq!(
            (
                ring.len(),
                ring.evicted(),
                ring.next_seq(),
                ring.oldest_seq()
            ),
            (0, 0, 1, None)
        );
        assert!(ring.is_empty());
        for seq in 1..=3 {
            assert_eq!(ring.push(record), seq);
        }
        assert_eq!(
            (
                ring.len(),
                ring.evicted(),
                ring.next_seq(),
                ring.oldest_seq()
            ),
            (3, 0, 4, Some(1))
        );
        for seq in 4..=10 {
            assert_eq!(ring.push(record), seq);
        }
        assert_eq!(
            (
                ring.len(),
                ring.evicted(),
                ring.next_seq(),
                ring.oldest_seq()
            ),
            (3, 7, 11, Some(8))
        );
        assert_eq!(seqs(&ring.page(Some(0), 100)), vec![8, 9, 10]);
    }

    #[test]
    fn capacity_is_clamped() {
        assert_eq!(Ring::new(0).capacity(), 1);
        assert_eq!(Ring::new(MAX_CAPACITY + 1).capacity(), MAX_CAPACITY);
        assert_eq!(Ring::new(2048).capacity(), 2048);
    }

    #[test]
    fn reads_never_drain_and_cursor_walks_everything() {
        let ring = ring(50, 120);
        let first = ring.page(Some(0), 1000);
        assert_eq!(ring.page(Some(0), 1000), first);
        assert_eq!(ring.len(), 50);

        // Walking with next_seq as the cursor visits every retained record exactly once.
        let mut cursor = 0;
        let mut seen = Vec::new();
        let mut dropped_total = 0;
        loop {
            let page = ring.page(Some(cursor), 7);
            dropped_total += page.dropped;
            if page.records.is_empty() {
                assert_eq!(page.next_seq, cursor);
                break;
            }
            seen.extend(seqs(&page));
            cursor = page.next_seq;
        }
        assert_eq!(seen, (71..=120).collect::<Vec<_>>());
        // Only the first page (cursor 0) reports the gap.
        assert_eq!(dropped_total, 70);
    }

    #[test]
    fn push_hands_the_seq_to_the_builder() {
        let mut ring = Ring::new(2);
        let seq = ring.push(|seq| Arc::from(format!("{{\"seq\":{seq},\"x\":1}}")));
        assert_eq!(seq, 1);
        assert_eq!(&*ring.page(None, 1).records[0], "{\"seq\":1,\"x\":1}");
    }
}

//! The simulator's queue: every ticket not yet granted, and the part of it
//! a decision function is shown.
//!
//! [`decide`](strata_scheduler::decide) and the baselines read the whole queue they
//! are given, and the simulator asks them after every event; shown every
//! ticket, a run whose queue grows (a replay of a busy log, a policy that
//! swaps often) would take time proportional to the queue for every event,
//! quadratic in all. What they decide depends on few tickets of each
//! (tier, model) group: a decision grants or admits at most `D` tickets at
//! once (the dispatch limit: `max_pending`, and `cache_max_active` with
//! cache lookups), a group's earliest ticket in arrival order, or its
//! best-ranked ones when the router orders by cache rank. So the queue
//! shows, in arrival order:
//!
//! - every ticket admitted to a load (at most `D`);
//! - of each group's waiting tickets, the first `D + 1` by arrival, and
//!   with cache order the first `D + 1` by rank (highest first, ties by
//!   arrival, the order [`decide`](strata_scheduler::decide) sorts them in).
//!
//! A decision on this view is the one on the whole queue: every ticket a
//! decision names is among the first `D` of its group in the order it
//! picks them, every group with a waiting ticket shows its earliest, and a
//! count a rule compares with the free slots (a group's tickets, a tier's)
//! is, as soon as tickets are hidden, still more than `D` on both sides of
//! the comparison. One decision reaches past it: a model whose launch is
//! cooling down fails *every* waiting ticket for it, which the simulator
//! does itself at the first such failure ([`Queue::waiting_for`]). The
//! simulator's tests run each policy both ways and compare.
//!
//! Shown in full (`size` unbounded) where a rule reads more: the router
//! with queue deadlines (legacy mode: every ticket's deadline counts, and
//! its queue is bounded by `max_pending` anyway), the router with a hold
//! bound and cache order (past the bound it ranks only the loaded model's
//! tickets that arrived before the due one, which need not be among a
//! group's best-ranked few) and the baselines in legacy mode (whose refusal
//! counts the queue, bounded the same way).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound::{Excluded, Unbounded};

use strata_protocol::wire::ServiceTier;

use strata_scheduler::Waiting;

/// A waiting ticket by arrival: (arrival number, request).
type ByArrival = (u64, usize);
/// By cache rank, highest first, then by arrival.
type ByRank = (Reverse<i64>, u64, usize);

/// `rank`'s place in [`f64::total_cmp`]'s order, highest first.
fn rank_key(rank: f64) -> Reverse<i64> {
    let bits = rank.to_bits() as i64;
    Reverse(bits ^ ((((bits >> 63) as u64) >> 1) as i64))
}

/// A set of keys and its first `size` (its top).
#[derive(Debug)]
struct Top<K> {
    all: BTreeSet<K>,
    /// The greatest key in the top.
    last: Option<K>,
    size: usize,
}

impl<K: Ord + Copy> Top<K> {
    fn new(size: usize) -> Top<K> {
        Top {
            all: BTreeSet::new(),
            last: None,
            size: size.max(1),
        }
    }

    fn in_top(&self, key: &K) -> bool {
        self.last.is_some_and(|last| *key <= last)
    }

    /// Adds `key`; returns the key it pushed out of the top, if any.
    fn insert(&mut self, key: K) -> Option<K> {
        self.all.insert(key);
        if self.all.len() <= self.size {
            if self.last.is_none_or(|last| key > last) {
                self.last = Some(key);
            }
            return None;
        }
        let last = self.last.expect("a full top has a last key");
        if key > last {
            return None;
        }
        self.last = self.all.range(..last).next_back().copied();
        Some(last)
    }

    /// Removes `key`; returns the key that moved up into the top, if any.
    fn remove(&mut self, key: &K) -> Option<K> {
        let in_top = self.in_top(key);
        if !self.all.remove(key) || !in_top {
            return None;
        }
        let last = self.last.expect("a key was in the top");
        match self.all.range((Excluded(last), Unbounded)).next().copied() {
            Some(next) => {
                self.last = Some(next);
                Some(next)
            }
            None => {
                self.last = self.all.last().copied();
                None
            }
        }
    }
}

/// One (tier, model) group's waiting tickets.
#[derive(Debug)]
struct Group {
    by_arrival: Top<ByArrival>,
    by_rank: Option<Top<ByRank>>,
}

/// One model's tickets.
#[derive(Debug)]
struct Model {
    /// Queued, admitted ones included.
    queued: usize,
    /// By tier, in [`ServiceTier::ALL`] order.
    groups: [Group; 3],
}

#[derive(Debug)]
struct Entry {
    waiting: Waiting,
    rank: Reverse<i64>,
    shown: bool,
}

impl Entry {
    fn by_arrival(&self, request: usize) -> ByArrival {
        (self.waiting.arrival, request)
    }

    fn by_rank(&self, request: usize) -> ByRank {
        (self.rank, self.waiting.arrival, request)
    }
}

fn tier_index(tier: ServiceTier) -> usize {
    match tier {
        ServiceTier::Priority => 0,
        ServiceTier::Default => 1,
        ServiceTier::Flex => 2,
    }
}

/// The queue. A ticket's key is `(CONN, request index)`; tickets are pushed
/// in arrival order (rising `arrival`).
#[derive(Debug)]
pub(super) struct Queue {
    /// What the decision function sees, in arrival order.
    shown: Vec<Waiting>,
    /// Every queued ticket, by request index.
    entries: Vec<Option<Box<Entry>>>,
    models: HashMap<String, Model>,
    /// Tickets shown per group, by arrival and by rank.
    size: usize,
    ranked: bool,
}

impl Queue {
    /// A queue that shows `size` tickets of each group by arrival (and by
    /// rank when `ranked`); `usize::MAX` shows every ticket.
    pub(super) fn new(size: usize, ranked: bool) -> Queue {
        Queue {
            shown: Vec::new(),
            entries: Vec::new(),
            models: HashMap::new(),
            size,
            ranked,
        }
    }

    /// The tickets a decision function sees, in arrival order.
    pub(super) fn shown(&self) -> &[Waiting] {
        &self.shown
    }

    fn get(&self, request: usize) -> Option<&Entry> {
        self.entries.get(request)?.as_deref()
    }

    fn entry(&self, request: usize) -> &Entry {
        self.get(request).expect("a queued ticket")
    }

    fn entry_mut(&mut self, request: usize) -> &mut Entry {
        self.entries[request]
            .as_deref_mut()
            .expect("a queued ticket")
    }

    /// Whether any ticket (admitted or not) is for `model`.
    pub(super) fn holds_model(&self, model: &str) -> bool {
        self.models.get(model).is_some_and(|m| m.queued > 0)
    }

    /// Every waiting (not admitted) ticket for `model`, in arrival order.
    pub(super) fn waiting_for(&self, model: &str) -> Vec<usize> {
        let Some(m) = self.models.get(model) else {
            return Vec::new();
        };
        let mut all: Vec<ByArrival> = m
            .groups
            .iter()
            .flat_map(|group| group.by_arrival.all.iter().copied())
            .collect();
        all.sort_unstable();
        all.into_iter().map(|(_, request)| request).collect()
    }

    /// Adds a ticket that arrived after every queued one.
    pub(super) fn push(&mut self, waiting: Waiting, rank: f64) {
        let request = waiting.key.1 as usize;
        match self.models.get_mut(waiting.model.as_str()) {
            Some(model) => model.queued += 1,
            None => {
                let group = || Group {
                    by_arrival: Top::new(self.size),
                    by_rank: self.ranked.then(|| Top::new(self.size)),
                };
                let model = Model {
                    queued: 1,
                    groups: [group(), group(), group()],
                };
                self.models.insert(waiting.model.clone(), model);
            }
        }
        let entry = Entry {
            waiting,
            rank: rank_key(rank),
            shown: false,
        };
        if self.entries.len() <= request {
            self.entries.resize_with(request + 1, || None);
        }
        self.entries[request] = Some(Box::new(entry));
        self.join_group(request);
    }

    /// Takes request `request`'s ticket out of the queue.
    pub(super) fn remove(&mut self, request: usize) -> Option<Waiting> {
        let admitted = self.get(request)?.waiting.admitted;
        if !admitted {
            self.leave_group(request);
        }
        let entry = *self.entries[request].take().expect("checked above");
        if entry.shown {
            let at = self.position(entry.waiting.arrival).expect("shown");
            self.shown.remove(at);
        }
        if let Some(model) = self.models.get_mut(entry.waiting.model.as_str()) {
            model.queued -= 1;
        }
        Some(entry.waiting)
    }

    /// Marks the ticket admitted to a load; false if it is not queued.
    pub(super) fn admit(&mut self, request: usize) -> bool {
        let Some(entry) = self.get(request) else {
            return false;
        };
        if entry.waiting.admitted {
            return true;
        }
        self.leave_group(request);
        self.set_admitted(request, true);
        self.sync(request);
        true
    }

    /// Puts an admitted ticket back among the waiting ones.
    pub(super) fn unadmit(&mut self, request: usize) {
        if !self
            .get(request)
            .is_some_and(|entry| entry.waiting.admitted)
        {
            return;
        }
        self.set_admitted(request, false);
        self.join_group(request);
    }

    fn set_admitted(&mut self, request: usize, admitted: bool) {
        let entry = self.entry_mut(request);
        entry.waiting.admitted = admitted;
        let (shown, arrival) = (entry.shown, entry.waiting.arrival);
        if shown {
            let at = self.position(arrival).expect("shown");
            self.shown[at].admitted = admitted;
        }
    }

    fn group(&mut self, request: usize) -> &mut Group {
        let entry = self.entries[request].as_deref().expect("a queued ticket");
        let tier = tier_index(entry.waiting.tier);
        let model = self
            .models
            .get_mut(entry.waiting.model.as_str())
            .expect("a queued ticket's model");
        &mut model.groups[tier]
    }

    /// A waiting ticket enters its group.
    fn join_group(&mut self, request: usize) {
        let entry = self.entry(request);
        let (by_arrival, by_rank) = (entry.by_arrival(request), entry.by_rank(request));
        let group = self.group(request);
        let out_by_arrival = group.by_arrival.insert(by_arrival);
        let out_by_rank = group.by_rank.as_mut().and_then(|top| top.insert(by_rank));
        self.sync(request);
        if let Some((_, out)) = out_by_arrival {
            self.sync(out);
        }
        if let Some((_, _, out)) = out_by_rank {
            self.sync(out);
        }
    }

    /// A waiting ticket leaves its group (it is removed or admitted).
    fn leave_group(&mut self, request: usize) {
        let entry = self.entry(request);
        let (by_arrival, by_rank) = (entry.by_arrival(request), entry.by_rank(request));
        let group = self.group(request);
        let in_by_arrival = group.by_arrival.remove(&by_arrival);
        let in_by_rank = group.by_rank.as_mut().and_then(|top| top.remove(&by_rank));
        if let Some((_, moved)) = in_by_arrival {
            self.sync(moved);
        }
        if let Some((_, _, moved)) = in_by_rank {
            self.sync(moved);
        }
    }

    /// Shows or hides the ticket as its group's tops say.
    fn sync(&mut self, request: usize) {
        let entry = self.entry(request);
        let (by_arrival, by_rank) = (entry.by_arrival(request), entry.by_rank(request));
        let admitted = entry.waiting.admitted;
        let group = self.group(request);
        let want = admitted
            || group.by_arrival.in_top(&by_arrival)
            || group
                .by_rank
                .as_ref()
                .is_some_and(|top| top.in_top(&by_rank));
        let entry = self.entry_mut(request);
        if want == entry.shown {
            return;
        }
        entry.shown = want;
        let arrival = entry.waiting.arrival;
        match self.position(arrival) {
            Ok(at) => {
                self.shown.remove(at);
            }
            Err(at) => {
                let waiting = self.entry(request).waiting.clone();
                self.shown.insert(at, waiting);
            }
        }
    }

    fn position(&self, arrival: u64) -> Result<usize, usize> {
        self.shown
            .binary_search_by_key(&arrival, |ticket| ticket.arrival)
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;

    fn ticket(request: usize, model: &str, tier: ServiceTier) -> Waiting {
        Waiting {
            key: (1, request as u64),
            model: model.into(),
            tier,
            arrival: request as u64 + 1,
            arrived_at: Instant::now(),
            deadline: None,
            admitted: false,
        }
    }

    fn shown(queue: &Queue) -> Vec<u64> {
        queue.shown().iter().map(|t| t.key.1).collect()
    }

    #[test]
    fn a_top_keeps_its_first_keys_through_inserts_and_removals() {
        let mut top = Top::new(2);
        assert_eq!(top.insert(5), None);
        assert_eq!(top.insert(3), None);
        assert_eq!(top.insert(4), Some(5), "4 pushes 5 out");
        assert_eq!(top.insert(9), None);
        assert!(top.in_top(&3) && top.in_top(&4) && !top.in_top(&5));
        assert_eq!(top.remove(&9), None, "not in the top: nothing moves");
        assert_eq!(top.remove(&3), Some(5), "5 moves up");
        assert_eq!(top.remove(&5), None);
        assert_eq!(top.remove(&4), None);
        assert_eq!(top.last, None);
    }

    #[test]
    fn each_group_shows_its_first_tickets_by_arrival_and_the_rest_move_up() {
        let mut queue = Queue::new(2, false);
        for request in 0..6 {
            let model = if request % 2 == 0 { "a" } else { "b" };
            queue.push(ticket(request, model, ServiceTier::Default), 0.0);
        }
        queue.push(ticket(6, "a", ServiceTier::Flex), 0.0);
        assert_eq!(shown(&queue), [0, 1, 2, 3, 6], "two of each group");
        assert!(queue.remove(2).is_some());
        assert_eq!(shown(&queue), [0, 1, 3, 4, 6], "4 moved up");
        assert!(queue.admit(0));
        assert_eq!(shown(&queue), [0, 1, 3, 4, 6], "admitted stays, none left");
        assert!(queue.shown()[0].admitted);
        queue.unadmit(0);
        assert!(!queue.shown()[0].admitted);
        assert_eq!(queue.waiting_for("a"), [0, 4, 6]);
        assert!(queue.holds_model("b") && !queue.holds_model("c"));
        for request in [1, 3, 5] {
            queue.remove(request);
        }
        assert!(!queue.holds_model("b"));
        assert_eq!(shown(&queue), [0, 4, 6]);
    }

    #[test]
    fn with_cache_order_the_best_ranked_are_shown_too() {
        let mut queue = Queue::new(2, true);
        let ranks = [0.1, 0.0, 0.9, 0.5, 0.9, 0.2];
        for (request, rank) in ranks.into_iter().enumerate() {
            queue.push(ticket(request, "a", ServiceTier::Default), rank);
        }
        // First two by arrival (0, 1) and the best two by rank (2, 4).
        assert_eq!(shown(&queue), [0, 1, 2, 4]);
        queue.remove(4);
        assert_eq!(shown(&queue), [0, 1, 2, 3], "3 (0.5) moved up");
    }

    #[test]
    fn an_unbounded_queue_shows_everything() {
        let mut queue = Queue::new(usize::MAX, true);
        for request in 0..50 {
            queue.push(ticket(request, "a", ServiceTier::Default), 0.0);
        }
        assert_eq!(queue.shown().len(), 50);
    }
}

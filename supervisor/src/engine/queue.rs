//! The one queue: every ticket not yet granted, from every proxy, with what
//! the engine keeps of each and the cache-order state that depends on them.
//!
//! Cache scores are only valid for the queue they were computed over, so
//! every change to the queue discards them here, in the method that makes
//! the change (a caller cannot forget to). The one outside event that also
//! makes scores stale, a generation ending, is [`Queue::generation_ended`].

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use strata_protocol::wire::{
    ArrivalInfo, BackendInstance, CacheScores, LookupFailure, SupervisorMessage, TicketId,
    TicketScore,
};
use tokio::time::Instant;

use strata_scheduler::{CacheState, CacheView, ConnId, TicketKey, Waiting, rank};

/// The most tickets one cache lookup scores.
const MAX_LOOKUP_TICKETS: usize = 256;

/// What the engine keeps of a ticket besides its [`Waiting`] entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketInfo {
    pub arrival: ArrivalInfo,
    /// `Queued` (or another first answer) was sent.
    announced: bool,
    /// The load it was admitted to.
    load: Option<u64>,
}

/// One cache lookup to send: the tickets each proxy must score.
#[derive(Debug, PartialEq)]
pub struct LookupRequest {
    pub id: u64,
    pub by_conn: HashMap<ConnId, Vec<TicketId>>,
}

impl LookupRequest {
    /// The message to each proxy: score these tickets against `backend`
    /// within `budget_ms`.
    pub fn messages(
        self,
        backend: SocketAddr,
        budget_ms: u64,
    ) -> impl Iterator<Item = (ConnId, SupervisorMessage)> {
        let lookup = self.id;
        self.by_conn.into_iter().map(move |(conn, tickets)| {
            let message = SupervisorMessage::ScoreTickets {
                lookup,
                backend,
                tickets,
                budget_ms,
            };
            (conn, message)
        })
    }
}

#[derive(Debug, Default)]
pub struct Queue {
    /// Arrival order; admitted tickets stay until granted.
    waiting: Vec<Waiting>,
    info: HashMap<TicketKey, TicketInfo>,
    cache: CacheState,
    lookup_seq: u64,
    /// The serving backend answered a lookup with 404 (no extension).
    lookup_unsupported: Option<BackendInstance>,
}

impl Queue {
    /// Every ticket, in arrival order (what the scheduler reads).
    pub fn tickets(&self) -> &[Waiting] {
        &self.waiting
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn get(&self, key: TicketKey) -> Option<&Waiting> {
        self.waiting.iter().find(|ticket| ticket.key == key)
    }

    pub fn push(&mut self, ticket: Waiting, arrival: ArrivalInfo) {
        self.info.insert(
            ticket.key,
            TicketInfo {
                arrival,
                announced: false,
                load: None,
            },
        );
        self.waiting.push(ticket);
        self.cache.invalidate();
    }

    /// Removes a ticket (granted, failed or withdrawn).
    pub fn take(&mut self, key: TicketKey) -> Option<(Waiting, TicketInfo)> {
        let index = self.waiting.iter().position(|ticket| ticket.key == key)?;
        let ticket = self.waiting.remove(index);
        let info = self.info.remove(&key)?;
        self.cache.invalidate();
        Some((ticket, info))
    }

    /// The keys of the tickets that match `which`, in arrival order.
    pub fn keys_where(&self, which: impl Fn(&Waiting) -> bool) -> Vec<TicketKey> {
        self.waiting
            .iter()
            .filter(|ticket| which(ticket))
            .map(|ticket| ticket.key)
            .collect()
    }

    /// Marks a ticket announced; its arrival if it had no answer before.
    pub fn announce(&mut self, key: TicketKey) -> Option<ArrivalInfo> {
        let info = self.info.get_mut(&key)?;
        if info.announced {
            return None;
        }
        info.announced = true;
        Some(info.arrival)
    }

    /// The ticket leaves the queue for load `load` (granted once it is
    /// verified). False if it is not queued.
    pub fn admit(&mut self, key: TicketKey, load: u64) -> bool {
        let Some(ticket) = self.waiting.iter_mut().find(|ticket| ticket.key == key) else {
            return false;
        };
        ticket.admitted = true;
        if let Some(info) = self.info.get_mut(&key) {
            info.load = Some(load);
        }
        self.cache.invalidate();
        true
    }

    /// The tickets admitted to load `load`, in arrival order.
    pub fn admitted_to(&self, load: u64) -> Vec<TicketKey> {
        self.keys_where(|ticket| {
            ticket.admitted
                && self
                    .info
                    .get(&ticket.key)
                    .is_some_and(|info| info.load == Some(load))
        })
    }

    /// Load `load` ended without a backend: its admitted tickets wait again.
    pub fn return_admitted(&mut self, load: u64) {
        for ticket in &mut self.waiting {
            let info = self.info.get_mut(&ticket.key);
            if let Some(info) = info.filter(|info| info.load == Some(load)) {
                info.load = None;
                ticket.admitted = false;
            }
        }
        self.cache.invalidate();
    }

    /// A connection closed: its tickets leave, and a lookup that waits for
    /// its answer fails.
    pub fn drop_conn(&mut self, conn: ConnId) {
        self.waiting.retain(|ticket| ticket.key.0 != conn);
        self.info.retain(|(owner, _), _| *owner != conn);
        self.cache.invalidate();
        if let Some(lookup) = &self.cache.lookup {
            let id = lookup.id;
            self.cache.answer(id, conn, None);
        }
    }

    // ---- cache order ------------------------------------------------------

    /// A generation ended: the backend's cache changed under the scores.
    pub fn generation_ended(&mut self) {
        self.cache.invalidate();
    }

    /// Starts a lookup of these competitors (at most [`MAX_LOOKUP_TICKETS`]),
    /// answered by `until`.
    pub fn start_lookup(&mut self, keys: Vec<TicketKey>, until: Instant) -> LookupRequest {
        let mut by_conn: HashMap<ConnId, Vec<TicketId>> = HashMap::new();
        for (conn, ticket) in keys.into_iter().take(MAX_LOOKUP_TICKETS) {
            by_conn.entry(conn).or_default().push(ticket);
        }
        self.lookup_seq += 1;
        self.cache.start(
            self.lookup_seq,
            until,
            by_conn.keys().copied().collect::<HashSet<_>>(),
        );
        LookupRequest {
            id: self.lookup_seq,
            by_conn,
        }
    }

    /// `conn`'s answer to lookup `id`: each ticket ranked by its scores
    /// (an input below `min_tokens`, else below the reply's own, does not
    /// qualify), or arrival order after a failure; a 404 says the `serving`
    /// backend has no lookup extension.
    pub fn answer_scores(
        &mut self,
        id: u64,
        conn: ConnId,
        scores: Result<CacheScores, LookupFailure>,
        min_tokens: Option<u64>,
        serving: Option<BackendInstance>,
    ) {
        let ranks = match scores {
            Ok(scores) => {
                let min_tokens = min_tokens.unwrap_or(scores.min_tokens);
                let rank = |score: &TicketScore| {
                    let rank = rank(score.input_tokens, score.cached_tokens, min_tokens);
                    ((conn, score.ticket), rank)
                };
                Some(scores.results.iter().map(rank).collect())
            }
            Err(failure) => {
                tracing::debug!(
                    failure = failure.as_str(),
                    "cache lookup failed; arrival order"
                );
                if failure == LookupFailure::Unsupported {
                    self.lookups_unsupported_by(serving);
                }
                None
            }
        };
        self.answer_lookup(id, conn, ranks);
    }

    /// One proxy's part of lookup `id`: ranks per ticket, or `None` when
    /// it failed.
    fn answer_lookup(&mut self, id: u64, conn: ConnId, ranks: Option<HashMap<TicketKey, f64>>) {
        self.cache.answer(id, conn, ranks);
    }

    /// The serving backend `instance` has no lookup extension.
    pub fn lookups_unsupported_by(&mut self, instance: Option<BackendInstance>) {
        self.lookup_unsupported = instance;
    }

    /// Ends a lookup whose budget ran out.
    pub fn expire_lookup(&mut self, now: Instant) {
        self.cache.expire(now);
    }

    /// The cache state the scheduler reads; lookups are usable when enabled
    /// and `serving` has not answered one with 404.
    pub fn cache_view(&self, enabled: bool, serving: Option<BackendInstance>) -> CacheView<'_> {
        let usable = enabled && serving.is_some() && serving != self.lookup_unsupported;
        self.cache.view(usable)
    }
}

#[cfg(test)]
mod tests {
    use strata_protocol::wire::ServiceTier;

    use super::*;

    fn ticket(conn: ConnId, id: u64, model: &str) -> Waiting {
        Waiting {
            key: (conn, id),
            model: model.into(),
            tier: ServiceTier::Default,
            arrival: id,
            arrived_at: Instant::now(),
            deadline: None,
            admitted: false,
        }
    }

    fn arrival(seq: u64) -> ArrivalInfo {
        ArrivalInfo {
            arrival_seq: seq,
            queue_depth: 0,
            in_flight: 0,
        }
    }

    /// Valid scores for the current queue, as a finished lookup leaves them.
    fn scored(queue: &mut Queue, now: Instant) {
        let keys = queue.keys_where(|_| true);
        let lookup = queue.start_lookup(keys.clone(), now + std::time::Duration::from_secs(1));
        for conn in lookup.by_conn.keys() {
            let ranks = keys
                .iter()
                .filter(|key| key.0 == *conn)
                .map(|key| (*key, 0.5))
                .collect();
            queue.answer_lookup(lookup.id, *conn, Some(ranks));
        }
        assert!(queue.cache_view(true, Some(instance())).ranks.is_some());
    }

    fn instance() -> BackendInstance {
        BackendInstance { epoch: 1, pid: 7 }
    }

    /// Every way the queue changes discards the scores by itself.
    #[test]
    fn every_change_to_the_queue_discards_the_scores() {
        let now = Instant::now();
        type Change = fn(&mut Queue);
        let changes: [(&str, Change); 6] = [
            ("push", |q| q.push(ticket(1, 9, "a"), arrival(9))),
            ("take", |q| {
                q.take((1, 1));
            }),
            ("admit", |q| {
                q.admit((1, 1), 3);
            }),
            ("return_admitted", |q| q.return_admitted(3)),
            ("drop_conn", |q| q.drop_conn(2)),
            ("generation_ended", |q| q.generation_ended()),
        ];
        for (name, change) in changes {
            let mut queue = Queue::default();
            queue.push(ticket(1, 1, "a"), arrival(1));
            queue.push(ticket(2, 2, "a"), arrival(2));
            scored(&mut queue, now);
            change(&mut queue);
            assert!(
                queue.cache_view(true, Some(instance())).ranks.is_none(),
                "{name} kept stale scores"
            );
        }
    }

    #[test]
    fn a_cancelled_loads_tickets_wait_again_and_others_stay_admitted() {
        let mut queue = Queue::default();
        for id in 1..=3 {
            queue.push(ticket(1, id, "a"), arrival(id));
        }
        assert!(queue.admit((1, 1), 5));
        assert!(queue.admit((1, 2), 6));
        assert_eq!(queue.admitted_to(5), [(1, 1)]);
        queue.return_admitted(5);
        assert!(queue.admitted_to(5).is_empty());
        assert!(!queue.get((1, 1)).unwrap().admitted);
        assert!(queue.get((1, 2)).unwrap().admitted);
        assert!(!queue.admit((1, 9), 5), "an unknown ticket is not admitted");
    }

    #[test]
    fn a_ticket_is_announced_once() {
        let mut queue = Queue::default();
        queue.push(ticket(1, 1, "a"), arrival(4));
        assert_eq!(queue.announce((1, 1)), Some(arrival(4)));
        assert_eq!(queue.announce((1, 1)), None);
        assert_eq!(queue.announce((1, 2)), None);
    }

    #[test]
    fn a_closed_connection_fails_the_lookup_that_waits_for_it() {
        let now = Instant::now();
        let mut queue = Queue::default();
        queue.push(ticket(1, 1, "a"), arrival(1));
        queue.push(ticket(2, 2, "a"), arrival(2));
        let lookup = queue.start_lookup(
            vec![(1, 1), (2, 2)],
            now + std::time::Duration::from_secs(1),
        );
        assert_eq!(lookup.by_conn.len(), 2);
        queue.drop_conn(2);
        let view = queue.cache_view(true, Some(instance()));
        assert!(view.lookup_until.is_none() && view.ranks.is_none());
        assert_eq!(queue.tickets().len(), 1);
    }

    #[test]
    fn lookups_are_unusable_on_a_backend_without_the_extension() {
        let mut queue = Queue::default();
        assert!(queue.cache_view(true, Some(instance())).usable);
        assert!(!queue.cache_view(false, Some(instance())).usable);
        assert!(!queue.cache_view(true, None).usable);
        queue.lookups_unsupported_by(Some(instance()));
        assert!(!queue.cache_view(true, Some(instance())).usable);
        let next = BackendInstance { epoch: 2, pid: 8 };
        assert!(queue.cache_view(true, Some(next)).usable);
    }
}

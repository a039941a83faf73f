//! The granted leases, and the quiet clock they drive.
//!
//! A lease ends only when its proxy finishes it or its connection closes (a
//! revoked one too), so the backend it names stays untouched while it
//! exists; only a forced shutdown forgets leases. `quiet_since`, the start
//! of the grace and idle clocks, changes only here: when the last lease
//! ends, or when [`Leases::restart_quiet_clock`] is asked to (a load or an
//! operator `on` finished).

use std::collections::HashMap;

use strata_protocol::wire::ServiceTier;
use tokio::time::Instant;

use strata_scheduler::{ConnId, TicketKey};

/// One granted lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub model: String,
    pub tier: ServiceTier,
    /// Legacy: the response headers have not arrived yet (the lease holds
    /// the engine lock).
    pub header_wait: bool,
    /// `Revoked` was sent; the lease lasts until the proxy finishes it.
    pub revoked: bool,
}

impl Lease {
    /// A new lease on `model`; in legacy mode it holds the engine lock
    /// until its response headers arrive.
    pub fn new(model: String, tier: ServiceTier, legacy: bool) -> Lease {
        Lease {
            model,
            tier,
            header_wait: legacy,
            revoked: false,
        }
    }
}

#[derive(Debug)]
pub struct Leases {
    held: HashMap<TicketKey, Lease>,
    quiet_since: Instant,
}

impl Leases {
    pub fn new(now: Instant) -> Leases {
        Leases {
            held: HashMap::new(),
            quiet_since: now,
        }
    }

    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    pub fn contains(&self, key: TicketKey) -> bool {
        self.held.contains_key(&key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&TicketKey, &Lease)> {
        self.held.iter()
    }

    /// The model of each lease.
    pub fn models(&self) -> Vec<&str> {
        self.held
            .values()
            .map(|lease| lease.model.as_str())
            .collect()
    }

    /// When the last lease ended (or a load or `on` finished).
    pub fn quiet_since(&self) -> Instant {
        self.quiet_since
    }

    /// Legacy: leases still waiting for their response headers.
    pub fn header_waits(&self) -> usize {
        self.held.values().filter(|lease| lease.header_wait).count()
    }

    pub fn grant(&mut self, key: TicketKey, lease: Lease) {
        self.held.insert(key, lease);
    }

    /// Legacy: the lease's response headers arrived.
    pub fn headers_received(&mut self, key: TicketKey) {
        if let Some(lease) = self.held.get_mut(&key) {
            lease.header_wait = false;
        }
    }

    /// Ends the lease of `key`; true if it existed (a generation ended).
    pub fn end(&mut self, key: TicketKey, now: Instant) -> bool {
        let ended = self.held.remove(&key).is_some();
        if ended && self.held.is_empty() {
            self.quiet_since = now;
        }
        ended
    }

    /// A connection closed: every lease it held ends.
    pub fn drop_conn(&mut self, conn: ConnId, now: Instant) {
        let before = self.held.len();
        self.held.retain(|(owner, _), _| *owner != conn);
        if before > 0 && self.held.is_empty() {
            self.quiet_since = now;
        }
    }

    /// Marks every lease not yet revoked as revoked and returns those keys
    /// (the engine tells their proxies).
    pub fn revoke_all(&mut self) -> Vec<TicketKey> {
        self.held
            .iter_mut()
            .filter(|(_, lease)| !lease.revoked)
            .map(|(key, lease)| {
                lease.revoked = true;
                *key
            })
            .collect()
    }

    /// A forced shutdown: after it this supervisor starts no backend again,
    /// so leases need not be waited for.
    pub fn forget_all(&mut self, now: Instant) {
        if !self.held.is_empty() {
            self.held.clear();
            self.quiet_since = now;
        }
    }

    /// A load or an operator `on` finished: the grace and idle clocks start
    /// again from `now`.
    pub fn restart_quiet_clock(&mut self, now: Instant) {
        self.quiet_since = now;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn lease(model: &str) -> Lease {
        Lease {
            model: model.into(),
            tier: ServiceTier::Default,
            header_wait: false,
            revoked: false,
        }
    }

    #[test]
    fn the_quiet_clock_starts_when_the_last_lease_ends() {
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        let mut leases = Leases::new(start);
        leases.grant((1, 1), lease("a"));
        leases.grant((1, 2), lease("a"));
        assert!(leases.end((1, 1), at(1)));
        assert_eq!(leases.quiet_since(), start, "one lease is left");
        assert!(!leases.end((1, 1), at(2)), "already ended");
        assert!(leases.end((1, 2), at(3)));
        assert_eq!(leases.quiet_since(), at(3));
    }

    #[test]
    fn a_closed_connection_ends_only_its_leases() {
        let start = Instant::now();
        let later = start + Duration::from_secs(5);
        let mut leases = Leases::new(start);
        leases.grant((1, 1), lease("a"));
        leases.grant((2, 1), lease("b"));
        leases.drop_conn(1, later);
        assert_eq!(leases.len(), 1);
        assert_eq!(leases.quiet_since(), start);
        assert!(leases.iter().all(|(key, _)| key.0 == 2));
        leases.drop_conn(2, later);
        assert_eq!(leases.quiet_since(), later);
        // Nothing held: a closing connection without leases moves nothing.
        leases.drop_conn(3, later + Duration::from_secs(1));
        assert_eq!(leases.quiet_since(), later);
    }

    #[test]
    fn each_lease_is_revoked_once_and_lasts_until_it_ends() {
        let mut leases = Leases::new(Instant::now());
        leases.grant((1, 1), lease("a"));
        assert_eq!(leases.revoke_all(), [(1, 1)]);
        leases.grant((1, 2), lease("a"));
        assert_eq!(leases.revoke_all(), [(1, 2)]);
        assert!(leases.revoke_all().is_empty());
        assert_eq!(leases.len(), 2);
    }

    #[test]
    fn only_waiting_headers_count_as_header_waits() {
        let mut leases = Leases::new(Instant::now());
        leases.grant(
            (1, 1),
            Lease {
                header_wait: true,
                ..lease("a")
            },
        );
        leases.grant((1, 2), lease("a"));
        assert_eq!(leases.header_waits(), 1);
        leases.headers_received((1, 1));
        assert_eq!(leases.header_waits(), 0);
    }
}

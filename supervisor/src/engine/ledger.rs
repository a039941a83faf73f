//! What the engine knows of every ticket from its `Enqueue` to its `Finish`,
//! whatever the scheduler did with it meanwhile (waiting, admitted, granted,
//! failed): enough to write the request's record itself if the proxy's
//! connection closes before the `Finish` arrives (a proxy crash).
//!
//! The queue and the leases forget a ticket as soon as it is granted or
//! failed; the ledger keeps it until the proxy has said it is over, because
//! only then is its record stored.

use std::collections::HashMap;

use strata_protocol::ids;
use strata_protocol::record::{
    CHAT_ENDPOINT, Reason, RequestRecord, SCHEMA_VERSION, format_unix_ms,
};
use strata_protocol::wire::{
    ArrivalInfo, Grant, LeaseFailure, ServiceTier, TicketId, TicketRequest,
};

use strata_scheduler::{ConnId, TicketKey};

/// One ticket whose record has not arrived yet.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenTicket {
    pub ticket: TicketId,
    /// The concrete model ID it was queued for.
    pub model: String,
    pub tier: ServiceTier,
    pub request: TicketRequest,
    pub arrival: ArrivalInfo,
    /// Admission (the first of `Admitted` or the grant), in milliseconds
    /// since the Unix epoch.
    pub admitted_unix_ms: Option<u64>,
    pub granted: bool,
    pub upstream_model: Option<String>,
    pub model_switch: bool,
    pub load_ms: Option<u64>,
}

impl OpenTicket {
    /// The record the supervisor writes for this ticket when its proxy is
    /// gone: `reason: "shutdown"`, `status: null`, what the supervisor knew,
    /// and null (or 0 and `false`, where the schema has no null) for all it
    /// could not observe: the response, its tokens and its bytes.
    pub fn substitute_record(&self, instance_id: &str, ended_unix_ms: u64) -> RequestRecord {
        let arrived = self.request.arrived_unix_ms;
        // The clocks are one machine's wall clock; never let a step back
        // make a duration negative.
        let since_arrival = |at: u64| at.saturating_sub(arrived);
        RequestRecord {
            schema_version: SCHEMA_VERSION,
            seq: 0,
            arrival_seq: self.arrival.arrival_seq,
            request_id: ids::request_id(instance_id, self.arrival.arrival_seq),
            endpoint: CHAT_ENDPOINT.to_owned(),
            stream: self.request.stream,
            model_requested: Some(self.request.model_requested.clone()),
            model_resolved: Some(self.model.clone()),
            upstream_model: self.upstream_model.clone(),
            arrived_at: format_unix_ms(arrived),
            completed_at: format_unix_ms(ended_unix_ms.max(arrived)),
            lease_at: self.admitted_unix_ms.map(format_unix_ms),
            first_token_at: None,
            last_token_at: None,
            queue_depth_at_arrival: self.arrival.queue_depth,
            in_flight_at_arrival: self.arrival.in_flight,
            queue_wait_ms: self
                .admitted_unix_ms
                .filter(|_| self.granted)
                .map(since_arrival),
            model_switch: self.model_switch,
            model_load_ms: self.load_ms,
            upstream_headers_ms: None,
            ttft_ms: None,
            ttft_after_lease_ms: None,
            generation_ms: None,
            total_ms: since_arrival(ended_unix_ms),
            prompt_tokens: None,
            completion_tokens: None,
            reasoning_tokens: None,
            prompt_n: None,
            cache_n: None,
            predicted_n: None,
            prompt_ms: None,
            predicted_ms: None,
            prompt_per_second: None,
            predicted_per_second: None,
            finish_reason: None,
            status: None,
            upstream_status: None,
            success: false,
            reason: Reason::Shutdown,
            response_bytes: 0,
            disconnect_phase: None,
        }
    }
}

/// Every open ticket of every connected proxy.
#[derive(Debug, Default)]
pub struct Ledger {
    open: HashMap<TicketKey, OpenTicket>,
}

impl Ledger {
    /// A ticket entered: `model` is the concrete model it was queued for,
    /// `upstream_model` that model's backend name (a stand-in record names
    /// both, as the proxy's record would).
    pub fn open(
        &mut self,
        key: TicketKey,
        model: &str,
        upstream_model: Option<&str>,
        tier: ServiceTier,
        request: TicketRequest,
        arrival: ArrivalInfo,
    ) {
        self.open.insert(
            key,
            OpenTicket {
                ticket: key.1,
                model: model.to_owned(),
                tier,
                request,
                arrival,
                admitted_unix_ms: None,
                granted: false,
                upstream_model: upstream_model.map(str::to_owned),
                model_switch: false,
                load_ms: None,
            },
        );
    }

    /// The ticket left the queue, for a load or a lease.
    pub fn admitted(&mut self, key: TicketKey, now_unix_ms: u64) {
        if let Some(open) = self.open.get_mut(&key) {
            open.admitted_unix_ms.get_or_insert(now_unix_ms);
        }
    }

    pub fn granted(&mut self, key: TicketKey, grant: &Grant, now_unix_ms: u64) {
        if let Some(open) = self.open.get_mut(&key) {
            open.admitted_unix_ms.get_or_insert(now_unix_ms);
            open.granted = true;
            open.upstream_model = Some(grant.upstream_model.clone());
            open.model_switch = grant.model_switch;
            open.load_ms = grant.load_ms;
        }
    }

    /// The ticket failed with `failure`; a failed load's figures are
    /// kept for its record.
    pub fn failed(&mut self, key: TicketKey, failure: &LeaseFailure) {
        if let LeaseFailure::LoadFailed {
            model_switch,
            load_ms,
            ..
        } = failure
            && let Some(open) = self.open.get_mut(&key)
        {
            open.model_switch = *model_switch;
            open.load_ms = *load_ms;
        }
    }

    /// The ticket's `Finish` (and so its record) arrived.
    pub fn close(&mut self, key: TicketKey) {
        self.open.remove(&key);
    }

    /// Takes every open ticket of a closed connection, in arrival order.
    pub fn take_conn(&mut self, conn: ConnId) -> Vec<OpenTicket> {
        let keys: Vec<TicketKey> = self
            .open
            .keys()
            .filter(|(owner, _)| *owner == conn)
            .copied()
            .collect();
        let mut taken: Vec<OpenTicket> = keys
            .into_iter()
            .filter_map(|key| self.open.remove(&key))
            .collect();
        taken.sort_by_key(|open| open.arrival.arrival_seq);
        taken
    }

    /// Every open ticket.
    pub fn iter(&self) -> impl Iterator<Item = (&TicketKey, &OpenTicket)> {
        self.open.iter()
    }

    pub fn len(&self) -> usize {
        self.open.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(stream: bool) -> TicketRequest {
        TicketRequest {
            model_requested: "fam".into(),
            stream,
            arrived_unix_ms: 1_764_474_000_000,
        }
    }

    fn arrival(seq: u64) -> ArrivalInfo {
        ArrivalInfo {
            arrival_seq: seq,
            queue_depth: 2,
            in_flight: 1,
        }
    }

    fn grant(ticket: TicketId) -> Grant {
        Grant {
            ticket,
            arrival: arrival(1),
            backend: "127.0.0.1:9".parse().unwrap(),
            instance: strata_protocol::wire::BackendInstance { epoch: 1, pid: 9 },
            upstream_model: "up-m".into(),
            model_switch: true,
            load_ms: Some(700),
        }
    }

    /// A waiting ticket's substitute says what was known at arrival (its
    /// model resolved, so its upstream name too) and nothing of admission. (The e2e crash test checks such records
    /// against the full schema.)
    #[test]
    fn a_waiting_tickets_record_has_arrival_facts_only() {
        let mut ledger = Ledger::default();
        ledger.open(
            (1, 5),
            "m",
            Some("up-m"),
            ServiceTier::Default,
            request(true),
            arrival(9),
        );
        let open = ledger.take_conn(1).pop().unwrap();
        let record = open.substitute_record("42-1", 1_764_474_000_250);
        assert_eq!(record.reason, Reason::Shutdown);
        assert_eq!(record.status, None);
        assert!(!record.success);
        assert_eq!(record.request_id, "42-1-9");
        assert_eq!(record.arrival_seq, 9);
        assert!(record.stream);
        assert_eq!(record.model_requested.as_deref(), Some("fam"));
        assert_eq!(record.model_resolved.as_deref(), Some("m"));
        // The resolved model's backend name, as the proxy's record has it.
        assert_eq!(record.upstream_model.as_deref(), Some("up-m"));
        assert_eq!(record.arrived_at, "2025-11-30T03:40:00.000Z");
        assert_eq!(record.completed_at, "2025-11-30T03:40:00.250Z");
        assert_eq!(record.total_ms, 250);
        assert_eq!(record.lease_at, None);
        assert_eq!(record.queue_wait_ms, None);
        assert_eq!(
            (record.queue_depth_at_arrival, record.in_flight_at_arrival),
            (2, 1)
        );
        assert_eq!(record.disconnect_phase, None);
    }

    /// A granted ticket's substitute also has its admission and load.
    #[test]
    fn a_granted_tickets_record_has_its_lease_and_load() {
        let mut ledger = Ledger::default();
        ledger.open(
            (1, 5),
            "m",
            Some("up-m"),
            ServiceTier::Default,
            request(false),
            arrival(1),
        );
        ledger.admitted((1, 5), 1_764_474_000_100);
        ledger.granted((1, 5), &grant(5), 1_764_474_000_900);
        let record = ledger.take_conn(1)[0].substitute_record("42-1", 1_764_474_001_000);
        assert_eq!(record.lease_at.as_deref(), Some("2025-11-30T03:40:00.100Z"));
        assert_eq!(record.queue_wait_ms, Some(100));
        assert_eq!(record.upstream_model.as_deref(), Some("up-m"));
        assert!(record.model_switch);
        assert_eq!(record.model_load_ms, Some(700));
        assert_eq!(record.total_ms, 1000);
    }

    /// A failed load's figures are kept; a ticket with no grant has no
    /// queue wait (as the proxy's own records do).
    #[test]
    fn a_failed_loads_figures_are_kept_without_a_queue_wait() {
        let mut ledger = Ledger::default();
        ledger.open(
            (1, 5),
            "m",
            Some("up-m"),
            ServiceTier::Default,
            request(false),
            arrival(1),
        );
        ledger.admitted((1, 5), 1_764_474_000_100);
        let failure = LeaseFailure::LoadFailed {
            message: "exited".into(),
            model_switch: true,
            load_ms: Some(300),
            cooldown_ms: 1000,
            typical_load_ms: None,
        };
        ledger.failed((1, 5), &failure);
        let record = ledger.take_conn(1)[0].substitute_record("42-1", 1_764_474_000_500);
        assert_eq!(record.queue_wait_ms, None);
        assert_eq!(record.lease_at.as_deref(), Some("2025-11-30T03:40:00.100Z"));
        assert!(record.model_switch);
        assert_eq!(record.model_load_ms, Some(300));
    }

    /// Closed tickets are gone; a connection's tickets come out in arrival
    /// order and only that connection's.
    #[test]
    fn only_a_connections_unclosed_tickets_are_taken_in_arrival_order() {
        let mut ledger = Ledger::default();
        ledger.open(
            (1, 1),
            "m",
            Some("up-m"),
            ServiceTier::Default,
            request(false),
            arrival(30),
        );
        ledger.open(
            (1, 2),
            "m",
            Some("up-m"),
            ServiceTier::Default,
            request(false),
            arrival(10),
        );
        ledger.open(
            (1, 3),
            "m",
            Some("up-m"),
            ServiceTier::Default,
            request(false),
            arrival(20),
        );
        ledger.open(
            (2, 1),
            "m",
            Some("up-m"),
            ServiceTier::Default,
            request(false),
            arrival(40),
        );
        ledger.close((1, 3));
        let taken: Vec<u64> = ledger
            .take_conn(1)
            .iter()
            .map(|open| open.arrival.arrival_seq)
            .collect();
        assert_eq!(taken, [10, 30]);
        assert_eq!(ledger.len(), 1);
        assert!(ledger.take_conn(1).is_empty());
    }

    /// A clock step back never gives a negative or wrapped duration.
    #[test]
    fn an_end_before_the_arrival_gives_zero_durations() {
        let mut ledger = Ledger::default();
        ledger.open(
            (1, 1),
            "m",
            Some("up-m"),
            ServiceTier::Default,
            request(false),
            arrival(1),
        );
        let record = ledger.take_conn(1)[0].substitute_record("42-1", 1_764_473_999_000);
        assert_eq!(record.total_ms, 0);
        assert_eq!(record.completed_at, record.arrived_at);
    }
}

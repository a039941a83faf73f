//! What happened to one chat request, measured as it happens.
//!
//! A `Trace` is created when the request's headers have arrived (before
//! its body is read) and is finished exactly once: explicitly with a
//! reason, or, if the request's task is dropped first (the client went
//! away and hyper cancelled the handler), by `Drop` as a client disconnect
//! in the phase it had reached. Finishing is where accounting hooks in: the
//! record goes to the supervisor with the ticket's `Finish` (which also
//! withdraws the ticket or ends its lease), or on its own for a request
//! that never got a ticket.

use std::sync::Arc;
use std::time::Instant;

use strata_protocol::config::ModelEntry;
use strata_protocol::ids;
use strata_protocol::record::{
    CHAT_ENDPOINT, Phase, Reason, RequestRecord, SCHEMA_VERSION, format_timestamp,
};
use strata_protocol::wire::{ArrivalInfo, Grant, LeaseFailure, ServiceTier, TicketRequest};
use time::OffsetDateTime;

use crate::app::{App, LastStream};
use crate::link::TicketHandle;
use crate::observe::Observed;
use crate::reply::StartFailure;

use super::error::ChatError;
use super::request::ChatRequest;

/// One request's measurements. Its fields are written only through the
/// methods below, each named after the event that sets them; the status is
/// set in one place ([`Trace::answered`]) and the record is built only when
/// the trace finishes.
pub struct Trace {
    app: Arc<App>,
    arrived: Instant,
    arrived_at: OffsetDateTime,
    arrival_seq: Option<u64>,
    request_id: String,
    stream: bool,
    tier: ServiceTier,
    model_requested: Option<String>,
    model_resolved: Option<String>,
    upstream_model: Option<String>,
    queue_depth_at_arrival: usize,
    in_flight_at_arrival: usize,
    lease_at: Option<Instant>,
    model_switch: bool,
    model_load_ms: Option<u64>,
    upstream_headers_at: Option<Instant>,
    /// The status the client got.
    status: Option<u16>,
    upstream_status: Option<u16>,
    phase: Phase,
    observed: Option<Observed>,
    /// A lease was granted (`queue_wait_ms` is null otherwise).
    granted: bool,
    /// Length of a router-made error body, for `response_bytes` when
    /// nothing was forwarded.
    router_body_bytes: u64,
    /// The request's ticket, once it has one: finishing the trace finishes
    /// it.
    ticket: Option<TicketHandle>,
    /// The model's start failed (or is cooling down): the cause for the
    /// error body.
    start_failure: Option<StartFailure>,
    finished: bool,
}

impl Trace {
    /// Starts a trace now. The arrival number and the queue snapshots come
    /// from the supervisor later ([`Trace::numbered`]).
    pub fn start(app: &Arc<App>) -> Trace {
        Trace {
            app: app.clone(),
            // Tokio's clock: the std clock in a running proxy, the paused
            // one in tests, whose wait-first hold counts from here.
            arrived: tokio::time::Instant::now().into_std(),
            arrived_at: OffsetDateTime::now_utc(),
            arrival_seq: None,
            request_id: String::new(),
            stream: false,
            tier: ServiceTier::Default,
            model_requested: None,
            model_resolved: None,
            upstream_model: None,
            queue_depth_at_arrival: 0,
            in_flight_at_arrival: 0,
            lease_at: None,
            model_switch: false,
            model_load_ms: None,
            upstream_headers_at: None,
            status: None,
            upstream_status: None,
            phase: Phase::Queued,
            observed: None,
            granted: false,
            router_body_bytes: 0,
            ticket: None,
            start_failure: None,
            finished: false,
        }
    }

    /// Takes the request's place from the supervisor's first answer: its
    /// arrival number (and so its request ID) and the counts it found.
    /// `None`: the supervisor could not be reached, so the ID is this
    /// proxy's own instance and its own count (`proxy-PID-STARTMS-N`) and
    /// the counts stay 0.
    pub fn numbered(&mut self, arrival: Option<ArrivalInfo>) {
        let instance = self.app.link.routing_view().instance_id;
        match (arrival, instance) {
            (Some(arrival), Some(instance)) => {
                self.arrival_seq = Some(arrival.arrival_seq);
                self.queue_depth_at_arrival = arrival.queue_depth as usize;
                self.in_flight_at_arrival = arrival.in_flight as usize;
                self.request_id = ids::request_id(&instance, arrival.arrival_seq);
            }
            _ => {
                let n = self
                    .app
                    .unlinked_requests
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    + 1;
                // The record's arrival_seq is left to the supervisor that
                // stores it (its own arrival order); the ID keeps this count.
                self.request_id = ids::request_id(&self.app.proxy_instance, n);
            }
        }
    }

    /// Marks admission (the first of `Admitted` or the grant).
    pub fn admitted(&mut self) {
        if self.lease_at.is_none() {
            self.lease_at = Some(Instant::now());
            self.phase = Phase::Loading;
        }
    }

    /// The request's routing fields are read: `model` is kept only when it
    /// names a known model or alias (`known`).
    pub fn requested(&mut self, chat: &ChatRequest, known: bool) {
        self.stream = chat.stream;
        self.tier = chat.tier;
        if known {
            self.model_requested = Some(chat.model.clone());
        }
    }

    /// The model is resolved to `entry`.
    pub fn routed(&mut self, entry: &ModelEntry) {
        self.model_resolved = Some(entry.id.clone());
        self.upstream_model = Some(entry.upstream_model.clone());
    }

    /// The request's ticket is enqueued: finishing the trace finishes it.
    pub fn enqueued(&mut self, ticket: TicketHandle) {
        self.ticket = Some(ticket);
    }

    /// The lease is granted: admission (if not marked yet) and what the
    /// grant says about the load.
    pub fn granted(&mut self, grant: &Grant) {
        self.admitted();
        self.granted = true;
        self.model_switch = grant.model_switch;
        self.model_load_ms = grant.load_ms;
    }

    /// The ticket failed: a failed load still reports its figures, and a
    /// failed or cooling start keeps the supervisor's generic cause for the
    /// error body.
    pub fn refused(&mut self, failure: &LeaseFailure) {
        match failure {
            LeaseFailure::LoadFailed {
                message,
                model_switch,
                load_ms,
                cooldown_ms,
                ..
            } => {
                self.model_switch = *model_switch;
                self.model_load_ms = *load_ms;
                self.start_failure = Some(StartFailure {
                    last_error: message.clone(),
                    cooldown_remaining_ms: *cooldown_ms,
                });
            }
            LeaseFailure::Cooldown {
                message,
                remaining_ms,
                ..
            } => {
                self.start_failure = Some(StartFailure {
                    last_error: message.clone(),
                    cooldown_remaining_ms: *remaining_ms,
                });
            }
            _ => {}
        }
    }

    /// The backend's response head arrived with `status`: generation runs.
    pub fn upstream_headers(&mut self, status: u16) {
        self.upstream_headers_at = Some(Instant::now());
        self.upstream_status = Some(status);
        self.phase = Phase::Generating;
    }

    /// The client is answered with a router-made `error`. Returns the
    /// start failure its body names (a failed or cooling start only).
    pub fn rejected(&mut self, error: &ChatError) -> Option<StartFailure> {
        let start = self.start_failure.take().filter(|_| {
            matches!(
                error,
                ChatError::LoadFailed { .. } | ChatError::Cooldown { .. }
            )
        });
        self.answered(error.status().as_u16());
        self.router_body_bytes = error.reply().body_with(start.as_ref()).len() as u64;
        start
    }

    /// The client is answered with the backend's own status.
    pub fn passed_through(&mut self, status: u16) {
        self.answered(status);
    }

    /// A wait-first stream's `200` and SSE head went out.
    pub fn committed(&mut self) {
        self.answered(200);
    }

    /// The one place the status is set: the status the client got.
    fn answered(&mut self, status: u16) {
        self.status = Some(status);
    }

    /// The response body is over: what the observer saw of it.
    pub fn forwarded(&mut self, observed: Observed) {
        self.observed = Some(observed);
    }

    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    pub fn arrived(&self) -> Instant {
        self.arrived
    }

    pub fn stream(&self) -> bool {
        self.stream
    }

    pub fn tier(&self) -> ServiceTier {
        self.tier
    }

    pub fn model_resolved(&self) -> Option<&str> {
        self.model_resolved.as_deref()
    }

    pub fn queue_depth_at_arrival(&self) -> usize {
        self.queue_depth_at_arrival
    }

    pub fn upstream_status(&self) -> Option<u16> {
        self.upstream_status
    }

    pub fn ticket(&self) -> Option<&TicketHandle> {
        self.ticket.as_ref()
    }

    /// A streaming request for `model` numbered `request_id`, as the unit
    /// tests of the wait-first task start one.
    #[cfg(test)]
    pub fn stream_for_tests(app: &Arc<App>, request_id: &str, model: &str) -> Trace {
        let mut trace = Trace::start(app);
        trace.stream = true;
        trace.request_id = request_id.to_owned();
        trace.model_resolved = Some(model.to_owned());
        trace
    }

    /// Finishes the trace with `reason`, how the caller saw the request
    /// end. A completed body that reported a failure in band is recorded as
    /// an upstream error instead, and the record's `success` is derived
    /// here: a completed reason, a 2xx status and no in-band error.
    pub fn finish(mut self, reason: Reason) {
        self.complete(reason);
    }

    fn complete(&mut self, reason: Reason) {
        if self.finished {
            return;
        }
        self.finished = true;
        // A body that passed through whole but reported a failure in band
        // (an error frame or error document) did not complete.
        let reason = if reason == Reason::Completed
            && self.observed.as_ref().is_some_and(|o| o.inband_error)
        {
            Reason::UpstreamError
        } else {
            reason
        };
        let success = reason == Reason::Completed
            && self
                .status
                .is_some_and(|status| (200..300).contains(&status))
            && !self.observed.as_ref().is_some_and(|o| o.inband_error);
        if self.stream
            && let Some(observed) = &self.observed
            && let Some(first) = observed.first_token_at
        {
            let ttft_ms = first.duration_since(self.arrived).as_millis() as u64;
            let decode = observed.decode_rate();
            self.app.set_last_stream(LastStream {
                ttft_ms: Some(ttft_ms),
                decode_tokens_per_second: decode,
            });
        }
        let disconnect_phase = (reason == Reason::ClientDisconnect).then_some(self.phase);
        let record = self.record(reason, success, disconnect_phase);
        match self.ticket.take() {
            Some(ticket) => ticket.finish(record, self.tier),
            None => self.app.link.submit_record(record, self.tier),
        }
        tracing::debug!(
            request_id = %self.request_id,
            arrived_at = %self.arrived_at,
            queue_depth_at_arrival = self.queue_depth_at_arrival,
            in_flight_at_arrival = self.in_flight_at_arrival,
            reason = reason.as_str(),
            success,
            status = self.status,
            upstream_status = self.upstream_status,
            disconnect_phase = disconnect_phase.map(Phase::as_str),
            total_ms = self.arrived.elapsed().as_millis() as u64,
            "request finished"
        );
    }
}

fn millis(from: Instant, to: Instant) -> u64 {
    to.saturating_duration_since(from).as_millis() as u64
}

impl Trace {
    /// Wall-clock time of a monotonic instant, anchored at arrival so all
    /// timestamps of one record agree with its durations.
    fn timestamp(&self, at: Instant) -> String {
        let offset = at.saturating_duration_since(self.arrived);
        format_timestamp(self.arrived_at + offset)
    }

    /// What the supervisor keeps of this request with its ticket, to write
    /// its record should this proxy die before finishing it.
    pub fn ticket_request(&self) -> TicketRequest {
        let since_epoch = self.arrived_at - OffsetDateTime::UNIX_EPOCH;
        TicketRequest {
            model_requested: self.model_requested.clone().unwrap_or_default(),
            stream: self.stream,
            arrived_unix_ms: u64::try_from(since_epoch.whole_milliseconds()).unwrap_or(0),
        }
    }

    fn record(
        &self,
        reason: Reason,
        success: bool,
        disconnect_phase: Option<Phase>,
    ) -> RequestRecord {
        let completed = Instant::now();
        let observed = self.observed.as_ref();
        let first = observed.and_then(|o| o.first_token_at);
        let last = observed.and_then(|o| o.last_token_at);
        RequestRecord {
            schema_version: SCHEMA_VERSION,
            seq: 0,
            arrival_seq: self.arrival_seq.unwrap_or(0),
            request_id: self.request_id.clone(),
            endpoint: CHAT_ENDPOINT.to_owned(),
            stream: self.stream,
            model_requested: self.model_requested.clone(),
            model_resolved: self.model_resolved.clone(),
            upstream_model: self.upstream_model.clone(),
            arrived_at: self.timestamp(self.arrived),
            completed_at: self.timestamp(completed),
            lease_at: self.lease_at.map(|at| self.timestamp(at)),
            first_token_at: first.map(|at| self.timestamp(at)),
            last_token_at: last.map(|at| self.timestamp(at)),
            queue_depth_at_arrival: self.queue_depth_at_arrival as u64,
            in_flight_at_arrival: self.in_flight_at_arrival as u64,
            queue_wait_ms: self
                .lease_at
                .filter(|_| self.granted)
                .map(|at| millis(self.arrived, at)),
            model_switch: self.model_switch,
            model_load_ms: self.model_load_ms,
            upstream_headers_ms: self.upstream_headers_at.map(|at| millis(self.arrived, at)),
            ttft_ms: first.map(|at| millis(self.arrived, at)),
            ttft_after_lease_ms: first
                .zip(self.lease_at)
                .map(|(at, lease)| millis(lease, at)),
            generation_ms: first.zip(last).map(|(first, last)| millis(first, last)),
            total_ms: millis(self.arrived, completed),
            prompt_tokens: observed.and_then(|o| o.usage.prompt_tokens),
            completion_tokens: observed.and_then(|o| o.usage.completion_tokens),
            reasoning_tokens: observed.and_then(|o| o.usage.reasoning_tokens),
            prompt_n: observed.and_then(|o| o.timings.prompt_n),
            cache_n: observed.and_then(|o| o.timings.cache_n),
            predicted_n: observed.and_then(|o| o.timings.predicted_n),
            prompt_ms: observed.and_then(|o| o.timings.prompt_ms),
            predicted_ms: observed.and_then(|o| o.timings.predicted_ms),
            prompt_per_second: observed.and_then(|o| o.timings.prompt_per_second),
            predicted_per_second: observed.and_then(|o| o.timings.predicted_per_second),
            finish_reason: observed.and_then(|o| o.finish_reason),
            status: self.status,
            upstream_status: self.upstream_status,
            success,
            reason,
            response_bytes: observed.map_or(self.router_body_bytes, |o| o.response_bytes),
            disconnect_phase,
        }
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if !self.finished {
            self.complete(Reason::ClientDisconnect);
        }
    }
}

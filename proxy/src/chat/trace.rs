//! What happened to one chat request, measured as it happens.
//!
//! A `Trace` is created when the request's headers have arrived (before
//! its body is read) and is finished exactly once: explicitly with a
//! reason, or, if the request's task is dropped first (the client went
//! away and hyper cancelled the handler), by `Drop` as a client disconnect
//! in the phase it had reached. Finishing is where accounting hooks in.

use std::sync::Arc;
use std::time::Instant;

use strata_protocol::wire::ServiceTier;
use time::OffsetDateTime;

use crate::app::{App, LastStream};
use crate::observe::Observed;

/// How far a request got, for `disconnect_phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before admission (body reading, routing, waiting for a lease).
    Queued,
    /// Admitted: loading the model or waiting for response headers.
    Loading,
    /// Upstream headers arrived.
    Generating,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Loading => "loading",
            Phase::Generating => "generating",
        }
    }
}

/// The accounting `reason` enum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Completed,
    ClientDisconnect,
    UpstreamError,
    Timeout,
    QueueTimeout,
    RoutingOff,
    Shutdown,
    ModelLoadError,
    ModelNotPrepared,
    InvalidRequest,
    QueueFull,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Completed => "completed",
            Reason::ClientDisconnect => "client_disconnect",
            Reason::UpstreamError => "upstream_error",
            Reason::Timeout => "timeout",
            Reason::QueueTimeout => "queue_timeout",
            Reason::RoutingOff => "routing_off",
            Reason::Shutdown => "shutdown",
            Reason::ModelLoadError => "model_load_error",
            Reason::ModelNotPrepared => "model_not_prepared",
            Reason::InvalidRequest => "invalid_request",
            Reason::QueueFull => "queue_full",
        }
    }
}

/// One request's measurements.
pub struct Trace {
    app: Arc<App>,
    pub arrived: Instant,
    pub arrived_at: OffsetDateTime,
    pub arrival_seq: Option<u64>,
    pub request_id: String,
    pub stream: bool,
    pub tier: ServiceTier,
    pub model_requested: Option<String>,
    pub model_resolved: Option<String>,
    pub upstream_model: Option<String>,
    pub queue_depth_at_arrival: usize,
    pub in_flight_at_arrival: usize,
    pub lease_at: Option<Instant>,
    pub model_switch: bool,
    pub model_load_ms: Option<u64>,
    pub upstream_headers_at: Option<Instant>,
    pub status: Option<u16>,
    pub upstream_status: Option<u16>,
    pub phase: Phase,
    pub observed: Option<Observed>,
    finished: bool,
}

impl Trace {
    /// Starts a trace now, snapshotting the queue and in-flight counts.
    pub fn start(app: &Arc<App>) -> Trace {
        Trace {
            app: app.clone(),
            arrived: Instant::now(),
            arrived_at: OffsetDateTime::now_utc(),
            arrival_seq: None,
            request_id: String::new(),
            stream: false,
            tier: ServiceTier::Default,
            model_requested: None,
            model_resolved: None,
            upstream_model: None,
            queue_depth_at_arrival: app.counters.queued_total(),
            in_flight_at_arrival: app.counters.in_flight(),
            lease_at: None,
            model_switch: false,
            model_load_ms: None,
            upstream_headers_at: None,
            status: None,
            upstream_status: None,
            phase: Phase::Queued,
            observed: None,
            finished: false,
        }
    }

    /// Marks admission (the first of `Admitted` or the grant).
    pub fn admitted(&mut self) {
        if self.lease_at.is_none() {
            self.lease_at = Some(Instant::now());
            self.phase = Phase::Loading;
        }
    }

    /// Finishes the trace. `success` is only possible for a 2xx status and
    /// no detected failure; the caller passes what it saw.
    pub fn finish(mut self, reason: Reason) {
        self.complete(reason);
    }

    fn complete(&mut self, reason: Reason) {
        if self.finished {
            return;
        }
        self.finished = true;
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
        let disconnect_phase = (reason == Reason::ClientDisconnect).then(|| self.phase.as_str());
        tracing::debug!(
            request_id = %self.request_id,
            arrived_at = %self.arrived_at,
            queue_depth_at_arrival = self.queue_depth_at_arrival,
            in_flight_at_arrival = self.in_flight_at_arrival,
            reason = reason.as_str(),
            success,
            status = ?self.status,
            upstream_status = ?self.upstream_status,
            disconnect_phase,
            total_ms = self.arrived.elapsed().as_millis() as u64,
            "request finished"
        );
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if !self.finished {
            self.complete(Reason::ClientDisconnect);
        }
    }
}

//! [`FakeProxy`]: a scripted client of the private supervisor socket, for tokio tests.
//!
//! It speaks [`strata_protocol::wire`] exactly as `strata-proxy` must: a `Hello` with the
//! config's fingerprint, then `Enqueue` / `HeadersReceived` / `Finish` / `SetDraining`, while
//! the supervisor sends `Welcome`, `State` snapshots, `Queued`, `Admitted`, `Progress`,
//! `Granted`, `Failed`, `Revoked` and `ProtocolError`. The helpers keep the lease vocabulary:
//! `acquire` enqueues a ticket, `release` finishes it (with a placeholder record).
//!
//! Reading is pull-based and cancel-safe: no background task; bytes are buffered and frames
//! cut out of the buffer, so a [`FakeProxy::next_message`] that times out loses nothing.
//! Every received message is kept in [`FakeProxy::history`]; the lease helpers look there
//! first, so waiting for lease 2 never loses what arrived for lease 1. Dropping the value
//! closes the connection at once (the supervisor sees the proxy disconnect).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use strata_protocol::record::RequestRecord;
use strata_protocol::wire::{
    Grant, LeaseFailure, LoadPhase, MAX_FRAME_BYTES, PROTOCOL_VERSION, ProxyMessage, RouterState,
    ServiceTier, SupervisorMessage, TicketId, decode_payload, encode_frame,
};

/// A lease request's identifier (a ticket ID).
pub type LeaseId = TicketId;

/// What the supervisor said about a ticket before its outcome, in the order it said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TicketPhase {
    /// `Queued`: it waits in the queue.
    Queued,
    /// `Admitted`: it left the queue for a load.
    Admitted,
    /// `Progress` of that load.
    Load(LoadPhase),
}
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::time::Instant;

use crate::config::TestConfig;
use crate::poll::DEADLINE;

/// The supervisor's `Welcome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub protocol_version: u32,
    pub instance_id: String,
    pub supervisor_pid: u32,
}

/// Why no message was received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// Nothing arrived in time.
    Timeout,
    /// The supervisor closed the connection (between frames).
    Closed,
    /// The connection broke, closed inside a frame, or sent an undecodable frame.
    Broken(String),
}

/// A fake `strata-proxy` connection.
#[derive(Debug)]
pub struct FakeProxy {
    stream: UnixStream,
    buf: Vec<u8>,
    closed: bool,
    welcome: Option<Welcome>,
    state: Option<RouterState>,
    history: Vec<SupervisorMessage>,
}

impl FakeProxy {
    /// Connects without saying anything (for protocol tests).
    pub async fn open(socket: &Path) -> FakeProxy {
        let stream = UnixStream::connect(socket)
            .await
            .unwrap_or_else(|err| panic!("connect to {}: {err}", socket.display()));
        FakeProxy {
            stream,
            buf: Vec::new(),
            closed: false,
            welcome: None,
            state: None,
            history: Vec::new(),
        }
    }

    /// Connects to the config's supervisor socket, says hello with its fingerprint, and waits
    /// for `Welcome` and the first `State`.
    pub async fn connect(config: &TestConfig) -> FakeProxy {
        let mut proxy = FakeProxy::open(&config.supervisor_socket).await;
        if let Err(reason) = proxy.hello(PROTOCOL_VERSION, config.fingerprint()).await {
            panic!("hello refused: {reason}");
        }
        proxy.wait_state("the first state", |_| true).await;
        proxy
    }

    /// Sends `Hello` and reads the answer: `Ok(Welcome)` or `Err(reason)` of `Refused`. The
    /// supervisor decides a [`RefuseReason`](strata_protocol::wire::RefuseReason) and sends
    /// its text (that frame reads the same in every protocol version, so a proxy of another
    /// build can still say why), so a test compares `reason` with the reason's `to_string()`.
    pub async fn hello(
        &mut self,
        protocol_version: u32,
        fingerprint: u64,
    ) -> Result<Welcome, String> {
        self.send(&ProxyMessage::Hello {
            protocol_version,
            fingerprint,
            pid: std::process::id(),
        })
        .await;
        match self.next_message(DEADLINE).await {
            Ok(SupervisorMessage::Welcome {
                protocol_version,
                instance_id,
                supervisor_pid,
            }) => {
                let welcome = Welcome {
                    protocol_version,
                    instance_id,
                    supervisor_pid,
                };
                self.welcome = Some(welcome.clone());
                Ok(welcome)
            }
            Ok(SupervisorMessage::Refused { reason }) => Err(reason),
            other => panic!("expected Welcome or Refused, got {other:?}"),
        }
    }

    /// The `Welcome`, once received.
    pub fn welcome(&self) -> Option<&Welcome> {
        self.welcome.as_ref()
    }

    /// Sends one message.
    pub async fn send(&mut self, message: &ProxyMessage) {
        let frame = encode_frame(message).expect("encode a proxy message");
        self.send_raw(&frame).await;
    }

    /// Sends raw bytes (for malformed frames).
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream
            .write_all(bytes)
            .await
            .unwrap_or_else(|err| panic!("write to the supervisor socket: {err}"));
        self.stream
            .flush()
            .await
            .expect("flush the supervisor socket");
    }

    /// `Enqueue` in the default tier.
    pub async fn acquire(&mut self, lease: LeaseId, model: &str) {
        self.acquire_tier(lease, model, ServiceTier::Default).await;
    }

    /// `Enqueue` in `tier`.
    pub async fn acquire_tier(&mut self, lease: LeaseId, model: &str, tier: ServiceTier) {
        self.send(&ProxyMessage::Enqueue {
            ticket: lease,
            model: model.to_owned(),
            tier,
            request: strata_protocol::wire::TicketRequest {
                model_requested: model.to_owned(),
                stream: false,
                arrived_unix_ms: strata_protocol::record::unix_ms(std::time::SystemTime::now()),
            },
        })
        .await;
    }

    /// `Finish` with a placeholder record (request ID `fake-proxy-LEASE`): withdraws the ticket
    /// or ends its lease.
    pub async fn release(&mut self, lease: LeaseId) {
        self.send(&ProxyMessage::Finish {
            ticket: lease,
            record: Box::new(strata_protocol::wire::SubmittedRecord {
                record: placeholder_record(lease),
                tier: ServiceTier::Default,
            }),
        })
        .await;
    }

    /// `HeadersReceived` (legacy mode: the lease's response headers arrived).
    pub async fn headers_received(&mut self, lease: LeaseId) {
        self.send(&ProxyMessage::HeadersReceived { ticket: lease })
            .await;
    }

    /// `SetDraining`.
    pub async fn set_draining(&mut self, draining: bool) {
        self.send(&ProxyMessage::SetDraining { draining }).await;
    }

    /// The next message (recorded in the history), or why there is none within `timeout`.
    pub async fn next_message(
        &mut self,
        timeout: Duration,
    ) -> Result<SupervisorMessage, LinkError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(message) = self.cut_frame()? {
                if let SupervisorMessage::State(state) = &message {
                    self.state = Some(state.clone());
                }
                self.history.push(message.clone());
                return Ok(message);
            }
            if self.closed {
                return Err(if self.buf.is_empty() {
                    LinkError::Closed
                } else {
                    LinkError::Broken("connection closed inside a frame".into())
                });
            }
            let mut chunk = [0u8; 16 * 1024];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => return Err(LinkError::Timeout),
                Ok(Ok(0)) => self.closed = true,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
                Ok(Err(err)) if err.kind() == std::io::ErrorKind::ConnectionReset => {
                    self.closed = true;
                }
                Ok(Err(err)) => return Err(LinkError::Broken(err.to_string())),
            }
        }
    }

    fn cut_frame(&mut self) -> Result<Option<SupervisorMessage>, LinkError> {
        let Some(prefix) = self.buf.get(..4) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(prefix.try_into().expect("four bytes"));
        if len > MAX_FRAME_BYTES {
            return Err(LinkError::Broken(format!("frame of {len} bytes announced")));
        }
        let end = 4 + len as usize;
        if self.buf.len() < end {
            return Ok(None);
        }
        let message = decode_payload(&self.buf[4..end])
            .map_err(|err| LinkError::Broken(format!("undecodable frame: {err}")))?;
        self.buf.drain(..end);
        Ok(Some(message))
    }

    /// `Arrive`: allocates a request's arrival sequence number and waits for the `Arrival`
    /// that answers it.
    pub async fn arrive(&mut self, token: u64) -> u64 {
        self.send(&ProxyMessage::Arrive { token }).await;
        match self
            .wait_for(DEADLINE, &format!("Arrival {token}"), |message| {
                matches!(message, SupervisorMessage::Arrival { token: t, .. } if *t == token)
            })
            .await
        {
            SupervisorMessage::Arrival { arrival, .. } => arrival.arrival_seq,
            _ => unreachable!("the predicate matched an Arrival"),
        }
    }

    /// Reads until a message matches `pred` and returns it; panics with `what` on timeout or
    /// a closed connection. Only new messages are considered.
    pub async fn wait_for(
        &mut self,
        timeout: Duration,
        what: &str,
        mut pred: impl FnMut(&SupervisorMessage) -> bool,
    ) -> SupervisorMessage {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_message(left).await {
                Ok(message) if pred(&message) => return message,
                Ok(_) => {}
                Err(err) => panic!(
                    "{err:?} while waiting for {what}; received so far: {:#?}",
                    self.history
                ),
            }
        }
    }

    /// Waits until the latest `State` satisfies `pred` (checking the current one first).
    pub async fn wait_state(
        &mut self,
        what: &str,
        mut pred: impl FnMut(&RouterState) -> bool,
    ) -> RouterState {
        if let Some(state) = &self.state
            && pred(state)
        {
            return state.clone();
        }
        match self
            .wait_for(
                DEADLINE,
                &format!("state: {what}"),
                |message| matches!(message, SupervisorMessage::State(state) if pred(state)),
            )
            .await
        {
            SupervisorMessage::State(state) => state,
            _ => unreachable!("the predicate matched a state"),
        }
    }

    /// The outcome of lease `lease`, if it has already been received.
    pub fn outcome(&self, lease: LeaseId) -> Option<Result<Grant, LeaseFailure>> {
        self.history.iter().find_map(|message| match message {
            SupervisorMessage::Granted(grant) if grant.ticket == lease => Some(Ok(grant.clone())),
            SupervisorMessage::Failed {
                ticket, failure, ..
            } if *ticket == lease => Some(Err(failure.clone())),
            _ => None,
        })
    }

    /// Waits (up to `timeout`) for the outcome of lease `lease`.
    pub async fn wait_outcome_within(
        &mut self,
        lease: LeaseId,
        timeout: Duration,
    ) -> Result<Grant, LeaseFailure> {
        if let Some(outcome) = self.outcome(lease) {
            return outcome;
        }
        self.wait_for(timeout, &format!("the outcome of lease {lease}"), |message| {
            matches!(message, SupervisorMessage::Granted(grant) if grant.ticket == lease)
                || matches!(message, SupervisorMessage::Failed { ticket, .. } if *ticket == lease)
        })
        .await;
        self.outcome(lease).expect("just received")
    }

    /// Waits for the outcome of lease `lease` ([`DEADLINE`]).
    pub async fn wait_outcome(&mut self, lease: LeaseId) -> Result<Grant, LeaseFailure> {
        self.wait_outcome_within(lease, DEADLINE).await
    }

    /// Waits for `Granted`; panics if the lease failed.
    pub async fn wait_granted(&mut self, lease: LeaseId) -> Grant {
        match self.wait_outcome(lease).await {
            Ok(grant) => grant,
            Err(failure) => panic!(
                "lease {lease} failed: {failure:?}; received: {:#?}",
                self.history
            ),
        }
    }

    /// Waits for `Failed`; panics if the lease was granted.
    pub async fn wait_failed(&mut self, lease: LeaseId) -> LeaseFailure {
        match self.wait_outcome(lease).await {
            Err(failure) => failure,
            Ok(grant) => panic!("lease {lease} was unexpectedly granted: {grant:?}"),
        }
    }

    /// Waits for `Revoked` of `lease`.
    pub async fn wait_revoked(&mut self, lease: LeaseId) {
        if self.was_revoked(lease) {
            return;
        }
        self.wait_for(DEADLINE, &format!("Revoked {lease}"), |message| {
            matches!(message, SupervisorMessage::Revoked { ticket, .. } if *ticket == lease)
        })
        .await;
    }

    /// Whether `Revoked` of `lease` has been received.
    pub fn was_revoked(&self, lease: LeaseId) -> bool {
        self.history.iter().any(
            |message| matches!(message, SupervisorMessage::Revoked { ticket, .. } if *ticket == lease),
        )
    }

    /// Waits until `lease` reached `phase` (or finds it in the history).
    pub async fn wait_phase(&mut self, lease: LeaseId, phase: TicketPhase) {
        if self.phases(lease).contains(&phase) {
            return;
        }
        self.wait_for(
            DEADLINE,
            &format!("lease {lease} phase {phase:?}"),
            |message| ticket_phase(message, lease) == Some(phase),
        )
        .await;
    }

    /// The phases of `lease` received so far, in order.
    pub fn phases(&self, lease: LeaseId) -> Vec<TicketPhase> {
        self.history
            .iter()
            .filter_map(|message| ticket_phase(message, lease))
            .collect()
    }

    /// Reads for `window` and panics if lease `lease` gets an outcome meanwhile (a bounded
    /// negative check). Other messages are recorded as usual.
    pub async fn expect_no_outcome(&mut self, lease: LeaseId, window: Duration) {
        assert!(
            self.outcome(lease).is_none(),
            "lease {lease} already has an outcome: {:?}",
            self.outcome(lease)
        );
        let deadline = Instant::now() + window;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_message(left).await {
                Ok(_) => {
                    if let Some(outcome) = self.outcome(lease) {
                        panic!("lease {lease} got an outcome too early: {outcome:?}");
                    }
                }
                Err(LinkError::Timeout) => return,
                Err(err) => panic!("{err:?} while watching lease {lease}"),
            }
        }
    }

    /// Reads everything that arrives within `window`.
    pub async fn drain(&mut self, window: Duration) {
        let deadline = Instant::now() + window;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_message(left).await {
                Ok(_) => {}
                Err(LinkError::Timeout) => return,
                Err(err) => panic!("{err:?} while draining the supervisor socket"),
            }
        }
    }

    /// Reads until the supervisor closes the connection; false if it stays open for `timeout`.
    /// Messages (and a broken frame) before the close are accepted.
    pub async fn wait_closed(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_message(left).await {
                Ok(_) => {}
                Err(LinkError::Timeout) => return false,
                Err(LinkError::Closed) | Err(LinkError::Broken(_)) => return true,
            }
        }
    }

    /// The latest `State` received.
    pub fn state(&self) -> Option<&RouterState> {
        self.state.as_ref()
    }

    /// Every `State` received, in order.
    pub fn states(&self) -> Vec<&RouterState> {
        self.history
            .iter()
            .filter_map(|message| match message {
                SupervisorMessage::State(state) => Some(state),
                _ => None,
            })
            .collect()
    }

    /// Every message received, in order.
    pub fn history(&self) -> &[SupervisorMessage] {
        &self.history
    }
}

/// The phase `message` reports for `lease`, if it is one of its phase messages.
fn ticket_phase(message: &SupervisorMessage, lease: LeaseId) -> Option<TicketPhase> {
    match message {
        SupervisorMessage::Queued { ticket, .. } if *ticket == lease => Some(TicketPhase::Queued),
        SupervisorMessage::Admitted { ticket } if *ticket == lease => Some(TicketPhase::Admitted),
        SupervisorMessage::Progress { ticket, phase, .. } if *ticket == lease => {
            Some(TicketPhase::Load(*phase))
        }
        _ => None,
    }
}

/// A schema-valid record for a fake request (nothing in it is real).
pub fn placeholder_record(lease: LeaseId) -> RequestRecord {
    let mut record = strata_test_support::record_json(&format!("fake-proxy-{lease}"));
    for (key, value) in [
        ("model_requested", Value::Null),
        ("model_resolved", Value::Null),
        ("upstream_model", Value::Null),
        ("status", Value::Null),
        ("upstream_status", Value::Null),
        ("success", false.into()),
        ("reason", "client_disconnect".into()),
        ("response_bytes", 0.into()),
    ] {
        record[key] = value;
    }
    serde_json::from_value(record).expect("a valid record")
}

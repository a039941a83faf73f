//! The proxy's side of the private supervisor socket.
//!
//! One background task (`connection`) owns the socket: it connects, says
//! hello, keeps the latest [`LinkState`] in a watch channel, routes lease
//! events to the request that asked, and reconnects with backoff when the
//! supervisor restarts. Request handlers hold a cheap [`SupervisorLink`]
//! handle and get a [`Lease`] per lease request; dropping the `Lease` ends
//! it (or withdraws it while it still waits), so a lease cannot outlive the
//! request that holds it, whichever way the request ends.

mod connection;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use strata_protocol::record::RequestRecord;
use strata_protocol::wire::{
    BackendInstance, LeaseFailure, LeaseGrant, LeaseId, LeasePhase, RequestLogStats, RevokeReason,
    RouterState, ServiceTier,
};
use tokio::sync::{mpsc, oneshot, watch};

/// What the proxy knows about its supervisor right now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkState {
    /// The hello was accepted and the connection is up.
    pub connected: bool,
    /// The router instance, from the last accepted hello.
    pub instance_id: Option<String>,
    /// The supervisor's latest state snapshot (kept while disconnected, so
    /// `/v1/models` can still show the last known statuses).
    pub router: Option<RouterState>,
    /// The supervisor refused this proxy for good (a different build or
    /// configuration). The proxy must exit with this message.
    pub refused: Option<String>,
}

/// The part of [`LinkState`] a chat request routes with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoutingView {
    pub connected: bool,
    pub instance_id: Option<String>,
    pub loaded: Option<String>,
}

/// Something that happened to one lease request.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseEvent {
    Progress(LeasePhase),
    Granted(LeaseGrant),
    Failed(LeaseFailure),
    /// The supervisor asks for the granted lease to end now (operator
    /// `off --now`, forced shutdown): stop using it and release it.
    Revoked(RevokeReason),
    /// The connection to the supervisor was lost; the lease is gone.
    LinkLost,
}

/// Why a granted lease may no longer be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseEnd {
    Revoked(RevokeReason),
    LinkLost,
}

pub(crate) enum LinkCommand {
    Acquire {
        lease: LeaseId,
        model: String,
        tier: ServiceTier,
        events: mpsc::UnboundedSender<LeaseEvent>,
    },
    Release {
        lease: LeaseId,
    },
    Arrive {
        reply: oneshot::Sender<u64>,
    },
    SetDraining(bool),
    SubmitRecord(Box<RequestRecord>),
    QueryRecords {
        after: Option<u64>,
        limit: u32,
        reply: oneshot::Sender<String>,
    },
    QueryRequestLog {
        reply: oneshot::Sender<RequestLogStats>,
    },
    /// Answered once every command sent before it has been written.
    Flush {
        reply: oneshot::Sender<()>,
    },
}

struct Shared {
    commands: mpsc::UnboundedSender<LinkCommand>,
    state: watch::Receiver<LinkState>,
    next_lease: AtomicU64,
}

/// A cheap, cloneable handle to the supervisor link.
#[derive(Clone)]
pub struct SupervisorLink {
    shared: Arc<Shared>,
}

impl SupervisorLink {
    /// Starts the connection task for `socket`. The task lives until every
    /// handle (and every `Lease`) is dropped.
    pub fn spawn(socket: PathBuf, fingerprint: u64) -> SupervisorLink {
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel(LinkState::default());
        tokio::spawn(connection::run(socket, fingerprint, commands_rx, state_tx));
        SupervisorLink {
            shared: Arc::new(Shared {
                commands,
                state,
                next_lease: AtomicU64::new(1),
            }),
        }
    }

    /// A receiver of every state change.
    pub fn watch(&self) -> watch::Receiver<LinkState> {
        self.shared.state.clone()
    }

    /// The state right now.
    pub fn state(&self) -> LinkState {
        self.shared.state.borrow().clone()
    }

    /// Whether `instance` is the backend serving right now, as the connected
    /// supervisor last said. Checked right before a request is sent under a
    /// lease: the backend address is the same for every model, so a lease
    /// whose backend was replaced must not be used.
    pub fn serves(&self, instance: &BackendInstance) -> bool {
        let state = self.shared.state.borrow();
        state.connected
            && state
                .router
                .as_ref()
                .is_some_and(|router| router.backend.as_ref() == Some(instance))
    }

    /// What a chat request needs of the state, without copying the model
    /// statuses: whether the supervisor is reachable, the instance, and the
    /// loaded model.
    pub fn routing_view(&self) -> RoutingView {
        let state = self.shared.state.borrow();
        RoutingView {
            connected: state.connected,
            instance_id: state.instance_id.clone(),
            loaded: state
                .router
                .as_ref()
                .and_then(|router| router.loaded.clone()),
        }
    }

    /// Asks for a lease on `model`. Events arrive on the returned `Lease`.
    pub fn acquire(&self, model: &str, tier: ServiceTier) -> Lease {
        let lease = self.shared.next_lease.fetch_add(1, Ordering::Relaxed);
        let (events_tx, events) = mpsc::unbounded_channel();
        let sent = self
            .shared
            .commands
            .send(LinkCommand::Acquire {
                lease,
                model: model.to_owned(),
                tier,
                events: events_tx,
            })
            .is_ok();
        Lease {
            id: lease,
            events,
            shared: self.shared.clone(),
            closed: !sent,
            end: (!sent).then_some(LeaseEnd::LinkLost),
        }
    }

    /// Allocates the next arrival sequence number of this router instance;
    /// `None` while the supervisor cannot be reached.
    pub async fn arrival(&self) -> Option<u64> {
        let (reply, rx) = oneshot::channel();
        self.shared
            .commands
            .send(LinkCommand::Arrive { reply })
            .ok()?;
        rx.await.ok()
    }

    /// Tells the supervisor this proxy is draining (kept across reconnects).
    pub fn set_draining(&self, draining: bool) {
        let _ = self
            .shared
            .commands
            .send(LinkCommand::SetDraining(draining));
    }

    /// Hands a finished request's record to the supervisor. Records made
    /// while the supervisor is unreachable wait (bounded) and are sent
    /// after the next hello.
    pub fn submit_record(&self, record: RequestRecord) {
        let _ = self
            .shared
            .commands
            .send(LinkCommand::SubmitRecord(Box::new(record)));
    }

    /// The `/requests` document for a page of records; `None` while the
    /// supervisor is unreachable.
    pub async fn records(&self, after: Option<u64>, limit: u32) -> Option<String> {
        let (reply, rx) = oneshot::channel();
        self.shared
            .commands
            .send(LinkCommand::QueryRecords {
                after,
                limit,
                reply,
            })
            .ok()?;
        rx.await.ok()
    }

    /// Waits (at most `limit`) until everything handed to the link so far,
    /// records in particular, has been written to the supervisor. A
    /// draining proxy calls this before it exits.
    pub async fn flush(&self, limit: std::time::Duration) -> bool {
        let (reply, rx) = oneshot::channel();
        if self
            .shared
            .commands
            .send(LinkCommand::Flush { reply })
            .is_err()
        {
            return false;
        }
        matches!(tokio::time::timeout(limit, rx).await, Ok(Ok(())))
    }

    /// The supervisor's accounting counters; `None` while unreachable.
    pub async fn request_log(&self) -> Option<RequestLogStats> {
        let (reply, rx) = oneshot::channel();
        self.shared
            .commands
            .send(LinkCommand::QueryRequestLog { reply })
            .ok()?;
        rx.await.ok()
    }
}

/// One lease request: waiting, then granted, until dropped.
pub struct Lease {
    id: LeaseId,
    events: mpsc::UnboundedReceiver<LeaseEvent>,
    shared: Arc<Shared>,
    /// No more events can come (failed, or the link is gone), and there is
    /// nothing to release.
    closed: bool,
    /// Set once the granted lease may no longer be used.
    end: Option<LeaseEnd>,
}

impl Lease {
    /// The next event. After `Failed` or `LinkLost` the lease is over and
    /// further calls return `LinkLost`. A `Revoked` lease is still held: it
    /// is released when dropped, like any other.
    pub async fn next_event(&mut self) -> LeaseEvent {
        if self.closed {
            return LeaseEvent::LinkLost;
        }
        let event = self.events.recv().await.unwrap_or(LeaseEvent::LinkLost);
        self.note(&event);
        event
    }

    fn note(&mut self, event: &LeaseEvent) {
        match event {
            LeaseEvent::Failed(_) | LeaseEvent::LinkLost => {
                self.closed = true;
                self.end.get_or_insert(LeaseEnd::LinkLost);
            }
            LeaseEvent::Revoked(reason) => {
                self.end.get_or_insert(LeaseEnd::Revoked(*reason));
            }
            LeaseEvent::Progress(_) | LeaseEvent::Granted(_) => {}
        }
    }

    /// After the grant: `Err` if the lease may no longer be used (revoked,
    /// or the supervisor link was lost), looking at every event that
    /// arrived so far without waiting.
    pub fn check(&mut self) -> Result<(), LeaseEnd> {
        while self.end.is_none() && !self.closed {
            match self.events.try_recv() {
                Ok(event) => self.note(&event),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.note(&LeaseEvent::LinkLost);
                }
            }
        }
        self.end.map_or(Ok(()), Err)
    }

    /// After the grant: resolves when the lease may no longer be used.
    /// Cancel-safe, so it can be one branch of every wait.
    pub async fn ended(&mut self) -> LeaseEnd {
        loop {
            if let Some(end) = self.end {
                return end;
            }
            let event = self.next_event().await;
            self.note(&event);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.closed {
            let _ = self
                .shared
                .commands
                .send(LinkCommand::Release { lease: self.id });
        }
    }
}

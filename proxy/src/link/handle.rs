//! The handles request handlers hold: [`SupervisorLink`] (cheap, cloneable,
//! spawns the connection task), and per ticket [`TicketEvents`] and
//! [`TicketHandle`].

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use strata_protocol::page::RecordsPage;
use strata_protocol::record::RequestRecord;
use strata_protocol::wire::{
    ArrivalInfo, BackendInstance, RouterMetrics, ServiceTier, SubmittedRecord, TicketId,
    TicketRequest,
};
use tokio::sync::{mpsc, oneshot, watch};

use super::connection;
use super::state::{LeaseEnd, LinkCommand, LinkState, RoutingView, TicketEvent};

struct Shared {
    commands: mpsc::UnboundedSender<LinkCommand>,
    state: watch::Receiver<LinkState>,
    next_ticket: AtomicU64,
}

/// A cheap, cloneable handle to the supervisor link.
#[derive(Clone)]
pub struct SupervisorLink {
    shared: Arc<Shared>,
}

impl SupervisorLink {
    /// Starts the connection task for `socket`. The task lives until every
    /// handle is dropped.
    pub fn spawn(socket: PathBuf, fingerprint: u64) -> SupervisorLink {
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel(LinkState::default());
        tokio::spawn(connection::run(socket, fingerprint, commands_rx, state_tx));
        SupervisorLink {
            shared: Arc::new(Shared {
                commands,
                state,
                next_ticket: AtomicU64::new(1),
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
            mismatch: state.mismatch,
            instance_id: state.instance_id.clone(),
            loaded: state
                .router
                .as_ref()
                .and_then(|router| router.loaded.clone()),
        }
    }

    /// Waits (at most `limit`) until the first try to reach a supervisor is
    /// over, so a request that arrives while a starting proxy says hello is
    /// routed instead of refused.
    pub async fn first_attempt(&self, limit: std::time::Duration) {
        let mut state = self.shared.state.clone();
        let _ = tokio::time::timeout(limit, state.wait_for(|state| state.first_attempt_done)).await;
    }

    /// Queues a ticket for `model` in the supervisor. `body` is what the
    /// backend will get; it stays here (for cache lookups), never on the
    /// supervisor socket.
    pub fn enqueue(
        &self,
        model: &str,
        tier: ServiceTier,
        request: TicketRequest,
        body: Bytes,
    ) -> (TicketHandle, TicketEvents) {
        let ticket = self.shared.next_ticket.fetch_add(1, Ordering::Relaxed);
        let (events_tx, events) = mpsc::unbounded_channel();
        let sent = self
            .shared
            .commands
            .send(LinkCommand::Enqueue {
                ticket,
                model: model.to_owned(),
                tier,
                request,
                body,
                events: events_tx,
            })
            .is_ok();
        let handle = TicketHandle {
            id: ticket,
            shared: self.shared.clone(),
        };
        let events = TicketEvents {
            events,
            closed: !sent,
            end: (!sent).then_some(LeaseEnd::LinkLost),
        };
        (handle, events)
    }

    /// Numbers a request that gets no ticket (for its request ID); `None`
    /// while the supervisor cannot be reached.
    pub async fn arrival(&self) -> Option<ArrivalInfo> {
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

    /// Hands the record of a request without a ticket to the supervisor.
    /// Records made while the supervisor is unreachable wait (bounded) and
    /// are sent after the next hello.
    pub fn submit_record(&self, record: RequestRecord, tier: ServiceTier) {
        let _ = self
            .shared
            .commands
            .send(LinkCommand::SubmitRecord(Box::new(SubmittedRecord {
                record,
                tier,
            })));
    }

    /// The `/requests` document for a page of records; `None` while the
    /// supervisor is unreachable.
    pub async fn records(&self, after: Option<u64>, limit: u32) -> Option<RecordsPage> {
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

    /// The router-wide figures for `/metrics`; `None` while unreachable.
    pub async fn metrics(&self) -> Option<RouterMetrics> {
        let (reply, rx) = oneshot::channel();
        self.shared
            .commands
            .send(LinkCommand::QueryMetrics { reply })
            .ok()?;
        rx.await.ok()
    }
}

/// How a request reports on its ticket. Owned by the request's trace,
/// which finishes it exactly once.
pub struct TicketHandle {
    id: TicketId,
    shared: Arc<Shared>,
}

impl TicketHandle {
    /// Legacy mode: the upstream response headers arrived.
    pub fn headers_received(&self) {
        let _ = self
            .shared
            .commands
            .send(LinkCommand::HeadersReceived { ticket: self.id });
    }

    /// Ends the ticket (withdraws it, or ends its lease) and hands over the
    /// request's record, in one message. Records made while the supervisor
    /// is unreachable wait like [`SupervisorLink::submit_record`]'s.
    pub fn finish(self, record: RequestRecord, tier: ServiceTier) {
        let _ = self.shared.commands.send(LinkCommand::Finish {
            ticket: self.id,
            record: Box::new(SubmittedRecord { record, tier }),
        });
    }
}

/// What the supervisor says about one ticket.
pub struct TicketEvents {
    events: mpsc::UnboundedReceiver<TicketEvent>,
    /// No more events can come (failed, or the link is gone).
    closed: bool,
    /// Set once a granted lease may no longer be used.
    end: Option<LeaseEnd>,
}

impl TicketEvents {
    /// The next event. After `Failed` or `LinkLost` the ticket is over and
    /// further calls return `LinkLost`. A `Revoked` lease is still held
    /// until its request finishes.
    pub async fn next_event(&mut self) -> TicketEvent {
        if self.closed {
            return TicketEvent::LinkLost;
        }
        let event = self.events.recv().await.unwrap_or(TicketEvent::LinkLost);
        self.note(&event);
        event
    }

    fn note(&mut self, event: &TicketEvent) {
        match event {
            TicketEvent::Failed { .. } | TicketEvent::LinkLost => {
                self.closed = true;
                self.end.get_or_insert(LeaseEnd::LinkLost);
            }
            TicketEvent::Revoked(reason) => {
                self.end.get_or_insert(LeaseEnd::Revoked(*reason));
            }
            TicketEvent::Queued(_)
            | TicketEvent::Admitted
            | TicketEvent::Progress(..)
            | TicketEvent::Granted(_) => {}
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
                    self.note(&TicketEvent::LinkLost);
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
            self.next_event().await;
        }
    }

    /// Tests: a ticket whose events the test sends itself, with no
    /// supervisor behind it.
    #[cfg(test)]
    pub(crate) fn detached() -> (mpsc::UnboundedSender<TicketEvent>, TicketEvents) {
        let (tx, events) = mpsc::unbounded_channel();
        let events = TicketEvents {
            events,
            closed: false,
            end: None,
        };
        (tx, events)
    }
}

/// Tests: the far end of a [`SupervisorLink::detached`] link, which reads
/// what the link was asked to send instead of a supervisor.
#[cfg(test)]
pub(crate) struct DetachedSupervisor {
    commands: mpsc::UnboundedReceiver<LinkCommand>,
    /// The link's state: not connected until [`DetachedSupervisor::connect`].
    state: watch::Sender<LinkState>,
}

#[cfg(test)]
impl SupervisorLink {
    /// Tests: a link with no connection task and no supervisor behind it.
    pub(crate) fn detached() -> (SupervisorLink, DetachedSupervisor) {
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (state_tx, state) = watch::channel(LinkState::default());
        let link = SupervisorLink {
            shared: Arc::new(Shared {
                commands,
                state,
                next_ticket: AtomicU64::new(1),
            }),
        };
        let far_end = DetachedSupervisor {
            commands: commands_rx,
            state: state_tx,
        };
        (link, far_end)
    }
}

#[cfg(test)]
impl DetachedSupervisor {
    /// The link says it is connected to the supervisor of `instance_id`.
    pub(crate) fn connect(&self, instance_id: &str) {
        self.state.send_modify(|state| {
            state.connected = true;
            state.first_attempt_done = true;
            state.instance_id = Some(instance_id.to_owned());
        });
    }

    /// The next ticket enqueued through the link: the sender of its events,
    /// which the test answers as the supervisor would. Other commands are
    /// skipped.
    pub(crate) async fn next_enqueued(&mut self) -> Option<mpsc::UnboundedSender<TicketEvent>> {
        while let Some(command) = self.commands.recv().await {
            if let LinkCommand::Enqueue { events, .. } = command {
                return Some(events);
            }
        }
        None
    }

    /// The next record handed to the link, with a ticket's `Finish` or on
    /// its own; other commands are skipped. Waits for it; `None` once every
    /// link handle is gone.
    pub(crate) async fn next_record(&mut self) -> Option<RequestRecord> {
        while let Some(command) = self.commands.recv().await {
            if let LinkCommand::Finish { record, .. } | LinkCommand::SubmitRecord(record) = command
            {
                return Some(record.record);
            }
        }
        None
    }
}

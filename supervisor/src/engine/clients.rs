//! Where the engine's messages go: the connected proxies (each with the
//! channel to its connection task and whether it drains) and the control
//! clients of the operations that have not had their `Done`. A message to
//! a client that is gone is dropped: its task ends on its own.

use std::collections::HashMap;

use strata_protocol::control::{ControlEvent, Done, Status};
use strata_protocol::wire::SupervisorMessage;
use strata_scheduler::ConnId;
use tokio::sync::mpsc;

use super::command::ControlOpId;

struct Proxy {
    pid: u32,
    events: mpsc::UnboundedSender<SupervisorMessage>,
    /// The proxy said it drains.
    draining: bool,
}

/// The connected proxies, by connection.
#[derive(Default)]
pub struct Proxies {
    conns: HashMap<ConnId, Proxy>,
}

impl Proxies {
    /// A proxy connects; `first` (the router state) is its first message.
    pub fn connect(
        &mut self,
        conn: ConnId,
        pid: u32,
        events: mpsc::UnboundedSender<SupervisorMessage>,
        first: SupervisorMessage,
    ) {
        let _ = events.send(first);
        let draining = false;
        self.conns.insert(
            conn,
            Proxy {
                pid,
                events,
                draining,
            },
        );
        tracing::info!(conn, pid, "proxy connected");
    }

    pub fn disconnect(&mut self, conn: ConnId) {
        if let Some(proxy) = self.conns.remove(&conn) {
            tracing::info!(conn, pid = proxy.pid, "proxy disconnected");
        }
    }

    pub fn is_connected(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    pub fn set_draining(&mut self, conn: ConnId, draining: bool) {
        if let Some(proxy) = self.conns.get_mut(&conn) {
            proxy.draining = draining;
        }
    }

    /// Some connected proxy drains.
    pub fn any_draining(&self) -> bool {
        self.conns.values().any(|proxy| proxy.draining)
    }

    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn send(&self, conn: ConnId, message: SupervisorMessage) {
        if let Some(proxy) = self.conns.get(&conn) {
            let _ = proxy.events.send(message);
        }
    }

    /// `message` to every proxy.
    pub fn broadcast(&self, message: &SupervisorMessage) {
        for proxy in self.conns.values() {
            let _ = proxy.events.send(message.clone());
        }
    }
}

/// The control clients of operations that have not had their `Done`.
#[derive(Default)]
pub struct ControlClients {
    clients: HashMap<ControlOpId, mpsc::UnboundedSender<ControlEvent>>,
}

impl ControlClients {
    /// Operation `op` begins; its events go to `events`.
    pub fn insert(&mut self, op: ControlOpId, events: mpsc::UnboundedSender<ControlEvent>) {
        self.clients.insert(op, events);
    }

    /// A progress line of operation `op` (named `name`).
    pub fn progress(
        &self,
        op: ControlOpId,
        name: &str,
        phase: &str,
        message: String,
        elapsed_ms: u64,
    ) {
        if let Some(client) = self.clients.get(&op) {
            let _ = client.send(ControlEvent::Progress {
                op: name.to_owned(),
                phase: phase.to_owned(),
                message,
                elapsed_ms,
            });
        }
    }

    /// The last event of operation `op`: its `Done`, with the status.
    pub fn done(&mut self, op: ControlOpId, ok: bool, message: String, status: Status) {
        if let Some(client) = self.clients.remove(&op) {
            let _ = client.send(ControlEvent::Done(Done {
                ok,
                message,
                status,
            }));
        }
    }
}

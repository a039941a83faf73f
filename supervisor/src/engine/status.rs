//! The operator-facing status document (`status`, and the fields of every
//! `done` event).

use serde_json::{Map, Value, json};

/// A point-in-time view of the engine, built without waiting for anything.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusSnapshot {
    pub daemon_pid: u32,
    pub instance_id: String,
    /// An operation (load, stop, `on`, `off`, shutdown) is running.
    pub busy: bool,
    /// Which operation, when busy.
    pub operation: Option<&'static str>,
    pub routing: bool,
    /// A connected proxy is draining, or the supervisor is shutting down.
    pub draining: bool,
    pub child_pid: Option<u32>,
    pub loaded: Option<String>,
    pub loading: Option<String>,
    pub last_startup_error: Option<String>,
    pub proxies: usize,
    pub active_leases: usize,
    pub waiting_requests: usize,
    pub cooldown_remaining_ms: Option<u64>,
}

impl StatusSnapshot {
    /// The JSON fields. Every key is always present (null when unknown) so
    /// scripts can rely on the shape; `busy` tells whether the process
    /// fields describe a settled state.
    pub fn to_json_fields(&self) -> Map<String, Value> {
        let value = json!({
            "daemon_pid": self.daemon_pid,
            "instance_id": self.instance_id,
            "busy": self.busy,
            "operation": self.operation,
            "routing": self.routing,
            "draining": self.draining,
            "child_pid": self.child_pid,
            "loaded": self.loaded,
            "loading": self.loading,
            "last_startup_error": self.last_startup_error,
            "proxies": self.proxies,
            "active_leases": self.active_leases,
            "waiting_requests": self.waiting_requests,
            "cooldown_remaining_ms": self.cooldown_remaining_ms,
        });
        match value {
            Value::Object(map) => map,
            _ => unreachable!("json! of an object literal is an object"),
        }
    }
}

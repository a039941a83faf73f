//! Identifiers shared by both daemons: router instances and requests.
//!
//! The supervisor is the long-lived process, so it owns the instance
//! identity: a proxy-only restart keeps the instance, and records and
//! cursors stay valid across it.

/// A router instance identifier: the supervisor's PID and start time in
/// milliseconds since the Unix epoch, e.g. `48213-1764474000123`. Distinct
/// across restarts because a PID is not reused within the same millisecond.
pub fn instance_id(pid: u32, started_unix_ms: u128) -> String {
    format!("{pid}-{started_unix_ms}")
}

/// A proxy's own instance identifier, for the request IDs it assigns while no
/// supervisor numbers its requests (unreachable, or with other settings):
/// `proxy-` and then the form of [`instance_id`], e.g.
/// `proxy-48214-1764474000200`.
pub fn proxy_instance_id(pid: u32, started_unix_ms: u128) -> String {
    format!("proxy-{}", instance_id(pid, started_unix_ms))
}

/// A request's correlation ID: instance plus arrival sequence, the value of
/// `x-strata-request-id` and of the record's `request_id`.
pub fn request_id(instance_id: &str, arrival_seq: u64) -> String {
    format!("{instance_id}-{arrival_seq}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_id_contains_instance_and_arrival_seq() {
        let instance = instance_id(48213, 1_764_474_000_123);
        assert_eq!(instance, "48213-1764474000123");
        assert_eq!(request_id(&instance, 17), "48213-1764474000123-17");
        let proxy = proxy_instance_id(48214, 1_764_474_000_200);
        assert_eq!(request_id(&proxy, 3), "proxy-48214-1764474000200-3");
    }
}

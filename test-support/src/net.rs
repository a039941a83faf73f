//! Loopback ports for tests, and what the kernel says about a test's TCP connections.
//!
//! Two ways to pick a port, for two kinds of binder:
//! - [`free_port`]: bind port 0 and take what the kernel gave. The port comes from the
//!   ephemeral range, so another socket may get it before whoever the test gives it to binds
//!   it; within one test process it is never handed out twice, which is enough for daemons
//!   that bind at once.
//! - [`free_port_outside_ephemeral`]: for a test that retries when the bind fails (the
//!   socket-activation launcher exits with `EADDRINUSE`): a random port below the ephemeral
//!   range, which no bind(0) listener or client source port of a parallel test takes.

use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

/// A loopback TCP port that was free a moment ago: binds `127.0.0.1:0`, reads the port and
/// closes the listener. Within one test process the same port is never handed out twice, so
/// parallel tests of one binary cannot collide with each other.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    for _ in 0..100 {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0 for a free port");
        let port = listener
            .local_addr()
            .expect("local address of a bound listener")
            .port();
        drop(listener);
        if given.insert(port) {
            return port;
        }
    }
    panic!("no fresh loopback port after 100 attempts");
}

/// A loopback port in 20000..32000 (below the kernel's ephemeral range) that was free a moment
/// ago. Whoever binds it must still handle `EADDRINUSE` and retry with another.
pub fn free_port_outside_ephemeral() -> u16 {
    for _ in 0..200 {
        let port = 20000 + (random_u64() % 12000) as u16;
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port found in 20000..32000");
}

/// Random enough for picking ports: every `RandomState` gets distinct, randomly seeded keys.
fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

/// The receive queues (bytes received by the kernel and not yet read by the application) of
/// the established IPv4 TCP sockets whose remote port is `remote_port`, from `/proc/net/tcp`.
/// A socket whose queue stays full is one its owner stopped reading.
pub fn tcp_rx_queues_to(remote_port: u16) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (remote, state, queues) = (fields.get(2)?, fields.get(3)?, fields.get(4)?);
            let port = u16::from_str_radix(remote.rsplit(':').next()?, 16).ok()?;
            // 01 is TCP_ESTABLISHED.
            if port != remote_port || *state != "01" {
                return None;
            }
            u64::from_str_radix(queues.split(':').nth(1)?, 16).ok()
        })
        .collect()
}

/// Waits (bounded by `timeout`) until some connection to `remote_port` has had unread bytes in
/// its receive queue on ten polls in a row, none fewer than the poll before: its owner is not
/// reading. Panics with the last observation after the deadline.
pub fn wait_reader_stalled(remote_port: u16, timeout: std::time::Duration) {
    let deadline = std::time::Instant::now() + timeout;
    let mut streak = 0;
    let mut last = 0;
    loop {
        let queued = tcp_rx_queues_to(remote_port).into_iter().max().unwrap_or(0);
        if queued > 0 && queued >= last {
            streak += 1;
        } else {
            streak = 0;
        }
        last = queued;
        if streak >= 10 {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no stalled reader of port {remote_port} within {timeout:?} (last queue {queued} bytes)"
        );
        std::thread::sleep(crate::poll::POLL_INTERVAL);
    }
}

//! Loopback ports for tests.

use std::collections::HashSet;
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

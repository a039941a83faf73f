//! Idle keep-alive connections to the backend, for backends that keep
//! them (HTTP/1.1 without `Connection: close`). Strata closes every
//! connection, so with it the pool stays empty and each request connects.
//!
//! A connection belongs to one backend *instance* (its lease names it): a
//! checkout for another instance, or after [`IDLE_LIMIT`], closes the idle
//! ones instead of using them, and one that the backend closed meanwhile
//! (readable: EOF or stray bytes) is closed too. The pool is only touched
//! from the proxy's one runtime thread, so its lock is never contended.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use strata_protocol::wire::BackendInstance;
use tokio::net::TcpStream;

/// Idle connections kept at most.
pub const MAX_IDLE: usize = 64;

/// An idle connection older than this is closed, not reused: well inside
/// the idle timeouts HTTP servers use (hyper 90 s, nginx 75 s).
pub const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// Which backend a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolKey {
    pub backend: SocketAddr,
    pub instance: BackendInstance,
}

#[derive(Default)]
pub struct UpstreamPool {
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    key: PoolKey,
    stream: TcpStream,
    since: Instant,
}

impl UpstreamPool {
    /// An idle connection to `key`'s backend that still looks open.
    pub fn check_out(&self, key: PoolKey) -> Option<TcpStream> {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let now = Instant::now();
        idle.retain(|conn| conn.key.instance == key.instance && now - conn.since < IDLE_LIMIT);
        while let Some(conn) = idle.pop() {
            if conn.key == key && looks_open(&conn.stream) {
                return Some(conn.stream);
            }
        }
        None
    }

    /// Keeps `stream` for the next request to `key`'s backend.
    pub fn check_in(&self, key: PoolKey, stream: TcpStream) {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push(Idle {
                key,
                stream,
                since: Instant::now(),
            });
        }
    }

    /// How many idle connections are kept.
    #[cfg(test)]
    pub fn idle(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// An idle connection has nothing to read: EOF or bytes mean the backend
/// closed it or broke the protocol.
fn looks_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(err) if err.kind() == std::io::ErrorKind::WouldBlock)
}

//! The proxy's HTTP listening socket: adopted from systemd socket activation, or bound directly.
//!
//! [`take_listener`] runs in a synchronous `main`, **before the async runtime or any other thread
//! exists**, for two reasons:
//!
//! * Adopting the socket removes `LISTEN_PID`, `LISTEN_FDS` and `LISTEN_FDNAMES` from the process
//!   environment (so neither the runtime nor any child process ever sees them). Removing an
//!   environment variable is only sound while no other thread can read the environment at the same
//!   time (`std::env::remove_var` is `unsafe` in edition 2024 for that reason; this crate forbids
//!   `unsafe`, so the removal is done inside the `listenfd` and `sd-notify` crates, which makes the
//!   same single-threaded requirement ours to keep).
//! * An inherited descriptor without close-on-exec would leak into anything spawned before it is
//!   marked; marking it first thing closes that window.
//!
//! With `require_socket_activation: true` the socket **must** come from the service manager: the
//! `.socket` unit owns the port across restarts, and connections wait in its backlog while the old
//! process drains and the new one starts. Missing or malformed activation is therefore a startup
//! error and never falls back to binding: a fallback would either fail with `EADDRINUSE` against
//! the socket unit's listener or, worse, succeed on some other address and silently split traffic
//! between two listeners. Every check below names what to fix.
//!
//! Without the flag (development and standalone configs) the configured address is bound
//! directly. Either way the address must be loopback: the HTTP surface trusts local users and is
//! never exposed to the network.

use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd};

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::socket::{SockType, getsockopt, sockopt};

/// The descriptor systemd passes the first (and here, only) socket at (`SD_LISTEN_FDS_START`).
pub const SD_LISTEN_FDS_START: i32 = 3;

/// Why no listener could be obtained. The daemon prints it and exits non-zero before serving.
///
/// `Display` is a complete, lowercase message without a trailing period that says what to fix.
/// I/O errors are part of that message, so [`std::error::Error::source`] is `None` (printing the
/// chain would repeat them).
#[derive(Debug)]
pub enum ListenerError {
    /// `listen` is not a loopback address (127.0.0.0/8 or ::1).
    NotLoopback { listen: SocketAddr },
    /// Activation is required but `LISTEN_PID` and/or `LISTEN_FDS` is not set.
    NotActivated { missing: &'static str },
    /// `LISTEN_PID` is not a PID, or not this process's: the sockets were meant for another process.
    WrongPid { value: String, own: u32 },
    /// `LISTEN_FDS` is not a decimal number.
    MalformedFdCount { value: String },
    /// `LISTEN_FDS` is a number other than 1.
    WrongFdCount { n: u64 },
    /// `LISTEN_FDS_FIRST_FD` (a `listenfd` extension, never set by systemd) points away from fd 3.
    UnsupportedFirstFd { value: String },
    /// fd 3 is not an open, listening TCP (AF_INET/AF_INET6, SOCK_STREAM) socket.
    NotAListeningTcpSocket { reason: String },
    /// The passed socket is bound to another address than the configured `listen`.
    WrongAddress {
        bound: SocketAddr,
        expected: SocketAddr,
    },
    /// Direct binding (activation not required) failed.
    Bind {
        listen: SocketAddr,
        error: io::Error,
    },
    /// A system call on an otherwise valid socket failed.
    Io {
        context: &'static str,
        error: io::Error,
    },
}

impl fmt::Display for ListenerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotLoopback { listen } => write!(
                f,
                "listen address {listen} is not a loopback address; use 127.0.0.1 (or another \
                 127.0.0.0/8 address) or ::1 in listen and in the .socket unit's ListenStream="
            ),
            Self::NotActivated { missing } => write!(
                f,
                "require_socket_activation is set but no socket was passed ({missing} missing); \
                 start strata-proxy through its .socket unit, or set \
                 require_socket_activation: false for a development config"
            ),
            Self::WrongPid { value, own } => write!(
                f,
                "socket activation is addressed to another process (LISTEN_PID={value:?}, this \
                 process is {own}); run strata-proxy directly as the socket unit's service, not \
                 through a wrapper that forks"
            ),
            Self::MalformedFdCount { value } => write!(
                f,
                "socket activation passed a malformed descriptor count (LISTEN_FDS={value:?}); \
                 start strata-proxy through its .socket unit"
            ),
            Self::WrongFdCount { n } => write!(
                f,
                "socket activation passed {n} sockets (LISTEN_FDS={n}) but exactly one is \
                 required; give the .socket unit a single ListenStream= and no other sockets \
                 for this service"
            ),
            Self::UnsupportedFirstFd { value } => write!(
                f,
                "the environment sets LISTEN_FDS_FIRST_FD={value:?} but the socket must be at \
                 fd 3 as systemd passes it; unset LISTEN_FDS_FIRST_FD"
            ),
            Self::NotAListeningTcpSocket { reason } => write!(
                f,
                "the passed fd 3 is not a listening TCP socket ({reason}); the .socket unit must \
                 have ListenStream=IP:PORT with Accept=no"
            ),
            Self::WrongAddress { bound, expected } => write!(
                f,
                "the passed socket is bound to {bound} but listen is {expected}; make listen in \
                 the config equal to the .socket unit's ListenStream="
            ),
            Self::Bind { listen, error } => write!(
                f,
                "cannot bind listen address {listen}: {error}; pick a free port, stop the other \
                 listener, or use socket activation (require_socket_activation: true)"
            ),
            Self::Io { context, error } => write!(f, "cannot {context}: {error}"),
        }
    }
}

impl std::error::Error for ListenerError {}

/// Where the listener comes from; obtained in a synchronous `main` before any runtime or thread
/// exists.
///
/// * `require_socket_activation == true`: adopt exactly one inherited listening TCP socket at
///   fd 3 after validating `LISTEN_PID` (this process), `LISTEN_FDS` (`1`), that fd 3 is a
///   listening TCP stream socket, and that its bound address equals `listen`. The descriptor is
///   marked close-on-exec and set non-blocking, and `LISTEN_PID`, `LISTEN_FDS` and
///   `LISTEN_FDNAMES` are removed from the environment. Any failure is an error; this never
///   falls back to binding.
/// * `require_socket_activation == false`: bind `listen` directly (close-on-exec, non-blocking).
///
/// A non-loopback `listen` is refused either way (config validation refuses it too; this is
/// defence in depth at the one place that opens the port).
///
/// The returned listener is non-blocking, ready for `tokio::net::TcpListener::from_std`.
///
/// # Threads
///
/// Must be called while the process is single-threaded (before the tokio runtime is built and
/// before any thread is spawned): on the activation path it removes environment variables, which
/// is only sound when no other thread reads the environment concurrently.
pub fn take_listener(
    listen: SocketAddr,
    require_socket_activation: bool,
) -> Result<TcpListener, ListenerError> {
    if !listen.ip().is_loopback() {
        return Err(ListenerError::NotLoopback { listen });
    }
    if require_socket_activation {
        adopt_activated(listen)
    } else {
        bind_direct(listen)
    }
}

fn bind_direct(listen: SocketAddr) -> Result<TcpListener, ListenerError> {
    // std opens sockets with SOCK_CLOEXEC already.
    let listener =
        TcpListener::bind(listen).map_err(|error| ListenerError::Bind { listen, error })?;
    listener
        .set_nonblocking(true)
        .map_err(|error| ListenerError::Io {
            context: "make the listening socket non-blocking",
            error,
        })?;
    Ok(listener)
}

/// The value of an environment variable: `None` when unset, the lossy text when not UTF-8 (then
/// it fails every check below, which is what we want).
fn env_text(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// A strictly decimal number: digits only (no sign, no blanks), as systemd writes them.
fn parse_decimal(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

fn adopt_activated(listen: SocketAddr) -> Result<TcpListener, ListenerError> {
    let pid = env_text("LISTEN_PID");
    let fds = env_text("LISTEN_FDS");
    let (pid, fds) = match (pid, fds) {
        (Some(pid), Some(fds)) => (pid, fds),
        (None, None) => {
            return Err(ListenerError::NotActivated {
                missing: "LISTEN_PID and LISTEN_FDS",
            });
        }
        (None, Some(_)) => {
            return Err(ListenerError::NotActivated {
                missing: "LISTEN_PID",
            });
        }
        (Some(_), None) => {
            return Err(ListenerError::NotActivated {
                missing: "LISTEN_FDS",
            });
        }
    };

    // listenfd accepts an unset or empty LISTEN_PID, and on a mismatch silently ignores the fds;
    // both must be errors here.
    let own = std::process::id();
    if parse_decimal(&pid) != Some(u64::from(own)) {
        return Err(ListenerError::WrongPid { value: pid, own });
    }
    match parse_decimal(&fds) {
        None => return Err(ListenerError::MalformedFdCount { value: fds }),
        Some(1) => {}
        Some(n) => return Err(ListenerError::WrongFdCount { n }),
    }
    // listenfd honours this (non-systemd) variable to look elsewhere than fd 3. Removing it would
    // need `unsafe`, so refuse it instead unless it says what systemd means anyway.
    if let Some(first) = env_text("LISTEN_FDS_FIRST_FD")
        && first != "3"
    {
        return Err(ListenerError::UnsupportedFirstFd { value: first });
    }

    // From here on the environment is known to describe exactly one fd (3) for this process.
    // `from_env` re-checks LISTEN_PID and removes LISTEN_PID and LISTEN_FDS.
    let mut passed = listenfd::ListenFd::from_env();
    // It leaves LISTEN_FDNAMES behind. `listen_fds_with_names(true)` unsets all three variables
    // on every return path; with LISTEN_PID already gone it reports no fds (and, when
    // LISTEN_FDNAMES names any, an "invalid LISTEN_FDNAMES" error that is expected and ignored),
    // so its only effect here is that removal.
    let _ = sd_notify::listen_fds_with_names(true);

    if passed.len() != 1 {
        // Unreachable after the checks above unless the environment changed under us.
        return Err(ListenerError::WrongFdCount {
            n: passed.len() as u64,
        });
    }
    // Checks that fd 3 is a socket (fstat), SOCK_STREAM, AF_INET or AF_INET6, then sets
    // FD_CLOEXEC and takes ownership. It does not check listen()ing state or the address.
    let listener = match passed.take_tcp_listener(0) {
        Ok(Some(listener)) => listener,
        Ok(None) => {
            return Err(ListenerError::NotAListeningTcpSocket {
                reason: "no descriptor was passed".to_owned(),
            });
        }
        Err(error) => {
            return Err(ListenerError::NotAListeningTcpSocket {
                reason: error.to_string(),
            });
        }
    };
    validate_adopted(&listener, listen)?;
    Ok(listener)
}

/// Our own checks on the adopted socket, where `listenfd` is lax or silent, and the final setup.
fn validate_adopted(listener: &TcpListener, listen: SocketAddr) -> Result<(), ListenerError> {
    let not_tcp = |reason: String| ListenerError::NotAListeningTcpSocket { reason };
    let fd = listener.as_fd();
    if fd.as_raw_fd() != SD_LISTEN_FDS_START {
        return Err(not_tcp(format!(
            "the adopted descriptor is fd {}, not fd 3",
            fd.as_raw_fd()
        )));
    }
    match getsockopt(&fd, sockopt::SockType) {
        Ok(SockType::Stream) => {}
        Ok(other) => return Err(not_tcp(format!("socket type is {other:?}, not a stream"))),
        Err(errno) => return Err(not_tcp(format!("cannot read its socket type: {errno}"))),
    }
    // A TCP-level option exists only on TCP sockets (an SCTP stream socket answers ENOPROTOOPT).
    if let Err(errno) = getsockopt(&fd, sockopt::TcpNoDelay) {
        return Err(not_tcp(format!("not a TCP socket: {errno}")));
    }
    match getsockopt(&fd, sockopt::AcceptConn) {
        Ok(true) => {}
        Ok(false) => return Err(not_tcp("bound but not listening".to_owned())),
        Err(errno) => return Err(not_tcp(format!("cannot read its listening state: {errno}"))),
    }
    // std only builds an address for AF_INET/AF_INET6; anything else is an error here.
    let bound = listener
        .local_addr()
        .map_err(|error| not_tcp(format!("cannot read its address: {error}")))?;
    if bound != listen {
        return Err(ListenerError::WrongAddress {
            bound,
            expected: listen,
        });
    }

    // listenfd already set FD_CLOEXEC; set it again here so that this module, not a dependency's
    // implementation detail, guarantees it.
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(|errno| ListenerError::Io {
        context: "mark the passed socket close-on-exec",
        error: errno.into(),
    })?;
    // Inherited sockets keep the service manager's blocking mode; tokio's from_std requires a
    // non-blocking socket (tokio-rs/tokio#5595).
    listener
        .set_nonblocking(true)
        .map_err(|error| ListenerError::Io {
            context: "make the passed socket non-blocking",
            error,
        })?;
    Ok(())
}

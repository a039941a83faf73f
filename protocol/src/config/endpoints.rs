//! Where the router listens and talks: the HTTP listener, the backend
//! port, and the two Unix sockets.

use super::ConfigError;
use super::json_walk::{Obj, as_abs_path, as_str, as_u64_in};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// `listen` when omitted.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 8088);

/// File name of the supervisor socket when `supervisor_socket` is omitted;
/// it goes in the control socket's directory.
pub const DEFAULT_SUPERVISOR_SOCKET_NAME: &str = "supervisor.sock";

pub(crate) struct Endpoints {
    pub listen: SocketAddr,
    pub backend_port: u16,
    pub control_socket: PathBuf,
    pub supervisor_socket: PathBuf,
}

pub(crate) fn parse(root: &Obj<'_>) -> Result<Endpoints, ConfigError> {
    let listen = match root.get("listen") {
        None => DEFAULT_LISTEN,
        Some(value) => {
            let path = root.path().field("listen");
            let text = as_str(value, &path)?;
            let addr: SocketAddr = text.parse().map_err(|_| {
                path.error(
                    "expected an ip address and port such as \"127.0.0.1:8088\" or \"[::1]:8088\"",
                )
            })?;
            // HTTP is loopback only: local users are trusted, the network
            // is not (the spec's security model).
            if !addr.ip().is_loopback() {
                return Err(path.error("must be a loopback address (127.0.0.0/8 or ::1)"));
            }
            addr
        }
    };

    let port_path = root.path().field("backend_port");
    let backend_port = as_u64_in(root.required("backend_port")?, &port_path, 1..=65535)? as u16;
    if backend_port == listen.port() {
        return Err(port_path.error(format!(
            "must differ from the listen port {}",
            listen.port()
        )));
    }

    let control_socket = root.abs_path("control_socket")?;
    let Some(control_dir) = control_socket
        .parent()
        .filter(|_| control_socket.file_name().is_some())
    else {
        return Err(root
            .path()
            .field("control_socket")
            .error("must name a socket file, not the root directory"));
    };
    let supervisor_socket = match root.get("supervisor_socket") {
        Some(value) => as_abs_path(value, &root.path().field("supervisor_socket"))?,
        None => control_dir.join(DEFAULT_SUPERVISOR_SOCKET_NAME),
    };
    if supervisor_socket == control_socket {
        return Err(root.path().field("supervisor_socket").error(
            "must differ from control_socket (when omitted it is supervisor.sock beside control_socket)",
        ));
    }
    Ok(Endpoints {
        listen,
        backend_port,
        control_socket,
        supervisor_socket,
    })
}

//! Who listens on the backend port: the check that keeps a stray server from being taken for
//! the model in the `health` readiness mode.
//!
//! Without a ready file naming the child's pid, a `/health` answer alone could come from any
//! process that holds the port. So the port's listening socket (from `/proc/net/tcp`, state
//! LISTEN, on 127.0.0.1 or any address) must be open in a process of the child's own process
//! group (one of its `/proc/PID/fd` links is `socket:[INODE]`) before `/health` is asked.
//! Only `/proc` is read; nothing is sent to the port.

use std::collections::HashSet;

use super::group::live_members;

/// Who holds the backend port's listening socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PortListener {
    /// Nothing listens yet (Strata opens its port only once the model is loaded).
    None,
    /// A process of the child's group listens: the backend itself.
    Child,
    /// Something else listens: never ask it anything.
    Stranger,
}

/// The inodes of the IPv4 sockets listening on `port` at 127.0.0.1 or 0.0.0.0, from the text
/// of `/proc/net/tcp`.
pub(crate) fn listening_inodes(proc_net_tcp: &str, port: u16) -> Vec<u64> {
    proc_net_tcp
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
            let (address, local_port) = local.split_once(':')?;
            let listens = *state == "0A"
                && u16::from_str_radix(local_port, 16).ok()? == port
                // Little-endian hex: 127.0.0.1 is 0100007F; 0.0.0.0 also takes the port.
                && (address == "0100007F" || address == "00000000");
            listens.then(|| inode.parse().ok()).flatten()
        })
        .collect()
}

/// The socket inodes process `pid` has open.
fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    entries
        .filter_map(|entry| {
            let link = std::fs::read_link(entry.ok()?.path()).ok()?;
            let link = link.to_str()?;
            link.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}

/// Who listens on `127.0.0.1:port`, judged against the process group `pgid`.
pub(crate) fn port_listener(port: u16, pgid: u32) -> PortListener {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return PortListener::None;
    };
    let inodes = listening_inodes(&table, port);
    if inodes.is_empty() {
        return PortListener::None;
    }
    let held = live_members(pgid)
        .into_iter()
        .flat_map(socket_inodes)
        .collect::<HashSet<u64>>();
    if inodes.iter().any(|inode| held.contains(inode)) {
        PortListener::Child
    } else {
        PortListener::Stranger
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    const TABLE: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F9F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F9F 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1FA0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 100 0 0 10 0
   3: 0200A8C0:1FA1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 55 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn only_listening_sockets_on_loopback_or_any_count() {
        // 0x1F9F = 8095: the listener, not the established connection on it.
        assert_eq!(listening_inodes(TABLE, 8095), [4242]);
        assert_eq!(
            listening_inodes(TABLE, 8096),
            [77],
            "0.0.0.0 takes the port too"
        );
        assert!(listening_inodes(TABLE, 8097).is_empty(), "another address");
        assert!(listening_inodes(TABLE, 9).is_empty());
        assert!(listening_inodes("garbage\nmore garbage", 8095).is_empty());
    }

    #[test]
    fn a_listener_of_this_process_is_this_groups_and_a_strangers_otherwise() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let own_group = nix::unistd::getpgrp().as_raw() as u32;
        assert_eq!(port_listener(port, own_group), PortListener::Child);
        // A group nobody is in: the same socket is a stranger's.
        assert_eq!(port_listener(port, u32::MAX / 2), PortListener::Stranger);
        drop(listener);
        assert_eq!(port_listener(port, own_group), PortListener::None);
    }
}

//! Binding the supervisor's Unix sockets safely.
//!
//! Both sockets live in a directory that only the daemon user can enter, so
//! file permissions are the first line of defence; `SO_PEERCRED` is the
//! second. A socket path that a live daemon still answers on is never
//! replaced: only a stale socket file (nobody listening) is removed.

use std::fmt;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::{UnixListener, UnixStream};

/// Why a socket could not be set up. Messages name the path and the fix.
#[derive(Debug)]
pub enum SocketError {
    NoParent(PathBuf),
    DirMissing(PathBuf, io::Error),
    DirNotOwned { dir: PathBuf, owner: u32, euid: u32 },
    DirTooOpen { dir: PathBuf, mode: u32 },
    NotASocket(PathBuf),
    InUse(PathBuf),
    Io(PathBuf, io::Error),
}

impl fmt::Display for SocketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SocketError::NoParent(path) => {
                write!(
                    f,
                    "{}: a socket path needs a parent directory",
                    path.display()
                )
            }
            SocketError::DirMissing(dir, err) => write!(
                f,
                "{}: socket directory is not usable ({err}); create it with install -d -m 700",
                dir.display()
            ),
            SocketError::DirNotOwned { dir, owner, euid } => write!(
                f,
                "{}: socket directory belongs to uid {owner}, not to the daemon user (uid {euid})",
                dir.display()
            ),
            SocketError::DirTooOpen { dir, mode } => write!(
                f,
                "{}: socket directory has mode {mode:03o}; it must have no group or other permissions (chmod 700)",
                dir.display()
            ),
            SocketError::NotASocket(path) => write!(
                f,
                "{}: exists and is not a socket; refusing to replace it",
                path.display()
            ),
            SocketError::InUse(path) => write!(
                f,
                "{}: another daemon is serving on this socket; refusing to take it over",
                path.display()
            ),
            SocketError::Io(path, err) => write!(f, "{}: {err}", path.display()),
        }
    }
}

impl std::error::Error for SocketError {}

/// The effective user ID of this process.
pub fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Checks that `socket`'s directory exists, belongs to this user and has no
/// group or other permissions.
pub fn check_private_dir(socket: &Path) -> Result<(), SocketError> {
    let dir = socket
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .ok_or_else(|| SocketError::NoParent(socket.to_path_buf()))?;
    let meta = std::fs::metadata(dir).map_err(|err| SocketError::DirMissing(dir.into(), err))?;
    if !meta.is_dir() {
        return Err(SocketError::DirMissing(
            dir.into(),
            io::Error::other("not a directory"),
        ));
    }
    let euid = euid();
    if meta.uid() != euid {
        return Err(SocketError::DirNotOwned {
            dir: dir.into(),
            owner: meta.uid(),
            euid,
        });
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SocketError::DirTooOpen {
            dir: dir.into(),
            mode,
        });
    }
    Ok(())
}

/// Binds a listening socket at `path` with mode 0600, replacing only a
/// stale socket file.
pub fn bind_private(path: &Path) -> Result<UnixListener, SocketError> {
    check_private_dir(path)?;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(SocketError::NotASocket(path.into()));
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(SocketError::InUse(path.into())),
            Err(err) if err.kind() == io::ErrorKind::ConnectionRefused => {
                tracing::info!(path = %path.display(), "removing stale socket");
                std::fs::remove_file(path).map_err(|err| SocketError::Io(path.into(), err))?;
            }
            Err(err) => return Err(SocketError::Io(path.into(), err)),
        },
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(SocketError::Io(path.into(), err)),
    }
    let listener = UnixListener::bind(path).map_err(|err| SocketError::Io(path.into(), err))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|err| SocketError::Io(path.into(), err))?;
    Ok(listener)
}

/// Whether the connected peer may use the daemon's sockets: its own user,
/// or root. Root can reach the daemon anyway; refusing it would only make
/// `sudo strata-ctl status` fail with a confusing error. Every other user is
/// refused, whatever the file permissions say.
pub fn peer_is_allowed(stream: &UnixStream) -> bool {
    match stream.peer_cred() {
        Ok(cred) => cred.uid() == euid() || cred.uid() == 0,
        Err(err) => {
            tracing::warn!(error = %err, "cannot read peer credentials; refusing");
            false
        }
    }
}

/// Removes a socket file this process created, ignoring a missing file.
pub fn remove_socket(path: &Path) {
    if let Err(err) = std::fs::remove_file(path)
        && err.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %err, "cannot remove socket");
    }
}

//! A private systemd for end-to-end tests of the units in `contrib/` (root only).
//!
//! [`SdStackBuilder::boot`] (from [`SdStack::builder`]) writes a config, fake profiles and rewritten copies of the three units
//! into a per-test directory `/var/lib/strata-sd-test-<pid>-<n>/` (mode 0700, removed at the
//! end), boots `/lib/systemd/systemd` as PID 1 of new PID, mount, UTS and cgroup namespaces,
//! and waits until it reports `running` with the supervisor started and the socket listening.
//! Tests then drive it with `systemctl` through `nsenter` ([`SdStack::systemctl`]) and talk
//! HTTP to the socket's loopback port directly (the network namespace is shared).
//!
//! # The hazards, and what this module does about them
//!
//! A mount namespace isolates mounts, not files: a systemd that runs `systemd-tmpfiles` would
//! empty the machine's real `/tmp`, and a systemd that sees the machine's cgroup hierarchy
//! would move processes out of the cgroups the machine put them in. So the boot script
//! ([`BOOT_SCRIPT`]), before it execs systemd:
//!
//! - checks that it is PID 1 of its own PID namespace, in a mount namespace other than the
//!   test's, at the root of its own cgroup namespace;
//! - mounts private tmpfs over `/tmp`, `/var/tmp`, `/run`, `/var/log` and
//!   `/etc/systemd/system`, and checks each with `mountpoint` and for emptiness;
//! - mounts its own cgroup2 view at `/sys/fs/cgroup`, rooted at a fresh cgroup directory of
//!   this test (below the test process's own cgroup in the unified hierarchy, entered before
//!   `unshare --cgroup`), so systemd's `init.scope` and `system.slice` live in there;
//! - makes `/proc/sys` read-only and binds `/dev/console` to a file of the test directory
//!   (`console.log`), so nothing reaches the machine's console. It stays empty: systemd 252
//!   points its own stdio at /dev/null, and in a container it logs to that stderr. What
//!   systemd did is read with `systemctl show` instead, and the services' output goes to
//!   files (`StandardOutput=append:` in the unit copies);
//! - masks the tmpfiles units and every sysinit-type unit, and boots `TEST.target`, which
//!   wants only the units under test (all with `DefaultDependencies=no`). journald is masked
//!   too, except for a test that reads the journal ([`SdStackBuilder::journal`]): its journal
//!   is volatile, under the private `/run`.
//!
//! Everything the services read or write and everything the test reads afterwards (config,
//! profiles, unit copies, boot script, console, the services' output, the fake backend's log,
//! the `StateDirectory`) lives in the per-test directory, outside the masked paths.
//!
//! # Wherever the checkout is
//!
//! The built binaries and the fake Strata (`tests/fake_strata`) live in the checkout, which
//! may be anywhere: under `/tmp` the private systemd's tmpfs hides them, and so would the
//! units' own `PrivateTmp=yes` (and `ProtectHome=yes` a build under `/root` or `/home` from the
//! proxy). So the units never name them where they are: the boot script bind-mounts the
//! binaries' directory and the fake Strata read-only onto `host/bin` and `host/strata` of the
//! per-test directory, in the namespace's mount namespace only (the host sees two empty
//! directories), before it mounts the tmpfs; the unit copies' `ExecStart=`, the config's
//! `strata_dir` and `strata-ctl` run through `nsenter` use those paths, wherever the checkout
//! is. The Python interpreter is not moved (a Python install is not relocatable): if it lives
//! under one of the [`MASKED`] directories, [`unavailable`] says so and the tests skip.
//!
//! The namespace is stopped by SIGKILL to its PID 1, by host PID ([`PrivateSystemd`]'s
//! shutdown or drop); the kernel then kills everything in it. Then the cgroup directory is
//! removed, and the shutdown fails if a process or a directory is left. As a safety net if the
//! test process itself dies, `unshare` runs under `setpriv --pdeathsig KILL` (when `setpriv`
//! exists) with `--kill-child`, so the namespace's PID 1 dies with it.
//!
//! PIDs: `systemctl show -P MainPID`, `strata-ctl status` and the fake log report PIDs of the
//! namespace; [`PrivateSystemd::host_pid`] maps one to the host PID while the process lives
//! (through the cgroup and `NSpid`), and [`PrivateSystemd::alive`] checks a host PID is still
//! a live process of this namespace (so a recycled PID is never mistaken for one).

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{Map, Value, json};
use strata_protocol::control::Status;

use crate::binaries::binary;
use crate::control::{ControlClient, parse_status};
use crate::fake_log::FakeLog;
use crate::http;
use crate::net::free_port;
use crate::poll::{DEADLINE, POLL_INTERVAL, poll_for};
use crate::procs;
use crate::python::{fake_strata_dir, python};

/// The systemd binary booted as the namespace's PID 1.
pub const SYSTEMD: &str = "/lib/systemd/systemd";

/// The concrete model every systemd test config has (family `qwen3.8-flash-next`).
pub const MODEL: &str = "sd-flash";
/// The alias resolving to [`MODEL`].
pub const ALIAS: &str = "qwen3.8-flash-next";

/// The config path the contrib units pass to both daemons.
const CONTRIB_CONFIG: &str = "/etc/strata-router/config.json";
/// Where the per-test directories are made, and their name prefix.
const ROOT_PARENT: &str = "/var/lib";
const NAME_PREFIX: &str = "strata-sd-test-";
/// The per-test subdirectory holding the bind targets ([`TestRoot::host_view`]).
const HOST_VIEWS: &str = "host";

/// The directories the boot script mounts a private tmpfs over (and so hides from everything
/// in the namespace), in [`BOOT_SCRIPT`]'s order.
pub const MASKED: [&str; 5] = [
    "/tmp",
    "/var/tmp",
    "/run",
    "/var/log",
    "/etc/systemd/system",
];

/// The directory of [`MASKED`] that hides `path` inside the namespace, if one does.
pub fn masked_by(path: &Path) -> Option<&'static str> {
    MASKED.into_iter().find(|dir| path.starts_with(dir))
}

/// The boot script, run as PID 1 of the new namespaces (`$BASE`: the test directory,
/// `$HOST_MNT_NS`: the test's mount namespace). See the module docs.
pub const BOOT_SCRIPT: &str = r#"#!/bin/bash
# Boots a private systemd for one strata-router test (tests/src/systemd.rs).
set -eu
# Refuse to touch anything unless this really is a fresh PID, mount and cgroup namespace.
[ "$$" = 1 ] || { echo "boot.sh: not PID 1 of a new PID namespace" >&2; exit 90; }
[ "$(readlink /proc/self/ns/mnt)" != "$HOST_MNT_NS" ] || { echo "boot.sh: still in the test's mount namespace" >&2; exit 91; }
grep -qx '0::/' /proc/self/cgroup || { echo "boot.sh: not at the root of a new cgroup namespace" >&2; exit 92; }
mount --make-rprivate /
# The binaries and the checkout's files the units use, wherever they are (a checkout under /tmp
# is hidden by the tmpfs below and by the units' own PrivateTmp=): read-only binds, in this
# namespace only, onto empty directories of the test directory ($BASE/binds: NUL-separated
# source, target pairs). Done before the tmpfs mounts, which would hide their sources.
while IFS= read -r -d '' src && IFS= read -r -d '' dst; do
  case "$dst" in "$BASE"/host/*) ;; *) echo "boot.sh: bind target $dst is outside $BASE/host" >&2; exit 95 ;; esac
  [ -d "$dst" ] && [ -z "$(ls -A "$dst")" ] || { echo "boot.sh: $dst is not an empty directory" >&2; exit 96; }
  mount --bind "$src" "$dst"
  mount -o remount,bind,ro "$dst"
  mountpoint -q "$dst" || { echo "boot.sh: $dst is not a mount point" >&2; exit 97; }
done < "$BASE/binds"
for d in /tmp /var/tmp /run /var/log /etc/systemd/system; do
  case "$d" in /tmp|/var/tmp) mode=1777 ;; *) mode=0755 ;; esac
  mount -t tmpfs -o "mode=$mode" tmpfs "$d"
  mountpoint -q "$d" || { echo "boot.sh: $d is not a mount point" >&2; exit 93; }
  [ -z "$(ls -A "$d")" ] || { echo "boot.sh: $d is not empty" >&2; exit 94; }
done
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount --bind "$BASE/console.log" /dev/console
# journald stays unmasked for a test that reads the journal ($BASE/journal exists): it writes
# only under the private /run (its volatile journal) and /var/log, both tmpfs here.
journal_units="systemd-journald.service systemd-journald.socket"
[ ! -e "$BASE/journal" ] || journal_units=
for u in systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service \
         systemd-tmpfiles-clean.service systemd-tmpfiles-clean.timer \
         sysinit.target basic.target local-fs.target swap.target $journal_units \
         systemd-udevd.service systemd-sysctl.service \
         systemd-modules-load.service modprobe@.service systemd-binfmt.service \
         proc-sys-fs-binfmt_misc.automount systemd-logind.service dbus.service dbus.socket; do
  ln -s /dev/null "/etc/systemd/system/$u"
done
cp "$BASE"/units/* /etc/systemd/system/
export container=other
exec /lib/systemd/systemd --system --unit=TEST.target --log-target=console
"#;

/// Why the systemd tests cannot run here, or `None` if they can. A test that gets `Some`
/// prints it and passes; with `None`, a failed boot fails the test.
pub fn unavailable() -> Option<String> {
    if crate::in_nix_sandbox() {
        return Some("STRATA_TEST_IN_NIX_SANDBOX is set (no systemd in the Nix sandbox)".into());
    }
    if !crate::is_root() {
        return Some("booting a private systemd needs root".into());
    }
    for tool in ["unshare", "nsenter"] {
        if find_tool(tool).is_none() {
            return Some(format!("{tool} (util-linux) not found"));
        }
    }
    if !Path::new(SYSTEMD).is_file() {
        return Some(format!("{SYSTEMD} not found (apt-get install systemd)"));
    }
    if cgroup2_mount().is_none() {
        return Some("no cgroup2 (unified) hierarchy is mounted".into());
    }
    if own_cgroup().is_none() {
        return Some("/proc/self/cgroup has no cgroup2 (0::) line".into());
    }
    let python = python();
    let real = fs::canonicalize(python).unwrap_or_else(|_| python.to_path_buf());
    if let Some(dir) = masked_by(python).or_else(|| masked_by(&real)) {
        return Some(format!(
            "the fake backend's Python, {}, is under {dir}, which the private systemd hides \
             from its units (a Python install cannot be moved); set STRATA_TEST_PYTHON to an \
             interpreter outside {}",
            python.display(),
            MASKED.join(", ")
        ));
    }
    None
}

/// A program from `PATH` or the usual system directories.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/bin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_absolute() && candidate.is_file())
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on
/// a hybrid machine), from `/proc/self/mountinfo`.
pub fn cgroup2_mount() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mount_point = left.split_whitespace().nth(4)?;
        Some(PathBuf::from(mount_point.replace("\\040", " ")))
    })
}

/// This process's cgroup2 path (the `0::` line of `/proc/self/cgroup`).
pub fn own_cgroup() -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(str::to_owned)
}

/// The cgroup directory (host view) below which each boot gets its own: this process's own
/// cgroup in the unified hierarchy.
pub fn cgroup_parent() -> PathBuf {
    let mount = cgroup2_mount().expect("a cgroup2 mount (checked by unavailable())");
    let own = own_cgroup().expect("a 0:: cgroup line (checked by unavailable())");
    mount.join(own.trim_start_matches('/'))
}

/// The hard open-file limit of this process.
fn hard_nofile() -> Option<u64> {
    procs::open_file_limits(std::process::id()).map(|(_, hard)| hard)
}

pub use strata_test_support::output_within;

/// The per-test directory `/var/lib/strata-sd-test-<pid>-<n>/` (mode 0700), removed on drop.
/// `STRATA_TEST_KEEP_TMP=1` keeps the directory of a failing test.
#[derive(Debug)]
pub struct TestRoot {
    path: PathBuf,
    name: String,
}

impl TestRoot {
    /// Creates a fresh directory.
    pub fn new() -> TestRoot {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{NAME_PREFIX}{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = Path::new(ROOT_PARENT).join(&name);
        make_dir(&path, 0o700);
        TestRoot { path, name }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's name (`strata-sd-test-<pid>-<n>`), unique on this machine while it
    /// exists.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A path inside.
    pub fn join(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.path.join(relative)
    }

    /// Creates a subdirectory with `mode`.
    pub fn subdir(&self, name: &str, mode: u32) -> PathBuf {
        let path = self.path.join(name);
        make_dir(&path, mode);
        path
    }

    /// `host/NAME`: where the namespace sees host directory bind `NAME` ([`PrivateSystemd::boot`]).
    /// On the host it is an empty directory.
    pub fn host_view(&self, name: &str) -> PathBuf {
        self.path.join(HOST_VIEWS).join(name)
    }

    /// Removes the (empty) bind targets under `host/` one by one, never recursively: if one is
    /// not empty, a bind of the namespace is visible here, and removing the tree would remove
    /// what it shows (the checkout, the build). Errors name it.
    fn remove_host_views(&self) -> Result<(), String> {
        let dir = self.path.join(HOST_VIEWS);
        let Ok(entries) = fs::read_dir(&dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            fs::remove_dir(entry.path())
                .map_err(|err| format!("{}: {err}", entry.path().display()))?;
        }
        fs::remove_dir(&dir).map_err(|err| format!("{}: {err}", dir.display()))
    }
}

impl Default for TestRoot {
    fn default() -> TestRoot {
        TestRoot::new()
    }
}

impl Drop for TestRoot {
    fn drop(&mut self) {
        if std::thread::panicking() && std::env::var_os("STRATA_TEST_KEEP_TMP").is_some() {
            eprintln!("keeping {} (STRATA_TEST_KEEP_TMP)", self.path.display());
            return;
        }
        if self.path.parent() == Some(Path::new(ROOT_PARENT)) && self.name.starts_with(NAME_PREFIX)
        {
            match self.remove_host_views() {
                Ok(()) => {
                    let _ = fs::remove_dir_all(&self.path);
                }
                Err(err) => eprintln!("not removing {}: {err}", self.path.display()),
            }
        }
    }
}

/// Removes what a test process that was killed (so never ran its cleanup) left behind: its
/// per-test directories and its (unpopulated) cgroup directories, recognised by the name
/// `strata-sd-test-<pid>-<n>` with no process `<pid>` alive. A killed test's namespace dies
/// with it (`--pdeathsig`, `--kill-child`); only these directories stay.
pub fn sweep_stale(cgroup_parent: Option<&Path>) {
    let stale = |name: &str| -> bool {
        name.strip_prefix(NAME_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| {
                pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
            })
    };
    let entries = |dir: &Path| -> Vec<PathBuf> {
        fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|entry| entry.file_name().to_str().is_some_and(stale))
                    .map(|entry| entry.path())
                    .collect()
            })
            .unwrap_or_default()
    };
    for dir in entries(Path::new(ROOT_PARENT)) {
        let root = TestRoot {
            name: dir
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
                .unwrap_or_default(),
            path: dir,
        };
        eprintln!("removing {}, left by a killed test", root.path.display());
        drop(root);
    }
    if let Some(parent) = cgroup_parent {
        for dir in entries(parent) {
            if let Err(err) = remove_cgroup_tree(&dir) {
                eprintln!("cannot remove a killed test's cgroup: {err}");
            }
        }
    }
}

/// Removes cgroup directory `dir` and everything below it, bottom-up (cgroup directories go
/// with rmdir only, and only when no process is in them).
fn remove_cgroup_tree(dir: &Path) -> Result<(), String> {
    let mut dirs = vec![dir.to_path_buf()];
    let mut index = 0;
    while index < dirs.len() {
        if let Ok(entries) = fs::read_dir(&dirs[index]) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|entry| entry.path()),
            );
        }
        index += 1;
    }
    for dir in dirs.iter().rev() {
        let _ = fs::remove_dir(dir);
    }
    if dir.exists() {
        return Err(format!("cgroup {} could not be removed", dir.display()));
    }
    Ok(())
}

fn make_dir(path: &Path, mode: u32) {
    fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .unwrap_or_else(|err| panic!("cannot create {}: {err}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|err| panic!("cannot chmod {}: {err}", path.display()));
}

fn write_file(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
}

/// The names of one test's unit copies: `PREFIX-supervisor.service`, `PREFIX-proxy.socket`,
/// `PREFIX-proxy.service`, and `PREFIX` is also the `RuntimeDirectory`.
#[derive(Debug, Clone)]
pub struct UnitNames {
    pub prefix: String,
}

impl UnitNames {
    pub fn supervisor(&self) -> String {
        format!("{}-supervisor.service", self.prefix)
    }

    pub fn socket(&self) -> String {
        format!("{}-proxy.socket", self.prefix)
    }

    pub fn proxy(&self) -> String {
        format!("{}-proxy.service", self.prefix)
    }

    /// The unit copy's name for a contrib unit name.
    fn rename(&self, contrib: &str) -> Option<String> {
        match contrib {
            "strata-supervisor.service" => Some(self.supervisor()),
            "strata-proxy.socket" => Some(self.socket()),
            "strata-proxy.service" => Some(self.proxy()),
            _ => None,
        }
    }
}

/// What [`rewrite_unit`] changes in a contrib unit.
#[derive(Debug, Clone)]
pub struct Rewrite {
    pub names: UnitNames,
    /// The config passed to `strata-supervisor`.
    pub supervisor_config: PathBuf,
    /// The config passed to `strata-proxy`.
    pub proxy_config: PathBuf,
    /// Where the namespace sees the built binaries (`ExecStart=` runs them from here).
    pub bin_dir: PathBuf,
    /// `ListenStream`.
    pub listen: SocketAddr,
    /// `StateDirectory` (relative to /var/lib).
    pub state_dir: String,
    /// Added as `ReadWritePaths`; the services' output files go here.
    pub rw_dir: PathBuf,
    /// `LimitNOFILE` is lowered to this if it is higher.
    pub nofile_cap: Option<u64>,
    /// `STRATA_LOG` for both daemons.
    pub strata_log: String,
    /// The services' output goes to the private journal (systemd's default), not to files.
    pub journal: bool,
}

/// The contrib unit `name` (`strata-proxy.socket`, ...) rewritten for a test (see
/// [`rewrite_unit`]).
pub fn contrib_unit(name: &str) -> String {
    let path = contrib_dir().join(name);
    fs::read_to_string(&path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// `contrib/` of this repository.
pub fn contrib_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .join("contrib")
}

/// A test copy of contrib unit `name` (text `text`): every directive kept as it is, except
///
/// - `User=` and `Group=` removed (the test runs the daemons as root; no account needed);
/// - `ExecStart=` runs the built binary of that name in `bin_dir` (the namespace's view of the
///   build, see the module docs) on the test's config;
/// - `RuntimeDirectory=` is the unique [`UnitNames::prefix`], `StateDirectory=` the test's
///   `state_dir`, `ListenStream=` the test's free loopback port;
/// - unit names in `Requires=`, `After=`, `Wants=` (and other dependency lists) renamed;
/// - `LimitNOFILE=` capped at `nofile_cap` (raising a hard limit needs `CAP_SYS_RESOURCE`,
///   which the test machine may lack);
/// - added: `DefaultDependencies=no` (nothing from sysinit.target is there to depend on);
///   for services `ReadWritePaths=` the test's rw directory (`ProtectSystem=strict` makes
///   the rest of /var/lib read-only, and the fake backend's log and the services' output
///   are written there), `StandardOutput=`/`StandardError=` appending to a file in it (the
///   journal is masked), and `Environment=STRATA_LOG=... PYTHONDONTWRITEBYTECODE=1`.
///
/// Panics if a directive the test must rewrite is missing, so a change to contrib/ that the
/// test does not understand fails loudly.
pub fn rewrite_unit(name: &str, text: &str, rewrite: &Rewrite) -> String {
    let is_service = name.ends_with(".service");
    let is_socket = name.ends_with(".socket");
    let copy_name = rewrite
        .names
        .rename(name)
        .unwrap_or_else(|| name.to_owned());
    let output_name = copy_name.trim_end_matches(".service");
    let mut out = vec![
        format!("# Test copy of contrib/{name}, rewritten by tests/src/systemd.rs."),
        "# Changed: User/Group removed, ExecStart, RuntimeDirectory, StateDirectory,".into(),
        "# ListenStream, unit names, LimitNOFILE cap; added: DefaultDependencies=no,".into(),
        "# ReadWritePaths, StandardOutput/StandardError, Environment.".into(),
    ];
    let mut exec_start = false;
    let mut listen_stream = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            let section = trimmed;
            out.push(line.to_owned());
            if section == "[Unit]" {
                out.push("# test: no sysinit.target in the private systemd".into());
                out.push("DefaultDependencies=no".into());
            }
            if section == "[Service]" {
                let log = rewrite.rw_dir.join(format!("{output_name}.log"));
                out.push(
                    "# test: ProtectSystem=strict leaves /var/lib read-only; the fake backend's log"
                        .into(),
                );
                out.push(
                    "# and this service's output (the journal is masked) are written here.".into(),
                );
                out.push(format!("ReadWritePaths={}", rewrite.rw_dir.display()));
                if rewrite.journal {
                    out.push("# test: this boot runs journald; the output goes to it.".into());
                } else {
                    out.push(format!("StandardOutput=append:{}", log.display()));
                    out.push(format!("StandardError=append:{}", log.display()));
                }
                out.push(format!(
                    "Environment=STRATA_LOG={} PYTHONDONTWRITEBYTECODE=1",
                    rewrite.strata_log
                ));
            }
            continue;
        }
        let Some((key, value)) = trimmed
            .split_once('=')
            .filter(|_| !trimmed.starts_with('#'))
        else {
            out.push(line.to_owned());
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "User" | "Group" => {
                out.push(format!(
                    "# test: {key}={value} removed (the test runs as root)"
                ));
            }
            "ExecStart" => {
                let mut words = value.split_whitespace();
                let program = words.next().unwrap_or_default();
                let program_name = Path::new(program)
                    .file_name()
                    .and_then(|name| name.to_str())
                    .unwrap_or_default();
                let config = if program_name == "strata-proxy" {
                    &rewrite.proxy_config
                } else {
                    &rewrite.supervisor_config
                };
                let args: Vec<String> = words
                    .map(|word| match word {
                        CONTRIB_CONFIG => config.display().to_string(),
                        other => other.to_owned(),
                    })
                    .collect();
                assert!(
                    value.contains(CONTRIB_CONFIG),
                    "{name}: ExecStart does not pass {CONTRIB_CONFIG}: {value}"
                );
                out.push(format!(
                    "ExecStart={} {}",
                    rewrite.bin_dir.join(program_name).display(),
                    args.join(" ")
                ));
                exec_start = true;
            }
            "RuntimeDirectory" => out.push(format!("RuntimeDirectory={}", rewrite.names.prefix)),
            "StateDirectory" => out.push(format!("StateDirectory={}", rewrite.state_dir)),
            "ListenStream" => {
                out.push(format!("ListenStream={}", rewrite.listen));
                listen_stream = true;
            }
            "Requires" | "After" | "Wants" | "Before" | "BindsTo" | "PartOf" | "Requisite"
            | "Upholds" | "Also" | "WantedBy" | "RequiredBy" | "Service" => {
                let renamed: Vec<String> = value
                    .split_whitespace()
                    .map(|unit| {
                        rewrite
                            .names
                            .rename(unit)
                            .unwrap_or_else(|| unit.to_owned())
                    })
                    .collect();
                out.push(format!("{key}={}", renamed.join(" ")));
            }
            "LimitNOFILE" => {
                let asked: Option<u64> = value.split(':').next().and_then(|v| v.parse().ok());
                match (asked, rewrite.nofile_cap) {
                    (Some(asked), Some(cap)) if asked > cap => {
                        out.push(format!(
                            "# test: LimitNOFILE={value} capped at this machine's hard limit \
                             (raising it needs CAP_SYS_RESOURCE)"
                        ));
                        out.push(format!("LimitNOFILE={cap}"));
                    }
                    _ => out.push(line.to_owned()),
                }
            }
            _ => out.push(line.to_owned()),
        }
    }
    if is_service {
        assert!(exec_start, "{name}: no ExecStart= to rewrite");
    }
    if is_socket {
        assert!(listen_stream, "{name}: no ListenStream= to rewrite");
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// A private systemd: PID 1 of new PID, mount, UTS and cgroup namespaces. Stopped by SIGKILL to
/// its host PID on [`PrivateSystemd::shutdown`] or drop.
#[derive(Debug)]
pub struct PrivateSystemd {
    /// The `sh` → `setpriv` → `unshare` process (same PID all along).
    unshare: Child,
    /// Host PID of the namespace's PID 1 (0 until it is known).
    pid: u32,
    /// `/proc/PID/ns/pid` of the namespace.
    pid_ns: String,
    /// The cgroup directory the namespace is rooted at.
    cgroup: PathBuf,
    console: PathBuf,
    boot_log: PathBuf,
    /// The test directory (for the services' output in a boot failure's report).
    base: PathBuf,
    stopped: bool,
}

impl PrivateSystemd {
    /// Boots systemd with the units in `root/units` (plus `TEST.target`) and waits until it is
    /// `running`. Each `(NAME, DIR)` of `binds` is bind-mounted read-only onto
    /// [`TestRoot::host_view`]`(NAME)` inside the namespace, before anything is hidden (module
    /// docs). Panics (with the boot log and console) if it does not get there.
    pub fn boot(root: &TestRoot, binds: &[(&str, &Path)]) -> PrivateSystemd {
        let mut list = Vec::new();
        if !binds.is_empty() {
            make_dir(&root.join(HOST_VIEWS), 0o700);
        }
        for (name, source) in binds {
            let source = fs::canonicalize(source)
                .unwrap_or_else(|err| panic!("bind source {}: {err}", source.display()));
            assert!(
                source.is_dir(),
                "bind source {} is not a directory",
                source.display()
            );
            let target = root.host_view(name);
            make_dir(&target, 0o755);
            for path in [&source, &target] {
                list.extend_from_slice(path.as_os_str().as_encoded_bytes());
                list.push(0);
            }
        }
        fs::write(root.join("binds"), list).expect("write binds");
        let cgroup = cgroup_parent().join(root.name());
        fs::create_dir(&cgroup)
            .unwrap_or_else(|err| panic!("create cgroup {}: {err}", cgroup.display()));
        let script = root.join("boot.sh");
        write_file(&script, BOOT_SCRIPT);
        fs::set_permissions(&script, fs::Permissions::from_mode(0o700)).expect("chmod boot.sh");
        let console = root.join("console.log");
        write_file(&console, "");
        let boot_log = root.join("boot.log");
        let log_file = fs::File::create(&boot_log).expect("create boot.log");
        let host_mnt_ns = fs::read_link("/proc/self/ns/mnt").expect("readlink /proc/self/ns/mnt");

        let unshare = find_tool("unshare").expect("unshare");
        let mut command = Command::new("/bin/sh");
        // Enter the fresh cgroup first, so `unshare --cgroup` roots the namespace there.
        command
            .arg("-c")
            .arg("echo $$ > \"$0/cgroup.procs\" && exec \"$@\"")
            .arg(&cgroup);
        if let Some(setpriv) = find_tool("setpriv") {
            command.arg(setpriv).args(["--pdeathsig", "KILL"]);
        }
        command
            .arg(unshare)
            .args([
                "--pid",
                "--fork",
                "--kill-child=SIGKILL",
                "--mount",
                "--mount-proc",
                "--uts",
                "--cgroup",
            ])
            .arg(&script)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("BASE", root.path())
            .env("HOST_MNT_NS", host_mnt_ns)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("dup boot.log"))
            .stderr(log_file);
        let child = command
            .spawn()
            .unwrap_or_else(|err| panic!("spawn the systemd boot ({command:?}): {err}"));
        let mut sd = PrivateSystemd {
            unshare: child,
            pid: 0,
            pid_ns: String::new(),
            cgroup,
            console,
            boot_log,
            base: root.path().to_path_buf(),
            stopped: false,
        };
        sd.wait_booted();
        sd
    }

    fn wait_booted(&mut self) {
        let unshare_pid = self.unshare.id();
        let deadline = Instant::now() + Duration::from_secs(30);
        // The namespace's PID 1 is unshare's only child.
        loop {
            if let Some(status) = self.unshare.try_wait().expect("wait for unshare") {
                panic!(
                    "the systemd boot exited early ({status})\n{}",
                    self.boot_report()
                );
            }
            let children =
                fs::read_to_string(format!("/proc/{unshare_pid}/task/{unshare_pid}/children"))
                    .unwrap_or_default();
            let child: Option<u32> = children
                .split_whitespace()
                .next()
                .and_then(|p| p.parse().ok());
            if let Some(pid) = child
                && ns_pids(pid).last() == Some(&1)
            {
                self.pid = pid;
                self.pid_ns = fs::read_link(format!("/proc/{pid}/ns/pid"))
                    .map(|link| link.to_string_lossy().into_owned())
                    .unwrap_or_default();
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the namespace's PID 1 did not appear\n{}",
                self.boot_report()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
        loop {
            if let Some(status) = self.unshare.try_wait().expect("wait for unshare") {
                panic!(
                    "the private systemd exited during boot ({status})\n{}",
                    self.boot_report()
                );
            }
            let state = self
                .systemctl(&["is-system-running"])
                .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
                .unwrap_or_default();
            match state.as_str() {
                "running" => return,
                "degraded" | "maintenance" | "stopping" => {
                    let failed = self
                        .systemctl(&["list-units", "--failed", "--all", "--full"])
                        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
                        .unwrap_or_default();
                    panic!(
                        "the private systemd is {state} after boot:\n{failed}\n{}",
                        self.boot_report()
                    );
                }
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "the private systemd did not reach `running` within 30 s (last: {state:?})\n{}",
                self.boot_report()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Host PID of the namespace's PID 1 (systemd).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The cgroup directory the namespace is rooted at (host view).
    pub fn cgroup(&self) -> &Path {
        &self.cgroup
    }

    /// `nsenter -t PID -m -p PROGRAM ARGS`: `program` run inside the namespace.
    pub fn nsenter(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new(find_tool("nsenter").expect("nsenter"));
        command
            .arg("-t")
            .arg(self.pid.to_string())
            .args(["-m", "-p", "--"])
            .arg(program)
            .env("SYSTEMD_COLORS", "0")
            .env("SYSTEMD_PAGER", "");
        command
    }

    /// `systemctl --no-pager ARGS` inside the namespace, bounded by [`DEADLINE`].
    pub fn systemctl(&self, args: &[&str]) -> Result<Output, String> {
        let mut command = self.nsenter("systemctl");
        command.arg("--no-pager").args(args);
        output_within(command, DEADLINE)
    }

    /// A path inside the namespace's mount namespace, seen from the host
    /// (`/proc/PID/root/PATH`).
    pub fn ns_path(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        PathBuf::from(format!("/proc/{}/root", self.pid))
            .join(path.strip_prefix("/").unwrap_or(path))
    }

    /// Whether host PID `pid` is a live (non-zombie) process of this namespace.
    pub fn alive(&self, pid: u32) -> bool {
        procs::is_alive(pid)
            && fs::read_link(format!("/proc/{pid}/ns/pid"))
                .is_ok_and(|link| link.to_string_lossy() == self.pid_ns)
    }

    /// Host PIDs of every process in the cgroup directory `dir` and below.
    pub fn procs_under(dir: &Path) -> Vec<u32> {
        let mut pids = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(dir) = stack.pop() {
            if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
                pids.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok()),
                );
            }
            if let Ok(entries) = fs::read_dir(&dir) {
                stack.extend(
                    entries
                        .flatten()
                        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|entry| entry.path()),
                );
            }
        }
        pids
    }

    /// The cgroup directory of `unit` (host view; it may not exist).
    pub fn unit_cgroup(&self, unit: &str) -> PathBuf {
        self.cgroup.join("system.slice").join(unit)
    }

    /// Host PIDs of the processes in `unit`'s cgroup.
    pub fn unit_procs(&self, unit: &str) -> Vec<u32> {
        Self::procs_under(&self.unit_cgroup(unit))
    }

    /// Host PIDs of every process of the namespace except systemd's own `init.scope` (and the
    /// `unshare` parent, which sits in the namespace's root cgroup).
    pub fn procs_outside_init(&self) -> Vec<u32> {
        let init = self.cgroup.join("init.scope");
        let mut pids = Vec::new();
        if let Ok(entries) = fs::read_dir(&self.cgroup) {
            for entry in entries.flatten() {
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_dir()) && path != init {
                    pids.extend(Self::procs_under(&path));
                }
            }
        }
        pids
    }

    /// The host PID of namespace PID `ns_pid`, if that process is alive in this namespace.
    pub fn host_pid(&self, ns_pid: u32) -> Option<u32> {
        Self::procs_under(&self.cgroup)
            .into_iter()
            .find(|host| ns_pids(*host).last() == Some(&ns_pid) && self.alive(*host))
    }

    /// The console file and the boot log, for failure messages.
    pub fn report(&self) -> String {
        let read = |path: &Path| fs::read_to_string(path).unwrap_or_default();
        format!(
            "--- boot log ({}) ---\n{}\n--- console ({}) ---\n{}",
            self.boot_log.display(),
            read(&self.boot_log),
            self.console.display(),
            tail(&read(&self.console), 200)
        )
    }

    /// [`PrivateSystemd::report`] plus the services' output files (`rw/*.log`).
    fn boot_report(&self) -> String {
        let mut out = self.report();
        let mut logs: Vec<PathBuf> = fs::read_dir(self.base.join("rw"))
            .map(|entries| entries.flatten().map(|entry| entry.path()).collect())
            .unwrap_or_default();
        logs.sort();
        for log in logs {
            out.push_str(&format!(
                "\n--- {} ---\n{}",
                log.display(),
                tail(&fs::read_to_string(&log).unwrap_or_default(), 40)
            ));
        }
        out
    }

    /// SIGKILLs the namespace's PID 1 (by host PID), reaps `unshare`, and removes the cgroup
    /// directory tree. Errors name what was left behind.
    fn stop(&mut self) -> Result<(), String> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        if self.pid != 0 {
            procs::signal(self.pid, Signal::SIGKILL);
        } else {
            // PID 1 never appeared: unshare's --kill-child takes it down with unshare.
            procs::signal(self.unshare.id(), Signal::SIGKILL);
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            match self.unshare.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    procs::signal(self.unshare.id(), Signal::SIGKILL);
                    let _ = self.unshare.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(POLL_INTERVAL),
            }
        }
        // Every process of the namespace is gone once its cgroup tree is unpopulated.
        let populated = || {
            fs::read_to_string(self.cgroup.join("cgroup.events"))
                .map(|text| text.lines().any(|line| line == "populated 1"))
                .unwrap_or(false)
        };
        let deadline = Instant::now() + DEADLINE;
        while populated() && Instant::now() < deadline {
            std::thread::sleep(POLL_INTERVAL);
        }
        if populated() {
            return Err(format!(
                "processes left in {} after SIGKILL of the namespace: {:?}",
                self.cgroup.display(),
                Self::procs_under(&self.cgroup)
            ));
        }
        remove_cgroup_tree(&self.cgroup)
    }

    /// Stops the namespace ([`PrivateSystemd`] docs) and panics if anything is left.
    pub fn shutdown(mut self) {
        if let Err(err) = self.stop() {
            panic!("{err}");
        }
    }
}

impl Drop for PrivateSystemd {
    fn drop(&mut self) {
        if let Err(err) = self.stop() {
            eprintln!("private systemd cleanup: {err}");
        }
    }
}

/// The `NSpid` line of `/proc/PID/status`: the process's PID in each nested PID namespace,
/// outermost first.
pub fn ns_pids(pid: u32) -> Vec<u32> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Serialises the systemd tests of one test binary: one private systemd at a time keeps a
/// 2-core machine responsive enough for the timing of the checks.
static BOOT_LOCK: Mutex<()> = Mutex::new(());

type ConfigEdit = Box<dyn FnOnce(&mut Value)>;

/// Builds an [`SdStack`].
pub struct SdStackBuilder {
    top: Map<String, Value>,
    fake: Map<String, Value>,
    proxy_edit: Option<ConfigEdit>,
    bin_dir: Option<PathBuf>,
    strata_dir: Option<PathBuf>,
    journal: bool,
}

impl SdStackBuilder {
    /// Boots with journald running (in the namespace only, its journal under the private
    /// `/run/log/journal`) and the services' output going to it, for
    /// [`SdStack::journal_entries`]; [`SdStack::service_log`] is then empty.
    pub fn journal(mut self) -> SdStackBuilder {
        self.journal = true;
        self
    }

    /// Sets a top-level config key (for both daemons).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> SdStackBuilder {
        self.top.insert(key.to_owned(), value.into());
        self
    }

    /// Sets a key of the model's fake profile (`fake` object).
    pub fn fake(mut self, key: &str, value: impl Into<Value>) -> SdStackBuilder {
        self.fake.insert(key.to_owned(), value.into());
        self
    }

    /// Gives the proxy its own config: a copy of the supervisor's, edited by `edit`.
    pub fn proxy_config(mut self, edit: impl FnOnce(&mut Value) + 'static) -> SdStackBuilder {
        self.proxy_edit = Some(Box::new(edit));
        self
    }

    /// Runs the daemons (and `strata-ctl`) from `dir` instead of the build's directory (found
    /// like [`binary`]).
    pub fn binaries_from(mut self, dir: impl Into<PathBuf>) -> SdStackBuilder {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Uses `dir` as the fake Strata instead of [`fake_strata_dir`].
    pub fn strata_dir_from(mut self, dir: impl Into<PathBuf>) -> SdStackBuilder {
        self.strata_dir = Some(dir.into());
        self
    }

    /// Writes everything and boots (holding the binary-wide boot lock until the stack drops).
    pub fn boot(self) -> SdStack {
        let bin_source = match self.bin_dir {
            Some(dir) => dir,
            None => binary("strata-supervisor")
                .parent()
                .expect("the binaries' directory")
                .to_path_buf(),
        };
        for name in ["strata-supervisor", "strata-proxy", "strata-ctl"] {
            assert!(
                bin_source.join(name).is_file(),
                "{name} not found in {}: build the workspace binaries first (cargo test --locked \
                 at the workspace root does)",
                bin_source.display()
            );
        }
        let strata_source = self.strata_dir.unwrap_or_else(fake_strata_dir);
        let guard = BOOT_LOCK
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        sweep_stale(Some(&cgroup_parent()));
        let root = TestRoot::new();
        let bin_dir = root.host_view("bin");
        let units_dir = root.subdir("units", 0o700);
        let profiles = root.subdir("profiles", 0o700);
        let rw = root.subdir("rw", 0o700);
        let digits: String = root.name()[NAME_PREFIX.len()..]
            .chars()
            .map(|c| if c.is_ascii_digit() { c } else { 'n' })
            .collect();
        let names = UnitNames {
            prefix: format!("strata-sd{digits}"),
        };
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
        let backend_port = free_port();
        let fake_log = rw.join("fake.log");
        let control_socket = PathBuf::from(format!("/run/{}/control.sock", names.prefix));
        let state_dir = format!("{}/state", root.name());
        let request_log = Path::new(ROOT_PARENT)
            .join(&state_dir)
            .join("requests.jsonl");

        let mut fake = self.fake;
        fake.insert("log".into(), json!(fake_log));
        let profile = profiles.join(format!("{MODEL}.json"));
        let upstream = format!("up-{MODEL}");
        write_file(
            &profile,
            &serde_json::to_string_pretty(&json!({"model_name": upstream, "fake": fake}))
                .expect("profile json"),
        );
        let mut config = Map::new();
        config.insert("python".into(), json!(python()));
        config.insert("strata_dir".into(), json!(root.host_view("strata")));
        config.insert("listen".into(), json!(listen.to_string()));
        config.insert("backend_port".into(), json!(backend_port));
        config.insert("require_socket_activation".into(), json!(true));
        config.insert("control_socket".into(), json!(control_socket));
        config.insert("wait_when_busy".into(), json!(true));
        config.insert("request_log_path".into(), json!(request_log));
        config.insert("startup_ms".into(), json!(10_000));
        config.insert("cooldown_ms".into(), json!(30_000));
        config.insert("idle_ms".into(), json!(600_000));
        config.insert("shutdown_ms".into(), json!(2_000));
        config.insert("model_grace_ms".into(), json!(0));
        config.insert(
            "models".into(),
            json!({ MODEL: {
                "family": ALIAS,
                "quantization": "q4_k_m",
                "upstream_model": upstream,
                "installed": true,
                "compatible": true,
                "profile": profile,
            }}),
        );
        config.insert(
            "aliases".into(),
            json!({ ALIAS: { "allowed_models": [MODEL] } }),
        );
        config.extend(self.top);
        let config = Value::Object(config);
        let config_path = root.join("config.json");
        write_file(
            &config_path,
            &serde_json::to_string_pretty(&config).expect("config json"),
        );
        let proxy_config_path = match self.proxy_edit {
            Some(edit) => {
                let mut proxy = config.clone();
                edit(&mut proxy);
                let path = root.join("proxy-config.json");
                write_file(
                    &path,
                    &serde_json::to_string_pretty(&proxy).expect("config json"),
                );
                path
            }
            None => config_path.clone(),
        };

        let rewrite = Rewrite {
            names: names.clone(),
            supervisor_config: config_path.clone(),
            proxy_config: proxy_config_path,
            bin_dir: bin_dir.clone(),
            listen,
            state_dir,
            rw_dir: rw.clone(),
            nofile_cap: hard_nofile(),
            strata_log: std::env::var("STRATA_LOG").unwrap_or_else(|_| "info".into()),
            journal: self.journal,
        };
        if self.journal {
            // The boot script leaves journald's units unmasked where this file exists.
            write_file(&root.join("journal"), "");
        }
        for (contrib, copy) in [
            ("strata-supervisor.service", names.supervisor()),
            ("strata-proxy.socket", names.socket()),
            ("strata-proxy.service", names.proxy()),
        ] {
            write_file(
                &units_dir.join(copy),
                &rewrite_unit(contrib, &contrib_unit(contrib), &rewrite),
            );
        }
        // As docs/deployment-systemd.md's production layout: the supervisor and the socket are enabled, the
        // proxy service is started by the socket.
        // A journal test's journald comes first: nothing else pulls it in (sysinit.target,
        // which would, is masked), and a unit's output to the journal only orders after it.
        let journal = if self.journal {
            "systemd-journald.socket systemd-journald.service "
        } else {
            ""
        };
        write_file(
            &units_dir.join("TEST.target"),
            &format!(
                "[Unit]\nDescription=strata-router systemd test\nDefaultDependencies=no\n\
                 Wants={journal}{sup} {sock}\nAfter={journal}{sup} {sock}\n",
                sup = names.supervisor(),
                sock = names.socket()
            ),
        );

        let sd = PrivateSystemd::boot(&root, &[("bin", &bin_source), ("strata", &strata_source)]);
        SdStack {
            names,
            bin_dir,
            listen,
            backend_port,
            control_socket,
            request_log,
            fake_log: FakeLog::new(&fake_log),
            rw,
            learned: Mutex::new(Vec::new()),
            sd: Some(sd),
            root,
            _guard: guard,
        }
    }
}

/// The router under a private systemd: the three unit copies, one config, one fake model
/// ([`MODEL`], alias [`ALIAS`]). See the module docs.
pub struct SdStack {
    pub names: UnitNames,
    /// Where the namespace sees the binaries the units run.
    bin_dir: PathBuf,
    /// The socket unit's `ListenStream` (and the config's `listen`).
    pub listen: SocketAddr,
    pub backend_port: u16,
    /// The control socket's path inside the namespace.
    pub control_socket: PathBuf,
    /// `request_log_path` (in the `StateDirectory`; a host path too).
    pub request_log: PathBuf,
    fake_log: FakeLog,
    rw: PathBuf,
    /// Host PIDs the test learned, checked by [`SdStack::stop_all_and_check`].
    learned: Mutex<Vec<(String, u32)>>,
    /// Declared before `root`: the namespace dies before its directory is removed.
    sd: Option<PrivateSystemd>,
    root: TestRoot,
    _guard: MutexGuard<'static, ()>,
}

impl SdStack {
    /// A builder with the defaults (module docs); the fake profile spawns a grandchild
    /// (`spawn_grandchild`) so the tests see what happens to a backend's descendants.
    pub fn builder() -> SdStackBuilder {
        let mut fake = Map::new();
        fake.insert("spawn_grandchild".into(), json!(true));
        SdStackBuilder {
            top: Map::new(),
            fake,
            proxy_edit: None,
            bin_dir: None,
            strata_dir: None,
            journal: false,
        }
    }

    /// The private systemd.
    pub fn sd(&self) -> &PrivateSystemd {
        self.sd.as_ref().expect("the private systemd")
    }

    /// The per-test directory.
    pub fn root(&self) -> &TestRoot {
        &self.root
    }

    /// `systemctl ARGS` in the namespace; panics (with the logs) unless it exits 0.
    pub fn systemctl(&self, args: &[&str]) -> String {
        let output = self
            .sd()
            .systemctl(args)
            .unwrap_or_else(|err| panic!("systemctl {args:?}: {err}"));
        assert!(
            output.status.success(),
            "systemctl {args:?} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `systemctl ARGS`, whatever its exit status: (status, stdout + stderr).
    pub fn systemctl_status(&self, args: &[&str]) -> (ExitStatus, String) {
        let output = self
            .sd()
            .systemctl(args)
            .unwrap_or_else(|err| panic!("systemctl {args:?}: {err}"));
        (
            output.status,
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    }

    /// One property of `unit` (`systemctl show -P PROP UNIT`).
    pub fn show(&self, unit: &str, property: &str) -> String {
        self.systemctl(&["show", "-P", property, unit])
            .trim()
            .to_owned()
    }

    /// `ActiveState` of `unit`.
    pub fn active_state(&self, unit: &str) -> String {
        self.show(unit, "ActiveState")
    }

    /// `MainPID` of `unit` (namespace PID), `None` for 0.
    pub fn main_pid(&self, unit: &str) -> Option<u32> {
        self.show(unit, "MainPID")
            .parse()
            .ok()
            .filter(|pid| *pid != 0)
    }

    /// Waits until `unit` is `active` with a main PID, and returns (namespace PID, host PID);
    /// the host PID is remembered for [`SdStack::stop_all_and_check`].
    pub fn wait_main(&self, unit: &str) -> (u32, u32) {
        let (ns, host) = poll_for(
            DEADLINE,
            format_args!("{unit} active with a main PID"),
            || {
                if self.active_state(unit) != "active" {
                    return None;
                }
                let ns = self.main_pid(unit)?;
                Some((ns, self.sd().host_pid(ns)?))
            },
        );
        self.learn(unit, host);
        (ns, host)
    }

    /// Like [`SdStack::wait_main`], for a main PID other than `old` (namespace PID).
    pub fn wait_new_main(&self, unit: &str, old: u32) -> (u32, u32) {
        let (ns, host) = poll_for(
            DEADLINE,
            format_args!("{unit} active with a main PID other than {old}"),
            || {
                if self.active_state(unit) != "active" {
                    return None;
                }
                let ns = self.main_pid(unit).filter(|ns| *ns != old)?;
                Some((ns, self.sd().host_pid(ns)?))
            },
        );
        self.learn(unit, host);
        (ns, host)
    }

    /// Remembers host PID `pid` (named `what`) for the final no-process check.
    pub fn learn(&self, what: &str, pid: u32) {
        self.learned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push((what.to_owned(), pid));
    }

    /// Namespace PID → host PID (see [`PrivateSystemd::host_pid`]).
    pub fn host_pid(&self, ns_pid: u32) -> Option<u32> {
        self.sd().host_pid(ns_pid)
    }

    /// Whether host PID `pid` is alive in the namespace.
    pub fn alive(&self, pid: u32) -> bool {
        self.sd().alive(pid)
    }

    /// A client of the supervisor's control socket, reached through `/proc/PID/root`.
    pub fn control(&self) -> ControlClient {
        ControlClient::new(self.sd().ns_path(&self.control_socket))
    }

    /// Bare `status` from the control socket.
    pub fn status(&self) -> Status {
        self.control().status()
    }

    /// The path of binary `name` (`strata-proxy`, ...) inside the namespace: what the units
    /// run.
    pub fn ns_binary(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// `strata-ctl status /run/PREFIX/control.sock` run inside the namespace, as an operator
    /// would.
    pub fn ctl_status(&self) -> Status {
        let mut command = self.sd().nsenter(self.ns_binary("strata-ctl"));
        command.arg("status").arg(&self.control_socket);
        let output = output_within(command, DEADLINE)
            .unwrap_or_else(|err| panic!("strata-ctl status: {err}"));
        assert!(
            output.status.success(),
            "strata-ctl status failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
        );
        let line: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!(
                "strata-ctl status printed no JSON ({err}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        });
        parse_status(&line)
    }

    /// The fake backend's log (its PIDs are namespace PIDs).
    pub fn fake_log(&self) -> &FakeLog {
        &self.fake_log
    }

    /// The host PIDs of every backend, engine and grandchild in the fake log that is alive now.
    pub fn live_backend_processes(&self) -> Vec<u32> {
        let log = self.fake_log();
        let mut ns: Vec<u32> = log.pids();
        ns.extend(log.engine_pids());
        ns.extend(
            log.events_named("grandchild")
                .iter()
                .filter_map(|event| event["child_pid"].as_u64())
                .map(|pid| pid as u32),
        );
        ns.into_iter()
            .filter_map(|pid| self.host_pid(pid))
            .collect()
    }

    /// `unit`'s entries in the private journal (a stack booted with
    /// [`SdStackBuilder::journal`]), one JSON object each (`journalctl -o json`: `MESSAGE`,
    /// `PRIORITY` as a string, ...).
    pub fn journal_entries(&self, unit: &str) -> Vec<Value> {
        let mut command = self.sd().nsenter("journalctl");
        command.args(["--no-pager", "-o", "json", "-u", unit]);
        let output = output_within(command, DEADLINE)
            .unwrap_or_else(|err| panic!("journalctl: {err}\n{}", self.report()));
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    /// The services' output (`StandardOutput=append:` in the unit copies).
    pub fn service_log(&self, unit: &str) -> String {
        let name = unit.trim_end_matches(".service");
        fs::read_to_string(self.rw.join(format!("{name}.log"))).unwrap_or_default()
    }

    /// The proxy's HTTP address.
    pub fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// `GET path` (panics on a connection error).
    pub fn get(&self, path: &str) -> http::Response {
        http::get(self.listen, path)
    }

    /// Everything useful for a failure message: unit states, the services' output, the fake
    /// log, the console.
    pub fn report(&self) -> String {
        let mut out = String::new();
        if let Some(sd) = &self.sd {
            for unit in [
                self.names.supervisor(),
                self.names.socket(),
                self.names.proxy(),
            ] {
                if let Ok(output) = sd.systemctl(&["status", "--full", "--lines=0", &unit]) {
                    out.push_str(&String::from_utf8_lossy(&output.stdout));
                    out.push('\n');
                }
            }
        }
        for unit in [self.names.supervisor(), self.names.proxy()] {
            out.push_str(&format!(
                "--- {unit} output ---\n{}\n",
                tail(&self.service_log(&unit), 40)
            ));
        }
        out.push_str(&tail(&self.fake_log.dump(), 30));
        out.push('\n');
        if let Some(sd) = &self.sd {
            out.push_str(&sd.report());
        }
        out
    }

    /// Check 5: `systemctl stop` of all three units leaves no process: every PID the test
    /// learned (and every process in the units' cgroups just before the stop) is gone, the
    /// units' cgroups are empty, nothing but systemd itself is left in the namespace, the
    /// listener is closed and the runtime directory removed. Then shuts the namespace down.
    pub fn stop_all_and_check(mut self) {
        let units = [
            self.names.socket(),
            self.names.proxy(),
            self.names.supervisor(),
        ];
        for unit in &units {
            for pid in self.sd().unit_procs(unit) {
                self.learn(unit, pid);
            }
        }
        for pid in self.live_backend_processes() {
            self.learn("backend (fake log)", pid);
        }
        let mut args = vec!["stop"];
        args.extend(units.iter().map(String::as_str));
        self.systemctl(&args);
        for unit in &units {
            let state = self.active_state(unit);
            assert!(
                state == "inactive",
                "{unit} is {state:?} after systemctl stop"
            );
        }
        let learned = self
            .learned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let left: Vec<&(String, u32)> =
            learned.iter().filter(|(_, pid)| self.alive(*pid)).collect();
        assert!(
            left.is_empty(),
            "processes left after systemctl stop: {left:?}"
        );
        for unit in &units {
            let procs = self.sd().unit_procs(unit);
            assert!(
                procs.is_empty(),
                "{unit}'s cgroup still has processes {procs:?}"
            );
        }
        // journald (a journal test's) is not one of the units under test; it dies with the
        // namespace.
        let journald = self.sd().unit_procs("systemd-journald.service");
        let mut others = self.sd().procs_outside_init();
        others.retain(|pid| !journald.contains(pid));
        assert!(
            others.is_empty(),
            "processes other than systemd left in the namespace: {others:?} ({:?})",
            others
                .iter()
                .map(|pid| procs::cmdline(*pid))
                .collect::<Vec<_>>(),
        );
        let runtime = self.sd().ns_path(format!("/run/{}", self.names.prefix));
        assert!(
            !runtime.exists(),
            "the RuntimeDirectory {} is still there after stop",
            runtime.display()
        );
        let refused = matches!(
            http::try_request(self.listen, "GET", "/health", &[], b""),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused
        );
        assert!(refused, "{} still accepts after stop", self.listen);
        let sd = self.sd.take().expect("the private systemd");
        sd.shutdown();
    }
}

impl Drop for SdStack {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.report());
        }
    }
}

//! The parent-death hook every child a strata-router process spawns gets (the supervisor's
//! backend, `strata-ctl daemon`'s two daemons), so that no child outlives the process that owns
//! it.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::signal::Signal;
use nix::unistd::{getpid, getppid};

/// Makes the child `command` spawns receive `signal` when its parent dies, and exit at once
/// instead if the parent is already gone by the time the hook runs (it died between `fork` and
/// `prctl`, so the signal would never come and the child would run unowned).
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process:
/// spawn from a thread that lives as long as the child should (the supervisor spawns its
/// backend on its main thread).
pub fn die_with_parent(command: &mut Command, signal: Signal) {
    let parent = getpid();
    let hook = move || -> io::Result<()> {
        nix::sys::prctl::set_pdeathsig(signal)?;
        if getppid() != parent {
            // SAFETY: `_exit` is async-signal-safe and ends this forked child immediately,
            // without running atexit handlers or destructors that belong to the parent's state.
            unsafe { nix::libc::_exit(1) };
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
    // operations are allowed (the parent may have been multi-threaded, so locks and the
    // allocator can be in any state). It calls only prctl(2), getppid(2) and _exit(2), which are
    // raw syscalls; it allocates nothing (an error becomes `io::Error::from_raw_os_error`, no
    // heap) and captures only a `Pid` and a `Signal` copied before the fork.
    unsafe {
        command.pre_exec(hook);
    }
}

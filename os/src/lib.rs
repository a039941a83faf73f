//! Process setup done one way for every strata-router process.
//!
//! - `daemon_main.rs`: [`Daemon`], a daemon's start around its library `run`: the command line
//!   (`PROGRAM CONFIG`), the exit status for a bad config ([`EXIT_CONFIG`]), logging, the
//!   open-file limit, the [`current_thread_runtime`], the shutdown-signal counter and the
//!   SIGHUP notice.
//! - `log_output.rs`: the daemons' log output, on stderr, with journald priorities under
//!   systemd.
//! - `open_files.rs`: [`raise_open_file_limit`], done at each daemon's start.
//! - `child.rs`: [`die_with_parent`], the parent-death hook every spawned child gets.
//! - `memory.rs`: [`release_free_memory`], the heap handed back after a burst.
//! - `dir_watch.rs`: [`DirWatch`], inotify made async.
//! - `page_cache.rs`: [`page_cache`], a file's residency (`mincore`), read-ahead and eviction
//!   hints, and the background thread priority, for the weights prefetch.
//! - `help_text.rs`: [`help_lists_flag`], whether a program's `--help` lists a flag (the
//!   readiness contract a Strata supports).
//! - `warn_limit.rs`: [`WarnLimit`], the first warning of a kind at once, then one counted
//!   line per interval.
//! - `local_time.rs`: [`local_clock_time`], the local time of day (`HH:MM:SS`) for operator
//!   views.
//! - `process_usage.rs`: [`own_process_usage`], this process's CPU time, memory, descriptors
//!   and start time (`/proc/self`), behind the `process_*` metrics of both daemons.
//!
//! Nothing here knows what the processes say to each other (that is `strata-protocol`'s): this
//! crate depends on no workspace crate.
//!
//! `unsafe` is denied in the crate and allowed in exactly five modules, below, each holding
//! audited uses with their `SAFETY` comments and nothing else that needs `unsafe`. The other
//! crates (`protocol`, the daemons, `strata-ctl`) forbid `unsafe` outright.
#![deny(unsafe_code)]

// `die_with_parent`: the `pre_exec` hook, and the `_exit` it calls in the forked child.
#[allow(unsafe_code)]
mod child;
// `DirWatch::new`: registering the inotify descriptor with tokio (`AsyncFd`).
#[allow(unsafe_code)]
mod dir_watch;
// `local_clock_time`: the C library's `localtime_r`.
#[allow(unsafe_code)]
mod local_time;
// `release_free_memory`: glibc's `malloc_trim`.
#[allow(unsafe_code)]
mod memory;
// The `mmap`/`mincore`/`munmap` of a residency check, `sysconf` for the page size, and the
// `ioprio_set` and `setpriority` of a background thread.
#[allow(unsafe_code)]
pub mod page_cache;

mod daemon_main;
mod help_text;
mod log_output;
mod open_files;
mod process_usage;
mod warn_limit;

pub use child::die_with_parent;
pub use daemon_main::{Daemon, EXIT_CONFIG, current_thread_runtime};
pub use dir_watch::DirWatch;
pub use help_text::help_lists_flag;
pub use local_time::{ClockTime, local_clock_time};
pub use memory::release_free_memory;
pub use open_files::raise_open_file_limit;
pub use process_usage::{ProcessUsage, own_process_usage};
pub use warn_limit::WarnLimit;

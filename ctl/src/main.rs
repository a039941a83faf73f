//! `strata-ctl`: operator commands for strata-router, and a development
//! launcher.
//!
//! `main` only parses the command line and dispatches. Each subcommand
//! lives in its own module with its own clap `Args` and a
//! `run(Args) -> ExitCode`, so commands can be built and changed
//! independently; `control` is the control-socket client shared by
//! `status`, `on` and `off`.
//!
//! No `unsafe`: the children's parent-death hook is
//! `strata_os::die_with_parent`.
#![forbid(unsafe_code)]

/// `eprintln!` that never panics: a closed or hung-up terminal must not
/// abort a stop sequence or a clean-up (nor, for `on`/`off`, cancel the
/// operation by killing the client).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `println!` that never panics (a closed stdout, `| head`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, $($arg)*);
        let _ = stdout.flush();
    }};
}

mod check_config;
mod control;
mod daemon;
mod demo;
mod fake_files;
mod off;
mod on;
mod requests;
mod simulate;
mod status;
mod top;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Operator commands for strata-router.
#[derive(Parser)]
#[command(name = "strata-ctl", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a config file and its profiles, then print a summary
    CheckConfig(check_config::Args),
    /// Print the supervisor's status as one JSON line
    Status(status::Args),
    /// Disable routing and unload the model
    Off(off::Args),
    /// Enable routing and load a model
    On(on::Args),
    /// Run strata-supervisor and strata-proxy together (development)
    Daemon(daemon::Args),
    /// Run the whole stack against the bundled fake backend
    Demo(demo::Args),
    /// Read per-request accounting records from a running proxy
    Requests(requests::Args),
    /// A live view of a running router (proxy URL or control socket)
    Top(top::Args),
    /// Run a workload or the router's own records under the scheduling
    /// policies, on a virtual clock
    Simulate(simulate::Args),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::CheckConfig(args) => check_config::run(args),
        Command::Status(args) => status::run(args),
        Command::Off(args) => off::run(args),
        Command::On(args) => on::run(args),
        Command::Daemon(args) => daemon::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Requests(args) => requests::run(args),
        Command::Top(args) => top::run(args),
        Command::Simulate(args) => simulate::run(args),
    }
}

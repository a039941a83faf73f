//! The operator commands for strata-router, and a development launcher,
//! installed under two names: `strata-router` (the spec's name:
//! `strata-router daemon CONFIG`, `strata-router status SOCKET`, ...) and
//! `strata-ctl`. Both binaries (`src/bin/`) only call [`run`] with their
//! own name, so every subcommand, output and exit status is the same under
//! either; the name only appears where a program names itself (usage lines,
//! `--help`, `--version`, the `NAME: ` in front of its own messages, the
//! commands `demo` prints).
//!
//! [`run`] only parses the command line and dispatches. Each subcommand
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

/// [`say!`] with this program's name in front (`strata-router: MESSAGE`),
/// the form of every message about its own work.
macro_rules! note {
    ($($arg:tt)*) => {
        say!("{}: {}", $crate::program(), format_args!($($arg)*))
    };
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
mod strata_limits;
mod top;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::process::ExitCode;
use std::sync::OnceLock;

/// The name [`run`] was given (its binary's name).
static PROGRAM: OnceLock<&'static str> = OnceLock::new();

/// This program's name, as its binary passed it to [`run`] (`strata-ctl`
/// before that, e.g. in unit tests).
pub(crate) fn program() -> &'static str {
    PROGRAM.get().copied().unwrap_or("strata-ctl")
}

/// Operator commands for strata-router.
#[derive(Parser)]
#[command(version, about)]
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

/// The whole program under the name `program` (`strata-router` or
/// `strata-ctl`): parses the command line and runs the subcommand. Clap
/// prints `--help`, `--version` and usage errors itself (exit 0 or 2) under
/// that name rather than under the file name in `argv[0]`, so a copy or
/// link with another file name still says what it is.
pub fn run(program: &'static str) -> ExitCode {
    let _ = PROGRAM.set(program);
    let matches = Cli::command().name(program).bin_name(program).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    match cli.command {
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

//! `strata-ctl requests URL [--after N] [--follow]`: read accounting
//! records from a proxy's `GET /requests`.
//!
//! Not implemented yet: it prints so and exits 2.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// Base URL of the proxy, e.g. http://127.0.0.1:8088
    pub url: String,
    /// Exclusive cursor: only records with a greater sequence
    #[arg(long)]
    pub after: Option<u64>,
    /// Keep polling for new records
    #[arg(long)]
    pub follow: bool,
}

pub fn run(args: Args) -> ExitCode {
    let Args {
        url: _,
        after: _,
        follow: _,
    } = args;
    eprintln!("strata-ctl: requests is not implemented yet");
    ExitCode::from(2)
}

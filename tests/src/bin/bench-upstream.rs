//! `bench-upstream`: the benchmark's fast fake Strata backend (see
//! [`strata_e2e::bench::upstream`]). It takes the supervisor's backend argv, so a config's
//! `python` can name this binary, and also runs on its own port as the benchmark's "direct"
//! upstream. Exit 2 for a bad command line, 1 for any other start failure.

use std::process::ExitCode;

use strata_e2e::bench::upstream;

fn main() -> ExitCode {
    let args = match upstream::parse_args(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(err) => {
            eprintln!("bench-upstream: {err}");
            return ExitCode::from(2);
        }
    };
    match upstream::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("bench-upstream: {err}");
            ExitCode::from(1)
        }
    }
}

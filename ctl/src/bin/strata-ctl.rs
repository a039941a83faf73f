//! `strata-ctl`: the operator commands under this project's original name,
//! exactly the same program as `strata-router`.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    strata_ctl::run("strata-ctl")
}

//! `strata-router`: the operator commands under the spec's name
//! (`strata-router daemon CONFIG`, `strata-router status|on|off SOCKET`),
//! exactly the same program as `strata-ctl`.
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    strata_ctl::run("strata-router")
}

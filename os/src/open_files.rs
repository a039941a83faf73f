//! The open-file limit every daemon raises at start.
//!
//! Every client connection costs the proxy a descriptor (and one more while its request is
//! forwarded upstream), and wait-first mode invites thousands of idle waiting clients. The
//! usual soft limit of 1024 would make `accept` fail long before the machine is busy, while the
//! hard limit is the ceiling the operator chose (systemd's `LimitNOFILE=` in the units). So
//! each daemon raises its soft limit to the hard limit at start, in its synchronous `main`
//! before the runtime exists, and logs the limit it runs with.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and logs the soft limit in force at info
/// (`open file limit: N`). A failure is logged at warn and is never fatal: the daemon runs
/// with the limit it has. Call it once tracing is set up.
pub fn raise_open_file_limit() {
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(errno) => {
            tracing::warn!(error = %errno, "cannot read the open file limit");
            return;
        }
    };
    let soft = if soft < hard {
        match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(errno) => {
                tracing::warn!(
                    error = %errno,
                    soft,
                    hard,
                    "cannot raise the open file limit to the hard limit"
                );
                soft
            }
        }
    } else {
        soft
    };
    tracing::info!("open file limit: {soft}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_limit() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        // Below the hard limit, but far above what the other tests of this process open.
        let lowered = hard.saturating_sub(1).max(1);
        setrlimit(Resource::RLIMIT_NOFILE, lowered, hard).unwrap();
        raise_open_file_limit();
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
        // Idempotent at the hard limit.
        raise_open_file_limit();
        assert_eq!(getrlimit(Resource::RLIMIT_NOFILE).unwrap(), (hard, hard));
    }
}

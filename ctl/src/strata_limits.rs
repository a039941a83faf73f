//! Where a valid config asks for more than Strata itself allows by default:
//! `check-config`'s operator warnings. They never fail the check (the
//! daemons accept these configs, and an operator may have raised Strata's
//! own limits); they say what would go wrong and what to change.
//!
//! Strata's limits, from its `serve/server.py` (research/strata-server.md):
//! - the engine must print `READY` within `STRATA_ENGINE_READY_S` seconds,
//!   900 by default, before Strata binds HTTP;
//! - a request body over `STRATA_MAX_BODY_MIB` MiB, 256 by default, gets 413
//!   before it is read;
//! - one generation runs at a time; a stream queued behind it inside Strata
//!   gets its headers and role frame, then no byte until it starts (so
//!   `stream_idle_ms` would cut it).

use std::time::Duration;

use strata_protocol::config::Config;

/// Strata's default engine-ready limit (`STRATA_ENGINE_READY_S`). The
/// threshold for `startup_ms` is Strata's own bound rather than a guess at
/// model sizes: Strata's authors allow a load this long, and a shorter
/// `startup_ms` makes the supervisor give up on a start that Strata would
/// still finish.
pub const ENGINE_READY_LIMIT: Duration = Duration::from_secs(900);

/// Strata's default body limit (`STRATA_MAX_BODY_MIB`, 256 MiB).
pub const BODY_LIMIT_BYTES: u64 = 256 << 20;

const MIB: u64 = 1 << 20;

/// The warnings for `config`, each one line without the `warning: ` prefix.
pub fn warnings(config: &Config) -> Vec<String> {
    let mut warnings = Vec::new();
    let startup_ms = config.timers.startup_ms;
    let ready_ms = ENGINE_READY_LIMIT.as_millis() as u64;
    if startup_ms < ready_ms {
        warnings.push(format!(
            "startup_ms {startup_ms} is below the {ready_ms} ms Strata itself allows a model to \
             load (STRATA_ENGINE_READY_S, {} s by default): a large model read from a cold disk \
             can take longer, and the supervisor would stop that start as failed and cool the \
             model down; raise startup_ms to {ready_ms} unless every model loads well within \
             {} s",
            ENGINE_READY_LIMIT.as_secs(),
            startup_ms / 1000
        ));
    }
    let body = config.max_request_body_bytes;
    if body > BODY_LIMIT_BYTES {
        warnings.push(format!(
            "max_request_body_bytes {body} exceeds Strata's default body limit of \
             {BODY_LIMIT_BYTES} bytes ({} MiB): Strata answers 413 to a larger body, after the \
             router has queued it and loaded its model; set STRATA_MAX_BODY_MIB={} in the \
             supervisor's environment (Strata inherits it), or lower max_request_body_bytes",
            BODY_LIMIT_BYTES / MIB,
            body.div_ceil(MIB)
        ));
    }
    let idle_ms = config.timers.stream_idle_ms;
    let scheduling = &config.scheduling;
    if idle_ms > 0 && scheduling.max_pending > 1 && scheduling.cache_max_active != 1 {
        warnings.push(format!(
            "stream_idle_ms {idle_ms} with max_pending {} and no cache_max_active: 1: up to {} \
             requests can be inside Strata at once, and Strata runs one generation at a time and \
             sends a request queued behind another nothing past its role frame, so a healthy \
             queued stream is cut as a timeout after {} s; set cache_max_active: 1 (requests \
             then wait in the router, which keeps them alive) or stream_idle_ms: 0",
            scheduling.max_pending,
            scheduling.max_pending,
            idle_ms / 1000
        ));
    }
    warnings
}

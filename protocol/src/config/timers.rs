//! Scheduling mode, concurrency limits and timers (all top-level keys,
//! durations in milliseconds).
//!
//! Two modes exist. Legacy bounded scheduling (`wait_when_busy: false`,
//! the default) bounds every wait, so its durations must be positive.
//! Wait-first scheduling (`wait_when_busy: true`) lets requests wait
//! without a queue deadline: `queue_ms` is then ignored (any non-negative
//! integer is accepted so one file can switch modes) and `response_ms: 0`
//! disables the response deadline.

use super::ConfigError;
use super::json_walk::Obj;

/// The upper bound for durations the spec gives no maximum for: one day.
/// Larger values are almost certainly a unit mistake (seconds vs ms).
pub const MAX_DURATION_MS: u64 = 86_400_000;

pub const DEFAULT_MAX_PENDING: u64 = 16;
pub const MAX_MAX_PENDING: u64 = 100_000;
pub const DEFAULT_QUEUE_MS: u64 = 300_000;
pub const DEFAULT_RESPONSE_MS: u64 = 600_000;
pub const DEFAULT_STARTUP_MS: u64 = 120_000;
pub const DEFAULT_COOLDOWN_MS: u64 = 30_000;
pub const DEFAULT_IDLE_MS: u64 = 900_000;
pub const DEFAULT_SHUTDOWN_MS: u64 = 10_000;
pub const DEFAULT_MODEL_GRACE_MS: u64 = 2_000;
pub const MAX_MODEL_GRACE_MS: u64 = 600_000;
pub const DEFAULT_CACHE_LOOKUP_MS: u64 = 1_000;
pub const MAX_CACHE_LOOKUP_MS: u64 = 10_000;
pub const DEFAULT_CACHE_MAX_ACTIVE: u64 = 0;
pub const MAX_CACHE_MAX_ACTIVE: u64 = 1_024;

/// How requests are admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scheduling {
    /// `wait_when_busy`: true selects wait-first scheduling.
    pub wait_when_busy: bool,
    /// `max_pending`: in legacy mode, active plus waiting requests (excess
    /// gets 429); in wait-first mode, dispatched upstream requests only.
    pub max_pending: usize,
    /// `cache_max_active`: at most this many generations dispatched at
    /// once so the cache lookup finds the engine idle; 0 = no extra limit.
    pub cache_max_active: usize,
}

/// Durations in milliseconds, each with the meaning the spec gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timers {
    /// `queue_ms`: legacy mode's bound on waiting for the model lease.
    /// Ignored in wait-first mode.
    pub queue_ms: u64,
    /// `response_ms`: bound on headers plus the whole stream after
    /// admission; 0 (wait-first only) disables it.
    pub response_ms: u64,
    /// `startup_ms`: bound on readiness after spawning.
    pub startup_ms: u64,
    /// `cooldown_ms`: after a failed start, requests get 503 this long.
    pub cooldown_ms: u64,
    /// `cooldown_max_ms`: consecutive failed starts of one model double its
    /// cooldown from `cooldown_ms` up to this; equal to `cooldown_ms` (the
    /// default) keeps the spec's fixed cooldown.
    pub cooldown_max_ms: u64,
    /// `idle_ms`: unload after this long without requests.
    pub idle_ms: u64,
    /// `shutdown_ms`: SIGTERM to SIGKILL for the backend process group.
    pub shutdown_ms: u64,
    /// `drain_ms`, resolved: 0 waits for all accepted work, positive bounds
    /// the wait. When omitted: `shutdown_ms` in legacy mode, 0 in
    /// wait-first mode.
    pub drain_ms: u64,
    /// Whether `drain_ms` was set in the file.
    pub drain_ms_explicit: bool,
    /// `model_grace_ms`: how long the loaded model stays selected after its
    /// last request; 0 disables the preference.
    pub model_grace_ms: u64,
    /// `model_hold_max_ms` (wait-first): once another model's request has
    /// waited this long (from the later of its arrival and the loaded
    /// model's readiness), the loaded model gets no new grants; 0 is off.
    pub model_hold_max_ms: u64,
    /// `cache_lookup_ms`: bound on one complete cache lookup; 0 disables
    /// lookups.
    pub cache_lookup_ms: u64,
    /// `stream_idle_ms`: a leased streaming response that receives no byte
    /// from the backend for this long ends with `reason: "timeout"`; 0 (the
    /// default) is off.
    pub stream_idle_ms: u64,
}

/// Reads the scheduling and timer keys from the top-level object.
pub(crate) fn parse(root: &Obj<'_>) -> Result<(Scheduling, Timers), ConfigError> {
    let wait_first = root.bool_or("wait_when_busy", false)?;
    let duration =
        |key: &str, min: u64, default: u64| root.u64_or(key, min..=MAX_DURATION_MS, default);
    // Positive in legacy mode; in wait-first mode queue_ms is ignored and
    // response_ms may be 0.
    let (queue_range, response_min) = if wait_first {
        (0..=u64::MAX, 0)
    } else {
        (1..=MAX_DURATION_MS, 1)
    };
    let shutdown_ms = duration("shutdown_ms", 1, DEFAULT_SHUTDOWN_MS)?;
    let cooldown_ms = duration("cooldown_ms", 0, DEFAULT_COOLDOWN_MS)?;
    let cooldown_max_ms = match root.opt_u64_in("cooldown_max_ms", 0..=MAX_DURATION_MS)? {
        None => cooldown_ms,
        Some(max) if max < cooldown_ms => {
            return Err(root.path().field("cooldown_max_ms").error(format!(
                "must be at least cooldown_ms ({cooldown_ms}), got {max}"
            )));
        }
        Some(max) => max,
    };
    let drain = root.opt_u64_in("drain_ms", 0..=MAX_DURATION_MS)?;
    let timers = Timers {
        queue_ms: root.u64_or("queue_ms", queue_range, DEFAULT_QUEUE_MS)?,
        response_ms: duration("response_ms", response_min, DEFAULT_RESPONSE_MS)?,
        startup_ms: duration("startup_ms", 1, DEFAULT_STARTUP_MS)?,
        cooldown_ms,
        cooldown_max_ms,
        idle_ms: duration("idle_ms", 1, DEFAULT_IDLE_MS)?,
        shutdown_ms,
        drain_ms: drain.unwrap_or(if wait_first { 0 } else { shutdown_ms }),
        drain_ms_explicit: drain.is_some(),
        model_grace_ms: root.u64_or(
            "model_grace_ms",
            0..=MAX_MODEL_GRACE_MS,
            DEFAULT_MODEL_GRACE_MS,
        )?,
        model_hold_max_ms: duration("model_hold_max_ms", 0, 0)?,
        cache_lookup_ms: root.u64_or(
            "cache_lookup_ms",
            0..=MAX_CACHE_LOOKUP_MS,
            DEFAULT_CACHE_LOOKUP_MS,
        )?,
        stream_idle_ms: duration("stream_idle_ms", 0, 0)?,
    };
    let count = |key: &str, range, default| -> Result<usize, ConfigError> {
        // The ranges are far below usize::MAX on every supported target.
        Ok(root.u64_or(key, range, default)? as usize)
    };
    let scheduling = Scheduling {
        wait_when_busy: wait_first,
        max_pending: count("max_pending", 1..=MAX_MAX_PENDING, DEFAULT_MAX_PENDING)?,
        cache_max_active: count(
            "cache_max_active",
            0..=MAX_CACHE_MAX_ACTIVE,
            DEFAULT_CACHE_MAX_ACTIVE,
        )?,
    };
    Ok((scheduling, timers))
}

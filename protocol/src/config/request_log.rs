//! Per-request accounting settings: the `request_log_*` top-level keys.
//! The memory ring always exists; the JSONL file is opt-in.

use super::ConfigError;
use super::json_walk::Obj;
use std::path::PathBuf;

pub const DEFAULT_REQUEST_LOG_MAX_BYTES: u64 = 16 * 1024 * 1024;
pub const MIN_REQUEST_LOG_MAX_BYTES: u64 = 4096;
pub const MAX_REQUEST_LOG_MAX_BYTES: u64 = 1_073_741_824;
pub const DEFAULT_REQUEST_LOG_ROTATE_FILES: u64 = 3;
pub const MAX_REQUEST_LOG_ROTATE_FILES: u64 = 100;
pub const DEFAULT_REQUEST_LOG_CAPACITY: u64 = 2048;
pub const MAX_REQUEST_LOG_CAPACITY: u64 = 100_000;

/// Where and how much accounting is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestLogConfig {
    /// `request_log_path`: the active JSONL file; `None` disables files.
    pub path: Option<PathBuf>,
    /// `request_log_max_bytes`: rotate before a line would exceed this.
    pub max_bytes: u64,
    /// `request_log_rotate_files`: number of backups (`.1`, `.2`, ...).
    pub rotate_files: u32,
    /// `request_log_capacity`: records kept in the memory ring.
    pub capacity: usize,
}

pub(crate) fn parse(root: &Obj<'_>) -> Result<RequestLogConfig, ConfigError> {
    Ok(RequestLogConfig {
        path: root.opt_abs_path("request_log_path")?,
        max_bytes: root.u64_or(
            "request_log_max_bytes",
            MIN_REQUEST_LOG_MAX_BYTES..=MAX_REQUEST_LOG_MAX_BYTES,
            DEFAULT_REQUEST_LOG_MAX_BYTES,
        )?,
        // Both ranges fit the narrower types; the casts cannot truncate.
        rotate_files: root.u64_or(
            "request_log_rotate_files",
            0..=MAX_REQUEST_LOG_ROTATE_FILES,
            DEFAULT_REQUEST_LOG_ROTATE_FILES,
        )? as u32,
        capacity: root.u64_or(
            "request_log_capacity",
            1..=MAX_REQUEST_LOG_CAPACITY,
            DEFAULT_REQUEST_LOG_CAPACITY,
        )? as usize,
    })
}

//! The one error type config loading returns.
//!
//! Both daemons and `strata-ctl check-config` print it the same way, so an
//! operator sees the same line whichever program rejected the file.

use std::fmt;

/// A config the daemons must refuse, with the JSON path of the offending
/// value and the rule it broke.
///
/// Displayed as `PATH: MESSAGE`, for example
/// `models["x"].profile: must be an absolute path`. Whole-document problems
/// (unreadable file, invalid JSON, not an object) use the path `$`. Messages
/// are lowercase, have no trailing period and never quote profile contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// JSON path such as `aliases["qwen3.6-35b-a3b"].allowed_models[2]`,
    /// or `$` for the whole document.
    pub path: String,
    /// What is wrong, e.g. `required key is missing`.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for ConfigError {}

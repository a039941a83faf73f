//! The config file: JSON, read once at start by both daemons, validated
//! into an immutable [`Config`].
//!
//! The file is parsed into a [`serde_json::Value`] (duplicate keys refused)
//! and walked by hand, so every error is a [`ConfigError`] naming the JSON
//! path and the rule: `backend_port: required key is missing`,
//! `lsiten: unknown key`, `models["x"].profile: must be an absolute path`.
//! Unknown keys are errors everywhere, so a typo cannot silently change
//! behaviour. Any error rejects the whole file; the daemons exit before
//! binding or spawning anything.
//!
//! Profiles are checked separately ([`Config::check_profiles`], called by
//! [`Config::load`]): a bad profile makes its model `missing_profile` or
//! `invalid_profile` but does not reject the config.
//!
//! # Keys
//!
//! Every top-level and model-entry key is declared once, with its form,
//! default, bounds, scope and fingerprint status, in [`keys::KEYS`]; the
//! configuration reference (`docs/configuration.md`) renders its tables
//! from there ([`keys_markdown`]), and the [`keys`] module says what else is
//! checked against it and how to add a key.
//!
//! Integers must be JSON integers (not floats or strings). Durations are
//! milliseconds. "Legacy" is `wait_when_busy: false`, "wait-first" is
//! `wait_when_busy: true`. The one-day cap on durations the spec leaves
//! open catches unit mistakes.
//!
//! Model IDs (`models.ID`) are 1 to 128 ASCII letters, digits, `_`, `.`,
//! `-`, and may not be an alias name.
//!
//! # Aliases (`aliases.FAMILY`)
//!
//! Exactly one key, `allowed_models`: a non-empty array of concrete IDs of
//! the alias' own family, without duplicates. Its effective list is that
//! array filtered through `enabled_models`; an empty effective list hides
//! the alias.
//!
//! # Profiles
//!
//! Checked only for installed and compatible models. A profile is invalid
//! if it cannot be read, is not a JSON object, sets `lazy_load: true`, a
//! non-empty `before_load`, any non-null `api_key` (even `""`), or a
//! `model_name` other than `upstream_model` (an absent `model_name` means
//! Strata's default, `qwen3.8-flash-next`). `conversation_cache_min_tokens`
//! (non-negative integer) and `router_metadata` (object) are read when
//! present, and `args` for the weights a model without `weights` reads
//! (the value of its one `--native` or `--pack`, see
//! [`profile::EngineWeights`]); other keys are Strata's business and
//! ignored.

mod alias;
mod endpoints;
mod error;
mod fingerprint;
mod json_walk;
pub mod keys;
mod keys_doc;
#[cfg(test)]
mod keys_tests;
mod metadata;
mod model;
mod prefetch;
mod probe;
mod profile;
mod readiness;
mod registry;
mod request_log;
mod strict_json;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod timers;

pub use alias::Alias;
pub use endpoints::{DEFAULT_LISTEN, DEFAULT_SUPERVISOR_SOCKET_NAME};
pub use error::ConfigError;
pub use keys::TOP_LEVEL_KEYS;
pub use keys_doc::keys_markdown;
pub use metadata::ModelMetadata;
pub use model::{
    Family, MAX_MODEL_ID_LEN, ModelEntry, ModelStatus, WeightsSource, is_valid_model_id,
};
pub use prefetch::*;
pub use probe::*;
pub use profile::{EngineWeights, MAX_PROFILE_BYTES, ProfileInfo, STRATA_DEFAULT_MODEL_NAME};
pub use readiness::{Readiness, ReadinessBasis, ReadinessChoice, ReadinessMode, ReadinessReport};
pub use registry::{Registry, Resolution};
pub use request_log::*;
pub use timers::*;

use json_walk::{JsonPath, Obj};
use profile::ProfileCheck;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_MAX_REQUEST_BODY_BYTES: u64 = 268_435_456;
pub const MAX_MAX_REQUEST_BODY_BYTES: u64 = 1_073_741_824;

/// A validated config. [`keys::KEYS`] declares every key.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Interpreter that runs `-m serve.server`.
    pub python: PathBuf,
    /// The backend's working directory.
    pub strata_dir: PathBuf,
    /// HTTP listener; always a loopback address.
    pub listen: SocketAddr,
    /// Loopback port the Strata child serves on.
    pub backend_port: u16,
    /// Operator control socket.
    pub control_socket: PathBuf,
    /// Private proxy-supervisor socket.
    pub supervisor_socket: PathBuf,
    /// Inference JSON body limit.
    pub max_request_body_bytes: u64,
    /// Refuse to start without a systemd-activated listener.
    pub require_socket_activation: bool,
    /// How a started backend is recognised as ready.
    pub readiness: Readiness,
    pub request_log: RequestLogConfig,
    pub scheduling: Scheduling,
    pub timers: Timers,
    /// The weights prefetch's switch and bounds (the supervisor's alone).
    pub prefetch: PrefetchConfig,
    /// Watching the serving backend (the supervisor's alone).
    pub probe: ProbeConfig,
    pub registry: Registry,
    /// Accepted but discouraged spellings, as `PATH: MESSAGE` lines for the
    /// daemons to log and `check-config` to print.
    pub warnings: Vec<String>,
}

impl Config {
    /// Reads the file, validates it and checks every profile. This is what
    /// the daemons and `strata-ctl check-config` call.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            let reason = match err.kind() {
                std::io::ErrorKind::NotFound => "no such file".to_owned(),
                std::io::ErrorKind::InvalidData => "not valid utf-8".to_owned(),
                kind => kind.to_string(),
            };
            JsonPath::root().error(format!(
                "cannot read config file {}: {reason}",
                path.display()
            ))
        })?;
        let mut config = Config::from_json_str(&text)?;
        config.check_profiles();
        Ok(config)
    }

    /// Parses and validates config text without touching the filesystem.
    ///
    /// Model statuses that need no profile I/O (not_installed,
    /// incompatible, missing_profile for a null profile) are final;
    /// installed and compatible models with a profile path are
    /// provisionally prepared_unverified until [`Config::check_profiles`].
    pub fn from_json_str(text: &str) -> Result<Config, ConfigError> {
        let document = strict_json::parse(text)
            .map_err(|err| JsonPath::root().error(format!("invalid json: {err}")))?;
        let root = Obj::new(&document, JsonPath::root())
            .map_err(|_| JsonPath::root().error("expected a json object at the top level"))?
            .with_schema(&TOP_LEVEL_KEYS)?;

        let python = root.abs_path("python")?;
        let strata_dir = root.abs_path("strata_dir")?;
        let endpoints = endpoints::parse(&root)?;
        let max_request_body_bytes = root.u64_or(
            "max_request_body_bytes",
            1..=MAX_MAX_REQUEST_BODY_BYTES,
            DEFAULT_MAX_REQUEST_BODY_BYTES,
        )?;
        let require_socket_activation = root.bool_or("require_socket_activation", false)?;
        let readiness = Readiness::parse(&root)?;
        let request_log = request_log::parse(&root)?;
        let (scheduling, timers) = timers::parse(&root)?;
        let prefetch = prefetch::parse(&root)?;
        let probe = probe::parse(&root)?;
        let mut warnings = Vec::new();
        let registry = Registry::parse(&root, endpoints.backend_port, &mut warnings)?;

        Ok(Config {
            python,
            strata_dir,
            listen: endpoints.listen,
            backend_port: endpoints.backend_port,
            control_socket: endpoints.control_socket,
            supervisor_socket: endpoints.supervisor_socket,
            max_request_body_bytes,
            require_socket_activation,
            readiness,
            request_log,
            scheduling,
            timers,
            prefetch,
            probe,
            registry,
            warnings,
        })
    }

    /// Reads each installed and compatible model's profile and sets its
    /// status, detail and profile info. Never fails: a bad profile affects
    /// only its own model. Calling it again re-reads the files.
    pub fn check_profiles(&mut self) {
        for entry in &mut self.registry.models {
            let (status, detail) = entry.static_status();
            entry.prepared = status;
            entry.prepared_detail = detail;
            entry.profile_info = None;
            if status != ModelStatus::PreparedUnverified {
                continue;
            }
            let Some(path) = &entry.profile else {
                continue;
            };
            match profile::check_profile(path, &entry.upstream_model, &self.strata_dir) {
                ProfileCheck::Missing(reason) => {
                    entry.prepared = ModelStatus::MissingProfile;
                    entry.prepared_detail = Some(reason);
                }
                ProfileCheck::Invalid(reason) => {
                    entry.prepared = ModelStatus::InvalidProfile;
                    entry.prepared_detail = Some(reason);
                }
                ProfileCheck::Valid(info) => entry.profile_info = Some(*info),
            }
        }
    }

    /// The largest frame the supervisor accepts from a proxy of this
    /// config ([`crate::wire::proxy_frame_limit`]).
    pub fn proxy_frame_limit(&self) -> u32 {
        let longest = self
            .registry
            .models()
            .iter()
            .map(|model| model.upstream_model.len())
            .max()
            .unwrap_or(0);
        crate::wire::proxy_frame_limit(longest)
    }

    /// Legacy mode's queue deadline; `None` in wait-first mode, where
    /// `queue_ms` is ignored.
    pub fn queue_timeout(&self) -> Option<Duration> {
        (!self.scheduling.wait_when_busy).then(|| Duration::from_millis(self.timers.queue_ms))
    }

    /// The response deadline after admission; `None` when `response_ms`
    /// is 0 (wait-first mode only).
    pub fn response_timeout(&self) -> Option<Duration> {
        (self.timers.response_ms > 0).then(|| Duration::from_millis(self.timers.response_ms))
    }

    /// How long a leased streaming response may receive nothing from the
    /// backend; `None` when `stream_idle_ms` is 0 (off).
    pub fn stream_idle_timeout(&self) -> Option<Duration> {
        (self.timers.stream_idle_ms > 0).then(|| Duration::from_millis(self.timers.stream_idle_ms))
    }

    /// The bound on draining accepted work at shutdown; `None` means wait
    /// for all of it (`drain_ms` resolved to 0).
    pub fn drain_timeout(&self) -> Option<Duration> {
        (self.timers.drain_ms > 0).then(|| Duration::from_millis(self.timers.drain_ms))
    }

    /// The bound on one cache lookup; `None` when lookups are disabled.
    pub fn cache_lookup_timeout(&self) -> Option<Duration> {
        (self.timers.cache_lookup_ms > 0)
            .then(|| Duration::from_millis(self.timers.cache_lookup_ms))
    }

    /// The extra limit on dispatched generations for cache lookups;
    /// `None` when `cache_max_active` is 0 or `cache_lookup_ms` is 0 (the
    /// spec: either disables it).
    pub fn cache_active_limit(&self) -> Option<usize> {
        let limit = self.scheduling.cache_max_active;
        (limit > 0 && self.timers.cache_lookup_ms > 0).then_some(limit)
    }
}

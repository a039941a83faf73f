//! Every config key, declared once: [`KEYS`].
//!
//! Each [`Key`] gives a key's name, where it goes (top level or a model
//! entry), its JSON form and bounds, its default, which daemon acts on it
//! ([`Scope`]), whether the settings fingerprint covers it, and a one-line
//! doc. Everything else about the keys is derived from this table or
//! checked against it by a test:
//!
//! - the unknown-key check: [`TOP_LEVEL_KEYS`] and [`MODEL_KEYS`] are
//!   computed from the table, and in debug builds the parser asserts that
//!   every key it reads is declared (`json_walk::Obj::get`);
//! - the parser's defaults and bounds: `keys_tests.rs` sets every key to its
//!   declared default (the config must not change), to a sample value (it
//!   must), and to each end of its declared range and one past it;
//! - the fingerprint (`fingerprint.rs`): the same tests require the sample
//!   value of every key with `fingerprinted: true` to change
//!   [`super::Config::fingerprint`] and of every other key not to;
//! - `check-config`'s summary (`ctl/src/check_config.rs`): its tests require
//!   each key's sample to change the summary, except for an explicit list
//!   of keys it does not show, each with the reason;
//! - the configuration reference: `docs/configuration.md`'s key tables are
//!   rendered from the table ([`super::keys_markdown`]) by
//!   `protocol/tests/protocol/config_keys_doc.rs`, between marker lines;
//! - `config.example.json` sets every top-level key
//!   (`protocol/tests/protocol/example_config.rs`).
//!
//! The fingerprint's text itself (`settings_text`) stays written by hand:
//! its exact form is what two builds compare, and it leaves some values out
//! when they are at their default so configs written before a key existed
//! keep their fingerprint.
//!
//! # Adding a config key
//!
//! 1. Declare it in [`KEYS`] below: name, place, form and bounds, default,
//!    scope, whether the fingerprint covers it, and its doc line. A key both
//!    daemons must agree on is fingerprinted; one a single daemon acts on
//!    alone may stay out, so changing it needs a restart of that daemon only.
//! 2. Parse it in the file of its group (`endpoints.rs`, `timers.rs`,
//!    `request_log.rs`, `prefetch.rs`, `probe.rs`, `model.rs`, ...), with
//!    the default and bounds you declared: name the same constants in both
//!    places, as the existing keys do.
//! 3. If fingerprinted, add it to `settings_text` in `fingerprint.rs`
//!    (written only when not at its default, so existing configs keep their
//!    fingerprint).
//! 4. Show it in `check-config`'s summary (`ctl/src/check_config.rs`), or
//!    add it to that file's list of keys the summary leaves out, with why.
//! 5. Give it a sample value in `config::testing::set_sample` if the generic
//!    one for its form does not fit.
//! 6. Set it in `config.example.json` (top-level keys).
//! 7. Run `cargo test -p strata-protocol --test protocol config_keys_doc`, which
//!    rewrites the key tables of `docs/configuration.md`, and commit that.
//!
//! `cargo test -p strata-protocol -p strata-ctl` then fails until every
//! step is done.

use super::{
    DEFAULT_BACKEND_PROBE_MISSES, DEFAULT_BACKEND_PROBE_MS, DEFAULT_CACHE_LOOKUP_MS,
    DEFAULT_CACHE_MAX_ACTIVE, DEFAULT_COOLDOWN_MS, DEFAULT_IDLE_MS, DEFAULT_MAX_PENDING,
    DEFAULT_MAX_REQUEST_BODY_BYTES, DEFAULT_MODEL_GRACE_MS, DEFAULT_PREFETCH_MAX_BYTES,
    DEFAULT_PREFETCH_MIN_FREE_BYTES, DEFAULT_QUEUE_MS, DEFAULT_REQUEST_LOG_CAPACITY,
    DEFAULT_REQUEST_LOG_MAX_BYTES, DEFAULT_REQUEST_LOG_ROTATE_FILES, DEFAULT_RESPONSE_MS,
    DEFAULT_SHUTDOWN_MS, DEFAULT_STARTUP_MS, MAX_BACKEND_PROBE_MISSES, MAX_BACKEND_PROBE_MS,
    MAX_CACHE_LOOKUP_MS, MAX_CACHE_MAX_ACTIVE, MAX_DURATION_MS, MAX_MAX_PENDING,
    MAX_MAX_REQUEST_BODY_BYTES, MAX_MODEL_GRACE_MS, MAX_PREFETCH_BYTES, MAX_REQUEST_LOG_CAPACITY,
    MAX_REQUEST_LOG_MAX_BYTES, MAX_REQUEST_LOG_ROTATE_FILES, MAX_WEIGHTS_ENTRIES,
    MIN_REQUEST_LOG_MAX_BYTES,
};

/// One config key.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    pub name: &'static str,
    pub place: Place,
    pub form: Form,
    pub default: Default,
    pub scope: Scope,
    /// Whether [`super::Config::fingerprint`] covers it: a proxy and a
    /// supervisor whose configs differ in it refuse each other's hello.
    pub fingerprinted: bool,
    /// One line: what it does (markdown, no `|`; links are relative to
    /// `docs/configuration.md`, where it is rendered).
    pub doc: &'static str,
}

/// Which object a key belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The config file's top-level object.
    TopLevel,
    /// Each entry of `models` (`models.ID`).
    Model,
}

/// Which daemon acts on a key: whose code reads the parsed value (both
/// daemons parse the whole file). Read off the code, not checked by a test;
/// it says which daemon a change needs restarting for a key the fingerprint
/// leaves out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Supervisor,
    Proxy,
    Both,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Supervisor => "supervisor",
            Scope::Proxy => "proxy",
            Scope::Both => "both",
        }
    }
}

/// What a duration or size counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Milliseconds,
    Bytes,
    /// A count, a port number: no unit.
    Plain,
}

/// A key's JSON form and the values it accepts.
#[derive(Clone, Copy, Debug)]
pub enum Form {
    /// `true` or `false`.
    Bool,
    /// A JSON integer in `min..=max`.
    Integer {
        min: u64,
        max: u64,
        unit: Unit,
        /// What 0 means, where it means something special ("off").
        zero: Option<&'static str>,
        /// A further rule that involves another key.
        rule: Option<&'static str>,
    },
    /// A JSON integer whose bounds depend on other keys.
    IntegerRule { unit: Unit, rule: &'static str },
    /// One of these strings.
    Choice(&'static [&'static str]),
    /// An absolute path string (or `null` when `nullable`).
    Path { nullable: bool },
    /// Anything else: its JSON type and the rule, as text.
    Other {
        json: &'static str,
        rule: &'static str,
    },
}

/// A key's value when it is omitted.
#[derive(Clone, Copy, Debug)]
pub enum Default {
    /// The key must be present.
    Required,
    /// This integer.
    Integer(u64),
    /// This JSON value (its text).
    Json(&'static str),
    /// Computed from other keys or the profile: how (markdown).
    Derived(&'static str),
}

/// The duration cap the spec leaves open: a day catches unit mistakes.
const DAY: u64 = MAX_DURATION_MS;

const fn ms(min: u64, max: u64, zero: Option<&'static str>) -> Form {
    Form::Integer {
        min,
        max,
        unit: Unit::Milliseconds,
        zero,
        rule: None,
    }
}

const fn bytes(min: u64, max: u64) -> Form {
    Form::Integer {
        min,
        max,
        unit: Unit::Bytes,
        zero: None,
        rule: None,
    }
}

const fn count(min: u64, max: u64, zero: Option<&'static str>) -> Form {
    Form::Integer {
        min,
        max,
        unit: Unit::Plain,
        zero,
        rule: None,
    }
}

const FAMILIES: &[&str] = &["qwen3.8-flash-next", "qwen3.6-35b-a3b"];

/// Every key, in the order the reference lists them.
pub const KEYS: &[Key] = &[
    // Where Strata is and how the daemons meet.
    Key {
        name: "python",
        place: Place::TopLevel,
        form: Form::Path { nullable: false },
        default: Default::Required,
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "the Python that runs Strata (`python -m serve.server`)",
    },
    Key {
        name: "strata_dir",
        place: Place::TopLevel,
        form: Form::Path { nullable: false },
        default: Default::Required,
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "Strata checkout; the backend's working directory",
    },
    Key {
        name: "models",
        place: Place::TopLevel,
        form: Form::Other {
            json: "object",
            rule: "at least one entry, keyed by model ID",
        },
        default: Default::Required,
        scope: Scope::Both,
        fingerprinted: true,
        doc: "concrete model builds, keyed by model ID (see [Model entries](#model-entries-modelsid))",
    },
    Key {
        name: "aliases",
        place: Place::TopLevel,
        form: Form::Other {
            json: "object",
            rule: "keys `qwen3.8-flash-next`, `qwen3.6-35b-a3b` only, each `{\"allowed_models\": [ID, ...]}`",
        },
        default: Default::Json("{}"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "family aliases, each with an ordered `allowed_models` list of concrete IDs of its family",
    },
    Key {
        name: "enabled_models",
        place: Place::TopLevel,
        form: Form::Other {
            json: "array of model IDs",
            rule: "concrete IDs, no duplicates",
        },
        default: Default::Derived("every ID, in ID order"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "which IDs clients may discover and request; `[]` exposes none",
    },
    Key {
        name: "listen",
        place: Place::TopLevel,
        form: Form::Other {
            json: "string",
            rule: "loopback `\"IP:PORT\"` (v4 or v6); port 0 lets the OS pick (tests)",
        },
        default: Default::Json("\"127.0.0.1:8088\""),
        scope: Scope::Proxy,
        fingerprinted: false,
        doc: "the HTTP listener (or the address the systemd socket must have)",
    },
    Key {
        name: "backend_port",
        place: Place::TopLevel,
        form: Form::Integer {
            min: 1,
            max: 65535,
            unit: Unit::Plain,
            zero: None,
            rule: Some("not the `listen` port"),
        },
        default: Default::Required,
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "loopback port reserved for the Strata child",
    },
    Key {
        name: "control_socket",
        place: Place::TopLevel,
        form: Form::Path { nullable: false },
        default: Default::Required,
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "operator control socket (`strata-router status/on/off`)",
    },
    Key {
        name: "supervisor_socket",
        place: Place::TopLevel,
        form: Form::Path { nullable: false },
        default: Default::Derived("`supervisor.sock` beside `control_socket`"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "private proxy-supervisor socket; not `control_socket`",
    },
    Key {
        name: "require_socket_activation",
        place: Place::TopLevel,
        form: Form::Bool,
        default: Default::Json("false"),
        scope: Scope::Proxy,
        fingerprinted: false,
        doc: "proxy must adopt a systemd socket at fd 3; never falls back to binding",
    },
    Key {
        name: "readiness",
        place: Place::TopLevel,
        form: Form::Choice(&["auto", "ready_file", "health"]),
        default: Default::Json("\"auto\""),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "how a started backend is recognised as ready; `auto` asks the Strata's `--help` once (see [The Strata it runs](backend.md#the-strata-it-runs))",
    },
    Key {
        name: "max_request_body_bytes",
        place: Place::TopLevel,
        form: bytes(1, MAX_MAX_REQUEST_BODY_BYTES),
        default: Default::Integer(DEFAULT_MAX_REQUEST_BODY_BYTES),
        scope: Scope::Proxy,
        fingerprinted: true,
        doc: "chat request body limit, Content-Length and chunked",
    },
    // Scheduling.
    Key {
        name: "wait_when_busy",
        place: Place::TopLevel,
        form: Form::Bool,
        default: Default::Json("false"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "`true`: wait-first scheduling; `false`: legacy bounded scheduling",
    },
    Key {
        name: "max_pending",
        place: Place::TopLevel,
        form: count(1, MAX_MAX_PENDING, None),
        default: Default::Integer(DEFAULT_MAX_PENDING),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "wait-first: dispatched upstream requests; legacy: active + waiting (excess gets 429)",
    },
    Key {
        name: "queue_ms",
        place: Place::TopLevel,
        form: Form::IntegerRule {
            unit: Unit::Milliseconds,
            rule: "legacy: 1..=86400000; wait-first: any non-negative integer, ignored",
        },
        default: Default::Integer(DEFAULT_QUEUE_MS),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "legacy wait for the model lease (then 504)",
    },
    Key {
        name: "response_ms",
        place: Place::TopLevel,
        form: Form::IntegerRule {
            unit: Unit::Milliseconds,
            rule: "legacy: 1..=86400000; wait-first: 0 (off)..=86400000",
        },
        default: Default::Integer(DEFAULT_RESPONSE_MS),
        scope: Scope::Proxy,
        fingerprinted: true,
        doc: "deadline for upstream headers and the whole stream",
    },
    Key {
        name: "stream_idle_ms",
        place: Place::TopLevel,
        form: ms(0, DAY, Some("off")),
        default: Default::Integer(0),
        scope: Scope::Proxy,
        fingerprinted: false,
        doc: "a leased streaming response that receives no byte from the backend this long ends with `reason: \"timeout\"` (see [Silent streams](http-api.md#silent-streams-stream_idle_ms))",
    },
    Key {
        name: "startup_ms",
        place: Place::TopLevel,
        form: ms(1, DAY, None),
        default: Default::Integer(DEFAULT_STARTUP_MS),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "backend readiness deadline",
    },
    Key {
        name: "cooldown_ms",
        place: Place::TopLevel,
        form: ms(0, DAY, None),
        default: Default::Integer(DEFAULT_COOLDOWN_MS),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "after a failed start, requests fail at once for this long",
    },
    Key {
        name: "cooldown_max_ms",
        place: Place::TopLevel,
        form: Form::IntegerRule {
            unit: Unit::Milliseconds,
            rule: "`cooldown_ms`..=86400000",
        },
        default: Default::Derived("`cooldown_ms`"),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "consecutive failed starts of one model double its cooldown from `cooldown_ms` up to this; a verified start of it or an operator `on` resets the streak (the default keeps the spec's fixed cooldown; the example sets 600000)",
    },
    Key {
        name: "idle_ms",
        place: Place::TopLevel,
        form: ms(1, DAY, None),
        default: Default::Integer(DEFAULT_IDLE_MS),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "unload after this long without leases",
    },
    Key {
        name: "shutdown_ms",
        place: Place::TopLevel,
        form: ms(1, DAY, None),
        default: Default::Integer(DEFAULT_SHUTDOWN_MS),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "after SIGTERM to the Strata server alone, how long its group may take to exit before SIGKILL",
    },
    Key {
        name: "drain_ms",
        place: Place::TopLevel,
        form: ms(0, DAY, Some("no deadline")),
        default: Default::Derived("legacy: `shutdown_ms`; wait-first: 0"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "on SIGTERM, how long accepted work may finish (0: wait for all of it)",
    },
    Key {
        name: "model_grace_ms",
        place: Place::TopLevel,
        form: ms(0, MAX_MODEL_GRACE_MS, None),
        default: Default::Integer(DEFAULT_MODEL_GRACE_MS),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "wait-first: keep the current model selected this long after its last request (tool-call gaps); no effect in legacy mode",
    },
    Key {
        name: "model_hold_max_ms",
        place: Place::TopLevel,
        form: ms(0, DAY, Some("off")),
        default: Default::Integer(0),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "wait-first, opt-in: once another model's request has waited this long, the loaded model finishes only its requests that came before it, then gives way; never less than 1.5 load times of the two models (see [Hold bound](scheduling.md#hold-bound))",
    },
    Key {
        name: "cache_lookup_ms",
        place: Place::TopLevel,
        form: ms(0, MAX_CACHE_LOOKUP_MS, Some("lookups off")),
        default: Default::Integer(DEFAULT_CACHE_LOOKUP_MS),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "bound on one cache-match lookup",
    },
    Key {
        name: "cache_max_active",
        place: Place::TopLevel,
        form: count(0, MAX_CACHE_MAX_ACTIVE, Some("no extra limit")),
        default: Default::Integer(DEFAULT_CACHE_MAX_ACTIVE),
        scope: Scope::Supervisor,
        fingerprinted: true,
        doc: "extra limit on dispatched generations, so a cache lookup finds the engine idle",
    },
    // Accounting.
    Key {
        name: "request_log_path",
        place: Place::TopLevel,
        form: Form::Path { nullable: true },
        default: Default::Json("null"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "JSONL accounting file; null disables files",
    },
    Key {
        name: "request_log_max_bytes",
        place: Place::TopLevel,
        form: bytes(MIN_REQUEST_LOG_MAX_BYTES, MAX_REQUEST_LOG_MAX_BYTES),
        default: Default::Integer(DEFAULT_REQUEST_LOG_MAX_BYTES),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "rotate before the active file would exceed this",
    },
    Key {
        name: "request_log_rotate_files",
        place: Place::TopLevel,
        form: count(0, MAX_REQUEST_LOG_ROTATE_FILES, None),
        default: Default::Integer(DEFAULT_REQUEST_LOG_ROTATE_FILES),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "rotated backups kept (0 truncates at rotation)",
    },
    Key {
        name: "request_log_capacity",
        place: Place::TopLevel,
        form: count(1, MAX_REQUEST_LOG_CAPACITY, None),
        default: Default::Integer(DEFAULT_REQUEST_LOG_CAPACITY),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "records kept in memory for `GET /requests`",
    },
    // Watching the backend.
    Key {
        name: "backend_probe_ms",
        place: Place::TopLevel,
        form: ms(0, MAX_BACKEND_PROBE_MS, Some("off")),
        default: Default::Integer(DEFAULT_BACKEND_PROBE_MS),
        scope: Scope::Supervisor,
        fingerprinted: false,
        doc: "how often the serving backend's `GET /health` is probed (see [Wedged backends](operating.md#wedged-backends-probes-unresponsive-and-a-truthful-health))",
    },
    Key {
        name: "backend_probe_misses",
        place: Place::TopLevel,
        form: count(1, MAX_BACKEND_PROBE_MISSES, None),
        default: Default::Integer(DEFAULT_BACKEND_PROBE_MISSES),
        scope: Scope::Supervisor,
        fingerprinted: false,
        doc: "unanswered probes in a row that make the backend `unresponsive`",
    },
    Key {
        name: "backend_unresponsive_action",
        place: Place::TopLevel,
        form: Form::Choice(&["report", "restart"]),
        default: Default::Json("\"report\""),
        scope: Scope::Supervisor,
        fingerprinted: false,
        doc: "what an unresponsive backend leads to: `report` stops nothing, `restart` fails its leases and stops it",
    },
    // The weights prefetch.
    Key {
        name: "prefetch",
        place: Place::TopLevel,
        form: Form::Bool,
        default: Default::Json("true"),
        scope: Scope::Supervisor,
        fingerprinted: false,
        doc: "read the next model's weights into the page cache while it waits (see [Faster swaps](backend.md#faster-swaps-the-weights-prefetch-and-learned-load-times))",
    },
    Key {
        name: "prefetch_predict",
        place: Place::TopLevel,
        form: Form::Bool,
        default: Default::Json("false"),
        scope: Scope::Supervisor,
        fingerprinted: false,
        doc: "while no request waits for another model, also read ahead the model most likely requested next (see [Reading ahead before anyone asks](backend.md#reading-ahead-before-anyone-asks-prefetch_predict))",
    },
    Key {
        name: "prefetch_max_bytes",
        place: Place::TopLevel,
        form: bytes(1, MAX_PREFETCH_BYTES),
        default: Default::Integer(DEFAULT_PREFETCH_MAX_BYTES),
        scope: Scope::Supervisor,
        fingerprinted: false,
        doc: "skip the prefetch of a model whose weights are larger",
    },
    Key {
        name: "prefetch_min_free_bytes",
        place: Place::TopLevel,
        form: bytes(0, MAX_PREFETCH_BYTES),
        default: Default::Integer(DEFAULT_PREFETCH_MIN_FREE_BYTES),
        scope: Scope::Supervisor,
        fingerprinted: false,
        doc: "skip it when `MemAvailable` minus what is left to read would fall below this",
    },
    // Model entries.
    Key {
        name: "family",
        place: Place::Model,
        form: Form::Choice(FAMILIES),
        default: Default::Required,
        scope: Scope::Both,
        fingerprinted: true,
        doc: "the model family, which is also its alias' name",
    },
    Key {
        name: "fine_tune",
        place: Place::Model,
        form: Form::Other {
            json: "string or null",
            rule: "non-empty",
        },
        default: Default::Json("null"),
        scope: Scope::Proxy,
        fingerprinted: true,
        doc: "fine-tune name; null for base weights",
    },
    Key {
        name: "quantization",
        place: Place::Model,
        form: Form::Other {
            json: "string",
            rule: "non-empty",
        },
        default: Default::Required,
        scope: Scope::Proxy,
        fingerprinted: true,
        doc: "quantization name",
    },
    Key {
        name: "profile",
        place: Place::Model,
        form: Form::Path { nullable: true },
        default: Default::Json("null"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "the JSON profile Strata setup wrote for these weights (see [A model's status and its profile](#a-models-status-and-its-profile))",
    },
    Key {
        name: "upstream_model",
        place: Place::Model,
        form: Form::Other {
            json: "string",
            rule: "non-empty",
        },
        default: Default::Required,
        scope: Scope::Both,
        fingerprinted: true,
        doc: "the profile's `model_name` (what the backend reports)",
    },
    Key {
        name: "installed",
        place: Place::Model,
        form: Form::Bool,
        default: Default::Json("false"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "weights are installed",
    },
    Key {
        name: "compatible",
        place: Place::Model,
        form: Form::Bool,
        default: Default::Json("false"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "you checked memory and backend compatibility",
    },
    Key {
        name: "enabled",
        place: Place::Model,
        form: Form::Bool,
        default: Default::Derived("none"),
        scope: Scope::Both,
        fingerprinted: true,
        doc: "legacy spelling of `installed` (a warning); must agree with it when both are set",
    },
    Key {
        name: "metadata",
        place: Place::Model,
        form: Form::Other {
            json: "object",
            rule: "only `meta`, `architecture`, `thinking` (any JSON)",
        },
        default: Default::Derived("none"),
        scope: Scope::Proxy,
        fingerprinted: true,
        doc: "shown in `/v1/models`, each field ahead of the profile's `router_metadata`",
    },
    Key {
        name: "weights",
        place: Place::Model,
        form: Form::Other {
            json: "array of absolute paths or null",
            rule: WEIGHTS_RULE,
        },
        default: Default::Derived("derived from the profile"),
        scope: Scope::Supervisor,
        fingerprinted: false,
        doc: "the files the backend reads when it loads this model: what the weights prefetch reads ahead (see [Faster swaps](backend.md#faster-swaps-the-weights-prefetch-and-learned-load-times))",
    },
];

/// `weights`' rule, with [`MAX_WEIGHTS_ENTRIES`] spelled out (the assertion
/// below keeps them in step).
const WEIGHTS_RULE: &str =
    "files, or directories walked up to 64 levels deep; at most 64, no duplicates; `[]`: none";
const _: () = assert!(MAX_WEIGHTS_ENTRIES == 64);

const fn count_at(place: Place) -> usize {
    let mut count = 0;
    let mut index = 0;
    while index < KEYS.len() {
        if KEYS[index].place as u8 == place as u8 {
            count += 1;
        }
        index += 1;
    }
    count
}

const fn names_at<const N: usize>(place: Place) -> [&'static str; N] {
    let mut names = [""; N];
    let mut found = 0;
    let mut index = 0;
    while index < KEYS.len() {
        if KEYS[index].place as u8 == place as u8 {
            names[found] = KEYS[index].name;
            found += 1;
        }
        index += 1;
    }
    names
}

/// Every key the top-level object may carry, in [`KEYS`] order.
pub const TOP_LEVEL_KEYS: [&str; count_at(Place::TopLevel)] = names_at(Place::TopLevel);

/// Every key a model entry may carry, in [`KEYS`] order.
pub const MODEL_KEYS: [&str; count_at(Place::Model)] = names_at(Place::Model);

/// The declaration of `name` at `place`.
pub fn key(place: Place, name: &str) -> Option<&'static Key> {
    KEYS.iter()
        .find(|key| key.place == place && key.name == name)
}

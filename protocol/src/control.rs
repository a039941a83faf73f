//! The operator control socket's messages: JSON lines between
//! `strata-ctl` (or any client) and `strata-supervisor`.
//!
//! A client sends one line ([`ControlRequest`]): a bare word (`status`, or
//! the legacy `on` / `off` that only flip the routing flag) or a JSON
//! object (`{"cmd":"status"}`, `{"cmd":"on","model":...}`,
//! `{"cmd":"off","now":...}`, and `{"cmd":"models"}`, an addition beyond
//! the spec for `strata-ctl top`). The daemon answers `status` with one
//! [`Status`] line, `models` with one [`ModelsAnswer`] line, a bare `on`/`off` with one [`RoutingAnswer`], and an
//! `on`/`off` object with [`ControlEvent`]s: progress lines, then exactly
//! one `done` carrying the status fields. Anything it cannot read gets an
//! [`ErrorAnswer`]. [`ControlReply`] reads any of these lines.

use serde::{Deserialize, Serialize};

/// One request line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRequest {
    Status,
    /// Every configured model's status and learned load time.
    Models,
    /// Legacy bare `on`/`off`: the routing flag only, no load or unload.
    LegacyRouting(bool),
    /// Enable routing and load `model` (or the default choice).
    On {
        model: Option<String>,
    },
    /// Disable routing and unload (`now`: interrupt active responses).
    Off {
        now: bool,
    },
}

/// The JSON-object spellings of the requests.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase", deny_unknown_fields)]
enum CommandObject {
    Status {},
    Models {},
    On {
        #[serde(default)]
        model: Option<String>,
    },
    Off {
        #[serde(default)]
        now: Option<bool>,
    },
}

impl ControlRequest {
    /// Reads a request line (trailing newline allowed); `None` is the
    /// daemon's "unknown control command".
    pub fn parse(line: &str) -> Option<ControlRequest> {
        match line.trim() {
            "status" => return Some(ControlRequest::Status),
            "on" => return Some(ControlRequest::LegacyRouting(true)),
            "off" => return Some(ControlRequest::LegacyRouting(false)),
            _ => {}
        }
        match serde_json::from_str::<CommandObject>(line).ok()? {
            CommandObject::Status {} => Some(ControlRequest::Status),
            CommandObject::Models {} => Some(ControlRequest::Models),
            CommandObject::On { model } => Some(ControlRequest::On { model }),
            CommandObject::Off { now } => Some(ControlRequest::Off {
                now: now.unwrap_or(false),
            }),
        }
    }

    /// The line a client sends (without the newline): bare words for
    /// `status` and the legacy routing flips, objects for `on`/`off`.
    pub fn to_line(&self) -> String {
        let object = match self {
            ControlRequest::Status => return "status".to_owned(),
            ControlRequest::LegacyRouting(true) => return "on".to_owned(),
            ControlRequest::LegacyRouting(false) => return "off".to_owned(),
            ControlRequest::Models => CommandObject::Models {},
            ControlRequest::On { model } => CommandObject::On {
                model: model.clone(),
            },
            ControlRequest::Off { now } => CommandObject::Off { now: Some(*now) },
        };
        serde_json::to_string(&object).expect("a control request serializes")
    }
}

/// The status document: `status`'s answer, and the fields of every `done`.
/// Every key is always present (null when unknown), so scripts can rely on
/// the shape; `busy` tells whether the process fields describe a settled
/// state. Its keys are [`STATUS_FIELDS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub daemon_pid: u32,
    pub instance_id: String,
    /// An operation (load, stop, `on`, `off`, shutdown) is running.
    pub busy: bool,
    /// Which operation, when busy.
    pub operation: Option<String>,
    pub routing: bool,
    /// A connected proxy is draining, or the supervisor is shutting down.
    pub draining: bool,
    pub child_pid: Option<u32>,
    pub loaded: Option<String>,
    pub loading: Option<String>,
    pub last_startup_error: Option<String>,
    pub proxies: usize,
    pub active_leases: usize,
    pub waiting_requests: usize,
    pub cooldown_remaining_ms: Option<u64>,
    /// `serving`, `loading`, `idle`, `unresponsive` or `cooling` (beyond
    /// the spec: the backend probes, `backend_probe_ms`).
    pub backend_state: crate::wire::BackendState,
    /// How long ago the serving backend last answered its probe well.
    pub last_good_probe_age_ms: Option<u64>,
    /// How starts are checked (`readiness`: the setting, the mode in use and
    /// why; an addition to the spec's keys).
    pub readiness: crate::config::ReadinessReport,
}

/// Every key of a [`Status`] line, in the order it is written: what scripts
/// (and the end-to-end tests) may rely on. Renaming or adding a field
/// changes this list, and the test below fails until it says so.
pub const STATUS_FIELDS: [&str; 17] = [
    "daemon_pid",
    "instance_id",
    "busy",
    "operation",
    "routing",
    "draining",
    "child_pid",
    "loaded",
    "loading",
    "last_startup_error",
    "proxies",
    "active_leases",
    "waiting_requests",
    "cooldown_remaining_ms",
    "backend_state",
    "last_good_probe_age_ms",
    "readiness",
];

/// One event line of an `on`/`off` operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum ControlEvent {
    Progress {
        /// `on` or `off`.
        op: String,
        /// A short machine-readable step name (`routing`, `waiting`,
        /// `unloading`, `starting`, ...).
        phase: String,
        message: String,
        elapsed_ms: u64,
    },
    /// Exactly one per operation, last.
    Done(Done),
}

/// The final event: whether the operation did what it promises, and the
/// status fields after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {
    pub ok: bool,
    pub message: String,
    #[serde(flatten)]
    pub status: Status,
}

/// The answer to `{"cmd":"models"}`: one entry per configured model, in
/// config order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsAnswer {
    pub models: Vec<ModelFacts>,
}

/// One model in a [`ModelsAnswer`]. Every key is always present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFacts {
    pub id: String,
    /// As `/v1/models` says it (`loaded`, `verified`, `available`, ...).
    pub status: crate::config::ModelStatus,
    /// The median of this model's last successful loads; null before the
    /// first one.
    pub typical_load_ms: Option<u64>,
    pub cooldown_remaining_ms: Option<u64>,
}

/// The answer to a legacy bare `on`/`off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingAnswer {
    pub routing: bool,
}

/// The answer to a request the daemon cannot serve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    pub error: String,
}

impl ErrorAnswer {
    /// What an older or newer daemon answers to a line it does not know.
    pub const UNKNOWN_COMMAND: &'static str = "unknown control command";

    pub fn new(error: &str) -> ErrorAnswer {
        ErrorAnswer {
            error: error.to_owned(),
        }
    }
}

/// Any line the daemon sends, as a client reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ControlReply {
    Error(ErrorAnswer),
    Event(ControlEvent),
    // Before `Routing`: a status line has a `routing` key too.
    Status(Status),
    Models(ModelsAnswer),
    Routing(RoutingAnswer),
}

impl ControlReply {
    /// Reads one line; `None` if it is none of the known shapes.
    pub fn parse(line: &str) -> Option<ControlReply> {
        serde_json::from_str(line).ok()
    }
}

/// How a client reads any reply line: leniently, taking only what it acts
/// on, so a daemon with more fields (or events this client does not know)
/// still works. [`ControlReply`] is the strict form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ReplyLine {
    /// `progress` or `done` for operation events.
    pub event: Option<String>,
    pub ok: Option<bool>,
    pub message: Option<String>,
    pub elapsed_ms: Option<u64>,
    /// Set in an [`ErrorAnswer`].
    pub error: Option<String>,
}

impl ReplyLine {
    /// Reads one line; `None` if it is not a JSON object.
    pub fn parse(line: &str) -> Option<ReplyLine> {
        serde_json::from_str(line).ok()
    }
}

/// One line of JSON (without the newline) for any answer.
pub fn to_line(answer: &impl Serialize) -> String {
    serde_json::to_string(answer).expect("a control answer serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> Status {
        Status {
            daemon_pid: 7,
            instance_id: "7-1".into(),
            busy: false,
            operation: None,
            routing: true,
            draining: false,
            child_pid: Some(9),
            loaded: Some("m".into()),
            loading: None,
            last_startup_error: None,
            proxies: 1,
            active_leases: 0,
            waiting_requests: 0,
            cooldown_remaining_ms: None,
            backend_state: crate::wire::BackendState::Serving,
            last_good_probe_age_ms: Some(1200),
            readiness: crate::config::ReadinessReport::new(crate::config::Readiness::Health, None),
        }
    }

    #[test]
    fn request_lines_parse_as_the_spec_says() {
        let cases = [
            ("status", Some(ControlRequest::Status)),
            ("status\n", Some(ControlRequest::Status)),
            ("on", Some(ControlRequest::LegacyRouting(true))),
            ("off\n", Some(ControlRequest::LegacyRouting(false))),
            (r#"{"cmd":"status"}"#, Some(ControlRequest::Status)),
            (
                r#"{"cmd":"on","model":null}"#,
                Some(ControlRequest::On { model: None }),
            ),
            (
                r#"{"cmd":"on","model":"m"}"#,
                Some(ControlRequest::On {
                    model: Some("m".into()),
                }),
            ),
            (r#"{"cmd":"on"}"#, Some(ControlRequest::On { model: None })),
            (
                r#"{"cmd":"off","now":false}"#,
                Some(ControlRequest::Off { now: false }),
            ),
            (
                r#"{"cmd":"off","now":true}"#,
                Some(ControlRequest::Off { now: true }),
            ),
            (
                r#"{"cmd":"off","now":null}"#,
                Some(ControlRequest::Off { now: false }),
            ),
            (r#"{"cmd":"off","now":"yes"}"#, None),
            (r#"{"cmd":"on","model":3}"#, None),
            (r#"{"cmd":"on","extra":1}"#, None),
            (r#"{"cmd":"status","x":1}"#, None),
            (r#"{"cmd":"models"}"#, Some(ControlRequest::Models)),
            (r#"{"cmd":"models","id":"m"}"#, None),
            (r#"{"cmd":"reboot"}"#, None),
            ("ON", None),
            ("", None),
            ("[1,2]", None),
            ("{not json", None),
        ];
        for (line, expected) in cases {
            assert_eq!(ControlRequest::parse(line), expected, "line {line:?}");
        }
    }

    #[test]
    fn requests_round_trip_through_their_lines() {
        for request in [
            ControlRequest::Status,
            ControlRequest::Models,
            ControlRequest::LegacyRouting(true),
            ControlRequest::LegacyRouting(false),
            ControlRequest::On { model: None },
            ControlRequest::On {
                model: Some("qwen3.8-flash-next".into()),
            },
            ControlRequest::Off { now: true },
            ControlRequest::Off { now: false },
        ] {
            assert_eq!(ControlRequest::parse(&request.to_line()), Some(request));
        }
        assert_eq!(
            ControlRequest::Off { now: true }.to_line(),
            r#"{"cmd":"off","now":true}"#
        );
        assert_eq!(
            ControlRequest::On { model: None }.to_line(),
            r#"{"cmd":"on","model":null}"#
        );
    }

    /// The keys of `line`'s object, in the order they are written (a
    /// `serde_json::Value` would sort them).
    fn keys_in_order(line: &str) -> Vec<String> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Vec<String>, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    keys.push(key);
                }
                Ok(keys)
            }
        }
        use serde::Deserializer as _;
        serde_json::Deserializer::from_str(line)
            .deserialize_map(Keys)
            .expect("an object")
    }

    /// The status document's keys are exactly [`STATUS_FIELDS`], in that
    /// order, every one present (a null too), with these JSON types; a `done`
    /// is `event`, `ok`, `message` and the same keys.
    #[test]
    fn the_status_document_has_exactly_its_pinned_keys() {
        let mut unknown = status();
        unknown.child_pid = None;
        unknown.loaded = None;
        let line = to_line(&unknown);
        assert_eq!(keys_in_order(&line), STATUS_FIELDS);
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "daemon_pid": 7, "instance_id": "7-1", "busy": false, "operation": null,
                "routing": true, "draining": false, "child_pid": null, "loaded": null,
                "loading": null, "last_startup_error": null, "proxies": 1,
                "active_leases": 0, "waiting_requests": 0, "cooldown_remaining_ms": null,
                "backend_state": "serving", "last_good_probe_age_ms": 1200,
                "readiness": {
                    "configured": "health", "mode": "health",
                    "why": "set by readiness in the config"
                }
            })
        );
        let done = to_line(&ControlEvent::Done(Done {
            ok: true,
            message: "m".into(),
            status: unknown,
        }));
        let mut expected = vec!["event", "ok", "message"];
        expected.extend(STATUS_FIELDS);
        assert_eq!(keys_in_order(&done), expected);
    }

    #[test]
    fn answers_have_the_spec_shapes_and_read_back() {
        let line = to_line(&status());
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value.as_object().unwrap().len(), STATUS_FIELDS.len());
        assert!(value["cooldown_remaining_ms"].is_null(), "present as null");
        assert_eq!(
            ControlReply::parse(&line),
            Some(ControlReply::Status(status()))
        );

        let done = ControlEvent::Done(Done {
            ok: true,
            message: "on: already on".into(),
            status: status(),
        });
        let line = to_line(&done);
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["event"], "done");
        assert_eq!(value["ok"], true);
        assert_eq!(value["daemon_pid"], 7);
        assert_eq!(value.as_object().unwrap().len(), STATUS_FIELDS.len() + 3);
        assert_eq!(ControlReply::parse(&line), Some(ControlReply::Event(done)));

        let progress = ControlEvent::Progress {
            op: "off".into(),
            phase: "routing".into(),
            message: "routing disabled: new and queued requests get 503".into(),
            elapsed_ms: 3,
        };
        let line = to_line(&progress);
        assert_eq!(
            line,
            r#"{"event":"progress","op":"off","phase":"routing","message":"routing disabled: new and queued requests get 503","elapsed_ms":3}"#
        );
        assert_eq!(
            ControlReply::parse(&line),
            Some(ControlReply::Event(progress))
        );

        let routing = to_line(&RoutingAnswer { routing: false });
        assert_eq!(routing, r#"{"routing":false}"#);
        assert_eq!(
            ControlReply::parse(&routing),
            Some(ControlReply::Routing(RoutingAnswer { routing: false }))
        );
        let error = to_line(&ErrorAnswer::new(ErrorAnswer::UNKNOWN_COMMAND));
        assert_eq!(error, r#"{"error":"unknown control command"}"#);
        assert!(matches!(
            ControlReply::parse(&error),
            Some(ControlReply::Error(_))
        ));
        let models = ModelsAnswer {
            models: vec![ModelFacts {
                id: "m".into(),
                status: crate::config::ModelStatus::Loaded,
                typical_load_ms: Some(20_000),
                cooldown_remaining_ms: None,
            }],
        };
        let line = to_line(&models);
        assert_eq!(
            line,
            r#"{"models":[{"id":"m","status":"loaded","typical_load_ms":20000,"cooldown_remaining_ms":null}]}"#
        );
        assert_eq!(
            ControlReply::parse(&line),
            Some(ControlReply::Models(models))
        );
        assert_eq!(ControlReply::parse("[]"), None);
    }

    #[test]
    fn a_client_reads_reply_lines_leniently() {
        let line = ReplyLine::parse(r#"{"event":"done","ok":false,"message":"m","extra":[1]}"#);
        assert_eq!(
            line,
            Some(ReplyLine {
                event: Some("done".into()),
                ok: Some(false),
                message: Some("m".into()),
                ..ReplyLine::default()
            })
        );
        let error = ReplyLine::parse(r#"{"error":"unknown control command"}"#).unwrap();
        assert_eq!(error.error.as_deref(), Some(ErrorAnswer::UNKNOWN_COMMAND));
        assert_eq!(ReplyLine::parse("[1]"), None);
        assert_eq!(ReplyLine::parse("nope"), None);
    }
}

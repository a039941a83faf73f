//! Table-driven tests of every config rule: each has a valid and an invalid
//! case, and the invalid case asserts the exact JSON path and a part of the
//! message.

use serde_json::{Value, json};
use strata_protocol::config::{Config, ConfigError, Family, ModelStatus, Readiness, Resolution};

/// Two families, three and two models, both aliases. Every test starts
/// from this and changes one thing.
fn base() -> Value {
    json!({
        "python": "/opt/strata/venv/bin/python",
        "strata_dir": "/opt/strata",
        "backend_port": 8095,
        "control_socket": "/run/strata-router/control.sock",
        "models": {
            "a-q4": {"family": "qwen3.8-flash-next", "quantization": "q4_k_m", "upstream_model": "a-q4"},
            "a-q8": {"family": "qwen3.8-flash-next", "fine_tune": "ft", "quantization": "q8_0", "upstream_model": "a-q8"},
            "a-iq3": {"family": "qwen3.8-flash-next", "fine_tune": null, "quantization": "iq3_xxs", "upstream_model": "a-iq3"},
            "b-q4": {"family": "qwen3.6-35b-a3b", "quantization": "q4_k_m", "upstream_model": "b-q4"},
            "b-q6": {"family": "qwen3.6-35b-a3b", "quantization": "q6_k", "upstream_model": "b-q6"}
        },
        "aliases": {
            "qwen3.8-flash-next": {"allowed_models": ["a-q8", "a-q4", "a-iq3"]},
            "qwen3.6-35b-a3b": {"allowed_models": ["b-q6", "b-q4"]}
        }
    })
}

fn parse(value: &Value) -> Result<Config, ConfigError> {
    Config::from_json_str(&value.to_string())
}

fn with(mutate: impl FnOnce(&mut Value)) -> Value {
    let mut value = base();
    mutate(&mut value);
    value
}

fn ok(mutate: impl FnOnce(&mut Value)) -> Config {
    let value = with(mutate);
    parse(&value).unwrap_or_else(|err| panic!("expected a valid config, got {err}\n{value:#}"))
}

fn remove(value: &mut Value, key: &str) {
    value.as_object_mut().unwrap().remove(key);
}

fn model<'a>(value: &'a mut Value, id: &str) -> &'a mut Value {
    &mut value["models"][id]
}

/// One rule: a change that keeps the config valid, a change that breaks
/// the rule, and the expected error path and message fragment.
struct Rule {
    name: &'static str,
    valid: fn(&mut Value),
    invalid: fn(&mut Value),
    path: &'static str,
    message: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        name: "weights must be an array",
        valid: |v| model(v, "a-q4")["weights"] = json!(["/srv/models/a-q4", "/srv/extra.bin"]),
        invalid: |v| model(v, "a-q4")["weights"] = json!("/srv/models/a-q4"),
        path: r#"models["a-q4"].weights"#,
        message: "expected an array",
    },
    Rule {
        name: "weights paths must be absolute",
        valid: |v| model(v, "a-q4")["weights"] = json!([]),
        invalid: |v| model(v, "a-q4")["weights"] = json!(["/srv/a", "models/a-q4"]),
        path: r#"models["a-q4"].weights[1]"#,
        message: "must be an absolute path",
    },
    Rule {
        name: "weights paths are unique",
        valid: |v| model(v, "a-q4")["weights"] = json!(["/srv/a", "/srv/b"]),
        invalid: |v| model(v, "a-q4")["weights"] = json!(["/srv/a", "/srv/b", "/srv/a/"]),
        path: r#"models["a-q4"].weights[2]"#,
        message: "duplicate path",
    },
    Rule {
        name: "at most 64 weights entries",
        valid: |v| {
            let paths: Vec<String> = (0..64).map(|i| format!("/srv/w{i}")).collect();
            model(v, "a-q4")["weights"] = json!(paths)
        },
        invalid: |v| {
            let paths: Vec<String> = (0..65).map(|i| format!("/srv/w{i}")).collect();
            model(v, "a-q4")["weights"] = json!(paths)
        },
        path: r#"models["a-q4"].weights"#,
        message: "at most 64 entries, got 65",
    },
    Rule {
        name: "prefetch is a boolean",
        valid: |v| v["prefetch"] = json!(false),
        invalid: |v| v["prefetch"] = json!("off"),
        path: "prefetch",
        message: "expected a boolean",
    },
    Rule {
        name: "unknown top-level key",
        valid: |v| v["listen"] = json!("127.0.0.1:8088"),
        invalid: |v| v["lsiten"] = json!("127.0.0.1:8088"),
        path: "lsiten",
        message: "unknown key",
    },
    Rule {
        name: "unknown top-level key with odd characters is quoted",
        valid: |_| {},
        invalid: |v| v["a b"] = json!(1),
        path: r#"$["a b"]"#,
        message: "unknown key",
    },
    Rule {
        name: "unknown model key",
        valid: |v| model(v, "a-q4")["compatible"] = json!(true),
        invalid: |v| model(v, "a-q4")["compatibel"] = json!(true),
        path: r#"models["a-q4"].compatibel"#,
        message: "unknown key",
    },
    Rule {
        name: "unknown metadata key",
        valid: |v| {
            model(v, "a-q4")["metadata"] =
                json!({"meta": {"n_ctx": 1}, "architecture": "moe", "thinking": true})
        },
        invalid: |v| model(v, "a-q4")["metadata"] = json!({"metta": 1}),
        path: r#"models["a-q4"].metadata.metta"#,
        message: "unknown key",
    },
    Rule {
        name: "metadata must be an object",
        valid: |v| model(v, "a-q4")["metadata"] = json!({}),
        invalid: |v| model(v, "a-q4")["metadata"] = json!([]),
        path: r#"models["a-q4"].metadata"#,
        message: "expected an object",
    },
    Rule {
        name: "unknown alias key",
        valid: |_| {},
        invalid: |v| v["aliases"]["qwen3.8-flash-next"]["preferred"] = json!("a-q4"),
        path: r#"aliases["qwen3.8-flash-next"].preferred"#,
        message: "unknown key",
    },
    Rule {
        name: "bad alias name",
        valid: |v| remove(&mut v["aliases"], "qwen3.6-35b-a3b"),
        invalid: |v| v["aliases"]["qwen3"] = json!({"allowed_models": ["a-q4"]}),
        path: r#"aliases["qwen3"]"#,
        message: "unknown alias",
    },
    Rule {
        name: "no cross-family alias",
        valid: |_| {},
        invalid: |v| v["aliases"]["qwen"] = json!({"allowed_models": ["a-q4", "b-q4"]}),
        path: r#"aliases["qwen"]"#,
        message: "there is no cross-family alias",
    },
    Rule {
        name: "aliases must be an object",
        valid: |v| v["aliases"] = json!({}),
        invalid: |v| v["aliases"] = json!([]),
        path: "aliases",
        message: "expected an object",
    },
    Rule {
        name: "allowed_models is required",
        valid: |_| {},
        invalid: |v| v["aliases"]["qwen3.8-flash-next"] = json!({}),
        path: r#"aliases["qwen3.8-flash-next"].allowed_models"#,
        message: "required key is missing",
    },
    Rule {
        name: "empty allowed_models",
        valid: |v| v["aliases"]["qwen3.8-flash-next"]["allowed_models"] = json!(["a-q4"]),
        invalid: |v| v["aliases"]["qwen3.8-flash-next"]["allowed_models"] = json!([]),
        path: r#"aliases["qwen3.8-flash-next"].allowed_models"#,
        message: "must list at least one concrete model id",
    },
    Rule {
        name: "alias reference",
        valid: |_| {},
        invalid: |v| {
            v["aliases"]["qwen3.8-flash-next"]["allowed_models"] =
                json!(["a-q4", "qwen3.6-35b-a3b"])
        },
        path: r#"aliases["qwen3.8-flash-next"].allowed_models[1]"#,
        message: r#""qwen3.6-35b-a3b" is an alias; only concrete model ids may appear"#,
    },
    Rule {
        name: "alias cycle (self reference)",
        valid: |_| {},
        invalid: |v| {
            v["aliases"]["qwen3.8-flash-next"]["allowed_models"] = json!(["qwen3.8-flash-next"])
        },
        path: r#"aliases["qwen3.8-flash-next"].allowed_models[0]"#,
        message: "alias references, including cycles, are rejected",
    },
    Rule {
        name: "cross-family alias entry",
        valid: |_| {},
        invalid: |v| {
            v["aliases"]["qwen3.6-35b-a3b"]["allowed_models"] = json!(["b-q6", "b-q4", "a-q4"])
        },
        path: r#"aliases["qwen3.6-35b-a3b"].allowed_models[2]"#,
        message: r#""a-q4" belongs to family qwen3.8-flash-next"#,
    },
    Rule {
        name: "unknown id in alias",
        valid: |_| {},
        invalid: |v| v["aliases"]["qwen3.6-35b-a3b"]["allowed_models"] = json!(["b-q5"]),
        path: r#"aliases["qwen3.6-35b-a3b"].allowed_models[0]"#,
        message: r#""b-q5" is not a configured model id"#,
    },
    Rule {
        name: "duplicate in alias",
        valid: |_| {},
        invalid: |v| {
            v["aliases"]["qwen3.6-35b-a3b"]["allowed_models"] = json!(["b-q6", "b-q4", "b-q6"])
        },
        path: r#"aliases["qwen3.6-35b-a3b"].allowed_models[2]"#,
        message: r#""b-q6" is listed twice (first at index 0)"#,
    },
    Rule {
        name: "alias item must be a string",
        valid: |_| {},
        invalid: |v| v["aliases"]["qwen3.6-35b-a3b"]["allowed_models"] = json!([1]),
        path: r#"aliases["qwen3.6-35b-a3b"].allowed_models[0]"#,
        message: "expected a string",
    },
    Rule {
        name: "enabled_models unknown id",
        valid: |v| v["enabled_models"] = json!(["a-q4"]),
        invalid: |v| v["enabled_models"] = json!(["a-q4", "nope"]),
        path: "enabled_models[1]",
        message: r#""nope" is not a configured model id"#,
    },
    Rule {
        name: "enabled_models alias id",
        valid: |v| v["enabled_models"] = json!(["a-q4"]),
        invalid: |v| v["enabled_models"] = json!(["qwen3.8-flash-next"]),
        path: "enabled_models[0]",
        message: "is an alias; enabled_models lists concrete model ids only",
    },
    Rule {
        name: "enabled_models duplicate",
        valid: |v| v["enabled_models"] = json!(["a-q4", "b-q4"]),
        invalid: |v| v["enabled_models"] = json!(["a-q4", "b-q4", "a-q4"]),
        path: "enabled_models[2]",
        message: r#""a-q4" is listed twice (first at index 0)"#,
    },
    Rule {
        name: "enabled_models must be an array",
        valid: |v| v["enabled_models"] = json!([]),
        invalid: |v| v["enabled_models"] = json!(null),
        path: "enabled_models",
        message: "expected an array",
    },
    Rule {
        name: "models is required",
        valid: |_| {},
        invalid: |v| remove(v, "models"),
        path: "models",
        message: "required key is missing",
    },
    Rule {
        name: "models must not be empty",
        valid: |v| {
            v["models"] = json!({"x": {"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "x"}});
            remove(v, "aliases");
        },
        invalid: |v| {
            v["models"] = json!({});
            remove(v, "aliases");
        },
        path: "models",
        message: "must contain at least one model entry",
    },
    Rule {
        name: "model entry must be an object",
        valid: |_| {},
        invalid: |v| v["models"]["a-q4"] = json!("q4"),
        path: r#"models["a-q4"]"#,
        message: "expected an object",
    },
    Rule {
        name: "bad model id characters",
        valid: |v| {
            v["models"]["A_b.c-9"] =
                json!({"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "x"})
        },
        invalid: |v| {
            v["models"]["a/b"] =
                json!({"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "x"})
        },
        path: r#"models["a/b"]"#,
        message: r#"model id must be 1 to 128 ascii letters, digits, "_", "." or "-""#,
    },
    Rule {
        name: "model id with a space",
        valid: |_| {},
        invalid: |v| {
            v["models"]["a b"] =
                json!({"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "x"})
        },
        path: r#"models["a b"]"#,
        message: "model id must be",
    },
    Rule {
        name: "empty model id",
        valid: |_| {},
        invalid: |v| {
            v["models"][""] =
                json!({"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "x"})
        },
        path: r#"models[""]"#,
        message: "model id must be",
    },
    Rule {
        name: "model id length",
        valid: |v| {
            let id = "x".repeat(128);
            v["models"][id.as_str()] =
                json!({"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "x"});
        },
        invalid: |v| {
            let id = "x".repeat(129);
            v["models"][id.as_str()] =
                json!({"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "x"});
        },
        path: "models[\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"]",
        message: "model id must be",
    },
    Rule {
        name: "model id equal to an alias name",
        valid: |_| {},
        invalid: |v| {
            v["models"]["qwen3.6-35b-a3b"] =
                json!({"family": "qwen3.6-35b-a3b", "quantization": "q", "upstream_model": "x"})
        },
        path: r#"models["qwen3.6-35b-a3b"]"#,
        message: "must not be the alias name qwen3.6-35b-a3b",
    },
    Rule {
        name: "family is required",
        valid: |_| {},
        invalid: |v| remove(model(v, "a-q4"), "family"),
        path: r#"models["a-q4"].family"#,
        message: "required key is missing",
    },
    Rule {
        name: "family must be one of the two",
        valid: |v| model(v, "b-q4")["family"] = json!("qwen3.6-35b-a3b"),
        invalid: |v| model(v, "a-q4")["family"] = json!("qwen3"),
        path: r#"models["a-q4"].family"#,
        message: r#"must be "qwen3.8-flash-next" or "qwen3.6-35b-a3b", got "qwen3""#,
    },
    Rule {
        name: "quantization is required",
        valid: |_| {},
        invalid: |v| remove(model(v, "a-q4"), "quantization"),
        path: r#"models["a-q4"].quantization"#,
        message: "required key is missing",
    },
    Rule {
        name: "quantization must not be empty",
        valid: |_| {},
        invalid: |v| model(v, "a-q4")["quantization"] = json!(""),
        path: r#"models["a-q4"].quantization"#,
        message: "must not be empty",
    },
    Rule {
        name: "upstream_model is required",
        valid: |v| model(v, "a-q4")["upstream_model"] = json!("Some Name/With:chars"),
        invalid: |v| remove(model(v, "a-q4"), "upstream_model"),
        path: r#"models["a-q4"].upstream_model"#,
        message: "required key is missing",
    },
    Rule {
        name: "upstream_model without control characters",
        valid: |_| {},
        invalid: |v| model(v, "a-q4")["upstream_model"] = json!("a\nb"),
        path: r#"models["a-q4"].upstream_model"#,
        message: "must not contain control characters",
    },
    Rule {
        name: "fine_tune is a string or null",
        valid: |v| model(v, "a-q4")["fine_tune"] = json!("gsq-rco"),
        invalid: |v| model(v, "a-q4")["fine_tune"] = json!(5),
        path: r#"models["a-q4"].fine_tune"#,
        message: "expected a string or null",
    },
    Rule {
        name: "installed is a boolean",
        valid: |v| model(v, "a-q4")["installed"] = json!(true),
        invalid: |v| model(v, "a-q4")["installed"] = json!("true"),
        path: r#"models["a-q4"].installed"#,
        message: "expected a boolean",
    },
    Rule {
        name: "legacy enabled conflicts with installed",
        valid: |v| {
            model(v, "a-q4")["installed"] = json!(true);
            model(v, "a-q4")["enabled"] = json!(true);
        },
        invalid: |v| {
            model(v, "a-q4")["installed"] = json!(false);
            model(v, "a-q4")["enabled"] = json!(true);
        },
        path: r#"models["a-q4"].enabled"#,
        message: "legacy enabled is a spelling of installed and must agree with it",
    },
    Rule {
        name: "legacy enabled is a boolean",
        valid: |v| model(v, "a-q4")["enabled"] = json!(false),
        invalid: |v| model(v, "a-q4")["enabled"] = json!(1),
        path: r#"models["a-q4"].enabled"#,
        message: "expected a boolean",
    },
    Rule {
        name: "profile must be absolute",
        valid: |v| model(v, "a-q4")["profile"] = json!("/var/lib/strata/profiles/a.json"),
        invalid: |v| model(v, "a-q4")["profile"] = json!("profiles/a.json"),
        path: r#"models["a-q4"].profile"#,
        message: "must be an absolute path",
    },
    Rule {
        name: "profile may be null",
        valid: |v| model(v, "a-q4")["profile"] = json!(null),
        invalid: |v| model(v, "a-q4")["profile"] = json!(true),
        path: r#"models["a-q4"].profile"#,
        message: "expected an absolute path string or null",
    },
    Rule {
        name: "python is required",
        valid: |_| {},
        invalid: |v| remove(v, "python"),
        path: "python",
        message: "required key is missing",
    },
    Rule {
        name: "python must be absolute",
        valid: |v| v["python"] = json!("/usr/bin/python3"),
        invalid: |v| v["python"] = json!("python3"),
        path: "python",
        message: "must be an absolute path",
    },
    Rule {
        name: "strata_dir must be absolute",
        valid: |v| v["strata_dir"] = json!("/srv/strata"),
        invalid: |v| v["strata_dir"] = json!("./strata"),
        path: "strata_dir",
        message: "must be an absolute path",
    },
    Rule {
        name: "strata_dir is required",
        valid: |_| {},
        invalid: |v| remove(v, "strata_dir"),
        path: "strata_dir",
        message: "required key is missing",
    },
    Rule {
        name: "control_socket is required",
        valid: |_| {},
        invalid: |v| remove(v, "control_socket"),
        path: "control_socket",
        message: "required key is missing",
    },
    Rule {
        name: "control_socket must be absolute",
        valid: |v| v["control_socket"] = json!("/tmp/x/control.sock"),
        invalid: |v| v["control_socket"] = json!("control.sock"),
        path: "control_socket",
        message: "must be an absolute path",
    },
    Rule {
        name: "control_socket must name a file",
        valid: |_| {},
        invalid: |v| v["control_socket"] = json!("/"),
        path: "control_socket",
        message: "must name a socket file",
    },
    Rule {
        name: "supervisor_socket must be absolute",
        valid: |v| v["supervisor_socket"] = json!("/run/other/supervisor.sock"),
        invalid: |v| v["supervisor_socket"] = json!("supervisor.sock"),
        path: "supervisor_socket",
        message: "must be an absolute path",
    },
    Rule {
        name: "supervisor_socket differs from control_socket",
        valid: |v| v["supervisor_socket"] = json!("/run/strata-router/sup.sock"),
        invalid: |v| v["supervisor_socket"] = json!("/run/strata-router/control.sock"),
        path: "supervisor_socket",
        message: "must differ from control_socket",
    },
    Rule {
        name: "default supervisor_socket collides with control_socket",
        valid: |_| {},
        invalid: |v| v["control_socket"] = json!("/run/strata-router/supervisor.sock"),
        path: "supervisor_socket",
        message: "must differ from control_socket",
    },
    Rule {
        name: "request_log_path must be absolute",
        valid: |v| v["request_log_path"] = json!("/var/lib/strata-router/requests.jsonl"),
        invalid: |v| v["request_log_path"] = json!("requests.jsonl"),
        path: "request_log_path",
        message: "must be an absolute path",
    },
    Rule {
        name: "listen must be loopback",
        valid: |v| v["listen"] = json!("127.0.0.2:9000"),
        invalid: |v| v["listen"] = json!("0.0.0.0:8088"),
        path: "listen",
        message: "must be a loopback address",
    },
    Rule {
        name: "listen v6 must be loopback",
        valid: |v| v["listen"] = json!("[::1]:8088"),
        invalid: |v| v["listen"] = json!("[::]:8088"),
        path: "listen",
        message: "must be a loopback address",
    },
    Rule {
        name: "listen on a LAN address",
        valid: |_| {},
        invalid: |v| v["listen"] = json!("192.168.1.10:8088"),
        path: "listen",
        message: "must be a loopback address",
    },
    Rule {
        name: "listen must be an ip and port",
        valid: |_| {},
        invalid: |v| v["listen"] = json!("localhost:8088"),
        path: "listen",
        message: "expected an ip address and port",
    },
    Rule {
        name: "listen needs a port",
        valid: |_| {},
        invalid: |v| v["listen"] = json!("127.0.0.1"),
        path: "listen",
        message: "expected an ip address and port",
    },
    Rule {
        name: "backend_port is required",
        valid: |_| {},
        invalid: |v| remove(v, "backend_port"),
        path: "backend_port",
        message: "required key is missing",
    },
    Rule {
        name: "backend_port differs from the listen port",
        valid: |v| v["listen"] = json!("127.0.0.1:8096"),
        invalid: |v| v["listen"] = json!("127.0.0.1:8095"),
        path: "backend_port",
        message: "must differ from the listen port 8095",
    },
    Rule {
        name: "backend_port default listen collision",
        valid: |_| {},
        invalid: |v| v["backend_port"] = json!(8088),
        path: "backend_port",
        message: "must differ from the listen port 8088",
    },
    Rule {
        name: "integers are not strings",
        valid: |_| {},
        invalid: |v| v["backend_port"] = json!("8095"),
        path: "backend_port",
        message: "expected an integer",
    },
    Rule {
        name: "integers are not floats",
        valid: |_| {},
        invalid: |v| v["max_pending"] = json!(16.0),
        path: "max_pending",
        message: "expected an integer",
    },
    Rule {
        name: "booleans are booleans",
        valid: |v| v["wait_when_busy"] = json!(true),
        invalid: |v| v["wait_when_busy"] = json!("yes"),
        path: "wait_when_busy",
        message: "expected a boolean",
    },
    Rule {
        name: "cooldown_max_ms is at least cooldown_ms",
        valid: |v| v["cooldown_max_ms"] = json!(600_000),
        invalid: |v| {
            v["cooldown_ms"] = json!(30_000);
            v["cooldown_max_ms"] = json!(29_999)
        },
        path: "cooldown_max_ms",
        message: "must be at least cooldown_ms (30000), got 29999",
    },
    Rule {
        name: "readiness is auto, ready_file or health",
        valid: |v| v["readiness"] = json!("auto"),
        invalid: |v| v["readiness"] = json!("ready-file"),
        path: "readiness",
        message: "must be \"auto\", \"ready_file\" or \"health\"",
    },
    Rule {
        name: "require_socket_activation is a boolean",
        valid: |v| v["require_socket_activation"] = json!(true),
        invalid: |v| v["require_socket_activation"] = json!(null),
        path: "require_socket_activation",
        message: "expected a boolean",
    },
    Rule {
        name: "queue_ms is ignored but non-negative in wait-first mode",
        valid: |v| {
            v["wait_when_busy"] = json!(true);
            v["queue_ms"] = json!(u64::MAX);
        },
        invalid: |v| {
            v["wait_when_busy"] = json!(true);
            v["queue_ms"] = json!(-1);
        },
        path: "queue_ms",
        message: "must be at least 0, got -1",
    },
    Rule {
        name: "response_ms 0 only in wait-first mode",
        valid: |v| {
            v["wait_when_busy"] = json!(true);
            v["response_ms"] = json!(0);
        },
        invalid: |v| v["response_ms"] = json!(0),
        path: "response_ms",
        message: "must be between 1 and 86400000, got 0",
    },
];

#[test]
fn every_rule_has_a_valid_and_an_invalid_case() {
    let mut failures = Vec::new();
    for rule in RULES {
        let valid = with(rule.valid);
        if let Err(err) = parse(&valid) {
            failures.push(format!("{}: valid case rejected: {err}", rule.name));
        }
        match parse(&with(rule.invalid)) {
            Ok(_) => failures.push(format!("{}: invalid case accepted", rule.name)),
            Err(err) => {
                if err.path != rule.path || !err.message.contains(rule.message) {
                    failures.push(format!(
                        "{}: expected `{}: ...{}...`, got `{err}`",
                        rule.name, rule.path, rule.message
                    ));
                }
                assert_eq!(err.to_string(), format!("{}: {}", err.path, err.message));
                assert!(
                    !err.message.ends_with('.'),
                    "{}: trailing period",
                    rule.name
                );
                assert_eq!(
                    err.message.chars().next().map(|c| c.is_uppercase()),
                    Some(false),
                    "{}: message starts uppercase",
                    rule.name
                );
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An integer key with its range, default and where it lands in `Config`.
struct Range {
    key: &'static str,
    wait_first: bool,
    min: u64,
    max: u64,
    default: Option<u64>,
    get: fn(&Config) -> u64,
}

const DAY: u64 = 86_400_000;

const RANGES: &[Range] = &[
    Range {
        key: "backend_port",
        wait_first: false,
        min: 1,
        max: 65535,
        default: None,
        get: |c| c.backend_port.into(),
    },
    Range {
        key: "max_request_body_bytes",
        wait_first: false,
        min: 1,
        max: 1_073_741_824,
        default: Some(268_435_456),
        get: |c| c.max_request_body_bytes,
    },
    Range {
        key: "request_log_max_bytes",
        wait_first: false,
        min: 4096,
        max: 1_073_741_824,
        default: Some(16_777_216),
        get: |c| c.request_log.max_bytes,
    },
    Range {
        key: "request_log_rotate_files",
        wait_first: false,
        min: 0,
        max: 100,
        default: Some(3),
        get: |c| c.request_log.rotate_files.into(),
    },
    Range {
        key: "request_log_capacity",
        wait_first: false,
        min: 1,
        max: 100_000,
        default: Some(2048),
        get: |c| c.request_log.capacity as u64,
    },
    Range {
        key: "max_pending",
        wait_first: false,
        min: 1,
        max: 100_000,
        default: Some(16),
        get: |c| c.scheduling.max_pending as u64,
    },
    Range {
        key: "max_pending",
        wait_first: true,
        min: 1,
        max: 100_000,
        default: Some(16),
        get: |c| c.scheduling.max_pending as u64,
    },
    Range {
        key: "queue_ms",
        wait_first: false,
        min: 1,
        max: DAY,
        default: Some(300_000),
        get: |c| c.timers.queue_ms,
    },
    Range {
        key: "response_ms",
        wait_first: false,
        min: 1,
        max: DAY,
        default: Some(600_000),
        get: |c| c.timers.response_ms,
    },
    Range {
        key: "response_ms",
        wait_first: true,
        min: 0,
        max: DAY,
        default: Some(600_000),
        get: |c| c.timers.response_ms,
    },
    Range {
        key: "startup_ms",
        wait_first: false,
        min: 1,
        max: DAY,
        default: Some(120_000),
        get: |c| c.timers.startup_ms,
    },
    Range {
        key: "cooldown_ms",
        wait_first: false,
        min: 0,
        max: DAY,
        default: Some(30_000),
        get: |c| c.timers.cooldown_ms,
    },
    Range {
        key: "idle_ms",
        wait_first: false,
        min: 1,
        max: DAY,
        default: Some(900_000),
        get: |c| c.timers.idle_ms,
    },
    Range {
        key: "shutdown_ms",
        wait_first: false,
        min: 1,
        max: DAY,
        default: Some(10_000),
        get: |c| c.timers.shutdown_ms,
    },
    // Omitted drain_ms resolves to shutdown_ms (legacy) or 0 (wait-first).
    Range {
        key: "drain_ms",
        wait_first: false,
        min: 0,
        max: DAY,
        default: Some(10_000),
        get: |c| c.timers.drain_ms,
    },
    Range {
        key: "drain_ms",
        wait_first: true,
        min: 0,
        max: DAY,
        default: Some(0),
        get: |c| c.timers.drain_ms,
    },
    Range {
        key: "model_grace_ms",
        wait_first: false,
        min: 0,
        max: 600_000,
        default: Some(2000),
        get: |c| c.timers.model_grace_ms,
    },
    Range {
        key: "model_hold_max_ms",
        wait_first: true,
        min: 0,
        max: DAY,
        default: Some(0),
        get: |c| c.timers.model_hold_max_ms,
    },
    Range {
        key: "stream_idle_ms",
        wait_first: false,
        min: 0,
        max: DAY,
        default: Some(0),
        get: |c| c.timers.stream_idle_ms,
    },
    Range {
        key: "cache_lookup_ms",
        wait_first: false,
        min: 0,
        max: 10_000,
        default: Some(1000),
        get: |c| c.timers.cache_lookup_ms,
    },
    Range {
        key: "cache_max_active",
        wait_first: false,
        min: 0,
        max: 1024,
        default: Some(0),
        get: |c| c.scheduling.cache_max_active as u64,
    },
    Range {
        key: "cache_max_active",
        wait_first: true,
        min: 0,
        max: 1024,
        default: Some(0),
        get: |c| c.scheduling.cache_max_active as u64,
    },
    Range {
        key: "prefetch_max_bytes",
        wait_first: false,
        min: 1,
        max: 1 << 50,
        default: Some(128 << 30),
        get: |c| c.prefetch.max_bytes,
    },
    Range {
        key: "prefetch_min_free_bytes",
        wait_first: false,
        min: 0,
        max: 1 << 50,
        default: Some(4 << 30),
        get: |c| c.prefetch.min_free_bytes,
    },
];

#[test]
fn every_integer_range_edge_and_default() {
    let mut failures = Vec::new();
    for range in RANGES {
        let label = format!("{} (wait_first: {})", range.key, range.wait_first);
        let config_with = |value: Option<Value>| {
            let mut config = base();
            config["wait_when_busy"] = json!(range.wait_first);
            // Keep the listen port out of backend_port's way.
            config["listen"] = json!("127.0.0.1:0");
            match value {
                Some(value) => config[range.key] = value,
                None => remove(&mut config, range.key),
            }
            parse(&config)
        };
        let below = if range.min == 0 {
            json!(-1)
        } else {
            json!(range.min - 1)
        };
        let expected = format!("must be between {} and {}", range.min, range.max);
        for (value, what) in [(below, "min-1"), (json!(range.max + 1), "max+1")] {
            match config_with(Some(value)) {
                Err(err) if err.path == range.key && err.message.contains(&expected) => {}
                other => failures.push(format!("{label} {what}: got {other:?}")),
            }
        }
        for edge in [range.min, range.max] {
            match config_with(Some(json!(edge))) {
                Ok(config) if (range.get)(&config) == edge => {}
                Ok(config) => {
                    failures.push(format!("{label} {edge}: read {}", (range.get)(&config)))
                }
                Err(err) => failures.push(format!("{label} {edge}: rejected: {err}")),
            }
        }
        for wrong in [json!(1.5), json!("1"), json!(true)] {
            match config_with(Some(wrong.clone())) {
                Err(err) if err.path == range.key && err.message == "expected an integer" => {}
                other => failures.push(format!("{label} {wrong}: got {other:?}")),
            }
        }
        match (range.default, config_with(None)) {
            (Some(default), Ok(config)) if (range.get)(&config) == default => {}
            (None, Err(err))
                if err.path == range.key && err.message == "required key is missing" => {}
            (_, other) => failures.push(format!(
                "{label} omitted: got {:?}",
                other.map(|c| (range.get)(&c))
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn defaults_of_the_non_integer_keys() {
    let config = ok(|_| {});
    assert_eq!(config.listen, "127.0.0.1:8088".parse().unwrap());
    assert_eq!(
        config.supervisor_socket,
        std::path::Path::new("/run/strata-router/supervisor.sock")
    );
    assert!(!config.require_socket_activation);
    assert_eq!(config.readiness, Readiness::Auto);
    // No growth unless asked: the spec's fixed cooldown.
    assert_eq!(config.timers.cooldown_max_ms, config.timers.cooldown_ms);
    assert_eq!(
        ok(|v| v["cooldown_ms"] = json!(1_000))
            .timers
            .cooldown_max_ms,
        1_000
    );
    assert_eq!(
        ok(|v| v["readiness"] = json!("health")).readiness,
        Readiness::Health
    );
    assert_eq!(
        ok(|v| v["readiness"] = json!("ready_file")).readiness,
        Readiness::ReadyFile
    );
    assert!(!config.scheduling.wait_when_busy);
    assert_eq!(config.request_log.path, None);
    assert!(!config.timers.drain_ms_explicit);
    assert!(config.warnings.is_empty());
    // Legacy mode: every wait is bounded.
    assert_eq!(
        config.queue_timeout(),
        Some(std::time::Duration::from_secs(300))
    );
    assert_eq!(
        config.drain_timeout(),
        Some(std::time::Duration::from_secs(10))
    );
    assert_eq!(config.cache_active_limit(), None);
}

#[test]
fn drain_ms_follows_shutdown_ms_when_omitted_in_legacy_mode() {
    let config = ok(|v| v["shutdown_ms"] = json!(4000));
    assert_eq!(
        (config.timers.drain_ms, config.timers.drain_ms_explicit),
        (4000, false)
    );
    let config = ok(|v| {
        v["shutdown_ms"] = json!(4000);
        v["drain_ms"] = json!(0);
    });
    assert_eq!(
        (config.timers.drain_ms, config.timers.drain_ms_explicit),
        (0, true)
    );
    assert_eq!(config.drain_timeout(), None);
}

#[test]
fn wait_first_mode_relaxes_queue_and_response() {
    let config = ok(|v| {
        v["wait_when_busy"] = json!(true);
        v["queue_ms"] = json!(0);
        v["response_ms"] = json!(0);
        v["cache_max_active"] = json!(1);
    });
    assert_eq!(config.queue_timeout(), None);
    assert_eq!(config.response_timeout(), None);
    assert_eq!(config.drain_timeout(), None);
    assert_eq!(config.cache_active_limit(), Some(1));
    // cache_lookup_ms: 0 disables the extra limit too.
    let config = ok(|v| {
        v["cache_max_active"] = json!(1);
        v["cache_lookup_ms"] = json!(0);
    });
    assert_eq!(config.cache_active_limit(), None);
    assert_eq!(config.cache_lookup_timeout(), None);
}

#[test]
fn whole_document_errors_use_the_root_path() {
    for (text, message) in [
        ("", "invalid json"),
        ("{", "invalid json"),
        ("[]", "expected a json object at the top level"),
        (
            r#"{"backend_port": 1, "backend_port": 2}"#,
            r#"duplicate key "backend_port""#,
        ),
        ("{} x", "invalid json"),
    ] {
        let err = Config::from_json_str(text).unwrap_err();
        assert_eq!(err.path, "$", "{text}");
        assert!(err.message.contains(message), "{text}: {err}");
    }
}

#[test]
fn duplicate_keys_inside_models_are_refused() {
    let text = base().to_string().replacen(
        r#""quantization":"q4_k_m""#,
        r#""quantization":"q4_k_m","quantization":"q8_0""#,
        1,
    );
    let err = Config::from_json_str(&text).unwrap_err();
    assert_eq!(err.path, "$");
    assert!(
        err.message.contains(r#"duplicate key "quantization""#),
        "{err}"
    );
}

#[test]
fn model_entries_are_read_in_full() {
    let config = ok(|v| {
        let m = model(v, "a-q8");
        m["profile"] = json!("/p/a-q8.json");
        m["installed"] = json!(true);
        m["compatible"] = json!(true);
        m["metadata"] = json!({"meta": {"n_ctx": 8}, "thinking": null});
    });
    let entry = config.registry.model("a-q8").unwrap();
    assert_eq!(entry.family, Family::Qwen38FlashNext);
    assert_eq!(entry.fine_tune.as_deref(), Some("ft"));
    assert_eq!(entry.quantization, "q8_0");
    assert_eq!(entry.upstream_model, "a-q8");
    assert_eq!(
        entry.profile.as_deref(),
        Some(std::path::Path::new("/p/a-q8.json"))
    );
    assert!(entry.installed && entry.compatible);
    assert_eq!(entry.metadata.meta, Some(json!({"n_ctx": 8})));
    // An explicit null is the same as leaving the field out.
    assert_eq!(entry.metadata.thinking, None);
    // Provisional until check_profiles reads the file.
    assert_eq!(entry.prepared, ModelStatus::PreparedUnverified);
    let base_weights = config.registry.model("a-iq3").unwrap();
    assert_eq!(base_weights.fine_tune, None);
    assert!(!base_weights.installed && !base_weights.compatible);
    assert_eq!(base_weights.prepared, ModelStatus::NotInstalled);
}

#[test]
fn static_statuses_need_no_profile_io() {
    let config = ok(|v| {
        model(v, "a-q4")["installed"] = json!(true);
        let m = model(v, "a-q8");
        m["installed"] = json!(true);
        m["compatible"] = json!(true);
        m["profile"] = json!(null);
        // Compatible but not installed is still not_installed.
        model(v, "b-q4")["compatible"] = json!(true);
    });
    let status = |id: &str| config.registry.model(id).unwrap().prepared;
    assert_eq!(status("a-q4"), ModelStatus::Incompatible);
    assert_eq!(status("a-q8"), ModelStatus::MissingProfile);
    assert_eq!(status("b-q4"), ModelStatus::NotInstalled);
    assert!(!ModelStatus::MissingProfile.is_prepared());
    assert!(ModelStatus::PreparedUnverified.is_prepared());
    assert!(ModelStatus::Verified.is_prepared());
    assert!(ModelStatus::Loaded.is_prepared());
}

#[test]
fn legacy_enabled_spells_installed() {
    let config = ok(|v| model(v, "a-q4")["enabled"] = json!(true));
    assert!(config.registry.model("a-q4").unwrap().installed);
    // It is not access control: the model stays enabled for clients.
    assert!(config.registry.is_enabled("a-q4"));
    assert_eq!(config.warnings.len(), 1);
    assert!(
        config.warnings[0].starts_with(r#"models["a-q4"].enabled: legacy spelling of installed"#)
    );
    let config = ok(|v| model(v, "a-q4")["enabled"] = json!(false));
    assert!(!config.registry.model("a-q4").unwrap().installed);
    let config = ok(|v| {
        model(v, "a-q4")["enabled"] = json!(true);
        model(v, "a-q4")["installed"] = json!(true);
    });
    assert!(config.registry.model("a-q4").unwrap().installed);
}

#[test]
fn models_are_sorted_by_id() {
    let config = ok(|_| {});
    let ids: Vec<&str> = config
        .registry
        .models()
        .iter()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["a-iq3", "a-q4", "a-q8", "b-q4", "b-q6"]);
}

#[test]
fn enabled_models_omitted_means_all_in_id_order() {
    let config = ok(|_| {});
    assert_eq!(
        config.registry.enabled_ids(),
        ["a-iq3", "a-q4", "a-q8", "b-q4", "b-q6"]
    );
    assert_eq!(config.registry.default_on_model(), Some("a-iq3"));
    assert_eq!(config.registry.aliases().count(), 2);
}

#[test]
fn enabled_models_empty_exposes_nothing() {
    let config = ok(|v| v["enabled_models"] = json!([]));
    let registry = &config.registry;
    assert!(registry.enabled_ids().is_empty());
    assert_eq!(registry.enabled_models().count(), 0);
    assert_eq!(registry.aliases().count(), 0);
    assert_eq!(registry.default_on_model(), None);
    assert_eq!(registry.resolve("a-q4", None), Resolution::NotFound);
    assert_eq!(
        registry.resolve("qwen3.8-flash-next", None),
        Resolution::NotFound
    );
    // Still configured, so still recognized for accounting.
    assert!(registry.is_known_name("a-q4"));
    assert!(registry.is_known_name("qwen3.8-flash-next"));
}

#[test]
fn enabled_models_keeps_its_order() {
    let config = ok(|v| v["enabled_models"] = json!(["b-q4", "a-q4"]));
    assert_eq!(config.registry.enabled_ids(), ["b-q4", "a-q4"]);
    assert_eq!(config.registry.default_on_model(), Some("b-q4"));
    let ids: Vec<&str> = config
        .registry
        .enabled_models()
        .map(|m| m.id.as_str())
        .collect();
    assert_eq!(ids, ["b-q4", "a-q4"]);
    assert!(config.registry.is_enabled("a-q4"));
    assert!(!config.registry.is_enabled("a-q8"));
}

#[test]
fn effective_alias_lists_follow_allowed_order_not_enabled_order() {
    // a-q8 (the preferred entry) is not enabled, so a-q4 becomes preferred.
    let config = ok(|v| v["enabled_models"] = json!(["a-iq3", "b-q6", "a-q4", "b-q4"]));
    let alias = config.registry.alias("qwen3.8-flash-next").unwrap();
    assert_eq!(alias.allowed_models, ["a-q8", "a-q4", "a-iq3"]);
    assert_eq!(alias.effective, ["a-q4", "a-iq3"]);
    assert_eq!(alias.preferred(), Some("a-q4"));
    match config.registry.resolve("qwen3.8-flash-next", None) {
        Resolution::Alias { model, .. } => assert_eq!(model.id, "a-q4"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn alias_without_enabled_entries_disappears() {
    let config = ok(|v| v["enabled_models"] = json!(["a-q4"]));
    let registry = &config.registry;
    assert!(registry.alias("qwen3.6-35b-a3b").is_none());
    let visible: Vec<&str> = registry.aliases().map(|a| a.name.as_str()).collect();
    assert_eq!(visible, ["qwen3.8-flash-next"]);
    assert_eq!(
        registry.resolve("qwen3.6-35b-a3b", None),
        Resolution::NotFound
    );
    assert_eq!(registry.configured_aliases().len(), 2);
    assert!(registry.configured_aliases()[1].effective.is_empty());
    assert_eq!(registry.family_alias(Family::Qwen3635bA3b), None);
}

#[test]
fn aliases_are_listed_in_a_fixed_order() {
    let config = ok(|_| {});
    let names: Vec<&str> = config.registry.aliases().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["qwen3.8-flash-next", "qwen3.6-35b-a3b"]);
    let config = ok(|v| remove(v, "aliases"));
    assert_eq!(config.registry.aliases().count(), 0);
    assert!(!config.registry.is_known_name("qwen3.8-flash-next"));
}

#[test]
fn resolve_table() {
    struct Case {
        name: &'static str,
        mutate: fn(&mut Value),
        requested: &'static str,
        loaded: Option<&'static str>,
        expect: Option<(&'static str, bool)>, // (model id, via alias); None = NotFound
    }
    let cases = [
        Case {
            name: "enabled concrete",
            mutate: |_| {},
            requested: "a-q4",
            loaded: Some("b-q4"),
            expect: Some(("a-q4", false)),
        },
        Case {
            name: "loaded allowed model wins",
            mutate: |_| {},
            requested: "qwen3.8-flash-next",
            loaded: Some("a-iq3"),
            expect: Some(("a-iq3", true)),
        },
        Case {
            name: "nothing loaded: first preferred",
            mutate: |_| {},
            requested: "qwen3.8-flash-next",
            loaded: None,
            expect: Some(("a-q8", true)),
        },
        Case {
            name: "other family loaded: first preferred",
            mutate: |_| {},
            requested: "qwen3.8-flash-next",
            loaded: Some("b-q6"),
            expect: Some(("a-q8", true)),
        },
        Case {
            name: "loaded but disabled is not chosen",
            mutate: |v| v["enabled_models"] = json!(["a-q8", "a-q4"]),
            requested: "qwen3.8-flash-next",
            loaded: Some("a-iq3"),
            expect: Some(("a-q8", true)),
        },
        Case {
            name: "loaded but not in the alias list is not chosen",
            mutate: |v| {
                v["aliases"]["qwen3.8-flash-next"]["allowed_models"] = json!(["a-q8", "a-q4"])
            },
            requested: "qwen3.8-flash-next",
            loaded: Some("a-iq3"),
            expect: Some(("a-q8", true)),
        },
        Case {
            name: "uninstalled preferred entry is returned, no fallback",
            mutate: |v| {
                let m = model(v, "a-q4");
                m["installed"] = json!(true);
                m["compatible"] = json!(true);
                m["profile"] = json!("/p.json");
            },
            requested: "qwen3.8-flash-next",
            loaded: None,
            expect: Some(("a-q8", true)),
        },
        Case {
            name: "disabled concrete",
            mutate: |v| v["enabled_models"] = json!(["a-q8"]),
            requested: "a-q4",
            loaded: None,
            expect: None,
        },
        Case {
            name: "unknown",
            mutate: |_| {},
            requested: "gpt-4",
            loaded: Some("a-q4"),
            expect: None,
        },
        Case {
            name: "alias not configured",
            mutate: |v| remove(&mut v["aliases"], "qwen3.6-35b-a3b"),
            requested: "qwen3.6-35b-a3b",
            loaded: None,
            expect: None,
        },
    ];
    for case in cases {
        let config = ok(case.mutate);
        let got = match config.registry.resolve(case.requested, case.loaded) {
            Resolution::Concrete(model) => Some((model.id.as_str(), false)),
            Resolution::Alias { alias, model } => {
                assert_eq!(alias.name, case.requested, "{}", case.name);
                assert_eq!(alias.family, model.family, "{}", case.name);
                Some((model.id.as_str(), true))
            }
            Resolution::NotFound => None,
        };
        assert_eq!(got, case.expect, "{}", case.name);
    }
    // The uninstalled preferred entry keeps its status for the caller to
    // report; resolve never substitutes the prepared a-q4.
    let config = ok(|_| {});
    match config.registry.resolve("qwen3.8-flash-next", None) {
        Resolution::Alias { model, .. } => assert_eq!(model.prepared, ModelStatus::NotInstalled),
        other => panic!("{other:?}"),
    }
}

#[test]
fn known_names_are_configured_ids_and_aliases() {
    let config = ok(|v| v["enabled_models"] = json!(["a-q4"]));
    for name in ["a-q4", "a-q8", "qwen3.8-flash-next", "qwen3.6-35b-a3b"] {
        assert!(config.registry.is_known_name(name), "{name}");
    }
    for name in ["", "gpt-4", "A-Q4", "qwen3"] {
        assert!(!config.registry.is_known_name(name), "{name}");
    }
}

/// The base config's fingerprint; see `fingerprint_is_stable`.
const PINNED_FINGERPRINT: u64 = 0xb625_e7be_9f28_67b4;

#[test]
fn fingerprint_is_stable() {
    let first = ok(|_| {}).fingerprint();
    // Same content, different key order and layout.
    let reordered = r#"{
        "aliases": {
            "qwen3.6-35b-a3b": {"allowed_models": ["b-q6", "b-q4"]},
            "qwen3.8-flash-next": {"allowed_models": ["a-q8", "a-q4", "a-iq3"]}
        },
        "models": {
            "b-q6": {"upstream_model": "b-q6", "quantization": "q6_k", "family": "qwen3.6-35b-a3b"},
            "b-q4": {"upstream_model": "b-q4", "quantization": "q4_k_m", "family": "qwen3.6-35b-a3b"},
            "a-q8": {"upstream_model": "a-q8", "quantization": "q8_0", "fine_tune": "ft", "family": "qwen3.8-flash-next"},
            "a-q4": {"upstream_model": "a-q4", "quantization": "q4_k_m", "family": "qwen3.8-flash-next"},
            "a-iq3": {"upstream_model": "a-iq3", "quantization": "iq3_xxs", "family": "qwen3.8-flash-next"}
        },
        "control_socket": "/run/strata-router/control.sock",
        "backend_port": 8095,
        "strata_dir": "/opt/strata",
        "python": "/opt/strata/venv/bin/python"
    }"#;
    assert_eq!(
        Config::from_json_str(reordered).unwrap().fingerprint(),
        first
    );
    // Pinned: a change here means every deployed proxy/supervisor pair
    // built before it would refuse each other, so it must be deliberate.
    assert_eq!(first, PINNED_FINGERPRINT, "fingerprint is {first:#018x}");
}

/// A named edit of the base config.
type Change = (&'static str, fn(&mut Value));

#[test]
fn fingerprint_follows_the_registry_s_ids_and_orders() {
    // Each key's own effect on the fingerprint is checked against its
    // declaration (`fingerprinted` in config::keys, by keys_tests.rs);
    // these are the registry's facts no single key's value stands for.
    let base_print = ok(|_| {}).fingerprint();
    let changes: &[Change] = &[
        ("model id", |v| {
            let entry = v["models"].as_object_mut().unwrap().remove("b-q6").unwrap();
            v["models"]["b-q7"] = entry;
            v["aliases"]["qwen3.6-35b-a3b"]["allowed_models"] = json!(["b-q7", "b-q4"]);
        }),
        ("enabled list", |v| {
            v["enabled_models"] = json!(["a-q4", "a-q8", "a-iq3", "b-q4"])
        }),
        ("enabled order", |v| {
            v["enabled_models"] = json!(["b-q6", "a-iq3", "a-q4", "a-q8", "b-q4"])
        }),
        ("alias order", |v| {
            v["aliases"]["qwen3.6-35b-a3b"]["allowed_models"] = json!(["b-q4", "b-q6"])
        }),
        ("alias removed", |v| {
            remove(&mut v["aliases"], "qwen3.6-35b-a3b")
        }),
    ];
    for (name, change) in changes {
        assert_ne!(ok(*change).fingerprint(), base_print, "{name}");
    }
    // The same effective config, spelled differently.
    let enabled_in_id_order =
        ok(|v| v["enabled_models"] = json!(["a-iq3", "a-q4", "a-q8", "b-q4", "b-q6"]));
    assert_eq!(enabled_in_id_order.fingerprint(), base_print);
}

#[test]
fn config_errors_are_std_errors() {
    let err: Box<dyn std::error::Error> =
        Box::new(parse(&with(|v| remove(v, "python"))).unwrap_err());
    assert_eq!(err.to_string(), "python: required key is missing");
}

//! Profile checks through real files: each rule a profile can break, the
//! generic detail it produces, and what is read from a valid profile.

use serde_json::{Value, json};
use std::path::Path;
use strata_protocol::config::{Config, ModelStatus};
use strata_test_support::TempDir;

/// A config with one installed, compatible model `m` whose backend must
/// report `upstream`, using `profile`.
fn config_text(profile: Option<&Path>, upstream: &str) -> String {
    json!({
        "python": "/usr/bin/python3",
        "strata_dir": "/opt/strata",
        "backend_port": 8095,
        "control_socket": "/run/strata-router/control.sock",
        "models": {
            "m": {
                "family": "qwen3.8-flash-next",
                "quantization": "q4_k_m",
                "upstream_model": upstream,
                "installed": true,
                "compatible": true,
                "profile": profile,
                "metadata": {"meta": {"from": "config"}}
            }
        }
    })
    .to_string()
}

/// Checks `profile` (written to a file) for a model whose upstream is
/// `upstream`; returns status and detail.
fn check(profile: &str, upstream: &str) -> (ModelStatus, Option<String>) {
    let dir = TempDir::new("profiles");
    let path = dir.write("profile.json", profile);
    let mut config = Config::from_json_str(&config_text(Some(&path), upstream)).unwrap();
    config.check_profiles();
    let entry = &config.registry.models()[0];
    (entry.prepared, entry.prepared_detail.clone())
}

#[test]
fn invalid_profiles() {
    let cases: &[(&str, Value, &str)] = &[
        (
            "lazy loading",
            json!({"model_name": "up", "lazy_load": true}),
            "profile sets lazy_load: true",
        ),
        (
            "before_load string",
            json!({"model_name": "up", "before_load": "nvidia-smi"}),
            "profile sets before_load commands",
        ),
        (
            "before_load list",
            json!({"model_name": "up", "before_load": ["nvidia-smi"]}),
            "profile sets before_load commands",
        ),
        (
            "api key",
            json!({"model_name": "up", "api_key": "sk-SECRET"}),
            "profile contains an api_key",
        ),
        (
            "empty api key",
            json!({"model_name": "up", "api_key": ""}),
            "profile contains an api_key",
        ),
        (
            "api key list",
            json!({"model_name": "up", "api_key": ["sk-SECRET"]}),
            "profile contains an api_key",
        ),
        (
            "model_name mismatch",
            json!({"model_name": "SECRET-other"}),
            "profile model_name differs from upstream_model",
        ),
        (
            "model_name absent",
            json!({}),
            "strata serves its default qwen3.8-flash-next",
        ),
        (
            "not an object",
            json!(["model_name", "up"]),
            "profile is not a json object",
        ),
        (
            "bad cache threshold",
            json!({"model_name": "up", "conversation_cache_min_tokens": "SECRET"}),
            "conversation_cache_min_tokens",
        ),
        (
            "bad router_metadata",
            json!({"model_name": "up", "router_metadata": "SECRET"}),
            "router_metadata is not an object",
        ),
    ];
    for (name, profile, detail) in cases {
        let (status, got) = check(&profile.to_string(), "up");
        assert_eq!(status, ModelStatus::InvalidProfile, "{name}");
        let got = got.unwrap_or_default();
        assert!(got.contains(detail), "{name}: {got}");
        assert!(
            !got.contains("SECRET"),
            "{name}: detail echoes the profile: {got}"
        );
    }
}

#[test]
fn unparsable_profile_reports_only_a_position() {
    let (status, detail) = check("{\"api_key\": \"SECRET\",", "up");
    assert_eq!(status, ModelStatus::InvalidProfile);
    let detail = detail.unwrap();
    assert!(
        detail.starts_with("profile is not valid json (line 1, column"),
        "{detail}"
    );
    assert!(!detail.contains("SECRET"));
}

#[test]
fn accepted_profiles() {
    let cases: &[(&str, Value, &str)] = &[
        ("plain", json!({"model_name": "up"}), "up"),
        ("default model_name", json!({}), "qwen3.8-flash-next"),
        (
            "explicitly off",
            json!({"model_name": "up", "lazy_load": false, "before_load": [], "api_key": null}),
            "up",
        ),
        (
            "empty before_load string",
            json!({"model_name": "up", "before_load": ""}),
            "up",
        ),
        (
            "other strata keys and the fake's own object are ignored",
            json!({"model_name": "up", "exe": "bin/strata", "args": ["--max-context", "8192"], "sampling": {}, "fake": {"load_ms": 5}}),
            "up",
        ),
    ];
    for (name, profile, upstream) in cases {
        let (status, detail) = check(&profile.to_string(), upstream);
        assert_eq!(
            (status, detail),
            (ModelStatus::PreparedUnverified, None),
            "{name}"
        );
    }
}

#[test]
fn valid_profile_supplies_cache_threshold_and_metadata() {
    let dir = TempDir::new("profiles");
    let path = dir.write(
        "p.json",
        &json!({
            "model_name": "up",
            "conversation_cache_min_tokens": 2048,
            "router_metadata": {
                "meta": {"from": "profile"},
                "architecture": {"input_modalities": ["text"]},
                "thinking": true,
                "ignored": 1
            }
        })
        .to_string(),
    );
    let config = Config::load(&dir.write("config.json", &config_text(Some(&path), "up"))).unwrap();
    let entry = &config.registry.models()[0];
    assert_eq!(entry.prepared, ModelStatus::PreparedUnverified);
    let info = entry.profile_info.as_ref().expect("profile info");
    assert_eq!(info.conversation_cache_min_tokens, Some(2048));
    assert_eq!(info.router_metadata.thinking, Some(json!(true)));
    // Config metadata wins field by field; the profile fills the gaps.
    let effective = entry.effective_metadata();
    assert_eq!(effective.meta, Some(json!({"from": "config"})));
    assert_eq!(
        effective.architecture,
        Some(json!({"input_modalities": ["text"]}))
    );
    assert_eq!(effective.thinking, Some(json!(true)));
}

#[test]
fn missing_profiles() {
    let dir = TempDir::new("profiles");
    let mut config =
        Config::from_json_str(&config_text(Some(&dir.join("absent.json")), "up")).unwrap();
    // Provisional until the file is looked at.
    assert_eq!(
        config.registry.models()[0].prepared,
        ModelStatus::PreparedUnverified
    );
    config.check_profiles();
    let entry = &config.registry.models()[0];
    assert_eq!(entry.prepared, ModelStatus::MissingProfile);
    assert_eq!(
        entry.prepared_detail.as_deref(),
        Some("profile file does not exist")
    );

    let config = Config::from_json_str(&config_text(None, "up")).unwrap();
    let entry = &config.registry.models()[0];
    assert_eq!(entry.prepared, ModelStatus::MissingProfile);
    assert_eq!(
        entry.prepared_detail.as_deref(),
        Some("no profile is configured")
    );
}

#[test]
fn a_directory_is_not_a_profile() {
    let dir = TempDir::new("profiles");
    let mut config = Config::from_json_str(&config_text(Some(dir.path()), "up")).unwrap();
    config.check_profiles();
    let entry = &config.registry.models()[0];
    assert_eq!(entry.prepared, ModelStatus::InvalidProfile);
    assert_eq!(
        entry.prepared_detail.as_deref(),
        Some("profile path is not a regular file")
    );
}

#[test]
fn profiles_of_unusable_models_are_not_read() {
    let dir = TempDir::new("profiles");
    let bad = dir.write("bad.json", r#"{"lazy_load": true}"#);
    for (installed, compatible, expected) in [
        (false, true, ModelStatus::NotInstalled),
        (false, false, ModelStatus::NotInstalled),
        (true, false, ModelStatus::Incompatible),
    ] {
        let mut value: Value = serde_json::from_str(&config_text(Some(&bad), "up")).unwrap();
        value["models"]["m"]["installed"] = json!(installed);
        value["models"]["m"]["compatible"] = json!(compatible);
        let mut config = Config::from_json_str(&value.to_string()).unwrap();
        config.check_profiles();
        let entry = &config.registry.models()[0];
        assert_eq!(
            (entry.prepared, entry.profile_info.as_ref()),
            (expected, None)
        );
    }
}

#[test]
fn check_profiles_re_reads_the_files() {
    let dir = TempDir::new("profiles");
    let path = dir.write("p.json", r#"{"model_name": "up", "lazy_load": true}"#);
    let mut config = Config::from_json_str(&config_text(Some(&path), "up")).unwrap();
    config.check_profiles();
    assert_eq!(
        config.registry.models()[0].prepared,
        ModelStatus::InvalidProfile
    );
    dir.write("p.json", r#"{"model_name": "up"}"#);
    config.check_profiles();
    let entry = &config.registry.models()[0];
    assert_eq!(
        (entry.prepared, entry.prepared_detail.as_deref()),
        (ModelStatus::PreparedUnverified, None)
    );
}

#[test]
fn a_bad_profile_does_not_reject_the_config() {
    let dir = TempDir::new("profiles");
    let path = dir.write("p.json", "not json");
    let config_path = dir.write("config.json", &config_text(Some(&path), "up"));
    let config = Config::load(&config_path).expect("config stays valid");
    assert_eq!(
        config.registry.models()[0].prepared,
        ModelStatus::InvalidProfile
    );
}

#[test]
fn load_reports_an_unreadable_config_at_the_root() {
    let dir = TempDir::new("profiles");
    let err = Config::load(&dir.join("nope.json")).unwrap_err();
    assert_eq!(err.path, "$");
    assert!(err.message.starts_with("cannot read config file "), "{err}");
    assert!(err.message.ends_with("nope.json: no such file"), "{err}");
    let err = Config::load(&dir.write("bad.json", "{\"python\": 1}")).unwrap_err();
    assert_eq!(err.to_string(), "python: expected a string");
}

/// Which weights a model's load reads: the config's `weights` when set
/// (even empty), else the one path the profile's engine arguments name,
/// else none; `describe` names the source, never a path from the profile.
#[test]
fn the_weights_come_from_the_config_else_from_the_profile_args() {
    use std::path::PathBuf;
    use strata_protocol::config::WeightsSource;
    let dir = TempDir::new("weights");
    let profile = dir.write(
        "profile.json",
        &json!({"model_name": "up", "cwd": "engine", "args": ["--ctx", "8192", "--native", "w/m.strata"]})
            .to_string(),
    );
    let source = |weights: Option<Value>| {
        let mut doc: Value = serde_json::from_str(&config_text(Some(&profile), "up")).unwrap();
        if let Some(weights) = weights {
            doc["models"]["m"]["weights"] = weights;
        }
        let mut config = Config::from_json_str(&doc.to_string()).unwrap();
        config.check_profiles();
        config.registry.models()[0].weights_source()
    };
    let derived = source(None);
    assert_eq!(
        derived.paths(),
        [PathBuf::from("/opt/strata/engine/w/m.strata")]
    );
    assert_eq!(
        derived.describe(),
        "weights: from the profile's args (--native)"
    );
    let configured = source(Some(json!(["/srv/m", "/srv/m.extra"])));
    assert_eq!(
        configured,
        WeightsSource::Configured(vec!["/srv/m".into(), "/srv/m.extra".into()])
    );
    assert_eq!(source(Some(json!([]))).paths(), Vec::<PathBuf>::new());
    assert_eq!(
        source(Some(json!([]))),
        WeightsSource::Configured(Vec::new())
    );
    // A model whose profile does not pass its checks derives nothing.
    let mut doc: Value = serde_json::from_str(&config_text(Some(&profile), "other")).unwrap();
    doc["models"]["m"]["upstream_model"] = json!("other");
    let mut config = Config::from_json_str(&doc.to_string()).unwrap();
    config.check_profiles();
    assert_eq!(
        config.registry.models()[0].weights_source(),
        WeightsSource::None
    );
}

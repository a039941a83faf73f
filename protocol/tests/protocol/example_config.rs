//! `config.example.json` at the repository root must stay valid and keep
//! the shape the spec describes: 23 concrete builds across both families,
//! all uninstalled and incompatible, all enabled, both aliases.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use strata_protocol::config::{Config, Family, ModelStatus, TOP_LEVEL_KEYS};

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../config.example.json")
}

fn load() -> Config {
    // Its profile paths are placeholders; with every model uninstalled no
    // profile is read, so loading works on any machine.
    Config::load(&example_path()).unwrap_or_else(|err| panic!("config.example.json: {err}"))
}

#[test]
fn has_23_distinct_builds_across_both_families() {
    let config = load();
    let models = config.registry.models();
    assert_eq!(models.len(), 23);
    let families: BTreeSet<Family> = models.iter().map(|m| m.family).collect();
    assert_eq!(families.len(), 2, "both families present");
    let pairs: BTreeSet<(Option<&str>, &str)> = models
        .iter()
        .map(|m| (m.fine_tune.as_deref(), m.quantization.as_str()))
        .collect();
    assert_eq!(pairs.len(), 23, "fine_tune/quantization pairs are distinct");
    assert!(
        models.iter().any(|m| m.fine_tune.is_none()),
        "some entries are base weights"
    );
    for model in models {
        assert_eq!(model.upstream_model, model.id);
        assert!(
            model.id.starts_with(model.family.as_str()),
            "{} is named after its family",
            model.id
        );
    }
}

#[test]
fn everything_starts_uninstalled_incompatible_and_enabled() {
    let config = load();
    let registry = &config.registry;
    assert_eq!(registry.enabled_ids().len(), 23);
    let enabled: BTreeSet<&str> = registry.enabled_ids().iter().map(String::as_str).collect();
    let all: BTreeSet<&str> = registry.models().iter().map(|m| m.id.as_str()).collect();
    assert_eq!(enabled, all);
    for model in registry.models() {
        assert!(!model.installed && !model.compatible, "{}", model.id);
        assert_eq!(model.prepared, ModelStatus::NotInstalled, "{}", model.id);
    }
    assert_eq!(
        registry.default_on_model(),
        Some("qwen3.8-flash-next-gsq-rco-iq3_xxs")
    );
}

#[test]
fn both_aliases_are_present_and_same_family() {
    let config = load();
    let names: Vec<&str> = config.registry.aliases().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["qwen3.8-flash-next", "qwen3.6-35b-a3b"]);
    for alias in config.registry.aliases() {
        assert_eq!(alias.effective, alias.allowed_models);
        for id in &alias.effective {
            assert_eq!(config.registry.model(id).unwrap().family, alias.family);
        }
    }
}

#[test]
fn documents_the_spec_example_settings() {
    let config = load();
    assert!(config.scheduling.wait_when_busy);
    assert_eq!(config.scheduling.cache_max_active, 1);
    assert_eq!(config.listen, "127.0.0.1:8088".parse().unwrap());
    assert_eq!(config.backend_port, 8095);
    assert_eq!(
        config.request_log.path.as_deref(),
        Some(Path::new("/var/lib/strata-router/requests.jsonl"))
    );
    assert!(config.warnings.is_empty());
}

#[test]
fn every_path_is_absolute() {
    let config = load();
    let mut paths = vec![
        &config.python,
        &config.strata_dir,
        &config.control_socket,
        &config.supervisor_socket,
    ];
    paths.extend(config.request_log.path.iter());
    paths.extend(
        config
            .registry
            .models()
            .iter()
            .filter_map(|m| m.profile.as_ref()),
    );
    assert_eq!(paths.len(), 4 + 1 + 23);
    for path in paths {
        assert!(path.is_absolute(), "{}", path.display());
    }
}

#[test]
fn sets_every_top_level_key_explicitly() {
    // The example doubles as documentation of every key. Each is set at
    // its default, except the values the spec's example chooses and the
    // scheduling values docs/scheduling.md#tuning-model_grace_ms-from-your-own-records derives from the
    // simulator.
    let text = std::fs::read_to_string(example_path()).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys: BTreeSet<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for key in TOP_LEVEL_KEYS {
        assert!(keys.contains(key), "config.example.json lacks {key}");
    }
    assert_eq!(keys.len(), TOP_LEVEL_KEYS.len());
}

#[test]
fn the_example_s_fingerprint_is_pinned() {
    // A proxy and a supervisor built at different times compare this value
    // in their hello, so its text (fingerprint.rs) must not change by
    // accident: a refactor of the config code keeps it. A deliberate change
    // (a new fingerprinted key written even at its default, say) updates
    // this value and makes builds on either side of it refuse each other.
    assert_eq!(format!("{:016x}", load().fingerprint()), "9f2ebcc7f1f2e394");
}

//! Configs for the fake Strata backend (`tests/fake_strata`): [`ConfigBuilder`] writes a config
//! file, one fake profile per model and a private run directory into a fresh [`TempDir`], and
//! returns a [`TestConfig`].
//!
//! Layout (`DIR` is the test's `TempDir`):
//!
//! | path | what |
//! |---|---|
//! | `DIR/config.json` | the config |
//! | `DIR/profiles/ID.json` | model `ID`'s profile: `model_name` = its `upstream_model`, `fake` = its scripting keys plus `log` |
//! | `DIR/run/` | 0700 (or [`ConfigBuilder::run_dir_mode`]): `control.sock`, `supervisor.sock` |
//! | `DIR/fake.log` | the fake backend's event log, shared by every model |
//!
//! Defaults differ from the product's where tests need speed, and every one can be set:
//! `startup_ms` 10000, `cooldown_ms` 30000, `idle_ms` 600000, `shutdown_ms` 2000,
//! `model_grace_ms` 0, `backend_port` and the `listen` port from [`free_port`]. A model is
//! installed and compatible, of family `qwen3.8-flash-next` ([`DEFAULT_FAMILY`]), with
//! `upstream_model` `up-ID`, unless its [`ModelSpec`] says otherwise.
//!
//! Everything is plain JSON: this crate does not depend on strata-protocol (whose own tests
//! use it). Families are taken as anything that displays as the family name, so both a `&str`
//! and the product's `Family` work; a crate that wants the product's view of the config (its
//! `Config`, its fingerprint) wraps [`TestConfig`] and names the wrapper as the builder's `C`.

use std::fmt::Display;
use std::marker::PhantomData;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::net::free_port;
use crate::python::{fake_strata_dir, python};
use crate::tempdir::TempDir;

/// The family of a [`ModelSpec`] unless set: `qwen3.8-flash-next`.
pub const DEFAULT_FAMILY: &str = "qwen3.8-flash-next";

/// One model entry and its fake profile.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    id: String,
    family: String,
    installed: bool,
    compatible: bool,
    upstream_model: String,
    with_profile: bool,
    /// The profile's `fake` object (without `log`, which the builder adds).
    fake: Map<String, Value>,
    /// Extra top-level profile keys.
    profile_extra: Map<String, Value>,
    /// Extra keys of the config's model entry.
    entry_extra: Map<String, Value>,
}

impl ModelSpec {
    /// An installed, compatible [`DEFAULT_FAMILY`] model with `upstream_model` `up-ID`.
    pub fn new(id: &str) -> ModelSpec {
        ModelSpec {
            id: id.to_owned(),
            family: DEFAULT_FAMILY.to_owned(),
            installed: true,
            compatible: true,
            upstream_model: format!("up-{id}"),
            with_profile: true,
            fake: Map::new(),
            profile_extra: Map::new(),
            entry_extra: Map::new(),
        }
    }

    /// The model's family (a family name, or the product's `Family`).
    pub fn family(mut self, family: impl Display) -> ModelSpec {
        self.family = family.to_string();
        self
    }

    /// `installed: false`.
    pub fn not_installed(mut self) -> ModelSpec {
        self.installed = false;
        self
    }

    /// `compatible: false`.
    pub fn incompatible(mut self) -> ModelSpec {
        self.compatible = false;
        self
    }

    /// `upstream_model` (and the profile's `model_name`).
    pub fn upstream_model(mut self, name: &str) -> ModelSpec {
        self.upstream_model = name.to_owned();
        self
    }

    /// `profile: null`, and no profile file.
    pub fn without_profile(mut self) -> ModelSpec {
        self.with_profile = false;
        self
    }

    /// The fake's simulated load time (`fake.load_ms`).
    pub fn load_ms(self, ms: u64) -> ModelSpec {
        self.fake("load_ms", ms)
    }

    /// A scripted start failure (`fake.start_failure`): `exit`, `hang`, `wrong_model_name`,
    /// `wrong_pid`, `wrong_port`, `health_wrong_model`, `health_not_loaded`, `exit_after_ready`.
    pub fn start_failure(self, failure: &str) -> ModelSpec {
        self.fake("start_failure", failure)
    }

    /// Any key of the profile's `fake` object.
    pub fn fake(mut self, key: &str, value: impl Into<Value>) -> ModelSpec {
        self.fake.insert(key.to_owned(), value.into());
        self
    }

    /// Any other top-level profile key.
    pub fn profile_key(mut self, key: &str, value: impl Into<Value>) -> ModelSpec {
        self.profile_extra.insert(key.to_owned(), value.into());
        self
    }

    /// Any other key of the config's model entry (e.g. `metadata`, `fine_tune`).
    pub fn entry_key(mut self, key: &str, value: impl Into<Value>) -> ModelSpec {
        self.entry_extra.insert(key.to_owned(), value.into());
        self
    }

    /// The model ID.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// A fake backend profile: the `model_name` the fake reports, and its `fake` scripting keys
/// with `log` set to the event log every backend of the test appends to.
pub fn fake_profile(model_name: &str, mut fake: Map<String, Value>, log: &Path) -> Value {
    fake.insert("log".into(), json!(log));
    json!({ "model_name": model_name, "fake": fake })
}

type Edit = Box<dyn FnOnce(&mut Value)>;

/// Builds a [`TestConfig`], or any `C` made from one. See the module docs for the layout and
/// defaults.
pub struct ConfigBuilder<C = TestConfig> {
    tag: String,
    models: Vec<ModelSpec>,
    top: Map<String, Value>,
    aliases: Map<String, Value>,
    enabled: Option<Vec<String>>,
    run_dir_mode: u32,
    listen_port: Option<u16>,
    backend_port: Option<u16>,
    edits: Vec<Edit>,
    output: PhantomData<fn() -> C>,
}

impl<C: From<TestConfig>> ConfigBuilder<C> {
    /// A builder; `tag` names the test directory.
    pub fn new(tag: &str) -> ConfigBuilder<C> {
        let mut top = Map::new();
        top.insert("startup_ms".into(), json!(10_000));
        top.insert("cooldown_ms".into(), json!(30_000));
        top.insert("idle_ms".into(), json!(600_000));
        top.insert("shutdown_ms".into(), json!(2_000));
        top.insert("model_grace_ms".into(), json!(0));
        ConfigBuilder {
            tag: tag.to_owned(),
            models: Vec::new(),
            top,
            aliases: Map::new(),
            enabled: None,
            run_dir_mode: 0o700,
            listen_port: None,
            backend_port: None,
            edits: Vec::new(),
            output: PhantomData,
        }
    }

    /// Adds a model.
    pub fn model(mut self, model: ModelSpec) -> Self {
        self.models.push(model);
        self
    }

    /// Sets any top-level key (overriding a default).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.top.insert(key.to_owned(), value.into());
        self
    }

    /// Removes a top-level key (so the product default applies).
    pub fn unset(mut self, key: &str) -> Self {
        self.top.remove(key);
        self
    }

    pub fn startup_ms(self, ms: u64) -> Self {
        self.set("startup_ms", ms)
    }

    pub fn cooldown_ms(self, ms: u64) -> Self {
        self.set("cooldown_ms", ms)
    }

    pub fn idle_ms(self, ms: u64) -> Self {
        self.set("idle_ms", ms)
    }

    pub fn shutdown_ms(self, ms: u64) -> Self {
        self.set("shutdown_ms", ms)
    }

    pub fn drain_ms(self, ms: u64) -> Self {
        self.set("drain_ms", ms)
    }

    pub fn model_grace_ms(self, ms: u64) -> Self {
        self.set("model_grace_ms", ms)
    }

    pub fn wait_when_busy(self, wait: bool) -> Self {
        self.set("wait_when_busy", wait)
    }

    /// `aliases.FAMILY.allowed_models`.
    pub fn alias(mut self, family: impl Display, allowed_models: &[&str]) -> Self {
        self.aliases.insert(
            family.to_string(),
            json!({ "allowed_models": allowed_models }),
        );
        self
    }

    /// `enabled_models` (omitted unless set: every model is enabled).
    pub fn enabled_models(mut self, ids: &[&str]) -> Self {
        self.enabled = Some(ids.iter().map(|id| (*id).to_owned()).collect());
        self
    }

    /// The port of `listen` (default: a [`free_port`]).
    pub fn listen_port(mut self, port: u16) -> Self {
        self.listen_port = Some(port);
        self
    }

    /// `backend_port` (default: a [`free_port`]).
    pub fn backend_port(mut self, port: u16) -> Self {
        self.backend_port = Some(port);
        self
    }

    /// The mode of the run directory holding the sockets (default 0700).
    pub fn run_dir_mode(mut self, mode: u32) -> Self {
        self.run_dir_mode = mode;
        self
    }

    /// A last edit of the config JSON just before it is written, for invalid configs.
    pub fn edit(mut self, edit: impl FnOnce(&mut Value) + 'static) -> Self {
        self.edits.push(Box::new(edit));
        self
    }

    /// Creates the directory and writes everything.
    pub fn build(self) -> C {
        let dir = TempDir::new(&self.tag);
        self.build_in(&dir)
    }

    /// Writes everything into `dir`, a directory the test already has (the config keeps a
    /// clone of it).
    pub fn build_in(self, dir: &TempDir) -> C {
        let run_dir = dir.subdir("run", self.run_dir_mode);
        let profiles = dir.subdir("profiles", 0o700);
        let fake_log = dir.join("fake.log");
        let control_socket = run_dir.join("control.sock");
        let supervisor_socket = run_dir.join("supervisor.sock");
        for socket in [&control_socket, &supervisor_socket] {
            assert!(
                socket.as_os_str().len() < 100,
                "socket path too long for a Unix socket: {}",
                socket.display()
            );
        }
        let backend_port = self.backend_port.unwrap_or_else(free_port);
        let listen = SocketAddr::from((
            Ipv4Addr::LOCALHOST,
            self.listen_port.unwrap_or_else(free_port),
        ));

        let mut models = Map::new();
        for spec in &self.models {
            let profile_path = profiles.join(format!("{}.json", spec.id));
            let mut entry = Map::new();
            entry.insert("family".into(), json!(spec.family));
            entry.insert("quantization".into(), json!("q4_k_m"));
            entry.insert("upstream_model".into(), json!(spec.upstream_model));
            entry.insert("installed".into(), json!(spec.installed));
            entry.insert("compatible".into(), json!(spec.compatible));
            if spec.with_profile {
                let mut profile = fake_profile(&spec.upstream_model, spec.fake.clone(), &fake_log);
                if let Value::Object(profile) = &mut profile {
                    profile.extend(spec.profile_extra.clone());
                }
                write_json(&profile_path, &profile);
                entry.insert("profile".into(), json!(profile_path));
            } else {
                entry.insert("profile".into(), Value::Null);
            }
            entry.extend(spec.entry_extra.clone());
            models.insert(spec.id.clone(), Value::Object(entry));
        }

        let mut root = Map::new();
        root.insert("python".into(), json!(python()));
        root.insert("strata_dir".into(), json!(fake_strata_dir()));
        root.insert("listen".into(), json!(listen.to_string()));
        root.insert("backend_port".into(), json!(backend_port));
        root.insert("control_socket".into(), json!(control_socket));
        root.insert("models".into(), Value::Object(models));
        if !self.aliases.is_empty() {
            root.insert("aliases".into(), Value::Object(self.aliases));
        }
        if let Some(enabled) = self.enabled {
            root.insert("enabled_models".into(), json!(enabled));
        }
        root.extend(self.top);
        let mut json = Value::Object(root);
        for edit in self.edits {
            edit(&mut json);
        }
        let path = dir.join("config.json");
        write_json(&path, &json);

        C::from(TestConfig {
            path,
            run_dir,
            control_socket,
            supervisor_socket,
            fake_log,
            backend_port,
            listen,
            json,
            models: self.models,
            dir: dir.clone(),
        })
    }
}

/// Writes `value` to `path` as pretty-printed JSON.
pub fn write_json(path: &Path, value: &Value) {
    let text = serde_json::to_string_pretty(value).expect("serialize test json");
    std::fs::write(path, text).unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
}

/// A written test config and where everything is. Holds the [`TempDir`] (a clone of it keeps
/// the directory after the config is dropped).
#[derive(Debug)]
pub struct TestConfig {
    /// `DIR/config.json`.
    pub path: PathBuf,
    /// `DIR/run`, the socket directory.
    pub run_dir: PathBuf,
    pub control_socket: PathBuf,
    pub supervisor_socket: PathBuf,
    /// `DIR/fake.log`.
    pub fake_log: PathBuf,
    pub backend_port: u16,
    pub listen: SocketAddr,
    /// The config as written.
    pub json: Value,
    models: Vec<ModelSpec>,
    /// Declared last so it is removed after everything else is dropped.
    pub dir: TempDir,
}

impl TestConfig {
    /// The `upstream_model` of model `id` (the `model_name` its backend reports and logs).
    pub fn upstream(&self, id: &str) -> String {
        self.models
            .iter()
            .find(|spec| spec.id == id)
            .map(|spec| spec.upstream_model.clone())
            .unwrap_or_else(|| panic!("no model {id} in this test config"))
    }

    /// The profile file of model `id`.
    pub fn profile_path(&self, id: &str) -> PathBuf {
        self.dir.join("profiles").join(format!("{id}.json"))
    }
}

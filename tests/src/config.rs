//! Test configs: [`ConfigBuilder`] writes a config file, one fake profile per model and a
//! private run directory into a fresh [`TempDir`], and returns a [`TestConfig`].
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
//! installed and compatible, of family `qwen3.8-flash-next` ([`FLASH`]), with `upstream_model`
//! `up-ID`, unless its [`ModelSpec`] says otherwise.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use strata_protocol::config::{Config, Family};

use crate::control::ControlClient;
use crate::fake_log::FakeLog;
use crate::net::free_port;
use crate::python::{fake_strata_dir, python};
use crate::tempdir::TempDir;

/// The `qwen3.8-flash-next` family.
pub const FLASH: Family = Family::Qwen38FlashNext;
/// The `qwen3.6-35b-a3b` family.
pub const A3B: Family = Family::Qwen3635bA3b;

/// One model entry and its fake profile.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    id: String,
    family: Family,
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
    /// An installed, compatible [`FLASH`] model with `upstream_model` `up-ID`.
    pub fn new(id: &str) -> ModelSpec {
        ModelSpec {
            id: id.to_owned(),
            family: FLASH,
            installed: true,
            compatible: true,
            upstream_model: format!("up-{id}"),
            with_profile: true,
            fake: Map::new(),
            profile_extra: Map::new(),
            entry_extra: Map::new(),
        }
    }

    /// The model's family.
    pub fn family(mut self, family: Family) -> ModelSpec {
        self.family = family;
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

type Edit = Box<dyn FnOnce(&mut Value)>;

/// Builds a [`TestConfig`]. See the module docs for the layout and defaults.
pub struct ConfigBuilder {
    tag: String,
    models: Vec<ModelSpec>,
    top: Map<String, Value>,
    aliases: Map<String, Value>,
    enabled: Option<Vec<String>>,
    run_dir_mode: u32,
    listen_port: Option<u16>,
    backend_port: Option<u16>,
    edits: Vec<Edit>,
}

impl ConfigBuilder {
    /// A builder; `tag` names the test directory.
    pub fn new(tag: &str) -> ConfigBuilder {
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
        }
    }

    /// Adds a model.
    pub fn model(mut self, model: ModelSpec) -> ConfigBuilder {
        self.models.push(model);
        self
    }

    /// Sets any top-level key (overriding a default).
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> ConfigBuilder {
        self.top.insert(key.to_owned(), value.into());
        self
    }

    /// Removes a top-level key (so the product default applies).
    pub fn unset(mut self, key: &str) -> ConfigBuilder {
        self.top.remove(key);
        self
    }

    pub fn startup_ms(self, ms: u64) -> ConfigBuilder {
        self.set("startup_ms", ms)
    }

    pub fn cooldown_ms(self, ms: u64) -> ConfigBuilder {
        self.set("cooldown_ms", ms)
    }

    pub fn idle_ms(self, ms: u64) -> ConfigBuilder {
        self.set("idle_ms", ms)
    }

    pub fn shutdown_ms(self, ms: u64) -> ConfigBuilder {
        self.set("shutdown_ms", ms)
    }

    pub fn drain_ms(self, ms: u64) -> ConfigBuilder {
        self.set("drain_ms", ms)
    }

    pub fn model_grace_ms(self, ms: u64) -> ConfigBuilder {
        self.set("model_grace_ms", ms)
    }

    pub fn wait_when_busy(self, wait: bool) -> ConfigBuilder {
        self.set("wait_when_busy", wait)
    }

    /// `aliases.FAMILY.allowed_models`.
    pub fn alias(mut self, family: Family, allowed_models: &[&str]) -> ConfigBuilder {
        self.aliases.insert(
            family.as_str().to_owned(),
            json!({ "allowed_models": allowed_models }),
        );
        self
    }

    /// `enabled_models` (omitted unless set: every model is enabled).
    pub fn enabled_models(mut self, ids: &[&str]) -> ConfigBuilder {
        self.enabled = Some(ids.iter().map(|id| (*id).to_owned()).collect());
        self
    }

    /// The port of `listen` (default: a [`free_port`]).
    pub fn listen_port(mut self, port: u16) -> ConfigBuilder {
        self.listen_port = Some(port);
        self
    }

    /// `backend_port` (default: a [`free_port`]).
    pub fn backend_port(mut self, port: u16) -> ConfigBuilder {
        self.backend_port = Some(port);
        self
    }

    /// The mode of the run directory holding the sockets (default 0700).
    pub fn run_dir_mode(mut self, mode: u32) -> ConfigBuilder {
        self.run_dir_mode = mode;
        self
    }

    /// A last edit of the config JSON just before it is written, for invalid configs.
    pub fn edit(mut self, edit: impl FnOnce(&mut Value) + 'static) -> ConfigBuilder {
        self.edits.push(Box::new(edit));
        self
    }

    /// Creates the directory and writes everything.
    pub fn build(self) -> TestConfig {
        let dir = TempDir::new(&self.tag);
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
            entry.insert("family".into(), json!(spec.family.as_str()));
            entry.insert("quantization".into(), json!("q4_k_m"));
            entry.insert("upstream_model".into(), json!(spec.upstream_model));
            entry.insert("installed".into(), json!(spec.installed));
            entry.insert("compatible".into(), json!(spec.compatible));
            if spec.with_profile {
                let mut fake = spec.fake.clone();
                fake.insert("log".into(), json!(fake_log));
                let mut profile = Map::new();
                profile.insert("model_name".into(), json!(spec.upstream_model));
                profile.insert("fake".into(), Value::Object(fake));
                profile.extend(spec.profile_extra.clone());
                write_json(&profile_path, &Value::Object(profile));
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

        TestConfig {
            path,
            run_dir,
            control_socket,
            supervisor_socket,
            fake_log,
            backend_port,
            listen,
            json,
            models: self.models,
            dir,
        }
    }
}

fn write_json(path: &Path, value: &Value) {
    let text = serde_json::to_string_pretty(value).expect("serialize test json");
    std::fs::write(path, text).unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
}

/// A written test config and where everything is. Holds the [`TempDir`] (a clone of it, e.g.
/// through [`TestConfig::fake_log`], keeps the directory after the config is dropped).
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

    /// The config as the daemons load it.
    pub fn load(&self) -> Config {
        Config::load(&self.path)
            .unwrap_or_else(|err| panic!("test config {} is invalid: {err}", self.path.display()))
    }

    /// The config fingerprint a proxy sends in its hello.
    pub fn fingerprint(&self) -> u64 {
        self.load().fingerprint()
    }

    /// A reader of the fake backend's log (it keeps the test directory alive).
    pub fn fake_log(&self) -> FakeLog {
        FakeLog::in_dir(&self.fake_log, &self.dir)
    }

    /// A client of the control socket.
    pub fn control(&self) -> ControlClient {
        ControlClient::new(&self.control_socket)
    }
}

//! `strata-ctl demo`: run the whole stack against the bundled fake
//! backend, in a private temporary directory that is removed at the end.
//!
//! It creates a 0700 directory `strata-demo-PID` under the system temp
//! directory, writes the fake Strata backend (carried inside this binary)
//! to `DIR/strata/serve/`, three model profiles to `DIR/profiles/`, and a
//! config to `DIR/config.json` (free loopback ports, wait-first
//! scheduling, a 1.5 s simulated load and a visible per-token delay), then
//! runs exactly what `strata-ctl daemon DIR/config.json` runs and prints
//! what to try. Ctrl-C stops everything and removes the directory, as does
//! any failure.
//!
//! `--print-config` prints the config it would generate and exits without
//! creating or starting anything (the paths name the directory a real run
//! would create).

use std::fs;
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use serde_json::{Value, json};

use crate::control::describe_io;
use crate::daemon::{self, Serving, Signals};
use crate::fake_files;

#[derive(clap::Args)]
pub struct Args {
    /// Print the generated config and exit without starting anything
    #[arg(long)]
    pub print_config: bool,
    /// Python 3.9+ for the fake backend [default: python3 from PATH]
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
}

/// One demo model: ID (also the fake's model name), family, quantization,
/// and extra fake-backend keys.
struct DemoModel {
    id: &'static str,
    family: &'static str,
    quantization: &'static str,
    reasoning_tokens: u32,
}

const FLASH: &str = "qwen3.8-flash-next";
const A3B: &str = "qwen3.6-35b-a3b";

const MODELS: [DemoModel; 3] = [
    DemoModel {
        id: "qwen3.8-flash-next-q4_k_m",
        family: FLASH,
        quantization: "q4_k_m",
        reasoning_tokens: 0,
    },
    DemoModel {
        id: "qwen3.8-flash-next-q8_0",
        family: FLASH,
        quantization: "q8_0",
        reasoning_tokens: 0,
    },
    DemoModel {
        id: "qwen3.6-35b-a3b-q4_k_s",
        family: A3B,
        quantization: "q4_k_s",
        reasoning_tokens: 6,
    },
];

/// Simulated model load time: long enough to see, short enough to wait for.
const LOAD_MS: u64 = 1500;
/// Pause before each streamed token, so streaming is visible.
const TOKEN_DELAY_MS: u64 = 80;
/// Content tokens per answer.
const TOKENS: u64 = 30;
/// Unix socket paths are limited to 107 bytes; leave room.
const MAX_SOCKET_PATH: usize = 100;

pub fn run(args: Args) -> ExitCode {
    let python = match find_python(args.python.as_deref()) {
        Ok(python) => python,
        Err(code) => return code,
    };
    if args.print_config {
        let plan = match Plan::new(&candidate_dir(0), python) {
            Ok(plan) => plan,
            Err(code) => return code,
        };
        let _ = io::stdout().write_all(plan.config.as_bytes());
        return ExitCode::SUCCESS;
    }
    let runtime = match daemon::runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(async {
        // Handlers first: a Ctrl-C from here on stops and cleans up.
        let mut signals = match Signals::install() {
            Ok(signals) => signals,
            Err(code) => return code,
        };
        let dir = match DemoDir::create() {
            Ok(dir) => dir,
            Err(code) => return code,
        };
        let code = run_in(&dir, python, &mut signals).await;
        drop(dir);
        code
    })
}

async fn run_in(dir: &DemoDir, python: PathBuf, signals: &mut Signals) -> ExitCode {
    let plan = match Plan::new(&dir.0, python) {
        Ok(plan) => plan,
        Err(code) => return code,
    };
    if let Err(err) = plan.write() {
        note!("cannot write the demo files in {}: {err}", dir.0.display());
        return ExitCode::FAILURE;
    }
    daemon::launch(&plan.config_path, signals, |serving| {
        let text = plan.instructions(serving);
        let _ = io::stdout().write_all(text.as_bytes());
        let _ = io::stdout().flush();
    })
    .await
}

/// `DIR` for a given attempt: short, under the system temp directory.
fn candidate_dir(attempt: u32) -> PathBuf {
    let name = match attempt {
        0 => format!("strata-demo-{}", std::process::id()),
        n => format!("strata-demo-{}-{n}", std::process::id()),
    };
    std::env::temp_dir().join(name)
}

/// The demo's private directory, removed (with everything in it) on drop.
struct DemoDir(PathBuf);

impl DemoDir {
    fn create() -> Result<DemoDir, ExitCode> {
        for attempt in 0..100 {
            let path = candidate_dir(attempt);
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    // The process umask cannot widen 0700, but be explicit.
                    let dir = DemoDir(path);
                    if let Err(err) = fs::set_permissions(&dir.0, fs::Permissions::from_mode(0o700))
                    {
                        note!("cannot chmod {}: {err}", dir.0.display());
                        return Err(ExitCode::FAILURE);
                    }
                    return Ok(dir);
                }
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => {
                    note!("cannot create {}: {}", path.display(), describe_io(&err));
                    return Err(ExitCode::FAILURE);
                }
            }
        }
        note!(
            "cannot find a free directory name under {}",
            std::env::temp_dir().display()
        );
        Err(ExitCode::FAILURE)
    }
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        match fs::remove_dir_all(&self.0) {
            Ok(()) => note!("removed {}", self.0.display()),
            Err(err) => note!("could not remove {}: {err}", self.0.display()),
        }
    }
}

/// Finds the interpreter for the fake backend: `--python`, else `python3`
/// on PATH; then asks it for `sys.executable` (so a version-manager shim
/// does not sit between the supervisor and the server) and checks 3.9+.
fn find_python(given: Option<&Path>) -> Result<PathBuf, ExitCode> {
    let found = match given {
        Some(path) => path.to_path_buf(),
        None => {
            let on_path = std::env::var_os("PATH")
                .map(|path| {
                    std::env::split_paths(&path)
                        .filter(|dir| dir.is_absolute())
                        .map(|dir| dir.join("python3"))
                        .find(|candidate| is_executable(candidate))
                })
                .unwrap_or_default();
            match on_path {
                Some(path) => path,
                None => {
                    note!(
                        "python3 not found on PATH; the demo's fake Strata backend \
                         needs Python 3.9 or newer (or pass --python PATH)"
                    );
                    return Err(ExitCode::FAILURE);
                }
            }
        }
    };
    let output = Command::new(&found)
        .args([
            "-c",
            "import sys; print(sys.executable); sys.exit(0 if sys.version_info >= (3, 9) else 3)",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let output = match output {
        Ok(output) => output,
        Err(err) => {
            note!("cannot run {}: {}", found.display(), describe_io(&err));
            return Err(ExitCode::FAILURE);
        }
    };
    if !output.status.success() {
        note!(
            "{} is not a working Python 3.9 or newer (the demo's fake backend needs one)",
            found.display()
        );
        return Err(ExitCode::FAILURE);
    }
    let reported = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if reported.is_absolute() && reported.is_file() {
        return Ok(reported);
    }
    std::path::absolute(&found).map_err(|err| {
        note!("{}: {err}", found.display());
        ExitCode::FAILURE
    })
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// Two distinct loopback ports that were free a moment ago.
fn free_ports() -> io::Result<(u16, u16)> {
    let first = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let second = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok((first.local_addr()?.port(), second.local_addr()?.port()))
}

/// Everything the demo writes, computed before anything is written.
struct Plan {
    dir: PathBuf,
    config_path: PathBuf,
    /// `(path, JSON text)` of each profile.
    profiles: Vec<(PathBuf, String)>,
    /// The config's JSON text.
    config: String,
}

impl Plan {
    fn new(dir: &Path, python: PathBuf) -> Result<Plan, ExitCode> {
        let (listen_port, backend_port) = free_ports().map_err(|err| {
            note!("cannot find free loopback ports: {err}");
            ExitCode::FAILURE
        })?;
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, listen_port));
        let run_dir = dir.join("run");
        let control_socket = run_dir.join("control.sock");
        let supervisor_socket = run_dir.join("supervisor.sock");
        if supervisor_socket.as_os_str().len() > MAX_SOCKET_PATH {
            note!(
                "the demo's socket path {} is too long for a Unix socket; \
                 set TMPDIR to a shorter directory (e.g. TMPDIR=/tmp)",
                supervisor_socket.display()
            );
            return Err(ExitCode::FAILURE);
        }
        let fake_log = dir.join("fake-backend.log");

        let mut models = Vec::new();
        let mut profiles = Vec::new();
        for model in &MODELS {
            let profile = dir.join("profiles").join(format!("{}.json", model.id));
            profiles.push((
                profile.clone(),
                Doc::object([
                    ("model_name", json!(model.id).into()),
                    (
                        "fake",
                        Doc::object([
                            ("load_ms", json!(LOAD_MS).into()),
                            ("token_delay_ms", json!(TOKEN_DELAY_MS).into()),
                            ("tokens", json!(TOKENS).into()),
                            ("reasoning_tokens", json!(model.reasoning_tokens).into()),
                            ("log", json!(fake_log).into()),
                        ]),
                    ),
                ])
                .render(),
            ));
            models.push((
                model.id,
                Doc::object([
                    ("family", json!(model.family).into()),
                    ("fine_tune", Value::Null.into()),
                    ("quantization", json!(model.quantization).into()),
                    ("profile", json!(profile).into()),
                    ("upstream_model", json!(model.id).into()),
                    ("installed", json!(true).into()),
                    ("compatible", json!(true).into()),
                ]),
            ));
        }
        let family_members = |family: &str| -> Doc {
            let members: Vec<&str> = MODELS
                .iter()
                .filter(|model| model.family == family)
                .map(|model| model.id)
                .collect();
            Doc::object([("allowed_models", json!(members).into())])
        };
        // Key order follows config.example.json.
        let config = Doc::object([
            ("python", json!(python).into()),
            ("strata_dir", json!(dir.join("strata")).into()),
            ("listen", json!(listen.to_string()).into()),
            ("backend_port", json!(backend_port).into()),
            ("control_socket", json!(control_socket).into()),
            ("supervisor_socket", json!(supervisor_socket).into()),
            ("request_log_path", json!(dir.join("requests.jsonl")).into()),
            ("wait_when_busy", json!(true).into()),
            ("max_pending", json!(16).into()),
            ("response_ms", json!(0).into()),
            ("startup_ms", json!(30000).into()),
            ("cooldown_ms", json!(5000).into()),
            ("idle_ms", json!(120000).into()),
            ("shutdown_ms", json!(5000).into()),
            ("drain_ms", json!(5000).into()),
            ("model_grace_ms", json!(2000).into()),
            ("models", Doc::object(models)),
            (
                "aliases",
                Doc::object([(FLASH, family_members(FLASH)), (A3B, family_members(A3B))]),
            ),
            (
                "enabled_models",
                json!(MODELS.iter().map(|model| model.id).collect::<Vec<_>>()).into(),
            ),
        ])
        .render();
        Ok(Plan {
            dir: dir.to_path_buf(),
            config_path: dir.join("config.json"),
            profiles,
            config,
        })
    }

    /// Writes the fake backend, the profiles and the config into `dir`
    /// (which exists, mode 0700).
    fn write(&self) -> io::Result<()> {
        let private_dir = |path: &Path| {
            fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(path)
        };
        let write_file = |path: &Path, contents: &[u8]| -> io::Result<()> {
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)?;
            file.write_all(contents)
        };
        private_dir(&self.dir.join("run"))?;
        private_dir(&self.dir.join("profiles"))?;
        let strata = self.dir.join("strata");
        for (name, contents) in fake_files::FILES {
            let path = strata.join(name);
            if let Some(parent) = path.parent() {
                private_dir(parent)?;
            }
            write_file(&path, contents.as_bytes())?;
        }
        for (path, profile) in &self.profiles {
            write_file(path, profile.as_bytes())?;
        }
        write_file(&self.config_path, self.config.as_bytes())
    }

    /// What to try, printed once the stack serves.
    fn instructions(&self, serving: &Serving) -> String {
        let base = format!("http://{}", serving.listen);
        let ctl = ctl_command();
        let socket = serving.control_socket.display();
        let dir = self.dir.display();
        let width = MODELS.iter().map(|m| m.id.len()).max().unwrap_or(0);
        let mut models = String::new();
        for (index, model) in MODELS.iter().enumerate() {
            let label = if index == 0 { "models   " } else { "         " };
            models.push_str(&format!(
                "  {label} {:<width$}  (alias {})\n",
                model.id, model.family
            ));
        }
        let chat = format!(
            r#"{{"model":"{FLASH}","stream":true,"messages":[{{"role":"user","content":"Hello"}}]}}"#
        );
        format!(
            "
{ctl_name} demo: strata-router in front of a fake Strata backend (no GPU, no model weights)

  directory {dir} (removed when the demo stops)
  config    {config}
{models}
Try these in another terminal (the first request loads a model, about {load:.1} s):

  curl -s {base}/v1/models
  curl -sN {base}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{chat}'
  curl -s {base}/metrics
  curl -s '{base}/requests?after=0'
  {ctl} status {socket}
  {ctl} off {socket}
  {ctl} on {socket} {A3B}

Ctrl-C stops everything and removes {dir}.
",
            ctl_name = crate::program(),
            config = self.config_path.display(),
            load = LOAD_MS as f64 / 1000.0,
        )
    }
}

/// A JSON document whose objects keep the order they were written in (the
/// workspace's serde_json sorts object keys), rendered like
/// `serde_json::to_string_pretty`.
enum Doc {
    Value(Value),
    Object(Vec<(String, Doc)>),
}

impl From<Value> for Doc {
    fn from(value: Value) -> Doc {
        Doc::Value(value)
    }
}

impl Doc {
    fn object<K: Into<String>>(entries: impl IntoIterator<Item = (K, Doc)>) -> Doc {
        Doc::Object(
            entries
                .into_iter()
                .map(|(key, doc)| (key.into(), doc))
                .collect(),
        )
    }

    /// Pretty JSON text with a final newline.
    fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out, 0);
        out.push('\n');
        out
    }

    fn render_into(&self, out: &mut String, depth: usize) {
        match self {
            Doc::Value(value) => {
                let text = serde_json::to_string_pretty(value).expect("json serializes");
                out.push_str(&text.replace('\n', &format!("\n{}", "  ".repeat(depth))));
            }
            Doc::Object(entries) if entries.is_empty() => out.push_str("{}"),
            Doc::Object(entries) => {
                out.push_str("{\n");
                for (index, (key, doc)) in entries.iter().enumerate() {
                    out.push_str(&"  ".repeat(depth + 1));
                    out.push_str(&Value::from(key.as_str()).to_string());
                    out.push_str(": ");
                    doc.render_into(out, depth + 1);
                    out.push_str(if index + 1 < entries.len() {
                        ",\n"
                    } else {
                        "\n"
                    });
                }
                out.push_str(&"  ".repeat(depth));
                out.push('}');
            }
        }
    }
}

/// How to call this executable in the printed commands: its name
/// (`strata-router` or `strata-ctl`) when it was started from PATH, else its
/// absolute path (e.g. under `target/`).
fn ctl_command() -> String {
    let from_path = std::env::args_os()
        .next()
        .is_some_and(|arg0| !arg0.as_encoded_bytes().contains(&b'/'));
    if from_path {
        return crate::program().to_owned();
    }
    match std::env::current_exe() {
        Ok(exe) => exe.display().to_string(),
        Err(_) => crate::program().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_config_is_valid_and_uses_both_families() {
        let plan = Plan::new(
            Path::new("/tmp/strata-demo-test"),
            "/usr/bin/python3".into(),
        )
        .expect("plan");
        let config = strata_protocol::config::Config::from_json_str(&plan.config)
            .expect("the demo config validates");
        assert!(config.scheduling.wait_when_busy);
        assert_eq!(config.registry.models().len(), MODELS.len());
        assert_eq!(config.registry.configured_aliases().len(), 2);
        assert!(config.listen.ip().is_loopback());
        assert_ne!(config.listen.port(), config.backend_port);
        for (_, profile) in &plan.profiles {
            let profile: Value = serde_json::from_str(profile).expect("profile is json");
            assert!(profile["fake"]["load_ms"].is_u64());
        }
    }

    #[test]
    fn ordered_documents_render_like_serde_pretty() {
        let doc = Doc::object([
            ("z", json!(1).into()),
            ("a", Doc::object([("list", json!(["x", "y"]).into())])),
            ("empty", Doc::object(Vec::<(String, Doc)>::new())),
        ]);
        let expected = "{\n  \"z\": 1,\n  \"a\": {\n    \"list\": [\n      \"x\",\n      \"y\"\n    ]\n  },\n  \"empty\": {}\n}\n";
        assert_eq!(doc.render(), expected);
        let parsed: Value = serde_json::from_str(&doc.render()).unwrap();
        assert_eq!(
            parsed,
            json!({"z": 1, "a": {"list": ["x", "y"]}, "empty": {}})
        );
    }
}

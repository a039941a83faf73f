//! `strata-ctl check-config CONFIG`: validate a config file and every
//! profile it references, the way the daemons will at start, and print a
//! one-screen summary.
//!
//! Exit status 0 when the config is valid (models with a bad profile are
//! shown with their status: they do not stop the daemons either; neither do
//! the warnings, the config's own, those of `strata_limits` and the weights
//! paths that cannot be used), 1 with
//! `NAME: config error: PATH: MESSAGE` on stderr otherwise (NAME:
//! `strata-router` or `strata-ctl`, the name this program runs under).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use strata_protocol::config::{
    Config, ModelStatus, Readiness, ReadinessBasis, ReadinessChoice, ReadinessMode, WeightsSource,
};

#[derive(clap::Args)]
pub struct Args {
    /// The config file (JSON)
    pub config: PathBuf,
}

pub fn run(args: Args) -> ExitCode {
    match Config::load(&args.config) {
        Err(err) => {
            note!("config error: {err}");
            ExitCode::from(1)
        }
        Ok(config) => {
            // A closed stdout (`| head`) is not worth a panic.
            let _ = std::io::stdout().write_all(summary(&args.config, &config).as_bytes());
            ExitCode::SUCCESS
        }
    }
}

/// The summary text, newline-terminated: settings first, then one line per
/// model, then the aliases and any warnings. Every config key shows here or
/// is in the tests' `NOT_SHOWN`, with the reason.
fn summary(path: &Path, config: &Config) -> String {
    let mut lines: Vec<String> = Vec::new();
    let timers = &config.timers;
    let scheduling = &config.scheduling;
    let registry = &config.registry;

    lines.push(format!("config {}: valid", path.display()));
    lines.push(format!(
        "listen              {}{}",
        config.listen,
        if config.require_socket_activation {
            " (systemd socket activation required)"
        } else {
            ""
        }
    ));
    lines.push(format!("backend port        {}", config.backend_port));
    lines.push(format!("readiness           {}", readiness_line(config)));
    let prefetch = &config.prefetch;
    lines.push(match (prefetch.enabled, prefetch.predict) {
        (true, predict) => format!(
            "prefetch            on (up to {} GiB of weights, leaving {} GiB available){}",
            prefetch.max_bytes as f64 / (1u64 << 30) as f64,
            prefetch.min_free_bytes as f64 / (1u64 << 30) as f64,
            if predict {
                "; also the likely next model while nothing waits (prefetch_predict)"
            } else {
                ""
            }
        ),
        (false, false) => "prefetch            off".to_owned(),
        // Said, not an error: the prediction only picks what the prefetch reads.
        (false, true) => {
            "prefetch            off (prefetch_predict does nothing without it)".to_owned()
        }
    });
    lines.push(format!(
        "control socket      {}",
        config.control_socket.display()
    ));
    lines.push(format!(
        "supervisor socket   {}",
        config.supervisor_socket.display()
    ));
    lines.push(format!(
        "body limit          {} bytes",
        config.max_request_body_bytes
    ));

    let (mode, queue) = if scheduling.wait_when_busy {
        (
            "wait-first (wait_when_busy: true)",
            "queue ignored".to_owned(),
        )
    } else {
        ("legacy bounded", format!("queue {}", timers.queue_ms))
    };
    lines.push(format!(
        "scheduling          {mode}, max_pending {}, cache_max_active {}",
        scheduling.max_pending,
        off_if_zero(scheduling.cache_max_active as u64)
    ));
    lines.push(format!(
        "timers (ms)         {queue}, response {}, startup {}, cooldown {}, idle {}",
        off_if_zero(timers.response_ms),
        timers.startup_ms,
        if timers.cooldown_max_ms > timers.cooldown_ms {
            format!(
                "{} doubling to {}",
                timers.cooldown_ms, timers.cooldown_max_ms
            )
        } else {
            timers.cooldown_ms.to_string()
        },
        timers.idle_ms
    ));
    lines.push(format!(
        "                    shutdown {}, drain {}{}, model_grace {}, cache_lookup {}",
        timers.shutdown_ms,
        timers.drain_ms,
        match (timers.drain_ms, timers.drain_ms_explicit) {
            (0, _) => " (wait for all accepted work)",
            (_, false) => " (shutdown_ms)",
            (_, true) => "",
        },
        timers.model_grace_ms,
        off_if_zero(timers.cache_lookup_ms)
    ));
    lines.push(format!(
        "                    model_hold_max {}, stream_idle {}",
        off_if_zero(timers.model_hold_max_ms),
        off_if_zero(timers.stream_idle_ms)
    ));
    let probe = &config.probe;
    lines.push(if probe.interval_ms == 0 {
        "backend probes      off".to_owned()
    } else {
        format!(
            "backend probes      every {} ms, unresponsive after {} misses, then {}",
            probe.interval_ms,
            probe.misses,
            probe.action.as_str()
        )
    });
    let log = &config.request_log;
    match &log.path {
        Some(file) => lines.push(format!(
            "request log         ring {} records; file {} (max {} bytes, {} backups)",
            log.capacity,
            file.display(),
            log.max_bytes,
            log.rotate_files
        )),
        None => lines.push(format!(
            "request log         ring {} records; no file",
            log.capacity
        )),
    }
    lines.push(format!("fingerprint         {:016x}", config.fingerprint()));

    let prepared = registry
        .models()
        .iter()
        .filter(|m| m.prepared.is_prepared())
        .count();
    lines.push(format!(
        "models              {} configured, {} enabled, {} prepared; on default: {}",
        registry.models().len(),
        registry.enabled_ids().len(),
        prepared,
        registry.default_on_model().unwrap_or("none")
    ));
    let id_width = registry
        .models()
        .iter()
        .map(|m| m.id.len())
        .max()
        .unwrap_or(0);
    let status_width = "prepared_unverified".len();
    for model in registry.models() {
        let mut row = format!(
            "  {:<id_width$}  {:<status_width$}",
            model.id,
            model.prepared.as_str()
        );
        if !registry.is_enabled(&model.id) {
            row.push_str("  disabled");
        }
        if let Some(detail) = &model.prepared_detail {
            let _ = write!(row, "  ({detail})");
        }
        let _ = write!(row, "  {}", model.weights_source().describe());
        if let Some(path) = model
            .profile
            .as_ref()
            .filter(|_| matches!(model.prepared, ModelStatus::InvalidProfile))
        {
            let _ = write!(row, " {}", path.display());
        }
        if let Some(log) = model
            .profile_info
            .as_ref()
            .and_then(|info| info.engine_log.as_ref())
        {
            let _ = write!(row, "; engine log {}", log.display());
        }
        lines.push(row.trim_end().to_owned());
    }

    if registry.configured_aliases().is_empty() {
        lines.push("aliases             none configured".to_owned());
    } else {
        lines.push("aliases".to_owned());
        for alias in registry.configured_aliases() {
            if alias.effective.is_empty() {
                lines.push(format!("  {:<20}hidden: no enabled entries", alias.name));
            } else {
                lines.push(format!(
                    "  {:<20}{}",
                    alias.name,
                    alias.effective.join(", ")
                ));
            }
        }
    }
    for warning in config
        .warnings
        .iter()
        .chain(&crate::strata_limits::warnings(config))
        .chain(&weights_warnings(config))
        .chain(&hold_floor_warning(config))
    {
        lines.push(format!("warning: {warning}"));
    }
    lines.push(String::new());
    lines.join("\n")
}

/// A warning when `model_hold_max_ms` is below the floor the scheduler
/// holds it to before any load was learned (see `Rules::effective_hold`).
fn hold_floor_warning(config: &Config) -> Option<String> {
    let rules = strata_scheduler::Rules::from_config(config);
    let bound = rules
        .hold_max
        .filter(|_| rules.mode == strata_scheduler::Mode::WaitFirst)?;
    let floor = rules.effective_hold(Duration::ZERO, &BTreeMap::new(), "", "");
    (bound < floor).then(|| {
        format!(
            "model_hold_max_ms {} is below the hold bound's floor: the bound in force is never \
             below {} x the longer load time of the loaded model and the waiting one (a bound \
             below a load time makes three or more busy models thrash), and before any load is \
             learned a load counts startup_ms / {} = {} ms, so {} ms; as the router runs it \
             uses the learned load times (a model not loaded yet counts the longest learned one)",
            bound.as_millis(),
            strata_scheduler::HOLD_FLOOR_LOADS,
            strata_scheduler::UNLEARNED_LOAD_SHARE,
            rules.unlearned_load.as_millis(),
            floor.as_millis(),
        )
    })
}

/// One warning for each model's weights path that does not exist or cannot
/// be read by this user (run it as the supervisor's): a file is opened, a
/// directory read (its own entries, not the tree below: the supervisor's
/// walk says what it meets there). A path from the profile is not named
/// (profiles may hold secrets).
fn weights_warnings(config: &Config) -> Vec<String> {
    let mut warnings = Vec::new();
    for model in config.registry.models() {
        let source = model.weights_source();
        for path in source.paths() {
            let Some(problem) = weights_path_problem(&path) else {
                continue;
            };
            warnings.push(match &source {
                WeightsSource::FromProfile(derived) => format!(
                    "model {}: the weights path its profile's args name ({}) {problem}; the \
                     prefetch leaves it out, and a load will likely fail",
                    model.id, derived.flag
                ),
                _ => format!(
                    "model {}: weights path {} {problem}; the prefetch leaves it out",
                    model.id,
                    path.display()
                ),
            });
        }
    }
    warnings
}

/// What is wrong with a weights path, if anything.
fn weights_path_problem(path: &Path) -> Option<String> {
    let describe = |err: std::io::Error| match err.kind() {
        std::io::ErrorKind::NotFound => "does not exist".to_owned(),
        kind => format!("cannot be read by this user ({kind})"),
    };
    match std::fs::metadata(path) {
        Err(err) => Some(describe(err)),
        Ok(meta) if meta.is_dir() => std::fs::read_dir(path).err().map(describe),
        // Non-blocking, should it have become a FIFO since: never waits.
        Ok(meta) if meta.is_file() => std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
            .err()
            .map(describe),
        Ok(_) => Some("is not a regular file or directory".to_owned()),
    }
}

/// What `readiness` means for this config; for `auto`, what the supervisor will choose,
/// found out the same way (the Strata's `--help`, asked now).
fn readiness_line(config: &Config) -> String {
    const READY_FILE: &str =
        "ready_file (the backend writes a ready file: needs Strata's --ready-file extension)";
    const HEALTH: &str =
        "health (no ready file: the port's listener must be the child's, then /health)";
    match config.readiness {
        Readiness::ReadyFile => READY_FILE.to_owned(),
        Readiness::Health => HEALTH.to_owned(),
        Readiness::Auto => {
            let mut help = std::process::Command::new(&config.python);
            help.args(["-m", "serve.server", "--help"])
                .current_dir(&config.strata_dir)
                .env_remove("STRATA_API_KEY");
            let asked = strata_os::help_lists_flag(help, "--ready-file", Duration::from_secs(10));
            let mode = match asked {
                Some(true) => ReadinessMode::ReadyFile,
                Some(false) => ReadinessMode::Health,
                None => {
                    return "auto (`python -m serve.server --help` did not answer here: the \
                            supervisor asks again before its first start and uses the ready \
                            file if it still cannot tell)"
                        .to_owned();
                }
            };
            let basis = if asked == Some(true) {
                ReadinessBasis::HelpListsReadyFile
            } else {
                ReadinessBasis::HelpLacksReadyFile
            };
            format!(
                "auto -> {} ({})",
                mode.as_str(),
                ReadinessChoice { mode, basis }.why()
            )
        }
    }
}

fn off_if_zero(value: u64) -> String {
    if value == 0 {
        "off".to_owned()
    } else {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    //! The summary against the key declaration (`config::keys::KEYS`):
    //! every key shows, or is in [`NOT_SHOWN`] with the reason.

    use super::summary;
    use std::path::Path;
    use strata_protocol::config::Config;
    use strata_protocol::config::keys::{KEYS, Key, Place};
    use strata_protocol::config::testing::{sample_document, set_sample};

    /// The keys the summary leaves out, and why.
    const NOT_SHOWN: &[(Place, &str, &str)] = &[
        (
            Place::TopLevel,
            "python",
            "the readiness line shows what it answers to --help, not its path",
        ),
        (
            Place::TopLevel,
            "strata_dir",
            "the readiness line shows what the Strata there answers, not its path",
        ),
        (
            Place::Model,
            "family",
            "a model row is its ID and status; /v1/models shows the descriptive fields",
        ),
        (
            Place::Model,
            "fine_tune",
            "a model row is its ID and status; /v1/models shows the descriptive fields",
        ),
        (
            Place::Model,
            "quantization",
            "a model row is its ID and status; /v1/models shows the descriptive fields",
        ),
        (
            Place::Model,
            "upstream_model",
            "checked against the profile, whose failure the status shows",
        ),
        (
            Place::Model,
            "metadata",
            "a model row is its ID and status; /v1/models shows the descriptive fields",
        ),
    ];

    /// The summary's settings and models: without the fingerprint line,
    /// which every fingerprinted key would change, and the warnings, which
    /// are about what a combination of values leads to.
    fn shown(document: &serde_json::Value) -> String {
        let mut config = Config::from_json_str(&document.to_string()).expect("a valid config");
        config.check_profiles();
        summary(Path::new("/nonexistent/config.json"), &config)
            .lines()
            .filter(|line| !line.starts_with("fingerprint ") && !line.starts_with("warning: "))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn listed(key: &Key) -> bool {
        NOT_SHOWN
            .iter()
            .any(|(place, name, _)| *place == key.place && *name == key.name)
    }

    #[test]
    fn the_summary_shows_every_key_but_the_listed_ones() {
        let base = shown(&sample_document());
        for key in KEYS {
            let mut document = sample_document();
            set_sample(&mut document, key);
            let changed = shown(&document) != base;
            assert!(
                changed != listed(key),
                "{}: {} (show it in summary() or list it in NOT_SHOWN with the reason)",
                key.name,
                if changed {
                    "shown in the summary but listed in NOT_SHOWN"
                } else {
                    "not shown in the summary and not listed in NOT_SHOWN"
                }
            );
        }
        for (place, name, _) in NOT_SHOWN {
            assert!(
                KEYS.iter()
                    .any(|key| key.place == *place && key.name == *name),
                "NOT_SHOWN lists {name}, which config::keys does not declare"
            );
        }
    }
}

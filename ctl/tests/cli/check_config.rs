//! `check-config` as an operator runs it, under both names (`strata-router
//! check-config`, `strata-ctl check-config`): exit status, the summary on
//! stdout, the error line on stderr.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Output;

use crate::common::*;

fn check_config(exe: Exe, path: &Path) -> Output {
    exe.run(&["check-config", path.to_str().expect("a UTF-8 path")])
}

under_both_names!(
    the_example_config_passes,
    a_broken_config_exits_1_naming_the_path,
    a_nested_error_names_the_json_path,
    a_missing_file_exits_1,
    profile_problems_are_shown_not_fatal_and_never_echoed,
    a_startup_ms_below_strata_s_load_limit_warns,
    a_body_limit_above_strata_s_default_warns,
    limits_within_strata_s_own_give_no_warning,
    the_readiness_mode_is_explained,
    stream_idle_with_a_backlog_inside_strata_warns,
    a_hold_bound_below_its_floor_warns,
    each_profiles_engine_log_is_shown,
    the_weights_source_and_prefetch_are_shown,
    weights_paths_that_cannot_be_used_are_warned_about,
);

fn the_example_config_passes(exe: Exe) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config.example.json");
    let output = check_config(exe, &example);
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        text(&output.stderr)
    );
    assert!(output.stderr.is_empty(), "{}", text(&output.stderr));
    assert!(stdout.contains(": valid"), "{stdout}");
    assert!(stdout.contains("23 configured, 23 enabled"), "{stdout}");
    assert!(stdout.contains("wait-first"), "{stdout}");
    // The example's Strata does not exist here: auto cannot ask it yet, and says so.
    assert!(
        stdout.contains(
            "readiness           auto (`python -m serve.server --help` did not answer here"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("127.0.0.1:8088"), "{stdout}");
    assert!(
        stdout.contains("  qwen3.8-flash-next  qwen3.8-flash-next-gsq-rco-iq3_xxs, "),
        "{stdout}"
    );
    assert!(
        stdout.contains("  qwen3.6-35b-a3b     qwen3.6-35b-a3b-"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("not_installed").count(), 23, "{stdout}");
    // The example allows a load as long as Strata does (900 s): no warning.
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("warning: "))
        .collect();
    assert_eq!(warnings, Vec::<&str>::new(), "{stdout}");
    // One screen: settings, 23 models, aliases.
    assert!(stdout.lines().count() <= 45, "{stdout}");
}

fn a_broken_config_exits_1_naming_the_path(exe: Exe) {
    let dir = TempDir::new("check-config");
    let path = dir.write(
        "config.json",
        r#"{"python": "/usr/bin/python3", "strata_dir": "/opt/strata", "backend_port": 8095,
            "control_socket": "/run/x/control.sock", "lsiten": "127.0.0.1:8088",
            "models": {"m": {"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "m"}}}"#,
    );
    let output = check_config(exe, &path);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert_eq!(
        text(&output.stderr),
        exe.says("config error: lsiten: unknown key\n")
    );
}

fn a_nested_error_names_the_json_path(exe: Exe) {
    let dir = TempDir::new("check-config");
    let path = dir.write(
        "config.json",
        r#"{"python": "/usr/bin/python3", "strata_dir": "/opt/strata", "backend_port": 8095,
            "control_socket": "/run/x/control.sock",
            "models": {"x": {"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "x",
                             "profile": "relative.json"}}}"#,
    );
    let output = check_config(exe, &path);
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(
        text(&output.stderr),
        exe.says("config error: models[\"x\"].profile: must be an absolute path\n")
    );
}

fn a_missing_file_exits_1(exe: Exe) {
    let dir = TempDir::new("check-config");
    let output = check_config(exe, &dir.join("absent.json"));
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with(&exe.says("config error: $: cannot read config file ")),
        "{stderr}"
    );
    assert!(stderr.ends_with("absent.json: no such file\n"), "{stderr}");
}

fn profile_problems_are_shown_not_fatal_and_never_echoed(exe: Exe) {
    let dir = TempDir::new("check-config");
    let lazy = dir.write("lazy.json", r#"{"model_name": "up", "lazy_load": true}"#);
    let keyed = dir.write(
        "keyed.json",
        r#"{"model_name": "up", "api_key": "sk-SECRET"}"#,
    );
    let good = dir.write("good.json", r#"{"model_name": "up"}"#);
    let config = serde_json::json!({
        "python": "/usr/bin/python3",
        "strata_dir": "/opt/strata",
        "backend_port": 8095,
        "control_socket": "/run/x/control.sock",
        "models": {
            "a-lazy": {"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "up",
                       "installed": true, "compatible": true, "profile": lazy},
            "a-keyed": {"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "up",
                        "installed": true, "compatible": true, "profile": keyed},
            "a-good": {"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "up",
                       "installed": true, "compatible": true, "profile": good},
            "a-missing": {"family": "qwen3.8-flash-next", "quantization": "q", "upstream_model": "up",
                          "installed": true, "compatible": true, "profile": dir.join("none.json")}
        },
        "enabled_models": ["a-good", "a-lazy", "a-missing"],
        "aliases": {"qwen3.8-flash-next": {"allowed_models": ["a-keyed"]}}
    });
    let output = check_config(exe, &dir.write("config.json", &config.to_string()));
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let row = |id: &str| {
        stdout
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no row for {id}:\n{stdout}"))
            .to_owned()
    };
    assert!(row("a-good").contains("prepared_unverified"), "{stdout}");
    assert!(row("a-lazy").contains("invalid_profile"), "{stdout}");
    assert!(
        row("a-lazy").contains("(profile sets lazy_load: true)"),
        "{stdout}"
    );
    assert!(row("a-keyed").contains("invalid_profile"), "{stdout}");
    assert!(row("a-keyed").contains("disabled"), "{stdout}");
    assert!(row("a-missing").contains("missing_profile"), "{stdout}");
    assert!(
        stdout.contains("1 prepared; on default: a-good"),
        "{stdout}"
    );
    assert!(
        stdout.contains("qwen3.8-flash-next  hidden: no enabled entries"),
        "{stdout}"
    );
    assert!(!stdout.contains("SECRET"), "{stdout}");
}

/// A valid config with `extra` top-level keys; check-config's outcome.
fn with_keys(exe: Exe, extra: serde_json::Value) -> (Option<i32>, String, String) {
    with_keys_env(exe, extra, None)
}

/// As [`with_keys`], with one more environment variable for `check-config`.
fn with_keys_env(
    exe: Exe,
    extra: serde_json::Value,
    env: Option<(&str, &str)>,
) -> (Option<i32>, String, String) {
    let dir = TempDir::new("check-config");
    let mut config = serde_json::json!({
        "python": "/usr/bin/python3",
        "strata_dir": "/opt/strata",
        "backend_port": 8095,
        "control_socket": "/run/x/control.sock",
        "models": {"m": {"family": "qwen3.8-flash-next", "quantization": "q",
                         "upstream_model": "m"}}
    });
    for (key, value) in extra.as_object().expect("an object") {
        config[key] = value.clone();
    }
    let path = dir.write("config.json", &config.to_string());
    let output = match env {
        None => check_config(exe, &path),
        Some((key, value)) => exe.run_with_env(
            &["check-config", path.to_str().expect("a UTF-8 path")],
            &[(key, value)],
        ),
    };
    (
        output.status.code(),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// The summary's `warning: ` lines, without the prefix.
fn warnings(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("warning: "))
        .collect()
}

/// Strata allows its engine 900 s to load (`STRATA_ENGINE_READY_S`); a
/// shorter `startup_ms` (the default 120 s among them) is a warning, not an
/// error: exit 0, the summary as usual.
fn a_startup_ms_below_strata_s_load_limit_warns(exe: Exe) {
    for (extra, startup_ms, seconds) in [
        (serde_json::json!({}), 120000, 120),
        (serde_json::json!({"startup_ms": 899999}), 899999, 899),
    ] {
        let (code, stdout, stderr) = with_keys(exe, extra);
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(stderr, "");
        assert!(stdout.contains(": valid"), "{stdout}");
        assert_eq!(
            warnings(&stdout),
            [format!(
                "startup_ms {startup_ms} is below the 900000 ms Strata itself allows a model to \
                 load (STRATA_ENGINE_READY_S, 900 s by default): a large model read from a cold \
                 disk can take longer, and the supervisor would stop that start as failed and \
                 cool the model down; raise startup_ms to 900000 unless every model loads well \
                 within {seconds} s"
            )],
            "{stdout}"
        );
    }
}

/// Strata answers 413 to a body over 256 MiB unless `STRATA_MAX_BODY_MIB`
/// says otherwise: a larger `max_request_body_bytes` is a warning naming the
/// variable's value that would fit (whole MiB, rounded up).
fn a_body_limit_above_strata_s_default_warns(exe: Exe) {
    for (bytes, mib) in [(268435457u64, 257), (1073741824, 1024)] {
        let (code, stdout, stderr) = with_keys(
            exe,
            serde_json::json!({"startup_ms": 900000, "max_request_body_bytes": bytes}),
        );
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(
            warnings(&stdout),
            [format!(
                "max_request_body_bytes {bytes} exceeds Strata's default body limit of \
                 268435456 bytes (256 MiB): Strata answers 413 to a larger body, after the \
                 router has queued it and loaded its model; set STRATA_MAX_BODY_MIB={mib} in \
                 the supervisor's environment (Strata inherits it), or lower \
                 max_request_body_bytes"
            )],
            "{stdout}"
        );
    }
}

/// At Strata's own limits, or within them, nothing to warn about.
fn limits_within_strata_s_own_give_no_warning(exe: Exe) {
    for extra in [
        serde_json::json!({"startup_ms": 900000}),
        serde_json::json!({"startup_ms": 3600000, "max_request_body_bytes": 268435456}),
        serde_json::json!({"startup_ms": 900000, "max_request_body_bytes": 1048576}),
    ] {
        let (code, stdout, stderr) = with_keys(exe, extra.clone());
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stdout.contains(": valid"), "{stdout}");
        assert!(warnings(&stdout).is_empty(), "{extra}: {stdout}");
    }
}

/// The summary says which readiness mode the config chose and what it needs; for `auto`, what
/// the supervisor will choose, asked of the Strata the same way (its `--help`).
fn the_readiness_mode_is_explained(exe: Exe) {
    let fake = fake_strata_dir();
    let python = python();
    let cases = [
        (
            serde_json::json!({"readiness": "ready_file"}),
            None,
            "ready_file (the backend writes a ready file",
        ),
        (
            serde_json::json!({"readiness": "health"}),
            None,
            "health (no ready file: the port's listener must be the child's",
        ),
        (
            serde_json::json!({}),
            None,
            "auto (`python -m serve.server --help` did not answer here",
        ),
        (
            serde_json::json!({"python": python, "strata_dir": fake}),
            None,
            "auto -> ready_file (auto: `python -m serve.server --help` lists --ready-file)",
        ),
        (
            serde_json::json!({"python": python, "strata_dir": fake}),
            Some(("FAKE_STRATA_UPSTREAM_CLI", "1")),
            "auto -> health (auto: `python -m serve.server --help` has no --ready-file (a stock Strata)",
        ),
    ];
    for (extra, env, line) in cases {
        let (code, stdout, stderr) = with_keys_env(exe, extra, env);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(
            stdout.contains(&format!("readiness           {line}")),
            "{stdout}"
        );
    }
}

/// `stream_idle_ms` with requests queued inside Strata (more than one dispatched at once) is
/// warned about: Strata sends a queued request nothing, so it would be cut.
fn stream_idle_with_a_backlog_inside_strata_warns(exe: Exe) {
    let (code, stdout, stderr) = with_keys(
        exe,
        serde_json::json!({"stream_idle_ms": 30000, "max_pending": 4, "startup_ms": 900000}),
    );
    assert_eq!(code, Some(0), "{stderr}");
    let found = warnings(&stdout);
    assert_eq!(found.len(), 1, "{stdout}");
    assert!(
        found[0].starts_with("stream_idle_ms 30000 with max_pending 4 and no cache_max_active: 1"),
        "{stdout}"
    );
    for quiet in [
        serde_json::json!({"stream_idle_ms": 30000, "max_pending": 4, "cache_max_active": 1}),
        serde_json::json!({"stream_idle_ms": 30000, "max_pending": 1}),
        serde_json::json!({"stream_idle_ms": 0, "max_pending": 4}),
    ] {
        let mut quiet = quiet;
        quiet["startup_ms"] = serde_json::json!(900000);
        let (code, stdout, stderr) = with_keys(exe, quiet.clone());
        assert_eq!(code, Some(0), "{stderr}");
        assert!(warnings(&stdout).is_empty(), "{quiet}: {stdout}");
    }
}

/// `model_hold_max_ms` below the floor the scheduler holds it to before anything was learned
/// (1.5 x a quarter of `startup_ms`) is said, with the figure the bound acts as.
fn a_hold_bound_below_its_floor_warns(exe: Exe) {
    let keys = |bound: u64| {
        serde_json::json!({
            "wait_when_busy": true,
            "model_hold_max_ms": bound,
            "startup_ms": 900000
        })
    };
    let (code, stdout, stderr) = with_keys(exe, keys(5000));
    assert_eq!(code, Some(0), "{stderr}");
    let found = warnings(&stdout);
    assert_eq!(found.len(), 1, "{stdout}");
    assert!(
        found[0].starts_with("model_hold_max_ms 5000 is below the hold bound's floor"),
        "{stdout}"
    );
    assert!(
        found[0].contains("startup_ms / 10 = 90000 ms, so 135000 ms"),
        "{stdout}"
    );
    // At or above the floor, or off, or in legacy mode: nothing to say.
    for quiet in [
        keys(135000),
        keys(0),
        serde_json::json!({"model_hold_max_ms": 5000, "startup_ms": 900000}),
    ] {
        let (code, stdout, stderr) = with_keys(exe, quiet.clone());
        assert_eq!(code, Some(0), "{stderr}");
        assert!(warnings(&stdout).is_empty(), "{quiet}: {stdout}");
    }
}

/// Each profile's `log` (where Strata writes its engine's stderr) is shown with its model,
/// resolved against `strata_dir` as Strata opens it.
fn each_profiles_engine_log_is_shown(exe: Exe) {
    let dir = TempDir::new("check-config");
    let profile = dir.write("m.json", r#"{"model_name": "m", "log": "logs/engine.log"}"#);
    let (code, stdout, stderr) = with_keys(
        exe,
        serde_json::json!({"models": {"m": {"family": "qwen3.8-flash-next", "quantization": "q",
            "upstream_model": "m", "installed": true, "compatible": true,
            "profile": profile}}}),
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("; engine log /opt/strata/logs/engine.log"),
        "{stdout}"
    );
}

fn the_weights_source_and_prefetch_are_shown(exe: Exe) {
    let dir = TempDir::new("check-config");
    let native = dir.write(
        "native.json",
        r#"{"model_name": "up", "args": ["--native", "weights/m.strata"]}"#,
    );
    let plain = dir.write("plain.json", r#"{"model_name": "up"}"#);
    let entry = |profile: &Path| {
        serde_json::json!({"family": "qwen3.8-flash-next", "quantization": "q",
            "upstream_model": "up", "installed": true, "compatible": true, "profile": profile})
    };
    let mut listed = entry(&plain);
    listed["weights"] = serde_json::json!(["/srv/w/a.bin", "/srv/w/tokenizer"]);
    let config = serde_json::json!({
        "python": "/usr/bin/python3",
        "strata_dir": "/opt/strata",
        "backend_port": 8095,
        "control_socket": "/run/x/control.sock",
        "prefetch": false,
        "models": {"m-native": entry(&native), "m-plain": entry(&plain), "m-listed": listed}
    });
    let output = check_config(exe, &dir.write("config.json", &config.to_string()));
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let row = |id: &str| {
        stdout
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no row for {id}:\n{stdout}"))
            .to_owned()
    };
    assert!(
        row("m-native").ends_with("weights: from the profile's args (--native)"),
        "{stdout}"
    );
    assert!(row("m-plain").ends_with("weights: none"), "{stdout}");
    assert!(
        row("m-listed").ends_with("weights: 2 configured"),
        "{stdout}"
    );
    assert!(stdout.contains("prefetch            off"), "{stdout}");

    // prefetch_predict: said with the prefetch on, said to do nothing with it off.
    for (prefetch, said) in [
        (
            false,
            "prefetch            off (prefetch_predict does nothing without it)",
        ),
        (
            true,
            "; also the likely next model while nothing waits (prefetch_predict)",
        ),
    ] {
        let mut config = config.clone();
        config["prefetch"] = serde_json::json!(prefetch);
        config["prefetch_predict"] = serde_json::json!(true);
        let output = check_config(exe, &dir.write("predict.json", &config.to_string()));
        let stdout = text(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
        assert!(stdout.contains(said), "{stdout}");
    }
}

/// Each model's weights paths that this user cannot use are warnings (exit 0 still): one that
/// does not exist, a file or a directory it may not read, a FIFO; listed in `weights` (named)
/// or derived from the profile's args (not named: profiles may hold secrets). Readable files
/// and directories are not. Root reads any file, so as root the command runs as `nobody`
/// (65534) on files that stay root's.
fn weights_paths_that_cannot_be_used_are_warned_about(exe: Exe) {
    let dir = TempDir::new("check-config");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let readable = dir.write("w.bin", "w");
    let shards = dir.subdir("shards", 0o755);
    fs::write(shards.join("a.bin"), "a").unwrap();
    let closed_file = dir.write("closed.bin", "c");
    fs::set_permissions(&closed_file, fs::Permissions::from_mode(0o000)).unwrap();
    let closed_dir = dir.subdir("closed", 0o000);
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let missing = dir.join("missing.bin");
    let profile = |name: &str, args: serde_json::Value| {
        let path = dir.write(
            name,
            &serde_json::json!({"model_name": "up", "args": args}).to_string(),
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        serde_json::json!({"family": "qwen3.8-flash-next", "quantization": "q",
            "upstream_model": "up", "installed": true, "compatible": true, "profile": path})
    };
    let mut listed = profile("listed.json", serde_json::json!([]));
    listed["weights"] =
        serde_json::json!([readable, shards, missing, closed_file, closed_dir, fifo]);
    let config = serde_json::json!({
        "python": "/usr/bin/python3",
        "strata_dir": dir.path(),
        "backend_port": 8095,
        "control_socket": "/run/x/control.sock",
        "readiness": "health",
        "startup_ms": 900000,
        "models": {
            "m-listed": listed,
            "m-gone": profile("gone.json", serde_json::json!(["--native", dir.join("gone.strata")])),
            "m-closed": profile("closed.json", serde_json::json!(["--pack", closed_file])),
            // Relative: from strata_dir, as the backend resolves it.
            "m-fine": profile("fine.json", serde_json::json!(["--native=shards"])),
            "m-fine-dir": profile("fine-dir.json", serde_json::json!(["--pack", shards])),
        }
    });
    let path = dir.write("config.json", &config.to_string());
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let output = if nix::unistd::geteuid().is_root() {
        let mut command = exe.command();
        command
            .args(["check-config", path.to_str().unwrap()])
            .uid(65534)
            .gid(65534);
        run(command, LONG)
    } else {
        check_config(exe, &path)
    };
    let stdout = text(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        text(&output.stderr)
    );
    let denied = "cannot be read by this user (permission denied)";
    let listed = |path: &Path, problem: &str| {
        format!(
            "model m-listed: weights path {} {problem}; the prefetch leaves it out",
            path.display()
        )
    };
    let derived = |model: &str, flag: &str, problem: &str| {
        format!(
            "model {model}: the weights path its profile's args name ({flag}) {problem}; the \
             prefetch leaves it out, and a load will likely fail"
        )
    };
    // Models in ID order, each one's paths in list order.
    let expected = [
        derived("m-closed", "--pack", denied),
        derived("m-gone", "--native", "does not exist"),
        listed(&missing, "does not exist"),
        listed(&closed_file, denied),
        listed(&closed_dir, denied),
        listed(&fifo, "is not a regular file or directory"),
    ];
    assert_eq!(warnings(&stdout), expected, "{stdout}");
    assert!(!stdout.contains("gone.strata"), "{stdout}");
}

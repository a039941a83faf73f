//! `check-config` as an operator runs it, under both names (`strata-router
//! check-config`, `strata-ctl check-config`): exit status, the summary on
//! stdout, the error line on stderr.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

fn check_config(exe: Exe, path: &Path) -> Output {
    exe.run(&["check-config", path.to_str().expect("a UTF-8 path")])
}

under_both_names!(
    the_example_config_passes,
    a_broken_config_exits_1_naming_the_path,
    a_nested_error_names_the_json_path,
    a_missing_file_exits_1,
    profile_problems_are_shown_not_fatal_and_never_echoed,
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

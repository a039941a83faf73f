//! The two names of the operator command: `strata-router` (the spec's) and
//! `strata-ctl` are the same program. Their `--help`, every subcommand's
//! `--help`, `--version` and usage errors are the same text apart from the
//! name; each calls itself by its own name, whatever file name it is run
//! under. (Every other ctl test file runs its subcommand under both names.)

use std::fs;

use crate::common::*;

const SUBCOMMANDS: [&str; 9] = [
    "check-config",
    "status",
    "off",
    "on",
    "daemon",
    "demo",
    "requests",
    "top",
    "simulate",
];

/// `exe ARGS`: exit status, stdout, stderr.
fn outcome(exe: Exe, args: &[&str]) -> (Option<i32>, String, String) {
    let out = exe.run(args);
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// The same outcome with the program's name in its usage lines replaced by
/// `NAME` (the name appears nowhere else in clap's output; the about text
/// "Operator commands for strata-router" is the same under both).
fn without_name(exe: Exe, args: &[&str]) -> (Option<i32>, String, String) {
    let (code, stdout, stderr) = outcome(exe, args);
    let usage = format!("Usage: {}", exe.name);
    (
        code,
        stdout.replace(&usage, "Usage: NAME"),
        stderr.replace(&usage, "Usage: NAME"),
    )
}

#[test]
fn help_lists_every_subcommand_under_both_names_alike() {
    let (code, stdout, stderr) = outcome(STRATA_ROUTER, &["--help"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains("Usage: strata-router <COMMAND>"),
        "{stdout}"
    );
    for subcommand in SUBCOMMANDS {
        assert!(
            stdout
                .lines()
                .any(|line| line.trim_start().starts_with(&format!("{subcommand} "))),
            "{subcommand} missing from\n{stdout}"
        );
    }
    assert_eq!(
        without_name(STRATA_ROUTER, &["--help"]),
        without_name(STRATA_CTL, &["--help"])
    );
}

#[test]
fn every_subcommand_help_is_the_same_under_both_names() {
    for subcommand in SUBCOMMANDS {
        for exe in [STRATA_ROUTER, STRATA_CTL] {
            let (code, stdout, stderr) = outcome(exe, &[subcommand, "--help"]);
            assert_eq!(code, Some(0), "{} {subcommand}: {stderr}", exe.name);
            assert!(
                stdout.contains(&format!("Usage: {} {subcommand}", exe.name)),
                "{stdout}"
            );
        }
        assert_eq!(
            without_name(STRATA_ROUTER, &[subcommand, "--help"]),
            without_name(STRATA_CTL, &[subcommand, "--help"]),
            "{subcommand}"
        );
    }
}

#[test]
fn version_names_the_program() {
    for exe in [STRATA_ROUTER, STRATA_CTL] {
        let (code, stdout, _) = outcome(exe, &["--version"]);
        assert_eq!(code, Some(0));
        assert_eq!(
            stdout,
            format!("{} {}\n", exe.name, env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn usage_errors_exit_2_under_both_names_alike() {
    for args in [
        &["status"][..],
        &["no-such-command"],
        &["off", "--later", "/s"],
    ] {
        for exe in [STRATA_ROUTER, STRATA_CTL] {
            let (code, stdout, stderr) = outcome(exe, args);
            assert_eq!(code, Some(2), "{} {args:?}: {stderr}", exe.name);
            assert_eq!(stdout, "");
            assert!(stderr.contains(&format!("Usage: {}", exe.name)), "{stderr}");
        }
        assert_eq!(
            without_name(STRATA_ROUTER, args),
            without_name(STRATA_CTL, args),
            "{args:?}"
        );
    }
}

/// The name comes from the binary, not from `argv[0]`: a copy under
/// another file name still says what it is (in usage lines and in its own
/// messages).
#[test]
fn a_renamed_copy_keeps_its_name() {
    let dir = TempDir::new("names");
    for exe in [STRATA_ROUTER, STRATA_CTL] {
        let copy = dir.path().join(format!("renamed-{}", exe.name));
        // A hard link: a copy could still be open for writing in a child
        // another test thread forked (ETXTBSY).
        if fs::hard_link(exe.path(), &copy).is_err() {
            fs::copy(exe.path(), &copy).unwrap();
        }
        let out = run(
            {
                let mut command = std::process::Command::new(&copy);
                command.arg("--version");
                command
            },
            LONG,
        );
        assert_eq!(
            text(&out.stdout),
            format!("{} {}\n", exe.name, env!("CARGO_PKG_VERSION"))
        );
        let missing = dir.path().join("absent.json");
        let out = run(
            {
                let mut command = std::process::Command::new(&copy);
                command.arg("check-config").arg(&missing);
                command
            },
            LONG,
        );
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).starts_with(&exe.says("config error: ")),
            "{}",
            text(&out.stderr)
        );
    }
}

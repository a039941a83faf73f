//! Runs the fake Strata backend's own Python test suite, so `cargo test` covers the test
//! double the end-to-end tests rely on. The interpreter is `$STRATA_TEST_PYTHON`, or `python3`
//! (see `strata_test_support::python`).

use std::collections::BTreeSet;
use std::process::Command;

use strata_e2e::{fake_strata_dir as fake_dir, python};

#[test]
fn fake_strata_unittests_pass() {
    let interpreter = python();
    let python = interpreter.display();
    let output = Command::new(interpreter)
        .args(["-m", "unittest", "-v", "test_server"])
        .current_dir(fake_dir())
        // Keep __pycache__ out of the source tree (the fake is also embedded as files).
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python} (set STRATA_TEST_PYTHON): {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "`{python} -m unittest -v test_server` in {} failed with {}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        fake_dir().display(),
        output.status,
    );
}

/// FILES.txt names exactly the runtime files of the fake (what a binary embeds), in order.
#[test]
fn files_list_matches_the_serve_package() {
    let dir = fake_dir();
    let listed: Vec<String> = std::fs::read_to_string(dir.join("FILES.txt"))
        .expect("read FILES.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "FILES.txt must be sorted");
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir.join("serve"))
        .expect("read serve/")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".py"))
        .map(|name| format!("serve/{name}"))
        .collect();
    let listed: BTreeSet<String> = listed.into_iter().collect();
    assert_eq!(listed, on_disk, "FILES.txt and serve/*.py differ");
}

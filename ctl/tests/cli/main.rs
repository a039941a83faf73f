//! The operator command's integration tests, one module per command family, in one test
//! binary: each file here was a binary of its own, and each linked the end-to-end harness
//! again. A file's tests keep their names under the file's name as module
//! (`cargo test -p strata-ctl --test cli names::`). `common/` is what they share, its
//! `under_both_names!` among it.

mod check_config;
mod common;
mod control;
mod daemon;
mod demo;
mod names;
mod requests;
mod simulate;

/// A file of this folder that is not declared above is never compiled nor run, and nothing
/// else would say so: every `NAME.rs` here must have its `mod NAME;`.
#[test]
fn every_file_of_this_folder_is_a_module_of_the_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("read main.rs");
    let mut undeclared = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read tests/cli") {
        let name = entry.expect("a directory entry").file_name();
        let name = name.to_string_lossy();
        if let Some(module) = name.strip_suffix(".rs")
            && module != "main"
            && !main.lines().any(|line| line == format!("mod {module};"))
        {
            undeclared.push(name.into_owned());
        }
    }
    assert!(
        undeclared.is_empty(),
        "ctl/tests/cli/main.rs does not declare {undeclared:?}: add `mod NAME;` for each"
    );
}

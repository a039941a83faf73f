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
    let undeclared = strata_test_support::test_binary::undeclared_modules(&dir);
    assert!(
        undeclared.is_empty(),
        "ctl/tests/cli/main.rs does not declare {undeclared:?}: add `mod NAME;` for each"
    );
}

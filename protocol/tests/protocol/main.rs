//! The protocol crate's integration tests, one module per document or parser, in one test
//! binary: each file here was a binary of its own. A file's tests keep their names under the
//! file's name as module (`cargo test -p strata-protocol --test protocol props::`).

mod api;
mod config_keys_doc;
mod config_profiles;
mod config_rules;
mod example_config;
mod props;
mod record;
mod wire;

/// A file of this folder that is not declared above is never compiled nor run, and nothing
/// else would say so: every `NAME.rs` here must have its `mod NAME;`.
#[test]
fn every_file_of_this_folder_is_a_module_of_the_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/protocol");
    let undeclared = strata_test_support::test_binary::undeclared_modules(&dir);
    assert!(
        undeclared.is_empty(),
        "protocol/tests/protocol/main.rs does not declare {undeclared:?}: add `mod NAME;` for each"
    );
}

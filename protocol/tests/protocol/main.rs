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
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("read main.rs");
    let mut undeclared = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("read tests/protocol") {
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
        "protocol/tests/protocol/main.rs does not declare {undeclared:?}: add `mod NAME;` for each"
    );
}

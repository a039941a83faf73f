//! `docs/configuration.md`'s key tables are rendered from the key
//! declaration (`strata_protocol::config::keys::KEYS`, rendered by
//! `keys_markdown`), never edited by hand.
//!
//! The tables sit between two marker lines ([`BEGIN`], [`END`]). When the
//! region differs from what the declaration renders, this test rewrites it
//! in the file and fails, so the next run passes and the change shows in
//! `git diff` to be committed (as rust-analyzer regenerates its
//! configuration docs): after changing a key, run
//! `cargo test -p strata-protocol --test config_keys_doc` and commit the
//! file. Where the file cannot be written (a read-only checkout) the test
//! still fails with the same message.

use std::path::{Path, PathBuf};
use strata_protocol::config::keys_markdown;

const BEGIN: &str = "<!-- BEGIN generated config keys: cargo test -p strata-protocol --test config_keys_doc regenerates this table -->";
const END: &str = "<!-- END generated config keys -->";

fn reference_path() -> PathBuf {
    let protocol = Path::new(env!("CARGO_MANIFEST_DIR"));
    protocol
        .parent()
        .unwrap_or(protocol)
        .join("docs/configuration.md")
}

/// The text between the marker lines (after BEGIN's line, up to END's),
/// and the byte range it occupies.
fn generated_region(text: &str) -> Result<std::ops::Range<usize>, String> {
    let begin = text.find(BEGIN).ok_or_else(|| format!("no line {BEGIN}"))?;
    let start = begin + BEGIN.len();
    let start = start + usize::from(text[start..].starts_with('\n'));
    let end = text[start..]
        .find(END)
        .map(|offset| start + offset)
        .ok_or_else(|| format!("no line {END} after the BEGIN marker"))?;
    Ok(start..end)
}

/// What the region holds: the tables, set off by blank lines so markdown
/// renders them apart from the markers.
fn rendered() -> String {
    format!("\n{}\n", keys_markdown())
}

#[test]
fn the_reference_tables_are_rendered_from_the_declaration() {
    let path = reference_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    let region = generated_region(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    let wanted = rendered();
    if text[region.clone()] == wanted {
        return;
    }
    let mut updated = text.clone();
    updated.replace_range(region, &wanted);
    let outcome = match std::fs::write(&path, updated) {
        Ok(()) => "it has been rewritten: review and commit it".to_owned(),
        Err(err) => format!("it could not be rewritten ({err})"),
    };
    panic!(
        "{}: the config key tables differ from what config::keys::KEYS renders; {outcome} \
         (the tables are generated: change the declaration, not the file)",
        path.display()
    );
}

#[test]
fn the_region_is_found_between_the_markers() {
    let text = format!("# Title\n\nprose\n\n{BEGIN}\nold\n{END}\n\nmore\n");
    let region = generated_region(&text).unwrap();
    assert_eq!(&text[region], "old\n");
    assert!(generated_region("no markers").is_err());
    assert!(generated_region(&format!("{BEGIN}\nno end")).is_err());
}

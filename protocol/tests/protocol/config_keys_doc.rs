//! `docs/configuration.md`'s key tables are rendered from the key
//! declaration (`strata_protocol::config::keys::KEYS`, rendered by
//! `keys_markdown`), never edited by hand.
//!
//! Each table sits between two marker lines ([`REGIONS`]: the top-level
//! keys, then the model-entry keys); the prose around them is the page's
//! own. When a region differs from what the declaration renders, this test
//! rewrites it in the file and fails, so the next run passes and the change
//! shows in `git diff` to be committed (as rust-analyzer regenerates its
//! configuration docs): after changing a key, run
//! `cargo test -p strata-protocol --test protocol config_keys_doc` and commit the
//! file. Where the file cannot be written (a read-only checkout) the test
//! still fails with the same message.

use std::ops::Range;
use std::path::{Path, PathBuf};
use strata_protocol::config::keys::Place;
use strata_protocol::config::keys_markdown;

/// The marker lines around each generated table, and whose keys it holds.
const REGIONS: [(&str, &str, Place); 2] = [
    (
        "<!-- BEGIN generated config keys: cargo test -p strata-protocol --test protocol config_keys_doc regenerates this table -->",
        "<!-- END generated config keys -->",
        Place::TopLevel,
    ),
    (
        "<!-- BEGIN generated model keys: cargo test -p strata-protocol --test protocol config_keys_doc regenerates this table -->",
        "<!-- END generated model keys -->",
        Place::Model,
    ),
];

fn reference_path() -> PathBuf {
    let protocol = Path::new(env!("CARGO_MANIFEST_DIR"));
    protocol
        .parent()
        .unwrap_or(protocol)
        .join("docs/configuration.md")
}

/// The byte range between the `begin` line and the `end` marker: what
/// follows the begin line's newline, up to the end marker.
fn region(text: &str, begin: &str, end: &str) -> Result<Range<usize>, String> {
    let at = text.find(begin).ok_or_else(|| format!("no line {begin}"))?;
    let start = at + begin.len();
    let start = start + usize::from(text[start..].starts_with('\n'));
    let stop = text[start..]
        .find(end)
        .map(|offset| start + offset)
        .ok_or_else(|| format!("no line {end} after {begin}"))?;
    Ok(start..stop)
}

/// `text` with every region holding what the declaration renders.
fn regenerated(text: &str) -> Result<String, String> {
    let mut out = text.to_owned();
    for (begin, end, place) in REGIONS {
        let range = region(&out, begin, end)?;
        out.replace_range(range, &keys_markdown(place));
    }
    Ok(out)
}

#[test]
fn the_reference_tables_are_rendered_from_the_declaration() {
    let path = reference_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
    let wanted = regenerated(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    if wanted == text {
        return;
    }
    let outcome = match std::fs::write(&path, wanted) {
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
fn the_regions_are_found_between_their_markers() {
    let [(begin, end, _), (model_begin, model_end, _)] = REGIONS;
    let text = format!(
        "# Title\n\n{begin}\nSTALE\n{end}\n\nprose\n\n{model_begin}\nSTALE TOO\n{model_end}\n"
    );
    assert_eq!(&text[region(&text, begin, end).unwrap()], "STALE\n");
    let regenerated = regenerated(&text).unwrap();
    assert!(regenerated.contains(&format!("{begin}\n| key |")));
    assert!(regenerated.contains(&format!("|\n{end}\n\nprose\n\n{model_begin}\n| key |")));
    assert!(regenerated.contains("| `weights` |"));
    assert!(!regenerated.contains("STALE"));
    assert!(region("no markers", begin, end).is_err());
    assert!(region(&format!("{begin}\nno end"), begin, end).is_err());
}

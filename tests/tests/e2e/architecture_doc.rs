//! Every test ARCHITECTURE.md names as holding an invariant still exists.
//!
//! The invariants section lists, after each invariant's `Tests:`, the test
//! files (backticked paths from the repository root) and, in parentheses
//! right after a file, the backticked names of test functions in it. Files
//! move and tests get renamed; this reads the document as it is when the
//! test runs and fails naming every file or function that no longer exists,
//! so the document cannot quietly point at nothing. No binary is started.

use strata_e2e::python::repo_root;

/// The heading of the section whose `Tests:` lists are checked.
const SECTION: &str = "## Invariants, and the tests that hold them";

/// One test reference: a file, or a function in a file.
#[derive(Debug, PartialEq)]
struct Named {
    file: String,
    function: Option<String>,
}

/// The backticked spans of `text`, with the text that follows each one up to
/// the next span.
fn spans(text: &str) -> Vec<(&str, &str)> {
    let pieces: Vec<&str> = text.split('`').collect();
    // Odd pieces are inside backticks; the piece after each is what follows it.
    (1..pieces.len())
        .step_by(2)
        .map(|i| (pieces[i], pieces.get(i + 1).copied().unwrap_or("")))
        .collect()
}

/// The files and functions one `Tests:` list names: a backticked path ending
/// in `.rs`, then optionally a parenthesized group whose backticked
/// identifiers are functions in that file (other words there describe the
/// test and are skipped).
fn named_tests(list: &str) -> Vec<Named> {
    let mut named = Vec::new();
    let mut file: Option<String> = None;
    let mut depth = 0usize;
    for (span, after) in spans(list) {
        let is_ident =
            !span.is_empty() && span.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
        // Inside the parentheses after a file: its functions.
        if depth > 0 && is_ident {
            if let Some(file) = &file {
                named.push(Named {
                    file: file.clone(),
                    function: Some(span.to_owned()),
                });
            }
        } else if depth == 0 && span.ends_with(".rs") {
            named.push(Named {
                file: span.to_owned(),
                function: None,
            });
            file = Some(span.to_owned());
        }
        for c in after.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    named
}

/// Every `Tests:` list of the invariants section, each with the invariant's
/// bold title.
fn invariant_test_lists(document: &str) -> Vec<(String, String)> {
    let start = document
        .find(SECTION)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no section {SECTION:?}"));
    let section = &document[start + SECTION.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split("\n- ")
        .skip(1)
        .filter_map(|bullet| {
            let title = bullet
                .strip_prefix("**")
                .and_then(|rest| rest.split_once("**"))
                .map_or("?", |(title, _)| title);
            let (_, list) = bullet.split_once("Tests:")?;
            Some((title.to_owned(), list.to_owned()))
        })
        .collect()
}

/// Whether `source` defines a function `name`.
fn defines(source: &str, name: &str) -> bool {
    [format!("fn {name}("), format!("fn {name}<")]
        .iter()
        .any(|pattern| source.contains(pattern.as_str()))
}

#[test]
fn every_test_the_invariants_name_exists() {
    let root = repo_root();
    let document = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let lists = invariant_test_lists(&document);
    assert!(
        !lists.is_empty(),
        "no invariant names its tests (no `Tests:` list found)"
    );
    let mut checked = 0;
    let mut missing = Vec::new();
    for (invariant, list) in &lists {
        for named in named_tests(list) {
            checked += 1;
            let path = root.join(&named.file);
            let source = std::fs::read_to_string(&path).ok();
            match (&source, &named.function) {
                (None, _) => missing.push(format!("{invariant}: {} (no such file)", named.file)),
                (Some(source), Some(function)) if !defines(source, function) => {
                    missing.push(format!("{invariant}: {} has no fn {function}", named.file))
                }
                _ => {}
            }
        }
    }
    assert!(checked > 0, "the `Tests:` lists name no test file");
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names tests that do not exist (update the document or the test):\n  {}",
        missing.join("\n  ")
    );
}

/// The reader of a `Tests:` list, on a made-up one: files with and without
/// functions, descriptions in parentheses, and a function list that ends.
#[test]
fn a_tests_list_names_files_and_the_functions_after_them() {
    let list = "`a/x.rs` (every message round-trips), `b/y.rs` and `c/z.rs`
  (`one_test`,
  `two_tests`, which also reads the logs), `d/w.rs`.";
    let file = |file: &str| Named {
        file: file.into(),
        function: None,
    };
    let function = |file: &str, function: &str| Named {
        file: file.into(),
        function: Some(function.into()),
    };
    assert_eq!(
        named_tests(list),
        [
            file("a/x.rs"),
            file("b/y.rs"),
            file("c/z.rs"),
            function("c/z.rs", "one_test"),
            function("c/z.rs", "two_tests"),
            file("d/w.rs"),
        ]
    );
    assert!(defines("fn one_test() {}", "one_test"));
    assert!(!defines("fn one_test_more() {}", "one_test"));
}

//! Every relative link in the repository's Markdown resolves.
//!
//! The README, the manual in `docs/` and the other documents (ARCHITECTURE,
//! RESEARCH, `research/`, `tests/**/*.md`, `nix/tests/`, `contrib/`) link to
//! each other's files and headings. A renamed heading or a moved file would
//! leave a link that leads nowhere, and nothing else would notice; this reads
//! every `*.md` file under the repository root (outside `target/`, `.git/`
//! and hidden or `node_modules` directories) and fails naming each link whose
//! file does not exist or whose `#anchor` matches no heading of the page it
//! points to.
//!
//! Anchors are GitHub's: a heading's text as rendered (links reduced to their
//! text, code spans to their content), lowercased, each space turned into
//! `-`, every character other than letters, digits, `-` and `_` removed; a
//! repeated slug gets `-1`, `-2`, ... in order. Headings are ATX (`## Title`);
//! the documents use no other kind. Links are inline (`[text](target)`,
//! images too) and reference definitions (`[label]: target`), outside fenced
//! code blocks and code spans. External links (with a scheme, or `//`) are
//! not fetched. No binary is started.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use strata_e2e::python::repo_root;

/// One link found in a document: where it is and what it points to.
#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    target: String,
}

/// GitHub's anchor for a heading text (before de-duplication).
fn slug(heading: &str) -> String {
    let text = strip_links(heading);
    let mut slug = String::new();
    for c in text.trim().chars().flat_map(char::to_lowercase) {
        if c == ' ' {
            slug.push('-');
        } else if c.is_alphanumeric() || c == '-' || c == '_' {
            slug.push(c);
        }
    }
    slug
}

/// `text` with every `[label](target)` replaced by its label (and an image's
/// `![alt](target)` by its alt text), as a heading renders.
fn strip_links(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find("](") else { break };
        let Some(end) = after[close + 2..].find(')') else {
            break;
        };
        out.push_str(rest[..open].strip_suffix('!').unwrap_or(&rest[..open]));
        out.push_str(&after[..close]);
        rest = &after[close + 2 + end + 1..];
    }
    out.push_str(rest);
    out
}

/// `document` with fenced code blocks blanked (each of their lines, fences
/// included, made empty, so line numbers stay), and whether each remaining
/// line is outside a fence.
fn without_fences(document: &str) -> String {
    let mut fence: Option<String> = None;
    let mut lines = Vec::new();
    for line in document.lines() {
        let trimmed = line.trim_start();
        let marker: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        let is_fence =
            marker.len() >= 3 && marker.chars().all(|c| c == marker.as_bytes()[0] as char);
        match &fence {
            Some(open) if is_fence && marker.starts_with(open.as_str()) => {
                fence = None;
                lines.push("");
            }
            Some(_) => lines.push(""),
            None if is_fence => {
                fence = Some(marker);
                lines.push("");
            }
            None => lines.push(line),
        }
    }
    lines.join("\n")
}

/// `text` with every code span's content blanked (CommonMark: a run of N
/// backticks opens a span that the next run of exactly N backticks closes,
/// across lines too; a run with no closer is literal). Newlines are kept.
fn without_code_spans(text: &str) -> String {
    let bytes = text.as_bytes();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            let next = text[i..].find('`').map_or(bytes.len(), |n| i + n);
            out.push_str(&text[i..next]);
            i = next;
            continue;
        }
        let open = run_at(i);
        // Find the closing run of the same length.
        let mut j = i + open;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let run = run_at(j);
                if run == open {
                    close = Some(j);
                    break;
                }
                j += run;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                // Blank the span, keeping its newlines for line numbers.
                out.extend(
                    text[i..j + open]
                        .chars()
                        .map(|c| if c == '\n' { '\n' } else { ' ' }),
                );
                i = j + open;
            }
            None => {
                out.push_str(&text[i..i + open]);
                i += open;
            }
        }
    }
    out
}

/// The anchors a document defines: its headings' slugs, de-duplicated as
/// GitHub does.
fn anchors(document: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in without_fences(document).lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        // A closing sequence of `#`s is not part of the text.
        let text = line[hashes..].trim().trim_end_matches('#').trim_end();
        let base = slug(text);
        let count = seen.entry(base.clone()).or_insert(0);
        let anchor = if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        };
        *count += 1;
        anchors.insert(anchor);
    }
    anchors
}

/// Every link in a document (outside code), with its line number.
fn links(document: &str) -> Vec<Link> {
    let text = without_code_spans(&without_fences(document));
    let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
    let mut links = Vec::new();
    // Inline links and images: `](target)`, the target up to the matching
    // `)` (balanced parentheses inside it are allowed), an optional title
    // after a space.
    let mut from = 0;
    while let Some(found) = text[from..].find("](") {
        let start = from + found + 2;
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in text[start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(start + i);
                    break;
                }
                ')' => depth -= 1,
                '\n' => break,
                _ => {}
            }
        }
        from = start;
        let Some(end) = end else { continue };
        let inside = text[start..end].trim();
        let target = match inside.strip_prefix('<') {
            Some(rest) => rest.split('>').next().unwrap_or(""),
            None => inside.split_whitespace().next().unwrap_or(""),
        };
        if !target.is_empty() {
            links.push(Link {
                line: line_of(start),
                target: target.to_owned(),
            });
        }
    }
    // Reference definitions: `[label]: target` at the start of a line.
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('[')
            && let Some((_, after)) = rest.split_once("]:")
            && let Some(target) = after.split_whitespace().next()
        {
            links.push(Link {
                line: line_of(offset),
                target: target.trim_matches(['<', '>']).to_owned(),
            });
        }
        offset += line.len();
    }
    links
}

/// Whether a link leaves the repository (a scheme such as `https:` or
/// `mailto:`, or a protocol-relative `//host`).
fn is_external(target: &str) -> bool {
    if target.starts_with("//") {
        return true;
    }
    match target.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && !scheme.contains(['/', '#', '.'])
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-".contains(c))
        }
        None => false,
    }
}

/// `path` with `.` and `..` resolved lexically (no file system access).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The broken links of a set of documents (paths relative to the repository
/// root), one message each. `is_dir` and `is_file` answer for paths relative
/// to the root, so the check can run on made-up documents too.
fn broken_links(
    documents: &BTreeMap<PathBuf, String>,
    is_file: impl Fn(&Path) -> bool,
    is_dir: impl Fn(&Path) -> bool,
) -> Vec<String> {
    let anchors_of: BTreeMap<&PathBuf, BTreeSet<String>> = documents
        .iter()
        .map(|(path, text)| (path, anchors(text)))
        .collect();
    let mut broken = Vec::new();
    for (path, text) in documents {
        let dir = path.parent().unwrap_or(Path::new(""));
        for link in links(text) {
            if is_external(&link.target) {
                continue;
            }
            let (file, anchor) = match link.target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (link.target.as_str(), None),
            };
            let file = file.split('?').next().unwrap_or("").replace("%20", " ");
            let target = if file.is_empty() {
                path.clone()
            } else if let Some(from_root) = file.strip_prefix('/') {
                normalize(Path::new(from_root))
            } else {
                normalize(&dir.join(&file))
            };
            let here = format!("{}:{}: {}", path.display(), link.line, link.target);
            if !is_file(&target) && !is_dir(&target) {
                broken.push(format!("{here}: no file or directory {}", target.display()));
                continue;
            }
            let Some(anchor) = anchor.filter(|anchor| !anchor.is_empty()) else {
                continue;
            };
            // A directory's anchors are its README's, as GitHub shows it.
            let page = if is_dir(&target) {
                target.join("README.md")
            } else {
                target.clone()
            };
            if page.extension().is_none_or(|ext| ext != "md") {
                continue; // `file.rs#L10` and the like: not a heading
            }
            match anchors_of.get(&page) {
                Some(anchors) if anchors.contains(anchor) => {}
                Some(_) => broken.push(format!(
                    "{here}: {} has no heading with the anchor #{anchor}",
                    page.display()
                )),
                None => broken.push(format!(
                    "{here}: {} is not a Markdown page here",
                    page.display()
                )),
            }
        }
    }
    broken
}

/// Every file under `dir` (relative to `root`) whose name ends in one of
/// `suffixes`, skipping build output, git's directory, hidden directories and
/// installed packages.
fn files_ending_in(root: &Path, dir: &Path, suffixes: &[&str], found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(root.join(dir))
        .unwrap_or_else(|e| panic!("read {}: {e}", root.join(dir).display()));
    for entry in entries {
        let entry = entry.expect("directory entry");
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let path = dir.join(&*name);
        let kind = entry.file_type().expect("file type");
        if kind.is_dir() {
            let skipped = name.starts_with('.')
                || name == "node_modules"
                || (dir.as_os_str().is_empty() && (name == "target" || name.starts_with("result")));
            if !skipped {
                files_ending_in(root, &path, suffixes, found);
            }
        } else if suffixes.iter().any(|suffix| name.ends_with(suffix)) {
            found.push(path);
        }
    }
}

/// Whether the flake's build source leaves `path` out (`flake.nix` filters
/// `nix/`, `flake.nix` and `flake.lock` from it), so that inside the Nix
/// build sandbox a link to it has nothing to find.
fn left_out_by_the_flake(path: &Path) -> bool {
    ["nix", "flake.nix", "flake.lock"]
        .iter()
        .any(|left_out| path.starts_with(left_out))
}

#[test]
fn every_relative_link_and_anchor_in_the_markdown_resolves() {
    let root = repo_root();
    // In the Nix build the source has no `nix/`: links there are taken on trust.
    let in_nix_sandbox = std::env::var_os("STRATA_TEST_IN_NIX_SANDBOX").is_some();
    let mut files = Vec::new();
    files_ending_in(root, Path::new(""), &[".md"], &mut files);
    for expected in ["README.md", "docs/README.md", "ARCHITECTURE.md"] {
        assert!(
            files.iter().any(|f| f == Path::new(expected)),
            "{expected} not found among {files:?}"
        );
    }
    let documents: BTreeMap<PathBuf, String> = files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root.join(&path))
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            (path, text)
        })
        .collect();
    let count: usize = documents.values().map(|text| links(text).len()).sum();
    assert!(
        count > 100,
        "only {count} links found: is the link reader broken?"
    );
    let broken = broken_links(
        &documents,
        |path| root.join(path).is_file() || (in_nix_sandbox && left_out_by_the_flake(path)),
        |path| root.join(path).is_dir(),
    );
    assert!(
        broken.is_empty(),
        "{} of {count} links in the Markdown lead nowhere (fix the link, or the heading it \
         names):\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
}

/// The manual's pages a text names as plain paths (`docs/PAGE.md` or
/// `docs/PAGE.md#anchor`, as code comments cite them), with their line.
fn manual_paths(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("docs/") {
            let preceded = line.len() - rest.len() + at;
            let path: String = rest[at..]
                .chars()
                .take_while(|&c| c.is_ascii_alphanumeric() || "/._-#".contains(c))
                .collect();
            rest = &rest[at + "docs/".len()..];
            // Only a path that starts there (not `foo/docs/`) and names a page.
            let starts = line[..preceded]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || "/._-".contains(c)));
            let path = path.trim_end_matches(['.', ',']);
            let page = path.split('#').next().unwrap_or("");
            if starts && page.ends_with(".md") {
                found.push(Link {
                    line: number + 1,
                    target: format!("/{path}"),
                });
            }
        }
    }
    found
}

/// Code, scripts and units cite the manual by path (`docs/operating.md#wedged-backends-...`),
/// where Markdown would link: each page and anchor they name exists. (This file's own made-up
/// pages are not read.)
#[test]
fn every_manual_page_and_anchor_named_in_code_exists() {
    let root = repo_root();
    let mut files = Vec::new();
    files_ending_in(
        root,
        Path::new(""),
        &[".rs", ".py", ".nix", ".sh", ".service", ".socket", ".toml"],
        &mut files,
    );
    let mut pages = Vec::new();
    files_ending_in(root, Path::new("docs"), &[".md"], &mut pages);
    let mut documents: BTreeMap<PathBuf, String> = pages
        .into_iter()
        .map(|page| {
            let text = std::fs::read_to_string(root.join(&page)).expect("a page of the manual");
            (page, text)
        })
        .collect();
    // One made-up document per citing file, holding its citations as links.
    let mut cited = 0;
    for file in files.iter().filter(|file| !file.ends_with("docs_links.rs")) {
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue; // not UTF-8: no citations
        };
        let citations = manual_paths(&text);
        if citations.is_empty() {
            continue;
        }
        cited += citations.len();
        // Keep line numbers: each citation on its own line, at its line.
        let mut lines = vec![String::new(); citations.last().map_or(0, |c| c.line)];
        for citation in &citations {
            lines[citation.line - 1].push_str(&format!("[x]({}) ", citation.target));
        }
        // The manual's own pages are checked as Markdown by the test above.
        documents
            .entry(file.clone())
            .or_insert_with(|| lines.join("\n"));
    }
    assert!(
        cited > 10,
        "only {cited} citations of docs/ found: is the reader broken?"
    );
    let broken: Vec<String> = broken_links(
        &documents,
        |path| root.join(path).is_file(),
        |path| root.join(path).is_dir(),
    )
    .into_iter()
    .filter(|message| !message.starts_with("docs/"))
    .collect();
    assert!(
        broken.is_empty(),
        "{} citations of the manual lead nowhere (fix the path, or the heading it names):\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
}

/// The check on made-up pages: a good link of each kind passes, and each kind
/// of broken one is reported with its file and line.
#[test]
fn broken_files_and_anchors_are_reported_and_good_ones_are_not() {
    let page = |text: &str| text.to_owned();
    let documents: BTreeMap<PathBuf, String> = [
        (
            PathBuf::from("README.md"),
            page(
                "# Title\n\n## Running the tests\n\n[a](docs/guide.md#when-it-dies) \
                 [b](#running-the-tests) [c](docs/) [d](https://example.com/x#y)\n\
                 [e](docs/guide.md#nowhere)\n[f](docs/missing.md)\n[g](#title-1)\n",
            ),
        ),
        (
            PathBuf::from("docs/guide.md"),
            page(
                "# Guide\n\n## When it dies\n\n### Silent streams: `stream_idle_ms`\n\n\
                 [back](../README.md#title) [code](../src/main.rs#L3) \
                 [s](#silent-streams-stream_idle_ms)\n\
                 `[not a link](nowhere.md)`\n\n```\n[not a link](nowhere.md)\n```\n\
                 [ref]: ../README.md#running-the-tests\n",
            ),
        ),
        (PathBuf::from("docs/README.md"), page("# Docs\n")),
    ]
    .into_iter()
    .collect();
    let files = [
        "README.md",
        "docs/guide.md",
        "docs/README.md",
        "src/main.rs",
    ];
    let broken = broken_links(
        &documents,
        |path| files.iter().any(|f| Path::new(f) == path),
        |path| path == Path::new("docs"),
    );
    assert_eq!(
        broken,
        [
            "README.md:6: docs/guide.md#nowhere: docs/guide.md has no heading with the anchor \
             #nowhere",
            "README.md:7: docs/missing.md: no file or directory docs/missing.md",
            "README.md:8: #title-1: README.md has no heading with the anchor #title-1",
        ]
    );
}

#[test]
fn anchors_are_githubs_slugs() {
    assert_eq!(slug("When the proxy dies"), "when-the-proxy-dies");
    assert_eq!(
        slug("Wedged backends: probes, `unresponsive` and a truthful `/health`"),
        "wedged-backends-probes-unresponsive-and-a-truthful-health"
    );
    assert_eq!(
        slug("Silent streams: `stream_idle_ms`"),
        "silent-streams-stream_idle_ms"
    );
    assert_eq!(
        slug("The sandbox and Strata's paths"),
        "the-sandbox-and-stratas-paths"
    );
    assert_eq!(slug("Deployment (systemd)"), "deployment-systemd");
    assert_eq!(slug("A + B"), "a--b");
    assert_eq!(slug("See [the guide](x.md) now"), "see-the-guide-now");
    // Repeats are numbered; headings in code blocks do not count.
    let anchors = anchors("# A\n## A\n```\n# A\n```\n### A ###\n");
    assert_eq!(
        anchors,
        ["a", "a-1", "a-2"].map(String::from).into_iter().collect()
    );
}

#[test]
fn links_are_read_outside_code_only() {
    let found = links(
        "x [a](b.md) `[c](d.md)` ``[e](`f.md`)``\n```\n[g](h.md)\n```\n![i](j.png \"t\")\n[k]: l.md\n",
    );
    let targets: Vec<(usize, &str)> = found.iter().map(|l| (l.line, l.target.as_str())).collect();
    assert_eq!(targets, [(1, "b.md"), (5, "j.png"), (6, "l.md")]);
    assert!(is_external("https://example.com"));
    assert!(is_external("mailto:someone@example.com"));
    assert!(!is_external("docs/a.md#b:c"));
    assert!(!is_external("#anchor"));
    let cited = manual_paths("see docs/a.md#b-c, foo/docs/c.md, docs/ alone\n// docs/d.md.");
    let cited: Vec<(usize, &str)> = cited.iter().map(|l| (l.line, l.target.as_str())).collect();
    assert_eq!(cited, [(1, "/docs/a.md#b-c"), (2, "/docs/d.md")]);
    assert!(left_out_by_the_flake(Path::new("nix/tests/README.md")));
    assert!(!left_out_by_the_flake(Path::new("docs/nix.md")));
    assert!(!left_out_by_the_flake(Path::new("nixos.md")));
}

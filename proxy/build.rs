//! Build script: records the commit the proxy is built from, for the
//! `revision` label of `strata_router_build_info`.
//!
//! `STRATA_REVISION` in the build's environment wins (a packager that knows
//! the commit but builds outside git, e.g. Nix); else `git rev-parse` in
//! this workspace's own checkout; else "unknown" (a source tarball, the Nix
//! sandbox, no git installed). No dependencies: a failed `git` is simply no
//! revision.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=STRATA_REVISION");
    println!("cargo:rerun-if-changed=build.rs");
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let revision = std::env::var("STRATA_REVISION")
        .ok()
        .filter(|revision| !revision.trim().is_empty())
        .or_else(|| git_revision(&manifest_dir))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=STRATA_REVISION={}", revision.trim());
}

/// The checked-out commit (12 hex digits), if the workspace (this crate's
/// parent directory) is itself the top of a git checkout: not a checkout
/// that merely contains an unpacked copy of it.
fn git_revision(manifest_dir: &Path) -> Option<String> {
    let workspace = manifest_dir.parent()?.canonicalize().ok()?;
    let toplevel = git(manifest_dir, &["rev-parse", "--show-toplevel"])?;
    if Path::new(&toplevel).canonicalize().ok()? != workspace {
        return None;
    }
    // Build again when HEAD moves (a commit, a checkout): HEAD itself, the
    // branch it names, and packed refs.
    for name in ["HEAD", "packed-refs"] {
        rerun_if_git_path_changed(manifest_dir, name);
    }
    if let Some(branch) = git(manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
        rerun_if_git_path_changed(manifest_dir, &branch);
    }
    git(manifest_dir, &["rev-parse", "--short=12", "HEAD"])
}

fn rerun_if_git_path_changed(manifest_dir: &Path, name: &str) {
    if let Some(path) = git(manifest_dir, &["rev-parse", "--git-path", name]) {
        let path = manifest_dir.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// `git ARGS` in `dir`: its trimmed output when it succeeds with some.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}

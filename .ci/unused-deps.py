#!/usr/bin/env python3
"""Fails when a workspace crate declares a dependency its code never names.

The check `cargo machete` does, without installing it: for every member of
the workspace, each `[dependencies]` entry must be named (`name::` or
`use name`) in the crate's library or binary sources (`src/`, `build.rs`),
and each `[dev-dependencies]` entry anywhere in the crate (its tests,
benches, examples or `#[cfg(test)]` code). A dependency that is declared
only for its features, or used only by a macro, is listed under
`[package.metadata.unused-deps] ignore = [...]` with a comment saying why.

Usage: .ci/unused-deps.py [WORKSPACE_ROOT]
"""

import pathlib
import re
import sys
import tomllib


def rust_files(crate: pathlib.Path, dirs):
    for name in dirs:
        path = crate / name
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from sorted(path.rglob("*.rs"))


def names_used(files):
    text = "\n".join(path.read_text(encoding="utf-8") for path in files)
    # Comments would hide a removed use behind a doc mention.
    text = re.sub(r"//[^\n]*", "", text)
    return text


def is_named(ident: str, text: str) -> bool:
    return re.search(rf"(?<![\w:]){re.escape(ident)}::|\buse\s+{re.escape(ident)}\b|\bextern\s+crate\s+{re.escape(ident)}\b", text) is not None


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    workspace = tomllib.loads((root / "Cargo.toml").read_text(encoding="utf-8"))
    members = workspace.get("workspace", {}).get("members", [])
    problems = []
    for member in members:
        crate = root / member
        manifest = tomllib.loads((crate / "Cargo.toml").read_text(encoding="utf-8"))
        ignore = set(
            manifest.get("package", {})
            .get("metadata", {})
            .get("unused-deps", {})
            .get("ignore", [])
        )
        product = names_used(rust_files(crate, ["src", "build.rs"]))
        everything = names_used(
            rust_files(crate, ["src", "build.rs", "tests", "benches", "examples"])
        )
        for section, text in (
            ("dependencies", product),
            ("dev-dependencies", everything),
        ):
            for name, spec in manifest.get(section, {}).items():
                # `package = "..."` renames: the code names the key.
                if name in ignore:
                    continue
                ident = name.replace("-", "_")
                if not is_named(ident, text):
                    problems.append(f"{member}/Cargo.toml: [{section}] {name} is never used")
    for problem in problems:
        print(problem)
    if problems:
        print(
            "remove them, or list them under [package.metadata.unused-deps] ignore "
            "with the reason"
        )
        return 1
    print(f"unused-deps: {len(members)} crates, every dependency is used")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Check flake.lock's shape against flake.nix's inputs (stdlib only).

Usage: check-lock.py FLAKE_LOCK INPUTS_JSON
INPUTS_JSON is `(import ./flake.nix).inputs` as JSON (nix/check.sh makes it).

What the project's flake may depend on is fixed here: nixpkgs from
github:NixOS/nixpkgs/nixos-25.11, nothing else.  The pin itself (rev,
narHash, lastModified) is only checked for form: its values come from
../shared/research/nix.md, cross-confirmed there; they cannot be recomputed
without the nixpkgs tree, which this machine cannot fetch.
"""
import base64
import json
import re
import sys

EXPECTED_INPUTS = {"nixpkgs": "github:NixOS/nixpkgs/nixos-25.11"}
LOCKED_KEYS = {"type", "owner", "repo", "rev", "narHash", "lastModified"}


def fail(msg):
    print(f"flake.lock check: {msg}", file=sys.stderr)
    sys.exit(1)


def parse_github(url):
    m = re.fullmatch(r"github:([^/?#]+)/([^/?#]+)(?:/([^?#]+))?", url)
    if not m:
        fail(f"input url {url!r} is not of the form github:OWNER/REPO[/REF]")
    owner, repo, ref = m.groups()
    original = {"type": "github", "owner": owner, "repo": repo}
    if ref:
        original["ref"] = ref
    return original


def main():
    lock_path, inputs_json = sys.argv[1], sys.argv[2]
    inputs = json.loads(inputs_json)
    urls = {}
    for name, spec in inputs.items():
        if not isinstance(spec, dict) or set(spec) != {"url"}:
            fail(f"flake.nix input {name!r} must be exactly {{ url = ...; }}, got {spec!r}")
        urls[name] = spec["url"]
    if urls != EXPECTED_INPUTS:
        fail(f"flake.nix inputs are {urls}, expected exactly {EXPECTED_INPUTS}")

    with open(lock_path, encoding="utf-8") as f:
        lock = json.load(f)
    if set(lock) != {"nodes", "root", "version"}:
        fail(f"top-level keys are {sorted(lock)}, expected nodes, root, version")
    if lock["version"] != 7:
        fail(f"version is {lock['version']!r}, expected 7")
    nodes = lock["nodes"]
    root = nodes.get(lock["root"])
    if root is None or set(root) != {"inputs"}:
        fail("the root node must exist and hold only `inputs`")
    if set(root["inputs"]) != set(urls):
        fail(f"root inputs {sorted(root['inputs'])} do not match flake.nix inputs {sorted(urls)}")
    used = {lock["root"]}
    for name, url in urls.items():
        ref = root["inputs"][name]
        if not isinstance(ref, str):
            fail(f"input {name!r} is a `follows` ({ref!r}); none are expected")
        node = nodes.get(ref)
        if node is None:
            fail(f"input {name!r} points at missing node {ref!r}")
        used.add(ref)
        if "inputs" in node or "flake" in node:
            fail(f"node {ref!r} has unexpected keys {sorted(set(node) - {'locked', 'original'})}")
        original = parse_github(url)
        if node.get("original") != original:
            fail(f"node {ref!r} original is {node.get('original')!r}, expected {original!r} (from {url})")
        locked = node.get("locked") or {}
        if set(locked) != LOCKED_KEYS:
            fail(f"node {ref!r} locked keys are {sorted(locked)}, expected {sorted(LOCKED_KEYS)}")
        for k in ("type", "owner", "repo"):
            if locked[k] != original[k]:
                fail(f"node {ref!r} locked.{k} is {locked[k]!r}, expected {original[k]!r}")
        if not isinstance(locked["rev"], str) or not re.fullmatch(r"[0-9a-f]{40}", locked["rev"]):
            fail(f"node {ref!r} locked.rev {locked['rev']!r} is not 40 lowercase hex digits")
        nar = locked["narHash"]
        if not isinstance(nar, str) or not re.fullmatch(r"sha256-[A-Za-z0-9+/]{43}=", nar):
            fail(f"node {ref!r} locked.narHash {nar!r} is not an SRI sha256 hash")
        if len(base64.b64decode(nar[len("sha256-"):], validate=True)) != 32:
            fail(f"node {ref!r} locked.narHash does not decode to 32 bytes")
        lm = locked["lastModified"]
        if type(lm) is not int or lm < 1577836800:  # 2020-01-01
            fail(f"node {ref!r} locked.lastModified {lm!r} is not a plausible Unix time")
    extra = set(nodes) - used
    if extra:
        fail(f"unused nodes {sorted(extra)}")
    pin = nodes[root["inputs"]["nixpkgs"]]["locked"]
    print(f"flake.lock: nixpkgs {pin['rev']} ({pin['lastModified']}, {pin['narHash']})")


if __name__ == "__main__":
    main()

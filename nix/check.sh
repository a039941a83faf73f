#!/usr/bin/env bash
# Offline checks of the Nix packaging (flake.nix, flake.lock, nix/).
#
# Runs on a machine without GitHub or a Nix binary cache (CI here): parses the
# flake, checks flake.lock against flake.nix, and evaluates every output with
# `nix flake check --no-build` against nix/offline-stub, a small hand-written
# TEST DOUBLE for nixpkgs.  It builds nothing.  What only a real Nix host can
# verify is listed in docs/nix.md#what-is-verified-where.
#
# Usage: bash nix/check.sh   (from anywhere inside the repo)
# Installs Debian's nix-bin when `nix` is missing (needs root).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
START=$SECONDS
N=0
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

die() {
  echo "nix check: FAILED: $*" >&2
  exit 1
}

# --- tools -------------------------------------------------------------------
need_root_install() { # PKG...
  if [ "$(id -u)" != 0 ]; then
    die "'$1' is missing; install it (Debian: apt-get install $*) or run this as root"
  fi
  echo "nix check: installing $* from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "$@" >/dev/null
}
command -v nix >/dev/null 2>&1 || need_root_install nix-bin
command -v python3 >/dev/null 2>&1 || need_root_install python3
command -v git >/dev/null 2>&1 || need_root_install git
: "${HOME:=$WORK/home}"
export HOME

NIX=(nix --extra-experimental-features nix-command --extra-experimental-features flakes
  --option warn-dirty false)
STUB="path:$ROOT/nix/offline-stub"
OV=(--offline --no-write-lock-file --override-input nixpkgs "$STUB")
SYSTEMS=(x86_64-linux aarch64-linux)

# step NAME CMD...: run CMD quietly; on failure show its output and stop.
step() {
  local name=$1
  shift
  if ! "$@" >"$WORK/log" 2>&1; then
    cat "$WORK/log" >&2
    die "$name"
  fi
  N=$((N + 1))
}

# expect_failure NAME TEXT CMD...: CMD must fail, with TEXT in its output.
expect_failure() {
  local name=$1 text=$2
  shift 2
  if "$@" >"$WORK/log" 2>&1; then
    cat "$WORK/log" >&2
    die "$name: expected a failure, but it succeeded"
  fi
  if ! grep -qF -- "$text" "$WORK/log"; then
    cat "$WORK/log" >&2
    die "$name: failed, but without the expected message: $text"
  fi
  N=$((N + 1))
}

# --- 0. Nix only sees git-tracked files ------------------------------------
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || die "$ROOT is not a git work tree"
for f in flake.nix flake.lock Cargo.toml Cargo.lock \
  nix/offline-stub/flake.nix nix/offline-stub/lib.nix nix/offline-stub/pkgs.nix; do
  git ls-files --error-unmatch -- "$f" >/dev/null 2>&1 ||
    die "$f is not tracked by git (Nix ignores untracked files): git add it first"
done

# --- 1. every Nix file parses ----------------------------------------------
while IFS= read -r f; do
  step "parse $f" nix-instantiate --parse "$f"
done < <(
  {
    echo flake.nix
    find nix -name '*.nix'
  } | sort -u
)

# --- 2. flake.lock's shape, and flake.nix's inputs -----------------------------
inputs_json=$(nix-instantiate --eval --strict --json -E '(import ./flake.nix).inputs') ||
  die "cannot read inputs from flake.nix"
step "flake.lock shape" python3 nix/check-lock.py flake.lock "$inputs_json"
pin=$(cat "$WORK/log")

# --- 3. Rust version within nixos-25.11's rustc ------------------------------
# nixos-25.11 ships rustc 1.91 (per ../shared/research/nix.md; not verifiable
# here).  Cargo.toml's rust-version keeps clippy's incompatible_msrv honest.
step "rust-version <= 1.91" python3 - <<'EOF'
import glob, sys, tomllib
ceiling = (1, 91)
def ver(s):
    return tuple(int(x) for x in s.split(".")[:2])
root = tomllib.load(open("Cargo.toml", "rb"))
ws = root.get("workspace", {}).get("package", {})
if "rust-version" not in ws:
    sys.exit("Cargo.toml: [workspace.package] rust-version is not set")
found = [("Cargo.toml", ws["rust-version"], ws.get("edition", "2015"))]
for path in sorted(glob.glob("*/Cargo.toml")):
    pkg = tomllib.load(open(path, "rb")).get("package", {})
    rv, ed = pkg.get("rust-version"), pkg.get("edition")
    found.append((path, rv if isinstance(rv, str) else None, ed if isinstance(ed, str) else None))
for path, rv, ed in found:
    if rv is not None and ver(rv) > ceiling:
        sys.exit(f"{path}: rust-version {rv} is newer than nixos-25.11's rustc 1.91")
    if ed is not None and ed not in ("2015", "2018", "2021", "2024"):
        sys.exit(f"{path}: edition {ed} is not supported by rustc 1.91")
lints = root.get("workspace", {}).get("lints", {}).get("clippy", {})
if lints.get("incompatible_msrv") in ("allow", {"level": "allow"}):
    sys.exit("Cargo.toml: clippy's incompatible_msrv lint must stay on")
EOF

# --- 4. flake.lock matches flake.nix's inputs --------------------------------
step "flake.lock matches inputs (nix flake lock --no-update-lock-file)" \
  "${NIX[@]}" flake lock --no-update-lock-file --offline

# --- 5. every output evaluates, against the test double ----------------------
if "${NIX[@]}" flake check --no-build --all-systems "${OV[@]}" >"$WORK/log" 2>&1; then
  N=$((N + 1))
elif grep -q "unrecognised flag '--all-systems'" "$WORK/log"; then
  # Nix < 2.13 has no --all-systems and checks every system anyway.
  step "nix flake check --no-build" "${NIX[@]}" flake check --no-build "${OV[@]}"
else
  cat "$WORK/log" >&2
  die "nix flake check --no-build --all-systems"
fi

# --- 6. the outputs have the expected shape ----------------------------------
# Nix checks neither apps.*.type nor that program is a store path: do it here.
ev() { # OUTPUT APPLY-EXPR
  "${NIX[@]}" eval --json ".#$1" --apply "$2" "${OV[@]}" 2>"$WORK/log" ||
    {
      cat "$WORK/log" >&2
      die "nix eval .#$1"
    }
}
apps=$(ev apps 'builtins.mapAttrs (s: a: builtins.mapAttrs (n: v: { inherit (v) type program; }) a)')
packages=$(ev packages 'builtins.mapAttrs (s: p: builtins.mapAttrs (n: d: {
  out = d.outPath; drv = d.drvPath; inherit (d) name;
  mainProgram = d.meta.mainProgram or null;
  license = d.meta.license.spdxId or null;
  doCheck = d.doCheck or false;
  preCheck = d.preCheck or "";
  doInstallCheck = d.doInstallCheck or false;
  installCheck = d.installCheckPhase or "";
  checkInputs = map (x: x.pname or x.name) (d.nativeCheckInputs or [ ]);
}) p)')
shells=$(ev devShells 'builtins.mapAttrs (s: d: builtins.mapAttrs (n: v: {
  drv = v.drvPath; tools = map (x: x.pname or x.name) (v.nativeBuildInputs or [ ]);
}) d)')
checks=$(ev checks 'builtins.mapAttrs (s: c: builtins.mapAttrs (n: v: {
  drv = v.drvPath; script = (v.buildPhase or "") + (v.buildCommand or "");
  doInstallCheck = v.doInstallCheck or false;
}) c)')
formatter=$(ev formatter 'builtins.mapAttrs (s: f: f.drvPath)')

step "output shapes" python3 - "$apps" "$packages" "$shells" "$checks" "$formatter" "${SYSTEMS[@]}" <<'EOF'
import json, re, sys
apps, packages, shells, checks, formatter = (json.loads(a) for a in sys.argv[1:6])
systems = set(sys.argv[6:])
errors = []
def need(cond, msg):
    if not cond:
        errors.append(msg)
for name, out in [("apps", apps), ("packages", packages), ("devShells", shells),
                  ("checks", checks), ("formatter", formatter)]:
    need(set(out) == systems, f"{name} systems are {sorted(out)}, expected {sorted(systems)}")
drv = re.compile(r"^/nix/store/[a-z0-9]{32}-[^/]+\.drv$")
for s in systems:
    pkg = packages.get(s, {}).get("default")
    need(pkg is not None, f"packages.{s}.default is missing")
    # `nix run . -- daemon CONFIG` is the spec's `strata-router daemon CONFIG`;
    # the same program also runs as .#strata-ctl.
    for name, binary in (("default", "strata-router"), ("strata-router", "strata-router"),
                         ("strata-ctl", "strata-ctl")):
        app = apps.get(s, {}).get(name)
        need(app is not None, f"apps.{s}.{name} is missing")
        if pkg and app:
            need(app["type"] == "app", f"apps.{s}.{name}.type is {app['type']!r}, not 'app'")
            need(re.fullmatch(rf"/nix/store/[a-z0-9]{{32}}-[^/]+/bin/{binary}", app["program"] or ""),
                 f"apps.{s}.{name}.program {app['program']!r} is not a store path ending in /bin/{binary}")
            need(app["program"] == pkg["out"] + "/bin/" + binary,
                 f"apps.{s}.{name}.program is not packages.{s}.default's {binary}")
    if pkg:
        need(drv.match(pkg["drv"]), f"packages.{s}.default has no .drv")
        need(pkg["mainProgram"] == "strata-router", f"packages.{s}.default meta.mainProgram is {pkg['mainProgram']!r}")
        # Only a real build runs it; here: it is on and checks every binary.
        need(pkg["doInstallCheck"], f"packages.{s}.default does not run its install check (doInstallCheck)")
        for binary in ("strata-supervisor", "strata-proxy", "strata-router", "strata-ctl"):
            need(binary in pkg["installCheck"],
                 f"packages.{s}.default's installCheckPhase does not check bin/{binary}")
        need("--version" in pkg["installCheck"],
             f"packages.{s}.default's installCheckPhase does not run --version")
        need(pkg["license"] == "MPL-2.0", f"packages.{s}.default license is {pkg['license']!r}")
        need(pkg["doCheck"], f"packages.{s}.default does not run its tests (doCheck)")
        need("export STRATA_TEST_IN_NIX_SANDBOX=1" in pkg["preCheck"],
             f"packages.{s}.default does not export STRATA_TEST_IN_NIX_SANDBOX=1 for its tests")
        need("python3" in pkg["checkInputs"], f"packages.{s}.default lacks python3 in nativeCheckInputs")
    shell = shells.get(s, {}).get("default")
    need(shell is not None, f"devShells.{s}.default is missing")
    if shell:
        for tool in ("cargo", "rustc", "clippy", "rustfmt", "rust-analyzer", "python3"):
            need(tool in shell["tools"], f"devShells.{s}.default lacks {tool}")
    c = checks.get(s, {})
    for name in ("package", "clippy", "fmt"):
        need(name in c and drv.match(c[name]["drv"]), f"checks.{s}.{name} is missing or not a derivation")
    if pkg and "package" in c:
        need(c["package"]["drv"] == pkg["drv"], f"checks.{s}.package is not packages.{s}.default")
    if "clippy" in c:
        need(not c["clippy"]["doInstallCheck"],
             f"checks.{s}.clippy runs the package's install check on an output with no bin/")
        need(re.search(r"cargo clippy .*--all-targets.*-- -D warnings", c["clippy"]["script"]),
             f"checks.{s}.clippy does not run `cargo clippy --all-targets ... -- -D warnings`")
    if "fmt" in c:
        need("cargo fmt --all --check" in c["fmt"]["script"], f"checks.{s}.fmt does not run `cargo fmt --all --check`")
    need(drv.match(formatter.get(s, "")), f"formatter.{s} is not a derivation")
if errors:
    sys.exit("\n".join(errors))
EOF

# --- 7. the test double refuses what nixpkgs refuses -------------------------
for dir in nix/tests/*/; do
  dir=${dir%/}
  [ -f "$dir/expect" ] || continue
  expect=$(head -n1 "$dir/expect")
  cmd=(nix-instantiate --eval -E "(import ./$dir).drvPath")
  case $expect in
  ok) step "fixture $dir (must evaluate)" "${cmd[@]}" ;;
  "fail: "*) expect_failure "fixture $dir (must fail)" "${expect#fail: }" "${cmd[@]}" ;;
  *) die "$dir/expect: first line must be 'ok' or 'fail: TEXT'" ;;
  esac
done

# --- 8. ... and so does a broken copy of the real flake ---------------------
# A copy of the tracked files, checked as a path: flake (no git needed).
copy() { # DEST
  mkdir -p "$1"
  git ls-files -z --cached | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$1"
}
copy "$WORK/no-lock"
rm "$WORK/no-lock/Cargo.lock"
expect_failure "flake without Cargo.lock (must fail)" "Cargo.lock does not exist" \
  "${NIX[@]}" flake check --no-build "path:$WORK/no-lock" "${OV[@]}"

copy "$WORK/git-dep"
cat >>"$WORK/git-dep/Cargo.lock" <<'EOF'

[[package]]
name = "unhashed-git-dep"
version = "0.1.0"
source = "git+https://example.invalid/unhashed-git-dep?branch=main#0123456789abcdef0123456789abcdef01234567"
EOF
expect_failure "flake with an unhashed git dependency (must fail)" \
  "No hash was found while vendoring the git dependency unhashed-git-dep-0.1.0" \
  "${NIX[@]}" flake check --no-build "path:$WORK/git-dep" "${OV[@]}"

echo "$pin"
echo "nix check: ok ($N checks, $((SECONDS - START))s, $(nix --version); evaluated against the offline nixpkgs test double, nothing built)"

# TEST DOUBLE -- NOT nixpkgs' lib.
#
# A hand-written stand-in for the handful of nixpkgs `lib` functions that
# strata-router's flake.nix uses, so `nix flake check --no-build` can evaluate
# every output offline (nix/check.sh, with
# `--override-input nixpkgs path:./nix/offline-stub`).  It copies no code from
# nixpkgs.  Behaviour is kept close enough for evaluation, and deliberately
# stricter where that catches a mistake earlier (getExe throws instead of
# warning when meta.mainProgram is missing).  If flake.nix starts using
# another lib function, add it here; evaluation fails with "attribute ...
# missing" until you do.
let
  inherit (builtins)
    baseNameOf
    elem
    isAttrs
    listToAttrs
    match
    stringLength
    substring
    ;

  hasPrefix = pre: s: substring 0 (stringLength pre) s == pre;
  hasSuffix =
    suf: s:
    let
      ls = stringLength s;
      lf = stringLength suf;
    in
    lf <= ls && substring (ls - lf) lf s == suf;

  # Roughly nixpkgs' cleanSourceFilter: drop VCS metadata, editor junk,
  # object files and `nix build` result symlinks.
  cleanSourceFilter =
    name: type:
    let
      base = baseNameOf (toString name);
    in
    !(
      (type == "directory" && elem base [ ".git" ".svn" ".hg" "CVS" ])
      || hasSuffix "~" base
      || match "^\\.sw[a-z]$" base != null
      || match "^\\..*\\.sw[a-z]$" base != null
      || hasSuffix ".o" base
      || hasSuffix ".so" base
      || (type == "symlink" && hasPrefix "result" base)
      || type == "unknown"
    );

  # Like nixpkgs: returns an attrset that coerces to a store path and can be
  # filtered again (filters compose).
  cleanSourceWith =
    {
      src,
      filter ? _: _: true,
      name ? null,
    }:
    let
      orig = if isAttrs src && src ? origSrc then src.origSrc else src;
      prev = if isAttrs src && src ? filter then src.filter else (_: _: true);
      both = path: type: prev path type && filter path type;
      nm =
        if name != null then
          name
        else if isAttrs src && src ? name then
          src.name
        else
          "source";
    in
    {
      _isLibCleanSourceWith = true;
      origSrc = orig;
      filter = both;
      name = nm;
      outPath = builtins.path {
        path = orig;
        name = nm;
        filter = both;
      };
    };
in
{
  inherit hasPrefix hasSuffix cleanSourceFilter cleanSourceWith;

  cleanSource =
    src:
    cleanSourceWith {
      inherit src;
      filter = cleanSourceFilter;
    };

  genAttrs =
    names: f:
    listToAttrs (
      map (n: {
        name = n;
        value = f n;
      }) names
    );

  # Stricter than nixpkgs (which only warns): a package used as an app must
  # say which of its executables is the main one.
  getExe =
    drv:
    if drv ? meta && drv.meta ? mainProgram then
      "${drv}/bin/${drv.meta.mainProgram}"
    else
      throw "offline stub lib.getExe: ${drv.name or "<value>"} has no meta.mainProgram";

  licenses.mpl20 = {
    shortName = "mpl20";
    spdxId = "MPL-2.0";
    fullName = "Mozilla Public License 2.0";
    free = true;
  };

  platforms.linux = [
    "x86_64-linux"
    "aarch64-linux"
    "i686-linux"
    "armv7l-linux"
    "riscv64-linux"
  ];
}

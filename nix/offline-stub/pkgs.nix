# TEST DOUBLE -- NOT nixpkgs.
#
# A hand-written stand-in for `nixpkgs.legacyPackages.<system>`, holding only
# the attributes strata-router's flake.nix uses.  Every "package" here is a
# fake derivation (builtins.derivation with a builder that only prints an
# error), so `nix flake check --no-build` can instantiate all outputs without
# a network or binary cache.  NOTHING here can be built, and passing against
# it says nothing about whether nixpkgs really has these attributes or
# whether the real build succeeds: see docs/nix.md#what-is-verified-where.
#
# What it does check, the way nixpkgs would fail (at evaluation, or for the
# marked cases at build time):
#   - rustPlatform.buildRustPackage needs cargoLock (or cargoHash/cargoDeps/
#     cargoVendorDir); cargoSha256 is refused (removed from nixpkgs);
#   - cargoLock.lockFile must exist (a Cargo.lock that is missing or not
#     git-tracked makes nixpkgs fail reading it);
#   - every `git+` package in Cargo.lock needs a cargoLock.outputHashes entry
#     "<name>-<version>" (importCargoLock's "No hash was found ..." error);
#   - crates.io packages need a checksum; other registries are not modelled;
#   - [build time in nixpkgs] src must contain Cargo.toml and a Cargo.lock
#     identical to cargoLock.lockFile ("cargoLock out of date");
#   - meta.platforms must include the system (nixpkgs refuses to evaluate a
#     package that is not available on the host platform).
# Extend it when flake.nix starts using another attribute.
{ lib, system }:
let
  inherit (builtins)
    attrNames
    filter
    hashString
    isAttrs
    isFunction
    isList
    isPath
    isString
    listToAttrs
    pathExists
    readFile
    removeAttrs
    ;
  inherit (lib) hasPrefix;

  # Attributes that stay on the Nix side and never reach the builder's
  # environment (as in mkDerivation).
  nonEnv = [
    "meta"
    "passthru"
    "env"
    "cargoLock"
    "shellHook"
  ];

  envValue =
    v:
    if isFunction v then
      null
    else if isAttrs v && !(v ? outPath) then
      null
    else
      v;

  toEnv =
    attrs:
    let
      raw = removeAttrs attrs nonEnv // (attrs.env or { });
      names = filter (n: envValue raw.${n} != null) (attrNames raw);
    in
    listToAttrs (
      map (n: {
        name = n;
        value = raw.${n};
      }) names
    );

  # The fake stdenv.mkDerivation.  Accepts an attrset or a `finalAttrs:`
  # function; the result carries its inputs, meta, passthru and overrideAttrs
  # like a real derivation.
  mkDerivation =
    argsOrFun:
    let
      attrs = if isFunction argsOrFun then argsOrFun attrs else argsOrFun;
      name =
        attrs.name or (
          if attrs ? pname && attrs ? version then
            "${attrs.pname}-${attrs.version}"
          else
            throw "offline stub mkDerivation: needs name or pname+version"
        );
      meta = attrs.meta or { };
      platformOk = !(meta ? platforms) || builtins.elem system meta.platforms;
      drv = derivation (
        toEnv attrs
        // {
          inherit name system;
          builder = "/bin/sh";
          args = [
            "-c"
            "echo 'offline nixpkgs stub (nix/offline-stub): this derivation is a test double and cannot be built' >&2; exit 1"
          ];
        }
      );
      result =
        drv
        // (attrs.passthru or { })
        // {
          inherit meta;
          overrideAttrs =
            f:
            mkDerivation (
              final:
              let
                prev = attrs;
                step = f prev;
              in
              prev // (if isFunction step then f final prev else step)
            );
        };
    in
    if platformOk then
      result
    else
      throw "offline stub: Package '${name}' is not available on the requested hostPlatform ${system} (meta.platforms)";

  # A leaf package of nixpkgs, as an opaque fake derivation.
  leaf =
    pname: version: mainProgram:
    mkDerivation {
      inherit pname version;
      meta.mainProgram = mainProgram;
    };

  # Stand-in for importCargoLock's evaluation-time checks.  Returns a string
  # that changes with the lock contents (the real one returns the vendor
  # derivation).
  importCargoLock =
    {
      lockFile ? null,
      lockFileContents ? null,
      outputHashes ? { },
      allowBuiltinFetchGit ? false,
      ...
    }:
    let
      contents =
        if lockFile != null && lockFileContents != null then
          throw "offline stub importCargoLock: either lockFile or lockFileContents must be set, but not both"
        else if lockFile != null then
          if !(isPath lockFile || isString lockFile) then
            throw "offline stub importCargoLock: cargoLock.lockFile must be a path, e.g. ./Cargo.lock"
          else if !pathExists lockFile then
            throw "offline stub importCargoLock: cargoLock.lockFile ${toString lockFile} does not exist (is Cargo.lock missing, or not tracked by git? Nix only sees tracked files)"
          else
            readFile lockFile
        else if lockFileContents != null then
          lockFileContents
        else
          throw "offline stub importCargoLock: either lockFile or lockFileContents must be set";
      parsed = builtins.fromTOML contents;
      packages = parsed.package or [ ];
      key = p: "${p.name}-${p.version}";
      gitPkgs = filter (p: hasPrefix "git+" (p.source or "")) packages;
      unhashed = filter (p: !(outputHashes ? ${key p})) gitPkgs;
      registryPkgs = filter (
        p: (p ? source) && !(hasPrefix "git+" p.source)
      ) packages;
      cratesIo = [
        "registry+https://github.com/rust-lang/crates.io-index"
        "sparse+https://index.crates.io/"
      ];
      otherRegistry = filter (p: !(builtins.elem p.source cratesIo)) registryPkgs;
      noChecksum = filter (p: !(p ? checksum)) registryPkgs;
      first = l: builtins.head l;
    in
    if unhashed != [ ] && !allowBuiltinFetchGit then
      throw ''
        offline stub importCargoLock: No hash was found while vendoring the git dependency ${key (first unhashed)}. You can add
        a hash through the `outputHashes` argument of `importCargoLock`:

        outputHashes = {
          "${key (first unhashed)}" = "<hash>";
        };

        If you use `buildRustPackage`, you can add this attribute to the `cargoLock`
        attribute set.''
    else if otherRegistry != [ ] then
      throw "offline stub importCargoLock: ${key (first otherRegistry)} comes from ${(first otherRegistry).source}; non-crates.io registries are not modelled by this stub"
    else if noChecksum != [ ] then
      throw "offline stub importCargoLock: ${key (first noChecksum)} has no checksum in Cargo.lock"
    else
      hashString "sha256" contents;

  buildRustPackage =
    argsOrFun:
    let
      args = if isFunction argsOrFun then argsOrFun args else argsOrFun;
      cargoDeps =
        if args ? cargoSha256 then
          throw "offline stub buildRustPackage: cargoSha256 was removed from nixpkgs; use cargoHash or cargoLock"
        else if args ? cargoVendorDir then
          args.cargoVendorDir
        else if args ? cargoDeps then
          args.cargoDeps
        else if args ? cargoLock then
          importCargoLock args.cargoLock
        else if args ? cargoHash then
          args.cargoHash
        else
          throw "offline stub buildRustPackage: cargoHash, cargoVendorDir, cargoDeps, or cargoLock must be set";
      src = args.src or (throw "offline stub buildRustPackage: src must be set");
      # Look through the source filter at the original tree: `nix flake check`
      # evaluates in read-only mode, where the filtered copy is never
      # written to the store and so cannot be read.
      srcRoot = if isAttrs src && src ? origSrc then src.origSrc else src;
      srcFilter = if isAttrs src && src ? filter then src.filter else (_: _: true);
      inSrc =
        rel:
        if isPath srcRoot then
          pathExists (srcRoot + "/${rel}") && srcFilter (toString srcRoot + "/${rel}") "regular"
        else
          true; # a plain store-path string: not checked
      # In nixpkgs these are build-time errors of cargoSetupHook.
      srcChecked =
        if !inSrc "Cargo.toml" then
          throw "offline stub buildRustPackage: src has no Cargo.toml (is the source filter too strict?)"
        else if args ? cargoLock && args.cargoLock ? lockFile && isPath srcRoot then
          if !inSrc "Cargo.lock" then
            throw "offline stub buildRustPackage: ERROR: Missing Cargo.lock from src"
          else if readFile (srcRoot + "/Cargo.lock") != readFile args.cargoLock.lockFile then
            throw "offline stub buildRustPackage: ERROR: cargoLock out of date (src's Cargo.lock differs from cargoLock.lockFile)"
          else
            true
        else
          true;
    in
    # Evaluation-time errors of nixpkgs first, then the build-time ones.
    assert builtins.seq cargoDeps true;
    assert srcChecked;
    mkDerivation (
      args
      // {
        inherit cargoDeps;
        doCheck = args.doCheck or true;
        nativeBuildInputs = [
          cargo
          rustc
        ]
        ++ (args.nativeBuildInputs or [ ]);
      }
    );

  python3 = leaf "python3" "3.13.0-stub" "python3";
  cargo = leaf "cargo" "1.91.0-stub" "cargo";
  rustc = leaf "rustc" "1.91.0-stub" "rustc";
in
{
  inherit python3 cargo rustc;
  stdenv = {
    inherit mkDerivation;
    hostPlatform.system = system;
    buildPlatform.system = system;
  };
  clippy = leaf "clippy" "1.91.0-stub" "cargo-clippy";
  rustfmt = leaf "rustfmt" "1.91.0-stub" "rustfmt";
  rust-analyzer = leaf "rust-analyzer" "stub" "rust-analyzer";
  nixfmt-tree = leaf "nixfmt-tree" "stub" "treefmt";

  rustPlatform = {
    inherit buildRustPackage importCargoLock;
    rustLibSrc = leaf "rust-lib-src" "1.91.0-stub" "none";
  };

  mkShell =
    {
      name ? "nix-shell",
      packages ? [ ],
      inputsFrom ? [ ],
      nativeBuildInputs ? [ ],
      ...
    }@args:
    assert isList packages && isList inputsFrom;
    mkDerivation (
      removeAttrs args [
        "packages"
        "inputsFrom"
      ]
      // {
        inherit name;
        nativeBuildInputs = packages ++ nativeBuildInputs;
      }
    );

  runCommand =
    name: env: buildCommand:
    mkDerivation (
      env
      // {
        inherit name buildCommand;
      }
    );

  # nixpkgs exposes its lib as pkgs.lib too.
  inherit lib;
}

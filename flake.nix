{
  description = "strata-router: an OpenAI-compatible router in front of one Strata backend";

  # nixpkgs only.  flake.lock pins it; see docs/nix.md#what-is-verified-where
  # for what is verified offline
  # (nix/check.sh) and what only on a real Nix host.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;

      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});

      cargoToml = builtins.fromTOML (builtins.readFile ./Cargo.toml);

      # The Rust sources.  Nix packaging files are left out so editing them
      # does not rebuild the package.
      src = lib.cleanSourceWith {
        name = "strata-router-source";
        src = ./.;
        filter =
          path: type:
          lib.cleanSourceFilter path type
          && !(builtins.elem (toString path) [
            (toString ./nix)
            (toString ./flake.nix)
            (toString ./flake.lock)
            (toString ./target)
          ]);
      };

      package =
        pkgs:
        pkgs.rustPlatform.buildRustPackage {
          pname = "strata-router";
          inherit (cargoToml.workspace.package) version;
          inherit src;

          cargoLock.lockFile = ./Cargo.lock;

          # The sandbox has no .git: tell proxy/build.rs the commit for
          # strata_router_build_info (its fallback is "unknown").
          STRATA_REVISION = self.shortRev or self.dirtyShortRev or "unknown";

          # `cargo test` (release profile, the whole workspace) runs in the
          # check phase, inside the build sandbox: the end-to-end tests start
          # the real binaries against the fake Strata backend in
          # tests/fake_strata/, which needs python3 (stdlib only).
          nativeCheckInputs = [ pkgs.python3 ];

          # The sandbox has no /usr/bin/env or /usr/bin/python3: give any
          # script in tests/ a store-path interpreter.
          postPatch = ''
            if [ -d tests ]; then patchShebangs --build tests; fi
          '';

          # STRATA_TEST_IN_NIX_SANDBOX: tests that need what the sandbox
          # lacks (systemd, root, /run/user, a writable HOME, any network
          # beyond loopback) skip themselves when it is set.
          # STRATA_TEST_PYTHON: the absolute interpreter for the fake
          # backend's config `python` (also first on PATH as python3).
          preCheck = ''
            export STRATA_TEST_IN_NIX_SANDBOX=1
            export STRATA_TEST_PYTHON=${lib.getExe pkgs.python3}
          '';

          # Ship the systemd units from contrib/ with store paths, so a NixOS
          # host can use `systemd.packages = [ strata-router ]`.
          postInstall = ''
            for unit in contrib/*.socket contrib/*.service; do
              [ -e "$unit" ] || continue
              dest="$out/lib/systemd/system/$(basename "$unit")"
              install -Dm644 "$unit" "$dest"
              sed -i \
                -e "s|/usr/local/bin/strata-|$out/bin/strata-|g" \
                -e "s|/usr/bin/strata-|$out/bin/strata-|g" \
                "$dest"
            done
          '';

          # cargo's install hook copies every binary of the release build
          # into $out/bin (no wrappers): strata-supervisor, strata-proxy, and
          # the operator command under both its names, strata-router (the
          # spec's) and strata-ctl.  Check that all four are there and that
          # each operator binary calls itself by its own name.
          doInstallCheck = true;
          installCheckPhase = ''
            runHook preInstallCheck
            for name in strata-supervisor strata-proxy strata-router strata-ctl; do
              [ -x "$out/bin/$name" ] || { echo "$out/bin/$name is missing" >&2; exit 1; }
            done
            for name in strata-router strata-ctl; do
              [ "$("$out/bin/$name" --version)" = "$name ${cargoToml.workspace.package.version}" ] ||
                { echo "$name --version does not name $name" >&2; exit 1; }
            done
            runHook postInstallCheck
          '';

          meta = {
            description = "OpenAI-compatible router that runs one Strata backend at a time";
            license = lib.licenses.mpl20;
            # The spec's name: `nix run . -- daemon CONFIG` runs
            # `strata-router daemon CONFIG`.
            mainProgram = "strata-router";
            platforms = lib.platforms.linux;
          };
        };
    in
    {
      packages = forAllSystems (pkgs: {
        default = package pkgs;
      });

      # `nix run . -- daemon /absolute/config.json` runs `strata-router
      # daemon`, which starts strata-supervisor and strata-proxy from the same
      # bin/; `nix run .#strata-ctl -- ...` runs the same program under its
      # other name.
      apps = forAllSystems (
        pkgs:
        let
          pkg = self.packages.${pkgs.stdenv.hostPlatform.system}.default;
          app = name: {
            type = "app";
            program = "${pkg}/bin/${name}";
            meta.description = "${name} (e.g. `nix run . -- daemon /absolute/config.json`)";
          };
        in
        {
          default = app "strata-router";
          strata-router = app "strata-router";
          strata-ctl = app "strata-ctl";
        }
      );

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          packages = [
            pkgs.cargo
            pkgs.rustc
            pkgs.clippy
            pkgs.rustfmt
            pkgs.rust-analyzer
            pkgs.python3
          ];
          RUST_SRC_PATH = "${pkgs.rustPlatform.rustLibSrc}";
        };
      });

      checks = forAllSystems (
        pkgs:
        let
          pkg = self.packages.${pkgs.stdenv.hostPlatform.system}.default;
        in
        {
          package = pkg;

          # Same sources and vendored crates as the package; runs clippy
          # instead of building, testing and installing.
          clippy = pkg.overrideAttrs (old: {
            pname = "strata-router-clippy";
            nativeBuildInputs = (old.nativeBuildInputs or [ ]) ++ [ pkgs.clippy ];
            buildPhase = ''
              runHook preBuild
              cargo clippy --all-targets --offline --locked -- -D warnings
            '';
            doCheck = false;
            doInstallCheck = false;
            installPhase = ''
              runHook preInstall
              touch $out
              runHook postInstall
            '';
            postInstall = "";
            dontFixup = true;
          });

          fmt =
            pkgs.runCommand "strata-router-fmt"
              {
                nativeBuildInputs = [
                  pkgs.cargo
                  pkgs.rustfmt
                ];
              }
              ''
                cp -r ${src} source
                chmod -R u+w source
                cd source
                export HOME=$TMPDIR
                cargo fmt --all --check
                touch $out
              '';
        }
      );

      formatter = forAllSystems (pkgs: pkgs.nixfmt-tree);
    };
}

# TEST DOUBLE -- NOT nixpkgs.
#
# An offline stand-in for github:NixOS/nixpkgs, used only by nix/check.sh as
#   nix flake check --no-build --offline \
#     --override-input nixpkgs path:$PWD/nix/offline-stub
# so that every output of strata-router's flake.nix can be evaluated on a
# machine without GitHub or a binary cache.  It exposes the same two outputs
# the project's flake reads (`lib` and `legacyPackages.<system>`), with fake,
# unbuildable derivations.  See lib.nix and pkgs.nix for what it models and
# how it fails like nixpkgs would.  Never use it as a real input.
{
  description = "Offline test double standing in for nixpkgs (strata-router CI only; not nixpkgs)";

  outputs =
    { self }:
    let
      lib = import ./lib.nix;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
        "x86_64-darwin"
        "aarch64-darwin"
      ];
    in
    {
      inherit lib;
      legacyPackages = lib.genAttrs systems (system: import ./pkgs.nix { inherit lib system; });
    };
}

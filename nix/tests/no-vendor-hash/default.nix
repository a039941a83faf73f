# Fixture: neither cargoLock nor cargoHash.  Must fail.
(import ../stub.nix { }).rustPlatform.buildRustPackage {
  pname = "fixture";
  version = "0.1.0";
  src = ./.;
}

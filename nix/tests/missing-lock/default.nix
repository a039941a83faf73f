# Fixture: cargoLock.lockFile names a Cargo.lock that does not exist (in a
# flake: one that is missing or not git-tracked).  Must fail.
(import ../stub.nix { }).rustPlatform.buildRustPackage {
  pname = "fixture";
  version = "0.1.0";
  src = ./.;
  cargoLock.lockFile = ./Cargo.lock;
}

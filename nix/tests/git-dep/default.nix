# Fixture: Cargo.lock has a `git+` package and cargoLock.outputHashes has no
# entry for it.  Must fail like nixpkgs' importCargoLock.
(import ../stub.nix { }).rustPlatform.buildRustPackage {
  pname = "fixture";
  version = "0.1.0";
  src = ./.;
  cargoLock.lockFile = ./Cargo.lock;
}

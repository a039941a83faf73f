# Fixture: src's Cargo.lock differs from cargoLock.lockFile (nixpkgs fails
# this at build time, in cargoSetupHook).  Must fail.
(import ../stub.nix { }).rustPlatform.buildRustPackage {
  pname = "fixture";
  version = "0.1.0";
  src = ./src;
  cargoLock = {
    lockFile = ./Cargo.lock;
    outputHashes."some-git-crate-0.2.0" = "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
  };
}

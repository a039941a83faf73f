# Positive control: the same git dependency with its outputHashes entry.
# Must evaluate.
(import ../stub.nix { }).rustPlatform.buildRustPackage {
  pname = "fixture";
  version = "0.1.0";
  src = ../git-dep;
  cargoLock = {
    lockFile = ../git-dep/Cargo.lock;
    outputHashes."some-git-crate-0.2.0" = "sha256-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
  };
}

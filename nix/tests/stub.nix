# Test helper: the offline nixpkgs TEST DOUBLE (nix/offline-stub), imported
# directly for the fixtures in this folder.  Not nixpkgs.
{
  system ? "x86_64-linux",
}:
import ../offline-stub/pkgs.nix {
  lib = import ../offline-stub/lib.nix;
  inherit system;
}

# Offline stand-in for nixpkgs: only the attributes sparkflake's flake.nix uses, under their
# nixpkgs names, built from host tools. nixpkgs cannot be fetched on the build machines, so the
# flake is evaluated and checked with
#   nix flake check --override-input nixpkgs path:./nix/offline-nixpkgs
# The host tools come from one fixed place (./host.nix); ./bin/test installs them there.
{
  description = "Offline stand-in for the nixpkgs attributes used by sparkflake, built from host tools";

  outputs =
    { self }:
    let
      lib = import ./lib.nix;
    in
    {
      inherit lib;
      legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (
        system: import ./pkgs.nix { inherit lib system; }
      );
    };
}

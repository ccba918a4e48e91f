# nixpkgs overlay: sparkflake and the images of the profiles (nix/image.nix) as package-set
# attributes. Meant for the flake's `overlays.default`, where ../. is the flake's own source
# tree in the store (tracked files only).
final: prev:
let
  images = import ../nix/image.nix {
    pkgs = final;
    inherit (final) sparkflake;
    fetchLocked = import ../nix/fetch-locked.nix;
    src = ../.;
  };
in
{
  sparkflake = final.callPackage ../nix/package.nix { };
}
// builtins.removeAttrs images [ "fixture-digests" ]

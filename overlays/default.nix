# nixpkgs overlay: sparkflake (and, as they land, the images) as package-set attributes.
final: prev: {
  sparkflake = final.callPackage ../nix/package.nix { };
}

# The few nixpkgs `lib` functions sparkflake's Nix files use, with nixpkgs' semantics.
{
  genAttrs =
    names: f:
    builtins.listToAttrs (
      map (name: {
        inherit name;
        value = f name;
      }) names
    );

  makeBinPath = packages: builtins.concatStringsSep ":" (map (package: "${package}/bin") packages);

  licenses.asl20 = {
    spdxId = "Apache-2.0";
    shortName = "asl20";
    fullName = "Apache License 2.0";
    free = true;
  };
}

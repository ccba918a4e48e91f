# `nix run .` runs the CLI; `nix run .#launch-rank -- RANK runtime.env` runs
# `sparkflake launch-rank RANK runtime.env` through its own console script, with the profiles
# bundled in the package (found from any directory). For each image output <name> (nix/image.nix):
#   nix run .#<name>-copy-to-registry -- REGISTRY/REPO:TAG [--insecure ...]
#       `sparkflake publish`: our blobs and manifest bytes, the registry's digest checked;
#       the result in ./publish.json (or --record FILE), never in the image's store path
#   nix run .#<name>-load-into-podman -- [--tag TAG] [--engine-arg ARG ...]
#       `sparkflake load`: podman load, its image ID checked against the config digest
# (nix2container's copyToRegistry and copyToPodman). Each is a Python launcher that execs
# sparkflake with the image's store path: no shell.
{
  pkgs,
  sparkflake,
  images,
}:
let
  launcher =
    name: argv:
    pkgs.runCommand name { } ''
      mkdir -p $out/bin
      cat > $out/bin/${name} <<'EOF'
      #!${sparkflake}/bin/python -I
      import os
      import sys
      argv = ${builtins.toJSON argv}
      os.execv(argv[0], argv + sys.argv[1:])
      EOF
      chmod 555 $out/bin/${name}
    '';
  app = name: argv: {
    type = "app";
    program = "${launcher name argv}/bin/${name}";
  };
  imageApps =
    name: image:
    builtins.listToAttrs [
      {
        name = "${name}-copy-to-registry";
        value = app "${name}-copy-to-registry" [
          "${sparkflake}/bin/sparkflake"
          "publish"
          "${image}"
        ];
      }
      {
        name = "${name}-load-into-podman";
        value = app "${name}-load-into-podman" [
          "${sparkflake}/bin/sparkflake"
          "load"
          "${image}"
          "--engine"
          "podman"
        ];
      }
    ];
in
{
  default = {
    type = "app";
    program = "${sparkflake}/bin/sparkflake";
  };
  launch-rank = {
    type = "app";
    program = "${sparkflake}/bin/sparkflake-launch-rank";
  };
}
// builtins.foldl' (apps: name: apps // imageApps name images.${name}) { } (builtins.attrNames images)

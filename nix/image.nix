# Runtime-composition images and environments, built by the same builder as the CLI:
# `sparkflake build PROFILE` runs inside the derivation over fixed-output fetches of the same
# lock (./fetch-locked.nix: Nix's built-in fetchurl, every file bound by its sha256), with
# --offline, so both routes give the same digests (docs/compositions.md).
#
#   <profile>            result: oci/ (the OCI layout), receipt.json, digests.json,
#                        retained-native.json, source-overlay.json; no archive (the CLI's
#                        default): `sparkflake export result --format docker-archive -o FILE`
#                        writes one from the layout, the same bytes a build with it writes
#   <profile>-env        the assembled linux/aarch64 Python environment tree (python/) and
#                        its manifest of distributions and hashes (python-manifest.json)
#   <profile>-os-base    the OS base tree (base/) and its manifest (base-manifest.json)
#   fixture-image        the fixture profile, from the stand-in inputs in profiles/fixture/inputs
#   fixture-env, fixture-os-base   its trees, likewise
#   fixture-digests      a check: the fixture image's digests equal profiles/fixture/expected-digests.json
#
# Self-contained: flake.nix merges the set into packages.<system> (and fixture-digests into
# checks.<system>) with
#   packages = forAllSystems ({ pkgs, system }: rec { … } // import ./nix/image.nix {
#     inherit pkgs fetchLocked; sparkflake = self.packages.${system}.sparkflake; src = self; });
{
  pkgs,
  sparkflake,
  fetchLocked,
  src,
}:
let
  profilesDir = src + "/profiles";
  readToml = path: builtins.fromTOML (builtins.readFile path);
  profileOf = name: readToml (profilesDir + "/${name}/profile.toml");
  locksOf =
    name: map (reference: readToml (profilesDir + "/${name}/${reference}")) (profileOf name).locks;

  # Every file input of the profile's locks as a fixed-output fetch, linked by sha256 into
  # one directory that `--from` imports (matched by sha256, so names do not matter).
  fileKinds = [
    "wheel"
    "sdist"
    "deb"
  ];
  lockedFiles =
    name: kinds:
    builtins.filter (input: builtins.elem input.kind kinds) (
      builtins.concatLists (map (lock: lock.inputs) (locksOf name))
    );
  fetchedInputsOf =
    name: kinds: suffix:
    pkgs.runCommand "sparkflake-inputs-${name}${suffix}" { } (
      "mkdir -p $out\n"
      + builtins.concatStringsSep "\n" (
        map (
          # The store name comes from the URL: lock names such as "libc6:arm64" hold a ":".
          input:
          "ln -s ${fetchLocked.tryingEvery pkgs.python3 (builtins.removeAttrs input [ "name" ])} $out/${input.sha256}"
        ) (lockedFiles name kinds)
      )
    );
  fetchedInputs = name: fetchedInputsOf name fileKinds "";

  # What every builder run shares: no network, fixed time, a private cache.
  prelude = ''
    export HOME=$TMPDIR SOURCE_DATE_EPOCH=1 XDG_CACHE_HOME=$TMPDIR/cache
  '';

  image =
    {
      name,
      fromRepository ? false,
    }:
    let
      from = if fromRepository then "" else "--from ${fetchedInputs name}";
    in
    # The build report (timings, cache use) goes to the build log, not to $out, so a rebuild
    # gives the same $out (`nix build --rebuild`). The layout alone, as the CLI writes by
    # default: the store path holds the image once, not a second time as an archive. The
    # output's marker goes too: it records each file's modification time (what tells a later
    # build that OUT is unchanged), which differs from one build to the next, and a store
    # path is never replaced by a build.
    pkgs.runCommand "sparkflake-image-${name}" { nativeBuildInputs = [ sparkflake ]; } ''
      ${prelude}
      sparkflake build ${profilesDir}/${name} --offline ${from} --cache $TMPDIR/cache -o $TMPDIR/result --json >&2
      rm $TMPDIR/result/.sparkflake-output.json
      mv $TMPDIR/result $out
    '';

  # A tree needs only its own inputs: the OS base the debs, the environment the wheels.
  treeKinds = {
    base = [ "deb" ];
    python = [ "wheel" ];
  };
  assembled =
    {
      name,
      only,
      fromRepository ? false,
    }:
    let
      kinds = treeKinds.${only};
      inputs =
        if fromRepository then "${profilesDir}/${name}/inputs" else fetchedInputsOf name kinds "-${only}";
    in
    pkgs.runCommand "sparkflake-${name}-${only}" { nativeBuildInputs = [ sparkflake ]; } ''
      ${prelude}
      sparkflake fetch ${profilesDir}/${name} ${
        builtins.concatStringsSep " " (map (kind: "--kind ${kind}") kinds)
      } --from ${inputs} --cache $TMPDIR/cache --json > $TMPDIR/fetch.json
      sparkflake assemble ${profilesDir}/${name} --only ${only} --cache $TMPDIR/cache -o $TMPDIR/tree --json > $TMPDIR/manifest.json
      mkdir -p $out
      cp -a $TMPDIR/tree/${only} $out/${only}
      # the manifest without what depends on the build run, not on the inputs: the timings
      # ("seconds", to the build log) and the build directory ("path": /build in the
      # sandbox, /tmp/nix-build-… outside it)
      python -I -c 'import json, sys
      manifest = json.load(open(sys.argv[1]))
      for part in manifest.values():
          if isinstance(part, dict):
              print(part.pop("path", None), part.pop("seconds", None), file=sys.stderr)
      json.dump(manifest, open(sys.argv[2], "w"), indent=2, sort_keys=True)' $TMPDIR/manifest.json $out/${only}-manifest.json
    '';

  realProfiles = [
    "glm53-dflash7"
    "glm53-mtp5"
  ];
  perProfile =
    name:
    [
      {
        inherit name;
        value = image { inherit name; };
      }
      {
        name = "${name}-env";
        value = assembled {
          inherit name;
          only = "python";
        };
      }
      {
        name = "${name}-os-base";
        value = assembled {
          inherit name;
          only = "base";
        };
      }
    ];

  fixtureImage = image {
    name = "fixture";
    fromRepository = true;
  };
  expected = builtins.fromJSON (builtins.readFile (profilesDir + "/fixture/expected-digests.json"));
in
builtins.listToAttrs (builtins.concatMap perProfile realProfiles)
// {
  fixture-image = fixtureImage;
  # the fixture's trees too, so that every kind of output is rebuilt in CI (--rebuild)
  fixture-env = assembled {
    name = "fixture";
    only = "python";
    fromRepository = true;
  };
  fixture-os-base = assembled {
    name = "fixture";
    only = "base";
    fromRepository = true;
  };
  fixture-digests = pkgs.runCommand "sparkflake-fixture-digests" { } ''
    grep -F '"manifest": "${expected.manifest}"' ${fixtureImage}/digests.json
    grep -F '"config": "${expected.config}"' ${fixtureImage}/digests.json
    touch $out
  '';
}

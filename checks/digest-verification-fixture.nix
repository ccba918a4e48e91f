# The digest-verification record of the fixture profile: build its image offline with Nix
# (the same builder as `sparkflake build`), audit it (every digest re-derived from the
# bytes; receipt, lock, profile labels and platform compared), compare with the expected
# digests the profile keeps, and keep the record as the check's output.
{
  pkgs,
  src,
  sparkflake,
  images,
  ...
}:
let
  image = images.fixture-image;
  profile = src + "/profiles/fixture";
in
pkgs.runCommand "sparkflake-digest-verification-fixture" { nativeBuildInputs = [ sparkflake ]; } ''
  export HOME=$TMPDIR
  mkdir -p $out
  sparkflake audit oci:${image}/oci \
    --profile ${profile} \
    --receipt ${image}/receipt.json \
    --expect-file ${profile}/expected-digests.json \
    --record $out/record.json
''

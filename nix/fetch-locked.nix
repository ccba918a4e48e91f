# One locked artifact as a fixed-output derivation: Nix refuses bytes whose sha256 differs
# from the lock. The argument is a lock record: `sha256` (64 lowercase hex digits, or SRI
# "sha256-…"), and `urls` (a list, tried in order) or `url`; optionally `name` (the store name,
# which defaults to the file name of the URL). Other fields of the record are ignored.
#
#   fetchLocked record                  one URL: Nix's built-in fetchurl (`builtin:fetchurl`,
#                                       what <nix/fetchurl.nix> uses), which needs no nixpkgs
#   fetchLocked.tryingEvery python3 record
#                                       any number of URLs, tried in order by ./fetch_urls.py
#                                       run by `python3` (the built-in fetcher takes only one)
#
# A record with several URLs given to plain `fetchLocked` is refused, so no caller falls back
# to the first URL alone.
let
  common = record: urls: rec {
    fileName = builtins.replaceStrings [ "%2B" "%2b" "%" "~" ] [ "+" "+" "-" "-" ] (
      baseNameOf (builtins.head urls)
    );
    # Store names allow [A-Za-z0-9+._?=-]; wheel URLs quote "+" as %2B.
    attributes = {
      name = record.name or fileName;
      outputHashMode = "flat";
      outputHashAlgo = "sha256";
      outputHash = record.sha256;
      preferLocalBuild = true;
      impureEnvVars = [
        "http_proxy"
        "https_proxy"
        "ftp_proxy"
        "all_proxy"
        "no_proxy"
      ];
    };
  };
  urlsOf =
    record:
    let
      urls = record.urls or [ record.url ];
    in
    if urls == [ ] then throw "locked input ${record.name or record.sha256}: no URL" else urls;

  builtinFetch =
    record:
    let
      urls = urlsOf record;
    in
    if builtins.length urls > 1 then
      throw "locked input ${record.name or (baseNameOf (builtins.head urls))} has ${toString (builtins.length urls)} URLs: fetch it with fetchLocked.tryingEvery, which tries each"
    else
      derivation (
        (common record urls).attributes
        // {
          system = "builtin";
          builder = "builtin:fetchurl";
          url = builtins.head urls;
          executable = false;
          unpack = false;
        }
      );

  tryingEvery =
    python3: record:
    let
      urls = urlsOf record;
      shown = common record urls;
    in
    if builtins.length urls == 1 then
      builtinFetch record
    else
      derivation (
        shown.attributes
        // {
          system = python3.stdenv.hostPlatform.system or python3.system;
          builder = "${python3}/bin/python3";
          args = [
            "-I"
            "-B"
            ./fetch_urls.py
          ];
          urls = builtins.concatStringsSep " " urls;
          expectedSha256 = record.sha256;
        }
      );
in
{
  __functor = _: builtinFetch;
  inherit tryingEvery;
}

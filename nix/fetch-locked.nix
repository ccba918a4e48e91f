# One locked artifact as a fixed-output derivation fetched by Nix's built-in fetchurl
# (`builtin:fetchurl`, what <nix/fetchurl.nix> uses). It needs no nixpkgs, so image
# derivations fetch the same way with real nixpkgs and with the offline stand-in, and Nix itself
# refuses bytes whose sha256 differs from the lock.
#
# The argument is a lock record: `sha256` (64 lowercase hex digits, or SRI "sha256-…"), and
# `urls` (a list; the built-in fetcher takes the first) or `url`; optionally `name` (the store
# name, which defaults to the file name of the URL). Other fields of the record are ignored.
record:
let
  urls = record.urls or [ record.url ];
  url = builtins.head urls;
  # Store names allow [A-Za-z0-9+._?=-]; wheel URLs quote "+" as %2B.
  fileName = builtins.replaceStrings [ "%2B" "%2b" "%" "~" ] [ "+" "+" "-" "-" ] (baseNameOf url);
in
derivation {
  name = record.name or fileName;
  system = "builtin";
  builder = "builtin:fetchurl";
  inherit url urls;
  outputHashMode = "flat";
  outputHashAlgo = "sha256";
  outputHash = record.sha256;
  executable = false;
  unpack = false;
  preferLocalBuild = true;
  impureEnvVars = [
    "http_proxy"
    "https_proxy"
    "ftp_proxy"
    "all_proxy"
    "no_proxy"
  ];
}

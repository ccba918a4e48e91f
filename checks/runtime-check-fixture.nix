# The runtime check on what Nix built, where that is affordable: the fixture image (the
# glm53 images are ~26 GB of Nix store each, and their check imports torch and vLLM under
# qemu for minutes, which is CI's pytest job: python/tests/runtime/test_runtime_real.py). The
# fixture's interpreter is a stand-in that cannot run, so the check must end in a named
# check failure with exit 1 or 2, valid JSON and no traceback, after its layers were
# verified and unpacked when this machine can run arm64 binaries: qemu-user registered in
# binfmt_misc with the F flag (the kernel holds the interpreter open, so it runs in a build
# sandbox that cannot see its path) and bubblewrap, the one program the check needs on PATH.
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
pkgs.runCommand "sparkflake-runtime-check-fixture" { nativeBuildInputs = [ sparkflake pkgs.python3 pkgs.bubblewrap ]; } ''
  export HOME=$TMPDIR XDG_CACHE_HOME=$TMPDIR/cache
  mkdir -p $out
  status=0
  sparkflake runtime check ${image} --profile ${profile} --json --scratch $TMPDIR/scratch \
    --capabilities $TMPDIR/capabilities.json > $out/report.json 2> $TMPDIR/stderr || status=$?
  cat $TMPDIR/stderr
  echo "$status" > $out/exit-status
  python3 - "$status" $out/report.json $TMPDIR/stderr <<'PY'
  import json, sys
  status, report_path, stderr_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
  stderr = open(stderr_path, encoding="utf-8", errors="replace").read()
  assert "Traceback" not in stderr, stderr
  assert status in (1, 2), f"exit {status}: the fixture's stand-in interpreter cannot pass the check"
  report = json.load(open(report_path, encoding="utf-8"))
  failed = [c for c in report["checks"] if c["status"] in ("fail", "error")]
  assert report["ok"] is False and failed, report
  assert all(c["id"].startswith("runtime.") and c["detail"] for c in failed), failed
  passed = {c["id"] for c in report["checks"] if c["status"] == "pass"}
  if "runtime.sandbox" not in {c["id"] for c in failed} and "runtime.emulation" in passed:
      assert "runtime.unpack" in passed, report  # the Nix-built layers verified and unpacked
  print("runtime check of the Nix-built fixture image:", ", ".join(f"{c['id']}: {c['detail']}" for c in failed))
  PY
  rm -rf $TMPDIR/scratch
''

"""The serving part of the probe (``in_image/probe_serving.py``) where it runs without the
image's packages: the soname scan of a library's bytes, the loader's resolution of sonames,
the restoration of the environment around the cache resolvers; and its judge
(``runtime.serving_judge``) on the document shapes the probe writes. On the real image the
same checks run in test_runtime_real.py (every check of the run must pass there)."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.runtime.check_report import CheckReport
from sparkflake.runtime.probe_runner import PROBE_DIRECTORY
from sparkflake.runtime.serving_judge import judge_serving

sys.path.insert(0, str(PROBE_DIRECTORY))
import probe_serving  # noqa: E402  (the probe's modules import one another by file name)


def test_sonames_are_read_from_the_string_table(tmp_path):
    library = tmp_path / "libnccl.so.2"
    library.write_bytes(b"\x7fELF\x00Failed to open libmlx5.so[.1]\x00libibverbs.so\x00libibverbs.so.1\x00"
                        b"libmlx5.so.1\x00libgdrapi.so.2\x00libc.so.6\x00")
    assert probe_serving.sonames(str(library)) == ["libibverbs.so", "libibverbs.so.1", "libmlx5.so.1"]
    assert probe_serving.sonames(str(library), (b"libgdrapi",)) == ["libgdrapi.so.2"]


@settings(max_examples=40)
@given(st.binary(max_size=300), st.binary(max_size=300), st.sampled_from([7, 16, 64]))
def test_sonames_across_chunk_boundaries(before, after, chunk):
    # NULs around the name: a name glued to other bytes is another string
    data = before + b"\x00libibverbs.so.1\x00" + after
    path = f"/tmp/sparkflake-h27-sonames-{os.getpid()}"
    with open(path, "wb") as handle:
        handle.write(data)
    saved = probe_serving.SCAN_CHUNK
    probe_serving.SCAN_CHUNK = chunk
    try:
        assert "libibverbs.so.1" in probe_serving.sonames(path)
    finally:
        probe_serving.SCAN_CHUNK = saved
        os.unlink(path)


def test_the_loader_resolves_present_sonames_and_names_missing_ones():
    resolved = probe_serving.resolve_libraries(["libc.so.6", "libsparkflake-absent.so.1"])
    assert resolved["libc.so.6"]["ok"] is True
    assert resolved["libsparkflake-absent.so.1"]["ok"] is False
    assert "libsparkflake-absent.so.1" in resolved["libsparkflake-absent.so.1"]["error"]


def test_cache_resolvers_restore_the_environment(monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", "/before")
    monkeypatch.delenv("B12X_COMPILE_CACHE_DIR", raising=False)
    placed = probe_serving.caches({"TRITON_CACHE_DIR": "/jit/triton", "B12X_COMPILE_CACHE_DIR": "/jit/b12x",
                                   "UNRELATED": "1"})
    assert set(placed) == {"TRITON_CACHE_DIR", "B12X_COMPILE_CACHE_DIR"}
    # this host has neither b12x nor triton: each says so, by its import error
    assert all(entry["ok"] is False and "No module named" in entry["error"] for entry in placed.values())
    assert os.environ["TRITON_CACHE_DIR"] == "/before" and "B12X_COMPILE_CACHE_DIR" not in os.environ
    assert "UNRELATED" not in os.environ


# Each part as the glm53-dflash7 image's own code answered it (its layer trees under bwrap and
# qemu-user, the default launch case's serve arguments and env, 2026-12-02)
GOOD = {
    "parsers": {"tool_call:glm47": {"ok": True, "class": "vllm.tool_parsers.glm47_moe_tool_parser.Glm47MoeModelToolParser"},
                "reasoning:glm45": {"ok": True, "class": "vllm.parser.engine.adapters.Glm47MoeParserReasoningAdapter"}},
    "nccl_ib": {"nccl": "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2",
                # the development names are absent (no -dev packages): NCCL falls back to the sonames
                "dlopen_names": ["libibverbs.so", "libibverbs.so.1", "libmlx5.so", "libmlx5.so.1"],
                "resolved": {"libibverbs.so": {"ok": False, "error": "libibverbs.so: cannot open shared object file"},
                             "libibverbs.so.1": {"ok": True, "path": "/usr/lib/aarch64-linux-gnu/libibverbs.so.1.14.44.0"},
                             "libmlx5.so": {"ok": False, "error": "libmlx5.so: cannot open shared object file"},
                             "libmlx5.so.1": {"ok": True, "path": "/usr/lib/aarch64-linux-gnu/libmlx5.so.1.24.44.0"}},
                "verbs_devices": 0},
    "caches": {"B12X_COMPILE_CACHE_DIR": {"ok": True, "value": "/var/lib/sparkflake/jit/glm53-dflash7/b12x",
                                          "directory": "/var/lib/sparkflake/jit/glm53-dflash7/b12x"},
               "XDG_CACHE_HOME": {"ok": True, "value": "/jit/xdg", "directory": "/jit/xdg/b12x/roce"},
               "FLASHINFER_WORKSPACE_BASE": {"ok": True, "value": "/jit/flashinfer", "directory": "/jit/flashinfer"}},
}


def _judged(serving):
    report = CheckReport()
    judge_serving(report, {"serving": serving})
    return {check.id: check for check in report.checks}


def test_a_good_serving_document_passes_and_says_what_it_proves():
    checks = _judged(GOOD)
    assert {check.status for check in checks.values()} == {"pass"}
    assert "libibverbs.so.1 -> /usr/lib/aarch64-linux-gnu/libibverbs.so.1.14.44.0" in checks["runtime.nccl-ib-userspace"].detail
    assert "starts only at communicator init" in checks["runtime.nccl-ib-userspace"].detail
    assert "XDG_CACHE_HOME -> /jit/xdg/b12x/roce" in checks["runtime.cache-placement"].detail


@pytest.mark.parametrize(
    ("part", "value", "check_id", "fragment"),
    [
        ("parsers", {"tool_call:glm99": {"ok": False, "error": "KeyError: Tool parser 'glm99' not found."}},
         "runtime.parsers", "tool_call:glm99: KeyError"),
        ("nccl_ib", {**GOOD["nccl_ib"], "resolved": {**GOOD["nccl_ib"]["resolved"],
                                                     "libibverbs.so.1": {"ok": False, "error": "cannot open"}}},
         "runtime.nccl-ib-userspace", "libibverbs.so.1: cannot open"),
        ("nccl_ib", {**GOOD["nccl_ib"], "dlopen_names": [], "resolved": {}},
         "runtime.nccl-ib-userspace", "names no libibverbs.so"),
        ("nccl_ib", {**GOOD["nccl_ib"], "verbs_devices": None}, "runtime.nccl-ib-userspace", "enumerate devices"),
        ("nccl_ib", {"nccl": None, "error": "the image has no nvidia/nccl/lib/libnccl.so.2"},
         "runtime.nccl-ib-userspace", "no nvidia/nccl"),
        ("caches", {"TRITON_CACHE_DIR": {"ok": True, "value": "/jit/triton", "directory": "/root/.triton/cache"}},
         "runtime.cache-placement", "the component computes /root/.triton/cache, expected /jit/triton"),
        ("caches", {"error": "ImportError: boom"}, "runtime.cache-placement", "ImportError: boom"),
        ("parsers", None, "runtime.parsers", "missing from the probe's result"),
    ],
)
def test_each_bad_part_fails_its_check_by_name(part, value, check_id, fragment):
    serving = {**GOOD, part: value}
    if value is None:
        del serving[part]
    checks = _judged(serving)
    assert checks[check_id].status == "fail" and fragment in checks[check_id].detail, checks[check_id]
    assert [c for c in checks.values() if c.status == "fail"] == [checks[check_id]]

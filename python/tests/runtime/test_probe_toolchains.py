"""The kernel toolchains' version check of the probe (in_image/probe_engine.py cuda_versions)
on a directory laid out as the image's: the CUDA compiler wheels' dist-info and the runtime
headers under CUDA_HOME. On the real image test_runtime_real.py sees it pass."""

from __future__ import annotations

import sys

import pytest

from sparkflake.runtime.probe_runner import PROBE_DIRECTORY

sys.path.insert(0, str(PROBE_DIRECTORY))
import probe_engine  # noqa: E402  (the probe's modules import one another by file name)


def _site(tmp_path, versions: dict[str, str], cudart: int):
    site = tmp_path / "site"
    for name, version in versions.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    include = tmp_path / "cu13" / "include"
    include.mkdir(parents=True)
    (include / "cuda_runtime_api.h").write_text(f"/* header */\n#define CUDART_VERSION  {cudart}\n")
    return site, tmp_path / "cu13"


@pytest.mark.parametrize(("nvcc", "nvvm", "wrong"), [
    ("13.0.88", "13.0.88", []),
    ("13.5.37", "13.0.88", ["nvidia-cuda-nvcc 13.5.37"]),
    ("13.0.88", "13.5.37", ["nvidia-nvvm 13.5.37"]),
])
def test_the_compiler_wheels_must_match_the_runtime_headers(tmp_path, monkeypatch, nvcc, nvvm, wrong):
    site, cuda_home = _site(tmp_path, {"nvidia-cuda-nvcc": nvcc, "nvidia-nvvm": nvvm, "nvidia-cuda-crt": nvcc}, 13000)
    monkeypatch.syspath_prepend(str(site))
    found = probe_engine.cuda_versions(str(cuda_home))
    assert found["cudart_headers"] == "13.0"
    assert found["nvidia-cuda-nvcc"] == nvcc and found["nvidia-nvvm"] == nvvm
    if wrong:
        assert all(item in found["error"] for item in wrong), found
        assert "against the CUDA runtime headers 13.0" in found["error"]
    else:
        assert "error" not in found


def test_without_headers_nothing_is_compared(tmp_path):
    found = probe_engine.cuda_versions(str(tmp_path / "absent"))
    assert found["cudart_headers"] is None and "error" not in found

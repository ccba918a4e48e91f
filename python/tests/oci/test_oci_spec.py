"""SPEC.json parsing: strict, with JSON paths in every error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.oci import ImageSpec, parse_spec

pytestmark = pytest.mark.nix_sandbox  # needs nothing but Python: also run by the flake check


def _spec_dir(tmp_path: Path) -> Path:
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "b").mkdir(exist_ok=True)
    return tmp_path / "spec.json"


def test_minimal_and_full_specs(tmp_path):
    spec_path = _spec_dir(tmp_path)
    minimal = parse_spec({"layers": [{"tree": "a"}]}, spec_path)
    assert str(minimal.platform) == "linux/arm64/v8"
    assert minimal.compression.algorithm == "gzip"
    assert minimal.layers[0].layer_input.sources[0].host_dir == str(tmp_path / "a")
    full = parse_spec(
        {
            "platform": "linux/amd64",
            "compression": "zstd",
            "compression_level": 5,
            "source_date_epoch": 1700000000,
            "repository": "registry.example:5000/team/img",
            "tag": "v1.2",
            "annotations": {"org.opencontainers.image.source": "https://example.invalid"},
            "layers": [
                {"tree": "a", "target": "/opt"},
                {
                    "sources": [{"tree": str(tmp_path / "b"), "target": "/srv"}],
                    "files": [{"path": "/etc/x", "base64": "aGk=", "mode": "0755"}],
                    "delete": ["/tmp/y"],
                    "opaque": ["/var/cache"],
                    "created_by": "overlay",
                },
            ],
            "config": {
                "Entrypoint": ["/bin/sh"],
                "Cmd": ["-c", "true"],
                "Env": ["A=1"],
                "WorkingDir": "/",
                "User": "1000",
                "ExposedPorts": {"8000/tcp": {}},
                "Labels": {"k": "v"},
                "StopSignal": "SIGTERM",
            },
        },
        spec_path,
    )
    assert isinstance(full, ImageSpec)
    assert full.layers[1].layer_input.files[0].content == b"hi"
    assert full.layers[1].layer_input.files[0].mode == 0o755
    assert full.runtime.exposed_ports == ("8000/tcp",)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"layers": [{"tree": "a"}], "colour": 1}, r"\$: unknown key 'colour'"),
        ({"layers": [{"tree": "a", "mode": 1}]}, r"layers\[0\]: unknown key 'mode'"),
        ({"layers": [{"tree": "missing"}]}, r"layers\[0\].tree: tree .*missing does not exist"),
        (
            {
                "layers": [
                    {"sources": [{"tree": "a", "target": "/x"}, {"tree": "b", "target": "/x/"}]}
                ]
            },
            r"layers\[0\]: duplicate target path /x",
        ),
        (
            {"layers": [{"tree": "a", "files": [{"path": "/", "text": "x"}]}]},
            r"layers\[0\].files\[0\].path: duplicate target path /",
        ),
        ({"layers": []}, r"layers: expected a non-empty list"),
        ({"layers": [{"tree": "a"}], "platform": "linux/s390x"}, r"spec.json: platform: platform 'linux/s390x': expected linux/arm64"),
        ({"layers": [{"tree": "a"}], "platform": ""}, r"spec.json: platform: platform '': expected linux/arm64"),
        ({"layers": [{"tree": "a"}], "compression": "lz4"}, r"compression: unknown compression"),
        (
            {"layers": [{"tree": "a"}], "gzip_implementation": "zopfli"},
            r"gzip_implementation: unknown gzip implementation 'zopfli'",
        ),
        ({"layers": [{"tree": "a"}], "gzip_implementation": 7}, r"gzip_implementation: expected"),
        (
            {"layers": [{"tree": "a"}], "compression": "zstd", "gzip_implementation": "zlib"},
            r"gzip_implementation: zstd has one implementation",
        ),
        ({"layers": [{"tree": "a"}], "compression_level": 12}, r"compression: compression level 12"),
        ({"layers": [{"tree": "a"}], "config": {"Env": ["NOEQUALS"]}}, r"config.Env\[0\]"),
        ({"layers": [{"tree": "a"}], "config": {"Cmd": "sh"}}, r"config.Cmd: expected a list"),
        ({"layers": [{"tree": "a"}], "tag": "bad tag"}, r"tag 'bad tag'"),
        ({"layers": [{"tree": "a", "target": "/../x"}]}, r"layers\[0\].target"),
        ({"layers": [{"files": [{"path": "/x", "text": "1", "mode": "9"}]}]}, r"files\[0\].mode"),
        ({"layers": [{}]}, r"layers\[0\]: a layer needs"),
    ],
)
def test_bad_specs_name_the_place(tmp_path, document, message):
    with pytest.raises(InputError, match=message):
        parse_spec(document, _spec_dir(tmp_path))


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
_KEYS = st.sampled_from(
    ["platform", "compression", "layers", "config", "tag", "tree", "files", "delete", "Env", "x"]
)


@given(document=st.dictionaries(_KEYS, _JSON | st.lists(st.dictionaries(_KEYS, _JSON)), max_size=5))
def test_fuzzed_specs_give_a_spec_or_an_input_error(tmp_path, document):
    spec_path = _spec_dir(tmp_path)  # parsing never writes, so examples can share it
    try:
        parse_spec(document, spec_path)
    except InputError as exc:
        assert str(spec_path) in str(exc)


def test_spec_file_errors(tmp_path):
    from sparkflake.oci import load_spec_file

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="bad.json: not valid JSON"):
        load_spec_file(bad)
    with pytest.raises(InputError, match="cannot read"):
        load_spec_file(tmp_path / "absent.json")
    good = tmp_path / "good.json"
    (tmp_path / "t").mkdir()
    good.write_text(json.dumps({"layers": [{"tree": "t"}]}))
    assert load_spec_file(good).layers[0].layer_input.sources[0].host_dir == str(tmp_path / "t")


@pytest.mark.parametrize("mode", ["0o644", "+644", " 644", "644 ", "6_44", "\u0666\u0664\u0664", "-1", "0x1a4", ""])
def test_a_generated_files_mode_takes_octal_digits_only(tmp_path, mode):
    # int(mode, 8) took "0o644", "+644", " 644", "6_44" and Arabic-Indic digits as 0644
    document = {"layers": [{"files": [{"path": "/x", "text": "1", "mode": mode}]}]}
    with pytest.raises(InputError, match=r"files\[0\]\.mode: expected an octal mode like '0644'"):
        parse_spec(document, _spec_dir(tmp_path))

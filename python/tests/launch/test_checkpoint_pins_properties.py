"""Checkpoint pins (``launch.checkpoint_pins``): ``hash_pinned_file`` gives a file's size
and sha256 as hashlib does, following symlinks only while they stay inside the checkpoint
(the container mounts only the directory): what it accepts is a regular file inside the
directory, what it refuses (a link to an absolute path or out of the directory, a FIFO, a
directory, a missing file) is an ``InputError`` naming it; ``update_pins`` keeps every
role recorded (the last pin of each), reads back through ``read_pins``, and refuses a pins
file of another profile."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.core.errors import InputError
from sparkflake.launch.checkpoint_pins import (
    PinnedCheckpoint,
    hash_pinned_file,
    read_pins,
    update_pins,
)
from sparkflake.profile.model import CheckpointFile

pytestmark = pytest.mark.launch

_contents = st.binary(max_size=300)
# where a link at the top of the checkpoint (or in sub/) may point
_targets = st.sampled_from(["model.safetensors", "sub/shard.bin", "../model.safetensors", "../outside.bin",
                            "../../outside.bin", "/etc/hostname", "sub", "missing", "link0", "link1", "."])


@given(_contents, _contents, st.lists(st.tuples(st.sampled_from(["", "sub/"]), _targets), max_size=3),
       st.sampled_from(["model.safetensors", "sub/shard.bin", "link0", "link1", "link2", "sub/link1", "sub", "fifo",
                        "missing", "../outside.bin"]))
def test_a_pinned_file_is_hashed_as_hashlib_does_or_refused_by_name(tmp_path_factory, model, shard, links, name) -> None:
    box = tmp_path_factory.mktemp("box")
    (box / "outside.bin").write_bytes(b"not the checkpoint's")
    ckpt = box / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "model.safetensors").write_bytes(model)
    (ckpt / "sub" / "shard.bin").write_bytes(shard)
    os.mkfifo(ckpt / "fifo")
    for number, (where, target) in enumerate(links):
        link = ckpt / where / f"link{number}"
        if not os.path.lexists(link):
            link.symlink_to(target)
    try:
        pinned = hash_pinned_file(str(ckpt), name)
    except InputError as refused:
        assert str(ckpt) in str(refused)
        return
    real = os.path.realpath(ckpt / name)
    assert real.startswith(os.path.realpath(ckpt) + os.sep)  # what is pinned is what the container sees
    content = open(real, "rb").read()  # noqa: SIM115 - a one-off read of a small file
    assert pinned == CheckpointFile(name, hashlib.sha256(content).hexdigest(), len(content))


@given(st.sampled_from(["../outside.bin", "/etc/hostname", "../ckpt/model.safetensors"]))
def test_a_link_leaving_the_directory_is_refused_even_when_the_host_path_exists(tmp_path_factory, target) -> None:
    box = tmp_path_factory.mktemp("box")
    (box / "outside.bin").write_bytes(b"x")
    (box / "ckpt").mkdir()
    (box / "ckpt" / "model.safetensors").write_bytes(b"m")
    (box / "ckpt" / "weights.bin").symlink_to(target)
    with pytest.raises(InputError, match=r"weights\.bin: weights\.bin is a symlink to "):
        hash_pinned_file(str(box / "ckpt"), "weights.bin")


_files = st.lists(st.builds(CheckpointFile, st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6})?\.(json|bin)", fullmatch=True),
                            st.binary(max_size=4).map(lambda data: hashlib.sha256(data).hexdigest()),
                            st.integers(0, 1 << 40)),
                  max_size=4, unique_by=lambda file: file.path).map(tuple)
_pinned = st.builds(PinnedCheckpoint, st.from_regex(r"/srv/[a-z]{1,8}", fullmatch=True), _files)


@given(st.lists(st.tuples(st.sampled_from(["target", "draft"]), _pinned), min_size=1, max_size=4))
def test_update_pins_keeps_the_last_pin_of_every_role(tmp_path_factory, updates) -> None:
    path = tmp_path_factory.mktemp("pins") / "pins.json"
    expected = {}
    for role, pinned in updates:
        expected[role] = pinned
        returned = update_pins(path, "glm53-dflash7", role, pinned)
        assert dict(returned.checkpoints) == expected
    read = read_pins(path)
    assert read.profile == "glm53-dflash7" and dict(read.checkpoints) == expected
    with pytest.raises(InputError, match=f"^{path}: pins checkpoints for profile glm53-dflash7, not other; use another -o FILE$"):
        update_pins(path, "other", "target", updates[0][1])
    assert dict(read_pins(path).checkpoints) == expected  # the refused update left the file as it was

"""A docker client that reaches no daemon is named as such (issue 31: every inspect came
back "no such image", so the operator was told the image was missing). The real docker
client, pointed at a socket nobody listens on."""

from __future__ import annotations

import shutil

import pytest

from sparkflake.core.container_engine import Engine, image_id, inspect_image
from sparkflake.core.errors import InputError


def test_a_docker_client_without_its_daemon_is_named(tmp_path, monkeypatch):
    binary = shutil.which("docker")
    assert binary is not None, "the docker client (docker-ce-cli or docker.io) is part of the test machine"
    socket = tmp_path / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket}")
    engine = Engine("docker", binary)
    for ask in (inspect_image, image_id):
        with pytest.raises(InputError) as refused:
            ask(engine, "localhost/absent:latest")
        message = str(refused.value)
        assert f"docker ({binary}) reaches no daemon: Cannot connect to the Docker daemon at unix://{socket}" in message
        assert "start the docker daemon" in message and "--engine podman" in message

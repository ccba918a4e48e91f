"""Rank 0's download of the archive (``distribute/download.py``) within its disk: a server that
says a length the disk cannot hold is refused before the first byte, and one that sends
without end (a chunked body that never ends) fills the disk only to ``FREE_RESERVE``, then
the download ends and its partial copy is removed."""

from __future__ import annotations

import hashlib
import time

from fixtures.raw_http import answer, raw_server

from sparkflake.distribute import download
from sparkflake.distribute.files import free_bytes, partial_path
from sparkflake.distribute.receive import NO_SPACE, OK

SHA = "ab" * 32


def endless_chunks(method, path, headers, out):
    out.write(answer(headers=(("Transfer-Encoding", "chunked"),)))
    chunk = b"%x\r\n" % (1 << 16) + b"x" * (1 << 16) + b"\r\n"
    while True:
        out.write(chunk)


def test_a_body_without_end_fills_the_disk_only_to_the_reserve(tmp_path, monkeypatch):
    # before: written until the disk was full (or for ever)
    monkeypatch.setattr(download, "FREE_RESERVE", free_bytes(tmp_path) - (8 << 20))  # 8 MiB of room
    final = tmp_path / "glm53.tar"
    began = time.monotonic()
    with raw_server(endless_chunks) as address:
        result = download.download(f"http://{address}/glm53.tar", final, SHA, timeout=10)
    assert time.monotonic() - began < 60
    assert result["status"] == NO_SPACE and "bytes and no end" in result["message"]
    assert result["size"] <= 8 << 20
    assert not final.exists() and not partial_path(final).exists()


def test_a_length_the_disk_cannot_hold_is_refused_before_the_first_byte(tmp_path):
    too_long = free_bytes(tmp_path) + (1 << 30)
    final = tmp_path / "glm53.tar"
    with raw_server(lambda m, p, h, out: out.write(answer(headers=(("Content-Length", str(too_long)),)))) as address:
        result = download.download(f"http://{address}/glm53.tar", final, SHA, timeout=10)
    assert result["status"] == NO_SPACE and result["message"].startswith(f"no space left for {final}: needs {too_long}")
    assert not final.exists() and not partial_path(final).exists()


def test_a_body_within_the_disk_is_downloaded(tmp_path):
    content = b"archive " * 100_000
    final = tmp_path / "glm53.tar"
    served = answer(headers=(("Content-Length", str(len(content))),), body=content)
    with raw_server(lambda m, p, h, out: out.write(served)) as address:
        result = download.download(f"http://{address}/glm53.tar", final, hashlib.sha256(content).hexdigest())
    assert result["status"] == OK and final.read_bytes() == content


def test_a_download_failure_shows_the_url_without_its_query(tmp_path):
    import pytest

    from sparkflake.core.errors import InputError

    def not_found(method, path, headers, out):
        out.write(answer(status="404 Not Found"))

    with raw_server(not_found) as address:
        url = f"http://{address}"
        with pytest.raises(InputError) as failed:
            download.download(f"{url}/glm53.tar?X-Amz-Signature=SEKRET", tmp_path / "glm53.tar", SHA)
    assert "HTTP 404" in failed.value.message and "SEKRET" not in failed.value.message
    assert f"{url}/glm53.tar?***" in failed.value.message


def test_a_content_length_in_other_than_ascii_digits_is_no_length(tmp_path):
    # "²".isdigit() is True and int("²") raised a ValueError out of the download
    content = b"archive " * 1000
    final = tmp_path / "glm53.tar"
    served = answer(headers=(("Content-Length", "\u00b2"),), body=content)
    with raw_server(lambda m, p, h, out: out.write(served)) as address:
        result = download.download(f"http://{address}/glm53.tar", final, hashlib.sha256(content).hexdigest())
    assert result["status"] == OK and final.read_bytes() == content

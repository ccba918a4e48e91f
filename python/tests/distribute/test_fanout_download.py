"""Rank 0 fetching the archive from a URL before the chain starts: resumable with HTTP Range
after the server drops the connection, verified, then forwarded to the other ranks."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fixtures.netns_ranks import NetnsRanks


class FlakyRangeServer:
    """Serves one file; the first full GET is cut off halfway, Range requests are honoured."""

    def __init__(self, content: bytes, address: str) -> None:
        self.content = content
        self.requests: list[str | None] = []
        served = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                wanted = self.headers.get("Range")
                served.requests.append(wanted)
                if wanted:
                    start = int(wanted.removeprefix("bytes=").rstrip("-"))
                    body = served.content[start:]
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(served.content) - 1}/{len(served.content)}")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(served.content)))
                self.end_headers()
                if len(served.requests) == 1:
                    self.wfile.write(served.content[: len(served.content) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(served.content)

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self.server.server_address[1]}/glm53.tar"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky_server(netns_ranks: NetnsRanks) -> Iterator[FlakyRangeServer]:
    served = FlakyRangeServer(os.urandom(6 << 20), netns_ranks.mgmt_gateway)
    try:
        yield served
    finally:
        served.close()


def test_rank_0_downloads_resumably_then_the_chain_forwards(
    netns_ranks: NetnsRanks, flaky_server: FlakyRangeServer, tmp_path: Path
) -> None:
    digest = hashlib.sha256(flaky_server.content).hexdigest()
    site = netns_ranks.write_site(tmp_path / "site.toml")
    done = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "fanout", flaky_server.url, "--site", str(site),
         "--sha256", digest, "--json"], capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    ranks = json.loads(done.stdout)["ranks"]
    assert ranks[0]["attempts"] == 2 and ranks[0]["bytes_received"] == len(flaky_server.content)
    assert flaky_server.requests == [None, f"bytes={len(flaky_server.content) // 2}-"]
    for index in range(4):
        copy = netns_ranks.data_dir(index) / "glm53.tar"
        assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest

    # --verify with a URL reads what rank 0 holds and downloads nothing
    requests_before = len(flaky_server.requests)
    verify = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "fanout", flaky_server.url, "--site", str(site),
         "--sha256", digest, "--verify", "--json"], capture_output=True, text=True, timeout=300,
    )
    assert verify.returncode == 0, verify.stderr
    assert len(flaky_server.requests) == requests_before


def test_a_downloaded_archive_with_the_wrong_hash_goes_nowhere(
    netns_ranks: NetnsRanks, flaky_server: FlakyRangeServer, tmp_path: Path
) -> None:
    flaky_server.requests.append("already cut once")
    site = netns_ranks.write_site(tmp_path / "site.toml")
    done = subprocess.run(
        [sys.executable, "-m", "sparkflake.cli", "fanout", flaky_server.url.replace("glm53", "other"),
         "--site", str(site), "--sha256", "1" * 64], capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1
    assert "rank0" in done.stderr and "nothing transferred" in done.stderr
    for index in range(4):
        assert not (netns_ranks.data_dir(index) / "other.tar").exists()


def test_a_presigned_urls_query_is_on_no_argv_and_in_no_report(netns_ranks: NetnsRanks, tmp_path: Path) -> None:
    """The URL goes to rank 0's agent on stdin: on argv (ssh's here, the agent's there) its
    signature would be every local user's to read in /proc/PID/cmdline. The report and the
    messages show it without its query."""
    content = os.urandom(1 << 20)
    asked, release = threading.Event(), threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            asked.set()
            release.wait(120)  # held while the test reads every process's argv
            self.send_response(200)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    server = ThreadingHTTPServer((netns_ranks.mgmt_gateway, 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    plain = f"http://{netns_ranks.mgmt_gateway}:{server.server_address[1]}/glm53.tar"
    site = netns_ranks.write_site(tmp_path / "site.toml")
    try:
        fanout = subprocess.Popen(
            [sys.executable, "-m", "sparkflake.cli", "fanout", f"{plain}?X-Amz-Credential=AKIASEKRET&X-Amz-Signature=SIGSEKRET",
             "--site", str(site), "--sha256", hashlib.sha256(content).hexdigest(), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert asked.wait(120), "rank 0 never asked for the archive"
        argvs = []
        for proc in Path("/proc").iterdir():
            if proc.name == str(fanout.pid):  # the operator's own command line, as typed
                continue
            try:
                argvs.append((proc / "cmdline").read_bytes())
            except OSError:  # ended meanwhile, or not a process
                continue
        release.set()
        out, err = fanout.communicate(timeout=300)
    finally:
        release.set()
        server.shutdown()
        server.server_close()
    assert fanout.returncode == 0, err
    assert any(b"download" in argv and b"sparkflake" in argv for argv in argvs)  # the agent was seen
    assert not [argv for argv in argvs if b"SEKRET" in argv]
    assert "SEKRET" not in out + err
    assert json.loads(out)["archive"] == f"{plain}?***"
    assert (netns_ranks.data_dir(3) / "glm53.tar").read_bytes() == content


def test_a_url_with_user_information_is_refused_without_showing_it() -> None:
    from sparkflake.core.errors import InputError
    from sparkflake.distribute.fanout import FanoutRequest, validate_request

    with pytest.raises(InputError) as refused:
        validate_request(FanoutRequest(archive="https://alice:S3cr/etPW@archives.example/glm53.tar", sha256="a" * 64))
    assert "user information" in refused.value.message and "S3cr" not in refused.value.message
    assert refused.value.message.startswith("https://***@archives.example/glm53.tar:")
    with pytest.raises(InputError) as unreadable:
        validate_request(FanoutRequest(archive="https://alice:S3cr?etPW@archives.example/glm53.tar", sha256="a" * 64))
    assert "cannot be read" in unreadable.value.message and "S3cr" not in unreadable.value.message

"""Real git repositories and servers on 127.0.0.1 for the git-input tests: `git daemon`
(git://), smart HTTP (`git http-backend` as CGI), dumb HTTP (a static directory after
`git update-server-info`), and file://. Every server is started and stopped by the test
that uses it."""

from __future__ import annotations

import contextlib
import http.server
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

GIT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/nonexistent",
    "LC_ALL": "C",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "fixture",
    "GIT_AUTHOR_EMAIL": "fixture@sparkflake.invalid",
    "GIT_COMMITTER_NAME": "fixture",
    "GIT_COMMITTER_EMAIL": "fixture@sparkflake.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def git(*args: str, cwd: Path | None = None, input: bytes | None = None) -> str:
    completed = subprocess.run(
        ["git", *args], cwd=cwd, env=GIT_ENV, input=input, capture_output=True, check=True
    )
    return completed.stdout.decode().strip()


def write_files(root: Path, files: Mapping[str, bytes | tuple[str, bytes]]) -> None:
    """``path -> bytes`` (a regular file), ``path -> ("x", bytes)`` (executable) or
    ``path -> ("l", target)`` (a symlink)."""
    for relative, content in files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, tuple):
            kind, payload = content
            if kind == "l":
                os.symlink(payload, target)
                continue
            target.write_bytes(payload)
            target.chmod(0o755)
        else:
            target.write_bytes(content)
            target.chmod(0o644)


def commit(work: Path, message: str) -> tuple[str, str]:
    """Commit everything in ``work``; (commit id, tree id)."""
    git("add", "-A", cwd=work)
    git("commit", "-q", "--allow-empty", "-m", message, cwd=work)
    return git("rev-parse", "HEAD", cwd=work), git("rev-parse", "HEAD^{tree}", cwd=work)


def make_repository(root: Path, commits: list[Mapping[str, bytes | tuple[str, bytes]]]) -> tuple[Path, list[tuple[str, str]]]:
    """A work repository at ``root/work`` with one commit per file set (each added on top of
    the previous), and a bare clone at ``root/served.git``; the (commit, tree) ids in order."""
    work = root / "work"
    work.mkdir(parents=True)
    git("init", "-q", "-b", "main", str(work))
    made = []
    for number, files in enumerate(commits):
        write_files(work, files)
        made.append(commit(work, f"commit {number}"))
    served = root / "served.git"
    git("clone", "-q", "--bare", str(work), str(served))
    return served, made


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


@contextlib.contextmanager
def git_daemon(base: Path) -> Iterator[str]:
    """``git daemon`` exporting every repository under ``base``; yields ``git://127.0.0.1:PORT``."""
    port = free_port()
    process = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={base}", "--listen=127.0.0.1",
         f"--port={port}", "--informative-errors", str(base)],
        env=GIT_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"git://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


class _SmartHandler(http.server.BaseHTTPRequestHandler):
    """git's smart HTTP: every request handed to ``git http-backend`` as a CGI request."""

    project_root = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self._backend()

    def do_POST(self) -> None:  # noqa: N802
        self._backend()

    def _backend(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            **GIT_ENV,
            "GIT_PROJECT_ROOT": self.project_root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
        }
        completed = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=False)
        head, _, payload = completed.stdout.partition(b"\r\n\r\n")
        status = 200
        headers = []
        for line in head.split(b"\r\n"):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "status":
                status = int(value.strip().split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class _DumbHandler(http.server.SimpleHTTPRequestHandler):
    delay_objects = 0.0  # seconds to hold every object request (an interrupted-fetch test)

    def do_GET(self) -> None:  # noqa: N802
        if self.delay_objects and "/objects/" in self.path:
            time.sleep(self.delay_objects)
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@contextlib.contextmanager
def http_server(root: Path, *, smart: bool, delay_objects: float = 0.0) -> Iterator[str]:
    """Repositories under ``root`` over HTTP on 127.0.0.1; yields ``http://127.0.0.1:PORT``.
    Dumb HTTP serves the files as they are (run ``git update-server-info`` first)."""
    if smart:
        handler = type("Smart", (_SmartHandler,), {"project_root": str(root)})
    else:
        base = _DumbHandler
        handler = type("Dumb", (base,), {"delay_objects": delay_objects,
                                          "__init__": lambda self, *a, **k: base.__init__(self, *a, directory=str(root), **k)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)

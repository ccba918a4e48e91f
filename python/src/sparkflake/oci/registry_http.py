"""One HTTP exchange with a registry, within bounds of time and of what it may say.

``http.client`` bounds each socket operation by the connection's timeout, not an answer:
headers sent a byte a second, ``100 Continue`` without end, or a body that trickles keep it
waiting for ever, and a broken body (a chunk size that is no number, a connection dropped
mid-body) raises ``ValueError``, ``IncompleteRead`` or ``OSError`` from wherever it is read.
Here the answer's headers must come within ``seconds``, and each read of its body must be
served within ``seconds`` too (a read asks for at most 1 MiB: a registry slower than that
is refused); either way, what went wrong is an ``InputError`` naming the exchange.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import os
import socket
import urllib.parse
from typing import TYPE_CHECKING

from ..core.errors import InputError
from ..core.watchdog import Watchdog

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

# What reading an answer raises when the registry breaks it off or breaks its framing.
READ_ERRORS = (OSError, http.client.HTTPException, ValueError, OverflowError)


def _shut_down(fileno: int) -> None:
    """End the TCP connection on ``fileno`` under a thread blocked reading it (that read then
    ends short or fails): ``shutdown`` of a duplicate of the descriptor, as the socket object
    is http.client's (a TLS socket's own ``shutdown`` drops its TLS state under the reader)."""
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fileno)) as duplicate:
        duplicate.shutdown(socket.SHUT_RDWR)


def _sever_connection(connection: http.client.HTTPConnection) -> None:
    sock = connection.sock
    with contextlib.suppress(OSError, ValueError):
        if sock is not None:
            _shut_down(sock.fileno())


def _sever_response(response: http.client.HTTPResponse) -> None:
    # the answer's socket: once an answer with "Connection: close" is read, the connection
    # hands its socket to the answer and forgets it
    stream = response.fp
    with contextlib.suppress(OSError, ValueError):
        if stream is not None:
            _shut_down(stream.fileno())


def describe_error(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def get_response(connection: http.client.HTTPConnection, seconds: float, what: str) -> http.client.HTTPResponse:
    """The answer to the request sent on ``connection``, its status line and headers within
    ``seconds`` (else the connection is closed and refused); what ``getresponse`` raises
    otherwise is raised as it is (OSError, HTTPException, ValueError), for the caller to name."""
    with Watchdog(seconds, lambda: _sever_connection(connection)) as deadline:
        try:
            response = connection.getresponse()
        except READ_ERRORS:
            if not deadline.fired:
                raise
    if deadline.fired:
        connection.close()
        raise InputError(f"{what}: no answer within {seconds:g}s")
    return response


class ResponseBody(io.RawIOBase):
    """The body of ``response`` as a raw stream: each read must be served within ``seconds``,
    and what breaks it is an ``InputError`` naming ``what``. Closing it closes the connection."""

    def __init__(self, connection: http.client.HTTPConnection, response: http.client.HTTPResponse,
                 *, seconds: float, what: str) -> None:
        super().__init__()
        self._connection = connection
        self._response = response
        self._seconds = seconds
        self._what = what
        self._stalled = Watchdog(seconds, lambda: _sever_response(response))

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """At most ``size`` bytes (> 0), ``b""`` at the end: the response's own read, without
        the copy ``RawIOBase.read`` makes through ``readinto``."""
        if size < 0:
            raise ValueError("a registry's answer is read in bounded pieces")
        try:
            chunk = self._response.read(size)
        except READ_ERRORS as exc:
            raise self._refusal(exc) from None
        self._served(len(chunk), size)
        return chunk

    def readinto(self, buffer: WriteableBuffer) -> int:
        try:
            count = self._response.readinto(buffer)
        except READ_ERRORS as exc:
            raise self._refusal(exc) from None
        self._served(count, len(memoryview(buffer)))
        return count

    def _served(self, count: int, asked: int) -> None:
        if self._stalled.fired:  # ended under the read, which may have returned short
            raise self._refusal(None)
        if count == 0 and asked and self._response.length:
            # http.client ends a body short of its Content-Length without a word
            raise InputError(f"{self._what}: the registry's answer broke off: {self._response.length} bytes short "
                             "of its Content-Length")
        self._stalled.feed()

    def read_whole(self, limit: int) -> bytes:
        """The whole body, read 1 MiB at a time (each within the time-out); past ``limit``
        bytes, its first ``limit + 1``, for the caller to refuse."""
        parts: list[bytes] = []
        size = 0
        while size <= limit and (part := self.read(min(1 << 20, limit + 1 - size))):
            parts.append(part)
            size += len(part)
        return b"".join(parts)

    def close(self) -> None:
        if not self.closed:
            self._stalled.stop()
            self._response.close()
            self._connection.close()
        super().close()

    def _refusal(self, exc: BaseException | None) -> InputError:
        if self._stalled.fired or exc is None:
            return InputError(f"{self._what}: the registry sent too little within {self._seconds:g}s")
        return InputError(f"{self._what}: the registry's answer broke off: {describe_error(exc)}")


def http_url(text: str) -> urllib.parse.SplitResult | None:
    """``text`` as an http(s) URL of printable ASCII (what a request line can carry) with a
    host and a port that is a number from 0 to 65535; None when it is not one."""
    if not text.isascii() or not text.isprintable() or " " in text:
        return None
    try:
        url = urllib.parse.urlsplit(text)
        url.port  # noqa: B018 - raises on a port that is no number or out of range
    except ValueError:  # also "http://[::1": an IPv6 host without its end
        return None
    return url if url.scheme in ("http", "https") and url.hostname else None


def redirect_target(base: str, location: str, what: str) -> urllib.parse.SplitResult:
    """Where a ``Location`` the registry gave (a redirect's, an upload's) leads from ``base``."""
    try:
        target = http_url(urllib.parse.urljoin(base, location))
    except ValueError:  # urljoin parses the location too
        target = None
    if target is None:
        raise InputError(f"{what}: the registry pointed to {location!r}, not an http(s) URL of printable ASCII "
                         "with a host and a port")
    return target

"""Readiness by rank 0's own API: ``GET /health`` answers 200 and ``GET /v1/models`` lists
the served model. Both routes are vLLM 0.33.0's own (the image's wheel:
vllm/entrypoints/serve/instrumentator/health.py ``@router.get("/health")``, 200 once the
engine is up; vllm/entrypoints/openai/models/api_router.py ``@router.get("/v1/models")``,
a model list whose cards' ``id`` is the served model name)."""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.request
from dataclasses import dataclass

RESPONSE_LIMIT = 1 << 20


@dataclass(frozen=True)
class Readiness:
    ready: bool
    detail: str


def api_base(host: str, port: int) -> str:
    shown = f"[{host}]" if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address) else host
    return f"http://{shown}:{port}"


def parse_api_base(text: str) -> tuple[str, int]:
    """The address and port of what ``api_base`` wrote (a deployment record's ``api``); a
    ValueError says why any other text is not one."""
    scheme, _, rest = text.partition("://")
    host, _, port = rest.rpartition(":")
    if scheme != "http" or not port.isascii() or not port.isdecimal() or len(port) > 5 or not 0 < int(port) < 65536:
        raise ValueError(f"expected http://ADDRESS:PORT (a port from 1 to 65535), got {text!r}")
    address = host.removeprefix("[").removesuffix("]")
    try:
        written = api_base(address, int(port))
    except ValueError:
        raise ValueError(f"expected http://ADDRESS:PORT with an IP address (the rank's management address), "
                         f"got {text!r}") from None
    if written != text:
        raise ValueError(f"expected {written!r} (as the service writes it), got {text!r}")
    return address, int(port)


def _get(url: str, timeout: float) -> tuple[int, bytes]:
    # no proxy: rank 0 is on the site's management network, never behind the operator's proxy
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, method="GET"), timeout=timeout) as response:
            return response.status, response.read(RESPONSE_LIMIT)
    except urllib.error.HTTPError as exc:
        return exc.code, b""


def probe(host: str, port: int, model: str, timeout: float = 2.0) -> Readiness:
    base = api_base(host, port)
    try:
        status, _ = _get(f"{base}/health", timeout)
        if status != 200:
            return Readiness(False, f"{base}/health answered {status}")
        status, body = _get(f"{base}/v1/models", timeout)
    except (OSError, ValueError) as exc:  # refused, reset, timed out: not up yet
        reason = getattr(exc, "reason", exc)
        return Readiness(False, f"{base}: {reason}")
    if status != 200:
        return Readiness(False, f"{base}/v1/models answered {status}")
    try:
        listed = [card.get("id") for card in json.loads(body)["data"] if isinstance(card, dict)]
    except (ValueError, KeyError, TypeError):
        return Readiness(False, f"{base}/v1/models: not a model list")
    if model not in listed:
        return Readiness(False, f"{base}/v1/models lists {listed}, not {model!r}")
    return Readiness(True, f"{base}: healthy, serving {model}")

"""SPEC.json -> ImageSpec, strictly: unknown keys, wrong types, missing trees and
duplicate targets are refused with the JSON path of the offending value.

Shape (relative paths are relative to the SPEC file's directory)::

    {
      "platform": "linux/arm64",            # or linux/arm64/v8, linux/amd64
      "compression": "gzip",                # gzip | zstd | none
      "compression_level": 6,               # optional
      "source_date_epoch": 1,               # optional; else $SOURCE_DATE_EPOCH, else 1
      "repository": "localhost/sparkflake", # docker-archive RepoTags name (optional)
      "tag": "latest",
      "annotations": {"org.opencontainers.image.source": "..."},
      "layers": [
        {"tree": "DIR", "target": "/"},     # one tree, or:
        {"sources": [{"tree": "DIR", "target": "/opt/x"}],
         "files": [{"path": "/etc/x", "text": "...", "mode": "0644"}],
         "delete": ["/usr/share/doc"], "opaque": ["/var/cache"],
         "created_by": "what made this layer"}
      ],
      "config": {"Entrypoint": [...], "Cmd": [...], "Env": ["K=V"], "WorkingDir": "/",
                 "User": "0:0", "ExposedPorts": ["8000/tcp"], "Labels": {...},
                 "StopSignal": "SIGTERM"}
    }
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Any

from ..core.documents import read_json_file
from ..core.errors import InputError
from .compression import Compression
from .config import RuntimeConfig
from .image import ImageSpec, LayerSpec, default_source_date_epoch
from .layer_input import GeneratedFile, LayerInput, TreeSource
from .layer_tree import normalize_image_path
from .types import Platform

_TOP_KEYS = {
    "platform",
    "compression",
    "compression_level",
    "gzip_implementation",
    "source_date_epoch",
    "repository",
    "tag",
    "annotations",
    "layers",
    "config",
}
_LAYER_KEYS = {"tree", "target", "sources", "files", "delete", "opaque", "created_by"}
_SOURCE_KEYS = {"tree", "target"}
_FILE_KEYS = {"path", "text", "base64", "mode"}
_CONFIG_KEYS = {
    "Env",
    "Entrypoint",
    "Cmd",
    "WorkingDir",
    "User",
    "ExposedPorts",
    "Labels",
    "StopSignal",
}


class _Context:
    def __init__(self, spec_path: Path) -> None:
        self.spec_path = spec_path

    def fail(self, where: str, message: str) -> InputError:
        return InputError(f"{self.spec_path}: {where}: {message}")

    def keys(self, value: Any, allowed: set[str], where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {type(value).__name__}")
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise self.fail(
                where, f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})"
            )
        return value

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {_shown(value)}")
        return value

    def items(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list, got {_shown(value)}")
        return value

    def strings(self, value: Any, where: str) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list of strings, got {_shown(value)}")
        return tuple(self.string(item, f"{where}[{i}]") for i, item in enumerate(value))

    def string_map(self, value: Any, where: str) -> dict[str, str]:
        if not isinstance(value, dict):
            raise self.fail(where, "expected an object of strings")
        return {key: self.string(item, f"{where}.{key}") for key, item in value.items()}

    def tree(self, value: Any, where: str) -> str:
        text = self.string(value, where)
        path = Path(text)
        if not path.is_absolute():
            path = self.spec_path.parent / path
        if not path.is_dir():
            state = "does not exist" if not path.exists() else "is not a directory"
            raise self.fail(where, f"tree {path} {state}")
        return os.fspath(path)


def load_spec_file(spec_path: str | os.PathLike[str]) -> ImageSpec:
    path = Path(spec_path)
    return parse_spec(read_json_file(path, "an image spec"), path)


def _shown(value: Any) -> str:
    """A value as it stands in an error message: JSON, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_spec(document: Any, spec_path: Path) -> ImageSpec:
    ctx = _Context(spec_path)
    top = ctx.keys(document, _TOP_KEYS, "$")
    try:
        platform = Platform.parse(ctx.string(top.get("platform", "linux/arm64"), "platform"))
    except InputError as exc:
        if exc.message.startswith(f"{spec_path}:"):
            raise
        raise ctx.fail("platform", exc.message) from exc
    algorithm = ctx.string(top.get("compression", "gzip"), "compression")
    level = top.get("compression_level")
    if level is not None and (not isinstance(level, int) or isinstance(level, bool)):
        raise ctx.fail("compression_level", "expected an integer")
    implementation = top.get("gzip_implementation")
    if implementation is not None:
        implementation = ctx.string(implementation, "gzip_implementation")
    try:
        compression = Compression(algorithm, level, implementation=implementation)
    except InputError as exc:
        key = "gzip_implementation" if "implementation" in exc.message else "compression"
        raise ctx.fail(key, exc.message) from exc
    epoch = top.get("source_date_epoch")
    if epoch is None:
        epoch = default_source_date_epoch()
    elif not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise ctx.fail("source_date_epoch", "expected a non-negative integer")
    layers_value = top.get("layers")
    if not isinstance(layers_value, list) or not layers_value:
        raise ctx.fail("layers", "expected a non-empty list of layers")
    layers = tuple(
        _parse_layer(ctx, value, f"layers[{i}]", i) for i, value in enumerate(layers_value)
    )
    runtime = _parse_config(ctx, top.get("config", {}))
    try:
        return ImageSpec(
            layers=layers,
            platform=platform,
            runtime=runtime,
            compression=compression,
            source_date_epoch=epoch,
            tag=ctx.string(top.get("tag", "latest"), "tag"),
            repository=ctx.string(top.get("repository", "localhost/sparkflake"), "repository"),
            annotations=ctx.string_map(top.get("annotations", {}), "annotations"),
        )
    except InputError as exc:
        raise InputError(f"{spec_path}: {exc.message}") from exc


def _parse_layer(ctx: _Context, value: Any, where: str, position: int) -> LayerSpec:
    layer = ctx.keys(value, _LAYER_KEYS, where)
    sources: list[TreeSource] = []
    if "tree" in layer:
        sources.append(
            TreeSource(ctx.tree(layer["tree"], f"{where}.tree"), _target(ctx, layer, where))
        )
    elif "target" in layer:
        raise ctx.fail(f"{where}.target", "given without a tree")
    for i, source_value in enumerate(ctx.items(layer.get("sources", []), f"{where}.sources")):
        source_where = f"{where}.sources[{i}]"
        source = ctx.keys(source_value, _SOURCE_KEYS, source_where)
        if "tree" not in source:
            raise ctx.fail(source_where, "missing key 'tree'")
        sources.append(
            TreeSource(
                ctx.tree(source["tree"], f"{source_where}.tree"), _target(ctx, source, source_where)
            )
        )
    files = []
    for i, file_value in enumerate(ctx.items(layer.get("files", []), f"{where}.files")):
        files.append(_parse_file(ctx, file_value, f"{where}.files[{i}]"))
    deletions = ctx.strings(layer.get("delete", []), f"{where}.delete")
    opaque = ctx.strings(layer.get("opaque", []), f"{where}.opaque")
    if not sources and not files and not deletions and not opaque:
        raise ctx.fail(where, "a layer needs a tree, sources, files, delete or opaque")
    _refuse_duplicate_targets(ctx, sources, files, where)
    created_by = ctx.string(
        layer.get("created_by", f"sparkflake image build: layer {position + 1}"),
        f"{where}.created_by",
    )
    return LayerSpec(
        LayerInput(tuple(sources), tuple(files), deletions, opaque),
        created_by,
    )


def _target(ctx: _Context, record: dict[str, Any], where: str) -> str:
    target = ctx.string(record.get("target", "/"), f"{where}.target")
    try:
        normalize_image_path(target, what=f"{where}.target")
    except InputError as exc:
        raise ctx.fail(f"{where}.target", exc.message) from exc
    return target


def _parse_file(ctx: _Context, value: Any, where: str) -> GeneratedFile:
    record = ctx.keys(value, _FILE_KEYS, where)
    target = ctx.string(record.get("path"), f"{where}.path")
    if ("text" in record) == ("base64" in record):
        raise ctx.fail(where, "give exactly one of 'text' or 'base64'")
    if "text" in record:
        content = ctx.string(record["text"], f"{where}.text").encode("utf-8")
    else:
        try:
            content = base64.b64decode(
                ctx.string(record["base64"], f"{where}.base64"), validate=True
            )
        except ValueError as exc:
            raise ctx.fail(f"{where}.base64", f"invalid base64: {exc}") from exc
    mode_text = ctx.string(record.get("mode", "0644"), f"{where}.mode")
    # octal digits only: int(text, 8) also takes "0o644", "+644", " 644", "6_44" or "٦٤٤"
    if not re.fullmatch(r"[0-7]{1,12}", mode_text):
        raise ctx.fail(f"{where}.mode", f"expected an octal mode like '0644', got {mode_text!r}")
    mode = int(mode_text, 8)
    if not 0 <= mode <= 0o7777:
        raise ctx.fail(f"{where}.mode", f"mode {mode_text!r} out of range")
    return GeneratedFile(target, content, mode)


def _refuse_duplicate_targets(
    ctx: _Context, sources: list[TreeSource], files: list[GeneratedFile], where: str
) -> None:
    seen: dict[str, str] = {}
    for source in sources:
        target = normalize_image_path(source.target, what=where)
        if target in seen:
            raise ctx.fail(where, f"duplicate target path /{target} (also {seen[target]})")
        seen[target] = f"tree {source.host_dir}"
    for i, generated in enumerate(files):
        target = normalize_image_path(generated.target, what=f"{where}.files[{i}].path")
        if target in seen:
            raise ctx.fail(
                f"{where}.files[{i}].path", f"duplicate target path /{target} (also {seen[target]})"
            )
        seen[target] = f"files[{i}]"


def _parse_config(ctx: _Context, value: Any) -> RuntimeConfig:
    config = ctx.keys(value, _CONFIG_KEYS, "config")

    def optional_list(key: str) -> tuple[str, ...] | None:
        return ctx.strings(config[key], f"config.{key}") if key in config else None

    def optional_string(key: str) -> str | None:
        return ctx.string(config[key], f"config.{key}") if key in config else None

    env = ctx.strings(config.get("Env", []), "config.Env")
    for i, item in enumerate(env):
        if "=" not in item or item.startswith("="):
            raise ctx.fail(f"config.Env[{i}]", f"expected NAME=VALUE, got {item!r}")
    ports_value = config.get("ExposedPorts", [])
    if isinstance(ports_value, dict):
        ports_value = list(ports_value)
    ports = ctx.strings(ports_value, "config.ExposedPorts")
    return RuntimeConfig(
        env=env,
        entrypoint=optional_list("Entrypoint"),
        cmd=optional_list("Cmd"),
        working_dir=optional_string("WorkingDir"),
        user=optional_string("User"),
        exposed_ports=ports,
        labels=ctx.string_map(config.get("Labels", {}), "config.Labels"),
        stop_signal=optional_string("StopSignal"),
    )

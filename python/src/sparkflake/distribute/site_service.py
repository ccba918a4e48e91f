"""The site file's service part: what ``sparkflake service`` needs beyond fan-out.

One site file describes the ranks for both. ``[service]`` names the profile, the engine,
the image (config digest, and the manifest digest it must be bound to) and how long rank 0
may take to become ready; each ``[[ranks]]`` entry then carries its serving rank number
(``rank``; 0 is the master) and may name its own ``env_file``. Validation is data only:
rank numbers are 0..N-1, each once, no gap; every key known.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.digest import is_digest
from ..core.errors import InputError

SERVICE_KEYS = {
    "name", "profile", "env_file", "engine", "image", "manifest", "ready_timeout", "stop_timeout",
    "agent", "record_dir", "trusted_key", "signatures", "registry_insecure",
}
DEFAULT_SERVICE_AGENT = ("python3", "-m", "sparkflake.service.agent")
ENGINES = ("podman", "docker")
DEFAULT_READY_TIMEOUT = 1800  # GLM-5.3 loads ~400 GB of weights and compiles kernels before /health
DEFAULT_STOP_TIMEOUT = 30


@dataclass(frozen=True)
class ServiceSettings:
    name: str = "glm53"  # the label value every container of this service carries
    profile: str = "glm53-dflash7"  # a profile name or a profile.toml path on the ranks
    env_file: str | None = None  # runtime.env on every rank, unless a rank names its own
    engine: str = "podman"
    image: str | None = None  # config digest = the engine's image ID
    manifest: str | None = None  # the manifest digest that config must be bound to
    ready_timeout: int = DEFAULT_READY_TIMEOUT
    stop_timeout: int = DEFAULT_STOP_TIMEOUT
    agent: tuple[str, ...] = DEFAULT_SERVICE_AGENT
    record_dir: str = "deployments"  # on the controller; relative to the site file's directory
    trusted_key: str | None = None  # cosign public key (controller; relative to the site file)
    signatures: str | None = None  # REGISTRY/REPO holding the image's signature and attestation
    registry_insecure: bool = False  # plain HTTP to that registry (loopback registries only)


def parse_service(reader: Any, raw: Any) -> ServiceSettings:
    """``[service]`` through the site reader (so every refusal names the file and path)."""
    table = reader.table(raw, "service")
    reader.keys(table, "service", SERVICE_KEYS)
    kwargs: dict[str, Any] = {}
    if "name" in table:
        kwargs["name"] = reader.name(table["name"], "service.name")
    for key in ("profile", "env_file", "record_dir", "trusted_key", "signatures"):
        if key in table:
            kwargs[key] = reader.string(table[key], f"service.{key}")
    if "env_file" in kwargs and not kwargs["env_file"].startswith("/"):
        raise reader.fail("service.env_file", "an absolute path on the ranks", kwargs["env_file"])
    if "engine" in table:
        engine = reader.string(table["engine"], "service.engine")
        if engine not in ENGINES:
            raise reader.fail("service.engine", "podman or docker", engine)
        kwargs["engine"] = engine
    for key in ("image", "manifest"):
        if key in table:
            value = reader.string(table[key], f"service.{key}")
            if not is_digest(value):
                raise reader.fail(f"service.{key}", "sha256:<64 lowercase hex>", value)
            kwargs[key] = value
    for key in ("ready_timeout", "stop_timeout"):
        if key in table:
            kwargs[key] = reader.positive_int(table[key], f"service.{key}")
    if "agent" in table:
        kwargs["agent"] = tuple(reader.strings(table["agent"], "service.agent", nonempty=True))
    if "registry_insecure" in table:
        if not isinstance(table["registry_insecure"], bool):
            raise reader.fail("service.registry_insecure", "true or false", table["registry_insecure"])
        kwargs["registry_insecure"] = table["registry_insecure"]
    if ("trusted_key" in kwargs) != ("signatures" in kwargs):
        present, absent = ("trusted_key", "signatures") if "trusted_key" in kwargs else ("signatures", "trusted_key")
        raise reader.fail(f"service.{absent}", f"a value: service.{present} needs it", None)
    return ServiceSettings(**kwargs)


def rank_number(reader: Any, raw: Any, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 0 <= raw <= 9999:
        raise reader.fail(where, "a rank number 0..9999", raw)
    return raw


def rank_env_file(reader: Any, raw: Any, where: str) -> str:
    path: str = reader.string(raw, where)
    if not path.startswith("/"):
        raise reader.fail(where, "an absolute path on the rank", path)
    return path


def validate_service_ranks(origin: str, service: ServiceSettings | None, ranks: Sequence[Any]) -> None:
    """With ``[service]``: every rank has a number, 0..N-1 each once, and an env file (its
    own or the service's). Without it, rank numbers are optional but still unique."""
    numbers: dict[int, int] = {}
    for index, rank in enumerate(ranks):
        if rank.number is None:
            if service is not None:
                raise InputError(f"{origin}: ranks[{index}].rank: missing (a [service] site numbers every rank)")
            continue
        if rank.number in numbers:
            raise InputError(
                f"{origin}: ranks[{index}].rank: duplicate rank number {rank.number} "
                f"(ranks[{numbers[rank.number]}] has it too)"
            )
        numbers[rank.number] = index
        if service is not None and rank.env_file is None and service.env_file is None:
            raise InputError(f"{origin}: ranks[{index}].env_file: missing (and service.env_file is not set)")
    if not numbers:
        return
    missing = sorted(set(range(max(numbers) + 1)) - set(numbers))
    if missing:
        raise InputError(
            f"{origin}: ranks[].rank: rank numbers must be 0..{len(ranks) - 1} without a gap; "
            f"missing {', '.join(map(str, missing))}"
        )
    if service is not None and len(numbers) != len(ranks):  # unreachable: every rank is numbered
        raise InputError(f"{origin}: ranks[].rank: {len(ranks) - len(numbers)} ranks unnumbered")


def dump_service(service: ServiceSettings, toml: Any) -> list[str]:
    lines = ["", "[service]"]
    defaults = ServiceSettings()
    for key in ("name", "profile", "env_file", "engine", "image", "manifest", "ready_timeout", "stop_timeout",
                "record_dir", "trusted_key", "signatures", "registry_insecure"):
        value = getattr(service, key)
        if value is not None and (value != getattr(defaults, key) or key in ("name", "profile")):
            lines.append(f"{key} = {toml(value)}")
    if service.agent != defaults.agent:
        lines.append(f"agent = {toml(list(service.agent))}")
    return lines

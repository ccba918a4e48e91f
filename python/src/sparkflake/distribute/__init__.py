"""Distribution to every rank: the site file, chain fan-out over adjacent links (pipelined,
resumable, verified at every hop), registry mode, and checkpoint replication.

Public API (plain data in, plain data out; only ``sparkflake.cli`` prints):

- ``load_site(path) -> Site``, ``parse_site(text)``, ``dump_site(site)``, ``validate_site``
- ``fanout(site, FanoutRequest(...)) -> report dict`` (one evidence record per rank)
- ``registry_fanout(site, RegistryFanoutRequest(...)) -> report dict``
- ``replicate(site, ReplicateRequest(...)) -> report dict``

The per-rank side is ``python -m sparkflake.distribute.agent`` (started over SSH).
"""

from importlib import import_module
from typing import Any

# Loaded on first use: the per-rank agent imports this package on every hop and should not
# pay for the controller's modules (ssl, http, the registry client).
_EXPORTS = {
    "FanoutRequest": "distribute",
    "fanout": "distribute",
    "RegistryFanoutRequest": "registry_mode",
    "registry_fanout": "registry_mode",
    "ReplicateRequest": "replicate",
    "replicate": "replicate",
    "Hop": "site",
    "Link": "site",
    "Rank": "site",
    "Site": "site",
    "SshOptions": "site",
    "dump_site": "site",
    "load_site": "site",
    "parse_site": "site",
    "validate_site": "site",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)

"""Credentials in what ``recipe import``/``export`` show: the name, never the value.

The files they write keep every value verbatim (the recipe is carried; an import then an
export gives it back); their printed lines, notes, conflicts and ``--json`` report show
``***`` for the value of a serve flag or env key whose name says it is a credential.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "***"

# A name (a flag, up to any "=", or an env key or field) says it is a credential when one
# of its words (split at anything but a letter or digit, case ignored) contains "password",
# "passwd", "secret" or "credential"; or ends with "token", "key" or "keys" (--api-key,
# --hf-token, HF_TOKEN, VLLM_API_KEY, APIKEY); or begins with "auth" (--auth,
# AUTHORIZATION). A word that merely holds "token" or "key" elsewhere is not (--tokenizer,
# MAX_NUM_BATCHED_TOKENS, --ssl-keyfile: a path), so those values stay shown.
_CREDENTIAL_WORD = re.compile(r".*(?:password|passwd|secret|credential).*|.*(?:token|keys?)|auth.*")


def names_credential(name: str) -> bool:
    """Whether ``name`` (``--api-key``, ``--api-key=VALUE``, ``HF_TOKEN``) names a credential."""
    words = re.split(r"[^a-z0-9]+", name.partition("=")[0].lower())
    return any(_CREDENTIAL_WORD.fullmatch(word) for word in words)


def masked_flag(word: str) -> str:
    """``--flag=value`` as shown: the value masked when the flag names a credential."""
    flag, equals, _ = word.partition("=")
    return f"{flag}={MASK}" if equals and names_credential(flag) else word


def masked_value(name: str, value: Any) -> Any:
    """``value`` given for ``name`` (a flag, an env key, a field) as shown: ``***`` when the
    name says credential; in a table, each entry by its own key, at any depth."""
    if value is not None and names_credential(name):
        return MASK
    if isinstance(value, dict):
        return {key: masked_value(str(key), entry) for key, entry in value.items()}
    if isinstance(value, list):
        return [masked_value(name, entry) for entry in value]
    return value


def masked_args(flags: Iterable[tuple[str, str | None]]) -> list[str]:
    """A serve command line, given as (flag, value or None), as shown."""
    shown: list[str] = []
    for flag, value in flags:
        shown.append(masked_flag(flag))
        if value is not None:
            shown.append(masked_value(flag, value))
    return shown

"""Credentials in what ``recipe import``/``export`` show: the name, never the value.

The files they write keep every value verbatim (the recipe is carried; an import then an
export gives it back, and the exported recipe is what runs); their printed lines, notes,
conflicts and ``--json`` report show ``***`` for a credential:

- the value of a serve flag, env key or field whose name says it is a credential
  (``names_credential``);
- a credential inside any other value (``masked_text``): under a credential-named key of a
  JSON value (``--kv-transfer-config '{..., "api_key": "sk-..."}'``), after a credential
  name in a command line or header (``HF_TOKEN=hf_...``, ``--hf-token hf_...``,
  ``Authorization: Bearer ...``), and a URL's user information or credential-bearing query
  (``https://user:pass@host/``, ``?token=``, ``?X-Amz-Signature=``, shown by
  ``core.urls.redacted``).

A value holding none of these is shown byte for byte. Masking is for what is shown only:
nothing masked is ever written to a file that runs.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

from ..core.documents import MAX_DOCUMENT_BYTES, is_utf8_text
from ..core.urls import redacted

MASK = "***"

# A name (a flag, up to any "=", or an env key or field) says it is a credential when one
# of its words (split at anything but a letter or digit, case ignored) contains "password",
# "passwd", "secret" or "credential"; or ends with "token", "key" or "keys" (--api-key,
# --hf-token, HF_TOKEN, VLLM_API_KEY, APIKEY); or begins with "auth" (--auth,
# AUTHORIZATION). A word that merely holds "token" or "key" elsewhere is not (--tokenizer,
# MAX_NUM_BATCHED_TOKENS, --ssl-keyfile: a path), so those values stay shown.
_CREDENTIAL_WORD = re.compile(r".*(?:password|passwd|secret|credential).*|.*(?:token|keys?)|auth.*")
# a URL's query parameter is a credential by the same rule, or when it is a signature
# (X-Amz-Signature, X-Goog-Signature, Azure's sig): a presigned URL is its own credential
_SIGNATURE_WORD = re.compile(r"sig|.*signature")

# JSON inside JSON (a string holding a JSON text) is parsed this many levels deep; deeper
# strings get the text patterns only
_MAX_JSON_DEPTH = 4

# a URL: its scheme, "://", then up to a space or a quote
_URL = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"'`<>]+")
# where a name may be followed by its value: a JSON key ("api_key": ...), or a flag, env
# key or header name that begins the text or follows a space, a quote, a bracket, a shell
# separator, "?", "&" or "=" (a path's "/secrets:" is no name)
_CANDIDATE = re.compile(
    r"""(?P<key>"(?:[^"\\\n]|\\.)*")(?=[ \t]*:)"""
    r"""|(?<![^\s"'`{}\[\](),;&|?=])(?P<quote>["']?)(?P<name>-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)["']?"""
)
# one shell word (quotes included, an unclosed quote to the end): the value of NAME=...
# or of --flag ...
_SHELL_WORD = re.compile(r"""(?:[^\s"'\\;&|<>()`]|\\[\s\S]|"(?:[^"\\]|\\[\s\S])*"?|'[^']*'?)+""")
_BLANKS = re.compile(r"[ \t]*")
_FLAG_GAP = re.compile(r"(?:[ \t]|\\\r?\n)+")  # a space, or a shell line continuation
_DOUBLE_QUOTED = re.compile(r'"((?:[^"\\]|\\[\s\S])*)"')
_SINGLE_QUOTED = re.compile(r"'([^']*)'")
_HEADER_VALUE = re.compile(r"""[^\r\n"',}\]]*""")  # "Authorization: Bearer x" to a quote, line end or ,}]
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9_])(bearer[ \t]+)[^\s\"'`,;]+")
_PLAIN_FLAG = re.compile(r"-{1,2}[A-Za-z0-9][A-Za-z0-9_.\-]*")
_JSON = json.JSONDecoder()
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def names_credential(name: str) -> bool:
    """Whether ``name`` (``--api-key``, ``--api-key=VALUE``, ``HF_TOKEN``) names a credential."""
    words = re.split(r"[^a-z0-9]+", name.partition("=")[0].lower())
    return any(_CREDENTIAL_WORD.fullmatch(word) for word in words)


def masked_flag(word: str) -> str:
    """``--flag=value`` (or any word of a command line) as shown: the value masked when the
    flag names a credential, else the credentials inside it (``masked_text``)."""
    flag, equals, value = word.partition("=")
    if equals and names_credential(flag):
        return f"{masked_text(flag)}={MASK}"  # a word of several ("--hf-token X HF_TOKEN=Y"): X too
    if equals and _PLAIN_FLAG.fullmatch(flag):
        return f"{flag}={masked_text(value)}"
    return masked_text(word)


def masked_value(name: str, value: Any) -> Any:
    """``value`` given for ``name`` (a flag, an env key, a field) as shown: ``***`` when the
    name says credential; in a table, each entry by its own key, at any depth; in a list,
    the word after a credential flag (``["--api-key", "sk-..."]``); a string, with the
    credentials inside it masked (``masked_text``)."""
    if value is not None and names_credential(name):
        return MASK
    if isinstance(value, str):
        return masked_text(value)
    if isinstance(value, dict):
        return {key: masked_value(str(key), entry) for key, entry in value.items()}
    if isinstance(value, list):
        shown = []
        after_credential_flag = False
        for entry in value:
            shown.append(MASK if after_credential_flag and _is_flag_value(entry) else masked_value(name, entry))
            after_credential_flag = _is_credential_flag(entry)
        return shown
    return value


def masked_args(flags: Iterable[tuple[str, str | None]]) -> list[str]:
    """A serve command line, given as (flag, value or None), as shown."""
    shown: list[str] = []
    for flag, value in flags:
        shown.append(masked_flag(flag))
        if value is not None:
            shown.append(masked_value(flag, value))
    return shown


def masked_text(text: str) -> str:
    """A free-form value (an argument's value, an env value, a mod's command) as shown.

    - A JSON object or array (shell-quoted '...' too): each value under a key that names a
      credential is ``***``, at any depth, and each string is masked as text; re-serialised
      only when something was masked, else the original text is kept.
    - Any other text: a URL holding user information or a credential-bearing query is
      ``core.urls.redacted``; the value after a credential name is ``***`` in
      ``NAME=value``, ``--flag value``, ``--flag=value``, ``"key": value`` and
      ``Header: value`` (``HF_TOKEN=***``, ``--hf-token ***``, ``Authorization: ***``);
      the token after ``Bearer``.

    Text holding none of these comes back byte for byte; ``masked_text`` of its own output
    changes nothing."""
    return _masked_text(text, 0)


def _masked_text(text: str, depth: int) -> str:
    if depth < _MAX_JSON_DEPTH:
        shown = _masked_json_text(text, depth)
        if shown is not None:
            return shown
    text = _URL.sub(_shown_url, text)
    text = _masked_named_values(text)
    return _BEARER.sub(lambda match: match.group(1) + MASK, text)


def _is_credential_flag(word: object) -> bool:
    return isinstance(word, str) and word.startswith("-") and "=" not in word and names_credential(word)


def _is_flag_value(word: object) -> bool:
    """Whether ``word``, after a flag, is its value (not the next flag, not JSON null)."""
    return word is not None and not (isinstance(word, str) and word.startswith("--"))


# --------------------------------------------------------------------------- URLs

def url_holds_credential(url: str) -> bool:
    """Whether ``url`` (``scheme://...``) carries a credential: user information other than
    an ssh user name (``https://user:pass@``, ``https://TOKEN@``), or a query or fragment
    parameter naming a credential or a signature (``?token=``, ``?X-Amz-Signature=``,
    ``#access_token=``)."""
    scheme, _, rest = url.partition("://")
    query_at = min((at for at in (rest.find("?"), rest.find("#")) if at >= 0), default=len(rest))
    user_end = rest.rfind("@", 0, query_at)
    if rest.find("@") > query_at:  # an "@" after "?": which part is the password is unknowable
        return True
    if user_end >= 0:
        userinfo = rest[:user_end]
        authority = userinfo.partition("/")[0]
        if "/" not in userinfo and (":" in userinfo or scheme.lower() not in ("ssh", "git+ssh")):
            return True
        if ":" in authority and "/" in userinfo:  # a password holding "/" (user:pa/ss@host)
            return True
    for parameter in re.split(r"[&;?#]", rest[query_at + 1:]):
        name = urllib.parse.unquote(parameter.partition("=")[0])
        if names_credential(name) or any(_SIGNATURE_WORD.fullmatch(word) for word in re.split(r"[^a-z0-9]+", name.lower())):
            return True
    return False


def _shown_url(match: re.Match[str]) -> str:
    url = match.group(0)
    return redacted(url) if url_holds_credential(url) else url


# --------------------------------------------------------------------------- NAME=value and the like

def _masked_named_values(text: str) -> str:
    """The value after each credential name in ``text`` masked (see ``masked_text``)."""
    pieces: list[str] = []
    kept_from = position = 0
    while (match := _CANDIDATE.search(text, position)) is not None:
        span = None
        if match.group("key") is not None:
            try:
                key = json.loads(match.group("key"))
            except ValueError:
                key = match.group("key")[1:-1]
            if isinstance(key, str) and names_credential(key):
                colon = _BLANKS.match(text, match.end())
                assert colon is not None
                span = _colon_value(text, colon.end() + 1)
            position = match.start() + 1
        else:
            name = match.group("name")
            if names_credential(name):
                span = _value_after_name(text, match.end(), name, bool(match.group("quote")))
            position = match.end("name")
        if span is not None:
            start, end, replacement = span
            pieces += [text[kept_from:start], replacement]
            kept_from = position = end
    return "".join(pieces) + text[kept_from:] if pieces else text


def _value_after_name(text: str, at: int, name: str, quoted: bool) -> tuple[int, int, str] | None:
    """(start, end, what is shown) of the value given after the name ending at ``at``."""
    after = _BLANKS.match(text, at)
    assert after is not None
    separator = after.end()
    if text.startswith("=", separator):
        value = _BLANKS.match(text, separator + 1)
        assert value is not None
        return _word_span(text, value.end())
    if text.startswith(":", separator) and not text.startswith("://", separator):
        return _colon_value(text, separator + 1)
    if not name.startswith("-"):
        return None
    if quoted and text.startswith(",", separator):  # ['--api-key', 'sk-...'] written out as text
        value = _BLANKS.match(text, separator + 1)
        assert value is not None
        return _word_span(text, value.end()) if text[value.end():value.end() + 1] in ("'", '"') else None
    gap = _FLAG_GAP.match(text, at)
    if gap is None or text.startswith("-", gap.end()):
        return None
    return _word_span(text, gap.end())


def _word_span(text: str, start: int) -> tuple[int, int, str] | None:
    word = _SHELL_WORD.match(text, start)
    return (start, word.end(), MASK) if word is not None else None


def _colon_value(text: str, at: int) -> tuple[int, int, str] | None:
    """The value after ``name:`` (a JSON or dict key, a header, YAML): a quoted string's
    text, a JSON object or array whole (to the end when it does not parse), else to a
    quote, a line end or ``,``, ``}``, ``]``."""
    blanks = _BLANKS.match(text, at)
    assert blanks is not None
    start = blanks.end()
    if start >= len(text):
        return None
    opening = text[start]
    if opening in "\"'":
        quoted = (_DOUBLE_QUOTED if opening == '"' else _SINGLE_QUOTED).match(text, start)
        if quoted is None:  # never closed: the rest is the value
            return start, len(text), MASK
        return (quoted.start(1), quoted.end(1), MASK) if quoted.end(1) > quoted.start(1) else None
    if opening in "{[":
        try:
            _, end = _JSON.raw_decode(text, start)
        except (ValueError, RecursionError):
            return start, len(text), MASK
        return start, end, json.dumps(MASK)
    value = _HEADER_VALUE.match(text, start)
    assert value is not None
    end = start + len(value.group(0).rstrip())
    return (start, end, MASK) if end > start else None


# --------------------------------------------------------------------------- JSON values

class _Pairs(list[tuple[str, Any]]):
    """A JSON object as parsed: its pairs in order, a key given twice kept twice."""


def _masked_json_text(text: str, depth: int) -> str | None:
    """``text`` masked as a JSON object or array (shell-quoted too), or None when it is not
    one: then the text patterns apply."""
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    if end - start >= 2 and text[start] == text[end - 1] == "'":
        start, end = start + 1, end - 1
    document = text[start:end]
    if document[:1] not in ("{", "[") or len(document) > MAX_DOCUMENT_BYTES:
        return None
    try:
        parsed = json.loads(document, object_pairs_hook=_Pairs)
        shown, changed = _masked_json(parsed, depth)
        if not changed:
            return text
        # written without a space between its tokens ('{"a":1}'): shown so, else ", " and ": "
        compact = not any(char.isspace() for char in _JSON_STRING.sub("", document))
        return text[:start] + _json_text(shown, "," if compact else ", ", ":" if compact else ": ") + text[end:]
    except (ValueError, RecursionError):  # not JSON, an integer past the interpreter's limit, too deep
        return None


def _masked_json(value: Any, depth: int) -> tuple[Any, bool]:
    """(``value`` as shown, whether anything in it was masked)."""
    if isinstance(value, str):
        shown = _masked_text(value, depth + 1)
        return shown, shown != value
    if isinstance(value, _Pairs):
        pairs = _Pairs()
        changed = False
        for key, entry in value:
            if entry is not None and names_credential(key):
                pairs.append((key, MASK))
                changed = changed or entry != MASK
            else:
                shown, entry_changed = _masked_json(entry, depth)
                pairs.append((key, shown))
                changed = changed or entry_changed
        return pairs, changed
    if isinstance(value, list):
        items = []
        changed = after_credential_flag = False
        for entry in value:
            if after_credential_flag and _is_flag_value(entry):
                items.append(MASK)
                changed = changed or entry != MASK
            else:
                shown, entry_changed = _masked_json(entry, depth)
                items.append(shown)
                changed = changed or entry_changed
            after_credential_flag = _is_credential_flag(entry)
        return items, changed
    return value, False


def _json_text(value: Any, comma: str, colon: str) -> str:
    if isinstance(value, _Pairs):
        return "{" + comma.join(f"{_json_text(key, comma, colon)}{colon}{_json_text(entry, comma, colon)}"
                                for key, entry in value) + "}"
    if isinstance(value, list):
        return "[" + comma.join(_json_text(entry, comma, colon) for entry in value) + "]"
    if isinstance(value, str) and not is_utf8_text(value):
        return json.dumps(value)  # a lone surrogate: its \\u escape, as it was written
    return json.dumps(value, ensure_ascii=False)

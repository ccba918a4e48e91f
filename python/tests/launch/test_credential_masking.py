"""Credentials inside another value (a JSON argument, a command line, a URL) are masked in
what sparkflake shows of a recipe; every other byte is shown as it is, and masking what is
shown changes nothing more (launch.credential_masking.masked_text)."""

from __future__ import annotations

import json
import string

from hypothesis import given
from hypothesis import strategies as st

from sparkflake.launch.credential_masking import (
    MASK,
    masked_args,
    masked_flag,
    masked_text,
    masked_value,
)
from sparkflake.launch.recipe import shown_args

# Every secret begins with "Q", which no context below holds: a secret shown leaks "Q...".
_TOKEN_CHARS = string.ascii_letters + string.digits + "-_.~+="
_SECRETS = st.text(st.sampled_from(_TOKEN_CHARS + "/"), max_size=24).map(lambda text: "Q" + text)
_URL_SECRETS = st.text(st.sampled_from(_TOKEN_CHARS), max_size=24).map(lambda text: "Q" + text)  # no "/"

# Text that names no credential: none of password, passwd, secret, credential, token, key,
# auth or bearer can be spelt without an "a" or an "e", and no URL carries user information
# or a query without "@", "?" or "#".
_PLAIN = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="aeAEQ@?#"), max_size=20)
# and the realistic words that come close (held by a recipe, shown byte for byte)
_NEAR_MISSES = st.sampled_from([
    "--tokenizer", "--tokenizer-mode auto", "--max-num-batched-tokens 8192", "MAX_NUM_BATCHED_TOKENS=8192",
    "TOKENIZERS_PARALLELISM=false", "--ssl-keyfile /etc/ssl/key.pem", "-v /secrets:/run/secrets:ro",
    "https://huggingface.co/zai-org/GLM-5/resolve/main/config.json", "https://host/file?revision=main&x=1",
    "ssh://git@github.com/org/repo.git", "git@github.com:org/repo.git", "https://registry.npmjs.org/@scope/pkg",
    '{"kv_connector":"SparkContextCacheConnector","kv_role":"kv_both"}', "'{\"level\":3}'",
    "export NCCL_DEBUG=WARN", "--chat-template=token.jinja", "--enable-auto-tool-choice", "pip install -e .",
    "vllm serve /models/target --port 8000", "num_speculative_tokens: 7", "keyboard=us",
])
_CONTEXT = st.lists(_PLAIN | _NEAR_MISSES, max_size=6)
_SEPARATORS = st.sampled_from([" ", "\n", " && ", " | "])

# (a credential as it is written, as it is shown) for a secret; and for a URL-safe secret
_PLANTED = st.sampled_from([
    (lambda s: f"HF_TOKEN={s}", lambda: f"HF_TOKEN={MASK}"),
    (lambda s: f'export HF_TOKEN="{s}"', lambda: f"export HF_TOKEN={MASK}"),
    (lambda s: f"VLLM_API_KEY='{s}'", lambda: f"VLLM_API_KEY={MASK}"),
    (lambda s: f"--hf-token {s}", lambda: f"--hf-token {MASK}"),
    (lambda s: f"--api-key={s}", lambda: f"--api-key={MASK}"),
    (lambda s: f"-H 'Authorization: Bearer {s}'", lambda: f"-H 'Authorization: {MASK}'"),
    (lambda s: f'-H "X-Api-Key: {s}"', lambda: f'-H "X-Api-Key: {MASK}"'),
    (lambda s: f"--oauth2-bearer {s}", lambda: f"--oauth2-bearer {MASK}"),
    (lambda s: f'{{"kv_connector": "X", "api_key": "{s}"}}', lambda: f'{{"kv_connector": "X", "api_key": "{MASK}"}}'),
    (lambda s: f'{{"password":"{s}"}}', lambda: f'{{"password":"{MASK}"}}'),
])
_PLANTED_URLS = st.sampled_from([
    (lambda s: f"https://user:{s}@pypi.example.com/simple", lambda: f"https://{MASK}@pypi.example.com/simple"),
    (lambda s: f"https://{s}@github.com/org/repo.git", lambda: f"https://{MASK}@github.com/org/repo.git"),
    (lambda s: f"https://host/f.bin?token={s}", lambda: f"https://host/f.bin?{MASK}"),
    (lambda s: f"https://b.s3.amazonaws.com/f?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature={s}",
     lambda: f"https://b.s3.amazonaws.com/f?{MASK}"),
    (lambda s: f"https://b.blob.core.windows.net/c/f?sv=2024&sig={s}", lambda: f"https://b.blob.core.windows.net/c/f?{MASK}"),
])
_PLANTINGS = st.one_of(st.tuples(_PLANTED, _SECRETS), st.tuples(_PLANTED_URLS, _URL_SECRETS))


@given(context=_CONTEXT, separator=_SEPARATORS, plantings=st.lists(_PLANTINGS, max_size=3), data=st.data())
def test_a_credential_inside_a_value_is_masked_and_nothing_else_changes(context, separator, plantings, data):
    """A command line (a mod's command, an argument's value) holding ``HF_TOKEN=...``,
    ``--hf-token ...``, ``Authorization: Bearer ...``, a JSON key naming a credential or a
    URL with a password or a signed query was shown as it was. It is shown with the
    credential (only) masked: every other piece byte for byte, whatever surrounds it."""
    written, shown = list(context), list(context)
    for (write, show), secret in plantings:
        at = data.draw(st.integers(0, len(written)))
        written.insert(at, write(secret))
        shown.insert(at, show())
    text = separator.join(written)
    assert masked_text(text) == separator.join(shown)
    # the same value, as an argument of a serve command line
    if not text.startswith("--"):  # else a flag of its own, whose value is the whole word after "="
        assert shown_args(["--override", text]) == ["--override", separator.join(shown)]
    assert masked_flag(f"--override={text}") == f"--override={separator.join(shown)}"


# JSON: keys that name no credential (close ones included), values of any kind
_JSON_KEYS = st.sampled_from(["kv_connector", "kv_role", "kv_connector_extra_config", "shared_storage_path",
                              "num_speculative_tokens", "tokenizer", "max_num_batched_tokens", "keyfile", "model"]) | _PLAIN
_JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _PLAIN
_JSON = st.recursive(_JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_JSON_KEYS, inner, max_size=3),
                     max_leaves=12)
_CREDENTIAL_KEYS = st.sampled_from(["api_key", "apiKey", "hf_token", "password", "client_secret", "access_key",
                                    "private_key", "aws_secret_access_key", "credentials", "auth", "Authorization",
                                    "X-Api-Key", "bearer_token"])


def _json_text(document, style):
    indent, compact, ascii_only, quoted = style
    text = json.dumps(document, indent=indent, separators=(",", ":") if compact else None, ensure_ascii=ascii_only)
    return f"'{text}'" if quoted else text


_STYLES = st.tuples(st.none() | st.integers(0, 2), st.booleans(), st.booleans(), st.booleans())


def _plant(document, key, value, path):
    """``document`` with ``key: value`` set in the object ``path`` (indices) leads to, or a
    new object holding it where the path ends at anything else."""
    if isinstance(document, dict):
        if path and document:
            child = sorted(document)[path[0] % len(document)]
            return {**document, child: _plant(document[child], key, value, path[1:])}
        return {**document, key: value}
    if isinstance(document, list) and path and document:
        at = path[0] % len(document)
        return [*document[:at], _plant(document[at], key, value, path[1:]), *document[at + 1:]]
    return {"kv_connector": "X", "extra": document, key: value}


def _masked_document(document, key, path):
    return _plant(document, key, MASK, path)


@given(document=_JSON, style=_STYLES, key=_CREDENTIAL_KEYS, secret=_SECRETS,
       shape=st.sampled_from(["string", "number", "object", "list"]), path=st.lists(st.integers(0, 5), max_size=4))
def test_a_credential_in_a_json_value_is_masked_and_other_json_kept_as_written(document, style, key, secret, shape, path):
    """``--kv-transfer-config '{"kv_connector": ..., "kv_connector_extra_config":
    {"api_key": "sk-..."}}'`` was shown whole. A JSON value (shell-quoted or not) is shown
    with the value under each key naming a credential masked, at any depth and of any kind;
    one without such a key is shown as it was written, its spacing and escapes included."""
    text = _json_text(document, style)
    assert masked_text(text) == text
    assert shown_args(["--kv-transfer-config", text]) == ["--kv-transfer-config", text]
    value = {"string": secret, "number": 12345, "object": {"user": "u", "pass": secret},
             "list": ["x", secret]}[shape]
    planted = _plant(document, key, value, path)
    text = _json_text(planted, style)
    shown = masked_text(text)
    assert secret not in shown
    assert json.loads(shown.strip("'")) == _masked_document(document, key, path)  # the number too
    for argument in (["--kv-transfer-config", text], [f"--kv-transfer-config={text}"]):
        assert secret not in "\n".join(shown_args(argument))
    # inside a command line (the JSON not the whole value): the credential is still masked
    command = f"vllm serve --kv-transfer-config {text} --port 8000"
    assert secret not in masked_text(command) and masked_text(command).endswith(" --port 8000")


@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
       | st.lists(_PLAIN | _NEAR_MISSES | st.sampled_from(['"', "'", ":", "=", " ", "{", "[", "\\\n", "Bearer ",
                                                            "--api-key", "HF_TOKEN", '"api_key"', "https://u:p@h/",
                                                            "?token=", "x://"]), max_size=12).map("".join),
       context=_CONTEXT, separator=_SEPARATORS, plantings=st.lists(_PLANTINGS, max_size=3))
def test_masking_what_is_shown_changes_nothing_more(text, context, separator, plantings):
    """What is shown, shown again, is the same: a mask is never itself taken for a value."""
    once = masked_text(text)
    assert masked_text(once) == once
    planted = separator.join([*context, *(write(secret) for (write, _), secret in plantings)])
    once = masked_text(planted)
    assert masked_text(once) == once
    for (_, _), secret in plantings:
        assert secret not in once


def test_a_table_s_strings_lists_and_urls_are_masked_inside():
    """An env table, a mods table, an entrypoint: a credential inside any string of them."""
    mods = {"commands": [{"command": "HF_TOKEN=Qhf huggingface-cli download x", "on_failure": "warn"},
                         {"command": "curl -fsS -H 'Authorization: Bearer Qbearer' https://host/x", "on_failure": "fail"}]}
    assert masked_value("mods", mods) == {"commands": [
        {"command": f"HF_TOKEN={MASK} huggingface-cli download x", "on_failure": "warn"},
        {"command": f"curl -fsS -H 'Authorization: {MASK}' https://host/x", "on_failure": "fail"}]}
    env = {"HF_ENDPOINT": "https://user:Qpass@mirror.example/hf", "NCCL_DEBUG": "WARN", "HF_TOKEN": "Qtok"}
    assert masked_value("env", env) == {"HF_ENDPOINT": f"https://{MASK}@mirror.example/hf", "NCCL_DEBUG": "WARN",
                                        "HF_TOKEN": MASK}
    assert masked_value("entrypoint", ["python", "-m", "x", "--api-key", "Qkey", "--port", "1"]) == [
        "python", "-m", "x", "--api-key", MASK, "--port", "1"]
    assert masked_args([("--model", "https://Qgh@github.com/o/r"), ("--api-key", "Qk")]) == [
        "--model", f"https://{MASK}@github.com/o/r", "--api-key", MASK]

"""Hash text forms: SRI, base16, nix32 (Nix's base-32), base64; the parser and converters.

Expected values come from Nix itself (`nix hash to-*`), from coreutils' sha256sum, or are
round-trip invariants over generated digests.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkflake.core import digest
from sparkflake.core.errors import InputError

pytestmark = pytest.mark.nix_sandbox  # needs Python and nix: also run by the flake check

NIX = ["nix", "--extra-experimental-features", "nix-command"]

algorithms = st.sampled_from(sorted(digest.HASH_SIZES))


@st.composite
def hashes(draw: st.DrawFn, algorithm: st.SearchStrategy[str] = algorithms) -> digest.Hash:
    name = draw(algorithm)
    return digest.Hash(
        name, draw(st.binary(min_size=digest.HASH_SIZES[name], max_size=digest.HASH_SIZES[name]))
    )


def nix_hash_to(form: str, text: str) -> str:
    return subprocess.run(
        [*NIX, "hash", f"to-{form}", text], check=True, capture_output=True, text=True
    ).stdout.strip()


# ---------------------------------------------------------------------------------------
# Known values


def test_sha256_of_nothing_in_every_form() -> None:
    empty = digest.Hash("sha256", hashlib.sha256(b"").digest())
    assert empty.base16 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    # the nix32 form Nix prints for it (`nix hash to-base32`), familiar from every
    # fixed-output derivation of an empty file
    assert empty.nix32 == "0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73"
    assert empty.sri == "sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    assert empty.prefixed("nix32") == "sha256:0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73"


def test_nix32_alphabet_and_bit_order() -> None:
    # Nix prints the lowest 5 bits of byte 0 as the LAST character.
    one = bytes([1]) + bytes(19)
    assert digest.nix32_encode(one) == "0" * 31 + "1"
    top = bytes(19) + bytes([0x80])
    # bit 159 is the top bit of the first 5-bit group (bits 155-159): value 16, 'h'
    assert digest.nix32_encode(top) == "h" + "0" * 31
    assert nix_hash_to("base32", "sha1:" + top.hex()) == "h" + "0" * 31
    assert digest.NIX32_ALPHABET == "0123456789abcdfghijklmnpqrsvwxyz"
    assert digest.nix32_length(32) == 52 and digest.nix32_length(64) == 103
    assert digest.nix32_length(20) == 32 and digest.nix32_length(16) == 26


@settings(max_examples=30)
@given(hashes())
def test_forms_equal_nix_own_conversions(value: digest.Hash) -> None:
    sri = value.sri
    assert nix_hash_to("base32", sri) == value.nix32
    assert nix_hash_to("base16", sri) == value.base16
    assert nix_hash_to("sri", value.prefixed("nix32")) == sri
    assert nix_hash_to("sri", value.prefixed("base16")) == sri


def test_file_hash_equals_sha256sum(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 9000)
    expected = subprocess.run(
        ["sha256sum", str(path)], check=True, capture_output=True, text=True
    ).stdout.split()[0]
    assert digest.sha256_file(path) == expected
    flat = digest.file_digest(path)
    assert flat.file_hash.base16 == expected and flat.size == 256 * 9000
    assert digest.file_hash(path, "sha512").base16 == hashlib.sha512(path.read_bytes()).hexdigest()
    # the flat file hash Nix computes
    flat_nix = subprocess.run(
        [*NIX, "hash", "file", str(path)], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert flat.file_hash.sri == flat_nix


# ---------------------------------------------------------------------------------------
# Round trips


@given(hashes())
def test_every_form_parses_back_to_the_same_hash(value: digest.Hash) -> None:
    assert digest.parse_hash(value.sri) == value
    for form in ("base16", "nix32", "base64"):
        assert digest.parse_hash(value.prefixed(form)) == value
        assert digest.parse_hash(value.format(form), value.algorithm) == value
    assert digest.parse_hash(value.base16.upper(), value.algorithm) == value


@given(hashes(), st.sampled_from(digest.HASH_FORMS), st.sampled_from(digest.HASH_FORMS))
def test_conversion_is_lossless_between_any_two_forms(
    value: digest.Hash, first: str, second: str
) -> None:
    via_first = digest.convert_hash(value.sri, first, value.algorithm)
    via_second = digest.convert_hash(via_first, second, value.algorithm)
    assert digest.convert_hash(via_second, "sri", value.algorithm) == value.sri


@given(st.binary(max_size=80))
def test_nix32_round_trip_for_any_length(raw: bytes) -> None:
    encoded = digest.nix32_encode(raw)
    assert set(encoded) <= set(digest.NIX32_ALPHABET)
    if raw:
        assert len(encoded) == digest.nix32_length(len(raw))
        assert digest.nix32_decode(encoded, len(raw)) == raw


@given(hashes())
def test_sri_is_standard_padded_base64(value: digest.Hash) -> None:
    algorithm, _, encoded = value.sri.partition("-")
    assert algorithm == value.algorithm
    assert base64.b64decode(encoded, validate=True) == value.digest


# ---------------------------------------------------------------------------------------
# The parser refuses with a message that says what was wrong


SHA256_HEX = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
SHA256_NIX32 = "0mdqa9w1p6cmli6976v4wi0sw9r4p5prkj7lzfd1877wk11c9c73"


@pytest.mark.parametrize(
    ("text", "algorithm", "says"),
    [
        ("", None, "empty hash"),
        (SHA256_HEX, None, "no algorithm"),
        ("md4:" + SHA256_HEX, None, "unknown hash algorithm 'md4'"),
        ("sha512:" + SHA256_HEX, None, "a sha512 digest is 128 base16, 103 nix32 or 88"),
        ("sha256:" + SHA256_HEX[:-1] + "g", None, "non-hex character 'g'"),
        ("sha256:" + SHA256_HEX[:-2], None, "got 62"),
        ("sha256:" + SHA256_NIX32[:-1] + "e", None, "'e' at position 51 is not in the nix32"),
        ("sha256:" + "z" * 52, None, "overflows a 32-byte digest"),
        ("sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU", None, "expected 44 base64"),
        ("sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFV=", None, "non-canonical base64"),
        ("sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSu!U=", None, "malformed base64"),
        ("sha1:" + "0" * 40, "sha256", "expected a sha256 hash, got sha1"),
        (" sha256:" + SHA256_HEX, None, "whitespace"),
        (SHA256_HEX, "whirlpool", "unknown hash algorithm 'whirlpool'"),
    ],
)
def test_malformed_hashes_are_named_precisely(text: str, algorithm: str | None, says: str) -> None:
    with pytest.raises(InputError) as refused:
        digest.parse_hash(text, algorithm, what="inputs[3].narHash")
    message = str(refused.value)
    assert message.startswith("inputs[3].narHash: ")
    assert says in message


def test_long_garbage_is_shown_truncated() -> None:
    with pytest.raises(InputError) as refused:
        digest.parse_hash("sha256:" + "x" * 10_000)
    assert len(str(refused.value)) < 400


@given(st.text(max_size=200), st.one_of(st.none(), algorithms))
def test_parser_fuzz_only_ever_raises_input_error(text: str, algorithm: str | None) -> None:
    try:
        parsed = digest.parse_hash(text, algorithm)
    except InputError as refused:
        assert str(refused)
    else:
        assert parsed.algorithm in digest.HASH_SIZES
        assert len(parsed.digest) == digest.HASH_SIZES[parsed.algorithm]


@given(hashes(), st.integers(0, 200), st.characters())
def test_parser_fuzz_near_valid_inputs(value: digest.Hash, position: int, char: str) -> None:
    """Single-character mutations of valid hashes: parsed to some hash or refused cleanly."""
    for text in (value.sri, value.prefixed("nix32"), value.prefixed("base16")):
        index = position % (len(text) + 1)
        for mutated in (
            text[:index] + char + text[index:],
            text[:index] + char + text[index + 1 :],
        ):
            try:
                parsed = digest.parse_hash(mutated)
            except InputError:
                continue
            assert parsed.sri == digest.parse_hash(parsed.sri).sri


def test_hash_value_refuses_wrong_sizes_and_forms() -> None:
    with pytest.raises(InputError, match="must be 32 bytes"):
        digest.Hash("sha256", b"\0" * 20)
    with pytest.raises(InputError, match="unknown hash form"):
        digest.Hash("sha1", b"\0" * 20).format("base58")
    with pytest.raises(InputError, match="unknown hash form"):
        digest.convert_hash("sha1:" + "0" * 40, "hex")


@given(st.binary(min_size=32, max_size=32), st.sampled_from(["", "\n", " ", "0", "A"]), st.booleans())
def test_a_sha256_hex_is_exactly_64_lowercase_hex_digits(raw, extra, prefix):
    """The bare sha256 form of locks, receipts and manifests: matched whole, so a trailing
    newline (which ``^…$`` with ``match`` lets through) or any other character is refused."""
    text = raw.hex()
    assert digest.is_sha256_hex(text)
    changed = extra + text if prefix else text + extra
    assert digest.is_sha256_hex(changed) is (extra == "")
    assert not digest.is_sha256_hex(text.upper()) or text == text.upper()
    assert not digest.is_sha256_hex(text.encode()) and not digest.is_sha256_hex(None)

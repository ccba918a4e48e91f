"""Cosign key files and the signed payloads: key files read and payloads written as cosign
2.x (Debian 13's package) writes them, cross-checked by running cosign (the key files these
tests write are ones cosign reads); malformed input refused with a named error, never a
traceback."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import nacl.secret
import nacl.utils
import pytest
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from hypothesis import given
from hypothesis import strategies as st

from sparkflake.cli import main as cli_main
from sparkflake.core.canonical_json import go_struct_json_bytes
from sparkflake.core.errors import CheckFailed, InputError
from sparkflake.signing import payloads
from sparkflake.signing.keys import (
    PrivateKey,
    PublicKey,
    decrypt_private_key,
    load_private_key,
    load_public_key,
    parse_public_key,
    pem_blocks,
)

COSIGN = "/usr/bin/cosign"
SMALL_N = 16  # scrypt cost for property tests (the reader takes what the file says)


def generate_private_key() -> PrivateKey:
    return PrivateKey(ec.generate_private_key(ec.SECP256R1()), "generated key")


def pem_encode(kind: str, der: bytes) -> bytes:
    body = base64.b64encode(der).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return ("\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----"]) + "\n").encode()


def public_pem(key: PublicKey) -> bytes:
    return key.key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def encrypt_private_key(key: PrivateKey, password: bytes, *, n: int = 65536, r: int = 8, p: int = 1) -> bytes:
    """The file ``cosign generate-key-pair`` would write for ``key`` (its scrypt parameters
    by default; random salt and nonce), written here independently of the reader."""
    salt = nacl.utils.random(32)
    nonce = nacl.utils.random(nacl.secret.SecretBox.NONCE_SIZE)
    secretbox_key = Scrypt(salt=salt, length=nacl.secret.SecretBox.KEY_SIZE, n=n, r=r, p=p).derive(password)
    plaintext = key.key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    document = {
        "kdf": {"name": "scrypt", "params": {"N": n, "r": r, "p": p}, "salt": base64.b64encode(salt).decode()},
        "cipher": {"name": "nacl/secretbox", "nonce": base64.b64encode(nonce).decode()},
        "ciphertext": base64.b64encode(nacl.secret.SecretBox(secretbox_key).encrypt(plaintext, nonce).ciphertext).decode(),
    }
    return pem_encode("ENCRYPTED SIGSTORE PRIVATE KEY", go_struct_json_bytes(document))


def cosign(*args: str, cwd: Path, password: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "COSIGN_PASSWORD": password}
    completed = subprocess.run([COSIGN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                               check=False)
    if check and completed.returncode != 0:
        pytest.fail(f"cosign {' '.join(args)} exited {completed.returncode}: {completed.stderr}")
    return completed


@pytest.fixture(scope="module")
def cosign_pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("cosign-keys")
    cosign("generate-key-pair", cwd=directory, password="correct horse")
    return directory


def test_reads_the_key_pair_cosign_generates(cosign_pair: Path) -> None:
    key = load_private_key(cosign_pair / "cosign.key", b"correct horse")
    public = load_public_key(cosign_pair / "cosign.pub")
    assert public_pem(key.public_key()) == public_pem(public)
    assert b"ENCRYPTED SIGSTORE PRIVATE KEY" in (cosign_pair / "cosign.key").read_bytes()
    message = b"payload"
    assert public.verify(key.sign(message), message)
    assert not public.verify(key.sign(message), b"other payload")


def test_cosign_reads_the_key_files_these_tests_write(tmp_path: Path) -> None:
    key = generate_private_key()
    (tmp_path / "ours.key").write_bytes(encrypt_private_key(key, b"s3cret"))
    shown = cosign("public-key", "--key", "ours.key", cwd=tmp_path, password="s3cret").stdout
    assert public_pem(parse_public_key(shown.encode(), "cosign public-key")) == public_pem(key.public_key())
    refused = cosign("public-key", "--key", "ours.key", cwd=tmp_path, password="wrong", check=False)
    assert refused.returncode != 0


@given(password=st.binary(max_size=40), n_log=st.integers(min_value=1, max_value=5))
def test_key_file_round_trip(password: bytes, n_log: int) -> None:
    key = generate_private_key()
    content = encrypt_private_key(key, password, n=2**n_log)
    again = decrypt_private_key(content, password, "key")
    assert public_pem(again.public_key()) == public_pem(key.public_key())
    with pytest.raises(CheckFailed) as refused:
        decrypt_private_key(content, password + b"x", "key")
    assert refused.value.check_id == "key.password"


_KEY_FILE = encrypt_private_key(generate_private_key(), b"pw", n=SMALL_N)


@given(st.data())
def test_a_damaged_key_file_is_refused_by_name(data: st.DataObject) -> None:
    content = bytearray(_KEY_FILE)
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=0, max_value=len(content) - 1))
        content[position] = data.draw(st.integers(min_value=0, max_value=255))
    try:
        decrypt_private_key(bytes(content), b"pw", "damaged.key")
    except (InputError, CheckFailed) as exc:
        assert "damaged.key" in exc.message
    # an unchanged byte (the draw may write the same value back) still decrypts


def _reencoded(mutate) -> bytes:  # noqa: ANN001 - a function over the key file's JSON
    (_, der), = pem_blocks(_KEY_FILE)
    document = json.loads(der)
    mutate(document)
    body = base64.b64encode(json.dumps(document).encode()).decode()
    return f"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n{body}\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n".encode()


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda d: d["kdf"].update(name="pbkdf2"), "kdf.name"),
        (lambda d: d["kdf"]["params"].update(N=3), "kdf.params.N"),
        (lambda d: d["kdf"]["params"].update(N=2**30), "kdf.params"),
        (lambda d: d["cipher"].update(name="aes"), "cipher.name"),
        (lambda d: d["cipher"].update(nonce="AAAA"), "cipher.nonce"),
        (lambda d: d.update(ciphertext="!!"), "ciphertext"),
    ],
)
def test_malformed_key_documents_name_the_field(mutate, named: str) -> None:  # noqa: ANN001
    with pytest.raises(InputError) as refused:
        decrypt_private_key(_reencoded(mutate), b"pw", "bad.key")
    assert named in refused.value.message and "bad.key" in refused.value.message


def test_not_a_key_file(tmp_path: Path) -> None:
    (tmp_path / "public.pem").write_bytes(public_pem(generate_private_key().public_key()))
    with pytest.raises(InputError, match="expected one PEM block -----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY"):
        load_private_key(tmp_path / "public.pem", b"pw")
    with pytest.raises(InputError, match="is a directory"):
        load_public_key(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="is a FIFO, expected a PEM public key"):
        load_public_key(tmp_path / "fifo")
    (tmp_path / "garbage.pub").write_bytes(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n")
    with pytest.raises(InputError, match="not a PKIX public key"):
        load_public_key(tmp_path / "garbage.pub")


def test_cli_wrong_password_and_malformed_key_are_one_line(tmp_path: Path, cosign_pair: Path, capsys,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSIGN_PASSWORD", "not it")
    # the key is read before the registry is contacted: nothing listens on port 9
    code = cli_main(["sign", "127.0.0.1:9/x:y", "--key", str(cosign_pair / "cosign.key"), "--insecure"])
    error = capsys.readouterr().err
    assert code == 1 and "[key.password]" in error and "Traceback" not in error and "cosign.key" in error
    (tmp_path / "bad.key").write_text("not a key\n")
    code = cli_main(["sign", "127.0.0.1:9/x:y", "--key", str(tmp_path / "bad.key"), "--insecure"])
    error = capsys.readouterr().err
    assert code == 2 and "bad.key" in error and "Traceback" not in error
    monkeypatch.delenv("COSIGN_PASSWORD")
    code = cli_main(["sign", "127.0.0.1:9/x:y", "--key", str(cosign_pair / "cosign.key"), "--insecure"])
    assert code == 2 and "COSIGN_PASSWORD is not set" in capsys.readouterr().err


# --- payloads -----------------------------------------------------------------------------

_DIGEST = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64).map(lambda h: f"sha256:{h}")


@given(reference=st.text(min_size=1, max_size=60), digest=_DIGEST)
def test_simple_signing_round_trip(reference: str, digest: str) -> None:
    parsed = payloads.parse_simple_signing(payloads.simple_signing_payload(reference, digest), "payload")
    assert (parsed.docker_reference, parsed.manifest_digest) == (reference, digest)


def test_simple_signing_is_cosigns_bytes() -> None:
    # the payload `cosign sign` 2.5.0 pushed for 127.0.0.1:5920/demo (read back from the registry)
    expected = (
        b'{"critical":{"identity":{"docker-reference":"127.0.0.1:5920/demo"},"image":{"docker-manifest-digest":'
        b'"sha256:11a3fbf14d79bd39ad5cb4c041fb81879a0cbc208c6724b8a20d2c16e3a6208d"},"type":"cosign container '
        b'image signature"},"optional":null}'
    )
    digest = "sha256:11a3fbf14d79bd39ad5cb4c041fb81879a0cbc208c6724b8a20d2c16e3a6208d"
    assert payloads.simple_signing_payload("127.0.0.1:5920/demo", digest) == expected


@pytest.mark.parametrize(("parse", "check_id"), [(payloads.parse_simple_signing, "signature.payload"),
                                                (payloads.parse_dsse, "attestation.envelope")])
@given(content=st.binary(max_size=300))
def test_payload_parsers_refuse_by_check(parse, check_id: str, content: bytes) -> None:  # noqa: ANN001
    try:
        parse(content, "payload")
    except CheckFailed as exc:
        assert exc.check_id == check_id


def test_pae_is_the_dsse_spec_vector() -> None:
    # github.com/secure-systems-lab/dsse protocol.md, "Test vectors"-style example
    assert payloads.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


@given(payload_type=st.text(max_size=40), payload=st.binary(max_size=200), signature=st.binary(min_size=1, max_size=80))
def test_dsse_envelope_round_trip(payload_type: str, payload: bytes, signature: bytes) -> None:
    envelope = payloads.parse_dsse(payloads.dsse_envelope(payload_type, payload, signature), "envelope")
    assert (envelope.payload_type, envelope.payload, envelope.signatures) == (payload_type, payload, (signature,))


def test_provenance_statement_refuses_a_receipt_of_another_image() -> None:
    receipt = {"predicateType": payloads.SLSA_PROVENANCE_V1, "predicate": {},
               "subject": [{"name": "x", "digest": {"sha256": "a" * 64}}]}
    statement = json.loads(payloads.provenance_statement(receipt, "reg/repo", f"sha256:{'a' * 64}", "r.json"))
    assert statement["subject"] == [{"name": "reg/repo", "digest": {"sha256": "a" * 64}}]
    with pytest.raises(CheckFailed) as refused:
        payloads.provenance_statement(receipt, "reg/repo", f"sha256:{'b' * 64}", "r.json")
    assert refused.value.check_id == "attestation.subject"


_CURVES = [ec.SECP256R1(), ec.SECP384R1(), ec.SECP521R1()]


def _spki(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _der(tag: int, body: bytes) -> bytes:
    length = len(body).to_bytes(2, "big").lstrip(b"\0")
    return bytes([tag]) + (length if len(body) < 0x80 else bytes([0x80 | len(length)]) + length) + body


def _compressed_spki(key: ec.EllipticCurvePublicKey) -> bytes:
    der = _spki(key)
    header = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    algorithm = der[header: header + 2 + der[header + 1]]
    point = key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint)
    return _der(0x30, algorithm + _der(0x03, b"\0" + point))


def _read_by_cryptography(der: bytes) -> tuple | str:
    try:
        key = serialization.load_der_public_key(der)
    except (ValueError, UnsupportedAlgorithm):
        return "refused"
    if not isinstance(key, ec.EllipticCurvePublicKey):
        return "not ECDSA"
    return key.curve.name, key.public_numbers().x, key.public_numbers().y


def _read_by_us(der: bytes) -> tuple | str:
    pem = pem_encode("PUBLIC KEY", der)
    try:
        key = parse_public_key(pem, "key.pub").key
    except InputError as error:
        return "not ECDSA" if "expected an ECDSA public key" in error.message else "refused"
    return key.curve.name, key.public_numbers().x, key.public_numbers().y


@given(curve=st.sampled_from(_CURVES), secret=st.integers(min_value=1, max_value=2**255),
       damage=st.one_of(st.none(), st.tuples(st.integers(min_value=0), st.integers(1, 255))),
       cut=st.one_of(st.none(), st.integers(min_value=0)), extra=st.binary(max_size=3),
       compressed=st.booleans())
def test_public_keys_read_as_cryptography_reads_them(curve, secret, damage, cut, extra, compressed) -> None:
    """Our reading of a cosign public key (a named-curve point, without cryptography's
    serialization package) gives the key cryptography gives, and refuses what it refuses,
    however the DER is damaged, cut or extended, or its point compressed."""
    key = ec.derive_private_key(secret, curve).public_key()
    der = _spki(key) if not compressed else _compressed_spki(key)
    if damage is not None:
        at = damage[0] % len(der)
        der = der[:at] + bytes([der[at] ^ damage[1]]) + der[at + 1:]
    if cut is not None:
        der = der[: cut % (len(der) + 1)]
    der += extra
    assert _read_by_us(der) == _read_by_cryptography(der)


def test_the_named_curve_prefixes_are_what_cryptography_writes() -> None:
    for curve in _CURVES:
        key = ec.generate_private_key(curve).public_key()
        assert _read_by_us(_spki(key)) == (curve.name, key.public_numbers().x, key.public_numbers().y)
    rsa_der = _spki(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key())
    assert _read_by_us(rsa_der) == "not ECDSA"


@pytest.mark.parametrize("body", [b'{"kdf": ' + b"9" * 5000 + b"}", b"[" * 100_000 + b"]" * 100_000,
                                  b'{"kdf": {}, "kdf": {}}', b'{"kdf": NaN}'])
def test_a_key_document_python_cannot_or_should_not_read_is_refused_by_name(body: bytes) -> None:
    """json.loads raised ValueError (an integer of over 4300 digits) or RecursionError here,
    which the key reader did not catch: a traceback; duplicate keys and NaN were taken."""
    pem = (b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n" + base64.b64encode(body)
           + b"\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    with pytest.raises(InputError) as refused:
        decrypt_private_key(pem, b"pw", "odd.key")
    assert refused.value.message.startswith("odd.key: the PEM block is not the JSON of an encrypted key: ")


@pytest.mark.parametrize(("n", "r"), [(65536, 1), (2**22, 1), (2**17, 1)])
def test_scrypt_parameters_openssl_refuses_are_named_not_a_memory_error(n: int, r: int) -> None:
    """OpenSSL refuses N >= 2^(16*r); cryptography raised that as MemoryError (a traceback
    in `sign`) for a key file whose N and r passed this reader's own bounds."""
    with pytest.raises(InputError, match=rf"bad\.key: kdf\.params: N={n} r={r}: scrypt needs N < 2\^\(16\*r\)"):
        decrypt_private_key(_reencoded(lambda d: d["kdf"]["params"].update(N=n, r=r)), b"pw", "bad.key")


def test_a_password_that_is_not_utf8_is_its_own_bytes(tmp_path: Path) -> None:
    """COSIGN_PASSWORD=$'\\xff' raised UnicodeEncodeError; cosign takes the variable's bytes."""
    from sparkflake.signing.keys import key_password

    assert key_password({"COSIGN_PASSWORD": b"pass\xff".decode("utf-8", "surrogateescape")}) == b"pass\xff"
    key = generate_private_key()
    (tmp_path / "odd.key").write_bytes(encrypt_private_key(key, b"pass\xff", n=SMALL_N))
    script = ("import os, sys; from sparkflake.signing.keys import key_password, load_private_key; "
              "load_private_key(sys.argv[1], key_password()); print('read')")
    env = {**{k: v for k, v in os.environ.items() if k != "COSIGN_PASSWORD"}}
    env_bytes = {k.encode(): v.encode("utf-8", "surrogateescape") for k, v in env.items()}
    env_bytes[b"COSIGN_PASSWORD"] = b"pass\xff"
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "odd.key")], env=env_bytes,
                          capture_output=True, check=False)
    assert done.returncode == 0 and done.stdout == b"read\n", done.stderr


def test_a_receipt_holding_a_lone_surrogate_is_refused_by_name() -> None:
    """JSON's \\ud800 escape reads as a lone surrogate, which the attestation's UTF-8 bytes
    cannot carry: UnicodeEncodeError out of `sign --receipt` before."""
    receipt = {"predicateType": payloads.SLSA_PROVENANCE_V1, "predicate": json.loads('{"zz": "\\ud800"}'),
               "subject": [{"name": "x", "digest": {"sha256": "a" * 64}}]}
    with pytest.raises(CheckFailed, match=r"r\.json: \$\.predicate: holds '\\ud800', a lone surrogate") as refused:
        payloads.provenance_statement(receipt, "reg/repo", f"sha256:{'a' * 64}", "r.json")
    assert refused.value.check_id == "attestation.receipt"

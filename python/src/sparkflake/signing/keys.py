"""Signing keys in the files cosign reads and writes.

A private key is PEM ``ENCRYPTED SIGSTORE PRIVATE KEY`` (cosign 2.x) or ``ENCRYPTED COSIGN
PRIVATE KEY`` (cosign 1.x) around a JSON document of go-securesystemslib's ``encrypted``
package, as ``cosign generate-key-pair`` writes it (checked against cosign 2.5.0's own file):

    {"kdf": {"name": "scrypt", "params": {"N": 65536, "r": 8, "p": 1}, "salt": "<base64>"},
     "cipher": {"name": "nacl/secretbox", "nonce": "<base64, 24 bytes>"},
     "ciphertext": "<base64>"}

The secretbox key is scrypt(password, salt, N, r, p, 32 bytes); the plaintext is the PKCS #8
DER of the private key. A public key is PEM ``PUBLIC KEY`` (PKIX). Keys are ECDSA (cosign's
default is P-256); signatures are ASN.1 DER ECDSA over SHA-256, as cosign makes them.
scrypt is cryptography's, secretbox (XSalsa20-Poly1305, which cryptography lacks) PyNaCl's.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from ..core.documents import parse_json, read_regular_file
from ..core.errors import CheckFailed, InputError

PRIVATE_PEM_TYPES = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
PUBLIC_PEM_TYPE = "PUBLIC KEY"
PASSWORD_VARIABLE = "COSIGN_PASSWORD"  # the variable cosign reads the key password from
KEY_FILE_LIMIT = 64 * 1024

# A key file says its scrypt parameters (cosign 2.5.0's generate-key-pair writes N=65536, r=8,
# p=1); they are taken within bounds that keep one derivation under a few hundred MiB and seconds.
_MAX_SCRYPT_MEMORY = 512 * 1024 * 1024  # 128 * N * r bytes

_PEM = re.compile(
    rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(?P<body>[A-Za-z0-9+/=\r\n]*?)-----END \1-----", re.S
)


@dataclass(frozen=True)
class PublicKey:
    key: ec.EllipticCurvePublicKey
    source: str

    def verify(self, signature: bytes, message: bytes) -> bool:
        try:
            self.key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class PrivateKey:
    key: ec.EllipticCurvePrivateKey
    source: str

    def sign(self, message: bytes) -> bytes:
        return self.key.sign(message, ec.ECDSA(hashes.SHA256()))

    def public_key(self) -> PublicKey:
        return PublicKey(self.key.public_key(), f"public key of {self.source}")


def pem_blocks(content: bytes) -> list[tuple[str, bytes]]:
    """(type, DER bytes) of each PEM block in ``content``."""
    blocks = []
    for match in _PEM.finditer(content):
        try:
            der = base64.b64decode(b"".join(match.group("body").split()), validate=True)
        except binascii.Error as exc:
            raise InputError(f"PEM block {match.group(1).decode()}: not base64: {exc}") from None
        blocks.append((match.group(1).decode(), der))
    return blocks


def _single_block(content: bytes, where: str, accepted: tuple[str, ...]) -> tuple[str, bytes]:
    try:
        blocks = pem_blocks(content)
    except InputError as exc:
        raise InputError(f"{where}: {exc.message}") from None
    wanted = [block for block in blocks if block[0] in accepted]
    if len(wanted) != 1:
        found = ", ".join(kind for kind, _ in blocks) or "none"
        expected = " or ".join(f"-----BEGIN {kind}-----" for kind in accepted)
        raise InputError(f"{where}: expected one PEM block {expected}; found {found}")
    return wanted[0]


def _b64_field(document: dict[str, Any], path: tuple[str, ...], where: str) -> bytes:
    value: object = document
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, str):
        raise InputError(f"{where}: {'.'.join(path)}: expected a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise InputError(f"{where}: {'.'.join(path)}: not base64") from None


def _scrypt_params(document: dict[str, Any], where: str) -> tuple[int, int, int]:
    kdf = document.get("kdf")
    if not isinstance(kdf, dict) or kdf.get("name") != "scrypt":
        raise InputError(f"{where}: kdf.name: expected \"scrypt\"")
    params = kdf.get("params")
    if not isinstance(params, dict):
        raise InputError(f"{where}: kdf.params: expected an object with N, r, p")
    values = []
    for name in ("N", "r", "p"):
        value = params.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{where}: kdf.params.{name}: expected a positive integer, got {value!r}")
        values.append(value)
    n, r, p = values
    if n & (n - 1) or n < 2:
        raise InputError(f"{where}: kdf.params.N: expected a power of two, got {n}")
    if 128 * n * r > _MAX_SCRYPT_MEMORY or p > 16:
        raise InputError(f"{where}: kdf.params: N={n} r={r} p={p} exceeds the bounds this reader accepts")
    # OpenSSL, which derives the key (cryptography's Scrypt), refuses N >= 2^(16*r) and
    # cryptography reports that as a MemoryError (providers/implementations/kdfs/scrypt.c,
    # scrypt_alg: "if (N >= (((uint64_t)1) << (16 * r)))" → EVP_R_MEMORY_LIMIT_EXCEEDED)
    if 16 * r <= 63 and n >= 1 << (16 * r):
        raise InputError(f"{where}: kdf.params: N={n} r={r}: scrypt needs N < 2^(16*r)")
    return n, r, p


# PyNaCl and scrypt are imported where a private key is read: `verify` needs
# neither, and importing them cost it ~6 ms (-X importtime; bench/results/sign-issue32-h32v.json).
def _secretbox_key(password: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    import nacl.secret
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    return Scrypt(salt=salt, length=nacl.secret.SecretBox.KEY_SIZE, n=n, r=r, p=p).derive(password)


def decrypt_private_key(content: bytes, password: bytes, where: str) -> PrivateKey:
    """The key of a cosign private key file's bytes; a wrong password is a CheckFailed
    (the file was read, its authentication tag did not match), anything malformed an InputError."""
    import nacl.exceptions
    import nacl.secret

    _, der = _single_block(content, where, PRIVATE_PEM_TYPES)
    try:
        document = parse_json(der, f"{where}: the PEM block")
    except InputError as exc:
        raise InputError(f"{where}: the PEM block is not the JSON of an encrypted key: {exc.message}") from None
    if not isinstance(document, dict):
        raise InputError(f"{where}: the PEM block is not a JSON object")
    n, r, p = _scrypt_params(document, where)
    cipher = document.get("cipher")
    if not isinstance(cipher, dict) or cipher.get("name") != "nacl/secretbox":
        raise InputError(f"{where}: cipher.name: expected \"nacl/secretbox\"")
    salt = _b64_field(document, ("kdf", "salt"), where)
    nonce = _b64_field(document, ("cipher", "nonce"), where)
    if len(nonce) != nacl.secret.SecretBox.NONCE_SIZE:
        raise InputError(f"{where}: cipher.nonce: expected {nacl.secret.SecretBox.NONCE_SIZE} bytes, got {len(nonce)}")
    ciphertext = _b64_field(document, ("ciphertext",), where)
    box = nacl.secret.SecretBox(_secretbox_key(password, salt, n, r, p))
    try:
        plaintext = box.decrypt(ciphertext, nonce)
    except nacl.exceptions.CryptoError:
        raise CheckFailed(
            f"{where}: the password does not decrypt this key (wrong {PASSWORD_VARIABLE}?)",
            check_id="key.password",
        ) from None
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_der_private_key(plaintext, password=None)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise InputError(f"{where}: the decrypted key is not a PKCS #8 private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise InputError(f"{where}: a {type(key).__name__} key; expected an ECDSA key (cosign generate-key-pair)")
    return PrivateKey(key, where)


# A SubjectPublicKeyInfo of an uncompressed point on a named curve (RFC 5480 2) is, in DER,
# a fixed prefix per curve and the point: such a key (cosign's) is read without
# cryptography's serialization package, whose import (the SSH key formats, their ciphers)
# cost `verify` ~8 ms (-X importtime; bench/results/sign-issue32-h32v.json). Any other DER is
# load_der_public_key's, which reads every form and refuses what is not a key.
_NAMED_CURVE_SPKI: dict[bytes, type[ec.SECP256R1 | ec.SECP384R1 | ec.SECP521R1]] = {
    bytes.fromhex("3059301306072a8648ce3d020106082a8648ce3d030107034200"): ec.SECP256R1,
    bytes.fromhex("3076301006072a8648ce3d020106052b81040022036200"): ec.SECP384R1,
    bytes.fromhex("30819b301006072a8648ce3d020106052b8104002303818600"): ec.SECP521R1,
}
_UNCOMPRESSED_POINT_BYTES: dict[type[ec.EllipticCurve], int] = {ec.SECP256R1: 65, ec.SECP384R1: 97, ec.SECP521R1: 133}


def _der_public_key(der: bytes) -> object:
    for prefix, curve in _NAMED_CURVE_SPKI.items():
        point = der[len(prefix):]
        if der.startswith(prefix) and len(point) == _UNCOMPRESSED_POINT_BYTES[curve] and point[0] == 4:
            return ec.EllipticCurvePublicKey.from_encoded_point(curve(), point)  # checks the point is on the curve
    from cryptography.hazmat.primitives import serialization

    return serialization.load_der_public_key(der)


def parse_public_key(content: bytes, where: str) -> PublicKey:
    _, der = _single_block(content, where, (PUBLIC_PEM_TYPE,))
    try:
        key = _der_public_key(der)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise InputError(f"{where}: not a PKIX public key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise InputError(f"{where}: a {type(key).__name__} key; expected an ECDSA public key")
    return PublicKey(key, where)


def load_public_key(path: str | os.PathLike[str]) -> PublicKey:
    shown = os.fspath(path)
    return parse_public_key(read_regular_file(path, "a PEM public key", KEY_FILE_LIMIT), shown)


def key_password(environ: dict[str, str] | os._Environ[str] | None = None) -> bytes:
    """The password from COSIGN_PASSWORD, as cosign takes it (an empty one is a password too)."""
    environ = os.environ if environ is None else environ
    value = environ.get(PASSWORD_VARIABLE)
    if value is None:
        raise InputError(f"{PASSWORD_VARIABLE} is not set: the private key's password is read from it")
    # the variable's own bytes, as cosign (Go) takes them: os.environ decoded them with
    # surrogateescape, so a byte that is not UTF-8 comes back as itself
    return value.encode("utf-8", "surrogateescape")


def load_private_key(path: str | os.PathLike[str], password: bytes) -> PrivateKey:
    shown = os.fspath(path)
    content = read_regular_file(path, "a cosign private key (PEM)", KEY_FILE_LIMIT)
    return decrypt_private_key(content, password, shown)

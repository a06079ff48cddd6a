"""Encrypted passwords in configs (`encrypted_password`), as the original's `pkg/encrypt`.

Layout: docs/formats.md#encrypted-passwords.

Layout of an encrypted text:

    base64( iv (16 bytes, random) | "@" (1 byte) | AES-CFB(key, iv, plaintext UTF-8) )

    - base64: standard alphabet with padding (Go's base64.StdEncoding).
    - AES-CFB: full-block CFB (segment size 128 bits, Go's cipher.NewCFBEncrypter), no padding, so the
      ciphertext is as long as the plaintext (`cryptography` >= 47 keeps CFB in its `decrepit` package).
      There is no MAC: a wrong key is noticed only when the result is not UTF-8 (short texts may decrypt
      to garbage that happens to be UTF-8).
    - key: `BINLOG_SECRET_KEY` in the environment, hex, 16/24/32 bytes (AES-128/192/256); when unset, a
      built-in default key.

**Differs from the original:** the built-in default key is our own (the reference does not record the
original's bytes), so a text the original encrypted with *its* default key does not decrypt here. Set the
same `BINLOG_SECRET_KEY` on both sides to move encrypted texts between them. The default key is published
in this file: it hides a password from a casual reader of the config, nothing more.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from typing import Final

from cryptography.hazmat.decrepit.ciphers.modes import CFB
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from common.errors import ConfigError

__all__ = [
    "DEFAULT_KEY",
    "KEY_ENV",
    "EncryptError",
    "decrypt",
    "decrypt_bytes",
    "encrypt",
    "encrypt_bytes",
    "secret_key",
]

KEY_ENV: Final = "BINLOG_SECRET_KEY"
KEY_SIZES: Final = (16, 24, 32)
IV_SIZE: Final = 16
"""The AES block size: CFB's iv is one block."""
SEPARATOR: Final = b"@"
DEFAULT_KEY: Final = bytes.fromhex("6f2d1c84b95e0a7d33c8e1f4a7025b96d4e80b1f6c39a5727e14d9b0c3f85a21")
"""Ours (32 bytes, AES-256); the original's default key differs (see the module docstring)."""


class EncryptError(ConfigError):
    """A bad secret key, or a text that is not an encrypted text under the key.

    A ConfigError because both come from configuration (`BINLOG_SECRET_KEY`, `encrypted_password`)."""


# ----------------------------------------------------------------------------------------------- keys


def check_key(key: bytes, where: str = "secret key") -> bytes:
    """`key` if AES can use it, else EncryptError naming `where` and the length."""
    if len(key) not in KEY_SIZES:
        raise EncryptError(f"{where} is {len(key)} bytes; AES needs 16, 24 or 32 bytes")
    return key


def secret_key(env: Mapping[str, str] | None = None) -> bytes:
    """The key from hex `BINLOG_SECRET_KEY` in `env` (default: os.environ), or DEFAULT_KEY when unset/empty."""
    raw = (os.environ if env is None else env).get(KEY_ENV, "").strip()
    if not raw:
        return DEFAULT_KEY
    try:
        key = bytes.fromhex(raw)
    except ValueError:
        raise EncryptError(f"{KEY_ENV} is not a hex string (expected 32, 48 or 64 hex digits)") from None
    return check_key(key, KEY_ENV)


def _key(key: bytes | None) -> bytes:
    return secret_key() if key is None else check_key(key)


# ----------------------------------------------------------------------------------------------- bytes


def _cipher(key: bytes, iv: bytes) -> Cipher[CFB]:
    return Cipher(algorithms.AES(key), CFB(iv))


def encrypt_bytes(plaintext: bytes, key: bytes, iv: bytes) -> bytes:
    """`iv | "@" | AES-CFB(plaintext)`: the pure core of `encrypt` (tests pass a fixed iv)."""
    check_key(key)
    if len(iv) != IV_SIZE:
        raise EncryptError(f"iv is {len(iv)} bytes, expected {IV_SIZE}")
    enc = _cipher(key, iv).encryptor()
    return iv + SEPARATOR + enc.update(plaintext) + enc.finalize()


def decrypt_bytes(data: bytes, key: bytes) -> bytes:
    """The plaintext of `iv | "@" | ciphertext`; EncryptError when the framing is wrong."""
    check_key(key)
    head = IV_SIZE + len(SEPARATOR)
    if len(data) < head:
        raise EncryptError(f"encrypted text is {len(data)} bytes, shorter than the {IV_SIZE}-byte iv and '@'")
    if data[IV_SIZE:head] != SEPARATOR:
        at = data.find(SEPARATOR)
        found = f"the first '@' is after {at} bytes" if at >= 0 else "there is no '@'"
        raise EncryptError(f"encrypted text has no '@' after a {IV_SIZE}-byte iv ({found})")
    dec = _cipher(key, data[:IV_SIZE]).decryptor()
    return dec.update(data[head:]) + dec.finalize()


# ----------------------------------------------------------------------------------------------- text


def encrypt(plaintext: str, key: bytes | None = None) -> str:
    """base64(iv | "@" | AES-CFB(plaintext)) with a random iv; `key` None: `secret_key()`."""
    return base64.b64encode(encrypt_bytes(plaintext.encode("utf-8"), _key(key), os.urandom(IV_SIZE))).decode("ascii")


def decrypt(text: str, key: bytes | None = None) -> str:
    """The plaintext of an `encrypt` result; EncryptError if it is not one (or the key is wrong)."""
    k = _key(key)
    try:
        data = base64.b64decode(text.strip().encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise EncryptError("encrypted text is not base64") from None
    plain = decrypt_bytes(data, k)
    try:
        return plain.decode("utf-8")
    except UnicodeDecodeError:
        raise EncryptError("encrypted text does not decrypt to UTF-8 text: wrong BINLOG_SECRET_KEY?") from None

"""Encrypted passwords in configs (`encrypted_password`), as the original's `pkg/encrypt`.

Layout: docs/formats.md#encrypted-passwords.

Layout of an encrypted text:

    base64( iv (16 bytes, random) | "@" (1 byte) | AES-CFB(key, iv, plaintext UTF-8) )

    - base64: standard alphabet with padding (Go's base64.StdEncoding).
    - AES-CFB: full-block CFB (segment size 128 bits, Go's cipher.NewCFBEncrypter), no padding, so the
      ciphertext is as long as the plaintext (`cryptography` >= 47 keeps CFB in its `decrepit` package).
      There is no MAC: a wrong key is noticed only when the result is not UTF-8 (short texts may decrypt
      to garbage that happens to be UTF-8).
    - key: `BINLOG_SECRET_KEY` in the environment, hex, 16/24/32 bytes (AES-128/192/256); when unset, the
      original's built-in default key (`DEFAULT_KEY`, AES-256), so an `encrypted_password` the original's
      `binlogctl -cmd encrypt` wrote decrypts here, and the other way round.

The default key is public (it is in the original's source and in this file): it hides a password from a
casual reader of the config, nothing more.  As the original, the first encryption or decryption with it
logs one WARNING per process (`DEFAULT_KEY_WARNING`) saying to set `BINLOG_SECRET_KEY` (one more when the
first went out before logging was set up: `_warn_default_key`).
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import threading
from collections.abc import Mapping
from typing import Final

from cryptography.hazmat.decrepit.ciphers.modes import CFB
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from common.errors import ConfigError

__all__ = [
    "DEFAULT_KEY",
    "DEFAULT_KEY_WARNING",
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
DEFAULT_KEY: Final = bytes.fromhex("a529b7665997f043a30ac8fadcb51d6aa032c226ab5b7750530b12b8c1a16a48")
"""The original's `defaultSecretKey` (pkg/encrypt; 32 bytes, AES-256): public, so not a secret."""
DEFAULT_KEY_WARNING: Final = (
    "encrypted_password: using the built-in default secret key, which is public and insecure; "
    f"set {KEY_ENV} (hex, 16/24/32 bytes) to a key of your own"
)

log = logging.getLogger(__name__)


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


_default_key_warned = threading.Event()


def _warn_default_key() -> None:
    """Once per process, as the original's sync.Once around its key set-up; but a warning given before
    logging is set up (a daemon decrypts while loading its config) reached only stderr, through Python's
    last-resort handler, so it is given again, once, into the configured log."""
    if _default_key_warned.is_set():
        return
    log.warning(DEFAULT_KEY_WARNING)
    if log.hasHandlers():
        _default_key_warned.set()


def _key(key: bytes | None) -> bytes:
    """`key`, else the environment's key; the default key is used with a warning (once)."""
    if key is not None:
        return check_key(key)
    found = secret_key()
    if found is DEFAULT_KEY:
        _warn_default_key()
    return found


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

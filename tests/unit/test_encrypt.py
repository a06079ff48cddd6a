"""common/encrypt.py: base64(iv | "@" | AES-CFB(plaintext)), keys from BINLOG_SECRET_KEY, clear errors."""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from common.encrypt import (
    DEFAULT_KEY,
    DEFAULT_KEY_WARNING,
    KEY_ENV,
    EncryptError,
    _default_key_warned,
    decrypt,
    decrypt_bytes,
    encrypt,
    encrypt_bytes,
    secret_key,
)
from common.errors import ConfigError

# NIST SP 800-38A, F.3.13 CFB128-AES128.Encrypt: the first two blocks
NIST_KEY = bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c")
NIST_IV = bytes.fromhex("000102030405060708090a0b0c0d0e0f")
NIST_PLAIN = bytes.fromhex("6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51")
NIST_CIPHER = bytes.fromhex("3b3fd92eb72dad20333449f8e83cfb4ac8a64537a0b3a93fcde3cdad9f1ce58b")
# "secret" under the NIST key and iv: base64 of iv | "@" | 239b04befc19 (also what `openssl enc -aes-128-cfb` gives)
GOLDEN_SECRET = "AAECAwQFBgcICQoLDA0OD0AjmwS+/Bk="

ROOT = Path(__file__).resolve().parents[2]
KEY_16 = bytes(range(16))
KEY_24 = bytes(range(24))
KEY_32 = bytes(range(32))


def test_layout_is_iv_at_sign_cfb128_ciphertext() -> None:
    data = encrypt_bytes(NIST_PLAIN, NIST_KEY, NIST_IV)
    assert data == NIST_IV + b"@" + NIST_CIPHER
    assert decrypt_bytes(data, NIST_KEY) == NIST_PLAIN


def test_golden_text_decrypts_and_a_partial_block_is_not_padded() -> None:
    assert decrypt(GOLDEN_SECRET, NIST_KEY) == "secret"
    assert base64.b64encode(encrypt_bytes(b"secret", NIST_KEY, NIST_IV)).decode() == GOLDEN_SECRET


@pytest.mark.parametrize("key", [KEY_16, KEY_24, KEY_32, None])
@pytest.mark.parametrize("text", ["", "p", "pässwörd 密码", "x" * 1000])
def test_round_trip(key: bytes | None, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    encrypted = encrypt(text, key)
    assert decrypt(encrypted, key) == text
    raw = base64.b64decode(encrypted, validate=True)
    assert raw[16:17] == b"@"
    assert len(raw) == 17 + len(text.encode())


def test_each_encryption_has_its_own_iv() -> None:
    a, b = encrypt("same", KEY_16), encrypt("same", KEY_16)
    assert a != b
    assert decrypt(a, KEY_16) == decrypt(b, KEY_16) == "same"


def test_key_comes_from_the_environment_else_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert secret_key() == DEFAULT_KEY
    assert len(DEFAULT_KEY) == 32
    with_default = encrypt("pw")
    assert decrypt(with_default, DEFAULT_KEY) == "pw"

    monkeypatch.setenv(KEY_ENV, KEY_24.hex().upper())
    assert secret_key() == KEY_24
    with_env = encrypt("pw")
    assert decrypt(with_env, KEY_24) == "pw"
    assert decrypt(with_env) == "pw"
    assert secret_key({KEY_ENV: "  "}) == DEFAULT_KEY  # empty means unset
    assert secret_key({KEY_ENV: KEY_16.hex()}) == KEY_16


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("zz" * 16, "BINLOG_SECRET_KEY is not a hex string"),
        ("abc", "BINLOG_SECRET_KEY is not a hex string"),
        ("00" * 10, "BINLOG_SECRET_KEY is 10 bytes; AES needs 16, 24 or 32 bytes"),
        ("00" * 33, "BINLOG_SECRET_KEY is 33 bytes"),
    ],
)
def test_bad_environment_key(value: str, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, value)
    with pytest.raises(EncryptError, match=message):
        encrypt("pw")
    with pytest.raises(EncryptError, match=message):
        decrypt(GOLDEN_SECRET)


@pytest.mark.parametrize("size", [0, 8, 15, 17, 31, 33])
def test_bad_explicit_key(size: int) -> None:
    with pytest.raises(EncryptError, match=f"secret key is {size} bytes"):
        encrypt("pw", bytes(size))
    with pytest.raises(EncryptError, match=f"secret key is {size} bytes"):
        decrypt(GOLDEN_SECRET, bytes(size))


def test_errors_are_config_errors() -> None:
    """A bad key or encrypted_password is a config problem: the config loaders' one-line exit applies."""
    assert issubclass(EncryptError, ConfigError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not base64!", "not base64"),
        ("QUJ", "not base64"),  # bad padding
        ("ümlaut", "not base64"),
        (base64.b64encode(b"short@").decode(), "6 bytes, shorter than the 16-byte iv and '@'"),
        (base64.b64encode(bytes(16) + b"#rest").decode(), r"no '@' after a 16-byte iv \(there is no '@'\)"),
        (base64.b64encode(bytes(8) + b"@" + bytes(12)).decode(), r"\(the first '@' is after 8 bytes\)"),
        (base64.b64encode(bytes(24) + b"@" + bytes(4)).decode(), "no '@' after a 16-byte iv"),
    ],
)
def test_text_that_is_not_an_encrypted_text(text: str, message: str) -> None:
    with pytest.raises(EncryptError, match=message):
        decrypt(text, KEY_16)


def test_wrong_key_is_noticed_when_the_result_is_not_utf8() -> None:
    text = base64.b64encode(encrypt_bytes(b"a longer database password", KEY_16, NIST_IV)).decode()
    assert decrypt(text, KEY_16) == "a longer database password"
    with pytest.raises(EncryptError, match="does not decrypt to UTF-8 text: wrong BINLOG_SECRET_KEY"):
        decrypt(text, KEY_32)


def test_bad_iv_size_when_encrypting() -> None:
    with pytest.raises(EncryptError, match="iv is 8 bytes, expected 16"):
        encrypt_bytes(b"x", KEY_16, bytes(8))


def test_surrounding_whitespace_is_ignored() -> None:
    """A value pasted into a TOML file often carries a newline."""
    assert decrypt(f"  {GOLDEN_SECRET}\n", NIST_KEY) == "secret"


# ------------------------------------------------------------------------------ the original's default key

ORIGINAL_DEFAULT_KEY_HEX = "a529b7665997f043a30ac8fadcb51d6aa032c226ab5b7750530b12b8c1a16a48"
"""pkg/encrypt defaultSecretKey of the original, copied from its source independently of DEFAULT_KEY."""


def _original_cipher(key: bytes, iv: bytes) -> Any:
    """AES in Go's cipher.NewCFBEncrypter mode (CFB128), from the `cryptography` primitives directly."""
    from cryptography.hazmat.decrepit.ciphers.modes import CFB
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    return Cipher(algorithms.AES(key), CFB(iv))


def _original_encrypt(plaintext: bytes, key: bytes) -> str:
    """What the original's Encrypt does (random iv, base64 of iv | "@" | ciphertext), not our encrypt_bytes."""
    iv = os.urandom(16)
    enc = _original_cipher(key, iv).encryptor()
    return base64.b64encode(iv + b"@" + enc.update(plaintext) + enc.finalize()).decode("ascii")


def test_a_text_encrypted_with_the_originals_default_key_decrypts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    key = bytes.fromhex(ORIGINAL_DEFAULT_KEY_HEX)
    for plain in ("secret", "a much longer downstream password, 密码"):
        assert decrypt(_original_encrypt(plain.encode(), key)) == plain
    # and ours decrypts with the original's key, as the original's Decrypt does
    ours = base64.b64decode(encrypt("pw"))
    assert ours[16:17] == b"@"
    dec = _original_cipher(key, ours[:16]).decryptor()
    assert dec.update(ours[17:]) + dec.finalize() == b"pw"


def test_the_default_key_is_warned_about_once_per_process(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    _default_key_warned.clear()  # a fresh "process"
    text = _original_encrypt(b"pw", bytes.fromhex(ORIGINAL_DEFAULT_KEY_HEX))
    with caplog.at_level(logging.WARNING, logger="common.encrypt"):
        assert decrypt(text) == "pw"
        assert decrypt(text) == "pw"
        encrypt("again")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [DEFAULT_KEY_WARNING]
    assert "set BINLOG_SECRET_KEY" in DEFAULT_KEY_WARNING


def test_no_warning_with_a_key_of_ones_own(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    _default_key_warned.clear()
    monkeypatch.setenv(KEY_ENV, KEY_16.hex())
    with caplog.at_level(logging.WARNING, logger="common.encrypt"):
        assert decrypt(encrypt("pw")) == "pw"
        assert decrypt(encrypt("pw", KEY_32), KEY_32) == "pw"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_warning_given_before_logging_is_set_up_is_given_again_into_the_log(tmp_path: Path) -> None:
    """A daemon decrypts while loading its config, before its log exists: stderr gets the line from Python's
    last-resort handler, and the configured log gets it once more, then never again."""
    log_file = tmp_path / "daemon.log"
    script = (
        "import logging\n"
        "from common.encrypt import decrypt, encrypt\n"
        "text = encrypt('pw')\n"  # config load: no logging yet
        f"logging.basicConfig(filename={str(log_file)!r}, level=logging.INFO, format='%(message)s')\n"
        "assert decrypt(text) == 'pw' and decrypt(text) == 'pw'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [DEFAULT_KEY_WARNING]
    assert log_file.read_text().splitlines() == [DEFAULT_KEY_WARNING]

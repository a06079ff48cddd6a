"""TLS to MySQL: the security tables of the drainer, its checkpoint, reparo and the arbiter (common/mysql_tls.py).

Connections themselves are tested against a TLS-only mariadbd in tests/functional/test_mysql_tls.py."""

from __future__ import annotations

import ssl
from pathlib import Path

import pymysql
import pytest

from arbiter.config import load_config as load_arbiter
from common.errors import ConfigError
from common.mysql_tls import SSL_CONNECTION_ERROR, MySQLSecurity, MySQLTLS, explain
from drainer.config import load_config as load_drainer
from tests.harness.certs import PKI, make_pki
from tools.reparo.config import load_config as load_reparo

SECTION = "[syncer.to.security]"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_no_ssl_ca_is_plaintext_and_pymysqls_unverified_tls_is_off() -> None:
    tls = MySQLSecurity().load(SECTION)
    assert not tls.enabled
    assert tls.connect_args() == {"ssl_disabled": True}


def test_ssl_ca_is_verified_tls_with_the_host_name_checked(pki: PKI) -> None:
    tls = MySQLSecurity(ssl_ca=str(pki.ca)).load(SECTION)
    assert tls.enabled
    assert tls.ca == str(pki.ca)
    ctx = tls.connect_args()["ssl"]
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname is True
    assert ctx.minimum_version >= ssl.TLSVersion.TLSv1_2


def test_a_client_certificate_with_its_key(pki: PKI) -> None:
    sec = MySQLSecurity(ssl_ca=str(pki.ca), ssl_cert=str(pki.client.cert), ssl_key=str(pki.client.key))
    assert sec.load(SECTION).enabled


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"ssl_cert": "client"},
            r"\[syncer.to.security\] ssl-cert is set but \[syncer.to.security\] ssl-key is not: give both",
        ),
        (
            {"ssl_key": "client"},
            r"\[syncer.to.security\] ssl-key is set but \[syncer.to.security\] ssl-cert is not: give both",
        ),
    ],
)
def test_half_a_client_pair_is_an_error_naming_both_keys(pki: PKI, given: dict[str, str], message: str) -> None:
    cert = str(pki.client.cert) if "ssl_cert" in given else ""
    key = str(pki.client.key) if "ssl_key" in given else ""
    with pytest.raises(ConfigError, match=message):
        MySQLSecurity(ssl_ca=str(pki.ca), ssl_cert=cert, ssl_key=key).load(SECTION)


def test_a_client_pair_without_ssl_ca_is_an_error(pki: PKI) -> None:
    sec = MySQLSecurity(ssl_cert=str(pki.client.cert), ssl_key=str(pki.client.key))
    with pytest.raises(ConfigError, match=r"\[syncer.to.security\] ssl-cert is set but \[syncer.to.security\] ssl-ca"):
        sec.load(SECTION)


def test_unusable_files_name_the_key_and_the_path(pki: PKI, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError, match=rf"\[dest-db.security\] ssl-ca: cannot read '{missing}'"):
        MySQLSecurity(ssl_ca=str(missing)).load("[dest-db.security]")
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(ConfigError, match=rf"\[down.security\] ssl-ca: '{junk}' holds no PEM certificate"):
        MySQLSecurity(ssl_ca=str(junk)).load("[down.security]")
    wrong_key = MySQLSecurity(ssl_ca=str(pki.ca), ssl_cert=str(pki.client.cert), ssl_key=str(pki.server.key))
    with pytest.raises(ConfigError, match=r"ssl-key: the key in .* does not belong to the certificate"):
        wrong_key.load(SECTION)


def test_cert_allowed_cn_needs_ssl_ca_and_makes_a_checking_context(pki: PKI) -> None:
    assert not MySQLSecurity(cert_allowed_cn=()).load(SECTION).enabled
    with pytest.raises(ConfigError, match=r"\[syncer.to.security\] cert-allowed-cn is set but .*ssl-ca is not"):
        MySQLSecurity(cert_allowed_cn=("x",)).load(SECTION)
    tls = MySQLSecurity(ssl_ca=str(pki.ca), cert_allowed_cn=(" x ", "y")).load(SECTION)
    assert tls.context is not None
    assert getattr(tls.context, "allowed_cn", None) == frozenset({"x", "y"})
    assert tls.context.check_hostname
    assert tls.context.verify_mode == ssl.CERT_REQUIRED


def test_a_plaintext_refusal_gets_the_hint_to_set_ssl_ca() -> None:
    refused = pymysql.err.OperationalError(1045, "Access denied for user 'root'@'localhost' (using password: NO)")
    better = explain(refused, MySQLTLS(SECTION), "127.0.0.1:3307")
    assert better.args[0] == 1045
    assert better.args[1].startswith("Access denied for user")
    assert "set [syncer.to.security] ssl-ca" in better.args[1]
    other = pymysql.err.OperationalError(1049, "Unknown database 'x'")
    assert explain(other, MySQLTLS(SECTION), "h:1") is other


def test_a_handshake_failure_names_the_reason_and_the_ca(pki: PKI) -> None:
    tls = MySQLSecurity(ssl_ca=str(pki.ca)).load(SECTION)
    failed = pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1' ([SSL] ...)")
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    cause.verify_message = "self-signed certificate in certificate chain"
    failed.original_exception = cause  # type: ignore[attr-defined]  # as pymysql sets it
    better = explain(failed, tls, "127.0.0.1:3307")
    assert better.args == (
        SSL_CONNECTION_ERROR,
        "127.0.0.1:3307: TLS handshake failed: certificate verify failed: self-signed certificate in certificate "
        f"chain ([syncer.to.security] ssl-ca = {pki.ca})",
    )
    no_tls = pymysql.err.OperationalError(SSL_CONNECTION_ERROR, "SSL is required but the server doesn't support it")
    assert "the server does not offer TLS" in explain(no_tls, tls, "h:1").args[1]


# ---------------------------------------------------------------------------------------------- the keys


def _toml(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_drainer_security_tables_and_the_checkpoint_inheriting_the_downstreams(pki: PKI, tmp_path: Path) -> None:
    f = _toml(tmp_path, "drainer.toml", f'[syncer.to.security]\nssl-ca = "{pki.ca}"\n')
    cfg = load_drainer(f, env={})
    cfg.check_supported()
    assert cfg.syncer.to.security.ssl_ca == str(pki.ca)
    assert cfg.to_tls().ca == str(pki.ca)
    assert cfg.checkpoint_tls().ca == str(pki.ca)  # no checkpoint type: the downstream's connection and TLS
    assert cfg.ignored_keys() == []


def test_drainer_checkpoint_with_its_own_type_uses_its_own_security(pki: PKI, tmp_path: Path) -> None:
    f = _toml(
        tmp_path,
        "drainer.toml",
        f'[syncer.to.security]\nssl-ca = "{pki.ca}"\n[syncer.to.checkpoint]\ntype = "mysql"\nhost = "10.0.0.9"\n',
    )
    cfg = load_drainer(f, env={})
    assert cfg.to_tls().enabled
    assert not cfg.checkpoint_tls().enabled
    f.write_text(f'[syncer.to.checkpoint]\ntype = "mysql"\n[syncer.to.checkpoint.security]\nssl-ca = "{pki.ca}"\n')
    cfg = load_drainer(f, env={})
    assert not cfg.to_tls().enabled
    assert cfg.checkpoint_tls().ca == str(pki.ca)


def test_drainer_unusable_security_fails_in_check_supported(tmp_path: Path) -> None:
    f = _toml(
        tmp_path,
        "drainer.toml",
        '[syncer.to.checkpoint]\ntype = "tidb"\n[syncer.to.checkpoint.security]\nssl-ca = "/no/ca.pem"\n',
    )
    with pytest.raises(ConfigError, match=r"\[syncer.to.checkpoint.security\] ssl-ca: cannot read '/no/ca.pem'"):
        load_drainer(f, env={}).check_supported()
    f.write_text('[syncer.to.security]\nssl-cert = "/c.pem"\nssl-key = "/k.pem"\n')
    with pytest.raises(ConfigError, match=r"\[syncer.to.security\] ssl-cert is set but \[syncer.to.security\] ssl-ca"):
        load_drainer(f, env={}).check_supported()


def test_drainer_security_that_is_not_read_is_listed_as_ignored(pki: PKI, tmp_path: Path) -> None:
    f = _toml(
        tmp_path,
        "drainer.toml",
        f'[syncer]\ndb-type = "file"\n[syncer.to.security]\nssl-ca = "{pki.ca}"\n'
        f'[syncer.to.checkpoint.security]\nssl-ca = "{pki.ca}"\n',
    )
    ignored = load_drainer(f, env={}).ignored_keys()
    assert "config key 'syncer.to.security' is ignored (only db-type mysql and tidb read it)" in ignored
    assert any(
        line.startswith("config key 'syncer.to.checkpoint.security' is ignored (read only with") for line in ignored
    )


def test_drainer_unknown_key_in_a_security_table_is_refused(tmp_path: Path) -> None:
    f = _toml(tmp_path, "drainer.toml", '[syncer.to.security]\nssl-capath = "/x"\n')
    with pytest.raises(ConfigError, match="ssl-capath"):
        load_drainer(f, env={})


def test_reparo_dest_db_security(pki: PKI, tmp_path: Path) -> None:
    f = _toml(
        tmp_path, "reparo.toml", f'data-dir = "/d"\ndest-type = "mysql"\n[dest-db.security]\nssl-ca = "{pki.ca}"\n'
    )
    assert load_reparo(f).dest_tls().ca == str(pki.ca)
    f.write_text(f'data-dir = "/d"\n[dest-db.security]\nssl-ca = "{pki.ca}"\nssl-key = "/k.pem"\n')
    with pytest.raises(ConfigError, match=r"\[dest-db.security\] ssl-key is set but \[dest-db.security\] ssl-cert"):
        load_reparo(f).dest_tls()


def test_arbiter_down_security(pki: PKI, tmp_path: Path) -> None:
    f = _toml(tmp_path, "arbiter.toml", f'[up]\ntopic = "t"\n[down.security]\nssl-ca = "{pki.ca}"\n')
    cfg = load_arbiter(f)
    cfg.check_supported()
    assert cfg.down_tls().ca == str(pki.ca)
    f.write_text('[up]\ntopic = "t"\n[down.security]\nssl-ca = "/no/ca.pem"\n')
    with pytest.raises(ConfigError, match=r"\[down.security\] ssl-ca: cannot read '/no/ca.pem'"):
        load_arbiter(f).check_supported()

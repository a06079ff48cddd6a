"""TLS to MySQL downstreams against a TLS-only mariadbd (`require_secure_transport=ON`, generated certificates).

One private server for the module (tests/harness/mysql.py PrivateMariaDB with ServerTLS).  The drainer with
`[syncer.to.security] ssl-ca` = the right CA replicates and keeps its checkpoint there; with another CA, or
with no security table, it exits non-zero with one line saying why.  reparo (`[dest-db.security]`) applies
pb files into it, and the arbiter (`[down.security]`) creates its checkpoint table in it (the arbiter
connects MySQL before Kafka; no broker is needed to see that).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pymysql
import pytest

from common.mysql_tls import SSL_CONNECTION_ERROR, MySQLSecurity
from tests.functional.arbiterutil import ArbiterProcess
from tests.functional.audit import audit_mysql
from tests.functional.drainerutil import Cluster, distinct_ports, unique_name
from tests.functional.test_reparo import _files, _state, applied
from tests.harness.certs import PKI, make_pki
from tests.harness.mysql import MySQLDSN, PrivateMariaDB, ServerTLS
from tests.harness.tcpproxy import TcpProxy
from tools.localcluster import DrainerProcess
from tools.procs import ManagedProcess, free_port, wait_for
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

pytestmark = pytest.mark.functional

EXIT_WAIT = 60.0
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class TLSServer:
    dsn: MySQLDSN
    """Carries ssl_ca: the test's own connections verify the server too."""
    pki: PKI

    @property
    def wrong_ca(self) -> Path:
        return self.pki.ca.parent / "other-ca.pem"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSServer]:
    pki = make_pki(tmp_path_factory.mktemp("mysql-pki"))
    server = PrivateMariaDB(ServerTLS(pki.ca, pki.server.cert, pki.server.key))
    try:
        dsn = server.start()
    except (RuntimeError, OSError, subprocess.CalledProcessError, TimeoutError) as exc:
        server.stop()
        pytest.skip(f"cannot start a private TLS mariadbd: {exc}")
    try:
        yield TLSServer(dsn, pki)
    finally:
        server.stop()


@pytest.fixture
def cluster(tmp_path: Path, tls_server: TLSServer, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path, tls_server.dsn, pumps=1)  # type: ignore[arg-type]  # the harness DSN has the same fields
    yield c
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(c.logs())
    c.close()


def exit_line(proc: ManagedProcess) -> tuple[int | None, str]:
    """(exit status, the log's last non-empty line) of a process that exits by itself."""
    wait_for(lambda: not proc.alive, EXIT_WAIT, f"{proc.name} exits")
    status = proc.stop()
    lines = [line for line in proc.log_since_start().splitlines() if line.strip()]
    return status, lines[-1] if lines else ""


def failing_drainer(cluster: Cluster, *extra: str) -> DrainerProcess:
    """A drainer started without waiting for it to be ready (it is expected to exit)."""
    d = cluster.drainer(*extra, name=unique_name("d"), start=False)
    d.process.start()
    return d


# ------------------------------------------------------------------------------------------------ drainer


def test_drainer_with_the_right_ca_replicates_and_keeps_its_checkpoint_there(
    cluster: Cluster, tls_server: TLSServer
) -> None:
    drainer = cluster.drainer("--syncer.to.security.ssl-ca", str(tls_server.pki.ca), "--syncer.worker-count", "4")
    db = cluster.writer()
    sb = make_workload("sysbench", WorkloadOptions(database=cluster.dbname("tls"), tables=2, table_size=50))
    sb.setup(db)
    result = run(db, sb, threads=2, seed=5, txns=60)
    assert result.crashed == [], result.summary()
    cluster.wait_applied(drainer, cluster.now())
    conn = cluster.mysql_conn()
    try:
        assert audit_mysql(db, conn) == []
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")  # the test's own session: TLS or refused
            row = cur.fetchone()
            assert row is not None
            assert row[1].startswith("TLSv1.")
    finally:
        conn.close()
    cp = cluster.checkpoint_row()  # in the TLS-only server: no checkpoint could be saved there without TLS
    assert cp is not None
    assert cp["commitTS"] > 0
    assert drainer.stop() == 0


def test_drainer_with_a_wrong_ca_exits_with_one_line(cluster: Cluster, tls_server: TLSServer) -> None:
    d = failing_drainer(cluster, "--syncer.to.security.ssl-ca", str(tls_server.wrong_ca))
    status, last = exit_line(d.process)
    assert status not in (0, None)
    assert "TLS handshake failed: certificate verify failed" in last, last
    assert f"([syncer.to.security] ssl-ca = {tls_server.wrong_ca})" in last, last
    assert "Traceback" not in d.process.log_since_start()


def test_drainer_without_tls_exits_with_the_servers_refusal_and_the_hint(cluster: Cluster) -> None:
    d = failing_drainer(cluster)
    status, last = exit_line(d.process)
    assert status not in (0, None)
    assert "Access denied for user 'root'" in last, last
    assert "set [syncer.to.security] ssl-ca" in last, last
    assert "Traceback" not in d.process.log_since_start()


def test_drainer_with_a_missing_ca_file_is_a_config_error(cluster: Cluster, tmp_path: Path) -> None:
    missing = tmp_path / "no-ca.pem"
    d = failing_drainer(cluster, "--syncer.to.security.ssl-ca", str(missing))
    status, last = exit_line(d.process)
    assert status == 2
    assert f"[syncer.to.security] ssl-ca: cannot read '{missing}'" in last, last


# ------------------------------------------------------------------------------------------------- reparo


def run_reparo(tmp: Path, dsn: MySQLDSN, name: str, security: str = "") -> subprocess.CompletedProcess[str]:
    """`python -m tools.reparo` replaying tmp/pb into `dsn`, with `security` as the [dest-db.security] body."""
    path = tmp / name
    path.write_text(
        f'data-dir = "{tmp / "pb"}"\nlog-level = "warn"\ndest-type = "mysql"\n'
        f'[dest-db]\nhost = "{dsn.host}"\nport = {dsn.port}\nuser = "{dsn.user}"\n'
        + (f"[dest-db.security]\n{security}\n" if security else "")
    )
    return subprocess.run(
        [sys.executable, "-m", "tools.reparo", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_reparo_applies_over_tls(tls_server: TLSServer, tmp_path: Path) -> None:
    dsn = tls_server.dsn
    db = unique_name("rtls")
    conn = dsn.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"CREATE TABLE `{db}`.`t` (id INT PRIMARY KEY, v VARCHAR(10))")
            cur.execute(f"INSERT INTO `{db}`.`t` VALUES (1, 'old')")
    finally:
        conn.close()
    try:
        _files(tmp_path / "pb", db)
        refused = run_reparo(tmp_path, dsn, "plain.toml")
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert "set [dest-db.security] ssl-ca" in refused.stderr
        refused = run_reparo(tmp_path, dsn, "wrong.toml", f'ssl-ca = "{tls_server.wrong_ca}"')
        assert refused.returncode == 1
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert "TLS handshake failed: certificate verify failed" in refused.stderr
        assert _state(dsn, db) == ([("t",)], [(1, "old")])

        proc = run_reparo(tmp_path, dsn, "tls.toml", f'ssl-ca = "{tls_server.pki.ca}"')
        assert applied(proc) == 2
        assert _state(dsn, db) == ([("t",), ("u",)], [(1, "old"), (2, "new")])
    finally:
        conn = dsn.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        finally:
            conn.close()


# ------------------------------------------------------------------------------------------------ arbiter


def _arbiter(tmp_path: Path, tls_server: TLSServer, schema: str, *extra: str) -> ArbiterProcess:
    (dead_port,) = distinct_ports(1)  # no broker: the arbiter connects MySQL first, then fails on Kafka
    return ArbiterProcess(
        tmp_path, f"127.0.0.1:{dead_port}", tls_server.dsn, f"{schema}_obinlog", schema, "--up.connect-timeout", "2s",
        *extra,
    )  # fmt: skip


def test_arbiter_connects_over_tls(tls_server: TLSServer, tmp_path: Path) -> None:
    schema = unique_name("atls")
    try:
        arb = _arbiter(tmp_path, tls_server, schema, "--down.security.ssl-ca", str(tls_server.pki.ca)).start(
            ready=False
        )
        status, last = exit_line(arb.process)
        assert status == 1
        assert "TLS" not in last, last  # it got past MySQL, to Kafka
        assert "Access denied" not in last, last
        conn = tls_server.dsn.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SHOW TABLES FROM `{schema}` LIKE 'arbiter_checkpoint'")
                assert cur.fetchone() is not None  # created over TLS
        finally:
            conn.close()

        wrong = _arbiter(tmp_path, tls_server, schema, "--down.security.ssl-ca", str(tls_server.wrong_ca))
        status, last = exit_line(wrong.start(ready=False).process)
        assert status == 1
        assert "TLS handshake failed: certificate verify failed" in last, last
        assert f"([down.security] ssl-ca = {tls_server.wrong_ca})" in last, last
    finally:
        conn = tls_server.dsn.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{schema}`")
        finally:
            conn.close()


# ----------------------------------------------------------------------------------------------- server name


def test_the_server_name_is_verified_against_the_dialled_host(tls_server: TLSServer) -> None:
    """The certificate is valid for 127.0.0.1 and localhost; the same server dialled as 127.0.0.2 (a proxy on
    another loopback address) is refused, as go-sql-driver refuses it (ServerName = the dialled host)."""
    tls = MySQLSecurity(ssl_ca=str(tls_server.pki.ca)).load("[syncer.to.security]")
    port = free_port()
    proxy = TcpProxy("127.0.0.2", port, "127.0.0.1", tls_server.dsn.port)
    proxy.start()
    try:
        with pytest.raises(pymysql.err.OperationalError) as caught:
            tls.connect(host="127.0.0.2", port=port, user="root", connect_timeout=5)
        assert caught.value.args[0] == SSL_CONNECTION_ERROR
        assert (
            "certificate verify failed: IP address mismatch, certificate is not valid for '127.0.0.2'"
            in caught.value.args[1]
        )
        for host in ("127.0.0.1", "localhost"):
            conn = tls.connect(host=host, port=tls_server.dsn.port, user="root", connect_timeout=5)
            try:
                with conn.cursor() as cur:
                    cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
                    row = cur.fetchone()
                assert row is not None
                assert row[1].startswith("TLSv1.")
            finally:
                conn.close()
    finally:
        proxy.close()


def test_cert_allowed_cn_checks_the_servers_certificate(tls_server: TLSServer) -> None:
    """cert-allowed-cn, as the original's chain check: the server certificate's CN (binlog-server) or its
    issuer's passes; any other list fails the handshake in one line."""
    for allowed in (("binlog-server",), ("other", "tidb-binlog test ca")):
        tls = MySQLSecurity(ssl_ca=str(tls_server.pki.ca), cert_allowed_cn=allowed).load("[syncer.to.security]")
        conn = tls.connect(host="127.0.0.1", port=tls_server.dsn.port, user="root", connect_timeout=5)
        conn.close()
    tls = MySQLSecurity(ssl_ca=str(tls_server.pki.ca), cert_allowed_cn=("binlog",)).load("[syncer.to.security]")
    with pytest.raises(pymysql.err.OperationalError) as caught:
        tls.connect(host="127.0.0.1", port=tls_server.dsn.port, user="root", connect_timeout=5)
    assert caught.value.args[0] == SSL_CONNECTION_ERROR
    assert caught.value.args[1] == (
        f"127.0.0.1:{tls_server.dsn.port}: TLS handshake failed: certificate verify failed: the server "
        "certificate's common name 'binlog-server' (issuer 'tidb-binlog test ca') is not in cert-allowed-cn ['binlog'] "
        f"([syncer.to.security] ssl-ca = {tls_server.pki.ca})"
    )

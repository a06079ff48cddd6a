"""An original TiDB-Binlog deployment's files, used unchanged: a cluster started from them replicates.

tests/data/original_deployment/ holds what an operator migrating from the original brings (its README
says what and why): `pump.toml` and `drainer.toml` with every key of the original's samples, start
scripts with the original's single-dash flags, encrypted passwords made with the original's default
key outside our code, a TLS-only downstream.  This test copies that directory, fills in the one
templated value (the private MariaDB's port), starts etcd and pd-server, then the pump and the drainer
through the scripts, runs a workload and checks:

* the downstream equals the upstream row by row (the audit), the drainer having logged in as the
  `REQUIRE SSL` users with the decrypted passwords, its checkpoint in the TLS-only server;
* every metric the original exports (tests/data/original_metrics.txt) is on the live pump's and
  drainer's /metrics with the original's type;
* the start-up warnings the original's files call for, and nothing refused.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.audit import audit_mysql
from tests.functional.drainerutil import Cluster
from tests.harness.certs import PKI, make_pki
from tests.harness.metricfacts import EXPORTED, Exposition, original_metrics
from tests.harness.mysql import MySQLDSN, PrivateMariaDB, ServerTLS
from tools.localcluster import DrainerProcess, PumpProcess
from tools.procs import free_ports
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

pytestmark = pytest.mark.functional

DEPLOYMENT = Path(__file__).resolve().parents[1] / "data" / "original_deployment"
USERS = {"binlog": "Compat-Pass-1", "binlog_cp": "Compat-Checkpoint-2"}
"""The users of drainer.toml's [syncer.to] and [syncer.to.checkpoint], and the passwords their
encrypted_password fields hold (README.md of the deployment)."""


@pytest.fixture(scope="module")
def tls_mysql(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MySQLDSN, PKI]]:
    pki = make_pki(tmp_path_factory.mktemp("deploy-pki"))
    server = PrivateMariaDB(ServerTLS(pki.ca, pki.server.cert, pki.server.key))
    try:
        dsn = server.start()
    except (RuntimeError, OSError, subprocess.CalledProcessError, TimeoutError) as exc:
        server.stop()
        pytest.skip(f"cannot start a private TLS mariadbd: {exc}")
    try:
        conn = dsn.connect()
        try:
            with conn.cursor() as cur:
                for user, password in USERS.items():
                    cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s REQUIRE SSL", (password,))
                    cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'%'")
        finally:
            conn.close()
        yield dsn, pki
    finally:
        server.stop()


def deploy(tmp: Path, port: int, pki: PKI) -> Path:
    """The deployment directory as a deployment tool lays it out: the files, the port filled in, the
    certificates the configs name (certs/, relative to the deployment directory)."""
    root = tmp / "deploy"
    shutil.copytree(DEPLOYMENT, root)
    conf = root / "conf" / "drainer.toml"
    text = conf.read_text(encoding="utf-8")
    assert text.count("@MYSQL_PORT@") == 2
    conf.write_text(text.replace("@MYSQL_PORT@", str(port)), encoding="utf-8")
    certs = root / "certs"
    certs.mkdir()
    shutil.copy(pki.ca, certs / "ca.pem")
    shutil.copy(pki.client.cert, certs / "drainer.pem")
    shutil.copy(pki.client.key, certs / "drainer-key.pem")
    return root


def scripted(node: PumpProcess | DrainerProcess, root: Path, script: str, env: dict[str, str]) -> None:
    """Run `node` through the deployment's start script instead of our command line."""
    node.process.argv = ["sh", str(root / "scripts" / script)]
    node.process.cwd = root
    node.process.env.update(env, BIN_DIR=str(Path(sys.executable).parent), NODE_ID=node.name)


def scrape(addr: str) -> Exposition:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as resp:
        return Exposition.parse(resp.read().decode())


def test_a_cluster_started_from_the_originals_files_replicates_into_tls_only_mysql(
    tmp_path: Path, tls_mysql: tuple[MySQLDSN, PKI]
) -> None:
    dsn, pki = tls_mysql
    root = deploy(tmp_path, dsn.port, pki)
    cluster = Cluster(tmp_path, dsn, pumps=0)  # type: ignore[arg-type]  # the harness DSN has the same fields
    try:
        pd_urls = cluster.etcd_server.url
        pump_grpc, pump_http, drainer_grpc, drainer_http = free_ports(4)
        pump = PumpProcess(tmp_path, pd_urls, name="pump-compat", grpc_port=pump_grpc, status_port=pump_http)
        scripted(
            pump,
            root,
            "run_pump.sh",
            {"PD_URLS": pd_urls, "PUMP_ADDR": pump.addr, "PUMP_STATUS_ADDR": pump.status_addr},
        )
        cluster.pumps.append(pump)
        pump.start()
        drainer = DrainerProcess(
            tmp_path, pd_urls, name="drainer-compat", grpc_port=drainer_grpc, status_port=drainer_http
        )
        scripted(
            drainer,
            root,
            "run_drainer.sh",
            {"PD_URLS": pd_urls, "DRAINER_ADDR": drainer.addr, "DRAINER_STATUS_ADDR": drainer.status_addr},
        )
        cluster.drainers.append(drainer)
        drainer.start()

        db = cluster.writer()
        sb = make_workload("sysbench", WorkloadOptions(database=cluster.dbname("compat"), tables=2, table_size=40))
        sb.setup(db)
        result = run(db, sb, threads=2, seed=21, txns=80)
        assert result.crashed == [], result.summary()
        cluster.wait_applied(drainer, cluster.now())
        conn = cluster.mysql_conn()
        try:
            assert audit_mysql(db, conn) == []
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT COUNT(*) FROM mysql.user WHERE user IN ('binlog', 'binlog_cp') AND ssl_type = 'ANY'"
                )
                assert cur.fetchone() == (2,)  # the only users the drainer has can log in with TLS only
        finally:
            conn.close()
        checkpoint = cluster.checkpoint_row()
        assert checkpoint is not None
        assert checkpoint["commitTS"] > 0
        assert any((root / "data.drainer" / "relay").iterdir())  # [syncer.relay] log-dir, relative as written

        for node, component in ((pump, "pump"), (drainer, "drainer")):
            served = scrape(node.status_addr)
            for m in original_metrics(component):
                if m.status == EXPORTED:
                    assert served.types.get(m.name) == m.type, f"{component} /metrics: {m.name} ({m.type})"

        drainer_log = (root / "log" / "drainer.log").read_text(encoding="utf-8")
        assert "BINLOG_SECRET_KEY" in drainer_log  # the original's default key decrypted the passwords: warned
        assert "config key 'syncer.to.zookeeper-addrs' is ignored (only db-type kafka reads it)" in drainer_log
        assert " ERROR " not in drainer_log, drainer_log
        pump_log = (root / "log" / "pump.log").read_text(encoding="utf-8")
        assert "is ignored" not in pump_log  # the sample's [storage.kv] values are LevelDB's options or defaults
        assert " ERROR " not in pump_log, pump_log
        assert drainer.stop() == 0
        assert pump.stop() == 0
    finally:
        cluster.close()

"""TLS everywhere (issue 9, part 3): a whole cluster with `[security]` set, and the clients it refuses.

One cluster for the module (its start-up is most of the time): a throw-away CA and certificates
(tests/harness/certs.py), etcd serving https with client-cert-auth, pd-server, pumps and a MariaDB
drainer, all with ssl-ca / ssl-cert / ssl-key and cert-allowed-cn = [binlog-server, binlog-client].
The writer's pump client, the TSO client and the etcd client here use the client certificate.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.dsn import MySQLDSN
from common.errors import EtcdUnavailableError
from common.etcd import EtcdClient
from common.pb import cistern_pb2, cistern_pb2_grpc, pd_pb2, pd_pb2_grpc, pump_pb2, pump_pb2_grpc
from common.tls import TLS, TLSFiles
from pump_client.transport import AttemptError, PumpTransport
from tests.functional.audit import audit_mysql
from tests.functional.drainerutil import Cluster
from tests.harness.certs import CLIENT_CN, INTRUDER_CN, PKI, SERVER_CN, CertFiles, make_pki
from tools.localcluster import DrainerProcess, TLSSettings
from upstream.database import Database
from upstream.ddl import Column
from upstream.txn import Transaction

pytestmark = pytest.mark.functional

REPO = Path(__file__).resolve().parents[2]


class TLSCluster:
    def __init__(self, pki: PKI, cluster: Cluster, drainer: DrainerProcess) -> None:
        self.pki = pki
        self.cluster = cluster
        self.drainer = drainer


@pytest.fixture(scope="module")
def tls_cluster(
    tmp_path_factory: pytest.TempPathFactory, mysql_server: MySQLDSN, request: pytest.FixtureRequest
) -> Iterator[TLSCluster]:
    base = tmp_path_factory.mktemp("tls")
    pki = make_pki(base / "pki")
    settings = TLSSettings(pki.ca, pki.server.cert, pki.server.key, allowed_cn=(SERVER_CN, CLIENT_CN))
    failed_before = request.session.testsfailed
    cluster = Cluster(base, mysql_server, pumps=2, tls=settings)
    try:
        drainer = cluster.drainer()
        yield TLSCluster(pki, cluster, drainer)
    finally:
        if request.session.testsfailed > failed_before:
            print(cluster.logs())
            print(cluster.server_logs())
        cluster.close()


def tls_of(pki: PKI, leaf: CertFiles | None) -> TLS:
    return TLS.load(
        TLSFiles(str(pki.ca), None if leaf is None else str(leaf.cert), None if leaf is None else str(leaf.key))
    )


def probe_pump(addr: str, cluster_id: int, creds: grpc.ChannelCredentials | None) -> None:
    """The empty WriteBinlog (liveness probe)."""
    with grpc.insecure_channel(addr) if creds is None else grpc.secure_channel(addr, creds) as channel:
        pump_pb2_grpc.PumpStub(channel).WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=cluster_id), timeout=5)


def call_server(kind: str, tc: TLSCluster, creds: grpc.ChannelCredentials | None) -> None:
    """One harmless call on a pump (probe), the drainer (Notify) or pd-server (GetClusterInfo)."""
    c = tc.cluster
    if kind == "pump":
        probe_pump(c.pumps[0].addr, c.cluster_id, creds)
        return
    addr = tc.drainer.addr if kind == "drainer" else c.pd.addr
    with grpc.insecure_channel(addr) if creds is None else grpc.secure_channel(addr, creds) as channel:
        if kind == "drainer":
            cistern_pb2_grpc.CisternStub(channel).Notify(cistern_pb2.NotifyReq(), timeout=5)
        else:
            pd_pb2_grpc.PDStub(channel).GetClusterInfo(pd_pb2.ClusterInfoRequest(), timeout=5)


def rpc_error(kind: str, tc: TLSCluster, creds: grpc.ChannelCredentials | None) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as excinfo:
        call_server(kind, tc, creds)
    return excinfo.value


# ------------------------------------------------------------------------------------------ replication


def test_writes_replicate_over_tls_and_a_new_pump_notifies_the_drainer(tls_cluster: TLSCluster) -> None:
    c, drainer = tls_cluster.cluster, tls_cluster.drainer
    assert c.etcd_server.url.startswith("https://")
    db = c.writer()
    name = c.dbname("tls")
    db.create_database(name)
    db.create_table(name, "t", [Column("id", "INT", nullable=False), Column("v", "VARCHAR(16)")], primary_key=["id"])

    def write(lo: int, hi: int, db: Database = db) -> None:
        for i in range(lo, hi):

            def body(txn: Transaction, i: int = i) -> None:
                txn.insert(f"{name}.t", {"id": i, "v": f"v{i}"})
                if i % 3 == 0 and i > 0:
                    txn.update(f"{name}.t", i - 1, {"v": f"u{i}"})
                if i % 5 == 0 and i > 0:
                    txn.delete(f"{name}.t", i - 2)

            db.run(body)

    write(0, 40)
    # a pump started now calls Notify on the drainer (TLS client -> TLS Cistern) before it serves
    c.add_pump()
    write(40, 80)
    c.wait_applied(drainer, c.now())
    conn = c.mysql_conn()
    try:
        problems = audit_mysql(db, conn)
    finally:
        conn.close()
    assert problems == [], "\n".join(problems)
    pumps = db.client.pumps()
    assert {p.node_id for p in pumps} == {p.node_id for p in c.pumps}
    assert len(pumps) == 3


# ------------------------------------------------------------------------------------- refused clients


@pytest.mark.parametrize("kind", ["pump", "drainer", "pd-server"])
def test_a_certificate_with_a_cn_not_allowed_gets_permission_denied(tls_cluster: TLSCluster, kind: str) -> None:
    pki = tls_cluster.pki
    call_server(kind, tls_cluster, tls_of(pki, pki.client).channel_credentials())  # the allowed CN passes
    err = rpc_error(kind, tls_cluster, tls_of(pki, pki.intruder).channel_credentials())
    assert err.code() is grpc.StatusCode.PERMISSION_DENIED
    assert err.details() == f"certificate CN {INTRUDER_CN!r} is not in cert-allowed-cn"


@pytest.mark.parametrize("kind", ["pump", "drainer", "pd-server"])
@pytest.mark.parametrize("who", ["no certificate", "another CA", "plaintext"])
def test_the_handshake_refuses_clients_without_a_valid_certificate(
    tls_cluster: TLSCluster, kind: str, who: str
) -> None:
    pki = tls_cluster.pki
    creds = {
        "no certificate": tls_of(pki, None).channel_credentials(),
        "another CA": tls_of(pki, pki.stranger).channel_credentials(),
        "plaintext": None,
    }[who]
    err = rpc_error(kind, tls_cluster, creds)
    # all grpcio tells a client whose handshake was refused (or who spoke plaintext to a TLS port)
    assert err.code() is grpc.StatusCode.UNAVAILABLE
    assert "Socket closed" in str(err.details())


def test_our_plaintext_pump_client_says_the_pump_may_require_tls(tls_cluster: TLSCluster) -> None:
    c = tls_cluster.cluster
    transport = PumpTransport()
    try:
        request = pump_pb2.WriteBinlogReq(clusterID=c.cluster_id)
        with pytest.raises(AttemptError) as excinfo:
            transport.write(c.pumps[0].addr, request, timeout=5)
    finally:
        transport.close()
    assert excinfo.value.code is grpc.StatusCode.UNAVAILABLE
    assert "it may require TLS: configure ssl-ca, ssl-cert and ssl-key" in excinfo.value.message
    # the same transport with the client certificate gets through
    secure = PumpTransport(tls=c.tls)
    try:
        secure.write(c.pumps[0].addr, request, timeout=5)
    finally:
        secure.close()


def test_etcd_refuses_plaintext_and_certificate_less_clients(tls_cluster: TLSCluster) -> None:
    c, pki = tls_cluster.cluster, tls_cluster.pki
    plain = EtcdClient(c.etcd_server.url.replace("https://", "http://"), timeout=1.0, retry_for=0.5)
    no_cert = EtcdClient(c.etcd_server.url, timeout=1.0, retry_for=0.5, tls=tls_of(pki, None))
    ok = EtcdClient(c.etcd_server.url, timeout=2.0, retry_for=5.0, tls=tls_of(pki, pki.client))
    try:
        for client in (plain, no_cert):
            with pytest.raises(EtcdUnavailableError, match="unreachable: get /pd/cluster_id failed"):
                client.get("/pd/cluster_id")
        kv = ok.get("/pd/cluster_id")
        assert kv is not None
        assert int(kv.value) == c.cluster_id
    finally:
        for client in (plain, no_cert, ok):
            client.close()


# ------------------------------------------------------------------------------------------------ HTTPS


def https_get(url: str, context: Any) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("node", ["pump", "drainer"])
def test_status_endpoints_are_https_with_client_certificates(tls_cluster: TLSCluster, node: str) -> None:
    pki, c = tls_cluster.pki, tls_cluster.cluster
    proc = c.pumps[0] if node == "pump" else tls_cluster.drainer
    url = f"https://{proc.status_addr}/status"
    status, body = https_get(url, tls_of(pki, pki.client).client_ssl_context())
    assert status == 200
    if node == "pump":
        assert proc.node_id in body["status"]
    else:
        assert set(body["PumpPos"]) == {p.node_id for p in c.pumps}
    status, body = https_get(url, tls_of(pki, pki.intruder).client_ssl_context())
    assert (status, body["message"]) == (403, f"certificate CN {INTRUDER_CN!r} is not in cert-allowed-cn")
    for context in (tls_of(pki, None).client_ssl_context(), tls_of(pki, pki.stranger).client_ssl_context()):
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            https_get(url, context)
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP gets no answer
        https_get(f"http://{proc.status_addr}/status", None)


# --------------------------------------------------------------------------------------------- binlogctl


def binlogctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.binlogctl", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def test_binlogctl_with_ssl_flags_lists_the_tls_cluster(tls_cluster: TLSCluster) -> None:
    c, pki = tls_cluster.cluster, tls_cluster.pki
    url = c.etcd_server.url
    flags = ["--ssl-ca", str(pki.ca), "--ssl-cert", str(pki.client.cert), "--ssl-key", str(pki.client.key)]
    done = binlogctl("pumps", "--pd-urls", url, "--json", *flags)
    assert done.returncode == 0, done.stderr
    assert sorted(n["nodeId"] for n in json.loads(done.stdout)) == sorted(p.node_id for p in c.pumps)
    go_style = [f"-{f[2:]}" if f.startswith("--") else f for f in flags]  # the original's -ssl-ca FILE
    done = binlogctl("-cmd", "drainers", "-pd-urls", url, *go_style)
    assert done.returncode == 0, done.stderr
    assert tls_cluster.drainer.node_id in done.stdout

    refused = binlogctl("pumps", "--pd-urls", url, "--timeout", "1")
    assert refused.returncode == 2
    assert "is https, but no TLS is configured" in refused.stderr
    no_cert = binlogctl("pumps", "--pd-urls", url, "--timeout", "1", "--ssl-ca", str(pki.ca))
    assert no_cert.returncode == 1
    assert f"etcd at 127.0.0.1:{c.etcd_server.client_port} unreachable" in no_cert.stderr


def test_binlogctl_actions_go_over_https(tls_cluster: TLSCluster) -> None:
    """pause-pump sent to the drainer's status address: the drainer answers (404, another node id) over
    HTTPS, so nothing changes; with the intruder's certificate the answer is 403."""
    c, pki = tls_cluster.cluster, tls_cluster.pki
    base = ["pause-pump", "--node-id", "pump0", "--pd-urls", c.etcd_server.url, "--ssl-ca", str(pki.ca)]
    base += ["--status-addr", tls_cluster.drainer.status_addr]
    answered = binlogctl(*base, "--ssl-cert", str(pki.client.cert), "--ssl-key", str(pki.client.key))
    assert answered.returncode == 1
    assert "refused pause: invalid nodeID pump0, this drainer's nodeID is drainer (HTTP 404)" in answered.stderr
    forbidden = binlogctl(*base, "--ssl-cert", str(pki.intruder.cert), "--ssl-key", str(pki.intruder.key))
    assert forbidden.returncode == 1
    assert "certificate CN 'intruder' is not in cert-allowed-cn (HTTP 403)" in forbidden.stderr
    assert tls_cluster.drainer.process.alive


# ------------------------------------------------------------------------------------------- bad files


@pytest.mark.parametrize(
    ("module", "flags", "message"),
    [
        ("pd.main", ["--security.ssl-ca", "{missing}", "--security.ssl-cert", "{cert}", "--security.ssl-key", "{key}"],
         "pd-server: [security] ssl-ca: cannot read '{missing}'"),
        ("pump.main", ["--security.ssl-ca", "{ca}", "--security.ssl-cert", "{cert}", "--security.ssl-key", "{ca}"],
         "[security] ssl-key: '{ca}' is not a PEM private key"),
        ("drainer.main",
         ["--security.ssl-ca", "{ca}", "--security.ssl-cert", "{cert}", "--security.ssl-key", "{other}"],
         "[security] ssl-key: the key in '{other}' does not belong to the certificate in '{cert}'"),
        ("drainer.main", ["--security.cert-allowed-cn", "a"],
         "[security] cert-allowed-cn is set but [security] ssl-ca is not"),
        ("pd.main", [], "etcd endpoint 'https://127.0.0.1:9' is https, but no TLS is configured"),
        ("pump.main", [], "etcd endpoint 'https://127.0.0.1:9' is https, but no TLS is configured"),
    ],
)  # fmt: skip
def test_unusable_tls_settings_exit_2_in_one_line(tmp_path: Path, module: str, flags: list[str], message: str) -> None:
    pki = make_pki(tmp_path / "pki")
    paths = {
        "missing": str(tmp_path / "missing.pem"),
        "ca": str(pki.ca),
        "cert": str(pki.server.cert),
        "key": str(pki.server.key),
        "other": str(pki.client.key),
    }
    argv = [f.format(**paths) for f in flags]
    data = ["--data-dir", str(tmp_path / "data")] if module != "pd.main" else []
    done = subprocess.run(
        [sys.executable, "-m", module, "--pd-urls", "https://127.0.0.1:9", *data, *argv],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert message.format(**paths) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "data").exists()  # nothing was started or written


# ------------------------------------------------------------------------------------------ binlog-workload


def test_binlog_workload_writes_through_the_tls_cluster(tls_cluster: TLSCluster, tmp_path: Path) -> None:
    """The writer's command takes the same --ssl-* flags: TLS to etcd, pd-server and the pumps."""
    c, pki = tls_cluster.cluster, tls_cluster.pki
    store = tmp_path / "bank.db"
    flags = ["--ssl-ca", str(pki.ca), "--ssl-cert", str(pki.client.cert), "--ssl-key", str(pki.client.key)]
    base = [sys.executable, "-m", "upstream.workload_cli", "--workload", "bank", "--etcd", c.etcd_server.url]
    base += ["--store", f"sqlite:///{store}", "--database", c.dbname("tlsbank"), "--quiet", "--json"]  # dropped
    done = subprocess.run(
        [*base, "--txns", "40", "--threads", "2", *flags],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["committed"] >= 40, summary
    plain = subprocess.run([*base, "--txns", "1"], check=False, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert plain.returncode == 2, plain.stderr
    assert "is https, but no TLS is configured" in plain.stderr
    missing = subprocess.run(
        [*base, "--txns", "1", "--ssl-ca", str(tmp_path / "nope.pem")],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert missing.returncode == 2, missing.stderr
    assert "--ssl-ca" in missing.stderr
    assert "nope.pem" in missing.stderr


def test_replay_reads_tls_pumps_with_the_client_certificate(tls_cluster: TLSCluster) -> None:
    """`binlog-spark replay --from-cluster` on a TLS cluster (the windows, without Spark): etcd, pd-server
    and every pump over TLS with --ssl-*; without them the first pump named in one line, nothing read."""
    from common.errors import PumpReadError
    from common.pull import pull_window
    from spark_jobs.errors import InputError
    from spark_jobs.readers.pump_net import live_windows

    c, pki = tls_cluster.cluster, tls_cluster.pki
    tls = tls_of(pki, pki.client)
    windows, stop_ts = live_windows(
        addrs=None, pd_urls=c.etcd_server.url, cluster_id=None, start_ts=None, stop_ts=None, tls=tls
    )
    assert {w.addr for w in windows} == {p.addr for p in c.pumps}
    assert all(w.upto <= stop_ts for w in windows)
    for w in windows:  # each window reads to its end over TLS (a pump's fake binlogs at least pass stop-ts)
        assert all(item.binlog.commit_ts <= w.upto for item in pull_window(w))
    with pytest.raises(InputError, match="--pd-urls"):  # etcd refuses a client without a certificate
        live_windows(addrs=None, pd_urls=c.etcd_server.url, cluster_id=None, start_ts=None, stop_ts=None)
    addr = c.pumps[0].addr
    with pytest.raises(PumpReadError, match=rf"pump {addr} at {addr}: PullBinlogs failed .*UNAVAILABLE"):
        live_windows(addrs=[addr], pd_urls=None, cluster_id=c.cluster_id, start_ts=None, stop_ts=stop_ts)

"""A whole cluster for drainer end-to-end tests: etcd, pd-server, pumps, the writer, drainers.

Everything is a real process on loopback except the writer (`upstream.Database`, in this
process, on an sqlite store whose txn-status table the pumps read).  Downstream is MariaDB
(the `mysql_server` fixture) or an sqlite file.  Logical database names are unique per test,
so the downstream databases never collide; `close()` drops them and this cluster's checkpoint
row.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pymysql

from common.dsn import MySQLDSN
from common.etcd import EtcdClient
from common.pb import binlog_pb2
from common.pd_client import TSOClient, read_cluster_id
from pump_client import PumpsClient
from tests.functional.pumputil import PumpClient
from tools.localcluster import DrainerProcess, EtcdProcess, PDProcess, PumpProcess, TLSSettings
from tools.procs import ManagedProcess, free_ports, wait_for
from upstream.database import Database
from upstream.workloads.runner import run

PUMP_FAST = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]
DRAINER_FAST = ["--detect-interval", "1", "--syncer.safe-mode-duration", "0s"]


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


class SinglePumpClient:
    """A writer client that sends every binlog to one pump (to keep other pumps idle)."""

    def __init__(self, pump: PumpProcess, cluster_id: int) -> None:
        self.client = PumpClient(pump.addr, cluster_id)

    def write_binlog(self, b: binlog_pb2.Binlog) -> None:
        self.client.write(b.SerializeToString())

    def write_binlog_async(self, b: binlog_pb2.Binlog) -> Future[None]:
        f: Future[None] = Future()
        try:
            self.write_binlog(b)
            f.set_result(None)
        except Exception as exc:
            f.set_exception(exc)
        return f

    def close(self) -> None:
        self.client.close()


_SETPRIV = shutil.which("setpriv")


def run_side_by_side(db: Database, workloads: dict[str, Any], *, threads: int, seed: int, txns: int) -> dict[str, Any]:
    """Set up each workload, then run them all at once, each from `threads` threads; their results by name."""
    for w in workloads.values():
        w.setup(db)
    results: dict[str, Any] = {}

    def go(name: str, w: Any) -> None:
        results[name] = run(db, w, threads=threads, seed=seed, txns=txns)

    running = [threading.Thread(target=go, args=(n, w)) for n, w in workloads.items()]
    for t in running:
        t.start()
    for t in running:
        t.join()
    return results


def distinct_ports(n: int) -> list[int]:
    """`n` different ports free right now (`free_port()` twice in a row can return the same port)."""
    return free_ports(n)


def fork_safe(proc: ManagedProcess) -> None:
    """Start `proc` without a Python `preexec_fn`, so the child is spawned by vfork.

    `ManagedProcess` sets PR_SET_PDEATHSIG in a `preexec_fn`, which makes subprocess use a plain
    fork(); in a process with gRPC threads, gRPC's fork handlers then run in the child and
    sometimes abort it ("Mutex::Fer with pending CondVar queueing", exit status -6) before it
    execs.  Scenarios start and restart pumps while the writer's gRPC channels are busy, so
    theirs are spawned this way; `setpriv --pdeathsig KILL` (util-linux), when installed, keeps
    the "dies with the test" guarantee."""
    if not proc.die_with_parent:
        return
    proc.die_with_parent = False
    if _SETPRIV is not None:
        proc.argv = [_SETPRIV, "--pdeathsig", "KILL", "--", *proc.argv]


class Cluster:
    def __init__(
        self,
        tmp: Path,
        mysql: MySQLDSN | None,
        *,
        pumps: int = 2,
        fork_safe: bool = False,
        tls: TLSSettings | None = None,
    ) -> None:
        """`fork_safe`: spawn every process with `fork_safe()` (needed when gRPC is busy in this process).

        `tls`: every process (etcd with client-cert-auth, pd-server, pumps, drainers) runs with these
        certificates, and this process's clients (etcd, TSO, the writer) use them too."""
        self.tmp = tmp
        self.mysql = mysql
        self.fork_safe = fork_safe
        self.tls_settings = tls
        self.tls = None if tls is None else tls.client()
        # ports picked by localcluster: a first start that finds one taken starts again on new ones
        self.etcd_server = EtcdProcess(tmp, tls=tls)
        self._spawnable(self.etcd_server.process)
        self.etcd_server.start()
        self.pd = PDProcess(tmp, self.etcd_server.url, tls=tls)
        self._spawnable(self.pd.process)
        self.pd.start()
        self.etcd = EtcdClient(self.etcd_server.url, tls=self.tls)
        cid = read_cluster_id(self.etcd)
        assert cid is not None
        self.cluster_id = cid
        self.tso = TSOClient(self.etcd)
        self.upstream_path = tmp / "upstream.db"
        self.upstream_dsn = f"sqlite:///{self.upstream_path}"
        self.pumps: list[PumpProcess] = []
        self.drainers: list[DrainerProcess] = []
        self.clients: list[Any] = []
        self.dbs: list[Database] = []
        self.downstream_names: list[str] = []
        for _ in range(pumps):
            self.add_pump()

    # ------------------------------------------------------------------------------- processes
    def _spawnable(self, proc: ManagedProcess) -> None:
        if self.fork_safe:
            fork_safe(proc)

    def add_pump(self, *extra: str) -> PumpProcess:
        name = f"pump{len(self.pumps)}"
        args = [*PUMP_FAST, "--upstream.txn-status-dsn", self.upstream_dsn, "--storage.resolve-interval", "0.5", *extra]
        p = PumpProcess(
            self.tmp,
            self.etcd_server.url,
            name=name,
            extra_args=args,
            tls=self.tls_settings,
        )
        self._spawnable(p.process)
        self.pumps.append(p)
        p.start()
        return p

    def mysql_args(self, password: str | None = None) -> list[str]:
        m = self.mysql
        assert m is not None
        return [
            "--syncer.db-type", "mysql",
            "--syncer.to.host", m.host,
            "--syncer.to.port", str(m.port),
            "--syncer.to.user", m.user,
            "--syncer.to.password", m.password if password is None else password,
        ]  # fmt: skip

    def drainer(self, *extra: str, name: str = "drainer", start: bool = True, sink: str = "mysql") -> DrainerProcess:
        args = [*DRAINER_FAST, "--initial-commit-ts", "0"]
        if sink == "mysql":
            args += self.mysql_args()
        args += list(extra)
        d = DrainerProcess(
            self.tmp,
            self.etcd_server.url,
            name=name,
            extra_args=args,
            tls=self.tls_settings,
        )
        self._spawnable(d.process)
        self.drainers.append(d)
        if start:
            d.start()
        return d

    def dbname(self, prefix: str) -> str:
        """A unique logical database name, dropped downstream by `close()`."""
        name = unique_name(prefix)
        self.downstream_names.append(name)
        return name

    # ---------------------------------------------------------------------------------- writer
    def writer(self, client: Any | None = None, **client_kw: Any) -> Database:
        if client is None:
            client = PumpsClient(self.etcd_server.url, tls=self.tls, **client_kw)
        self.clients.append(client)
        db = Database(self.etcd_server.url, self.upstream_dsn, client=client, tls=self.tls)
        self.dbs.append(db)
        return db

    def now(self) -> int:
        return self.tso.get_ts()

    def wait_applied(self, drainer: DrainerProcess, ts: int, timeout: float = 90) -> None:
        """Wait until the drainer's saved checkpoint reaches `ts` (everything up to it is applied)."""

        def reached() -> bool:
            try:
                return int(drainer.http_json("GET", "/commit_ts")["data"]["ts"]) >= ts
            except OSError:
                return False

        wait_for(reached, timeout, f"drainer {drainer.name} checkpoint >= {ts}", interval=0.2)

    # -------------------------------------------------------------------------------- downstream
    def mysql_conn(self, database: str | None = None) -> pymysql.connections.Connection[Any]:
        m = self.mysql
        assert m is not None
        ca = getattr(m, "ssl_ca", None)  # tests.harness.mysql.MySQLDSN of a TLS-only server
        return pymysql.connect(
            host=m.host,
            port=m.port,
            user=m.user,
            password=m.password,
            database=database,
            charset="utf8mb4",
            ssl_ca=ca,
            ssl_verify_cert=True if ca else None,
            ssl_verify_identity=True if ca else None,
        )

    def checkpoint_row(self) -> dict[str, Any] | None:
        import json

        conn = self.mysql_conn()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT checkPoint FROM tidb_binlog.checkpoint WHERE clusterID = %s", (self.cluster_id,))
                row = cur.fetchone()
            conn.commit()
        finally:
            conn.close()
        return None if row is None else dict(json.loads(row[0]))

    # ------------------------------------------------------------------------------------ close
    def logs(self, lines: int = 80) -> str:
        parts = []
        procs: list[PumpProcess | DrainerProcess] = [*self.pumps, *self.drainers]
        for p in procs:
            parts.append(f"===== {p.name} log =====\n{p.process.log_tail(lines)}")
        return "\n".join(parts)

    def server_logs(self, lines: int = 40) -> str:
        """The tails of the etcd and pd-server logs (for scenarios that restart them)."""
        return "\n".join(
            f"===== {p.name} log =====\n{p.log_tail(lines)}" for p in (self.etcd_server.process, self.pd.process)
        )

    def close(self) -> None:
        for d in self.drainers:
            d.stop()
        for db in self.dbs:
            db.close()
        for c in self.clients:
            c.close()
        for p in self.pumps:
            p.stop()
        self.tso.close()
        self.etcd.close()
        self.pd.stop()
        self.etcd_server.stop()
        if self.mysql is not None:
            conn = self.mysql_conn()
            try:
                with conn.cursor() as cur:
                    for name in self.downstream_names:
                        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
                    cur.execute("SHOW DATABASES LIKE 'tidb_binlog'")
                    if cur.fetchone():
                        cur.execute("DELETE FROM tidb_binlog.checkpoint WHERE clusterID = %s", (self.cluster_id,))
                conn.commit()
            finally:
                conn.close()

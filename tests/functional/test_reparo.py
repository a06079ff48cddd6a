"""reparo end to end: real etcd, pd-server, pumps and drainers, MariaDB, and `python -m tools.reparo` (issue 7).

One upstream feeds two drainers: one with the file sink (pb binlog files) and one with the MySQL sink
(database A). reparo replays the files into an empty server-side copy of the same databases (B); B must
equal the upstream and A row by row. Windows select exactly the transactions whose commit_ts lies inside
them. A config with an unknown key, or a destination that refuses the connection, changes nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from common import dsn, tso
from common.audit import DialectReader, audit_schema, mysql_reader
from common.binlogfile import BinlogFileWriter
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.pb import pb_binlog_pb2
from common.pbfile import read_pb_binlogs, txn_to_pb
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, IndexInfo, Job, JobType, TableInfo
from common.schema.types import parse_type
from common.sql.dialect import MySQLDialect
from tests.functional.audit import audit_mysql
from tests.functional.drainerutil import Cluster, distinct_ports, run_side_by_side, unique_name
from tests.harness.mysql import MySQLDSN
from tools.procs import wait_for
from upstream.ddl import Column
from upstream.workloads import WorkloadOptions, make_workload

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
REPARO_TIMEOUT = 120.0
A_PREFIX = "a_"


def reparo(
    tmp: Path, data_dir: Path, mysql: MySQLDSN | dsn.MySQLDSN | None, extra: str = "", name: str = "reparo.toml"
) -> subprocess.CompletedProcess[str]:
    """Run `python -m tools.reparo --config <file>` with data-dir, [dest-db] (when `mysql`) and `extra` keys."""
    lines = [f'data-dir = "{data_dir}"', 'log-level = "warn"', textwrap.dedent(extra)]
    if mysql is not None:
        lines.append('dest-type = "mysql"')
        lines += ["[dest-db]", f'host = "{mysql.host}"', f"port = {mysql.port}"]
        lines += [f'user = "{mysql.user}"', f'password = "{mysql.password}"']
    path = tmp / name
    path.write_text("\n".join(lines) + "\n")
    return subprocess.run(
        [sys.executable, "-m", "tools.reparo", "--config", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=REPARO_TIMEOUT,
        check=False,
    )


def summary_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"reparo failed ({proc.returncode}):\n{proc.stderr}"
    done = [line for line in proc.stderr.splitlines() if line.startswith("reparo: done in ")]
    assert len(done) == 1, proc.stderr
    return done[0]


def applied(proc: subprocess.CompletedProcess[str]) -> int:
    m = re.search(r"(\d+) applied \(", summary_line(proc))
    assert m is not None
    return int(m.group(1))


def query(cluster: Cluster, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    conn = cluster.mysql_conn()
    try:
        with conn.cursor() as cur:
            cur.execute(sql, tuple(params) or None)
            rows = [tuple(r) for r in cur.fetchall()]
        conn.commit()
        return rows
    finally:
        conn.close()


def move_databases(cluster: Cluster, names: Sequence[str]) -> None:
    """Database A: every table of each `name` moved to `a_<name>`, so `name` can be replayed into from empty."""
    conn = cluster.mysql_conn()
    try:
        with conn.cursor() as cur:
            for name in names:
                target = A_PREFIX + name
                cluster.downstream_names.append(target)  # dropped by cluster.close()
                cur.execute(f"CREATE DATABASE `{target}`")
                cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (name,))
                for (table,) in cur.fetchall():
                    cur.execute(f"RENAME TABLE `{name}`.`{table}` TO `{target}`.`{table}`")
                cur.execute(f"DROP DATABASE `{name}`")
        conn.commit()
    finally:
        conn.close()


def test_replay_equals_the_mysql_drainer_and_the_upstream(cluster: Cluster, tmp_path: Path) -> None:
    files = cluster.drainer("--syncer.db-type", "file", sink="file", name="fdrainer")
    mysql_drainer = cluster.drainer("--syncer.worker-count", "8", name="mdrainer")
    db = cluster.writer()
    sb = make_workload("sysbench", WorkloadOptions(database=cluster.dbname("rsb"), tables=2, table_size=100))
    ddl = make_workload("ddl", WorkloadOptions(database=cluster.dbname("rddl"), ddl_ratio=0.15))
    results = run_side_by_side(db, {"sb": sb, "ddl": ddl}, threads=2, seed=17, txns=150)
    for r in results.values():
        assert r.crashed == [], r.summary()
    end = cluster.now()
    cluster.wait_applied(files, end)
    cluster.wait_applied(mysql_drainer, end)
    files.stop()
    mysql_drainer.stop()

    conn = cluster.mysql_conn()
    try:
        assert audit_mysql(db, conn) == []  # A is the drainer's faithful replica
    finally:
        conn.close()
    names = [d.name for d in db.schema.databases()]
    move_databases(cluster, names)
    binlogs = list(read_pb_binlogs(files.data_dir))
    ddls = sum(1 for b in binlogs if b.tp == pb_binlog_pb2.DDL)
    assert ddls >= 8  # the workloads' CREATE DATABASE / TABLE and the DDL churn

    proc = reparo(tmp_path, files.data_dir, cluster.mysql)
    assert applied(proc) == len(binlogs)
    assert f"{ddls} DDLs" in summary_line(proc)

    conn = cluster.mysql_conn()
    try:
        problems = audit_mysql(db, conn)  # B == upstream
        assert problems == [], "\n".join(problems)
        a = mysql_reader(conn, "A (mysql drainer)")
        a_side = DialectReader(a.description, MySQLDialect(prefix=A_PREFIX), a.query_all)
        result = audit_schema(db.schema, a_side, mysql_reader(conn, "B (reparo)"))  # B == A
    finally:
        conn.close()
    assert result.tables, "nothing was compared"
    assert result.problems() == [], "\n".join(result.problems())
    assert sb.check(db) == []


def test_windows_select_exactly_the_transactions_inside(cluster: Cluster, tmp_path: Path) -> None:
    files = cluster.drainer("--syncer.db-type", "file", sink="file", name="fdrainer")
    db = cluster.writer()
    name = cluster.dbname("win")
    db.create_database(name)
    db.create_table(name, "t", [Column("id", "INT", nullable=False), Column("v", "INT")], primary_key=["id"])
    schema_ts = cluster.now()
    table = f"{name}.t"
    commit_ts: list[int] = []

    def txn(i: int) -> None:
        t = db.begin()
        t.insert(table, {"id": i, "v": 0})
        if i > 0:
            t.update(table, i - 1, {"v": i})
        commit_ts.append(t.commit())

    for i in range(40):
        txn(i)
    second = tso.physical(commit_ts[-1]) // 1000 + 1  # the next wall-clock second: start-datetime's resolution
    wait_for(lambda: tso.physical(cluster.now()) // 1000 >= second, 10, "the TSO to reach the next second")
    for i in range(40, 50):
        txn(i)
    assert tso.physical(commit_ts[40]) // 1000 >= second
    cluster.wait_applied(files, cluster.now())
    files.stop()

    # [0, schema_ts]: the DDLs only.
    proc = reparo(tmp_path, files.data_dir, cluster.mysql, f"stop-tso = {schema_ts}")
    assert applied(proc) == 2
    assert query(cluster, f"SELECT COUNT(*) FROM `{name}`.`t`") == [(0,)]

    # [commit_ts[10], commit_ts[25]]: both ends inclusive, nothing else.
    start, stop = commit_ts[10], commit_ts[25]
    in_files = [b.commit_ts for b in read_pb_binlogs(files.data_dir) if start <= b.commit_ts <= stop]
    assert in_files == commit_ts[10:26]
    proc = reparo(tmp_path, files.data_dir, cluster.mysql, f"start-tso = {start}\nstop-tso = {stop}")
    assert applied(proc) == 16
    expected: dict[int, int] = {}
    for i in range(10, 26):  # the window's transactions on an empty table
        expected[i] = 0
        if i - 1 in expected:
            expected[i - 1] = i
    rows = dict(query(cluster, f"SELECT id, v FROM `{name}`.`t`"))
    assert rows == expected

    # The same window again: its inserts now collide, unless safe mode makes them REPLACEs.
    window = f"start-tso = {start}\nstop-tso = {stop}\nworker-count = 2\ntxn-batch = 3"
    proc = reparo(tmp_path, files.data_dir, cluster.mysql, window)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("reparo: error: ")
    assert "1062" in last  # duplicate entry
    proc = reparo(tmp_path, files.data_dir, cluster.mysql, window + "\nsafe-mode = true")
    assert applied(proc) == 16
    # Safe mode runs an update as DELETE + REPLACE of the whole new row, so the window's first update
    # (of row 9, inserted before the window) now creates that row.
    assert dict(query(cluster, f"SELECT id, v FROM `{name}`.`t`")) == expected | {9: 10}

    # start-datetime at a second boundary: exactly the transactions after it (print, so no state is involved).
    when = tso.to_datetime(tso.compose(second * 1000, 0)).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    proc = reparo(tmp_path, files.data_dir, None, f'start-datetime = "{when}"\ndest-type = "print"')
    assert applied(proc) == 10
    inserted = [int(m) for m in re.findall(r"type: Insert\nid\(int\): (\d+)", proc.stdout)]
    assert inserted == list(range(40, 50))


# ------------------------------------------------------------------------------------------ bad input


def _shape(db: str) -> TableShape:
    cols = tuple(
        ColumnInfo(id=i + 1, name=n, offset=i, type_text=t, ctype=parse_type(t)[0])
        for i, (n, t) in enumerate([("id", "int"), ("v", "varchar(10)")])
    )
    return TableShape.of(
        db, TableInfo(id=1, name="t", columns=cols, indices=(IndexInfo(1, "PRIMARY", ("id",), True, True),))
    )


def _files(path: Path, db: str) -> None:
    """pb files that create table `db`.`u` and insert a row into `db`.`t`."""
    query = "CREATE TABLE `u` (id int primary key)"
    job = Job(1, JobType.CREATE_TABLE, 1, db, 2, "u", 3, query)
    txns = [
        Txn(100, ddl=DDL(db=db, table="u", query=query, job=job, before=InfoSchema())),
        Txn(101, dmls=[DML(DMLType.INSERT, _shape(db), values=(2, "new"))]),
    ]
    with BinlogFileWriter(path, sync=False) as w:
        for txn in txns:
            binlog = txn_to_pb(txn)
            assert binlog is not None
            w.write(binlog.SerializeToString())


def _state(mysql: MySQLDSN, db: str) -> tuple[list[Any], list[Any]]:
    conn = mysql.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (db,))
            tables = list(cur.fetchall())
            cur.execute(f"SELECT id, v FROM `{db}`.`t` ORDER BY id")
            rows = list(cur.fetchall())
        return tables, rows
    finally:
        conn.close()


def test_unknown_config_key_changes_nothing(mysql_server: MySQLDSN, tmp_path: Path) -> None:
    db = unique_name("rbad")
    conn = mysql_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"CREATE TABLE `{db}`.`t` (id INT PRIMARY KEY, v VARCHAR(10))")
            cur.execute(f"INSERT INTO `{db}`.`t` VALUES (1, 'old')")
    finally:
        conn.close()
    try:
        _files(tmp_path / "pb", db)
        before = _state(mysql_server, db)
        proc = reparo(tmp_path, tmp_path / "pb", mysql_server, "worker-cnt = 4")
        assert proc.returncode == 2
        assert proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith("reparo: config error:")
        assert "unknown key 'worker-cnt' (did you mean 'worker-count'?)" in proc.stderr
        assert _state(mysql_server, db) == before

        proc = reparo(tmp_path, tmp_path / "pb", mysql_server)  # the same files, a good config: they do apply
        assert applied(proc) == 2
        assert _state(mysql_server, db) == ([("t",), ("u",)], [(1, "old"), (2, "new")])
    finally:
        conn = mysql_server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        finally:
            conn.close()


def test_unreachable_destination_is_one_line(tmp_path: Path) -> None:
    _files(tmp_path / "pb", "nowhere")
    (port,) = distinct_ports(1)  # nothing listens there
    proc = reparo(tmp_path, tmp_path / "pb", MySQLDSN(port=port))
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("reparo: error: cannot connect to [dest-db] root@127.0.0.1:")


def test_start_beyond_the_present_is_one_line_and_applies_nothing(mysql_server: MySQLDSN, tmp_path: Path) -> None:
    """Before: exit 0 and a summary of "0 applied ... 2 outside the window". Now: exit 1, one line, nothing applied."""
    db = unique_name("rahead")
    _files(tmp_path / "pb", db)
    beyond = 9223372036854775807
    proc = reparo(tmp_path, tmp_path / "pb", mysql_server, f"start-tso = {beyond}")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(
        f"reparo: error: start-tso {beyond} (3084-12-12 12:41:28 UTC) is ahead of the local clock "
    ), proc.stderr
    assert "nothing would be replayed (the newest binlog in data-dir" in proc.stderr
    assert "commit_ts 101 (1970-01-01 00:00:00 UTC)" in proc.stderr
    conn = mysql_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE %s", (db,))
            assert cur.fetchall() == ()
    finally:
        conn.close()

    # at the newest binlog: it runs and replays that one (print, so no state is involved)
    proc = reparo(tmp_path, tmp_path / "pb", None, 'start-tso = 101\ndest-type = "print"', name="print.toml")
    assert applied(proc) == 1
    assert "id(int): 2" in proc.stdout

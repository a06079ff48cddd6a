"""String keys that differ only in case or trailing spaces stay distinct rows downstream (MariaDB).

The writer's sqlite store compares strings exactly, so 'a', 'A' and 'a ' are three keys upstream;
the drainer creates the tables with the table's collation (utf8mb4_bin, as the NO PAD
utf8mb4_nopad_bin on MariaDB), not the server's case-insensitive default.
"""

from __future__ import annotations

import pytest

from tests.functional.audit import audit_mysql
from tests.functional.drainerutil import Cluster
from upstream.ddl import Column
from upstream.txn import Transaction

pytestmark = pytest.mark.functional

SKEY = [("a", 1), ("A", 2), ("a ", 3), ("b", 4)]
CKEY = [("x", "b", 1), ("x", "B", 2), ("X", "b", 3), ("x", "b ", 4)]


@pytest.mark.parametrize("safe_mode", [False, True], ids=["normal", "safe-mode"])
def test_keys_differing_only_in_case_or_trailing_spaces_stay_distinct(cluster: Cluster, safe_mode: bool) -> None:
    drainer = cluster.drainer("--syncer.worker-count", "4", "--syncer.safe-mode", str(safe_mode).lower())
    db = cluster.writer()
    assert db.store.exact_string_keys  # the sqlite store: 'a' and 'a ' are two keys
    name = cluster.dbname("coll")
    db.create_database(name)
    key = "VARCHAR(16)"
    db.create_table(name, "skey", [Column("k", key, nullable=False), Column("v", "INT")], primary_key=["k"])
    db.create_table(
        name,
        "ckey",
        [Column("a", key, nullable=False), Column("b", key, nullable=False), Column("v", "INT")],
        primary_key=["a", "b"],
    )
    for k, v in SKEY:  # one transaction each: downstream they are consecutive inserts of "the same" key

        def put(txn: Transaction, k: str = k, v: int = v) -> None:
            txn.insert(f"{name}.skey", {"k": k, "v": v})

        db.run(put)
    for a, b, v in CKEY:

        def cput(txn: Transaction, a: str = a, b: str = b, v: int = v) -> None:
            txn.insert(f"{name}.ckey", {"a": a, "b": b, "v": v})

        db.run(cput)
    cluster.wait_applied(drainer, cluster.now())

    conn = cluster.mysql_conn(name)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT k, v FROM skey")
            skey = sorted((str(r[0]), int(r[1])) for r in cur.fetchall())
            cur.execute("SELECT a, b, v FROM ckey")
            ckey = sorted((str(r[0]), str(r[1]), int(r[2])) for r in cur.fetchall())
            cur.execute(
                "SELECT table_name, table_collation FROM information_schema.tables WHERE table_schema = %s", (name,)
            )
            collations = {str(r[0]): str(r[1]) for r in cur.fetchall()}
        conn.commit()
        assert skey == sorted(SKEY), f"rows merged downstream: {skey}"
        assert ckey == sorted(CKEY), f"rows merged downstream: {ckey}"
        assert collations == {"skey": "utf8mb4_nopad_bin", "ckey": "utf8mb4_nopad_bin"}
        problems = audit_mysql(db, conn)
    finally:
        conn.close()
    assert problems == [], "\n".join(problems)

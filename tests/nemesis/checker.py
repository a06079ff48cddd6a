"""The nemesis checker: compares the workload's history, both databases' rows, the pumps' streams and the
drainer checkpoint samples, trusting nothing the system says about itself (not the drainer's audit code).

Rules (each returns :class:`Violation` lists; the first is what a runner prints):

a. effects: every ``ok`` insert's id is downstream; every ``ok`` transaction's commit_ts is at or below the
   final checkpoint; a ``fail`` insert's id is neither downstream nor upstream; an ``unknown`` insert's id is
   downstream exactly when it is upstream.  (A transfer's effect is checked through rule b, since later
   transfers overwrite its balances, and through rule c.)
b. rows: downstream equals upstream row by row for both tables; the bank total is the same on both sides
   (and equals `expected_total` when given).
c. streams: within one pump, commit_ts is strictly ascending over *every* binlog it sends, fake binlogs
   included: the pump indexes a binlog by one key ``ts`` (commit_ts for commits and fakes), fakes take a
   fresh TSO and TSOs are unique, so a commit and a fake never share a ts (no equality is allowed).  Across
   all pumps, each committed transaction (``ok``, and ``unknown`` inserts whose id is upstream) appears as a
   Commit binlog exactly once, with the commit_ts the writer saw for an ``ok`` one; a ``fail`` transaction
   never appears as a Commit; no start_ts appears as a Commit twice anywhere.  With `upto` (the ts the
   pulls ran to), an ``ok`` transaction is judged when its commit_ts <= upto, any other when its start_ts
   <= upto; take `upto` as a TSO fetched after the workload exited, so every commit_ts is below it.
d. checkpoint: the sampled checkpoint never moves backwards, and no sample's checkpoint is >= the commit_ts
   of an ``ok`` insert whose id was not yet downstream at that sample (the sampler reads the checkpoint
   first, then the ids, so the ids it sees are at least those the checkpoint vouches for).
e. recovery: after each heal, the seconds until the first sample whose checkpoint is above the last one
   sampled at or before the heal; a violation if that does not happen within `recovery_bound`.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Protocol

import pymysql

from common.pb import binlog_pb2
from tests.nemesis.history import Record
from tests.nemesis.streams import StreamEntry

CENTS: Final = Decimal("0.01")
COMMIT: Final = binlog_pb2.Commit
SAMPLE_INTERVAL: Final = 0.5


class MySQLAddr(Protocol):
    """Where a MySQL server is (common.dsn.MySQLDSN and tests.harness.mysql.MySQLDSN both fit)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def password(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


@dataclass(frozen=True, slots=True)
class Tables:
    """One side's rows: account id -> balance, and the set of insert ids."""

    accounts: Mapping[int, Decimal]
    inserts: frozenset[int]


def money(v: Any) -> Decimal:
    return Decimal(str(v)).quantize(CENTS)


# ------------------------------------------------------------------------------------------- samples


@dataclass
class Samples:
    """What rule d and e need of the checkpoint samples, in bounded memory: per sample its wall time and
    checkpoint, and per insert id the index of the first sample that saw it downstream."""

    times: list[float] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    first_seen: dict[int, int] = field(default_factory=dict)

    def add(self, t: float, checkpoint: int, ids: Iterable[int]) -> None:
        k = len(self.times)
        self.times.append(t)
        self.checkpoints.append(checkpoint)
        for i in ids:
            self.first_seen.setdefault(i, k)


def checkpoint_ts(cur: Any, table: str, cluster_id: int) -> int | None:
    """The commitTS of the drainer's checkpoint row of `cluster_id` in `table` (quoted), None without one."""
    cur.execute(f"SELECT checkPoint FROM {table} WHERE clusterID = %s", (cluster_id,))
    row = cur.fetchone()
    return None if row is None else int(json.loads(row[0])["commitTS"])


class CheckpointSampler:
    """A thread that every SAMPLE_INTERVAL reads the drainer checkpoint row of `cluster_id` from the
    downstream MySQL, then the insert ids of `inserts_table` (``db.table``), into :attr:`samples`.

    A failed read (downstream unreachable) is skipped and counted in :attr:`errors`."""

    def __init__(
        self,
        dsn: MySQLAddr,
        cluster_id: int,
        inserts_table: str,
        *,
        checkpoint_table: str = "tidb_binlog.checkpoint",
        interval: float = SAMPLE_INTERVAL,
    ) -> None:
        self.dsn = dsn
        self.cluster_id = cluster_id
        self.inserts_table = _mysql_name(inserts_table)
        self.checkpoint_table = _mysql_name(checkpoint_table)
        self.interval = interval
        self.samples = Samples()
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint-sampler", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Samples:
        self._stop.set()
        self._thread.join()
        return self.samples

    def sample_once(self, conn: Any) -> bool:
        """One sample on `conn`; False when there is no checkpoint yet."""
        with conn.cursor() as cur:
            found = checkpoint_ts(cur, self.checkpoint_table, self.cluster_id)
            t = time.time()
            if found is None:
                return False
            checkpoint = found
            try:
                cur.execute(f"SELECT id FROM {self.inserts_table}")
                ids = [int(r[0]) for r in cur.fetchall()]
            except pymysql.err.ProgrammingError:  # the table is not downstream yet
                ids = []
        with self._lock:
            self.samples.add(t, checkpoint, ids)
        return True

    def _run(self) -> None:
        conn: Any = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = pymysql.connect(
                        host=self.dsn.host,
                        port=self.dsn.port,
                        user=self.dsn.user,
                        password=self.dsn.password,
                        autocommit=True,
                        connect_timeout=2,
                        read_timeout=5,
                    )
                self.sample_once(conn)
            except (pymysql.err.Error, OSError, ValueError, KeyError):
                self.errors += 1
                if conn is not None:
                    with contextlib.suppress(Exception):  # a broken connection
                        conn.close()
                conn = None
            self._stop.wait(self.interval)
        if conn is not None:
            conn.close()


def _mysql_name(dotted: str) -> str:
    db, _, table = dotted.partition(".")
    return f"`{db}`.`{table}`"


# ------------------------------------------------------------------------------------------- readers


def read_mysql_tables(
    dsn: MySQLAddr, db: str, accounts: str = "accounts", inserts: str = "inserts", *, prefix: str = ""
) -> Tables:
    """Both tables of logical database `db` in a MySQL server: downstream, or an upstream MySQL store (whose
    physical database is `prefix` + `db`, the writer's ``mysql_db_prefix``)."""
    db = prefix + db
    conn = pymysql.connect(host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, balance FROM `{db}`.`{accounts}`")
            acc = {int(i): money(b) for i, b in cur.fetchall()}
            cur.execute(f"SELECT id FROM `{db}`.`{inserts}`")
            ins = frozenset(int(r[0]) for r in cur.fetchall())
    finally:
        conn.close()
    return Tables(acc, ins)


def read_sqlite_tables(path: str, db: str, accounts: str = "accounts", inserts: str = "inserts") -> Tables:
    """Both tables of logical database `db` in the upstream writer's sqlite store (a table is ``"db.name"``)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        acc = {int(i): money(b) for i, b in conn.execute(f'SELECT id, balance FROM "{db}.{accounts}"')}
        ins = frozenset(int(r[0]) for r in conn.execute(f'SELECT id FROM "{db}.{inserts}"'))
    finally:
        conn.close()
    return Tables(acc, ins)


# ------------------------------------------------------------------------------------------- rules


def check_effects(history: Sequence[Record], up: Tables, down: Tables, final_checkpoint: int) -> list[Violation]:
    """Rule a (module docstring)."""
    out: list[Violation] = []
    for r in history:
        if r.outcome == "ok" and r.commit_ts is not None and r.commit_ts > final_checkpoint:
            out.append(
                Violation(
                    "a",
                    f"ok {r.kind} start_ts={r.start_ts} commit_ts={r.commit_ts} is above the final checkpoint "
                    f"{final_checkpoint}",
                )
            )
        i = r.insert_id
        if i is None:
            continue
        if r.outcome == "ok" and i not in down.inserts:
            out.append(
                Violation(
                    "a", f"lost: ok insert id={i} start_ts={r.start_ts} commit_ts={r.commit_ts} is not downstream"
                )
            )
        elif r.outcome == "fail" and (i in down.inserts or i in up.inserts):
            where = " and ".join(s for s, rows in (("downstream", down), ("upstream", up)) if i in rows.inserts)
            out.append(Violation("a", f"failed insert id={i} start_ts={r.start_ts} ({r.error}) is {where}"))
        elif r.outcome == "unknown" and (i in down.inserts) != (i in up.inserts):
            out.append(
                Violation(
                    "a",
                    f"unknown insert id={i} start_ts={r.start_ts}: upstream has it={i in up.inserts}, "
                    f"downstream has it={i in down.inserts}",
                )
            )
    return out


def check_rows(up: Tables, down: Tables, expected_total: Decimal | None = None) -> list[Violation]:
    """Rule b (module docstring)."""
    out: list[Violation] = []
    for i in sorted(set(up.accounts) | set(down.accounts)):
        a, b = up.accounts.get(i), down.accounts.get(i)
        if a != b:
            out.append(Violation("b", f"account {i}: upstream balance {a}, downstream {b}"))
    only_up = sorted(up.inserts - down.inserts)
    only_down = sorted(down.inserts - up.inserts)
    if only_up:
        out.append(Violation("b", f"{len(only_up)} insert ids upstream but not downstream, first {only_up[:5]}"))
    if only_down:
        out.append(Violation("b", f"{len(only_down)} insert ids downstream but not upstream, first {only_down[:5]}"))
    up_total, down_total = sum(up.accounts.values(), Decimal(0)), sum(down.accounts.values(), Decimal(0))
    if up_total != down_total:
        out.append(Violation("b", f"bank total upstream {up_total} != downstream {down_total}"))
    if expected_total is not None:
        for side, total in (("upstream", up_total), ("downstream", down_total)):
            if total != expected_total:
                out.append(Violation("b", f"bank total {side} is {total}, expected {expected_total}"))
    return out


def check_streams(
    history: Sequence[Record], streams: Mapping[str, Sequence[StreamEntry]], up: Tables, upto: int | None = None
) -> tuple[list[Violation], Counter[str]]:
    """Rule c (module docstring); also counts ``duplicated`` and ``missing_commit``."""
    out: list[Violation] = []
    counts: Counter[str] = Counter()
    commits: dict[int, list[tuple[str, int]]] = {}  # start_ts -> [(pump, commit_ts)]
    for pump, entries in streams.items():
        prev: StreamEntry | None = None
        for e in entries:
            if prev is not None and e.commit_ts <= prev.commit_ts:
                out.append(
                    Violation(
                        "c",
                        f"pump {pump}: commit_ts {e.commit_ts} (start_ts={e.start_ts} tp={e.tp}) follows "
                        f"{prev.commit_ts} (start_ts={prev.start_ts} tp={prev.tp}): not strictly ascending",
                    )
                )
            prev = e
            if e.tp == COMMIT:
                commits.setdefault(e.start_ts, []).append((pump, e.commit_ts))
    for start_ts, seen in commits.items():
        if len(seen) > 1:
            counts["duplicated"] += 1
            out.append(Violation("c", f"start_ts={start_ts} appears as a commit {len(seen)} times: {seen}"))
    for r in history:
        if r.start_ts is None:
            continue
        if upto is not None and (r.commit_ts if r.outcome == "ok" and r.commit_ts else r.start_ts) > upto:
            continue
        seen = commits.get(r.start_ts, [])
        committed = r.outcome == "ok" or (
            r.outcome == "unknown" and r.insert_id is not None and r.insert_id in up.inserts
        )
        if committed and not seen:
            counts["missing_commit"] += 1
            out.append(Violation("c", f"{r.outcome} {r.kind} start_ts={r.start_ts} has no commit binlog on any pump"))
        elif r.outcome == "ok" and seen and any(c != r.commit_ts for _, c in seen):
            out.append(
                Violation("c", f"ok {r.kind} start_ts={r.start_ts}: writer saw commit_ts {r.commit_ts}, pumps {seen}")
            )
        elif r.outcome == "fail" and seen:
            out.append(Violation("c", f"failed {r.kind} start_ts={r.start_ts} ({r.error}) has commit binlogs {seen}"))
        elif r.outcome == "unknown" and r.insert_id is not None and r.insert_id not in up.inserts and seen:
            out.append(Violation("c", f"unknown insert start_ts={r.start_ts} is not upstream but has commits {seen}"))
    return out, counts


def check_checkpoints(history: Sequence[Record], samples: Samples) -> list[Violation]:
    """Rule d (module docstring)."""
    out: list[Violation] = []
    cps = samples.checkpoints
    for k in range(1, len(cps)):
        if cps[k] < cps[k - 1]:
            out.append(
                Violation("d", f"checkpoint moved backwards from {cps[k - 1]} to {cps[k]} at t={samples.times[k]:.3f}")
            )
    prefix_max: list[int] = []
    m = 0
    for c in cps:
        m = max(m, c)
        prefix_max.append(m)
    for r in history:
        i = r.insert_id
        if r.outcome != "ok" or i is None or r.commit_ts is None:
            continue
        first = samples.first_seen.get(i, len(cps))  # samples before `first` did not see it downstream
        if first == 0:
            continue
        if prefix_max[first - 1] >= r.commit_ts:
            k = next(j for j in range(first) if cps[j] >= r.commit_ts)
            out.append(
                Violation(
                    "d",
                    f"checkpoint {cps[k]} at t={samples.times[k]:.3f} passed ok insert id={i} "
                    f"commit_ts={r.commit_ts}, which was not downstream yet",
                )
            )
    return out


def recovery_times(
    heals: Sequence[float], samples: Samples, recovery_bound: float
) -> tuple[list[float | None], list[Violation]]:
    """Rule e (module docstring): seconds per heal (None: never moved), and the violations."""
    out: list[Violation] = []
    times: list[float | None] = []
    for h in heals:
        before = [c for t, c in zip(samples.times, samples.checkpoints, strict=True) if t <= h]
        base = before[-1] if before else 0
        moved = next((t for t, c in zip(samples.times, samples.checkpoints, strict=True) if t > h and c > base), None)
        took = None if moved is None else moved - h
        times.append(took)
        if took is None or took > recovery_bound:
            out.append(
                Violation("e", f"checkpoint did not move within {recovery_bound:.1f}s after the heal at t={h:.3f}")
            )
    return times, out


# ------------------------------------------------------------------------------------------- report


@dataclass
class Report:
    violations: list[Violation]
    counts: Counter[str]
    recovery: list[float | None]

    @property
    def ok(self) -> bool:
        return not self.violations

    def render(self) -> str:
        lines = ["nemesis check: " + ("OK" if self.ok else f"{len(self.violations)} violations")]
        lines.append("counts: " + " ".join(f"{k}={v}" for k, v in sorted(self.counts.items())))
        if self.recovery:
            lines.append(
                "recovery after heals (s): " + ", ".join("never" if r is None else f"{r:.2f}" for r in self.recovery)
            )
        lines.extend(f"  {v}" for v in self.violations[:50])
        if len(self.violations) > 50:
            lines.append(f"  ... {len(self.violations) - 50} more")
        return "\n".join(lines)


def check(
    history: Sequence[Record],
    up: Tables,
    down: Tables,
    streams: Mapping[str, Sequence[StreamEntry]],
    samples: Samples,
    *,
    final_checkpoint: int,
    heals: Sequence[float] = (),
    recovery_bound: float = 60.0,
    expected_total: Decimal | None = None,
    upto: int | None = None,
) -> Report:
    """Every rule, in order a..e."""
    counts: Counter[str] = Counter()
    for r in history:
        counts[f"{r.kind}_{r.outcome}"] += 1
        if r.outcome == "ok":
            counts["acknowledged_ok"] += 1
    violations = check_effects(history, up, down, final_checkpoint)
    counts["lost"] = sum(1 for v in violations if v.message.startswith("lost:"))
    violations += check_rows(up, down, expected_total)
    stream_violations, stream_counts = check_streams(history, streams, up, upto)
    violations += stream_violations
    counts.update(stream_counts)
    counts.setdefault("duplicated", 0)
    violations += check_checkpoints(history, samples)
    recovery, rec_violations = recovery_times(heals, samples, recovery_bound)
    violations += rec_violations
    return Report(violations, counts, recovery)

"""Table routing for the SQL sinks: `[[syncer.table-migrate-rule]] target` applied to what a sink executes.

`RoutingSink` wraps the mysql / tidb / sqlite sink (inside the relay log's `RelaySink`, so the relay log
and the checkpoint keep upstream names; the relay log's replay goes through it too):

* **DML**: each row's table shape is swapped for one with the routed schema and table names; the
  columns are the upstream table's.  Several sources may route into one target (merging sharded
  tables): their rows simply land in the same table.
* **DDL** (mysql, tidb): every table the statement names is written as its routed, fully qualified
  name (`drainer.route_ddl`), the session's schema (``USE``) becomes the routed schema of the one the
  DDL ran in, and the target schemas the statement needs are created first (``CREATE DATABASE IF NOT
  EXISTS``, `DDL.prelude`), so a routed CREATE TABLE works even when the source schema was created
  before the drainer started.  CREATE DATABASE of a schema creates its routed name (schema-level rule)
  and the target schemas of the rules whose source schema matches it.  A DDL the rewriter does not
  understand (CREATE VIEW, ...) runs as it is.
* **DDL** (sqlite): the sink plans its statements from the job with routed names
  (`drainer.sinks.sqlite.RoutedSqliteDialect`); nothing is rewritten here.
* **Shared targets**: when other sources may land in the same target (a wildcard source with a
  fixed target table, or two rules with one target), DROP TABLE, TRUNCATE TABLE, RENAME TABLE and an
  ALTER TABLE that renames of one source would destroy the other sources' rows: they are not run
  (logged as a warning; ``DDL.skip``).  CREATE TABLE of the second source fails with "already exists",
  ADD COLUMN / ADD INDEX twice with "duplicate": both ignored as any replayed DDL is, so the shards'
  schema changes apply once.  DROP DATABASE of a schema routed by a shared schema-level rule is not run
  either; DROP DATABASE never drops the target schemas of table-level rules (other tables may live
  there).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from common.events import DDL, DML, TableShape, Txn
from common.filters import ddl_event
from common.table_rules import Router
from drainer.route_ddl import quote, rewrite_ddl
from drainer.sinks.base import OnSuccess, Sink, WrappingSink

log = logging.getLogger(__name__)

__all__ = ["RoutingSink", "route_ddl"]

_DESTRUCTIVE = frozenset({"drop table", "truncate table", "rename table"})
SHAPE_CACHE_LIMIT = 4096


def _create_schema(name: str) -> str:
    return f"CREATE DATABASE IF NOT EXISTS {quote(name)}"


def route_ddl(ddl: DDL, router: Router, *, rewrite: bool = True) -> DDL:
    """`ddl` as the SQL sink must run it under `router` (see the module doc); `rewrite` = False leaves the
    text to the sink (sqlite) and only decides whether a shared target's DDL is skipped."""
    if ddl.skip:
        return ddl
    event = ddl_event(ddl.query)
    rw = rewrite_ddl(ddl.query, ddl.db or ddl.job.schema_name, router.route, router.route_schema)
    if rw.schema is not None:
        upstream, routed = rw.schema
        if event == "drop database" and routed != upstream and router.shared(upstream, ""):
            return _skipped(ddl, f"schema {upstream} is merged into {routed} with others")
        if not rewrite:
            return ddl
        prelude: tuple[str, ...] = ()
        if event == "create database":
            prelude = tuple(_create_schema(s) for s in router.target_schemas(upstream) if s != routed)
        if not (rw.changed or prelude):
            return ddl
        return replace(ddl, db=routed if ddl.db else "", query=rw.query, prelude=prelude)
    if not rw.changed:
        return ddl
    renames = event == "alter table" and len(rw.tables) > 1
    if event in _DESTRUCTIVE or renames:
        shared = [r for r in rw.tables if router.shared(r.db, r.table)]
        if shared:
            r = shared[0]
            return _skipped(ddl, f"{r.db}.{r.table} shares its target {r.routed_db}.{r.routed_table} with others")
    if not rewrite:
        return ddl
    routed_db = router.route_schema(ddl.db) if ddl.db else ""
    needed = [r.routed_db for r in rw.tables if r.routed_db != r.db]
    if routed_db and routed_db != ddl.db:
        needed.append(routed_db)
    main = rw.tables[0]
    return replace(
        ddl,
        db=routed_db,
        table=main.routed_table,
        query=rw.query,
        prelude=tuple(_create_schema(s) for s in dict.fromkeys(needed)),
    )


def _skipped(ddl: DDL, why: str) -> DDL:
    log.warning("table routing: DDL %r not executed downstream: %s (it would change their rows too)", ddl.query, why)
    return replace(ddl, skip=True)


class RoutingSink(WrappingSink):
    """Routes tables for the SQL sink it wraps (see the module doc)."""

    def __init__(self, inner: Sink, router: Router, *, rewrite_ddl: bool = True) -> None:
        super().__init__(inner)
        self.router = router
        self.rewrite_ddl = rewrite_ddl
        self._shapes: dict[int, tuple[TableShape, TableShape]] = {}

    # ------------------------------------------------------------------ routing
    def _shape(self, shape: TableShape) -> TableShape:
        found = self._shapes.get(id(shape))
        if found is not None and found[0] is shape:
            return found[1]
        db, table = self.router.route(shape.db, shape.table)
        routed = shape if (db, table) == (shape.db, shape.table) else replace(shape, db=db, table=table)
        if len(self._shapes) >= SHAPE_CACHE_LIMIT:
            self._shapes.clear()
        self._shapes[id(shape)] = (shape, routed)  # the key's shape is held, so its id is not reused
        return routed

    def _route(self, txn: Txn) -> Txn:
        if txn.ddl is not None:
            return replace(txn, ddl=route_ddl(txn.ddl, self.router, rewrite=self.rewrite_ddl))
        if not txn.dmls:
            return txn
        shape = self._shape
        dmls = [d if (s := shape(d.shape)) is d.shape else _with_shape(d, s) for d in txn.dmls]
        return replace(txn, dmls=dmls)

    # ------------------------------------------------------------------ Sink
    def add(self, txn: Txn) -> None:
        self.inner.add(self._route(txn))  # a RoutingError (overlapping rules) stops the syncer

    def start(self, on_success: OnSuccess) -> None:
        self.inner.start(on_success)

    def flush(self, timeout: float | None = None) -> None:
        self.inner.flush(timeout)

    def close(self) -> None:
        self.inner.close()

    def error(self) -> BaseException | None:
        return self.inner.error()


def _with_shape(d: DML, shape: TableShape) -> DML:
    return DML(d.tp, shape, d.values, d.old_values, d.commit_ts, d.size)

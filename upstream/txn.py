"""A writer transaction: row changes buffered in memory, then two-phase commit with binlog.

Reads go to the store (no lock) the first time a row is touched and are remembered; every
change is applied to the in-memory copy and appended to the binlog :class:`MutationLog`.
``commit()`` (the database's committer, see :mod:`upstream.commit`) locks the touched rows, checks
they still hold what this transaction read (else :class:`WriteConflictError`), and applies the net change.

Keys: a table with a primary key is addressed by its primary key value (a scalar for one
column, a tuple in key order for several); a table without one by its hidden row handle,
which :meth:`Transaction.insert` returns.

Any error inside an operation rolls the whole transaction back and is raised; the
transaction is then closed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from common.schema.defaults import default_value
from common.schema.infoschema import InfoSchema, TableRef
from common.schema.model import ColumnInfo, SchemaError, TableInfo
from common.schema.types import check_value
from upstream.errors import DuplicateKeyError, SchemaChangedError, TxnClosedError, TxnTooLargeError
from upstream.mutation import MutationLog
from upstream.store.base import Row, Session

log = logging.getLogger(__name__)


class TxnState(Enum):
    ACTIVE = "active"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled back"


@dataclass(slots=True)
class Entry:
    """One row this transaction touched: what the store held when first read, and what it holds now."""

    ref: TableRef
    handle: int
    base: Row | None
    current: Row | None
    verify: bool = True
    """Check at prewrite that the store still holds `base` (False for freshly allocated handles)."""
    written: bool = False


class RowIDs(Protocol):
    """Per-table row ids: hidden handles and auto-increment values (:class:`common.schema.history.RowIDAllocator`)."""

    def next(self, table_id: int) -> int: ...

    def rebase(self, table_id: int, value: int) -> None: ...


class TxnCommitter(Protocol):
    """Commits a transaction's written rows (:class:`upstream.commit.Committer`)."""

    def commit(self, txn: Transaction) -> int:
        """The commit_ts (0 when nothing was written); raises, having committed nothing, on an error."""
        ...


class TxnHost(Protocol):
    """What a transaction uses of the database that began it (:class:`upstream.database.Database`)."""

    @property
    def schema(self) -> InfoSchema: ...

    @property
    def row_ids(self) -> RowIDs: ...

    @property
    def binlog_enabled(self) -> bool: ...

    @property
    def max_binlog_size(self) -> int: ...

    @property
    def committer(self) -> TxnCommitter: ...

    def release(self, txn: Transaction) -> None:
        """Take back the transaction's session (it has ended)."""
        ...


class Transaction:
    def __init__(self, db: TxnHost, start_ts: int, session: Session) -> None:
        self.db = db
        self.start_ts = start_ts
        self.session = session
        self.state = TxnState.ACTIVE
        self.commit_ts = 0
        self.entries: dict[tuple[int, int], Entry] = {}
        self.order: list[tuple[int, int]] = []
        self.mutations = MutationLog()
        self._by_key: dict[tuple[int, tuple[Any, ...]], int] = {}  # (table id, pk values) -> handle, txn rows

    # ------------------------------------------------------------------ public API
    def get(self, table: str, key: Any) -> dict[str, Any] | None:
        """The row with this key as this transaction sees it, or None."""
        row: dict[str, Any] | None = self._guard(self._get, table, key)
        return row

    def insert(self, table: str, row: Mapping[str, Any]) -> int:
        """Insert a row (missing columns take their default); returns its handle."""
        handle: int = self._guard(self._insert, table, row)
        return handle

    def update(self, table: str, key: Any, changes: Mapping[str, Any]) -> None:
        """Change some columns of the row with this key (KeyError-like WriterError if missing)."""
        self._guard(self._update, table, key, changes)

    def delete(self, table: str, key: Any) -> None:
        """Delete the row with this key (WriterError if missing)."""
        self._guard(self._delete, table, key)

    def commit(self) -> int:
        """Commit with binlog; returns the commit_ts (0 for a transaction that changed nothing)."""
        self._check_active()
        try:
            commit_ts = self.db.committer.commit(self)
        except BaseException:
            self._close(TxnState.ROLLED_BACK)
            raise
        self.commit_ts = commit_ts
        self._close(TxnState.COMMITTED)
        return commit_ts

    def rollback(self) -> None:
        if self.state is TxnState.ACTIVE:
            self._close(TxnState.ROLLED_BACK)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: object) -> None:
        if et is not None:
            self.rollback()
        elif self.state is TxnState.ACTIVE:
            self.commit()

    # ------------------------------------------------------------------ internals
    def _check_active(self) -> None:
        if self.state is not TxnState.ACTIVE:
            raise TxnClosedError(f"transaction start_ts={self.start_ts} is {self.state.value}")

    def _guard(self, fn: Any, *args: Any) -> Any:
        self._check_active()
        try:
            return fn(*args)
        except BaseException:
            self._close(TxnState.ROLLED_BACK)
            raise

    def _close(self, state: TxnState) -> None:
        self.state = state
        self.db.release(self)

    def _table(self, name: str) -> TableRef:
        db, dot, tname = name.partition(".")
        if not dot:
            raise SchemaError(f"table name {name!r} must be qualified as db.table")
        return self.db.schema.table_ref(db, tname)

    def _key_values(self, t: TableInfo, key: Any) -> tuple[Any, ...]:
        pk = t.primary_key
        if pk is None:
            if not isinstance(key, int) or isinstance(key, bool):
                raise SchemaError(f"table {t.name} has no primary key: address rows by their handle (int)")
            return (key,)
        cols = [t.column(c) for c in pk.columns]
        raw = key if isinstance(key, tuple) else (key,)
        if len(raw) != len(cols):
            raise SchemaError(f"table {t.name}: key {key!r} needs {len(cols)} value(s) for {', '.join(pk.columns)}")
        return tuple(check_value(c, v) for c, v in zip(cols, raw, strict=True))

    def _find(self, ref: TableRef, key: Any) -> Entry | None:
        """The entry of the row with `key`, reading the store the first time; None if it never existed."""
        t = ref.table
        values = self._key_values(t, key)
        if t.primary_key is None or t.pk_is_handle:
            handle = values[0]
        else:
            found = self._by_key.get((t.id, values))
            if found is None:
                cols = [t.column(c) for c in t.primary_key.columns]
                found = self.session.find_handle(ref.db.name, t, cols, values)
                if found is None:
                    return None
            handle = found
            e = self._entry(ref, handle)
            if e.current is not None and self._pk_of(t, e.current) != values:
                return None  # this transaction changed that row's key
            return e
        return self._entry(ref, handle)

    def _entry(self, ref: TableRef, handle: int) -> Entry:
        k = (ref.table.id, handle)
        e = self.entries.get(k)
        if e is not None and e.ref.table is not ref.table:
            # read under the table's old definition; commit would refuse it too (commit._check_schema)
            raise SchemaChangedError.of(ref.db.name, ref.table.name, self.start_ts)
        if e is None:
            base = self.session.get_row(ref.db.name, ref.table, handle)
            e = Entry(ref, handle, base, None if base is None else dict(base))
            self.entries[k] = e
            self.order.append(k)
            self._index(ref.table, e)
        return e

    def _index(self, t: TableInfo, e: Entry) -> None:
        if t.primary_key is not None and not t.pk_is_handle and e.current is not None:
            self._by_key[(t.id, self._pk_of(t, e.current))] = e.handle

    def _get(self, table: str, key: Any) -> dict[str, Any] | None:
        e = self._find(self._table(table), key)
        return None if e is None or e.current is None else dict(e.current)

    def _checked_row(self, t: TableInfo, row: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        given = {k.lower(): v for k, v in row.items()}
        for name in given:
            t.column(name)  # unknown column -> SchemaError naming it
        for c in t.columns:
            if c.lname in given:
                out[c.lname] = check_value(c, given[c.lname])
            elif c.auto_increment:
                out[c.lname] = None
            else:
                out[c.lname] = self._default(t, c)
        return out

    @staticmethod
    def _default(t: TableInfo, c: ColumnInfo) -> Any:
        if c.default is not None:
            return default_value(c)
        if c.nullable:
            return None
        raise SchemaError(f"column {t.name}.{c.name} is NOT NULL, has no default and no value was given")

    def _insert(self, table: str, row: Mapping[str, Any]) -> int:
        ref = self._table(table)
        t = ref.table
        values = self._checked_row(t, row)
        for c in t.columns:
            if c.auto_increment:
                if values[c.lname] is None:
                    values[c.lname] = self.db.row_ids.next(t.id)
                else:
                    self.db.row_ids.rebase(t.id, int(values[c.lname]))
        hc = t.handle_column
        if hc is not None:
            handle = int(values[hc.lname])
            e = self._entry(ref, handle)
            if e.current is not None:
                raise DuplicateKeyError(f"duplicate entry {handle!r} for key PRIMARY of {ref.db.name}.{t.name}")
        else:
            pk = t.primary_key
            if pk is not None:
                kv = self._pk_of(t, values)
                found = self._find(ref, kv if len(kv) > 1 else kv[0])
                if found is not None and found.current is not None and self._pk_of(t, found.current) == kv:
                    raise DuplicateKeyError(f"duplicate entry {kv!r} for key PRIMARY of {ref.db.name}.{t.name}")
            handle = self.db.row_ids.next(t.id)
            k = (t.id, handle)
            e = Entry(ref, handle, None, None, verify=False)
            self.entries[k] = e
            self.order.append(k)
        e.current = values
        e.written = True
        self._index(t, e)
        self.mutations.insert(t, handle, values)
        self._check_size()
        return handle

    @staticmethod
    def _pk_of(t: TableInfo, row: Mapping[str, Any]) -> tuple[Any, ...]:
        pk = t.primary_key
        assert pk is not None
        return tuple(row[c.lower()] for c in pk.columns)

    def _existing(self, table: str, key: Any) -> tuple[TableRef, Entry, dict[str, Any]]:
        ref = self._table(table)
        e = self._find(ref, key)
        if e is None or e.current is None:
            raise SchemaError(f"no row with key {key!r} in {ref.db.name}.{ref.table.name}")
        return ref, e, e.current

    def _update(self, table: str, key: Any, changes: Mapping[str, Any]) -> None:
        ref, e, old = self._existing(table, key)
        t = ref.table
        new = dict(old)
        for name, v in changes.items():
            c = t.column(name)
            new[c.lname] = check_value(c, v)
        hc = t.handle_column
        if hc is not None and new[hc.lname] != old[hc.lname]:
            # The handle changes: TiDB removes the old record and adds a new one.
            self._delete_entry(ref, e, old)
            target = self._entry(ref, int(new[hc.lname]))
            if target.current is not None:
                raise DuplicateKeyError(f"duplicate entry {new[hc.lname]!r} for key PRIMARY of {t.name}")
            target.current = new
            target.written = True
            self.mutations.insert(t, target.handle, new)
            self._check_size()
            return
        self._unindex(t, e)
        e.current = new
        e.written = True
        self._index(t, e)
        self.mutations.update(t, e.handle, old, new)
        self._check_size()

    def _delete(self, table: str, key: Any) -> None:
        ref, e, old = self._existing(table, key)
        self._delete_entry(ref, e, old)

    def _delete_entry(self, ref: TableRef, e: Entry, old: dict[str, Any]) -> None:
        self._unindex(ref.table, e)
        e.current = None
        e.written = True
        self.mutations.delete(ref.table, e.handle, old)
        self._check_size()

    def _unindex(self, t: TableInfo, e: Entry) -> None:
        if t.primary_key is not None and not t.pk_is_handle and e.current is not None:
            self._by_key.pop((t.id, self._pk_of(t, e.current)), None)

    def _check_size(self) -> None:
        """TxnTooLargeError once the transaction's binlog passes what the pumps take (TiDB checks per statement too)."""
        db = self.db
        if db.binlog_enabled and self.mutations.size > db.max_binlog_size:
            raise TxnTooLargeError(
                f"transaction start_ts={self.start_ts} is too large for a binlog: its rows take "
                f"{self.mutations.size} bytes, the pumps take at most {db.max_binlog_size} (max-message-size)"
            )

    def written_entries(self) -> Sequence[Entry]:
        return [self.entries[k] for k in self.order if self.entries[k].written]

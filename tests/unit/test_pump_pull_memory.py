"""The pump's pull path reads a large transaction's bytes once: prewrites met in the index are skipped
after a peek, and a commit's prewrite value goes into the merged binlog without a parsed copy."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.pb import binlog_pb2, gogo
from pump.storage.entry import parse_binlog
from pump.storage.pull import merge_prewrite, split_prewrite_value
from pump.storage.storage import Storage
from pump.storage.vlog import ValueLog
from tests.unit.storageutil import Tso, commit, open_storage, prewrite, pull_upto, write


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = open_storage(tmp_path / "pump")
    yield s
    s.close()


def merged_as_before(commit_bytes: bytes, prewrite_bytes: bytes) -> bytes:
    """What the pull path produced by parsing both binlogs (the reference)."""
    c, p = parse_binlog(commit_bytes), parse_binlog(prewrite_bytes)
    c.start_ts = p.start_ts
    for field in ("prewrite_value", "ddl_query"):
        if p.HasField(field):
            setattr(c, field, getattr(p, field))
        else:
            c.ClearField(field)
    c.ddl_job_id = p.ddl_job_id
    c.ddl_schema_state = p.ddl_schema_state
    return gogo.marshal_binlog(c)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 2**62),
    st.none() | st.binary(max_size=300),
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=10),
    st.integers(0, 2**40),
    st.integers(-(2**31), 2**31 - 1),
    st.sampled_from([b"", b"\x98\x01\x07"]),
)
def test_merge_with_the_value_in_place_is_byte_identical(
    start: int,
    value: bytes | None,
    query: bytes | None,
    commit_key: bytes | None,
    job: int,
    state: int,
    unknown: bytes,
) -> None:
    p = gogo.encode_binlog(
        binlog_pb2.Prewrite,
        start,
        0,
        prewrite_key=b"k",
        prewrite_value=value,
        ddl_query=query,
        ddl_job_id=job,
        ddl_schema_state=state,
    )
    c = gogo.encode_binlog(binlog_pb2.Commit, start, start + 1, prewrite_key=commit_key, unknown=unknown)
    small, view = split_prewrite_value(p)
    assert (view is None) == (value is None)
    assert view is None or view.obj is p  # the value stays in the stored bytes
    assert merge_prewrite(parse_binlog(c), small, view) == merged_as_before(c, p)


def test_pull_reads_each_large_prewrite_once(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Tso()
    big = bytes(range(256)) * 4096  # 1 MiB
    txns = []
    for _ in range(3):
        start = clock.next()
        write(storage, prewrite(start, big))
        txns.append((start, clock.next()))
    for start, commit_ts in txns:
        write(storage, commit(start, commit_ts))
    read_bytes: Counter[int] = Counter()
    peeks: list[int] = []
    real_read, real_peek = ValueLog.read, ValueLog.peek

    def read(self: ValueLog, ptr: object) -> bytes:
        payload = real_read(self, ptr)  # type: ignore[arg-type]
        read_bytes[len(payload) > len(big)] += len(payload)
        return payload

    def peek(self: ValueLog, ptr: object, n: int) -> bytes:
        peeks.append(n)
        return real_peek(self, ptr, n)  # type: ignore[arg-type]

    monkeypatch.setattr(ValueLog, "read", read)
    monkeypatch.setattr(ValueLog, "peek", peek)
    got = pull_upto(storage, 0, txns[-1][1])
    assert [(b.start_ts, b.commit_ts) for b in got] == txns
    for b in got:
        assert parse_binlog(b.payload).prewrite_value == big
    assert 3 * len(big) < read_bytes[True] < 4 * len(big)  # each prewrite read once: by its commit, not the index walk
    assert read_bytes[False] < 1000  # the commits
    assert peeks
    assert max(peeks) <= 2  # the rest of a prewrite is not read


def test_peek_reads_the_head_of_a_record(tmp_path: Path) -> None:
    vlog = ValueLog(tmp_path / "vlog", file_size=1 << 20)
    try:
        long, short = vlog.append([b"\x08\x00" + b"x" * 100_000, b"\x08"], 5)
        assert vlog.peek(long, 2) == b"\x08\x00"
        assert vlog.peek(short, 2) == b"\x08"
        assert vlog.read(long)[:3] == b"\x08\x00x"
    finally:
        vlog.close()

"""`common.pull.pull_window` against a scripted PullBinlogs server (a real gRPC server on loopback that
plays a pump: our own interface, faked; the real pump is in tests/spark/test_replay_net.py).

The reader must stop at the first binlog past the window, leave fake binlogs out, and refuse with one
line naming the pump: a window below the announced gc ts, a silent stream, a payload that is not a
binlog, a commit_ts that goes backwards, a stream that ends early.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from common.errors import PumpReadError
from common.pb import binlog_pb2, pump_pb2
from common.pb.gogo import marshal_pull_resp
from common.pull import GC_TS_METADATA, PumpWindow, first_ts, pull_window

Step = bytes | None
"""A message to send, or None: go silent until the test ends."""


class ScriptedPump:
    """Serves binlog.Pump/PullBinlogs: announces `gc_ts` (unless None) and sends `script`."""

    def __init__(self, script: list[Step], gc_ts: int | None = 0, end: bool = False) -> None:
        self.script = script
        self.gc_ts = gc_ts
        self.end = end
        self.requests: list[pump_pb2.PullBinlogReq] = []
        self.released = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.unary_stream_rpc_method_handler(
            self._pull, request_deserializer=pump_pb2.PullBinlogReq.FromString, response_serializer=None
        )
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("binlog.Pump", {"PullBinlogs": handler}),)
        )
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.addr = f"127.0.0.1:{port}"
        self.server.start()

    def _pull(self, req: pump_pb2.PullBinlogReq, context: Any) -> Iterator[bytes]:
        self.requests.append(req)
        if self.gc_ts is not None:
            context.send_initial_metadata(((GC_TS_METADATA, str(self.gc_ts)),))
        for step in self.script:
            if step is None:
                self.released.wait(30)
                return
            yield step
        if not self.end:
            self.released.wait(30)

    def close(self) -> None:
        self.released.set()
        self.server.stop(None)


def resp(commit_ts: int, *, tp: Any = binlog_pb2.Commit, start_ts: int = 1, ddl: int = 0) -> bytes:
    b = binlog_pb2.Binlog(tp=tp, start_ts=start_ts, commit_ts=commit_ts, ddl_job_id=ddl)
    if tp == binlog_pb2.Commit and not ddl:
        b.prewrite_value = b"rows-of-%d" % commit_ts
    return marshal_pull_resp(b.SerializeToString(), b.start_ts, commit_ts)


def fake(ts: int) -> bytes:
    return resp(ts, tp=binlog_pb2.Rollback, start_ts=ts)


@pytest.fixture
def pumps() -> Iterator[list[ScriptedPump]]:
    made: list[ScriptedPump] = []
    yield made
    for p in made:
        p.close()


def serve(pumps: list[ScriptedPump], script: list[Step], **kw: Any) -> ScriptedPump:
    p = ScriptedPump(script, **kw)
    pumps.append(p)
    return p


def window(p: ScriptedPump, after: int, upto: int, idle: float = 5.0) -> PumpWindow:
    return PumpWindow("pump-a", p.addr, 42, after, upto, idle_timeout=idle)


def test_reads_the_window_and_stops_at_the_first_binlog_past_it(pumps: list[ScriptedPump]) -> None:
    p = serve(pumps, [resp(11), fake(12), resp(13, ddl=7), resp(20), resp(21), resp(22)])
    got = list(pull_window(window(p, 10, 20)))
    assert [(g.binlog.commit_ts, g.binlog.ddl_job_id) for g in got] == [(11, 0), (13, 7), (20, 0)]
    assert bytes(got[0].prewrite_value or b"") == b"rows-of-11"  # a view of the message, paired by the pump
    assert got[1].prewrite_value is None
    (req,) = p.requests
    assert (req.clusterID, req.startFrom.offset) == (42, 10)


def test_first_ts_includes_fake_binlogs(pumps: list[ScriptedPump]) -> None:
    p = serve(pumps, [fake(15), resp(16)])
    assert first_ts(window(p, 10, 20)) == 15


def test_a_window_below_the_gc_ts_names_the_first_missing_ts(pumps: list[ScriptedPump]) -> None:
    p = serve(pumps, [resp(101)], gc_ts=100)
    with pytest.raises(PumpReadError, match=r"pump pump-a at .* gc ts 100; .*first missing ts is 51"):
        list(pull_window(window(p, 50, 200)))
    q = serve(pumps, [resp(101), resp(300)], gc_ts=100)
    assert [g.binlog.commit_ts for g in pull_window(window(q, 100, 200))] == [101]  # at the gc ts: all there


def test_a_silent_stream_fails_after_the_idle_timeout(pumps: list[ScriptedPump]) -> None:
    p = serve(pumps, [resp(11), None])
    reader = pull_window(window(p, 10, 20, idle=0.5))
    assert next(reader).binlog.commit_ts == 11
    with pytest.raises(PumpReadError, match=r"sent nothing for 0.5s after commit_ts 11 .*ends at 20"):
        next(reader)


def test_garbage_backwards_and_early_end_are_refused(pumps: list[ScriptedPump]) -> None:
    junk = marshal_pull_resp(b"\xff\xff\xff", 0, 11)
    p = serve(pumps, [resp(11), junk])
    with pytest.raises(PumpReadError, match=r"the binlog after commit_ts 11 is not a binlog"):
        list(pull_window(window(p, 10, 20)))
    q = serve(pumps, [resp(12), resp(11)])
    with pytest.raises(PumpReadError, match=r"sent commit_ts 11 after 12: its stream is not in commit_ts order"):
        list(pull_window(window(q, 10, 20)))
    r = serve(pumps, [resp(12)], end=True)
    with pytest.raises(PumpReadError, match=r"ended the stream after commit_ts 12, before 20"):
        list(pull_window(window(r, 10, 20)))


def test_an_unreachable_pump_is_named(pumps: list[ScriptedPump]) -> None:
    p = serve(pumps, [])
    addr = p.addr
    p.close()
    with pytest.raises(
        PumpReadError, match=rf"pump pump-a at {addr}: PullBinlogs failed after commit_ts 10: UNAVAILABLE"
    ):
        list(pull_window(window(p, 10, 20)))


def test_a_pump_that_does_not_announce_its_gc_ts_is_read_with_a_warning(
    pumps: list[ScriptedPump], caplog: pytest.LogCaptureFixture
) -> None:
    p = serve(pumps, [resp(11), resp(30)], gc_ts=None)
    assert [g.binlog.commit_ts for g in pull_window(window(p, 10, 20))] == [11]
    assert "did not announce its gc ts" in caplog.text

"""The pump membership state machine: registry events, error counts, availability."""

from __future__ import annotations

import pytest

from common.registry import NodeChange, NodeKind, NodeState, NodeStatus
from pump_client.membership import Change, Membership
from pump_client.selector import Candidate


def status(node_id: str, state: NodeState = NodeState.ONLINE, host: str | None = None, score: int = 0) -> NodeStatus:
    return NodeStatus(node_id, host or f"127.0.0.1:{8250 + int(node_id[-1])}", state, score=score)


def put(m: Membership, st: NodeStatus, revision: int = 1) -> Change:
    return m.apply(NodeChange(NodeKind.PUMP, st.node_id, st, revision)).change


def available_ids(m: Membership) -> list[str]:
    return [c.node_id for c in m.candidates()]


def test_put_adds_pumps_and_only_online_ones_are_available() -> None:
    m = Membership()
    assert put(m, status("p1")) is Change.ADDED
    assert put(m, status("p2", NodeState.PAUSED)) is Change.ADDED
    assert put(m, status("p0", score=7)) is Change.ADDED
    assert available_ids(m) == ["p0", "p1"]
    assert m.candidates()[0] == Candidate("p0", 7)
    assert [p.node_id for p in m.online()] == ["p0", "p1"]
    assert [(p.node_id, p.state, p.available) for p in m.snapshot()] == [
        ("p0", NodeState.ONLINE, True),
        ("p1", NodeState.ONLINE, True),
        ("p2", NodeState.PAUSED, False),
    ]


def test_state_changes_move_pumps_in_and_out() -> None:
    m = Membership()
    put(m, status("p1"))
    applied = m.put(status("p1", NodeState.PAUSING))
    assert applied.availability_changed
    assert available_ids(m) == []
    applied = m.put(status("p1", NodeState.ONLINE))
    assert applied.availability_changed
    assert applied.reconnect  # came back: fresh channel
    assert available_ids(m) == ["p1"]


def test_errors_make_a_pump_unavailable_after_max_err_nums_and_success_resets() -> None:
    m = Membership(max_err_nums=3)
    put(m, status("p1"))
    assert [m.record_error("p1") for _ in range(3)] == [False, False, False]
    assert available_ids(m) == ["p1"]  # err_num == max is still usable (original: ErrNum > 10)
    assert m.record_error("p1") is True
    assert available_ids(m) == []
    assert [p.node_id for p in m.to_probe()] == ["p1"]
    info = m.get("p1")
    assert info is not None
    assert (info.err_num, info.available) == (4, False)
    assert m.record_success("p1") is True
    assert available_ids(m) == ["p1"]
    assert m.to_probe() == []
    assert m.record_success("p1") is False


def test_success_resets_the_count_so_only_consecutive_errors_count() -> None:
    m = Membership(max_err_nums=2)
    put(m, status("p1"))
    for _ in range(10):
        m.record_error("p1")
        m.record_error("p1")
        m.record_success("p1")
    assert available_ids(m) == ["p1"]


def test_an_unavailable_pump_going_online_again_starts_with_zero_errors() -> None:
    m = Membership(max_err_nums=0)
    put(m, status("p1"))
    m.record_error("p1")
    assert available_ids(m) == []
    m.put(status("p1", NodeState.PAUSED))
    assert m.to_probe() == []  # not online: never probed
    m.put(status("p1", NodeState.ONLINE))
    assert available_ids(m) == ["p1"]


def test_a_heartbeat_with_the_same_state_does_not_revive_an_erroring_pump() -> None:
    m = Membership(max_err_nums=0)
    put(m, status("p1"))
    m.record_error("p1")
    applied = m.put(status("p1"))  # a restarted pump re-registers online: same state
    assert not applied.availability_changed
    assert available_ids(m) == []  # the prober brings it back


def test_host_change_asks_for_a_reconnect_and_score_updates_bump_the_version() -> None:
    m = Membership()
    put(m, status("p1", host="127.0.0.1:1"))
    v = m.version
    applied = m.put(status("p1", host="127.0.0.1:2"))
    assert applied.reconnect
    info = m.get("p1")
    assert info is not None
    assert info.addr == "127.0.0.1:2"
    assert m.version == v  # same availability, same score
    m.put(status("p1", host="127.0.0.1:2", score=40))
    assert m.version == v + 1
    assert m.candidates() == [Candidate("p1", 40)]
    m.put(status("p1", host="127.0.0.1:2", score=40))
    assert m.version == v + 1


def test_delete_removes_a_pump() -> None:
    m = Membership()
    put(m, status("p1"))
    put(m, status("p2"))
    applied = m.apply(NodeChange(NodeKind.PUMP, "p1", None, 5))
    assert applied.change is Change.REMOVED
    assert available_ids(m) == ["p2"]
    assert m.get("p1") is None
    assert m.apply(NodeChange(NodeKind.PUMP, "p1", None, 6)).change is Change.NONE
    assert m.record_error("p1") is False
    assert m.record_success("p1") is False
    assert len(m) == 1


def test_negative_max_err_nums_is_refused() -> None:
    with pytest.raises(ValueError, match="max_err_nums"):
        Membership(-1)


def test_a_timed_out_call_makes_a_pump_unavailable_at_once_until_a_success() -> None:
    m = Membership()  # max_err_nums = 10: a plain error would leave it available
    put(m, status("p1"))
    put(m, status("p2"))
    version = m.version
    assert m.record_error("p1", suspect=True) is True
    assert m.version > version  # the selector is refreshed: no new prewrites for p1
    assert available_ids(m) == ["p2"]
    info = m.get("p1")
    assert info is not None
    assert (info.available, info.suspect, info.err_num, info.state) == (False, True, 1, NodeState.ONLINE)
    assert [p.node_id for p in m.suspects()] == ["p1"]  # probed quickly ...
    assert [p.node_id for p in m.to_probe()] == ["p1"]  # ... and by the regular probe
    assert m.record_error("p1") is False  # a plain error keeps it suspect
    assert m.record_success("p1") is True  # a probe or a call answered
    assert available_ids(m) == ["p1", "p2"]
    assert m.suspects() == []


def test_a_plain_error_does_not_make_a_pump_suspect() -> None:
    m = Membership()
    put(m, status("p1"))
    assert m.record_error("p1", suspect=False) is False
    assert available_ids(m) == ["p1"]
    assert m.suspects() == []


def test_suspects_are_online_pumps_only_and_going_online_again_clears_suspicion() -> None:
    m = Membership()
    put(m, status("p1"))
    m.record_error("p1", suspect=True)
    m.put(status("p1", NodeState.PAUSED))
    assert m.suspects() == []  # not probed while paused
    m.put(status("p1", NodeState.ONLINE))  # a pump that went online again starts clean
    assert available_ids(m) == ["p1"]
    info = m.get("p1")
    assert info is not None
    assert not info.suspect

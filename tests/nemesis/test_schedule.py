"""The fault schedule: the same seed gives the same schedule, every kind comes up, bad knobs are refused."""

from __future__ import annotations

import pytest

from tests.nemesis.schedule import KINDS, make_schedule


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    assert make_schedule(7, 40) == make_schedule(7, 40)
    assert make_schedule(7, 40) != make_schedule(8, 40)


def test_a_long_schedule_holds_every_kind_and_crashes_during_recovery() -> None:
    steps = make_schedule(1, 400)
    assert {s.kind for s in steps} == set(KINDS)
    crash_at = [i for i, s in enumerate(steps) if s.kind == "crash" and i > 0]
    assert any(steps[i - 1].recover == 0.0 for i in crash_at)
    assert any(steps[i - 1].recover > 0.0 for i in crash_at)
    assert all(1.0 <= s.hold <= 30.0 for s in steps if s.kind == "freeze")
    assert all(5 <= s.amount <= 20 for s in steps if s.kind == "loss")
    assert all(s.peer for s in steps if s.kind == "partition")


def test_a_schedule_as_long_as_the_kinds_holds_each_once() -> None:
    assert sorted(s.kind for s in make_schedule(11, len(KINDS))) == sorted(KINDS)


def test_kinds_can_be_narrowed() -> None:
    steps = make_schedule(3, 50, kinds=("freeze", "crash"), max_freeze=5.0)
    assert {s.kind for s in steps} <= {"freeze", "crash"}
    assert all(s.hold <= 5.0 for s in steps)


@pytest.mark.parametrize(
    ("kw", "message"),
    [({"kinds": ("flood",)}, "unknown fault kinds: flood"), ({"max_hold": 0.0}, "max_hold > 0")],
)
def test_bad_knobs_are_refused(kw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_schedule(1, 5, **kw)  # type: ignore[arg-type]


def test_steps_describe_themselves() -> None:
    text = make_schedule(5, 30)[0].describe()
    assert " for " in text
    assert text.endswith("s")

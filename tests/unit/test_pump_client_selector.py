"""Pump selection strategies: range rotation and reset, hash stability, score weighting."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from common.errors import ConfigError
from pump_client.selector import (
    TINY_WEIGHT,
    Candidate,
    HashSelector,
    RangeSelector,
    ScoreSelector,
    make_selector,
    weight,
)


def cands(*ids: str, scores: dict[str, int] | None = None) -> list[Candidate]:
    return [Candidate(i, (scores or {}).get(i, 0)) for i in ids]


# ------------------------------------------------------------------------------------------------ range


def test_range_rotates_over_sorted_node_ids() -> None:
    sel = RangeSelector()
    sel.set_pumps(cands("c", "a", "b"))
    assert [sel.select(ts, 0) for ts in range(7)] == ["a", "b", "c", "a", "b", "c", "a"]


def test_range_offset_resets_when_the_set_changes() -> None:
    sel = RangeSelector()
    sel.set_pumps(cands("a", "b", "c"))
    assert [sel.select(0, 0), sel.select(0, 0)] == ["a", "b"]
    sel.set_pumps(cands("a", "b", "d"))
    assert sel.select(0, 0) == "a"  # reset to the first


def test_range_keeps_offset_when_only_scores_or_order_change() -> None:
    sel = RangeSelector()
    sel.set_pumps(cands("a", "b", "c"))
    assert [sel.select(0, 0), sel.select(0, 0)] == ["a", "b"]
    sel.set_pumps(cands("c", "b", "a", scores={"a": 50}))
    assert sel.select(0, 0) == "c"


def test_range_offset_wraps_when_the_set_shrinks() -> None:
    sel = RangeSelector()
    sel.set_pumps(cands("a", "b", "c"))
    for _ in range(2):
        sel.select(0, 0)
    sel.set_pumps(cands("a"))
    assert [sel.select(0, 0) for _ in range(3)] == ["a", "a", "a"]


def test_selectors_return_none_without_pumps() -> None:
    for sel in (RangeSelector(), HashSelector(), ScoreSelector(random.Random(1))):
        assert sel.select(5, 0) is None
        sel.set_pumps(cands("a"))
        sel.set_pumps([])
        assert sel.select(5, 0) is None


# ------------------------------------------------------------------------------------------------- hash


def test_hash_is_start_ts_plus_retry_mod_n_over_sorted_ids() -> None:
    sel = HashSelector()
    sel.set_pumps(cands("p2", "p0", "p1"))
    assert sel.select(9, 0) == "p0"
    assert sel.select(10, 0) == "p1"
    assert sel.select(10, 1) == "p2"
    assert sel.select(10, 2) == "p0"


def test_hash_is_stable_whatever_order_etcd_returns() -> None:
    ids = [f"pump-{i}" for i in range(7)]
    rng = random.Random(42)
    reference = HashSelector()
    reference.set_pumps(cands(*ids))
    expected = [reference.select(ts, r) for ts in range(1000, 1100) for r in range(3)]
    for _ in range(20):
        shuffled = ids[:]
        rng.shuffle(shuffled)
        sel = HashSelector()
        sel.set_pumps(cands(*shuffled))
        assert [sel.select(ts, r) for ts in range(1000, 1100) for r in range(3)] == expected


# ------------------------------------------------------------------------------------------------ score


def test_score_choice_is_proportional_to_scores() -> None:
    scores = {"a": 10, "b": 30, "c": 60}
    sel = ScoreSelector(random.Random(20240101))
    sel.set_pumps(cands("c", "a", "b", scores=scores))
    n = 60_000
    counts = Counter(sel.select(ts, 0) for ts in range(n))
    # seeded, so deterministic; and 0.02 is >= 10 standard deviations at n=60000 for any seed
    for node_id, score in scores.items():
        assert counts[node_id] / n == pytest.approx(score / 100, abs=0.02)
    assert sel.weights() == pytest.approx({"a": 0.1, "b": 0.3, "c": 0.6})


def test_score_zero_gets_a_tiny_weight_not_zero() -> None:
    sel = ScoreSelector(random.Random(7))
    sel.set_pumps(cands("a", "b", scores={"a": 100, "b": 0}))
    w = sel.weights()
    assert w["b"] == pytest.approx(TINY_WEIGHT / (100 + TINY_WEIGHT))
    assert w["b"] > 0
    assert weight(-5) == TINY_WEIGHT
    picks = Counter(sel.select(0, 0) for _ in range(200_000))
    assert 0 < picks["b"] < 100  # expected 20


def test_score_all_zero_falls_back_to_round_robin() -> None:
    sel = ScoreSelector(random.Random(3))
    sel.set_pumps(cands("b", "a", "c"))
    assert [sel.select(ts, 0) for ts in range(6)] == ["a", "b", "c", "a", "b", "c"]
    assert sel.weights() == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})


def test_score_follows_updated_scores() -> None:
    sel = ScoreSelector(random.Random(11))
    sel.set_pumps(cands("a", "b", scores={"a": 50, "b": 50}))
    sel.set_pumps(cands("a", "b", scores={"a": 100, "b": 0}))
    assert sel.weights()["a"] > 0.999


# -------------------------------------------------------------------------------------------- factory


def test_make_selector_by_name_and_unknown_names_are_an_error() -> None:
    assert isinstance(make_selector("range"), RangeSelector)
    assert isinstance(make_selector("hash"), HashSelector)
    assert isinstance(make_selector("score"), ScoreSelector)
    with pytest.raises(ConfigError, match=r"unknown pump client strategy 'rnage'.*range, hash, score"):
        make_selector("rnage")

"""The seeded random schedule of faults (pure: a seed and a few knobs in, a list of steps out).

Every step names one fault kind, its targets and its parameters, how long it holds, and how long the
cluster gets to recover before the next one.  A `crash` step may follow a heal at once (no recovery
pause): a crash during recovery from the previous fault.  The same seed always gives the same schedule,
so a failed run can be replayed from the seed printed with its failure.  The first steps take every kind
once, in a seeded order, so even a short schedule holds each kind of fault.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Final

KINDS: Final = ("partition", "loss", "bandwidth", "delay", "freeze", "crash", "disk", "skew")
PUMPS: Final = ("pump0", "pump1", "pump2")
FREEZABLE: Final = (*PUMPS, "drainer", "pd", "etcd", "writer")
CRASHABLE: Final = (*PUMPS, "drainer", "pd", "etcd", "writer")
PARTITIONS: Final = (
    # (node, peer): peer "*" = every other node; "mysql" = the MariaDB forwarder on the host side
    ("pump0", "etcd"),
    ("pump1", "drainer"),
    ("writer", "pump2"),
    ("drainer", "mysql"),
    ("pump2", "*"),
    ("drainer", "*"),
    ("pd", "*"),
    ("etcd", "*"),
    ("writer", "pd"),
)


@dataclass(frozen=True)
class Step:
    """One fault: `kind` on `target` (and `peer`), held for `hold` seconds, then `recover` seconds of peace."""

    kind: str
    target: str
    hold: float
    recover: float
    peer: str = ""
    one_way: bool = False
    amount: float = 0.0
    """Loss percent, bandwidth kbit/s, delay ms (low end), clock offset s, as the kind needs."""
    params: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        what = f"{self.kind} {self.target}"
        if self.peer:
            what += f" {'->' if self.one_way else '<->'} {self.peer}"
        if self.amount:
            what += f" ({self.amount:g})"
        return f"{what} for {self.hold:.1f}s, then {self.recover:.1f}s"


def make_schedule(
    seed: int,
    rounds: int,
    *,
    kinds: tuple[str, ...] = KINDS,
    max_hold: float = 10.0,
    max_freeze: float = 30.0,
    recover: float = 3.0,
) -> list[Step]:
    """`rounds` steps drawn with `random.Random(seed)`; holds up to `max_hold` s (freezes up to `max_freeze`)."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown fault kinds: {', '.join(sorted(unknown))} (known: {', '.join(KINDS)})")
    if rounds < 0 or max_hold <= 0 or recover < 0:
        raise ValueError("rounds and recover must be >= 0, max_hold > 0")
    rng = random.Random(seed)
    first = rng.sample(kinds, len(kinds))  # every kind once (in a seeded order) before any repeats
    steps: list[Step] = []
    for i in range(rounds):
        kind = first[i] if i < len(first) else rng.choice(kinds)
        hold = round(rng.uniform(1.0, max_hold), 1)
        pause = recover
        if kind == "partition":
            node, peer = rng.choice(PARTITIONS)
            steps.append(Step(kind, node, hold, pause, peer=peer, one_way=rng.random() < 0.3))
        elif kind == "loss":
            target = rng.choice((*PUMPS, "drainer", "writer", "etcd"))
            steps.append(Step(kind, target, hold, pause, amount=float(rng.randint(5, 20))))
        elif kind == "bandwidth":
            target = rng.choice((*PUMPS, "drainer"))
            steps.append(Step(kind, target, hold, pause, amount=float(rng.choice((256, 1024, 4096)))))
        elif kind == "delay":
            low = float(rng.randint(50, 250))
            steps.append(Step(kind, "mysql", hold, pause, amount=low, params={"high_ms": low + rng.randint(0, 250)}))
        elif kind == "freeze":
            hold = round(rng.uniform(1.0, max_freeze), 1)
            steps.append(Step(kind, rng.choice(FREEZABLE), hold, pause))
        elif kind == "crash":
            # a crash may land while the cluster still recovers from the previous fault
            if steps and rng.random() < 0.5:
                steps[-1] = replace(steps[-1], recover=0.0)
            steps.append(Step(kind, rng.choice(CRASHABLE), round(rng.uniform(0.5, 3.0), 1), pause))
        elif kind == "disk":
            steps.append(Step(kind, rng.choice(PUMPS), hold, pause))
        else:  # skew: behind only (see faketime_prefix: a clock ahead freezes grpc's C core under libfaketime)
            offset = -float(rng.choice((30, 300, 3600)))
            steps.append(Step(kind, rng.choice((*PUMPS, "drainer")), hold, pause, amount=offset))
    return steps

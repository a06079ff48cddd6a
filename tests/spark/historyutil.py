"""Building DDL histories in tests with the writer's own planner (no etcd)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from common.schema.infoschema import InfoSchema
from common.schema.model import Job
from upstream.ddl import Planner


class HistoryBuilder:
    """Plans jobs one after the other, each at the next schema version; `ts` is each job's start_ts."""

    def __init__(self) -> None:
        self.schema = InfoSchema()
        self.jobs: list[Job] = []
        self._ids = itertools.count(100)

    def _alloc(self, n: int) -> int:
        first = next(self._ids)
        for _ in range(n - 1):
            next(self._ids)
        return first

    def add(self, plan: Callable[[Planner], Job], ts: int) -> Job:
        job = plan(Planner(self.schema, self._alloc, ts))
        self.schema.apply(job)
        self.jobs.append(job)
        return job

"""The `arbiter` as a real process for the functional tests: start, its /status and /metrics, its checkpoint row."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from tests.harness.mysql import MySQLDSN
from tools.procs import ManagedProcess, free_port, port_open, python_module_argv, wait_for

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0


class ArbiterProcess:
    """`python -m arbiter.main` reading `topic` from `brokers` into `dsn`, its checkpoint table in
    `checkpoint_schema`, 4 loader workers; `extra` flags come last and override."""

    def __init__(self, tmp: Path, brokers: str, dsn: MySQLDSN, topic: str, checkpoint_schema: str, *extra: str) -> None:
        self.dsn = dsn
        self.topic = topic
        self.schema = checkpoint_schema
        self.port = free_port()
        argv = python_module_argv(
            "arbiter.main",
            "--up.topic", topic,
            "--up.kafka-addrs", brokers,
            "--up.connect-timeout", "10s",
            "--down.host", dsn.host,
            "--down.port", str(dsn.port),
            "--down.user", dsn.user,
            "--down.password", dsn.password,
            "--down.worker-count", "4",
            "--down.checkpoint-schema", checkpoint_schema,
            "--addr", f"127.0.0.1:{self.port}",
            *extra,
        )  # fmt: skip
        self.process = ManagedProcess("arbiter", argv, tmp / "arbiter.log", cwd=ROOT)

    def start(self, *, ready: bool = True) -> ArbiterProcess:
        """Start it; with `ready`, wait until its HTTP port answers."""
        self.process.start()
        if ready:
            self.process.wait_ready(lambda: port_open("127.0.0.1", self.port), WAIT)
        return self

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=5) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
        return doc

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def applied_ts(self) -> int:
        """/status applied_ts; 0 while it does not answer."""
        try:
            return int(self.status()["applied_ts"])
        except OSError:
            return 0

    def checkpoint(self) -> tuple[int, int] | None:
        """(ts, status) of this topic's row, None before the table or the row exists."""
        conn = self.dsn.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SHOW TABLES FROM `{self.schema}` LIKE 'arbiter_checkpoint'")
                if cur.fetchone() is None:
                    return None
                cur.execute(
                    f"SELECT ts, status FROM `{self.schema}`.arbiter_checkpoint WHERE topic_name = %s", (self.topic,)
                )
                found = cur.fetchone()
        finally:
            conn.close()
        return None if found is None else (int(found[0]), int(found[1]))

    def wait_checkpoint(self, ts: int, timeout: float = WAIT) -> None:
        """Until the saved checkpoint reaches `ts` (the process must stay alive meanwhile)."""

        def reached() -> bool:
            cp = self.checkpoint()
            return cp is not None and cp[0] >= ts

        self.process.wait_ready(reached, timeout)

    def wait_applied(self, ts: int, timeout: float = WAIT) -> None:
        """Until /status says `ts` is applied (the process must stay alive meanwhile)."""
        self.process.wait_ready(lambda: self.applied_ts() >= ts, timeout)

    def wait_log(self, text: str) -> None:
        wait_for(lambda: text in self.process.log_since_start(), WAIT, f"arbiter log line {text!r}")

    def stop(self) -> int | None:
        """SIGTERM; the exit status."""
        return self.process.stop(timeout=WAIT)

    def exit_status(self) -> int | None:
        assert self.process.proc is not None
        return self.process.proc.wait(WAIT)

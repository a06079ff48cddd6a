"""`binlog-spark audit` / `audit-binlog` as the installed command runs them: bad input fails before Spark starts.

Each case is one process of the real command (`python -m spark_jobs.cli`): one line on stderr, exit
status 2, nothing created.  The audits themselves run in-process on the shared session
(test_audit_stores.py, test_audit_binlog.py, test_audit_cluster.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark.test_replay_cli import one_line, spark_cli

pytestmark = pytest.mark.spark


def test_help_lists_both_subcommands() -> None:
    proc = spark_cli("--help")
    assert proc.returncode == 0, proc.stderr
    assert "audit-binlog" in proc.stdout
    audit = spark_cli("audit", "--help")
    assert audit.returncode == 0, audit.stderr
    for flag in ("--upstream", "--downstream", "--tables", "--chunk-size", "--format", "--json"):
        assert flag in audit.stdout


def test_audit_bad_input(tmp_path: Path) -> None:
    missing = tmp_path / "up.db"
    proc = spark_cli("audit", "--upstream", f"sqlite:{missing}", "--downstream", "mysql://root@127.0.0.1:1")
    assert proc.returncode == 2
    assert one_line(proc) == f"binlog-spark audit: sqlite:{missing}: no such sqlite file"
    assert not missing.exists()
    missing.touch()
    proc = spark_cli("audit", "--upstream", f"sqlite:{missing}", "--downstream", "mysql://root@127.0.0.1:1")
    assert proc.returncode == 2
    assert one_line(proc).startswith("binlog-spark audit: cannot connect to mysql://root@127.0.0.1:1: ")
    proc = spark_cli("audit", "--upstream", f"sqlite:{missing}", "--downstream", f"sqlite:{missing}")
    assert proc.returncode == 2
    assert (
        one_line(proc) == f"binlog-spark audit: upstream sqlite:{missing} has no tables (give --tables or another DSN)"
    )
    proc = spark_cli("audit", "--upstream", "x", "--downstream", "y", "--chunk-size", "0")
    assert proc.returncode == 2
    assert "--chunk-size: must be positive, got 0" in one_line(proc)
    assert missing.stat().st_size == 0  # opened read-only, never written


def test_audit_binlog_not_a_pump_directory(tmp_path: Path) -> None:
    proc = spark_cli("audit-binlog", "--pumps", str(tmp_path))
    assert proc.returncode == 2
    assert one_line(proc) == (
        f"binlog-spark audit-binlog: {tmp_path} is not a pump data directory: no value/NNNNNN.vlog files in it"
    )

"""`binlog-playground` options: the command line, checked into a frozen :class:`Options`."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from common.audit import MySQLServer
from common.config import ArgumentParser, parse_duration
from common.errors import ConfigError
from common.version import add_version_flag
from upstream import WORKLOADS

PROG = "binlog-playground"
DEFAULT_DIR = "playground-data"
DEFAULT_WORKLOAD = "sysbench"
DEFAULT_DURATION = 30.0
DEFAULT_THREADS = 4
DEFAULT_PUMPS = 3
DEFAULT_CATCH_UP = 120.0
DATABASE_PREFIX = "playground_"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


@dataclass(frozen=True)
class Options:
    base: Path
    clean: bool
    stop: bool
    keep: bool
    workload: str
    duration: float
    threads: int
    pumps: int | None
    """None: as recorded in the directory, else DEFAULT_PUMPS."""
    downstream: MySQLServer | None
    """None: the embedded sqlite file."""
    database: str
    seed: int
    catch_up_timeout: float

    @property
    def downstream_text(self) -> str:
        return "sqlite" if self.downstream is None else self.downstream.describe()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _duration(text: str) -> float:
    value = parse_duration(text)
    if value <= 0:
        raise ValueError("must be positive")
    return value


_positive_int.__name__ = "positive integer"
_duration.__name__ = "duration"


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        description="Start etcd, pd-server, pumps, a drainer and a workload locally; audit the result.",
    )
    p.add_argument(
        "--dir", default=DEFAULT_DIR, metavar="PATH", help=f"where everything lives (default ./{DEFAULT_DIR})"
    )
    p.add_argument("--clean", action="store_true", help="wipe the directory (and the downstream databases) first")
    p.add_argument("--stop", action="store_true", help="stop the cluster recorded in --dir (e.g. one left by --keep)")
    p.add_argument("--keep", action="store_true", help="leave the cluster running at the end and say how to stop it")
    p.add_argument(
        "--workload", default=DEFAULT_WORKLOAD, choices=sorted(WORKLOADS), help=f"(default {DEFAULT_WORKLOAD})"
    )
    p.add_argument("--duration", type=_duration, default=DEFAULT_DURATION, metavar="SECONDS", help="e.g. 30, 2m")
    p.add_argument("--threads", type=_positive_int, default=None, help="workload threads (default 4; bigtxn 1)")
    p.add_argument("--pumps", type=_positive_int, default=None, help=f"number of pumps (default {DEFAULT_PUMPS})")
    p.add_argument(
        "--downstream", default="sqlite", metavar="URL",
        help="sqlite (default: <dir>/drainer/downstream.db) or mysql://user:pass@host:port",
    )  # fmt: skip
    p.add_argument(
        "--database",
        default="",
        metavar="NAME",
        help=f"logical database of the workload (default {DATABASE_PREFIX}<workload>)",
    )
    p.add_argument("--seed", type=int, default=None, help="workload seed (default: random, printed)")
    p.add_argument(
        "--catch-up-timeout", type=_duration, default=DEFAULT_CATCH_UP, metavar="SECONDS",
        help=f"how long the drainer may take to catch up at the end (default {DEFAULT_CATCH_UP:.0f}s)",
    )  # fmt: skip
    add_version_flag(p)
    return p


def parse_args(argv: list[str] | None) -> Options:
    """Options from the command line; ConfigError naming what is wrong."""
    args = build_parser().parse_args(argv)
    if args.stop and (args.clean or args.keep):
        raise ConfigError("--stop goes with --dir only")
    text = args.downstream.strip()
    downstream = None if text.lower() == "sqlite" else MySQLServer.parse(text)
    return Options(
        base=Path(args.dir).expanduser().absolute(),
        clean=args.clean,
        stop=args.stop,
        keep=args.keep,
        workload=args.workload,
        duration=args.duration,
        threads=args.threads or (1 if args.workload == "bigtxn" else DEFAULT_THREADS),
        pumps=args.pumps,
        downstream=downstream,
        database=args.database or DATABASE_PREFIX + args.workload,
        seed=random.SystemRandom().randrange(2**31) if args.seed is None else args.seed,
        catch_up_timeout=args.catch_up_timeout,
    )

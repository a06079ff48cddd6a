#!/usr/bin/env python3
"""The `mariadb` image's entry point (Dockerfile target `mariadb`): Debian's mariadb-server as PID 1.

    docker run -e MARIADB_ROOT_PASSWORD=secret -v data:/var/lib/mysql tidb-binlog-mariadb [MARIADBD-FLAGS...]

- An empty data directory (/var/lib/mysql, or MARIADB_DATADIR; the socket and the init file are in
  /run/mysqld, or MARIADB_RUN_DIR) is initialised with mariadb-install-db
  (root@localhost by unix socket only, no test database).
- Every start hands mariadbd an init file that creates root@'%' with MARIADB_ROOT_PASSWORD (or sets it
  again): changing the variable changes the password on the next start.
- mariadbd then replaces this process (exec): it is PID 1 and gets `docker stop`'s SIGTERM itself.  It
  listens on 0.0.0.0:3306; extra arguments are passed on to it.

A missing MARIADB_ROOT_PASSWORD, or a failed initialisation, is one line on stderr and exit status 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

PROG: Final = "tidb-binlog-mariadb"
DEFAULT_DATADIR: Final = "/var/lib/mysql"
DEFAULT_RUN_DIR: Final = "/run/mysqld"


def sql_string(text: str) -> str:
    """`text` as a single-quoted MariaDB string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\0", "\\0") + "'"


def init_sql(password: str) -> str:
    """Statements run at every start: root may connect from anywhere with `password`."""
    pw = sql_string(password)
    return (
        f"CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY {pw};\n"
        f"ALTER USER 'root'@'%' IDENTIFIED BY {pw};\n"
        "GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;\n"
    )


def mariadbd_argv(datadir: str, run_dir: Path, init_file: Path, extra: Sequence[str]) -> list[str]:
    return [
        "mariadbd",
        f"--datadir={datadir}",
        "--bind-address=0.0.0.0",
        "--port=3306",
        f"--socket={run_dir / 'mysqld.sock'}",
        f"--init-file={init_file}",
        "--skip-name-resolve",
        *extra,
    ]


def fail(message: str) -> int:
    sys.stderr.write(f"{PROG}: {message}\n")
    return 2


def main(argv: Sequence[str]) -> int:
    password = os.environ.get("MARIADB_ROOT_PASSWORD", "")
    if not password:
        return fail("set MARIADB_ROOT_PASSWORD (the password of root@'%')")
    datadir = os.environ.get("MARIADB_DATADIR", DEFAULT_DATADIR)
    if not (Path(datadir) / "mysql").is_dir():
        sys.stderr.write(f"{PROG}: initialising {datadir}\n")
        done = subprocess.run(
            [
                "mariadb-install-db",
                f"--datadir={datadir}",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            return fail(f"mariadb-install-db failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    run_dir = Path(os.environ.get("MARIADB_RUN_DIR", DEFAULT_RUN_DIR))
    init_file = run_dir / "init.sql"
    fd = os.open(init_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(init_sql(password))
    sys.stdout.flush()
    try:
        os.execvp("mariadbd", mariadbd_argv(datadir, run_dir, init_file, argv))
    except OSError as exc:
        sys.stderr.write(f"{PROG}: cannot run mariadbd: {exc.strerror or exc}\n")
        return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

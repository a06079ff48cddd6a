"""Find a MySQL/MariaDB server for tests (docs/architecture.md#testing).

Order: $BINLOG_TEST_MYSQL_DSN, then root@127.0.0.1:3306 if reachable, then a
private `mariadbd` started in a temp dir if the binary is installed.  If none
works the tests that need MySQL are skipped with the reason, except under
CI=true, where a missing MySQL fails the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pymysql

from tools.procs import ManagedProcess, free_port, wait_for


@dataclass(frozen=True)
class MySQLDSN:
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = "root"
    password: str = ""
    database: str | None = None
    ssl_ca: str | None = None
    """A CA file: connect with TLS, verifying the server's certificate and name (a TLS-only server)."""

    @classmethod
    def parse(cls, dsn: str) -> MySQLDSN:
        parts = urlsplit(dsn if "://" in dsn else f"mysql://{dsn}")
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=parts.path.lstrip("/") or None,
        )

    def url(self) -> str:
        auth = self.user + (f":{self.password}" if self.password else "")
        return f"mysql://{auth}@{self.host}:{self.port}/{self.database or ''}"

    def connect(self, database: str | None = None) -> pymysql.connections.Connection[pymysql.cursors.Cursor]:
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=database or self.database,
            autocommit=True,
            connect_timeout=3,
            ssl_ca=self.ssl_ca,
            ssl_verify_cert=True if self.ssl_ca else None,
            ssl_verify_identity=True if self.ssl_ca else None,
        )

    def with_database(self, name: str) -> MySQLDSN:
        return replace(self, database=name)


def _reachable(dsn: MySQLDSN) -> str | None:
    """None if we can connect, else the reason."""
    try:
        conn = dsn.connect()
    except pymysql.MySQLError as exc:
        return f"{dsn.host}:{dsn.port}: {exc}"
    conn.close()
    return None


@dataclass(frozen=True)
class ServerTLS:
    """The files of a TLS-only server: its CA, certificate and key (PEM)."""

    ca: Path
    cert: Path
    key: Path


class PrivateMariaDB:
    """A throw-away mariadbd in a temp dir (used when no server is reachable, and by TLS tests).

    With `tls`, the server has that certificate and `require_secure_transport=ON`: a client without
    TLS is refused, and the DSN `start()` returns carries the CA (its own checks connect with TLS)."""

    def __init__(self, tls: ServerTLS | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="binlog-mariadb-"))
        self.port = free_port()
        self.process: ManagedProcess | None = None
        self.tls = tls

    def start(self) -> MySQLDSN:
        installer = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
        server = shutil.which("mariadbd") or shutil.which("mysqld")
        if not installer or not server:
            raise RuntimeError("mariadbd is not installed")
        data = self.dir / "data"
        subprocess.run(
            # --no-defaults: the system my.cnf (user=mysql, its log file) must not apply to a temp dir
            [
                installer,
                "--no-defaults",
                "--user=root",
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
        )
        argv = [
            server,
            "--no-defaults",
            f"--datadir={data}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.dir / 'mysqld.sock'}",
            "--skip-grant-tables=0",
            "--user=root",
        ]
        if self.tls is not None:
            argv += [
                f"--ssl-ca={self.tls.ca}",
                f"--ssl-cert={self.tls.cert}",
                f"--ssl-key={self.tls.key}",
                "--require-secure-transport=ON",
            ]
        self.process = ManagedProcess("mariadbd", argv, self.dir / "mariadbd.log")
        self.process.start()
        dsn = MySQLDSN(port=self.port, ssl_ca=str(self.tls.ca) if self.tls is not None else None)
        self.process.wait_ready(lambda: _reachable(dsn) is None, 60)
        return dsn

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def find_mysql() -> tuple[MySQLDSN | None, str, PrivateMariaDB | None]:
    """(dsn, how it was found or why none was, private server to stop later)."""
    env = os.environ.get("BINLOG_TEST_MYSQL_DSN")
    if env:
        dsn = MySQLDSN.parse(env)
        reason = _reachable(dsn)
        return (dsn, "BINLOG_TEST_MYSQL_DSN", None) if reason is None else (None, reason, None)
    local = MySQLDSN()
    reason = _reachable(local)
    if reason is None:
        return local, "local 127.0.0.1:3306", None
    private = PrivateMariaDB()
    try:
        return private.start(), "private mariadbd", private
    except (RuntimeError, OSError, subprocess.CalledProcessError, TimeoutError) as exc:
        private.stop()
        return None, f"no MySQL: {reason}; private mariadbd: {exc}", None


def unique_db_name(prefix: str = "t") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def wait_mysql(dsn: MySQLDSN, timeout: float = 30) -> None:
    wait_for(lambda: _reachable(dsn) is None, timeout, f"MySQL at {dsn.host}:{dsn.port}")

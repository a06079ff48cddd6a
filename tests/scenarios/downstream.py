"""Find and kill one process's connections to the downstream MySQL (Linux /proc).

The MariaDB of the tests is shared: other tests' drainers and writers connect as root from
127.0.0.1 too, so "every connection but mine" would kill theirs.  A connection belongs to our
drainer when its client port is one of the drainer process's own TCP sockets to the server:

    /proc/<pid>/fd/*        -> socket:[inode]
    /proc/<pid>/net/tcp{,6} -> inode, local port, remote port, state
    processlist.HOST        -> "<client host>:<client port>"
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pymysql

TCP_ESTABLISHED = "01"


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets `pid` holds open (empty when it is gone)."""
    inodes: set[int] = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return inodes
    for name in names:
        try:
            target = os.readlink(fd_dir / name)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def parse_proc_tcp(text: str) -> list[tuple[int, int, str, int]]:
    """(local port, remote port, state, inode) of each line of a /proc/net/tcp{,6} table (pure)."""
    out: list[tuple[int, int, str, int]] = []
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10:
            continue
        local, remote, state, inode = f[1], f[2], f[3], f[9]
        out.append((int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16), state, int(inode)))
    return out


def client_ports(pid: int, server_port: int) -> set[int]:
    """Local ports of `pid`'s established TCP connections to `server_port`."""
    inodes = socket_inodes(pid)
    ports: set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            text = Path(f"/proc/{pid}/net/{table}").read_text()
        except OSError:
            continue
        for local, remote, state, inode in parse_proc_tcp(text):
            if inode in inodes and remote == server_port and state == TCP_ESTABLISHED:
                ports.add(local)
    return ports


def connection_ids(conn: Any, pid: int, server_port: int) -> list[int]:
    """Processlist ids of `pid`'s connections, through `conn` (a pymysql connection to the server)."""
    ports = client_ports(pid, server_port)
    if not ports:
        return []
    with conn.cursor() as cur:
        cur.execute("SELECT ID, HOST FROM information_schema.PROCESSLIST")
        rows = cur.fetchall()
    conn.commit()
    ids = []
    for cid, host in rows:
        _, _, port = str(host or "").rpartition(":")
        if port.isdigit() and int(port) in ports:
            ids.append(int(cid))
    return ids


def kill_connections(conn: Any, ids: list[int]) -> int:
    """KILL CONNECTION each id; returns how many were still there to kill."""
    killed = 0
    with conn.cursor() as cur:
        for cid in ids:
            try:
                cur.execute(f"KILL CONNECTION {int(cid)}")
                killed += 1
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] == 1094:  # unknown thread id: it closed meanwhile
                    continue
                raise
    return killed

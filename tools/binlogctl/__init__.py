"""`binlogctl`: list pumps and drainers, change their state, write a drainer savepoint, encrypt a password.

Commands (docs/architecture.md#tools; options in tools/binlogctl/options.py, output in tools/binlogctl/render.py):

    pumps | drainers        the nodes in etcd (`/tidb-binlog/v1/<kind>/<id>`) as a table, or `--json` the
                            stored values; offline nodes only with --show-offline-nodes. `drainers` (table)
                            also asks each online drainer's GET /status which pump, if any, holds its
                            merge back (`stalled_pumps`), one note line each under the table; a drainer
                            whose status cannot be fetched is noted so, and the listing still succeeds
    update-pump | update-drainer --node-id ID --state S
                            rewrite the node's etcd value with state S (for dead nodes: a running node
                            republishes its own state with its next heartbeat). One etcd compare-and-put
                            against the value read, so a concurrent heartbeat is never half-overwritten
    pause-* | offline-*  --node-id ID
                            PUT http(s)://<status addr>/state/<ID>/pause|close on the node itself and print
                            its answer. The node's etcd `host` is its gRPC address; its HTTP API is on its
                            own status-addr (docs/architecture.md#ports), found in this order: --status-addr; the node's
                            label `status-addr` (`label.labels`) if it publishes one; for a node on the
                            default gRPC port (pump 8250, drainer 8249), the default status port on the
                            same host (18250, 18249). Otherwise the command says to pass --status-addr
    generate_meta           a fresh TSO from pd-server (found through etcd at --pd-urls), written to
                            `<data-dir>/savepoint` (temp file, fsync, rename) for a drainer's file checkpoint;
                            `--commit-ts TS` (ours) writes TS instead, after checking it is not ahead of
                            that fresh TSO (common/tso_guard.py: one line and exit 1, nothing written)
    encrypt --text T        print T encrypted for `encrypted_password` (common/encrypt.py)

TLS: with --ssl-ca (and --ssl-cert / --ssl-key, which servers requiring a client certificate need), etcd,
pd-server and the nodes' HTTP APIs are reached over TLS (https), as the original.

Exit status: 0 done; 1 the operation failed (unknown node id, etcd or pd-server unreachable, the node
refused or cannot be reached); 2 bad command line. Every failure is one line on stderr, and a refused
command changes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Final, TextIO

from common import encrypt as encryption
from common.cli import fail
from common.errors import BinlogError, ConfigError, RegistryError
from common.etcd import EtcdClient
from common.pd_client import LEADER_KEY, TSOClient, read_leader
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from common.tls import TLS
from common.tso_guard import Present, check_not_ahead
from common.version import build_info
from tools.binlogctl.options import (
    ACTION_COMMANDS,
    LIST_COMMANDS,
    PROG,
    UPDATE_COMMANDS,
    Options,
    parse,
)
from tools.binlogctl.render import json_list, node_table, savepoint_text, stall_notes, stalled_text

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
SAVEPOINT_NAME: Final = "savepoint"
STATUS_ADDR_LABEL: Final = "status-addr"
DEFAULT_STATUS_PORTS: Final = {NodeKind.PUMP: (8250, 18250), NodeKind.DRAINER: (8249, 18249)}
"""(default gRPC port, default status port) of each kind (docs/architecture.md#ports)."""
UPDATE_ATTEMPTS: Final = 5
"""Compare-and-put rounds of update-*: a live node's heartbeat may change the value in between."""


class CommandError(BinlogError):
    """The command could not be done (exit status 1); the message is the one line to print."""


def _noun(kind: NodeKind) -> str:
    return kind.value[:-1]


# ----------------------------------------------------------------------------------------------- registry


def read_nodes(etcd: EtcdClient, registry: Registry, kind: NodeKind) -> list[tuple[bytes, NodeStatus]]:
    """Every (stored value, status) of a kind, by node id; malformed values are reported and skipped."""
    kvs, _ = etcd.get_prefix(registry.prefix(kind))
    nodes: list[tuple[bytes, NodeStatus]] = []
    for kv in kvs:
        if registry.node_id_of(kind, kv.key) is None:
            continue
        try:
            nodes.append((kv.value, NodeStatus.from_json(kv.value)))
        except RegistryError as exc:
            print(f"{PROG}: skipping {kv.key}: {exc}", file=sys.stderr)
    return sorted(nodes, key=lambda item: item[1].node_id)


def not_found(etcd: EtcdClient, registry: Registry, kind: NodeKind, node_id: str) -> CommandError:
    known = [s.node_id for _, s in read_nodes(etcd, registry, kind)]
    listed = ", ".join(known) if known else "none"
    return CommandError(
        f"no {_noun(kind)} with node id {node_id!r} in etcd at {etcd.describe} (registered {kind.value}: {listed})"
    )


def get_node(etcd: EtcdClient, registry: Registry, kind: NodeKind, node_id: str) -> NodeStatus:
    status = registry.get(kind, node_id)
    if status is None:
        raise not_found(etcd, registry, kind, node_id)
    return status


def update_state(etcd: EtcdClient, registry: Registry, kind: NodeKind, node_id: str, state: NodeState) -> NodeState:
    """Rewrite the node's value with `state` (everything else as stored); returns the state it had."""
    key = registry.key(kind, node_id)
    for _ in range(UPDATE_ATTEMPTS):
        kv = etcd.get(key)
        if kv is None:
            raise not_found(etcd, registry, kind, node_id)
        before = NodeStatus.from_json(kv.value)
        new = before.with_state(state).to_json()
        if etcd.compare_and_put(key, kv.value, new):
            return before.state
        again = etcd.get(key)  # a lost response of a put that did happen also returns False
        if again is not None and again.value == new.encode():
            return before.state
    raise CommandError(
        f"{_noun(kind)} {node_id!r} changed {UPDATE_ATTEMPTS} times while being updated: it is running; "
        f"use pause-{_noun(kind)} or offline-{_noun(kind)} for a live node"
    )


# ----------------------------------------------------------------------------------------------- node HTTP


def status_addr_of(kind: NodeKind, status: NodeStatus, override: str = "") -> str | None:
    """Where the node's HTTP API listens (see the module docstring), or None if it cannot be told."""
    if override:
        return override
    published = (status.labels or {}).get(STATUS_ADDR_LABEL)
    if published:
        return published
    host, _, port = status.host.rpartition(":")
    grpc_port, http_port = DEFAULT_STATUS_PORTS[kind]
    if host and port == str(grpc_port):
        return f"{host}:{http_port}"
    return None


def apply_action(
    kind: NodeKind, status: NodeStatus, action: str, addr: str, timeout: float, *, tls: TLS | None = None
) -> str:
    """PUT /state/<id>/<action> on the node (HTTPS with `tls`); its message on success, CommandError with
    its answer otherwise."""
    noun, node_id = _noun(kind), status.node_id
    scheme = "http" if tls is None else "https"
    url = f"{scheme}://{addr}/state/{urllib.parse.quote(node_id, safe='')}/{action}"
    request = urllib.request.Request(url, method="PUT")
    context = None if tls is None else tls.client_ssl_context()
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        answer = _message(exc.read()) or exc.reason
        raise CommandError(f"{noun} {node_id!r} at {addr} refused {action}: {answer} (HTTP {exc.code})") from None
    except (urllib.error.URLError, OSError) as exc:
        why = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise CommandError(
            f"cannot reach {noun} {node_id!r} HTTP API at {addr}: {why} (is it running? its address: --status-addr)"
        ) from None
    return _message(body) or body.decode("utf-8", "replace").strip()


def fetch_status(addr: str, timeout: float, *, tls: TLS | None = None) -> object:
    """GET /status of the node at `addr` (HTTPS with `tls`), parsed; CommandError saying why not."""
    scheme = "http" if tls is None else "https"
    context = None if tls is None else tls.client_ssl_context()
    try:
        with urllib.request.urlopen(f"{scheme}://{addr}/status", timeout=timeout, context=context) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        raise CommandError(f"{addr} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        why = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise CommandError(f"cannot reach {addr}: {why}") from None
    try:
        return json.loads(body)
    except ValueError:
        raise CommandError(f"{addr} answered something that is not JSON") from None


def drainer_stall_note(status: NodeStatus, timeout: float, *, tls: TLS | None = None) -> str:
    """The note `drainers` prints for an online drainer: its stalled pumps, or why they are unknown."""
    addr = status_addr_of(NodeKind.DRAINER, status)
    if addr is None:
        return "status unavailable: it publishes no status address"
    try:
        doc = fetch_status(addr, timeout, tls=tls)
    except CommandError as exc:
        return f"status unavailable: {exc}"
    return stalled_text(doc)


def _message(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return ""
    return str(doc.get("message", "")) if isinstance(doc, dict) else ""


# ----------------------------------------------------------------------------------------------- savepoint


def write_savepoint(data_dir: Path, text: str) -> Path:
    """`<data-dir>/savepoint` replaced atomically (temp file in the same directory, fsync, rename)."""
    path = data_dir / SAVEPOINT_NAME
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{SAVEPOINT_NAME}.", suffix=".tmp", dir=data_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
                os.fchmod(f.fileno(), 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


# ----------------------------------------------------------------------------------------------- commands


class Ctl:
    """One run of a command against one etcd; `close()` releases the connections."""

    def __init__(self, opts: Options, out: TextIO) -> None:
        self.opts = opts
        self.out = out
        self._etcd: EtcdClient | None = None

    @property
    def etcd(self) -> EtcdClient:
        if self._etcd is None:
            t = self.opts.timeout
            self._etcd = EtcdClient(self.opts.pd_urls, timeout=max(t / 2, 0.5), retry_for=t, tls=self.opts.tls)
        return self._etcd

    def run(self) -> int:
        c = self.opts.command
        if c in LIST_COMMANDS:
            self.list_nodes(LIST_COMMANDS[c])
        elif c in UPDATE_COMMANDS:
            self.update(UPDATE_COMMANDS[c])
        elif c in ACTION_COMMANDS:
            self.action(*ACTION_COMMANDS[c])
        elif c == "generate_meta":
            self.generate_meta()
        else:
            self.out.write(encryption.encrypt(self.opts.text) + "\n")
        return EXIT_OK

    def list_nodes(self, kind: NodeKind) -> None:
        nodes = read_nodes(self.etcd, Registry(self.etcd), kind)
        shown = [n for n in nodes if self.opts.show_offline or n[1].state is not NodeState.OFFLINE]
        if self.opts.json:
            self.out.write(json_list([raw for raw, _ in shown]))
        else:
            statuses = [s for _, s in shown]
            self.out.write(node_table(statuses, self.opts.time_zone, hidden_offline=len(nodes) - len(shown)))
            if kind is NodeKind.DRAINER:
                online = [s for s in statuses if s.state is NodeState.ONLINE]
                t, tls = min(self.opts.timeout, 3.0), self.opts.tls
                self.out.write(stall_notes([(s.node_id, drainer_stall_note(s, t, tls=tls)) for s in online]))

    def update(self, kind: NodeKind) -> None:
        opts = self.opts
        assert opts.state is not None  # parse() checked it
        before = update_state(self.etcd, Registry(self.etcd), kind, opts.node_id, opts.state)
        self.out.write(f"{_noun(kind)} {opts.node_id}: state {before.value} -> {opts.state.value}\n")

    def action(self, kind: NodeKind, action: str) -> None:
        opts = self.opts
        status = get_node(self.etcd, Registry(self.etcd), kind, opts.node_id)
        addr = status_addr_of(kind, status, opts.status_addr)
        if addr is None:
            raise CommandError(
                f"{_noun(kind)} {opts.node_id!r} (gRPC {status.host}) does not publish its HTTP status address: "
                f"pass --status-addr HOST:PORT (its status-addr)"
            )
        message = apply_action(kind, status, action, addr, opts.timeout, tls=opts.tls)
        self.out.write(f"{_noun(kind)} {opts.node_id} at {addr}: {message}\n")

    def generate_meta(self) -> None:
        if read_leader(self.etcd) is None:  # said plainly here, rather than as a TSO timeout later
            raise CommandError(f"no pd-server registered in etcd at {self.opts.pd_urls} ({LEADER_KEY}): is it running?")
        tso = TSOClient(self.etcd, timeout=self.opts.timeout)
        try:
            ts = tso.get_ts()
        finally:
            tso.close()
        if self.opts.commit_ts is not None:
            check_not_ahead(
                "--commit-ts",
                self.opts.commit_ts,
                Present(ts, "the current TSO"),
                "give the last commit_ts applied downstream, or leave --commit-ts out to write the current TSO; "
                "nothing was written",
            )
            ts = self.opts.commit_ts
        path = write_savepoint(self.opts.data_dir, savepoint_text(ts, self.opts.time_zone, self.opts.time_zone_name))
        self.out.write(f"commitTS = {ts} written to {path}\n")

    def close(self) -> None:
        if self._etcd is not None:
            self._etcd.close()


# ----------------------------------------------------------------------------------------------- main


def version_text() -> str:
    """What -V prints: release version, git commit hash, build time (common/version.py), as every command."""
    return build_info().text()


def _one_line(message: str) -> str:
    return " ".join(message.split())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        opts = parse(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        return fail(PROG, _one_line(str(exc)), EXIT_USAGE)
    if opts is None:
        print(version_text())
        return EXIT_OK
    # library loggers stay quiet; what the user must see is printed by the command itself
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")
    ctl = Ctl(opts, sys.stdout)
    try:
        return ctl.run()
    except ConfigError as exc:  # a bad BINLOG_SECRET_KEY
        return fail(PROG, _one_line(str(exc)), EXIT_USAGE)
    except BinlogError as exc:
        return fail(PROG, _one_line(str(exc)), EXIT_FAILED)
    except KeyboardInterrupt:
        return fail(PROG, "interrupted", EXIT_INTERRUPTED)
    finally:
        ctl.close()

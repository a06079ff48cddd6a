"""Benchmark of PullBinlogs on a real pump process: binlogs/s and MB/s from offset 0 to the last commit.

A private etcd, pd-server and one pump run as processes in a temp dir (``--storage.sync-log true``,
``--gen-binlog-interval 24h``).  ``--writers`` threads fill the pump with ``--pairs`` committed
transactions (a prewrite carrying a ``--payload``-byte value + a commit) through WriteBinlog; after
the pump is idle (indexed), a first pull from offset 0 to the last commit checks that every commit
arrives (joined with its prewrite, in commit-ts order) and records the raw response bytes.

Then, ``--runs`` times, interleaved: one PullBinlogs stream from offset 0 on the pump, read until
the last commit, and the baseline: a bare grpcio server (its own process, identity serializers)
streaming the very same pre-serialized ``PullBinlogResp`` messages, read by the same client code
(raw bytes, no parsing; stop after the same count; the last message is compared).  Rates are
medians over runs, the ratio the median of per-run ratios; MB/s counts response message bytes.
One JSON object goes to stdout, progress to stderr; exit status 1 if anything failed.

Usage: ``python bench/pump_pull.py [--pairs N] [--payload BYTES] [--runs N] [--quick] [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import grpc
from _pumpbench import (
    CHANNEL_OPTIONS,
    BaselineServer,
    Cluster,
    RequestBuilder,
    TempDir,
    TsPool,
    env_info,
    install_sigterm,
    log,
    median,
    peak_rss_mb,
    prewrite_value,
    pull_messages,
    pull_request,
    rnd,
    run_pairs,
    wait_idle,
    write_call,
    write_frames,
)

from common.pb import pump_pb2

PUMP_ARGS = ["--storage.sync-log", "true", "--gen-binlog-interval", "24h"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    ap.add_argument("--pairs", type=int, default=20_000, help="committed transactions to pull (default 20000)")
    ap.add_argument("--payload", type=int, default=1024, help="prewrite value bytes (default 1024)")
    ap.add_argument("--runs", type=int, default=3, help="repetitions; the median is reported (default 3)")
    ap.add_argument("--writers", type=int, default=16, help="writer threads filling the pump (default 16)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2000 pairs, 1 run")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    args = ap.parse_args()
    if args.quick:
        args.pairs, args.runs = min(args.pairs, 2000), 1
    install_sigterm()
    began = time.monotonic()
    tmp = TempDir(args.keep, "bench-pump-pull-")
    cluster = Cluster(tmp.path, PUMP_ARGS)
    frames = tmp.path / "pull-messages.bin"  # written by the first pull, read by the baseline on first use
    stream_server = BaselineServer(tmp.path, "grpc-stream", frames)
    channels: list[grpc.Channel] = []
    pool: TsPool | None = None
    errors: list[str] = []
    out: dict[str, Any] = {"bench": "pump_pull", **env_info()}
    try:
        stream_server.start()  # first: no process is forked once gRPC calls run here
        cluster.start()
        pool = TsPool(cluster.etcd.url)
        builder = RequestBuilder(cluster.cluster_id)
        pump_ch = grpc.insecure_channel(cluster.pump.addr, options=CHANNEL_OPTIONS)
        channels.append(pump_ch)
        value = prewrite_value(args.payload)

        log(f"filling the pump: {args.pairs} pairs of {len(value)} B with {args.writers} writers")
        pool.refill(2 * args.pairs + 1000)
        fill = run_pairs(write_call(pump_ch), pool, builder, value, args.writers, pairs=args.pairs)
        errors += [f"fill: {e}" for e in fill.errors]
        if fill.errors or fill.pairs != args.pairs:
            raise RuntimeError(f"fill wrote {fill.pairs}/{args.pairs} pairs: {fill.errors[:1]}")
        last_ts = fill.max_commit_ts
        fill_rate = fill.pairs / fill.elapsed
        log(f"filled in {fill.elapsed:.1f}s ({fill_rate:.0f} pairs/s); waiting for the pump to index")
        wait_idle(cluster.pump_pid)

        # first pull: check every commit, keep the bytes for the baseline
        request = pull_request(cluster.cluster_id, 0)
        seen = {"commits": 0, "fakes": 0, "ordered": True, "prev": 0}
        with open(frames, "wb") as f:

            def on_message(msg: bytes) -> bool:
                write_frames(f, msg)
                meta = pump_pb2.PullBinlogResp.FromString(msg).entity.meta
                seen["commits" if meta.startTs != meta.commitTs else "fakes"] += 1
                seen["ordered"] = seen["ordered"] and meta.commitTs > seen["prev"]
                seen["prev"] = meta.commitTs
                return bool(meta.commitTs >= last_ts)

            count, size, _elapsed, last_msg = pull_messages(pump_ch, request, None, on_message)
        log(f"checked pull: {count} binlogs ({seen['commits']} commits, {seen['fakes']} fake), {size / 1e6:.1f} MB")
        if seen["commits"] != args.pairs or not seen["ordered"]:
            errors.append(f"pull returned {seen['commits']} commits (ordered: {seen['ordered']}), want {args.pairs}")

        base_ch = grpc.insecure_channel(stream_server.addr, options=CHANNEL_OPTIONS)
        channels.append(base_ch)
        targets = {"pump": pump_ch, "grpc_stream": base_ch}
        pull_messages(base_ch, request, count)  # warm-up of the baseline (the check above warmed the pump)
        got: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for run in range(args.runs):
            for name, ch in targets.items():
                wait_idle(cluster.pump_pid)
                n, nbytes, secs, last = pull_messages(ch, request, count)
                if n != count or last != last_msg:
                    errors.append(f"{name} run {run + 1}: {n}/{count} messages, last matches: {last == last_msg}")
                got[name].append({"binlogs_per_s": n / secs, "mb_per_s": nbytes / secs / 1e6, "seconds": secs})
                log(f"run {run + 1}/{args.runs} {name}: {n / secs:.0f} binlogs/s {nbytes / secs / 1e6:.1f} MB/s")
        dead = cluster.alive() + ([] if stream_server.process.alive else ["grpc-stream"])
        if dead:
            errors.append(f"processes died: {dead}")

        def brief(name: str) -> dict[str, Any]:
            return {
                "binlogs_per_s": round(median([r["binlogs_per_s"] for r in got[name]])),
                "mb_per_s": rnd(median([r["mb_per_s"] for r in got[name]]), 2),
                "runs_binlogs_per_s": [round(r["binlogs_per_s"]) for r in got[name]],
            }

        ratios = [p["binlogs_per_s"] / b["binlogs_per_s"] for p, b in zip(got["pump"], got["grpc_stream"], strict=True)]
        out.update(
            {
                "pairs": args.pairs,
                "payload_bytes": args.payload,
                "prewrite_value_bytes": len(value),
                "binlogs": count,
                "fake_binlogs": seen["fakes"],
                "message_bytes_avg": round(size / count) if count else 0,
                "runs": args.runs,
                "quick": args.quick,
                "pump_args": PUMP_ARGS,
                "fill": {"writers": args.writers, "pairs_per_s": round(fill_rate), "seconds": rnd(fill.elapsed, 1)},
                "pump": brief("pump"),
                "grpc_stream": brief("grpc_stream"),
                "ratio_vs_grpc_stream": rnd(median(ratios)),
                "pump_peak_rss_mb": peak_rss_mb(cluster.pump_pid),
            }
        )
    except KeyboardInterrupt:
        log("interrupted: stopping processes")
        return 130
    finally:
        for ch in channels:
            ch.close()
        if pool is not None:
            pool.close()
        stream_server.stop()
        cluster.stop()
        tmp.cleanup()
    out["errors"] = errors[:20]
    out["ok"] = not errors
    out["total_s"] = round(time.monotonic() - began, 1)
    print(json.dumps(out, indent=2))
    if errors:
        log(f"FAILED: {errors[:3]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m fastpath.bench``: single-process datapath throughput.

Each scenario builds a Router from config text, a batch of packets, then
times ``Router.process`` over the batch repeatedly (the batch's bytes are
restored before each pass, outside the timed region).  Results are medians
over runs, with min-max, in Mpps and ns/packet.

The multi-worker refcount/noref comparison of the seeds is built on top of
this (see the issues tracker); until the per-core route caches exist, the
``--mode`` flag selects the Router mode and both modes run the same kernel.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

from . import Batch, Router
from .scenarios import SCENARIOS


def machine_description() -> str:
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{model}, {os.cpu_count()} CPUs, kernel {platform.release()}, "
            f"Python {platform.python_version()}, numpy {np.__version__}")


def run_scenario(name, mode, fib_size, batch_size, flows, duration, runs, seed=1):
    desc, build = SCENARIOS[name]
    rng = np.random.default_rng(seed)
    cfg, pkts, iif = build(fib_size, batch_size, flows, rng)
    r = Router(mode=mode)
    r.configure(cfg)
    lt = "ethernet" if pkts and pkts[0][12:14] in (b"\x86\xdd", b"\x08\x00") else "raw"
    b = Batch.from_packets(pkts, iif=iif, linktype=lt)
    r.process(b)                      # resolve names, warm up
    pristine = Batch.from_packets(pkts, iif=iif, linktype=lt)
    r.process(pristine.copy())
    # between passes only the bytes the packets occupy are restored (with
    # room for what the datapath prepends): the batch stays in memory, as the
    # reference C measurements' in-memory batches do
    used = min(pristine.slot, int((pristine.start + pristine.length).max()) + 64)
    saved = (pristine.data[:, :used].copy(), pristine.start.copy(), pristine.length.copy())
    results = []
    for _ in range(runs):
        npk = 0
        elapsed = 0.0
        t_end = time.perf_counter() + duration
        while time.perf_counter() < t_end:
            b.data[:, :used] = saved[0]
            b.start[...] = saved[1]
            b.length[...] = saved[2]
            t0 = time.perf_counter_ns()
            r.process(b)
            elapsed += (time.perf_counter_ns() - t0) * 1e-9
            npk += len(b)
        results.append(npk / elapsed / 1e6)
    verdicts = {v: int((b.verdict == i).sum()) for i, v in enumerate(("pending", "forward", "local", "drop", "icmp"))}
    return {"scenario": name, "description": desc, "mode": mode, "fib_size": fib_size,
            "batch": batch_size, "runs_mpps": results, "median_mpps": statistics.median(results),
            "min_mpps": min(results), "max_mpps": max(results),
            "verdicts": {k: v for k, v in verdicts.items() if v}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fastpath.bench",
                                 description="Measure fastpath's single-process datapath throughput.")
    ap.add_argument("--mode", default="noref", choices=["noref", "refcount", "both"])
    ap.add_argument("--scenario", default="all",
                    help=f"comma-separated list of {','.join(SCENARIOS)} or 'all'")
    ap.add_argument("--fib-size", type=int, default=1000)
    ap.add_argument("--flows", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per run")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", metavar="PATH")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    names = list(SCENARIOS) if args.scenario == "all" else args.scenario.split(",")
    bad = [n for n in names if n not in SCENARIOS]
    if bad:
        print(f"fastpath.bench: unknown scenario {bad[0]!r} (choose from {', '.join(SCENARIOS)})",
              file=sys.stderr)
        return 2
    for flag, val, lo in (("--fib-size", args.fib_size, 1), ("--batch", args.batch, 1),
                          ("--flows", args.flows, 1), ("--runs", args.runs, 1)):
        if val < lo:
            print(f"fastpath.bench: {flag} must be at least {lo}", file=sys.stderr)
            return 2
    if args.duration <= 0:
        print("fastpath.bench: --duration must be positive", file=sys.stderr)
        return 2
    modes = ["refcount", "noref"] if args.mode == "both" else [args.mode]
    print(f"# {machine_description()}")
    print(f"# batch {args.batch}, FIB {args.fib_size} routes, {args.flows} flows, "
          f"{args.runs} runs x {args.duration:g} s, single process, medians (min-max)")
    rows = []
    hdr = f"{'scenario':<14} {'mode':<9} {'Mpps':>8} {'ns/pkt':>8}  {'min-max Mpps':<15} verdicts"
    print(hdr)
    print("-" * len(hdr))
    for name in names:
        for mode in modes:
            res = run_scenario(name, mode, args.fib_size, args.batch, args.flows,
                               args.duration, args.runs)
            rows.append(res)
            print(f"{name:<14} {mode:<9} {res['median_mpps']:8.2f} {1e3 / res['median_mpps']:8.1f}  "
                  f"{res['min_mpps']:.2f}-{res['max_mpps']:.2f}{'':<5} "
                  + ", ".join(f"{k} {v}" for k, v in res["verdicts"].items()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_description(), "args": vars(args), "results": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m fastpath.bench``: the seeds' before/after tables, measured
with worker processes on this machine's cores.

With no arguments: End (94-byte frames, 2-segment SRH), End.DX4 and End.DT4
(82-byte IPv4-in-IPv6 UDP), refcount ("before": seg6local's lookups take
and drop route references) against noref ("after"), with 1 worker and with
every worker count up to the CPUs the process may use; one table per
behaviour, as in the patches' commit messages.

Each measurement starts a ``Dataplane`` (tables in shared memory, workers
pinned to CPUs), hands every worker its own copy of the scenario's batch and
lets them all loop over it for ``--duration`` seconds at once (restoring the
batch's bytes between passes, outside the timed region).  A worker's rate is
its packets over the time it spent processing; a row's throughput is the sum
over its workers.  Medians over ``--runs`` runs, with min-max.

``--pdr 0.005``: instead of the maximum rate, the rate at which at most 0.5%
of the packets are lost, found as TRex/SRPerf do (the offered rate doubles
until the loss exceeds the ratio, then bisection), each worker's RX ring a
bounded queue of ``--ring`` descriptors that packets arrive into at the
offered rate (spread evenly over the workers, as RSS over many flows).

Attribution (refcount): the same scenario with every atomic on the worker's
own lines ("refcount-private") separates the cost of the atomics themselves
(private vs noref) from the cost of sharing their cache lines (refcount vs
private): reported as the share of the cycles per packet.

All modes of a behaviour run on the same workers and tables, alternating run
by run (the workers switch modes between runs, when no packet holds a
reference), so that a drift of this shared machine hits them alike.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

from .scenarios import SCENARIOS

DEFAULT_BEHAVIORS = ["End", "End.DX4", "End.DT4"]
SEED_TABLES = {
    # the seeds' testbed: ixgbe 82599ES, 2 x Xeon E5-2650 v3 (10 cores each),
    # TRex, throughput at 0.5% loss, Mpps (before -> after)
    "End": [("1", "1", 0.740, 0.756), ("10", "10 on the NIC's socket", 6.404, 6.950),
            ("16", "10 + 6 on two sockets", 6.550, 10.124)],
    "End.DX4": [("1", "1", 0.791, 0.811), ("10", "10 on the NIC's socket", 6.118, 7.394),
                ("16", "10 + 6 on two sockets", 3.305, 10.205)],
    "End.DT4": [("1", "1", 0.481, 0.489), ("10", "10 on the NIC's socket", 4.328, 4.588),
                ("16", "10 + 6 on two sockets", 3.351, 7.153)],
}


class UsageError(Exception):
    """Bad command-line arguments: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def _parser():
    ap = _Parser(prog="python -m fastpath.bench",
                 description="Measure route-refcount contention in fastpath's SRv6 datapath "
                             "(refcount 'before' vs noref 'after') with worker processes.")
    ap.add_argument("--mode", default="both", choices=["refcount", "noref", "both"])
    ap.add_argument("--behavior", "--scenario", dest="behavior", default=",".join(DEFAULT_BEHAVIORS),
                    help=f"comma-separated list of {','.join(SCENARIOS)}, or 'all'")
    ap.add_argument("--workers", default=None,
                    help="comma-separated worker counts, or 'all' (default: 1 and every count "
                         "up to the usable CPUs, doubling)")
    ap.add_argument("--cpus", default=None, help="CPUs to pin workers to, in order (cpulist: 0-3,8)")
    ap.add_argument("--placement", default="one-socket", choices=["one-socket", "spread"])
    ap.add_argument("--oversubscribe", action="store_true",
                    help="allow more workers than usable CPUs (they share CPUs)")
    ap.add_argument("--use-stats", default="lazy", choices=["lazy", "shared"])
    ap.add_argument("--fib-size", type=int, default=1000)
    ap.add_argument("--flows", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--pool", type=int, default=0,
                    help="packets each worker goes round, --batch at a time (default: one batch); "
                         "e.g. --pool 65536 --flows 65536 for random destinations past the caches")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pdr", type=float, default=None, metavar="RATIO",
                    help="throughput at this loss ratio (e.g. 0.005) instead of the maximum")
    ap.add_argument("--ring", type=int, default=4096, help="RX ring descriptors per worker (--pdr)")
    ap.add_argument("--no-attribution", dest="attribution", action="store_false",
                    help="skip the refcount-private runs that attribute the cost of references")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--plot", metavar="PATH", help="PNG of Mpps vs workers (needs matplotlib)")
    ap.add_argument("--pcap", metavar="PATH", help="benchmark traffic from a capture (with --config)")
    ap.add_argument("--config", metavar="PATH", help="routes for --pcap")
    ap.add_argument("--iif", default=None, help="ingress interface of --pcap traffic")
    return ap


def _positive(args):
    for flag, val in (("--fib-size", args.fib_size), ("--batch", args.batch), ("--flows", args.flows),
                      ("--runs", args.runs), ("--ring", args.ring)):
        if val < 1:
            raise UsageError(f"{flag} must be at least 1")
    if args.pool < 0:
        raise UsageError("--pool must be at least 0")
    if not args.duration > 0:
        raise UsageError("--duration must be positive")
    if args.pdr is not None and not 0 < args.pdr < 1:
        raise UsageError("--pdr must be a ratio between 0 and 1 (e.g. 0.005)")
    if (args.pcap is None) != (args.config is None):
        raise UsageError("--pcap and --config go together")


def _worker_counts(spec, usable, oversubscribe):
    if spec in (None, "all"):
        if spec == "all":
            return list(range(1, usable + 1))
        out, n = [1], 2
        while n < usable:
            out.append(n)
            n *= 2
        if usable > 1:
            out.append(usable)
        return out
    try:
        counts = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--workers: expected numbers like 1,2,4 or 'all', not {spec!r}") from None
    if not counts or min(counts) < 1:
        raise UsageError("--workers: counts must be at least 1")
    if max(counts) > usable and not oversubscribe:
        raise UsageError(f"--workers {max(counts)}: only {usable} usable CPU(s); "
                         "add --oversubscribe to share CPUs")
    return sorted(set(counts))


class _Progress:
    """A progress bar on a terminal (tqdm), nothing when piped."""

    def __init__(self, total):
        self.bar = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, file=sys.stderr, leave=False, unit="run")
            except ImportError:
                pass

    def step(self, desc):
        if self.bar is not None:
            self.bar.set_description(desc)
            self.bar.update(1)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _traffic(args, name):
    """(config text, frames, iif, linktype) of a scenario or of --pcap."""
    if args.pcap:
        from . import pcap
        with open(args.config, encoding="utf-8") as f:
            cfg = f.read()
        frames, lt, iif = [], None, args.iif
        for b in pcap.read_batches(args.pcap, batch_size=args.batch):
            lt = b.linktype
            for k in range(len(b)):
                s, n = int(b.start[k]), int(b.length[k])
                frames.append(b.data[k, s:s + n].tobytes())
            if len(frames) >= _npool(args):
                break
        if not frames:
            raise UsageError(f"--pcap {args.pcap}: no packets")
        if iif is None:
            from .config import State
            st = State().apply(cfg)
            iif = next((n for n in st.interfaces if n != "lo"), None)
        return cfg, frames[:_npool(args)], iif, lt
    cfg, frames, iif = SCENARIOS[name][1](args.fib_size, _npool(args), args.flows,
                                          np.random.default_rng(1))
    lt = "ethernet" if frames and frames[0][12:14] in (b"\x86\xdd", b"\x08\x00") else "raw"
    return cfg, frames, iif, lt


def _npool(args):
    """The packets each worker goes round: the pool, or one batch."""
    return max(args.pool, args.batch)


def _rate(res):
    """Mpps of one run: each worker's packets over its processing time, summed."""
    return sum(r["packets"] / r["busy_s"] for r in res if r["busy_s"] > 0) / 1e6


def _pdr_search(dp, frames, iif, lt, workers, args):
    """Offered rate (total, Mpps) with loss <= --pdr: exponential ramp, then
    bisection to 2% of the rate."""
    n = len(workers)

    def trial(mpps):
        res = dp.bench(frames, iif, lt, duration=args.duration, workers=workers,
                       rate=mpps * 1e6 / n, ring=args.ring, batch=args.batch)
        off = sum(r["offered"] for r in res)
        lost = sum(r["lost"] for r in res)
        return lost / off if off else 1.0

    lo, hi, rate = 0.0, None, 1.0
    trials = []
    while hi is None and rate < 1e4:
        loss = trial(rate)
        trials.append({"offered_mpps": rate, "loss": loss})
        if loss <= args.pdr:
            lo = rate
            rate *= 2
        else:
            hi = rate
    if hi is None:
        return lo, trials
    while hi - lo > 0.02 * hi:
        mid = (lo + hi) / 2
        loss = trial(mid)
        trials.append({"offered_mpps": mid, "loss": loss})
        if loss <= args.pdr:
            lo = mid
        else:
            hi = mid
    return lo, trials


def measure(args, topo, name, counts, modes, progress, attribution=False):
    """Every (mode, worker count) of one behaviour on one Dataplane, the
    modes alternating run by run (so that drifts of a shared machine hit
    them alike); with ``attribution``, refcount-private runs too at the
    largest worker count.  Returns the rows and the attribution."""
    from .dataplane import Dataplane
    cfg, frames, iif, lt = _traffic(args, name)
    maxw = max(counts)
    runs = {(m, n): [] for m in modes for n in counts}
    raws = {(m, n): [] for m in modes for n in counts}
    att_ns = {m: [] for m in ("noref", "refcount-private", "refcount")} if attribution else {}
    with Dataplane(cfg, workers=maxw, cpus=args.cpu_list, mode=modes[0], use_stats=args.use_stats,
                   placement=args.placement, oversubscribe=args.oversubscribe,
                   max_routes=max(1 << 16, 2 * args.fib_size + 1024)) as dp:
        for _ in range(args.runs):
            for n in counts:
                ws = list(range(n))
                for mode in modes:
                    progress.step(f"{name} {mode} {n}w")
                    dp.set_mode(mode)
                    if args.pdr is not None:
                        mpps, trials = _pdr_search(dp, frames, iif, lt, ws, args)
                        runs[(mode, n)].append(mpps)
                        raws[(mode, n)].append({"pdr_mpps": mpps, "trials": trials})
                    else:
                        res = dp.bench(frames, iif, lt, duration=args.duration, workers=ws,
                                       batch=args.batch)
                        runs[(mode, n)].append(_rate(res))
                        raws[(mode, n)].append({"workers": res})
                        if attribution and n == maxw:
                            att_ns[mode].append(_ns_per_packet(res))
            if attribution:
                progress.step(f"{name} refcount-private {maxw}w")
                dp.set_mode("refcount-private")
                res = dp.bench(frames, iif, lt, duration=args.duration, workers=list(range(maxw)),
                               batch=args.batch)
                att_ns["refcount-private"].append(_ns_per_packet(res))
        cpus_of = list(dp.cpus)
    rows = []
    for mode in modes:
        for n in counts:
            cpus = cpus_of[:n]
            sockets = sorted({topo.cpu(c).socket for c in cpus if topo.cpu(c) is not None})
            raw = raws[(mode, n)]
            verd = raw[-1]["workers"][0]["verdicts"] if "workers" in raw[-1] else None
            r = runs[(mode, n)]
            rows.append({"behavior": name, "mode": mode, "workers": n, "queues": n, "cpus": cpus,
                         "sockets": sockets, "runs_mpps": r, "median_mpps": statistics.median(r),
                         "min_mpps": min(r), "max_mpps": max(r), "verdicts": verd, "raw": raw})
    att = _attribution(name, maxw, {m: statistics.median(v) for m, v in att_ns.items()}) \
        if attribution else None
    return rows, att


def _ns_per_packet(res):
    """Cycles one packet costs, as time: the workers' mean of busy time per packet."""
    return statistics.mean(r["busy_s"] / r["packets"] * 1e9 for r in res if r["packets"])


def _fmt(r):
    return f"{r['median_mpps']:7.2f} ({r['min_mpps']:.2f}-{r['max_mpps']:.2f})"


def _table(name, rows, args):
    desc = f"{name}: {SCENARIOS[name][0]}" if name in SCENARIOS else name
    what = f"throughput at {args.pdr:g} loss" if args.pdr is not None else "maximum throughput"
    fib = f"config {args.config}" if args.pcap else f"FIB {args.fib_size} routes"
    lines = [f"{desc}", f"{what}, Mpps, median (min-max) of {args.runs} run(s) x {args.duration:g} s, "
             f"{fib}, batch {args.batch}"
             f"{f' (pool {_npool(args)})' if _npool(args) > args.batch else ''}, use stats {args.use_stats}"]
    by = {(r["mode"], r["workers"]): r for r in rows}
    counts = sorted({r["workers"] for r in rows})
    modes = [m for m in ("refcount", "noref") if any(r["mode"] == m for r in rows)]
    hdr = f"{'queues':<7} {'cores':<22}" + "".join(
        f" {('before (refcount)' if m == 'refcount' else 'after (noref)'):<22}" for m in modes)
    if len(modes) == 2:
        hdr += "  delta"
    lines.append(hdr)
    for n in counts:
        any_row = next(by[(m, n)] for m in modes if (m, n) in by)
        socks = any_row["sockets"]
        cores = f"{n} (socket{'s' if len(socks) != 1 else ''} {','.join(map(str, socks))})"
        line = f"{n:<7} {cores:<22}"
        for m in modes:
            line += f" {_fmt(by[(m, n)]) if (m, n) in by else '-':<22}"
        if len(modes) == 2 and ("refcount", n) in by and ("noref", n) in by:
            b, a = by[("refcount", n)]["median_mpps"], by[("noref", n)]["median_mpps"]
            line += f"  {(a - b) / b * 100:+.1f}%"
        lines.append(line)
    return "\n".join(lines)


def _attribution(name, n, ns):
    """refcount vs refcount-private vs noref (ns per packet at ``n``
    workers): the shares of the cycles spent on references."""
    tot = ns["refcount"]
    atomics = max(ns["refcount-private"] - ns["noref"], 0.0)
    sharing = max(ns["refcount"] - ns["refcount-private"], 0.0)
    return {"behavior": name, "workers": n, "ns_per_packet": ns,
            "refs_share": (atomics + sharing) / tot if tot else 0.0,
            "sharing_share": sharing / tot if tot else 0.0,
            "text": (f"{name}, {n} worker{'s' if n > 1 else ''}: {tot:.1f} ns/packet with references, "
                     f"{ns['noref']:.1f} without; taking and releasing them costs "
                     f"{atomics + sharing:.1f} ns ({(atomics + sharing) / tot * 100:.0f}% of the cycles): "
                     f"{atomics:.1f} ns for the atomics themselves (all on private lines), "
                     f"{sharing:.1f} ns ({sharing / tot * 100:.0f}%) for sharing their cache lines "
                     f"between workers")}


def _plot(path, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'fastpath[plot]'") from None
    names = list(dict.fromkeys(r["behavior"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        for mode, style in (("refcount", "o--"), ("noref", "s-")):
            rs = sorted((r for r in rows if r["behavior"] == name and r["mode"] == mode),
                        key=lambda r: r["workers"])
            if not rs:
                continue
            x = [r["workers"] for r in rs]
            ax.errorbar(x, [r["median_mpps"] for r in rs],
                        yerr=[[r["median_mpps"] - r["min_mpps"] for r in rs],
                              [r["max_mpps"] - r["median_mpps"] for r in rs]],
                        fmt=style, capsize=3, label=mode)
        ax.set_title(name)
        ax.set_xlabel("workers")
        ax.set_ylabel("Mpps")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(argv=None, out=sys.stdout) -> int:
    from . import topology
    args = _parser().parse_args(argv)
    _positive(args)
    names = list(SCENARIOS) if args.behavior == "all" else [b for b in args.behavior.split(",") if b]
    if args.pcap:
        names = [f"pcap:{os.path.basename(args.pcap)}"]
    else:
        bad = [n for n in names if n not in SCENARIOS]
        if bad or not names:
            raise UsageError(f"unknown behavior {bad[0] if bad else ''!r} "
                             f"(choose from {', '.join(SCENARIOS)} or all)")
    topo = topology.read_topology()
    args.cpu_list = None
    if args.cpus is not None:
        try:
            args.cpu_list = topology.parse_cpulist(args.cpus)
            topology.place(topo, len(args.cpu_list), cpus=args.cpu_list)
        except ValueError as e:
            raise UsageError(f"--cpus: {e}") from None
    usable = len(args.cpu_list) if args.cpu_list else len(topo.allowed)
    counts = _worker_counts(args.workers, usable, args.oversubscribe)
    if args.cpu_list and max(counts) > len(args.cpu_list) and not args.oversubscribe:
        raise UsageError(f"--workers {max(counts)}: only {len(args.cpu_list)} CPU(s) in --cpus")
    if args.plot:
        import importlib.util
        if importlib.util.find_spec("matplotlib") is None:
            raise UsageError("--plot needs matplotlib: pip install 'fastpath[plot]'") from None
    modes = ["refcount", "noref"] if args.mode == "both" else [args.mode]
    attrib = args.attribution and "refcount" in modes and args.pdr is None
    total = len(names) * len(modes) * len(counts) * args.runs
    total += len(names) * args.runs if attrib else 0
    print(f"# {topo.describe()}", file=out)
    print(f"# fastpath.bench: {len(counts)} worker count(s) {counts}, placement "
          f"{args.placement if args.cpu_list is None else 'cpus ' + args.cpus}, "
          f"mode {args.mode}", file=out, flush=True)
    progress = _Progress(total)
    all_rows, attributions = [], []
    t0 = time.monotonic()
    try:
        for name in names:
            rows, att = measure(args, topo, name, counts, modes, progress, attrib)
            for r in rows:
                r["behavior"] = name
            all_rows += rows
            print("", file=out)
            print(_table(name, rows, args), file=out)
            if att:
                att["behavior"] = name
                attributions.append(att)
                print(f"attribution: {att['text']}", file=out)
            out.flush()
    finally:
        progress.close()
    seeds = [n for n in names if n in SEED_TABLES]
    if seeds:
        print("", file=out)
        print("# the seeds' testbed for comparison (2 x Xeon E5-2650 v3, ixgbe, TRex, 0.5% loss, Mpps):",
              file=out)
        for n in seeds:
            print("# " + n + ": " + "; ".join(f"{q} queues ({c}) {b:.3f} -> {a:.3f} ({(a - b) / b * 100:+.1f}%)"
                                              for q, c, b, a in SEED_TABLES[n]), file=out)
    print(f"# {time.monotonic() - t0:.0f} s", file=out)
    if args.json:
        doc = {"machine": topo.to_dict(), "args": {k: v for k, v in vars(args).items()},
               "results": all_rows, "attribution": attributions, "seeds": SEED_TABLES}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    if args.plot:
        _plot(args.plot, all_rows)
    return 0


def run_cli(prog: str, run_fn, argv=None) -> int:
    """A benchmark CLI's exit code: ``run_fn(argv)``'s, or one line on
    stderr and 2 for bad arguments, 130 when interrupted, 1 for an error of
    the system or the input (never a traceback)."""
    try:
        return run_fn(argv)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except (OSError, ValueError, RuntimeError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1


def main(argv=None) -> int:
    return run_cli("python -m fastpath.bench", run, argv)


if __name__ == "__main__":
    sys.exit(main())

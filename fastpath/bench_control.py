"""``python -m fastpath.bench_control``: the control plane's rates.

For tables of N IPv6 /48 routes via one gateway (1k, 10k, 100k by
default): loading them from configuration text into a fresh ``Router``,
one ``ip -6 route replace`` through ``Router.configure`` (median of
``--repeat`` calls, alternating between two gateways so every call changes
the route), and ``--batch`` replaces in one ``configure``.  As root, with
iproute2 present, the Linux kernel does the same beside it through ``ip
-batch`` in a throwaway network namespace (a dummy device; the namespace is
deleted on every exit path): load, one replace (an ``ip`` process per call,
so mostly the process start), the batch of replaces.  ``--no-kernel`` skips
it.  Results print as a table; ``--json PATH`` also writes them.

Timings on a shared machine are noisy: medians, and never asserted on by
the tests (tests/test_bench_control.py checks the JSON's shape only).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

GW = ("2001:db8:1::2", "2001:db8:1::3")
BASE = ("ip -6 addr add 2001:db8:1::1/64 dev eth0\n"
        "sysctl -w net.ipv6.conf.all.forwarding=1\n")


def prefix(k: int) -> str:
    """The k-th /48 (2400::/12 and up; distinct for k < 2**20)."""
    return f"{0x2400 + (k >> 16):x}:{k & 0xFFFF:x}::/48"


def routes_text(n: int, gw: str = GW[0], cmd: str = "add", lead: str = "ip -6 ",
                dev: str = "") -> str:
    return "".join(f"{lead}route {cmd} {prefix(k)} via {gw}{dev}\n" for k in range(n))


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_fastpath(n: int, repeat: int, batch: int) -> dict:
    from fastpath import Router
    text = BASE + routes_text(n)
    r = Router()
    load = _timed(lambda: r.configure(text))
    one = []
    for i in range(repeat):
        line = f"ip -6 route replace {prefix((i * 7919) % n)} via {GW[(i + 1) % 2]}\n"
        one.append(_timed(lambda: r.configure(line)))
    m = min(batch, n)
    lines = "".join(f"ip -6 route replace {prefix((j * 7919) % n)} via {GW[1]}\n" for j in range(m))
    many = _timed(lambda: r.configure(lines))
    return {"routes": n, "load_s": load, "load_routes_per_s": n / load if load else None,
            "replace_one_median_s": statistics.median(one), "replace_one_runs_s": one,
            "batch": m, "replace_batch_s": many,
            "replace_batch_routes_per_s": m / many if many else None,
            "installed_entries": len(r._tables.entries)}


# ---------------------------------------------------------------------------
# a running Dataplane: its tables changed in place while its workers forward

DP_BASE = BASE + ("ip -6 addr add 2001:db8:9::1/64 dev eth1\n"
                  f"ip -6 neigh add {GW[0]} lladdr 02:00:00:00:00:02 dev eth0\n"
                  f"ip -6 neigh add {GW[1]} lladdr 02:00:00:00:00:03 dev eth0\n")


def _frames(n_routes: int, count: int = 256, seed: int = 1) -> list:
    """Ethernet frames, IPv6/UDP from eth1's network to addresses in
    ``count`` random routes of the table."""
    import ipaddress
    import random
    rng = random.Random(seed)
    src = ipaddress.IPv6Address("2001:db8:9::2").packed
    out = []
    for _ in range(count):
        net = ipaddress.IPv6Network(prefix(rng.randrange(n_routes)))
        dst = (net.network_address + rng.randrange(1, 1 << 16)).packed
        ip6 = bytes([0x60, 0, 0, 0, 0, 16, 17, 64]) + src + dst
        out.append(bytes.fromhex("020000000001020000000009") + b"\x86\xdd" + ip6
                   + bytes([0x30, 0x39, 0x00, 0x35, 0, 16, 0, 0]) + b"fastpath")
    return out


def _rate(res) -> float:
    """Packets per second over the workers of one Dataplane.bench."""
    return sum(r["packets"] / r["wall_s"] for r in res if r["wall_s"] > 0)


def bench_dataplane(n: int, repeat: int, batch: int, duration: float, workers: int,
                    modes=("noref", "refcount")) -> dict:
    """Load the table into a ``workers``-worker Dataplane, time single
    replaces, then in each mode: the forwarding rate alone for
    ``duration`` seconds, and again while this process applies batches of
    ``batch`` replaces as fast as it can (changes/s reported)."""
    import threading

    from fastpath import Dataplane
    from fastpath.reasons import REASON_IDS
    text = DP_BASE + routes_text(n)
    t0 = time.perf_counter()
    dp = Dataplane(text, workers=workers, mode=modes[0], max_routes=max(1 << 16, 2 * n + 4096),
                   check_gen=True)
    try:
        load = time.perf_counter() - t0
        one = []
        for i in range(repeat):
            line = f"ip -6 route replace {prefix((i * 7919) % n)} via {GW[(i + 1) % 2]}\n"
            one.append(_timed(lambda: dp.configure(line)))
        frames = _frames(n)
        out = {"routes": n, "workers": workers, "load_s": load,
               "load_routes_per_s": n / load if load else None,
               "replace_one_median_s": statistics.median(one), "replace_one_runs_s": one,
               "batch": min(batch, n), "duration_s": duration, "modes": {}}
        flip = 0
        for mode in modes:
            dp.set_mode(mode)
            alone = dp.bench(frames, "eth1", duration=duration)
            got = {}
            th = threading.Thread(target=lambda: got.setdefault(
                "res", dp.bench(frames, "eth1", duration=duration, start_delay=0.05)))
            changes = configures = 0
            th.start()
            time.sleep(0.05)
            t0 = time.perf_counter()
            while th.is_alive():
                m = min(batch, n)
                flip += 1
                dp.configure("".join(f"ip -6 route replace {prefix((j * 7919 + flip) % n)} "
                                     f"via {GW[flip % 2]}\n" for j in range(m)))
                changes += m
                configures += 1
            elapsed = time.perf_counter() - t0
            th.join()
            res = got["res"]
            c = dp.counters()
            out["modes"][mode] = {
                "forward_pps_alone": _rate(alone), "forward_pps_during_churn": _rate(res),
                "changes": changes, "configures": configures, "churn_s": elapsed,
                "changes_per_s": changes / elapsed if elapsed else None,
                "route_dead": sum(r["reasons"][REASON_IDS["route_dead"]] for r in res),
                "hold_fail": sum(r["hold_fail"] for r in res),
                "gen_violations": c["gen_violations"],
                "packets_accounted": sum(sum(r["reasons"]) for r in res) == sum(r["packets"] for r in res)}
        return out
    finally:
        dp.close()


# ---------------------------------------------------------------------------
# a full feed: Internet-shaped IPv4 and IPv6 prefixes (bench_fib's generator)

FEED_BASE = ("ip addr add 10.0.1.1/24 dev eth0\n" + BASE)
FEED_GW = {4: "10.0.1.2", 6: GW[0]}


def feed_lines(n4: int, n6: int) -> dict:
    """family -> ``route add PREFIX via GW dev eth0`` lines (``ip -batch``
    style) of ``n4`` IPv4 and ``n6`` IPv6 Internet-shaped prefixes, leaving
    out the few that overlap this host's own networks or special space."""
    import ipaddress

    from .bench_fib import internet_table
    out = {}
    for fam, n in ((4, n4), (6, n6)):
        if not n:
            out[fam] = []
            continue
        t = internet_table(fam, n)
        lines = []
        for net in t.networks():
            if fam == 4 and (net.overlaps(ipaddress.IPv4Network("10.0.0.0/8")) or net.is_multicast
                             or net.is_loopback or int(net.network_address) >> 24 == 0
                             or net.is_reserved):
                continue
            if fam == 6 and not net.subnet_of(ipaddress.IPv6Network("2000::/3")):
                continue
            lines.append(f"route add {net} via {FEED_GW[fam]} dev eth0\n")
        out[fam] = lines
    return out


_FEED_LOAD = r"""
import json, resource, statistics, sys, time
from fastpath import Router
path, repeat, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ALT = {"10.0.1.2": "10.0.1.3", "%(gw6)s": "%(alt6)s"}

def changes(r, lines, repeat, batch):
    # single replaces (each to the other gateway and back: each one a change),
    # then one configure of `batch` replaces, on the routes of `lines`
    step = max(1, len(lines) // (repeat + batch + 1))
    pick = lines[::step]
    one, cpu = [], []
    for ln in pick[:repeat]:
        p, gw = ln.split()[2], ln.split()[4]
        for g in (ALT[gw], gw):
            t, c = time.perf_counter(), time.process_time()
            r.configure(f"route replace {p} via {g} dev eth0\n")
            one.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    many = "".join(f"route replace {ln.split()[2]} via {ALT[ln.split()[4]]} dev eth0\n"
                   for ln in pick[repeat:repeat + batch])
    t = time.perf_counter()
    r.configure(many)
    bt = time.perf_counter() - t
    n = many.count("\n")
    return {"replace_one_median_s": statistics.median(one), "replace_one_runs": len(one),
            "replace_one_cpu_median_s": statistics.median(cpu),
            "batch": n, "replace_batch_s": bt, "replace_batch_routes_per_s": n / bt if bt else None}

with open(path) as f:
    head = [ln for ln in f if ln.startswith("ip ") or ln.startswith("sysctl")]
with open(path) as f:
    sample = []
    for ln in f:
        if ln.startswith("route "):
            sample.append(ln)
            if len(sample) >= 1000:
                break
small = Router()
small.configure("".join(head + sample))
small_res = changes(small, sample, repeat, min(batch, 500))
del small
t = time.perf_counter(); c = time.process_time()
r = Router.from_file(path)
wall, cpu = time.perf_counter() - t, time.process_time() - c
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
with open(path) as f:
    lines = [ln for ln in f if ln.startswith("route ")]
res = changes(r, lines, repeat, batch)
print(json.dumps({"load_s": wall, "load_cpu_s": cpu, "entries": len(r._tables.entries),
                  "peak_rss_mb": rss, "changes": res, "changes_1k": small_res}))
"""


def bench_feed(n4: int, n6: int, kernel: bool, repeat: int = 21, batch: int = 1000) -> dict:
    """Load the feed from a configuration file in a fresh process
    (Router.from_file: streamed), its time and peak RSS; as root, the
    kernel's ``ip -batch`` of the same routes in a namespace beside it."""
    lines = feed_lines(n4, n6)
    res = {"ipv4_routes": len(lines[4]), "ipv6_routes": len(lines[6])}
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "feed.conf")
        with open(cfg, "w") as f:
            f.write(FEED_BASE)
            for fam in (4, 6):
                f.writelines(lines[fam])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        p = subprocess.run([sys.executable, "-c", _FEED_LOAD % {"gw6": FEED_GW[6], "alt6": GW[1]},
                            cfg, str(repeat), str(batch)], capture_output=True, text=True, env=env)
        if p.returncode:
            raise OSError(f"feed load failed: {p.stderr.strip().splitlines()[-1:]}")
        res["fastpath"] = json.loads(p.stdout.strip().splitlines()[-1])
        if kernel:
            with _Netns() as ns:
                ns.ip("addr", "add", "10.0.1.1/24", "dev", "eth0")
                k = {}
                for fam in (4, 6):
                    path = os.path.join(d, f"k{fam}")
                    with open(path, "w") as f:
                        f.writelines(lines[fam])
                    k[f"ipv{fam}_s"] = _timed(lambda: ns.ip(f"-{fam}", "-batch", path))
                k["load_s"] = k["ipv4_s"] + k["ipv6_s"]
                # the same changes: single replaces (one ip process each) and
                # a batch through ip -batch
                allr = lines[4] + lines[6]
                step = max(1, len(allr) // (repeat + batch + 1))
                pick = allr[::step]
                alt = {FEED_GW[4]: "10.0.1.3", FEED_GW[6]: GW[1]}
                one = []
                for ln in pick[:repeat]:
                    w = ln.split()
                    one.append(_timed(lambda: ns.ip("route", "replace", w[2], "via", alt[w[4]],
                                                    "dev", "eth0")))
                path = os.path.join(d, "kbatch")
                with open(path, "w") as f:
                    f.writelines(f"route replace {ln.split()[2]} via {alt[ln.split()[4]]} dev eth0\n"
                                 for ln in pick[repeat:repeat + batch])
                nb = min(batch, max(0, len(pick) - repeat))
                k["replace_one_median_s"] = statistics.median(one) if one else None
                k["replace_batch_s"] = _timed(lambda: ns.ip("-batch", path)) if nb else None
                k["batch"] = nb
                res["kernel"] = k
    return res


# ---------------------------------------------------------------------------
class _Netns:
    """A throwaway network namespace with one dummy device (deleted on
    every exit path: context manager, atexit-like signal handling)."""

    def __init__(self):
        self.name = f"fpbench{os.getpid()}"
        self.made = False

    def ip(self, *args, check=True, input_text=None):
        return subprocess.run(["ip", "-n", self.name, *args], check=check, capture_output=True,
                              text=True, input=input_text)

    def __enter__(self):
        subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        self.made = True
        self._old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            if self.ip("link", "add", "eth0", "type", "dummy", check=False).returncode:
                # no dummy module: a veth pair (both ends up, for the carrier)
                self.ip("link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
                self.ip("link", "set", "eth1", "up")
            self.ip("link", "set", "eth0", "up")
            self.ip("link", "set", "lo", "up")
            self.ip("-6", "addr", "add", "2001:db8:1::1/64", "dev", "eth0", "nodad")
        except BaseException:
            self.__exit__()
            raise
        return self

    def _on_signal(self, signum, frame):
        self.close()
        raise SystemExit(128 + signum)

    def close(self):
        if self.made:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
            self.made = False

    def __exit__(self, *exc):
        self.close()
        for s, h in self._old.items():
            signal.signal(s, h)
        return False


def kernel_available() -> str | None:
    """None when the kernel comparison can run, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "iproute2's ip not found"
    p = subprocess.run(["ip", "netns", "add", f"fpbenchprobe{os.getpid()}"], capture_output=True,
                       text=True)
    if p.returncode:
        return f"ip netns add failed: {p.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", f"fpbenchprobe{os.getpid()}"], capture_output=True)
    return None


def bench_kernel(n: int, repeat: int, batch: int) -> dict:
    with _Netns() as ns, tempfile.TemporaryDirectory() as d:
        load_file = os.path.join(d, "load")
        with open(load_file, "w") as f:
            f.write(routes_text(n, lead="", dev=" dev eth0"))
        load = _timed(lambda: ns.ip("-6", "-batch", load_file))
        one = []
        for i in range(repeat):
            args = ["-6", "route", "replace", prefix((i * 7919) % n), "via", GW[(i + 1) % 2],
                    "dev", "eth0"]
            one.append(_timed(lambda: ns.ip(*args)))
        m = min(batch, n)
        rep_file = os.path.join(d, "replace")
        with open(rep_file, "w") as f:
            f.write("".join(f"route replace {prefix((j * 7919) % n)} via {GW[1]} dev eth0\n"
                            for j in range(m)))
        many = _timed(lambda: ns.ip("-6", "-batch", rep_file))
        count = len(ns.ip("-6", "route", "show").stdout.splitlines())
    return {"routes": n, "load_s": load, "load_routes_per_s": n / load if load else None,
            "replace_one_median_s": statistics.median(one), "replace_one_runs_s": one,
            "replace_one_note": "one ip process per replace (process start included)",
            "batch": m, "replace_batch_s": many,
            "replace_batch_routes_per_s": m / many if many else None,
            "installed_routes": count}


# ---------------------------------------------------------------------------
def _fmt_s(x):
    if x is None:
        return "-"
    return f"{x * 1e3:.3f} ms" if x < 1 else f"{x:.2f} s"


def print_report(res):
    print(f"fastpath control plane: Router.configure, IPv6 /48 routes via one gateway "
          f"({res['machine']['python']}, {res['machine']['cpus']} CPUs)")
    hdr = f"{'routes':>8}  {'who':<8} {'load':>11} {'routes/s':>10} {'1 replace':>11} " \
          f"{'batch':>6} {'batch time':>11} {'routes/s':>10}"
    print(hdr)
    for row in res["results"]:
        for who in ("fastpath", "kernel"):
            x = row.get(who)
            if not x:
                continue
            print(f"{row['routes']:>8}  {who:<8} {_fmt_s(x['load_s']):>11} "
                  f"{x['load_routes_per_s'] or 0:>10.0f} {_fmt_s(x['replace_one_median_s']):>11} "
                  f"{x['batch']:>6} {_fmt_s(x['replace_batch_s']):>11} "
                  f"{x['replace_batch_routes_per_s'] or 0:>10.0f}")
    dps = [row["dataplane"] for row in res["results"] if row.get("dataplane")]
    if dps:
        print(f"\nDataplane ({dps[0]['workers']} workers), changed in place while forwarding "
              f"(batches of {dps[0]['batch']} replaces, {dps[0]['duration_s']:g} s per mode)")
        print(f"{'routes':>8}  {'load':>9} {'1 replace':>10}  {'mode':<8} {'changes/s':>10} "
              f"{'fwd alone':>11} {'fwd churn':>11} {'route_dead':>10} {'hold_fail':>9} {'gen viol':>8}")
        for x in dps:
            for k, (mode, m) in enumerate(x["modes"].items()):
                head = (f"{x['routes']:>8}  {_fmt_s(x['load_s']):>9} {_fmt_s(x['replace_one_median_s']):>10}"
                        if k == 0 else " " * 30)
                print(f"{head}  {mode:<8} {m['changes_per_s'] or 0:>10.0f} "
                      f"{m['forward_pps_alone'] / 1e6:>8.2f} Mpps {m['forward_pps_during_churn'] / 1e6:>6.2f} Mpps "
                      f"{m['route_dead']:>10} {m['hold_fail']:>9} {m['gen_violations']:>8}")
    fd = res.get("feed")
    if fd:
        f = fd["fastpath"]
        k = fd.get("kernel")
        print(f"\nfull feed from a file ({fd['ipv4_routes']} IPv4 + {fd['ipv6_routes']} IPv6 routes): "
              f"fastpath {f['load_s']:.1f} s ({f['load_cpu_s']:.1f} s CPU), peak RSS "
              f"{f['peak_rss_mb']:.0f} MB"
              + (f"; kernel ip -batch {k['load_s']:.1f} s (IPv4 {k['ipv4_s']:.1f} s, IPv6 "
                 f"{k['ipv6_s']:.1f} s)" if k else ""))
        ch, c1 = f.get("changes"), f.get("changes_1k")
        if ch:
            print(f"  one replace on it: median {_fmt_s(ch['replace_one_median_s'])} "
                  f"({_fmt_s(ch.get('replace_one_cpu_median_s'))} CPU) "
                  f"({_fmt_s(c1['replace_one_median_s'])} on its first 1000 routes, "
                  f"{ch['replace_one_median_s'] / c1['replace_one_median_s']:.2f}x)"
                  + (f"; kernel {_fmt_s(k['replace_one_median_s'])} (one ip process)"
                     if k and k.get("replace_one_median_s") else ""))
            print(f"  {ch['batch']} replaces in one configure: {_fmt_s(ch['replace_batch_s'])} "
                  f"({ch['replace_batch_routes_per_s'] or 0:.0f} changes/s)"
                  + (f"; kernel ip -batch {_fmt_s(k['replace_batch_s'])} "
                     f"({k['batch'] / k['replace_batch_s']:.0f} changes/s)"
                     if k and k.get("replace_batch_s") else ""))
    if res["kernel"] is not None:
        print(f"kernel: not run ({res['kernel']})")
    else:
        print("kernel: ip -batch in a network namespace (its single replace is one ip process)")
    print(f"peak RSS of this process: {res['peak_rss_mb']:.0f} MB")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _sizes(s: str) -> list:
    try:
        out = [int(x) for x in s.split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {s!r}") from None
    if not out or any(not 1 <= x <= 1 << 20 for x in out):
        raise argparse.ArgumentTypeError(f"sizes must be in 1..{1 << 20}: {s!r}")
    return out


def main(argv=None) -> int:
    ap = _Parser(prog="python -m fastpath.bench_control",
                 description="Control-plane rates of Router.configure (load, one replace, a "
                             "batch of replaces), beside the kernel's ip -batch as root.")
    ap.add_argument("--sizes", type=_sizes, default=[1000, 10000, 100000], metavar="N,N,..",
                    help="route counts (default 1000,10000,100000)")
    ap.add_argument("--repeat", type=int, default=21, metavar="R",
                    help="single replaces per size, median reported (default 21)")
    ap.add_argument("--batch", type=int, default=1000, metavar="B",
                    help="replaces in one configure (default 1000)")
    ap.add_argument("--no-kernel", action="store_true", help="skip the kernel comparison")
    ap.add_argument("--dataplane", action="store_true",
                    help="also a running Dataplane: load, one replace, and batches of replaces "
                         "applied while its workers forward (rates with and without)")
    ap.add_argument("--workers", type=int, default=2, metavar="W",
                    help="workers of the --dataplane runs (default 2)")
    ap.add_argument("--duration", type=float, default=2.0, metavar="S",
                    help="seconds of forwarding per --dataplane mode and phase (default 2)")
    ap.add_argument("--quick", action="store_true", help="sizes 200,2000, repeat 5, batch 100")
    ap.add_argument("--feed", type=_sizes, metavar="N4,N6",
                    help="also load a full feed of N4 IPv4 and N6 IPv6 Internet-shaped prefixes "
                         "from a file, in a fresh process (time, peak RSS), e.g. 1000000,220000")
    ap.add_argument("--json", metavar="PATH", help="also write all results as JSON")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.quick:
        args.sizes, args.repeat, args.batch = [200, 2000], 5, 100
    if args.feed is not None and len(args.feed) != 2:
        print(f"{ap.prog}: error: --feed takes two counts, N4,N6", file=sys.stderr)
        return 2
    if not 1 <= args.workers <= 256 or not 0.1 <= args.duration <= 600:
        print(f"{ap.prog}: error: --workers must be in 1..256 and --duration in 0.1..600",
              file=sys.stderr)
        return 2
    if not 1 <= args.repeat <= 10000 or not 1 <= args.batch <= 1 << 20:
        print(f"{ap.prog}: error: --repeat must be in 1..10000 and --batch in 1..{1 << 20}",
              file=sys.stderr)
        return 2
    why_not = "--no-kernel" if args.no_kernel else kernel_available()
    res = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                       "platform": platform.platform()},
           "config": {"sizes": args.sizes, "repeat": args.repeat, "batch": args.batch,
                      "dataplane": args.dataplane, "workers": args.workers,
                      "duration": args.duration},
           "kernel": why_not, "results": []}
    try:
        for n in args.sizes:
            row = {"routes": n, "fastpath": bench_fastpath(n, args.repeat, args.batch)}
            if args.dataplane:
                row["dataplane"] = bench_dataplane(n, args.repeat, args.batch, args.duration,
                                                   args.workers)
            if why_not is None:
                row["kernel"] = bench_kernel(n, args.repeat, args.batch)
            res["results"].append(row)
        if args.feed:
            res["feed"] = bench_feed(args.feed[0], args.feed[1], why_not is None, args.repeat,
                                     args.batch)
        res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print_report(res)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
                f.write("\n")
    except KeyboardInterrupt:
        print(f"{ap.prog}: interrupted", file=sys.stderr)
        return 130
    except OSError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

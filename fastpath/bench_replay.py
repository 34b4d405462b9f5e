"""End-to-end capture replay benchmark: ``python -m fastpath.bench_replay``.

    python -m fastpath.bench_replay [--packets N] [--small N] [--runs R]
        [--batch N] [--dir DIR] [--json PATH] [--no-others] [--no-rss] [--numpy-io]
        [--workers N[,N...] | --no-workers]

The capture: N (default 1M) 94-byte End frames (Ethernet + IPv6 + a
2-segment SRH), the "End" scenario of ``fastpath/scenarios.py`` with its
configuration (1k routes, 256 flows), written as pcapng and read once so
that it is in the page cache.  What is timed (median of R runs, min-max):

* fastpath: ``fastpath.pcap.replay`` = read the pcapng + End in the
  datapath + write the output pcapng (one IDB per egress interface), in
  one process (wall clock, and the CPU time of all its threads per
  packet); the same with a classic pcap output, and from the same
  packets as a classic pcap to a pcap; plus, on their own, the reader,
  the datapath and the writers, per packet;
* the yardsticks, on the same files in the same run (when installed):
  tcpdump (libpcap) copying the pcap to a pcap (``tcpdump -r IN -w OUT``,
  no processing) and editcap converting it to pcapng;
* the same pipeline with scapy's raw pcapng reader/writer and with dpkt's
  (``pip install dpkt``) doing the I/O, fastpath's Router in the middle,
  on a smaller capture (``--small``, default 50k packets);
* peak RSS of a replay of 100k and of N packets, each in a fresh process:
  the reader and writers stream, so it does not grow with the capture;
* ``python -m fastpath.replay --workers W`` (``fastpath.Dataplane``) as a
  user runs it, for W = 1 (the Router in line) and each W of
  ``--workers`` (default 2), on the capture above -- one RSS flow, since
  its frames differ only in the SRH, so all of it goes to one worker, as
  to one queue of a NIC -- and on the same frames from 256 outer sources
  (RSS spreads them evenly): the summary's rate (the replay, not the
  start-up), its ratio to ``--workers 1`` in the same run, and the
  seconds inside ``process``.

Files go to DIR (default /dev/shm when it exists, else the temp dir) and
are removed afterwards.  Every timed run, fastpath's and the tools', writes
a new output file: the previous run's is removed first, untimed (opening
it for writing would truncate it, ~40 ms for 128 MB on tmpfs, charged to
whichever run came next).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import pcap as fpcap
from .batch import Batch
from .topology import usable_cpus
from .router import Router
from .scenarios import SCENARIOS

FIB_SIZE, FLOWS = 1000, 256


def build_capture(path: str, n: int, batch: int = 4096, sources: int = 0):
    """Write the End scenario's frames, n of them, to a pcapng; return the
    config.  ``sources`` > 0: frame k's outer IPv6 source ends in byte
    ``k % sources`` (End does not read it; RSS hashes it)."""
    cfg, frames, iif = SCENARIOS["End"][1](FIB_SIZE, batch, FLOWS, np.random.default_rng(1))
    b = Batch.from_packets(frames, linktype="ethernet", slot=256)
    if sources:
        # Ethernet (14) + the IPv6 source's last byte (8 + 15)
        rows = np.arange(len(b))
        b.data[rows, b.start + 14 + 8 + 15] = (rows % sources).astype(np.uint8)
    with fpcap.PcapngWriter(path, select="all") as w:
        t0 = 1_700_000_000 * 10**9
        for k in range(0, n, batch):
            m = min(batch, n - k)
            part = b[:m]
            part.timestamp_ns = t0 + np.arange(k, k + m, dtype=np.int64) * 100
            part.iif_names = [iif] * m
            w.write_batch(part)
    return cfg, iif


def _warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 22):
            pass


def _router(cfg):
    r = Router()
    r.configure(cfg)
    return r


def fastpath_replay(r, iif, src, out, batch, cpu=None, threads=None):
    """Replay ``src`` through the Router ``r`` (configured: not timed);
    ``cpu``: a list that gets the process's CPU time (all threads);
    ``threads``: a list that gets the CPU time of each of the replay's
    threads ({"main": the datapath and the packing, "reader": the
    prefetch thread, "writer": the output's file writes})."""
    ifindex = r.interfaces[iif].ifindex
    c0 = time.process_time()
    m0 = time.thread_time()
    t0 = time.perf_counter()
    st = fpcap.replay(r, src, output=out, batch_size=batch, iif=ifindex)
    dt = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(time.process_time() - c0)
    if threads is not None:
        threads.append({"main": time.thread_time() - m0, "reader": st.read_cpu_s,
                        "writer": st.write_cpu_s})
    return dt, st


def build_pcap_copy(src, dst):
    """The same packets as a classic pcap (nanosecond), for tcpdump."""
    with fpcap.PcapWriter(dst, select="all", linktype="ethernet") as w:
        for b in fpcap.read_batches(src):
            w.write_batch(b)


def _fresh(path):
    """Remove a previous run's output, untimed: each timed run writes a new
    file (opening a 128 MB file for writing truncates it, which costs the
    opener ~40 ms on tmpfs: a third of a 1M-packet replay)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def tool_copy(argv, runs, out=None):
    """Median wall time of an external command (None when not installed);
    ``out``: its output file, removed before each run."""
    if shutil.which(argv[0]) is None:
        return None
    xs = []
    for _ in range(runs):
        if out is not None:
            _fresh(out)
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        xs.append(time.perf_counter() - t0)
    return xs


def fastpath_parts(cfg, iif, src, out, batch, limit):
    """Reader alone (whole capture, batches dropped), datapath alone and
    writer alone (on the first ``limit`` packets, held in memory)."""
    r = _router(cfg)
    ifindex = r.interfaces[iif].ifindex
    t0 = time.perf_counter()
    n = 0
    for b in fpcap.read_batches(src, batch_size=batch, iif=ifindex):
        n += len(b)
    read_s = time.perf_counter() - t0
    kept = []
    for b in fpcap.read_batches(src, batch_size=batch, iif=ifindex):
        kept.append(b)
        if sum(len(x) for x in kept) >= limit:
            break
    nk = sum(len(b) for b in kept)
    t0 = time.perf_counter()
    for b in kept:
        r.process(b)
    proc_s = time.perf_counter() - t0
    _fresh(out)
    t0 = time.perf_counter()
    with fpcap.PcapngWriter(out) as w:
        for b in kept:
            w.write_batch(b)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with fpcap.PcapWriter(out + ".pcap") as w:
        for b in kept:
            w.write_batch(b)
    write_pcap_s = time.perf_counter() - t0
    os.unlink(out + ".pcap")
    # the writer's own work (selection, packing, buffers) without the
    # page-cache copy of the file writes: to /dev/null
    null_s = None
    if os.path.exists(os.devnull):
        t0 = time.perf_counter()
        with fpcap.PcapngWriter(os.devnull) as w:
            for b in kept:
                w.write_batch(b)
        null_s = time.perf_counter() - t0
    return {"read_ns": read_s / n * 1e9, "datapath_ns": proc_s / nk * 1e9,
            "write_ns": write_s / nk * 1e9, "write_pcap_ns": write_pcap_s / nk * 1e9,
            "write_devnull_ns": None if null_s is None else null_s / nk * 1e9}


def _results(r, b):
    r.process(b)
    v = b.verdict
    return np.flatnonzero((v == 1) | (v == 4))


def scapy_replay(r, iif, src, out, batch):
    from scapy.utils import RawPcapNgReader, RawPcapNgWriter
    ifindex = r.interfaces[iif].ifindex
    t0 = time.perf_counter()
    w = RawPcapNgWriter(out)
    w.linktype = 1
    w.write_header(None)
    n = 0
    pk, ts = [], []

    def flush():
        b = Batch.from_packets(pk, iif=ifindex, linktype="ethernet")
        for i in _results(r, b):
            t = ts[i]
            w.write_packet(b.packet(i), sec=t // 10**9, usec=(t % 10**9) // 1000)
        pk.clear()
        ts.clear()
    rd = RawPcapNgReader(src)
    for data, meta in rd:
        pk.append(data)
        ts.append(((meta.tshigh << 32) | meta.tslow) * (10**9 // meta.tsresol))
        n += 1
        if len(pk) == batch:
            flush()
    if pk:
        flush()
    rd.close()
    w.close()
    return time.perf_counter() - t0, n


def dpkt_replay(r, iif, src, out, batch):
    import dpkt
    ifindex = r.interfaces[iif].ifindex
    t0 = time.perf_counter()
    n = 0
    with open(src, "rb") as f, open(out, "wb") as fo:
        w = dpkt.pcapng.Writer(fo, snaplen=65535, linktype=1)
        pk, ts = [], []

        def flush():
            b = Batch.from_packets(pk, iif=ifindex, linktype="ethernet")
            for i in _results(r, b):
                w.writepkt(b.packet(i), ts=ts[i])
            pk.clear()
            ts.clear()
        for t, data in dpkt.pcapng.Reader(f):
            pk.append(data)
            ts.append(t)
            n += 1
            if len(pk) == batch:
                flush()
        if pk:
            flush()
    return time.perf_counter() - t0, n


def replay_cli(src, out, cfgpath, iif, workers, batch):
    """One ``python -m fastpath.replay --workers W --summary json`` run:
    its summary (a dict)."""
    res = subprocess.run([sys.executable, "-m", "fastpath.replay", src, "--config", cfgpath,
                          "--iif", iif, "-o", out, "--workers", str(workers), "--batch",
                          str(batch), "--summary", "json", "--no-progress"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"fastpath.replay --workers {workers} failed: "
                           f"{res.stderr.strip() or res.returncode}")
    return json.loads(res.stdout)


def workers_rows(d, cfg, iif, captures, counts, runs, batch):
    """``fastpath.replay --workers W`` for W = 1 and each of ``counts`` on
    each capture ({label: path}), interleaved run by run; per capture and
    W: the median rate and the seconds in process, and the ratio to W=1."""
    cfgpath = os.path.join(d, "routes-workers.conf")
    with open(cfgpath, "w") as f:
        f.write(cfg)
    out = os.path.join(d, "out-workers.pcapng")
    ws = [1] + [w for w in counts if w != 1]
    got = {(c, w): [] for c in captures for w in ws}
    for _ in range(runs):
        for c, path in captures.items():
            for w in ws:
                _fresh(out)
                got[(c, w)].append(replay_cli(path, out, cfgpath, iif, w, batch))
    rows = {}
    for c in captures:
        rows[c] = {}
        for w in ws:                     # (1 first: the base of the ratios)
            xs = got[(c, w)]
            pps = _median([x["packets_per_s"] for x in xs])
            base = rows[c]["1"]["packets_per_s"]["median"] if w != 1 else pps["median"]
            busy = [x.get("cpus_busy") for x in xs]
            cpu = [x.get("cpu_ns_per_packet") for x in xs]
            rows[c][str(w)] = {"packets_per_s": pps,
                               "datapath_s": statistics.median(x["datapath_s"] for x in xs),
                               # CPU of the whole replay (threads and workers) per
                               # packet, and the CPUs it kept busy (medians)
                               "cpu_ns_per_packet": (statistics.median(cpu)
                                                     if None not in cpu else None),
                               "cpus_busy": statistics.median(busy) if None not in busy else None,
                               "packets": xs[0]["packets"], "workers": xs[0]["workers"],
                               "forwarded": xs[0]["verdicts"].get("forward", 0),
                               "ratio_to_1": pps["median"] / base if base else None}
    return rows


def _child(argv):
    """--child SRC OUT CONFIG IIF BATCH: one replay, then peak RSS as JSON."""
    src, out, cfgpath, iif, batch = argv
    with open(cfgpath) as f:
        cfg = f.read()
    r = _router(cfg)
    before = _rss_kb()
    dt, st = fastpath_replay(r, iif, src, out, int(batch))
    print(json.dumps({"packets": st.packets, "seconds": dt, "rss_before_kb": before,
                      "maxrss_kb": _rss_kb("VmHWM")}))
    return 0


def _rss_kb(field="VmRSS"):
    """Resident set of this process in kB: current (VmRSS) or peak (VmHWM).
    (Not getrusage's ru_maxrss: Linux carries that over from the parent
    across fork and exec, so a child would report the bench's own peak.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _median(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": xs}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m fastpath.bench_replay",
                                 description="read + End + write pcapng, end to end")
    ap.add_argument("--packets", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=50_000, help="packets for scapy and dpkt")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--dir", default=None, help="where the captures go (default /dev/shm)")
    ap.add_argument("--json", default=None, metavar="PATH")
    ap.add_argument("--no-others", action="store_true", help="skip scapy and dpkt")
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child runs")
    ap.add_argument("--numpy-io", action="store_true",
                    help="use the numpy fallback instead of fastpath._pcapio")
    ap.add_argument("--workers", default="2", metavar="N[,N...]",
                    help="worker counts of the fastpath.replay --workers rows (default 2; "
                         "each against --workers 1)")
    ap.add_argument("--no-workers", action="store_true",
                    help="skip the fastpath.replay --workers rows")
    args = ap.parse_args(argv)
    try:
        counts = sorted({int(x) for x in args.workers.split(",") if x.strip()})
    except ValueError:
        ap.error(f"--workers: not a list of numbers: {args.workers!r}")
    if any(w < 1 for w in counts):
        ap.error("--workers: counts must be >= 1")
    if args.numpy_io:
        fpcap.use_compiled(False)
    base = args.dir or ("/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
                        else None)
    d = tempfile.mkdtemp(prefix="fastpath-bench-replay-", dir=base)
    report = {"packets": args.packets, "frame_bytes": 94, "batch": args.batch,
              "compiled_io": fpcap._io is fpcap._cio, "dir": d,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "processor": platform.processor() or platform.machine()}}
    try:
        src = os.path.join(d, "in.pcapng")
        out = os.path.join(d, "out.pcapng")
        t0 = time.perf_counter()
        cfg, iif = build_capture(src, args.packets, args.batch)
        _warm(src)
        print(f"capture: {args.packets:,} End frames, {os.path.getsize(src) / 1e6:.1f} MB "
              f"in {d} (built in {time.perf_counter() - t0:.1f} s)")
        src_pcap = os.path.join(d, "in.pcap")
        out_pcap = os.path.join(d, "out.pcap")
        build_pcap_copy(src, src_pcap)
        _warm(src_pcap)
        # the three fastpath replays and the two tools, interleaved run by
        # run: the machine's load drifts, and each comparison is made on
        # the same minutes
        cases = (("fastpath", src, out), ("fastpath_pcap_out", src, out_pcap),
                 ("fastpath_pcap_to_pcap", src_pcap, out_pcap))
        times = {k: [] for k, _, _ in cases}
        cpus = {k: [] for k, _, _ in cases}
        thr = {k: [] for k, _, _ in cases}
        tools = {"tcpdump": ["tcpdump", "-r", src_pcap, "-w", out_pcap],
                 "editcap": ["editcap", "-F", "pcapng", src_pcap, out]}
        tool_s = {k: [] for k in tools}
        sizes = {}
        for _ in range(args.runs):
            for name, i, o in cases:
                _fresh(o)
                dt, st = fastpath_replay(_router(cfg), iif, i, o, args.batch, cpus[name],
                                         thr[name])
                assert st.packets == args.packets and st.verdicts.get("forward") == args.packets
                times[name].append(args.packets / dt)
                sizes[name] = os.path.getsize(o)
            for name, argv in tools.items():
                xs = tool_copy(argv, 1, argv[-1])
                if xs is not None:
                    tool_s[name] += xs
        for name, _, _ in cases:
            r = report[name] = _median(times[name])
            r["output_bytes"] = sizes[name]
            r["cpu_ns_per_packet"] = _median([c / args.packets * 1e9 for c in cpus[name]])
            # CPU time over wall time, run by run: the CPUs the replay kept busy
            r["cpus_busy"] = statistics.median(c * p / args.packets
                                               for c, p in zip(cpus[name], times[name]))
            # per thread (they overlap: wall time is at least the largest)
            r["thread_cpu_ns_per_packet"] = {
                t: statistics.median(x[t] / args.packets * 1e9 for x in thr[name])
                for t in ("main", "reader", "writer")}
        for name in tools:
            if tool_s[name]:
                report[name] = {"seconds": _median(tool_s[name]),
                                "packets_per_s": args.packets / statistics.median(tool_s[name])}
            else:
                report[name] = {"skipped": f"{name} not installed"}
        parts = fastpath_parts(cfg, iif, src, out, args.batch, min(args.packets, 200_000))
        report["fastpath_parts_ns_per_packet"] = parts
        for name, label in (("fastpath", "pcapng -> pcapng"),
                            ("fastpath_pcap_out", "pcapng -> pcap  "),
                            ("fastpath_pcap_to_pcap", "pcap   -> pcap  ")):
            r = report[name]
            print(f"fastpath  read+End+write {label}: {r['median'] / 1e6:6.2f} M packets/s "
                  f"(min {r['min'] / 1e6:.2f}, max {r['max'] / 1e6:.2f}; {args.runs} runs), "
                  f"CPU {r['cpu_ns_per_packet']['median']:.0f} ns per packet (all threads: "
                  + ", ".join(f"{t} {v:.0f}" for t, v in r["thread_cpu_ns_per_packet"].items())
                  + f"; {r['cpus_busy']:.2f} CPUs busy)")
        for name, what in (("tcpdump", "copy pcap -> pcap"), ("editcap", "pcap -> pcapng  ")):
            t = report[name]
            if "skipped" in t:
                print(f"{name:<9} skipped: {t['skipped']}")
                continue
            ratio = report["fastpath_pcap_to_pcap" if name == "tcpdump" else "fastpath"]["median"] \
                / t["packets_per_s"]
            t["fastpath_ratio"] = ratio
            print(f"{name:<9} {what}:            {t['packets_per_s'] / 1e6:6.2f} M packets/s "
                  f"({t['seconds']['median']:.3f} s; fastpath with End {ratio:.2f}x)")
        print("          alone: read {read_ns:.0f} ns, datapath {datapath_ns:.0f} ns, "
              "write pcapng {write_ns:.0f} ns, write pcap {write_pcap_ns:.0f} ns per "
              "packet".format(**parts)
              + (f" (pcapng to /dev/null: {parts['write_devnull_ns']:.0f} ns)"
                 if parts["write_devnull_ns"] is not None else ""))
        if not args.no_others:
            small = os.path.join(d, "small.pcapng")
            build_capture(small, args.small, args.batch)
            _warm(small)
            runs = max(1, min(3, args.runs))
            for name, fn in (("fastpath", fastpath_replay), ("scapy", scapy_replay),
                             ("dpkt", dpkt_replay)):
                try:
                    xs = [args.small / fn(_router(cfg), iif, small, out, args.batch)[0]
                          for _ in range(runs)]
                except ImportError as e:
                    report.setdefault("small", {})[name] = {"skipped": str(e)}
                    print(f"{name:<9} skipped: {e}")
                    continue
                report.setdefault("small", {})[name] = _median(xs)
                print(f"{name:<9} on {args.small:,} packets: {statistics.median(xs) / 1e6:8.3f} "
                      f"M packets/s")
        if not args.no_rss:
            cfgpath = os.path.join(d, "routes.conf")
            with open(cfgpath, "w") as f:
                f.write(cfg)
            rss = {}
            sizes = sorted({min(100_000, args.packets), args.packets})
            for n in sizes:
                p = src
                if n != args.packets:
                    p = os.path.join(d, f"in-{n}.pcapng")
                    build_capture(p, n, args.batch)
                    _warm(p)
                res = subprocess.run([sys.executable, "-m", "fastpath.bench_replay", "--child", p,
                                      out, cfgpath, iif, str(args.batch)], capture_output=True,
                                     text=True, check=True)
                rss[str(n)] = json.loads(res.stdout)
            report["peak_rss_kb"] = {k: v["maxrss_kb"] for k, v in rss.items()}
            report["rss_before_replay_kb"] = {k: v["rss_before_kb"] for k, v in rss.items()}
            print("peak RSS: " + ", ".join(
                f"{int(k):,} packets {v['maxrss_kb'] / 1024:.0f} MiB (configured router "
                f"{v['rss_before_kb'] / 1024:.0f} MiB before the replay)" for k, v in rss.items()))
        if not args.no_workers:
            spread = os.path.join(d, "in-spread.pcapng")
            build_capture(spread, args.packets, args.batch, sources=256)
            _warm(spread)
            caps = {"one flow": src, "256 sources": spread}
            rw = report["replay_workers"] = {"cpus": os.cpu_count()}
            try:
                rows = rw["rows"] = workers_rows(d, cfg, iif, caps, counts,
                                                 max(1, min(3, args.runs)), args.batch)
            except (RuntimeError, ValueError) as e:     # (a replay's own message)
                rows = {}
                rw["error"] = str(e)
                print(f"replay    --workers: {e}", file=sys.stderr)
            ncpu = usable_cpus()
            rw["usable_cpus"] = ncpu
            for c, per in rows.items():
                for w, r in per.items():
                    cpu = "" if r["cpus_busy"] is None else (
                        f", CPU {r['cpu_ns_per_packet']:.0f} ns per packet, "
                        f"{r['cpus_busy']:.2f} CPUs busy")
                    print(f"replay    --workers {w:<3} {c:<11}: "
                          f"{r['packets_per_s']['median'] / 1e6:6.2f} M packets/s "
                          f"(min {r['packets_per_s']['min'] / 1e6:.2f}, max "
                          f"{r['packets_per_s']['max'] / 1e6:.2f}), {r['ratio_to_1']:.2f}x "
                          f"--workers 1, {r['datapath_s']:.3f} s in process" + cpu)
                one = per["1"]["cpus_busy"]
                if one:
                    # more workers do at least the one-worker replay's CPU
                    # work per packet (plus the handoff): on ncpu CPUs the
                    # rate can grow by at most ncpu / (CPUs one worker keeps busy)
                    per["1"]["ceiling_ratio"] = ncpu / one
                    print(f"          {c}: --workers 1 keeps {one:.2f} of {ncpu} CPUs busy; "
                          f"more workers can give at most {ncpu / one:.2f}x here")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

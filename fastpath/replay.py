"""Push a capture through the router: ``python -m fastpath.replay``.

    python -m fastpath.replay IN.pcap[ng][.gz]|- (--config ROUTES | --follow NS) [--iif DEV]
        [-o OUT.pcapng|OUT.pcap|-] [--drops DROPS.pcapng] [--workers N]
        [--mode noref|refcount] [--summary text|json] [--batch N]

``--follow NS`` takes the configuration from a network namespace (an
import) and keeps applying its changes while the replay runs (the Router in
line only: ``--workers 1``); the summary then has a ``follow`` part (the
follower's stats).

Each packet enters on ``--iif``; without it, on the interface its pcapng
interface is named after when the configuration has one by that name, else
on the first interface the configuration mentions.  What leaves (forwarded
packets and the ICMP errors the router sends) is written to ``-o``, one
pcapng interface per egress interface (``.pcap``: classic pcap, nanosecond
timestamps; ``--format`` overrides); dropped packets, as they arrived, to
``--drops`` with the drop reason as the packet comment; packets delivered
locally are only counted.  The summary (packets in, per verdict, per egress
interface, per drop and ICMP reason, the seg6local route counters,
throughput) goes to standard output (to standard error when ``-o -`` puts
the capture there).

Exit status: 0; 1 when the configuration or the capture cannot be read
(a capture that turns malformed part way is processed up to the bad
record, its summary printed, then the error), or an output cannot be
written; 2 for bad usage.  Errors are one line on standard error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

PROG = "python -m fastpath.replay"


class _Fail(Exception):
    """A one-line error for the user (exit status ``code``)."""

    def __init__(self, msg, code=1):
        super().__init__(msg)
        self.code = code


def _parser():
    ap = argparse.ArgumentParser(prog=PROG, description="Replay a capture through the fastpath "
                                 "router and write what leaves it.")
    ap.add_argument("input", metavar="IN", help="pcap or pcapng capture (gzip ok), - for stdin")
    ap.add_argument("--config", metavar="ROUTES",
                    help="router configuration (iproute2 / sysctl lines)")
    ap.add_argument("--follow", metavar="NS",
                    help="instead of --config: import a network namespace and follow its "
                         "changes while the replay runs (fastpath.kernel.follow)")
    ap.add_argument("--iif", metavar="DEV", help="ingress interface of every packet")
    ap.add_argument("-o", "--output", metavar="OUT",
                    help="capture of the packets that leave (pcapng; .pcap: classic pcap; "
                         "- stdout)")
    ap.add_argument("--drops", metavar="DROPS", help="capture of the dropped packets (pcapng, "
                    "drop reason as packet comment)")
    ap.add_argument("--format", choices=("pcapng", "pcap", "pcap-us"),
                    help="format of -o (default: from the extension; pcap = nanosecond pcap)")
    ap.add_argument("--workers", type=int, default=1, metavar="N",
                    help="worker processes (N > 1 uses fastpath.Dataplane)")
    ap.add_argument("--mode", choices=("noref", "refcount"), default="noref")
    ap.add_argument("--summary", choices=("text", "json"), default="text")
    ap.add_argument("--batch", type=int, default=4096, metavar="N", help="packets per batch")
    ap.add_argument("--raw12", action="store_true",
                    help="read link type 12 (DLT_RAW of Linux) as raw IP")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on a terminal")
    return ap


# ----------------------------------------------------------------------------
# progress on a terminal
# ----------------------------------------------------------------------------

class _Progress:
    """tqdm or rich when installed, else one self-rewritten line; nothing
    when stderr is not a terminal.  Shown after half a second only."""

    def __init__(self, total, enabled):
        self.total = total
        self.enabled = enabled and sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.done = 0
        self._bar = None
        self._kind = None

    def _start(self):
        try:
            from tqdm import tqdm
            self._bar = tqdm(total=self.total, unit="B", unit_scale=True, file=sys.stderr,
                             desc="replay", leave=False)
            self._kind = "tqdm"
            return
        except ImportError:
            pass
        try:
            from rich.progress import Progress
            self._bar = Progress(transient=True)
            self._bar.start()
            self._task = self._bar.add_task("replay", total=self.total)
            self._kind = "rich"
            return
        except ImportError:
            pass
        self._kind = "line"

    def update(self, offset, packets):
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.t0 < 0.5 or now - self.last < 0.1:
            return
        self.last = now
        if self._kind is None:
            self._start()
        if self._kind == "tqdm":
            self._bar.update(offset - self.done)
        elif self._kind == "rich":
            self._bar.update(self._task, completed=offset)
        else:
            pct = f" {100.0 * offset / self.total:5.1f}%" if self.total else ""
            sys.stderr.write(f"\rreplay: {packets:,} packets{pct}")
            sys.stderr.flush()
        self.done = offset

    def close(self):
        if self._kind == "tqdm":
            self._bar.close()
        elif self._kind == "rich":
            self._bar.stop()
        elif self._kind == "line":
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
        self._kind = None


# ----------------------------------------------------------------------------
# summary
# ----------------------------------------------------------------------------

def _summary(args, stats, bytes_in, counters, writers, error):
    d = {"input": args.input, "packets": stats.packets, "bytes": bytes_in,
         "batches": stats.batches, "verdicts": dict(stats.verdicts),
         "egress": dict(stats.egress), "drop_reasons": dict(stats.drop_reasons),
         "icmp_reasons": dict(stats.icmp_reasons),
         "route_counters": counters.get("routes", {}) if counters else {},
         "reason_counters": counters.get("reasons", {}) if counters else {},
         "outputs": {k: {"path": w.name, "packets": w.packets, "bytes": w.bytes,
                         "per_interface": dict(w.per_interface)} for k, w in writers.items()},
         "elapsed_s": round(stats.elapsed_s, 6), "datapath_s": round(stats.process_s, 6),
         "packets_per_s": round(stats.pps, 1),
         # CPU time of the replay (this process's threads and the workers),
         # and how many CPUs it kept busy on average
         "cpu_s": round(stats.cpu_s, 6),
         "cpu_ns_per_packet": (round(stats.cpu_s / stats.packets * 1e9, 1) if stats.packets
                               else None),
         "cpus_busy": round(stats.cpu_s / stats.elapsed_s, 3) if stats.elapsed_s > 0 else None,
         "mode": args.mode, "workers": args.workers, "error": error}
    return d


def _text(d) -> str:
    def kv(m):
        return "  ".join(f"{k} {v:,}" for k, v in sorted(m.items(), key=lambda x: -x[1])) or "-"
    lines = [f"input           {d['input']}",
             f"packets in      {d['packets']:,} ({d['bytes']:,} bytes, {d['batches']:,} batches)",
             f"verdicts        {kv(d['verdicts'])}",
             f"egress          {kv(d['egress'])}",
             f"drop reasons    {kv(d['drop_reasons'])}",
             f"icmp reasons    {kv(d['icmp_reasons'])}"]
    rc = d["route_counters"]
    if rc:
        lines.append("route counters")
        for k, v in rc.items():
            lines.append(f"  {k}: packets {v['packets']:,} bytes {v['bytes']:,} "
                         f"errors {v['errors']:,}")
    for k, w in d["outputs"].items():
        lines.append(f"{k + ' written':<16}{w['path']}: {w['packets']:,} packets "
                     f"({w['bytes']:,} bytes)")
    mpps = d["packets_per_s"] / 1e6
    lines.append(f"time            {d['elapsed_s']:.3f} s ({mpps:.2f} M packets/s; datapath "
                 f"{d['datapath_s']:.3f} s; mode {d['mode']}, {d['workers']} worker(s))")
    if d["cpus_busy"] is not None:
        lines.append(f"CPU             {d['cpu_s']:.3f} s ({d['cpus_busy']:.2f} CPUs busy"
                     + (f", {d['cpu_ns_per_packet']:.0f} ns per packet)"
                        if d["cpu_ns_per_packet"] is not None else ")"))
    fo = d.get("follow")
    if fo:
        lines.append(f"followed        {fo['netns']}: {fo['messages']:,} messages, "
                     f"{fo['lines']:,} lines in {fo['configures']:,} configures, "
                     f"{fo['resyncs']} resyncs, {fo['errors']} errors"
                     + (", diverged" if fo["diverged"] else ""))
    if d["error"]:
        lines.append(f"stopped at      {d['error']}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------

def _router(args):
    import fastpath
    if args.follow is not None:
        from .kernel.follow import FollowError
        from .kernel.netlink import KernelImportError
        r = fastpath.Router(mode=args.mode)
        try:
            args.follower = r.follow_kernel(args.follow)
        except (KernelImportError, FollowError, OSError) as e:
            raise _Fail(f"--follow {args.follow}: {e}") from None
        args.config = f"namespace {args.follow}"
        return r, r.dump()
    try:
        with open(args.config, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise _Fail(f"cannot read {args.config}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise _Fail(f"{args.config}: not a text file") from None
    r = fastpath.Router(mode=args.mode)
    try:
        r.configure(text)
    except fastpath.ConfigError as e:
        raise _Fail(f"{args.config}: {e}") from None
    return r, text


def _iif_spec(args, router):
    itfs = router.interfaces
    if args.iif is not None:
        if args.iif not in itfs:
            raise _Fail(f"--iif {args.iif}: no such interface in {args.config} "
                        f"(interfaces: {', '.join(n for n in itfs if n != 'lo') or 'none'})")
        return itfs[args.iif].ifindex
    configured = [n for n in itfs if n != "lo"]
    if not configured:
        raise _Fail(f"{args.config}: no interface configured to receive the packets on")
    default = itfs[configured[0]].ifindex

    def pick(capture_if):
        name = capture_if.name
        return itfs[name].ifindex if name in itfs else default
    return pick


def _open_writers(args):
    from . import pcap
    writers = {}
    if args.output:
        fmt = args.format
        if fmt is None:
            base = args.output[:-3] if args.output.endswith(".gz") else args.output
            fmt = "pcap" if base.endswith(".pcap") else "pcapng"
        try:
            if fmt == "pcapng":
                writers["output"] = pcap.PcapngWriter(args.output)
            else:
                writers["output"] = pcap.PcapWriter(args.output, nanosecond=fmt == "pcap")
        except OSError as e:
            raise _Fail(f"cannot write {args.output}: {e.strerror or e}") from None
    if args.drops:
        try:
            writers["drops"] = pcap.open_writer(args.drops, select="drops")
        except OSError as e:
            for w in writers.values():
                w.close()
            raise _Fail(f"cannot write {args.drops}: {e.strerror or e}") from None
    return writers


def _run(args) -> int:
    if args.batch < 1:
        raise _Fail("--batch must be >= 1", 2)
    if args.workers < 1:
        raise _Fail("--workers must be >= 1", 2)
    if (args.config is None) == (args.follow is None):
        raise _Fail("give either --config ROUTES or --follow NS", 2)
    if args.follow is not None and args.workers > 1:
        # a Dataplane is not safe against a configure from another thread
        # while process() runs (see fastpath.kernel.follow)
        raise _Fail("--follow runs the Router in line: --workers 1 only", 2)
    args.follower = None
    try:
        return _run_router(args)
    finally:
        if args.follower is not None:
            args.follower.stop()


def _run_router(args) -> int:
    import fastpath
    from . import pcap
    router, text = _router(args)
    iif = _iif_spec(args, router)
    try:
        reader = pcap.PcapReader(args.input, batch_size=args.batch, iif=iif, raw12=args.raw12)
    except OSError as e:
        raise _Fail(f"cannot read {args.input}: {e.strerror or e}") from None
    except pcap.PcapError as e:
        raise _Fail(str(e)) from None
    writers = _open_writers(args)
    stats = pcap.ReplayStats()
    progress = _Progress(reader.size, not args.no_progress)
    error = None
    counters = {}

    def run(processor):
        nonlocal error
        cpu0 = pcap.cpu_mark(processor)
        t0 = time.perf_counter()
        batches = pcap.Prefetch(reader, 2)       # reading overlaps with processing
        try:
            for _ in pcap.process_batches(processor, batches, output=writers.get("output"),
                                          drops=writers.get("drops"), stats=stats):
                progress.update(reader.offset, stats.packets)
        except pcap.PcapError as e:
            error = str(e)
        finally:
            stats.elapsed_s = time.perf_counter() - t0
            batches.close()
            progress.close()
            stats.cpu_s = pcap.cpu_since(processor, cpu0)

    def close_all():
        reader.close()
        errs = []
        for w in writers.values():
            try:
                w.close()
            except OSError as e:
                errs.append(f"cannot write {w.name}: {e.strerror or e}")
        return errs

    try:
        if args.workers > 1:
            # correctness, not speed: more workers than CPUs share them.  The
            # workers are pinned only when a CPU is left for this process's
            # reader and writer threads: pinned to every CPU, each batch
            # waited for the worker whose CPU the reader (or another job)
            # held (1M End packets, 2 workers on 2 vCPUs: 1.5-1.7 M/s
            # pinned, 2.0-2.3 not)
            from .topology import usable_cpus
            with fastpath.Dataplane(text, workers=args.workers, mode=args.mode,
                                    oversubscribe=True, pin=args.workers < usable_cpus()) as dp:
                reader.alloc = dp.batch_buffer       # batches built where the workers read them
                run(dp)
                counters = dp.counters()
        else:
            run(router)
            counters = router.counters()
    except BaseException:
        close_all()
        raise
    errs = close_all()
    if errs:
        raise _Fail(errs[0])
    d = _summary(args, stats, stats.bytes, counters, writers, error)
    if args.follower is not None:
        d["follow"] = {"netns": args.follow, **args.follower.stats.as_dict(),
                       "diverged": args.follower.diverged}
    out = sys.stderr if args.output == "-" else sys.stdout
    if args.summary == "json":
        out.write(json.dumps(d, indent=2) + "\n")
    else:
        out.write(_text(d) + "\n")
    out.flush()
    if error:
        raise _Fail(error)
    return 0


def main(argv=None) -> int:
    ap = _parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return _run(args)
    except _Fail as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")   # no second error at exit
        except OSError:
            pass
        print(f"{PROG}: output pipe closed", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{PROG}: {e.filename + ': ' if getattr(e, 'filename', None) else ''}"
              f"{e.strerror or e}", file=sys.stderr)
        return 1
    except Exception as e:        # never a traceback for a user; FASTPATH_TRACEBACK=1 shows it
        if os.environ.get("FASTPATH_TRACEBACK"):
            raise
        print(f"{PROG}: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())

"""python -m fastpath.run: fastpath as a router on live interfaces.

    python -m fastpath.run --config router.conf --iface veth0 --iface veth1 \
        [--netns NS] [--stats [SECONDS]] [--neigh] [--json] [--duration S] [--batch N]
        [--qdisc-bypass] [--ring-mb MB] [--backend af_packet|af_xdp] [--xdp-mode MODE]
        [--workers N [--worker-tables shared|own]] [--host-stack]

The configuration's device names are the system's interfaces (their MAC,
MTU and ifindex read from the system unless the configuration sets MAC or
MTU; the system is not changed).  While it runs, an nftables ``netdev``
table with an ingress drop on each attached interface keeps the kernel from
routing the same packets; it is removed on exit (normal, error, Ctrl-C,
SIGTERM).  ``--backend af_xdp``: AF_XDP sockets instead, libxdp's default
XDP program attached (detached on the same exits) and no table.
``--workers N``: N worker processes over PACKET_FANOUT, or with af_xdp
over the devices' RX queues (wire.workers).  ``--host-stack``: the
namespace's own stack keeps working behind fastpath -- what fastpath
delivers locally is handed to the kernel on the device it was delivered on,
and the kernel keeps seeing ARP/ND (wire.host; af_packet only).
SIGHUP re-reads the configuration and applies it (compiled in a thread
while the running one goes on forwarding; a wrong one is refused with one
line, the running one stays).  ``--stats SECONDS`` prints
a line per interval (per interface rx/tx packets/s, drops by reason, the
neighbour count).  Exit status: 0, 2 for a person's error (one line on
stderr: missing interface, not root, bad configuration, nft missing), 1 for
anything else.  See README "On the wire".
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time


class _Stop(Exception):
    pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fastpath.run", allow_abbrev=False,
                                 description="fastpath as a router on live interfaces "
                                             "(AF_PACKET or AF_XDP)")
    ap.add_argument("--config", required=True, help="configuration file (iproute2/sysctl lines)")
    ap.add_argument("--iface", action="append", default=None,
                    help="an interface to attach (repeat); default: every device of the "
                         "configuration but lo and its VRF and dummy devices")
    ap.add_argument("--stats", nargs="?", type=float, const=0.0, default=None, metavar="SECONDS",
                    help="print counters at exit; with SECONDS, also a line every SECONDS")
    ap.add_argument("--neigh", action="store_true", help="print the neighbour table at exit")
    ap.add_argument("--json", action="store_true", help="counters and neighbours as JSON")
    ap.add_argument("--duration", type=float, default=None, help="stop after S seconds")
    ap.add_argument("--batch", type=int, default=256, help="packets per batch (default 256)")
    ap.add_argument("--qdisc-bypass", action="store_true", help="PACKET_QDISC_BYPASS on TX")
    ap.add_argument("--ring-mb", type=float, default=None, metavar="MB",
                    help="af_packet: the RX ring of each socket, in MiB (default 32: 256 "
                         "blocks of 128 KiB; with --workers, each worker's)")
    ap.add_argument("--backend", choices=("af_packet", "af_xdp"), default="af_packet",
                    help="packet I/O: AF_PACKET rings (default) or AF_XDP sockets (libxdp)")
    ap.add_argument("--xdp-mode", choices=("auto", "drv", "skb", "zerocopy"), default="auto",
                    help="af_xdp: where the XDP program runs (auto: driver mode, zero copy if "
                         "offered, else copy; else generic skb mode)")
    ap.add_argument("--workers", type=int, default=None, metavar="N",
                    help="N worker processes, each interface spread over them by "
                         "PACKET_FANOUT_HASH (af_packet) or by RX queue, queue q to worker "
                         "q mod N (af_xdp: each interface needs N queues); this process keeps "
                         "ARP/ND and the configuration")
    ap.add_argument("--worker-tables", choices=("shared", "own"), default="shared",
                    help="with --workers: one copy of the tables in shared memory, updated in "
                         "place under RCU (default), or a Router compiled in each worker")
    ap.add_argument("--host-stack", action="store_true",
                    help="hand what fastpath delivers locally (ping, ssh, BGP to the router's "
                         "addresses) to this namespace's kernel, and let it see ARP/ND: the "
                         "router's own stack keeps working (af_packet)")
    ap.add_argument("--netns", default=None, metavar="NS",
                    help="attach inside network namespace NS (ip netns exec NS ...)")
    ap.add_argument("--ready-file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.netns is not None:
        return _in_netns(args.netns, sys.argv[1:] if argv is None else list(argv))

    from .wire.live import Live, LiveError, ring_blocks
    try:
        with open(args.config) as f:
            text = f.read()
    except OSError as e:
        print(f"fastpath.run: {args.config}: {e.strerror}", file=sys.stderr)
        return 2
    # the arguments' checks: one line each, exit status 2
    wrong = [msg for bad, msg in (
        (not 1 <= args.batch <= 65536, "--batch must be 1..65536"),
        (args.workers is not None and not 1 <= args.workers <= 64, "--workers must be 1..64"),
        (args.ring_mb is not None and not 1 <= args.ring_mb <= 4096, "--ring-mb must be 1..4096"),
        (args.ring_mb is not None and args.backend != "af_packet",
         "--ring-mb is for --backend af_packet"),
        (args.stats is not None and args.stats < 0, "--stats SECONDS must be positive"),
    ) if bad]
    if wrong:
        print(f"fastpath.run: {wrong[0]}", file=sys.stderr)
        return 2

    stopping = {"sig": None, "reload": False}

    def on_signal(signum, _frame):
        stopping["sig"] = signum
        raise _Stop()

    def on_hup(_signum, _frame):
        stopping["reload"] = True

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    old[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hup)
    ring = {} if args.ring_mb is None else {"block_nr": ring_blocks(args.ring_mb)}
    if args.workers is not None:
        from .wire.workers import Supervisor
        live = Supervisor(text, args.iface, workers=args.workers, batch_size=args.batch,
                          qdisc_bypass=args.qdisc_bypass, backend=args.backend,
                          xdp_mode=args.xdp_mode,
                          shared_tables=args.worker_tables == "shared",
                          host_stack=args.host_stack, **ring)
    else:
        live = Live(text, args.iface, batch_size=args.batch, qdisc_bypass=args.qdisc_bypass,
                    backend=args.backend, xdp_mode=args.xdp_mode, host_stack=args.host_stack,
                    **ring)
    t0 = time.monotonic()
    rc = 0
    try:
        try:
            live.open()
        except LiveError as e:
            print(f"fastpath.run: {e}", file=sys.stderr)
            return 2
        if args.ready_file:
            with open(args.ready_file, "w") as f:
                f.write((live.guard.name if live.guard else live.backend) + "\n")
        end = None if args.duration is None else t0 + args.duration
        # a test hook: an exception inside the loop (tests/test_wire.py
        # proves the nftables table goes away on that exit path too)
        fault = os.environ.get("FASTPATH_RUN_FAULT") == "raise"
        every = args.stats or 0
        next_line = time.monotonic() + every if every else None
        last = _totals(live)
        try:
            while end is None or time.monotonic() < end:
                live.step(50)
                if fault:
                    raise RuntimeError("fault injected by FASTPATH_RUN_FAULT")
                if stopping["reload"] and not live.reloading():
                    stopping["reload"] = False      # (SIGHUPs meanwhile: one more reload)
                    _reload(live, args.config)
                if live.reloading():
                    _reload_done(live, args.config)
                if next_line is not None and time.monotonic() >= next_line:
                    now = _totals(live)
                    _interval_line(live, last, now, every)
                    last = now
                    next_line += every
        except _Stop:
            pass
        except LiveError as e:
            print(f"fastpath.run: {e}", file=sys.stderr)
            rc = 1
    except _Stop:
        pass
    except Exception as e:
        if os.environ.get("FASTPATH_TRACEBACK"):
            raise
        print(f"fastpath.run: internal error: {type(e).__name__}: {e}"
              " (FASTPATH_TRACEBACK=1 shows where)", file=sys.stderr)
        rc = 1
    finally:
        # no signal may interrupt the cleanup, nor the report after it (a
        # second SIGTERM would cut its JSON short)
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        live.close()
    elapsed = time.monotonic() - t0
    try:
        if live.router is not None:
            _report(live, args, elapsed, stopping["sig"])
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return rc


def _in_netns(ns, argv):
    """Run again inside ``ns`` as ``ip netns exec`` does (its own /sys, so
    that the interfaces read are the namespace's): exec, so that signals
    reach the process that owns the sockets and the nftables table."""
    import re
    import shutil
    if not re.match(r"^[A-Za-z0-9_.-]{1,64}$", ns) or not os.path.exists(f"/run/netns/{ns}"):
        print(f"fastpath.run: network namespace {ns!r} does not exist (ip netns list)",
              file=sys.stderr)
        return 2
    ip = shutil.which("ip")
    if ip is None:
        print("fastpath.run: --netns needs ip (iproute2)", file=sys.stderr)
        return 2
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--netns":
            skip = True
            continue
        if a.startswith("--netns="):
            continue
        rest.append(a)
    os.execv(ip, [ip, "netns", "exec", ns, sys.executable, "-m", "fastpath.run"] + rest)


def _reload(live, path):
    """SIGHUP: re-read the configuration and start compiling it beside the
    running one (Live.reload_start: in a thread, while the loop goes on
    forwarding and answering ARP/ND); _reload_done swaps it in."""
    from .wire.live import LiveError
    try:
        with open(path) as f:
            text = f.read()
        live.reload_start(text)
    except (OSError, LiveError) as e:
        _refused(e)


def _reload_done(live, path):
    """A reload in flight: once compiled, swapped in (the running one stays
    if the new one is wrong)."""
    from .wire.live import LiveError
    try:
        if not live.reload_poll():
            return
    except LiveError as e:
        _refused(e)
        return
    print(f"fastpath.run: configuration reloaded from {path}", file=sys.stderr, flush=True)


def _refused(e):
    print(f"fastpath.run: reload refused, running configuration kept: "
          f"{getattr(e, 'strerror', None) or e}", file=sys.stderr, flush=True)


def _totals(live):
    c = live.counters()
    drops = {k: v for k, v in c["reasons"].items() if k != "none"}
    drops.update({k: v for k, v in c["wire"].items() if v})
    return {"t": time.monotonic(),
            "if": {n: (i["rx"], i["tx"]) for n, i in c["interfaces"].items()},
            "drops": drops, "neighbours": c["neighbours"]}


def _interval_line(live, a, b, every):
    dt = max(b["t"] - a["t"], 1e-9)
    parts = [f"{n} rx {(rx - a['if'][n][0]) / dt:.0f}/s tx {(tx - a['if'][n][1]) / dt:.0f}/s"
             for n, (rx, tx) in b["if"].items()]
    d = {k: v - a["drops"].get(k, 0) for k, v in b["drops"].items() if v - a["drops"].get(k, 0)}
    parts.append("drops " + (" ".join(f"{k} {v}" for k, v in sorted(d.items())) or "0"))
    parts.append(f"neighbours {b['neighbours']}")
    print("fastpath.run: " + " | ".join(parts), flush=True)


def _report(live, args, elapsed, sig):
    c = live.counters()
    out = sys.stdout
    if args.json:
        doc = {"elapsed_s": round(elapsed, 3), "signal": signal.Signals(sig).name if sig else None,
               "counters": c}
        if args.neigh:
            doc["neighbours"] = live.neighbours()
        if live.backend == "af_xdp":
            doc["xdp_modes"] = live.xdp_modes()
        json.dump(doc, out, indent=1, sort_keys=True)
        out.write("\n")
        return
    rx = sum(i["rx"] for i in c["interfaces"].values())
    tx = sum(i["tx"] for i in c["interfaces"].values())
    how = f" ({signal.Signals(sig).name})" if sig else ""
    print(f"fastpath.run: stopped{how} after {elapsed:.1f} s: {rx} packets received, {tx} sent",
          file=out)
    if "workers" in c:
        print(f"  workers: {c['workers']} (restarts {c['restarts']}), received per worker: "
              + " ".join(str(x) for x in c["worker_rx"]), file=out)
    if live.backend == "af_xdp" and args.stats is not None:
        print("  af_xdp: " + " ".join(f"{n} {m}" for n, m in live.xdp_modes().items()), file=out)
    if args.stats is not None:
        for name, i in c["interfaces"].items():
            freezes = f" ring_freezes {i['ring_freezes']}" if "ring_freezes" in i else ""
            print(f"  {name}: rx {i['rx']} tx {i['tx']} ring_drops {i['ring_drops']}{freezes}"
                  f" otherhost {i['rx_otherhost']}", file=out)
        print("  verdicts: " + " ".join(f"{k} {v}" for k, v in c["verdicts"].items()), file=out)
        drops = {k: v for k, v in c["reasons"].items() if k != "none"}
        drops.update({k: v for k, v in c["wire"].items() if v})
        if drops:
            print("  reasons: " + " ".join(f"{k} {v}" for k, v in sorted(drops.items())), file=out)
        print("  neighbour: " + " ".join(f"{k} {v}" for k, v in c["neighbour"].items() if v),
              file=out)
    if args.neigh:
        for line in live.neighbours():
            print(line, file=out)


if __name__ == "__main__":
    from .router import freeze_after_loads
    freeze_after_loads()            # (this process is ours: see router.gc_paused)
    sys.exit(main())

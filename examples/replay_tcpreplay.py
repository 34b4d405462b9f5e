"""Replay a fastpath output capture onto a wire with tcpreplay.

    sudo python examples/replay_tcpreplay.py [--packets N] [--keep DIR]

1. builds a capture of End packets (the "End" scenario of
   fastpath/scenarios.py: Ethernet + IPv6 + 2-segment SRH) arriving on
   eth0, and pushes it through the router with ``python -m fastpath.replay``
   (``-o out.pcapng``: what leaves, on eth1, with eth1's MAC as source and
   the neighbour's as destination);
2. creates a network namespace with a veth pair (IPv6 off, so the kernel
   sends nothing of its own), starts ``tcpdump`` on one end and plays
   ``out.pcapng`` onto the other with ``tcpreplay``;
3. reads tcpdump's capture back (fastpath.pcap) and checks that every frame
   fastpath wrote went over the wire, byte for byte.

Needs root, ``ip`` (iproute2), network namespaces, ``tcpreplay`` and
``tcpdump`` (Debian: ``apt-get install -y tcpreplay tcpdump``).  Exit
status 0 when the frames match, 1 when they do not, 77 when a
prerequisite is missing (the message says which).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

import numpy as np

import fastpath.pcap as fpcap
from fastpath.scenarios import SCENARIOS

SKIP = 77


def prerequisites() -> str | None:
    """Why this cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, raw sockets)"
    for tool in ("ip", "tcpreplay", "tcpdump"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y iproute2 tcpreplay tcpdump)"
    ns = f"fpcheck{os.getpid()}"
    p = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    if p.returncode:
        return f"cannot create a network namespace: {p.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return None


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def make_output(d: str, n: int) -> tuple[str, list]:
    """The input capture, the replay through fastpath, the frames it wrote."""
    cfg, frames, iif = SCENARIOS["End"][1](10, min(n, 256), 16, np.random.default_rng(7))
    frames = [frames[k % len(frames)] for k in range(n)]
    with open(os.path.join(d, "routes.conf"), "w") as f:
        f.write(cfg + "\n")
    src = os.path.join(d, "in.pcapng")
    with fpcap.PcapngWriter(src) as w:
        w.write_packets(frames, interface=iif, linktype="ethernet",
                        timestamps_ns=[1_700_000_000 * 10**9 + k * 10_000 for k in range(n)])
    out = os.path.join(d, "out.pcapng")
    p = subprocess.run([sys.executable, "-m", "fastpath.replay", src, "--config",
                        os.path.join(d, "routes.conf"), "-o", out], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"fastpath.replay failed: {p.stderr.strip()}")
    print(p.stdout.rstrip())
    written = [pk for b in fpcap.read_batches(out) for pk in b.packets()]
    return out, written


def replay_on_veth(out: str, d: str, expect: int) -> list:
    ns = f"fpreplay{os.getpid()}"
    sh("ip", "netns", "add", ns)
    dump = None
    try:
        ex = ["ip", "netns", "exec", ns]
        sh(*ex, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        sh(*ex, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "add", "va", "type", "veth", "peer", "name", "vb")
        sh("ip", "-n", ns, "link", "set", "va", "up")
        sh("ip", "-n", ns, "link", "set", "vb", "up")
        cap = os.path.join(d, "wire.pcap")
        dump = subprocess.Popen(ex + ["tcpdump", "-i", "vb", "-U", "-n", "--immediate-mode",
                                      "-c", str(expect), "-w", cap, "ip6"],
                                stderr=subprocess.PIPE, text=True)
        # wait until tcpdump listens
        line = dump.stderr.readline()
        if "listening" not in line:
            raise SystemExit(f"tcpdump did not start: {line.strip()}")
        r = sh(*ex, "tcpreplay", "-i", "va", "--pps=10000", out)   # --topspeed overruns the veth
        print(next((x.strip() for x in r.stdout.splitlines() if "Successful packets" in x),
                   "tcpreplay done"))
        try:
            dump.wait(timeout=10)
        except subprocess.TimeoutExpired:
            dump.terminate()
            dump.wait(timeout=5)
        return [pk for b in fpcap.read_batches(cap) for pk in b.packets()]
    finally:
        if dump is not None and dump.poll() is None:
            dump.kill()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _in_order(seen: list, sent: list) -> bool:
    """Whether ``seen`` is ``sent`` with some frames left out."""
    it = iter(sent)
    return all(any(x == y for y in it) for x in seen)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=200)
    ap.add_argument("--keep", metavar="DIR", help="keep the captures in DIR")
    args = ap.parse_args(argv)
    why = prerequisites()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return SKIP
    d = args.keep or tempfile.mkdtemp(prefix="fastpath-tcpreplay-")
    os.makedirs(d, exist_ok=True)
    try:
        out, written = make_output(d, args.packets)
        for attempt in range(1, 4):
            t0 = time.time()
            wire = replay_on_veth(out, d, len(written))
            print(f"fastpath wrote {len(written)} frames; {len(wire)} crossed the veth pair "
                  f"({time.time() - t0:.1f} s)")
            if wire == written:
                print("OK: the output capture replays byte for byte")
                return 0
            missing = sum((Counter(written) - Counter(wire)).values())
            extra = sum((Counter(wire) - Counter(written)).values())
            if extra == 0 and _in_order(wire, written) and attempt < 3:
                # frames lost on the way (a busy machine: the veth's backlog
                # or the capture), every one seen is right: replay again
                print(f"{missing} frame(s) lost on the wire; replaying again", file=sys.stderr)
                continue
            print(f"MISMATCH: {missing} frames written but not seen, {extra} seen but not "
                  "written (or out of order)", file=sys.stderr)
            return 1
        return 1
    finally:
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

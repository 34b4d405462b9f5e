"""``python -m fastpath.kernel bench-follow``: how fast fastpath follows the
kernel (issue 18, part 2).  Needs root and network namespaces.

1. Lag: in a throwaway namespace (two TUN devices), ``ip -n NS -6 route add
   P via G dev tun1`` is started while a Router following the namespace is
   polled with a packet to P (``Router.process``) until its verdict turns
   from ICMP (no route) to forward.  Per sample: the time from starting
   ``ip`` (its process start included, 1-4 ms), from ``ip``'s exit (the
   kernel has the route by then: a lower bound of the lag) to fastpath
   forwarding, and the follower's own lag (the message's receipt by its reader
   to the configure's end).  Measured on an almost empty table, and again
   once the table holds the routes of step 2.
2. Sustained rate: an ``ip -batch`` of N /64 routes run into the namespace
   while it is followed: the kernel's own ``ip -batch`` time, and the time
   until fastpath has applied the last route (routes/s), with the number
   of configures, messages and resyncs (an overrun would show there).

    python -m fastpath.kernel bench-follow [--routes N] [--samples S] [--json PATH]
"""
from __future__ import annotations

import ipaddress
import json
import os
import platform
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from .oracle import IP, KernelOracle


def _ip6(src, dst):
    payload = b"\0" * 8
    return struct.pack("!IHBB", 6 << 28, len(payload), 59, 64) + \
        ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed + payload


def _summ(xs):
    xs = sorted(xs)
    if not xs:
        return None
    return {"median_ms": round(statistics.median(xs) * 1e3, 3),
            "p90_ms": round(xs[min(len(xs) - 1, int(len(xs) * 0.9))] * 1e3, 3),
            "min_ms": round(xs[0] * 1e3, 3), "max_ms": round(xs[-1] * 1e3, 3)}


def _lag(k, r, f, samples: int, base: int, timeout: float = 10.0) -> dict:
    import fastpath
    from_start, from_exit, follower = [], [], []
    for i in range(samples):
        pfx = f"2001:db8:{0xf000 + base + i:x}::/48"
        dst = str(ipaddress.IPv6Network(pfx)[5])
        b0 = fastpath.Batch.from_packets([_ip6("2001:db8:1::2", dst)], iif="tun0")
        pkt = b0.copy()
        r.process(pkt)
        assert pkt.results()[0].verdict != "forward", "the prefix is already routed"
        t0 = time.perf_counter()
        p = subprocess.Popen([IP, "-n", k.netns, "-6", "route", "add", pfx, "via", "2001:db8:2::2",
                              "dev", "tun1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t_exit = t_fwd = None
        deadline = t0 + timeout
        while t_fwd is None or t_exit is None:
            now = time.perf_counter()
            if t_exit is None and p.poll() is not None:
                t_exit = now
                if p.returncode != 0:
                    raise RuntimeError(f"ip route add failed: {p.stderr.read().decode().strip()}")
            if t_fwd is None:
                pkt = b0.copy()
                r.process(pkt)
                if pkt.results()[0].verdict == "forward":
                    t_fwd = time.perf_counter()
            if now > deadline:
                p.kill()
                raise RuntimeError(f"fastpath did not forward to {pfx} within {timeout} s")
        p.stderr.close()
        from_start.append(t_fwd - t0)
        from_exit.append(max(0.0, t_fwd - t_exit))
        if f.stats.last_lag is not None:
            follower.append(f.stats.last_lag)
    return {"samples": samples, "from_ip_start": _summ(from_start),
            "from_ip_exit": _summ(from_exit), "follower_lag": _summ(follower)}


def run(routes: int = 100_000, samples: int = 30) -> dict:
    import fastpath
    out = {"machine": {"kernel": platform.release(), "cpus": os.cpu_count(),
                       "python": platform.python_version()},
           "routes": routes}
    with KernelOracle(ifaces=("tun0", "tun1")) as k:
        k.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0\nip -6 addr add 2001:db8:2::1/64 dev tun1")
        r = fastpath.Router()
        with r.follow_kernel(k.netns) as f:
            f.sync()
            out["lag_small_table"] = _lag(k, r, f, samples, 0)
            # sustained: one ip -batch of `routes` routes
            with tempfile.NamedTemporaryFile("w", prefix="fp-follow-", suffix=".batch",
                                             delete=False) as tf:
                for i in range(routes):
                    tf.write(f"route add 2001:db8:{0x100 + (i >> 16):x}:{i & 0xffff:x}::/64 "
                             "via 2001:db8:2::2 dev tun1\n")
                path = tf.name
            try:
                s0 = f.stats.as_dict()
                t0 = time.perf_counter()
                subprocess.run([IP, "-n", k.netns, "-batch", path], check=True)
                t_ip = time.perf_counter() - t0
                f.sync(timeout=3600)
                t_fp = time.perf_counter() - t0
            finally:
                os.unlink(path)
            s1 = f.stats.as_dict()
            batch_net = ipaddress.IPv6Network("2001:db8:100::/40")
            n6 = sum(1 for key in r.state.routes if key[0] == 6 and key[1] == 254
                     and key[2].prefixlen == 64 and key[2].subnet_of(batch_net))
            out["sustained"] = {
                "kernel_ip_batch_s": round(t_ip, 3),
                "kernel_routes_per_s": round(routes / t_ip),
                "fastpath_applied_s": round(t_fp, 3),
                "fastpath_routes_per_s": round(routes / t_fp),
                "routes_in_fastpath": n6,
                "messages": s1["messages"] - s0["messages"],
                "configures": s1["configures"] - s0["configures"],
                "lines": s1["lines"] - s0["lines"],
                "resyncs": s1["resyncs"] - s0["resyncs"],
                "overruns": s1["overruns"] - s0["overruns"],
                "max_follower_lag_s": round(s1["max_lag"] or 0, 3)}
            out["lag_large_table"] = _lag(k, r, f, samples, samples)
            out["follow_stats"] = f.stats.as_dict()
    return out


def main(args) -> int:
    d = run(args.routes, args.samples)
    text = json.dumps(d, indent=2)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")
    print(text)
    sys.stdout.flush()
    return 0

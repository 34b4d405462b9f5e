"""``python -m fastpath.bench_cref``: fastpath's End against a plain C End
over DPDK's ``rte_lpm6``, side by side, on the same tables and frames.

The C program (``fastpath/cref/end_lpm6.c``) is the yardstick of issue #4's
targets ("within 1.2x of a plain C implementation"): per packet it does the
receive checks, the local-then-main lookup, the SRH checks, the advance, the
second lookup and the forward checks, and nothing else (no statistics, no
counters, no traces).  It runs twice: plain (its LPM returns a nexthop from a
handful), and with the per-route state the kernel keeps and fastpath
models (its LPM returns a route, whose 64-byte entry and per-CPU copy each
lookup touches for the lazy ``__use`` statistics).  This module

1. builds a benchmark scenario (``End`` or ``End-fib``, as
   ``python -m fastpath.bench`` does) and writes its IPv6 tables, nexthops
   and frames into the file the C program reads;
2. compiles the C program against the system's DPDK (``pkg-config
   libdpdk``; Debian: ``apt-get install libdpdk-dev``);
3. checks that it forwards exactly the frames fastpath forwards, to the same
   devices, with the same bytes -- so that both do the same work -- and
   refuses to time anything else;
4. times both, alternating run by run on the same CPU: the C program in a
   process of its own, fastpath in one ``Dataplane`` worker (noref, lazy
   use statistics), both as ``Datapath.run_loop`` does (the batch restored
   outside the timed region, the clock read around each batch).
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

import numpy as np

from .bench import UsageError, _Parser, run_cli
from .scenarios import SCENARIOS

BEHAVIORS = ("End", "End-fib", "End-inet")
SID = "fc00:1::100"                     # the scenarios' End SID (a /128 route)
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cref", "end_lpm6.c")
NH_NONE, NH_FWD, NH_END, NH_OTHER = 0, 1, 2, 3
_HDR = struct.Struct("<8s8I")
_ROUTE = struct.Struct("<16sBBHI")
_NH = struct.Struct("<BBHI12s")
_REC = 5                                # verify output: verdict u8, oif u16, length u16
SIDES = {"c": "C End, rte_lpm6",
         "c_state": "C End, rte_lpm6, kernel's per-route state",
         "fastpath": "fastpath, 1 worker (noref, lazy use stats)"}


def _parser():
    ap = _Parser(prog="python -m fastpath.bench_cref",
                 description="fastpath's End against a C End over DPDK's rte_lpm6, side by side.")
    ap.add_argument("--behavior", default="End", choices=BEHAVIORS)
    ap.add_argument("--fib-size", type=int, default=1000)
    ap.add_argument("--flows", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--pool", type=int, default=0,
                    help="frames gone round (default: one batch), as python -m fastpath.bench")
    ap.add_argument("--sid-len", type=int, default=128, metavar="LEN",
                    help="prefix length of the End SID's route, 32..128 (default 128, as the "
                         "scenarios; rte_lpm6 walks one level per byte past the first 24 bits)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per run")
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"), help="C compiler (default: $CC or cc)")
    ap.add_argument("--json", metavar="PATH")
    return ap


# -- the reference's input ---------------------------------------------------------

def export(st, frames: list, iif: str, batch: int) -> tuple:
    """(bytes of the C program's input file, interface names by index), for
    a configuration ``st`` (a ``config.State``: a Router's ``state``).

    Routes of the local and main IPv6 tables; a nexthop per route: End
    (seg6local End without flavors or counters), forward (unicast through a
    gateway with a known neighbour, one nexthop, no metrics the C program
    does not model) or other (anything else: the C program hands it back)."""
    from .config import RT_TABLE_MAIN
    names = {itf.ifindex: n for n, itf in st.interfaces.items()}
    if iif not in st.interfaces:
        raise UsageError(f"ingress interface {iif!r} is not in the configuration")
    fwd_on = bool(st.forwarding(6))
    hmac = st.sysctls.get(f"net.ipv6.conf.{iif}.seg6_require_hmac", 0) > 0
    best = {}
    for r in st.routes.values():
        if r.family != 6 or r.table not in (255, RT_TABLE_MAIN):
            continue
        k = (r.table, r.prefix)
        if k not in best or r.metric < best[k].metric:
            best[k] = r
    nhs = [(NH_NONE, 0, 0, bytes(12))]
    nh_index = {}
    routes = []
    for (table, prefix), r in best.items():
        kind, oif, mtu, eth = NH_OTHER, 0, 0, bytes(12)
        if r.type == "unicast" and r.encap is not None and not hmac and \
                getattr(r.encap, "action", None) == "End" and not r.encap.flavors and not r.encap.count:
            kind = NH_END
        elif (r.type == "unicast" and r.encap is None and fwd_on and len(r.nexthops) == 1
              and r.gateway is not None and r.gateway.version == 6 and r.hoplimit is None):
            itf = st.interfaces.get(r.dev)
            mac = st.neighbours.get((r.dev, r.gateway))
            if itf is not None and itf.up and itf.vlan is None and mac is not None:
                kind, oif = NH_FWD, itf.ifindex
                mtu = max(1280, min(itf.mtu, r.mtu or itf.mtu))
                eth = bytes(mac) + bytes(itf.mac)
        key = (kind, oif, mtu, eth)
        if key not in nh_index:
            nh_index[key] = len(nhs)
            nhs.append(key)
        routes.append(_ROUTE.pack(prefix.network_address.packed, prefix.prefixlen,
                                  0 if table == 255 else 1, 0, nh_index[key]))
    if not frames:
        raise UsageError("no frames")
    batch = min(batch, len(frames))
    longest = max(len(f) for f in frames)
    slot = max(64, (longest + 63) // 64 * 64)
    out = [_HDR.pack(b"FPCREF1\0", len(routes), len(nhs), len(frames), slot, batch,
                     st.interfaces[iif].ifindex, _groups(best, 255), _groups(best, RT_TABLE_MAIN))]
    out += routes
    out += [_NH.pack(k, 0, o, m, e) for k, o, m, e in nhs]
    for f in frames:
        out.append(struct.pack("<I", len(f)) + f + bytes(slot - len(f)))
    return b"".join(out), names


def _groups(routes, table: int) -> int:
    """The tbl8 groups a table needs: as many as fastpath's LPM, which has
    rte_lpm6's layout, uses for the same prefixes."""
    from .lpm import Lpm
    nets = [p for (t, p) in routes if t == table]
    if not nets:
        return 0
    lpm = Lpm(6)
    addrs = np.frombuffer(b"".join(p.network_address.packed for p in nets), np.uint8).reshape(-1, 16)
    lpm.add_many(addrs, [p.prefixlen for p in nets], np.ones(len(nets), np.uint32))
    return lpm.groups_in_use


# -- building and running it --------------------------------------------------------

def build(workdir: str, cc: str) -> tuple:
    """Compile the C program; (path, description).  UsageError when DPDK's
    development files or the compiler are missing, or the build fails."""
    if shutil.which("pkg-config") is None:
        raise UsageError("pkg-config not found (Debian: apt-get install pkg-config libdpdk-dev)")
    pc = subprocess.run(["pkg-config", "--cflags", "--libs", "libdpdk"], capture_output=True, text=True)
    if pc.returncode != 0:
        raise UsageError("DPDK's development files not found by pkg-config "
                         "(Debian: apt-get install libdpdk-dev)")
    ver = subprocess.run(["pkg-config", "--modversion", "libdpdk"], capture_output=True,
                         text=True).stdout.strip()
    if shutil.which(cc) is None:
        raise UsageError(f"C compiler {cc!r} not found")
    exe = os.path.join(workdir, "end_lpm6")
    cmd = [cc, "-O3", "-o", exe, SOURCE] + pc.stdout.split()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise UsageError(f"building {SOURCE} failed:\n{res.stderr.strip()}")
    return exe, f"{os.path.basename(SOURCE)}, {cc} -O3, DPDK {ver} rte_lpm6"


def configured(cfg: str):
    """A Router (fast path on) with ``cfg``; its ``state`` is what export() takes."""
    from .router import Router
    router = Router()
    router.configure(cfg)
    return router


def fastpath_results(router, frames: list, iif: str) -> list:
    """What fastpath does with each frame."""
    from .batch import Batch
    return router.process(Batch.from_packets(frames, iif=iif, linktype="ethernet")).results()


def verify(exe: str, path: str, cfg: str, frames: list, iif: str, names: dict, workdir: str,
           state: bool = False, results=None) -> dict:
    """Run every frame once through both (the C program with the kernel's
    per-route state or without; fastpath's ``results`` when already known);
    raise RuntimeError on the first frame they treat differently.  Returns
    the counts."""
    outp = os.path.join(workdir, "verify.out")
    res = subprocess.run([exe, path, "verify", outp] + (["state"] if state else []),
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"the C reference failed: {res.stderr.strip()}")
    with open(outp, "rb") as f:
        raw = f.read()
    slot = (len(raw) // len(frames)) - _REC
    fp = results if results is not None else fastpath_results(configured(cfg), frames, iif)
    fwd = 0
    for i, r in enumerate(fp):
        rec = raw[i * (slot + _REC):(i + 1) * (slot + _REC)]
        verdict, oif, length = rec[0], int.from_bytes(rec[1:3], "little"), int.from_bytes(rec[3:5], "little")
        if verdict == 1:
            data = rec[_REC:_REC + length]
            if r.verdict != "forward" or r.oif != names.get(oif) or r.data != data:
                raise RuntimeError(f"frame {i}: the C reference forwards it on {names.get(oif)} as "
                                   f"{data.hex()}; fastpath: {r!r} {r.data.hex()}")
            fwd += 1
        elif r.verdict == "forward":
            raise RuntimeError(f"frame {i}: fastpath forwards it ({r!r}); the C reference does not "
                               "handle it, so it does not do the same work")
    return {"frames": len(frames), "forwarded": fwd}


class _Reference:
    """The C program serving timed runs, pinned to one CPU."""

    def __init__(self, exe: str, path: str, cpu, state: bool = False):
        pre = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        self.p = subprocess.Popen([exe, path, "serve"] + (["state"] if state else []),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, preexec_fn=pre)
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            err = self.p.stderr.read()
            raise RuntimeError(f"the C reference did not start: {err.strip() or line.strip()}")

    def run(self, seconds: float) -> float:
        self.p.stdin.write(f"{seconds}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().split()
        if not line:
            raise RuntimeError(f"the C reference stopped: {self.p.stderr.read().strip()}")
        return float(line[0])

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()


def run(argv=None, out=None) -> int:
    from . import topology
    out = out if out is not None else sys.stdout
    from .bench import _traffic
    from .dataplane import Dataplane
    args = _parser().parse_args(argv)
    for k in ("fib_size", "flows", "batch", "runs"):
        if getattr(args, k) < 1:
            raise UsageError(f"--{k.replace('_', '-')} must be at least 1")
    if args.pool < 0 or args.duration <= 0:
        raise UsageError("--pool must be >= 0 and --duration > 0")
    if not 32 <= args.sid_len <= 128:
        raise UsageError("--sid-len must be between 32 and 128")
    args.pcap = None
    cfg, frames, iif, lt = _traffic(args, args.behavior)
    if args.sid_len != 128:
        sid = ipaddress.IPv6Network(f"{SID}/{args.sid_len}", strict=False)
        cfg = cfg.replace(f"{SID}/128", str(sid))
    topo = topology.read_topology()
    print(f"# {topo.describe()}", file=out)
    with tempfile.TemporaryDirectory(prefix="fastpath-cref-") as wd:
        exe, what = build(wd, args.cc)
        # (the configuration parsed once, for both: 220k routes take seconds)
        router = configured(cfg)
        data, names = export(router.state, frames, iif, args.batch)
        path = os.path.join(wd, "input.bin")
        with open(path, "wb") as f:
            f.write(data)
        print(f"# C reference: {what}", file=out)
        fp = fastpath_results(router, frames, iif)
        del router
        chk = verify(exe, path, cfg, frames, iif, names, wd, results=fp)
        verify(exe, path, cfg, frames, iif, names, wd, state=True, results=fp)
        del fp
        print(f"# checked: of {chk['frames']} frames all three forward the same {chk['forwarded']}, "
              "on the same devices, with the same bytes", file=out, flush=True)
        ns = {k: [] for k in SIDES}
        with Dataplane(cfg, workers=1, mode="noref", use_stats="lazy",
                       max_routes=max(1 << 16, 2 * args.fib_size + 1024)) as dp:
            cpu = list(dp.cpus)[0] if dp.cpus else None
            refs = {}
            try:
                refs["c"] = _Reference(exe, path, cpu)
                refs["c_state"] = _Reference(exe, path, cpu, state=True)
                for _ in range(args.runs):
                    for k, ref in refs.items():
                        ns[k].append(ref.run(args.duration))
                    res = dp.bench(frames, iif, lt, duration=args.duration, workers=[0], batch=args.batch)
                    ns["fastpath"].append(res[0]["busy_s"] / res[0]["packets"] * 1e9)
            finally:
                for ref in refs.values():
                    ref.close()
    med = {k: statistics.median(v) for k, v in ns.items()}
    print(f"\n{args.behavior}: {SCENARIOS[args.behavior][0]}", file=out)
    print(f"FIB {args.fib_size} routes, SID route /{args.sid_len}, {args.flows} flows, "
          f"pool {max(args.pool, args.batch)}, "
          f"batch {args.batch}; ns/packet, median (min-max) of {args.runs} run(s) x {args.duration:g} s, "
          f"alternating on CPU {cpu}", file=out)
    print(f"{'':<46}{'ns/packet':>22}{'Mpps':>9}{'fastpath/it':>13}", file=out)
    for k, v in ns.items():
        m = med[k]
        ratio = "" if k == "fastpath" else f"{med['fastpath'] / m:.2f}x"
        print(f"{SIDES[k]:<46}{m:>8.2f} ({min(v):.2f}-{max(v):.2f}){1e3 / m:>9.2f}{ratio:>13}", file=out)
    if args.json:
        doc = {"machine": topo.to_dict(), "args": vars(args), "reference": what, "checked": chk,
               "ns": ns, "median_ns": med,
               "ratio": {k: med["fastpath"] / med[k] for k in ("c", "c_state")}}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)
    return 0


def main(argv=None) -> int:
    return run_cli("python -m fastpath.bench_cref", run, argv)


if __name__ == "__main__":
    sys.exit(main())

"""Forwarding on the wire: ``python -m fastpath.bench_wire`` (root).

    python -m fastpath.bench_wire [--seconds S] [--batch N] [--scenario ipv4|ipv6|End|all]
        [--json PATH]

The topology of tests/test_wire.py, made for the run and deleted after it:
``h1 --veth-- r --veth-- h2``, network namespaces.  A generator in h1 sends
UDP frames (256 flows, addressed to r1's MAC: IPv4 and IPv6 of 64 bytes,
and SRv6 End frames, IPv6 + a 2-segment SRH to End on fc00:1::1, next
segment routed to h2) as fast as it can
from an AF_PACKET socket with sendmmsg (fastpath._afpacket, 256 frames a
call); h2 drops everything at its netdev ingress (so it costs nothing) and
its veth's rx_packets counter is the forwarded count.  The same traffic is
forwarded, in turn, by

* ``fastpath``: ``python -m fastpath.run`` in r (AF_PACKET TPACKET_V3 rings,
  sendmmsg TX);
* ``fastpath-qdisc-bypass``: the same with PACKET_QDISC_BYPASS;
* ``fastpath-af_xdp``: ``--backend af_xdp`` (AF_XDP sockets, libxdp's
  default program in veth's driver mode, copy mode);
* ``fastpath-workersN``: AF_PACKET with ``--workers N`` (PACKET_FANOUT);
* ``kernel``: r's kernel, configured as the same router (no fastpath, no
  ingress drop).

Reported per scenario and forwarder: offered (generator) and forwarded
packets/s (the median of --runs interleaved runs, each run's rate
listed), loss, the ring's drops, and the CPU seconds per second of the generator, of
fastpath's process (with its workers), and of softirq (the kernel's veth and forwarding path,
machine-wide, from /proc/stat) so that the bottleneck is visible.  Rates
are under overload (the generator sends at its maximum), not the 0.5%-loss
throughput of the issue's method; on a shared 2-core VM they are noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONF = """\
ip addr add 10.1.0.1/24 dev r1
ip -6 addr add 2001:db8:1::1/64 dev r1
ip addr add 10.2.0.1/24 dev r2
ip -6 addr add 2001:db8:2::1/64 dev r2
sysctl -w net.ipv6.conf.all.seg6_enabled=1
sysctl -w net.ipv6.conf.r1.seg6_enabled=1
ip -6 route add fc00:1::1/128 encap seg6local action End dev r1
ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev r2
"""

GEN = r"""
import socket, sys, time, struct
import numpy as np
from fastpath import _afpacket
from fastpath.batch import Batch
dev, dmac, fam, secs, nflows = sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), 256
smac = bytes.fromhex(open(f"/sys/class/net/{dev}/address").read().strip().replace(":", ""))
def csum(b):
    s = sum(struct.unpack(f"!{len(b)//2}H", b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
frames = []
for k in range(nflows):
    udp = struct.pack("!HHHH", 1024 + k, 9, 8 + 18, 0) + bytes(18)
    if fam == 4:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                         bytes([10, 1, 0, 2]), bytes([10, 2, 0, 2]))
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        frames.append(dmac + smac + b"\x08\x00" + ip + udp)
    elif fam == 6:
        src = bytes.fromhex("20010db8000100000000000000000002"); dst = bytes.fromhex("20010db8000200000000000000000002")
        ip = struct.pack("!IHBB", 6 << 28, len(udp), 17, 64) + src + dst
        frames.append(dmac + smac + b"\x86\xdd" + ip + udp)
    else:   # End: SRH (fc00:2::100, fc00:1::1), segments left 1, to fc00:1::1
        src = bytes.fromhex("20010db8000100000000000000000002")
        sid1 = bytes.fromhex("fc000001000000000000000000000001"); sid2 = bytes.fromhex("fc000002000000000000000000000100")
        srh = struct.pack("!BBBBBBH", 17, 4, 4, 1, 1, 0, 0) + sid2 + sid1
        ip = struct.pack("!IHBB", 6 << 28, len(srh) + len(udp), 43, 64) + src + sid1
        frames.append(dmac + smac + b"\x86\xdd" + ip + srh + udp)
B = 256
b = Batch.from_packets([frames[k % nflows] for k in range(B)], linktype="ethernet")
s = _afpacket.Socket(dev, socket.if_nametoindex(dev), block_size=1 << 16, block_nr=2, qdisc_bypass=True)
idx = np.arange(B, dtype=np.int32)
# warm-up: lets the router resolve h2
s.tx(b, idx[:8]); time.sleep(0.6)
print("go", flush=True)
sent = 0; t0 = time.perf_counter(); c0 = time.process_time()
end = t0 + secs
while time.perf_counter() < end:
    sent += s.tx(b, idx)
dt = time.perf_counter() - t0
print(sent, dt, time.process_time() - c0, flush=True)
"""


RINGCOPY = r"""
import json, socket, sys, time
import numpy as np
from fastpath import _afpacket
from fastpath.batch import Batch
K, reps, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rx = _afpacket.Socket("rc0", socket.if_nametoindex("rc0"), block_size=1 << 20, block_nr=16)
txs = _afpacket.Socket("rc1", socket.if_nametoindex("rc1"), block_size=1 << 16, block_nr=2)
dmac = bytes.fromhex(open("/sys/class/net/rc0/address").read().strip().replace(":", ""))
frame = dmac + b"\x02" * 6 + b"\x86\xdd" + bytes(size - 14)   # to rc0: PACKET_HOST
while open("/sys/class/net/rc0/operstate").read().strip() != "up":
    time.sleep(0.01)
time.sleep(0.2)
src = Batch.from_packets([frame] * 256, linktype="ethernet")
b = Batch(np.zeros((256, 2048), np.uint8), np.zeros(256, np.int32), np.zeros(256, np.int32),
          linktype="ethernet")
idx = np.arange(256, dtype=np.int32)
def fill():
    sent = 0
    while sent < K:
        sent += txs.tx(src, idx[:min(256, K - sent)])
    time.sleep(0.03)      # the last block retires (1 ms timer)
out = {"copy": [], "walk": []}
for _ in range(reps):
    for mode in ("copy", "walk"):
        rx.walk(); fill()
        t0 = time.perf_counter(); n = 0
        if mode == "copy":
            while True:
                m = rx.rx(b)
                if not m: break
                n += m
        else:
            n = rx.walk()
        dt = time.perf_counter() - t0
        out[mode].append(dt / max(n, 1) * 1e9)
        out[mode + "_frames"] = n
print(json.dumps(out))
"""


def ring_copy(seconds_unused=None, frames=20000, reps=5, size=64):
    """ns per frame of filling Batch rows from the ring (one copy) against
    walking the same ring without copying (what a batch built in the ring
    memory itself could save at most), on a veth pair in a namespace."""
    ns = f"fpc{os.getpid() % 100000}"
    _sh("ip", "netns", "add", ns)
    try:
        _sh("ip", "-n", ns, "link", "add", "rc0", "type", "veth", "peer", "name", "rc1")
        _sh("ip", "-n", ns, "link", "set", "rc0", "up")
        _sh("ip", "-n", ns, "link", "set", "rc1", "up")
        env = dict(os.environ, PYTHONPATH=ROOT)
        r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", RINGCOPY, str(frames),
                            str(reps), str(size)], capture_output=True, text=True, env=env, check=True)
        d = json.loads(r.stdout)
    finally:
        _sh("ip", "netns", "del", ns, check=False)
    import statistics
    c, w = statistics.median(d["copy"]), statistics.median(d["walk"])
    return {"frame_bytes": size, "frames": d["copy_frames"], "copy_ns_per_frame": round(c, 1),
            "walk_ns_per_frame": round(w, 1), "copy_cost_ns": round(c - w, 1),
            "copy_runs": [round(x, 1) for x in d["copy"]], "walk_runs": [round(x, 1) for x in d["walk"]]}


def _sh(*cmd, ns=None, check=True):
    if ns:
        cmd = ("ip", "netns", "exec", ns) + cmd
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def _counter(ns, dev, what="rx_packets"):
    return int(_sh("cat", f"/sys/class/net/{dev}/statistics/{what}", ns=ns).stdout)


def _softirq():
    with open("/proc/stat") as f:
        parts = f.readline().split()
    return int(parts[7]) / os.sysconf("SC_CLK_TCK")


def _tree_cpu(pid, which=(11, 12)):
    """CPU seconds of a process and its live children (--workers)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        kids = []
    return _proc_cpu(pid, which) + sum(_proc_cpu(k, which) for k in kids)


def _proc_cpu(pid, which=(11, 12)):
    """utime + stime (or one of them) of a process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return sum(int(parts[k]) for k in which) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


class Topology:
    def __init__(self):
        p = f"fpb{os.getpid() % 100000}"
        self.h1, self.h2, self.r = p + "h1", p + "h2", p + "r"
        self.made = []

    def __enter__(self):
        try:
            self._make()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _make(self):
        h1, h2, r = self.h1, self.h2, self.r
        for n in (h1, h2, r):
            _sh("ip", "netns", "add", n)
            self.made.append(n)
        _sh("ip", "-n", r, "link", "add", "r1", "type", "veth", "peer", "name", "h1e", "netns", h1)
        _sh("ip", "-n", r, "link", "add", "r2", "type", "veth", "peer", "name", "h2e", "netns", h2)
        for h, dev, a4, a6 in ((h1, "h1e", "10.1.0.2/24", "2001:db8:1::2/64"),
                               (h2, "h2e", "10.2.0.2/24", "2001:db8:2::2/64")):
            _sh("ip", "-n", h, "addr", "add", a4, "dev", dev)
            _sh("ip", "-n", h, "-6", "addr", "add", a6, "dev", dev, "nodad")
            _sh("ip", "-n", h, "link", "set", dev, "up")
        _sh("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1", ns=r)
        for dev, a4, a6 in (("r1", "10.1.0.1/24", "2001:db8:1::1/64"),
                            ("r2", "10.2.0.1/24", "2001:db8:2::1/64")):
            _sh("ip", "-n", r, "addr", "add", a4, "dev", dev)
            _sh("ip", "-n", r, "-6", "addr", "add", a6, "dev", dev, "nodad")
            _sh("ip", "-n", r, "link", "set", dev, "up")
        # the kernel as the same SRv6 router (End on fc00:1::1)
        _sh("sysctl", "-qw", "net.ipv6.conf.all.seg6_enabled=1", "net.ipv6.conf.r1.seg6_enabled=1",
            ns=r)
        _sh("ip", "-n", r, "-6", "route", "add", "fc00:1::1/128", "encap", "seg6local", "action",
            "End", "dev", "r1")
        _sh("ip", "-n", r, "-6", "route", "add", "fc00:2::/32", "via", "2001:db8:2::2", "dev", "r2")
        # h2: ARP and ND answered by its kernel, the UDP flood dropped at ingress
        subprocess.run(["ip", "netns", "exec", h2, "nft", "-f", "-"], check=True, text=True,
                       input="table netdev sink {\n chain in {\n  type filter hook ingress device "
                             "\"h2e\" priority 0; policy accept;\n  udp dport 9 drop\n"
                             "  ip6 daddr fc00::/16 drop\n }\n}\n")
        self.r1mac = _sh("cat", "/sys/class/net/r1/address", ns=r).stdout.strip().replace(":", "")
        time.sleep(0.3)

    def __exit__(self, *exc):
        for n in self.made:
            _sh("ip", "netns", "del", n, check=False)
        self.made = []


def run_one(t, fam, forwarder, seconds, batch, conf_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    fp = None
    _sh("ip", "-n", t.r, "neigh", "flush", "all", check=False)
    if forwarder.startswith("fastpath"):
        ready = conf_path + ".ready"
        if os.path.exists(ready):
            os.remove(ready)
        cmd = ["ip", "netns", "exec", t.r, sys.executable, "-m", "fastpath.run", "--config",
               conf_path, "--iface", "r1", "--iface", "r2", "--json", "--batch", str(batch),
               "--ready-file", ready]
        if forwarder.endswith("bypass"):
            cmd.append("--qdisc-bypass")
        if forwarder.endswith("af_xdp"):
            cmd += ["--backend", "af_xdp"]
        w = forwarder.partition("-workers")[2]
        if w:
            cmd += ["--workers", w]
        fp = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        end = time.monotonic() + 20
        while not os.path.exists(ready):
            if fp.poll() is not None or time.monotonic() > end:
                raise RuntimeError("fastpath.run did not start: " + fp.communicate()[1])
            time.sleep(0.02)
    gen = subprocess.Popen(["ip", "netns", "exec", t.h1, sys.executable, "-c", GEN, "h1e", t.r1mac,
                            str(fam), str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env)
    line = gen.stdout.readline()
    if line.strip() != "go":
        raise RuntimeError("generator failed: " + line + gen.communicate()[1])
    rx0, in0 = _counter(t.h2, "h2e"), _counter(t.r, "r1")
    si0, fc0 = _softirq(), _tree_cpu(fp.pid) if fp else 0.0
    fu0 = _tree_cpu(fp.pid, (11,)) if fp else 0.0
    t0 = time.perf_counter()
    out, err = gen.communicate(timeout=seconds + 30)
    dt = time.perf_counter() - t0
    time.sleep(0.05)
    rx1, in1 = _counter(t.h2, "h2e"), _counter(t.r, "r1")
    si1 = _softirq()
    fcpu = 0.0
    stats = None
    fuser = 0.0
    if fp:
        # the fastpath process and its workers (--workers; measured while
        # they run: a child's time is gone from /proc once it exits)
        fcpu = _tree_cpu(fp.pid) - fc0
        fuser = _tree_cpu(fp.pid, (11,)) - fu0
        fp.send_signal(signal.SIGTERM)
        fout, ferr = fp.communicate(timeout=20)
        try:
            stats = json.loads(fout)["counters"]
        except ValueError:
            raise RuntimeError("fastpath.run: " + ferr)
    sent, gdt, gcpu = out.split()
    sent, gdt, gcpu = int(sent), float(gdt), float(gcpu)
    fwd = rx1 - rx0
    res = {"offered_pps": round(sent / gdt), "arrived_at_router": in1 - in0,
           "forwarded": fwd, "forwarded_pps": round(fwd / gdt), "sent": sent,
           "loss": round(1 - fwd / sent, 4) if sent else None, "seconds": round(gdt, 3),
           "cpu_per_s": {"generator": round(gcpu / gdt, 2), "fastpath": round(fcpu / dt, 2),
                         "fastpath_user": round(fuser / dt, 2),
                         "softirq_all": round((si1 - si0) / dt, 2)}}
    if stats:
        res["ring_drops"] = sum(i["ring_drops"] for i in stats["interfaces"].values())
        res["tx_error"] = stats["wire"]["tx_error"]
        res["fastpath_rx"] = sum(i["rx"] for i in stats["interfaces"].values())
        res["fastpath_tx"] = sum(i["tx"] for i in stats["interfaces"].values())
        res["fastpath_verdicts"] = stats["verdicts"]
        res["fastpath_interfaces"] = stats["interfaces"]
        if "worker_rx" in stats:
            res["worker_rx"] = stats["worker_rx"]
    res["h2_rx_dropped"] = _counter(t.h2, "h2e", "rx_dropped")
    res["r2_tx_dropped"] = _counter(t.r, "r2", "tx_dropped")
    return res


_SCEN = {4: "ipv4", 6: "ipv6", 0: "End"}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m fastpath.bench_wire")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3, help="runs per forwarder (median reported)")
    ap.add_argument("--scenario", choices=("ipv4", "ipv6", "End", "all"), default="all")
    ap.add_argument("--forwarders", default="fastpath,fastpath-af_xdp,kernel",
                    help="comma-separated: fastpath, fastpath-qdisc-bypass, fastpath-af_xdp, "
                         "fastpath-workers2 (AF_PACKET fanout over 2 workers), kernel")
    ap.add_argument("--json", default=None, help="write the results to PATH too")
    ap.add_argument("--ring-copy", action="store_true",
                    help="only: the cost of copying ring frames into Batch rows")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("fastpath.bench_wire: needs root (network namespaces)", file=sys.stderr)
        return 2
    if shutil.which("nft") is None:
        print("fastpath.bench_wire: needs nft (apt-get install nftables)", file=sys.stderr)
        return 2
    if a.ring_copy:
        doc = {"bench": "wire-ring-copy", "results": [ring_copy(size=sz) for sz in (64, 1500)]}
        print(json.dumps(doc, indent=1))
        if a.json:
            with open(a.json, "w") as f:
                f.write(json.dumps(doc, indent=1) + "\n")
        return 0
    fams = {"ipv4": [4], "ipv6": [6], "End": [0], "all": [4, 6, 0]}[a.scenario]
    doc = {"bench": "wire", "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "kernel": platform.release(), "seconds": a.seconds,
           "batch": a.batch, "frame_bytes": 64, "flows": 256, "results": {}}
    import tempfile
    with tempfile.TemporaryDirectory() as d, Topology() as t:
        conf = os.path.join(d, "r.conf")
        with open(conf, "w") as f:
            f.write(CONF)
        for fam in fams:
            runs = {fw: [] for fw in a.forwarders.split(",")}
            for _ in range(a.runs):          # interleaved: the VM's noise hits each alike
                for fw in runs:
                    runs[fw].append(run_one(t, fam, fw, a.seconds, a.batch, conf))
            for fw, rs in runs.items():
                rs.sort(key=lambda r: r["forwarded_pps"])
                med = dict(rs[len(rs) // 2])
                med["forwarded_pps_runs"] = [r["forwarded_pps"] for r in rs]
                doc["results"][f"{_SCEN[fam]} {fw}"] = med
    text = json.dumps(doc, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Forwarding on the wire: ``python -m fastpath.bench_wire`` (root).

    python -m fastpath.bench_wire [--seconds S] [--batch N] [--runs R]
        [--scenario ipv4,ipv6,End,End.DX4|all] [--forwarders LIST]
        [--generator builtin|trafgen] [--pdr [--loss 0.005] [--trials T]]
        [--iperf] [--busy N] [--json PATH]

The topology of tests/test_wire.py, made for the run and deleted after it:
``h1 --veth-- r --veth-- h2``, network namespaces.  A generator in h1 sends
UDP frames (256 flows, addressed to r1's MAC: IPv4 and IPv6 of 64 bytes,
SRv6 End frames, IPv6 + a 2-segment SRH to End on fc00:1::1, next
segment routed to h2, 120 bytes, and End.DX4 frames, IPv4 in IPv6 to
fc00:1::100, 100 bytes): ``builtin`` is an AF_PACKET socket with sendmmsg
(fastpath._afpacket, 256 frames a call), ``trafgen`` is netsniff-ng's
trafgen (one process, its TX ring; ``-b Npps`` when rate-limited).  h2
drops them at its netdev ingress (so they cost nothing) and its veth's
rx_packets counter is the forwarded count.  The same traffic is
forwarded, in turn, by

* ``fastpath``: ``python -m fastpath.run`` in r (AF_PACKET TPACKET_V3 rings,
  sendmmsg TX);
* ``fastpath-qdisc-bypass``: the same with PACKET_QDISC_BYPASS;
* ``fastpath-af_xdp``: ``--backend af_xdp`` (AF_XDP sockets, libxdp's
  default program in veth's driver mode, copy mode);
* ``fastpath-workersN``: AF_PACKET with ``--workers N`` (PACKET_FANOUT);
* ``fastpath-af_xdp-workersN``: AF_XDP with ``--workers N`` (each worker
  owns its share of the veths' RX queues; asking for it gives r1 and r2,
  and their peers, N queues each way for the whole run, and trafgen then
  sends through the qdisc path, so that the flow hash picks the queue);
* ``fastpath-ringM`` (also ``fastpath-workersN-ringM``): AF_PACKET with
  ``--ring-mb M`` (RX rings of M MiB instead of 32);
* ``fastpath-workersN-own``: ``--workers N --worker-tables own`` (a Router
  per worker instead of the shared tables);
* ``fastpath-host`` (also ``fastpath-workersN-host``): ``--host-stack`` (the
  router's own stack behind fastpath: what it costs forwarding, side by
  side with ``fastpath``);
* ``kernel``: r's kernel, configured as the same router (no fastpath, no
  ingress drop).

Reported per scenario and forwarder: offered (h1e's tx counter) and
forwarded packets/s over a window of --seconds (the median of --runs
interleaved runs, each run's rate listed), loss, the ring's drops, and
the CPU seconds per second of the generator, of fastpath's process (with
its workers), of softirq (the kernel's veth and forwarding path,
machine-wide, from /proc/stat) and of the whole machine (other jobs
included), so that the bottleneck is visible.  Without --pdr the
generator sends at its maximum (overload).  With --pdr the partial drop
rate of SRPerf: after that unlimited trial (reported as before), --trials
bisection steps of the offered rate find the highest one whose loss is at
most --loss (0.5%); ``pdr`` holds it, the loss at the maximum and every
trial.  --busy N runs N busy loops (``sh -c 'while :; do :; done'``,
unpinned) beside everything for the whole run: the forwarders then share
the CPUs with another job, as on a loaded machine, and the RX ring's depth
shows (docs/wire.md).  --iperf adds one iperf3 TCP stream h1 -> h2 per forwarder
(``tcp <forwarder>``).  JSON on stdout (and --json PATH), a Markdown
table on stderr.  Everything is undone on every exit (SIGTERM included):
the processes in the namespaces are stopped (SIGTERM, so fastpath.run
removes its table and XDP program), then the namespaces deleted.  On a
shared 2-core VM every rate is noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
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
ip -6 route add fc00:1::100/128 encap seg6local action End.DX4 nh4 10.2.0.2 dev r1
"""

def build_frames(fam, dmac, smac, nflows=256):
    """The generators' frames, one per flow (UDP source port 1024 + k, to
    port 9): ``"ipv4"``, ``"ipv6"`` (64 bytes), ``"End"`` (IPv6 + a
    2-segment SRH to End on fc00:1::1, next segment fc00:2::100, 120 bytes)
    or ``"End.DX4"`` (IPv6 to the End.DX4 SID fc00:1::100, no SRH, an
    IPv4 UDP packet inside, 100 bytes)."""
    import struct

    def csum(b):
        s = sum(struct.unpack(f"!{len(b)//2}H", b))
        while s >> 16:
            s = (s & 0xffff) + (s >> 16)
        return ~s & 0xffff

    def ip4(udp):
        h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                        bytes([10, 1, 0, 2]), bytes([10, 2, 0, 2]))
        return h[:10] + struct.pack("!H", csum(h)) + h[12:] + udp

    src = bytes.fromhex("20010db8000100000000000000000002")
    frames = []
    for k in range(nflows):
        udp = struct.pack("!HHHH", 1024 + k, 9, 8 + 18, 0) + bytes(18)
        if fam == "ipv4":
            frames.append(dmac + smac + b"\x08\x00" + ip4(udp))
        elif fam == "ipv6":
            dst = bytes.fromhex("20010db8000200000000000000000002")
            ip = struct.pack("!IHBB", 6 << 28, len(udp), 17, 64) + src + dst
            frames.append(dmac + smac + b"\x86\xdd" + ip + udp)
        elif fam == "End":   # SRH (fc00:2::100, fc00:1::1), segments left 1, to fc00:1::1
            sid1 = bytes.fromhex("fc000001000000000000000000000001")
            sid2 = bytes.fromhex("fc000002000000000000000000000100")
            srh = struct.pack("!BBBBBBH", 17, 4, 4, 1, 1, 0, 0) + sid2 + sid1
            ip = struct.pack("!IHBB", 6 << 28, len(srh) + len(udp), 43, 64) + src + sid1
            frames.append(dmac + smac + b"\x86\xdd" + ip + srh + udp)
        elif fam == "End.DX4":   # IPv4 in IPv6 to the End.DX4 SID fc00:1::100
            inner = ip4(udp)
            sid = bytes.fromhex("fc000001000000000000000000000100")
            ip = struct.pack("!IHBB", 6 << 28, len(inner), 4, 64) + src + sid
            frames.append(dmac + smac + b"\x86\xdd" + ip + inner)
        else:
            raise ValueError(fam)
    return frames


GEN = r"""
import socket, sys, time
import numpy as np
from fastpath import _afpacket
from fastpath.batch import Batch
from fastpath.bench_wire import build_frames
dev, dmac, fam, secs, nflows = sys.argv[1], bytes.fromhex(sys.argv[2]), sys.argv[3], float(sys.argv[4]), 256
rate = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
smac = bytes.fromhex(open(f"/sys/class/net/{dev}/address").read().strip().replace(":", ""))
frames = build_frames(fam, dmac, smac, nflows)
B = 256
b = Batch.from_packets([frames[k % nflows] for k in range(B)], linktype="ethernet")
s = _afpacket.Socket(dev, socket.if_nametoindex(dev), block_size=1 << 16, block_nr=2, qdisc_bypass=True)
idx = np.arange(B, dtype=np.int32)
# warm-up: lets the router resolve h2
s.tx(b, idx[:8]); time.sleep(0.6)
print("go", flush=True)
sent = 0; t0 = time.perf_counter(); c0 = time.process_time()
end = t0 + secs
n = B if not rate else max(1, min(B, int(rate / 1000)))   # paced: ~1 ms bursts
while time.perf_counter() < end:
    sent += s.tx(b, idx[:n])
    if rate:
        ahead = t0 + sent / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
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
    def __init__(self, queues=1):
        p = f"fpb{os.getpid() % 100000}"
        self.h1, self.h2, self.r = p + "h1", p + "h2", p + "r"
        self.queues = queues          # RX and TX queues of each veth
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
        q = [] if self.queues == 1 else ["numtxqueues", str(self.queues), "numrxqueues",
                                         str(self.queues)]
        _sh("ip", "-n", r, "link", "add", "r1", *q, "type", "veth", "peer", "name", "h1e", *q,
            "netns", h1)
        _sh("ip", "-n", r, "link", "add", "r2", *q, "type", "veth", "peer", "name", "h2e", *q,
            "netns", h2)
        for h, dev, a4, a6 in ((h1, "h1e", "10.1.0.2/24", "2001:db8:1::2/64"),
                               (h2, "h2e", "10.2.0.2/24", "2001:db8:2::2/64")):
            _sh("ip", "-n", h, "addr", "add", a4, "dev", dev)
            _sh("ip", "-n", h, "-6", "addr", "add", a6, "dev", dev, "nodad")
            _sh("ip", "-n", h, "link", "set", dev, "up")
            # for iperf3 (the UDP frames are addressed by hand)
            _sh("ip", "-n", h, "route", "add", "default", "via", a4[:-4] + "1")
        _sh("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1", ns=r)
        for dev, a4, a6 in (("r1", "10.1.0.1/24", "2001:db8:1::1/64"),
                            ("r2", "10.2.0.1/24", "2001:db8:2::1/64")):
            _sh("ip", "-n", r, "addr", "add", a4, "dev", dev)
            _sh("ip", "-n", r, "-6", "addr", "add", a6, "dev", dev, "nodad")
            _sh("ip", "-n", r, "link", "set", dev, "up")
        # the kernel as the same SRv6 router (End on fc00:1::1)
        _sh("sysctl", "-qw", "net.ipv6.conf.all.seg6_enabled=1", "net.ipv6.conf.r1.seg6_enabled=1",
            ns=r)
        _sh("ip", "-n", r, "-6", "route", "add", "fc00:2::/32", "via", "2001:db8:2::2", "dev", "r2")
        # (a kernel built without CONFIG_IPV6_SEG6_LWTUNNEL refuses these:
        # then it is no SRv6 router, and its End / End.DX4 runs are skipped)
        self.kernel_seg6 = _sh("ip", "-n", r, "-6", "route", "add", "fc00:1::1/128", "encap",
                               "seg6local", "action", "End", "dev", "r1", check=False).returncode == 0
        if self.kernel_seg6:
            _sh("ip", "-n", r, "-6", "route", "add", "fc00:1::100/128", "encap", "seg6local",
                "action", "End.DX4", "nh4", "10.2.0.2", "dev", "r1")
        # h2: ARP and ND answered by its kernel, the UDP flood dropped at ingress
        subprocess.run(["ip", "netns", "exec", h2, "nft", "-f", "-"], check=True, text=True,
                       input="table netdev sink {\n chain in {\n  type filter hook ingress device "
                             "\"h2e\" priority 0; policy accept;\n  udp dport 9 drop\n"
                             "  ip6 daddr fc00::/16 drop\n }\n}\n")
        self.r1mac = _sh("cat", "/sys/class/net/r1/address", ns=r).stdout.strip().replace(":", "")
        time.sleep(0.3)

    def __exit__(self, *exc):
        # whatever still runs in the namespaces (a fastpath.run, a
        # generator, iperf3 left by an error or a signal) is stopped first,
        # SIGTERM so that fastpath.run removes its table and program, then
        # SIGKILL; a namespace with a live process would outlive its name
        pids = set()
        for n in self.made:
            r = _sh("ip", "netns", "pids", n, check=False)
            pids.update(int(x) for x in r.stdout.split() if x.isdigit())
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 1.0)):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            end = time.monotonic() + wait
            while pids and time.monotonic() < end:
                pids = {p for p in pids if os.path.exists(f"/proc/{p}")
                        and not _zombie(p)}
                time.sleep(0.05)
        for n in self.made:
            _sh("ip", "netns", "del", n, check=False)
        self.made = []


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _stat_busy():
    """(softirq, busy) CPU seconds machine-wide from /proc/stat; busy is
    everything but idle and iowait (other jobs on the VM included)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return v[6] / hz, (sum(v[:8]) - v[3] - v[4]) / hz


def start_forwarder(t, forwarder, batch, conf_path):
    """fastpath.run in r for a ``fastpath*`` forwarder (its Popen, once it
    is attached), None for the kernel."""
    _sh("ip", "-n", t.r, "neigh", "flush", "all", check=False)
    if not forwarder.startswith("fastpath"):
        return None
    env = dict(os.environ, PYTHONPATH=ROOT)
    ready = conf_path + ".ready"
    if os.path.exists(ready):
        os.remove(ready)
    cmd = ["ip", "netns", "exec", t.r, sys.executable, "-m", "fastpath.run", "--config",
           conf_path, "--iface", "r1", "--iface", "r2", "--json", "--batch", str(batch),
           "--ready-file", ready]
    if forwarder.endswith("bypass"):
        cmd.append("--qdisc-bypass")
    if forwarder.endswith("af_xdp") or "-af_xdp-" in forwarder:
        cmd += ["--backend", "af_xdp"]
    w = re.search(r"-workers(\d+)", forwarder)
    if w:
        cmd += ["--workers", w[1]]
    ring = re.search(r"-ring(\d+)", forwarder)
    if ring:
        cmd += ["--ring-mb", ring[1]]
    if w and "-own" in forwarder:
        cmd += ["--worker-tables", "own"]
    if forwarder.endswith("-host"):
        cmd.append("--host-stack")
    fp = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    while not os.path.exists(ready):          # (as long as it lives: a loaded box is slow)
        if fp.poll() is not None:
            raise RuntimeError("fastpath.run did not start: " + fp.communicate()[1])
        time.sleep(0.02)
    return fp


def stop_forwarder(fp):
    """SIGTERM, then fastpath.run's totals (its --json counters)."""
    if fp is None:
        return None
    fp.send_signal(signal.SIGTERM)
    fout, ferr = fp.communicate(timeout=20)
    try:
        return json.loads(fout)["counters"]
    except ValueError:
        raise RuntimeError("fastpath.run: " + ferr)


def _trafgen_conf(path, fam, dmac, smac):
    """A trafgen configuration of the scenario's frames, one packet block
    per flow (trafgen sends them round robin)."""
    with open(path, "w") as f:
        for fr in build_frames(fam, dmac, smac):
            f.write("{ " + ", ".join(f"0x{x:02x}" for x in fr) + " }\n")


def trial(t, fam, fp, seconds, generator, rate=None, gen_conf=None):
    """One offered load for ``seconds``: the generator in h1 (at ``rate``
    packets/s, or as fast as it can when None), counters read over a
    window that starts once it runs.  offered = h1e's tx (+ tx_dropped),
    forwarded = h2e's rx; CPU seconds per second of the generator, of
    fastpath (with its workers), of softirq and of the whole machine."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    if generator == "trafgen":
        cmd = ["ip", "netns", "exec", t.h1, "trafgen", "--no-sock-mem", "-i", gen_conf, "-o", "h1e",
               "-P", "1", "-C"]
        if t.queues > 1:
            # through the qdisc path: the kernel's flow hash then picks h1e's
            # TX queue, and so r1's RX queue, per flow (trafgen's default
            # PACKET_QDISC_BYPASS records its CPU as the queue: one queue)
            cmd.append("--qdisc-path")
        if rate:
            cmd += ["-b", f"{int(rate)}pps"]
        # its own process group: trafgen forks its sender, and a SIGINT
        # to the parent alone leaves that one sending
        gen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        time.sleep(0.25)                          # started, its ring mapped
        if gen.poll() is not None:
            raise RuntimeError("trafgen failed: " + " ".join(gen.communicate()))
    else:
        args = [str(seconds + 0.6)] + ([str(rate)] if rate else [])
        gen = subprocess.Popen(["ip", "netns", "exec", t.h1, sys.executable, "-c", GEN, "h1e",
                                t.r1mac, fam] + args, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
        line = gen.stdout.readline()
        if line.strip() != "go":
            raise RuntimeError("generator failed: " + line + gen.communicate()[1])
        time.sleep(0.2)

    def snap():
        return (_counter(t.h1, "h1e", "tx_packets") + _counter(t.h1, "h1e", "tx_dropped"),
                _counter(t.h2, "h2e"), _counter(t.r, "r1"), _stat_busy(), _tree_cpu(gen.pid),
                _tree_cpu(fp.pid) if fp else 0.0, _tree_cpu(fp.pid, (11,)) if fp else 0.0,
                time.perf_counter())
    a = snap()
    time.sleep(seconds)
    b = snap()
    if generator == "trafgen":
        os.killpg(gen.pid, signal.SIGINT)
    try:
        gen.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(gen.pid, signal.SIGKILL) if generator == "trafgen" else gen.kill()
        gen.communicate()
    time.sleep(0.05)
    fwd_tail = _counter(t.h2, "h2e") - b[1]       # in flight at the window's end
    dt = b[7] - a[7]
    sent, fwd = b[0] - a[0], b[1] - a[1]
    # frames in the router's rings when the window closes arrive after
    # it: counted if they arrive within the tail's first 50 ms, at most
    # what the window's end left in flight (so loss is never negative)
    fwd = min(sent, fwd + min(fwd_tail, max(0, sent - fwd)))
    return {"offered_pps": round(sent / dt), "target_pps": round(rate) if rate else None,
            "sent": sent, "arrived_at_router": b[2] - a[2], "forwarded": fwd,
            "forwarded_pps": round(fwd / dt), "loss": round(1 - fwd / sent, 5) if sent else None,
            "seconds": round(dt, 3),
            "cpu_per_s": {"generator": round((b[4] - a[4]) / dt, 2),
                          "fastpath": round((b[5] - a[5]) / dt, 2),
                          "fastpath_user": round((b[6] - a[6]) / dt, 2),
                          "softirq_all": round((b[3][0] - a[3][0]) / dt, 2),
                          "machine_busy": round((b[3][1] - a[3][1]) / dt, 2)}}


def pdr_search(t, fam, fp, seconds, generator, gen_conf, loss, trials):
    """The partial drop rate: the highest offered rate whose loss is at
    most ``loss`` (SRPerf's PDR), by bisection between 0 and the rate the
    generator offers unlimited, ``trials`` bisection steps after that
    first trial (none when it already loses at most ``loss``)."""
    top = trial(t, fam, fp, seconds, generator, None, gen_conf)
    steps = [top]
    if top["loss"] is not None and top["loss"] <= loss:
        best = top
    else:
        best = None
        lo, hi = 0.0, float(top["offered_pps"])
        for _ in range(trials):
            mid = (lo + hi) / 2
            r = trial(t, fam, fp, seconds, generator, mid, gen_conf)
            steps.append(r)
            # bisect on what was offered: trafgen's -b pacing falls short
            # of its target at high rates
            if r["loss"] is not None and r["loss"] <= loss:
                lo = max(lo, min(hi, r["offered_pps"]))
                if best is None or r["offered_pps"] > best["offered_pps"]:
                    best = r
            else:
                hi = max(lo, min(hi, r["offered_pps"]))
    return {"loss_target": loss,
            "rate_pps": best["offered_pps"] if best else 0,
            "forwarded_pps": best["forwarded_pps"] if best else 0,
            "loss": best["loss"] if best else None,
            "cpu_per_s": best["cpu_per_s"] if best else None,
            "max_offered_pps": top["offered_pps"], "loss_at_max": top["loss"],
            "trials": [{k: r[k] for k in ("target_pps", "offered_pps", "forwarded_pps", "loss")}
                       for r in steps]}, top


def iperf_tcp(t, seconds):
    """iperf3 TCP from h1 to h2 (10.2.0.2) for ``seconds``: throughput
    received, retransmits, CPU seconds per second machine-wide."""
    srv = subprocess.Popen(["ip", "netns", "exec", t.h2, "iperf3", "-s", "-1", "-B", "10.2.0.2"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.4)
        s0 = _stat_busy()
        t0 = time.perf_counter()
        r = _sh("iperf3", "-c", "10.2.0.2", "-t", str(max(1, round(seconds))), "-J",
                ns=t.h1, check=False)
        dt = time.perf_counter() - t0
        s1 = _stat_busy()
        try:
            d = json.loads(r.stdout)
        except ValueError:
            return {"error": (r.stderr or r.stdout).strip()[-300:]}
        if "error" in d:
            return {"error": d["error"]}
        end = d["end"]
        return {"bits_per_second": round(end["sum_received"]["bits_per_second"]),
                "retransmits": end["sum_sent"].get("retransmits"),
                "cpu_per_s": {"softirq_all": round((s1[0] - s0[0]) / dt, 2),
                              "machine_busy": round((s1[1] - s0[1]) / dt, 2),
                              "iperf3_sender": round(end.get("cpu_utilization_percent", {})
                                                     .get("host_total", 0) / 100, 2)}}
    finally:
        if srv.poll() is None:
            srv.terminate()
        try:
            srv.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.communicate()


def _add_stats(res, stats):
    if not stats:
        return
    res["ring_drops"] = sum(i["ring_drops"] for i in stats["interfaces"].values())
    res["ring_freezes"] = sum(i.get("ring_freezes", 0) for i in stats["interfaces"].values())
    res["tx_error"] = stats["wire"]["tx_error"]
    res["fastpath_rx"] = sum(i["rx"] for i in stats["interfaces"].values())
    res["fastpath_tx"] = sum(i["tx"] for i in stats["interfaces"].values())
    res["fastpath_verdicts"] = stats["verdicts"]
    res["fastpath_interfaces"] = stats["interfaces"]
    res["rx_ring"] = stats.get("rx_ring")
    if "worker_rx" in stats:
        res["worker_rx"] = stats["worker_rx"]


def run_forwarder(t, fam, forwarder, a, conf_path, gen_conf, pdr=False, tcp=False):
    """One forwarder started, measured (an overload trial, the PDR search,
    iperf3) and stopped."""
    fp = start_forwarder(t, forwarder, a.batch, conf_path)
    try:
        if gen_conf is not None:           # trafgen: a few frames resolve h2 first
            _sh("trafgen", "--no-sock-mem", "-i", gen_conf, "-o", "h1e", "-P", "1", "-n", "8", "-C",
                ns=t.h1, check=False)
            time.sleep(0.6)
        res = {}
        if fam is not None:
            if pdr:
                p, res = pdr_search(t, fam, fp, a.seconds, a.generator, gen_conf, a.loss, a.trials)
                res = dict(res, pdr=p)
            else:
                res = trial(t, fam, fp, a.seconds, a.generator, None, gen_conf)
        if tcp:
            res["tcp"] = iperf_tcp(t, a.seconds)
    finally:
        stats = stop_forwarder(fp) if fp is not None and fp.poll() is None else None
    _add_stats(res, stats)
    res["h2_rx_dropped"] = _counter(t.h2, "h2e", "rx_dropped")
    res["r2_tx_dropped"] = _counter(t.r, "r2", "tx_dropped")
    return res


def run_one(t, fam, forwarder, seconds, batch, conf_path):
    """One overload trial with the builtin generator (the earlier API)."""
    a = argparse.Namespace(batch=batch, seconds=seconds, generator="builtin")
    return run_forwarder(t, fam, forwarder, a, conf_path, None)


_SCEN = {"ipv4": "ipv4", "ipv6": "ipv6", "End": "End", "End.DX4": "End.DX4"}
_FWNAME = {"fastpath": "fastpath, AF_PACKET", "fastpath-qdisc-bypass": "fastpath, AF_PACKET, bypass",
           "fastpath-af_xdp": "fastpath, AF_XDP", "kernel": "kernel"}


def _fwname(fw):
    if fw in _FWNAME:
        return _FWNAME[fw]
    base, *opts = fw.split("-")
    if base != "fastpath" or not opts:
        return fw
    words = ["fastpath, AF_XDP" if opts[0] == "af_xdp" else "fastpath, AF_PACKET"]
    for o in opts[1:] if opts[0] == "af_xdp" else opts:
        m = re.fullmatch(r"(workers|ring)(\d+)", o)
        words.append(f"workers {m[2]}" if m and m[1] == "workers" else
                     f"ring {m[2]} MiB" if m else "own tables" if o == "own" else
                     "host stack" if o == "host" else o)
    return ", ".join(words)


def table(doc):
    """The results as a Markdown table (one row per scenario and
    forwarder), for pasting."""
    pdr = any("pdr" in r for r in doc["results"].values())
    lt = doc.get("loss_target", 0.005)
    if pdr:
        head = (f"| scenario | forwarder | rate at ≤{lt:.1%} loss, Mpps | max offered, Mpps "
                "| loss at max | CPU at that rate: generator / softirq / fastpath (user) / machine |")
    else:
        head = ("| scenario | forwarder | offered, Mpps | forwarded, Mpps | loss "
                "| CPU: generator / softirq / fastpath (user) / machine |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for key, r in doc["results"].items():
        scen, _, fw = key.partition(" ")
        if scen == "tcp":
            continue
        name = _fwname(fw)
        c = (r["pdr"]["cpu_per_s"] if pdr and r["pdr"]["cpu_per_s"] else r["cpu_per_s"])
        fpc = f"{c['fastpath']:.2f} ({c['fastpath_user']:.2f})" if fw.startswith("fastpath") else "–"
        cpu = f"{c['generator']:.2f} / {c['softirq_all']:.2f} / {fpc} / {c['machine_busy']:.2f}"
        if pdr:
            p = r["pdr"]
            lines.append(f"| {scen} | {name} | {p['rate_pps'] / 1e6:.3f} | "
                         f"{p['max_offered_pps'] / 1e6:.3f} | {p['loss_at_max']:.2%} | {cpu} |")
        else:
            lines.append(f"| {scen} | {name} | {r['offered_pps'] / 1e6:.3f} | "
                         f"{r['forwarded_pps'] / 1e6:.3f} | {r['loss']:.2%} | {cpu} |")
    tcp = [(k.partition(" ")[2], r) for k, r in doc["results"].items() if k.startswith("tcp ")]
    if tcp:
        lines += ["", "| TCP (iperf3, 1 stream) | Gbit/s | retransmits | softirq / machine CPU |",
                  "|---|---|---|---|"]
        for fw, r in tcp:
            name = _fwname(fw)
            if "error" in r:
                lines.append(f"| {name} | failed: {r['error']} | | |")
            else:
                c = r["cpu_per_s"]
                lines.append(f"| {name} | {r['bits_per_second'] / 1e9:.2f} | {r['retransmits']} | "
                             f"{c['softirq_all']:.2f} / {c['machine_busy']:.2f} |")
    return "\n".join(lines)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m fastpath.bench_wire")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds per run (per trial with --pdr)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3, help="runs per forwarder (median reported)")
    ap.add_argument("--scenario", default="all",
                    help="ipv4, ipv6, End, End.DX4, comma-separated, or all")
    ap.add_argument("--forwarders", default="fastpath,fastpath-host,fastpath-af_xdp,kernel",
                    help="comma-separated: fastpath, fastpath-host (--host-stack), "
                         "fastpath-qdisc-bypass, fastpath-af_xdp, "
                         "fastpath-workers2 (AF_PACKET fanout over 2 workers), "
                         "fastpath-af_xdp-workers2 (AF_XDP, 2 workers over the RX queues), "
                         "kernel")
    ap.add_argument("--generator", choices=("builtin", "trafgen"), default="builtin",
                    help="builtin: sendmmsg from fastpath._afpacket; trafgen: netsniff-ng's "
                         "trafgen, one process (-P 1), rate-limited with -b")
    ap.add_argument("--pdr", action="store_true",
                    help="search the highest offered rate with loss <= --loss (bisection)")
    ap.add_argument("--loss", type=float, default=0.005, help="loss allowed by --pdr (0.005)")
    ap.add_argument("--trials", type=int, default=5,
                    help="bisection steps of --pdr after the unlimited trial (5)")
    ap.add_argument("--iperf", action="store_true", help="iperf3 TCP throughput h1 -> h2 too")
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="N busy loops competing for the CPUs during the whole run (0)")
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
    skipped = []
    if a.generator == "trafgen" and shutil.which("trafgen") is None:
        print("fastpath.bench_wire: trafgen not found (apt-get install netsniff-ng): "
              "UDP runs skipped", file=sys.stderr)
        skipped.append("trafgen")
    if a.iperf and shutil.which("iperf3") is None:
        print("fastpath.bench_wire: iperf3 not found (apt-get install iperf3): TCP skipped",
              file=sys.stderr)
        skipped.append("iperf3")
    fams = ["ipv4", "ipv6", "End", "End.DX4"] if a.scenario == "all" else a.scenario.split(",")
    bad = [f for f in fams if f not in _SCEN]
    if bad:
        ap.error(f"--scenario: unknown {', '.join(bad)} (ipv4, ipv6, End, End.DX4, all)")
    if "trafgen" in skipped:
        fams = []
    tcp = a.iperf and "iperf3" not in skipped
    doc = {"bench": "wire", "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "kernel": platform.release(), "seconds": a.seconds,
           "batch": a.batch, "frame_bytes": 64, "flows": 256, "generator": a.generator,
           "command": "python -m fastpath.bench_wire " + " ".join(argv if argv is not None
                                                                  else sys.argv[1:]),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "loadavg_start": os.getloadavg()[0], "busy_loops": a.busy, "skipped": skipped,
           "results": {}}
    if a.pdr:
        doc.update(loss_target=a.loss, trials=a.trials)
    import tempfile
    if not 0 <= a.busy <= 64:
        ap.error("--busy: 0..64 loops")
    old = signal.signal(signal.SIGTERM, _terminate)   # SIGTERM unwinds like Ctrl-C
    busy = []
    try:
        busy = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(a.busy)]
        fws = a.forwarders.split(",")
        queues = max([int(m[1]) for fw in fws
                      for m in [re.search(r"-af_xdp-workers(\d+)", fw)] if m] or [1])
        doc["veth_queues"] = queues
        with tempfile.TemporaryDirectory() as d, Topology(queues) as t:
            conf = os.path.join(d, "r.conf")
            with open(conf, "w") as f:
                f.write(CONF)
            for fam in fams:
                gen_conf = None
                if a.generator == "trafgen":
                    gen_conf = os.path.join(d, f"{fam}.trafgen")
                    h1mac = _sh("cat", "/sys/class/net/h1e/address", ns=t.h1).stdout.strip()
                    _trafgen_conf(gen_conf, fam, bytes.fromhex(t.r1mac),
                                  bytes.fromhex(h1mac.replace(":", "")))
                runs = {fw: [] for fw in fws}
                if fam in ("End", "End.DX4") and "kernel" in runs and not t.kernel_seg6:
                    del runs["kernel"]
                    print(f"fastpath.bench_wire: {fam} through the kernel skipped: this kernel "
                          "has no seg6 lwtunnels (CONFIG_IPV6_SEG6_LWTUNNEL)", file=sys.stderr)
                    skipped.append(f"{fam} kernel")
                for _ in range(a.runs):          # interleaved: the VM's noise hits each alike
                    for fw in runs:
                        runs[fw].append(run_forwarder(t, fam, fw, a, conf, gen_conf, pdr=a.pdr))
                for fw, rs in runs.items():
                    rate = (lambda r: r["pdr"]["rate_pps"]) if a.pdr else \
                        (lambda r: r["forwarded_pps"])
                    rs.sort(key=rate)
                    med = dict(rs[len(rs) // 2])
                    med["forwarded_pps_runs"] = [r["forwarded_pps"] for r in rs]
                    if a.pdr:
                        med["pdr_rate_pps_runs"] = [r["pdr"]["rate_pps"] for r in rs]
                    doc["results"][f"{_SCEN[fam]} {fw}"] = med
            if tcp:
                for fw in fws:
                    r = run_forwarder(t, None, fw, a, conf, None, tcp=True)
                    doc["results"][f"tcp {fw}"] = dict(r.pop("tcp"), **r)
    finally:
        for b in busy:
            b.kill()
            b.wait()
        signal.signal(signal.SIGTERM, old)
    doc["loadavg_end"] = os.getloadavg()[0]
    text = json.dumps(doc, indent=1)
    print(text)
    if doc["results"]:
        print(table(doc), file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

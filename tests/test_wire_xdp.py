"""fastpath on the wire with ``--backend af_xdp`` (libxdp's default XDP
program redirecting the veths' frames to AF_XDP sockets): the topology and
helpers of tests/test_wire.py,

    h1 (10.1.0.2, 2001:db8:1::2) --veth-- [r1  fastpath  r2] --veth-- h2 (10.2.0.2, 2001:db8:2::2)

with kernel hosts and no static neighbours.  r's kernel is configured as the
same router: the frames XDP redirects never reach its stack, so h2 seeing
each echo request once proves no frame went both ways.  The XDP program is
checked attached while fastpath runs and gone (``ip -d link``, and
``xdp-loader status`` where installed) after every exit path.

Skipped, with the reason, without root / namespaces (test_wire's reasons),
when fastpath was built without libxdp, or when the kernel refuses an
AF_XDP socket on a veth.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

import test_wire as tw
from test_wire import H1, H2, R, ROOT, TOOL, _flush_hosts, _nstat, _sh, _start, _stop, _tables
from test_wire import topo  # noqa: F401  (the module's topology fixture)
from test_wire_workers import _FLOWS, _alive, _shm, _shm_of, _workers_of, workers_killed_under_ping

_PROBE = r"""
import socket, sys, time
from fastpath import _afxdp
while open("/sys/class/net/xa/operstate").read().strip() != "up":
    time.sleep(0.01)
s = _afxdp.Socket("xa", socket.if_nametoindex("xa"))
s.close()
print("ok")
"""


def _why_skip():
    if tw._SKIP:
        return tw._SKIP
    try:
        import fastpath._afxdp  # noqa: F401
    except ImportError:
        return "fastpath built without libxdp (apt-get install libxdp-dev libbpf-dev; rebuild)"
    ns = tw.P + "xp"
    try:
        _sh("ip", "netns", "add", ns)
        _sh("ip", "-n", ns, "link", "add", "xa", "type", "veth", "peer", "name", "xb")
        _sh("ip", "-n", ns, "link", "set", "xa", "up")
        _sh("ip", "-n", ns, "link", "set", "xb", "up")
        r = _sh(sys.executable, "-c", _PROBE, ns=ns, check=False,
                env=dict(os.environ, PYTHONPATH=str(ROOT)))
        if r.stdout.strip() != "ok":
            return f"AF_XDP socket on veth refused: {(r.stderr.strip().splitlines() or ['?'])[-1][:120]}"
    except subprocess.CalledProcessError as e:
        return f"network namespaces / veth not available: {e.stderr.strip()[:100]}"
    finally:
        _sh("ip", "netns", "del", ns, check=False)
    return None


_SKIP = _why_skip()
wire = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
try:
    import fastpath._afxdp  # noqa: F401
    _NOXDP = None
except ImportError:
    _NOXDP = "fastpath built without libxdp (apt-get install libxdp-dev libbpf-dev; rebuild)"


def _xdp_attached():
    """Devices of r with an XDP program (ip -d link)."""
    out = _sh("ip", "-d", "link", "show", ns=R).stdout
    devs, cur = [], None
    for line in out.splitlines():
        if line[:1].isdigit():
            cur = line.split(":")[1].strip().split("@")[0]
            if " xdp" in line or "xdpgeneric" in line:
                devs.append(cur)
        elif "prog/xdp" in line and cur not in devs:
            devs.append(cur)
    return devs


def _xdp_loader_clean():
    if shutil.which("xdp-loader") is None:
        return True
    out = _sh("xdp-loader", "status", ns=R, check=False).stdout
    return "xsk_def_prog" not in out and "xdp_dispatcher" not in out


@wire
def test_ping_through_fastpath_af_xdp(topo):
    """IPv4 and IPv6 pings h1 -> h2 through fastpath on AF_XDP, no static
    neighbours: ARP and ND reach fastpath through the sockets too; h2 sees
    each echo request once; no nftables table is installed; the program
    is attached while running and detached after."""
    _flush_hosts()
    p, _ = _start(topo, "--backend", "af_xdp", "--json", "--neigh")
    try:
        attached = _xdp_attached()
        nft = _tables()
        pings = tw.ping_both()
    finally:
        rc, out, err = _stop(p)
    assert sorted(attached) == ["r1", "r2"], attached
    assert nft == []
    tw.check_pings(pings, err)
    assert rc == 0 and "Traceback" not in err, err
    doc = json.loads(out)
    c = doc["counters"]
    assert c["backend"] == "af_xdp" and set(doc["xdp_modes"]) == {"r1", "r2"}
    assert c["verdicts"]["forward"] >= 12
    tw.check_neighbours_resolved(doc)
    assert _xdp_attached() == [] and _xdp_loader_clean()


@wire
@tw.needs_kernel_seg6
def test_srv6_end_through_fastpath_af_xdp(topo):
    """h1's kernel encapsulates (segs fc00:1::1,fc00:2::100): End on
    fastpath (AF_XDP), End.DX4 on h2's kernel; the reply comes back as
    plain IPv4 through fastpath."""
    p, _ = _start(topo, "--backend", "af_xdp", "--json")
    try:
        r = _sh(sys.executable, TOOL, "ping", "10.3.0.3", "2", "2", ns=H1, check=False)
    finally:
        rc, out, err = _stop(p)
    assert r.stdout.strip() == "ok 2/2", r.stdout + r.stderr + out + err
    assert rc == 0, err
    assert _xdp_attached() == []


@wire
@tw.needs_kernel_seg6
def test_srv6_frames_as_the_kernel_af_xdp(topo):
    """test_wire's SRv6 frames (one per behaviour of r) through AF_XDP:
    the bytes r's kernel sends."""
    tw.srv6_frames_as_the_kernel(topo, "--backend", "af_xdp")


@wire
def test_srv6_frames_as_offline_af_xdp(topo):
    """test_wire's SRv6 frames through AF_XDP: the bytes the offline Router
    gives (on kernels without seg6 lwtunnels too)."""
    tw.srv6_frames_as_offline(topo, "--backend", "af_xdp")


@wire
def test_vrf_end_dt_af_xdp(topo):
    """End.DT4/DT6/DT46 into a VRF of the configuration, through AF_XDP
    (test_wire's VRF test)."""
    tw.vrf_end_dt_on_the_wire(topo, "--backend", "af_xdp")


@wire
def test_tcp_frames_as_the_kernel_af_xdp(topo):
    """test_wire's TCP segments through AF_XDP: the bytes r's kernel
    forwards."""
    tw.frames_as_the_kernel(topo, tw._tcp_frames(tw._mac(tw.H1, "h1e"), tw._mac(tw.R, "r1")),
                            "--backend", "af_xdp")


@wire
@pytest.mark.parametrize("how", ["normal", "exception", "SIGINT", "SIGTERM"])
def test_xdp_detached_on_every_exit(topo, how):
    env = {"FASTPATH_RUN_FAULT": "raise"} if how == "exception" else None
    args = ["--duration", "0.3"] if how == "normal" else ["--duration", "30"]
    p, _ = _start(topo, "--backend", "af_xdp", *args, env=env)
    if how in ("SIGINT", "SIGTERM"):
        assert sorted(_xdp_attached()) == ["r1", "r2"]
        rc, out, err = _stop(p, getattr(signal, how))
        assert rc == 0 and f"stopped ({how})" in out
    else:
        out, err = p.communicate(timeout=20)
        rc = p.returncode
        assert rc == (1 if how == "exception" else 0)
    assert "Traceback" not in err, err
    assert _xdp_attached() == [] and _xdp_loader_clean()


@wire
def test_xdp_sigkill_leftover_removed_by_next_run(topo):
    """A SIGKILL leaves the program attached (nothing of the process runs;
    without a socket in its map it passes every frame to the kernel); the
    next run takes it over and detaches it when it stops."""
    p, _ = _start(topo, "--backend", "af_xdp", "--duration", "30")
    p.kill()
    p.communicate(timeout=10)
    left = _xdp_attached()
    p2, _ = _start(topo, "--backend", "af_xdp", "--duration", "0.3")
    out, err = p2.communicate(timeout=20)
    assert sorted(left) == ["r1", "r2"]
    assert p2.returncode == 0, err
    assert _xdp_attached() == [] and _xdp_loader_clean()


@wire
def test_without_libxdp_one_line_exit_2(topo):
    """A fastpath built without libxdp: ``--backend af_xdp`` is one line
    on stderr and exit status 2 (simulated: the module made unimportable)."""
    code = ("import sys; sys.modules['fastpath._afxdp'] = None\n"
            "from fastpath.run import main\n"
            f"sys.exit(main(['--config', {topo['conf']!r}, '--iface', 'r1', '--backend', 'af_xdp']))")
    r = _sh(sys.executable, "-c", code, ns=R, check=False, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("fastpath.run: --backend af_xdp: fastpath was built without libxdp")
    assert len(r.stderr.strip().splitlines()) == 1
    assert _xdp_attached() == [] and not _tables()


@wire
def test_zero_copy_refused_on_veth_one_line_exit_2(topo):
    """``--xdp-mode zerocopy``: veth has no zero-copy AF_XDP, the kernel
    refuses the bind; one line, exit status 2, no program left."""
    r = _sh(sys.executable, "-m", "fastpath.run", "--config", topo["conf"], "--iface", "r1",
            "--iface", "r2", "--backend", "af_xdp", "--xdp-mode", "zerocopy", ns=R, check=False,
            env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().startswith("fastpath.run: r1: AF_XDP socket / XDP program"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert _xdp_attached() == [] and _xdp_loader_clean() and not _tables()


@wire
def test_udp_and_tcp_from_stacks_with_checksum_offload(topo):
    """UDP and a 1 MB TCP transfer, both families, through fastpath on
    AF_XDP from host stacks with TX checksum offload on (veth's default):
    XDP gets such a frame with only the pseudo-header sum in its checksum
    field and no flag saying so (AF_PACKET has TP_STATUS_CSUMNOTREADY);
    fastpath recognises the field and completes it, so h2 accepts them."""
    if shutil.which("ethtool") is not None:
        for ns, dev in ((H1, "h1e"), (H2, "h2e")):
            _sh("ethtool", "-K", dev, "tx", "on", ns=ns, check=False)
    p, _ = _start(topo, "--backend", "af_xdp", "--json")
    try:
        for fam, dst in ((4, "10.2.0.2"), (6, "2001:db8:2::2")):
            rcv = subprocess.Popen(["ip", "netns", "exec", H2, sys.executable, TOOL, "udprecv",
                                    str(fam), "5555", "3", "3"], stdout=subprocess.PIPE, text=True)
            assert rcv.stdout.readline().strip() == "ready"
            _sh(sys.executable, TOOL, "udp", dst, "5555", "3", ns=H1)
            assert rcv.communicate(timeout=10)[0].strip() == "3", fam
        for bind, dst in (("0.0.0.0", "10.2.0.2"), ("::", "2001:db8:2::2")):
            sink = subprocess.Popen(["ip", "netns", "exec", H2, sys.executable, "-c", tw._TCPSINK,
                                     bind], stdout=subprocess.PIPE, text=True)
            assert sink.stdout.readline().strip() == "ready"
            _sh(sys.executable, "-c", "import socket,sys; s=socket.create_connection((sys.argv[1],"
                " 7000), timeout=5); s.sendall(b'x' * 1000000); s.close()", dst, ns=H1)
            assert sink.communicate(timeout=15)[0].strip() == "1000000"
    finally:
        rc, out, err = _stop(p)
    assert rc == 0, err
    ifs = json.loads(out)["counters"]["interfaces"]
    assert ifs["r1"]["rx_csum_completed"] >= 6 and ifs["r2"]["rx_csum_completed"] > 0, ifs
    assert _xdp_attached() == []


def _l4_ok(frame):
    """Whether a frame's TCP/UDP checksum verifies (IPv4 or IPv6, no
    options or extension headers)."""
    import struct
    from fastpath.wire.neigh import _csum
    if frame[12:14] == b"\x08\x00":
        ip, l4 = frame[14:34], frame[34:]
        pseudo = ip[12:20] + struct.pack("!BBH", 0, ip[9], len(l4))
    else:
        ip, l4 = frame[14:54], frame[54:]
        pseudo = ip[8:40] + struct.pack("!IxxxB", len(l4), ip[6])
    return _csum(pseudo + l4) == 0xFFFF        # _csum: the folded sum


@pytest.mark.skipif(_NOXDP is not None, reason=_NOXDP or "")
def test_csum_partial_completion():
    """fpxs_csum_partial on frames built with the pseudo-header sum in
    the field (what a stack with offload sends): completed to the right
    checksum; a frame with a full checksum is left alone; ICMP, a
    fragment and a short frame untouched.  No root needed."""
    import struct
    from fastpath import _afxdp
    from fastpath.wire.neigh import _csum

    def fold(x):
        while x >> 16:
            x = (x & 0xFFFF) + (x >> 16)
        return x

    def v4(proto, payload, frag=0):
        l4len = len(payload)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + l4len, 1, frag, 64, proto, 0,
                         bytes([10, 1, 0, 2]), bytes([10, 2, 0, 2]))
        ip = ip[:10] + struct.pack("!H", ~_csum(ip) & 0xFFFF) + ip[12:]
        ps = fold(sum(struct.unpack("!4H", ip[12:20])) + proto + l4len)
        return b"\x02" * 12 + b"\x08\x00" + ip, ps

    def v6(proto, payload):
        src, dst = bytes(range(16)), bytes(range(16, 32))
        ip = struct.pack("!IHBB", 6 << 28, len(payload), proto, 64) + src + dst
        ps = fold(sum(struct.unpack("!16H", src + dst)) + proto + len(payload))
        return b"\x02" * 12 + b"\x86\xdd" + ip, ps

    udp = struct.pack("!HHHH", 1000, 9, 8 + 13, 0) + b"fastpath udp!"
    tcp = struct.pack("!HHIIBBHHH", 1000, 80, 7, 0, 0x50, 0x18, 512, 0, 0) + b"data" * 5
    for mk in (v4, v6):
        for proto, l4, off in ((17, udp, 6), (6, tcp, 16)):
            hdr, ps = mk(proto, l4)
            partial = hdr + l4[:off] + struct.pack("!H", ps) + l4[off + 2:]
            done, changed = _afxdp.csum_partial(partial)
            assert changed and _l4_ok(done), (mk.__name__, proto)
            again, changed = _afxdp.csum_partial(done)
            assert again == done and (not changed or done == partial)
    hdr, ps = v4(1, b"\x08\x00" + bytes(10))
    icmp = hdr + b"\x08\x00" + struct.pack("!H", ps) + bytes(8)
    assert _afxdp.csum_partial(icmp) == (icmp, False)
    hdr, ps = v4(17, udp, frag=0x2000)
    frag = hdr + udp[:6] + struct.pack("!H", ps) + udp[8:]
    assert _afxdp.csum_partial(frag) == (frag, False)
    assert _afxdp.csum_partial(b"\x00" * 20) == (b"\x00" * 20, False)


@wire
def test_interface_removed_while_running_af_xdp(topo):
    """An attached interface deleted under fastpath on AF_XDP (the socket
    reports nothing; fastpath looks for its devices once a second): one
    line, exit 1, the program on the other interface detached."""
    _sh("ip", "-n", R, "link", "add", "r3", "type", "veth", "peer", "name", "r3p")
    _sh("ip", "-n", R, "link", "set", "r3", "up")
    _sh("ip", "-n", R, "link", "set", "r3p", "up")
    try:
        ready = topo["dir"] / "ready-xdp-r3"
        p = subprocess.Popen(["ip", "netns", "exec", R, sys.executable, "-m", "fastpath.run",
                              "--config", topo["conf"], "--iface", "r1", "--iface", "r3",
                              "--backend", "af_xdp", "--duration", "20", "--ready-file",
                              str(ready)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        end = time.monotonic() + 20
        while not ready.exists() and p.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        assert sorted(_xdp_attached()) == ["r1", "r3"]
        _sh("ip", "-n", R, "link", "del", "r3")
        out, err = p.communicate(timeout=20)
    finally:
        _sh("ip", "-n", R, "link", "del", "r3", check=False)
    assert p.returncode == 1 and err.strip() == "fastpath.run: interface 'r3' went away", err
    assert _xdp_attached() == [] and _xdp_loader_clean()


# ---------------------------------------------------------------------------
# --workers with AF_XDP: the veths have two RX queues each (test_wire's
# topology), queue q owned by worker q mod 2

@wire
@pytest.mark.parametrize("tables", ["shared", "own"])
def test_ping_and_flows_through_two_af_xdp_workers(topo, tables):
    """Pings of both families through 2 workers on AF_XDP, no static
    neighbours: the ARP requests and replies, NSs and NAs that XDP
    redirects to the workers reach the control process's neighbour
    subsystem (its own sockets see only what came before the workers
    bound their queues), and its answers go out; 32 UDP flows spread over both
    workers by the veth's queues; h2 sees each echo request once.  One XDP
    program per device while running (shared by the workers' sockets), the
    nftables drop of the control process; nothing of either after."""
    _flush_hosts()
    shm = _shm()
    p, table = _start(topo, "--workers", "2", "--backend", "af_xdp", "--worker-tables", tables,
                      "--json", "--neigh")
    try:
        workers = _workers_of(p)
        attached = _xdp_attached()
        tables_now = _tables()
        pings = tw.ping_both()
        # (to h2's closed port 9: each one counted by its UDP layer, no
        # socket buffer in the way)
        udp0 = _nstat(H2, "UdpNoPorts")
        _sh(sys.executable, "-c", _FLOWS, "10.2.0.2", "640", ns=H1)
        end = time.monotonic() + 5
        while _nstat(H2, "UdpNoPorts") - udp0 < 640 and time.monotonic() < end:
            time.sleep(0.1)
        got = _nstat(H2, "UdpNoPorts") - udp0
    finally:
        rc, out, err = _stop(p)
    assert len(workers) == 2, workers
    assert sorted(attached) == ["r1", "r2"], attached
    assert table in tables_now
    tw.check_pings(pings, err)
    assert got == 640, got
    assert rc == 0 and "Traceback" not in err, err
    doc = json.loads(out)
    c = doc["counters"]
    assert c["backend"] == "af_xdp" and c["workers"] == 2 and c["restarts"] == 0
    assert c["rx_ring"] is None and set(doc["xdp_modes"]) == {"r1", "r2"}, doc["xdp_modes"]
    assert c["verdicts"]["forward"] >= 12 + 640
    assert all(x > 20 for x in c["worker_rx"]), c["worker_rx"]       # both queues had flows
    assert c["wire"]["ctrl_to_control"] >= 4, c["wire"]     # handed over: ARP and ND
    tw.check_neighbours_resolved(doc)
    assert _xdp_attached() == [] and _xdp_loader_clean() and not _tables()
    assert not any(_alive(w) for w in workers)
    assert _shm_of([p.pid] + workers, shm) == []


@wire
def test_tcp_frames_as_the_kernel_two_af_xdp_workers(topo):
    """test_wire's TCP segments (IPv4 options included) through two AF_XDP
    workers: the bytes r's kernel forwards."""
    tw.frames_as_the_kernel(topo, tw._tcp_frames(tw._mac(tw.H1, "h1e"), tw._mac(tw.R, "r1")),
                            "--workers", "2", "--backend", "af_xdp")


@wire
def test_af_xdp_worker_sigkilled_is_replaced(topo):
    """Both AF_XDP workers SIGKILLed while pings flow (their sockets leave
    the program's map, the program stays): the control process restarts
    them, their sockets bind the same queues again and the pings resume;
    at SIGTERM no program, table or process is left."""
    _out, _pids, attached = workers_killed_under_ping(topo, "--backend", "af_xdp",
                                                      probe=_xdp_attached)
    assert sorted(attached) == ["r1", "r2"], attached
    assert _xdp_attached() == [] and _xdp_loader_clean() and not _tables()


@wire
def test_af_xdp_workers_need_as_many_queues(topo):
    """--workers 3 on veths of two RX queues: one line, exit 2, nothing
    left (no program, table, worker)."""
    r = _sh(sys.executable, "-m", "fastpath.run", "--config", topo["conf"], "--iface", "r1",
            "--iface", "r2", "--workers", "3", "--backend", "af_xdp", ns=R, check=False,
            env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().startswith(
        "fastpath.run: --workers 3 with --backend af_xdp: r1 has 2 RX queues"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert _xdp_attached() == [] and not _tables()

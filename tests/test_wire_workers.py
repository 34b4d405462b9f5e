"""``fastpath.run --workers N``: each interface spread over N worker
processes by PACKET_FANOUT_HASH, ARP/ND in the control process
(fastpath.wire.workers), in the topology of tests/test_wire.py:

    h1 (10.1.0.2, 2001:db8:1::2) --veth-- [r1  fastpath  r2] --veth-- h2 (10.2.0.2, 2001:db8:2::2)

Kernel hosts, no static neighbours; r's kernel configured as the same
router, so each echo request reaching h2 once proves the ingress drop
holds with workers too.  A worker SIGKILLed under traffic is replaced and
the traffic resumes; no table, process or /dev/shm segment is left after
any exit.  Skipped as test_wire.py is (root, namespaces, nft).
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import test_wire as tw
from test_wire import H1, H2, R, ROOT, TOOL, _flush_hosts, _nstat, _sh, _start, _stop, _tables
from test_wire import topo  # noqa: F401  (the module's topology fixture)

pytestmark = pytest.mark.skipif(tw._SKIP is not None, reason=tw._SKIP or "")

_FLOWS = r"""
import socket, sys
dst, n = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
socks = [socket.socket(fam, socket.SOCK_DGRAM) for _ in range(32)]
for k in range(n):
    socks[k % 32].sendto(b"flow %d" % k, (dst, 9))
"""


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _workers_of(p):
    """The worker processes of a fastpath.run started by _start (ip netns
    exec execs python, so p.pid is fastpath.run itself)."""
    end = time.monotonic() + 5
    while time.monotonic() < end:
        kids = [k for k in _children(p.pid) if b"fastpath.wire.workers" in _cmdline(k)]
        if kids:
            return kids
        time.sleep(0.05)
    return []


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _alive(pid):
    return os.path.exists(f"/proc/{pid}") and b"fastpath" in _cmdline(pid)


def _shm():
    return set(os.listdir("/dev/shm"))


def _shm_of(pids, before):
    """New /dev/shm segments named after one of ``pids`` (fastpath's are
    fp<pid>_...; the directory is shared with other jobs on this host)."""
    return [n for n in _shm() - before if any(f"fp{pid}_" in n for pid in pids)]


@pytest.mark.parametrize("tables", ["shared", "own"])
def test_ping_and_flows_through_two_workers(topo, tables):
    """Pings of both families through 2 workers with ARP/ND in the control
    process; 32 UDP flows spread over both workers; h2 sees each echo
    request once.  The workers read the control process's shared tables
    (the neighbours it learns reach them only as its Dataplane's
    publications), or each its own Router (--worker-tables own)."""
    _flush_hosts()
    shm = _shm()
    p, table = _start(topo, "--workers", "2", "--worker-tables", tables, "--json", "--neigh")
    try:
        workers = _workers_of(p)
        assert table in _tables()
        pings = tw.ping_both()
        _sh(sys.executable, "-c", _FLOWS, "10.2.0.2", "640", ns=H1)
        time.sleep(0.3)
    finally:
        rc, out, err = _stop(p)
    assert len(workers) == 2, workers
    tw.check_pings(pings, err)
    assert rc == 0 and "Traceback" not in err, err
    doc = json.loads(out)
    c = doc["counters"]
    assert c["workers"] == 2 and c["restarts"] == 0 and c["worker_tables"] == tables
    assert c["verdicts"]["forward"] >= 12 + 640
    assert all(x > 20 for x in c["worker_rx"]), c["worker_rx"]       # both got flows
    tw.check_neighbours_resolved(doc)
    assert table not in _tables()
    assert not any(_alive(w) for w in workers)
    assert _shm_of([p.pid] + workers, shm) == []


def workers_killed_under_ping(topo, *args, probe=None):
    """Both workers of ``fastpath.run --workers 2 ARGS --json`` SIGKILLed
    while a ping h1 -> h2 runs (its flow is on one of them): the control
    process says so in one line each and starts others, the pings resume
    (a second or so of loss at most).  Returns (out, the pids of the
    control process and of every worker, what ``probe()`` gave once they
    were replaced)."""
    p, table = _start(topo, "--workers", "2", "--json", *args)
    try:
        workers = _workers_of(p)
        ping = subprocess.Popen(["ip", "netns", "exec", H1, sys.executable, TOOL, "ping",
                                 "10.2.0.2", "12", "1"], stdout=subprocess.PIPE, text=True)
        time.sleep(1.3)          # past a counters report (once a second)
        for w in workers:
            os.kill(w, signal.SIGKILL)
        ping_out = ping.communicate(timeout=30)[0]
        after = _workers_of(p)
        seen = probe() if probe else None
        ok = _sh(sys.executable, TOOL, "ping", "10.2.0.2", "3", "2", ns=H1, check=False)
    finally:
        rc, out, err = _stop(p)
    assert rc == 0, err
    died = [l for l in err.splitlines() if " died (signal SIGKILL); restarted as pid " in l]
    assert len(died) == 2, err
    assert sorted(set(after) & set(workers)) == [] and len(after) == 2
    got = int(ping_out.split()[1].split("/")[0])
    assert got >= 9, ping_out
    assert ok.stdout.strip() == "ok 3/3", ok.stdout
    assert json.loads(out)["counters"]["restarts"] == 2
    assert table not in _tables()
    assert not any(_alive(w) for w in workers + after)
    return out, [p.pid] + workers + after, seen


def test_worker_sigkilled_under_traffic_is_replaced(topo):
    """A worker SIGKILLed while pings flow: the control process says so in
    one line, starts another, the pings resume; at SIGTERM everything
    goes (table, both generations of workers)."""
    shm = _shm()
    out, pids, _ = workers_killed_under_ping(topo)
    c = json.loads(out)["counters"]
    # what the killed workers had counted by their last report stays in
    # the totals (the pings of the first second)
    assert c["retired_rx"] > 0, c
    assert _shm_of(pids, shm) == []


@pytest.mark.parametrize("how", ["SIGTERM", "exception"])
def test_workers_stopped_and_table_removed_on_exit(topo, how):
    """SIGTERM and an exception in the loop (SIGINT takes the SIGTERM path,
    tested in test_wire.py): workers gone, table removed."""
    env = {"FASTPATH_RUN_FAULT": "raise"} if how == "exception" else None
    p, table = _start(topo, "--workers", "2", "--duration", "30", env=env)
    workers = _workers_of(p) if how != "exception" else []
    if how == "exception":
        out, err = p.communicate(timeout=30)
        assert p.returncode == 1 and "internal error: RuntimeError" in err
    else:
        rc, out, err = _stop(p, getattr(signal, how))
        assert rc == 0 and f"stopped ({how})" in out, err
        assert len(workers) == 2
    assert "Traceback" not in err
    assert not _tables()
    assert not any(_alive(w) for w in workers)


def test_control_process_sigkilled_workers_exit(topo):
    """The control process SIGKILLed: its workers see their connection
    close and exit; the table it leaves is swept by the next run, and no
    segment of its shared tables is left (the resource tracker of Python's
    shared_memory unlinks them when it dies; the next run sweeps any
    other, test_sweep_stale_segments)."""
    shm = _shm()
    p, table = _start(topo, "--workers", "2", "--duration", "30")
    workers = _workers_of(p)
    assert _shm_of([p.pid], shm)             # its Dataplane's segments
    p.kill()
    p.communicate(timeout=10)
    end = time.monotonic() + 5
    while any(_alive(w) for w in workers) and time.monotonic() < end:
        time.sleep(0.05)
    assert len(workers) == 2 and not any(_alive(w) for w in workers)
    assert table in _tables()
    left = _shm_of([p.pid], shm)
    p2, _ = _start(topo, "--workers", "2", "--duration", "0.2")
    p2.communicate(timeout=20)
    assert not _tables()
    assert _shm_of([p.pid, p2.pid], shm) == [], left


_BIG_UDP = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 0)          # IP_MTU_DISCOVER: IP_PMTUDISC_DONT
for k in range(int(sys.argv[2])):
    s.sendto(bytes([k]) * 1400, (sys.argv[1], 5557))
"""


@pytest.mark.parametrize("tables", ["shared", "own"])
def test_ipv4_fragmented_by_the_workers(topo, tables):
    """r2's MTU 1000 in the configuration (fastpath's only): 1428-byte
    IPv4 datagrams without DF from h1 are fragmented by the workers
    (ip_fragment, from the route's and the device's MTU the shared tables
    hold) and reassembled by h2's stack."""
    conf = topo["dir"] / f"mtu-{tables}.conf"
    conf.write_text(tw.CONF + "ip link set r2 mtu 1000\n")
    p, table = _start(dict(topo, conf=str(conf)), "--workers", "2", "--worker-tables", tables,
                      "--json")
    try:
        _sh(sys.executable, TOOL, "ping", "10.2.0.2", "1", "2", ns=H1, check=False)
        rcv = subprocess.Popen(["ip", "netns", "exec", H2, sys.executable, TOOL, "udprecv", "4",
                                "5557", "5", "5"], stdout=subprocess.PIPE, text=True)
        assert rcv.stdout.readline().strip() == "ready"
        _sh(sys.executable, "-c", _BIG_UDP, "10.2.0.2", "5", ns=H1)
        got = rcv.communicate(timeout=10)[0].strip()
    finally:
        rc, out, err = _stop(p)
    assert rc == 0, err
    assert got == "5", (got, err)
    c = json.loads(out)["counters"]
    assert c["interfaces"]["r2"]["tx"] >= 10, c["interfaces"]["r2"]     # two fragments each


@tw.needs_kernel_seg6
def test_srv6_frames_as_the_kernel_two_workers(topo):
    """test_wire's SRv6 frames (one per behaviour of r) through two
    workers: the bytes r's kernel sends."""
    tw.srv6_frames_as_the_kernel(topo, "--workers", "2")


def test_srv6_frames_as_offline_two_workers(topo):
    """test_wire's SRv6 frames through two workers: the bytes the offline
    Router gives (on kernels without seg6 lwtunnels too)."""
    tw.srv6_frames_as_offline(topo, "--workers", "2")


def test_vrf_end_dt_two_workers(topo):
    """End.DT4/DT6/DT46 into a VRF of the configuration, through two
    workers (test_wire's VRF test)."""
    tw.vrf_end_dt_on_the_wire(topo, "--workers", "2")


def test_tcp_frames_as_the_kernel_two_workers(topo):
    """test_wire's TCP segments through two workers: the bytes r's kernel
    forwards."""
    tw.frames_as_the_kernel(topo, tw._tcp_frames(tw._mac(H1, "h1e"), tw._mac(R, "r1")),
                            "--workers", "2")


@pytest.mark.parametrize("tables", ["shared", "own"])
def test_sighup_reaches_the_workers(topo, tables):
    """SIGHUP with workers: the control process checks the new file and
    publishes it to the shared tables (or hands it to every worker, the
    learned neighbours sent again): a route added there works at once
    through the workers."""
    conf = topo["dir"] / "reload-workers.conf"
    conf.write_text(tw.CONF)
    p, table = _start(dict(topo, conf=str(conf)), "--workers", "2", "--worker-tables", tables,
                      "--json")
    try:
        conf.write_text(tw.CONF + "ip route add 10.4.0.0/24 via 10.2.0.2 dev r2\n")
        p.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        after = _sh(sys.executable, TOOL, "ping", "10.4.0.2", "3", "2", ns=H1, check=False)
    finally:
        rc, out, err = _stop(p)
    assert after.stdout.strip() == "ok 3/3", after.stdout + err
    assert rc == 0 and "configuration reloaded from" in err and "refused" not in err, err
    assert json.loads(out)["counters"]["reloads"] == 1


def test_reload_under_traffic_two_workers(topo):
    """test_wire's reload under a UDP stream, with two workers: every
    datagram arrives, every reload reaches the workers."""
    tw.reload_under_traffic(topo, "--workers", "2")


def test_interface_removed_under_workers(topo):
    """An attached interface deleted under --workers 2: the workers say so
    to the control process, which stops with one line, exit 1, the table
    removed and the workers gone (not restarted onto a missing device)."""
    _sh("ip", "-n", R, "link", "add", "r3", "type", "veth", "peer", "name", "r3p")
    _sh("ip", "-n", R, "link", "set", "r3", "up")
    _sh("ip", "-n", R, "link", "set", "r3p", "up")
    try:
        ready = topo["dir"] / "ready-workers-r3"
        p = subprocess.Popen(["ip", "netns", "exec", R, sys.executable, "-m", "fastpath.run",
                              "--config", topo["conf"], "--iface", "r1", "--iface", "r3",
                              "--workers", "2", "--duration", "20", "--ready-file", str(ready)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
        end = time.monotonic() + 20
        while not ready.exists() and p.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        workers = _workers_of(p)
        assert _tables() and len(workers) == 2
        _sh("ip", "-n", R, "link", "del", "r3")
        out, err = p.communicate(timeout=20)
    finally:
        _sh("ip", "-n", R, "link", "del", "r3", check=False)
    assert p.returncode == 1 and err.strip() == "fastpath.run: interface 'r3' went away", err
    assert not _tables() and not any(_alive(w) for w in workers)


_API = r"""
import subprocess, sys, time
from fastpath import Live
conf, h1, tool = sys.argv[1], sys.argv[2], sys.argv[3]
with Live(open(conf).read(), ["r1", "r2"], workers=2) as live:
    assert live.dataplane is not None
    live.configure("ip route add 10.4.0.0/24 via 10.2.0.2 dev r2\n")
    ping = subprocess.Popen(["ip", "netns", "exec", h1, sys.executable, tool, "ping", "10.4.0.2",
                             "3", "2"], stdout=subprocess.PIPE, text=True)
    end = time.monotonic() + 15
    while ping.poll() is None and time.monotonic() < end:
        live.step(20)
    c = live.counters()
print(ping.communicate()[0].strip(), c["worker_tables"], c["verdicts"]["forward"] >= 6)
"""


def test_configure_through_the_api_reaches_the_workers(topo):
    """fastpath.Live(..., workers=2).configure(lines): a route added is
    published to the workers' shared tables at once (pings to it
    forwarded by them)."""
    r = _sh(sys.executable, "-c", _API, topo["conf"], H1, TOOL, ns=R, check=False,
            env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert r.stdout.strip() == "ok 3/3 shared True", r.stdout + r.stderr


def test_sweep_stale_segments(tmp_path):
    """fastpath.dataplane.sweep_stale_segments: a Dataplane segment of a
    process that is gone is removed, one of a live process and other
    names are kept."""
    from fastpath.dataplane import sweep_stale_segments
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"fp{gone.pid}_abc123_snap1"
    mine = tmp_path / f"fp{os.getpid()}_abc123_core"
    other = tmp_path / "fp123x_abc123_core"
    for f in (dead, mine, other):
        f.write_bytes(b"x")
    assert sweep_stale_segments(str(tmp_path)) == [dead.name]
    assert not dead.exists() and mine.exists() and other.exists()


@pytest.mark.parametrize("tables", ["shared", "own"])
def test_forwarding_and_resolving_while_a_reload_compiles_two_workers(topo, tables):
    """test_wire's reload held in flight, with two workers: they forward
    with the running tables and the control process answers and resolves
    meanwhile; the new configuration reaches them once swapped in."""
    tw.reload_in_flight(topo, "--workers", "2", "--worker-tables", tables)


def test_forwarding_while_the_workers_compile_a_reload(topo):
    """Own tables: the control process has compiled the reload and the
    workers' compiles are held -- they go on forwarding with their running
    Routers meanwhile, and the "reloaded" line waits until both swapped
    the new configuration in."""
    tw.reload_in_flight(topo, "--workers", "2", "--worker-tables", "own", held="workers")

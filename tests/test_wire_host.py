"""The router's own stack behind fastpath (python -m fastpath.run --host-stack).

    h1 (10.1.0.2, 2001:db8:1::2) --veth-- [r1  r  r2] --veth-- h2 (10.2.0.2, 2001:db8:2::2)

r's kernel is configured as the router (addresses, forwarding); fastpath
runs in r on the same configuration and owns r1 and r2.  Without
``--host-stack`` the nftables ingress drop cuts r's own stack off: fastpath
answers echo requests itself, and nothing the kernel sends gets an answer
back.  With it, the kernel answers pings and TCP to r's addresses, and
reaches the hosts itself -- and each packet still crossed fastpath (r's
kernel forwards nothing: its forwarding counters stay put).

Each namespace is made for the module and deleted after it.  Skipped, with
the reason, without root, ip, nft or veth.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from test_wire import _sh, _why_skip

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOOL = str(pathlib.Path(__file__).with_name("wire_tool.py"))
P = f"fph{os.getpid() % 100000}"
H1, H2, R = P + "a", P + "b", P + "r"

CONF = """\
ip addr add 10.1.0.1/24 dev r1
ip -6 addr add 2001:db8:1::1/64 dev r1
ip addr add 10.2.0.1/24 dev r2
ip -6 addr add 2001:db8:2::1/64 dev r2
sysctl -w net.ipv4.ip_forward=1
sysctl -w net.ipv6.conf.all.forwarding=1
"""

_SKIP = _why_skip()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    made = []
    try:
        for n in (H1, H2, R):
            _sh("ip", "netns", "add", n)
            made.append(n)
        for k, h in ((1, H1), (2, H2)):
            _sh("ip", "-n", R, "link", "add", f"r{k}", "type", "veth", "peer", "name",
                f"h{k}e", "netns", h)
            _sh("ip", "-n", h, "link", "set", "lo", "up")
            _sh("ip", "-n", h, "addr", "add", f"10.{k}.0.2/24", "dev", f"h{k}e")
            _sh("ip", "-n", h, "-6", "addr", "add", f"2001:db8:{k}::2/64", "dev", f"h{k}e",
                "nodad")
            _sh("ip", "-n", h, "link", "set", f"h{k}e", "up")
            _sh("ip", "-n", h, "route", "add", "default", "via", f"10.{k}.0.1")
            _sh("ip", "-n", h, "-6", "route", "add", "default", "via", f"2001:db8:{k}::1")
            _sh("ip", "-n", R, "addr", "add", f"10.{k}.0.1/24", "dev", f"r{k}")
            _sh("ip", "-n", R, "-6", "addr", "add", f"2001:db8:{k}::1/64", "dev", f"r{k}",
                "nodad")
            _sh("ip", "-n", R, "link", "set", f"r{k}", "up")
        _sh("ip", "-n", R, "link", "set", "lo", "up")
        _sh("sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1", ns=R)
        conf = tmp_path_factory.mktemp("host") / "r.conf"
        conf.write_text(CONF)
        yield {"conf": str(conf), "dir": conf.parent}
    finally:
        for n in made:
            _sh("ip", "netns", "del", n, check=False)


def _start(topo, *args):
    """fastpath.run in r, until it says it owns the interfaces."""
    ready = topo["dir"] / f"ready{time.monotonic_ns()}"
    cmd = ["ip", "netns", "exec", R, sys.executable, "-m", "fastpath.run", "--config",
           topo["conf"], "--ready-file", str(ready), "--json"] + list(args)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    while not ready.exists():
        if p.poll() is not None:
            out, err = p.communicate()
            pytest.fail(f"fastpath.run did not start: {err or out}")
        time.sleep(0.02)
    return p


def _stop(p, sig=signal.SIGTERM):
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == (0 if sig == signal.SIGTERM else -sig), err
    assert "Traceback" not in err, err
    return json.loads(out) if sig == signal.SIGTERM else None


def _ping(ns, addr, count=3):
    return _sh(sys.executable, TOOL, "ping", addr, str(count), "2", ns=ns,
               check=False).stdout.strip()


def _nstat(ns, *names):
    out = _sh("nstat", "-az", *names, ns=ns, check=False).stdout
    got = dict.fromkeys(names, 0)
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] in got:
            got[parts[0]] = int(parts[1])
    return got


def _taps():
    """The TAP devices fastpath made in r (named fph<ifindex>)."""
    out = _sh("ip", "-n", R, "-o", "link", "show", check=False).stdout
    return [l.split(":")[1].strip().split("@")[0] for l in out.splitlines()
            if l.split(":")[1].strip().startswith("fph")]


ROUTER = ("10.1.0.1", "10.2.0.1", "2001:db8:1::1", "2001:db8:2::1")
COUNTS = ("IcmpInEchos", "Icmp6InEchos", "IpForwDatagrams", "Ip6OutForwDatagrams")


@pytest.mark.parametrize("workers", [None, 2], ids=["one-process", "workers-2"])
def test_kernel_answers_for_its_addresses(topo, workers):
    """h1 pings all four of r's addresses: r's kernel answers every one (its
    echo counters), fastpath answers none itself, and forwarded pings
    h1 -> h2 still pass with r's kernel forwarding nothing."""
    p = _start(topo, "--host-stack", *(["--workers", str(workers)] if workers else []))
    try:
        before = _nstat(R, *COUNTS)
        got = {a: _ping(H1, a) for a in ROUTER}
        through = (_ping(H1, "10.2.0.2"), _ping(H1, "2001:db8:2::2"))
        after = _nstat(R, *COUNTS)
    finally:
        doc = _stop(p)
    assert got == dict.fromkeys(ROUTER, "ok 3/3"), got
    assert through == ("ok 3/3", "ok 3/3")
    assert after["IcmpInEchos"] - before["IcmpInEchos"] == 6
    assert after["Icmp6InEchos"] - before["Icmp6InEchos"] == 6
    assert after["IpForwDatagrams"] == before["IpForwDatagrams"]
    assert after["Ip6OutForwDatagrams"] == before["Ip6OutForwDatagrams"]
    c = doc["counters"]
    assert c["echo_replies"] == 0
    assert c["wire"]["host_delivered"] >= 12 and c["wire"]["host_error"] == 0
    assert c["wire"]["host_sent"] >= 12          # the kernel's replies left through fastpath
    assert c["verdicts"]["forward"] >= 12


def test_without_host_stack_the_kernel_is_cut_off(topo):
    """The control: without --host-stack fastpath answers the pings itself
    (r's kernel sees none) and r's own pings out get no answer back."""
    p = _start(topo)
    try:
        before = _nstat(R, *COUNTS)
        mine = _ping(H1, "10.1.0.1")
        out = (_ping(R, "10.2.0.2"), _ping(R, "2001:db8:2::2"))
        after = _nstat(R, *COUNTS)
    finally:
        doc = _stop(p)
    assert mine == "ok 3/3"
    assert after["IcmpInEchos"] == before["IcmpInEchos"]
    assert out == ("ok 0/3", "ok 0/3")
    assert doc["counters"]["echo_replies"] == 3


SERVER = textwrap.dedent("""\
    import socket, sys
    fam = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], 7007)); s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept()
    c.sendall(c.recv(100).upper()); c.close()
""")

CLIENT = textwrap.dedent("""\
    import socket, sys
    c = socket.create_connection((sys.argv[1], 7007), timeout=20)
    c.sendall(b"through fastpath"); print(c.recv(100).decode())
""")


@pytest.mark.parametrize("server,client,addr", [
    (R, H1, "10.1.0.1"), (R, H1, "2001:db8:2::1"),      # to the router, from a host
    (H2, R, "10.2.0.2"), (H2, R, "2001:db8:2::2"),      # from the router, to a host
], ids=["host-to-router-v4", "host-to-router-v6", "router-to-host-v4", "router-to-host-v6"])
def test_tcp_with_the_router_itself(topo, server, client, addr):
    """A TCP connection to r's kernel (ssh, BGP) and one r's kernel opens
    (its pings and sessions out), each with its data both ways."""
    p = _start(topo, "--host-stack")
    srv = subprocess.Popen(["ip", "netns", "exec", server, sys.executable, "-c", SERVER, addr],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        got = _sh(sys.executable, "-c", CLIENT, addr, ns=client, check=False, timeout=120)
    finally:
        srv.kill()
        srv.wait()
        doc = _stop(p)
    assert got.stdout.strip() == "THROUGH FASTPATH", got.stderr
    assert doc["counters"]["wire"]["host_delivered"] >= 3
    assert doc["counters"]["wire"]["host_sent"] >= 3


def test_router_pings_out(topo):
    """r's own pings to both hosts, both families: the requests leave
    through fastpath (the interfaces' egress programs take the kernel's
    frames to the TAPs, fastpath sends them), the replies come back through
    it."""
    p = _start(topo, "--host-stack")
    try:
        got = [_ping(R, a) for a in ("10.1.0.2", "10.2.0.2", "2001:db8:1::2", "2001:db8:2::2")]
    finally:
        doc = _stop(p)
    assert got == ["ok 3/3"] * 4
    w = doc["counters"]["wire"]
    assert w["host_sent"] >= 12 and w["host_delivered"] >= 12, w


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL", "SIGKILL-workers"])
def test_nothing_left_behind(topo, how):
    """The TAPs (and the programs attached to them) go with the process,
    SIGKILL included (with --workers, once the workers have noticed); the
    nftables table of a killed run goes at the next start."""
    workers = ["--workers", "2"] if how.endswith("workers") else []
    p = _start(topo, "--host-stack", *workers)
    assert len(_taps()) == 2
    if how == "SIGTERM":
        _stop(p)
    else:
        _stop(p, signal.SIGKILL)
    end = time.monotonic() + 300        # (workers: they exit when the control goes)
    while _taps():
        assert time.monotonic() < end, _taps()
        time.sleep(0.05)
    p = _start(topo, "--host-stack")
    try:
        assert _ping(H1, "10.1.0.1") == "ok 3/3"
    finally:
        _stop(p)
    assert _taps() == []
    tables = _sh("nft", "list", "tables", "netdev", ns=R).stdout
    assert "fastpath_" not in tables, tables


def test_af_xdp_refused_one_line(topo):
    p = subprocess.run(["ip", "netns", "exec", R, sys.executable, "-m", "fastpath.run",
                        "--config", topo["conf"], "--host-stack", "--backend", "af_xdp",
                        "--duration", "1"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().splitlines() == [
        "fastpath.run: --host-stack needs --backend af_packet (with af_xdp the XDP program "
        "takes ARP/ND away from the kernel)"]


@pytest.mark.parametrize("opt", [["-R"], ["-T", "tsandaddr"]], ids=["record-route", "timestamp"])
def test_ipv4_options_reach_the_kernel_as_they_came(topo, opt):
    """ping -R / -T to r: the datapath fills the options in as it receives
    the packet; the kernel is handed them as they came (it fills them in
    itself), so it answers, and its reply records r's address."""
    p = _start(topo, "--host-stack")
    try:
        got = _sh("ping", *opt, "-c", "1", "-W", "5", "10.1.0.1", ns=H1, check=False)
    finally:
        _stop(p)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "10.1.0.1" in got.stdout.split("bytes from", 1)[1].split("statistics")[0], got.stdout

"""Proxy ARP and proxy NDP (issue 22): fastpath as the proxying access router.

The namespaces of tests/test_wire.py (its ``topo`` fixture and helpers,
imported), with one more subnet that h1 and h2 both think they are on:

    h1 (10.5.0.2/24, 2001:db8:5::2/64) --r1 [r] r2-- h2 (10.5.0.3/24, 2001:db8:5::3/64)

r routes 10.5.0.3/32 and 2001:db8:5::3/128 to r2, 10.5.0.2/32 and
2001:db8:5::2/128 to r1, with proxy_arp on r1 and r2, proxy_ndp on r1 and
r2 and a pneigh entry for the other host on each.  r's kernel gets the same
configuration (it answers while fastpath is not running: the kernel as the
access router), so the replies can be compared byte for byte.

The configuration-language tests need no root; the wire tests are skipped
with the reason without root, ip, nft or veth.
"""
import ipaddress
import os
import subprocess
import sys
import time

import pytest

from fastpath.config import ConfigError, State

try:
    from test_wire import (H1, H2, R, ROOT, TOOL, _SKIP, _flush_hosts, _mac, _sh, _start,
                           _stop, CONF, topo)  # noqa: F401  (topo: the fixture)
except ImportError:                              # tests/ as a package
    from .test_wire import (H1, H2, R, ROOT, TOOL, _SKIP, _flush_hosts, _mac, _sh, _start,
                            _stop, CONF, topo)  # noqa: F401

wire = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

PROXY_CONF = CONF + """\
ip route add 10.5.0.3/32 dev r2
ip route add 10.5.0.2/32 dev r1
ip -6 route add 2001:db8:5::3/128 dev r2
ip -6 route add 2001:db8:5::2/128 dev r1
sysctl -w net.ipv4.conf.r1.proxy_arp=1
sysctl -w net.ipv4.conf.r2.proxy_arp=1
sysctl -w net.ipv6.conf.r1.proxy_ndp=1
sysctl -w net.ipv6.conf.r2.proxy_ndp=1
ip -6 neigh add proxy 2001:db8:5::3 dev r1
ip -6 neigh add proxy 2001:db8:5::2 dev r2
"""


@pytest.fixture(scope="module")
def ptopo(topo):
    """The proxy subnet on the hosts and r's kernel (gone with topo's
    namespaces, on every exit path)."""
    _sh("ip", "-n", H1, "addr", "add", "10.5.0.2/24", "dev", "h1e")
    _sh("ip", "-n", H1, "-6", "addr", "add", "2001:db8:5::2/64", "dev", "h1e", "nodad")
    _sh("ip", "-n", H2, "addr", "add", "10.5.0.3/24", "dev", "h2e")
    _sh("ip", "-n", H2, "-6", "addr", "add", "2001:db8:5::3/64", "dev", "h2e", "nodad")
    for line in PROXY_CONF[len(CONF):].splitlines():
        _sh(*line.split(), ns=R)
    conf = topo["dir"] / "proxy.conf"
    conf.write_text(PROXY_CONF)
    return dict(topo, conf=str(conf))


@wire
def test_same_subnet_hosts_reach_each_other_through_fastpath(ptopo):
    """h1 pings h2 in "its" /24 and /64: fastpath answers h1's ARP request
    and NS for h2 (and h2's for h1) with its own MAC, and routes."""
    _flush_hosts()
    p, _table = _start(ptopo, "--json", "--neigh")
    try:
        r4 = _sh(sys.executable, TOOL, "ping", "10.5.0.3", "2", "3", ns=H1, check=False)
        r6 = _sh(sys.executable, TOOL, "ping", "2001:db8:5::3", "2", "3", ns=H1, check=False)
        n1 = _sh("ip", "neigh", "show", "dev", "h1e", ns=H1).stdout
    finally:
        rc, out, err = _stop(p)
    assert r4.stdout.strip() == "ok 2/2", r4.stdout + r4.stderr + err
    assert r6.stdout.strip() == "ok 2/2", r6.stdout + r6.stderr + err
    import json
    doc = json.loads(out)
    nb = doc["counters"]["neighbour"]
    assert nb["proxy_arp_tx"] >= 2 and nb["proxy_na_tx"] >= 2, nb     # h1's and h2's
    r1mac = ":".join(_mac(R, "r1")[i:i + 2] for i in range(0, 12, 2))
    assert f"10.5.0.3 lladdr {r1mac}" in n1 and f"2001:db8:5::3 lladdr {r1mac}" in n1, n1
    assert "2001:db8:5::3 dev r1 proxy" in doc["neighbours"]


def _requests(h1mac, rmac):
    """From h1: a broadcast ARP request for 10.5.0.3, a multicast and a
    unicast NS (with a source link-layer option) for 2001:db8:5::3."""
    from fastpath.wire.neigh import arp_frame, mcast_mac6, ns_frame, solicited_node
    mac = bytes.fromhex(h1mac)
    arp = arp_frame(1, b"\xff" * 6, mac, bytes([10, 5, 0, 2]), bytes(6), bytes([10, 5, 0, 3]))
    src = ipaddress.IPv6Address("2001:db8:5::2").packed
    tgt = ipaddress.IPv6Address("2001:db8:5::3").packed
    mc = solicited_node(tgt)
    na = "na=" + tgt.hex()
    return [("arp", arp, "arp-reply=0a050003"),
            ("na-mcast", ns_frame(mcast_mac6(mc), mac, src, mc, tgt), na),
            ("na-ucast", ns_frame(bytes.fromhex(rmac), mac, src, tgt, tgt), na)]


def _replies(reqs):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return {name: _sh(sys.executable, TOOL, "xchg", "h1e", frame.hex(), kind, "2", ns=H1,
                      env=env).stdout.strip() for name, frame, kind in reqs}


@wire
def test_proxy_replies_as_the_kernel(ptopo):
    """The same ARP request and NS for h2's address from h1: r's kernel as
    the proxying router answers first, then fastpath in its place; the ARP
    reply (r1's MAC for 10.5.0.3) and the NAs (R and O clear, S set, the
    target option for the multicast NS only, source 2001:db8:1::1) are the
    same bytes, nothing masked.  The broadcast and multicast ones come after
    the random proxy_delay on both sides."""
    reqs = _requests(_mac(H1, "h1e"), _mac(R, "r1"))
    for _ in range(10):
        kernel = _replies(reqs[:2])
        if all(kernel.values()):
            break
        time.sleep(0.3)
    assert all(kernel.values()), kernel
    # the unicast NS: answered only with all.proxy_ndp (ip6_forward's check)
    kernel["na-ucast-dev"] = _replies(reqs[2:])["na-ucast"]
    assert kernel["na-ucast-dev"] == ""
    _sh("sysctl", "-qw", "net.ipv6.conf.all.proxy_ndp=1", ns=R)
    try:
        kernel["na-ucast"] = _replies(reqs[2:])["na-ucast"]
    finally:
        _sh("sysctl", "-qw", "net.ipv6.conf.all.proxy_ndp=0", ns=R)
    assert kernel["na-ucast"], kernel
    p, _table = _start(ptopo)
    try:
        ours = _replies(reqs[:2])
        ours["na-ucast-dev"] = _replies(reqs[2:])["na-ucast"]
    finally:
        _stop(p)
    conf = ptopo["dir"] / "proxy-all.conf"
    conf.write_text(PROXY_CONF + "sysctl -w net.ipv6.conf.all.proxy_ndp=1\n")
    p, _table = _start(dict(ptopo, conf=str(conf)))
    try:
        ours["na-ucast"] = _replies(reqs[2:])["na-ucast"]
    finally:
        _stop(p)
    for k in kernel:
        assert ours[k] == kernel[k], f"{k}: fastpath {ours[k]} kernel {kernel[k]}"
    na = bytes.fromhex(ours["na-mcast"])
    assert na[14 + 40 + 4] == 0x40 and na[22:38] == ipaddress.IPv6Address("2001:db8:1::1").packed


@wire
def test_no_proxy_without_sysctl_or_entry(ptopo):
    """proxy_arp off on r1 (and no pneigh entry for 10.5.0.3): no ARP reply;
    the NS for an address without a proxy entry: no NA."""
    conf = ptopo["dir"] / "noproxy.conf"
    conf.write_text(PROXY_CONF.replace("net.ipv4.conf.r1.proxy_arp=1", "net.ipv4.conf.r1.proxy_arp=0")
                    .replace("ip -6 neigh add proxy 2001:db8:5::3 dev r1\n", ""))
    reqs = _requests(_mac(H1, "h1e"), _mac(R, "r1"))[:2]
    p, _table = _start(dict(ptopo, conf=str(conf)))
    try:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        got = {name: _sh(sys.executable, TOOL, "xchg", "h1e", frame.hex(), kind, "1.2", ns=H1,
                         env=env).stdout.strip() for name, frame, kind in reqs}
    finally:
        _stop(p)
    assert got == {"arp": "", "na-mcast": ""}, got


# ---------------------------------------------------------------------------
# the configuration language (no root)
BASE = "ip link set dev eth0 up\nip link set dev eth1 up\n"


def test_config_round_trip():
    text = BASE + """\
sysctl -w net.ipv4.conf.all.proxy_arp=1
sysctl -w net.ipv4.conf.eth1.proxy_arp_pvlan=1
sysctl -w net.ipv6.conf.eth0.proxy_ndp=1
sysctl -w net.ipv4.neigh.eth0.proxy_delay=0
sysctl -w net.ipv6.neigh.default.proxy_qlen=16
ip -6 neigh add proxy 2001:db8::5 dev eth0
ip neigh add proxy 10.0.0.5 dev eth1 router
ip neigh add proxy 10.0.0.6 dev eth1
ip neigh del proxy 10.0.0.6 dev eth1
ip neigh show proxy
"""
    s = State().apply(text)
    assert s.proxies == {("eth0", ipaddress.ip_address("2001:db8::5")): False,
                         ("eth1", ipaddress.ip_address("10.0.0.5")): True}
    assert s.proxy_show() == ["10.0.0.5 dev eth1 router proxy", "2001:db8::5 dev eth0 proxy"]
    assert s.sysctl("net.ipv4.conf.all.proxy_arp") == 1
    assert s.sysctl("net.ipv4.neigh.eth0.proxy_delay") == 0
    assert s.sysctl("net.ipv4.neigh.eth1.proxy_delay") == 80
    assert s.sysctl("net.ipv6.neigh.default.proxy_qlen") == 16
    d = s.dump()
    assert "ip -6 neigh add proxy 2001:db8::5 dev eth0" in d.splitlines()
    assert State().apply(d) == s
    # adding an existing entry again is no error (pneigh_lookup creat: flags set)
    s2 = s.apply("ip neigh replace proxy 10.0.0.5 dev eth1\nip neigh add proxy 10.0.0.5 dev eth1\n")
    assert s2.proxies[("eth1", ipaddress.ip_address("10.0.0.5"))] is False


@pytest.mark.parametrize("line,msg", [
    ("ip neigh add proxy 10.0.0.5 dev nope0", 'Cannot find device "nope0"'),
    ("ip neigh del proxy 10.0.0.7 dev eth0",
     "proxy 10.0.0.7 dev eth0: RTNETLINK answers: No such file or directory"),
    ("ip neigh add proxy 10.0.0.5", "Device and destination are required arguments."),
    ("sysctl -w net.ipv4.conf.nope0.proxy_arp=1",
     "'net.ipv4.conf.nope0.proxy_arp': sysctl: cannot stat "
     "/proc/sys/net/ipv4/conf/nope0/proxy_arp: No such file or directory"),
    ("sysctl -w net.ipv6.conf.eth0.proxy_ndp=2",
     "value 2 out of range for 'net.ipv6.conf.eth0.proxy_ndp' (0..1) (sysctl: setting key: "
     "Invalid argument)"),
    ("sysctl -w net.ipv4.neigh.all.proxy_delay=0",
     "unknown sysctl 'net.ipv4.neigh.all.proxy_delay' (sysctl: cannot stat "
     "/proc/sys/net/ipv4/neigh/all/proxy_delay: No such file or directory)"),
])
def test_config_refusals(line, msg):
    with pytest.raises(ConfigError) as e:
        State().apply(BASE + line + "\n")
    assert e.value.message == msg


def test_proxy_entries_go_with_a_deleted_vrf():
    """pneigh_ifdown: a VRF device's proxy entries go with it."""
    s = State().apply("ip link add vrf-1 type vrf table 10\n"
                      "ip neigh add proxy 10.0.0.5 dev vrf-1\nip link del vrf-1\n")
    assert s.proxies == {}


def test_proxy_arp_decision_in_a_vrf():
    """The route lookup of arp_process from a device enslaved to a VRF is
    the VRF's table (l3mdev): Router.fib_lookup, what the proxy asks."""
    from fastpath import Router
    r = Router().configure(BASE + """\
ip link add vrf-100 type vrf table 100
ip link set dev t1 master vrf-100
ip addr add 10.8.0.1/24 dev t1
ip route add 10.8.0.9/32 vrf vrf-100 dev eth1
ip route add unreachable default metric 4278198272 vrf vrf-100
ip route add 10.9.0.7/32 dev eth1
""")
    assert r.fib_lookup(4, "10.8.0.9", "10.8.0.2", "t1") == ("unicast", "eth1")
    assert r.fib_lookup(4, "10.9.0.7", "10.8.0.2", "t1") == ("unreachable", None)
    assert r.fib_lookup(4, "10.9.0.7", "10.8.0.2", "eth0") == ("unicast", "eth1")
    assert r.fib_lookup(4, "10.8.0.1", "10.8.0.2", "t1")[0] == "local"


# ---------------------------------------------------------------------------
# proxy_delay / proxy_qlen on a fake clock (no root): pneigh_enqueue
class _FakeProxy:
    def __init__(self, delay=0.8, qlen=64):
        self.d, self.q = delay, qlen

    def arp(self, ifindex, sip, tip):
        return tip == bytes([10, 5, 0, 3])

    def ndp(self, ifindex, target):
        return None

    def ip6_forward(self, ifindex, daddr):
        return False

    def delay(self, family, ifindex):
        return self.d

    def qlen(self, family, ifindex):
        return self.q


def _neigh(proxy):
    import random
    from fastpath.wire import neigh as nb
    t = [100.0]
    sent = []
    link = nb.Link("eth0", 2, bytes.fromhex("020000000001"),
                   [ipaddress.IPv4Interface("10.1.0.1/24")], [])
    n = nb.Neighbours([link], lambda i, f: sent.append(f), lambda: t[0], proxy=proxy,
                      local4=[bytes([10, 1, 0, 1])], rng=random.Random(7))
    return n, t, sent


def _arp_req(dst, sip_last):
    from fastpath.wire.neigh import arp_frame
    return arp_frame(1, dst, bytes.fromhex("0a0000000002"), bytes([10, 5, 0, sip_last]),
                     bytes(6), bytes([10, 5, 0, 3]))


def test_proxy_delay_broadcast_waits_unicast_does_not():
    """A broadcast request waits a random time below proxy_delay (0.8 s),
    one to our MAC (PACKET_HOST) or with proxy_delay 0 is answered at once."""
    n, t, sent = _neigh(_FakeProxy())
    n.input(2, _arp_req(b"\xff" * 6, 2))
    assert sent == [] and n.proxy_queue
    due = n.next_timer()
    assert 100.0 <= due < 100.8
    t[0] = due
    n.tick()
    assert len(sent) == 1 and sent[0][20:22] == b"\0\2" and sent[0][28:32] == bytes([10, 5, 0, 3])
    n.input(2, _arp_req(bytes.fromhex("020000000001"), 2))
    assert len(sent) == 2
    n0, _t0, sent0 = _neigh(_FakeProxy(delay=0))
    n0.input(2, _arp_req(b"\xff" * 6, 2))
    assert len(sent0) == 1


def test_proxy_qlen_drops_beyond_the_queue():
    """pneigh_enqueue drops while the queue holds more than proxy_qlen."""
    n, t, sent = _neigh(_FakeProxy(qlen=2))
    for k in range(5):
        n.input(2, _arp_req(b"\xff" * 6, 10 + k))
    assert len(n.proxy_queue) == 3 and n.counters["proxy_qlen_drop"] == 2
    t[0] += 1
    n.tick()
    assert len(sent) == 3 and not n.proxy_queue

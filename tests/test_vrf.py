"""VRF devices (drivers/net/vrf.c, net/l3mdev, net/core/fib_rules.c's
l3mdev rules, seg6_local.c's end_dt_vrf_core).  This machine's kernel has
no VRF module, so the expectations are computed by hand (scapy) from the
kernel's design:

* ``ip link add NAME type vrf table T`` adds ``pref 1000 l3mdev`` for both
  families, once per namespace (vrf_add_fib_rules);
* a lookup from a VRF device or a device enslaved to one is the VRF's
  (vrf_l3_rcv makes the VRF the packet's device; l3mdev_update_flow): the
  l3mdev rule looks up T, a miss goes on to the next rule (hence the
  ``unreachable default metric 4278198272`` users add to T);
* the automatic routes of an enslaved device's addresses are in T (fib_magic,
  addrconf_f6i_alloc, addrconf_prefix_route: l3mdev_fib_table(dev));
* End.DT4/DT6/DT46 ``vrftable T`` hands the decapsulated packet to the VRF
  device bound to T, which looks it up through the rules (drop when none is
  bound while VRF devices exist; with no VRF device at all fastpath keeps its
  table-only behaviour, tests/test_seg6local_vrf.py).

The topology is the kernel's SRv6 L3VPN selftests'
(tools/testing/selftests/net/srv6_end_dt46_l3vpn_test.sh) reduced to one
router, rt-1: two tenants with the same prefixes (cafe::/64, 10.0.0.0/24)
in vrf-100 and vrf-200, the SRv6 network on veth0 towards rt-2 (fd00::2).
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import ICMPv6DestUnreach, IPv6, IPv6ExtHdrSegmentRouting

from fastpath import Batch, Router
from fastpath.config import ConfigError, Rule, State
from fastpath.tables import compile_tables

import ipaddress

SID_12_100, SID_34_200 = "fc00:12:100::6046", "fc00:34:200::6046"     # rt-1 -> rt-2
SID_21_100, SID_43_200 = "fc00:21:100::6046", "fc00:43:200::6046"     # rt-2 -> rt-1 (End.DT46)

L3VPN = f"""
sysctl -w net.ipv4.ip_forward=1
sysctl -w net.ipv6.conf.all.forwarding=1
ip -6 addr add fd00::1/64 dev veth0 nodad
ip link set veth0 up
ip link add vrf-100 type vrf table 100
ip link set vrf-100 up
ip link set veth-t100 master vrf-100
ip -6 addr add cafe::254/64 dev veth-t100 nodad
ip addr add 10.0.0.254/24 dev veth-t100
ip link set veth-t100 up
ip link add vrf-200 type vrf table 200
ip link set vrf-200 up
ip link set veth-t200 master vrf-200
ip -6 addr add cafe::254/64 dev veth-t200 nodad
ip addr add 10.0.0.254/24 dev veth-t200
ip link set veth-t200 up
sysctl -w net.vrf.strict_mode=1
ip -6 route add cafe::2/128 vrf vrf-100 encap seg6 mode encap segs {SID_12_100} dev veth0
ip -4 route add 10.0.0.2/32 vrf vrf-100 encap seg6 mode encap segs {SID_12_100} dev veth0
ip -6 route add {SID_12_100}/128 vrf vrf-100 via fd00::2 dev veth0
ip -6 route add cafe::4/128 vrf vrf-200 encap seg6 mode encap segs {SID_34_200} dev veth0
ip -4 route add 10.0.0.4/32 vrf vrf-200 encap seg6 mode encap segs {SID_34_200} dev veth0
ip -6 route add {SID_34_200}/128 vrf vrf-200 via fd00::2 dev veth0
ip -6 route add {SID_21_100}/128 table 90 encap seg6local action End.DT46 vrftable 100 dev vrf-100
ip -6 route add {SID_43_200}/128 table 90 encap seg6local action End.DT46 vrftable 200 dev vrf-200
ip -6 route add fc00:21:100::4/128 table 90 encap seg6local action End.DT4 vrftable 100 dev vrf-100
ip -6 route add fc00:21:100::6/128 table 90 encap seg6local action End.DT6 vrftable 100 dev vrf-100
ip -6 rule add to fc00::/16 lookup 90 prio 999
ip -6 route add unreachable default metric 4278198272 vrf vrf-100
ip -4 route add unreachable default metric 4278198272 vrf vrf-100
ip -4 route add 192.0.2.0/24 via 10.9.0.2 dev veth0
ip -4 addr add 10.9.0.1/24 dev veth0
"""


def l3vpn(extra=""):
    r = Router()
    r.configure(L3VPN + extra)
    return r


def run(r, pkts, iif):
    b = Batch.from_packets([bytes(p) for p in pkts], iif=iif)
    r.process(b)
    return b.results()


def one(r, pkt, iif):
    (x,) = run(r, [pkt], iif)
    return x


def fwd6(p):
    q = IPv6(bytes(p))
    q.hlim -= 1
    return bytes(q)


def fwd4(p):
    q = IP(bytes(p))
    q.ttl -= 1
    del q.chksum
    return bytes(IP(bytes(q)))


def encap(sid, inner, hlim):
    """H.Encaps with one segment: outer from veth0's address, SRH kept."""
    nh = 4 if inner.version == 4 else 41
    return bytes(IPv6(src="fd00::1", dst=sid, hlim=hlim, nh=43) / IPv6ExtHdrSegmentRouting(
        nh=nh, addresses=[sid], segleft=0, lastentry=0) / inner)


# ---------------------------------------------------------------------------
# the l3mdev rule
def test_l3mdev_rule_added_once_with_the_first_vrf():
    s = State().apply("ip -6 rule add pref 999 to fc00::/16 lookup 90\n"
                      "ip rule add pref 2000 lookup 60")
    assert not any(r.l3mdev for f in (4, 6) for r in s.rules[f])
    s = s.apply("ip link add red type vrf table 10")
    l3 = {4: Rule(4, 1000, table=0, l3mdev=True), 6: Rule(6, 1000, table=0, l3mdev=True)}
    # ordered by preference among the user's and the default rules
    assert [(r.pref, r.l3mdev) for r in s.rules[6]] == [(0, False), (999, False), (1000, True),
                                                         (32766, False)]
    assert [(r.pref, r.l3mdev) for r in s.rules[4]] == [(0, False), (1000, True), (2000, False),
                                                         (32766, False), (32767, False)]
    assert l3[4] in s.rules[4] and l3[6] in s.rules[6]
    # a second VRF adds nothing; the rule is the kernel's 'rule exists'
    s2 = s.apply("ip link add blue type vrf table 20")
    assert s2.rules == s.rules
    with pytest.raises(ConfigError, match=r"line 1: rule pref 1000: RTNETLINK answers: File exists"):
        s.apply("ip rule add pref 1000 l3mdev")
    # deleted, it does not come back with the next VRF (add_fib_rules is spent)
    s3 = s.apply("ip rule del pref 1000 l3mdev\nip -6 rule del pref 1000\n"
                 "ip link add blue type vrf table 20")
    assert not any(r.l3mdev for f in (4, 6) for r in s3.rules[f])
    # and the user adds it back where he wants it
    s4 = s3.apply("ip -6 rule add pref 500 l3mdev")
    assert [(r.pref, r.l3mdev) for r in s4.rules[6]][:3] == [(0, False), (500, True), (999, False)]
    assert "ip -6 rule add pref 500 l3mdev" in s4.dump().splitlines()
    assert "ip -4 rule del pref 1000 l3mdev" in s4.dump().splitlines()


def test_l3mdev_miss_falls_through_to_later_rules():
    """fib_rules_lookup: a miss in the VRF's table (-EAGAIN) goes on to the
    next rule -- vrf-200 has no unreachable default, so its packets to
    192.0.2.0/24 leak into main; vrf-100's hit its unreachable default."""
    r = l3vpn()
    p = IP(src="10.0.0.3", dst="192.0.2.9", ttl=9) / UDP()
    x = one(r, p, "veth-t200")
    assert (x.verdict, x.oif, x.nexthop, x.data) == ("forward", "veth0", "10.9.0.2", fwd4(p))
    x = one(r, IP(src="10.0.0.1", dst="192.0.2.9", ttl=9) / UDP(), "veth-t100")
    assert x.verdict == "icmp" and x.oif == "veth-t100"
    err = IP(x.data)
    # ip_error: host unreachable (RTN_UNREACHABLE), from the VRF's address, routed in table 100
    assert (err[ICMP].type, err[ICMP].code, err.src, err.dst) == (3, 1, "10.0.0.254", "10.0.0.1")
    # a user rule before 1000 is consulted first, one after it only on a miss
    r2 = l3vpn("ip rule add pref 900 iif vrf-100 lookup 70\n"
               "ip route add 192.0.2.0/24 dev veth0 table 70\n"
               "ip rule add pref 1100 lookup 71\nip route add 198.51.100.0/24 dev veth0 table 71\n")
    x = one(r2, IP(src="10.0.0.1", dst="192.0.2.9", ttl=9) / UDP(), "veth-t100")
    assert (x.verdict, x.oif, x.nexthop) == ("forward", "veth0", "192.0.2.9")
    # (iif vrf-100 matches a packet received on its slave: the VRF is its device)
    x = one(r2, IP(src="10.0.0.3", dst="198.51.100.7", ttl=9) / UDP(), "veth-t200")
    assert (x.verdict, x.oif) == ("forward", "veth0")
    x = one(r2, IP(src="10.0.0.1", dst="198.51.100.7", ttl=9) / UDP(), "veth-t100")
    assert x.verdict == "icmp"          # table 100's unreachable default comes first


# ---------------------------------------------------------------------------
# the L3VPN: encapsulation from an enslaved device's input
def test_encap_from_the_tenants_devices():
    r = l3vpn()
    for iif, host, sid in (("veth-t100", "2", SID_12_100), ("veth-t200", "4", SID_34_200)):
        in6 = IPv6(src="cafe::" + ("1" if host == "2" else "3"), dst="cafe::" + host, hlim=64) / \
            UDP(sport=7, dport=9) / b"l3vpn"
        x = one(r, in6, iif)
        # the outer hop limit is the inner's, decremented by ip6_forward on veth0
        assert (x.verdict, x.oif, x.nexthop) == ("forward", "veth0", "fd00::2")
        assert x.data == encap(sid, in6, 63)
        in4 = IP(src="10.0.0." + ("1" if host == "2" else "3"), dst="10.0.0." + host, ttl=64, id=3) / \
            UDP(sport=7, dport=9) / b"l3vpn"
        x = one(r, in4, iif)
        assert (x.verdict, x.oif, x.nexthop) == ("forward", "veth0", "fd00::2")
        assert x.data == encap(sid, IP(bytes(in4)), 63)      # the inner TTL kept (not forwarded)


def test_tenants_are_isolated():
    r = l3vpn()
    # tenant 200's packet to tenant 100's remote host: table 200 says cafe::/64 on veth-t200
    p = IPv6(src="cafe::3", dst="cafe::2", hlim=9) / UDP()
    x = one(r, p, "veth-t200")
    assert (x.verdict, x.oif, x.nexthop, x.data) == ("forward", "veth-t200", "cafe::2", fwd6(p))
    # the default VRF knows neither tenant: no route in main
    x = one(r, IPv6(src="fd00::2", dst="cafe::2") / UDP(), "veth0")
    assert x.verdict == "icmp" and IPv6(x.data)[ICMPv6DestUnreach].code == 0


# ---------------------------------------------------------------------------
# End.DT4 / DT6 / DT46 into each VRF
def outer(sid, inner):
    return IPv6(src="fd00::2", dst=sid, nh=4 if inner.version == 4 else 41, hlim=60) / inner


@pytest.mark.parametrize("sid", [SID_21_100, "fc00:21:100::6"])
def test_dt6_and_dt46_deliver_into_the_vrf(sid):
    r = l3vpn()
    in6 = IPv6(src="cafe::2", dst="cafe::1", hlim=9) / UDP() / b"in"
    x = one(r, outer(sid, in6), "veth0")
    assert (x.verdict, x.oif, x.nexthop, x.data) == ("forward", "veth-t100", "cafe::1", fwd6(in6))
    # the VRF's local addresses are local (table 100's local route)
    x = one(r, outer(sid, IPv6(src="cafe::2", dst="cafe::254") / UDP()), "veth0")
    assert x.verdict == "local"
    # a miss in table 100 meets its unreachable default: ICMPv6 no route (code 0)
    # routed in the VRF to the (tenant's, connected) source, from the address
    # of the device the outer packet came in on (icmp6_send's parm->iif is
    # still veth0's: observed on Linux 6.12, tests/test_kernel_vrf.py)
    x = one(r, outer(sid, IPv6(src="cafe::77", dst="cafe:1::9", hlim=9) / UDP()), "veth0")
    assert (x.verdict, x.oif) == ("icmp", "veth-t100")
    e = IPv6(x.data)
    assert (e[ICMPv6DestUnreach].type, e[ICMPv6DestUnreach].code, e.src, e.dst) == \
        (1, 0, "fd00::1", "cafe::77")


def test_dt46_second_tenant_same_prefixes():
    r = l3vpn()
    in6 = IPv6(src="cafe::4", dst="cafe::3", hlim=9) / UDP()
    x = one(r, outer(SID_43_200, in6), "veth0")
    assert (x.verdict, x.oif, x.nexthop, x.data) == ("forward", "veth-t200", "cafe::3", fwd6(in6))
    in4 = IP(src="10.0.0.4", dst="10.0.0.3", ttl=9) / UDP()
    x = one(r, outer(SID_43_200, in4), "veth0")
    assert (x.verdict, x.oif, x.nexthop, x.data) == ("forward", "veth-t200", "10.0.0.3", fwd4(in4))
    # vrf-200 has no unreachable default: a miss goes on to main (192.0.2.0/24)
    x = one(r, outer(SID_43_200, IP(src="10.0.0.4", dst="192.0.2.1", ttl=9) / UDP()), "veth0")
    assert (x.verdict, x.oif, x.nexthop) == ("forward", "veth0", "10.9.0.2")


@pytest.mark.parametrize("sid", [SID_21_100, "fc00:21:100::4"])
def test_dt4_and_dt46_ipv4_into_the_vrf(sid):
    r = l3vpn()
    in4 = IP(src="10.0.0.2", dst="10.0.0.1", ttl=9, id=5) / UDP() / b"in"
    x = one(r, outer(sid, in4), "veth0")
    assert (x.verdict, x.oif, x.nexthop, x.data) == ("forward", "veth-t100", "10.0.0.1", fwd4(in4))
    x = one(r, outer(sid, IP(src="10.0.0.2", dst="10.0.0.254") / UDP()), "veth0")
    assert x.verdict == "local"
    # the default VRF's address: the local table (pref 0) comes before the
    # l3mdev rule, so it is local from the VRF too ...
    leak = outer(sid, IP(src="10.0.0.2", dst="10.9.0.1") / UDP())
    assert one(r, leak, "veth0").verdict == "local"
    # ... unless the local rule moves after it, as Documentation/networking/vrf.rst says
    r.configure("ip -4 rule add pref 32765 table local\nip -4 rule del pref 0\n")
    x = one(r, leak, "veth0")
    assert x.verdict == "icmp"          # table 100's unreachable default
    assert r.counters()["reasons"].get("no_vrf", 0) == 0


def test_vrftable_without_a_bound_vrf_drops():
    # added while no VRF device existed (fastpath's table-only vrftable) ...
    pre = ("ip -6 addr add fd00::1/64 dev veth0\nip route add 10.5.0.0/16 dev veth0 table 300\n"
           "ip -6 route add fc00::300/128 encap seg6local action End.DT4 vrftable 300 dev veth0\n")
    r = Router()
    r.configure(pre)
    p = outer("fc00::300", IP(src="10.0.0.2", dst="10.5.0.1", ttl=9) / UDP())
    assert one(r, p, "veth0").verdict == "forward"          # no VRF device at all: as before
    # ... then VRF devices exist, none bound to 300: end_dt_get_vrf_rcu finds none
    r.configure("ip link add vrf-100 type vrf table 100\n")
    x = one(r, p, "veth0")
    assert (x.verdict, x.reason) == ("drop", "no_vrf")
    r.configure("ip link add vrf-300 type vrf table 300\n")
    x = one(r, p, "veth0")
    assert (x.verdict, x.oif, x.nexthop) == ("forward", "veth0", "10.5.0.1")
    # the VRF deleted: dropped again (the other VRF remains)
    r.configure("ip link del vrf-300\n")
    assert one(r, p, "veth0").reason == "no_vrf"
    assert r.state.routes.get((4, 300, ipaddress.ip_network("10.5.0.0/16"), 0)) is not None


# ---------------------------------------------------------------------------
# addresses of enslaved devices
def test_local_delivery_of_an_enslaved_devices_address():
    r = l3vpn()
    x = one(r, IPv6(src="cafe::1", dst="cafe::254") / UDP(), "veth-t100")
    assert x.verdict == "local"
    x = one(r, IP(src="10.0.0.1", dst="10.0.0.254") / UDP(), "veth-t200")
    assert x.verdict == "local"
    # not local in the main/local tables: from the default VRF, no route
    x = one(r, IPv6(src="fd00::2", dst="cafe::254") / UDP(), "veth0")
    assert x.verdict == "icmp" and IPv6(x.data)[ICMPv6DestUnreach].code == 0
    x = one(r, IP(src="10.9.0.2", dst="10.0.0.254", ttl=9) / UDP(), "veth0")
    assert x.verdict == "icmp" and IP(x.data)[ICMP].type == 3
    N = ipaddress.ip_network
    rt = r.state.routes
    assert rt[(6, 100, N("cafe::254/128"), 0)].type == "local"
    assert rt[(6, 100, N("cafe::/64"), 256)].dev == "veth-t100"
    assert rt[(4, 200, N("10.0.0.254/32"), 0)].type == "local"
    assert rt[(4, 200, N("10.0.0.255/32"), 0)].type == "broadcast"
    assert (6, 255, N("cafe::254/128"), 0) not in rt and (4, 255, N("10.0.0.254/32"), 0) not in rt
    assert (6, 254, N("cafe::/64"), 256) not in rt and (4, 254, N("10.0.0.0/24"), 0) not in rt


def test_master_and_nomaster_move_the_automatic_routes():
    N = ipaddress.ip_network
    r = Router()
    # (keep_addr_on_down: each move cycles eth5, which would flush its IPv6
    # addresses; test_enslaving_flushes_the_ipv6_addresses)
    r.configure("sysctl -w net.ipv6.conf.all.keep_addr_on_down=1\n"
                "ip -6 addr add 2001:db8:5::1/64 dev eth5\nip addr add 10.5.0.1/24 dev eth5\n"
                "ip -6 addr add 2001:db8:9::1/64 dev eth9\n"
                "ip link add red type vrf table 10\nip link add blue type vrf table 20\n")
    p6 = IPv6(src="2001:db8:5::2", dst="2001:db8:5::1") / UDP()

    def where():
        return sorted({k[1] for k, x in r.state.routes.items() if x.dev == "eth5" and k[2].version == 4 or x.dev == "eth5" and not k[2].is_multicast})
    assert where() == [254, 255]
    assert one(r, p6, "eth5").verdict == "local"
    r.configure("ip link set dev eth5 master red")
    assert where() == [10]
    assert r.state.routes[(4, 10, N("10.5.0.0/24"), 0)].src == ipaddress.ip_address("10.5.0.1")
    assert one(r, p6, "eth5").verdict == "local"                 # table 10's local route now
    assert one(r, IPv6(src="2001:db8:9::2", dst="2001:db8:5::1") / UDP(), "eth9").verdict == "icmp"
    r.configure("ip link set eth5 master blue")                   # moved from red to blue
    assert where() == [20]
    r.configure("ip link set eth5 nomaster")
    assert where() == [254, 255]
    assert one(r, IPv6(src="2001:db8:9::2", dst="2001:db8:5::1") / UDP(), "eth9").verdict == "local"
    # a device set down and up in a VRF keeps its routes there
    r.configure("ip link set eth5 master red\nip link set eth5 down\nip link set eth5 up")
    assert where() == [10]
    # deleting the VRF releases its devices
    r.configure("ip link del red")
    assert where() == [254, 255] and "red" not in r.state.interfaces


@pytest.mark.parametrize("keep", [None, "all", "dev", "all-off"])
def test_enslaving_flushes_the_ipv6_addresses(keep):
    """vrf_add_slave / vrf_del_slave cycle an up device (cycle_netdev), and
    addrconf_ifdown flushes its IPv6 addresses unless keep_addr_on_down
    (all's when non-zero, else the device's) is positive; IPv4 ones stay.
    Observed on Linux 6.12: tests/test_kernel_vrf.py."""
    sysctl = {None: "", "all": "sysctl -w net.ipv6.conf.all.keep_addr_on_down=1\n",
              "dev": "sysctl -w net.ipv6.conf.eth5.keep_addr_on_down=1\n",
              "all-off": "sysctl -w net.ipv6.conf.all.keep_addr_on_down=-1\n"
                         "sysctl -w net.ipv6.conf.eth5.keep_addr_on_down=1\n"}[keep]
    r = Router().configure("ip -6 addr add 2001:db8:5::1/64 dev eth5\nip addr add 10.5.0.1/24 dev eth5\n"
                           "ip link add red type vrf table 10\n" + sysctl)
    r.configure("ip link set eth5 master red")
    kept = keep in ("all", "dev")
    assert [a.version for a in r.state.interfaces["eth5"].addrs] == ([6, 4] if kept else [4])
    assert ((6, 10, ipaddress.ip_network("2001:db8:5::/64"), 256) in r.state.routes) == kept
    # a device that is down is not cycled: it keeps them
    r = Router().configure("ip -6 addr add 2001:db8:5::1/64 dev eth5\nip link set eth5 down\n"
                           "ip link add red type vrf table 10\nip link set eth5 master red\n")
    assert [a.version for a in r.state.interfaces["eth5"].addrs] == [6]


def test_routes_and_neighbours_in_a_vrf():
    r = l3vpn("ip -6 route add 2001:db8:77::/48 via cafe::9 vrf vrf-100\n"
              "ip -6 neigh add cafe::9 lladdr 02:00:00:00:00:09 dev veth-t100\n")
    N = ipaddress.ip_network
    assert (6, 100, N("2001:db8:77::/48"), 1024) in r.state.routes
    p = IPv6(src="cafe::1", dst="2001:db8:77::1", hlim=5) / UDP()
    x = one(r, p, "veth-t100")
    assert (x.verdict, x.oif, x.nexthop, x.data) == ("forward", "veth-t100", "cafe::9", fwd6(p))
    r.configure("ip -6 route del 2001:db8:77::/48 vrf vrf-100")
    assert (6, 100, N("2001:db8:77::/48"), 1024) not in r.state.routes
    assert ("veth-t100", ipaddress.ip_address("cafe::9")) in r.state.neighbours


# ---------------------------------------------------------------------------
# refusals
REFUSED = [
    ("ip link add v0 type vrf", "VRF table id is missing"),
    ("ip link add v0 type vrf table 0", "Invalid VRF table id"),
    ("ip link add v0 type vrf table 100", "Table is used by another VRF"),
    ("ip link set lo master vrf-100", "Can not enslave loopback device to a VRF"),
    ("ip link set vrf-200 master vrf-100", "Can not enslave an L3 master device to a VRF"),
    ("ip link set veth0 master veth-t100", "Operation not supported"),
    ("ip link set veth0 master nope", 'Device "nope" does not exist.'),
    ("ip route add 10.1.0.0/16 dev veth0 vrf veth0", "Invalid VRF"),
    ("ip route add 10.1.0.0/16 dev veth0 vrf nope", "Invalid VRF"),
    ("ip rule add l3mdev table 10", "l3mdev and table are mutually exclusive"),
    ("ip rule add pref 1000 l3mdev", "File exists"),
    ("ip -6 route add fc00::9/128 encap seg6local action End.DT4 vrftable 300 dev veth0",
     "Table has no associated VRF device"),
    ("sysctl -w net.vrf.strict_mode=0\n"
     "ip -6 route add fc00::9/128 encap seg6local action End.DT46 vrftable 100 dev veth0",
     "Strict mode for VRF is disabled"),
    ("sysctl -w net.vrf.strict_mode=0\nip link add v0 type vrf table 100\n"
     "sysctl -w net.vrf.strict_mode=1", "Device or resource busy"),
    ("ip link del veth0", "not supported"),
    ("ip link del nope", 'Cannot find device "nope"'),
]


@pytest.mark.parametrize("lines, msg", REFUSED, ids=[x[0][:48] for x in REFUSED])
def test_refusals_name_the_line_and_change_nothing(lines, msg):
    r = l3vpn()
    before = r.dump()
    text = "ip link set veth0 mtu 1400\n" + lines + "\n"
    with pytest.raises(ConfigError) as ei:
        r.configure(text)
    assert ei.value.line == text.count("\n"), ei.value
    assert msg in ei.value.message, ei.value.message
    assert r.dump() == before


# ---------------------------------------------------------------------------
# dump round trip
def test_dump_round_trip():
    r = l3vpn("ip rule add pref 900 iif vrf-100 lookup 70\nip rule del pref 1000 l3mdev\n"
              "ip link set veth-t200 nomaster\nip link set veth-t200 master vrf-200\n"
              "ip link set vrf-200 mtu 9000\n")
    text = r.dump()
    assert "ip link add vrf-100 type vrf table 100" in text.splitlines()
    assert "ip link set dev veth-t100 master vrf-100" in text.splitlines()
    assert "ip -4 rule del pref 1000 l3mdev" in text.splitlines()
    fresh = Router()
    fresh.configure(text)
    assert fresh.dump() == text
    assert fresh.state == r.state
    # a vrftable route from before the first VRF is written where it is valid
    r2 = Router()
    r2.configure("ip -6 route add fc00::300/128 encap seg6local action End.DT4 vrftable 300 dev eth0\n"
                 "ip link add vrf-1 type vrf table 1\nip link set eth1 master vrf-1\n"
                 "ip addr add 10.1.0.1/24 dev eth1\n")
    t2 = r2.dump()
    fresh = Router()
    fresh.configure(t2)
    assert fresh.dump() == t2 and fresh.state == r2.state


# ---------------------------------------------------------------------------
# incremental updates hold to the whole-state compiler
DEVS = ("e0", "e1", "e2")
VRFS = (("red", 10), ("blue", 20))
BASE = ("".join(f"ip -6 addr add 2001:db8:{k}::1/64 dev e{k}\nip addr add 10.{k}.0.1/24 dev e{k}\n"
                for k in range(3))
        + "".join(f"ip link add {v} type vrf table {t}\n" for v, t in VRFS)
        + "sysctl -w net.vrf.strict_mode=1\n"
        + "ip -6 route add unreachable default metric 4278198272 table 10\n"
        + "ip -6 route add fc00::10/128 encap seg6local action End.DT6 vrftable 10 dev red\n"
        + "ip -6 route add fc00::20/128 encap seg6local action End.DT46 vrftable 20 dev blue\n")


def vrf_step(rng):
    d = rng.choice(DEVS)
    v = rng.choice(VRFS)
    k = int(d[1])
    return rng.choice([
        f"ip link set {d} master {v[0]}", f"ip link set {d} master {v[0]}",
        f"ip link set {d} nomaster", f"ip link set {d} {rng.choice(('up', 'down'))}",
        f"ip -6 addr add 2001:db8:{k}:{rng.randrange(1, 4)}::1/64 dev {d}",
        f"ip -6 addr del 2001:db8:{k}::1/64 dev {d}", f"ip -6 addr add 2001:db8:{k}::1/64 dev {d}",
        f"ip route add 10.{50 + rng.randrange(3)}.0.0/16 via 10.{k}.0.{rng.randrange(2, 5)} dev {d} "
        f"vrf {v[0]}",
        f"ip -6 route add 2001:db8:99:{rng.randrange(3)}::/64 via 2001:db8:{k}::9 dev {d} vrf {v[0]}",
        f"ip rule del pref 1000 l3mdev", "ip -6 rule add pref 1000 l3mdev",
        f"ip link set {v[0]} {rng.choice(('up', 'down'))}",
        f"ip link del {v[0]}", f"ip link add {v[0]} type vrf table {v[1]}",
    ])


def vrf_packets(rng, n):
    out = []
    for _ in range(n):
        iif = rng.choice(DEVS + ("red", "blue"))
        k = rng.randrange(3)
        c = rng.random()
        if c < 0.3:
            p = IPv6(src="2001:db8:7::5", dst=f"2001:db8:{k}:{rng.randrange(4)}::{rng.choice((1, 9))}")
        elif c < 0.5:
            p = IP(src="10.77.0.5", dst=f"10.{rng.choice((k, 50, 51, 52))}.0.{rng.choice((1, 9))}")
        elif c < 0.7:
            p = IPv6(src="2001:db8:7::5", dst=f"2001:db8:99:{rng.randrange(3)}::1")
        else:
            sid = rng.choice(("fc00::10", "fc00::20"))
            inner = (IPv6(src="2001:db8:7::5", dst=f"2001:db8:{k}::{rng.choice((1, 9))}")
                     if rng.random() < 0.5 else IP(src="10.77.0.5", dst=f"10.{k}.0.{rng.choice((1, 9))}"))
            if sid == "fc00::10" and inner.version == 4:
                inner = IPv6(src="2001:db8:7::5", dst=f"2001:db8:{k}::9")
            p = IPv6(src="2001:db8:7::5", dst=sid, nh=4 if inner.version == 4 else 41) / inner
        out.append((bytes(p / UDP() / b"x"), iif))
    return out


def answers(r, pk):
    res = []
    for data, iif in pk:
        if iif not in r.state.interfaces:
            continue
        x = one(r, data, iif)
        res.append((x.verdict, x.oif, bytes(x.data), x.reason, x.nexthop))
    return res


def same_as_from_scratch(r, rng):
    ref = Router()
    ref.state = r.state.copy()
    ref._tables = compile_tables(ref.state)
    ref._load()
    a, b = r._tables, ref._tables
    assert {k: e.sig for k, e in a.entries.items()} == {k: e.sig for k, e in b.entries.items()}
    # the device records with their VRF's table, and the rules, as compiled
    # from scratch (an LPM slot compares as its table; an emptied table the
    # incremental path keeps is no table)
    def table_of(t, fam, slot):
        if slot < 0:
            return None
        tb = t.slots[fam][slot]
        return tb if len(t.lpms[(fam, tb)]) else None

    def devs(t):
        return [(int(d["ifindex"]), int(d["flags"]), int(d["l3mdev"]), int(d["l3table"]),
                 table_of(t, 6, int(d["l3slot6"])), table_of(t, 4, int(d["l3slot4"])))
                for d in t.devs]

    def rules(t, fam):
        return [(int(x["pref"]), int(x["table"]), int(x["action"]), int(x["has_iif"]),
                 int(x["iif"]), -2 if x["slot"] == -2 else table_of(t, fam, int(x["slot"])))
                for x in t.rules[fam]]
    assert devs(a) == devs(b)
    for fam in (4, 6):
        assert rules(a, fam) == rules(b, fam)
    pk = vrf_packets(rng, 40)
    assert answers(r, pk) == answers(ref, pk)


def run_vrf_sequence(seed, steps=25):
    rng = random.Random(seed)
    r = Router()
    r.configure(BASE)
    same_as_from_scratch(r, rng)
    for _ in range(steps):
        text = "\n".join(vrf_step(rng) for _ in range(rng.choice((1, 1, 2, 3)))) + "\n"
        before = r.dump()
        try:
            r.configure(text)
        except (ConfigError, ValueError):
            assert r.dump() == before, text
        same_as_from_scratch(r, rng)
        fresh = Router()
        fresh.configure(r.dump())
        assert fresh.dump() == r.dump()


@pytest.mark.parametrize("seed", [1, 2])
def test_vrf_changes_through_the_delta_path(seed):
    run_vrf_sequence(seed)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32 - 1))
def test_vrf_changes_hypothesis(seed):
    run_vrf_sequence(seed, steps=12)


def test_trace_and_routes_show_name_the_vrf(tmp_path, capsys):
    r = l3vpn()
    t = str(r.trace(bytes(outer(SID_21_100, IPv6(src="cafe::2", dst="cafe::1") / UDP())), iif="veth0"))
    assert "into VRF vrf-100: received by it" in t
    assert "rule pref 1000: l3mdev: lookup table 100 (VRF vrf-100)" in t
    assert "table 100 lookup cafe::1: unicast cafe::/64 table 100 dev veth-t100" in t
    from fastpath import cli
    cfg = tmp_path / "l3vpn.conf"
    cfg.write_text(L3VPN)
    assert cli.main(["routes", "show", "--all", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "# table 100: VRF vrf-100 (the l3mdev rules look it up for vrf-100, veth-t100)" in out
    assert "local cafe::254 dev veth-t100 table 100 proto kernel metric 0" in out


def test_flush_vrf():
    r = l3vpn()
    r.configure("ip -6 route flush vrf vrf-200")
    assert not any(k[0] == 6 and k[1] == 200 for k in r.state.routes)
    assert any(k[0] == 6 and k[1] == 100 for k in r.state.routes)
    with pytest.raises(ConfigError, match="Invalid VRF"):
        r.configure("ip -6 route flush vrf veth0")


def test_icmp_errors_are_routed_in_the_vrf():
    """icmp6_send / icmp_route_lookup: flowi_oif = the packet's VRF, so the
    error to a tenant's host goes back through the tenant's table (main
    has no route to cafe::3 / 10.0.0.3)."""
    r = l3vpn()
    x = one(r, IPv6(src="cafe::3", dst="cafe::9", hlim=1) / UDP(), "veth-t200")
    assert (x.verdict, x.oif, x.reason) == ("icmp", "veth-t200", "hop_limit_exceeded")
    e = IPv6(x.data)
    assert (e.src, e.dst, e.nh, bytes(e.payload)[0]) == ("cafe::254", "cafe::3", 58, 3)
    x = one(r, IP(src="10.0.0.3", dst="10.0.0.9", ttl=1) / UDP(), "veth-t200")
    assert (x.verdict, x.oif) == ("icmp", "veth-t200")
    e = IP(x.data)
    assert (e.src, e.dst, e[ICMP].type) == ("10.0.0.254", "10.0.0.3", 11)


def test_a_vrf_devices_own_address():
    """fib_magic with l3mdev_fib_table(the VRF device): an address on the
    VRF device itself is local in its table (the VRF as the tenant's
    loopback), not in the default VRF."""
    r = l3vpn("ip addr add 192.168.100.1/32 dev vrf-100\n")
    N = ipaddress.ip_network
    assert r.state.routes[(4, 100, N("192.168.100.1/32"), 0)].type == "local"
    assert one(r, IP(src="10.0.0.1", dst="192.168.100.1") / UDP(), "veth-t100").verdict == "local"
    assert one(r, IP(src="10.0.0.3", dst="192.168.100.1") / UDP(), "veth-t200").verdict != "local"
    assert one(r, IP(src="10.9.0.2", dst="192.168.100.1") / UDP(), "veth0").verdict != "local"


def test_ipv4_forwarding_is_the_enslaved_devices():
    """ip_rcv_finish routes with the device the packet came in on, so
    IN_DEV_FORWARD is the enslaved device's, not its VRF's (vrf_ip_rcv has
    made skb->dev the VRF by then; Linux 6.12 was seen doing this:
    tests/test_kernel_vrf_known.py)."""
    p = IP(src="10.0.0.1", dst="10.0.0.9", ttl=9) / UDP()
    r = l3vpn("sysctl -w net.ipv4.conf.vrf-100.forwarding=0\n")
    assert one(r, p, "veth-t100").verdict == "forward"
    r = l3vpn("sysctl -w net.ipv4.conf.veth-t100.forwarding=0\n")
    x = one(r, p, "veth-t100")
    assert (x.verdict, x.reason) == ("drop", "forwarding_disabled")

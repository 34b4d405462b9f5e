"""Destinations that need a strict interface, and the other scope corners.

``ip6_route_input_lookup`` adds RT6_LOOKUP_F_IFACE when ``rt6_need_strict()``
holds for the destination (link-local, multicast or loopback): in every
table only routes through the ingress device match (``rt6_score_route`` gives
the others RT6_NUD_FAIL_HARD), reject routes never do (they live on lo),
and ``fib6_backtrack`` goes on to shorter prefixes of the same table before
the rules move on.  The same lookup serves seg6local's next segments and
nexthops (``seg6_lookup_any_nexthop`` without a table), headends' outer
destinations and SRHs addressed to the node; table lookups (End.T, End.DT6
``table``) are ``ip6_pol_route`` with no oif and stay unrestricted.  An
ICMPv6 error towards a link-local source is looked up on the ingress device
(``icmp6_iif`` as flowi6_oif, strict).

Each scenario states what the kernel does, by hand (checked on every
machine), and is compared byte for byte with the running kernel where a
KernelOracle can run.  The hand-written expectations were confirmed on
Linux 6.18.
"""
from __future__ import annotations

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting

from fastpath import Batch, Router

try:
    from . import kernel_oracle as _ko
    from .kernel_compare import check
    from .test_fib_property import udp_packet
except ImportError:  # pragma: no cover - tests/ as a plain directory on sys.path
    import kernel_oracle as _ko
    from kernel_compare import check
    from test_fib_property import udp_packet

BASE = """
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip -6 addr add 2001:db8:3::1/64 dev tun2
ip -6 route add 2001:db8:c1::/48 via 2001:db8:1::2 dev tun0
ip -6 route add 2001:db8:99::/48 via 2001:db8:1::2 dev tun0
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip route add 10.64.0.0/10 via 10.0.1.2 dev tun0
"""
SRC = {"tun0": "2001:db8:c1::5", "tun1": "2001:db8:2::9", "tun2": "2001:db8:3::9"}
ISSUE_PACKET = bytes.fromhex(     # the report: UDP to a link-local address, hop limit 2
    "6000000000121102" "20010db8009900000000000000000005" "fe8f7ad69f6b16732dd96b620942c3fb"
    "0005000700123ba9" "66666666666666666666")


def srv6(segs, sl, src="2001:db8:c1::5"):
    return bytes(IPv6(src=src, dst=segs[sl], hlim=64)
                 / IPv6ExtHdrSegmentRouting(addresses=segs, segleft=sl)
                 / UDP(sport=1, dport=2) / (b"x" * 8))


END = """
ip -6 route add fc00::1/128 encap seg6local action End dev tun0
ip -6 route add fc00::2/128 encap seg6local action End.X nh6 fe80::2 dev tun0
ip -6 route add fe80::/64 dev tun1
"""

# (name, extra configuration, [(iif, packet, verdict, oif, reason, ICMPv6 code)])
SCENARIOS = [
    ("reject routes never match", """
ip -6 route add prohibit fe8f:7ad6:9f6b:1600::/56
ip -6 route add blackhole fe80::/16
ip -6 route add unreachable fe90::/16
""", [("tun0", ISSUE_PACKET, "icmp", "tun0", "no_route", 0),
      ("tun0", ISSUE_PACKET[:7] + b"\x01" + ISSUE_PACKET[8:], "icmp", "tun0", "no_route", 0),
      ("tun0", udp_packet(SRC["tun0"], "fe80::1"), "icmp", "tun0", "no_route", 0),
      ("tun1", udp_packet(SRC["tun1"], "fe90::1"), "icmp", "tun1", "no_route", 0)]),
    ("a route through another device", """
ip -6 route add fea6:d803:b4a1:3725::/64 dev tun1
""", [("tun0", udp_packet(SRC["tun0"], "fea6:d803:b4a1:3725::5"), "icmp", "tun0", "no_route", 0),
      ("tun1", udp_packet(SRC["tun1"], "fea6:d803:b4a1:3725::5"), "forward", "tun1", None, None)]),
    ("a higher metric through the ingress device", """
ip -6 route add fe80::/64 dev tun1 metric 100
ip -6 route add fe80::/64 dev tun0 metric 200
""", [("tun0", udp_packet(SRC["tun0"], "fe80::5"), "forward", "tun0", None, None),
      ("tun1", udp_packet(SRC["tun1"], "fe80::5"), "forward", "tun1", None, None),
      ("tun2", udp_packet(SRC["tun2"], "fe80::5"), "icmp", "tun2", "no_route", 0)]),
    ("shorter prefixes of the same table first, throw skipped", """
ip -6 route add throw fe80::/16 table 100
ip -6 route add fe80::/10 dev tun0 table 100
ip -6 rule add pref 100 lookup 100
ip -6 route add fe80::/12 dev tun1
""", [("tun0", udp_packet(SRC["tun0"], "fe80::5"), "forward", "tun0", None, None),
      ("tun1", udp_packet(SRC["tun1"], "fe80::5"), "forward", "tun1", None, None)]),
    ("a default route", """
ip -6 route add default dev tun0
""", [("tun0", udp_packet(SRC["tun0"], "fe80::5"), "forward", "tun0", None, None),
      ("tun1", udp_packet(SRC["tun1"], "fe80::5"), "icmp", "tun1", "no_route", 0),
      ("tun1", udp_packet(SRC["tun1"], "2001:db8:77::1"), "forward", "tun0", None, None)]),
    ("the same link-local address on two devices", """
ip -6 addr add fe80::1/64 dev tun0
ip -6 addr add fe80::1/64 dev tun1
""", [("tun0", udp_packet(SRC["tun0"], "fe80::1"), "local", None, None, None),
      ("tun1", udp_packet(SRC["tun1"], "fe80::1"), "local", None, None, None),
      # the address is link scope: the error's source is tun2's own
      ("tun2", udp_packet(SRC["tun2"], "fe80::1"), "icmp", "tun2", "no_route", 0)]),
    ("multipath: the ingress device's nexthop", """
ip -6 route add fe80::/64 nexthop via 2001:db8:1::2 dev tun0 nexthop via 2001:db8:2::2 dev tun1 \
    nexthop via 2001:db8:3::2 dev tun2
""", [("tun1", udp_packet(SRC["tun1"], f"fe80::{k:x}", sport=4000 + k), "forward", "tun1", None, None)
      for k in range(1, 9)]),
    ("End: the next segment on the ingress device", END,
     [("tun0", srv6(["fe80::9", "fc00::1"], 1), "icmp", "tun0", "no_route", 0),
      ("tun1", srv6(["fe80::9", "fc00::1"], 1, SRC["tun1"]), "forward", "tun1", None, None),
      # ::1 is on lo: no route (not End's blackhole for a local route)
      ("tun0", srv6(["::1", "fc00::1"], 1), "icmp", "tun0", "no_route", 0),
      ("tun0", srv6(["ff02::1", "fc00::1"], 1), "drop", None, "multicast", None)]),
    ("End.X: its nexthop on the ingress device", END,
     [("tun0", srv6(["fc00::9", "fc00::2"], 1), "icmp", "tun0", "no_route", 0),
      ("tun1", srv6(["fc00::9", "fc00::2"], 1, SRC["tun1"]), "forward", "tun1", None, None)]),
    ("End.T and End.DT6 look up one table, not strict (ip6_pol_route, oif 0)", """
ip -6 route add fc00::3/128 encap seg6local action End.T table 100 dev tun0
ip -6 route add fc00::4/128 encap seg6local action End.DT6 table 100 dev tun0
ip -6 route add fe80::/64 dev tun1 table 100
ip -6 route add unreachable fe90::/16 table 100
""", [("tun0", srv6(["fe80::9", "fc00::3"], 1), "forward", "tun1", None, None),
      ("tun0", srv6(["fe90::9", "fc00::3"], 1), "icmp", "tun0", "unreachable", 0),
      ("tun0", bytes(IPv6(src=SRC["tun0"], dst="fc00::4") / IPv6(src=SRC["tun0"], dst="fe80::9")
                     / UDP(sport=1, dport=2)), "forward", "tun1", None, None)]),
    ("End.DX6 and End.B6.Encaps look up on the ingress device", """
ip -6 route add fc00::5/128 encap seg6local action End.DX6 nh6 :: dev tun0
ip -6 route add fc00::6/128 encap seg6local action End.B6.Encaps srh segs fe80::77 dev tun0
ip -6 route add fe80::/64 dev tun1
""", [("tun0", bytes(IPv6(src=SRC["tun0"], dst="fc00::5") / IPv6(src=SRC["tun0"], dst="fe80::9")
                     / UDP(sport=1, dport=2)), "icmp", "tun0", "no_route", 0),
      ("tun1", bytes(IPv6(src=SRC["tun1"], dst="fc00::5") / IPv6(src=SRC["tun1"], dst="fe80::9")
                     / UDP(sport=1, dport=2)), "forward", "tun1", None, None),
      ("tun1", srv6(["fc00::9", "fc00::6"], 1, SRC["tun1"]), "forward", "tun1", None, None)]),
    ("a headend's outer destination on the ingress device", """
ip -6 route add 2001:db8:77::/48 encap seg6 mode encap segs fe80::1 dev tun1
ip -6 route add fe80::/64 dev tun1
""", [("tun1", udp_packet(SRC["tun1"], "2001:db8:77::1"), "forward", "tun1", None, None),
      # the error goes to the outer source, ours: nothing leaves
      ("tun0", udp_packet(SRC["tun0"], "2001:db8:77::1"), "drop", None, "no_route", None)]),
    ("an SRH addressed to the node: the next segment on the ingress device", """
sysctl -w net.ipv6.conf.all.seg6_enabled=1
sysctl -w net.ipv6.conf.tun0.seg6_enabled=1
sysctl -w net.ipv6.conf.tun1.seg6_enabled=1
ip -6 route add fe80::/64 dev tun1
""", [("tun0", srv6(["fe80::9", "2001:db8:1::1"], 1), "icmp", "tun0", "no_route", 0),
      ("tun1", srv6(["fe80::9", "2001:db8:2::1"], 1, SRC["tun1"]), "forward", "tun1", None, None)]),
    ("errors to a link-local source go back on the ingress device", """
ip -6 route add 2001:db8:98::/48 via 2001:db8:2::2 dev tun1
ip -6 route add default dev tun1
""", [("tun0", udp_packet("fe80::33", "2001:db8:98::1"), "drop", None, "source_link_local", None)]),
    ("... and are sent where a route through it covers the source", """
ip -6 route add 2001:db8:98::/48 via 2001:db8:2::2 dev tun1
ip -6 route add fe80::/64 dev tun0
""", [("tun0", udp_packet("fe80::33", "2001:db8:98::1"), "icmp", "tun0", "source_link_local", 2),
      ("tun0", udp_packet("fe80::33", "2001:db8:77::1"), "icmp", "tun0", "no_route", 0)]),
    ("the unspecified destination is answered as unroutable", """
ip -6 route add unreachable ::/8
""", [("tun0", udp_packet(SRC["tun0"], "::"), "icmp", "tun0", "daddr_invalid", 0),
      ("tun1", udp_packet(SRC["tun1"], "::"), "icmp", "tun1", "daddr_invalid", 0)]),
    ("... on a multipath route: the nexthop through the ingress device", """
ip -6 route add fe80::/10 nexthop via 2001:db8:1::4 dev tun0 nexthop via 2001:db8:3::3 dev tun2 \
    nexthop via 2001:db8:2::2 dev tun1
ip -6 route add prohibit 2001:db8:a000::/48
""", [("tun2", udp_packet("fe80::2", "2001:db8:a000::1"), "icmp", "tun2", "prohibit", 1),
      ("tun1", udp_packet("fe80::2", "2001:db8:a000::1"), "icmp", "tun1", "prohibit", 1)]),
    ("IPv4 0.0.0.0/8 is unicast but for 0.0.0.0", """
ip route add 0.0.0.0/8 via 10.0.1.2 dev tun0
ip route add default via 10.0.2.2 dev tun1
""", [("tun0", udp_packet("10.64.0.9", "0.1.2.3"), "forward", "tun0", None, None),
      ("tun0", udp_packet("0.0.0.5", "198.18.0.1"), "forward", "tun1", None, None),
      ("tun0", udp_packet("10.64.0.9", "0.0.0.0"), "drop", None, "daddr_invalid", None),
      ("tun0", udp_packet("0.0.0.0", "198.18.0.1"), "drop", None, "saddr_invalid", None)]),
]
IDS = [s[0] for s in SCENARIOS]


def _router(extra):
    r = Router()
    r.configure(BASE + extra)
    return r


@pytest.mark.parametrize("name,extra,cases", SCENARIOS, ids=IDS)
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
def test_scope_expectations(name, extra, cases, fast):
    r = _router(extra)
    r.fast = fast
    for iif, pkt, verdict, oif, reason, code in cases:
        b = Batch.from_packets([pkt], iif=iif)
        r.process(b)
        res = b.results()[0]
        assert (res.verdict, res.oif, res.reason) == (verdict, oif, reason), (iif, pkt.hex())
        if code is not None:
            assert res.data[40:42] == bytes([1 if code != 3 else 3, code]), res.data[:48].hex()


# the scenarios with seg6 / seg6local routes need the kernel's SRv6
_PARAMS = [pytest.param(*sc, marks=pytest.mark.kernel_seg6) if "encap seg6" in sc[1] else sc
           for sc in SCENARIOS]


@pytest.mark.parametrize("name,extra,cases", _PARAMS, ids=IDS)
def test_scope_like_the_kernel(name, extra, cases, kernel_oracle):
    kernel_oracle.configure(BASE + extra)
    r = _router(extra)
    for iif in ("tun0", "tun1", "tun2"):
        pkts = [pkt for i, pkt, *_ in cases if i == iif]
        if pkts:
            check((kernel_oracle, r), pkts, iif=iif)


def test_strict_lookups_are_not_cached_by_destination():
    """The route cache is keyed by destination; a strict destination's route
    depends on the ingress device too, so the same address from two devices
    in one batch gets two answers."""
    r = _router("ip -6 route add fe80::/64 dev tun1\nip -6 route add fe80::/64 dev tun0 metric 2000")
    pkts = [udp_packet(SRC[i], "fe80::7") for i in ("tun0", "tun1", "tun0", "tun1", "tun2")]
    b = Batch.from_packets(pkts, iif=["tun0", "tun1", "tun0", "tun1", "tun2"])
    r.process(b)
    assert [(x.verdict, x.oif) for x in b.results()] == [
        ("forward", "tun0"), ("forward", "tun1"), ("forward", "tun0"), ("forward", "tun1"),
        ("icmp", "tun2")]


def test_strict_rows_follow_configuration_changes():
    """Removing the route the strict lookup used (and adding it back) is seen
    at once; a second device's automatic routes come and go with its
    address."""
    r = _router("ip -6 addr add fe80::1/64 dev tun0\nip -6 addr add fe80::1/64 dev tun1")
    b = lambda iif: Batch.from_packets([udp_packet(SRC[iif], "fe80::5")], iif=iif)

    def run(iif):
        x = b(iif)
        r.process(x)
        return x.results()[0].verdict, x.results()[0].oif
    assert run("tun1") == ("forward", "tun1")
    r.configure("ip -6 addr del fe80::1/64 dev tun1")
    assert run("tun1") == ("icmp", "tun1")
    assert run("tun0") == ("forward", "tun0")
    r.configure("ip -6 addr add fe80::1/64 dev tun1")
    assert run("tun1") == ("forward", "tun1")
    assert not r._tables.retired          # every replaced entry reclaimed (one process)

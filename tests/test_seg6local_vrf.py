"""End.DT4 / End.DT46 / End.DT6 vrftable: the kernel here has no VRF, so these
are checked against expectations computed by hand (scapy) from RFC 8986 and
the kernel's semantics: decapsulate, look the inner destination up in the
vrftable only, forward (hop limit / TTL decremented) or deliver locally."""
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting

from fastpath import Batch, Router

CFG = """
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip addr add 10.0.3.1/24 dev tun2
ip route add 192.0.2.0/24 via 10.0.2.2 dev tun1 table 100
ip route add 192.0.2.0/24 via 10.0.3.2 dev tun2
ip route add local 10.100.0.1/32 dev tun0 table 100
ip route add 198.51.100.0/24 via 10.0.1.2 dev tun0 table 100
ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev tun1 table 100
ip -6 route add fc00:1::4/128 encap seg6local action End.DT4 vrftable 100 count dev tun0
ip -6 route add fc00:1::46/128 encap seg6local action End.DT46 vrftable 100 dev tun0
ip -6 route add fc00:1::6/128 encap seg6local action End.DT6 vrftable 100 dev tun0
"""


def router():
    r = Router()
    r.configure(CFG)
    return r


def outer(sid, inner, srh=False):
    if srh:
        return IPv6(src="2001:db8:1::2", dst=sid) / IPv6ExtHdrSegmentRouting(
            addresses=[sid], segleft=0, lastentry=0) / inner
    return IPv6(src="2001:db8:1::2", dst=sid, nh=4 if inner.version == 4 else 41) / inner


def run(r, pkts):
    b = Batch.from_packets([bytes(p) for p in pkts], iif="tun0")
    r.process(b)
    return b.results()


def forwarded4(inner):
    q = IP(bytes(inner))
    q.ttl -= 1
    del q.chksum
    return bytes(IP(bytes(q)))


def test_dt4_looks_up_the_vrftable_only():
    r = router()
    in4 = IP(src="198.51.100.7", dst="192.0.2.5", ttl=9, id=1) / UDP() / b"vrf"
    res = run(r, [outer("fc00:1::4", in4), outer("fc00:1::4", in4, srh=True), outer("fc00:1::46", in4)])
    for x in res:
        # table 100 says tun1 (main would have said tun2)
        assert (x.verdict, x.oif, x.nexthop) == ("forward", "tun1", "10.0.2.2")
        assert x.data == forwarded4(in4)
    # counters: the two packets that hit End.DT4, bytes as they arrived
    assert r.counters()["routes"]["fc00:1::4/128 table 254"] == {
        "packets": 2, "errors": 0,
        "bytes": len(bytes(outer("fc00:1::4", in4))) + len(bytes(outer("fc00:1::4", in4, srh=True)))}


def test_dt4_local_route_of_the_table_delivers():
    r = router()
    (x,) = run(r, [outer("fc00:1::4", IP(src="198.51.100.7", dst="10.100.0.1") / UDP())])
    assert x.verdict == "local"


def test_dt4_miss_in_the_vrftable_is_unreachable():
    r = router()
    in4 = IP(src="198.51.100.7", dst="203.0.113.9", ttl=9) / UDP()
    (x,) = run(r, [outer("fc00:1::4", in4)])
    # ip_error: ICMP net unreachable back to the inner source, routed in the
    # node's own tables (198.51.100.0/24 is only in table 100: no route back)
    assert (x.verdict, x.reason) == ("drop", "no_route")


def test_dt4_errors_and_bad_inner():
    r = router()
    res = run(r, [outer("fc00:1::4", IP(src="10.0.1.2", dst="192.0.2.5", ttl=1) / UDP()),
                  outer("fc00:1::4", IPv6(src="2001:db8:77::1", dst="2001:db8:99::1") / UDP()),
                  IPv6(src="2001:db8:1::2", dst="fc00:1::4") / IPv6ExtHdrSegmentRouting(
                      addresses=["fc00:1::4", "fc00:9::1"], segleft=1, lastentry=1) / IP() / UDP()])
    assert res[0].verdict == "icmp" and IP(res[0].data)[ICMP].type == 11
    assert (res[1].verdict, res[1].reason) == ("drop", "inner_missing")
    assert (res[2].verdict, res[2].reason) == ("drop", "srh_sl_nonzero")


def test_dt46_and_dt6_vrftable_ipv6():
    r = router()
    in6 = IPv6(src="2001:db8:77::1", dst="2001:db8:99::5", hlim=9) / UDP() / b"v6"
    for sid in ("fc00:1::46", "fc00:1::6"):
        (x,) = run(r, [outer(sid, in6)])
        q = IPv6(bytes(in6))
        q.hlim = 8
        assert (x.verdict, x.oif, x.nexthop, x.data) == ("forward", "tun1", "2001:db8:2::2", bytes(q))
    (x,) = run(r, [outer("fc00:1::46", IPv6(src="2001:db8:77::1", dst="2001:db8:55::5") / UDP())])
    assert (x.verdict, x.reason) == ("drop", "no_route")

"""Router.process end to end: input checks, lookups, forwarding, ICMP errors,
and bad input of every shape (no exception, no read outside the packet)."""
import ipaddress

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from scapy.layers.inet import ICMP, IP, UDP, IPerror
from scapy.layers.inet6 import (ICMPv6DestUnreach, ICMPv6PacketTooBig, ICMPv6TimeExceeded,
                                IPv6, IPv6ExtHdrHopByHop, IPerror6)
from scapy.layers.l2 import Dot1Q, Ether

from fastpath import Batch, Router

NET = """
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev tun1
ip route add 192.0.2.0/24 via 10.0.2.2 dev tun1
"""


@pytest.fixture
def router():
    r = Router()
    r.configure(NET)
    return r


def run(r, pkts, iif="tun0", **kw):
    b = Batch.from_packets([bytes(p) for p in pkts], iif=iif, **kw)
    r.process(b)
    return b.results()


def udp6(dst, src="2001:db8:1::2", hlim=64, payload=b"x" * 8):
    return IPv6(src=src, dst=dst, hlim=hlim) / UDP(sport=1000, dport=2000) / payload


def udp4(dst, src="10.0.1.2", ttl=64, payload=b"x" * 8, flags="DF"):
    return IP(src=src, dst=dst, ttl=ttl, flags=flags, id=1) / UDP(sport=1000, dport=2000) / payload


# --- no routes at all -----------------------------------------------------------

def test_empty_router_drops_everything_with_no_route():
    r = Router()
    b = Batch.from_packets([bytes(udp6("2001:db8::1")), bytes(udp4("192.0.2.1"))], iif="lo")
    r.process(b)
    res = b.results()
    assert [x.verdict for x in res] == ["drop", "drop"]
    assert [x.reason for x in res] == ["no_route", "no_route"]


def test_unroutable_gets_icmp_unreachable_when_source_reachable(router):
    p = udp6("2001:db8:77::1")
    (res,) = run(router, [p])
    assert res.verdict == "icmp" and res.oif == "tun0" and res.reason == "no_route"
    e = IPv6(res.data)
    assert e.src == "2001:db8:1::1" and e.dst == "2001:db8:1::2" and e.hlim == 64
    assert e[ICMPv6DestUnreach].code == 0
    assert bytes(e[IPerror6]) == bytes(p)
    # checksum as scapy computes it
    e2 = IPv6(res.data)
    del e2[ICMPv6DestUnreach].cksum
    assert bytes(IPv6(bytes(e2))) == res.data

    p4 = udp4("198.51.100.1")
    (res4,) = run(router, [p4])
    assert res4.verdict == "icmp" and res4.oif == "tun0" and res4.reason == "no_route"
    e4 = IP(res4.data)
    assert (e4.src, e4.dst, e4.ttl, e4.tos, e4.flags.value) == ("10.0.1.1", "10.0.1.2", 64, 0xC0, 0)
    assert e4[ICMP].type == 3 and e4[ICMP].code == 0
    assert bytes(e4[IPerror]) == bytes(p4)
    e4b = IP(res4.data)
    del e4b.chksum
    del e4b[ICMP].chksum
    assert bytes(IP(bytes(e4b))) == res4.data


def test_unroutable_with_unreachable_source_is_dropped(router):
    (res,) = run(router, [udp6("2001:db8:77::1", src="2001:db8:55::1")])
    assert (res.verdict, res.reason) == ("drop", "no_route")


# --- forwarding -----------------------------------------------------------------

def test_forward_ipv6_decrements_hop_limit(router):
    p = udp6("2001:db8:99::5", hlim=64)
    (res,) = run(router, [p])
    assert (res.verdict, res.oif, res.nexthop) == ("forward", "tun1", "2001:db8:2::2")
    q = p.copy()
    q.hlim = 63
    assert res.data == bytes(q)


def test_forward_ipv4_decrements_ttl_with_kernel_checksum(router):
    p = udp4("192.0.2.7", ttl=64)
    (res,) = run(router, [p])
    assert (res.verdict, res.oif, res.nexthop) == ("forward", "tun1", "10.0.2.2")
    q = IP(bytes(p))
    q.ttl = 63
    del q.chksum
    assert res.data == bytes(IP(bytes(q)))


def test_ipv4_ttl_decrement_checksum_edge():
    # ip_decrease_ttl on a header whose checksum is 0xFEFF..0xFFFF
    r = Router()
    r.configure(NET)
    for ttl in range(2, 256, 7):
        for ident in range(0, 65536, 4099):
            p = IP(src="10.0.1.2", dst="192.0.2.9", ttl=ttl, id=ident) / UDP() / b"ab"
            (res,) = run(r, [p])
            q = IP(bytes(p))
            q.ttl -= 1
            del q.chksum
            assert IP(res.data).chksum == IP(bytes(q)).chksum or \
                {IP(res.data).chksum, IP(bytes(q)).chksum} == {0, 0xFFFF}


def test_trailing_bytes_are_trimmed_to_ip_length(router):
    p = bytes(udp6("2001:db8:99::5")) + b"\xAA" * 10
    (res,) = run(router, [p])
    assert res.verdict == "forward" and len(res.data) == len(p) - 10
    p4 = bytes(udp4("192.0.2.7")) + b"\xAA" * 10
    (res,) = run(router, [p4])
    assert res.verdict == "forward" and len(res.data) == len(p4) - 10


@pytest.mark.parametrize("hlim", [0, 1])
def test_hop_limit_exceeded(router, hlim):
    p = udp6("2001:db8:99::5", hlim=hlim)
    (res,) = run(router, [p])
    assert (res.verdict, res.reason, res.oif) == ("icmp", "hop_limit_exceeded", "tun0")
    e = IPv6(res.data)
    assert e[ICMPv6TimeExceeded].code == 0 and bytes(e[IPerror6]) == bytes(p)
    p4 = udp4("192.0.2.7", ttl=hlim)
    (res,) = run(router, [p4])
    assert (res.verdict, res.reason) == ("icmp", "hop_limit_exceeded")
    assert IP(res.data)[ICMP].type == 11


def test_hop_limit_2_forwards(router):
    (res,) = run(router, [udp6("2001:db8:99::5", hlim=2)])
    assert res.verdict == "forward" and IPv6(res.data).hlim == 1


def test_packet_too_big_and_frag_needed():
    r = Router()
    r.configure(NET + "ip link set tun1 mtu 1280\n")
    p = udp6("2001:db8:99::5", payload=b"z" * 1300)
    (res,) = run(r, [p])
    assert (res.verdict, res.reason, res.oif) == ("icmp", "pkt_too_big", "tun0")
    e = IPv6(res.data)
    assert e[ICMPv6PacketTooBig].mtu == 1280
    assert len(res.data) == 1280     # payload truncated to the minimum MTU
    assert bytes(e[IPerror6])[:100] == bytes(p)[:100]
    p4 = udp4("192.0.2.7", payload=b"z" * 1300)
    (res,) = run(r, [p4])
    assert (res.verdict, res.reason) == ("icmp", "pkt_too_big")
    e4 = IP(res.data)
    assert e4[ICMP].type == 3 and e4[ICMP].code == 4 and e4[ICMP].nexthopmtu == 1280
    assert len(res.data) == 576


def test_local_delivery(router):
    res = run(router, [udp6("2001:db8:2::1"), udp4("10.0.2.1"), udp6("2001:db8:1::")])
    assert [x.verdict for x in res] == ["local", "local", "local"]


def test_route_types():
    r = Router()
    r.configure(NET + """
ip -6 route add blackhole 2001:db8:a::/48
ip -6 route add prohibit 2001:db8:b::/48
ip -6 route add unreachable 2001:db8:c::/48
ip route add blackhole 198.18.1.0/24
ip route add prohibit 198.18.2.0/24
ip route add unreachable 198.18.3.0/24
""")
    res = run(r, [udp6("2001:db8:a::1"), udp6("2001:db8:b::1"), udp6("2001:db8:c::1")])
    assert [(x.verdict, x.reason) for x in res] == [
        ("drop", "blackhole"), ("icmp", "prohibit"), ("icmp", "unreachable")]
    assert IPv6(res[1].data)[ICMPv6DestUnreach].code == 1
    assert IPv6(res[2].data)[ICMPv6DestUnreach].code == 0
    res = run(r, [udp4("198.18.1.1"), udp4("198.18.2.1"), udp4("198.18.3.1")])
    assert [(x.verdict, x.reason) for x in res] == [
        ("drop", "blackhole"), ("icmp", "prohibit"), ("icmp", "unreachable")]
    assert IP(res[1].data)[ICMP].code == 13
    assert IP(res[2].data)[ICMP].code == 1


def test_rules_and_tables():
    r = Router()
    r.configure(NET + """
ip -6 route add 2001:db8:99::/48 via 2001:db8:1::9 dev tun0 table 100
ip -6 rule add from 2001:db8:1::77 table 100 pref 100
ip -6 route add throw 2001:db8:99:1::/64 table 100
""")
    res = run(r, [udp6("2001:db8:99::5", src="2001:db8:1::77"),
                  udp6("2001:db8:99::5", src="2001:db8:1::78"),
                  udp6("2001:db8:99:1::5", src="2001:db8:1::77")])
    assert [(x.verdict, x.oif) for x in res] == [("forward", "tun0"), ("forward", "tun1"),
                                                  ("forward", "tun1")]


def test_ecmp_spreads_and_is_deterministic():
    r = Router()
    r.configure(NET + "ip -6 addr add 2001:db8:3::1/64 dev tun2\n"
                "ip -6 route add 2001:db8:aa::/48 nexthop via 2001:db8:2::2 dev tun1 "
                "nexthop via 2001:db8:3::2 dev tun2\n")
    pkts = [udp6(f"2001:db8:aa::{k:x}") for k in range(1, 200)]
    a = [x.oif for x in run(r, pkts)]
    assert set(a) == {"tun1", "tun2"}
    assert a == [x.oif for x in run(r, pkts)]


def test_forwarding_disabled():
    r = Router()
    r.configure(NET + "sysctl -w net.ipv6.conf.all.forwarding=0\n"
                "sysctl -w net.ipv4.conf.all.forwarding=0\nsysctl -w net.ipv4.conf.tun0.forwarding=0\n")
    res = run(r, [udp6("2001:db8:99::5"), udp4("192.0.2.7")])
    assert [(x.verdict, x.reason) for x in res] == [("drop", "forwarding_disabled")] * 2


# --- bad input --------------------------------------------------------------------

@pytest.mark.parametrize("pkt,reason", [
    (b"", "truncated"),
    (b"\x60", "truncated"),
    (bytes(udp6("2001:db8:99::5"))[:39], "truncated"),
    (bytes(udp6("2001:db8:99::5"))[:50], "truncated"),          # payload length says more
    (b"\x70" + bytes(udp6("2001:db8:99::5"))[1:], "not_ip"),
    (bytes(udp6("::1")), "daddr_invalid"),
    (bytes(udp6("2001:db8:99::5", src="::1")), "saddr_invalid"),
    (bytes(udp6("2001:db8:99::5", src="ff02::1")), "saddr_invalid"),
    (bytes(udp6("ff01::1")), "daddr_invalid"),
    (bytes(udp4("192.0.2.7"))[:19], "truncated"),
    (bytes(udp4("192.0.2.7"))[:30], "truncated"),
    (b"\x44" + bytes(udp4("192.0.2.7"))[1:], "ip_hdr_invalid"),
    (bytes(udp4("192.0.2.7"))[:10] + b"\0\0" + bytes(udp4("192.0.2.7"))[12:], "ip_csum_error"),
    (bytes(udp4("192.0.2.7", src="127.0.0.1")), "saddr_invalid"),
    (bytes(udp4("192.0.2.7", src="224.0.0.1")), "saddr_invalid"),
    (bytes(udp4("127.0.0.1")), "daddr_invalid"),
    (bytes(udp4("192.0.2.7", src="10.0.2.1")), "saddr_invalid"),  # our own address
])
def test_malformed_packets_get_a_reason(router, pkt, reason):
    (res,) = run(router, [pkt])
    assert (res.verdict, res.reason) == ("drop", reason)


def test_hop_by_hop_options(router):
    ok = IPv6(src="2001:db8:1::2", dst="2001:db8:99::5") / IPv6ExtHdrHopByHop(options=[]) / UDP()
    (res,) = run(router, [ok])
    assert res.verdict == "forward"
    # unknown option type 0x3E (action 00: skip) / 0x7E (01: discard) / 0xBE (10: param problem)
    for t, want in ((0x1E, "forward"), (0x7E, "drop"), (0xBE, "icmp")):
        raw = bytearray(bytes(ok))
        hbh = 40
        raw[hbh + 2:hbh + 8] = bytes([t, 4, 0, 0, 0, 0])
        (res,) = run(router, [bytes(raw)])
        assert res.verdict == want, hex(t)


def test_unknown_ingress_interface_is_a_caller_error(router):
    with pytest.raises(ValueError, match="unknown ingress interface 'nope'"):
        run(router, [udp6("2001:db8:99::5")], iif="nope")


@given(st.lists(st.sampled_from(["tun0", "tun1", "lo", "nope", None]), min_size=1, max_size=40),
       st.booleans())
@settings(max_examples=60, deadline=None)
def test_ingress_names_resolve_per_packet(names, uniform):
    """prepare_batch resolves a batch of one name with one lookup and a
    mixed one name by name: either way each packet gets its own name's
    ifindex (by hand from the interfaces), and a batch holding an unknown
    name or a None anywhere is refused, naming it, with nothing resolved."""
    from fastpath.router import prepare_batch
    router = Router()
    router.configure(NET)
    if uniform:
        names = [names[0]] * len(names)
    b = Batch.from_packets([bytes(udp6("2001:db8:99::5"))] * len(names))
    b.set_iif(["tun0"] * len(names))
    b.iif_names = list(names)
    b.iif[:] = 7777
    known = {n: router.interfaces[n].ifindex for n in ("tun0", "tun1", "lo")}
    bad = [n for n in names if n not in known]
    if bad:
        with pytest.raises(ValueError, match=f"unknown ingress interface {bad[0]!r}"):
            prepare_batch(b, router._tables)
        assert (b.iif == 7777).all() and b.iif_names == names
    else:
        prepare_batch(b, router._tables)
        assert b.iif.tolist() == [known[n] for n in names] and b.iif_names is None


def test_down_interface():
    r = Router()
    r.configure(NET + "ip link set tun0 down\n")
    (res,) = run(r, [udp6("2001:db8:99::5")])
    assert (res.verdict, res.reason) == ("drop", "interface_down")


# --- Ethernet batches ---------------------------------------------------------------

def test_ethernet_forward_rewrites_l2():
    r = Router()
    r.configure(NET + "ip link set tun1 address 02:00:00:00:01:01\n"
                "ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:02:02 dev tun1\n")
    f = Ether(src="02:aa:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=5) / udp6("2001:db8:99::5")
    b = Batch.from_scapy([f], iif="tun0")
    r.process(b)
    (res,) = b.results()
    assert res.verdict == "forward"
    out = Ether(res.data)
    assert (out.src, out.dst, out[Dot1Q].vlan) == ("02:00:00:00:01:01", "02:00:00:00:02:02", 5)
    assert out[IPv6].hlim == 63
    bad = Batch.from_packets([b"\x00" * 13, bytes(Ether(type=0x0806) / (b"arp" * 10))],
                             iif="tun0", linktype="ethernet")
    r.process(bad)
    assert [(x.verdict, x.reason) for x in bad.results()] == [("drop", "truncated"), ("drop", "not_ip")]


# --- fuzzing: any bytes, both link types, tiny headroom -----------------------------

FUZZ_CFG = NET + """
ip -6 route add blackhole 2001:db8:a::/48
ip -6 route add ::/0 via 2001:db8:2::2 dev tun1
ip route add 0.0.0.0/0 via 10.0.2.2 dev tun1
ip link set tun2 mtu 1280
ip -6 route add fc00::e/128 encap seg6local action End count dev tun0
ip -6 route add fc00::a/128 encap seg6local action End flavors psp dev tun0
ip -6 route add fc00::b/128 encap seg6local action End flavors usp,usd dev tun0
ip -6 route add fc00:100:1::/48 encap seg6local action End flavors next-csid dev tun0
ip -6 route add fc00::10/128 encap seg6local action End.X nh6 2001:db8:2::2 dev tun0
ip -6 route add fc00::11/128 encap seg6local action End.X nh6 fe80::1 oif tun1 dev tun0
ip -6 route add fc00::12/128 encap seg6local action End.T table 100 dev tun0
ip -6 route add fc00::13/128 encap seg6local action End.DX6 nh6 :: dev tun0
ip -6 route add fc00::14/128 encap seg6local action End.DX4 nh4 10.0.2.2 dev tun0
ip -6 route add fc00::15/128 encap seg6local action End.DT6 table 100 dev tun0
ip -6 route add fc00::16/128 encap seg6local action End.DT4 vrftable 100 dev tun0
ip -6 route add fc00::17/128 encap seg6local action End.DT46 vrftable 100 dev tun0
ip -6 route add fc00::18/128 encap seg6local action End.DX2 oif eth9 dev tun0
ip -6 route add fc00::19/128 encap seg6local action End.B6 srh segs fc00::e,fc00::1a dev tun0
ip -6 route add fc00::1a/128 encap seg6local action End.B6.Encaps srh segs fc00::19,fc00::e dev tun0
ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev tun1 table 100
ip route add 192.0.2.0/24 via 10.0.2.2 dev tun1 table 100
ip sr hmac set 7 sha256 k7
ip sr hmac set 8 sha1 k8
ip -6 route add fc00::1b/128 encap seg6local action End.B6 srh segs fc00::e,fc00::1a hmac 7 dev tun0
ip -6 route add fc00::1c/128 encap seg6local action End.B6.Encaps srh segs fc00::19 hmac 8 dev tun0
ip -6 route add fc00::1d/128 encap seg6 mode encap segs fc00::e,fc00::1d,2001:db8:99::1 hmac 7 dev tun1
ip -6 route add fc00::1e/128 encap seg6 mode inline segs fc00::19,fc00::1e dev tun1
ip -6 route add fc00::1f/128 encap seg6 mode encap.red segs fc00::1f dev tun1
ip -6 route add fc00::20/128 encap seg6 mode l2encap.red segs fc00::13,2001:db8:99::2 dev tun1
ip -6 route add fc00::21/128 encap seg6 mode l2encap segs 2001:db8:99::3 hmac 9 dev tun1
ip -6 route add fc00::22/128 encap seg6 mode encap segs """ + ",".join(f"2001:db8:99::{k:x}" for k in range(1, 17)) + """ dev tun2
ip route add 192.0.2.128/25 encap seg6 mode encap.red segs fc00::14,fc00::e hmac 8 dev tun1
ip route add 198.51.100.0/24 encap seg6 mode l2encap segs 2001:db8:99::4 dev tun1
"""


def _check_batch(b, originals):
    res = b.results()
    assert len(res) == len(originals)
    for x in res:
        assert x.verdict in ("forward", "local", "drop", "icmp")
        if x.verdict in ("drop", "icmp"):
            assert x.reason
    assert (b.start >= 0).all() and ((b.start + b.length) <= b.slot).all()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=16),
       st.sampled_from(["raw", "ethernet"]), st.integers(0, 64))
def test_fuzz_random_bytes(pkts, linktype, headroom):
    r = _fuzz_router()
    b = Batch.from_packets(pkts, iif="tun0", linktype=linktype, headroom=headroom)
    r.process(b)
    _check_batch(b, pkts)


_R = []


def _fuzz_router():
    if not _R:
        r = Router()
        r.configure(FUZZ_CFG)
        _R.append(r)
    return _R[0]


@st.composite
def ip_like(draw):
    """Packets that get past the first checks: a valid-looking header with
    random fields and a random tail."""
    if draw(st.booleans()):
        hdr = bytearray(40)
        hdr[0] = 0x60
        plen = draw(st.integers(0, 300))
        hdr[4:6] = plen.to_bytes(2, "big")
        hdr[6] = draw(st.sampled_from([0, 4, 6, 17, 41, 43, 43, 43, 44, 58, 59, 60, 143,
                                       draw(st.integers(0, 255))]))
        hdr[7] = draw(st.integers(0, 3)) if draw(st.booleans()) else 64
        hdr[8:24] = ipaddress.IPv6Address(draw(st.sampled_from(
            ["2001:db8:1::2", "2001:db8:55::1", "::", "fe80::1", "2001:db8:2::2"]))).packed
        hdr[24:40] = ipaddress.IPv6Address(draw(st.sampled_from(
            ["2001:db8:99::5", "2001:db8:1::1", "2001:db8:a::1", "ff02::1", "2001:db8:1::",
             "::", "3fff::1"] + [f"fc00::{k:x}" for k in (0xe, 0xa, 0xb, 0x10, 0x11, 0x12, 0x13,
                                                          0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a)]
            + [f"fc00::{k:x}" for k in range(0x1b, 0x23)]
            + ["fc00:100:1:2:3::"]))).packed
        if hdr[6] == 43 and draw(st.booleans()):
            # a plausible SRH with random fields, then random bytes
            n = draw(st.integers(0, 4))
            srh = bytearray([draw(st.sampled_from([4, 41, 17, 59, 43])), 2 * n + draw(st.sampled_from([0, 0, 1, 2])),
                             draw(st.sampled_from([4, 4, 0])), draw(st.integers(0, n + 1)),
                             max(n - 1, 0) if draw(st.booleans()) else draw(st.integers(0, 255)),
                             draw(st.sampled_from([0, 8])), 0, 0])
            for _ in range(n):
                srh += ipaddress.IPv6Address(draw(st.sampled_from(
                    ["fc00::e", "fc00::19", "2001:db8:99::1", "fc00::13", "::", "fc00::1d"]))).packed
            if draw(st.booleans()):
                # an HMAC TLV (right or wrong) for the key table
                srh[1] = 2 * n + 5 + draw(st.sampled_from([0, 0, 1]))
                srh[5] |= draw(st.sampled_from([8, 8, 0]))
                srh += bytes([5, draw(st.sampled_from([38, 38, 6])), 0, 0]) + \
                    draw(st.sampled_from([7, 8, 9])).to_bytes(4, "big") + draw(st.binary(min_size=32, max_size=32))
            tail = bytes(srh) + draw(st.binary(max_size=80))
            hdr[4:6] = min(len(tail), draw(st.integers(0, len(tail) + 8))).to_bytes(2, "big")
            return bytes(hdr) + tail
        tail = draw(st.binary(max_size=plen + 20))
        return bytes(hdr) + tail
    ihl = draw(st.sampled_from([5, 5, 5, 4, 6, 15]))
    hdr = bytearray(ihl * 4 if ihl >= 5 else 20)
    hdr[0] = 0x40 | ihl
    tot = draw(st.integers(0, 300))
    hdr[2:4] = tot.to_bytes(2, "big")
    hdr[6] = draw(st.sampled_from([0, 0x40, 0x20, 0x01]))
    hdr[8] = draw(st.integers(0, 3)) if draw(st.booleans()) else 64
    hdr[9] = draw(st.sampled_from([1, 6, 17, 41]))
    hdr[12:16] = ipaddress.IPv4Address(draw(st.sampled_from(
        ["10.0.1.2", "10.0.2.1", "0.0.0.0", "10.9.9.9"]))).packed
    hdr[16:20] = ipaddress.IPv4Address(draw(st.sampled_from(
        ["192.0.2.7", "10.0.1.1", "255.255.255.255", "10.0.1.255", "224.0.0.1", "192.0.2.200",
         "198.51.100.1"]))).packed
    s = sum(int.from_bytes(hdr[j:j + 2], "big") for j in range(0, 20, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    if draw(st.integers(0, 9)):
        hdr[10:12] = (~s & 0xFFFF).to_bytes(2, "big")
    return bytes(hdr) + draw(st.binary(max_size=tot + 20))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ip_like(), min_size=1, max_size=16), st.integers(0, 130))
def test_fuzz_structured(pkts, headroom):
    r = _fuzz_router()
    b = Batch.from_packets(pkts, iif="tun0", headroom=headroom)
    r.process(b)
    _check_batch(b, pkts)
    # packets refused by the input checks are left as they came
    for i, x in enumerate(b.results()):
        if x.verdict == "drop" and x.reason in ("truncated", "not_ip", "ip_hdr_invalid",
                                                "ip_csum_error"):
            assert b.packet(i) == pkts[i]


def test_tight_slot_without_room_for_icmp():
    r = _fuzz_router()
    p = bytes(udp6("2001:db8:99::5", hlim=1))
    data = np.zeros((1, len(p)), np.uint8)
    data[0] = np.frombuffer(p, np.uint8)
    b = Batch.from_arrays(data, [0], [len(p)], iif="tun0")
    r.process(b)
    (res,) = b.results()
    assert (res.verdict, res.reason) == ("drop", "no_headroom")


# --- the per-worker route cache ------------------------------------------------------

def test_route_cache_follows_reconfiguration():
    r = Router()
    r.configure(NET)
    p = udp6("2001:db8:99::5")
    assert run(r, [p, p])[1].oif == "tun1"
    r.configure("ip -6 route replace 2001:db8:99::/48 via 2001:db8:1::9 dev tun0")
    assert [x.oif for x in run(r, [p, p])] == ["tun0", "tun0"]
    r.configure("ip -6 route del 2001:db8:99::/48")
    assert [x.reason for x in run(r, [p])] == ["no_route"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 40), min_size=1, max_size=64))
def test_route_cache_gives_what_the_walk_gives(picks):
    """Cached lookups (default rules) against uncached ones (a source rule
    turns the cache off) on the same FIB: identical results."""
    routes = "".join(f"ip -6 route add 2001:db8:{k:x}::/{48 + k % 17} via 2001:db8:{2 + k % 2}::2 dev tun{1 + k % 2}\n"
                     for k in range(100, 140))
    cached, walked = Router(), Router()
    NET3 = NET + "ip -6 addr add 2001:db8:3::1/64 dev tun2\n"
    cached.configure(NET3 + routes)
    walked.configure(NET3 + routes + "ip -6 rule add from 2001:db8:7777::/48 table 254 pref 5\n")
    pkts = [bytes(udp6(f"2001:db8:{100 + k:x}::{k:x}")) for k in picks] + \
        [bytes(udp6(f"2001:db8:{k:x}::1")) for k in picks]
    a, b = run(cached, pkts), run(walked, pkts)
    assert [(x.verdict, x.oif, x.data, x.reason) for x in a] == \
        [(x.verdict, x.oif, x.data, x.reason) for x in b]


def test_icmp_ratelimit_is_timed_by_packet_timestamps():
    r = Router()
    r.configure(NET + "sysctl -w net.ipv6.icmp.ratelimit=1000\n")
    p = bytes(udp6("2001:db8:99::5", hlim=1))
    # /64 route back: 250 ms per token, 6 tokens to start with
    ts = [0, 1, 2, 3, 4, 5, 100_000_000, 350_000_000, 360_000_000, 10_000_000_000]
    b = Batch.from_packets([p] * len(ts), iif="tun0", timestamps_ns=ts)
    r.process(b)
    assert [x.verdict for x in b.results()] == ["icmp"] * 6 + ["drop", "icmp", "drop", "icmp"]
    # replaying the same capture gives the same answer at any speed
    r2 = Router()
    r2.configure(NET + "sysctl -w net.ipv6.icmp.ratelimit=1000\n")
    b2 = Batch.from_packets([p] * len(ts), iif="tun0", timestamps_ns=ts)
    for k in range(len(ts)):
        r2.process(b2[k:k + 1])
    assert [x.verdict for x in b2.results()] == [x.verdict for x in b.results()]
    # Packet Too Big is never limited
    r3 = Router()
    r3.configure(NET + "sysctl -w net.ipv6.icmp.ratelimit=1000\nip link set tun1 mtu 1280\n")
    big = bytes(udp6("2001:db8:99::5", payload=b"z" * 1300))
    b3 = Batch.from_packets([big] * 10, iif="tun0", timestamps_ns=list(range(10)))
    r3.process(b3)
    assert [x.verdict for x in b3.results()] == ["icmp"] * 10


@pytest.mark.parametrize("ratelimit,ratemask,want", [
    # ip_error() alone (unreachables not in icmp_ratemask): a burst of 5
    # (error_burst / error_cost), then one a second
    (0, 0, [True] * 5 + [False] * 3 + [True, True]),
    # in the mask with icmp_ratelimit 0: icmpv4_xrlim_allow() lets each error
    # through, and leaves alone the per-source bucket the two share (ip_error
    # has just updated it: no time passed, no cap)
    (0, 6168, [True] * 5 + [False] * 3 + [True, True]),
    # icmp_ratelimit 1000 ms on the same bucket: each error takes a token
    # for both, so 2 get through, then none for over two seconds
    (1000, 6168, [True, True] + [False] * 8),
])
def test_ip_error_limiter_is_timed_by_packet_timestamps(ratelimit, ratemask, want):
    """net.ipv4.route.error_cost / error_burst (jiffies, HZ 250), per
    source, off by default."""
    p = bytes(udp4("203.0.113.9"))                    # no route: net unreachable
    ts = [k * 5_000_000 for k in range(8)] + [35_000_000 + 1_100_000_000, 35_000_000 + 2_200_000_000]
    r = Router()
    r.configure(NET)
    b = Batch.from_packets([p] * len(ts), iif="tun0", timestamps_ns=ts)
    r.process(b)
    assert [x.verdict for x in b.results()] == ["icmp"] * len(ts)      # off by default
    cfg = (NET + "sysctl -w net.ipv4.route.error_cost=250\nsysctl -w net.ipv4.route.error_burst=1250\n"
           f"sysctl -w net.ipv4.icmp_ratelimit={ratelimit}\nsysctl -w net.ipv4.icmp_ratemask={ratemask}\n")
    r = Router()
    r.configure(cfg)
    b = Batch.from_packets([p] * len(ts), iif="tun0", timestamps_ns=ts)
    r.process(b)
    assert [x.verdict == "icmp" for x in b.results()] == want
    assert {x.reason for x, w in zip(b.results(), want) if not w} == {"icmp_suppressed"}
    # per source: another source has its own bucket
    other = bytes(udp4("203.0.113.9", src="10.0.1.3"))
    b2 = Batch.from_packets([other], iif="tun0", timestamps_ns=[ts[-1]])
    r.process(b2)
    assert b2.results()[0].verdict == "icmp"
    # the same capture replayed one packet at a time: the same answers
    r2 = Router()
    r2.configure(cfg)
    b3 = Batch.from_packets([p] * len(ts), iif="tun0", timestamps_ns=ts)
    for k in range(len(ts)):
        r2.process(b3[k:k + 1])
    assert [x.verdict == "icmp" for x in b3.results()] == want


@pytest.mark.parametrize("ratemask,want", [
    (0, [True, True, True, True, True, True, False]),
    # a Time Exceeded in between, in the mask with icmp_ratelimit 0, empties
    # the bucket ip_error() uses (icmpv4_xrlim_allow caps it at 0 tokens)
    (6168, [True, True, True, True, False, False, False]),
])
def test_ip_error_shares_its_bucket_with_the_icmp_limit(ratemask, want):
    unreach = bytes(udp4("203.0.113.9"))
    expiring = bytes(udp4("192.0.2.1", ttl=1))
    pkts = [unreach] * 3 + [expiring] + [unreach] * 3
    r = Router()
    r.configure(NET + "sysctl -w net.ipv4.route.error_cost=250\n"
                f"sysctl -w net.ipv4.icmp_ratemask={ratemask}\n")
    b = Batch.from_packets(pkts, iif="tun0", timestamps_ns=[k * 5_000_000 for k in range(len(pkts))])
    r.process(b)
    assert [x.verdict == "icmp" for x in b.results()] == want
    assert b.results()[3].reason == "hop_limit_exceeded"


@pytest.mark.parametrize("fam", [6, 4])
def test_multipath_hash_policy_l4_spreads_flows_of_one_host_pair(fam):
    """Policy 0 hashes addresses only: one host pair takes one path whatever
    the ports; policy 1 adds the ports, so its flows spread."""
    mp = ("ip -6 addr add 2001:db8:3::1/64 dev tun2\n"
          "ip -6 route add 2001:db8:aa::/48 nexthop via 2001:db8:2::2 dev tun1 nexthop via 2001:db8:3::2 dev tun2\n"
          if fam == 6 else
          "ip addr add 10.0.3.1/24 dev tun2\n"
          "ip route add 198.18.0.0/16 nexthop via 10.0.2.2 dev tun1 nexthop via 10.0.3.2 dev tun2\n")
    def pkts():
        if fam == 6:
            return [IPv6(src="2001:db8:1::2", dst="2001:db8:aa::1") / UDP(sport=1000 + k, dport=53)
                    for k in range(64)]
        return [IP(src="10.0.1.2", dst="198.18.0.1") / UDP(sport=1000 + k, dport=53) for k in range(64)]
    for policy, want in ((0, 1), (1, 2)):
        r = Router()
        r.configure(NET + mp + f"sysctl -w net.ipv{fam}.fib_multipath_hash_policy={policy}\n")
        assert len({x.oif for x in run(r, pkts())}) == want

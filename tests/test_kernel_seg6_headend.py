"""seg6 headends (``encap seg6 mode encap|encap.red|inline|l2encap|
l2encap.red``, net/ipv6/seg6_iptunnel.c) compared byte for byte with the
running kernel (see kernel_compare.py): IPv6 and IPv4 payloads, 1 to 16
SIDs, the reduced SRH, HMAC TLVs (SHA-1, SHA-256, unknown key, a segment
list too long for the kernel's HMAC text), tunnel sources (interface
address, ``ip sr tunsrc`` local or not), ``seg6_flowlabel`` -1/0/1 (1 is
the kernel's per-boot keyed skb hash: masked), hop limits, MTU edges, a
first SID that is our own End, a route encapsulating towards itself, and
random packets.  Skipped, with the reason, where namespaces/TUN are missing.
"""
import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting

from fastpath import Batch, Router

pytestmark = pytest.mark.kernel   # compares with the running kernel (tests/conftest.py)

try:
    from .kernel_compare import check, mask_outer_flowlabel
except ImportError:  # pragma: no cover
    from kernel_compare import check, mask_outer_flowlabel

SRC = "2001:db8:1::2"
SRC4 = "10.0.1.2"
MTU2 = 1300            # tun2: the first SIDs fc00:3::* leave there


def _segs(n, first="fc00:3::"):
    """n SIDs: the first towards tun2, the others towards tun1."""
    return [f"{first}{n:x}"] + [f"fc00:2::{n:x}:{k:x}" for k in range(1, n)]


# (destination prefix, mode, SIDs, hmac key id or None)
HEADENDS6 = [(f"2001:db8:a{n:x}::/48", "encap", _segs(n), None) for n in range(1, 17)]
HEADENDS6 += [
    ("2001:db8:b1::/48", "encap.red", _segs(1), None),
    ("2001:db8:b2::/48", "encap.red", _segs(2), None),
    ("2001:db8:b3::/48", "encap.red", _segs(3), None),
    ("2001:db8:b4::/48", "encap.red", _segs(16), None),
    ("2001:db8:c1::/48", "inline", _segs(1), None),
    ("2001:db8:c2::/48", "inline", _segs(2), None),
    ("2001:db8:c3::/48", "inline", _segs(3), None),
    ("2001:db8:d1::/48", "l2encap", _segs(2), None),
    ("2001:db8:d2::/48", "l2encap.red", _segs(1), None),
    ("2001:db8:d3::/48", "l2encap.red", _segs(3), None),
    ("2001:db8:e1::/48", "encap", _segs(2), 100),          # sha256
    ("2001:db8:e2::/48", "inline", _segs(2), 101),         # sha1
    ("2001:db8:e3::/48", "encap.red", _segs(1), 100),      # one SID, but HMAC: SRH kept
    ("2001:db8:e4::/48", "encap.red", _segs(3), 101),
    ("2001:db8:e5::/48", "encap", _segs(2), 999),          # no such key: dropped
    ("2001:db8:e6::/48", "encap", _segs(14), 100),         # 14 SIDs: the most the HMAC text holds
    ("2001:db8:e7::/48", "encap", _segs(15), 100),         # 15: seg6_hmac_compute fails, dropped
    ("2001:db8:e8::/48", "encap.red", _segs(15), 101),     # 15 reduced to 14 in the SRH: fine
    ("2001:db8:f1::/48", "encap", ["fc00:1::e", "fc00:2::f1"], None),  # first SID: our End
    ("2001:db8:f2::/48", "encap", ["2001:db8:f2::1"], None),          # towards itself
    ("2001:db8:f3::/48", "encap", ["fc00:9::1", "fc00:2::1"], None),  # first SID unroutable
    ("2001:db8:f4::/48", "encap", ["2001:db8:2::1", "fc00:2::1"], None),  # first SID local
]
HEADENDS4 = [
    ("192.0.2.0/26", "encap", _segs(2), None, ""),
    ("192.0.2.64/26", "encap.red", _segs(1), None, ""),
    ("192.0.2.128/26", "encap.red", _segs(3), 100, ""),
    ("192.0.2.192/26", "encap", _segs(1), None, " hoplimit 9"),
    ("198.51.100.0/25", "l2encap", _segs(2), None, ""),
    ("198.51.100.128/25", "encap", _segs(16), None, ""),
]


def _route(prefix, mode, segs, keyid, extra="", fam="-6"):
    h = f" hmac {keyid}" if keyid is not None else ""
    return f"ip {fam} route add {prefix} encap seg6 mode {mode} segs {','.join(segs)}{h} dev tun1{extra}"


CFG = "\n".join([
    "ip -6 addr add 2001:db8:1::1/64 dev tun0",
    "ip -6 addr add 2001:db8:2::1/64 dev tun1",
    "ip -6 addr add 2001:db8:3::1/64 dev tun2",
    "ip addr add 10.0.1.1/24 dev tun0",
    "ip addr add 10.0.2.1/24 dev tun1",
    f"ip link set tun2 mtu {MTU2}",
    "ip sr hmac set 100 sha256 'secret one'",
    "ip sr hmac set 101 sha1 s2",
    "ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev tun1",
    "ip -6 route add fc00:3::/32 via 2001:db8:3::2 dev tun2",
    "ip -6 route add fc00:99::/32 via 2001:db8:2::2 dev tun1",
    "ip -6 route add fc00:1::e/128 encap seg6local action End dev tun0",
] + [_route(*h) for h in HEADENDS6] + [_route(*h[:4], extra=h[4], fam="-4") for h in HEADENDS4])

# (name, extra config): tunnel sources and flow label modes
VARIANTS = {
    "ifaddr-copy": "",
    "tunsrc-local-zero": "ip sr tunsrc set 2001:db8:1::1\nsysctl -w net.ipv6.seg6_flowlabel=-1",
    # a tunnel source that is not ours: errors about the outer packet go out
    "tunsrc-remote": "ip sr tunsrc set fc00:99::1",
    "ifaddr-hash": "sysctl -w net.ipv6.seg6_flowlabel=1",
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request):
    try:
        from .kernel_oracle import KernelOracle, oracle_available
    except ImportError:  # pragma: no cover
        from kernel_oracle import KernelOracle, oracle_available
    ok, reason = oracle_available()
    if not ok:
        pytest.skip(reason)
    cfg = CFG + "\n" + VARIANTS[request.param]
    with KernelOracle() as k:
        k.configure(cfg)
        r = Router()
        r.configure(cfg)
        mask = mask_outer_flowlabel if request.param.endswith("hash") else None
        yield k, r, mask


def _check(pair, pkts):
    k, r, mask = pair
    check((k, r), pkts, mask=mask)


def _dst(prefix, host=5):
    net = ipaddress.ip_network(prefix)
    return str(net.network_address + host)


def in6(dst, hlim=64, tc=0, fl=0, n=8, src=SRC):
    return IPv6(src=src, dst=dst, hlim=hlim, tc=tc, fl=fl) / UDP(sport=1234, dport=4321) / (b"p" * n)


def in4(dst, ttl=64, tos=0, n=8, df=True, src=SRC4):
    return IP(src=src, dst=dst, ttl=ttl, tos=tos, id=7, flags="DF" if df else 0) / \
        UDP(sport=1234, dport=4321) / (b"q" * n)


def _overhead(mode, nsegs, hmac):
    """Bytes a headend adds: outer header and SRH (reduced, or none)."""
    if mode == "inline":
        return 8 + 16 * (nsegs + 1) + (40 if hmac else 0)
    n = nsegs - 1 if mode.endswith(".red") else nsegs
    srh = 0 if n == 0 and not hmac else 8 + 16 * max(n, 1 if hmac and n == 0 else n) + (40 if hmac else 0)
    return 40 + srh


def test_encap_1_to_16_sids(pair):
    pkts = []
    for prefix, mode, segs, _ in HEADENDS6[:16]:
        d = _dst(prefix)
        pkts += [in6(d), in6(d, hlim=2, tc=0x28, fl=0x12345), in6(d, hlim=1), in6(d, hlim=0)]
    _check(pair, pkts)


def test_reduced_inline_l2(pair):
    pkts = []
    for prefix, mode, segs, keyid in HEADENDS6[16:26]:
        d = _dst(prefix)
        pkts += [in6(d, tc=0xb8, fl=0xfedcb), in6(d, hlim=1), in6(d, hlim=2, n=100)]
    _check(pair, pkts)


def test_hmac_headends(pair):
    pkts = []
    for prefix, mode, segs, keyid in HEADENDS6[26:34]:
        d = _dst(prefix)
        pkts += [in6(d), in6(d, src="2001:db8:1::77", fl=0x5), in6(d, hlim=1)]
    _check(pair, pkts)


def test_lookup_after_encap(pair):
    pkts = []
    for prefix, mode, segs, keyid in HEADENDS6[34:]:
        d = _dst(prefix)
        pkts += [in6(d), in6(d, hlim=1), in6(d, hlim=2)]
    _check(pair, pkts)


def test_ipv4_payloads(pair):
    pkts = []
    for prefix, mode, segs, keyid, _ in HEADENDS4:
        d = _dst(prefix)
        pkts += [in4(d), in4(d, ttl=1, tos=0x28), in4(d, ttl=0), in4(d, n=300, df=False)]
    _check(pair, pkts)


@pytest.mark.parametrize("delta", [-1, 0, 1])
def test_mtu_edges(pair, delta):
    """The outer packet against tun2's MTU (ip6_forward: Packet Too Big
    about the outer packet, to its source: ours, so nothing leaves)."""
    pkts = []
    for prefix, mode, segs, keyid in [HEADENDS6[1], HEADENDS6[15], HEADENDS6[18], HEADENDS6[22],
                                      HEADENDS6[26]]:
        inner = MTU2 - _overhead(mode, len(segs), keyid is not None) + delta
        pkts.append(in6(_dst(prefix), n=inner - 48))
    for prefix, mode, segs, keyid, _ in HEADENDS4[:3]:
        inner = MTU2 - _overhead(mode, len(segs), keyid is not None) + delta
        pkts += [in4(_dst(prefix), n=inner - 28), in4(_dst(prefix), n=inner - 28, df=False)]
    _check(pair, pkts)


ALL6 = [h[0] for h in HEADENDS6]
ALL4 = [h[0] for h in HEADENDS4]


@st.composite
def headend_packet(draw):
    if draw(st.integers(0, 3)) == 0:
        d = _dst(draw(st.sampled_from(ALL4)), draw(st.integers(1, 60)))
        return bytes(in4(d, ttl=draw(st.sampled_from([0, 1, 2, 64])), tos=draw(st.integers(0, 255)),
                         n=draw(st.integers(0, 1300)), df=draw(st.booleans()),
                         src=f"10.0.1.{draw(st.integers(2, 250))}"))
    d = _dst(draw(st.sampled_from(ALL6)), draw(st.integers(1, 1 << 40)))
    return bytes(in6(d, hlim=draw(st.sampled_from([0, 1, 2, 64, 255])), tc=draw(st.integers(0, 255)),
                     fl=draw(st.integers(0, 0xFFFFF)), n=draw(st.integers(0, 1300)),
                     src=f"2001:db8:1::{draw(st.integers(2, 0xffff)):x}"))


@settings(max_examples=int(__import__("os").environ.get("FP_KERNEL_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(headend_packet(), min_size=1, max_size=8))
def test_random_headend_packets_against_kernel(pair, pkts):
    _check(pair, pkts)


# ------------------------------------------------------------------ without the kernel

def test_route_tunsrc_and_batches_of_mixed_policies():
    """Per-route ``tunsrc`` (newer kernels' SEG6_IPTUNNEL_SRC; this kernel
    and iproute2 6.1 have none, so checked by hand): the route's source
    wins over ``ip sr tunsrc``, which wins over the interface address; one
    batch mixing policies, families and modes."""
    r = Router()
    r.configure(CFG + "\nip sr tunsrc set 2001:db8:1::1\n"
                "ip -6 route add 2001:db8:77::/48 encap seg6 mode encap tunsrc fc00:aa::1 "
                "segs fc00:2::1,fc00:2::2 dev tun1")
    pkts = [in6("2001:db8:77::1"), in6(_dst("2001:db8:a2::/48")), in4(_dst("192.0.2.0/26")),
            in6(_dst("2001:db8:c2::/48")), in6(_dst("2001:db8:b1::/48")), in6("2001:db8:77::2", hlim=1)]
    b = Batch.from_packets([bytes(p) for p in pkts], iif="tun0")
    r.process(b)
    res = b.results()
    assert [x.verdict for x in res] == ["forward"] * 5 + ["drop"]
    o = [IPv6(x.data) for x in res[:5]]
    assert o[0].src == "fc00:aa::1" and o[0].dst == "fc00:2::1"
    assert list(o[0][IPv6ExtHdrSegmentRouting].addresses) == ["fc00:2::2", "fc00:2::1"]
    assert o[1].src == "2001:db8:1::1" and o[1].dst == "fc00:3::2" and o[1].hlim == 63
    assert o[2].src == "2001:db8:1::1" and o[2].nh == 43 and bytes(o[2][IPv6ExtHdrSegmentRouting].payload) \
        == bytes(pkts[2])
    assert o[3].src == SRC and list(o[3][IPv6ExtHdrSegmentRouting].addresses) == \
        [_dst("2001:db8:c2::/48"), "fc00:2::2:1", "fc00:3::2"]
    assert o[4].nh == 41 and o[4].dst == "fc00:3::1" and bytes(o[4].payload) == bytes(pkts[4])
    assert res[5].reason == "hop_limit_exceeded"


def test_l2encap_on_ethernet_batches():
    """l2encap on Ethernet input: the frame as received (untagged header)
    goes inside, next header 143; the outer leaves with a new header."""
    from scapy.layers.l2 import Dot1Q, Ether
    r = Router()
    r.configure("ip -6 addr add 2001:db8:1::1/64 dev eth0\nip -6 addr add 2001:db8:2::1/64 dev eth1\n"
                "ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev eth1\n"
                "ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:00:22 dev eth1\n"
                "ip -6 route add 2001:db8:d1::/48 encap seg6 mode l2encap segs fc00:2::1 dev eth1\n"
                "ip -6 route add 2001:db8:d2::/48 encap seg6 mode l2encap.red segs fc00:2::1 dev eth1\n")
    f1 = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / in6("2001:db8:d1::5")
    f2 = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=5) / in6("2001:db8:d2::5")
    b = Batch.from_packets([bytes(f1), bytes(f2)], iif="eth0", linktype="ethernet")
    r.process(b)
    r1, r2 = b.results()
    assert r1.verdict == r2.verdict == "forward"
    o1 = Ether(r1.data)
    assert o1.dst == "02:00:00:00:00:22" and o1[IPv6].nh == 43
    srh = o1[IPv6ExtHdrSegmentRouting]
    assert srh.nh == 143 and bytes(srh.payload) == bytes(f1)
    o2 = Ether(r2.data)
    assert o2[IPv6].nh == 143 and o2[IPv6].dst == "fc00:2::1"
    untagged = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / in6("2001:db8:d2::5")
    assert bytes(o2[IPv6].payload) == bytes(untagged)


def test_trace_shows_the_encapsulation():
    r = Router()
    r.configure(CFG)
    t = str(r.trace(bytes(in6(_dst("2001:db8:a2::/48"))), iif="tun0"))
    assert "encap seg6 mode encap" in t and "encapsulated (80 bytes of outer headers), DA fc00:3::2" in t
    assert "forward: dev tun2" in t
    t = str(r.trace(bytes(in6(_dst("2001:db8:c1::/48"))), iif="tun0"))
    assert "inserted" in t or "insert" in t

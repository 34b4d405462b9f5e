"""seg6local behaviours compared byte for byte with the running kernel (see
kernel_compare.py): End (plain, counters, PSP, NEXT-C-SID), End.X (with and
without oif), End.T, End.DX6 (nh6 and ::), End.DX4, End.DT6 (table), End.B6,
End.B6.Encaps; valid and invalid SRHs, hop limits, MTU edges, ICMP errors and
random packets.  Skipped, with the reason, where namespaces/TUN are missing."""
import ipaddress
import itertools

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import (IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop,
                                IPv6ExtHdrRouting, IPv6ExtHdrSegmentRouting)

from fastpath import Router

pytestmark = pytest.mark.kernel   # compares with the running kernel (tests/conftest.py)

try:
    from .kernel_compare import check, compare, format_problems
except ImportError:  # pragma: no cover
    from kernel_compare import check, compare, format_problems

CFG = """
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip -6 addr add 2001:db8:3::1/64 dev tun2
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip link set tun2 mtu 1300
ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev tun1
ip -6 route add fc00:3::/32 via 2001:db8:3::2 dev tun2
ip -6 route add fc00:4::/32 via 2001:db8:3::2 dev tun2 table 100
ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev tun1
ip -6 route add 2001:db8:98::/48 via 2001:db8:3::2 dev tun2 table 100
ip -6 route add 2001:db8:97::1/128 dev tun0 table 100
ip route add 192.0.2.0/24 via 10.0.2.2 dev tun1
ip -6 route add fc00:1::e/128 encap seg6local action End dev tun0
ip -6 route add fc00:1::c/128 encap seg6local action End count dev tun0
ip -6 route add fc00:1::a/128 encap seg6local action End flavors psp dev tun0
ip -6 route add fc00:1::10/128 encap seg6local action End.X nh6 2001:db8:3::2 dev tun0
ip -6 route add fc00:1::11/128 encap seg6local action End.X nh6 2001:db8:3::2 oif tun2 dev tun0
ip -6 route add fc00:1::12/128 encap seg6local action End.T table 100 dev tun0
ip -6 route add fc00:1::13/128 encap seg6local action End.DX6 nh6 2001:db8:2::2 dev tun0
ip -6 route add fc00:1::14/128 encap seg6local action End.DX6 nh6 :: dev tun0
ip -6 route add fc00:1::15/128 encap seg6local action End.DX4 nh4 10.0.2.2 dev tun0
ip -6 route add fc00:1::16/128 encap seg6local action End.DT6 table 100 dev tun0
ip -6 route add fc00:1::17/128 encap seg6local action End.B6 srh segs fc00:3::1,fc00:2::1 dev tun0
ip -6 route add fc00:1::18/128 encap seg6local action End.B6.Encaps srh segs fc00:3::1,fc00:2::1 dev tun0
ip -6 route add fc00:1::19/128 encap seg6local action End.DX4 nh4 0.0.0.0 dev tun0
ip -6 route add fc00:100:1::/48 encap seg6local action End flavors next-csid lblen 32 nflen 16 dev tun0
ip -6 route add fc00:100:2::/48 via 2001:db8:2::2 dev tun1
"""
SRC = "2001:db8:1::2"


@pytest.fixture(scope="module")
def pair():
    try:
        from .kernel_oracle import KernelOracle, oracle_available
    except ImportError:  # pragma: no cover
        from kernel_oracle import KernelOracle, oracle_available
    ok, reason = oracle_available()
    if not ok:
        pytest.skip(reason)
    with KernelOracle() as k:
        k.configure(CFG)
        r = Router()
        r.configure(CFG)
        yield k, r


def srv6(segs, sl=None, hlim=64, inner=None, src=SRC, n=8, **kw):
    """An IPv6 packet along ``segs`` (in visiting order), at segment ``sl``."""
    addrs = list(reversed(segs))
    if sl is None:
        sl = len(segs) - 1
    srh = IPv6ExtHdrSegmentRouting(addresses=addrs, segleft=sl, lastentry=len(segs) - 1, **kw)
    pl = inner if inner is not None else UDP(sport=1234, dport=4321) / (b"p" * n)
    return IPv6(src=src, dst=addrs[sl], hlim=hlim) / srh / pl


def test_end(pair):
    check(pair, [
        srv6(["fc00:1::e", "fc00:2::1"]),                      # SL 1 -> 0
        srv6(["fc00:1::e", "fc00:2::1", "fc00:3::1"]),         # SL 2 -> 1
        srv6(["fc00:1::e", "fc00:2::1"], hlim=1),              # Time Exceeded after advance
        srv6(["fc00:1::e", "fc00:2::1"], hlim=2),
        srv6(["fc00:1::e", "fc00:9::1"]),                      # next SID unroutable: ICMP
        srv6(["fc00:1::e", "2001:db8:2::1"]),                  # next SID local: blackhole
        srv6(["fc00:2::1", "fc00:1::e"], sl=0),                # SL 0: drop
        IPv6(src=SRC, dst="fc00:1::e") / UDP(),                # no SRH: drop
        srv6(["fc00:1::e", "fc00:3::1"], n=1300),              # too big for tun2
        srv6(["fc00:1::e", "fc00:2::1"], src="2001:db8:44::1", hlim=1),  # no route back
    ])


def test_end_srh_validation(pair):
    good = bytes(srv6(["fc00:1::e", "fc00:2::1"]))
    pkts = [good]
    # bad type, bad hdrlen, last entry too big, SL beyond last entry + 1, SL = last entry + 1
    for off, val in ((42, 0), (41, 3), (44, 2), (43, 3), (43, 2), (41, 5)):
        b = bytearray(good)
        b[off] = val
        pkts.append(bytes(b))
    check(pair, pkts)


def test_end_srh_tlvs(pair):
    from scapy.layers.inet6 import IPv6ExtHdrSegmentRoutingTLVPadN, IPv6ExtHdrSegmentRoutingTLVPad1
    pkts = []
    for tlvs in ([IPv6ExtHdrSegmentRoutingTLVPadN(len=6, padding=b"\0" * 6)],
                 [IPv6ExtHdrSegmentRoutingTLVPad1(), IPv6ExtHdrSegmentRoutingTLVPadN(len=5, padding=b"\0" * 5)],
                 [IPv6ExtHdrSegmentRoutingTLVPadN(len=14, padding=b"\0" * 14)]):
        pkts.append(srv6(["fc00:1::e", "fc00:2::1"], tlv_objects=tlvs))
    # TLV overrunning the header: fix up the length byte
    b = bytearray(bytes(pkts[0]))
    b[40 + 8 + 32 + 1] = 7
    pkts.append(bytes(b))
    check(pair, pkts)


def test_end_extension_headers(pair):
    segs = ["fc00:1::e", "fc00:2::1"]
    srh = IPv6ExtHdrSegmentRouting(addresses=list(reversed(segs)), segleft=1, lastentry=1)
    pl = UDP(sport=1, dport=2) / b"x"
    check(pair, [
        IPv6(src=SRC, dst="fc00:1::e") / IPv6ExtHdrHopByHop() / srh / pl,
        IPv6(src=SRC, dst="fc00:1::e") / IPv6ExtHdrDestOpt() / srh / pl,
        IPv6(src=SRC, dst="fc00:1::e") / IPv6ExtHdrRouting(type=0, segleft=0, addresses=["fc00::9"]) / srh / pl,
        IPv6(src=SRC, dst="fc00:1::e") / IPv6ExtHdrRouting(type=0, segleft=1, addresses=["fc00::9"]) / pl,
        IPv6(src=SRC, dst="fc00:1::e") / srh / IPv6ExtHdrFragment(m=1, id=5) / pl,
        IPv6(src=SRC, dst="fc00:1::e") / IPv6ExtHdrFragment(m=1, id=5) / srh / pl,
    ])


def test_end_truncated(pair):
    good = bytes(srv6(["fc00:1::e", "fc00:2::1"]))
    pkts = []
    for cut in (41, 44, 47, 48, 60, 79, 80):
        b = bytearray(good[:cut])
        b[4:6] = (cut - 40).to_bytes(2, "big")
        pkts.append(bytes(b))
    check(pair, pkts)


def test_end_counters(pair):
    oracle, r = pair
    r.reset_counters()
    pkts = [srv6(["fc00:1::c", "fc00:2::1"]), srv6(["fc00:1::c", "fc00:2::1"], n=100),
            srv6(["fc00:2::1", "fc00:1::c"], sl=0), srv6(["fc00:1::c", "fc00:2::1"], hlim=1)]
    check(pair, pkts)
    c = r.counters()["routes"]["fc00:1::c/128 table 254"]
    assert c == {"packets": 2, "bytes": len(pkts[0]) + len(pkts[1]), "errors": 2}
    # the kernel's own counters agree
    out = oracle.ip("-6", "-s", "route", "show", "fc00:1::c/128")
    assert "packets 2 " in out and f"bytes {len(pkts[0]) + len(pkts[1])} " in out and "errors 2" in out


def test_end_psp(pair):
    check(pair, [
        srv6(["fc00:1::a", "fc00:2::1"]),                      # SL 1: advance and pop
        srv6(["fc00:1::a", "fc00:2::1", "fc00:3::1"]),         # SL 2: plain End
        srv6(["fc00:2::1", "fc00:1::a"], sl=0),                # SL 0: drop
        IPv6(src=SRC, dst="fc00:1::a") / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrSegmentRouting(addresses=["fc00:2::1", "fc00:1::a"], segleft=1, lastentry=1) / UDP(),
        IPv6(src=SRC, dst="fc00:1::a") / IPv6ExtHdrDestOpt()
        / IPv6ExtHdrSegmentRouting(addresses=["fc00:2::1", "fc00:1::a"], segleft=1, lastentry=1) / UDP(),
        IPv6(src=SRC, dst="fc00:1::a") / IPv6ExtHdrFragment(m=1)
        / IPv6ExtHdrSegmentRouting(addresses=["fc00:2::1", "fc00:1::a"], segleft=1, lastentry=1) / UDP(),
    ])


def test_end_next_csid(pair):
    check(pair, [
        IPv6(src=SRC, dst="fc00:100:1:2:3::") / UDP() / b"u",               # shift: fc00:100:2:3::
        IPv6(src=SRC, dst="fc00:100:1:2::") / UDP() / b"u",
        IPv6(src=SRC, dst="fc00:100:1::") / UDP() / b"u",                   # arg 0, no SRH: drop
        srv6(["fc00:100:1::", "fc00:2::1"]),                                 # arg 0: plain End
        IPv6(src=SRC, dst="fc00:100:1:7::") / UDP() / b"u",                  # fc00:100:7:: unroutable
    ])


def test_end_x_and_end_t(pair):
    check(pair, [
        srv6(["fc00:1::10", "fc00:2::1"]),      # End.X: forwarded to nh6 on tun2 whatever the DA
        srv6(["fc00:1::10", "fc00:2::1"], hlim=1),
        srv6(["fc00:1::11", "fc00:2::1"]),      # End.X oif tun2
        srv6(["fc00:1::12", "fc00:4::1"]),      # End.T: table 100
        srv6(["fc00:1::12", "fc00:2::1"]),      # not in table 100: unreachable
        srv6(["fc00:1::12", "2001:db8:97::1"]),
        srv6(["fc00:1::10", "fc00:2::1"], n=1300),
    ])


def _encap6(sid, inner, sl=0, with_srh=True):
    if with_srh:
        return IPv6(src=SRC, dst=sid) / IPv6ExtHdrSegmentRouting(
            addresses=[sid, "fc00:9::9"][:1 + sl][::-1] if sl else [sid], segleft=sl,
            lastentry=sl) / inner
    return IPv6(src=SRC, dst=sid, nh=41 if inner.version == 6 else 4) / inner


def test_decap_behaviours(pair):
    in6 = IPv6(src="2001:db8:77::1", dst="2001:db8:99::5", hlim=9) / UDP(sport=5, dport=6) / b"inner6"
    in6b = IPv6(src="2001:db8:77::1", dst="2001:db8:98::5", hlim=9) / UDP(sport=5, dport=6) / b"inner6"
    in6h = IPv6(src="2001:db8:77::1", dst="2001:db8:99::5", hlim=1) / UDP() / b"x"
    in4 = IP(src="198.51.100.7", dst="192.0.2.5", ttl=9, id=3) / UDP(sport=5, dport=6) / b"inner4"
    in4h = IP(src="198.51.100.8", dst="192.0.2.5", ttl=1, id=3) / UDP() / b"x"
    check(pair, [
        _encap6("fc00:1::13", in6), _encap6("fc00:1::13", in6, with_srh=False),
        _encap6("fc00:1::14", in6), _encap6("fc00:1::14", in6h),
        _encap6("fc00:1::13", in6, sl=1),                        # SL > 0: drop
        _encap6("fc00:1::13", in4),                              # wrong inner: drop
        _encap6("fc00:1::15", in4), _encap6("fc00:1::15", in4, with_srh=False),
        _encap6("fc00:1::15", in4h), _encap6("fc00:1::19", in4),
        _encap6("fc00:1::16", in6b), _encap6("fc00:1::16", in6),  # DT6 table 100
        IPv6(src=SRC, dst="fc00:1::15", nh=4) / b"\x45\x00",     # truncated inner
    ])


def test_binding_sids(pair):
    check(pair, [
        srv6(["fc00:1::17", "fc00:2::9"]), srv6(["fc00:1::17", "fc00:2::9", "fc00:3::9"]),
        srv6(["fc00:1::18", "fc00:2::9"]), srv6(["fc00:1::18", "fc00:2::9"], hlim=1),
        srv6(["fc00:2::9", "fc00:1::17"], sl=0), srv6(["fc00:2::9", "fc00:1::18"], sl=0),
        IPv6(src=SRC, dst="fc00:1::17", tc=0x28, fl=0xabcde) / IPv6ExtHdrSegmentRouting(
            addresses=["fc00:2::1", "fc00:1::17"], segleft=1, lastentry=1) / UDP(),
        IPv6(src=SRC, dst="fc00:1::18", tc=0x28, fl=0xabcde) / IPv6ExtHdrSegmentRouting(
            addresses=["fc00:2::1", "fc00:1::18"], segleft=1, lastentry=1) / UDP(),
    ])


SIDS = ["fc00:1::e", "fc00:1::a", "fc00:1::c", "fc00:1::10", "fc00:1::11", "fc00:1::12",
        "fc00:1::13", "fc00:1::14", "fc00:1::15", "fc00:1::16", "fc00:1::17", "fc00:1::18",
        "fc00:100:1:2::", "fc00:100:1::"]
NEXT = ["fc00:2::1", "fc00:3::1", "fc00:4::1", "fc00:9::1", "2001:db8:2::1", "fc00:1::e",
        "2001:db8:99::1", "fc00:100:1:2::"]
_SRC6 = itertools.count(1)


@st.composite
def srv6_packet(draw):
    sid = draw(st.sampled_from(SIDS))
    nsegs = draw(st.integers(1, 4))
    segs = [sid] + [draw(st.sampled_from(NEXT)) for _ in range(nsegs - 1)]
    sl = draw(st.integers(0, nsegs))          # nsegs: SL = last entry + 1 (reduced SRH)
    addrs = list(reversed(segs))
    inner_kind = draw(st.sampled_from(["udp", "ip6", "ip4", "none"]))
    if inner_kind == "ip6":
        pl = IPv6(src="2001:db8:77::1", dst=draw(st.sampled_from(["2001:db8:99::5", "2001:db8:98::5",
                                                                  "2001:db8:55::5"])),
                  hlim=draw(st.sampled_from([1, 2, 64]))) / UDP() / b"i"
    elif inner_kind == "ip4":
        pl = IP(src="198.51.100.%d" % draw(st.integers(1, 254)), dst="192.0.2.5",
                ttl=draw(st.sampled_from([1, 2, 64])), id=1) / UDP() / b"i"
    elif inner_kind == "udp":
        pl = UDP(sport=9, dport=9) / (b"d" * draw(st.integers(0, 1400)))
    else:
        pl = b""
    srh = IPv6ExtHdrSegmentRouting(addresses=addrs, segleft=min(sl, nsegs - 1), lastentry=nsegs - 1)
    p = IPv6(src=f"2001:db8:1::{next(_SRC6) % 0xfff0 + 2:x}", dst=sid,
             hlim=draw(st.sampled_from([0, 1, 2, 64])), tc=draw(st.integers(0, 255)),
             fl=draw(st.integers(0, 0xFFFFF)))
    if draw(st.booleans()):
        p = p / srh / pl
    else:
        p = p / pl
    raw = bytearray(bytes(p))
    if raw[6] == 43 and sl == nsegs:
        raw[43] = sl                          # SL = last entry + 1
    if draw(st.integers(0, 4)) == 0 and len(raw) > 41:
        k = draw(st.integers(40, min(len(raw) - 1, 100)))
        raw[k] = draw(st.integers(0, 255))    # one corrupted byte in the headers
    return bytes(raw)


@settings(max_examples=int(__import__("os").environ.get("FP_KERNEL_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(srv6_packet(), min_size=1, max_size=8))
def test_random_srv6_packets_against_kernel(pair, pkts):
    check(pair, pkts)


SRH_RCV_CFG = """
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip -6 addr add fc00:5::1/128 dev tun0
ip -6 addr add fc00:5::2/128 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev tun1
ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev tun1
ip route add 192.0.2.0/24 via 10.0.2.2 dev tun1
ip -6 route add fc00:1::e/128 encap seg6local action End dev tun0
"""


@pytest.mark.parametrize("enabled", [False, True])
def test_srh_to_a_local_address(enabled):
    """ipv6_srh_rcv: an SRH on a packet for one of our addresses (no
    seg6local route), with seg6_enabled off and on."""
    try:
        from .kernel_oracle import KernelOracle, oracle_available
    except ImportError:  # pragma: no cover
        from kernel_oracle import KernelOracle, oracle_available
    ok, reason = oracle_available()
    if not ok:
        pytest.skip(reason)
    cfg = SRH_RCV_CFG + ("sysctl -w net.ipv6.conf.all.seg6_enabled=1\n"
                         "sysctl -w net.ipv6.conf.tun0.seg6_enabled=1\n" if enabled else "")
    in6 = IPv6(src="2001:db8:77::1", dst="2001:db8:99::5", hlim=9) / UDP() / b"in"
    in4 = IP(src="198.51.100.3", dst="192.0.2.5", ttl=9, id=4) / UDP() / b"in"
    pkts = [
        srv6(["fc00:5::1", "fc00:2::1"]),                        # advance and forward
        srv6(["fc00:5::1", "fc00:5::2", "fc00:2::1"]),           # local twice: loop, hop limit -1
        srv6(["fc00:5::1", "fc00:5::2", "fc00:2::1"], hlim=1),   # looped with hop limit 1
        srv6(["fc00:5::1", "fc00:1::e", "fc00:2::1"]),           # next SID is a seg6local route
        srv6(["fc00:5::1", "fc00:9::1"]),                        # unroutable next SID
        srv6(["fc00:2::1", "fc00:5::1"], sl=0),                  # SL 0, UDP: delivered
        srv6(["fc00:5::1"], sl=0, inner=in6),                    # SL 0, inner IPv6: decap, forward
        srv6(["fc00:5::1"], sl=0, inner=in4),                    # SL 0, inner IPv4
        IPv6(src=SRC, dst="fc00:5::1") / IPv6ExtHdrSegmentRouting(
            addresses=["fc00:2::1", "fc00:5::1"], segleft=1, lastentry=1) / in6,
    ]
    # SL beyond the list: Parameter Problem at the SL field
    b = bytearray(bytes(srv6(["fc00:5::1", "fc00:2::1"])))
    b[43] = 2
    pkts.append(bytes(b))
    # a type 0 routing header with segments left: Parameter Problem at the type
    pkts.append(IPv6(src=SRC, dst="fc00:5::1") / IPv6ExtHdrRouting(type=0, segleft=1, addresses=["fc00:2::1"]) / UDP())
    with KernelOracle() as k:
        k.configure(cfg)
        r = Router()
        r.configure(cfg)
        problems = compare(k, r, "tun0", [bytes(p) for p in pkts])
        assert not problems, format_problems(problems)


# ------------------------------------------------------------------ HMAC (seg6_hmac.c)

HMAC_KEYS = {100: (b"secret one", "sha256"), 101: (b"s2", "sha1")}
HMAC_CFG = CFG + """
ip sr hmac set 100 sha256 'secret one'
ip sr hmac set 101 sha1 s2
ip -6 addr add fc00:5::1/128 dev tun0
sysctl -w net.ipv6.conf.all.seg6_enabled=1
sysctl -w net.ipv6.conf.tun0.seg6_enabled=1
ip -6 route add fc00:1::27/128 encap seg6local action End.B6 srh segs fc00:3::1,fc00:2::1 hmac 100 dev tun0
ip -6 route add fc00:1::28/128 encap seg6local action End.B6.Encaps srh segs fc00:3::1,fc00:2::1 hmac 101 dev tun0
ip -6 route add fc00:1::29/128 encap seg6local action End.B6.Encaps srh segs fc00:3::1 hmac 999 dev tun0
"""


def hmac_srv6(segs, sl=None, keyid=100, key=None, src=SRC, hlim=64, inner=None, flags=0x08,
              corrupt=False, pad_before=False, pad_after=False, text_src=None, n=8):
    """An IPv6 packet along ``segs`` whose SRH carries an HMAC TLV computed
    as seg6_hmac_compute() (source, last entry, flags, key id, segments)."""
    import hashlib
    import hmac as hmac_mod
    import struct
    secret, algo = key or HMAC_KEYS.get(keyid, HMAC_KEYS[100])
    addrs = [ipaddress.IPv6Address(a).packed for a in reversed(segs)]
    last = len(segs) - 1
    sl = last if sl is None else sl
    seglist = b"".join(addrs)
    text = ipaddress.IPv6Address(text_src or src).packed + bytes([last, flags]) + \
        struct.pack("!I", keyid) + seglist
    mac = hmac_mod.new(secret, text, hashlib.sha256 if algo == "sha256" else hashlib.sha1).digest()
    mac = (mac + bytes(32))[:32]
    if corrupt:
        mac = bytes([mac[0] ^ 1]) + mac[1:]
    tlvs = (b"\x04\x06" + bytes(6) if pad_before else b"") + bytes([5, 38, 0, 0]) + \
        struct.pack("!I", keyid) + mac + (b"\x04\x06" + bytes(6) if pad_after else b"")
    pl = bytes(inner if inner is not None else UDP(sport=1234, dport=4321) / (b"h" * n))
    nh = 41 if inner is not None and bytes(inner)[0] >> 4 == 6 else (4 if inner is not None else 17)
    body = seglist + tlvs
    srh = bytes([nh, len(body) // 8, 4, sl, last, flags, 0, 0]) + body
    ip6 = IPv6(src=src, dst=str(ipaddress.IPv6Address(addrs[sl])), hlim=hlim, nh=43)
    return bytes(ip6 / (srh + pl))


def _hmac_packets():
    e2 = ["fc00:1::e", "fc00:2::1"]
    in6 = IPv6(src="2001:db8:77::1", dst="2001:db8:99::5", hlim=9) / UDP() / b"inner6"
    pkts = [
        hmac_srv6(e2), hmac_srv6(e2, keyid=101), hmac_srv6(e2, corrupt=True),
        hmac_srv6(e2, keyid=555, key=HMAC_KEYS[100]),              # unknown key
        bytes(srv6(e2)),                                           # no HMAC TLV
        hmac_srv6(e2, flags=0),                                    # TLV but no H flag
        hmac_srv6(e2, pad_after=True),                             # HMAC not the last 40 bytes
        hmac_srv6(e2, pad_before=True),                            # PadN, then HMAC: found
        hmac_srv6(e2, text_src="2001:db8:1::99"),                  # computed for another source
        hmac_srv6(["fc00:1::e", "fc00:2::1", "fc00:3::1"], sl=2, keyid=101),
        hmac_srv6(["fc00:1::e"] + [f"fc00:2::{k}" for k in range(1, 14)], sl=13),   # 14 segments
        hmac_srv6(["fc00:1::e"] + [f"fc00:2::{k}" for k in range(1, 15)], sl=14),   # 15: too long
        hmac_srv6(["fc00:1::a", "fc00:2::1"]),                     # End PSP
        hmac_srv6(["fc00:1::a", "fc00:2::1"], corrupt=True),
        hmac_srv6(["fc00:2::1", "fc00:1::13"], sl=0, inner=in6),   # End.DX6: decap checks it
        hmac_srv6(["fc00:2::1", "fc00:1::13"], sl=0, inner=in6, corrupt=True),
        hmac_srv6(["fc00:5::1", "fc00:2::1"]),                     # ipv6_srh_rcv (no seg6local)
        hmac_srv6(["fc00:5::1", "fc00:2::1"], keyid=101, corrupt=True),
        hmac_srv6(["fc00:1::27", "fc00:2::9"]),                    # End.B6 with an HMAC policy
        hmac_srv6(["fc00:1::28", "fc00:2::9"], keyid=101),         # End.B6.Encaps, sha1 policy
        bytes(srv6(["fc00:1::27", "fc00:2::9"])), bytes(srv6(["fc00:1::28", "fc00:2::9"])),
        bytes(srv6(["fc00:1::29", "fc00:2::9"])),                  # policy key missing: dropped
    ]
    return pkts


@pytest.mark.parametrize("require", [-1, 0, 1])
def test_hmac_validation_against_kernel(require):
    try:
        from .kernel_oracle import KernelOracle, oracle_available
    except ImportError:  # pragma: no cover
        from kernel_oracle import KernelOracle, oracle_available
    ok, reason = oracle_available()
    if not ok:
        pytest.skip(reason)
    cfg = HMAC_CFG + f"sysctl -w net.ipv6.conf.tun0.seg6_require_hmac={require}\n"
    with KernelOracle() as k:
        k.configure(cfg)
        r = Router()
        r.configure(cfg)
        pkts = _hmac_packets()
        problems = compare(k, r, "tun0", pkts)
        assert not problems, format_problems(problems)
        # and what fastpath decided, beyond agreeing with the kernel
        b = __import__("fastpath").Batch.from_packets(pkts, iif="tun0")
        r.process(b)
        res = b.results()
        valid = res[0].verdict
        assert valid == "forward" and res[1].verdict == "forward"
        bad = {"corrupt": res[2], "unknown key": res[3], "other source": res[8], "15 segs": res[11]}
        for what, x in bad.items():
            if require >= 0:
                assert (x.verdict, x.reason) == ("drop", "hmac_invalid"), what
            else:
                assert x.verdict == "forward", what
        assert res[4].verdict == ("drop" if require == 1 else "forward")
        assert r.counters()["reasons"].get("hmac_invalid", 0) > 0 or require < 0

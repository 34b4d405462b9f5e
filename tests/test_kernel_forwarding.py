"""Forwarding, unroutable destinations, ICMP errors and malformed packets
compared byte for byte with the running Linux kernel (see kernel_compare.py).
Skipped, with the reason, where namespaces/TUN are not available."""
import ipaddress
import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6, IPv6ExtHdrHopByHop

from fastpath import Router

pytestmark = pytest.mark.kernel   # compares with the running kernel (tests/conftest.py)

try:
    from .kernel_compare import check, configured_pair, mask_kernel_chosen
except ImportError:  # pragma: no cover
    from kernel_compare import check, configured_pair, mask_kernel_chosen

CFG = """
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip -6 addr add 2001:db8:3::1/64 dev tun2
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip addr add 10.0.3.1/24 dev tun2
ip link set tun2 mtu 1300
ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev tun1
ip -6 route add 2001:db8:98::/48 dev tun2
ip -6 route add 2001:db8:97::/48 via 2001:db8:3::2 dev tun2 mtu 1280
ip -6 route add blackhole 2001:db8:a::/48
ip -6 route add prohibit 2001:db8:b::/48
ip -6 route add unreachable 2001:db8:c::/48
ip -6 route add 2001:db8:d::/48 via 2001:db8:2::2 dev tun1 table 100
ip -6 rule add from 2001:db8:1::100/128 table 100 pref 1000
ip route add 192.0.2.0/24 via 10.0.2.2 dev tun1
ip route add 198.51.100.0/24 dev tun2
ip route add blackhole 198.18.1.0/24
ip route add prohibit 198.18.2.0/24
ip route add unreachable 198.18.3.0/24
ip route add 10.64.0.0/10 via 10.0.1.2 dev tun0
"""

# ip_error() rate-limits ICMPv4 errors per source address (inet_peer tokens,
# net.ipv4.route.error_cost/error_burst, not per namespace): give every
# random IPv4 packet a source of its own so the kernel's answer is
# deterministic.
_SOURCES = itertools.count(1)


def _unique_source(pkt: bytes) -> bytes:
    if pkt[0] >> 4 != 4:
        return pkt
    p = IP(pkt)
    p.src = str(ipaddress.IPv4Address((10 << 24) | (64 << 16) + next(_SOURCES) % (1 << 22)))
    del p.chksum
    if p.haslayer(UDP):
        del p[UDP].chksum
    if p.haslayer(TCP):
        del p[TCP].chksum
    return bytes(p)


@pytest.fixture
def pair(kernel_oracle):
    return configured_pair(kernel_oracle, CFG)


def u6(dst, src="2001:db8:1::2", hlim=64, n=8, **kw):
    return IPv6(src=src, dst=dst, hlim=hlim, **kw) / UDP(sport=4000, dport=5000) / (b"q" * n)


def u4(dst, src="10.0.1.2", ttl=64, n=8, flags="DF", tos=0):
    return IP(src=src, dst=dst, ttl=ttl, flags=flags, tos=tos, id=7) / UDP(sport=4000, dport=5000) / (b"q" * n)


def test_ipv6_forward_and_errors(pair):
    check(pair, [
        u6("2001:db8:99::1"), u6("2001:db8:99::1", hlim=1), u6("2001:db8:99::1", hlim=0),
        u6("2001:db8:99::1", hlim=2), u6("2001:db8:98::1"), u6("2001:db8:2::2"),
        u6("2001:db8:77::1"),                       # no route: unreachable
        u6("2001:db8:77::1", src="2001:db8:44::1"),  # no route back: silence
        u6("2001:db8:a::1"), u6("2001:db8:b::1"), u6("2001:db8:c::1"),
        u6("2001:db8:d::1"), u6("2001:db8:d::1", src="2001:db8:1::100"),
        u6("2001:db8:99::1", tc=0xb8, fl=0x12345),
        u6("2001:db8:99::1", src="2001:db8:3::7"),  # source on another interface
    ])


def test_ipv6_mtu_edges(pair):
    # tun2 mtu 1300; route 2001:db8:97::/48 mtu 1280
    check(pair, [u6("2001:db8:98::1", n=1300 - 48), u6("2001:db8:98::1", n=1300 - 47),
                 u6("2001:db8:97::1", n=1280 - 48), u6("2001:db8:97::1", n=1280 - 47),
                 u6("2001:db8:98::1", n=1400), u6("2001:db8:98::1", n=1400, hlim=1)])


def test_ipv6_hop_by_hop(pair):
    base = IPv6(src="2001:db8:1::2", dst="2001:db8:99::1")
    pkts = [base / IPv6ExtHdrHopByHop() / UDP()]
    for t in (0x1E, 0x5E, 0x9E, 0xDE):
        raw = bytearray(bytes(base / IPv6ExtHdrHopByHop() / UDP()))
        raw[42:48] = bytes([t, 4, 0, 0, 0, 0])
        pkts.append(bytes(raw))
    check(pair, pkts)


def test_ipv6_local_and_martians(pair):
    check(pair, [u6("2001:db8:1::1"), u6("2001:db8:2::1"), u6("2001:db8:1::"),
                 u6("::1"), u6("2001:db8:99::1", src="::1"), u6("2001:db8:99::1", src="ff02::1"),
                 u6("ff01::1"), u6("2001:db8:99::1", src="::"),
                 u6("2001:db8:99::1", src="::ffff:10.0.0.1"),
                 IPv6(src="2001:db8:1::2", dst="2001:db8:77::1") / ICMPv6EchoRequest(),
                 # an ICMPv6 error is never answered with one
                 bytes(IPv6(src="2001:db8:1::2", dst="2001:db8:77::1", nh=58)
                       / (bytes.fromhex("0300fcff00000000") + bytes(48)))])


def test_ipv6_truncated_and_padded(pair):
    p = bytes(u6("2001:db8:99::1"))
    check(pair, [p[:40], p[:47], p + b"\x00" * 7, p[:-1]])


def test_ipv4_forward_and_errors(pair):
    # ip_error() rate-limits per source (burst of 5): vary the sources
    pkts = [u4("192.0.2.1"), u4("192.0.2.1", ttl=1), u4("192.0.2.1", ttl=0, src="10.0.1.3"),
            u4("192.0.2.1", ttl=2), u4("198.51.100.9"), u4("10.0.2.2"),
            u4("203.0.113.1", src="10.0.1.4"), u4("203.0.113.1", src="172.16.0.1"),
            u4("198.18.1.1", src="10.0.1.5"), u4("198.18.2.1", src="10.0.1.6"),
            u4("198.18.3.1", src="10.0.1.7"), u4("192.0.2.1", tos=0xb8)]
    check(pair, pkts)


def test_ipv4_mtu_and_local(pair):
    check(pair, [u4("198.51.100.9", n=1300 - 28), u4("198.51.100.9", n=1300 - 27, src="10.0.1.8"),
                 u4("198.51.100.9", n=1400, src="10.0.1.9"), u4("10.0.1.1"), u4("10.0.2.1"),
                 u4("127.0.0.1"), u4("192.0.2.1", src="127.0.0.1"), u4("192.0.2.1", src="10.0.2.1")])


def test_ipv4_checksum_edges(pair):
    rng = random.Random(5)
    pkts = []
    for k in range(40):
        p = IP(src="10.0.1.2", dst="192.0.2.1", ttl=rng.randrange(2, 256), id=rng.randrange(65536)) / UDP() / b"z"
        pkts.append(p)
    check(pair, pkts)


@st.composite
def random_packet(draw):
    fam = draw(st.sampled_from([4, 6]))
    if fam == 6:
        dst = draw(st.sampled_from(["2001:db8:99::1", "2001:db8:98::2", "2001:db8:77::3", "2001:db8:a::1",
                                    "2001:db8:b::1", "2001:db8:2::1", "2001:db8:97::1", "2001:db8:d::1"]))
        src = draw(st.sampled_from(["2001:db8:1::2", "2001:db8:1::100", "2001:db8:3::9", "2001:db8:66::1"]))
        p = IPv6(src=src, dst=dst, hlim=draw(st.sampled_from([0, 1, 2, 64, 255])),
                 tc=draw(st.integers(0, 255)), fl=draw(st.integers(0, 0xFFFFF)))
        l4 = draw(st.sampled_from(["udp", "tcp", "raw"]))
    else:
        dst = draw(st.sampled_from(["192.0.2.1", "198.51.100.2", "203.0.113.3", "10.0.2.1", "198.18.2.1"]))
        src = "10.0.1.2"             # replaced by a unique one, see _unique_source
        p = IP(src=src, dst=dst, ttl=draw(st.sampled_from([0, 1, 2, 64])), id=draw(st.integers(0, 65535)),
               flags=draw(st.sampled_from(["DF", ""])), tos=draw(st.integers(0, 255)))
        l4 = draw(st.sampled_from(["udp", "tcp"]))
    n = draw(st.integers(0, 1500))
    if l4 == "udp":
        p = p / UDP(sport=draw(st.integers(1, 65535)), dport=9) / (b"u" * n)
    elif l4 == "tcp":
        p = p / TCP(sport=draw(st.integers(1, 65535)), dport=9) / (b"t" * n)
    else:
        p = p / (b"r" * n)
    return bytes(p)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(random_packet(), min_size=1, max_size=10))
def test_random_packets_against_kernel(pair, pkts):
    check(pair, [_unique_source(p) for p in pkts])


def test_ipv4_fragmentation_matches_kernel(pair):
    """DF clear and larger than the MTU: ip_fragment, every fragment compared."""
    oracle, r = pair
    from fastpath import Batch
    for n, mtu_dst in ((1400, "198.51.100.9"), (1273, "198.51.100.9"), (3000, "198.51.100.9"),
                       (2000, "192.0.2.1")):
        p = bytes(IP(src="10.0.1.2", dst=mtu_dst, ttl=9, id=77, flags=0) / UDP() / (b"f" * n))
        b = Batch.from_packets([p], iif="tun0")
        r.process(b)
        (res,) = b.results()
        got = oracle.send("tun0", p, wait=0.02)
        if len(p) <= 1500 and mtu_dst == "192.0.2.1":
            assert res.fragments == () and [("tun1", res.data)] == got
            continue
        assert res.verdict == "forward" and res.data == res.fragments[0]
        assert [(res.oif, f) for f in res.fragments] == got


def test_icmp_rate_limits_match_the_kernel():
    """With the kernel's default rate limits switched back on (1 s per
    destination, scaled by the route's prefix length; the default masks),
    a burst of errors gets the same first messages through, timed by the
    packets' timestamps in fastpath and by the wall clock in the kernel."""
    try:
        from .kernel_oracle import KernelOracle, oracle_available
    except ImportError:  # pragma: no cover
        from kernel_oracle import KernelOracle, oracle_available
    ok, reason = oracle_available(seg6=False)
    if not ok:
        pytest.skip(reason)
    from fastpath import Batch
    limits = {"net.ipv6.icmp.ratelimit": "1000", "net.ipv6.icmp.ratemask": "0-1,3-127",
              "net.ipv4.icmp_ratelimit": "1000", "net.ipv4.icmp_ratemask": "6168"}
    cfg = CFG + "sysctl -w net.ipv6.icmp.ratelimit=1000\nsysctl -w net.ipv4.icmp_ratelimit=1000\n"
    pkts6 = [bytes(u6("2001:db8:99::1", hlim=1)) for _ in range(10)]
    pkts4 = [bytes(u4("192.0.2.1", ttl=1)) for _ in range(10)]
    with KernelOracle(sysctls=limits) as k:
        k.configure(CFG)
        got6 = [k.send("tun0", p, wait=0.005) for p in pkts6]
        got4 = [k.send("tun0", p, wait=0.005) for p in pkts4]
    r = Router()
    r.configure(cfg)
    ts = [k * 5_000_000 for k in range(10)]          # 5 ms apart, as sent above
    b6 = Batch.from_packets(pkts6, iif="tun0", timestamps_ns=ts)
    b4 = Batch.from_packets(pkts4, iif="tun0", timestamps_ns=ts)
    r.process(b6)
    r.process(b4)
    sent6 = [x.verdict == "icmp" for x in b6.results()]
    sent4 = [x.verdict == "icmp" for x in b4.results()]
    assert sent6 == [bool(g) for g in got6]
    assert sent4 == [bool(g) for g in got4]
    assert sent6 == [True] * 6 + [False] * 4       # /64 back route: 250 ms a token, 6 in the bucket
    assert [x.reason for x in b6.results()][6:] == ["icmp_suppressed"] * 4


def _ip_error_oracle():
    """KernelOracle and the kernel's error_cost and error_burst (jiffies), or a
    skip: no oracle here, or a kernel whose values are not a HZ 250 one's
    defaults (fastpath counts jiffies of 4 ms)."""
    try:
        from .kernel_oracle import KernelOracle, oracle_available
    except ImportError:  # pragma: no cover
        from kernel_oracle import KernelOracle, oracle_available
    ok, reason = oracle_available(seg6=False)
    if not ok:
        pytest.skip(reason)
    try:
        with open("/proc/sys/net/ipv4/route/error_cost") as f1, \
                open("/proc/sys/net/ipv4/route/error_burst") as f2:
            cost, burst = int(f1.read()), int(f2.read())
    except OSError as e:
        pytest.skip(f"net.ipv4.route.error_cost not readable here: {e}")
    if (cost, burst) != (250, 1250):
        pytest.skip(f"error_cost/error_burst are {cost}/{burst} jiffies here, not a HZ 250 "
                    "kernel's defaults (fastpath counts jiffies of 4 ms)")
    return KernelOracle, cost, burst


# (Unreachables in icmp_ratemask with icmp_ratelimit 0 are not compared here:
# icmpv4_xrlim_allow() leaves the bucket ip_error() has just updated alone only
# when no jiffy ticked in between -- observed so on an idle machine, but a
# tick between the two, likelier under load, empties it.  fastpath models the
# no-tick case: test_datapath.py::test_ip_error_limiter_is_timed_by_packet_timestamps.)
@pytest.mark.parametrize("limits", [
    {},                                                              # the oracle's: ratemask 0
    {"net.ipv4.icmp_ratelimit": "1000", "net.ipv4.icmp_ratemask": "6168"},
], ids=["ip_error-alone", "ratelimit"])
def test_ip_error_limiter_matches_the_kernel(limits):
    """ip_error()'s per-source limiter of IPv4 unreachables: on in the
    kernel (net.ipv4.route.error_cost / error_burst exist in the initial
    namespace only, and apply to every one), off in fastpath unless set.
    The same source sends 8 packets to an unroutable destination 5 ms apart,
    then one more 1.1 s later: the same errors come out."""
    import time
    KernelOracle, cost, burst = _ip_error_oracle()
    from fastpath import Batch
    p = bytes(u4("203.0.113.9", src="10.64.3.7"))       # no route: net unreachable
    with KernelOracle(sysctls=limits) as k:
        k.configure(CFG)
        got = [k.send("tun0", p, wait=0.005) for _ in range(8)]
        time.sleep(1.1)
        got.append(k.send("tun0", p, wait=0.005))
    r = Router()
    r.configure(CFG + f"sysctl -w net.ipv4.route.error_cost={cost}\n"
                f"sysctl -w net.ipv4.route.error_burst={burst}\n"
                + "".join(f"sysctl -w {n}={v}\n" for n, v in limits.items())
                + ("sysctl -w net.ipv4.icmp_ratemask=0\n" if not limits else ""))
    ts = [k * 5_000_000 for k in range(8)] + [35_000_000 + 1_100_000_000]
    b = Batch.from_packets([p] * len(ts), iif="tun0", timestamps_ns=ts)
    r.process(b)
    assert [x.verdict == "icmp" for x in b.results()] == [bool(g) for g in got]
    assert [mask_kernel_chosen(x.data) for x in b.results() if x.verdict == "icmp"] == \
        [mask_kernel_chosen(g[0][1]) for g in got if g]


@pytest.mark.parametrize("ratemask", ["0", "6168"])
def test_ip_error_shares_its_bucket_with_the_icmp_limit_like_the_kernel(ratemask):
    """A Time Exceeded between unreachables of one source: with the type in
    icmp_ratemask (icmp_ratelimit 0) it empties the inet_peer bucket that
    ip_error() counts on.  (Before it, with the mask, a jiffy ticking between
    ip_error() and icmpv4_xrlim_allow() can empty the bucket early in the
    kernel -- see above -- so the first three are held to fastpath's answers
    only where the kernel sent them.)"""
    KernelOracle, _, _ = _ip_error_oracle()
    from fastpath import Batch
    unreach = bytes(u4("203.0.113.9", src="10.64.3.9"))
    expiring = bytes(u4("192.0.2.1", src="10.64.3.9", ttl=1))
    pkts = [unreach] * 3 + [expiring] + [unreach] * 3
    with KernelOracle(sysctls={"net.ipv4.icmp_ratemask": ratemask}) as k:
        k.configure(CFG)
        got = [k.send("tun0", p, wait=0.005) for p in pkts]
    r = Router()
    r.configure(CFG + "sysctl -w net.ipv4.route.error_cost=250\n"
                f"sysctl -w net.ipv4.icmp_ratemask={ratemask}\n")
    b = Batch.from_packets(pkts, iif="tun0", timestamps_ns=[k * 5_000_000 for k in range(len(pkts))])
    r.process(b)
    sent = [x.verdict == "icmp" for x in b.results()]
    kernel = [bool(g) for g in got]
    assert sent[3:] == kernel[3:]
    assert all(s for s, k in zip(sent[:3], kernel[:3]) if k) and kernel[0]
    assert kernel != [True] * len(pkts)       # the limiter did something

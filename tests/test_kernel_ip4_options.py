"""IPv4 options (record route, timestamps, router alert, NOP/EOL, unknown
options, malformed ones, source routes) forwarded, answered with ICMP
errors and fragmented, compared byte for byte with the running kernel.

The kernel writes the time of day into timestamp options; those fields
(and the header checksums that cover them) are masked on both sides.
Skipped, with the reason, where namespaces/TUN are not available."""
import ipaddress
import itertools

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from scapy.layers.inet import IP, UDP

from fastpath import Batch, Router
from fastpath.router import _ip_checksum

pytestmark = pytest.mark.kernel   # compares with the running kernel (tests/conftest.py)

try:
    from .kernel_compare import check, configured_pair
except ImportError:  # pragma: no cover
    from kernel_compare import check, configured_pair

CFG = """
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip addr add 10.0.3.1/24 dev tun2
ip link set tun2 mtu 1300
ip route add 192.0.2.0/24 via 10.0.2.2 dev tun1
ip route add 198.51.100.0/24 dev tun2
ip route add 203.0.113.0/24 via 10.0.3.2 dev tun2 src 10.0.3.1
ip route add blackhole 198.18.1.0/24
ip route add prohibit 198.18.2.0/24
ip route add 10.64.0.0/10 via 10.0.1.2 dev tun0
"""

_SOURCES = itertools.count(1)


def _src():
    # ip_error() and ICMP rate limits are per source: one source a packet
    return str(ipaddress.IPv4Address((10 << 24) | (64 << 16) + next(_SOURCES) % (1 << 22)))


def _mask_ts_header(b: bytearray, at: int) -> bool:
    """Zero the time fields of a timestamp option in the IPv4 header at
    ``at`` (every 4-byte time slot below its pointer) and the checksum."""
    if len(b) < at + 20 or b[at] >> 4 != 4:
        return False
    end = min(at + (b[at] & 15) * 4, len(b))
    k = at + 20
    seen = False
    while k < end:
        t = b[k]
        if t == 0:
            break
        if t == 1:
            k += 1
            continue
        if k + 1 >= end or b[k + 1] < 2:
            break
        n = b[k + 1]
        if t == 68 and n >= 4 and k + 3 < end:
            seen = True
            ptr, flag = b[k + 2], b[k + 3] & 15
            step = 4 if flag == 0 else 8
            first = 4 if flag == 0 else 8            # offset of the first time slot
            j = first
            while j + 4 <= min(n, ptr - 1) and k + j + 4 <= end:
                b[k + j:k + j + 4] = bytes(4)
                j += step
        k += n
    if seen:
        b[at + 10:at + 12] = b"\0\0"
    return seen


def mask_timestamps(pkt: bytes) -> bytes:
    b = bytearray(pkt)
    if len(b) >= 20 and b[0] >> 4 == 4:
        _mask_ts_header(b, 0)
        hl = (b[0] & 15) * 4
        if b[9] == 1 and len(b) >= hl + 28 and b[hl] in (3, 11, 12):
            if _mask_ts_header(b, hl + 8):           # the quoted header
                b[hl + 2:hl + 4] = b"\0\0"           # and the ICMP checksum over it
    return bytes(b)


@pytest.fixture
def pair(kernel_oracle):
    return configured_pair(kernel_oracle, CFG)


def with_opts(dst, opts: bytes, ttl=64, n=8, flags="DF", src=None):
    """A UDP packet with raw option bytes (padded with EOL to 4 bytes)."""
    opts = opts + b"\0" * (-len(opts) % 4)
    p = IP(src=src or _src(), dst=dst, ttl=ttl, flags=flags, id=9, options=[]) / UDP(sport=1, dport=2) / (b"o" * n)
    raw = bytearray(bytes(p))
    hdr = bytearray(raw[:20]) + opts
    hdr[0] = 0x40 | (len(hdr) // 4)
    body = raw[20:]
    hdr[2:4] = (len(hdr) + len(body)).to_bytes(2, "big")
    hdr[10:12] = b"\0\0"
    hdr[10:12] = _ip_checksum(bytes(hdr)).to_bytes(2, "big")
    return bytes(hdr + body)


RR9 = bytes([7, 39, 4]) + bytes(36)                 # ping -R: nine empty slots
RR1 = bytes([7, 7, 4, 0, 0, 0, 0])
RR_FULL = bytes([7, 7, 8, 1, 2, 3, 4])
TS_ONLY = bytes([68, 12, 5, 0]) + bytes(8)
TS_ADDR = bytes([68, 20, 5, 1]) + bytes(16)
TS_FULL = bytes([68, 8, 9, 0x20, 0, 0, 0, 1])       # full: the overflow counter counts
TS_PRESPEC = bytes([68, 20, 5, 3, 10, 0, 2, 1, 0, 0, 0, 0, 192, 0, 2, 9, 0, 0, 0, 0])
RA = bytes([148, 4, 0, 0])


def test_forwarded_options(pair):
    pkts = [with_opts("192.0.2.1", o) for o in
            (RR9, RR1, RR_FULL, TS_ONLY, TS_ADDR, TS_FULL, TS_PRESPEC, RA,
             b"\x01\x01\x01\x01", b"\x01" + RR1, b"\x00\x01\x02\x03",        # EOL, then junk: made EOL
             bytes([130, 11]) + bytes(9),                                   # security (unknown here)
             bytes([30, 4, 1, 2]),                                          # an unknown option
             RR1 + TS_ONLY, RA + RR9[:35] + bytes([0]))]
    pkts += [with_opts("198.51.100.7", RR9), with_opts("203.0.113.5", RR9), with_opts("203.0.113.5", TS_ADDR)]
    check(pair, pkts, mask=mask_timestamps)


def test_errors_echo_the_options(pair):
    pkts = [with_opts("192.0.2.1", RR9, ttl=1), with_opts("192.0.2.1", TS_ADDR, ttl=1),
            with_opts("192.0.2.1", TS_ONLY, ttl=1), with_opts("192.0.2.1", RR_FULL, ttl=1),
            with_opts("192.0.2.1", RA, ttl=1),
            with_opts("198.51.100.7", RR9, n=1400),                         # frag needed (DF)
            with_opts("203.0.113.7", RR1), with_opts("198.18.2.1", RR9),    # no route / prohibit
            with_opts("198.18.1.1", RR9)]
    check(pair, pkts, mask=mask_timestamps)


def test_malformed_options_get_a_parameter_problem(pair):
    bad = [bytes([7, 2, 4]),                   # RR too short
           bytes([7, 7, 3, 0, 0, 0, 0]),        # pointer < 4
           bytes([7, 7, 5, 0, 0, 0, 0]),        # pointer not leaving 4 bytes
           RR1 + RR1,                           # two RRs
           bytes([68, 3, 5]),                   # TS too short
           bytes([68, 8, 4, 0, 0, 0, 0, 0]),    # TS pointer < 5
           bytes([68, 8, 9, 0xF0, 0, 0, 0, 0]),  # TS overflow at 15
           bytes([68, 12, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0]),  # TS with addresses: no room
           bytes([148, 2]),                     # RA too short
           bytes([30, 9, 0]),                   # length beyond the header
           bytes([30, 1, 0, 0]),                # length < 2
           TS_ONLY + bytes([7, 2, 4, 0]),       # error after a good TS: echoed
           RR1 + bytes([30])]                   # option cut at the end
    pkts = [with_opts("192.0.2.1", o) for o in bad]
    pkts += [with_opts("10.0.1.1", bytes([7, 2, 4, 0]))]       # to us
    check(pair, pkts, mask=mask_timestamps)


def test_source_routes_are_dropped(pair):
    lsrr = bytes([131, 11, 4, 192, 0, 2, 1, 192, 0, 2, 2])
    ssrr = bytes([137, 7, 4, 192, 0, 2, 1])
    pkts = [with_opts("192.0.2.1", lsrr), with_opts("192.0.2.1", ssrr), with_opts("10.0.1.1", lsrr)]
    check(pair, pkts, mask=mask_timestamps)
    b = Batch.from_packets(pkts[:2], iif="tun0")
    pair[1].process(b)
    assert [x.reason for x in b.results()] == ["source_route"] * 2


def test_fragments_keep_only_copied_options(pair):
    oracle, r = pair
    for opts in (RR9, RA + RR1, TS_ONLY + RA):
        p = with_opts("198.51.100.9", opts, n=2000, flags="")
        b = Batch.from_packets([p], iif="tun0")
        r.process(b)
        (res,) = b.results()
        got = oracle.send("tun0", p, wait=0.02)
        assert len(res.fragments) == 2
        assert [(res.oif, mask_timestamps(f)) for f in res.fragments] == \
            [(i, mask_timestamps(g)) for i, g in got]


def test_timestamps_are_the_packets_time_of_day():
    r = Router()
    r.configure(CFG)
    ts = (86400 * 3 + 3600) * 10**9 + 250_000_000     # 01:00:00.250 UTC
    b = Batch.from_packets([with_opts("192.0.2.1", TS_ONLY, src="10.0.1.2")], iif="tun0", timestamps_ns=[ts])
    r.process(b)
    (res,) = b.results()
    assert res.verdict == "forward"
    assert int.from_bytes(res.data[24:28], "big") == 3600 * 1000 + 250
    assert res.data[22] == 9                          # the pointer moved past it


_OPTS = st.sampled_from([RR9, RR1, RR_FULL, TS_ONLY, TS_ADDR, TS_FULL, TS_PRESPEC, RA, b"\x01", b"\x00",
                         bytes([30, 4, 1, 2]), bytes([7, 7, 3, 0, 0, 0, 0]), bytes([68, 8, 9, 0xF0, 0, 0, 0, 0])])


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(_OPTS, min_size=1, max_size=3), st.binary(max_size=6),
                          st.sampled_from(["192.0.2.1", "198.51.100.2", "203.0.113.3", "10.0.2.1", "198.18.2.1",
                                           "10.0.1.1"]),
                          st.sampled_from([1, 2, 64]), st.sampled_from(["DF", ""]),
                          st.sampled_from([8, 1290, 1600])), min_size=1, max_size=6))
def test_random_options_against_kernel(pair, cases):
    pkts = []
    for opts, junk, dst, ttl, flags, n in cases:
        o = b"".join(opts) + junk
        if len(o) > 40:
            o = o[:40]
        pkts.append(with_opts(dst, o, ttl=ttl, flags=flags, n=n))
    check(pair, pkts, mask=mask_timestamps)

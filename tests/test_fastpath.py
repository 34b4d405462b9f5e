"""The fast path against the general path.

The fast path (``fast_path`` in pyx/datapath/fast_path.pxi) takes the common cases
(IPv6 forwarding to a unicast route; End and End.X without flavors;
End.DX4/DT4/DX6/DT6 of a packet right after the outer header) in one pass,
and hands everything else to the general path untouched.  The general path
is the reference here (it is the one checked against the kernel in
test_kernel_*.py, which run with the fast path on as well): the same
packets through a Router with the fast path and one without must give the
same bytes everywhere in the batch, the same metadata, the same counters,
the same route statistics and, in refcount mode, the same references.
Packets are made to sit on the fast path's edges: hop limits 0-2, MTUs
+-1, segments left 0..last entry + 2, inconsistent SRH lengths, TLVs,
sources and destinations of every kind, trailing bytes, VLAN tags.
"""
import ipaddress

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastpath import Batch, Router
from fastpath.tables import DST_DTYPE, PCPU_DTYPE

CFG = """
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip -6 addr add 2001:db8:3::1/64 dev tun2
ip -6 addr add 2001:db8:4::1/64 dev tun3
ip link set tun2 mtu 1400
ip link set tun3 down
ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:00:22 dev tun1
ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev tun1
ip -6 route add 2001:db8:98::/48 via 2001:db8:3::2 dev tun2
ip -6 route add 2001:db8:97::/48 via 2001:db8:2::2 dev tun1 mtu 1300
ip -6 route add 2001:db8:96::/48 via 2001:db8:4::2 dev tun3
ip -6 route add 2001:db8:95::/48 nexthop via 2001:db8:2::2 dev tun1 nexthop via 2001:db8:3::2 dev tun2
ip -6 route add 2001:db8:94::/48 dev tun1
ip -6 route add blackhole 2001:db8:a::/48
ip -6 route add unreachable 2001:db8:b::/48
ip -6 route add throw 2001:db8:77::/48
ip -6 route add 2001:db8:77::/48 via 2001:db8:3::2 dev tun2 table 253
ip -6 route add fc00::e/128 encap seg6local action End count dev tun0
ip -6 route add fc00::f/128 encap seg6local action End dev tun0
ip -6 route add fc00::a/128 encap seg6local action End flavors psp dev tun0
ip -6 route add fc00::10/128 encap seg6local action End.X nh6 2001:db8:2::2 count dev tun0
ip -6 route add fc00::11/128 encap seg6local action End.X nh6 2001:db8:2::3 oif tun1 dev tun0
ip -6 route add fc00::12/128 encap seg6local action End.X nh6 2001:db8:94::7 dev tun0
ip -6 route add fc00::13/128 encap seg6local action End.DX6 nh6 :: dev tun0
ip -6 route add fc00::14/128 encap seg6local action End.T table 254 dev tun0
ip -6 route add fc00::1d/128 encap seg6 mode encap segs fc00::e,2001:db8:99::1 dev tun1
ip -6 route add fc00::15/128 encap seg6local action End.DX4 nh4 10.0.2.2 dev tun0
ip -6 route add fc00::16/128 encap seg6local action End.DT4 vrftable 100 count dev tun0
ip -6 route add fc00::17/128 encap seg6local action End.DT6 table 254 dev tun0
ip -6 route add fc00::18/128 encap seg6local action End.B6 srh segs fc00::f,2001:db8:99::8 dev tun0
ip -6 route add fc00::19/128 encap seg6local action End flavors next-csid dev tun0
ip -6 route add fc00::1a/128 encap seg6local action End.DX6 nh6 2001:db8:2::2 dev tun0
ip -6 route add fc00::1b/128 encap seg6local action End.DT6 table 100 count dev tun0
ip -6 route add 2001:db8:98::/48 via 2001:db8:3::2 dev tun2 table 100
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip route add 192.0.2.0/24 via 10.0.2.2 dev tun1
ip route add 192.0.2.0/24 via 10.0.2.2 dev tun1 table 100
ip addr add 10.0.3.1/24 dev tun2
ip neigh add 10.0.2.2 lladdr 02:00:00:00:00:23 dev tun1
ip route add 198.51.100.0/24 via 10.0.2.2 dev tun1 mtu 1300
ip route add 203.0.113.0/24 nexthop via 10.0.2.2 dev tun1 nexthop via 10.0.3.2 dev tun2
ip route add 203.0.113.0/24 via 10.0.3.2 dev tun2 table 100
ip route add blackhole 192.0.2.128/25 table 100
ip route add 198.51.100.0/24 via 10.0.2.2 dev tun1 mtu 1300 table 100
sysctl -w net.ipv6.conf.tun1.seg6_require_hmac=1
sysctl -w net.ipv6.conf.tun2.seg6_require_hmac=-1
"""

SRC = ["2001:db8:1::2"] * 10 + ["2001:db8:2::5"] * 2 + ["::", "fe80::1", "::1", "ff02::1",
       "2001:db8:2::9", "::ffff:10.0.0.1"]
DST = ["fc00::e", "fc00::f", "fc00::10", "fc00::12", "fc00::a", "fc00::11", "fc00::13", "fc00::14",
       "fc00::15", "fc00::16", "fc00::17", "fc00::18", "fc00::19", "fc00::1a", "fc00::1b",
       "2001:db8:99::1", "2001:db8:98::1", "2001:db8:97::1", "2001:db8:96::1", "2001:db8:95::1",
       "2001:db8:95::2", "2001:db8:94::5", "2001:db8:a::1", "2001:db8:b::1", "2001:db8:1::1",
       "2001:db8:77::1", "ff02::1", "ff0e::1", "::1", "::", "fc00::1d"]
SEGS = ["2001:db8:99::1", "2001:db8:98::1", "2001:db8:97::1", "2001:db8:96::1", "2001:db8:95::3",
        "2001:db8:94::5", "fc00::f", "fc00::e", "2001:db8:1::1", "2001:db8:77::1", "2001:db8:a::1",
        "::", "fe80::2", "ff02::2", "fc00::1d"]
MAC = bytes.fromhex("020000000001020000000002")


def _a(s):
    return ipaddress.IPv6Address(s).packed


def inner_packet(rng, family):
    """A decapsulated packet for End.DX4/DT4/DX6/DT6, sometimes broken."""
    pick = lambda xs: xs[int(rng.integers(len(xs)))]
    ttl = pick([64] * 6 + [0, 1, 2])
    if family == 4:
        hdr = bytearray([0x45, 0, 0, 28, 0, 0, pick([0, 0x40]), 0, ttl, 17, 0, 0])
        hdr += ipaddress.IPv4Address(pick(["10.0.1.2"] * 4 + ["0.0.0.0", "224.0.0.1", "10.0.2.1",
                                                              "127.0.0.1"])).packed
        hdr += ipaddress.IPv4Address(pick(["192.0.2.7", "192.0.2.7", "10.0.1.1", "198.51.100.1",
                                           "203.0.113.5", "203.0.113.77", "10.0.2.7", "192.0.2.200",
                                           "255.255.255.255", "10.0.3.255"])).packed
        c = sum(int.from_bytes(hdr[j:j + 2], "big") for j in range(0, 20, 2))
        while c >> 16:
            c = (c & 0xFFFF) + (c >> 16)
        hdr[10:12] = (~c & 0xFFFF).to_bytes(2, "big")
        if rng.random() < 0.05:
            hdr[0] = pick([0x44, 0x4f, 0x65])
        return bytes(hdr) + bytes(8 if rng.random() < 0.95 else int(rng.integers(1250, 1400)))
    return bytes([0x60, 0, 0, 0, 0, 8, 17, ttl]) + _a(pick(SRC)) + _a(pick(SEGS)) + bytes(8)


def make_packet(rng, ethernet=True, p_random=0.4, dsts=DST):
    """An IPv6 packet near the fast path's cases, with random defects."""
    pick = lambda xs: xs[int(rng.integers(len(xs)))]
    nh = 43 if rng.random() < 0.6 else pick([17, 0, 59, 60, 43, 4, 4, 41, 41])
    hlim = pick([64] * 8 + [0, 1, 2, 255])
    body = b""
    if nh == 43:
        n = int(rng.integers(1, 5))
        le = n - 1 if rng.random() < 0.85 else int(rng.integers(0, 6))
        hdrlen = 2 * n if rng.random() < 0.85 else int(rng.integers(0, 12))
        sl = int(rng.integers(0, n + 2)) if rng.random() < 0.2 else int(rng.integers(1, n + 1))
        rtype = 4 if rng.random() < 0.95 else pick([0, 2, 3])
        srh = bytearray([pick([59, 17, 41]), hdrlen, rtype, sl, le, 0, 0, 0])
        for _ in range(n):
            if rng.random() < p_random:
                # a destination of its own: route cache misses, lookups ahead
                srh += _a(pick(["2001:db8:99::", "2001:db8:95::", "2001:db8:77::"])) [:6] + \
                    rng.integers(0, 256, 10, dtype=np.uint8).tobytes()
            else:
                srh += _a(pick(SEGS))
        if rng.random() < 0.1:           # TLVs: PadN, or an HMAC TLV
            if rng.random() < 0.5:
                srh += bytes([4, 6]) + bytes(6)
            else:
                srh += bytes([5, 38, 0, 0, 0, 0, 0, 7]) + bytes(32)
                srh[5] = 8
            srh[1] = (len(srh) >> 3) - 1 if rng.random() < 0.9 else srh[1]
        body = bytes(srh)
    if nh == 43 and rng.random() < 0.3:       # an inner packet after the SRH
        body = bytes([pick([4, 41])]) + body[1:]
    if nh in (4, 41) or body[:1] in (b"\x04", b"\x29"):
        body += inner_packet(rng, 4 if (nh == 4 or body[:1] == b"\x04") else 6)
    body += bytes(int(rng.integers(0, 40))) if rng.random() < 0.9 else bytes(int(rng.integers(1250, 1400)))
    plen = len(body)
    r = rng.random()
    if r < 0.05:
        plen = 0
    elif r < 0.1:
        plen = len(body) + int(rng.integers(1, 9))
    elif r < 0.15:
        plen = max(0, len(body) - int(rng.integers(1, 9)))
    hdr = bytes([0x60, 0, 0, int(rng.integers(0, 256))]) + plen.to_bytes(2, "big") + bytes([nh, hlim])
    pkt = hdr + _a(pick(SRC)) + _a(pick(dsts)) + body
    if rng.random() < 0.1:
        pkt += bytes(int(rng.integers(1, 20)))       # trailing bytes (trimmed to the IP length)
    if not ethernet:
        return pkt
    if rng.random() < 0.1:
        return MAC + b"\x81\x00" + int(rng.integers(0, 4096)).to_bytes(2, "big") + b"\x86\xdd" + pkt
    return MAC + b"\x86\xdd" + pkt


RULES = """
ip -6 rule add from 2001:db8:2::/64 table 100 pref 100
ip rule add from 10.0.1.0/24 table 100 pref 100
ip -6 route add 2001:db8:99::/48 via 2001:db8:3::2 dev tun2 table 100
"""


def _routers(mode, extra=""):
    out = []
    for fast in (True, False):
        r = Router(mode=mode)
        r.configure(CFG + extra)
        r.fast = fast
        out.append(r)
    return out


def _stats(r):
    """Per route: lookups counted (shared entry + this worker's unflushed
    copy) and references held."""
    d = r._tables.dsts.view(DST_DTYPE) if r._tables.dsts.dtype != DST_DTYPE else r._tables.dsts
    pc = np.asarray(r._dp.pcpu_records()).view(PCPU_DTYPE).reshape(-1)
    n = min(len(d), len(pc))
    use = d["use"][:n].astype(np.int64) + pc["use"][:n].astype(np.int64)
    ref = d["refcnt"][:n].astype(np.int64) + pc["refcnt"][:n].astype(np.int64)
    return use, ref


def _same(pkts, iifs, mode="noref", linktype="ethernet", extra=""):
    fast, slow = _routers(mode, extra)
    assert fast.fast and not slow.fast
    batches = []
    for r in (fast, slow):
        b = Batch.from_packets(pkts, iif=iifs, linktype=linktype)
        r.process(b)
        batches.append(b)
    a, b = batches
    for f in ("data", "start", "length", "l2len", "oif", "nexthop", "verdict", "reason", "dst"):
        x, y = getattr(a, f), getattr(b, f)
        if not np.array_equal(x, y):
            bad = np.flatnonzero((x != y).reshape(len(pkts), -1).any(axis=1))
            i = int(bad[0])
            raise AssertionError(f"{f} differs for packet {i} (iif {iifs[i]}): {pkts[i][:120].hex()}\n"
                                 f"fast: {a.results()[i]}\ngeneral: {b.results()[i]}")
    assert fast.counters() == slow.counters()
    ua, ra = _stats(fast)
    ub, rb = _stats(slow)
    assert np.array_equal(ua, ub), np.flatnonzero(ua != ub)
    assert np.array_equal(ra, rb)
    ca, cb = fast._dp.cache_counters(), slow._dp.cache_counters()
    assert cb.pop("fast_packets") == 0 and cb.pop("ahead_chunks") == 0
    a.fast_packets = ca.pop("fast_packets")
    a.ahead_chunks = ca.pop("ahead_chunks")
    del ca["rcache_misses"], cb["rcache_misses"]
    assert ca == cb
    return a


def _end(sid, seg, src="2001:db8:1::2", hlim=64, l2=MAC):
    """An End frame: a two-segment SRH (SL 1) whose next segment is ``seg``."""
    return l2 + b"\x86\xdd" + bytes([0x60, 0, 0, 0, 0, 40, 43, hlim]) + _a(src) + _a(sid) \
        + bytes([59, 4, 4, 1, 1, 0, 0, 0]) + _a(seg) + _a(sid)


def _same_across(steps, pkts):
    """Routers kept across configuration changes (``steps``, applied in
    turn, "" for none): the same results batch by batch.  Returns the fast
    router's batch of each step."""
    fast, slow = _routers("noref")
    out = []
    for step in steps:
        outs = []
        for r in (fast, slow):
            if step:
                r.configure(step)
            b = Batch.from_packets(pkts, iif="tun0", linktype="ethernet")
            r.process(b)
            outs.append(b)
        for f in ("data", "start", "length", "oif", "nexthop", "verdict", "reason", "dst"):
            assert np.array_equal(getattr(outs[0], f), getattr(outs[1], f)), (step, f)
        out.append(outs[0])
    return out


IIFS = ["tun0", "tun0", "tun0", "tun1", "tun2"]


@pytest.mark.parametrize("mode", ["noref", "refcount"])
@pytest.mark.parametrize("seed", range(4))
def test_fast_path_gives_the_general_paths_results(seed, mode):
    rng = np.random.default_rng(seed)
    n = 3000
    pkts = [make_packet(rng) for _ in range(n)]
    iifs = [IIFS[int(k)] for k in rng.integers(0, len(IIFS), n)]
    b = _same(pkts, iifs, mode)
    # the campaign reaches the fast path's cases, and the general path's
    v = b.results()
    assert b.fast_packets > n // 12
    assert sum(x.verdict == "forward" for x in v) > b.fast_packets
    assert sum(x.verdict == "icmp" for x in v) > 20
    assert sum(x.verdict == "drop" for x in v) > n // 10


@pytest.mark.parametrize("mode", ["noref", "refcount"])
def test_lookups_ahead(mode):
    """End and End.X towards next segments of their own (past the route
    cache), some broken: the routes are then looked up ahead, in bulk."""
    rng = np.random.default_rng(11)
    pkts = [make_packet(rng, p_random=0.9, dsts=["fc00::e", "fc00::f", "fc00::10", "fc00::12",
                                                  "2001:db8:99::1"]) for _ in range(3000)]
    iifs = [IIFS[int(k)] for k in rng.integers(0, len(IIFS), len(pkts))]
    b = _same(pkts, iifs, mode)
    assert b.ahead_chunks > 20
    assert b.fast_packets > 500


@pytest.mark.parametrize("mode", ["noref", "refcount"])
def test_lookups_ahead_past_the_cache(mode):
    """Every next segment new (random traffic over more destinations than
    the route cache holds): the lookups ahead then leave the cache alone
    (no probe, no fill) for most chunks, and walk every second lookup."""
    rng = np.random.default_rng(12)
    pkts = []
    for k in range(4000):
        sid = ("fc00::e", "fc00::f", "fc00::10")[k % 3]
        r = 1 + int(rng.integers(1 << 32))
        seg = "2001:db8:%x::%x:%x" % ((0x99, 0x98, 0x97, 0x95, 0x77, 0xa)[k % 6], r >> 16, r & 0xFFFF)
        pkts.append(_end(sid, seg, hlim=1 if k % 97 == 0 else 64))
    b = _same(pkts, ["tun0"] * len(pkts), mode)
    assert b.ahead_chunks > 50
    assert b.fast_packets > 2000


def test_lookups_ahead_past_the_cache_then_source_rules():
    """Routers kept while a source rule arrives: the lookups ahead that were
    leaving the cache alone now walk the rules with each packet's source
    (a rule on the source turns the cache off)."""
    rng = np.random.default_rng(13)
    pkts = []
    # (not a multiple of sixteen chunks: the rule arrives while the cache
    # is being left alone)
    for k in range(2400):
        r = 1 + int(rng.integers(1 << 32))
        pkts.append(_end("fc00::f", "2001:db8:99::%x:%x" % (r >> 16, r & 0xFFFF),
                         src="2001:db8:2::5" if k % 2 else "2001:db8:1::2"))
    last = _same_across(["", RULES], pkts)[-1]
    # the rule took the packets from 2001:db8:2::/64 through table 100
    assert {x.oif for x in last.results()[1::2]} == {"tun2"}


def test_lookups_ahead_in_a_corrupt_table_miss():
    """A group chain deeper than an address (a table corrupted in memory:
    a group pointing to itself) is a miss for the lookups ahead, in bulk,
    as for the walk of one packet, and never reads past the address."""
    fast, slow = _routers("noref")
    rng = np.random.default_rng(14)
    pkts = []
    for _ in range(600):
        r = 1 + int(rng.integers(1 << 32))
        pkts.append(_end("fc00::f", "2001:db8:99::%x:%x" % (r >> 16, r & 0xFFFF)))
    outs = []
    for r in (fast, slow):
        lpm = r._tables.lpms[(6, 254)]
        e = int(lpm.tbl24[0x20010D])
        assert e >> 31                             # 2001:db8::/32 leads to a group
        g = e & 0x7FFFFF
        lpm.groups.reshape(-1, 256)[g] = e         # every entry: back to the group itself
        b = Batch.from_packets(pkts, iif="tun0", linktype="ethernet")
        r.process(b)
        outs.append(b)
    assert fast._dp.cache_counters()["ahead_chunks"] > 5
    for f in ("data", "verdict", "reason", "dst"):
        assert np.array_equal(getattr(outs[0], f), getattr(outs[1], f)), f
    # (no ICMPv6 error either: the way back to the source is in the same
    # corrupt table)
    assert {(x.verdict, x.reason) for x in outs[0].results()} == {("drop", "no_route")}


def _ipip(sid, src4, dst4, ttl, size, df):
    hdr = bytearray([0x45, 0, 0, 0, 0, 0, 0x40 if df else 0, 0, ttl, 17, 0, 0])
    hdr += _a("::ffff:" + src4)[12:] + _a("::ffff:" + dst4)[12:]
    hdr[2:4] = (20 + size).to_bytes(2, "big")
    c = sum(int.from_bytes(hdr[j:j + 2], "big") for j in range(0, 20, 2))
    while c >> 16:
        c = (c & 0xFFFF) + (c >> 16)
    hdr[10:12] = (~c & 0xFFFF).to_bytes(2, "big")
    inner = bytes(hdr) + bytes(size)
    return MAC + b"\x86\xdd" + bytes([0x60, 0, 0, 0]) + len(inner).to_bytes(2, "big") + \
        bytes([4, 64]) + _a("2001:db8:1::2") + _a(sid) + inner


def test_decap_edges():
    """End.DX4 and End.DT4 at their edges: TTL 0-2, route and device MTUs
    +-1 with and without DF, martian and local sources, every kind of
    route: the fast path's answer is the general path's."""
    pkts = []
    for sid in ("fc00::15", "fc00::16"):
        for dst in ("192.0.2.7", "198.51.100.1", "203.0.113.5", "203.0.113.77", "10.0.2.7",
                    "192.0.2.200", "10.0.1.1", "255.255.255.255", "224.0.0.5", "127.0.0.1"):
            for src in ("10.0.1.2", "10.0.2.1", "0.0.0.0"):
                for ttl in (0, 1, 2, 64):
                    for size in (8, 1279, 1280, 1281, 1481):
                        for df in (False, True):
                            pkts.append(_ipip(sid, src, dst, ttl, size, df))
    b = _same(pkts, ["tun0"] * len(pkts))
    assert b.fast_packets > len(pkts) // 20
    v = {x.reason for x in b.results()}
    assert {"pkt_too_big", "hop_limit_exceeded"} <= v, v


def _ip6ip6(sid, src, dst, hlim, size):
    inner = bytes([0x60, 0, 0, 0]) + (8 + size).to_bytes(2, "big") + bytes([17, hlim]) + \
        _a(src) + _a(dst) + bytes(8 + size)
    return MAC + b"\x86\xdd" + bytes([0x60, 0, 0, 0]) + len(inner).to_bytes(2, "big") + \
        bytes([41, 64]) + _a("2001:db8:1::2") + _a(sid) + inner


def test_decap6_edges():
    """End.DX6 (through the rules, to the inner destination or nh6) and
    End.DT6 (in a table) at their edges: hop limits 0-2, MTUs +-1, inner
    sources of every kind, every kind of route."""
    pkts = []
    for sid in ("fc00::13", "fc00::17", "fc00::1a", "fc00::1b"):
        for dst in ("2001:db8:99::1", "2001:db8:98::1", "2001:db8:97::1", "2001:db8:96::1",
                    "2001:db8:95::1", "2001:db8:94::5", "2001:db8:a::1", "2001:db8:b::1",
                    "2001:db8:1::1", "2001:db8:77::1", "fc00::f", "ff02::1", "::1"):
            for src in ("2001:db8:1::2", "::", "fe80::1", "ff02::1", "::1"):
                for hlim in (0, 1, 2, 64):
                    for size in (8, 1251, 1252, 1253, 1352, 1353, 1452, 1453):
                        pkts.append(_ip6ip6(sid, src, dst, hlim, size))
    b = _same(pkts, ["tun0"] * len(pkts))
    assert b.fast_packets > 200
    v = {x.reason for x in b.results()}
    assert {"pkt_too_big", "hop_limit_exceeded", "saddr_invalid"} <= v, v


def test_fast_path_with_source_rules():
    """A rule on the source address: no route cache, every lookup walks the
    rules (ahead as well), with the source of each packet."""
    rng = np.random.default_rng(7)
    pkts = [make_packet(rng) for _ in range(3000)]
    iifs = [IIFS[int(k)] for k in rng.integers(0, len(IIFS), len(pkts))]
    assert _same(pkts, iifs, extra=RULES).ahead_chunks > 5


def test_fast_path_raw_link():
    rng = np.random.default_rng(99)
    pkts = [make_packet(rng, ethernet=False) for _ in range(2000)]
    _same(pkts, ["tun0"] * len(pkts), linktype="raw")


def test_fast_path_takes_its_cases():
    """The fast path is really used (not silently always falling back):
    its results match, and it runs where the general path would."""
    pkt = _end("fc00::e", "2001:db8:99::1")
    fast, _ = _routers("noref")
    b = Batch.from_packets([pkt] * 64, iif="tun0", linktype="ethernet")
    fast.process(b)
    assert {x.verdict for x in b.results()} == {"forward"}
    assert fast.counters()["routes"]["fc00::e/128 table 254"]["packets"] == 64
    assert fast._dp.cache_counters()["fast_packets"] == 64
    # hop limit 1: Time Exceeded, which only the general path makes
    b = Batch.from_packets([pkt[:21] + b"\x01" + pkt[22:]] * 4, iif="tun0", linktype="ethernet")
    fast.process(b)
    assert {x.verdict for x in b.results()} == {"icmp"}
    assert fast._dp.cache_counters()["fast_packets"] == 64


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(1, 40))
def test_fast_path_property(seed, n):
    rng = np.random.default_rng(seed)
    pkts = [make_packet(rng) for _ in range(n)]
    iifs = [IIFS[int(k)] for k in rng.integers(0, len(IIFS), n)]
    _same(pkts, iifs)


ADJ = """
ip link add link tun1 name tun1.7 type vlan id 7
ip -6 addr add 2001:db8:7::1/64 dev tun1.7
ip addr add 10.0.7.1/24 dev tun1.7
ip -6 neigh add 2001:db8:7::2 lladdr 02:00:00:00:00:77 dev tun1.7
ip -6 route add 2001:db8:70::/48 via 2001:db8:7::2 dev tun1.7
ip -6 neigh add 2001:db8:3::9 lladdr 02:00:00:00:00:39 dev tun1
ip -6 neigh add 2001:db8:3::9 lladdr 02:00:00:00:00:93 dev tun2
ip neigh add 10.0.7.2 lladdr 02:00:00:00:00:72 dev tun2
ip neigh add 10.0.7.2 lladdr 02:00:00:00:00:27 dev tun1.7
ip -6 route add fc00::30/128 encap seg6local action End.X nh6 2001:db8:3::9 dev tun0
ip -6 route add fc00::31/128 encap seg6local action End.X nh6 2001:db8:7::5 dev tun0
ip -6 route add fc00::32/128 encap seg6local action End.DX4 nh4 10.0.7.2 dev tun0
ip -6 route add fc00::33/128 encap seg6local action End.DX6 nh6 2001:db8:3::9 dev tun0
"""


def test_adjacencies_and_neighbours():
    """What load resolves for the fast path (each nexthop's device, MTUs and
    Ethernet header; each End.X/DX6/DX4 nexthop's neighbour): a VLAN device
    out, frames in with and without a tag, and a nexthop address whose first
    neighbour entry is on another device than the one the route leaves by
    (the general path finds the entry on the right device)."""
    tag = bytes.fromhex("8100") + (5).to_bytes(2, "big")
    pkts = []
    for l2 in (MAC, MAC + tag):
        for seg in ("2001:db8:70::1", "2001:db8:99::1", "2001:db8:7::9", "2001:db8:3::9"):
            pkts += [_end(sid, seg, l2=l2) for sid in ("fc00::f", "fc00::30", "fc00::31")]
        for dst4 in ("10.0.7.2", "10.0.7.3", "192.0.2.1"):
            p = _ipip("fc00::32", "198.51.100.1", dst4, 64, 8, True)
            pkts.append(l2 + p[12:])
        for dst in ("2001:db8:70::1", "2001:db8:3::9", "2001:db8:7::9"):
            p = _ip6ip6("fc00::33", "2001:db8:1::2", dst, 64, 8)
            pkts.append(l2 + p[12:])
            p = _ip6ip6("fc00::13", "2001:db8:1::2", dst, 64, 8)
            pkts.append(l2 + p[12:])
    b = _same(pkts * 3, ["tun0"] * (3 * len(pkts)), extra=ADJ)
    assert b.fast_packets >= 2 * len(pkts)
    res = b.results()
    # the tagged device's frames carry its tag, whatever came in
    out7 = [k for k, x in enumerate(res) if x.verdict == "forward" and x.oif == "tun1.7"]
    assert len(out7) >= 12
    for k in out7:
        f = b.packet(k)
        assert f[12:16] == bytes.fromhex("81000007"), f[:18].hex()
    # End.X to 2001:db8:3::9 leaves by tun2: its neighbour there, not tun1's
    out2 = [k for k, x in enumerate(res) if x.verdict == "forward" and x.oif == "tun2"
            and x.nexthop == "2001:db8:3::9"]
    assert out2 and all(b.packet(k)[:6] == bytes.fromhex("020000000093") for k in out2)


def test_reconfiguration_between_batches():
    """Routers kept across configuration changes: nothing the fast path
    remembers between packets (the last destination's route, the route
    caches) outlives the tables it came from."""
    pkts = [_end("fc00::f", "2001:db8:99::1")] * 8 + [_end("fc00::f", "2001:db8:98::1")] * 8
    steps = ["",
             "ip -6 route replace fc00::f/128 encap seg6local action End.X nh6 2001:db8:3::2 dev tun0",
             "ip -6 route del fc00::f/128",
             "ip -6 route add fc00::f/128 via 2001:db8:2::2 dev tun1",
             "ip -6 route replace fc00::f/128 encap seg6local action End dev tun0\n"
             "ip -6 route replace 2001:db8:99::/48 dev tun1"]
    seen = {tuple((x.verdict, x.oif, x.nexthop) for x in b.results()) for b in _same_across(steps, pkts)}
    assert len(seen) == len(steps)


def test_table_lookups_by_table():
    """End.DT6 in two tables that route the same destination differently:
    each packet by its own table (the per-table lookup cache is keyed by
    table as well)."""
    extra = "ip -6 route add 2001:db8:99::/48 via 2001:db8:3::2 dev tun2 table 100\n"
    pkts = []
    for k in range(64):
        sid = "fc00::17" if k % 2 == 0 else "fc00::1b"
        p = _ip6ip6(sid, "2001:db8:1::2", "2001:db8:99::1", 64, 8)
        pkts.append(p)
    b = _same(pkts, ["tun0"] * len(pkts), extra=extra)
    assert [x.oif for x in b.results()] == ["tun1", "tun2"] * 32

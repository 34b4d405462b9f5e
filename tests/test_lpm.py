"""Tests of the compiled longest-prefix-match tables (fastpath.lpm / fastpath._lpm).

The property tests compare against an obviously-right reference: a dict of
installed prefixes scanned for the longest match with plain integers.
"""
import ipaddress
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastpath import _lpm
from fastpath.lpm import MAX_VALUE, Lpm

EXT = _lpm.EXT
VALUE_MASK = _lpm.VALUE_MASK
DEPTH_SHIFT = _lpm.DEPTH_SHIFT

NET = {4: ipaddress.IPv4Network, 6: ipaddress.IPv6Network}
ADDR = {4: ipaddress.IPv4Address, 6: ipaddress.IPv6Address}
WIDTH = {4: 32, 6: 128}


def mask(width, depth):
    return ((1 << depth) - 1) << (width - depth)


# ---------------------------------------------------------------------------
# reference model and helpers


class Ref:
    """Slow, obviously right LPM: scan every installed prefix."""

    def __init__(self, family):
        self.family = family
        self.width = WIDTH[family]
        self.routes = {}          # (network int, depth) -> value

    def add(self, net, depth, value):
        self.routes[(net & mask(self.width, depth), depth)] = value

    def delete(self, net, depth):
        return self.routes.pop((net & mask(self.width, depth), depth))

    def lookup(self, addr):
        best_d, best_v = -1, 0
        for (net, d), v in self.routes.items():
            if d > best_d and addr & mask(self.width, d) == net:
                best_d, best_v = d, v
        return best_v


def pstr(family, net, depth):
    return str(NET[family]((net, depth)))


def addr_array(family, addrs):
    """Python ints -> the lookup_batch input (IPv4: uint32, IPv6: uint8[N,16])."""
    if family == 4:
        return np.array(addrs, dtype=np.uint32)
    a = np.zeros((len(addrs), 16), dtype=np.uint8)
    for i, x in enumerate(addrs):
        a[i] = np.frombuffer(x.to_bytes(16, "big"), dtype=np.uint8)
    return a


def check_lookups(t, ref, addrs):
    """Batch (all variants), single lookups and the pxd per-address loop agree
    with the reference."""
    want = np.array([ref.lookup(a) for a in addrs], dtype=np.uint32)
    arr = addr_array(t.family, addrs)
    got = t.lookup_batch(arr)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(str(ADDR[t.family](addrs[i])), int(got[i]), int(want[i]))
                           for i in bad[:5]]
    if t.family == 4:
        b = arr.astype(">u4").view(np.uint8).reshape(-1, 4)
        assert np.array_equal(t.lookup_batch(b), want)
    else:
        simple = np.empty(len(addrs), dtype=np.uint32)
        t._core.lookup6_batch_simple(arr, simple)
        assert np.array_equal(simple, want)
    for a, w in list(zip(addrs, want))[:8]:
        assert t.lookup(ADDR[t.family](a)) == w


def check_structure(t):
    """Every group reachable exactly once, none leaked, none both used and free;
    entries well-formed; the prefix hash consistent with the counters."""
    core = t._core
    meta = core.meta
    cap, hwm, nfree = (int(meta[_lpm.META_CAP]), int(meta[_lpm.META_HWM]),
                       int(meta[_lpm.META_NFREE]))
    assert cap == t.groups.shape[0] and 1 <= hwm <= cap and nfree < hwm
    free = set(core.free_stack[:nfree].tolist())
    assert len(free) == nfree and 0 not in free and max(free, default=0) < hwm
    assert not t.groups[0].any(), "group 0 must stay unused"
    seen = set()
    # (one pass over the 64 MiB tbl24; everything else on its non-zero part)
    nz = np.flatnonzero(t.tbl24)
    top = t.tbl24[nz]
    level = [int(i) for i in (top[(top & EXT) != 0] & VALUE_MASK)]
    depth_of_level = 0
    off = 24
    while level:
        depth_of_level += 1
        assert depth_of_level <= (1 if t.family == 4 else 13)
        rows = t.groups[level]
        assert len(set(level)) == len(level), "group referenced twice"
        for g in level:
            assert 1 <= g < hwm and g not in free and g not in seen
            seen.add(g)
        ext = (rows & EXT) != 0
        plain = rows[~ext]
        assert ((plain >> DEPTH_SHIFT) <= t.width).all()
        assert not ((plain & VALUE_MASK == 0) & (plain != 0)).any()
        # a group never stays uniform with entries a shorter parent could hold
        uniform = ~ext.any(axis=1) & (rows == rows[:, :1]).all(axis=1)
        assert not (uniform & ((rows[:, 0] >> DEPTH_SHIFT) <= off)).any(), "uncollapsed group"
        level = [int(x) for x in rows[ext] & VALUE_MASK]
        off += 8
    assert len(seen) == t.groups_in_use
    plain = top[(top & EXT) == 0]
    assert ((plain >> DEPTH_SHIFT) <= 24).all()
    # no route -> entry 0 exactly
    assert not ((plain & VALUE_MASK == 0) & (plain != 0)).any()
    # prefix set
    assert int(meta[_lpm.META_HCOUNT]) == len(t) == np.count_nonzero(core.hvals)
    assert np.array_equal(np.bincount(core.hdepth[core.hvals != 0], minlength=t.width + 1),
                          core.dcount)


def check_empty(t):
    assert len(t) == 0
    assert t.groups_in_use == 0, "groups leaked"
    assert not t.tbl24.any()
    assert not t._core.hvals.any() and not t._core.dcount.any()
    check_structure(t)


def probe_addresses(width, prefixes, rnd, n_random=8):
    """Addresses around the given (net, depth): ends, just outside, random
    inside, plus random addresses."""
    top = (1 << width) - 1
    out = set()
    for net, d in prefixes:
        size = 1 << (width - d)
        out.update({net, net + size - 1, (net + size) & top, (net - 1) & top})
        for _ in range(2):
            out.add(net | rnd.getrandbits(width - d) if d < width else net)
    for _ in range(n_random):
        out.add(rnd.getrandbits(width))
    return sorted(out)


# ---------------------------------------------------------------------------
# hypothesis property tests

BOUNDS = {
    4: [1, 7, 8, 9, 15, 16, 17, 23, 24, 25, 30, 31, 32],
    6: [1, 8, 16, 23, 24, 25, 31, 32, 33, 40, 47, 48, 49, 56, 63, 64, 65, 72,
        96, 119, 120, 121, 127, 128],
}


@st.composite
def scenario(draw, family):
    """A random sequence of add / replace / delete operations on prefixes
    derived from a few seed addresses (so that they nest and overlap)."""
    width = WIDTH[family]
    seeds = draw(st.lists(st.integers(0, (1 << width) - 1), min_size=1, max_size=3))
    depth_st = st.one_of(st.sampled_from(BOUNDS[family]), st.integers(0, width))
    value_st = st.one_of(st.integers(1, 4), st.integers(1, MAX_VALUE))   # equal values too

    @st.composite
    def prefix(draw):
        seed = draw(st.sampled_from(seeds))
        k = draw(st.integers(0, width))
        addr = seed ^ (draw(st.integers(0, (1 << width) - 1)) & ((1 << k) - 1))
        return addr, draw(depth_st)

    op = st.one_of(
        st.tuples(st.just("add"), prefix(), value_st),
        st.tuples(st.just("add"), prefix(), value_st),
        st.tuples(st.just("replace"), st.integers(0, 1000), value_st),
        st.tuples(st.just("delete"), st.integers(0, 1000)),
        st.tuples(st.just("delete_absent"), prefix()),
    )
    ops = draw(st.lists(op, min_size=1, max_size=25))
    return ops, draw(st.integers(0, 2**32))


def run_scenario(family, ops, seed):
    width = WIDTH[family]
    rnd = random.Random(seed)
    t = Lpm(family)
    ref = Ref(family)
    mentioned = []
    for op in ops:
        if op[0] in ("add", "delete_absent"):
            addr, d = op[1]
            mentioned.append((addr & mask(width, d), d))
    probes = probe_addresses(width, mentioned, rnd)

    for op in ops:
        installed = sorted(ref.routes)
        if op[0] == "add":
            (addr, d), v = op[1], op[2]
            # host bits given on purpose: they must be ignored
            t.add(NET[family]((addr & mask(width, d), d)) if rnd.random() < 0.5
                  else f"{ADDR[family](addr)}/{d}", v)
            ref.add(addr, d, v)
        elif op[0] == "replace":
            if not installed:
                continue
            net, d = installed[op[1] % len(installed)]
            t.add(pstr(family, net, d), op[2])
            ref.add(net, d, op[2])
        elif op[0] == "delete":
            if not installed:
                continue
            net, d = installed[op[1] % len(installed)]
            want_cover = max(((dd, v) for (n, dd), v in ref.routes.items()
                              if dd < d and net & mask(width, dd) == n), default=(0, 0))
            assert t.cover(pstr(family, net, d)) == (want_cover[1], want_cover[0])
            assert t.delete(pstr(family, net, d)) == ref.delete(net, d)
        else:
            addr, d = op[1]
            net = addr & mask(width, d)
            if (net, d) in ref.routes:
                continue
            with pytest.raises(KeyError):
                t.delete(pstr(family, net, d))
        assert len(t) == len(ref.routes)
        check_lookups(t, ref, probes)

    # the final state, seen in every way
    assert sorted((int(n.network_address), n.prefixlen, v) for n, v in t.prefixes()) == \
        sorted((n, d, v) for (n, d), v in ref.routes.items())
    for (net, d), v in ref.routes.items():
        assert t.get(pstr(family, net, d)) == v
    check_structure(t)

    # the same set built in bulk gives the same answers
    if ref.routes:
        items = list(ref.routes.items())
        b = Lpm(family)
        b.add_many(addr_array(family, [n | rnd.getrandbits(width - d) if d < width else n
                                       for (n, d), _ in items]),
                   np.array([d for (_, d), _ in items], dtype=np.uint8),
                   np.array([v for _, v in items], dtype=np.uint32))
        assert len(b) == len(items)
        check_lookups(b, ref, probes)
        assert np.array_equal(b.lookup_batch(addr_array(family, probes)),
                              t.lookup_batch(addr_array(family, probes)))
        del b

    # deleting everything, in random order, frees every group
    remaining = sorted(ref.routes)
    rnd.shuffle(remaining)
    for i, (net, d) in enumerate(remaining):
        assert t.delete(pstr(family, net, d)) == ref.delete(net, d)
        if i % 4 == 3:
            check_lookups(t, ref, probes)
    check_empty(t)


PROPS = settings(max_examples=40, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROPS
@given(scenario(4))
def test_property_ipv4(sc):
    run_scenario(4, *sc)


@PROPS
@given(scenario(6))
def test_property_ipv6(sc):
    run_scenario(6, *sc)


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_property_add_many_duplicates(data):
    """add_many with duplicate prefixes (differing host bits): the last one
    wins, exactly as sequential adds."""
    family = data.draw(st.sampled_from([4, 6]))
    width = WIDTH[family]
    base = data.draw(st.integers(0, (1 << width) - 1))
    n = data.draw(st.integers(1, 40))
    rnd = random.Random(data.draw(st.integers(0, 2**32)))
    addrs, depths, values = [], [], []
    for _ in range(n):
        d = rnd.choice(BOUNDS[family] + [rnd.randint(0, width)])
        addrs.append(base ^ rnd.getrandbits(rnd.randint(0, width)))
        depths.append(d)
        values.append(rnd.randint(1, 3))
    bulk, seq, ref = Lpm(family), Lpm(family), Ref(family)
    bulk.add_many(addr_array(family, addrs), np.array(depths, np.uint8),
                  np.array(values, np.uint32))
    for a, d, v in zip(addrs, depths, values):
        seq.add(f"{ADDR[family](a)}/{d}", v)
        ref.add(a, d, v)
    assert len(bulk) == len(seq) == len(ref.routes)
    assert list(bulk.prefixes()) == list(seq.prefixes())
    probes = probe_addresses(width, list(ref.routes), rnd)
    check_lookups(bulk, ref, probes)
    check_structure(bulk)


# ---------------------------------------------------------------------------
# edge cases


def fresh(family):
    return Lpm(family)


def test_constants_and_encoding():
    assert VALUE_MASK == MAX_VALUE == 2**23 - 1
    assert EXT == 2**31 and DEPTH_SHIFT == 23 and _lpm.DEPTH_MASK == 0xFF
    assert _lpm.TBL24_SIZE == 2**24 and _lpm.GROUP_SIZE == 256
    t = fresh(4)
    t.add("10.0.0.0/8", 5)
    assert t.tbl24[0x0A0000] == 5 | (8 << 23)
    assert t.tbl24[0x0AFFFF] == 5 | (8 << 23) and t.tbl24[0x0B0000] == 0
    t.add("10.1.2.128/25", 7)
    e = int(t.tbl24[0x0A0102])
    assert e & EXT and (e & VALUE_MASK) >= 1
    row = t.groups[e & VALUE_MASK]
    assert row[0] == 5 | (8 << 23) and row[128] == 7 | (25 << 23) and row[255] == row[128]
    assert t.tbl24.dtype == np.uint32 and t.tbl24.shape == (2**24,)
    assert t.groups.dtype == np.uint32 and t.groups.shape[1] == 256


@pytest.mark.parametrize("family", [4, 6])
def test_default_route_and_host_route(family):
    t = fresh(family)
    host = "192.0.2.1/32" if family == 4 else "2001:db8::1/128"
    dflt = "0.0.0.0/0" if family == 4 else "::/0"
    other = "192.0.2.2" if family == 4 else "2001:db8::2"
    hostaddr = host.split("/")[0]
    t.add(host, 2)
    assert t.lookup(hostaddr) == 2 and t.lookup(other) == 0
    t.add(dflt, 1)
    assert t.lookup(hostaddr) == 2 and t.lookup(other) == 1
    assert t.lookup("0.0.0.0" if family == 4 else "::") == 1
    assert t.lookup("255.255.255.255" if family == 4 else "ffff:" * 7 + "ffff") == 1
    assert t.groups_in_use == (1 if family == 4 else 13)
    assert t.delete(dflt) == 1
    assert t.lookup(hostaddr) == 2 and t.lookup(other) == 0
    t.add(dflt, 3)
    assert t.delete(host) == 2
    assert t.lookup(hostaddr) == 3 and t.groups_in_use == 0
    assert t.delete(dflt) == 3
    check_empty(t)


BOUNDARY_CASES = [
    (4, "198.51.100.0/24"), (4, "198.51.100.128/25"), (4, "198.51.100.7/32"),
    (4, "198.51.0.0/23"), (4, "198.0.0.0/8"), (4, "198.51.100.0/31"),
    (6, "2001:db8:ab00::/24"), (6, "2001:db8:abcd::/25"), (6, "2001:db8::/32"),
    (6, "2001:db8:1::/48"), (6, "2001:db8:1:100::/56"), (6, "2001:db8:1:2::/64"),
    (6, "2001:db8:1:2::1:0/120"), (6, "2001:db8:1:2::1:5/128"), (6, "2001:db8:1::/47"),
]


@pytest.mark.parametrize("family,prefix", BOUNDARY_CASES)
def test_boundaries(family, prefix):
    t = fresh(family)
    net = ipaddress.ip_network(prefix, strict=False)
    width = WIDTH[family]
    first, last = int(net.network_address), int(net.broadcast_address)
    t.add(prefix, 9)
    assert t.lookup(ADDR[family](first)) == 9 and t.lookup(ADDR[family](last)) == 9
    assert t.lookup(ADDR[family]((last + 1) % 2**width)) == 0
    assert t.lookup(ADDR[family]((first - 1) % 2**width)) == 0
    # a more specific at each end and a shorter cover
    if net.prefixlen < width:
        lo, hi = list(net.subnets(prefixlen_diff=1))
        t.add(hi, 10)
        assert t.lookup(ADDR[family](last)) == 10 and t.lookup(ADDR[family](first)) == 9
    if net.prefixlen > 0:
        t.add(net.supernet(), 11)
        assert t.lookup(ADDR[family]((last + 1) % 2**width)) in (0, 11)
        assert t.lookup(ADDR[family](first)) == 9
    ref = Ref(family)
    for n, v in t.prefixes():
        ref.add(int(n.network_address), n.prefixlen, v)
    check_lookups(t, ref, probe_addresses(width, [(first, net.prefixlen)], random.Random(1)))
    for n, _ in list(t.prefixes()):
        t.delete(n)
    check_empty(t)


def test_replace_value():
    t = fresh(6)
    assert t.add("2001:db8::/48", 1) is None
    t.add("2001:db8::/48", 2)
    assert len(t) == 1 and t.get("2001:db8::/48") == 2 and t.lookup("2001:db8::1") == 2
    t.add("2001:db8::/64", 3)
    t.add("2001:db8::/48", 4)          # replacing keeps the more specific
    assert t.lookup("2001:db8::1") == 3 and t.lookup("2001:db8:0:1::1") == 4
    assert t.delete("2001:db8::/48") == 4 and t.lookup("2001:db8:0:1::1") == 0
    assert t.lookup("2001:db8::1") == 3


@pytest.mark.parametrize("family", [4, 6])
def test_delete_covered_and_covering(family):
    t = fresh(family)
    if family == 4:
        p8, p16, p24, p28 = "10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.16/28"
        a_in28, a_in24, a_in16, a_in8 = "10.1.2.17", "10.1.2.200", "10.1.9.9", "10.9.9.9"
    else:
        p8, p16, p24, p28 = "2001::/16", "2001:db8::/32", "2001:db8:1::/48", "2001:db8:1:2::/64"
        a_in28, a_in24, a_in16, a_in8 = ("2001:db8:1:2::1", "2001:db8:1:3::1",
                                         "2001:db8:2::1", "2001:1::1")
    t.add(p8, 8)
    t.add(p16, 16)
    t.add(p24, 24)
    t.add(p28, 28)
    assert [t.lookup(a) for a in (a_in28, a_in24, a_in16, a_in8)] == [28, 24, 16, 8]
    # a prefix covered by another: its addresses go to the cover
    len16 = 16 if family == 4 else 32      # prefix length of the route of value 16
    assert t.cover(p24) == (16, len16)
    assert t.delete(p24) == 24
    assert [t.lookup(a) for a in (a_in28, a_in24, a_in16, a_in8)] == [28, 16, 16, 8]
    # the covering one, more specifics stay
    assert t.delete(p8) == 8
    assert [t.lookup(a) for a in (a_in28, a_in24, a_in16, a_in8)] == [28, 16, 16, 0]
    assert t.cover(p28) == (16, len16)
    assert t.delete(p16) == 16
    assert [t.lookup(a) for a in (a_in28, a_in24, a_in16, a_in8)] == [28, 0, 0, 0]
    with pytest.raises(KeyError):
        t.delete(p16)
    assert t.delete(p28) == 28
    check_empty(t)


def test_equal_values_siblings_collapse():
    """Two /25 with the same value make a uniform group that must not be
    collapsed into a /24-level entry (a delete must still find them)."""
    t = fresh(4)
    t.add("10.0.0.0/25", 7)
    t.add("10.0.0.128/25", 7)
    t.add("10.0.0.0/24", 3)
    assert t.lookup("10.0.0.1") == 7 and t.lookup("10.0.0.200") == 7
    assert t.delete("10.0.0.0/25") == 7
    assert t.lookup("10.0.0.1") == 3 and t.lookup("10.0.0.200") == 7
    t.delete("10.0.0.128/25")
    assert t.groups_in_use == 0 and t.lookup("10.0.0.200") == 3
    t.delete("10.0.0.0/24")
    check_empty(t)


def test_host_bits_canonicalized():
    t = fresh(4)
    t.add("10.1.2.3/8", 1)
    assert t.get("10.0.0.0/8") == 1 and t.get("10.255.0.0/8") == 1
    assert list(t.prefixes()) == [(ipaddress.ip_network("10.0.0.0/8"), 1)]
    t.add(ipaddress.ip_interface("10.1.2.3/16"), 2)
    assert t.get("10.1.0.0/16") == 2 and "10.1.9.9/16" in t
    assert t.delete("10.1.255.255/16") == 2
    t6 = fresh(6)
    t6.add("2001:db8::1/33", 5)
    assert str(next(iter(t6))) == "2001:db8::/33" and t6.lookup(b"\x20\x01\x0d\xb8" + bytes(12)) == 5


def test_lookup_inputs():
    t = fresh(4)
    t.add("192.0.2.0/24", 4)
    for a in ("192.0.2.9", ipaddress.ip_address("192.0.2.9"), bytes([192, 0, 2, 9]),
              0xC0000209, np.uint32(0xC0000209)):
        assert t.lookup(a) == 4
    q = np.array([0xC0000209, 0xC0000309, 0], dtype=np.uint32)
    out = np.full(3, 99, dtype=np.uint32)
    assert t.lookup_batch(q, out=out) is out and out.tolist() == [4, 0, 0]
    assert t.lookup_batch(q[::2]).tolist() == [4, 0]              # non-contiguous input
    qb = q.astype(">u4").view(np.uint8).reshape(3, 4)
    assert t.lookup_batch(qb).tolist() == [4, 0, 0]
    assert t.lookup_batch(np.zeros(0, np.uint32)).shape == (0,)
    big = np.random.default_rng(0).integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32)
    big[::7] = 0xC0000200 | (big[::7] & 0xFF)
    want = np.where(big >> 8 == 0xC00002, 4, 0)
    assert np.array_equal(t.lookup_batch(big), want)
    t6 = fresh(6)
    t6.add("2001:db8::/32", 6)
    a6 = np.zeros((37, 16), np.uint8)
    a6[::2, :4] = [0x20, 0x01, 0x0D, 0xB8]
    assert np.array_equal(t6.lookup_batch(a6), np.where(np.arange(37) % 2 == 0, 6, 0))
    assert t6.lookup_batch(np.zeros((0, 16), np.uint8)).shape == (0,)


def test_growth_and_reuse():
    """Many groups and prefixes (arrays grow several times), then deleted and
    re-added: the freed groups are reused, no growth."""
    rng = np.random.default_rng(5)
    t = fresh(4)
    n = 3000
    addrs = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    depths = rng.integers(25, 33, n).astype(np.uint8)
    values = rng.integers(1, MAX_VALUE + 1, n).astype(np.uint32)
    t.add_many(addrs, depths, values)
    gen = t.generation
    assert gen > 0 and t.groups.shape[0] >= t.groups_in_use + 1
    ref = Ref(4)
    for a, d, v in zip(addrs.tolist(), depths.tolist(), values.tolist()):
        ref.add(a, d, v)
    assert len(t) == len(ref.routes)
    check_structure(t)
    probes = probe_addresses(32, list(ref.routes)[:300], random.Random(2), 200)
    check_lookups(t, ref, probes)
    nb = t.nbytes
    items = list(t.prefixes())
    for net, v in items:
        assert t.delete(net) == v
    check_empty(t)
    for net, v in items:
        t.add(net, v)
    assert t.generation == gen and t.nbytes == nb
    check_lookups(t, ref, probes)


def test_prefix_set_churn():
    """The installed-prefix hash through growth and many deletions
    (backward-shift deletion must keep every probe chain intact)."""
    rng = np.random.default_rng(7)
    t = fresh(4)
    n = 6000
    addrs = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    depths = rng.integers(18, 25, n).astype(np.uint8)
    values = rng.integers(1, 1000, n).astype(np.uint32)
    t.add_many(addrs, depths, values)
    ref = {}
    for a, d, v in zip(addrs.tolist(), depths.tolist(), values.tolist()):
        ref[(a & mask(32, d), d)] = v
    assert len(t) == len(ref)
    keys = sorted(ref)
    random.Random(8).shuffle(keys)
    gone = keys[: len(keys) * 2 // 3]
    for net, d in gone:
        assert t.delete(pstr(4, net, d)) == ref.pop((net, d))
    for net, d in gone[:500]:
        assert t.get(pstr(4, net, d)) is None
    for (net, d), v in ref.items():
        assert t.get(pstr(4, net, d)) == v
    assert len(t) == len(ref)
    check_structure(t)


def test_ipv6_deep_chain_and_many():
    rng = np.random.default_rng(6)
    t = fresh(6)
    n = 400
    a = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    a[:, :2] = [0x20, 0x01]
    d = rng.choice([48, 56, 64, 96, 120, 127, 128], n).astype(np.uint8)
    v = np.arange(1, n + 1, dtype=np.uint32)
    t.add_many(a, d, v)
    ref = Ref(6)
    for row, dd, vv in zip(a, d.tolist(), v.tolist()):
        ref.add(int.from_bytes(row.tobytes(), "big"), dd, vv)
    probes = probe_addresses(128, list(ref.routes)[:100], random.Random(3), 50)
    check_lookups(t, ref, probes)
    # addresses exactly as inserted: all hit their own (or a longer) route
    assert (t.lookup_batch(a) != 0).all()
    check_structure(t)


def test_corrupt_table_guard():
    """A corrupt table (EXT cycles) must not make a lookup read past the
    address or loop forever."""
    t = fresh(6)
    t.add("2001:db8::/40", 1)                 # allocates groups 1, 2
    g = int(t.tbl24[0x20010D] & VALUE_MASK)
    t.groups[g, :] = EXT | g                  # every entry points to itself
    a = np.zeros((40, 16), np.uint8)
    a[:, :3] = [0x20, 0x01, 0x0D]
    assert not t.lookup_batch(a).any()
    out = np.empty(40, np.uint32)
    t._core.lookup6_batch_simple(a, out)
    assert not out.any()
    assert t.lookup("2001:db8::1") == 0
    t4 = fresh(4)
    t4.add("10.0.0.0/25", 1)
    g = int(t4.tbl24[0x0A0000] & VALUE_MASK)
    t4.groups[g, :] = EXT | g
    assert t4.lookup("10.0.0.1") == 0
    assert not t4.lookup_batch(np.full(100, 0x0A000001, np.uint32)).any()


def test_len_prefixes_nbytes_repr():
    t = fresh(4)
    assert len(t) == 0 and list(t.prefixes()) == []
    nb0 = t.nbytes
    assert nb0 >= 4 * 2**24
    t.add("10.0.0.0/8", 1)
    t.add("10.0.0.0/9", 2)
    t.add("0.0.0.0/0", 3)
    assert len(t) == 3
    assert [str(n) for n in t] == ["0.0.0.0/0", "10.0.0.0/8", "10.0.0.0/9"]
    assert "IPv4" in repr(t) and "3 prefixes" in repr(t)
    assert t.get("10.0.0.0/10") is None and "10.0.0.0/10" not in t


# ---------------------------------------------------------------------------
# bad input


def test_bad_family():
    for f in (5, 0, "4", None, True):
        with pytest.raises(ValueError):
            Lpm(f)


@pytest.mark.parametrize("prefix,exc", [
    ("10.0.0.0/33", ValueError), ("foo", ValueError), ("10.0.0.0/-1", ValueError),
    ("", ValueError), ("2001:db8::/32", ValueError), (None, TypeError),
    (42, TypeError), (ipaddress.ip_network("2001:db8::/32"), ValueError),
    (b"\x0a\x00\x00\x00", TypeError),
])
def test_bad_prefix(prefix, exc):
    t = fresh(4)
    with pytest.raises(exc):
        t.add(prefix, 1)
    with pytest.raises(exc):
        t.get(prefix)
    with pytest.raises(exc):
        t.delete(prefix)
    assert len(t) == 0


@pytest.mark.parametrize("value,exc", [
    (0, ValueError), (MAX_VALUE + 1, ValueError), (-1, ValueError), (2**40, ValueError),
    (1.5, TypeError), ("1", TypeError), (None, TypeError), (True, TypeError),
])
def test_bad_value(value, exc):
    t = fresh(6)
    with pytest.raises(exc):
        t.add("2001:db8::/32", value)
    assert len(t) == 0 and t.groups_in_use == 0
    t.add("2001:db8::/32", MAX_VALUE)
    assert t.lookup("2001:db8::1") == MAX_VALUE


def test_delete_not_installed():
    t = fresh(4)
    t.add("10.0.0.0/8", 1)
    with pytest.raises(KeyError):
        t.delete("10.0.0.0/9")
    with pytest.raises(KeyError):
        t.delete("11.0.0.0/8")
    assert t.lookup("10.1.1.1") == 1 and len(t) == 1


def test_bad_addresses():
    t4, t6 = fresh(4), fresh(6)
    for bad, exc in [("10.0.0.256", ValueError), ("2001:db8::1", ValueError),
                     (b"\x01\x02\x03", ValueError), (bytes(16), ValueError),
                     (2**32, ValueError), (-1, ValueError), (1.0, TypeError),
                     (None, TypeError), (True, TypeError)]:
        with pytest.raises(exc):
            t4.lookup(bad)
    for bad, exc in [("10.0.0.1", ValueError), (bytes(4), ValueError), (2**128, ValueError),
                     ([0] * 16, TypeError)]:
        with pytest.raises(exc):
            t6.lookup(bad)


def test_bad_arrays():
    t4, t6 = fresh(4), fresh(6)
    with pytest.raises(TypeError):
        t4.lookup_batch([1, 2, 3])
    with pytest.raises(TypeError):
        t4.lookup_batch(np.zeros(3, np.int64))
    with pytest.raises(ValueError):
        t4.lookup_batch(np.zeros((3, 2), np.uint32))
    with pytest.raises(ValueError):
        t4.lookup_batch(np.zeros((3, 16), np.uint8))
    with pytest.raises(TypeError):
        t6.lookup_batch(np.zeros(3, np.uint32))
    with pytest.raises(ValueError):
        t6.lookup_batch(np.zeros((3, 4), np.uint8))
    with pytest.raises(ValueError):
        t6.lookup_batch(np.zeros(16, np.uint8))
    q = np.zeros(4, np.uint32)
    with pytest.raises(TypeError):
        t4.lookup_batch(q, out=np.zeros(4, np.int32))
    with pytest.raises(ValueError):
        t4.lookup_batch(q, out=np.zeros(5, np.uint32))
    with pytest.raises(ValueError):
        t4.lookup_batch(q, out=np.zeros(8, np.uint32)[::2])
    ro = np.zeros(4, np.uint32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        t4.lookup_batch(q, out=ro)
    with pytest.raises(TypeError):
        t4.lookup_batch(q, out=[0] * 4)
    # read-only inputs are fine
    q.flags.writeable = False
    assert t4.lookup_batch(q).tolist() == [0] * 4


def test_bad_add_many():
    t = fresh(4)
    a = np.array([0x0A000000, 0x0B000000], np.uint32)
    good_d = np.array([8, 8], np.uint8)
    good_v = np.array([1, 2], np.uint32)
    for d, v, exc in [
        (np.array([8, 33]), good_v, ValueError),
        (np.array([8, -1]), good_v, ValueError),
        (np.array([8.0, 8.0]), good_v, TypeError),
        (np.array([8]), good_v, ValueError),
        (good_d, np.array([1, 0]), ValueError),
        (good_d, np.array([1, MAX_VALUE + 1]), ValueError),
        (good_d, np.array([1, 2, 3]), ValueError),
        (good_d, np.array(["a", "b"]), TypeError),
    ]:
        with pytest.raises(exc):
            t.add_many(a, d, v)
        assert len(t) == 0 and not t.tbl24.any()     # validated before any insert
    with pytest.raises(TypeError):
        t.add_many(a.astype(np.int64), good_d, good_v)
    with pytest.raises(TypeError):
        fresh(6).add_many(a, good_d, good_v)
    t.add_many(a, [8, 16], [1, 2])                  # lists are fine for depths/values
    assert t.lookup("10.1.1.1") == 1 and t.lookup("11.0.1.1") == 2
    t.add_many(np.zeros(0, np.uint32), np.zeros(0, np.uint8), np.zeros(0, np.uint32))
    assert len(t) == 2


def test_core_checks():
    core = _lpm.LpmCore(4)
    with pytest.raises(ValueError):
        core.add(bytes(16), 8, 1)            # IPv6 key on an IPv4 table
    with pytest.raises(ValueError):
        core.add(bytes(4), 33, 1)
    with pytest.raises(ValueError):
        core.add(bytes(4), 8, 0)
    with pytest.raises(OverflowError):
        core.add(bytes(4), 8, -1)
    with pytest.raises(ValueError):
        core.add_many4(np.zeros(1, np.uint32), np.array([40], np.uint8),
                       np.array([1], np.uint32))
    with pytest.raises(TypeError):
        core.add_many6(np.zeros((1, 16), np.uint8), np.array([4], np.uint8),
                       np.array([1], np.uint32))
    with pytest.raises(ValueError):
        _lpm.LpmCore(5)
    assert len(core) == 0 and core.groups_in_use == 0

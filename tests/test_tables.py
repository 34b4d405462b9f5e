"""Record layouts: the numpy dtypes of fastpath/tables.py against the C
structs of pyx/fp.pxd; the fast path's words and shared nexthop rows."""
import ipaddress

import numpy as np
import pytest

from fastpath import Batch, Router, _datapath, tables
from fastpath import router as router_mod


def test_record_sizes_match_structs():
    sizes = _datapath.Datapath.record_sizes()
    assert tables.DST_DTYPE.itemsize == sizes["dst"] == 64   # one cache line
    assert tables.NH_DTYPE.itemsize == sizes["nh"]
    assert tables.DEV_DTYPE.itemsize == sizes["dev"]
    assert tables.ADDR_DTYPE.itemsize == sizes["addr"]
    assert tables.RULE_DTYPE.itemsize == sizes["rule"]
    assert tables.NEIGH_DTYPE.itemsize == sizes["neigh"]
    assert tables.S6L_DTYPE.itemsize == sizes["s6l"]
    assert tables.HMAC_KEY_DTYPE.itemsize == sizes["hmac_key"]
    assert tables.STRICT_DTYPE.itemsize == sizes["strict"]


def test_upper_bounds_are_kernel_hash_thresholds():
    # fib_rebalance: DIV_ROUND_CLOSEST(w << 31, total) - 1
    assert tables._upper_bounds([1]) == [(1 << 31) - 1]
    assert tables._upper_bounds([1, 1]) == [(1 << 30) - 1, (1 << 31) - 1]
    assert tables._upper_bounds([1, 2]) == [round((1 << 31) / 3) - 1, (1 << 31) - 1]


def test_field_offsets_match_structs():
    offs = _datapath.record_offsets()
    for name, dtype in (("dst", tables.DST_DTYPE), ("nh", tables.NH_DTYPE), ("dev", tables.DEV_DTYPE),
                        ("addr", tables.ADDR_DTYPE), ("rule", tables.RULE_DTYPE),
                        ("neigh", tables.NEIGH_DTYPE), ("s6l", tables.S6L_DTYPE),
                        ("hmac_key", tables.HMAC_KEY_DTYPE), ("strict", tables.STRICT_DTYPE)):
        want = {f: dtype.fields[f][1] for f in dtype.names}
        assert offs[name] == want, name


# --- the fast path's words and shared nexthop rows ---------------------------

BASE = """
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip addr add 10.0.1.1/24 dev tun0
"""


def _router(text):
    r = Router()
    r.configure(text)
    return r


def _entry(t, prefix, table=254):
    net = ipaddress.ip_network(prefix)
    return t.entries[(net.version, table, net)]


def _rows(t, e):
    return t.nh_arr[e.nh_first:e.nh_first + e.nh_count]


def test_fast_words_mark_plain_ipv6_unicast_routes_only():
    r = _router(BASE + """
ip -6 route add 2001:db8:10::/48 via 2001:db8:2::2 dev tun1
ip -6 route add 2001:db8:11::/48 dev tun1
ip -6 route add 2001:db8:12::/48 via 2001:db8:2::2 dev tun1 mtu 1300
ip -6 route add 2001:db8:13::/48 nexthop via 2001:db8:2::2 dev tun1 nexthop via 2001:db8:2::3 dev tun1
ip -6 route add blackhole 2001:db8:14::/48
ip -6 route add throw 2001:db8:15::/48
ip -6 route add fc00::e/128 encap seg6local action End dev tun0
ip -6 route add fc00::1d/128 encap seg6 mode encap segs fc00::e dev tun1
ip route add 198.18.0.0/15 via 10.0.1.2 dev tun0
""")
    t = r._tables
    for prefix in ("2001:db8:10::/48", "2001:db8:11::/48"):
        e = _entry(t, prefix)
        assert t.dfast[e.dst] == e.nh_first + 1 and e.nh_count == 1, prefix
    for prefix in ("2001:db8:12::/48", "2001:db8:13::/48", "2001:db8:14::/48", "2001:db8:15::/48",
                   "fc00::e/128", "fc00::1d/128", "198.18.0.0/15"):
        assert t.dfast[_entry(t, prefix).dst] == 0, prefix
    # every other entry (reserved, local and connected routes, free) agrees with the rule
    assert np.array_equal(t.dfast[:len(t.dsts)], tables._fast_words(t.dsts))
    e = _entry(t, "2001:db8:10::/48")
    t.mark_dead(e.dst)
    assert t.dfast[e.dst] == 0 and t.dsts[e.dst]["flags"] & tables.DSTF_DEAD


def test_single_nexthop_rows_are_shared_until_their_last_route_goes():
    r = _router(BASE + """
ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:00:22 dev tun1
ip -6 route add 2001:db8:10::/48 via 2001:db8:2::2 dev tun1
ip -6 route add 2001:db8:11::/48 via 2001:db8:2::2 dev tun1
ip -6 route add 2001:db8:12::/48 via 2001:db8:2::3 dev tun1
ip -6 route add 2001:db8:13::/48 nexthop via 2001:db8:2::2 dev tun1 nexthop via 2001:db8:2::3 dev tun1
""")
    t = r._tables
    a, b, c, m = (_entry(t, f"2001:db8:1{k}::/48") for k in range(4))
    assert a.nh_first == b.nh_first != c.nh_first
    assert m.nh_first not in (a.nh_first, c.nh_first)        # multipath: rows of its own
    row = a.nh_first
    r.configure("ip -6 route del 2001:db8:10::/48")
    b = _entry(t, "2001:db8:11::/48")
    assert b.nh_first == row and bytes(t.nhs[row]["gw"]) == ipaddress.ip_address("2001:db8:2::2").packed
    # the route left still forwards by it
    pkt = (b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x86\xdd"
           + bytes([0x60, 0, 0, 0, 0, 0, 59, 64]) + ipaddress.ip_address("2001:db8:1::2").packed
           + ipaddress.ip_address("2001:db8:11::1").packed)
    out = r.process(Batch.from_packets([pkt], iif="tun0", linktype="ethernet")).results()[0]
    assert (out.verdict, out.oif, out.nexthop) == ("forward", "tun1", "2001:db8:2::2")
    r.configure("ip -6 route del 2001:db8:11::/48")
    # idle with its last route gone: kept as written for the nexthop's return
    assert list(t.nh_idle.values()) == [row] and row not in [v[0] for v in t.nh_shared.values()]
    version = t.rows_version
    r.configure("ip -6 route add 2001:db8:11::/48 via 2001:db8:2::2 dev tun1")
    assert _entry(t, "2001:db8:11::/48").nh_first == row and t.rows_version == version
    assert not t.nh_idle
    # another gateway: a row of its own, not the idle one
    r.configure("ip -6 route del 2001:db8:11::/48")
    r.configure("ip -6 route add 2001:db8:20::/48 via 2001:db8:2::4 dev tun1")
    row4 = _entry(t, "2001:db8:20::/48").nh_first
    assert row4 != row and t.rows_version > version
    # beyond nh_idle_max idle rows the oldest is zeroed, freed and reused
    t.nh_idle_max = 0
    r.configure("ip -6 route del 2001:db8:20::/48")
    assert not t.nh_idle
    assert not t.nh_arr[row:row + 1].view(np.uint8).any()
    assert not t.nh_arr[row4:row4 + 1].view(np.uint8).any()
    r.configure("ip -6 route add 2001:db8:21::/48 via 2001:db8:2::5 dev tun1")
    first = _entry(t, "2001:db8:21::/48").nh_first
    assert bytes(t.nh_arr[first]["gw"]) == ipaddress.ip_address("2001:db8:2::5").packed
    assert first in (row, row4)                                 # a freed row, reused


@pytest.mark.parametrize("seed", range(3))
def test_nexthop_rows_and_fast_words_stay_right_through_churn(seed):
    rng = np.random.default_rng(seed)
    r = _router(BASE)
    t = r._tables
    gws = ["2001:db8:2::2", "2001:db8:2::3", "2001:db8:1::9"]
    for _ in range(150):
        k = int(rng.integers(12))
        prefix = f"2001:db8:{0x100 + k:x}::/48"
        op = int(rng.integers(6))
        g1, g2 = (gws[int(i)] for i in rng.integers(0, len(gws), 2))
        dev = "tun1" if g1.startswith("2001:db8:2:") else "tun0"
        line = (f"ip -6 route del {prefix}" if op == 0 else
                f"ip -6 route replace {prefix} via {g1} dev {dev} mtu 1300" if op == 1 else
                f"ip -6 route replace {prefix} nexthop via {g1} nexthop via {g2}" if op == 2 else
                f"ip -6 route replace blackhole {prefix}" if op == 3 else
                f"ip -6 route replace {prefix} via {g1}")
        if op == 0 and (6, 254, ipaddress.ip_network(prefix)) not in t.entries:
            continue
        r.configure(line)
        live = {}
        installed = list(t.entries.values()) + list(t.strict_entries.values())
        for e in installed:
            rows = _rows(t, e)
            assert [int(x["oif"]) for x in rows] == [int(n[3]) for n in e.sig[2]]
            assert [bytes(x["gw"][:16]) for x in rows] == [
                ipaddress.ip_address(n[0]).packed.ljust(16, b"\0") if n[0] else bytes(16) for n in e.sig[2]]
            assert t.dfast[e.dst] == tables._fast_words(t.dsts[[e.dst]])[0]
            key = tables._nh_key(e.sig[2])
            if key is not None:
                live[key] = live.get(key, 0) + 1
        assert {k: v[1] for k, v in t.nh_shared.items()} == live
        used = {e.dst for e in installed}
        free = [i for i in range(tables.DST_FIRST_ROUTE, len(t.dsts)) if i not in used]
        assert not t.dfast[free].any()


def test_load_reads_throw_routes_in_every_table_unless_told_which():
    cfg = BASE + """
ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:00:22 dev tun1
ip -6 route add throw 2001:db8:77::/48
ip -6 route add 2001:db8:77::/48 via 2001:db8:2::2 dev tun1 table 253
ip -6 rule add pref 33000 lookup 253
"""
    pkt = (b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x86\xdd"
           + bytes([0x60, 0, 0, 0, 0, 0, 59, 64]) + ipaddress.ip_address("2001:db8:1::2").packed
           + ipaddress.ip_address("2001:db8:77::1").packed)
    r = _router(cfg)
    t = r._tables
    args = t.arrays()
    kw = router_mod.load_kwargs(r.state, t)
    assert kw["throw_slots6"] == [t.slots[6].index(254)]
    for slots in (kw["throw_slots6"], None):
        kw["throw_slots6"] = slots
        r._dp.load(*args, dfast=t.dfast, **kw)
        out = r.process(Batch.from_packets([pkt], iif="tun0", linktype="ethernet")).results()[0]
        # the throw route sends the lookup on to the next rule's table
        assert (out.verdict, out.oif) == ("forward", "tun1"), slots
    kw["throw_slots6"] = [len(t.slots[6])]
    with pytest.raises(ValueError, match="throw_slots6"):
        r._dp.load(*args, dfast=t.dfast, **kw)
    with pytest.raises(ValueError, match="dfast"):
        r._dp.load(*args, dfast=t.dfast[:5], **{**kw, "throw_slots6": None})

"""fastpath.rss: the Toeplitz hash against Microsoft's verification vectors,
the compiled batch hash against the Python reference, the RETA."""
from __future__ import annotations

import ipaddress
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastpath import _rss
from fastpath.batch import Batch
from fastpath.rss import (MS_KEY, batch_hash, default_reta, hash_packet, key_table, queues,
                          rss_input, toeplitz)

# Microsoft, "Verifying the RSS Hash Calculation" (Windows driver docs,
# learn.microsoft.com/windows-hardware/drivers/network/verifying-the-rss-hash-calculation),
# the same suite as the 82599 datasheet 7.1.2.8.3 and DPDK app/test/test_thash.c.
# (destination, destination port, source, source port, IPv4/IPv6-only hash, with TCP)
V4 = [
    ("161.142.100.80", 1766, "66.9.149.187", 2794, 0x323e8fc2, 0x51ccc178),
    ("65.69.140.83", 4739, "199.92.111.2", 14230, 0xd718262a, 0xc626b0ea),
    ("12.22.207.184", 38024, "24.19.198.95", 12898, 0xd2d0a5de, 0x5c2b394a),
    ("209.142.163.6", 2217, "38.27.205.30", 48228, 0x82989176, 0xafc7327f),
    ("202.188.127.2", 1303, "153.39.163.191", 44251, 0x5d1809c5, 0x10e828a2),
]
V6 = [
    ("3ffe:2501:200:3::1", 1766, "3ffe:2501:200:1fff::7", 2794, 0x2cc18cd5, 0x40207d3d),
    ("ff02::1", 4739, "3ffe:501:8::260:97ff:fe40:efab", 14230, 0x0f0c461c, 0xdde51bbf),
    ("fe80::200:f8ff:fe21:67cf", 38024, "3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251,
     0x4b61e985, 0x02d1feef),
]
VECTORS = [(4,) + v for v in V4] + [(6,) + v for v in V6]


def addr(a):
    return ipaddress.ip_address(a).packed


def port(p):
    return struct.pack("!H", p)


# ---------------------------------------------------------------------------
# the reference and the table

def test_key():
    assert len(MS_KEY) == 40 and MS_KEY[:4] == b"\x6d\x5a\x56\xda" and MS_KEY[-1] == 0xfa


@pytest.mark.parametrize("fam, dst, dport, src, sport, h3, h4", VECTORS)
def test_toeplitz_vectors(fam, dst, dport, src, sport, h3, h4):
    l3 = addr(src) + addr(dst)
    assert toeplitz(l3) == h3
    assert toeplitz(l3 + port(sport) + port(dport)) == h4


def test_toeplitz_basics():
    assert toeplitz(b"") == 0
    assert toeplitz(b"\x80") == int.from_bytes(MS_KEY[:4], "big")     # first window
    assert toeplitz(b"\x00\x01") == (int.from_bytes(MS_KEY[1:5], "big") << 7
                                     | MS_KEY[5] >> 1) & 0xFFFFFFFF
    # linear over GF(2)
    a, b = bytes(range(36)), bytes(range(100, 136))
    assert toeplitz(bytes(x ^ y for x, y in zip(a, b))) == toeplitz(a) ^ toeplitz(b)
    # past the key's end zeros come in
    assert toeplitz(bytes(40) + b"\x01", key=MS_KEY) == 0
    with pytest.raises(ValueError):
        toeplitz(b"x", key=b"abc")


def test_key_table_is_single_byte_hashes():
    t = key_table()
    assert t.shape == (40, 256) and t.dtype == np.uint32 and not t.flags.writeable
    assert key_table() is t                                           # cached
    for j in range(40):
        for b in (0, 1, 2, 4, 8, 16, 32, 64, 128, 0x5a, 0xff):
            assert int(t[j, b]) == toeplitz(bytes(j) + bytes([b])), (j, b)


# ---------------------------------------------------------------------------
# packets of the verification suite through the compiled parser

def v4_packet(src, dst, proto, l4=b"", *, frag=0, ihl=5, opts=b""):
    total = 4 * ihl + len(l4)
    hdr = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, total, 1, frag, 64, proto, 0,
                      addr(src), addr(dst))
    return hdr + opts + l4


def v6_packet(src, dst, nh, payload=b""):
    return struct.pack("!IHBB16s16s", 0x60000000, len(payload), nh, 64,
                       addr(src), addr(dst)) + payload


def l4hdr(sport, dport, n=20):
    return port(sport) + port(dport) + bytes(n - 4)


def frame(pkt, fam, vlan=False):
    et = b"\x08\x00" if fam == 4 else b"\x86\xdd"
    tag = b"\x81\x00\x00\x64" if vlan else b""
    return b"\x02" * 6 + b"\x04" * 6 + tag + et + pkt


def cases():
    """(packet, fam, expected with ports+udp, with ports but udp off, no ports)"""
    out = []
    for fam, dst, dport, src, sport, h3, h4 in VECTORS:
        l4 = l4hdr(sport, dport)
        if fam == 4:
            out += [
                (v4_packet(src, dst, 6, l4), fam, h4, h4, h3),            # TCP
                (v4_packet(src, dst, 17, l4[:8]), fam, h4, h3, h3),       # UDP
                (v4_packet(src, dst, 1, l4[:8]), fam, h3, h3, h3),        # ICMP
                (v4_packet(src, dst, 47, l4), fam, h3, h3, h3),           # GRE
                (v4_packet(src, dst, 6, l4, frag=0x2000), fam, h3, h3, h3),   # first fragment
                (v4_packet(src, dst, 17, l4, frag=0x0010), fam, h3, h3, h3),  # later fragment
                (v4_packet(src, dst, 6, l4, frag=0x4000), fam, h4, h4, h3),   # DF only
                (v4_packet(src, dst, 6, l4, ihl=7, opts=b"\x01" * 8), fam, h4, h4, h3),
                (v4_packet(src, dst, 6, l4)[:23], fam, h3, h3, h3),       # ports cut short
                (v4_packet(src, dst, 6, l4)[:24], fam, h4, h4, h3),       # just the ports
                (v4_packet(src, dst, 6, l4)[:20], fam, h3, h3, h3),
                (v4_packet(src, dst, 6, l4)[:19], fam, 0, 0, 0),          # no whole addresses
                (v4_packet(src, dst, 6, l4, ihl=4)[:40], fam, h3, h3, h3),  # bad IHL: no L4
                (v4_packet(src, dst, 6, l4, ihl=15), fam, h3, h3, h3),    # IHL past the end
            ]
        else:
            out += [
                (v6_packet(src, dst, 6, l4), fam, h4, h4, h3),
                (v6_packet(src, dst, 17, l4[:8]), fam, h4, h3, h3),
                (v6_packet(src, dst, 58, l4[:8]), fam, h3, h3, h3),
                (v6_packet(src, dst, 0, b"\x06\x00" + bytes(6) + l4), fam, h3, h3, h3),   # HBH
                (v6_packet(src, dst, 43, b"\x06\x02\x04\x01" + bytes(20) + l4), fam, h3, h3, h3),  # SRH
                (v6_packet(src, dst, 44, b"\x06\x00\x00\x01" + bytes(4) + l4), fam, h3, h3, h3),   # frag
                (v6_packet(src, dst, 6, l4)[:43], fam, h3, h3, h3),
                (v6_packet(src, dst, 6, l4)[:44], fam, h4, h4, h3),
                (v6_packet(src, dst, 6, l4)[:40], fam, h3, h3, h3),
                (v6_packet(src, dst, 6, l4)[:39], fam, 0, 0, 0),
            ]
    return out


CASES = cases()


@pytest.mark.parametrize("link", ["raw", "ethernet", "vlan"])
def test_vectors_in_packets(link):
    pkts = [p if link == "raw" else frame(p, fam, link == "vlan") for p, fam, *_ in CASES]
    b = Batch.from_packets(pkts, linktype="raw" if link == "raw" else "ethernet")
    for ports, udp, k in ((True, True, 2), (True, False, 3), (False, True, 4), (False, False, 4)):
        want = np.array([c[k] for c in CASES], np.uint32)
        got = batch_hash(b, ports=ports, udp=udp)
        bad = [(i, hex(got[i]), hex(want[i])) for i in np.flatnonzero(got != want)]
        assert not bad, (ports, udp, bad)
        ref = [hash_packet(p, b.linktype, ports, udp) for p in pkts]
        assert list(got) == ref


def test_vectors_with_scapy():
    """Packets built by scapy (independent of the hand-made headers above)."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether
    pkts, want = [], []
    for fam, dst, dport, src, sport, h3, h4 in VECTORS:
        ip = IP(src=src, dst=dst) if fam == 4 else IPv6(src=src, dst=dst)
        pkts += [Ether() / ip / TCP(sport=sport, dport=dport),
                 Ether() / Dot1Q(vlan=7) / ip / UDP(sport=sport, dport=dport) / b"payload",
                 Ether() / ip / b"no transport"]
        want += [h4, h4, h3]
    b = Batch.from_scapy(pkts)
    assert b.linktype == "ethernet"
    assert [hex(x) for x in batch_hash(b)] == [hex(x) for x in want]


def test_non_ip_and_malformed():
    pkt4 = v4_packet("1.2.3.4", "5.6.7.8", 6, l4hdr(1, 2))
    pkt6 = v6_packet("::1", "::2", 6, l4hdr(1, 2))
    raw = [b"", b"\x45", pkt4.replace(b"\x45", b"\x55", 1), b"\x00" * 60,
           b"\xff" * 60, pkt6[:1]]
    assert list(batch_hash(Batch.from_packets(raw))) == [0] * len(raw)
    eth = [b"", b"\x00" * 13, frame(b"", 4), frame(pkt4, 4)[:14],
           b"\0" * 12 + b"\x08\x06" + pkt4,                  # ARP type
           frame(pkt6, 4), frame(pkt4, 6),                   # type and version disagree
           b"\0" * 12 + b"\x81\x00\x00",                     # VLAN tag cut short
           b"\0" * 12 + b"\x81\x00\x00\x01\x88\xa8" + pkt4,  # QinQ: not parsed
           b"\0" * 12 + b"\x88\xa8\x00\x01\x08\x00" + pkt4]  # 802.1ad outer tag: not parsed
    assert list(batch_hash(Batch.from_packets(eth, linktype="ethernet"))) == [0] * len(eth)
    assert hash_packet(pkt4) != 0 and hash_packet(frame(pkt4, 4, True), "ethernet") == hash_packet(pkt4)


def test_never_reads_past_the_packet():
    """Bytes after a packet's end inside its slot would change the hash if
    they were read: a TCP packet cut right before its ports, with the ports
    right after the end."""
    full4 = v4_packet("66.9.149.187", "161.142.100.80", 6, l4hdr(2794, 1766))
    full6 = v6_packet("3ffe:2501:200:1fff::7", "3ffe:2501:200:3::1", 6, l4hdr(2794, 1766))
    for full, cut, want, lt in ((full4, 22, 0x323e8fc2, "raw"), (full6, 42, 0x2cc18cd5, "raw"),
                                (full4, 19, 0, "raw"), (full6, 39, 0, "raw"),
                                (frame(full6, 6), 14 + 42, 0x2cc18cd5, "ethernet"),
                                (frame(full4, 4, True), 13, 0, "ethernet"),
                                (frame(full4, 4, True), 17, 0, "ethernet")):
        b = Batch.from_packets([full], linktype=lt)
        b.length[:] = cut
        assert batch_hash(b)[0] == want, (lt, cut)
        assert hash_packet(full[:cut], lt) == want


def test_outside_the_slot_hashes_zero():
    pkt = v4_packet("1.2.3.4", "5.6.7.8", 6, l4hdr(1, 2))
    b = Batch.from_packets([pkt] * 4, slot=256)
    assert (batch_hash(b) != 0).all()
    b.length[0] = 256 - 128 + 1            # end past the slot
    b.start[1] = -1
    b.length[2] = -5
    b.start[3] = 300
    assert list(batch_hash(b)) == [0, 0, 0, 0]
    empty_slots = Batch(np.zeros((2, 0), np.uint8), [0, 0], [0, 0])
    assert list(batch_hash(empty_slots)) == [0, 0]


def test_flow_hash_and_out():
    pkts = [v4_packet(s, d, 6, l4hdr(sp, dp)) for d, dp, s, sp, _, _ in V4]
    b = Batch.from_packets(pkts)
    h = batch_hash(b, store=False)
    assert not b.flow_hash.any()
    assert list(h) == [v[5] for v in V4]
    h2 = batch_hash(b)
    assert (b.flow_hash == h2).all() and h2 is not b.flow_hash
    out = np.zeros(len(b), np.uint32)
    assert batch_hash(b, ports=False, out=out, store=False) is out
    assert list(out) == [v[4] for v in V4]
    with pytest.raises(ValueError):
        batch_hash(b, out=np.zeros(len(b), np.int64))
    with pytest.raises(ValueError):
        batch_hash(b, out=np.zeros(len(b) + 1, np.uint32))
    # a slice of a batch (a view at another row) hashes its own packets
    assert list(batch_hash(b[2:4], store=False)) == [V4[2][5], V4[3][5]]
    # a batch without flow_hash is fine
    del b.flow_hash
    assert list(batch_hash(b)) == list(h)
    assert len(batch_hash(Batch.from_packets([]))) == 0


def test_custom_key():
    key = bytes(range(7, 47))
    pkt = v6_packet("2001:db8::1", "2001:db8::2", 17, l4hdr(53, 5353, 8))
    b = Batch.from_packets([pkt])
    got = int(batch_hash(b, key=key)[0])
    assert got == hash_packet(pkt, key=key) != hash_packet(pkt)
    with pytest.raises(ValueError):
        batch_hash(b, key=b"\x01\x02")


def test_compiled_entry_points():
    t = key_table()
    pkt = frame(v4_packet("66.9.149.187", "161.142.100.80", 17, l4hdr(2794, 1766, 8)), 4)
    assert _rss.hash_bytes(pkt, 1, t) == 0x51ccc178
    assert _rss.hash_bytes(pkt, 1, t, udp=False) == 0x323e8fc2
    assert _rss.hash_bytes(b"", 0, t) == 0
    with pytest.raises(ValueError):
        _rss.hash_bytes(pkt, 2, t)
    with pytest.raises(ValueError):
        _rss.hash_bytes(pkt, 1, np.zeros((36, 256), np.uint32))
    b = Batch.from_packets([pkt], linktype="ethernet")
    with pytest.raises(ValueError):
        _rss.hash_arrays(b.data, b.start, b.length, 1, t, True, True, np.zeros(2, np.uint32))
    with pytest.raises(ValueError):
        _rss.hash_arrays(b.data, b.start, b.length, 7, t, True, True, np.zeros(1, np.uint32))
    b.linktype = "token-ring"
    with pytest.raises(ValueError):
        batch_hash(b)


# ---------------------------------------------------------------------------
# the redirection table

def test_default_reta():
    r = default_reta(4)
    assert r.dtype == np.uint16 and len(r) == 128
    assert list(r[:9]) == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert (default_reta(16) == np.arange(128) % 16).all()
    assert (default_reta(1) == 0).all()
    assert list(default_reta(3, size=8)) == [0, 1, 2, 0, 1, 2, 0, 1]
    for bad in (0, -1):
        with pytest.raises(ValueError):
            default_reta(bad)
    with pytest.raises(ValueError):
        default_reta(4, size=100)
    with pytest.raises(TypeError):
        default_reta(2.5)


def test_queues():
    h = np.array([v[5] for v in V4], np.uint32)                 # TCP hashes
    for nq in (1, 2, 3, 4, 8, 16, 20):
        assert list(queues(h, nq)) == [(x & 0x7F) % nq for x in h]
    assert queues(h, 4).dtype == np.uint16
    # 0x51ccc178: RETA index 0x78 = 120
    assert queues([0x51ccc178], 16)[0] == 120 % 16
    reta = np.zeros(128, np.uint16)
    reta[0x78] = 3
    assert list(queues(h, 4, reta)) == [3 if x & 0x7F == 0x78 else 0 for x in h]
    assert list(queues([0, 1, 2, 3], 2, reta=[1, 0, 1, 1])) == [1, 0, 1, 1]
    assert queues([], 4).shape == (0,)
    with pytest.raises(ValueError):
        queues(h, 2, reta=[0, 1, 2, 0])                         # queue 2 of 2
    with pytest.raises(ValueError):
        queues(h, 2, reta=[0, 1, 0])                            # not a power of two
    with pytest.raises(TypeError):
        queues([0.5], 2)
    # non-IP (hash 0) lands on queue 0
    assert queues(batch_hash(Batch.from_packets([b"\x00" * 40])), 8)[0] == 0


# ---------------------------------------------------------------------------
# property: the compiled batch hash equals the Python reference

@st.composite
def ip_packets(draw):
    kind = draw(st.sampled_from(["v4", "v4", "v6", "v6", "junk"]))
    if kind == "v4":
        ihl = draw(st.sampled_from([5, 5, 5, 6, 15, 4, 0]))
        proto = draw(st.sampled_from([6, 17, 1, 47, 0]))
        frag = draw(st.sampled_from([0, 0x4000, 0x2000, 0x0001, 0x2001, 0x1FFF, 0x8000]))
        hdr = struct.pack("!BBHHHBBH", 0x40 | ihl, 0, draw(st.integers(0, 0xFFFF)), 0, frag,
                          64, proto, 0) + draw(st.binary(min_size=8, max_size=8))
        pkt = hdr + draw(st.binary(min_size=max(0, 4 * ihl - 20), max_size=max(0, 4 * ihl - 20)))
        pkt += draw(st.binary(max_size=24))
    elif kind == "v6":
        nh = draw(st.sampled_from([6, 17, 58, 0, 43, 44, 59]))
        pkt = struct.pack("!IHBB", 0x60000000, 0, nh, 64) + draw(st.binary(min_size=32, max_size=32))
        pkt += draw(st.binary(max_size=24))
    else:
        pkt = draw(st.binary(max_size=64))
    if draw(st.booleans()):
        pkt = pkt[:draw(st.integers(0, len(pkt)))]
    return kind, pkt


@st.composite
def batches(draw):
    linktype = draw(st.sampled_from(["raw", "ethernet"]))
    items = draw(st.lists(ip_packets(), min_size=1, max_size=12))
    pkts = []
    for kind, p in items:
        if linktype == "ethernet":
            et = draw(st.sampled_from([b"\x08\x00" if kind == "v4" else b"\x86\xdd",
                                       b"\x08\x00", b"\x86\xdd", b"\x08\x06"]))
            tag = b"\x81\x00" + draw(st.binary(min_size=2, max_size=2)) if draw(st.booleans()) else b""
            p = draw(st.binary(min_size=12, max_size=12)) + tag + et + p
            if draw(st.integers(0, 9)) == 0:
                p = p[:draw(st.integers(0, len(p)))]
        pkts.append(p)
    return linktype, pkts, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.booleans(), st.booleans())
def test_batch_matches_reference(spec, ports, udp):
    linktype, pkts, seed = spec
    b = Batch.from_packets(pkts, linktype=linktype, headroom=int(seed % 64))
    # junk all around the packets: a read outside a packet changes its hash
    rng = np.random.default_rng(seed)
    for i, p in enumerate(pkts):
        s = int(b.start[i])
        b.data[i, :s] = rng.integers(0, 256, s, dtype=np.uint8)
        b.data[i, s + len(p):] = rng.integers(0, 256, b.slot - s - len(p), dtype=np.uint8)
    got = batch_hash(b, ports=ports, udp=udp)
    want = [hash_packet(p, linktype, ports, udp) for p in pkts]
    assert list(got) == want
    assert list(b.flow_hash) == want
    assert b.packets() == pkts                                   # nothing written


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=40, max_size=40), st.binary(max_size=36))
def test_table_matches_reference_any_key(key, data):
    t = key_table(key)
    h = 0
    for j, x in enumerate(data):
        h ^= int(t[j, x])
    assert h == toeplitz(data, key)


def test_rss_input_shapes():
    pkt = v4_packet("1.2.3.4", "5.6.7.8", 17, l4hdr(1, 2, 8))
    assert rss_input(pkt) == addr("1.2.3.4") + addr("5.6.7.8") + port(1) + port(2)
    assert rss_input(pkt, udp=False) == addr("1.2.3.4") + addr("5.6.7.8")
    assert len(rss_input(v6_packet("::1", "::2", 6, l4hdr(1, 2)))) == 36
    with pytest.raises(ValueError):
        rss_input(pkt, "ppp")


def test_debug_flag_reported():
    assert _rss.DEBUG_BUILD in (True, False)


def test_handoff_row_copies():
    """take_rows / put_rows / own_rows (Dataplane.process's handoff): the
    rows asked for, and a clear error for an index or a shape that does
    not fit (never a copy out of bounds)."""
    rng = np.random.default_rng(3)
    src = rng.integers(0, 256, (50, 48), dtype=np.uint8)
    idx = np.array([3, 0, 49, 7], np.int64)
    dst = np.zeros((4, 48), np.uint8)
    _rss.take_rows(src, idx, dst)
    assert (dst == src[idx]).all()
    back = np.zeros_like(src)
    _rss.put_rows(dst, idx, back)
    assert (back[idx] == src[idx]).all() and not back[[1, 2]].any()
    for bad in ([50], [-1]):
        with pytest.raises(ValueError, match="out of range"):
            _rss.take_rows(src, np.array(bad, np.int64), dst)
        with pytest.raises(ValueError, match="out of range"):
            _rss.put_rows(dst[:1], np.array(bad, np.int64), back)
    with pytest.raises(ValueError, match="width"):
        _rss.take_rows(src, idx, np.zeros((4, 47), np.uint8))
    with pytest.raises(ValueError, match="fewer rows"):
        _rss.take_rows(src, idx, np.zeros((3, 48), np.uint8))
    owner = np.array([1, 0, 1, 1, 2, 0], np.uint16)
    rows = np.zeros(6, np.int64)
    assert _rss.own_rows(owner, 1, rows) == 3 and rows[:3].tolist() == [0, 2, 3]
    assert _rss.own_rows(owner, 7, rows) == 0
    with pytest.raises(ValueError, match="more rows"):
        _rss.own_rows(owner, 1, np.zeros(2, np.int64))


_FIELD_DTYPES = (np.int32, np.uint16, np.uint32, np.int64, np.uint8)


@given(st.integers(1, 60), st.data())
@settings(max_examples=150, deadline=None)
def test_move_fields_is_take_and_fancy_assignment(nrows, data):
    """move_fields (a worker's fields, in and back, in one call) against
    numpy: gather is np.take, scatter is the fancy assignment, for every
    field of every item size; the other rows are left alone."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    k = data.draw(st.integers(0, nrows))
    idx = rng.permutation(nrows)[:k].astype(np.int64)
    n = data.draw(st.integers(0, k))
    src = tuple(rng.integers(0, 100, nrows).astype(dt) for dt in _FIELD_DTYPES)
    dst = tuple(rng.integers(100, 200, max(k, 1)).astype(dt) for dt in _FIELD_DTYPES)
    want = tuple(d.copy() for d in dst)
    for w, s in zip(want, src):
        w[:n] = np.take(s, idx[:n])
    _rss.move_fields(src, dst, idx, n, True)
    assert all((a == b).all() for a, b in zip(dst, want))
    back = tuple(rng.integers(200, 250, nrows).astype(dt) for dt in _FIELD_DTYPES)
    want = tuple(b.copy() for b in back)
    for w, d in zip(want, dst):
        w[idx[:n]] = d[:n]
    _rss.move_fields(dst, back, idx, n, False)
    assert all((a == b).all() for a, b in zip(back, want))


def test_move_fields_refuses_what_does_not_fit():
    """An index or a length out of range, arrays of two item sizes or not
    1-D: a ValueError, and nothing written."""
    src = (np.arange(10, dtype=np.int32), np.arange(10, dtype=np.uint16))
    dst = (np.zeros(4, np.int32), np.zeros(4, np.uint16))
    idx = np.array([1, 9, 3, 0], np.int64)
    for bad, n, msg in ((np.array([1, 10], np.int64), 2, "out of range"),
                        (np.array([-1, 2], np.int64), 2, "out of range"),
                        (idx, 5, "n out of range")):
        with pytest.raises(ValueError, match=msg):
            _rss.move_fields(src, dst, bad, n, True)
        assert not any(d.any() for d in dst)
    with pytest.raises(ValueError, match="shorter than n"):
        _rss.move_fields(src, (np.zeros(3, np.int32), np.zeros(3, np.uint16)), idx, 4, True)
    with pytest.raises(ValueError, match="item size"):
        _rss.move_fields(src, (np.zeros(4, np.int64), np.zeros(4, np.uint16)), idx, 4, True)
    with pytest.raises(ValueError, match="item size"):
        _rss.move_fields((np.zeros((10, 2), np.int32),), (np.zeros(4, np.int32),), idx, 4, True)
    with pytest.raises(ValueError, match="numbers of fields"):
        _rss.move_fields(src, dst[:1], idx, 4, True)
    with pytest.raises(ValueError, match="out of range"):       # scatter: the indexed side
        _rss.move_fields(dst, (np.zeros(9, np.int32), np.zeros(9, np.uint16)), idx, 4, False)
    _rss.move_fields(src, dst, idx, 4, True)
    assert dst[0].tolist() == [1, 9, 3, 0] and dst[1].tolist() == [1, 9, 3, 0]

"""fastpath.pcap: readers, writers and replay.

Captures are built here byte by byte (independently of fastpath's writers),
with scapy, and with the Wireshark tools (text2pcap / editcap / mergecap),
and fastpath's own files are read back with scapy, tshark and capinfos.
Tests that need a tool skip with the reason when it is missing (Debian:
``apt-get install -y tshark``).  The reader tests run on both the compiled
helpers (fastpath._pcapio) and the numpy fallback.
"""
from __future__ import annotations

import gzip
import io
import os
import shutil
import struct
import subprocess
import threading
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fastpath
import fastpath.pcap as fp
from fastpath.pcap import PcapError, PcapngWriter, PcapWriter
from fastpath.scenarios import _end_packet, _eth

TSHARK = shutil.which("tshark")
CAPINFOS = shutil.which("capinfos")
EDITCAP = shutil.which("editcap")
TEXT2PCAP = shutil.which("text2pcap")
MERGECAP = shutil.which("mergecap")
need_tshark = pytest.mark.skipif(TSHARK is None or CAPINFOS is None,
                                 reason="tshark/capinfos not installed (apt-get install -y tshark)")
need_wstools = pytest.mark.skipif(None in (EDITCAP, TEXT2PCAP, MERGECAP),
                                  reason="editcap/text2pcap/mergecap not installed "
                                         "(apt-get install -y tshark)")


# ----------------------------------------------------------------------------
# capture builders (independent of fastpath's writers)
# ----------------------------------------------------------------------------

def pcap_bytes(packets, *, big=False, nano=False, linktype=1, snaplen=65535, ts=None,
               wirelens=None, magic=None, version=(2, 4)):
    e = ">" if big else "<"
    m = magic if magic is not None else (0xA1B23C4D if nano else 0xA1B2C3D4)
    out = [struct.pack(e + "IHHiIII", m, version[0], version[1], 0, 0, snaplen, linktype)]
    for k, p in enumerate(packets):
        t = ts[k] if ts is not None else 1_600_000_000_000_000_000 + k * 1_001_001
        sec, ns = divmod(t, 1_000_000_000)
        frac = ns if nano else ns // 1000
        wl = wirelens[k] if wirelens is not None else len(p)
        out.append(struct.pack(e + "IIII", sec, frac, len(p), wl) + p)
    return b"".join(out)


def opt(code, value, big=False):
    e = ">" if big else "<"
    return struct.pack(e + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def block(btype, body, big=False, trailer=None, length=None):
    e = ">" if big else "<"
    n = 12 + len(body) if length is None else length
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n if trailer is None
                                                                 else trailer)


def shb(big=False, opts=b"", version=(1, 0)):
    e = ">" if big else "<"
    return block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, *version, -1) + opts, big)


def idb(linktype=1, snaplen=0, *, name=None, tsresol=None, tsoffset=None, fcslen=None,
        big=False):
    e = ">" if big else "<"
    o = b""
    if name is not None:
        o += opt(2, name.encode(), big)
    if tsresol is not None:
        o += opt(9, bytes([tsresol]), big)
    if tsoffset is not None:
        o += opt(14, struct.pack(e + "q", tsoffset), big)
    if fcslen is not None:
        o += opt(13, bytes([fcslen]), big)
    if o:
        o += opt(0, b"", big)
    return block(1, struct.pack(e + "HHI", linktype, 0, snaplen) + o, big)


def epb(ifid, units, data, *, big=False, wirelen=None, comment=None, caplen=None):
    e = ">" if big else "<"
    o = (opt(1, comment.encode(), big) + opt(0, b"", big)) if comment else b""
    body = struct.pack(e + "IIIII", ifid, units >> 32, units & 0xFFFFFFFF,
                       len(data) if caplen is None else caplen,
                       len(data) if wirelen is None else wirelen)
    return block(6, body + data + b"\0" * (-len(data) % 4) + o, big)


def spb(data, *, big=False, wirelen=None):
    e = ">" if big else "<"
    return block(3, struct.pack(e + "I", len(data) if wirelen is None else wirelen)
                 + data + b"\0" * (-len(data) % 4), big)


def pb(ifid, units, data, *, big=False):
    e = ">" if big else "<"
    body = struct.pack(e + "HHIIII", ifid, 0, units >> 32, units & 0xFFFFFFFF, len(data),
                       len(data))
    return block(2, body + data + b"\0" * (-len(data) % 4), big)


def ip6(k=0, size=80):
    """An IPv6 End packet (80 bytes), or padded/cut to ``size``."""
    p = _end_packet("fc00:1::100", f"fc00:2::{k + 1:x}")
    return (p + bytes(range(256)) * 8)[:size] if size != 80 else p


def frames(n, sizes=None):
    out = []
    for k in range(n):
        size = int(sizes[k % len(sizes)]) if sizes is not None else 80
        out.append(_eth(ip6(k, max(size, 40))) if size else _eth(b""))
    return out


def read_all(src, **kw):
    r = fp.PcapReader(src, **kw)
    batches = list(r)
    return r, batches


def pkts_of(batches):
    return [p for b in batches for p in b.packets()]


def ts_of(batches):
    return [int(t) for b in batches for t in b.timestamp_ns]


@pytest.fixture(params=["compiled", "numpy"])
def backend(request):
    """Run a test on the compiled helpers and on the numpy fallback."""
    if request.param == "compiled" and fp._cio is None:
        pytest.skip("fastpath._pcapio is not built")
    fp.use_compiled(request.param == "compiled")
    yield request.param
    fp.use_compiled(True)


def write(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


# ----------------------------------------------------------------------------
# classic pcap
# ----------------------------------------------------------------------------

@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("nano", [False, True])
def test_classic_pcap_byte_orders_and_resolutions(tmp_path, backend, big, nano):
    pk = frames(50, sizes=[80, 40, 300, 1200])
    ts = [1_700_000_000_123_456_789 + k * 1_000_003 for k in range(50)]
    path = write(tmp_path, "a.pcap", pcap_bytes(pk, big=big, nano=nano, ts=ts))
    r, bs = read_all(path, batch_size=16)
    assert r.format == "pcap" and r.big_endian == big and r.nanosecond == nano
    assert pkts_of(bs) == pk
    assert ts_of(bs) == [t if nano else t // 1000 * 1000 for t in ts]
    assert [len(b) for b in bs] == [16, 16, 16, 2]
    assert all(b.linktype == "ethernet" for b in bs)
    assert all((b.capture_if == 0).all() for b in bs)
    assert [int(w) for b in bs for w in b.wire_length] == [len(p) for p in pk]


def test_snapped_packets_keep_wire_length(tmp_path, backend):
    pk = frames(3)
    cut = [p[:60] for p in pk]
    path = write(tmp_path, "s.pcap", pcap_bytes(cut, snaplen=60, wirelens=[len(p) for p in pk]))
    _, bs = read_all(path)
    assert pkts_of(bs) == cut
    assert bs[0].wire_length.tolist() == [len(p) for p in pk]


def test_fcs_bits_in_classic_header_strip_the_fcs(tmp_path, backend):
    pk = frames(3)
    with_fcs = [p + b"\xde\xad\xbe\xef" for p in pk]
    lt = 1 | 0x04000000 | (2 << 28)              # FCS present, 2 x 16 bits
    path = write(tmp_path, "f.pcap", pcap_bytes(with_fcs, linktype=lt))
    _, bs = read_all(path)
    assert pkts_of(bs) == pk


# ----------------------------------------------------------------------------
# pcapng
# ----------------------------------------------------------------------------

def multi_section_capture():
    """Two sections (little then big endian), three interfaces in the first
    (ns, 2^-10 s with an offset, ms), two in the second (default us, raw),
    EPB / SPB / obsolete PB, skipped blocks (NRB, ISB, custom) in between."""
    p = [ip6(k) for k in range(12)]
    e = [_eth(x) for x in p]
    s1 = (shb(opts=opt(1, b"first section") + opt(0, b""))
          + idb(1, 0, name="eth0", tsresol=9)
          + idb(101, 0, name="tun0", tsresol=0x80 | 10, tsoffset=100)
          + epb(0, 1_000_000_000_123, e[0])
          + block(4, b"\0\0\0\0")                                   # NRB, empty
          + epb(1, 3 * 1024 + 512, p[1])                          # 100 s + 3.5 s
          + idb(1, 0, name="eth9", tsresol=3)
          + epb(2, 42, e[2])
          + pb(0, 7, e[3])
          + block(5, struct.pack("<III", 0, 0, 0))                # ISB
          + epb(0, 8, e[4], comment="hello"))
    s2 = (shb(big=True)
          + idb(1, 0, name="eth1", big=True)
          + spb(e[5], big=True)
          + block(0x40000BAD, b"\0" * 8, big=True)                 # custom block
          + idb(229, 0, name="v6", big=True)
          + epb(1, 5_000_001, p[6], big=True)
          + epb(0, 9, e[7], big=True)
          + spb(e[8], big=True))
    expect = [(e[0], 1_000_000_000_123, "eth0"), (p[1], 103_500_000_000, "tun0"),
              (e[2], 42_000_000, "eth9"), (e[3], 7, "eth0"), (e[4], 8, "eth0"),
              (e[5], 0, "eth1"), (p[6], 5_000_001_000, "v6"), (e[7], 9_000, "eth1"),
              (e[8], 0, "eth1")]
    return s1 + s2, expect


def test_pcapng_sections_interfaces_tsresol_epb_spb(tmp_path, backend):
    data, expect = multi_section_capture()
    path = write(tmp_path, "m.pcapng", data)
    r, bs = read_all(path, batch_size=4)
    got = [(b.packet(i), int(b.timestamp_ns[i]), r.interfaces[int(b.capture_if[i])].name)
           for b in bs for i in range(len(b))]
    assert got == expect
    # batches: at most 4, cut where the link type changes
    for b in bs:
        kinds = {r.interfaces[int(i)].batch_linktype for i in b.capture_if}
        assert kinds == {b.linktype}
        assert len(b) <= 4
    assert [b.linktype for b in bs][:3] == ["ethernet", "raw", "ethernet"]
    assert [(i.section, i.id, i.name, i.linktype) for i in r.interfaces] == [
        (0, 0, "eth0", 1), (0, 1, "tun0", 101), (0, 2, "eth9", 1), (1, 0, "eth1", 1),
        (1, 1, "v6", 229)]
    assert r.sections[0]["comment"] == "first section"
    assert r.format == "pcapng"


def test_pcapng_power_of_two_resolution_rounds_to_ns(tmp_path, backend):
    units = [0, 1, 2**20 - 1, 123 * 2**20 + 2**19, 2**40 + 3]
    data = shb() + idb(101, 0, tsresol=0x80 | 20) + b"".join(epb(0, u, ip6()) for u in units)
    _, bs = read_all(write(tmp_path, "p2.pcapng", data))
    assert ts_of(bs) == [round(u * 1e9 / 2**20) if u < 2**40 else
                         (u >> 20) * 10**9 + round((u & (2**20 - 1)) * 1e9 / 2**20) for u in units]


def test_pcapng_fcslen_strips_fcs(tmp_path, backend):
    pk = frames(2)
    data = shb() + idb(1, 0, fcslen=4) + b"".join(epb(0, 1, p + b"FCS!") for p in pk)
    _, bs = read_all(write(tmp_path, "fcs.pcapng", data))
    assert pkts_of(bs) == pk


# ----------------------------------------------------------------------------
# link types
# ----------------------------------------------------------------------------

def sll(payload, proto=0x86DD):
    return struct.pack(">HHH8sH", 0, 1, 6, b"\x02\0\0\0\0\x01\0\0", proto) + payload


def sll2(payload, proto=0x86DD):
    return struct.pack(">HHIHBB8s", proto, 0, 3, 1, 0, 6, b"\x02\0\0\0\0\x01\0\0") + payload


@pytest.mark.parametrize("linktype,wrap,batch_lt", [
    (1, _eth, "ethernet"),
    (101, lambda p: p, "raw"),
    (228, lambda p: p, "raw"),
    (229, lambda p: p, "raw"),
    (113, sll, "raw"),
    (276, sll2, "raw"),
    (0, lambda p: struct.pack("<I", 24) + p, "raw"),
])
def test_linktypes(tmp_path, backend, linktype, wrap, batch_lt):
    inner = [ip6(k, s) for k, s in enumerate([80, 40, 200])]
    for name, data in (("c.pcap", pcap_bytes([wrap(p) for p in inner], linktype=linktype)),
                       ("n.pcapng", shb() + idb(linktype) + b"".join(
                           epb(0, 1, wrap(p)) for p in inner))):
        _, bs = read_all(write(tmp_path, name, data))
        assert bs[0].linktype == batch_lt
        want = [_eth(p) for p in inner] if batch_lt == "ethernet" else inner
        assert pkts_of(bs) == want, (name, linktype)


def test_cooked_capture_vlan_tag_and_non_ip(tmp_path, backend):
    tagged = sll(b"\x00\x64\x86\xdd" + ip6(1), proto=0x8100)
    arp = sll(b"\x00\x01\x08\x00" + b"\0" * 24, proto=0x0806)
    short = b"\0" * 10                                   # shorter than the SLL header
    _, bs = read_all(write(tmp_path, "v.pcap", pcap_bytes([tagged, arp, short], linktype=113)))
    assert pkts_of(bs) == [ip6(1), b"\x00\x01\x08\x00" + b"\0" * 24, b""]
    # through the router: the ARP and the stub are not IP
    r = fastpath.Router()
    r.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0\n"
                "ip -6 route add fc00:1::100/128 encap seg6local action End dev tun0\n"
                "ip -6 route add fc00:2::/32 via 2001:db8:1::2 dev tun0")
    b = bs[0]
    b.set_iif("tun0")
    r.process(b)
    res = b.results()
    assert res[0].verdict == "forward"
    assert res[1].reason == "not_ip" and res[2].verdict == "drop"


@pytest.mark.parametrize("lt", [12, 14])
def test_dlt_raw_12_is_refused_with_a_clear_message_or_read_as_raw(tmp_path, backend, lt):
    path = write(tmp_path, "r12.pcap", pcap_bytes([ip6()], linktype=lt))
    with pytest.raises(PcapError) as ei:
        read_all(path)
    assert ei.value.offset == 20
    assert f"link type {lt}" in str(ei.value) and "LINKTYPE_RAW 101" in str(ei.value)
    assert "raw12" in str(ei.value)
    _, bs = read_all(path, raw12=True)
    assert pkts_of(bs) == [ip6()] and bs[0].linktype == "raw"


def test_unknown_linktype(tmp_path, backend):
    with pytest.raises(PcapError, match=r"unsupported link type 147") as ei:
        read_all(write(tmp_path, "u.pcap", pcap_bytes([b"x"], linktype=147)))
    assert ei.value.offset == 20
    # pcapng: an interface nobody uses is fine; the first packet on it is the error
    good = epb(0, 1, _eth(ip6()))
    data = shb() + idb(1) + idb(147, name="usb0") + good + good
    bad_at = len(data)
    data += epb(1, 1, b"xx") + good
    r = fp.PcapReader(write(tmp_path, "u.pcapng", data))
    got = []
    with pytest.raises(PcapError, match=r"packet on interface 1 \(usb0\) has unsupported link "
                                        r"type 147") as ei:
        for b in r:
            got += b.packets()
    assert ei.value.offset == bad_at
    assert got == [_eth(ip6())] * 2


# ----------------------------------------------------------------------------
# sources: gzip, pipes, file objects, chunked streaming
# ----------------------------------------------------------------------------

def test_gzip_file_and_stream(tmp_path, backend):
    data, expect = multi_section_capture()
    path = write(tmp_path, "m.pcapng.gz", gzip.compress(data))
    r, bs = read_all(path)
    assert r.compressed
    assert pkts_of(bs) == [e[0] for e in expect]
    pk = frames(20, sizes=[80, 1500])
    _, bs = read_all(io.BytesIO(gzip.compress(pcap_bytes(pk))), chunk_bytes=4096, batch_size=3)
    assert pkts_of(bs) == pk


def test_truncated_gzip_is_a_pcap_error(tmp_path):
    pk = frames(200, sizes=[500])
    z = gzip.compress(pcap_bytes(pk))
    r = fp.PcapReader(write(tmp_path, "t.pcap.gz", z[:len(z) // 2]), chunk_bytes=4096,
                      batch_size=10)
    got = []
    with pytest.raises(PcapError, match="gzip|truncated"):
        for b in r:
            got += b.packets()
    assert 0 < len(got) < 200 and got == pk[:len(got)]


def _pipe_source(data, piece=777):
    """A read end of a real pipe, fed in small pieces by a thread."""
    rfd, wfd = os.pipe()

    def feed():
        with os.fdopen(wfd, "wb", buffering=0) as w:
            for k in range(0, len(data), piece):
                w.write(data[k:k + piece])
    t = threading.Thread(target=feed, daemon=True)
    t.start()
    return os.fdopen(rfd, "rb", buffering=0), t


def test_pipe_with_short_reads(backend):
    pk = frames(300, sizes=[80, 1400, 40, 9000])
    f, t = _pipe_source(pcap_bytes(pk, snaplen=65535))
    with f:
        _, bs = read_all(f, chunk_bytes=4096, batch_size=64)
    t.join()
    assert pkts_of(bs) == pk
    assert [len(b) for b in bs] == [64] * 4 + [44]


def test_stdin_dash(monkeypatch, backend):
    data, expect = multi_section_capture()
    f, t = _pipe_source(data, piece=100)

    class Stdin:
        buffer = f
    monkeypatch.setattr("sys.stdin", Stdin)
    r, bs = read_all("-")
    t.join()
    f.close()
    assert r.name == "<stdin>"
    assert pkts_of(bs) == [e[0] for e in expect]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=60),
       batch=st.integers(1, 17), chunk=st.sampled_from([4096, 5000, 1 << 16]),
       ng=st.booleans())
def test_streaming_batch_boundaries(sizes, batch, chunk, ng):
    pk = [bytes([k % 251]) * s for k, s in enumerate(sizes)]
    if ng:
        data = shb() + idb(101) + b"".join(epb(0, k, p) for k, p in enumerate(pk))
    else:
        data = pcap_bytes(pk, linktype=101)
    for compiled in (True, False):
        fp.use_compiled(compiled)
        try:
            r, bs = read_all(io.BytesIO(data), batch_size=batch, chunk_bytes=chunk)
        finally:
            fp.use_compiled(True)
        assert pkts_of(bs) == pk
        assert [len(b) for b in bs] == [batch] * (len(pk) // batch) + (
            [len(pk) % batch] if len(pk) % batch else [])
        for b in bs:
            assert b.slot >= b.headroom + int(b.length.max()) and b.slot % 64 == 0
            assert (b.start == b.headroom).all()
        assert r.packets == len(pk)


def test_big_packets_cut_batches_by_bytes(backend):
    pk = [bytes(100)] * 5 + [bytes(60000)] + [bytes(100)] * 5
    _, bs = read_all(io.BytesIO(pcap_bytes(pk, linktype=101)), batch_size=100,
                     batch_bytes=200_000, chunk_bytes=4096)
    assert pkts_of(bs) == pk
    assert all(b.data.nbytes <= 200_000 for b in bs)
    assert len(bs) > 1


def test_memory_stays_bounded(tmp_path):
    """A 20 MB capture read in 1 MB chunks: the reader holds a chunk and a
    batch, not the file."""
    pk = frames(200, sizes=[1000])
    one = pcap_bytes(pk)
    path = tmp_path / "big.pcap"
    with open(path, "wb") as f:
        f.write(one)
        for _ in range(99):
            f.write(one[24:])
    tracemalloc.start()
    try:
        n = 0
        for b in fp.read_batches(str(path), batch_size=256, chunk_bytes=1 << 20):
            n += len(b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == 20000
    assert peak < 6 << 20, peak


# ----------------------------------------------------------------------------
# malformed captures: PcapError with the offset, good packets before it
# ----------------------------------------------------------------------------

def expect_error(data, match, offset, n_good, **kw):
    got = []
    with pytest.raises(PcapError, match=match) as ei:
        for b in fp.PcapReader(io.BytesIO(data), batch_size=kw.pop("batch_size", 2), **kw):
            got += b.packets()
    assert ei.value.offset == offset, str(ei.value)
    assert f"byte {offset}:" in str(ei.value)
    assert len(got) == n_good
    assert isinstance(ei.value, ValueError)
    return got


def test_bad_magic_empty_and_short_files(backend):
    expect_error(b"GIF89a" + bytes(40), r"not a pcap or pcapng file \(magic 0x47494638\)", 0, 0)
    expect_error(b"", "empty file", 0, 0)
    expect_error(b"\xd4\xc3", "truncated file", 0, 0)
    expect_error(pcap_bytes([])[:20], r"truncated pcap file header: 20 of 24", 0, 0)
    expect_error(pcap_bytes([], version=(3, 0)), "unsupported pcap version 3.0", 4, 0)
    expect_error(struct.pack("<I", 0xA1B2CD34) + bytes(20), "modified", 0, 0)


@pytest.mark.parametrize("big", [False, True])
def test_classic_pcap_truncations_and_caplen(backend, big):
    pk = frames(5, sizes=[80, 300])
    data = pcap_bytes(pk, big=big, snaplen=1000)
    rec = [24]
    for p in pk:
        rec.append(rec[-1] + 16 + len(p))
    expect_error(data[:rec[3] + 10], r"truncated record header \(10 of 16", rec[3], 3)
    expect_error(data[:rec[3] + 20], r"truncated record: caplen 314, 4 bytes of data left",
                 rec[3], 3)
    e = ">" if big else "<"
    bad = bytearray(data)
    struct.pack_into(e + "I", bad, rec[2] + 8, 1001)
    expect_error(bytes(bad), r"caplen 1001 exceeds the snapshot length 1000", rec[2], 2)
    # a hostile snaplen does not lift the limit
    hostile = bytearray(pcap_bytes(pk, big=big, snaplen=0xFFFFFFFF))
    struct.pack_into(e + "I", hostile, rec[1] + 8, 0xFFFFFFF0)
    expect_error(bytes(hostile), r"caplen 4294967280 exceeds the limit 262144", rec[1], 1)
    # a snapped packet (caplen < len) is fine; snaplen 0 means none
    got = list(fp.read_batches(io.BytesIO(pcap_bytes(pk, snaplen=0))))
    assert pkts_of(got) == pk


def test_pcapng_malformed_blocks(backend):
    pk = [_eth(ip6(k)) for k in range(4)]
    head = shb() + idb(1)
    good = b"".join(epb(0, k, p) for k, p in enumerate(pk[:2]))
    at = len(head) + len(good)
    blk = epb(0, 9, pk[2])
    # trailing length disagrees
    bad = bytearray(blk)
    struct.pack_into("<I", bad, len(bad) - 4, len(blk) + 4)
    expect_error(head + good + bytes(bad) + epb(0, 1, pk[3]),
                 rf"trailing length {len(blk) + 4} != leading length {len(blk)}", at, 2)
    # truncated block (EOF inside it), truncated block header
    expect_error(head + good + blk[:50], rf"truncated block \(type 6, length {len(blk)}, 50 bytes",
                 at, 2)
    expect_error(head + good + blk[:7], r"truncated block header \(7 of", at, 2)
    # block lengths that are impossible
    for ln in (8, 13, 30):
        bad = bytearray(blk)
        struct.pack_into("<I", bad, 4, ln)
        expect_error(head + good + bytes(bad), rf"invalid length {ln}", at, 2)
    # a hostile block length: refused before anything is read or allocated
    bad = bytearray(blk)
    struct.pack_into("<I", bad, 4, 0xFFFFFFF0)
    expect_error(head + good + bytes(bad), r"block length 4294967280 exceeds the limit", at, 2)
    # caplen beyond the block, beyond the interface snaplen
    bad = bytearray(blk)
    struct.pack_into("<I", bad, 20, 200)
    expect_error(head + good + bytes(bad), r"caplen 200 runs past the end of its block", at, 2)
    snap_head = shb() + idb(1, snaplen=100)
    expect_error(snap_head + good + epb(0, 1, pk[2] + bytes(20)),
                 r"caplen 114 exceeds the interface 0 snapshot length 100",
                 len(snap_head) + len(good), 2)
    # interface id without an IDB; SPB before any IDB
    expect_error(head + good + epb(3, 1, pk[2]), r"packet on interface 3, but the section "
                 r"has 1 interface", at, 2)
    expect_error(shb() + spb(pk[0]), r"interface 0, but the section has 0", 28, 0)
    # bad SHB: byte-order magic, version, truncated; the first block not an SHB
    s2 = bytearray(shb())
    s2[8:12] = b"ABCD"
    expect_error(head + good + bytes(s2), r"bad byte-order magic 0x41424344", at, 2)
    expect_error(head + good + shb(version=(2, 0)), r"unsupported pcapng version 2.0", at, 2)
    expect_error(head + good + shb()[:20], r"truncated section header block", at, 2)
    expect_error(shb()[:10], r"truncated section header block", 0, 0)
    # truncated / inconsistent IDB; an option running past its block
    i2 = idb(1)
    expect_error(head + good + i2[:12], r"truncated interface description block", at, 2)
    bad = bytearray(idb(1, name="eth0"))
    struct.pack_into("<H", bad, 18, 200)
    expect_error(head + good + bytes(bad), r"option 2 of length 200 runs past the end", at, 2)
    # a skipped block that is truncated or inconsistent
    nrb = block(4, bytes(16))
    expect_error(head + good + nrb[:20], r"truncated block \(type 4", at, 2)
    bad = bytearray(nrb)
    struct.pack_into("<I", bad, len(bad) - 4, 99)
    expect_error(head + good + bytes(bad), r"block trailing length 99 != leading length 28", at, 2)


def test_huge_skipped_block_streams_with_small_memory(backend):
    """A custom block longer than max_block is skipped by streaming through it."""
    big_body = bytes(3 << 20)
    data = shb() + idb(101) + epb(0, 1, ip6()) + block(0x40000BAD, big_body) + epb(0, 2, ip6(1))
    _, bs = read_all(io.BytesIO(data), max_block=1 << 20, chunk_bytes=1 << 16)
    assert pkts_of(bs) == [ip6(), ip6(1)]


def test_hostile_length_on_a_short_stream_allocates_little(backend):
    data = shb() + idb(101) + epb(0, 1, ip6())
    bad = bytearray(epb(0, 1, ip6()))
    struct.pack_into("<I", bad, 4, 15 << 20)           # under max_block, file is tiny
    tracemalloc.start()
    try:
        expect_error(data + bytes(bad), r"truncated block \(type 6, length 15728640", len(data), 1,
                     chunk_bytes=4096)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, peak


def test_errors_stop_mode_keeps_the_error(tmp_path, backend):
    pk = frames(5)
    data = pcap_bytes(pk)[:-5]
    r = fp.PcapReader(io.BytesIO(data), errors="stop")
    got = pkts_of(list(r))
    assert got == pk[:4]
    assert isinstance(r.error, PcapError) and "truncated record" in str(r.error)


def _fuzz_seeds():
    data, _ = multi_section_capture()
    pk = frames(6, sizes=[80, 7, 300])
    return [data, pcap_bytes(pk), pcap_bytes(pk, big=True, nano=True, linktype=113),
            shb() + idb(1, 64) + b"".join(epb(0, k, p) for k, p in enumerate(pk))]


def _outcome(data, compiled, batch):
    fp.use_compiled(compiled)
    got = []
    try:
        for b in fp.PcapReader(io.BytesIO(data), batch_size=batch, chunk_bytes=4096,
                               max_block=1 << 16):
            got.append((b.linktype, b.packets(), b.timestamp_ns.tolist(),
                        b.capture_if.tolist()))
        return got, None
    except PcapError as e:
        return got, (e.offset, str(e))
    finally:
        fp.use_compiled(True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 3), edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)),
                                              max_size=6),
       cut=st.one_of(st.none(), st.integers(0, 10**6)), batch=st.integers(1, 5))
def test_fuzz_mutated_captures(seed, edits, cut, batch):
    """Random byte edits and truncations: PcapError or packets, never another
    exception, and the compiled and numpy readers agree."""
    data = bytearray(_fuzz_seeds()[seed])
    for pos, val in edits:
        data[pos % len(data)] = val
    if cut is not None:
        data = data[:cut % (len(data) + 1)]
    data = bytes(data)
    a = _outcome(data, True, batch)
    if fp._cio is not None:
        assert _outcome(data, False, batch) == a


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400), st.sampled_from([b"\x0a\x0d\x0d\x0a", b"\xd4\xc3\xb2\xa1",
                                                  b"\xa1\xb2\x3c\x4d", b""]))
def test_fuzz_random_bytes(tail, head):
    got, err = _outcome(head + tail, True, 3)
    assert err is not None or got is not None


# ----------------------------------------------------------------------------
# writers
# ----------------------------------------------------------------------------

ROUTES = """
ip link add link eth1 name eth1.100 type vlan id 100
ip -6 addr add 2001:db8:1::1/64 dev eth0
ip -6 addr add 2001:db8:2::1/64 dev eth1
ip -6 addr add 2001:db8:3::1/64 dev eth1.100
ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:00:22 dev eth1
ip -6 neigh add 2001:db8:3::2 lladdr 02:00:00:00:00:33 dev eth1.100
ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev eth1
ip -6 route add fc00:3::/32 via 2001:db8:3::2 dev eth1.100
ip -6 route add fc00:1::100/128 encap seg6local action End count dev eth0
"""


def mixed_traffic(n=40):
    """End packets to eth1 and to the VLAN interface, no-route (ICMP error),
    hop limit 1 (ICMP), SL 0 (drop), and one to the router itself (local)."""
    out = []
    for k in range(n):
        kind = k % 6
        if kind == 0:
            p = _end_packet("fc00:1::100", f"fc00:2::{k + 1:x}")
        elif kind == 1:
            p = _end_packet("fc00:1::100", f"fc00:3::{k + 1:x}")
        elif kind == 2:
            p = _end_packet("fc00:9::1", "fc00:2::1")            # no route: ICMP
        elif kind == 3:
            p = _end_packet("fc00:1::100", "fc00:2::1", hlim=1)  # time exceeded
        elif kind == 4:
            p = bytearray(_end_packet("fc00:1::100", "fc00:2::1"))
            p[43] = 0                                           # SL 0: drop
            p = bytes(p)
        else:                                                   # local, no SRH
            p = (bytes([0x60, 0, 0, 0, 0, 0, 59, 64])
                 + bytes.fromhex("20010db8000100000000000000000002")
                 + bytes.fromhex("20010db8000100000000000000000001"))
        out.append(_eth(p))
    return out


def processed(n=40, ts0=1_650_000_000_000_000_000):
    r = fastpath.Router()
    r.configure(ROUTES)
    pk = mixed_traffic(n)
    b = fastpath.Batch.from_packets(pk, iif="eth0", linktype="ethernet",
                                    timestamps_ns=np.arange(n, dtype=np.int64) * 1000 + ts0)
    orig = b.copy()
    r.process(b)
    return r, b, orig, pk


def test_writer_selects_by_verdict_and_interface(tmp_path, backend):
    r, b, orig, pk = processed()
    res = b.results()
    with PcapngWriter(tmp_path / "o.pcapng") as out, \
            PcapngWriter(tmp_path / "d.pcapng", select="drops") as drops, \
            PcapngWriter(tmp_path / "a.pcapng", select="all") as alls:
        assert out.write_batch(b) == sum(x.verdict in ("forward", "icmp") for x in res)
        drops.write_batch(b, original=orig)
        alls.write_batch(b, original=orig)
    rd = fp.PcapReader(str(tmp_path / "o.pcapng"))
    got = [(p, rd.interfaces[int(bb.capture_if[i])].name, int(bb.timestamp_ns[i]))
           for bb in rd for i, p in enumerate(bb.packets())]
    want = [(x.data, x.oif, int(b.timestamp_ns[i])) for i, x in enumerate(res)
            if x.verdict in ("forward", "icmp")]
    assert got == want
    names = {n for _, n, _ in got}
    assert names == {"eth1", "eth1.100", "eth0"}            # ICMP errors go back out eth0
    # Ethernet egress as the datapath built it: egress MAC, neighbour MAC, VLAN tag
    itf = r.interfaces
    for p, n, _ in got:
        assert p[6:12] == itf[n].mac
        if n == "eth1":
            assert p[:6] == bytes.fromhex("020000000022") and p[12:14] == b"\x86\xdd"
        if n == "eth1.100":
            assert p[:6] == bytes.fromhex("020000000033") and p[12:16] == b"\x81\x00\x00\x64"
    # drops: as they arrived, on the ingress interface
    rd = fp.PcapReader(str(tmp_path / "d.pcapng"))
    got = [(p, rd.interfaces[int(bb.capture_if[i])].name) for bb in rd
           for i, p in enumerate(bb.packets())]
    assert got == [(pk[i], "eth0") for i, x in enumerate(res) if x.verdict == "drop"]
    assert len(got) > 0
    # all: every packet
    rd = fp.PcapReader(str(tmp_path / "a.pcapng"))
    assert sum(len(bb) for bb in rd) == len(pk)


def test_writer_interface_ids_across_batches_and_counts(tmp_path, backend):
    r, b, _, _ = processed(60)
    with PcapngWriter(tmp_path / "o.pcapng") as w:
        for k in range(0, 60, 7):
            w.write_batch(b[k:k + 7])
    assert set(w.interfaces) == {("eth1", 1), ("eth1.100", 1), ("eth0", 1)}
    res = b.results()
    out = [x for x in res if x.verdict in ("forward", "icmp")]
    assert dict(w.per_interface) == {n: sum(x.oif == n for x in out) for n in {x.oif for x in out}}
    assert w.packets == len(out)
    # IDBs appear once each, in order of first use
    rd = fp.PcapReader(str(tmp_path / "o.pcapng"))
    list(rd)
    assert [i.name for i in rd.interfaces] == list(dict.fromkeys(x.oif for x in out))
    assert all(i.tsresol == 9 for i in rd.interfaces)


def test_fragments_are_all_written(tmp_path, backend):
    r = fastpath.Router()
    r.configure("ip addr add 10.0.1.1/24 dev tun0\nip addr add 10.0.2.1/24 dev tun1\n"
                "ip link set tun1 mtu 600\nip route add 20.0.0.0/8 via 10.0.2.2 dev tun1")

    def ip4(total):
        hdr = bytearray([0x45, 0, total >> 8, total & 0xFF, 0, 1, 0, 0, 64, 17, 0, 0,
                         10, 0, 1, 2, 20, 0, 0, 1])
        s = sum(int.from_bytes(hdr[j:j + 2], "big") for j in range(0, 20, 2))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        hdr[10:12] = (~s & 0xFFFF).to_bytes(2, "big")
        return bytes(hdr) + bytes(total - 20)
    b = fastpath.Batch.from_packets([ip4(1500), ip4(100)], iif="tun0")
    r.process(b)
    assert 0 in b.fragments and b.results()[1].verdict == "forward"
    frags = b.fragments[0]
    for W, name in ((PcapngWriter, "f.pcapng"), (PcapWriter, "f.pcap")):
        with W(tmp_path / name) as w:
            assert w.write_batch(b) == len(frags) + 1
        got = [p for bb in fp.read_batches(str(tmp_path / name)) for p in bb.packets()]
        assert got == list(frags) + [b.packet(1)]


def test_pcap_writer_us_ns_and_one_linktype(tmp_path, backend):
    _, b, _, _ = processed()
    for nano in (True, False):
        with PcapWriter(tmp_path / "o.pcap", nanosecond=nano, select="all") as w:
            w.write_batch(b)
        rd = fp.PcapReader(str(tmp_path / "o.pcap"))
        bs = list(rd)
        assert rd.nanosecond == nano and rd.interfaces[0].linktype == 1
        assert pkts_of(bs) == b.packets()
        want = b.timestamp_ns.tolist()
        assert ts_of(bs) == (want if nano else [t // 1000 * 1000 for t in want])
    raw = fastpath.Batch.from_packets([ip6()])
    with PcapWriter(tmp_path / "x.pcap", select="all") as w:
        w.write_batch(b)
        with pytest.raises(ValueError, match="one link type"):
            w.write_batch(raw)
    with PcapWriter(tmp_path / "e.pcap"):
        pass
    assert len((tmp_path / "e.pcap").read_bytes()) == 24


def test_write_packets_comments_snaplen_and_gzip(tmp_path, backend):
    pk = [ip6(k, s) for k, s in enumerate([80, 41, 1000, 43])]
    with PcapngWriter(tmp_path / "c.pcapng.gz", snaplen=500, comment="made by a test") as w:
        w.write_packets(pk, interface="tun7", timestamps_ns=[1, 2, 3, 4],
                        comments=["a", None, "ccc", "dddd"])
    raw = (tmp_path / "c.pcapng.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    rd = fp.PcapReader(str(tmp_path / "c.pcapng.gz"))
    bs = list(rd)
    assert pkts_of(bs) == [p[:500] for p in pk]
    assert bs[0].wire_length.tolist() == [len(p) for p in pk]
    assert rd.interfaces[0].name == "tun7" and rd.interfaces[0].linktype == 101
    assert rd.sections[0]["comment"] == "made by a test"


def test_writer_to_a_file_object_and_closed_errors(tmp_path, backend):
    buf = io.BytesIO()
    w = PcapWriter(buf, linktype="raw", threaded=False)
    w.write_packets([ip6()])
    w.close()
    assert pkts_of(fp.read_batches(io.BytesIO(buf.getvalue()))) == [ip6()]
    with pytest.raises(ValueError, match="closed"):
        w.write_batch(fastpath.Batch.from_packets([ip6()]))
    with pytest.raises(ValueError, match="select"):
        PcapngWriter(io.BytesIO(), select="nope")


def test_writer_thread_reports_write_errors(tmp_path):
    class Broken(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise OSError(28, "No space left on device")
    w = PcapngWriter(Broken())
    with pytest.raises(OSError, match="No space"):
        for _ in range(3):
            w.write_packets([ip6()])
        w.close()


def test_compiled_and_numpy_writers_agree(tmp_path):
    if fp._cio is None:
        pytest.skip("fastpath._pcapio is not built")
    _, b, orig, _ = processed(120)
    outs = []
    for compiled in (True, False):
        fp.use_compiled(compiled)
        try:
            for W, kw in ((PcapngWriter, {"select": "all"}), (PcapngWriter, {"select": "drops"}),
                          (PcapWriter, {"select": "all", "snaplen": 90})):
                bio = io.BytesIO()
                with W(bio, threaded=False, **kw) as w:
                    w.write_batch(b, original=orig)
                outs.append(bio.getvalue())
        finally:
            fp.use_compiled(True)
    assert outs[:3] == outs[3:]


# ----------------------------------------------------------------------------
# other tools: scapy, tshark, capinfos, editcap, text2pcap, mergecap
# ----------------------------------------------------------------------------

def test_scapy_reads_our_files(tmp_path):
    from scapy.utils import PcapNgReader, rdpcap
    _, b, orig, _ = processed()
    with PcapngWriter(tmp_path / "o.pcapng", select="all") as w:
        w.write_batch(b, original=orig)
    with PcapWriter(tmp_path / "o.pcap", select="all", nanosecond=False) as w:
        w.write_batch(b, original=orig)
    with PcapngWriter(tmp_path / "d.pcapng", select="drops") as w:
        w.write_batch(b, original=orig)
    want = [pk for pk in _all_bytes(b, orig)]
    for name in ("o.pcapng", "o.pcap"):
        caps = rdpcap(str(tmp_path / name))
        assert [bytes(c) for c in caps] == want
        ts = [int(t) // 1000 * 1000 for t in b.timestamp_ns]
        assert [round(float(c.time) * 1e6) * 1000 for c in caps] == ts
    with PcapNgReader(str(tmp_path / "d.pcapng")) as rd:
        cs = list(rd)
    reasons = [x.reason for x in b.results() if x.verdict == "drop"]
    assert [c.comment.decode() if isinstance(c.comment, bytes) else c.comment
            for c in cs] == reasons


def _all_bytes(b, orig):
    out = []
    for i, x in enumerate(b.results()):
        out.append(x.data if x.verdict in ("forward", "icmp") else orig.packet(i))
    return out


def test_read_scapy_written_captures(tmp_path, backend):
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap, wrpcapng
    pk = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IPv6(dst=f"fc00::{k + 1:x}")
          / (b"x" * k) for k in range(30)]
    for k, p in enumerate(pk):
        p.time = 1_700_000_000 + k / 8
    wrpcap(str(tmp_path / "s.pcap"), pk)
    wrpcapng(str(tmp_path / "s.pcapng"), pk)
    wrpcap(str(tmp_path / "r.pcap"), [p[IPv6] for p in pk])
    for name in ("s.pcap", "s.pcapng"):
        _, bs = read_all(str(tmp_path / name), batch_size=7)
        assert pkts_of(bs) == [bytes(p) for p in pk]
        assert ts_of(bs) == [int(round((1_700_000_000 + k / 8) * 1e6)) * 1000 for k in range(30)]
    _, bs = read_all(str(tmp_path / "r.pcap"))
    assert bs[0].linktype == "raw" and pkts_of(bs) == [bytes(p[IPv6]) for p in pk]


def _run(*cmd, **kw):
    # Wireshark's tools are not ours: no AddressSanitizer preloaded into them
    # (the CI's ASan stage sets LD_PRELOAD for the Python under test)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60, env=env,
                          **kw).stdout


def _comment_field():
    """The tshark field of packet comments (frame.comment since 3.6)."""
    fields = _run(TSHARK, "-G", "fields")
    return "frame.comment" if "\tframe.comment\t" in fields else "pkt_comment"


@need_tshark
def test_tshark_and_capinfos_read_our_files(tmp_path):
    r, b, orig, _ = processed(60)
    res = b.results()
    o, d, p = tmp_path / "o.pcapng", tmp_path / "d.pcapng.gz", tmp_path / "o.pcap"
    with PcapngWriter(o) as w1, PcapngWriter(d, select="drops") as w2, PcapWriter(p) as w3:
        for k in range(0, 60, 16):
            w1.write_batch(b[k:k + 16])
            w2.write_batch(b[k:k + 16], original=orig[k:k + 16])
            w3.write_batch(b[k:k + 16])
    cfield = _comment_field()
    out = _run(TSHARK, "-r", str(o), "-T", "fields", "-E", "separator=|",
               "-e", "frame.interface_name", "-e", "frame.time_epoch", "-e", "frame.len",
               "-e", "eth.src", "-e", "ipv6.dst")
    rows = [line.split("|") for line in out.splitlines()]
    want = [(x, int(b.timestamp_ns[i])) for i, x in enumerate(res)
            if x.verdict in ("forward", "icmp")]
    assert [row[0] for row in rows] == [x.oif for x, _ in want]
    assert [int(row[1].replace(".", "")) for row in rows] == [t for _, t in want]
    assert [int(row[2]) for row in rows] == [len(x.data) for x, _ in want]
    assert [row[3] for row in rows] == [":".join(f"{c:02x}" for c in r.interfaces[x.oif].mac)
                                        for x, _ in want]
    out = _run(TSHARK, "-r", str(d), "-T", "fields", "-e", cfield, "-e", "frame.interface_name")
    drops = [x.reason for x in res if x.verdict == "drop"]
    assert [line.split("\t") for line in out.splitlines()] == [[rz, "eth0"] for rz in drops]
    info = _run(CAPINFOS, "-T", "-m", "-r", "-t", "-E", "-c", str(o), str(p))
    lines = [row.split(",") for row in info.splitlines()]
    assert [row[1:] for row in lines] == [["pcapng", "ether", str(len(want))],
                                          ["nsecpcap", "ether", str(len(want))]], info


@need_tshark
@need_wstools
def test_read_wireshark_tool_output(tmp_path, backend):
    pk = [ip6(k, s) for k, s in enumerate([80, 44, 200, 60])]
    # text2pcap: a hexdump to a pcapng of raw IP (the classic output is tested via editcap)
    dump = "".join("0000 " + " ".join(f"{c:02x}" for c in p) + "\n\n" for p in pk)
    (tmp_path / "d.txt").write_text(dump)
    _run(TEXT2PCAP, "-q", "-n", "-l", "101", str(tmp_path / "d.txt"), str(tmp_path / "t.pcapng"))
    _, bs = read_all(str(tmp_path / "t.pcapng"))
    assert pkts_of(bs) == pk and bs[0].linktype == "raw"
    # editcap: to microsecond and nanosecond classic pcap; mergecap: two interfaces in one pcapng
    with PcapngWriter(tmp_path / "a.pcapng") as w:
        w.write_packets([_eth(p) for p in pk], interface="ethA", linktype="ethernet",
                        timestamps_ns=[10**18 + k * 1001 for k in range(4)])
    with PcapngWriter(tmp_path / "b.pcapng") as w:
        w.write_packets(pk[:2], interface="tunB", timestamps_ns=[10**18 + 500, 10**18 + 2500])
    _run(EDITCAP, "-F", "pcap", str(tmp_path / "a.pcapng"), str(tmp_path / "us.pcap"))
    _run(EDITCAP, "-F", "nsecpcap", str(tmp_path / "a.pcapng"), str(tmp_path / "ns.pcap"))
    for name, nano in (("us.pcap", False), ("ns.pcap", True)):
        r, bs = read_all(str(tmp_path / name))
        assert r.nanosecond == nano and pkts_of(bs) == [_eth(p) for p in pk]
        assert ts_of(bs) == [(10**18 + k * 1001) // (1 if nano else 1000) * (1 if nano else 1000)
                             for k in range(4)]
    _run(MERGECAP, "-w", str(tmp_path / "m.pcapng"), str(tmp_path / "a.pcapng"),
         str(tmp_path / "b.pcapng"))
    r, bs = read_all(str(tmp_path / "m.pcapng"))
    got = [(p, r.interfaces[int(b.capture_if[i])].name) for b in bs
           for i, p in enumerate(b.packets())]
    assert sorted(got) == sorted([(_eth(p), "ethA") for p in pk] + [(p, "tunB") for p in pk[:2]])
    assert [b.linktype for b in bs] == ["ethernet", "raw", "ethernet", "raw", "ethernet"]


# ----------------------------------------------------------------------------
# replay API
# ----------------------------------------------------------------------------

def test_replay_api_callback_and_stats(tmp_path, backend):
    r, b0, orig, pk = processed(90)
    src = tmp_path / "in.pcapng"
    with PcapngWriter(src, select="all") as w:
        w.write_packets(pk, interface="eth0", linktype="ethernet",
                        timestamps_ns=orig.timestamp_ns.tolist())
    r2 = fastpath.Router()
    r2.configure(ROUTES)
    seen = []
    stats = fp.replay(r2, str(src), output=str(tmp_path / "o.pcapng"),
                      drops=str(tmp_path / "d.pcapng"), on_batch=lambda b: seen.append(len(b)),
                      batch_size=32, iif="eth0")
    assert seen == [32, 32, 26]
    res = b0.results()
    assert stats.packets == 90 and stats.bytes == sum(len(p) for p in pk)
    assert dict(stats.verdicts) == {v: sum(x.verdict == v for x in res)
                                    for v in {x.verdict for x in res}}
    assert stats.egress["eth1.100"] == sum(x.oif == "eth1.100" for x in res)
    assert dict(stats.drop_reasons) == {"srh_missing": 15}         # SL 0 on End
    assert stats.verdicts["local"] == 15
    assert set(stats.icmp_reasons) == {"no_route", "hop_limit_exceeded"}
    out = [p for b in fp.read_batches(str(tmp_path / "o.pcapng")) for p in b.packets()]
    assert out == [x.data for x in res if x.verdict in ("forward", "icmp")]
    drops = [p for b in fp.read_batches(str(tmp_path / "d.pcapng")) for p in b.packets()]
    assert drops == [pk[i] for i, x in enumerate(res) if x.verdict == "drop"]
    assert r2.counters()["routes"]["fc00:1::100/128 table 254"]["packets"] > 0
    assert stats.as_dict()["packets"] == 90


def test_process_batches_generator_drives_batch_by_batch():
    """A traffic generator: hand batches in one at a time, get them back processed."""
    r = fastpath.Router()
    r.configure(ROUTES)
    gen_batches = (fastpath.Batch.from_packets(mixed_traffic(12), iif="eth0", linktype="ethernet")
                   for _ in range(3))
    out = io.BytesIO()
    stats = fp.ReplayStats()
    with PcapngWriter(out, threaded=False) as w:
        n = 0
        for b in fp.process_batches(r, gen_batches, output=w, stats=stats):
            assert (b.verdict != 0).all()
            n += 1
    assert n == 3 and stats.packets == 36
    assert stats.verdicts["local"] == 6
    assert sum(stats.egress.values()) == w.packets


def test_prefetch_delivers_in_order_then_the_error(backend):
    pk = frames(50, sizes=[80, 300])
    data = pcap_bytes(pk)[:-7]
    got = []
    it = fp.read_batches(io.BytesIO(data), batch_size=8, prefetch=2)
    assert isinstance(it, fp.Prefetch)
    with pytest.raises(PcapError, match="truncated record"):
        for b in it:
            got += b.packets()
    assert got == pk[:49]
    # stopping early ends the thread
    it = fp.read_batches(io.BytesIO(pcap_bytes(pk)), batch_size=2, prefetch=1)
    next(it)
    it.close()
    assert not it._t.is_alive()


def test_replay_keeps_counts_and_output_up_to_a_malformed_record(tmp_path, backend):
    pk = mixed_traffic(30)
    data = pcap_bytes(pk)
    (tmp_path / "bad.pcap").write_bytes(data[:-10])
    r = fastpath.Router()
    r.configure(ROUTES)
    stats = fp.ReplayStats()
    with pytest.raises(PcapError, match="truncated record") as ei:
        fp.replay(r, str(tmp_path / "bad.pcap"), output=str(tmp_path / "o.pcapng"), stats=stats,
                  batch_size=8, iif="eth0")
    assert stats.packets == 29 and stats.error == str(ei.value)
    res = processed(30)[1].results()[:29]
    out = [p for b in fp.read_batches(str(tmp_path / "o.pcapng")) for p in b.packets()]
    assert out == [x.data for x in res if x.verdict in ("forward", "icmp")]


def test_reader_alloc_builds_the_batches_where_asked(tmp_path):
    p = tmp_path / "a.pcap"
    with fp.PcapWriter(p, linktype="raw") as w:
        w.write_packets([bytes([0x60]) + bytes(39 + k) for k in range(10)], linktype="raw")
    got = []

    def alloc(shape):
        a = np.full(shape, 0xEE, np.uint8)       # the reader must fill every byte
        got.append(a)
        return a
    plain = list(fp.PcapReader(p, batch_size=4))
    mine = list(fp.PcapReader(p, batch_size=4, alloc=alloc))
    assert len(got) == 3 and all(b.data.base is a or b.data is a for b, a in zip(mine, got))
    for a, b in zip(plain, mine):
        assert (a.data == b.data).all() and (a.length == b.length).all()
    with pytest.raises(ValueError, match="alloc must return"):
        list(fp.PcapReader(p, batch_size=4, alloc=lambda s: np.zeros((1, 1), np.uint8)))

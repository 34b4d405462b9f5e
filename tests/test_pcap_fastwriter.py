"""The writers' fast path (select "output": one compiled call selects by
verdict and packs into the sink's reused buffer) against the general path
(``writer.fast = False``: select_rows + need + pack_epb / pack_pcap, the
code every select took before), byte for byte, on random batches; and the
chunked sink (records packed into large buffers, written when full) against
independently built bytes."""
from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import fastpath
import fastpath.pcap as fp
from fastpath.pcap import PcapngWriter, PcapWriter
from fastpath.pcap.writer import _Sink

VERDICTS = 5                      # none, forward, local, drop, icmp


def make_batch(rng, n, slot, linktype, oifs, names, maxlen=None):
    data = rng.integers(0, 256, (n, slot), dtype=np.uint8)
    start = np.zeros(n, np.int32)
    length = np.zeros(n, np.int32)
    for i in range(n):
        s = int(rng.integers(0, slot + 1))
        room = slot - s
        if maxlen is not None:
            room = min(room, maxlen)
        pick = rng.integers(0, 4)
        ln = 0 if pick == 0 else (room if pick == 1 else int(rng.integers(0, room + 1)))
        start[i], length[i] = s, ln
    b = fastpath.Batch(data, start, length, linktype=linktype)
    b.verdict[:] = rng.integers(0, VERDICTS, n)
    b.oif[:] = rng.choice(oifs, n)
    ts = rng.integers(-2**40, 2**62, n)
    ts[rng.random(n) < 0.2] = 0
    ts[rng.random(n) < 0.1] = 2**63 - 1
    b.timestamp_ns[:] = ts
    b.ifnames = names
    return b


def write_all(W, kw, batches, fast, chunk, backend_compiled=True, threaded=False):
    bio = io.BytesIO()
    old = _Sink.CHUNK
    _Sink.CHUNK = chunk
    fp.use_compiled(backend_compiled)
    try:
        w = W(bio, threaded=threaded, **kw)
        w.fast = fast
        counts = []
        for b in batches:
            counts.append(w.write_batch(b))
        w.close()
    finally:
        _Sink.CHUNK = old
        fp.use_compiled(True)
    return bio.getvalue(), counts, w.packets, dict(w.per_interface)


WRITERS = [(PcapngWriter, {}), (PcapngWriter, {"snaplen": 60}), (PcapngWriter, {"snaplen": 0}),
           (PcapWriter, {}), (PcapWriter, {"nanosecond": False}),
           (PcapWriter, {"snaplen": 33, "nanosecond": True})]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), nb=st.integers(0, 4), n=st.integers(0, 40),
       slot=st.sampled_from([0, 1, 64, 128, 320, 1600]), writer=st.integers(0, len(WRITERS) - 1),
       chunk=st.sampled_from([1, 100, 4096, 4 << 20]), raw=st.booleans(),
       named=st.integers(0, 2))
def test_fast_path_bytes_equal_the_general_path(seed, nb, n, slot, writer, chunk, raw, named):
    rng = np.random.default_rng(seed)
    W, kw = WRITERS[writer]
    oifs = [1, 2, 3, 7, 70, 5000]
    names = [None, {1: "eth0", 2: "eth1", 7: "tun7"}, {3: "x", 5000: "far"}][named]
    # pcap holds one link type: every batch of a file has the same
    lt = "raw" if raw else "ethernet"
    batches = [make_batch(rng, int(rng.integers(0, n + 1)), slot, lt, oifs,
                          names if k % 2 == 0 else (dict(names) if names else None))
               for k in range(nb)]
    ref = write_all(W, kw, batches, fast=False, chunk=4 << 20)
    got = write_all(W, kw, batches, fast=True, chunk=chunk)
    assert got == ref
    if fp._cio is not None:
        assert write_all(W, kw, batches, fast=True, chunk=chunk, backend_compiled=False) == ref


@pytest.mark.parametrize("W,kw", WRITERS[:1] + WRITERS[3:4])
def test_fast_path_big_packets_threaded_and_files_read_back(tmp_path, W, kw):
    """Max-snaplen and empty packets, batches bigger than a chunk, the
    writer thread: the file equals the general path's and reads back."""
    rng = np.random.default_rng(7)
    big = fastpath.Batch(np.zeros((3, 262144 + 64), np.uint8),
                         np.array([64, 0, 10], np.int32), np.array([262144, 0, 5000], np.int32),
                         linktype="ethernet")
    big.data[0, 64:] = rng.integers(0, 256, 262144, dtype=np.uint8)
    big.verdict[:] = 1
    big.oif[:] = [2, 2, 9]
    big.timestamp_ns[:] = [1, 2, 3]
    batches = [big] + [make_batch(rng, 3000, 320, "ethernet", [1, 2], {1: "a", 2: "b"})
                       for _ in range(3)]
    ref = write_all(W, kw, batches, fast=False, chunk=4 << 20)
    for chunk in (1 << 16, 4 << 20):
        assert write_all(W, kw, batches, fast=True, chunk=chunk, threaded=True) == ref
    path = tmp_path / ("o.pcapng" if W is PcapngWriter else "o.pcap")
    with W(str(path), **kw) as w:
        for b in batches:
            w.write_batch(b)
    assert path.read_bytes() == ref[0]
    got = [p for b in fp.read_batches(str(path)) for p in b.packets()]
    want = [b.packet(i) for b in batches for i in np.flatnonzero((b.verdict == 1)
                                                                 | (b.verdict == 4))]
    assert got == want


def test_empty_batch_and_no_packets_selected():
    b = fastpath.Batch(np.zeros((0, 64), np.uint8), np.zeros(0, np.int32),
                       np.zeros(0, np.int32))
    for W in (PcapngWriter, PcapWriter):
        for fast in (True, False):
            assert write_all(W, {}, [b], fast=fast, chunk=64)[1] == [0]
    b2 = fastpath.Batch.from_packets([b"\x60" + bytes(39)] * 3, linktype="raw")
    b2.verdict[:] = 3                     # drops only: nothing for "output"
    assert write_all(PcapngWriter, {}, [b2], True, 64) == write_all(PcapngWriter, {}, [b2],
                                                                     False, 64)


def test_pcap_bytes_built_independently():
    """Classic pcap output of the fast path, against struct-built records."""
    pk = [bytes(range(k % 256)) * 1 + b"\xaa" * k for k in (0, 1, 14, 99, 300)]
    b = fastpath.Batch.from_packets(pk, linktype="ethernet")
    b.verdict[:] = [1, 4, 3, 1, 1]
    b.oif[:] = 2
    b.timestamp_ns[:] = [5, -1, 7, 1_700_000_000_123_456_789, 2**40]
    for nano in (True, False):
        bio = io.BytesIO()
        with PcapWriter(bio, nanosecond=nano, snaplen=200, threaded=False) as w:
            assert w.write_batch(b) == 4
        want = [struct.pack("<IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0, 200, 1)]
        for i in (0, 1, 3, 4):
            t = max(int(b.timestamp_ns[i]), 0)
            sec, ns = divmod(t, 10**9)
            c = min(len(pk[i]), 200)
            want.append(struct.pack("<IIII", sec, ns if nano else ns // 1000, c, len(pk[i]))
                        + pk[i][:c])
        assert bio.getvalue() == b"".join(want)
        assert dict(w.per_interface) == {"if2": 4}


def test_drops_and_output_files_together_through_replay(tmp_path):
    """A replay writes output (fast path) and drops (general path, comments):
    both equal what the general path alone writes."""
    from fastpath.scenarios import _end_packet, _eth
    r = fastpath.Router()
    r.configure("""
ip -6 addr add 2001:db8:1::1/64 dev eth0
ip -6 addr add 2001:db8:2::1/64 dev eth1
ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:00:22 dev eth1
ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev eth1
ip -6 route add fc00:1::100/128 encap seg6local action End count dev eth0
""")
    frames = [_eth(_end_packet("fc00:1::100", f"fc00:{2 if k % 3 else 9}::{k + 1:x}"))
              if k % 5 else b"\x02" * 12 + b"\x88\xb5" + bytes(k % 60) for k in range(500)]
    src = tmp_path / "in.pcapng"
    with PcapngWriter(str(src)) as w:
        w.write_packets(frames, interface="eth0", linktype="ethernet",
                        timestamps_ns=[10**18 + k for k in range(500)])
    outs = {}
    for fast in (True, False):
        o, d = fp.open_writer(str(tmp_path / f"o{fast}.pcapng")), \
            fp.open_writer(str(tmp_path / f"d{fast}.pcapng"), select="drops")
        o.fast = d.fast = fast
        st_ = fp.replay(r, str(src), output=o, drops=d, iif="eth0", batch_size=64)
        o.close()
        d.close()
        outs[fast] = ((tmp_path / f"o{fast}.pcapng").read_bytes(),
                      (tmp_path / f"d{fast}.pcapng").read_bytes(), st_.verdicts)
    assert outs[True] == outs[False]
    v = outs[True][2]
    assert v["forward"] > 0 and v["drop"] > 0 and v["icmp"] > 0


@pytest.mark.parametrize("W", [PcapngWriter, PcapWriter])
@pytest.mark.parametrize("compiled", [True, False])
def test_a_packet_outside_its_slot_is_an_error_not_a_crash(W, compiled):
    """start/length changed after the Batch was made so that a packet runs
    past its slot (or is negative): ValueError, nothing written."""
    if compiled and fp._cio is None:
        pytest.skip("fastpath._pcapio is not built")
    for start, length in ((10, 60), (-1, 5), (0, -3), (64, 1)):
        b = fastpath.Batch.from_packets([b"\x60" + bytes(39)] * 3, linktype="raw", headroom=0,
                                        slot=64)
        b.verdict[:] = 1
        b.start[1], b.length[1] = start, length
        bio = io.BytesIO()
        fp.use_compiled(compiled)
        try:
            w = W(bio, threaded=False)
            with pytest.raises(ValueError):
                w.write_batch(b)
            assert w.packets == 0
        finally:
            fp.use_compiled(True)


@pytest.mark.parametrize("threaded", [False, True])
def test_records_reach_the_file_when_a_chunk_fills_or_at_flush(threaded):
    b = fastpath.Batch.from_packets([b"\x60" + bytes(99)] * 10, linktype="raw")
    b.verdict[:] = 1
    bio = io.BytesIO()
    w = PcapngWriter(bio, threaded=threaded)
    w.write_batch(b)
    assert bio.getvalue() == b""                 # all of it still in the buffer
    w.flush()
    if threaded:
        import time
        for _ in range(200):
            if len(bio.getvalue()) == w.bytes:
                break
            time.sleep(0.01)
    assert len(bio.getvalue()) == w.bytes
    w.close()
    got = [p for x in fp.read_batches(io.BytesIO(bio.getvalue())) for p in x.packets()]
    assert got == [b"\x60" + bytes(99)] * 10


def _runs_without_the_gil(call, tries=20):
    """Whether another Python thread makes progress while ``call()`` runs.
    With a 1 s switch interval the calling thread keeps the GIL unless it
    releases it itself; the other thread gives it back at each step."""
    import sys
    import threading
    import time
    state = {"n": 0, "stop": False}

    def spin():
        while not state["stop"]:
            state["n"] += 1
            time.sleep(0)                # releases the GIL every step

    old = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    t = threading.Thread(target=spin, daemon=True)
    t.start()
    try:
        while state["n"] == 0:
            time.sleep(0.001)
        for _ in range(tries):
            n0 = state["n"]
            call()
            if state["n"] > n0:
                return True
        return False
    finally:
        state["stop"] = True
        t.join()
        sys.setswitchinterval(old)


@pytest.mark.skipif(fp._cio is None, reason="fastpath._pcapio not built")
def test_compiled_packers_and_reader_loops_release_the_gil():
    """pack_selected / pack_epb / pack_pcap (the writer) and scan / gather
    (the reader) let the replay's other threads run while they copy: the
    reader, the datapath and the writer overlap on separate CPUs."""
    io_ = fp._cio
    n, slot = 60_000, 256
    data = np.full((n, slot), 7, np.uint8)
    start = np.zeros(n, np.int32)
    length = np.full(n, 200, np.int32)
    verdict = np.ones(n, np.uint8)
    sel = np.zeros(256, np.uint8)
    sel[1] = 1
    keys = np.zeros(n, np.uint32)
    lut = np.zeros(1, np.int64)
    ts = np.arange(n, dtype=np.int64)
    out = np.empty(n * (32 + slot), np.uint8)
    counts = np.zeros(1, np.int64)
    rows = np.arange(n, dtype=np.int64)
    e64, e32, e8 = np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.uint8)
    assert _runs_without_the_gil(lambda: io_.pack_selected(
        True, verdict, sel, data, start, length, keys, lut, ts, True, 0, out, counts))
    assert _runs_without_the_gil(lambda: io_.pack_epb(
        data, start, length, rows, keys, lut, ts, e8, e64, e32, 0, out, counts))
    assert _runs_without_the_gil(lambda: io_.pack_pcap(
        data, start, length, rows, ts, True, 0, out))
    # the reader: the records just packed as pcap, walked and copied back
    k = io_.pack_pcap(data, start, length, rows, ts, True, 0, out)
    off, cap = np.zeros(n, np.int64), np.zeros(n, np.int32)
    wlen, rts = np.zeros(n, np.uint32), np.zeros(n, np.int64)
    assert _runs_without_the_gil(lambda: io_.scan_pcap(
        out, 0, k, False, 65535, 1, off, cap, wlen, rts, 0, n))
    assert io_.scan_pcap(out, 0, k, False, 65535, 1, off, cap, wlen, rts, 0, n)[0] == n
    back = np.empty((n, slot), np.uint8)
    assert _runs_without_the_gil(lambda: io_.gather(out, off, cap, back, 0))
    assert (back[:, :200] == 7).all()

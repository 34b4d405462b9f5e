"""Captures in and out: pcap / pcapng readers that parse records straight
into ``Batch`` arrays, writers that record what a processed batch sends on
each interface, and a replay loop that ties them to a Router.

    import fastpath, fastpath.pcap as fpcap

    r = fastpath.Router.from_file("routes.conf")
    with fpcap.PcapngWriter("out.pcapng") as out, \\
         fpcap.PcapngWriter("drops.pcapng", select="drops") as drops:
        for batch in fpcap.read_batches("in.pcapng", batch_size=4096, iif="eth0"):
            r.process(batch)
            out.write_batch(batch)        # forwarded + ICMP errors, on their egress interface
            drops.write_batch(batch)      # drops, drop reason as the packet comment

or, the same in one call: ``fpcap.replay(r, "in.pcapng", output="out.pcapng",
drops="drops.pcapng")`` (returns a ``ReplayStats``).

Reading
-------
Classic pcap (both byte orders, microsecond ``a1b2c3d4`` and nanosecond
``a1b23c4d`` magic) and pcapng (any number of sections, each with its own
byte order and interfaces; ``if_tsresol`` in powers of 10 and of 2,
``if_tsoffset``, ``if_fcslen``; Enhanced, Simple and obsolete Packet
Blocks; every other block is skipped), from a path, ``"-"`` (standard
input, a pipe) or a binary file object, gzip-compressed or not (detected
from the first bytes).  The stream is read in chunks (``chunk_bytes``) into
one reused buffer: memory stays flat however big the capture.

Link types and what the batch gets:

=========  ================================  ============================
linktype   name                              batch
=========  ================================  ============================
1          Ethernet                          ``"ethernet"``, frames as is
101        LINKTYPE_RAW (raw IPv4/IPv6)      ``"raw"``
228 / 229  LINKTYPE_IPV4 / LINKTYPE_IPV6     ``"raw"``
113        Linux cooked (SLL)                ``"raw"``: the 16-byte SLL
                                             header is stripped (and an
                                             802.1Q tag after it)
276        Linux cooked v2 (SLL2)            ``"raw"``: 20 bytes stripped
0 / 108    BSD loopback (NULL / LOOP)        ``"raw"``: 4 bytes stripped
12 / 14    DLT_RAW of some OSes              refused (``PcapError``) unless
                                             ``raw12=True``: the value 12 is
                                             raw IP on Linux but C-HDLC on
                                             BSD/OS and LOOP on OpenBSD;
                                             files should say 101
=========  ================================  ============================

A stripped cooked packet that is not IP (ARP, say) reaches the datapath as
it is and is dropped as ``not_ip``.  An Ethernet frame with an FCS
(``if_fcslen``, or the FCS bits of a classic header) has it removed when
the frame was captured whole.

Each batch gets, besides the Batch fields, ``batch.capture_if`` (uint32 per
packet: index into ``reader.interfaces``, the pcapng interface the packet
was captured on; 0 for classic pcap) and ``batch.wire_length`` (the
packet's original length on the wire).  Packets are processed as captured
(``caplen`` bytes): a snapped capture gives ``truncated`` drops.

Malformed input (bad magic, truncated record or block, caplen above the
snapshot length or ``max_caplen``, block lengths that disagree, unknown
link type, ...) raises ``PcapError`` (a ``ValueError``) whose ``offset`` is
the byte offset of the bad header in the (uncompressed) stream; every good
packet before it has been delivered in the batches yielded before the
error.  No length field from the file is trusted for an allocation: records
are bounded by ``max_caplen`` and blocks by ``max_block``.

Writing
-------
``PcapngWriter`` writes one Interface Description Block per egress
interface (``if_name`` = the fastpath interface name, nanosecond
timestamps), each packet on its interface; ``PcapWriter`` writes classic
pcap (nanosecond magic by default, ``nanosecond=False`` for microseconds),
one link type per file.  ``write_batch(batch)`` picks the packets by
verdict (``select``):

* ``"output"`` (default): verdict ``forward`` and ``icmp`` (the slot holds
  the ICMP error the datapath built) on ``oif``, fragments included;
* ``"drops"``: verdict ``drop`` on the ingress interface, with the drop
  reason name (``no_route``, ...) as the packet comment (pcapng), bytes as
  they arrived when ``write_batch(batch, original=copy)`` is given a copy
  taken before processing (``replay`` does), else as they stand;
* ``"all"``: every packet (forward/icmp on ``oif``, the rest on ``iif``;
  comments ``local``, ``drop: REASON``, ``icmp: REASON``).

``local`` packets are delivered to the router itself: they are counted,
never written (except with ``select="all"``).

Replay
------
``replay(processor, source, output=, drops=, on_batch=)`` and the generator
``process_batches(processor, batches, output=, drops=, stats=)`` push
batches through a Router (or a ``fastpath.Dataplane``, or anything with
``process(batch)``) and count them in a ``ReplayStats``.

Performance: the compiled helpers of ``fastpath._pcapio`` do the record
walks and the copies (without them, a numpy fallback does the same, fast
only when consecutive packets have equal lengths); ``replay`` reads two
batches ahead in a thread (``Prefetch``) and the writers write from a
thread, so that file I/O overlaps with the datapath (all of them release
the GIL).  Memory is bounded: one read chunk, one batch of pending
records, the batches in flight, three write buffers.
"""
from __future__ import annotations

import gzip
import io
import os
import queue
import struct
import sys
import threading
import time
import zlib
from collections import Counter
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .batch import Batch
from .reasons import REASON_NAMES, VERDICTS, VERDICT_IDS

try:
    from . import _pcapio as _cio
except ImportError:          # not built: the numpy fallback below
    _cio = None

__all__ = ["PcapError", "PcapReader", "read_batches", "read_packets", "Prefetch", "PcapWriter",
           "PcapngWriter", "open_writer", "ReplayStats", "process_batches", "replay",
           "CaptureInterface", "LINKTYPES", "MAX_CAPLEN", "MAX_BLOCK", "use_compiled"]

MAX_CAPLEN = 262144          # libpcap's MAXIMUM_SNAPLEN: the largest record accepted
MAX_BLOCK = 16 << 20         # largest pcapng block held in memory whole
DEFAULT_BATCH = 4096
DEFAULT_CHUNK = 1 << 20

LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LOOP = 0, 1, 101, 108
LINKTYPE_LINUX_SLL, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL2 = 113, 228, 229, 276
# linktype -> (name, batch linktype, bytes stripped in front; "sll" / "sll2":
# the cooked header, plus an 802.1Q tag when the protocol field says 0x8100)
LINKTYPES = {
    LINKTYPE_ETHERNET: ("Ethernet", "ethernet", 0),
    LINKTYPE_RAW: ("raw IP", "raw", 0),
    LINKTYPE_IPV4: ("raw IPv4", "raw", 0),
    LINKTYPE_IPV6: ("raw IPv6", "raw", 0),
    LINKTYPE_LINUX_SLL: ("Linux cooked (SLL)", "raw", "sll"),
    LINKTYPE_LINUX_SLL2: ("Linux cooked v2 (SLL2)", "raw", "sll2"),
    LINKTYPE_NULL: ("BSD loopback", "raw", 4),
    LINKTYPE_LOOP: ("OpenBSD loopback", "raw", 4),
}
_LT_OUT = {"ethernet": LINKTYPE_ETHERNET, "raw": LINKTYPE_RAW}

# scan status codes (as fastpath._pcapio)
ST_NEED_MORE, ST_FULL, ST_BAD_CAPLEN, ST_BAD_BLOCKLEN, ST_OTHER_BLOCK = 0, 1, 2, 3, 4
ST_BLOCK_TOO_BIG, ST_LEN_MISMATCH, ST_CAPLEN_OVERRUN, ST_BAD_IFID, ST_BAD_LINKTYPE = 5, 6, 7, 8, 9

_SHB, _IDB, _SPB, _EPB, _PB = 0x0A0D0D0A, 1, 3, 6, 2
_PCAP_MAGICS = {  # first four bytes -> (big endian, nanosecond)
    b"\xd4\xc3\xb2\xa1": (False, False), b"\xa1\xb2\xc3\xd4": (True, False),
    b"\x4d\x3c\xb2\xa1": (False, True), b"\xa1\xb2\x3c\x4d": (True, True),
}


class PcapError(ValueError):
    """A capture that cannot be read (further).  ``offset``: the byte offset
    (in the uncompressed stream) of the header or block at fault; ``path``:
    the source's name; ``reason``: the message without them."""

    def __init__(self, reason: str, offset: int, path: str | None = None):
        self.reason = reason
        self.offset = int(offset)
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}byte {self.offset}: {reason}")


@dataclass
class CaptureInterface:
    """An interface of the capture (a pcapng IDB, or the classic file header)."""
    index: int                   # position in reader.interfaces (= batch.capture_if)
    section: int                 # pcapng section number (0 for classic pcap)
    id: int                      # interface id within its section
    linktype: int
    snaplen: int
    name: str | None = None
    description: str | None = None
    tsresol: int = 6             # if_tsresol byte (classic: 6 or 9)
    tsoffset: int = 0            # if_tsoffset, seconds
    fcslen: int = 0              # bytes of FCS at the end of each frame
    offset: int = 0              # byte offset of the IDB / header

    @property
    def batch_linktype(self) -> str | None:
        lt = LINKTYPES.get(self.linktype)
        return lt[1] if lt else None


# ----------------------------------------------------------------------------
# the numpy / struct fallback of fastpath._pcapio (same signatures, same results)
# ----------------------------------------------------------------------------

class _PyIO:
    """Pure numpy/struct versions of the compiled helpers.  Record walks are
    a struct loop that switches to one numpy check per run of equal-length
    records; copies use one fancy-indexing pass per distinct length."""

    @staticmethod
    def scan_pcap(buf, pos, end, big, maxcap, frac_ns, off, cap, wlen, ts, n0, maxrec):
        e = ">" if big else "<"
        hdr = struct.Struct(e + "IIII")
        dt = np.dtype(e + "u4")
        n, status, last, cool = n0, ST_FULL, -1, 0
        while n < maxrec:
            if end - pos < 16:
                status = ST_NEED_MORE
                break
            a, b, c, w = hdr.unpack_from(buf, pos)
            if c > maxcap:
                status = ST_BAD_CAPLEN
                break
            if end - pos - 16 < c:
                status = ST_NEED_MORE
                break
            if c == last and cool <= 0:
                rec = 16 + c
                k = min((end - pos) // rec, maxrec - n)
                if k >= 8:
                    h = np.ndarray((k, 4), dt, buffer=buf, offset=pos, strides=(rec, 4))
                    bad = np.flatnonzero(h[:, 2] != c)
                    m = int(bad[0]) if bad.size else k
                    s = slice(n, n + m)
                    ts[s] = (h[:m, 0].astype(np.int64) * 1_000_000_000
                             + h[:m, 1].astype(np.int64) * frac_ns)
                    cap[s], wlen[s] = c, h[:m, 3]
                    off[s] = pos + 16 + np.arange(m, dtype=np.int64) * rec
                    n += m
                    pos += m * rec
                    if m < 64:
                        cool = 64
                    continue
            cool -= 1
            ts[n], cap[n], wlen[n], off[n] = a * 1_000_000_000 + b * frac_ns, c, w, pos + 16
            n += 1
            pos += 16 + c
            last = c
        return n, pos, status

    @staticmethod
    def scan_pcapng(buf, pos, end, big, if_snap, if_ok, maxcap, maxblock, off, cap, wlen, ifid,
                    ts, kind, n0, maxrec):
        e = ">" if big else "<"
        u32 = struct.Struct(e + "I")
        hdr2 = struct.Struct(e + "II")
        epb = struct.Struct(e + "IIIIIII")
        pb = struct.Struct(e + "IIHHIIII")
        dt = np.dtype(e + "u4")
        nif = len(if_snap)
        n, status, last, cool = n0, ST_FULL, -1, 0
        while n < maxrec:
            if end - pos < 12:
                status = ST_NEED_MORE
                break
            t, blen = hdr2.unpack_from(buf, pos)
            if t not in (_EPB, _SPB, _PB):
                status = ST_OTHER_BLOCK
                break
            if blen < 12 or blen & 3:
                status = ST_BAD_BLOCKLEN
                break
            if blen > maxblock:
                status = ST_BLOCK_TOO_BIG
                break
            if end - pos < blen:
                status = ST_NEED_MORE
                break
            if u32.unpack_from(buf, pos + blen - 4)[0] != blen:
                status = ST_LEN_MISMATCH
                break
            if t == _SPB:
                if blen < 16:
                    status = ST_BAD_BLOCKLEN
                    break
                if nif == 0:
                    status = ST_BAD_IFID
                    break
                if not if_ok[0]:
                    status = ST_BAD_LINKTYPE
                    break
                ol = u32.unpack_from(buf, pos + 8)[0]
                c = min(ol, blen - 16)
                if if_snap[0] and c > if_snap[0]:
                    c = int(if_snap[0])
                if c > maxcap:
                    status = ST_BAD_CAPLEN
                    break
                i, a, b, o = 0, 0, 0, pos + 12
            else:
                if blen < 32:
                    status = ST_BAD_BLOCKLEN
                    break
                if t == _EPB:
                    _, _, i, a, b, c, ol = epb.unpack_from(buf, pos)
                else:
                    _, _, i, _, a, b, c, ol = pb.unpack_from(buf, pos)
                if i >= nif:
                    status = ST_BAD_IFID
                    break
                if not if_ok[i]:
                    status = ST_BAD_LINKTYPE
                    break
                if c > blen - 32:
                    status = ST_CAPLEN_OVERRUN
                    break
                if c > maxcap or (if_snap[i] and c > if_snap[i]):
                    status = ST_BAD_CAPLEN
                    break
                o = pos + 28
                if t == _EPB and blen == last and cool <= 0:
                    # a run of EPBs of this size, same interface and caplen?
                    k = min((end - pos) // blen, maxrec - n)
                    if k >= 8:
                        h = np.ndarray((k, 7), dt, buffer=buf, offset=pos, strides=(blen, 4))
                        tr = np.ndarray((k,), dt, buffer=buf, offset=pos + blen - 4,
                                        strides=(blen,))
                        good = ((h[:, 0] == _EPB) & (h[:, 1] == blen) & (h[:, 2] == i)
                                & (h[:, 5] == c) & (tr == blen))
                        bad = np.flatnonzero(~good)
                        m = int(bad[0]) if bad.size else k
                        s = slice(n, n + m)
                        u = (h[:m, 3].astype(np.uint64) << np.uint64(32)) | h[:m, 4]
                        ts[s], cap[s], wlen[s] = u.view(np.int64), c, h[:m, 6]
                        ifid[s], kind[s] = i, _EPB
                        off[s] = o + np.arange(m, dtype=np.int64) * blen
                        n += m
                        pos += m * blen
                        if m < 64:
                            cool = 64
                        continue
            cool -= 1
            last = blen
            u = (a << 32) | b
            off[n], cap[n], wlen[n], ifid[n], kind[n] = o, c, ol, i, t
            ts[n] = u - (1 << 64) if u >> 63 else u
            n += 1
            pos += blen
        return n, pos, status

    @staticmethod
    def gather(buf, off, length, data, headroom, zero=True):
        n, slot = data.shape
        src = np.frombuffer(buf, np.uint8)
        if n and (length.min() < 0 or off.min() < 0 or (off + length).max() > src.size
                  or headroom + length.max() > slot):
            raise ValueError("gather: packet out of bounds")
        data.fill(0)
        for ln in np.unique(length):
            ln = int(ln)
            if ln == 0:
                continue
            rows = np.flatnonzero(length == ln)
            win = as_strided(src, shape=(src.size - ln + 1, ln), strides=(1, 1), writeable=False)
            data[rows, headroom:headroom + ln] = win[off[rows]]
        return int(length.sum())

    @staticmethod
    def _copy_packets(data, start, length, rows, caps, out, dst):
        """out[dst[k] : dst[k] + caps[k]] = packet rows[k] (its first caps[k] bytes)."""
        n = len(rows)
        if n == 0:
            return
        slot = data.shape[1]
        flat = data.reshape(-1)
        srcpos = rows.astype(np.int64) * slot + start[rows]
        uniq = np.unique(caps)
        if len(uniq) > 64:           # many distinct lengths: one slice copy per packet
            for k in range(n):
                c = int(caps[k])
                s = int(srcpos[k])
                out[int(dst[k]):int(dst[k]) + c] = flat[s:s + c]
            return
        for c in uniq:
            c = int(c)
            if c == 0:
                continue
            sel = np.flatnonzero(caps == c)
            swin = as_strided(flat, shape=(flat.size - c + 1, c), strides=(1, 1), writeable=False)
            dwin = as_strided(out, shape=(out.size - c + 1, c), strides=(1, 1))
            dwin[dst[sel]] = swin[srcpos[sel]]

    @staticmethod
    def _check(data, start, length, rows):
        nrow, slot = data.shape
        if len(start) != nrow or len(length) != nrow:
            raise ValueError("start/length must have one entry per data row")
        if len(rows) and (rows.min() < 0 or rows.max() >= nrow):
            raise ValueError("row out of range")
        s, ln = start[rows].astype(np.int64), length[rows].astype(np.int64)
        if len(rows) and (s.min() < 0 or ln.min() < 0 or (s + ln).max() > slot):
            raise ValueError("packet lies outside its slot")

    @staticmethod
    def select_rows(verdict, lut, rows):
        idx = np.flatnonzero(np.asarray(lut, bool)[verdict])
        rows[:len(idx)] = idx
        return len(idx)

    @staticmethod
    def tally(verdict, oif, reason, v_fwd, v_icmp, v_drop, vcount, ocount, dcount, icount):
        vcount += np.bincount(verdict, minlength=256)[:256]
        out = (verdict == v_fwd) | (verdict == v_icmp)
        o = oif[out].astype(np.int64)
        ok = o < len(ocount)
        miss = int((~ok).sum())
        np.add.at(ocount, o[ok], 1)
        for vid, cnt in ((v_drop, dcount), (v_icmp, icount)):
            rs = reason[verdict == vid].astype(np.int64)
            ok = rs < len(cnt)
            miss += int((~ok).sum())
            np.add.at(cnt, rs[ok], 1)
        return miss

    @staticmethod
    def need_pcap(length, rows, snaplen):
        ln = length[rows].astype(np.int64)
        caps = np.minimum(ln, snaplen) if snaplen else ln
        return int((16 + caps).sum())

    @staticmethod
    def need_epb(length, rows, opt_len, snaplen):
        ln = length[rows].astype(np.int64)
        caps = np.minimum(ln, snaplen) if snaplen else ln
        return int((32 + ((caps + 3) & ~3)).sum()) + int(np.asarray(opt_len, np.int64).sum())

    @staticmethod
    def pack_pcap(data, start, length, rows, ts_ns, nanosecond, snaplen, out):
        _PyIO._check(data, start, length, rows)
        if len(ts_ns) != data.shape[0]:
            raise ValueError("ts_ns must have one entry per data row")
        n = len(rows)
        ln = length[rows].astype(np.int64)
        caps = np.minimum(ln, snaplen) if snaplen else ln
        sizes = 16 + caps
        need = int(sizes.sum())
        if need > out.size:
            raise ValueError("output buffer too small")
        if n == 0:
            return 0
        pos = np.cumsum(sizes) - sizes
        ts = np.maximum(ts_ns[rows], 0)
        hdr = np.empty((n, 4), "<u4")
        hdr[:, 0] = ts // 1_000_000_000
        frac = ts % 1_000_000_000
        hdr[:, 1] = frac if nanosecond else frac // 1000
        hdr[:, 2] = caps
        hdr[:, 3] = ln
        hwin = as_strided(out, shape=(out.size - 15, 16), strides=(1, 1))
        hwin[pos] = hdr.view(np.uint8).reshape(n, 16)
        _PyIO._copy_packets(data, start, length, rows, caps, out, pos + 16)
        return need

    @staticmethod
    def pack_epb(data, start, length, rows, ifx, lut, ts, opts, opt_off, opt_len, snaplen, out,
                 counts):
        _PyIO._check(data, start, length, rows)
        if len(ifx) != data.shape[0] or len(ts) != data.shape[0]:
            raise ValueError("ifx/ts must have one entry per data row")
        n = len(rows)
        keys = ifx[rows].astype(np.int64)
        bad = np.flatnonzero(keys >= len(lut))
        if bad.size:
            return 0, int(keys[bad[0]])
        ids = lut[keys]
        bad = np.flatnonzero(ids < 0)
        if bad.size:
            return 0, int(keys[bad[0]])
        if n and ids.max() >= len(counts):
            raise ValueError("counts shorter than the interface ids")
        if len(opt_len) == 0:
            opt_len, opt_off = np.zeros(n, np.int64), np.zeros(n, np.int64)
        opt_len = np.asarray(opt_len, np.int64)
        if n and (opt_len.min() < 0 or (opt_len & 3).any() or opt_off.min() < 0
                  or (opt_off + opt_len).max() > len(opts)):
            raise ValueError("options out of bounds")
        ln = length[rows].astype(np.int64)
        caps = np.minimum(ln, snaplen) if snaplen else ln
        pcap_ = (caps + 3) & ~3
        sizes = 32 + pcap_ + opt_len
        need = int(sizes.sum())
        if need > out.size:
            raise ValueError("output buffer too small")
        if n == 0:
            return 0, -1
        np.add.at(counts, ids, 1)
        out[:need] = 0
        pos = np.cumsum(sizes) - sizes
        w = out[:need].view("<u4")
        t = np.maximum(ts[rows], 0).astype(np.uint64)
        base = pos // 4
        w[base] = _EPB
        w[base + 1] = sizes
        w[base + 2] = ids
        w[base + 3] = t >> np.uint64(32)
        w[base + 4] = t & np.uint64(0xFFFFFFFF)
        w[base + 5] = caps
        w[base + 6] = ln
        w[(pos + sizes) // 4 - 1] = sizes
        _PyIO._copy_packets(data, start, length, rows, caps, out, pos + 28)
        if (opt_len > 0).any():
            obuf = np.frombuffer(opts, np.uint8)
            for o, L in set(zip(opt_off.tolist(), opt_len.tolist())):
                if L == 0:
                    continue
                sel = np.flatnonzero((opt_off == o) & (opt_len == L))
                dst = pos[sel] + 28 + pcap_[sel]
                dwin = as_strided(out, shape=(out.size - L + 1, L), strides=(1, 1))
                dwin[dst] = obuf[o:o + L]
        return need, -1


_io = _cio if _cio is not None else _PyIO


def use_compiled(flag: bool = True) -> bool:
    """Select the compiled helpers (default when built) or the numpy
    fallback; returns whether the compiled ones are now in use."""
    global _io
    _io = _cio if (flag and _cio is not None) else _PyIO
    return _io is _cio


# ----------------------------------------------------------------------------
# input streams
# ----------------------------------------------------------------------------

class _Prefixed(io.RawIOBase):
    """A stream with some bytes already read from it put back in front."""

    def __init__(self, f, head: bytes):
        self._f, self._head = f, head

    def readable(self):
        return True

    def readinto(self, b):
        mv = memoryview(b).cast("B")
        if self._head:
            k = min(len(mv), len(self._head))
            mv[:k] = self._head[:k]
            self._head = self._head[k:]
            return k
        if hasattr(self._f, "readinto"):
            return self._f.readinto(mv)
        data = self._f.read(len(mv))
        mv[:len(data)] = data
        return len(data)


def _read_exact(f, n):
    out = b""
    while len(out) < n:
        d = f.read(n - len(out))
        if not d:
            break
        out += d
    return out


def _open_source(source):
    """-> (stream with readinto, name, owned file or None, size or None, gzip?)"""
    owned = None
    size = None
    if isinstance(source, (str, bytes, os.PathLike)) and os.fsdecode(source) == "-":
        f, name = sys.stdin.buffer, "<stdin>"
    elif isinstance(source, (str, bytes, os.PathLike)):
        name = os.fsdecode(source)
        f = owned = open(name, "rb")
        try:
            st = os.fstat(f.fileno())
            if st.st_mode & 0o170000 == 0o100000:
                size = st.st_size
        except OSError:
            pass
    elif hasattr(source, "read"):
        f, name = source, getattr(source, "name", "<stream>")
        if not isinstance(name, str):
            name = "<stream>"
    else:
        raise TypeError(f"cannot read a capture from {type(source).__name__}")
    head = _read_exact(f, 2)
    raw = _Prefixed(f, head)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), name, owned, size, True
    return raw, name, owned, size, False


# ----------------------------------------------------------------------------
# the reader
# ----------------------------------------------------------------------------

def _ts_to_ns(units: np.ndarray, tsresol: int, tsoffset: int) -> np.ndarray:
    """Timestamps in if_tsresol units (uint64) -> int64 nanoseconds."""
    v = tsresol & 0x7F
    if tsresol & 0x80:                      # 2^-v seconds
        if v >= 64:
            ns = np.rint(units.astype(np.float64) * (1e9 / 2.0 ** v)).astype(np.int64)
        else:
            sh = np.uint64(v)
            whole = (units >> sh).astype(np.int64) * 1_000_000_000
            frac = (units & np.uint64((1 << v) - 1)).astype(np.float64) * (1e9 / 2.0 ** v)
            ns = whole + np.rint(frac).astype(np.int64)
    elif v == 9:
        ns = units.view(np.int64)
    elif v <= 9:
        ns = units.view(np.int64) * (10 ** (9 - v))
    elif v - 9 <= 19:
        ns = (units // np.uint64(10 ** (v - 9))).astype(np.int64)
    else:
        ns = np.zeros(len(units), np.int64)
    if tsoffset:                            # clamped: a hostile offset must not overflow
        lim = (2**63 - 1) // 1_000_000_000
        ns = ns + max(-lim, min(lim, tsoffset)) * 1_000_000_000
    return ns


class _Pending:
    """Records scanned but not yet handed out, in fixed arrays (batch_size)."""
    # written by the scanners: data offset (buffer-relative, made absolute
    # by _post_scan), caplen, wire length, interface id, timestamp (ns, or
    # the interface's units until _post_scan), block type; then derived:
    # offset and length after link-layer stripping, global interface index
    RAW = (("off", np.int64), ("cap", np.int32), ("wlen", np.uint32), ("ifid", np.uint32),
           ("ts", np.int64), ("kind", np.uint8))
    DERIVED = (("doff", np.int64), ("dlen", np.int32), ("ifx", np.uint32))

    def __init__(self, size):
        self.n = 0
        for name, dt in self.RAW + self.DERIVED:
            setattr(self, name, np.zeros(size, dt))

    def drop(self, k):
        if k >= self.n:
            self.n = 0
            return
        m = self.n - k
        for name, _ in self.RAW + self.DERIVED:
            a = getattr(self, name)
            a[:m] = a[k:self.n]
        self.n = m


class PcapReader:
    """A capture read as a stream of ``Batch`` objects (iterate over it once).

    ``source``: a path, ``"-"`` (standard input) or a binary file object;
    gzip is detected.  ``batch_size``: packets per batch (a batch is cut
    earlier where the link type changes, where ``batch_bytes`` would be
    exceeded, and at the end).  ``headroom`` / ``tailroom``: free bytes in
    front of / behind the largest packet of each batch row (slots are
    sized per batch).  ``iif``: the ingress interface to give the packets:
    a name, an ifindex, a dict from capture interface name to either, or a
    callable ``f(CaptureInterface) -> name | ifindex | None``.
    ``errors="raise"`` raises ``PcapError`` after the good packets;
    ``"stop"`` ends the iteration there and keeps the error in ``.error``.
    ``alloc``: ``f((rows, slot)) -> uint8 array`` for each batch's data
    (default ``np.empty``; ``Dataplane.batch_buffer`` puts the batches
    where its workers read them, with no copy in ``Dataplane.process``).

    Attributes: ``format`` ("pcap" / "pcapng"), ``interfaces`` (list of
    ``CaptureInterface``, growing as pcapng IDBs are read), ``packets``
    (handed out so far), ``offset`` (bytes of the stream parsed),
    ``size`` (of the file, when a regular uncompressed file), ``error``.
    """

    def __init__(self, source, *, batch_size=DEFAULT_BATCH, headroom=128, tailroom=64, iif=None,
                 chunk_bytes=DEFAULT_CHUNK, max_caplen=MAX_CAPLEN, max_block=MAX_BLOCK,
                 batch_bytes=64 << 20, raw12=False, errors="raise", alloc=None):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if headroom < 0 or tailroom < 0:
            raise ValueError("headroom and tailroom must be >= 0")
        if errors not in ("raise", "stop"):
            raise ValueError("errors must be 'raise' or 'stop'")
        if not 0 < max_caplen <= 0x7FFFFFFF or not 12 <= max_block <= 0xFFFFFFFF:
            raise ValueError("max_caplen must be in 1..2^31-1 and max_block in 12..2^32-1")
        if chunk_bytes < 4096:
            raise ValueError("chunk_bytes must be >= 4096")
        self.batch_size = int(batch_size)
        self.headroom, self.tailroom = int(headroom), int(tailroom)
        self.max_caplen, self.max_block = int(max_caplen), int(max_block)
        self.batch_bytes = int(batch_bytes)
        self.chunk_bytes = int(chunk_bytes)
        self.raw12 = raw12
        self.errors = errors
        self.alloc = alloc
        self._iif = iif
        self._iif_cache = []
        self.interfaces: list[CaptureInterface] = []
        self.sections = []           # pcapng: per section, a dict of its SHB options
        self.format = None
        self.nanosecond = None
        self.big_endian = None
        self.version = None
        self.error = None
        self.packets = 0
        self._gen = None
        self._src, self.name, self._owned, self.size, self.compressed = _open_source(source)
        self._buf = bytearray(self.chunk_bytes)
        self._base = self._pos = self._end = 0
        self._eof = False
        self._p = _Pending(self.batch_size)
        self._iflt = np.zeros(0, np.uint8)      # per global interface: 0 raw, 1 ethernet
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # -- plumbing ---------------------------------------------------------
    @property
    def offset(self) -> int:
        return self._base + self._pos

    def close(self):
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        if self._gen is None:
            self._gen = self._batches()
        return self._gen

    def _err(self, offset, msg) -> PcapError:
        return PcapError(msg, offset, self.name)

    def _read_some(self, room: int) -> int:
        """One read into the free end of the buffer; 0 at EOF."""
        mv = memoryview(self._buf)[self._end:self._end + room]
        try:
            k = self._src.readinto(mv)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise self._err(self._base + self._end, f"gzip: {e}") from None
        finally:
            mv.release()
        if not k:
            self._eof = True
            return 0
        self._end += k
        return k

    def _keep_from(self) -> int:
        return int(self._p.doff[0]) - self._base if self._p.n else self._pos

    def _more(self, need: int):
        """Make ``need`` bytes available from pos (generator: may hand out the
        pending batches first).  Returns False at EOF before that."""
        if self._end - self._pos >= need:
            return True
        if self._eof:
            return False
        if self._p.n and self._pos - self._keep_from() > self.batch_bytes:
            yield from self._emit(force=True)     # pending packets hold too much
        keep = self._keep_from()
        live = self._end - keep
        size = len(self._buf)
        # room for a chunk after what is kept; a buffer grown for a big
        # record or many held ones shrinks back once they are gone
        want = max(self.chunk_bytes, live + min(need, self.chunk_bytes) + 16)
        if live > self.chunk_bytes // 2:          # pending records held: read on
            want = max(want, live + self.chunk_bytes // 2)
        if want > size or (size > 2 * self.chunk_bytes and want <= self.chunk_bytes):
            nb = bytearray(max(want, 2 * size) if want > size else want)
            nb[:live] = self._buf[keep:self._end]
            self._buf = nb
        elif keep:
            self._buf[:live] = self._buf[keep:self._end]
        self._base += keep
        self._pos -= keep
        self._end = live
        while self._end - self._pos < need:
            room = len(self._buf) - self._end
            if room == 0:
                # grow only as the data arrives (doubling): a hostile length
                # field costs at most twice the bytes the stream really has
                nb = bytearray(2 * len(self._buf))
                nb[:self._end] = self._buf[:self._end]
                self._buf = nb
                room = len(self._buf) - self._end
            if not self._read_some(room):
                return False
        return True

    def _u32(self, at, big):
        return struct.unpack_from(">I" if big else "<I", self._buf, at)[0]

    # -- header -----------------------------------------------------------
    def _start(self):
        while self._end < 4 and self._read_some(len(self._buf) - self._end):
            pass
        if self._end == 0:
            raise self._err(0, "empty file (no capture header)")
        if self._end < 4:
            raise self._err(0, f"truncated file: {self._end} bytes, not a capture")
        magic = bytes(self._buf[:4])
        if magic in _PCAP_MAGICS:
            self.format = "pcap"
            self.big_endian, self.nanosecond = _PCAP_MAGICS[magic]
            while self._end < 24 and self._read_some(len(self._buf) - self._end):
                pass
            if self._end < 24:
                raise self._err(0, f"truncated pcap file header: {self._end} of 24 bytes")
            e = ">" if self.big_endian else "<"
            major, minor, _, _, snaplen, lt_field = struct.unpack_from(e + "HHiIII", self._buf, 4)
            if major != 2:
                raise self._err(4, f"unsupported pcap version {major}.{minor}")
            self.version = (major, minor)
            lt = lt_field & 0x03FFFFFF
            fcs = ((lt_field >> 28) & 0xF) * 2 if lt_field & 0x04000000 else 0
            itf = CaptureInterface(0, 0, 0, lt, snaplen, tsresol=9 if self.nanosecond else 6,
                                   fcslen=fcs, offset=0)
            self._check_linktype(itf, 20)
            self._add_interface(itf)
            self._pos = 24
        elif magic == b"\x0a\x0d\x0d\x0a":
            self.format = "pcapng"
            self._sec_base = 0
            self._if_snap = np.zeros(0, np.uint32)
            self._if_ok = np.zeros(0, np.uint8)
            g = self._read_shb()
            try:                     # _read_shb only yields when records are pending
                next(g)
            except StopIteration as e:
                if e.value is not None:
                    raise e.value from None
        elif magic == b"\xa1\xb2\xcd\x34" or magic == b"\x34\xcd\xb2\xa1":
            raise self._err(0, "modified (Kuznetzov) pcap format is not supported")
        else:
            raise self._err(0, f"not a pcap or pcapng file (magic 0x{magic.hex()})")

    def _check_linktype(self, itf, offset):
        """Classic pcap: an unusable link type is an error at once."""
        if self._linkinfo(itf.linktype) is None:
            raise self._err(offset, self._linktype_msg(itf))

    def _linkinfo(self, lt):
        if lt in (12, 14) and self.raw12:
            return ("DLT_RAW", "raw", 0)
        return LINKTYPES.get(lt)

    def _linktype_msg(self, itf):
        lt = itf.linktype
        where = f"interface {itf.id}" + (f" ({itf.name})" if itf.name else "") \
            if self.format == "pcapng" else "the capture"
        if lt in (12, 14):
            return (f"{where} has link type {lt}, the platform-dependent DLT_RAW value "
                    "(raw IP on Linux, C-HDLC on BSD/OS, LOOP on OpenBSD); raw IP captures "
                    "should use LINKTYPE_RAW 101 (pass raw12=True / --raw12 to read it as raw IP)")
        return (f"{where} has unsupported link type {lt} (supported: "
                + ", ".join(f"{k} {v[0]}" for k, v in sorted(LINKTYPES.items())) + ")")

    def _add_interface(self, itf):
        self.interfaces.append(itf)
        info = self._linkinfo(itf.linktype)
        self._iflt = np.append(self._iflt, np.uint8(1 if info and info[1] == "ethernet" else 0))
        self._mixed_lt = bool((self._iflt != self._iflt[0]).any())

    # -- pcapng blocks ----------------------------------------------------
    def _read_shb(self):
        """The Section Header Block at pos; returns a PcapError instead of
        raising it (the caller decides), None when fine."""
        at = self._base + self._pos
        if not (yield from self._more(12)):
            return self._err(at, f"truncated section header block ({self._end - self._pos} bytes)")
        bom = bytes(self._buf[self._pos + 8:self._pos + 12])
        if bom == b"\x4d\x3c\x2b\x1a":
            big = False
        elif bom == b"\x1a\x2b\x3c\x4d":
            big = True
        else:
            return self._err(at, f"section header block with a bad byte-order magic 0x{bom.hex()}")
        blen = self._u32(self._pos + 4, big)
        if blen < 28 or blen & 3:
            return self._err(at, f"section header block length {blen} is invalid")
        if blen > self.max_block:
            return self._err(at, f"section header block length {blen} exceeds the limit "
                                 f"{self.max_block}")
        if not (yield from self._more(blen)):
            return self._err(at, f"truncated section header block (length {blen}, "
                                 f"{self._end - self._pos} bytes left)")
        p = self._pos
        if self._u32(p + blen - 4, big) != blen:
            return self._err(at, f"section header block: trailing length "
                                 f"{self._u32(p + blen - 4, big)} != leading length {blen}")
        e = ">" if big else "<"
        major, minor = struct.unpack_from(e + "HH", self._buf, p + 12)
        if major != 1:
            return self._err(at, f"unsupported pcapng version {major}.{minor}")
        opts = self._options(p + 24, p + blen - 4, big, at)
        if isinstance(opts, PcapError):
            return opts
        self.big_endian = big
        self.version = (major, minor)
        self.sections.append({_SHB_OPTS.get(c, c): _opt_str(v) for c, v in opts})
        self._sec_base = len(self.interfaces)
        self._if_snap = np.zeros(0, np.uint32)
        self._if_ok = np.zeros(0, np.uint8)
        self._pos += blen
        return None

    def _options(self, p, end, big, at):
        """[(code, value bytes)] of an options area, or a PcapError."""
        out = []
        e = ">" if big else "<"
        while p + 4 <= end:
            code, ln = struct.unpack_from(e + "HH", self._buf, p)
            if code == 0:
                break
            if p + 4 + ln > end:
                return self._err(at, f"option {code} of length {ln} runs past the end of its block")
            out.append((code, bytes(self._buf[p + 4:p + 4 + ln])))
            p += 4 + ((ln + 3) & ~3)
        return out

    def _read_idb(self, blen, big):
        at = self._base + self._pos
        p = self._pos
        if blen < 20:
            return self._err(at, f"interface description block length {blen} is too short")
        e = ">" if big else "<"
        lt, _, snap = struct.unpack_from(e + "HHI", self._buf, p + 8)
        opts = self._options(p + 16, p + blen - 4, big, at)
        if isinstance(opts, PcapError):
            return opts
        itf = CaptureInterface(len(self.interfaces), len(self.sections) - 1,
                               len(self.interfaces) - self._sec_base, lt, snap, offset=at)
        for code, v in opts:
            if code == 2:
                itf.name = _opt_str(v)
            elif code == 3:
                itf.description = _opt_str(v)
            elif code == 9 and len(v) >= 1:
                itf.tsresol = v[0]
            elif code == 14 and len(v) >= 8:
                itf.tsoffset = struct.unpack_from(e + "q", v)[0]
            elif code == 13 and len(v) >= 1:
                itf.fcslen = v[0]
        self._add_interface(itf)
        self._if_snap = np.append(self._if_snap, np.uint32(min(snap, 0xFFFFFFFF)))
        self._if_ok = np.append(self._if_ok, np.uint8(self._linkinfo(lt) is not None))
        self._pos += blen
        return None

    def _skip_block(self, blen):
        """Skip a block we do not use, streaming (any length), checking its
        trailing length."""
        at = self._base + self._pos
        big = self.big_endian
        if blen <= self.max_block:
            if not (yield from self._more(blen)):
                return self._err(at, f"truncated block (type {self._u32(self._pos, big)}, length "
                                     f"{blen}, {self._end - self._pos} bytes left)")
            tr = self._u32(self._pos + blen - 4, big)
            if tr != blen:
                return self._err(at, f"block trailing length {tr} != leading length {blen}")
            self._pos += blen
            return None
        left = blen - 4
        while left:
            if self._end == self._pos and not (yield from self._more(1)):
                return self._err(at, f"truncated block (length {blen})")
            k = min(left, self._end - self._pos)
            self._pos += k
            left -= k
        if not (yield from self._more(4)):
            return self._err(at, f"truncated block (length {blen})")
        tr = self._u32(self._pos, big)
        if tr != blen:
            return self._err(at, f"block trailing length {tr} != leading length {blen}")
        self._pos += 4
        return None

    # -- records -> pending -----------------------------------------------
    def _post_scan(self, n0, n):
        """Derived fields of the records just scanned (n0..n): absolute data
        offset and length after link-layer stripping, ts in ns, interface."""
        P = self._p
        s = slice(n0, n)
        off = P.off[s]
        off += self._base
        if self.format == "pcap":
            P.ifx[s] = 0
            itfs = [0]
        else:
            if len(self._if_snap) == 1:       # the scanner checked: all on interface 0
                P.ifx[s] = self._sec_base
                itfs = [self._sec_base]
            else:
                ifx = P.ifx[s]
                np.add(P.ifid[s], self._sec_base, out=ifx)
                itfs = np.unique(ifx).tolist()
            units = P.ts[s].view(np.uint64)
            for i in itfs:
                itf = self.interfaces[i]
                if itf.tsresol == 9 and not itf.tsoffset:
                    continue                   # already nanoseconds
                if len(itfs) == 1:
                    P.ts[s] = _ts_to_ns(units, itf.tsresol, itf.tsoffset)
                else:
                    m = P.ifx[s] == i
                    P.ts[s][m] = _ts_to_ns(units[m], itf.tsresol, itf.tsoffset)
            if any(self.interfaces[i].tsoffset for i in itfs):
                spb = P.kind[s] == _SPB          # no timestamp: 0, not the offset
                if spb.any():
                    P.ts[s][spb] = 0
        for i in itfs:
            itf = self.interfaces[i]
            strip = self._linkinfo(itf.linktype)[2]
            if len(itfs) == 1 and strip == 0 and not itf.fcslen:
                P.doff[s] = off
                P.dlen[s] = P.cap[s]
                break
            m = slice(None) if len(itfs) == 1 else (P.ifx[s] == i)
            cap = P.cap[s][m].astype(np.int64)
            doff = off[m]
            if strip == "sll" or strip == "sll2":
                hl = 16 if strip == "sll" else 20
                po = 14 if strip == "sll" else 0
                o = doff - self._base
                buf = np.frombuffer(self._buf, np.uint8)
                ok = cap >= po + 2
                proto = np.zeros(len(o), np.int64)
                oo = o[ok]
                proto[ok] = buf[oo + po].astype(np.int64) << 8 | buf[oo + po + 1]
                del buf
                h = np.where(proto == 0x8100, hl + 4, hl)
            else:
                h = strip
            tail = np.where(cap == P.wlen[s][m], itf.fcslen, 0) if itf.fcslen else 0
            P.doff[s][m] = doff + h
            P.dlen[s][m] = np.maximum(cap - h - tail, 0)

    def _emit(self, force=False):
        """Hand out batches of pending records (full ones; all with force)."""
        P = self._p
        while P.n >= self.batch_size or (force and P.n):
            k = min(P.n, self.batch_size)
            if self._mixed_lt:
                lt = self._iflt[P.ifx[:k]]
                ch = np.flatnonzero(lt[1:] != lt[0])
                if ch.size:
                    k = int(ch[0]) + 1
                ethernet = bool(lt[0])
            else:
                ethernet = bool(self._iflt[P.ifx[0]])
            maxlen = int(P.dlen[:k].max())
            if k * self._slot(maxlen) > self.batch_bytes:
                cm = np.maximum.accumulate(P.dlen[:k].astype(np.int64))
                slots = (self.headroom + cm + self.tailroom + 63) // 64 * 64
                over = np.flatnonzero(np.arange(1, k + 1) * slots > self.batch_bytes)
                if over.size:
                    k = max(1, int(over[0]))
                maxlen = int(cm[k - 1])
            yield self._make_batch(k, "ethernet" if ethernet else "raw", maxlen)
            P.drop(k)

    def _slot(self, maxlen):
        return (self.headroom + maxlen + self.tailroom + 63) // 64 * 64

    def _make_batch(self, k, linktype, maxlen):
        P = self._p
        length = P.dlen[:k].copy()
        shape = (k, self._slot(maxlen))
        data = np.empty(shape, np.uint8) if self.alloc is None else self.alloc(shape)
        if data.shape != shape or data.dtype != np.uint8 or not data.flags.c_contiguous:
            raise ValueError("alloc must return a C-contiguous uint8 array of the shape asked for")
        total = _io.gather(self._buf, P.doff[:k] - self._base, length, data, self.headroom)
        b = Batch(data, np.full(k, self.headroom, np.int32), length, linktype=linktype,
                  timestamp_ns=P.ts[:k].copy(), headroom=self.headroom)
        b.capture_if = P.ifx[:k].copy()
        b.wire_length = P.wlen[:k].copy()
        b.capture_bytes = int(total)
        if self._iif is not None:
            self._set_iif(b)
        self.packets += k
        return b

    def _set_iif(self, b):
        spec = self._iif
        if isinstance(spec, str):
            b.iif_names = [spec] * len(b)
            return
        if isinstance(spec, (int, np.integer)):
            b.iif[:] = spec
            return
        while len(self._iif_cache) < len(self.interfaces):
            itf = self.interfaces[len(self._iif_cache)]
            if callable(spec):
                v = spec(itf)
            else:
                v = spec.get(itf.name)
            self._iif_cache.append(v)
        vals = self._iif_cache
        used = np.unique(b.capture_if).tolist()
        if any(isinstance(vals[i], str) for i in used):
            names = np.array(vals, dtype=object)[b.capture_if]
            b.iif_names = [None if v is None else str(v) for v in names]
        else:
            table = np.array([0 if v is None else int(v) for v in vals], np.uint32)
            b.iif[:] = table[b.capture_if]

    # -- the walk ---------------------------------------------------------
    def _fail(self, err):
        yield from self._emit(force=True)
        self.error = err
        if self.errors == "raise":
            raise err

    def _batches(self):
        try:
            if self.format == "pcap":
                yield from self._walk_pcap()
            else:
                yield from self._walk_pcapng()
        finally:
            self.close()

    def _walk_pcap(self):
        P = self._p
        big = self.big_endian
        snap = self.interfaces[0].snaplen
        maxcap = min(snap, self.max_caplen) if snap else self.max_caplen
        frac_ns = 1 if self.nanosecond else 1000
        while True:
            n0 = P.n
            n, pos, st = _io.scan_pcap(self._buf, self._pos, self._end, big, maxcap, frac_ns,
                                       P.off, P.cap, P.wlen, P.ts, n0, self.batch_size)
            P.n = n
            self._pos = pos
            if n > n0:
                self._post_scan(n0, n)
            if st == ST_FULL:
                yield from self._emit()
                continue
            at = self._base + pos
            if st == ST_BAD_CAPLEN:
                c = self._u32(pos + 8, big)
                why = (f"snapshot length {snap}" if snap and c > snap and snap <= self.max_caplen
                       else f"limit {self.max_caplen}")
                yield from self._fail(self._err(at, f"record caplen {c} exceeds the {why}"))
                return
            # need more bytes
            left = self._end - pos
            need = 16 if left < 16 else 16 + self._u32(pos + 8, big)
            if not (yield from self._more(need)):
                left = self._end - self._pos
                if left == 0:
                    yield from self._emit(force=True)
                    return
                at = self._base + self._pos
                if left < 16:
                    msg = f"truncated record header ({left} of 16 bytes)"
                else:
                    msg = (f"truncated record: caplen {need - 16}, "
                           f"{left - 16} bytes of data left")
                yield from self._fail(self._err(at, msg))
                return

    def _walk_pcapng(self):
        P = self._p
        while True:
            n0 = P.n
            big = self.big_endian
            n, pos, st = _io.scan_pcapng(self._buf, self._pos, self._end, big, self._if_snap,
                                         self._if_ok, self.max_caplen, self.max_block, P.off,
                                         P.cap, P.wlen, P.ifid, P.ts, P.kind, n0, self.batch_size)
            P.n = n
            self._pos = pos
            if n > n0:
                self._post_scan(n0, n)
            if st == ST_FULL:
                yield from self._emit()
                continue
            at = self._base + pos
            err = None
            if st == ST_NEED_MORE:
                left = self._end - pos
                need = 12 if left < 12 else self._u32(pos + 4, big)
                if (yield from self._more(need)):
                    continue
                left = self._end - self._pos
                at = self._base + self._pos
                if left == 0:
                    yield from self._emit(force=True)
                    return
                if left < 12:
                    err = f"truncated block header ({left} of at least 12 bytes)"
                else:
                    err = (f"truncated block (type {self._u32(self._pos, big)}, length {need}, "
                           f"{left} bytes left)")
                yield from self._fail(self._err(at, err))
                return
            t = self._u32(pos, big)
            blen = self._u32(pos + 4, big) if t != _SHB else None
            if st == ST_OTHER_BLOCK:
                if t == _SHB:
                    e = yield from self._read_shb()
                elif blen < 12 or blen & 3:
                    e = self._err(at, f"block type {t} has an invalid length {blen}")
                elif t == _IDB:
                    if blen > self.max_block:
                        e = self._err(at, f"block length {blen} exceeds the limit {self.max_block}")
                    elif not (yield from self._more(blen)):
                        e = self._err(at, f"truncated interface description block (length "
                                          f"{blen}, {self._end - self._pos} bytes left)")
                    elif self._u32(self._pos + blen - 4, big) != blen:
                        e = self._err(at, f"interface description block: trailing length "
                                          f"{self._u32(self._pos + blen - 4, big)} != leading "
                                          f"length {blen}")
                    else:
                        e = self._read_idb(blen, big)
                else:
                    e = yield from self._skip_block(blen)
                if e is not None:
                    yield from self._fail(e)
                    return
                continue
            if st == ST_BAD_BLOCKLEN:
                err = f"block type {t} has an invalid length {blen}"
            elif st == ST_BLOCK_TOO_BIG:
                err = f"block length {blen} exceeds the limit {self.max_block}"
            elif st == ST_LEN_MISMATCH:
                err = (f"block trailing length {self._u32(pos + blen - 4, big)} != "
                       f"leading length {blen}")
            elif st == ST_CAPLEN_OVERRUN:
                err = (f"packet block caplen {self._u32(pos + 20, big)} runs past the end of "
                       f"its block (length {blen})")
            elif st == ST_BAD_IFID:
                i = 0 if t == _SPB else (self._u32(pos + 8, big) if t == _EPB else
                                         struct.unpack_from(">H" if big else "<H", self._buf,
                                                            pos + 8)[0])
                err = (f"packet on interface {i}, but the section has "
                       f"{len(self._if_snap)} interface(s)")
            elif st == ST_BAD_LINKTYPE:
                i = 0 if t == _SPB else (self._u32(pos + 8, big) if t == _EPB else
                                         struct.unpack_from(">H" if big else "<H", self._buf,
                                                            pos + 8)[0])
                err = "packet on " + self._linktype_msg(self.interfaces[self._sec_base + i])
            elif st == ST_BAD_CAPLEN:
                if t == _SPB:
                    err = f"simple packet block caplen exceeds the limit {self.max_caplen}"
                else:
                    c = self._u32(pos + 20, big)
                    i = self._u32(pos + 8, big) if t == _EPB else \
                        struct.unpack_from(">H" if big else "<H", self._buf, pos + 8)[0]
                    snap = int(self._if_snap[i])
                    why = (f"interface {i} snapshot length {snap}" if snap and c > snap
                           else f"limit {self.max_caplen}")
                    err = f"packet block caplen {c} exceeds the {why}"
            else:                                   # pragma: no cover
                err = f"unexpected scan status {st}"
            yield from self._fail(self._err(at, err))
            return


_SHB_OPTS = {1: "comment", 2: "hardware", 3: "os", 4: "userappl"}


def _opt_str(v: bytes) -> str:
    return v.rstrip(b"\0").decode("utf-8", "replace")


def read_batches(source, batch_size=DEFAULT_BATCH, *, prefetch=0, **kw):
    """Iterate over a capture as Batches (see ``PcapReader`` for the
    options).  ``prefetch=N``: read up to N batches ahead in a background
    thread (the file reads and the compiled record walks release the GIL,
    so reading overlaps with processing)."""
    reader = PcapReader(source, batch_size=batch_size, **kw)
    return Prefetch(reader, prefetch) if prefetch else iter(reader)


class Prefetch:
    """An iterator that runs ``iterable`` in a background thread, at most
    ``depth`` items ahead; an exception it raises is raised here, in order,
    after the items before it.  ``close()`` (or leaving a ``with``) stops it."""

    def __init__(self, iterable, depth=2):
        if depth < 1:
            raise ValueError("depth must be >= 1")
        self.source = iterable
        self._q = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._t = threading.Thread(target=self._run, args=(iter(iterable),),
                                   name="fastpath-pcap-prefetch", daemon=True)
        self._t.start()

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, it):
        try:
            for x in it:
                if not self._put((0, x)):
                    break
            else:
                self._put((1, None))
        except BaseException as e:          # handed to the consumer
            self._put((2, e))
        finally:
            close = getattr(it, "close", None)
            if self._stop.is_set() and close is not None:
                close()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        kind, x = self._q.get()
        if kind == 0:
            return x
        self._done = True
        self._t.join()
        if kind == 1:
            raise StopIteration
        raise x

    def close(self, timeout=2.0):
        """Stop the thread; wait for it at most ``timeout`` seconds (a read
        blocked on a silent pipe cannot be interrupted: the daemon thread is
        left to end with the process)."""
        self._stop.set()
        self._done = True
        deadline = time.monotonic() + timeout
        while self._t.is_alive() and time.monotonic() < deadline:
            try:
                self._q.get(timeout=0.05)
            except queue.Empty:
                pass
        self._t.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self._stop.set()
        except Exception:
            pass


def read_packets(source, **kw):
    """Every packet of a capture as ``(bytes, timestamp_ns, CaptureInterface)``
    (convenience for small captures and tests)."""
    reader = PcapReader(source, **kw)
    out = []
    for b in reader:
        for i in range(len(b)):
            out.append((b.packet(i), int(b.timestamp_ns[i]),
                        reader.interfaces[int(b.capture_if[i])]))
    return out


# ----------------------------------------------------------------------------
# writers
# ----------------------------------------------------------------------------

def _opt(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def _block(btype: int, body: bytes) -> bytes:
    n = 12 + len(body)
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


_V_FWD, _V_LOCAL, _V_DROP, _V_ICMP = (VERDICT_IDS[v] for v in ("forward", "local", "drop", "icmp"))
_OUT_LUT = np.zeros(256, bool)
_OUT_LUT[[_V_FWD, _V_ICMP]] = True
_EMPTY_I64 = np.zeros(0, np.int64)
_EMPTY_I32 = np.zeros(0, np.int32)
_EMPTY_U8 = np.zeros(0, np.uint8)


class _Sink:
    """Where a writer's bytes go.  With ``threaded`` (the default) a
    background thread does the file writes (which release the GIL), so
    that the page-cache copy, gzip, or a slow pipe overlap with reading and
    processing the next batch; batches are packed into a small pool of
    reused buffers (at most ``_NBUF`` in flight: memory stays bounded)."""
    _NBUF = 3

    def __init__(self, dest, compress, threaded=True):
        self._own = None
        if isinstance(dest, (str, bytes, os.PathLike)):
            name = os.fsdecode(dest)
            if name == "-":
                f = sys.stdout.buffer
            else:
                f = self._own = open(name, "wb")
                if compress is None and name.endswith(".gz"):
                    compress = "gzip"
            self.name = name
        elif hasattr(dest, "write"):
            f = dest
            self.name = getattr(dest, "name", "<stream>")
            if not isinstance(self.name, str):
                self.name = "<stream>"
        else:
            raise TypeError(f"cannot write a capture to {type(dest).__name__}")
        if compress not in (None, "gzip"):
            if self._own is not None:
                self._own.close()
            raise ValueError("compress must be None or 'gzip'")
        self._gz = gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6) if compress else None
        self._raw = f
        self._f = self._gz if self._gz is not None else f
        self.bytes = 0
        self._err = None
        self._bufs = []                     # every pool buffer
        self._thread = None
        if threaded:
            self._q = queue.Queue()
            self._free = queue.Queue()
            self._thread = threading.Thread(target=self._run, name="fastpath-pcap-writer",
                                            daemon=True)
            self._thread.start()

    def _run(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            data, buf = item
            if self._err is None:
                try:
                    self._f.write(data)
                except BaseException as e:     # reported by the next write / close
                    self._err = e
            if buf is not None:
                self._free.put(buf)

    def buffer(self, need: int) -> np.ndarray:
        """An output buffer of at least ``need`` bytes that no pending write uses."""
        if self._thread is None:
            if not self._bufs or self._bufs[0].size < need:
                self._bufs = [np.empty(max(need, 2 * (self._bufs[0].size if self._bufs else 0)),
                                       np.uint8)]
            return self._bufs[0]
        try:
            buf = self._free.get_nowait()
        except queue.Empty:
            buf = None
            if len(self._bufs) < self._NBUF:
                buf = np.empty(need, np.uint8)
                self._bufs.append(buf)
            else:
                buf = self._free.get()
        if buf.size < need:
            self._bufs = [x for x in self._bufs if x is not buf]
            buf = np.empty(max(need, 2 * buf.size), np.uint8)
            self._bufs.append(buf)
        return buf

    def _raise(self):
        if self._err is not None:
            e, self._err = self._err, None
            raise e

    def write(self, data, buf=None):
        """Write ``data`` (bytes, or a view of the pool buffer ``buf``)."""
        self._raise()
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if self._thread is None:
            self._f.write(data)
        else:
            self._q.put((data, buf))
        self.bytes += n

    def close(self):
        try:
            if self._thread is not None:
                self._q.put(None)
                self._thread.join()
                self._thread = None
            self._raise()
            if self._gz is not None:
                self._gz.close()
            if self._own is None and hasattr(self._raw, "flush"):
                self._raw.flush()
        finally:
            if self._own is not None:
                self._own.close()
                self._own = None


_NO_NAMES: dict = {}                     # the ifnames of batches that have none

_SEL_LUT = {"output": np.zeros(256, np.uint8), "drops": np.zeros(256, np.uint8),
            "all": np.ones(256, np.uint8)}
_SEL_LUT["output"][[_V_FWD, _V_ICMP]] = 1
_SEL_LUT["drops"][_V_DROP] = 1


class _Writer:
    SELECTS = ("output", "drops", "all")

    def __init__(self, dest, select, snaplen, compress, threaded=True):
        if select not in self.SELECTS:
            raise ValueError(f"select must be one of {self.SELECTS}, not {select!r}")
        if not 0 <= snaplen <= 0xFFFFFFFF:
            raise ValueError("snaplen must be in 0..2^32-1")
        self.select = select
        self.snaplen = int(snaplen)
        self._sink = _Sink(dest, compress, threaded)
        self.name = self._sink.name
        self.packets = 0
        self.closed = False
        self._rowbuf = np.zeros(0, np.int64)
        self._free_comments = {}         # write_packets' own comments, by code
        self._names = []                 # interface id -> name
        self._counts = np.zeros(16, np.int64)
        self._luts = {}                  # (id(ifnames), linktype) -> (ifnames, lut)

    @property
    def bytes(self):
        return self._sink.bytes

    @property
    def per_interface(self) -> Counter:
        """Packets written per interface name."""
        out = Counter()
        for i, name in enumerate(self._names):
            if self._counts[i]:
                out[name] += int(self._counts[i])
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if not self.closed:
            self.closed = True
            self._finish()
            self._sink.close()

    def _finish(self):
        pass

    def _seen(self, linktype):
        pass

    # -- interfaces: key (ifindex, or an id for names) -> interface id ------
    def _new_id(self, name, lt) -> int:
        """The interface id for a name (pcapng: one IDB per (name, link type))."""
        i = len(self._names)
        self._names.append(name)
        if i >= len(self._counts):
            self._counts = np.concatenate([self._counts, np.zeros(len(self._counts), np.int64)])
        return i

    def _interface_id(self, name, lt) -> int:
        return self._new_id(name, lt)

    def _lut(self, ifnames, lt):
        key = (id(ifnames), lt)
        ent = self._luts.get(key)
        if ent is None or ent[0] is not ifnames:
            ent = self._luts[key] = (ifnames, np.full(0, -1, np.int64))
        return ent[1]

    def _learn(self, ifnames, lt, k):
        """Give the ifindex ``k`` an interface id; returns the grown lut."""
        lut = self._lut(ifnames, lt)
        if k >= len(lut):
            if k > 1 << 24:
                raise ValueError(f"interface index {k} is out of range")
            lut = np.concatenate([lut, np.full(k + 1 - len(lut) + 16, -1, np.int64)])
        lut[k] = self._interface_id(ifnames.get(k) or f"if{k}", lt)
        self._luts[(id(ifnames), lt)] = (ifnames, lut)
        return lut

    # which packets, on which interface, with which comment
    def _rows(self, batch):
        n = len(batch)
        if len(self._rowbuf) < n:
            self._rowbuf = np.zeros(max(n, 2 * len(self._rowbuf)), np.int64)
        m = _io.select_rows(batch.verdict, _SEL_LUT[self.select], self._rowbuf)
        return self._rowbuf[:m]

    def _keys_and_codes(self, batch, rows):
        """Per data row, the ifindex the packet is recorded on; per listed
        packet, its comment code (None: no comments)."""
        if self.select == "output":
            return batch.oif, None
        if self.select == "drops":
            return batch.iif, batch.reason[rows].astype(np.int64)
        v = batch.verdict
        out = _OUT_LUT[v]
        keys = np.where(out, batch.oif, batch.iif).astype(np.uint32)
        vr = v[rows].astype(np.int64)
        codes = vr * 65536 + batch.reason[rows].astype(np.int64)
        codes[(vr == _V_FWD) | (vr == 0)] = -1
        return keys, codes

    @staticmethod
    def _comment(code):
        if code < 65536:
            r = REASON_NAMES[code] if 0 <= code < len(REASON_NAMES) else str(code)
            return "drop" if r == "none" else r
        v, r = divmod(code, 65536)
        vn = VERDICTS[v] if v < len(VERDICTS) else str(v)
        rn = REASON_NAMES[r] if r < len(REASON_NAMES) else str(r)
        return vn if r == 0 else f"{vn}: {rn}"

    def write_batch(self, batch: Batch, original: Batch | None = None) -> int:
        """Write the packets of a processed batch that ``select`` picks;
        returns the frames written."""
        if self.closed:
            raise ValueError("write to a closed writer")
        rows = self._rows(batch)
        self._seen(batch.linktype)
        if not len(rows):
            return 0
        keys, codes = self._keys_and_codes(batch, rows)
        data, start, length = batch.data, batch.start, batch.length
        if original is not None and self.select != "output":
            if len(original) != len(batch) or original.data.shape != batch.data.shape:
                raise ValueError("original must be a copy of the batch taken before processing")
            if self.select == "drops":
                data, start, length = original.data, original.start, original.length
            else:                       # "all": the input bytes for what did not leave
                back = np.flatnonzero(~_OUT_LUT[batch.verdict])
                data, start, length = data.copy(), start.copy(), length.copy()
                data[back] = original.data[back]
                start[back] = original.start[back]
                length[back] = original.length[back]
        names = None
        if batch.iif_names is not None and self.select != "output":
            ifn = batch.ifnames or {}
            names = [ifn.get(int(keys[r])) or batch.iif_names[r] or f"if{int(keys[r])}"
                     for r in rows.tolist()]
        frags = batch.fragments if self.select != "drops" else {}
        if frags and any(int(r) in frags for r in rows.tolist()):
            return self._write_fragmented(batch, (data, start, length), rows, keys, codes, names)
        return self._write(batch.linktype, batch.ifnames or _NO_NAMES, (data, start, length),
                           rows, keys, batch.timestamp_ns, codes, names)

    def _write_fragmented(self, batch, srcs, rows, keys, codes, names):
        frames, fkeys, fcodes, fts, fnames = [], [], [], [], []
        data, start, length = srcs
        frags = batch.fragments
        for k, r in enumerate(rows.tolist()):
            pk = frags.get(r) or [data[r, start[r]:start[r] + length[r]].tobytes()]
            for f in pk:
                frames.append(f)
                fkeys.append(int(keys[r]))
                fcodes.append(-1 if codes is None else int(codes[k]))
                fts.append(int(batch.timestamp_ns[r]))
                if names is not None:
                    fnames.append(names[k])
        tmp = Batch.from_packets(frames, headroom=0, linktype=batch.linktype)
        return self._write(batch.linktype, batch.ifnames or _NO_NAMES,
                           (tmp.data, tmp.start, tmp.length),
                           np.arange(len(frames), dtype=np.int64), np.array(fkeys, np.uint32),
                           np.array(fts, np.int64),
                           None if codes is None else np.array(fcodes, np.int64),
                           fnames if names is not None else None)

    def write_packets(self, packets, *, interface="if0", linktype="raw", timestamps_ns=None,
                      comments=None) -> int:
        """Write raw packets (bytes-like) on one interface, with optional
        per-packet comments (pcapng only)."""
        if self.closed:
            raise ValueError("write to a closed writer")
        packets = [bytes(p) for p in packets]
        if not packets:
            return 0
        b = Batch.from_packets(packets, headroom=0, linktype=linktype,
                               timestamps_ns=timestamps_ns)
        self._seen(linktype)
        n = len(packets)
        codes = None
        if comments is not None:
            comments = list(comments)
            if len(comments) != n:
                raise ValueError("one comment per packet")
            codes = np.array([-1 if c is None else -2 - k for k, c in enumerate(comments)],
                             np.int64)
            self._free_comments = {-2 - k: c for k, c in enumerate(comments) if c is not None}
        try:
            return self._write(linktype, _NO_NAMES, (b.data, b.start, b.length),
                               np.arange(n, dtype=np.int64), np.zeros(n, np.uint32),
                               b.timestamp_ns, codes, [interface] * n)
        finally:
            self._free_comments = {}

    def _keys_for_names(self, names, lt, nrow, rows):
        """Interface ids for per-packet names: keys = the ids, lut = identity."""
        ids = [self._named_id(nm, lt) for nm in names]
        keys = np.zeros(nrow, np.uint32)
        keys[rows] = ids
        return keys, np.arange(len(self._names), dtype=np.int64)

    def _named_id(self, name, lt):
        cache = self.__dict__.setdefault("_by_name", {})
        i = cache.get((name, lt))
        if i is None:
            i = cache[(name, lt)] = self._interface_id(name, lt)
        return i


class PcapWriter(_Writer):
    """Classic pcap (little endian; nanosecond magic ``a1b23c4d`` unless
    ``nanosecond=False``).  One link type per file: fixed by ``linktype``
    ("ethernet"/"raw" or a number) or by the first batch.  Interfaces and
    comments cannot be recorded (use ``PcapngWriter``)."""

    def __init__(self, dest, *, select="output", nanosecond=True, linktype=None,
                 snaplen=MAX_CAPLEN, compress=None, threaded=True):
        super().__init__(dest, select, snaplen, compress, threaded)
        self.nanosecond = nanosecond
        self.linktype = _LT_OUT.get(linktype, linktype)
        self._header_done = False
        if self.linktype is not None:
            self._header()

    def _header(self):
        magic = 0xA1B23C4D if self.nanosecond else 0xA1B2C3D4
        self._sink.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, self.snaplen or MAX_CAPLEN,
                                     self.linktype))
        self._header_done = True

    def _seen(self, linktype):
        lt = _LT_OUT[linktype] if isinstance(linktype, str) else linktype
        if self.linktype is None:
            self.linktype = lt
            self._header()
        elif lt != self.linktype:
            raise ValueError(f"{self.name}: a classic pcap holds one link type ({self.linktype}); "
                             f"this batch is {linktype} (use PcapngWriter)")

    def _finish(self):
        if not self._header_done:
            self.linktype = LINKTYPE_ETHERNET if self.linktype is None else self.linktype
            self._header()

    def _write(self, linktype, ifnames, srcs, rows, keys, ts, codes, names):
        data, start, length = srcs
        out = self._sink.buffer(_io.need_pcap(length, rows, self.snaplen))
        k = _io.pack_pcap(data, start, length, rows, np.ascontiguousarray(ts, np.int64),
                          self.nanosecond, self.snaplen, out)
        self._sink.write(out[:k].data, out)
        self.packets += len(rows)
        # per-interface counts (the file itself cannot record interfaces)
        if names is not None:
            for nm in names:
                self._counts_named(nm)
        else:
            u, c = np.unique(keys[rows], return_counts=True)
            for i, cnt in zip(u.tolist(), c.tolist()):
                self._counts_named(ifnames.get(i) or f"if{i}", cnt)
        return len(rows)

    def _counts_named(self, name, cnt=1):
        i = self._named_id(name, 0)
        self._counts[i] += cnt


class PcapngWriter(_Writer):
    """pcapng (little endian, one section): an Interface Description Block
    per interface written on (``if_name`` = the fastpath interface name,
    ``if_tsresol`` = nanoseconds), Enhanced Packet Blocks, comments as
    ``opt_comment``.  ``comment``: a comment for the section header."""

    def __init__(self, dest, *, select="output", snaplen=MAX_CAPLEN, compress=None, comment=None,
                 application=None, threaded=True):
        super().__init__(dest, select, snaplen, compress, threaded)
        from . import __version__
        opts = b""
        if comment:
            opts += _opt(1, comment.encode())
        opts += _opt(4, (application or f"fastpath {__version__}").encode())
        opts += _opt(0, b"")
        self._sink.write(_block(_SHB, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + opts))
        self.interfaces = {}             # (name, linktype number) -> interface id
        self._optcache = {}              # comment code -> option bytes

    def interface(self, name: str, linktype="ethernet") -> int:
        """The id of an interface, writing its IDB the first time."""
        lt = _LT_OUT[linktype] if isinstance(linktype, str) else int(linktype)
        return self._named_id(name, lt)

    def _interface_id(self, name, lt) -> int:
        key = (name, lt)
        i = self.interfaces.get(key)
        if i is None:
            i = self.interfaces[key] = self._new_id(name, lt)
            opts = _opt(2, name.encode()) + _opt(9, b"\x09") + _opt(0, b"")
            self._sink.write(_block(_IDB, struct.pack("<HHI", lt, 0, self.snaplen) + opts))
        return i

    def _named_id(self, name, lt):
        return self._interface_id(name, lt)

    def _options_for(self, code):
        o = self._optcache.get(code)
        if o is None:
            text = self._free_comments.get(code) if code <= -2 else self._comment(code)
            o = _opt(1, text.encode()) + _opt(0, b"")
            if code > -2:
                self._optcache[code] = o
        return o

    def _write(self, linktype, ifnames, srcs, rows, keys, ts, codes, names):
        n = len(rows)
        lt = _LT_OUT[linktype] if isinstance(linktype, str) else int(linktype)
        data, start, length = srcs
        if names is not None:
            keys, lut = self._keys_for_names(names, lt, len(length), rows)
        else:
            lut = self._lut(ifnames, lt)
        opt_off, opt_len, opts = _EMPTY_I64, _EMPTY_I32, b""
        if codes is not None:
            has = codes != -1
            if has.any():
                opt_off = np.zeros(n, np.int64)
                opt_len = np.zeros(n, np.int32)
                u, inv = np.unique(codes[has], return_inverse=True)
                blobs = [self._options_for(int(c)) for c in u]
                offs = np.cumsum([0] + [len(b) for b in blobs])
                opts = b"".join(blobs)
                inv = inv.reshape(-1)
                opt_off[has] = offs[:-1][inv]
                opt_len[has] = np.array([len(b) for b in blobs], np.int32)[inv]
        obuf = np.frombuffer(opts, np.uint8) if opts else _EMPTY_U8
        ts = ts if ts.dtype == np.int64 and ts.flags.c_contiguous else \
            np.ascontiguousarray(ts, np.int64)
        keys = keys if keys.dtype == np.uint32 and keys.flags.c_contiguous else \
            np.ascontiguousarray(keys, np.uint32)
        out = self._sink.buffer(_io.need_epb(length, rows, opt_len, self.snaplen))
        while True:
            k, missing = _io.pack_epb(data, start, length, rows, keys, lut, ts, obuf, opt_off,
                                      opt_len, self.snaplen, out, self._counts)
            if missing < 0:
                break
            lut = self._learn(ifnames, lt, missing)      # writes the IDB first
        self._sink.write(out[:k].data, out)
        self.packets += n
        return n


def open_writer(dest, *, select="output", **kw):
    """A PcapWriter for ``*.pcap`` / ``*.pcap.gz`` paths, else a PcapngWriter."""
    name = os.fsdecode(dest) if isinstance(dest, (str, bytes, os.PathLike)) else ""
    base = name[:-3] if name.endswith(".gz") else name
    if base.endswith(".pcap"):
        return PcapWriter(dest, select=select, **kw)
    return PcapngWriter(dest, select=select, **kw)


# ----------------------------------------------------------------------------
# replay
# ----------------------------------------------------------------------------

class ReplayStats:
    """What a replay did: packets and bytes in (as captured), batches, per
    verdict, per egress interface (frames that left there, fragments
    included), per drop / ICMP reason, time spent (``elapsed_s`` in all,
    ``process_s`` in the datapath).  Counted in arrays per batch (one
    compiled pass); the dicts are built when read."""

    _NIF, _NR = 4096, 1024

    def __init__(self):
        self.packets = 0
        self.bytes = 0
        self.batches = 0
        self.elapsed_s = 0.0
        self.process_s = 0.0
        self.error = None
        self._v = np.zeros(256, np.int64)
        self._o = np.zeros(self._NIF, np.int64)
        self._d = np.zeros(self._NR, np.int64)
        self._i = np.zeros(self._NR, np.int64)
        self._names = None               # the ifnames dict the egress counts refer to
        self._egress = Counter()         # counts flushed under earlier ifnames, and misses
        self._extra_d = Counter()
        self._extra_i = Counter()

    def add(self, batch: Batch):
        n = len(batch)
        self.packets += n
        self.batches += 1
        if not n:
            return
        if batch.ifnames is not self._names:
            self._flush_egress()
            self._names = batch.ifnames
        miss = _io.tally(batch.verdict, batch.oif, batch.reason, _V_FWD, _V_ICMP, _V_DROP,
                         self._v, self._o, self._d, self._i)
        if miss:                         # an ifindex or a reason beyond the arrays
            v = batch.verdict
            out = _OUT_LUT[v]
            names = batch.ifnames or {}
            for i in batch.oif[out & (batch.oif >= self._NIF)].tolist():
                self._egress[names.get(i) or f"if{i}"] += 1
            for vid, ctr in ((_V_DROP, self._extra_d), (_V_ICMP, self._extra_i)):
                for r in batch.reason[(v == vid) & (batch.reason >= self._NR)].tolist():
                    ctr[str(r)] += 1
        if batch.fragments:
            names = batch.ifnames or {}
            for r, fr in batch.fragments.items():
                if _OUT_LUT[int(batch.verdict[r])] and len(fr) > 1:
                    self._egress[names.get(int(batch.oif[r])) or "?"] += len(fr) - 1

    def _flush_egress(self):
        names = self._names or {}
        for i in np.flatnonzero(self._o).tolist():
            self._egress[names.get(i) or f"if{i}"] += int(self._o[i])
        self._o[:] = 0

    @property
    def verdicts(self) -> Counter:
        return Counter({VERDICTS[i] if i < len(VERDICTS) else str(i): int(self._v[i])
                        for i in np.flatnonzero(self._v).tolist()})

    @property
    def egress(self) -> Counter:
        out = Counter(self._egress)
        names = self._names or {}
        for i in np.flatnonzero(self._o).tolist():
            out[names.get(i) or f"if{i}"] += int(self._o[i])
        return out

    @staticmethod
    def _reasons(arr, extra):
        out = Counter({REASON_NAMES[r] if r < len(REASON_NAMES) else str(r): int(arr[r])
                       for r in np.flatnonzero(arr).tolist()})
        out.update(extra)
        return out

    @property
    def drop_reasons(self) -> Counter:
        return self._reasons(self._d, self._extra_d)

    @property
    def icmp_reasons(self) -> Counter:
        return self._reasons(self._i, self._extra_i)

    @property
    def pps(self) -> float:
        return self.packets / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {"packets": self.packets, "bytes": self.bytes, "batches": self.batches,
                "verdicts": dict(self.verdicts), "egress": dict(self.egress),
                "drop_reasons": dict(self.drop_reasons), "icmp_reasons": dict(self.icmp_reasons),
                "elapsed_s": round(self.elapsed_s, 6), "process_s": round(self.process_s, 6),
                "packets_per_s": round(self.pps, 1), "error": self.error}

    def __repr__(self):
        return (f"<ReplayStats {self.packets} packets, {dict(self.verdicts)}, "
                f"{self.pps / 1e6:.2f} M packets/s>")


def _snapshot(batch: Batch) -> Batch:
    b = Batch.__new__(Batch)
    b.data, b.start, b.length = batch.data.copy(), batch.start.copy(), batch.length.copy()
    b.linktype = batch.linktype
    return b


def process_batches(processor, batches, *, output=None, drops=None, stats=None):
    """Generator: process each batch (``processor.process(batch)``: a Router,
    a Dataplane, anything alike), write it to the ``output`` / ``drops``
    writers (either may be None), count it in ``stats`` (a ReplayStats),
    and yield it."""
    for b in batches:
        orig = _snapshot(b) if drops is not None and drops.select != "output" else None
        if stats is not None:
            nb = getattr(b, "capture_bytes", None)
            stats.bytes += nb if nb is not None else int(b.length.sum())
        t0 = time.perf_counter()
        processor.process(b)
        if stats is not None:
            stats.process_s += time.perf_counter() - t0
            stats.add(b)
        if output is not None:
            output.write_batch(b)
        if drops is not None:
            drops.write_batch(b, original=orig)
        yield b


def replay(processor, source, *, output=None, drops=None, on_batch=None, stats=None, prefetch=2,
           **reader_kw):
    """Push a capture (a path / ``"-"`` / file object, read with
    ``read_batches(source, **reader_kw)``, or any iterable of Batches)
    through ``processor``, writing what leaves to ``output`` and the drops
    to ``drops`` (writers, or paths: ``open_writer``), calling
    ``on_batch(batch)`` after each batch.  A capture is read ``prefetch``
    batches ahead in a background thread (0: in line).  Returns a
    ``ReplayStats``; a ``PcapError`` is raised after the good packets were
    processed and written (pass ``stats`` in to keep the counts; its
    ``error`` holds the message)."""
    stats = stats if stats is not None else ReplayStats()
    own = []
    batches = None
    t0 = time.perf_counter()
    try:
        if output is not None and not isinstance(output, _Writer):
            output = open_writer(output)
            own.append(output)
        if drops is not None and not isinstance(drops, _Writer):
            drops = open_writer(drops, select="drops")
            own.append(drops)
        if isinstance(source, (str, bytes, os.PathLike)) or hasattr(source, "read"):
            if "alloc" not in reader_kw and hasattr(processor, "batch_buffer"):
                reader_kw["alloc"] = processor.batch_buffer     # a Dataplane: no copy in
            batches = read_batches(source, prefetch=prefetch, **reader_kw)
        else:
            if reader_kw:
                raise TypeError("reader options given with an iterable of batches")
            batches = source
        for b in process_batches(processor, batches, output=output, drops=drops, stats=stats):
            if on_batch is not None:
                on_batch(b)
    except PcapError as e:
        stats.error = str(e)
        raise
    finally:
        stats.elapsed_s += time.perf_counter() - t0
        if isinstance(batches, Prefetch):
            batches.close()
        for w in own:
            w.close()
    return stats

"""Reading: input streams (paths, stdin, gzip), PcapReader over pcap and pcapng, read_batches, the Prefetch thread."""
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

import numpy as np

from ..batch import Batch
from ._common import CaptureInterface, DEFAULT_BATCH, DEFAULT_CHUNK, LINKTYPES, MAX_BLOCK, MAX_CAPLEN, PcapError, ST_BAD_BLOCKLEN, ST_BAD_CAPLEN, ST_BAD_IFID, ST_BAD_LINKTYPE, ST_BLOCK_TOO_BIG, ST_CAPLEN_OVERRUN, ST_FULL, ST_LEN_MISMATCH, ST_NEED_MORE, ST_OTHER_BLOCK, _EPB, _IDB, _PCAP_MAGICS, _SHB, _SPB
from . import fallback as _impl


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
        total = _impl._io.gather(self._buf, P.doff[:k] - self._base, length, data, self.headroom)
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
            n, pos, st = _impl._io.scan_pcap(self._buf, self._pos, self._end, big, maxcap, frac_ns,
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
            n, pos, st = _impl._io.scan_pcapng(self._buf, self._pos, self._end, big, self._if_snap,
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
        self.cpu_s = 0.0                    # CPU time of the thread (when it has ended)
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
            self.cpu_s = time.thread_time()

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

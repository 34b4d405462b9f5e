"""Writing: PcapWriter, PcapngWriter (per-interface IDBs, drop comments), the buffered sink and its writer thread."""
from __future__ import annotations

import gzip
import os
import queue
import struct
import sys
import threading
import time
from collections import Counter

import numpy as np

from ..batch import Batch
from ..reasons import REASON_NAMES, VERDICTS, VERDICT_IDS
from ._common import LINKTYPE_ETHERNET, MAX_CAPLEN, _IDB, _LT_OUT, _SHB
from . import fallback as _impl


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
    """Where a writer's bytes go.  Records are packed straight into a large
    reused buffer (``CHUNK`` bytes) and the buffer goes to the file in one
    write when it is full (or at ``flush`` / ``close``): few big writes,
    no per-batch handoff.  With ``threaded`` (the default) a background
    thread does the file writes (which release the GIL), so that the
    page-cache copy, gzip, or a slow pipe overlap with reading and
    processing the next batches; at most ``_NBUF`` buffers exist (memory
    stays bounded), reused from write to write (their pages stay mapped:
    no page faults after the first fill)."""
    _NBUF = 3
    CHUNK = 1 << 20

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
        self.cpu_s = 0.0                    # CPU time of the writer thread, once closed
        self._err = None
        self._bufs = []                     # every pool buffer
        self._cur = None                    # the buffer being filled, and its fill
        self._pos = 0
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
                self.cpu_s = time.thread_time()
                return
            data, buf = item
            if self._err is None:
                try:
                    self._f.write(data)
                except BaseException as e:     # reported by the next write / close
                    self._err = e
            if buf is not None:
                self._free.put(buf)

    def _new_buffer(self, need: int) -> np.ndarray:
        """A buffer of at least ``need`` bytes that no pending write uses."""
        size = max(need, self.CHUNK)
        if self._thread is None:
            if not self._bufs or self._bufs[0].size < size:
                self._bufs = [np.empty(size, np.uint8)]
            return self._bufs[0]
        try:
            buf = self._free.get_nowait()
        except queue.Empty:
            if len(self._bufs) < self._NBUF:
                buf = np.empty(size, np.uint8)
                self._bufs.append(buf)
            else:
                buf = self._free.get()
        if buf.size < size:
            self._bufs = [x for x in self._bufs if x is not buf]
            buf = np.empty(max(size, 2 * buf.size), np.uint8)
            self._bufs.append(buf)
        return buf

    def reserve(self, need: int) -> np.ndarray:
        """Room for ``need`` bytes: a view of the current buffer from its
        fill on, at least ``need`` bytes long (the buffer is written out
        first when it has less room left).  ``commit(k)`` then takes the
        first k bytes written there."""
        self._raise()
        cur = self._cur
        if cur is None or cur.size - self._pos < need:
            self.flush()
            cur = self._cur = self._new_buffer(need)
            self._pos = 0
        return cur[self._pos:]

    def commit(self, k: int):
        self._pos += k
        self.bytes += k
        if self._pos >= self.CHUNK:
            self.flush()

    def write(self, data):
        """Append bytes (headers, IDBs) after what was packed before."""
        n = len(data)
        self.reserve(n)[:n] = np.frombuffer(data, np.uint8)
        self.commit(n)

    def flush(self):
        """Hand what the current buffer holds to the file (the writer
        thread's queue when threaded)."""
        cur, k = self._cur, self._pos
        self._cur, self._pos = None, 0
        if cur is None:
            return
        if self._thread is None:
            if k:
                self._f.write(cur[:k].data)
        elif k:
            self._q.put((cur[:k].data, cur))
        else:
            self._free.put(cur)

    def _raise(self):
        if self._err is not None:
            e, self._err = self._err, None
            raise e

    def close(self):
        try:
            try:
                self.flush()
            finally:
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
        # select "output" takes the fused compiled path (False: the general
        # one, the reference the tests compare it with)
        self.fast = True

    @property
    def bytes(self):
        return self._sink.bytes

    @property
    def thread_cpu_s(self) -> float:
        """CPU time its writer thread used (known once closed; 0 unthreaded)."""
        return self._sink.cpu_s

    @property
    def per_interface(self) -> Counter:
        """Packets written per interface name."""
        out = Counter()
        for i, name in enumerate(self._names):
            if self._counts[i]:
                out[name] += int(self._counts[i])
        return out

    def flush(self):
        """Hand what is buffered to the file (or its writer thread): the
        writer otherwise writes in chunks of ``_Sink.CHUNK`` bytes, and at
        ``close``."""
        if not self.closed:
            self._sink.flush()

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

    def _key_id(self, name, lt) -> int:
        """The id an ifindex of a batch is recorded under (lut entries)."""
        return self._interface_id(name, lt)

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
        lut[k] = self._key_id(ifnames.get(k) or f"if{k}", lt)
        self._luts[(id(ifnames), lt)] = (ifnames, lut)
        return lut

    # which packets, on which interface, with which comment
    def _rows(self, batch):
        n = len(batch)
        if len(self._rowbuf) < n:
            self._rowbuf = np.zeros(max(n, 2 * len(self._rowbuf)), np.int64)
        m = _impl._io.select_rows(batch.verdict, _SEL_LUT[self.select], self._rowbuf)
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
        if self.select == "output" and not batch.fragments and self.fast:
            self._seen(batch.linktype)
            return self._write_selected(batch)
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

    def _write_selected(self, batch: Batch) -> int:
        """The fast path (select "output", no fragments: no comments, no
        per-packet names): one compiled call selects the packets by verdict
        and packs them where the sink's buffer is filled, the interface of
        each from its oif (an interface met for the first time gets its id,
        and in pcapng its IDB, then the call is made again).  Bytes as the
        general path writes them (the tests compare both)."""
        lt = _LT_OUT[batch.linktype] if isinstance(batch.linktype, str) else int(batch.linktype)
        ifnames = batch.ifnames or _NO_NAMES
        lut = self._lut(ifnames, lt)
        ts = batch.timestamp_ns
        if ts.dtype != np.int64 or not ts.flags.c_contiguous:
            ts = np.ascontiguousarray(ts, np.int64)
        keys = batch.oif
        if keys.dtype != np.uint32 or not keys.flags.c_contiguous:
            keys = np.ascontiguousarray(keys, np.uint32)
        pcapng = isinstance(self, PcapngWriter)
        sel = _SEL_LUT[self.select]
        need = 0
        while True:
            out = self._sink.reserve(need)
            k, n, missing = _impl._io.pack_selected(
                pcapng, batch.verdict, sel, batch.data, batch.start, batch.length, keys, lut, ts,
                getattr(self, "nanosecond", True), self.snaplen, out, self._counts)
            if k < 0:                        # not enough room left: -k bytes wanted
                need = -k
            elif missing >= 0:
                lut = self._learn(ifnames, lt, missing)      # pcapng: writes the IDB first
            else:
                break
        self._sink.commit(k)
        self.packets += n
        return n

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
        out = self._sink.reserve(_impl._io.need_pcap(length, rows, self.snaplen))
        k = _impl._io.pack_pcap(data, start, length, rows, np.ascontiguousarray(ts, np.int64),
                                self.nanosecond, self.snaplen, out)
        self._sink.commit(k)
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

    def _key_id(self, name, lt) -> int:
        return self._named_id(name, 0)       # one counter per name (as _counts_named)

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
        from .. import __version__
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
        need = _impl._io.need_epb(length, rows, opt_len, self.snaplen)
        while True:
            out = self._sink.reserve(need)          # (again after an IDB went in)
            k, missing = _impl._io.pack_epb(data, start, length, rows, keys, lut, ts, obuf, opt_off,
                                            opt_len, self.snaplen, out, self._counts)
            if missing < 0:
                break
            lut = self._learn(ifnames, lt, missing)      # writes the IDB first
        self._sink.commit(k)
        self.packets += n
        return n


def open_writer(dest, *, select="output", **kw):
    """A PcapWriter for ``*.pcap`` / ``*.pcap.gz`` paths, else a PcapngWriter."""
    name = os.fsdecode(dest) if isinstance(dest, (str, bytes, os.PathLike)) else ""
    base = name[:-3] if name.endswith(".gz") else name
    if base.endswith(".pcap"):
        return PcapWriter(dest, select=select, **kw)
    return PcapngWriter(dest, select=select, **kw)

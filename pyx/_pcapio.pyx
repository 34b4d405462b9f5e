# Record scanning and packing for fastpath.pcap (``fastpath._pcapio``).
#
# Why compiled: the records of a capture form a chain (each header gives the
# length to the next), so finding them is sequential.  From Python that walk
# costs ~300 ns a record (struct.unpack_from per header), more than the whole
# budget of a 5 Mpps replay; numpy can only speed it up when consecutive
# records have the same length.  Copying packets between the file buffer and
# Batch rows (variable lengths at variable offsets) is the same story: numpy
# needs one fancy-indexing pass per distinct length.
#
# Measured on the 2-vCPU dev VM, 94-byte End frames in pcapng: scan_pcapng
# 4.5 ns a record on a buffer in cache, 7-12 ns on one just read from the
# page cache; gather ~20 ns a packet (memory bound: 320-byte rows written);
# pack_epb ~15 ns on a batch just processed (~42 on 40 batches from DRAM,
# with the rows prefetched; 66 without).  The whole reader (read
# syscall, walk, copies, Batch construction) is ~70 ns a packet; the numpy
# fallback ~2.5x slower on equal-length traffic, ~6x on IMIX.
#
# fastpath/pcap/fallback.py holds a numpy/struct fallback of every function below with
# the same signature and results (used when this module is not built, and by
# the tests to check both agree).
#
# Safety: every length read from the file is checked against the bytes
# actually present (``end``) before anything is read or copied; the output
# arrays are checked against ``maxrec``; nothing here allocates.  A check that
# fails stops the walk with a status code; fastpath.pcap turns it into a
# PcapError naming the byte offset.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, int32_t, int64_t, uint64_t
from libc.string cimport memcpy, memset

# scan status codes (the same values as fastpath.pcap.ST_*)
cdef enum:
    NEED_MORE = 0        # the next record/block is not complete in the buffer
    FULL = 1             # maxrec records stored
    BAD_CAPLEN = 2       # caplen larger than the snapshot length / the limit
    BAD_BLOCKLEN = 3     # pcapng block length < 12 or not a multiple of 4
    OTHER_BLOCK = 4      # a pcapng block that is not EPB/SPB/PB: Python's job
    BLOCK_TOO_BIG = 5    # pcapng block length above the limit
    LEN_MISMATCH = 6     # pcapng trailing block length != leading one
    CAPLEN_OVERRUN = 7   # packet data runs past the end of its block
    BAD_IFID = 8         # interface id without an IDB
    BAD_LINKTYPE = 9     # packet on an interface whose link type is not supported

STATUS = {"NEED_MORE": NEED_MORE, "FULL": FULL, "BAD_CAPLEN": BAD_CAPLEN,
          "BAD_BLOCKLEN": BAD_BLOCKLEN, "OTHER_BLOCK": OTHER_BLOCK,
          "BLOCK_TOO_BIG": BLOCK_TOO_BIG, "LEN_MISMATCH": LEN_MISMATCH,
          "CAPLEN_OVERRUN": CAPLEN_OVERRUN, "BAD_IFID": BAD_IFID,
          "BAD_LINKTYPE": BAD_LINKTYPE}


cdef inline uint32_t rd32(const uint8_t* p, bint big) noexcept nogil:
    if big:
        return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]
    return (<uint32_t>p[3] << 24) | (<uint32_t>p[2] << 16) | (<uint32_t>p[1] << 8) | p[0]


cdef inline uint32_t rd16(const uint8_t* p, bint big) noexcept nogil:
    if big:
        return (<uint32_t>p[0] << 8) | p[1]
    return (<uint32_t>p[1] << 8) | p[0]


cdef inline void wr32(uint8_t* p, uint32_t v) noexcept nogil:
    # little endian, as fastpath writes every file
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = v >> 24


cdef inline Py_ssize_t pad4(Py_ssize_t n) noexcept nogil:
    return (n + 3) & ~(<Py_ssize_t>3)


def _check_out(Py_ssize_t maxrec, Py_ssize_t n0, arrays):
    if n0 < 0 or maxrec < n0:
        raise ValueError("bad record range")
    for a in arrays:
        if a.shape[0] < maxrec:
            raise ValueError("output array shorter than maxrec")


def scan_pcap(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end, bint big, uint32_t maxcap,
              int64_t frac_ns, int64_t[::1] off, int32_t[::1] cap, uint32_t[::1] wlen,
              int64_t[::1] ts, Py_ssize_t n0, Py_ssize_t maxrec):
    """Walk classic pcap records of ``buf[pos:end]``, storing record k's data
    offset, caplen, original length and timestamp (ns: seconds * 1e9 +
    fraction * ``frac_ns``) at index n0 + k of the output arrays, until
    ``maxrec`` is reached.  Returns ``(n, pos, status)``: n = the next free
    index, pos = the offset of the first record not stored."""
    cdef Py_ssize_t n = n0
    cdef int status = FULL
    cdef uint32_t c
    cdef const uint8_t* b
    if end > buf.shape[0] or pos < 0 or pos > end:
        raise ValueError("bad buffer range")
    if maxcap > 0x7FFFFFFF:
        raise ValueError("maxcap too large")
    _check_out(maxrec, n0, (off, cap, wlen, ts))
    if end - pos < 16:
        return n, pos, (FULL if n >= maxrec else NEED_MORE)
    b = &buf[0]
    with nogil:
        while n < maxrec:
            if end - pos < 16:
                status = NEED_MORE
                break
            c = rd32(b + pos + 8, big)
            if c > maxcap:
                status = BAD_CAPLEN
                break
            if <uint64_t>(end - pos - 16) < c:
                status = NEED_MORE
                break
            ts[n] = (<int64_t>rd32(b + pos, big) * 1000000000
                     + <int64_t>rd32(b + pos + 4, big) * frac_ns)
            cap[n] = <int32_t>c
            wlen[n] = rd32(b + pos + 12, big)
            off[n] = pos + 16
            pos += 16 + c
            n += 1
    return n, pos, status


def scan_pcapng(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end, bint big,
                const uint32_t[::1] if_snap, const uint8_t[::1] if_ok, uint32_t maxcap,
                uint32_t maxblock, int64_t[::1] off, int32_t[::1] cap, uint32_t[::1] wlen,
                uint32_t[::1] ifid, int64_t[::1] ts, uint8_t[::1] kind,
                Py_ssize_t n0, Py_ssize_t maxrec):
    """Walk the packet blocks (EPB 6, SPB 3, obsolete PB 2) of a pcapng
    section in ``buf[pos:end]``; stop at any other block (OTHER_BLOCK) or
    bad one.  ``if_snap``/``if_ok``: the section's interfaces (snapshot
    length, 0 = none; link type supported).  Per record: data offset,
    caplen, original length, interface id, timestamp (the 64-bit count of
    the interface's units, as int64 bits; 0 for an SPB), kind (the block
    type).  Returns ``(n, pos, status)``; pos is the offset of
    the block that stopped the walk."""
    cdef Py_ssize_t n = n0, nif = if_snap.shape[0]
    cdef int status = FULL
    cdef uint32_t t, blen, c, ol, i, body
    cdef const uint8_t* b
    cdef const uint8_t* p
    if end > buf.shape[0] or pos < 0 or pos > end:
        raise ValueError("bad buffer range")
    if if_ok.shape[0] != nif:
        raise ValueError("if_snap and if_ok differ in length")
    if maxcap > 0x7FFFFFFF:
        raise ValueError("maxcap too large")
    _check_out(maxrec, n0, (off, cap, wlen, ifid, ts, kind))
    if end - pos < 12:
        return n, pos, (FULL if n >= maxrec else NEED_MORE)
    b = &buf[0]
    with nogil:
        while n < maxrec:
            if end - pos < 12:
                status = NEED_MORE
                break
            p = b + pos
            t = rd32(p, big)
            if t != 6 and t != 3 and t != 2:
                status = OTHER_BLOCK
                break
            blen = rd32(p + 4, big)
            if blen < 12 or (blen & 3) != 0:
                status = BAD_BLOCKLEN
                break
            if blen > maxblock:
                status = BLOCK_TOO_BIG
                break
            if <uint64_t>(end - pos) < blen:
                status = NEED_MORE
                break
            if rd32(p + blen - 4, big) != blen:
                status = LEN_MISMATCH
                break
            if t == 3:                      # simple packet block
                if blen < 16:
                    status = BAD_BLOCKLEN
                    break
                if nif == 0:
                    status = BAD_IFID
                    break
                if not if_ok[0]:
                    status = BAD_LINKTYPE
                    break
                ol = rd32(p + 8, big)
                body = blen - 16
                c = ol
                if c > body:
                    c = body
                if if_snap[0] != 0 and c > if_snap[0]:
                    c = if_snap[0]
                if c > maxcap:
                    status = BAD_CAPLEN
                    break
                i = 0
                ts[n] = 0
                off[n] = pos + 12
            else:                           # enhanced / obsolete packet block
                if blen < 32:
                    status = BAD_BLOCKLEN
                    break
                i = rd32(p + 8, big) if t == 6 else rd16(p + 8, big)
                c = rd32(p + 20, big)
                ol = rd32(p + 24, big)
                if i >= nif:
                    status = BAD_IFID
                    break
                if not if_ok[i]:
                    status = BAD_LINKTYPE
                    break
                if c > blen - 32:
                    status = CAPLEN_OVERRUN
                    break
                if c > maxcap or (if_snap[i] != 0 and c > if_snap[i]):
                    status = BAD_CAPLEN
                    break
                ts[n] = <int64_t>((<uint64_t>rd32(p + 12, big) << 32) | rd32(p + 16, big))
                off[n] = pos + 28
            cap[n] = <int32_t>c
            wlen[n] = ol
            ifid[n] = i
            kind[n] = <uint8_t>t
            pos += blen
            n += 1
    return n, pos, status


def gather(const uint8_t[::1] buf, const int64_t[::1] off, const int32_t[::1] length,
           uint8_t[:, ::1] data, int32_t headroom, bint zero=True):
    """Copy packet k (``length[k]`` bytes at ``buf[off[k]]``) into
    ``data[k, headroom:]``; with ``zero``, zero the rest of the row.
    Returns the bytes copied."""
    cdef Py_ssize_t n = off.shape[0], k, slot = data.shape[1], blen = buf.shape[0]
    cdef int64_t o
    cdef int32_t ln
    cdef uint8_t* row
    cdef int64_t total = 0
    if length.shape[0] != n or data.shape[0] != n:
        raise ValueError("gather: arrays differ in length")
    if headroom < 0 or headroom > slot:
        raise ValueError("gather: bad headroom")
    for k in range(n):
        o = off[k]
        ln = length[k]
        if ln < 0 or o < 0 or o + ln > blen or headroom + ln > slot:
            raise ValueError(f"gather: packet {k} ({ln} bytes at {o}) out of bounds")
        total += ln
    if n == 0:
        return 0
    with nogil:
        for k in range(n):
            row = &data[k, 0]
            if zero:
                memset(row, 0, headroom)
            if length[k] > 0:
                memcpy(row + headroom, &buf[off[k]], length[k])
            if zero:
                memset(row + headroom + length[k], 0, slot - headroom - length[k])
    return total


def select_rows(const uint8_t[::1] verdict, const uint8_t[::1] lut, int64_t[::1] rows):
    """``rows[:m]`` = the indexes i where ``lut[verdict[i]]`` is set; returns m."""
    cdef Py_ssize_t n = verdict.shape[0], i, m = 0
    if lut.shape[0] < 256 or rows.shape[0] < n:
        raise ValueError("select_rows: lut needs 256 entries and rows one per packet")
    for i in range(n):
        if lut[verdict[i]]:
            rows[m] = i
            m += 1
    return m


def tally(const uint8_t[::1] verdict, const uint32_t[::1] oif, const uint16_t[::1] reason,
          uint8_t v_fwd, uint8_t v_icmp, uint8_t v_drop, int64_t[::1] vcount,
          int64_t[::1] ocount, int64_t[::1] dcount, int64_t[::1] icount):
    """Add a batch's verdicts to ``vcount`` (256 entries), the egress
    interfaces of its forward/icmp packets to ``ocount[oif]``, the reasons
    of its drops and ICMP errors to ``dcount`` / ``icount``.  Returns how
    many packets had an oif or reason beyond those arrays (not counted
    there: the caller counts that batch another way)."""
    cdef Py_ssize_t n = verdict.shape[0], i, miss = 0
    cdef uint8_t v
    if oif.shape[0] != n or reason.shape[0] != n or vcount.shape[0] < 256:
        raise ValueError("tally: arrays differ in length")
    for i in range(n):
        v = verdict[i]
        vcount[v] += 1
        if v == v_fwd or v == v_icmp:
            if oif[i] < <uint32_t>ocount.shape[0]:
                ocount[oif[i]] += 1
            else:
                miss += 1
        if v == v_drop or v == v_icmp:
            if reason[i] >= (dcount.shape[0] if v == v_drop else icount.shape[0]):
                miss += 1
            elif v == v_drop:
                dcount[reason[i]] += 1
            else:
                icount[reason[i]] += 1
    return miss


cdef int _check_rows(const uint8_t[:, ::1] data, const int32_t[::1] start,
                     const int32_t[::1] length, const int64_t[::1] rows) except -1:
    cdef Py_ssize_t k, r, nrow = data.shape[0], slot = data.shape[1]
    if start.shape[0] != nrow or length.shape[0] != nrow:
        raise ValueError("start/length must have one entry per data row")
    for k in range(rows.shape[0]):
        r = rows[k]
        if r < 0 or r >= nrow:
            raise ValueError(f"row {r} out of range")
        if start[r] < 0 or length[r] < 0 or <Py_ssize_t>start[r] + length[r] > slot:
            raise ValueError(f"packet {r} lies outside its slot")
    return 0


def need_pcap(const int32_t[::1] length, const int64_t[::1] rows, uint32_t snaplen):
    """Bytes that pack_pcap will write."""
    cdef Py_ssize_t k, need = 0, nrow = length.shape[0]
    cdef uint32_t c
    for k in range(rows.shape[0]):
        if rows[k] < 0 or rows[k] >= nrow or length[rows[k]] < 0:
            raise ValueError("need_pcap: bad row")
        c = <uint32_t>length[rows[k]]
        if snaplen and c > snaplen:
            c = snaplen
        need += 16 + c
    return need


def need_epb(const int32_t[::1] length, const int64_t[::1] rows, const int32_t[::1] opt_len,
             uint32_t snaplen):
    """Bytes that pack_epb will write."""
    cdef Py_ssize_t k, need = 0, nrow = length.shape[0]
    cdef bint has_opts = opt_len.shape[0] != 0
    cdef uint32_t c
    if has_opts and opt_len.shape[0] != rows.shape[0]:
        raise ValueError("need_epb: opt_len must be empty or one per row")
    for k in range(rows.shape[0]):
        if rows[k] < 0 or rows[k] >= nrow or length[rows[k]] < 0:
            raise ValueError("need_epb: bad row")
        c = <uint32_t>length[rows[k]]
        if snaplen and c > snaplen:
            c = snaplen
        need += 32 + pad4(c) + (opt_len[k] if has_opts else 0)
    return need


cdef extern from *:
    """
    #if defined(__GNUC__)
    #define fp_io_prefetch(p) __builtin_prefetch((const void*)(p), 0, 3)
    #else
    #define fp_io_prefetch(p) ((void)(p))
    #endif
    """
    void fp_io_prefetch(const void* p) noexcept nogil


# Rows are prefetched this many packets ahead of the copy (their first two
# lines: a batch just processed is in cache, one from DRAM is not; packing
# 40 batches of 94-byte frames cold took 66 ns a packet without, hot 15).
cdef enum:
    PACK_AHEAD = 6


cdef inline void pack_prefetch(const uint8_t* d0, Py_ssize_t slot, const int32_t* st,
                               const int64_t* rw, Py_ssize_t k, Py_ssize_t n) noexcept nogil:
    cdef const uint8_t* p
    if k < n:
        p = d0 + rw[k] * slot + st[rw[k]]
        fp_io_prefetch(p)
        fp_io_prefetch(p + 64)


# The packers release the GIL for their copy loops (a batch packs in
# ~0.1 ms): the replay's reader thread runs its Python (batch construction,
# the record walk's bookkeeping) meanwhile, instead of waiting for it.
# Everything they touch is checked first, with the GIL, and the arrays are
# held by the call's memoryviews.

def pack_pcap(const uint8_t[:, ::1] data, const int32_t[::1] start, const int32_t[::1] length,
              const int64_t[::1] rows, const int64_t[::1] ts_ns, bint nanosecond, uint32_t snaplen,
              uint8_t[::1] out):
    """Classic pcap records (little endian) of the packets ``rows`` of a
    batch, one after the other into ``out`` (at least ``need_pcap`` bytes);
    returns the bytes written.  ``ts_ns``: one timestamp per data row.
    Caplen is cut to ``snaplen`` (0 = no cut), the original length kept."""
    cdef Py_ssize_t n = rows.shape[0], k, pos = 0, cap = out.shape[0]
    cdef int64_t r, ts
    cdef uint32_t c, ln
    cdef uint8_t* o
    cdef const uint8_t* d0
    cdef Py_ssize_t slot = data.shape[1]
    _check_rows(data, start, length, rows)
    if ts_ns.shape[0] != data.shape[0]:
        raise ValueError("ts_ns must have one entry per data row")
    if need_pcap(length, rows, snaplen) > cap:
        raise ValueError("output buffer too small")
    if n == 0:
        return 0
    o = &out[0]
    d0 = &data[0, 0] if slot else NULL     # (slot 0: every packet is empty)
    with nogil:
        for k in range(min(n, PACK_AHEAD)):
            pack_prefetch(d0, slot, &start[0], &rows[0], k, n)
        for k in range(n):
            pack_prefetch(d0, slot, &start[0], &rows[0], k + PACK_AHEAD, n)
            r = rows[k]
            ln = <uint32_t>length[r]
            c = ln
            if snaplen and c > snaplen:
                c = snaplen
            ts = ts_ns[r]
            if ts < 0:
                ts = 0
            wr32(o + pos, <uint32_t>(ts // 1000000000))
            wr32(o + pos + 4, <uint32_t>(ts % 1000000000 if nanosecond
                                         else (ts % 1000000000) // 1000))
            wr32(o + pos + 8, c)
            wr32(o + pos + 12, ln)
            memcpy(o + pos + 16, d0 + r * slot + start[r], c)
            pos += 16 + c
    return pos


def pack_epb(const uint8_t[:, ::1] data, const int32_t[::1] start, const int32_t[::1] length,
             const int64_t[::1] rows, const uint32_t[::1] ifx, const int64_t[::1] lut,
             const int64_t[::1] ts, const uint8_t[::1] opts, const int64_t[::1] opt_off,
             const int32_t[::1] opt_len, uint32_t snaplen, uint8_t[::1] out,
             int64_t[::1] counts):
    """pcapng Enhanced Packet Blocks (little endian) of the packets ``rows``
    into ``out`` (at least ``need_epb`` bytes).  Per data row: ``ifx``, the
    key of its interface, whose pcapng interface id is ``lut[ifx]``, and its
    timestamp ``ts`` (ns).  Per listed packet: its options, ``opt_len`` bytes
    at ``opts[opt_off]`` (padded, with their opt_endofopt), none when 0 or
    when ``opt_len`` is empty.  ``counts[id]`` counts the packets written on
    each interface.  Returns ``(bytes written, -1)``, or ``(0, key)`` (and
    writes nothing) when a key has no interface id yet (lut < 0 or beyond
    the lut): the caller adds it and calls again."""
    cdef Py_ssize_t n = rows.shape[0], k, pos = 0, cap = out.shape[0]
    cdef Py_ssize_t nopt = opts.shape[0], pc, blen, nlut = lut.shape[0]
    cdef Py_ssize_t nrow = data.shape[0], need = 0
    cdef int64_t r, t, i
    cdef uint32_t c, ln, x
    cdef uint8_t* o
    cdef uint8_t* q
    cdef const uint8_t* d0
    cdef Py_ssize_t slot = data.shape[1]
    cdef bint has_opts = opt_len.shape[0] != 0
    cdef int32_t ol
    if start.shape[0] != nrow or length.shape[0] != nrow:
        raise ValueError("start/length must have one entry per data row")
    if ifx.shape[0] != nrow or ts.shape[0] != nrow:
        raise ValueError("ifx/ts must have one entry per data row")
    if has_opts and (opt_off.shape[0] != n or opt_len.shape[0] != n):
        raise ValueError("opt_off/opt_len must be empty or have one entry per row")
    # one pass checks every row and sizes the output (was four passes)
    for k in range(n):
        r = rows[k]
        if r < 0 or r >= nrow:
            raise ValueError(f"row {r} out of range")
        if start[r] < 0 or length[r] < 0 or <Py_ssize_t>start[r] + length[r] > slot:
            raise ValueError(f"packet {r} lies outside its slot")
        x = ifx[r]
        if x >= nlut or lut[x] < 0:
            return 0, x
        if lut[x] >= counts.shape[0]:
            raise ValueError("counts shorter than the interface ids")
        ol = opt_len[k] if has_opts else 0
        if has_opts and (ol < 0 or (ol & 3) or opt_off[k] < 0 or opt_off[k] + ol > nopt):
            raise ValueError(f"options of packet {k} out of bounds")
        c = <uint32_t>length[r]
        if snaplen and c > snaplen:
            c = snaplen
        need += 32 + pad4(c) + ol
    if need > cap:
        raise ValueError("output buffer too small")
    if n == 0:
        return 0, -1
    o = &out[0]
    d0 = &data[0, 0] if slot else NULL     # (slot 0: every packet is empty)
    with nogil:
        for k in range(min(n, PACK_AHEAD)):
            pack_prefetch(d0, slot, &start[0], &rows[0], k, n)
        for k in range(n):
            pack_prefetch(d0, slot, &start[0], &rows[0], k + PACK_AHEAD, n)
            r = rows[k]
            i = lut[ifx[r]]
            counts[i] += 1
            ln = <uint32_t>length[r]
            c = ln
            if snaplen and c > snaplen:
                c = snaplen
            pc = pad4(c)
            ol = opt_len[k] if has_opts else 0
            blen = 32 + pc + ol
            t = ts[r]
            if t < 0:
                t = 0
            q = o + pos
            wr32(q, 6)
            wr32(q + 4, <uint32_t>blen)
            wr32(q + 8, <uint32_t>i)
            wr32(q + 12, <uint32_t>(<uint64_t>t >> 32))
            wr32(q + 16, <uint32_t>(<uint64_t>t & 0xFFFFFFFFU))
            wr32(q + 20, c)
            wr32(q + 24, ln)
            # the padding first (at most 3 bytes, stored directly rather than a
            # memset call), then the data over the start of it
            if pc >= 4:
                wr32(q + 28 + pc - 4, 0)
            memcpy(q + 28, d0 + r * slot + start[r], c)
            if ol:
                memcpy(q + 28 + pc, &opts[opt_off[k]], ol)
            wr32(q + blen - 4, <uint32_t>blen)
            pos += blen
    return pos, -1


cdef Py_ssize_t _pack_selected(bint pcapng, Py_ssize_t nrow, Py_ssize_t slot,
                               const uint8_t* verdict, const uint8_t* sel, const uint8_t* d0,
                               const int32_t* start, const int32_t* length, const uint32_t* keys,
                               const int64_t* lut, const int64_t* ts, bint nanosecond,
                               uint32_t snaplen, uint8_t* o, int64_t* counts) noexcept nogil:
    """pack_selected's second pass (every row checked by the first): the
    records one after the other from ``o``; returns the bytes written."""
    cdef Py_ssize_t i, pos = 0, pc, blen
    cdef uint32_t c, ln
    cdef int64_t t, ident
    cdef uint8_t* q
    cdef const uint8_t* p
    # the rows ahead are prefetched (as pack_epb: a batch whose rows come
    # from DRAM packs ~3x slower without); every row, selected or not,
    # which wastes a little on batches where few rows are written
    for i in range(min(nrow, PACK_AHEAD)):
        p = d0 + i * slot + start[i]
        fp_io_prefetch(p)
        fp_io_prefetch(p + 64)
    for i in range(nrow):
        if i + PACK_AHEAD < nrow:
            p = d0 + (i + PACK_AHEAD) * slot + start[i + PACK_AHEAD]
            fp_io_prefetch(p)
            fp_io_prefetch(p + 64)
        if not sel[verdict[i]]:
            continue
        ident = lut[keys[i]]
        counts[ident] += 1
        ln = <uint32_t>length[i]
        c = ln
        if snaplen and c > snaplen:
            c = snaplen
        t = ts[i]
        if t < 0:
            t = 0
        q = o + pos
        if pcapng:
            pc = pad4(c)
            blen = 32 + pc
            wr32(q, 6)
            wr32(q + 4, <uint32_t>blen)
            wr32(q + 8, <uint32_t>ident)
            wr32(q + 12, <uint32_t>(<uint64_t>t >> 32))
            wr32(q + 16, <uint32_t>(<uint64_t>t & 0xFFFFFFFFU))
            wr32(q + 20, c)
            wr32(q + 24, ln)
            # padding first (as pack_epb), then the data over its start
            if pc >= 4:
                wr32(q + 28 + pc - 4, 0)
            memcpy(q + 28, d0 + i * slot + start[i], c)
            wr32(q + blen - 4, <uint32_t>blen)
            pos += blen
        else:
            wr32(q, <uint32_t>(t // 1000000000))
            wr32(q + 4, <uint32_t>(t % 1000000000 if nanosecond
                                   else (t % 1000000000) // 1000))
            wr32(q + 8, c)
            wr32(q + 12, ln)
            memcpy(q + 16, d0 + i * slot + start[i], c)
            pos += 16 + c
    return pos


def pack_selected(bint pcapng, const uint8_t[::1] verdict, const uint8_t[::1] sel,
                  const uint8_t[:, ::1] data, const int32_t[::1] start, const int32_t[::1] length,
                  const uint32_t[::1] keys, const int64_t[::1] lut, const int64_t[::1] ts,
                  bint nanosecond, uint32_t snaplen, uint8_t[::1] out, int64_t[::1] counts):
    """The writers' fast path: selection and packing in one call, for a
    batch without comments.  Every row i with ``sel[verdict[i]]`` set is
    written, in row order, as pack_epb (``pcapng``, interface id
    ``lut[keys[i]]``, no options) or pack_pcap (``nanosecond``) would write
    it, into ``out``; ``counts[lut[keys[i]]]`` counts it.  A first pass
    checks every selected row and sizes the output, so that nothing is
    written or counted unless all of it is.  Returns ``(bytes, packets,
    -1)``; ``(0, 0, key)`` when a key has no id yet (``lut`` < 0 or
    beyond it): the caller gives it one and calls again; ``(-need, 0, -1)``
    when ``out`` holds fewer than the ``need`` bytes: the caller calls
    again with a larger one.  Raises ValueError when a packet lies outside
    its slot."""
    cdef Py_ssize_t nrow = data.shape[0], slot = data.shape[1], nlut = lut.shape[0]
    cdef Py_ssize_t i, need = 0, pos = 0, npk = 0, ncount = counts.shape[0]
    cdef uint32_t c, x
    cdef int64_t s
    cdef const uint8_t* d0
    if sel.shape[0] < 256:
        raise ValueError("sel needs 256 entries")
    if (verdict.shape[0] != nrow or start.shape[0] != nrow or length.shape[0] != nrow
            or keys.shape[0] != nrow or ts.shape[0] != nrow):
        raise ValueError("verdict/start/length/keys/ts must have one entry per data row")
    for i in range(nrow):
        if not sel[verdict[i]]:
            continue
        s = start[i]
        if s < 0 or length[i] < 0 or s + length[i] > slot:
            raise ValueError(f"packet {i} lies outside its slot")
        x = keys[i]
        if x >= nlut or lut[x] < 0:
            return 0, 0, x
        if lut[x] >= ncount:
            raise ValueError("counts shorter than the interface ids")
        c = <uint32_t>length[i]
        if snaplen and c > snaplen:
            c = snaplen
        need += (32 + pad4(c)) if pcapng else (16 + c)
        npk += 1
    if need > out.shape[0]:
        return -need, 0, -1
    if npk == 0:
        return 0, 0, -1
    d0 = &data[0, 0] if slot else NULL
    with nogil:                          # (see the packers above)
        pos = _pack_selected(pcapng, nrow, slot, &verdict[0], &sel[0], d0, &start[0],
                             &length[0], &keys[0], &lut[0], &ts[0], nanosecond, snaplen,
                             &out[0], &counts[0])
    return pos, npk, -1

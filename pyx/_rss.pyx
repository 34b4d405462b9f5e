# Receive-side scaling as an Intel 82599 NIC computes it (``fastpath._rss``).
#
# The Toeplitz hash of Microsoft's RSS specification (NdisHashFunctionToeplitz)
# over the fields of hash types IPV4 / TCP_IPV4 / UDP_IPV4 / IPV6 / TCP_IPV6 /
# UDP_IPV6: source address, destination address, then (TCP/UDP, when enabled)
# source port and destination port, all in network byte order.  The bytes
# hashed (the "RSS input") are at most 36 (IPv6 + ports).
#
# Why this algorithm: the standard table-driven Toeplitz.  The hash is linear
# over GF(2): hash(input) = XOR over the input bytes of hash(that byte alone,
# at its position).  ``table[j, b]`` (uint32[40, 256], 40 KiB, built once per
# key by fastpath/rss.py) holds the hash of byte value b at input position j,
# i.e. the XOR of the key's 32-bit windows at bit offsets 8j + k for each set
# bit k of b.  One hash is one table load and XOR per input byte (12 for
# IPv4 + ports, 36 for IPv6 + ports), no per-bit loop.
#
# Parsing follows the NIC, not the kernel: Ethernet type (with at most one
# 802.1Q tag, as the rest of fastpath) or, for raw batches, the IP version
# nibble picks the family; the addresses are hashed when the packet holds
# them (else the hash is 0, as for every non-IP packet); the ports are hashed
# for TCP (and UDP when enabled) when the L4 header follows the IPv4 header
# (options skipped by IHL) or directly the fixed IPv6 header, the packet is
# not an IPv4 fragment (MF set or offset non-zero) and the 4 port bytes are
# inside the packet; otherwise the L3-only hash is used.  Nothing past
# ``start + length`` is ever read.
#
# Memory: one packet's headers are at most 62 bytes (Ethernet + 802.1Q +
# IPv6 + ports) but numpy's buffer starts 16 bytes into a page, so with the
# default 128-byte headroom an Ethernet frame's IPv6 addresses straddle two
# cache lines.  Both lines are prefetched PREFETCH_AHEAD packets ahead;
# prefetching only the first line left Ethernet/IPv6 on big batches at ~25
# Mpps (every packet waiting for DRAM on its second line) instead of ~55.
#
# Measured (``python -m fastpath.rss N RUNS``, random TCP/UDP 5-tuples, the
# noisy 2-core KVM Xeon of the dev container, -O3, other builds running):
#   65536-packet batches (128 MiB, from DRAM): IPv4 66..74 Mpps (13.5..15 ns),
#     IPv6 53..58 Mpps (17..19 ns), raw and Ethernet alike;
#   1024-packet batches (in cache): IPv4 ~105 Mpps (9..10 ns), IPv6 ~76 Mpps
#     (13 ns).
#   Byte-at-a-time table lookups (no 4-byte loads) cost ~27 ns per IPv6
#   packet in cache.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, int32_t, int64_t
from libc.stdlib cimport calloc, malloc, free
from libc.string cimport memcpy
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_C_CONTIGUOUS, PyBUF_FORMAT, PyBUF_WRITABLE

from fp cimport rd16, LINK_RAW, LINK_ETHERNET

cdef extern from *:
    """
    #ifdef FASTPATH_DEBUG
    #define FP_RSS_DEBUG_BUILD 1
    #else
    #define FP_RSS_DEBUG_BUILD 0
    #endif
    #if defined(__GNUC__)
    #define fp_rss_prefetch(p) __builtin_prefetch((const void*)(p), 0, 3)
    #else
    #define fp_rss_prefetch(p) ((void)(p))
    #endif
    #include <string.h>
    /* Toeplitz hash of the 4 input bytes p[0..3] at table rows t[0..3]: one
       (unaligned) 32-bit load instead of four byte loads. */
    static inline uint32_t fp_rss_th4(const uint32_t* t, const uint8_t* p) {
        uint32_t w;
        memcpy(&w, p, 4);
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap32(w);
    #endif
        return t[w & 0xFF] ^ t[256 + ((w >> 8) & 0xFF)]
             ^ t[512 + ((w >> 16) & 0xFF)] ^ t[768 + (w >> 24)];
    }
    """
    const int FP_RSS_DEBUG_BUILD
    void fp_rss_prefetch(const void* p) noexcept nogil
    uint32_t fp_rss_th4(const uint32_t* t, const uint8_t* p) noexcept nogil

# True when built with FASTPATH_DEBUG=1 (bounds checks on; each packet hashed
# from a heap copy that ends where the packet ends, for AddressSanitizer).
DEBUG_BUILD = bool(FP_RSS_DEBUG_BUILD)

TABLE_ROWS = 40          # input byte positions covered by the table (key length)
MAX_INPUT = 36           # IPv6 addresses + ports

cdef enum:
    PREFETCH_AHEAD = 16      # packets
    MAX_HDR = 62             # bytes read at most: 18 (Ethernet + VLAN) + 40 (IPv6) + 4 (ports)


cdef inline uint32_t th(const uint32_t* t, const uint8_t* p, int pos, int n) noexcept nogil:
    """Toeplitz hash of ``p[0:n]`` (n a multiple of 4) placed at input
    position ``pos``: two independent XOR chains of 4-byte steps."""
    cdef uint32_t h0 = 0, h1 = 0
    cdef int k = 0
    t += pos * 256
    while k + 8 <= n:
        h0 ^= fp_rss_th4(t, p + k)
        h1 ^= fp_rss_th4(t + 1024, p + k + 4)
        t += 2048
        k += 8
    if k < n:
        h0 ^= fp_rss_th4(t, p + k)
    return h0 ^ h1


cdef inline uint32_t rss_hash(const uint32_t* t, const uint8_t* f, int32_t n, int linktype,
                              bint ports, bint udp) noexcept nogil:
    """The RSS hash of the packet ``f[0:n]`` (0: not hashed)."""
    cdef uint16_t et
    cdef int fam, ihl
    cdef uint8_t proto
    cdef uint32_t h
    if linktype == LINK_ETHERNET:
        if n < 14:
            return 0
        et = rd16(f + 12)
        if et == 0x8100:
            if n < 18:
                return 0
            et = rd16(f + 16)
            f += 18
            n -= 18
        else:
            f += 14
            n -= 14
        if et == 0x0800:
            fam = 4
        elif et == 0x86DD:
            fam = 6
        else:
            return 0
        if n < 1 or (f[0] >> 4) != fam:
            return 0
    else:
        if n < 1:
            return 0
        fam = f[0] >> 4
    if fam == 4:
        if n < 20:
            return 0
        h = th(t, f + 12, 0, 8)
        if not ports:
            return h
        proto = f[9]
        if proto != 6 and not (proto == 17 and udp):
            return h
        if rd16(f + 6) & 0x3FFF:          # MF or fragment offset: no L4 header
            return h
        ihl = (f[0] & 0x0F) * 4
        if ihl < 20 or ihl + 4 > n:
            return h
        return h ^ th(t, f + ihl, 8, 4)
    if fam == 6:
        if n < 40:
            return 0
        h = th(t, f + 8, 0, 32)
        if not ports:
            return h
        proto = f[6]
        if (proto == 6 or (proto == 17 and udp)) and n >= 44:
            h ^= th(t, f + 40, 32, 4)
        return h
    return 0


def hash_arrays(const uint8_t[:, ::1] data not None, const int32_t[::1] start not None,
                const int32_t[::1] length not None, int linktype,
                const uint32_t[:, ::1] table not None, bint ports, bint udp,
                uint32_t[::1] out not None):
    """Hash every packet of ``data`` (uint8[N, slot], packet i at
    ``data[i, start[i]:start[i] + length[i]]``) into ``out`` (uint32[N]).
    ``table`` is the uint32[40, 256] lookup table of the key
    (fastpath.rss.key_table).  A packet placed outside its slot hashes 0."""
    cdef Py_ssize_t n = data.shape[0], i, j
    cdef int32_t slot = <int32_t>data.shape[1]
    cdef int32_t s, ln
    cdef const uint8_t* base
    cdef const uint32_t* t
    cdef const int32_t* st
    cdef const int32_t* lp
    cdef uint32_t* o
    cdef uint8_t* buf
    if start.shape[0] != n or length.shape[0] != n or out.shape[0] != n:
        raise ValueError(f"start, length and out must have {n} entries")
    if table.shape[0] != TABLE_ROWS or table.shape[1] != 256:
        raise ValueError("table must be uint32[40, 256]")
    if linktype != LINK_RAW and linktype != LINK_ETHERNET:
        raise ValueError("unknown link type")
    if n == 0:
        return
    if data.shape[1] > 0x7FFFFFFF:
        raise ValueError("slot too large")
    base = &data[0, 0] if slot > 0 else NULL
    t = &table[0, 0]
    st = &start[0]
    lp = &length[0]
    o = &out[0]
    with nogil:
        for i in range(n):
            j = i + PREFETCH_AHEAD
            if j < n:
                # the packet's first line and the line of the last byte the
                # hash can need (VLAN tag + IPv6 + ports: 62 bytes); rows
                # are not line-aligned (numpy's buffer starts 16 bytes into a
                # page), so the headers often straddle two lines
                s = st[j]
                ln = lp[j]
                if s >= 0 and ln > 0 and ln <= slot - s:
                    fp_rss_prefetch(base + j * slot + s)
                    fp_rss_prefetch(base + j * slot + s + (ln if ln < MAX_HDR else MAX_HDR) - 1)
            s = st[i]
            ln = lp[i]
            if s < 0 or ln < 0 or ln > slot - s:
                o[i] = 0
            elif FP_RSS_DEBUG_BUILD:
                # Debug build: hash from a heap copy that ends exactly where
                # the packet ends (AddressSanitizer reports any read past it).
                buf = <uint8_t*>malloc(ln if ln > 0 else 1)
                if buf == NULL:
                    with gil:
                        raise MemoryError()
                if ln > 0:
                    memcpy(buf, base + i * slot + s, ln)
                o[i] = rss_hash(t, buf, ln, linktype, ports, udp)
                free(buf)
            else:
                o[i] = rss_hash(t, base + i * slot + s, ln, linktype, ports, udp)


def hash_bytes(const uint8_t[::1] packet not None, int linktype,
               const uint32_t[:, ::1] table not None, bint ports=True, bint udp=True):
    """The RSS hash of one packet (a contiguous bytes-like object)."""
    if table.shape[0] != TABLE_ROWS or table.shape[1] != 256:
        raise ValueError("table must be uint32[40, 256]")
    if linktype != LINK_RAW and linktype != LINK_ETHERNET:
        raise ValueError("unknown link type")
    if packet.shape[0] == 0:
        return 0
    if packet.shape[0] > 0x7FFFFFFF:
        raise ValueError("packet too large")
    return rss_hash(&table[0, 0], &packet[0], <int32_t>packet.shape[0], linktype, ports, udp)


# ---------------------------------------------------------------------------
# The handoff of fastpath.Dataplane.process: each worker copies its packets,
# whole rows, from the batch into its io segment and back.  Why compiled: numpy's
# ``take(data, idx, axis=0)`` costs ~35 ns per 320-byte row and the fancy
# assignment back ~17 (10 for a 16-byte nexthop row), several times a
# memcpy of the row (measured on the 2-vCPU dev VM, 2048 rows of 4096): at
# 4M packets/s the copies alone took a third of the time.

cdef inline int _check_indexes(const int64_t[::1] idx, Py_ssize_t n, Py_ssize_t nidx) except -1:
    """Each of the first ``n`` indexes in 0..nidx-1."""
    cdef Py_ssize_t k
    for k in range(n):
        if idx[k] < 0 or idx[k] >= nidx:
            raise ValueError(f"row index {idx[k]} out of range")
    return 0


cdef inline int _check_move(Py_ssize_t nsrc, Py_ssize_t ndst, Py_ssize_t wsrc, Py_ssize_t wdst,
                            const int64_t[::1] idx, Py_ssize_t nidx) except -1:
    if wsrc != wdst:
        raise ValueError("rows differ in width")
    if ndst < idx.shape[0]:
        raise ValueError("fewer rows than indexes")
    return _check_indexes(idx, idx.shape[0], nidx)


def take_rows(const uint8_t[:, ::1] src not None, const int64_t[::1] idx not None,
              uint8_t[:, ::1] dst not None):
    """``dst[k] = src[idx[k]]`` for every k (whole rows)."""
    cdef Py_ssize_t k, n = idx.shape[0], w = src.shape[1]
    _check_move(src.shape[0], dst.shape[0], src.shape[1], dst.shape[1], idx, src.shape[0])
    if n == 0 or w == 0:
        return
    with nogil:
        for k in range(n):
            memcpy(&dst[k, 0], &src[idx[k], 0], w)


def put_rows(const uint8_t[:, ::1] src not None, const int64_t[::1] idx not None,
             uint8_t[:, ::1] dst not None):
    """``dst[idx[k]] = src[k]`` for every k (whole rows)."""
    cdef Py_ssize_t k, n = idx.shape[0], w = src.shape[1]
    _check_move(dst.shape[0], src.shape[0], src.shape[1], dst.shape[1], idx, dst.shape[0])
    if n == 0 or w == 0:
        return
    with nogil:
        for k in range(n):
            memcpy(&dst[idx[k], 0], &src[k, 0], w)


cdef inline int _check_spans(const int32_t[::1] start, const int32_t[::1] length,
                             Py_ssize_t n, Py_ssize_t w) except -1:
    cdef Py_ssize_t k
    if start.shape[0] < n or length.shape[0] < n:
        raise ValueError("start/length shorter than the indexes")
    for k in range(n):
        if start[k] < 0 or length[k] < 0 or <Py_ssize_t>start[k] + length[k] > w:
            raise ValueError(f"packet {k} lies outside its row")
    return 0


# The fields of a worker's rows (start, length, l2len, iif, timestamp_ns
# in; start, length, l2len, oif, verdict, reason, dst back), all of them in
# one call: with RSS spreading a batch, a worker's rows are not a run, and
# numpy's take / fancy assignment cost ~2-5 us per field per 2048 rows,
# 24 us in and ~20 back per batch of a worker (measured 2026-12-07).

cdef int _field_buffers(tuple src, tuple dst, Py_buffer* bs, Py_buffer* bd, char* have,
                        Py_ssize_t nf) except -1:
    """Every field's buffers (``have[f]`` / ``have[nf + f]`` set for each one
    held, for _release), checked: 1-D, C-contiguous, one item size."""
    cdef Py_ssize_t f
    for f in range(nf):
        PyObject_GetBuffer(src[f], &bs[f], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
        have[f] = 1
        PyObject_GetBuffer(dst[f], &bd[f], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE)
        have[nf + f] = 1
        if (bs[f].ndim != 1 or bd[f].ndim != 1 or bs[f].itemsize != bd[f].itemsize
                or bs[f].itemsize not in (1, 2, 4, 8)):
            raise ValueError(f"field {f}: 1-D arrays of one item size (1, 2, 4 or 8 bytes) needed")
    return 0


cdef void _release(Py_buffer* bs, Py_buffer* bd, const char* have, Py_ssize_t nf) noexcept:
    cdef Py_ssize_t f
    for f in range(nf):
        if have[f]:
            PyBuffer_Release(&bs[f])
        if have[nf + f]:
            PyBuffer_Release(&bd[f])


cdef inline void _move(char* d, const char* s, Py_ssize_t size) noexcept nogil:
    if size == 4:
        (<uint32_t*>d)[0] = (<const uint32_t*>s)[0]
    elif size == 8:
        (<int64_t*>d)[0] = (<const int64_t*>s)[0]
    elif size == 2:
        (<uint16_t*>d)[0] = (<const uint16_t*>s)[0]
    else:
        d[0] = s[0]


def move_fields(tuple src not None, tuple dst not None, const int64_t[::1] idx not None,
                Py_ssize_t n, bint gather):
    """For each pair (``src[f]``, ``dst[f]``) of 1-D arrays of one item
    size, for k < ``n``: ``dst[f][k] = src[f][idx[k]]`` (``gather``) or
    ``dst[f][idx[k]] = src[f][k]``.  Every index and length is checked
    first; nothing is written unless all of it fits."""
    cdef Py_ssize_t nf = len(src), f, k, z, lim, m
    cdef Py_buffer* bs
    cdef Py_buffer* bd
    cdef char* have
    cdef char* d
    cdef const char* s
    if len(dst) != nf:
        raise ValueError("src and dst hold different numbers of fields")
    if n < 0 or n > idx.shape[0]:
        raise ValueError("n out of range")
    if nf == 0 or n == 0:
        return
    bs = <Py_buffer*>malloc(nf * sizeof(Py_buffer))
    bd = <Py_buffer*>malloc(nf * sizeof(Py_buffer))
    have = <char*>calloc(2 * nf, 1)
    if bs == NULL or bd == NULL or have == NULL:
        free(bs)
        free(bd)
        free(have)
        raise MemoryError()
    try:
        _field_buffers(src, dst, bs, bd, have, nf)
        lim = 0x7FFFFFFFFFFFFFFF
        m = lim
        for f in range(nf):
            z = bs[f].itemsize
            # the indexed side must hold every index, the other n items
            if gather:
                lim = min(lim, bs[f].len // z)
                m = min(m, bd[f].len // z)
            else:
                lim = min(lim, bd[f].len // z)
                m = min(m, bs[f].len // z)
        if m < n:
            raise ValueError("a field is shorter than n")
        _check_indexes(idx, n, lim)
        with nogil:
            for f in range(nf):
                z = bs[f].itemsize
                s = <const char*>bs[f].buf
                d = <char*>bd[f].buf
                if gather:
                    for k in range(n):
                        _move(d + k * z, s + idx[k] * z, z)
                else:
                    for k in range(n):
                        _move(d + idx[k] * z, s + k * z, z)
    finally:
        _release(bs, bd, have, nf)
        free(bs)
        free(bd)
        free(have)


def take_spans(const uint8_t[:, ::1] src not None, const int64_t[::1] idx not None,
               const int32_t[::1] start not None, const int32_t[::1] length not None,
               uint8_t[:, ::1] dst not None):
    """``dst[k, s:s + l] = src[idx[k], s:s + l]`` with s = ``start[k]``,
    l = ``length[k]``: the packets only, where take_rows copies whole rows
    (a 94-byte End frame in a 320-byte slot: a third of the bytes).  The
    rest of ``dst``'s rows is left as it was."""
    cdef Py_ssize_t k, n = idx.shape[0], w = src.shape[1]
    _check_move(src.shape[0], dst.shape[0], src.shape[1], dst.shape[1], idx, src.shape[0])
    _check_spans(start, length, n, w)
    if n == 0 or w == 0:
        return
    with nogil:
        for k in range(n):
            if length[k]:
                memcpy(&dst[k, start[k]], &src[idx[k], start[k]], length[k])


def put_spans(const uint8_t[:, ::1] src not None, const int64_t[::1] idx not None,
              const int32_t[::1] start not None, const int32_t[::1] length not None,
              uint8_t[:, ::1] dst not None):
    """``dst[idx[k], s:s + l] = src[k, s:s + l]`` (s, l = ``start[k]``,
    ``length[k]``): the packets back, the rest of ``dst``'s rows untouched."""
    cdef Py_ssize_t k, n = idx.shape[0], w = src.shape[1]
    _check_move(dst.shape[0], src.shape[0], src.shape[1], dst.shape[1], idx, dst.shape[0])
    _check_spans(start, length, n, w)
    if n == 0 or w == 0:
        return
    with nogil:
        for k in range(n):
            if length[k]:
                memcpy(&dst[idx[k], start[k]], &src[k, start[k]], length[k])


def own_rows(const uint16_t[::1] owner not None, uint16_t w, int64_t[::1] rows not None):
    """``rows[:m]`` = the indexes i where ``owner[i] == w``, in order; returns m."""
    cdef Py_ssize_t n = owner.shape[0], i, m = 0, cap = rows.shape[0]
    with nogil:
        for i in range(n):
            if owner[i] == w:
                if m == cap:
                    with gil:
                        raise ValueError("own_rows: more rows than room")
                rows[m] = i
                m += 1
    return m

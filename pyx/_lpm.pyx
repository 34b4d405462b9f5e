# Compiled longest-prefix-match tables for IPv4 and IPv6 (``fastpath._lpm``).
#
# Why this algorithm: DIR-24-8 as DPDK rte_lpm / rte_lpm6.  A first stride of
# 24 bits (tbl24, 2^24 uint32, calloc'ed so untouched pages cost nothing) then
# 8-bit strides of 256-entry groups.  An IPv4 lookup is one memory read (two
# for the rare prefixes longer than /24); an IPv6 lookup is one read per 8 bits
# past /24 of the matching prefix (2 reads for a /32, 6 for a /64), with no
# pointer chasing through per-node objects and no hashing.  Updates write the
# expanded entries directly (prefix expansion), keeping per entry the depth of
# the prefix that wrote it, so that more-specifics survive the add of a
# shorter prefix and a delete knows which entries to hand to the covering
# route; groups are collapsed again when a delete leaves them uniform.
#
# Measured (batch lookup, median of 7 runs over a 4M/10M-address batch, on the
# noisy 2-core Xeon VM of the dev container, -O3, no -march=native):
#   IPv6, 1k random routes /32../64, addresses inside them: 5.5 ns/address
#        (16 addresses walked in lock step; BLK6 = 8 or 32: ~7 ns; the plain
#        per-address lpm6_lookup of lpm.pxd: ~17 ns, branch mispredictions on
#        the chain length)
#   IPv4, 1M random prefixes (53% /24), random addresses: 5.7..6.9 ns/address
#        (bounded by memory: a plain numpy gather tbl24[a >> 8] takes ~13 ns;
#        prefetching 64 addresses ahead brings it from ~8 to ~6 ns)
#   add_many of those 1M IPv4 prefixes: 0.4..0.6 s; nbytes 114 MiB (tbl24 64,
#   groups 32, prefix hash 18), process RSS growth ~136 MiB.
#   Single add / delete from Python: ~3 us.
#   (IPv4 prefix lengths: /24 53%, /16../23 43%, /8../15 1%, /25../32 3%.)
#
# Layout and entry encoding: see lpm.pxd.  All state lives in numpy arrays that
# hold only indices (tbl24, groups, free_stack, meta, and the installed-prefix
# hash hkeys/hdepth/hvals/dcount), so the tables can later be placed in shared
# memory.  Growing an array needs numpy and thus the GIL: the nogil update
# loops never grow anything; they check beforehand that enough free groups and
# hash slots are available and return when they are not; LpmCore grows the
# arrays (doubling, copy) and resumes.
#
# The installed prefixes (needed for exact-match get, and to find the covering
# route that replaces a deleted prefix) are kept in an open-addressing hash
# (linear probing, backward-shift deletion, load <= 1/2) over numpy arrays
# rather than in Python dicts: 1M prefixes in dicts of Python ints cost ~100 MB
# and most of the add_many time.

from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memset, memcpy

import numpy as np

cimport lpm
from lpm cimport (LPM_VALUE_MASK, LPM_DEPTH_SHIFT, LPM_DEPTH_MASK, LPM_EXT,
                  LPM_TBL24_SIZE, LPM_GROUP_SIZE, LPM_MAX_VALUE,
                  lpm_entry, lpm_entry_value, lpm_entry_depth,
                  lpm4_lookup, lpm6_lookup)

cdef extern from *:
    """
    #if defined(__GNUC__)
    #define fp_lpm_prefetch(p) __builtin_prefetch((const void*)(p), 0, 3)
    #else
    #define fp_lpm_prefetch(p) ((void)(p))
    #endif
    """
    void fp_lpm_prefetch(const void* p) noexcept nogil

# Every store into tbl24 or a group that a reader may see (a Dataplane's
# workers read these arrays in shared memory while the control plane
# updates them) is one aligned 32-bit store with release ordering: the
# compiler may neither split it nor move the stores before it (a new
# group's contents) after it.  On x86 this is a plain mov.
cdef extern from *:
    """
    #define fp_lpm_store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
    """
    void fp_lpm_store(uint32_t* p, uint32_t v) noexcept nogil

# Python-visible copies of the encoding constants.
VALUE_MASK = LPM_VALUE_MASK
DEPTH_SHIFT = LPM_DEPTH_SHIFT
DEPTH_MASK = LPM_DEPTH_MASK
EXT = LPM_EXT
TBL24_SIZE = LPM_TBL24_SIZE
GROUP_SIZE = LPM_GROUP_SIZE
MAX_VALUE = LPM_MAX_VALUE
MAX_GROUPS = LPM_VALUE_MASK + 1      # group indices are 23 bits

cdef enum:
    # meta array (uint32[META_SIZE]) slots
    M_CAP = 0         # rows of ``groups`` (group capacity, row 0 included)
    M_HWM = 1         # next never-used group index (starts at 1: group 0 unused)
    M_NFREE = 2       # number of group indices on ``free_stack``
    M_HCAP = 3        # slots of the prefix hash (power of 2)
    M_HCOUNT = 4      # installed prefixes
    M_NLIMBO = 5      # groups freed while deferring (``limbo``), not yet reusable
    M_SIZE = 8
    MAXLEVELS = 13    # IPv6 group levels: bytes 3..15
    MAX_HASH_CAP = 1 << 30

META_CAP = M_CAP
META_HWM = M_HWM
META_NFREE = M_NFREE
META_HCAP = M_HCAP
META_HCOUNT = M_HCOUNT
META_NLIMBO = M_NLIMBO
META_SIZE = M_SIZE


cdef struct lpm_state:
    uint32_t* tbl24
    uint32_t* groups       # [cap * 256]
    uint32_t* meta
    uint32_t* free_stack   # [cap]
    uint32_t* limbo        # [cap]: freed groups a reader may still be in
    bint defer             # frees go to ``limbo`` (readers in other processes)
    uint32_t* hkeys        # [hcap * kw]: prefix address, kw big-endian words
    uint8_t* hdepth        # [hcap]
    uint32_t* hvals        # [hcap], 0 = empty slot
    uint32_t* dcount       # [maxdepth + 1]: installed prefixes per depth
    uint32_t kw            # words per address: 1 (IPv4) or 4 (IPv6)


cdef struct pkey:
    uint8_t b[16]          # network-order bytes, host bits cleared, zero padded
    uint32_t w[4]          # the same as big-endian words


# ----------------------------------------------------------------------------
# group allocation


cdef inline uint32_t _avail(const lpm_state* s) noexcept nogil:
    return s.meta[M_CAP] - s.meta[M_HWM] + s.meta[M_NFREE]


cdef inline uint32_t _alloc(lpm_state* s) noexcept nogil:
    cdef uint32_t g
    if s.meta[M_NFREE] > 0:
        s.meta[M_NFREE] -= 1
        return s.free_stack[s.meta[M_NFREE]]
    if s.meta[M_HWM] < s.meta[M_CAP]:
        g = s.meta[M_HWM]
        s.meta[M_HWM] += 1
        return g
    return 0


cdef inline void _free(lpm_state* s, uint32_t g) noexcept nogil:
    # The group keeps its (uniform) contents, so a concurrent reader that
    # already followed the old EXT entry still gets the right answer.  With
    # readers elsewhere (``defer``) it must not be reused until they have
    # all passed a quiescent state: it waits in limbo until
    # LpmCore.release_deferred(), called after a grace period (as
    # rte_lpm's RTE_LPM_QSBR_MODE_DQ defers tbl8 group frees).
    if s.defer:
        s.limbo[s.meta[M_NLIMBO]] = g
        s.meta[M_NLIMBO] += 1
        return
    s.free_stack[s.meta[M_NFREE]] = g
    s.meta[M_NFREE] += 1


cdef inline uint32_t _levels_needed(int depth) noexcept nogil:
    """Upper bound of the groups one add of this depth may allocate."""
    if depth <= 24:
        return 0
    return <uint32_t>((depth - 24 + 7) >> 3)


# ----------------------------------------------------------------------------
# add


cdef void _fill_range(lpm_state* s, uint32_t* p, uint32_t n, uint32_t new,
                      uint32_t depth) noexcept nogil:
    """Write ``new`` over the entries of p[0:n] with stored depth <= depth,
    recursing into groups (entries with a longer depth are more specifics)."""
    cdef uint32_t j, e
    for j in range(n):
        e = p[j]
        if e & LPM_EXT:
            _fill_range(s, s.groups + (<size_t>(e & LPM_VALUE_MASK) << 8),
                        LPM_GROUP_SIZE, new, depth)
        elif lpm_entry_depth(e) <= depth:
            fp_lpm_store(&p[j], new)


cdef int _add(lpm_state* s, const uint8_t* key, uint32_t depth,
              uint32_t value) noexcept nogil:
    """Insert or replace key/depth -> value.  key: 16 bytes (IPv4: 4 bytes,
    rest ignored), host bits ignored.  Returns 0, or -1 (nothing changed) when
    fewer free groups than needed are available."""
    cdef uint32_t new = lpm_entry(value, depth)
    cdef uint32_t idx, n, e, g, off, rem, start, i, j
    cdef uint32_t* ent
    cdef uint32_t* base
    idx = (<uint32_t>key[0] << 16) | (<uint32_t>key[1] << 8) | key[2]
    if depth <= 24:
        n = 1u << (24 - depth)
        _fill_range(s, s.tbl24 + (idx & ~(n - 1)), n, new, depth)
        return 0
    if _avail(s) < _levels_needed(depth):
        return -1
    ent = s.tbl24 + idx
    off = 24
    i = 3
    while True:
        e = ent[0]
        if not (e & LPM_EXT):
            # expand the entry into a group pre-filled with it; the group is
            # complete before the EXT entry that publishes it is written
            g = _alloc(s)
            if g == 0:          # cannot happen after the _avail check
                return -1
            base = s.groups + (<size_t>g << 8)
            for j in range(LPM_GROUP_SIZE):
                base[j] = e
            e = LPM_EXT | g
            fp_lpm_store(ent, e)          # publishes the complete group
        base = s.groups + (<size_t>(e & LPM_VALUE_MASK) << 8)
        rem = depth - off
        if rem <= 8:
            n = 1u << (8 - rem)
            start = key[i] & ~(n - 1)
            _fill_range(s, base + start, n, new, depth)
            return 0
        ent = base + key[i]
        off += 8
        i += 1


# ----------------------------------------------------------------------------
# delete


cdef inline bint _uniform(const uint32_t* base, uint32_t off) noexcept nogil:
    """True when a group (whose parent entry stands for a prefix of length
    ``off``) can be replaced by its entry 0: all 256 entries identical,
    non-EXT, written by a prefix at most ``off`` long."""
    cdef uint32_t e0 = base[0]
    cdef uint32_t j
    if (e0 & LPM_EXT) or lpm_entry_depth(e0) > off:
        return False
    for j in range(1, LPM_GROUP_SIZE):
        if base[j] != e0:
            return False
    return True


cdef void _del_range(lpm_state* s, uint32_t* p, uint32_t n, uint32_t depth,
                     uint32_t repl, uint32_t child_off) noexcept nogil:
    """Replace the entries of p[0:n] written at ``depth`` by ``repl``,
    recursing into groups (whose parent entries stand for prefixes of length
    ``child_off``) and collapsing those that become uniform."""
    cdef uint32_t j, e, g
    cdef uint32_t* base
    for j in range(n):
        e = p[j]
        if e & LPM_EXT:
            g = e & LPM_VALUE_MASK
            base = s.groups + (<size_t>g << 8)
            _del_range(s, base, LPM_GROUP_SIZE, depth, repl, child_off + 8)
            if _uniform(base, child_off):
                fp_lpm_store(&p[j], base[0])
                _free(s, g)
        elif lpm_entry_depth(e) == depth:
            fp_lpm_store(&p[j], repl)


cdef void _delete(lpm_state* s, const uint8_t* key, uint32_t depth,
                  uint32_t cover) noexcept nogil:
    """Remove key/depth: its entries get ``cover`` (the entry of the covering
    route, 0 for none).  Groups left uniform are freed."""
    cdef uint32_t idx, n, e, g, off, rem, start, i, lvl
    cdef uint32_t* ent
    cdef uint32_t* base
    cdef uint32_t* path_ent[MAXLEVELS]
    cdef uint32_t path_off[MAXLEVELS]
    idx = (<uint32_t>key[0] << 16) | (<uint32_t>key[1] << 8) | key[2]
    if depth <= 24:
        n = 1u << (24 - depth)
        _del_range(s, s.tbl24 + (idx & ~(n - 1)), n, depth, cover, 24)
        return
    ent = s.tbl24 + idx
    off = 24
    i = 3
    lvl = 0
    while True:
        e = ent[0]
        if not (e & LPM_EXT) or lvl >= MAXLEVELS:
            return              # not installed: nothing to do
        path_ent[lvl] = ent
        path_off[lvl] = off
        lvl += 1
        base = s.groups + (<size_t>(e & LPM_VALUE_MASK) << 8)
        rem = depth - off
        if rem <= 8:
            n = 1u << (8 - rem)
            start = key[i] & ~(n - 1)
            _del_range(s, base + start, n, depth, cover, off + 8)
            break
        ent = base + key[i]
        off += 8
        i += 1
    # collapse bottom-up along the path
    while lvl > 0:
        lvl -= 1
        ent = path_ent[lvl]
        g = ent[0] & LPM_VALUE_MASK
        base = s.groups + (<size_t>g << 8)
        if not _uniform(base, path_off[lvl]):
            break
        fp_lpm_store(ent, base[0])
        _free(s, g)



# ----------------------------------------------------------------------------
# keys and the installed-prefix hash


cdef inline uint32_t _be32(const uint8_t* p) noexcept nogil:
    return ((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
            | (<uint32_t>p[2] << 8) | p[3])


cdef inline void _mkkey(pkey* k, const uint8_t* src, uint32_t nbytes,
                        uint32_t depth) noexcept nogil:
    """Key of src/depth: host bits cleared."""
    cdef uint32_t j, bits
    for j in range(16):
        if j >= nbytes or depth <= 8 * j:
            k.b[j] = 0
        else:
            bits = depth - 8 * j
            k.b[j] = src[j] if bits >= 8 else src[j] & <uint8_t>(0xFF << (8 - bits))
    for j in range(4):
        k.w[j] = _be32(k.b + 4 * j)


cdef inline void _mkkey4(pkey* k, uint32_t addr, uint32_t depth) noexcept nogil:
    if depth < 32:
        addr = addr & ~(0xFFFFFFFFu >> depth) if depth else 0
    memset(k, 0, sizeof(pkey))
    k.w[0] = addr
    k.b[0] = (addr >> 24) & 0xFF
    k.b[1] = (addr >> 16) & 0xFF
    k.b[2] = (addr >> 8) & 0xFF
    k.b[3] = addr & 0xFF


cdef inline void _mask_words(const uint32_t* src, uint32_t* dst, uint32_t kw,
                             uint32_t depth) noexcept nogil:
    cdef uint32_t j, bits
    for j in range(kw):
        if depth <= 32 * j:
            dst[j] = 0
        else:
            bits = depth - 32 * j
            dst[j] = src[j] if bits >= 32 else src[j] & ~(0xFFFFFFFFu >> bits)


cdef inline uint64_t _mix64(uint64_t h) noexcept nogil:
    h ^= h >> 33
    h *= 0xFF51AFD7ED558CCDULL
    h ^= h >> 33
    h *= 0xC4CEB9FE1A85EC53ULL
    h ^= h >> 33
    return h


cdef inline uint64_t _phash(const uint32_t* w, uint32_t kw, uint32_t depth) noexcept nogil:
    cdef uint64_t h = depth + 0x9E3779B97F4A7C15ULL
    cdef uint32_t j
    for j in range(0, kw, 2):
        h = _mix64(h ^ ((<uint64_t>w[j] << 32) | (w[j + 1] if j + 1 < kw else 0)))
    return h


cdef inline bint _hfind(const lpm_state* s, const uint32_t* w, uint32_t depth,
                        uint32_t* slot) noexcept nogil:
    """Slot holding w/depth (True) or the empty slot where it goes (False)."""
    cdef uint32_t mask = s.meta[M_HCAP] - 1
    cdef uint32_t i = <uint32_t>_phash(w, s.kw, depth) & mask
    cdef uint32_t j
    cdef const uint32_t* kp
    while s.hvals[i] != 0:
        if s.hdepth[i] == depth:
            kp = s.hkeys + <size_t>i * s.kw
            for j in range(s.kw):
                if kp[j] != w[j]:
                    break
            else:
                slot[0] = i
                return True
        i = (i + 1) & mask
    slot[0] = i
    return False


cdef inline void _hput(lpm_state* s, uint32_t slot, const uint32_t* w,
                       uint32_t depth, uint32_t value) noexcept nogil:
    """Fill the empty ``slot`` (from _hfind)."""
    memcpy(s.hkeys + <size_t>slot * s.kw, w, s.kw * sizeof(uint32_t))
    s.hdepth[slot] = <uint8_t>depth
    s.hvals[slot] = value
    s.meta[M_HCOUNT] += 1
    s.dcount[depth] += 1


cdef void _hremove(lpm_state* s, uint32_t i) noexcept nogil:
    """Empty slot i (backward-shift deletion: no tombstones)."""
    cdef uint32_t mask = s.meta[M_HCAP] - 1
    cdef uint32_t j = i, home
    s.meta[M_HCOUNT] -= 1
    s.dcount[s.hdepth[i]] -= 1
    while True:
        j = (j + 1) & mask
        if s.hvals[j] == 0:
            break
        home = <uint32_t>_phash(s.hkeys + <size_t>j * s.kw, s.kw, s.hdepth[j]) & mask
        # the entry at j may move to i unless its home lies cyclically in (i, j]
        if (i < j and i < home <= j) or (i > j and (home > i or home <= j)):
            continue
        memcpy(s.hkeys + <size_t>i * s.kw, s.hkeys + <size_t>j * s.kw,
               s.kw * sizeof(uint32_t))
        s.hdepth[i] = s.hdepth[j]
        s.hvals[i] = s.hvals[j]
        i = j
    s.hvals[i] = 0
    s.hdepth[i] = 0
    memset(s.hkeys + <size_t>i * s.kw, 0, s.kw * sizeof(uint32_t))


cdef uint32_t _cover(const lpm_state* s, const uint32_t* w, uint32_t depth) noexcept nogil:
    """Entry (value, depth) of the longest installed prefix strictly shorter
    than w/depth that contains it; 0 when there is none."""
    cdef uint32_t cw[4]
    cdef uint32_t slot
    cdef int cd
    for cd in range(<int>depth - 1, -1, -1):
        if s.dcount[cd] == 0:
            continue
        _mask_words(w, cw, s.kw, cd)
        if _hfind(s, cw, cd, &slot):
            return lpm_entry(s.hvals[slot], cd)
    return 0


# ----------------------------------------------------------------------------
# operations on tables + hash (nogil; never grow anything)

cdef enum:
    NEED_GROUPS = -1
    NEED_SLOTS = -2


cdef inline int _room(const lpm_state* s, uint32_t depth) noexcept nogil:
    if _avail(s) < _levels_needed(depth):
        return NEED_GROUPS
    if (s.meta[M_HCOUNT] + 1) * 2 > s.meta[M_HCAP]:
        return NEED_SLOTS
    return 0


cdef inline int _op_add(lpm_state* s, const pkey* k, uint32_t depth,
                        uint32_t value, uint32_t* old) noexcept nogil:
    """Insert or replace; old value (0 if new) in ``old``.  Returns 0, or
    NEED_GROUPS / NEED_SLOTS (nothing changed)."""
    cdef uint32_t slot
    cdef int r = _room(s, depth)
    if r != 0:
        return r
    _add(s, k.b, depth, value)
    if _hfind(s, k.w, depth, &slot):
        old[0] = s.hvals[slot]
        s.hvals[slot] = value
    else:
        old[0] = 0
        _hput(s, slot, k.w, depth, value)
    return 0


cdef inline uint32_t _op_delete(lpm_state* s, const pkey* k, uint32_t depth) noexcept nogil:
    """Remove; returns the old value, 0 if not installed."""
    cdef uint32_t slot, old
    if not _hfind(s, k.w, depth, &slot):
        return 0
    old = s.hvals[slot]
    _hremove(s, slot)
    _delete(s, k.b, depth, _cover(s, k.w, depth))
    return old


# ----------------------------------------------------------------------------
# lookups

cdef enum:
    PF_DIST = 64      # IPv4 prefetch distance (addresses); measured best 32..128
    BLK6 = 16         # IPv6 lanes walked in lock step


cdef void _lookup4_batch(const uint32_t* tbl24, const uint32_t* groups,
                         const uint32_t* a, uint32_t* out,
                         Py_ssize_t n) noexcept nogil:
    # tbl24 is 64 MiB: random lookups miss the caches, so the entries are
    # prefetched PF_DIST addresses ahead (prefetcht0; prefetchnta was slower)
    cdef Py_ssize_t i
    for i in range(n - PF_DIST):
        fp_lpm_prefetch(tbl24 + (a[i + PF_DIST] >> 8))
        out[i] = lpm4_lookup(tbl24, groups, a[i])
    for i in range(max(n - PF_DIST, 0), n):
        out[i] = lpm4_lookup(tbl24, groups, a[i])


cdef void _lookup4b_batch(const uint32_t* tbl24, const uint32_t* groups,
                          const uint8_t* a, uint32_t* out,
                          Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n - PF_DIST):
        fp_lpm_prefetch(tbl24 + (_be32(a + (i + PF_DIST) * 4) >> 8))
        out[i] = lpm4_lookup(tbl24, groups, _be32(a + i * 4))
    for i in range(max(n - PF_DIST, 0), n):
        out[i] = lpm4_lookup(tbl24, groups, _be32(a + i * 4))


cdef void _lookup6_batch(const uint32_t* tbl24, const uint32_t* groups,
                         const uint8_t* a, uint32_t* out,
                         Py_ssize_t n) noexcept nogil:
    """BLK6 addresses are walked in lock step, branch-free per lane: a lane
    whose entry is final reads the (all-zero, never used) group 0 and keeps
    its entry, so the independent memory reads of the lanes overlap and the
    variable prefix lengths cause no branch mispredictions."""
    cdef Py_ssize_t i = 0, j
    cdef uint32_t e[BLK6]
    cdef uint32_t x, nx, ext, acc
    cdef unsigned int k
    cdef const uint8_t* p
    while i + BLK6 <= n:
        p = a + i * 16
        acc = 0
        for j in range(BLK6):
            x = tbl24[(<uint32_t>p[j * 16] << 16) | (<uint32_t>p[j * 16 + 1] << 8)
                      | p[j * 16 + 2]]
            e[j] = x
            acc |= x
        k = 3
        while (acc & LPM_EXT) and k < 16:
            acc = 0
            for j in range(BLK6):
                x = e[j]
                ext = 0u - (x >> 31)                      # all ones if EXT
                nx = groups[((<size_t>(x & LPM_VALUE_MASK & ext)) << 8) | p[j * 16 + k]]
                x = (nx & ext) | (x & ~ext)
                e[j] = x
                acc |= x
            k += 1
        for j in range(BLK6):
            x = e[j]
            out[i + j] = x & LPM_VALUE_MASK & ((x >> 31) - 1u)   # EXT left: corrupt, 0
        i += BLK6
    while i < n:
        out[i] = lpm6_lookup(tbl24, groups, a + i * 16)
        i += 1


# ----------------------------------------------------------------------------
# the table object


cdef class LpmCore:
    """Tables of one family and their update/lookup operations.

    Arguments are trusted to be well-formed beyond what the memoryview types
    check (fastpath.lpm.Lpm validates and parses); values must be
    1..MAX_VALUE.  The arrays are replaced (``generation`` += 1) when they
    grow.
    """
    cdef readonly int family
    cdef readonly int maxdepth
    cdef readonly object tbl24, groups, meta, free_stack, limbo
    cdef readonly object hkeys, hdepth, hvals, dcount
    cdef readonly unsigned long generation
    cdef readonly object alloc
    # set while readers elsewhere use the arrays and have not been told of
    # a new ``groups``: growing then is a bug (reserve() first), refused
    cdef public bint frozen
    cdef lpm_state s
    cdef bint busy

    def __cinit__(self, int family, Py_ssize_t groups_cap=64, Py_ssize_t hash_cap=64, alloc=None):
        """``alloc``: None, or ``alloc(shape, dtype)`` returning a zeroed
        C-contiguous array, for the two arrays readers use (``tbl24``,
        ``groups``): a Dataplane places them in shared memory this way."""
        if family != 4 and family != 6:
            raise ValueError("family must be 4 or 6")
        if groups_cap < 2 or groups_cap > MAX_GROUPS:
            raise ValueError("bad groups_cap")
        if hash_cap < 4 or hash_cap > MAX_HASH_CAP or (hash_cap & (hash_cap - 1)):
            raise ValueError("hash_cap must be a power of 2")
        self.family = family
        self.maxdepth = 32 if family == 4 else 128
        self.alloc = alloc
        kw = 1 if family == 4 else 4
        # zeroed: calloc (or a new shared segment), untouched pages of tbl24 cost nothing
        self.tbl24 = self._zeros((LPM_TBL24_SIZE,))
        self.groups = self._zeros((groups_cap, LPM_GROUP_SIZE))
        self.free_stack = np.zeros(groups_cap, dtype=np.uint32)
        self.limbo = np.zeros(groups_cap, dtype=np.uint32)
        self.meta = np.zeros(M_SIZE, dtype=np.uint32)
        self.hkeys = np.zeros((hash_cap, kw), dtype=np.uint32)
        self.hdepth = np.zeros(hash_cap, dtype=np.uint8)
        self.hvals = np.zeros(hash_cap, dtype=np.uint32)
        self.dcount = np.zeros(self.maxdepth + 1, dtype=np.uint32)
        self.meta[M_CAP] = groups_cap
        self.meta[M_HWM] = 1
        self.meta[M_HCAP] = hash_cap
        self.s.kw = kw
        self.s.defer = False
        self._bind()

    cdef _zeros(self, shape):
        if self.alloc is None:
            return np.zeros(shape, dtype=np.uint32)
        a = self.alloc(shape, np.uint32)
        if (not isinstance(a, np.ndarray) or a.dtype != np.uint32 or a.shape != tuple(shape)
                or not a.flags.c_contiguous or not a.flags.writeable):
            raise TypeError(f"alloc must return a writeable C-contiguous uint32 array of shape {shape}")
        return a

    cdef _bind(self):
        cdef uint32_t[::1] t = self.tbl24
        cdef uint32_t[:, ::1] g = self.groups
        cdef uint32_t[::1] m = self.meta
        cdef uint32_t[::1] f = self.free_stack
        cdef uint32_t[::1] lb = self.limbo
        cdef uint32_t[:, ::1] hk = self.hkeys
        cdef uint8_t[::1] hd = self.hdepth
        cdef uint32_t[::1] hv = self.hvals
        cdef uint32_t[::1] dc = self.dcount
        self.s.tbl24 = &t[0]
        self.s.groups = &g[0, 0]
        self.s.meta = &m[0]
        self.s.free_stack = &f[0]
        self.s.limbo = &lb[0]
        self.s.hkeys = &hk[0, 0]
        self.s.hdepth = &hd[0]
        self.s.hvals = &hv[0]
        self.s.dcount = &dc[0]

    # --- deferred reclamation (readers in other processes) ---------------

    @property
    def defer_free(self):
        """Whether freed groups wait in limbo for ``release_deferred``."""
        return bool(self.s.defer)

    @defer_free.setter
    def defer_free(self, bint on):
        if not on:
            self.release_deferred()
        self.s.defer = on

    @property
    def groups_deferred(self):
        """Groups freed but not yet reusable (in limbo)."""
        return self.s.meta[M_NLIMBO]

    def release_deferred(self):
        """Make the groups in limbo reusable: call only once no reader can
        still be inside one (after a grace period that began after they
        were freed).  Returns how many were released."""
        cdef uint32_t i, n = self.s.meta[M_NLIMBO]
        self._enter()
        try:
            for i in range(n):
                self.s.free_stack[self.s.meta[M_NFREE]] = self.s.limbo[i]
                self.s.meta[M_NFREE] += 1
            self.s.meta[M_NLIMBO] = 0
        finally:
            self.busy = False
        return n

    def groups_needed(self, depth):
        """Upper bound of the new groups one add of this depth may take."""
        if depth < 0 or depth > self.maxdepth:
            raise ValueError(f"prefix length must be in 0..{self.maxdepth}, not {depth}")
        return _levels_needed(depth)

    def reserve(self, Py_ssize_t n):
        """Grow ``groups`` now, if fewer than ``n`` free groups remain, so
        that adds needing at most ``n`` groups in all never replace the
        array.  Returns True when it grew (``groups`` is a new array)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        if _avail(&self.s) >= n:
            return False
        self._enter()
        try:
            self._grow_groups(n)
        finally:
            self.busy = False
        return True

    cdef _grow(self, int need, uint32_t depth):
        """Make room after _room() returned ``need``."""
        cdef Py_ssize_t cap, new
        cdef uint32_t i, slot, hcap
        cdef lpm_state ns
        cdef uint32_t[:, ::1] hk
        cdef uint8_t[::1] hd
        cdef uint32_t[::1] hv
        if need == NEED_GROUPS:
            self._grow_groups(_levels_needed(depth))
            return
        elif need == NEED_SLOTS:
            hcap = self.s.meta[M_HCAP]
            if 2 * <Py_ssize_t>hcap > MAX_HASH_CAP:
                raise MemoryError("LPM prefix set full")
            hkeys = np.zeros((2 * hcap, self.s.kw), dtype=np.uint32)
            hdepth = np.zeros(2 * hcap, dtype=np.uint8)
            hvals = np.zeros(2 * hcap, dtype=np.uint32)
            hk = hkeys
            hd = hdepth
            hv = hvals
            ns = self.s
            ns.hkeys = &hk[0, 0]
            ns.hdepth = &hd[0]
            ns.hvals = &hv[0]
            self.s.meta[M_HCAP] = 2 * hcap
            self.s.meta[M_HCOUNT] = 0
            memset(self.s.dcount, 0, (self.maxdepth + 1) * sizeof(uint32_t))
            # (with the GIL held: meta already gives the new capacity, so no
            # other thread may probe the hash until _bind() below)
            for i in range(hcap):
                if self.s.hvals[i] != 0:
                    _hfind(&ns, self.s.hkeys + <size_t>i * self.s.kw,
                           self.s.hdepth[i], &slot)
                    _hput(&ns, slot, self.s.hkeys + <size_t>i * self.s.kw,
                          self.s.hdepth[i], self.s.hvals[i])
            self.hkeys, self.hdepth, self.hvals = hkeys, hdepth, hvals
        self.generation += 1
        self._bind()

    cdef _grow_groups(self, Py_ssize_t want):
        """Room for ``want`` more groups: a new ``groups`` array (doubled at
        least; from ``alloc`` when given), the old one copied in."""
        cdef Py_ssize_t cap = self.s.meta[M_CAP]
        if self.frozen:
            raise RuntimeError("LPM groups full while frozen: reserve() before updates readers see")
        cdef Py_ssize_t new = min(max(2 * cap, cap - _avail(&self.s) + want), MAX_GROUPS)
        if new - cap + _avail(&self.s) < want:
            raise MemoryError(f"LPM table full ({MAX_GROUPS} groups)")
        groups = self._zeros((new, LPM_GROUP_SIZE))
        groups[:cap] = self.groups
        free_stack = np.zeros(new, dtype=np.uint32)
        free_stack[:cap] = self.free_stack
        limbo = np.zeros(new, dtype=np.uint32)
        limbo[:cap] = self.limbo
        self.groups, self.free_stack, self.limbo = groups, free_stack, limbo
        self.meta[M_CAP] = new
        self.generation += 1
        self._bind()

    cdef _enter(self):
        if self.busy:
            raise RuntimeError("LPM table is being updated by another thread")
        self.busy = True

    cdef _key(self, const uint8_t[::1] key, int depth, pkey* k):
        if depth < 0 or depth > self.maxdepth:
            raise ValueError(f"prefix length must be in 0..{self.maxdepth}, not {depth}")
        if key.shape[0] != self.maxdepth // 8:
            raise ValueError(f"IPv{self.family} key must be {self.maxdepth // 8} bytes")
        _mkkey(k, &key[0], key.shape[0], depth)

    # --- updates ------------------------------------------------------

    def add(self, const uint8_t[::1] key, int depth, uint32_t value):
        """Insert or replace key/depth -> value (key: 4/16 network-order
        bytes, host bits ignored).  Returns the old value, 0 if new."""
        cdef pkey k
        cdef uint32_t old = 0
        cdef int r
        self._key(key, depth, &k)
        if value == 0 or value > LPM_MAX_VALUE:
            raise ValueError(f"value must be in 1..{LPM_MAX_VALUE}")
        self._enter()
        try:
            while True:
                with nogil:
                    r = _op_add(&self.s, &k, <uint32_t>depth, value, &old)
                if r == 0:
                    return old
                self._grow(r, depth)
        finally:
            self.busy = False

    def delete(self, const uint8_t[::1] key, int depth):
        """Remove key/depth; its entries go to the covering prefix.  Returns
        the old value, 0 if it was not installed (nothing changed)."""
        cdef pkey k
        cdef uint32_t old
        self._key(key, depth, &k)
        self._enter()
        try:
            with nogil:
                old = _op_delete(&self.s, &k, <uint32_t>depth)
            return old
        finally:
            self.busy = False

    def get(self, const uint8_t[::1] key, int depth):
        """Exact-match value of key/depth, 0 if not installed."""
        cdef pkey k
        cdef uint32_t slot
        self._key(key, depth, &k)
        if _hfind(&self.s, k.w, depth, &slot):
            return self.s.hvals[slot]
        return 0

    def cover(self, const uint8_t[::1] key, int depth):
        """(value, depth) of the route that covers key/depth (the longest
        installed prefix strictly shorter containing it); (0, 0) if none."""
        cdef pkey k
        self._key(key, depth, &k)
        cdef uint32_t e = _cover(&self.s, k.w, depth)
        return lpm_entry_value(e), lpm_entry_depth(e)

    def add_many4(self, const uint32_t[::1] addrs, const uint8_t[::1] depths,
                  const uint32_t[::1] values):
        """Bulk insert, IPv4 host-order addresses (depths <= 32 and values
        1..MAX_VALUE must have been checked).  Returns the number of new
        prefixes."""
        cdef Py_ssize_t i = 0, n = addrs.shape[0]
        cdef Py_ssize_t added = 0
        cdef pkey k
        cdef uint32_t old
        cdef int r = 0
        if self.family != 4:
            raise TypeError("add_many4 on an IPv6 table")
        if depths.shape[0] != n or values.shape[0] != n:
            raise ValueError("addrs, depths and values differ in length")
        self._enter()
        try:
            while i < n:
                with nogil:
                    while i < n:
                        if depths[i] > 32 or values[i] == 0 or values[i] > LPM_MAX_VALUE:
                            r = 1
                            break
                        _mkkey4(&k, addrs[i], depths[i])
                        r = _op_add(&self.s, &k, depths[i], values[i], &old)
                        if r != 0:
                            break
                        added += old == 0
                        i += 1
                if r == 1:
                    raise ValueError(f"bad depth or value at index {i}")
                if i < n:
                    self._grow(r, depths[i])
        finally:
            self.busy = False
        return added

    def add_many6(self, const uint8_t[:, ::1] addrs, const uint8_t[::1] depths,
                  const uint32_t[::1] values):
        """Bulk insert, IPv6 uint8[N, 16]; see add_many4."""
        cdef Py_ssize_t i = 0, n = addrs.shape[0]
        cdef Py_ssize_t added = 0
        cdef pkey k
        cdef uint32_t old
        cdef int r = 0
        if self.family != 6:
            raise TypeError("add_many6 on an IPv4 table")
        if depths.shape[0] != n or values.shape[0] != n:
            raise ValueError("addrs, depths and values differ in length")
        if addrs.shape[1] != 16:
            raise ValueError("IPv6 addresses must be uint8[N, 16]")
        if n == 0:
            return 0
        self._enter()
        try:
            while i < n:
                with nogil:
                    while i < n:
                        if depths[i] > 128 or values[i] == 0 or values[i] > LPM_MAX_VALUE:
                            r = 1
                            break
                        _mkkey(&k, &addrs[i, 0], 16, depths[i])
                        r = _op_add(&self.s, &k, depths[i], values[i], &old)
                        if r != 0:
                            break
                        added += old == 0
                        i += 1
                if r == 1:
                    raise ValueError(f"bad depth or value at index {i}")
                if i < n:
                    self._grow(r, depths[i])
        finally:
            self.busy = False
        return added

    # --- state ----------------------------------------------------------

    def __len__(self):
        return self.s.meta[M_HCOUNT]

    @property
    def groups_in_use(self):
        return self.s.meta[M_HWM] - 1 - self.s.meta[M_NFREE] - self.s.meta[M_NLIMBO]

    def items(self):
        """(keys uint32[n, kw] big-endian words, depths uint8[n], values
        uint32[n]) of the installed prefixes, in hash order."""
        sel = np.flatnonzero(self.hvals)
        return self.hkeys[sel], self.hdepth[sel], self.hvals[sel]

    # --- lookups --------------------------------------------------------
    # (memoryviews taken from the current arrays at each call, so a growth
    # during a nogil lookup in another thread cannot free them under it)

    def lookup4(self, uint32_t addr):
        """Single IPv4 lookup (host-order address); 0 = miss."""
        cdef const uint32_t[::1] t = self.tbl24
        cdef const uint32_t[:, ::1] g = self.groups
        return lpm4_lookup(&t[0], &g[0, 0], addr)

    def lookup6(self, const uint8_t[::1] addr):
        """Single IPv6 lookup (16 network-order bytes); 0 = miss."""
        cdef const uint32_t[::1] t = self.tbl24
        cdef const uint32_t[:, ::1] g = self.groups
        if addr.shape[0] != 16:
            raise ValueError("IPv6 address must be 16 bytes")
        return lpm6_lookup(&t[0], &g[0, 0], &addr[0])

    def lookup4_batch(self, const uint32_t[::1] addrs, uint32_t[::1] out):
        """IPv4 batch lookup, host-order uint32 addresses."""
        cdef const uint32_t[::1] t = self.tbl24
        cdef const uint32_t[:, ::1] g = self.groups
        cdef Py_ssize_t n = addrs.shape[0]
        if out.shape[0] != n:
            raise ValueError("out must have one entry per address")
        if n == 0:
            return
        with nogil:
            _lookup4_batch(&t[0], &g[0, 0], &addrs[0], &out[0], n)

    def lookup4b_batch(self, const uint8_t[:, ::1] addrs, uint32_t[::1] out):
        """IPv4 batch lookup, uint8[N, 4] network-order addresses."""
        cdef const uint32_t[::1] t = self.tbl24
        cdef const uint32_t[:, ::1] g = self.groups
        cdef Py_ssize_t n = addrs.shape[0]
        if addrs.shape[1] != 4:
            raise ValueError("IPv4 byte addresses must be uint8[N, 4]")
        if out.shape[0] != n:
            raise ValueError("out must have one entry per address")
        if n == 0:
            return
        with nogil:
            _lookup4b_batch(&t[0], &g[0, 0], &addrs[0, 0], &out[0], n)

    def lookup6_batch(self, const uint8_t[:, ::1] addrs, uint32_t[::1] out):
        """IPv6 batch lookup, uint8[N, 16] network-order addresses."""
        cdef const uint32_t[::1] t = self.tbl24
        cdef const uint32_t[:, ::1] g = self.groups
        cdef Py_ssize_t n = addrs.shape[0]
        if addrs.shape[1] != 16:
            raise ValueError("IPv6 addresses must be uint8[N, 16]")
        if out.shape[0] != n:
            raise ValueError("out must have one entry per address")
        if n == 0:
            return
        with nogil:
            _lookup6_batch(&t[0], &g[0, 0], &addrs[0, 0], &out[0], n)

    def lookup6_batch_simple(self, const uint8_t[:, ::1] addrs, uint32_t[::1] out):
        """The same with the per-address ``lpm6_lookup`` of lpm.pxd (what the
        datapath uses per packet); for tests and benchmarks."""
        cdef const uint32_t[::1] t = self.tbl24
        cdef const uint32_t[:, ::1] g = self.groups
        cdef Py_ssize_t i, n = addrs.shape[0]
        if addrs.shape[1] != 16:
            raise ValueError("IPv6 addresses must be uint8[N, 16]")
        if out.shape[0] != n:
            raise ValueError("out must have one entry per address")
        if n == 0:
            return
        with nogil:
            for i in range(n):
                out[i] = lpm6_lookup(&t[0], &g[0, 0], &addrs[i, 0])

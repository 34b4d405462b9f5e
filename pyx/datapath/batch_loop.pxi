# The batch loop (as net/core/dev.c's receive loop, VPP's vector loop): a
# packet's path, fast or general, the release of its reference, the timing
# of the batch (jiffies) and its arrays.


cdef void process_one(ctx_t* c, pkt_t* p, bint fast) noexcept nogil:
    """The packet's path (the fast one when it can take the packet, and
    ``fast``: on, and not tracing), then the release of the reference it
    holds (the skb leaving: transmitted or freed)."""
    p.held = -1
    p.chk_dst = 0xFFFFFFFFu
    p.opt4.optlen = 0
    cdef int taken = fast_path(c, p) if fast else 0
    if taken == 0:
        process_path(c, p)
    elif taken == 1:
        c.fast_packets += 1
    if p.held >= 0:
        dst_release_pkt(c, p)
    if c.check_gen and p.chk_dst < c.ndst and c.dsts[p.chk_dst].gen != p.chk_gen:
        c.gen_violations += 1


cdef inline void pkt_reset(pkt_t* p) noexcept nogil:
    """A packet's state before its path starts."""
    p.verdict = V_PENDING
    p.reason = R_NONE
    p.oif = 0
    p.dst = 0xFFFFFFFFu
    p.has_known_nh = False
    p.l2_done = False
    p.depth = 0
    p.held = -1
    p.chk_dst = 0xFFFFFFFFu
    p.nencap = 0
    p.strict_oif = 0
    p.opt4.optlen = 0
    memset(p.nexthop, 0, 16)


cdef inline void l2_egress(const ctx_t* c, pkt_t* p) noexcept nogil:
    """The frame of a packet that leaves (forwarded, or an ICMP error)."""
    if p.verdict == V_FORWARD or p.verdict == V_ICMP:
        if p.l2_done:
            p.l2len = 0
        elif c.linktype == LINK_ETHERNET:
            l2_build(c, p)
        else:
            p.l2len = 0
        if p.verdict == V_FORWARD or p.verdict == V_ICMP:
            p.start = p.l3 - p.l2len
            p.length = p.l3len + p.l2len


cdef void process_path(ctx_t* c, pkt_t* p) noexcept nogil:
    cdef const fp_dev* idev
    pkt_reset(p)
    if p.start < 0 or p.length < 0 or p.start + p.length > c.slot:
        set_drop(p, R_TRUNCATED)
        return
    if not l2_parse(c, p):
        return
    p.l3 = p.start + p.l2len
    p.l3len = p.length - p.l2len
    idev = dev_get(c, p.iif)
    if idev == NULL or not (idev.flags & DEVF_UP):
        set_drop(p, R_INTERFACE_DOWN)
        return
    if p.l3len < 1:
        set_drop(p, R_TRUNCATED)
        return
    tr(c, T_INPUT, p.family, p.l3len, NULL)
    if p.family == 6:
        if (p.row[p.l3] >> 4) != 6:
            set_drop(p, R_NOT_IP)
            return
        ip6_input(c, p)
    else:
        if (p.row[p.l3] >> 4) != 4:
            set_drop(p, R_NOT_IP)
            return
        ip4_input(c, p)
    l2_egress(c, p)


cdef struct bat_t:                # a batch's arrays, as raw pointers (fastpath/batch.py)
    Py_ssize_t n
    int32_t slot                  # bytes per row of data
    int linktype
    uint8_t* base                 # data[0, 0]
    int32_t* start
    int32_t* length
    uint16_t* l2len
    uint32_t* iif
    uint32_t* oif
    uint8_t* nexthop              # 16 bytes per packet
    uint8_t* verdict
    uint16_t* reason
    uint32_t* dst
    int64_t* timestamp_ns         # or NULL


cdef inline int64_t ts_ns(const timespec* t) noexcept nogil:
    return <int64_t>t.tv_sec * 1000000000 + t.tv_nsec


cdef inline uint32_t jiffies_of(const timespec* t) noexcept nogil:
    """The kernel's tick at HZ=250 (4 ms), the clock of lazy __use flushes."""
    return <uint32_t>(<uint64_t>t.tv_sec * 250 + <uint64_t>t.tv_nsec // 4000000)


cdef inline void set_jiffies(ctx_t* c) noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    c.jiffies = jiffies_of(&now)


cdef Py_ssize_t run_batch(ctx_t* c, uint64_t* reasons, bat_t* b) noexcept nogil:
    """Every packet of the batch through process_one, results written back
    to the metadata arrays.  Returns the packets left for the IPv4
    fragmenter, or -1 when the debug build could not allocate."""
    cdef Py_ssize_t i, j, nfrag = 0
    cdef pkt_t p
    cdef int32_t slot = b.slot, exact
    cdef uint8_t* buf
    cdef pre_t pre[PRE_CHUNK]
    cdef bint ahead = False
    cdef pre_t* pnext = NULL              # the next packet's lookups ahead, or NULL
    cdef uint64_t misses = c.rcache_misses
    cdef Py_ssize_t chunk = 0             # first packet of the current chunk
    c.slot = slot
    c.linktype = b.linktype
    c.batch_ts = b.timestamp_ns
    cdef bint use_fast = c.fast and c.trace == NULL   # (neither changes during a batch)
    for i in range(b.n):
        if i % PRE_CHUNK == 0:
            use_flush(c)
            # Lookups ahead pay when they miss the route cache (random
            # destinations, large tables): their memory accesses then
            # overlap.  When the cache holds the destinations they only
            # add work, so a chunk looks ahead only if the last one missed
            # (one miss in eight packets or more).
            if i > 0:
                c.ahead = (c.rcache_misses - misses) * 8 >= <uint64_t>(i - chunk)
            misses = c.rcache_misses
            chunk = i
            ahead = c.ahead and use_fast
            pnext = pre if ahead else NULL
            if ahead:
                c.ahead_chunks += 1
                for j in range(i, min(i + PRE_CHUNK, b.n)):
                    prelookup(c, b.base + j * slot, b.start[j], b.length[j], b.iif[j], &pre[j - i])
                pre_second(c, pre, <int>(min(i + PRE_CHUNK, b.n) - i), b.iif + i)
        p.pre = pnext
        if pnext != NULL:
            pnext += 1
        p.row = b.base + i * slot
        p.index = i
        p.start = b.start[i]
        p.length = b.length[i]
        p.iif = b.iif[i]
        p.rcv_iif = p.iif
        if FP_DEBUG_BUILD and p.start >= 0 and p.length >= 0 and p.start + p.length <= slot:
            # Debug build: run the packet in a heap buffer that ends
            # exactly where the packet ends, so that any read past
            # its last byte hits malloc's redzone (built with
            # FASTPATH_ASAN=1, AddressSanitizer reports it).
            exact = p.start + p.length
            buf = <uint8_t*>malloc(exact if exact > 0 else 1)
            if buf == NULL:
                use_flush(c)
                return -1
            memcpy(buf, p.row, exact)
            p.row = buf
            c.slot = exact
            process_one(c, &p, use_fast)
            c.slot = slot
            memcpy(b.base + i * slot, buf, exact)
            free(buf)
        else:
            process_one(c, &p, use_fast)
        if not use_fast:                  # (tracing turns the fast path off)
            tr(c, T_VERDICT, p.verdict, p.reason, NULL)
        b.start[i] = p.start
        b.length[i] = p.length
        b.l2len[i] = p.l2len
        # a local packet's oif: the device it is delivered on (where the
        # host stack hands it to the kernel): the receiving one, or the VRF
        # device End.DT4/DT6/DT46 decapsulated it into
        b.oif[i] = p.iif if p.verdict == V_LOCAL else p.oif
        memcpy(b.nexthop + 16 * i, p.nexthop, 16)
        b.verdict[i] = p.verdict
        b.reason[i] = p.reason
        b.dst[i] = p.dst
        if p.reason < R_COUNT:
            reasons[p.reason] += 1
        if p.reason == R_FRAGMENTED:
            nfrag += 1
    use_flush(c)
    if b.n > 0:
        c.ahead = (c.rcache_misses - misses) * 8 >= <uint64_t>(b.n - chunk)
    c.batch_ts = NULL
    return nfrag

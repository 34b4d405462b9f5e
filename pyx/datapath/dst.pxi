# Route entries in use: net/core/dst.c and include/net/dst.h -- references
# (ip6_hold_safe, skb_dst_force, dst_release; refcount mode) and the
# __use/lastuse statistics (shared, or per worker and flushed once a tick).


cdef inline void note_route(const ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """check_gen: remember the packet's route and its generation."""
    if c.check_gen:
        p.chk_dst = rt
        p.chk_gen = c.dsts[rt].gen


cdef inline void dst_use(ctx_t* c, uint32_t rt) noexcept nogil:
    """``dst.__use++; dst.lastuse = jiffies`` of ip6_pol_route: on the shared
    route every lookup (USE_SHARED, the "before" of seeds/003), or on this
    worker's copy, flushed to the shared route at most once per tick
    (USE_LAZY, the "after")."""
    if rt >= DST_FIRST_ROUTE and rt < c.ndst:
        dst_use_route(c, rt)


cdef inline void dst_use_route(ctx_t* c, uint32_t rt) noexcept nogil:
    """dst_use() of a route entry (not a reserved one: DST_FIRST_ROUTE <= rt
    < ndst), as the fast path's unicast routes are."""
    cdef fp_dst* d = &c.dsts[rt]
    cdef fp_pcpu* pc
    if c.use_mode == USE_LAZY and rt < c.npcpu:
        pc = &c.pcpu[rt]
        pc.use += 1
        if pc.lastuse != c.jiffies:
            d.use += pc.use
            d.lastuse = c.jiffies
            pc.use = 0
            pc.lastuse = c.jiffies
    else:
        d.use += 1
        d.lastuse = c.jiffies


cdef inline void use_later(ctx_t* c, const pkt_t* p, uint32_t rt) noexcept nogil:
    """dst_use_route(), deferred to the end of the chunk (use_flush) for a
    packet whose routes were looked up ahead (random destinations over a
    large table): its route's per-worker copy, and the shared entry it is
    flushed to, are then cache misses, which overlap with each other there
    instead of stalling each packet.  Lazy statistics only (USE_LAZY: the
    shared line's contention of USE_SHARED stays per packet).  The result
    is the same at the end of the batch: a batch is one tick, and a route's
    count and last use do not depend on the order of its uses within one."""
    if p.pre != NULL and c.use_mode == USE_LAZY and rt < c.npcpu and c.nuse < USELOG:
        c.uselog[c.nuse] = rt
        c.nuse += 1
    else:
        dst_use_route(c, rt)


cdef void use_flush(ctx_t* c) noexcept nogil:
    """The use statistics use_later() deferred."""
    cdef uint32_t k, n = c.nuse
    cdef uint32_t rt
    for k in range(n):
        if k + 8 < n:
            rt = c.uselog[k + 8]
            fp_prefetch(&c.pcpu[rt])
            fp_prefetch(&c.dsts[rt])
        dst_use_route(c, c.uselog[k])
    c.nuse = 0


cdef inline void dst_release_pkt(ctx_t* c, pkt_t* p) noexcept nogil:
    """skb_dst_drop(): release the reference the packet holds, if any."""
    if p.held < 0:
        return
    if p.held_pcpu:
        fp_atomic_fetch_add32(&c.pcpu[p.held].refcnt, -1)
    else:
        fp_atomic_fetch_add32(&c.dsts[p.held].refcnt, -1)
    p.held = -1


cdef inline bint dst_hold_pkt(ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """Take a reference on ``rt`` for the packet (dropping the one it held,
    as skb_dst_drop + skb_dst_set).  IPv6 routes are held on this worker's
    copy (rt6_get_pcpu_route): the atomic stays on a private line; the
    shared entries (null, blackhole, prohibit, IPv4 input routes) are held
    on the one line every worker shares.  Fails, as dst_hold_safe /
    rcuref_get, when the entry is being freed (its count fell to zero)."""
    cdef fp_dst* d = &c.dsts[rt]
    cdef int32_t old
    dst_release_pkt(c, p)
    if rt < c.npcpu and ((rt >= DST_FIRST_ROUTE and d.family == 6)
                         or c.refmode == MODE_REFCOUNT_PRIVATE):
        if fp_atomic_load32(&d.refcnt) <= 0:
            return False
        fp_atomic_fetch_add32(&c.pcpu[rt].refcnt, 1)
        p.held_pcpu = True
    else:
        old = fp_atomic_fetch_add32(&d.refcnt, 1)
        if old <= 0:
            fp_atomic_fetch_add32(&d.refcnt, -1)
            return False
        p.held_pcpu = False
    p.held = <int32_t>rt
    return True


cdef inline void null_hold_put(ctx_t* c, uint32_t n) noexcept nogil:
    """fib6_rule_action: a table that misses hands out ip6_null_entry, held,
    and the rule walk puts it back before trying the next rule."""
    cdef uint32_t k
    cdef int32_t* cnt = &c.pcpu[DST_IP6_NULL].refcnt if c.refmode == MODE_REFCOUNT_PRIVATE \
        else &c.dsts[DST_IP6_NULL].refcnt
    for k in range(n):
        fp_atomic_fetch_add32(cnt, 1)
        fp_atomic_fetch_add32(cnt, -1)

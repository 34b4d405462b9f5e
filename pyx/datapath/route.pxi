# Route lookups: net/ipv6/route.c (ip6_route_input_lookup, ip6_pol_route,
# fib6_table_lookup with RT6_LOOKUP_F_IFACE, fib6_select_path), the per-worker
# route caches in front of the rule walk, net/ipv4/fib_semantics.c
# (fib_select_multipath) and the multipath flow hashes.


cdef inline uint32_t fib6_lookup(ctx_t* c, const uint8_t* daddr, const uint8_t* saddr,
                                 uint32_t iif, uint32_t* nmiss) noexcept nogil:
    """fib6_rule_lookup() (fib6_cached), then the found route's use
    statistics (dst_use)."""
    cdef uint32_t rt = fib6_cached(c, daddr, saddr, iif, nmiss)
    dst_use(c, rt)
    return rt


cdef inline uint32_t ip6_route_input_lookup(ctx_t* c, pkt_t* p, const uint8_t* daddr,
                                            const uint8_t* saddr, uint32_t* nmiss) noexcept nogil:
    """ip6_route_input_lookup(): fib6_lookup() from the packet's ingress
    device.  A destination that needs a strict interface is looked up on
    that device only (fib6_cached_as), and the packet remembers it for its
    multipath choice (p.strict_oif)."""
    p.strict_oif = p.iif if rt6_need_strict(daddr) else 0
    return fib6_lookup(c, daddr, saddr, p.iif, nmiss)


cdef inline uint32_t icmp6_route_lookup(ctx_t* c, const pkt_t* p, const uint8_t* daddr,
                                        const uint8_t* saddr, uint32_t* nmiss) noexcept nogil:
    """The route of an ICMPv6 error towards ``daddr`` (the offending
    packet's source), an output lookup from lo (icmpv6_route_lookup ->
    ip6_route_output).  A link-local destination needs a scope id: the
    error's flowi6_oif is the ingress device (icmp6_iif), and with
    RT6_LOOKUP_F_IFACE only routes through it match; another strict
    destination without an oif is not restricted (rt6_score_route: !oif)."""
    cdef uint32_t rt
    if rt6_need_strict(daddr):
        rt = fib6_walk(c, daddr, saddr, c.lo_ifindex, nmiss, NULL,
                       p.iif if in6_is_linklocal(daddr) else 0, -1)
        dst_use(c, rt)
        return rt
    return fib6_lookup(c, daddr, saddr, l3mdev_out(c, p.iif), nmiss)


cdef inline uint64_t in6_hash(const uint8_t* daddr) noexcept nogil:
    """Multiplicative (Fibonacci) hashing of an address's two halves: the
    top bits of a product depend on every bit of its operand."""
    cdef uint64_t a, b
    memcpy(&a, daddr, 8)
    memcpy(&b, daddr + 8, 8)
    return (a ^ (b * 0xC2B2AE3D27D4EB4FULL)) * 0x9E3779B97F4A7C15ULL


cdef inline rcache_t* rcache_bucket(const ctx_t* c, const uint8_t* daddr) noexcept nogil:
    """The route cache's pair of entries for a destination."""
    # two-way set associative: the pair (2k, 2k + 1), most recent first
    return &c.rcache[(in6_hash(daddr) >> (64 - RCACHE_BITS)) & ~(<uint64_t>1)]


cdef inline uint32_t table_route(const ctx_t* c, uint32_t v, uint32_t miss) noexcept nogil:
    """The route of a lookup in one table (End.T/DT4/DT6, vrftable): what the
    LPM found, or ``miss`` for no entry or a throw route."""
    return v if (v != 0 and v < c.ndst and c.dsts[v].type != RTN_THROW) else miss


cdef inline uint32_t lpm6_cached(ctx_t* c, int32_t slot, const uint8_t* daddr) noexcept nogil:
    """lpm6_lookup() in one table (End.T, End.DT6; ``slot`` valid), through a
    per-worker cache by table and destination: a hit returns what the
    lookup returned for these tables (two-way set associative by
    destination, emptied by a new table generation)."""
    cdef tcache_t* e = &c.tcache[(in6_hash(daddr) >> (64 - TCACHE_BITS)) & ~(<uint64_t>1)]
    cdef uint32_t v
    if e[0].gen == c.rcache_gen and e[0].slot == slot and eq16(e[0].daddr, daddr):
        return e[0].v
    if e[1].gen == c.rcache_gen and e[1].slot == slot and eq16(e[1].daddr, daddr):
        return e[1].v
    v = lpm6_lookup(c.lpm6[slot].tbl24, c.lpm6[slot].groups, daddr)
    e[1] = e[0]
    memcpy(e[0].daddr, daddr, 16)
    e[0].v = v
    e[0].slot = slot
    e[0].gen = c.rcache_gen
    return v


cdef inline bint rcache_get(const ctx_t* c, const rcache_t* e, const uint8_t* daddr,
                            uint32_t* v) noexcept nogil:
    if e[0].gen == c.rcache_gen and eq16(e[0].daddr, daddr):
        v[0] = e[0].dst
        return True
    if e[1].gen == c.rcache_gen and eq16(e[1].daddr, daddr):
        v[0] = e[1].dst
        return True
    return False


cdef inline void rcache_put(const ctx_t* c, rcache_t* e, const uint8_t* daddr, uint32_t rt,
                            uint32_t nmiss) noexcept nogil:
    e[1] = e[0]
    memcpy(e[0].daddr, daddr, 16)
    e[0].dst = (nmiss << 24) | rt
    e[0].gen = c.rcache_gen


cdef inline uint32_t fib6_cached(ctx_t* c, const uint8_t* daddr, const uint8_t* saddr,
                                 uint32_t iif, uint32_t* nmiss) noexcept nogil:
    """fib6_cached_as() as the packet's path is: tracing or not."""
    return fib6_cached_as(c, daddr, saddr, iif, nmiss, c.trace != NULL)


cdef inline uint32_t fib6_cached_as(ctx_t* c, const uint8_t* daddr, const uint8_t* saddr,
                                    uint32_t iif, uint32_t* nmiss, bint tracing) noexcept nogil:
    """fib6_rule_lookup(), through the per-worker route cache, leaving the
    route's statistics alone.

    While no IPv6 rule selects on source address or ingress interface, the
    result depends on the destination alone, so it is cached by destination
    (two-way set associative; a new table generation empties it).  The cache changes
    how fast, never what: a hit returns what the walk returned, and how many
    tables missed on the way (``nmiss``: each miss is a hold and a release
    of ip6_null_entry in refcount mode).  Traces walk the rules every time
    (``tracing``: the fast path, which never traces, says so once)."""
    cdef rcache_t* e
    cdef uint32_t rt, v
    if not c.rcache_on or tracing:
        c.rcache_misses += 1
        return fib6_walk(c, daddr, saddr, iif, nmiss, NULL, iif if rt6_need_strict(daddr) else 0, -1)
    e = rcache_bucket(c, daddr)
    if not rcache_get(c, e, daddr, &v):
        c.rcache_misses += 1
        if rt6_need_strict(daddr):
            # ip6_route_input_lookup(): on the ingress device only; the
            # answer depends on it, so it is never cached (and a strict
            # destination never hits: nothing puts one in the cache)
            return fib6_walk(c, daddr, saddr, iif, nmiss, NULL, iif, -1)
        rt = fib6_walk(c, daddr, saddr, iif, &v, NULL, 0, -1)
        rcache_put(c, e, daddr, rt, v)
        v = (v << 24) | rt
    nmiss[0] = v >> 24
    return v & 0xFFFFFF


cdef uint32_t fib6_table_strict(const ctx_t* c, int32_t slot, const uint8_t* daddr,
                                uint32_t dev) noexcept nogil:
    """fib6_table_lookup() with RT6_LOOKUP_F_IFACE: rt6_select() scores a
    route whose device is not ``dev`` RT6_NUD_FAIL_HARD, and fib6_backtrack()
    goes on to shorter prefixes, so the answer is the first route, longest
    prefix first and then by metric, through ``dev``.  Reject routes
    (blackhole, unreachable, prohibit, throw) live on lo and never match;
    Tables.strict6 holds the others, in that order.  0: none (the null
    entry)."""
    cdef uint32_t k
    cdef const fp_strict* e
    for k in range(c.nstrict6):
        e = &c.strict6[k]
        if e.slot == slot and e.oif == dev and prefix_match(daddr, e.prefix, e.plen):
            return e.dst
    return 0


cdef inline uint32_t fib4_cached(ctx_t* c, uint32_t daddr, uint32_t saddr,
                                 uint32_t iif) noexcept nogil:
    """fib4_lookup() through the per-worker IPv4 route cache: as fib6_cached,
    by destination while no IPv4 rule selects on source or iif (a hit
    returns what the walk returned), two-way set associative, emptied by a
    new table generation; traces walk the rules every time."""
    cdef rcache4_t* e
    cdef uint32_t rt
    if not c.rcache4_on or c.trace != NULL:
        return fib4_lookup(c, daddr, saddr, iif)
    e = &c.rcache4[((daddr * 0x9E3779B1u) >> (32 - RCACHE4_BITS)) & ~(<uint32_t>1)]
    if e[0].gen == c.rcache_gen and e[0].daddr == daddr:
        return e[0].dst
    if e[1].gen == c.rcache_gen and e[1].daddr == daddr:
        return e[1].dst
    c.rcache4_misses += 1
    rt = fib4_lookup(c, daddr, saddr, iif)
    e[1] = e[0]
    e[0].daddr = daddr
    e[0].dst = rt
    e[0].gen = c.rcache_gen
    return rt


cdef inline const fp_nh* dst_nexthop(const ctx_t* c, const fp_dst* d, uint32_t hash) noexcept nogil:
    """fib6_select_path / fib_select_multipath: hash-threshold over the
    nexthops' upper bounds (31-bit hash, as the kernel's)."""
    cdef uint32_t k, first = d.nh_first
    if d.nh_count == 0 or first + d.nh_count > c.nnh:
        return NULL
    if d.nh_count == 1:
        return &c.nhs[first]
    cdef int32_t h = <int32_t>(hash >> 1)
    for k in range(d.nh_count):
        if h <= c.nhs[first + k].upper_bound:
            return &c.nhs[first + k]
    return &c.nhs[first + d.nh_count - 1]


cdef inline const fp_nh* dst_nexthop_strict(const ctx_t* c, const fp_dst* d, uint32_t hash,
                                           uint32_t dev) noexcept nogil:
    """fib6_select_path() after a strict-interface lookup on ``dev``: the
    hash's nexthop if it is through ``dev`` (rt6_score_route() >= 0), else
    the one rt6_select() matched, the first through ``dev``."""
    cdef const fp_nh* nh = dst_nexthop(c, d, hash)
    cdef uint32_t k
    if nh == NULL or nh.oif == dev:
        return nh
    for k in range(d.nh_count):
        if c.nhs[d.nh_first + k].oif == dev:
            return &c.nhs[d.nh_first + k]
    return nh


cdef inline uint32_t flow_hash6(const uint8_t* ip6) noexcept nogil:
    """A deterministic L3 flow hash (saddr, daddr, flow label, next header).

    The kernel keys its multipath hash with a per-boot random seed, so no
    userspace model can reproduce its exact choice; this one is stable."""
    cdef uint32_t h = 0x9E3779B9u, k
    for k in range(8, 40, 4):
        h ^= rd32(ip6 + k)
        h *= 0x85EBCA6Bu
        h ^= h >> 13
    h ^= rd32(ip6) & 0xFFFFF
    h ^= <uint32_t>ip6[6] << 20
    h *= 0xC2B2AE35u
    h ^= h >> 16
    return h


cdef inline uint32_t flow_hash4(const uint8_t* ip4) noexcept nogil:
    """L3 hash of an IPv4 packet: source and destination (policy 0)."""
    cdef uint32_t h = 0x9E3779B9u
    h ^= rd32(ip4 + 12)
    h *= 0x85EBCA6Bu
    h ^= h >> 13
    h ^= rd32(ip4 + 16)
    h *= 0xC2B2AE35u
    h ^= h >> 16
    return h


cdef inline uint32_t mix_ports(uint32_t h, uint8_t proto, uint32_t ports) noexcept nogil:
    h ^= ports
    h *= 0x85EBCA6Bu
    h ^= proto
    h *= 0xC2B2AE35u
    h ^= h >> 15
    return h


cdef inline uint32_t mp_hash6(const ctx_t* c, const pkt_t* p) noexcept nogil:
    """The multipath hash of fib_multipath_hash_policy: 0 L3 (addresses,
    flow label, next header), 1 L4 (addresses, protocol, ports)."""
    cdef const uint8_t* ip6 = p.row + p.l3
    cdef uint8_t nh = ip6[6]
    if c.mp_policy6 == 1 and (nh == NEXTHDR_TCP or nh == NEXTHDR_UDP or nh == 132) \
            and p.l3len >= IP6_HLEN + 4:
        return mix_ports(flow_hash6(ip6) ^ (rd32(ip6) & 0xFFFFF), nh, rd32(ip6 + IP6_HLEN))
    return flow_hash6(ip6)


cdef inline uint32_t mp_hash4(const ctx_t* c, const pkt_t* p) noexcept nogil:
    cdef const uint8_t* ip4 = p.row + p.l3
    cdef int32_t ihl = (ip4[0] & 0x0F) << 2
    cdef uint8_t proto = ip4[9]
    if (c.mp_policy4 == 1 and (proto == NEXTHDR_TCP or proto == NEXTHDR_UDP or proto == 132)
            and (rd16(ip4 + 6) & 0x3FFF) == 0 and p.l3len >= ihl + 4):
        return mix_ports(flow_hash4(ip4), proto, rd32(ip4 + ihl))
    return flow_hash4(ip4)

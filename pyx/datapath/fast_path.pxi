# The fast path: the common IPv6 cases in one straight pass.
#
# As VPP's per-node fast paths, or DPDK's l3fwd next to a full stack: the
# packets most traffic is made of (IPv6 forwarded to a unicast route; End
# and End.X without flavors, SRH without TLVs; End.DX4/DT4/DX6/DT6 of a
# packet right after the outer header; all forwarded) are handled here with
# a fraction of the general path's work.  The fast path changes how fast,
# never what.  It decides nothing on its own: it only recognises a case
# whose every step the general path would take, and does those steps, with
# the same results and the same side effects (use statistics, references,
# counters).  Anything else -- an ICMP error due, a drop, a hop-by-hop
# header, TLVs, flavors, HMAC required, headends, a local route, nested
# SIDs -- goes to the general path with the packet and every counter as
# they were: from the start, or from its route once looked up.  Tracing
# always takes the general path.  tests/test_fastpath.py holds the two
# paths to the same bytes, metadata, counters, statistics and references
# over random packets at the fast path's edges.



cdef inline void fast_route(const ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """The route the packet leaves by (and its generation, for check_gen)."""
    p.dst = rt
    note_route(c, p, rt)


cdef inline bint fast_no_room(const ctx_t* c, const pkt_t* p, const adj_t* a) noexcept nogil:
    """The Ethernet header would not fit in front of the packet as it is
    (the general path then makes room, or drops)."""
    return p.l3 < 18 and c.linktype == LINK_ETHERNET and (p.l3 < 14 or p.has_vlan or a.vlan)


cdef inline const fp_nh* fast_nexthop6(const ctx_t* c, const pkt_t* p, const uint8_t* ip6,
                                       const fp_dst* d) noexcept nogil:
    """The checks of ip6_forward() for a unicast route ``d``: the nexthop the
    packet leaves by when all of them pass, else NULL (the general path
    then makes the error, or the drop)."""
    cdef const fp_nh* nh
    if d.mtu != 0 and <uint32_t>p.l3len > d.mtu:
        return NULL
    nh = dst_nexthop(c, d, mp_hash6(c, p) if d.nh_count > 1 else 0)
    if nh == NULL:
        return NULL
    return fast_via6(c, p, ip6, nh)


cdef inline const fp_nh* plain_nh(const ctx_t* c, uint32_t rt) noexcept nogil:
    """The nexthop of route ``rt`` from its fast-path word alone (Tables.dfast:
    a live IPv6 unicast route with one nexthop, no encap and no mtu metric,
    which fast_nexthop6() would check no further than fast_via6() does),
    without reading the entry; NULL when it has none (read it).  Only
    without references (noref): a reference reads the entry anyway."""
    cdef uint32_t f = c.dfast[rt] if c.refmode == MODE_NOREF else 0
    return &c.nhs[f - 1] if f != 0 and f <= c.nnh else NULL


cdef inline const fp_nh* fast_via6(const ctx_t* c, const pkt_t* p, const uint8_t* ip6,
                                   const fp_nh* nh) noexcept nogil:
    """The rest of fast_nexthop6(): the checks that depend on the packet and
    its nexthop; the device's are the nexthop's adjacency's, resolved at
    load."""
    cdef const adj_t* a
    if not c.fwd6 or ip6[7] <= 1:
        return NULL
    a = &c.adj[nh - c.nhs]
    if <uint32_t>p.l3len > a.mtu6:        # (0: no such device, down, an IPv4 gateway)
        return NULL
    # (multicast and loopback sources were refused before: by the receive
    # checks, or by fast_dx6 for a decapsulated packet)
    if nh.oif != p.iif and (in6_is_zero(ip6 + 8) or in6_is_linklocal(ip6 + 8)):
        return NULL
    if fast_no_room(c, p, a):
        return NULL
    return nh


cdef inline void fast_out6(const ctx_t* c, pkt_t* p, uint8_t* ip6, const fp_nh* nh,
                           const uint8_t* known, int32_t hint) noexcept nogil:
    """ip6_forward()'s end (hop limit, verdict, nexthop), then the frame as
    l2_build() makes it.  ``known``: the nexthop of a gateway-less route
    (End.X's, End.DX6's nh6), ``hint`` its neighbour entry (s6l_nb)."""
    cdef const uint8_t* via = nh.gw
    if not (nh.flags & NHF_GATEWAY):
        via = known if known != NULL else ip6 + 24
    ip6[7] -= 1
    p.verdict = V_FORWARD
    p.reason = R_NONE
    p.oif = nh.oif
    memcpy(p.nexthop, via, 16)
    fast_l2(c, p, nh, 6, via, hint)


cdef inline void fast_l2(const ctx_t* c, pkt_t* p, const fp_nh* nh, int family,
                         const uint8_t* via, int32_t hint) noexcept nogil:
    """The frame of a forwarded packet, as l2_build() makes it, from the
    nexthop's adjacency (room for it checked beforehand).  ``via``: the
    packet's nexthop address; ``hint``: the first neighbour entry for it
    on any device when known (-1 else), which is neigh_find()'s answer when
    it is on the nexthop's device."""
    cdef const adj_t* a = &c.adj[nh - c.nhs]
    cdef const uint8_t* mac
    cdef uint8_t* f
    cdef int32_t l2
    if c.linktype != LINK_ETHERNET:
        p.l2len = 0
        p.start = p.l3
        p.length = p.l3len
        return
    if a.vlan or p.has_vlan:
        l2 = 18
        f = p.row + p.l3 - 18
        wr16(f + 12, 0x8100)
        wr16(f + 14, a.tci if a.vlan else p.vlan_tci)
    else:
        l2 = 14
        f = p.row + p.l3 - 14
    memcpy(f, a.eth, 12)
    if not a.gw:
        # a connected route: the neighbour of the packet's own destination
        if hint >= 0 and c.neighs[hint].ifindex == nh.oif:
            mac = c.neighs[hint].mac
        else:
            mac = neigh_mac(c, nh.oif, family, via)
        if mac != NULL:
            memcpy(f, mac, 6)
    wr16(f + l2 - 2, 0x86DD if family == 6 else 0x0800)
    p.l2len = <uint16_t>l2
    p.start = p.l3 - l2
    p.length = p.l3len + l2


cdef inline bint fast_end(ctx_t* c, pkt_t* p, const fp_dev* idev, uint8_t* ip6, uint32_t rt,
                          const fp_dst* d, const fp_s6l* s) noexcept nogil:
    """End, or End.X without oif, without flavors: input_action_end(_x) ->
    seg6_lookup_any_nexthop -> ip6_forward, for an SRH first after the IPv6
    header, with SL > 0 and no TLVs (seg6_validate_srh then reduces to its
    length checks; no HMAC TLV, so only seg6_require_hmac > 0 fails it)."""
    cdef uint8_t* srh = ip6 + IP6_HLEN
    cdef int32_t srhlen
    cdef uint32_t sl, rt2, nmiss
    cdef const fp_dst* d2
    cdef const fp_nh* nh
    cdef const uint8_t* known = s.nh6 if s.action == S6_END_X else NULL
    cdef uint64_t old0, old1
    if ip6[6] != NEXTHDR_ROUTING or p.l3len < IP6_HLEN + 8 or idev.seg6_require_hmac > 0:
        return False
    srhlen = (<int32_t>srh[1] + 1) << 3
    sl = srh[3]
    if (srh[2] != 4 or sl == 0 or sl > <uint32_t>srh[4] + 1
            or srhlen != 8 + ((<int32_t>srh[4] + 1) << 4) or IP6_HLEN + srhlen > p.l3len):
        return False
    # a next segment (or nexthop) looked up on the ingress device only is
    # the general path's (by first byte: ::/8, fe00::/7)
    if <uint8_t>((known if known != NULL else srh + 8 + ((sl - 1) << 4))[0] + 2) <= 2:
        return False
    # advance (undone below if the general path must take the packet)
    memcpy(&old0, ip6 + 24, 8)
    memcpy(&old1, ip6 + 32, 8)
    srh[3] = <uint8_t>(sl - 1)
    memcpy(ip6 + 24, srh + 8 + ((sl - 1) << 4), 16)
    if p.pre != NULL and p.pre.k2 == (-2 if known != NULL else p.l3 + <int32_t>(IP6_HLEN + 8 + ((sl - 1) << 4))):
        rt2 = p.pre.rt2
        nmiss = p.pre.m2
    else:
        # keyed by the segment in the SRH (the same bytes as the new DA, not
        # read back through the store just made)
        rt2 = fib6_cached_as(c, known if known != NULL else srh + 8 + ((sl - 1) << 4), ip6 + 8, p.iif, &nmiss, False)
    nh = plain_nh(c, rt2)
    if nh != NULL:
        nh = fast_via6(c, p, ip6, nh)
    else:
        d2 = &c.dsts[rt2]
        if d2.type == RTN_UNICAST and d2.encap_type == ENCAP_NONE and not (d2.flags & DSTF_DEAD):
            nh = fast_nexthop6(c, p, ip6, d2)
    if nh != NULL and c.refmode != MODE_NOREF:
        # seg6_lookup_any_nexthop without RT6_LOOKUP_F_DST_NOREF
        if dst_hold_pkt(c, p, rt2):
            null_hold_put(c, nmiss)
        else:
            nh = NULL
    if nh == NULL:
        srh[3] = <uint8_t>sl
        memcpy(ip6 + 24, &old0, 8)
        memcpy(ip6 + 32, &old1, 8)
        return False
    dst_use_route(c, rt)
    use_later(c, p, rt2)
    fast_out6(c, p, ip6, nh, known, c.s6l_nb[d.encap])
    fast_route(c, p, rt2)
    s6l_count(c, d, s, 0, p.l3len)
    return True


cdef inline int32_t fast_frame6(const ctx_t* c, const uint8_t* row, int32_t start,
                                int32_t length) noexcept nogil:
    """The L2 header's length (0, 14, or 18 with an 802.1Q tag) of a frame
    holding at least an IPv6 header's worth of IPv6, or -1 for anything
    else (which the general path parses)."""
    cdef const uint8_t* f = row + start
    if start < 0 or length < 0 or start + length > c.slot:
        return -1
    if c.linktype != LINK_ETHERNET:
        return 0 if length >= IP6_HLEN else -1
    if length < 14 + IP6_HLEN:
        return -1
    if rd16(f + 12) == 0x86DD:
        return 14
    if rd16(f + 12) == 0x8100 and length >= 18 + IP6_HLEN and rd16(f + 16) == 0x86DD:
        return 18
    return -1


cdef bint fast_dx4(ctx_t* c, pkt_t* p, const fp_dev* idev, uint8_t* ip6, uint32_t rt,
                   const fp_dst* d, const fp_s6l* s) noexcept nogil:
    """End.DX4 / End.DT4 of an IPv4 packet right after the IPv6 header (no
    SRH, no options): decap_and_validate, ip_route_input (martians, the
    lookup through the rules or in the vrftable, fib_validate_source) and
    ip_forward, when the packet leaves by a unicast route unfragmented."""
    cdef uint8_t* ip4 = ip6 + IP6_HLEN
    cdef int32_t len0 = p.l3len
    cdef uint32_t saddr, daddr, rt4
    cdef const fp_dst* d4
    cdef const fp_nh* nh
    cdef const adj_t* a
    if ip6[6] != 4 or len0 < IP6_HLEN + IP4_HLEN or ip4[0] != 0x45 or ip4[8] <= 1:
        return False
    if not (idev.flags & DEVF_FWD4):
        return False
    saddr = rd32(ip4 + 12)
    daddr = rd32(s.nh4) if s.action == S6_END_DX4 else 0
    if daddr == 0:
        daddr = rd32(ip4 + 16)
    if ip4_route_martian(saddr, daddr) != 0:
        return False
    if s.action == S6_END_DT4:
        if s.slot4 < 0 or <uint32_t>s.slot4 >= c.nlpm4:
            return False
        rt4 = table_route(c, lpm4_lookup(c.lpm4[s.slot4].tbl24, c.lpm4[s.slot4].groups, daddr),
                          DST_IP4_NOROUTE)
    else:
        rt4 = fib4_cached(c, daddr, saddr, p.iif)
    d4 = &c.dsts[rt4]
    if d4.type != RTN_UNICAST or d4.encap_type != ENCAP_NONE or (d4.flags & DSTF_DEAD):
        return False
    # decapsulated (undone below if the general path must take the packet)
    p.l3 += IP6_HLEN
    p.l3len -= IP6_HLEN
    p.family = 4
    nh = NULL
    if ip4_validate_source(c, p, d4, saddr, daddr):
        nh = dst_nexthop(c, d4, mp_hash4(c, p) if d4.nh_count > 1 else 0)
    if nh != NULL:
        a = &c.adj[nh - c.nhs]
        if (a.mtu4 == 0                     # no such device, down, an IPv6 gateway
                or <uint32_t>p.l3len > (d4.mtu if d4.mtu else a.mtu4)
                or fast_no_room(c, p, a)):
            nh = NULL
    if nh != NULL and c.refmode != MODE_NOREF and not dst_hold_pkt(c, p, rt4):
        nh = NULL                        # skb_dst_force() would fail: the general path drops
    if nh == NULL:
        p.l3 -= IP6_HLEN
        p.l3len = len0
        p.family = 6
        return False
    dst_use_route(c, rt)
    ip_decrease_ttl(ip4)
    p.verdict = V_FORWARD
    p.reason = R_NONE
    p.oif = nh.oif
    memset(p.nexthop, 0, 16)
    if nh.flags & NHF_GATEWAY:
        memcpy(p.nexthop, nh.gw, 4)
        fast_l2(c, p, nh, 4, nh.gw, -1)
    else:
        # the packet's destination (even when End.DX4 looked nh4 up, as
        # the kernel's rt_nexthop() for a route without gateway)
        memcpy(p.nexthop, ip4 + 16, 4)
        fast_l2(c, p, nh, 4, ip4 + 16,
                c.s6l_nb[d.encap] if s.action == S6_END_DX4 and rd32(ip4 + 16) == rd32(s.nh4) else -1)
    fast_route(c, p, rt4)
    s6l_count(c, d, s, 0, len0)
    return True


cdef bint fast_dx6(ctx_t* c, pkt_t* p, uint8_t* ip6, uint32_t rt, const fp_dst* d,
                   const fp_s6l* s) noexcept nogil:
    """End.DX6 / End.DT6 (table mode) of an IPv6 packet right after the outer
    header (no SRH): decap_and_validate, seg6_lookup_any_nexthop (through
    the rules, or in the table) and ip6_forward of the inner packet, when it
    leaves by a unicast route."""
    cdef uint8_t* inner = ip6 + IP6_HLEN
    cdef int32_t len0 = p.l3len
    cdef uint32_t rt2, nmiss = 0
    cdef const fp_dst* d2 = NULL
    cdef const fp_nh* nh = NULL
    cdef const fp_nh* pnh
    cdef const uint8_t* known = NULL
    if ip6[6] != NEXTHDR_IPV6 or len0 < 2 * IP6_HLEN or (inner[0] >> 4) != 6:
        return False
    # the inner source: ip6_forward() refuses multicast and loopback ones
    if inner[8] == 0xFF or in6_is_loopback(inner + 8):
        return False
    if s.action == S6_END_DX6:
        if not in6_is_zero(s.nh6):
            known = s.nh6
        if rt6_need_strict(known if known != NULL else inner + 24):
            return False
        rt2 = fib6_cached_as(c, known if known != NULL else inner + 24, inner + 8, p.iif, &nmiss, False)
    else:
        if s.slot6 < 0 or <uint32_t>s.slot6 >= c.nlpm6:
            return False
        rt2 = table_route(c, lpm6_cached(c, s.slot6, inner + 24), DST_IP6_NULL)
    pnh = plain_nh(c, rt2)
    if pnh == NULL:
        d2 = &c.dsts[rt2]
        if d2.type != RTN_UNICAST or d2.encap_type != ENCAP_NONE or (d2.flags & DSTF_DEAD):
            return False
    # decapsulated (undone below if the general path must take the packet)
    p.l3 += IP6_HLEN
    p.l3len -= IP6_HLEN
    nh = fast_via6(c, p, inner, pnh) if pnh != NULL else fast_nexthop6(c, p, inner, d2)
    if nh != NULL and c.refmode != MODE_NOREF:
        if dst_hold_pkt(c, p, rt2):
            if s.action == S6_END_DX6:
                null_hold_put(c, nmiss)
        else:
            nh = NULL
    if nh == NULL:
        p.l3 -= IP6_HLEN
        p.l3len = len0
        return False
    dst_use_route(c, rt)
    use_later(c, p, rt2)
    fast_out6(c, p, inner, nh, known, c.s6l_nb[d.encap] if known != NULL else -1)
    fast_route(c, p, rt2)
    s6l_count(c, d, s, 0, len0)
    return True


cdef void prelookup(ctx_t* c, const uint8_t* row, int32_t start, int32_t length, uint32_t iif,
                    pre_t* e) noexcept nogil:
    """The route lookups the fast path will make for a packet, made ahead
    for a chunk of packets at a time in a short loop (as rte_lpm6's bulk
    lookup, or VPP's dual/quad loops), so that the memory accesses of
    several packets' lookups overlap instead of following one another;
    the entries they lead to are prefetched.  Lookups change nothing but
    the route cache, and nothing changes the packets or the tables before
    the fast path reaches them; it uses a result only for the same key at
    the same offset, and looks up itself otherwise."""
    cdef const uint8_t* ip6
    cdef const uint8_t* srh
    cdef int32_t l2, l3len
    cdef uint32_t sl
    cdef const fp_dst* d
    cdef const fp_s6l* s
    e.k1 = -1
    e.k2 = -1
    l2 = fast_frame6(c, row, start, length)
    if l2 < 0:
        return
    ip6 = row + start + l2
    l3len = length - l2
    if (ip6[0] >> 4) != 6 or ip6[24] == 0xFF:
        return
    e.k1 = start + l2 + 24
    if c.last_gen == c.rcache_gen and eq16(ip6 + 24, c.last_da):
        # the last SID's packet's (fast_path's shortcut)
        e.rt1 = c.last_rt
        e.m1 = c.last_nmiss
    else:
        e.rt1 = fib6_cached_as(c, ip6 + 24, ip6 + 8, iif, &e.m1, False)
    if plain_nh(c, e.rt1) != NULL:
        prefetch_route(c, e.rt1)          # (a route forwarded by: nothing more ahead)
        return
    d = &c.dsts[e.rt1]
    if d.type != RTN_UNICAST:
        return
    if d.encap_type == ENCAP_NONE:
        if e.rt1 < c.npcpu:
            fp_prefetch(&c.pcpu[e.rt1])
        return
    if d.encap_type != ENCAP_SEG6LOCAL or d.encap >= c.ns6l:
        return
    s = &c.s6l[d.encap]
    if s.flavors or not (s.action == S6_END or (s.action == S6_END_X and s.oif == 0)):
        return
    e.saddr = ip6 + 8
    if s.action == S6_END_X:
        e.k2 = -2
        e.key2 = s.nh6
    else:
        srh = ip6 + IP6_HLEN
        if ip6[6] != NEXTHDR_ROUTING or l3len < IP6_HLEN + 8 or srh[2] != 4:
            return
        sl = srh[3]
        if sl == 0 or sl > <uint32_t>srh[4] + 1 or IP6_HLEN + 8 + (<int32_t>sl << 4) > l3len:
            return
        e.k2 = start + l2 + IP6_HLEN + 8 + <int32_t>((sl - 1) << 4)
        e.key2 = srh + 8 + ((sl - 1) << 4)
    if rt6_need_strict(e.key2):
        e.k2 = -1     # (the fast path leaves it to the general one; pre_second would cache it)


cdef inline void prefetch_route(const ctx_t* c, uint32_t rt) noexcept nogil:
    """The lines the fast path will touch for route ``rt``.  In noref mode
    with lazy statistics only its fast-path word: most routes are plain
    (the entry then stays unread, and use_flush prefetches the statistics'
    lines); an entry without a word is read when it is reached."""
    if c.refmode == MODE_NOREF and c.use_mode == USE_LAZY:
        fp_prefetch(&c.dfast[rt])
        return
    fp_prefetch(&c.dsts[rt])
    if rt < c.npcpu:
        fp_prefetch(&c.pcpu[rt])


cdef void pre_second(ctx_t* c, pre_t* pre, int n, const uint32_t* iif) noexcept nogil:
    """The second lookups of a chunk (End's next segment, End.X's nexthop):
    route cache first, then the misses together (fib6_walk_bulk), and the
    entries found prefetched for the fast path."""
    cdef const uint8_t* keys[PRE_CHUNK]
    cdef int idx[PRE_CHUNK]
    cdef uint32_t rts[PRE_CHUNK]
    cdef uint32_t nms[PRE_CHUNK]
    cdef int j, m = 0, asked = 0
    cdef uint32_t v, rt
    # (the bulk walk, like the cache, needs rules that look at the
    # destination only: without the cache, each packet walks the rules)
    cdef bint bypass = c.rcache_on and c.pre_bypass and (c.ahead_chunks & 15) != 0
    for j in range(n):
        if pre[j].k2 == -1:
            continue
        asked += 1
        if not c.rcache_on:
            c.rcache_misses += 1
            pre[j].rt2 = fib6_walk(c, pre[j].key2, pre[j].saddr, iif[j], &pre[j].m2, NULL, 0)
        elif not bypass and rcache_get(c, rcache_bucket(c, pre[j].key2), pre[j].key2, &v):
            pre[j].rt2 = v & 0xFFFFFF
            pre[j].m2 = v >> 24
        else:
            keys[m] = pre[j].key2
            idx[m] = j
            m += 1
            continue
        prefetch_route(c, pre[j].rt2)
    # nearly every destination new (random traffic past the cache's size):
    # the next chunks skip the cache, probes and fills alike, looking again
    # one chunk in sixteen
    if not bypass:
        c.pre_bypass = asked >= 16 and m * 8 >= asked * 7
    if m == 0:
        return
    c.rcache_misses += <uint64_t>m
    fib6_walk_bulk(c, keys, m, rts, nms)
    for j in range(m):
        rt = rts[j]
        pre[idx[j]].rt2 = rt
        pre[idx[j]].m2 = nms[j]
        if not bypass:
            rcache_put(c, rcache_bucket(c, keys[j]), keys[j], rt, nms[j])
        prefetch_route(c, rt)


cdef int fast_path(ctx_t* c, pkt_t* p) noexcept nogil:
    """process_path() for a frame the fast path can take (see above): 1 when
    it took it to the end; 2 when it took it through the receive checks and
    the route lookup and the general path did the rest from the route on
    (other behaviours, flavors, TLVs, headends, errors: the steps before
    are the same); 0 when the general path must run from the start (the
    packet, the tables and every counter are as they were)."""
    cdef uint8_t* ip6
    cdef int32_t l2len
    cdef uint32_t plen, rt, nmiss
    cdef const fp_dev* idev
    cdef const fp_dst* d
    cdef const fp_s6l* s
    cdef const fp_nh* nh
    l2len = fast_frame6(c, p.row, p.start, p.length)
    if l2len < 0:
        return 0
    p.has_vlan = l2len == 18
    if p.has_vlan:
        p.vlan_tci = rd16(p.row + p.start + 14)
    p.l2len = <uint16_t>l2len
    p.l3 = p.start + l2len
    p.l3len = p.length - l2len
    ip6 = p.row + p.l3
    idev = dev_get(c, p.iif)
    if idev == NULL or not (idev.flags & DEVF_UP) or (ip6[0] >> 4) != 6:
        return 0
    # ip6_rcv_core(): what it refuses, and hop-by-hop options, are the
    # general path's; so are the destinations looked up on the ingress
    # device only (rt6_need_strict: multicast, link-local; loopback below),
    # tested by their first byte (fe00::/8 and ff00::/8: site-local ones go
    # along)
    if ip6[8] == 0xFF or ip6[24] >= 0xFE or ip6[6] == NEXTHDR_HOP:
        return 0
    if (ip6[8] == 0 and in6_is_loopback(ip6 + 8)) or (ip6[24] == 0 and in6_is_loopback(ip6 + 24)):
        return 0
    plen = rd16(ip6 + 4)
    if plen == 0 or plen + IP6_HLEN > <uint32_t>p.l3len:
        return 0
    p.l3len = plen + IP6_HLEN               # pskb_trim_rcsum
    p.family = 6
    if p.pre != NULL and p.pre.k1 == p.l3 + 24:
        rt = p.pre.rt1
        nmiss = p.pre.m1
    elif c.last_gen == c.rcache_gen and eq16(ip6 + 24, c.last_da):
        # the same SID as the last SID's packet (most of an SRv6 endpoint's
        # traffic is to its own few SIDs): the cache's answer, without the
        # probe
        p.pre = NULL
        rt = c.last_rt
        nmiss = c.last_nmiss
    else:
        p.pre = NULL
        rt = fib6_cached_as(c, ip6 + 24, ip6 + 8, p.iif, &nmiss, False)
        if c.rcache_on and c.dsts[rt].encap_type == ENCAP_SEG6LOCAL:
            memcpy(c.last_da, ip6 + 24, 16)
            c.last_rt = rt
            c.last_nmiss = nmiss
            c.last_gen = c.rcache_gen
    nh = plain_nh(c, rt)
    if nh != NULL:
        # (forwarded by a route with a fast-path word: its entry unread)
        nh = fast_via6(c, p, ip6, nh)
        if nh != NULL:
            use_later(c, p, rt)
            fast_out6(c, p, ip6, nh, NULL, -1)
            fast_route(c, p, rt)
            return 1
    else:
        d = &c.dsts[rt]
        if d.type == RTN_UNICAST and not (d.flags & DSTF_DEAD):
            if d.encap_type == ENCAP_NONE:
                nh = fast_nexthop6(c, p, ip6, d)
                if nh != NULL:
                    dst_use_route(c, rt)
                    fast_out6(c, p, ip6, nh, NULL, -1)
                    fast_route(c, p, rt)
                    return 1
            elif d.encap_type == ENCAP_SEG6LOCAL and d.encap < c.ns6l:
                s = &c.s6l[d.encap]
                if s.flavors == 0 and (s.action == S6_END or (s.action == S6_END_X and s.oif == 0)):
                    if fast_end(c, p, idev, ip6, rt, d, s):
                        return 1
                elif (s.action == S6_END_DX4 or s.action == S6_END_DT4) and fast_dx4(c, p, idev, ip6, rt, d, s):
                    return 1
                elif (s.action == S6_END_DX6 or s.action == S6_END_DT6) and fast_dx6(c, p, ip6, rt, d, s):
                    return 1
    # Anything else (an error due, another behaviour, a headend, a local
    # route...) takes the general path from the route on: ip6_input()'s
    # checks before it are those above (the fast path's are stricter), and
    # its lookup gave this route.
    pkt_reset(p)
    dst_use(c, rt)
    ip6_input_route(c, p, rt)
    l2_egress(c, p)
    return 2

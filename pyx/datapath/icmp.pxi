# ICMP errors and their rate limits: net/ipv6/icmp.c (icmp6_send),
# net/ipv4/icmp.c (__icmp_send, icmp_global_allow), net/ipv4/inetpeer.c
# (inet_peer_xrlim_allow), net/ipv4/route.c's ip_error() limiter.


cdef peer_t* peer_get(ctx_t* c, int family, const uint8_t* addr, int64_t now) noexcept nogil:
    """inet_getpeer(): the rate-limit state of an address.  The table is
    direct-mapped: a colliding address replaces the older one (the kernel's
    inet_peer also evicts); a new peer's last update is a minute ago, so
    that its first refill is at the maximum."""
    cdef uint64_t a, b, h
    cdef peer_t* e
    cdef int n = 16 if family == 6 else 4
    memcpy(&a, addr, 8)
    memcpy(&b, addr + 8, 8)
    if family == 4:
        b = 0
        a &= 0xFFFFFFFFULL
    h = (a * 0x9E3779B97F4A7C15ULL) ^ (b * 0xC2B2AE3D27D4EB4FULL)
    h ^= h >> 31
    h *= 0x94D049BB133111EBULL
    e = &c.peers[h >> (64 - PEER_BITS)]
    if e.family != <uint32_t>family or memcmp(e.addr, addr, n) != 0:
        memset(e, 0, sizeof(peer_t))
        memcpy(e.addr, addr, n)
        e.family = family
        e.tokens_ns = 0
        e.last_ns = now - 60000000000LL          # "the first calculation is at its maximum"
    return e


cdef bint peer_allow(ctx_t* c, int family, const uint8_t* addr, int64_t tmo, int64_t now) noexcept nogil:
    """inet_peer_xrlim_allow(): a token bucket per destination, refilled at
    one token per ``tmo``, at most XRLIM_BURST_FACTOR tokens -- capped only
    when time has passed since the bucket's last update, so that ``tmo`` 0
    (always allowed) leaves alone a bucket ip_error() has just updated, and
    empties it otherwise (IPv4: ip_error() shares it)."""
    cdef peer_t* e = peer_get(c, family, addr, now)
    cdef int64_t token = e.tokens_ns
    if now != e.last_ns:
        token += now - e.last_ns
        e.last_ns = now
        if token > XRLIM_BURST_FACTOR * tmo:
            token = XRLIM_BURST_FACTOR * tmo
        if token < 0:
            token = 0                             # time went backwards
    if token >= tmo:
        e.tokens_ns = token - tmo
        return True
    e.tokens_ns = token
    return False


cdef bint ip_error_allow(ctx_t* c, const uint8_t* saddr, int64_t now) noexcept nogil:
    """ip_error()'s own limiter of the unreachables it sends: per source, a
    token per error_cost of time, at most error_burst, on the inet_peer
    bucket icmpv4_xrlim_allow() uses too (so with icmp_ratelimit 0 and the
    type in icmp_ratemask, each error sent empties it).  True while
    error_cost is 0 (fastpath's default: off; Linux: 1 s, burst 5 s)."""
    cdef peer_t* e
    cdef int64_t token
    if c.ip_error_cost_ns <= 0:
        return True
    e = peer_get(c, 4, saddr, now)
    token = e.tokens_ns + (now - e.last_ns)
    if token > c.ip_error_burst_ns:
        token = c.ip_error_burst_ns
    if token < 0:
        token = 0                                 # time went backwards
    e.last_ns = now
    if token >= c.ip_error_cost_ns:
        e.tokens_ns = token - c.ip_error_cost_ns
        return True
    e.tokens_ns = token
    return False


cdef bint icmp_global_allow(ctx_t* c, int64_t now) noexcept nogil:
    """icmp_global_allow(): msgs_per_sec credits, at most msgs_burst, refilled
    at most every 20 ms (0 msgs_per_sec: fastpath's 'no global limit')."""
    cdef int64_t delta, incr
    if c.msgs_per_sec <= 0:
        return True
    if c.global_credit > 0:
        return True
    delta = now - c.global_stamp_ns
    if delta > 1000000000LL:
        delta = 1000000000LL
    if delta < 20000000LL:
        return False
    incr = c.msgs_per_sec * delta // 1000000000LL
    if incr <= 0:
        return False
    c.global_credit = c.global_credit + incr
    if c.global_credit > c.msgs_burst:
        c.global_credit = c.msgs_burst
    c.global_stamp_ns = now
    return c.global_credit > 0


cdef inline void icmp_global_consume(ctx_t* c) noexcept nogil:
    """One credit per message (the kernel takes 0 to 2 at random)."""
    if c.msgs_per_sec > 0:
        c.global_credit -= 1


cdef inline bint icmp6_limited(uint8_t type) noexcept nogil:
    """The default net.ipv6.icmp.ratemask (0-1,3-127): errors but Packet Too Big."""
    return type < 128 and type != ICMP6_PKT_TOOBIG


cdef inline bint icmp4_limited(const ctx_t* c, uint8_t type, uint8_t code) noexcept nogil:
    if type > 31 or not ((1u << type) & c.icmp4_ratemask):
        return False
    return not (type == ICMP_DEST_UNREACH and code == ICMP_FRAG_NEEDED)


cdef bint icmp6_ineligible(const uint8_t* ip6, int32_t len) noexcept nogil:
    """is_ineligible(): never answer an ICMPv6 error (or a header we cannot
    parse as such)."""
    cdef int32_t off = IP6_HLEN
    cdef uint8_t nh = ip6[6]
    cdef int32_t hl
    while nh == NEXTHDR_HOP or nh == NEXTHDR_ROUTING or nh == NEXTHDR_DEST or nh == NEXTHDR_FRAGMENT or nh == NEXTHDR_AUTH:
        if off + 8 > len:
            return False       # ipv6_skip_exthdr fails: eligible
        if nh == NEXTHDR_FRAGMENT:
            if (rd16(ip6 + off + 2) & 0xFFF8) != 0:
                return False   # not the first fragment: no transport header
            hl = 8
        elif nh == NEXTHDR_AUTH:
            hl = (<int32_t>ip6[off + 1] + 2) << 2
        else:
            hl = (<int32_t>ip6[off + 1] + 1) << 3
        nh = ip6[off]
        off += hl
    if nh == NEXTHDR_ICMP6:
        if off + 1 > len:
            return True
        return (ip6[off] & 0x80) == 0
    return False


cdef bint icmp6_send(ctx_t* c, pkt_t* p, uint8_t type, uint8_t code, uint32_t info,
                     uint16_t reason) noexcept nogil:
    """icmp6_send(): turn the packet into the ICMPv6 error about it, routed back
    to its source.  Returns False (packet dropped with ``reason``, or with
    no_icmp_route) when the kernel would send nothing."""
    cdef uint32_t nmiss
    cdef uint8_t* ip6 = p.row + p.l3
    cdef uint8_t saddr[16]
    cdef uint8_t osrc[16]
    cdef uint8_t odst[16]
    cdef bint have_saddr = False
    cdef uint32_t rt, plen, s
    cdef const fp_dst* d
    cdef const fp_nh* nh
    cdef const fp_dev* dev
    cdef uint8_t hl
    cdef uint8_t* h
    memcpy(osrc, ip6 + 8, 16)
    memcpy(odst, ip6 + 24, 16)
    p.reason = reason
    tr(c, T_ICMP_DUE, type, code, osrc)
    if ipv6_chk_addr_dev(c, odst, p.iif) or (c.fwd6 and is_subnet_anycast(c, p.iif, odst)):
        memcpy(saddr, odst, 16)
        have_saddr = True
    if in6_is_multicast(odst):
        if type != ICMP6_PKT_TOOBIG:
            set_drop(p, reason)
            return False
        have_saddr = False
    if in6_is_zero(osrc) or in6_is_multicast(osrc):
        set_drop(p, reason)
        return False
    if icmp6_ineligible(ip6, p.l3len):
        set_drop(p, reason)
        return False
    if icmp6_limited(type) and not icmp_global_allow(c, pkt_ts(c, p)):
        set_drop(p, R_ICMP_SUPPRESSED)
        return False
    # the source: the offending packet's destination when it is ours; else
    # the preferred source of the route back (icmpv6_rt_has_prefsrc), else
    # source address selection on the device it was received on (parm->iif:
    # for a packet End.DT* handed to a VRF, the outer packet's ingress, in
    # that device's L3 domain; observed on 6.12); then the route back is
    # looked up from that source (so 'from' rules see it)
    cdef uint8_t zero[16]
    memset(zero, 0, 16)
    if not have_saddr:
        rt = icmp6_route_lookup(c, p, osrc, zero, &nmiss)
        d = &c.dsts[rt]
        if (d.type == RTN_UNICAST or d.type == RTN_LOCAL) and not in6_is_zero(d.prefsrc):
            memcpy(saddr, d.prefsrc, 16)
            have_saddr = True
        elif ipv6_get_saddr(c, p.rcv_iif, osrc, saddr):
            have_saddr = True
            rt = icmp6_route_lookup(c, p, osrc, saddr, &nmiss)
    else:
        rt = icmp6_route_lookup(c, p, osrc, saddr, &nmiss)
    d = &c.dsts[rt]
    # icmpv6_route_lookup: no error sent where there is no route back, nor
    # to one of our own (local or anycast) addresses
    if d.type != RTN_UNICAST and d.type != RTN_LOCAL:
        set_drop(p, reason)
        return False
    if d.type == RTN_LOCAL:
        # an error about a packet we sent ourselves stays inside this node
        set_drop(p, reason)
        return False
    # (towards a link-local source the route was looked up on the ingress
    # device, and the nexthop stays on it)
    nh = dst_nexthop_strict(c, d, 0, p.iif) if in6_is_linklocal(osrc) else dst_nexthop(c, d, 0)
    if nh == NULL:
        set_drop(p, reason)
        return False
    dev = dev_get(c, nh.oif)
    if dev == NULL:
        set_drop(p, reason)
        return False
    if not have_saddr:
        if not ipv6_get_saddr(c, dev.ifindex, osrc, saddr):
            set_drop(p, reason)
            return False
    # icmpv6_xrlim_allow(): per destination, more tokens for wider prefixes
    if icmp6_limited(type) and c.icmp6_tmo_ns > 0:
        if not peer_allow(c, 6, osrc, c.icmp6_tmo_ns >> ((128 - d.plen) >> 5) if d.plen < 128
                          else c.icmp6_tmo_ns, pkt_ts(c, p)):
            set_drop(p, R_ICMP_SUPPRESSED)
            return False
    if icmp6_limited(type):
        icmp_global_consume(c)
    hl = d.hoplimit if d.hoplimit else (dev.hop_limit if dev.hop_limit else c.hop_limit)
    plen = p.l3len
    if plen > IPV6_MIN_MTU - IP6_HLEN - ICMP_HLEN:
        plen = IPV6_MIN_MTU - IP6_HLEN - ICMP_HLEN
    if not make_headroom(c, p, IP6_HLEN + ICMP_HLEN + L2_RESERVE):
        set_drop(p, R_NO_HEADROOM)
        return False
    p.l3 -= IP6_HLEN + ICMP_HLEN
    p.l3len = plen + IP6_HLEN + ICMP_HLEN
    h = p.row + p.l3
    wr32(h, 0x60000000u)                 # version 6, tclass 0, flow label 0
    wr16(h + 4, <uint16_t>(plen + ICMP_HLEN))
    h[6] = NEXTHDR_ICMP6
    h[7] = hl
    memcpy(h + 8, saddr, 16)
    memcpy(h + 24, osrc, 16)
    h[40] = type
    h[41] = code
    h[42] = 0
    h[43] = 0
    wr32(h + 44, info)
    # checksum over the pseudo-header and the ICMPv6 message
    s = csum_add(0, h + 8, 32)
    s += plen + ICMP_HLEN
    s += NEXTHDR_ICMP6
    s = csum_add(s, h + 40, plen + ICMP_HLEN)
    wr16(h + 42, csum_fold(s))
    tr(c, T_ICMP, type, code, osrc)
    p.verdict = V_ICMP
    p.dst = rt
    p.oif = nh.oif
    if nh.flags & NHF_GATEWAY:
        memcpy(p.nexthop, nh.gw, 16)
    else:
        memcpy(p.nexthop, osrc, 16)
    return True


cdef enum:
    INADDR_DUMMY = 0xC0000008     # 192.0.0.8, include/uapi/linux/in.h


cdef bint ipv4_select_addr_l3mdev(const ctx_t* c, uint32_t l3, uint8_t* out) noexcept nogil:
    """inet_select_addr(VRF, 0, RT_SCOPE_LINK): the VRF device's own first
    address, else the first of the devices enslaved to it, in device order
    (the VRF takes loopback's place; loopback addresses never qualify)."""
    cdef uint32_t k, best_if = 0xFFFFFFFFu
    cdef int best = -1
    cdef const fp_addr* a
    for k in range(c.naddr):
        a = &c.addrs[k]
        if a.family != 4 or a.addr[0] == 127:
            continue
        if a.ifindex == l3:
            memcpy(out, a.addr, 4)
            return True
        if a.ifindex < best_if and l3mdev_of(c, a.ifindex) == l3:
            best_if = a.ifindex
            best = <int>k
    if best < 0:
        return False
    memcpy(out, c.addrs[best].addr, 4)
    return True


cdef bint icmp4_send(ctx_t* c, pkt_t* p, uint8_t type, uint8_t code, uint32_t info,
                     uint16_t reason, bint was_local) noexcept nogil:
    """__icmp_send(): the ICMPv4 error about the packet, routed to its source."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef uint32_t osrc = rd32(ip4 + 12)
    cdef uint32_t odst = rd32(ip4 + 16)
    cdef int32_t ihl = (ip4[0] & 0x0F) << 2
    cdef uint8_t saddr[4]
    cdef bint have_saddr = False
    cdef uint32_t rt, plen, room, mtu
    cdef const fp_dst* d
    cdef const fp_nh* nh
    cdef const fp_dev* dev
    cdef uint8_t* h
    cdef uint8_t ttl
    cdef uint8_t it
    cdef uint32_t l3
    p.reason = reason
    tr(c, T_ICMP_DUE, type, code, NULL)
    # no errors about fragments other than the first, or about ICMP errors
    if (rd16(ip4 + 6) & 0x1FFF) != 0:
        set_drop(p, reason)
        return False
    if ip4[9] == IPPROTO_ICMP:
        if ihl + 1 > p.l3len:
            set_drop(p, reason)
            return False
        it = ip4[ihl]
        # icmp_pointers[].error: every type but the informational ones
        if it > 18 or not (it == 0 or it == 8 or it == 9 or it == 10 or it == 13 or it == 14 or it == 15 or it == 16 or it == 17 or it == 18):
            set_drop(p, reason)
            return False
    if (osrc >> 28) == 0xE or osrc == 0xFFFFFFFFu or osrc == 0:
        set_drop(p, reason)
        return False
    if was_local:
        wr32(saddr, odst)
        have_saddr = True
    if icmp4_limited(c, type, code) and not icmp_global_allow(c, pkt_ts(c, p)):
        set_drop(p, R_ICMP_SUPPRESSED)
        return False
    # __ip_options_echo(): the reply carries the packet's compiled options
    cdef uint8_t eopt[40]
    cdef ip4opt_t dopt
    cdef int32_t eoptlen = ip4_options_echo(c, p, eopt, &dopt)
    if eoptlen < 0:
        set_drop(p, R_NOT_SUPPORTED if eoptlen == -2 else reason)   # -2: a source route
        return False
    rt = fib4_lookup(c, osrc, odst if was_local else 0, l3mdev_out(c, p.iif))
    d = &c.dsts[rt]
    if d.type != RTN_UNICAST and d.type != RTN_LOCAL:
        set_drop(p, reason)
        return False
    nh = dst_nexthop(c, d, 0)
    if d.type == RTN_LOCAL:
        # an error about a packet we sent ourselves stays inside this node
        set_drop(p, reason)
        return False
    elif nh == NULL:
        set_drop(p, reason)
        return False
    else:
        dev = dev_get(c, nh.oif)
    if dev == NULL:
        set_drop(p, reason)
        return False
    l3 = l3mdev_of(c, p.iif)
    if not have_saddr and l3 and l3mdev_of(c, dev.ifindex) != l3:
        # fib_select_path(): the route back leaves the packet's VRF (an l3mdev
        # rule missed, a later one matched): the source is the VRF's,
        # inet_select_addr(VRF, 0, RT_SCOPE_LINK), not the route's
        have_saddr = ipv4_select_addr_l3mdev(c, l3, saddr)
        if not have_saddr:
            wr32(saddr, INADDR_DUMMY)
            have_saddr = True
    if not have_saddr:
        if d.prefsrc[0] or d.prefsrc[1] or d.prefsrc[2] or d.prefsrc[3]:
            memcpy(saddr, d.prefsrc, 4)
        elif not ipv4_get_saddr(c, dev.ifindex, rd32(nh.gw) if (nh != NULL and nh.flags & NHF_GATEWAY) else osrc, saddr):
            # __icmp_send: never from 0.0.0.0, from the dummy address
            # (RFC 7600) instead (observed on 6.12 for a VRF without one)
            wr32(saddr, INADDR_DUMMY)
    if icmp4_limited(c, type, code):
        # (with icmp_ratelimit 0 the bucket is looked at only where it is
        # seen: ip_error()'s limiter shares it)
        if ((c.icmp4_tmo_ns > 0 or c.ip_error_cost_ns > 0)
                and not peer_allow(c, 4, ip4 + 12, c.icmp4_tmo_ns, pkt_ts(c, p))):
            set_drop(p, R_ICMP_SUPPRESSED)
            return False
        icmp_global_consume(c)
    mtu = d.mtu if d.mtu else dev.mtu
    room = mtu if mtu < 576 else 576
    cdef int32_t hlen = IP4_HLEN + eoptlen
    room -= hlen + ICMP_HLEN
    plen = p.l3len if <uint32_t>p.l3len < room else room
    ttl = d.hoplimit if d.hoplimit else c.ip_default_ttl
    if not make_headroom(c, p, hlen + ICMP_HLEN + L2_RESERVE):
        set_drop(p, R_NO_HEADROOM)
        return False
    cdef uint8_t otos = ip4[1]
    p.l3 -= hlen + ICMP_HLEN
    p.l3len = plen + hlen + ICMP_HLEN
    h = p.row + p.l3
    h[0] = 0x40 | (hlen >> 2)
    h[1] = (otos & 0x1E) | 0xC0          # IPTOS_PREC_INTERNETCONTROL
    wr16(h + 2, <uint16_t>p.l3len)
    wr16(h + 4, 0)                       # IP ID: the kernel's is random
    wr16(h + 6, 0)                       # no DF (icmp socket: PMTUDISC_DONT)
    h[8] = ttl
    h[9] = IPPROTO_ICMP
    wr16(h + 10, 0)
    memcpy(h + 12, saddr, 4)
    wr32(h + 16, osrc)
    if eoptlen:
        memcpy(h + IP4_HLEN, eopt, eoptlen)
        ip4_options_build(c, p, h, &dopt)
    wr16(h + 10, csum_fold(csum_add(0, h, hlen)))
    h += hlen - IP4_HLEN                 # the ICMP header follows the options
    h[20] = type
    h[21] = code
    wr16(h + 22, 0)
    wr32(h + 24, info)
    wr16(h + 22, csum_fold(csum_add(0, h + 20, plen + ICMP_HLEN)))
    h -= hlen - IP4_HLEN
    tr(c, T_ICMP, type, code, h + 16)
    p.verdict = V_ICMP
    p.dst = rt
    memset(p.nexthop, 0, 16)
    if d.type == RTN_LOCAL:
        p.oif = c.lo_ifindex
        wr32(p.nexthop, osrc)
    else:
        p.oif = nh.oif
        if nh.flags & NHF_GATEWAY:
            memcpy(p.nexthop, nh.gw, 4)
        else:
            wr32(p.nexthop, osrc)
    return True

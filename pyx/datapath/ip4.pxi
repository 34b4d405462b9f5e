# IPv4: net/ipv4/ip_input.c (ip_rcv_core), net/ipv4/route.c
# (ip_route_input_slow, ip_error, fib_validate_source), net/ipv4/ip_forward.c.


cdef inline void ip_decrease_ttl(uint8_t* ip4) noexcept nogil:
    """ip_decrease_ttl(): incremental checksum exactly as the kernel computes it."""
    cdef uint32_t check = (<uint32_t>ip4[10] << 8 | ip4[11]) + 0x0100
    check = check + (1 if check >= 0xFFFF else 0)
    ip4[10] = (check >> 8) & 0xFF
    ip4[11] = check & 0xFF
    ip4[8] -= 1


cdef int ip_forward(ctx_t* c, pkt_t* p, const fp_dst* d) noexcept nogil:
    """ip_forward() after a unicast input route was found."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef const fp_nh* nh = dst_nexthop(c, d, mp_hash4(c, p) if d.nh_count > 1 else 0)
    cdef const fp_dev* odev
    cdef uint32_t mtu
    if nh == NULL:
        set_drop(p, R_NO_ROUTE)
        return -1
    odev = dev_get(c, nh.oif)
    if odev == NULL or not (odev.flags & DEVF_UP):
        set_drop(p, R_INTERFACE_DOWN)
        return -1
    if ip4[8] <= 1:
        icmp4_send(c, p, ICMP_TIME_EXCEEDED, 0, 0, R_HOP_LIMIT_EXCEEDED, False)
        return -1
    mtu = d.mtu if d.mtu else odev.mtu
    cdef bint frag = False
    if <uint32_t>p.l3len > mtu:
        if rd16(ip4 + 6) & 0x4000:
            icmp4_send(c, p, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, mtu, R_PKT_TOO_BIG, False)
            return -1
        # DF clear: ip_fragment() after the TTL decrement; the fragments are
        # cut by Router.process (slow path, as in the kernel)
        frag = True
    ip_decrease_ttl(ip4)
    if p.opt4.optlen:
        ip4_forward_options(c, p, d)     # ip_forward_finish()
    p.verdict = V_FORWARD
    p.reason = R_FRAGMENTED if frag else R_NONE
    p.oif = nh.oif
    memset(p.nexthop, 0, 16)
    if nh.flags & NHF_GATEWAY:
        memcpy(p.nexthop, nh.gw, 4)
    else:
        memcpy(p.nexthop, ip4 + 16, 4)
    tr(c, T_FORWARD, nh.oif, ip4[8], p.nexthop)
    return 0


cdef void ip4_input(ctx_t* c, pkt_t* p) noexcept nogil:
    """ip_rcv_core() then ip_route_input_slow() and the route's input."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef int32_t ihl, tot
    if p.l3len < IP4_HLEN:
        set_drop(p, R_TRUNCATED)
        return
    if (ip4[0] >> 4) != 4:
        set_drop(p, R_NOT_IP)
        return
    ihl = (ip4[0] & 0x0F) << 2
    if ihl < IP4_HLEN:
        set_drop(p, R_IP_HDR_INVALID)
        return
    if ihl > p.l3len:
        set_drop(p, R_TRUNCATED)
        return
    if csum_fold(csum_add(0, ip4, ihl)) != 0:
        set_drop(p, R_IP_CSUM_ERROR)
        return
    tot = rd16(ip4 + 2)
    if tot > p.l3len:
        set_drop(p, R_TRUNCATED)
        return
    if tot < ihl:
        set_drop(p, R_IP_HDR_INVALID)
        return
    p.l3len = tot                        # pskb_trim_rcsum
    ip4_route_input(c, p, rd32(ip4 + 16), -1, False, ihl > IP4_HLEN)


cdef bint ip4_validate_source(const ctx_t* c, pkt_t* p, const fp_dst* d, uint32_t saddr,
                              uint32_t daddr) noexcept nogil:
    """fib_validate_source() with rp_filter off.  Without custom rules or
    custom local routes: a source that is one of our addresses is a martian.
    With them: the reverse lookup (to the source, from the destination, as
    if received on the egress device) must not give a local, broadcast,
    multicast or anycast route (an error route or no route is accepted)."""
    cdef const fp_nh* nh
    cdef uint32_t rt
    cdef uint8_t t
    if not c.v4_full_rpcheck:
        return not is_local_addr(c, 4, p.row + p.l3 + 12)
    nh = dst_nexthop(c, d, mp_hash4(c, p) if d.nh_count > 1 else 0)
    rt = fib4_lookup(c, saddr, daddr, nh.oif if nh != NULL else c.lo_ifindex)
    t = c.dsts[rt].type
    return not (t == RTN_LOCAL or t == RTN_BROADCAST or t == RTN_MULTICAST or t == RTN_ANYCAST)


cdef inline uint16_t ip4_route_martian(uint32_t saddr, uint32_t daddr) noexcept nogil:
    """ip_route_input_slow()'s martian checks, in its order: the drop
    reason, IP4_LIMITED_BCAST for the limited broadcast, or 0."""
    if (daddr >> 28) == 0xE:
        return R_MULTICAST
    if (saddr >> 28) == 0xE or saddr == 0xFFFFFFFFu:
        return R_SADDR_INVALID
    if daddr == 0xFFFFFFFFu or (saddr == 0 and daddr == 0):
        return IP4_LIMITED_BCAST
    # 0.0.0.0/8 is unicast but for 0.0.0.0 itself (Linux 5.3, "Allow
    # 0.0.0.0/8 as a valid address range": ipv4_is_zeronet checks 0 only)
    if saddr == 0 or (saddr >> 24) == 127:
        return R_SADDR_INVALID
    if daddr == 0 or (daddr >> 24) == 127:
        return R_DADDR_INVALID
    return 0


cdef int ip4_route_input(ctx_t* c, pkt_t* p, uint32_t daddr, int32_t slot, bint ref,
                         bint opts) noexcept nogil:
    """ip_route_input(skb, daddr, saddr, ...) then dst_input(): martian
    checks, the lookup (through the rules, or in one table when ``slot`` >= 0:
    End.DT4's table), then forward, deliver or ip_error().  Returns 0, or -1
    where the kernel's return code is an error.  ``ref``: the refcounted
    ip_route_input() of End.DX4/End.DT4 (before seeds/000): in refcount mode
    skb_dst_force() takes a reference on the input route, which every worker
    shares; receive itself is ip_route_input_noref().  ``opts``: the packet
    came through ip_rcv with IPv4 options: ip_rcv_options() runs once the
    route is known, before its input (a decapsulated packet's are not
    compiled: IPCB(skb)->opt stays empty, its options untouched)."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef uint32_t saddr = rd32(ip4 + 12)
    cdef uint32_t rt, v
    cdef const fp_dst* d
    cdef const fp_dev* idev
    cdef uint16_t martian = ip4_route_martian(saddr, daddr)
    if martian == IP4_LIMITED_BCAST or (martian == R_MULTICAST and daddr == 0xE0000001u
                                        and saddr != 0 and (saddr >> 28) != 0xE
                                        and saddr != 0xFFFFFFFFu):
        # (ip_route_input_mc: every IPv4 device has joined 224.0.0.1, the
        # all-hosts group; other groups are not joined and mc_forwarding is
        # off: dropped)
        if opts and ip4_rcv_options(c, p, False, True) < 0:
            return 0
        p.verdict = V_LOCAL
        p.reason = R_NONE
        return 0
    if martian:
        set_drop(p, martian)
        return -1
    if slot >= 0:
        v = lpm4_lookup(c.lpm4[slot].tbl24, c.lpm4[slot].groups, daddr) if <uint32_t>slot < c.nlpm4 else 0
        rt = table_route(c, v, DST_IP4_NOROUTE)
    else:
        rt = fib4_cached(c, daddr, saddr, p.iif)
    p.dst = rt
    tr(c, T_ROUTE, rt, 4, NULL)
    d = &c.dsts[rt]
    note_route(c, p, rt)
    if ref and c.refmode != MODE_NOREF and not dst_hold_pkt(c, p, rt):
        c.hold_fail += 1
        set_drop(p, R_ROUTE_DEAD)        # skb_dst_force() found it being freed
        return -1
    if (d.flags & DSTF_DEAD) and p.held != <int32_t>rt:
        set_drop(p, R_ROUTE_DEAD)
        return -1
    if d.type == RTN_BROADCAST or d.type == RTN_LOCAL:
        if opts and ip4_rcv_options(c, p, d.type == RTN_LOCAL, d.type == RTN_BROADCAST) < 0:
            return 0
        p.verdict = V_LOCAL
        p.reason = R_NONE
        return 0
    # IN_DEV_FORWARD of the device ip_rcv_finish() routes with: the one the
    # packet came in on, an enslaved device's own, not its VRF's (vrf_ip_rcv
    # has already made skb->dev the VRF, but ip_rcv_finish kept the device;
    # after End.DT4, p.iif is the VRF device, as the kernel's skb->dev)
    idev = dev_get(c, p.iif)
    if d.type == RTN_UNICAST:
        if d.encap_type != ENCAP_NONE and d.encap_type != ENCAP_SEG6:
            set_drop(p, R_NOT_SUPPORTED)
            return -1
        if not ip4_validate_source(c, p, d, saddr, daddr):
            set_drop(p, R_SADDR_INVALID)
            return -1
        if opts and ip4_rcv_options(c, p, False, False) < 0:
            return 0
        if idev == NULL or not (idev.flags & DEVF_FWD4):
            # not forwarding: EHOSTUNREACH, and ip_error sends nothing
            set_drop(p, R_FORWARDING_DISABLED)
            return 0
        if d.encap_type == ENCAP_SEG6:
            # the input route's dst.input is lwtunnel_input (no ip_forward:
            # the TTL is not checked nor decremented)
            return seg6_headend(c, p, rt)
        return ip_forward(c, p, d)
    if opts and ip4_rcv_options(c, p, False, False) < 0:
        return 0
    if idev == NULL or not (idev.flags & DEVF_FWD4):
        set_drop(p, R_FORWARDING_DISABLED if d.type != RTN_BLACKHOLE else R_BLACKHOLE)
        return 0
    # ip_error()
    cdef uint8_t code
    cdef uint16_t reason
    if d.type == RTN_BLACKHOLE:
        set_drop(p, R_BLACKHOLE)
        return 0
    elif d.type == RTN_PROHIBIT:
        code, reason = ICMP_PKT_FILTERED, R_PROHIBIT
    elif d.type == RTN_UNREACHABLE and rt != DST_IP4_NOROUTE and rt != DST_IP4_UNREACHABLE:
        # an unreachable route: EHOSTUNREACH (an unreachable rule action
        # returns ENETUNREACH, as no route at all: fib4_rule_action)
        code, reason = ICMP_HOST_UNREACH, R_UNREACHABLE
    elif rt == DST_IP4_UNREACHABLE:
        code, reason = ICMP_NET_UNREACH, R_UNREACHABLE
    elif d.type == RTN_MULTICAST or d.type == RTN_ANYCAST:
        set_drop(p, R_DADDR_INVALID)
        return -1
    else:
        code, reason = ICMP_NET_UNREACH, R_NO_ROUTE
    if not ip_error_allow(c, ip4 + 12, pkt_ts(c, p)):
        set_drop(p, R_ICMP_SUPPRESSED)
        return 0
    icmp4_send(c, p, ICMP_DEST_UNREACH, code, 0, reason, False)
    return 0

# IPv6 receive: net/ipv6/ip6_input.c (ip6_rcv_core, ip6_input_finish,
# ip6_mc_input), net/ipv6/exthdrs.c (hop-by-hop and destination options,
# ipv6_srh_rcv), and the input functions of IPv6 routes (dst_input:
# ip6_pkt_discard, ip6_pkt_prohibit, dst_discard).


cdef int ip6_parse_hopopts(ctx_t* c, pkt_t* p) noexcept nogil:
    """ipv6_parse_hopopts(): 0 = continue, 1 = the packet has been given a
    verdict (drop or ICMP parameter problem)."""
    return ip6_parse_tlv(c, p, IP6_HLEN)


cdef int ip6_parse_tlv(ctx_t* c, pkt_t* p, int32_t off) noexcept nogil:
    """ip6_parse_tlv() on the options header at ``off`` (hop-by-hop, or
    destination options on local delivery): padding rules, Router Alert,
    unknown options by their action bits."""
    cdef uint8_t* ip6 = p.row + p.l3
    cdef int32_t end, olen, k
    cdef uint8_t t
    cdef int padlen = 0
    if off + 8 > p.l3len:
        set_drop(p, R_TRUNCATED)
        return 1
    end = off + ((<int32_t>ip6[off + 1] + 1) << 3)
    if end > p.l3len:
        set_drop(p, R_TRUNCATED)
        return 1
    off += 2
    while off < end:
        t = ip6[off]
        if t == 0:                     # Pad1
            padlen += 1
            if padlen > 7:
                set_drop(p, R_EXTHDR_INVALID)
                return 1
            off += 1
            continue
        if off + 2 > end:
            set_drop(p, R_EXTHDR_INVALID)
            return 1
        olen = ip6[off + 1] + 2
        if off + olen > end:
            set_drop(p, R_EXTHDR_INVALID)
            return 1
        if t == 1:                     # PadN: RFC 8200 4.2, zeros, at most 7 bytes
            padlen += olen
            if padlen > 7:
                set_drop(p, R_EXTHDR_INVALID)
                return 1
            for k in range(2, olen):
                if ip6[off + k] != 0:
                    set_drop(p, R_EXTHDR_INVALID)
                    return 1
            off += olen
            continue
        padlen = 0
        if t == 5:                     # Router Alert
            if olen != 4:
                set_drop(p, R_EXTHDR_INVALID)
                return 1
        elif t == 0xC2:                # Jumbo payload: not modelled
            set_drop(p, R_NOT_SUPPORTED)
            return 1
        else:                          # ip6_tlvopt_unknown
            k = t >> 6
            if k == 0:
                pass
            elif k == 1:
                set_drop(p, R_HBH_OPTION)
                return 1
            elif k == 3 and in6_is_multicast(ip6 + 24):
                set_drop(p, R_HBH_OPTION)
                return 1
            else:
                icmp6_send(c, p, ICMP6_PARAMPROB, 2, <uint32_t>off, R_HBH_OPTION)
                return 1
        off += olen
    if padlen > 7:
        set_drop(p, R_EXTHDR_INVALID)
        return 1
    return 0


cdef bint ip6_mc_local(const ctx_t* c, const uint8_t* a, uint32_t iif) noexcept nogil:
    """ipv6_chk_mcast_addr(): the groups the ingress device has joined --
    all-nodes (ff02::1), all-routers (ff02::2, ff05::2) when forwarding,
    and the solicited-node group (ff02::1:ffXX:XXXX) of each of its
    addresses.  (Interface-local groups never arrive: ip6_rcv_core.)"""
    cdef uint32_t k
    for k in range(2, 11):
        if a[k] != 0:
            return False
    if a[11] == 0 and a[12] == 0 and a[13] == 0 and a[14] == 0:
        if a[1] == 0x02:
            return a[15] == 1 or (a[15] == 2 and c.fwd6)
        return a[1] == 0x05 and a[15] == 2 and c.fwd6
    if a[1] != 0x02 or a[11] != 0x01 or a[12] != 0xFF:
        return False
    for k in range(c.naddr):
        if (c.addrs[k].family == 6 and c.addrs[k].ifindex == iif
                and memcmp(c.addrs[k].addr + 13, a + 13, 3) == 0):
            return True
    return False


cdef void ip6_input(ctx_t* c, pkt_t* p) noexcept nogil:
    """ip6_rcv_core() then ip6_route_input() and the route's input function."""
    cdef uint32_t nmiss
    cdef uint8_t* ip6 = p.row + p.l3
    cdef uint32_t plen, rt
    cdef const fp_dst* d
    if p.l3len < IP6_HLEN:
        set_drop(p, R_TRUNCATED)
        return
    if (ip6[0] >> 4) != 6:
        set_drop(p, R_NOT_IP)
        return
    if in6_is_loopback(ip6 + 8) or in6_is_loopback(ip6 + 24):
        set_drop(p, R_SADDR_INVALID if in6_is_loopback(ip6 + 8) else R_DADDR_INVALID)
        return
    if in6_is_multicast(ip6 + 24) and (ip6[25] & 0x0F) <= 1:
        set_drop(p, R_DADDR_INVALID)
        return
    # (a v4-mapped source is only refused by the local transport protocols)
    if in6_is_multicast(ip6 + 8):
        set_drop(p, R_SADDR_INVALID)
        return
    plen = rd16(ip6 + 4)
    if plen == 0 and ip6[6] == NEXTHDR_HOP:
        set_drop(p, R_NOT_SUPPORTED)        # jumbogram
        return
    if plen + IP6_HLEN > <uint32_t>p.l3len:
        set_drop(p, R_TRUNCATED)
        return
    p.l3len = plen + IP6_HLEN               # pskb_trim_rcsum
    if ip6[6] == NEXTHDR_HOP:
        if ip6_parse_hopopts(c, p):
            return
    if in6_is_multicast(ip6 + 24):
        if ip6_mc_local(c, ip6 + 24, p.iif):
            p.verdict = V_LOCAL
            p.reason = R_NONE
        else:
            set_drop(p, R_MULTICAST)
        return
    rt = ip6_route_input_lookup(c, p, ip6 + 24, ip6 + 8, &nmiss)
    ip6_input_route(c, p, rt)


cdef inline void ip6_input_route(ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """ip6_input() once its route is found: the route's input function."""
    cdef const fp_dst* d = &c.dsts[rt]
    note_route(c, p, rt)
    if d.type == RTN_UNICAST and d.encap_type == ENCAP_SEG6LOCAL and not (d.flags & DSTF_DEAD):
        p.dst = rt
        tr(c, T_ROUTE, rt, 6, NULL)
        seg6local_input(c, p, d)
        return
    ip6_dst_input(c, p, rt)


cdef int ip6_dst_input(ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """dst_input() on an IPv6 route: forward, deliver, or the error routes'
    input (ip6_pkt_discard, ip6_pkt_prohibit, dst_discard).  Returns the
    kernel's return code sign: 0, or -1 where it returns an error (which
    seg6local counts as an error)."""
    cdef uint8_t* ip6 = p.row + p.l3
    cdef const fp_dst* d = &c.dsts[rt]
    p.dst = rt
    tr(c, T_ROUTE, rt, 6, NULL)
    if (d.flags & DSTF_DEAD) and p.held != <int32_t>rt:
        # reached without a reference after its removal (noref): discarded
        set_drop(p, R_ROUTE_DEAD)
        return -1
    if d.type == RTN_UNICAST:
        if d.encap_type == ENCAP_SEG6LOCAL:
            # the next segment is one of ours too: its behaviour runs now
            # (dst_input -> seg6_local_input), without a hop limit decrement
            return seg6local_input(c, p, d)
        if d.encap_type == ENCAP_SEG6:
            # lwtunnel_input() -> seg6_input()
            return seg6_headend(c, p, rt)
        return ip6_forward(c, p, d)
    elif d.type == RTN_LOCAL or d.type == RTN_ANYCAST:
        return ip6_local_deliver(c, p)
    elif d.type == RTN_BLACKHOLE:
        set_drop(p, R_BLACKHOLE)
    elif d.type == RTN_PROHIBIT:
        icmp6_send(c, p, ICMP6_DEST_UNREACH, ICMP6_ADM_PROHIBITED, 0, R_PROHIBIT)
    elif d.type == RTN_MULTICAST:
        set_drop(p, R_MULTICAST)
    else:
        # ip6_null_entry and unreachable routes: ip6_pkt_discard (the
        # unspecified destination counts as an address error, and is
        # answered all the same: ip6_pkt_drop)
        icmp6_send(c, p, ICMP6_DEST_UNREACH, ICMP6_NOROUTE, 0,
                   R_DADDR_INVALID if in6_is_zero(ip6 + 24) else
                   R_NO_ROUTE if rt == DST_IP6_NULL else R_UNREACHABLE)
    return 0


cdef int ip6_local_deliver(ctx_t* c, pkt_t* p) noexcept nogil:
    """ip6_input_finish() for a packet addressed to this node: the extension
    headers are processed in order (destination options, routing header);
    an SRH goes to ipv6_srh_rcv(); anything else is delivered to the upper
    layer (verdict local: fastpath models no sockets)."""
    cdef uint8_t* ip6 = p.row + p.l3
    cdef int32_t off = IP6_HLEN
    cdef uint8_t nh = ip6[6]
    if nh == NEXTHDR_HOP:
        if off + 2 > p.l3len:
            set_drop(p, R_TRUNCATED)
            return -1
        nh = ip6[off]
        off += (<int32_t>ip6[off + 1] + 1) << 3
    while True:
        if nh == NEXTHDR_DEST:
            if off + 8 > p.l3len or off + ((<int32_t>ip6[off + 1] + 1) << 3) > p.l3len:
                set_drop(p, R_TRUNCATED)
                return -1
            if ip6_parse_tlv(c, p, off):
                return -1
            nh = ip6[off]
            off += (<int32_t>ip6[off + 1] + 1) << 3
        elif nh == NEXTHDR_ROUTING:
            # ipv6_rthdr_rcv()
            if off + 8 > p.l3len or off + ((<int32_t>ip6[off + 1] + 1) << 3) > p.l3len:
                set_drop(p, R_TRUNCATED)
                return -1
            if in6_is_multicast(ip6 + 24):
                set_drop(p, R_DADDR_INVALID)
                return -1
            if ip6[off + 2] == 4:
                return ipv6_srh_rcv(c, p, off)
            if ip6[off + 3] != 0:
                icmp6_send(c, p, ICMP6_PARAMPROB, 0, <uint32_t>(off + 2), R_EXTHDR_INVALID)
                return -1
            nh = ip6[off]
            off += (<int32_t>ip6[off + 1] + 1) << 3
        else:
            break
    p.verdict = V_LOCAL
    p.reason = R_NONE
    return 0


cdef int ipv6_srh_rcv(ctx_t* c, pkt_t* p, int32_t off) noexcept nogil:
    """ipv6_srh_rcv(): an SRH on a packet for this node, without seg6local.
    Needs seg6_enabled (all and the interface); SL = 0: decapsulate an inner
    IPv6/IPv4 packet and receive it again, else deliver; SL too large:
    Parameter Problem at the SL field; else SL--, new DA, route again (a
    local DA loops here with the hop limit checked and decremented)."""
    cdef uint32_t nmiss
    cdef uint8_t* ip6 = p.row + p.l3
    cdef uint8_t* hdr
    cdef uint32_t rt
    # the device is skb->dev's: the VRF for a packet received on an enslaved
    # device (vrf_ip6_rcv made it so before ipv6_rcv's upper layers)
    cdef uint32_t v = l3mdev_of(c, p.iif)
    cdef const fp_dev* idev = dev_get(c, v if v else p.iif)
    cdef int32_t hl
    if idev == NULL or not (idev.flags & DEVF_SEG6):
        set_drop(p, R_SEG6_DISABLED)
        return -1
    if not seg6_hmac_validate_at(c, p, off):
        set_drop(p, p.reason if p.reason != R_NONE else R_HMAC_INVALID)
        return -1
    while True:
        hdr = ip6 + off
        if hdr[3] == 0:
            if hdr[0] == 41 or hdr[0] == 4:
                hl = off + ((<int32_t>hdr[1] + 1) << 3)
                p.l3 += hl
                p.l3len -= hl
                tr(c, T_DECAP, hdr[0], hl, NULL)
                p.depth += 1
                if p.depth > MAX_SEG6LOCAL_DEPTH:
                    set_drop(p, R_SEG6_LOOP)
                    return -1
                # netif_rx(): received again, on the same interface
                if p.l3len < 1:
                    set_drop(p, R_TRUNCATED)
                    return -1
                if hdr[0] == 41:
                    p.family = 6
                    if (p.row[p.l3] >> 4) != 6:
                        set_drop(p, R_NOT_IP)
                        return -1
                    ip6_input(c, p)
                else:
                    p.family = 4
                    if (p.row[p.l3] >> 4) != 4:
                        set_drop(p, R_NOT_IP)
                        return -1
                    ip4_input(c, p)
                return 0
            p.verdict = V_LOCAL
            p.reason = R_NONE
            return 0
        if hdr[3] >= (hdr[1] >> 1):
            icmp6_send(c, p, ICMP6_PARAMPROB, 0, <uint32_t>(off + 3), R_SRH_INVALID)
            return -1
        tr(c, T_SRH, off, hdr[3], NULL)
        hdr[3] -= 1
        memcpy(ip6 + 24, hdr + 8 + (<int32_t>hdr[3] << 4), 16)
        tr(c, T_ADVANCE, hdr[3], 0, ip6 + 24)
        rt = ip6_route_input_lookup(c, p, ip6 + 24, ip6 + 8, &nmiss)
        if c.dsts[rt].type == RTN_LOCAL or c.dsts[rt].type == RTN_ANYCAST:
            tr(c, T_ROUTE, rt, 6, NULL)
            if ip6[7] <= 1:
                icmp6_send(c, p, ICMP6_TIME_EXCEED, 0, 0, R_HOP_LIMIT_EXCEEDED)
                return -1
            ip6[7] -= 1
            continue
        return ip6_dst_input(c, p, rt)

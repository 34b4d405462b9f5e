# seg6 headends: net/ipv6/seg6_iptunnel.c (seg6_do_srh_inline,
# seg6_do_srh_encap, seg6_input_core): routes with `encap seg6`.


cdef bint srh_do_inline(ctx_t* c, pkt_t* p, const uint8_t* tmpl, int32_t hl) noexcept nogil:
    """seg6_do_srh_inline(): insert the SRH template after the IPv6 header;
    segments[0] = the DA, DA = segments[last entry]; the HMAC TLV when the
    template has one.  False with the packet dropped on failure."""
    cdef uint8_t* ip6
    cdef uint8_t* isrh
    if not make_headroom(c, p, hl + L2_RESERVE):
        set_drop(p, R_NO_HEADROOM)
        return False
    memmove(p.row + p.l3 - hl, p.row + p.l3, IP6_HLEN)
    p.l3 -= hl
    p.l3len += hl
    ip6 = p.row + p.l3
    isrh = ip6 + IP6_HLEN
    memcpy(isrh, tmpl, hl)
    isrh[0] = ip6[6]
    ip6[6] = NEXTHDR_ROUTING
    memcpy(isrh + 8, ip6 + 24, 16)
    memcpy(ip6 + 24, isrh + 8 + (<int32_t>isrh[4] << 4), 16)
    wr16(ip6 + 4, <uint16_t>(p.l3len - IP6_HLEN))
    if (isrh[5] & 0x08) and not seg6_push_hmac(c, ip6 + 8, isrh, hl):
        set_drop(p, R_HMAC_INVALID)
        return False
    tr(c, T_INSERT, hl, 0, ip6 + 24)
    return True


cdef inline uint32_t seg6_outer_word(const ctx_t* c, const uint8_t* l3, int family) noexcept nogil:
    """The first 32 bits of the outer header (seg6_make_flowlabel and
    ip6_flow_hdr): version 6; the inner traffic class for an IPv6 inner
    packet (0 for IPv4); flow label per net.ipv6.seg6_flowlabel: -1 zero,
    0 the inner flow label (IPv6 inner only), 1 a flow hash (the kernel's
    skb_get_hash() is keyed per boot; ours is fastpath's own stable hash)."""
    cdef uint32_t flow = 0, h, w0
    if family == 6:
        w0 = rd32(l3)
        if c.seg6_flowlabel > 0:
            h = flow_hash6(l3)
            flow = ((h << 16) | (h >> 16)) & 0xFFFFF
        elif c.seg6_flowlabel == 0:
            flow = w0 & 0xFFFFF
        return 0x60000000u | (w0 & 0x0FF00000u) | flow
    if c.seg6_flowlabel > 0:
        h = flow_hash4(l3)
        flow = ((h << 16) | (h >> 16)) & 0xFFFFF
    return 0x60000000u | flow


cdef bint srh_do_encap(ctx_t* c, pkt_t* p, const uint8_t* tmpl, int32_t hl, const uint8_t* da,
                       uint8_t proto, uint32_t w0, uint8_t hlim, uint32_t src_dev,
                       const uint8_t* route_tunsrc) noexcept nogil:
    """seg6_do_srh_encap() / seg6_do_srh_encap_red(): push an outer IPv6
    header (first word ``w0``, hop limit ``hlim``, destination ``da``) and,
    when ``hl`` > 0, the SRH template with next header ``proto``; the source
    as set_tun_src(): the route's tunsrc, else ip sr tunsrc, else source
    selection on the route's device towards ``da``; then the HMAC TLV.  The
    payload stays where it is (headroom).  False with the packet dropped."""
    cdef int32_t tot = IP6_HLEN + hl
    cdef uint8_t* ip6
    if not make_headroom(c, p, tot + L2_RESERVE):
        set_drop(p, R_NO_HEADROOM)
        return False
    p.l3 -= tot
    p.l3len += tot
    ip6 = p.row + p.l3
    wr32(ip6, w0)
    wr16(ip6 + 4, <uint16_t>(p.l3len - IP6_HLEN))
    ip6[6] = NEXTHDR_ROUTING if hl else proto
    ip6[7] = hlim
    memcpy(ip6 + 24, da, 16)
    if hl:
        memcpy(ip6 + IP6_HLEN, tmpl, hl)
        ip6[IP6_HLEN] = proto
    if route_tunsrc != NULL and not in6_is_zero(route_tunsrc):
        memcpy(ip6 + 8, route_tunsrc, 16)
    elif c.has_tunsrc:
        memcpy(ip6 + 8, c.tunsrc, 16)
    elif not ipv6_get_saddr(c, src_dev, da, ip6 + 8):
        set_drop(p, R_NO_SOURCE_ADDRESS)
        return False
    if hl and (ip6[IP6_HLEN + 5] & 0x08) and not seg6_push_hmac(c, ip6 + 8, ip6 + IP6_HLEN, hl):
        set_drop(p, R_HMAC_INVALID)
        return False
    tr(c, T_ENCAP, tot, 0, ip6 + 24)
    return True


cdef int seg6_headend(ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """seg6_input_core(): the route's encapsulation (seg6_do_srh: inline,
    encap, encap.red, l2encap, l2encap.red), then the route of the new
    destination (ip6_route_input(): rules, local table, from the ingress
    device) and dst_input(): forwarded by ip6_forward() (hop limit checked
    and decremented on the outer header, Packet Too Big against the egress
    MTU: the error goes to the outer source, normally our own address, so
    nothing leaves), delivered, or the next behaviour.  The inner packet is
    not forwarded first: an IPv4 inner packet keeps its TTL."""
    cdef const fp_dst* d = &c.dsts[rt]
    cdef const fp_s6l* s
    cdef const fp_nh* rnh
    cdef const fp_dev* rdev
    cdef uint8_t* l3 = p.row + p.l3
    cdef uint8_t macs[12]
    cdef uint8_t proto, hlim
    cdef uint32_t w0, rt2, nmiss
    cdef bint l2 = False
    cdef int fam = p.family
    if d.encap >= c.ns6l or c.s6l[d.encap].action != S6_HEADEND:
        set_drop(p, R_NOT_SUPPORTED)
        return -1
    s = &c.s6l[d.encap]
    p.nencap += 1
    if p.nencap > MAX_HEADEND_DEPTH:
        set_drop(p, R_SEG6_LOOP)
        return -1
    if s.mode == SEG6_MODE_INLINE:
        if fam != 6:
            set_drop(p, R_NOT_SUPPORTED)          # -EINVAL (inline routes are IPv6 only)
            return -1
        if not srh_do_inline(c, p, c.srh_blob + s.srh_off, s.srh_len):
            return -1
    else:
        rnh = dst_nexthop(c, d, 0)
        # outer fields from the L3 header (the skb's network header), for
        # the L2 modes too
        w0 = seg6_outer_word(c, l3, fam)
        if fam == 6:
            hlim = l3[7]
            proto = 41
        else:
            # ip6_dst_hoplimit(): the route's hoplimit metric, else the
            # IPv6 hop_limit of the route's device
            rdev = dev_get(c, rnh.oif) if rnh != NULL else NULL
            hlim = d.hoplimit if d.hoplimit else (rdev.hop_limit if rdev != NULL and rdev.hop_limit
                                                  else c.hop_limit)
            proto = 4
        if s.mode == SEG6_MODE_L2ENCAP or s.mode == SEG6_MODE_L2ENCAP_RED:
            # the frame as received goes inside (mac_len bytes: none on a
            # raw/TUN batch; the untagged Ethernet header on an Ethernet one)
            proto = 143
            if c.linktype == LINK_ETHERNET:
                l2 = True
                memcpy(macs, p.row + p.start, 12)
                if not make_headroom(c, p, 14 + IP6_HLEN + s.srh_len + L2_RESERVE):
                    set_drop(p, R_NO_HEADROOM)
                    return -1
                p.l3 -= 14
                p.l3len += 14
                memcpy(p.row + p.l3, macs, 12)
                wr16(p.row + p.l3 + 12, 0x86DD if fam == 6 else 0x0800)
        if not srh_do_encap(c, p, c.srh_blob + s.srh_off, s.srh_len, s.nh6, proto, w0, hlim,
                            rnh.oif if rnh != NULL else 0, s.tunsrc):
            return -1
        p.family = 6
    # ip6_route_input() on the new header, then dst_input()
    l3 = p.row + p.l3
    rt2 = ip6_route_input_lookup(c, p, l3 + 24, l3 + 8, &nmiss)
    return ip6_dst_input(c, p, rt2)

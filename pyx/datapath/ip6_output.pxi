# IPv6 forwarding: net/ipv6/ip6_output.c (ip6_forward and the MTU checks of
# ip6_fragment).


cdef int ip6_forward(ctx_t* c, pkt_t* p, const fp_dst* d) noexcept nogil:
    """ip6_forward() after a unicast route was found."""
    cdef const fp_nh* nh
    if not c.fwd6:
        set_drop(p, R_FORWARDING_DISABLED)
        return -1
    if d.nh_count > 1 and p.strict_oif:
        nh = dst_nexthop_strict(c, d, mp_hash6(c, p), p.strict_oif)
    else:
        nh = dst_nexthop(c, d, mp_hash6(c, p) if d.nh_count > 1 else 0)
    if nh == NULL:
        set_drop(p, R_NO_ROUTE)
        return -1
    return ip6_forward_out(c, p, d.mtu, nh.oif, nh.gw if (nh.flags & NHF_GATEWAY) else NULL)


cdef int ip6_forward_via(ctx_t* c, pkt_t* p, uint32_t oif, const uint8_t* gw) noexcept nogil:
    """ip6_forward() to a nexthop given by interface and address."""
    if not c.fwd6:
        set_drop(p, R_FORWARDING_DISABLED)
        return -1
    return ip6_forward_out(c, p, 0, oif, gw)


cdef int ip6_forward_out(ctx_t* c, pkt_t* p, uint32_t route_mtu, uint32_t oif,
                         const uint8_t* gw) noexcept nogil:
    """The checks of ip6_forward() (and ip6_fragment()'s) towards ``oif``."""
    cdef uint8_t* ip6 = p.row + p.l3
    cdef const fp_dev* odev = dev_get(c, oif)
    cdef uint32_t mtu
    if odev == NULL or not (odev.flags & DEVF_UP):
        set_drop(p, R_INTERFACE_DOWN)
        return -1
    if ip6[7] <= 1:
        icmp6_send(c, p, ICMP6_TIME_EXCEED, 0, 0, R_HOP_LIMIT_EXCEEDED)
        return -1
    if oif != p.iif:
        # "This check is security critical": no forwarding of unspecified,
        # multicast or loopback sources; link-local ones get an error.
        if in6_is_zero(ip6 + 8) or in6_is_multicast(ip6 + 8) or in6_is_loopback(ip6 + 8):
            set_drop(p, R_SADDR_INVALID)
            return -1
        if in6_is_linklocal(ip6 + 8):
            icmp6_send(c, p, ICMP6_DEST_UNREACH, ICMP6_NOT_NEIGHBOUR, 0, R_SOURCE_LINK_LOCAL)
            return -1
    # ip6_dst_mtu_maybe_forward(dst, true): the device's MTU (a route's
    # unlocked mtu metric is ignored when forwarding)
    mtu = odev.mtu
    if mtu < IPV6_MIN_MTU:
        mtu = IPV6_MIN_MTU
    if <uint32_t>p.l3len > mtu:
        icmp6_send(c, p, ICMP6_PKT_TOOBIG, 0, mtu, R_PKT_TOO_BIG)
        return -1
    ip6[7] -= 1
    # ip6_fragment() then applies the route's MTU: Packet Too Big about the
    # packet as it stands, hop limit already decremented
    if route_mtu and <uint32_t>p.l3len > route_mtu:
        mtu = route_mtu if route_mtu >= IPV6_MIN_MTU else IPV6_MIN_MTU
        if <uint32_t>p.l3len > mtu:
            icmp6_send(c, p, ICMP6_PKT_TOOBIG, 0, mtu, R_PKT_TOO_BIG)
            return -1
    p.verdict = V_FORWARD
    p.reason = R_NONE
    p.oif = oif
    if gw != NULL:
        memcpy(p.nexthop, gw, 16)
    elif p.has_known_nh:
        memcpy(p.nexthop, p.known_nh, 16)
    else:
        memcpy(p.nexthop, ip6 + 24, 16)
    tr(c, T_FORWARD, oif, ip6[7], p.nexthop)
    return 0

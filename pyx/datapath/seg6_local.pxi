# seg6local behaviours: net/ipv6/seg6_local.c -- one function per
# behaviour, the helpers it names (advance_nextseg, seg6_lookup_any_nexthop,
# decap_and_validate, the flavors), the counters and the dispatcher
# (seg6_local_input). A behaviour's row of the kernel's seg6_action_table is
# in fastpath/config/lwtunnel.py (SEG6LOCAL_ACTIONS); its dispatch is
# seg6local_input.


cdef inline void advance_nextseg(uint8_t* ip6, int32_t srhoff) noexcept nogil:
    """SL--, DA = segments[SL]."""
    cdef uint8_t* srh = ip6 + srhoff
    srh[3] -= 1
    memcpy(ip6 + 24, srh + 8 + (<int32_t>srh[3] << 4), 16)


cdef uint32_t seg6_lookup(ctx_t* c, pkt_t* p, const uint8_t* nhaddr, int32_t slot,
                          bint by_table, bint local_delivery) noexcept nogil:
    """seg6_lookup_any_nexthop(): the route for ``nhaddr`` (or the DA),
    through the rules or in one table; a route to this host (dev lo) is
    replaced by the blackhole entry unless local delivery is allowed; a
    table that does not exist gives the blackhole entry too."""
    cdef const uint8_t* ip6 = p.row + p.l3
    cdef const uint8_t* daddr = nhaddr if nhaddr != NULL else ip6 + 24
    cdef uint32_t rt, v, nmiss = 0
    if not by_table:
        rt = ip6_route_input_lookup(c, p, daddr, ip6 + 8, &nmiss)
        if c.refmode != MODE_NOREF:
            # without RT6_LOOKUP_F_DST_NOREF: every table that misses holds
            # and puts ip6_null_entry, the route found is held
            null_hold_put(c, nmiss)
            if not dst_hold_pkt(c, p, rt):
                c.hold_fail += 1
                rt = fib6_walk(c, daddr, ip6 + 8, p.iif, &nmiss, p,
                               p.iif if rt6_need_strict(daddr) else 0, c.dsts[rt].table)
                if rt == DST_IP6_NULL:
                    dst_hold_pkt(c, p, rt)
    elif slot < 0 or <uint32_t>slot >= c.nlpm6:
        p.strict_oif = 0
        tr(c, T_TABLE, 0xFFFFFFFFu, DST_IP6_BLACKHOLE, daddr)
        rt = DST_IP6_BLACKHOLE
        if c.refmode != MODE_NOREF:
            dst_hold_pkt(c, p, rt)
        return rt
    else:
        # ip6_pol_route(table, oif 0) without RT6_LOOKUP_F_IFACE: not strict
        p.strict_oif = 0
        rt = table_route(c, lpm6_cached(c, slot, daddr), DST_IP6_NULL)
        tr(c, T_TABLE, slot, rt, daddr)
        dst_use(c, rt)
        if c.refmode != MODE_NOREF and not dst_hold_pkt(c, p, rt):
            c.hold_fail += 1
            rt = DST_IP6_NULL
            dst_hold_pkt(c, p, rt)
    note_route(c, p, rt)
    if not local_delivery and (c.dsts[rt].type == RTN_LOCAL or c.dsts[rt].type == RTN_ANYCAST):
        if c.refmode != MODE_NOREF:
            dst_hold_pkt(c, p, DST_IP6_BLACKHOLE)
        return DST_IP6_BLACKHOLE
    return rt


cdef bint decap_and_validate(const ctx_t* c, pkt_t* p, int proto) noexcept nogil:
    """decap_and_validate(): no SRH or SL = 0 (with a valid HMAC if any),
    then strip everything up to the inner ``proto`` header."""
    cdef int32_t srhoff = seg6_get_srh(p, False), off = 0
    cdef const uint8_t* ip6 = p.row + p.l3
    if srhoff >= 0 and ip6[srhoff + 3] > 0:
        p.reason = R_SRH_SL_NONZERO
        return False
    if srhoff >= 0 and not seg6_hmac_validate(c, p):
        if p.reason == R_NONE:
            p.reason = R_HMAC_INVALID
        return False
    if ipv6_find_hdr(ip6, p.l3len, proto, False, &off) < 0:
        p.reason = R_INNER_MISSING
        return False
    p.l3 += off
    p.l3len -= off
    tr(c, T_DECAP, proto, off, NULL)
    return True


cdef bint decap(const ctx_t* c, pkt_t* p, int proto, int32_t min_inner) noexcept nogil:
    """decap_and_validate() and pskb_may_pull() of the inner header; the
    packet is dropped (with the reason found) when either fails."""
    if decap_and_validate(c, p, proto) and p.l3len >= min_inner:
        return True
    set_drop(p, p.reason if p.reason != R_NONE else R_TRUNCATED)
    return False


cdef int32_t end_get_srh(const ctx_t* c, pkt_t* p) noexcept nogil:
    """get_and_validate_srh(): the SRH to process (SL > 0), HMAC checked."""
    cdef int32_t srhoff = seg6_get_srh(p, True)
    if srhoff < 0:
        p.reason = R_SRH_INVALID if seg6_get_srh(p, False) < 0 and _has_rh(p) else R_SRH_MISSING
        return -1
    if not seg6_hmac_validate(c, p):
        if p.reason == R_NONE:
            p.reason = R_HMAC_INVALID
        return -1
    return srhoff


cdef bint _has_rh(const pkt_t* p) noexcept nogil:
    """Whether the packet carries a routing header at all (for the drop
    reason only: SL = 0 or an invalid SRH are both 'no SRH' to the kernel)."""
    cdef int32_t off = 0
    return ipv6_find_hdr(p.row + p.l3, p.l3len, NEXTHDR_ROUTING, False, &off) >= 0


cdef inline bint next_csid_arg_zero(const uint8_t* da, const fp_s6l* s) noexcept nogil:
    cdef int k
    for k in range((s.lblen >> 3) + (s.nflen >> 3), 16):
        if da[k]:
            return False
    return True


cdef inline void next_csid_advance(uint8_t* da, const fp_s6l* s) noexcept nogil:
    """seg6_next_csid_advance_arg(): shift the argument left by one
    node-function length, zero fill."""
    cdef int blk = s.lblen >> 3, fnc = s.nflen >> 3
    memmove(da + blk, da + blk + fnc, 16 - blk - fnc)
    memset(da + 16 - fnc, 0, fnc)


cdef bint seg6_pop_srh(pkt_t* p, int32_t srhoff) noexcept nogil:
    """seg6_pop_srh(): remove the SRH and give its next header to the header
    before it; refuses (False) when a Fragment or AH header precedes it."""
    cdef uint8_t* ip6 = p.row + p.l3
    cdef int32_t srhlen = (<int32_t>ip6[srhoff + 1] + 1) << 3
    cdef uint8_t srh_nexthdr = ip6[srhoff]
    cdef int32_t off = IP6_HLEN, fix
    cdef uint8_t nexthdr = ip6[6]
    if srhoff < IP6_HLEN:
        return False
    if nexthdr == NEXTHDR_ROUTING:
        fix = 6
    else:
        while True:
            if not ipv6_ext_hdr(nexthdr) or nexthdr == NEXTHDR_NONE or off + 2 > p.l3len:
                return False
            if ip6[off] == NEXTHDR_ROUTING:
                fix = off
                break
            if nexthdr == NEXTHDR_FRAGMENT or nexthdr == NEXTHDR_AUTH:
                return False
            nexthdr = ip6[off]
            off += (<int32_t>ip6[off + 1] + 1) << 3
    ip6[fix] = srh_nexthdr
    memmove(ip6 + srhlen, ip6, srhoff)
    p.l3 += srhlen
    p.l3len -= srhlen
    wr16(p.row + p.l3 + 4, <uint16_t>(p.l3len - IP6_HLEN))
    return True


cdef int end_finish(ctx_t* c, pkt_t* p, const fp_s6l* s, const uint8_t* nh6) noexcept nogil:
    """input_action_end_finish / end_x_finish: look the new DA (or End.X's
    nexthop) up and hand the packet to its route."""
    cdef uint32_t rt
    cdef bint known = nh6 != NULL
    if s.action == S6_END_X and s.oif:
        # End.X with oif: the nexthop is on that interface, as the kernel's
        # output lookup constrained to oif finds it
        return ip6_forward_via(c, p, s.oif, s.nh6)
    if s.action == S6_END_T:
        rt = seg6_lookup(c, p, NULL, s.slot6, True, False)
    else:
        rt = seg6_lookup(c, p, nh6, -1, False, False)
    if known and c.dsts[rt].type == RTN_UNICAST:
        memcpy(p.known_nh, nh6, 16)
        p.has_known_nh = True
    return ip6_dst_input(c, p, rt)


cdef int end_core(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    """input_action_end_core / end_x_core / end_t: validated SRH with SL > 0,
    advance, look up."""
    cdef int32_t srhoff = end_get_srh(c, p)
    if srhoff < 0:
        set_drop(p, p.reason)
        return -1
    tr(c, T_SRH, srhoff, p.row[p.l3 + srhoff + 3], NULL)
    advance_nextseg(p.row + p.l3, srhoff)
    tr(c, T_ADVANCE, p.row[p.l3 + srhoff + 3], 0, p.row + p.l3 + 24)
    return end_finish(c, p, s, s.nh6 if s.action == S6_END_X else NULL)


cdef int end_flavors(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    """End, End.X with flavors: NEXT-C-SID first (argument shift when
    the argument is non-zero), then the RFC 8986 flavors (end_flv8986_core):
    PSP pops the SRH at SL = 1; USP pops it at SL = 0 and USD decapsulates
    at SL = 0 (RFC 8986 4.16.2/4.16.3: not in the kernel)."""
    cdef uint8_t* ip6 = p.row + p.l3
    cdef int32_t srhoff
    if s.flavors & FLV_NEXT_CSID:
        if not next_csid_arg_zero(ip6 + 24, s):
            next_csid_advance(ip6 + 24, s)
            tr(c, T_CSID, 0, 0, ip6 + 24)
            return end_finish(c, p, s, s.nh6 if s.action == S6_END_X else NULL)
        if not (s.flavors & (FLV_PSP | FLV_USP | FLV_USD)):
            return end_core(c, p, s)
    srhoff = seg6_get_srh(p, False)
    if srhoff < 0:
        set_drop(p, R_SRH_INVALID if _has_rh(p) else R_SRH_MISSING)
        return -1
    if not seg6_hmac_validate(c, p):
        set_drop(p, p.reason if p.reason != R_NONE else R_HMAC_INVALID)
        return -1
    if ip6[srhoff + 3] == 0:
        if s.flavors & FLV_USD:
            return end_usd(c, p, s)
        if s.flavors & FLV_USP:
            if not seg6_pop_srh(p, srhoff):
                set_drop(p, R_SRH_POP_REFUSED)
                return -1
            tr(c, T_POP, srhoff, 2, NULL)
            p.verdict = V_LOCAL       # the upper layer of this node processes it
            p.reason = R_NONE
            return 0
        set_drop(p, R_SRH_SL_ZERO)
        return -1
    tr(c, T_SRH, srhoff, ip6[srhoff + 3], NULL)
    advance_nextseg(ip6, srhoff)
    tr(c, T_ADVANCE, ip6[srhoff + 3], 0, ip6 + 24)
    if ip6[srhoff + 3] == 0 and (s.flavors & FLV_PSP):
        if not seg6_pop_srh(p, srhoff):
            set_drop(p, R_SRH_POP_REFUSED)
            return -1
        tr(c, T_POP, srhoff, 1, NULL)
    return end_finish(c, p, s, s.nh6 if s.action == S6_END_X else NULL)


cdef int end_usd(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    """USD (RFC 8986 4.16.3): at SL = 0, decapsulate the inner IPv6 or IPv4
    packet and forward it by its own destination."""
    cdef int32_t off = 0
    cdef int nh = ipv6_find_hdr(p.row + p.l3, p.l3len, -1, False, &off)
    if nh == 41 and p.l3len - off >= IP6_HLEN:
        p.l3 += off
        p.l3len -= off
        return seg6_ip6_inner(c, p, NULL, -1, False, True)
    if nh == 4 and p.l3len - off >= IP4_HLEN:
        p.l3 += off
        p.l3len -= off
        if not inner_ip4_ok(p):
            return -1
        p.family = 4
        return ip4_route_input(c, p, rd32(p.row + p.l3 + 16), -1, True, False)
    set_drop(p, R_INNER_MISSING)
    return -1


cdef int seg6_ip6_inner(ctx_t* c, pkt_t* p, const uint8_t* nh6, int32_t slot, bint by_table,
                        bint local_delivery) noexcept nogil:
    """Route a decapsulated IPv6 packet (End.DX6 / End.DT6 / USD)."""
    cdef uint32_t rt = seg6_lookup(c, p, nh6, slot, by_table, local_delivery)
    if nh6 != NULL and c.dsts[rt].type == RTN_UNICAST:
        memcpy(p.known_nh, nh6, 16)
        p.has_known_nh = True
    return ip6_dst_input(c, p, rt)


cdef int end_dx6(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    if not decap(c, p, 41, IP6_HLEN):
        return -1
    return seg6_ip6_inner(c, p, NULL if in6_is_zero(s.nh6) else s.nh6, -1, False, False)


cdef inline int32_t end_dt_vrf(const ctx_t* c, const fp_s6l* s) noexcept nogil:
    """end_dt_get_vrf_rcu(): the VRF device a vrftable record delivers
    into, 0 when none is bound to its table (drop), -1 for the table-only
    behaviour (no VRF device exists at all, or DT6 ``table``)."""
    cdef int32_t v
    if c.s6l_vrf == NULL:
        return -1
    v = c.s6l_vrf[s - c.s6l]
    if v > 0 and <uint32_t>v >= c.ndev:
        return 0
    return v


cdef int end_dt6(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    cdef int32_t vrf
    if not decap(c, p, 41, IP6_HLEN):
        return -1
    vrf = end_dt_vrf(c, s)
    if vrf >= 0:
        # end_dt_vrf_core: the packet is received by the VRF device, then
        # seg6_lookup_any_nexthop(table 0) through the rules from it (the
        # l3mdev rule gives the VRF's table; its local routes deliver)
        if vrf == 0:
            set_drop(p, R_NO_VRF)
            return -1
        p.iif = <uint32_t>vrf
        tr(c, T_VRF, <uint32_t>vrf, 0, NULL)
        return seg6_ip6_inner(c, p, NULL, -1, False, True)
    return seg6_ip6_inner(c, p, NULL, s.slot6, True, True)


cdef inline bint inner_ip4_ok(pkt_t* p) noexcept nogil:
    """What the kernel requires of a decapsulated IPv4 header before it
    forwards it (observed: version 4, IHL >= 5, the header within the
    packet; the checksum and total length are not checked)."""
    cdef const uint8_t* ip4 = p.row + p.l3
    if (ip4[0] >> 4) != 4 or (ip4[0] & 0x0F) < 5 or ((ip4[0] & 0x0F) << 2) > p.l3len:
        set_drop(p, R_IP_HDR_INVALID)
        return False
    return True


cdef int end_dx4(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    cdef uint32_t nh4
    if not decap(c, p, 4, IP4_HLEN):
        return -1
    if not inner_ip4_ok(p):
        return -1
    p.family = 4
    nh4 = rd32(s.nh4)
    return ip4_route_input(c, p, nh4 if nh4 else rd32(p.row + p.l3 + 16), -1, True, False)


cdef int end_dt4(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    """End.DT4 in VRF mode: into the VRF device bound to the vrftable
    (ip_route_input from it: the rules, the l3mdev rule giving the VRF's
    table); without any VRF device the inner packet is looked up in the
    vrftable only (local routes deliver)."""
    cdef int32_t vrf
    if not decap(c, p, 4, IP4_HLEN):
        return -1
    if not inner_ip4_ok(p):
        return -1
    p.family = 4
    vrf = end_dt_vrf(c, s)
    if vrf >= 0:
        if vrf == 0:
            set_drop(p, R_NO_VRF)
            return -1
        p.iif = <uint32_t>vrf
        tr(c, T_VRF, <uint32_t>vrf, 0, NULL)
        return ip4_route_input(c, p, rd32(p.row + p.l3 + 16), -1, True, False)
    if s.slot4 < 0:
        set_drop(p, R_NO_ROUTE)
        return -1
    return ip4_route_input(c, p, rd32(p.row + p.l3 + 16), s.slot4, True, False)


cdef int end_dt46(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    cdef int32_t off = 0
    cdef int nh = ipv6_find_hdr(p.row + p.l3, p.l3len, -1, False, &off)
    if nh == 4:
        return end_dt4(c, p, s)
    if nh == 41:
        return end_dt6(c, p, s)
    set_drop(p, R_INNER_MISSING)
    return -1


cdef int end_dx2(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    """End.DX2: the inner Ethernet frame leaves on oif as it is."""
    cdef const fp_dev* odev
    cdef const uint8_t* eth
    if not decap(c, p, 143, 14):
        return -1
    eth = p.row + p.l3
    if rd16(eth + 12) < 0x0600:              # eth_proto_is_802_3
        set_drop(p, R_INNER_MISSING)
        return -1
    odev = dev_get(c, s.oif)
    if odev == NULL or not (odev.flags & DEVF_ETHER):
        set_drop(p, R_NOT_ETHERNET)
        return -1
    if not (odev.flags & DEVF_UP):
        set_drop(p, R_INTERFACE_DOWN)
        return -1
    if odev.l3mdev == odev.ifindex:
        # a VRF device (ARPHRD_ETHER, so input_action_end_dx2() sends):
        # vrf_xmit() -> is_ip_tx_frame() routes the skb as an IP packet,
        # but its network header is the frame's first byte (reset by
        # decap_and_validate()), so the Ethernet header is taken for the IP
        # header; a non-IP EtherType, or that lookup failing in the VRF's
        # table, drops it (vrf_tx_error(), NET_XMIT_DROP: a seg6local
        # error).  Modelled as always dropped: a route in the VRF's table
        # for the bytes at the frame's "destination address" would send a
        # mangled packet, which fastpath does not imitate
        set_drop(p, R_NOT_ETHERNET)
        return -1
    if <uint32_t>(p.l3len - 14) > odev.mtu:
        set_drop(p, R_PKT_TOO_BIG)
        return -1
    p.verdict = V_FORWARD
    p.reason = R_NONE
    p.oif = s.oif
    p.l2_done = True
    return 0


cdef int end_b6(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    """End.B6 (seg6_do_srh_inline): insert the policy's SRH after the IPv6
    header without advancing the packet's own SRH; segments[0] = the DA,
    DA = segments[last entry]."""
    cdef int32_t srhoff = end_get_srh(c, p)
    if srhoff < 0:
        set_drop(p, p.reason)
        return -1
    if not srh_do_inline(c, p, c.srh_blob + s.srh_off, s.srh_len):
        return -1
    return ip6_dst_input(c, p, seg6_lookup(c, p, NULL, -1, False, False))


cdef int end_b6_encap(ctx_t* c, pkt_t* p, const fp_s6l* s, const fp_dst* d) noexcept nogil:
    """End.B6.Encaps: advance, then seg6_do_srh_encap(): an outer IPv6 header
    (traffic class, flow label per seg6_flowlabel, hop limit of the inner)
    and the policy's SRH; source from ip sr tunsrc or the route's device."""
    cdef int32_t srhoff = end_get_srh(c, p)
    cdef const uint8_t* tmpl = c.srh_blob + s.srh_off
    cdef const uint8_t* inner
    cdef uint8_t da[16]
    cdef const fp_nh* rnh
    if srhoff < 0:
        set_drop(p, p.reason)
        return -1
    advance_nextseg(p.row + p.l3, srhoff)
    inner = p.row + p.l3
    memcpy(da, tmpl + 8 + (<int32_t>tmpl[4] << 4), 16)
    rnh = dst_nexthop(c, d, 0)
    if not srh_do_encap(c, p, tmpl, s.srh_len, da, 41, seg6_outer_word(c, inner, 6), inner[7],
                        rnh.oif if rnh != NULL else 0, NULL):
        return -1
    return ip6_dst_input(c, p, seg6_lookup(c, p, NULL, -1, False, False))


cdef inline void s6l_count(const ctx_t* c, const fp_dst* d, const fp_s6l* s, int rc,
                           int32_t len0) noexcept nogil:
    """The kernel's SEG6_LOCAL_COUNTERS of a route configured with
    ``count``: packets and bytes (as they arrived) of a packet processed
    successfully (``rc`` 0), or an error."""
    if s.count and c.s6l_counters != NULL:
        if rc == 0:
            c.s6l_counters[3 * d.encap] += 1
            c.s6l_counters[3 * d.encap + 1] += <uint32_t>len0
        else:
            c.s6l_counters[3 * d.encap + 2] += 1


cdef int seg6local_input(ctx_t* c, pkt_t* p, const fp_dst* d) noexcept nogil:
    """seg6_local_input_core(): the behaviour of the route, then the
    per-route counters (packets and bytes before processing, or errors)."""
    cdef const fp_s6l* s
    cdef int32_t len0 = p.l3len
    cdef int rc
    if d.encap >= c.ns6l:
        set_drop(p, R_NOT_SUPPORTED)
        return -1
    p.depth += 1
    if p.depth > MAX_SEG6LOCAL_DEPTH:
        set_drop(p, R_SEG6_LOOP)
        return -1
    s = &c.s6l[d.encap]
    tr(c, T_S6L, s.action, d.encap, NULL)
    # End.T's row of seg6_action_table has no SEG6_F_LOCAL_FLAVORS among
    # its optattrs: parse_nla_optional_attrs() never reads the attribute,
    # so the kernel takes "End.T ... flavors psp" and runs plain
    # input_action_end_t(); only End and End.X have flavors
    if s.flavors and (s.action == S6_END or s.action == S6_END_X):
        rc = end_flavors(c, p, s)
    elif s.action == S6_END or s.action == S6_END_X or s.action == S6_END_T:
        rc = end_core(c, p, s)
    elif s.action == S6_END_DX6:
        rc = end_dx6(c, p, s)
    elif s.action == S6_END_DX4:
        rc = end_dx4(c, p, s)
    elif s.action == S6_END_DT6:
        rc = end_dt6(c, p, s)
    elif s.action == S6_END_DT4:
        rc = end_dt4(c, p, s)
    elif s.action == S6_END_DT46:
        rc = end_dt46(c, p, s)
    elif s.action == S6_END_DX2:
        rc = end_dx2(c, p, s)
    elif s.action == S6_END_B6:
        rc = end_b6(c, p, s)
    elif s.action == S6_END_B6_ENCAP:
        rc = end_b6_encap(c, p, s, d)
    else:
        set_drop(p, R_NOT_SUPPORTED)
        rc = -1
    s6l_count(c, d, s, rc, len0)
    return rc

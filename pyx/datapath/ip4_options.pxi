# IPv4 options: net/ipv4/ip_options.c (__ip_options_compile,
# ip_forward_options, __ip_options_echo, ip_options_build) and
# ip_input.c's ip_rcv_options().  The compiled state is the packet's
# IPCB(skb)->opt (pkt_t.opt4); offsets are from the start of the IP header.
#
# Not modelled (the packet is dropped as not_supported): CIPSO (the kernel
# here has NETLABEL: its validation depends on the configured DOIs).
# Source routes (LSRR/SSRR) are dropped as the kernel does with its default
# net.ipv4.conf.all.accept_source_route=0 (reason source_route).

cdef enum:
    IPOPT_END = 0
    IPOPT_NOOP = 1
    IPOPT_RR = 7
    IPOPT_TIMESTAMP = 68
    IPOPT_LSRR = 131
    IPOPT_CIPSO = 134
    IPOPT_SSRR = 137
    IPOPT_RA = 148
    IPOPT_TS_TSONLY = 0
    IPOPT_TS_TSANDADDR = 1
    IPOPT_TS_PRESPEC = 3
    ICMP_PARAMETERPROB = 12


cdef inline void ip4_midtime(const ctx_t* c, const pkt_t* p, uint8_t* out) noexcept nogil:
    """inet_current_timestamp(): milliseconds since midnight UTC, here of the
    packet's timestamp (a capture's or the wire's receive time; 0 without)."""
    cdef int64_t ts = pkt_ts(c, p)
    if ts < 0:
        ts = 0
    wr32(out, <uint32_t>(((ts // 1000000000) % 86400) * 1000 + (ts % 1000000000) // 1000000))


cdef inline bint ip4_addr_unicast(const ctx_t* c, uint32_t addr) noexcept nogil:
    """inet_addr_type(net, addr) == RTN_UNICAST: not 0/8, the limited
    broadcast or multicast, and not a local or broadcast route of the local
    table (the table of the first rule that looks up table 255)."""
    cdef uint32_t k, v
    cdef int32_t slot
    if (addr >> 24) == 0 or addr == 0xFFFFFFFFu or (addr >> 28) == 0xE:
        return False
    for k in range(c.nrules4):
        if c.rules4[k].action == FR_ACT_TO_TBL and c.rules4[k].table == 255:
            slot = c.rules4[k].slot
            if slot < 0 or <uint32_t>slot >= c.nlpm4:
                break
            v = lpm4_lookup(c.lpm4[slot].tbl24, c.lpm4[slot].groups, addr)
            if v != 0 and v < c.ndst and (c.dsts[v].type == RTN_LOCAL or c.dsts[v].type == RTN_BROADCAST):
                return False
            break
    return True


cdef inline uint32_t fib_res_prefsrc4(const ctx_t* c, const fp_dst* d) noexcept nogil:
    """fib_result_prefsrc(): the route's preferred source, else its first
    nexthop's (inet_select_addr on its device, towards its gateway); 0 when
    there is none."""
    cdef uint8_t out[4]
    cdef const fp_nh* nh
    if d.prefsrc[0] or d.prefsrc[1] or d.prefsrc[2] or d.prefsrc[3]:
        return rd32(d.prefsrc)
    if d.nh_count == 0 or d.nh_first >= c.nnh:
        return 0
    nh = &c.nhs[d.nh_first]
    if ipv4_get_saddr(c, nh.oif, rd32(nh.gw) if nh.flags & NHF_GATEWAY else 0, out):
        return rd32(out)
    return 0


cdef uint32_t ip4_spec_dst(const ctx_t* c, const pkt_t* p, bint local) noexcept nogil:
    """fib_compute_spec_dst(): the destination for a packet to one of our
    addresses, else the preferred source of the route back to its source
    (looked up as from lo), else an address of the ingress device."""
    cdef const uint8_t* ip4 = p.row + p.l3
    cdef uint32_t saddr = rd32(ip4 + 12)
    cdef uint32_t rt
    cdef uint8_t t
    cdef uint8_t out[4]
    if local:
        return rd32(ip4 + 16)
    if (saddr >> 24) != 0:
        rt = fib4_lookup(c, saddr, 0, l3mdev_out(c, p.iif))
        t = c.dsts[rt].type
        if rt >= DST_FIRST_ROUTE and t != RTN_UNREACHABLE and t != RTN_PROHIBIT and t != RTN_BLACKHOLE \
                and t != RTN_THROW:
            return fib_res_prefsrc4(c, &c.dsts[rt])
    if ipv4_get_saddr(c, p.iif, saddr, out):
        return rd32(out)
    return 0


cdef int ip4_options_compile(const ctx_t* c, pkt_t* p, bint local, uint32_t* info) noexcept nogil:
    """__ip_options_compile() on a received packet (with its input route):
    0, -1 with the Parameter Problem pointer in ``info``, or -2 for an
    option not modelled.  Writes the receiving address and the time into
    RR and TS options as the kernel does (the header checksum is left
    stale: ip_forward_options recomputes it)."""
    cdef uint8_t* iph = p.row + p.l3
    cdef ip4opt_t* opt = &p.opt4
    cdef int32_t l = opt.optlen
    cdef int32_t off = IP4_HLEN
    cdef int32_t optlen
    cdef uint8_t* o
    cdef uint32_t spec = 0, addr
    cdef bint have_spec = False
    cdef int32_t pp = -1
    cdef uint8_t* timeptr
    cdef uint32_t overflow
    while l > 0:
        o = iph + off
        if o[0] == IPOPT_END:
            off += 1
            l -= 1
            while l > 0:
                if iph[off] != IPOPT_END:
                    iph[off] = IPOPT_END
                    opt.is_changed = 1
                off += 1
                l -= 1
            break
        if o[0] == IPOPT_NOOP:
            off += 1
            l -= 1
            continue
        if l < 2:
            pp = off
            break
        optlen = o[1]
        if optlen < 2 or optlen > l:
            pp = off
            break
        if o[0] == IPOPT_SSRR or o[0] == IPOPT_LSRR:
            if optlen < 3:
                pp = off + 1
                break
            if o[2] < 4:
                pp = off + 2
                break
            if opt.srr:
                pp = off
                break
            opt.is_strictroute = o[0] == IPOPT_SSRR
            opt.srr = <uint8_t>off
        elif o[0] == IPOPT_RR:
            if opt.rr:
                pp = off
                break
            if optlen < 3:
                pp = off + 1
                break
            if o[2] < 4:
                pp = off + 2
                break
            if o[2] <= optlen:
                if o[2] + 3 > optlen:
                    pp = off + 2
                    break
                if not have_spec:
                    spec = ip4_spec_dst(c, p, local)
                    have_spec = True
                wr32(o + o[2] - 1, spec)
                opt.is_changed = 1
                o[2] += 4
                opt.rr_needaddr = 1
            opt.rr = <uint8_t>off
        elif o[0] == IPOPT_TIMESTAMP:
            if opt.ts:
                pp = off
                break
            if optlen < 4:
                pp = off + 1
                break
            if o[2] < 5:
                pp = off + 2
                break
            if o[2] <= optlen:
                timeptr = NULL
                if o[2] + 3 > optlen:
                    pp = off + 2
                    break
                if (o[3] & 0xF) == IPOPT_TS_TSONLY:
                    timeptr = o + o[2] - 1
                    opt.ts_needtime = 1
                    o[2] += 4
                elif (o[3] & 0xF) == IPOPT_TS_TSANDADDR:
                    if o[2] + 7 > optlen:
                        pp = off + 2
                        break
                    if not have_spec:
                        spec = ip4_spec_dst(c, p, local)
                        have_spec = True
                    wr32(o + o[2] - 1, spec)
                    timeptr = o + o[2] + 3
                    opt.ts_needaddr = 1
                    opt.ts_needtime = 1
                    o[2] += 8
                elif (o[3] & 0xF) == IPOPT_TS_PRESPEC:
                    if o[2] + 7 > optlen:
                        pp = off + 2
                        break
                    addr = rd32(o + o[2] - 1)
                    if not ip4_addr_unicast(c, addr):
                        timeptr = o + o[2] + 3
                        opt.ts_needtime = 1
                        o[2] += 8
                if timeptr != NULL:
                    ip4_midtime(c, p, timeptr)
                    opt.is_changed = 1
            elif (o[3] & 0xF) != IPOPT_TS_PRESPEC:
                overflow = o[3] >> 4
                if overflow == 15:
                    pp = off + 3
                    break
                o[3] = (o[3] & 0xF) | ((overflow + 1) << 4)
                opt.is_changed = 1
            opt.ts = <uint8_t>off
        elif o[0] == IPOPT_RA:
            if optlen < 4:
                pp = off + 1
                break
            if o[2] == 0 and o[3] == 0:
                opt.router_alert = <uint8_t>off
        elif o[0] == IPOPT_CIPSO:
            return -2
        l -= optlen
        off += optlen
    if pp < 0:
        return 0
    info[0] = <uint32_t>pp << 24
    return -1


cdef int ip4_rcv_options(ctx_t* c, pkt_t* p, bint local, bint bcast) noexcept nogil:
    """ip_rcv_options() after the input route was found: 0 to go on, -1
    when the packet was dropped or turned into a Parameter Problem
    (``bcast``: a broadcast or multicast input route, which icmp_send never
    answers)."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef uint32_t info = 0
    cdef int r
    memset(&p.opt4, 0, sizeof(ip4opt_t))
    p.opt4.optlen = <uint8_t>(((ip4[0] & 0x0F) << 2) - IP4_HLEN)
    r = ip4_options_compile(c, p, local, &info)
    if r == -2:
        p.opt4.optlen = 0
        set_drop(p, R_NOT_SUPPORTED)        # CIPSO: see the top of this file
        return -1
    if r < 0 and bcast:
        set_drop(p, R_IP_HDR_INVALID)
        return -1
    if r < 0:
        icmp4_send(c, p, ICMP_PARAMETERPROB, 0, info, R_IP_HDR_INVALID, local)
        return -1
    if p.opt4.srr:
        # IN_DEV_SOURCE_ROUTE: accept_source_route is off for "all" by default
        set_drop(p, R_SOURCE_ROUTE)
        return -1
    return 0


cdef void ip4_forward_options(const ctx_t* c, pkt_t* p, const fp_dst* d) noexcept nogil:
    """ip_forward_options() (no source route: those were dropped): the
    egress address into the RR slot the compile reserved, then the header
    checksum when anything changed."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef ip4opt_t* opt = &p.opt4
    cdef uint8_t* o
    if opt.rr_needaddr:
        o = ip4 + opt.rr
        wr32(o + o[2] - 5, fib_res_prefsrc4(c, d))
        opt.is_changed = 1
    if opt.is_changed:
        opt.is_changed = 0
        wr16(ip4 + 10, 0)
        wr16(ip4 + 10, csum_fold(csum_add(0, ip4, (ip4[0] & 0x0F) << 2)))


cdef int ip4_options_echo(const ctx_t* c, const pkt_t* p, uint8_t* dptr, ip4opt_t* dopt) noexcept nogil:
    """__ip_options_echo(): the options of a reply to the packet (RR and TS
    with room taken for our entry), padded to 4 bytes; the length, or -1
    (-EINVAL: no reply is sent).  -2: a source route, not modelled."""
    cdef const uint8_t* sptr = p.row + p.l3
    cdef const ip4opt_t* sopt = &p.opt4
    cdef int32_t optlen, soffset
    cdef int32_t n = 0
    memset(dopt, 0, sizeof(ip4opt_t))
    if sopt.optlen == 0:
        return 0
    if sopt.rr:
        optlen = sptr[sopt.rr + 1]
        soffset = sptr[sopt.rr + 2]
        dopt.rr = <uint8_t>(n + IP4_HLEN)
        memcpy(dptr + n, sptr + sopt.rr, optlen)
        if sopt.rr_needaddr and soffset <= optlen:
            if soffset + 3 > optlen:
                return -1
            dptr[n + 2] = <uint8_t>(soffset + 4)
            dopt.rr_needaddr = 1
        n += optlen
    if sopt.ts:
        optlen = sptr[sopt.ts + 1]
        soffset = sptr[sopt.ts + 2]
        dopt.ts = <uint8_t>(n + IP4_HLEN)
        memcpy(dptr + n, sptr + sopt.ts, optlen)
        if soffset <= optlen:
            if sopt.ts_needaddr:
                if soffset + 3 > optlen:
                    return -1
                dopt.ts_needaddr = 1
                soffset += 4
            if sopt.ts_needtime:
                if soffset + 3 > optlen:
                    return -1
                if (dptr[n + 3] & 0xF) != IPOPT_TS_PRESPEC:
                    dopt.ts_needtime = 1
                    soffset += 4
                else:
                    dopt.ts_needtime = 0
                    if soffset + 7 <= optlen:
                        if not ip4_addr_unicast(c, rd32(dptr + n + soffset - 1)):
                            dopt.ts_needtime = 1
                            soffset += 8
            dptr[n + 2] = <uint8_t>soffset
        n += optlen
    if sopt.srr:
        return -2
    while n & 3:
        dptr[n] = IPOPT_END
        n += 1
    dopt.optlen = <uint8_t>n
    return n


cdef void ip4_options_build(const ctx_t* c, const pkt_t* p, uint8_t* iph, const ip4opt_t* opt) noexcept nogil:
    """ip_options_build() for a packet we originate: our source into the RR
    and TS slots, and the time."""
    if opt.rr_needaddr:
        memcpy(iph + opt.rr + iph[opt.rr + 2] - 5, iph + 12, 4)
    if opt.ts_needaddr:
        memcpy(iph + opt.ts + iph[opt.ts + 2] - 9, iph + 12, 4)
    if opt.ts_needtime:
        ip4_midtime(c, p, iph + opt.ts + iph[opt.ts + 2] - 5)

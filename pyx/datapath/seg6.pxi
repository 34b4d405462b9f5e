# The SRH: net/ipv6/seg6.c (seg6_validate_srh, seg6_get_srh) and
# net/ipv6/exthdrs_core.c (ipv6_find_hdr).


cdef inline bint ipv6_ext_hdr(uint8_t nh) noexcept nogil:
    return (nh == NEXTHDR_HOP or nh == NEXTHDR_ROUTING or nh == NEXTHDR_FRAGMENT
            or nh == NEXTHDR_AUTH or nh == NEXTHDR_NONE or nh == NEXTHDR_DEST)


cdef int ipv6_find_hdr(const uint8_t* ip6, int32_t len, int target, bint skip_rh,
                       int32_t* offset) noexcept nogil:
    """ipv6_find_hdr(): walk the extension headers to header ``target`` (-1:
    the first upper-layer header).  Returns its type and sets ``offset``, or
    -1 (ENOENT / EBADMSG).  ``skip_rh``: IP6_FH_F_SKIP_RH, routing headers
    with segments left 0 do not count."""
    cdef int32_t start = IP6_HLEN, hdrlen
    cdef uint8_t nexthdr = ip6[6]
    cdef bint found
    while True:
        found = nexthdr == target
        if not ipv6_ext_hdr(nexthdr) or nexthdr == NEXTHDR_NONE:
            if target < 0 or found:
                break
            return -1
        if start + 2 > len:
            return -1
        if nexthdr == NEXTHDR_ROUTING:
            if start + 4 > len:
                return -1
            if skip_rh and ip6[start + 3] == 0:
                found = False
        if nexthdr == NEXTHDR_FRAGMENT:
            if start + 4 > len:
                return -1
            if rd16(ip6 + start + 2) & 0xFFF8:
                if target < 0 and (not ipv6_ext_hdr(ip6[start]) or ip6[start] == NEXTHDR_NONE):
                    return ip6[start]
                if not found:
                    return -1
                break
            hdrlen = 8
        elif nexthdr == NEXTHDR_AUTH:
            hdrlen = (<int32_t>ip6[start + 1] + 2) << 2
        else:
            hdrlen = (<int32_t>ip6[start + 1] + 1) << 3
        if found:
            break
        nexthdr = ip6[start]
        start += hdrlen
    offset[0] = start
    return nexthdr


cdef bint seg6_validate_srh(const uint8_t* srh, int32_t len) noexcept nogil:
    """seg6_validate_srh(srh, len, reduced=true): type 4, length, last entry,
    segments left (the reduced SRH allows SL = last entry + 1), and a TLV
    walk ending exactly at the end (every TLV is type, length, data)."""
    cdef int32_t max_last_entry, tlv_offset, trailing, tlv_len
    if srh[2] != 4:
        return False
    if ((<int32_t>srh[1] + 1) << 3) != len:
        return False
    max_last_entry = (<int32_t>srh[1] >> 1) - 1
    if <int32_t>srh[4] > max_last_entry:
        return False
    if <int32_t>srh[3] > <int32_t>srh[4] + 1:
        return False
    tlv_offset = 8 + ((<int32_t>srh[4] + 1) << 4)
    trailing = len - tlv_offset
    if trailing < 0:
        return False
    while trailing:
        if trailing < 2:
            return False
        tlv_len = 2 + <int32_t>srh[tlv_offset + 1]
        trailing -= tlv_len
        if trailing < 0:
            return False
        tlv_offset += tlv_len
    return True


cdef int32_t seg6_get_srh(const pkt_t* p, bint skip_rh) noexcept nogil:
    """seg6_get_srh(): offset of the first (validated) SRH from the IPv6
    header, or -1."""
    cdef const uint8_t* ip6 = p.row + p.l3
    cdef int32_t off = 0, srhlen
    if ipv6_find_hdr(ip6, p.l3len, NEXTHDR_ROUTING, skip_rh, &off) < 0:
        return -1
    if off + 8 > p.l3len:
        return -1
    srhlen = (<int32_t>ip6[off + 1] + 1) << 3
    if off + srhlen > p.l3len:
        return -1
    if not seg6_validate_srh(ip6 + off, srhlen):
        return -1
    return off


cdef inline int32_t transport_offset(const pkt_t* p) noexcept nogil:
    """Where the kernel's transport header points on input: after the IPv6
    header, and after the hop-by-hop header when there is one."""
    cdef const uint8_t* ip6 = p.row + p.l3
    if ip6[6] == NEXTHDR_HOP and p.l3len >= IP6_HLEN + 2:
        return IP6_HLEN + ((<int32_t>ip6[IP6_HLEN + 1] + 1) << 3)
    return IP6_HLEN

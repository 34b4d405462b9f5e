# Our own addresses and source address selection: net/ipv6/addrconf.c
# (ipv6_chk_addr, ipv6_dev_get_saddr, anycast), net/ipv4/devinet.c
# (inet_select_addr).


cdef inline uint32_t addr_hash(int family, const uint8_t* a, uint32_t ifindex) noexcept nogil:
    """Hash of an address (and a device) for the lookup tables built at load."""
    cdef uint64_t x = 0, y = 0
    if family == 6:
        memcpy(&x, a, 8)
        memcpy(&y, a + 8, 8)
    else:
        memcpy(&x, a, 4)
    x ^= (y * 0xC2B2AE3D27D4EB4FULL) ^ ((<uint64_t>ifindex << 8) | <uint64_t>family)
    return <uint32_t>((x * 0x9E3779B97F4A7C15ULL) >> 32)


cdef inline bint addr_eq(const uint8_t* a, const uint8_t* b, int family) noexcept nogil:
    return eq16(a, b) if family == 6 else memcmp(a, b, 4) == 0


cdef inline bint is_local_addr(const ctx_t* c, int family, const uint8_t* a) noexcept nogil:
    """ipv6_chk_addr(net, addr, NULL, 0) / inet_lookup_ifaddr_rcu: one of
    our addresses, on any device (a hash table of them, built at load)."""
    cdef uint32_t i = addr_hash(family, a, 0) & c.addr_mask
    cdef int32_t k
    while True:
        k = c.addr_tab[i]
        if k < 0:
            return False
        if c.addrs[k].family == family and addr_eq(c.addrs[k].addr, a, family):
            return True
        i = (i + 1) & c.addr_mask


cdef bint ipv6_chk_addr_dev(const ctx_t* c, const uint8_t* a, uint32_t dev) noexcept nogil:
    """ipv6_chk_addr(net, addr, dev, 0): one of our IPv6 addresses in
    ``dev``'s L3 domain (__ipv6_chk_addr_and_flags skips those whose
    device has another l3mdev master), on ``dev`` when its scope is link or
    host (link-local, ::1); a site or global one on any such device."""
    cdef uint32_t k
    cdef uint32_t l3 = l3mdev_of(c, dev)
    if not is_local_addr(c, 6, a):
        return False
    for k in range(c.naddr):
        if (c.addrs[k].family == 6 and eq16(c.addrs[k].addr, a)
                and (c.addrs[k].ifindex == dev or c.addrs[k].scope > 2)
                and l3mdev_of(c, c.addrs[k].ifindex) == l3):
            return True
    return False


cdef bint ipv6_get_saddr(const ctx_t* c, uint32_t dev_ifindex, const uint8_t* dst,
                         uint8_t* out) noexcept nogil:
    """ipv6_dev_get_saddr (RFC 6724 section 5, the rules the kernel scores):
    same address, appropriate scope, outgoing interface, longest matching
    prefix (capped at the candidate's prefix length).  Rule 6 (policy
    labels) is not applied yet.  For link-local and multicast destinations
    only the device's own addresses are candidates.  Otherwise only those in
    the device's L3 domain: a device in a VRF (or the VRF itself) prefers
    its own and the VRF's addresses (ipv6_get_saddr_master), then any of the
    VRF's devices; a device in none, any device in none.  Ties keep the
    first candidate found (devices by ifindex)."""
    cdef int dscope = in6_scope(dst)
    cdef uint32_t l3 = l3mdev_of(c, dev_ifindex)
    cdef int best
    if in6_is_multicast(dst) or dscope <= 2:
        best = _saddr_best(c, dev_ifindex, dst, dscope, 1, 0)
    else:
        best = _saddr_best(c, dev_ifindex, dst, dscope, 2, l3) if l3 else -1
        if best < 0:
            best = _saddr_best(c, dev_ifindex, dst, dscope, 3, l3)
    if best < 0:
        return False
    memcpy(out, c.addrs[best].addr, 16)
    return True


cdef int _saddr_best(const ctx_t* c, uint32_t dev_ifindex, const uint8_t* dst, int dscope,
                     int only, uint32_t l3) noexcept nogil:
    """The best candidate of ipv6_get_saddr's scoring among the IPv6
    addresses of: (only 1) the device; (2) the device or its VRF ``l3``;
    (3) the devices of L3 domain ``l3`` (0: those in no VRF).  -1: none."""
    cdef int best = -1
    cdef int k, s, bs, cpl, bcpl
    cdef const fp_addr* a
    cdef const fp_addr* b
    for k in range(<int>c.naddr):
        a = &c.addrs[k]
        if a.family != 6:
            continue
        if only == 1 and a.ifindex != dev_ifindex:
            continue
        if only == 2 and a.ifindex != dev_ifindex and a.ifindex != l3:
            continue
        if only == 3 and l3mdev_of(c, a.ifindex) != l3:
            continue
        if best < 0:
            best = k
            continue
        b = &c.addrs[best]
        # rule 1: same address
        if memcmp(b.addr, dst, 16) == 0:
            continue
        if memcmp(a.addr, dst, 16) == 0:
            best = k
            continue
        # rule 2: appropriate scope
        s = in6_scope(a.addr)
        bs = in6_scope(b.addr)
        if s != bs:
            if bs < s:
                if bs < dscope:
                    best = k          # hiscore too small: bigger is better
                continue
            else:
                if s >= dscope:
                    best = k          # both large enough: smaller is better
                continue
        # rule 5: prefer the outgoing interface
        if (a.ifindex == dev_ifindex) != (b.ifindex == dev_ifindex):
            if a.ifindex == dev_ifindex:
                best = k
            continue
        # rule 8: longest matching prefix
        cpl = common_prefix_len(a.addr, dst, 16)
        if cpl > a.plen:
            cpl = a.plen
        bcpl = common_prefix_len(b.addr, dst, 16)
        if bcpl > b.plen:
            bcpl = b.plen
        if cpl > bcpl:
            best = k
    return best


cdef bint ipv4_get_saddr(const ctx_t* c, uint32_t ifindex, uint32_t dst, uint8_t* out) noexcept nogil:
    """inet_select_addr(dev, dst, RT_SCOPE_UNIVERSE): an address of the device
    on dst's subnet, else the device's first address, else the first address
    of any other device."""
    cdef int k
    cdef int first_dev = -1, first_any = -1
    cdef uint8_t d[4]
    cdef const fp_addr* a
    wr32(d, dst)
    for k in range(<int>c.naddr):
        a = &c.addrs[k]
        if a.family != 4:
            continue
        if a.ifindex == ifindex:
            if prefix_match(d, a.addr, a.plen):
                memcpy(out, a.addr, 4)
                return True
            if first_dev < 0:
                first_dev = k
        elif first_any < 0 and a.addr[0] != 127:
            first_any = k
    if first_dev >= 0:
        memcpy(out, c.addrs[first_dev].addr, 4)
        return True
    if first_any >= 0:
        memcpy(out, c.addrs[first_any].addr, 4)
        return True
    return False


cdef bint is_subnet_anycast(const ctx_t* c, uint32_t ifindex, const uint8_t* a) noexcept nogil:
    """ipv6_chk_acast_addr_src(): the subnet-router anycast address of one of
    the router's prefixes (a router joins them while forwarding; observed:
    any device's, not only the ingress device's)."""
    cdef uint32_t k
    cdef const fp_addr* x
    for k in range(c.naddr):
        x = &c.addrs[k]
        if x.family == 6 and x.plen < 127 and prefix_match(a, x.addr, x.plen):
            if _host_bits_zero(a, x.plen):
                return True
    return False


cdef inline bint _host_bits_zero(const uint8_t* a, int plen) noexcept nogil:
    cdef int k = plen >> 3
    if plen & 7:
        if a[k] & (0xFF >> (plen & 7)):
            return False
        k += 1
    while k < 16:
        if a[k]:
            return False
        k += 1
    return True

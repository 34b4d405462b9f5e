# The link layer: net/ethernet/eth.c (the Ethernet header and one 802.1Q tag
# in and out) and the neighbour table (net/core/neighbour.c, static entries).


cdef inline bint l2_parse(const ctx_t* c, pkt_t* p) noexcept nogil:
    """Strip an Ethernet header (and one 802.1Q tag); raw batches have none."""
    cdef uint8_t* f = p.row + p.start
    cdef uint16_t et
    p.has_vlan = False
    if c.linktype == LINK_RAW:
        p.l2len = 0
        p.family = 6 if (p.length > 0 and (f[0] >> 4) == 6) else 4
        return True
    if p.length < 14:
        set_drop(p, R_TRUNCATED)
        return False
    et = rd16(f + 12)
    p.l2len = 14
    if et == 0x8100:
        if p.length < 18:
            set_drop(p, R_TRUNCATED)
            return False
        p.has_vlan = True
        p.vlan_tci = rd16(f + 14)
        et = rd16(f + 16)
        p.l2len = 18
    if et == 0x86DD:
        p.family = 6
    elif et == 0x0800:
        p.family = 4
    else:
        set_drop(p, R_NOT_IP)
        return False
    return True


cdef inline int32_t neigh_find(const ctx_t* c, uint32_t oif, int family,
                               const uint8_t* addr) noexcept nogil:
    """The neighbour table's entry for ``addr`` on ``oif`` (the first, if the
    table held it twice), or -1: a hash table of them, built at load."""
    cdef uint32_t i = addr_hash(family, addr, oif) & c.neigh_mask
    cdef int32_t k
    while True:
        k = c.neigh_tab[i]
        if k < 0:
            return -1
        if (c.neighs[k].ifindex == oif and c.neighs[k].family == family
                and addr_eq(c.neighs[k].addr, addr, family)):
            return k
        i = (i + 1) & c.neigh_mask


cdef inline const uint8_t* neigh_mac(const ctx_t* c, uint32_t oif, int family,
                                     const uint8_t* addr) noexcept nogil:
    """The neighbour table's MAC for ``addr`` on ``oif``, or NULL."""
    cdef int32_t k = neigh_find(c, oif, family, addr)
    return c.neighs[k].mac if k >= 0 else NULL


cdef inline void l2_build(const ctx_t* c, pkt_t* p) noexcept nogil:
    """Ethernet egress: source MAC of the egress device, destination MAC from
    the neighbour table (zero when unresolved), the ingress VLAN tag kept
    unless the egress device sets its own."""
    cdef const fp_dev* odev = dev_get(c, p.oif)
    cdef int32_t l2 = 14
    cdef bint vlan = p.has_vlan
    cdef uint16_t tci = p.vlan_tci
    cdef uint8_t* f
    cdef const uint8_t* mac
    if odev != NULL and odev.vlan_set:
        vlan = True
        tci = odev.vlan_tci
    if vlan:
        l2 = 18
    if p.l3 < l2:
        if not make_headroom(c, p, l2):
            set_drop(p, R_NO_HEADROOM)
            return
    f = p.row + p.l3 - l2
    mac = neigh_mac(c, p.oif, p.family, p.nexthop)
    if mac != NULL:
        memcpy(f, mac, 6)
    else:
        memset(f, 0, 6)
    if odev != NULL:
        memcpy(f + 6, odev.mac, 6)
    else:
        memset(f + 6, 0, 6)
    if vlan:
        wr16(f + 12, 0x8100)
        wr16(f + 14, tci)
    wr16(f + l2 - 2, 0x86DD if p.family == 6 else 0x0800)
    p.l2len = l2

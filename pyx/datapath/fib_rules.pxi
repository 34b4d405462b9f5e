# The policy-rule walk over the tables: net/ipv6/fib6_rules.c
# (fib6_rule_lookup), net/ipv4/fib_rules.c (fib_rules_lookup, fib_lookup),
# net/core/fib_rules.c's l3mdev rules (net/l3mdev/l3mdev.c).

cdef enum:
    RULE_HAS_L3MDEV = 2           # fp_rule.has_iif of an l3mdev rule (tables.py)
    RULE_SLOT_L3MDEV = -2         # its slot: the table is the packet's VRF's


cdef inline uint32_t l3mdev_of(const ctx_t* c, uint32_t iif) noexcept nogil:
    """l3mdev_update_flow(): the VRF of the device a lookup is made from
    (the VRF itself, or the master of an enslaved device), 0: none."""
    if c.has_l3mdev and iif < c.ndev:
        return c.devs[iif].l3mdev
    return 0


cdef inline uint32_t l3mdev_out(const ctx_t* c, uint32_t iif) noexcept nogil:
    """The device an output lookup on behalf of a packet received on
    ``iif`` is made from: its VRF (icmp6_send / icmp_route_lookup:
    flowi_oif = l3mdev_master_ifindex(dev)), else lo."""
    cdef uint32_t l3 = l3mdev_of(c, iif)
    return l3 if l3 else c.lo_ifindex


cdef inline bint rule_match(const fp_rule* r, const uint8_t* saddr, const uint8_t* daddr,
                            uint32_t iif, uint32_t l3) noexcept nogil:
    """fib_rule_match(): ``l3`` the flow's l3mdev (l3mdev_of); an l3mdev
    rule matches only a flow that has one (l3mdev_fib_rule_match)."""
    if r.has_iif:
        if r.has_iif == RULE_HAS_L3MDEV:
            if l3 == 0:
                return False
        elif r.iif != iif:
            return False
    if r.src_len and not prefix_match(saddr, r.src, r.src_len):
        return False
    if r.dst_len and not prefix_match(daddr, r.dst, r.dst_len):
        return False
    return True


cdef uint32_t fib6_walk(ctx_t* c, const uint8_t* daddr, const uint8_t* saddr,
                        uint32_t iif, uint32_t* nmiss, pkt_t* hold,
                        uint32_t sdev, int64_t after_table) noexcept nogil:
    """fib6_rule_lookup: walk the rules by preference; a table miss (the null
    entry) or a throw route goes on to the next rule; no match at all gives
    ip6_null_entry.  ``nmiss`` counts the tables that missed.  With ``hold``
    (refcount mode, after a refused reference) each table's route is held
    for that packet as it is found, and one that cannot be held counts as a
    miss, as ip6_hold_safe falling back to the null entry.  ``sdev``: a
    strict-interface lookup (RT6_LOOKUP_F_IFACE) on that device, each
    table through fib6_table_strict().  ``after_table`` (>= 0): the walk
    goes on after the first rule to that table, whose route could not be
    held (ip6_hold_safe gave the null entry, fib6_rule_action put it and
    tried the next rule): the rules before it and its table are not looked
    at again -- their tables may have changed since.

    VRFs: a lookup from a device enslaved to a VRF is the VRF's (the
    kernel's vrf_l3_rcv makes the VRF the packet's device: ``iif`` rules
    compare the VRF), and an l3mdev rule looks up the VRF's table (a miss
    goes on to the next rule, as any table's)."""
    cdef uint32_t k, v, table
    cdef int32_t slot
    cdef const fp_rule* r
    cdef uint32_t l3 = l3mdev_of(c, iif)
    if l3:
        iif = l3
    nmiss[0] = 0
    for k in range(c.nrules6):
        r = &c.rules6[k]
        if not rule_match(r, saddr, daddr, iif, l3):
            continue
        table = r.table
        slot = r.slot
        if slot == RULE_SLOT_L3MDEV:
            table = c.devs[l3].l3table
            slot = c.devs[l3].l3slot6
        if after_table >= 0:
            if r.action == FR_ACT_TO_TBL and <int64_t>table == after_table:
                after_table = -1
                if hold != NULL:
                    null_hold_put(c, 1)
            continue
        tr(c, T_RULE, k, table if r.action == FR_ACT_TO_TBL else 0, NULL)
        if r.action == FR_ACT_TO_TBL:
            if slot < 0 or <uint32_t>slot >= c.nlpm6:
                continue
            if sdev:
                v = fib6_table_strict(c, slot, daddr, sdev)
            else:
                v = lpm6_lookup(c.lpm6[slot].tbl24, c.lpm6[slot].groups, daddr)
            tr(c, T_LOOKUP, table, v if v < c.ndst else 0, daddr)
            if v == 0 or v >= c.ndst or (c.lpm6[slot].throws and c.dsts[v].type == RTN_THROW):
                if nmiss[0] < 255:
                    nmiss[0] += 1
                if hold != NULL:
                    null_hold_put(c, 1)
                continue
            if hold != NULL and not dst_hold_pkt(c, hold, v):
                null_hold_put(c, 1)
                continue
            return v
        elif r.action == FR_ACT_BLACKHOLE:
            return DST_IP6_BLACKHOLE
        elif r.action == FR_ACT_PROHIBIT:
            return DST_IP6_PROHIBIT
        elif r.action == FR_ACT_UNREACHABLE:
            return DST_IP6_NULL
    return DST_IP6_NULL


cdef void fib6_walk_bulk(const ctx_t* c, const uint8_t** keys, int n, uint32_t* rt,
                         uint32_t* nmiss) noexcept nogil:
    """fib6_walk() for ``n`` (<= PRE_CHUNK) destinations at once, while no
    rule selects on source or iif (the route cache's condition): rule by
    rule, table by table and group level by group level, so that the loads
    of different destinations are independent and overlap (DPDK's
    lookup_bulk, level-synchronous).  Same results as fib6_walk(hold=NULL)."""
    cdef uint32_t e[PRE_CHUNK]
    cdef const uint8_t* kp[PRE_CHUNK]
    cdef int lv
    cdef int pend[PRE_CHUNK]
    cdef int j, q, m
    cdef uint32_t k, v, ext
    cdef bint throws
    cdef const fp_rule* r
    cdef const uint32_t* t24
    cdef const uint32_t* grp
    cdef const uint8_t* a
    for j in range(n):
        rt[j] = 0xFFFFFFFFu
        nmiss[j] = 0
    for k in range(c.nrules6):
        r = &c.rules6[k]
        m = 0
        for j in range(n):
            if rt[j] == 0xFFFFFFFFu and rule_match(r, keys[j], keys[j], 0, 0):
                pend[m] = j
                m += 1
        if m == 0:
            continue
        if r.action == FR_ACT_TO_TBL:
            if r.slot < 0 or <uint32_t>r.slot >= c.nlpm6:
                continue
            t24 = c.lpm6[r.slot].tbl24
            grp = c.lpm6[r.slot].groups
            throws = c.lpm6[r.slot].throws
            ext = 0                              # (the EXT bit: some key goes on)
            for q in range(m):
                a = keys[pend[q]]
                kp[q] = a
                e[q] = t24[(<uint32_t>a[0] << 16) | (<uint32_t>a[1] << 8) | a[2]]
                ext |= e[q]
            # level by level, every pending key at the same address byte
            lv = 3
            while ext & LPM_EXT:
                if lv >= 16:                     # deeper than 128 bits: corrupt table
                    for q in range(m):
                        if e[q] & LPM_EXT:
                            e[q] = 0
                    break
                ext = 0
                for q in range(m):
                    if e[q] & LPM_EXT:
                        e[q] = grp[(<size_t>(e[q] & LPM_VALUE_MASK) << 8) | kp[q][lv]]
                        ext |= e[q]
                lv += 1
            for q in range(m):
                j = pend[q]
                v = e[q] & LPM_VALUE_MASK
                if v == 0 or v >= c.ndst or (throws and c.dsts[v].type == RTN_THROW):
                    if nmiss[j] < 255:
                        nmiss[j] += 1
                else:
                    rt[j] = v
        else:
            v = (DST_IP6_BLACKHOLE if r.action == FR_ACT_BLACKHOLE else
                 DST_IP6_PROHIBIT if r.action == FR_ACT_PROHIBIT else
                 DST_IP6_NULL if r.action == FR_ACT_UNREACHABLE else 0xFFFFFFFFu)
            if v != 0xFFFFFFFFu:
                for q in range(m):
                    rt[pend[q]] = v
    for j in range(n):
        if rt[j] == 0xFFFFFFFFu:
            rt[j] = DST_IP6_NULL


cdef uint32_t fib4_lookup(const ctx_t* c, uint32_t daddr, uint32_t saddr,
                          uint32_t iif) noexcept nogil:
    """fib_lookup / fib_rules_lookup for IPv4 (addresses in host order);
    VRFs as fib6_walk."""
    cdef uint32_t k, v, table
    cdef int32_t slot
    cdef const fp_rule* r
    cdef uint8_t s[4]
    cdef uint8_t d[16]              # 16: a trace event copies a full address
    cdef bint as_bytes = False
    cdef uint32_t l3 = l3mdev_of(c, iif)
    if l3:
        iif = l3
    for k in range(c.nrules4):
        r = &c.rules4[k]
        if r.has_iif or r.src_len or r.dst_len or c.trace != NULL:
            # the addresses as bytes: for a selector, or the trace
            if not as_bytes:
                memset(d, 0, 16)
                wr32(s, saddr)
                wr32(d, daddr)
                as_bytes = True
            if not rule_match(r, s, d, iif, l3):
                continue
        table = r.table
        slot = r.slot
        if slot == RULE_SLOT_L3MDEV:
            table = c.devs[l3].l3table
            slot = c.devs[l3].l3slot4
        tr(c, T_RULE, k, table if r.action == FR_ACT_TO_TBL else 0, NULL)
        if r.action == FR_ACT_TO_TBL:
            if slot < 0 or <uint32_t>slot >= c.nlpm4:
                continue
            v = lpm4_lookup(c.lpm4[slot].tbl24, c.lpm4[slot].groups, daddr)
            tr(c, T_LOOKUP, table, v if v < c.ndst else 0, d)
            if v == 0 or v >= c.ndst:
                continue
            if c.lpm4[slot].throws and c.dsts[v].type == RTN_THROW:
                continue
            return v
        elif r.action == FR_ACT_BLACKHOLE:
            return DST_IP4_BLACKHOLE
        elif r.action == FR_ACT_PROHIBIT:
            return DST_IP4_PROHIBIT
        elif r.action == FR_ACT_UNREACHABLE:
            return DST_IP4_UNREACHABLE
    return DST_IP4_NOROUTE

# The policy-rule walk over the tables: net/ipv6/fib6_rules.c
# (fib6_rule_lookup), net/ipv4/fib_rules.c (fib_rules_lookup, fib_lookup).


cdef inline bint rule_match(const fp_rule* r, const uint8_t* saddr, const uint8_t* daddr,
                            uint32_t iif) noexcept nogil:
    if r.has_iif and r.iif != iif:
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
    at again -- their tables may have changed since."""
    cdef uint32_t k, v
    cdef const fp_rule* r
    nmiss[0] = 0
    for k in range(c.nrules6):
        r = &c.rules6[k]
        if not rule_match(r, saddr, daddr, iif):
            continue
        if after_table >= 0:
            if r.action == FR_ACT_TO_TBL and <int64_t>r.table == after_table:
                after_table = -1
                if hold != NULL:
                    null_hold_put(c, 1)
            continue
        tr(c, T_RULE, k, r.table if r.action == FR_ACT_TO_TBL else 0, NULL)
        if r.action == FR_ACT_TO_TBL:
            if r.slot < 0 or <uint32_t>r.slot >= c.nlpm6:
                continue
            if sdev:
                v = fib6_table_strict(c, r.slot, daddr, sdev)
            else:
                v = lpm6_lookup(c.lpm6[r.slot].tbl24, c.lpm6[r.slot].groups, daddr)
            tr(c, T_LOOKUP, r.table, v if v < c.ndst else 0, daddr)
            if v == 0 or v >= c.ndst or (c.lpm6[r.slot].throws and c.dsts[v].type == RTN_THROW):
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
            if rt[j] == 0xFFFFFFFFu and rule_match(r, keys[j], keys[j], 0):
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
    """fib_lookup / fib_rules_lookup for IPv4 (addresses in host order)."""
    cdef uint32_t k, v
    cdef const fp_rule* r
    cdef uint8_t s[4]
    cdef uint8_t d[16]              # 16: a trace event copies a full address
    cdef bint as_bytes = False
    for k in range(c.nrules4):
        r = &c.rules4[k]
        if r.has_iif or r.src_len or r.dst_len or c.trace != NULL:
            # the addresses as bytes: for a selector, or the trace
            if not as_bytes:
                memset(d, 0, 16)
                wr32(s, saddr)
                wr32(d, daddr)
                as_bytes = True
            if not rule_match(r, s, d, iif):
                continue
        tr(c, T_RULE, k, r.table if r.action == FR_ACT_TO_TBL else 0, NULL)
        if r.action == FR_ACT_TO_TBL:
            if r.slot < 0 or <uint32_t>r.slot >= c.nlpm4:
                continue
            v = lpm4_lookup(c.lpm4[r.slot].tbl24, c.lpm4[r.slot].groups, daddr)
            tr(c, T_LOOKUP, r.table, v if v < c.ndst else 0, d)
            if v == 0 or v >= c.ndst:
                continue
            if c.lpm4[r.slot].throws and c.dsts[v].type == RTN_THROW:
                continue
            return v
        elif r.action == FR_ACT_BLACKHOLE:
            return DST_IP4_BLACKHOLE
        elif r.action == FR_ACT_PROHIBIT:
            return DST_IP4_PROHIBIT
        elif r.action == FR_ACT_UNREACHABLE:
            return DST_IP4_UNREACHABLE
    return DST_IP4_NOROUTE

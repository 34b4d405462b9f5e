# The Python boundary: Datapath (load, process, trace, counters), the
# indexes built at load, and the atomics the multi-process Dataplane uses.


cdef inline bint _quiescent_then_check(uint64_t* q, Py_ssize_t qs_index, Py_ssize_t token_index,
                                       Py_ssize_t seq_index, Py_ssize_t stop_index,
                                       uint64_t seq) noexcept nogil:
    """run_loop's batch boundary: report a quiescent state
    (rte_rcu_qsbr_quiescent: this worker's counter takes the token), then
    say whether to return to Python -- told to stop, or a new publication
    (the sequence number moved), whose reload empties the route caches.

    In this order, never the check first: a reader that has reported a
    quiescent state may hold nothing it found before it, and the route
    caches hold entries found before it.  Checked first, a publication
    landing between the check and the report (its entries retired, the
    sequence then the token bumped) let the control plane reclaim an entry
    that the next batch still took from a cache: a generation violation
    (the likely cause of the two counted once, and not reproduced since, in
    tests/test_bench_control.py's 0.3 s churn).  After the report it cannot
    be missed: the token the report stored was read (acquire) after the
    control plane stored it, which it did after bumping the sequence."""
    fp_atomic_store64(&q[qs_index], fp_atomic_load64(&q[token_index]))
    return _stop_or_published(q, seq_index, stop_index, seq)


cdef inline bint _stop_or_published(uint64_t* q, Py_ssize_t seq_index, Py_ssize_t stop_index,
                                    uint64_t seq) noexcept nogil:
    """Told to stop, or a publication since ``seq`` (the caller's reload)."""
    return fp_atomic_load64(&q[stop_index]) != 0 or fp_atomic_load64(&q[seq_index]) != seq


def atomic_add32(arr, Py_ssize_t index, int32_t v):
    """Atomic add on an int32 array element (e.g. a route entry's refcount
    in shared memory, from the control plane); returns the old value."""
    _check_array(arr, "arr", cnp.NPY_INT32, 1, -1)
    if index < 0 or index >= cnp.PyArray_DIM(arr, 0):
        raise IndexError("index out of range")
    return fp_atomic_fetch_add32(<int32_t*>cnp.PyArray_DATA(arr) + index, v)


def atomic_load64(arr, Py_ssize_t index):
    """Load with acquire semantics from a uint64 array (QSBR counters)."""
    _check_array(arr, "arr", cnp.NPY_UINT64, 1, -1)
    if index < 0 or index >= cnp.PyArray_DIM(arr, 0):
        raise IndexError("index out of range")
    return fp_atomic_load64(<uint64_t*>cnp.PyArray_DATA(arr) + index)


def atomic_store64(arr, Py_ssize_t index, uint64_t v, bint fence=False):
    """Store with release semantics into a uint64 array (QSBR counters,
    tokens, snapshot sequence); ``fence``: then a full barrier (a store
    followed by loads of other workers' counters, as rte_rcu_qsbr_start /
    thread_online)."""
    _check_array(arr, "arr", cnp.NPY_UINT64, 1, -1)
    if index < 0 or index >= cnp.PyArray_DIM(arr, 0):
        raise IndexError("index out of range")
    fp_atomic_store64(<uint64_t*>cnp.PyArray_DATA(arr) + index, v)
    if fence:
        fp_atomic_fence()


cdef object _index_table(Py_ssize_t n):
    """An empty open-addressing table for ``n`` keys: a power of two, at
    least twice ``n`` (a probe always ends at an empty slot)."""
    cdef Py_ssize_t size = 8
    while size < 2 * n:
        size *= 2
    return np.full(size, -1, dtype=np.int32)


cdef inline void _index_put(int32_t* tab, uint32_t mask, uint32_t h, uint32_t k) noexcept nogil:
    """Entry ``k`` into the first empty slot from its hash on (linear probing)."""
    cdef uint32_t i = h & mask
    while tab[i] >= 0:
        i = (i + 1) & mask
    tab[i] = <int32_t>k


cdef void _index_addresses(ctx_t* c, int32_t* tab, uint32_t mask) noexcept nogil:
    """Fill the local addresses' table (is_local_addr): each (family,
    address) once."""
    cdef uint32_t k
    cdef int fam
    c.addr_tab = tab
    c.addr_mask = mask
    for k in range(c.naddr):
        fam = c.addrs[k].family
        if (fam == 4 or fam == 6) and not is_local_addr(c, fam, c.addrs[k].addr):
            _index_put(tab, mask, addr_hash(fam, c.addrs[k].addr, 0), k)


cdef void _index_neighbours(ctx_t* c, int32_t* tab, uint32_t mask) noexcept nogil:
    """Fill the neighbours' table (neigh_find): the first entry of each
    (device, family, address)."""
    cdef uint32_t k
    cdef int fam
    c.neigh_tab = tab
    c.neigh_mask = mask
    for k in range(c.nneigh):
        fam = c.neighs[k].family
        if (fam == 4 or fam == 6) and neigh_find(c, c.neighs[k].ifindex, fam, c.neighs[k].addr) < 0:
            _index_put(tab, mask, addr_hash(fam, c.neighs[k].addr, c.neighs[k].ifindex), k)


cdef void _resolve_s6l_neighbours(const ctx_t* c, int32_t* out) noexcept nogil:
    """For each seg6local record with a nexthop address (End.X's and
    End.DX6's nh6, End.DX4's nh4), the first neighbour entry holding it on
    any device (the fast path's hint for a gateway-less route to it)."""
    cdef uint32_t k, j
    cdef const fp_s6l* s
    cdef int fam
    cdef const uint8_t* a
    for k in range(c.ns6l):
        s = &c.s6l[k]
        out[k] = -1
        if s.action == S6_END_X or s.action == S6_END_DX6:
            fam, a = 6, s.nh6
        elif s.action == S6_END_DX4:
            fam, a = 4, s.nh4
        else:
            continue
        for j in range(c.nneigh):
            if c.neighs[j].family == fam and addr_eq(c.neighs[j].addr, a, fam):
                out[k] = <int32_t>j
                break


cdef void _resolve_adjacencies(const ctx_t* c, adj_t* out) noexcept nogil:
    """For each nexthop, what the fast path needs of its way out: whether
    its device exists and is up, the packet sizes it takes, and the
    Ethernet header as l2_build() would make it (a gateway's neighbour
    found once, not per packet).  Devices, nexthops and neighbours are
    fixed until the next load."""
    cdef uint32_t k
    cdef int32_t n
    cdef const fp_nh* nh
    cdef const fp_dev* odev
    for k in range(c.nnh):
        nh = &c.nhs[k]
        memset(&out[k], 0, sizeof(adj_t))
        odev = dev_get(c, nh.oif)
        if odev == NULL:
            continue
        if odev.flags & DEVF_UP:
            if not (nh.flags & NHF_GATEWAY) or nh.family == 6:
                out[k].mtu6 = odev.mtu if odev.mtu >= IPV6_MIN_MTU else IPV6_MIN_MTU
            if not (nh.flags & NHF_GATEWAY) or nh.family == 4:
                out[k].mtu4 = odev.mtu
        out[k].vlan = odev.vlan_set != 0
        out[k].tci = odev.vlan_tci
        memcpy(out[k].eth + 6, odev.mac, 6)
        if nh.flags & NHF_GATEWAY:
            out[k].gw = 1
            if nh.family == 6 or nh.family == 4:
                n = neigh_find(c, nh.oif, nh.family, nh.gw)
                if n >= 0:
                    memcpy(out[k].eth, c.neighs[n].mac, 6)


cdef void _resolve_headend_sources(const ctx_t* c, fp_s6l* s6l) noexcept nogil:
    """set_tun_src() for every headend record, done once per configuration:
    its inputs (the route's tunsrc, ip sr tunsrc, the addresses, the
    route's device and the first SID) are all fixed until the next load.
    The result goes into the record's tunsrc; left zero (no address on any
    device) the packet path selects again and drops."""
    cdef uint32_t k
    for k in range(c.ns6l):
        if s6l[k].action != S6_HEADEND or not in6_is_zero(s6l[k].tunsrc):
            continue
        if c.has_tunsrc:
            memcpy(s6l[k].tunsrc, c.tunsrc, 16)
        elif not ipv6_get_saddr(c, s6l[k].oif, s6l[k].nh6, s6l[k].tunsrc):
            memset(s6l[k].tunsrc, 0, 16)


cdef class Datapath:
    """The compiled tables of one Router, and the batch kernel over them."""
    cdef ctx_t c
    cdef object refs                   # keeps the numpy arrays alive
    cdef fp_lpm[256] lpm6_buf
    cdef fp_lpm[256] lpm4_buf
    cdef uint64_t[R_COUNT] reasons
    cdef object s6l_counters           # uint64[ns6l, 3], this Datapath's (per worker)
    cdef rcache_t[RCACHE_SIZE] rcache_buf
    cdef rcache4_t[RCACHE4_SIZE] rcache4_buf
    cdef tcache_t[TCACHE_SIZE] tcache_buf
    cdef object peers                  # uint8 array holding the peer_t table
    cdef object pcpu                   # this worker's route copies (PCPU_DTYPE as uint8 rows)
    cdef bint own_pcpu                 # allocated here (grown with the tables) or given
    cdef object hmac_buf               # this Datapath's copy of the HMAC keys, states filled in

    def __cinit__(self):
        memset(&self.c, 0, sizeof(ctx_t))
        memset(self.reasons, 0, sizeof(self.reasons))
        memset(self.rcache_buf, 0, sizeof(self.rcache_buf))
        memset(self.rcache4_buf, 0, sizeof(self.rcache4_buf))
        memset(self.tcache_buf, 0, sizeof(self.tcache_buf))
        self.c.reason_count = self.reasons
        self.c.rcache = self.rcache_buf
        self.c.rcache4 = self.rcache4_buf
        self.c.tcache = self.tcache_buf
        self.c.fast = True
        self.peers = np.zeros(sizeof(peer_t) << PEER_BITS, dtype=np.uint8)
        self.c.peers = <peer_t*>cnp.PyArray_DATA(self.peers)
        self.refs = []

    def load(self, dsts, nhs, devs, addrs, neighs, rules6, rules4, lpm6, lpm4, s6l, srh_blob,
             hmac_keys, uint32_t lo_ifindex, bint fwd6, int ip_default_ttl, int hop_limit,
             tunsrc=None, int seg6_flowlabel=0, int icmp6_ratelimit_ms=0, int icmp4_ratelimit_ms=0,
             int ip_error_cost=0, int ip_error_burst=0,
             uint32_t icmp4_ratemask=0x1818, int icmp_msgs_per_sec=0, int icmp_msgs_burst=50,
             int mp_policy6=0, int mp_policy4=0, bint v4_full_rpcheck=False, dfast=None,
             throw_slots6=None, throw_slots4=None, strict6=None, s6l_vrf=None):
        """Point the kernel at a new set of tables (all numpy arrays; records
        as uint8 arrays of the struct sizes in fp.pxd).  ``lpm6``/``lpm4``:
        lists of (tbl24, groups) array pairs, indexed by the rules' slots.
        ``dfast``: the routes' fast-path words (uint32, at least one per
        entry of ``dsts``; Tables.dfast), or None for none (every route
        entry is then read).  ``throw_slots6``/``throw_slots4``: the slots
        of the tables that hold throw routes (a lookup elsewhere does not
        read the entry it finds to tell), or None for all of them.
        ``strict6``: the routes a strict-interface IPv6 lookup may return
        (uint8 rows of fp_strict, Tables.strict6), or None for none.
        ``s6l_vrf``: per seg6local record, the VRF device an End.DT*
        vrftable delivers into (0: none bound to the table: drop; -1: not
        a vrftable record), or None while no VRF device exists (vrftable
        then looks its table up, README)."""
        cdef Py_ssize_t k
        if len(lpm6) > 256 or len(lpm4) > 256:
            raise ValueError("at most 256 routing tables per family")
        refs = [dsts, nhs, devs, addrs, neighs, rules6, rules4, lpm6, lpm4, s6l, srh_blob, hmac_keys]
        for name, arr, size in (("s6l", s6l, sizeof(fp_s6l)),("dsts", dsts, sizeof(fp_dst)), ("nhs", nhs, sizeof(fp_nh)),
                                ("devs", devs, sizeof(fp_dev)), ("addrs", addrs, sizeof(fp_addr)),
                                ("neighs", neighs, sizeof(fp_neigh)), ("rules6", rules6, sizeof(fp_rule)),
                                ("rules4", rules4, sizeof(fp_rule))):
            if (not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous or arr.dtype != np.uint8
                    or arr.ndim != 2 or arr.shape[1] != size):
                raise TypeError(f"{name}: expected a C-contiguous array of {size}-byte records")
        if len(dsts) < DST_FIRST_ROUTE:
            raise ValueError("dsts must hold the reserved entries")
        if strict6 is None:
            strict6 = np.zeros((0, sizeof(fp_strict)), dtype=np.uint8)
        if (not isinstance(strict6, np.ndarray) or not strict6.flags.c_contiguous
                or strict6.dtype != np.uint8 or strict6.ndim != 2 or strict6.shape[1] != sizeof(fp_strict)):
            raise TypeError(f"strict6: expected a C-contiguous array of {sizeof(fp_strict)}-byte records")
        if len(strict6):
            bad = np.flatnonzero((strict6[:, 16:20].copy().view(np.uint32)[:, 0] >= len(dsts))
                                 | (strict6[:, 28] > 128))
            if len(bad):
                raise ValueError(f"strict6[{bad[0]}]: route entry or prefix length out of range")
        refs.append(strict6)
        if dfast is None:
            dfast = np.zeros(len(dsts), dtype=np.uint32)
        _check_array(dfast, "dfast", cnp.NPY_UINT32, 1, -1)
        if len(dfast) < len(dsts):
            raise ValueError("dfast must hold a word per route entry")
        refs.append(dfast)
        if self.pcpu is None or (self.own_pcpu and len(self.pcpu) < len(dsts)):
            self._own_pcpu(len(dsts))
        self.c.dsts = <fp_dst*>cnp.PyArray_DATA(dsts)
        self.c.ndst = len(dsts)
        self.c.dfast = <const uint32_t*>cnp.PyArray_DATA(dfast)
        self.c.nhs = <const fp_nh*>cnp.PyArray_DATA(nhs)
        self.c.nnh = len(nhs)
        self.c.devs = <const fp_dev*>cnp.PyArray_DATA(devs)
        self.c.ndev = len(devs)
        self.c.addrs = <const fp_addr*>cnp.PyArray_DATA(addrs)
        self.c.naddr = len(addrs)
        self.c.neighs = <const fp_neigh*>cnp.PyArray_DATA(neighs)
        self.c.nneigh = len(neighs)
        atab = _index_table(len(addrs))
        ntab = _index_table(len(neighs))
        refs += [atab, ntab]
        _index_addresses(&self.c, <int32_t*>cnp.PyArray_DATA(atab), len(atab) - 1)
        _index_neighbours(&self.c, <int32_t*>cnp.PyArray_DATA(ntab), len(ntab) - 1)
        adj = np.zeros(max(len(nhs), 1) * sizeof(adj_t), dtype=np.uint8)
        _resolve_adjacencies(&self.c, <adj_t*>cnp.PyArray_DATA(adj))
        refs.append(adj)
        self.c.adj = <const adj_t*>cnp.PyArray_DATA(adj)
        self.c.strict6 = <const fp_strict*>cnp.PyArray_DATA(strict6)
        self.c.nstrict6 = len(strict6)
        self.c.rules6 = <const fp_rule*>cnp.PyArray_DATA(rules6)
        self.c.nrules6 = len(rules6)
        self.c.rules4 = <const fp_rule*>cnp.PyArray_DATA(rules4)
        self.c.nrules4 = len(rules4)
        throw_slots6 = range(len(lpm6)) if throw_slots6 is None else throw_slots6
        throw_slots4 = range(len(lpm4)) if throw_slots4 is None else throw_slots4
        for name, slots, n in (("throw_slots6", throw_slots6, len(lpm6)), ("throw_slots4", throw_slots4, len(lpm4))):
            if any(not 0 <= k < n for k in slots):
                raise ValueError(f"{name}: a slot out of range")
        for k, (t24, grp) in enumerate(lpm6):
            _check_lpm(t24, grp)
            self.lpm6_buf[k].tbl24 = <const uint32_t*>cnp.PyArray_DATA(t24)
            self.lpm6_buf[k].groups = <const uint32_t*>cnp.PyArray_DATA(grp)
            self.lpm6_buf[k].throws = k in throw_slots6
        for k, (t24, grp) in enumerate(lpm4):
            _check_lpm(t24, grp)
            self.lpm4_buf[k].tbl24 = <const uint32_t*>cnp.PyArray_DATA(t24)
            self.lpm4_buf[k].groups = <const uint32_t*>cnp.PyArray_DATA(grp)
            self.lpm4_buf[k].throws = k in throw_slots4
        self.c.lpm6 = self.lpm6_buf
        self.c.nlpm6 = len(lpm6)
        self.c.lpm4 = self.lpm4_buf
        self.c.nlpm4 = len(lpm4)
        if (not isinstance(srh_blob, np.ndarray) or srh_blob.dtype != np.uint8 or srh_blob.ndim != 1
                or len(srh_blob) == 0):
            raise TypeError("srh_blob: expected a non-empty uint8 array")
        if (not isinstance(hmac_keys, np.ndarray) or hmac_keys.dtype != np.uint8 or hmac_keys.ndim != 2
                or hmac_keys.shape[1] != sizeof(fp_hmac_key)):
            raise TypeError(f"hmac_keys: expected an array of {sizeof(fp_hmac_key)}-byte records")
        if len(s6l) and np.any(s6l[:, 20:24].copy().view(np.uint32)[:, 0].astype(np.int64)
                               + s6l[:, 24:26].copy().view(np.uint16)[:, 0] > len(srh_blob)):
            raise ValueError("s6l: SRH template outside the blob")
        # a private copy: headend records get their tunnel source resolved
        # below, once per configuration instead of once per packet
        s6l = np.array(s6l, copy=True)
        refs.append(s6l)
        self.c.s6l = <const fp_s6l*>cnp.PyArray_DATA(s6l)
        old = self.s6l_counters
        counters = np.zeros((max(len(s6l), 1), 3), dtype=np.uint64)
        if old is not None:
            m = min(len(old), len(counters))
            counters[:m] = old[:m]
        self.s6l_counters = counters
        self.c.s6l_counters = <uint64_t*>cnp.PyArray_DATA(counters)
        self.c.ns6l = len(s6l)
        nb = np.full(max(len(s6l), 1), -1, dtype=np.int32)
        _resolve_s6l_neighbours(&self.c, <int32_t*>cnp.PyArray_DATA(nb))
        refs.append(nb)
        self.c.s6l_nb = <const int32_t*>cnp.PyArray_DATA(nb)
        if s6l_vrf is None:
            self.c.s6l_vrf = NULL
        else:
            vrf = np.full(max(len(s6l), 1), -1, dtype=np.int32)
            v = np.asarray(s6l_vrf, dtype=np.int64)
            if len(v) > len(s6l) or (len(v) and (v.min() < -1 or v.max() >= len(devs))):
                raise ValueError("s6l_vrf: one ifindex (or 0, -1) per seg6local record")
            vrf[:len(v)] = v
            # the fast path leaves VRF-mode End.DT* to the general path:
            # their table slots (unused there) are -1 in this private copy
            sl = s6l.view(np.uint8).reshape(len(s6l), sizeof(fp_s6l)) if len(s6l) else s6l
            for k in np.nonzero(vrf[:len(s6l)] >= 0)[0]:
                sl[k, 8:16] = 0xFF
            refs.append(vrf)
            self.c.s6l_vrf = <const int32_t*>cnp.PyArray_DATA(vrf)
        dv = devs.reshape(-1, sizeof(fp_dev)) if len(devs) else devs
        self.c.has_l3mdev = bool(len(dv)) and bool(dv[:, 20:24].any())
        self.c.srh_blob = <const uint8_t*>cnp.PyArray_DATA(srh_blob)
        # a private copy (the tables may be shared) with each key's inner and
        # outer pad states computed once here, not per packet
        hbuf = np.zeros((max(len(hmac_keys), 1), sizeof(fp_hmac_key)), dtype=np.uint8)
        hbuf[:len(hmac_keys)] = hmac_keys
        cdef fp_hmac_key* hk = <fp_hmac_key*>cnp.PyArray_DATA(hbuf)
        for k in range(len(hmac_keys)):
            if hk[k].algo not in (1, 2) or hk[k].slen > 64:
                raise ValueError(f"hmac_keys[{k}]: unknown algorithm or secret too long")
            fp_hmac_prepare(hk[k].algo, hk[k].secret, hk[k].slen, hk[k].istate, hk[k].ostate)
        self.hmac_buf = hbuf
        refs.append(hbuf)
        self.c.hmac_keys = hk
        self.c.nhmac = len(hmac_keys)
        self.c.has_tunsrc = tunsrc is not None
        if tunsrc is not None:
            tb = bytes(tunsrc)
            if len(tb) != 16:
                raise ValueError("tunsrc must be 16 bytes")
            for k in range(16):
                self.c.tunsrc[k] = tb[k]
        self.c.seg6_flowlabel = seg6_flowlabel
        self.c.icmp6_tmo_ns = <int64_t>icmp6_ratelimit_ms * 1000000
        self.c.icmp4_tmo_ns = <int64_t>icmp4_ratelimit_ms * 1000000
        # (in jiffies, as the kernel's sysctls; fastpath's tick is HZ 250's)
        self.c.ip_error_cost_ns = <int64_t>ip_error_cost * 4000000
        self.c.ip_error_burst_ns = <int64_t>ip_error_burst * 4000000
        self.c.icmp4_ratemask = icmp4_ratemask
        if icmp_msgs_per_sec != self.c.msgs_per_sec or icmp_msgs_burst != self.c.msgs_burst:
            self.c.global_credit = icmp_msgs_burst
            self.c.global_stamp_ns = 0
        self.c.msgs_per_sec = icmp_msgs_per_sec
        self.c.mp_policy6 = mp_policy6
        self.c.mp_policy4 = mp_policy4
        self.c.v4_full_rpcheck = v4_full_rpcheck
        self.c.msgs_burst = icmp_msgs_burst
        # the route caches: valid for these tables only; keyed by destination
        # only, so off when a rule looks at the source or the interface
        self._new_cache_generation()
        r6 = rules6.reshape(-1, sizeof(fp_rule)) if len(rules6) else rules6
        self.c.rcache_on = not any(int(r6[k, 9]) or int(r6[k, 11]) for k in range(len(r6)))
        self.c.pre_bypass = False
        r4 = rules4.reshape(-1, sizeof(fp_rule)) if len(rules4) else rules4
        self.c.rcache4_on = not any(int(r4[k, 9]) or int(r4[k, 11]) for k in range(len(r4)))
        self.c.lo_ifindex = lo_ifindex
        self.c.fwd6 = fwd6
        self.c.ip_default_ttl = ip_default_ttl
        self.c.hop_limit = hop_limit
        self.refs = refs
        _resolve_headend_sources(&self.c, <fp_s6l*>cnp.PyArray_DATA(s6l))

    cdef _new_cache_generation(self):
        self.c.rcache_gen += 1
        if self.c.rcache_gen == 0:
            memset(self.rcache_buf, 0, sizeof(self.rcache_buf))
            memset(self.rcache4_buf, 0, sizeof(self.rcache4_buf))
            memset(self.tcache_buf, 0, sizeof(self.tcache_buf))
            self.c.last_gen = 0
            self.c.rcache_gen = 1

    def flush_route_caches(self):
        """Forget every cached lookup (as a load() does): the LPMs it reads
        were changed in place (a Dataplane worker, told between batches)."""
        self._new_cache_generation()

    cdef _own_pcpu(self, Py_ssize_t n):
        pc = np.zeros((n, sizeof(fp_pcpu)), dtype=np.uint8)
        if self.pcpu is not None and self.own_pcpu:
            pc[:len(self.pcpu)] = self.pcpu
        self._set_pcpu(pc)
        self.own_pcpu = True

    cdef _set_pcpu(self, pc):
        self.pcpu = pc
        self.c.pcpu = <fp_pcpu*>cnp.PyArray_DATA(pc)
        self.c.npcpu = len(pc)

    def set_mode(self, mode="noref", use_stats="lazy", pcpu=None, bint check_gen=False):
        """The route-cache mode: ``noref`` or ``refcount`` (seg6local's
        lookups hold a reference, as before seeds/000-002; or
        ``refcount-private``: the same atomics, every one on this worker's
        own copy, for attributing the cost), ``use_stats``
        ``shared`` or ``lazy`` (seeds/003), and optionally this worker's
        per-route copies (uint8[N, 16] rows of PCPU_DTYPE, e.g. in shared
        memory, N >= the route entries) instead of private ones.
        ``check_gen``: count packets whose route changed generation under
        them (the stress tests' check that no freed entry is used)."""
        if mode not in ("noref", "refcount", "refcount-private"):
            raise ValueError(f"mode must be 'noref' or 'refcount', not {mode!r}")
        if use_stats not in ("shared", "lazy"):
            raise ValueError(f"use_stats must be 'shared' or 'lazy', not {use_stats!r}")
        if pcpu is not None:
            if (not isinstance(pcpu, np.ndarray) or pcpu.dtype != np.uint8 or pcpu.ndim != 2
                    or pcpu.shape[1] != sizeof(fp_pcpu) or not pcpu.flags.c_contiguous):
                raise TypeError(f"pcpu: expected a C-contiguous uint8[N, {sizeof(fp_pcpu)}] array")
            if self.c.ndst and len(pcpu) < self.c.ndst:
                raise ValueError("pcpu must have a row per route entry")
            self._set_pcpu(pcpu)
            self.own_pcpu = False
        self.c.refmode = {"noref": MODE_NOREF, "refcount": MODE_REFCOUNT,
                          "refcount-private": MODE_REFCOUNT_PRIVATE}[mode]
        self.c.use_mode = USE_LAZY if use_stats == "lazy" else USE_SHARED
        self.c.check_gen = check_gen

    @property
    def mode(self):
        return ("noref", "refcount", "refcount-private")[self.c.refmode]

    @property
    def fast(self):
        """Whether packets try the fast path first (True by default).  The
        results are the same either way; False runs every packet through
        the general path (the tests' reference, and the bench's baseline)."""
        return bool(self.c.fast)

    @fast.setter
    def fast(self, bint on):
        self.c.fast = on

    @property
    def use_stats(self):
        return "lazy" if self.c.use_mode == USE_LAZY else "shared"

    def pcpu_records(self):
        """This worker's route copies (uint8 rows of PCPU_DTYPE), live."""
        return self.pcpu

    def cache_counters(self):
        """References refused (entry being freed), generation violations,
        the packets the fast path took (the rest took the general path), the
        IPv6 route cache's misses, the chunks of packets whose routes were
        looked up ahead, and the IPv4 route cache's misses."""
        return {"hold_fail": self.c.hold_fail, "gen_violations": self.c.gen_violations,
                "fast_packets": self.c.fast_packets, "rcache_misses": self.c.rcache_misses,
                "ahead_chunks": self.c.ahead_chunks, "rcache4_misses": self.c.rcache4_misses}

    cdef int _batch(self, bat_t* b, object data, object start, object length, object l2len,
                    object iif, object oif, object nexthop, object verdict, object reason,
                    object dst, int linktype, object timestamp_ns) except -1:
        """Check a batch's arrays (numpy C macros, no memoryview objects)
        and point ``b`` at them."""
        cdef Py_ssize_t n
        if self.c.ndst == 0:
            raise RuntimeError("Datapath.load() was not called")
        _check_array(data, "data", cnp.NPY_UINT8, 2, -1)
        n = cnp.PyArray_DIM(data, 0)
        _check_array(start, "start", cnp.NPY_INT32, 1, n)
        _check_array(length, "length", cnp.NPY_INT32, 1, n)
        _check_array(l2len, "l2len", cnp.NPY_UINT16, 1, n)
        _check_array(iif, "iif", cnp.NPY_UINT32, 1, n)
        _check_array(oif, "oif", cnp.NPY_UINT32, 1, n)
        _check_array(nexthop, "nexthop", cnp.NPY_UINT8, 2, n)
        if cnp.PyArray_DIM(nexthop, 1) != 16:
            raise ValueError("nexthop must be uint8[N, 16]")
        _check_array(verdict, "verdict", cnp.NPY_UINT8, 1, n)
        _check_array(reason, "reason", cnp.NPY_UINT16, 1, n)
        _check_array(dst, "dst", cnp.NPY_UINT32, 1, n)
        if timestamp_ns is not None:
            _check_array(timestamp_ns, "timestamp_ns", cnp.NPY_INT64, 1, n)
        if linktype != LINK_RAW and linktype != LINK_ETHERNET:
            raise ValueError("unknown link type")
        if n and not cnp.PyArray_ISWRITEABLE(data):
            raise ValueError("data must be writeable")
        if self.c.ndst > self.c.npcpu:
            raise RuntimeError("the per-worker route copies are smaller than the tables")
        b.n = n
        b.slot = <int32_t>cnp.PyArray_DIM(data, 1)
        b.linktype = linktype
        b.base = <uint8_t*>cnp.PyArray_DATA(data)
        b.start = <int32_t*>cnp.PyArray_DATA(start)
        b.length = <int32_t*>cnp.PyArray_DATA(length)
        b.l2len = <uint16_t*>cnp.PyArray_DATA(l2len)
        b.iif = <uint32_t*>cnp.PyArray_DATA(iif)
        b.oif = <uint32_t*>cnp.PyArray_DATA(oif)
        b.nexthop = <uint8_t*>cnp.PyArray_DATA(nexthop)
        b.verdict = <uint8_t*>cnp.PyArray_DATA(verdict)
        b.reason = <uint16_t*>cnp.PyArray_DATA(reason)
        b.dst = <uint32_t*>cnp.PyArray_DATA(dst)
        b.timestamp_ns = <int64_t*>cnp.PyArray_DATA(timestamp_ns) if (timestamp_ns is not None and n) else NULL
        return 0

    def process(self, data, start, length, l2len, iif, oif, nexthop, verdict, reason, dst,
                int linktype, timestamp_ns=None):
        """Run every packet of a batch through the datapath, in place.  The
        arrays are the Batch's (fastpath/batch.py documents their dtypes);
        they are checked with numpy's C macros, not wrapped in memoryviews, so
        a call costs little more than the packets.  Returns the number of
        packets left for the IPv4 fragmenter."""
        cdef bat_t b
        cdef Py_ssize_t nfrag
        self._batch(&b, data, start, length, l2len, iif, oif, nexthop, verdict, reason, dst,
                    linktype, timestamp_ns)
        if b.n == 0:
            return 0
        set_jiffies(&self.c)
        with nogil:
            nfrag = run_batch(&self.c, self.reasons, &b)
        if nfrag < 0:
            raise MemoryError()
        return nfrag

    def run_loop(self, data, start, length, l2len, iif, oif, nexthop, verdict, reason, dst,
                 int linktype, saved_data, saved_start, saved_length, Py_ssize_t used,
                 double duration, qsbr=None, Py_ssize_t qs_index=0, Py_ssize_t token_index=0,
                 Py_ssize_t seq_index=0, uint64_t seq=0, Py_ssize_t stop_index=0,
                 Py_ssize_t count_index=-1, double rate=0.0, Py_ssize_t ring=0):
        """Benchmark traffic: process the batch over and over for
        ``duration`` seconds without returning to Python, restoring its
        first ``used`` bytes per packet (and start/length) from the saved
        copies before each pass, outside the timed region.  The saved copies
        may hold more packets than the batch (a pool): each pass then takes
        the next batch-full of them, round the pool.  With ``qsbr``
        (a uint64 array in shared memory: the control words of a Dataplane)
        the loop reports a quiescent state after every batch
        (``qsbr[qs_index] = qsbr[token_index]``, as rte_rcu_qsbr_quiescent)
        and returns early when ``qsbr[seq_index]`` is no longer ``seq`` (new
        tables published: the caller reloads and calls again) or
        ``qsbr[stop_index]`` is set.  With ``count_index`` >= 0 the batches
        and packets done are also added to ``qsbr[count_index]`` and
        ``qsbr[count_index + 1]`` as they happen (the worker's own line: what
        a dead worker had done stays known).

        ``rate`` > 0 models an RX ring: packets arrive at ``rate`` per second
        into a ring of ``ring`` descriptors (those finding it full are lost)
        and each pass takes up to a batch of what is waiting, polling when
        nothing is (as a DPDK worker).  Returns (packets processed,
        batches, seconds spent processing, stopped_early, packets offered,
        packets lost)."""
        cdef bat_t b
        cdef Py_ssize_t r, nb = 0, npk = 0
        cdef uint64_t* q = NULL
        cdef const uint8_t* sd
        cdef const int32_t* ss
        cdef const int32_t* sl
        cdef timespec t0, t1, tend
        cdef int64_t busy = 0, deadline, tlast = 0, occ = 0, arr, offered = 0, lost = 0
        cdef double acc = 0.0
        cdef Py_ssize_t full_n
        cdef bint early = False
        if rate > 0 and ring <= 0:
            raise ValueError("a rate needs a ring size")
        self._batch(&b, data, start, length, l2len, iif, oif, nexthop, verdict, reason, dst,
                    linktype, None)
        _check_array(saved_data, "saved_data", cnp.NPY_UINT8, 2, -1)
        cdef Py_ssize_t npool = cnp.PyArray_DIM(saved_data, 0), pos = 0, src
        if npool < b.n:
            raise ValueError("saved_data: fewer packets than the batch")
        _check_array(saved_start, "saved_start", cnp.NPY_INT32, 1, npool)
        _check_array(saved_length, "saved_length", cnp.NPY_INT32, 1, npool)
        if used < 0 or used > b.slot or used > cnp.PyArray_DIM(saved_data, 1):
            raise ValueError("used must fit the slots")
        if qsbr is not None:
            _check_array(qsbr, "qsbr", cnp.NPY_UINT64, 1, -1)
            for k in (qs_index, token_index, seq_index, stop_index,
                      count_index + 1 if count_index >= 0 else 0):
                if k < 0 or k >= cnp.PyArray_DIM(qsbr, 0):
                    raise IndexError("qsbr index out of range")
            q = <uint64_t*>cnp.PyArray_DATA(qsbr)
        sd = <const uint8_t*>cnp.PyArray_DATA(saved_data)
        ss = <const int32_t*>cnp.PyArray_DATA(saved_start)
        sl = <const int32_t*>cnp.PyArray_DATA(saved_length)
        cdef Py_ssize_t sslot = cnp.PyArray_DIM(saved_data, 1)
        if b.n == 0:
            return (0, 0, 0.0, False, 0, 0)
        full_n = b.n
        with nogil:
            clock_gettime(CLOCK_MONOTONIC, &tend)
            deadline = ts_ns(&tend) + <int64_t>(duration * 1e9)
            tlast = ts_ns(&tend)
            # (the caller has just reported a quiescent state: a publication
            # since its last reload must empty the route caches before the
            # first batch)
            if q != NULL and _stop_or_published(q, seq_index, stop_index, seq):
                early = True
            while not early:
                if rate > 0:
                    # arrivals since the last look, into the bounded ring
                    clock_gettime(CLOCK_MONOTONIC, &t0)
                    acc += (ts_ns(&t0) - tlast) * rate * 1e-9
                    tlast = ts_ns(&t0)
                    arr = <int64_t>acc
                    acc -= arr
                    offered += arr
                    occ += arr
                    if occ > ring:
                        lost += occ - ring
                        occ = ring
                    if occ == 0:
                        if tlast >= deadline:
                            break
                        if q != NULL and _quiescent_then_check(q, qs_index, token_index,
                                                               seq_index, stop_index, seq):
                            early = True
                            break
                        continue
                    b.n = occ if occ < full_n else full_n
                    occ -= b.n
                src = pos
                for r in range(b.n):
                    memcpy(b.base + r * b.slot, sd + src * sslot, used)
                    b.start[r] = ss[src]
                    b.length[r] = sl[src]
                    src += 1
                    if src == npool:
                        src = 0
                pos = src
                clock_gettime(CLOCK_MONOTONIC, &t0)
                self.c.jiffies = jiffies_of(&t0)
                if run_batch(&self.c, self.reasons, &b) < 0:
                    break
                clock_gettime(CLOCK_MONOTONIC, &t1)
                busy += ts_ns(&t1) - ts_ns(&t0)
                nb += 1
                npk += b.n
                if q != NULL:
                    if count_index >= 0:
                        q[count_index] += 1
                        q[count_index + 1] += b.n
                    if _quiescent_then_check(q, qs_index, token_index, seq_index, stop_index,
                                             seq):
                        early = True
                        break
                if ts_ns(&t1) >= deadline:
                    break
        b.n = full_n
        return (npk, nb, busy * 1e-9, early, offered, lost)

    def trace(self, data, start, length, l2len, iif, oif, nexthop, verdict, reason, dst,
              int linktype, int max_events=256):
        """process() with the trace buffer on: returns, for the batch, the
        list of events (code, a, b, addr bytes) in the order they happened."""
        cdef trace_t t
        cdef tev_t* ev = <tev_t*>malloc(sizeof(tev_t) * max_events)
        if ev == NULL:
            raise MemoryError()
        t.n = 0
        t.cap = max_events
        t.ev = ev
        self.c.trace = &t
        try:
            self.process(data, start, length, l2len, iif, oif, nexthop, verdict, reason, dst,
                         linktype)
            return [(ev[k].code, ev[k].a, ev[k].b, bytes(ev[k].addr[:16])) for k in range(t.n)]
        finally:
            self.c.trace = NULL
            free(ev)

    def reason_counts(self):
        return np.array([self.reasons[k] for k in range(R_COUNT)], dtype=np.uint64)

    def reset_counters(self):
        memset(self.reasons, 0, sizeof(self.reasons))
        self.c.hold_fail = 0
        self.c.gen_violations = 0
        if self.s6l_counters is not None:
            self.s6l_counters[...] = 0

    def clear_seg6local_counters(self, indexes):
        """Zero the counters of seg6local parameter indexes given back (a
        route reclaimed; the index may serve another route next)."""
        for k in indexes:
            if 0 <= k < len(self.s6l_counters):
                self.s6l_counters[k] = 0

    def seg6local_counters(self):
        """uint64[n, 3]: packets, bytes, errors per seg6local parameter index."""
        return self.s6l_counters.copy()

    @staticmethod
    def record_sizes():
        return {"dst": sizeof(fp_dst), "nh": sizeof(fp_nh), "dev": sizeof(fp_dev),
                "addr": sizeof(fp_addr), "rule": sizeof(fp_rule), "neigh": sizeof(fp_neigh),
                "s6l": sizeof(fp_s6l), "pcpu": sizeof(fp_pcpu), "hmac_key": sizeof(fp_hmac_key),
                "strict": sizeof(fp_strict),
                "reasons": R_COUNT}


def sha_digest(int algo, data):
    """SHA-1 (algo 1) or SHA-256 (algo 2) of ``data`` by fastpath's C code
    (for the tests; the datapath uses it through HMAC)."""
    cdef bytes b = bytes(data)
    cdef uint8_t out[32]
    if algo not in (1, 2):
        raise ValueError("algo must be 1 (sha1) or 2 (sha256)")
    n = fp_sha(algo, <const uint8_t*><char*>b, len(b), out)
    return bytes(out[:n])


def hmac_digest(int algo, key, data):
    """HMAC-SHA1/SHA256 by fastpath's C code (for the tests)."""
    cdef bytes k = bytes(key)
    cdef bytes b = bytes(data)
    cdef uint8_t out[32]
    if algo not in (1, 2):
        raise ValueError("algo must be 1 (sha1) or 2 (sha256)")
    n = fp_hmac(algo, <const uint8_t*><char*>k, len(k), <const uint8_t*><char*>b, len(b), out)
    return bytes(out[:n])


def sha_accel(on=None):
    """Whether the SHA blocks run on the CPU's SHA extensions; ``on``
    switches them (False: the portable C code), for tests and benchmarks."""
    global SHA_ACCEL
    if on is not None:
        SHA_ACCEL = bool(fp_sha_use_accel(1 if on else 0))
    return SHA_ACCEL


def record_offsets():
    """Field offsets of the C records, for checking the numpy dtypes."""
    cdef fp_dst d
    cdef fp_nh nh
    cdef fp_dev dv
    cdef fp_addr a
    cdef fp_rule r
    cdef fp_neigh ne
    cdef fp_s6l sl
    cdef fp_hmac_key hk
    cdef fp_strict st
    cdef char* b
    b = <char*>&d
    dst = {"refcnt": <char*>&d.refcnt - b, "gen": <char*>&d.gen - b, "type": <char*>&d.type - b,
           "family": <char*>&d.family - b, "flags": <char*>&d.flags - b,
           "nh_count": <char*>&d.nh_count - b, "nh_first": <char*>&d.nh_first - b,
           "table": <char*>&d.table - b, "encap": <char*>&d.encap - b,
           "encap_type": <char*>&d.encap_type - b, "hoplimit": <char*>&d.hoplimit - b,
           "plen": <char*>&d.plen - b,
           "mtu": <char*>&d.mtu - b, "metric": <char*>&d.metric - b,
           "prefsrc": <char*>&d.prefsrc[0] - b, "lastuse": <char*>&d.lastuse - b,
           "use": <char*>&d.use - b}
    b = <char*>&nh
    nhs = {"gw": <char*>&nh.gw[0] - b, "oif": <char*>&nh.oif - b,
           "upper_bound": <char*>&nh.upper_bound - b, "weight": <char*>&nh.weight - b,
           "flags": <char*>&nh.flags - b, "family": <char*>&nh.family - b}
    b = <char*>&dv
    devs = {"ifindex": <char*>&dv.ifindex - b, "mtu": <char*>&dv.mtu - b, "flags": <char*>&dv.flags - b,
            "seg6_require_hmac": <char*>&dv.seg6_require_hmac - b, "hop_limit": <char*>&dv.hop_limit - b,
            "vlan_set": <char*>&dv.vlan_set - b, "mac": <char*>&dv.mac[0] - b,
            "vlan_tci": <char*>&dv.vlan_tci - b, "l3mdev": <char*>&dv.l3mdev - b,
            "l3table": <char*>&dv.l3table - b, "l3slot6": <char*>&dv.l3slot6 - b,
            "l3slot4": <char*>&dv.l3slot4 - b}
    b = <char*>&a
    addrs = {"addr": <char*>&a.addr[0] - b, "ifindex": <char*>&a.ifindex - b, "plen": <char*>&a.plen - b,
             "family": <char*>&a.family - b, "scope": <char*>&a.scope - b, "label": <char*>&a.label - b}
    b = <char*>&r
    rules = {"pref": <char*>&r.pref - b, "table": <char*>&r.table - b, "action": <char*>&r.action - b,
             "src_len": <char*>&r.src_len - b, "dst_len": <char*>&r.dst_len - b,
             "has_iif": <char*>&r.has_iif - b, "iif": <char*>&r.iif - b, "src": <char*>&r.src[0] - b,
             "dst": <char*>&r.dst[0] - b, "slot": <char*>&r.slot - b}
    b = <char*>&ne
    neighs = {"addr": <char*>&ne.addr[0] - b, "ifindex": <char*>&ne.ifindex - b,
              "family": <char*>&ne.family - b, "mac": <char*>&ne.mac[0] - b}
    b = <char*>&sl
    s6l = {"action": <char*>&sl.action - b, "flavors": <char*>&sl.flavors - b,
           "lblen": <char*>&sl.lblen - b, "nflen": <char*>&sl.nflen - b, "oif": <char*>&sl.oif - b,
           "slot6": <char*>&sl.slot6 - b, "slot4": <char*>&sl.slot4 - b, "table": <char*>&sl.table - b,
           "srh_off": <char*>&sl.srh_off - b, "srh_len": <char*>&sl.srh_len - b,
           "count": <char*>&sl.count - b, "mode": <char*>&sl.mode - b, "nh6": <char*>&sl.nh6[0] - b,
           "nh4": <char*>&sl.nh4[0] - b, "tunsrc": <char*>&sl.tunsrc[0] - b}
    b = <char*>&hk
    hmac_key = {"keyid": <char*>&hk.keyid - b, "algo": <char*>&hk.algo - b, "slen": <char*>&hk.slen - b,
                "secret": <char*>&hk.secret[0] - b, "istate": <char*>&hk.istate[0] - b,
                "ostate": <char*>&hk.ostate[0] - b}
    b = <char*>&st
    strict = {"prefix": <char*>&st.prefix[0] - b, "dst": <char*>&st.dst - b, "oif": <char*>&st.oif - b,
              "slot": <char*>&st.slot - b, "plen": <char*>&st.plen - b}
    return {"dst": dst, "nh": nhs, "dev": devs, "addr": addrs, "rule": rules, "neigh": neighs,
            "s6l": s6l, "hmac_key": hmac_key, "strict": strict}


cdef _check_array(object a, str name, int typenum, int ndim, Py_ssize_t n):
    if not cnp.PyArray_Check(a):
        raise TypeError(f"{name} must be a numpy array")
    if (cnp.PyArray_TYPE(<cnp.ndarray>a) != typenum or cnp.PyArray_NDIM(<cnp.ndarray>a) != ndim
            or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>a)):
        raise TypeError(f"{name} must be a C-contiguous {ndim}-d array of "
                        f"{np.dtype(cnp.PyArray_TypeObjectFromType(typenum)).name}")
    if n >= 0 and cnp.PyArray_DIM(<cnp.ndarray>a, 0) != n:
        raise ValueError("batch metadata arrays must all have one entry per packet")
    if not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>a):
        raise ValueError(f"{name} must be writeable")


def _check_lpm(t24, grp):
    if not isinstance(t24, np.ndarray) or t24.dtype != np.uint32 or t24.size != (1 << 24) or not t24.flags.c_contiguous:
        raise TypeError("tbl24 must be a C-contiguous uint32[1 << 24] array")
    if not isinstance(grp, np.ndarray) or grp.dtype != np.uint32 or not grp.flags.c_contiguous or grp.size % 256:
        raise TypeError("groups must be a C-contiguous uint32[G, 256] array")

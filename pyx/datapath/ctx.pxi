# The state the kernels share: a packet (as the kernel's struct sk_buff and
# its control block), a worker's context (its tables, caches and counters: the
# per-CPU data), trace events; small address helpers (include/net/ipv6.h).


cdef struct tev_t:                # one trace event (Router.trace)
    uint16_t code
    uint16_t pad
    uint32_t a
    uint32_t b
    uint8_t addr[16]


cdef struct trace_t:
    uint32_t n
    uint32_t cap
    tev_t* ev


cdef struct rcache_t:             # one entry of the per-worker IPv6 route cache
    uint8_t daddr[16]
    uint32_t dst                  # bits 0..23 the route; 24..31 the tables that missed on the way
    uint32_t gen                  # 0: empty; else the generation of the tables it was filled from


cdef struct rcache4_t:            # one entry of the per-worker IPv4 route cache
    uint32_t daddr                # host order
    uint32_t dst
    uint32_t gen                  # as rcache_t's
    uint32_t pad


cdef struct tcache_t:             # one entry of the per-worker cache of lookups in one
    uint8_t daddr[16]             # table (End.T, End.DT6): by destination and table
    uint32_t v                    # what lpm6_lookup() returned
    int32_t slot                  # the table's LPM
    uint32_t gen                  # as rcache_t's
    uint32_t pad


cdef struct peer_t:               # inet_peer's rate-limit fields, by destination
    uint8_t addr[16]
    int64_t tokens_ns
    int64_t last_ns
    uint32_t family               # 0: empty
    uint32_t pad


cdef struct ctx_t:
    trace_t* trace                # NULL unless tracing (Router.trace)
    rcache_t* rcache              # per-worker cache of fib6_lookup results by destination
    uint32_t rcache_gen           # bumped by every load(): a reconfiguration empties the cache
    bint rcache_on                # only while no IPv6 rule selects on source or iif
    rcache4_t* rcache4            # per-worker cache of fib4_lookup results by destination
    bint rcache4_on               # only while no IPv4 rule selects on source or iif
    uint8_t last_da[16]           # the fast path's last first lookup of a SID (while the
    uint32_t last_rt              # route cache is on): its destination, route, tables missed
    uint32_t last_nmiss
    uint32_t last_gen             # and generation (0: none)
    uint64_t rcache4_misses
    const int64_t* batch_ts       # the batch's timestamps (ns), or NULL
    tcache_t* tcache              # per-worker cache of lookups in one IPv6 table
    fp_dst* dsts
    uint32_t ndst
    const uint32_t* dfast         # per route entry (>= ndst): its fast-path word (Tables.dfast)
    const fp_nh* nhs
    uint32_t nnh
    const fp_dev* devs            # indexed by ifindex
    uint32_t ndev
    const fp_addr* addrs
    uint32_t naddr
    const fp_neigh* neighs
    uint32_t nneigh
    const int32_t* addr_tab       # addrs by (family, address): open addressing, -1 empty
    uint32_t addr_mask
    const int32_t* neigh_tab      # neighs by (device, family, address)
    uint32_t neigh_mask
    const fp_rule* rules6
    uint32_t nrules6
    const fp_rule* rules4
    uint32_t nrules4
    const fp_lpm* lpm6
    uint32_t nlpm6
    const fp_lpm* lpm4
    uint32_t nlpm4
    const fp_strict* strict6      # the routes a strict-interface lookup may return, by
    uint32_t nstrict6             # table slot, longest prefix, metric (Tables.strict6)
    uint32_t lo_ifindex
    bint fwd6                     # net.ipv6.conf.all.forwarding
    uint8_t ip_default_ttl
    uint8_t hop_limit             # net.ipv6.conf.all.hop_limit
    uint8_t linktype
    int32_t slot
    uint64_t* reason_count        # [R_COUNT]
    const fp_s6l* s6l             # seg6local parameters, indexed by dst.encap
    uint32_t ns6l
    uint64_t* s6l_counters        # [ns6l, 3]: packets, bytes, errors (this worker's)
    const uint8_t* srh_blob       # SRH templates of End.B6 / End.B6.Encaps
    const fp_hmac_key* hmac_keys  # ip sr hmac keys (secrets and prepared hash states)
    uint32_t nhmac
    bint has_tunsrc
    uint8_t tunsrc[16]            # ip sr tunsrc
    int seg6_flowlabel            # net.ipv6.seg6_flowlabel
    # ICMP rate limiting, timed by packet timestamps (0 = off)
    int64_t icmp6_tmo_ns          # net.ipv6.icmp.ratelimit
    int64_t icmp4_tmo_ns          # net.ipv4.icmp_ratelimit
    int64_t ip_error_cost_ns      # net.ipv4.route.error_cost (0: ip_error()'s limiter off)
    int64_t ip_error_burst_ns     # net.ipv4.route.error_burst
    uint32_t icmp4_ratemask       # net.ipv4.icmp_ratemask
    int64_t msgs_per_sec          # net.ipv4.icmp_msgs_per_sec (global, both families)
    int64_t msgs_burst            # net.ipv4.icmp_msgs_burst
    int64_t global_credit
    int64_t global_stamp_ns
    peer_t* peers                 # inet_peer: per-destination token buckets
    int mp_policy6                # net.ipv6.fib_multipath_hash_policy (0 L3, 1 L4)
    int mp_policy4                # net.ipv4.fib_multipath_hash_policy
    bint v4_full_rpcheck          # custom IPv4 rules or local routes: full fib_validate_source
    # route caches (README, "The multi-process dataplane": refcount and noref)
    int refmode                   # MODE_NOREF, MODE_REFCOUNT or MODE_REFCOUNT_PRIVATE
    int use_mode                  # USE_SHARED or USE_LAZY
    fp_pcpu* pcpu                 # this worker's copies of the routes, [npcpu]
    uint32_t npcpu
    uint32_t jiffies              # the tick of this batch (HZ 250)
    uint64_t hold_fail            # references refused: the entry was being freed
    bint check_gen                # verify each packet's route generation at its end
    uint64_t gen_violations       # packets whose route was freed/reused under them
    bint fast                     # try the fast path (fast_path) before the general one
    uint64_t fast_packets         # packets the fast path took to the end
    const adj_t* adj              # per nexthop: its way out, resolved at load (fast path)
    const int32_t* s6l_nb         # per seg6local record: the first neighbour entry of its
                                  # nh6 / nh4 (End.X, End.DX6, End.DX4), -1: none
    bint has_l3mdev               # some device is a VRF or enslaved to one (fp_dev.l3mdev)
    const int32_t* s6l_vrf        # per seg6local record, NULL while no VRF device exists:
                                  # End.DT* vrftable's VRF ifindex (0: none bound, drop),
                                  # -1 for the others
    uint64_t rcache_misses        # route cache misses (lookups that walked the rules)
    bint ahead                    # look routes up ahead (the last chunk missed the cache)
    uint64_t ahead_chunks         # chunks whose routes were looked up ahead
    bint pre_bypass               # the last chunk's second lookups all but missed the cache
    uint32_t nuse                 # use statistics deferred to the chunk's end (use_later)
    uint32_t uselog[USELOG]


cdef struct adj_t:                # a nexthop's way out, resolved when the tables are loaded
    uint32_t mtu6                 # the largest IPv6 packet it sends (the device's MTU, at
                                  # least IPV6_MIN_MTU); 0: not for the fast path (no such
                                  # device, down, or an IPv4 gateway)
    uint32_t mtu4                 # the same for IPv4 (0 also for an IPv6 gateway)
    uint8_t vlan                  # the device tags its frames (with tci)
    uint8_t gw                    # a gateway: eth[0:6] is its neighbour's MAC (zero when
                                  # unresolved); else the packet's destination's, per packet
    uint16_t tci
    uint8_t eth[12]               # destination and source MAC of the Ethernet header
    uint8_t pad[8]


cdef struct pre_t:                # a packet's route lookups, done ahead (prelookup)
    int32_t k1                    # offset in the slot of the first key (the DA); -1: none
    int32_t k2                    # of the second (the next segment); -2: End.X's nh6; -1: none
    uint32_t rt1                  # what fib6_cached() returned for them
    uint32_t m1                   # ... and the tables that missed
    uint32_t rt2
    uint32_t m2
    const uint8_t* key2           # the second key (prelookup), looked up by pre_second
    const uint8_t* saddr


cdef struct ip4opt_t:
    # IPCB(skb)->opt: the IPv4 options compiled at receive (ip4_options.pxi);
    # offsets from the IP header, 0 = absent; optlen 0 = not compiled
    uint8_t optlen
    uint8_t srr
    uint8_t rr
    uint8_t ts
    uint8_t router_alert
    uint8_t is_strictroute
    uint8_t rr_needaddr
    uint8_t ts_needaddr
    uint8_t ts_needtime
    uint8_t is_changed


cdef struct pkt_t:
    uint8_t* row                  # the packet's slot
    int32_t start                 # first byte of the frame (L2 or L3)
    int32_t length                # frame length
    int32_t l3                    # offset of the L3 header in the slot
    int32_t l3len                 # L3 length (after trimming to the IP length)
    uint16_t l2len
    uint16_t vlan_tci
    bint has_vlan
    uint32_t iif
    uint32_t rcv_iif              # IP6CB(skb)->iif / inet_iif(): the device it was received
                                  # on, kept when a VRF takes it over (end_dt_vrf_core sets
                                  # skb->dev, not the control block): ICMPv6 errors pick
                                  # their source there
    uint32_t oif
    uint8_t nexthop[16]
    uint8_t verdict
    uint16_t reason
    uint32_t dst
    uint8_t family
    bint has_known_nh             # FLOWI_FLAG_KNOWN_NH: nexthop of a gateway-less route
    uint8_t known_nh[16]
    bint l2_done                  # End.DX2: the frame already is the L2 frame to send
    int depth                     # nested seg6local behaviours (a SID list through our own SIDs)
    int nencap                    # nested headend encapsulations
    Py_ssize_t index              # the packet's index in its batch (its timestamp: pkt_ts)
    int32_t held                  # the route this packet holds a reference on (-1: none)
    bint held_pcpu                # ... on this worker's copy (IPv6) or the shared entry
    uint32_t chk_dst              # route of the last lookup and its generation (check_gen)
    uint32_t chk_gen
    const pre_t* pre              # this packet's lookups done ahead, or NULL
    ip4opt_t opt4                 # its IPv4 options as compiled at receive
    uint32_t strict_oif           # its route was looked up with RT6_LOOKUP_F_IFACE on this
                                  # device (0: not): a multipath choice stays on it


# trace events (decoded by fastpath/trace.py, which keeps the same numbers)
cdef enum:
    T_RULE = 1        # a = rule index, b = table (0 for a rule action)
    T_LOOKUP = 2      # a = table, b = route entry (0: miss); addr = key
    T_ROUTE = 3       # a = route entry, b = family; addr = key
    T_S6L = 4         # a = action, b = parameter index
    T_SRH = 5         # a = SRH offset, b = segments left
    T_ADVANCE = 6     # a = new segments left; addr = new DA
    T_CSID = 7        # addr = new DA
    T_POP = 8         # a = SRH length, b = 1 PSP / 2 USP
    T_DECAP = 9       # a = inner protocol, b = bytes removed
    T_INSERT = 10     # a = SRH length; addr = new DA
    T_ENCAP = 11      # a = outer headers length; addr = new DA
    T_FORWARD = 12    # a = oif, b = hop limit / TTL after; addr = nexthop
    T_ICMP = 13       # a = type, b = code; addr = destination
    T_VERDICT = 14    # a = verdict, b = reason
    T_TABLE = 15      # a = LPM slot, b = route entry; addr = key
    T_INPUT = 16      # a = family, b = length
    T_ICMP_DUE = 17   # a = type, b = code: an error is due, its route is looked up next
    T_VRF = 18        # a = VRF ifindex: End.DT* hands the packet to that VRF device


cdef inline int64_t pkt_ts(const ctx_t* c, const pkt_t* p) noexcept nogil:
    """The packet's timestamp (ns; 0 without): the clock of the rate limits."""
    return c.batch_ts[p.index] if c.batch_ts != NULL else 0


cdef inline void tr(const ctx_t* c, uint16_t code, uint32_t a, uint32_t b,
                    const uint8_t* addr) noexcept nogil:
    """Record a trace event; free (one predictable branch) when not tracing."""
    cdef trace_t* t = c.trace
    if t == NULL or t.n >= t.cap:
        return
    t.ev[t.n].code = code
    t.ev[t.n].a = a
    t.ev[t.n].b = b
    if addr != NULL:
        memcpy(t.ev[t.n].addr, addr, 16)
    else:
        memset(t.ev[t.n].addr, 0, 16)
    t.n += 1


cdef inline bint eq16(const uint8_t* a, const uint8_t* b) noexcept nogil:
    """16-byte equality as two 64-bit compares (libc memcmp is a call)."""
    cdef uint64_t a0, a1, b0, b1
    memcpy(&a0, a, 8)
    memcpy(&a1, a + 8, 8)
    memcpy(&b0, b, 8)
    memcpy(&b1, b + 8, 8)
    return ((a0 ^ b0) | (a1 ^ b1)) == 0


cdef inline bint in6_is_zero(const uint8_t* a) noexcept nogil:
    return memcmp(a, FP_IN6_ANY, 16) == 0


cdef inline bint in6_is_loopback(const uint8_t* a) noexcept nogil:
    return memcmp(a, FP_IN6_LOOPBACK, 16) == 0


cdef inline bint in6_is_multicast(const uint8_t* a) noexcept nogil:
    return a[0] == 0xFF


cdef inline bint in6_is_linklocal(const uint8_t* a) noexcept nogil:
    return a[0] == 0xFE and (a[1] & 0xC0) == 0x80


cdef inline bint rt6_need_strict(const uint8_t* a) noexcept nogil:
    """rt6_need_strict(): multicast, link-local and loopback destinations
    are looked up on one interface only (RT6_LOOKUP_F_IFACE)."""
    if a[0] >= 0xFE:
        return a[0] == 0xFF or (a[1] & 0xC0) == 0x80
    return a[0] == 0 and in6_is_loopback(a)


cdef inline bint in6_is_v4mapped(const uint8_t* a) noexcept nogil:
    cdef int k
    for k in range(10):
        if a[k]:
            return False
    return a[10] == 0xFF and a[11] == 0xFF


cdef inline int in6_scope(const uint8_t* a) noexcept nogil:
    """RFC 4007 scope value, as __ipv6_addr_type's IPV6_ADDR_SCOPE_*."""
    if a[0] == 0xFF:
        return a[1] & 0x0F
    if in6_is_linklocal(a) or in6_is_loopback(a):
        return 2
    if a[0] == 0xFE and (a[1] & 0xC0) == 0xC0:
        return 5
    return 14


cdef inline bint prefix_match(const uint8_t* a, const uint8_t* p, int plen) noexcept nogil:
    cdef int full = plen >> 3
    cdef int rem = plen & 7
    if full and memcmp(a, p, full) != 0:
        return False
    if rem:
        return ((a[full] ^ p[full]) & (<uint8_t>(0xFF << (8 - rem)))) == 0
    return True


cdef inline int common_prefix_len(const uint8_t* a, const uint8_t* b, int nbytes) noexcept nogil:
    cdef int k, bit
    cdef uint8_t x
    for k in range(nbytes):
        x = a[k] ^ b[k]
        if x:
            bit = 0
            while not (x & 0x80):
                x <<= 1
                bit += 1
            return k * 8 + bit
    return nbytes * 8


cdef inline const fp_dev* dev_get(const ctx_t* c, uint32_t ifindex) noexcept nogil:
    if ifindex == 0 or ifindex >= c.ndev:
        return NULL
    if c.devs[ifindex].ifindex != ifindex:
        return NULL
    return &c.devs[ifindex]


cdef inline void set_drop(pkt_t* p, uint16_t reason) noexcept nogil:
    p.verdict = V_DROP
    p.reason = reason
    p.oif = 0


cdef bint make_headroom(const ctx_t* c, pkt_t* p, int32_t need) noexcept nogil:
    """Make sure ``need`` bytes are free in front of the L3 header, moving the
    packet towards the end of its slot if needed (as skb_cow_head)."""
    cdef int32_t shift
    if p.l3 >= need:
        return True
    shift = need - p.l3
    if p.l3 + p.l3len + shift > c.slot:
        return False
    memmove(p.row + p.l3 + shift, p.row + p.l3, p.l3len)
    p.l3 += shift
    return True

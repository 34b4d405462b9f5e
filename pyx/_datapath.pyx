"""The compiled datapath: IPv6/IPv4 input, policy-rule walk, FIB lookup,
forwarding checks and ICMP errors, over a whole batch at a time.

Mirrors, step by step, the kernel functions named in the comments
(``ip6_rcv_core``, ``fib6_rule_lookup``, ``ip6_forward``, ``icmp6_send``,
``ip_rcv_core``, ``ip_route_input_slow``, ``ip_forward``, ``__icmp_send``).

Structure (VPP style): ``Datapath.process`` takes the batch's arrays as typed
memoryviews and hands raw pointers to ``noexcept nogil`` helpers; each packet's
decision is written to the batch's metadata arrays (verdict, reason, oif,
nexthop), never returned as Python objects.  Tables (route entries,
nexthops, devices, addresses, rules, LPMs) are numpy arrays built by
``fastpath/tables.py``; ``Datapath.load`` keeps references to them and caches
their pointers.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int32_t, int64_t
from libc.string cimport memcpy, memmove, memset, memcmp
from libc.stdlib cimport malloc, free
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

cimport numpy as cnp
import numpy as np

from fp cimport *
from lpm cimport lpm4_lookup, lpm6_lookup, LPM_EXT, LPM_VALUE_MASK

cnp.import_array()

cdef extern from *:
    """
    #ifdef FASTPATH_DEBUG
    #define FP_DEBUG_BUILD 1
    #else
    #define FP_DEBUG_BUILD 0
    #endif
    static const uint8_t FP_IN6_ANY[16] = {0};
    static const uint8_t FP_IN6_LOOPBACK[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    """
    const int FP_DEBUG_BUILD
    const uint8_t* FP_IN6_ANY           # constants, so that the compiler turns
    const uint8_t* FP_IN6_LOOPBACK      # memcmp(a, C, 16) into two 8-byte compares

cdef extern from *:
    void fp_prefetch "__builtin_prefetch"(const void* p) noexcept nogil

# SHA-1 / SHA-256 / HMAC in C (pyx/fp_sha.h explains why fastpath has its own)
cdef extern from "fp_sha.h":
    int fp_sha_use_accel(int on) noexcept nogil
    int fp_sha(int algo, const uint8_t* msg, size_t len, uint8_t* out) noexcept nogil
    void fp_hmac_prepare(int algo, const uint8_t* key, size_t klen, uint32_t* istate,
                         uint32_t* ostate) noexcept nogil
    int fp_hmac_prepared(int algo, const uint32_t* istate, const uint32_t* ostate,
                         const uint8_t* msg, size_t len, uint8_t* out) noexcept nogil
    int fp_hmac(int algo, const uint8_t* key, size_t klen, const uint8_t* msg, size_t len,
                uint8_t* out) noexcept nogil

# SHA-NI blocks where the CPU has them (same bytes as the portable code)
SHA_ACCEL = bool(fp_sha_use_accel(1))

# True when built with FASTPATH_DEBUG=1 (bounds checks on)
DEBUG_BUILD = bool(FP_DEBUG_BUILD)

DEF IP6_HLEN = 40
DEF IP4_HLEN = 20
DEF ICMP_HLEN = 8
DEF IPV6_MIN_MTU = 1280
DEF NEXTHDR_HOP = 0
DEF NEXTHDR_IPV6 = 41
DEF NEXTHDR_TCP = 6
DEF NEXTHDR_UDP = 17
DEF NEXTHDR_ROUTING = 43
DEF NEXTHDR_FRAGMENT = 44
DEF NEXTHDR_ESP = 50
DEF NEXTHDR_AUTH = 51
DEF NEXTHDR_ICMP6 = 58
DEF NEXTHDR_NONE = 59
DEF NEXTHDR_DEST = 60
DEF IPPROTO_ICMP = 1
# seg6local behaviours a packet may go through in one pass (a SID list that
# visits several of our own SIDs); the kernel recurses without a bound
DEF MAX_SEG6LOCAL_DEPTH = 64
# nested headend encapsulations (a route whose first SID leads to a seg6
# route again): lwtunnel_input() stops at the device recursion limit
# (XMIT_RECURSION_LIMIT); observed: a route encapsulating towards itself
# emits nothing
DEF MAX_HEADEND_DEPTH = 8
# seg6_hmac_compute(): the HMAC text (22 bytes + 16 per segment) must fit
# SEG6_HMAC_RING_SIZE
DEF SEG6_HMAC_RING_SIZE = 256
DEF SEG6_HMAC_FIELD_LEN = 32
# headroom kept in front of headers the datapath prepends, for the Ethernet
# header (with an 802.1Q tag) l2_build adds afterwards, so that it never has
# to move the packet a second time
DEF L2_RESERVE = 22

# ICMPv6 types/codes (RFC 4443)
DEF ICMP6_DEST_UNREACH = 1
DEF ICMP6_PKT_TOOBIG = 2
DEF ICMP6_TIME_EXCEED = 3
DEF ICMP6_PARAMPROB = 4
DEF ICMP6_NOROUTE = 0
DEF ICMP6_ADM_PROHIBITED = 1
DEF ICMP6_NOT_NEIGHBOUR = 2
DEF ICMP6_ADDR_UNREACH = 3
DEF ICMP6_POLICY_FAIL = 5
DEF ICMP6_REJECT_ROUTE = 6
# ICMPv4
DEF ICMP_DEST_UNREACH = 3
DEF ICMP_TIME_EXCEEDED = 11
DEF ICMP_NET_UNREACH = 0
DEF ICMP_HOST_UNREACH = 1
DEF ICMP_FRAG_NEEDED = 4
DEF ICMP_PKT_FILTERED = 13


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


DEF RCACHE_BITS = 10
DEF RCACHE_SIZE = 1024            # route cache entries (1 << RCACHE_BITS); 24 KiB, stays in L1/L2


cdef struct rcache_t:             # one entry of the per-worker IPv6 route cache
    uint8_t daddr[16]
    uint32_t dst                  # bits 0..23 the route; 24..31 the tables that missed on the way
    uint32_t gen                  # 0: empty; else the generation of the tables it was filled from


DEF RCACHE4_BITS = 9
DEF RCACHE4_SIZE = 512            # IPv4 route cache entries; 8 KiB


cdef struct rcache4_t:            # one entry of the per-worker IPv4 route cache
    uint32_t daddr                # host order
    uint32_t dst
    uint32_t gen                  # as rcache_t's
    uint32_t pad


DEF TCACHE_BITS = 10
DEF TCACHE_SIZE = 1024            # table lookup cache entries; 32 KiB


cdef struct tcache_t:             # one entry of the per-worker cache of lookups in one
    uint8_t daddr[16]             # table (End.T, End.DT6): by destination and table
    uint32_t v                    # what lpm6_lookup() returned
    int32_t slot                  # the table's LPM
    uint32_t gen                  # as rcache_t's
    uint32_t pad


DEF PEER_BITS = 12                # per-destination rate-limit state: 4096 entries


cdef struct peer_t:               # inet_peer's rate-limit fields, by destination
    uint8_t addr[16]
    int64_t tokens_ns
    int64_t last_ns
    uint32_t family               # 0: empty
    uint32_t pad


DEF PRE_CHUNK = 64                # packets looked up ahead at a time
DEF USELOG = 2 * PRE_CHUNK        # use statistics a chunk may defer (use_later)


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
    uint32_t icmp4_ratemask       # net.ipv4.icmp_ratemask
    int64_t msgs_per_sec          # net.ipv4.icmp_msgs_per_sec (global, both families)
    int64_t msgs_burst            # net.ipv4.icmp_msgs_burst
    int64_t global_credit
    int64_t global_stamp_ns
    peer_t* peers                 # inet_peer: per-destination token buckets
    int mp_policy6                # net.ipv6.fib_multipath_hash_policy (0 L3, 1 L4)
    int mp_policy4                # net.ipv4.fib_multipath_hash_policy
    bint v4_full_rpcheck          # custom IPv4 rules or local routes: full fib_validate_source
    # route caches (README.md, "The multi-process dataplane")
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


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# policy rules and FIB lookup (fib6_rule_lookup / fib_lookup)
# ---------------------------------------------------------------------------

cdef inline bint rule_match(const fp_rule* r, const uint8_t* saddr, const uint8_t* daddr,
                            uint32_t iif) noexcept nogil:
    if r.has_iif and r.iif != iif:
        return False
    if r.src_len and not prefix_match(saddr, r.src, r.src_len):
        return False
    if r.dst_len and not prefix_match(daddr, r.dst, r.dst_len):
        return False
    return True


cdef inline uint32_t fib6_lookup(ctx_t* c, const uint8_t* daddr, const uint8_t* saddr,
                                 uint32_t iif, uint32_t* nmiss) noexcept nogil:
    """fib6_rule_lookup() (fib6_cached), then the found route's use
    statistics (dst_use)."""
    cdef uint32_t rt = fib6_cached(c, daddr, saddr, iif, nmiss)
    dst_use(c, rt)
    return rt


cdef inline uint64_t in6_hash(const uint8_t* daddr) noexcept nogil:
    """Multiplicative (Fibonacci) hashing of an address's two halves: the
    top bits of a product depend on every bit of its operand."""
    cdef uint64_t a, b
    memcpy(&a, daddr, 8)
    memcpy(&b, daddr + 8, 8)
    return (a ^ (b * 0xC2B2AE3D27D4EB4FULL)) * 0x9E3779B97F4A7C15ULL


cdef inline rcache_t* rcache_bucket(const ctx_t* c, const uint8_t* daddr) noexcept nogil:
    """The route cache's pair of entries for a destination."""
    # two-way set associative: the pair (2k, 2k + 1), most recent first
    return &c.rcache[(in6_hash(daddr) >> (64 - RCACHE_BITS)) & ~(<uint64_t>1)]


cdef inline uint32_t table_route(const ctx_t* c, uint32_t v, uint32_t miss) noexcept nogil:
    """The route of a lookup in one table (End.T/DT4/DT6, vrftable): what the
    LPM found, or ``miss`` for no entry or a throw route."""
    return v if (v != 0 and v < c.ndst and c.dsts[v].type != RTN_THROW) else miss


cdef inline uint32_t lpm6_cached(ctx_t* c, int32_t slot, const uint8_t* daddr) noexcept nogil:
    """lpm6_lookup() in one table (End.T, End.DT6; ``slot`` valid), through a
    per-worker cache by table and destination: a hit returns what the
    lookup returned for these tables (two-way set associative by
    destination, emptied by a new table generation)."""
    cdef tcache_t* e = &c.tcache[(in6_hash(daddr) >> (64 - TCACHE_BITS)) & ~(<uint64_t>1)]
    cdef uint32_t v
    if e[0].gen == c.rcache_gen and e[0].slot == slot and eq16(e[0].daddr, daddr):
        return e[0].v
    if e[1].gen == c.rcache_gen and e[1].slot == slot and eq16(e[1].daddr, daddr):
        return e[1].v
    v = lpm6_lookup(c.lpm6[slot].tbl24, c.lpm6[slot].groups, daddr)
    e[1] = e[0]
    memcpy(e[0].daddr, daddr, 16)
    e[0].v = v
    e[0].slot = slot
    e[0].gen = c.rcache_gen
    return v


cdef inline bint rcache_get(const ctx_t* c, const rcache_t* e, const uint8_t* daddr,
                            uint32_t* v) noexcept nogil:
    if e[0].gen == c.rcache_gen and eq16(e[0].daddr, daddr):
        v[0] = e[0].dst
        return True
    if e[1].gen == c.rcache_gen and eq16(e[1].daddr, daddr):
        v[0] = e[1].dst
        return True
    return False


cdef inline void rcache_put(const ctx_t* c, rcache_t* e, const uint8_t* daddr, uint32_t rt,
                            uint32_t nmiss) noexcept nogil:
    e[1] = e[0]
    memcpy(e[0].daddr, daddr, 16)
    e[0].dst = (nmiss << 24) | rt
    e[0].gen = c.rcache_gen


cdef inline uint32_t fib6_cached(ctx_t* c, const uint8_t* daddr, const uint8_t* saddr,
                                 uint32_t iif, uint32_t* nmiss) noexcept nogil:
    """fib6_cached_as() as the packet's path is: tracing or not."""
    return fib6_cached_as(c, daddr, saddr, iif, nmiss, c.trace != NULL)


cdef inline uint32_t fib6_cached_as(ctx_t* c, const uint8_t* daddr, const uint8_t* saddr,
                                    uint32_t iif, uint32_t* nmiss, bint tracing) noexcept nogil:
    """fib6_rule_lookup(), through the per-worker route cache, leaving the
    route's statistics alone.

    While no IPv6 rule selects on source address or ingress interface, the
    result depends on the destination alone, so it is cached by destination
    (two-way set associative; a new table generation empties it).  The cache changes
    how fast, never what: a hit returns what the walk returned, and how many
    tables missed on the way (``nmiss``: each miss is a hold and a release
    of ip6_null_entry in refcount mode).  Traces walk the rules every time
    (``tracing``: the fast path, which never traces, says so once)."""
    cdef rcache_t* e
    cdef uint32_t rt, v
    if not c.rcache_on or tracing:
        c.rcache_misses += 1
        return fib6_walk(c, daddr, saddr, iif, nmiss, NULL)
    e = rcache_bucket(c, daddr)
    if not rcache_get(c, e, daddr, &v):
        c.rcache_misses += 1
        rt = fib6_walk(c, daddr, saddr, iif, &v, NULL)
        rcache_put(c, e, daddr, rt, v)
        v = (v << 24) | rt
    nmiss[0] = v >> 24
    return v & 0xFFFFFF


cdef inline void note_route(const ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """check_gen: remember the packet's route and its generation."""
    if c.check_gen:
        p.chk_dst = rt
        p.chk_gen = c.dsts[rt].gen


cdef inline void dst_use(ctx_t* c, uint32_t rt) noexcept nogil:
    """``dst.__use++; dst.lastuse = jiffies`` of ip6_pol_route: on the shared
    route every lookup (USE_SHARED, the "before" of seeds/003), or on this
    worker's copy, flushed to the shared route at most once per tick
    (USE_LAZY, the "after")."""
    if rt >= DST_FIRST_ROUTE and rt < c.ndst:
        dst_use_route(c, rt)


cdef inline void dst_use_route(ctx_t* c, uint32_t rt) noexcept nogil:
    """dst_use() of a route entry (not a reserved one: DST_FIRST_ROUTE <= rt
    < ndst), as the fast path's unicast routes are."""
    cdef fp_dst* d = &c.dsts[rt]
    cdef fp_pcpu* pc
    if c.use_mode == USE_LAZY and rt < c.npcpu:
        pc = &c.pcpu[rt]
        pc.use += 1
        if pc.lastuse != c.jiffies:
            d.use += pc.use
            d.lastuse = c.jiffies
            pc.use = 0
            pc.lastuse = c.jiffies
    else:
        d.use += 1
        d.lastuse = c.jiffies


cdef inline void use_later(ctx_t* c, const pkt_t* p, uint32_t rt) noexcept nogil:
    """dst_use_route(), deferred to the end of the chunk (use_flush) for a
    packet whose routes were looked up ahead (random destinations over a
    large table): its route's per-worker copy, and the shared entry it is
    flushed to, are then cache misses, which overlap with each other there
    instead of stalling each packet.  Lazy statistics only (USE_LAZY: the
    shared line's contention of USE_SHARED stays per packet).  The result
    is the same at the end of the batch: a batch is one tick, and a route's
    count and last use do not depend on the order of its uses within one."""
    if p.pre != NULL and c.use_mode == USE_LAZY and rt < c.npcpu and c.nuse < USELOG:
        c.uselog[c.nuse] = rt
        c.nuse += 1
    else:
        dst_use_route(c, rt)


cdef void use_flush(ctx_t* c) noexcept nogil:
    """The use statistics use_later() deferred."""
    cdef uint32_t k, n = c.nuse
    cdef uint32_t rt
    for k in range(n):
        if k + 8 < n:
            rt = c.uselog[k + 8]
            fp_prefetch(&c.pcpu[rt])
            fp_prefetch(&c.dsts[rt])
        dst_use_route(c, c.uselog[k])
    c.nuse = 0


# ---------------------------------------------------------------------------
# references (refcount mode): ip6_hold_safe / skb_dst_force / dst_release
# ---------------------------------------------------------------------------

cdef inline void dst_release_pkt(ctx_t* c, pkt_t* p) noexcept nogil:
    """skb_dst_drop(): release the reference the packet holds, if any."""
    if p.held < 0:
        return
    if p.held_pcpu:
        fp_atomic_fetch_add32(&c.pcpu[p.held].refcnt, -1)
    else:
        fp_atomic_fetch_add32(&c.dsts[p.held].refcnt, -1)
    p.held = -1


cdef inline bint dst_hold_pkt(ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """Take a reference on ``rt`` for the packet (dropping the one it held,
    as skb_dst_drop + skb_dst_set).  IPv6 routes are held on this worker's
    copy (rt6_get_pcpu_route): the atomic stays on a private line; the
    shared entries (null, blackhole, prohibit, IPv4 input routes) are held
    on the one line every worker shares.  Fails, as dst_hold_safe /
    rcuref_get, when the entry is being freed (its count fell to zero)."""
    cdef fp_dst* d = &c.dsts[rt]
    cdef int32_t old
    dst_release_pkt(c, p)
    if rt < c.npcpu and ((rt >= DST_FIRST_ROUTE and d.family == 6)
                         or c.refmode == MODE_REFCOUNT_PRIVATE):
        if fp_atomic_load32(&d.refcnt) <= 0:
            return False
        fp_atomic_fetch_add32(&c.pcpu[rt].refcnt, 1)
        p.held_pcpu = True
    else:
        old = fp_atomic_fetch_add32(&d.refcnt, 1)
        if old <= 0:
            fp_atomic_fetch_add32(&d.refcnt, -1)
            return False
        p.held_pcpu = False
    p.held = <int32_t>rt
    return True


cdef inline void null_hold_put(ctx_t* c, uint32_t n) noexcept nogil:
    """fib6_rule_action: a table that misses hands out ip6_null_entry, held,
    and the rule walk puts it back before trying the next rule."""
    cdef uint32_t k
    cdef int32_t* cnt = &c.pcpu[DST_IP6_NULL].refcnt if c.refmode == MODE_REFCOUNT_PRIVATE \
        else &c.dsts[DST_IP6_NULL].refcnt
    for k in range(n):
        fp_atomic_fetch_add32(cnt, 1)
        fp_atomic_fetch_add32(cnt, -1)


cdef uint32_t fib6_walk(ctx_t* c, const uint8_t* daddr, const uint8_t* saddr,
                        uint32_t iif, uint32_t* nmiss, pkt_t* hold) noexcept nogil:
    """fib6_rule_lookup: walk the rules by preference; a table miss (the null
    entry) or a throw route goes on to the next rule; no match at all gives
    ip6_null_entry.  ``nmiss`` counts the tables that missed.  With ``hold``
    (refcount mode, after a refused reference) each table's route is held
    for that packet as it is found, and one that cannot be held counts as a
    miss, as ip6_hold_safe falling back to the null entry."""
    cdef uint32_t k, v
    cdef const fp_rule* r
    nmiss[0] = 0
    for k in range(c.nrules6):
        r = &c.rules6[k]
        if not rule_match(r, saddr, daddr, iif):
            continue
        tr(c, T_RULE, k, r.table if r.action == FR_ACT_TO_TBL else 0, NULL)
        if r.action == FR_ACT_TO_TBL:
            if r.slot < 0 or <uint32_t>r.slot >= c.nlpm6:
                continue
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


cdef inline uint32_t fib4_cached(ctx_t* c, uint32_t daddr, uint32_t saddr,
                                 uint32_t iif) noexcept nogil:
    """fib4_lookup() through the per-worker IPv4 route cache: as fib6_cached,
    by destination while no IPv4 rule selects on source or iif (a hit
    returns what the walk returned), two-way set associative, emptied by a
    new table generation; traces walk the rules every time."""
    cdef rcache4_t* e
    cdef uint32_t rt
    if not c.rcache4_on or c.trace != NULL:
        return fib4_lookup(c, daddr, saddr, iif)
    e = &c.rcache4[((daddr * 0x9E3779B1u) >> (32 - RCACHE4_BITS)) & ~(<uint32_t>1)]
    if e[0].gen == c.rcache_gen and e[0].daddr == daddr:
        return e[0].dst
    if e[1].gen == c.rcache_gen and e[1].daddr == daddr:
        return e[1].dst
    c.rcache4_misses += 1
    rt = fib4_lookup(c, daddr, saddr, iif)
    e[1] = e[0]
    e[0].daddr = daddr
    e[0].dst = rt
    e[0].gen = c.rcache_gen
    return rt


cdef inline const fp_nh* dst_nexthop(const ctx_t* c, const fp_dst* d, uint32_t hash) noexcept nogil:
    """fib6_select_path / fib_select_multipath: hash-threshold over the
    nexthops' upper bounds (31-bit hash, as the kernel's)."""
    cdef uint32_t k, first = d.nh_first
    if d.nh_count == 0 or first + d.nh_count > c.nnh:
        return NULL
    if d.nh_count == 1:
        return &c.nhs[first]
    cdef int32_t h = <int32_t>(hash >> 1)
    for k in range(d.nh_count):
        if h <= c.nhs[first + k].upper_bound:
            return &c.nhs[first + k]
    return &c.nhs[first + d.nh_count - 1]


cdef inline uint32_t flow_hash6(const uint8_t* ip6) noexcept nogil:
    """A deterministic L3 flow hash (saddr, daddr, flow label, next header).

    The kernel keys its multipath hash with a per-boot random seed, so no
    userspace model can reproduce its exact choice; this one is stable."""
    cdef uint32_t h = 0x9E3779B9u, k
    for k in range(8, 40, 4):
        h ^= rd32(ip6 + k)
        h *= 0x85EBCA6Bu
        h ^= h >> 13
    h ^= rd32(ip6) & 0xFFFFF
    h ^= <uint32_t>ip6[6] << 20
    h *= 0xC2B2AE35u
    h ^= h >> 16
    return h


cdef inline uint32_t flow_hash4(const uint8_t* ip4) noexcept nogil:
    """L3 hash of an IPv4 packet: source and destination (policy 0)."""
    cdef uint32_t h = 0x9E3779B9u
    h ^= rd32(ip4 + 12)
    h *= 0x85EBCA6Bu
    h ^= h >> 13
    h ^= rd32(ip4 + 16)
    h *= 0xC2B2AE35u
    h ^= h >> 16
    return h


cdef inline uint32_t mix_ports(uint32_t h, uint8_t proto, uint32_t ports) noexcept nogil:
    h ^= ports
    h *= 0x85EBCA6Bu
    h ^= proto
    h *= 0xC2B2AE35u
    h ^= h >> 15
    return h


cdef inline uint32_t mp_hash6(const ctx_t* c, const pkt_t* p) noexcept nogil:
    """The multipath hash of fib_multipath_hash_policy: 0 L3 (addresses,
    flow label, next header), 1 L4 (addresses, protocol, ports)."""
    cdef const uint8_t* ip6 = p.row + p.l3
    cdef uint8_t nh = ip6[6]
    if c.mp_policy6 == 1 and (nh == NEXTHDR_TCP or nh == NEXTHDR_UDP or nh == 132) \
            and p.l3len >= IP6_HLEN + 4:
        return mix_ports(flow_hash6(ip6) ^ (rd32(ip6) & 0xFFFFF), nh, rd32(ip6 + IP6_HLEN))
    return flow_hash6(ip6)


cdef inline uint32_t mp_hash4(const ctx_t* c, const pkt_t* p) noexcept nogil:
    cdef const uint8_t* ip4 = p.row + p.l3
    cdef int32_t ihl = (ip4[0] & 0x0F) << 2
    cdef uint8_t proto = ip4[9]
    if (c.mp_policy4 == 1 and (proto == NEXTHDR_TCP or proto == NEXTHDR_UDP or proto == 132)
            and (rd16(ip4 + 6) & 0x3FFF) == 0 and p.l3len >= ihl + 4):
        return mix_ports(flow_hash4(ip4), proto, rd32(ip4 + ihl))
    return flow_hash4(ip4)


# ---------------------------------------------------------------------------
# source address selection
# ---------------------------------------------------------------------------

cdef bint ipv6_get_saddr(const ctx_t* c, uint32_t dev_ifindex, const uint8_t* dst,
                         uint8_t* out) noexcept nogil:
    """ipv6_dev_get_saddr (RFC 6724 section 5, the rules the kernel scores):
    same address, appropriate scope, outgoing interface, longest matching
    prefix (capped at the candidate's prefix length).  Rule 6 (policy
    labels) is not applied yet.  For link-local and
    multicast destinations only the device's own addresses are candidates.
    Ties keep the first candidate found (devices by ifindex)."""
    cdef int dscope = in6_scope(dst)
    cdef bint only_dev = in6_is_multicast(dst) or dscope <= 2
    cdef int best = -1
    cdef int k, s, bs, cpl, bcpl
    cdef const fp_addr* a
    cdef const fp_addr* b
    for k in range(<int>c.naddr):
        a = &c.addrs[k]
        if a.family != 6:
            continue
        if only_dev and a.ifindex != dev_ifindex:
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
    if best < 0:
        return False
    memcpy(out, c.addrs[best].addr, 16)
    return True


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


# ---------------------------------------------------------------------------
# room in the slot
# ---------------------------------------------------------------------------

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



# ---------------------------------------------------------------------------
# ICMP rate limits (inet_peer_xrlim_allow, icmp_global_allow), on packet time
# ---------------------------------------------------------------------------

DEF XRLIM_BURST_FACTOR = 6


cdef bint peer_allow(ctx_t* c, int family, const uint8_t* addr, int64_t tmo, int64_t now) noexcept nogil:
    """inet_peer_xrlim_allow(): a token bucket per destination, refilled at
    one token per ``tmo``, at most XRLIM_BURST_FACTOR tokens; a new peer
    starts full.  The table is direct-mapped: a colliding destination
    replaces the older one (the kernel's inet_peer also evicts)."""
    cdef uint64_t a, b, h
    cdef peer_t* e
    cdef int64_t token
    cdef int n = 16 if family == 6 else 4
    if tmo <= 0:
        return True
    memcpy(&a, addr, 8)
    memcpy(&b, addr + 8, 8)
    if family == 4:
        b = 0
        a &= 0xFFFFFFFFULL
    h = (a * 0x9E3779B97F4A7C15ULL) ^ (b * 0xC2B2AE3D27D4EB4FULL)
    h ^= h >> 31
    h *= 0x94D049BB133111EBULL
    e = &c.peers[h >> (64 - PEER_BITS)]
    if e.family != <uint32_t>family or memcmp(e.addr, addr, n) != 0:
        memset(e, 0, sizeof(peer_t))
        memcpy(e.addr, addr, n)
        e.family = family
        e.tokens_ns = 0
        e.last_ns = now - 60000000000LL          # "the first calculation is at its maximum"
    token = e.tokens_ns + (now - e.last_ns)
    e.last_ns = now
    if token > XRLIM_BURST_FACTOR * tmo:
        token = XRLIM_BURST_FACTOR * tmo
    if token < 0:
        token = 0                                 # time went backwards
    if token >= tmo:
        e.tokens_ns = token - tmo
        return True
    e.tokens_ns = token
    return False


cdef bint icmp_global_allow(ctx_t* c, int64_t now) noexcept nogil:
    """icmp_global_allow(): msgs_per_sec credits, at most msgs_burst, refilled
    at most every 20 ms (0 msgs_per_sec: fastpath's 'no global limit')."""
    cdef int64_t delta, incr
    if c.msgs_per_sec <= 0:
        return True
    if c.global_credit > 0:
        return True
    delta = now - c.global_stamp_ns
    if delta > 1000000000LL:
        delta = 1000000000LL
    if delta < 20000000LL:
        return False
    incr = c.msgs_per_sec * delta // 1000000000LL
    if incr <= 0:
        return False
    c.global_credit = c.global_credit + incr
    if c.global_credit > c.msgs_burst:
        c.global_credit = c.msgs_burst
    c.global_stamp_ns = now
    return c.global_credit > 0


cdef inline void icmp_global_consume(ctx_t* c) noexcept nogil:
    """One credit per message (the kernel takes 0 to 2 at random)."""
    if c.msgs_per_sec > 0:
        c.global_credit -= 1


cdef inline bint icmp6_limited(uint8_t type) noexcept nogil:
    """The default net.ipv6.icmp.ratemask (0-1,3-127): errors but Packet Too Big."""
    return type < 128 and type != ICMP6_PKT_TOOBIG


cdef inline bint icmp4_limited(const ctx_t* c, uint8_t type, uint8_t code) noexcept nogil:
    if type > 31 or not ((1u << type) & c.icmp4_ratemask):
        return False
    return not (type == ICMP_DEST_UNREACH and code == ICMP_FRAG_NEEDED)

# ---------------------------------------------------------------------------
# ICMP errors
# ---------------------------------------------------------------------------

cdef bint icmp6_ineligible(const uint8_t* ip6, int32_t len) noexcept nogil:
    """is_ineligible(): never answer an ICMPv6 error (or a header we cannot
    parse as such)."""
    cdef int32_t off = IP6_HLEN
    cdef uint8_t nh = ip6[6]
    cdef int32_t hl
    while nh == NEXTHDR_HOP or nh == NEXTHDR_ROUTING or nh == NEXTHDR_DEST or nh == NEXTHDR_FRAGMENT or nh == NEXTHDR_AUTH:
        if off + 8 > len:
            return False       # ipv6_skip_exthdr fails: eligible
        if nh == NEXTHDR_FRAGMENT:
            if (rd16(ip6 + off + 2) & 0xFFF8) != 0:
                return False   # not the first fragment: no transport header
            hl = 8
        elif nh == NEXTHDR_AUTH:
            hl = (<int32_t>ip6[off + 1] + 2) << 2
        else:
            hl = (<int32_t>ip6[off + 1] + 1) << 3
        nh = ip6[off]
        off += hl
    if nh == NEXTHDR_ICMP6:
        if off + 1 > len:
            return True
        return (ip6[off] & 0x80) == 0
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


cdef bint icmp6_send(ctx_t* c, pkt_t* p, uint8_t type, uint8_t code, uint32_t info,
                     uint16_t reason) noexcept nogil:
    """icmp6_send(): turn the packet into the ICMPv6 error about it, routed back
    to its source.  Returns False (packet dropped with ``reason``, or with
    no_icmp_route) when the kernel would send nothing."""
    cdef uint32_t nmiss
    cdef uint8_t* ip6 = p.row + p.l3
    cdef uint8_t saddr[16]
    cdef uint8_t osrc[16]
    cdef uint8_t odst[16]
    cdef bint have_saddr = False
    cdef uint32_t rt, plen, s
    cdef const fp_dst* d
    cdef const fp_nh* nh
    cdef const fp_dev* dev
    cdef uint8_t hl
    cdef uint8_t* h
    memcpy(osrc, ip6 + 8, 16)
    memcpy(odst, ip6 + 24, 16)
    p.reason = reason
    tr(c, T_ICMP_DUE, type, code, osrc)
    if is_local_addr(c, 6, odst) or (c.fwd6 and is_subnet_anycast(c, p.iif, odst)):
        memcpy(saddr, odst, 16)
        have_saddr = True
    if in6_is_multicast(odst):
        if type != ICMP6_PKT_TOOBIG:
            set_drop(p, reason)
            return False
        have_saddr = False
    if in6_is_zero(osrc) or in6_is_multicast(osrc):
        set_drop(p, reason)
        return False
    if icmp6_ineligible(ip6, p.l3len):
        set_drop(p, reason)
        return False
    if icmp6_limited(type) and not icmp_global_allow(c, pkt_ts(c, p)):
        set_drop(p, R_ICMP_SUPPRESSED)
        return False
    # the source: the offending packet's destination when it is ours; else
    # the preferred source of the route back (icmpv6_rt_has_prefsrc), else
    # source address selection on the ingress device; then the route back
    # is looked up from that source (so 'from' rules see it)
    cdef uint8_t zero[16]
    memset(zero, 0, 16)
    if not have_saddr:
        rt = fib6_lookup(c, osrc, zero, c.lo_ifindex, &nmiss)
        d = &c.dsts[rt]
        if (d.type == RTN_UNICAST or d.type == RTN_LOCAL) and not in6_is_zero(d.prefsrc):
            memcpy(saddr, d.prefsrc, 16)
            have_saddr = True
        elif ipv6_get_saddr(c, p.iif, osrc, saddr):
            have_saddr = True
            rt = fib6_lookup(c, osrc, saddr, c.lo_ifindex, &nmiss)
    else:
        rt = fib6_lookup(c, osrc, saddr, c.lo_ifindex, &nmiss)
    d = &c.dsts[rt]
    # icmpv6_route_lookup: no error sent where there is no route back, nor
    # to one of our own (local or anycast) addresses
    if d.type != RTN_UNICAST and d.type != RTN_LOCAL:
        set_drop(p, reason)
        return False
    if d.type == RTN_LOCAL:
        # an error about a packet we sent ourselves stays inside this node
        set_drop(p, reason)
        return False
    nh = dst_nexthop(c, d, 0)
    if nh == NULL:
        set_drop(p, reason)
        return False
    dev = dev_get(c, nh.oif)
    if dev == NULL:
        set_drop(p, reason)
        return False
    if not have_saddr:
        if not ipv6_get_saddr(c, dev.ifindex, osrc, saddr):
            set_drop(p, reason)
            return False
    # icmpv6_xrlim_allow(): per destination, more tokens for wider prefixes
    if icmp6_limited(type) and c.icmp6_tmo_ns > 0:
        if not peer_allow(c, 6, osrc, c.icmp6_tmo_ns >> ((128 - d.plen) >> 5) if d.plen < 128
                          else c.icmp6_tmo_ns, pkt_ts(c, p)):
            set_drop(p, R_ICMP_SUPPRESSED)
            return False
    if icmp6_limited(type):
        icmp_global_consume(c)
    hl = d.hoplimit if d.hoplimit else (dev.hop_limit if dev.hop_limit else c.hop_limit)
    plen = p.l3len
    if plen > IPV6_MIN_MTU - IP6_HLEN - ICMP_HLEN:
        plen = IPV6_MIN_MTU - IP6_HLEN - ICMP_HLEN
    if not make_headroom(c, p, IP6_HLEN + ICMP_HLEN + L2_RESERVE):
        set_drop(p, R_NO_HEADROOM)
        return False
    p.l3 -= IP6_HLEN + ICMP_HLEN
    p.l3len = plen + IP6_HLEN + ICMP_HLEN
    h = p.row + p.l3
    wr32(h, 0x60000000u)                 # version 6, tclass 0, flow label 0
    wr16(h + 4, <uint16_t>(plen + ICMP_HLEN))
    h[6] = NEXTHDR_ICMP6
    h[7] = hl
    memcpy(h + 8, saddr, 16)
    memcpy(h + 24, osrc, 16)
    h[40] = type
    h[41] = code
    h[42] = 0
    h[43] = 0
    wr32(h + 44, info)
    # checksum over the pseudo-header and the ICMPv6 message
    s = csum_add(0, h + 8, 32)
    s += plen + ICMP_HLEN
    s += NEXTHDR_ICMP6
    s = csum_add(s, h + 40, plen + ICMP_HLEN)
    wr16(h + 42, csum_fold(s))
    tr(c, T_ICMP, type, code, osrc)
    p.verdict = V_ICMP
    p.dst = rt
    p.oif = nh.oif
    if nh.flags & NHF_GATEWAY:
        memcpy(p.nexthop, nh.gw, 16)
    else:
        memcpy(p.nexthop, osrc, 16)
    return True


cdef bint icmp4_send(ctx_t* c, pkt_t* p, uint8_t type, uint8_t code, uint32_t info,
                     uint16_t reason, bint was_local) noexcept nogil:
    """__icmp_send(): the ICMPv4 error about the packet, routed to its source."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef uint32_t osrc = rd32(ip4 + 12)
    cdef uint32_t odst = rd32(ip4 + 16)
    cdef int32_t ihl = (ip4[0] & 0x0F) << 2
    cdef uint8_t saddr[4]
    cdef bint have_saddr = False
    cdef uint32_t rt, plen, room, mtu
    cdef const fp_dst* d
    cdef const fp_nh* nh
    cdef const fp_dev* dev
    cdef uint8_t* h
    cdef uint8_t ttl
    cdef uint8_t it
    p.reason = reason
    tr(c, T_ICMP_DUE, type, code, NULL)
    # no errors about fragments other than the first, or about ICMP errors
    if (rd16(ip4 + 6) & 0x1FFF) != 0:
        set_drop(p, reason)
        return False
    if ip4[9] == IPPROTO_ICMP:
        if ihl + 1 > p.l3len:
            set_drop(p, reason)
            return False
        it = ip4[ihl]
        # icmp_pointers[].error: every type but the informational ones
        if it > 18 or not (it == 0 or it == 8 or it == 9 or it == 10 or it == 13 or it == 14 or it == 15 or it == 16 or it == 17 or it == 18):
            set_drop(p, reason)
            return False
    if (osrc >> 28) == 0xE or osrc == 0xFFFFFFFFu or osrc == 0:
        set_drop(p, reason)
        return False
    if was_local:
        wr32(saddr, odst)
        have_saddr = True
    if icmp4_limited(c, type, code) and not icmp_global_allow(c, pkt_ts(c, p)):
        set_drop(p, R_ICMP_SUPPRESSED)
        return False
    rt = fib4_lookup(c, osrc, odst if was_local else 0, c.lo_ifindex)
    d = &c.dsts[rt]
    if d.type != RTN_UNICAST and d.type != RTN_LOCAL:
        set_drop(p, reason)
        return False
    nh = dst_nexthop(c, d, 0)
    if d.type == RTN_LOCAL:
        # an error about a packet we sent ourselves stays inside this node
        set_drop(p, reason)
        return False
    elif nh == NULL:
        set_drop(p, reason)
        return False
    else:
        dev = dev_get(c, nh.oif)
    if dev == NULL:
        set_drop(p, reason)
        return False
    if not have_saddr:
        if d.prefsrc[0] or d.prefsrc[1] or d.prefsrc[2] or d.prefsrc[3]:
            memcpy(saddr, d.prefsrc, 4)
            have_saddr = True
        elif ipv4_get_saddr(c, dev.ifindex, rd32(nh.gw) if (nh != NULL and nh.flags & NHF_GATEWAY) else osrc, saddr):
            have_saddr = True
    if not have_saddr:
        set_drop(p, reason)
        return False
    if icmp4_limited(c, type, code):
        if c.icmp4_tmo_ns > 0 and not peer_allow(c, 4, ip4 + 12, c.icmp4_tmo_ns, pkt_ts(c, p)):
            set_drop(p, R_ICMP_SUPPRESSED)
            return False
        icmp_global_consume(c)
    mtu = d.mtu if d.mtu else dev.mtu
    room = mtu if mtu < 576 else 576
    room -= IP4_HLEN + ICMP_HLEN
    plen = p.l3len if <uint32_t>p.l3len < room else room
    ttl = d.hoplimit if d.hoplimit else c.ip_default_ttl
    if not make_headroom(c, p, IP4_HLEN + ICMP_HLEN + L2_RESERVE):
        set_drop(p, R_NO_HEADROOM)
        return False
    cdef uint8_t otos = ip4[1]
    p.l3 -= IP4_HLEN + ICMP_HLEN
    p.l3len = plen + IP4_HLEN + ICMP_HLEN
    h = p.row + p.l3
    h[0] = 0x45
    h[1] = (otos & 0x1E) | 0xC0          # IPTOS_PREC_INTERNETCONTROL
    wr16(h + 2, <uint16_t>p.l3len)
    wr16(h + 4, 0)                       # IP ID: the kernel's is random
    wr16(h + 6, 0)                       # no DF (icmp socket: PMTUDISC_DONT)
    h[8] = ttl
    h[9] = IPPROTO_ICMP
    wr16(h + 10, 0)
    memcpy(h + 12, saddr, 4)
    wr32(h + 16, osrc)
    wr16(h + 10, csum_fold(csum_add(0, h, IP4_HLEN)))
    h[20] = type
    h[21] = code
    wr16(h + 22, 0)
    wr32(h + 24, info)
    wr16(h + 22, csum_fold(csum_add(0, h + 20, plen + ICMP_HLEN)))
    tr(c, T_ICMP, type, code, h + 16)
    p.verdict = V_ICMP
    p.dst = rt
    memset(p.nexthop, 0, 16)
    if d.type == RTN_LOCAL:
        p.oif = c.lo_ifindex
        wr32(p.nexthop, osrc)
    else:
        p.oif = nh.oif
        if nh.flags & NHF_GATEWAY:
            memcpy(p.nexthop, nh.gw, 4)
        else:
            wr32(p.nexthop, osrc)
    return True


# ---------------------------------------------------------------------------
# IPv6
# ---------------------------------------------------------------------------

cdef int ip6_parse_hopopts(ctx_t* c, pkt_t* p) noexcept nogil:
    """ipv6_parse_hopopts(): 0 = continue, 1 = the packet has been given a
    verdict (drop or ICMP parameter problem)."""
    return ip6_parse_tlv(c, p, IP6_HLEN)


cdef int ip6_parse_tlv(ctx_t* c, pkt_t* p, int32_t off) noexcept nogil:
    """ip6_parse_tlv() on the options header at ``off`` (hop-by-hop, or
    destination options on local delivery): padding rules, Router Alert,
    unknown options by their action bits."""
    cdef uint8_t* ip6 = p.row + p.l3
    cdef int32_t end, olen, k
    cdef uint8_t t
    cdef int padlen = 0
    if off + 8 > p.l3len:
        set_drop(p, R_TRUNCATED)
        return 1
    end = off + ((<int32_t>ip6[off + 1] + 1) << 3)
    if end > p.l3len:
        set_drop(p, R_TRUNCATED)
        return 1
    off += 2
    while off < end:
        t = ip6[off]
        if t == 0:                     # Pad1
            padlen += 1
            if padlen > 7:
                set_drop(p, R_EXTHDR_INVALID)
                return 1
            off += 1
            continue
        if off + 2 > end:
            set_drop(p, R_EXTHDR_INVALID)
            return 1
        olen = ip6[off + 1] + 2
        if off + olen > end:
            set_drop(p, R_EXTHDR_INVALID)
            return 1
        if t == 1:                     # PadN: RFC 8200 4.2, zeros, at most 7 bytes
            padlen += olen
            if padlen > 7:
                set_drop(p, R_EXTHDR_INVALID)
                return 1
            for k in range(2, olen):
                if ip6[off + k] != 0:
                    set_drop(p, R_EXTHDR_INVALID)
                    return 1
            off += olen
            continue
        padlen = 0
        if t == 5:                     # Router Alert
            if olen != 4:
                set_drop(p, R_EXTHDR_INVALID)
                return 1
        elif t == 0xC2:                # Jumbo payload: not modelled
            set_drop(p, R_NOT_SUPPORTED)
            return 1
        else:                          # ip6_tlvopt_unknown
            k = t >> 6
            if k == 0:
                pass
            elif k == 1:
                set_drop(p, R_HBH_OPTION)
                return 1
            elif k == 3 and in6_is_multicast(ip6 + 24):
                set_drop(p, R_HBH_OPTION)
                return 1
            else:
                icmp6_send(c, p, ICMP6_PARAMPROB, 2, <uint32_t>off, R_HBH_OPTION)
                return 1
        off += olen
    if padlen > 7:
        set_drop(p, R_EXTHDR_INVALID)
        return 1
    return 0


cdef int ip6_forward(ctx_t* c, pkt_t* p, const fp_dst* d) noexcept nogil:
    """ip6_forward() after a unicast route was found."""
    cdef const fp_nh* nh
    if not c.fwd6:
        set_drop(p, R_FORWARDING_DISABLED)
        return -1
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


cdef inline bint ip6_mc_local(const uint8_t* a) noexcept nogil:
    """Groups every node (and router) has joined: all-nodes, all-routers,
    solicited-node."""
    cdef int k
    for k in range(2, 15):
        if a[k] != 0:
            break
    else:
        return a[15] == 1 or a[15] == 2
    # ff02::1:ffXX:XXXX solicited-node
    if a[1] == 0x02 and a[11] == 0x01 and a[12] == 0xFF:
        for k in range(2, 11):
            if a[k] != 0:
                return False
        return True
    return False


cdef void ip6_input(ctx_t* c, pkt_t* p) noexcept nogil:
    """ip6_rcv_core() then ip6_route_input() and the route's input function."""
    cdef uint32_t nmiss
    cdef uint8_t* ip6 = p.row + p.l3
    cdef uint32_t plen, rt
    cdef const fp_dst* d
    if p.l3len < IP6_HLEN:
        set_drop(p, R_TRUNCATED)
        return
    if (ip6[0] >> 4) != 6:
        set_drop(p, R_NOT_IP)
        return
    if in6_is_loopback(ip6 + 8) or in6_is_loopback(ip6 + 24):
        set_drop(p, R_SADDR_INVALID if in6_is_loopback(ip6 + 8) else R_DADDR_INVALID)
        return
    if in6_is_multicast(ip6 + 24) and (ip6[25] & 0x0F) <= 1:
        set_drop(p, R_DADDR_INVALID)
        return
    # (a v4-mapped source is only refused by the local transport protocols)
    if in6_is_multicast(ip6 + 8):
        set_drop(p, R_SADDR_INVALID)
        return
    plen = rd16(ip6 + 4)
    if plen == 0 and ip6[6] == NEXTHDR_HOP:
        set_drop(p, R_NOT_SUPPORTED)        # jumbogram
        return
    if plen + IP6_HLEN > <uint32_t>p.l3len:
        set_drop(p, R_TRUNCATED)
        return
    p.l3len = plen + IP6_HLEN               # pskb_trim_rcsum
    if ip6[6] == NEXTHDR_HOP:
        if ip6_parse_hopopts(c, p):
            return
    if in6_is_multicast(ip6 + 24):
        if ip6_mc_local(ip6 + 24):
            p.verdict = V_LOCAL
            p.reason = R_NONE
        else:
            set_drop(p, R_MULTICAST)
        return
    rt = fib6_lookup(c, ip6 + 24, ip6 + 8, p.iif, &nmiss)
    ip6_input_route(c, p, rt)


cdef inline void ip6_input_route(ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """ip6_input() once its route is found: the route's input function."""
    cdef const fp_dst* d = &c.dsts[rt]
    note_route(c, p, rt)
    if d.type == RTN_UNICAST and d.encap_type == ENCAP_SEG6LOCAL and not (d.flags & DSTF_DEAD):
        p.dst = rt
        tr(c, T_ROUTE, rt, 6, NULL)
        seg6local_input(c, p, d)
        return
    ip6_dst_input(c, p, rt)


cdef int ip6_dst_input(ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """dst_input() on an IPv6 route: forward, deliver, or the error routes'
    input (ip6_pkt_discard, ip6_pkt_prohibit, dst_discard).  Returns the
    kernel's return code sign: 0, or -1 where it returns an error (which
    seg6local counts as an error)."""
    cdef uint8_t* ip6 = p.row + p.l3
    cdef const fp_dst* d = &c.dsts[rt]
    p.dst = rt
    tr(c, T_ROUTE, rt, 6, NULL)
    if (d.flags & DSTF_DEAD) and p.held != <int32_t>rt:
        # reached without a reference after its removal (noref): discarded
        set_drop(p, R_ROUTE_DEAD)
        return -1
    if d.type == RTN_UNICAST:
        if d.encap_type == ENCAP_SEG6LOCAL:
            # the next segment is one of ours too: its behaviour runs now
            # (dst_input -> seg6_local_input), without a hop limit decrement
            return seg6local_input(c, p, d)
        if d.encap_type == ENCAP_SEG6:
            # lwtunnel_input() -> seg6_input()
            return seg6_headend(c, p, rt)
        return ip6_forward(c, p, d)
    elif d.type == RTN_LOCAL or d.type == RTN_ANYCAST:
        return ip6_local_deliver(c, p)
    elif d.type == RTN_BLACKHOLE:
        set_drop(p, R_BLACKHOLE)
    elif d.type == RTN_PROHIBIT:
        icmp6_send(c, p, ICMP6_DEST_UNREACH, ICMP6_ADM_PROHIBITED, 0, R_PROHIBIT)
    elif d.type == RTN_MULTICAST:
        set_drop(p, R_MULTICAST)
    else:
        # ip6_null_entry and unreachable routes: ip6_pkt_discard
        if in6_is_zero(ip6 + 24):
            set_drop(p, R_DADDR_INVALID)
        else:
            icmp6_send(c, p, ICMP6_DEST_UNREACH, ICMP6_NOROUTE, 0,
                       R_NO_ROUTE if rt == DST_IP6_NULL else R_UNREACHABLE)
    return 0




cdef int ip6_local_deliver(ctx_t* c, pkt_t* p) noexcept nogil:
    """ip6_input_finish() for a packet addressed to this node: the extension
    headers are processed in order (destination options, routing header);
    an SRH goes to ipv6_srh_rcv(); anything else is delivered to the upper
    layer (verdict local: fastpath models no sockets)."""
    cdef uint8_t* ip6 = p.row + p.l3
    cdef int32_t off = IP6_HLEN
    cdef uint8_t nh = ip6[6]
    if nh == NEXTHDR_HOP:
        if off + 2 > p.l3len:
            set_drop(p, R_TRUNCATED)
            return -1
        nh = ip6[off]
        off += (<int32_t>ip6[off + 1] + 1) << 3
    while True:
        if nh == NEXTHDR_DEST:
            if off + 8 > p.l3len or off + ((<int32_t>ip6[off + 1] + 1) << 3) > p.l3len:
                set_drop(p, R_TRUNCATED)
                return -1
            if ip6_parse_tlv(c, p, off):
                return -1
            nh = ip6[off]
            off += (<int32_t>ip6[off + 1] + 1) << 3
        elif nh == NEXTHDR_ROUTING:
            # ipv6_rthdr_rcv()
            if off + 8 > p.l3len or off + ((<int32_t>ip6[off + 1] + 1) << 3) > p.l3len:
                set_drop(p, R_TRUNCATED)
                return -1
            if in6_is_multicast(ip6 + 24):
                set_drop(p, R_DADDR_INVALID)
                return -1
            if ip6[off + 2] == 4:
                return ipv6_srh_rcv(c, p, off)
            if ip6[off + 3] != 0:
                icmp6_send(c, p, ICMP6_PARAMPROB, 0, <uint32_t>(off + 2), R_EXTHDR_INVALID)
                return -1
            nh = ip6[off]
            off += (<int32_t>ip6[off + 1] + 1) << 3
        else:
            break
    p.verdict = V_LOCAL
    p.reason = R_NONE
    return 0


cdef int ipv6_srh_rcv(ctx_t* c, pkt_t* p, int32_t off) noexcept nogil:
    """ipv6_srh_rcv(): an SRH on a packet for this node, without seg6local.
    Needs seg6_enabled (all and the interface); SL = 0: decapsulate an inner
    IPv6/IPv4 packet and receive it again, else deliver; SL too large:
    Parameter Problem at the SL field; else SL--, new DA, route again (a
    local DA loops here with the hop limit checked and decremented)."""
    cdef uint32_t nmiss
    cdef uint8_t* ip6 = p.row + p.l3
    cdef uint8_t* hdr
    cdef uint32_t rt
    cdef const fp_dev* idev = dev_get(c, p.iif)
    cdef int32_t hl
    if idev == NULL or not (idev.flags & DEVF_SEG6):
        set_drop(p, R_SEG6_DISABLED)
        return -1
    if not seg6_hmac_validate_at(c, p, off):
        set_drop(p, p.reason if p.reason != R_NONE else R_HMAC_INVALID)
        return -1
    while True:
        hdr = ip6 + off
        if hdr[3] == 0:
            if hdr[0] == 41 or hdr[0] == 4:
                hl = off + ((<int32_t>hdr[1] + 1) << 3)
                p.l3 += hl
                p.l3len -= hl
                tr(c, T_DECAP, hdr[0], hl, NULL)
                p.depth += 1
                if p.depth > MAX_SEG6LOCAL_DEPTH:
                    set_drop(p, R_SEG6_LOOP)
                    return -1
                # netif_rx(): received again, on the same interface
                if p.l3len < 1:
                    set_drop(p, R_TRUNCATED)
                    return -1
                if hdr[0] == 41:
                    p.family = 6
                    if (p.row[p.l3] >> 4) != 6:
                        set_drop(p, R_NOT_IP)
                        return -1
                    ip6_input(c, p)
                else:
                    p.family = 4
                    if (p.row[p.l3] >> 4) != 4:
                        set_drop(p, R_NOT_IP)
                        return -1
                    ip4_input(c, p)
                return 0
            p.verdict = V_LOCAL
            p.reason = R_NONE
            return 0
        if hdr[3] >= (hdr[1] >> 1):
            icmp6_send(c, p, ICMP6_PARAMPROB, 0, <uint32_t>(off + 3), R_SRH_INVALID)
            return -1
        tr(c, T_SRH, off, hdr[3], NULL)
        hdr[3] -= 1
        memcpy(ip6 + 24, hdr + 8 + (<int32_t>hdr[3] << 4), 16)
        tr(c, T_ADVANCE, hdr[3], 0, ip6 + 24)
        rt = fib6_lookup(c, ip6 + 24, ip6 + 8, p.iif, &nmiss)
        if c.dsts[rt].type == RTN_LOCAL or c.dsts[rt].type == RTN_ANYCAST:
            tr(c, T_ROUTE, rt, 6, NULL)
            if ip6[7] <= 1:
                icmp6_send(c, p, ICMP6_TIME_EXCEED, 0, 0, R_HOP_LIMIT_EXCEEDED)
                return -1
            ip6[7] -= 1
            continue
        return ip6_dst_input(c, p, rt)

# ---------------------------------------------------------------------------
# SRv6: the SRH (net/ipv6/seg6.c) and the seg6local behaviours
# (net/ipv6/seg6_local.c), one helper per kernel step
# ---------------------------------------------------------------------------

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


cdef bint seg6_hmac_validate(const ctx_t* c, pkt_t* p) noexcept nogil:
    return seg6_hmac_validate_at(c, p, transport_offset(p))


cdef inline const fp_hmac_key* hmac_key_find(const ctx_t* c, uint32_t keyid) noexcept nogil:
    """seg6_hmac_info_lookup()."""
    cdef uint32_t k
    for k in range(c.nhmac):
        if c.hmac_keys[k].keyid == keyid:
            return &c.hmac_keys[k]
    return NULL


cdef bint seg6_hmac_compute(const fp_hmac_key* key, const uint8_t* srh, const uint8_t* saddr,
                            uint8_t* out) noexcept nogil:
    """seg6_hmac_compute(): the HMAC over source address (16), last entry
    (1), flags (1), key id (4) and every segment (16 each), truncated or
    zero-padded to the 32-byte field (SHA-1 gives 20).  False (-EMSGSIZE)
    when the text does not fit the kernel's 256-byte ring: 15 segments or
    more.  The caller has checked that the segments lie in the packet."""
    cdef uint8_t text[SEG6_HMAC_RING_SIZE]
    cdef uint8_t dg[32]
    cdef int32_t nseg = <int32_t>srh[4] + 1
    cdef int32_t plen = 16 + 1 + 1 + 4 + nseg * 16
    cdef int dlen
    if plen >= SEG6_HMAC_RING_SIZE:
        return False
    memcpy(text, saddr, 16)
    text[16] = srh[4]
    text[17] = srh[5]
    wr32(text + 18, key.keyid)
    memcpy(text + 22, srh + 8, nseg * 16)
    dlen = fp_hmac_prepared(key.algo, key.istate, key.ostate, text, plen, dg)
    if dlen > SEG6_HMAC_FIELD_LEN:
        dlen = SEG6_HMAC_FIELD_LEN
    memset(out, 0, SEG6_HMAC_FIELD_LEN)
    memcpy(out, dg, dlen)
    return True


cdef inline int32_t seg6_tlv_hmac(const uint8_t* srh, int32_t avail) noexcept nogil:
    """seg6_get_tlv_hmac(): offset (from the SRH) of the HMAC TLV, which the
    kernel expects as the SRH's last 40 bytes, or -1.  ``avail``: bytes of
    the packet from the SRH on (the kernel does not bound its reads; we
    return -1 rather than read past the packet)."""
    cdef int32_t srhlen, off
    if avail < 8:
        return -1
    if <int32_t>srh[1] < (<int32_t>srh[4] + 1) * 2 + 5:
        return -1
    if not (srh[5] & 0x08):
        return -1
    srhlen = (<int32_t>srh[1] + 1) << 3
    if srhlen > avail:
        return -1
    off = srhlen - 40
    if srh[off] != 5 or srh[off + 1] != 38:
        return -1
    return off


cdef bint seg6_hmac_validate_at(const ctx_t* c, pkt_t* p, int32_t th) noexcept nogil:
    """seg6_hmac_validate_skb(): as the kernel, reads the SRH at the
    transport header (``th``), whatever header is really there; per the
    ingress device's seg6_require_hmac: -1 ignore, 0 check an HMAC TLV when
    there is one, 1 require one.  A TLV whose key is unknown, or whose HMAC
    differs from the one computed, fails."""
    cdef const uint8_t* ip6 = p.row + p.l3
    cdef const uint8_t* srh = ip6 + th
    cdef const fp_dev* idev = dev_get(c, p.iif)
    cdef int require = idev.seg6_require_hmac if idev != NULL else 0
    cdef int32_t toff = seg6_tlv_hmac(srh, p.l3len - th) if th < p.l3len else -1
    cdef const fp_hmac_key* key
    cdef uint8_t out[SEG6_HMAC_FIELD_LEN]
    cdef uint64_t a0, a1, a2, a3, b0, b1, b2, b3
    if require > 0 and toff < 0:
        return False
    if require < 0 or toff < 0:
        return True
    key = hmac_key_find(c, rd32(srh + toff + 4))
    if key == NULL:
        return False
    if not seg6_hmac_compute(key, srh, ip6 + 8, out):
        return False
    # crypto_memneq: compare the 32 bytes without an early exit
    memcpy(&a0, out, 8)
    memcpy(&a1, out + 8, 8)
    memcpy(&a2, out + 16, 8)
    memcpy(&a3, out + 24, 8)
    memcpy(&b0, srh + toff + 8, 8)
    memcpy(&b1, srh + toff + 16, 8)
    memcpy(&b2, srh + toff + 24, 8)
    memcpy(&b3, srh + toff + 32, 8)
    return ((a0 ^ b0) | (a1 ^ b1) | (a2 ^ b2) | (a3 ^ b3)) == 0


cdef bint seg6_push_hmac(const ctx_t* c, const uint8_t* saddr, uint8_t* srh,
                         int32_t avail) noexcept nogil:
    """seg6_push_hmac(): fill the HMAC TLV of an SRH we build; False (the
    kernel's error, the packet is dropped) when the TLV is missing, the key
    unknown, or the segment list too long for the HMAC text."""
    cdef int32_t toff = seg6_tlv_hmac(srh, avail)
    cdef const fp_hmac_key* key
    if toff < 0:
        return False
    key = hmac_key_find(c, rd32(srh + toff + 4))
    if key == NULL:
        return False
    memset(srh + toff + 8, 0, SEG6_HMAC_FIELD_LEN)
    return seg6_hmac_compute(key, srh, saddr, srh + toff + 8)


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
        rt = fib6_lookup(c, daddr, ip6 + 8, p.iif, &nmiss)
        if c.refmode != MODE_NOREF:
            # without RT6_LOOKUP_F_DST_NOREF: every table that misses holds
            # and puts ip6_null_entry, the route found is held
            null_hold_put(c, nmiss)
            if not dst_hold_pkt(c, p, rt):
                c.hold_fail += 1
                rt = fib6_walk(c, daddr, ip6 + 8, p.iif, &nmiss, p)
                if rt == DST_IP6_NULL:
                    dst_hold_pkt(c, p, rt)
    elif slot < 0 or <uint32_t>slot >= c.nlpm6:
        tr(c, T_TABLE, 0xFFFFFFFFu, DST_IP6_BLACKHOLE, daddr)
        rt = DST_IP6_BLACKHOLE
        if c.refmode != MODE_NOREF:
            dst_hold_pkt(c, p, rt)
        return rt
    else:
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
    """End, End.X, End.T with flavors: NEXT-C-SID first (argument shift when
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
        return ip4_route_input(c, p, rd32(p.row + p.l3 + 16), -1, True)
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


cdef int end_dt6(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    if not decap(c, p, 41, IP6_HLEN):
        return -1
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
    return ip4_route_input(c, p, nh4 if nh4 else rd32(p.row + p.l3 + 16), -1, True)


cdef int end_dt4(ctx_t* c, pkt_t* p, const fp_s6l* s) noexcept nogil:
    """End.DT4 in VRF mode without a VRF device: the inner packet is looked
    up in the vrftable (local routes deliver)."""
    if not decap(c, p, 4, IP4_HLEN):
        return -1
    if not inner_ip4_ok(p):
        return -1
    p.family = 4
    if s.slot4 < 0:
        set_drop(p, R_NO_ROUTE)
        return -1
    return ip4_route_input(c, p, rd32(p.row + p.l3 + 16), s.slot4, True)


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
    if <uint32_t>(p.l3len - 14) > odev.mtu:
        set_drop(p, R_PKT_TOO_BIG)
        return -1
    p.verdict = V_FORWARD
    p.reason = R_NONE
    p.oif = s.oif
    p.l2_done = True
    return 0


cdef bint srh_do_inline(ctx_t* c, pkt_t* p, const uint8_t* tmpl, int32_t hl) noexcept nogil:
    """seg6_do_srh_inline(): insert the SRH template after the IPv6 header;
    segments[0] = the DA, DA = segments[last entry]; the HMAC TLV when the
    template has one.  False with the packet dropped on failure."""
    cdef uint8_t* ip6
    cdef uint8_t* isrh
    if not make_headroom(c, p, hl + L2_RESERVE):
        set_drop(p, R_NO_HEADROOM)
        return False
    memmove(p.row + p.l3 - hl, p.row + p.l3, IP6_HLEN)
    p.l3 -= hl
    p.l3len += hl
    ip6 = p.row + p.l3
    isrh = ip6 + IP6_HLEN
    memcpy(isrh, tmpl, hl)
    isrh[0] = ip6[6]
    ip6[6] = NEXTHDR_ROUTING
    memcpy(isrh + 8, ip6 + 24, 16)
    memcpy(ip6 + 24, isrh + 8 + (<int32_t>isrh[4] << 4), 16)
    wr16(ip6 + 4, <uint16_t>(p.l3len - IP6_HLEN))
    if (isrh[5] & 0x08) and not seg6_push_hmac(c, ip6 + 8, isrh, hl):
        set_drop(p, R_HMAC_INVALID)
        return False
    tr(c, T_INSERT, hl, 0, ip6 + 24)
    return True


cdef inline uint32_t seg6_outer_word(const ctx_t* c, const uint8_t* l3, int family) noexcept nogil:
    """The first 32 bits of the outer header (seg6_make_flowlabel and
    ip6_flow_hdr): version 6; the inner traffic class for an IPv6 inner
    packet (0 for IPv4); flow label per net.ipv6.seg6_flowlabel: -1 zero,
    0 the inner flow label (IPv6 inner only), 1 a flow hash (the kernel's
    skb_get_hash() is keyed per boot; ours is fastpath's own stable hash)."""
    cdef uint32_t flow = 0, h, w0
    if family == 6:
        w0 = rd32(l3)
        if c.seg6_flowlabel > 0:
            h = flow_hash6(l3)
            flow = ((h << 16) | (h >> 16)) & 0xFFFFF
        elif c.seg6_flowlabel == 0:
            flow = w0 & 0xFFFFF
        return 0x60000000u | (w0 & 0x0FF00000u) | flow
    if c.seg6_flowlabel > 0:
        h = flow_hash4(l3)
        flow = ((h << 16) | (h >> 16)) & 0xFFFFF
    return 0x60000000u | flow


cdef bint srh_do_encap(ctx_t* c, pkt_t* p, const uint8_t* tmpl, int32_t hl, const uint8_t* da,
                       uint8_t proto, uint32_t w0, uint8_t hlim, uint32_t src_dev,
                       const uint8_t* route_tunsrc) noexcept nogil:
    """seg6_do_srh_encap() / seg6_do_srh_encap_red(): push an outer IPv6
    header (first word ``w0``, hop limit ``hlim``, destination ``da``) and,
    when ``hl`` > 0, the SRH template with next header ``proto``; the source
    as set_tun_src(): the route's tunsrc, else ip sr tunsrc, else source
    selection on the route's device towards ``da``; then the HMAC TLV.  The
    payload stays where it is (headroom).  False with the packet dropped."""
    cdef int32_t tot = IP6_HLEN + hl
    cdef uint8_t* ip6
    if not make_headroom(c, p, tot + L2_RESERVE):
        set_drop(p, R_NO_HEADROOM)
        return False
    p.l3 -= tot
    p.l3len += tot
    ip6 = p.row + p.l3
    wr32(ip6, w0)
    wr16(ip6 + 4, <uint16_t>(p.l3len - IP6_HLEN))
    ip6[6] = NEXTHDR_ROUTING if hl else proto
    ip6[7] = hlim
    memcpy(ip6 + 24, da, 16)
    if hl:
        memcpy(ip6 + IP6_HLEN, tmpl, hl)
        ip6[IP6_HLEN] = proto
    if route_tunsrc != NULL and not in6_is_zero(route_tunsrc):
        memcpy(ip6 + 8, route_tunsrc, 16)
    elif c.has_tunsrc:
        memcpy(ip6 + 8, c.tunsrc, 16)
    elif not ipv6_get_saddr(c, src_dev, da, ip6 + 8):
        set_drop(p, R_NO_SOURCE_ADDRESS)
        return False
    if hl and (ip6[IP6_HLEN + 5] & 0x08) and not seg6_push_hmac(c, ip6 + 8, ip6 + IP6_HLEN, hl):
        set_drop(p, R_HMAC_INVALID)
        return False
    tr(c, T_ENCAP, tot, 0, ip6 + 24)
    return True


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


# ---------------------------------------------------------------------------
# seg6 headends (net/ipv6/seg6_iptunnel.c): routes with `encap seg6`
# ---------------------------------------------------------------------------

cdef int seg6_headend(ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """seg6_input_core(): the route's encapsulation (seg6_do_srh: inline,
    encap, encap.red, l2encap, l2encap.red), then the route of the new
    destination (ip6_route_input(): rules, local table, from the ingress
    device) and dst_input(): forwarded by ip6_forward() (hop limit checked
    and decremented on the outer header, Packet Too Big against the egress
    MTU: the error goes to the outer source, normally our own address, so
    nothing leaves), delivered, or the next behaviour.  The inner packet is
    not forwarded first: an IPv4 inner packet keeps its TTL."""
    cdef const fp_dst* d = &c.dsts[rt]
    cdef const fp_s6l* s
    cdef const fp_nh* rnh
    cdef const fp_dev* rdev
    cdef uint8_t* l3 = p.row + p.l3
    cdef uint8_t macs[12]
    cdef uint8_t proto, hlim
    cdef uint32_t w0, rt2, nmiss
    cdef bint l2 = False
    cdef int fam = p.family
    if d.encap >= c.ns6l or c.s6l[d.encap].action != S6_HEADEND:
        set_drop(p, R_NOT_SUPPORTED)
        return -1
    s = &c.s6l[d.encap]
    p.nencap += 1
    if p.nencap > MAX_HEADEND_DEPTH:
        set_drop(p, R_SEG6_LOOP)
        return -1
    if s.mode == SEG6_MODE_INLINE:
        if fam != 6:
            set_drop(p, R_NOT_SUPPORTED)          # -EINVAL (inline routes are IPv6 only)
            return -1
        if not srh_do_inline(c, p, c.srh_blob + s.srh_off, s.srh_len):
            return -1
    else:
        rnh = dst_nexthop(c, d, 0)
        # outer fields from the L3 header (the skb's network header), for
        # the L2 modes too
        w0 = seg6_outer_word(c, l3, fam)
        if fam == 6:
            hlim = l3[7]
            proto = 41
        else:
            # ip6_dst_hoplimit(): the route's hoplimit metric, else the
            # IPv6 hop_limit of the route's device
            rdev = dev_get(c, rnh.oif) if rnh != NULL else NULL
            hlim = d.hoplimit if d.hoplimit else (rdev.hop_limit if rdev != NULL and rdev.hop_limit
                                                  else c.hop_limit)
            proto = 4
        if s.mode == SEG6_MODE_L2ENCAP or s.mode == SEG6_MODE_L2ENCAP_RED:
            # the frame as received goes inside (mac_len bytes: none on a
            # raw/TUN batch; the untagged Ethernet header on an Ethernet one)
            proto = 143
            if c.linktype == LINK_ETHERNET:
                l2 = True
                memcpy(macs, p.row + p.start, 12)
                if not make_headroom(c, p, 14 + IP6_HLEN + s.srh_len + L2_RESERVE):
                    set_drop(p, R_NO_HEADROOM)
                    return -1
                p.l3 -= 14
                p.l3len += 14
                memcpy(p.row + p.l3, macs, 12)
                wr16(p.row + p.l3 + 12, 0x86DD if fam == 6 else 0x0800)
        if not srh_do_encap(c, p, c.srh_blob + s.srh_off, s.srh_len, s.nh6, proto, w0, hlim,
                            rnh.oif if rnh != NULL else 0, s.tunsrc):
            return -1
        p.family = 6
    # ip6_route_input() on the new header, then dst_input()
    l3 = p.row + p.l3
    rt2 = fib6_lookup(c, l3 + 24, l3 + 8, p.iif, &nmiss)
    return ip6_dst_input(c, p, rt2)


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
    if s.flavors and (s.action == S6_END or s.action == S6_END_X or s.action == S6_END_T):
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


# ---------------------------------------------------------------------------
# IPv4
# ---------------------------------------------------------------------------

cdef inline bint ip4_martian(uint32_t a) noexcept nogil:
    return (a >> 24) == 0 or (a >> 24) == 127 or (a >> 28) == 0xE or a == 0xFFFFFFFFu


cdef inline void ip_decrease_ttl(uint8_t* ip4) noexcept nogil:
    """ip_decrease_ttl(): incremental checksum exactly as the kernel computes it."""
    cdef uint32_t check = (<uint32_t>ip4[10] << 8 | ip4[11]) + 0x0100
    check = check + (1 if check >= 0xFFFF else 0)
    ip4[10] = (check >> 8) & 0xFF
    ip4[11] = check & 0xFF
    ip4[8] -= 1


cdef int ip_forward(ctx_t* c, pkt_t* p, const fp_dst* d) noexcept nogil:
    """ip_forward() after a unicast input route was found."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef const fp_nh* nh = dst_nexthop(c, d, mp_hash4(c, p) if d.nh_count > 1 else 0)
    cdef const fp_dev* odev
    cdef uint32_t mtu
    if nh == NULL:
        set_drop(p, R_NO_ROUTE)
        return -1
    odev = dev_get(c, nh.oif)
    if odev == NULL or not (odev.flags & DEVF_UP):
        set_drop(p, R_INTERFACE_DOWN)
        return -1
    if ip4[8] <= 1:
        icmp4_send(c, p, ICMP_TIME_EXCEEDED, 0, 0, R_HOP_LIMIT_EXCEEDED, False)
        return -1
    mtu = d.mtu if d.mtu else odev.mtu
    cdef bint frag = False
    if <uint32_t>p.l3len > mtu:
        if rd16(ip4 + 6) & 0x4000:
            icmp4_send(c, p, ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, mtu, R_PKT_TOO_BIG, False)
            return -1
        # DF clear: ip_fragment() after the TTL decrement; the fragments are
        # cut by Router.process (slow path, as in the kernel)
        frag = True
    ip_decrease_ttl(ip4)
    p.verdict = V_FORWARD
    p.reason = R_FRAGMENTED if frag else R_NONE
    p.oif = nh.oif
    memset(p.nexthop, 0, 16)
    if nh.flags & NHF_GATEWAY:
        memcpy(p.nexthop, nh.gw, 4)
    else:
        memcpy(p.nexthop, ip4 + 16, 4)
    tr(c, T_FORWARD, nh.oif, ip4[8], p.nexthop)
    return 0


cdef void ip4_input(ctx_t* c, pkt_t* p) noexcept nogil:
    """ip_rcv_core() then ip_route_input_slow() and the route's input."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef int32_t ihl, tot
    if p.l3len < IP4_HLEN:
        set_drop(p, R_TRUNCATED)
        return
    if (ip4[0] >> 4) != 4:
        set_drop(p, R_NOT_IP)
        return
    ihl = (ip4[0] & 0x0F) << 2
    if ihl < IP4_HLEN:
        set_drop(p, R_IP_HDR_INVALID)
        return
    if ihl > p.l3len:
        set_drop(p, R_TRUNCATED)
        return
    if csum_fold(csum_add(0, ip4, ihl)) != 0:
        set_drop(p, R_IP_CSUM_ERROR)
        return
    tot = rd16(ip4 + 2)
    if tot > p.l3len:
        set_drop(p, R_TRUNCATED)
        return
    if tot < ihl:
        set_drop(p, R_IP_HDR_INVALID)
        return
    p.l3len = tot                        # pskb_trim_rcsum
    if ihl > IP4_HLEN:
        set_drop(p, R_NOT_SUPPORTED)     # IP options: not modelled yet
        return
    ip4_route_input(c, p, rd32(ip4 + 16), -1, False)


cdef bint ip4_validate_source(const ctx_t* c, pkt_t* p, const fp_dst* d, uint32_t saddr,
                              uint32_t daddr) noexcept nogil:
    """fib_validate_source() with rp_filter off.  Without custom rules or
    custom local routes: a source that is one of our addresses is a martian.
    With them: the reverse lookup (to the source, from the destination, as
    if received on the egress device) must not give a local, broadcast,
    multicast or anycast route (an error route or no route is accepted)."""
    cdef const fp_nh* nh
    cdef uint32_t rt
    cdef uint8_t t
    if not c.v4_full_rpcheck:
        return not is_local_addr(c, 4, p.row + p.l3 + 12)
    nh = dst_nexthop(c, d, mp_hash4(c, p) if d.nh_count > 1 else 0)
    rt = fib4_lookup(c, saddr, daddr, nh.oif if nh != NULL else c.lo_ifindex)
    t = c.dsts[rt].type
    return not (t == RTN_LOCAL or t == RTN_BROADCAST or t == RTN_MULTICAST or t == RTN_ANYCAST)


DEF IP4_LIMITED_BCAST = 0xFFFF    # ip4_route_martian: not a martian, delivered locally


cdef inline uint16_t ip4_route_martian(uint32_t saddr, uint32_t daddr) noexcept nogil:
    """ip_route_input_slow()'s martian checks, in its order: the drop
    reason, IP4_LIMITED_BCAST for the limited broadcast, or 0."""
    if (daddr >> 28) == 0xE:
        return R_MULTICAST
    if (saddr >> 28) == 0xE or saddr == 0xFFFFFFFFu:
        return R_SADDR_INVALID
    if daddr == 0xFFFFFFFFu or (saddr == 0 and daddr == 0):
        return IP4_LIMITED_BCAST
    if (saddr >> 24) == 0 or (saddr >> 24) == 127:
        return R_SADDR_INVALID
    if (daddr >> 24) == 0 or (daddr >> 24) == 127:
        return R_DADDR_INVALID
    return 0


cdef int ip4_route_input(ctx_t* c, pkt_t* p, uint32_t daddr, int32_t slot, bint ref) noexcept nogil:
    """ip_route_input(skb, daddr, saddr, ...) then dst_input(): martian
    checks, the lookup (through the rules, or in one table when ``slot`` >= 0:
    End.DT4's table), then forward, deliver or ip_error().  Returns 0, or -1
    where the kernel's return code is an error.  ``ref``: the refcounted
    ip_route_input() of End.DX4/End.DT4 (before seeds/000): in refcount mode
    skb_dst_force() takes a reference on the input route, which every worker
    shares; receive itself is ip_route_input_noref()."""
    cdef uint8_t* ip4 = p.row + p.l3
    cdef uint32_t saddr = rd32(ip4 + 12)
    cdef uint32_t rt, v
    cdef const fp_dst* d
    cdef const fp_dev* idev
    cdef uint16_t martian = ip4_route_martian(saddr, daddr)
    if martian == IP4_LIMITED_BCAST:
        p.verdict = V_LOCAL
        p.reason = R_NONE
        return 0
    if martian:
        set_drop(p, martian)
        return -1
    if slot >= 0:
        v = lpm4_lookup(c.lpm4[slot].tbl24, c.lpm4[slot].groups, daddr) if <uint32_t>slot < c.nlpm4 else 0
        rt = table_route(c, v, DST_IP4_NOROUTE)
    else:
        rt = fib4_cached(c, daddr, saddr, p.iif)
    p.dst = rt
    tr(c, T_ROUTE, rt, 4, NULL)
    d = &c.dsts[rt]
    note_route(c, p, rt)
    if ref and c.refmode != MODE_NOREF and not dst_hold_pkt(c, p, rt):
        c.hold_fail += 1
        set_drop(p, R_ROUTE_DEAD)        # skb_dst_force() found it being freed
        return -1
    if (d.flags & DSTF_DEAD) and p.held != <int32_t>rt:
        set_drop(p, R_ROUTE_DEAD)
        return -1
    if d.type == RTN_BROADCAST or d.type == RTN_LOCAL:
        p.verdict = V_LOCAL
        p.reason = R_NONE
        return 0
    idev = dev_get(c, p.iif)
    if d.type == RTN_UNICAST:
        if d.encap_type != ENCAP_NONE and d.encap_type != ENCAP_SEG6:
            set_drop(p, R_NOT_SUPPORTED)
            return -1
        if not ip4_validate_source(c, p, d, saddr, daddr):
            set_drop(p, R_SADDR_INVALID)
            return -1
        if idev == NULL or not (idev.flags & DEVF_FWD4):
            # not forwarding: EHOSTUNREACH, and ip_error sends nothing
            set_drop(p, R_FORWARDING_DISABLED)
            return 0
        if d.encap_type == ENCAP_SEG6:
            # the input route's dst.input is lwtunnel_input (no ip_forward:
            # the TTL is not checked nor decremented)
            return seg6_headend(c, p, rt)
        return ip_forward(c, p, d)
    if idev == NULL or not (idev.flags & DEVF_FWD4):
        set_drop(p, R_FORWARDING_DISABLED if d.type != RTN_BLACKHOLE else R_BLACKHOLE)
        return 0
    # ip_error()
    if d.type == RTN_BLACKHOLE:
        set_drop(p, R_BLACKHOLE)
    elif d.type == RTN_PROHIBIT:
        icmp4_send(c, p, ICMP_DEST_UNREACH, ICMP_PKT_FILTERED, 0, R_PROHIBIT, False)
    elif d.type == RTN_UNREACHABLE and rt != DST_IP4_NOROUTE and rt != DST_IP4_UNREACHABLE:
        # an unreachable route: EHOSTUNREACH (an unreachable rule action
        # returns ENETUNREACH, as no route at all: fib4_rule_action)
        icmp4_send(c, p, ICMP_DEST_UNREACH, ICMP_HOST_UNREACH, 0, R_UNREACHABLE, False)
    elif rt == DST_IP4_UNREACHABLE:
        icmp4_send(c, p, ICMP_DEST_UNREACH, ICMP_NET_UNREACH, 0, R_UNREACHABLE, False)
    elif d.type == RTN_MULTICAST or d.type == RTN_ANYCAST:
        set_drop(p, R_DADDR_INVALID)
        return -1
    else:
        icmp4_send(c, p, ICMP_DEST_UNREACH, ICMP_NET_UNREACH, 0, R_NO_ROUTE, False)
    return 0


# ---------------------------------------------------------------------------
# link layer
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# the fast path: the common IPv6 cases in one straight pass
# ---------------------------------------------------------------------------
#
# As VPP's per-node fast paths, or DPDK's l3fwd next to a full stack: the
# packets most traffic is made of (IPv6 forwarded to a unicast route; End
# and End.X without flavors, SRH without TLVs; End.DX4/DT4/DX6/DT6 of a
# packet right after the outer header; all forwarded) are handled here with
# a fraction of the general path's work.  The fast path changes how fast,
# never what.  It decides nothing on its own: it only recognises a case
# whose every step the general path would take, and does those steps, with
# the same results and the same side effects (use statistics, references,
# counters).  Anything else -- an ICMP error due, a drop, a hop-by-hop
# header, TLVs, flavors, HMAC required, headends, a local route, nested
# SIDs -- goes to the general path with the packet and every counter as
# they were: from the start, or from its route once looked up.  Tracing
# always takes the general path.  tests/test_fastpath.py holds the two
# paths to the same bytes, metadata, counters, statistics and references
# over random packets at the fast path's edges.

cdef inline void fast_route(const ctx_t* c, pkt_t* p, uint32_t rt) noexcept nogil:
    """The route the packet leaves by (and its generation, for check_gen)."""
    p.dst = rt
    note_route(c, p, rt)


cdef inline bint fast_no_room(const ctx_t* c, const pkt_t* p, const adj_t* a) noexcept nogil:
    """The Ethernet header would not fit in front of the packet as it is
    (the general path then makes room, or drops)."""
    return p.l3 < 18 and c.linktype == LINK_ETHERNET and (p.l3 < 14 or p.has_vlan or a.vlan)


cdef inline const fp_nh* fast_nexthop6(const ctx_t* c, const pkt_t* p, const uint8_t* ip6,
                                       const fp_dst* d) noexcept nogil:
    """The checks of ip6_forward() for a unicast route ``d``: the nexthop the
    packet leaves by when all of them pass, else NULL (the general path
    then makes the error, or the drop)."""
    cdef const fp_nh* nh
    if d.mtu != 0 and <uint32_t>p.l3len > d.mtu:
        return NULL
    nh = dst_nexthop(c, d, mp_hash6(c, p) if d.nh_count > 1 else 0)
    if nh == NULL:
        return NULL
    return fast_via6(c, p, ip6, nh)


cdef inline const fp_nh* plain_nh(const ctx_t* c, uint32_t rt) noexcept nogil:
    """The nexthop of route ``rt`` from its fast-path word alone (Tables.dfast:
    a live IPv6 unicast route with one nexthop, no encap and no mtu metric,
    which fast_nexthop6() would check no further than fast_via6() does),
    without reading the entry; NULL when it has none (read it).  Only
    without references (noref): a reference reads the entry anyway."""
    cdef uint32_t f = c.dfast[rt] if c.refmode == MODE_NOREF else 0
    return &c.nhs[f - 1] if f != 0 and f <= c.nnh else NULL


cdef inline const fp_nh* fast_via6(const ctx_t* c, const pkt_t* p, const uint8_t* ip6,
                                   const fp_nh* nh) noexcept nogil:
    """The rest of fast_nexthop6(): the checks that depend on the packet and
    its nexthop; the device's are the nexthop's adjacency's, resolved at
    load."""
    cdef const adj_t* a
    if not c.fwd6 or ip6[7] <= 1:
        return NULL
    a = &c.adj[nh - c.nhs]
    if <uint32_t>p.l3len > a.mtu6:        # (0: no such device, down, an IPv4 gateway)
        return NULL
    # (multicast and loopback sources were refused before: by the receive
    # checks, or by fast_dx6 for a decapsulated packet)
    if nh.oif != p.iif and (in6_is_zero(ip6 + 8) or in6_is_linklocal(ip6 + 8)):
        return NULL
    if fast_no_room(c, p, a):
        return NULL
    return nh


cdef inline void fast_out6(const ctx_t* c, pkt_t* p, uint8_t* ip6, const fp_nh* nh,
                           const uint8_t* known, int32_t hint) noexcept nogil:
    """ip6_forward()'s end (hop limit, verdict, nexthop), then the frame as
    l2_build() makes it.  ``known``: the nexthop of a gateway-less route
    (End.X's, End.DX6's nh6), ``hint`` its neighbour entry (s6l_nb)."""
    cdef const uint8_t* via = nh.gw
    if not (nh.flags & NHF_GATEWAY):
        via = known if known != NULL else ip6 + 24
    ip6[7] -= 1
    p.verdict = V_FORWARD
    p.reason = R_NONE
    p.oif = nh.oif
    memcpy(p.nexthop, via, 16)
    fast_l2(c, p, nh, 6, via, hint)


cdef inline void fast_l2(const ctx_t* c, pkt_t* p, const fp_nh* nh, int family,
                         const uint8_t* via, int32_t hint) noexcept nogil:
    """The frame of a forwarded packet, as l2_build() makes it, from the
    nexthop's adjacency (room for it checked beforehand).  ``via``: the
    packet's nexthop address; ``hint``: the first neighbour entry for it
    on any device when known (-1 else), which is neigh_find()'s answer when
    it is on the nexthop's device."""
    cdef const adj_t* a = &c.adj[nh - c.nhs]
    cdef const uint8_t* mac
    cdef uint8_t* f
    cdef int32_t l2
    if c.linktype != LINK_ETHERNET:
        p.l2len = 0
        p.start = p.l3
        p.length = p.l3len
        return
    if a.vlan or p.has_vlan:
        l2 = 18
        f = p.row + p.l3 - 18
        wr16(f + 12, 0x8100)
        wr16(f + 14, a.tci if a.vlan else p.vlan_tci)
    else:
        l2 = 14
        f = p.row + p.l3 - 14
    memcpy(f, a.eth, 12)
    if not a.gw:
        # a connected route: the neighbour of the packet's own destination
        if hint >= 0 and c.neighs[hint].ifindex == nh.oif:
            mac = c.neighs[hint].mac
        else:
            mac = neigh_mac(c, nh.oif, family, via)
        if mac != NULL:
            memcpy(f, mac, 6)
    wr16(f + l2 - 2, 0x86DD if family == 6 else 0x0800)
    p.l2len = <uint16_t>l2
    p.start = p.l3 - l2
    p.length = p.l3len + l2


cdef inline bint fast_end(ctx_t* c, pkt_t* p, const fp_dev* idev, uint8_t* ip6, uint32_t rt,
                          const fp_dst* d, const fp_s6l* s) noexcept nogil:
    """End, or End.X without oif, without flavors: input_action_end(_x) ->
    seg6_lookup_any_nexthop -> ip6_forward, for an SRH first after the IPv6
    header, with SL > 0 and no TLVs (seg6_validate_srh then reduces to its
    length checks; no HMAC TLV, so only seg6_require_hmac > 0 fails it)."""
    cdef uint8_t* srh = ip6 + IP6_HLEN
    cdef int32_t srhlen
    cdef uint32_t sl, rt2, nmiss
    cdef const fp_dst* d2
    cdef const fp_nh* nh
    cdef const uint8_t* known = s.nh6 if s.action == S6_END_X else NULL
    cdef uint64_t old0, old1
    if ip6[6] != NEXTHDR_ROUTING or p.l3len < IP6_HLEN + 8 or idev.seg6_require_hmac > 0:
        return False
    srhlen = (<int32_t>srh[1] + 1) << 3
    sl = srh[3]
    if (srh[2] != 4 or sl == 0 or sl > <uint32_t>srh[4] + 1
            or srhlen != 8 + ((<int32_t>srh[4] + 1) << 4) or IP6_HLEN + srhlen > p.l3len):
        return False
    # advance (undone below if the general path must take the packet)
    memcpy(&old0, ip6 + 24, 8)
    memcpy(&old1, ip6 + 32, 8)
    srh[3] = <uint8_t>(sl - 1)
    memcpy(ip6 + 24, srh + 8 + ((sl - 1) << 4), 16)
    if p.pre != NULL and p.pre.k2 == (-2 if known != NULL else p.l3 + <int32_t>(IP6_HLEN + 8 + ((sl - 1) << 4))):
        rt2 = p.pre.rt2
        nmiss = p.pre.m2
    else:
        # keyed by the segment in the SRH (the same bytes as the new DA, not
        # read back through the store just made)
        rt2 = fib6_cached_as(c, known if known != NULL else srh + 8 + ((sl - 1) << 4), ip6 + 8, p.iif, &nmiss, False)
    nh = plain_nh(c, rt2)
    if nh != NULL:
        nh = fast_via6(c, p, ip6, nh)
    else:
        d2 = &c.dsts[rt2]
        if d2.type == RTN_UNICAST and d2.encap_type == ENCAP_NONE and not (d2.flags & DSTF_DEAD):
            nh = fast_nexthop6(c, p, ip6, d2)
    if nh != NULL and c.refmode != MODE_NOREF:
        # seg6_lookup_any_nexthop without RT6_LOOKUP_F_DST_NOREF
        if dst_hold_pkt(c, p, rt2):
            null_hold_put(c, nmiss)
        else:
            nh = NULL
    if nh == NULL:
        srh[3] = <uint8_t>sl
        memcpy(ip6 + 24, &old0, 8)
        memcpy(ip6 + 32, &old1, 8)
        return False
    dst_use_route(c, rt)
    use_later(c, p, rt2)
    fast_out6(c, p, ip6, nh, known, c.s6l_nb[d.encap])
    fast_route(c, p, rt2)
    s6l_count(c, d, s, 0, p.l3len)
    return True


cdef inline int32_t fast_frame6(const ctx_t* c, const uint8_t* row, int32_t start,
                                int32_t length) noexcept nogil:
    """The L2 header's length (0, 14, or 18 with an 802.1Q tag) of a frame
    holding at least an IPv6 header's worth of IPv6, or -1 for anything
    else (which the general path parses)."""
    cdef const uint8_t* f = row + start
    if start < 0 or length < 0 or start + length > c.slot:
        return -1
    if c.linktype != LINK_ETHERNET:
        return 0 if length >= IP6_HLEN else -1
    if length < 14 + IP6_HLEN:
        return -1
    if rd16(f + 12) == 0x86DD:
        return 14
    if rd16(f + 12) == 0x8100 and length >= 18 + IP6_HLEN and rd16(f + 16) == 0x86DD:
        return 18
    return -1


cdef bint fast_dx4(ctx_t* c, pkt_t* p, const fp_dev* idev, uint8_t* ip6, uint32_t rt,
                   const fp_dst* d, const fp_s6l* s) noexcept nogil:
    """End.DX4 / End.DT4 of an IPv4 packet right after the IPv6 header (no
    SRH, no options): decap_and_validate, ip_route_input (martians, the
    lookup through the rules or in the vrftable, fib_validate_source) and
    ip_forward, when the packet leaves by a unicast route unfragmented."""
    cdef uint8_t* ip4 = ip6 + IP6_HLEN
    cdef int32_t len0 = p.l3len
    cdef uint32_t saddr, daddr, rt4
    cdef const fp_dst* d4
    cdef const fp_nh* nh
    cdef const adj_t* a
    if ip6[6] != 4 or len0 < IP6_HLEN + IP4_HLEN or ip4[0] != 0x45 or ip4[8] <= 1:
        return False
    if not (idev.flags & DEVF_FWD4):
        return False
    saddr = rd32(ip4 + 12)
    daddr = rd32(s.nh4) if s.action == S6_END_DX4 else 0
    if daddr == 0:
        daddr = rd32(ip4 + 16)
    if ip4_route_martian(saddr, daddr) != 0:
        return False
    if s.action == S6_END_DT4:
        if s.slot4 < 0 or <uint32_t>s.slot4 >= c.nlpm4:
            return False
        rt4 = table_route(c, lpm4_lookup(c.lpm4[s.slot4].tbl24, c.lpm4[s.slot4].groups, daddr),
                          DST_IP4_NOROUTE)
    else:
        rt4 = fib4_cached(c, daddr, saddr, p.iif)
    d4 = &c.dsts[rt4]
    if d4.type != RTN_UNICAST or d4.encap_type != ENCAP_NONE or (d4.flags & DSTF_DEAD):
        return False
    # decapsulated (undone below if the general path must take the packet)
    p.l3 += IP6_HLEN
    p.l3len -= IP6_HLEN
    p.family = 4
    nh = NULL
    if ip4_validate_source(c, p, d4, saddr, daddr):
        nh = dst_nexthop(c, d4, mp_hash4(c, p) if d4.nh_count > 1 else 0)
    if nh != NULL:
        a = &c.adj[nh - c.nhs]
        if (a.mtu4 == 0                     # no such device, down, an IPv6 gateway
                or <uint32_t>p.l3len > (d4.mtu if d4.mtu else a.mtu4)
                or fast_no_room(c, p, a)):
            nh = NULL
    if nh != NULL and c.refmode != MODE_NOREF and not dst_hold_pkt(c, p, rt4):
        nh = NULL                        # skb_dst_force() would fail: the general path drops
    if nh == NULL:
        p.l3 -= IP6_HLEN
        p.l3len = len0
        p.family = 6
        return False
    dst_use_route(c, rt)
    ip_decrease_ttl(ip4)
    p.verdict = V_FORWARD
    p.reason = R_NONE
    p.oif = nh.oif
    memset(p.nexthop, 0, 16)
    if nh.flags & NHF_GATEWAY:
        memcpy(p.nexthop, nh.gw, 4)
        fast_l2(c, p, nh, 4, nh.gw, -1)
    else:
        # the packet's destination (even when End.DX4 looked nh4 up, as
        # the kernel's rt_nexthop() for a route without gateway)
        memcpy(p.nexthop, ip4 + 16, 4)
        fast_l2(c, p, nh, 4, ip4 + 16,
                c.s6l_nb[d.encap] if s.action == S6_END_DX4 and rd32(ip4 + 16) == rd32(s.nh4) else -1)
    fast_route(c, p, rt4)
    s6l_count(c, d, s, 0, len0)
    return True


cdef bint fast_dx6(ctx_t* c, pkt_t* p, uint8_t* ip6, uint32_t rt, const fp_dst* d,
                   const fp_s6l* s) noexcept nogil:
    """End.DX6 / End.DT6 (table mode) of an IPv6 packet right after the outer
    header (no SRH): decap_and_validate, seg6_lookup_any_nexthop (through
    the rules, or in the table) and ip6_forward of the inner packet, when it
    leaves by a unicast route."""
    cdef uint8_t* inner = ip6 + IP6_HLEN
    cdef int32_t len0 = p.l3len
    cdef uint32_t rt2, nmiss = 0
    cdef const fp_dst* d2 = NULL
    cdef const fp_nh* nh = NULL
    cdef const fp_nh* pnh
    cdef const uint8_t* known = NULL
    if ip6[6] != NEXTHDR_IPV6 or len0 < 2 * IP6_HLEN or (inner[0] >> 4) != 6:
        return False
    # the inner source: ip6_forward() refuses multicast and loopback ones
    if inner[8] == 0xFF or in6_is_loopback(inner + 8):
        return False
    if s.action == S6_END_DX6:
        if not in6_is_zero(s.nh6):
            known = s.nh6
        rt2 = fib6_cached_as(c, known if known != NULL else inner + 24, inner + 8, p.iif, &nmiss, False)
    else:
        if s.slot6 < 0 or <uint32_t>s.slot6 >= c.nlpm6:
            return False
        rt2 = table_route(c, lpm6_cached(c, s.slot6, inner + 24), DST_IP6_NULL)
    pnh = plain_nh(c, rt2)
    if pnh == NULL:
        d2 = &c.dsts[rt2]
        if d2.type != RTN_UNICAST or d2.encap_type != ENCAP_NONE or (d2.flags & DSTF_DEAD):
            return False
    # decapsulated (undone below if the general path must take the packet)
    p.l3 += IP6_HLEN
    p.l3len -= IP6_HLEN
    nh = fast_via6(c, p, inner, pnh) if pnh != NULL else fast_nexthop6(c, p, inner, d2)
    if nh != NULL and c.refmode != MODE_NOREF:
        if dst_hold_pkt(c, p, rt2):
            if s.action == S6_END_DX6:
                null_hold_put(c, nmiss)
        else:
            nh = NULL
    if nh == NULL:
        p.l3 -= IP6_HLEN
        p.l3len = len0
        return False
    dst_use_route(c, rt)
    use_later(c, p, rt2)
    fast_out6(c, p, inner, nh, known, c.s6l_nb[d.encap] if known != NULL else -1)
    fast_route(c, p, rt2)
    s6l_count(c, d, s, 0, len0)
    return True


cdef void prelookup(ctx_t* c, const uint8_t* row, int32_t start, int32_t length, uint32_t iif,
                    pre_t* e) noexcept nogil:
    """The route lookups the fast path will make for a packet, made ahead
    for a chunk of packets at a time in a short loop (as rte_lpm6's bulk
    lookup, or VPP's dual/quad loops), so that the memory accesses of
    several packets' lookups overlap instead of following one another;
    the entries they lead to are prefetched.  Lookups change nothing but
    the route cache, and nothing changes the packets or the tables before
    the fast path reaches them; it uses a result only for the same key at
    the same offset, and looks up itself otherwise."""
    cdef const uint8_t* ip6
    cdef const uint8_t* srh
    cdef int32_t l2, l3len
    cdef uint32_t sl
    cdef const fp_dst* d
    cdef const fp_s6l* s
    e.k1 = -1
    e.k2 = -1
    l2 = fast_frame6(c, row, start, length)
    if l2 < 0:
        return
    ip6 = row + start + l2
    l3len = length - l2
    if (ip6[0] >> 4) != 6 or ip6[24] == 0xFF:
        return
    e.k1 = start + l2 + 24
    if c.last_gen == c.rcache_gen and eq16(ip6 + 24, c.last_da):
        # the last SID's packet's (fast_path's shortcut)
        e.rt1 = c.last_rt
        e.m1 = c.last_nmiss
    else:
        e.rt1 = fib6_cached_as(c, ip6 + 24, ip6 + 8, iif, &e.m1, False)
    if plain_nh(c, e.rt1) != NULL:
        prefetch_route(c, e.rt1)          # (a route forwarded by: nothing more ahead)
        return
    d = &c.dsts[e.rt1]
    if d.type != RTN_UNICAST:
        return
    if d.encap_type == ENCAP_NONE:
        if e.rt1 < c.npcpu:
            fp_prefetch(&c.pcpu[e.rt1])
        return
    if d.encap_type != ENCAP_SEG6LOCAL or d.encap >= c.ns6l:
        return
    s = &c.s6l[d.encap]
    if s.flavors or not (s.action == S6_END or (s.action == S6_END_X and s.oif == 0)):
        return
    e.saddr = ip6 + 8
    if s.action == S6_END_X:
        e.k2 = -2
        e.key2 = s.nh6
    else:
        srh = ip6 + IP6_HLEN
        if ip6[6] != NEXTHDR_ROUTING or l3len < IP6_HLEN + 8 or srh[2] != 4:
            return
        sl = srh[3]
        if sl == 0 or sl > <uint32_t>srh[4] + 1 or IP6_HLEN + 8 + (<int32_t>sl << 4) > l3len:
            return
        e.k2 = start + l2 + IP6_HLEN + 8 + <int32_t>((sl - 1) << 4)
        e.key2 = srh + 8 + ((sl - 1) << 4)


cdef inline void prefetch_route(const ctx_t* c, uint32_t rt) noexcept nogil:
    """The lines the fast path will touch for route ``rt``.  In noref mode
    with lazy statistics only its fast-path word: most routes are plain
    (the entry then stays unread, and use_flush prefetches the statistics'
    lines); an entry without a word is read when it is reached."""
    if c.refmode == MODE_NOREF and c.use_mode == USE_LAZY:
        fp_prefetch(&c.dfast[rt])
        return
    fp_prefetch(&c.dsts[rt])
    if rt < c.npcpu:
        fp_prefetch(&c.pcpu[rt])


cdef void pre_second(ctx_t* c, pre_t* pre, int n, const uint32_t* iif) noexcept nogil:
    """The second lookups of a chunk (End's next segment, End.X's nexthop):
    route cache first, then the misses together (fib6_walk_bulk), and the
    entries found prefetched for the fast path."""
    cdef const uint8_t* keys[PRE_CHUNK]
    cdef int idx[PRE_CHUNK]
    cdef uint32_t rts[PRE_CHUNK]
    cdef uint32_t nms[PRE_CHUNK]
    cdef int j, m = 0, asked = 0
    cdef uint32_t v, rt
    # (the bulk walk, like the cache, needs rules that look at the
    # destination only: without the cache, each packet walks the rules)
    cdef bint bypass = c.rcache_on and c.pre_bypass and (c.ahead_chunks & 15) != 0
    for j in range(n):
        if pre[j].k2 == -1:
            continue
        asked += 1
        if not c.rcache_on:
            c.rcache_misses += 1
            pre[j].rt2 = fib6_walk(c, pre[j].key2, pre[j].saddr, iif[j], &pre[j].m2, NULL)
        elif not bypass and rcache_get(c, rcache_bucket(c, pre[j].key2), pre[j].key2, &v):
            pre[j].rt2 = v & 0xFFFFFF
            pre[j].m2 = v >> 24
        else:
            keys[m] = pre[j].key2
            idx[m] = j
            m += 1
            continue
        prefetch_route(c, pre[j].rt2)
    # nearly every destination new (random traffic past the cache's size):
    # the next chunks skip the cache, probes and fills alike, looking again
    # one chunk in sixteen
    if not bypass:
        c.pre_bypass = asked >= 16 and m * 8 >= asked * 7
    if m == 0:
        return
    c.rcache_misses += <uint64_t>m
    fib6_walk_bulk(c, keys, m, rts, nms)
    for j in range(m):
        rt = rts[j]
        pre[idx[j]].rt2 = rt
        pre[idx[j]].m2 = nms[j]
        if not bypass:
            rcache_put(c, rcache_bucket(c, keys[j]), keys[j], rt, nms[j])
        prefetch_route(c, rt)


cdef int fast_path(ctx_t* c, pkt_t* p) noexcept nogil:
    """process_path() for a frame the fast path can take (see above): 1 when
    it took it to the end; 2 when it took it through the receive checks and
    the route lookup and the general path did the rest from the route on
    (other behaviours, flavors, TLVs, headends, errors: the steps before
    are the same); 0 when the general path must run from the start (the
    packet, the tables and every counter are as they were)."""
    cdef uint8_t* ip6
    cdef int32_t l2len
    cdef uint32_t plen, rt, nmiss
    cdef const fp_dev* idev
    cdef const fp_dst* d
    cdef const fp_s6l* s
    cdef const fp_nh* nh
    l2len = fast_frame6(c, p.row, p.start, p.length)
    if l2len < 0:
        return 0
    p.has_vlan = l2len == 18
    if p.has_vlan:
        p.vlan_tci = rd16(p.row + p.start + 14)
    p.l2len = <uint16_t>l2len
    p.l3 = p.start + l2len
    p.l3len = p.length - l2len
    ip6 = p.row + p.l3
    idev = dev_get(c, p.iif)
    if idev == NULL or not (idev.flags & DEVF_UP) or (ip6[0] >> 4) != 6:
        return 0
    # ip6_rcv_core(): what it refuses, and hop-by-hop options, are the
    # general path's; so are multicast destinations
    if ip6[8] == 0xFF or ip6[24] == 0xFF or ip6[6] == NEXTHDR_HOP:
        return 0
    if (ip6[8] == 0 and in6_is_loopback(ip6 + 8)) or (ip6[24] == 0 and in6_is_loopback(ip6 + 24)):
        return 0
    plen = rd16(ip6 + 4)
    if plen == 0 or plen + IP6_HLEN > <uint32_t>p.l3len:
        return 0
    p.l3len = plen + IP6_HLEN               # pskb_trim_rcsum
    p.family = 6
    if p.pre != NULL and p.pre.k1 == p.l3 + 24:
        rt = p.pre.rt1
        nmiss = p.pre.m1
    elif c.last_gen == c.rcache_gen and eq16(ip6 + 24, c.last_da):
        # the same SID as the last SID's packet (most of an SRv6 endpoint's
        # traffic is to its own few SIDs): the cache's answer, without the
        # probe
        p.pre = NULL
        rt = c.last_rt
        nmiss = c.last_nmiss
    else:
        p.pre = NULL
        rt = fib6_cached_as(c, ip6 + 24, ip6 + 8, p.iif, &nmiss, False)
        if c.rcache_on and c.dsts[rt].encap_type == ENCAP_SEG6LOCAL:
            memcpy(c.last_da, ip6 + 24, 16)
            c.last_rt = rt
            c.last_nmiss = nmiss
            c.last_gen = c.rcache_gen
    nh = plain_nh(c, rt)
    if nh != NULL:
        # (forwarded by a route with a fast-path word: its entry unread)
        nh = fast_via6(c, p, ip6, nh)
        if nh != NULL:
            use_later(c, p, rt)
            fast_out6(c, p, ip6, nh, NULL, -1)
            fast_route(c, p, rt)
            return 1
    else:
        d = &c.dsts[rt]
        if d.type == RTN_UNICAST and not (d.flags & DSTF_DEAD):
            if d.encap_type == ENCAP_NONE:
                nh = fast_nexthop6(c, p, ip6, d)
                if nh != NULL:
                    dst_use_route(c, rt)
                    fast_out6(c, p, ip6, nh, NULL, -1)
                    fast_route(c, p, rt)
                    return 1
            elif d.encap_type == ENCAP_SEG6LOCAL and d.encap < c.ns6l:
                s = &c.s6l[d.encap]
                if s.flavors == 0 and (s.action == S6_END or (s.action == S6_END_X and s.oif == 0)):
                    if fast_end(c, p, idev, ip6, rt, d, s):
                        return 1
                elif (s.action == S6_END_DX4 or s.action == S6_END_DT4) and fast_dx4(c, p, idev, ip6, rt, d, s):
                    return 1
                elif (s.action == S6_END_DX6 or s.action == S6_END_DT6) and fast_dx6(c, p, ip6, rt, d, s):
                    return 1
    # Anything else (an error due, another behaviour, a headend, a local
    # route...) takes the general path from the route on: ip6_input()'s
    # checks before it are those above (the fast path's are stricter), and
    # its lookup gave this route.
    pkt_reset(p)
    dst_use(c, rt)
    ip6_input_route(c, p, rt)
    l2_egress(c, p)
    return 2


cdef void process_one(ctx_t* c, pkt_t* p, bint fast) noexcept nogil:
    """The packet's path (the fast one when it can take the packet, and
    ``fast``: on, and not tracing), then the release of the reference it
    holds (the skb leaving: transmitted or freed)."""
    p.held = -1
    p.chk_dst = 0xFFFFFFFFu
    cdef int taken = fast_path(c, p) if fast else 0
    if taken == 0:
        process_path(c, p)
    elif taken == 1:
        c.fast_packets += 1
    if p.held >= 0:
        dst_release_pkt(c, p)
    if c.check_gen and p.chk_dst < c.ndst and c.dsts[p.chk_dst].gen != p.chk_gen:
        c.gen_violations += 1


cdef inline void pkt_reset(pkt_t* p) noexcept nogil:
    """A packet's state before its path starts."""
    p.verdict = V_PENDING
    p.reason = R_NONE
    p.oif = 0
    p.dst = 0xFFFFFFFFu
    p.has_known_nh = False
    p.l2_done = False
    p.depth = 0
    p.held = -1
    p.chk_dst = 0xFFFFFFFFu
    p.nencap = 0
    memset(p.nexthop, 0, 16)


cdef inline void l2_egress(const ctx_t* c, pkt_t* p) noexcept nogil:
    """The frame of a packet that leaves (forwarded, or an ICMP error)."""
    if p.verdict == V_FORWARD or p.verdict == V_ICMP:
        if p.l2_done:
            p.l2len = 0
        elif c.linktype == LINK_ETHERNET:
            l2_build(c, p)
        else:
            p.l2len = 0
        if p.verdict == V_FORWARD or p.verdict == V_ICMP:
            p.start = p.l3 - p.l2len
            p.length = p.l3len + p.l2len


cdef void process_path(ctx_t* c, pkt_t* p) noexcept nogil:
    cdef const fp_dev* idev
    pkt_reset(p)
    if p.start < 0 or p.length < 0 or p.start + p.length > c.slot:
        set_drop(p, R_TRUNCATED)
        return
    if not l2_parse(c, p):
        return
    p.l3 = p.start + p.l2len
    p.l3len = p.length - p.l2len
    idev = dev_get(c, p.iif)
    if idev == NULL or not (idev.flags & DEVF_UP):
        set_drop(p, R_INTERFACE_DOWN)
        return
    if p.l3len < 1:
        set_drop(p, R_TRUNCATED)
        return
    tr(c, T_INPUT, p.family, p.l3len, NULL)
    if p.family == 6:
        if (p.row[p.l3] >> 4) != 6:
            set_drop(p, R_NOT_IP)
            return
        ip6_input(c, p)
    else:
        if (p.row[p.l3] >> 4) != 4:
            set_drop(p, R_NOT_IP)
            return
        ip4_input(c, p)
    l2_egress(c, p)


cdef struct bat_t:                # a batch's arrays, as raw pointers
    Py_ssize_t n
    int32_t slot
    int linktype
    uint8_t* base
    int32_t* st
    int32_t* ln
    uint16_t* l2
    uint32_t* ii
    uint32_t* oo
    uint8_t* nh
    uint8_t* vd
    uint16_t* rs
    uint32_t* ds
    int64_t* tsp


cdef inline int64_t ts_ns(const timespec* t) noexcept nogil:
    return <int64_t>t.tv_sec * 1000000000 + t.tv_nsec


cdef inline uint32_t jiffies_of(const timespec* t) noexcept nogil:
    """The kernel's tick at HZ=250 (4 ms), the clock of lazy __use flushes."""
    return <uint32_t>(<uint64_t>t.tv_sec * 250 + <uint64_t>t.tv_nsec // 4000000)


cdef inline void set_jiffies(ctx_t* c) noexcept nogil:
    cdef timespec now
    clock_gettime(CLOCK_MONOTONIC, &now)
    c.jiffies = jiffies_of(&now)


cdef Py_ssize_t run_batch(ctx_t* c, uint64_t* reasons, bat_t* b) noexcept nogil:
    """Every packet of the batch through process_one, results written back
    to the metadata arrays.  Returns the packets left for the IPv4
    fragmenter, or -1 when the debug build could not allocate."""
    cdef Py_ssize_t i, j, nfrag = 0
    cdef pkt_t p
    cdef int32_t slot = b.slot, exact
    cdef uint8_t* buf
    cdef pre_t pre[PRE_CHUNK]
    cdef bint ahead = False
    cdef pre_t* pnext = NULL              # the next packet's lookups ahead, or NULL
    cdef uint64_t misses = c.rcache_misses
    cdef Py_ssize_t chunk = 0             # first packet of the current chunk
    c.slot = slot
    c.linktype = b.linktype
    c.batch_ts = b.tsp
    cdef bint use_fast = c.fast and c.trace == NULL   # (neither changes during a batch)
    for i in range(b.n):
        if i % PRE_CHUNK == 0:
            use_flush(c)
            # Lookups ahead pay when they miss the route cache (random
            # destinations, large tables): their memory accesses then
            # overlap.  When the cache holds the destinations they only
            # add work, so a chunk looks ahead only if the last one missed
            # (one miss in eight packets or more).
            if i > 0:
                c.ahead = (c.rcache_misses - misses) * 8 >= <uint64_t>(i - chunk)
            misses = c.rcache_misses
            chunk = i
            ahead = c.ahead and use_fast
            pnext = pre if ahead else NULL
            if ahead:
                c.ahead_chunks += 1
                for j in range(i, min(i + PRE_CHUNK, b.n)):
                    prelookup(c, b.base + j * slot, b.st[j], b.ln[j], b.ii[j], &pre[j - i])
                pre_second(c, pre, <int>(min(i + PRE_CHUNK, b.n) - i), b.ii + i)
        p.pre = pnext
        if pnext != NULL:
            pnext += 1
        p.row = b.base + i * slot
        p.index = i
        p.start = b.st[i]
        p.length = b.ln[i]
        p.iif = b.ii[i]
        if FP_DEBUG_BUILD and p.start >= 0 and p.length >= 0 and p.start + p.length <= slot:
            # Debug build: run the packet in a heap buffer that ends
            # exactly where the packet ends, so that any read past
            # its last byte hits malloc's redzone (built with
            # FASTPATH_ASAN=1, AddressSanitizer reports it).
            exact = p.start + p.length
            buf = <uint8_t*>malloc(exact if exact > 0 else 1)
            if buf == NULL:
                use_flush(c)
                return -1
            memcpy(buf, p.row, exact)
            p.row = buf
            c.slot = exact
            process_one(c, &p, use_fast)
            c.slot = slot
            memcpy(b.base + i * slot, buf, exact)
            free(buf)
        else:
            process_one(c, &p, use_fast)
        if not use_fast:                  # (tracing turns the fast path off)
            tr(c, T_VERDICT, p.verdict, p.reason, NULL)
        b.st[i] = p.start
        b.ln[i] = p.length
        b.l2[i] = p.l2len
        b.oo[i] = p.oif
        memcpy(b.nh + 16 * i, p.nexthop, 16)
        b.vd[i] = p.verdict
        b.rs[i] = p.reason
        b.ds[i] = p.dst
        if p.reason < R_COUNT:
            reasons[p.reason] += 1
        if p.reason == R_FRAGMENTED:
            nfrag += 1
    use_flush(c)
    if b.n > 0:
        c.ahead = (c.rcache_misses - misses) * 8 >= <uint64_t>(b.n - chunk)
    c.batch_ts = NULL
    return nfrag


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
             uint32_t icmp4_ratemask=0x1818, int icmp_msgs_per_sec=0, int icmp_msgs_burst=50,
             int mp_policy6=0, int mp_policy4=0, bint v4_full_rpcheck=False, dfast=None,
             throw_slots6=None, throw_slots4=None):
        """Point the kernel at a new set of tables (all numpy arrays; records
        as uint8 arrays of the struct sizes in fp.pxd).  ``lpm6``/``lpm4``:
        lists of (tbl24, groups) array pairs, indexed by the rules' slots.
        ``dfast``: the routes' fast-path words (uint32, at least one per
        entry of ``dsts``; Tables.dfast), or None for none (every route
        entry is then read).  ``throw_slots6``/``throw_slots4``: the slots
        of the tables that hold throw routes (a lookup elsewhere does not
        read the entry it finds to tell), or None for all of them."""
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
        for k in range(len(s6l)):
            if s6l[k, 20:24].view(np.uint32)[0] + s6l[k, 24:26].view(np.uint16)[0] > len(srh_blob):
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
        self.c.rcache_gen += 1
        if self.c.rcache_gen == 0:
            memset(self.rcache_buf, 0, sizeof(self.rcache_buf))
            memset(self.rcache4_buf, 0, sizeof(self.rcache4_buf))
            memset(self.tcache_buf, 0, sizeof(self.tcache_buf))
            self.c.last_gen = 0
            self.c.rcache_gen = 1
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
        b.st = <int32_t*>cnp.PyArray_DATA(start)
        b.ln = <int32_t*>cnp.PyArray_DATA(length)
        b.l2 = <uint16_t*>cnp.PyArray_DATA(l2len)
        b.ii = <uint32_t*>cnp.PyArray_DATA(iif)
        b.oo = <uint32_t*>cnp.PyArray_DATA(oif)
        b.nh = <uint8_t*>cnp.PyArray_DATA(nexthop)
        b.vd = <uint8_t*>cnp.PyArray_DATA(verdict)
        b.rs = <uint16_t*>cnp.PyArray_DATA(reason)
        b.ds = <uint32_t*>cnp.PyArray_DATA(dst)
        b.tsp = <int64_t*>cnp.PyArray_DATA(timestamp_ns) if (timestamp_ns is not None and n) else NULL
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
            while True:
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
                        if q != NULL:
                            if fp_atomic_load64(&q[stop_index]) or fp_atomic_load64(&q[seq_index]) != seq:
                                early = True
                                break
                            fp_atomic_store64(&q[qs_index], fp_atomic_load64(&q[token_index]))
                        continue
                    b.n = occ if occ < full_n else full_n
                    occ -= b.n
                src = pos
                for r in range(b.n):
                    memcpy(b.base + r * b.slot, sd + src * sslot, used)
                    b.st[r] = ss[src]
                    b.ln[r] = sl[src]
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
                    if fp_atomic_load64(&q[stop_index]) or fp_atomic_load64(&q[seq_index]) != seq:
                        early = True
                        break
                    fp_atomic_store64(&q[qs_index], fp_atomic_load64(&q[token_index]))
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
            "vlan_tci": <char*>&dv.vlan_tci - b}
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
    return {"dst": dst, "nh": nhs, "dev": devs, "addr": addrs, "rule": rules, "neigh": neighs,
            "s6l": s6l, "hmac_key": hmac_key}


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

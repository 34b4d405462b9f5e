# cython: language_level=3
"""Shared C-level declarations of the fast path: verdicts, drop reasons, the
fixed-size records of the shared tables, and small byte helpers.

``cimport fp`` from any kernel.  Only constants, structs and ``cdef inline``
functions live here (no runtime import needed).

The record layouts below are mirrored by numpy structured dtypes in
``fastpath/tables.py`` (same field offsets, same itemsize); a test compares
``sizeof`` here with the dtypes there.  Route entries are exactly one cache
line each so that the shared ones (null entry, input routes) and per-worker
ones never share a line (README, "The multi-process dataplane": the
route-cache modes and what the kernel shares).
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int8_t, int16_t, int32_t, int64_t

# --- verdicts (fastpath/reasons.py VERDICTS) -------------------------------
cdef enum:
    V_PENDING = 0
    V_FORWARD = 1
    V_LOCAL = 2
    V_DROP = 3
    V_ICMP = 4

# --- drop reasons (fastpath/reasons.py REASONS, same order) -----------------
cdef enum:
    R_NONE = 0
    R_NOT_IP = 1
    R_TRUNCATED = 2
    R_IP_HDR_INVALID = 3
    R_IP_CSUM_ERROR = 4
    R_SADDR_INVALID = 5
    R_DADDR_INVALID = 6
    R_NO_ROUTE = 7
    R_BLACKHOLE = 8
    R_UNREACHABLE = 9
    R_PROHIBIT = 10
    R_HOP_LIMIT_EXCEEDED = 11
    R_PKT_TOO_BIG = 12
    R_FORWARDING_DISABLED = 13
    R_NOT_SUPPORTED = 14
    R_MULTICAST = 15
    R_ICMP_SUPPRESSED = 16
    R_SOURCE_LINK_LOCAL = 17
    R_INTERFACE_DOWN = 18
    R_EXTHDR_INVALID = 19
    R_SRH_INVALID = 20
    R_SRH_MISSING = 21
    R_SRH_SL_ZERO = 22
    R_ROUTE_DEAD = 23
    R_NO_HEADROOM = 24
    R_HBH_OPTION = 25
    R_FRAGMENTED = 26
    R_SRH_SL_NONZERO = 27
    R_HMAC_INVALID = 28
    R_INNER_MISSING = 29
    R_SRH_POP_REFUSED = 30
    R_NOT_ETHERNET = 31
    R_NO_SOURCE_ADDRESS = 32
    R_SEG6_LOOP = 33
    R_SEG6_DISABLED = 34
    R_NO_VRF = 35
    R_SOURCE_ROUTE = 36
    R_COUNT = 37

# --- route types (uapi RTN_*) ----------------------------------------------
cdef enum:
    RTN_UNSPEC = 0
    RTN_UNICAST = 1
    RTN_LOCAL = 2
    RTN_BROADCAST = 3
    RTN_ANYCAST = 4
    RTN_MULTICAST = 5
    RTN_BLACKHOLE = 6
    RTN_UNREACHABLE = 7
    RTN_PROHIBIT = 8
    RTN_THROW = 9

# --- rule actions (uapi FR_ACT_*) ------------------------------------------
cdef enum:
    FR_ACT_TO_TBL = 1
    FR_ACT_BLACKHOLE = 6
    FR_ACT_UNREACHABLE = 7
    FR_ACT_PROHIBIT = 8

# --- reserved route entries (shared by every worker, as in the kernel) ------
cdef enum:
    DST_IP6_NULL = 0        # ip6_null_entry: ENETUNREACH
    DST_IP6_BLACKHOLE = 1   # ip6_blk_hole_entry (rule action)
    DST_IP6_PROHIBIT = 2    # ip6_prohibit_entry (rule action)
    DST_IP4_NOROUTE = 3     # ENETUNREACH
    DST_IP4_BLACKHOLE = 4
    DST_IP4_PROHIBIT = 5
    DST_IP4_UNREACHABLE = 6  # EHOSTUNREACH (unreachable rule, forwarding off)
    DST_FIRST_ROUTE = 8

# dst.flags
cdef enum:
    DSTF_DEAD = 1
    DSTF_GATEWAY = 2
    DSTF_SHARED = 4

# dev.flags
cdef enum:
    DEVF_UP = 1
    DEVF_FWD6 = 2
    DEVF_FWD4 = 4
    DEVF_SEG6 = 8
    DEVF_LOOPBACK = 16
    DEVF_ETHER = 32              # an Ethernet device (End.DX2 may send on it)

# nh.flags
cdef enum:
    NHF_GATEWAY = 1
    NHF_DEAD = 2

# dst.encap_type
cdef enum:
    ENCAP_NONE = 0
    ENCAP_SEG6LOCAL = 1
    ENCAP_SEG6 = 2

# linktypes of a batch
cdef enum:
    LINK_RAW = 0
    LINK_ETHERNET = 1

ctypedef struct fp_dst:          # 64 bytes, one cache line
    int32_t refcnt               # 0
    uint32_t gen                 # 4   generation tag (bumped on reuse)
    uint8_t type                 # 8   RTN_*
    uint8_t family               # 9   4 or 6
    uint8_t flags                # 10  DSTF_*
    uint8_t nh_count             # 11
    uint32_t nh_first            # 12  index into the nexthop array
    uint32_t table               # 16
    uint32_t encap               # 20  index into the encap parameter arrays
    uint8_t encap_type           # 24  0 none, 1 seg6local, 2 seg6
    uint8_t hoplimit             # 25  route hoplimit metric (0: device's)
    uint8_t plen                 # 26  prefix length (ICMPv6 rate limit scaling)
    uint8_t pad0                 # 27
    uint32_t mtu                 # 28  route mtu metric (0: device's)
    uint32_t metric              # 32
    uint8_t prefsrc[16]          # 36  preferred source (IPv4 in bytes 0..3), zero = none
    uint32_t lastuse             # 52  dst.lastuse (statistics), in ticks (jiffies)
    uint64_t use                 # 56  dst.__use (statistics)

ctypedef struct fp_pcpu:         # 16 bytes: one worker's copy of a route (rt6_get_pcpu_route)
    int32_t refcnt               # 0   references this worker's packets hold (refcount mode)
    uint32_t lastuse             # 4   tick of the last flush of ``use`` to the shared route
    uint64_t use                 # 8   lookups not yet flushed (lazy __use, seeds/003)

# route-cache modes (Router/Dataplane ``mode``, ``use_stats``)
cdef enum:
    MODE_NOREF = 0               # no references; QSBR protects the entries
    MODE_REFCOUNT = 1            # seg6local lookups hold a reference (atomic add/sub)
    MODE_REFCOUNT_PRIVATE = 2    # the same atomics, all on the worker's own lines
                                 # (attribution: the cost of atomics without contention)
    USE_SHARED = 0               # __use/lastuse written on the shared route every lookup
    USE_LAZY = 1                 # counted per worker, flushed once per tick


cdef extern from "fp_atomic.h":
    int32_t fp_atomic_fetch_add32(int32_t* p, int32_t v) noexcept nogil
    int32_t fp_atomic_load32(const int32_t* p) noexcept nogil
    uint64_t fp_atomic_load64(const uint64_t* p) noexcept nogil
    void fp_atomic_store64(uint64_t* p, uint64_t v) noexcept nogil
    uint64_t fp_atomic_fetch_add64(uint64_t* p, uint64_t v) noexcept nogil
    void fp_atomic_fence() noexcept nogil


ctypedef struct fp_nh:           # 32 bytes
    uint8_t gw[16]               # 0   IPv6 gateway, or IPv4 in bytes 0..3
    uint32_t oif                 # 16
    int32_t upper_bound          # 20  hash-threshold bound (fib_rebalance)
    uint32_t weight              # 24
    uint8_t flags                # 28  NHF_*
    uint8_t family               # 29  family of gw
    uint16_t pad                 # 30

ctypedef struct fp_dev:          # 32 bytes
    uint32_t ifindex             # 0
    uint32_t mtu                 # 4
    uint8_t flags                # 8   DEVF_*
    int8_t seg6_require_hmac     # 9
    uint8_t hop_limit            # 10
    uint8_t vlan_set             # 11  1: egress frames carry vlan_tci
    uint8_t mac[6]               # 12
    uint16_t vlan_tci            # 18
    uint32_t l3mdev              # 20  ifindex of its VRF (itself for a VRF device), 0: none
    uint32_t l3table             # 24  the VRF's table (l3mdev_fib_table)
    int16_t l3slot6              # 28  LPM slot of that table (-1: empty / none)
    int16_t l3slot4              # 30

ctypedef struct fp_addr:         # 32 bytes: one local address
    uint8_t addr[16]             # 0   IPv4 in bytes 0..3
    uint32_t ifindex             # 16
    uint8_t plen                 # 20
    uint8_t family               # 21
    uint8_t scope                # 22  IPv6 address scope (2 link, 5 site, 14 global)
    uint8_t label                # 23  RFC 6724 policy label
    uint8_t pad[8]               # 24

ctypedef struct fp_rule:         # 64 bytes
    uint32_t pref                # 0
    uint32_t table               # 4
    uint8_t action               # 8   FR_ACT_*
    uint8_t src_len              # 9
    uint8_t dst_len              # 10
    uint8_t has_iif              # 11
    uint32_t iif                 # 12
    uint8_t src[16]              # 16
    uint8_t dst[16]              # 32
    int32_t slot                 # 48  index of the table's LPM (-1: empty table)
    uint8_t pad[12]              # 52

ctypedef struct fp_strict:       # 32 bytes: a route a strict-interface IPv6 lookup may return
    uint8_t prefix[16]           # 0   (rt6_need_strict destinations: link-local, multicast,
    uint32_t dst                 # 16   loopback; RT6_LOOKUP_F_IFACE): the route entry
    uint32_t oif                 # 20  one of the route's devices (a row per device)
    int32_t slot                 # 24  LPM slot of the route's table
    uint8_t plen                 # 28
    uint8_t pad[3]               # 29

ctypedef struct fp_neigh:        # 32 bytes
    uint8_t addr[16]             # 0   IPv4 in bytes 0..3
    uint32_t ifindex             # 16
    uint8_t family               # 20
    uint8_t mac[6]               # 21
    uint8_t pad[5]               # 27

ctypedef struct fp_s6l:          # 64 bytes: one seg6local route's parameters
    uint8_t action               # 0   SEG6_LOCAL_ACTION_* (uapi numbers)
    uint8_t flavors              # 1   FLV_* bits
    uint8_t lblen                # 2   NEXT-C-SID locator-block length (bits)
    uint8_t nflen                # 3   NEXT-C-SID node-function length (bits)
    uint32_t oif                 # 4   ifindex (0: none)
    int32_t slot6                # 8   LPM slot of table/vrftable, IPv6 (-1: no such table)
    int32_t slot4                # 12  LPM slot of vrftable, IPv4 (-1: no such table)
    uint32_t table               # 16  table / vrftable id
    uint32_t srh_off             # 20  the SRH template of End.B6*, in the SRH blob
    uint16_t srh_len             # 24
    uint8_t count                # 26  per-route counters on
    uint8_t mode                 # 27  S6_HEADEND records: seg6 encap mode (SEG6_IPTUN_MODE_*)
    uint8_t nh6[16]              # 28  (S6_HEADEND: the outer destination, the first SID)
    uint8_t nh4[4]               # 44
    uint8_t tunsrc[16]           # 48  S6_HEADEND: the route's tunsrc (zero: none)

# fp_s6l.flavors
cdef enum:
    FLV_PSP = 1
    FLV_USP = 2
    FLV_USD = 4
    FLV_NEXT_CSID = 8

# seg6local actions (uapi SEG6_LOCAL_ACTION_*)
cdef enum:
    S6_END = 1
    S6_END_X = 2
    S6_END_T = 3
    S6_END_DX2 = 4
    S6_END_DX6 = 5
    S6_END_DX4 = 6
    S6_END_DT6 = 7
    S6_END_DT4 = 8
    S6_END_B6 = 9
    S6_END_B6_ENCAP = 10
    S6_END_DT46 = 16
    # not a seg6local action: an `encap seg6` route (headend), whose record
    # shares the seg6local parameter array (dst.encap indexes it)
    S6_HEADEND = 200

# seg6 encap modes (uapi SEG6_IPTUN_MODE_*)
cdef enum:
    SEG6_MODE_INLINE = 0
    SEG6_MODE_ENCAP = 1
    SEG6_MODE_L2ENCAP = 2
    SEG6_MODE_ENCAP_RED = 3
    SEG6_MODE_L2ENCAP_RED = 4

ctypedef struct fp_hmac_key:     # 136 bytes: one `ip sr hmac set` key
    uint32_t keyid               # 0
    uint8_t algo                 # 4   SEG6_HMAC_ALGO_*: 1 sha1, 2 sha256
    uint8_t slen                 # 5   secret length
    uint8_t pad[2]               # 6
    uint8_t secret[64]           # 8
    uint32_t istate[8]           # 72  hash state after key ^ ipad (filled by Datapath.load)
    uint32_t ostate[8]           # 104 hash state after key ^ opad

ctypedef struct fp_lpm:          # one table's LPM arrays (process-local pointers)
    const uint32_t* tbl24
    const uint32_t* groups
    bint throws                  # the table holds throw routes: what a lookup finds may
                                 # be one (read its entry); else it never is


# --- byte helpers -------------------------------------------------------------
cdef inline uint16_t rd16(const uint8_t* p) noexcept nogil:
    return (<uint16_t>p[0] << 8) | p[1]

cdef inline uint32_t rd32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]

cdef inline void wr16(uint8_t* p, uint16_t v) noexcept nogil:
    p[0] = v >> 8
    p[1] = v & 0xFF

cdef inline void wr32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF

cdef inline uint32_t csum_add(uint32_t s, const uint8_t* p, Py_ssize_t n) noexcept nogil:
    """Add bytes to a ones' complement sum (RFC 1071), unfolded."""
    cdef Py_ssize_t i = 0
    while i + 1 < n:
        s += (<uint32_t>p[i] << 8) | p[i + 1]
        i += 2
    if i < n:
        s += <uint32_t>p[i] << 8
    return s

cdef inline uint16_t csum_fold(uint32_t s) noexcept nogil:
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return <uint16_t>(~s & 0xFFFF)

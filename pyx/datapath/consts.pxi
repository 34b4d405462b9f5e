# Constants: header sizes and protocol numbers (include/uapi/linux/in6.h,
# icmpv6.h, icmp.h), the datapath's limits and cache sizes -- typed C
# constants (enums), visible to every file that follows.

cdef enum:
    IP6_HLEN = 40
    IP4_HLEN = 20
    ICMP_HLEN = 8
    IPV6_MIN_MTU = 1280
    NEXTHDR_HOP = 0
    NEXTHDR_IPV6 = 41
    NEXTHDR_TCP = 6
    NEXTHDR_UDP = 17
    NEXTHDR_ROUTING = 43
    NEXTHDR_FRAGMENT = 44
    NEXTHDR_ESP = 50
    NEXTHDR_AUTH = 51
    NEXTHDR_ICMP6 = 58
    NEXTHDR_NONE = 59
    NEXTHDR_DEST = 60
    IPPROTO_ICMP = 1
    # seg6local behaviours a packet may go through in one pass (a SID list that
    # visits several of our own SIDs); the kernel recurses without a bound
    MAX_SEG6LOCAL_DEPTH = 64
    # nested headend encapsulations (a route whose first SID leads to a seg6
    # route again): lwtunnel_input() stops at the device recursion limit
    # (XMIT_RECURSION_LIMIT); observed: a route encapsulating towards itself
    # emits nothing
    MAX_HEADEND_DEPTH = 8
    # seg6_hmac_compute(): the HMAC text (22 bytes + 16 per segment) must fit
    # SEG6_HMAC_RING_SIZE
    SEG6_HMAC_RING_SIZE = 256
    SEG6_HMAC_FIELD_LEN = 32
    # headroom kept in front of headers the datapath prepends, for the Ethernet
    # header (with an 802.1Q tag) l2_build adds afterwards, so that it never has
    # to move the packet a second time
    L2_RESERVE = 22

# ICMPv6 types/codes (RFC 4443)
cdef enum:
    ICMP6_DEST_UNREACH = 1
    ICMP6_PKT_TOOBIG = 2
    ICMP6_TIME_EXCEED = 3
    ICMP6_PARAMPROB = 4
    ICMP6_NOROUTE = 0
    ICMP6_ADM_PROHIBITED = 1
    ICMP6_NOT_NEIGHBOUR = 2
    ICMP6_ADDR_UNREACH = 3
    ICMP6_POLICY_FAIL = 5
    ICMP6_REJECT_ROUTE = 6
    # ICMPv4
    ICMP_DEST_UNREACH = 3
    ICMP_TIME_EXCEEDED = 11
    ICMP_NET_UNREACH = 0
    ICMP_HOST_UNREACH = 1
    ICMP_FRAG_NEEDED = 4
    ICMP_PKT_FILTERED = 13


cdef enum:
    RCACHE_BITS = 10
    RCACHE_SIZE = 1024            # route cache entries (1 << RCACHE_BITS); 24 KiB, stays in L1/L2


cdef enum:
    RCACHE4_BITS = 9
    RCACHE4_SIZE = 512            # IPv4 route cache entries; 8 KiB


cdef enum:
    TCACHE_BITS = 10
    TCACHE_SIZE = 1024            # table lookup cache entries; 32 KiB


cdef enum:
    PEER_BITS = 12                # per-destination rate-limit state: 4096 entries


cdef enum:
    PRE_CHUNK = 64                # packets looked up ahead at a time
    USELOG = 2 * PRE_CHUNK        # use statistics a chunk may defer (use_later)


cdef enum:
    XRLIM_BURST_FACTOR = 6


cdef enum:
    IP4_LIMITED_BCAST = 0xFFFF    # ip4_route_martian: not a martian, delivered locally

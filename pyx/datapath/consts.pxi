# Constants: header sizes and protocol numbers (include/uapi/linux/in6.h,
# icmpv6.h, icmp.h), the datapath's limits and cache sizes.

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


DEF RCACHE_BITS = 10
DEF RCACHE_SIZE = 1024            # route cache entries (1 << RCACHE_BITS); 24 KiB, stays in L1/L2


DEF RCACHE4_BITS = 9
DEF RCACHE4_SIZE = 512            # IPv4 route cache entries; 8 KiB


DEF TCACHE_BITS = 10
DEF TCACHE_SIZE = 1024            # table lookup cache entries; 32 KiB


DEF PEER_BITS = 12                # per-destination rate-limit state: 4096 entries


DEF PRE_CHUNK = 64                # packets looked up ahead at a time
DEF USELOG = 2 * PRE_CHUNK        # use statistics a chunk may defer (use_later)


DEF XRLIM_BURST_FACTOR = 6


DEF IP4_LIMITED_BCAST = 0xFFFF    # ip4_route_martian: not a martian, delivered locally

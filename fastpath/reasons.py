"""Verdicts and drop reasons: the one table of them.

Every packet leaves ``Router.process`` with a verdict and, for ``drop`` and
``icmp``, a reason.  Reasons are named after the kernel's
``SKB_DROP_REASON_*`` (or the RFC 8986 / seg6local step) they mirror.  The
numeric values are shared with the compiled kernels: ``pyx/fp.pxd`` declares
the same enum and ``tests/test_reasons.py`` checks that both agree.
"""

VERDICTS = ("pending", "forward", "local", "drop", "icmp")

# (name, kernel counterpart, description).  Index = numeric value.
REASONS = (
    ("none", "", "not dropped"),
    ("not_ip", "SKB_DROP_REASON_UNHANDLED_PROTO", "not an IPv4/IPv6 packet (ethertype or version)"),
    ("truncated", "SKB_DROP_REASON_PKT_TOO_SMALL", "packet shorter than its headers or its length fields"),
    ("ip_hdr_invalid", "SKB_DROP_REASON_IP_INHDR", "malformed IP header (version, IHL, total length, options)"),
    ("ip_csum_error", "SKB_DROP_REASON_IP_CSUM", "IPv4 header checksum mismatch"),
    ("saddr_invalid", "SKB_DROP_REASON_IP_INADDRERRORS", "martian or forbidden source address"),
    ("daddr_invalid", "SKB_DROP_REASON_IP_INADDRERRORS", "martian or forbidden destination address"),
    ("no_route", "SKB_DROP_REASON_IP_INNOROUTES", "no route to the destination (ip6_null_entry / ENETUNREACH)"),
    ("blackhole", "SKB_DROP_REASON_NOT_SPECIFIED", "route or rule of type blackhole"),
    ("unreachable", "SKB_DROP_REASON_IP_INNOROUTES", "route or rule of type unreachable"),
    ("prohibit", "SKB_DROP_REASON_IP_INNOROUTES", "route or rule of type prohibit"),
    ("hop_limit_exceeded", "SKB_DROP_REASON_IP_INHDR", "hop limit / TTL would reach zero (Time Exceeded)"),
    ("pkt_too_big", "SKB_DROP_REASON_PKT_TOO_BIG", "larger than the egress MTU (Packet Too Big / Fragmentation Needed)"),
    ("forwarding_disabled", "SKB_DROP_REASON_IPV6DISABLED", "forwarding is disabled"),
    ("not_supported", "SKB_DROP_REASON_NOT_SPECIFIED", "a feature fastpath does not model (see README)"),
    ("multicast", "SKB_DROP_REASON_NOT_SPECIFIED", "multicast destination (no multicast routing)"),
    ("icmp_suppressed", "SKB_DROP_REASON_NOT_SPECIFIED", "an ICMP error was due but the rate limit suppressed it"),
    ("source_link_local", "SKB_DROP_REASON_NOT_SPECIFIED", "link-local source would be forwarded off-link"),
    ("interface_down", "SKB_DROP_REASON_DEV_READY", "ingress interface is down or unknown"),
    ("exthdr_invalid", "SKB_DROP_REASON_IP_INHDR", "malformed IPv6 extension header"),
    ("srh_invalid", "SKB_DROP_REASON_INVALID_PROTO", "SRH fails seg6_validate_srh"),
    ("srh_missing", "SKB_DROP_REASON_NOT_SPECIFIED", "seg6local End-family behaviour without an SRH"),
    ("srh_sl_zero", "SKB_DROP_REASON_NOT_SPECIFIED", "segments left is 0 where the behaviour needs a next segment"),
    ("route_dead", "SKB_DROP_REASON_NOT_SPECIFIED", "the route was being removed (noref mode)"),
    ("no_headroom", "SKB_DROP_REASON_NOMEM", "no room left in the packet's slot to add headers"),
    ("hbh_option", "SKB_DROP_REASON_IP_INHDR", "hop-by-hop option that asks to discard the packet"),
    # not a drop: a forwarded IPv4 packet larger than the MTU without DF,
    # cut into fragments after the kernel (ip_fragment) by Router.process
    ("fragmented", "", "forwarded as IPv4 fragments (counted, not dropped)"),
    ("srh_sl_nonzero", "SKB_DROP_REASON_NOT_SPECIFIED", "decapsulating behaviour with segments left > 0"),
    ("hmac_invalid", "SKB_DROP_REASON_NOT_SPECIFIED", "SRH HMAC missing (seg6_require_hmac=1), unknown key, or wrong"),
    ("inner_missing", "SKB_DROP_REASON_NOT_SPECIFIED", "no inner packet of the protocol the behaviour decapsulates"),
    ("srh_pop_refused", "SKB_DROP_REASON_NOT_SPECIFIED", "PSP/USP could not pop the SRH (seg6_pop_srh refuses)"),
    ("not_ethernet", "SKB_DROP_REASON_NOT_SPECIFIED", "End.DX2 egress device is missing or not Ethernet"),
    ("no_source_address", "SKB_DROP_REASON_NOT_SPECIFIED", "encapsulation needs a source address and none is configured"),
    ("seg6_loop", "", "more than 64 seg6local behaviours in a row for one packet (fastpath's bound)"),
    ("seg6_disabled", "SKB_DROP_REASON_NOT_SPECIFIED", "SRH for this node but seg6_enabled is off (all or the interface)"),
    ("no_vrf", "SKB_DROP_REASON_NOT_SPECIFIED", "End.DT4/DT6/DT46 vrftable: no VRF device bound to the table (end_dt_get_vrf_rcu)"),
    ("source_route", "SKB_DROP_REASON_NOT_SPECIFIED",
     "IPv4 source route option (LSRR/SSRR) while accept_source_route is off (the kernel's default)"),
)

REASON_NAMES = tuple(r[0] for r in REASONS)
REASON_IDS = {name: i for i, name in enumerate(REASON_NAMES)}
VERDICT_IDS = {name: i for i, name in enumerate(VERDICTS)}

"""ICMP and ICMPv6 echo replies for the router's own addresses
(net/ipv4/icmp.c icmp_echo -> icmp_reply, net/ipv6/icmp.c
icmpv6_echo_reply), for fastpath.run.

The datapath delivers an echo request to one of the router's addresses
locally (verdict ``local``); the loop hands those frames here (control
plane: only echo requests for us, never every packet).  The reply is the
kernel's: source = the request's destination, destination = its source,
TTL / hop limit from ``net.ipv4.ip_default_ttl`` / ``net.ipv6.conf.all.
hop_limit`` (64), the request's TOS / traffic class kept, DF clear (the
kernel's ICMP socket uses IP_PMTUDISC_DONT), identifier, sequence and data
echoed.  Differences, as fastpath's ICMP errors (README "Known differences"):
the IPv4 ID is 0 (Linux: ip_select_ident's keyed hash) and the IPv6 flow
label 0 (Linux with auto_flowlabels: a keyed hash); the reply leaves by the
interface the request came in, to the MAC it came from (Linux routes it:
the same thing for a pinger on the link, not for one behind an asymmetric
path); requests with IPv4 options or IPv6 extension headers, and requests
to broadcast or multicast addresses (icmp_echo_ignore_broadcasts), are not
answered (they stay counted as ``local``).
"""
from __future__ import annotations

import struct

from .neigh import _csum, icmp6_checksum


def _ip_csum(b: bytes) -> int:
    return ~_csum(b) & 0xFFFF


def reply(frame: bytes, l2len: int, mac: bytes, local4, local6, ttl=64, hop_limit=64):
    """The echo reply frame for ``frame`` (an echo request the datapath
    delivered locally), or None when the kernel would not answer it (or
    fastpath does not: see the module docstring)."""
    eth, pkt = frame[:l2len], frame[l2len:]
    et = struct.unpack_from("!H", eth, l2len - 2)[0]
    out_eth = eth[6:12] + mac + eth[12:]
    if et == 0x0800:
        if len(pkt) < 28 or pkt[0] != 0x45:
            return None
        tot = struct.unpack_from("!H", pkt, 2)[0]
        if tot > len(pkt) or tot < 28 or pkt[9] != 1:
            return None
        if struct.unpack_from("!H", pkt, 6)[0] & 0x3FFF:
            return None                  # a fragment: reassembly is not modelled
        src, dst = pkt[12:16], pkt[16:20]
        if dst not in local4:
            return None
        icmp = pkt[20:tot]
        if icmp[0] != 8 or icmp[1] != 0 or _ip_csum(icmp) != 0:
            return None
        body = b"\0\0\0\0" + icmp[4:]
        body = bytes([0, 0]) + struct.pack("!H", _ip_csum(body)) + icmp[4:]
        hdr = struct.pack("!BBHHHBBH4s4s", 0x45, pkt[1], 20 + len(body), 0, 0, ttl, 1, 0, dst, src)
        hdr = hdr[:10] + struct.pack("!H", _ip_csum(hdr)) + hdr[12:]
        return out_eth + hdr + body
    if et == 0x86DD:
        if len(pkt) < 48 or pkt[0] >> 4 != 6 or pkt[6] != 58:
            return None
        plen = struct.unpack_from("!H", pkt, 4)[0]
        if plen + 40 > len(pkt) or plen < 8:
            return None
        src, dst = pkt[8:24], pkt[24:40]
        if dst not in local6 or dst[0] == 0xFF:
            return None
        icmp = pkt[40:40 + plen]
        if icmp[0] != 128 or icmp[1] != 0 or \
                icmp6_checksum(src, dst, icmp[:2] + b"\0\0" + icmp[4:]) != struct.unpack_from("!H", icmp, 2)[0]:
            return None
        body = bytes([129, 0, 0, 0]) + icmp[4:]
        body = body[:2] + struct.pack("!H", icmp6_checksum(dst, src, body)) + body[4:]
        tclass = ((pkt[0] & 0x0F) << 4) | (pkt[1] >> 4)
        hdr = struct.pack("!IHBB", (6 << 28) | (tclass << 20), len(body), 58, hop_limit) + dst + src
        return out_eth + hdr + body
    return None

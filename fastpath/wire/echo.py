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
path); requests with IPv6 extension headers, and requests to broadcast or
multicast addresses (icmp_echo_ignore_broadcasts), are not answered (they
stay counted as ``local``).

IPv4 options are echoed as icmp_reply does (``ping -R``, ``ping -T``):
``echo_options4`` below.
"""
from __future__ import annotations

import struct
import time

from ..router import ip4_options
from .neigh import _csum, icmp6_checksum


def _ip_csum(b: bytes) -> int:
    return ~_csum(b) & 0xFFFF


def _midtime() -> bytes:
    """ip_options_build's timestamp: milliseconds since midnight UTC."""
    ns = time.time_ns()
    return struct.pack("!I", (ns // 1_000_000_000 % 86400) * 1000 + ns // 1_000_000 % 1000)


def echo_options4(pkt: bytes, ihl: int, nonunicast4):
    """The options of the echo reply to ``pkt`` (an IPv4 header of ``ihl``
    bytes as the datapath delivered it, its input options already
    processed) and where ip_options_build writes into them: ``(options,
    [(offset, "addr" | "time")])`` with offsets from the start of the
    options, or None when the kernel sends no reply (__ip_options_echo's
    -EINVAL).

    __ip_options_echo copies the Record Route and Timestamp options (in that
    order, padded with EOL to 4 bytes; every other option is left out) and
    takes a slot in each for the reply, from the IPCB flags its input
    compile set (rr_needaddr, ts_needaddr, ts_needtime).  Those flags are
    not kept with a delivered packet, but they follow from the pointers the
    input compile advanced: a pointer still within an RR option means input
    wrote the last free slot before it (rr_needaddr); within a TS option of
    flag 0 or 1, input wrote a time (and an address); for a prespecified TS
    (flag 3) input either matched our address and moved on 8, or did not
    match and left the pointer on a unicast address -- both give "a time
    for the next slot when its address is ours", which is what the echo
    does.  (The datapath's own version for ICMP errors, with the flags at
    hand, is ip4_options_echo in pyx/datapath/ip4_options.pxi.)
    ``nonunicast4(addr4)``: inet_addr_type(addr) != RTN_UNICAST."""
    rr = ts = None
    try:
        for off, t, _n in ip4_options(pkt, ihl):
            if t == 7 and rr is None:
                rr = off
            elif t == 68 and ts is None:
                ts = off
    except ValueError:
        return None                           # input would have refused it
    out = bytearray()
    fill = []
    if rr is not None:
        ln, ptr = pkt[rr + 1], pkt[rr + 2]
        opt = bytearray(pkt[rr:rr + ln])
        if ln >= 3 and ptr <= ln:              # rr_needaddr
            if ptr + 3 > ln:
                return None
            opt[2] = ptr + 4
            fill.append((ptr - 1, "addr"))
        out += opt
    if ts is not None:
        base = len(out)
        ln, ptr = pkt[ts + 1], pkt[ts + 2]
        opt = bytearray(pkt[ts:ts + ln])
        flag = opt[3] & 0xF if ln >= 4 else None
        if ln >= 4 and ptr <= ln:
            if flag == 1:                          # ts_needaddr and ts_needtime
                if ptr + 7 > ln:
                    return None
                fill += [(base + ptr - 1, "addr"), (base + ptr + 3, "time")]
                ptr += 8
            elif flag == 0:                        # ts_needtime
                if ptr + 3 > ln:
                    return None
                fill.append((base + ptr - 1, "time"))
                ptr += 4
            elif flag == 3:
                if ptr + 3 > ln:                   # only after a match (needtime)
                    return None
                if ptr + 7 <= ln and nonunicast4(bytes(opt[ptr - 1:ptr + 3])):
                    fill.append((base + ptr + 3, "time"))
                    ptr += 8
            opt[2] = ptr
        out += opt
    while len(out) & 3:
        out.append(0)
    return bytes(out), fill


def reply(frame: bytes, l2len: int, mac: bytes, local4, local6, ttl=64, hop_limit=64,
          nonunicast4=None):
    """The echo reply frame for ``frame`` (an echo request the datapath
    delivered locally), or None when the kernel would not answer it (or
    fastpath does not: see the module docstring).  ``nonunicast4``: the
    predicate echo_options4 needs for prespecified timestamps (default: the
    addresses in ``local4``)."""
    eth, pkt = frame[:l2len], frame[l2len:]
    et = struct.unpack_from("!H", eth, l2len - 2)[0]
    out_eth = eth[6:12] + mac + eth[12:]
    if et == 0x0800:
        if len(pkt) < 28 or pkt[0] >> 4 != 4 or pkt[0] & 0x0F < 5:
            return None
        ihl = (pkt[0] & 0x0F) * 4
        tot = struct.unpack_from("!H", pkt, 2)[0]
        if tot > len(pkt) or tot < ihl + 8 or pkt[9] != 1:
            return None
        if struct.unpack_from("!H", pkt, 6)[0] & 0x3FFF:
            return None                  # a fragment: reassembly is not modelled
        src, dst = pkt[12:16], pkt[16:20]
        if dst not in local4:
            return None
        icmp = pkt[ihl:tot]
        if icmp[0] != 8 or icmp[1] != 0 or _ip_csum(icmp) != 0:
            return None
        opts, fill = b"", ()
        if ihl > 20:
            r = echo_options4(pkt, ihl, nonunicast4 or (lambda a: a in local4))
            if r is None:
                return None
            opts, fill = r
        body = b"\0\0\0\0" + icmp[4:]
        body = bytes([0, 0]) + struct.pack("!H", _ip_csum(body)) + icmp[4:]
        hdr = bytearray(struct.pack("!BBHHHBBH4s4s", 0x40 | (5 + len(opts) // 4), pkt[1],
                                    20 + len(opts) + len(body), 0, 0, ttl, 1, 0, dst, src) + opts)
        if fill:
            now = _midtime()
            for at, what in fill:                  # ip_options_build
                hdr[20 + at:24 + at] = dst if what == "addr" else now
        hdr[10:12] = struct.pack("!H", _ip_csum(bytes(hdr)))
        return out_eth + bytes(hdr) + body
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

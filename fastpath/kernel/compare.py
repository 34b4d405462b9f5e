"""Differential testing against the running kernel: the same config and the
same packets through fastpath and through a KernelOracle namespace.

``compare(oracle, router, iif, packets)`` returns a list of mismatches (empty
when fastpath emitted exactly what the kernel emitted, packet by packet).

How verdicts map onto what the kernel emits:

* forward / icmp: the kernel must emit exactly one packet, on the same
  interface, with the same bytes.  Where the router originates the packet
  (fastpath's verdict is icmp), the IPv4 ID and header checksum of an ICMPv4
  packet are masked: Linux picks that ID at random.  Nothing is masked in a
  forwarded packet, ICMP or not: forwarding keeps the ID.
* drop: the kernel emits nothing;
* local: the host stack may answer (echo reply, port unreachable, ...) or
  stay silent; fastpath models no sockets, so any answer addressed back to
  the packet's source (or, for a packet End.DT* decapsulated and delivered,
  to its inner packet's source) is accepted, but nothing may go anywhere
  else.
"""
from __future__ import annotations

import fastpath

def mask_kernel_chosen(pkt: bytes) -> bytes:
    """Zero the fields the kernel chooses freely in a packet it originates:
    the IPv4 ID (and with it the header checksum) of an ICMPv4 message.
    Apply it only to packets the router originated (``originated``)."""
    if pkt and pkt[0] >> 4 == 4 and len(pkt) >= 20 and pkt[9] == 1:
        b = bytearray(pkt)
        b[4:6] = b"\0\0"
        b[10:12] = b"\0\0"
        return bytes(b)
    return pkt


def _src(pkt: bytes) -> bytes:
    if pkt and pkt[0] >> 4 == 6 and len(pkt) >= 40:
        return pkt[8:24]
    if pkt and pkt[0] >> 4 == 4 and len(pkt) >= 20:
        return pkt[12:16]
    return b""


def _sources(pkt: bytes) -> set:
    """Where a locally delivered packet's answer may go: its source, and for
    an SRv6 packet carrying an IPv6/IPv4 packet (decapsulated and delivered
    by End.DT*), that packet's source."""
    out = {_src(pkt)}
    if pkt and pkt[0] >> 4 == 6 and len(pkt) >= 40:
        nh, off = pkt[6], 40
        while nh in (0, 43, 60) and off + 2 <= len(pkt):      # hop-by-hop, routing, dest opts
            nh, off = pkt[off], off + (pkt[off + 1] + 1) * 8
        if nh in (4, 41) and off < len(pkt):
            out.add(_src(pkt[off:]))
    return out


def _dst(pkt: bytes) -> bytes:
    if pkt and pkt[0] >> 4 == 6 and len(pkt) >= 40:
        return pkt[24:40]
    if pkt and pkt[0] >> 4 == 4 and len(pkt) >= 20:
        return pkt[16:20]
    return b""


def originated(res) -> bool:
    """Did the router itself make the packet(s) of this result (an ICMP
    error), rather than forward the packet it was given?"""
    return res.verdict == "icmp"


def expected_from_fastpath(res, pkt):
    if res.verdict in ("forward", "icmp"):
        if res.fragments:
            return [(res.oif, f) for f in res.fragments]
        return [(res.oif, res.data)]
    return []


def mask_outer_flowlabel(pkt: bytes) -> bytes:
    """Zero the flow label of an IPv6 packet: with net.ipv6.seg6_flowlabel=1
    a headend's outer flow label is skb_get_hash(), keyed per boot."""
    if pkt and pkt[0] >> 4 == 6 and len(pkt) >= 4:
        return bytes([pkt[0], pkt[1] & 0xF0, 0, 0]) + pkt[4:]
    return pkt


def kernel_outputs(oracle, iif, packets, wait: float = 0.01) -> list:
    """Each packet through the kernel: one ``[(device, bytes)]`` per packet,
    with what arrived after its own ``wait`` (found by the next send, or by
    a last collect) counted where it belongs instead of dropped as stray."""
    iifs = [iif] * len(packets) if isinstance(iif, str) else list(iif)
    outs: list = []
    for pkt, dev in zip(packets, iifs):
        seen = len(oracle.stray)
        got = oracle.send(dev, pkt, wait=wait)
        if outs:
            outs[-1].extend(oracle.stray[seen:])      # the packet before's late output
        outs.append(list(got))
    if outs:
        outs[-1].extend(oracle.collect(wait))
    return outs


def compare(oracle, router, iif: str, packets, wait: float = 0.01, mask=None):
    """Send every packet through both; return the list of mismatches.
    ``mask``: a function applied to both sides' emitted packets before
    comparing (for fields the kernel chooses at random)."""
    # the debug build runs each packet in a buffer that ends where the packet
    # ends, so the datapath cannot shift a packet towards the end of its
    # slot to make room for long SRHs (as the release build does): give it
    # the room up front there
    from fastpath import _datapath
    b = fastpath.Batch.from_packets(packets, iif=iif,
                                    **({"headroom": 512} if _datapath.DEBUG_BUILD else {}))
    router.process(b)
    results = b.results()
    problems = []
    for k, (pkt, res, got) in enumerate(zip(packets, results, kernel_outputs(oracle, iif, packets,
                                                                            wait))):
        if res.verdict == "local":
            bad = [(i, p) for i, p in got if _dst(p) not in _sources(pkt)]
            if bad:
                problems.append((k, pkt.hex(), res, got))
            continue
        exp = expected_from_fastpath(res, pkt)
        m = mask or (lambda x: x)
        own = mask_kernel_chosen if originated(res) else (lambda x: x)
        g = [(i, m(own(p))) for i, p in got]
        e = [(i, m(own(p))) for i, p in exp]
        if g != e:
            problems.append((k, pkt.hex(), res, got))
    return problems


def format_problems(problems, limit=5):
    out = []
    for k, hexpkt, res, got in problems[:limit]:
        out.append(f"packet {k}: {hexpkt}\n  fastpath: {res!r} {res.data.hex()}\n"
                   f"  kernel:   {[(i, p.hex()) for i, p in got]}")
    return "\n".join(out) + (f"\n... and {len(problems) - limit} more" if len(problems) > limit else "")


def check(pair, pkts, iif="tun0", mask=None):
    """Assert that fastpath and the kernel (``pair`` = (oracle, router)) do
    the same with every packet."""
    oracle, router = pair
    problems = compare(oracle, router, iif, [bytes(p) for p in pkts], mask=mask)
    assert not problems, format_problems(problems)

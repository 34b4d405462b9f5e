"""Packet traces: the path one packet took through the compiled datapath.

``Router.trace(packet, iif=...)`` runs the packet through the same kernels
with their trace buffer on (VPP's ``trace add`` / ``show trace``): every
policy rule consulted, every table lookup and its result, the route, the
seg6local behaviour and each of its steps (SRH found, segments left, new
DA, NEXT-C-SID shift, SRH pop, decapsulation, insertion/encapsulation), the
forwarding decision or ICMP error, and the verdict.

    python -m fastpath.trace --config FILE --iif DEV HEXPACKET [HEXPACKET...]
    python -m fastpath.trace --config FILE --iif DEV --pcap FILE [--count N]
"""
from __future__ import annotations

import argparse
import binascii
import ipaddress
import sys
from dataclasses import dataclass, field

from .config import SEG6LOCAL_ACTIONS
from .reasons import REASON_NAMES, VERDICTS

# event codes: the T_* enum of pyx/datapath/ctx.pxi
(T_RULE, T_LOOKUP, T_ROUTE, T_S6L, T_SRH, T_ADVANCE, T_CSID, T_POP, T_DECAP, T_INSERT,
 T_ENCAP, T_FORWARD, T_ICMP, T_VERDICT, T_TABLE, T_INPUT, T_ICMP_DUE, T_VRF) = range(1, 19)

# behaviour names by uapi number, from the behaviour table (config.SEG6LOCAL_ACTIONS)
_ACTIONS = {d.uapi: name for name, d in SEG6LOCAL_ACTIONS.items()}
_PROTOS = {4: "IPv4", 41: "IPv6", 143: "Ethernet"}
_TABLES = {255: "local", 254: "main", 253: "default"}


def _addr(b: bytes, family: int = 6) -> str:
    return str(ipaddress.IPv4Address(b[:4]) if family == 4 else ipaddress.IPv6Address(b[:16]))


@dataclass
class Trace:
    """The steps of one packet, and its result."""
    lines: list = field(default_factory=list)
    result: object = None
    events: list = field(default_factory=list)

    def __str__(self):
        return "\n".join(self.lines)


def decode(router, events, family_hint=6) -> list:
    """Trace events to human-readable lines."""
    t = router._tables
    rules = {6: router.state.rules.get(6, []), 4: router.state.rules.get(4, [])}
    fam = family_hint
    lines = []
    for code, a, b, addr in events:
        if code == T_INPUT:
            fam = a
            lines.append(f"input: IPv{a}, {b} bytes")
        elif code == T_RULE:
            ru = rules[fam][a] if a < len(rules[fam]) else None
            what = (f"lookup table {_TABLES.get(b, b)}" if b else
                    (ru.action if ru is not None else "action"))
            if ru is not None and getattr(ru, "l3mdev", False):
                vrf = [i.name for i in router.state.interfaces.values()
                       if i.kind == "vrf" and i.vrf_table == b]
                what = (f"l3mdev: lookup table {_TABLES.get(b, b)} (VRF {', '.join(vrf)})" if b
                        else "l3mdev: no VRF")
            pref = ru.pref if ru is not None else "?"
            lines.append(f"  rule pref {pref}: {what}")
        elif code == T_LOOKUP:
            res = router.describe_dst(b) if b else "miss"
            lines.append(f"    table {_TABLES.get(a, a)} lookup {_addr(addr, fam)}: {res}")
        elif code == T_TABLE:
            tables = t.slots.get(6, [])
            name = _TABLES.get(tables[a], tables[a]) if a < len(tables) else "(no such table)"
            lines.append(f"    table {name} lookup {_addr(addr)}: {router.describe_dst(b)}")
        elif code == T_VRF:
            lines.append(f"    into VRF {t.ifnames.get(a, a)}: received by it, looked up "
                         "through the rules from it")
        elif code == T_ROUTE:
            lines.append(f"  route: {router.describe_dst(a)}")
        elif code == T_S6L:
            lines.append(f"  seg6local {_ACTIONS.get(a, a)}")
        elif code == T_SRH:
            lines.append(f"    SRH at offset {a}, segments left {b}")
        elif code == T_ADVANCE:
            lines.append(f"    advance: segments left {a}, DA {_addr(addr)}")
        elif code == T_CSID:
            lines.append(f"    NEXT-C-SID: argument shifted, DA {_addr(addr)}")
        elif code == T_POP:
            lines.append(f"    {'PSP' if b == 1 else 'USP'}: SRH removed")
        elif code == T_DECAP:
            fam = 4 if a == 4 else fam
            lines.append(f"    decapsulated: inner {_PROTOS.get(a, a)} ({b} bytes of outer headers removed)")
        elif code == T_INSERT:
            lines.append(f"    SRH inserted ({a} bytes), DA {_addr(addr)}")
        elif code == T_ENCAP:
            fam = 6
            lines.append(f"    encapsulated ({a} bytes of outer headers), DA {_addr(addr)}")
        elif code == T_FORWARD:
            lines.append(f"  forward: dev {t.ifnames.get(a, a)} via {_addr(addr, fam)}, "
                         f"{'hop limit' if fam == 6 else 'TTL'} now {b}")
        elif code == T_ICMP:
            lines.append(f"  ICMP{'v6' if fam == 6 else ''} error type {a} code {b} to {_addr(addr, fam)}")
        elif code == T_ICMP_DUE:
            lines.append(f"  ICMP{'v6' if fam == 6 else ''} error type {a} code {b} due: "
                         "route back to the source")
        elif code == T_VERDICT:
            reason = f" ({REASON_NAMES[b]})" if b and b < len(REASON_NAMES) else ""
            lines.append(f"verdict: {VERDICTS[a]}{reason}")
    return lines


def trace_packet(router, packet: bytes, iif: str, linktype: str = "raw") -> Trace:
    from .batch import LINKTYPES, Batch
    b = Batch.from_packets([packet], iif=iif, linktype=linktype)
    tb = router._tables
    if iif not in tb.ifindex:
        raise ValueError(f"unknown ingress interface {iif!r}")
    b.iif[:] = tb.ifindex[iif]
    b.iif_names = None
    b.ifnames = dict(tb.ifnames)
    events = router._dp.trace(*b.kernel_arrays(), LINKTYPES[linktype])
    res = b.results()[0]
    lines = decode(router, events)
    if res.verdict in ("forward", "icmp"):
        lines.append(f"out: dev {res.oif}, {len(res.data)} bytes: {res.data.hex()}")
    return Trace(lines, res, events)


def main(argv=None) -> int:
    from .config import ConfigError
    from .router import Router
    ap = argparse.ArgumentParser(prog="python -m fastpath.trace",
                                 description="Show the path packets take through the datapath.")
    ap.add_argument("--config", required=True)
    ap.add_argument("--iif", required=True)
    ap.add_argument("--ethernet", action="store_true", help="packets are Ethernet frames")
    ap.add_argument("--pcap", help="read the packets from a capture (pcap/pcapng)")
    ap.add_argument("--count", type=int, default=10, help="packets to trace from --pcap (default 10)")
    ap.add_argument("packets", nargs="*", metavar="HEXPACKET")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)

    def fail(msg):
        print(f"fastpath.trace: {msg}", file=sys.stderr)
        return 1
    try:
        r = Router.from_file(args.config)
    except OSError as e:
        return fail(f"cannot read {args.config}: {e.strerror}")
    except ConfigError as e:
        return fail(f"{args.config}: {e}")
    pkts = []
    linktype = "ethernet" if args.ethernet else "raw"
    if args.pcap:
        try:
            from scapy.utils import rdpcap
            caps = rdpcap(args.pcap, count=args.count)
        except Exception as e:  # scapy raises many types for bad files
            return fail(f"cannot read {args.pcap}: {e}")
        from scapy.layers.l2 import Ether
        for c in caps:
            pkts.append(bytes(c))
            if isinstance(c, Ether):
                linktype = "ethernet"
    for h in args.packets:
        try:
            pkts.append(binascii.unhexlify(h.replace(":", "").replace(" ", "")))
        except (binascii.Error, ValueError):
            return fail(f"not a hex packet: {h[:40]!r}")
    if not pkts:
        return fail("no packets: give HEXPACKET arguments or --pcap")
    for i, p in enumerate(pkts):
        try:
            t = trace_packet(r, p, args.iif, linktype)
        except ValueError as e:
            return fail(str(e))
        print(f"--- packet {i} ({len(p)} bytes)")
        print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())

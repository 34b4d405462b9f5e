"""Verify: the same packets through the running kernel and through fastpath.

``verify(config, packets, iif)`` builds a throwaway network namespace (a
``KernelOracle``) with one TUN device per interface of the configuration,
applies the configuration there with ``ip`` and ``sysctl``, writes each
packet into the kernel and into a fastpath ``Router`` configured from the
same text, and compares what comes out, packet by packet:

* forward / icmp: the kernel must emit the same packets (bytes, device);
* drop: the kernel emits nothing;
* local: fastpath models no sockets, so any answer the kernel sends back to
  the packet's source is accepted; nothing may go anywhere else.

Masked before comparing (and reported when they changed a byte) — the
fields the kernel chooses freely, which no model can reproduce:

* the IPv4 identification (and with it the header checksum) of the ICMPv4
  errors the kernel originates (Linux picks the ID at random): only where
  fastpath's verdict is an ICMP error, never in a forwarded packet;
* with ``net.ipv6.seg6_flowlabel=1`` in the configuration, the flow label
  of the outer IPv6 header (``skb_get_hash()``, keyed per boot).

Nothing else is masked.  The namespace gets the oracle's sysctls first (no
router solicitations, DAD or link-local addresses, ICMP rate limits off,
``send_redirects=0``: see ``fastpath.kernel.oracle``); fastpath's defaults
are the same.

A capture on Ethernet is stripped to L3 (14 bytes, 18 with one 802.1Q tag)
and said so: the namespace's devices are TUN devices, which carry bare
IP packets.
"""
from __future__ import annotations

import ipaddress
import shlex
import struct
from dataclasses import dataclass, field
from typing import Optional

from ..config import ConfigError
from .compare import (_dst, _sources, expected_from_fastpath, kernel_outputs, mask_kernel_chosen,
                      mask_outer_flowlabel, originated)

__all__ = ["VerifyError", "Difference", "Report", "verify", "packet_fields", "summary",
           "first_difference", "config_interfaces"]


class VerifyError(RuntimeError):
    """verify cannot run (exit status 2)."""


# ---------------------------------------------------------------------------
# naming the fields of a packet
_PROTO = {0: "Hop-by-Hop", 1: "ICMP", 4: "IPv4", 6: "TCP", 17: "UDP", 41: "IPv6", 43: "Routing",
          44: "Fragment", 58: "ICMPv6", 59: "No Next Header", 60: "Destination Options",
          143: "Ethernet"}


def _ip6(b: bytes) -> str:
    return str(ipaddress.IPv6Address(b))


def _ip4(b: bytes) -> str:
    return str(ipaddress.IPv4Address(b))


def packet_fields(pkt: bytes, prefix: str = "", depth: int = 0) -> list:
    """[(field name, value)] of an IPv4/IPv6 packet, headers in order, the
    packet an ICMP error quotes included ("ICMPv6 quoted IPv6 hop limit"),
    then the remaining bytes one by one ("payload byte 3")."""
    out: list = []
    if not pkt:
        return [(prefix + "packet", "empty")]
    v = pkt[0] >> 4
    if v == 6 and len(pkt) >= 40:
        vtcfl = struct.unpack_from("!I", pkt)[0]
        plen, nh, hl = struct.unpack_from("!HBB", pkt, 4)
        p = prefix + "IPv6 "
        out += [(p + "version", 6), (p + "traffic class", (vtcfl >> 20) & 0xFF),
                (p + "flow label", vtcfl & 0xFFFFF), (p + "payload length", plen),
                (p + "next header", nh), (p + "hop limit", hl),
                (p + "source", _ip6(pkt[8:24])), (p + "destination", _ip6(pkt[24:40]))]
        off = 40
        return out + _upper(pkt, off, nh, prefix, depth)
    if v == 4 and len(pkt) >= 20:
        ihl = (pkt[0] & 0xF) * 4
        tos, tlen, ident, frag, ttl, proto, csum = struct.unpack_from("!BHHHBBH", pkt, 1)
        p = prefix + "IPv4 "
        out += [(p + "version", 4), (p + "header length", ihl), (p + "TOS", tos),
                (p + "total length", tlen), (p + "identification", ident),
                (p + "flags", frag >> 13), (p + "fragment offset", frag & 0x1FFF),
                (p + "TTL", ttl), (p + "protocol", proto), (p + "header checksum", csum),
                (p + "source", _ip4(pkt[12:16])), (p + "destination", _ip4(pkt[16:20]))]
        if ihl > 20:
            out += [(p + f"option byte {k}", pkt[20 + k]) for k in range(min(ihl, len(pkt)) - 20)]
        if frag & 0x1FFF:
            return out + _rest(pkt, ihl, prefix)
        return out + _upper(pkt, ihl, proto, prefix, depth)
    return _rest(pkt, 0, prefix)


def _rest(pkt, off, prefix):
    return [(prefix + f"payload byte {k - off}", pkt[k]) for k in range(off, len(pkt))] + \
        [(prefix + "length", len(pkt))]


def _upper(pkt: bytes, off: int, nh: int, prefix: str, depth: int) -> list:
    out: list = []
    while True:
        if nh in (0, 60) and off + 2 <= len(pkt):
            name = _PROTO[nh]
            out += [(prefix + f"{name} next header", pkt[off]),
                    (prefix + f"{name} length", pkt[off + 1])]
            ln = (pkt[off + 1] + 1) * 8
            out += [(prefix + f"{name} option byte {k}", pkt[off + 2 + k])
                    for k in range(min(ln, len(pkt) - off) - 2)]
            nh, off = pkt[off], off + ln
        elif nh == 43 and off + 8 <= len(pkt):
            p = prefix + "SRH " if pkt[off + 2] == 4 else prefix + "Routing header "
            hdr_nh, hlen, rtype, sl, last, flags, tag = struct.unpack_from("!BBBBBBH", pkt, off)
            out += [(p + "next header", hdr_nh), (p + "length", hlen), (p + "type", rtype),
                    (p + "segments left", sl), (p + "last entry", last), (p + "flags", flags),
                    (p + "tag", tag)]
            ln = (hlen + 1) * 8
            if rtype == 4:
                for k in range(last + 1):
                    s = off + 8 + 16 * k
                    if s + 16 <= len(pkt):
                        out.append((p + f"segment[{k}]", _ip6(pkt[s:s + 16])))
                t0 = off + 8 + 16 * (last + 1)
            else:
                t0 = off + 8
            out += [(p + f"TLV byte {k - t0}", pkt[k]) for k in range(t0, min(off + ln, len(pkt)))]
            nh, off = hdr_nh, off + ln
        elif nh == 44 and off + 8 <= len(pkt):
            fnh, _r, fo, ident = struct.unpack_from("!BBHI", pkt, off)
            p = prefix + "Fragment header "
            out += [(p + "next header", fnh), (p + "offset", fo >> 3), (p + "M flag", fo & 1),
                    (p + "identification", ident)]
            if fo >> 3:
                return out + _rest(pkt, off + 8, prefix)
            nh, off = fnh, off + 8
        else:
            break
    if nh in (58, 1) and off + 4 <= len(pkt):
        name = "ICMPv6" if nh == 58 else "ICMP"
        t, c, cs = struct.unpack_from("!BBH", pkt, off)
        p = prefix + name + " "
        out += [(p + "type", t), (p + "code", c), (p + "checksum", cs)]
        if off + 8 <= len(pkt):
            out.append((p + "parameter", struct.unpack_from("!I", pkt, off + 4)[0]))
        is_err = (nh == 58 and t < 128) or (nh == 1 and t in (3, 4, 5, 11, 12))
        if is_err and depth == 0 and off + 8 < len(pkt):
            return out + packet_fields(pkt[off + 8:], p + "quoted ", depth + 1)
        return out + _rest(pkt, off + 8, p)
    if nh in (4, 41) and depth < 2 and off < len(pkt):
        return out + packet_fields(pkt[off:], prefix + "inner ", depth + 1)
    if nh == 17 and off + 8 <= len(pkt):
        sp, dp, ln, cs = struct.unpack_from("!HHHH", pkt, off)
        p = prefix + "UDP "
        return out + [(p + "source port", sp), (p + "destination port", dp), (p + "length", ln),
                      (p + "checksum", cs)] + _rest(pkt, off + 8, p)
    if nh == 6 and off + 20 <= len(pkt):
        sp, dp, seq, ack = struct.unpack_from("!HHII", pkt, off)
        p = prefix + "TCP "
        return out + [(p + "source port", sp), (p + "destination port", dp),
                      (p + "sequence number", seq), (p + "acknowledgment number", ack)] + \
            _rest(pkt, off + 12, p)
    return out + _rest(pkt, off, prefix)


def summary(pkt: bytes) -> str:
    """One line: 'IPv6 2001:db8::1 > 2001:db8::2 ICMPv6 type 1 code 0, 104 bytes'."""
    f = dict(packet_fields(pkt))
    if f.get("IPv6 version") == 6:
        s = f"IPv6 {f['IPv6 source']} > {f['IPv6 destination']} hlim {f['IPv6 hop limit']}"
    elif f.get("IPv4 version") == 4:
        s = f"IPv4 {f['IPv4 source']} > {f['IPv4 destination']} ttl {f['IPv4 TTL']}"
    else:
        return f"{len(pkt)} bytes, not IPv4/IPv6"
    if "SRH segments left" in f:
        s += f" SRH sl {f['SRH segments left']}"
    for name in ("ICMPv6", "ICMP"):
        if f"{name} type" in f and not any(k.startswith("inner ") for k in f if k.endswith("type")):
            s += f" {name} type {f[name + ' type']} code {f[name + ' code']}"
            break
    else:
        for k in ("inner IPv6 destination", "inner IPv4 destination"):
            if k in f:
                s += f" (inner {k.split()[1]} > {f[k]})"
                break
        else:
            if "UDP destination port" in f:
                s += f" UDP {f['UDP source port']} > {f['UDP destination port']}"
            elif "TCP destination port" in f:
                s += f" TCP {f['TCP source port']} > {f['TCP destination port']}"
    return s + f", {len(pkt)} bytes"


def first_difference(kernel: bytes, fp: bytes) -> str:
    """'ICMPv6 code: kernel 0, fastpath 1' for the first field that differs."""
    a, b = packet_fields(kernel), packet_fields(fp)
    for (na, va), (nb, vb) in zip(a, b):
        if na != nb:
            return f"packet layout: kernel has {na}, fastpath has {nb}"
        if va != vb:
            return f"{na}: kernel {va}, fastpath {vb}"
    if len(kernel) != len(fp):
        return f"length: kernel {len(kernel)}, fastpath {len(fp)}"
    return "no field differs"


# ---------------------------------------------------------------------------
@dataclass
class Difference:
    index: int                  # 0-based packet number
    packet: bytes
    iif: str
    kernel: list                # [(dev, bytes)] as emitted
    fastpath: object            # fastpath.Result
    expected: list              # [(dev, bytes)] fastpath emits
    detail: str                 # the first differing field, or what is missing

    def format(self) -> str:
        res = self.fastpath
        lines = [f"packet {self.index + 1}: differs",
                 f"  sent on {self.iif}: {summary(self.packet)}"]
        if self.kernel:
            for dev, p in self.kernel:
                lines.append(f"  kernel emitted on {dev}: {summary(p)}")
        else:
            lines.append("  kernel emitted nothing")
        what = res.verdict + (f" ({res.reason})" if res.reason else "")
        if self.expected:
            for dev, p in self.expected:
                lines.append(f"  fastpath {what} on {dev}: {summary(p)}")
        else:
            lines.append(f"  fastpath {what}: emits nothing")
        lines.append(f"  first difference: {self.detail}")
        return "\n".join(lines)


@dataclass
class Report:
    total: int = 0
    agree: int = 0
    differences: list = field(default_factory=list)
    masked: dict = field(default_factory=dict)       # mask description -> packets it changed
    notes: list = field(default_factory=list)
    masks: list = field(default_factory=list)        # descriptions of the masks in force

    @property
    def ok(self) -> bool:
        return not self.differences

    def format(self, limit: Optional[int] = None) -> str:
        out = []
        out += [f"note: {n}" for n in self.notes]
        shown = self.differences if limit is None else self.differences[:limit]
        out += [d.format() for d in shown]
        if len(shown) < len(self.differences):
            out.append(f"... and {len(self.differences) - len(shown)} more differences")
        out.append(f"agree {self.agree}/{self.total}")
        for m in self.masks:
            out.append(f"masked: {m} ({self.masked.get(m, 0)} packet(s) changed by it)")
        if not self.masks:
            out.append("masked: nothing")
        return "\n".join(out)


MASK_ICMP4_ID = "IPv4 identification and header checksum of ICMPv4 errors the kernel originates"
MASK_FLOWLABEL = "outer IPv6 flow label (net.ipv6.seg6_flowlabel=1: a per-boot hash)"


def config_interfaces(state) -> list:
    """The interfaces verify creates as TUN devices (every one but lo), and
    refuses kinds a TUN device cannot stand for."""
    names = []
    for itf in sorted(state.interfaces.values(), key=lambda i: i.ifindex):
        if itf.kind == "loopback":
            continue
        if itf.kind not in (None, "tun"):
            raise VerifyError(f"interface {itf.name} is a {itf.kind} device: verify builds TUN "
                              "devices only (L3; use 'ip tuntap add dev NAME mode tun' or "
                              "plain mentions)")
        names.append(itf.name)
    return names


def kernel_text(config: str) -> tuple:
    """The configuration as the namespace gets it: ``ip route add ... proto
    kernel`` lines (which ``dump()`` and import write for the automatic routes
    fastpath does not derive itself, e.g. the ::1/128 route in main of a lo
    that has been set up again) run as ``ip route replace``, since the kernel
    may have made the same route already.  -> (text, how many lines changed)."""
    out, n = [], 0
    for line in config.splitlines():
        words = line.split()
        if (len(words) > 3 and words[0] == "ip" and "proto" in words
                and words[words.index("proto") + 1:][:1] == ["kernel"]):
            k = next((i for i, w in enumerate(words) if w in ("route", "r", "ro", "rou", "rout")), None)
            if k is not None and words[k + 1:][:1] == ["add"]:
                words[k + 1] = "replace"
                line = " ".join(words)
                n += 1
        out.append(line)
    return "\n".join(out) + "\n", n


def verify(config: str, packets, iif=None, *, wait: float = 0.01,
           fastpath_config: Optional[str] = None, notes=(), vm: bool = False) -> Report:
    """Run ``packets`` (raw L3 bytes) through the kernel and fastpath; see the
    module doc.  ``iif``: the interface they arrive on (default: the
    configuration's first), or a list of one per packet.  ``fastpath_config`` (for testing verify itself) configures
    the fastpath side with other text than the kernel's.  ``vm``: the kernel
    side runs in a VM whose Linux has seg6 and VRF (``fastpath.kernel.remote``),
    the rest here.  Raises VerifyError when it cannot run."""
    from .. import Batch, Router
    from .. import _datapath
    from .oracle import KernelConfigError, KernelOracleError
    if vm:
        from .remote import KernelOracle, oracle_available
    else:
        from .oracle import KernelOracle, oracle_available
    try:
        router = Router().configure(config if fastpath_config is None else fastpath_config)
        kstate = Router().configure(config).state if fastpath_config is not None else router.state
    except ConfigError as e:
        raise VerifyError(f"configuration: {e}") from None
    ifaces = config_interfaces(kstate)
    if not ifaces:
        raise VerifyError("the configuration names no interface (a TUN device is made for each)")
    packets = [bytes(p) for p in packets]
    if iif is None:
        iif = ifaces[0]
    iifs = [iif] * len(packets) if isinstance(iif, str) else list(iif)
    if len(iifs) != len(packets):
        raise ValueError("iif: one interface name, or one per packet")
    for name in dict.fromkeys(iifs):
        if name not in ifaces:
            raise VerifyError(f"--iif {name}: not an interface of the configuration "
                              f"({', '.join(ifaces)})")
    ok, reason = oracle_available(seg6=False)
    if not ok:
        raise VerifyError(reason)
    rep = Report(notes=list(notes))
    rep.masks.append(MASK_ICMP4_ID)
    flowlabel = kstate.sysctl("net.ipv6.seg6_flowlabel") == 1
    if flowlabel:
        rep.masks.append(MASK_FLOWLABEL)
    b = Batch.from_packets(packets, iif=iifs, **({"headroom": 512} if _datapath.DEBUG_BUILD else {}))
    router.process(b)
    results = b.results()
    try:
        with KernelOracle(ifaces=ifaces) as k:
            ktext, nrep = kernel_text(config)
            if nrep:
                rep.notes.append(f"{nrep} automatic (proto kernel) route line(s) applied with "
                                 "'ip route replace' (the kernel may have made them already)")
            try:
                k.configure(ktext)
            except KernelConfigError as e:
                missing = None if vm else _missing_feature(e.line, oracle_available)
                if missing:
                    raise VerifyError(f"this kernel has no {missing}, which line {e.lineno} "
                                      f"needs ({e.line!r}): run verify with --vm (a VM whose "
                                      "Linux has seg6 and VRF)") from None
                raise VerifyError(f"the kernel refused the configuration: {e}".replace("\n", "; ")) \
                    from None
            outs = kernel_outputs(k, iifs, packets, wait)
            for n, (pkt, res, dev, got) in enumerate(zip(packets, results, iifs, outs)):
                _judge(rep, n, pkt, dev, res, got, flowlabel)
    except KernelOracleError as e:
        raise VerifyError(str(e).replace("\n", "; ")) from None
    except OSError as e:
        raise VerifyError(f"kernel namespace: {e}") from None
    return rep


def _missing_feature(line: str, available) -> Optional[str]:
    """The kernel feature a refused configuration line needs that this
    kernel lacks (None: not that)."""
    words = line.split()
    if ("seg6local" in words or "seg6" in words) and not available(seg6=True)[0]:
        return "seg6 lwtunnels (CONFIG_IPV6_SEG6_LWTUNNEL)"
    if ("vrf" in words or "vrftable" in words) and not available(seg6=False, vrf=True)[0]:
        return "VRF devices (CONFIG_NET_VRF)"
    if "hmac" in words and not available(seg6=True)[0]:
        return "seg6 HMAC (CONFIG_IPV6_SEG6_HMAC)"
    return None


def _judge(rep: Report, n: int, pkt: bytes, iif: str, res, got: list, flowlabel: bool):
    rep.total += 1
    if res.verdict == "local":
        bad = [(d, p) for d, p in got if _dst(p) not in _sources(pkt)]
        if bad:
            rep.differences.append(Difference(
                n, pkt, iif, got, res, [], f"fastpath delivers locally; the kernel sent "
                f"{len(bad)} packet(s) elsewhere than back to the source"))
        else:
            rep.agree += 1
        return
    exp = expected_from_fastpath(res, pkt)

    def mask(p, count):
        q = mask_kernel_chosen(p) if originated(res) else p
        if q != p and count:
            rep.masked[MASK_ICMP4_ID] = rep.masked.get(MASK_ICMP4_ID, 0) + 1
        if flowlabel:
            r = mask_outer_flowlabel(q)
            if r != q and count:
                rep.masked[MASK_FLOWLABEL] = rep.masked.get(MASK_FLOWLABEL, 0) + 1
            q = r
        return q
    g = [(d, mask(p, True)) for d, p in got]
    e = [(d, mask(p, False)) for d, p in exp]
    if g == e:
        rep.agree += 1
        return
    rep.differences.append(Difference(n, pkt, iif, got, res, exp, _detail(g, e)))


def _detail(g: list, e: list) -> str:
    if not g:
        return f"the kernel emitted nothing, fastpath {len(e)} packet(s)"
    if not e:
        return f"fastpath emits nothing, the kernel emitted {len(g)} packet(s)"
    extra_k = [x for x in g if x not in e]
    extra_f = [x for x in e if x not in g]
    if len(extra_k) == 1 and len(extra_f) == 1:
        (dk, pk), (df, pf) = extra_k[0], extra_f[0]
        if dk != df:
            return f"output device: kernel {dk}, fastpath {df}"
        return first_difference(pk, pf)
    if len(g) != len(e):
        parts = [f"the kernel emitted {len(g)} packet(s), fastpath {len(e)}"]
        if extra_k:
            parts.append("only the kernel: " + "; ".join(f"{d}: {summary(p)}" for d, p in extra_k))
        if extra_f:
            parts.append("only fastpath: " + "; ".join(f"{d}: {summary(p)}" for d, p in extra_f))
        return ", ".join(parts)
    if sorted(g) == sorted(e):
        return "same packets in another order"
    for (dk, pk), (df, pf) in zip(g, e):
        if (dk, pk) != (df, pf):
            if dk != df:
                return f"output device: kernel {dk}, fastpath {df}"
            return first_difference(pk, pf)
    return "differs"


# ---------------------------------------------------------------------------
def read_packets(path: str, limit: Optional[int] = None) -> tuple:
    """(raw L3 packets, the name of the capture interface of each (pcapng
    ``if_name``, or None), notes) from a pcap/pcapng capture; Ethernet
    frames are stripped to L3 (a note says so); non-IP frames are left out
    (noted)."""
    from ..pcap import PcapError, PcapReader
    pkts: list = []
    names: list = []
    notes: list = []
    stripped = skipped = 0
    try:
        reader = PcapReader(path)
    except PcapError as e:
        raise VerifyError(f"{path}: malformed capture: {e}") from None
    except OSError as e:
        raise VerifyError(f"{path}: {e.strerror or e}") from None
    try:
        for b in reader:
            capif = getattr(b, "capture_if", None)
            for i in range(len(b)):
                if limit is not None and len(pkts) >= limit:
                    break
                s, ln = int(b.start[i]), int(b.length[i])
                frame = b.data[i, s:s + ln].tobytes()
                if b.linktype == "ethernet":
                    l3 = _strip_ethernet(frame)
                    if l3 is None:
                        skipped += 1
                        continue
                    stripped += 1
                    frame = l3
                pkts.append(frame)
                names.append(reader.interfaces[int(capif[i])].name if capif is not None else None)
            if limit is not None and len(pkts) >= limit:
                break
    except PcapError as e:
        raise VerifyError(f"{path}: malformed capture: {e}") from None
    except OSError as e:
        raise VerifyError(f"{path}: {e.strerror or e}") from None
    finally:
        reader.close()
    if stripped:
        notes.append(f"{stripped} Ethernet frame(s) stripped to L3 (the namespace's devices are "
                     "TUN devices)")
    if skipped:
        notes.append(f"{skipped} Ethernet frame(s) that are not IPv4/IPv6 left out")
    return pkts, names, notes


def _strip_ethernet(frame: bytes) -> Optional[bytes]:
    if len(frame) < 14:
        return None
    et = struct.unpack_from("!H", frame, 12)[0]
    off = 14
    if et == 0x8100 and len(frame) >= 18:
        et = struct.unpack_from("!H", frame, 16)[0]
        off = 18
    if et not in (0x0800, 0x86DD):
        return None
    return frame[off:]


def parse_hex(words) -> list:
    """HEX arguments (spaces, colons inside allowed) -> packets; VerifyError."""
    out = []
    for n, w in enumerate(words, 1):
        h = "".join(w.split()).replace(":", "")
        if h.lower().startswith("0x"):
            h = h[2:]
        try:
            if not h or len(h) % 2:
                raise ValueError
            out.append(bytes.fromhex(h))
        except ValueError:
            raise VerifyError(f"packet {n}: not a hex string: {shlex.quote(w[:40])}") from None
    return out

"""Import: the live state of a network namespace, read over rtnetlink with
pyroute2, written as fastpath configuration text (the syntax of
``Router.dump()``).

    text = import_text(netns="r1")          # or None: this process's namespace
    state = import_state(netns="r1")        # a fastpath.config.State

What is read, and how it maps onto the configuration language:

* links (RTM_GETLINK): name, MTU, MAC, administrative up/down (IFF_UP), and
  the kind: ``lo``; ``tun``/``tap`` (``ip tuntap add``); ``veth`` pairs with
  both ends in the namespace; ``vlan`` (802.1Q); ``dummy``; a device without
  a kind (a NIC) and a veth whose peer is in another namespace
  (IFLA_LINK_NETNSID: the namespaces of a lab joined by veth pairs) are
  devices created by mention (``ip link set dev X up``), the wires that
  ``python -m fastpath.run --netns NS`` attaches to by name; ``vrf`` (``ip
  link add NAME type vrf table T``, IFLA_VRF_TABLE) and a VRF master
  (IFLA_MASTER: ``ip link set dev X master NAME``).  A device with another
  master (bridge, bond) and any other kind are "not supported".
* addresses (RTM_GETADDR): permanent ones only (a finite lifetime, a peer
  address, a label, ``noprefixroute``, ``mngtmpaddr``, a temporary address
  or a non-default IPv4 scope are "not supported").
* routes of every table (RTM_GETROUTE, both families): type, table, metric,
  protocol, IPv4 scope, preferred source, ``mtu``/``hoplimit`` metrics,
  multipath nexthops with weights, and the ``seg6`` (mode, segments, HMAC key
  id, per-route tunsrc) and ``seg6local`` (action, nh4, nh6, table,
  vrftable, oif, srh segs/hmac, count, flavors with lblen/nflen) encaps,
  decoded from the raw attributes.  The automatic (proto kernel) routes are
  checked against the ones fastpath derives from the addresses.
* rules (RTM_GETRULE): pref, from, to, iif, table and the actions lookup,
  blackhole, unreachable, prohibit; ``l3mdev`` (FRA_L3MDEV: the ``pref 1000
  l3mdev`` rules the kernel adds for both families with the first VRF).
* neighbours (RTM_GETNEIGH): entries with a link-layer address; the
  kernel's own NOARP entries (multicast, loopback) and entries without an
  address (INCOMPLETE, FAILED) are left out and listed in the notes.
* proxy entries (``ip neigh add proxy ADDR dev DEV [router]``, both
  families): the kernel's separate pneigh dump (RTM_GETNEIGH with NTF_PROXY
  in ndm_flags, ``dump_proxies``; pyroute2 does not ask for it).
* ``ip sr tunsrc`` and the HMAC keys, over the SEG6 generic netlink family
  (pyroute2 has no message class for it; the few attributes are packed
  here).  The kernel (6.x) does give the HMAC secrets back to a privileged
  reader (SEG6_CMD_DUMPHMAC, as ``ip sr hmac show`` prints them); a file of
  ``ip sr hmac set KEYID ALGO SECRET`` lines (``hmac_file``) overrides or
  adds keys for kernels or users that do not.
* the sysctls fastpath models (``fastpath.config``: the global ones —
  seg6_flowlabel, ICMP rate limits, multipath hash policy, ip_default_ttl,
  ... — and per all/default/device forwarding, seg6_enabled,
  seg6_require_hmac, hop_limit, mtu, proxy_arp, proxy_ndp, ..., and per
  default/device the neighbour tables' proxy_delay and proxy_qlen), read
  from /proc/sys inside the namespace.

Anything the model cannot hold raises :class:`NotSupported` naming the
object ("not supported: route 2001:db8::/64 table main: encap type mpls");
nothing is skipped silently.  The text is checked before it is returned:
applied to a fresh State it must give the imported State.

Normalisations (the kernel does not keep what would tell them apart):
IPv4 addresses are written in the kernel's order (primaries, then
secondaries), IPv6 addresses in the order they were added within one scope
(the kernel lists the newest first), IPv4 before IPv6; routes in (family,
table, prefix, metric) order; the kernel keeps one automatic route per
interface where fastpath keeps one per key (``multicast ff00::/8``: the first
interface's); a single nexthop's weight is not reported by the kernel
(weight 1); ifindexes are renumbered in order.

One function per rtnetlink message type turns a message into configuration
(``link_lines``, ``addr_line``, ``route_from_msg``/``route_line``,
``rule_from_msg``/``rule_line``, ``neigh_line`` (proxy entries too)), so that a follower of
RTM_NEW*/RTM_DEL* notifications can reuse them.
"""
from __future__ import annotations

import contextlib
import errno
import ipaddress
import itertools
import os
import socket
import struct
from dataclasses import dataclass, field
from typing import Optional

from .. import config as C
from ..config import Nexthop, Route, Rule, Seg6Encap, Seg6Local, State
from ..config.lexer import _net_int

__all__ = ["KernelImportError", "NotSupported", "import_state", "import_text", "canonical", "Snapshot",
           "read_snapshot", "link_lines", "addr_line", "route_from_msg", "route_line",
           "rule_from_msg", "rule_line", "neigh_line", "netns_path", "dump_proxies",
           "rtnl_socket", "get_link", "veth_peer_elsewhere"]

NETNS_RUN_DIR = "/run/netns"


class KernelImportError(RuntimeError):
    """The state could not be read or expressed as configuration."""


class NotSupported(KernelImportError):
    """An object of the kernel's state that fastpath does not model."""

    def __init__(self, obj: str, what: str):
        self.obj = obj
        self.what = what
        super().__init__(f"not supported: {obj}: {what}")


# ---------------------------------------------------------------------------
# raw attribute decoding (pyroute2 leaves seg6local flavors/counters and the
# seg6local SRH undecoded; routes are decoded from the raw bytes throughout)
NLA_TYPE_MASK = 0x3FFF


def _attrs(buf: bytes, off: int = 0, end: Optional[int] = None) -> list:
    """[(type, payload)] of the netlink attributes in buf[off:end]."""
    end = len(buf) if end is None else end
    out = []
    while off + 4 <= end:
        ln, typ = struct.unpack_from("=HH", buf, off)
        if ln < 4 or off + ln > end:
            break
        out.append((typ & NLA_TYPE_MASK, bytes(buf[off + 4:off + ln])))
        off += (ln + 3) & ~3
    return out


def _raw(msg) -> bytes:
    """The bytes of a pyroute2 message (header included)."""
    if isinstance(msg, (bytes, bytearray, memoryview)):
        return bytes(msg)
    return bytes(msg.data[msg.offset:msg.offset + msg["header"]["length"]])


def _u32(b: bytes) -> int:
    return struct.unpack("=I", b[:4])[0]


RTN_NAMES = {1: "unicast", 2: "local", 3: "broadcast", 4: "anycast", 5: "multicast",
             6: "blackhole", 7: "unreachable", 8: "prohibit", 9: "throw", 10: "nat",
             11: "xresolve"}
RTA = dict(DST=1, SRC=2, IIF=3, OIF=4, GATEWAY=5, PRIORITY=6, PREFSRC=7, METRICS=8,
           MULTIPATH=9, FLOW=11, CACHEINFO=12, TABLE=15, MARK=16, VIA=18, NEWDST=19, PREF=20,
           ENCAP_TYPE=21, ENCAP=22, EXPIRES=23, PAD=24, UID=25, TTL_PROPAGATE=26, NH_ID=30)
_RTA_NAMES = {v: k for k, v in RTA.items()}
RTAX_LOCK, RTAX_MTU, RTAX_HOPLIMIT = 1, 2, 10
_RTAX_NAMES = {3: "window", 4: "rtt", 5: "rttvar", 6: "ssthresh", 7: "cwnd", 8: "advmss",
               9: "reordering", 11: "initcwnd", 12: "features", 13: "rto_min", 14: "initrwnd",
               15: "quickack", 16: "congctl", 17: "fastopen_no_cookie"}
RTNH_F_DEAD, RTNH_F_PERVASIVE, RTNH_F_ONLINK, RTNH_F_LINKDOWN = 1, 2, 4, 16
RTM_F_CLONED = 0x200
LWT_NAMES = {1: "mpls", 2: "ip", 3: "ila", 4: "ip6", 5: "seg6", 6: "bpf", 7: "seg6local",
             8: "rpl", 9: "ioam6", 10: "xfrm"}
LWTUNNEL_ENCAP_SEG6, LWTUNNEL_ENCAP_SEG6_LOCAL = 5, 7
_SEG6_MODES = {v: k for k, v in C.SEG6_ENCAP_MODES.items()}
_S6L_ACTIONS = {d.uapi: name for name, d in C.SEG6LOCAL_ACTIONS.items()}
_S6L_ACTIONS.update({v: k for k, v in C.SEG6LOCAL_UNSUPPORTED.items()})
_FLV_BY_BIT = {v: k for k, v in C.SEG6LOCAL_FLAVORS.items()}
SR6_TLV_HMAC = 5
SR6_FLAG1_HMAC = 0x08


def _addr(fam: int, b: bytes):
    return ipaddress.IPv6Address(b[:16]) if fam == 6 else ipaddress.IPv4Address(b[:4])


def _table_name(t: int) -> str:
    return C._table_str(t)


def _srh_segments(srh: bytes, what: str):
    """(segments as stored, hmac key id or None) of a struct ipv6_sr_hdr."""
    if len(srh) < 8:
        raise NotSupported(what, "malformed SRH (shorter than 8 bytes)")
    _nh, hdrlen, typ, _sl, first, flags, _tag = struct.unpack_from("!BBBBBBH", srh)
    total = (hdrlen + 1) * 8
    if typ != 4 or len(srh) < total or len(srh) < 8 + 16 * (first + 1):
        raise NotSupported(what, "malformed SRH")
    segs = [ipaddress.IPv6Address(srh[8 + 16 * k:24 + 16 * k]) for k in range(first + 1)]
    off = 8 + 16 * (first + 1)
    hmac = None
    while off + 2 <= total:
        t = srh[off]
        if t == 0:            # Pad1
            off += 1
            continue
        ln = srh[off + 1]
        if t == SR6_TLV_HMAC and ln >= 6:
            hmac = struct.unpack_from("!I", srh, off + 4)[0]
        elif t != 4:          # PadN
            raise NotSupported(what, f"SRH TLV type {t}")
        off += 2 + ln
    if hmac is None and flags & SR6_FLAG1_HMAC:
        raise NotSupported(what, "SRH with the HMAC flag and no HMAC TLV")
    return segs, hmac


def _seg6_encap(payload: bytes, what: str):
    """-> (Seg6Encap, tunsrc or None) from RTA_ENCAP of a seg6 route."""
    enc = None
    tunsrc = None
    for t, v in _attrs(payload):
        if t == 1:            # SEG6_IPTUNNEL_SRH: struct seg6_iptunnel_encap
            mode_id = struct.unpack_from("=i", v)[0]
            mode = _SEG6_MODES.get(mode_id)
            if mode is None:
                raise NotSupported(what, f"seg6 mode {mode_id}")
            segs, hmac = _srh_segments(v[4:], what)
            if mode == "inline":          # segments[0] is the slot of the old DA
                segs = segs[1:]
            enc = Seg6Encap(mode, tuple(reversed(segs)), hmac or None)
        elif t == 2 and len(v) == 16:     # SEG6_IPTUNNEL_SRC
            tunsrc = ipaddress.IPv6Address(v)
            if int(tunsrc) == 0:
                tunsrc = None
        else:
            raise NotSupported(what, f"seg6 encap attribute {t}")
    if enc is None:
        raise NotSupported(what, "seg6 encap without an SRH")
    return enc, tunsrc


def _seg6local_encap(payload: bytes, what: str, ifnames: dict) -> Seg6Local:
    at: dict = {}
    for t, v in _attrs(payload):
        if t == 1:
            a = _u32(v)
            name = _S6L_ACTIONS.get(a)
            if name is None or name in C.SEG6LOCAL_UNSUPPORTED:
                raise NotSupported(what, f"seg6local action {name or a}")
            at["action"] = name
        elif t == 2:
            at["srh"] = _srh_segments(v, what)
        elif t in (3, 9):
            at["table" if t == 3 else "vrftable"] = _u32(v)
        elif t == 4:
            at["nh4"] = ipaddress.IPv4Address(v[:4])
        elif t == 5:
            at["nh6"] = ipaddress.IPv6Address(v[:16])
        elif t in (6, 7):
            idx = _u32(v)
            if idx == 0:
                continue
            if idx not in ifnames:
                raise NotSupported(what, f"seg6local {'iif' if t == 6 else 'oif'} ifindex {idx} "
                                   "is not a device of this namespace")
            if t == 6:
                raise NotSupported(what, "seg6local iif")
            at["oif"] = ifnames[idx]
        elif t == 8:
            raise NotSupported(what, "seg6local BPF program (End.BPF)")
        elif t == 10:
            at["count"] = True
        elif t == 11:
            ops, lbl, nfl = 0, None, None
            for ft, fv in _attrs(v):
                if ft == 1:
                    ops = _u32(fv)
                elif ft == 2:
                    lbl = fv[0]
                elif ft == 3:
                    nfl = fv[0]
            fl = []
            for bit in range(32):
                if ops & (1 << bit):
                    if bit not in _FLV_BY_BIT:
                        raise NotSupported(what, f"seg6local flavor operation {bit}")
                    fl.append(_FLV_BY_BIT[bit])
            if "next-csid" not in fl:
                lbl = nfl = None
            at["flavors"] = (frozenset(fl), lbl, nfl)
        else:
            raise NotSupported(what, f"seg6local attribute {t}")
    if "srh" in at:
        segs, hmac = at["srh"]
        if at.get("action") == "End.B6":
            # End.B6 inserts the SRH: iproute2 (and fastpath) keep segments[0]
            # free for the packet's destination, End.B6.Encaps does not
            if int(segs[0]) != 0:
                raise NotSupported(what, "End.B6 srh whose segments[0] is not :: "
                                   "(iproute2 keeps that slot free)")
            segs = segs[1:]
        at["srh"] = (tuple(reversed(segs)), hmac or None)
    try:
        return C._build_seg6local(at, "seg6local")
    except C.ConfigError as e:
        raise NotSupported(what, f"seg6local {e.message}") from None


# ---------------------------------------------------------------------------
# one function per message type
def _describe_route(fam, prefix, table) -> str:
    return f"route {prefix} table {_table_name(table)}"


def route_from_msg(msg, ifnames: dict) -> Optional[Route]:
    """RTM_NEWROUTE -> fastpath.config.Route (None for a cache clone);
    NotSupported for what the model lacks.  ``ifnames``: ifindex -> name."""
    raw = _raw(msg)
    fam_id, dst_len, src_len, tos, table, proto, scope, rtype, flags = \
        struct.unpack_from("=BBBBBBBBI", raw, 16)
    fam = {2: 4, 10: 6}.get(fam_id)
    if fam is None:
        raise NotSupported(f"route of address family {fam_id}", "only IPv4 and IPv6")
    at = {}
    for t, v in _attrs(raw, 28):
        at.setdefault(t, v)
    table = _u32(at[RTA["TABLE"]]) if RTA["TABLE"] in at else table
    dst = _addr(fam, at[RTA["DST"]]) if RTA["DST"] in at else _addr(fam, bytes(16))
    prefix = ipaddress.ip_network((dst, dst_len), strict=False)
    what = _describe_route(fam, prefix, table)
    if flags & RTM_F_CLONED:
        return None
    tname = RTN_NAMES.get(rtype, str(rtype))
    if tname not in C.ROUTE_TYPES:
        raise NotSupported(what, f"route type {tname}")
    if src_len or RTA["SRC"] in at:
        raise NotSupported(what, "source-specific route (from)")
    if tos:
        raise NotSupported(what, f"TOS {tos}")
    for t in at:
        if t in (RTA["NH_ID"],):
            raise NotSupported(what, "nexthop object (nhid)")
        if t == RTA["VIA"]:
            raise NotSupported(what, "gateway of the other family (via inet6)")
        if t == RTA["EXPIRES"]:
            raise NotSupported(what, "expiring route")
        if t in (RTA["FLOW"],):
            raise NotSupported(what, "realms")
        if t in (RTA["IIF"], RTA["MARK"], RTA["UID"], RTA["NEWDST"], RTA["TTL_PROPAGATE"]):
            raise NotSupported(what, f"route attribute RTA_{_RTA_NAMES[t]}")
    ci = at.get(RTA["CACHEINFO"], b"")
    if len(ci) >= 12 and struct.unpack_from("=i", ci, 8)[0] != 0:
        raise NotSupported(what, "expiring route")
    if RTA["PREF"] in at and at[RTA["PREF"]][0] != 0:
        raise NotSupported(what, "IPv6 router preference other than medium")
    metric = _u32(at[RTA["PRIORITY"]]) if RTA["PRIORITY"] in at else 0
    pname = C.RT_PROTOS.get(proto, str(proto))
    if pname == "unspec":
        pname = "boot"
    src = _addr(fam, at[RTA["PREFSRC"]]) if RTA["PREFSRC"] in at else None
    mtu = hoplimit = None
    if RTA["METRICS"] in at:
        for t, v in _attrs(at[RTA["METRICS"]]):
            val = _u32(v)
            if t == RTAX_MTU:
                mtu = val or None
            elif t == RTAX_HOPLIMIT:
                hoplimit = val or None
            elif t == RTAX_LOCK:
                if val:
                    raise NotSupported(what, "locked route metric (mtu lock)")
            else:
                raise NotSupported(what, f"route metric {_RTAX_NAMES.get(t, t)}")

    def dev_of(idx):
        if idx not in ifnames:
            raise NotSupported(what, f"nexthop ifindex {idx} is not a device of this namespace")
        return ifnames[idx]

    def nh_flags(f):
        if f & RTNH_F_ONLINK:
            raise NotSupported(what, "onlink nexthop")
        if f & RTNH_F_PERVASIVE:
            raise NotSupported(what, "pervasive nexthop")

    nhs = []
    if RTA["MULTIPATH"] in at:
        mp = at[RTA["MULTIPATH"]]
        off = 0
        while off + 8 <= len(mp):
            ln, nflags, hops, idx = struct.unpack_from("=HBBi", mp, off)
            if ln < 8:
                break
            nh_flags(nflags)
            gw = None
            for t, v in _attrs(mp, off + 8, off + ln):
                if t == RTA["GATEWAY"]:
                    gw = _addr(fam, v)
                elif t in (RTA["ENCAP"], RTA["ENCAP_TYPE"]):
                    raise NotSupported(what, "per-nexthop encapsulation")
                elif t == RTA["VIA"]:
                    raise NotSupported(what, "gateway of the other family (via inet6)")
                elif t == RTA["FLOW"]:
                    raise NotSupported(what, "realms")
                else:
                    raise NotSupported(what, f"nexthop attribute {t}")
            nhs.append(Nexthop(gw, dev_of(idx), hops + 1))
            off += (ln + 3) & ~3
    else:
        nh_flags(flags)
        gw = _addr(fam, at[RTA["GATEWAY"]]) if RTA["GATEWAY"] in at else None
        dev = dev_of(_u32(at[RTA["OIF"]])) if RTA["OIF"] in at else None
        if gw is not None or dev is not None:
            nhs.append(Nexthop(gw, dev, 1))
    if tname in C.REJECT_TYPES:
        nhs = []              # IPv6 points reject routes at lo; the model has no nexthop
    encap = None
    tunsrc = None
    if RTA["ENCAP_TYPE"] in at:
        et = struct.unpack("=H", at[RTA["ENCAP_TYPE"]][:2])[0]
        payload = at.get(RTA["ENCAP"], b"")
        if et == LWTUNNEL_ENCAP_SEG6:
            encap, tunsrc = _seg6_encap(payload, what)
        elif et == LWTUNNEL_ENCAP_SEG6_LOCAL:
            encap = _seg6local_encap(payload, what, ifnames)
        else:
            raise NotSupported(what, f"encap type {LWT_NAMES.get(et, et)}")
    scope_name = None
    if fam == 4:
        scope_name = C.RT_SCOPES.get(scope, str(scope))
    return Route(fam, prefix, table, tname, metric, tuple(nhs), encap, pname, scope_name, src,
                 mtu, tunsrc, hoplimit)


def route_line(msg, ifnames: dict) -> Optional[str]:
    """RTM_NEWROUTE -> an ``ip route add`` line (see the module doc on the
    automatic routes, which the configuration language derives instead)."""
    r = route_from_msg(msg, ifnames)
    return None if r is None else C._route_add_line(r)


FIB_RULE_INVERT = 0x2
FRA = dict(DST=1, SRC=2, IIFNAME=3, GOTO=4, PRIORITY=6, FWMARK=10, FLOW=11, TUN_ID=12,
           SUPPRESS_IFGROUP=13, SUPPRESS_PREFIXLEN=14, TABLE=15, FWMASK=16, OIFNAME=17, PAD=18,
           L3MDEV=19, UID_RANGE=20, PROTOCOL=21, IP_PROTO=22, SPORT_RANGE=23, DPORT_RANGE=24,
           DSCP=25, FLOWLABEL=26, FLOWLABEL_MASK=27)
_FRA_NAMES = {v: k.lower() for k, v in FRA.items()}
_RULE_ACTS = {1: "lookup", 6: "blackhole", 7: "unreachable", 8: "prohibit", 2: "goto", 3: "nop"}


def rule_from_msg(msg, ifnames: dict) -> Rule:
    """RTM_NEWRULE -> fastpath.config.Rule; NotSupported for the selectors
    and actions the model lacks.  An l3mdev rule (FRA_L3MDEV: the kernel's
    own ``pref 1000 l3mdev`` of a VRF, or one added with ``ip rule add
    l3mdev``) is a lookup with table 0 and ``l3mdev``.  (FRA_PROTOCOL, who
    installed the rule, is not modelled and not kept.)"""
    raw = _raw(msg)
    fam_id, dst_len, src_len, tos, table, _r1, _r2, action, flags = \
        struct.unpack_from("=BBBBBBBBI", raw, 16)
    fam = {2: 4, 10: 6}.get(fam_id)
    at = {}
    for t, v in _attrs(raw, 28):
        at.setdefault(t, v)
    pref = _u32(at[FRA["PRIORITY"]]) if FRA["PRIORITY"] in at else 0
    what = f"rule pref {pref} (IPv{fam})"
    if fam is None:
        raise NotSupported(f"rule of address family {fam_id}", "only IPv4 and IPv6")
    if flags & FIB_RULE_INVERT:
        raise NotSupported(what, "'not'")
    if tos:
        raise NotSupported(what, "tos")
    act = _RULE_ACTS.get(action, str(action))
    if act not in C._RULE_ACTIONS:
        raise NotSupported(what, f"action {act}")
    l3mdev = False
    for t, v in at.items():
        if t in (FRA["DST"], FRA["SRC"], FRA["IIFNAME"], FRA["PRIORITY"], FRA["TABLE"],
                 FRA["PROTOCOL"], FRA["PAD"]):
            continue
        if t == FRA["L3MDEV"]:
            # fib_nl2rule: FRA_L3MDEV is a u8 that only 1 passes: look up the
            # table of the packet's VRF (vrf_add_fib_rules adds 'pref 1000
            # l3mdev' for both families with a namespace's first VRF)
            if v[:1] != b"\x01":
                raise NotSupported(what, f"l3mdev value {v[:1].hex()}")
            l3mdev = True
            continue
        if t in (FRA["SUPPRESS_PREFIXLEN"], FRA["SUPPRESS_IFGROUP"]) and _u32(v) == 0xFFFFFFFF:
            continue
        if t in (FRA["FWMARK"], FRA["FWMASK"]) and _u32(v) == 0:
            continue
        raise NotSupported(what, f"selector {_FRA_NAMES.get(t, t)}")
    src = dst = None
    if src_len or FRA["SRC"] in at:
        src = ipaddress.ip_network((_addr(fam, at[FRA["SRC"]]), src_len))
    if dst_len or FRA["DST"] in at:
        dst = ipaddress.ip_network((_addr(fam, at[FRA["DST"]]), dst_len))
    iif = None
    if FRA["IIFNAME"] in at:
        iif = at[FRA["IIFNAME"]].rstrip(b"\0").decode("utf-8", "surrogateescape")
        if iif not in ifnames.values():
            raise NotSupported(what, f"iif {iif} is not a device of this namespace")
    tb = _u32(at[FRA["TABLE"]]) if FRA["TABLE"] in at else table
    if l3mdev:
        if act != "lookup" or tb:
            raise NotSupported(what, f"l3mdev with {act} table {tb}")
        return Rule(fam, pref, src, dst, iif, 0, "lookup", True)
    if act != "lookup":
        tb = 0
    return Rule(fam, pref, src, dst, iif, tb, act)


def rule_line(msg, ifnames: dict) -> str:
    return C._rule_line(rule_from_msg(msg, ifnames), "add")


IFF_UP = 0x1
ARPHRD_LOOPBACK = 772


def _link_info(msg) -> dict:
    """The fields of an RTM_NEWLINK the model uses, decoded by pyroute2."""
    li = msg.get_attr("IFLA_LINKINFO")
    kind = data = None
    if li is not None:
        kind = li.get_attr("IFLA_INFO_KIND")
        data = li.get_attr("IFLA_INFO_DATA")
    return dict(index=msg["index"], name=msg.get_attr("IFLA_IFNAME"), up=bool(msg["flags"] & IFF_UP),
                mtu=msg.get_attr("IFLA_MTU"), mac=msg.get_attr("IFLA_ADDRESS"),
                type=msg["ifi_type"], kind=kind, data=data, link=msg.get_attr("IFLA_LINK"),
                master=msg.get_attr("IFLA_MASTER"), netnsid=msg.get_attr("IFLA_LINK_NETNSID"))


def veth_peer_elsewhere(L: dict, links: dict) -> bool:
    """Whether the veth ``L`` (``_link_info``) has its peer in another
    namespace: IFLA_LINK_NETNSID says so (rtnl_fill_link_netnsid: the peer's
    namespace is not the device's; its IFLA_LINK is then an ifindex over
    there), and so does an IFLA_LINK that is no device of ``links``."""
    return L["netnsid"] is not None or L["link"] not in links


def link_lines(msg, links: dict) -> list:
    """RTM_NEWLINK -> the lines that create the device and set it (mtu,
    address, up/down).  ``links``: ifindex -> RTM_NEWLINK of every device (for
    masters, peers and parents).  A veth pair is created at its first end
    (lower ifindex); the other end returns only its settings.  A veth whose
    peer is in another namespace is written as a NIC is (created by
    mention, ``ip link set dev X up``, then its settings)."""
    L = _link_info(msg)
    name = L["name"]
    q = C._q(name)
    what = f"link {name}"
    mi = None
    if L["master"]:
        m = links.get(L["master"])
        mi = _link_info(m) if m is not None else {"name": f"ifindex {L['master']}", "kind": None}
        if mi["kind"] != "vrf":
            raise NotSupported(what, f"enslaved to {mi['name']} ({mi['kind'] or 'master'})")
    kind = L["kind"]
    lines = []
    if L["type"] == ARPHRD_LOOPBACK and name == "lo":
        pass
    elif kind == "vrf":
        table = L["data"].get_attr("IFLA_VRF_TABLE") if L["data"] is not None else None
        if not table:
            raise NotSupported(what, "VRF device without IFLA_VRF_TABLE")
        lines.append(f"ip link add {q} type vrf table {table}")
    elif kind == "tun":
        ttype = L["data"].get_attr("IFLA_TUN_TYPE") if L["data"] is not None else 1
        lines.append(f"ip tuntap add dev {q} mode {'tap' if ttype == 2 else 'tun'}")
    elif kind == "dummy":
        lines.append(f"ip link add {q} type dummy")
    elif kind == "veth" and veth_peer_elsewhere(L, links):
        # the other end is another namespace's: this end is a wire out of
        # the namespace, as a NIC is (created by mention; fastpath.run
        # attaches to it by name)
        lines.append(f"ip link set dev {q} up")
    elif kind == "veth":
        peer = _link_info(links[L["link"]])
        if L["index"] < peer["index"]:
            # veth_newlink registers the peer first: 'ip link add B peer name A'
            lines.append(f"ip link add {C._q(peer['name'])} type veth peer name {q}")
    elif kind == "vlan":
        data = L["data"]
        vid = data.get_attr("IFLA_VLAN_ID") if data is not None else None
        proto = data.get_attr("IFLA_VLAN_PROTOCOL") if data is not None else None
        if proto not in (None, 0x8100, 0x0081, "802.1Q"):
            raise NotSupported(what, f"VLAN protocol {proto} (only 802.1Q)")
        if L["link"] not in links:
            raise NotSupported(what, "VLAN whose parent is in another namespace")
        parent = _link_info(links[L["link"]])["name"]
        lines.append(f"ip link add link {C._q(parent)} name {q} type vlan id {vid}")
    elif kind is None:
        lines.append(f"ip link set dev {q} up")
    else:
        raise NotSupported(what, f"link type {kind}")
    settings = [f"mtu {L['mtu']}"]
    if L["mac"] and name != "lo":
        mac = C._parse_mac(L["mac"])
        if any(mac) and not mac[0] & 1:
            settings.append(f"address {C._mac_str(mac)}")
    settings.append("up" if L["up"] else "down")
    lines.append(f"ip link set dev {q} {' '.join(settings)}")
    # IFLA_MASTER: written by the later of the device and its VRF (ifindex
    # order), once both exist
    if mi is not None and L["master"] < L["index"]:
        lines.append(f"ip link set dev {q} master {C._q(mi['name'])}")
    if kind == "vrf":
        for idx in sorted(links):
            o = _link_info(links[idx])
            if o["master"] == L["index"] and idx < L["index"]:
                lines.append(f"ip link set dev {C._q(o['name'])} master {q}")
    return lines


IFA_F_TEMPORARY, IFA_F_NOPREFIXROUTE, IFA_F_MANAGETEMPADDR = 0x01, 0x200, 0x100
IFA_F_SECONDARY = 0x01
INFINITY_LIFE_TIME = 0xFFFFFFFF


def addr_line(msg, ifnames: dict) -> str:
    """RTM_NEWADDR -> ``ip -4|-6 addr add A/LEN dev D``; NotSupported for
    what the model lacks (see the module doc)."""
    fam = {2: 4, 10: 6}.get(msg["family"])
    dev = ifnames.get(msg["index"], f"ifindex {msg['index']}")
    local = msg.get_attr("IFA_LOCAL")
    address = msg.get_attr("IFA_ADDRESS")
    a = local or address
    what = f"address {a}/{msg['prefixlen']} dev {dev}"
    if fam is None:
        raise NotSupported(what, f"address family {msg['family']}")
    flags = msg.get_attr("IFA_FLAGS")
    flags = msg["flags"] if flags is None else flags
    if fam == 6 and flags & IFA_F_TEMPORARY:
        raise NotSupported(what, "temporary (privacy) address")
    if flags & IFA_F_NOPREFIXROUTE:
        raise NotSupported(what, "noprefixroute")
    if flags & IFA_F_MANAGETEMPADDR:
        raise NotSupported(what, "mngtmpaddr")
    if fam == 4 and local is not None and address is not None and local != address:
        raise NotSupported(what, f"peer address {address}")
    if fam == 6 and local is not None and address is not None and local != address:
        raise NotSupported(what, f"peer address {address}")
    label = msg.get_attr("IFA_LABEL")
    if label is not None and label != dev:
        raise NotSupported(what, f"label {label}")
    ci = msg.get_attr("IFA_CACHEINFO")
    if ci is not None and (ci["ifa_valid"] != INFINITY_LIFE_TIME
                           or ci["ifa_preferred"] != INFINITY_LIFE_TIME):
        raise NotSupported(what, "finite lifetime (valid_lft/preferred_lft)")
    itf = ipaddress.ip_interface(f"{a}/{msg['prefixlen']}")
    if fam == 4:
        default_scope = 254 if itf.ip.is_loopback else 0
        if msg["scope"] != default_scope:
            raise NotSupported(what, f"scope {C.RT_SCOPES.get(msg['scope'], msg['scope'])}")
        brd = msg.get_attr("IFA_BROADCAST")
        if brd is not None and itf.network.prefixlen < 31 and \
                ipaddress.IPv4Address(brd) != itf.network.broadcast_address:
            raise NotSupported(what, f"broadcast {brd}")
    return f"ip -{fam} addr add {itf} dev {C._q(dev)}"


NUD_INCOMPLETE, NUD_NOARP, NUD_PERMANENT, NUD_FAILED = 0x01, 0x40, 0x80, 0x20
NTF_PROXY, NTF_ROUTER = 0x08, 0x80


def neigh_line(msg, ifnames: dict, links: Optional[dict] = None) -> Optional[str]:
    """RTM_NEWNEIGH -> ``ip neigh add ... nud permanent``, or None for the
    entries that are not configuration (no link-layer address, or a NOARP
    entry the kernel made itself: multicast/broadcast, loopback).  A proxy
    entry (NTF_PROXY: the pneigh dump, ``dump_proxies``) -> ``ip -4|-6
    neigh add proxy ADDR dev DEV [router]``."""
    fam = {2: 4, 10: 6}.get(msg["family"])
    if fam is None:
        return None
    dst = msg.get_attr("NDA_DST")
    ll = msg.get_attr("NDA_LLADDR")
    dev = ifnames.get(msg["ifindex"])
    proxy = bool(msg["flags"] & NTF_PROXY)
    what = f"{'proxy ' if proxy else ''}neighbour {dst} dev {dev or 'ifindex %d' % msg['ifindex']}"
    if dev is None:
        raise NotSupported(what, f"ifindex {msg['ifindex']} is not a device of this namespace")
    if proxy:
        # a pneigh entry (pneigh_fill_info: NUD_NONE, the entry's flags)
        if dst is None:
            raise NotSupported(what, "proxy entry without an address")
        if msg["flags"] & ~(NTF_PROXY | NTF_ROUTER):
            raise NotSupported(what, f"proxy entry flags {msg['flags']:#x}")
        return (f"ip -{fam} neigh add proxy {ipaddress.ip_address(dst)} dev {C._q(dev)}"
                + (" router" if msg["flags"] & NTF_ROUTER else ""))
    state = msg["state"]
    a = ipaddress.ip_address(dst)
    if not ll or state & (NUD_INCOMPLETE | NUD_FAILED):
        return None
    if state & NUD_NOARP and (a.is_multicast or dev == "lo" or
                              (fam == 4 and int(a) == 0xFFFFFFFF)):
        return None
    mac = C._parse_mac(ll)
    if len(mac) != 6:
        raise NotSupported(what, "link-layer address not 6 bytes")
    return f"ip -{fam} neigh add {a} lladdr {C._mac_str(mac)} dev {C._q(dev)} nud permanent"


# ---------------------------------------------------------------------------
# raw rtnetlink requests pyroute2's API does not make: the proxy (pneigh)
# dump needs NTF_PROXY in the request's ndm_flags
NETLINK_ROUTE = 0
RTM_GETLINK, RTM_GETNEIGH = 18, 30


def route_socket(nspath: Optional[str]):
    """An unbound NETLINK_ROUTE socket of the namespace at ``nspath`` (None:
    this process's): a socket belongs to the namespace it was made in."""
    from .oracle import _in_netns
    with _in_netns(nspath) if nspath is not None else contextlib.nullcontext():
        return socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)


def rtnl_socket(nspath: Optional[str]):
    """A NETLINK_ROUTE socket of the namespace at ``nspath`` (None: this
    process's), bound, for ``dump_proxies`` / ``get_link``."""
    s = route_socket(nspath)
    try:
        s.bind((0, 0))
        s.settimeout(5)
    except BaseException:
        s.close()
        raise
    return s


def _rtnl_request(sock, typ: int, flags: int, body: bytes) -> list:
    """Send one netlink request (rtnetlink or generic netlink); -> the
    answers' raw messages (header included) up to NLMSG_DONE or the ACK;
    OSError for an error answer."""
    seq = next(_seq)
    sock.send(struct.pack("=IHHII", 16 + len(body), typ, NLM_F_REQUEST | flags, seq, 0) + body)
    out = []
    while True:
        data = sock.recv(1 << 20)
        off = 0
        while off + 16 <= len(data):
            ln, mtyp, _fl, mseq, _pid = struct.unpack_from("=IHHII", data, off)
            if ln < 16:
                break
            here, off = off, off + ((ln + 3) & ~3)
            if mseq != seq:
                continue
            if mtyp == NLMSG_ERROR:
                err = struct.unpack_from("=i", data, here + 16)[0]
                if err:
                    raise OSError(-err, os.strerror(-err))
                return out
            if mtyp == NLMSG_DONE:
                return out
            out.append(bytes(data[here:here + ln]))


def dump_proxies(sock) -> list:
    """The proxy entries (``ip neigh show proxy``: pneigh_dump_table, asked
    for with ndm_flags == NTF_PROXY) of both families, as pyroute2 ndmsg."""
    from pyroute2.netlink.rtnl.ndmsg import ndmsg
    out = []
    for fam in (socket.AF_INET, socket.AF_INET6):
        body = struct.pack("=BBHiHBB", fam, 0, 0, 0, 0, NTF_PROXY, 0)
        for raw in _rtnl_request(sock, RTM_GETNEIGH, NLM_F_DUMP, body):
            m = ndmsg(raw)
            m.decode()
            if m["flags"] & NTF_PROXY:
                out.append(m)
    return out


def get_link(sock, index: int):
    """The RTM_NEWLINK of one device (pyroute2 ifinfmsg), None when it is gone."""
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
    body = struct.pack("=BBHiII", 0, 0, 0, index, 0, 0)
    try:
        msgs = _rtnl_request(sock, RTM_GETLINK, NLM_F_ACK, body)
    except OSError as e:
        if e.errno == errno.ENODEV:
            return None
        raise
    for raw in msgs:
        m = ifinfmsg(raw)
        m.decode()
        return m
    return None


# ---------------------------------------------------------------------------
# SEG6 generic netlink (tunsrc, HMAC keys)
NETLINK_GENERIC = 16
GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME = 0x10, 3, 1, 2
SEG6_CMD_DUMPHMAC, SEG6_CMD_GET_TUNSRC = 2, 4
SEG6_ATTR_DST, SEG6_ATTR_HMACKEYID, SEG6_ATTR_SECRET, SEG6_ATTR_ALGID = 1, 3, 4, 6
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 1, 4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
_HMAC_ALGOS = {1: "sha1", 2: "sha256"}


def _nla(t: int, payload: bytes) -> bytes:
    b = struct.pack("=HH", 4 + len(payload), t) + payload
    return b + b"\0" * (-len(b) % 4)


_seq = itertools.count(1)


def _genl_request(sock, family: int, cmd: int, flags: int, attrs: bytes = b"") -> list:
    """Send one request (with NLM_F_ACK or NLM_F_DUMP) and read its answers
    up to the ACK or NLMSG_DONE; -> [{attr type: payload}]."""
    body = struct.pack("=BBH", cmd, 1, 0) + attrs
    return [dict(_attrs(m, 20, len(m))) for m in _rtnl_request(sock, family, flags, body)]


def _read_seg6_genl(nspath: Optional[str]):
    """(tunsrc or None, {keyid: (algo, secret)}, notes)."""
    from .oracle import _in_netns
    notes = []
    if nspath is not None:
        with _in_netns(nspath):
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
    else:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
    try:
        s.bind((0, 0))
        s.settimeout(5)
        try:
            fam = _genl_request(s, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, NLM_F_ACK,
                                _nla(CTRL_ATTR_FAMILY_NAME, b"SEG6\0"))
        except OSError:
            return None, {}, ["no SEG6 generic netlink family: tunsrc and HMAC keys not read"]
        fid = struct.unpack("=H", fam[0][CTRL_ATTR_FAMILY_ID][:2])[0]
        msgs = _genl_request(s, fid, SEG6_CMD_GET_TUNSRC, NLM_F_ACK)
        tunsrc = None
        if msgs and SEG6_ATTR_DST in msgs[0]:
            a = ipaddress.IPv6Address(msgs[0][SEG6_ATTR_DST][:16])
            tunsrc = None if int(a) == 0 else a
        keys = {}
        try:
            dump = _genl_request(s, fid, SEG6_CMD_DUMPHMAC, NLM_F_DUMP)
        except PermissionError:
            return tunsrc, {}, ["HMAC keys not read (the kernel gives them only to CAP_NET_ADMIN); "
                                "give them with --hmac-file"]
        for m in dump:
            kid = _u32(m[SEG6_ATTR_HMACKEYID])
            alg = _HMAC_ALGOS.get(m.get(SEG6_ATTR_ALGID, b"\0")[0])
            if alg is None:
                raise NotSupported(f"hmac key {kid}", f"algorithm id {m.get(SEG6_ATTR_ALGID)}")
            keys[kid] = (alg, m.get(SEG6_ATTR_SECRET, b""))
        return tunsrc, keys, notes
    finally:
        s.close()


# ---------------------------------------------------------------------------
# reading a namespace
def netns_path(netns: Optional[str]) -> Optional[str]:
    """/run/netns/NAME for a named namespace (KernelImportError when it does
    not exist); None for this process's namespace."""
    if netns is None:
        return None
    if not netns or "/" in netns or netns in (".", ".."):
        raise KernelImportError(f"invalid network namespace name {netns!r}")
    path = os.path.join(NETNS_RUN_DIR, netns)
    if not os.path.exists(path):
        raise KernelImportError(f"network namespace {netns!r} does not exist (no {path})")
    return path


@dataclass
class Snapshot:
    """Everything read from one namespace, as pyroute2 messages."""
    links: list = field(default_factory=list)
    addrs: list = field(default_factory=list)
    routes: list = field(default_factory=list)
    rules: list = field(default_factory=list)
    neighbours: list = field(default_factory=list)
    proxies: list = field(default_factory=list)       # pneigh entries (NTF_PROXY)
    sysctls: dict = field(default_factory=dict)
    tunsrc: Optional[ipaddress.IPv6Address] = None
    hmac_keys: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


#: per-device sysctls the configuration language accepts but fastpath gives no
#: effect (fastpath.config: "accepted, no effect"; redirects are not
#: generated): not imported, so that an import says only what matters
NO_EFFECT_SYSCTLS = frozenset({"accept_ra", "router_solicitations", "addr_gen_mode", "accept_dad",
                               "autoconf", "dad_transmits", "accept_redirects",
                               "keep_addr_on_down", "send_redirects"})


def _conf_keys(fam: int) -> list:
    table = C._CONF4 if fam == 4 else C._CONF6
    return [k for k in table if k not in NO_EFFECT_SYSCTLS]


def _dev_sysctls(dev: str) -> list:
    """The modelled net.ipv{4,6}.conf.DEV.* and (not for "all", which has
    none) net.ipv{4,6}.neigh.DEV.* (proxy_delay, proxy_qlen) names."""
    names = [f"net.ipv{fam}.conf.{dev}.{k}" for fam in (4, 6) for k in _conf_keys(fam)]
    if dev != "all":
        names += [f"net.ipv{fam}.neigh.{dev}.{k}" for fam in (4, 6) for k in C._NEIGH]
    return names


def _sysctl_names(ifnames) -> list:
    names = list(C._GLOBALS)
    for dev in ["all", "default", *ifnames]:
        names += _dev_sysctls(dev)
        names.append(f"net.ipv6.conf.{dev}.disable_ipv6")
    return names


def _read_sysctls(nspath: Optional[str], ifnames) -> dict:
    from contextlib import nullcontext
    from .oracle import _in_netns
    out = {}
    with (_in_netns(nspath) if nspath else nullcontext()):
        for name in _sysctl_names(ifnames):
            parts = name.split(".")
            if parts[2] in ("conf", "neigh"):
                path = os.path.join("/proc/sys", *parts[:3], ".".join(parts[3:-1]), parts[-1])
            else:
                path = os.path.join("/proc/sys", *parts)
            try:
                with open(path) as f:
                    v = f.read().strip()
            except OSError:
                continue
            out[name] = v
    return out


def read_snapshot(netns: Optional[str] = None) -> Snapshot:
    """Dump links, addresses, routes (every table), rules, neighbours of the
    namespace with pyroute2, its proxy entries, SEG6 settings and sysctls."""
    path = netns_path(netns)
    try:
        from pyroute2 import IPRoute
    except ImportError:
        raise KernelImportError("pyroute2 is not installed (pip install pyroute2)") from None
    snap = Snapshot()
    try:
        ipr = IPRoute(netns=netns) if netns is not None else IPRoute()
    except Exception as e:
        raise KernelImportError(f"cannot open rtnetlink in {netns or 'this namespace'}: {e}") from e
    try:
        snap.links = sorted(ipr.get_links(), key=lambda m: m["index"])
        snap.addrs = list(ipr.get_addr())
        for fam in (socket.AF_INET, socket.AF_INET6):
            snap.routes += list(ipr.route("dump", family=fam))
            snap.rules += list(ipr.get_rules(family=fam))
            snap.neighbours += list(ipr.get_neighbours(family=fam))
        sock = rtnl_socket(path)
        try:
            snap.proxies = dump_proxies(sock)
        finally:
            sock.close()
    except Exception as e:
        raise KernelImportError(f"reading {netns or 'this namespace'} over rtnetlink: {e}") from e
    finally:
        ipr.close()
    # the namespace may have gone while we read it
    netns_path(netns)
    ifnames = [m.get_attr("IFLA_IFNAME") for m in snap.links]
    snap.sysctls = _read_sysctls(path, ifnames)
    snap.tunsrc, snap.hmac_keys, notes = _read_seg6_genl(path)
    snap.notes += notes
    return snap


# ---------------------------------------------------------------------------
# building the configuration
def _apply(lines: list, what: str = "") -> State:
    try:
        return State().apply("\n".join(lines))
    except C.ConfigError as e:
        raise KernelImportError(f"the imported configuration does not apply{what}: {e}") from None


def _route_sort_key(r: Route):
    return (r.family, r.table, r.prefix.version, _net_int(r.prefix), r.prefix.prefixlen,
            r.metric)


def _addr_order(msgs: list) -> list:
    """Kernel address dump order -> the order to add them in.  IPv4: as
    listed (primaries, then secondaries).  IPv6: the kernel lists by scope,
    global first, each scope newest first; reversed, that is the order they
    were added in within a scope, and the narrower scopes (::1, fe80::, which
    the kernel adds when a device comes up) before the global ones."""
    v4 = [m for m in msgs if m["family"] == socket.AF_INET]
    v6 = [m for m in msgs if m["family"] == socket.AF_INET6]
    return v4 + v6[::-1]


def _parse_hmac_file(text: str, where: str) -> dict:
    st = State()
    try:
        st = st.apply(text)
    except C.ConfigError as e:
        raise KernelImportError(f"{where}: {e}") from None
    return dict(st.hmac_keys)


def state_from_snapshot(snap: Snapshot, hmac_keys: Optional[dict] = None) -> tuple:
    """-> (State, text, notes): the configuration of a snapshot."""
    notes = list(snap.notes)
    links = {m["index"]: m for m in snap.links}
    ifnames = {i: m.get_attr("IFLA_IFNAME") for i, m in links.items()}
    sy = snap.sysctls

    # sysctls: global, then all/default (before the devices: they inherit default)
    lines: list = []
    fresh = State()

    def sysctl_lines(names, staged):
        out = []
        for n in names:
            if n not in sy:
                continue
            v = sy[n]
            try:
                have = staged.sysctl(n)
            except KeyError:
                continue
            try:
                iv = int(v)
            except ValueError:
                raise NotSupported(f"sysctl {n}", f"value {v!r}") from None
            if iv != have:
                parts = n.split(".")
                dev = ".".join(parts[3:-1]) if parts[2] in ("conf", "neigh") else ""
                name = (f"net/{parts[1]}/{parts[2]}/{dev}/{parts[-1]}" if "." in dev else n)
                out.append(f"sysctl -w {C._q(f'{name}={iv}')}")
        return out

    lines += sysctl_lines(list(C._GLOBALS), fresh)
    for scope in ("all", "default"):
        staged = _apply(lines, " (sysctls)")
        lines += sysctl_lines(_dev_sysctls(scope), staged)
    for dev in ifnames.values():
        if sy.get(f"net.ipv6.conf.{dev}.disable_ipv6", "0") not in ("0",):
            raise NotSupported(f"link {dev}", f"IPv6 disabled (net.ipv6.conf.{dev}.disable_ipv6)")
    # links, in ifindex order
    for idx in sorted(links):
        lines += link_lines(links[idx], links)
        L = _link_info(links[idx])
        if L["kind"] == "veth" and veth_peer_elsewhere(L, links):
            notes.append(f"link {L['name']}: a veth whose peer is in another namespace "
                         f"(link-netnsid {L['netnsid']}): an interface, as a NIC is "
                         "(python -m fastpath.run --netns NS attaches to it)")
    staged = _apply(lines, " (links)")
    for dev in ifnames.values():
        lines += sysctl_lines(_dev_sysctls(dev), staged)
    # addresses, per device
    by_dev: dict = {}
    for m in snap.addrs:
        by_dev.setdefault(m["index"], []).append(m)
    for idx in sorted(by_dev):
        if idx not in ifnames:
            raise NotSupported(f"address on ifindex {idx}", "not a device of this namespace")
        want = [addr_line(m, ifnames) for m in _addr_order(by_dev[idx])]
        if ifnames[idx] == "lo":
            # lo starts with 127.0.0.1/8 and ::1/128 in fastpath
            dflt = [f"ip -{a.version} addr add {a} dev lo" for a in fresh.interfaces["lo"].addrs]
            lines += [d.replace(" add ", " del ", 1) for d in dflt if d not in want]
            want = [w for w in want if w not in dflt]
        lines += want
    if 1 in ifnames and 1 not in by_dev:        # lo without addresses (down in a fresh namespace)
        lines += [f"ip -{a.version} addr del {a} dev lo" for a in fresh.interfaces["lo"].addrs]
    # neighbours
    for m in snap.neighbours:
        ln = neigh_line(m, ifnames, links)
        if ln is None:
            st = m["state"]
            notes.append(f"neighbour {m.get_attr('NDA_DST')} dev {ifnames.get(m['ifindex'])} "
                         f"(state {st:#x}) left out: not configuration")
        else:
            lines.append(ln)
    for m in snap.proxies:
        lines.append(neigh_line(m, ifnames, links))
    # SRv6
    if snap.tunsrc is not None:
        lines.append(f"ip sr tunsrc set {snap.tunsrc}")
    keys = dict(snap.hmac_keys)
    keys.update(hmac_keys or {})
    for kid, (algo, secret) in sorted(keys.items()):
        lines.append(f"ip sr hmac set {kid} {algo} {C._q(secret.decode('utf-8', 'surrogateescape'))}")
    staged = _apply(lines, " (addresses, neighbours, SRv6)")
    # routes: the kernel's set replaces the automatic ones
    final: dict = {}
    dups: dict = {}
    for m in snap.routes:
        r = route_from_msg(m, ifnames)
        if r is None:
            continue
        k = r.key
        if k in final:
            old = final[k]
            if r.proto == "kernel" and old.proto == "kernel":
                if r == staged.routes.get(k):
                    final[k] = r
                dups.setdefault(k, [old.dev]).append(r.dev)
                continue
            raise NotSupported(f"{_describe_route(r.family, r.prefix, r.table)} metric {r.metric}",
                               "a second route with the same table, prefix and metric "
                               "(IPv4 alternative routes, IPv6 non-ECMP duplicates)")
        final[k] = r
    for k, r in list(final.items()):
        # the kernel keeps some automatic routes of a device that is down (the
        # subnet-router anycast route of an address added while down); fastpath
        # derives a down device's automatic routes from its IPv4 addresses only
        if (r.proto == "kernel" and r.nexthops and staged.routes.get(k) != r
                and all(nh.dev in staged.interfaces and not staged.interfaces[nh.dev].up
                        for nh in r.nexthops)):
            del final[k]
            notes.append(f"{_describe_route(r.family, r.prefix, r.table)} ({r.type}, proto "
                         f"kernel) on {r.dev}, which is down, left out: fastpath does not derive "
                         "it for a device that is down")
    for k, devs in dups.items():
        r = final[k]
        notes.append(f"{_describe_route(r.family, r.prefix, r.table)} metric {r.metric} "
                     f"(proto kernel): the kernel has one per interface ({', '.join(devs)}), "
                     f"fastpath's configuration one ({r.dev}'s), its lookups the others too "
                     "(derived from the interfaces)")
    state = staged.copy()
    state.routes = {r.key: r for r in sorted(final.values(), key=_route_sort_key)}
    # rules, in kernel order (by pref; equal prefs in insertion order)
    for fam in (4, 6):
        state.rules[fam] = [x for x in (rule_from_msg(m, ifnames) for m in snap.rules
                                        if {2: 4, 10: 6}.get(m["family"]) == fam)]
    state = canonical(state)
    # check that the text rebuilds the state
    try:
        text = state.dump()
    except ValueError as e:
        raise KernelImportError(f"cannot write the imported state as configuration: {e}") from None
    again = _apply(text.splitlines(), " (round trip)")
    if again != state:
        diff = [k for k in State._FIELDS if getattr(again, k) != getattr(state, k)]
        detail = ""
        if again.routes != state.routes:
            ks = [k for k in state.routes.keys() | again.routes.keys()
                  if state.routes.get(k) != again.routes.get(k)]
            r = state.routes.get(ks[0]) or again.routes[ks[0]]
            detail = (f"; first: {_describe_route(r.family, r.prefix, r.table)} metric "
                      f"{r.metric}: kernel {state.routes.get(ks[0])}, as configured "
                      f"{again.routes.get(ks[0])}")
        raise NotSupported("the state", "it cannot be written exactly as configuration "
                           f"(differs in: {', '.join(diff)}{detail})")
    return state, text, notes


def canonical(state: State) -> State:
    """A copy of ``state`` in the order an import writes: per interface IPv4
    addresses before IPv6 ones, IPv4 primaries before secondaries (each in
    the order given), routes by (family, table, prefix, metric), neighbours
    and proxy entries by (device, family, address).  Two
    configurations that differ only in what the kernel does not keep compare
    equal (and dump equal) once canonical."""
    s = state.copy()
    for itf in s.interfaces.values():
        def key(ia, addrs=list(itf.addrs)):
            k = next(i for i, x in enumerate(addrs) if x is ia)
            secondary = ia.version == 4 and any(x.version == 4 and x.network == ia.network
                                                for x in addrs[:k])
            return (ia.version, secondary, k)
        itf.addrs.sort(key=key)
    s.routes = {r.key: r for r in sorted(s.routes.values(), key=_route_sort_key)}
    idx = {n: i.ifindex for n, i in s.interfaces.items()}
    s.neighbours = dict(sorted(s.neighbours.items(),
                               key=lambda kv: (idx.get(kv[0][0], 0), kv[0][1].version, int(kv[0][1]))))
    s.proxies = dict(sorted(s.proxies.items(),
                            key=lambda kv: (idx.get(kv[0][0], 0), kv[0][1].version, int(kv[0][1]))))
    return s


def import_state(netns: Optional[str] = None, hmac_file: Optional[str] = None) -> State:
    return _import(netns, hmac_file)[0]


def _import(netns, hmac_file):
    keys = None
    if hmac_file is not None:
        try:
            with open(hmac_file, encoding="utf-8", errors="surrogateescape") as f:
                keys = _parse_hmac_file(f.read(), hmac_file)
        except OSError as e:
            raise KernelImportError(f"cannot read {hmac_file}: {e.strerror}") from None
    snap = read_snapshot(netns)
    return state_from_snapshot(snap, keys)


def import_text(netns: Optional[str] = None, hmac_file: Optional[str] = None,
                header: bool = True) -> str:
    """The configuration of a namespace as text (``Router.dump()`` syntax);
    with ``header``, ``#`` comment lines first saying where it came from and
    the notes (what was left out and why)."""
    state, text, notes = _import(netns, hmac_file)
    if not header:
        return text
    head = [f"# imported by python -m fastpath.kernel import from "
            f"{'namespace ' + netns if netns else 'this network namespace'}"]
    head += [f"# note: {n}" for n in notes]
    return "\n".join(head) + "\n" + text

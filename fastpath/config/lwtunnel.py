"""The lightweight-tunnel encaps of routes, as ip/iproute_lwtunnel.c parses
and prints them: the seg6local behaviour table (``SEG6LOCAL_ACTIONS``, the
kernel's ``seg6_action_table`` in net/ipv6/seg6_local.c) and its uapi
numbers (include/uapi/linux/seg6_local.h, seg6_iptunnel.h), the route
attributes ``Seg6Local`` (struct seg6_local_lwt) and ``Seg6Encap`` (struct
seg6_iptunnel_encap, net/ipv6/seg6_iptunnel.c), their parsing
(parse_encap_seg6local / parse_encap_seg6, checked as seg6_local_build_state
and seg6_build_state check them) and their ``dump`` arguments."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional, TYPE_CHECKING

from .errors import ConfigError, _err, _unsupported
from .objects import Route
from .lexer import _check_ifname, _Cur, _num, _parse_addr, _q, _table, _table_str

if TYPE_CHECKING:
    from .route import _RouteSpec


#: seg6local netlink attributes (SEG6_LOCAL_*), by config keyword
SEG6LOCAL_ATTRS = {"action": 1, "srh": 2, "table": 3, "nh4": 4, "nh6": 5, "iif": 6, "oif": 7,
                   "bpf": 8, "vrftable": 9, "count": 10, "flavors": 11}
#: flavor operations (SEG6_LOCAL_FLV_OP_*)
SEG6LOCAL_FLAVORS = {"psp": 1, "usp": 2, "usd": 3, "next-csid": 4}
#: seg6 headend modes (SEG6_IPTUN_MODE_*)
SEG6_ENCAP_MODES = {"inline": 0, "encap": 1, "l2encap": 2, "encap.red": 3, "l2encap.red": 4}
#: actions iproute2 knows that the model rejects (11-14: no kernel descriptor; 15: BPF)
SEG6LOCAL_UNSUPPORTED = {"End.BM": 11, "End.S": 12, "End.AS": 13, "End.AM": 14, "End.BPF": 15}

NEXT_CSID_LBLEN, NEXT_CSID_NFLEN = 32, 16        # SEG6_LOCAL_LCBLOCK_DBITS / LCNODE_FN_DBITS


@dataclass(frozen=True)
class ActionDesc:
    """One row of the kernel's ``seg6_action_table``.

    ``required``/``optional`` name config keywords (keys of SEG6LOCAL_ATTRS);
    ``one_of``: exactly one of these must be given (End.DT6: table/vrftable);
    ``flavors``: flavor operations fastpath accepts; ``kernel_flavors``: those
    Linux accepts (``seg6_flv_supp_ops_by_action``).
    """
    name: str
    uapi: int
    required: frozenset
    optional: frozenset
    kernel_fn: str
    flavors: frozenset = frozenset()
    kernel_flavors: frozenset = frozenset()
    one_of: tuple = ()

    @property
    def allowed(self) -> frozenset:
        return self.required | self.optional


def _desc(name, uapi, req, opt, fn, flv=(), kflv=(), one_of=()):
    return ActionDesc(name, uapi, frozenset(req), frozenset(opt), fn, frozenset(flv),
                      frozenset(kflv), tuple(one_of))


_RFC8986 = ("psp", "usp", "usd")
#: the seg6local behaviours (net/ipv6/seg6_local.c seg6_action_table), by canonical name
SEG6LOCAL_ACTIONS: dict[str, ActionDesc] = {d.name: d for d in (
    _desc("End", 1, (), ("count", "flavors"), "input_action_end",
          _RFC8986 + ("next-csid",), ("psp", "next-csid")),
    _desc("End.X", 2, ("nh6",), ("oif", "count", "flavors"), "input_action_end_x",
          _RFC8986 + ("next-csid",), ("next-csid",)),
    # the kernel's End.T row has no SEG6_F_LOCAL_FLAVORS: it takes any flavors
    # and ignores them (runs plain End.T), and so does fastpath's datapath
    # (seg6local_input); next-csid is refused here, as before
    _desc("End.T", 3, ("table",), ("count", "flavors"), "input_action_end_t", _RFC8986, ()),
    _desc("End.DX2", 4, ("oif",), ("count",), "input_action_end_dx2"),
    _desc("End.DX6", 5, ("nh6",), ("count",), "input_action_end_dx6"),
    _desc("End.DX4", 6, ("nh4",), ("count",), "input_action_end_dx4"),
    _desc("End.DT6", 7, (), ("table", "vrftable", "count"), "input_action_end_dt6",
          one_of=("table", "vrftable")),
    _desc("End.DT4", 8, ("vrftable",), ("count",), "input_action_end_dt4"),
    _desc("End.B6", 9, ("srh",), ("count",), "input_action_end_b6"),
    _desc("End.B6.Encaps", 10, ("srh",), ("count",), "input_action_end_b6_encap"),
    _desc("End.DT46", 16, ("vrftable",), ("count",), "input_action_end_dt46"),
)}
_FLAVOR_ORDER = ("psp", "usp", "usd", "next-csid")


@dataclass(frozen=True)
class Seg6Local:
    """``encap seg6local``; ``srh_segs`` in the order written (first = first
    to visit); ``lblen``/``nflen`` are set (32/16 by default) with next-csid."""
    action: str
    nh6: Optional[ipaddress.IPv6Address] = None
    nh4: Optional[ipaddress.IPv4Address] = None
    table: Optional[int] = None
    vrftable: Optional[int] = None
    oif: Optional[str] = None
    srh_segs: tuple = ()
    srh_hmac: Optional[int] = None
    count: bool = False
    flavors: frozenset = frozenset()
    lblen: Optional[int] = None
    nflen: Optional[int] = None

    @property
    def desc(self) -> ActionDesc:
        return SEG6LOCAL_ACTIONS[self.action]


@dataclass(frozen=True)
class Seg6Encap:
    """``encap seg6``; ``segs`` in the order written (first = first to visit)."""
    mode: str
    segs: tuple
    hmac: Optional[int] = None


def _segs(tok: str) -> tuple:
    parts = tok.split(",")
    out = []
    for p in parts:
        if not p:
            raise _err(f"invalid segment list '{tok}'", tok)
        try:
            out.append(_parse_addr(p, 6, "segment"))
        except ConfigError:
            raise _err(f"invalid segment '{p}' in '{tok}' (IPv6 addresses, comma separated)",
                       tok) from None
    return tuple(out)


def _check_srh_len(nsegs: int, hmac: bool, token: str):
    """seg6_validate_srh: hdrlen (8-byte units, excluding the first 8) is a u8."""
    hdrlen = 2 * nsegs + (5 if hmac else 0)
    if nsegs < 1 or hdrlen > 255:
        limit = 125 if hmac else 127
        raise _err(f"too many segments ({nsegs}; an SRH holds at most {limit}"
                   f"{' with HMAC' if hmac else ''}: RTNETLINK answers: Invalid argument)", token)


_SEG6LOCAL_KW = frozenset({"action", "nh4", "nh6", "table", "vrftable", "iif", "oif", "srh",
                           "count", "flavors", "endpoint", "lblen", "nflen"})
_SEG6_KW = frozenset({"mode", "segs", "hmac", "tunsrc"})


def _parse_seg6local(cur: _Cur, spec: _RouteSpec) -> dict:
    at: dict = {}
    while cur.more() and cur.peek() in _SEG6LOCAL_KW:
        kw = cur.take()
        if kw in at:
            raise _err(f"duplicate '{kw}' in seg6local attributes", kw)
        if kw == "action":
            name = cur.arg("an action")
            if name in SEG6LOCAL_UNSUPPORTED:
                raise _unsupported(name, "seg6local action rejected by fastpath"
                                   + ("" if name == "End.BPF" else " and by the kernel"))
            if name not in SEG6LOCAL_ACTIONS:
                raise _err(f"unknown seg6local action '{name}' (expected one of "
                           f"{', '.join(SEG6LOCAL_ACTIONS)})", name)
            at[kw] = name
        elif kw == "nh4":
            at[kw] = _parse_addr(cur.arg("an address"), 4, "address")
        elif kw == "nh6":
            at[kw] = _parse_addr(cur.arg("an address"), 6, "address")
        elif kw in ("table", "vrftable"):
            at[kw] = _table(cur.arg("a table id"), kw)
        elif kw in ("iif", "oif"):
            at[kw] = _check_ifname(cur.arg("an interface name"))
        elif kw == "count":
            at[kw] = True
        elif kw == "endpoint":
            raise _unsupported("endpoint", "End.BPF programs")
        elif kw in ("lblen", "nflen"):
            raise _err(f"'{kw}' is only valid after 'flavors next-csid'", kw)
        elif kw == "srh":
            t = cur.arg("'segs'")
            if t != "segs":
                raise _err(f"missing 'segs' attribute for srh, got '{t}'", t)
            segtok = cur.arg("a segment list")
            segs = _segs(segtok)
            hmac = None
            if cur.peek() == "hmac":
                cur.take()
                hmac = _num(cur, "hmac", 0, 2**32 - 1) or None
            _check_srh_len(len(segs), hmac is not None, segtok)
            at[kw] = (segs, hmac)
        elif kw == "flavors":
            ftok = cur.arg("a flavor list")
            names = ftok.split(",")
            fl = []
            for nm in names:
                low = nm.lower()
                if low not in SEG6LOCAL_FLAVORS or low in fl:
                    raise _err(f"invalid \"flavors\" attribute '{ftok}' (comma separated, "
                               "no repeats: psp, usp, usd, next-csid)", ftok)
                fl.append(low)
            lbl = nfl = None
            if "next-csid" in fl:
                while cur.peek() in ("lblen", "nflen"):
                    k2 = cur.take()
                    if (k2 == "lblen" and lbl is not None) or (k2 == "nflen" and nfl is not None):
                        raise _err(f"duplicate '{k2}'", k2)
                    v = _num(cur, k2, 0, 255)        # iproute2: get_u8
                    if k2 == "lblen":
                        lbl = v
                    else:
                        nfl = v
                lbl = NEXT_CSID_LBLEN if lbl is None else lbl
                nfl = NEXT_CSID_NFLEN if nfl is None else nfl
                # seg6_chk_next_csid_cfg
                if (lbl + nfl > 128 or lbl == 0 or lbl > 120 or lbl % 8
                        or nfl == 0 or nfl > 120 or nfl % 8):
                    raise _err(f"Invalid Locator Block/Node Function lengths (lblen {lbl}, "
                               f"nflen {nfl}: multiples of 8, > 0, lblen + nflen <= 128)", ftok)
            at[kw] = (frozenset(fl), lbl, nfl)
    return at


def _build_seg6local(at: dict, tok: str) -> Seg6Local:
    name = at.get("action")
    if name is None:
        raise _err("seg6local: missing 'action'", tok)
    d = SEG6LOCAL_ACTIONS[name]
    given = set(at) - {"action"}
    for a in sorted(given, key=lambda x: SEG6LOCAL_ATTRS[x]):
        if a not in d.allowed:
            allowed = ", ".join(sorted(d.allowed, key=lambda x: SEG6LOCAL_ATTRS[x])) or "none"
            raise _err(f"'{a}' is not allowed for {name} (it takes: {allowed})", a)
    for a in sorted(d.required, key=lambda x: SEG6LOCAL_ATTRS[x]):
        if a not in given:
            raise _err(f"{name} requires {a}", name)
    if d.one_of and sum(a in given for a in d.one_of) != 1:
        raise _err(f"{name}: table or vrftable must be specified (exactly one)", name)
    flavors, lbl, nfl = at.get("flavors", (frozenset(), None, None))
    bad = [f for f in _FLAVOR_ORDER if f in flavors and f not in d.flavors]
    if bad:
        ignored = "; Linux takes flavors on it and ignores them" if not d.kernel_flavors else ""
        raise _err(f"flavor '{bad[0]}' is not supported by {name} (Unsupported Flavor "
                   f"operation(s); {name} takes: {', '.join(f for f in _FLAVOR_ORDER if f in d.flavors)}"
                   f"{ignored})", bad[0])
    segs, hmac = at.get("srh", ((), None))
    return Seg6Local(action=name, nh6=at.get("nh6"), nh4=at.get("nh4"), table=at.get("table"),
                     vrftable=at.get("vrftable"), oif=at.get("oif"), srh_segs=segs,
                     srh_hmac=hmac, count=bool(at.get("count")), flavors=flavors,
                     lblen=lbl, nflen=nfl)


def _parse_seg6(cur: _Cur, spec: _RouteSpec) -> Seg6Encap:
    mode = segs = hmac = None
    seen = set()
    while cur.more() and cur.peek() in _SEG6_KW:
        kw = cur.take()
        if kw in seen:
            raise _err(f"duplicate '{kw}' in seg6 attributes", kw)
        seen.add(kw)
        if kw == "mode":
            m = cur.arg("a mode")
            if m not in SEG6_ENCAP_MODES:
                raise _err(f"invalid seg6 mode '{m}' (expected one of "
                           f"{', '.join(SEG6_ENCAP_MODES)})", m)
            mode = m
        elif kw == "segs":
            segtok = cur.arg("a segment list")
            segs = (_segs(segtok), segtok)
        elif kw == "hmac":
            hmac = _num(cur, "hmac", 0, 2**32 - 1) or None
        elif kw == "tunsrc":
            spec.tunsrc = _parse_addr(cur.arg("an address"), 6, "address")
    if mode is None:
        raise _err("seg6 encap requires 'mode'", "seg6")
    if segs is None:
        raise _err("seg6 encap requires 'segs'", "seg6")
    n = len(segs[0]) + (1 if mode == "inline" else 0)   # inline: segments[0] = old DA
    _check_srh_len(n, hmac is not None, segs[1])
    return Seg6Encap(mode, segs[0], hmac)


def _encap_args(r: Route) -> list:
    e = r.encap
    if e is None:
        return []
    if isinstance(e, Seg6Encap):
        a = ["encap", "seg6", "mode", e.mode]
        if r.tunsrc is not None:
            a += ["tunsrc", str(r.tunsrc)]
        a += ["segs", ",".join(str(s) for s in e.segs)]
        if e.hmac:
            a += ["hmac", str(e.hmac)]
        return a
    a = ["encap", "seg6local", "action", e.action]
    if e.nh4 is not None:
        a += ["nh4", str(e.nh4)]
    if e.nh6 is not None:
        a += ["nh6", str(e.nh6)]
    if e.table is not None:
        a += ["table", _table_str(e.table)]
    if e.vrftable is not None:
        a += ["vrftable", _table_str(e.vrftable)]
    if e.oif is not None:
        a += ["oif", _q(e.oif)]
    if e.srh_segs:
        a += ["srh", "segs", ",".join(str(s) for s in e.srh_segs)]
        if e.srh_hmac:
            a += ["hmac", str(e.srh_hmac)]
    if e.count:
        a.append("count")
    if e.flavors:
        a += ["flavors", ",".join(f for f in _FLAVOR_ORDER if f in e.flavors)]
        if "next-csid" in e.flavors:
            a += ["lblen", str(e.lblen), "nflen", str(e.nflen)]
    return a

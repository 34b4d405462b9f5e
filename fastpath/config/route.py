"""ip route (ip/iproute.c): the route line parser (``_parse_route``,
iproute_modify's arguments and nexthops), ``RouteTable`` (State.routes: the
FIB tables -- net/ipv4/fib_trie.c, net/ipv6/ip6_fib.c -- as one dict with
its indexes and the overlay of a transaction) and the State commands add /
change / replace / append / del / flush (inet_rtm_newroute, fib_table_insert,
fib_table_delete; ip6_route_add, ip6_route_del, ip6_route_multipath_add)."""
from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Optional

from ..tables import _holds_strict
from .errors import ConfigError, _err, _unsupported
from .objects import (IPAddress, new_route, Nexthop, REJECT_TYPES, Route, ROUTE_TYPES,
                      RT_PROTOS, RT_SCOPES, RT_TABLE_LOCAL, RT_TABLE_MAIN, _LOCAL_TABLE_TYPES,
                      _PROTO_BY_NAME, _SCOPE_BY_NAME)
from .lexer import (_check_ifname, _Cur, _fam_name, _int, _matches, _Net4, _Net6, _net_of, _num,
                    _parse_addr, _parse_prefix, _plain_prefix_fields, _table, _table_str)
from .lwtunnel import Seg6Encap, Seg6Local, _build_seg6local, _parse_seg6, _parse_seg6local


# route parsing
class _RouteSpec:
    __slots__ = ("fam", "type", "prefix", "prefix_tok", "table", "metric", "proto", "scope",
                 "src", "mtu", "hoplimit", "gw", "dev", "nexthops", "encap", "encap_tok",
                 "tunsrc", "seen", "vrf")

    def __init__(self, fam):
        self.fam = fam
        self.type = self.prefix = self.prefix_tok = self.table = self.metric = None
        self.proto = self.scope = self.src = self.mtu = self.hoplimit = None
        self.gw = self.dev = self.encap = self.encap_tok = self.tunsrc = self.vrf = None
        self.nexthops = []
        self.seen = set()


_ROUTE_UNSUPPORTED = {
    "from": "source-specific IPv6 routes", "tos": "TOS routes", "dsfield": "TOS routes",
    "expires": "expiring routes", "onlink": "onlink nexthops", "pervasive": "",
    "advmss": "route metric", "rtt": "route metric", "rttvar": "route metric",
    "reordering": "route metric", "window": "route metric", "cwnd": "route metric",
    "initcwnd": "route metric", "initrwnd": "route metric", "features": "route metric",
    "quickack": "route metric", "congctl": "route metric", "ssthresh": "route metric",
    "rto_min": "route metric", "realms": "", "realm": "", "as": "", "nhid": "nexthop objects",
    "ttl-propagate": "", "fastopen_no_cookie": "",
    "nat": "NAT routes", "xresolve": "", "mpath": "", "equalize": "",
}


class _Where:
    """'PREFIX table T metric M' for messages, formatted only when used."""
    __slots__ = ("r",)

    def __init__(self, r):
        self.r = r

    def __format__(self, spec):
        return f"{self.r.prefix} table {_table_str(self.r.table)} metric {self.r.metric}"


def _set_fam(spec: _RouteSpec, fam: int, tok: str):
    if spec.fam is None:
        spec.fam = fam
    elif spec.fam != fam:
        raise _err(f"{_fam_name(spec.fam)} address is expected rather than '{tok}'", tok)


def _parse_gw(cur: _Cur, spec: _RouteSpec) -> IPAddress:
    tok = cur.arg("an address")
    fam = spec.fam
    if tok in ("inet", "inet6"):
        want = 4 if tok == "inet" else 6
        tok2 = cur.arg("an address")
        if spec.fam == 4 and want == 6:
            raise _unsupported("via inet6", "IPv4 routes with an IPv6 gateway (RFC 5549)")
        if spec.fam == 6 and want == 4:
            raise _err(f"an IPv6 route cannot have an IPv4 gateway '{tok2}'", tok2)
        fam, tok = want, tok2
    a = _parse_addr(tok, fam, "address")
    _set_fam(spec, a.version, tok)
    return a


def _parse_nexthop(cur: _Cur, spec: _RouteSpec) -> Nexthop:
    gw = dev = None
    weight = 1
    while cur.more() and cur.peek() != "nexthop":
        t = cur.take()
        if t == "via":
            if gw is not None:
                raise _err("duplicate 'via' in nexthop", t)
            gw = _parse_gw(cur, spec)
        elif t == "dev":
            if dev is not None:
                raise _err("duplicate 'dev' in nexthop", t)
            dev = _check_ifname(cur.arg("an interface name"))
        elif t == "weight":
            weight = _num(cur, "weight", 1, 256)
        elif t in ("onlink", "pervasive", "realms", "as"):
            raise _unsupported(t)
        elif t == "encap":
            raise _unsupported("nexthop ... encap", "per-nexthop encapsulation")
        else:
            raise _err(f"'nexthop' or end of line expected, got '{t}'", t)
    if gw is None and dev is None:
        raise _err("empty nexthop (expected 'via' and/or 'dev')", "nexthop")
    return Nexthop(gw, dev, weight)


def _parse_route(fam: Optional[int], toks: list) -> _RouteSpec:
    spec = _RouteSpec(fam)
    cur = _Cur(toks)

    def once(kw):
        if kw in spec.seen:
            raise _err(f"duplicate '{kw}'", kw)
        spec.seen.add(kw)

    while cur.more():
        t = cur.take()
        if t == "nexthop":
            if spec.gw is not None or spec.dev is not None:
                raise _unsupported("nexthop", "route-level 'via'/'dev' together with 'nexthop'")
            spec.nexthops.append(_parse_nexthop(cur, spec))
        elif spec.nexthops:
            raise _err(f"'nexthop' or end of line expected, got '{t}'", t)
        elif t == "via":
            once("via")
            spec.gw = _parse_gw(cur, spec)
        elif t in ("dev", "oif"):
            once("dev")
            spec.dev = _check_ifname(cur.arg("an interface name"))
        elif t == "table":
            once("table")
            spec.table = _table(cur.arg("a table id"))
        elif t == "vrf":
            once("table")
            spec.vrf = _check_ifname(cur.arg("a VRF name"))
        elif t in ("metric", "priority", "preference"):
            once("metric")
            spec.metric = _num(cur, t, 0, 2**32 - 1)
        elif t in ("proto", "protocol"):
            once("proto")
            p = cur.arg("a protocol")
            if p in _PROTO_BY_NAME:
                spec.proto = p
            else:
                v = _int(p, t, 0, 255)
                spec.proto = RT_PROTOS.get(v, str(v))
            if spec.proto == "unspec":
                spec.proto = "boot"
        elif t == "scope":
            once("scope")
            s = cur.arg("a scope")
            if s in _SCOPE_BY_NAME:
                spec.scope = RT_SCOPES[_SCOPE_BY_NAME[s]]
            else:
                v = _int(s, t, 0, 255)
                spec.scope = RT_SCOPES.get(v, str(v))
        elif t == "src":
            once("src")
            a = _parse_addr(cur.arg("an address"), spec.fam, "address")
            _set_fam(spec, a.version, str(a))
            spec.src = a
        elif t == "mtu":
            once("mtu")
            v = cur.arg("a number")
            if v == "lock":
                raise _unsupported("mtu lock")
            spec.mtu = _int(v, "mtu", 0, 2**32 - 1)
        elif t == "hoplimit":
            once("hoplimit")
            spec.hoplimit = _num(cur, "hoplimit", 0, 255)
        elif t == "pref":
            p = cur.arg("a preference")
            if p != "medium":
                raise _unsupported(f"pref {p}", "IPv6 router preference other than medium")
        elif t == "encap":
            once("encap")
            et = cur.arg("an encap type")
            spec.encap_tok = et
            if et == "seg6local":
                spec.encap = _parse_seg6local(cur, spec)
            elif et == "seg6":
                spec.encap = _parse_seg6(cur, spec)
            elif et in ("mpls", "ip", "ip6", "ila", "bpf", "ioam6", "rpl", "xfrm"):
                raise _unsupported(f"encap {et}", "only seg6 and seg6local")
            else:
                raise _err(f"unknown encap type '{et}' (expected seg6 or seg6local)", et)
        elif t in _ROUTE_UNSUPPORTED:
            raise _unsupported(t, _ROUTE_UNSUPPORTED[t])
        else:
            if t == "to":
                t = cur.arg("a prefix")
            if spec.prefix_tok is not None:
                raise _err(f"unexpected '{t}' (the prefix is '{spec.prefix_tok}')", t)
            if t in ROUTE_TYPES or t in ("nat", "xresolve"):
                if t in ("nat", "xresolve"):
                    raise _unsupported(t)
                spec.type = t
                t = cur.arg("a prefix")
                if t in _ROUTE_UNSUPPORTED or t in ROUTE_TYPES:
                    raise _err(f"invalid prefix '{t}'", t)
            p = _parse_prefix(t, spec.fam)
            spec.prefix_tok = t
            if p is not None:
                _set_fam(spec, p[0].version, t)
            spec.prefix = p if p is not None else "default"
    return spec


_GONE = object()      # a key a transaction deleted


def _v4_user_local(r) -> bool:
    """A user's IPv4 local route (fib_has_custom_local_routes counts them)."""
    return r.family == 4 and r.type == "local" and r.proto != "kernel"


_ONE_METRIC: dict = {}          # metric -> (metric,): RouteTable._pfx's common value


class RouteTable(dict):
    """``State.routes``: a dict (key -> Route) that keeps, as it changes,
    the indexes a change needs (so that no change walks every route): the
    metrics of each (family, table, prefix), the IPv6 keys whose prefix
    holds a strict-interface destination (in the dict's order), and the
    number of user IPv4 local routes.

    ``begin()`` starts a transaction: writes go to an overlay (reads see
    them), ``commit()`` applies them to the dict in the order a plain dict
    would have given (a re-inserted key moves to the end) and returns what
    changed, ``rollback()`` drops them.  Only ``get``, ``[]``, ``in``,
    assignment, ``del`` and ``prefix_routes`` may be used during one."""

    def __init__(self, items=()):
        super().__init__()
        self._pfx = {}            # (family, table) -> {prefix: tuple of metrics}
        self._strict = {}         # route keys holding strict destinations, dict order
        self.v4_local_user = 0
        self._by_dev = {}         # device name -> keys of the routes with a nexthop on it
        self._by_gw = {}          # gateway -> keys of the routes with it as a nexthop without dev
        self._tx = None           # key -> [route or _GONE, moved], in order
        self._txpfx = None        # (family, table, prefix) -> metric, or set of metrics, added
        for k, v in (items.items() if isinstance(items, dict) else items):
            self._base_set(k, v)

    def __reduce__(self):
        return (RouteTable, (dict(self),))

    def copy(self) -> "RouteTable":
        if self._tx is not None:
            raise RuntimeError("RouteTable.copy() during a transaction")
        new = RouteTable()
        dict.update(new, self)
        new._pfx = {ft: dict(d) for ft, d in self._pfx.items()}
        new._strict = dict(self._strict)
        new.v4_local_user = self.v4_local_user
        new._by_dev = {d: set(v) for d, v in self._by_dev.items()}
        new._by_gw = {g: set(v) for g, v in self._by_gw.items()}
        return new

    def _index_nexthops(self, k, r, add: bool):
        for nh in r.nexthops:
            if nh.dev is not None:
                d, key = self._by_dev, nh.dev
            elif nh.gw is not None:
                d, key = self._by_gw, nh.gw
            else:
                continue
            ks = d.get(key)
            if add:
                if ks is None:
                    d[key] = {k}
                else:
                    ks.add(k)
            elif ks is not None:
                ks.discard(k)
                if not ks:
                    del d[key]

    # -- the dict itself, indexes kept ------------------------------------
    def _base_set(self, k, r, new: bool = False):
        old = None if new else dict.get(self, k)
        dict.__setitem__(self, k, r)
        if old is not None and old.nexthops:
            self._index_nexthops(k, old, False)
        if r.nexthops:
            self._index_nexthops(k, r, True)
        if old is None:
            # (per (family, table), then per prefix: the prefix object is
            # the inner key, not a (family, table, prefix) tuple -- 64
            # bytes a route)
            ft = self._pfx.get(k[:2])
            if ft is None:
                ft = self._pfx[k[:2]] = {}
            ms = ft.get(k[2])
            if ms is None:
                # one metric: a shared 1-tuple per metric value (a feed's
                # prefixes have one each; ~90 bytes a route otherwise)
                ms = _ONE_METRIC.get(k[3])
                if ms is None:
                    ms = (k[3],)
                    if len(_ONE_METRIC) < 4096:
                        _ONE_METRIC[k[3]] = ms
                ft[k[2]] = ms
            else:
                ft[k[2]] = ms + (k[3],)
            if k[0] == 6 and _holds_strict(k[2]):
                self._strict[k] = None
        elif old.type == "local" and _v4_user_local(old):
            self.v4_local_user -= 1
        if r.type == "local" and _v4_user_local(r):
            self.v4_local_user += 1

    def _base_del(self, k):
        old = dict.pop(self, k)
        if old.nexthops:
            self._index_nexthops(k, old, False)
        ft = self._pfx[k[:2]]
        ms = tuple(m for m in ft[k[2]] if m != k[3])
        if ms:
            ft[k[2]] = ms
        else:
            del ft[k[2]]
            if not ft:
                del self._pfx[k[:2]]
        self._strict.pop(k, None)
        if _v4_user_local(old):
            self.v4_local_user -= 1

    # -- reads and writes (through the overlay during a transaction) ---------
    def get(self, k, default=None):
        tx = self._tx
        if tx is not None:
            v = tx.get(k)
            if v is not None:
                return default if v[0] is _GONE else v[0]
        return dict.get(self, k, default)

    def __getitem__(self, k):
        v = self.get(k, _GONE)
        if v is _GONE:
            raise KeyError(k)
        return v

    def __contains__(self, k):
        return self.get(k, _GONE) is not _GONE

    def __setitem__(self, k, r):
        tx = self._tx
        if tx is None:
            self._base_set(k, r)
            return
        v = tx.get(k)
        if v is None:
            if dict.__contains__(self, k):
                tx[k] = [r, False]
            else:
                tx[k] = [r, True]
                self._tx_metric(k)
        elif v[0] is _GONE:          # re-inserted: to the end, as a dict does
            del tx[k]
            tx[k] = [r, True]
        else:
            v[0] = r

    def __delitem__(self, k):
        tx = self._tx
        if tx is None:
            self._base_del(k)
            return
        if k not in self:
            raise KeyError(k)
        v = tx.get(k)
        if v is None:
            tx[k] = [_GONE, False]
        else:
            v[0] = _GONE

    def pop(self, *a):
        raise NotImplementedError("RouteTable: use del")

    setdefault = update = clear = popitem = pop

    def _tx_metric(self, k):
        """A key new to the dict written in the transaction: its metric
        noted under its prefix (for prefix_routes) -- one metric per
        prefix, the common case, as the int itself: a set per new prefix
        was ~220 bytes a route of a load's peak."""
        p = k[:3]
        txp = self._txpfx
        m = txp.get(p)
        if m is None:
            txp[p] = k[3]
        elif type(m) is set:
            m.add(k[3])
        elif m != k[3]:
            txp[p] = {m, k[3]}

    def put_plain(self, k, add: bool, nhs: tuple, proto: str, scope) -> bool:
        """_RouteCommands._plain_route's write, during a transaction: the
        unicast Route of key ``k`` through ``nhs``, stored as ``k in self``
        then ``self[k] = route`` would (False, nothing changed, for an
        ``add`` of a key that exists) with one lookup of the overlay and
        one of the dict, not four.  A replaced route's prefix object is
        kept for the new one: every later lookup of this change -- the
        indexes, the delta, the compiled entries -- then matches it by
        identity, not by a Python-level __eq__."""
        def route(net):
            return new_route(k[0], net, k[1], "unicast", k[3], nhs, None, proto, scope,
                             None, None, None, None)
        tx = self._tx
        v = tx.get(k)
        if v is None:
            old = dict.get(self, k)
            if old is None:
                tx[k] = [route(k[2]), True]
                self._tx_metric(k)
                return True
            if add:
                return False
            net = old.prefix
            tx[(k[0], k[1], net, k[3])] = [route(net), False]
            return True
        old = v[0]
        if old is _GONE:                 # re-inserted: to the end, as a dict does
            del tx[k]
            tx[k] = [route(k[2]), True]
            return True
        if add:
            return False
        v[0] = route(old.prefix)
        return True

    def prefix_routes(self, family: int, table: int, prefix) -> list:
        """The routes of one (family, table, prefix), any metric."""
        p = (family, table, prefix)
        ft = self._pfx.get(p[:2])
        base = ft.get(prefix) if ft is not None else None
        txm = self._txpfx.get(p) if self._tx is not None else None
        # (one metric, the common case: one lookup, no set)
        one = None
        if base is None:
            if txm is not None and type(txm) is not set:
                one = txm
        elif len(base) == 1 and (txm is None or txm == base[0]):
            one = base[0]
        if one is not None:
            r = self.get(p + (one,))
            return [] if r is None else [r]
        ms = set(base) if base is not None else set()
        if type(txm) is set:
            ms |= txm
        elif txm is not None:
            ms.add(txm)
        out = []
        for m in ms:
            r = self.get(p + (m,))
            if r is not None:
                out.append(r)
        return out

    def live_items(self) -> list:
        """(key, route) of every route, the open transaction's writes
        included (any order)."""
        tx = self._tx
        if tx is None:
            return list(dict.items(self))
        out = [(k, v) for k, v in dict.items(self) if k not in tx]
        out += [(k, v[0]) for k, v in tx.items() if v[0] is not _GONE]
        return out

    def device_keys(self, dev: str) -> set:
        """The keys of the routes with a nexthop on ``dev`` (the committed
        dict: not the open transaction's writes)."""
        return self._by_dev.get(dev, set())

    def gateway_keys(self) -> dict:
        """gateway -> the keys of the routes with a nexthop via it and no
        dev (the committed dict)."""
        return self._by_gw

    def strict_keys(self) -> list:
        """The IPv6 keys whose prefix holds an address rt6_need_strict() is
        true of, in the dict's order."""
        return list(self._strict)

    # -- transactions -----------------------------------------------------------
    def begin(self):
        if self._tx is not None:
            raise RuntimeError("RouteTable: a transaction is already open")
        self._tx = {}
        self._txpfx = {}

    def pending(self) -> list:
        """(key, route before, route after; None for none) of every key the
        open transaction changes."""
        out = []
        for k, (v, _moved) in self._tx.items():
            old = dict.get(self, k)
            new = None if v is _GONE else v
            if old is not new and old != new:
                out.append((k, old, new))
        return out

    def commit(self, report: bool = True) -> list:
        """Apply the open transaction; returns ``pending()`` (None with
        ``report=False``)."""
        changed = self.pending() if report else None
        tx, self._tx, self._txpfx = self._tx, None, None
        for k, (v, moved) in tx.items():
            if v is _GONE:
                if dict.__contains__(self, k):
                    self._base_del(k)
            elif moved:
                if dict.__contains__(self, k):
                    self._base_del(k)
                self._base_set(k, v, True)
            elif dict.get(self, k) is not v:
                self._base_set(k, v)
        return changed

    def rollback(self):
        self._tx = None
        self._txpfx = None


def _plain_fields(fam, args: list):
    """What _RouteCommands._plain_route reads of a plain line's words
    (``args``: from ``add``/``replace`` on; ``fam``: the command's -4/-6, or
    None): (add, family, masked network as an int, prefix length, via, dev,
    metric, proto) -- the metric an int or None, the protocol a name or
    None -- or None for any line the lane does not take.
    fastpath._feed.plain_line reads a whole line the same way
    (tests/test_plain_routes.py)."""
    n = len(args)
    if n < 4 or n > 10 or n & 1:
        return None
    via = dev = metric = proto = None
    for i in range(2, n, 2):
        kw, v = args[i], args[i + 1]
        if kw == "via" and via is None:
            via = v
        elif kw == "dev" and dev is None:
            dev = v
        elif kw == "metric" and metric is None:
            if not (v.isascii() and v.isdigit()):
                return None
            metric = int(v)
            if metric > 0xFFFFFFFF:
                return None
        elif kw == "proto" and proto is None:
            if v not in _PROTO_BY_NAME:
                return None
            proto = "boot" if v == "unspec" else v
        else:
            return None
    if via is None:
        return None
    p = _plain_prefix_fields(args[1], fam)
    if p is None:
        return None
    return args[0] == "add", p[0], p[1], p[2], via, dev, metric, proto


class _RouteCommands:
    """State's ``ip route`` commands."""

    # -- ip route --------------------------------------------------------------
    def _ip_route(self, fam, args: list):
        if not args:
            return
        tok = args[0]
        if tok in ("add", "replace") and self._plain_route(fam, args):
            return
        # the general path may change what the plain one cached (a local
        # route makes a gateway invalid): the cache goes
        c = self.__dict__.get("_plainc")
        if c:
            self._plainc = {}
        sub = "change" if tok == "chg" else _matches(
            tok, ("add", "change", "replace", "prepend", "append", "test", "delete", "list",
                  "show", "lst", "get", "flush", "save", "restore", "showdump", "help"))
        if sub in ("list", "show", "lst", "get"):
            return
        if sub is None:
            raise _err(f"unknown 'ip route' command '{tok}' (expected add, del, replace, "
                       "change, append)", tok)
        if sub == "flush":
            self._route_flush(fam, args[1:])
            return
        if sub not in ("add", "change", "replace", "append", "delete"):
            raise _unsupported(f"ip route {sub}")
        spec = _parse_route(fam, args[1:])
        if spec.prefix is None:
            raise _err("missing destination prefix", tok)
        if sub == "delete":
            self._route_del(spec)
            return
        r = self._build_route(spec)
        key = r.key
        cur = self.routes.get(key)
        where = _Where(r)
        if sub == "add":
            if cur is not None:
                raise _err(f"route {where}: RTNETLINK answers: File exists", spec.prefix_tok)
            self.routes[key] = r
        elif sub == "replace":
            self.routes[key] = r
        elif sub == "change":
            if cur is None:
                raise _err(f"route {where}: RTNETLINK answers: No such file or directory "
                           "(Error: Can not replace route - no match found.)", spec.prefix_tok)
            self.routes[key] = r
        else:  # append
            if cur is None:
                self.routes[key] = r
            elif r.family == 4:
                raise _unsupported("append", "an IPv4 alternative route to an existing "
                                   f"{where} (one route per table, prefix and metric)")
            else:
                def ecmp(x):   # rt6_qualify_for_ecmp
                    return (x.type == "unicast" and x.nexthops
                            and all(nh.gw is not None for nh in x.nexthops))
                if not (ecmp(cur) and ecmp(r)):
                    raise _unsupported("append", f"a non-multipath route to an existing {where}")
                if replace(cur, nexthops=()) != replace(r, nexthops=()):
                    raise _unsupported("append", "a nexthop whose route attributes differ from "
                                       f"the existing {where}")
                have = {(nh.gw, nh.dev) for nh in cur.nexthops}
                for nh in r.nexthops:
                    if (nh.gw, nh.dev) in have:
                        raise _err(f"route {where} nexthop via {nh.gw}: RTNETLINK answers: "
                                   "File exists", str(nh.gw))
                self.routes[key] = replace(cur, nexthops=cur.nexthops + r.nexthops)

    def _plain_route(self, fam, args: list) -> bool:
        """The common line of a route feed -- ``add|replace PREFIX via GW
        [dev DEV] [metric M] [proto P]``, a unicast route of table main --
        applied without the general parser: the same Route as
        ``_build_route`` gives, its nexthops tuple shared by every route
        through the same gateway and device.  Returns False, having changed
        nothing, for any other line and for anything the general path would
        refuse or treat specially (a bad or default prefix, IPv4 host bits,
        a device not yet known, a gateway not yet validated and refused, an
        ``add`` of an existing key): the general path then gives the result
        or the error.  tests/test_config.py holds the two to the same
        routes and errors.

        A gateway is validated (``_check_gw``) once per (family, gateway,
        device) and cached in ``_plainc``; every other command empties the
        cache (an address, a local route or a device may change what that
        check says), as ``begin`` and ``rollback`` do."""
        f = _plain_fields(fam, args)
        return f is not None and self._plain_put(*f)

    def _plain_put(self, add: bool, rfam: int, v: int, plen: int, via: str, dev, metric,
                   proto) -> bool:
        """The plain lane's route, its line read (by _plain_route, or by
        fastpath._feed.plain_line in State._run): prefix ``v``/``plen``
        of family ``rfam`` (masked, checked), the gateway and device words,
        the metric (an int or None), the protocol (a name, None for boot).
        False, nothing changed, where the general path must answer."""
        c = self.__dict__.get("_plainc")
        if c is None:
            return False                     # (outside a transaction)
        nk = (rfam, via, dev)
        nhs = c.get(nk)
        if nhs is None:
            if dev is not None and dev not in self.interfaces:
                return False
            try:
                gw = _parse_addr(via, rfam, "address")
                nh = Nexthop(gw, dev, 1)
                self._check_gw(rfam, nh)
            except ConfigError:
                return False
            nhs = c[nk] = (nh,)
        if metric is None or (rfam == 6 and metric == 0):
            metric = 1024 if rfam == 6 else 0
        net = _net_of(_Net6 if rfam == 6 else _Net4, v, plen)
        return self.routes.put_plain((rfam, RT_TABLE_MAIN, net, metric), add, nhs,
                                     proto or "boot", "global" if rfam == 4 else None)

    def _route_flush(self, fam, args: list):
        """``ip route flush [table T|all] [proto P]`` (iproute2: arguments
        required; table main by default; without -6, IPv4 -- as
        iproute_list_flush_or_save sets the family when a table filters):
        every route of the family that matches goes, automatic ones too."""
        if not args:
            raise _err('"ip route flush" requires arguments.', "flush")
        cur = _Cur(args)
        table, proto, seen = RT_TABLE_MAIN, None, set()
        while cur.more():
            t = cur.take()
            if t in seen:
                raise _err(f"duplicate '{t}'", t)
            seen.add(t)
            if t in ("table", "tb"):
                v = cur.arg("a table id")
                table = None if v == "all" else (_table(v) or None)
            elif t == "vrf":
                v = _check_ifname(cur.arg("a VRF name"))
                itf = self.interfaces.get(v)
                if itf is None or itf.kind != "vrf":
                    raise _err(f"Error: argument \"{v}\" is wrong: Invalid VRF", v)
                table = itf.vrf_table
            elif t in ("proto", "protocol"):
                p = cur.arg("a protocol")
                if p in _PROTO_BY_NAME:
                    proto = p
                else:
                    v = _int(p, t, 0, 255)
                    proto = RT_PROTOS.get(v, str(v))
            else:
                raise _unsupported(f"ip route flush {t}", "only 'table' and 'proto' select "
                                   "what a flush removes")
        fam = fam or 4
        for k, r in self.routes.live_items():
            if k[0] == fam and (table is None or k[1] == table) and (proto is None or r.proto == proto):
                del self.routes[k]

    def _resolve_common(self, spec: _RouteSpec):
        fam = spec.fam or 4
        rtype = spec.type or "unicast"
        if spec.prefix == "default":
            prefix = ipaddress.ip_network("0.0.0.0/0" if fam == 4 else "::/0")
        else:
            a, plen, prefix = spec.prefix
            if fam == 4 and prefix.network_address != a:
                raise _err(f"invalid prefix '{spec.prefix_tok}': host bits set (Error: Invalid "
                           "prefix for given prefix length.)", spec.prefix_tok)
        if spec.vrf is not None:
            # iproute2: 'vrf NAME' is 'table' of the VRF's table (ipvrf_get_table)
            v = self.interfaces.get(spec.vrf)
            if v is None or v.kind != "vrf":
                raise _err(f"Error: argument \"{spec.vrf}\" is wrong: Invalid VRF "
                           f"({'no such device' if v is None else 'not a VRF device'})", spec.vrf)
            table = v.vrf_table
        elif spec.table is None:
            table = RT_TABLE_LOCAL if rtype in _LOCAL_TABLE_TYPES else RT_TABLE_MAIN
        else:
            table = spec.table or RT_TABLE_MAIN
        return fam, rtype, prefix, table

    def _build_route(self, spec: _RouteSpec) -> Route:
        fam, rtype, prefix, table = self._resolve_common(spec)
        tok = spec.prefix_tok
        if rtype == "broadcast" and fam == 6:
            raise _err("broadcast routes are IPv4 only", "broadcast")
        metric = spec.metric if spec.metric is not None else (1024 if fam == 6 else 0)
        if fam == 6 and metric == 0:   # rtm_to_fib6_config: 0 -> IP6_RT_PRIO_USER
            metric = 1024
        if spec.nexthops:
            nhs = tuple(spec.nexthops)
        elif spec.gw is not None or spec.dev is not None:
            nhs = (Nexthop(spec.gw, spec.dev, 1),)
        else:
            nhs = ()
        multipath = bool(spec.nexthops)
        encap = None
        if rtype in REJECT_TYPES:
            if spec.encap is not None:
                raise _err(f"encap is not allowed on {rtype} routes", spec.encap_tok)
            if fam == 4 and nhs:
                raise _err("Error: Gateway, device and multipath can not be specified for this "
                           f"route type ({rtype}).", rtype)
            nhs = ()    # IPv6: the kernel points the route at lo
        else:
            if not nhs:
                raise _err(f"route {tok} needs 'dev' or 'via' (RTNETLINK answers: No such "
                           "device)", tok)
            if rtype != "unicast":
                if any(nh.gw is not None for nh in nhs):
                    raise _err(f"a {rtype} route cannot have a gateway", rtype)
                if len(nhs) > 1:
                    raise _err(f"a {rtype} route cannot have several nexthops", rtype)
            if fam == 6 and multipath and len(nhs) > 1 and any(nh.gw is None for nh in nhs):
                raise _err("Error: Device only routes can not be added for IPv6 using the "
                           "multipath API. (a 'nexthop' without 'via')", "nexthop")
            for nh in nhs:
                if nh.gw is not None:
                    self._check_gw(fam, nh)
        scope = None
        if fam == 4:
            if spec.scope is not None:
                scope = spec.scope
            else:
                scope = _default_scope4(rtype, nhs, multipath)
            if any(nh.gw is not None for nh in nhs) and scope in ("link", "host", "nowhere"):
                raise _err(f"Error: Nexthop has invalid scope ('{scope}' with a gateway).",
                           spec.scope)
        if spec.encap is not None:
            if spec.encap_tok == "seg6local":
                if fam != 6:
                    raise _err("seg6local routes are IPv6 only (use ip -6 route)", "seg6local")
                if rtype not in ("unicast", "local"):
                    raise _err(f"seg6local is not allowed on {rtype} routes", "seg6local")
                if len(nhs) != 1:
                    raise _unsupported("seg6local", "on a multipath route")
                if nhs[0].dev is None:
                    raise _err("seg6local routes need 'dev' (RTNETLINK answers: No such device)",
                               "seg6local")
                encap = _build_seg6local(spec.encap, "seg6local")
                if encap.vrftable is not None and any(
                        i.kind == "vrf" for i in self.interfaces.values()):
                    # __seg6_end_dt_vrf_build: l3mdev_ifindex_lookup_by_table_id (with no
                    # VRF device at all, fastpath keeps its table-only vrftable; README)
                    if not self.sysctls["net.vrf.strict_mode"]:
                        raise _err(f"{encap.action} vrftable {encap.vrftable}: Error: Strict mode "
                                   "for VRF is disabled. (sysctl -w net.vrf.strict_mode=1)",
                                   "vrftable")
                    if not self._vrf_bound(encap.vrftable):
                        raise _err(f"{encap.action} vrftable {encap.vrftable}: Error: Table has "
                                   "no associated VRF device.", str(encap.vrftable))
            else:
                encap = spec.encap
                if encap.mode == "inline" and fam != 6:
                    raise _err("seg6 mode inline is only valid for IPv6 routes", "inline")
                if rtype != "unicast":
                    raise _err(f"seg6 encap is not allowed on {rtype} routes", "seg6")
                if len(nhs) != 1:
                    raise _unsupported("seg6", "on a multipath route")
        src = spec.src
        if src is not None:
            ok = self._is_local_addr(src) or (fam == 4 and rtype == "local"
                                              and prefix.prefixlen == 32
                                              and prefix.network_address == src)
            if not ok:
                msg = "Invalid prefsrc address" if fam == 4 else "Invalid source address"
                raise _err(f"src {src}: Error: {msg}. (not an address of any interface)", str(src))
        mtu = spec.mtu or None
        if mtu is not None and mtu > 65535 - 15:   # ip_metrics_convert clamps RTAX_MTU
            mtu = 65535 - 15
        # first mention creates the interfaces
        for nh in nhs:
            if nh.dev is not None:
                self._iface(nh.dev)
        if isinstance(encap, Seg6Local) and encap.oif is not None:
            self._iface(encap.oif)
        return Route(fam, prefix, table, rtype, metric, nhs, encap, spec.proto or "boot", scope,
                     src, mtu, spec.tunsrc if isinstance(encap, Seg6Encap) else None,
                     spec.hoplimit or None)

    def _check_gw(self, fam: int, nh: Nexthop):
        gw = nh.gw
        if fam == 6:
            if int(gw) == 0 or gw.is_multicast:
                raise _err(f"gateway {gw}: Error: Invalid gateway address.", str(gw))
            if gw.is_link_local and nh.dev is None:
                raise _err(f"gateway {gw}: Error: Egress device not specified.", str(gw))
            if self._is_local_addr(gw) or gw.is_loopback:
                raise _err(f"gateway {gw}: Error: Gateway can not be a local address.", str(gw))
        else:
            # (the /32 from the integer: ip_network(address) prints and
            # parses the address again)
            local = self.routes.get((4, RT_TABLE_LOCAL, _Net4((int(gw), 32)), 0))
            bad = (int(gw) == 0 or gw.is_multicast or int(gw) == 0xFFFFFFFF or gw.is_loopback
                   or self._is_local_addr(gw)
                   or (local is not None and local.type in ("local", "broadcast")))
            if bad:
                raise _err(f"gateway {gw}: Error: Nexthop has invalid gateway.", str(gw))

    def _route_del(self, spec: _RouteSpec):
        fam, rtype, prefix, table = self._resolve_common(spec)
        cands = sorted(self.routes.prefix_routes(fam, table, prefix), key=lambda r: r.metric)
        for r in cands:
            if spec.metric and r.metric != spec.metric:
                continue
            if spec.proto and r.proto != spec.proto:
                continue
            if fam == 4:
                if spec.type and r.type != spec.type:
                    continue
                if spec.scope is not None and r.scope != spec.scope:
                    continue
                if spec.src is not None and r.src != spec.src:
                    continue
                if spec.nexthops:
                    if len(spec.nexthops) != len(r.nexthops) or any(
                            (a.gw is not None and a.gw != b.gw) or (a.dev is not None and a.dev != b.dev)
                            for a, b in zip(spec.nexthops, r.nexthops)):
                        continue
                elif spec.gw is not None or spec.dev is not None:   # fib_nh_match: first nexthop
                    if not r.nexthops:
                        continue
                    nh = r.nexthops[0]
                    if (spec.gw is not None and nh.gw != spec.gw) or \
                       (spec.dev is not None and nh.dev != spec.dev):
                        continue
                del self.routes[r.key]
                return
            # IPv6 (ip6_route_del): any sibling; with a gateway only that hop goes
            if spec.gw is not None or spec.dev is not None:
                hit = next((nh for nh in r.nexthops
                            if (spec.gw is None or nh.gw == spec.gw)
                            and (spec.dev is None or nh.dev == spec.dev)), None)
                if hit is None:
                    continue
                if spec.gw is not None and len(r.nexthops) > 1:
                    self.routes[r.key] = replace(
                        r, nexthops=tuple(nh for nh in r.nexthops if nh is not hit))
                    return
            del self.routes[r.key]
            return
        where = f"{prefix} table {_table_str(table)}" + (f" metric {spec.metric}"
                                                         if spec.metric else "")
        raise _err(f"route {where}: RTNETLINK answers: No such process", spec.prefix_tok)


def _default_scope4(rtype: str, nhs, multipath: bool) -> str:
    """iproute2's default rtm_scope for IPv4 routes."""
    if rtype == "local":
        return "host"
    if rtype in ("broadcast", "multicast", "anycast"):
        return "link"
    if rtype == "unicast" and not multipath and not any(nh.gw is not None for nh in nhs):
        return "link"
    return "global"

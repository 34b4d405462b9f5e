"""State, the whole control-plane configuration: its value semantics (copy,
==), ``apply`` / ``run``, the in-place transactions of Router.configure
(``begin`` / ``_own_small`` / ``commit`` / ``rollback``) and the command
dispatch (``_exec``, ``_ip``: ip/ip.c's option parsing and do_cmd).  The
commands of each iproute2 object are the methods State takes from the
classes of link.py, address.py, route.py, rule.py, neigh.py, sr.py,
sysctl.py and dump.py."""
from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Optional

from .errors import ConfigError, _err, _unsupported
from .objects import RT_TABLE_MAIN, _PROTO_BY_NAME
from .lexer import _logical_lines, _matches, _split_line
from .sysctl import SYSCTL_DEFAULTS, _SysctlCommands
from .route import RouteTable, _RouteCommands
from .link import _LinkCommands
from .address import _AddressCommands
from .rule import _default_rules, _RuleCommands
from .neigh import _NeighCommands
from .sr import _SrCommands
from .dump import _DumpCommands

try:
    from .._feed import plain_line as _plain_line
except ImportError:          # (not built: the Python lane reads every line)
    _plain_line = None


def _plain_command(toks: list):
    """(family given by -4/-6 or None, the words from ``add``/``replace``
    on) of a route feed's command -- ``[ip [-4|-6]] route add|replace ...``
    -- or None for any other line's words."""
    t0 = toks[0]
    if t0 == "route":
        if len(toks) > 1 and toks[1] in ("add", "replace"):
            return None, toks[1:]
    elif t0 == "ip" and len(toks) > 2:
        t1 = toks[1]
        if t1 == "route":
            if toks[2] in ("add", "replace"):
                return None, toks[2:]
        elif (t1 == "-6" or t1 == "-4") and toks[2] == "route" and len(toks) > 3:
            if toks[3] in ("add", "replace"):
                return 6 if t1 == "-6" else 4, toks[3:]
    return None


def _read_plain_line(line: str):
    """fastpath._feed.plain_line's fields of ``line`` with its protocol
    word checked and named as _plain_fields names it (``unspec`` is boot),
    ready for _RouteCommands._plain_put; None where the Python way must
    read the line."""
    f = _plain_line(line)
    if f is None or f[7] is None:
        return f
    if f[7] not in _PROTO_BY_NAME:
        return None
    return f[:7] + ("boot",) if f[7] == "unspec" else f


class State(_LinkCommands, _AddressCommands, _RouteCommands, _RuleCommands, _NeighCommands,
            _SrCommands, _SysctlCommands, _DumpCommands):
    """The whole control-plane configuration (see the module doc).

    Plain data attributes: ``interfaces`` (name -> Interface, creation order),
    ``routes`` ((family, table, prefix, metric) -> Route), ``rules`` (family ->
    [Rule] sorted by pref, kernel default rules included), ``neighbours``
    ((dev, address) -> 6-byte MAC), ``sr_tunsrc``, ``hmac_keys`` (keyid ->
    (algo, secret)), ``sysctls`` (dotted name -> int, defaults present,
    per-device entries for every interface).
    """

    def __init__(self):
        self.interfaces: dict = {}
        self.routes: RouteTable = RouteTable()
        self.rules: dict = _default_rules()
        self.neighbours: dict = {}
        # pneigh entries (ip neigh add proxy ADDR dev DEV [router]):
        # (dev, address) -> NTF_ROUTER
        self.proxies: dict = {}
        self.sr_tunsrc: Optional[ipaddress.IPv6Address] = None
        self.hmac_keys: dict = {}
        self.sysctls: dict = dict(SYSCTL_DEFAULTS)
        # vrf_net_init's add_fib_rules, spent by the first VRF device (not
        # part of the value: dump() cannot write it)
        self._vrf_rules_added = False
        lo = self._create("lo", kind="loopback", mtu=65536, mac=bytes(6))
        self._reconcile(["lo"], lambda: lo.addrs.extend(
            [ipaddress.IPv4Interface("127.0.0.1/8"), ipaddress.IPv6Interface("::1/128")]))
        # init_loopback adds ::1 without a prefix route (a re-added ::1 gets one)
        del self.routes[(6, RT_TABLE_MAIN, ipaddress.IPv6Network("::1/128"), 256)]

    # -- value semantics ----------------------------------------------------
    _FIELDS = ("interfaces", "routes", "rules", "neighbours", "proxies", "sr_tunsrc", "hmac_keys",
               "sysctls")

    def __eq__(self, other):
        if not isinstance(other, State):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self._FIELDS)

    __hash__ = None

    def __repr__(self):
        return (f"<State {len(self.interfaces)} interfaces, {len(self.routes)} routes, "
                f"{sum(len(v) for v in self.rules.values())} rules>")

    def copy(self) -> "State":
        new = State.__new__(State)
        new.interfaces = {n: replace(i, addrs=list(i.addrs)) for n, i in self.interfaces.items()}
        new.routes = self.routes.copy()
        new.rules = {f: list(v) for f, v in self.rules.items()}
        new.neighbours = dict(self.neighbours)
        new.proxies = dict(self.proxies)
        new.sr_tunsrc = self.sr_tunsrc
        new.hmac_keys = dict(self.hmac_keys)
        new.sysctls = dict(self.sysctls)
        new._vrf_rules_added = self._vrf_rules_added
        return new

    # -- public API ---------------------------------------------------------
    def apply(self, text: str) -> "State":
        """A new State with every line of ``text`` applied; ConfigError on the
        first wrong line, and ``self`` never changes."""
        new = self.copy()
        new._run(text)
        return new

    def _run(self, text: str):
        plain = self._plain_route
        # a feed's line read in C (fastpath._feed, where it is built) inside a
        # transaction (the lane's cache exists only there), straight to the
        # lane's write; any line it does not take goes the Python way below
        fast = (_read_plain_line if _plain_line is not None
                and self.__dict__.get("_plainc") is not None else None)
        put = self._plain_put
        for lineno, line in _logical_lines(text):
            try:
                if fast is not None:
                    f = fast(line)
                    if f is not None and put(*f):
                        continue
                toks = _split_line(line)
                if not toks:
                    continue
                # a route feed's line straight to the plain lane, past the
                # dispatch _exec -> _ip -> _ip_route would make to get
                # there; a line it refuses (having changed nothing) goes
                # that way
                cmd = _plain_command(toks)
                if cmd is not None and plain(cmd[0], cmd[1]):
                    continue
                self._exec(toks)
            except ConfigError as e:
                if e.line is None:
                    raise ConfigError(e.message, lineno, e.token) from None
                raise

    # -- in place, as a transaction (Router.configure) ------------------------------
    def small_tables(self) -> tuple:
        """Everything but the routes, as ``begin`` saves it and ``rollback``
        restores it (a configure compares it to tell whether the small
        tables must be rebuilt)."""
        return (self.interfaces, self.rules, self.neighbours, self.proxies, self.sr_tunsrc,
                self.hmac_keys, self.sysctls, self._vrf_rules_added)

    def begin(self):
        """Start changing this State in place: the small tables (interfaces,
        rules, neighbours, sysctls, keys) are copied before the first command
        that changes one, the routes get an overlay (RouteTable.begin), so
        the cost is that of the change, not of the routes.  Returns what
        ``rollback`` restores."""
        saved = self.small_tables()
        # copy on write: the small tables stay saved's until a command
        # changes one (_own_small), so a configure of route lines only
        # neither copies them nor has them compared
        self._cow = True
        self.routes.begin()
        # what addresses resolve to (a gateway's device, whether it is ours)
        # is looked up per route line: cached during the transaction, and
        # emptied by every command that is not a route (see _ip); kept from
        # the last transaction while its interfaces are still these
        kept = self.__dict__.get("_addrc_kept")
        same = kept is not None and kept[0] is self.interfaces
        self._addrc = kept[1] if same else {}
        # the plain route lines' validated nexthops (_RouteCommands._plain_route),
        # kept on the same terms
        self._plainc = kept[2] if same else {}
        self._addrc_kept = None
        return saved

    def _own_small(self):
        """Before the first change of a small table in a transaction: this
        State's own copies of them (``begin`` left them shared with what it
        saved).  Every command but a route one calls it first, and so does
        a route line that creates an interface (``_create``)."""
        if self.__dict__.get("_cow"):
            self._cow = False
            self.interfaces = {n: replace(i, addrs=list(i.addrs))
                               for n, i in self.interfaces.items()}
            self.rules = {f: list(v) for f, v in self.rules.items()}
            self.neighbours = dict(self.neighbours)
            self.proxies = dict(self.proxies)
            self.hmac_keys = dict(self.hmac_keys)
            self.sysctls = dict(self.sysctls)

    def run(self, text: str):
        """Apply lines inside ``begin``/``commit``: ConfigError (line-numbered)
        on the first wrong one; the caller then calls ``rollback``."""
        self._run(text)

    def commit(self, report: bool = True) -> list:
        """End the transaction: (route key, before, after) of the routes it
        changed (None: absent), see RouteTable.pending; None with
        ``report=False`` (a caller that took ``pending()`` already: a
        second list of a load's every route is not built)."""
        if self._addrc is not None:
            self._addrc_kept = (self.interfaces, self._addrc, self._plainc)
        self._addrc = self._plainc = None
        self._cow = False
        return self.routes.commit(report)

    def rollback(self, saved):
        """Undo everything since ``begin`` (which returned ``saved``)."""
        self._addrc = self._plainc = None
        self._cow = False
        (self.interfaces, self.rules, self.neighbours, self.proxies, self.sr_tunsrc,
         self.hmac_keys, self.sysctls, self._vrf_rules_added) = saved
        self.routes.rollback()

    # -- dispatch -------------------------------------------------------------
    def _exec(self, toks: list):
        if toks[0] == "sudo":
            toks = toks[1:]
            if not toks:
                raise _err("missing command after 'sudo'", "sudo")
        cmd = toks[0]
        base = cmd.rsplit("/", 1)[-1]
        if base == "ip":
            self._ip(toks[1:])
        elif cmd in self._BATCH_OBJECTS:   # an ``ip -batch`` line: no leading 'ip'
            self._ip(toks)
        elif base == "sysctl":
            if self.__dict__.get("_addrc"):
                self._addrc = {}          # (a sysctl may take addresses away)
            if self.__dict__.get("_plainc"):
                self._plainc = {}
            self._own_small()
            self._sysctl(toks[1:])
        else:
            raise _err(f"unknown command '{cmd}' (expected 'ip' or 'sysctl')", cmd)

    _IP_OBJECTS = ("address", "addrlabel", "maddress", "route", "rule", "neighbor", "neighbour",
                   "ntable", "ntbl", "link", "l2tp", "fou", "ila", "macsec", "tunnel", "tunl",
                   "tuntap", "tap", "token", "tcpmetrics", "tcp_metrics", "monitor", "xfrm",
                   "mroute", "mrule", "netns", "netconf", "vrf", "sr", "nexthop", "mptcp", "ioam",
                   "help", "stats")
    # the objects an ``ip -batch`` file's lines may start with (whole words:
    # an abbreviation could be another program's name)
    _BATCH_OBJECTS = frozenset({"route", "address", "addr", "rule", "neighbor", "neighbour",
                                "neigh", "link", "tuntap", "sr"})
    _IP_DISPLAY_OPTS = frozenset({"s", "stats", "statistics", "d", "details", "j", "json", "p",
                                  "pretty", "o", "oneline", "br", "brief", "c", "color", "colour",
                                  "h", "human", "human-readable", "iec", "N", "Numeric", "r",
                                  "resolve", "t", "timestamp", "ts", "tshort"})

    def _ip(self, args: list):
        fam = None
        i = 0
        while i < len(args) and args[i].startswith("-") and len(args[i]) > 1:
            o = args[i]
            opt = o[2:] if o.startswith("--") else o[1:]
            if opt == "4":
                fam = 4
            elif opt == "6":
                fam = 6
            elif opt in ("f", "family"):
                if i + 1 >= len(args):
                    raise _err(f"missing family after '{o}'", o)
                i += 1
                f = args[i]
                if f in ("inet", "ipv4"):
                    fam = 4
                elif f in ("inet6", "ipv6"):
                    fam = 6
                else:
                    raise _unsupported(f"{o} {f}", "only inet and inet6")
            elif opt.startswith("color") or opt in self._IP_DISPLAY_OPTS:
                pass
            elif opt in ("0", "M", "B", "n", "netns", "b", "batch", "force", "rc", "rcvbuf",
                         "a", "all", "l", "loops"):
                raise _unsupported(o, "ip option")
            else:
                raise _err(f"unknown ip option '{o}'", o)
            i += 1
        if i >= len(args):
            raise _err("missing object after 'ip' (link, address, route, rule, neigh, sr, ...)",
                       "ip")
        objtok = args[i]
        obj = _matches(objtok, self._IP_OBJECTS)
        rest = args[i + 1:]
        if obj == "route":
            self._ip_route(fam, rest)
            return
        # anything else may change devices or addresses: the address cache
        # of the transaction (begin) goes, before and after
        if self.__dict__.get("_addrc"):
            self._addrc = {}
        if self.__dict__.get("_plainc"):
            self._plainc = {}
        self._own_small()
        try:
            self._ip_other(obj, objtok, fam, rest)
        finally:
            if self.__dict__.get("_addrc"):
                self._addrc = {}
            if self.__dict__.get("_plainc"):
                self._plainc = {}

    def _ip_other(self, obj, objtok, fam, rest):
        if obj == "address":
            self._ip_addr(fam, rest)
        elif obj == "rule":
            self._ip_rule(fam, rest)
        elif obj in ("neighbor", "neighbour"):
            self._ip_neigh(fam, rest)
        elif obj == "link":
            self._ip_link(rest)
        elif obj in ("tuntap", "tap"):
            self._ip_tuntap(rest)
        elif obj == "sr":
            self._ip_sr(rest)
        elif obj is None:
            raise _err(f"unknown ip object '{objtok}' (expected link, address, route, rule, "
                       "neigh, tuntap or sr)", objtok)
        else:
            raise _unsupported(f"ip {obj}")

"""The configuration language: iproute2 and sysctl lines -> control-plane State.

A configuration is the text a Linux user would type to set up a router::

    sysctl -w net.ipv6.conf.all.seg6_enabled=1
    ip link set dev tun0 up mtu 1500
    ip -6 addr add 2001:db8:1::1/64 dev tun0
    ip -6 route add fc00::100/128 encap seg6local action End.DX4 nh4 10.0.0.2 dev tun1
    ip route add 10.1.0.0/16 encap seg6 mode encap segs fc00::1,fc00::2 dev tun0
    ip -6 rule add from 2001:db8::/32 table 100

``State().apply(text)`` parses every line and returns a *new* State; the first
wrong line raises :class:`ConfigError` (``str(e) == "line 3: invalid prefix
'fc00::1/129'"``) and nothing changes (all or nothing).  ``State.dump()``
writes the state back as lines that rebuild an equal State.

Lines: one command a line; ``#`` comments (whole line or trailing), blank
lines, a trailing backslash continues a line; tokens split as a POSIX shell
does (quotes, backslashes); an optional leading ``sudo``.  Commands: ``ip``
(objects ``link``, ``tuntap``, ``address``, ``route``, ``rule``, ``neighbour``,
``sr``; abbreviations as iproute2 matches them: ``ip -6 a a``, ``ip r``,
``ip ru``, ``ip n``, ``ip l``) and ``sysctl``.  ``show``/``list`` forms are
accepted and do nothing.  Valid iproute2 that this model does not implement
raises ``ConfigError("not supported: '<token>' ...")``.

Semantics follow the kernel (``net/ipv6/route.c``, ``net/ipv4/fib_*.c``,
``net/ipv6/addrconf.c``, ``net/core/fib_rules.c``, ``net/ipv6/seg6_local.c``,
``seg6_iptunnel.c``), with these deliberate differences:

* Interfaces are created on first mention (``dev X``, ``oif X``, ``iif X``,
  ``ip link set X``, ``link X``) and start UP, unlike a fresh Linux TUN device.
  ``ip link add``/``ip tuntap add`` also create (an existing name is "File
  exists").  ifindex is creation order; ``lo`` (ifindex 1, mtu 65536,
  127.0.0.1/8 and ::1/128) always exists.  A veth pair gets the peer first
  (lower ifindex), as ``veth_newlink`` registers it first.
* Down interfaces: addresses are kept (Linux flushes IPv6 addresses unless
  ``keep_addr_on_down``); the automatic (proto kernel) routes of an interface
  exist only while it is up (removed by ``down``, rebuilt by ``up``); user
  routes through it are kept and the datapath must treat a route whose every
  nexthop device is down as unusable (Linux deletes them).  Routes may be added
  through a down device (Linux: "Nexthop device is not up").
* Automatic routes as the kernel makes them, for an up interface:
  IPv6 ``A/len``: ``local A`` (table local, metric 0), the prefix route
  ``A/len`` (main, metric 256; also for a /128, as ``addrconf_prefix_route``
  does, except for the ``::1`` that ``init_loopback`` gives ``lo``), and the subnet-router ``anycast`` route
  (table local, metric 0) when the interface forwards and len < 127; plus
  ``multicast ff00::/8`` (table local, metric 256) on every non-loopback
  interface (``addrconf_add_mroute``).  IPv4 ``A/len`` (``fib_add_ifaddr``):
  ``local A`` (scope host, src A), for a primary address the prefix route
  (main, scope link, src A; type local in table local on ``lo``) unless /32
  or a 0.0.0.0/8 prefix, and ``broadcast`` of the last address when len < 31.
  A second address in the same subnet is secondary (local route only, src =
  primary); deleting a primary deletes its secondaries
  (``promote_secondaries`` = 0).  No link-local addresses are generated (as
  ``addr_gen_mode`` = 1); DAD is not modelled.
* A key of ``State.routes`` is (family, table, prefix, metric): one route per
  key, so IPv4 "alternative" routes (``append`` to an existing key) and IPv6
  non-ECMP duplicates are not supported; IPv6 ``append`` of gateway routes
  makes a multipath route, as the kernel does.  Where two interfaces produce
  the same automatic route key the first interface keeps it (notably
  ``multicast ff00::/8``: the kernel keeps one per interface, this model the
  first interface's; the compiled tables add the others for the lookups on
  the ingress device that tell them apart, tables._strict_routes).
* Gateways given without ``dev`` are stored with ``dev=None`` and resolved by
  the datapath compiler (the kernel resolves them when the route is added);
  gateways that are local/broadcast/multicast addresses are refused here.
* IPv6 routes have no scope: ``Route.scope`` is None for them.  Reject routes
  (blackhole, unreachable, prohibit, throw) have no nexthops (the kernel points
  IPv6 ones at ``lo``).
* sysctl defaults: forwarding = 1 for both families (fastpath is a router;
  Linux: 0); ICMP rate limits off (``net.ipv6.icmp.ratelimit`` = 0,
  ``net.ipv4.icmp_ratelimit`` = 0, ``net.ipv4.icmp_msgs_per_sec`` = 0, meaning
  "no limit" to fastpath; Linux: 1000 ms / 1000 / 1000; and ``ip_error()``'s
  per-source limiter, ``net.ipv4.route.error_cost`` = 0, in jiffies of a
  HZ 250 kernel; Linux: 250 with ``error_burst`` 1250) for deterministic
  output; the rest as Linux (``seg6_enabled`` 0, ``seg6_require_hmac`` 0,
  ``hop_limit`` 64, ``ip_default_ttl`` 64, ``auto_flowlabels`` 1, ...).
  Per-device values are copied from ``default`` when the interface is created;
  writing ``all.forwarding`` propagates to ``default`` and every interface, as
  Linux.  ``net.ipv6.conf.DEV.mtu`` follows ``ip link set DEV mtu`` (>= 1280;
  IPv6 on smaller links is not modelled).
* seg6local: attributes are checked against :data:`SEG6LOCAL_ACTIONS` (the
  kernel's ``seg6_action_table``).  An attribute the action does not take is an
  error here (the kernel silently ignores it).  Flavors psp/usp/usd are
  accepted on End and End.X and next-csid on End and End.X (fastpath
  implements RFC 8986's; the kernel takes psp and next-csid on End and
  next-csid on End.X only — see ``ActionDesc.kernel_flavors``); on End.T
  psp/usp/usd are accepted and, as in Linux, ignored.  End.DT4 /
  End.DT46 / End.DT6 ``vrftable T`` look up table T while no VRF device
  exists (Linux refuses them then); with VRF devices they need
  ``net.vrf.strict_mode=1`` and a VRF bound to T, as the kernel.
* VRF devices (``ip link add NAME type vrf table T``, ``ip link set DEV
  master NAME|nomaster``, ``ip link del NAME``, ``vrf NAME`` on routes): the
  first adds ``pref 1000 l3mdev`` for both families (once, as
  ``vrf_add_fib_rules``); the automatic routes of a VRF device's and an
  enslaved device's addresses go to T (``State.l3mdev_table``).  Enslaving
  keeps IPv6 addresses (Linux flushes them unless keep_addr_on_down).
* ``ip sr hmac set KEYID ALGO SECRET`` takes the secret on the line (iproute2
  reads it from standard input); an empty secret (``""``) removes the key.
* seg6 / seg6local segment lists are stored in the order written (the first
  segment is the first to visit).
"""
from __future__ import annotations

from .errors import ConfigError, _err, _unsupported  # noqa: F401
from .objects import (default_mac, Interface, IPAddress, IPInterface, IPNetwork,  # noqa: F401
                      Nexthop, REJECT_TYPES, Route, ROUTE_TYPES, RT_PROTOS, RT_SCOPES,
                      RT_TABLE_DEFAULT, RT_TABLE_LOCAL, RT_TABLE_MAIN, RT_TABLE_UNSPEC, Rule,
                      TABLE_NAMES, V4, V6, _LOCAL_TABLE_TYPES, _PROTO_BY_NAME, _SCOPE_BY_NAME,
                      _TABLE_IDS)
from .lexer import (_check_ifname, _Cur, _fam_name, _int, _INT_RE, _logical_lines,  # noqa: F401
                    _MAC_RE, _mac_str, _matches, _Net4, _Net6, _num, _parse_addr, _parse_mac,
                    _parse_prefix, _parse_v4, _q, _SPECIAL_CHARS, _split_line, _table, _table_str,
                    _V4PART_RE, _v6)
from .lwtunnel import (ActionDesc, NEXT_CSID_LBLEN, NEXT_CSID_NFLEN, SEG6_ENCAP_MODES,  # noqa: F401
                       Seg6Encap, Seg6Local, SEG6LOCAL_ACTIONS, SEG6LOCAL_ATTRS, SEG6LOCAL_FLAVORS,
                       SEG6LOCAL_UNSUPPORTED, _build_seg6local, _check_srh_len, _desc, _encap_args,
                       _FLAVOR_ORDER, _parse_seg6, _parse_seg6local, _RFC8986, _SEG6_KW,
                       _SEG6LOCAL_KW, _segs)
from .route import (RouteTable, _default_scope4, _GONE, _parse_gw, _parse_nexthop,  # noqa: F401
                    _parse_route, _ROUTE_UNSUPPORTED, _RouteSpec, _set_fam, _v4_user_local, _Where)
from .rule import _default_rules, _RULE_ACTIONS  # noqa: F401
from .sr import HMAC_ALGOS, SEG6_HMAC_SECRET_LEN  # noqa: F401
from .sysctl import (SYSCTL_DEFAULTS, _ALIASES, _CONF, _CONF4, _CONF6, _GLOBALS,  # noqa: F401
                     _INT_MAX, _NEIGH, _sysctl_defaults)
from .dump import _route_add_line, _route_common, _route_del_line, _rule_line  # noqa: F401
from .state import State  # noqa: F401

__all__ = [
    "ConfigError", "State", "Interface", "Nexthop", "Seg6Local", "Seg6Encap", "Route", "Rule",
    "ActionDesc", "SEG6LOCAL_ACTIONS", "SEG6LOCAL_ATTRS", "SEG6LOCAL_FLAVORS",
    "SEG6LOCAL_UNSUPPORTED", "SEG6_ENCAP_MODES", "ROUTE_TYPES", "REJECT_TYPES",
    "TABLE_NAMES", "RT_TABLE_MAIN", "RT_TABLE_LOCAL", "RT_TABLE_DEFAULT", "SYSCTL_DEFAULTS",
    "default_mac",
]

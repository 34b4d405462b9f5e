"""The state model's objects: the rtnetlink constants
(include/uapi/linux/rtnetlink.h: RT_TABLE_*, route types RTN_*, protocols
RTPROT_*, scopes RT_SCOPE_*), ``Interface`` (struct net_device with its
addresses), ``Nexthop`` (fib_nh / fib6_nh), ``Route`` (an IPv4 fib_alias +
fib_info, an IPv6 fib6_info) and ``Rule`` (struct fib_rule).  The routes'
encaps, Seg6Local and Seg6Encap, are in lwtunnel.py."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Optional, TYPE_CHECKING, Union

if TYPE_CHECKING:
    from .lwtunnel import Seg6Encap, Seg6Local


IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
IPInterface = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]

V4, V6 = ipaddress.IPv4Address, ipaddress.IPv6Address


# kernel constants (uapi)
RT_TABLE_UNSPEC, RT_TABLE_DEFAULT, RT_TABLE_MAIN, RT_TABLE_LOCAL = 0, 253, 254, 255
TABLE_NAMES = {"default": RT_TABLE_DEFAULT, "main": RT_TABLE_MAIN, "local": RT_TABLE_LOCAL}
_TABLE_IDS = {v: k for k, v in TABLE_NAMES.items()}

#: route types (rtnetlink RTN_*) this model accepts
ROUTE_TYPES = ("unicast", "local", "broadcast", "anycast", "multicast",
               "blackhole", "unreachable", "prohibit", "throw")
REJECT_TYPES = frozenset({"blackhole", "unreachable", "prohibit", "throw"})
_LOCAL_TABLE_TYPES = frozenset({"local", "broadcast", "anycast"})   # iproute2 default table

RT_PROTOS = {0: "unspec", 1: "redirect", 2: "kernel", 3: "boot", 4: "static", 8: "gated",
             9: "ra", 10: "mrt", 11: "zebra", 12: "bird", 13: "dnrouted", 14: "xorp",
             15: "ntk", 16: "dhcp", 18: "keepalived", 42: "babel", 99: "openr", 186: "bgp",
             187: "isis", 188: "ospf", 189: "rip", 192: "eigrp"}
_PROTO_BY_NAME = {v: k for k, v in RT_PROTOS.items()}
RT_SCOPES = {0: "global", 200: "site", 253: "link", 254: "host", 255: "nowhere"}
_SCOPE_BY_NAME = {v: k for k, v in RT_SCOPES.items()}
_SCOPE_BY_NAME["universe"] = 0


# the state model
def default_mac(ifindex: int) -> bytes:
    """Deterministic default MAC: 02:00:<ifindex, 4 bytes big endian>."""
    return b"\x02\x00" + (ifindex & 0xFFFFFFFF).to_bytes(4, "big")


@dataclass
class Interface:
    """A network device.  Created on first mention and UP (see module doc).

    ``kind``: None (created by mention), "loopback", "dummy", "tun", "tap",
    "veth", "vlan", "vrf".  ``link``: the parent of a vlan, the peer of a veth.
    ``addrs`` keeps the order the addresses were added in.  ``vrf_table``:
    a VRF device's table (``ip link add NAME type vrf table T``);
    ``master``: the VRF a device is enslaved to (``ip link set DEV master
    NAME``), None if none.
    """
    name: str
    ifindex: int
    up: bool = True
    mtu: int = 1500
    mac: Optional[bytes] = None
    addrs: list = field(default_factory=list)
    vlan: Optional[int] = None
    kind: Optional[str] = None
    link: Optional[str] = None
    vrf_table: Optional[int] = None
    master: Optional[str] = None

    def __post_init__(self):
        if self.mac is None:
            self.mac = default_mac(self.ifindex)


@dataclass(frozen=True, slots=True)
class Nexthop:
    gw: Optional[IPAddress] = None
    dev: Optional[str] = None
    weight: int = 1


@dataclass(frozen=True, slots=True)
class Route:
    family: int                       # 4 or 6
    prefix: IPNetwork
    table: int
    type: str = "unicast"
    metric: int = 0
    nexthops: tuple = ()
    encap: Union[Seg6Local, Seg6Encap, None] = None
    proto: str = "boot"               # "kernel" for the automatic routes
    scope: Optional[str] = None       # IPv4 only
    src: Optional[IPAddress] = None   # preferred source
    mtu: Optional[int] = None
    tunsrc: Optional[ipaddress.IPv6Address] = None
    hoplimit: Optional[int] = None

    @property
    def key(self) -> tuple:
        return (self.family, self.table, self.prefix, self.metric)

    @property
    def dev(self) -> Optional[str]:
        return self.nexthops[0].dev if self.nexthops else None

    @property
    def gateway(self) -> Optional[IPAddress]:
        return self.nexthops[0].gw if self.nexthops else None


class _RouteFields:
    """The layout of Route (the same slots, in the same order) with a plain
    __init__: see new_route."""
    __slots__ = ("family", "prefix", "table", "type", "metric", "nexthops", "encap", "proto",
                 "scope", "src", "mtu", "tunsrc", "hoplimit")

    def __init__(self, family, prefix, table, type, metric, nexthops, encap, proto, scope, src,
                 mtu, tunsrc, hoplimit):
        self.family = family
        self.prefix = prefix
        self.table = table
        self.type = type
        self.metric = metric
        self.nexthops = nexthops
        self.encap = encap
        self.proto = proto
        self.scope = scope
        self.src = src
        self.mtu = mtu
        self.tunsrc = tunsrc
        self.hoplimit = hoplimit


assert _RouteFields.__slots__ == Route.__slots__


def new_route(family, prefix, table, type, metric, nexthops, encap, proto, scope, src, mtu,
              tunsrc, hoplimit) -> Route:
    """``Route(...)`` with every field given, four times as fast (0.32
    against 1.40 us here): a frozen dataclass's __init__ stores each of its
    13 fields through ``object.__setattr__``, a call each, and a route
    feed builds one per line.  The fields are stored as plain slots of a
    class with Route's layout, then the object becomes a Route
    (``__class__`` assignment, which CPython allows between classes of the
    same slots); it is then a Route like any other -- equal, hashed and
    frozen as one (tests/test_plain_routes.py)."""
    r = _RouteFields(family, prefix, table, type, metric, nexthops, encap, proto, scope, src, mtu,
                     tunsrc, hoplimit)
    r.__class__ = Route
    return r


@dataclass(frozen=True)
class Rule:
    family: int
    pref: int
    src: Optional[IPNetwork] = None
    dst: Optional[IPNetwork] = None
    iif: Optional[str] = None
    table: int = RT_TABLE_MAIN        # 0 for non-lookup actions and l3mdev rules
    action: str = "lookup"            # lookup, blackhole, unreachable, prohibit
    l3mdev: bool = False              # lookup in the table of the packet's VRF

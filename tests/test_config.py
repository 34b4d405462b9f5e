"""Tests of fastpath.config: the iproute2/sysctl configuration language."""
from __future__ import annotations

import ipaddress
import pathlib
import pickle
import re

import pytest
from hypothesis import given, settings, strategies as st

from fastpath import config as C

State, ConfigError = C.State, C.ConfigError
N = ipaddress.ip_network
A = ipaddress.ip_address
DATA = pathlib.Path(__file__).parent / "data"


def new_routes(before: State, after: State) -> dict:
    return {k: r for k, r in after.routes.items() if before.routes.get(k) != r}


def nh(dev, gw=None, weight=1):
    return (C.Nexthop(A(gw) if gw else None, dev, weight),)


def err(text, state=None) -> ConfigError:
    state = state or State()
    with pytest.raises(ConfigError) as ei:
        state.apply(text)
    return ei.value


# ---------------------------------------------------------------------------
# the fresh state
def test_fresh_state_lo_routes_rules_sysctls():
    s = State()
    assert list(s.interfaces) == ["lo"]
    lo = s.interfaces["lo"]
    assert (lo.ifindex, lo.up, lo.mtu, lo.mac, lo.kind) == (1, True, 65536, bytes(6), "loopback")
    assert lo.addrs == [ipaddress.ip_interface("127.0.0.1/8"), ipaddress.ip_interface("::1/128")]
    kern = dict(proto="kernel")
    assert s.routes == {r.key: r for r in [
        C.Route(4, N("127.0.0.1/32"), 255, "local", 0, nh("lo"), scope="host",
                src=A("127.0.0.1"), **kern),
        C.Route(4, N("127.0.0.0/8"), 255, "local", 0, nh("lo"), scope="host",
                src=A("127.0.0.1"), **kern),
        C.Route(4, N("127.255.255.255/32"), 255, "broadcast", 0, nh("lo"), scope="link",
                src=A("127.0.0.1"), **kern),
        C.Route(6, N("::1/128"), 255, "local", 0, nh("lo"), **kern),
    ]}   # no "::1 dev lo metric 256": init_loopback adds ::1 without a prefix route
    assert [(r.pref, r.table) for r in s.rules[4]] == [(0, 255), (32766, 254), (32767, 253)]
    assert [(r.pref, r.table) for r in s.rules[6]] == [(0, 255), (32766, 254)]
    assert s.neighbours == {} and s.hmac_keys == {} and s.sr_tunsrc is None
    assert s.sysctl("net.ipv6.conf.all.forwarding") == 1
    assert s.sysctl("net.ipv4.ip_forward") == 1
    assert s.sysctl("net.ipv6.conf.all.seg6_enabled") == 0
    assert s.sysctl("net.ipv6.conf.lo.seg6_enabled") == 0
    assert s.sysctl("net.ipv6.conf.lo.mtu") == 65536
    assert s.sysctl("net.ipv6.icmp.ratelimit") == 0
    assert s.sysctl("net.ipv4.icmp_ratelimit") == 0
    assert s.sysctl("net.ipv4.icmp_msgs_per_sec") == 0
    assert s.sysctl("net.ipv6.conf.all.hop_limit") == 64
    assert s.sysctl("net.ipv4.ip_default_ttl") == 64
    assert s.sysctl("net.ipv6.seg6_flowlabel") == 0
    assert s.sysctl("net.ipv6.conf.all.seg6_require_hmac") == 0
    assert s.sysctl("net.ipv4.fib_multipath_hash_policy") == 0
    assert s == State() and s.dump() == ""
    with pytest.raises(KeyError):
        s.sysctl("net.ipv6.conf.eth9.forwarding")


def test_interfaces_created_on_first_mention_up_with_ifindex_in_order():
    s = State().apply("ip -6 route add fc00::/64 dev b\n"
                      "ip link set a up\n"
                      "ip -6 rule add iif c table 5\n"
                      "ip -6 route add fc00::1/128 encap seg6local action End.DX2 oif d dev b\n")
    assert [(i.name, i.ifindex, i.up) for i in s.interfaces.values()] == \
        [("lo", 1, True), ("b", 2, True), ("a", 3, True), ("c", 4, True), ("d", 5, True)]
    assert s.interfaces["b"].mac == bytes.fromhex("020000000002")
    assert s.sysctl("net.ipv6.conf.b.forwarding") == 1
    assert s.sysctl("net.ipv6.conf.b.mtu") == 1500


def test_veth_peer_gets_the_lower_ifindex_and_vlan_parent_is_created():
    s = State().apply("ip link add veth0 type veth peer name veth1\n"
                      "ip link add link eth0 name eth0.10 type vlan id 10\n")
    idx = {n: i.ifindex for n, i in s.interfaces.items()}
    assert idx == {"lo": 1, "veth1": 2, "veth0": 3, "eth0": 4, "eth0.10": 5}
    assert s.interfaces["veth0"].link == "veth1" and s.interfaces["veth1"].link == "veth0"
    v = s.interfaces["eth0.10"]
    assert (v.kind, v.vlan, v.link) == ("vlan", 10, "eth0")


# ---------------------------------------------------------------------------
# accepted forms
BASE = State().apply("ip link set tun0 up\nip link set tun1 up\n"
                     "ip -6 addr add 2001:db8:1::1/64 dev tun0\nip addr add 10.0.0.1/24 dev tun0\n")

ACCEPTED = [
    # link / tuntap
    "ip link set dev tun0 up", "ip link set tun0 down", "ip link set tun0 mtu 9000",
    "ip link set tun0 address 02:11:22:33:44:55", "ip link set dev tun0 up mtu 1400 address 2:0:0:0:0:9",
    "ip l s tun0 up", "ip link change tun0 mtu 1280", "ip link add dum0 type dummy",
    "ip link add name dum0 type dummy", "ip link add dum0 mtu 9000 type dummy",
    "ip link add tunx type tun", "ip link add veth0 type veth peer name veth1",
    "ip link add veth0 type veth peer veth1", "ip link add link tun0 name tun0.7 type vlan id 7",
    "ip tuntap add dev tun9 mode tun", "ip tuntap add tun9 mode tap", "ip tuntap add mode tun name tun9",
    "ip tuntap add dev tun9 mode tun multi_queue user 0 group 0",
    "ip link show", "ip link", "ip -d -s link show dev tun0",
    # addresses
    "ip -6 addr add 2001:db8:2::1/64 dev tun1", "ip -6 a a 2001:db8:2::1/64 dev tun1",
    "ip -6 address add 2001:db8:2::1/64 dev tun1", "ip addr add 10.1.0.1/24 dev tun1",
    "ip addr add 10.1.0.1/24 brd + dev tun1", "ip addr add local 10.1.0.1/24 dev tun1",
    "ip -6 addr add 2001:db8:2::1/64 dev tun1 nodad", "ip addr add 10.1.0.1 dev tun1",
    "ip -6 addr add 2001:db8:2::1/64 dev tun1 valid_lft forever preferred_lft forever",
    "ip -6 addr del 2001:db8:1::1/64 dev tun0", "ip addr del 10.0.0.1/24 dev tun0",
    "ip addr del 10.0.0.1 dev tun0", "ip -6 addr replace 2001:db8:1::1/64 dev tun0",
    "ip addr show", "ip a", "ip -4 a s",
    # routes
    "ip -6 route add fc00::/64 dev tun0", "ip -6 r a fc00::/64 dev tun0", "ip -6 ro add fc00::/64 dev tun0",
    "ip route add 10.9.0.0/16 via 10.0.0.2", "ip route add 10.9.0.0/16 via 10.0.0.2 dev tun0",
    "ip route add to 10.9.0.0/16 dev tun0", "ip route add 10.9/16 dev tun0",
    "ip -6 route add default via 2001:db8:1::2", "ip route add default via 2001:db8:1::2 dev tun0",
    "ip route add default via 10.0.0.2", "ip -4 route add default dev tun0",
    "ip -6 route add fc00::1 dev tun0", "ip -6 route replace fc00::/64 dev tun0",
    "ip -6 route append fc00::/64 via 2001:db8:1::2 dev tun0",
    "ip -6 route add fc00::/64 dev tun0 table 100", "ip -6 route add fc00::/64 dev tun0 table main",
    "ip -6 route add fc00::/64 dev tun0 table local", "ip -6 route add fc00::/64 dev tun0 table default",
    "ip -6 route add fc00::/64 dev tun0 metric 5", "ip -6 route add fc00::/64 dev tun0 priority 5",
    "ip -6 route add fc00::/64 dev tun0 preference 5", "ip -6 route add fc00::/64 dev tun0 proto static",
    "ip -6 route add fc00::/64 dev tun0 protocol 99", "ip route add 10.9.0.0/16 dev tun0 scope link",
    "ip route add 10.9.0.0/16 dev tun0 src 10.0.0.1", "ip -6 route add fc00::/64 dev tun0 src 2001:db8:1::1",
    "ip -6 route add fc00::/64 dev tun0 mtu 1400", "ip -6 route add fc00::/64 dev tun0 hoplimit 10",
    "ip -6 route add fc00::/64 dev tun0 pref medium",
    "ip route add blackhole 10.9.0.0/16", "ip route add unreachable 10.9.0.0/16",
    "ip route add prohibit 10.9.0.0/16", "ip route add throw 10.9.0.0/16",
    "ip -6 route add blackhole fc00::/64", "ip -6 route add unreachable default table 100",
    "ip route add local 10.9.9.9 dev lo", "ip -6 route add local fc00::9 dev lo",
    "ip route add unicast 10.9.0.0/16 dev tun0", "ip -6 route add anycast fc00::9 dev tun0",
    "ip route add broadcast 10.9.9.255 dev tun0", "ip -6 route add multicast ff0e::/16 dev tun0 table 5",
    "ip route add 10.9.0.0/16 nexthop via 10.0.0.2 dev tun0 weight 2 nexthop via 10.0.0.3 dev tun0",
    "ip -6 route add fc00::/64 nexthop via 2001:db8:1::2 dev tun0 nexthop via 2001:db8:1::3 dev tun0",
    "ip route add 10.9.0.0/16 via inet 10.0.0.2", "ip -6 route add fc00::/64 via inet6 2001:db8:1::2",
    "ip route show", "ip route", "ip -6 route list table all", "ip route get 10.0.0.1",
    "ip -6 route del 2001:db8:1::/64", "ip -6 route delete 2001:db8:1::/64 dev tun0",
    "ip route del 10.0.0.0/24", "ip -6 route del local 2001:db8:1::1",
    # seg6local / seg6 (per-action forms are tested below)
    "ip -6 route add fc00::1/128 encap seg6local action End dev tun0",
    "ip -6 route add fc00::1/128 dev tun0 encap seg6local action End",
    "ip -6 route add local fc00::1 encap seg6local action End flavors next-csid dev lo",
    "ip route add 10.9.0.0/16 encap seg6 mode encap segs fc00::1 dev tun0",
    "ip -6 route add fc00::/64 encap seg6 mode inline segs fc00::1,fc00::2 dev tun0",
    "ip -6 route add fc00::/64 encap seg6 mode encap.red segs fc00::1 hmac 5 dev tun0",
    "ip -6 route add fc00::/64 encap seg6 mode l2encap segs fc00::1 dev tun0",
    "ip -6 route add fc00::/64 encap seg6 mode l2encap.red segs fc00::1 dev tun0",
    "ip -6 route add fc00::/64 encap seg6 mode encap tunsrc 2001:db8:1::1 segs fc00::1 dev tun0",
    # rules
    "ip rule add from 10.0.0.0/8 table 100", "ip -6 rule add from 2001:db8::/32 lookup 100",
    "ip -6 ru a to fc00::/16 table 7 pref 10", "ip rule add from all iif tun0 table 5",
    "ip rule add dev tun0 table 5 priority 7", "ip rule add to 10.0.0.0/8 blackhole",
    "ip -6 rule add to fc00::/16 unreachable", "ip -6 rule add to fc00::/16 type prohibit",
    "ip rule add from 10.0.0.0/8 table 1234567", "ip -6 rule del pref 32766", "ip rule del table local",
    "ip rule show", "ip -6 rule list",
    # neighbours
    "ip -6 neigh add 2001:db8:1::2 lladdr 02:00:00:00:00:aa dev tun0 nud permanent",
    "ip neigh add 10.0.0.2 lladdr 02:00:00:00:00:aa dev tun0", "ip n replace 10.0.0.2 lladdr 2:0:0:0:0:1 dev tun0",
    "ip -6 neighbour add 2001:db8:1::2 lladdr 02:00:00:00:00:aa dev tun0 nud reachable router",
    "ip neigh show",
    # sr
    "ip sr tunsrc set 2001:db8:1::1", "ip sr hmac set 7 sha1 secret", "ip sr hmac set 7 sha256 'a b c'",
    "ip sr tunsrc show", "ip sr hmac show",
    # sysctl
    "sysctl -w net.ipv6.conf.all.forwarding=1", "sysctl net.ipv6.conf.all.forwarding=0",
    "sysctl -w net.ipv6.conf.all.seg6_enabled = 1", "sysctl -q -w net.ipv6.conf.tun0.seg6_enabled=1",
    "sysctl -wq net.ipv4.ip_forward=1", "sysctl -w net/ipv6/conf/tun0/hop_limit=10",
    "sysctl -w net.ipv6.conf.default.seg6_enabled=1 net.ipv6.seg6_flowlabel=-1",
    "sysctl -w net.ipv6.conf.tun0.seg6_require_hmac=-1", "sysctl -w net.ipv6.conf.tun0.mtu=1280",
    "sysctl -w net.ipv6.icmp.ratelimit=1000", "sysctl -w net.ipv4.icmp_ratelimit=1000",
    "sysctl -w net.ipv4.icmp_ratemask=0", "sysctl -w net.ipv4.icmp_msgs_per_sec=1000",
    "sysctl -w net.ipv4.icmp_msgs_burst=10", "sysctl -w net.ipv4.fib_multipath_hash_policy=1",
    "sysctl -w net.ipv6.fib_multipath_hash_policy=2", "sysctl -w net.ipv6.auto_flowlabels=0",
    "sysctl -w net.ipv4.ip_default_ttl=255", "sysctl -w net.ipv6.conf.default.accept_ra=0",
    "sysctl -w net.ipv6.conf.all.router_solicitations=0", "sysctl -w net.ipv6.conf.default.addr_gen_mode=1",
    "sysctl -w net.ipv6.conf.default.accept_dad=0", "sysctl -w net.ipv4.conf.tun0.forwarding=0",
    "sysctl -w net.ipv4.conf.all.send_redirects=0", "sysctl net.ipv6.conf.all.forwarding",
    # the rest of the lexical forms
    "sudo ip link set tun0 up", "/sbin/ip link set tun0 up", "  ip link set tun0 up   # trailing comment",
    "# only a comment", "", "ip link set \\\n  tun0 up", "ip link set 'tun0' \"up\"",
    "ip --6 route add fc00::/64 dev tun0", "ip -f inet6 route add fc00::/64 dev tun0",
    "ip -family inet route add 10.9.0.0/16 dev tun0",
]


@pytest.mark.parametrize("line", ACCEPTED)
def test_accepted_forms(line):
    after = BASE.apply(line)
    assert isinstance(after, State)
    assert State().apply(after.dump()) == after     # and it dumps back


ABBREVIATIONS = [
    ("ip -6 address add 2001:db8:9::1/64 dev x", ["ip -6 a a 2001:db8:9::1/64 dev x",
                                                 "ip -6 addr add 2001:db8:9::1/64 dev x",
                                                 "ip -6 ad ad 2001:db8:9::1/64 dev x"]),
    ("ip -6 route add fc00::/64 dev x", ["ip -6 r a fc00::/64 dev x", "ip -6 ro add fc00::/64 dev x",
                                         "ip -6 rou ad fc00::/64 dev x"]),
    ("ip rule add from 10.0.0.0/8 table 5", ["ip ru a from 10.0.0.0/8 table 5",
                                             "ip rul add from 10.0.0.0/8 lookup 5"]),
    ("ip neighbour add 10.0.0.9 lladdr 2:0:0:0:0:1 dev x",
     ["ip n a 10.0.0.9 lladdr 2:0:0:0:0:1 dev x", "ip neigh add 10.0.0.9 lladdr 2:0:0:0:0:1 dev x",
      "ip neighbor add 10.0.0.9 lladdr 2:0:0:0:0:1 dev x"]),
    ("ip link set dev x down", ["ip l s x down", "ip li set x down"]),
]


@pytest.mark.parametrize("long, shorts", ABBREVIATIONS)
def test_abbreviations_mean_the_long_form(long, shorts):
    want = State().apply(long)
    for s in shorts:
        assert State().apply(s) == want, s


# ---------------------------------------------------------------------------
# automatic routes of ip addr add (kernel: addrconf, fib_add_ifaddr)
def test_ipv6_address_auto_routes_exact():
    s0 = State().apply("ip link set x up")
    assert new_routes(State(), s0) == {r.key: r for r in [
        C.Route(6, N("ff00::/8"), 255, "multicast", 256, nh("x"), proto="kernel")]}
    s = s0.apply("ip -6 addr add 2001:db8::1/64 dev x")
    assert new_routes(s0, s) == {r.key: r for r in [
        C.Route(6, N("2001:db8::1/128"), 255, "local", 0, nh("x"), proto="kernel"),
        C.Route(6, N("2001:db8::/128"), 255, "anycast", 0, nh("x"), proto="kernel"),
        C.Route(6, N("2001:db8::/64"), 254, "unicast", 256, nh("x"), proto="kernel"),
    ]}
    assert s.interfaces["x"].addrs == [ipaddress.ip_interface("2001:db8::1/64")]
    assert s.apply("ip -6 addr del 2001:db8::1/64 dev x") == s0


@pytest.mark.parametrize("plen, anycast", [(64, True), (126, True), (127, False), (128, False)])
def test_ipv6_anycast_only_below_127_and_prefix_route_always(plen, anycast):
    s0 = State().apply("ip link set x up")
    s = s0.apply(f"ip -6 addr add 2001:db8::1/{plen} dev x")
    got = {(r.type, r.table, r.metric) for r in new_routes(s0, s).values()}
    assert ("local", 255, 0) in got and ("unicast", 254, 256) in got   # /128 too, as the kernel
    assert (("anycast", 255, 0) in got) == anycast


def test_ipv6_anycast_follows_forwarding():
    s = State().apply("sysctl -w net.ipv6.conf.default.forwarding=0\nip -6 addr add 2001:db8::1/64 dev x")
    key = (6, 255, N("2001:db8::/128"), 0)
    assert key not in s.routes
    s2 = s.apply("sysctl -w net.ipv6.conf.x.forwarding=1")
    assert s2.routes[key].type == "anycast"
    s3 = s2.apply("sysctl -w net.ipv6.conf.all.forwarding=0")
    assert key not in s3.routes and s3.sysctl("net.ipv6.conf.x.forwarding") == 0


def test_ipv4_address_auto_routes_exact():
    s0 = State().apply("ip link set x up")
    s = s0.apply("ip addr add 10.0.0.1/24 dev x")
    src = A("10.0.0.1")
    assert new_routes(s0, s) == {r.key: r for r in [
        C.Route(4, N("10.0.0.1/32"), 255, "local", 0, nh("x"), proto="kernel", scope="host", src=src),
        C.Route(4, N("10.0.0.255/32"), 255, "broadcast", 0, nh("x"), proto="kernel", scope="link",
                src=src),
        C.Route(4, N("10.0.0.0/24"), 254, "unicast", 0, nh("x"), proto="kernel", scope="link",
                src=src),
    ]}
    assert s.apply("ip addr del 10.0.0.1/24 dev x") == s0


@pytest.mark.parametrize("addr, want", [
    ("10.0.0.1/31", {"local", "unicast"}),              # no broadcast for /31
    ("10.0.0.1/32", {"local"}),                         # prefix == address: no prefix route
    ("10.0.0.0/8", {"local", "unicast", "broadcast"}),
    ("0.0.0.5/8", {"local"}),                           # zeronet: no prefix route
])
def test_ipv4_address_prefix_and_broadcast_rules(addr, want):
    s0 = State().apply("ip link set x up")
    s = s0.apply(f"ip addr add {addr} dev x")
    assert {r.type for r in new_routes(s0, s).values()} == want


def test_ipv4_secondary_address_and_primary_deletion():
    s0 = State().apply("ip addr add 10.0.0.1/24 dev x")
    s = s0.apply("ip addr add 10.0.0.2/24 dev x")
    assert new_routes(s0, s) == {(4, 255, N("10.0.0.2/32"), 0): C.Route(
        4, N("10.0.0.2/32"), 255, "local", 0, nh("x"), proto="kernel", scope="host",
        src=A("10.0.0.1"))}
    # promote_secondaries = 0: the secondary goes with its primary
    s2 = s.apply("ip addr del 10.0.0.1/24 dev x")
    assert s2.interfaces["x"].addrs == []
    assert s2 == State().apply("ip link set x up")


def test_lo_extra_address_and_deleting_lo_addresses():
    s = State().apply("ip -6 addr add fc00::1/128 dev lo")
    assert new_routes(State(), s).keys() == {(6, 255, N("fc00::1/128"), 0), (6, 254, N("fc00::1/128"), 256)}
    s = State().apply("ip addr del 127.0.0.1/8 dev lo")
    assert all(r.family == 6 for r in s.routes.values())
    # a re-added ::1 gets the prefix route the built-in one lacks (kernel 6.18)
    s = State().apply("ip -6 addr del ::1/128 dev lo\nip -6 addr add ::1/128 dev lo")
    assert new_routes(State(), s).keys() == {(6, 254, N("::1/128"), 256)}
    assert State().apply(s.dump()) == s


def test_down_removes_auto_routes_keeps_addresses_and_user_routes_up_restores():
    s = State().apply("ip -6 addr add 2001:db8::1/64 dev x\nip addr add 10.0.0.1/24 dev x\n"
                      "ip -6 route add fc00::/64 via 2001:db8::2 dev x")
    d = s.apply("ip link set x down")
    assert not d.interfaces["x"].up and len(d.interfaces["x"].addrs) == 2
    # the IPv4 address keeps its 'local' route (fib_disable_ip), nothing else stays
    assert sorted(map(str, (r.prefix for r in d.routes.values() if r.dev == "x"))) == \
        ["10.0.0.1/32", "fc00::/64"]
    assert d.apply("ip link set x up") == s
    # an address added while down gets its routes when the link comes up
    d2 = d.apply("ip -6 addr add 2001:db8:5::1/64 dev x")
    assert new_routes(d, d2) == {}
    assert (6, 254, N("2001:db8:5::/64"), 256) in d2.apply("ip link set x up").routes


def test_user_deleted_auto_route_stays_deleted_and_dumps():
    s = State().apply("ip -6 addr add 2001:db8::1/64 dev x\nip -6 route del 2001:db8::/64 dev x")
    assert (6, 254, N("2001:db8::/64"), 256) not in s.routes
    assert State().apply(s.dump()) == s


# ---------------------------------------------------------------------------
# route semantics
def test_route_defaults_metric_table_scope_proto():
    s = State().apply("ip -6 route add fc00::/64 dev x\nip route add 10.9.0.0/16 dev x\n"
                      "ip route add 10.8.0.0/16 via 10.9.0.1\nip route add local 10.7.0.1 dev lo\n"
                      "ip -6 route add fc00:1::/64 dev x metric 0 table 0")
    r6 = s.routes[(6, 254, N("fc00::/64"), 1024)]
    assert (r6.type, r6.proto, r6.scope, r6.nexthops) == ("unicast", "boot", None, nh("x"))
    assert s.routes[(4, 254, N("10.9.0.0/16"), 0)].scope == "link"
    gw = s.routes[(4, 254, N("10.8.0.0/16"), 0)]
    assert gw.scope == "global" and gw.nexthops == (C.Nexthop(A("10.9.0.1"), None, 1),)
    assert s.routes[(4, 255, N("10.7.0.1/32"), 0)].scope == "host"
    assert (6, 254, N("fc00:1::/64"), 1024) in s.routes     # metric 0 -> 1024, table 0 -> main


def test_default_prefix_and_family_inference():
    s = State().apply("ip route add default via 2001:db8::2 dev x\nip route add default via 10.0.0.2 dev x\n"
                      "ip route add default dev x table 9")
    assert (6, 254, N("::/0"), 1024) in s.routes
    assert (4, 254, N("0.0.0.0/0"), 0) in s.routes
    assert (4, 9, N("0.0.0.0/0"), 0) in s.routes


def test_add_existing_is_file_exists_and_replace_replaces():
    s = State().apply("ip -6 route add fc00::/64 dev x")
    e = err("ip -6 route add fc00::/64 dev y", s)
    assert "RTNETLINK answers: File exists" in str(e) and e.line == 1
    s2 = s.apply("ip -6 route add fc00::/64 dev y metric 5")      # another metric: fine
    assert len([k for k in s2.routes if k[2] == N("fc00::/64")]) == 2
    s3 = s.apply("ip -6 route replace fc00::/64 dev y")
    assert s3.routes[(6, 254, N("fc00::/64"), 1024)].dev == "y"
    assert "No such file or directory" in str(err("ip -6 route change fc00:9::/64 dev y", s))
    assert s.apply("ip -6 route change fc00::/64 dev y") == s3
    e = err("ip route add 127.0.0.1 dev lo table local")
    assert "File exists" in e.message


def test_delete_semantics():
    s = State().apply("ip -6 route add fc00::/64 dev x metric 10\nip -6 route add fc00::/64 dev y metric 20\n"
                      "ip route add 10.9.0.0/16 via 10.0.0.2 dev x\nip route add 10.9.0.0/16 dev y metric 7\n")
    assert "RTNETLINK answers: No such process" in str(err("ip -6 route del fc00:1::/64", s))
    assert "No such process" in str(err("ip -6 route del fc00::/64 metric 30", s))
    assert "No such process" in str(err("ip -6 route del fc00::/64 dev z", s))
    assert "No such process" in str(err("ip route del 10.9.0.0/16 via 10.0.0.3", s))
    assert "No such process" in str(err("ip route del 10.9.0.0/16 table 5", s))
    assert "No such process" in str(err("ip route del blackhole 10.9.0.0/16", s))
    # without metric the lowest metric goes first
    d = s.apply("ip -6 route del fc00::/64")
    assert [k[3] for k in d.routes if k[2] == N("fc00::/64")] == [20]
    d = s.apply("ip -6 route del fc00::/64 dev y")
    assert [k[3] for k in d.routes if k[2] == N("fc00::/64")] == [10]
    d = s.apply("ip route del 10.9.0.0/16 dev y")
    assert [k[3] for k in d.routes if k[2] == N("10.9.0.0/16")] == [0]
    d = s.apply("ip route del 10.9.0.0/16 via 10.0.0.2 metric 0")
    assert [k[3] for k in d.routes if k[2] == N("10.9.0.0/16")] == [7]


def test_ipv6_multipath_append_and_delete_one_hop():
    s = State().apply("ip -6 route add fc00::/64 via 2001:db8::2 dev x\n"
                      "ip -6 route append fc00::/64 via 2001:db8::3 dev x")
    r = s.routes[(6, 254, N("fc00::/64"), 1024)]
    assert [str(n.gw) for n in r.nexthops] == ["2001:db8::2", "2001:db8::3"]
    assert s == State().apply("ip -6 route add fc00::/64 nexthop via 2001:db8::2 dev x "
                              "nexthop via 2001:db8::3 dev x")
    assert "File exists" in str(err("ip -6 route append fc00::/64 via 2001:db8::3 dev x", s))
    d = s.apply("ip -6 route del fc00::/64 via 2001:db8::2")
    assert d.routes[(6, 254, N("fc00::/64"), 1024)].nexthops == nh("x", "2001:db8::3")
    assert "not supported" in str(err("ip -6 route append fc00::/64 dev y", s))


def test_ipv4_multipath_and_append_to_existing_not_supported():
    s = State().apply("ip route add 10.9.0.0/16 nexthop via 10.0.0.2 dev x weight 3 nexthop via 10.0.0.3 dev y")
    r = s.routes[(4, 254, N("10.9.0.0/16"), 0)]
    assert r.nexthops == (C.Nexthop(A("10.0.0.2"), "x", 3), C.Nexthop(A("10.0.0.3"), "y", 1))
    assert r.scope == "global"
    e = err("ip route append 10.9.0.0/16 via 10.0.0.4 dev x", s)
    assert e.token == "append" and "not supported" in e.message
    assert s.apply("ip route append 10.10.0.0/16 via 10.0.0.4 dev x") is not s


def test_reject_routes_have_no_nexthops():
    s = State().apply("ip -6 route add blackhole fc00::/64 dev x\nip route add prohibit 10.9.0.0/16")
    assert s.routes[(6, 254, N("fc00::/64"), 1024)].nexthops == ()
    assert s.routes[(4, 254, N("10.9.0.0/16"), 0)].type == "prohibit"


# ---------------------------------------------------------------------------
# rules
def test_rule_pref_auto_assignment_is_second_rule_minus_one():
    s = State().apply("ip rule add from 10.0.0.0/8 table 100")
    assert [(r.pref, r.table) for r in s.rules[4]] == [(0, 255), (32765, 100), (32766, 254),
                                                       (32767, 253)]
    s = s.apply("ip rule add from 10.1.0.0/16 table 101")
    assert [r.pref for r in s.rules[4]] == [0, 32764, 32765, 32766, 32767]
    s = s.apply("ip rule add pref 100 to 10.2.0.0/16 table 5\nip rule add to 10.3.0.0/16 table 6")
    assert [r.pref for r in s.rules[4]] == [0, 99, 100, 32764, 32765, 32766, 32767]
    # with only one rule left (or the second at 0) the kernel picks 0
    s6 = State().apply("ip -6 rule del pref 32766\nip -6 rule add from fc00::/16 table 5")
    assert [(r.pref, r.table) for r in s6.rules[6]] == [(0, 255), (0, 5)]


def test_rule_same_pref_is_stable_duplicate_is_file_exists_del_matches():
    s = State().apply("ip -6 rule add pref 10 from fc00::/16 table 1\n"
                      "ip -6 rule add pref 10 from fc01::/16 table 2\n"
                      "ip -6 rule add pref 5 iif x unreachable")
    assert [(r.pref, r.table, r.action) for r in s.rules[6]] == [
        (0, 255, "lookup"), (5, 0, "unreachable"), (10, 1, "lookup"), (10, 2, "lookup"),
        (32766, 254, "lookup")]
    assert s.rules[6][1].iif == "x" and s.rules[6][2].src == N("fc00::/16")
    assert "RTNETLINK answers: File exists" in str(err("ip -6 rule add pref 10 from fc00::/16 table 1", s))
    d = s.apply("ip -6 rule del pref 10 table 2")
    assert [r.table for r in d.rules[6] if r.pref == 10] == [1]
    assert "No such file or directory" in str(err("ip -6 rule del pref 11", s))
    assert State().apply("ip rule add to 10.0.0.0/8 table 77").rules[6] == State().rules[6]


# ---------------------------------------------------------------------------
# seg6local
def test_action_table_matches_kernel_notes():
    t = C.SEG6LOCAL_ACTIONS
    assert {n: d.uapi for n, d in t.items()} == {
        "End": 1, "End.X": 2, "End.T": 3, "End.DX2": 4, "End.DX6": 5, "End.DX4": 6, "End.DT6": 7,
        "End.DT4": 8, "End.B6": 9, "End.B6.Encaps": 10, "End.DT46": 16}
    assert {n: set(d.required) for n, d in t.items()} == {
        "End": set(), "End.X": {"nh6"}, "End.T": {"table"}, "End.DX2": {"oif"}, "End.DX6": {"nh6"},
        "End.DX4": {"nh4"}, "End.DT6": set(), "End.DT4": {"vrftable"}, "End.B6": {"srh"},
        "End.B6.Encaps": {"srh"}, "End.DT46": {"vrftable"}}
    assert t["End.DT6"].one_of == ("table", "vrftable")
    assert all("count" in d.optional for d in t.values())
    assert t["End.X"].optional == {"oif", "count", "flavors"}
    assert t["End.DX4"].kernel_fn == "input_action_end_dx4"
    assert t["End"].flavors == {"psp", "usp", "usd", "next-csid"}
    assert t["End.X"].flavors == {"psp", "usp", "usd", "next-csid"}
    assert t["End.T"].flavors == {"psp", "usp", "usd"}
    assert t["End"].kernel_flavors == {"psp", "next-csid"}
    assert not any(d.flavors for n, d in t.items() if n not in ("End", "End.X", "End.T"))
    assert C.SEG6LOCAL_UNSUPPORTED["End.BPF"] == 15


SEG6LOCAL_OK = [
    ("action End", C.Seg6Local("End")),
    ("action End count", C.Seg6Local("End", count=True)),
    ("action End flavors psp", C.Seg6Local("End", flavors=frozenset({"psp"}))),
    ("action End flavors usp,usd", C.Seg6Local("End", flavors=frozenset({"usp", "usd"}))),
    ("action End flavors next-csid", C.Seg6Local("End", flavors=frozenset({"next-csid"}),
                                                 lblen=32, nflen=16)),
    ("action End flavors psp,next-csid lblen 48 nflen 16 count",
     C.Seg6Local("End", flavors=frozenset({"psp", "next-csid"}), lblen=48, nflen=16, count=True)),
    ("action End flavors next-csid nflen 8", C.Seg6Local("End", flavors=frozenset({"next-csid"}),
                                                         lblen=32, nflen=8)),
    ("action End.X nh6 fc00::2", C.Seg6Local("End.X", nh6=A("fc00::2"))),
    ("count action End.X oif y nh6 fc00::2 flavors next-csid,psp",
     C.Seg6Local("End.X", nh6=A("fc00::2"), oif="y", count=True,
                 flavors=frozenset({"next-csid", "psp"}), lblen=32, nflen=16)),
    ("action End.T table 100", C.Seg6Local("End.T", table=100)),
    ("action End.T table main flavors psp", C.Seg6Local("End.T", table=254, flavors=frozenset({"psp"}))),
    ("action End.DX2 oif y", C.Seg6Local("End.DX2", oif="y")),
    ("action End.DX6 nh6 ::", C.Seg6Local("End.DX6", nh6=A("::"))),
    ("action End.DX6 nh6 fc00::9 count", C.Seg6Local("End.DX6", nh6=A("fc00::9"), count=True)),
    ("action End.DX4 nh4 10.0.0.2", C.Seg6Local("End.DX4", nh4=A("10.0.0.2"))),
    ("action End.DX4 nh4 0.0.0.0", C.Seg6Local("End.DX4", nh4=A("0.0.0.0"))),
    ("action End.DT6 table 100", C.Seg6Local("End.DT6", table=100)),
    ("action End.DT6 vrftable 100 count", C.Seg6Local("End.DT6", vrftable=100, count=True)),
    ("action End.DT4 vrftable 100", C.Seg6Local("End.DT4", vrftable=100)),
    ("action End.DT46 vrftable 100", C.Seg6Local("End.DT46", vrftable=100)),
    ("action End.B6 srh segs fc00::1,fc00::2", C.Seg6Local("End.B6", srh_segs=(A("fc00::1"), A("fc00::2")))),
    ("action End.B6.Encaps srh segs fc00::1 hmac 9 count",
     C.Seg6Local("End.B6.Encaps", srh_segs=(A("fc00::1"),), srh_hmac=9, count=True)),
    ("action End.B6.Encaps srh segs fc00::1 hmac 0", C.Seg6Local("End.B6.Encaps", srh_segs=(A("fc00::1"),))),
]


@pytest.mark.parametrize("attrs, want", SEG6LOCAL_OK)
def test_seg6local_actions_accepted(attrs, want):
    s = State().apply(f"ip -6 route add fc00::1/128 encap seg6local {attrs} dev x")
    r = s.routes[(6, 254, N("fc00::1/128"), 1024)]
    assert r.encap == want and r.dev == "x"
    assert State().apply(s.dump()) == s


SEG6LOCAL_BAD = [
    ("action End.X", "End.X requires nh6", "End.X"),
    ("action End.T", "End.T requires table", "End.T"),
    ("action End.DX2", "End.DX2 requires oif", "End.DX2"),
    ("action End.DX6", "End.DX6 requires nh6", "End.DX6"),
    ("action End.DX4", "End.DX4 requires nh4", "End.DX4"),
    ("action End.DT4", "End.DT4 requires vrftable", "End.DT4"),
    ("action End.DT46 table 5", "'table' is not allowed for End.DT46", "table"),
    ("action End.B6", "End.B6 requires srh", "End.B6"),
    ("action End.B6.Encaps", "End.B6.Encaps requires srh", "End.B6.Encaps"),
    ("action End.DT6", "table or vrftable must be specified", "End.DT6"),
    ("action End.DT6 table 1 vrftable 2", "table or vrftable must be specified", "End.DT6"),
    ("action End nh6 fc00::1", "'nh6' is not allowed for End", "nh6"),
    ("action End.X nh6 fc00::1 nh4 1.2.3.4", "'nh4' is not allowed for End.X", "nh4"),
    ("action End.DX4 nh4 1.2.3.4 oif y", "'oif' is not allowed for End.DX4", "oif"),
    ("action End iif y", "'iif' is not allowed for End", "iif"),
    ("action End.DX6 nh6 :: flavors psp", "'flavors' is not allowed for End.DX6", "flavors"),
    ("action End.T table 5 flavors next-csid", "Unsupported Flavor operation(s)", "next-csid"),
    ("action End flavors psp,psp", "invalid \"flavors\" attribute", "psp,psp"),
    ("action End flavors foo", "invalid \"flavors\" attribute", "foo"),
    ("action End flavors psp lblen 32", "only valid after 'flavors next-csid'", "lblen"),
    ("action End count count", "duplicate 'count'", "count"),
    ("action End.Y", "unknown seg6local action 'End.Y'", "End.Y"),
    ("action end", "unknown seg6local action 'end'", "end"),
    ("action End.BPF endpoint obj x.o", "not supported: 'End.BPF'", "End.BPF"),
    ("action End.AM", "not supported: 'End.AM'", "End.AM"),
    ("nh6 fc00::1", "missing 'action'", "seg6local"),
    ("action End.X nh6 10.0.0.1", "inet6 address is expected rather than '10.0.0.1'", "10.0.0.1"),
    ("action End.DX4 nh4 fc00::1", "inet address is expected rather than 'fc00::1'", "fc00::1"),
    ("action End.B6 srh fc00::1", "missing 'segs' attribute for srh", "fc00::1"),
    ("action End.B6 srh segs fc00::1,,fc00::2", "invalid segment list", "fc00::1,,fc00::2"),
    ("action End.B6 srh segs fc00::1,10.0.0.1", "invalid segment '10.0.0.1'", "fc00::1,10.0.0.1"),
]


@pytest.mark.parametrize("attrs, msg, token", SEG6LOCAL_BAD)
def test_seg6local_rejections(attrs, msg, token):
    e = err(f"ip link set x up\nip -6 route add fc00::1/128 encap seg6local {attrs} dev x")
    assert e.line == 2 and msg in e.message and e.token == token and token in e.message


def test_seg6local_route_constraints():
    assert "IPv6 only" in err("ip route add 10.0.0.0/8 encap seg6local action End dev x").message
    assert "need 'dev'" in err("ip -6 route add fc00::/64 encap seg6local action End via fc00::9").message
    assert "not allowed on blackhole" in err(
        "ip -6 route add blackhole fc00::/64 encap seg6local action End").message


# kernel selftest srv6_end_next_csid_l3vpn_test.sh CSID_CONTAINER_CFGS ("d" = default)
NEXT_CSID_CFGS = ["d,d,y", "d,16,y", "16,d,y", "16,32,y", "32,16,y", "48,8,y", "8,48,y",
                  "d,0,n", "0,d,n", "32,0,n", "0,32,n", "17,d,n", "d,17,n", "120,16,n",
                  "16,120,n", "0,128,n", "128,0,n", "130,0,n", "0,130,n", "0,0,n"]


@pytest.mark.parametrize("cfg", NEXT_CSID_CFGS)
def test_next_csid_lblen_nflen_kernel_selftest_table(cfg):
    lb, nf, ok = cfg.split(",")
    attrs = "action End flavors next-csid"
    if lb != "d":
        attrs += f" lblen {lb}"
    if nf != "d":
        attrs += f" nflen {nf}"
    line = f"ip -6 route add fc00::/64 encap seg6local {attrs} dev x"
    if ok == "y":
        r = State().apply(line).routes[(6, 254, N("fc00::/64"), 1024)]
        assert (r.encap.lblen, r.encap.nflen) == (32 if lb == "d" else int(lb), 16 if nf == "d" else int(nf))
    else:
        assert "Invalid Locator Block/Node Function lengths" in err(line).message


# ---------------------------------------------------------------------------
# seg6 headend
def _segs(n):
    return ",".join(f"fc00::{i + 1:x}" for i in range(n))


@pytest.mark.parametrize("mode, hmac, n, ok", [
    ("encap", False, 127, True), ("encap", False, 128, False),
    ("encap", True, 125, True), ("encap", True, 126, False),
    ("inline", False, 126, True), ("inline", False, 127, False),   # inline adds the old DA
    ("encap.red", False, 1, True), ("l2encap", False, 127, True),
])
def test_seg6_segment_count_limit_is_the_srh_hdrlen_check(mode, hmac, n, ok):
    line = f"ip -6 route add fc00::/64 encap seg6 mode {mode} segs {_segs(n)}" + \
           (" hmac 1" if hmac else "") + " dev x"
    if ok:
        r = State().apply(line).routes[(6, 254, N("fc00::/64"), 1024)]
        assert r.encap == C.Seg6Encap(mode, tuple(A(x) for x in _segs(n).split(",")), 1 if hmac else None)
    else:
        assert "too many segments" in err(line).message


def test_seg6_encap_fields_and_rejections():
    s = State().apply("ip route add 10.0.0.0/8 encap seg6 mode encap tunsrc fc00::9 segs fc00::1,fc00::2 "
                      "hmac 4 dev x")
    r = s.routes[(4, 254, N("10.0.0.0/8"), 0)]
    assert r.encap == C.Seg6Encap("encap", (A("fc00::1"), A("fc00::2")), 4)
    assert r.tunsrc == A("fc00::9")
    assert "only valid for IPv6" in err("ip route add 10.0.0.0/8 encap seg6 mode inline segs fc00::1 dev x").message
    assert "requires 'segs'" in err("ip -6 route add fc00::/64 encap seg6 mode encap dev x").message
    assert "requires 'mode'" in err("ip -6 route add fc00::/64 encap seg6 segs fc00::1 dev x").message
    e = err("ip -6 route add fc00::/64 encap seg6 mode red segs fc00::1 dev x")
    assert e.token == "red" and "invalid seg6 mode 'red'" in e.message


# ---------------------------------------------------------------------------
# sysctl, neighbours, sr
def test_sysctl_forms_propagation_and_helpers():
    s = State().apply("ip link set x up\nsysctl -w net.ipv6.conf.all.seg6_enabled=1")
    assert not s.seg6_enabled("x")
    s = s.apply("sysctl -w net.ipv6.conf.x.seg6_enabled=1")
    assert s.seg6_enabled("x") and not s.seg6_enabled("lo")
    assert not s.apply("sysctl -w net.ipv6.conf.all.seg6_enabled=0").seg6_enabled("x")
    # all.forwarding propagates to default and every device; new devices copy default
    s = s.apply("sysctl -w net.ipv4.conf.all.forwarding=0\nip link set y up")
    assert not s.forwarding(4, "x") and not s.forwarding(4, "y") and not s.forwarding(4)
    assert s.forwarding(6, "x")
    s = s.apply("sysctl -w net.ipv4.conf.x.forwarding=1")
    assert s.forwarding(4, "x") and not s.forwarding(4, "y")
    assert s.sysctl("net.ipv4.ip_forward") == 0
    s = s.apply("sysctl -w net.ipv4.ip_forward=1")
    assert s.forwarding(4, "y") and s.sysctl("net/ipv4/conf/y/forwarding") == 1
    # ipv6 mtu follows the link mtu and is bounded by it
    s = s.apply("ip link set x mtu 9000")
    assert s.sysctl("net.ipv6.conf.x.mtu") == 9000
    assert "out of range" in err("sysctl -w net.ipv6.conf.x.mtu=9001", s).message
    assert "cannot stat /proc/sys/net/ipv6/conf/nope/seg6_enabled" in \
        err("sysctl -w net.ipv6.conf.nope.seg6_enabled=1").message


def test_neighbours_and_sr():
    s = State().apply("ip -6 neigh add fc00::2 lladdr 02:00:00:00:00:aa dev x\n"
                      "ip sr tunsrc set fc00::1\nip sr hmac set 10 sha256 'my secret'")
    assert s.neighbours == {("x", A("fc00::2")): bytes.fromhex("0200000000aa")}
    assert s.sr_tunsrc == A("fc00::1")
    assert s.hmac_keys == {10: ("sha256", b"my secret")}
    assert "File exists" in err("ip -6 neigh add fc00::2 lladdr 02:00:00:00:00:bb dev x", s).message
    assert s.apply("ip -6 neigh replace fc00::2 lladdr 02:00:00:00:00:bb dev x").neighbours[
        ("x", A("fc00::2"))] == bytes.fromhex("0200000000bb")
    assert s.apply("ip -6 neigh del fc00::2 dev x").neighbours == {}
    assert s.apply("ip sr hmac set 10 sha1 ''").hmac_keys == {}
    assert s.apply("ip sr tunsrc set ::").sr_tunsrc is None
    assert "longer than 64" in err("ip sr hmac set 1 sha1 " + "x" * 65).message


# ---------------------------------------------------------------------------
# bad configurations: line, token, all or nothing
GOOD_PREFIX = ("ip link set tun0 up\nip -6 addr add 2001:db8::1/64 dev tun0\n"
               "ip -6 route add fc00::/64 dev tun0\n")

MORE_GOOD = ("ip link set tun1 up\nip -6 route add fc00:2::/64 dev tun1\n"
             "sysctl -w net.ipv6.conf.tun1.seg6_enabled=1\n")

BAD = [
    ("ip -6 route add fc00::1/129 dev tun0", "invalid prefix 'fc00::1/129'", "fc00::1/129"),
    ("ip -6 route add fc00::/64 encap seg6local action End.Y dev tun0",
     "unknown seg6local action 'End.Y'", "End.Y"),
    ("ip route add 10.0.0.0/8 dev tun0 metric x", "expected a number after 'metric', got 'x'", "x"),
    ("ip -6 route add fc00::/64 dev tun0", "RTNETLINK answers: File exists", "fc00::/64"),
    ("ip -6 route del fc00:9::/64", "RTNETLINK answers: No such process", "fc00:9::/64"),
    ("ip route add 10.0.0.1/8 dev tun0", "host bits set", "10.0.0.1/8"),
    ("ip -6 route add 10.0.0.0/8 dev tun0", "inet6 prefix is expected rather than '10.0.0.0/8'",
     "10.0.0.0/8"),
    ("ip -4 route add fc00::/64 dev tun0", "inet prefix is expected rather than 'fc00::/64'", "fc00::/64"),
    ("ip route add 10.0.0.0/8 via fc00::1 dev tun0", "inet address is expected rather than 'fc00::1'",
     "fc00::1"),
    ("ip route add 10.0.0.0/8", "RTNETLINK answers: No such device", "10.0.0.0/8"),
    ("ip route add 10.0.0.0/8 encap mpls 100 dev tun0", "not supported: 'encap mpls'", "encap mpls"),
    ("ip link set tun0 netns blue", "not supported: 'netns'", "netns"),
    ("ip -6 route add fc00:1::/64 dev tun0 expires 100", "not supported: 'expires'", "expires"),
    ("ip route add 10.0.0.0/8 dev tun0 onlink", "not supported: 'onlink'", "onlink"),
    ("ip link add v0 type vrf", "VRF table id is missing", "vrf"),
    ("ip link set tun0 master tun1", "Operation not supported", "tun1"),
    ("ip xfrm state flush", "not supported: 'ip xfrm'", "ip xfrm"),
    ("ip frobnicate", "unknown ip object 'frobnicate'", "frobnicate"),
    ("tc qdisc add dev tun0 root fq", "unknown command 'tc'", "tc"),
    ("ip route frob 10.0.0.0/8", "unknown 'ip route' command 'frob'", "frob"),
    ("ip route add 10.0.0.0/8 dev tun0 table mytable", "invalid table id 'mytable'", "mytable"),
    ("ip route add 10.0.0.0/8 dev tun0 garbage", "unexpected 'garbage'", "garbage"),
    ("ip route add blackhole 10.0.0.0/8 dev tun0", "can not be specified for this route type",
     "blackhole"),
    ("ip -6 route add fc00:1::/64 via fe80::1", "Egress device not specified", "fe80::1"),
    ("ip -6 route add fc00:1::/64 via 2001:db8::1 dev tun0", "Gateway can not be a local address",
     "2001:db8::1"),
    ("ip -6 addr add 2001:db8::1/64 dev tun0", "RTNETLINK answers: File exists", "2001:db8::1/64"),
    ("ip -6 addr del 2001:db8::9/64 dev tun0", "Cannot assign requested address", "2001:db8::9/64"),
    ("ip -6 addr add ff02::1/64 dev tun0", "Cannot assign requested address", "ff02::1/64"),
    ("ip addr add 10.0.0.1/24", "\"dev\" argument is required", "10.0.0.1/24"),
    ("ip link set tun0 mtu 10", "'mtu' value 10 out of range", "10"),
    ("ip link set tun0 address 01:00:5e:00:00:01", "Cannot assign requested address", "01:00:5e:00:00:01"),
    ("ip link set tun0 address zz:00:00:00:00:01", "invalid link-layer address", "zz:00:00:00:00:01"),
    ("ip link set this-name-is-too-long up", "invalid interface name", "this-name-is-too-long"),
    ("ip link add tun0 type dummy", "RTNETLINK answers: File exists", "tun0"),
    ("ip tuntap add dev tun0 mode tun", "Device or resource busy", "tun0"),
    ("sysctl -w net.ipv6.conf.eth7.forwarding=1",
     "cannot stat /proc/sys/net/ipv6/conf/eth7/forwarding", "net.ipv6.conf.eth7.forwarding"),
    ("sysctl -w net.ipv6.conf.all.hop_limit=256", "out of range", "256"),
    ("sysctl -w net.ipv6.conf.all.forwarding=yes", "invalid value 'yes'", "yes"),
    ("sysctl -w net.core.rmem_max=1", "unknown sysctl 'net.core.rmem_max'", "net.core.rmem_max"),
    ("sysctl -p /etc/sysctl.conf", "not supported: '-p'", "-p"),
    ("ip -4 rule add from fc00::/16 table 5", "inet prefix is expected rather than 'fc00::/16'", "fc00::/16"),
    ("ip rule add fwmark 1 table 5", "not supported: 'fwmark'", "fwmark"),
    ("ip rule add from 10.0.0.0/8 goto 5", "not supported: 'goto'", "goto"),
    ("ip -6 rule del pref 4", "No such file or directory", "pref 4"),
    ("ip sr hmac set 0 sha1 x", "out of range", "0"),
    ("ip sr hmac set 1 md5 x", "Invalid HMAC algorithm 'md5'", "md5"),
    ("ip -6 neigh add fc00::2 dev tun0", "'lladdr' is required", "add"),
    ("ip route add 10.0.0.0/8 dev tun0 'oops", "unterminated quote", "'oops"),
    ("ip -6 route add fc00:1::/64 dev tun0 mtu lock 1400", "not supported: 'mtu lock'", "mtu lock"),
    ("ip -6 route add fc00:1::/64 nexthop dev a nexthop dev b",
     "Device only routes can not be added for IPv6 using the multipath API", "nexthop"),
    ("ip route add 10.0.0.0/8 via 10.0.0.1 dev tun0 scope link", "Nexthop has invalid scope", "link"),
    ("ip route add 10.0.0.0/8 dev tun0 src 10.9.9.9", "Invalid prefsrc address", "10.9.9.9"),
    ("sudo", "missing command after 'sudo'", "sudo"),
]


@pytest.mark.parametrize("line, msg, token", BAD, ids=[b[0][:50] for b in BAD])
def test_bad_config_line_token_and_all_or_nothing(line, msg, token):
    base = State().apply(GOOD_PREFIX)
    snapshot = base.copy()
    dump = base.dump()
    text = MORE_GOOD + "# comment line\n\n" + line + "\nip link set never up\n"
    with pytest.raises(ConfigError) as ei:
        base.apply(text)
    e = ei.value
    assert e.line == 6, str(e)
    assert msg in e.message, str(e)
    assert e.token == token and token in e.message, (e.token, str(e))
    assert str(e) == f"line 6: {e.message}"
    # the original state never changes
    assert base == snapshot and base.dump() == dump and "never" not in base.interfaces


def test_error_on_last_line_after_many_good_ones_changes_nothing():
    s = State().apply("ip link set tun0 up")
    snapshot = s.copy()
    good = [f"ip -6 route add fc00:{i:x}::/64 dev tun0" for i in range(300)]
    text = "\n".join(good + ["ip -6 route add fc00:0::/64 dev tun0"])
    e = err(text, s)
    assert e.line == 301 and "File exists" in e.message
    assert s == snapshot and len(s.routes) == len(snapshot.routes)
    assert not any(k[2] == N("fc00:1::/64") for k in s.routes)


def test_continuation_line_numbers():
    e = err("ip link set x up\nip -6 route add \\\n  fc00::/64 \\\n  dev x metric y\n")
    assert e.line == 2 and e.token == "y"


def test_config_error_api():
    e = ConfigError("invalid prefix 'x'", 3, "x")
    assert str(e) == "line 3: invalid prefix 'x'" and isinstance(e, ValueError)
    assert (e.line, e.token, e.message) == (3, "x", "invalid prefix 'x'")
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.line, e2.token, e2.message) == (3, "x", "invalid prefix 'x'")
    assert str(ConfigError("m")) == "m"


# ---------------------------------------------------------------------------
# dump round trip
def test_dump_round_trip_rich_config():
    text = (DATA / "config_rich.conf").read_text()
    s = State().apply(text)
    d = s.dump()
    assert State().apply(d) == s
    assert State().apply(d).dump() == d
    # automatic routes are not written, addresses are
    assert "proto kernel" not in d and "ip -6 addr add 2001:db8:1::1/64 dev tun0" in d
    assert "ip -6 route del anycast 2001:db8:1::/128 table local" in d


def test_dump_round_trip_edge_cases():
    cases = [
        "ip -6 rule del pref 32766\nip -6 rule add pref 32766 from fc00::/16 table 5\n"
        "ip -6 rule add pref 32766 table main",
        "ip addr del 127.0.0.1/8 dev lo\nip addr add 127.0.0.2/8 dev lo",
        "ip link set lo mtu 1500\nip link set x down mtu 1280",
        "sysctl -w net.ipv6.conf.default.forwarding=0\nip link set a up\n"
        "sysctl -w net.ipv6.conf.default.forwarding=1\nip -6 addr add fc00::1/64 dev a\nip link set b up",
        "sysctl -w net.ipv4.conf.all.forwarding=0\nsysctl -w net.ipv4.conf.default.forwarding=1\nip link set a up",
        "ip -6 route replace 2001:db8::/64 dev x proto static\nip -6 addr add 2001:db8::1/64 dev x",
        "ip route add 10.0.0.0/8 nexthop dev x",
        "ip link add link eth1 name eth1.5 type vlan id 5\nip link set eth1.5 address 02:aa:00:00:00:01",
        "sysctl -w net.ipv6.conf.eth1.5.hop_limit=9",
    ]
    s = State().apply("ip link set eth1 up\nip link add link eth1 name eth1.5 type vlan id 5")
    assert State().apply(s.apply(cases[-1]).dump()) == s.apply(cases[-1])
    for text in cases[:-1]:
        s = State().apply(text)
        assert State().apply(s.dump()) == s, text


# ---------------------------------------------------------------------------
# random token soup never raises anything but ConfigError
hyp = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")

WORDS = ["ip", "-6", "-4", "sysctl", "-w", "link", "set", "add", "del", "route", "rule", "addr",
         "neigh", "sr", "tuntap", "a", "r", "ru", "n", "l", "dev", "via", "table", "metric", "encap",
         "seg6local", "seg6", "action", "End", "End.X", "End.DT6", "End.B6", "nh6", "nh4", "oif",
         "srh", "segs", "hmac", "flavors", "psp,next-csid", "next-csid", "lblen", "nflen", "count",
         "mode", "encap.red", "inline", "nexthop", "weight", "blackhole", "local", "default",
         "from", "to", "pref", "lookup", "iif", "lladdr", "nud", "permanent", "tunsrc", "up",
         "down", "mtu", "address", "type", "veth", "peer", "name", "vlan", "id", "dummy", "replace",
         "append", "change", "mode", "tun", "fc00::1", "fc00::/64", "10.0.0.1", "10.0.0.0/8",
         "2001:db8::1/64", "::", "0", "1", "32", "65536", "-1", "x", "tun0", "02:00:00:00:00:01",
         "net.ipv6.conf.all.forwarding=1", "net.ipv6.conf.x.seg6_enabled=1", "=", "'", '"', "\\",
         "#", "main", "local", "scope", "link", "src", "proto", "kernel", "sha1", "set", "show"]


@hyp.settings(max_examples=400, deadline=None, derandomize=True)
@hyp.given(st.lists(st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=6)),
                             max_size=12), max_size=6))
def test_token_soup_only_raises_config_error(lines):
    text = "\n".join(" ".join(ws) for ws in lines)
    s = State()
    try:
        out = s.apply(text)
    except ConfigError as e:
        assert e.line is not None and str(e).startswith(f"line {e.line}: ")
        assert s == State()
        return
    assert State().apply(out.dump()) == out


@hyp.settings(max_examples=200, deadline=None, derandomize=True)
@hyp.given(st.lists(st.sampled_from([
    "ip -6 route add fc00::/64 dev a", "ip -6 route add fc00::/64 via fc00:1::2 dev b metric 5",
    "ip -6 route append fc00::/64 via fc00:1::3 dev b metric 5", "ip -6 route del fc00::/64",
    "ip -6 addr add fc00:1::1/64 dev a", "ip -6 addr del fc00:1::1/64 dev a",
    "ip addr add 10.0.0.1/24 dev a", "ip addr add 10.0.0.2/24 dev a", "ip addr del 10.0.0.1/24 dev a",
    "ip link set a down", "ip link set a up", "ip link set b mtu 9000",
    "sysctl -w net.ipv6.conf.all.forwarding=0", "sysctl -w net.ipv6.conf.all.forwarding=1",
    "ip -6 rule add from fc00::/16 table 5", "ip -6 rule del pref 32766", "ip rule add iif a table 7",
    "ip route add 10.1.0.0/16 via 10.0.0.9 dev a", "ip -6 route del anycast fc00:1:: dev a",
    "ip route add default via 10.0.0.9 dev a", "ip sr tunsrc set fc00::1",
    "ip -6 route replace fc00:1::/64 dev b", "ip link add v type veth peer name w",
]), max_size=15))
def test_random_valid_sequences_round_trip(cmds):
    s = State()
    for c in cmds:
        try:
            s = s.apply(c)
        except ConfigError:
            pass
    assert State().apply(s.dump()) == s


# ---------------------------------------------------------------------------
# the automatic routes and rules against the running kernel (skipped where no
# network namespace can be made): the same text goes to `ip` in a fresh netns
KERNEL_CONFIGS = [
    # Linux defaults forwarding to 0 and lo to down; say both
    "sysctl -w net.ipv6.conf.all.forwarding=1\nsysctl -w net.ipv4.conf.all.forwarding=1\n"
    "ip link set lo up\nip tuntap add dev tun0 mode tun\nip tuntap add dev tun1 mode tun\n"
    "ip link set tun0 up\nip link set tun1 up\n"
    "ip -6 addr add 2001:db8:1::1/64 dev tun0\nip -6 addr add 2001:db8:9::9/128 dev tun0\n"
    "ip -6 addr add 2001:db8:8::1/127 dev tun1\nip -6 addr add fc00::1/128 dev lo\n"
    "ip addr add 10.0.0.1/24 dev tun0\nip addr add 10.0.0.2/24 dev tun0\n"
    "ip addr add 10.5.0.1/32 dev tun1\nip addr add 10.6.0.1/31 dev tun1\nip addr add 10.7.0.1/8 dev tun1\n"
    "ip -6 route add fc01::/64 via 2001:db8:1::2 dev tun0\nip route add 10.9.0.0/16 via 10.0.0.9 dev tun0\n"
    "ip route add default via 10.0.0.9 dev tun0 metric 5 proto static\n"
    "ip -6 route add fc02::/64 nexthop via 2001:db8:1::2 dev tun0 nexthop via 2001:db8:1::3 dev tun0\n"
    "ip route add blackhole 10.99.0.0/16\nip -6 route add unreachable fc03::/64 table 100\n"
    "ip route add local 10.77.0.1 dev lo\nip -6 route add fc04::/64 dev tun1 metric 0\n"
    "ip rule add from 10.0.0.0/8 table 100\nip rule add iif tun0 table 200\n"
    "ip -6 rule add pref 5 to fc00::/16 table 100\n",
    # deletions, secondaries and forwarding per device
    "sysctl -w net.ipv6.conf.all.forwarding=1\nsysctl -w net.ipv4.conf.all.forwarding=1\n"
    "ip link set lo up\nip tuntap add dev tun0 mode tun\nip link set tun0 up\n"
    "ip addr add 10.0.0.1/24 dev tun0\nip addr add 10.0.0.2/24 dev tun0\nip addr add 10.1.0.1/16 dev tun0\n"
    "ip addr del 10.0.0.1/24 dev tun0\n"
    "ip -6 addr add 2001:db8:1::1/64 dev tun0\nip -6 addr add 2001:db8:2::1/64 dev tun0\n"
    "ip -6 addr del 2001:db8:1::1/64 dev tun0\nsysctl -w net.ipv6.conf.tun0.forwarding=0\n"
    "ip -6 route del 2001:db8:2::/64 dev tun0\nip -6 rule del pref 32766\n"
    "ip -6 addr del ::1/128 dev lo\nip -6 addr add ::1/128 dev lo\n",
]


def _kernel_run(text: str):
    import json
    import os
    import shutil
    import subprocess
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip") \
            or not os.path.exists("/dev/net/tun"):
        pytest.skip("needs root, unshare, ip and /dev/net/tun")
    script = ("set -e\nsysctl -qw net.ipv6.conf.default.accept_dad=0\n"
              + "".join(("sysctl -q" + l[len("sysctl"):]) if l.startswith("sysctl") else l + "\n"
                        for l in text.splitlines(keepends=True))
              + "\nip -j -4 route show table all; echo; ip -j -6 route show table all; echo;"
                " ip -j -4 rule; echo; ip -j -6 rule\n")
    try:
        p = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True,
                           timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"cannot run a network namespace: {e}")
    if p.returncode != 0:
        pytest.skip(f"cannot run the config in a network namespace: {p.stderr.strip()[:200]}")
    parts = [json.loads(x) for x in p.stdout.split("\n") if x.strip()]
    return parts


def _kernel_routes(rows, fam):
    out = set()
    for r in rows:
        table = r.get("table", "main")
        table = C.TABLE_NAMES.get(table, None) if not table.isdigit() else int(table)
        dst = r["dst"]
        dst = ("0.0.0.0/0" if fam == 4 else "::/0") if dst == "default" else dst
        nhs = r.get("nexthops") or [r]
        nhs = tuple(sorted((x.get("gateway"), x.get("dev"), x.get("weight", 1)) for x in nhs))
        if r.get("type", "unicast") in C.REJECT_TYPES:
            nhs = ()
        out.add((fam, table, str(N(dst)), r.get("type", "unicast"), r.get("metric", 0), nhs,
                 r.get("protocol", "boot"), r.get("scope", "global") if fam == 4 else None,
                 r.get("prefsrc")))
    return out


def _model_routes(s, fam):
    return {(r.family, r.table, str(r.prefix), r.type, r.metric,
             tuple(sorted((str(n.gw) if n.gw else None, n.dev, n.weight) for n in r.nexthops)),
             r.proto, r.scope, str(r.src) if r.src else None)
            for r in s.routes.values() if r.family == fam}


@pytest.mark.kernel_netns
@pytest.mark.parametrize("k", range(len(KERNEL_CONFIGS)))
def test_routes_and_rules_match_the_kernel(k):
    text = KERNEL_CONFIGS[k]
    s = State().apply(text)
    r4, r6, ru4, ru6 = _kernel_run(text)
    assert _model_routes(s, 4) == _kernel_routes(r4, 4)
    # the kernel keeps one "multicast ff00::/8" per interface; a routes key
    # (family, table, prefix, metric) holds one: the first interface's
    mc = lambda rows: {x for x in rows if x[2] == "ff00::/8"}            # noqa: E731
    k6, m6 = _kernel_routes(r6, 6), _model_routes(s, 6)
    assert len(mc(m6)) == 1 and mc(m6) <= mc(k6)
    assert m6 - mc(m6) == k6 - mc(k6)
    for fam, rows in ((4, ru4), (6, ru6)):
        want = [(r.get("priority", 0), r.get("table")) for r in rows]
        got = [(r.pref, C._TABLE_IDS.get(r.table, str(r.table))) for r in s.rules[fam]]
        assert got == want


# ---------------------------------------------------------------------------
# the C fast paths of address parsing against the Python parsers they skip

_V6_ALPHABET = "0123456789abcdefABCDEF:.:::%"


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=_V6_ALPHABET, min_size=1, max_size=45)
       | st.builds(lambda a, b: f"{a}::{b}", st.integers(0, 0xFFFF).map(lambda x: f"{x:x}"),
                   st.ip_addresses(v=4).map(str))
       | st.ip_addresses(v=6).map(lambda a: a.exploded if a.packed[0] & 1 else str(a)))
def test_fast_ipv6_parse_agrees_with_ipaddress(tok):
    from fastpath.config import _v6
    try:
        want = ipaddress.IPv6Address(tok)
    except ValueError:
        want = None
    _v6.cache_clear()
    try:
        got = _v6(tok)
    except ValueError:
        got = None
    assert got == want and (got is None or got.scope_id == want.scope_id)


@settings(max_examples=300, deadline=None)
@given(st.ip_addresses(), st.integers(0, 128), st.ip_addresses())
def test_parsed_prefixes_are_ipaddress_networks(addr, plen, other):
    """_parse_prefix's networks (hashed once) equal, hash, order, print and
    pickle as the ipaddress networks of the same prefix, so either finds
    the other in a dict."""
    from fastpath.config import _parse_prefix
    plen = min(plen, addr.max_prefixlen)
    _a, _n, net = _parse_prefix(f"{addr}/{plen}", None)
    ref = ipaddress.ip_network(f"{addr}/{plen}", strict=False)
    assert type(net) is not type(ref) and isinstance(net, type(ref))
    assert net == ref and ref == net and not net != ref and hash(net) == hash(ref)
    assert {ref: 1}[net] == 1 and {net: 2}[ref] == 2
    assert str(net) == str(ref) and repr(net) == repr(ref)
    assert pickle.loads(pickle.dumps(net)) == ref
    # (made of its fields, not by ipaddress's __init__: every derived value
    # as the reference's, and ipaddress's own constructor gives the same;
    # the compiled prefixes (fastpath._prefix) and the Python ones that
    # hash once, the reference they are held to, alike)
    import itertools
    from fastpath.config import lexer
    v4 = ref.version == 4
    kinds = [(lexer._HashedNet4 if v4 else lexer._HashedNet6, lexer._py_net_of)]
    if lexer._prefix is not None:
        kinds.append((lexer._Net4 if v4 else lexer._Net6, lexer._prefix.make))
        assert type(net) is kinds[1][0] and lexer._net_of is lexer._prefix.make
    else:
        assert type(net) is kinds[0][0]
    assert lexer._py_net_of is lexer._net_by_fields      # (this Python's ipaddress: the fast path)
    for cls, make in kinds:
        for n in (make(cls, int(ref.network_address), plen), cls((int(ref.network_address), plen)),
                  cls(f"{addr}/{plen}", strict=False)):
            assert type(n) is cls
            assert (n.network_address, n.netmask, n.prefixlen, n.hostmask, n.broadcast_address,
                    n.num_addresses, n.with_prefixlen, n.with_netmask, n.exploded, n.compressed,
                    n.is_private, n.is_global, n.is_multicast, n.is_loopback) == (
                ref.network_address, ref.netmask, ref.prefixlen, ref.hostmask, ref.broadcast_address,
                ref.num_addresses, ref.with_prefixlen, ref.with_netmask, ref.exploded, ref.compressed,
                ref.is_private, ref.is_global, ref.is_multicast, ref.is_loopback)
            assert list(itertools.islice(n.hosts(), 5)) == list(itertools.islice(ref.hosts(), 5))
            assert addr in n and n.subnet_of(ref) and ref.supernet() == n.supernet() if plen else True
            assert repr(n.network_address) == repr(ref.network_address)
            assert hash(n.network_address) == hash(ref.network_address)
            assert hash(n) == hash(ref) and n == ref and ref == n and n == net and net == n
            assert str(n) == str(ref) and repr(n) == repr(ref) and not n != ref
            assert pickle.loads(pickle.dumps(n)) == ref and type(pickle.loads(pickle.dumps(n))) is cls
    o = ipaddress.ip_network(f"{other}/{other.max_prefixlen}")
    _b, _m, onet = _parse_prefix(f"{other}/{other.max_prefixlen}", None)
    assert (net == onet) == (ref == o) and (net != onet) == (ref != o)
    if o.version == ref.version:
        assert (net < onet) == (ref < o)


def _slow_v4(tok):
    parts = tok.split(".")
    if not 1 <= len(parts) <= 4 or not all(re.fullmatch(r"[0-9]{1,3}", p) and int(p) <= 255
                                           for p in parts):
        return None
    return ipaddress.IPv4Address(bytes([int(p) for p in parts] + [0] * (4 - len(parts))))


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123456789.", min_size=1, max_size=16) | st.ip_addresses(v=4).map(str))
def test_fast_ipv4_parse_agrees_with_iproute2s_rules(tok):
    from fastpath.config import _parse_v4
    assert _parse_v4(tok) == _slow_v4(tok)


@settings(max_examples=500, deadline=None)
@given(st.ip_addresses(v=6), st.integers(0, 128))
def test_prefix_parse_masks_as_ip_network(a, plen):
    from fastpath.config import _parse_prefix
    tok = f"{a}/{plen}"
    got = _parse_prefix(tok, 6)[2]
    assert got == ipaddress.ip_network(tok, strict=False) and str(got) == str(
        ipaddress.ip_network(tok, strict=False))


# ---------------------------------------------------------------------------
# the package: fastpath/config.py cut into files per iproute2 object (issue
# 20), every name the module had still importable from fastpath.config
_MODULE_NAMES = """
    IPAddress IPNetwork IPInterface V4 V6 ConfigError _err _unsupported RT_TABLE_UNSPEC
    RT_TABLE_DEFAULT RT_TABLE_MAIN RT_TABLE_LOCAL TABLE_NAMES _TABLE_IDS ROUTE_TYPES
    REJECT_TYPES _LOCAL_TABLE_TYPES RT_PROTOS _PROTO_BY_NAME RT_SCOPES _SCOPE_BY_NAME
    SEG6LOCAL_ATTRS SEG6LOCAL_FLAVORS SEG6_ENCAP_MODES SEG6LOCAL_UNSUPPORTED NEXT_CSID_LBLEN
    NEXT_CSID_NFLEN SEG6_HMAC_SECRET_LEN HMAC_ALGOS ActionDesc _desc _RFC8986
    SEG6LOCAL_ACTIONS _FLAVOR_ORDER default_mac Interface Nexthop Seg6Local Seg6Encap Route
    Rule _RULE_ACTIONS _default_rules _INT_MAX _CONF6 _CONF4 _CONF _NEIGH _GLOBALS _ALIASES
    _sysctl_defaults SYSCTL_DEFAULTS _INT_RE _MAC_RE _V4PART_RE _SPECIAL_CHARS _split_line
    _logical_lines _q _Cur _int _num _parse_v4 _v6 _fam_name _parse_addr _Net4 _Net6
    _parse_prefix _parse_mac _mac_str _check_ifname _table _table_str _matches _segs
    _check_srh_len _RouteSpec _ROUTE_UNSUPPORTED _SEG6LOCAL_KW _SEG6_KW _Where _set_fam
    _parse_gw _parse_seg6local _build_seg6local _parse_seg6 _parse_nexthop _parse_route
    _GONE _v4_user_local RouteTable State _default_scope4 _encap_args _route_common
    _route_add_line _route_del_line _rule_line
""".split()
_STATE_MEMBERS = """
    __init__ _FIELDS __eq__ __hash__ __repr__ copy apply _run small_tables begin _own_small
    run commit rollback proxy_show proxy_entry sysctl seg6_enabled forwarding _create _iface
    l3mdev_table _auto_for _reconcile _is_local_addr _exec _IP_OBJECTS _BATCH_OBJECTS
    _IP_DISPLAY_OPTS _ip _ip_other _LINK_UNSUPPORTED _ip_link _link_settings
    _apply_link_settings _set_master _link_del _vrf_bound _link_set _link_add _ip_tuntap
    _ip_addr _ADDR_UNSUPPORTED _parse_addr_cmd _addr_modify _addr_del _ip_route _route_flush
    _resolve_common _build_route _check_gw _route_del _RULE_UNSUPPORTED _ip_rule _ip_neigh
    _ip_sr _canon_sysctl _unknown_sysctl _sysctl _set_sysctl _vrftable_refused dump
""".split()


def test_package_keeps_every_name_of_the_old_module():
    assert [n for n in _MODULE_NAMES if not hasattr(C, n)] == []
    assert set(C.__all__) <= set(_MODULE_NAMES)
    assert [n for n in _STATE_MEMBERS if n not in dir(State)] == []
    # one object each: the names of the package are those of its modules
    from fastpath.config import lwtunnel, route, state
    assert C.SEG6LOCAL_ACTIONS is lwtunnel.SEG6LOCAL_ACTIONS and C.State is state.State
    assert C._parse_route is route._parse_route


def test_state_and_routes_pickle():
    s = State().apply("ip -6 route add fc00::/64 encap seg6 mode encap segs fc00::1 dev x\n"
                      "ip -6 route add fc00::1/128 encap seg6local action End dev x")
    s2 = pickle.loads(pickle.dumps(s))
    assert s2 == s and s2.dump() == s.dump() and isinstance(s2.routes, C.RouteTable)

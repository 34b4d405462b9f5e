"""The VRF entries of README's "Known differences from Linux", each shown
against the kernel (Linux 6.12 in the VM on hosts without VRF): the same
configuration in a kernel namespace and in fastpath, the same packets.

Where fastpath still differs, the comparison is ``xfail(strict=True)``
(it would XPASS, and fail the run, once fastpath does as the kernel) and a
plain test records what the kernel was seen doing.  Where the kernel was
found to agree with fastpath, the comparison is a plain test.
tests/test_kernel_vrf.py holds the comparisons that agree in general.
"""
from __future__ import annotations

import itertools
import json

import pytest

pytest.importorskip("scapy.all")
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import (ICMPv6EchoReply, ICMPv6EchoRequest, ICMPv6TimeExceeded, IPv6,  # noqa: E402
                                IPv6ExtHdrSegmentRouting)

from fastpath import Router  # noqa: E402
from fastpath.config.errors import ConfigError  # noqa: E402
from fastpath.kernel.compare import kernel_outputs  # noqa: E402
from fastpath.kernel.oracle import KernelConfigError  # noqa: E402
from test_kernel_vrf import _check, _pair  # noqa: E402

pytestmark = [pytest.mark.kernel_vrf, pytest.mark.kernel_seg6]


def known(reason):
    """A comparison that fails today: fastpath differs from the kernel."""
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason="known difference: " + reason)


def tenant(up=True):
    """The default VRF on tun0, one tenant VRF (table 100) on tun1."""
    return f"""
ip -6 addr add fd00::1/64 dev tun0
ip addr add 10.9.0.1/24 dev tun0
ip link add vrf-100 type vrf table 100
{"ip link set vrf-100 up" if up else ""}
ip link set tun1 master vrf-100
ip -6 addr add cafe::254/64 dev tun1
ip addr add 10.0.0.254/24 dev tun1
sysctl -w net.vrf.strict_mode=1
ip -6 route add 2001:db8:5::/48 vrf vrf-100 via fd00::2 dev tun0
ip route add 198.51.100.0/24 vrf vrf-100 via 10.9.0.2 dev tun0
"""


def _kernel(oracle, iif, pkts):
    """What the kernel emitted for each packet: [[(device, bytes)], ...]."""
    return kernel_outputs(oracle, iif, [bytes(p) for p in pkts])


_src4 = itertools.count(10)


def _fresh4(net="10.0.0"):
    """A new IPv4 source per packet that may draw an ICMP error (ip_error's
    per-source limiter, see tests/test_kernel_vrf.py)."""
    return f"{net}.{next(_src4) % 200 + 10}"


def _udp6(src, dst, hlim=64):
    return IPv6(src=src, dst=dst, hlim=hlim) / UDP(sport=4000, dport=5000) / b"known6"


def _udp4(src, dst, ttl=64):
    return IP(src=src, dst=dst, ttl=ttl, id=77) / UDP(sport=4000, dport=5000) / b"known4"


def _from_tenant(hlim):
    """From tun1 (vrf-100): to a host on tun1, to a route leaving by tun0."""
    return [_udp6("cafe::1", d, hlim) for d in ("cafe::2", "2001:db8:5::1")] + \
           [_udp4(_fresh4(), d, hlim) for d in ("10.0.0.2", "198.51.100.1")]


def _ifindex(oracle, dev):
    return json.loads(oracle.ip("-j", "link", "show", "dev", dev))[0]["ifindex"]


# ---------------------------------------------------------------------------
# a VRF device starts up in fastpath, down in Linux

@known("a VRF device starts up in fastpath; Linux creates it down and sends no ICMP error "
       "for its devices' packets until it is set up")
def test_vrf_never_set_up_compared(kernel_oracle):
    pair = _pair(kernel_oracle, tenant(up=False))
    _check(pair, _from_tenant(64) + _from_tenant(1), "tun1")


def test_linux_creates_a_vrf_device_down(kernel_oracle):
    """Seen: `ip link add vrf-100 type vrf table 100` leaves it DOWN; a
    route through it is refused ("Nexthop device is not up"); the packets
    of its enslaved device are forwarded, but a hop limit expiring draws no
    ICMP error (the error's route has the VRF as output device) until
    `ip link set vrf-100 up`."""
    k = kernel_oracle
    k.configure(tenant(up=False))
    link = json.loads(k.ip("-j", "link", "show", "dev", "vrf-100"))[0]
    assert link["operstate"] == "DOWN" and "UP" not in link["flags"], link
    with pytest.raises(KernelConfigError, match="Nexthop device is not up"):
        k.configure("ip -6 route add 2001:db8:6::/48 dev vrf-100")
    fwd = _kernel(k, "tun1", _from_tenant(64))
    assert [[d for d, _ in o] for o in fwd] == [["tun1"], ["tun0"], ["tun1"], ["tun0"]], fwd
    assert _kernel(k, "tun1", _from_tenant(1)) == [[], [], [], []]
    k.configure("ip link set vrf-100 up")
    errs = _kernel(k, "tun1", _from_tenant(1))
    assert [[d for d, _ in o] for o in errs] == [["tun1"]] * 4, errs


# ---------------------------------------------------------------------------
# ip link set DEV down: Linux flushes the IPv6 addresses

@pytest.mark.parametrize("keep", [
    pytest.param(False, marks=known("a plain `ip link set DEV down` keeps the IPv6 addresses in "
                                    "fastpath; Linux flushes them"), id="default"),
    pytest.param(True, id="keep_addr_on_down"),
])
def test_link_down_and_up_compared(kernel_oracle, keep):
    text = ("ip -6 addr add fd00::1/64 dev tun0\nip -6 addr add cafe::254/64 dev tun1\n"
            + ("sysctl -w net.ipv6.conf.tun1.keep_addr_on_down=1\n" if keep else "")
            + "ip link set tun1 down\nip link set tun1 up\n")
    pair = _pair(kernel_oracle, text)
    _check(pair, [_udp6("fd00::2", d) for d in ("cafe::2", "cafe::254")], "tun0")


def test_linux_flushes_ipv6_addresses_on_link_down(kernel_oracle):
    """Seen: after `ip link set tun1 down; ip link set tun1 up` tun1 has no
    IPv6 address left (its IPv4 one stays) and a packet to its former
    subnet draws an ICMPv6 Destination Unreachable (no route)."""
    k = kernel_oracle
    k.configure("ip -6 addr add fd00::1/64 dev tun0\nip -6 addr add cafe::254/64 dev tun1\n"
                "ip addr add 10.0.0.254/24 dev tun1\nip link set tun1 down\nip link set tun1 up\n")
    addrs = [a["local"] for a in json.loads(k.ip("-j", "addr", "show", "dev", "tun1"))[0]["addr_info"]]
    assert addrs == ["10.0.0.254"]
    (out,) = _kernel(k, "tun0", [_udp6("fd00::2", "cafe::2")])
    assert len(out) == 1 and out[0][0] == "tun0"
    err = IPv6(out[0][1])
    assert (err.src, err.nh, bytes(err.payload)[0]) == ("fd00::1", 58, 1), err.show2(dump=True)


# ---------------------------------------------------------------------------
# End.DT* vrftable after the VRF is deleted

DT = "ip -6 route add fc00::46/128 encap seg6local action End.DT46 vrftable 100 dev tun0\n"
DELETED = {
    "deleted": "ip link del vrf-100\n",
    "recreated": "ip link del vrf-100\nip link add vrf-100 type vrf table 100\nip link set vrf-100 up\n"
                 "ip link set tun1 master vrf-100\n",
}


def _dt46(inner):
    return IPv6(src="fd00::2", dst="fc00::46", nh=41 if inner.version == 6 else 4) / inner


def _dt_packets():
    return [_dt46(_udp6("2001:db8:9::1", "2001:db8:5::1")), _dt46(_udp4("192.0.2.1", "198.51.100.1"))]


@known("End.DT* vrftable finds the VRF bound to its table at packet time in fastpath (table-only "
       "with no VRF left); Linux keeps the VRF's ifindex from when the route was added and drops")
@pytest.mark.parametrize("change", sorted(DELETED))
def test_dt46_after_the_vrf_is_deleted_compared(kernel_oracle, change):
    pair = _pair(kernel_oracle, tenant() + DT + DELETED[change])
    _check(pair, _dt_packets(), "tun0")


def test_linux_dt46_drops_once_its_vrf_is_deleted(kernel_oracle):
    """Seen: the End.DT46 route (on tun0) forwards into vrf-100's table;
    after `ip link del vrf-100` it stays and drops everything, and still
    does after a new vrf-100 is bound to table 100."""
    k = kernel_oracle
    k.configure(tenant() + DT)
    assert [[d for d, _ in o] for o in _kernel(k, "tun0", _dt_packets())] == [["tun0"], ["tun0"]]
    k.configure(DELETED["deleted"])
    assert "fc00::46" in k.ip("-6", "route", "show")
    assert _kernel(k, "tun0", _dt_packets()) == [[], []]
    k.configure(DELETED["recreated"].split("\n", 1)[1])
    assert _kernel(k, "tun0", _dt_packets()) == [[], []]


# ---------------------------------------------------------------------------
# ifindexes

CREATED = ("ip link add vrf-a type vrf table 10\nip link add vrf-b type vrf table 20\n"
           "ip link del vrf-b\nip link add vrf-c type vrf table 30\n")


@known("fastpath gives a new device the ifindex after the highest in use, reusing a deleted "
       "one's; Linux never reuses one")
def test_ifindex_after_a_deletion_compared(kernel_oracle):
    oracle, router = _pair(kernel_oracle, CREATED)
    mine = {n: i.ifindex for n, i in router.state.interfaces.items()}
    assert mine["vrf-c"] - mine["vrf-a"] == _ifindex(oracle, "vrf-c") - _ifindex(oracle, "vrf-a")


def test_linux_does_not_reuse_ifindexes(kernel_oracle):
    """Seen: vrf-c, created after vrf-b (the newest device) was deleted,
    gets an ifindex above vrf-b's."""
    k = kernel_oracle
    k.configure(CREATED.split("ip link del")[0])
    b = _ifindex(k, "vrf-b")
    k.configure("ip link del vrf-b\nip link add vrf-c type vrf table 30\n")
    assert _ifindex(k, "vrf-c") > b


# ---------------------------------------------------------------------------
# link-local destinations in a VRF: vrf_ip6_input_dst

LL_RULE = tenant() + """
ip -6 addr add fe80::254/64 dev tun1
ip -6 route add fe80::254/128 dev tun1 table 50
ip -6 rule add to fe80::254/128 lookup 50 pref 500
"""


def _pings_to_fe80_254():
    return [IPv6(src=s, dst="fe80::254") / ICMPv6EchoRequest(id=7, seq=1) for s in ("cafe::1", "fe80::9")]


@known("a link-local destination in a VRF is looked up through the rules from the VRF in "
       "fastpath; Linux looks it up in the VRF's table on the ingress device first")
def test_link_local_destination_in_a_vrf_compared(kernel_oracle):
    pair = _pair(kernel_oracle, LL_RULE)
    _check(pair, _pings_to_fe80_254(), "tun1")


def test_linux_link_local_destination_in_a_vrf(kernel_oracle):
    """Seen: with a rule (pref 500, before l3mdev) sending fe80::254 to a
    table that routes it out of tun1, an echo request to fe80::254 on tun1
    (vrf-100's own link-local address) is answered all the same."""
    k = kernel_oracle
    k.configure(LL_RULE)
    for ping, out in zip(_pings_to_fe80_254(), _kernel(k, "tun1", _pings_to_fe80_254())):
        assert len(out) == 1 and out[0][0] == "tun1", out
        reply = IPv6(out[0][1])
        assert (reply.src, reply.dst) == ("fe80::254", ping.src) and ICMPv6EchoReply in reply


MC_RULE = LL_RULE + """
ip -6 route add ff02::1/128 dev tun1 table 50
ip -6 rule add to ff02::1/128 lookup 50 pref 501
"""


def test_multicast_destination_in_a_vrf(kernel_oracle):
    """Not a difference: multicast destinations on tun1 (vrf-100), with a
    rule before l3mdev routing ff02::1 out of tun1, are delivered by both
    (the kernel answers the echo request to ff02::1) or dropped by both."""
    pair = _pair(kernel_oracle, MC_RULE)
    ping = IPv6(src="cafe::1", dst="ff02::1") / ICMPv6EchoRequest(id=7, seq=2)
    (out,) = _kernel(kernel_oracle, "tun1", [ping])
    assert len(out) == 1 and ICMPv6EchoReply in IPv6(out[0][1]), out
    _check(pair, [ping] + [_udp6(s, d) for s in ("cafe::1", "fe80::9")
                           for d in ("ff02::1", "ff02::2", "ff02::1:ff00:254", "ff05::2", "ff0e::1")],
           "tun1")


# ---------------------------------------------------------------------------
# ICMPv6 errors to a link-local source in a VRF

LL = tenant() + "ip -6 addr add fe80::254/64 dev tun1\n"


@known("fastpath sends no ICMPv6 error to a link-local source in a VRF; Linux does")
def test_icmpv6_error_to_a_link_local_source_in_a_vrf_compared(kernel_oracle):
    pair = _pair(kernel_oracle, LL)
    _check(pair, [_udp6("fe80::9", d, hlim=1) for d in ("cafe::2", "cafe::9:1")], "tun1")


def test_linux_icmpv6_error_to_a_link_local_source_in_a_vrf(kernel_oracle):
    """Seen: a packet from fe80::9 on tun1 (vrf-100) whose hop limit
    expires draws a Time Exceeded from fe80::254 on tun1."""
    k = kernel_oracle
    k.configure(LL)
    (out,) = _kernel(k, "tun1", [_udp6("fe80::9", "cafe::2", hlim=1)])
    assert len(out) == 1 and out[0][0] == "tun1", out
    err = IPv6(out[0][1])
    assert (err.src, err.dst) == ("fe80::254", "fe80::9") and ICMPv6TimeExceeded in err


# ---------------------------------------------------------------------------
# a route whose device is a VRF device

VIA_VRF = tenant() + """
ip -6 route add cafe::/64 dev vrf-100
ip route add 10.0.0.0/24 dev vrf-100
ip -6 route add 2001:db8:7::/48 dev vrf-100
ip -6 route add 2001:db8:7::/48 vrf vrf-100 via fd00::2 dev tun0
"""


def _into_the_vrf(hlim=64):
    return [_udp6("fd00::2", "cafe::2", hlim), _udp4("10.9.0.2", "10.0.0.2", hlim),
            _udp6("fd00::2", "2001:db8:7::1", hlim)]


@known("a route through a VRF device forwards to that device in fastpath; Linux looks the packet "
       "up again in the VRF's table (vrf_xmit) and sends it where that says")
def test_route_through_a_vrf_device_compared(kernel_oracle):
    pair = _pair(kernel_oracle, VIA_VRF)
    _check(pair, _into_the_vrf(), "tun0")


def test_linux_route_through_a_vrf_device(kernel_oracle):
    """Seen: packets routed (main table) to `dev vrf-100` leave by the
    device of vrf-100's route for them, tun1 or tun0, their hop limit or
    TTL decremented once."""
    k = kernel_oracle
    k.configure(VIA_VRF)
    want = [[(dev, bytes(p))] for dev, p in zip(("tun1", "tun1", "tun0"), _into_the_vrf(63))]
    assert _kernel(k, "tun0", _into_the_vrf()) == want


# ---------------------------------------------------------------------------
# IPv4 source validation (fib_validate_source) and VRFs

RPF = """
ip addr add 10.9.0.1/24 dev tun0
ip link add vrf-100 type vrf table 100
ip link set vrf-100 up
ip link set tun1 master vrf-100
ip addr add 10.0.0.254/24 dev tun1
ip route add 192.0.2.0/24 vrf vrf-100 via 10.9.0.2 dev tun0
ip route add 10.0.0.0/24 dev tun1
"""


@known("IPv4 source validation looks the source up from the VRF of the route's device in "
       "fastpath; Linux from the ingress device's VRF")
def test_ipv4_source_validation_from_a_vrf_compared(kernel_oracle):
    pair = _pair(kernel_oracle, RPF)
    _check(pair, [_udp4(s, "192.0.2.1") for s in ("10.0.0.254", "10.0.0.255")], "tun1")


def test_linux_ipv4_source_validation_from_a_vrf(kernel_oracle):
    """Seen: from tun1 (vrf-100) to a route of vrf-100 leaving by tun0
    (default VRF), a source that is vrf-100's own address or broadcast is
    dropped as martian, another forwarded; from tun0 to a main route into
    tun1, the source is checked in vrf-100, the route's device's VRF (as
    fastpath does)."""
    k = kernel_oracle
    k.configure(RPF)
    pkts = [_udp4(s, "192.0.2.1") for s in ("10.0.0.1", "10.0.0.254", "10.0.0.255")]
    assert _kernel(k, "tun1", pkts) == [[("tun0", bytes(_udp4("10.0.0.1", "192.0.2.1", 63)))], [], []]
    back = [_udp4(s, "10.0.0.2") for s in ("10.9.0.2", "10.0.0.254", "10.0.0.255")]
    assert [[d for d, _ in o] for o in _kernel(k, "tun0", back)] == [["tun1"], [], []]
    _check((k, Router().configure(RPF)), back, "tun0")


# ---------------------------------------------------------------------------
# gateways given without dev

GW = """
ip link add vrf-100 type vrf table 100
ip link set vrf-100 up
ip link set tun1 master vrf-100
ip -6 addr add cafe::254/64 dev tun1
ip addr add 10.0.0.254/24 dev tun1
ip link add vrf-200 type vrf table 200
ip link set vrf-200 up
ip link set tun2 master vrf-200
ip -6 addr add cafe::254/64 dev tun2
ip addr add 10.0.0.254/24 dev tun2
ip route add 198.51.100.0/24 vrf vrf-200 via 10.0.0.5
ip -6 route add 2001:db8:5::/48 vrf vrf-200 via cafe::5
"""
GW_OUTSIDE = ("ip route add 203.0.113.0/24 via 10.0.0.5", "ip -6 route add 2001:db8:6::/48 via cafe::5")


def _to_the_gateways():
    return [_udp4("10.0.0.1", "198.51.100.1"), _udp6("cafe::1", "2001:db8:5::1")]


@known("a gateway without dev resolves through the first device with a connected prefix holding "
       "it in fastpath, whatever its VRF; Linux through the route's table (then the default VRF)")
def test_gateway_without_dev_compared(kernel_oracle):
    oracle, router = _pair(kernel_oracle, GW)
    _check((oracle, router), _to_the_gateways(), "tun2")
    refused = []
    for line in GW_OUTSIDE:
        try:
            router.configure(line)
        except ConfigError:
            refused.append(line)
    assert refused == list(GW_OUTSIDE)


def test_linux_resolves_a_gateway_in_the_routes_table(kernel_oracle):
    """Seen: vrf-200's routes via 10.0.0.5 and cafe::5 (prefixes of both
    tun1 in vrf-100 and tun2 in vrf-200) resolve to tun2 and forward there;
    main-table routes via them are refused ("Nexthop has invalid gateway",
    "No route to host")."""
    k = kernel_oracle
    k.configure(GW)
    assert "dev tun2" in k.ip("route", "show", "vrf", "vrf-200", "198.51.100.0/24")
    assert "dev tun2" in k.ip("-6", "route", "show", "vrf", "vrf-200", "2001:db8:5::/48")
    assert [[d for d, _ in o] for o in _kernel(k, "tun2", _to_the_gateways())] == [["tun2"], ["tun2"]]
    for line, msg in zip(GW_OUTSIDE, ("Nexthop has invalid gateway", "No route to host")):
        with pytest.raises(KernelConfigError, match=msg):
            k.configure(line)


# ---------------------------------------------------------------------------
# a VRF device set down

@known("a VRF device's down state is modelled only as its own routes going in fastpath; Linux "
       "sends no ICMP error for its devices' packets while it is down")
def test_vrf_device_down_compared(kernel_oracle):
    pair = _pair(kernel_oracle, tenant() + "ip link set vrf-100 down\n")
    _check(pair, _from_tenant(64) + _from_tenant(1), "tun1")


def test_linux_vrf_device_down(kernel_oracle):
    """Seen: after `ip link set vrf-100 down` the packets of tun1 are still
    forwarded, but a hop limit expiring draws no ICMP error any more (one
    did before), and the routes through vrf-100 itself are gone."""
    k = kernel_oracle
    k.configure(tenant() + "ip -6 route add 2001:db8:6::/48 dev vrf-100\n")
    assert [[d for d, _ in o] for o in _kernel(k, "tun1", _from_tenant(1))] == [["tun1"]] * 4
    k.configure("ip link set vrf-100 down")
    assert [[d for d, _ in o] for o in _kernel(k, "tun1", _from_tenant(64))] == \
        [["tun1"], ["tun0"], ["tun1"], ["tun0"]]
    assert _kernel(k, "tun1", _from_tenant(1)) == [[], [], [], []]
    assert "2001:db8:6::" not in k.ip("-6", "route", "show")


# ---------------------------------------------------------------------------
# per-device sysctls of a packet received on an enslaved device

SYS = tenant() + "sysctl -w net.ipv6.conf.all.seg6_enabled=1\n"

def _srh(nxt):
    """To vrf-100's cafe::254 with an SRH whose next segment is ``nxt``."""
    return IPv6(src="cafe::1", dst="cafe::254") / IPv6ExtHdrSegmentRouting(
        nh=17, addresses=[nxt, "cafe::254"], segleft=1, lastentry=1) / UDP(sport=1, dport=2) / b"srh"


def _sysctl_packets(kind):
    if kind == "srh":
        return [_srh("cafe::2"), _srh("fd00::2")]
    if kind == "v4":
        return [_udp4(_fresh4(), d) for d in ("10.0.0.2", "198.51.100.1")]
    return _from_tenant(1)[:2]


def _sys(*assignments):
    return "".join(f"sysctl -w net.{a}\n" for a in assignments)


@pytest.mark.parametrize("lines,kind", [
    pytest.param(_sys("ipv6.conf.tun1.seg6_enabled=1"), "srh", id="seg6_enabled-tun1"),
    pytest.param(_sys("ipv6.conf.vrf-100.seg6_enabled=1"), "srh", id="seg6_enabled-vrf"),
    pytest.param(_sys("ipv6.conf.tun1.seg6_enabled=1", "ipv6.conf.vrf-100.seg6_enabled=1",
                      "ipv6.conf.tun1.seg6_require_hmac=1"), "srh", id="require_hmac-tun1"),
    pytest.param(_sys("ipv6.conf.tun1.seg6_enabled=1", "ipv6.conf.vrf-100.seg6_enabled=1",
                      "ipv6.conf.vrf-100.seg6_require_hmac=1"), "srh", id="require_hmac-vrf"),
    pytest.param(_sys("ipv4.conf.tun1.forwarding=0"), "v4", id="forwarding-tun1"),
    pytest.param(_sys("ipv4.conf.vrf-100.forwarding=0"), "v4", id="forwarding-vrf"),
    pytest.param(_sys("ipv6.conf.tun1.hop_limit=10"), "hl", id="hop_limit-tun1"),
    pytest.param(_sys("ipv6.conf.vrf-100.hop_limit=10"), "hl", id="hop_limit-vrf"),
])
def test_sysctls_of_an_enslaved_device_compared(kernel_oracle, lines, kind):
    pair = _pair(kernel_oracle, SYS + lines)
    _check(pair, _sysctl_packets(kind), "tun1")


def test_linux_sysctls_of_an_enslaved_device(kernel_oracle):
    """Seen, for packets received on tun1 (vrf-100): an SRH to vrf-100's
    address is processed as vrf-100's seg6_enabled and seg6_require_hmac
    say, whatever tun1's; IPv4 is forwarded as tun1's forwarding says,
    whatever vrf-100's; ICMPv6 errors take the hop limit of tun1, the
    route's device (as fastpath)."""
    k = kernel_oracle
    k.configure(SYS + _sys("ipv6.conf.tun1.seg6_enabled=1"))
    srh = [_srh("cafe::2")]
    assert _kernel(k, "tun1", srh) == [[]]
    k.configure(_sys("ipv6.conf.tun1.seg6_enabled=0", "ipv6.conf.vrf-100.seg6_enabled=1"))
    assert [[d for d, _ in o] for o in _kernel(k, "tun1", srh)] == [["tun1"]]
    k.configure(_sys("ipv6.conf.vrf-100.seg6_require_hmac=1"))
    assert _kernel(k, "tun1", srh) == [[]]
    k.configure(_sys("ipv6.conf.vrf-100.seg6_require_hmac=0", "ipv6.conf.tun1.seg6_require_hmac=1"))
    assert [[d for d, _ in o] for o in _kernel(k, "tun1", srh)] == [["tun1"]]
    k.configure(_sys("ipv4.conf.vrf-100.forwarding=0"))
    assert [[d for d, _ in o] for o in _kernel(k, "tun1", _sysctl_packets("v4"))] == [["tun1"], ["tun0"]]
    k.configure(_sys("ipv4.conf.vrf-100.forwarding=1", "ipv4.conf.tun1.forwarding=0"))
    assert _kernel(k, "tun1", _sysctl_packets("v4")) == [[], []]
    k.configure(_sys("ipv6.conf.vrf-100.hop_limit=10"))
    (out,) = _kernel(k, "tun1", [_udp6("cafe::1", "cafe::2", hlim=1)])
    assert len(out) == 1 and IPv6(out[0][1]).hlim == 64

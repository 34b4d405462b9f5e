"""End.DX2 and the seg6local flavors compared with the running kernel.

End.DX2 (``encap seg6local action End.DX2 oif DEV``) decapsulates an inner
Ethernet frame (next header 143) and sends it out of DEV as it is; the
oracle's TAP devices (``KernelOracle(taps=...)``) show the frames the kernel
sends, and fastpath's result for such a packet is that frame (``res.data``)
on ``res.oif``.  Compared: frames of many sizes and EtherTypes (IPv4, IPv6,
ARP, 802.1Q and 802.1ad tagged, LLDP, 802.3 lengths), with and without an
SRH (SL 0; SL > 0 drops), extension headers before the frame, bad IPv6 and
frame lengths, the oif's MTU edge, an oif that is down or not Ethernet (a
TUN device, lo, a VRF), and the route's counters.

Flavors: which flavor combinations End, End.X and End.T take (the kernel
refuses what it does not implement with "Unsupported Flavor operation(s)";
fastpath takes RFC 8986's USP/USD too, see fastpath.config), and End.T with
flavors, which the kernel takes and ignores.

The TAP tests at the top need no SRv6 and run on any kernel the oracle runs
on; the rest are marked ``kernel_seg6`` (and ``kernel_vrf``)."""
import contextlib

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import (ICMPv6EchoRequest, IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop,
                                IPv6ExtHdrSegmentRouting)
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

from fastpath import Router
from fastpath.config import ConfigError, SEG6LOCAL_ACTIONS
from fastpath.kernel.oracle import is_kernel_noise_frame

pytestmark = pytest.mark.kernel   # compares with the running kernel (tests/conftest.py)

try:
    from .kernel_compare import check
    from . import kernel_oracle as ko
except ImportError:  # pragma: no cover
    from kernel_compare import check
    import kernel_oracle as ko

IFACES = ("tun0", "tun1", "tap0", "tap1")
TAPS = ("tap0", "tap1")
BASE = """
ip tuntap add dev tun0 mode tun
ip tuntap add dev tun1 mode tun
ip tuntap add dev tap0 mode tap
ip tuntap add dev tap1 mode tap
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip link set tap1 mtu 1280
"""
CFG = BASE + """
ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev tun1
ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev tun1 table 100
ip -6 route add fc00:1::d2/128 encap seg6local action End.DX2 oif tap0 dev tun0
ip -6 route add fc00:1::d3/128 encap seg6local action End.DX2 oif tap1 count dev tun0
ip -6 route add fc00:1::d4/128 encap seg6local action End.DX2 oif tun1 dev tun0
ip -6 route add fc00:1::d5/128 encap seg6local action End.DX2 oif lo count dev tun0
ip -6 route add fc00:1::70/128 encap seg6local action End.T table 100 dev tun0
ip -6 route add fc00:1::71/128 encap seg6local action End.T table 100 flavors psp dev tun0
ip -6 route add fc00:1::72/128 encap seg6local action End.T table 100 flavors usp dev tun0
ip -6 route add fc00:1::73/128 encap seg6local action End.T table 100 flavors usd dev tun0
ip -6 route add fc00:1::74/128 encap seg6local action End.T table 100 flavors psp,usp,usd dev tun0
"""
SRC = "2001:db8:1::2"
MAC_A, MAC_B = "02:00:00:00:00:aa", "02:00:00:00:00:bb"


@contextlib.contextmanager
def oracle_pair(cfg, seg6=True, vrf=False):
    ok, reason = ko.oracle_available(seg6=seg6, vrf=vrf)
    if not ok:
        pytest.skip(reason)
    with ko.KernelOracle(ifaces=IFACES, taps=TAPS) as k:
        k.configure(cfg)
        r = Router()
        r.configure(cfg)
        yield k, r


@pytest.fixture(scope="module")
def pair():
    with oracle_pair(CFG) as p:
        yield p


def frame(l3=None, n=10, **kw):
    """An Ethernet frame: ``l3`` under an Ethernet header, else IPv4/UDP
    with ``n`` bytes of payload."""
    eth = Ether(src=MAC_A, dst=MAC_B, **kw)
    return bytes(eth / (l3 if l3 is not None else IP(src="10.0.0.1", dst="10.0.0.2") / UDP()
                        / (b"x" * n)))


def dx2(fr, dst="fc00:1::d2", sl=None, pre=(), hlim=64):
    """IPv6 to ``dst`` carrying frame ``fr`` (next header 143): bare, after
    the headers in ``pre``, or after an SRH whose SL is ``sl``."""
    hdrs = list(pre)
    if sl is not None:
        segs = [dst] + [f"fc00:2::{k + 1}" for k in range(sl)]
        hdrs.append(IPv6ExtHdrSegmentRouting(addresses=segs, segleft=sl, lastentry=len(segs) - 1))
    p = IPv6(src=SRC, dst=dst, hlim=hlim)
    for h in hdrs:
        p = p / h
    b = bytearray(bytes(p / Raw(bytes(fr))))
    # the header before the frame says 143 (scapy knows no Ethernet over IPv6)
    if not hdrs:
        b[6] = 143
    else:
        off = 40
        for _ in hdrs[:-1]:
            off += (b[off + 1] + 1) * 8
        b[off] = 143
    return bytes(b)


def on(oracle, iif, pkt):
    from fastpath.kernel.compare import kernel_outputs
    return kernel_outputs(oracle, iif, [pkt])[0]


# --------------------------------------------------------------------------
# the oracle's TAP devices (no SRv6 needed)

def test_kernel_noise_frame_rule():
    mld = bytes(Ether(dst="33:33:00:00:00:16", type=0x86DD) /
                IPv6(src="::", dst="ff02::16", nh=0) / IPv6ExtHdrHopByHop(nh=58) / Raw(bytes([143, 0, 0, 0])))
    assert is_kernel_noise_frame(mld)
    assert not is_kernel_noise_frame(bytes(mld)[14:])                  # a bare packet is no frame
    tagged = bytes(Ether(dst="33:33:00:00:00:16") / Dot1Q(vlan=1, type=0x86DD)) + bytes(mld)[14:]
    assert not is_kernel_noise_frame(tagged)
    assert not is_kernel_noise_frame(frame())
    assert not is_kernel_noise_frame(b"\0" * 13)


def test_tap_devices_carry_frames():
    """A TAP device's output is whole Ethernet frames (a forwarded packet
    with the neighbour's MAC, an ARP request for an unknown one); its MLD
    reports are filtered as noise; a frame written into it is received."""
    ok, reason = ko.oracle_available(seg6=False)
    if not ok:
        pytest.skip(reason)
    with ko.KernelOracle(ifaces=("tun0", "tap0"), taps=("tap0",)) as k:
        assert tuple(k.taps) == ("tap0",)
        k.configure("""
            ip tuntap add dev tap0 mode tap
            ip -6 addr add 2001:db8:1::1/64 dev tun0
            ip -6 addr add 2001:db8:2::1/64 dev tap0
            ip addr add 10.0.2.1/24 dev tap0
            ip link set tap0 address 02:00:00:00:00:01
            ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:00:02 dev tap0
        """)
        assert k.skipped == ["ip tuntap add dev tap0 mode tap"]
        # the MLD reports of joining ff02::2 and ff02::1:ff00:1 (sent from ::,
        # within a random delay of up to a second) are noise, nothing else comes
        for _ in range(10):
            assert k.collect(0.5) == [] and k.stray == []
            if k.filtered:
                break
        assert k.filtered > 0
        pkt = bytes(IPv6(src=SRC, dst="2001:db8:2::2", hlim=9) / UDP() / b"x")
        out = k.send("tun0", pkt)
        fwd = bytearray(pkt)
        fwd[7] -= 1
        assert out == [("tap0", bytes.fromhex("020000000002" "020000000001" "86dd") + bytes(fwd))]
        out = k.send("tun0", bytes(IP(src="10.0.1.2", dst="10.0.2.3") / UDP()), wait=0.2)
        assert [(d, Ether(f).haslayer(ARP), Ether(f)[ARP].pdst) for d, f in out][:1] == \
            [("tap0", True, "10.0.2.3")]
        echo = bytes(Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
                     / IPv6(src="2001:db8:2::2", dst="2001:db8:2::1") / ICMPv6EchoRequest())
        out = k.send("tap0", echo)
        assert len(out) == 1 and out[0][0] == "tap0" and out[0][1][:12] == echo[6:12] + echo[:6]
        assert k.send("tap0", b"\x01" * 10) == [] and k.last_write_error == 22   # shorter than 14
        with pytest.raises(ko.KernelConfigError, match="TAP device"):
            k.configure("ip tuntap add dev tap0 mode tun")


def test_tap_names_must_be_interfaces():
    from fastpath.kernel.oracle import KernelOracle
    with pytest.raises(ValueError, match="not among the interfaces"):
        KernelOracle(ifaces=("tun0",), taps=("tap0",))


# --------------------------------------------------------------------------
# End.DX2

ETHERTYPES = [
    frame(),                                                             # IPv4
    frame(IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP() / b"y"),    # IPv6
    bytes(Ether(src=MAC_A, dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="10.0.0.9")),
    frame(Dot1Q(vlan=7) / IP(src="10.0.0.1", dst="10.0.0.2") / UDP()),   # 802.1Q
    frame(Dot1AD(vlan=5) / Dot1Q(vlan=7) / IPv6() / UDP()),              # QinQ
    frame(Raw(b"\x01" * 30), type=0x88CC),                               # LLDP
    frame(Raw(b"\x00" * 46), type=0x0600),                               # first EtherType
    frame(Raw(b"\x00" * 46), type=0x05FF),                               # 802.3 length: drop
    frame(Raw(b"\x00" * 46), type=0x002E),
]


@pytest.mark.kernel_seg6
def test_dx2_ethertypes(pair):
    check(pair, [dx2(f) for f in ETHERTYPES])


@pytest.mark.kernel_seg6
def test_dx2_sizes_and_mtu(pair):
    pkts = [dx2(frame()[:n]) for n in (0, 1, 13, 14, 15)]              # 14: the header alone
    pkts += [dx2(frame(Raw(b"z" * n))) for n in (46, 100, 1280, 1499, 1500, 1501, 2000)]   # tap0 mtu 1500
    pkts += [dx2(frame(Raw(b"z" * n)), "fc00:1::d3") for n in (1279, 1280, 1281)]        # tap1 mtu 1280
    check(pair, pkts)


@pytest.mark.kernel_seg6
def test_dx2_srh_and_extension_headers(pair):
    check(pair, [
        dx2(frame(), sl=0),                                      # SL 0: decapsulate
        dx2(frame(), sl=1),                                      # SL > 0: drop
        dx2(frame(), sl=2),
        dx2(frame(), pre=(IPv6ExtHdrHopByHop(),)),
        dx2(frame(), pre=(IPv6ExtHdrDestOpt(),)),
        dx2(frame(), pre=(IPv6ExtHdrDestOpt(),), sl=0),
        dx2(frame(), pre=(IPv6ExtHdrFragment(m=1),)),            # a first fragment: its piece goes
        dx2(frame(), pre=(IPv6ExtHdrFragment(offset=1),)),       # not a first fragment
        dx2(frame(), hlim=1),                                    # no hop limit check
        dx2(frame(), hlim=0),
        bytes(IPv6(src=SRC, dst="fc00:1::d2", nh=59) / Raw(frame())),     # no frame: drop
        bytes(IPv6(src=SRC, dst="fc00:1::d2") / IPv6(src="::1", dst="::2") / UDP()),
        bytes(IPv6(src=SRC, dst="fc00:1::d2") / IP(dst="10.0.0.2") / UDP()),
    ])


@pytest.mark.kernel_seg6
def test_dx2_bad_lengths(pair):
    good = dx2(frame())
    pkts = [good + b"\0" * 7]                                    # trailing bytes: trimmed
    for delta in (-1, -30, -(len(good) - 40 - 14), -(len(good) - 40 - 13), 1, 200):
        b = bytearray(good)
        b[4:6] = (len(good) - 40 + delta).to_bytes(2, "big")
        pkts.append(bytes(b))
    b = bytearray(good)
    b[4:6] = b"\0\0"                                             # payload length 0, no jumbo
    pkts.append(bytes(b))
    b = bytearray(good)                                          # the frame's own IPv4 length: sent as is
    b[40 + 14 + 2:40 + 14 + 4] = b"\xff\xff"
    pkts.append(bytes(b))
    check(pair, pkts)


@pytest.mark.kernel_seg6
def test_dx2_oif_not_ethernet(pair):
    check(pair, [dx2(frame(), "fc00:1::d4"), dx2(frame(), "fc00:1::d5")])   # a TUN device, lo


@pytest.mark.kernel_seg6
def test_dx2_reaches_the_tap(pair):
    """The comparisons above are not vacuous: the kernel does send frames."""
    oracle, _ = pair
    f = frame()
    assert on(oracle, "tun0", dx2(f)) == [("tap0", f)]
    assert on(oracle, "tun0", dx2(f, "fc00:1::d3", sl=0)) == [("tap1", f)]


@pytest.mark.kernel_seg6
def test_dx2_counters_and_oif_down():
    with oracle_pair(CFG) as (oracle, r):
        r.reset_counters()
        pkts = [dx2(frame(), "fc00:1::d3"), dx2(frame(Raw(b"z" * 1280)), "fc00:1::d3"),
                dx2(frame(Raw(b"z" * 1281)), "fc00:1::d3"), dx2(frame(), "fc00:1::d3", sl=1),
                dx2(frame()[:10], "fc00:1::d3")]
        check((oracle, r), pkts)
        oracle.configure("ip link set tap1 down")
        r.configure("ip link set tap1 down")
        check((oracle, r), [dx2(frame(), "fc00:1::d3")])
        oracle.configure("ip link set tap1 up")
        r.configure("ip link set tap1 up")
        check((oracle, r), [dx2(frame(), "fc00:1::d3")])
        c = r.counters()["routes"]["fc00:1::d3/128 table 254"]
        ok = len(pkts[0]) + len(pkts[1]) + len(pkts[0])
        assert c == {"packets": 3, "bytes": ok, "errors": 4}
        out = oracle.ip("-6", "-s", "route", "show", "fc00:1::d3/128")
        assert f"packets 3 bytes {ok} errors 4" in out, out
        check((oracle, r), [dx2(frame(), "fc00:1::d5")])
        assert r.counters()["routes"]["fc00:1::d5/128 table 254"] == {"packets": 0, "bytes": 0, "errors": 1}
        assert "packets 0 bytes 0 errors 1" in oracle.ip("-6", "-s", "route", "show", "fc00:1::d5/128")


VRF_CFG = BASE + """
ip link add vrf8 type vrf table 8
ip link set vrf8 up
ip -6 route add fc00:1::d8/128 encap seg6local action End.DX2 oif vrf8 count dev tun0
ip link add vrf9 type vrf table 9
ip link set vrf9 up
ip -6 route add fc00:1::d9/128 encap seg6local action End.DX2 oif vrf9 count dev tun0
"""


@pytest.mark.kernel_seg6
@pytest.mark.kernel_vrf
def test_dx2_oif_vrf():
    """A VRF device is ARPHRD_ETHER, so the kernel sends the frame to it,
    and vrf_xmit() drops it (it routes the skb as an IP packet from the
    frame's first byte): an error in the route's counters."""
    with oracle_pair(VRF_CFG, vrf=True) as (oracle, r):
        r.reset_counters()
        check((oracle, r), [dx2(frame(), "fc00:1::d8"), dx2(ETHERTYPES[1], "fc00:1::d8"),
                            dx2(ETHERTYPES[2], "fc00:1::d8")])
        assert r.counters()["routes"]["fc00:1::d8/128 table 254"] == {"packets": 0, "bytes": 0, "errors": 3}
        assert "packets 0 bytes 0 errors 3" in oracle.ip("-6", "-s", "route", "show", "fc00:1::d8/128")


@pytest.mark.kernel_seg6
@pytest.mark.kernel_vrf
@pytest.mark.xfail(strict=True, reason="fastpath.config.link's 'ip link del' of a VRF removes the "
                   "seg6local routes whose oif it was; the kernel keeps them (seg6local holds the "
                   "oif's ifindex only) and End.DX2 then drops: fastpath answers no route instead")
def test_dx2_oif_deleted():
    with oracle_pair(VRF_CFG, vrf=True) as (oracle, r):
        oracle.configure("ip link del vrf9")
        r.configure("ip link del vrf9")
        assert "fc00:1::d9" in oracle.ip("-6", "route", "show")
        check((oracle, r), [dx2(frame(), "fc00:1::d9")])


# --------------------------------------------------------------------------
# flavors

FLAVOR_SETS = ["psp", "usp", "usd", "next-csid", "psp,usp", "psp,usd", "usp,usd", "psp,usp,usd",
               "psp,next-csid", "next-csid,psp", "usp,next-csid", "usd,next-csid",
               "psp,usp,usd,next-csid"]
FLAVOR_ACTIONS = {"End": "", "End.X": "nh6 2001:db8:2::2", "End.T": "table 100"}
UNSUPPORTED = "Unsupported Flavor operation(s)"


@pytest.mark.kernel_seg6
def test_flavor_refusals():
    """What the kernel refuses among the flavor combinations, and what
    fastpath refuses, on End, End.X and End.T.

    The kernel refuses, with "Unsupported Flavor operation(s)", every set
    with an operation outside its ``seg6_flv_supp_ops_by_action`` (End: psp,
    next-csid; End.X: next-csid), which is ``ActionDesc.kernel_flavors``.
    End.T's row takes no flavors attribute: the kernel accepts any set and
    ignores it.  fastpath accepts everything the kernel accepts (End.T
    included, ignoring them as the kernel: test_end_t_ignores_flavors), and
    more (USP and USD, PSP on End.X: RFC 8986, an extension); the one set it
    refuses, next-csid on End.T, it refuses with the kernel's words."""
    with oracle_pair(BASE) as (oracle, _):
        seen = []
        for n, (action, args) in enumerate(FLAVOR_ACTIONS.items()):
            desc = SEG6LOCAL_ACTIONS[action]
            for m, fl in enumerate(FLAVOR_SETS):
                line = (f"ip -6 route add fc00:9:{n:x}::{m + 1:x}/128 encap seg6local action {action} "
                        f"{args} flavors {fl} dev tun0")
                try:
                    oracle.configure(line)
                    kernel = None
                except ko.KernelConfigError as e:
                    kernel = e.stderr.strip()
                try:
                    Router().configure(BASE + line)
                    ours = None
                except ConfigError as e:
                    ours = str(e)
                ops = set(fl.lower().split(","))
                want_kernel = action == "End.T" or ops <= desc.kernel_flavors
                seen.append((action, fl, kernel is None, ours is None))
                assert (kernel is None) == want_kernel, (line, kernel)
                if kernel is not None:
                    assert UNSUPPORTED in kernel, (line, kernel)
                if ours is not None:
                    assert UNSUPPORTED in ours, (line, ours)
                    # the only refusal the kernel does not make: next-csid on End.T
                    assert kernel is not None or (action == "End.T" and "next-csid" in ops), (line, ours)
                else:
                    assert ops <= desc.flavors
                if kernel is None and action != "End.T":
                    assert ours is None, (line, ours)
        # the kernel shows what it kept: End's and End.X's flavors, never End.T's
        shown = oracle.ip("-6", "route", "show")
        assert "action End flavors psp " in shown and "action End.X nh6 2001:db8:2::2 flavors next-csid" in shown
        assert not [ln for ln in shown.splitlines() if "End.T" in ln and "flavors" in ln]
        assert sum(k for _, _, k, _ in seen) == 4 + 1 + len(FLAVOR_SETS)


def srv6(segs, sl=None, n=8):
    addrs = list(reversed(segs))
    sl = len(segs) - 1 if sl is None else sl
    return bytes(IPv6(src=SRC, dst=addrs[sl]) / IPv6ExtHdrSegmentRouting(
        addresses=addrs, segleft=sl, lastentry=len(segs) - 1) / UDP(sport=1, dport=2) / (b"p" * n))


@pytest.mark.kernel_seg6
def test_end_t_ignores_flavors(pair):
    """End.T with flavors behaves as plain End.T (PSP does not pop the SRH
    at SL 1 -> 0, USP/USD do nothing at SL 0)."""
    pkts = []
    for sid in ("fc00:1::70", "fc00:1::71", "fc00:1::72", "fc00:1::73", "fc00:1::74"):
        pkts += [srv6([sid, "fc00:2::1"]), srv6([sid, "fc00:2::1", "fc00:2::2"]),
                 srv6(["fc00:2::1", sid], sl=0),
                 bytes(IPv6(src=SRC, dst=sid) / IPv6ExtHdrSegmentRouting(
                     addresses=["fc00:2::1", sid], segleft=0, lastentry=1) / IPv6(dst="fc00:2::5") / UDP())]
    check(pair, pkts)
    oracle, _ = pair
    assert on(oracle, "tun0", pkts[4])[0][1][6] == 43          # psp: the SRH is still there

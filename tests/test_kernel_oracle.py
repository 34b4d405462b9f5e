"""Tests for the kernel oracle (tests/kernel_oracle.py) against known kernel
behaviour.  They run the real kernel in a private network namespace; the
module skips itself where that is not possible (not root, no netns, no TUN,
no seg6local)."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import subprocess

import pytest

try:  # tests/ as a package or as a plain directory on sys.path
    from . import kernel_oracle as ko
except ImportError:
    import kernel_oracle as ko

_ok, _reason = ko.oracle_available(seg6=False)
pytestmark = [pytest.mark.kernel, pytest.mark.kernel_netns, pytest.mark.skipif(not _ok, reason=_reason)]

pytest.importorskip("scapy.all")
from scapy.layers.inet import ICMP, IP, UDP  # noqa: E402
from scapy.layers.inet6 import (  # noqa: E402
    ICMPv6DestUnreach,
    ICMPv6TimeExceeded,
    IPv6,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrSegmentRouting,
    RouterAlert,
)

BASE_CONFIG = """
# two point-to-point links
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip link set tun0 up
ip link set tun1 up
"""

PAYLOAD = b"fastpath-oracle-payload!"


def udp6(dst: str, hlim: int = 64, src: str = "2001:db8:1::2") -> bytes:
    return bytes(IPv6(src=src, dst=dst, hlim=hlim) / UDP(sport=1234, dport=5678) / PAYLOAD)


def udp4(dst: str, ttl: int = 64, src: str = "10.0.1.2") -> bytes:
    return bytes(IP(src=src, dst=dst, ttl=ttl, id=0x1234) / UDP(sport=1234, dport=5678) / PAYLOAD)


@pytest.fixture
def oracle():
    with ko.KernelOracle(ifaces=("tun0", "tun1", "tun2")) as k:
        k.configure(BASE_CONFIG)
        yield k


def only(out, ifname):
    assert len(out) == 1, f"expected exactly one packet, got {out!r}"
    assert out[0][0] == ifname, f"expected it on {ifname}, got {out!r}"
    return out[0][1]


# ---------------------------------------------------------------- IPv6


def test_ipv6_forward_decrements_hop_limit(oracle):
    pkt = udp6("2001:db8:2::2", hlim=64)
    data = only(oracle.send("tun0", pkt), "tun1")
    expected = bytearray(pkt)
    expected[7] = 63
    assert data == bytes(expected)


def test_ipv6_hop_limit_1_time_exceeded(oracle):
    pkt = udp6("2001:db8:2::2", hlim=1)
    data = only(oracle.send("tun0", pkt), "tun0")
    p = IPv6(data)
    assert (p.src, p.dst, p.hlim, p.tc, p.fl, p.nh) == ("2001:db8:1::1", "2001:db8:1::2", 64, 0, 0, 58)
    icmp = p[ICMPv6TimeExceeded]
    assert (icmp.type, icmp.code) == (3, 0)
    assert bytes(icmp.payload) == pkt  # the whole original packet, as received
    # byte-exact against scapy's own construction (flow label 0, checksum)
    expected = bytes(IPv6(src="2001:db8:1::1", dst="2001:db8:1::2", hlim=64)
                     / ICMPv6TimeExceeded(code=0) / IPv6(pkt))
    assert data == expected


def test_ipv6_no_route_destination_unreachable(oracle):
    pkt = udp6("2001:db8:99::1")
    data = only(oracle.send("tun0", pkt), "tun0")
    p = IPv6(data)
    assert (p.src, p.dst, p.fl) == ("2001:db8:1::1", "2001:db8:1::2", 0)
    icmp = p[ICMPv6DestUnreach]
    assert (icmp.type, icmp.code) == (1, 0)
    assert bytes(icmp.payload) == pkt
    expected = bytes(IPv6(src="2001:db8:1::1", dst="2001:db8:1::2", hlim=64)
                     / ICMPv6DestUnreach(code=0) / IPv6(pkt))
    assert data == expected


@pytest.mark.kernel_seg6
def test_seg6local_end(oracle):
    oracle.configure("""
        ip -6 route add fc00::1/128 encap seg6local action End dev tun0
        ip -6 route add fc00::2/128 dev tun1
    """)
    pkt = bytes(IPv6(src="2001:db8:1::2", dst="fc00::1", hlim=64)
                / IPv6ExtHdrSegmentRouting(addresses=["fc00::2", "fc00::1"], segleft=1, lastentry=1)
                / UDP(sport=1234, dport=5678) / PAYLOAD)
    data = only(oracle.send("tun0", pkt), "tun1")
    p = IPv6(data)
    assert (p.dst, p.hlim, p[IPv6ExtHdrSegmentRouting].segleft) == ("fc00::2", 63, 0)
    expected = bytearray(pkt)
    expected[7] = 63                                    # hop limit
    expected[24:40] = bytes.fromhex("fc00" + "00" * 13 + "02")  # DA = segments[0]
    expected[40 + 3] = 0                                # segments left
    assert data == bytes(expected)
    # SL = 0 at an End SID: dropped silently (seg6local never sends ICMP)
    pkt0 = bytes(IPv6(src="2001:db8:1::2", dst="fc00::1", hlim=64)
                 / IPv6ExtHdrSegmentRouting(addresses=["fc00::1"], segleft=0, lastentry=0)
                 / UDP(sport=1234, dport=5678) / PAYLOAD)
    assert oracle.send("tun0", pkt0) == []


def test_send_many_keeps_outputs_apart(oracle):
    outs = oracle.send_many("tun0", [udp6("2001:db8:2::2", hlim=64),
                                     udp6("2001:db8:2::2", hlim=1),
                                     udp6("2001:db8:2::3", hlim=9)], wait=0.02)
    assert [[ifname for ifname, _ in out] for out in outs] == [["tun1"], ["tun0"], ["tun1"]]
    assert IPv6(outs[2][0][1]).hlim == 8


def test_every_icmp_error_comes_out(oracle):
    # rate limits are off: a burst of errors to the same peer all come out
    outs = oracle.send_many("tun0", [udp6("2001:db8:2::2", hlim=1)] * 30, wait=0.01)
    assert all(len(o) == 1 and o[0][0] == "tun0" for o in outs), outs
    outs = oracle.send_many("tun0", [udp4("10.0.2.2", ttl=1)] * 30, wait=0.01)
    assert all(len(o) == 1 and o[0][0] == "tun0" for o in outs), outs


# ---------------------------------------------------------------- IPv4


def test_ipv4_forward_decrements_ttl(oracle):
    pkt = udp4("10.0.2.2", ttl=64)
    data = only(oracle.send("tun0", pkt), "tun1")
    e = IP(pkt)
    e.ttl = 63
    del e.chksum
    assert data == bytes(e)
    assert IP(data).chksum == IP(bytes(e)).chksum


def test_ipv4_ttl_1_time_exceeded(oracle):
    pkt = udp4("10.0.2.2", ttl=1)
    data = only(oracle.send("tun0", pkt), "tun0")
    p = IP(data)
    assert (p.src, p.dst, p.ttl, p.proto) == ("10.0.1.1", "10.0.1.2", 64, 1)
    assert (p[ICMP].type, p[ICMP].code) == (11, 0)
    assert bytes(p[ICMP].payload) == pkt
    # byte-exact with the IP ID taken from the kernel (it picks it freely)
    expected = IP(src="10.0.1.1", dst="10.0.1.2", ttl=64, tos=p.tos, flags=p.flags, id=p.id) \
        / ICMP(type=11, code=0) / IP(pkt)
    assert data == bytes(expected)


def test_ipv4_no_route_is_network_unreachable(oracle):
    pkt = udp4("10.0.99.1")
    data = only(oracle.send("tun0", pkt), "tun0")
    p = IP(data)
    assert (p.src, p.dst, p[ICMP].type, p[ICMP].code) == ("10.0.1.1", "10.0.1.2", 3, 0)


# ---------------------------------------------------------------- ip sr


@pytest.mark.kernel_seg6
def test_ip_sr_tunsrc_and_hmac(oracle):
    secret = "s3cret with spaces"
    oracle.configure(f"""
        ip sr tunsrc set fc00::9
        ip sr hmac set 100 sha256 '{secret}'
        ip -6 route add fc00::2/128 dev tun1
        ip -6 route add 2001:db8:77::/64 encap seg6 mode encap segs fc00::2 dev tun1
        ip -6 route add 2001:db8:78::/64 encap seg6 mode encap segs fc00::2 hmac 100 dev tun1
    """)
    assert "tunsrc addr fc00::9" in oracle.ip("sr", "tunsrc", "show")
    assert f'hmac 100 algo sha256 secret "{secret}"' in oracle.ip("sr", "hmac", "show")

    # encap uses the tunnel source set with `ip sr tunsrc set`
    inner = udp6("2001:db8:77::1")
    p = IPv6(only(oracle.send("tun0", inner), "tun1"))
    assert (p.src, p.dst, p.hlim) == ("fc00::9", "fc00::2", 63)  # outer hlim copied, then forwarded
    assert bytes(p[IPv6ExtHdrSegmentRouting].payload) == inner     # inner untouched

    # the HMAC TLV is computed with exactly the secret fed on stdin
    data = only(oracle.send("tun0", udp6("2001:db8:78::1")), "tun1")
    srh_off = 40
    assert data[6] == 43 and data[srh_off + 2] == 4
    hdrlen = (data[srh_off + 1] + 1) * 8
    first_segment, flags = data[srh_off + 4], data[srh_off + 5]
    segs = data[srh_off + 8: srh_off + 8 + 16 * (first_segment + 1)]
    tlv = data[srh_off + 8 + len(segs): srh_off + hdrlen]
    assert tlv[0] == 5 and tlv[1] == 38
    keyid = struct.unpack("!I", tlv[4:8])[0]
    assert keyid == 100
    text = data[8:24] + bytes([first_segment, flags]) + tlv[4:8] + segs
    assert tlv[8:40] == hmac.new(secret.encode(), text, hashlib.sha256).digest()

    # blank secret deletes the key
    oracle.configure("ip sr hmac set 100 sha256")
    assert "hmac 100" not in oracle.ip("sr", "hmac", "show")


# ---------------------------------------------------------------- config handling


def test_config_errors_are_clear(oracle):
    with pytest.raises(ko.KernelConfigError) as ei:
        oracle.configure("# comment\n\nip -6 route add fc00::5/128 encap seg6local action End dev nosuchdev\n")
    msg = str(ei.value)
    assert "line 3" in msg and "nosuchdev" in msg and ei.value.stderr
    with pytest.raises(ko.KernelConfigError, match="unknown command"):
        oracle.configure("ifconfig tun0 up")
    with pytest.raises(ko.KernelConfigError, match="not allowed"):
        oracle.configure("ip netns add other")


@pytest.mark.kernel_seg6
def test_config_skips_own_tun_creation_and_does_sysctl(oracle):
    oracle.configure("""
        ip link add tun0 type tun        # the oracle made it already
        ip tuntap add dev tun1 mode tun
        sysctl -w net.ipv6.conf.tun0.seg6_enabled=1
        sysctl net.ipv6.conf.all.seg6_enabled=1 net.ipv6.conf.all.seg6_require_hmac=-1
        ip -6 route add fc00::3/128 \\
            encap seg6local action End dev tun0
    """)
    assert len(oracle.skipped) == 2
    assert oracle.sysctl("net.ipv6.conf.tun0.seg6_enabled") == "1"
    assert oracle.sysctl("net.ipv6.conf.all.seg6_require_hmac") == "-1"
    assert "fc00::3" in oracle.ip("-6", "route", "show")
    # the namespace defaults the oracle sets
    assert oracle.sysctl("net.ipv6.auto_flowlabels") == "0"
    assert oracle.sysctl("net.ipv6.conf.tun2.forwarding") == "1"
    assert oracle.sysctl("net.ipv6.icmp.ratemask") == ""
    with pytest.raises(ko.KernelConfigError, match="No such file"):
        oracle.configure("sysctl -w net.ipv6.conf.nosuchdev.forwarding=1")


# ---------------------------------------------------------------- noise filter


def test_noise_filter_rules():
    mld = bytes(IPv6(src="::", dst="ff02::16", hlim=1)
                / IPv6ExtHdrHopByHop(nh=58, options=[RouterAlert()])
                / bytes.fromhex("8f00000000000001040000000000ff0200000000000000000000000000000002"))
    assert ko.is_kernel_noise(mld)
    rs = bytearray(bytes(IPv6(src="fe80::1", dst="ff02::2", hlim=255, nh=58)) + bytes([133] + [0] * 7))
    rs[4:6] = struct.pack("!H", 8)
    assert ko.is_kernel_noise(bytes(rs))
    dad = bytearray(rs)
    dad[8:24] = bytes(16)
    dad[40] = 135
    assert ko.is_kernel_noise(bytes(dad))
    ns = bytearray(rs)
    ns[40] = 135  # address resolution from a link-local source: kept
    assert not ko.is_kernel_noise(bytes(ns))
    fwd = bytearray(mld)  # same ICMPv6 type between global addresses: kept
    fwd[8:24] = bytes.fromhex("20010db8000100000000000000000002")
    assert not ko.is_kernel_noise(bytes(fwd))
    assert not ko.is_kernel_noise(udp4("10.0.2.2"))
    assert not ko.is_kernel_noise(b"")


def test_invalid_packet_is_a_drop(oracle):
    assert oracle.send("tun0", b"\x00" * 40) == []
    assert oracle.last_write_error is not None


# ---------------------------------------------------------------- cleanup


def _fds():
    return set(os.listdir("/proc/self/fd"))


def test_cleanup_after_normal_exit():
    before = _fds()
    with ko.KernelOracle(ifaces=("tun0", "tun1")) as k:
        name = k.netns
        assert os.path.exists(f"/run/netns/{name}")
        assert name.startswith(f"fp-{os.getpid()}-")
        assert "tun1" in k.ip("link", "show")
    assert not os.path.exists(f"/run/netns/{name}")
    listed = subprocess.run([ko.IP, "netns", "list"], capture_output=True, text=True).stdout
    assert name not in listed.split()
    assert _fds() == before
    assert k.netns is None


def test_cleanup_after_exception():
    before = _fds()
    with pytest.raises(ZeroDivisionError):
        with ko.KernelOracle(ifaces=("tun0",)) as k:
            name = k.netns
            k.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0")
            1 / 0
    assert not os.path.exists(f"/run/netns/{name}")
    assert _fds() == before


def test_cleanup_after_failed_enter():
    before = _fds()
    k = ko.KernelOracle(ifaces=("tun0", "lo"))  # 'lo' exists in every netns: TUNSETIFF fails
    with pytest.raises(ko.KernelOracleError):
        k.__enter__()
    assert k.netns is None
    assert _fds() == before
    assert not [n for n in os.listdir("/run/netns") if n.startswith(f"fp-{os.getpid()}-")]


def test_this_thread_stays_in_its_namespace():
    ours = os.readlink("/proc/thread-self/ns/net")
    with open("/proc/sys/net/ipv4/ip_default_ttl") as f:
        host_value = f.read()
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        other = "33" if host_value.strip() != "33" else "44"
        k.configure(f"sysctl -w net.ipv4.ip_default_ttl={other}")
        assert k.sysctl("net.ipv4.ip_default_ttl") == other
        assert os.readlink("/proc/thread-self/ns/net") == ours
        with open("/proc/sys/net/ipv4/ip_default_ttl") as f:
            assert f.read() == host_value  # the host namespace is untouched
    assert os.readlink("/proc/thread-self/ns/net") == ours


def test_ipv4_hairpin_has_no_redirect_by_default(oracle):
    # send_redirects=0 in the namespace: a hairpin is just forwarded, every time
    pkt = udp4("10.0.1.3")
    outs = oracle.send_many("tun0", [pkt] * 6, wait=0.01)
    assert [[ifname for ifname, _ in o] for o in outs] == [["tun0"]] * 6
    e = IP(pkt)
    e.ttl = 63
    del e.chksum
    assert all(o[0][1] == bytes(e) for o in outs)


def test_namespace_sysctls_can_be_overridden():
    redirects_on = {"net.ipv4.conf.all.send_redirects": 1, "net.ipv4.conf.default.send_redirects": 1}
    with ko.KernelOracle(ifaces=("tun0",), sysctls=redirects_on) as k:
        k.configure("ip addr add 10.0.1.1/24 dev tun0")
        assert k.sysctl("net.ipv4.conf.tun0.send_redirects") == "1"
        out = k.send("tun0", udp4("10.0.1.3"), wait=0.01)
        assert [IP(d)[IP].proto for _, d in out] == [1, 17]  # the redirect, then the packet
        assert (IP(out[0][1])[ICMP].type, IP(out[0][1])[ICMP].code) == (5, 1)


def test_conftest_fixture(kernel_oracle):
    assert kernel_oracle.ifaces == ("tun0", "tun1", "tun2")
    kernel_oracle.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0")
    out = kernel_oracle.send("tun0", udp6("2001:db8:1::1"))  # closed UDP port: port unreachable
    p = IPv6(only(out, "tun0"))
    assert (p[ICMPv6DestUnreach].type, p[ICMPv6DestUnreach].code) == (1, 4)


def test_runs_of_ip_lines_are_batched_and_a_refusal_names_its_line(oracle, monkeypatch):
    """Consecutive ip lines with the same global options go through one
    'ip -batch -'; a refused line raises as it would alone (its line number,
    ip's message), the lines before it are applied and those after it not."""
    import fastpath.kernel.oracle as O
    runs, real = [], O._run
    monkeypatch.setattr(O, "_run", lambda cmd, **kw: runs.append(list(cmd)) or real(cmd, **kw))
    oracle.configure("ip -6 addr add 2001:db8:7::1/64 dev tun0\n"
                     "ip -6 route add 2001:db8:70::/48 via 2001:db8:7::2 dev tun0\n"
                     "ip route add 10.70.0.0/16 dev tun0\n"
                     "ip -6 route add 2001:db8:71::/48 via 2001:db8:7::2 dev tun0\n")
    # the first two share '-6': one batch; a lone line runs as itself
    assert [c[3:] for c in runs] == [["-6", "-batch", "-"],
                                     ["route", "add", "10.70.0.0/16", "dev", "tun0"],
                                     ["-6", "route", "add", "2001:db8:71::/48", "via", "2001:db8:7::2",
                                      "dev", "tun0"]]
    assert "2001:db8:70::/48" in oracle.ip("-6", "route", "show")
    runs.clear()
    text = ("ip route add 10.71.0.0/16 dev tun0\n"
            "ip route add 10.72.0.0/16 dev tun0\n"
            "ip route add 10.73.0.0/16 via 10.99.0.1\n"      # no route to the gateway
            "ip route add 10.74.0.0/16 dev tun0\n")
    with pytest.raises(ko.KernelConfigError) as ei:
        oracle.configure(text)
    assert [c[3:5] for c in runs] == [["-batch", "-"]]
    e = ei.value
    assert (e.lineno, e.line) == (3, "ip route add 10.73.0.0/16 via 10.99.0.1")
    assert "Nexthop has invalid gateway" in e.stderr or "unreachable" in e.stderr.lower(), e.stderr
    assert "Command failed" not in e.stderr
    assert e.command[-5:] == ["route", "add", "10.73.0.0/16", "via", "10.99.0.1"]
    got = oracle.ip("-4", "route", "show")
    assert "10.71.0.0/16" in got and "10.72.0.0/16" in got and "10.74.0.0/16" not in got

"""Router.trace and python -m fastpath.trace: the path a packet took."""
import subprocess
import sys

from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting

from fastpath import Router

CFG = """
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip addr add 10.0.2.1/24 dev tun1
ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev tun1
ip -6 route add fc00:1::e/128 encap seg6local action End dev tun0
ip -6 route add fc00:1::a/128 encap seg6local action End flavors psp dev tun0
ip -6 route add fc00:1::15/128 encap seg6local action End.DX4 nh4 10.0.2.2 dev tun0
"""


def srv6(segs, sl):
    return bytes(IPv6(src="2001:db8:1::2", dst=segs[::-1][sl]) / IPv6ExtHdrSegmentRouting(
        addresses=segs[::-1], segleft=sl, lastentry=len(segs) - 1) / UDP() / b"x")


def test_trace_shows_each_step():
    r = Router()
    r.configure(CFG)
    t = r.trace(srv6(["fc00:1::e", "fc00:1::a", "fc00:2::1"], 2), iif="tun0")
    text = str(t)
    steps = ["rule pref 0: lookup table local", "table local lookup fc00:1::e: miss",
             "table main lookup fc00:1::e: unicast fc00:1::e/128 table 254 encap seg6local End",
             "seg6local End", "SRH at offset 40, segments left 2",
             "advance: segments left 1, DA fc00:1::a", "advance: segments left 0, DA fc00:2::1",
             "PSP: SRH removed", "forward: dev tun1 via 2001:db8:2::2, hop limit now 63",
             "verdict: forward"]
    pos = [text.index(s) for s in steps]
    assert pos == sorted(pos), text
    assert t.result.verdict == "forward" and t.result.oif == "tun1"


def test_trace_drop_and_icmp():
    r = Router()
    r.configure(CFG)
    t = r.trace(srv6(["fc00:2::1", "fc00:1::e"], 0), iif="tun0")
    assert str(t).splitlines()[-1] == "verdict: drop (srh_missing)"
    t = r.trace(bytes(IPv6(src="2001:db8:1::2", dst="fc00:9::1") / UDP()), iif="tun0")
    assert "ICMPv6 error type 1 code 0 due" in str(t) and "verdict: icmp (no_route)" in str(t)
    t = r.trace(bytes(IPv6(src="2001:db8:1::2", dst="fc00:1::15", nh=4)
                      / IP(src="198.51.100.1", dst="192.0.2.9", ttl=5) / UDP()), iif="tun0")
    assert "decapsulated: inner IPv4" in str(t) and "TTL now 4" in str(t)


def test_trace_cli(tmp_path):
    cfg = tmp_path / "r.conf"
    cfg.write_text(CFG)
    pkt = srv6(["fc00:1::e", "fc00:2::1"], 1).hex()
    p = subprocess.run([sys.executable, "-m", "fastpath.trace", "--config", str(cfg), "--iif", "tun0", pkt],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "seg6local End" in p.stdout and "verdict: forward" in p.stdout
    p = subprocess.run([sys.executable, "-m", "fastpath.trace", "--config", str(cfg), "--iif", "nope", pkt],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "unknown ingress interface" in p.stderr and "Traceback" not in p.stderr

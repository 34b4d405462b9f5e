"""``python -m fastpath.kernel verify`` (issue 18, part 4): agreeing and
deliberately disagreeing configurations, the exit codes and messages, the
capture formats and the bad inputs."""
from __future__ import annotations

import ipaddress
import os
import struct
import subprocess
import sys

import pytest

try:
    from . import kernel_oracle as ko
except ImportError:
    import kernel_oracle as ko

import fastpath  # noqa: E402
from fastpath.kernel import verify as V  # noqa: E402

pytestmark = [pytest.mark.kernel, pytest.mark.kernel_netns]   # verify builds its own namespaces

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastpath.__file__)))


def _need_oracle():
    ok, reason = ko.oracle_available(seg6=False)
    if not ok:
        pytest.skip(reason)


def _cli(*args, pids=None):
    p = subprocess.Popen([sys.executable, "-m", "fastpath.kernel", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    out, err = p.communicate(timeout=120)
    if pids is not None:
        pids.append(p.pid)
    return p.returncode, out, err


def _left_behind(pids):
    if not os.path.isdir(ko.NETNS_RUN_DIR):
        return []
    return [n for n in os.listdir(ko.NETNS_RUN_DIR) for pid in pids if n.startswith(f"fp-{pid}-")]


def ip6(src, dst, hl=64, payload=b"\0" * 8, nh=59):
    return struct.pack("!IHBB", 6 << 28, len(payload), nh, hl) + \
        ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed + payload


def ip4(src, dst, ttl=64, payload=b"\0" * 8, proto=17):
    h = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0, ttl, proto, 0,
                              ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed))
    s = sum(struct.unpack("!10H", h))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    h[10:12] = struct.pack("!H", ~s & 0xFFFF)
    return bytes(h) + payload


AGREE = """\
ip tuntap add dev tun0 mode tun
ip tuntap add dev tun1 mode tun
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip -6 route add 2001:db8:9::/48 via 2001:db8:2::2 dev tun1
ip -6 route add prohibit 2001:db8:a::/48
ip route add 10.9.0.0/16 via 10.0.2.2 dev tun1
sysctl -w net.ipv6.conf.all.seg6_enabled=1
sysctl -w net.ipv6.conf.tun0.seg6_enabled=1
ip -6 route add fc00::1/128 encap seg6local action End dev tun0
"""

PKTS = [ip6("2001:db8:1::2", "2001:db8:9::5"),        # forwarded
        ip6("2001:db8:1::2", "2001:db8:a::5"),        # ICMPv6 prohibited
        ip6("2001:db8:1::2", "2001:db8:9::5", hl=1),  # time exceeded
        ip4("10.0.1.2", "10.9.0.5"),                  # forwarded
        ip4("10.0.1.2", "10.9.0.5", ttl=1),           # ICMPv4 time exceeded (ID masked)
        ip6("2001:db8:1::2", "2001:db8:1::1")]        # local


@pytest.mark.kernel_seg6
def test_agreeing_configuration(tmp_path):
    _need_oracle()
    cfg = tmp_path / "r.conf"
    cfg.write_text(AGREE)
    pids = []
    rc, out, err = _cli("verify", "--config", str(cfg), *[p.hex() for p in PKTS], pids=pids)
    assert (rc, err) == (0, ""), out + err
    assert "agree 6/6" in out.splitlines()
    assert f"masked: {V.MASK_ICMP4_ID} (1 packet(s) changed by it)" in out
    assert "differs" not in out
    assert _left_behind(pids) == []


REDIRECT = """\
ip tuntap add dev tun0 mode tun
ip addr add 10.0.1.1/24 dev tun0
ip route add 10.9.0.0/16 via 10.0.1.3 dev tun0
sysctl -w net.ipv4.conf.all.send_redirects=1
sysctl -w net.ipv4.conf.tun0.send_redirects=1
"""


@pytest.mark.kernel_seg6
def test_disagreeing_configuration_redirect(tmp_path):
    """README, Known differences: fastpath generates no redirects.  A packet
    forwarded back out of the interface it came in on, towards a gateway on
    its source's subnet, draws an ICMP redirect from Linux (the first one of
    a fresh namespace always: the per-peer back-off starts at zero)."""
    _need_oracle()
    cfg = tmp_path / "r.conf"
    cfg.write_text(REDIRECT)
    pids = []
    rc, out, err = _cli("verify", "--config", str(cfg), "--iif", "tun0",
                        ip4("10.0.1.2", "10.9.0.5").hex(), pids=pids)
    assert rc == 1, out + err
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == "packet 1: differs"
    assert lines[1] == "  sent on tun0: IPv4 10.0.1.2 > 10.9.0.5 ttl 64 UDP 0 > 0, 28 bytes"
    assert "  kernel emitted on tun0: IPv4 10.0.1.1 > 10.0.1.2 ttl 64 ICMP type 5 code 1, 56 bytes" in lines
    assert "  fastpath forward on tun0: IPv4 10.0.1.2 > 10.9.0.5 ttl 63 UDP 0 > 0, 28 bytes" in lines
    assert any(x.startswith("  first difference: the kernel emitted 2 packet(s), fastpath 1, "
                            "only the kernel: tun0: IPv4 10.0.1.1 > 10.0.1.2") for x in lines)
    assert "agree 0/1" in lines
    assert _left_behind(pids) == []


@pytest.mark.kernel_seg6
def test_first_differing_field_by_name():
    """The test-only hook: fastpath configured with other text than the kernel."""
    _need_oracle()
    kernel = "ip tuntap add dev tun0 mode tun\nip -6 addr add 2001:db8:1::1/64 dev tun0\n" \
             "ip -6 route add unreachable 2001:db8:a::/48\n"
    rep = V.verify(kernel, [ip6("2001:db8:1::2", "2001:db8:a::5")],
                   fastpath_config=kernel.replace("unreachable", "prohibit"))
    assert not rep.ok and (rep.agree, rep.total) == (0, 1)
    d = rep.differences[0]
    assert d.detail == "ICMPv6 code: kernel 0, fastpath 1"
    text = rep.format()
    assert "  first difference: ICMPv6 code: kernel 0, fastpath 1" in text
    assert "  fastpath icmp (prohibit) on tun0: IPv6 2001:db8:1::1 > 2001:db8:1::2 hlim 64 " \
        "ICMPv6 type 1 code 1, 96 bytes" in text
    # another output device
    rep = V.verify("ip tuntap add dev tun0 mode tun\nip tuntap add dev tun1 mode tun\n"
                   "ip tuntap add dev tun2 mode tun\n"
                   "ip -6 route add 2001:db8:9::/48 dev tun1\n",
                   [ip6("2001:db8:1::2", "2001:db8:9::5")],
                   fastpath_config="ip tuntap add dev tun0 mode tun\nip tuntap add dev tun1 mode tun\n"
                   "ip tuntap add dev tun2 mode tun\nip -6 route add 2001:db8:9::/48 dev tun2\n")
    assert rep.differences[0].detail == "output device: kernel tun1, fastpath tun2"


def _pcap(frames, linktype):
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
    for f in frames:
        out += struct.pack("<IIII", 0, 0, len(f), len(f)) + f
    return out


@pytest.mark.kernel_seg6
def test_ethernet_capture_is_stripped_to_l3(tmp_path):
    _need_oracle()
    cfg = tmp_path / "r.conf"
    cfg.write_text(AGREE)
    eth = b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02"
    frames = [eth + b"\x86\xdd" + PKTS[0], eth + b"\x81\x00\x00\x05\x08\x00" + PKTS[3],
              eth + b"\x08\x06" + bytes(28)]
    cap = tmp_path / "in.pcap"
    cap.write_bytes(_pcap(frames, 1))
    rc, out, err = _cli("verify", "--config", str(cfg), "--pcap", str(cap))
    assert (rc, err) == (0, ""), out + err
    assert "note: 2 Ethernet frame(s) stripped to L3 (the namespace's devices are TUN devices)" in out
    assert "note: 1 Ethernet frame(s) that are not IPv4/IPv6 left out" in out
    assert "agree 2/2" in out
    raw = tmp_path / "raw.pcap"
    raw.write_bytes(_pcap(PKTS, 101))
    rc, out, err = _cli("verify", "--config", str(cfg), "--pcap", str(raw), "--limit", "2")
    assert (rc, err) == (0, ""), out + err
    assert "agree 2/2" in out


def _one_line_error(rc, out, err, text):
    assert rc == 2, (rc, out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert text in lines[0], lines[0]


def test_bad_inputs(tmp_path):
    cfg = tmp_path / "r.conf"
    cfg.write_text(AGREE)
    good = PKTS[0].hex()
    cases = [
        (["--config", str(tmp_path / "nope"), good], "cannot read"),
        (["--config", str(cfg), "zz"], "packet 1: not a hex string"),
        (["--config", str(cfg), "abc"], "packet 1: not a hex string"),
        (["--config", str(cfg)], "no packets"),
        (["--config", str(cfg), "--iif", "eth9", good], "--iif eth9: not an interface"),
        (["--config", str(cfg), "--limit", "0", good], "--limit must be at least 1"),
        (["--config", str(cfg), "--pcap", str(tmp_path / "nope.pcap")], "nope.pcap"),
    ]
    bad = tmp_path / "bad.conf"
    bad.write_text("ip route add 10.0.0.0/33 dev tun0\n")
    cases.append((["--config", str(bad), good], "configuration: line 1"))
    veth = tmp_path / "veth.conf"
    veth.write_text("ip link add va type veth peer name vb\n")
    cases.append((["--config", str(veth), good], "is a veth device: verify builds TUN devices only"))
    trunc = tmp_path / "trunc.pcap"
    trunc.write_bytes(_pcap([PKTS[0]], 101)[:-5])
    cases.append((["--config", str(cfg), "--pcap", str(trunc)], "malformed capture"))
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture at all")
    cases.append((["--config", str(cfg), "--pcap", str(junk)], "malformed capture"))
    for args, text in cases:
        _one_line_error(*_cli("verify", *args), text)
    rc, out, err = _cli("verify")
    _one_line_error(rc, out, err, "error: the following arguments are required: --config")


@pytest.mark.kernel_seg6
def test_kernel_refuses_the_configuration(tmp_path):
    """fastpath accepts USP on End.X (RFC 8986), Linux does not: cannot run."""
    _need_oracle()
    cfg = tmp_path / "r.conf"
    cfg.write_text("ip tuntap add dev tun0 mode tun\nip -6 addr add 2001:db8:1::1/64 dev tun0\n"
                   "ip -6 route add fc00::1/128 encap seg6local action End.X nh6 2001:db8:1::2 "
                   "flavors usp dev tun0\n")
    pids = []
    rc, out, err = _cli("verify", "--config", str(cfg), PKTS[0].hex(), pids=pids)
    _one_line_error(rc, out, err, "the kernel refused the configuration: config line 3")
    assert _left_behind(pids) == []


def test_cannot_run_without_the_kernel(tmp_path, monkeypatch, capsys):
    """Not root / no namespaces: exit 2, one line (the oracle's reason)."""
    from fastpath.kernel import __main__ as M
    from fastpath.kernel import oracle
    monkeypatch.setattr(oracle, "oracle_available",
                        lambda seg6=True: (False, "kernel oracle needs root (network namespaces, TUN devices)"))
    cfg = tmp_path / "r.conf"
    cfg.write_text(AGREE)
    assert M.main(["verify", "--config", str(cfg), PKTS[0].hex()]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    assert cap.err == "python -m fastpath.kernel: kernel oracle needs root (network namespaces, " \
        "TUN devices)\n"


def test_packet_fields_and_summary():
    f = dict(V.packet_fields(ip6("2001:db8::1", "2001:db8::2", hl=7)))
    assert f["IPv6 hop limit"] == 7 and f["IPv6 next header"] == 59
    assert V.first_difference(ip6("::1", "::2", hl=7), ip6("::1", "::2", hl=8)) == \
        "IPv6 hop limit: kernel 7, fastpath 8"
    assert V.first_difference(ip4("10.0.0.1", "10.0.0.2"), ip4("10.0.0.1", "10.0.0.2", ttl=3)) == \
        "IPv4 TTL: kernel 64, fastpath 3"
    assert V.summary(b"\x00\x01") == "2 bytes, not IPv4/IPv6"
    for junk in (b"", b"\x60", b"\x45" + bytes(10), ip6("::1", "::2", nh=43, payload=b"\x3b\x02\x04")):
        V.packet_fields(junk)     # never raises
        V.summary(junk)


def test_sigterm_removes_the_namespace(tmp_path):
    """A verify killed while it runs still deletes its namespace."""
    import signal
    import time
    _need_oracle()
    cfg = tmp_path / "r.conf"
    cfg.write_text(AGREE.split("sysctl -w net.ipv6.conf.all.seg6_enabled")[0])   # no SRv6 needed
    # a packet the kernel answers, so that every send waits --wait for more
    pkt = PKTS[1].hex()
    p = subprocess.Popen([sys.executable, "-m", "fastpath.kernel", "verify", "--config", str(cfg),
                          "--wait", "0.5", *[pkt] * 200], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        deadline = time.monotonic() + 60
        while not _left_behind([p.pid]) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert _left_behind([p.pid]), "the verify namespace never appeared"
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, (out, err)
    assert err.strip() == "python -m fastpath.kernel: interrupted"
    assert _left_behind([p.pid]) == []


def srh(segs, sl, nh=59):
    """An SRH (segments in packet order: segs[0] is the last to visit)."""
    body = b"".join(ipaddress.IPv6Address(s).packed for s in segs)
    return struct.pack("!BBBBBBH", nh, 2 * len(segs), 4, sl, len(segs) - 1, 0, 0) + body


@pytest.mark.kernel_seg6
def test_import_then_verify_agrees():
    """The two halves compose: a namespace imported, then its configuration
    verified against a fresh kernel namespace (every route kind of the
    import round trip; SRv6 End, H.Encaps with seg6_flowlabel=1, reject
    routes, rules; no multipath route: the kernel's hash is keyed per boot,
    see README "Known differences")."""
    _need_oracle()
    pytest.importorskip("pyroute2")
    try:
        from .test_kernel_import import EVERY_ROUTE_KIND
    except ImportError:
        from test_kernel_import import EVERY_ROUTE_KIND
    from fastpath.kernel.netlink import import_text
    with ko.KernelOracle(ifaces=("tun0", "tun1", "tun2")) as k:
        k.configure(EVERY_ROUTE_KIND)
        text = import_text(k.netns)
    pkts = [ip6("2001:db8:1::2", "2001:db8:9::5"),
            ip6("2001:db8:1::2", "2001:db8:22::1"),           # prohibit
            ip6("2001:db8:1::2", "2001:db8:20::1"),           # blackhole
            ip6("2001:db8:1::2", "2001:db8:30::5"),           # H.Encaps
            ip6("2001:db8:1::2", "fc00::1", nh=43,
                payload=srh(["2001:db8:9::5", "fc00::1"], 1)),  # End
            ip4("10.0.1.2", "10.9.0.1"),
            ip4("10.0.1.2", "10.22.0.1"),                     # prohibit: ICMPv4 (ID masked)
            ip4("10.0.1.2", "10.40.0.1"),                     # rule to table 200: no route
            ip4("10.0.1.2", "10.30.0.1")]                     # IPv4 in seg6 encap
    rep = V.verify(text, pkts)
    assert rep.ok, rep.format()
    assert (rep.agree, rep.total) == (len(pkts), len(pkts))
    assert V.MASK_FLOWLABEL in rep.masks
    assert any("applied with 'ip route replace'" in n for n in rep.notes)


def _pcapng(packets_by_if, names, linktype=101):
    def block(t, body):
        body += b"\0" * (-len(body) % 4)
        n = 12 + len(body)
        return struct.pack("<II", t, n) + body + struct.pack("<I", n)

    def opt(code, val):
        return struct.pack("<HH", code, len(val)) + val + b"\0" * (-len(val) % 4)
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    for name in names:
        out += block(1, struct.pack("<HHI", linktype, 0, 65535) + opt(2, name.encode()) +
                     opt(0, b""))
    for ifid, pkt in packets_by_if:
        out += block(6, struct.pack("<IIIII", ifid, 0, 0, len(pkt), len(pkt)) + pkt)
    return out


@pytest.mark.kernel_seg6
def test_pcapng_interface_names_give_the_ingress(tmp_path):
    _need_oracle()
    cfg = tmp_path / "r.conf"
    cfg.write_text(AGREE)
    back = ip6("2001:db8:2::2", "2001:db8:1::9")       # arrives on tun1, leaves by tun0
    cap = tmp_path / "in.pcapng"
    cap.write_bytes(_pcapng([(0, PKTS[0]), (1, back), (1, PKTS[3])], ["tun0", "tun1"]))
    rc, out, err = _cli("verify", "--config", str(cfg), "--pcap", str(cap))
    assert (rc, err) == (0, ""), out + err
    assert "note: ingress interface of each packet: the capture interface's name" in out
    assert "agree 3/3" in out
    # --iif overrides: all on tun0 (the second packet then comes from an
    # address that is tun1's prefix, still forwarded by both)
    rc, out, err = _cli("verify", "--config", str(cfg), "--pcap", str(cap), "--iif", "tun0")
    assert "ingress interface of each packet" not in out
    assert rc in (0, 1) and "agree " in out
    rep = V.verify(AGREE, [PKTS[0], back], ["tun0", "tun1"])
    assert rep.ok and rep.total == 2
    # the per-packet ingress reaches both sides: a rule on iif tun1 that only
    # the kernel has shows on the tun1 packet only
    rule = "ip -6 rule add to 2001:db8:40::/48 iif tun1 prohibit pref 200\n"
    probe = ip6("2001:db8:2::2", "2001:db8:40::1")
    rep = V.verify(AGREE + rule, [probe, probe], ["tun0", "tun1"], fastpath_config=AGREE)
    assert [d.index for d in rep.differences] == [1]
    assert rep.differences[0].detail == "ICMPv6 code: kernel 1, fastpath 0"

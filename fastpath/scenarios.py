"""Benchmark scenarios: a config text and a batch of packets per scenario.

Shared by ``python -m fastpath.bench``, the pytest-benchmark suites in
``bench/`` and the multi-process dataplane's benchmark traffic.  Each
builder is ``build(n_routes, batch, flows, rng) -> (config_text, frames,
iif)``; ``SCENARIOS`` maps a name to ``(description, builder)``.
"""
from __future__ import annotations

import ipaddress


def _ipv6_forward_scenario(n_routes: int, batch: int, flows: int, rng):
    lines = ["ip -6 addr add 2001:db8:1::1/64 dev eth0",
             "ip -6 addr add 2001:db8:2::1/64 dev eth1"]
    prefixes = []
    for k in range(n_routes):
        net = ipaddress.IPv6Network((0x2400_0000 << 96 | k << 80, 48))
        prefixes.append(net)
        lines.append(f"ip -6 route add {net} via 2001:db8:2::2 dev eth1")
    dsts = [prefixes[int(i)].network_address + 1 for i in rng.integers(0, n_routes, flows)]
    pkts = []
    for i in range(batch):
        d = dsts[i % flows]
        hdr = bytes([0x60, 0, 0, 0, 0, 8, 17, 64]) + \
            ipaddress.IPv6Address("2001:db8:1::2").packed + d.packed
        pkts.append(hdr + bytes([0x12, 0x34, 0x56, 0x78, 0, 8, 0, 0]))
    return "\n".join(lines), pkts, "eth0"


def _ipv4_forward_scenario(n_routes: int, batch: int, flows: int, rng):
    lines = ["ip addr add 10.0.1.1/24 dev eth0", "ip addr add 10.0.2.1/24 dev eth1"]
    nets = []
    for k in range(n_routes):
        net = ipaddress.IPv4Network(((20 << 24) + (k << 8), 24))
        nets.append(net)
        lines.append(f"ip route add {net} via 10.0.2.2 dev eth1")
    pkts = []
    for i in rng.integers(0, n_routes, batch):
        d = nets[int(i) % len(nets)].network_address + 1
        hdr = bytearray([0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]) + \
            ipaddress.IPv4Address("10.0.1.2").packed + d.packed
        s = sum(int.from_bytes(hdr[j:j + 2], "big") for j in range(0, 20, 2))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        hdr[10:12] = (~s & 0xFFFF).to_bytes(2, "big")
        pkts.append(bytes(hdr) + bytes([0x12, 0x34, 0x56, 0x78, 0, 8, 0, 0]))
    return "\n".join(lines), pkts, "eth0"


def _ipv6_noroute_scenario(n_routes: int, batch: int, flows: int, rng):
    cfg, pkts, iif = _ipv6_forward_scenario(1, batch, 1, rng)
    out = []
    for p in pkts:
        out.append(p[:24] + ipaddress.IPv6Address("2001:db8:99::1").packed + p[40:])
    return cfg, out, iif


def _eth(pkt: bytes) -> bytes:
    """An Ethernet frame around an IPv6 packet (the seeds' 94-byte End frames)."""
    return bytes.fromhex("020000000001020000000002") + (b"\x86\xdd" if pkt[0] >> 4 == 6 else b"\x08\x00") + pkt


def _srv6_base(n_routes: int):
    lines = ["ip -6 addr add 2001:db8:1::1/64 dev eth0", "ip -6 addr add 2001:db8:2::1/64 dev eth1",
             "ip addr add 10.0.1.1/24 dev eth0", "ip addr add 10.0.2.1/24 dev eth1",
             "ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:00:22 dev eth1",
             "ip neigh add 10.0.2.2 lladdr 02:00:00:00:00:22 dev eth1",
             "ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev eth1",
             "ip route add 198.18.0.0/15 via 10.0.2.2 dev eth1",
             "ip route add 198.18.0.0/15 via 10.0.2.2 dev eth1 table 100"]
    for k in range(n_routes):
        lines.append(f"ip -6 route add {ipaddress.IPv6Network((0x2400_0000 << 96 | k << 80, 48))} "
                     "via 2001:db8:2::2 dev eth1")
    return lines


def _end_packet(sid: str, nxt: str, hlim=64) -> bytes:
    """IPv6 + SRH with two segments (SL 1), no payload: 80 bytes (94 framed)."""
    srh = bytes([59, 4, 4, 1, 1, 0, 0, 0]) + ipaddress.IPv6Address(nxt).packed + \
        ipaddress.IPv6Address(sid).packed
    return bytes([0x60, 0, 0, 0, 0, len(srh), 43, hlim]) + \
        ipaddress.IPv6Address("2001:db8:1::2").packed + ipaddress.IPv6Address(sid).packed + srh


def _ipip_packet(sid: str, dst4: str, k: int) -> bytes:
    """IPv4/UDP in IPv6, no SRH: 68 bytes (82 framed)."""
    inner = bytearray([0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0]) + \
        ipaddress.IPv4Address("198.51.100.1").packed + ipaddress.IPv4Address(dst4).packed
    sm = sum(int.from_bytes(inner[j:j + 2], "big") for j in range(0, 20, 2))
    while sm >> 16:
        sm = (sm & 0xFFFF) + (sm >> 16)
    inner[10:12] = (~sm & 0xFFFF).to_bytes(2, "big")
    inner = bytes(inner) + (1000 + k % 1000).to_bytes(2, "big") + bytes([0, 53, 0, 8, 0, 0])
    return bytes([0x60, 0, 0, 0, 0, len(inner), 4, 64]) + \
        ipaddress.IPv6Address("2001:db8:1::2").packed + ipaddress.IPv6Address(sid).packed + inner


def _behaviour_scenario(action: str):
    def build(n_routes: int, batch: int, flows: int, rng):
        lines = _srv6_base(n_routes)
        sid = "fc00:1::100"
        attrs = {"End": "", "End.X": " nh6 2001:db8:2::2", "End.T": " table 254",
                 "End.DX4": " nh4 10.0.2.2", "End.DT4": " vrftable 100", "End.DT6": " table 254",
                 "End.DX6": " nh6 2001:db8:2::2"}[action]
        lines.append(f"ip -6 route add {sid}/128 encap seg6local action {action}{attrs} dev eth0")
        pkts = []
        for i in range(batch):
            f = i % flows
            if action in ("End", "End.X", "End.T"):
                p = _end_packet(sid, f"fc00:2::{f + 1:x}")
            elif action in ("End.DX4", "End.DT4"):
                p = _ipip_packet(sid, f"198.18.{f // 250}.{f % 250 + 1}", f)
            else:
                inner = _end_packet("fc00:2::1", "fc00:2::1")[:40]
                inner = inner[:6] + b"\x3b" + inner[7:24] + \
                    ipaddress.IPv6Address(f"2400:0:{f % max(n_routes, 1):x}::1").packed
                p = bytes([0x60, 0, 0, 0, 0, 40, 41, 64]) + \
                    ipaddress.IPv6Address("2001:db8:1::2").packed + ipaddress.IPv6Address(sid).packed + inner
            pkts.append(_eth(p))
        return "\n".join(lines), pkts, "eth0"
    return build


def _end_fib_scenario(n_routes: int, batch: int, flows: int, rng):
    """End whose next segments are random addresses in the FIB's /48 routes
    (one per flow): with ``--fib-size 220000 --flows 4096 --batch 4096`` the
    second lookup walks a large table at random, past the route cache."""
    lines = _srv6_base(n_routes)
    sid = "fc00:1::100"
    lines.append(f"ip -6 route add {sid}/128 encap seg6local action End dev eth0")
    picks = rng.integers(0, max(n_routes, 1), flows)
    hosts = rng.integers(1, 1 << 32, flows)
    pkts = []
    for i in range(batch):
        f = i % flows
        nxt = ipaddress.IPv6Address((0x2400_0000 << 96) | (int(picks[f]) << 80) | int(hosts[f]))
        pkts.append(_eth(_end_packet(sid, str(nxt))))
    return "\n".join(lines), pkts, "eth0"


def _end_inet_scenario(n_routes: int, batch: int, flows: int, rng):
    """End whose next segments are random addresses in an Internet-shaped
    FIB of ``n_routes`` prefixes (``bench_fib.internet_table``: the public
    table's prefix lengths, allocation blocks in the RIRs' /12s, clustered
    more-specifics), one per flow: random destinations miss the caches in
    every level of the LPM, tbl24 included, as in a real FIB."""
    from .bench_fib import internet_table, lookup_addresses
    lines = _srv6_base(0)
    sid = "fc00:1::100"
    lines.append(f"ip -6 route add {sid}/128 encap seg6local action End dev eth0")
    seed = int(rng.integers(0, 1 << 31))
    table = internet_table(6, max(n_routes, 1), seed=seed)
    doc = ipaddress.IPv6Network("2001:db8::/32")     # the scenario's own addresses
    lines += [f"ip -6 route add {net} via 2001:db8:2::2 dev eth1"
              for net in table.networks() if not net.overlaps(doc)]
    dsts = lookup_addresses(table, flows, seed=seed)[0]
    pkts = []
    for i in range(batch):
        nxt = ipaddress.IPv6Address(dsts[i % flows].tobytes())
        if nxt in doc:
            nxt = ipaddress.IPv6Address("fc00:2::1")
        pkts.append(_eth(_end_packet(sid, str(nxt))))
    return "\n".join(lines), pkts, "eth0"


def _udp6(src: str, dst: str, n: int = 32, hlim: int = 64) -> bytes:
    """IPv6/UDP with ``n`` bytes of payload (checksum left 0)."""
    return bytes([0x60, 0, 0, 0, 0, 8 + n, 17, hlim]) + ipaddress.IPv6Address(src).packed + \
        ipaddress.IPv6Address(dst).packed + bytes([0x12, 0x34, 0x56, 0x78, 0, 8 + n, 0, 0]) + bytes(n)


def _headend_scenario(mode: str, nsids: int):
    """A headend route (``encap seg6 mode MODE``) in front of a FIB of
    ``n_routes`` prefixes: 80-byte IPv6/UDP packets to the policy's prefix,
    encapsulated, the first SID looked up and forwarded (94-byte frames in)."""
    def build(n_routes: int, batch: int, flows: int, rng):
        lines = _srv6_base(n_routes)
        segs = ",".join(f"fc00:2::{k + 1:x}" for k in range(nsids))
        lines.append(f"ip -6 route add 2001:db8:50::/48 encap seg6 mode {mode} segs {segs} dev eth1")
        pkts = [_eth(_udp6("2001:db8:1::2", f"2001:db8:50::{i % flows + 1:x}")) for i in range(batch)]
        return "\n".join(lines), pkts, "eth0"
    return build


def _end_psp_scenario(n_routes: int, batch: int, flows: int, rng):
    """End with PSP at SL 1: advance, pop the SRH, forward (94-byte frames)."""
    lines = _srv6_base(n_routes)
    lines.append("ip -6 route add fc00:1::100/128 encap seg6local action End flavors psp dev eth0")
    pkts = [_eth(_end_packet("fc00:1::100", f"fc00:2::{i % flows + 1:x}")) for i in range(batch)]
    return "\n".join(lines), pkts, "eth0"


def _end_next_csid_scenario(n_routes: int, batch: int, flows: int, rng):
    """End with NEXT-C-SID (block 32, function 16): the DA's argument shifts
    left, no SRH; the new DA is forwarded (82-byte frames)."""
    lines = _srv6_base(n_routes)
    lines.append("ip -6 route add fc00:100::/32 via 2001:db8:2::2 dev eth1")
    lines.append("ip -6 route add fc00:100:1::/48 encap seg6local action End flavors next-csid "
                 "lblen 32 nflen 16 dev eth0")
    pkts = [_eth(_udp6("2001:db8:1::2", f"fc00:100:1:{i % flows + 2:x}::", n=20)) for i in range(batch)]
    return "\n".join(lines), pkts, "eth0"


HMAC_SECRET = b"fastpath bench secret"


def _hmac_end_packet(sid: str, nxt: str, keyid: int = 100) -> bytes:
    """_end_packet with an HMAC TLV (SHA-256, as seg6_hmac_compute): 120
    bytes (134 framed)."""
    import hashlib
    import hmac
    src = ipaddress.IPv6Address("2001:db8:1::2").packed
    segs = ipaddress.IPv6Address(nxt).packed + ipaddress.IPv6Address(sid).packed
    text = src + bytes([1, 0x08]) + keyid.to_bytes(4, "big") + segs
    tlv = bytes([5, 38, 0, 0]) + keyid.to_bytes(4, "big") + hmac.new(HMAC_SECRET, text, hashlib.sha256).digest()
    srh = bytes([59, (len(segs) + len(tlv)) // 8, 4, 1, 1, 0x08, 0, 0]) + segs + tlv
    return bytes([0x60, 0, 0, 0, 0, len(srh), 43, 64]) + src + ipaddress.IPv6Address(sid).packed + srh


def _end_hmac_scenario(n_routes: int, batch: int, flows: int, rng):
    """End with a SHA-256 HMAC TLV validated on every packet
    (seg6_require_hmac 1): compare with "End" for the HMAC's cost."""
    lines = _srv6_base(n_routes)
    lines += [f"ip sr hmac set 100 sha256 '{HMAC_SECRET.decode()}'",
              "sysctl -w net.ipv6.conf.eth0.seg6_require_hmac=1",
              "ip -6 route add fc00:1::100/128 encap seg6local action End dev eth0"]
    pkts = [_eth(_hmac_end_packet("fc00:1::100", f"fc00:2::{i % flows + 1:x}")) for i in range(batch)]
    return "\n".join(lines), pkts, "eth0"


SCENARIOS = {
    "ipv6-forward": ("IPv6 forward, /48 routes, 64-byte UDP", _ipv6_forward_scenario),
    "ipv4-forward": ("IPv4 forward, /24 routes, 36-byte UDP", _ipv4_forward_scenario),
    "ipv6-noroute": ("IPv6 no route: ICMPv6 unreachable built", _ipv6_noroute_scenario),
    "End": ("End, 94-byte frames, 2-segment SRH", _behaviour_scenario("End")),
    "End.X": ("End.X, 94-byte frames", _behaviour_scenario("End.X")),
    "End.T": ("End.T (table main), 94-byte frames", _behaviour_scenario("End.T")),
    "End.DX4": ("End.DX4, 82-byte IPv4-in-IPv6 UDP frames", _behaviour_scenario("End.DX4")),
    "End.DT4": ("End.DT4 (vrftable 100), 82-byte frames", _behaviour_scenario("End.DT4")),
    "End.DX6": ("End.DX6, IPv6-in-IPv6 frames", _behaviour_scenario("End.DX6")),
    "End.DT6": ("End.DT6 (table main), IPv6-in-IPv6 frames", _behaviour_scenario("End.DT6")),
    "End-fib": ("End, next segments at random in the FIB's routes, 94-byte frames", _end_fib_scenario),
    "End-inet": ("End, next segments at random in an Internet-shaped FIB, 94-byte frames",
                 _end_inet_scenario),
    "H.Encaps-1": ("H.Encaps, 1 SID, 94-byte IPv6 frames", _headend_scenario("encap", 1)),
    "H.Encaps-2": ("H.Encaps, 2 SIDs, 94-byte IPv6 frames", _headend_scenario("encap", 2)),
    "H.Encaps-4": ("H.Encaps, 4 SIDs, 94-byte IPv6 frames", _headend_scenario("encap", 4)),
    "H.Encaps.Red": ("H.Encaps.Red, 2 SIDs (SRH of 1), 94-byte frames", _headend_scenario("encap.red", 2)),
    "End-PSP": ("End with PSP at SL 1 (SRH popped), 94-byte frames", _end_psp_scenario),
    "End-NEXT-CSID": ("End NEXT-C-SID (argument shift, no SRH), 82-byte frames", _end_next_csid_scenario),
    "End-HMAC": ("End with SHA-256 HMAC validated (require_hmac 1), 134-byte frames", _end_hmac_scenario),
}

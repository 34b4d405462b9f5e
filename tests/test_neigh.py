"""The neighbour state machine of fastpath.wire.neigh on a fake clock (no
root, no interfaces): the transitions and timers of net/core/neighbour.c,
the probes of arp_solicit / ndisc_solicit, the queue, static entries."""
import ipaddress
import random
import struct

import pytest

from fastpath.wire import neigh as nb

MAC_R = bytes.fromhex("020000000001")
MAC_H = bytes.fromhex("0a0000000002")
H4 = ipaddress.IPv4Address("10.0.0.2").packed
H6 = ipaddress.IPv6Address("2001:db8::2").packed
R6 = ipaddress.IPv6Address("2001:db8::1").packed


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def env():
    clock = Clock()
    sent = []
    link = nb.Link("eth0", 2, MAC_R, [ipaddress.IPv4Interface("10.0.0.1/24")],
                   [ipaddress.IPv6Interface("2001:db8::1/64")])
    n = nb.Neighbours([link], lambda i, f: sent.append((i, f)), clock,
                      local4=[ipaddress.IPv4Address("10.0.0.1").packed], rng=random.Random(1))
    return n, clock, sent


def _frame(dst4=b"\0" * 6, payload=b"x" * 50):
    return dst4 + MAC_R + b"\x08\x00" + payload


def _arp_reply(to_us=True):
    return nb.arp_frame(2, MAC_R if to_us else b"\xff" * 6, MAC_H, H4, MAC_R,
                        ipaddress.IPv4Address("10.0.0.1").packed)


def test_incomplete_probes_then_failed(env):
    n, clock, sent = env
    n.resolve(2, 4, H4, [_frame(), _frame()])
    e = n.entries[(2, 4, H4)]
    assert e.state == nb.INCOMPLETE and len(sent) == 1       # first probe at once
    assert sent[0][1][:6] == b"\xff" * 6                       # broadcast
    for k in (1, 2):
        clock.t += 1.0
        n.tick()
        assert len(sent) == 1 + k
    clock.t += 1.0
    n.tick()
    assert e.state == nb.FAILED and len(sent) == 3             # mcast_solicit probes
    assert n.counters["neigh_failed"] == 2
    # traffic again: resolution starts over
    n.resolve(2, 4, H4, [_frame()])
    assert e.state == nb.INCOMPLETE and len(sent) == 4


def test_reply_sends_queue_and_reaches_datapath(env):
    n, clock, sent = env
    n.resolve(2, 4, H4, [_frame(payload=b"a" * 50), _frame(payload=b"b" * 50)])
    n.take_changes()
    n.input(2, _arp_reply())
    e = n.entries[(2, 4, H4)]
    assert e.state == nb.REACHABLE and e.mac == MAC_H
    out = [f for _i, f in sent[1:]]
    assert [f[:6] for f in out] == [MAC_H, MAC_H] and out[0][14:15] == b"a"
    assert [l[3] for l in n.take_changes()] == [
        "ip -4 neigh replace 10.0.0.2 lladdr 0a:00:00:00:00:02 dev eth0"]


def test_reachable_stale_delay_probe_reachable(env):
    n, clock, sent = env
    n.resolve(2, 4, H4, [])
    n.input(2, _arp_reply())
    e = n.entries[(2, 4, H4)]
    assert 15.0 <= e.reachable_time < 45.0                     # base 30 s x [0.5, 1.5)
    clock.t += e.reachable_time + 0.1
    n.tick()
    assert e.state == nb.STALE
    n.used(2, 4, H4)
    assert e.state == nb.DELAY
    before = len(sent)
    clock.t += 5.0
    n.tick()
    assert e.state == nb.PROBE and len(sent) == before + 1
    assert sent[-1][1][:6] == MAC_H                            # unicast probe
    n.input(2, _arp_reply())
    assert e.state == nb.REACHABLE


def test_probe_fails_after_ucast_solicit(env):
    n, clock, sent = env
    n.resolve(2, 4, H4, [])
    n.input(2, _arp_reply())
    e = n.entries[(2, 4, H4)]
    clock.t += 60
    n.tick()
    n.used(2, 4, H4)
    clock.t += 5.0
    n.tick()
    assert e.state == nb.PROBE
    n.take_changes()
    for _ in range(3):
        clock.t += 1.0
        n.tick()
    assert e.state == nb.FAILED
    assert [l[3] for l in n.take_changes()] == ["ip -4 neigh del 10.0.0.2 dev eth0"]


def test_arp_request_learns_stale_and_replies(env):
    n, clock, sent = env
    req = nb.arp_frame(1, b"\xff" * 6, MAC_H, H4, bytes(6), ipaddress.IPv4Address("10.0.0.1").packed)
    n.input(2, req)
    assert n.entries[(2, 4, H4)].state == nb.STALE
    (i, rep), = sent
    assert rep == nb.arp_frame(2, MAC_H, MAC_R, ipaddress.IPv4Address("10.0.0.1").packed, MAC_H, H4)


def test_static_entry_wins(env):
    n, clock, sent = env
    n.static[(2, 4, H4)] = bytes.fromhex("0e0000000009")
    req = nb.arp_frame(1, b"\xff" * 6, MAC_H, H4, bytes(6), ipaddress.IPv4Address("10.0.0.1").packed)
    n.input(2, req)
    assert (2, 4, H4) not in n.entries and not n.take_changes()


def test_queue_limit_drops_oldest(env):
    n, clock, sent = env
    frames = [_frame(payload=bytes([k % 256]) * 1500) for k in range(105)]
    n.resolve(2, 4, H4, frames)
    e = n.entries[(2, 4, H4)]
    assert len(e.queue) == 100 and n.counters["neigh_queuefull"] == 5   # 212992 // 2112
    assert e.queue[0][14] == 5


def _ns(src, dst, target, sllao=True, mac=MAC_H):
    eth = nb.mcast_mac6(dst) if dst[0] == 0xFF else MAC_R
    return nb.ns_frame(eth, mac, src, dst, target) if sllao else \
        nb.ipv6_frame(eth, mac, src, dst, struct.pack("!BBH4x", 135, 0, 0) + target)


def test_ns_multicast_na_flags_and_learning(env):
    n, clock, sent = env
    n.input(2, _ns(H6, nb.solicited_node(R6), R6))
    (i, na), = sent
    assert na[54] == 136 and na[58] == 0xE0                    # R S O
    assert na[78:80] == b"\x02\x01" and na[80:86] == MAC_R     # target lladdr option
    assert n.entries[(2, 6, H6)].state == nb.DELAY             # stale, then used by the NA


def test_ns_unicast_na_no_override_no_option(env):
    n, clock, sent = env
    n.input(2, _ns(H6, R6, R6))
    (i, na), = sent
    assert na[58] == 0xC0 and len(na) == 14 + 40 + 24


def test_ns_dad_answered_to_all_nodes(env):
    n, clock, sent = env
    n.input(2, _ns(bytes(16), nb.solicited_node(R6), R6, sllao=False))
    (i, na), = sent
    assert na[38:54] == bytes.fromhex("ff020000000000000000000000000001") and na[58] == 0xA0
    assert (2, 6, bytes(16)) not in n.entries


def test_na_without_override_keeps_connected_address(env):
    n, clock, sent = env
    n.resolve(2, 6, H6, [])
    na = nb.na_frame(MAC_R, MAC_H, H6, R6, H6, False, True, True, True)
    n.input(2, na)
    e = n.entries[(2, 6, H6)]
    assert e.state == nb.REACHABLE and e.mac == MAC_H
    other = nb.na_frame(MAC_R, bytes.fromhex("0a00000000ff"), H6, R6, H6, False, False, False, True)
    n.input(2, other)
    assert e.mac == MAC_H and e.state == nb.STALE              # weak override


def test_bad_checksum_ignored(env):
    n, clock, sent = env
    f = bytearray(_ns(H6, nb.solicited_node(R6), R6))
    f[56] ^= 1
    n.input(2, bytes(f))
    assert not sent and n.counters["nd_invalid"] == 1

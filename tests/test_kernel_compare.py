"""fastpath.kernel.compare itself, against a scripted kernel: what it masks
(only what the kernel chooses in packets it originates) and that output
arriving after its packet's wait is still judged."""
from __future__ import annotations

import pytest

pytest.importorskip("scapy.all")
from scapy.layers.inet import ICMP, IP, UDP  # noqa: E402

from fastpath import Batch, Router  # noqa: E402
from fastpath.kernel.compare import compare, mask_kernel_chosen, originated  # noqa: E402

CFG = """
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
"""


class ScriptedKernel:
    """Answers send() from a script: for packet k, ``now[k]`` comes within
    the wait and ``late[k]`` only after it (found by the next send's drain,
    or by collect())."""

    def __init__(self, now, late=None):
        self.now, self.late = list(now), list(late or [[] for _ in now])
        self.stray, self._queued, self._k = [], [], 0

    def send(self, iif, pkt, wait=0.01):
        self.stray += self._queued                # what the drain before a write finds
        out, self._queued = self.now[self._k], self.late[self._k]
        self._k += 1
        return list(out)

    def collect(self, wait=0.01):
        out, self._queued = self._queued, []
        return out


def _router_output(pkt):
    r = Router().configure(CFG)
    b = Batch.from_packets([pkt], iif="tun0")
    r.process(b)
    res = b.results()[0]
    return r, res


def _with_id(pkt: bytes, ident: int) -> bytes:
    p = IP(pkt)
    p.id = ident
    del p.chksum
    return bytes(p)


def test_a_forwarded_icmp_packet_is_compared_whole():
    """An echo request forwarded with another IPv4 ID is a difference: the
    mask of the kernel's random ID is for packets it originates only."""
    pkt = bytes(IP(src="10.0.1.2", dst="10.0.2.2", id=1234, ttl=64) / ICMP())
    r, res = _router_output(pkt)
    assert res.verdict == "forward" and not originated(res)
    same = ScriptedKernel([[("tun1", bytes(res.data))]])
    assert compare(same, r, "tun0", [pkt]) == []
    other_id = ScriptedKernel([[("tun1", _with_id(bytes(res.data), 999))]])
    assert len(compare(other_id, r, "tun0", [pkt])) == 1
    # what the old mask did: the two differ only where it zeroes
    assert mask_kernel_chosen(_with_id(bytes(res.data), 999)) == mask_kernel_chosen(bytes(res.data))


def test_an_icmp_error_the_router_makes_has_its_id_masked():
    pkt = bytes(IP(src="10.0.1.2", dst="10.0.2.2", ttl=1) / UDP(sport=1, dport=2))
    r, res = _router_output(pkt)
    assert res.verdict == "icmp" and originated(res)
    k = ScriptedKernel([[("tun0", _with_id(bytes(res.data), 4321))]])
    assert compare(k, r, "tun0", [pkt]) == []
    # anything else in it still counts
    wrong = bytearray(_with_id(bytes(res.data), 4321))
    wrong[-1] ^= 1
    assert len(compare(ScriptedKernel([[("tun0", bytes(wrong))]]), r, "tun0", [pkt])) == 1


def test_late_output_is_judged_with_its_packet():
    fwd = bytes(IP(src="10.0.1.2", dst="10.0.2.2", ttl=64) / UDP(sport=1, dport=2))
    r, res = _router_output(fwd)
    out = ("tun1", bytes(res.data))
    # the kernel's answer to each packet comes late: still agreement
    k = ScriptedKernel(now=[[], []], late=[[out], [out]])
    assert compare(k, r, "tun0", [fwd, fwd]) == []
    # a late extra packet after the first is a difference of the first
    k = ScriptedKernel(now=[[out], [out]], late=[[out], []])
    problems = compare(k, r, "tun0", [fwd, fwd])
    assert [p[0] for p in problems] == [0]
    # and after the last, of the last
    k = ScriptedKernel(now=[[out], [out]], late=[[], [out]])
    assert [p[0] for p in compare(k, r, "tun0", [fwd, fwd])] == [1]

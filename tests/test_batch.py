"""The Batch: construction, round trips, slicing, concatenation."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fastpath.batch import Batch


def test_round_trip_bytes_exact():
    pkts = [b"", b"\x60", bytes(range(256)) * 3, b"\x45" + b"\0" * 19]
    b = Batch.from_packets(pkts, iif="tun0")
    assert len(b) == 4
    assert b.packets() == pkts
    assert (b.start == 128).all()
    assert list(b.length) == [len(p) for p in pkts]
    assert b.iif_names == ["tun0"] * 4


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=3000), max_size=20), st.integers(0, 256))
def test_round_trip_random(pkts, headroom):
    b = Batch.from_packets(pkts, headroom=headroom)
    assert b.packets() == pkts
    assert b.slot >= headroom + max([len(p) for p in pkts], default=0)


def test_headroom_is_free_space_in_front():
    b = Batch.from_packets([b"abc"], headroom=64)
    assert b.start[0] == 64
    assert not b.data[0, :64].any()


def test_from_arrays_does_not_copy():
    data = np.zeros((3, 256), np.uint8)
    data[1, 100:104] = [1, 2, 3, 4]
    b = Batch.from_arrays(data, [100] * 3, [4] * 3)
    assert b.data is data
    assert b.packet(1) == b"\x01\x02\x03\x04"
    data[1, 100] = 9
    assert b.packet(1)[0] == 9


def test_from_arrays_rejects_out_of_slot():
    data = np.zeros((2, 64), np.uint8)
    with pytest.raises(ValueError):
        Batch.from_arrays(data, [60, 0], [10, 10])
    with pytest.raises(ValueError):
        Batch.from_arrays(data, [-1, 0], [1, 1])
    with pytest.raises(TypeError):
        Batch.from_arrays(data.astype(np.int16), [0, 0], [1, 1])
    with pytest.raises(ValueError):
        Batch.from_arrays(data, [0, 0, 0], [1, 1, 1])


def test_slice_is_a_view_and_concat_keeps_order():
    pkts = [bytes([i]) * (i + 1) for i in range(10)]
    b = Batch.from_packets(pkts)
    s = b[2:5]
    assert s.packets() == pkts[2:5]
    assert np.shares_memory(s.data, b.data)
    s.data[0, s.start[0]] = 0xEE
    assert b.packet(2)[0] == 0xEE
    c = Batch.concat([b[:3], Batch.from_packets([b"x" * 3000]), b[3:]])
    assert c.packets() == [b.packet(i) for i in range(3)] + [b"x" * 3000] + pkts[3:]
    with pytest.raises(ValueError):
        b[::2]


def test_scapy_round_trip():
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
    from scapy.layers.l2 import Dot1Q, Ether
    p6 = IPv6(src="2001:db8::1", dst="fc00::1") / IPv6ExtHdrSegmentRouting(
        addresses=["fc00::2", "fc00::1"], segleft=1) / UDP(sport=1, dport=2) / b"hi"
    p4 = IP(src="10.0.0.1", dst="10.0.0.2") / UDP() / b"x"
    b = Batch.from_scapy([p6, p4])
    assert b.linktype == "raw"
    assert b.packets() == [bytes(p6), bytes(p4)]
    back = b.to_scapy()
    assert bytes(back[0]) == bytes(p6) and back[0][IPv6ExtHdrSegmentRouting].segleft == 1
    assert bytes(back[1]) == bytes(p4)
    e = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=7) / p6
    be = Batch.from_scapy([e])
    assert be.linktype == "ethernet"
    assert be.packets() == [bytes(e)]
    assert bytes(be.to_scapy()[0]) == bytes(e)


def test_bad_linktype():
    with pytest.raises(ValueError):
        Batch.from_packets([b"x"], linktype="ppp")

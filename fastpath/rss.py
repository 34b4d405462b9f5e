"""Receive-side scaling as an Intel 82599 NIC (ixgbe) spreads packets over
its RX queues: the Toeplitz hash of Microsoft's RSS specification, then the
redirection table (RETA).

* ``toeplitz(data, key)``: the hash of a byte string, bit by bit as the
  specification's pseudocode (the reference; pure Python).
* ``rss_input(packet, linktype, ports, udp)``: the bytes the NIC hashes for
  one packet (pure Python reference of the parser); ``hash_packet``:
  ``toeplitz(rss_input(...))``.
* ``batch_hash(batch, ports=True, udp=True)``: the hash of every packet of a
  ``fastpath.Batch``, compiled (``fastpath._rss``, table-driven Toeplitz),
  also stored in ``batch.flow_hash`` unless ``store=False``.
* ``default_reta(nqueues, size=128)``: the RETA ixgbe programs (entry i ->
  queue i % nqueues); ``queues(hashes, nqueues, reta=None)``: the queue of
  each hash, ``reta[hash & (size - 1)]`` (the 7 LSBs for the 82599's 128
  entries).

Hash types (Microsoft "RSS hashing types"): IPV4 (source, destination
address: 8 bytes), TCP_IPV4 and UDP_IPV4 (+ source, destination port: 12
bytes), IPV6 (32 bytes), TCP_IPV6 and UDP_IPV6 (36 bytes), all fields in
network byte order.  ``ports=False`` turns the L4 types off; ``udp=False``
turns UDP off only (the 82599 hashes UDP ports only when the driver enables
it; ixgbe's ``ethtool -N ethX rx-flow-hash udp4 sdfn``).  Parsing:

* family: the Ethernet type (0x0800 / 0x86DD, after at most one 802.1Q tag,
  as the rest of fastpath; the IP version nibble must agree) for Ethernet
  batches, the version nibble for raw ones.  The Ethernet header is parsed
  from the frame itself (as the NIC does), so ``batch.l2len`` need not be set.
* the addresses must be inside the packet (IPv4: 20 bytes, IPv6: 40),
  otherwise, and for every non-IP packet, the hash is 0 (queue 0);
* ports: TCP (protocol 6), or UDP (17) when ``udp``; IPv4 not a fragment (MF
  clear and offset 0), L4 header at IHL * 4 (IHL >= 5); IPv6 L4 header
  directly after the fixed header (no extension headers, as the 82599's
  TCP_IPV6/UDP_IPV6 without the _EX types); the 4 port bytes inside the
  packet.  Otherwise the packet gets its L3-only hash.

Nothing past ``start + length`` is read; the IP total length field is not
looked at (the NIC sees the frame, padding included).

Measured with ``python -m fastpath.rss [N] [RUNS]`` (random TCP/UDP flows,
2048-byte slots, median of RUNS; the noisy 2-core KVM Xeon of the dev
container, -O3): 65536-packet batches (from DRAM) IPv4 66..74 Mpps, IPv6
53..58 Mpps; 1024-packet batches (in cache) IPv4 ~105 Mpps, IPv6 ~76 Mpps;
raw and Ethernet batches alike.  (pyx/_rss.pyx says why.)
"""
from __future__ import annotations

import functools

import numpy as np

from . import _rss

#: The 40-byte key of Microsoft's RSS verification suite (also DPDK's
#: default key for ixgbe; Linux's ixgbe programs a random key).
MS_KEY = bytes.fromhex(
    "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa")

#: RETA entries of the 82599.
RETA_SIZE = 128

_LINKTYPES = {"raw": 0, "ethernet": 1}


def _check_key(key) -> bytes:
    try:
        key = bytes(key)
    except TypeError:
        raise TypeError(f"key must be bytes-like, not {type(key).__name__}") from None
    if len(key) < 4:
        raise ValueError(f"an RSS key has at least 4 bytes (the 82599's has 40), not {len(key)}")
    return key


def toeplitz(data, key=MS_KEY) -> int:
    """The Toeplitz hash of ``data`` (bytes-like), as Microsoft's pseudocode:
    for each bit of the input, most significant bit of ``data[0]`` first, XOR
    the left-most 32 bits of the key into the result when the bit is set,
    then shift the key left one bit (zeros come in past its end)."""
    key = _check_key(key)
    data = bytes(data)
    k = int.from_bytes(key, "big")
    kbits = 8 * len(key)
    result = 0
    for i in range(8 * len(data)):
        if data[i >> 3] & (0x80 >> (i & 7)):
            # the 32-bit window of the key starting at bit i
            shift = kbits - 32 - i
            w = (k >> shift) if shift >= 0 else (k << -shift)
            result ^= w & 0xFFFFFFFF
    return result


def rss_input(packet, linktype="raw", ports=True, udp=True) -> bytes:
    """The bytes the NIC hashes for ``packet`` (empty: not hashed, hash 0)."""
    p = bytes(packet)
    if linktype == "ethernet":
        if len(p) < 14:
            return b""
        off = 14
        ethertype = int.from_bytes(p[12:14], "big")
        if ethertype == 0x8100:
            if len(p) < 18:
                return b""
            off = 18
            ethertype = int.from_bytes(p[16:18], "big")
        family = {0x0800: 4, 0x86DD: 6}.get(ethertype)
        p = p[off:]
        if family is None or not p or p[0] >> 4 != family:
            return b""
    elif linktype == "raw":
        if not p:
            return b""
        family = p[0] >> 4
    else:
        raise ValueError(f"linktype must be 'raw' or 'ethernet', not {linktype!r}")
    hashed_l4 = (6, 17) if udp else (6,)
    if family == 4:
        if len(p) < 20:
            return b""
        addrs = p[12:20]
        ihl = 4 * (p[0] & 0x0F)
        fragment = int.from_bytes(p[6:8], "big") & 0x3FFF
        if ports and p[9] in hashed_l4 and not fragment and ihl >= 20 and len(p) >= ihl + 4:
            return addrs + p[ihl:ihl + 4]
        return addrs
    if family == 6:
        if len(p) < 40:
            return b""
        addrs = p[8:40]
        if ports and p[6] in hashed_l4 and len(p) >= 44:
            return addrs + p[40:44]
        return addrs
    return b""


def hash_packet(packet, linktype="raw", ports=True, udp=True, key=MS_KEY) -> int:
    """The RSS hash of one packet (pure Python reference)."""
    return toeplitz(rss_input(packet, linktype, ports, udp), key)


@functools.lru_cache(maxsize=16)
def _key_table(key: bytes) -> np.ndarray:
    k = int.from_bytes(key[:44].ljust(44, b"\0"), "big")       # 352 bits
    rows = _rss.TABLE_ROWS
    # window[s]: the key's 32 bits starting at bit s
    window = np.array([(k >> (352 - 32 - s)) & 0xFFFFFFFF for s in range(8 * rows)],
                      dtype=np.uint32).reshape(rows, 8)
    bits = (np.arange(256)[:, None] >> (7 - np.arange(8))[None, :]) & 1   # [byte, k]
    table = np.bitwise_xor.reduce(
        np.where(bits[None, :, :].astype(bool), window[:, None, :], np.uint32(0)), axis=2)
    table = np.ascontiguousarray(table, dtype=np.uint32)
    table.flags.writeable = False
    return table


def key_table(key=MS_KEY) -> np.ndarray:
    """The uint32[40, 256] lookup table of ``key``: ``table[j, b]`` is the
    Toeplitz hash of byte value ``b`` at input position ``j`` (read-only,
    cached per key)."""
    return _key_table(_check_key(key))


def batch_hash(batch, ports=True, udp=True, *, key=MS_KEY, store=True, out=None) -> np.ndarray:
    """The RSS hash of every packet of ``batch`` (uint32[N]), compiled.

    ``ports``: hash TCP/UDP ports (TCP_IPV4/TCP_IPV6 hash types);
    ``udp``: UDP ports too (UDP_IPV4/UDP_IPV6).  ``store``: also write the
    hashes into ``batch.flow_hash`` (when the batch has that field).
    ``out``: a uint32[N] array to write into (returned)."""
    if batch.linktype not in _LINKTYPES:
        raise ValueError(f"unknown link type {batch.linktype!r}")
    n = len(batch)
    if out is None:
        out = np.empty(n, dtype=np.uint32)
    elif not (isinstance(out, np.ndarray) and out.dtype == np.uint32 and out.shape == (n,)):
        raise ValueError(f"out must be a uint32[{n}] array")
    _rss.hash_arrays(batch.data, batch.start, batch.length, _LINKTYPES[batch.linktype],
                     key_table(key), bool(ports), bool(udp), out)
    if store:
        fh = getattr(batch, "flow_hash", None)
        if fh is not None:
            fh[:] = out
    return out


def default_reta(nqueues: int, size: int = RETA_SIZE) -> np.ndarray:
    """The redirection table ixgbe programs by default: entry i -> queue
    ``i % nqueues`` (uint16[size]).  The 82599's RETA has 128 entries of 4
    bits, so the real NIC spreads RSS over at most 16 queues; any count is
    accepted here."""
    nqueues = _count(nqueues, "nqueues")
    size = _count(size, "size")
    if size & (size - 1):
        raise ValueError(f"the RETA size must be a power of two, not {size}")
    if nqueues > 0xFFFF:
        raise ValueError(f"at most 65535 queues, not {nqueues}")
    return (np.arange(size, dtype=np.int64) % nqueues).astype(np.uint16)


@functools.lru_cache(maxsize=64)
def _default_reta(nqueues: int) -> np.ndarray:
    r = default_reta(nqueues)
    r.flags.writeable = False
    return r


def queues(hashes, nqueues: int, reta=None) -> np.ndarray:
    """The RX queue of each hash: ``reta[hash & (len(reta) - 1)]`` (uint16),
    the 7 least significant bits of the hash for the default 128-entry RETA
    (``default_reta(nqueues)`` when ``reta`` is None)."""
    nqueues = _count(nqueues, "nqueues")
    if reta is None:
        reta = _default_reta(nqueues)
    else:
        reta = np.asarray(reta)
        if reta.ndim != 1 or reta.size == 0 or reta.size & (reta.size - 1):
            raise ValueError("reta must be a 1-D array whose size is a power of two")
        if reta.dtype.kind not in "ui":
            raise TypeError(f"reta must hold integers, not {reta.dtype}")
        if reta.min() < 0 or reta.max() >= nqueues:
            raise ValueError(f"reta entries must be queues 0..{nqueues - 1}")
        reta = reta.astype(np.uint16)
    h = np.asarray(hashes)
    if h.size == 0:
        return np.zeros(h.shape, np.uint16)
    if h.dtype.kind not in "ui":
        raise TypeError(f"hashes must be integers, not {h.dtype}")
    idx = (h.astype(np.uint64, copy=False) & np.uint64(reta.size - 1)).astype(np.intp)
    return reta[idx]


def _count(x, name) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(x).__name__}")
    if x < 1:
        raise ValueError(f"{name} must be at least 1, not {x}")
    return int(x)


def _bench(argv=None) -> None:
    """``python -m fastpath.rss [N] [RUNS]``: throughput of batch_hash on
    random packets (IPv4/IPv6 TCP/UDP mixes, raw and Ethernet)."""
    import sys
    import time
    argv = sys.argv[1:] if argv is None else argv
    n = int(argv[0]) if argv else 65536
    runs = int(argv[1]) if len(argv) > 1 else 7
    from .batch import Batch
    rng = np.random.default_rng(1)

    def pkts(kind):
        out = []
        for _ in range(n):
            sport, dport = (int(x) for x in rng.integers(0, 65536, 2))
            proto = 6 if rng.random() < 0.5 else 17
            l4 = sport.to_bytes(2, "big") + dport.to_bytes(2, "big") + bytes(16)
            if kind == 4:
                p = (bytes([0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, proto, 0, 0])
                     + rng.bytes(8) + l4)
            else:
                p = bytes([0x60, 0, 0, 0, 0, 20, proto, 64]) + rng.bytes(32) + l4
            out.append(p)
        return out

    for kind in (4, 6):
        raw = pkts(kind)
        eth = [bytes(12) + (b"\x08\x00" if kind == 4 else b"\x86\xdd") + p for p in raw]
        for lt, ps in (("raw", raw), ("ethernet", eth)):
            b = Batch.from_packets(ps, linktype=lt)
            out = np.empty(n, np.uint32)
            batch_hash(b, out=out, store=False)                  # warm up
            times = []
            for _ in range(runs):
                t0 = time.perf_counter()
                batch_hash(b, out=out, store=False)
                times.append(time.perf_counter() - t0)
            t = sorted(times)[len(times) // 2]
            print(f"IPv{kind} TCP/UDP {lt:8s}: {n / t / 1e6:7.1f} Mpps  "
                  f"({t / n * 1e9:.1f} ns/packet, {n} packets, median of {runs})")


if __name__ == "__main__":
    _bench()

"""The Batch: packets in numpy arrays, the one data structure every part of
fastpath shares.

* ``data``: ``uint8[N, slot]``, one packet per row.  A packet occupies
  ``data[i, start[i] : start[i] + length[i]]``; the bytes in front of it
  (``headroom``, 128 by default) let the datapath prepend headers (ICMP
  errors, encapsulation) without copying, as a DPDK mbuf or a VPP buffer.
* per-packet metadata arrays: ``start``, ``length`` (int32), ``l2len``
  (uint16: 0 for raw L3 batches, 14 or 18 for Ethernet), ``iif``/``oif``
  (uint32 ifindex, 0 = none; a packet delivered locally has as ``oif`` the
  device it is delivered on: the receiving one, or the VRF device an
  End.DT4/DT6/DT46 decapsulated it into), ``nexthop (uint8[N, 16]: IPv6, or IPv4 in
  the first 4 bytes), ``verdict`` (uint8), ``reason`` (uint16),
  ``flow_hash`` (uint32), ``timestamp_ns`` (int64), ``dst`` (uint32: the
  route entry the packet used).

A batch is either raw L3 (``linktype="raw"``: each packet an IPv4 or IPv6
packet) or Ethernet (``linktype="ethernet"``: frames with at most one 802.1Q
tag).  Interface names in ``iif=`` are resolved by the Router that processes
the batch; until then they are kept in ``iif_names``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .reasons import REASON_NAMES, VERDICTS

LINKTYPES = {"raw": 0, "ethernet": 1}
# the arrays the compiled kernels take, in their order (Datapath.process,
# run_loop and trace: the batch boundary, pyx/datapath/batch_loop.pxi's bat_t)
KERNEL_FIELDS = ("data", "start", "length", "l2len", "iif", "oif", "nexthop", "verdict", "reason",
                 "dst")
DEFAULT_HEADROOM = 128
DEFAULT_SLOT = 2048
_FIELDS = ("start", "length", "l2len", "iif", "oif", "nexthop", "verdict", "reason",
           "flow_hash", "timestamp_ns", "dst")
_DTYPES = {"start": np.int32, "length": np.int32, "l2len": np.uint16, "iif": np.uint32,
           "oif": np.uint32, "verdict": np.uint8, "reason": np.uint16,
           "flow_hash": np.uint32, "timestamp_ns": np.int64, "dst": np.uint32}


@dataclass(frozen=True)
class Result:
    """What happened to one packet."""
    verdict: str                 # "forward" | "local" | "drop" | "icmp" | "pending"
    oif: str | None              # egress interface for forward/icmp
    data: bytes                  # the bytes that leave (or the packet as it stands)
    reason: str | None           # drop reason for drop/icmp
    nexthop: str | None = None   # next hop address for forward/icmp
    fragments: tuple = ()        # every fragment's bytes when the packet was fragmented

    def __repr__(self):
        extra = f" via {self.nexthop}" if self.nexthop else ""
        return (f"Result({self.verdict}{' ' + self.reason if self.reason else ''}"
                f"{' dev ' + self.oif if self.oif else ''}{extra}, {len(self.data)} bytes)")


def _slot_size(maxlen: int, headroom: int) -> int:
    need = headroom + maxlen + 64
    if need <= DEFAULT_SLOT:
        return DEFAULT_SLOT
    return (need + 63) // 64 * 64


class Batch:
    """A batch of packets.  Build one with ``from_packets``, ``from_scapy``
    or ``from_arrays``; read results with ``results()`` / ``packet(i)``."""

    def __init__(self, data: np.ndarray, start, length, *, linktype="raw", iif=None,
                 timestamp_ns=None, headroom=DEFAULT_HEADROOM):
        """Wrap existing arrays without copying (``data`` must be a C-contiguous
        uint8[N, slot]; ``start``/``length`` int32[N] or convertible)."""
        if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
            raise TypeError("data must be a uint8[N, slot] numpy array")
        if not data.flags.c_contiguous:
            raise ValueError("data must be C-contiguous")
        if linktype not in LINKTYPES:
            raise ValueError(f"linktype must be one of {sorted(LINKTYPES)}, not {linktype!r}")
        n, slot = data.shape
        self.data = data
        self.linktype = linktype
        self.headroom = headroom
        self.start = self._meta(start, np.int32, n, "start")
        self.length = self._meta(length, np.int32, n, "length")
        if n and (self.start.min() < 0 or self.length.min() < 0
                  or (self.start.astype(np.int64) + self.length).max() > slot):
            raise ValueError("start/length place a packet outside its slot")
        self.l2len = np.zeros(n, np.uint16)
        self.oif = np.zeros(n, np.uint32)
        self.nexthop = np.zeros((n, 16), np.uint8)
        self.verdict = np.zeros(n, np.uint8)
        self.reason = np.zeros(n, np.uint16)
        self.flow_hash = np.zeros(n, np.uint32)
        self.dst = np.full(n, 0xFFFFFFFF, np.uint32)
        self.timestamp_ns = (np.zeros(n, np.int64) if timestamp_ns is None
                             else self._meta(timestamp_ns, np.int64, n, "timestamp_ns"))
        self.iif = np.zeros(n, np.uint32)
        self.iif_names = None
        self.ifnames = {}                     # ifindex -> name, set by the Router
        self.fragments = {}                   # packet index -> [bytes, ...]
        if iif is not None:
            self.set_iif(iif)

    @staticmethod
    def _meta(x, dtype, n, name):
        a = np.ascontiguousarray(x, dtype=dtype)
        if a.shape != (n,):
            raise ValueError(f"{name} must have shape ({n},), not {a.shape}")
        return a

    def set_iif(self, iif):
        """Ingress interface: a name (all packets), an ifindex, or an array /
        list of either, one per packet.  Names are resolved by the Router."""
        n = len(self)
        if isinstance(iif, str):
            self.iif_names = [iif] * n
        elif isinstance(iif, (list, tuple)) and iif and isinstance(iif[0], str):
            if len(iif) != n:
                raise ValueError(f"iif must name one interface per packet ({n})")
            self.iif_names = list(iif)
        else:
            self.iif[:] = self._meta(np.broadcast_to(np.asarray(iif), (n,)), np.uint32, n, "iif")
            self.iif_names = None

    # ------------------------------------------------------------------
    # construction
    @classmethod
    def from_packets(cls, packets, iif=None, *, linktype="raw", headroom=DEFAULT_HEADROOM,
                     slot=None, timestamps_ns=None):
        """Copy a list of ``bytes``-like packets into a new batch (one
        vectorised copy, no per-byte Python work)."""
        packets = [bytes(p) for p in packets]
        n = len(packets)
        lengths = np.fromiter((len(p) for p in packets), dtype=np.int64, count=n)
        maxlen = int(lengths.max()) if n else 0
        if slot is None:
            slot = _slot_size(maxlen, headroom)
        elif slot < headroom + maxlen:
            raise ValueError(f"slot {slot} too small for headroom {headroom} + packet {maxlen}")
        data = np.zeros((n, slot), dtype=np.uint8)
        if n:
            flat = np.frombuffer(b"".join(packets), dtype=np.uint8)
            offs = np.cumsum(lengths) - lengths
            rows = np.repeat(np.arange(n, dtype=np.int64) * slot + headroom - offs, lengths)
            data.reshape(-1)[rows + np.arange(flat.size, dtype=np.int64)] = flat
        start = np.full(n, headroom, dtype=np.int32)
        return cls(data, start, lengths.astype(np.int32), linktype=linktype, iif=iif,
                   timestamp_ns=timestamps_ns, headroom=headroom)

    @classmethod
    def from_scapy(cls, pkts, iif=None, **kw):
        """From scapy packets: ``Ether`` frames make an Ethernet batch, IP /
        IPv6 packets a raw one (unless ``linktype`` says otherwise)."""
        pkts = list(pkts)
        if "linktype" not in kw:
            kw["linktype"] = "raw"
            if pkts:
                from scapy.layers.l2 import Ether
                if isinstance(pkts[0], Ether):
                    kw["linktype"] = "ethernet"
        ts = None
        if pkts and all(getattr(p, "time", None) is not None for p in pkts):
            ts = np.array([int(float(p.time) * 1e9) for p in pkts], dtype=np.int64)
        return cls.from_packets([bytes(p) for p in pkts], iif, timestamps_ns=ts, **kw)

    @classmethod
    def from_arrays(cls, data, start, length, **kw):
        """Wrap existing arrays without copying (same as the constructor)."""
        return cls(data, start, length, **kw)

    @classmethod
    def concat(cls, batches):
        """One batch holding every packet of ``batches``, in order (slots
        widened to the largest)."""
        batches = list(batches)
        if not batches:
            raise ValueError("concat needs at least one batch")
        lt = batches[0].linktype
        if any(b.linktype != lt for b in batches):
            raise ValueError("cannot concatenate batches of different link types")
        slot = max(b.data.shape[1] for b in batches)
        data = np.concatenate([np.pad(b.data, ((0, 0), (0, slot - b.data.shape[1])))
                               if b.data.shape[1] != slot else b.data for b in batches])
        out = cls(data, np.concatenate([b.start for b in batches]),
                  np.concatenate([b.length for b in batches]), linktype=lt,
                  timestamp_ns=np.concatenate([b.timestamp_ns for b in batches]),
                  headroom=min(b.headroom for b in batches))
        for f in ("l2len", "iif", "oif", "nexthop", "verdict", "reason", "flow_hash", "dst"):
            setattr(out, f, np.concatenate([getattr(b, f) for b in batches]))
        if any(b.iif_names is not None for b in batches):
            names = []
            for b in batches:
                names.extend(b.iif_names if b.iif_names is not None else [None] * len(b))
            out.iif_names = names
        out.ifnames = {k: v for b in batches for k, v in b.ifnames.items()}
        base = 0
        for b in batches:
            for k, v in b.fragments.items():
                out.fragments[base + k] = v
            base += len(b)
        return out

    def __getitem__(self, s):
        """``batch[a:b]``: a batch viewing the same memory (no copy)."""
        if not isinstance(s, slice):
            raise TypeError("index a Batch with a slice; use packet(i) for one packet")
        idx = range(len(self))[s]
        if s.step not in (None, 1):
            raise ValueError("Batch slices must be contiguous")
        out = Batch.__new__(Batch)
        out.data = self.data[s]
        out.linktype = self.linktype
        out.headroom = self.headroom
        for f in _FIELDS:
            setattr(out, f, getattr(self, f)[s])
        out.iif_names = self.iif_names[s] if self.iif_names is not None else None
        out.ifnames = self.ifnames
        out.fragments = {k - idx.start: v for k, v in self.fragments.items() if k in idx}
        return out

    def copy(self):
        out = Batch.__new__(Batch)
        out.data = self.data.copy()
        out.linktype = self.linktype
        out.headroom = self.headroom
        for f in _FIELDS:
            setattr(out, f, getattr(self, f).copy())
        out.iif_names = list(self.iif_names) if self.iif_names is not None else None
        out.ifnames = dict(self.ifnames)
        out.fragments = dict(self.fragments)
        return out

    # ------------------------------------------------------------------
    # access
    def __len__(self):
        return self.data.shape[0]

    @property
    def slot(self):
        return self.data.shape[1]

    def packet(self, i) -> bytes:
        """The bytes of packet ``i`` as they stand (after processing: what leaves)."""
        s = int(self.start[i])
        return self.data[i, s:s + int(self.length[i])].tobytes()

    def packets(self):
        return [self.packet(i) for i in range(len(self))]

    def _ifname(self, idx):
        return self.ifnames.get(int(idx)) if idx else None

    def kernel_arrays(self) -> tuple:
        """The arrays the compiled kernels take, in their order
        (KERNEL_FIELDS): ``Datapath.process(*batch.kernel_arrays(), ...)``."""
        return tuple(getattr(self, f) for f in KERNEL_FIELDS)

    def results(self):
        """One ``Result`` per packet, in input order."""
        out = []
        for i in range(len(self)):
            v = VERDICTS[self.verdict[i]]
            r = int(self.reason[i])
            oif = self._ifname(self.oif[i]) if v in ("forward", "icmp") else None
            nh = None
            if v in ("forward", "icmp"):
                nh = self._nexthop_str(i)
            frags = tuple(self.fragments.get(i, ()))
            out.append(Result(v, oif, self.packet(i) if not frags else frags[0],
                              REASON_NAMES[r] if v in ("drop", "icmp") and r else None,
                              nh, frags))
        return out

    def _nexthop_str(self, i):
        import ipaddress
        b = self.nexthop[i].tobytes()
        fam = 6
        if self.linktype == "raw":
            s = int(self.start[i])
            fam = self.data[i, s] >> 4 if self.length[i] else 6
        else:
            et = int(self.data[i, int(self.start[i]) + int(self.l2len[i]) - 2]) << 8 | \
                int(self.data[i, int(self.start[i]) + int(self.l2len[i]) - 1])
            fam = 4 if et == 0x0800 else 6
        return str(ipaddress.IPv4Address(b[:4]) if fam == 4 else ipaddress.IPv6Address(b))

    def result_arrays(self):
        """The results as arrays (for tools that want numpy, not objects):
        verdict, reason, oif, start, length, nexthop, plus name tables."""
        return {"verdict": self.verdict, "reason": self.reason, "oif": self.oif,
                "start": self.start, "length": self.length, "nexthop": self.nexthop,
                "verdict_names": VERDICTS, "reason_names": REASON_NAMES,
                "ifnames": dict(self.ifnames)}

    def to_scapy(self):
        """Each packet as scapy parses it (IP/IPv6 or Ether)."""
        from scapy.layers.inet import IP
        from scapy.layers.inet6 import IPv6
        from scapy.layers.l2 import Ether
        out = []
        for p in self.packets():
            if self.linktype == "ethernet":
                out.append(Ether(p))
            elif p and p[0] >> 4 == 4:
                out.append(IP(p))
            else:
                out.append(IPv6(p))
        return out

    def __repr__(self):
        return f"<Batch {len(self)} packets, {self.linktype}, slot {self.slot}>"

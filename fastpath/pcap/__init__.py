"""Captures in and out: pcap / pcapng readers that parse records straight
into ``Batch`` arrays, writers that record what a processed batch sends on
each interface, and a replay loop that ties them to a Router.

    import fastpath, fastpath.pcap as fpcap

    r = fastpath.Router.from_file("routes.conf")
    with fpcap.PcapngWriter("out.pcapng") as out, \\
         fpcap.PcapngWriter("drops.pcapng", select="drops") as drops:
        for batch in fpcap.read_batches("in.pcapng", batch_size=4096, iif="eth0"):
            r.process(batch)
            out.write_batch(batch)        # forwarded + ICMP errors, on their egress interface
            drops.write_batch(batch)      # drops, drop reason as the packet comment

or, the same in one call: ``fpcap.replay(r, "in.pcapng", output="out.pcapng",
drops="drops.pcapng")`` (returns a ``ReplayStats``).

Reading
-------
Classic pcap (both byte orders, microsecond ``a1b2c3d4`` and nanosecond
``a1b23c4d`` magic) and pcapng (any number of sections, each with its own
byte order and interfaces; ``if_tsresol`` in powers of 10 and of 2,
``if_tsoffset``, ``if_fcslen``; Enhanced, Simple and obsolete Packet
Blocks; every other block is skipped), from a path, ``"-"`` (standard
input, a pipe) or a binary file object, gzip-compressed or not (detected
from the first bytes).  The stream is read in chunks (``chunk_bytes``) into
one reused buffer: memory stays flat however big the capture.

Link types and what the batch gets:

=========  ================================  ============================
linktype   name                              batch
=========  ================================  ============================
1          Ethernet                          ``"ethernet"``, frames as is
101        LINKTYPE_RAW (raw IPv4/IPv6)      ``"raw"``
228 / 229  LINKTYPE_IPV4 / LINKTYPE_IPV6     ``"raw"``
113        Linux cooked (SLL)                ``"raw"``: the 16-byte SLL
                                             header is stripped (and an
                                             802.1Q tag after it)
276        Linux cooked v2 (SLL2)            ``"raw"``: 20 bytes stripped
0 / 108    BSD loopback (NULL / LOOP)        ``"raw"``: 4 bytes stripped
12 / 14    DLT_RAW of some OSes              refused (``PcapError``) unless
                                             ``raw12=True``: the value 12 is
                                             raw IP on Linux but C-HDLC on
                                             BSD/OS and LOOP on OpenBSD;
                                             files should say 101
=========  ================================  ============================

A stripped cooked packet that is not IP (ARP, say) reaches the datapath as
it is and is dropped as ``not_ip``.  An Ethernet frame with an FCS
(``if_fcslen``, or the FCS bits of a classic header) has it removed when
the frame was captured whole.

Each batch gets, besides the Batch fields, ``batch.capture_if`` (uint32 per
packet: index into ``reader.interfaces``, the pcapng interface the packet
was captured on; 0 for classic pcap) and ``batch.wire_length`` (the
packet's original length on the wire).  Packets are processed as captured
(``caplen`` bytes): a snapped capture gives ``truncated`` drops.

Malformed input (bad magic, truncated record or block, caplen above the
snapshot length or ``max_caplen``, block lengths that disagree, unknown
link type, ...) raises ``PcapError`` (a ``ValueError``) whose ``offset`` is
the byte offset of the bad header in the (uncompressed) stream; every good
packet before it has been delivered in the batches yielded before the
error.  No length field from the file is trusted for an allocation: records
are bounded by ``max_caplen`` and blocks by ``max_block``.

Writing
-------
``PcapngWriter`` writes one Interface Description Block per egress
interface (``if_name`` = the fastpath interface name, nanosecond
timestamps), each packet on its interface; ``PcapWriter`` writes classic
pcap (nanosecond magic by default, ``nanosecond=False`` for microseconds),
one link type per file.  ``write_batch(batch)`` picks the packets by
verdict (``select``):

* ``"output"`` (default): verdict ``forward`` and ``icmp`` (the slot holds
  the ICMP error the datapath built) on ``oif``, fragments included;
* ``"drops"``: verdict ``drop`` on the ingress interface, with the drop
  reason name (``no_route``, ...) as the packet comment (pcapng), bytes as
  they arrived when ``write_batch(batch, original=copy)`` is given a copy
  taken before processing (``replay`` does), else as they stand;
* ``"all"``: every packet (forward/icmp on ``oif``, the rest on ``iif``;
  comments ``local``, ``drop: REASON``, ``icmp: REASON``).

``local`` packets are delivered to the router itself: they are counted,
never written (except with ``select="all"``).

Replay
------
``replay(processor, source, output=, drops=, on_batch=)`` and the generator
``process_batches(processor, batches, output=, drops=, stats=)`` push
batches through a Router (or a ``fastpath.Dataplane``, or anything with
``process(batch)``) and count them in a ``ReplayStats``.

Performance: the compiled helpers of ``fastpath._pcapio`` do the record
walks and the copies (without them, a numpy fallback does the same, fast
only when consecutive packets have equal lengths); ``replay`` reads two
batches ahead in a thread (``Prefetch``) and the writers write from a
thread, so that file I/O overlaps with the datapath (all of them release
the GIL).  Memory is bounded: one read chunk, one batch of pending
records, the batches in flight, three 1 MiB write buffers per writer.
"""
from __future__ import annotations

from ._common import (LINKTYPES, MAX_BLOCK, MAX_CAPLEN, DEFAULT_BATCH, DEFAULT_CHUNK,  # noqa: F401
                      CaptureInterface, PcapError)
from .fallback import _cio, _PyIO, use_compiled  # noqa: F401
from .reader import PcapReader, Prefetch, read_batches, read_packets  # noqa: F401
from .writer import PcapngWriter, PcapWriter, open_writer  # noqa: F401
from .loop import (ReplayStats, cpu_mark, cpu_since, process_batches, replay,  # noqa: F401
                   workers_cpu_s)
from . import fallback as _impl

__all__ = ["PcapError", "PcapReader", "read_batches", "read_packets", "Prefetch", "PcapWriter",
           "PcapngWriter", "open_writer", "ReplayStats", "process_batches", "replay",
           "workers_cpu_s", "cpu_mark", "cpu_since",
           "CaptureInterface", "LINKTYPES", "MAX_CAPLEN", "MAX_BLOCK", "use_compiled"]


def __getattr__(name):
    # ``_io``: the record walks and packers in use (compiled, or the
    # fallback after use_compiled(False)), read where it is switched
    if name == "_io":
        return _impl._io
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

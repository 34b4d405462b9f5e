"""The replay loop: process_batches and replay tie a reader, a processor (Router or Dataplane) and the writers; ReplayStats."""
from __future__ import annotations

import os
import time
from collections import Counter

import numpy as np

from ..batch import Batch
from ..reasons import REASON_NAMES, VERDICTS
from ._common import PcapError
from .reader import Prefetch, read_batches
from .writer import _OUT_LUT, _V_DROP, _V_FWD, _V_ICMP, _Writer, open_writer
from . import fallback as _impl


class ReplayStats:
    """What a replay did: packets and bytes in (as captured), batches, per
    verdict, per egress interface (frames that left there, fragments
    included), per drop / ICMP reason, time spent (``elapsed_s`` in all,
    ``process_s`` in the datapath).  Counted in arrays per batch (one
    compiled pass); the dicts are built when read."""

    _NIF, _NR = 4096, 1024

    def __init__(self):
        self.packets = 0
        self.bytes = 0
        self.batches = 0
        self.elapsed_s = 0.0
        self.process_s = 0.0
        self.read_cpu_s = 0.0            # CPU time of replay's reader thread (prefetch)
        self.write_cpu_s = 0.0           # CPU time of the writer threads of the writers it opened
        self.cpu_s = 0.0                 # CPU time: all threads, and a Dataplane's workers
        self.error = None
        self._v = np.zeros(256, np.int64)
        self._o = np.zeros(self._NIF, np.int64)
        self._d = np.zeros(self._NR, np.int64)
        self._i = np.zeros(self._NR, np.int64)
        self._names = None               # the ifnames dict the egress counts refer to
        self._egress = Counter()         # counts flushed under earlier ifnames, and misses
        self._extra_d = Counter()
        self._extra_i = Counter()

    def add(self, batch: Batch):
        n = len(batch)
        self.packets += n
        self.batches += 1
        if not n:
            return
        if batch.ifnames is not self._names:
            self._flush_egress()
            self._names = batch.ifnames
        miss = _impl._io.tally(batch.verdict, batch.oif, batch.reason, _V_FWD, _V_ICMP, _V_DROP,
                               self._v, self._o, self._d, self._i)
        if miss:                         # an ifindex or a reason beyond the arrays
            v = batch.verdict
            out = _OUT_LUT[v]
            names = batch.ifnames or {}
            for i in batch.oif[out & (batch.oif >= self._NIF)].tolist():
                self._egress[names.get(i) or f"if{i}"] += 1
            for vid, ctr in ((_V_DROP, self._extra_d), (_V_ICMP, self._extra_i)):
                for r in batch.reason[(v == vid) & (batch.reason >= self._NR)].tolist():
                    ctr[str(r)] += 1
        if batch.fragments:
            names = batch.ifnames or {}
            for r, fr in batch.fragments.items():
                if _OUT_LUT[int(batch.verdict[r])] and len(fr) > 1:
                    self._egress[names.get(int(batch.oif[r])) or "?"] += len(fr) - 1

    def _flush_egress(self):
        names = self._names or {}
        for i in np.flatnonzero(self._o).tolist():
            self._egress[names.get(i) or f"if{i}"] += int(self._o[i])
        self._o[:] = 0

    @property
    def verdicts(self) -> Counter:
        return Counter({VERDICTS[i] if i < len(VERDICTS) else str(i): int(self._v[i])
                        for i in np.flatnonzero(self._v).tolist()})

    @property
    def egress(self) -> Counter:
        out = Counter(self._egress)
        names = self._names or {}
        for i in np.flatnonzero(self._o).tolist():
            out[names.get(i) or f"if{i}"] += int(self._o[i])
        return out

    @staticmethod
    def _reasons(arr, extra):
        out = Counter({REASON_NAMES[r] if r < len(REASON_NAMES) else str(r): int(arr[r])
                       for r in np.flatnonzero(arr).tolist()})
        out.update(extra)
        return out

    @property
    def drop_reasons(self) -> Counter:
        return self._reasons(self._d, self._extra_d)

    @property
    def icmp_reasons(self) -> Counter:
        return self._reasons(self._i, self._extra_i)

    @property
    def pps(self) -> float:
        return self.packets / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {"packets": self.packets, "bytes": self.bytes, "batches": self.batches,
                "verdicts": dict(self.verdicts), "egress": dict(self.egress),
                "drop_reasons": dict(self.drop_reasons), "icmp_reasons": dict(self.icmp_reasons),
                "elapsed_s": round(self.elapsed_s, 6), "process_s": round(self.process_s, 6),
                "cpu_s": round(self.cpu_s, 6), "packets_per_s": round(self.pps, 1),
                "error": self.error}

    def __repr__(self):
        return (f"<ReplayStats {self.packets} packets, {dict(self.verdicts)}, "
                f"{self.pps / 1e6:.2f} M packets/s>")


def workers_cpu_s(processor) -> float:
    """The CPU time the live worker processes of ``processor`` (a Dataplane)
    have used since they started, all their threads; 0 for a processor that
    runs in this process (a Router: ``time.process_time`` has its time),
    and 0 when the workers cannot be asked (a replay's end must not turn
    into an error about its CPU count).  A worker that died meanwhile takes
    its time with it: take ``max(0, after - before)``."""
    if not hasattr(processor, "worker_pids"):
        return 0.0
    from ..dataplane import DataplaneError
    try:
        return float(processor.counters().get("workers_cpu_s", 0.0))
    except (DataplaneError, OSError):
        return 0.0


def cpu_mark(processor) -> tuple:
    """Where a replay through ``processor`` starts, for ``cpu_since``."""
    return workers_cpu_s(processor), time.process_time()


def cpu_since(processor, mark) -> float:
    """The CPU time used since ``mark`` (``cpu_mark``): this process's
    threads and the workers of ``processor`` (a Dataplane's are processes
    of their own, not in ``time.process_time``)."""
    w0, c0 = mark
    return time.process_time() - c0 + max(0.0, workers_cpu_s(processor) - w0)


def _snapshot(batch: Batch) -> Batch:
    b = Batch.__new__(Batch)
    b.data, b.start, b.length = batch.data.copy(), batch.start.copy(), batch.length.copy()
    b.linktype = batch.linktype
    return b


def process_batches(processor, batches, *, output=None, drops=None, stats=None):
    """Generator: process each batch (``processor.process(batch)``: a Router,
    a Dataplane, anything alike), write it to the ``output`` / ``drops``
    writers (either may be None), count it in ``stats`` (a ReplayStats),
    and yield it."""
    for b in batches:
        orig = _snapshot(b) if drops is not None and drops.select != "output" else None
        if stats is not None:
            nb = getattr(b, "capture_bytes", None)
            stats.bytes += nb if nb is not None else int(b.length.sum())
        t0 = time.perf_counter()
        processor.process(b)
        if stats is not None:
            stats.process_s += time.perf_counter() - t0
            stats.add(b)
        if output is not None:
            output.write_batch(b)
        if drops is not None:
            drops.write_batch(b, original=orig)
        yield b


def replay(processor, source, *, output=None, drops=None, on_batch=None, stats=None, prefetch=2,
           **reader_kw):
    """Push a capture (a path / ``"-"`` / file object, read with
    ``read_batches(source, **reader_kw)``, or any iterable of Batches)
    through ``processor``, writing what leaves to ``output`` and the drops
    to ``drops`` (writers, or paths: ``open_writer``), calling
    ``on_batch(batch)`` after each batch.  A capture is read ``prefetch``
    batches ahead in a background thread (0: in line).  Returns a
    ``ReplayStats``; a ``PcapError`` is raised after the good packets were
    processed and written (pass ``stats`` in to keep the counts; its
    ``error`` holds the message)."""
    stats = stats if stats is not None else ReplayStats()
    own = []
    batches = None
    cpu0 = cpu_mark(processor)
    t0 = time.perf_counter()
    try:
        if output is not None and not isinstance(output, _Writer):
            output = open_writer(output)
            own.append(output)
        if drops is not None and not isinstance(drops, _Writer):
            drops = open_writer(drops, select="drops")
            own.append(drops)
        if isinstance(source, (str, bytes, os.PathLike)) or hasattr(source, "read"):
            if "alloc" not in reader_kw and hasattr(processor, "batch_buffer"):
                reader_kw["alloc"] = processor.batch_buffer     # a Dataplane: no copy in
            batches = read_batches(source, prefetch=prefetch, **reader_kw)
        else:
            if reader_kw:
                raise TypeError("reader options given with an iterable of batches")
            batches = source
        for b in process_batches(processor, batches, output=output, drops=drops, stats=stats):
            if on_batch is not None:
                on_batch(b)
    except PcapError as e:
        stats.error = str(e)
        raise
    finally:
        stats.elapsed_s += time.perf_counter() - t0
        if isinstance(batches, Prefetch):
            batches.close()
            stats.read_cpu_s += batches.cpu_s
        for w in own:
            w.close()
            stats.write_cpu_s += w.thread_cpu_s
        stats.cpu_s += cpu_since(processor, cpu0)
    return stats

"""The multi-process dataplane: N worker processes, each pinned to a CPU,
sharing one set of tables in shared memory, with per-worker route copies,
route references in refcount mode and QSBR in noref mode.

    with fastpath.Dataplane(config_text, workers=2, mode="noref") as dp:
        dp.process(batch)                    # spread by RSS, processed, in order
        dp.configure("ip -6 route del ...")  # published; reclaimed after a grace period
        res = dp.bench(frames, iif="eth0", duration=1.0)   # each worker loops on its own copy

Shared memory (``multiprocessing.shared_memory`` segments, created and
unlinked by this process only; workers map them from ``/dev/shm`` without
registering them with a resource tracker):

``core``     control words, one 64-byte line each for the shared words and
             per worker (QSBR counter, pid, batches, packets in flight); the
             route entries (``fp_dst``, 64 bytes each, fixed capacity
             ``max_routes``) every worker reads and, in refcount mode, the
             shared ones (null entry, IPv4 input routes) take atomics; each
             worker's copies of the routes (``fp_pcpu``, 16 bytes per route,
             the worker's own lines).
``arena``    the big tables, one segment per array (``_Arena``): every LPM's
             ``tbl24`` and ``groups``, the nexthop rows, seg6local records and
             SRH templates, changed in place by ``configure`` while the
             workers read them (an array that grows is a new segment).
``snapshot`` the small tables (devices, addresses, neighbours, rules, HMAC
             keys, sysctls) copied, and the names of the arena's arrays; one
             per configuration, published by bumping a sequence number, the
             previous one unlinked after a grace period.
``stage``    batch data the workers read their packets from: a pool of
             segments (``Dataplane.batch_buffer``) that a reader can build
             its batches in, else one ``process`` copies a batch into with
             one contiguous copy.
``io``       per worker, the slots and metadata of the packets
             ``Dataplane.process`` hands it (no pickling of packets): the
             worker copies its packets (the bytes at start/length, not the
             whole slots) from the stage into its slots itself, and the
             packets it leaves back (the rest of each slot of the batch
             stays as it was).

Updates follow RCU (the order is documented at ``Dataplane._publish``): a
configure applies the same delta as Router.configure; new route entries,
rows and records are written where no worker reaches them, the snapshot is
published, and after a grace period the LPMs change in place (one atomic
store per entry a reader can see; freed groups wait in limbo); the entries
the change retired are then marked dead, lose the FIB's reference, and after
every online worker has passed a quiescent state (between two batches, or
while idle/offline) they are reclaimed: zeroed, their generation bumped,
reused later.  In refcount mode an entry whose count has not fallen to zero
stays retired until it does.
"""
from __future__ import annotations

import itertools
import json
import mmap
import os
import pickle
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from functools import lru_cache
from multiprocessing import resource_tracker, shared_memory
from multiprocessing.connection import Connection

import numpy as np

from . import _datapath, _rss
from .batch import KERNEL_FIELDS, LINKTYPES, Batch
from .config import State
from .reasons import REASON_IDS, REASON_NAMES
from .router import (MODES, USE_STATS, _check_gateways, apply_config, fragment_batch, gc_paused,
                     load_kwargs, prepare_batch)
from .tables import (DEV_DTYPE, DST_DTYPE, PCPU_DTYPE, Tables, apply_lpm, compile_tables, reserve_lpm,
                     same_load_key)

__all__ = ["Dataplane", "DataplaneError"]

LINE = 64                       # bytes per cache line
W_CTL = LINE // 8               # uint64 words per line
# shared control words (indexes into the uint64 control array)
# C_SEQ: bumped at each publication (a new snapshot, or LPMs changed in
# place: route caches to flush); C_SNAP: the number of the newest snapshot
C_MAGIC, C_NWORKERS, C_MAXDST, C_SEQ, C_STOP, C_SNAP = 0, 1, 2, 3, 4, 5
C_TOKEN = W_CTL                 # the QSBR token, on its own line
C_WORKERS = 2 * W_CTL           # first worker line
# per-worker words (offsets in the worker's line)
Q_CNT, Q_PID, Q_BATCHES, Q_PACKETS, Q_INFLIGHT, Q_SEQ, Q_PHASE = 0, 1, 2, 3, 4, 5, 6
# Q_PHASE of a worker in Dataplane.process: its rows are being read and
# processed (1; the batch is untouched) or copied back, the results complete
# in its io segment (2); 0 between batches
PH_IDLE, PH_RUN, PH_BACK = 0, 1, 2
NO_WORKER = 0xFFFF               # owner of a packet no worker is to take (this round)
MAGIC = 0x66617374_70617468    # "fastpath"


class _Proc:
    """A worker process (subprocess.Popen) with the few calls used here."""

    def __init__(self, popen):
        self.popen = popen
        self.pid = popen.pid

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def exitcode(self):
        return self.popen.poll()

    def join(self, timeout=None):
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def kill(self):
        if self.is_alive():
            self.popen.kill()


class DataplaneError(RuntimeError):
    """A worker failed to start, died at the wrong moment, or a grace period stalled."""


def _align(n: int, a: int = 4096) -> int:
    return (n + a - 1) // a * a


def _core_layout(nworkers: int, max_dsts: int):
    """Offsets in the core segment: control lines, route entries, their
    fast-path words (Tables.dfast), then each worker's per-route copies."""
    ctl = LINE * (2 + nworkers)
    dsts = _align(ctl)
    dfast = _align(dsts + 64 * max_dsts)
    pcpu = _align(dfast + 4 * max_dsts)
    stride = _align(16 * max_dsts, LINE)
    return ctl, dsts, dfast, pcpu, stride, pcpu + stride * nworkers


def _packet_fields(cap: int) -> list:
    """A batch's per-packet fields, as (name, dtype, shape) for ``cap`` packets."""
    return [("start", np.int32, (cap,)), ("length", np.int32, (cap,)), ("l2len", np.uint16, (cap,)),
            ("iif", np.uint32, (cap,)), ("oif", np.uint32, (cap,)),
            ("nexthop", np.uint8, (cap, 16)), ("verdict", np.uint8, (cap,)),
            ("reason", np.uint16, (cap,)), ("dst", np.uint32, (cap,)),
            ("timestamp_ns", np.int64, (cap,))]


def _lay_out(fields) -> tuple:
    """(name, dtype, shape, offset) per field, each on its own cache lines,
    and the total size."""
    out, off = [], 0
    for name, dt, shape in fields:
        out.append((name, dt, shape, off))
        off = _align(off + int(np.prod(shape)) * np.dtype(dt).itemsize, LINE)
    return out, off


@lru_cache(maxsize=64)             # computed once per shape (numpy calls: ~75 us)
def _io_layout(cap: int, slot: int):
    """Offsets of the arrays of an io segment (data first, then metadata)."""
    return _lay_out([("data", np.uint8, (cap, slot)), ("idx", np.int64, (cap,))] + _packet_fields(cap))


@lru_cache(maxsize=64)             # computed once per shape (numpy calls: ~75 us)
def _meta_layout(cap: int):
    """Offsets of the arrays of the meta segment: a batch's per-packet
    fields (in and out) and the worker of each packet (``owner``)."""
    return _lay_out([("owner", np.uint16, (cap,))] + _packet_fields(cap))


_IN = ("start", "length", "l2len", "iif", "timestamp_ns")          # to the datapath
_OUT = ("start", "length", "l2len", "oif", "verdict", "reason", "dst")   # from it (+ data, nexthop)


# (weakref of a batch_buffer array alive when its Dataplane closed, its
# SharedMemory): unlinked already, closed (unmapped) once the array is gone
_ORPHANS: list = []


def _reap_orphans():
    keep = []
    for ref, shm in _ORPHANS:
        if ref() is None:
            try:
                shm.close()
                continue
            except BufferError:
                pass
        keep.append((ref, shm))
    _ORPHANS[:] = keep


def _views(buf, layout):
    return {name: np.ndarray(shape, dtype=dt, buffer=buf, offset=off)
            for name, dt, shape, off in layout}


class _Mapped:
    """A segment mapped by name from /dev/shm, not tracked (workers)."""

    def __init__(self, name: str):
        fd = os.open(f"/dev/shm/{name}", os.O_RDWR)
        try:
            self.buf = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------
# the arena: the big tables, in shared memory, updated in place
# ---------------------------------------------------------------------------

class _Arena:
    """Shared-memory arrays for the tables workers read while the control
    plane updates them in place: the LPMs (``tbl24``, ``groups``), the
    nexthop rows, seg6local records and SRH templates (Tables.alloc).  One
    segment per array; an array that grows gets a new segment (the old one
    is unlinked once no published snapshot names it, see
    Dataplane._publish).  Segments are files in /dev/shm mapped here and in
    the workers; registered with multiprocessing's resource tracker, so a
    control process that is killed does not leave them behind."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.count = itertools.count()
        self.segs = {}                  # name -> (address, size, mmap)

    def __call__(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        size = max(int(np.prod(shape)) * dtype.itemsize, 1)
        name = f"{self.prefix}a{next(self.count)}"
        fd = os.open(f"/dev/shm/{name}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)            # sparse: untouched pages cost nothing
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        resource_tracker.register("/" + name, "shared_memory")
        a = np.ndarray(shape, dtype=dtype, buffer=mm)
        self.segs[name] = (a.ctypes.data, size, mm)
        return a

    def ref(self, a: np.ndarray) -> tuple:
        """(segment, offset, dtype, shape) of an array inside a segment."""
        p = a.ctypes.data
        for name, (base, size, _) in self.segs.items():
            if base <= p and p + a.nbytes <= base + size:
                return (name, p - base, a.dtype.str, a.shape)
        raise ValueError("array not in the arena")

    def unlink(self, name: str) -> None:
        """Remove a segment's name (mappings, here and in workers, stay
        valid until dropped)."""
        if self.segs.pop(name, None) is None:
            return
        try:
            os.unlink(f"/dev/shm/{name}")
        except FileNotFoundError:
            pass
        resource_tracker.unregister("/" + name, "shared_memory")

    def close(self) -> None:
        for name in list(self.segs):
            self.unlink(name)


# ---------------------------------------------------------------------------
# snapshots: the small tables, copied per configuration; the big ones named
# ---------------------------------------------------------------------------

# the arrays a snapshot copies (small: devices, addresses, neighbours,
# rules, HMAC keys) and those it names in the arena (updated in place)
_COPIED = ("devs", "addrs", "neighs", "rules6", "rules4", "hmac_keys")
_NAMED = ("nhs", "s6l", "srh_blob", "s6l_gen")


def _snapshot_arrays(t: Tables):
    """(copied arrays, named arrays): (name, array) pairs of a snapshot."""
    _, nhs, devs, addrs, neighs, r6, r4, lpm6, lpm4, s6l, blob, keys = t.arrays()
    copied = list(zip(_COPIED, (devs, addrs, neighs, r6, r4, keys)))
    named = list(zip(_NAMED, (nhs, s6l, blob, t.s6l_gen[:len(s6l)])))
    for fam, lst in ((6, lpm6), (4, lpm4)):
        for k, (t24, grp) in enumerate(lst):
            named.append((f"lpm{fam}_{k}_tbl24", t24))
            named.append((f"lpm{fam}_{k}_groups", grp))
    return copied, named, [len(lpm6), len(lpm4)]


def _write_snapshot(name: str, t: Tables, arena: _Arena, kwargs: dict, ifindex: dict,
                    ifnames: dict):
    """A snapshot segment: the small tables copied, the big ones by
    reference into the arena.  Returns (SharedMemory, arena segments
    named)."""
    copied, named, nlpm = _snapshot_arrays(t)
    refs = {aname: arena.ref(a) for aname, a in named}
    layout, off = [], 0
    for aname, a in copied:
        layout.append((aname, a.dtype.str, a.shape, off))
        off = _align(off + a.nbytes, LINE)
    meta = pickle.dumps({"layout": layout, "refs": refs, "nlpm": nlpm, "kwargs": kwargs,
                         "ifindex": ifindex, "ifnames": ifnames})
    base = _align(8 + len(meta), LINE)
    shm = shared_memory.SharedMemory(name=name, create=True, size=max(base + off, 4096))
    buf = shm.buf
    buf[:8] = len(meta).to_bytes(8, "little")
    buf[8:8 + len(meta)] = meta
    for (aname, a), (_, _, shape, aoff) in zip(copied, layout):
        np.ndarray(a.shape, dtype=a.dtype, buffer=buf, offset=base + aoff)[...] = a
    del buf
    return shm, {r[0] for r in refs.values()}


def _read_snapshot(buf, segment):
    """The arrays of a snapshot: copied ones in ``buf``, named ones in the
    arena segments ``segment(name)`` maps (a buffer)."""
    n = int.from_bytes(buf[:8], "little")
    meta = pickle.loads(bytes(buf[8:8 + n]))
    base = _align(8 + n, LINE)
    arr = {aname: np.ndarray(shape, dtype=np.dtype(dt), buffer=buf, offset=base + off)
           for aname, dt, shape, off in meta["layout"]}
    for aname, (seg, off, dt, shape) in meta["refs"].items():
        arr[aname] = np.ndarray(shape, dtype=np.dtype(dt), buffer=segment(seg), offset=off)
    n6, n4 = meta["nlpm"]
    lpm6 = [(arr[f"lpm6_{k}_tbl24"], arr[f"lpm6_{k}_groups"]) for k in range(n6)]
    lpm4 = [(arr[f"lpm4_{k}_tbl24"], arr[f"lpm4_{k}_groups"]) for k in range(n4)]
    return arr, lpm6, lpm4, meta


# ---------------------------------------------------------------------------
# the worker
# ---------------------------------------------------------------------------

def _run_of(idx, n):
    """The first row when the ``n`` rows ``idx`` are consecutive (one
    worker's rows are when RSS gives it all of a batch, or a run of it),
    else -1: their fields then move as slices, not through an index."""
    if n == 0:
        return -1
    a = int(idx[0])
    return a if int(idx[n - 1]) - a == n - 1 else -1


def worker_env() -> dict:
    """The environment of a worker process: this one's, with numpy's BLAS
    kept to the calling thread.  A worker does no linear algebra, but
    OpenBLAS starts a thread per CPU when numpy is imported, and they spin
    for ~0.1 s: a worker here had 2 threads and used 0.20-0.26 s of CPU to
    start, now 1 and 0.14-0.16 s, and on a 64-CPU machine each worker would
    start 63 threads spinning on the CPUs the other workers forward on."""
    env = dict(os.environ)
    for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(k, "1")
    return env


def _copy_back(v, n, idx, data, mv):
    """A worker's results (its io views ``v``, ``n`` rows, batch rows
    ``idx``) into the batch's data and meta views (run by the worker, or by
    the control plane for a worker that died while doing it).  Of each
    row, the packet the datapath left (``start``, ``length``) only: the
    bytes of the slot around it stay the batch's own."""
    _rss.put_spans(v["data"][:n], idx, v["start"][:n], v["length"][:n], data)
    a = _run_of(idx, n)
    if a >= 0:
        mv["nexthop"][a:a + n] = v["nexthop"][:n]
        for f in _OUT:
            mv[f][a:a + n] = v[f][:n]
        return
    _rss.put_rows(v["nexthop"][:n], idx, mv["nexthop"])
    _rss.move_fields(tuple(v[f] for f in _OUT), tuple(mv[f] for f in _OUT), idx, n, False)


class _Worker:
    """State of one worker process (runs in the child)."""

    def __init__(self, prefix, w, nworkers, max_dsts, mode, use_stats, check_gen):
        self.prefix, self.w = prefix, w
        self.core = _Mapped(prefix + "core")
        ctl, dsts_off, dfast_off, pcpu_off, stride, _ = _core_layout(nworkers, max_dsts)
        self.ctl = np.ndarray(ctl // 8, dtype=np.uint64, buffer=self.core.buf)
        self.dsts = np.ndarray((max_dsts, 64), dtype=np.uint8, buffer=self.core.buf, offset=dsts_off)
        self.dfast = np.ndarray(max_dsts, dtype=np.uint32, buffer=self.core.buf, offset=dfast_off)
        self.pcpu = np.ndarray((max_dsts, 16), dtype=np.uint8, buffer=self.core.buf,
                               offset=pcpu_off + stride * w)
        self.line = C_WORKERS + W_CTL * w
        self.dp = _datapath.Datapath()
        self.dp.set_mode(mode, use_stats, pcpu=self.pcpu, check_gen=check_gen)
        self.check_gen = check_gen
        self.seq = 0
        self.snap = None
        self.snap_no = 0
        self.segs = {}                  # arena segment -> its mapping
        self.s6l_gen = np.zeros(0, dtype=np.uint32)
        self.ifindex = {}
        self.io = {}
        self.stage = {}
        self.stage_epoch = 0
        self.meta = {}

    # QSBR (rte_rcu_qsbr_thread_online / _offline / _quiescent)
    def online(self):
        _datapath.atomic_store64(self.ctl, self.line + Q_CNT,
                                 _datapath.atomic_load64(self.ctl, C_TOKEN), fence=True)
        self.reload()

    def offline(self):
        _datapath.atomic_store64(self.ctl, self.line + Q_CNT, 0)

    def quiescent(self):
        _datapath.atomic_store64(self.ctl, self.line + Q_CNT,
                                 _datapath.atomic_load64(self.ctl, C_TOKEN))

    def reload(self):
        """After a publication (online only): switch to the newest snapshot
        if there is one, else empty the route caches (the LPMs changed in
        place under them)."""
        seq = int(_datapath.atomic_load64(self.ctl, C_SEQ))
        if seq == self.seq:
            return
        no = int(_datapath.atomic_load64(self.ctl, C_SNAP))
        if no == self.snap_no:
            self.dp.flush_route_caches()
        else:
            snap = _Mapped(f"{self.prefix}snap{no}")
            arr, lpm6, lpm4, meta = _read_snapshot(snap.buf, self._segment)
            self.dp.load(self.dsts, arr["nhs"], arr["devs"], arr["addrs"], arr["neighs"],
                         arr["rules6"], arr["rules4"], lpm6, lpm4, arr["s6l"], arr["srh_blob"],
                         arr["hmac_keys"], dfast=self.dfast, **meta["kwargs"])
            # counters of seg6local indexes given back since the last load
            # start again from zero (before any packet uses the new record)
            gen = arr["s6l_gen"]
            m = min(len(gen), len(self.s6l_gen))
            changed = np.flatnonzero(gen[:m] != self.s6l_gen[:m])
            if len(changed):
                self.dp.clear_seg6local_counters(changed.tolist())
            self.s6l_gen = gen.copy()
            self.snap, self.snap_no, self.ifindex = snap, no, meta["ifindex"]
            self.ifnames, self.devs = meta["ifnames"], arr["devs"]
            named = {r[0] for r in meta["refs"].values()}
            self.segs = {k: v for k, v in self.segs.items() if k in named}
        self.seq = seq
        self.ctl[self.line + Q_SEQ] = seq

    def _segment(self, name):
        """An arena segment's mapping (kept while snapshots name it)."""
        seg = self.segs.get(name)
        if seg is None:
            seg = self.segs[name] = _Mapped(name)
        return seg.buf

    def _io_views(self, name, cap, slot):
        ent = self.io.get(name)
        if ent is None or ent[1] != (cap, slot):
            if ent is None:
                # the parent replaced this worker's io segment (it grew):
                # the old mapping goes (it has been unlinked already)
                for seg, _, _ in self.io.values():
                    try:
                        seg.buf.close()
                    except BufferError:
                        pass
                self.io = {}
                seg = _Mapped(name)
            else:
                seg = ent[0]
            layout, size = _io_layout(cap, slot)
            if size > len(seg.buf):
                raise ValueError(f"io segment {name} is too small for {cap} slots of {slot} bytes")
            self.io[name] = ent = (seg, (cap, slot), _views(seg.buf, layout))
        return ent[2]

    def _stage_seg(self, name, epoch):
        if epoch != self.stage_epoch:
            # the control plane unlinked stage segments: drop the mappings
            for seg in self.stage.values():
                try:
                    seg.buf.close()
                except BufferError:
                    pass
            self.stage, self.stage_epoch = {}, epoch
        seg = self.stage.get(name)
        if seg is None:
            seg = self.stage[name] = _Mapped(name)
        return seg

    def process_io(self, name, cap, slot, n, linktype, stage, stage_off, nrows, meta, mcap, epoch,
                   chunk):
        """This worker's packets of a batch: the rows whose ``owner`` is
        this worker, copied from the stage (data) and the meta segment
        into its io segment, processed there, copied back."""
        v = self._io_views(name, cap, slot)
        seg = self._stage_seg(stage, epoch)
        data = np.ndarray((nrows, slot), np.uint8, buffer=seg.buf, offset=stage_off)
        mseg = self._stage_seg(meta, epoch)
        if mcap < nrows:
            raise ValueError("meta segment smaller than the batch")
        mv = self.meta.get((meta, mcap))
        if mv is None:
            self.meta = {(meta, mcap): _views(mseg.buf, _meta_layout(mcap)[0])}
            mv = self.meta[(meta, mcap)]
        idx = v["idx"][:n]
        if _rss.own_rows(mv["owner"][:nrows], self.w, idx) != n:
            raise ValueError("the batch does not give this worker the packets announced")
        line = self.line
        self.ctl[line + Q_INFLIGHT] = n
        self.ctl[line + Q_PHASE] = PH_RUN
        a = _run_of(idx, n)
        if a >= 0:
            for f in _IN:
                v[f][:n] = mv[f][a:a + n]
        else:
            _rss.move_fields(tuple(mv[f][:nrows] for f in _IN), tuple(v[f] for f in _IN), idx, n,
                             True)
        # the packets only, not whole slots (a 94-byte frame in a 320-byte
        # slot: a third of the bytes each way; the worker's CPU per End
        # packet fell by about a third): the datapath reads nothing of a
        # slot but its packet (tests/test_dataplane.py runs every scenario
        # over io segments full of other bytes), and what it leaves is the
        # packet at start/length, the one _copy_back copies
        _rss.take_spans(data, idx, v["start"][:n], v["length"][:n], v["data"][:n])
        step = chunk or n
        for a in range(0, n, step):
            sl = slice(a, min(n, a + step))
            self.dp.process(*[v[f][sl] for f in KERNEL_FIELDS], linktype, v["timestamp_ns"][sl])
        self.ctl[line + Q_PHASE] = PH_BACK
        _copy_back(v, n, idx, data, mv)
        self.ctl[line + Q_PHASE] = PH_IDLE
        self.ctl[line + Q_INFLIGHT] = 0
        self.ctl[line + Q_BATCHES] += 1
        self.ctl[line + Q_PACKETS] += n

    def bench(self, frames, iif, linktype, duration, start_at, rate=0.0, ring=0, batch=0):
        pool = Batch.from_packets(frames, iif=iif, linktype=linktype)
        pool.iif[:] = self.ifindex[iif]
        pool.iif_names = None
        b = pool[:batch].copy() if 0 < batch < len(pool) else pool.copy()
        lt = LINKTYPES[linktype]
        args = b.kernel_arrays()
        used = min(b.slot, int((pool.start + pool.length).max()) + 64)
        saved = (pool.data[:, :used].copy(), pool.start.copy(), pool.length.copy())
        del pool
        self.dp.process(*args, lt)                         # warm up: caches, page faults
        b.data[:, :used], b.start[...], b.length[...] = saved[0][:len(b)], saved[1][:len(b)], saved[2][:len(b)]
        self.dp.reset_counters()
        while time.monotonic() < start_at:
            time.sleep(min(0.001, max(0.0, start_at - time.monotonic())))
        end = start_at + duration
        npk = nb = offered = lost = 0
        busy = 0.0
        t0 = time.monotonic()
        self.ctl[self.line + Q_INFLIGHT] = len(b)
        while True:
            left = end - time.monotonic()
            if left <= 0:
                break
            self.quiescent()
            p, k, s, early, o, lo = self.dp.run_loop(
                *args, lt, saved[0], saved[1], saved[2], used, left, self.ctl, self.line + Q_CNT,
                C_TOKEN, C_SEQ, self.seq, C_STOP, self.line + Q_BATCHES, rate, ring)
            npk += p
            nb += k
            busy += s
            offered += o
            lost += lo
            if early:
                if self.ctl[C_STOP]:
                    break
                self.reload()
        wall = time.monotonic() - t0
        self.ctl[self.line + Q_INFLIGHT] = 0
        verdicts = np.bincount(b.verdict, minlength=5).tolist()
        return {"worker": self.w, "cpu": sorted(os.sched_getaffinity(0)), "packets": npk,
                "batches": nb, "busy_s": busy, "wall_s": wall, "verdicts": verdicts,
                "offered": offered, "lost": lost,
                "reasons": self.dp.reason_counts().tolist(), **self.dp.cache_counters()}

    def counters(self):
        return {"reasons": self.dp.reason_counts(), "s6l": self.dp.seg6local_counters(),
                "cpu_s": time.process_time(), **self.dp.cache_counters()}


def _worker_main(prefix, w, nworkers, max_dsts, cpu, mode, use_stats, check_gen, conn):
    """A worker's life: map the tables, answer commands until told to stop
    or the control plane goes away (its end of the socket closes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent stops us
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        wk = _Worker(prefix, w, nworkers, max_dsts, mode, use_stats, check_gen)
        wk.ctl[wk.line + Q_PID] = os.getpid()
        wk.online()
        wk.offline()
        conn.send(("ready", os.getpid()))
    except Exception as e:                            # report, don't hang the parent
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    while True:
        try:
            msg = conn.recv()                         # idle: offline for QSBR
        except (EOFError, OSError):
            return                                    # the parent is gone
        cmd = msg[0]
        if cmd == "stop":
            return
        wk.online()
        try:
            if cmd == "process":
                wk.process_io(*msg[1:])
                reply = ("ok",)
            elif cmd == "bench":
                reply = ("ok", wk.bench(*msg[1:]))
            elif cmd == "counters":
                reply = ("ok", wk.counters())
            elif cmd == "mode":
                wk.dp.set_mode(msg[1], msg[2], check_gen=wk.check_gen)
                reply = ("ok",)
            elif cmd == "reset":
                wk.dp.reset_counters()
                reply = ("ok",)
            elif cmd == "sleep":                      # tests: stay online, busy
                time.sleep(msg[1])
                reply = ("ok",)
            else:
                reply = ("error", f"unknown command {cmd!r}")
        except Exception as e:
            reply = ("error", f"{type(e).__name__}: {e}")
        wk.offline()
        try:
            conn.send(reply)
        except (EOFError, OSError, BrokenPipeError):
            return


# ---------------------------------------------------------------------------
# the control plane
# ---------------------------------------------------------------------------

class Dataplane:
    """N worker processes over shared tables (see the module docstring).

    ``config``: iproute2/sysctl text (or a State).  ``workers``: number of
    processes.  ``cpus``: CPUs to pin them to (default: chosen by
    ``placement``, "one-socket" or "spread", from the CPU topology; no
    pinning when the machine has fewer CPUs than workers and
    ``oversubscribe`` is set; ``pin=False``: none at all, the scheduler
    places them, for when this process needs the same CPUs, as a replay's
    reader and writer do).  ``mode``: "noref" or "refcount";
    ``use_stats``: "lazy" or "shared".  ``queues``: RX queues (default one
    per worker) spread over the workers round robin; ``process`` steers
    each packet to a queue by its RSS (Toeplitz) hash.  ``max_routes``:
    capacity of the shared route entries.

    ``external=True``: no worker process is started; the ``workers`` slots
    are for processes the caller starts, each of which attaches with
    ``AttachedTables(dataplane.attach_args(), w)`` and reads the tables as
    the Dataplane's own workers do (QSBR included: grace periods wait for
    them).  ``alive(w)`` tells whether slot ``w``'s process still runs (a
    grace period stops waiting for a dead one); ``process`` and ``bench``
    are then not available (fastpath.wire.workers uses this).
    """

    def __init__(self, config="", workers: int = 2, cpus=None, mode: str = "noref",
                 use_stats: str = "lazy", queues: int | None = None, placement: str = "one-socket",
                 max_routes: int = 1 << 16, oversubscribe: bool = False, pin: bool = True,
                 check_gen: bool = False,
                 timeout: float = 60.0, external: bool = False, alive=None):
        if mode not in MODES + ("refcount-private",):
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if use_stats not in USE_STATS:
            raise ValueError(f"use_stats must be one of {USE_STATS}, not {use_stats!r}")
        if not isinstance(workers, int) or not 1 <= workers < NO_WORKER:
            raise ValueError(f"workers must be an integer from 1 to {NO_WORKER - 1}")
        if max_routes < 64 or max_routes > (1 << 23):
            raise ValueError("max_routes must be between 64 and 2**23")
        self.mode, self.use_stats, self.nworkers = mode, use_stats, workers
        self._external, self._alive = bool(external), alive
        self.queues = queues or workers
        if self.queues < 1:
            raise ValueError("queues must be positive")
        self.max_dsts = max_routes
        self.timeout = timeout
        self.events = []                  # what happened to workers (deaths, with what was in flight)
        self._segments = {}               # name -> SharedMemory we created
        self._io_views = {}               # io segment name -> ((cap, slot), its array views)
        self._io_seg = {}                 # worker -> (name, size) of its io segment
        # segment numbers: batch_buffer runs in a reader's thread too, and
        # next() on a count is atomic where ``+= 1`` is not
        self._seq = itertools.count(1)
        self._stage = []                  # [name, size, shm, weakref of the array handed out]
        self._stage_epoch = 0             # bumped when a stage segment is unlinked
        self._stage_lock = threading.Lock()
        self._meta_seg = None             # (name, capacity, views): the batch's fields, shared
        self._wreta = None                # ((queues, deaths), hash -> worker table)
        self._closed = False
        self._procs, self._conns = [], []
        self._dead = set()
        self._pending = []                # retired entries waiting for their references to drop
        self._snap_no = 0
        self._published = None            # Tables.load_key of the newest snapshot
        self._arena = None
        self._lock = threading.RLock()    # one configure at a time (a follower thread may call it)
        self.cpus = self._choose_cpus(workers, cpus, placement, oversubscribe)
        self.pinned = bool(pin)
        self.placement = placement if cpus is None else "explicit"
        self.prefix = f"fp{os.getpid()}_{secrets.token_hex(3)}_"
        try:
            self._create_core()
            self._arena = _Arena(self.prefix)
            self._tables = Tables(dsts=self._dsts, dfast=self._dfast, max_dsts=self.max_dsts,
                                  alloc=self._arena, defer=True)
            if isinstance(config, State):
                self.state = config.copy()            # ours to change in place
                _check_gateways(self.state)
                compile_tables(self.state, self._tables, defer_lpm=True)
            else:
                self.state = State()
                compile_tables(self.state, self._tables, defer_lpm=True)
                apply_config(self.state, self._tables, config or "", defer_lpm=True)
            self._publish()
            if not self._external:
                self._start_workers(check_gen)
        except BaseException:
            self.close()
            raise

    # -- set-up -------------------------------------------------------------
    @staticmethod
    def _choose_cpus(n, cpus, placement, oversubscribe):
        from . import topology
        return topology.place(topology.read_topology(), n, placement, cpus=cpus,
                              oversubscribe=oversubscribe)

    def _create(self, name, size):
        shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        self._segments[name] = shm
        return shm

    def _create_core(self):
        ctl, dsts_off, dfast_off, pcpu_off, stride, total = _core_layout(self.nworkers, self.max_dsts)
        shm = self._create(self.prefix + "core", total)
        self._ctl = np.ndarray(ctl // 8, dtype=np.uint64, buffer=shm.buf)
        self._ctl[:] = 0
        self._ctl[C_MAGIC] = MAGIC
        self._ctl[C_NWORKERS] = self.nworkers
        self._ctl[C_MAXDST] = self.max_dsts
        self._ctl[C_TOKEN] = 1
        raw = np.ndarray(self.max_dsts * 64, dtype=np.uint8, buffer=shm.buf, offset=dsts_off)
        self._dsts = raw.view(DST_DTYPE)
        self._dst_words = raw.view(np.int32)
        self._dfast = np.ndarray(self.max_dsts, dtype=np.uint32, buffer=shm.buf, offset=dfast_off)
        self._pcpu = [np.ndarray(self.max_dsts, dtype=PCPU_DTYPE, buffer=shm.buf,
                                 offset=pcpu_off + stride * w) for w in range(self.nworkers)]

    def _start_workers(self, check_gen):
        # Workers are fresh interpreters (python -m fastpath._worker), not
        # multiprocessing children: nothing of the caller's __main__ is
        # re-run, whatever script embeds the dataplane.
        for w in range(self.nworkers):
            parent, child = socket.socketpair()
            args = json.dumps([self.prefix, w, self.nworkers, self.max_dsts,
                               self.cpus[w] if self.pinned else None,
                               self.mode, self.use_stats, check_gen, child.fileno()])
            p = _Proc(subprocess.Popen([sys.executable, "-m", "fastpath._worker", args],
                                       pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL,
                                       env=worker_env()))
            child.close()
            self._procs.append(p)
            self._conns.append(Connection(parent.detach()))
        for w in range(self.nworkers):
            msg = self._recv(w, self.timeout)
            if msg[0] != "ready":
                raise DataplaneError(f"worker {w} failed to start: {msg[1]}")

    # -- configuration ------------------------------------------------------
    def follow_kernel(self, netns=None, **kw):
        """Follow a network namespace (None: this process's): imported now
        (replacing this configuration), then every rtnetlink change applied
        from a background thread; returns the started
        ``fastpath.kernel.follow.KernelFollower``.  Hold its ``lock`` around
        your own ``configure``/``process`` calls while it runs."""
        from .kernel.follow import KernelFollower
        return KernelFollower(self, netns, **kw)

    def _replace_state(self, state: State) -> "Dataplane":
        """The whole configuration replaced by ``state`` (a KernelFollower's
        resync, a reload of ``fastpath.run --workers``): compiled against
        the installed entries (what did not change keeps its entry) and
        published as any configure.  All or nothing: on an error
        (ConfigError, or ValueError for a route that cannot be installed or
        more new entries than are free) the tables are compiled back to the
        running state before anything was published, and it stays."""
        from .config import RouteTable
        self._check_open()
        with self._lock:
            if not isinstance(state.routes, RouteTable):
                state.routes = RouteTable(dict(state.routes))
            _check_gateways(state)
            try:
                with gc_paused():
                    compile_tables(state, self._tables, defer_lpm=True)
            except BaseException:
                # compile_tables raises before any route entry or LPM entry
                # changes: only the small tables need to be rebuilt
                with gc_paused():
                    compile_tables(self.state, self._tables, defer_lpm=True)
                raise
            self.state = state
            self._publish()
        return self

    def configure(self, text) -> "Dataplane":
        """Apply iproute2/sysctl lines (a string or an iterable of lines; all
        or nothing, as Router.configure) as a delta, update the shared
        tables in place while the workers forward, and reclaim what the
        change retired after a grace period (see _publish)."""
        self._check_open()
        with self._lock:
            apply_config(self.state, self._tables, text, defer_lpm=True)
            self._publish()
        return self

    def _publish(self):
        """Make the tables' changes visible to the workers, RCU style.

        Publication order (each step's stores are complete before the next
        step begins; every word a worker may be reading is written with one
        aligned store, so a lookup sees the old or the new value):

        1. (done by the caller, tables.update_tables with defer_lpm) the new
           route entries, their nexthop rows, seg6local records and SRH
           templates are written where no worker can reach them yet (free
           entries, pool rows past any snapshot's view or freed a grace
           period ago); the small tables (devices, addresses, neighbours,
           rules, strict rows) are rebuilt; the LPM changes are only listed
           (``lpm_pending``) and room is made for them here
           (reserve_lpm: a ``groups`` array that grows is a new segment).
        2. A new snapshot -- the small tables copied, the big ones named in
           the arena -- is published (C_SNAP, then C_SEQ, with a full
           fence) and a grace period waited for: every online worker has
           loaded it, so its per-load indexes (adjacencies of the new
           nexthop rows, seg6local records) cover the new entries.  Older
           snapshots and the arena segments only they named are unlinked.
        3. The LPMs are changed in place (tables.apply_lpm): a replaced
           prefix's entries are overwritten, a new group is complete before
           the entry that points to it, groups emptied go to limbo; no
           ``groups`` array may grow now (frozen).  From here lookups find
           the new entries.
        4. The retired entries are marked dead (fast-path word first) and
           lose the FIB's reference; C_SEQ is bumped again so that each
           worker empties its route caches at its next batch boundary; a
           second grace period; then the retired entries nobody holds are
           reclaimed (zeroed, generation bumped, rows and records freed)
           and the LPM groups in limbo become reusable.

        When nothing a snapshot holds or names changed (Tables.load_key:
        no small table, no array replaced, no nexthop row or seg6local
        record written -- a change of routes between existing nexthops),
        step 2 is left out: the workers' per-load state already covers the
        new entries, which only the LPM stores of step 3 make reachable.
        """
        t = self._tables
        reserve_lpm(t)
        key = t.load_key(self.state)
        if not same_load_key(key, self._published):
            self._publish_snapshot(t)
            self._published = key
        lpms = list(t.lpms.values())
        for lpm in lpms:
            lpm.frozen = True
        try:
            apply_lpm(t)
        finally:
            for lpm in lpms:
                lpm.frozen = False
        retired, t.retired = t.retired, []
        # unpublish what the tables no longer reach: dead, and the FIB's
        # reference dropped (a refcounted holder keeps it alive)
        t.mark_dead([e.dst for e in retired])
        for e in retired:
            _datapath.atomic_add32(self._dst_words, e.dst * 16, -1)
        self._pending.extend(retired)
        self._bump_seq()
        if self._procs or self._external:
            self.synchronize()
        for lpm in lpms:
            lpm.release_deferred()
        self._reclaim()

    def _publish_snapshot(self, t):
        """Step 2 of _publish: a new snapshot, published, a grace period,
        then the segments only older snapshots named are unlinked."""
        self._snap_no += 1
        name = f"{self.prefix}snap{self._snap_no}"
        shm, named = _write_snapshot(name, t, self._arena, load_kwargs(self.state, t),
                                     dict(t.ifindex), dict(t.ifnames))
        self._segments[name] = shm
        _datapath.atomic_store64(self._ctl, C_SNAP, self._snap_no)
        self._bump_seq()
        if self._procs or self._external:
            self.synchronize()
        # (by exact name: the stage segments' names begin with an "s" too,
        # and unlinking those under a batch in flight broke it)
        for old in [n for n in self._segments
                    if n.startswith(self.prefix + "snap") and n[len(self.prefix) + 4:].isdigit()
                    and n != name]:
            self._unlink(old)
        live = named | self._arena_live()
        for seg in [n for n in self._arena.segs if n not in live]:
            self._arena.unlink(seg)

    def _bump_seq(self):
        _datapath.atomic_store64(self._ctl, C_SEQ, int(self._ctl[C_SEQ]) + 1, fence=True)

    def _arena_live(self) -> set:
        """The arena segments of the arrays the tables hold now."""
        t = self._tables
        arrays = [t.nh_arr, t.s6l_arr, t.blob, t.s6l_gen]
        for lpm in t.lpms.values():
            arrays += [lpm.tbl24, lpm.groups]
        return {self._arena.ref(a)[0] for a in arrays}

    def _reclaim(self):
        """Free the retired entries nobody holds any more."""
        pending = self._pending
        if not pending:
            return
        online = [self._pcpu[w]["refcnt"] for w in range(self.nworkers) if w not in self._dead]
        if len(pending) <= 8:
            # (a few, a single change's: read one by one)
            held = [int(self._dsts["refcnt"][e.dst]) > 0 or any(int(c[e.dst]) for c in online)
                    for e in pending]
        else:
            # (the reference counts of all of them at once: a batch retires
            # hundreds, and a numpy scalar read per entry and worker was ~8%
            # of a 1000-route configure)
            idx = np.fromiter((e.dst for e in pending), dtype=np.int64, count=len(pending))
            h = self._dsts["refcnt"][idx] > 0
            for c in online:
                h |= c[idx] != 0
            held = h.tolist()
        keep, free = [], []
        for e, h in zip(pending, held):
            (keep if h else free).append(e)
        self._tables.reclaim(free)
        self._pending = keep

    def synchronize(self, timeout: float | None = None):
        """Wait for a grace period: every online worker passes a quiescent
        state (rte_rcu_qsbr_start + rte_rcu_qsbr_check).  Workers that die
        go offline (reported in ``events``); one alive that does not report
        within ``timeout`` raises DataplaneError (an RCU stall)."""
        timeout = self.timeout if timeout is None else timeout
        token = int(_datapath.atomic_load64(self._ctl, C_TOKEN)) + 1
        _datapath.atomic_store64(self._ctl, C_TOKEN, token, fence=True)
        deadline = time.monotonic() + timeout
        for w in range(self.nworkers):
            line = C_WORKERS + W_CTL * w
            pause = 20e-6
            while True:
                c = int(_datapath.atomic_load64(self._ctl, line + Q_CNT))
                if c == 0 or c >= token or w in self._dead:
                    break
                if self._external:
                    if self._alive is not None and not self._alive(w):
                        self.slot_offline(w)
                        break
                    who = f"attached worker {w}"
                else:
                    if not self._procs[w].is_alive():
                        self._worker_died(w)
                        break
                    who = f"worker {w} (pid {self._procs[w].pid})"
                if time.monotonic() > deadline:
                    raise DataplaneError(f"grace period stalled: {who} has not passed a "
                                         f"quiescent state in {timeout:g} s")
                time.sleep(pause)
                pause = min(pause * 2, 1e-3)
        return token

    # -- attached workers (external=True) ----------------------------------------
    def attach_args(self) -> dict:
        """What a process needs to attach to these tables (AttachedTables)."""
        return {"prefix": self.prefix, "nworkers": self.nworkers, "max_dsts": self.max_dsts,
                "mode": self.mode, "use_stats": self.use_stats}

    def slot_offline(self, w: int):
        """Slot ``w``'s process is gone (external workers): grace periods
        stop waiting for it until a new process attaches there."""
        _datapath.atomic_store64(self._ctl, C_WORKERS + W_CTL * w + Q_CNT, 0)

    # -- workers --------------------------------------------------------------
    def _worker_died(self, w):
        if w in self._dead:
            return
        self._dead.add(w)
        p = self._procs[w]
        p.join(0.1)
        line = C_WORKERS + W_CTL * w
        code = p.exitcode
        self.events.append({
            "worker": w, "pid": p.pid, "event": "died",
            "exit": (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
                     else f"exit code {code}"),
            "in_flight_packets": int(self._ctl[line + Q_INFLIGHT]),
            "batches_done": int(self._ctl[line + Q_BATCHES]),
            "packets_done": int(self._ctl[line + Q_PACKETS]),
        })
        self._ctl[line + Q_CNT] = 0                  # offline: grace periods don't wait for it

    def alive_workers(self):
        for w, p in enumerate(self._procs):
            if w not in self._dead and not p.is_alive():
                self._worker_died(w)
        return [w for w in range(self.nworkers) if w not in self._dead]

    def _recv(self, w, timeout):
        conn, p = self._conns[w], self._procs[w]
        deadline = time.monotonic() + timeout
        while not conn.poll(0.05):
            if not p.is_alive():
                self._worker_died(w)
                raise DataplaneError(f"worker {w} (pid {p.pid}) died: {self.events[-1]['exit']}")
            if time.monotonic() > deadline:
                raise DataplaneError(f"worker {w} did not answer within {timeout:g} s")
        try:
            return conn.recv()
        except (EOFError, OSError):
            self._procs[w].join(1.0)
            self._worker_died(w)
            raise DataplaneError(f"worker {w} (pid {p.pid}) died: {self.events[-1]['exit']}") from None

    def _call(self, workers, msgs, timeout=None):
        """Send each worker its message, then collect the replies: {w: reply}
        for the workers that answered; dead ones are left out."""
        timeout = self.timeout if timeout is None else timeout
        sent = []
        for w, msg in zip(workers, msgs):
            try:
                self._conns[w].send(msg)
                sent.append(w)
            except (OSError, BrokenPipeError):
                self._worker_died(w)
        out = {}
        for w in sent:
            try:
                r = self._recv(w, timeout)
            except DataplaneError:
                continue
            if r[0] != "ok":
                raise DataplaneError(f"worker {w}: {r[1]}")
            out[w] = r[1] if len(r) > 1 else None
        return out

    # -- packets --------------------------------------------------------------
    def worker_of_queue(self, q: int) -> int:
        return q % self.nworkers

    def steer(self, batch: Batch) -> np.ndarray:
        """The worker of every packet: RSS hash -> RETA -> queue -> worker,
        re-steering a dead worker's queues to the live ones (as a driver
        reprogramming the redirection table).  The workers known to be
        alive: no waitpid per worker per batch; a death shows when its
        socket closes, in _call, and its packets are then steered again."""
        from . import rss
        h = rss.batch_hash(batch)
        key = (self.queues, len(self._dead))
        if self._wreta is None or self._wreta[0] != key:
            # hash -> worker in one table: RETA entry -> queue -> worker
            alive = [x for x in range(self.nworkers) if x not in self._dead]
            if not alive:
                raise DataplaneError("no worker left")
            remap = np.array([w if w in alive else alive[w % len(alive)]
                              for w in range(self.nworkers)], np.uint16)
            q = rss.default_reta(self.queues).astype(np.int64)
            self._wreta = (key, remap[q % self.nworkers])
        t = self._wreta[1]
        return t[h & np.uint32(len(t) - 1)]

    _STAGE_MIN = 1 << 21
    _STAGE_FREE_KEPT = 4

    def batch_buffer(self, shape) -> np.ndarray:
        """A ``uint8[rows, slot]`` array in shared memory, for the ``data``
        of a batch that will be processed here: ``process`` then hands the
        workers its rows where they lie, without copying the batch first.
        (``fastpath.pcap`` readers build their batches in these when the
        processor has this method.)  The buffer is reused once the array
        and every view of it are gone; a pool of segments, grown as needed:
        as many as batches are alive at once."""
        rows, slot = (int(x) for x in shape)
        if rows < 0 or slot < 0:
            raise ValueError("bad shape")
        need = max(1, rows * slot)
        with self._stage_lock:
            self._check_open()
            pick = None
            for ent in self._stage:
                if (ent[3] is None or ent[3]() is None) and ent[1] >= need and \
                        (pick is None or ent[1] < pick[1]):
                    pick = ent
            if pick is None:
                free = [e for e in self._stage if e[3] is None or e[3]() is None]
                if len(free) >= self._STAGE_FREE_KEPT:     # free but too small: make room
                    for e in free:
                        self._stage.remove(e)
                        self._unlink(e[0])
                    self._stage_epoch += 1
                size = max(self._STAGE_MIN, 1 << (need - 1).bit_length())
                name = f"{self.prefix}st{next(self._seq)}"
                pick = [name, size, self._create(name, size), None]
                self._stage.append(pick)
            arr = np.ndarray((rows, slot), np.uint8, buffer=pick[2].buf)
            pick[3] = weakref.ref(arr)
            return arr

    def _staged(self, data):
        """(stage segment name, byte offset) of an array that lies in a
        buffer of batch_buffer, else None."""
        base = data
        while isinstance(base.base, np.ndarray):
            base = base.base
        with self._stage_lock:
            for ent in self._stage:
                if ent[3] is not None and ent[3]() is base:
                    return (ent[0], data.__array_interface__["data"][0]
                            - base.__array_interface__["data"][0])
        return None

    def _io(self, w, n, slot):
        """Worker ``w``'s io segment, with room for ``n`` slots of ``slot``
        bytes, and its array views.  One segment per worker, reused batch
        after batch (its pages stay mapped: no page faults per batch); it
        is replaced by a larger one (the old one unlinked) only when a
        batch does not fit.  The views are laid out for ``cap`` = ``n``
        rounded up to a power of two (at least 256), so that batches of
        about the same size share one layout, on both sides."""
        cap = max(256, 1 << (int(n) - 1).bit_length())
        layout, size = _io_layout(cap, slot)
        cur = self._io_seg.get(w)
        if cur is None or cur[1] < size:
            if cur is not None:
                self._io_views.pop(cur[0], None)
                self._unlink(cur[0])
            name = f"{self.prefix}io{w}_{next(self._seq)}"
            size = max(size, 2 * cur[1]) if cur is not None else size
            self._create(name, size)
            cur = self._io_seg[w] = (name, size)
        name = cur[0]
        ent = self._io_views.get(name)
        if ent is None or ent[0] != (cap, slot):
            ent = self._io_views[name] = ((cap, slot), _views(self._segments[name].buf, layout))
        return name, cap, ent[1]

    def _meta(self, n):
        """The meta segment (shared by the workers) for a batch of ``n``
        packets: its name, capacity and views; replaced when too small."""
        cur = self._meta_seg
        if cur is None or cur[1] < n:
            cap = max(4096, 1 << (int(n) - 1).bit_length())
            if cur is not None:
                self._meta_seg = None
                self._unlink(cur[0])
                with self._stage_lock:           # batch_buffer bumps it too, in a reader thread
                    self._stage_epoch += 1
            name = f"{self.prefix}meta{next(self._seq)}"
            layout, size = _meta_layout(cap)
            cur = self._meta_seg = (name, cap, _views(self._create(name, size).buf, layout))
        return cur

    def process(self, batch: Batch, chunk: int | None = None) -> Batch:
        """Process a batch across the workers, in place, in order: each
        packet goes to the worker RSS picks.  A worker that dies meanwhile
        is reported in ``events`` and its packets are processed again by
        the others.

        The handoff (measured on a 2-vCPU VM, it cost more than the End
        datapath itself): this process hashes the packets (RSS), writes
        each one's worker and its fields into a shared meta segment with
        contiguous copies, and sends each worker one message; the workers
        run at once, each picking its own rows from the batch's data (in
        shared memory where the batch was built in ``batch_buffer``, else
        copied there whole first), processing them in its io segment
        (``chunk``: at most that many per datapath call) and copying the
        results back, while this process waits in ``select``.  A worker that
        dies while copying back (``Q_PHASE``) left complete results in its
        io segment: they are copied back for it."""
        self._check_own_workers("process")
        if chunk is not None and chunk < 1:
            raise ValueError("chunk must be >= 1")
        # (under the configure lock: a configure from another thread -- a
        # kernel follower's -- rebuilds the interface maps this reads)
        with self._lock:
            return self._process(batch, chunk)

    def _process(self, batch: Batch, chunk) -> Batch:
        t = self._tables
        prepare_batch(batch, t)
        n = len(batch)
        if not n:
            return batch
        lt = LINKTYPES[batch.linktype]
        staged = self._staged(batch.data)
        tmp = None
        if staged is None:               # one contiguous copy; the workers pick their rows
            tmp = self.batch_buffer(batch.data.shape)
            np.copyto(tmp, batch.data)
            staged = self._staged(tmp)
        stage, stage_off = staged
        data = batch.data if tmp is None else tmp
        mname, mcap, mv = self._meta(n)
        for f in _IN:
            np.copyto(mv[f][:n], getattr(batch, f))
        owner = mv["owner"][:n]
        owner[:] = self.steer(batch)
        while True:
            counts = np.bincount(owner, minlength=self.nworkers + 1)[:self.nworkers]
            ws, msgs, parts = [], [], {}
            for w in np.flatnonzero(counts).tolist():
                k = int(counts[w])
                name, cap, v = self._io(w, k, batch.slot)
                ws.append(w)
                msgs.append(("process", name, cap, batch.slot, k, lt, stage, stage_off, n, mname,
                             mcap, self._stage_epoch, chunk))
                parts[w] = (k, v)
            if not ws:
                break
            done = self._call(ws, msgs)
            redo = []
            for w in ws:
                if w in done:
                    continue
                k, v = parts[w]
                if int(self._ctl[C_WORKERS + W_CTL * w + Q_PHASE]) == PH_BACK:
                    _copy_back(v, k, v["idx"][:k], data, mv)     # it died copying back
                    continue
                redo.append(np.flatnonzero(owner == w))
            if not redo:
                break
            todo = np.concatenate(redo)
            again = self.steer(batch)[todo]       # the dead worker's packets to the others
            owner[:] = NO_WORKER
            owner[todo] = again
        for f in _OUT:
            np.copyto(getattr(batch, f), mv[f][:n])
        np.copyto(batch.nexthop, mv["nexthop"][:n])
        if tmp is not None:
            np.copyto(batch.data, tmp)
        frag = np.flatnonzero(batch.reason == REASON_IDS["fragmented"])
        if len(frag):
            fragment_batch(batch, t, frag)
        return batch

    def bench(self, frames, iif: str, linktype: str = "ethernet", duration: float = 1.0,
              workers=None, start_delay: float = 0.2, rate: float = 0.0, ring: int = 512,
              batch: int = 0):
        """Benchmark traffic: every worker (or those listed) loops over its
        own copy of ``frames`` (a batch) for ``duration`` seconds, starting
        together, reporting quiescent states between batches.  With
        ``batch`` smaller than the frames, they are a pool that the worker
        goes round ``batch`` packets at a time (many destinations with
        small batches).  ``rate`` > 0:
        each worker's RX ring of ``ring`` descriptors receives ``rate``
        packets per second (see Datapath.run_loop); 0: as fast as it goes.
        Returns the per-worker results (packets, batches, busy seconds,
        offered, lost, verdicts, reason counts)."""
        self._check_own_workers("bench")
        self._check_open()
        ws = list(range(self.nworkers)) if workers is None else list(workers)
        if iif not in self._tables.ifindex:
            raise ValueError(f"unknown ingress interface {iif!r}")
        start_at = time.monotonic() + start_delay + 0.01 * len(ws)
        msg = ("bench", list(frames), iif, linktype, duration, start_at, float(rate),
               int(ring) if rate else 0, int(batch))
        res = self._call(ws, [msg] * len(ws),
                         timeout=self.timeout + duration + start_delay)
        return [res[w] for w in ws if w in res]

    # -- counters -------------------------------------------------------------
    def counters(self) -> dict:
        """Counters summed over the live workers (as Router.counters), plus
        the route-cache counters, the workers' CPU time (``workers_cpu_s``)
        and their events."""
        self._check_own_workers("counters")
        ws = self.alive_workers()
        res = self._call(ws, [("counters",)] * len(ws))
        reasons = sum((r["reasons"] for r in res.values()), np.zeros(len(REASON_NAMES), np.uint64))
        routes = {}
        s6 = [r["s6l"] for r in res.values()]
        for k, route in enumerate(self._tables.s6l_routes):
            if route is not None and route.encap.count:
                tot = sum((a[k] for a in s6 if k < len(a)), np.zeros(3, np.uint64))
                routes[f"{route.prefix} table {route.table}"] = {
                    "packets": int(tot[0]), "bytes": int(tot[1]), "errors": int(tot[2])}
        return {"reasons": {REASON_NAMES[i]: int(c) for i, c in enumerate(reasons) if c},
                "routes": routes,
                "hold_fail": sum(r["hold_fail"] for r in res.values()),
                "gen_violations": sum(r["gen_violations"] for r in res.values()),
                "fast_packets": sum(r["fast_packets"] for r in res.values()),
                "workers_alive": len(ws),
                # CPU time of the live workers since they started (all their
                # threads): a replay takes the difference around its run
                "workers_cpu_s": sum(r["cpu_s"] for r in res.values()),
                "events": list(self.events)}

    def set_mode(self, mode: str, use_stats: str | None = None):
        """Switch every worker to another route-cache mode (and use-stats
        mode) between two commands, when no packet holds a reference:
        measurements of several modes can then alternate on the same
        workers and tables."""
        self._check_open()
        if mode not in MODES + ("refcount-private",):
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        use_stats = use_stats or self.use_stats
        if use_stats not in USE_STATS:
            raise ValueError(f"use_stats must be one of {USE_STATS}, not {use_stats!r}")
        ws = self.alive_workers()
        self._call(ws, [("mode", mode, use_stats)] * len(ws))
        self.mode, self.use_stats = mode, use_stats

    def reset_counters(self):
        ws = self.alive_workers()
        self._call(ws, [("reset",)] * len(ws))

    def refcounts(self) -> dict:
        """Reference counts now: {dst: count} of the entries whose count is
        not the FIB's single reference, and the workers' copies' counts that
        are not zero (all empty when no packet is in flight)."""
        shared = {int(i): int(self._dsts[i]["refcnt"]) for i in np.flatnonzero(self._dsts["refcnt"] != 1)
                  if int(self._dsts[i]["refcnt"]) != 0 or i in self._tables.dst_routes}
        per = {w: {int(i): int(self._pcpu[w][i]["refcnt"]) for i in np.flatnonzero(self._pcpu[w]["refcnt"])}
               for w in range(self.nworkers) if w not in self._dead}
        return {"shared": shared, "workers": {w: d for w, d in per.items() if d},
                "retired_pending": len(self._pending)}

    @property
    def dsts(self) -> np.ndarray:
        """The shared route entries (DST_DTYPE records, live view)."""
        return self._dsts

    @property
    def tables(self) -> Tables:
        return self._tables

    def worker_pids(self):
        return [p.pid for p in self._procs]

    # -- teardown ---------------------------------------------------------------
    def _check_open(self):
        if self._closed:
            raise DataplaneError("the dataplane is closed")

    def _check_own_workers(self, what):
        self._check_open()
        if self._external:
            raise DataplaneError(f"{what}: this dataplane's workers are attached processes "
                                 "(external=True), not its own")

    def _unlink(self, name):
        shm = self._segments.pop(name, None)
        if shm is None:
            return
        try:
            shm.close()
        except BufferError:
            pass                               # a view is still alive: the mapping goes with the process
        try:
            shm.unlink()
        except FileNotFoundError:
            pass

    def close(self):
        """Stop the workers and remove every shared-memory segment."""
        if self._closed:
            return
        self._closed = True
        ctl = getattr(self, "_ctl", None)
        if ctl is not None:
            ctl[C_STOP] = 1
        for w, (c, p) in enumerate(zip(self._conns, self._procs)):
            if p.is_alive():
                try:
                    c.send(("stop",))
                except (OSError, BrokenPipeError):
                    pass
        for p in self._procs:
            p.join(2.0)
            if p.is_alive():
                p.kill()
                p.join(2.0)
        for c in self._conns:
            c.close()
        self._ctl = self._dsts = self._dst_words = self._dfast = None
        self._pcpu = []
        self._io_views = {}
        self._io_seg = {}
        _reap_orphans()
        with self._stage_lock:
            for ent in self._stage:
                if ent[3] is not None and ent[3]() is not None:
                    # a batch_buffer array (a Batch's data) outlives the
                    # Dataplane: its name goes, its mapping stays until
                    # the array does (unmapped under it, a read of the
                    # batch would crash the process)
                    shm = self._segments.pop(ent[0], None)
                    if shm is not None:
                        try:
                            shm.unlink()
                        except FileNotFoundError:
                            pass
                        _ORPHANS.append((ent[3], shm))
        self._stage = []
        self._meta_seg = None
        for name in list(self._segments):
            self._unlink(name)
        if self._arena is not None:
            self._arena.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return (f"<Dataplane {self.nworkers} workers on CPUs {self.cpus}, mode {self.mode}, "
                f"use_stats {self.use_stats}, {self.queues} queues{', closed' if self._closed else ''}>")


class AttachedTables:
    """A process outside the Dataplane reading its tables, as the
    Dataplane's own workers do (``Dataplane(..., external=True)``): slot
    ``w`` of ``args`` (``Dataplane.attach_args()``).  The Router calls a
    packet loop needs: ``process(batch)`` (a quiescent state first, then
    the newest snapshot if one was published: the shared tables, updated in
    place between batches, RCU style), ``counters()``; ``offline()`` while
    it sleeps (a grace period does not wait for it then) and ``online()``
    after.  ``state``: what the caller keeps of the configuration (the
    datapath reads nothing of it)."""

    def __init__(self, args: dict, w: int, state=None):
        if not 0 <= w < args["nworkers"]:
            raise ValueError(f"slot {w} of {args['nworkers']}")
        self._wk = _Worker(args["prefix"], w, args["nworkers"], args["max_dsts"], args["mode"],
                           args["use_stats"], False)
        self._wk.ctl[self._wk.line + Q_PID] = os.getpid()
        self.state = state
        self.dsts = self._wk.dsts.reshape(-1).view(DST_DTYPE)
        self._wk.online()

    @property
    def ifindex(self) -> dict:
        return self._wk.ifindex

    @property
    def ifnames(self) -> dict:
        return self._wk.ifnames

    @property
    def devs(self):
        # (a snapshot keeps its arrays as raw records: the field names back)
        return np.ascontiguousarray(self._wk.devs).reshape(-1).view(DEV_DTYPE)

    def online(self):
        self._wk.online()

    def offline(self):
        self._wk.offline()

    def process(self, batch: Batch) -> Batch:
        wk = self._wk
        wk.quiescent()
        wk.reload()
        prepare_batch(batch, self)
        if not len(batch):
            return batch
        ctl, line = wk.ctl, wk.line
        ctl[line + Q_INFLIGHT] = len(batch)
        nfrag = wk.dp.process(*batch.kernel_arrays(), LINKTYPES[batch.linktype],
                              batch.timestamp_ns)
        ctl[line + Q_INFLIGHT] = 0
        ctl[line + Q_BATCHES] += 1
        ctl[line + Q_PACKETS] += len(batch)
        if nfrag:
            fragment_batch(batch, self, np.flatnonzero(batch.reason == REASON_IDS["fragmented"]))
        return batch

    def counters(self) -> dict:
        counts = self._wk.dp.reason_counts()
        return {"reasons": {REASON_NAMES[i]: int(c) for i, c in enumerate(counts) if c}}

    def close(self):
        self._wk.offline()


def sweep_stale_segments(shm_dir="/dev/shm") -> list:
    """Remove the shared-memory segments of Dataplanes whose process is
    gone (``fp<pid>_<hex>_*``; a SIGKILL leaves them).  Returns the names
    removed."""
    import re
    gone = []
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return gone
    pat = re.compile(r"fp(\d+)_[0-9a-f]{6}_")
    dead = {}
    for n in names:
        m = pat.match(n)
        if m is None:
            continue
        pid = int(m[1])
        if pid not in dead:
            try:
                os.kill(pid, 0)
                dead[pid] = False
            except ProcessLookupError:
                dead[pid] = True
            except PermissionError:
                dead[pid] = False
        if dead[pid]:
            try:
                os.unlink(os.path.join(shm_dir, n))
                gone.append(n)
            except OSError:
                pass
    return gone


def worker_entry(argv) -> int:
    """``python -m fastpath._worker ARGS``: the process Dataplane starts."""
    a = json.loads(argv[0])
    _worker_main(*a[:8], Connection(a[8]))
    return 0

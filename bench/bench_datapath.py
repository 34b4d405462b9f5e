"""pytest-benchmark suites of the datapath: ``pytest bench/ --benchmark-only``.

Groups (each compares, side by side, what a developer would weigh):

* ``mode-<behavior>``: refcount vs noref (and refcount with every atomic on
  private lines), one process, 256-packet batches, 1k-route FIB;
* ``mode-2w-<behavior>``: the same with two worker processes at once
  (``Dataplane.bench``), where refcount's shared lines bounce;
* ``use-stats``, ``use-stats-2w``: lazy vs shared ``__use`` updates (End, one
  process, and two workers);
* ``batch-size``: End with batches of 32..1024 packets;
* ``fib-size``: End and IPv6 forwarding on 1k vs 100k-route tables;
* ``baseline-End``: fastpath against a pure-Python scapy End on the same
  packets (the seeds' "what would Python do");
* ``fast-<behavior>``: the fast path against the general path alone
  (``Router.fast = False``), same packets, same results.

pytest-benchmark's columns are per call; each benchmark records ``ns_per_packet``
and ``mpps`` in ``extra_info`` (bench/conftest.py prints them after the run).
Compare commits with ``--benchmark-autosave`` / ``--benchmark-compare``.
"""
from __future__ import annotations

import numpy as np
import pytest

from fastpath import Batch, Dataplane, Router
from fastpath.scenarios import SCENARIOS

BEHAVIORS = ["End", "End.X", "End.T", "End.DX4", "End.DT4", "End.DX6", "End.DT6"]


def _setup(name, mode="noref", use_stats="lazy", fib=1000, batch=256, flows=256, fast=True):
    cfg, pkts, iif = SCENARIOS[name][1](fib, batch, flows, np.random.default_rng(1))
    r = Router(mode="noref" if mode == "refcount-private" else mode, use_stats=use_stats)
    r.fast = fast
    if mode == "refcount-private":
        r._dp.set_mode(mode, use_stats)
    r.configure(cfg)
    lt = "ethernet" if pkts[0][12:14] in (b"\x86\xdd", b"\x08\x00") else "raw"
    b = Batch.from_packets(pkts, iif=iif, linktype=lt)
    r.process(b)
    b = Batch.from_packets(pkts, iif=iif, linktype=lt)
    r.process(b.copy())
    used = min(b.slot, int((b.start + b.length).max()) + 64)
    saved = (b.data[:, :used].copy(), b.start.copy(), b.length.copy())
    return r, b, saved, used


def _bench_single(benchmark, group, name, rounds=3000, **kw):
    """Time Router.process on one batch per round; the batch's bytes are
    restored in pedantic's setup, outside the timed call."""
    r, b, saved, used = _setup(name, **kw)
    benchmark.group = group

    def restore():
        b.data[:, :used] = saved[0]
        b.start[...] = saved[1]
        b.length[...] = saved[2]

    benchmark.pedantic(r.process, args=(b,), setup=restore, rounds=rounds, iterations=1,
                       warmup_rounds=10)
    stats = getattr(benchmark, "stats", None)
    if stats is not None:
        ns = stats.stats.median * 1e9 / len(b)
        benchmark.extra_info["ns_per_packet"] = ns
        benchmark.extra_info["mpps"] = 1e3 / ns
    assert (b.verdict == 1).all(), np.bincount(b.reason)   # every packet forwarded


@pytest.mark.parametrize("mode", ["noref", "refcount", "refcount-private"])
@pytest.mark.parametrize("name", BEHAVIORS)
def test_mode_single_process(benchmark, name, mode):
    _bench_single(benchmark, f"mode-{name}", name, mode=mode)


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "general"])
@pytest.mark.parametrize("name", ["End", "End.X", "End.DX4", "End.DT4", "End.DT6", "ipv6-forward"])
def test_fast_path(benchmark, name, fast):
    _bench_single(benchmark, f"fast-{name}", name, fast=fast)


def _two_workers(benchmark, group, name, mode, use_stats="lazy"):
    cfg, pkts, iif = SCENARIOS[name][1](1000, 256, 256, np.random.default_rng(1))
    benchmark.group = group
    got = []
    with Dataplane(cfg, workers=2, mode=mode, use_stats=use_stats, oversubscribe=True) as dp:
        def run():
            res = dp.bench(pkts, iif, "ethernet", duration=0.2, start_delay=0.05)
            got.append(1e9 / sum(x["packets"] / x["busy_s"] for x in res))
        benchmark.pedantic(run, rounds=3, iterations=1)
    ns = float(np.median(got))
    benchmark.extra_info["ns_per_packet"] = ns
    benchmark.extra_info["mpps"] = 1e3 / ns
    benchmark.extra_info["note"] = "ns_per_packet of the two workers together"


@pytest.mark.parametrize("mode", ["noref", "refcount"])
@pytest.mark.parametrize("name", ["End", "End.DX4", "End.DT4"])
def test_two_workers(benchmark, name, mode):
    _two_workers(benchmark, f"mode-2w-{name}", name, mode)


@pytest.mark.parametrize("use_stats", ["lazy", "shared"])
def test_use_stats_two_workers(benchmark, use_stats):
    """seeds/003: __use written on the shared route by every lookup of both
    workers (shared) against counted per worker and flushed per tick (lazy)."""
    _two_workers(benchmark, "use-stats-2w", "End", "noref", use_stats)


@pytest.mark.parametrize("use_stats", ["lazy", "shared"])
def test_use_stats(benchmark, use_stats):
    _bench_single(benchmark, "use-stats", "End", use_stats=use_stats)


@pytest.mark.parametrize("batch", [32, 64, 256, 1024])
def test_batch_size(benchmark, batch):
    _bench_single(benchmark, "batch-size", "End", batch=batch, flows=min(batch, 256))


@pytest.mark.parametrize("fib", [1000, 100_000])
@pytest.mark.parametrize("name", ["End", "ipv6-forward"])
def test_fib_size(benchmark, name, fib):
    _bench_single(benchmark, "fib-size", name, fib=fib)


def test_baseline_fastpath_end(benchmark):
    _bench_single(benchmark, "baseline-End", "End")


def test_baseline_scapy_end(benchmark):
    """End in pure Python with scapy: parse, check SL, decrement it, copy the
    next segment into the DA, decrement the hop limit, rebuild the bytes.
    No FIB lookup at all: a lower bound on what Python costs."""
    scapy = pytest.importorskip("scapy.all")
    from scapy.layers.inet6 import IPv6, IPv6ExtHdrSegmentRouting
    from scapy.layers.l2 import Ether
    _, pkts, _ = SCENARIOS["End"][1](1000, 256, 256, np.random.default_rng(1))
    del scapy

    def end(frames):
        out = []
        for f in frames:
            e = Ether(f)
            ip = e[IPv6]
            srh = e[IPv6ExtHdrSegmentRouting]
            if srh.segleft == 0:
                continue
            srh.segleft -= 1
            ip.dst = srh.addresses[srh.segleft]
            ip.hlim -= 1
            out.append(bytes(e))
        return out

    benchmark.group = "baseline-End"
    got = []

    def run():
        import time
        t0 = time.perf_counter()
        res = end(pkts)
        got.append((time.perf_counter() - t0) / len(pkts) * 1e9)
        return res

    res = benchmark.pedantic(run, rounds=3, iterations=1)
    ns = float(np.median(got))
    benchmark.extra_info["ns_per_packet"] = ns
    benchmark.extra_info["mpps"] = 1e3 / ns
    assert len(res) == len(pkts)

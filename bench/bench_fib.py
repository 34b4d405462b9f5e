"""pytest-benchmark suite of the longest-prefix match: ``pytest bench/ --benchmark-only``.

Groups ``lookup-ipv6-1k``, ``lookup-ipv6-220k``, ``lookup-ipv4-1M``: in each,
fastpath's ``Lpm.lookup_batch`` over a batch of 1M addresses, against
``pytricia`` per address from Python (and ``Lpm.lookup`` per address, and for
IPv6 the compiled per-address ``lpm6_lookup``) on the first 100k of the same
addresses.  pytest-benchmark's columns are per call, so each benchmark also
puts ``ns_per_address`` (and the speed-up of ``lookup_batch``) in
``extra_info``; bench/conftest.py prints them side by side after the run.

The tables and addresses are those of ``python -m fastpath.bench_fib``
(Internet-shaped, fixed seeds), built once per module.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from fastpath import bench_fib as bf

WORKLOADS = {"ipv6-1k": (6, 1_000), "ipv6-220k": (6, 220_000), "ipv4-1M": (4, 1_000_000)}
BATCH = 1_000_000           # addresses per lookup_batch call
SAMPLE = 100_000            # addresses per call of the per-address benchmarks
#  (not fewer: a small sample keeps pytricia's nodes in the caches)


@dataclass
class Workload:
    name: str
    family: int
    lpm: object
    addrs: np.ndarray       # BATCH addresses (random stream)
    expect: np.ndarray      # lookup_batch's answers
    keys: list              # the first SAMPLE addresses as int / packed bytes
    pyt: object = None      # frozen pytricia trie of the same table, if installed
    batch_ns: float | None = None   # ns/address of lookup_batch, once measured

    @property
    def group(self) -> str:
        return f"lookup-{self.name}"


@pytest.fixture(scope="module", params=list(WORKLOADS))
def workload(request):
    family, n = WORKLOADS[request.param]
    table = bf.internet_table(family, n)
    lpm = bf.build_lpm(table)
    addrs, _ = bf.lookup_addresses(table, BATCH, "random")
    expect = lpm.lookup_batch(addrs)
    keys = bf.pytricia_keys(family, addrs[:SAMPLE])
    pyt = bf.build_pytricia(table) if bf.pytricia is not None else None
    return Workload(request.param, family, lpm, addrs, expect, keys, pyt)


def _per_address(benchmark, wl: Workload, count: int, is_batch: bool = False) -> None:
    """Record ns/address (and the speed-up of lookup_batch) in extra_info."""
    benchmark.extra_info["addresses"] = count
    stats = getattr(benchmark, "stats", None)
    if stats is None:            # benchmarks disabled: the function ran once
        return
    ns = stats.stats.median * 1e9 / count
    benchmark.extra_info["ns_per_address"] = ns
    if is_batch:
        wl.batch_ns = ns
    elif wl.batch_ns:
        benchmark.extra_info["speedup"] = ns / wl.batch_ns


def test_fastpath_lookup_batch(benchmark, workload):
    benchmark.group = workload.group
    out = np.empty(len(workload.addrs), dtype=np.uint32)
    benchmark(workload.lpm.lookup_batch, workload.addrs, out)
    _per_address(benchmark, workload, len(workload.addrs), is_batch=True)
    assert np.array_equal(out, workload.expect)


def test_pytricia_per_address(benchmark, workload):
    if workload.pyt is None:
        pytest.skip("pytricia is not installed (pip install pytricia)")
    benchmark.group = workload.group
    get = workload.pyt.get
    keys = workload.keys
    got = benchmark(lambda: list(map(get, keys)))
    _per_address(benchmark, workload, len(keys))
    ref = np.array([0 if v is None else v for v in got], dtype=np.uint32)
    assert np.array_equal(ref, workload.expect[:len(keys)])


def test_lpm_lookup_per_address(benchmark, workload):
    benchmark.group = workload.group
    lookup = workload.lpm.lookup
    keys = workload.keys
    got = benchmark(lambda: list(map(lookup, keys)))
    _per_address(benchmark, workload, len(keys))
    assert np.array_equal(np.asarray(got, dtype=np.uint32), workload.expect[:len(keys)])


def test_lpm6_lookup_compiled_per_address(benchmark, workload):
    simple = getattr(workload.lpm._core, "lookup6_batch_simple", None)
    if workload.family != 6 or simple is None:
        pytest.skip("IPv6 only (per-address lpm6_lookup of lpm.pxd)")
    benchmark.group = workload.group
    out = np.empty(len(workload.addrs), dtype=np.uint32)
    benchmark(simple, workload.addrs, out)
    _per_address(benchmark, workload, len(workload.addrs))
    assert np.array_equal(out, workload.expect)

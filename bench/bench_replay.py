"""pytest-benchmark suite of capture replay: ``pytest bench/ --benchmark-only``.

Group ``replay-end``: read a pcapng of 94-byte End frames (the "End"
scenario of ``fastpath/scenarios.py`` and its configuration), run End in
the datapath, write the output pcapng, with fastpath.pcap (``replay``) and,
on a smaller capture, with scapy's and dpkt's pcapng reader/writer around
the same Router (``pip install dpkt``; skipped without it).  Group
``replay-io``: fastpath's reader alone and writer alone.  Each benchmark
puts ``ns_per_packet`` and ``mpps`` in ``extra_info`` (pytest-benchmark's
own columns are per call).  ``python -m fastpath.bench_replay`` runs the
same measurements on 1M packets and reports peak RSS.
"""
from __future__ import annotations

import os
import tempfile

import pytest

from fastpath import bench_replay as br
from fastpath import pcap as fpcap

PACKETS = 200_000       # fastpath
SMALL = 20_000          # scapy, dpkt
BATCH = 4096


@pytest.fixture(scope="module")
def capture():
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="fastpath-bench-replay-", dir=base) as d:
        big, small = os.path.join(d, "in.pcapng"), os.path.join(d, "small.pcapng")
        cfg, iif = br.build_capture(big, PACKETS, BATCH)
        br.build_capture(small, SMALL, BATCH)
        br._warm(big)
        br._warm(small)
        yield cfg, iif, big, small, os.path.join(d, "out.pcapng")


def _per_packet(benchmark, n):
    benchmark.extra_info["packets"] = n
    stats = getattr(benchmark, "stats", None)
    if stats is None:               # benchmarks disabled: ran once
        return
    ns = stats.stats.median * 1e9 / n
    benchmark.extra_info["ns_per_packet"] = ns
    benchmark.extra_info["mpps"] = 1e3 / ns


def _fresh(cfg, iif, src, out):
    """pedantic setup: a configured Router per round (configuring is not timed)."""
    return lambda: ((br._router(cfg), iif, src, out, BATCH), {})


def test_fastpath_replay(benchmark, capture):
    cfg, iif, big, _, out = capture
    benchmark.group = "replay-end"
    st = benchmark.pedantic(lambda *a: br.fastpath_replay(*a)[1], setup=_fresh(cfg, iif, big, out),
                            rounds=5, iterations=1)
    _per_packet(benchmark, PACKETS)
    assert st.packets == PACKETS and st.verdicts["forward"] == PACKETS


def test_fastpath_replay_small(benchmark, capture):
    cfg, iif, _, small, out = capture
    benchmark.group = "replay-end"
    benchmark.pedantic(br.fastpath_replay, setup=_fresh(cfg, iif, small, out), rounds=5,
                       iterations=1)
    _per_packet(benchmark, SMALL)


def test_scapy_replay_small(benchmark, capture):
    pytest.importorskip("scapy")
    cfg, iif, _, small, out = capture
    benchmark.group = "replay-end"
    n = benchmark.pedantic(lambda *a: br.scapy_replay(*a)[1], setup=_fresh(cfg, iif, small, out),
                           rounds=3, iterations=1)
    _per_packet(benchmark, SMALL)
    assert n == SMALL and len(fpcap.read_packets(out)) == SMALL


def test_dpkt_replay_small(benchmark, capture):
    pytest.importorskip("dpkt", reason="dpkt is not installed (pip install dpkt)")
    cfg, iif, _, small, out = capture
    benchmark.group = "replay-end"
    n = benchmark.pedantic(lambda *a: br.dpkt_replay(*a)[1], setup=_fresh(cfg, iif, small, out),
                           rounds=3, iterations=1)
    _per_packet(benchmark, SMALL)
    assert n == SMALL and len(fpcap.read_packets(out)) == SMALL


def test_fastpath_read(benchmark, capture):
    _, _, big, _, _ = capture
    benchmark.group = "replay-io"

    def read():
        return sum(len(b) for b in fpcap.read_batches(big, batch_size=BATCH))
    assert benchmark.pedantic(read, rounds=5, iterations=1) == PACKETS
    _per_packet(benchmark, PACKETS)


def test_fastpath_write(benchmark, capture):
    cfg, iif, big, _, out = capture
    benchmark.group = "replay-io"
    r = br._router(cfg)
    batches = list(fpcap.read_batches(big, batch_size=BATCH, iif=r.interfaces[iif].ifindex))
    for b in batches:
        r.process(b)

    def write():
        with fpcap.PcapngWriter(out) as w:
            for b in batches:
                w.write_batch(b)
        return w.packets
    assert benchmark.pedantic(write, rounds=5, iterations=1) == PACKETS
    _per_packet(benchmark, PACKETS)

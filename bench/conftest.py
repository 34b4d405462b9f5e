"""pytest set-up of the benchmark suites in bench/ (pytest-benchmark).

Run them with::

    pytest bench/ --benchmark-only

* The files here are named ``bench_*.py``, not ``test_*.py``, so that the
  test suite (``pytest``, testpaths = tests) never runs them; this conftest
  makes pytest collect them when bench/ is given.
* The project's addopts carry ``--benchmark-disable`` (so that tests using the
  ``benchmark`` fixture run once, untimed), and pytest-benchmark refuses
  ``--benchmark-only`` together with ``--benchmark-disable`` ("Can't have
  both"); here ``--benchmark-only`` wins: it turns ``--benchmark-enable`` on.
  Without ``--benchmark-only`` the benchmarks run once each, as a smoke test.
* After the run, a summary gives the per-address times (``extra_info``) of
  each group side by side: the benchmarks time calls over batches of
  different sizes, so pytest-benchmark's own columns are per call.
"""
from __future__ import annotations

import os
import sys

import pytest

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import fastpath  # noqa: F401  (installed, or the checkout below)
except ImportError:         # not installed: use the checkout (built in place)
    sys.path.insert(0, _ROOT)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    config.addinivalue_line("python_files", "bench_*.py")
    opt = config.option
    if getattr(opt, "benchmark_only", False) and getattr(opt, "benchmark_disable", False):
        opt.benchmark_enable = True


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    bs = getattr(config, "_benchmarksession", None)
    rows = []
    for b in getattr(bs, "benchmarks", None) or []:
        info = getattr(b, "extra_info", None) or {}
        if "ns_per_address" in info or "ns_per_packet" in info:
            rows.append((b.group or "", b.name, info))
    if not rows:
        return
    tr = terminalreporter
    tr.write_sep("-", "per address / per packet (extra_info)")
    key = lambda r: (r[0], r[2].get("ns_per_address", r[2].get("ns_per_packet", 0.0)))  # noqa: E731
    for group, name, info in sorted(rows, key=key):
        if "ns_per_address" in info:
            extra = (f"  (lookup_batch {info['speedup']:.1f}x faster)" if "speedup" in info else "")
            tr.write_line(f"{group:<18} {name:<50} {info['ns_per_address']:>8.1f} ns/address "
                          f"({info.get('addresses', 0):,} per call){extra}")
        else:
            tr.write_line(f"{group:<18} {name:<50} {info['ns_per_packet']:>8.1f} ns/packet "
                          f"{info['mpps']:>8.2f} Mpps")

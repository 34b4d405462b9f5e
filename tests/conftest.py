"""Shared pytest fixtures."""

from __future__ import annotations

import pytest

try:  # tests/ as a package or as a plain directory on sys.path
    from . import kernel_oracle as _ko
except ImportError:
    import kernel_oracle as _ko


def pytest_report_header(config):
    from fastpath import _datapath
    return ("fastpath build: " + ("DEBUG (bounds checks on)" if _datapath.DEBUG_BUILD else "release"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "kernel_seg6: compares with the kernel's SRv6 (seg6 / seg6local routes); "
        "skipped with the reason on a kernel built without CONFIG_IPV6_SEG6_LWTUNNEL")


def pytest_runtest_setup(item):
    if item.get_closest_marker("kernel_seg6") is not None:
        ok, reason = _ko.oracle_available()
        if not ok:
            pytest.skip(reason)


@pytest.fixture
def kernel_oracle():
    """A fresh KernelOracle (netns with tun0, tun1, tun2), skipped with the
    reason where the machine cannot run one (not root, no netns/TUN; a test
    that needs the kernel's SRv6 too is marked ``kernel_seg6``).  Configure
    it with ``kernel_oracle.configure(text)``."""
    ok, reason = _ko.oracle_available(seg6=False)
    if not ok:
        pytest.skip(reason)
    with _ko.KernelOracle() as oracle:
        yield oracle

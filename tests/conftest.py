"""Shared pytest fixtures, and the markers of the comparisons with the kernel.

Markers:

* ``kernel``: the test compares fastpath with the running Linux kernel (or
  needs the kernel's own behaviour to mean anything).  ``pytest -m kernel``
  runs them all; ``python -m fastpath.kernel vm -- python -m pytest -m
  kernel`` runs them in a VM whose Linux has seg6 lwtunnels and VRF.
* ``kernel_seg6``: ... and needs the kernel's SRv6 (seg6 / seg6local routes);
  skipped, with the reason, on a kernel without CONFIG_IPV6_SEG6_LWTUNNEL.
* ``kernel_vrf``: ... and needs VRF devices (CONFIG_NET_VRF).
* ``kernel_netns``: ... and needs that kernel in its own process (network
  namespaces it enters or names to ``ip -n``, the CLIs it starts), so the
  VM's remote oracle cannot serve it.

With ``FASTPATH_KERNEL_VM=1`` the oracle (``kernel_oracle`` fixture,
``tests/kernel_oracle.py``) is the kernel of one VM booted for the session
(``fastpath.kernel.remote``): a host without seg6 or VRF compares at its own
speed, the kernel's part in the VM.  ``kernel_netns`` tests then skip; run
them whole in the VM: ``python -m fastpath.kernel vm -- python -m pytest -m
kernel_netns``.  CI does both.

``kernel_seg6``, ``kernel_vrf`` and the ``kernel_oracle`` fixture imply
``kernel``.

With ``FASTPATH_KERNEL_REQUIRED=1`` in the environment (CI sets it for the
run in the VM), a ``kernel`` test that skips FAILS instead, with the reason
it would have skipped for: a comparison with the kernel must never quietly
become no comparison.  The terminal summary ends with one line counting the
``kernel`` tests and the kernel they ran against.
"""

from __future__ import annotations

import os
import platform

import pytest

try:  # tests/ as a package or as a plain directory on sys.path
    from . import kernel_oracle as _ko
except ImportError:
    import kernel_oracle as _ko

KERNEL_REQUIRED = os.environ.get("FASTPATH_KERNEL_REQUIRED") == "1"
_kernel_outcomes: dict[str, int] = {}


def pytest_report_header(config):
    from fastpath import _datapath
    lines = ["fastpath build: " + ("DEBUG (bounds checks on)" if _datapath.DEBUG_BUILD else "release")]
    if KERNEL_REQUIRED:
        lines.append("kernel tests: required (a skip fails)")
    if _ko.IN_VM:
        lines.append("kernel oracle: a VM's (FASTPATH_KERNEL_VM=1), booted at first use")
    return lines


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "kernel: compares with the running Linux kernel (pytest -m kernel; "
        "python -m fastpath.kernel vm -- python -m pytest -m kernel)")
    config.addinivalue_line(
        "markers", "kernel_seg6: compares with the kernel's SRv6 (seg6 / seg6local routes); "
        "skipped with the reason on a kernel built without CONFIG_IPV6_SEG6_LWTUNNEL")
    config.addinivalue_line(
        "markers", "kernel_vrf: compares with the kernel's VRF devices; skipped with the "
        "reason on a kernel built without CONFIG_NET_VRF")
    config.addinivalue_line(
        "markers", "kernel_netns: needs the judging kernel in the test's own process "
        "(namespaces, ip -n, CLIs): not served by FASTPATH_KERNEL_VM's remote oracle")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("kernel") is None and (
                item.get_closest_marker("kernel_seg6") is not None
                or item.get_closest_marker("kernel_vrf") is not None
                or item.get_closest_marker("kernel_netns") is not None
                or "kernel_oracle" in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.kernel)


def pytest_runtest_setup(item):
    if _ko.IN_VM and item.get_closest_marker("kernel_netns") is not None:
        pytest.skip("needs the judging kernel in this process, not the VM's remote oracle "
                    "(python -m fastpath.kernel vm -- python -m pytest -m kernel_netns)")
    seg6 = item.get_closest_marker("kernel_seg6") is not None
    vrf = item.get_closest_marker("kernel_vrf") is not None
    if seg6 or vrf:
        ok, reason = _ko.oracle_available(seg6=seg6, vrf=vrf)
        if not ok:
            pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if item.get_closest_marker("kernel") is None:
        return
    if rep.skipped and not hasattr(rep, "wasxfail") and KERNEL_REQUIRED:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = (f"a kernel comparison skipped where the kernel is required "
                        f"(FASTPATH_KERNEL_REQUIRED=1): {reason}")
    if rep.when == "call" or (rep.when == "setup" and rep.outcome != "passed"):
        kind = "xfailed" if hasattr(rep, "wasxfail") else rep.outcome
        _kernel_outcomes[kind] = _kernel_outcomes.get(kind, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _kernel_outcomes:
        return
    counts = ", ".join(f"{n} {k}" for k, n in sorted(_kernel_outcomes.items()))
    where = f"Linux {platform.release()}"
    if _ko.IN_VM:
        from fastpath.kernel import remote
        vm = remote.running()
        where = (f"oracle in a VM, Linux {vm.release}; here Linux {platform.release()}"
                 if vm is not None else f"no VM was started; here Linux {platform.release()}")
    terminalreporter.write_line(f"kernel comparisons: {counts} ({where})")


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

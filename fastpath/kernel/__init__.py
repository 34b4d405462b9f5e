"""The Linux kernel as control plane and as judge.

* ``fastpath.kernel.oracle``: ``KernelOracle``, a throwaway network namespace
  with TUN devices, configured with ``ip``/``sysctl`` lines, packets written
  into the kernel and what it emits read back (the test suite's oracle).
* ``fastpath.kernel.compare``: the same packets through fastpath and through
  an oracle, compared byte for byte.
* ``fastpath.kernel.netlink``: import, the live state of a namespace read
  over rtnetlink (pyroute2) as fastpath configuration text.
* ``fastpath.kernel.verify``: ``python -m fastpath.kernel verify``.

Command line: ``python -m fastpath.kernel import|verify ...`` (see README).
"""
from .oracle import (KernelConfigError, KernelOracle, KernelOracleError,  # noqa: F401
                     is_kernel_noise, oracle_available)


def import_text(netns=None, hmac_file=None, header=True) -> str:
    """The configuration of a network namespace (None: this process's) as
    fastpath configuration text; see ``fastpath.kernel.netlink``."""
    from .netlink import import_text as _it
    return _it(netns, hmac_file, header)


def import_state(netns=None, hmac_file=None):
    from .netlink import import_state as _is
    return _is(netns, hmac_file)

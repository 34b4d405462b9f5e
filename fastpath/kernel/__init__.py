"""The Linux kernel as control plane and as judge.

* ``fastpath.kernel.oracle``: ``KernelOracle``, a throwaway network namespace
  with TUN devices, configured with ``ip``/``sysctl`` lines, packets written
  into the kernel and what it emits read back (the test suite's oracle).
* ``fastpath.kernel.compare``: the same packets through fastpath and through
  an oracle, compared byte for byte.
"""
from .oracle import (KernelConfigError, KernelOracle, KernelOracleError,  # noqa: F401
                     is_kernel_noise, oracle_available)


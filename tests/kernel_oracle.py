"""The kernel oracle now lives in fastpath.kernel.oracle (it is also what
``python -m fastpath.kernel verify`` runs on); this module re-exports it so
that the tests keep importing ``kernel_oracle``."""
from fastpath.kernel.oracle import *  # noqa: F401,F403
from fastpath.kernel.oracle import (IP, NAMESPACE_SYSCTLS, NETNS_RUN_DIR, KernelConfigError, KernelOracle,  # noqa: F401
                                    KernelOracleError, is_kernel_noise, oracle_available)

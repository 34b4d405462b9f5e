"""The kernel oracle for the tests: fastpath.kernel.oracle's (the kernel of
this machine), or, with ``FASTPATH_KERNEL_VM=1`` in the environment,
fastpath.kernel.remote's (the kernel of one VM booted for the session, whose
Linux has seg6 and VRF: the kernel side runs there, the rest here).  Tests
that need the kernel in their own process (namespaces they enter, ``ip -n``
they run themselves) are marked ``kernel_netns`` and are not served by the
VM's oracle; they run whole in the VM (tests/conftest.py)."""
import os

from fastpath.kernel.oracle import *  # noqa: F401,F403
from fastpath.kernel.oracle import (IP, NAMESPACE_SYSCTLS, NETNS_RUN_DIR, KernelConfigError, KernelOracle,  # noqa: F401
                                    KernelOracleError, is_kernel_noise, oracle_available)

IN_VM = os.environ.get("FASTPATH_KERNEL_VM") == "1"
if IN_VM:
    from fastpath.kernel.remote import KernelOracle, oracle_available  # noqa: F401,F811

"""Differential testing against the running kernel now lives in
fastpath.kernel.compare (shared with ``python -m fastpath.kernel verify``);
this module re-exports it for the tests."""
from fastpath.kernel.compare import (check, compare, expected_from_fastpath,  # noqa: F401
                                     format_problems, mask_kernel_chosen, mask_outer_flowlabel)


def configured_pair(oracle, cfg: str):
    """(oracle, router), both configured with the same text: the pair that
    ``check`` compares."""
    from fastpath import Router
    oracle.configure(cfg)
    r = Router()
    r.configure(cfg)
    return oracle, r

"""fastpath: a userspace SRv6 packet processor with a compiled fast path that
mirrors the Linux kernel's datapath, byte for byte.

    import fastpath
    r = fastpath.Router()
    r.configure(open("routes.conf").read())
    b = fastpath.Batch.from_packets(packets, iif="tun0")
    r.process(b)
    for res in b.results():
        print(res.verdict, res.oif, res.reason)
"""
from .batch import Batch, Result
from .config import ConfigError, State
from .dataplane import Dataplane, DataplaneError
from .reasons import REASON_NAMES, REASONS, VERDICTS
from .router import Router

__version__ = "0.1.0"


def __getattr__(name):
    """``fastpath.pcap``, ``fastpath.rss``, ``fastpath.topology``, ``fastpath.Live``
    (fastpath.wire.live): imported on first use."""
    if name == "Live":
        from .wire.live import Live
        return Live
    if name in ("pcap", "rss", "topology"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'fastpath' has no attribute {name!r}")
__all__ = ["Batch", "ConfigError", "Dataplane", "DataplaneError", "REASONS", "REASON_NAMES", "Result", "Router", "State",
           "VERDICTS", "__version__"]

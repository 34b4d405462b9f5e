"""The longest forwarding gap of ``fastpath.run`` while a SIGHUP reloads a
large configuration (root; network namespaces and veth, as
tests/test_wire.py).

A 100 Hz ``ping`` (iputils-ping) from h1 to h2 through fastpath, one second
in, a SIGHUP that adds one route to a file of N IPv4 /32 routes; printed:
pings received, the longest gap between replies, the longest RTT.  Trees
side by side: ``FASTPATH_TREES=/path/before:/path/after`` (each a checkout
with its extensions built; default this one), ``FASTPATH_GAP_ARGS`` the
fastpath.run arguments of each case separated by ``;`` (default: one
process, ``--workers 2``, ``--workers 2 --worker-tables own``).

    pytest -s -p no:cacheprovider bench/test_wire_reload_gap.py
"""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import test_wire as tw                        # noqa: E402
from test_wire import H1, R, _flush_hosts, _sh  # noqa: E402
from test_wire import topo  # noqa: E402,F401  (the topology fixture)

ROUTES = int(os.environ.get("FASTPATH_GAP_ROUTES", "100000"))
RUNS = int(os.environ.get("FASTPATH_GAP_RUNS", "2"))


def _routes(n):
    return "".join(f"ip route add 172.{16 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}/32 "
                   "via 10.2.0.2 dev r2\n" for i in range(n))


def _start(root, conf, args, tmp):
    ready = tmp / f"ready{time.monotonic_ns()}"
    cmd = ["ip", "netns", "exec", R, sys.executable, "-m", "fastpath.run", "--config", conf,
           "--iface", "r1", "--iface", "r2", "--ready-file", str(ready)] + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=root), cwd=root)
    end = time.monotonic() + 120
    while not ready.exists():
        if p.poll() is not None or time.monotonic() > end:
            p.kill()
            pytest.fail(f"fastpath.run did not start: {p.communicate()[1]}")
        time.sleep(0.05)
    return p


@pytest.mark.skipif(shutil.which("ping") is None, reason="needs ping (iputils-ping)")
def test_reload_gap(topo, tmp_path):
    trees = os.environ.get("FASTPATH_TREES", str(ROOT)).split(":")
    cases = [c.split() for c in os.environ.get(
        "FASTPATH_GAP_ARGS", ";--workers 2;--workers 2 --worker-tables own").split(";")]
    conf = str(tmp_path / "big.conf")
    body = tw.CONF + _routes(ROUTES)
    print(f"\n{ROUTES} routes; a 100 Hz ping h1 -> h2 through fastpath; SIGHUP adding one route")
    for run in range(RUNS):
        for args in cases:
            for root in trees:
                pathlib.Path(conf).write_text(body)
                _flush_hosts()
                p = _start(root, conf, args, tmp_path)
                try:
                    _sh("ping", "-c", "1", "-W", "2", "10.2.0.2", ns=H1, check=False)
                    ping = subprocess.Popen(["ip", "netns", "exec", H1, "ping", "-i", "0.01", "-c",
                                             "600", "-W", "1", "-D", "10.2.0.2"],
                                            stdout=subprocess.PIPE, text=True)
                    time.sleep(1.0)
                    with open(conf, "a") as f:
                        f.write("ip route add 10.4.0.0/24 via 10.2.0.2 dev r2\n")
                    p.send_signal(signal.SIGHUP)
                    out, _ = ping.communicate(timeout=60)
                finally:
                    p.send_signal(signal.SIGTERM)
                    _, err = p.communicate(timeout=60)
                ts = [float(m) for m in re.findall(r"^\[(\d+\.\d+)\]", out, re.M)]
                rtt = [float(m) for m in re.findall(r"time=([\d.]+)", out)]
                got = re.search(r"(\d+) received", out)
                gap = max((b - a for a, b in zip(ts, ts[1:])), default=float("nan"))
                print(f"run {run} {' '.join(args) or 'one process':32s} {root}: received "
                      f"{got.group(1) if got else 0}/600, longest gap {gap * 1000:.0f} ms, "
                      f"longest RTT {max(rtt, default=float('nan')):.0f} ms, "
                      f"reloaded: {'configuration reloaded' in err}")

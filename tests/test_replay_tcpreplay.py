"""examples/replay_tcpreplay.py: a fastpath output capture replayed with
tcpreplay onto a veth pair in a network namespace arrives byte for byte
(captured with tcpdump).  Skipped, with the reason, without root, network
namespaces, tcpreplay or tcpdump (Debian: apt-get install -y tcpreplay tcpdump)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

import fastpath

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "replay_tcpreplay.py")


def _load():
    spec = importlib.util.spec_from_file_location("replay_tcpreplay", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_output_capture_replays_onto_a_veth_pair(tmp_path):
    why = _load().prerequisites()
    if why:
        pytest.skip(why)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
        os.path.abspath(fastpath.__file__))))
    p = subprocess.run([sys.executable, SCRIPT, "--packets", "120", "--keep", str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK: the output capture replays byte for byte" in p.stdout
    assert "Traceback" not in p.stderr
    # the files it left: what fastpath wrote and what tcpdump saw
    import fastpath.pcap as fpcap
    out = [x for b in fpcap.read_batches(str(tmp_path / "out.pcapng")) for x in b.packets()]
    wire = [x for b in fpcap.read_batches(str(tmp_path / "wire.pcap")) for x in b.packets()]
    assert len(out) == 120 and wire == out

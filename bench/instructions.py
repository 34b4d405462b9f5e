"""Instructions per packet of the compiled datapath, by scenario (callgrind).

    python bench/instructions.py End ipv6-forward End.DX4 [--batches 40]

For each scenario of ``fastpath.scenarios`` (1k routes, 256-packet
batches), runs this file under ``valgrind --tool=callgrind`` twice -- once
setting the router up and processing one warm-up batch, once processing
``--batches`` more -- and prints the difference of ``run_batch``'s inclusive
instruction count divided by the packets. Instruction counts do not depend
on what else the machine is doing, so two builds compare exactly: run it
from each tree (``PYTHONPATH=TREE``) and compare the columns.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

BATCH = 256


def _child(name: str, nb: int) -> None:
    import numpy as np

    import fastpath
    from fastpath.scenarios import SCENARIOS
    cfg, frames, iif = SCENARIOS[name][1](1000, BATCH, 64, np.random.default_rng(1))
    r = fastpath.Router()
    r.configure(cfg)
    raw = frames[0][0] >> 4 in (4, 6)
    b = fastpath.Batch.from_packets(frames, iif=iif, linktype="raw" if raw else "ethernet")
    data0, st0, ln0 = b.data.copy(), b.start.copy(), b.length.copy()
    r.process(b)
    for _ in range(nb):
        b.data[...] = data0
        b.start[...] = st0
        b.length[...] = ln0
        r.process(b)


def _run_batch_ir(out: str) -> int:
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", out],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"^\s*([\d,]+) .*run_batch \[", ann, re.M)
    if m is None:
        raise SystemExit("run_batch not found in the profile (is the extension built?)")
    return int(m.group(1).replace(",", ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="+")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(a.scenarios[0], a.batches)
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("valgrind (callgrind) is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    py = os.path.realpath(sys.executable)          # not a shim: callgrind follows no exec
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.scenarios:
            ir = []
            for nb in (0, a.batches):
                out = os.path.join(tmp, f"cg.{nb}.out")
                subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", py,
                                os.path.abspath(__file__), "--child", name, "--batches", str(nb)],
                               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                ir.append(_run_batch_ir(out))
            print(f"{name:16s} {(ir[1] - ir[0]) / (a.batches * BATCH):8.1f} instructions/packet")
    return 0


if __name__ == "__main__":
    sys.exit(main())

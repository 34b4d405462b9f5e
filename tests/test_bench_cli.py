"""``python -m fastpath.bench``: tables, JSON and plot outputs with small,
fast settings; bad arguments give one line and exit code 2."""
import json
import os
import subprocess
import sys

import pytest

from fastpath import bench

FAST = ["--runs", "1", "--duration", "0.1"]


def run(*args):
    p = subprocess.run([sys.executable, "-m", "fastpath.bench", *args], capture_output=True, text=True,
                       timeout=300)
    return p.returncode, p.stdout, p.stderr


def test_tables_json_and_plot(tmp_path):
    js, png = tmp_path / "out.json", tmp_path / "out.png"
    rc, out, err = run(*FAST, "--behavior", "End,End.DX4", "--workers", "1,2", "--json", str(js),
                       "--plot", str(png))
    assert rc == 0, err
    assert "Traceback" not in err
    # one table per behaviour, seeds' columns, both worker counts
    for name in ("End:", "End.DX4:"):
        assert name in out
    assert out.count("before (refcount)") == 2 and out.count("after (noref)") == 2
    rows = [l for l in out.splitlines() if l[:1].isdigit()]
    assert [l.split()[0] for l in rows] == ["1", "2", "1", "2"]
    assert all(l.rstrip().endswith("%") for l in rows)
    assert out.count("attribution:") == 2
    assert "seeds' testbed" in out
    doc = json.loads(js.read_text())
    assert doc["machine"]["online"]
    assert len(doc["results"]) == 8
    for r in doc["results"]:
        assert r["median_mpps"] > 0 and len(r["runs_mpps"]) == 1
        assert r["verdicts"][1] == 256          # every packet forwarded
        w = r["raw"][0]["workers"]
        assert len(w) == r["workers"] and all(x["packets"] > 0 for x in w)
    assert {a["behavior"] for a in doc["attribution"]} == {"End", "End.DX4"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_pdr_search(tmp_path):
    js = tmp_path / "pdr.json"
    rc, out, err = run("--runs", "1", "--duration", "0.05", "--behavior", "End", "--workers", "1",
                       "--mode", "noref", "--pdr", "0.005", "--ring", "512", "--json", str(js))
    assert rc == 0, err
    assert "throughput at 0.005 loss" in out
    r = json.loads(js.read_text())["results"][0]
    trials = r["raw"][0]["trials"]
    assert trials[0]["offered_mpps"] == 1.0
    # the answer is a rate that passed, below one that failed
    passed = [t["offered_mpps"] for t in trials if t["loss"] <= 0.005]
    failed = [t["offered_mpps"] for t in trials if t["loss"] > 0.005]
    assert r["median_mpps"] == max(passed) and failed and min(failed) > max(passed)


@pytest.mark.parametrize("args,msg", [
    (["--behavior", "End.Nope"], "unknown behavior"),
    (["--workers", str(os.cpu_count() + 1)], "--oversubscribe"),
    (["--workers", "two"], "--workers"),
    (["--cpus", "4095"], "--cpus"),
    (["--cpus", "0-"], "--cpus"),
    (["--pdr", "5"], "--pdr"),
    (["--duration", "0"], "--duration"),
    (["--mode", "atomic"], "--mode"),
    (["--pcap", "x.pcap"], "--pcap and --config"),
    (["--frobnicate"], "unrecognized"),
])
def test_bad_arguments_one_line_exit_2(args, msg):
    rc, out, err = run(*args)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and msg in err and "Traceback" not in err


def test_default_worker_counts():
    assert bench._worker_counts(None, 1, False) == [1]
    assert bench._worker_counts(None, 2, False) == [1, 2]
    assert bench._worker_counts(None, 16, False) == [1, 2, 4, 8, 16]
    assert bench._worker_counts(None, 40, False) == [1, 2, 4, 8, 16, 32, 40]
    assert bench._worker_counts("all", 3, False) == [1, 2, 3]
    assert bench._worker_counts("4,1", 2, True) == [1, 4]


def test_pcap_traffic(tmp_path):
    import numpy as np
    import fastpath.pcap as fp
    from fastpath.scenarios import SCENARIOS
    cfg, pkts, _ = SCENARIOS["End.DX4"][1](16, 64, 8, np.random.default_rng(1))
    (tmp_path / "r.conf").write_text(cfg)
    with fp.PcapngWriter(tmp_path / "t.pcapng") as w:
        w.write_packets(pkts, interface="eth0", linktype="ethernet")
    js = tmp_path / "p.json"
    rc, out, err = run(*FAST, "--pcap", str(tmp_path / "t.pcapng"), "--config", str(tmp_path / "r.conf"),
                       "--workers", "1", "--no-attribution", "--json", str(js))
    assert rc == 0, err
    assert "pcap:t.pcapng" in out and f"config {tmp_path / 'r.conf'}" in out
    res = json.loads(js.read_text())["results"]
    assert {r["mode"] for r in res} == {"refcount", "noref"}
    assert all(r["verdicts"][1] == 64 for r in res)      # the capture's 64 packets forwarded
    rc, out, err = run(*FAST, "--pcap", str(tmp_path / "missing.pcap"), "--config", str(tmp_path / "r.conf"))
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err

"""``python -m fastpath.bench_replay``: the capture it builds, and its
``fastpath.replay --workers`` rows, with small settings; bad arguments give
one line and exit code 2."""
import json
import subprocess
import sys

import numpy as np
import pytest

from fastpath import pcap as fpcap, rss
from fastpath.bench_replay import build_capture


def _queues(path, nq):
    q = np.concatenate([rss.queues(rss.batch_hash(b), nq) for b in fpcap.read_batches(path)])
    return np.bincount(q, minlength=nq)


def test_spread_capture_is_the_same_frames_from_256_sources(tmp_path):
    """sources=256 changes only the outer IPv6 source's last byte, which
    then takes every value; RSS puts the plain capture on one queue of two
    and spreads the other within a few percent of half and half."""
    one, many = tmp_path / "one.pcapng", tmp_path / "many.pcapng"
    n = 5000
    build_capture(str(one), n, 1024)
    build_capture(str(many), n, 1024, sources=256)
    a, b = fpcap.read_packets(str(one)), fpcap.read_packets(str(many))
    assert len(a) == len(b) == n
    last = []
    for (pa, ta, _), (pb, tb, _) in zip(a, b):
        assert ta == tb and len(pa) == len(pb)
        diff = [i for i in range(len(pa)) if pa[i] != pb[i]]
        assert set(diff) <= {14 + 8 + 15}
        last.append(pb[14 + 8 + 15])
    assert sorted(set(last)) == list(range(256))
    assert sorted(_queues(str(one), 2).tolist()) == [0, n]
    q = _queues(str(many), 2)
    assert abs(int(q[0]) - n // 2) < n * 0.1, q


def run(*args):
    p = subprocess.run([sys.executable, "-m", "fastpath.bench_replay", *args],
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def test_workers_rows(tmp_path):
    js = tmp_path / "out.json"
    n = 6000
    rc, out, err = run("--packets", str(n), "--runs", "1", "--batch", "1024", "--no-others",
                       "--no-rss", "--workers", "2", "--dir", str(tmp_path), "--json", str(js))
    assert rc == 0, err
    assert "Traceback" not in err
    lines = [l for l in out.splitlines() if l.startswith("replay    --workers")]
    assert len(lines) == 4 and sum("one flow" in l for l in lines) == 2
    doc = json.loads(js.read_text())["replay_workers"]
    assert doc["cpus"] >= 1
    assert set(doc["rows"]) == {"one flow", "256 sources"}
    for per in doc["rows"].values():
        assert set(per) == {"1", "2"}
        assert per["1"]["ratio_to_1"] == 1.0
        for w, r in per.items():
            assert r["workers"] == int(w)       # (the summary's own count)
            # every frame replayed and forwarded, by the Router and the Dataplane
            assert r["packets"] == r["forwarded"] == n
            assert r["packets_per_s"]["median"] > 0 and r["ratio_to_1"] > 0
            # CPU of the whole replay, the workers' included, and never
            # more CPUs busy than the machine has (with a little clock slack)
            assert r["cpu_ns_per_packet"] > 0
            assert 0 < r["cpus_busy"] <= doc["usable_cpus"] * 1.1
        assert per["1"]["ceiling_ratio"] == pytest.approx(doc["usable_cpus"]
                                                          / per["1"]["cpus_busy"])
    assert sum("more workers can give at most" in l for l in out.splitlines()) == 2
    fp_rows = json.loads(js.read_text())["fastpath"]
    assert 0 < fp_rows["cpus_busy"] <= doc["usable_cpus"] * 1.1


@pytest.mark.parametrize("bad", ["two", "0", "1,-2"])
def test_bad_worker_counts(bad):
    rc, out, err = run("--packets", "10", "--workers", bad)
    assert rc == 2 and "--workers" in err and "Traceback" not in err


def test_a_failing_workers_replay_is_one_line(tmp_path, monkeypatch, capsys):
    """A replay that fails in the workers rows is reported in one line (and
    in the JSON), the rest of the report kept; no traceback."""
    from fastpath import bench_replay

    def fail(*a, **k):
        raise RuntimeError("fastpath.replay --workers 2 failed: no room")
    monkeypatch.setattr(bench_replay, "replay_cli", fail)
    js = tmp_path / "out.json"
    assert bench_replay.main(["--packets", "3000", "--runs", "1", "--batch", "1024",
                              "--no-others", "--no-rss", "--dir", str(tmp_path),
                              "--json", str(js)]) == 0
    err = capsys.readouterr().err
    assert "replay    --workers: fastpath.replay --workers 2 failed: no room" in err
    doc = json.loads(js.read_text())
    assert "no room" in doc["replay_workers"]["error"] and doc["fastpath"]["median"] > 0

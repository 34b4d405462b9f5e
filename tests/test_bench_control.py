"""``python -m fastpath.bench_control``: small sizes, the JSON's shape (never
its timings); bad arguments give one line and exit code 2; the kernel's
namespace is gone afterwards."""
import json
import subprocess
import sys


def run(*args):
    p = subprocess.run([sys.executable, "-m", "fastpath.bench_control", *args], capture_output=True,
                       text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def _netns():
    try:
        p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    except OSError:
        return set()
    return {ln.split()[0] for ln in p.stdout.splitlines() if ln.startswith("fpbench")}


def test_json_shape(tmp_path):
    js = tmp_path / "out.json"
    before = _netns()
    rc, out, err = run("--sizes", "50,120", "--repeat", "3", "--batch", "20", "--json", str(js))
    assert rc == 0, err
    assert "Traceback" not in err
    assert _netns() == before
    doc = json.loads(js.read_text())
    assert doc["config"] == {"sizes": [50, 120], "repeat": 3, "batch": 20, "dataplane": False,
                             "workers": 2, "duration": 2.0}
    assert [r["routes"] for r in doc["results"]] == [50, 120]
    whos = ["fastpath"] + (["kernel"] if doc["kernel"] is None else [])
    for row in doc["results"]:
        for who in whos:
            x = row[who]
            assert x["load_s"] > 0 and x["replace_batch_s"] > 0
            assert len(x["replace_one_runs_s"]) == 3 and x["replace_one_median_s"] > 0
            assert x["batch"] == 20
        assert row["fastpath"]["installed_entries"] >= row["routes"]
        if "kernel" in row:
            assert row["kernel"]["installed_routes"] >= row["routes"]
    assert doc["peak_rss_mb"] > 0
    assert "fastpath" in out


def test_dataplane_and_feed_json_shape(tmp_path):
    """--dataplane: a running Dataplane changed while it forwards, per mode;
    --feed: a small feed loaded from a file in a fresh process."""
    js = tmp_path / "out.json"
    before = _netns()
    rc, out, err = run("--sizes", "60", "--repeat", "2", "--batch", "10", "--dataplane",
                       "--duration", "0.3", "--feed", "300,100", "--json", str(js))
    assert rc == 0, err
    assert _netns() == before
    doc = json.loads(js.read_text())
    dp = doc["results"][0]["dataplane"]
    assert dp["routes"] == 60 and dp["workers"] == 2 and set(dp["modes"]) == {"noref", "refcount"}
    for m in dp["modes"].values():
        assert m["changes"] >= 10 and m["changes_per_s"] > 0 and m["gen_violations"] == 0
        assert m["forward_pps_alone"] > 0 and m["packets_accounted"] is True
    feed = doc["feed"]
    assert feed["ipv4_routes"] > 250 and feed["ipv6_routes"] > 50
    assert feed["fastpath"]["entries"] >= feed["ipv4_routes"] + feed["ipv6_routes"]
    assert feed["fastpath"]["peak_rss_mb"] > 0
    if doc["kernel"] is None:
        assert feed["kernel"]["load_s"] > 0
    assert "full feed from a file" in out and "Dataplane (2 workers)" in out


def test_no_kernel_and_bad_arguments():
    rc, out, err = run("--sizes", "30", "--repeat", "1", "--batch", "5", "--no-kernel")
    assert rc == 0, err
    assert "not run (--no-kernel)" in out
    for bad in (["--sizes", "x"], ["--sizes", "0"], ["--repeat", "0"], ["--bogus"],
                ["--feed", "5"], ["--workers", "0"], ["--duration", "0"]):
        rc, out, err = run(*bad)
        assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, (bad, err)

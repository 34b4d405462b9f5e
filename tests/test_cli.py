"""The command-line tools: output, exit codes, one-line errors (no traceback)."""
import json
import subprocess
import sys

import pytest

CFG = """\
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev tun1
"""
FWD = "6000000000003b4020010db800010000000000000000000220010db8009900000000000000000001"


def run(*args):
    p = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def cfg(tmp_path):
    f = tmp_path / "r.conf"
    f.write_text(CFG)
    return str(f)


def test_check_and_routes(cfg):
    rc, out, err = run("fastpath", "check", "--config", cfg)
    assert rc == 0 and "ok" in out and "1 routes" in out
    rc, out, _ = run("fastpath", "routes", "show", "--config", cfg)
    assert rc == 0 and "ip -6 route add 2001:db8:99::/48 via 2001:db8:2::2 dev tun1" in out
    rc, out, _ = run("fastpath", "routes", "show", "--config", cfg, "--all")
    assert rc == 0 and "local 2001:db8:1::1 dev tun0 table local proto kernel metric 0" in out


def test_process(cfg):
    rc, out, _ = run("fastpath", "process", "--config", cfg, "--iif", "tun0", FWD, FWD[:20])
    assert rc == 0
    assert out.splitlines()[0] == "0: forward dev tun1 via 2001:db8:2::2"
    assert "1: drop reason truncated" in out


@pytest.mark.parametrize("args,msg", [
    (["check", "--config", "/nonexistent/x.conf"], "cannot read"),
    (["process", "--config", "CFG", "--iif", "nope", FWD], "unknown ingress interface 'nope'"),
    (["process", "--config", "CFG", "--iif", "tun0", "zz"], "not a hex packet"),
])
def test_errors_are_one_line(cfg, args, msg):
    args = [cfg if a == "CFG" else a for a in args]
    rc, out, err = run("fastpath", *args)
    assert rc == 1 and msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_config_names_line(tmp_path):
    f = tmp_path / "bad.conf"
    f.write_text(CFG + "ip -6 route add fc00::1/129 dev tun0\n")
    rc, _, err = run("fastpath", "check", "--config", str(f))
    assert rc == 1 and "line 4" in err and "fc00::1/129" in err and "Traceback" not in err


def test_usage_error_exit_2():
    rc, _, err = run("fastpath", "frobnicate")
    assert rc == 2 and "Traceback" not in err


def test_bench_runs_every_scenario_in_workers(tmp_path):
    from fastpath.scenarios import SCENARIOS
    j = tmp_path / "b.json"
    rc, out, err = run("fastpath.bench", "--behavior", "all", "--fib-size", "16", "--workers", "1",
                       "--mode", "noref", "--runs", "2", "--duration", "0.05", "--json", str(j))
    assert rc == 0, err
    assert "ipv6-forward" in out and "Mpps" in out
    data = json.loads(j.read_text())
    assert [r["behavior"] for r in data["results"]] == list(SCENARIOS)
    for r in data["results"]:
        assert len(r["runs_mpps"]) == 2 and r["median_mpps"] > 0
        want = 4 if r["behavior"] == "ipv6-noroute" else 1      # icmp, else forward
        assert r["verdicts"][want] == 256, (r["behavior"], r["verdicts"])


@pytest.mark.parametrize("args", [["--scenario", "nope"], ["--batch", "0"], ["--duration", "-1"],
                                  ["--mode", "x"]])
def test_bench_bad_arguments(args):
    rc, _, err = run("fastpath.bench", *args)
    assert rc == 2 and "Traceback" not in err and err.strip()

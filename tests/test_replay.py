"""``python -m fastpath.replay``: summaries, outputs, ingress interface
choice, exit codes and one-line errors (never a traceback)."""
from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fastpath
import fastpath.pcap as fp
from fastpath.replay import main
from fastpath.scenarios import _end_packet, _eth

# Ingress decides egress here: packets from eth1 go out eth2 (rule), the
# others out eth1.  The End route counts.
CONFIG = """
ip -6 addr add 2001:db8:1::1/64 dev eth0
ip -6 addr add 2001:db8:2::1/64 dev eth1
ip -6 addr add 2001:db8:3::1/64 dev eth2
ip -6 neigh add 2001:db8:2::2 lladdr 02:00:00:00:00:22 dev eth1
ip -6 route add fc00:2::/32 via 2001:db8:2::2 dev eth1
ip -6 route add fc00:2::/32 via 2001:db8:3::2 dev eth2 table 100
ip -6 rule add iif eth1 table 100
ip -6 route add fc00:1::100/128 encap seg6local action End count dev eth0
"""


def traffic(n):
    """End packets (forwarded), every 5th with SL 0 (dropped), every 7th to
    an unrouted SID (ICMP error)."""
    out = []
    for k in range(n):
        if k % 7 == 6:
            p = _end_packet("fc00:9::1", "fc00:2::1")
        else:
            p = bytearray(_end_packet("fc00:1::100", f"fc00:2::{k + 1:x}"))
            if k % 5 == 4:
                p[43] = 0
            p = bytes(p)
        out.append(_eth(p))
    return out


def expected(pkts, iif):
    r = fastpath.Router()
    r.configure(CONFIG)
    b = fastpath.Batch.from_packets(pkts, iif=iif, linktype="ethernet")
    r.process(b)
    return b.results()


@pytest.fixture
def files(tmp_path):
    cfg = tmp_path / "routes.conf"
    cfg.write_text(CONFIG)
    pk = traffic(50)
    src = tmp_path / "in.pcapng"
    with fp.PcapngWriter(src, select="all") as w:
        w.write_packets(pk, interface="wlan0", linktype="ethernet",
                        timestamps_ns=[10**18 + k for k in range(50)])
    return tmp_path, str(cfg), str(src), pk


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def read(path):
    r = fp.PcapReader(path)
    out = []
    for b in r:
        out += [(p, r.interfaces[int(b.capture_if[i])].name) for i, p in enumerate(b.packets())]
    return out


def test_json_summary_and_outputs(files, capsys):
    tmp, cfg, src, pk = files
    rc, out, err = run(capsys, src, "--config", cfg, "-o", tmp / "o.pcapng", "--drops",
                       tmp / "d.pcapng", "--summary", "json", "--batch", "16")
    assert rc == 0, err
    d = json.loads(out)
    res = expected(pk, "eth0")                 # wlan0 is not configured: first interface
    assert d["packets"] == 50 and d["bytes"] == sum(len(p) for p in pk)
    assert d["batches"] == 4
    assert d["verdicts"] == {v: sum(x.verdict == v for x in res) for v in {x.verdict for x in res}}
    assert d["egress"] == {"eth1": sum(x.oif == "eth1" for x in res),
                           "eth0": sum(x.oif == "eth0" for x in res)}
    assert d["drop_reasons"] == {"srh_missing": sum(x.verdict == "drop" for x in res)}
    assert d["icmp_reasons"] == {"no_route": 7}
    rc_ = d["route_counters"]["fc00:1::100/128 table 254"]
    assert rc_["packets"] == sum(x.verdict == "forward" for x in res)
    assert rc_["errors"] == d["drop_reasons"]["srh_missing"]
    assert d["outputs"]["output"]["packets"] == sum(x.verdict in ("forward", "icmp") for x in res)
    assert d["error"] is None and d["packets_per_s"] > 0
    assert read(str(tmp / "o.pcapng")) == [(x.data, x.oif) for x in res
                                           if x.verdict in ("forward", "icmp")]
    assert read(str(tmp / "d.pcapng")) == [(pk[i], "eth0") for i, x in enumerate(res)
                                           if x.verdict == "drop"]


def test_text_summary(files, capsys):
    tmp, cfg, src, pk = files
    rc, out, err = run(capsys, src, "--config", cfg, "--no-progress")
    assert rc == 0
    lines = dict(line.split(None, 1) if " " in line else (line, "") for line in out.splitlines()
                 if not line.startswith(" "))
    assert "packets in      50 (" in out
    assert "verdicts        forward 34  drop 9  icmp 7" in out
    assert "drop reasons    srh_missing 9" in out
    assert "icmp reasons    no_route 7" in out
    assert "egress          eth1 34  eth0 7" in out
    assert "  fc00:1::100/128 table 254: packets 34 bytes 2,720 errors 9" in out
    assert "M packets/s" in lines["time"]
    assert err == ""


def test_ingress_interface_choice(tmp_path, capsys):
    cfg = tmp_path / "r.conf"
    cfg.write_text(CONFIG)
    pk = [_eth(_end_packet("fc00:1::100", "fc00:2::1"))] * 4
    src = tmp_path / "two.pcapng"
    with fp.PcapngWriter(src, select="all") as w:
        w.write_packets(pk[:2], interface="eth1", linktype="ethernet")
        w.write_packets(pk[2:], interface="wlan0", linktype="ethernet")
    # pcapng names: eth1 is configured (egress eth2 by the rule), wlan0 is not (-> eth0)
    rc, out, _ = run(capsys, src, "--config", cfg, "--summary", "json")
    assert rc == 0 and json.loads(out)["egress"] == {"eth2": 2, "eth1": 2}
    rc, out, _ = run(capsys, src, "--config", cfg, "--summary", "json", "--iif", "eth1")
    assert rc == 0 and json.loads(out)["egress"] == {"eth2": 4}
    # classic pcap: no names, the first configured interface
    with fp.PcapWriter(tmp_path / "c.pcap", linktype="ethernet") as w:
        w.write_packets(pk, linktype="ethernet")
    rc, out, _ = run(capsys, tmp_path / "c.pcap", "--config", cfg, "--summary", "json")
    assert rc == 0 and json.loads(out)["egress"] == {"eth1": 4}


def test_output_formats_and_gzip_input(files, capsys):
    tmp, cfg, src, pk = files
    (tmp / "in.pcapng.gz").write_bytes(gzip.compress(open(src, "rb").read()))
    rc, _, err = run(capsys, tmp / "in.pcapng.gz", "--config", cfg, "-o", tmp / "o.pcap",
                     "--format", "pcap-us")
    assert rc == 0, err
    r = fp.PcapReader(str(tmp / "o.pcap"))
    got = [p for b in r for p in b.packets()]
    assert r.format == "pcap" and not r.nanosecond
    assert got == [x.data for x in expected(pk, "eth0") if x.verdict in ("forward", "icmp")]
    rc, _, _ = run(capsys, src, "--config", cfg, "-o", tmp / "o2.pcap")
    assert rc == 0 and fp.PcapReader(str(tmp / "o2.pcap")).nanosecond


def test_malformed_capture_midway(files, capsys):
    tmp, cfg, src, pk = files
    data = open(src, "rb").read()
    bad = tmp / "bad.pcapng"
    bad.write_bytes(data[:-30])                      # the last block is cut
    rc, out, err = run(capsys, bad, "--config", cfg, "-o", tmp / "o.pcapng", "--batch", "8",
                       "--summary", "json")
    assert rc == 1
    d = json.loads(out)
    assert d["packets"] == 49 and "truncated block" in d["error"]
    assert err.count("\n") == 1 and "truncated block" in err and f"byte {len(data) - 128}" in err
    res = expected(pk[:49], "eth0")
    assert len(read(str(tmp / "o.pcapng"))) == sum(x.verdict in ("forward", "icmp") for x in res)


@pytest.mark.parametrize("case,msg", [
    ("missing-config", "cannot read .*nope.conf: No such file"),
    ("bad-config", r"routes.conf: line 1: "),
    ("missing-input", "cannot read .*missing.pcap: No such file"),
    ("not-a-capture", r"byte 0: not a pcap or pcapng file"),
    ("empty", r"byte 0: empty file"),
    ("bad-iif", r"--iif eth7: no such interface .*interfaces: eth0, eth1, eth2"),
    ("no-interfaces", r"no interface configured"),
    ("unwritable", r"cannot write .*no/such/dir/o.pcapng"),
])
def test_errors_are_one_line_exit_1(files, capsys, monkeypatch, case, msg):
    import re
    tmp, cfg, src, _ = files
    args = [src, "--config", cfg]
    if case == "missing-config":
        args = [src, "--config", tmp / "nope.conf"]
    elif case == "bad-config":
        (tmp / "routes.conf").write_text("ip -6 route add fc00::/129 dev eth0\n")
    elif case == "missing-input":
        args[0] = tmp / "missing.pcap"
    elif case == "not-a-capture":
        args[0] = cfg
    elif case == "empty":
        (tmp / "e.pcap").write_bytes(b"")
        args[0] = tmp / "e.pcap"
    elif case == "bad-iif":
        args += ["--iif", "eth7"]
    elif case == "no-interfaces":
        (tmp / "routes.conf").write_text("sysctl -w net.ipv6.conf.all.forwarding=1\n")
    elif case == "unwritable":
        args += ["-o", tmp / "no/such/dir/o.pcapng"]
    rc, out, err = run(capsys, *args)
    assert rc == 1
    assert out == ""
    assert len(err.splitlines()) == 1 and err.startswith("python -m fastpath.replay: ")
    assert re.search(msg, err), err


def test_usage_errors_exit_2(capsys):
    rc, _, err = run(capsys, "in.pcap")
    assert rc == 2 and "--config" in err
    rc, _, err = run(capsys, "in.pcap", "--config", "x", "--mode", "fast")
    assert rc == 2


def test_pipes_through_a_subprocess(files):
    """stdin ``-`` in, ``-o -`` out (the summary then goes to stderr), and an
    error from a real process: one line, no traceback."""
    tmp, cfg, src, pk = files
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(
        fastpath.__file__))))
    data = open(src, "rb").read()
    p = subprocess.run([sys.executable, "-m", "fastpath.replay", "-", "--config", cfg, "-o", "-",
                        "--summary", "json"], input=data, capture_output=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stderr)
    assert d["packets"] == 50 and d["input"] == "-"
    got = [x for b in fp.read_batches(io.BytesIO(p.stdout)) for x in b.packets()]
    assert got == [x.data for x in expected(pk, "eth0") if x.verdict in ("forward", "icmp")]
    p = subprocess.run([sys.executable, "-m", "fastpath.replay", "-", "--config", cfg],
                       input=b"\x0a\x0d\x0d\x0a" + bytes(30), capture_output=True, timeout=60,
                       env=env)
    assert p.returncode == 1
    assert p.stderr.decode().count("\n") == 1 and b"Traceback" not in p.stderr
    assert b"<stdin>: byte 0: section header block with a bad byte-order magic" in p.stderr


def test_progress_is_quiet_without_a_terminal(files, capsys):
    tmp, cfg, src, _ = files
    rc, out, err = run(capsys, src, "--config", cfg)
    assert rc == 0 and err == ""


def test_progress_line_on_a_terminal(monkeypatch):
    from fastpath import replay as rp
    buf = io.StringIO()
    buf.isatty = lambda: True
    monkeypatch.setattr(sys, "stderr", buf)
    monkeypatch.setitem(sys.modules, "tqdm", None)      # force the built-in line
    monkeypatch.setitem(sys.modules, "rich", None)
    monkeypatch.setitem(sys.modules, "rich.progress", None)
    p = rp._Progress(1000, True)
    p.t0 -= 1.0
    p.update(500, 12345)
    p.close()
    assert "replay: 12,345 packets  50.0%" in buf.getvalue()


def test_many_batches_keep_counting(tmp_path, capsys):
    """Batch boundaries do not lose or double count anything."""
    cfg = tmp_path / "r.conf"
    cfg.write_text(CONFIG)
    pk = traffic(1000)
    with fp.PcapWriter(tmp_path / "in.pcap", linktype="ethernet") as w:
        w.write_packets(pk, linktype="ethernet", timestamps_ns=np.arange(1000) * 10)
    rc, out, _ = run(capsys, tmp_path / "in.pcap", "--config", cfg, "--summary", "json",
                     "--batch", "37", "-o", tmp_path / "o.pcapng")
    d = json.loads(out)
    res = expected(pk, "eth0")
    assert rc == 0 and d["packets"] == 1000 and d["batches"] == 28
    assert sum(d["verdicts"].values()) == 1000
    assert d["outputs"]["output"]["packets"] == sum(x.verdict in ("forward", "icmp") for x in res)


@pytest.mark.parametrize("mode", ["noref", "refcount"])
def test_workers_give_the_same_capture_and_summary(files, capsys, mode):
    tmp, cfg, src, pk = files
    outs = {}
    for n in (1, 3):
        rc, out, err = run(capsys, src, "--config", cfg, "-o", tmp / f"o{n}.pcapng", "--drops",
                           tmp / f"d{n}.pcapng", "--summary", "json", "--workers", n, "--mode", mode)
        assert rc == 0, err
        d = json.loads(out)
        for k in ("packets_per_s", "elapsed_s", "datapath_s", "workers", "cpu_s",
                  "cpu_ns_per_packet", "cpus_busy"):
            d.pop(k, None)
        d["outputs"] = {k: v["packets"] for k, v in d["outputs"].items()}
        outs[n] = (d, read(str(tmp / f"o{n}.pcapng")), read(str(tmp / f"d{n}.pcapng")))
    assert outs[1] == outs[3]


def test_the_summary_counts_the_workers_cpu(files, capsys, monkeypatch):
    """The summary's CPU time is this process's over the replay plus what
    the Dataplane's workers (processes of their own) used meanwhile, as
    ``pcap.workers_cpu_s`` reads it before and after; the busy CPUs are
    that time over the wall time."""
    tmp, cfg, src, pk = files
    rc, out, err = run(capsys, src, "--config", cfg, "--summary", "json", "--batch", "16")
    one = json.loads(out)
    assert rc == 0 and 0 < one["cpu_s"] < 5
    assert one["cpu_ns_per_packet"] == pytest.approx(one["cpu_s"] / 50 * 1e9, rel=1e-3)
    assert one["cpus_busy"] == pytest.approx(one["cpu_s"] / one["elapsed_s"], rel=1e-2)
    import fastpath.pcap.loop as loop
    seen = []
    real = loop.workers_cpu_s

    def fake(processor):
        seen.append(type(processor).__name__)
        real(processor)                            # (asks the workers: must not fail)
        return 1.0 if len(seen) == 1 else 3.5      # 2.5 s of the workers' CPU in the replay
    monkeypatch.setattr(loop, "workers_cpu_s", fake)     # (cpu_mark / cpu_since ask it)
    rc, out, err = run(capsys, src, "--config", cfg, "--summary", "json", "--batch", "16",
                       "--workers", "2")
    d = json.loads(out)
    assert rc == 0, err
    assert seen == ["Dataplane", "Dataplane"]
    assert 2.5 < d["cpu_s"] < 2.5 + 5
    assert d["cpus_busy"] == pytest.approx(d["cpu_s"] / d["elapsed_s"], rel=1e-2)
    rc, out, err = run(capsys, src, "--config", cfg, "--batch", "16", "--workers", "2")
    assert rc == 0 and "CPUs busy" in err + out


def test_library_replay_counts_cpu(files, monkeypatch):
    """``pcap.replay``'s ReplayStats.cpu_s: this process's CPU time over the
    replay plus the workers' (read before and after with workers_cpu_s)."""
    import fastpath.pcap.loop as loop
    tmp, cfg, src, pk = files
    r = fastpath.Router()
    r.configure(open(cfg).read())
    st = fp.replay(r, src, output=str(tmp / "o.pcapng"), iif="eth0")
    assert 0 < st.cpu_s < 5 and st.as_dict()["cpu_s"] == round(st.cpu_s, 6)
    calls = iter([1.0, 4.0])
    monkeypatch.setattr(loop, "workers_cpu_s", lambda p: next(calls))
    st = fp.replay(r, src, output=str(tmp / "o2.pcapng"), iif="eth0")
    assert 3.0 < st.cpu_s < 3.0 + 5

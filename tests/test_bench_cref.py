"""The C yardstick (``python -m fastpath.bench_cref``): a plain C End over
DPDK's rte_lpm6 must forward exactly what fastpath forwards, with the same
bytes, or the side-by-side timing compares different work.  Checked here on
the fast path's edges (hop limits, segments left, SRH lengths, TLVs, sources,
MTU), and the check itself must catch a difference.  Needs DPDK's
development files (Debian: libdpdk-dev, which .ci/run installs)."""
import collections
import ipaddress
import shutil
import subprocess

import numpy as np
import pytest

from fastpath import bench_cref
from fastpath.config import State
from fastpath.scenarios import SCENARIOS, _eth, _srv6_base


def _have_dpdk():
    return (shutil.which("pkg-config") is not None and shutil.which("cc") is not None and
            subprocess.run(["pkg-config", "--exists", "libdpdk"]).returncode == 0)


needs_dpdk = pytest.mark.skipif(not _have_dpdk(), reason="DPDK's development files not found "
                                "(pkg-config libdpdk; Debian: apt-get install libdpdk-dev)")

SID = "fc00:1::100"
CFG = "\n".join(_srv6_base(16) + [
    f"ip -6 route add {SID}/128 encap seg6local action End dev eth0",
    "ip -6 route add fc00:1::200/128 encap seg6local action End.X nh6 2001:db8:2::2 dev eth0",
    "ip link set eth2 mtu 1280",
    "ip -6 addr add 2001:db8:3::1/64 dev eth2",
    "ip -6 neigh add 2001:db8:3::2 lladdr 02:00:00:00:00:33 dev eth2",
    "ip -6 route add fc00:3::/32 via 2001:db8:3::2 dev eth2",
    "ip -6 route add unreachable fc00:4::/32",
])


def _a(s):
    return ipaddress.IPv6Address(s).packed


def _end(seg, sid=SID, src="2001:db8:1::2", hlim=64, sl=1, first=1, srh_type=4, hdrlen=None,
         tlv=b"", pad=0):
    segs = _a(seg) + _a(sid)
    srh = bytes([59, hdrlen if hdrlen is not None else (16 * 2 + len(tlv)) // 8, srh_type, sl, first,
                 0, 0, 0]) + segs + tlv
    body = srh + bytes(pad)
    return _eth(bytes([0x60, 0, 0, 0]) + len(body).to_bytes(2, "big") + bytes([43, hlim]) + _a(src)
                + _a(sid) + body)


def _edge_frames():
    f = [_end(f"2400:0:{k:x}::1") for k in range(16)]                    # forwarded
    f += [_end("fc00:2::1", hlim=h) for h in (0, 1, 2)]                  # Time Exceeded, forwarded
    f += [_end("fc00:2::1", sl=s) for s in (0, 3)]                       # SL 0 / beyond the list
    f += [_end("fc00:2::1", first=2), _end("fc00:2::1", srh_type=0), _end("fc00:2::1", hdrlen=3)]
    f += [_end("fc00:2::1", tlv=bytes([4, 6]) + bytes(6)),               # PadN: forwarded
          _end("fc00:2::1", tlv=bytes([4, 9]) + bytes(6))]               # TLV past the header
    f += [_end("fc00:2::1", src=s) for s in ("fe80::1", "::", "ff02::1", "::1")]
    f += [_end("fc00:3::1", pad=p) for p in (0, 1200, 1201)]             # MTU 1280: fits, fits, too big
    f += [_end("fc00:4::1"), _end("fc00:99::1"), _end("2001:db8:1::1")]  # unreachable, no route, local
    f += [_end("fc00:2::1", sid="2001:db8:1::1"), _end("fc00:2::1")[:60]]
    return f


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    if not _have_dpdk():
        pytest.skip("DPDK's development files not found")
    wd = str(tmp_path_factory.mktemp("cref"))
    return bench_cref.build(wd, "cc")[0], wd


def _check(exe, cfg, frames, export_cfg=None, state=False):
    path, wd = exe[1] + "/input.bin", exe[1]
    data, names = bench_cref.export(State().apply(export_cfg or cfg), frames, "eth0", 8)
    with open(path, "wb") as fp:
        fp.write(data)
    return bench_cref.verify(exe[0], path, cfg, frames, "eth0", names, wd, state=state)


@needs_dpdk
@pytest.mark.parametrize("state", [False, True], ids=["plain", "route-state"])
def test_same_frames_forwarded_at_the_edges(exe, state):
    frames = _edge_frames()
    chk = _check(exe, CFG, frames, state=state)
    # the 16 routes, hop limit 2, PadN, and the two that fit the MTU
    assert chk["frames"] == len(frames)
    assert chk["forwarded"] == 16 + 1 + 1 + 2


@needs_dpdk
def test_a_difference_is_caught(exe):
    # another neighbour MAC for the reference: the bytes differ
    other = CFG.replace("lladdr 02:00:00:00:00:22", "lladdr 02:00:00:00:00:23")
    with pytest.raises(RuntimeError, match="the C reference forwards it"):
        _check(exe, CFG, [_end("fc00:2::1")], export_cfg=other)
    # End.X: fastpath forwards it, the reference does not do End.X
    with pytest.raises(RuntimeError, match="does not handle it"):
        _check(exe, CFG, [_end("fc00:2::1", sid="fc00:1::200")])


@needs_dpdk
@pytest.mark.parametrize("state", [False, True], ids=["plain", "route-state"])
def test_random_end_inet_traffic(exe, state):
    cfg, frames, iif = SCENARIOS["End-inet"][1](3000, 512, 512, np.random.default_rng(7))
    chk = _check(exe, cfg, frames, state=state)
    assert chk == {"frames": 512, "forwarded": 512}


@needs_dpdk
def test_cli_side_by_side(capsys):
    assert bench_cref.main(["--runs", "1", "--duration", "0.1", "--sid-len", "48"]) == 0
    out = capsys.readouterr().out
    assert "SID route /48" in out
    assert "of 256 frames all three forward the same 256" in out
    assert "C End, rte_lpm6, kernel's per-route state" in out and "fastpath, 1 worker" in out


def test_cli_without_dpdk(monkeypatch, capsys):
    monkeypatch.setattr(bench_cref.shutil, "which", lambda name: None)
    assert bench_cref.main(["--runs", "1"]) == 2
    err = capsys.readouterr().err
    assert "libdpdk-dev" in err and "Traceback" not in err


def test_cli_bad_arguments(capsys):
    assert bench_cref.main(["--runs", "0"]) == 2
    assert bench_cref.main(["--behavior", "End.X"]) == 2
    assert bench_cref.main(["--sid-len", "16"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_end_inet_scenario():
    """End-inet: next segments inside an Internet-shaped FIB, every frame
    forwarded by an End through one of its routes."""
    from fastpath import Batch, Router
    cfg, frames, iif = SCENARIOS["End-inet"][1](5000, 300, 300, np.random.default_rng(5))
    routes = [ln for ln in cfg.splitlines() if "via 2001:db8:2::2 dev eth1" in ln]
    assert len(routes) > 4900
    lens = collections.Counter(int(ln.split()[4].split("/")[1]) for ln in routes)
    assert lens.most_common(2)[0][0] in (48, 32)
    # spread over many tbl24 entries, as a real table
    assert len({int(ipaddress.IPv6Network(ln.split()[4]).network_address) >> 104 for ln in routes}) > 500
    r = Router()
    r.configure(cfg)
    res = r.process(Batch.from_packets(frames, iif=iif, linktype="ethernet")).results()
    assert {x.verdict for x in res} == {"forward"}

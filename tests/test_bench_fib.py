"""fastpath.bench_fib: the quick run and its JSON, argument errors, the
Internet-shaped tables it generates, and fastpath's LPM cross-checked against
pytricia (a longest-prefix match we did not write) on those tables, through
deletes and re-adds."""
from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import fastpath
from fastpath import bench_fib as bf

try:
    import pytricia
except ImportError:
    pytricia = None

needs_pytricia = pytest.mark.skipif(
    pytricia is None, reason="pytricia not installed (pip install pytricia): "
                             "the cross-check against an independent LPM is skipped")

# the checkout or installation this test imported, for the subprocess too
_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(fastpath.__file__)))


def run(*args, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = _PKG_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "fastpath.bench_fib", *args], capture_output=True,
                       text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


# ----------------------------------------------------------------------------
# the command


def test_quick_run_table_and_json(tmp_path):
    j = tmp_path / "fib.json"
    rc, out, err = run("--quick", "--json", str(j))
    assert rc == 0, err
    assert err == ""                        # progress only on a terminal
    lines = out.splitlines()
    assert lines[0].startswith("# ") and "CPUs" in lines[0] and "kernel" in lines[0]
    assert any(ln.startswith("workload") and "ns/addr" in ln for ln in lines)
    for w in ("ipv6-1k random", "ipv6-1k skewed", "ipv6-10k random", "ipv4-10k skewed"):
        assert any(ln.startswith(w) for ln in lines), w
    assert any(ln.startswith("table") and "nbytes" in ln for ln in lines)
    foot = lines[lines.index(next(ln for ln in lines if ln.startswith("targets"))):]
    assert sum(ln.endswith((" met", " NOT MET", " not measured")) for ln in foot) == 4
    assert "rte_lpm6" in foot[-1]

    data = json.loads(j.read_text())
    assert data["quick"] is True and data["runs"] == 1
    assert set(data["config"]) >= {"batch", "sample", "updates", "seed"}
    assert [t["name"] for t in data["tables"]] == ["ipv6-1k", "ipv6-10k", "ipv4-10k"]
    for t in data["tables"]:
        assert t["family"] in (4, 6) and t["prefixes"] > 0
        assert abs(sum(t["length_mix"].values()) - 1) < 1e-9
        assert t["build_s"] > 0 and t["nbytes"] > 0 and t["groups_in_use"] >= 0
        assert isinstance(t["rss_growth"], int)
        u = t["updates"]
        assert u["count"] > 0 and u["add_per_s"] > 0 and u["delete_per_s"] > 0
        assert u["table_restored"] is True
        assert [r["stream"] for r in t["lookups"]] == ["random", "skewed"]
        for r in t["lookups"]:
            assert set(r["ns"]) == {"median", "min", "max", "runs"} and len(r["ns"]["runs"]) == 1
            assert r["ns"]["min"] <= r["ns"]["median"] <= r["ns"]["max"]
            assert r["mlookups_per_s"] > 0 and r["lpm_lookup_ns"]["median"] > 0
            assert r["lookup_agrees"] is True
            assert ("simple_ns" in r) == (t["family"] == 6)
            if data["pytricia"] is not None:
                assert r["pytricia_mismatches"] == 0
                assert r["speedup"] > 0 and r["speedup_str"] > 0
    assert [t["key"] for t in data["targets"]] == ["ipv6_1k_ns", "ipv4_1M_ns", "speedup",
                                                   "ipv4_1M_mem"]
    assert data["targets"][0]["met"] in (True, False)
    assert data["targets"][1]["met"] is None       # no 1M table in a quick run


@pytest.mark.parametrize("args", [["--runs", "0"], ["--runs", "x"], ["--frobnicate"],
                                  ["--quick", "extra"],
                                  ["--quick", "--json", "/nonexistent-dir/x/fib.json"]])
def test_bad_arguments(args):
    rc, out, err = run(*args)
    assert rc == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert out == ""


# ----------------------------------------------------------------------------
# the generated tables


def _network_ints(table):
    """(address int, length) of every prefix."""
    if table.family == 4:
        return [(int(h) >> 32, int(d)) for h, d in zip(table.hi.tolist(), table.depths.tolist())]
    return [((int(h) << 64) | int(l), int(d))
            for h, l, d in zip(table.hi.tolist(), table.lo.tolist(), table.depths.tolist())]


@pytest.mark.parametrize("family,n", [(6, 20_000), (4, 50_000)])
def test_length_mix_and_well_formed(family, n):
    t = bf.internet_table(family, n)
    assert len(t) == n
    mix = bf.IPV6_LENGTH_MIX if family == 6 else bf.IPV4_LENGTH_MIX
    total = sum(mix.values())
    shares = bf.length_shares(t)
    for length, w in mix.items():
        assert abs(shares.get(length, 0.0) - w / total) < 0.002, length
    assert set(shares) <= set(mix)
    # the headline shares of the issue
    if family == 6:
        assert abs(shares[48] - 0.44) < 0.01 and abs(shares[32] - 0.26) < 0.01
    else:
        assert abs(shares[24] - 0.53) < 0.01
        assert sum(s for d, s in shares.items() if d > 24) > 0.02
    # distinct prefixes, host bits clear, inside global unicast space
    nets = _network_ints(t)
    assert len(set(nets)) == n
    w = t.width
    assert all(a & ((1 << (w - d)) - 1) == 0 for a, d in nets)
    if family == 6:
        assert all(a >> 125 == 1 for a, _ in nets)               # 2000::/3
    else:
        assert all(1 <= a >> 24 <= 223 and a >> 24 not in (10, 127) for a, _ in nets)
    # deterministic
    t2 = bf.internet_table(family, n)
    assert np.array_equal(t.hi, t2.hi) and np.array_equal(t.depths, t2.depths)


def test_tables_are_clustered_like_allocations(monkeypatch):
    """/48s gather in a few /32s and /29s, so the trie shares groups; the
    same lengths spread uniformly would need far more of them."""
    t = bf.internet_table(6, 20_000)
    m48 = t.depths == 48
    n32 = len(np.unique(t.hi[m48] >> np.uint64(32)))
    assert n32 < 0.4 * m48.sum()
    assert 0.4 < bf.more_specific_share(t) < 0.8
    clustered = bf.build_lpm(t).groups_in_use
    monkeypatch.setitem(bf._CLUSTER[6], "inside", 0.0)
    uniform = bf.build_lpm(bf.internet_table(6, 20_000)).groups_in_use
    assert clustered < 0.6 * uniform

    t4 = bf.internet_table(4, 50_000)
    m24 = t4.depths == 24
    assert len(np.unique(t4.hi[m24] >> np.uint64(48))) < 0.6 * m24.sum()
    assert 0.3 < bf.more_specific_share(t4) < 0.9


@pytest.mark.parametrize("family,n", [(6, 5_000), (4, 5_000)])
def test_lookup_streams(family, n):
    t = bf.internet_table(family, n)
    nets = _network_ints(t)
    w = t.width
    for stream in ("random", "skewed"):
        a, idx = bf.lookup_addresses(t, 50_000, stream)
        if family == 4:
            ints = a.tolist()
        else:
            ints = [int.from_bytes(b, "big") for b in bf.pytricia_keys(6, a)]
        for x, i in zip(ints, idx.tolist()):
            net, d = nets[i]
            assert x >> (w - d) == net >> (w - d)
        counts = np.sort(np.bincount(idx, minlength=n))[::-1]
        top = counts[: n // 10].sum() / len(idx)
        if stream == "skewed":
            assert 0.88 < top < 0.92
        else:
            assert top < 0.3
    a2, _ = bf.lookup_addresses(t, 50_000, "random")
    assert np.array_equal(a, bf.lookup_addresses(t, 50_000, "skewed")[0])   # deterministic
    assert not np.array_equal(a, a2) or n == 1


# ----------------------------------------------------------------------------
# cross-check against pytricia


def _probe_addresses(table, rng, k_prefix=3_000, k_random=20_000):
    """Addresses inside the prefixes, at their edges (first, last, and just
    outside), and uniformly random over the whole space (mostly misses)."""
    w = table.width
    inside, _ = bf.lookup_addresses(table, 20_000, "random")
    if table.family == 4:
        ints = inside.tolist()
    else:
        ints = [int.from_bytes(b, "big") for b in bf.pytricia_keys(6, inside)]
    nets = _network_ints(table)
    top = (1 << w) - 1
    for i in rng.choice(len(nets), size=min(k_prefix, len(nets)), replace=False).tolist():
        a, d = nets[i]
        last = a | ((1 << (w - d)) - 1)
        ints += [a, last, max(a - 1, 0), min(last + 1, top)]
    ints += [int.from_bytes(rng.bytes(w // 8), "big") for _ in range(k_random)]
    if table.family == 4:
        return np.array(ints, dtype=np.uint32), ints
    arr = np.frombuffer(b"".join(x.to_bytes(16, "big") for x in ints), dtype=np.uint8)
    return arr.reshape(-1, 16), ints


def _pytricia_answers(trie, ints, family):
    if family == 4:
        keys = ints
    else:
        keys = [x.to_bytes(16, "big") for x in ints]
    return np.array([0 if v is None else v for v in map(trie.get, keys)], dtype=np.uint32)


@needs_pytricia
@pytest.mark.parametrize("family,n", [(6, 20_000), (4, 50_000)])
def test_lookups_match_pytricia(family, n):
    rng = np.random.default_rng(7)
    t = bf.internet_table(family, n)
    lpm = bf.build_lpm(t)
    trie = bf.build_pytricia(t, freeze=False)
    addrs, ints = _probe_addresses(t, rng)

    def check(what):
        got = lpm.lookup_batch(addrs)
        ref = _pytricia_answers(trie, ints, family)
        bad = np.flatnonzero(got != ref)
        assert not len(bad), (f"{what}: {len(bad)} of {len(ref)} differ, e.g. "
                              f"{ipaddress.ip_address(ints[bad[0]])}: fastpath {got[bad[0]]}, "
                              f"pytricia {ref[bad[0]]}")
        assert (ref != 0).mean() > 0.3          # the probe is not all misses

    check("after add_many")
    # delete a fifth of the prefixes (their addresses go to covering routes)
    nets = t.networks()
    gone = rng.choice(n, size=n // 5, replace=False)
    for i in gone.tolist():
        lpm.delete(nets[i])
        trie.delete(str(nets[i]))
    assert len(lpm) == n - len(gone) and len(trie) == n - len(gone)
    check("after deletes")
    # add half of them back with other values, and a default route
    for i in gone[: len(gone) // 2].tolist():
        lpm.add(nets[i], n + 1 + i)
        trie[str(nets[i])] = n + 1 + i
    default = "0.0.0.0/0" if family == 4 else "::/0"
    lpm.add(default, 2 * n + 7)
    trie[default] = 2 * n + 7
    check("after re-adds")

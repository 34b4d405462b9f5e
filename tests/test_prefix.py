"""fastpath._prefix: the compact route prefixes (pyx/_prefix.pyx), held to
ipaddress's networks and to the Python networks that hash once
(config.lexer._HashedNet4/_HashedNet6), which the configuration uses where
the module is not built."""
import ipaddress
import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fastpath.config import lexer

pytestmark = pytest.mark.skipif(lexer._prefix is None, reason="fastpath._prefix is not built")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _nets(draw, fam):
    bits = 32 if fam == 4 else 128
    plen = draw(st.integers(0, bits))
    # (addresses that share leading bits often, so that order and equality
    # are decided late as well as early)
    # (and, for IPv6, hextets that are often zero: runs of every length and
    # place for the text's "::", and IPv4-mapped addresses)
    hextets = st.lists(st.one_of(st.just(0), st.integers(0, 0xFFFF)), min_size=8, max_size=8).map(
        lambda h: sum(x << (16 * k) for k, x in enumerate(h)))
    v = draw(st.one_of(st.integers(0, (1 << bits) - 1),
                       st.sampled_from([0, 1, (1 << bits) - 1, 0x20010DB8 << (bits - 32)]),
                       *([hextets, st.integers(0, (1 << 32) - 1).map(lambda x: 0xFFFF << 32 | x)]
                         if bits == 128 else [])))
    v &= ((1 << bits) - 1) ^ ((1 << (bits - plen)) - 1)
    return v, plen


@st.composite
def prefix_pair(draw):
    fa = draw(st.sampled_from([4, 6]))
    fb = draw(st.sampled_from([4, 6, fa, fa]))
    a = _nets(draw, fa)
    b = a if draw(st.booleans()) and fa == fb else _nets(draw, fb)
    return (fa,) + a, (fb,) + b


def _kinds(fam):
    """(compiled, hashed-once reference, plain ipaddress) makers."""
    c = lexer._Net4 if fam == 4 else lexer._Net6
    h = lexer._HashedNet4 if fam == 4 else lexer._HashedNet6
    ip = ipaddress.IPv4Network if fam == 4 else ipaddress.IPv6Network
    return (lambda v, n: lexer._prefix.make(c, v, n), lambda v, n: lexer._py_net_of(h, v, n),
            lambda v, n: ip((v, n)))


@settings(max_examples=400, deadline=None)
@given(prefix_pair(), st.integers(0, 2), st.integers(0, 2))
def test_compact_prefixes_compare_and_hash_as_ipaddress(pair, ka, kb):
    """Equality, order, hash, str, repr and pickling of the compiled prefix
    are ipaddress's, against its own kind, the hashed-once networks and
    plain ipaddress networks on either side."""
    (fa, va, na), (fb, vb, nb) = pair
    ref_a, ref_b = _kinds(fa)[2](va, na), _kinds(fb)[2](vb, nb)
    a = _kinds(fa)[0](va, na)                  # always one compiled side
    b = _kinds(fb)[kb](vb, nb)
    if ka == 1:
        a, b = b, a
        ref_a, ref_b = ref_b, ref_a
    assert (a == b) == (ref_a == ref_b) and (a != b) == (ref_a != ref_b)
    assert (b == a) == (ref_b == ref_a)
    if ref_a.version == ref_b.version:
        for op in ("__lt__", "__le__", "__gt__", "__ge__"):
            want = getattr(ref_a, op)(ref_b)
            assert eval(f"a {_SYM[op]} b") == want
        assert sorted([a, b]) == sorted([ref_a, ref_b])
    else:
        with pytest.raises(TypeError):
            a < b
    for x, ref in ((a, ref_a), (b, ref_b)):
        assert hash(x) == hash(ref) and x == ref and ref == x
        assert str(x) == str(ref) and repr(x) == repr(ref)
        assert {ref: 1}[x] == 1 and {x: 2}[ref] == 2
        assert pickle.loads(pickle.dumps(x)) == ref and type(pickle.loads(pickle.dumps(x))) is type(x)
        assert isinstance(x, type(ref))
        assert (x.network_address, x.netmask, x.prefixlen, x._prefixlen, x.broadcast_address) == (
            ref.network_address, ref.netmask, ref.prefixlen, ref._prefixlen, ref.broadcast_address)
        assert lexer._net_int(x) == int(ref.network_address)


_SYM = {"__lt__": "<", "__le__": "<=", "__gt__": ">", "__ge__": ">="}


@pytest.mark.parametrize("fam,v,n,why", [
    (4, 0x0A000001, 24, "host bits"), (6, 1, 127, "host bits"), (4, 0, 33, "out of range"),
    (6, 0, 129, "out of range"), (4, 0, -1, "out of range"), (4, 1 << 32, 32, "out of range"),
    (6, 1 << 128, 128, "out of range"), (6, -1, 128, "out of range")])
def test_make_refuses_what_is_not_a_masked_prefix(fam, v, n, why):
    cls = lexer._Net4 if fam == 4 else lexer._Net6
    with pytest.raises(ValueError, match=why):
        lexer._prefix.make(cls, v, n)


def test_a_compact_prefix_is_immutable_and_parses_as_ipaddress():
    p = lexer._Net6("2001:db8::/32")
    with pytest.raises(TypeError, match="immutable"):
        p._set(0, 0)
    with pytest.raises(AttributeError):
        p.network_address = ipaddress.IPv6Address("::")
    assert lexer._Net4(("10.0.0.0", 8)) == ipaddress.ip_network("10.0.0.0/8")
    assert lexer._Net4("10.0.0.1/8", strict=False) == ipaddress.ip_network("10.0.0.0/8")
    with pytest.raises(ValueError):
        lexer._Net4("10.0.0.1/8")              # (ipaddress's own error: host bits)
    assert list(lexer._Net4("10.0.0.1/32").hosts()) == [ipaddress.ip_address("10.0.0.1")]
    assert list(lexer._Net6("2001:db8::/127").hosts()) == list(
        ipaddress.ip_network("2001:db8::/127").hosts())


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([4, 6]), st.data())
def test_lpm_keys_is_the_python_walk(fam, data):
    """The compiled (address, length) arrays of a mixed list of networks
    are those of tables._lpm_keys's Python reference."""
    from fastpath import tables
    n = data.draw(st.integers(0, 40))
    nets = [_kinds(fam)[data.draw(st.integers(0, 2))](*_nets(data.draw, fam)) for _ in range(n)]
    got = lexer._prefix.lpm_keys(nets, fam)
    saved = tables._prefix
    try:
        tables._prefix = None
        want = tables._lpm_keys(nets, fam)
    finally:
        tables._prefix = saved
    assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


_CONFIG_SCRIPT = textwrap.dedent("""
    import json, random, sys
    if sys.argv[1] == "python":
        sys.modules["fastpath._prefix"] = None      # as if not built
    from fastpath import Router
    from fastpath.config import lexer
    assert (lexer._prefix is None) == (sys.argv[1] == "python")
    rng = random.Random(7)
    lines = ["ip link add eth0 type dummy", "ip link set eth0 up",
             "ip addr add 10.0.0.1/24 dev eth0", "ip -6 addr add 2001:db8::1/64 dev eth0"]
    # (each family's routes in a run: an LPM's adds then go in one add_many)
    for fam in (4, 6):
        for k in range(250):
            m = rng.choice(["", " metric 5", " metric 9"])
            if fam == 4:
                lines.append(f"ip route add {rng.randrange(1, 223)}.{k}.{rng.randrange(256)}.0/24 "
                             f"via 10.0.0.{rng.randrange(2, 9)}{m}")
            else:
                lines.append(f"ip -6 route add 2001:db8:{k:x}:{rng.randrange(65536):x}::/"
                             f"{rng.choice([48, 64])} via 2001:db8::{rng.randrange(2, 9):x}{m}")
    lines.append("ip -6 route add fe80::/10 dev eth0 metric 9")
    r = Router().configure("\\n".join(lines))
    r.configure("\\n".join(l.replace(" add ", " del ") for l in lines[4:200:3]))
    import ipaddress
    nets = [ipaddress.ip_network(l.split()[4 if l.startswith("ip -6") else 3], strict=False) for l in lines[4:]]
    def lookup(fam, a):
        # (the LPM's answer itself: the installed route's prefix and metric)
        v = r._tables.lpms[(fam, 254)].lookup(a)
        rt = r._tables.dst_routes.get(v) if v else None
        return None if rt is None else (str(rt.prefix), rt.metric, r.fib_lookup(fam, str(a)))
    look = [lookup(n.version, a) for n in nets for a in (n[1], n.broadcast_address + 1)]
    assert sum(x is not None for x in look) > 400, look
    print(json.dumps({"dump": r.dump(), "routes": [repr(x) for x in r.routes()], "look": look}))
""")


def test_the_python_prefixes_configure_the_same_router():
    """A router configured with the compiled prefixes and one configured
    without the module (the Python networks) dump, install and look up the
    same."""
    out = {}
    for kind in ("compiled", "python"):
        p = subprocess.run([sys.executable, "-c", _CONFIG_SCRIPT, kind], capture_output=True,
                           text=True, timeout=120, cwd=ROOT)
        assert p.returncode == 0, p.stderr[-2000:]
        out[kind] = json.loads(p.stdout)
    assert out["compiled"] == out["python"]
    assert len(out["compiled"]["routes"]) > 400

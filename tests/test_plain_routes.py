"""The plain route lines of a feed (``route add|replace PREFIX via GW [dev
DEV] [metric M] [proto P]``) take a lane of their own inside a transaction
(``_RouteCommands._plain_route``, used by Router/Dataplane.configure); the
general parser stays the reference.  Random lines of that shape -- valid,
wrong in every way the general path refuses or treats specially, and mixed
with the commands that change what a gateway check says (addresses, local
routes, devices) -- applied both ways must leave the same routes, in the
same order, the same dump, and raise the same errors on the same lines."""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastpath import Router
from fastpath.config import ConfigError, State
from fastpath.config.route import _RouteCommands

BASE = ("ip link add eth0 type dummy\nip link add eth1 type dummy\n"
        "ip addr add 10.0.1.1/24 dev eth0\nip addr add 10.0.2.1/24 dev eth1\n"
        "ip -6 addr add 2001:db8:1::1/64 dev eth0\nip -6 addr add 2001:db8:2::1/64 dev eth1\n")

PFX4 = ("20.0.0.0/24", "20.0.1.0/24", "20.0.0.0/16", "20.0.1.5/24", "20.0.0.9", "default",
        "0.0.0.0/0", "300.1.1.1/24", "20.0.2.0/33", "20.0.3.0/24", "10.0.1.0/24")
PFX6 = ("2001:db8:a0::/48", "2001:db8:a1::/48", "2001:db8:a1::1/48", "2001:db8:a2::/64",
        "fe80::/64", "ff00::/8", "::/0", "2001:db8:a3::/129", "2001:db8::g/48")
GW4 = ("10.0.1.2", "10.0.1.2", "10.0.2.3", "10.0.1.1", "10.0.1.7", "224.0.0.1", "0.0.0.0",
       "127.0.0.1", "10.9.9.9", "255.255.255.255", "010.0.1.2", "2001:db8:1::2", "bogus")
GW6 = ("2001:db8:1::2", "2001:db8:1::2", "2001:db8:2::3", "2001:db8:1::1", "fe80::5", "ff02::1",
       "::", "::1", "10.0.1.2", "2001:db8:1::7")
DEVS = ("eth0", "eth0", "eth1", "eth7", None)
METRICS = (None, None, "0", "7", "010", "0x10", "4294967295", "4294967296", "-1", "x")
PROTOS = (None, None, "bird", "unspec", "12", "static", "nosuch")
SUBS = ("add", "add", "replace", "replace", "a", "rep", "change", "append")
HEADS = ("ip route", "ip -4 route", "ip -6 route", "route", "ip -6 ro")
EXTRA = ("", "", "", "", " table 100", " src 10.0.1.1", " onlink", " via 10.0.1.3", " dev eth1",
         " metric 9", " mtu 1400")
# commands that change what a gateway check answers (or the routes a later
# add finds): the lane's cache must not survive them
OTHER = ("ip addr add 10.0.1.7/24 dev eth0", "ip addr del 10.0.1.7/24 dev eth0",
         "ip -6 addr add 2001:db8:1::7/64 dev eth0", "ip -6 addr del 2001:db8:1::7/64 dev eth0",
         "ip route add local 10.0.1.2 dev eth0 table local",
         "ip route del local 10.0.1.2 dev eth0 table local",
         "ip route add broadcast 10.0.2.3 dev eth1 table local",
         "ip link set eth1 down", "ip link set eth1 up", "ip link add eth7 type dummy",
         "ip route flush table main", "ip route del 20.0.0.0/24", "ip -6 route del 2001:db8:a0::/48",
         "sysctl -w net.ipv4.conf.all.forwarding=1")


def pick(rng, values, good):
    """Mostly one of the first ``good`` values (lines the lane takes), else
    any (lines it must leave to the general parser)."""
    return rng.choice(values[:good] if rng.random() < 0.85 else values)


def plain_line(rng) -> str:
    fam6 = rng.random() < 0.4
    head = pick(rng, HEADS, 4 if fam6 else 2)
    if fam6 and head == "ip route" and rng.random() < 0.85:
        head = "ip -6 route"
    words = [head, pick(rng, SUBS, 4), pick(rng, PFX6, 4) if fam6 else pick(rng, PFX4, 4)]
    kws = []
    if rng.random() < 0.97:
        g = pick(rng, GW6, 3) if fam6 else pick(rng, GW4, 3)
        kws.append(("via", ("inet6 " + g) if rng.random() < 0.03 else g))
    d = pick(rng, DEVS, 3)
    if d is not None:
        kws.append(("dev", d))
    m = pick(rng, METRICS, 4)
    if m is not None:
        kws.append(("metric", m))
    p = pick(rng, PROTOS, 4)
    if p is not None:
        kws.append(("proto", p))
    rng.shuffle(kws)
    words += [f"{k} {v}" for k, v in kws]
    return " ".join(words) + (rng.choice(EXTRA) if rng.random() < 0.1 else "")


def transactions(rng, n):
    out = []
    for _ in range(n):
        lines = [plain_line(rng) if rng.random() < 0.9 else rng.choice(OTHER)
                 for _ in range(rng.choice((1, 1, 2, 4, 8)))]
        out.append("\n".join(lines) + "\n")
    return out


def outcome(f):
    try:
        return f(), None
    except ConfigError as e:
        return None, (str(e), e.line)


def run_both(texts):
    """Each text as one transaction on a State in place (the lane) and
    through State.apply (the general parser only); compared after each."""
    lane = State().apply(BASE)
    ref = State().apply(BASE)
    for text in texts:
        saved = lane.begin()

        def go():
            lane.run(text)
            lane.commit()
        _, err = outcome(go)
        if err is not None:
            lane.rollback(saved)
        new, rerr = outcome(lambda: ref.apply(text))
        assert err == rerr, text
        if new is not None:
            ref = new
        assert list(lane.routes.items()) == list(ref.routes.items()), text
        assert lane.dump() == ref.dump(), text


@pytest.fixture
def lane_count(monkeypatch):
    """How often the lane applied a line (a test that never takes it
    proves nothing)."""
    n = {"taken": 0}
    orig = _RouteCommands._plain_put

    def counted(self, *a):
        ok = orig(self, *a)
        n["taken"] += bool(ok)
        return ok
    monkeypatch.setattr(_RouteCommands, "_plain_put", counted)
    return n


@pytest.fixture(params=["compiled", "python"])
def line_reader(request, monkeypatch):
    """The lane with its lines read by fastpath._feed (where built) and by
    the Python parse alone."""
    from fastpath.config import state as S
    if request.param == "compiled":
        if S._plain_line is None:
            pytest.skip("fastpath._feed is not built")
    else:
        monkeypatch.setattr(S, "_plain_line", None)
    return request.param


@pytest.mark.parametrize("seed", range(6))
def test_plain_lane_matches_general_parser(seed, lane_count, line_reader):
    run_both(transactions(random.Random(seed), 250))
    assert lane_count["taken"] > 50


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 2**32 - 1))
def test_plain_lane_hypothesis(seed):
    run_both(transactions(random.Random(seed), 40))


def test_cache_emptied_by_a_local_route_in_the_same_configure():
    """A gateway validated by the lane becomes a local route's address
    later in the same configure: the next line through it is refused
    (line 3), as the kernel refuses it, and nothing is applied."""
    r = Router()
    r.configure(BASE)
    before = r.dump()
    with pytest.raises(ConfigError) as e:
        r.configure("route add 20.0.0.0/24 via 10.0.1.2 dev eth0\n"
                    "ip route add local 10.0.1.2 dev eth0 table local\n"
                    "route add 20.0.1.0/24 via 10.0.1.2 dev eth0\n")
    assert e.value.line == 3 and "invalid gateway" in e.value.message
    assert r.dump() == before
    # and across configures: the cache kept from a committed one goes too
    r.configure("route add 20.0.0.0/24 via 10.0.1.2 dev eth0\n")
    r.configure("ip addr add 10.0.1.2/24 dev eth1\n")
    with pytest.raises(ConfigError) as e:
        r.configure("route add 20.0.1.0/24 via 10.0.1.2 dev eth0\n")
    assert "invalid gateway" in e.value.message


def test_lane_routes_share_their_nexthops(lane_count):
    r = Router()
    r.configure(BASE + "".join(f"route add 20.0.{k}.0/24 via 10.0.1.2 dev eth0\n"
                               for k in range(50)))
    rs = [x for x in r.state.routes.values() if x.proto == "boot"]
    assert len(rs) == 50 and lane_count["taken"] == 50
    assert len({id(x.nexthops) for x in rs}) == 1
    assert r.dump() == Router().configure(r.dump()).dump()


def test_a_large_configure_leaves_no_young_garbage_pass():
    """A configure that allocates more than router._GC_AFTER objects with
    the collector paused ends with the full collection it put off: its
    objects are in the oldest generation afterwards, so no later call pays
    for walking them young.  A small configure does not collect."""
    import gc
    from fastpath import router as R
    if not gc.isenabled():
        pytest.skip("the collector is disabled in this process")
    r = Router()
    r.configure("ip addr add 10.0.1.1/24 dev eth0\n")
    n = R._GC_AFTER // 6                # a plain route leaves ~8 tracked objects
    big = "".join(f"route add 20.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}/32 via 10.0.1.2 "
                  "dev eth0\n" for i in range(n))
    def young():
        return len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1))
    gc.collect()
    r.configure(big)
    assert young() < 20_000, young()                # all of the load's in the oldest
    gc.collect()
    r.configure("route add 30.0.0.0/24 via 10.0.1.2 dev eth0\n")
    assert young() > 0                              # (left for the collector's own pace)


def test_a_churn_batch_goes_to_the_oldest_generation_unwalked(monkeypatch):
    """A configure of router._PROMOTE_LINES lines or more (churn: replaces
    that free as much as they make) leaves nothing young and runs no
    collection: its objects, and what the program had young then, go to
    the oldest generation unwalked -- a reference cycle of the program's
    then stays until a full collection, which the promotions still bring
    once _PROMOTE_COLLECT objects went that way.  Nothing is left frozen,
    a program's own frozen objects stay frozen, and with the collector
    disabled by the program nothing is touched."""
    import gc
    import weakref
    from fastpath import router as R
    if not gc.isenabled():
        pytest.skip("the collector is disabled in this process")
    gc.unfreeze()

    class Cycle:
        pass

    def cycle():
        a = Cycle()
        a.me = a
        return weakref.ref(a)

    def young():
        return len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1))

    def churn(flip):
        return "".join(f"route replace 20.0.{i >> 8 & 255}.{i & 255}/32 via 10.0.1.{2 + flip} "
                       "dev eth0\n" for i in range(2000))
    r = Router()
    r.configure("ip addr add 10.0.1.1/24 dev eth0\n" + churn(0))
    gen = []
    cb = lambda phase, info: gen.append(info["generation"]) if phase == "start" else None
    gc.collect()
    gc.callbacks.append(cb)
    try:
        w = cycle()
        r.configure(churn(1))
        assert gen == [] and young() < 100, (gen, young())
        assert gc.get_freeze_count() == 0
        gc.collect(1)
        assert w() is not None                  # promoted with the batch, unexamined
        gc.collect()
        assert w() is None                      # a full collection takes it
        # the backstop
        monkeypatch.setattr(R, "_PROMOTE_COLLECT", 1)
        w, gen[:] = cycle(), []
        r.configure(churn(0))
        assert w() is None and 2 in gen
        monkeypatch.undo()
        # a program's frozen objects stay frozen
        keep = Cycle()
        gc.freeze()
        r.configure(churn(1))
        assert gc.get_freeze_count() > 0
        assert not any(o is keep for o in gc.get_objects())   # still in the permanent one
        gc.unfreeze()
        assert any(o is keep for o in gc.get_objects(generation=2))
        del keep
        # the collector disabled by the program: left as it is
        gc.collect()
        gc.disable()
        try:
            r.configure(churn(0))
            assert not gc.isenabled() and young() > 1000
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(cb)
        gc.unfreeze()
    assert r.dump() == Router().configure(r.dump()).dump()


def test_frozen_after_a_load_and_still_freed(monkeypatch):
    """In fastpath's own processes (router.freeze_after_loads) a large
    configure ends with gc.freeze() instead of a collection: its objects
    are out of every later pass, and dropping the Router still frees them
    (reference counting: a configuration makes no cycles)."""
    import gc
    from fastpath import router as R
    if not gc.isenabled():
        pytest.skip("the collector is disabled in this process")
    monkeypatch.setattr(R, "_FREEZE", True)
    n = R._GC_AFTER // 6
    big = "".join(f"route add 20.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}/32 via 10.0.1.2 "
                  "dev eth0\n" for i in range(n))
    gc.unfreeze()
    gc.collect()
    try:
        r = Router()
        r.configure("ip addr add 10.0.1.1/24 dev eth0\n")
        r.configure(big)
        frozen = gc.get_freeze_count()
        assert frozen > 5 * n, frozen
        del r
        assert frozen - gc.get_freeze_count() > 5 * n     # freed though frozen
        assert gc.collect() == 0                           # and nothing cyclic left over
    finally:
        gc.unfreeze()


def _prefix_tokens():
    v4 = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 40)).map(
        lambda t: f"{t[0] >> 24}.{t[0] >> 16 & 255}.{t[0] >> 8 & 255}.{t[0] & 255}/{t[1]}")
    v4m = st.tuples(st.integers(0, 2**24 - 1), st.integers(0, 32)).map(
        lambda t: f"{t[0] >> 16}.{t[0] >> 8 & 255}.{t[0] & 255}.0/{t[1]}")
    v6 = st.tuples(st.integers(0, 2**128 - 1), st.integers(0, 140)).map(
        lambda t: f"{__import__('ipaddress').IPv6Address(t[0])}/{t[1]}")
    odd = st.sampled_from(("default", "all", "10.0.0.0", "10.0.0.0/", "10.0.0.0/024",
                           "10.0.0.0/+8", "10.0.0.0/٨", "10.0.0/8", "010.0.0.0/8", "10.0.0.0/8/8",
                           "fe80::1%eth0/64", "::ffff:1.2.3.4/96", "::/0", "0.0.0.0/0",
                           "1.2.3.4.5/32", "2001:db8::/0048", " 10.0.0.0/8", "2001:db8::g/48"))
    return st.one_of(v4, v4m, v6, odd, st.text(max_size=20))


@settings(max_examples=400, deadline=None)
@given(_prefix_tokens(), st.sampled_from((None, 4, 6)))
def test_plain_prefix_is_parse_prefix(tok, fam):
    """The lane's prefix parse (lexer._plain_prefix_fields, the network
    made of its fields by _net_of as the lane makes it) gives
    _parse_prefix's network, or leaves the token to it: never another
    answer."""
    from fastpath.config.lexer import _Net4, _Net6, _net_of, _parse_prefix, _plain_prefix_fields
    f = _plain_prefix_fields(tok, fam)
    if f is None:
        return
    got = f[0], _net_of(_Net6 if f[0] == 6 else _Net4, f[1], f[2])
    a, _n, net = _parse_prefix(tok, fam)        # (raises if the lane took a bad one)
    assert got == (a.version, net) and type(got[1]) is type(net)
    assert got[1].prefixlen == net.prefixlen and hash(got[1]) == hash(net)
    assert a.version == 6 or net.network_address == a     # (IPv4: no host bits)


def _logical_lines_reference(text):
    """lexer._logical_lines before its fast path for lines without a
    continuation (kept as the reference it is held to)."""
    buf, start = None, 0
    for n, line in enumerate(text.splitlines(), start=1):
        if buf is None:
            start = n
        stripped = line.rstrip()
        cont = False
        if not stripped.lstrip().startswith("#"):
            k = len(stripped) - len(stripped.rstrip("\\"))
            if k % 2 == 1:
                cont = True
                line = stripped[:-1]
        buf = line if buf is None else buf + " " + line
        if not cont:
            yield start, buf
            buf = None
    if buf is not None:
        yield start, buf


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["route add 20.0.0.0/24 via 10.0.1.2", "", " ", "# c \\",
                                 "  # x", "a \\", "b \\\\", "c\\\\\\ ", "\\", " \\ ", "d\t\\\t",
                                 "ip -6 route add ::/0 dev eth0 "]), max_size=12))
def test_logical_lines_is_reference(lines):
    """The line joiner's fast path (a line that does not end in a
    backslash, outside a continuation, as it is) gives the same commands,
    with the same first line numbers, as the general walk."""
    from fastpath.config.lexer import _logical_lines
    text = "\n".join(lines)
    assert list(_logical_lines(text)) == list(_logical_lines_reference(text))


def test_new_route_is_a_route():
    """objects.new_route (a feed line's fast constructor) makes the Route
    the dataclass makes: its type, fields, equality and hash, and frozen."""
    import dataclasses
    import ipaddress

    from fastpath.config.objects import Nexthop, Route, new_route
    vals = (6, ipaddress.ip_network("2001:db8::/48"), 254, "unicast", 1024,
            (Nexthop(ipaddress.ip_address("2001:db8:1::2"), "eth0", 1),), None, "bird", None,
            ipaddress.ip_address("2001:db8::1"), 1400, None, 64)
    a, b = new_route(*vals), Route(*vals)
    assert type(a) is Route and a == b and hash(a) == hash(b) and repr(a) == repr(b)
    assert dataclasses.astuple(a) == dataclasses.astuple(b)
    assert dataclasses.replace(a, metric=5) == dataclasses.replace(b, metric=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.metric = 7
    assert new_route(*vals[:4], 1, *vals[5:]) != b


@pytest.mark.parametrize("line", ["route add ::\x00/8 via 10.0.1.2", "route add 1.2.3.\x00/8 via 10.0.1.2",
                                  "route add 20.0.0.0/24 via 10.0.1.\x00", "ip addr add 1.2.3.\x00/24 dev eth0",
                                  "ip -6 route add 2001:db8:a0::\x00/48 via 2001:db8:1::2"])
def test_an_embedded_nul_is_a_config_error(line):
    """A NUL inside an address (socket.inet_pton raises ValueError on it,
    not OSError) is a line-numbered ConfigError on both paths, and
    nothing changes."""
    r = Router()
    r.configure(BASE)
    before = r.dump()
    with pytest.raises(ConfigError) as e:
        r.configure("route add 20.0.9.0/24 via 10.0.1.2\n" + line + "\n")
    assert e.value.line == 2 and r.dump() == before
    with pytest.raises(ConfigError):
        State().apply(BASE + line + "\n")


# -- fastpath._feed: a whole line read in C, held to the Python parse --------
_WORDS = ("route", "ip", "-6", "-4", "-46", "add", "replace", "rep", "via", "dev", "metric",
          "proto", "bird", "unspec", "nosuch", "eth0", "10.0.1.2", "2001:db8:1::2",
          "20.0.0.0/24", "20.0.0.1/24", "2001:db8:a1::1/48", "::/0", "0.0.0.0/0", "7", "010",
          "4294967295", "4294967296", "00000000000000000000001", "#", "#x", "a#b", "'q'",
          "\"q\"", "x\\", "٨", "1.2.3.4/٨", "10.0.0.0/8/8", "10.0.0.0/", "/8", "fe80::1%eth0/64",
          "::ffff:1.2.3.4/96", "1.2.3.4.5/32", "2001:db8::/0048", "10.0.0.0/+8", "\x00/8",
          "::\x00/8", "1" * 70 + "/8", "a" * 70 + ":/8", "1.2.3/24", "2001:db8::/129", "1.2.3.0/33")
_SEPS = (" ", " ", " ", "  ", "\t", "\x0b", "\x1c", "\x1f", "\xa0", "\u2003", "\x00")


def _reference_fields(line):
    """What State._run's Python way reads of a line: its words, the
    dispatch to the lane, _plain_fields; None where the lane would not
    take it."""
    from fastpath.config.lexer import _split_line
    from fastpath.config.route import _plain_fields
    from fastpath.config.state import _plain_command
    try:
        toks = _split_line(line)
    except ConfigError:
        return None
    cmd = _plain_command(toks) if toks else None
    return _plain_fields(*cmd) if cmd is not None else None


def _compiled_fields(line):
    """What State._run takes from fastpath._feed.plain_line for a line."""
    from fastpath.config.state import _read_plain_line
    return _read_plain_line(line)


def _check_line(line):
    got = _compiled_fields(line)
    if got is not None:          # (None: the Python way reads it, whatever it is)
        assert got == _reference_fields(line), repr(line)
        assert type(got[2]) is int and type(got[3]) is int


def _lines():
    head = st.sampled_from(("route", "ip route", "ip -6 route", "ip -4 route", "ip", "route route"))
    body = st.lists(st.sampled_from(_WORDS), max_size=11)
    return st.tuples(head, st.sampled_from(("add", "replace", "append", "")), st.one_of(
        st.sampled_from(_WORDS), _prefix_tokens()), body, st.lists(st.sampled_from(_SEPS),
                                                                   min_size=16, max_size=16))


@settings(max_examples=1500, deadline=None)
@given(_lines())
def test_compiled_line_reader_is_the_python_parse(parts):
    """plain_line (C) gives exactly what the Python parse of the same line
    gives wherever it answers: the same command, family, prefix, gateway,
    device, metric and protocol, for random lines of feed words, odd
    whitespace, quotes, comments and bad prefixes."""
    pytest.importorskip("fastpath._feed")
    head, sub, pfx, body, seps = parts
    words = head.split() + ([sub] if sub else []) + [pfx] + body
    line = seps[0] * (seps[1] == "\t") + "".join(w + seps[(i + 2) % 16] for i, w in enumerate(words))
    _check_line(line)
    _check_line(line.strip())


@pytest.mark.parametrize("seed", range(3))
def test_compiled_line_reader_takes_the_feed_lines(seed):
    """The generator's lines (mostly ones the lane takes): where the Python
    parse takes one, so does plain_line -- unless the line holds what plain_line
    leaves to Python (a '#', a quote, a backslash, non-ASCII) --, and with the
    same answer."""
    pytest.importorskip("fastpath._feed")
    from fastpath._feed import plain_line as c_plain_line
    rng = random.Random(seed)
    taken = 0
    for _ in range(3000):
        line = plain_line(rng)
        ref = _reference_fields(line)
        got = _compiled_fields(line)
        special = any(c in line for c in "#'\"\\") or not line.isascii()
        if ref is not None and not special:
            assert got == ref, line
            taken += 1
        elif got is not None:
            assert got == ref, line
    assert taken > 1000 and c_plain_line("route add 20.0.0.0/24 via 10.0.1.2") is not None


@pytest.mark.parametrize("line", [
    "route add 20.0.0.0/24 via #x", "route add 20.0.0.0/24 via 10.0.1.2 dev #eth0",
    "ip -6 route add 2001:db8:a0::/48 via 2001:db8:1::2 proto #bird",
    "route add 20.0.0.0/24 via '10.0.1.2'", 'route add 20.0.0.0/24 via "10.0.1.2"',
    "route add 20.0.0.0/24 via 10.0.1.2\\", "route add 20.0.0.0/24 via 10.0.1.\\2",
    "route\tadd\x0b20.0.0.0/24\x1cvia\x1f10.0.1.2", "route add 20.0.0.0/24\xa0via 10.0.1.2",
    "route add 20.0.0.0/24 via 10.0.1.2 metric 00000000000000000000004294967295",
    "route add 20.0.0.0/24 via 10.0.1.2 metric 4294967296", "ip -4 route add 2001:db8::/32 via ::1",
    "ip -6 route add 20.0.0.0/24 via 10.0.1.2", "route add 2001:db8::1/128 via ::1",
    "route add 2001:db8::1/127 via ::1", "route add 20.0.0.1/32 via 10.0.1.2",
    "route add 20.0.0.1/31 via 10.0.1.2", "route add 0.0.0.0/0 via 10.0.1.2",
    "route add ::/0 via ::1", "ip route replace 20.0.0.0/24 via 10.0.1.2 via 10.0.1.3",
])
def test_compiled_line_reader_fixed_lines(line):
    pytest.importorskip("fastpath._feed")
    _check_line(line)
    assert (_compiled_fields(line) is None) == (_reference_fields(line) is None or any(
        c in line for c in "#'\"\\") or not line.isascii()), line

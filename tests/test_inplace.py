"""The Dataplane's tables updated in place, RCU style (Dataplane._publish):

- the LPM's deferred group frees (limbo), ``reserve`` and ``frozen``;
- random sequences of changes applied to a running Dataplane give exactly
  the answers of a Router compiled from scratch from the same State, in
  both route-cache modes;
- the big tables are shared memory named by the snapshot, not copies, and
  the segments do not pile up;
- churn while two workers forward: no torn lookup or use of a reclaimed
  entry (generation tags), every packet accounted for, references back to
  base, and memory (LPM groups, route entries, nexthop rows, segments)
  back to its baseline once the churn stops.
"""
from __future__ import annotations

import ipaddress
import os
import random
import threading
import time

import numpy as np
import pytest

from fastpath import Dataplane, Router
from fastpath.config import ConfigError
from fastpath.lpm import Lpm
from fastpath.scenarios import SCENARIOS
from fastpath.tables import compile_tables

try:
    from .test_delta import BASE, compare, step_text
except ImportError:  # pragma: no cover - tests/ as a plain directory on sys.path
    from test_delta import BASE, compare, step_text

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm")


def scenario(name, n_routes=100, batch=256, flows=64, seed=1):
    return SCENARIOS[name][1](n_routes, batch, flows, np.random.default_rng(seed))


def segments(prefix):
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(prefix))


# ---------------------------------------------------------------------------
# the LPM's part

def test_deferred_group_frees_wait_for_release():
    lpm = Lpm(6)
    lpm.defer_free = True
    lpm.add("2001:db8:1::/48", 5)              # 3 groups (bytes 3, 4, 5)
    assert lpm.groups_in_use == 3
    before = lpm.groups.copy()
    lpm.delete("2001:db8:1::/48")
    assert lpm.groups_in_use == 0 and lpm.groups_deferred == 3
    # a reader still inside a freed group finds it as it was left: uniform,
    # the covering answer (none)
    freed = [g for g in range(1, len(before)) if before[g].any()]
    assert all((lpm.groups[g] == lpm.groups[g][0]).all() for g in freed)
    # ... and no add may reuse one before release_deferred()
    lpm.add("2001:db8:2::/48", 6)
    now = {g for g in range(1, len(lpm.groups)) if lpm.groups[g].any()}
    assert not now & set(freed)
    assert lpm.lookup("2001:db8:2::1") == 6 and lpm.lookup("2001:db8:1::1") == 0
    assert lpm.release_deferred() == 3 and lpm.groups_deferred == 0
    hwm = lpm._core.meta[1]
    lpm.add("2001:db8:3::/48", 7)              # now reused: the high-water mark stays
    assert lpm._core.meta[1] == hwm
    assert lpm.lookup("2001:db8:3::1") == 7 and lpm.lookup("2001:db8:2::1") == 6


def test_turning_deferral_off_releases_the_limbo():
    lpm = Lpm(4)
    lpm.defer_free = True
    lpm.add("10.1.2.128/25", 3)
    lpm.delete("10.1.2.128/25")
    assert lpm.groups_deferred == 1
    lpm.defer_free = False
    assert lpm.groups_deferred == 0 and lpm.groups_in_use == 0


def test_reserve_grows_before_and_frozen_refuses_to_grow():
    lpm = Lpm(6)
    gen = lpm.generation
    assert lpm.reserve(1000) is True and lpm.generation == gen + 1
    assert len(lpm.groups) > 1000
    assert lpm.reserve(1000) is False
    lpm.frozen = True
    k = 0
    with pytest.raises(RuntimeError, match="reserve"):
        while True:                            # fills the reserve, then must refuse
            lpm.add(f"2001:db8:{k:x}::/64", 1 + k)
            k += 1
    lpm.frozen = False
    # the refused add changed nothing: every prefix before it answers
    assert lpm.lookup(f"2001:db8:{k - 1:x}::1") == k and lpm.lookup(f"2001:db8:{k:x}::1") == 0
    lpm.add(f"2001:db8:{k:x}::/64", 1 + k)
    assert lpm.lookup(f"2001:db8:{k:x}::1") == k + 1


def test_lpm_arrays_from_an_allocator():
    made = []

    def alloc(shape, dtype):
        a = np.zeros(shape, dtype=dtype)
        made.append(a)
        return a

    lpm = Lpm(6, alloc=alloc)
    assert lpm.tbl24 is made[0] and lpm.groups is made[1]
    lpm.reserve(500)
    assert lpm.groups is made[2]
    with pytest.raises(TypeError, match="alloc must return"):
        Lpm(4, alloc=lambda shape, dtype: np.zeros(shape, dtype=np.int64))


# ---------------------------------------------------------------------------
# the Dataplane against a Router compiled from scratch

def _scratch(state):
    ref = Router()
    ref.state = state.copy()
    ref._tables = compile_tables(ref.state)
    ref._load()
    return ref


@pytest.mark.parametrize("seed,mode", [(31, "noref"), (32, "noref"), (33, "refcount")])
def test_in_place_changes_match_a_fresh_compile(seed, mode):
    rng = random.Random(seed)
    with Dataplane(BASE, workers=1, mode=mode, max_routes=4096) as dp:
        compare(dp, _scratch(dp.state), rng, 60)
        for _ in range(25):
            text = step_text(rng, 30, dp.state)
            before = dp.state.dump()
            try:
                dp.configure(text)
            except (ConfigError, ValueError):
                assert dp.state.dump() == before, text
            compare(dp, _scratch(dp.state), rng, 60)
        assert dp.refcounts()["retired_pending"] == 0


def test_big_tables_are_shared_not_copied():
    cfg, pkts, iif = scenario("End")
    with Dataplane(cfg, workers=1) as dp:
        t = dp.tables
        ref = dp._arena.ref
        # the LPMs, nexthop rows, seg6local records, SRH templates: arena
        # segments, the same memory the snapshot names
        for a in [t.nhs, t.s6l, t.srh_blob] + [x for lpm in t.lpms.values()
                                                for x in (lpm.tbl24, lpm.groups)]:
            assert ref(a)[0].startswith(dp.prefix + "a")
        segs = segments(dp.prefix)
        for k in range(30):
            dp.configure(f"ip -6 route replace 2600:{k % 5}::/48 via 2001:db8:2::2 dev eth1")
        # one snapshot at a time; arena segments replaced by growth unlinked
        after = segments(dp.prefix)
        assert len([s for s in after if s.startswith(dp.prefix + "snap")]) == 1
        assert len(after) <= len(segs) + 1
    assert segments(dp.prefix) == []


def test_groups_growing_during_a_configure_while_forwarding():
    """A configure that needs many more LPM groups than exist (reserve
    grows ``groups`` into a new segment, published before any entry points
    into it) while workers forward: every packet still answered."""
    cfg, pkts, iif = scenario("End")
    with Dataplane(cfg, workers=2, max_routes=1 << 14, check_gen=True) as dp:
        lpm_gen = {k: lpm.generation for k, lpm in dp.tables.lpms.items()}
        out = {}
        th = threading.Thread(target=lambda: out.setdefault(
            "res", dp.bench(pkts, iif, "ethernet", duration=1.2, start_delay=0.1)))
        th.start()
        time.sleep(0.2)
        for rnd in range(4):
            dp.configure("\n".join(f"ip -6 route replace 2a00:{rnd}:{j:x}::/64 via 2001:db8:2::2 dev eth1"
                                   for j in range(1500)))
        th.join()
        res = out["res"]
        assert all(r["packets"] > 0 for r in res)
        assert sum(sum(r["reasons"]) for r in res) == sum(r["packets"] for r in res)
        assert dp.counters()["gen_violations"] == 0
        assert any(lpm.generation != lpm_gen.get(k) for k, lpm in dp.tables.lpms.items())
        b = dp.process(_batch(["2a00:3:5db::1", "2a00:0:1::7"], pkts, iif))
        assert [int(x) for x in b.oif] == [dp.tables.ifindex["eth1"]] * 2


def test_a_change_between_existing_nexthops_publishes_no_snapshot():
    """A configure that writes no nexthop row, seg6local record or small
    table (Tables.load_key unchanged) leaves step 2 of the publication out:
    no new snapshot, and the workers still forward by the new entries; one
    that writes a row, or changes a small table, publishes one."""
    cfg, pkts, iif = scenario("End")
    cfg += "\nip -6 route add 2a00:1::/48 via 2001:db8:2::2 dev eth1\n"
    with Dataplane(cfg, workers=2, check_gen=True) as dp:
        def hop(dst):
            out = dp.process(_batch([dst], pkts, iif)).results()[0]
            assert (out.verdict, out.oif) == ("forward", "eth1"), out
            return str(out.nexthop)

        n = dp._snap_no
        dp.configure("ip -6 route add 2a00:2::/48 via 2001:db8:2::2 dev eth1")
        assert dp._snap_no == n and hop("2a00:2::1") == "2001:db8:2::2"
        dp.configure("ip -6 route replace 2a00:2::/48 via 2001:db8:2::9 dev eth1")   # a new row
        assert dp._snap_no == n + 1 and hop("2a00:2::1") == "2001:db8:2::9"
        dp.configure("ip -6 route replace 2a00:2::/48 via 2001:db8:2::2 dev eth1")
        dp.configure("ip -6 route replace 2a00:1::/48 via 2001:db8:2::9 dev eth1")   # an idle row
        assert dp._snap_no == n + 1
        assert hop("2a00:2::1") == "2001:db8:2::2" and hop("2a00:1::1") == "2001:db8:2::9"
        dp.configure("ip -6 route del 2a00:2::/48")
        assert dp._snap_no == n + 1
        assert dp.process(_batch(["2a00:2::1"], pkts, iif)).results()[0].verdict != "forward"
        dp.configure("sysctl -w net.ipv6.conf.all.hop_limit=33")                     # a small table
        assert dp._snap_no == n + 2 and hop("2a00:1::1") == "2001:db8:2::9"
        assert dp.counters()["gen_violations"] == 0


def _batch(dsts, pkts, iif):
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    from fastpath import Batch
    frames = []
    for d in dsts:
        e = Ether(pkts[0])
        frames.append(bytes(Ether(src=e.src, dst=e.dst) / IPv6(src="2001:db8:1::9", dst=d, hlim=64)
                            / UDP(sport=1, dport=2) / b"x"))
    return Batch.from_packets(frames, iif=iif, linktype="ethernet")


@pytest.mark.parametrize("mode", ["noref", "refcount"])
def test_churn_returns_memory_to_its_baseline(mode):
    """Two workers forward while routes are added and deleted in batches,
    cycle after cycle: afterwards the entries, LPM groups, nexthop rows,
    seg6local records and segments are as before the churn, and every
    reference is back to base."""
    cfg, pkts, iif = scenario("End")
    adds = "\n".join(f"ip -6 route add 2a01:{j % 7}:{j:x}::/56 via 2001:db8:2::{2 + j % 3} dev eth1"
                     for j in range(400))
    adds += "\nip -6 route add fc00:77::/64 encap seg6local action End dev eth1"
    dels = "\n".join(f"ip -6 route del 2a01:{j % 7}:{j:x}::/56" for j in range(400))
    dels += "\nip -6 route del fc00:77::/64"
    with Dataplane(cfg, workers=2, mode=mode, max_routes=1 << 12, check_gen=True) as dp:
        t = dp.tables

        def usage():
            return (len(t.entries), sorted((k, lpm.groups_in_use, lpm.groups_deferred)
                                           for k, lpm in t.lpms.items()),
                    len(t.free_dsts), len(t.nh_shared), t.s6l_pool.end, len(t.s6l_recs),
                    len(segments(dp.prefix)))

        dp.configure(adds)                   # the pools' high-water marks, once
        dp.configure(dels)
        base = usage()
        out = {}
        th = threading.Thread(target=lambda: out.setdefault(
            "res", dp.bench(pkts, iif, "ethernet", duration=1.5, start_delay=0.1)))
        th.start()
        time.sleep(0.2)
        cycles = 0
        t_end = time.monotonic() + 1.1
        while time.monotonic() < t_end:
            dp.configure(adds)
            dp.configure(dels)
            cycles += 1
        th.join()
        res = out["res"]
        assert cycles >= 2 and all(r["packets"] > 0 for r in res)
        assert sum(sum(r["reasons"]) for r in res) == sum(r["packets"] for r in res)
        assert dp.counters()["gen_violations"] == 0
        dp.configure("")                     # a last grace period and reclaim
        assert dp.refcounts() == {"shared": {}, "workers": {}, "retired_pending": 0}
        assert usage() == base
        live = [e.dst for e in t.entries.values()]
        assert (dp.dsts["refcnt"][live] == 1).all()


def test_route_caches_emptied_after_the_lpm_changes(monkeypatch):
    """A worker that forwards between the snapshot's publication and the
    LPM changes (it caches the old route, the null entry or the replaced
    one) must not keep using it once the configure returns: the second
    publication tells it to empty its route caches."""
    from fastpath import dataplane as dpmod
    cfg, pkts, iif = scenario("End")
    cfg += "\nip -6 route add 2a02::/48 via 2001:db8:2::2 dev eth1\n"
    cfg += "ip -6 neigh add 2001:db8:2::3 lladdr 02:00:00:00:00:23 dev eth1\n"
    with Dataplane(cfg, workers=1) as dp:
        b = _batch(["2a02::1"], pkts, iif)
        seen = []
        real = dpmod.apply_lpm

        def apply_after_forwarding(t):
            seen.append(bytes(dp.process(b.copy()).nexthop[0]))   # the worker caches the old route
            real(t)
        monkeypatch.setattr(dpmod, "apply_lpm", apply_after_forwarding)
        dp.configure("ip -6 route replace 2a02::/48 via 2001:db8:2::3 dev eth1")
        monkeypatch.setattr(dpmod, "apply_lpm", real)
        out = dp.process(b.copy())
        assert seen == [ipaddress.IPv6Address("2001:db8:2::2").packed]
        assert out.results()[0].verdict == "forward", out.results()[0]
        assert bytes(out.nexthop[0]) == ipaddress.IPv6Address("2001:db8:2::3").packed


def test_a_change_beyond_capacity_is_refused_before_anything_changes():
    cfg, pkts, iif = scenario("End")
    with Dataplane(cfg, workers=1, max_routes=256) as dp:
        before = dp.state.dump()
        free = len(dp.tables.free_dsts)
        with pytest.raises(ValueError, match="route table full"):
            dp.configure("\n".join(f"ip -6 route add 2a03:{j:x}::/48 via 2001:db8:2::2 dev eth1"
                                   for j in range(free + 1)))
        assert dp.state.dump() == before and len(dp.tables.free_dsts) == free
        dp.configure("ip -6 route add 2a03::/48 via 2001:db8:2::2 dev eth1")
        b = dp.process(_batch(["2a03::1"], pkts, iif))
        assert b.results()[0].verdict == "forward"


def test_a_whole_state_beyond_capacity_is_refused_and_the_old_one_stays():
    """Dataplane._replace_state (a reload of fastpath.run with shared
    tables) with more new routes than free entries: ValueError before any
    entry changes, and the running configuration still answers; a state
    that fits is then taken."""
    from fastpath.config import State
    cfg, pkts, iif = scenario("End")
    from fastpath import Batch

    def answers():
        out = dp.process(Batch.from_packets(pkts, iif=iif, linktype="ethernet"))
        return [(r.verdict, r.reason, r.oif) for r in out.results()] + out.packets()
    with Dataplane(cfg, workers=1, max_routes=256) as dp:
        before, ref = dp.state.dump(), answers()
        assert any(v == "forward" for v, *_ in ref[:-1])
        free = len(dp.tables.free_dsts)
        # (its neighbour of the nexthop changes too: the small tables
        # must come back with the routes)
        big = State().apply(cfg + "\nip -6 neigh replace 2001:db8:2::2 lladdr 02:00:00:00:00:99 "
                            "dev eth1\n" + "".join(f"ip -6 route add 2a03:{j:x}::/48 via 2001:db8:2::2 "
                                          "dev eth1\n" for j in range(free + 1)))
        with pytest.raises(ValueError, match="route table full"):
            dp._replace_state(big)
        assert dp.state.dump() == before and len(dp.tables.free_dsts) == free
        b = dp.process(_batch(["2a03::1"], pkts, iif))
        assert b.results()[0].verdict != "forward"            # not installed
        assert answers() == ref
        # the next change publishes the tables again: nothing of ``big`` in them
        dp.configure("ip -6 route add 2a04::/48 via 2001:db8:2::2 dev eth1")
        assert answers() == ref
        dp._replace_state(State().apply(cfg + "\nip -6 route add 2a03::/48 via 2001:db8:2::2 "
                                              "dev eth1\n"))
        b = dp.process(_batch(["2a03::1"], pkts, iif))
        assert b.results()[0].verdict == "forward"


def test_seg6local_counters_of_a_reused_index_start_from_zero():
    """A counted seg6local route removed and another added in its place
    (the same parameter index, reclaimed): the new route's counters start
    at zero in the workers, as a new route's do in the kernel."""
    cfg, pkts, iif = scenario("End")
    cfg = cfg.replace("action End dev eth0", "action End count dev eth0") + "\n"
    with Dataplane(cfg, workers=2) as dp:
        dp.process(_frames_batch(pkts, iif))
        key = next(k for k in dp.counters()["routes"])
        assert dp.counters()["routes"][key]["packets"] > 0
        idx = [k for k, r in enumerate(dp.tables.s6l_routes) if r is not None]
        dp.configure("ip -6 route del fc00:1::100/128")
        dp.configure("ip -6 route add fc00:1::200/128 encap seg6local action End count dev eth0")
        assert [k for k, r in enumerate(dp.tables.s6l_routes) if r is not None] == idx
        assert dp.counters()["routes"] == {"fc00:1::200/128 table 254":
                                           {"packets": 0, "bytes": 0, "errors": 0}}


def _frames_batch(pkts, iif):
    from fastpath import Batch
    return Batch.from_packets(list(pkts), iif=iif, linktype="ethernet")


@pytest.mark.parametrize("seed", [3])
def test_vrf_changes_on_a_dataplane_match_a_fresh_compile(seed):
    """VRF devices created, enslaved, released and deleted on a running
    Dataplane (automatic routes moving between tables, tables appearing):
    the answers of a Router compiled from scratch."""
    try:
        from .test_vrf import BASE as VRF_BASE, same_as_from_scratch, vrf_step
    except ImportError:  # pragma: no cover
        from test_vrf import BASE as VRF_BASE, same_as_from_scratch, vrf_step
    rng = random.Random(seed)
    with Dataplane(VRF_BASE, workers=1, max_routes=4096) as dp:
        same_as_from_scratch(dp, rng)
        for _ in range(20):
            text = "\n".join(vrf_step(rng) for _ in range(rng.choice((1, 1, 2, 3)))) + "\n"
            before = dp.state.dump()
            try:
                dp.configure(text)
            except (ConfigError, ValueError):
                assert dp.state.dump() == before, text
            same_as_from_scratch(dp, rng)


def test_every_entry_is_in_its_lpm_from_the_start():
    """A new Dataplane's LPMs hold exactly its route entries: the empty
    State's own routes (lo's) and the configuration's, both deferred to the
    first publication (a second deferred update once overwrote the first's
    pending changes: 127.0.0.1 and ::1 were missing)."""
    cfg, pkts, iif = scenario("End")
    with Dataplane(cfg, workers=1) as dp:
        t = dp.tables
        assert t.lpm_pending == []
        for (fam, table), lpm in t.lpms.items():
            want = {(net, e.dst) for (f, tb, net), e in t.entries.items() if (f, tb) == (fam, table)}
            assert set(lpm.prefixes()) == want, (fam, table)
        assert ipaddress.ip_network("127.0.0.1/32") in t.lpms[(4, 255)]


def test_replacing_the_whole_state_in_place():
    """Dataplane._replace_state (a kernel follower's resync): another
    configuration compiled against the installed entries and published;
    the answers are a fresh Router's, nothing is left retired."""
    from fastpath.config import State
    rng = random.Random(7)
    with Dataplane(BASE, workers=1, max_routes=4096) as dp:
        for _ in range(5):
            try:
                dp.configure(step_text(rng, 30, dp.state))
            except (ConfigError, ValueError):
                pass
        other = State().apply(BASE)
        for _ in range(8):
            try:
                other = other.apply(step_text(rng, 30, other))
            except (ConfigError, ValueError):
                pass
        dp._replace_state(other.copy())
        assert dp.state.dump() == other.dump()
        compare(dp, _scratch(dp.state), rng, 60)
        assert dp.refcounts()["retired_pending"] == 0 and dp.tables.lpm_pending == []

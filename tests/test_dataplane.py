"""The multi-process Dataplane: same packets as the Router, RCU updates with
QSBR grace periods, route-cache modes under route churn, a worker killed
mid-run, and no shared-memory segment left behind.

Sized for a 2-core machine: 2 workers, runs of a second or two."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import fastpath
from fastpath import Batch, Dataplane, Router
from fastpath.reasons import REASON_IDS, REASON_NAMES, VERDICTS
from fastpath.scenarios import SCENARIOS

V = {v: k for k, v in enumerate(VERDICTS)}


def scenario(name, n_routes=100, batch=256, flows=64, seed=1):
    return SCENARIOS[name][1](n_routes, batch, flows, np.random.default_rng(seed))


def shm_segments(prefix="fp"):
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(prefix))


def _mixed_packets(pkts, n):
    """Vary the source address so RSS spreads the flows over both workers."""
    out = []
    for k in range(n):
        p = bytearray(pkts[k % len(pkts)])
        p[14 + 8 + 15] = k & 0xFF            # IPv6 source, last byte (Ethernet framed)
        out.append(bytes(p))
    return out


@pytest.mark.parametrize("name", ["End", "End.DX4", "End.DT6", "ipv6-forward", "End-inet"])
@pytest.mark.parametrize("mode", ["noref", "refcount"])
def test_process_gives_what_the_router_gives_in_order(name, mode):
    cfg, pkts, iif = scenario(name)
    lt = "ethernet" if pkts[0][12:14] in (b"\x86\xdd", b"\x08\x00") else "raw"
    if lt == "ethernet":
        pkts = _mixed_packets(pkts, 600)
    r = Router()
    r.configure(cfg)
    want = Batch.from_packets(pkts, iif=iif, linktype=lt)
    r.process(want)
    with Dataplane(cfg, workers=2, mode=mode) as dp:
        got = Batch.from_packets(pkts, iif=iif, linktype=lt)
        dp.process(got, chunk=100)
        assert [(x.verdict, x.oif, x.reason, x.data) for x in got.results()] == \
               [(x.verdict, x.oif, x.reason, x.data) for x in want.results()]
        c = dp.counters()
        assert sum(c["reasons"].values()) == len(pkts)
        # both workers took part (RSS over the varied sources)
        assert c["workers_alive"] == 2
        assert dp.refcounts() == {"shared": {}, "workers": {}, "retired_pending": 0}


def test_rss_spreads_flows_and_keeps_a_flow_on_one_worker():
    cfg, pkts, iif = scenario("End")
    pkts = _mixed_packets(pkts, 512)
    with Dataplane(cfg, workers=2, queues=4) as dp:
        b = Batch.from_packets(pkts + pkts, iif=iif, linktype="ethernet")
        w = dp.steer(b)
        assert set(np.unique(w)) == {0, 1}
        assert (w[:512] == w[512:]).all()            # same packet, same worker


def test_configure_publishes_and_reclaims_after_a_grace_period():
    cfg, pkts, iif = scenario("End")
    with Dataplane(cfg, workers=2) as dp:
        b = Batch.from_packets(pkts, iif=iif, linktype="ethernet")
        dp.process(b)
        used = int(b.dst[0])
        gen = int(dp.dsts[used]["gen"])
        assert (b.verdict == V["forward"]).all()
        dp.configure("ip -6 route replace fc00:2::/32 via 2001:db8:2::3 dev eth1")
        # the old entry was retired, then reclaimed (new generation, free)
        assert int(dp.dsts[used]["gen"]) == gen + 1
        assert used in dp.tables.free_dsts
        b = Batch.from_packets(pkts, iif=iif, linktype="ethernet")
        dp.process(b)
        assert (b.verdict == V["forward"]).all() and int(b.dst[0]) != used
        assert {bytes(b.nexthop[k]) for k in range(len(b))} == \
            {bytes.fromhex("20010db8000200000000000000000003")}
        dp.configure("ip -6 route del fc00:2::/32")
        b = Batch.from_packets(pkts, iif=iif, linktype="ethernet")
        dp.process(b)
        assert (b.reason == REASON_IDS["no_route"]).all()
        assert dp.refcounts()["retired_pending"] == 0


def test_configure_errors_change_nothing():
    cfg, pkts, iif = scenario("End")
    with Dataplane(cfg, workers=1) as dp:
        before = dp.state.dump()
        with pytest.raises(fastpath.ConfigError):
            dp.configure("ip -6 route add fc00:9::/32 dev eth1\nip -6 route add bogus")
        assert dp.state.dump() == before


def test_route_table_capacity_is_a_clear_error():
    lines = ["ip -6 addr add 2001:db8:2::1/64 dev eth1"]
    lines += [f"ip -6 route add 2400:{k:x}::/32 via 2001:db8:2::2 dev eth1" for k in range(80)]
    with pytest.raises(ValueError, match="route table full"):
        Dataplane("\n".join(lines), workers=1, max_routes=64)
    assert not [s for s in shm_segments(f"fp{os.getpid()}_")]


def test_bad_arguments():
    with pytest.raises(ValueError):
        Dataplane("", workers=0)
    with pytest.raises(ValueError):
        Dataplane("", workers=1, mode="rcu")
    with pytest.raises(ValueError, match="not in the affinity mask|not online"):
        Dataplane("", workers=1, cpus=[4096])
    with pytest.raises(ValueError, match="workers but only"):
        Dataplane("", workers=os.cpu_count() + 1)


@pytest.mark.parametrize("mode", ["noref", "refcount"])
def test_churn_while_forwarding(mode):
    """Workers forward at full speed while the control plane replaces the
    route they use and churns others: no packet uses a freed or reused
    entry (generation tags), references return to base, every packet is
    accounted for, and the dead-entry fallbacks are observed."""
    cfg, pkts, iif = scenario("End")
    with Dataplane(cfg, workers=2, mode=mode, check_gen=True) as dp:
        k, fallback, rounds = 0, 0, 0
        # the fallback needs a packet in flight as its entry dies: on a
        # loaded machine a round may see none, so up to three rounds
        while fallback == 0 and rounds < 3:
            rounds += 1
            out = {}
            th = threading.Thread(target=lambda: out.setdefault(
                "res", dp.bench(pkts, iif, "ethernet", duration=2.0, start_delay=0.1)))
            th.start()
            time.sleep(0.15)
            t_end = time.monotonic() + 1.7
            while time.monotonic() < t_end:
                dp.configure(f"ip -6 route replace fc00:2::/32 via 2001:db8:2::2 dev eth1 metric {k % 3}\n"
                             + "\n".join(f"ip -6 route replace 2600:{k % 7}:{j:x}::/48 via 2001:db8:2::2 "
                                          "dev eth1" for j in range(50)))
                k += 1
            th.join()
            res = out["res"]
            assert len(res) == 2 and all(r["packets"] > 0 for r in res)
            c = dp.counters()
            assert c["gen_violations"] == 0
            # every packet processed has exactly one verdict/reason
            assert sum(sum(r["reasons"]) for r in res) == sum(r["packets"] for r in res)
            fallback = sum(r["reasons"][REASON_IDS["route_dead"]] for r in res) if mode == "noref" \
                else sum(r["hold_fail"] for r in res)
        assert k >= 5
        assert fallback > 0, f"{k} replacements in {rounds} rounds, no dead-entry fallback observed"
        if mode == "refcount":
            # a refused reference fell back to the null entry: ICMP unreachable
            assert sum(r["reasons"][REASON_IDS["no_route"]] for r in res) >= fallback
        dp.synchronize()
        dp.configure("")                   # a last grace period and reclaim
        assert dp.refcounts() == {"shared": {}, "workers": {}, "retired_pending": 0}
        live = [e.dst for e in dp.tables.entries.values()]
        assert (dp.dsts["refcnt"][live] == 1).all()


def test_a_killed_worker_does_not_stop_the_others():
    cfg, pkts, iif = scenario("End.DX4")
    # timeout: a grace period that waited for the dead worker would raise
    # DataplaneError (an RCU stall) instead of completing
    with Dataplane(cfg, workers=2, mode="refcount", timeout=20) as dp:
        out = {}
        th = threading.Thread(target=lambda: out.setdefault(
            "res", dp.bench(pkts, iif, "ethernet", duration=1.5, start_delay=0.1)))
        th.start()
        time.sleep(0.6)
        victim = dp.worker_pids()[1]
        os.kill(victim, signal.SIGKILL)
        dp.configure("ip route replace 198.18.0.0/15 via 10.0.2.3 dev eth1")
        th.join()
        res = out["res"]
        assert [r["worker"] for r in res] == [0] and res[0]["packets"] > 0
        ev = [e for e in dp.events if e["worker"] == 1]
        assert ev and ev[0]["exit"] == "signal SIGKILL" and ev[0]["pid"] == victim
        assert ev[0]["in_flight_packets"] == 256 and ev[0]["packets_done"] > 0
        # the survivor takes every packet
        b = Batch.from_packets(_mixed_packets(pkts, 300), iif=iif, linktype="ethernet")
        dp.process(b)
        assert (b.verdict == V["forward"]).all()
        assert dp.counters()["workers_alive"] == 1


def _run_script(body, sig=None):
    # (SIGINT back to Python's handler: a test run started in the
    # background inherits it ignored, and the Ctrl-C case would not stop)
    code = textwrap.dedent(f"""
        import os, signal, sys, time, numpy as np, fastpath
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from fastpath.scenarios import SCENARIOS
        cfg, pkts, iif = SCENARIOS["End"][1](10, 64, 8, np.random.default_rng(1))
        print(os.getpid(), flush=True)
    """) + textwrap.dedent(body)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    pid = p.stdout.readline().strip()
    if sig is not None:
        # the signal lands inside the body: after its "up" (the dataplane
        # started, however long that took on a loaded machine), then a beat
        assert p.stdout.readline().strip() == "up"
        time.sleep(0.5)
        p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    return pid, p.returncode, err


@pytest.mark.parametrize("how", ["normal", "exception", "ctrl-c", "no-close"])
def test_no_shared_memory_left_behind(how):
    body = {
        "normal": """
            with fastpath.Dataplane(cfg, workers=2) as dp:
                dp.process(fastpath.Batch.from_packets(pkts, iif=iif, linktype="ethernet"))
        """,
        "exception": """
            with fastpath.Dataplane(cfg, workers=2) as dp:
                raise RuntimeError("boom")
        """,
        "ctrl-c": """
            with fastpath.Dataplane(cfg, workers=2) as dp:
                print("up", flush=True)
                dp.bench(pkts, iif, "ethernet", duration=30)
        """,
        "no-close": """
            dp = fastpath.Dataplane(cfg, workers=2)
            dp.process(fastpath.Batch.from_packets(pkts, iif=iif, linktype="ethernet"))
        """,
    }[how]
    pid, rc, err = _run_script(body, signal.SIGINT if how == "ctrl-c" else None)
    assert shm_segments(f"fp{pid}_") == []
    if how in ("normal", "no-close"):
        assert rc == 0, err
    else:
        assert rc != 0 and ("boom" in err or "KeyboardInterrupt" in err)
    # and no worker is left running
    out = subprocess.run(["pgrep", "-f", f"fastpath._worker .*fp{pid}_"], capture_output=True, text=True)
    assert out.stdout.strip() == ""


def test_set_mode_switches_between_runs():
    cfg, pkts, iif = scenario("End.DX4")
    with Dataplane(cfg, workers=2, mode="noref") as dp:
        outs = []
        for mode in ("refcount", "refcount-private", "noref", "refcount"):
            dp.set_mode(mode)
            res = dp.bench(pkts, iif, "ethernet", duration=0.1, start_delay=0.05)
            assert all(r["verdicts"][V["forward"]] == len(pkts) for r in res)
            assert dp.refcounts() == {"shared": {}, "workers": {}, "retired_pending": 0}
            b = Batch.from_packets(_mixed_packets(pkts, 64), iif=iif, linktype="ethernet")
            dp.process(b)
            outs.append([x.data for x in b.results()])
        assert all(o == outs[0] for o in outs)
        with pytest.raises(ValueError):
            dp.set_mode("atomic")


def test_a_worker_stuck_online_stalls_the_grace_period_with_a_clear_error():
    cfg, pkts, iif = scenario("End")
    with Dataplane(cfg, workers=2, timeout=10) as dp:
        dp._conns[0].send(("sleep", 2.0))       # online, never reaching a quiescent state
        time.sleep(0.3)
        with pytest.raises(fastpath.DataplaneError, match="grace period stalled: worker 0"):
            dp.synchronize(timeout=0.5)
        assert dp._recv(0, 10) == ("ok",)       # it comes back; the next grace period completes
        dp.synchronize(timeout=5)
        assert dp.counters()["workers_alive"] == 2


def test_batches_built_in_shared_memory_and_reused():
    """A batch whose data lies in Dataplane.batch_buffer is processed where
    it lies (same results as the Router, with a chunk or without); the
    buffer is reused once the batch is gone; a reader builds its batches
    there when asked to."""
    cfg, pkts, iif = scenario("End")
    pkts = _mixed_packets(pkts, 700)
    r = Router()
    r.configure(cfg)
    want = Batch.from_packets(pkts, iif=iif, linktype="ethernet")
    r.process(want)
    ref = [(x.verdict, x.oif, x.reason, x.data) for x in want.results()]
    with Dataplane(cfg, workers=2) as dp:
        for chunk in (None, 64):
            src = Batch.from_packets(pkts, iif=iif, linktype="ethernet")
            buf = dp.batch_buffer(src.data.shape)
            buf[...] = src.data
            b = Batch(buf, src.start, src.length, linktype="ethernet")
            b.iif_names = src.iif_names
            assert dp._staged(b.data) is not None and dp._staged(src.data) is None
            dp.process(b, chunk=chunk)
            assert [(x.verdict, x.oif, x.reason, x.data) for x in b.results()] == ref
            # a slice of a staged batch is staged too (at its offset)
            assert dp._staged(b[10:].data)[1] == 10 * b.slot
            del b, buf
        nseg = len(dp._stage)
        for _ in range(5):                      # freed buffers come back: no new segment
            x = dp.batch_buffer((256, 512))
            del x
        assert len(dp._stage) == nseg
        with pytest.raises(ValueError):
            dp.process(Batch.from_packets(pkts[:4], iif=iif, linktype="ethernet"), chunk=0)


def test_replay_through_the_dataplane_reads_into_shared_memory(tmp_path):
    import fastpath.pcap as fp
    cfg, pkts, iif = scenario("End")
    pkts = _mixed_packets(pkts, 900)
    src = tmp_path / "in.pcapng"
    with fp.PcapngWriter(src, select="all") as w:
        b = Batch.from_packets(pkts, iif=iif, linktype="ethernet")
        b.ifnames = {1: iif}
        w.write_batch(b)
    r = Router()
    r.configure(cfg)
    fp.replay(r, src, output=tmp_path / "r.pcapng", iif=iif, batch_size=256)
    with Dataplane(cfg, workers=2) as dp:
        seen = []
        st = fp.replay(dp, src, output=tmp_path / "d.pcapng", iif=iif, batch_size=256,
                       on_batch=lambda b: seen.append(dp._staged(b.data) is not None))
        assert st.packets == 900 and all(seen)
    assert (tmp_path / "r.pcapng").read_bytes() == (tmp_path / "d.pcapng").read_bytes()


def test_a_batch_larger_than_the_last_replaces_the_shared_segments():
    """Growing batches get new meta/io segments (the old ones unlinked, the
    workers told to remap): results stay the Router's."""
    cfg, pkts, iif = scenario("End")
    r = Router()
    r.configure(cfg)
    with Dataplane(cfg, workers=2) as dp:
        for n in (10, 5000, 9000, 300):
            ps = _mixed_packets(pkts, n)
            want = Batch.from_packets(ps, iif=iif, linktype="ethernet")
            r.process(want)
            got = Batch.from_packets(ps, iif=iif, linktype="ethernet")
            dp.process(got)
            assert [(x.verdict, x.data) for x in got.results()] == \
                   [(x.verdict, x.data) for x in want.results()]
        names = [s for s in shm_segments(dp.prefix)]
        assert sum("meta" in s for s in names) == 1 and sum("io0_" in s for s in names) == 1


def test_unpinned_workers():
    cfg, pkts, iif = scenario("End")
    with Dataplane(cfg, workers=2, pin=False) as dp:
        b = Batch.from_packets(_mixed_packets(pkts, 300), iif=iif, linktype="ethernet")
        dp.process(b)
        assert (b.verdict == V["forward"]).all()
        allowed = sorted(os.sched_getaffinity(0))
        for pid in dp.worker_pids():
            assert sorted(os.sched_getaffinity(pid)) == allowed


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_workers_copy_packets_not_slots_and_give_what_the_router_gives(name):
    """The workers copy each packet's bytes (not its whole slot) into their
    io segment and the packet they leave back: with the io segments full of
    other bytes first (a batch of random junk), every scenario, and traffic
    that makes ICMP errors and drops, gives the Router's packets; RSS
    giving one worker every packet (a single flow: its rows are a run)
    too."""
    cfg, pkts, iif = scenario(name)
    lt = "ethernet" if pkts[0][12:14] in (b"\x86\xdd", b"\x08\x00", b"\x81\x00") else "raw"
    rng = np.random.default_rng(5)
    extra = []
    for k in range(40):                          # hop limit 1, truncated, junk
        p = bytearray(pkts[k % len(pkts)])
        off = 14 if lt == "ethernet" else 0
        if k % 3 == 0 and len(p) > off + 8 and p[off] >> 4 == 6:
            p[off + 7] = 1
        elif k % 3 == 1:
            p = p[:max(off + 1, len(p) - 9)]
        else:
            p[off + 20:] = rng.integers(0, 256, max(0, len(p) - off - 20), dtype=np.uint8).tobytes()
        extra.append(bytes(p))
    mixed = (_mixed_packets(pkts, 300) if lt == "ethernet" else list(pkts)) + extra
    single = [pkts[0]] * 64
    r = Router()
    r.configure(cfg)
    with Dataplane(cfg, workers=2) as dp:
        junk = Batch.from_packets([bytes(rng.integers(0, 256, 200, dtype=np.uint8))] * 400,
                                  iif=iif, linktype=lt, headroom=300)
        junk.data[:] = rng.integers(0, 256, junk.data.shape, dtype=np.uint8)
        dp.process(junk)
        for ps in (mixed, single):
            want = Batch.from_packets(ps, iif=iif, linktype=lt)
            r.process(want)
            got = Batch.from_packets(ps, iif=iif, linktype=lt)
            dp.process(got)
            assert [(x.verdict, x.oif, x.reason, x.data) for x in got.results()] == \
                   [(x.verdict, x.oif, x.reason, x.data) for x in want.results()]
            assert (got.nexthop == want.nexthop).all() and (got.dst == want.dst).all()


def test_a_batch_built_in_shared_memory_outlives_its_dataplane():
    """A Batch whose data came from batch_buffer stays readable after the
    Dataplane closed (its segment's name is gone at once, its mapping when
    the batch goes): it crashed the process (the segment was unmapped under
    it)."""
    import fastpath.dataplane as fdp
    cfg, pkts, iif = scenario("End")
    before = shm_segments()
    with Dataplane(cfg, workers=2) as dp:
        buf = dp.batch_buffer((len(pkts), 256))
        b = Batch(buf, np.full(len(pkts), 128, np.int32),
                  np.array([len(p) for p in pkts], np.int32), linktype="ethernet")
        for i, p in enumerate(pkts):
            buf[i, 128:128 + len(p)] = np.frombuffer(p, np.uint8)
        b.iif_names = [iif] * len(b)
        dp.process(b)
        want = [x.data for x in b.results()]
    assert shm_segments() == before               # nothing left in /dev/shm
    assert [x.data for x in b.results()] == want  # still mapped
    r = Router()
    r.configure(cfg)
    r.process(b)                                  # and usable
    del b, buf
    with Dataplane(cfg, workers=1):
        pass                                      # a later close reaps the mapping
    assert fdp._ORPHANS == []


@pytest.mark.parametrize("name", ["End", "End.DX4", "ipv6-forward"])
def test_attached_tables_follow_configure_as_the_router(name):
    """Dataplane(external=True) with a process of the caller's attached to
    a slot (fastpath.dataplane.AttachedTables, as fastpath.run --workers
    does): what it gives is the Router's, before and after configures that
    the Dataplane publishes in place (route replaced, route deleted,
    neighbour changed); its own process/counters/bench refuse."""
    from fastpath.dataplane import AttachedTables, DataplaneError
    cfg, pkts, iif = scenario(name)
    lt = "ethernet" if pkts[0][12:14] in (b"\x86\xdd", b"\x08\x00") else "raw"
    r = Router()
    r.configure(cfg)
    alive = {1: True}
    with Dataplane(cfg, workers=2, external=True, pin=False, alive=lambda w: alive.get(w, False),
                   timeout=10) as dp:
        a = AttachedTables(dp.attach_args(), 1)
        try:
            def same():
                want = Batch.from_packets(pkts, iif=iif, linktype=lt)
                got = Batch.from_packets(pkts, iif=iif, linktype=lt)
                r.process(want)
                a.process(got)
                a.offline()                 # (a grace period must not wait for us)
                assert [(x.verdict, x.oif, x.reason, x.data) for x in got.results()] == \
                       [(x.verdict, x.oif, x.reason, x.data) for x in want.results()]
                return got
            first = same()
            assert (first.verdict == V["forward"]).all() or name == "End.DX4"
            changes = {"End": ["ip -6 route replace fc00:2::/32 via 2001:db8:2::3 dev eth1",
                               "ip -6 route del fc00:2::/32"],
                       "End.DX4": ["ip neigh replace 10.0.0.2 lladdr 02:00:00:00:00:99 dev eth1"],
                       "ipv6-forward": ["ip -6 route replace 2400::/48 via 2001:db8:2::3 dev eth1",
                                        "ip -6 route flush table main"]}[name]
            for line in changes:
                r.configure(line + "\n")
                dp.configure(line + "\n")
                same()
            assert sum(a.counters()["reasons"].values()) == len(pkts) * (1 + len(changes))
            # a slot whose process is gone: a grace period does not wait for it
            a.online()
            alive[1] = False
            dp.configure("sysctl -w net.ipv6.conf.all.hop_limit=63\n")
            alive[1] = True
            for call in (lambda: dp.process(Batch.from_packets(pkts, iif=iif, linktype=lt)),
                         dp.counters):
                with pytest.raises(DataplaneError, match="attached processes"):
                    call()
        finally:
            a.close()


def test_wire_control_tables_fib_lookup_as_the_router():
    """fastpath.run --workers' control process answers proxy ARP from the
    Dataplane's tables (wire.workers._ControlTables, no Router of its own):
    its fib_lookup gives the Router's, before and after a configure."""
    from fastpath.wire.workers import _ControlTables
    cfg = ("ip addr add 10.1.0.1/24 dev eth0\nip addr add 10.2.0.1/24 dev eth1\n"
           "ip route add 10.9.0.0/16 via 10.2.0.2 dev eth1\n"
           "ip route add blackhole 10.8.0.0/16\n")
    r = Router()
    r.configure(cfg)
    with Dataplane(cfg, workers=1, external=True, pin=False) as dp:
        c = _ControlTables(dp)
        addrs = ["10.9.1.1", "10.8.0.1", "10.1.0.7", "10.2.0.1", "192.0.2.1", "10.7.0.1"]
        for step in ("", "ip route replace 10.9.0.0/16 via 10.1.0.2 dev eth0\n"
                         "ip route add 10.7.0.0/16 dev eth1\n"):
            if step:
                r.configure(step)
                c.configure(step)
            assert [c.fib_lookup(4, a, "10.1.0.2", "eth0") for a in addrs] == \
                   [r.fib_lookup(4, a, "10.1.0.2", "eth0") for a in addrs]
        assert c.fib_lookup(4, "10.9.1.1", "10.1.0.2", "eth0") == ("unicast", "eth0")
        assert c.state is dp.state


@pytest.mark.parametrize("changes", [3, 40])
def test_retired_entries_held_by_a_reference_wait(changes):
    """A retired entry is reclaimed only once no reference holds it: the
    FIB's shared count (a refcount-mode holder) or any online worker's
    per-CPU count.  References planted by hand on entries a configure then
    retires (a few: the one-by-one reads; many: the vectorised ones) keep
    exactly those pending, their generation unchanged; once dropped, the
    next configure reclaims them."""
    n = 60
    cfg = ("ip link set dev eth0 up\nip -6 addr add 2001:db8::1/64 dev eth0\n"
           + "".join(f"ip -6 route add 2001:db8:{k:x}::/48 via 2001:db8::2 dev eth0\n"
                     for k in range(1, n + 1)))
    with Dataplane(cfg, workers=2) as dp:
        def dst(k):
            return next(e.dst for key, e in dp.tables.entries.items()
                        if key[0] == 6 and str(key[2]) == f"2001:db8:{k:x}::/48")
        olds = [dst(k) for k in range(1, changes + 1)]
        shared, w1 = olds[0], olds[-1]     # held by the FIB count, by worker 1
        pc1 = dp._pcpu[1]
        dp.dsts["refcnt"][shared] += 1
        pc1["refcnt"][w1] = 1
        gens = {d: int(dp.dsts["gen"][d]) for d in olds}
        dp.configure("".join(f"ip -6 route replace 2001:db8:{k:x}::/48 via 2001:db8::3 dev eth0\n"
                             for k in range(1, changes + 1)))
        assert dp.refcounts()["retired_pending"] == 2
        # the held two untouched, the others reclaimed (a new generation)
        assert {d: int(dp.dsts["gen"][d]) - gens[d] for d in olds} == \
            {d: 0 if d in (shared, w1) else 1 for d in olds}
        dp.dsts["refcnt"][shared] -= 1
        pc1["refcnt"][w1] = 0
        dp.configure("")
        assert dp.refcounts() == {"shared": {}, "workers": {}, "retired_pending": 0}
        assert all(int(dp.dsts["gen"][d]) == gens[d] + 1 for d in (shared, w1))


@pytest.mark.parametrize("given", [None, "3"])
def test_workers_keep_numpy_blas_to_one_thread(monkeypatch, given):
    """A worker's environment asks OpenBLAS for no threads of its own (it
    does no linear algebra; each of its threads spun at start-up), unless
    the caller set the variable; with it at 1 the worker runs one thread."""
    if given is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", given)
    with Dataplane("ip -6 addr add 2001:db8::1/64 dev eth0\n", workers=2) as dp:
        for p in dp._procs:
            env = open(f"/proc/{p.pid}/environ", "rb").read().split(b"\0")
            want = given or "1"
            assert f"OPENBLAS_NUM_THREADS={want}".encode() in env
            if want == "1":
                assert len(os.listdir(f"/proc/{p.pid}/task")) == 1


def _proc_cpu_s(pid):
    """utime + stime of a process, from /proc (clock ticks): the kernel's
    count, not the worker's own."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_workers_cpu_is_the_kernels_count_and_grows_with_work():
    """``counters()["workers_cpu_s"]`` (what a replay's CPU time adds for
    the workers) is the live workers' CPU time as /proc counts it, grows
    when they process packets, and leaves a dead worker out; a Router's
    is 0 (``time.process_time`` has it)."""
    from fastpath.pcap import workers_cpu_s
    cfg, pkts, iif = scenario("End")
    pkts = _mixed_packets(pkts, 4096)
    assert workers_cpu_s(Router()) == 0.0
    with Dataplane(cfg, workers=2) as dp:
        before = workers_cpu_s(dp)
        for _ in range(40):
            dp.process(Batch.from_packets(pkts, iif=iif, linktype="ethernet"))
        after = workers_cpu_s(dp)
        proc = sum(_proc_cpu_s(p) for p in dp.worker_pids())
        assert after > before
        tick = 1 / os.sysconf("SC_CLK_TCK")
        # /proc truncates to ticks, and the workers answered counters first
        assert after - 2 * tick - 0.05 <= proc <= after + 2 * tick + 0.05, (after, proc)
        pid = dp.worker_pids()[1]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while dp.counters()["workers_alive"] != 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        left = workers_cpu_s(dp)
        assert left == pytest.approx(_proc_cpu_s(dp.worker_pids()[0]), abs=2 * tick + 0.05)

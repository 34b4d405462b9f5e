"""Follow (issue 18, part 2): changes made with ``ip`` in a namespace while a
``KernelFollower`` follows it.  After each, fastpath's configuration equals
a fresh import's (``netlink.canonical``, as test_kernel_import compares),
and probe packets sent into the kernel and through the following Router
give the same bytes on the same interfaces (``fastpath.kernel.compare``).
Overruns (ENOBUFS) resync to a fresh import and are counted; stop() leaves
no thread or socket behind; the CLI's ``import --follow`` exits 0 on
SIGTERM."""
from __future__ import annotations

import errno
import ipaddress
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

try:
    from . import kernel_oracle as ko
except ImportError:
    import kernel_oracle as ko

pyroute2 = pytest.importorskip("pyroute2")
# namespaces of their own, read over rtnetlink here: the kernel must be this
# process's (in a VM: python -m fastpath.kernel vm -- python -m pytest -m kernel_netns)
pytestmark = [pytest.mark.kernel, pytest.mark.kernel_netns]

import fastpath  # noqa: E402
from fastpath import Router  # noqa: E402
from fastpath.kernel import compare as kc  # noqa: E402
from fastpath.kernel import netlink as nl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastpath.__file__)))


@pytest.fixture(autouse=True)
def _need_oracle():
    ok, reason = ko.oracle_available(seg6=False)
    if not ok:
        pytest.skip(reason)


try:
    from .test_kernel_verify import ip4, ip6  # noqa: E402  (the packet builders)
except ImportError:  # pragma: no cover - tests/ as a plain directory on sys.path
    from test_kernel_verify import ip4, ip6  # noqa: E402


def srh(segs, sl, nh=59):
    body = b"".join(ipaddress.IPv6Address(s).packed for s in segs)
    return struct.pack("!BBBBBBH", nh, 2 * len(segs), 4, sl, len(segs) - 1, 0, 0) + body


def _fresh(netns):
    """What a fresh import of the namespace gives, as the follower holds it."""
    return nl.canonical(Router().configure(nl.import_text(netns)).state)


def _same_as_import(f, r, netns, what=""):
    assert f.sync(30), f"follower did not catch up {what}"
    got, want = nl.canonical(r.state), _fresh(netns)
    assert got.dump().splitlines() == want.dump().splitlines(), what
    assert got == want, what


def probes(n):
    """Probe packets, all arriving on tun0.  The IPv4 ones come from a
    source of their own per step (10.0.1.(10+n)): the kernel rate-limits
    its ICMPv4 errors per source with the init namespace's
    net.ipv4.route.error_cost (250, not per namespace), fastpath with the
    namespace's (0: unlimited)."""
    s4 = f"10.0.1.{10 + n}"
    return [
        ip6("2001:db8:1::2", "2001:db8:9::5"),                              # 0 plain route
        ip6("2001:db8:1::2", "2001:db8:30::5"),                             # 1 H.Encaps
        ip6("2001:db8:1::2", "fc00::1", nh=43,
            payload=srh(["2001:db8:9::5", "fc00::1"], 1)),                  # 2 End
        ip6("2001:db8:1::2", "fc00::2", nh=43,
            payload=srh(["fc00::2"], 0, nh=41) + ip6("2001:db8:7::1", "2001:db8:9::7")),  # 3 End.DX6
        ip4(s4, "10.9.0.5"),                                                # 4 IPv4 route
        ip4(s4, "10.30.0.5"),                                               # 5 IPv4 in seg6
        ip6("2001:db8:1::2", "2001:db8:9::5", payload=b"\0" * 1400),        # 6 big: MTU
        ip6("2001:db8:1::2", "2001:db8:1::1"),                              # 7 local
        ip4(s4, "10.9.0.5", ttl=1),                                         # 8 IPv4 time exceeded
    ]


PROBES = probes(0)

BEFORE = """\
sysctl -w net.ipv6.conf.all.seg6_enabled=1
sysctl -w net.ipv6.conf.tun0.seg6_enabled=1
ip -6 addr add 2001:db8:1::1/64 dev tun0
"""

# (ip commands, probe index, expected (verdict, oif) of that probe after them)
STEPS = [
    ("ip -6 addr add 2001:db8:2::1/64 dev tun1\nip -6 addr add 2001:db8:3::1/64 dev tun2", None, None),
    ("ip addr add 10.0.1.1/24 dev tun0\nip addr add 10.0.2.1/24 dev tun1\n"
     "ip addr add 10.0.3.1/24 dev tun2", None, None),
    ("ip -6 route add 2001:db8:9::/48 via 2001:db8:2::2 dev tun1", 0, ("forward", "tun1")),
    ("ip -6 route replace 2001:db8:9::/48 via 2001:db8:3::2 dev tun2", 0, ("forward", "tun2")),
    ("ip -6 route add 2001:db8:a::/48 nexthop via 2001:db8:2::2 dev tun1 "
     "nexthop via 2001:db8:3::2 dev tun2 weight 3", None, None),
    ("ip -6 route append 2001:db8:a::/48 via 2001:db8:2::3 dev tun1", None, None),
    ("ip -6 route del 2001:db8:a::/48 via 2001:db8:2::3 dev tun1", None, None),
    ("ip route add 10.11.0.0/16 nexthop via 10.0.2.2 dev tun1 nexthop via 10.0.3.2 dev tun2",
     None, None),
    ("ip -6 route add fc00::1/128 encap seg6local action End dev tun0", 2, ("forward", "tun2")),
    ("ip -6 route add fc00::2/128 encap seg6local action End.DX6 nh6 2001:db8:2::2 count dev tun0",
     3, ("forward", "tun1")),
    ("ip -6 route add 2001:db8:30::/48 encap seg6 mode encap segs fc00::1,fc00::2 dev tun1",
     1, ("forward", "tun1")),
    ("ip route add 10.9.0.0/16 via 10.0.2.2 dev tun1", 4, ("forward", "tun1")),
    ("ip route add 10.30.0.0/16 encap seg6 mode encap segs 2001:db8:9::1 dev tun2", 5, ("forward", "tun2")),
    ("ip -6 rule add to 2001:db8:9::/48 prohibit pref 100", 0, ("icmp", "tun0")),
    ("ip -6 rule del to 2001:db8:9::/48 prohibit pref 100", 0, ("forward", "tun2")),
    ("ip rule add from 10.0.1.0/24 table 100 pref 100\n"
     "ip route add 10.9.0.0/16 via 10.0.3.2 dev tun2 table 100", 4, ("forward", "tun2")),
    ("ip link set dev tun2 mtu 1300", 6, ("icmp", "tun0")),
    ("ip link set dev tun2 mtu 1500", 6, ("forward", "tun2")),
    ("ip rule del from 10.0.1.0/24 table 100 pref 100", 4, ("forward", "tun1")),
    ("ip link add va type veth peer name vb\nip link set dev va up\n"
     "ip addr add 10.5.0.1/24 dev va\nip -6 addr add 2001:db8:5::1/64 dev va", None, None),
    ("ip neigh add 10.5.0.2 lladdr 02:cc:00:00:00:02 dev va nud permanent\n"
     "ip -6 neigh add 2001:db8:5::2 lladdr 02:cc:00:00:00:03 dev va nud permanent", None, None),
    ("ip neigh replace 10.5.0.2 lladdr 02:cc:00:00:00:04 dev va nud permanent", None, None),
    ("ip neigh del 10.5.0.2 dev va", None, None),
    ("ip link set dev tun1 down", 4, ("icmp", "tun0")),         # IPv4 routes via tun1 flushed
    ("ip link set dev tun1 up\nip -6 addr add 2001:db8:2::1/64 dev tun1", None, None),
    ("ip route add 10.9.0.0/16 via 10.0.2.2 dev tun1", 4, ("forward", "tun1")),
    ("ip addr del 10.0.2.1/24 dev tun1", None, None),
    ("ip -6 route del 2001:db8:9::/48", 0, ("icmp", "tun0")),
    ("ip -6 route del fc00::1/128\nip -6 route del fc00::2/128", 2, ("icmp", "tun0")),
    ("ip route flush table 100", None, None),
    ("ip -6 addr del 2001:db8:1::1/64 dev tun0", 7, None),
]



def _reap(p):
    """A CLI subprocess killed if a test left it running, its pipes closed."""
    if p.poll() is None:
        p.kill()
        p.wait()
    p.stdout.close()
    p.stderr.close()

@pytest.mark.kernel_seg6
def test_every_kind_of_change_is_followed():
    with ko.KernelOracle(ifaces=("tun0", "tun1", "tun2")) as k:
        k.configure(BEFORE)
        r = Router()
        applied = []
        with r.follow_kernel(k.netns, on_apply=applied.extend) as f:
            _same_as_import(f, r, k.netns, "after the initial import")
            assert kc.compare(k, r, "tun0", probes(0)) == []
            for n, (cmds, probe, want) in enumerate(STEPS, 1):
                k.configure(cmds)
                _same_as_import(f, r, k.netns, cmds)
                pk = probes(n)
                problems = kc.compare(k, r, "tun0", pk)
                assert not problems, f"after {cmds!r}:\n" + kc.format_problems(problems)
                if want is not None:
                    b = fastpath.Batch.from_packets([pk[probe]], iif="tun0")
                    res = r.process(b).results()[0]
                    assert (res.verdict, res.oif) == want, (cmds, res)
            st = f.stats
            assert st.resyncs == 0 and st.errors == 0 and not f.diverged, list(f.events)
            assert st.messages > len(STEPS) and st.configures >= len(STEPS) - 1
            assert st.last_lag is not None and st.last_lag < 5
    # the lines are fastpath's own syntax, the translations of the changes
    assert "ip -6 route replace fc00::1/128 encap seg6local action End dev tun0" in applied
    assert any(ln.startswith("ip -6 route del fc00::2/128") for ln in applied)
    assert "ip -4 neigh del 10.5.0.2 dev va" in applied
    assert any(ln.startswith("ip -4 route del 10.9.0.0/16") for ln in applied)   # tun1 down


def test_burst_is_applied_in_few_configures():
    """An ``ip -batch`` of 3000 routes is applied in a handful of
    configures, while another thread keeps processing packets."""
    with ko.KernelOracle(ifaces=("tun0", "tun1")) as k:
        k.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0\nip -6 addr add 2001:db8:2::1/64 dev tun1")
        r = Router()
        with r.follow_kernel(k.netns) as f:
            assert f.sync()
            before = f.stats.configures
            done = threading.Event()
            seen, errors = [], []

            def hammer():
                pkt = ip6("2001:db8:1::2", "2001:db8:b:b7::1")     # route number 2999
                try:
                    while not done.is_set():
                        b = r.process(fastpath.Batch.from_packets([pkt], iif="tun0"))
                        seen.append(b.results()[0].verdict)
                except Exception as e:              # pragma: no cover - the failure
                    errors.append(e)
            t = threading.Thread(target=hammer)
            t.start()
            try:
                batch = "".join(f"route add 2001:db8:{i >> 8:x}:{i & 255:x}::/64 via 2001:db8:2::2 "
                                f"dev tun1\n" for i in range(3000))
                k.ip("-batch", "-", input=batch)
                _same_as_import(f, r, k.netns, "after the batch")
                time.sleep(0.05)
            finally:
                done.set()
                t.join()
            assert errors == []
            assert seen and seen[0] == "icmp" and seen[-1] == "forward", (seen[:3], seen[-3:])
            assert f.stats.configures - before < 100, f.stats
            assert f.stats.lines >= 3000


def test_overrun_resyncs_to_a_fresh_import():
    """A tiny receive buffer, a tiny inbox and a burst while the follower
    is held: the kernel drops messages (ENOBUFS), the follower re-imports,
    counts it and says so, and ends equal to a fresh import."""
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        k.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0\nip -6 route add 2001:db8:77::/48 "
                    "via 2001:db8:1::2 dev tun0")
        r = Router()
        events = []
        # the reader stops reading once 8 messages wait in its inbox
        with r.follow_kernel(k.netns, rcvbuf=4096, max_backlog=8, on_event=events.append) as f:
            assert f.sync()
            with r._lock:                      # the follower cannot apply: its socket fills up
                batch = "".join(f"route add 2001:db8:{i:x}::/48 via 2001:db8:1::2 dev tun0\n"
                                for i in range(1000, 1500))
                batch += "route del 2001:db8:77::/48\n"
                k.ip("-batch", "-", input=batch)
            _same_as_import(f, r, k.netns, "after the overrun")
            assert f.stats.overruns >= 1 and f.stats.resyncs >= 1, f.stats
            assert any("ENOBUFS" in e for e in events), events
            # and following goes on
            k.configure("ip -6 route add 2001:db8:78::/48 via 2001:db8:1::2 dev tun0")
            _same_as_import(f, r, k.netns, "after the resync")


def test_injected_enobufs_is_a_counted_resync():
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        k.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0")
        r = Router()
        with r.follow_kernel(k.netns) as f:
            assert f.sync()
            fired = []

            def hook():
                if not fired:
                    fired.append(1)
                    raise OSError(errno.ENOBUFS, os.strerror(errno.ENOBUFS))
            # the change made while messages are "lost": only a resync finds it
            with r._lock:
                f.recv_hook = hook
                k.configure("ip -6 route add 2001:db8:9::/48 via 2001:db8:1::2 dev tun0")
            _same_as_import(f, r, k.netns, "after the injected overrun")
            assert fired and f.stats.overruns == 1 and f.stats.resyncs == 1
            assert any("resync (netlink overrun (ENOBUFS))" in e for e in f.events)


def test_unsupported_object_is_reported_and_following_goes_on():
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        k.configure("ip addr add 10.0.0.1/24 dev tun0")
        r = Router()
        with r.follow_kernel(k.netns) as f:
            assert f.sync()
            try:
                k.configure("ip nexthop add id 1 dev tun0\nip route add 10.62.0.0/16 nhid 1")
            except ko.KernelConfigError as e:
                pytest.skip(f"kernel refused: {e.stderr.strip()}")
            assert f.sync()
            assert f.diverged and "route 10.62.0.0/16 table main" in f.unsupported
            assert any("not supported: route 10.62.0.0/16 table main: nexthop object" in e
                       for e in f.events), list(f.events)
            assert f.stats.unsupported == 1
            k.configure("ip route add 10.9.0.0/16 via 10.0.0.2 dev tun0")
            assert f.sync()
            assert (4, 254, ipaddress.ip_network("10.9.0.0/16"), 0) in r.state.routes
            # a resync cannot import such a namespace: the last configuration is
            # kept, the failure reported, and the resync retried until it works
            f.RETRY_S = 0.3
            assert f.resync("test")
            assert f.stats.errors == 1 and f.stats.resyncs == 0
            assert any(e.startswith("resync (test) failed: not supported: route 10.62.0.0/16")
                       for e in f.events), list(f.events)
            assert (4, 254, ipaddress.ip_network("10.9.0.0/16"), 0) in r.state.routes
            k.configure("ip route del 10.62.0.0/16")
            deadline = time.monotonic() + 10
            while f.stats.resyncs == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert f.stats.resyncs == 1, list(f.events)
            _same_as_import(f, r, k.netns, "once the unsupported route is gone")
            assert not f.diverged


def test_unsupported_device_and_what_goes_through_it():
    """A bridge (not modelled): the link, its address and a route through
    it are reported by name, none of them reaches fastpath, and once the
    bridge is deleted the follower is no longer diverged."""
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        r = Router()
        with r.follow_kernel(k.netns) as f:
            try:
                k.configure("ip link add br0 type bridge")
            except ko.KernelConfigError as e:
                pytest.skip(f"kernel refused: {e.stderr.strip()}")
            k.configure("ip link set dev br0 up\nip addr add 10.7.0.1/24 dev br0\n"
                        "ip route add 10.8.0.0/16 via 10.7.0.2 dev br0")
            assert f.sync()
            assert "br0" not in r.state.interfaces
            assert "link br0" in f.unsupported
            assert any(o.startswith("address 10.7.0.1/24 dev ifindex") for o in f.unsupported)
            assert any("route 10.8.0.0/16 table main" in o for o in f.unsupported), f.unsupported
            assert any("not supported: link br0: link type bridge" in e for e in f.events)
            k.configure("ip link del br0")
            _same_as_import(f, r, k.netns, "once the bridge is gone")
            assert not f.diverged, f.unsupported


def test_ipv4_alternative_routes_are_reported():
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        k.configure("ip addr add 10.0.0.1/24 dev tun0\nip route add 10.64.0.0/16 via 10.0.0.2 dev tun0")
        r = Router()
        with r.follow_kernel(k.netns) as f:
            k.configure("ip route append 10.64.0.0/16 via 10.0.0.3 dev tun0")
            assert f.sync()
            assert f.diverged
            assert any("not supported: route 10.64.0.0/16 table main metric 0: a second route with "
                       "the same table, prefix and metric" in e for e in f.events), list(f.events)
            k.configure("ip route del 10.64.0.0/16 via 10.0.0.2 dev tun0")
            _same_as_import(f, r, k.netns, "one alternative left")
            assert not f.diverged and f.stats.resyncs == 1
            # IPv6: an appended gateway is an ECMP sibling (supported), a
            # device route appended to another is a second route
            k.configure("ip -6 addr add 2001:db8::1/64 dev tun0\n"
                        "ip -6 route add 2001:db8:9::/48 via 2001:db8::2 dev tun0\n"
                        "ip -6 route append 2001:db8:9::/48 via 2001:db8::3 dev tun0")
            _same_as_import(f, r, k.netns, "IPv6 ECMP append")
            assert not f.diverged
            k.configure("ip -6 route add 2001:db8:a::/48 dev tun0")
            try:
                k.configure("ip -6 route append 2001:db8:a::/48 dev lo")
            except ko.KernelConfigError:
                return
            assert f.sync()
            assert any("route 2001:db8:a::/48 table main metric 1024: a second route" in e
                       for e in f.events), list(f.events)


@pytest.mark.parametrize("promote", [0, 1])
def test_primary_address_with_secondaries(promote):
    """Deleting an IPv4 primary with secondaries: with promote_secondaries
    the kernel keeps the others (one promoted), without it they go; either
    way the follower ends equal to a fresh import."""
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        k.configure(f"sysctl -w net.ipv4.conf.tun0.promote_secondaries={promote}\n"
                    "ip addr add 10.0.1.1/24 dev tun0\nip addr add 10.0.1.7/24 dev tun0\n"
                    "ip addr add 10.0.1.8/24 dev tun0")
        r = Router()
        with r.follow_kernel(k.netns) as f:
            k.configure("ip addr del 10.0.1.1/24 dev tun0")
            _same_as_import(f, r, k.netns, f"promote_secondaries={promote}")
            left = [str(a) for a in r.state.interfaces["tun0"].addrs if a.version == 4]
            assert left == (["10.0.1.7/24", "10.0.1.8/24"] if promote else [])


def _fds():
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            out[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return out


def test_stop_leaves_no_thread_and_no_socket():
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        before_fds = _fds()
        before_threads = set(threading.enumerate())
        r = Router()
        f = r.follow_kernel(k.netns)
        assert f.running and any(t.name.startswith("fastpath-follow") for t in threading.enumerate())
        k.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0")
        assert f.sync()
        f.stop()
        assert not f.running
        assert set(threading.enumerate()) <= before_threads
        left = {fd: t for fd, t in _fds().items() if fd not in before_fds and not t.startswith("/proc")}
        assert left == {}, left
        f.stop()                       # twice is fine


def test_dataplane_follows():
    with ko.KernelOracle(ifaces=("tun0", "tun1")) as k:
        k.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0\nip -6 addr add 2001:db8:2::1/64 dev tun1")
        with fastpath.Dataplane("", workers=1, pin=False) as dp:
            with dp.follow_kernel(k.netns) as f:
                k.configure("ip -6 route add 2001:db8:9::/48 via 2001:db8:2::2 dev tun1")
                _same_as_import(f, dp, k.netns, "dataplane")
                with f.lock:
                    b = dp.process(fastpath.Batch.from_packets([PROBES[0]], iif="tun0"))
                res = b.results()[0]
                assert (res.verdict, res.oif) == ("forward", "tun1")


def test_missing_namespace():
    with pytest.raises(nl.KernelImportError, match="does not exist"):
        Router().follow_kernel(f"fp-missing-{os.getpid()}")


def test_cli_import_follow_exits_0_on_sigterm():
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        k.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0")
        p = subprocess.Popen([sys.executable, "-m", "fastpath.kernel", "import", "--follow",
                              "--netns", k.netns], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=dict(os.environ, PYTHONPATH=ROOT))
        lines = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(ln) for ln in iter(p.stdout.readline, "")],
                                  daemon=True)
        reader.start()

        def readline():
            try:
                return lines.get(timeout=30)
            except queue.Empty:
                return "(nothing within 30 s)"
        try:
            head = []
            while True:
                ln = readline()
                assert ln.endswith("\n"), ln
                head.append(ln)
                if ln.startswith("# following "):
                    break
            assert "ip -6 addr add 2001:db8:1::1/64 dev tun0\n" in head
            k.configure("ip -6 route add 2001:db8:9::/48 via 2001:db8:1::2 dev tun0")
            assert readline() == "ip -6 route replace 2001:db8:9::/48 via 2001:db8:1::2 dev tun0\n"
            k.configure("ip -6 route del 2001:db8:9::/48")
            assert readline().startswith("ip -6 route del 2001:db8:9::/48")
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
            reader.join(10)
            err = p.stderr.read()
        finally:
            _reap(p)
    assert p.returncode == 0, err
    assert err == "" and "Traceback" not in err


# ---------------------------------------------------------------------------
# issue 47: what the SRv6 selftest labs change live: veths whose peer is
# another namespace's, l3mdev rules, proxy entries
try:
    from .test_kernel_import import VRF_MROUTE, _namespaces, _need_vrf, _sh, _without  # noqa: E402
except ImportError:  # pragma: no cover - tests/ as a plain directory on sys.path
    from test_kernel_import import VRF_MROUTE, _namespaces, _need_vrf, _sh, _without  # noqa: E402


@pytest.mark.kernel
def test_veths_with_their_peer_elsewhere_are_followed():
    """The three ways a lab puts a veth's ends in two namespaces; each end
    in the followed namespace becomes an interface (a NIC) at once, and
    what goes through it is followed, with no resync."""
    with ko.KernelOracle(ifaces=("tun0",)) as k, _namespaces("hs") as ns:
        rt, hs = k.netns, ns["hs"]
        r = Router()
        applied = []
        with r.follow_kernel(rt, on_apply=applied.extend) as f:
            assert f.sync()
            # 1. made in both at once: the router's end announced with its peer tied
            _sh("ip", "link", "add", "veth-t100", "netns", rt, "type", "veth", "peer", "name",
                "veth0", "netns", hs)
            _same_as_import(f, r, rt, "veth-t100")
            # 2. the router's end is the peer the kernel registers first, announced
            # before the pair is tied (and never again): the follower asks
            _sh("ip", "-n", hs, "link", "add", "veth1", "type", "veth", "peer", "name",
                "veth-t200", "netns", rt)
            _same_as_import(f, r, rt, "veth-t200")
            # 3. the selftests' way: made in the host, one end moved to the router
            _sh("ip", "-n", hs, "link", "add", "veth2", "type", "veth", "peer", "name", "veth-t300")
            _sh("ip", "-n", hs, "link", "set", "veth-t300", "netns", rt)
            _same_as_import(f, r, rt, "veth-t300")
            for n, dev in enumerate(("veth-t100", "veth-t200", "veth-t300"), 1):
                k.configure(f"ip link set dev {dev} up\nip addr add 10.0.{n}.254/24 dev {dev}\n"
                            f"ip -6 addr add cafe:{n}::254/64 dev {dev}\n"
                            f"ip route add 10.9.{n}.0/24 via 10.0.{n}.1 dev {dev}")
                _same_as_import(f, r, rt, f"addresses and a route on {dev}")
            # and a pair with both ends here is still a veth pair
            k.configure("ip link add va type veth peer name vb")
            _same_as_import(f, r, rt, "a veth pair inside")
            assert r.state.interfaces["va"].kind == "veth"
            st = f.stats
            assert st.resyncs == 0 and st.errors == 0 and not f.diverged, list(f.events)
    for dev in ("veth-t100", "veth-t200", "veth-t300"):
        assert f"ip link set dev {dev} up" in applied, applied
        assert r.state.interfaces[dev].kind is None
    assert not any("type veth peer name veth-t" in ln for ln in applied)


@pytest.mark.kernel
def test_proxy_entries_are_followed():
    """The kernel sends no notification for proxy entries: the follower
    dumps them at every sync() and, while idle, every PROXY_POLL_S seconds,
    and applies the difference (no resync)."""
    with ko.KernelOracle(ifaces=("tun0", "tun1")) as k:
        k.configure("ip addr add 10.0.0.254/24 dev tun0\nip -6 addr add cafe::254/64 dev tun0\n"
                    "ip neigh add proxy 10.0.0.7 dev tun0")
        r = Router()
        applied = []
        with r.follow_kernel(k.netns, on_apply=applied.extend) as f:
            assert r.state.proxies == {("tun0", ipaddress.ip_address("10.0.0.7")): False}
            steps = ["ip neigh add proxy 10.0.0.2 dev tun0",
                     "ip -6 neigh add proxy cafe::2 dev tun0\nip -6 neigh add proxy cafe::3 dev tun1 router",
                     "ip -6 neigh replace proxy cafe::3 dev tun1",          # NTF_ROUTER cleared
                     "ip neigh del proxy 10.0.0.7 dev tun0"]
            for cmds in steps:
                k.configure(cmds)
                _same_as_import(f, r, k.netns, cmds)
            # without a sync: the periodic dump
            f.PROXY_POLL_S = 0.2
            k.configure("ip -6 neigh del proxy cafe::2 dev tun0")
            key = ("tun0", ipaddress.ip_address("cafe::2"))
            end = time.monotonic() + 10
            while key in r.state.proxies and time.monotonic() < end:
                time.sleep(0.05)
            assert key not in r.state.proxies
            _same_as_import(f, r, k.netns, "the periodic dump")
            assert f.stats.resyncs == 0 and f.stats.errors == 0 and not f.diverged, list(f.events)
            assert r.state.proxies == {("tun0", ipaddress.ip_address("10.0.0.2")): False,
                                       ("tun1", ipaddress.ip_address("cafe::3")): False}
    assert "ip -4 neigh add proxy 10.0.0.2 dev tun0" in applied
    assert "ip -6 neigh add proxy cafe::3 dev tun1 router" in applied
    assert "ip -6 neigh add proxy cafe::3 dev tun1" in applied
    assert "ip -4 neigh del proxy 10.0.0.7 dev tun0" in applied
    assert "ip -6 neigh del proxy cafe::2 dev tun0" in applied


@pytest.mark.kernel
def test_proxy_notification_is_applied():
    """Should a kernel announce a proxy entry (RTM_NEWNEIGH with NTF_PROXY),
    it is applied as one (the next dump then says what the kernel holds)."""
    from pyroute2.netlink.rtnl.ndmsg import ndmsg
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        r = Router()
        with r.follow_kernel(k.netns) as f:
            assert f.sync()
            m = ndmsg()
            m["header"]["type"] = 28
            m["family"], m["ifindex"], m["flags"] = 2, r.state.interfaces["tun0"].ifindex, \
                nl.NTF_PROXY | nl.NTF_ROUTER
            m["attrs"] = [("NDA_DST", "10.0.0.9")]
            m.encode()
            with f.lock:
                f._apply_burst([(28, 0, bytes(m.data))])
                assert r.state.proxies == {("tun0", ipaddress.ip_address("10.0.0.9")): True}
            _same_as_import(f, r, k.netns, "the dump after the notification")
            assert r.state.proxies == {}


@pytest.mark.kernel
def test_l3mdev_rules_are_followed():
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        r = Router()
        applied = []
        with r.follow_kernel(k.netns, on_apply=applied.extend) as f:
            try:
                k.configure("ip rule add pref 500 l3mdev\nip -6 rule add pref 600 l3mdev")
            except ko.KernelConfigError as e:
                pytest.skip(f"kernel refused: {e.stderr.strip()}")
            _same_as_import(f, r, k.netns, "l3mdev rules added")
            assert [x.pref for x in r.state.rules[4] if x.l3mdev] == [500]
            k.configure("ip rule del pref 500 l3mdev")
            _same_as_import(f, r, k.netns, "l3mdev rule deleted")
            assert f.stats.resyncs == 0 and not f.diverged, list(f.events)
    assert applied == ["ip -4 rule add pref 500 l3mdev", "ip -6 rule add pref 600 l3mdev",
                       "ip -4 rule del pref 500 l3mdev"]


@pytest.mark.kernel
@pytest.mark.kernel_vrf
def test_vrf_and_its_l3mdev_rules_are_followed():
    """A VRF made while following: the kernel's 'pref 1000 l3mdev' rules
    (announced before the VRF itself) are applied, not refused; a device
    enslaved, its routes in the VRF's table, the VRF down and up."""
    _need_vrf()
    with ko.KernelOracle(ifaces=("tun0", "tun1")) as k, _namespaces("hs") as ns:
        r = Router()
        with r.follow_kernel(k.netns) as f:
            assert f.sync()
            _sh("ip", "link", "add", "veth-t100", "netns", k.netns, "type", "veth", "peer", "name",
                "veth0", "netns", ns["hs"])
            for cmds in ("ip link add vrf-100 type vrf table 100",
                         "ip link set dev vrf-100 up",
                         "ip link set dev veth-t100 master vrf-100\nip link set dev veth-t100 up",
                         "ip addr add 10.0.0.254/24 dev veth-t100\n"
                         "ip -6 addr add cafe::254/64 dev veth-t100",
                         "ip link set dev tun1 master vrf-100\nip addr add 10.0.1.1/24 dev tun1",
                         "ip route add 10.9.0.0/16 via 10.0.0.1 dev veth-t100 table 100",
                         "ip -6 route add unreachable default metric 4278198272 table 100",
                         "ip -6 neigh add proxy cafe::2 dev veth-t100",
                         "ip link set dev tun1 nomaster",
                         "ip link set dev vrf-100 down",
                         "ip link set dev vrf-100 up"):
                k.configure(cmds)
                # (but for the VRF table's ff00::/8: see VRF_MROUTE)
                assert f.sync(30), cmds
                got = _without(nl.canonical(r.state), VRF_MROUTE)
                want = _without(_fresh(k.netns), VRF_MROUTE)
                assert got.dump().splitlines() == want.dump().splitlines(), cmds
                assert got == want, cmds
            for fam in (4, 6):
                assert [(x.pref, x.table) for x in r.state.rules[fam] if x.l3mdev] == [(1000, 0)]
            assert r.state.interfaces["veth-t100"].master == "vrf-100"
            assert not f.diverged, f.unsupported
            assert not any("not supported" in e for e in f.events), list(f.events)


def test_no_namespace_left_behind():
    mine = [n for n in os.listdir(ko.NETNS_RUN_DIR) if n.startswith(f"fp-{os.getpid()}-")] \
        if os.path.isdir(ko.NETNS_RUN_DIR) else []
    assert mine == []


def test_replay_follow_applies_changes_while_it_runs(tmp_path):
    """``python -m fastpath.replay - --follow NS``: configured from the
    namespace, and a route added while the capture streams in is used by
    the packets read after it."""
    import json

    import fastpath.pcap as fpcap
    cap = tmp_path / "in.pcapng"
    with fpcap.PcapngWriter(str(cap)) as w:
        w.write_packets([ip6("2001:db8:1::2", "2001:db8:9::5")] * 40000, interface="tun0",
                        linktype="raw")
    data = cap.read_bytes()
    half = len(data) // 2
    with ko.KernelOracle(ifaces=("tun0", "tun1")) as k:
        k.configure("ip -6 addr add 2001:db8:1::1/64 dev tun0\nip -6 addr add 2001:db8:2::1/64 dev tun1")
        ns = k.netns
        p = subprocess.Popen([sys.executable, "-m", "fastpath.replay", "-", "--follow", ns,
                              "--summary", "json", "--batch", "64"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                             env=dict(os.environ, PYTHONPATH=ROOT))
        try:
            p.stdin.write(data[:half])
            p.stdin.flush()
            time.sleep(2)                       # the first half read and replayed (no route: ICMP)
            k.configure("ip -6 route add 2001:db8:9::/48 via 2001:db8:2::2 dev tun1")
            time.sleep(1)
            p.stdin.write(data[half:])
            p.stdin.close()
            p.wait(timeout=120)
            out, err = p.stdout.read(), p.stderr.read()
        finally:
            _reap(p)
    assert p.returncode == 0, err
    d = json.loads(out)
    assert d["packets"] == 40000
    assert d["verdicts"].get("icmp", 0) > 0 and d["verdicts"].get("forward", 0) > 0, d["verdicts"]
    assert d["egress"].get("tun1") == d["verdicts"]["forward"]
    assert d["follow"]["netns"] == ns and d["follow"]["lines"] >= 1
    assert d["follow"]["resyncs"] == 0 and not d["follow"]["diverged"]


def test_replay_follow_usage_errors(tmp_path):
    cap = tmp_path / "x.pcapng"
    cap.write_bytes(b"")
    for args in (["--config", "/dev/null", "--follow", "x"], [],
                 ["--follow", "x", "--workers", "2"]):
        p = subprocess.run([sys.executable, "-m", "fastpath.replay", str(cap), *args],
                           capture_output=True, text=True, timeout=60, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=ROOT))
        assert p.returncode == 2, (args, p)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "fastpath.replay", str(cap), "--follow",
                        f"fp-missing-{os.getpid()}"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 1 and "does not exist" in p.stderr, p

"""fastpath.topology: sysfs parsing on fake trees, cpulists, placement."""
from __future__ import annotations

import json
import os

import pytest

from fastpath import topology as topo
from fastpath.topology import format_cpulist, parse_cpulist, place, read_topology


# ---------------------------------------------------------------------------
# fake sysfs trees

def make_sys(root, cpus, *, online=None, nodes=None, possible=None, write_online=True):
    """A fake /sys under ``root``.  ``cpus``: {cpu: (socket, core, siblings)}
    for the online CPUs; ``online``: the online file's text (default: the
    cpulist of ``cpus``); ``nodes``: {node: cpulist text} or None for no
    node directory; ``possible``: extra CPU numbers that get an (offline,
    topology-less) cpuN directory."""
    cpudir = root / "devices" / "system" / "cpu"
    cpudir.mkdir(parents=True)
    if write_online:
        (cpudir / "online").write_text((online if online is not None
                                        else format_cpulist(cpus)) + "\n")
    for n, (sock, core, sibs) in cpus.items():
        t = cpudir / f"cpu{n}" / "topology"
        t.mkdir(parents=True)
        (t / "physical_package_id").write_text(f"{sock}\n")
        (t / "core_id").write_text(f"{core}\n")
        (t / "thread_siblings_list").write_text(format_cpulist(sibs) + "\n")
    for n in possible or ():
        (cpudir / f"cpu{n}").mkdir()
        (cpudir / f"cpu{n}" / "online").write_text("0\n")
    if nodes is not None:
        nd = root / "devices" / "system" / "node"
        nd.mkdir(parents=True)
        for node, text in nodes.items():
            (nd / f"node{node}").mkdir()
            (nd / f"node{node}" / "cpulist").write_text(text + "\n")
    return str(root)


def two_socket_ht():
    """2 sockets x 10 cores x 2 threads, Linux numbering: CPU 0-9 socket 0
    first threads, 10-19 socket 1 first threads, 20-29 / 30-39 siblings."""
    cpus = {}
    for s in range(2):
        for k in range(10):
            a, b = s * 10 + k, 20 + s * 10 + k
            core = [0, 1, 2, 3, 4, 8, 9, 10, 11, 12][k]         # core_ids have holes
            cpus[a] = (s, core, [a, b])
            cpus[b] = (s, core, [a, b])
    return cpus


@pytest.fixture
def big(tmp_path):
    root = make_sys(tmp_path, two_socket_ht(),
                    nodes={0: "0-9,20-29", 1: "10-19,30-39"})
    (tmp_path / "cpuinfo").write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU E5-2660 v3"
        "  @ 2.60GHz\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU E5-2660 v3 @ 2.60GHz\n")
    return read_topology(root, cpuinfo=str(tmp_path / "cpuinfo"), kernel="5.15.0-test")


@pytest.fixture
def vm(tmp_path):
    root = make_sys(tmp_path, {0: (0, 0, [0]), 1: (0, 1, [1])}, nodes=None)
    return read_topology(root, kernel="6.1.0")


# ---------------------------------------------------------------------------
# cpulists

@pytest.mark.parametrize("text, cpus", [
    ("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]),
    ("0", [0]),
    ("5-5", [5]),
    ("0-3\n", [0, 1, 2, 3]),
    ("", []),
    ("\n", []),
    ("8,0-1", [0, 1, 8]),                 # any order, sorted
    ("0-3,2-5", [0, 1, 2, 3, 4, 5]),      # overlaps merged
    ("0-15:2/4", [0, 1, 4, 5, 8, 9, 12, 13]),
    ("1-9:1/3", [1, 4, 7]),
    ("1023", [1023]),
])
def test_parse_cpulist(text, cpus):
    assert parse_cpulist(text) == cpus


@pytest.mark.parametrize("text", [
    "0-", "-3", "3-1", "0,,1", "0,", ",0", "a", "0-3,x", "1 2", "0 - 3", "0-3:0/4", "0-3:5/4",
    "0-3:1/0", "0:1/2", "0-1-2", "+1", "0x3", "１", "0\n,1", "0-1\n,3",
])
def test_parse_cpulist_rejects(text):
    with pytest.raises(ValueError) as e:
        parse_cpulist(text)
    msg = str(e.value)
    assert "\n" not in msg and "cpulist" in msg


def test_parse_cpulist_type():
    with pytest.raises(TypeError):
        parse_cpulist([0, 1])


@pytest.mark.parametrize("cpus, text", [
    ([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"),
    ([], ""),
    ([7], "7"),
    ([3, 1, 2, 2], "1-3"),
    ({0, 2, 4}, "0,2,4"),
    (range(40), "0-39"),
])
def test_format_cpulist(cpus, text):
    assert format_cpulist(cpus) == text
    assert parse_cpulist(text) == sorted(set(cpus))


def test_format_cpulist_rejects_negative():
    with pytest.raises(ValueError):
        format_cpulist([-1, 0])


# ---------------------------------------------------------------------------
# reading

def test_two_socket_ht(big):
    assert big.online == list(range(40))
    assert big.sockets == {0: list(range(10)) + list(range(20, 30)),
                           1: list(range(10, 20)) + list(range(30, 40))}
    assert big.nodes == big.sockets
    c = big.cpu(25)
    assert (c.cpu, c.socket, c.core, c.node, c.siblings, c.thread) == (25, 0, 8, 0, (5, 25), 1)
    assert big.cpu(5).thread == 0
    assert len(big.cores) == 20
    assert big.allowed == tuple(range(40))          # fake root: every online CPU
    assert big.offline == ()
    assert big.describe() == ("Intel(R) Xeon(R) CPU E5-2660 v3 @ 2.60GHz: 2 sockets x 10 cores x 2 threads"
                              " (40 CPUs online), 2 NUMA nodes, kernel 5.15.0-test")


def test_to_dict_is_json(big):
    d = json.loads(json.dumps(big.to_dict()))
    assert d["online"] == "0-39"
    assert d["sockets"] == {"0": "0-9,20-29", "1": "10-19,30-39"}
    assert d["cpus"][25] == {"cpu": 25, "socket": 0, "core": 8, "node": 0,
                             "siblings": [5, 25], "thread": 1}
    assert d["describe"] == big.describe()


def test_vm_without_nodes(vm):
    assert vm.online == [0, 1]
    assert vm.sockets == {0: [0, 1]}
    assert [c.node for c in vm.cpus] == [0, 0]      # no NUMA in sysfs: one node, 0
    assert vm.nodes == {0: [0, 1]}
    assert "1 socket x 2 cores x 1 thread (2 CPUs online), 1 NUMA node, kernel 6.1.0" in vm.describe()
    assert place(vm, 2) == [0, 1]
    assert place(vm, 2, "spread") == [0, 1]


def test_offline_cpus(tmp_path):
    # 8 CPUs possible, 2 and 5-7 offline; the siblings files still list offline ones
    cpus = {0: (0, 0, [0, 4]), 1: (0, 1, [1, 5]), 3: (0, 3, [3, 7]), 4: (0, 0, [0, 4])}
    root = make_sys(tmp_path, cpus, online="0-1,3-4", possible=[2, 5, 6, 7],
                    nodes={0: "0-7", 1: ""})
    t = read_topology(root, kernel="k")
    assert t.online == [0, 1, 3, 4]
    assert t.offline == (2, 5, 6, 7)
    assert t.cpu(1).siblings == (1,)                # offline sibling 5 dropped
    assert t.cpu(4).siblings == (0, 4) and t.cpu(4).thread == 1
    assert t.node_ids == (0, 1)                     # the CPU-less node still counts
    with pytest.raises(KeyError):
        t.cpu(2)
    d = t.describe()
    assert "4 CPUs online, 4 offline" in d and "2 NUMA nodes" in d
    assert "x 1-2 threads" in d
    # first threads of the cores first, then the sibling
    assert place(t, 4) == [0, 1, 3, 4]
    with pytest.raises(ValueError, match="CPU 2 is not online"):
        place(t, 1, cpus=[2])


def test_no_online_file(tmp_path):
    root = make_sys(tmp_path, {0: (0, 0, [0]), 1: (0, 1, [1])}, write_online=False,
                    possible=[2])
    t = read_topology(root)
    assert t.online == [0, 1] and t.offline == (2,)


def test_weird_online_file(tmp_path):
    root = make_sys(tmp_path, {0: (0, 0, [0])}, online="0-1,,2")
    with pytest.raises(ValueError, match="cpulist"):
        read_topology(root)


def test_missing_topology_files(tmp_path):
    # a CPU whose topology directory is empty: socket 0, its own core, no siblings
    root = make_sys(tmp_path, {0: (0, 0, [0])}, online="0-1", nodes={0: "0"})
    (tmp_path / "devices/system/cpu/cpu1/topology").mkdir(parents=True)
    t = read_topology(root)
    c = t.cpu(1)
    assert (c.socket, c.core, c.siblings, c.node) == (0, 1, (1,), -1)   # in no node's list


def test_negative_package_id(tmp_path):
    root = make_sys(tmp_path, {0: (-1, 0, [0]), 1: (-1, 1, [1])})
    assert read_topology(root).sockets == {0: [0, 1]}


def test_not_a_sysfs_tree(tmp_path):
    with pytest.raises(ValueError, match="no such directory"):
        read_topology(str(tmp_path))


def test_garbage_integer(tmp_path):
    root = make_sys(tmp_path, {0: (0, 0, [0])})
    (tmp_path / "devices/system/cpu/cpu0/topology/core_id").write_text("zero\n")
    with pytest.raises(ValueError, match="core_id"):
        read_topology(root)


# ---------------------------------------------------------------------------
# placement

def test_one_socket(big):
    # 10 workers: the 10 physical cores of socket 0
    assert place(big, 10) == list(range(10))
    # 16: socket 0's cores, then its hyperthread siblings (socket not full yet)
    assert place(big, 16) == list(range(10)) + list(range(20, 26))
    # 24: socket 0 full (20), then socket 1's physical cores
    assert place(big, 24) == list(range(10)) + list(range(20, 30)) + list(range(10, 14))
    assert sorted(place(big, 40)) == list(range(40))
    # the NIC on socket 1
    assert place(big, 3, socket=1) == [10, 11, 12]
    assert place(big, 12, socket=1) == list(range(10, 20)) + [30, 31]


def test_one_socket_no_smt(big):
    # the seeds' "10 on the NIC's socket", then "10 + 6 on two sockets"
    assert place(big, 10, smt=False) == list(range(10))
    assert place(big, 16, smt=False) == list(range(10)) + list(range(10, 16))
    with pytest.raises(ValueError, match="20 usable CPUs .*one per core"):
        place(big, 21, smt=False)


def test_spread(big):
    assert place(big, 4, "spread") == [0, 10, 1, 11]
    assert place(big, 4, "spread", socket=1) == [10, 0, 11, 1]
    # every physical core before any sibling
    p = place(big, 22, "spread")
    assert p[:20] == [x for k in range(10) for x in (k, 10 + k)]
    assert p[20:] == [20, 30]


def test_affinity_mask(big):
    allowed = list(range(2, 8)) + [25, 26, 35]
    assert place(big, 4, allowed=allowed) == [2, 3, 4, 5]
    # 25 is the sibling of 5, which is allowed: 25 comes after socket 0's first threads
    assert place(big, 9, allowed=allowed) == [2, 3, 4, 5, 6, 7, 25, 26, 35]
    # 35's core (15, 35) has only 35 allowed: it counts as a first thread
    assert place(big, 3, "spread", allowed=allowed) == [2, 35, 3]
    with pytest.raises(ValueError, match="10 workers but only 9 usable CPUs"):
        place(big, 10, allowed=allowed)
    assert place(big, 11, allowed=allowed, oversubscribe=True)[9:] == [2, 3]
    with pytest.raises(ValueError, match="socket 1 has no usable CPU"):
        place(big, 1, allowed=[0, 1], socket=1)
    # allowed given as a cpulist string
    assert place(big, 2, allowed="30-31") == [30, 31]


def test_explicit_cpus(big):
    assert place(big, 3, cpus=[7, 3, 33]) == [7, 3, 33]
    assert place(big, 2, cpus="4-5,30") == [4, 5]
    with pytest.raises(ValueError, match="^CPU 40 is not online \\(online: 0-39\\)$"):
        place(big, 1, cpus=[40])
    with pytest.raises(ValueError, match="^CPU 9 is not in the affinity mask \\(allowed: 0-8\\)$"):
        place(big, 2, cpus=[0, 9], allowed=range(9))
    with pytest.raises(ValueError, match="CPU 3 is listed twice"):
        place(big, 2, cpus=[3, 3])
    with pytest.raises(ValueError, match="3 workers but only 2 CPUs given"):
        place(big, 3, cpus=[1, 2])
    assert place(big, 5, cpus=[1, 2], oversubscribe=True) == [1, 2, 1, 2, 1]
    with pytest.raises(ValueError, match="not a CPU number"):
        place(big, 1, cpus=["x"])


def test_place_arguments(big):
    assert place(big, 0) == []
    with pytest.raises(ValueError):
        place(big, -1)
    with pytest.raises(ValueError):
        place(big, 2.0)
    with pytest.raises(ValueError, match="placement must be one of"):
        place(big, 1, "nearest")
    with pytest.raises(ValueError, match="1 workers but only 0 usable CPUs"):
        place(big, 1, allowed=[], oversubscribe=True)


def test_messages_are_one_line(big):
    for kw in ({"cpus": [99]}, {"cpus": [1], "allowed": [0]}, {"allowed": [0], "cpus": None}):
        with pytest.raises(ValueError) as e:
            place(big, 3, **kw)
        assert "\n" not in str(e.value)


# ---------------------------------------------------------------------------
# the real machine (smoke)

def test_real_machine():
    if not os.path.isdir("/sys/devices/system/cpu"):
        pytest.skip("no sysfs")
    t = read_topology()
    assert t.online and set(t.allowed) == os.sched_getaffinity(0)
    assert set(t.allowed) <= set(t.online) | set(t.offline)
    line = t.describe()
    assert "\n" not in line and "socket" in line and "NUMA" in line
    json.dumps(t.to_dict())
    usable = [c for c in t.online if c in set(t.allowed)]
    got = place(t, len(usable))
    assert sorted(got) == sorted(usable)
    assert sorted(place(t, len(usable), "spread")) == sorted(usable)
    with pytest.raises(ValueError):
        place(t, len(usable) + 1)
    assert topo.parse_cpulist(open("/sys/devices/system/cpu/online").read()) == t.online

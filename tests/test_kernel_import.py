"""Import (issue 18): a configuration applied with ``ip`` to a fresh kernel
namespace, read back over rtnetlink (pyroute2), gives the state fastpath
builds from the same text; what fastpath does not model is refused by name.

The normalisation of the round trip (``fastpath.kernel.netlink.canonical``
and ``_normalise`` below): the order of addresses across families and of
IPv4 primaries and secondaries, the order of routes, and the ::1/128 prefix
route the oracle's namespace set-up gives lo (writing
``net.ipv6.conf.all.addr_gen_mode`` re-runs addrconf on lo) are not
compared.
"""
from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
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
from fastpath.config import State  # noqa: E402
from fastpath.kernel import netlink as nl  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastpath.__file__)))


@pytest.fixture(autouse=True)
def _need_oracle():
    ok, reason = ko.oracle_available(seg6=False)
    if not ok:
        pytest.skip(reason)


def _namespace_lines() -> str:
    """The oracle's namespace sysctls that fastpath models (with effect)."""
    st = State()
    out = []
    for name, value in ko.NAMESPACE_SYSCTLS:
        try:
            st.sysctl(name)
        except KeyError:
            continue
        if name.rsplit(".", 1)[-1] in nl.NO_EFFECT_SYSCTLS:
            continue
        out.append(f"sysctl -w {name}={value}")
    return "\n".join(out) + "\n"


def _normalise(state: State) -> State:
    s = nl.canonical(state)
    r = s.routes.get((6, 254, ipaddress.IPv6Network("::1/128"), 256))
    if r is not None and r.proto == "kernel" and r.dev == "lo":
        del s.routes[r.key]
    return s


#: the automatic ff00::/8 route of a VRF's table: fastpath's configuration
#: derives one for the VRF device itself, Linux does not (addrconf_add_dev
#: skips l3mdev masters; 6.12); fastpath.config's model, not the import,
#: which writes what the kernel holds
VRF_MROUTE = (6, 100, ipaddress.IPv6Network("ff00::/8"), 256)


def _without(state: State, *keys) -> State:
    s = state.copy()
    for k in keys:
        s.routes.pop(k, None)
    return s


def _roundtrip(config: str, ifaces, setup=None, settle=None, ignore=()):
    """``setup(oracle)``: run before the configuration (devices made
    outside it: a veth whose peer is another namespace's); ``settle(oracle)``
    after it (wait for what the kernel does later: a carrier)."""
    with ko.KernelOracle(ifaces=ifaces) as k:
        if setup is not None:
            setup(k)
        k.configure(config)
        if settle is not None:
            settle(k)
        text = nl.import_text(k.netns)
        again = Router.from_kernel(k.netns)
    expected = Router().configure(_namespace_lines() + config)
    got = Router().configure(text)
    g, e = _without(_normalise(got.state), *ignore), _without(_normalise(expected.state), *ignore)
    assert g.dump().splitlines() == e.dump().splitlines()
    assert g == e
    assert again.dump() == got.dump()
    return text


EVERY_ROUTE_KIND = """
ip tuntap add dev tun0 mode tun
ip tuntap add dev tun1 mode tun
ip tuntap add dev tun2 mode tun
sysctl -w net.ipv6.conf.all.seg6_enabled=1
sysctl -w net.ipv6.conf.tun0.seg6_enabled=1
sysctl -w net.ipv6.conf.tun1.seg6_require_hmac=1
sysctl -w net.ipv6.conf.all.hop_limit=60
sysctl -w net.ipv6.seg6_flowlabel=1
sysctl -w net.ipv4.icmp_ratelimit=1000
sysctl -w net.ipv4.conf.tun2.forwarding=0
ip link set dev tun2 mtu 1400
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip -6 addr add 2001:db8:1::5/64 dev tun0
ip -6 addr add 2001:db8:2::1/64 dev tun1
ip -6 addr add 2001:db8:3::1/64 dev tun2
ip addr add 10.0.1.1/24 dev tun0
ip addr add 10.0.1.7/24 dev tun0
ip addr add 10.0.5.1/24 dev tun0
ip addr add 10.0.2.1/24 dev tun1
ip addr add 10.0.3.1/30 dev tun2
ip sr tunsrc set 2001:db8:1::1
ip sr hmac set 7 sha256 s3cret
ip sr hmac set 9 sha1 other
ip -6 route add 2001:db8:9::/48 via 2001:db8:2::2 dev tun1
ip -6 route add 2001:db8:10::/48 via 2001:db8:2::2 dev tun1 metric 50 proto static mtu 1300 hoplimit 9
ip -6 route add 2001:db8:11::/48 nexthop via 2001:db8:2::2 dev tun1 weight 3 nexthop via 2001:db8:3::2 dev tun2 weight 1
ip -6 route add 2001:db8:12::/48 dev tun2 table 100
ip -6 route add blackhole 2001:db8:20::/48
ip -6 route add unreachable 2001:db8:21::/48 table 100
ip -6 route add prohibit 2001:db8:22::/48 metric 10
ip -6 route add throw 2001:db8:23::/48 table 100
ip -6 route add local 2001:db8:24::1/128 dev tun0
ip -6 route add default via 2001:db8:3::2 dev tun2
ip -6 route add fc00::1/128 encap seg6local action End dev tun0
ip -6 route add fc00::2/128 encap seg6local action End flavors psp dev tun0
ip -6 route add fc00::3/128 encap seg6local action End.X nh6 2001:db8:2::2 count dev tun0
ip -6 route add fc00::4/128 encap seg6local action End.X nh6 2001:db8:2::2 flavors next-csid lblen 48 nflen 16 dev tun0
ip -6 route add fc00::5/128 encap seg6local action End.T table 100 dev tun0
ip -6 route add fc00::6/128 encap seg6local action End.DX6 nh6 2001:db8:2::2 dev tun0
ip -6 route add fc00::7/128 encap seg6local action End.DX4 nh4 10.0.2.2 dev tun0
ip -6 route add fc00::8/128 encap seg6local action End.DT6 table 100 dev tun0
ip -6 route add fc00::9/128 encap seg6local action End.B6 srh segs fc00::a,fc00::b dev tun0
ip -6 route add fc00::a/128 encap seg6local action End.B6.Encaps srh segs fc00::c hmac 7 dev tun0
ip -6 route add fc00::c/128 encap seg6local action End count dev tun0 table 100 metric 7
ip -6 route add fc00::d/128 encap seg6local action End.X nh6 2001:db8:2::2 flavors next-csid dev tun0
ip -6 route add 2001:db8:30::/48 encap seg6 mode encap segs fc00::1,fc00::2 dev tun1
ip -6 route add 2001:db8:31::/48 encap seg6 mode inline segs fc00::1 dev tun1
ip -6 route add 2001:db8:32::/48 encap seg6 mode encap.red segs fc00::1,fc00::2,fc00::3 hmac 9 dev tun1
ip -6 route add 2001:db8:33::/48 encap seg6 mode encap segs fc00::1 hmac 7 dev tun1 table 100
ip -6 rule add from 2001:db8:1::/64 table 100 pref 100
ip -6 rule add to 2001:db8:40::/48 iif tun1 prohibit pref 200
ip -6 rule add from 2001:db8:41::/48 blackhole pref 300
ip -6 rule add from 2001:db8:42::/48 unreachable pref 300
ip route add 10.9.0.0/16 via 10.0.2.2 dev tun1
ip route add 10.10.0.0/16 via 10.0.2.2 dev tun1 metric 20 proto zebra src 10.0.1.1
ip route add 10.11.0.0/16 nexthop via 10.0.2.2 dev tun1 weight 2 nexthop via 10.0.3.2 dev tun2
ip route add 10.12.0.0/16 dev tun2 table 100
ip route add 10.13.0.0/16 via 10.0.2.2 dev tun1 table 200 mtu 1280
ip route add blackhole 10.20.0.0/16
ip route add unreachable 10.21.0.0/16 table 100
ip route add prohibit 10.22.0.0/16
ip route add throw 10.23.0.0/16 table 100
ip route add local 10.24.0.1 dev tun0
ip route add broadcast 10.25.0.255 dev tun0
ip route add 10.26.0.0/16 dev tun0 scope host
ip route add 10.30.0.0/16 encap seg6 mode encap segs fc00::1 dev tun1
ip route add default via 10.0.3.2 dev tun2
ip rule add from 10.0.1.0/24 table 100 pref 100
ip rule add iif tun2 unreachable pref 150
ip rule add to 10.40.0.0/16 table 200 pref 160
"""


@pytest.mark.kernel_seg6
def test_roundtrip_every_route_kind():
    text = _roundtrip(EVERY_ROUTE_KIND, ("tun0", "tun1", "tun2"))
    # the kernel gives the HMAC secrets back (SEG6_CMD_DUMPHMAC)
    assert "ip sr hmac set 7 sha256 s3cret" in text
    assert "ip sr tunsrc set 2001:db8:1::1" in text
    assert "# note: route ff00::/8 table local metric 256 (proto kernel): the kernel has one per " \
        "interface (tun0, tun1, tun2), fastpath's configuration one (tun0's), its lookups " \
        "the others too (derived from the interfaces)" in text


@pytest.mark.kernel_seg6
def test_end_x_oif_as_the_kernel_keeps_it():
    """End.X's oif: a kernel that knows it keeps it and the import reads it
    back; Linux 6.12 accepts it and keeps nothing (seen in the VM: the
    route shows no oif), and then the import says so by having none."""
    line = "ip -6 route add fc00::3/128 encap seg6local action End.X nh6 2001:db8:2::2 oif tun1 dev tun0"
    with ko.KernelOracle(ifaces=("tun0", "tun1")) as k:
        k.configure("ip -6 addr add 2001:db8:2::1/64 dev tun1\n" + line)
        kept = "oif tun1" in k.ip("-6", "route", "show", "fc00::3/128")
        text = nl.import_text(k.netns)
    mine = [ln for ln in text.splitlines() if ln.startswith("ip -6 route add fc00::3/128")]
    assert len(mine) == 1 and (" oif tun1 " in mine[0]) == kept, (kept, mine)


MORE_TYPES = """
ip tuntap add dev tun0 mode tun
ip -6 addr add 2001:db8:1::1/64 dev tun0
ip addr add 10.0.1.1/24 dev tun0
ip -6 route add multicast ff0e::/16 dev tun0 table 100
ip -6 route add anycast 2001:db8:1::77/128 dev tun0
ip route add local 10.70.0.0/16 dev lo table 100
ip -6 route add local 2001:db8:70::/48 dev lo
ip -6 route add unreachable default table 200 metric 4000
ip route add multicast 224.1.0.0/16 dev tun0 table 100
ip route add anycast 10.71.0.1 dev tun0
ip route add 10.72.0.0/16 dev tun0 src 10.0.1.1 mtu 1400 table 300
"""


def test_roundtrip_local_anycast_multicast_routes():
    _roundtrip(MORE_TYPES, ("tun0",))


LINKS = """
ip tuntap add dev tun0 mode tun
ip tuntap add dev tap0 mode tap
ip link add va type veth peer name vb
ip link set dev va address 02:aa:00:00:00:01 mtu 9000
ip link set dev vb address 02:aa:00:00:00:02
ip link set dev tap0 address 02:bb:00:00:00:01
ip link set dev va up
ip link set dev vb down
ip link set dev tap0 up
ip link set dev lo mtu 16384
ip addr add 10.255.0.1/32 dev lo
ip -6 addr add 2001:db8:ff::1/128 dev lo
ip addr add 10.1.0.1/24 dev va
ip -6 addr add 2001:db8:a::1/64 dev va
ip addr add 10.2.0.1/24 dev tap0
ip addr add 10.3.0.1/24 dev tun0
ip -6 addr add 2001:db8:b::1/64 dev vb
ip neigh add 10.1.0.2 lladdr 02:cc:00:00:00:02 dev va nud permanent
ip -6 neigh add 2001:db8:a::2 lladdr 02:cc:00:00:00:03 dev va nud permanent
ip neigh add 10.2.0.9 lladdr 02:cc:00:00:00:09 dev tap0
ip route add 10.50.0.0/16 via 10.1.0.2 dev va
"""


def test_roundtrip_links_addresses_neighbours():
    text = _roundtrip(LINKS, ("tun0",))
    assert "ip link add vb type veth peer name va" in text or \
        "ip link add va type veth peer name vb" in text
    assert "ip tuntap add dev tap0 mode tap" in text


def test_roundtrip_empty_namespace_and_lo_down():
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        k.configure("ip link set dev lo down\nip link set dev tun0 down")
        st = nl.import_state(k.netns)
    assert not st.interfaces["lo"].up and not st.interfaces["tun0"].up
    # the kernel flushes lo's IPv6 address when it goes down (fastpath would keep it)
    assert [str(a) for a in st.interfaces["lo"].addrs] == ["127.0.0.1/8"]
    assert Router().configure(st.dump()).state == st


def _import_fails(config: str, ifaces=("tun0",)) -> str:
    with ko.KernelOracle(ifaces=ifaces) as k:
        k.configure(config)
        with pytest.raises(nl.NotSupported) as ei:
            nl.import_text(k.netns)
        out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fp-import-{os.getpid()}.conf")
        with open(out, "w") as f:
            f.write("keep me\n")
        try:
            p = subprocess.run([sys.executable, "-m", "fastpath.kernel", "import", "--netns", k.netns,
                                "-o", out], capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, PYTHONPATH=ROOT))
            with open(out) as f:
                kept = f.read()
        finally:
            os.unlink(out)
    assert p.returncode == 2, p
    assert p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert "not supported" in p.stderr
    assert kept == "keep me\n"          # -o FILE untouched on failure
    return str(ei.value)


BASE = "ip -6 addr add 2001:db8:1::1/64 dev tun0\nip addr add 10.0.0.1/24 dev tun0\n"


@pytest.mark.parametrize("line,expect", [
    ("ip -6 route add 2001:db8:50::/48 dev tun0 expires 100",
     "route 2001:db8:50::/48 table main: expiring route"),
    ("ip -6 route add 2001:db8:51::/48 from 2001:db8:1::/64 dev tun0",
     "route 2001:db8:51::/48 table main: source-specific route"),
    ("ip rule add fwmark 5 table 100 pref 10", "rule pref 10 (IPv4): selector fwmark"),
    ("ip rule add not from 10.0.0.0/8 table 100 pref 11", "rule pref 11 (IPv4): 'not'"),
    ("ip -6 addr add 2001:db8:7::1/64 dev tun0 valid_lft 100 preferred_lft 100",
     "address 2001:db8:7::1/64 dev tun0: finite lifetime"),
    ("ip addr add 10.9.0.1/24 dev tun0 label tun0:1", "address 10.9.0.1/24 dev tun0: label tun0:1"),
    ("ip route add 10.60.0.0/16 via 10.0.0.2 dev tun0 onlink", "onlink nexthop"),
    ("ip route add 10.61.0.0/16 via 10.0.0.2 dev tun0 advmss 1000", "route metric advmss"),
    ("ip nexthop add id 1 dev tun0\nip route add 10.62.0.0/16 nhid 1",
     "route 10.62.0.0/16 table main: nexthop object"),
    ("ip route add 10.63.0.0/16 encap ip id 5 dst 10.0.0.9 dev tun0",
     "route 10.63.0.0/16 table main: encap type ip"),
    ("sysctl -w net.ipv6.conf.tun0.disable_ipv6=1", "link tun0: IPv6 disabled"),
    ("ip route add 10.65.0.0/16 via 10.0.0.2 dev tun0 realm 5", "realms"),
    ("ip -6 route add 2001:db8:52::/48 via 2001:db8:1::2 dev tun0 pref high",
     "IPv6 router preference other than medium"),
    ("ip route add 10.64.0.0/16 via 10.0.0.2 dev tun0\n"
     "ip route append 10.64.0.0/16 via 10.0.0.3 dev tun0",
     "a second route with the same table, prefix and metric"),
])
def test_unsupported_objects_are_named(line, expect):
    try:
        msg = _import_fails(BASE + line)
    except ko.KernelConfigError as e:       # this kernel lacks the feature: nothing to import
        pytest.skip(f"kernel refused: {e.stderr.strip()}")
    assert msg.startswith("not supported: ")
    assert expect in msg, msg


def _ifinfmsg(index, name, kind=None, master=None, data=None, link=None, mac=None):
    """An RTM_NEWLINK as rtnetlink sends it (encoded, then decoded by pyroute2)."""
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
    m = ifinfmsg()
    m["family"] = 0
    m["index"] = index
    m["ifi_type"] = 1
    m["flags"] = 1
    attrs = [("IFLA_IFNAME", name), ("IFLA_MTU", 1500)]
    if mac is not None:
        attrs.append(("IFLA_ADDRESS", mac))
    if link is not None:
        attrs.append(("IFLA_LINK", link))
    if master is not None:
        attrs.append(("IFLA_MASTER", master))
    if kind is not None:
        info = [("IFLA_INFO_KIND", kind)]
        if data is not None:
            info.append(("IFLA_INFO_DATA", {"attrs": data}))
        attrs.append(("IFLA_LINKINFO", {"attrs": info}))
    m["attrs"] = attrs
    m.encode()
    d = ifinfmsg(m.data)
    d.decode()
    return d


def test_vlan_dummy_and_nic_links():
    # this kernel has neither the 8021q nor the dummy module: messages built here
    eth = _ifinfmsg(2, "eth0", mac="02:00:00:00:00:09")
    vlan = _ifinfmsg(3, "eth0.5", "vlan", data=[("IFLA_VLAN_ID", 5), ("IFLA_VLAN_PROTOCOL", 0x8100)],
                     link=2, mac="02:00:00:00:00:09")
    dum = _ifinfmsg(4, "dum0", "dummy", mac="02:00:00:00:00:0a")
    links = {2: eth, 3: vlan, 4: dum}
    lines = [ln for i in sorted(links) for ln in nl.link_lines(links[i], links)]
    assert lines == ["ip link set dev eth0 up",
                     "ip link set dev eth0 mtu 1500 address 02:00:00:00:00:09 up",
                     "ip link add link eth0 name eth0.5 type vlan id 5",
                     "ip link set dev eth0.5 mtu 1500 address 02:00:00:00:00:09 up",
                     "ip link add dum0 type dummy",
                     "ip link set dev dum0 mtu 1500 address 02:00:00:00:00:0a up"]
    st = State().apply("\n".join(lines))
    assert st.interfaces["eth0.5"].vlan == 5 and st.interfaces["eth0.5"].link == "eth0"
    assert st.interfaces["dum0"].kind == "dummy"
    qinq = _ifinfmsg(5, "eth0.6", "vlan", data=[("IFLA_VLAN_ID", 6), ("IFLA_VLAN_PROTOCOL", 0x88A8)],
                     link=2)
    with pytest.raises(nl.NotSupported, match=r"link eth0.6: VLAN protocol 34984 \(only 802.1Q\)"):
        nl.link_lines(qinq, {2: eth, 5: qinq})


def test_vrf_devices_and_masters():
    # this kernel has no VRF module, so the messages are built here, as
    # rtnetlink would send them: the master line comes from the later of a
    # device and its VRF
    eth0 = _ifinfmsg(2, "eth0", master=5)
    vrf = _ifinfmsg(5, "vrf-blue", kind="vrf", data=[("IFLA_VRF_TABLE", 100)])
    eth1 = _ifinfmsg(6, "eth1", master=5)
    links = {2: eth0, 5: vrf, 6: eth1}
    lines = [ln for i in sorted(links) for ln in nl.link_lines(links[i], links)]
    assert [ln for ln in lines if "vrf" in ln] == [
        "ip link add vrf-blue type vrf table 100",
        "ip link set dev vrf-blue mtu 1500 up",
        "ip link set dev eth0 master vrf-blue",
        "ip link set dev eth1 master vrf-blue"]
    st = State().apply("\n".join(lines))
    assert st.interfaces["vrf-blue"].vrf_table == 100
    assert st.interfaces["eth0"].master == st.interfaces["eth1"].master == "vrf-blue"
    bad = _ifinfmsg(5, "vrf-red", kind="vrf")
    with pytest.raises(nl.NotSupported, match=r"not supported: link vrf-red: VRF device without"):
        nl.link_lines(bad, {5: bad})
    br = _ifinfmsg(7, "br0", kind="bridge")
    port = _ifinfmsg(8, "eth2", master=7)
    with pytest.raises(nl.NotSupported, match=r"link br0: link type bridge"):
        nl.link_lines(br, {7: br})
    with pytest.raises(nl.NotSupported, match=r"link eth2: enslaved to br0 \(bridge\)"):
        nl.link_lines(port, {7: br, 8: port})


def test_missing_namespace_is_a_clear_error(tmp_path):
    name = f"fp-missing-{os.getpid()}"
    with pytest.raises(nl.KernelImportError, match=f"network namespace '{name}' does not exist"):
        Router.from_kernel(name)
    out = tmp_path / "out.conf"
    out.write_text("keep me\n")
    p = subprocess.run([sys.executable, "-m", "fastpath.kernel", "import", "--netns", name,
                        "-o", str(out)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"python -m fastpath.kernel: network namespace '{name}' does not exist (no /run/netns/{name})"]
    assert out.read_text() == "keep me\n"
    assert not os.path.exists(f"/run/netns/{name}")      # and not created by the attempt


@pytest.mark.kernel_seg6
def test_cli_import_to_file_and_hmac_file(tmp_path):
    hm = tmp_path / "keys"
    hm.write_text("ip sr hmac set 7 sha256 'from file'\nip sr hmac set 8 sha1 extra\n")
    out = tmp_path / "r.conf"
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        k.configure(BASE + "ip sr hmac set 7 sha256 s3cret\n"
                    "ip -6 route add 2001:db8:9::/48 encap seg6 mode encap segs fc00::1 hmac 7 dev tun0")
        p = subprocess.run([sys.executable, "-m", "fastpath.kernel", "import", "--netns", k.netns,
                            "-o", str(out), "--hmac-file", str(hm)], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
        assert p.returncode == 0, p.stderr
        assert p.stdout == "" and p.stderr == ""
        text = out.read_text()
        p2 = subprocess.run([sys.executable, "-m", "fastpath.kernel", "import", "--netns", k.netns],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert text.startswith("# imported by python -m fastpath.kernel import from namespace ")
    assert "ip sr hmac set 7 sha256 'from file'" in text
    assert "ip sr hmac set 8 sha1 extra" in text
    r = Router().configure(text)
    assert r.state.hmac_keys[7] == ("sha256", b"from file")
    assert p2.returncode == 0 and "ip sr hmac set 7 sha256 s3cret" in p2.stdout


def test_bad_hmac_file(tmp_path):
    bad = tmp_path / "keys"
    bad.write_text("ip sr hmac set 7 md5 x\n")
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        with pytest.raises(nl.KernelImportError, match="Invalid HMAC algorithm"):
            nl.import_text(k.netns, hmac_file=str(bad))
        with pytest.raises(nl.KernelImportError, match="cannot read"):
            nl.import_text(k.netns, hmac_file=str(tmp_path / "nope"))


@pytest.mark.kernel_seg6
def test_route_line_is_one_function_per_message():
    """A follower can turn one RTM_NEWROUTE into one configuration line."""
    with ko.KernelOracle(ifaces=("tun0",)) as k:
        k.configure(BASE + "ip -6 route add fc00::1/128 encap seg6local action End.X nh6 "
                    "2001:db8:1::2 count dev tun0")
        from pyroute2 import IPRoute
        with IPRoute(netns=k.netns) as ipr:
            names = {m["index"]: m.get_attr("IFLA_IFNAME") for m in ipr.get_links()}
            msgs = [m for m in ipr.route("dump", family=10) if m.get_attr("RTA_DST") == "fc00::1"]
    assert [nl.route_line(m, names) for m in msgs] == [
        "ip -6 route add fc00::1/128 encap seg6local action End.X nh6 2001:db8:1::2 count dev tun0"]


# ---------------------------------------------------------------------------
# issue 47: the routers of the kernel's SRv6 selftest labs
# (tools/testing/selftests/net/srv6_*.sh): namespaces joined by veth pairs,
# VRFs with their l3mdev rules, proxy ARP/NDP entries
_lab_counter = iter(range(1, 1 << 30))


def _sh(*cmd, ns=None, check=True):
    if ns is not None:
        cmd = ("ip", "netns", "exec", ns) + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p


@contextlib.contextmanager
def _namespaces(*roles):
    """Plain namespaces (``ip netns add``), named fp-PID-labN-ROLE (so that
    test_no_namespace_left_behind sees a leftover), deleted on every exit."""
    n = next(_lab_counter)
    names = {r: f"fp-{os.getpid()}-lab{n}-{r}" for r in roles}
    made = []
    try:
        for name in names.values():
            _sh("ip", "netns", "add", name)
            made.append(name)
            # quiet, as the oracle's namespaces: no DAD, no link-local address
            # and so no router solicitation or ND for the other side to learn
            # (a neighbour learned before an import is imported: flaky)
            for k in ("all", "default"):
                for knob, v in (("accept_dad", 0), ("addr_gen_mode", 1),
                                ("router_solicitations", 0), ("accept_ra", 0)):
                    _sh("sysctl", "-qw", f"net.ipv6.conf.{k}.{knob}={v}", ns=name)
        yield names
    finally:
        for name in made:
            _sh("ip", "netns", "del", name, check=False)


def _wait_running(ns, *devs):
    """Until each device's operstate is UP: linkwatch has handled its
    carrier (and addrconf what follows it), later than the command that
    brought it up; an import made before would catch it halfway."""
    end = time.monotonic() + 20
    for dev in devs:
        while "state UP" not in _sh("ip", "-n", ns, "-o", "link", "show", "dev", dev).stdout:
            assert time.monotonic() < end, f"{dev} in {ns} never came up (operstate)"
            time.sleep(0.05)


def _veth_across(a_ns, a_name, b_ns, b_name):
    """A veth pair whose ends are in two namespaces (made where the
    selftests make it: in b, then one end moved to a)."""
    _sh("ip", "-n", b_ns, "link", "add", b_name, "type", "veth", "peer", "name", a_name)
    _sh("ip", "-n", b_ns, "link", "set", a_name, "netns", a_ns)
    _sh("ip", "-n", b_ns, "link", "set", b_name, "up")


VETH_PROXY = """
ip tuntap add dev tun0 mode tun
ip link set dev veth-t100 address 02:aa:00:00:01:00 mtu 1400
ip link set dev veth-t100 up
ip addr add 10.0.0.254/24 dev veth-t100
ip -6 addr add cafe::254/64 dev veth-t100
sysctl -w net.ipv4.conf.veth-t100.proxy_arp=1
sysctl -w net.ipv6.conf.veth-t100.proxy_ndp=1
sysctl -w net.ipv4.neigh.veth-t100.proxy_delay=0
sysctl -w net.ipv6.neigh.veth-t100.proxy_qlen=32
ip neigh add proxy 10.0.0.2 dev veth-t100
ip -6 neigh add proxy cafe::2 dev veth-t100
ip -6 neigh add proxy cafe::3 dev veth-t100 router
ip neigh add 10.0.0.1 lladdr 02:bb:00:00:00:01 dev veth-t100 nud permanent
ip route add 10.9.0.0/16 via 10.0.0.1 dev veth-t100
"""


@pytest.mark.kernel
def test_veth_peer_in_another_namespace_and_proxy_entries():
    """A veth whose peer is another namespace's is imported as an interface
    (a NIC: created by mention), and the proxy entries (the kernel's
    separate pneigh dump) and proxy sysctls come with it: the import equals
    what fastpath builds from the same lines."""
    with _namespaces("hs") as ns:
        def setup(k):
            _veth_across(k.netns, "veth-t100", ns["hs"], "veth0")
        text = _roundtrip(VETH_PROXY, ("tun0",), setup=setup,
                          settle=lambda k: _wait_running(k.netns, "veth-t100"))
    lines = text.splitlines()
    assert "ip link set dev veth-t100 up" in lines
    assert not any("type veth" in ln for ln in lines)
    assert "ip -4 neigh add proxy 10.0.0.2 dev veth-t100" in lines
    assert "ip -6 neigh add proxy cafe::2 dev veth-t100" in lines
    assert "ip -6 neigh add proxy cafe::3 dev veth-t100 router" in lines
    assert "sysctl -w net.ipv4.conf.veth-t100.proxy_arp=1" in lines
    assert "sysctl -w net.ipv6.conf.veth-t100.proxy_ndp=1" in lines
    assert "sysctl -w net.ipv4.neigh.veth-t100.proxy_delay=0" in lines
    assert "sysctl -w net.ipv6.neigh.veth-t100.proxy_qlen=32" in lines
    assert any(ln.startswith("# note: link veth-t100: a veth whose peer is in another namespace")
               for ln in lines), lines


def test_proxy_entry_messages():
    """neigh_line on the pneigh dump's messages (pneigh_fill_info: NUD_NONE,
    the entry's flags): a line per entry; an entry without a device (the
    kernel allows one through rtnetlink: ifindex 0; not made in a namespace
    here, the kernel does not free those with the namespace) is named."""
    from pyroute2.netlink.rtnl.ndmsg import ndmsg

    def msg(fam, dst, ifindex, flags):
        m = ndmsg()
        m["family"], m["ifindex"], m["state"], m["flags"] = fam, ifindex, 0, flags
        m["attrs"] = [("NDA_DST", dst)]
        m.encode()
        d = ndmsg(m.data)
        d.decode()
        return d
    names = {1: "lo", 3: "veth-t100"}
    assert nl.neigh_line(msg(2, "10.0.0.2", 3, nl.NTF_PROXY), names) == \
        "ip -4 neigh add proxy 10.0.0.2 dev veth-t100"
    assert nl.neigh_line(msg(10, "cafe::3", 3, nl.NTF_PROXY | nl.NTF_ROUTER), names) == \
        "ip -6 neigh add proxy cafe::3 dev veth-t100 router"
    with pytest.raises(nl.NotSupported, match=r"^not supported: proxy neighbour 10.0.0.9 dev "
                                              r"ifindex 0: ifindex 0 is not a device"):
        nl.neigh_line(msg(2, "10.0.0.9", 0, nl.NTF_PROXY), names)
    with pytest.raises(nl.NotSupported, match=r"proxy neighbour 10.0.0.8 dev veth-t100: proxy "
                                              r"entry flags 0x48"):
        nl.neigh_line(msg(2, "10.0.0.8", 3, nl.NTF_PROXY | 0x40), names)


def test_l3mdev_rule_from_message():
    """FRA_L3MDEV (u8 1) -> an l3mdev rule, as rtnetlink sends the ones a
    VRF adds (pref 1000, table 0, FRA_PROTOCOL kernel)."""
    import struct

    def nla(t, payload):
        b = struct.pack("=HH", 4 + len(payload), t) + payload
        return b + b"\0" * (-len(b) % 4)
    for fam_id, fam in ((2, 4), (10, 6)):
        body = struct.pack("=BBBBBBBBI", fam_id, 0, 0, 0, 0, 0, 0, 1, 0)
        body += nla(nl.FRA["TABLE"], struct.pack("=I", 0)) + nla(nl.FRA["PRIORITY"],
                                                               struct.pack("=I", 1000))
        body += nla(nl.FRA["L3MDEV"], b"\x01") + nla(nl.FRA["PROTOCOL"], b"\x02")
        raw = struct.pack("=IHHII", 16 + len(body), 32, 0, 0, 0) + body
        r = nl.rule_from_msg(raw, {1: "lo"})
        assert (r.family, r.pref, r.table, r.action, r.l3mdev) == (fam, 1000, 0, "lookup", True)
        assert nl.rule_line(raw, {1: "lo"}) == f"ip -{fam} rule add pref 1000 l3mdev"


@pytest.mark.kernel
def test_l3mdev_rules_added_by_hand():
    """``ip rule add l3mdev`` needs CONFIG_NET_L3_MASTER_DEV, not a VRF."""
    try:
        text = _roundtrip("ip tuntap add dev tun0 mode tun\nip rule add pref 500 l3mdev\n"
                          "ip -6 rule add pref 600 l3mdev\n", ("tun0",))
    except ko.KernelConfigError as e:
        pytest.skip(f"kernel refused: {e.stderr.strip()}")
    assert "ip -4 rule add pref 500 l3mdev" in text.splitlines()
    assert "ip -6 rule add pref 600 l3mdev" in text.splitlines()


_vrf_ok: list = []


def _need_vrf():
    """Skip, with the reason, where the kernel makes no VRF device (it is
    tried in a scratch namespace)."""
    if not _vrf_ok:
        with _namespaces("vrfprobe") as ns:
            p = _sh("ip", "-n", ns["vrfprobe"], "link", "add", "vrf-probe", "type", "vrf",
                    "table", "10", check=False)
        _vrf_ok.append((p.returncode == 0, p.stderr.strip()))
    ok, err = _vrf_ok[0]
    if not ok:
        pytest.skip(f"this kernel makes no VRF device (CONFIG_NET_VRF): 'ip link add NAME type "
                    f"vrf table N': {err}")


VRF = """
ip tuntap add dev tun0 mode tun
ip tuntap add dev tun1 mode tun
sysctl -w net.vrf.strict_mode=1
ip link add vrf-100 type vrf table 100
ip link set dev vrf-100 address 02:00:00:00:01:00
ip link set dev vrf-100 up
ip link set dev tun1 master vrf-100
ip addr add 10.0.1.254/24 dev tun1
ip -6 addr add cafe::254/64 dev tun1
ip route add 10.9.0.0/16 via 10.0.1.2 dev tun1 table 100
ip -6 route add unreachable default metric 4278198272 table 100
ip -6 rule add to fc00::/16 table 90 pref 999
"""


@pytest.mark.kernel
@pytest.mark.kernel_vrf
@pytest.mark.parametrize("moved", [False, True])
def test_vrf_l3mdev_rules(moved):
    """The kernel's own ``pref 1000 l3mdev`` rules (vrf_add_fib_rules, both
    families, with the first VRF) are imported; the VRF line implies them,
    so the text has no rule line for them unless they were moved."""
    _need_vrf()
    config = VRF + ("ip rule del pref 1000 l3mdev\nip rule add pref 1500 l3mdev\n" if moved else "")
    text = _roundtrip(config, ("tun0", "tun1"), ignore=(VRF_MROUTE,))
    lines = text.splitlines()
    assert "ip link add vrf-100 type vrf table 100" in lines
    assert "ip link set dev tun1 master vrf-100" in lines
    st = Router().configure(text).state
    for fam in (4, 6):
        l3 = [(r.pref, r.table, r.action) for r in st.rules[fam] if r.l3mdev]
        assert l3 == [(1500 if moved and fam == 4 else 1000, 0, "lookup")], (fam, st.rules[fam])
    rule_lines = [ln for ln in lines if "l3mdev" in ln]
    assert rule_lines == (["ip -4 rule del pref 1000 l3mdev", "ip -4 rule add pref 1500 l3mdev"]
                          if moved else [])


@pytest.mark.kernel
@pytest.mark.kernel_seg6
@pytest.mark.kernel_vrf
def test_srv6_end_dt46_l3vpn_lab():
    """The routers of tools/testing/selftests/net/srv6_end_dt46_l3vpn_test.sh
    (tenant 100; the same commands): each imports, and its text rebuilds it."""
    _need_vrf()
    ok, reason = ko.oracle_available()
    if not ok:
        pytest.skip(reason)
    with _namespaces("rt1", "rt2", "hs1", "hs2") as ns:
        rt = {1: ns["rt1"], 2: ns["rt2"]}
        hs = {1: ns["hs1"], 2: ns["hs2"]}
        _sh("ip", "-n", rt[1], "link", "add", "veth0", "type", "veth", "peer", "name", "veth-rt-2")
        _sh("ip", "-n", rt[1], "link", "set", "veth-rt-2", "netns", rt[2])
        _sh("ip", "-n", rt[2], "link", "set", "veth-rt-2", "name", "veth0")
        for r in (1, 2):
            n = rt[r]
            _sh("ip", "-n", n, "addr", "add", f"fd00::{r}/64", "dev", "veth0", "nodad")
            _sh("ip", "-n", n, "link", "set", "veth0", "up")
            _sh("ip", "-n", n, "link", "set", "lo", "up")
            _sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=n)
            _sh("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", ns=n)
            _sh("sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", ns=n)
            h = hs[r]
            _sh("ip", "-n", h, "link", "add", "veth0", "type", "veth", "peer", "name", "veth-t100")
            _sh("ip", "-n", h, "link", "set", "veth-t100", "netns", n)
            _sh("ip", "-n", h, "addr", "add", f"cafe::{r}/64", "dev", "veth0", "nodad")
            _sh("ip", "-n", h, "addr", "add", f"10.0.0.{r}/24", "dev", "veth0")
            _sh("ip", "-n", h, "link", "set", "veth0", "up")
            _sh("ip", "-n", n, "link", "add", "vrf-100", "type", "vrf", "table", "100")
            _sh("ip", "-n", n, "link", "set", "vrf-100", "up")
            _sh("ip", "-n", n, "link", "set", "veth-t100", "master", "vrf-100")
            _sh("ip", "-n", n, "addr", "add", "cafe::254/64", "dev", "veth-t100", "nodad")
            _sh("ip", "-n", n, "addr", "add", "10.0.0.254/24", "dev", "veth-t100")
            _sh("ip", "-n", n, "link", "set", "veth-t100", "up")
            _sh("sysctl", "-qw", "net.ipv6.conf.veth-t100.proxy_ndp=1", ns=n)
            _sh("sysctl", "-qw", "net.ipv4.conf.veth-t100.proxy_arp=1", ns=n)
            _sh("sysctl", "-qw", "net.vrf.strict_mode=1", ns=n)
        for src, dst in ((1, 2), (2, 1)):
            sid = f"fc00:{src}{dst}:100::6046"
            a, b = rt[src], rt[dst]
            _sh("ip", "-n", a, "-6", "neigh", "add", "proxy", f"cafe::{dst}", "dev", "veth-t100")
            _sh("ip", "-n", a, "-6", "route", "add", f"cafe::{dst}/128", "vrf", "vrf-100", "encap",
                "seg6", "mode", "encap", "segs", sid, "dev", "veth0")
            _sh("ip", "-n", a, "-4", "route", "add", f"10.0.0.{dst}/32", "vrf", "vrf-100", "encap",
                "seg6", "mode", "encap", "segs", sid, "dev", "veth0")
            _sh("ip", "-n", a, "-6", "route", "add", f"{sid}/128", "vrf", "vrf-100", "via",
                f"fd00::{dst}", "dev", "veth0")
            _sh("ip", "-n", b, "-6", "route", "add", f"{sid}/128", "table", "90", "encap",
                "seg6local", "action", "End.DT46", "vrftable", "100", "dev", "vrf-100")
            _sh("ip", "-n", b, "-6", "rule", "add", "to", "fc00::/16", "lookup", "90", "prio", "999")
            _sh("ip", "-n", a, "-6", "route", "add", "unreachable", "default", "metric",
                "4278198272", "vrf", "vrf-100")
            _sh("ip", "-n", a, "-4", "route", "add", "unreachable", "default", "metric",
                "4278198272", "vrf", "vrf-100")
        for r in (1, 2):
            _wait_running(rt[r], "veth0", "veth-t100")
        for r in (1, 2):
            # one read (the hosts' traffic teaches the kernel neighbours meanwhile)
            again, text, _notes = nl.state_from_snapshot(nl.read_snapshot(rt[r]))
            st = Router().configure(text).state
            assert _normalise(st).dump().splitlines() == _normalise(again).dump().splitlines()
            assert _normalise(st) == _normalise(again)
            lines = text.splitlines()
            other = 2 if r == 1 else 1
            for want in ("ip link set dev veth0 up", "ip link set dev veth-t100 up",
                         "ip link add vrf-100 type vrf table 100",
                         "sysctl -w net.vrf.strict_mode=1",
                         "sysctl -w net.ipv4.conf.veth-t100.proxy_arp=1",
                         "sysctl -w net.ipv6.conf.veth-t100.proxy_ndp=1",
                         f"ip -6 neigh add proxy cafe::{other} dev veth-t100",
                         "ip -6 rule add pref 999 to fc00::/16 table 90",
                         f"ip -6 route add fc00:{other}{r}:100::6046/128 table 90 encap seg6local "
                         "action End.DT46 vrftable 100 dev vrf-100"):
                assert want in lines, (want, text)
            assert st.interfaces["veth-t100"].master == "vrf-100"
            assert [r_.pref for r_ in st.rules[4] if r_.l3mdev] == [1000]
            assert [r_.pref for r_ in st.rules[6] if r_.l3mdev] == [1000]


def _run_on(config_path, netns, tmp_path):
    """python -m fastpath.run --config FILE --netns NS, started (its ready
    file written) -> (Popen, the nftables table it made)."""
    ready = tmp_path / "ready"
    p = subprocess.Popen([sys.executable, "-m", "fastpath.run", "--config", str(config_path),
                          "--netns", netns, "--ready-file", str(ready)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    end = time.monotonic() + 60
    while not ready.exists():
        if p.poll() is not None or time.monotonic() > end:
            if p.poll() is None:
                p.kill()
            out, err = p.communicate(timeout=10)
            pytest.fail(f"fastpath.run did not start: {err or out}")
        time.sleep(0.05)
    return p, ready.read_text().strip()


def _nft_tables(ns):
    out = _sh("nft", "list", "tables", "netdev", ns=ns).stdout
    return [ln.split()[2] for ln in out.splitlines() if "fastpath_" in ln]


@pytest.mark.kernel
def test_imported_lab_router_runs_on_the_wire(tmp_path):
    """End to end: two namespaces joined by a veth (as the selftests join a
    host to its router), a proxy entry; the router's import is a file that
    ``python -m fastpath.run --config FILE --netns NS`` takes: it attaches
    to the veth, and SIGINT stops it with nothing left behind."""
    if shutil.which("nft") is None:
        pytest.skip("fastpath.run needs nft")
    with _namespaces("rt", "hs") as ns:
        rt, hs = ns["rt"], ns["hs"]
        _veth_across(rt, "veth-t100", hs, "veth0")
        _sh("ip", "-n", hs, "addr", "add", "10.0.0.1/24", "dev", "veth0")
        _sh("ip", "-n", hs, "-6", "addr", "add", "cafe::1/64", "dev", "veth0")
        for cmd in ("link set lo up", "link set veth-t100 up",
                    "addr add 10.0.0.254/24 dev veth-t100", "-6 addr add cafe::254/64 dev veth-t100",
                    "neigh add proxy 10.0.0.2 dev veth-t100",
                    "-6 neigh add proxy cafe::2 dev veth-t100"):
            _sh("ip", "-n", rt, *cmd.split())
        _sh("sysctl", "-qw", "net.ipv4.conf.veth-t100.proxy_arp=1", ns=rt)
        _sh("sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", ns=rt)
        conf = tmp_path / "rt.conf"
        p = subprocess.run([sys.executable, "-m", "fastpath.kernel", "import", "--netns", rt,
                            "-o", str(conf)], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=ROOT))
        assert p.returncode == 0, p.stderr
        text = conf.read_text()
        assert "ip -4 neigh add proxy 10.0.0.2 dev veth-t100" in text.splitlines()
        proc, table = _run_on(conf, rt, tmp_path)
        try:
            assert table.startswith("fastpath_") and _nft_tables(rt) == [table]
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
        assert _nft_tables(rt) == []
    assert not any(n.startswith(f"fp-{os.getpid()}-lab") for n in os.listdir(ko.NETNS_RUN_DIR))


def test_no_namespace_left_behind():
    mine = [n for n in os.listdir(ko.NETNS_RUN_DIR) if n.startswith(f"fp-{os.getpid()}-")] \
        if os.path.isdir(ko.NETNS_RUN_DIR) else []
    assert mine == []

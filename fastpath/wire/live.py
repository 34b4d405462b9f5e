"""The receive / process / transmit loop of fastpath on live interfaces.

    with Live(config_text, ["veth0", "veth1"]) as live:
        live.run(stop)                 # until stop() is true (or Ctrl-C)
        print(live.counters())

``Live.open`` (also ``with``): reads each interface's MAC, MTU and ifindex
from the system (/sys/class/net), configures a Router with them in front of
the configuration (so a configuration that sets ``address`` or ``mtu`` wins;
the system is not changed), opens one AF_PACKET socket per interface
(fastpath._afpacket) and installs the nftables ingress drop (wire.nft),
or with ``backend="af_xdp"`` one AF_XDP socket per RX queue
(fastpath._afxdp, libxdp's default XDP program, no nftables table);
``close`` undoes it.  ``workers=N``: fastpath.wire.workers.Supervisor.  An error while opening undoes what was done and raises
``LiveError`` with a one-line message.

One iteration (``step``): poll the rings, fill one Batch from all of them
(no per-packet Python), sort out ARP and NS/NA frames for the neighbour
subsystem (wire.neigh; only batches that hold some pay for a compaction),
``Router.process``, echo replies for the echo requests it delivered
locally (wire.echo), then per egress interface one ``tx`` (sendmmsg) of the
forwarded packets (verdicts forward and icmp) whose Ethernet header the
datapath wrote.  A packet whose destination MAC the datapath left zero (its
neighbour table has no entry for ``batch.nexthop`` on ``oif``) goes to the
neighbour subsystem, which queues it and resolves; entries learned or
changed reach the datapath as one ``Router.configure`` of ``ip neigh``
lines per iteration that has any.

Counters: per interface rx/tx (and the ring's drops), verdicts, the
datapath's drop reasons, and the wire's own: ``neigh_failed``
(SKB_DROP_REASON_NEIGH_FAILED), ``neigh_queuefull``
(SKB_DROP_REASON_NEIGH_QUEUEFULL), ``no_tx_device`` (forwarded to a
configured device fastpath is not attached to), ``tx_error``.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import time

import numpy as np

from ..batch import Batch
from ..config import ConfigError
from ..reasons import VERDICT_IDS, VERDICTS
from ..router import Router, parse_config
from . import echo, host, nft
from .neigh import Link, Neighbours

V_FWD, V_LOCAL, V_DROP, V_ICMP = (VERDICT_IDS[v] for v in ("forward", "local", "drop", "icmp"))


class LiveError(RuntimeError):
    """fastpath could not attach (a one-line message for a person)."""


BACKENDS = ("af_packet", "af_xdp")


# The AF_PACKET RX ring of each socket: 256 blocks of 128 KiB (32 MiB).
# What the ring buys is time: how long the forwarder may be off the CPU
# before the kernel drops.  A TPACKET_V3 block is handed over when full or
# when its retire timer fires (1 ms asked, one jiffy or more given), so at
# low rates the ring lasts block_nr timer periods and at high rates as many
# frames as fit.  Measured with a busy loop sharing the 2 vCPUs (docs/wire.md,
# "The RX ring's depth"): 64 blocks of 256 KiB lost 12-27% at 0.2-0.3 Mpps
# where these lost nothing; 16 MiB in 256 or 512 blocks lost up to 10% at
# 0.3 Mpps.  --ring-mb changes the size (the block count follows).
RX_BLOCK_SIZE = 1 << 17
RX_BLOCK_NR = 256


def ring_blocks(ring_mb: float) -> int:
    """The RX block count for a ring of ``ring_mb`` MiB (at least 8)."""
    return max(8, int(ring_mb * (1 << 20)) // RX_BLOCK_SIZE)


def io_module(backend):
    """The compiled I/O module of a backend (fastpath._afpacket or
    fastpath._afxdp); LiveError when it was not built (af_xdp needs
    libxdp at build time)."""
    if backend == "af_packet":
        from .. import _afpacket
        return _afpacket
    if backend == "af_xdp":
        try:
            from .. import _afxdp
        except ImportError:
            raise LiveError("--backend af_xdp: fastpath was built without libxdp (apt-get install "
                            "libxdp-dev libbpf-dev, then rebuild: python setup.py build_ext "
                            "--inplace)") from None
        return _afxdp
    raise LiveError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")


def system_interface(name: str) -> dict:
    """ifindex, MAC and MTU of a system interface (in this netns)."""
    base = f"/sys/class/net/{name}"
    if not os.path.isdir(base):
        raise LiveError(f"interface {name!r} does not exist")
    try:
        ifindex = socket.if_nametoindex(name)
        with open(base + "/address") as f:
            mac = bytes.fromhex(f.read().strip().replace(":", ""))
        with open(base + "/mtu") as f:
            mtu = int(f.read())
        with open(base + "/type") as f:
            arptype = int(f.read())
    except (OSError, ValueError) as e:
        raise LiveError(f"interface {name!r}: {e}") from None
    if arptype != 1 or len(mac) != 6:
        raise LiveError(f"interface {name!r} is not an Ethernet device (ARPHRD {arptype})")
    return {"ifindex": ifindex, "mac": mac, "mtu": mtu}


class Proxy:
    """What the neighbour subsystem asks the configuration for proxy ARP and
    proxy NDP (control plane, once per ARP request / NS the router does not
    answer for itself): the running Router's sysctls, pneigh entries
    (``ip neigh add proxy``) and its input route lookup (Router.fib_lookup:
    the rules, the VRF of an enslaved device, the LPMs)."""

    def __init__(self, live):
        self.live = live

    def _dev(self, ifindex):
        return self.live.links[ifindex].name

    def arp(self, ifindex, sip: bytes, tip: bytes) -> bool:
        """arp_process's proxy condition after ip_route_input_noref(tip, sip,
        dev) gave a unicast route: IN_DEV_FORWARD, then arp_fwd_proxy (the
        route's device is not this one, IN_DEV_PROXY_ARP = all or dev,
        medium_id 0), arp_fwd_pvlan (the same device, proxy_arp_pvlan, sip
        != tip), or pneigh_lookup(tip, dev) with the route through another
        device (no sysctl needed)."""
        r = self.live.router
        st, dev = r.state, self._dev(ifindex)
        if not st.forwarding(4, dev):
            return False
        t = ipaddress.IPv4Address(tip)
        if t.is_multicast or t.is_unspecified or t.is_loopback or tip == b"\xff" * 4:
            return False          # martian destinations: no route
        typ, out = r.fib_lookup(4, t, ipaddress.IPv4Address(sip), dev)
        if typ != "unicast" or out is None:
            return False

        def orconf(key):
            return st.sysctl(f"net.ipv4.conf.all.{key}") or st.sysctl(f"net.ipv4.conf.{dev}.{key}")
        if out != dev:
            return bool(orconf("proxy_arp")) or st.proxy_entry(dev, t) is not None
        return bool(orconf("proxy_arp_pvlan")) and sip != tip

    def ndp(self, ifindex, target: bytes):
        """ndisc_recv_ns: the device's forwarding, all.proxy_ndp or the
        device's, and a pneigh entry for the target on it: its NTF_ROUTER;
        None when the NS is not answered."""
        st, dev = self.live.router.state, self._dev(ifindex)
        if not st.sysctl(f"net.ipv6.conf.{dev}.forwarding"):
            return None
        if not (st.sysctl("net.ipv6.conf.all.proxy_ndp") or
                st.sysctl(f"net.ipv6.conf.{dev}.proxy_ndp")):
            return None
        return st.proxy_entry(dev, ipaddress.IPv6Address(target))

    def ip6_forward(self, ifindex, daddr: bytes) -> bool:
        """ip6_forward's proxy check for a unicast NS to ``daddr``: only
        all.proxy_ndp counts there (not the device's), with a pneigh entry
        for the destination on the ingress device."""
        st, dev = self.live.router.state, self._dev(ifindex)
        return bool(st.sysctl("net.ipv6.conf.all.proxy_ndp")) and \
            st.proxy_entry(dev, ipaddress.IPv6Address(daddr)) is not None

    def delay(self, family, ifindex) -> float:
        """net.ipv{4,6}.neigh.DEV.proxy_delay, in seconds (USER_HZ 1/100 s)."""
        return self.live.router.state.sysctl(
            f"net.ipv{family}.neigh.{self._dev(ifindex)}.proxy_delay") / 100.0

    def qlen(self, family, ifindex) -> int:
        return self.live.router.state.sysctl(
            f"net.ipv{family}.neigh.{self._dev(ifindex)}.proxy_qlen")


def default_interfaces(st) -> list:
    """The devices of configuration state ``st`` that fastpath attaches to
    when none is named: all but those without a wire -- lo, a VRF device (an
    l3mdev of the configuration: its enslaved devices are attached, it is
    not) and a dummy one (it only holds addresses: the kernel drops what
    it is sent and it receives nothing)."""
    return [n for n, i in st.interfaces.items() if i.kind not in ("loopback", "vrf", "dummy")]


def _vrf_devices(config: str) -> set:
    """The names of the configuration's VRF devices (empty when it does not
    parse: its own error is the one to report)."""
    try:
        st = parse_config(config)
    except ConfigError:
        return set()
    return {n for n, i in st.interfaces.items() if i.kind == "vrf"}


def _vrf_attach_error(name: str) -> str:
    return (f"interface {name!r} is a VRF device (an l3mdev: its lookups happen in "
            f"fastpath, it has no wire): attach the devices enslaved to it instead")


def _prelude(names, sysinfo) -> str:
    return "".join(f"ip link set dev {n} address {':'.join(f'{b:02x}' for b in sysinfo[n]['mac'])}"
                   f" mtu {sysinfo[n]['mtu']}\n" for n in names)


class Live:
    """fastpath routing between live Ethernet interfaces (AF_PACKET, or
    AF_XDP with ``backend="af_xdp"``).  ``Live(config, ifaces, workers=N)``
    is a ``fastpath.wire.workers.Supervisor``: N worker processes over
    PACKET_FANOUT, ARP/ND in this one."""

    def __new__(cls, *args, workers=None, **kw):
        if cls is Live and workers is not None:
            from .workers import Supervisor
            return super().__new__(Supervisor)
        return super().__new__(cls)

    def __init__(self, config, interfaces=None, *, batch_size=256, qdisc_bypass=False,
                 block_size=RX_BLOCK_SIZE, block_nr=RX_BLOCK_NR, neigh_params=None, mode="noref",
                 backend="af_packet", xdp_mode="auto", role="all", fanout=None, workers=None,
                 shared=None, queues=None, host_stack=False, host_fds=None):
        """``role``: "all" (one process does everything), or for --workers
        (fastpath.wire.workers) "worker" (``fanout``: {device: PACKET_FANOUT
        group}: its sockets join them; ARP/ND frames are left to the
        control process; neighbours come from it) or "control" (sockets
        that receive only ARP/ND, the nftables table, the neighbour
        subsystem; no data frames).  ``shared`` (a worker): ``(attach
        arguments, slot, state)``: the datapath reads the control process's
        shared tables (fastpath.dataplane.AttachedTables) instead of a
        Router compiled here; ``state`` is the configuration without its
        routes (devices, addresses, neighbours, sysctls).  ``queues`` (an
        af_xdp worker): {device: [RX queue, ...]}, the queues whose AF_XDP
        sockets it owns (default: every queue); its ARP/ND frames go to the
        control process, whose own sockets are AF_PACKET ones (it sends
        from them; XDP leaves them nothing to receive).  ``host_stack``:
        hand what is delivered locally to the kernel and let it keep its
        neighbours (wire.host); a worker gets the control process's TAP
        descriptors, ``host_fds``."""
        if role not in ("all", "worker", "control"):
            raise ValueError(f"role {role!r}")
        self.role = role
        self.fanout = dict(fanout or {})
        self.extra_fds = []
        if backend not in BACKENDS:
            raise LiveError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
        self.backend = backend
        # the sockets this process opens: the control process of --workers
        # owns only AF_PACKET ones (ARP/ND, its transmissions) whatever the
        # workers use
        self.sock_backend = "af_packet" if role == "control" else backend
        self.queues = queues
        self.xdp_mode = xdp_mode
        self._io = None
        self._atexit = False
        self.config = config if isinstance(config, str) else "".join(config)
        self.names = list(interfaces) if interfaces else None
        self.batch_size = batch_size
        self.qdisc_bypass = qdisc_bypass
        self.block_size, self.block_nr = block_size, block_nr
        self.neigh_params = neigh_params
        self.mode = mode
        self.shared = shared
        self.host_stack = bool(host_stack)
        self._host_fds = host_fds
        self.host = None
        self._host_readable = []
        self.router = None
        self.sockets = []
        self.guard = None
        self.neigh = None
        self.opened = False
        self.wire = {"neigh_failed": 0, "neigh_queuefull": 0, "no_tx_device": 0, "tx_error": 0}
        self.verdicts = dict.fromkeys(VERDICTS[1:], 0)
        self.iterations = 0
        self.neigh_configures = 0
        self.reloads = 0
        self._reloading = None          # (thread, job) of a reload in flight
        self._reload_abort = False
        self.echo_replies = 0
        self._counters_before = {}      # the datapath counters of Routers replaced by reload
        self.neigh_configure_s = 0.0

    # ------------------------------------------------------------------
    def open(self) -> "Live":
        try:
            self._open()
        except BaseException:
            self.close()
            raise
        return self

    def _open(self):
        if self.host_stack and self.backend != "af_packet":
            raise LiveError("--host-stack needs --backend af_packet (with af_xdp the XDP "
                            "program takes ARP/ND away from the kernel)")
        self._io = io_module(self.sock_backend)
        if self.names is None:
            try:
                st = parse_config(self.config)          # (no tables: the names only)
            except ConfigError as e:
                raise LiveError(f"configuration: {e}") from None
            self.names = default_interfaces(st)
        if not self.names:
            raise LiveError("no interface to attach to (give --iface DEV)")
        if len(set(self.names)) != len(self.names):
            raise LiveError("an interface is named twice")
        sysinfo = {}
        for n in self.names:
            try:
                sysinfo[n] = system_interface(n)
            except LiveError:
                if n in _vrf_devices(self.config):
                    raise LiveError(_vrf_attach_error(n)) from None
                raise
        if self.shared is not None:
            from ..dataplane import AttachedTables
            args, slot, state = self.shared
            r = AttachedTables(args, slot, state)
        else:
            # the system's MAC and MTU first, then the configuration (its own
            # settings win; its line numbers stay its own); compiled once
            try:
                st = parse_config(_prelude(self.names, sysinfo))
            except ConfigError as e:
                raise LiveError(f"interfaces: {e}") from None
            try:
                parse_config(self.config, st)
            except ConfigError as e:
                raise LiveError(f"configuration: {e}") from None
            r = self._compile(st)
        self.router = r
        st = r.state
        for n in self.names:
            if st.interfaces[n].kind == "vrf":
                raise LiveError(_vrf_attach_error(n))
        self.sysinfo = sysinfo
        links = []
        for n in self.names:
            itf = st.interfaces[n]
            links.append(Link(n, itf.ifindex, itf.mac,
                              [a for a in itf.addrs if a.version == 4],
                              [a for a in itf.addrs if a.version == 6]))
        self.links = {l.ifindex: l for l in links}
        if self.sock_backend == "af_xdp":
            self._open_xdp(sysinfo, st)
        else:
            frame = 2048
            extra = {}
            if self.role == "worker":
                extra = {"fanout_type": self._io.FANOUT_HASH}
            elif self.role == "control":
                # only ARP/ND arrive: a small ring
                extra = {"nd_only": True}
            for n in self.names:
                if self.role == "worker":
                    extra["fanout_group"] = self.fanout[n]
                try:
                    s = self._io.Socket(n, sysinfo[n]["ifindex"], st.interfaces[n].ifindex,
                                        block_size=self.block_size, block_nr=self.block_nr,
                                        frame_size=frame, qdisc_bypass=self.qdisc_bypass, **extra)
                except OSError as e:
                    raise LiveError(str(e.strerror if e.strerror else e)) from None
                self.sockets.append(s)
        self.by_oif = np.full(max(self.links) + 1, -1, np.int32)
        for k, s in enumerate(self.sockets):
            self.by_oif[s.iif] = k
        self._sock_of = {s.iif: s for s in self.sockets}
        self._errors = [0] * len(self.sockets)
        self._suspect = set()
        if self.host_stack:
            self._open_host(sysinfo, st)
        if self.sock_backend == "af_packet" and self.role != "worker":
            try:
                nft.sweep_stale()
                self.guard = nft.Guard(self.names, host_stack=self.host_stack).install()
            except nft.NftError as e:
                raise LiveError(str(e)) from None
        static = {}
        for (dev, addr), mac in st.neighbours.items():
            if dev in st.interfaces:
                static[(st.interfaces[dev].ifindex, addr.version, addr.packed)] = mac
        local4 = [a.ip.packed for i in st.interfaces.values() for a in i.addrs if a.version == 4]
        self.neigh = Neighbours(links, self._send_one, time.monotonic, static=static,
                                params=self.neigh_params, local4=local4, proxy=Proxy(self),
                                forwarding=bool(st.sysctl("net.ipv6.conf.all.forwarding")))
        # rows for the largest frame: the MTU (system's or configuration's)
        # plus Ethernet and one 802.1Q tag, behind the headroom
        from ..batch import _slot_size
        n = self.batch_size
        slot = _slot_size(max(max(sysinfo[x]["mtu"], st.interfaces[x].mtu) for x in self.names)
                          + 18, 128)
        self.batch = Batch(np.zeros((n, slot), np.uint8), np.zeros(n, np.int32),
                           np.zeros(n, np.int32), linktype="ethernet")
        self._locals(st)
        self.opened = True

    def _open_host(self, sysinfo, st):
        """The host stack (wire.host): the data sockets ignore what is
        handed to the kernel; the TAPs and their programs (created here,
        or a worker's inherited descriptors)."""
        targets = host.targets_for(self.names, sysinfo, st)
        try:
            for s in self.sockets:
                # what it sends is marked: the interfaces' egress programs let
                # it go and take every other frame (the kernel's) to the TAPs
                s.set_mark(host.MARK)
            if self.role != "control":
                for s in self.sockets:
                    host.ignore_marked(s)
            if self.role == "worker":
                self.host = host.HostStack(targets, fds=self._host_fds)
            else:
                self.host = host.HostStack(targets).open()
                # (this process sends the kernel's own frames: a worker does not)
                self._host_readable = self.host.readable()
        except host.HostStackError as e:
            raise LiveError(str(e)) from None
        except OSError as e:
            raise LiveError(f"--host-stack: {e.strerror or e}") from None

    def _open_xdp(self, sysinfo, st):
        """AF_XDP: one socket (and UMEM) per RX queue of each interface;
        libxdp's default program redirects the queues' frames to them (no
        nftables drop: the kernel's stack does not see those frames).  The
        program is detached when the last socket of an interface closes:
        ``close`` (also at exit)."""
        import atexit
        atexit.register(self.close)
        self._atexit = True
        # a leftover of a SIGKILLed run (libxdp's default program, alone,
        # no socket: a socket of a live program on a queue would make ours
        # fail with EBUSY): taken over now, detached by close once every
        # queue's socket was ours (not when the open failed)
        self._leftover = []
        leftover = []
        for n in self.names:
            names, only = self._io.programs(sysinfo[n]["ifindex"])
            if names and only and self.role != "worker":   # (workers: the control's)
                leftover.append(sysinfo[n]["ifindex"])
        for n in self.names:
            qs = self.queues[n] if self.queues is not None else range(self._io.rx_queues(n))
            for q in qs:
                try:
                    s = self._io.Socket(n, sysinfo[n]["ifindex"], st.interfaces[n].ifindex,
                                        mac=sysinfo[n]["mac"], queue=q, mode=self.xdp_mode,
                                        mtu=max(sysinfo[n]["mtu"], st.interfaces[n].mtu))
                except OSError as e:
                    raise LiveError(str(e.strerror if e.strerror else e)) from None
                self.sockets.append(s)
        self._leftover = leftover

    def xdp_modes(self) -> dict:
        """af_xdp: per interface, where the program runs ('drv' or 'skb')
        and how the socket is bound ('zerocopy' or 'copy')."""
        return {s.name: "/".join(s.mode) for s in self.sockets if hasattr(s, "mode")}

    def configure(self, text) -> "Live":
        """Apply lines to the running Router as a delta (Router.configure:
        all or nothing, ConfigError); the neighbour subsystem sees the new
        addresses.  Attaching new interfaces needs a new Live.  A reload in
        flight is swapped in first (its LiveError is raised then)."""
        if self._reloading is not None:
            self._settle_reload()
            self.reload_poll()
        self.router.configure(text)
        self._addresses_from(self.router.state)
        return self

    def _addresses_from(self, st):
        """The attached links' MAC and addresses, the neighbour subsystem's
        local IPv4 addresses and the echo replies' addresses and TTLs, as
        configuration ``st`` has them (after a configure or a reload)."""
        for l in self.links.values():
            itf = st.interfaces[l.name]
            l.mac = itf.mac
            l.addrs4 = [a for a in itf.addrs if a.version == 4]
            l.addrs6 = [a for a in itf.addrs if a.version == 6]
        self.neigh.local4 = {a.ip.packed for i in st.interfaces.values() for a in i.addrs
                             if a.version == 4 and a.ip.packed[0] != 127}
        self._locals(st)

    def _compile(self, st):
        """The tables of a whole configuration (``_open``): this process's
        Router, compiled once."""
        try:
            return Router(mode=self.mode)._replace_state(st)
        except ValueError as e:                 # a route that cannot be installed
            raise LiveError(f"configuration: {e}") from None

    def _recompile(self, st):
        """The tables of a reloaded configuration, beside the running ones
        (LiveError, and the running ones stay)."""
        return self._compile(st)

    def reload(self, config) -> None:
        """A new configuration, at once (the Python API; a worker's reload):
        ``reload_start``, then wait for it and swap it in.  On an error
        (LiveError) the running one stays."""
        self.reload_start(config)
        self._settle_reload()
        self.reload_poll()

    def reload_start(self, config) -> None:
        """Begin a reload (SIGHUP) in a background thread: the new
        configuration parsed into a State (the attached interfaces keep
        their ifindexes: they are created first, in the same order), the
        learned neighbours of now carried over, and compiled once beside
        the running tables (``_recompile``) while this process goes on
        forwarding with the running ones and answering ARP/ND (``step``).
        The neighbour changes learned meanwhile are held and applied after
        the swap.  ``reload_poll`` swaps it in once compiled.  A reload
        already in flight: LiveError."""
        if self._reloading is not None:
            raise LiveError("a reload is already in progress")
        import threading
        text = config if isinstance(config, str) else "".join(config)
        learned = []
        for key, e in self.neigh.entries.items():
            if e.state in ("reachable", "stale", "delay", "probe") and e.mac is not None:
                a = ipaddress.ip_address(e.addr)
                learned.append((key, f"ip -{e.family} neigh replace {a} lladdr "
                                     f"{':'.join(f'{x:02x}' for x in e.mac)} "
                                     f"dev {self.links[e.ifindex].name}"))
        job = {"text": text, "learned": learned, "done": None, "error": None}
        th = threading.Thread(target=self._reload_work, args=(job,), name="fastpath-reload",
                              daemon=True)
        self._reloading = (th, job)
        th.start()

    def reloading(self) -> bool:
        """A reload started and not yet swapped in (``reload_poll``)."""
        return self._reloading is not None

    def _reload_work(self, job):
        # (the reload thread: it reads only what opening fixed -- the
        # interface names, system info and ifindexes -- and the job)
        try:
            job["done"] = self._reload_prepare(job["text"], job["learned"])
        except BaseException as e:      # (LiveError, or a bug: raised in reload_poll)
            job["error"] = e

    def _reload_prepare(self, text, learned):
        try:
            st = parse_config(_prelude(self.names, self.sysinfo))
            parse_config(text, st)
        except ConfigError as e:
            raise LiveError(f"configuration: {e}") from None
        if any(st.interfaces[n].ifindex != i for n, i in
               ((l.name, l.ifindex) for l in self.links.values())):
            raise LiveError("reload: the attached interfaces' ifindexes would change")
        static = {(st.interfaces[d].ifindex, a.version, a.packed): m
                  for (d, a), m in st.neighbours.items() if d in st.interfaces}
        lines = [line for key, line in learned if key not in static]
        if lines:
            try:
                parse_config("\n".join(lines) + "\n", st)
            except ConfigError as e:             # (a learned entry the new devices refuse)
                raise LiveError(f"reload: learned neighbours: {e}") from None
        hold = os.environ.get("FASTPATH_RELOAD_HOLD")
        if hold:
            # a test hook: the reload stays in flight until this file exists
            # (a worker's: the file named with ".worker" added; tests/test_wire.py
            # forwards and resolves meanwhile), or close()
            if self.role == "worker":
                hold += ".worker"
            while not os.path.exists(hold):
                if self._reload_abort:
                    raise LiveError("reload abandoned: closing")
                time.sleep(0.02)
        r = self._recompile(st)                 # LiveError: nothing changed yet
        return st, static, r, text

    def _settle_reload(self):
        """Wait for a reload in flight to be compiled (its swap is left to
        reload_poll)."""
        if self._reloading is not None:
            self._reloading[0].join()

    def reload_poll(self) -> bool:
        """False while no reload is in flight or it is still compiling; True
        once a finished one is swapped in (the learned neighbour changes
        held meanwhile then applied); LiveError when it was refused (the
        running configuration stays)."""
        if self._reloading is None or self._reloading[0].is_alive():
            return False
        _th, job = self._reloading
        self._reloading = None
        if job["error"] is not None:
            raise job["error"]
        self._reload_commit(*job["done"])
        self._push_neighbours()
        return True

    def _reload_commit(self, st, static, r, text):
        """The compiled reload swapped in (the main thread)."""
        nb = self.neigh
        for key in [k for k in nb.entries if k in static]:
            del nb.entries[key]                 # static entries win
            nb.stale.discard(key)
            nb.timed.discard(key)
        nb.static = static
        nb.forwarding = bool(st.sysctl("net.ipv6.conf.all.forwarding"))
        self._addresses_from(st)
        old = self.router
        self.router = r
        self.config = text
        self.reloads += 1
        self._counters_before = _add_reasons(self._counters_before, old.counters()["reasons"])

    def close(self):
        """Close the sockets (af_xdp: which detaches the XDP program) and
        remove the nftables table (idempotent).  A reload in flight is
        waited for first (it may be compiling into the shared tables) and
        dropped."""
        if getattr(self, "_reloading", None) is not None:
            self._reload_abort = True
            self._settle_reload()
            self._reloading = None
        for s in self.sockets:
            s.close()
        if self.shared is not None and self.router is not None:
            self.router.close()
        for ifindex in getattr(self, "_leftover", ()):
            # every socket of the device closed: libxdp detached the program
            # it loaded; one it took over from a killed run stays: detach it
            self._io.detach_leftover(ifindex)
        self._leftover = []
        if self.host is not None:
            self.host.close()
        self._host_readable = []
        if self.guard is not None:
            self.guard.remove()
        if self._atexit:
            import atexit
            atexit.unregister(self.close)
            self._atexit = False
        self.opened = False

    def __enter__(self):
        return self.open()

    def __exit__(self, *exc):
        self.close()
        return False

    # ------------------------------------------------------------------
    def _send_one(self, ifindex, frame):
        s = self._sock_of.get(ifindex)
        if s is None:
            self.wire["no_tx_device"] += 1
            return
        if not s.send(frame):
            self.wire["tx_error"] += 1

    def run(self, stop=lambda: False, poll_ms=50):
        while not stop():
            self.step(poll_ms)

    def step(self, poll_ms=50):
        """One iteration: wait up to poll_ms (less when a neighbour timer is
        due), receive, process, transmit, run the neighbour timers."""
        nb = self.neigh
        t = nb.next_timer()
        wait = poll_ms
        if t is not None:
            wait = max(0, min(poll_ms, int((t - time.monotonic()) * 1000) + 1))
        if not any(s.ready() for s in self.sockets):
            # attached to shared tables: offline while asleep, so that a
            # grace period of the control process does not wait for us
            shared = self.shared is not None
            if shared:
                self.router.offline()
            extra = self.extra_fds + self._host_readable
            if extra:
                self._io.poll(self.sockets, wait, extra)
            else:
                self._io.poll(self.sockets, wait)
            if shared:
                self.router.online()
            # a socket whose device went down reports ENETDOWN once: watch
            # that device until it is up again, and stop if it went away
            for k, s in enumerate(self.sockets):
                if s.errors != self._errors[k]:
                    self._errors[k] = s.errors
                    self._suspect.add(s.name)
            for name in list(self._suspect):
                try:
                    with open(f"/sys/class/net/{name}/operstate") as f:
                        if f.read().strip() == "up":
                            self._suspect.discard(name)
                except OSError:
                    raise LiveError(f"interface {name!r} went away") from None
        if self.sock_backend == "af_xdp":
            self._check_devices()
        b = self.batch
        n = 0
        for s in self.sockets:
            n += s.rx(b, n)
        if n:
            self._batch(b[:n] if n < len(b) else b)
        if self._host_readable:
            self.host.pump(self._send_one)
        if nb.next_timer() is not None:
            nb.tick()
        self._push_neighbours()
        self.iterations += 1
        return n

    def _check_devices(self):
        """af_xdp: an AF_XDP socket whose device is deleted reports nothing
        to poll(); look for the devices once a second instead."""
        now = time.monotonic()
        if now < getattr(self, "_next_devcheck", 0.0):
            return
        self._next_devcheck = now + 1.0
        for name in self.names:
            if not os.path.exists(f"/sys/class/net/{name}"):
                raise LiveError(f"interface {name!r} went away")

    def _batch(self, b):
        n = len(b)
        d, st = b.data, b.start
        rows = np.arange(n)
        et = (d[rows, st + 12].astype(np.uint16) << 8) | d[rows, st + 13]
        ctrl = et == 0x0806
        v6 = et == 0x86DD
        if v6.any():
            typ = d[rows, st + 54]
            ctrl |= v6 & (d[rows, st + 20] == 58) & ((typ == 135) | (typ == 136))
        if self.role == "control":
            # its sockets' filter lets only ARP/ND in
            for i in np.flatnonzero(ctrl):
                self.neigh.input(int(b.iif[i]), b.packet(int(i)))
            return
        if ctrl.any():
            if self.role == "worker" and self.sock_backend == "af_xdp":
                # XDP redirected them here, away from the control process's
                # sockets: handed over (a few frames; it owns the state)
                self.neigh.frames([(int(b.iif[i]), b.packet(int(i))) for i in np.flatnonzero(ctrl)])
                self.wire["ctrl_to_control"] = self.wire.get("ctrl_to_control", 0) + int(ctrl.sum())
            elif self.role == "worker":
                # the control process's own socket has them
                self.wire["ctrl_to_control"] = self.wire.get("ctrl_to_control", 0) + int(ctrl.sum())
            else:
                for i in np.flatnonzero(ctrl):
                    self.neigh.input(int(b.iif[i]), b.packet(int(i)))
            keep = np.flatnonzero(~ctrl)
            m = len(keep)
            if m == 0:
                return
            for f in ("start", "length", "l2len", "iif", "timestamp_ns"):
                a = getattr(b, f)
                a[:m] = a[keep]
            d[:m] = d[keep]
            b = b[:m]
        before = None
        if self.host is not None:
            before = self.host.snapshot(b)
        self.router.process(b)
        self._transmit(b, before)

    def _transmit(self, b, before=None):
        v = b.verdict
        cnt = np.bincount(v, minlength=len(VERDICTS))
        for k in range(1, len(VERDICTS)):
            if cnt[k]:
                self.verdicts[VERDICTS[k]] += int(cnt[k])
        if cnt[V_LOCAL]:
            if self.host is not None:
                self.host.deliver(b, np.flatnonzero(v == V_LOCAL), before)
            else:
                self._echo(b)
        if not (cnt[V_FWD] or cnt[V_ICMP]):
            return
        out = np.flatnonzero((v == V_FWD) | (v == V_ICMP)).astype(np.int32)
        st = b.start[out]
        d = b.data
        mac = d[out[:, None], st[:, None] + np.arange(6)]
        unres = ~mac.any(axis=1)
        oifs = b.oif[out]
        if unres.any():
            for j in np.flatnonzero(unres):
                i = int(out[j])
                self._unresolved(b, i)
            out, oifs = out[~unres], oifs[~unres]
        if self.neigh.stale_keys():
            self._note_stale_use(b, out, oifs)
        if not len(out):
            return
        first = oifs[0]
        if (oifs == first).all():
            groups = [(int(first), out)]
        else:
            groups = [(int(o), out[oifs == o]) for o in np.unique(oifs)]
        for oif, idx in groups:
            s = self._sock_of.get(oif)
            if s is None:
                self.wire["no_tx_device"] += len(idx)
                continue
            sent = s.tx(b, idx)
            if sent < len(idx):
                self.wire["tx_error"] += len(idx) - sent
        if b.fragments:
            for i, frags in b.fragments.items():
                s = self._sock_of.get(int(b.oif[i]))
                if s is not None and any(b.data[i, b.start[i]:b.start[i] + 6]):
                    for fr in frags[1:]:
                        s.send(fr)

    def _echo(self, b):
        """Echo requests to the router's addresses (wire.echo)."""
        loc = np.flatnonzero(b.verdict == V_LOCAL)
        d = b.data
        l3 = b.start[loc] + b.l2len[loc]
        ihl = (d[loc, l3] & 0x0F).astype(np.intp) * 4        # options: ping -R, -T
        v4 = ((d[loc, l3] >> 4) == 4) & (d[loc, l3 + 9] == 1) & \
            (d[loc, np.minimum(l3 + ihl, d.shape[1] - 1)] == 8)
        v6 = ((d[loc, l3] >> 4) == 6) & (d[loc, l3 + 6] == 58) & (d[loc, l3 + 40] == 128)
        for i in loc[v4 | v6]:
            i = int(i)
            link = self.links.get(int(b.iif[i]))
            if link is None:
                continue
            r = echo.reply(b.packet(i), int(b.l2len[i]), link.mac, self._local4, self._local6,
                           self._ttl, self._hop_limit, self._nonunicast4)
            if r is not None:
                self._send_one(link.ifindex, r)
                self.echo_replies += 1

    def _locals(self, st):
        self._local4 = {a.ip.packed for i in st.interfaces.values() for a in i.addrs
                        if a.version == 4}
        self._local6 = {a.ip.packed for i in st.interfaces.values() for a in i.addrs
                        if a.version == 6}
        # inet_addr_type(a) != RTN_UNICAST for an echo's prespecified
        # timestamps: what fib_add_ifaddr puts in the local table (every
        # address; the broadcast of each prefix shorter than /31; the whole
        # prefix of a loopback device's address), 0/8, the limited broadcast
        # and multicast (routes added to table local by hand are not looked at)
        bcast = set(self._local4)
        loop = []
        for itf in st.interfaces.values():
            for a in itf.addrs:
                if a.version == 4 and a.network.prefixlen < 31:
                    bcast.add(a.network.broadcast_address.packed)
                if a.version == 4 and itf.kind == "loopback":
                    loop.append((int(a.network.network_address), a.network.prefixlen))

        def nonunicast4(addr, bcast=frozenset(bcast), loop=tuple(loop)):
            x = int.from_bytes(addr, "big")
            return (x >> 24 == 0 or x == 0xFFFFFFFF or x >> 28 == 0xE or addr in bcast
                    or any(x >> (32 - n) == net >> (32 - n) for net, n in loop))
        self._nonunicast4 = nonunicast4
        self._ttl = st.sysctl("net.ipv4.ip_default_ttl")
        self._hop_limit = st.sysctl("net.ipv6.conf.all.hop_limit")

    def _family(self, b, i):
        s, l2 = int(b.start[i]), int(b.l2len[i])
        et = int(b.data[i, s + l2 - 2]) << 8 | int(b.data[i, s + l2 - 1])
        return 4 if et == 0x0800 else 6

    def _unresolved(self, b, i):
        fam = self._family(b, i)
        nh = b.nexthop[i].tobytes()
        addr = nh[:4] if fam == 4 else nh
        frames = list(b.fragments.get(i, ())) or [b.packet(i)]
        oif = int(b.oif[i])
        if oif not in self._sock_of:
            self.wire["no_tx_device"] += len(frames)
            return
        self.neigh.resolve(oif, fam, addr, frames)

    def _note_stale_use(self, b, out, oifs):
        for (ifindex, fam, addr) in self.neigh.stale_keys():
            sel = oifs == ifindex
            if not sel.any():
                continue
            nh = b.nexthop[out[sel]]
            key = np.frombuffer(addr + bytes(16 - len(addr)), np.uint8)
            hit = (nh == key).all(axis=1)
            if hit.any():
                self.neigh.used(ifindex, fam, addr)

    def _push_neighbours(self):
        if self._reloading is not None:
            # held until the reload is swapped in: applied to the running
            # tables they would be lost with them (and the shared tables
            # are locked while a reload compiles into them)
            return
        ch = self.neigh.take_changes()
        if not ch:
            return
        st = self.router.state
        lines = []
        for ifindex, fam, addr, line in ch:
            dev = self.links[ifindex].name
            key = (dev, ipaddress.ip_address(addr))
            if " del " in line and key not in st.neighbours:
                continue
            lines.append(line)
        if not lines:
            return
        t0 = time.perf_counter()
        self.router.configure("\n".join(lines) + "\n")
        self.neigh_configure_s += time.perf_counter() - t0
        self.neigh_configures += 1
        self._neigh_pushed(lines)

    def _neigh_pushed(self, lines):
        """Hook: neighbour lines just applied to the datapath (the control
        process of --workers sends them on to the workers)."""

    # ------------------------------------------------------------------
    def counters(self) -> dict:
        nb = self.neigh
        wire = dict(self.wire)
        if self.host is not None:
            wire.update(self.host.counters())
        if nb is not None:
            wire["neigh_failed"] += nb.counters["neigh_failed"]
            wire["neigh_queuefull"] += nb.counters["neigh_queuefull"]
        reasons = _add_reasons(self._counters_before,
                               self.router.counters()["reasons"] if self.router else {})
        per = {}
        for s in self.sockets:          # af_xdp: one socket per RX queue
            c = s.counters()
            have = per.get(s.name)
            if have is None:
                per[s.name] = c
            else:
                for k, v in c.items():
                    if isinstance(v, int):
                        have[k] = have.get(k, 0) + v
        out = {"interfaces": per, "backend": self.backend, "rx_ring": self.rx_ring(),
               "verdicts": dict(self.verdicts), "reasons": reasons, "wire": wire,
               "neighbour": dict(nb.counters) if nb else {},
               "neighbours": len([e for e in nb.entries.values() if e.state]) if nb else 0,
               "neigh_configures": self.neigh_configures, "reloads": self.reloads,
               "echo_replies": self.echo_replies,
               "neigh_configure_ms": round(self.neigh_configure_s * 1000, 3)}
        if self.role == "worker" and self.sock_backend == "af_xdp":
            out["xdp_modes"] = self.xdp_modes()     # (the control process shows them)
        return out

    def rx_ring(self):
        """af_packet: the RX ring of each socket ({block_size, block_nr,
        bytes}); None for af_xdp."""
        if self.sock_backend != "af_packet":
            return None
        return {"block_size": self.block_size, "block_nr": self.block_nr,
                "bytes": self.block_size * self.block_nr}

    def neighbours(self) -> list:
        """``ip neigh show`` lines: the configuration's (PERMANENT) and the
        learned entries with their state."""
        st = self.router.state
        out = [f"{a} dev {d} lladdr {':'.join(f'{x:02x}' for x in m)} PERMANENT"
               for (d, a), m in st.neighbours.items()
               if (st.interfaces[d].ifindex, a.version, a.packed) in self.neigh.static]
        return out + self.neigh.dump() + st.proxy_show()


def _add_reasons(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out

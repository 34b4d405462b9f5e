"""A kernel oracle: the running Linux kernel as a black-box reference datapath
(used by the test suite and by ``python -m fastpath.kernel verify``).

fastpath must produce, for every packet, the same bytes on the same interface
(or the same drop) as the Linux kernel.  This module lets a test ask the real
kernel of the machine: it creates a private network namespace holding a few
TUN devices, configures it with the same config text fastpath accepts, writes
raw L3 packets into one TUN device and collects what the kernel writes to any
of them.

    with KernelOracle(ifaces=("tun0", "tun1")) as k:
        k.configure('''
            ip -6 addr add 2001:db8:1::1/64 dev tun0
            ip -6 addr add 2001:db8:2::1/64 dev tun1
            ip -6 route add fc00::1/128 encap seg6local action End dev tun0
        ''')
        out = k.send("tun0", raw_ipv6_bytes)   # [("tun1", b"...")] or []

TAP devices: the names in ``taps`` (each also one of ``ifaces``) are TAP
devices instead, Ethernet devices (ARPHRD_ETHER, a random MAC address, ARP
and neighbour discovery, mtu 1500) on which ``send``/``collect`` carry whole
Ethernet frames, without the preamble and FCS:

    with KernelOracle(ifaces=("tun0", "tap0"), taps=("tap0",)) as k:
        k.configure("ip -6 route add fc00::2/128 encap seg6local action End.DX2 oif tap0 dev tun0")
        out = k.send("tun0", srv6_packet_carrying_a_frame)   # [("tap0", frame)]

A TAP device has carrier while its file descriptor is open, which the oracle
keeps open.  What the kernel sends on it to resolve a neighbour (ARP
requests, neighbour solicitations) is output like any other, never noise.

Requirements (``oracle_available()`` checks them and gives the reason when
one is missing): Linux, root, ``ip`` (iproute2) with ``ip netns``,
``/dev/net/tun`` usable inside a namespace, and, for SRv6 configurations,
seg6 lwtunnels in the kernel (``oracle_available(seg6=False)`` leaves that
check out: a kernel without them still answers for its IP stack).

Namespace set-up
----------------
``__enter__`` creates a namespace named ``fp-<pid>-<counter>`` (``ip netns
add``), then, BEFORE any device exists, writes these sysctls in it (directly
under /proc/sys, from a thread switched into the namespace):

* ``net.ipv6.conf.{all,default}``: ``accept_ra=0``, ``router_solicitations=0``,
  ``accept_dad=0``, ``addr_gen_mode=1`` (no link-local address, so no DAD and
  no router solicitation), ``forwarding=1``;
* ``net.ipv4.ip_forward=1``, ``net.ipv4.conf.{all,default}.rp_filter=0``;
* ``net.ipv4.conf.{all,default}.send_redirects=0``: with it on, a packet
  forwarded back out of the interface it came in on (a hairpin) draws an
  ICMPv4 redirect, rate-limited per source by an exponential back-off that
  no per-namespace sysctl turns off (observed: redirects for the 1st and 5th
  of 12 hairpinned packets), so the output would depend on timing and
  history.  IPv6 redirects need a link-local address, which the TUN devices
  do not have (below), so the kernel sends none;
* ``net.ipv6.auto_flowlabels=0`` (ICMPv6 errors the kernel originates carry
  flow label 0 instead of a per-boot random hash);
* ICMP rate limiting off, so that every error comes out:
  ``net.ipv6.icmp.ratelimit=0``, ``net.ipv6.icmp.ratemask=`` (empty: no ICMPv6
  type is subject to the per-peer or the global limit),
  ``net.ipv4.icmp_ratelimit=0``, ``net.ipv4.icmp_ratemask=0`` (same for ICMPv4),
  and, belt and braces for a config that sets a ratemask again,
  ``net.ipv4.icmp_msgs_per_sec=1000000``, ``net.ipv4.icmp_msgs_burst=1000000``
  (per namespace on 6.18; the global limit is shared by ICMPv4 and ICMPv6).

fastpath's own defaults mirror these (forwarding on, rate limits off).
Everything else keeps the kernel's defaults for a fresh namespace (notably
``seg6_enabled=0``, ``seg6_require_hmac=0``, ``hop_limit=64``,
``ip_default_ttl=64``, ``mtu=1500``); set them with ``sysctl -w`` lines in
``configure()`` where a test needs otherwise.  ``KernelOracle(sysctls=...)``
overrides or adds entries of this list (applied before the devices exist,
so ``default.*`` values reach them): e.g. ``sysctls={
"net.ipv4.conf.default.send_redirects": "1"}`` for the kernel's redirects.

Consequences worth knowing: with ``addr_gen_mode=1`` the TUN devices have no
link-local address and no fe80::/64 route, so the kernel cannot answer (nor
redirect) a link-local source; with forwarding on, every IPv6 prefix on a
device also installs its subnet-router anycast address (e.g. 2001:db8:1::)
in the local table.

Then it opens ``/dev/net/tun`` once per interface from the test's own thread
temporarily switched into the namespace (``setns(2)`` through ctypes; the
thread always switches back, in a ``finally``), with ``IFF_TUN | IFF_NO_PI``
and ``O_NONBLOCK`` (``IFF_TAP | IFF_NO_PI`` for the ``taps``), and brings
``lo`` and every device up.  A TUN device is point-to-point and NOARP: no
neighbour discovery, no link-layer header; a packet is written and read as a
bare IPv4/IPv6 packet.  A TAP device's frames are written and read whole
(Ethernet header included).  The namespace sysctls above keep a TAP device
as quiet as a TUN device: no link-local address, so no DAD, no router
solicitation and no MLD report from a link-local source; the MLD reports it
sends from ``::`` when an IPv6 address (a solicited-node group) or
forwarding (ff02::2) makes it join a group are noise (below).

``__exit__`` (also on exceptions, also when ``__enter__`` fails half-way, and
at interpreter exit for an oracle never closed) closes the TUN fds and
deletes the namespace (``ip netns delete``).  Just before closing, each
device is made persistent (TUNSETPERSIST) so that closing does not tear it
down one by one (about 30 ms each, an RCU grace period per device); the
kernel then destroys the now unreachable namespace with its devices in one
batch, in the background.  Closing an oracle takes about 2 ms.

An oracle is meant for one thread at a time.  Only the calling thread ever
enters the namespace, and only for the duration of a set-up step or a
sysctl write.

configure()
-----------
One command per line; blank lines and ``#`` comments (whole-line or trailing,
shell rules via ``shlex``) are skipped; a trailing backslash continues a line.

* ``ip ...`` runs as ``ip -n <netns> ...``.  ``ip -n``/``-netns``/``-batch``
  and ``ip netns ...`` are refused (the oracle owns the namespace).
* ``ip sr hmac set KEYID ALGO SECRET``: iproute2 reads the secret with
  getpass(3); the oracle runs ``ip`` in a new session (no controlling tty) and
  feeds ``SECRET`` + newline on standard input.  Without SECRET an empty line
  is fed, which the kernel takes as "delete this key".
* ``ip link add NAME type tun`` and ``ip tuntap add [dev] NAME mode tun``
  for a NAME that is one of the oracle's interfaces are SKIPPED (the device
  already exists, created by the oracle); they are recorded in
  ``self.skipped``.  So are ``type tap`` / ``mode tap`` lines; for a NAME
  that is one of the ``taps`` only those are (a TUN line for a TAP device
  raises ``KernelConfigError``: the config describes another device than
  the kernel has).  For any other name they run (and a kernel without the
  device type rejects them).
* ``sysctl [-w] [-q] [-e] name=value ...``: written to /proc/sys inside the
  namespace (dots become slashes, as sysctl(8) does; a name containing ``/``
  is taken as a path).
* Anything else raises ``KernelConfigError``.  So does a line the kernel
  rejects: the message carries the line number, the line, the command run,
  and ip's stderr.

send()
------
``send(iif, packet, wait)`` first drains whatever the kernel has queued on
the devices (late output of an earlier send goes to ``self.stray``, noise is
dropped), writes ``packet`` into TUN ``iif``, then reads from every device
until ``wait`` seconds pass with nothing new (noise does not extend the
wait), and returns ``[(ifname, bytes)]`` in arrival order.  Order between
two devices is only known to the granularity of one poll() wake-up; within a
device it is exact.  The kernel processes a TUN write synchronously (the
whole receive/forward/ICMP path runs inside write(2)), so the outputs are
normally already queued when write returns; ``wait`` only bounds how long we
wait for stragglers.  A write the TUN driver rejects (EINVAL: the first
nibble is neither 4 nor 6, or an empty packet; on a TAP device, a frame
shorter than its 14-byte Ethernet header) counts as a drop: ``[]``, and the
errno is kept in ``self.last_write_error``.

Noise filter (``is_kernel_noise``): an IPv6 packet is dropped as noise when
its source is ``::`` or link-local (fe80::/10), its destination is a
link-local-scope multicast address (ff02::/16) and, after any Hop-by-Hop /
Destination Options headers, it is ICMPv6 of type 133 (router solicitation),
130/131/132/143 (MLD query / report / done / MLDv2 report), or type 135
(neighbour solicitation) with source ``::`` (duplicate address detection).
Nothing else is filtered: no IPv4 packet, no ordinary neighbour solicitation,
and no forwarded packet (the kernel never forwards from a link-local source
or to a link-local-scope multicast destination, so forwarded traffic cannot
match).  On a TAP device the same rule applies to the IPv6 packet of an
untagged frame of EtherType 0x86DD (``is_kernel_noise_frame``); no other
frame is noise.  ``self.filtered`` counts the packets dropped as noise.
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import itertools
import os
import re
import select
import shlex
import shutil
import struct
import subprocess
import threading
import time
from contextlib import contextmanager
from typing import Iterable, Sequence

__all__ = [
    "oracle_available",
    "KernelOracle",
    "KernelOracleError",
    "KernelConfigError",
    "is_kernel_noise",
    "is_kernel_noise_frame",
    "NAMESPACE_SYSCTLS",
]

IP = shutil.which("ip") or "/usr/sbin/ip"
NETNS_RUN_DIR = "/run/netns"

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
TUNSETPERSIST = 0x400454CB
IFF_TUN = 0x0001
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000
IFNAMSIZ = 16
READ_SIZE = 65536

# Written, in this order, in every oracle namespace before the TUN devices
# exist (see the module docstring).
NAMESPACE_SYSCTLS: tuple[tuple[str, str], ...] = (
    ("net.ipv6.conf.all.accept_ra", "0"),
    ("net.ipv6.conf.default.accept_ra", "0"),
    ("net.ipv6.conf.all.router_solicitations", "0"),
    ("net.ipv6.conf.default.router_solicitations", "0"),
    ("net.ipv6.conf.all.accept_dad", "0"),
    ("net.ipv6.conf.default.accept_dad", "0"),
    ("net.ipv6.conf.all.addr_gen_mode", "1"),
    ("net.ipv6.conf.default.addr_gen_mode", "1"),
    ("net.ipv6.conf.all.forwarding", "1"),
    ("net.ipv6.conf.default.forwarding", "1"),
    ("net.ipv4.ip_forward", "1"),
    ("net.ipv4.conf.all.rp_filter", "0"),
    ("net.ipv4.conf.default.rp_filter", "0"),
    ("net.ipv4.conf.all.send_redirects", "0"),
    ("net.ipv4.conf.default.send_redirects", "0"),
    ("net.ipv6.auto_flowlabels", "0"),
    ("net.ipv6.icmp.ratelimit", "0"),
    ("net.ipv6.icmp.ratemask", ""),
    ("net.ipv4.icmp_ratelimit", "0"),
    ("net.ipv4.icmp_ratemask", "0"),
    ("net.ipv4.icmp_msgs_per_sec", "1000000"),
    ("net.ipv4.icmp_msgs_burst", "1000000"),
)


class KernelOracleError(RuntimeError):
    """The oracle could not be set up or used."""


class KernelConfigError(KernelOracleError):
    """The kernel (or the oracle) rejected a configuration line."""

    def __init__(self, lineno: int, line: str, message: str, command: Sequence[str] | None = None,
                 stderr: str = ""):
        self.lineno = lineno
        self.line = line
        self.message = message
        self.command = list(command) if command else None
        self.stderr = stderr
        text = f"config line {lineno}: {line!r}: {message}"
        if command:
            text += f"\n  ran: {shlex.join(command)}"
        if stderr:
            text += "\n  stderr: " + stderr.strip().replace("\n", "\n          ")
        super().__init__(text)


# --------------------------------------------------------------------------
# namespaces via setns(2)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)
_libc.setns.restype = ctypes.c_int


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


@contextmanager
def _in_netns(path: str):
    """Switch the calling thread into the network namespace at ``path``.

    Only the calling thread moves (setns on a thread).  Always switches back;
    if switching back fails the process is in an unknown state, so that error
    is raised in preference to anything else.
    """
    orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            try:
                _setns(orig)
            except OSError as e:  # pragma: no cover - should never happen
                raise KernelOracleError(
                    f"could not switch this thread back to its network namespace: {e}") from e
    finally:
        os.close(orig)


def _sysctl_path(name: str) -> str:
    if "/" in name:
        rel = name.strip("/")
    else:
        rel = name.replace(".", "/")
    return os.path.join("/proc/sys", rel)


def _write_sysctl(name: str, value: str) -> None:
    path = _sysctl_path(name)
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, (value + "\n").encode())
    finally:
        os.close(fd)


def _read_sysctl(name: str) -> str:
    with open(_sysctl_path(name)) as f:
        return f.read().rstrip("\n")


# --------------------------------------------------------------------------
# noise filter

_ICMPV6_NOISE_TYPES = frozenset((130, 131, 132, 133, 143))
_UNSPECIFIED = bytes(16)


def is_kernel_noise(pkt: bytes) -> bool:
    """True for packets the kernel emits on its own when interfaces come up.

    See the module docstring for the exact rule.  Only IPv6 packets from
    ``::`` or fe80::/10 to ff02::/16 can match; forwarded traffic never does.
    """
    if len(pkt) < 40 or pkt[0] >> 4 != 6:
        return False
    src = pkt[8:24]
    dst = pkt[24:40]
    if not (src == _UNSPECIFIED or (src[0] == 0xFE and src[1] & 0xC0 == 0x80)):
        return False
    if not (dst[0] == 0xFF and dst[1] & 0x0F == 0x02):
        return False
    nh = pkt[6]
    off = 40
    while nh in (0, 60):  # Hop-by-Hop, Destination Options
        if off + 2 > len(pkt):
            return False
        nh, off = pkt[off], off + (pkt[off + 1] + 1) * 8
    if nh != 58 or off >= len(pkt):
        return False
    icmp_type = pkt[off]
    if icmp_type in _ICMPV6_NOISE_TYPES:
        return True
    return icmp_type == 135 and src == _UNSPECIFIED


ETH_HLEN = 14
ETH_P_IPV6 = 0x86DD


def is_kernel_noise_frame(frame: bytes) -> bool:
    """``is_kernel_noise`` for an Ethernet frame read from a TAP device: an
    untagged IPv6 frame (EtherType 0x86DD) whose packet, after the 14-byte
    Ethernet header, is noise.  Nothing else is (ARP, IPv4, VLAN-tagged
    frames, whatever their content)."""
    if len(frame) < ETH_HLEN or int.from_bytes(frame[12:14], "big") != ETH_P_IPV6:
        return False
    return is_kernel_noise(frame[ETH_HLEN:])


# --------------------------------------------------------------------------
# availability

# the tools we run must not inherit a sanitizer runtime preloaded into the
# test process (the AddressSanitizer stage of CI)
_CHILD_ENV = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS")}


def _run(cmd: Sequence[str], *, input: bytes | None = None, timeout: float = 30.0):
    return subprocess.run(list(cmd), input=input if input is not None else b"",
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_CHILD_ENV,
                          start_new_session=True, timeout=timeout, check=False)


_available: dict = {}


def oracle_available(seg6: bool = True, vrf: bool = False) -> tuple[bool, str]:
    """(ok, reason): can this process run a KernelOracle?

    Checks: Linux; root; iproute2 ``ip``; ``/dev/net/tun``; that ``ip netns``
    can create a namespace, that a TUN device can be created inside it, and
    (``seg6``, the default) that the kernel accepts a seg6local route and a
    seg6 encap route there (CONFIG_IPV6_SEG6_LWTUNNEL); (``vrf``) that it
    makes a VRF device (CONFIG_NET_VRF).  ``seg6=False`` for comparisons
    that need only the kernel's IP stack (FIB, forwarding, ICMP, IPv4
    options): they run on kernels built without SRv6 too.

    An answer is kept for the process's life only when it is about the
    machine (a feature the kernel lacks, no root); a set-up that failed for
    any other reason is tried again at the next call, so one transient
    failure cannot turn every later comparison into a skip.
    """
    key = (seg6, vrf)
    if key not in _available:
        ok, reason, lasting = _probe(seg6, vrf)
        if not lasting:
            return ok, reason
        _available[key] = (ok, reason)
    return _available[key]


def _probe(seg6: bool, vrf: bool) -> tuple[bool, str, bool]:
    if not os.path.exists("/proc/thread-self/ns/net"):
        return False, "not Linux, or no /proc/thread-self/ns/net", True
    if os.geteuid() != 0:
        return False, "kernel oracle needs root (network namespaces, TUN devices)", True
    if not os.path.exists(IP):
        return False, f"iproute2 'ip' not found (looked for {IP})", True
    if not os.path.exists("/dev/net/tun"):
        return False, "/dev/net/tun does not exist", True
    try:
        with KernelOracle(ifaces=("fpprobe0",)) as k:
            if seg6:
                try:
                    k.configure("ip -6 route add fc00::1/128 encap seg6local action End dev fpprobe0")
                    k.configure("ip -6 route add fc00::2/128 encap seg6 mode encap segs fc00::3 "
                                "dev fpprobe0")
                except KernelConfigError as e:
                    return False, ("seg6 lwtunnels not available in this kernel "
                                   f"(CONFIG_IPV6_SEG6_LWTUNNEL): {e.stderr.strip() or e}"), True
            if vrf:
                try:
                    k.configure("ip link add fpprobevrf type vrf table 4242")
                except KernelConfigError as e:
                    return False, ("VRF devices not available in this kernel "
                                   f"(CONFIG_NET_VRF): {e.stderr.strip() or e}"), True
    except Exception as e:  # a set-up failure: a reason to skip, not to remember
        return False, f"kernel oracle set-up failed: {e}", False
    return True, "ok", True


# --------------------------------------------------------------------------
# the oracle

_counter = itertools.count()
_live: "set[KernelOracle]" = set()
_live_lock = threading.Lock()


@atexit.register
def _close_live_oracles() -> None:
    with _live_lock:
        live = list(_live)
    for k in live:
        try:
            k.close()
        except Exception:
            pass


def _ip_object_index(args: Sequence[str]) -> int:
    """Index in ``args`` (the words after ``ip``) of the object (``route``,
    ``sr`` ...), skipping global options; raises ValueError on options the
    oracle refuses."""
    with_value = {"-f", "-family", "-l", "-loops", "-rc", "-rcvbuf", "-c", "-color", "-color="}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        opt = args[i]
        if opt in ("-n", "-netns") or opt.startswith("-netns="):
            raise ValueError("'ip -n/-netns' is not allowed: the oracle runs every line in its own namespace")
        if opt in ("-b", "-batch", "-force"):
            raise ValueError("'ip -batch/-force' is not supported: give one command per line")
        i += 2 if opt in with_value else 1
    return i


class KernelOracle:
    """A private network namespace with TUN (and TAP: ``taps``) devices; see
    the module docstring."""

    def __init__(self, ifaces: Iterable[str] = ("tun0", "tun1", "tun2"), settle: float = 0.0,
                 *, sysctls: "dict[str, str | int] | None" = None, taps: Iterable[str] = ()):
        self.ifaces: tuple[str, ...] = tuple(ifaces)
        if not self.ifaces:
            raise ValueError("need at least one interface")
        for name in self.ifaces:
            if not name or len(name.encode()) >= IFNAMSIZ or "/" in name or " " in name:
                raise ValueError(f"bad interface name {name!r}")
        if len(set(self.ifaces)) != len(self.ifaces):
            raise ValueError(f"duplicate interface names in {self.ifaces}")
        if isinstance(taps, str):
            taps = (taps,)
        self.taps: tuple[str, ...] = tuple(n for n in self.ifaces if n in set(taps))
        unknown = sorted(set(taps) - set(self.ifaces))
        if unknown:
            raise ValueError(f"taps {unknown} are not among the interfaces {self.ifaces}")
        self.settle = settle
        merged = dict(NAMESPACE_SYSCTLS)
        merged.update({k: str(v) for k, v in (sysctls or {}).items()})
        self.namespace_sysctls: tuple[tuple[str, str], ...] = tuple(merged.items())
        self.netns: str | None = None
        self._fds: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._poll: select.poll | None = None
        self.skipped: list[str] = []      # config lines skipped (see configure)
        self.filtered = 0                 # packets dropped as kernel noise
        self.stray: list[tuple[str, bytes]] = []  # non-noise output found before a send
        self.last_write_error: int | None = None

    # -- life cycle ---------------------------------------------------------

    @property
    def netns_path(self) -> str:
        if self.netns is None:
            raise KernelOracleError("oracle not open")
        return os.path.join(NETNS_RUN_DIR, self.netns)

    def __enter__(self) -> "KernelOracle":
        if self.netns is not None:
            raise KernelOracleError("oracle already open")
        try:
            self._create_netns()
            with _live_lock:
                _live.add(self)
            with _in_netns(self.netns_path):
                for name, value in self.namespace_sysctls:
                    try:
                        _write_sysctl(name, value)
                    except OSError as e:
                        raise KernelOracleError(f"sysctl {name}={value!r} in {self.netns}: {e}") from e
                for ifname in self.ifaces:
                    self._open_tun(ifname)
            self._poll = select.poll()
            for fd in self._fds.values():
                self._poll.register(fd, select.POLLIN)
            script = "link set lo up\n" + "".join(f"link set {n} up\n" for n in self.ifaces)
            r = _run([IP, "-n", self.netns, "-batch", "-"], input=script.encode())
            if r.returncode != 0:
                raise KernelOracleError(
                    f"bringing interfaces up in {self.netns} failed: {r.stderr.decode(errors='replace').strip()}")
            if self.settle:
                time.sleep(self.settle)
            self._drain()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close()
        return False

    def _create_netns(self) -> None:
        last = ""
        for _ in range(5):
            name = f"fp-{os.getpid()}-{next(_counter)}"
            r = None
            try:
                r = _run([IP, "netns", "add", name])
                if r.returncode == 0:
                    self.netns = name
                    return
            except BaseException:
                # interrupted (a signal) while ip made it, or right after: it
                # is ours to delete (the name carries our pid)
                if (self.netns is None and (r is None or r.returncode == 0)
                        and os.path.exists(os.path.join(NETNS_RUN_DIR, name))):
                    self.netns = name
                raise
            last = r.stderr.decode(errors="replace").strip()
            if not os.path.exists(os.path.join(NETNS_RUN_DIR, name)):
                break  # not a name clash with a leftover: give up
        raise KernelOracleError(f"'ip netns add' failed: {last}")

    def _open_tun(self, ifname: str) -> None:
        # The TUN device is created in the network namespace of the thread
        # that opens /dev/net/tun (the socket is created at open time).
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as e:
            raise KernelOracleError(f"opening /dev/net/tun inside {self.netns}: {e}") from e
        try:
            mode = IFF_TAP if ifname in self.taps else IFF_TUN
            ifr = struct.pack(f"{IFNAMSIZ}sH22x", ifname.encode(), mode | IFF_NO_PI)
            fcntl.ioctl(fd, TUNSETIFF, ifr)
        except OSError as e:
            os.close(fd)
            raise KernelOracleError(f"TUNSETIFF {ifname} inside {self.netns}: {e}") from e
        self._fds[ifname] = fd
        self._names[fd] = ifname

    def close(self) -> None:
        """Close the TUN fds (destroying the devices) and delete the
        namespace.  Idempotent; never raises for an already-gone namespace."""
        errors = []
        for fd in list(self._fds.values()):
            try:
                # persistent: closing no longer unregisters the device (slow,
                # one RCU grace period each); the namespace teardown below
                # removes all devices in one batch.
                if self.netns is not None:
                    fcntl.ioctl(fd, TUNSETPERSIST, 1)
            except OSError:
                pass
            try:
                os.close(fd)
            except OSError as e:
                errors.append(f"close fd {fd}: {e}")
        self._fds.clear()
        self._names.clear()
        self._poll = None
        name, self.netns = self.netns, None
        with _live_lock:
            _live.discard(self)
        if name is not None:
            r = _run([IP, "netns", "delete", name])
            if r.returncode != 0 and os.path.exists(os.path.join(NETNS_RUN_DIR, name)):
                errors.append(f"'ip netns delete {name}': {r.stderr.decode(errors='replace').strip()}")
        if errors:
            raise KernelOracleError("; ".join(errors))

    def __repr__(self) -> str:
        taps = f", taps={self.taps!r}" if self.taps else ""
        return f"KernelOracle(netns={self.netns!r}, ifaces={self.ifaces!r}{taps})"

    # -- configuration ------------------------------------------------------

    def ip(self, *args: str, input: bytes | str | None = None, check: bool = True) -> str:
        """Run ``ip -n <netns> ARGS...``; return stdout.  Raises
        KernelOracleError with stderr on failure when ``check``."""
        rc, out, err = self.ip_run(*args, input=input)
        if check and rc != 0:
            raise KernelOracleError(f"{shlex.join(['ip', '-n', self.netns, *args])} failed ({rc}): "
                                    f"{err.strip()}")
        return out

    def ip_run(self, *args: str, input: bytes | str | None = None,
               timeout: float = 120.0) -> tuple[int, str, str]:
        """Run ``ip -n <netns> ARGS...``: (exit status, stdout, stderr)."""
        self._check_open()
        if isinstance(input, str):
            input = input.encode()
        r = _run([IP, "-n", self.netns, *args], input=input, timeout=timeout)
        return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")

    def sysctl(self, name: str, value: str | int | None = None) -> str:
        """Read (``value`` None) or write a sysctl inside the namespace;
        returns the value read back."""
        self._check_open()
        with _in_netns(self.netns_path):
            if value is not None:
                _write_sysctl(name, str(value))
            return _read_sysctl(name)

    def configure(self, text: str) -> None:
        """Apply config text, one command per line (see the module docstring)."""
        self._check_open()
        run: list = []          # plain ip lines with the same global options, not yet run
        for lineno, line in self._logical_lines(text):
            try:
                argv = shlex.split(line, comments=True)
            except ValueError as e:
                raise KernelConfigError(lineno, line, f"cannot parse: {e}") from None
            if not argv:
                continue
            prog = os.path.basename(argv[0])
            plain = self._batchable(argv[1:]) if prog == "ip" else None
            if run and (plain is None or plain[0] != run[0][2][0]):
                self._configure_ip_run(run)
                run = []
            if plain is not None:
                run.append((lineno, line, plain))
            elif prog == "ip":
                self._configure_ip(lineno, line, argv[1:])
            elif prog == "sysctl":
                self._configure_sysctl(lineno, line, argv[1:])
            else:
                raise KernelConfigError(lineno, line, f"unknown command {argv[0]!r} (expected 'ip' or 'sysctl')")
        if run:
            self._configure_ip_run(run)

    # characters iproute2's batch reader (makeargs) would read otherwise than
    # the shell: such a line runs on its own
    _NOT_BATCHABLE = frozenset("'\"\\# \t")

    def _batchable(self, args: list) -> "tuple[tuple, list] | None":
        """(global options, the words from the object on) of an ``ip`` line
        that ``ip -batch`` may run as well as a process of its own; None for
        the lines _configure_ip treats specially (its own TUN devices, HMAC
        secrets, netns) or whose words batch mode would split otherwise."""
        try:
            i = _ip_object_index(args)
        except ValueError:
            return None
        if i >= len(args):
            return None
        obj, rest = args[i], args[i + 1:]
        if obj in ("sr", "seg6") or "netns".startswith(obj) or self._own_tun_add(obj, rest):
            return None
        if any(c in self._NOT_BATCHABLE for w in args for c in w) or "" in args:
            return None
        return tuple(args[:i]), args[i:]

    def _configure_ip_run(self, run: list) -> None:
        """Lines of the same global options through one ``ip -batch -``
        (one process instead of one a line: ~75 ms each under emulation).
        Without -force ip stops at the first line it refuses and names it
        ("Command failed -:N"); the lines before it are applied, as they
        would be one by one, and the refused one raises as it would alone."""
        if len(run) == 1:
            lineno, line, (opts, words) = run[0]
            self._configure_ip(lineno, line, [*opts, *words])
            return
        opts = list(run[0][2][0])
        cmd = [IP, "-n", self.netns, *opts, "-batch", "-"]
        r = _run(cmd, input="".join(" ".join(w) + "\n" for _, _, (_, w) in run).encode(),
                 timeout=30.0 + len(run))
        if r.returncode == 0:
            return
        err = r.stderr.decode(errors="replace")
        m = re.search(r"Command failed -:(\d+)", err)
        k = int(m.group(1)) - 1 if m and 0 < int(m.group(1)) <= len(run) else None
        if k is None:        # not a line's refusal: find it the slow way
            for lineno, line, (o, words) in run:
                self._configure_ip(lineno, line, [*o, *words])
            return
        lineno, line, (_, words) = run[k]
        detail = "\n".join(x for x in err.splitlines() if not x.startswith("Command failed"))
        raise KernelConfigError(lineno, line, f"rejected (exit {r.returncode})",
                                [IP, "-n", self.netns, *opts, *words], detail)

    @staticmethod
    def _logical_lines(text: str):
        buf, start = "", None
        for n, raw in enumerate(text.splitlines(), 1):
            if start is None:
                start = n
            stripped = raw.rstrip()
            if stripped.endswith("\\") and not stripped.lstrip().startswith("#"):
                buf += stripped[:-1] + " "
                continue
            buf += raw
            yield start, buf.strip()
            buf, start = "", None
        if buf.strip():
            yield start, buf.strip()

    def _configure_ip(self, lineno: int, line: str, args: list[str]) -> None:
        try:
            i = _ip_object_index(args)
        except ValueError as e:
            raise KernelConfigError(lineno, line, str(e)) from None
        obj, rest = (args[i], args[i + 1:]) if i < len(args) else ("", [])
        stdin = b""
        if obj == "netns" or (obj and "netns".startswith(obj) and len(obj) >= 3):
            raise KernelConfigError(lineno, line, "'ip netns' is not allowed: the oracle owns the namespace")
        own = self._own_tun_add(obj, rest)
        if own is not None:
            names, mode = own
            taps = [n for n in names if n in self.taps]
            if taps and mode != "tap":
                raise KernelConfigError(lineno, line, f"{taps[0]} is a TAP device in this oracle "
                                        f"(taps={self.taps}): the line must say mode/type tap")
            self.skipped.append(line)
            return
        if obj in ("sr", "seg6") and len(rest) >= 4 and rest[0] == "hmac" and rest[1] == "set":
            # ip sr hmac set KEYID ALGO [SECRET]: iproute2 reads SECRET with getpass().
            secret = " ".join(rest[4:])
            args = args[:i + 1] + rest[:4]
            stdin = secret.encode() + b"\n"
        cmd = [IP, "-n", self.netns, *args]
        r = _run(cmd, input=stdin)
        if r.returncode != 0:
            raise KernelConfigError(lineno, line, f"rejected (exit {r.returncode})", cmd,
                                    r.stderr.decode(errors="replace"))

    def _is_own_tun_add(self, obj: str, rest: list[str]) -> bool:
        own = self._own_tun_add(obj, rest)
        return own is not None

    def _own_tun_add(self, obj: str, rest: list[str]) -> "tuple[list[str], str | None] | None":
        """For ``ip link add [name] NAME type tun|tap`` / ``ip tuntap add
        [dev] NAME mode tun|tap`` naming one of the oracle's devices: (its
        names among the devices, the mode given: tun, tap or None).  None
        for any other line."""
        if obj in ("link", "l", "li", "lin") and rest[:1] == ["add"]:
            words = rest[1:]
            mode = words[words.index("type") + 1:][:1] if "type" in words else []
            if mode in (["tun"], ["tap"]):
                names = [w for j, w in enumerate(words)
                         if (j == 0 and w not in ("name", "dev", "link")) or
                         (j > 0 and words[j - 1] in ("name", "dev"))]
                own = [n for n in names if n in self.ifaces]
                return (own, mode[0]) if own else None
            return None
        if obj in ("tuntap", "tap") and rest[:1] == ["add"]:
            words = rest[1:]
            names = [w for j, w in enumerate(words)
                     if (j == 0 and w not in ("dev", "name", "mode")) or (j > 0 and words[j - 1] in ("dev", "name"))]
            own = [n for n in names if n in self.ifaces]
            mode = words[words.index("mode") + 1:][:1] if "mode" in words else []
            return (own, mode[0] if mode else None) if own else None
        return None

    def _configure_sysctl(self, lineno: int, line: str, args: list[str]) -> None:
        assignments = []
        for a in args:
            if a.startswith("-"):
                if a in ("-w", "-q", "-e", "--write", "--quiet", "--ignore"):
                    continue
                raise KernelConfigError(lineno, line, f"unsupported sysctl option {a!r}")
            if "=" not in a:
                raise KernelConfigError(lineno, line, f"expected name=value, got {a!r}")
            name, value = a.split("=", 1)
            assignments.append((name.strip(), value.strip()))
        if not assignments:
            raise KernelConfigError(lineno, line, "no name=value given")
        with _in_netns(self.netns_path):
            for name, value in assignments:
                try:
                    _write_sysctl(name, value)
                except OSError as e:
                    raise KernelConfigError(lineno, line, f"writing {_sysctl_path(name)}: {e}") from None

    # -- packets ------------------------------------------------------------

    def _check_open(self) -> None:
        if self.netns is None or not self._fds:
            raise KernelOracleError("oracle not open (use it as a context manager)")

    def _read_ready(self, fd: int, out: list[tuple[str, bytes]]) -> int:
        """Read everything queued on ``fd``; append non-noise packets to
        ``out``; return how many were appended."""
        n = 0
        name = self._names[fd]
        noise = is_kernel_noise_frame if name in self.taps else is_kernel_noise
        while True:
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                return n
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            if noise(data):
                self.filtered += 1
                continue
            out.append((name, data))
            n += 1

    def _drain(self) -> None:
        for fd in self._fds.values():
            self._read_ready(fd, self.stray)

    def send(self, iif: str, packet: bytes, wait: float = 0.05) -> list[tuple[str, bytes]]:
        """Write one raw L3 packet into TUN ``iif`` (an Ethernet frame into
        a TAP device); return what the kernel writes to the devices,
        ``[(ifname, bytes)]`` in arrival order, noise filtered (see the
        module docstring)."""
        self._check_open()
        if iif not in self._fds:
            raise KeyError(f"no TUN device {iif!r} in this oracle (have {self.ifaces})")
        self._drain()
        self.last_write_error = None
        try:
            os.write(self._fds[iif], bytes(packet))
        except OSError as e:
            if e.errno == errno.EINVAL:
                self.last_write_error = e.errno
                return []
            raise
        return self._collect(wait)

    def collect(self, wait: float = 0.05) -> list[tuple[str, bytes]]:
        """What the kernel writes to the devices from now until ``wait``
        seconds pass with nothing new (noise filtered): output of the last
        ``send`` that came after its own wait (a slow or emulated machine)."""
        self._check_open()
        return self._collect(wait)

    def _collect(self, wait: float) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        deadline = time.monotonic() + wait
        assert self._poll is not None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            events = self._poll.poll(max(1, int(remaining * 1000 + 0.999)))
            if not events:
                break
            got = 0
            for fd, _ in events:
                got += self._read_ready(fd, out)
            if got:
                deadline = time.monotonic() + wait
        return out

    def send_many(self, iif: str, packets: Iterable[bytes], wait: float = 0.05) -> list[list[tuple[str, bytes]]]:
        """``send`` each packet in turn (never overlapping); one list per packet."""
        return [self.send(iif, p, wait=wait) for p in packets]

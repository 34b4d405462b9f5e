"""The router's own stack behind the interfaces fastpath owns (``--host-stack``).

While fastpath owns an interface, the nftables ingress drop (wire.nft) keeps
the kernel from seeing what arrives there.  That also cuts off the
namespace's own stack: nobody answers ping, ssh, BGP or BFD for the
router's addresses.  With the host stack on, fastpath hands the kernel what
it delivers locally, and the kernel keeps its own neighbours:

- **Local delivery.**  Every packet whose verdict is ``local`` is written
  into a TAP device.  A tcx ingress program there (six eBPF instructions,
  below) marks it with ``MARK`` and redirects it to the ingress of the
  device the datapath delivered it on: the interface it arrived on, or the
  VRF device after End.DT4/DT6/DT46 decapsulated it into a VRF
  (``Batch.oif`` of a local packet).  The kernel receives it there as if it
  had come off the wire: the same ``skb->dev``, so the same L3 domain,
  sockets, link-local scope and ``rp_filter``.  The nftables chain accepts
  marked frames; fastpath's own AF_PACKET sockets carry a cBPF filter that
  ignores them (they pass the packet taps again).
- **ARP and NDP.**  The nftables chains also accept ARP and ICMPv6 types
  133-137, so the kernel learns its neighbours and answers for its
  addresses; fastpath's neighbour subsystem reads the same frames (the
  taps run before the ingress hook) and answers too.  Both answer with the
  device's MAC, so a request may get two identical replies.
- **What the kernel sends** out of those interfaces leaves through
  fastpath: a tcx egress program on each interface lets fastpath's own
  frames go (its sockets mark them, ``SO_MARK``) and redirects every other
  one -- the kernel's, routed and resolved by the kernel -- into the
  interface's TAP; fastpath reads the TAPs in its loop (the control
  process, with ``--workers``) and sends those frames out of the interface
  (``host_sent``).

Why not VPP linux-cp's mirrors (a TAP per interface holding the
addresses, every host frame crossing the TAP both ways): the interfaces
here are the kernel's own, already configured by the lab or the operator,
and fastpath's configuration is imported from them.  Moving their
addresses and routes to mirrors would rewrite the host's configuration and
need undoing; redirecting into and out of the interface itself changes
nothing of it.  What a TAP costs is paid only by the router's own
packets; forwarded ones pay a cBPF instruction pair on receive and a mark
comparison on transmit, in the kernel (bench_wire prints the
difference).

Nothing outlives the process: a TAP device that is not made persistent
disappears when its last descriptor closes, and a tcx link that is not
pinned detaches when its descriptor closes, SIGKILL included.  The
nftables rules are part of the ingress-drop table (removed as it is).

Needs Linux >= 6.6 (tcx), /dev/net/tun and libbpf (``apt-get install
libbpf1``); HostStackError says which is missing.  The eBPF programs are
written as instructions here: each is six, and building them from C would
need clang on every machine that runs fastpath.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import socket
import struct

import numpy as np

# skb->mark of the frames fastpath hands to the kernel ("fa57" in a word
# nothing else is likely to use)
MARK = 0x7A570001

_TUNSETIFF = 0x400454CA
_IFF_TAP, _IFF_NO_PI = 0x0002, 0x1000
_SIOCGIFFLAGS, _SIOCSIFFLAGS = 0x8913, 0x8914
_IFF_UP = 0x1
_SO_ATTACH_FILTER = 26
_BPF_PROG_TYPE_SCHED_CLS = 3
_BPF_TCX_INGRESS, _BPF_TCX_EGRESS = 46, 47     # enum bpf_attach_type (Linux 6.6)
_TCX_NEXT = -1                  # a tcx program's "carry on" (uapi/linux/bpf.h)
_BPF_F_INGRESS = 1
_FN_REDIRECT = 23               # bpf_redirect(ifindex, flags)
_SKB_MARK = 8                   # offsetof(struct __sk_buff, mark)
_SKF_AD_MARK = -0x1000 + 20     # SKF_AD_OFF + SKF_AD_MARK (cBPF ancillary load)


class HostStackError(RuntimeError):
    """The host stack cannot be set up here (a one-line message for a person)."""


def _insn(code, dst=0, src=0, off=0, imm=0) -> bytes:
    """One eBPF instruction (struct bpf_insn)."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def redirect_insns(target_ifindex: int) -> bytes:
    """The tcx ingress program of a TAP: mark the frame and redirect it to
    the ingress of ``target_ifindex``.

        r2 = MARK;  ctx->mark = r2
        return bpf_redirect(target_ifindex, BPF_F_INGRESS)   # TCX_REDIRECT
    """
    mark = MARK - (1 << 32) if MARK >= 1 << 31 else MARK      # (imm is signed)
    return (_insn(0xB7, 2, imm=mark)                   # BPF_ALU64|BPF_MOV|BPF_K
            + _insn(0x63, 1, 2, off=_SKB_MARK)         # BPF_STX|BPF_MEM|BPF_W
            + _insn(0xB7, 1, imm=target_ifindex)
            + _insn(0xB7, 2, imm=_BPF_F_INGRESS)
            + _insn(0x85, imm=_FN_REDIRECT)            # BPF_JMP|BPF_CALL
            + _insn(0x95))                             # BPF_JMP|BPF_EXIT


def egress_insns(tap_ifindex: int) -> bytes:
    """The tcx egress program of an owned interface: a frame fastpath sends
    (its sockets mark theirs) goes on; any other -- the kernel's own --
    is redirected into the interface's TAP, for fastpath to send.

        if ctx->mark == MARK: return TCX_NEXT
        return bpf_redirect(tap_ifindex, 0)                  # TCX_REDIRECT
    """
    mark = MARK - (1 << 32) if MARK >= 1 << 31 else MARK
    return (_insn(0x61, 2, 1, off=_SKB_MARK)           # BPF_LDX|BPF_MEM|BPF_W
            + _insn(0x15, 2, off=4, imm=mark)          # BPF_JMP|BPF_JEQ|BPF_K: to +4
            + _insn(0xB7, 1, imm=tap_ifindex)
            + _insn(0xB7, 2, imm=0)
            + _insn(0x85, imm=_FN_REDIRECT)
            + _insn(0x95)
            + _insn(0xB7, 0, imm=_TCX_NEXT)
            + _insn(0x95))


def ignore_marked_filter() -> bytes:
    """cBPF for fastpath's AF_PACKET sockets: drop frames marked MARK (the
    ones it handed to the kernel), take the rest whole."""
    def op(code, jt, jf, k):
        return struct.pack("<HBBI", code, jt, jf, k & 0xFFFFFFFF)
    return (op(0x20, 0, 0, _SKF_AD_MARK)        # BPF_LD|BPF_W|BPF_ABS: A = skb->mark
            + op(0x15, 0, 1, MARK)              # BPF_JMP|BPF_JEQ|BPF_K
            + op(0x06, 0, 0, 0)                 # BPF_RET: drop
            + op(0x06, 0, 0, 0x40000))          # BPF_RET: the whole frame


_lib = None


def _libbpf():
    global _lib
    if _lib is None:
        name = ctypes.util.find_library("bpf") or "libbpf.so.1"
        try:
            lib = ctypes.CDLL(name, use_errno=True)
        except OSError:
            raise HostStackError("--host-stack needs libbpf (apt-get install libbpf1)") from None
        lib.bpf_prog_load.restype = ctypes.c_int
        lib.bpf_prog_load.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        lib.bpf_link_create.restype = ctypes.c_int
        lib.bpf_link_create.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                        ctypes.c_void_p]
        _lib = lib
    return _lib


def _load_program(code: bytes) -> int:
    buf = ctypes.create_string_buffer(code, len(code))
    fd = _libbpf().bpf_prog_load(_BPF_PROG_TYPE_SCHED_CLS, b"fastpath_host", b"GPL",
                                 buf, len(code) // 8, None)
    if fd < 0:
        e = -fd
        why = ("not permitted (run as root)" if e in (errno.EPERM, errno.EACCES)
               else os.strerror(e))
        raise HostStackError(f"--host-stack: loading the redirect program: {why}")
    return fd


def _attach_tcx(prog_fd: int, ifindex: int, name: str, egress=False) -> int:
    fd = _libbpf().bpf_link_create(prog_fd, ifindex,
                                   _BPF_TCX_EGRESS if egress else _BPF_TCX_INGRESS, None)
    if fd < 0:
        e = -fd
        if e in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise HostStackError(f"--host-stack: this kernel cannot attach a tcx program to "
                                 f"{name} (needs Linux 6.6 or later with CONFIG_NET_XGRESS)")
        raise HostStackError(f"--host-stack: attaching to {name}: {os.strerror(e)}")
    return fd


def _open_tap(name: str) -> int:
    """A TAP device ``name``, not persistent (it goes when ``fd`` closes),
    without IPv6 (no link-local address, router solicitations or MLD
    reports: nothing is sent into it), up."""
    try:
        fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise HostStackError(f"--host-stack: /dev/net/tun: {e.strerror}") from None
    try:
        fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH", name.encode(), _IFF_TAP | _IFF_NO_PI))
        try:
            with open(f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6", "w") as f:
                f.write("1")
        except FileNotFoundError:
            pass                                # (IPv6 disabled altogether)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            r = fcntl.ioctl(s, _SIOCGIFFLAGS, struct.pack("16sH", name.encode(), 0))
            flags = struct.unpack("16sH", r[:18])[1]
            fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH", name.encode(), flags | _IFF_UP))
    except OSError as e:
        os.close(fd)
        what = "a device of that name exists" if e.errno == errno.EBUSY else e.strerror
        raise HostStackError(f"--host-stack: TAP device {name}: {what}") from None
    return fd


def ignore_marked(sock) -> None:
    """Attach ``ignore_marked_filter`` to an AF_PACKET socket (its fileno())."""
    code = ignore_marked_filter()
    buf = ctypes.create_string_buffer(code, len(code))
    prog = struct.pack("@HxxxxxxP", len(code) // 8, ctypes.addressof(buf))
    s = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        s.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, prog)
    except OSError as e:
        raise HostStackError(f"--host-stack: the socket filter on {getattr(sock, 'name', '?')}: "
                             f"{e.strerror}") from None
    finally:
        s.close()


def system_device(name: str) -> tuple:
    """(ifindex, MAC) of a system device, or None when it does not exist."""
    try:
        with open(f"/sys/class/net/{name}/address") as f:
            mac = bytes.fromhex(f.read().strip().replace(":", ""))
        return socket.if_nametoindex(name), mac
    except (OSError, ValueError):
        return None


class HostStack:
    """One TAP per delivery device; ``deliver`` hands the kernel a batch's
    locally delivered packets.

    ``targets``: {ifindex in the configuration: (system name, system
    ifindex, system MAC, attached)} -- the attached interfaces (attached
    True: the kernel's own frames out of them come back through their TAP,
    ``pump``) and the VRF devices that exist on the system.  ``open()`` (the process that owns the
    interfaces) creates the TAPs and attaches the programs; a worker of
    ``--workers`` gets the TAPs' descriptors instead (``fds()``, then
    ``HostStack(targets, fds=...)``): it only writes.
    """

    def __init__(self, targets: dict, fds: dict | None = None):
        self.targets = dict(targets)
        self.taps = dict(fds or {})             # configuration ifindex -> TAP fd
        self._owned = []                        # fds to close: TAPs, programs, links
        self.delivered = 0
        self.no_device = 0
        self.errors = 0
        self.sent = 0                           # the kernel's frames sent by fastpath
        self.opened = fds is not None

    def open(self) -> "HostStack":
        try:
            for cfg_ifindex, (name, sys_ifindex, _mac, attached) in sorted(self.targets.items()):
                tap = f"fph{sys_ifindex}"
                tfd = _open_tap(tap)
                self._owned.append(tfd)
                tap_ifindex = socket.if_nametoindex(tap)
                pfd = _load_program(redirect_insns(sys_ifindex))
                self._owned.append(pfd)
                self._owned.append(_attach_tcx(pfd, tap_ifindex, tap))
                self.taps[cfg_ifindex] = tfd
                if attached:
                    pfd = _load_program(egress_insns(tap_ifindex))
                    self._owned.append(pfd)
                    self._owned.append(_attach_tcx(pfd, sys_ifindex, name, egress=True))
        except BaseException:
            self.close()
            raise
        self.opened = True
        return self

    def readable(self) -> list:
        """The TAPs the kernel's own frames come back through (to poll)."""
        return [fd for k, fd in self.taps.items() if self.targets[k][3]]

    def pump(self, send, limit=256) -> int:
        """Send the kernel's own frames waiting in the attached interfaces'
        TAPs, ``send(configuration ifindex, frame)``, at most ``limit`` of
        each per call; returns how many."""
        n = 0
        for k, fd in self.taps.items():
            if not self.targets[k][3]:
                continue
            for _ in range(limit):
                try:
                    frame = os.read(fd, 65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self.errors += 1
                    break
                send(k, frame)
                n += 1
        self.sent += n
        return n

    def fds(self) -> dict:
        """{configuration ifindex: TAP fd}: what a worker writes into."""
        return dict(self.taps)

    def close(self) -> None:
        for fd in reversed(self._owned):
            try:
                os.close(fd)
            except OSError:
                pass
        self._owned = []
        self.taps = {}
        self.opened = False

    @staticmethod
    def snapshot(b):
        """What ``deliver`` needs of batch ``b`` from before processing:
        each row's frame and network-header offsets, and the IPv4 headers
        that carry options (the datapath fills in Record Route and
        Timestamp options as it receives them; the kernel, handed the
        packet, does that itself and must see them as they came)."""
        start = b.start.copy()
        l3 = start + b.l2len
        d = b.data
        rows = np.arange(len(b))
        first = d[rows, np.minimum(l3, d.shape[1] - 1)]
        opts = {}
        for i in np.flatnonzero(((first >> 4) == 4) & ((first & 0x0F) > 5)):
            o = int(l3[i])
            opts[int(i)] = d[i, o:o + (int(first[i]) & 0x0F) * 4].tobytes()
        return start, l3, opts

    def deliver(self, b, rows, before) -> None:
        """Write packets ``rows`` of batch ``b`` (verdict local) into the
        TAP of their delivery device (``b.oif``).  ``before``: ``snapshot``
        of the batch before processing.  A packet the
        datapath did not decapsulate goes as it came (its own Ethernet
        header: unicast, multicast or broadcast as it was); a decapsulated
        one gets a header to the delivery device's MAC (the kernel's
        decapsulation keeps PACKET_HOST)."""
        d = b.data
        start_before, l3_before, opts = before
        for i in rows:
            i = int(i)
            oif = int(b.oif[i])
            fd = self.taps.get(oif)
            if fd is None:
                self.no_device += 1
                continue
            s, l2, n = int(b.start[i]), int(b.l2len[i]), int(b.length[i])
            l3 = s + l2
            if l3 == int(l3_before[i]) and l2 >= 14:
                frame = d[i, s:s + n].tobytes()
                if i in opts:                   # (its options as they came)
                    h = opts[i]
                    frame = frame[:l2] + h + frame[l2 + len(h):]
            else:
                old = int(start_before[i])
                src = d[i, old + 6:old + 12].tobytes()
                ver = int(d[i, l3]) >> 4
                frame = (self.targets[oif][2] + src + (b"\x86\xdd" if ver == 6 else b"\x08\x00")
                         + d[i, l3:s + n].tobytes())
            try:
                os.write(fd, frame)
                self.delivered += 1
            except OSError:
                self.errors += 1

    def counters(self) -> dict:
        return {"host_delivered": self.delivered, "host_sent": self.sent,
                "host_no_device": self.no_device, "host_error": self.errors}


def targets_for(names, sysinfo, state) -> dict:
    """The delivery devices of a configuration: each attached interface
    (its system ifindex and MAC) and each VRF device the system has."""
    out = {}
    for n in names:
        out[state.interfaces[n].ifindex] = (n, sysinfo[n]["ifindex"], sysinfo[n]["mac"], True)
    for n, itf in state.interfaces.items():
        if itf.kind == "vrf":
            dev = system_device(n)
            if dev is not None:
                out[itf.ifindex] = (n, dev[0], dev[1], False)
    return out


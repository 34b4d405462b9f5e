"""Follow: after an import, apply every change of a network namespace to a
``Router`` or a ``Dataplane`` as it happens (issue 18, part 2).

    f = router.follow_kernel("r1")        # or Dataplane.follow_kernel; started
    ...                                   # ip -n r1 route add ... -> applied
    f.sync()                              # wait until what the kernel sent so far is applied
    f.stats                               # messages, configures, lines, resyncs, errors, lag
    f.stop()                              # threads joined, socket closed (also: with ...)

How it works.  One raw rtnetlink socket is opened inside the namespace and
bound to the multicast groups of links, IPv4/IPv6 addresses, IPv4/IPv6
routes, IPv4/IPv6 rules and neighbours *before* the state is read, so that
nothing between the dump and the subscription is lost.  The initial import
(``netlink.read_snapshot`` + ``state_from_snapshot``: the same as
``Router.from_kernel``) replaces the target's configuration; then a thread
drains every message available, translates them in the order the kernel sent
them with the import's per-object translators (``route_from_msg``,
``rule_from_msg``, ``link_lines``, ``addr_line``, ``neigh_line``; RTM_DEL*
become ``del`` lines) and applies them with the target's ``configure``, one
call per burst (a 100k-route ``ip -batch`` is applied in configures of up to
``max_burst`` messages, 4096 by default: ``Router.process`` waits for a
configure, about 70-90 us a route, so a burst's configure stalls packets
for up to ~0.4 s; a larger one amortises little more).  Messages are parsed from the raw bytes (pyroute2
decodes only links, addresses and neighbours; routes and rules are read by
the translators from the raw message).

Each translation is idempotent against the target's state: a route equal to
the one fastpath holds (an automatic route fastpath derived itself from an
address, or a message queued before the dump) is skipped, a ``del`` of what
fastpath does not hold is skipped.  Link and address messages change what
fastpath derives (automatic routes), so they split a burst: the lines before
them are applied, then theirs, then the rest.  Two things the kernel does
without telling: when a device goes down, IPv4 routes through it (all their
nexthops on it, scope other than host) are flushed without RTM_DELROUTE
(``fib_sync_down_dev``/``fib_flush``); the follower deletes them itself.
An IPv6 multipath route that loses one nexthop (``ip -6 route del P via
A``) is reported as the RTM_DELROUTE of that nexthop alone: the route is
replaced by the remaining ones.

Two threads: a reader drains the socket as fast as it comes into an
in-memory inbox (up to ``max_backlog`` messages, 4M), so the kernel's buffer
overflows only when the applier is that far behind; the applier translates
and configures from the inbox.

A full resync (re-import, the target's configuration replaced by it, so
the result is a fresh import's) happens on a netlink overrun (ENOBUFS: the
kernel dropped messages), when a change cannot be expressed as a change of
fastpath's configuration (a device deleted or renamed, an IPv4 primary
address deleted with its secondaries: ``promote_secondaries`` decides), and when a
configure refuses the translated lines (a sign the follower is out of step):
counted in ``stats.resyncs`` and reported (``events``, ``on_event``, the
``fastpath.kernel.follow`` logger).  Never a silently stale table.

What fastpath does not model (a route with a nexthop object, an unsupported
encap, an address with a lifetime, ...) is reported as import reports it
("not supported: route 10.62.0.0/16 table main: nexthop object") and left
out; following goes on.  The follower is then *diverged*: ``diverged`` is
true and ``unsupported`` names the objects, until their RTM_DEL* arrives
(or a resync finds the kernel free of them).  A device fastpath does not
model is not created (nothing through it is configured by mention): its
addresses, neighbours and routes are reported likewise, and its deletion
re-imports (the kernel drops its IPv4 routes without a message).  A resync that cannot import
(the kernel holds something unsupported) keeps the last configuration,
counts an error, stays diverged and is retried every 5 s until one succeeds.

Proxy entries (``ip neigh add proxy``): the kernel sends no notification
for them (neigh_add / neigh_delete with NTF_PROXY change the pneigh table
silently), so the follower dumps them (``netlink.dump_proxies``, over a
second rtnetlink socket of the namespace) at every ``sync()`` and, while
no message waits, every ``PROXY_POLL_S`` (1) seconds, and applies the
difference (``ip neigh add|del proxy``); an RTM_NEWNEIGH/RTM_DELNEIGH with
NTF_PROXY, should a kernel send one, is applied as it comes.

Links.  A veth whose peer is in another namespace (the namespaces of a lab)
is an interface, as import writes it (a NIC).  The kernel announces the
end it registers first before it ties the pair, and never again: such a
veth waits for its peer's RTM_NEWLINK (a pair inside the namespace), and
before anything else of the burst (and at its end) the follower asks the
kernel (RTM_GETLINK) whether its peer is elsewhere.  A device enslaved to a
VRF or released (IFLA_MASTER) is ``ip link set dev X master V|nomaster``.
The kernel's ``pref 1000 l3mdev`` rules, announced before the first VRF,
are ``ip rule add pref 1000 l3mdev`` lines (the VRF line then adds none).

Not followed (the kernel sends no rtnetlink notification for them): sysctls,
``ip sr tunsrc`` and the HMAC keys.  They are read at the initial import and
at every resync (``resync()`` forces one).

Threads.  ``Router.configure`` and ``Router.process`` take the Router's
lock, and the follower holds it while it translates and applies a burst,
so its configures never interleave with the user's calls (and a burst is
translated against a state nobody else is changing).
A ``Dataplane``'s ``configure`` and ``process`` take its own lock, which
is ``follower.lock`` (the follower holds it around each of its bursts).
"""
from __future__ import annotations

import errno
import ipaddress
import logging
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Optional

from .. import config as C
from . import netlink as nl

__all__ = ["KernelFollower", "FollowStats", "FollowError", "GROUPS"]

log = logging.getLogger("fastpath.kernel.follow")

# rtnetlink multicast groups (RTNLGRP_*): bit (group - 1) of the bind mask
RTNLGRP = dict(LINK=1, NEIGH=3, IPV4_IFADDR=5, IPV4_ROUTE=7, IPV4_RULE=8, IPV6_IFADDR=9,
               IPV6_ROUTE=11, IPV6_RULE=19)
GROUPS = 0
for _g in RTNLGRP.values():
    GROUPS |= 1 << (_g - 1)

RTM_NEWLINK, RTM_DELLINK = 16, 17
RTM_NEWADDR, RTM_DELADDR = 20, 21
RTM_NEWROUTE, RTM_DELROUTE = 24, 25
RTM_NEWNEIGH, RTM_DELNEIGH = 28, 29
RTM_NEWRULE, RTM_DELRULE = 32, 33
NLMSG_ERROR, NLMSG_DONE, NLMSG_OVERRUN = 2, 3, 4
RTNL_FAMILY_IPMR, RTNL_FAMILY_IP6MR = 128, 129
NLM_F_REPLACE, NLM_F_EXCL, NLM_F_CREATE, NLM_F_APPEND = 0x100, 0x200, 0x400, 0x800
NETLINK_ROUTE = 0
SOL_NETLINK = 270
NETLINK_NO_ENOBUFS = 5
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_KINDS = {RTM_NEWLINK: "link", RTM_DELLINK: "link", RTM_NEWADDR: "addr", RTM_DELADDR: "addr",
          RTM_NEWROUTE: "route", RTM_DELROUTE: "route", RTM_NEWNEIGH: "neigh",
          RTM_DELNEIGH: "neigh", RTM_NEWRULE: "rule", RTM_DELRULE: "rule"}
_DEL = {RTM_DELLINK, RTM_DELADDR, RTM_DELROUTE, RTM_DELNEIGH, RTM_DELRULE}


class FollowError(RuntimeError):
    """The follower could not start (no namespace, no pyroute2, ...)."""


@dataclass
class FollowStats:
    messages: int = 0          # rtnetlink messages received
    configures: int = 0        # configure calls made on the target
    lines: int = 0             # configuration lines applied
    resyncs: int = 0           # full re-imports after the start (overruns, out of step)
    overruns: int = 0          # ENOBUFS seen on the socket
    errors: int = 0            # resyncs that failed, configures refused
    unsupported: int = 0       # messages for objects fastpath does not model
    skipped: int = 0           # messages that changed nothing (already so in fastpath)
    last_lag: Optional[float] = None   # s: first message of the last burst received -> applied
    max_lag: Optional[float] = None
    last_burst: int = 0        # messages in the last burst

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _split(data: bytes):
    """[(type, flags, message bytes)] of one netlink datagram."""
    out = []
    off, n = 0, len(data)
    while off + 16 <= n:
        ln, typ, flags = struct.unpack_from("=IHH", data, off)
        if ln < 16 or off + ln > n:
            break
        out.append((typ, flags, data[off:off + ln]))
        off += (ln + 3) & ~3
    return out


def _decode(typ: int, raw: bytes):
    """A pyroute2 message for the translators that read attributes by name."""
    if typ in (RTM_NEWLINK, RTM_DELLINK):
        from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg as cls
    elif typ in (RTM_NEWADDR, RTM_DELADDR):
        from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg as cls
    elif typ in (RTM_NEWNEIGH, RTM_DELNEIGH):
        from pyroute2.netlink.rtnl.ndmsg import ndmsg as cls
    else:
        return raw
    m = cls(raw)
    m.decode()
    return m


_SYNC, _OVERRUN = object(), object()          # markers in the inbox


class _Resync(Exception):
    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class KernelFollower:
    """Follow a namespace's rtnetlink changes onto ``target`` (a Router or a
    Dataplane); see the module doc.

    ``netns``: a named namespace (``ip netns``), None for this process's.
    ``on_apply(lines)``: called (in the follower's thread) after each
    configure that applied lines; ``on_event(text)``: resyncs, overruns,
    unsupported objects, errors.  ``rcvbuf``: the socket's receive buffer
    (bytes, forced as root); ``max_burst``: at most this many messages per
    configure.  ``start=False``: call ``start()`` yourself."""

    def __init__(self, target, netns: Optional[str] = None, *, hmac_file: Optional[str] = None,
                 on_apply: Optional[Callable] = None, on_event: Optional[Callable] = None,
                 rcvbuf: int = 256 << 20, max_burst: int = 4096, max_backlog: int = 4_000_000,
                 start: bool = True):
        self.target = target
        self.netns = netns
        self.hmac_file = hmac_file
        self.on_apply = on_apply
        self.on_event = on_event
        self.rcvbuf = rcvbuf
        self.max_burst = max_burst
        self.max_backlog = max_backlog
        self.stats = FollowStats()
        self.events: deque = deque(maxlen=1000)
        self.unsupported: dict = {}          # object -> message of NotSupported
        self.import_text = None              # the configuration of the initial import
        self.import_notes: list = []
        self.lock = getattr(target, "_lock", None) or threading.RLock()
        self._hmac_keys = None
        self._links: dict = {}               # ifindex -> RTM_NEWLINK (pyroute2)
        self._ifnames: dict = {}             # ifindex -> name
        self._sock = None
        self._wake_r = self._wake_w = None
        self._thread = None
        self._reader = None
        self._reader_done = False
        self._inbox: deque = deque()         # (datagram, timestamp) | (_SYNC, n) | (_OVERRUN, None)
        self._stop = threading.Event()
        self._sync_req = 0
        self._sync_done = 0
        self._cv = threading.Condition()
        self._force_resync = None
        self._retry_at = None                # a failed resync: when to try again
        self._retry_reason = None
        self._veth_wait: dict = {}
        self._qsock = None                   # rtnetlink requests: proxy dumps, one link
        self._proxy_at = 0.0                 # when the proxy entries are dumped next
        self._proxy_bad: set = set()         # proxy entries left out at the last dump
        self.recv_hook = None                # tests: called before each recv (may raise OSError)
        if start:
            self.start()

    # -- life cycle -----------------------------------------------------------
    @property
    def running(self) -> bool:
        return (self._thread is not None and self._thread.is_alive()
                and self._reader is not None and self._reader.is_alive())

    @property
    def diverged(self) -> bool:
        """Whether the kernel holds objects fastpath left out (``unsupported``)."""
        return bool(self.unsupported)

    def start(self) -> "KernelFollower":
        if self._thread is not None:
            raise FollowError("follower already started")
        try:
            import pyroute2.netlink.rtnl.ifinfmsg  # noqa: F401
        except ImportError:
            raise FollowError("pyroute2 is not installed (pip install pyroute2)") from None
        if self.hmac_file is not None:
            try:
                with open(self.hmac_file, encoding="utf-8", errors="surrogateescape") as f:
                    self._hmac_keys = nl._parse_hmac_file(f.read(), self.hmac_file)
            except OSError as e:
                raise FollowError(f"cannot read {self.hmac_file}: {e.strerror}") from None
        path = nl.netns_path(self.netns)           # KernelImportError when it does not exist
        try:
            self._open_socket(path)
            self._qsock = nl.rtnl_socket(path)
            self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
            self._resync("initial import", initial=True)
        except BaseException:
            self._close()
            raise
        name = f"fastpath-follow-{self.netns or 'self'}"
        self._reader = threading.Thread(target=self._read_loop, name=name + "-reader", daemon=True)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._reader.start()
        self._thread.start()
        return self

    def _open_socket(self, path):
        s = nl.route_socket(path)
        self._sock = s
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, self.rcvbuf)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self._tstamp = True
        except OSError:
            self._tstamp = False
        s.bind((0, GROUPS))
        s.setblocking(False)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop following: the thread is joined, the socket and pipe closed.
        What was received but not yet applied is dropped."""
        self._stop.set()
        if self._wake_w is not None:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass
        with self._cv:
            self._cv.notify_all()
        deadline = time.monotonic() + timeout
        for t in (self._reader, self._thread):
            if t is not None and t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
                if t.is_alive():
                    raise FollowError(f"the follower thread {t.name} did not stop (a resync "
                                      "in progress?)")
        self._close()

    def _close(self):
        for s in (self._sock, self._qsock):
            if s is not None:
                s.close()
        self._sock = self._qsock = None
        for fd in (self._wake_r, self._wake_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._wake_r = self._wake_w = None
        with self._cv:
            self._cv.notify_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def sync(self, timeout: float = 30.0) -> bool:
        """Wait until every message the kernel queued before this call is
        applied (an ``ip`` command's notifications are queued before it
        returns).  False on timeout or when the follower stopped."""
        with self._cv:
            self._sync_req += 1
            want = self._sync_req
        try:
            os.write(self._wake_w, b"s")
        except (OSError, TypeError):
            return False
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._sync_done < want:
                left = deadline - time.monotonic()
                if left <= 0 or not self.running:
                    return False
                self._cv.wait(min(left, 0.5))
        return True

    def resync(self, reason: str = "requested", timeout: float = 120.0) -> bool:
        """Force a full resync (re-import) in the follower's thread; waits
        for it (True when done)."""
        self._force_resync = reason
        with self._cv:
            self._cv.notify_all()
        return self.sync(timeout)

    # -- reporting ------------------------------------------------------------
    def _event(self, text: str, level=logging.INFO):
        self.events.append(text)
        log.log(level, "%s", text)
        if self.on_event is not None:
            try:
                self.on_event(text)
            except Exception:         # a callback's error must not stop following
                log.exception("on_event callback failed")

    # -- the threads ----------------------------------------------------------
    # The reader drains the socket as fast as it can into the inbox (so the
    # kernel's buffer overflows only when the inbox is full: max_backlog
    # messages); the applier translates and configures from the inbox.
    def _read_loop(self):
        sock = self._sock
        pushed_sync = 0
        try:
            while not self._stop.is_set():
                try:
                    r, _, _ = select.select([sock, self._wake_r], [], [], 1.0)
                except (OSError, ValueError):
                    break
                if self._stop.is_set():
                    break
                if self._wake_r in r:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except OSError:
                        pass
                with self._cv:
                    want = self._sync_req
                got_all = self._read_available()
                with self._cv:
                    if got_all and want > pushed_sync:
                        self._inbox.append((_SYNC, want))
                        pushed_sync = want
                    self._cv.notify_all()
                if not got_all:                 # the inbox is full: let the applier catch up
                    with self._cv:
                        while len(self._inbox) >= self.max_backlog and not self._stop.is_set():
                            self._cv.wait(0.5)
        except Exception as e:                  # pragma: no cover - reported, then a resync
            self.stats.errors += 1
            self._event(f"error in the reader: {type(e).__name__}: {e}", logging.ERROR)
        finally:
            with self._cv:
                self._reader_done = True
                self._cv.notify_all()

    def _read_available(self) -> bool:
        """Move every queued datagram into the inbox; False when it stopped
        because the inbox is full."""
        while not self._stop.is_set():
            batch = []
            try:
                while len(batch) < 4096:
                    got = self._recv()
                    if got is None:
                        break
                    batch.append(got)
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                with self._cv:
                    # everything before is superseded by the resync it triggers
                    # (the syncs waited for come after it)
                    syncs = [it for it in self._inbox if it[0] is _SYNC]
                    self._inbox.clear()
                    self._inbox.append((_OVERRUN, None))
                    self._inbox.extend(syncs)
                    self._cv.notify_all()
                continue
            with self._cv:
                self._inbox.extend(batch)
                if batch:
                    self._cv.notify_all()
                full = len(self._inbox) >= self.max_backlog
            if full:
                return False
            if len(batch) < 4096:
                return True
        return True

    def _run(self):
        """The applier."""
        while not self._stop.is_set():
            items = []
            with self._cv:
                while not self._inbox and not self._stop.is_set() and not self._reader_done \
                        and self._force_resync is None and not self._retry_due() \
                        and not self._proxy_due():
                    self._cv.wait(max(0.01, min(1.0, self._proxy_at - time.monotonic())))
                if self._stop.is_set() or (self._reader_done and not self._inbox):
                    break
                n = 0
                while self._inbox and n < self.max_burst:
                    it = self._inbox[0]
                    if it[0] is _SYNC or it[0] is _OVERRUN:
                        if items:
                            break
                        items.append(self._inbox.popleft())
                        break
                    items.append(self._inbox.popleft())
                    n += 1
                self._cv.notify_all()            # room in the inbox for the reader
            try:
                if self._force_resync is None and self._retry_due():
                    self._force_resync = self._retry_reason
                if self._force_resync is not None:
                    reason, self._force_resync = self._force_resync, None
                    self._resync(reason)
                if not items:
                    if self._proxy_due():
                        self._poll_proxies()
                    continue
                head = items[0][0]
                if head is _SYNC:
                    # what the kernel did before the sync: proxy entries too
                    self._poll_proxies()
                    with self._cv:
                        if items[0][1] > self._sync_done:
                            self._sync_done = items[0][1]
                        self._cv.notify_all()
                    continue
                if head is _OVERRUN:
                    self.stats.overruns += 1
                    self._event("netlink overrun (ENOBUFS): the kernel dropped messages; "
                                "full resync", logging.WARNING)
                    self._resync("netlink overrun (ENOBUFS)")
                    continue
                self._apply_items(items)
                if self._proxy_due() and not self._inbox:
                    self._poll_proxies()
            except Exception as e:      # never die silently: report, resync (retried)
                self.stats.errors += 1
                self._event(f"error: {type(e).__name__}: {e}", logging.ERROR)
                self._schedule_retry(f"after an error ({type(e).__name__})", soon=True)

    def _retry_due(self) -> bool:
        return self._retry_at is not None and time.monotonic() >= self._retry_at

    def _apply_items(self, items):
        msgs = []
        first_ts = None
        for data, ts in items:
            if first_ts is None:
                first_ts = ts if ts is not None else time.time()
            msgs.extend(_split(data))
        self.stats.messages += len(msgs)
        self.stats.last_burst = len(msgs)
        try:
            with self.lock:             # translated and applied against a state nobody else changes
                self._apply_burst(msgs)
        except _Resync as e:
            self._resync(e.reason)
        if first_ts is not None:
            lag = max(0.0, time.time() - first_ts)
            self.stats.last_lag = lag
            self.stats.max_lag = lag if self.stats.max_lag is None else max(lag, self.stats.max_lag)

    def _recv(self):
        """One datagram or None (nothing queued); ENOBUFS raised."""
        if self.recv_hook is not None:
            self.recv_hook()
        try:
            if self._tstamp:
                data, anc, _fl, _a = self._sock.recvmsg(1 << 20, socket.CMSG_SPACE(16))
                ts = None
                for lvl, typ, val in anc:
                    if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS and len(val) >= 16:
                        sec, nsec = struct.unpack("=qq", val[:16])
                        ts = sec + nsec * 1e-9
                # netlink gives no timestamp on this kernel: the reader's
                # receive time (it reads as the messages come)
                return data, ts if ts is not None else time.time()
            return self._sock.recv(1 << 20), time.time()
        except BlockingIOError:
            return None

    # -- resync ---------------------------------------------------------------
    RETRY_S = 5.0

    def _schedule_retry(self, reason, soon=False):
        """A resync that could not be done (or an error): retried, the
        first time soon, then every RETRY_S seconds until one succeeds."""
        first = self._retry_at is None
        self._retry_reason = reason
        self._retry_at = time.monotonic() + (0.05 if soon and first else self.RETRY_S)

    def _resync(self, reason: str, initial: bool = False):
        try:
            snap = nl.read_snapshot(self.netns)
            state, text, notes = nl.state_from_snapshot(snap, self._hmac_keys)
        except nl.NotSupported as e:
            if initial:
                raise
            self.stats.errors += 1
            self.unsupported[e.obj] = str(e)
            self._event(f"resync ({reason}) failed: {e}; keeping the last configuration "
                        f"(diverged), retried every {self.RETRY_S:g} s", logging.ERROR)
            self._schedule_retry(reason)
            return
        except nl.KernelImportError as e:
            if initial:
                raise
            self.stats.errors += 1
            self._event(f"resync ({reason}) failed: {e}; retried every {self.RETRY_S:g} s",
                        logging.ERROR)
            self._schedule_retry(reason)
            return
        self._retry_at = None
        self._links = {m["index"]: m for m in snap.links}
        self._ifnames = {i: m.get_attr("IFLA_IFNAME") for i, m in self._links.items()}
        self._veth_wait = {}
        self._proxy_bad = set()
        self._replace(state)
        self.unsupported.clear()
        if initial:
            self.import_text = text
            self.import_notes = notes
            self._event(f"imported {self.netns or 'this namespace'}: {len(state.routes)} routes")
        else:
            self.stats.resyncs += 1
            self._event(f"resync ({reason}): re-imported {self.netns or 'this namespace'}, "
                        f"{len(state.routes)} routes", logging.WARNING)

    def _replace(self, state):
        """The target's configuration becomes ``state`` (a fresh import's)."""
        st = state.copy()
        st.routes = C.RouteTable(dict(state.routes))
        with self.lock:
            rep = getattr(self.target, "_replace_state", None)
            if rep is not None:                               # Router, Dataplane
                rep(st)
            else:
                raise FollowError(f"cannot replace the configuration of {type(self.target).__name__}")

    # -- applying -------------------------------------------------------------
    def _call_apply(self, lines):
        if self.on_apply is not None:
            try:
                self.on_apply(lines)
            except Exception:
                log.exception("on_apply callback failed")

    def _configure(self, lines):
        if not lines:
            return
        with self.lock:
            try:
                self.target.configure("\n".join(lines))
            except C.ConfigError as e:
                self.stats.errors += 1
                self._event(f"configure refused the translated lines ({e}); the follower is "
                            "out of step", logging.ERROR)
                raise _Resync(f"configure refused: {e}") from None
        self.stats.configures += 1
        self.stats.lines += len(lines)
        self._call_apply(lines)

    def _state(self):
        return self.target.state

    def _apply_burst(self, msgs):
        b = _Burst(self)
        for typ, flags, raw in msgs:
            kind = _KINDS.get(typ)
            if kind is None:
                if typ == NLMSG_OVERRUN:
                    raise _Resync("NLMSG_OVERRUN")
                continue
            if self._veth_wait and kind != "link" and not b.veths_checked:
                b.flush()
                self._resolve_veths()
                b.veths_checked = True
            try:
                if kind in ("link", "addr"):
                    b.flush()
                    msg = _decode(typ, raw)
                    if kind == "link":
                        self._link(typ, msg)
                    else:
                        self._addr(typ, msg)
                elif kind == "route":
                    b.route(typ, flags, raw)
                elif kind == "rule":
                    b.rule(typ, raw)
                else:
                    b.neigh(typ, _decode(typ, raw))
            except nl.NotSupported as e:
                if typ in _DEL:
                    if self.unsupported.pop(e.obj, None) is not None:
                        self._event(f"gone from the kernel: {e.obj} (was not supported)")
                    else:
                        self.stats.skipped += 1
                    continue
                self._left_out(e)
            if kind == "link":
                b.veths_checked = False
        b.flush()
        if self._veth_wait:
            self._resolve_veths()

    def _left_out(self, e):
        """An object fastpath does not model, announced: reported once, kept
        in ``unsupported`` until it goes."""
        if self.unsupported.get(e.obj) == str(e):
            self.stats.skipped += 1          # the same again (a link's state change)
            return
        self.stats.unsupported += 1
        self.unsupported[e.obj] = str(e)
        self._event(f"{e} (left out; the follower is diverged)", logging.WARNING)

    # proxy entries: the kernel announces none (neigh_add / neigh_delete with
    # NTF_PROXY change the pneigh table without a notification): polled
    PROXY_POLL_S = 1.0

    def _proxy_due(self) -> bool:
        return time.monotonic() >= self._proxy_at

    def _poll_proxies(self):
        """Dump the proxy entries and apply the difference from the target's
        (``ip neigh add|del proxy``); at every sync() and, while nothing else
        arrives, every PROXY_POLL_S seconds.  An entry on a device fastpath
        does not model is reported as left out until it goes."""
        self._proxy_at = time.monotonic() + self.PROXY_POLL_S
        msgs = nl.dump_proxies(self._qsock)
        with self.lock:
            st = self._state()
            want, bad = {}, {}
            for m in msgs:
                try:
                    line = nl.neigh_line(m, self._ifnames, self._links)
                except nl.NotSupported as e:
                    bad[e.obj] = e
                    continue
                key = (self._ifnames[m["ifindex"]], ipaddress.ip_address(m.get_attr("NDA_DST")))
                want[key] = (bool(m["flags"] & nl.NTF_ROUTER), line)
            lines = [f"ip -{a.version} neigh del proxy {a} dev {C._q(dev)}"
                     for (dev, a) in st.proxies if (dev, a) not in want]
            lines += [line for key, (router, line) in want.items() if st.proxies.get(key) != router]
            for obj in [o for o in self._proxy_bad if o not in bad]:
                if self.unsupported.pop(obj, None) is not None:
                    self._event(f"gone from the kernel: {obj} (was not supported)")
            for e in bad.values():
                self._left_out(e)
            self._proxy_bad = set(bad)
            try:
                self._configure(lines)
            except _Resync as e:
                self._resync(e.reason)

    # links and addresses: applied one by one (they change the automatic routes)
    def _link(self, typ, msg):
        L = nl._link_info(msg)
        idx, name = L["index"], L["name"]
        old = self._links.get(idx)
        if typ == RTM_DELLINK:
            self._veth_wait.pop(idx, None)
            if old is None and name not in self._state().interfaces:
                self._links.pop(idx, None)
                if self.unsupported:
                    # what went through it went silently (IPv4 routes): only
                    # a re-import tells which unsupported objects are left
                    raise _Resync(f"link {name}, which fastpath does not model, deleted")
                self.stats.skipped += 1
                return
            raise _Resync(f"link {name} deleted (fastpath's configuration cannot delete a device)")
        if old is not None and old.get_attr("IFLA_IFNAME") != name:
            raise _Resync(f"link {old.get_attr('IFLA_IFNAME')} renamed to {name}")
        st = self._state()
        itf = st.interfaces.get(name)
        if itf is None:
            # a device new to fastpath is named (for the routes, addresses
            # through it) only once it is created: one fastpath does not
            # model stays unknown, and what goes through it is reported too
            if L["kind"] == "veth" and L["netnsid"] is None:
                self._links[idx] = msg
                # the first end is announced before its peer exists: the pair
                # is created when the second end's RTM_NEWLINK names the first
                # (or, its peer being another namespace's after all, when
                # _resolve_veths asks the kernel)
                peer = self._links.get(L["link"]) if L["link"] else None
                if peer is None or peer is msg:
                    self._veth_wait[idx] = msg
                    return
                P = nl._link_info(peer)
                lo_, hi_ = sorted([L, P], key=lambda x: x["index"])
                self._veth_wait.pop(idx, None)
                self._veth_wait.pop(P["index"], None)
                self._configure([f"ip link add {C._q(hi_['name'])} type veth peer name "
                                 f"{C._q(lo_['name'])}", _settings_line(lo_), _settings_line(hi_)])
                self._ifnames[idx] = name
                self._ifnames[P["index"]] = P["name"]
                return
            # (a veth whose peer is in another namespace: a NIC, link_lines)
            self._veth_wait.pop(idx, None)
            lines = nl.link_lines(msg, {**self._links, idx: msg})
            self._links[idx] = msg
            self._ifnames[idx] = name
            self._configure(lines)
            return
        self._links[idx] = msg
        self._ifnames[idx] = name
        nl.link_lines(msg, self._links)           # NotSupported for what it cannot hold
        setting = _settings_line(L)
        mac = C._parse_mac(L["mac"]) if L["mac"] and name != "lo" else None
        want_mac = mac if mac is not None and any(mac) and not mac[0] & 1 else itf.mac
        lines = []
        if not (itf.up == L["up"] and itf.mtu == L["mtu"] and itf.mac == want_mac):
            lines.append(setting)
        # IFLA_MASTER: enslaved to a VRF or released (link_lines refused any
        # other master)
        master = self._ifnames.get(L["master"]) if L["master"] else None
        if itf.master != master:
            lines.append(f"ip link set dev {C._q(name)} "
                         + (f"master {C._q(master)}" if master else "nomaster"))
        if not lines:
            self.stats.skipped += 1
            return
        going_down = itf.up and not L["up"]
        self._configure(lines)
        if going_down:
            self._configure(self._flush_v4_down(name))

    def _resolve_veths(self):
        """The veths announced without a peer (``_veth_wait``): the first end
        of a pair (its peer's RTM_NEWLINK follows) or, created with ``ip link
        add A netns X type veth peer name B netns Y``, the end the kernel
        registered before it tied the pair (no RTM_NEWLINK says later that
        its peer is another namespace's).  Asked for now: one whose peer is
        elsewhere is an interface (a NIC, as import writes it)."""
        for idx in list(self._veth_wait):
            msg = nl.get_link(self._qsock, idx)
            if msg is None:                     # gone (its RTM_DELLINK follows)
                continue
            L = nl._link_info(msg)
            if L["kind"] != "veth" or L["netnsid"] is None:
                continue                        # its peer is here: its RTM_NEWLINK comes
            self._veth_wait.pop(idx, None)
            if L["name"] in self._state().interfaces:
                continue
            try:
                self._link(RTM_NEWLINK, msg)
            except nl.NotSupported as e:
                self._left_out(e)

    def _flush_v4_down(self, dev, force: bool = False) -> list:
        """fib_sync_down_dev + fib_flush: the IPv4 routes whose nexthops are
        all on ``dev`` go, without a notification: when it goes down those
        whose scope is not host, when its last IPv4 address goes
        (fib_disable_ip with force) all of them."""
        st = self._state()
        out = []
        for k in sorted(st.routes.device_keys(dev), key=lambda k: (k[1], str(k[2]), k[3])):
            r = st.routes.get(k)
            if r is None or r.family != 4 or r.proto == "kernel" or (r.scope == "host" and not force):
                continue
            if r.nexthops and all(nh.dev == dev for nh in r.nexthops):
                out.append(C._route_del_line(r))
        return out

    def _addr(self, typ, msg):
        fam = {2: 4, 10: 6}.get(msg["family"])
        dev = self._ifnames.get(msg["index"])
        st = self._state()
        a = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
        if fam is None or dev is None or a is None:
            what = f"address {a}/{msg['prefixlen']} dev ifindex {msg['index']}"
            if typ == RTM_DELADDR:
                if self.unsupported.pop(what, None) is None:
                    self.stats.skipped += 1
                return
            nl.addr_line(msg, self._ifnames)      # raises NotSupported naming it
            raise nl.NotSupported(what, "not a device fastpath models")
        ia = ipaddress.ip_interface(f"{a}/{msg['prefixlen']}")
        itf = st.interfaces.get(dev)
        have = itf is not None and ia in itf.addrs
        if typ == RTM_DELADDR:
            obj = f"address {ia} dev {dev}"
            if self.unsupported.pop(obj, None) is not None:
                return
            if not have:
                self.stats.skipped += 1
                return
            if fam == 4:
                same = [x for x in itf.addrs if x.version == 4 and x.network == ia.network]
                if same[0] == ia and len(same) > 1:
                    # a primary with secondaries: fastpath drops them with it
                    # (promote_secondaries 0), the kernel may promote one
                    raise _Resync(f"IPv4 primary address {ia} dev {dev} deleted with secondaries "
                                  "(net.ipv4.conf.*.promote_secondaries decides what stays)")
            self._configure([f"ip -{fam} addr del {ia} dev {C._q(dev)}"])
            itf = self._state().interfaces.get(dev)
            if fam == 4 and itf is not None and not any(x.version == 4 for x in itf.addrs):
                self._configure(self._flush_v4_down(dev, force=True))
            return
        line = nl.addr_line(msg, self._ifnames)
        if have:
            self.stats.skipped += 1
            return
        if itf is not None and fam == 6 and any(x.version == 6 and x.ip == ia.ip for x in itf.addrs):
            raise _Resync(f"address {ia.ip} dev {dev} changed its prefix length")
        self._configure([line])


def _settings_line(L) -> str:
    """``ip link set dev X mtu N [address M] up|down`` (as link_lines ends)."""
    settings = [f"mtu {L['mtu']}"]
    if L["mac"] and L["name"] != "lo":
        mac = C._parse_mac(L["mac"])
        if any(mac) and not mac[0] & 1:
            settings.append(f"address {C._mac_str(mac)}")
    settings.append("up" if L["up"] else "down")
    return f"ip link set dev {C._q(L['name'])} {' '.join(settings)}"


def _derived(st, k):
    """The automatic route a fresh configuration derives for key ``k``: the
    first device's (in creation order) that generates one."""
    for itf in st.interfaces.values():
        r = st._auto_for(itf).get(k)
        if r is not None:
            return r
    return None


class _Burst:
    """Routes, rules and neighbours of one burst, translated against the
    target's state plus what the burst has translated so far."""

    def __init__(self, f: KernelFollower):
        self.f = f
        self.lines: list = []
        self.routes: dict = {}          # key -> Route or None (deleted), this burst
        self.neighs: dict = {}
        self.proxies: dict = {}
        self.rules = None
        self.veths_checked = False

    def flush(self):
        if self.lines:
            lines, self.lines = self.lines, []
            self.routes, self.neighs, self.proxies, self.rules = {}, {}, {}, None
            self.f._configure(lines)

    def _route_now(self, st, k):
        if k in self.routes:
            return self.routes[k]
        return st.routes.get(k)

    def route(self, typ, flags, raw):
        f = self.f
        st = f._state()
        r = nl.route_from_msg(raw, f._ifnames)
        if r is None:                   # a cache clone
            f.stats.skipped += 1
            return
        k = r.key
        cur = self._route_now(st, k)
        def alt():
            return f"{nl._describe_route(r.family, r.prefix, r.table)} metric {r.metric}"
        if typ == RTM_NEWROUTE:
            if (cur is not None and cur != r and "kernel" not in (r.proto, cur.proto)
                    and flags & NLM_F_CREATE and not flags & (NLM_F_EXCL | NLM_F_REPLACE)
                    and (r.family == 4 or not {(nh.gw, nh.dev) for nh in cur.nexthops}
                         <= {(nh.gw, nh.dev) for nh in r.nexthops})):
                # ip route prepend/append onto an existing route, not as an
                # IPv6 ECMP sibling: the kernel now holds two (import refuses
                # them too)
                raise nl.NotSupported(alt(), "a second route with the same table, prefix and metric "
                                      "(IPv4 alternative routes, IPv6 non-ECMP duplicates)")
            if cur == r or (r.proto == "kernel" and cur is not None and cur.proto == "kernel"
                            and r != _derived(st, k)):
                # fastpath holds it (derived it), or the kernel's per-device
                # duplicate of an automatic route fastpath keeps once (the
                # one a fresh configuration derives: its first device's)
                f.stats.skipped += 1
                return
            if f.unsupported:
                f.unsupported.pop(nl._describe_route(r.family, r.prefix, r.table), None)
            if r.family == 6 and cur is not None and len(r.nexthops) > 1:
                # an IPv6 sibling appended: the notification lists the new
                # nexthop first, a dump (and the kernel's order) after the others
                have = [(nh.gw, nh.dev) for nh in cur.nexthops]
                by = {(nh.gw, nh.dev): nh for nh in r.nexthops}
                if set(have) < set(by):
                    nhs = tuple(by[h] for h in have) + tuple(
                        nh for nh in r.nexthops if (nh.gw, nh.dev) not in set(have))
                    r = replace(r, nexthops=nhs)
            self.lines.append(C._route_add_line(r).replace(" route add ", " route replace ", 1))
            self.routes[k] = r
            return
        # RTM_DELROUTE
        if f.unsupported and alt() in f.unsupported:
            raise _Resync(f"one of the alternative routes {alt()} deleted")
        if cur is None:
            f.stats.skipped += 1
            return
        if r.proto == "kernel" and cur != r:
            f.stats.skipped += 1                 # another device's duplicate
            return
        gone = {(nh.gw, nh.dev) for nh in r.nexthops}
        mine = [(nh.gw, nh.dev) for nh in cur.nexthops]
        if r.family == 6 and len(mine) > 1 and gone and gone < set(mine):
            left = tuple(nh for nh in cur.nexthops if (nh.gw, nh.dev) not in gone)
            if len(left) == 1:
                left = (replace(left[0], weight=1),)
            new = replace(cur, nexthops=left)
            self.lines.append(C._route_add_line(new).replace(" route add ", " route replace ", 1))
            self.routes[k] = new
            return
        self.lines.append(C._route_del_line(cur))
        self.routes[k] = None

    def _rules(self, st, fam):
        if self.rules is None:
            self.rules = {f: list(v) for f, v in st.rules.items()}
        return self.rules.setdefault(fam, [])

    def rule(self, typ, raw):
        f = self.f
        if raw[16] in (RTNL_FAMILY_IPMR, RTNL_FAMILY_IP6MR):
            # the multicast routing tables' rules (a VRF adds l3mdev ones for
            # them too) come on the same groups; import reads IPv4 and IPv6
            # rules only, and fastpath has no multicast routing
            f.stats.skipped += 1
            return
        st = f._state()
        r = nl.rule_from_msg(raw, f._ifnames)
        have = self._rules(st, r.family)
        if typ == RTM_NEWRULE:
            if r in have:
                f.stats.skipped += 1
                return
            have.append(r)
            self.lines.append(C._rule_line(r, "add"))
            return
        if r not in have:
            f.stats.skipped += 1
            return
        have.remove(r)
        self.lines.append(C._rule_line(r, "del"))

    def proxy(self, typ, msg):
        """An RTM_NEWNEIGH / RTM_DELNEIGH of a proxy entry (NTF_PROXY).  The
        kernels seen (6.12, 6.18) send none (the follower polls them); one
        that does is followed here."""
        f = self.f
        dst = msg.get_attr("NDA_DST")
        dev = f._ifnames.get(msg["ifindex"])
        if typ == RTM_NEWNEIGH:
            line = nl.neigh_line(msg, f._ifnames, f._links)     # NotSupported: unknown device
        elif dev is None or dst is None:
            f.unsupported.pop(f"proxy neighbour {dst} dev ifindex {msg['ifindex']}", None)
            f.stats.skipped += 1
            return
        a = ipaddress.ip_address(dst)
        key = (dev, a)
        cur = self.proxies[key] if key in self.proxies else f._state().proxies.get(key)
        if typ == RTM_NEWNEIGH:
            router = bool(msg["flags"] & nl.NTF_ROUTER)
            if cur == router:
                f.stats.skipped += 1
                return
            self.lines.append(line)
            self.proxies[key] = router
            return
        if cur is None:
            f.stats.skipped += 1
            return
        self.lines.append(f"ip -{a.version} neigh del proxy {a} dev {C._q(dev)}")
        self.proxies[key] = None

    def neigh(self, typ, msg):
        f = self.f
        if msg["flags"] & nl.NTF_PROXY:
            return self.proxy(typ, msg)
        st = f._state()
        fam = {2: 4, 10: 6}.get(msg["family"])
        dev = f._ifnames.get(msg["ifindex"])
        dst = msg.get_attr("NDA_DST")
        if dev is None and dst is not None and typ == RTM_NEWNEIGH and \
                nl.neigh_line(msg, {msg["ifindex"]: "?"}, f._links) is not None:
            raise nl.NotSupported(f"neighbour {dst} dev ifindex {msg['ifindex']}",
                                  "not a device fastpath models")
        if fam is None or dev is None or dst is None:
            f.unsupported.pop(f"neighbour {dst} dev ifindex {msg['ifindex']}", None)
            f.stats.skipped += 1
            return
        a = ipaddress.ip_address(dst)
        key = (dev, a)
        cur = self.neighs[key] if key in self.neighs else st.neighbours.get(key)
        line = nl.neigh_line(msg, f._ifnames, f._links) if typ == RTM_NEWNEIGH else None
        if line is None:                # deleted, or no longer configuration
            if cur is None:
                f.stats.skipped += 1
                return
            self.lines.append(f"ip -{fam} neigh del {a} dev {C._q(dev)}")
            self.neighs[key] = None
            return
        mac = C._parse_mac(msg.get_attr("NDA_LLADDR"))
        if cur == mac:
            f.stats.skipped += 1
            return
        self.lines.append(line.replace(" neigh add ", " neigh replace ", 1))
        self.neighs[key] = mac


def follow(target, netns=None, **kw) -> KernelFollower:
    """``KernelFollower(target, netns, **kw)``, started."""
    return KernelFollower(target, netns, **kw)

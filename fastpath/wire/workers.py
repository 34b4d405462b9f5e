"""``fastpath.run --workers N``: one interface spread over N worker
processes with PACKET_FANOUT (AF_PACKET), or by RX queue (AF_XDP: see
"AF_XDP" below).

    control process (Supervisor)                 worker w (python -m fastpath.wire.workers)
    -------------------------------              -----------------------------------------
    nftables ingress drop (as one process)       per device: a TPACKET_V3 ring joined to the
    per device: a ring whose cBPF filter             device's fanout group (PACKET_FANOUT_HASH)
        takes ARP and ICMPv6 ND only             a Router compiled from the same configuration
    the neighbour subsystem (wire.neigh)         the loop of wire.live: rx, Router.process, tx,
    configuration, SIGHUP, counters                  echo replies; ARP/ND frames ignored
    restarts a worker that dies                  unresolved nexthops -> the control process

Why PACKET_FANOUT_HASH: a flow's packets go to one worker, so a flow is
never reordered (the kernel's skb flow hash, the same 5-tuple hash RPS
uses).  PACKET_FANOUT_CPU spreads by the CPU that received the frame: on a
veth that is the sender's CPU, so one sending host would feed one worker;
PACKET_FANOUT_QM by the RX queue: a veth has one.  LB (round robin)
reorders flows.

Why one process owns ARP/ND: the fanout hash gives an ARP request or an NS
to whichever worker its hash picks, and the state machine (probes, timers,
queued packets) must be one.  The control process has its own socket per
device, outside the fanout group, with a cBPF filter (SO_ATTACH_FILTER
before bind) that admits only ARP and ICMPv6 types 133-137; a packet tap
gets every frame, so it sees them beside the workers, which drop their
copies.  The control process answers, resolves and queues exactly as a
single-process run; what it learns goes to the workers as the same
``ip neigh replace/del`` lines (one message per change set), with the set
of STALE entries, so that a worker that forwards to a stale neighbour
reports the use (the stale -> delay transition); a worker's packet to an
unresolved nexthop (destination MAC left zero by the datapath) is sent to
the control process, which queues it and sends it on resolution.

The tables are one copy, in shared memory: the control process holds a
``fastpath.Dataplane(..., external=True)`` compiled from the
configuration, and each worker attaches to one of its slots
(``AttachedTables``) and reads the LPMs, route entries, nexthop rows and
seg6local records the control process updates in place, RCU style, with
the Dataplane's QSBR (a worker reports a quiescent state before every
batch and is offline while it sleeps in poll).  A learned neighbour is one
``Dataplane.configure`` in the control process, published to every worker
at once; a SIGHUP replaces the state the same way.  A worker keeps only
the configuration without its routes (devices, addresses, neighbours,
sysctls: for its echo replies and its links), sent with its init message.

A worker that dies (SIGKILL, a crash): the control process sees its
connection close, reaps it, says so in one line on stderr and starts a new
one in its place (its socket joins the groups again; meanwhile the kernel
spreads the group over the remaining members); after 5 deaths in 60 s it
stops with one line and exit status 1.  Nothing a worker owns outlives it:
its sockets close with it, the nftables table and the shared tables are
the control process's (a SIGKILLed control process's segments are removed
by the next run).  What it had counted is kept as of its last
report (the control process asks every worker once a second).  When the
control process goes away (even by SIGKILL) the workers see their
connection close and exit.

AF_XDP (``--backend af_xdp``): an AF_XDP socket is bound to one RX queue,
so the spreading is the device's own: queue q belongs to worker q mod N
(a device needs at least N queues: a veth made with ``numrxqueues``, its
peer with as many TX queues, spreads by the sender's flow hash).  libxdp's
default program is loaded once per device, by the first worker's socket,
and shared by the others (it redirects each queue to the socket in its
map); it is detached when the last socket closes, and by the control
process at exit if a killed worker left it.  XDP takes ARP and ND away from
the control process's sockets too, so a worker hands those frames over
(one message per batch); the control process still transmits from its
AF_PACKET sockets and keeps the nftables drop, which catches the frames XDP
passes to the stack while a queue has no socket (a worker being restarted).
"""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection

from ..config import ConfigError
from ..dataplane import worker_env
from .live import RX_BLOCK_NR, RX_BLOCK_SIZE, Live, LiveError, io_module

RESTART_LIMIT, RESTART_WINDOW = 5, 60.0
COUNTERS_EVERY = 1.0


class _RemoteNeigh:
    """A worker's stand-in for wire.neigh.Neighbours: the control process
    holds the real one."""

    def __init__(self, conn):
        self.conn = conn
        self.entries, self.static, self.stale, self.timed = {}, {}, set(), set()
        self.local4, self.forwarding = set(), True
        self.counters = {"neigh_failed": 0, "neigh_queuefull": 0}
        self.stale_set = set()

    # what the loop asks
    def next_timer(self):
        return None

    def tick(self):
        pass

    def input(self, *a):
        pass

    def stale_keys(self):
        return list(self.stale_set)

    def used(self, ifindex, family, addr):
        key = (ifindex, family, addr)
        if key in self.stale_set:
            self.stale_set.discard(key)          # once: the control process answers
            _send(self.conn, ("used", ifindex, family, addr))

    def frames(self, frames):
        """af_xdp: ARP/ND frames XDP redirected to this worker's sockets,
        [(iif, frame)], for the control process's neighbour subsystem."""
        _send(self.conn, ("ctrl", [(i, bytes(f)) for i, f in frames]))

    def resolve(self, ifindex, family, addr, frames):
        _send(self.conn, ("unres", ifindex, family, addr, [bytes(f) for f in frames]))

    def take_changes(self):
        return []          # the control process's lines arrive as messages (_apply_neigh)

    def dump(self):
        return []


def _small_state(state):
    """The configuration without its routes: what a worker attached to the
    shared tables keeps (and what its init and reload messages carry)."""
    from ..config import RouteTable
    small = state.copy()
    small.routes = RouteTable({})
    return small


def _reload_shared(live, state):
    """A worker attached to the shared tables: the control process's new
    configuration (routes left out); its tables are already published."""
    live.router.state = state
    live._addresses_from(state)
    live.reloads += 1


def _apply_neigh(live, lines):
    """The control process's ``ip neigh`` lines into this worker's Router
    (one configure; a ``del`` of an entry this Router never had is
    skipped, as Live._push_neighbours does)."""
    if not lines:
        return
    try:
        live.router.configure("\n".join(lines) + "\n")
    except ConfigError:
        for line in lines:
            try:
                live.router.configure(line + "\n")
            except ConfigError:
                pass
    live.neigh_configures += 1


def _send(conn, msg):
    try:
        conn.send(msg)
    except (OSError, EOFError, BrokenPipeError):
        pass


# ---------------------------------------------------------------------------
# the worker
# ---------------------------------------------------------------------------

def worker_main(fd: int) -> int:
    conn = Connection(fd)
    stop = {"now": False}
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the control process stops us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def on_term(_s, _f):
        stop["now"] = True
    signal.signal(signal.SIGTERM, on_term)
    try:
        init = conn.recv()
    except (EOFError, OSError):
        return 1
    cfg = init[1]
    if cfg.get("cpu") is not None:
        try:
            os.sched_setaffinity(0, {cfg["cpu"]})
        except OSError:
            pass
    ring = {"block_nr": cfg["block_nr"]} if cfg.get("block_nr") else {}
    shared = (cfg["attach"], cfg["slot"], cfg["state"]) if cfg.get("attach") else None
    xdp = {"backend": "af_xdp", "xdp_mode": cfg["xdp_mode"],
           "queues": cfg["queues"]} if cfg.get("backend") == "af_xdp" else {}
    host_stack = {"host_stack": True, "host_fds": cfg["host_fds"]} if cfg.get("host_fds") else {}
    live = Live(cfg["config"], cfg["names"], batch_size=cfg["batch"],
                qdisc_bypass=cfg["qdisc_bypass"], role="worker", fanout=cfg["groups"],
                shared=shared, **ring, **xdp, **host_stack)
    try:
        try:
            live.open()
        except LiveError as e:
            _send(conn, ("error", str(e)))
            return 2
        nb = _RemoteNeigh(conn)
        live.neigh = nb
        live.extra_fds = [conn.fileno()]
        _send(conn, ("ready", os.getpid()))
        # own tables: a reload compiles in Live's reload thread while this
        # loop goes on forwarding with the running Router; the neighbour
        # lines arriving meanwhile (the control process sends the full set
        # right after a reload) wait for the swap, and a reload arriving
        # while one compiles waits for it (the newest only)
        held_neigh, next_reload = [], None
        while not stop["now"]:
            try:
                live.step(50)
            except LiveError as e:
                # an interface went away: the control process stops (no restart)
                _send(conn, ("fatal", str(e)))
                return 1
            if live.reloading():
                try:
                    done = live.reload_poll()
                except LiveError as e:
                    done = str(e)
                if done:
                    live.neigh = nb
                    _send(conn, ("reloaded", None if done is True else done))
                    for lines in held_neigh:
                        _apply_neigh(live, lines)
                    held_neigh = []
                    if next_reload is not None:
                        live.reload_start(next_reload)
                        next_reload = None
            while conn.poll(0):
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    return 0                              # the control process is gone
                cmd = msg[0]
                if cmd == "neigh":
                    if shared is None and live.reloading():
                        held_neigh.append(msg[1])
                    elif shared is None:
                        _apply_neigh(live, msg[1])
                    nb.stale_set = set(msg[2])
                elif cmd == "stale":
                    nb.stale_set = set(msg[1])
                elif cmd == "reload":
                    if shared is not None:
                        _reload_shared(live, msg[1])
                        _send(conn, ("reloaded", None))
                    elif live.reloading():
                        next_reload = msg[1]
                    else:
                        live.reload_start(msg[1])
                elif cmd == "counters":
                    _send(conn, ("counters", msg[1], live.counters()))
                elif cmd == "stop":
                    _send(conn, ("counters", msg[1], live.counters()))
                    return 0
        return 0
    except (EOFError, OSError, BrokenPipeError):
        return 0
    finally:
        live.close()


# ---------------------------------------------------------------------------
# the control process
# ---------------------------------------------------------------------------

class _ControlTables:
    """The control process's Router calls (its neighbour subsystem's and
    proxy's: the state, ``fib_lookup``, ``configure``), over the Dataplane
    the workers read: the one copy of the tables.  It processes no data
    packets (its sockets take ARP/ND only), so its counters are empty."""

    def __init__(self, dataplane):
        self.dataplane = dataplane

    @property
    def state(self):
        return self.dataplane.state

    @property
    def _tables(self):
        return self.dataplane._tables

    from ..router import Router as _R
    fib_lookup = _R.fib_lookup
    del _R

    def configure(self, text):
        self.dataplane.configure(text)
        return self

    def counters(self):
        return {"reasons": {}, "routes": {}}


def _max_routes(n):
    """The shared route entries for a table of ``n`` routes: room to grow
    to twice as many (at least 65536, at most 2**23)."""
    return min(1 << 23, max(1 << 16, 1 << (2 * n).bit_length()))


class _W:
    def __init__(self, index, popen, conn):
        self.index, self.popen, self.conn = index, popen, conn
        self.pid = popen.pid
        self.counters = None


class Supervisor(Live):
    """``Live`` for ``--workers N``: the control role (ARP/ND, the
    nftables table, configuration) and N worker processes (see the module
    docstring).  The same calls as Live: open/close (``with``), step,
    counters, neighbours, reload."""

    def __init__(self, config, interfaces=None, *, workers=2, cpus=None, shared_tables=True,
                 **kw):
        """``shared_tables``: the workers read one copy of the tables, the
        control process's Dataplane (the default); False: each compiles
        its own Router from the configuration text (the way before, kept
        to compare with)."""
        # (af_xdp too: the workers bind their share of the RX queues, the
        # module docstring's "AF_XDP")
        # the control process's sockets see only ARP/ND: a small ring; the
        # workers' rings are Live's (block_nr, when given, is theirs)
        self._worker_blocks = kw.pop("block_nr", None)
        kw["block_nr"] = 4
        self._worker_batch = kw.pop("batch_size", 256)
        super().__init__(config, interfaces, role="control", **kw)
        self.nworkers = workers
        self.queues = {}                  # af_xdp: worker -> {device: [queues]}
        avail = sorted(os.sched_getaffinity(0))
        self.cpus = cpus if cpus is not None else (
            [avail[w] for w in range(workers)] if workers <= len(avail) else [None] * workers)
        self.workers: list = []
        self.deaths: list = []            # (time, index, pid, how)
        self.restarts = 0
        self.groups = {}
        self._retired = []                # counters of workers that died
        self._stale_sent = frozenset()
        self._seq = 0
        self._next_poll = 0.0
        self.shared_tables = bool(shared_tables)
        self.dataplane = None
        # own tables: the workers a reload was sent to that have not yet
        # answered "reloaded" (each compiles it in its own reload thread);
        # the reload is done, for reload_poll and fastpath.run's line, once
        # none is left
        self._acks = None

    # -- workers -----------------------------------------------------------
    def _compile(self, st):
        """Shared tables: the configuration compiled once, into the
        Dataplane the workers attach to; the control process's Router calls
        are the Dataplane's (one copy of the tables in all)."""
        if not self.shared_tables:
            return super()._compile(st)
        from ..dataplane import Dataplane, DataplaneError, sweep_stale_segments
        sweep_stale_segments()
        try:
            self.dataplane = Dataplane(st, workers=self.nworkers, mode=self.mode, pin=False,
                                       oversubscribe=True, external=True,
                                       alive=self._slot_alive,
                                       max_routes=_max_routes(len(st.routes)))
        except DataplaneError as e:
            raise LiveError(f"shared tables: {e}") from None
        except ValueError as e:
            raise LiveError(f"configuration: {e}") from None
        return _ControlTables(self.dataplane)

    def _recompile(self, st):
        """Shared tables: the reloaded State compiled once into them, against
        the installed entries, and published to every worker (all or
        nothing: on an error the running configuration stays)."""
        if self.dataplane is None:
            return super()._recompile(st)
        try:
            self.dataplane._replace_state(st)
        except (ConfigError, ValueError) as e:
            # e.g. more routes than the shared entries were sized for at start
            raise LiveError(f"reload: {e} (the shared tables keep their size until a "
                            "restart)") from None
        return _ControlTables(self.dataplane)

    def _open(self):
        super()._open()
        if self.backend == "af_xdp":
            self._assign_queues()
        used = set()
        for n in self.names:
            g = secrets.randbelow(65535) + 1
            while g in used:
                g = secrets.randbelow(65535) + 1
            used.add(g)
            self.groups[n] = g
        self.workers = [None] * self.nworkers
        # af_xdp: one at a time (two processes whose first sockets load
        # libxdp's program on the same device at once race, and the loser's
        # bind fails with EBUSY: seen with --worker-tables own); else all
        # started, then awaited
        serial = self.backend == "af_xdp"
        for w in range(self.nworkers):
            self._spawn(w)
            if serial:
                self._await_ready(self.workers[w])
        if not serial:
            for w in range(self.nworkers):
                self._await_ready(self.workers[w])
        self._broadcast_neigh(full=True)

    def _assign_queues(self):
        """af_xdp: RX queue q of each device to worker q mod N; a device
        with fewer queues than workers is refused (a worker without a
        queue there would get none of its traffic)."""
        xdp = io_module("af_xdp")
        nqs = {n: xdp.rx_queues(n) for n in self.names}
        for n, nq in nqs.items():
            if nq < self.nworkers:
                raise LiveError(
                    f"--workers {self.nworkers} with --backend af_xdp: {n} has {nq} RX "
                    f"queue{'s' if nq != 1 else ''} (one AF_XDP socket per queue, each "
                    f"owned by one worker; a veth: ip link add ... numrxqueues "
                    f"{self.nworkers} type veth peer ... numtxqueues {self.nworkers})")
        self.queues = {w: {n: list(range(w, nq, self.nworkers)) for n, nq in nqs.items()}
                       for w in range(self.nworkers)}

    def _spawn(self, w):
        parent, child = socket.socketpair()
        # (--host-stack: the TAPs' descriptors, which the workers write into)
        taps = self.host.fds() if self.host is not None else {}
        p = subprocess.Popen([sys.executable, "-m", "fastpath.wire.workers", str(child.fileno())],
                             pass_fds=(child.fileno(), *taps.values()),
                             stdin=subprocess.DEVNULL, env=worker_env())
        child.close()
        conn = Connection(parent.detach())
        wk = _W(w, p, conn)
        self.workers[w] = wk
        init = {"config": self.config, "names": self.names, "groups": self.groups,
                "batch": self._worker_batch, "qdisc_bypass": self.qdisc_bypass,
                "block_nr": self._worker_blocks, "cpu": self.cpus[w]}
        if self.backend == "af_xdp":
            init.update(backend="af_xdp", xdp_mode=self.xdp_mode, queues=self.queues[w])
        if taps:
            init.update(host_fds=taps)
        if self.dataplane is not None:
            init.update(attach=self.dataplane.attach_args(), slot=w,
                        state=_small_state(self.router.state))
        conn.send(("init", init))
        return wk

    def _slot_alive(self, w):
        wk = self.workers[w] if w < len(self.workers) else None
        return wk is not None and wk.popen.poll() is None

    def _await_ready(self, wk):
        """Wait for the worker's first word for as long as it lives: a worker
        starts slowly under emulation or on a loaded machine (Python, numpy,
        the configuration's compile), and no fixed time tells a slow start
        from a hung one; one that exits is reported with its status, and a
        user stops a hung start with Ctrl-C."""
        while not wk.conn.poll(1.0):
            if wk.popen.poll() is not None and not wk.conn.poll(0):
                raise LiveError(f"worker {wk.index} exited while starting "
                                f"(status {wk.popen.returncode})")
        try:
            msg = wk.conn.recv()
        except (EOFError, OSError):
            raise LiveError(f"worker {wk.index} exited while starting "
                            f"(status {wk.popen.wait()})") from None
        if msg[0] == "error":
            raise LiveError(msg[1])
        if msg[0] != "ready":
            raise LiveError(f"worker {wk.index}: unexpected {msg[0]!r}")

    def _died(self, wk):
        rc = wk.popen.wait()
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        now = time.monotonic()
        self.deaths.append((now, wk.index, wk.pid, how))
        if wk.counters:
            self._retired.append(wk.counters)
        try:
            wk.conn.close()
        except OSError:
            pass
        if self.dataplane is not None:
            self.dataplane.slot_offline(wk.index)      # grace periods stop waiting for it
        recent = [d for d in self.deaths if now - d[0] < RESTART_WINDOW]
        if len(recent) > RESTART_LIMIT:
            self.workers[wk.index] = None
            raise LiveError(f"worker {wk.index} (pid {wk.pid}) died ({how}); "
                            f"{len(recent)} deaths in {RESTART_WINDOW:.0f} s, stopping")
        nw = self._spawn(wk.index)
        self._await_ready(nw)
        self.restarts += 1
        self._broadcast_neigh(full=True, only=nw)
        print(f"fastpath.run: worker {wk.index} (pid {wk.pid}) died ({how}); "
              f"restarted as pid {nw.pid}", file=sys.stderr, flush=True)

    def _live_workers(self):
        return [w for w in self.workers if w is not None]

    # -- neighbours to the workers ------------------------------------------
    def _learned_lines(self):
        out = []
        for (ifindex, fam, addr), e in self.neigh.entries.items():
            if e.state in ("reachable", "stale", "delay", "probe") and e.mac is not None \
                    and (ifindex, fam, addr) not in self.neigh.static:
                import ipaddress
                a = ipaddress.ip_address(addr)
                out.append(f"ip -{fam} neigh replace {a} lladdr "
                           f"{':'.join(f'{x:02x}' for x in e.mac)} dev {self.links[ifindex].name}")
        return out

    def _broadcast_neigh(self, full=False, only=None, lines=None):
        stale = frozenset(self.neigh.stale_keys())
        if full:
            lines = self._learned_lines()
        msg = ("neigh", list(lines or []), list(stale))
        for wk in ([only] if only else self._live_workers()):
            _send(wk.conn, msg)
        if only is None:
            self._stale_sent = stale

    def _neigh_pushed(self, lines):
        if self.dataplane is not None:
            # (already published: self.router is the Dataplane's); the
            # workers get the STALE set
            self._broadcast_neigh(lines=[])
        else:
            self._broadcast_neigh(lines=lines)

    # -- the loop -------------------------------------------------------------
    def step(self, poll_ms=50):
        nb = self.neigh
        t = nb.next_timer()
        wait = poll_ms
        if t is not None:
            wait = max(0, min(poll_ms, int((t - time.monotonic()) * 1000) + 1))
        conns = {wk.conn.fileno(): wk for wk in self._live_workers()}
        self._io.poll(self.sockets, wait, list(conns) + self._host_readable)
        b = self.batch
        n = 0
        for s in self.sockets:
            n += s.rx(b, n)
        if n:
            self._batch(b[:n] if n < len(b) else b)
        if self._host_readable:
            self.host.pump(self._send_one)
        for wk in list(conns.values()):
            self._drain(wk)
        if nb.next_timer() is not None:
            nb.tick()
        self._push_neighbours()
        now = time.monotonic()
        if now >= self._next_poll:
            # each worker's counters, once a second, answered in _drain: what
            # a worker that dies had counted is kept up to that second
            self._next_poll = now + COUNTERS_EVERY
            self._seq += 1
            for wk in self._live_workers():
                _send(wk.conn, ("counters", self._seq))
        stale = frozenset(nb.stale_keys())
        if stale != self._stale_sent:
            for wk in self._live_workers():
                _send(wk.conn, ("stale", list(stale)))
            self._stale_sent = stale
        self.iterations += 1
        return n

    def _drain(self, wk, want=None):
        """Handle what worker ``wk`` sent; returns its counters reply with
        sequence ``want`` if one came."""
        got = None
        while True:
            try:
                if not wk.conn.poll(0):
                    return got
                msg = wk.conn.recv()
            except (EOFError, OSError):
                if self.workers[wk.index] is wk:
                    self._died(wk)
                return got
            cmd = msg[0]
            if cmd == "fatal":
                raise LiveError(msg[1])
            if cmd == "unres":
                _, oif, fam, addr, frames = msg
                if oif in self._sock_of:
                    self.neigh.resolve(oif, fam, addr, frames)
                else:
                    self.wire["no_tx_device"] += len(frames)
            elif cmd == "ctrl":
                for iif, frame in msg[1]:
                    if iif in self._sock_of:
                        self.neigh.input(iif, frame)
            elif cmd == "used":
                self.neigh.used(msg[1], msg[2], msg[3])
            elif cmd == "counters":
                wk.counters = msg[2]
                if msg[1] == want:
                    got = msg[2]
            elif cmd == "reloaded":
                if self._acks is not None:
                    self._acks.discard(wk)
                if msg[1]:
                    print(f"fastpath.run: worker {wk.index} refused the reload: {msg[1]}",
                          file=sys.stderr, flush=True)

    def _collect(self, cmd="counters", timeout=5.0):
        self._seq += 1
        seq = self._seq
        pending = {}
        for wk in self._live_workers():
            _send(wk.conn, (cmd, seq))
            pending[wk.index] = wk
        end = time.monotonic() + timeout
        while pending and time.monotonic() < end:
            for i, wk in list(pending.items()):
                if self.workers[i] is not wk:        # died (and was replaced)
                    del pending[i]
                    continue
                if self._drain(wk, want=seq) is not None:
                    del pending[i]
            if pending:
                from multiprocessing.connection import wait
                wait([wk.conn for wk in pending.values()], 0.05)

    def _reload_commit(self, *done):
        super()._reload_commit(*done)   # (after _recompile, which raised if refused)
        if self.dataplane is not None:
            small = _small_state(self.router.state)   # the tables are published already
            for wk in self._live_workers():
                _send(wk.conn, ("reload", small))
            self._broadcast_neigh(lines=[])
            return
        for wk in self._live_workers():
            _send(wk.conn, ("reload", self.config))
        self._broadcast_neigh(full=True)
        self._acks = set(self._live_workers())

    def reloading(self) -> bool:
        return super().reloading() or self._acks is not None

    def reload_poll(self) -> bool:
        """Live's, and with own tables done only once every worker has
        swapped the new configuration in (a worker replaced meanwhile
        starts from it)."""
        if super().reloading():
            if not super().reload_poll():
                return False
            if self._acks is None:
                return True                 # (shared tables: published already)
        elif self._acks is None:
            return False
        self._acks &= set(self._live_workers())
        if self._acks:
            return False
        self._acks = None
        return True

    def reload(self, config) -> None:
        """Live's, waiting (own tables) for the workers to swap it in (at
        most 60 s: then reload_poll says when)."""
        super().reload(config)
        end = time.monotonic() + 60
        while self._acks is not None and time.monotonic() < end:
            self.step(20)
            if self.reload_poll():
                break

    def configure(self, text):
        """Lines applied as a delta (all or nothing, ConfigError): with the
        shared tables, published to every worker at once (and the workers
        told the new devices' addresses); else to this process only."""
        super().configure(text)
        if self.dataplane is not None:
            small = _small_state(self.router.state)
            for wk in self._live_workers():
                _send(wk.conn, ("reload", small))
        return self

    def close(self):
        for wk in self._live_workers():
            if wk.popen.poll() is None:
                _send(wk.conn, ("stop", -1))
        end = time.monotonic() + 5
        for wk in self._live_workers():
            try:
                if wk.conn.poll(max(0.0, end - time.monotonic())):
                    while True:
                        msg = wk.conn.recv()
                        if msg[0] == "counters":
                            wk.counters = msg[2]
                            break
            except Exception:
                # gone, or a message cut by a signal: it is stopped below anyway
                pass
            try:
                wk.popen.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                wk.popen.kill()
                wk.popen.wait()
            try:
                wk.conn.close()
            except OSError:
                pass
        self._final = [wk.counters for wk in self._live_workers() if wk.counters]
        self.workers = [None] * len(self.workers)
        if self.dataplane is not None:
            self.dataplane.close()                    # its segments unlinked
            self.dataplane = None
        if self.backend == "af_xdp" and getattr(self, "sysinfo", None):
            # every worker gone: libxdp detached the program with the last
            # socket, unless a worker was killed or it was a killed run's
            # leftover taken over; only libxdp's default program is touched
            xdp = io_module("af_xdp")
            for n in self.names or ():
                if n in self.sysinfo:
                    xdp.detach_leftover(self.sysinfo[n]["ifindex"])
        super().close()

    # -- counters -------------------------------------------------------------
    def rx_ring(self):
        """Each worker's RX ring (the control process's own is 4 blocks);
        None for af_xdp."""
        if self.backend != "af_packet":
            return None
        nr = self._worker_blocks or RX_BLOCK_NR
        return {"block_size": RX_BLOCK_SIZE, "block_nr": nr, "bytes": RX_BLOCK_SIZE * nr}

    def xdp_modes(self) -> dict:
        """af_xdp: the workers' (where the program runs, how the sockets
        are bound), as Live's."""
        return self.counters().get("xdp_modes", {})

    def counters(self) -> dict:
        if self._live_workers():
            self._collect()
            per = [wk.counters for wk in self._live_workers() if wk.counters]
        else:
            per = getattr(self, "_final", [])
        mine = super().counters()
        allc = per + self._retired
        out = {"backend": self.backend, "workers": len(self.workers),
               "worker_tables": "shared" if self.shared_tables else "own",
               "rx_ring": self.rx_ring(),
               "restarts": self.restarts,
               "worker_rx": [sum(i["rx"] for i in c["interfaces"].values()) for c in per],
               "retired_rx": sum(sum(i["rx"] for i in c["interfaces"].values())
                                 for c in self._retired),
               "interfaces": {}, "verdicts": dict.fromkeys(mine["verdicts"], 0), "reasons": {},
               "wire": dict(mine["wire"]), "neighbour": mine["neighbour"],
               "neighbours": mine["neighbours"], "neigh_configures": mine["neigh_configures"],
               "reloads": mine["reloads"], "echo_replies": 0,
               "neigh_configure_ms": mine["neigh_configure_ms"],
               "control_rx": sum(i["rx"] for i in mine["interfaces"].values())}
        for c in allc:
            for name, i in c["interfaces"].items():
                d = out["interfaces"].setdefault(name, dict.fromkeys(i, 0))
                for k, v in i.items():
                    if isinstance(v, int):
                        d[k] = d.get(k, 0) + v
            for k, v in c["verdicts"].items():
                out["verdicts"][k] = out["verdicts"].get(k, 0) + v
            for k, v in c["reasons"].items():
                out["reasons"][k] = out["reasons"].get(k, 0) + v
            for k, v in c["wire"].items():
                if k not in ("neigh_failed", "neigh_queuefull"):
                    out["wire"][k] = out["wire"].get(k, 0) + v
            out["echo_replies"] += c["echo_replies"]
        if self.backend == "af_xdp":
            out["xdp_modes"] = {}
            for c in per:
                out["xdp_modes"].update(c.get("xdp_modes", {}))
        # the control process's transmissions (ARP/ND, queued packets)
        for name, i in mine["interfaces"].items():
            d = out["interfaces"].setdefault(name, dict.fromkeys(i, 0))
            d["tx"] = d.get("tx", 0) + i["tx"]
        return out


def _main():
    from ..router import freeze_after_loads
    freeze_after_loads()            # (this process is ours: see router.gc_paused)
    try:
        return worker_main(int(sys.argv[1]))
    except Exception as e:                # one line; the control process restarts us
        if os.environ.get("FASTPATH_TRACEBACK"):
            raise
        print(f"fastpath.run: worker {os.getpid()}: internal error: {type(e).__name__}: {e}",
              file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(_main())

"""The Router: one single-process datapath and its configuration.

    r = fastpath.Router()                 # mode="noref" (default) or "refcount"
    r.configure(text)                     # iproute2 / sysctl lines; ConfigError
    b = fastpath.Batch.from_packets(pkts, iif="tun0")
    r.process(b)                          # in place
    for res in b.results(): ...

``configure`` is all or nothing: the new configuration is parsed and compiled
completely before it replaces the running one.
"""
from __future__ import annotations

import contextlib
import gc
import threading

import numpy as np

from . import _datapath
from .batch import LINKTYPES, Batch
from .config import ConfigError, State
from .reasons import REASON_IDS, REASON_NAMES
from .tables import (RESERVED_DSTS, RTN_NAMES, _raw, compile_tables, plan_delta, same_load_key,
                     update_tables)

MODES = ("noref", "refcount")
USE_STATS = ("lazy", "shared")


class Router:
    """A userspace model of one Linux router's SRv6/IPv6/IPv4 datapath."""

    def __init__(self, mode: str = "noref", use_stats: str = "lazy"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        if use_stats not in USE_STATS:
            raise ValueError(f"use_stats must be one of {USE_STATS}, not {use_stats!r}")
        self.mode = mode
        self.use_stats = use_stats
        self.state = State()
        # configure, process and a follower's resync never interleave (a
        # KernelFollower configures from its own thread)
        self._lock = threading.RLock()
        self._dp = _datapath.Datapath()
        self._dp.set_mode(mode, use_stats)
        self._loaded = None            # Tables.load_key of the last Datapath.load
        self._tables = compile_tables(self.state)
        self._load()

    # ------------------------------------------------------------------
    # configuration
    @classmethod
    def from_file(cls, path, mode: str = "noref", use_stats: str = "lazy") -> "Router":
        """A Router configured from a file, read line by line (the text is
        never held whole; all or nothing as ``configure``)."""
        r = cls(mode=mode, use_stats=use_stats)
        with open(path, encoding="utf-8") as f:
            r.configure(f)
        return r

    @classmethod
    def from_kernel(cls, netns=None, mode: str = "noref", use_stats: str = "lazy",
                    hmac_file=None) -> "Router":
        """A Router configured with the live state of a network namespace
        (None: this process's), read over rtnetlink with pyroute2; see
        ``fastpath.kernel.netlink``.  Raises ``KernelImportError``
        (``NotSupported`` for an object fastpath does not model)."""
        from .kernel.netlink import import_text
        r = cls(mode=mode, use_stats=use_stats)
        r.configure(import_text(netns, hmac_file, header=False))
        return r

    def configure(self, text) -> "Router":
        """Apply iproute2/sysctl lines (see README): a string, or an iterable
        of lines such as an open file; raises ConfigError and changes nothing
        if any line is wrong.

        A delta, not a recompile: the lines run on the State in place, as a
        transaction (State.begin); the route keys they change give the
        prefixes whose entries are planned (tables.plan_delta: checked, not
        yet applied), and only then is the State committed and the plan
        applied (tables.update_tables).  When devices, their state or their
        addresses change, the routes through the devices that changed and
        those whose gateway (without dev) now resolves differently are
        planned too (RouteTable's device and gateway indexes).  The tables
        are recompiled whole (tables.compile_tables, the reference) only when
        an interface went away or changed its ifindex."""
        with self._lock:
            apply_config(self.state, self._tables, text)
            self._load()
            self._reclaim()
        return self

    def _replace_state(self, state: State) -> "Router":
        """The whole configuration replaced by ``state`` (compiled afresh:
        a KernelFollower's resync); the seg6local counters start again."""
        from .config import RouteTable
        with self._lock:
            if not isinstance(state.routes, RouteTable):
                state.routes = RouteTable(dict(state.routes))
            self.state = state
            with gc_paused():
                self._tables = compile_tables(state)
            self._load()
        return self

    def follow_kernel(self, netns=None, **kw):
        """Follow a network namespace (None: this process's): its state
        imported now (replacing this Router's configuration), then every
        rtnetlink change applied as it happens, from a background thread.
        Returns the started ``fastpath.kernel.follow.KernelFollower``
        (``stop()``, a context manager, ``stats``, ``sync()``)."""
        from .kernel.follow import KernelFollower
        return KernelFollower(self, netns, **kw)

    def _reclaim(self):
        """One process, no packet in flight between calls: what the new
        configuration retired is free at once (the Dataplane waits for a
        grace period instead)."""
        t = self._tables
        if t.retired:
            self._dp.clear_seg6local_counters(t.reclaim(t.retired))
            t.retired = []

    def _load(self):
        """Point the datapath at the tables.  When only route entries, their
        fast-path words and LPM entries changed (in place), the datapath
        already reads them: its route caches are emptied instead of a reload
        (Tables.load_key tells)."""
        t = self._tables
        key = t.load_key(self.state)
        if same_load_key(key, self._loaded):
            self._dp.flush_route_caches()
            return
        self._dp.load(*t.arrays(), dfast=t.dfast, **load_kwargs(self.state, t))
        self._loaded = key

    def dump(self) -> str:
        """The configuration as iproute2/sysctl lines (``configure`` accepts it)."""
        return self.state.dump()

    @property
    def interfaces(self):
        return dict(self.state.interfaces)

    # ------------------------------------------------------------------
    # datapath
    def process(self, batch: Batch) -> Batch:
        """Run every packet of ``batch`` through the datapath, in place."""
        with self._lock:
            return self._process(batch)

    def _process(self, batch: Batch) -> Batch:
        prepare_batch(batch, self._tables)
        nfrag = self._dp.process(*batch.kernel_arrays(), LINKTYPES[batch.linktype],
                                 batch.timestamp_ns)
        if nfrag:
            fragment_batch(batch, self._tables, np.flatnonzero(batch.reason == REASON_IDS["fragmented"]))
        return batch

    def trace(self, packet: bytes, iif: str, linktype: str = "raw"):
        """The path one packet takes (rules, lookups, behaviour steps,
        forwarding, verdict): a ``fastpath.trace.Trace`` (print it).  The
        router's counters count the packet like any other."""
        from .trace import trace_packet
        with self._lock:
            return trace_packet(self, bytes(packet), iif, linktype)

    def fib_lookup(self, family: int, daddr, saddr=None, iif=None):
        """The route the datapath's input lookup gives a packet from
        ``saddr`` to ``daddr`` received on ``iif`` (control plane, Python:
        the same rules, l3mdev/VRF handling and compiled LPMs as
        fib_rules.pxi's fib6_walk / fib4_lookup, without a packet, so no
        counter moves).  Returns ``(type, dev)``: the route's type
        ("unicast", "local", "unreachable", ...) and the device of its first
        live nexthop (None without one); ("unreachable", None) when nothing
        matched."""
        import ipaddress
        from .tables import _live, _nexthop_dev
        st, t = self.state, self._tables
        d = ipaddress.ip_address(daddr)
        s = ipaddress.ip_address(saddr) if saddr is not None else None
        l3 = None
        if iif is not None and iif in st.interfaces:
            itf = st.interfaces[iif]
            if itf.kind == "vrf":
                l3 = itf
            elif itf.master is not None and st.interfaces.get(itf.master) is not None:
                l3 = st.interfaces[itf.master]
            if l3 is not None:
                iif = l3.name           # l3mdev_update_flow: the flow's iif is the VRF
        for ru in st.rules.get(family, []):
            if ru.l3mdev and l3 is None:
                continue
            if not ru.l3mdev and ru.iif is not None and ru.iif != iif:
                continue
            if ru.src is not None and (s is None or s not in ru.src):
                continue
            if ru.dst is not None and d not in ru.dst:
                continue
            if ru.action != "lookup":
                return (ru.action, None)
            table = l3.vrf_table if ru.l3mdev else ru.table
            lpm = t.lpms.get((family, table))
            if lpm is None:
                continue
            v = lpm.lookup(d)
            r = t.dst_routes.get(v) if v else None
            if r is None or r.type == "throw":
                continue
            dev = None
            for nh in r.nexthops:
                if len(r.nexthops) == 1 or _live(nh, st):
                    dev = _nexthop_dev(nh, st)
                    break
            return (r.type, dev)
        return ("unreachable", None)

    def counters(self) -> dict:
        """Per-reason packet counts since the last reset, and the per-route
        counters of seg6local routes configured with ``count`` (the kernel's
        SEG6_LOCAL_COUNTERS: packets and bytes of packets processed
        successfully, bytes as they arrived; errors for the rest), keyed by
        "PREFIX table T"."""
        counts = self._dp.reason_counts()
        reasons = {REASON_NAMES[i]: int(c) for i, c in enumerate(counts) if c}
        routes = {}
        sc = self._dp.seg6local_counters()
        for k, route in enumerate(self._tables.s6l_routes):
            if route is not None and getattr(route.encap, "count", False):
                routes[f"{route.prefix} table {route.table}"] = {
                    "packets": int(sc[k, 0]), "bytes": int(sc[k, 1]), "errors": int(sc[k, 2])}
        return {"reasons": reasons, "routes": routes}

    def reset_counters(self):
        self._dp.reset_counters()

    @property
    def fast(self) -> bool:
        """Whether packets try the compiled fast path first (the default).
        It gives the same results as the general path; ``r.fast = False``
        sends every packet through the general path (a baseline)."""
        return self._dp.fast

    @fast.setter
    def fast(self, on: bool):
        self._dp.fast = bool(on)

    def routes(self):
        """The installed FIB entries: [(family, table, prefix, type, dst id)]."""
        out = []
        for (fam, table, net), e in sorted(self._tables.entries.items(),
                                           key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))):
            out.append((fam, table, net, e.route.type, e.dst))
        return out

    def describe_dst(self, dst: int) -> str:
        if dst in RESERVED_DSTS:
            return RESERVED_DSTS[dst][0]
        r = self._tables.dst_routes.get(dst)
        if r is None:
            return f"dst {dst} (none)"
        desc = f"{RTN_NAMES[int(self._tables.dsts[dst]['type'])]} {r.prefix} table {r.table}"
        if r.encap is not None:
            enc = r.encap
            desc += (f" encap seg6local {enc.action}" if hasattr(enc, "action")
                     else f" encap seg6 mode {enc.mode}")
        if len(r.nexthops) == 1:
            nh = r.nexthops[0]
            desc += (f" via {nh.gw}" if nh.gw is not None else "") + (f" dev {nh.dev}" if nh.dev else "")
        elif r.nexthops:
            desc += f" ({len(r.nexthops)} nexthops)"
        return desc



def apply_config(st, tables, text, defer_lpm: bool = False) -> None:
    """Run configuration lines on State ``st`` as a transaction and bring
    ``tables`` to the result: the delta (plan_delta, then update_tables)
    or, when an interface went away or changed its ifindex, the whole-state
    compile.  All or nothing: a ConfigError (or a route that cannot be
    installed) leaves ``st`` and ``tables`` as they were.  ``defer_lpm``:
    the LPM changes are left in ``tables.lpm_pending`` (a Dataplane applies
    them after its workers know the new entries).

    The cyclic garbage collector is paused meanwhile: a large configure
    allocates millions of objects, each gen-0 threshold of them triggering
    a collection that walks the young ones and, every so often, the whole
    heap -- a fifth of a 100k-route load (5.6 s -> 4.5 s CPU); nothing
    here makes reference cycles that must go before it returns."""
    big = isinstance(text, str) and text.count("\n") >= _PROMOTE_LINES
    with gc_paused(promote=big):
        _apply_config(st, tables, text, defer_lpm)


@contextlib.contextmanager
def gc_paused(promote: bool = False):
    """The cyclic garbage collector off for a block that allocates per route
    (a configure, a parse, a whole-state compile: nothing there makes
    reference cycles).  With 100k routes on the heap a whole-state
    compile_tables takes 1.5-1.8 s with it on and 0.66 s with it off (this
    VM); apply_config measured 5.6 -> 4.5 s CPU for a 100k-route load.

    What such a block allocated is still young when it ends, and the
    collector's first passes after it would walk all of it -- the youngest
    generation, then the middle one, then a full pass since they outnumber
    what was old -- each one a stall of its own, in whatever call comes
    next (a full feed, 1.2M routes, 8.5M objects: a later batch of 1000
    replaces took 1.7 s instead of 0.03).  So a block that left more than
    ``_GC_AFTER`` new objects ends with one full collection, here, as part
    of the load that made them.

    In a process that is fastpath's own (``python -m fastpath.run`` and its
    workers: ``freeze_after_loads()``) it ends with ``gc.freeze()``
    instead: every object alive then is left out of every later pass (no
    walk at all, where the full collection holds the interpreter lock for
    ~0.25 s per 100k routes -- a reload's forwarding gap).  What is frozen
    is still freed by reference counting when dropped; only a reference
    cycle among frozen objects would stay, and a configuration's objects
    make none (a dropped Router or State leaves gc.collect() nothing:
    tests/test_plain_routes.py).  Not the default for a library: a freeze
    takes the embedding program's objects out of the collector too.

    A smaller block with ``promote`` (a configure of ``_PROMOTE_LINES``
    lines or more: route churn) moves what is young into the oldest
    generation unwalked (``gc.freeze()`` then ``gc.unfreeze()``, two list
    splices; only when nothing else is frozen).  Left young, a batch's
    routes cost a walk in the next collections and, once promoted, count
    towards the collector's trigger of a full collection (a quarter of
    the heap promoted), though each batch freed as many objects as it
    made: a full collection (~0.26 s at 100k routes) came every ~80
    batches of 1000 replaces.  What the embedding program had young at
    that moment (at most the gen-0 threshold, 700, plus what other
    threads made meanwhile) is promoted with them, unexamined; so that its
    reference cycles cannot pile up unbounded, a full collection is still
    made once ``_PROMOTE_COLLECT`` objects have been promoted this way."""
    global _promoted
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            # (decided before the collector is back on: any allocation
            # after gc.enable() -- get_count's tuple -- starts the very
            # young collection this avoids)
            young = gc.get_count()[0]
            if _FREEZE and (promote or young > _GC_AFTER):
                gc.freeze()
            elif young > _GC_AFTER:
                gc.collect()
            elif promote and gc.get_freeze_count() == 0:
                _promoted += young
                if _promoted >= _PROMOTE_COLLECT:
                    _promoted = 0
                    gc.collect()
                else:
                    # straight to the oldest generation, unwalked
                    gc.freeze()
                    gc.unfreeze()
            gc.enable()


_GC_AFTER = 200_000        # objects: about 25k routes' worth
_PROMOTE_LINES = 512       # a configure's lines: gc_paused(promote=True)
_PROMOTE_COLLECT = 2_000_000   # objects promoted unwalked between full collections
_promoted = 0
_FREEZE = False


def freeze_after_loads() -> None:
    """gc_paused's blocks end with gc.freeze() in this process (see there):
    for fastpath's own processes, whose objects are all its own."""
    global _FREEZE
    _FREEZE = True


def parse_config(text, state: State | None = None) -> State:
    """Configuration lines run on ``state`` (a new State when None) as one
    transaction, checked as ``Router.configure`` checks them (ConfigError,
    line-numbered; nothing changed on an error), with no tables built: a
    whole configuration that is then compiled once (``Router._replace_state``,
    ``Dataplane._replace_state``; a reload of ``fastpath.run``).  Returns
    the State."""
    st = State() if state is None else state
    with gc_paused():
        saved = st.begin()
        try:
            st.run(text)
            _check_changed_gateways(st, st.routes.pending())
        except BaseException:
            st.rollback(saved)
            raise
        st.commit()
    return st


def _apply_config(st, tables, text, defer_lpm):
    saved = st.begin()
    try:
        st.run(text)
        changed = st.routes.pending()
        _check_changed_gateways(st, changed)
        prefixes = dict.fromkeys(k[:3] for k, _old, _new in changed)
        # (a load's every route: a tuple each, not needed from here on)
        del changed
        # (begin copies the interfaces before the first command that changes
        # them: the same dict, nothing of them changed)
        env_changed = st.interfaces is not saved[0] and _env(st.interfaces) != _env(saved[0])
        full = False
        if env_changed:
            more = _env_affected(st, saved[0])
            if more is None:
                full = True
            else:
                prefixes.update(dict.fromkeys(more))
        ops = None if full else plan_delta(tables, st, prefixes, env_changed)
        if ops is not None and tables.max_dsts:
            # a fixed capacity (a Dataplane's shared entries): refused before
            # anything changes, not half way through the update
            need = sum(1 for op in ops if op[0] == "install")
            if need > len(tables.free_dsts):
                raise ValueError(f"route table full: {need} new route entries, "
                                 f"{len(tables.free_dsts)} free of {tables.max_dsts} "
                                 "(raise max_routes)")
        # the small tables are rebuilt only when something in them changed
        small = st.small_tables() != saved
        routes_before = dict(st.routes) if full else None
    except BaseException:
        st.rollback(saved)
        raise
    st.commit(report=False)
    if ops is not None:
        update_tables(tables, st, ops, None if env_changed else prefixes, defer_lpm=defer_lpm,
                      small=small)
    else:
        try:
            compile_tables(st, tables, defer_lpm=defer_lpm)
        except BaseException:
            # (before any route entry changed) back to the state before
            from .config import RouteTable
            (st.interfaces, st.rules, st.neighbours, st.proxies, st.sr_tunsrc, st.hmac_keys,
             st.sysctls, st._vrf_rules_added) = saved
            st.routes = RouteTable(routes_before)
            compile_tables(st, tables, defer_lpm=defer_lpm)
            raise


def prepare_batch(batch, tables) -> None:
    """Before processing: a Batch, its ingress interface names resolved to
    ifindexes, the egress names table attached, old fragments cleared."""
    if not isinstance(batch, Batch):
        raise TypeError(f"process() takes a fastpath.Batch, not {type(batch).__name__}")
    names = batch.iif_names
    if names is not None:
        try:
            # one name for the whole batch (``Batch.from_packets(...,
            # iif="eth0")``, ``read_batches(..., iif="eth0")``): one lookup
            # and a fill, where the per-packet lookup cost 45 ns a packet,
            # more than the End datapath (list.count runs in C)
            if names and names.count(names[0]) == len(names):
                batch.iif[:] = tables.ifindex[names[0]]
            else:
                batch.iif[:] = [tables.ifindex[n] for n in names]
        except KeyError as e:
            raise ValueError(f"unknown ingress interface {e.args[0]!r}") from None
        batch.iif_names = None
    batch.ifnames = tables.ifnames        # replaced, never mutated, on reconfigure
    if batch.fragments:
        batch.fragments.clear()


def load_kwargs(state, tables) -> dict:
    """The scalar arguments of ``Datapath.load`` (sysctls, tunsrc, ...)."""
    s = state
    return dict(lo_ifindex=tables.ifindex.get("lo", 1),
                fwd6=bool(s.sysctl("net.ipv6.conf.all.forwarding")),
                ip_default_ttl=s.sysctl("net.ipv4.ip_default_ttl"),
                hop_limit=s.sysctl("net.ipv6.conf.all.hop_limit"),
                tunsrc=s.sr_tunsrc.packed if s.sr_tunsrc is not None else None,
                seg6_flowlabel=s.sysctl("net.ipv6.seg6_flowlabel"),
                icmp6_ratelimit_ms=s.sysctl("net.ipv6.icmp.ratelimit"),
                icmp4_ratelimit_ms=s.sysctl("net.ipv4.icmp_ratelimit"),
                ip_error_cost=s.sysctl("net.ipv4.route.error_cost"),
                ip_error_burst=s.sysctl("net.ipv4.route.error_burst"),
                icmp4_ratemask=s.sysctl("net.ipv4.icmp_ratemask"),
                icmp_msgs_per_sec=s.sysctl("net.ipv4.icmp_msgs_per_sec"),
                icmp_msgs_burst=s.sysctl("net.ipv4.icmp_msgs_burst"),
                mp_policy6=s.sysctl("net.ipv6.fib_multipath_hash_policy"),
                mp_policy4=s.sysctl("net.ipv4.fib_multipath_hash_policy"),
                v4_full_rpcheck=_v4_custom(s),
                throw_slots6=_throw_slots(tables, 6), throw_slots4=_throw_slots(tables, 4),
                strict6=_raw(tables.strict6), s6l_vrf=_s6l_vrf(state, tables))


def _s6l_vrf(state, tables):
    """Per seg6local record, the VRF device an End.DT4/DT6/DT46 vrftable
    delivers into (end_dt_get_vrf_rcu: the VRF bound to the table, the
    first when several share it; 0: none, the packet is dropped), -1 for
    the other records; None while no VRF device exists (vrftable then
    keeps its table-only meaning, README)."""
    vrfs = {}
    for itf in sorted(state.interfaces.values(), key=lambda i: i.ifindex):
        if itf.kind == "vrf":
            vrfs.setdefault(itf.vrf_table, itf.ifindex)
    if not vrfs:
        return None
    out = np.full(len(tables.s6l_routes), -1, dtype=np.int32)
    for k, r in enumerate(tables.s6l_routes):
        vt = getattr(getattr(r, "encap", None), "vrftable", None) if r is not None else None
        if vt is not None:
            out[k] = vrfs.get(vt, 0)
    return out


def _throw_slots(tables, family: int) -> list:
    """The LPM slots of the tables that hold throw routes."""
    return [k for k, tb in enumerate(tables.slots.get(family, [])) if (family, tb) in tables.throw_tables]


def fragment_batch(batch, tables, idx):
    """ip_fragment() for the forwarded IPv4 packets the kernel marked:
    the slot keeps the first fragment, ``batch.fragments[i]`` lists them all."""
    t = tables
    for i in idx:
        i = int(i)
        dst = int(batch.dst[i])
        mtu = int(t.dsts[dst]["mtu"]) if dst < len(t.dsts) else 0
        if not mtu:
            mtu = int(t.devs[int(batch.oif[i])]["mtu"])
        s, l2 = int(batch.start[i]), int(batch.l2len[i])
        frame = batch.data[i, s:s + int(batch.length[i])].tobytes()
        frags = [frame[:l2] + f for f in ip_fragment(frame[l2:], mtu)]
        batch.fragments[i] = frags
        batch.data[i, s:s + len(frags[0])] = np.frombuffer(frags[0], np.uint8)
        batch.length[i] = len(frags[0])
        batch.reason[i] = 0


def _v4_custom(state) -> bool:
    """fib4_has_custom_rules() or fib_has_custom_local_routes: rules other
    than the three defaults, or a user's local route (either makes the
    kernel's fib_validate_source do its full reverse lookup)."""
    rules = [(r.pref, r.table, r.action, r.src, r.dst, r.iif) for r in state.rules.get(4, [])]
    if rules != [(0, 255, "lookup", None, None, None), (32766, 254, "lookup", None, None, None),
                 (32767, 253, "lookup", None, None, None)]:
        return True
    n = getattr(state.routes, "v4_local_user", None)
    if n is not None:
        return n > 0
    return any(r.family == 4 and r.type == "local" and r.proto != "kernel"
               for r in state.routes.values())


def _ip_checksum(hdr: bytes) -> int:
    s = sum(int.from_bytes(hdr[k:k + 2], "big") for k in range(0, len(hdr), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip4_options(hdr, end: int):
    """The options of an IPv4 header (from byte 20 up to ``end``, the
    header length) that have a length byte: (offset, type, length) each,
    in order, until an EOL; NOPs skipped.  ValueError at an option whose
    length byte is missing, below 2 or runs past ``end`` (what
    __ip_options_compile refuses).  The length is read before the option
    is yielded: a caller may overwrite it (ip_options_fragment does).
    (The datapath's own walk is ip4_options_compile, in
    pyx/datapath/ip4_options.pxi.)"""
    k = 20
    while k < end:
        t = hdr[k]
        if t == 0:                   # IPOPT_END
            return
        if t == 1:                   # IPOPT_NOOP
            k += 1
            continue
        if k + 1 >= end or hdr[k + 1] < 2 or hdr[k + 1] > end - k:
            raise ValueError(f"IPv4 option at {k}: bad length")
        n = hdr[k + 1]
        yield k, t, n
        k += n


def ip_options_fragment(hdr: bytearray) -> None:
    """ip_options_fragment(): the options not copied into fragments (the
    copied flag, 0x80, clear: RR, timestamps) overwritten with NOPs (up to
    a malformed one, left as it is)."""
    try:
        for k, t, n in ip4_options(hdr, (hdr[0] & 0x0F) * 4):
            if not t & 0x80:
                hdr[k:k + n] = b"\x01" * n
    except ValueError:
        pass


def ip_fragment(pkt: bytes, mtu: int) -> list:
    """ip_do_fragment() (slow path) on an IPv4 packet: data cut in multiples
    of 8 bytes, fragments in order, MF on all but the last (and on the last
    too when the packet was itself a non-final fragment).  Options: all in
    the first fragment; in the others (of a packet that was not itself a
    later fragment) those without the copied flag become NOPs, the header
    length unchanged."""
    hlen = (pkt[0] & 0x0F) * 4
    space = mtu - hlen
    frag_off = int.from_bytes(pkt[6:8], "big")
    offset = (frag_off & 0x1FFF) << 3
    not_last = frag_off & 0x2000
    left, ptr = len(pkt) - hlen, hlen
    base, first_offset = pkt[:hlen], offset
    out = []
    while left > 0:
        n = min(left, space)
        if n < left:
            n &= ~7
        left -= n
        hdr = bytearray(base)
        if offset == first_offset == 0 and hlen > 20:
            base = bytearray(base)
            ip_options_fragment(base)            # for the fragments after this one
        fo = offset >> 3
        if left > 0 or not_last:
            fo |= 0x2000
        hdr[6:8] = fo.to_bytes(2, "big")
        hdr[2:4] = (n + hlen).to_bytes(2, "big")
        hdr[10:12] = b"\0\0"
        hdr[10:12] = _ip_checksum(bytes(hdr)).to_bytes(2, "big")
        out.append(bytes(hdr) + pkt[ptr:ptr + n])
        ptr += n
        offset += n
    return out


def _env(interfaces) -> tuple:
    """What every route's compiled entry may depend on besides the route:
    the devices (``State.interfaces``), their ifindexes, state and
    addresses."""
    return tuple((n, i.ifindex, i.up, tuple(i.addrs)) for n, i in interfaces.items())


def _env_affected(state, old_interfaces):
    """The (family, table, prefix) keys whose entries a change of devices
    (state, addresses, new devices) may change, from the committed routes'
    indexes (a route the open transaction writes is planned anyway); None
    when an interface went away or changed its ifindex (then everything)."""
    from types import SimpleNamespace

    from .tables import _resolve_dev
    for name, itf in old_interfaces.items():
        new = state.interfaces.get(name)
        if new is None or new.ifindex != itf.ifindex:
            return None
    keys = set()
    for name, itf in state.interfaces.items():
        old = old_interfaces.get(name)
        if old is None or old.up != itf.up or old.addrs != itf.addrs:
            keys |= state.routes.device_keys(name)
    before = SimpleNamespace(interfaces=old_interfaces)
    for gw, ks in state.routes.gateway_keys().items():
        if _resolve_dev(before, gw) != _resolve_dev(state, gw):
            keys |= ks
    return {k[:3] for k in keys}


def _check_changed_gateways(state, changed):
    """_check_gateways for the (key, before, after) routes a transaction
    changes."""
    from .tables import _resolve_dev
    for _key, _old, r in changed:
        if r is None:
            continue
        for nh in r.nexthops:
            if nh.gw is not None and nh.dev is None and _resolve_dev(state, nh.gw) is None:
                raise ConfigError(f"route {r.prefix}: gateway {nh.gw} is not reachable from any "
                                  "interface (Nexthop has invalid gateway)")


def _check_gateways(state, old=None):
    """The kernel refuses a route whose gateway no connected route reaches
    ("Nexthop has invalid gateway") when the route is added; do the same for
    the routes this configuration adds or changes.  (A route that loses its
    gateway's interface later is not an error: it stops being used.)"""
    from .tables import _resolve_dev
    for key, r in state.routes.items():
        if old is not None and old.routes.get(key) == r:
            continue
        for nh in r.nexthops:
            if nh.gw is not None and nh.dev is None and _resolve_dev(state, nh.gw) is None:
                raise ConfigError(f"route {r.prefix}: gateway {nh.gw} is not reachable from any "
                                  "interface (Nexthop has invalid gateway)")

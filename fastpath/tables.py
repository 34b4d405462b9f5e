"""The shared tables: what the control plane (``config.State``) compiles into
for the compiled datapath.

Records are fixed-size numpy arrays whose layouts mirror the C structs of
``pyx/fp.pxd`` (``tests/test_tables.py`` checks the sizes): route entries
(``dsts``, one 64-byte cache line each), nexthops, devices (indexed by
ifindex), local addresses, neighbours and policy rules; one ``Lpm`` per
(family, table).  Route entries are updated incrementally: a route that did
not change keeps its entry (and its counters), LPMs get only the prefixes
that changed.
"""
from __future__ import annotations

import array
import functools
import ipaddress
import operator
import struct
from dataclasses import dataclass, field

import numpy as np

from .lpm import Lpm
from .config.lexer import _net_int, _prefix

# reserved route entries, as fp.pxd DST_*
DST_IP6_NULL, DST_IP6_BLACKHOLE, DST_IP6_PROHIBIT = 0, 1, 2
DST_IP4_NOROUTE, DST_IP4_BLACKHOLE, DST_IP4_PROHIBIT, DST_IP4_UNREACHABLE = 3, 4, 5, 6
DST_FIRST_ROUTE = 8
RESERVED_DSTS = {
    DST_IP6_NULL: ("ip6_null_entry", 6, "unreachable"),
    DST_IP6_BLACKHOLE: ("ip6_blk_hole_entry", 6, "blackhole"),
    DST_IP6_PROHIBIT: ("ip6_prohibit_entry", 6, "prohibit"),
    DST_IP4_NOROUTE: ("ip4 no route (ENETUNREACH)", 4, "unreachable"),
    DST_IP4_BLACKHOLE: ("ip4 blackhole rule", 4, "blackhole"),
    DST_IP4_PROHIBIT: ("ip4 prohibit rule", 4, "prohibit"),
    DST_IP4_UNREACHABLE: ("ip4 unreachable rule (EHOSTUNREACH)", 4, "unreachable"),
}

RTN = {"unspec": 0, "unicast": 1, "local": 2, "broadcast": 3, "anycast": 4, "multicast": 5,
       "blackhole": 6, "unreachable": 7, "prohibit": 8, "throw": 9}
RTN_NAMES = {v: k for k, v in RTN.items()}
FR_ACT = {"lookup": 1, "blackhole": 6, "unreachable": 7, "prohibit": 8}

DSTF_DEAD, DSTF_GATEWAY, DSTF_SHARED = 1, 2, 4
DEVF_UP, DEVF_FWD6, DEVF_FWD4, DEVF_SEG6, DEVF_LOOPBACK, DEVF_ETHER = 1, 2, 4, 8, 16, 32
# an l3mdev rule (ip rule ... l3mdev) in the RULE_DTYPE records: has_iif 2, slot -2
RULE_HAS_L3MDEV, RULE_SLOT_L3MDEV = 2, -2
NHF_GATEWAY, NHF_DEAD = 1, 2
ENCAP_NONE, ENCAP_SEG6LOCAL, ENCAP_SEG6 = 0, 1, 2


def _rec(fields, itemsize):
    names, formats, offsets = zip(*fields)
    return np.dtype({"names": list(names), "formats": list(formats),
                     "offsets": list(offsets), "itemsize": itemsize})


DST_DTYPE = _rec([
    ("refcnt", "<i4", 0), ("gen", "<u4", 4), ("type", "u1", 8), ("family", "u1", 9),
    ("flags", "u1", 10), ("nh_count", "u1", 11), ("nh_first", "<u4", 12),
    ("table", "<u4", 16), ("encap", "<u4", 20), ("encap_type", "u1", 24),
    ("hoplimit", "u1", 25), ("plen", "u1", 26), ("mtu", "<u4", 28), ("metric", "<u4", 32),
    ("prefsrc", "16u1", 36), ("lastuse", "<u4", 52), ("use", "<u8", 56)], 64)
_ZERO_DST = np.zeros(1, dtype=DST_DTYPE)[0]
# DST_DTYPE packed in one go (_write_entry: one store of the record instead of
# a numpy field assignment per field)
_DST_PACK = struct.Struct("<iIBBBBIIIBBBxII16sIQ")
assert _DST_PACK.size == DST_DTYPE.itemsize
_ZERO_DST_BYTES = bytes(DST_DTYPE.itemsize)
PCPU_DTYPE = _rec([("refcnt", "<i4", 0), ("lastuse", "<u4", 4), ("use", "<u8", 8)], 16)
NH_DTYPE = _rec([
    ("gw", "16u1", 0), ("oif", "<u4", 16), ("upper_bound", "<i4", 20),
    ("weight", "<u4", 24), ("flags", "u1", 28), ("family", "u1", 29)], 32)
DEV_DTYPE = _rec([
    ("ifindex", "<u4", 0), ("mtu", "<u4", 4), ("flags", "u1", 8),
    ("seg6_require_hmac", "i1", 9), ("hop_limit", "u1", 10), ("vlan_set", "u1", 11),
    ("mac", "6u1", 12), ("vlan_tci", "<u2", 18), ("l3mdev", "<u4", 20), ("l3table", "<u4", 24),
    ("l3slot6", "<i2", 28), ("l3slot4", "<i2", 30)], 32)
ADDR_DTYPE = _rec([
    ("addr", "16u1", 0), ("ifindex", "<u4", 16), ("plen", "u1", 20),
    ("family", "u1", 21), ("scope", "u1", 22), ("label", "u1", 23)], 32)
RULE_DTYPE = _rec([
    ("pref", "<u4", 0), ("table", "<u4", 4), ("action", "u1", 8), ("src_len", "u1", 9),
    ("dst_len", "u1", 10), ("has_iif", "u1", 11), ("iif", "<u4", 12),
    ("src", "16u1", 16), ("dst", "16u1", 32), ("slot", "<i4", 48)], 64)
S6L_DTYPE = _rec([
    ("action", "u1", 0), ("flavors", "u1", 1), ("lblen", "u1", 2), ("nflen", "u1", 3),
    ("oif", "<u4", 4), ("slot6", "<i4", 8), ("slot4", "<i4", 12), ("table", "<u4", 16),
    ("srh_off", "<u4", 20), ("srh_len", "<u2", 24), ("count", "u1", 26), ("mode", "u1", 27),
    ("nh6", "16u1", 28), ("nh4", "4u1", 44), ("tunsrc", "16u1", 48)], 64)
FLAVOR_BITS = {"psp": 1, "usp": 2, "usd": 4, "next-csid": 8}
# an `encap seg6` route's record in the seg6local parameter array (fp.pxd)
S6_HEADEND = 200
SEG6_MODES = {"inline": 0, "encap": 1, "l2encap": 2, "encap.red": 3, "l2encap.red": 4}
HMAC_KEY_DTYPE = _rec([
    ("keyid", "<u4", 0), ("algo", "u1", 4), ("slen", "u1", 5), ("secret", "64u1", 8),
    ("istate", "8<u4", 72), ("ostate", "8<u4", 104)], 136)
HMAC_ALGO_IDS = {"sha1": 1, "sha256": 2}
# a route a strict-interface IPv6 lookup may return (fp.pxd fp_strict)
STRICT_DTYPE = _rec([
    ("prefix", "16u1", 0), ("dst", "<u4", 16), ("oif", "<u4", 20), ("slot", "<i4", 24),
    ("plen", "u1", 28)], 32)
# rt6_need_strict(): the destinations looked up on one interface only
# (RT6_LOOKUP_F_IFACE), as (address int, prefix length)
STRICT_NETS = ((0xFE80 << 112, 10), (0xFF << 120, 8), (1, 128))
NEIGH_DTYPE = _rec([
    ("addr", "16u1", 0), ("ifindex", "<u4", 16), ("family", "u1", 20), ("mac", "6u1", 21)], 32)


def addr16(addr) -> np.ndarray:
    """An address as the 16 bytes the records hold (IPv4 in bytes 0..3)."""
    b = ipaddress.ip_address(addr).packed
    return np.frombuffer(b.ljust(16, b"\0"), dtype=np.uint8)


def _raw(records: np.ndarray) -> np.ndarray:
    """The uint8 view the compiled kernel takes (one row per record)."""
    return records.view(np.uint8).reshape(len(records), records.dtype.itemsize)


def _upper_bounds(weights):
    """fib_rebalance / rt6_upper_bound_set: hash-threshold bounds."""
    total = sum(weights)
    out, w = [], 0
    for wt in weights:
        w += wt
        out.append(((w << 31) + total // 2) // total - 1)
    return out


@dataclass(slots=True)
class _Entry:
    """One installed FIB entry: the best usable route of a (family, table, prefix),
    with what was allocated for it (kept until the entry is reclaimed)."""
    dst: int
    route: object
    sig: tuple
    nh_first: int = 0
    nh_count: int = 0
    s6l: int = -1                 # seg6local parameter index, -1 none
    blob: tuple = (0, 0)          # (offset, length) of its SRH template


def _index_stack(top: int, below: int):
    """The free route-entry indexes ``top`` down to ``below`` + 1, popped
    from the end (lowest first): 8 bytes each in an ``array`` where a list
    held an int object and its pointer (~36 bytes) per free entry."""
    return array.array("q", range(top, below, -1))


class _Pool:
    """Ranges of a growing array handed out and given back: first fit among
    the freed ranges of the same length, else the end.  Indexes stay valid
    while allocated, which is what lets a route entry be read by workers
    using an older snapshot of the arrays they point into."""

    def __init__(self, start: int):
        self.end = start
        self.free = {}                                # length -> [offsets]

    def alloc(self, n: int) -> int:
        if n == 0:
            return 0
        lst = self.free.get(n)
        if lst:
            return lst.pop()
        off = self.end
        self.end += n
        return off

    def release(self, off: int, n: int):
        if n:
            self.free.setdefault(n, []).append(off)


@dataclass
class Tables:
    """Compiled tables and the incremental state needed to update them."""
    dsts: np.ndarray = None
    # The fast path's word per route entry (uint32, beside ``dsts``): 1 +
    # the nexthop row of a live IPv6 unicast route with one nexthop, no
    # encap and no mtu metric; 0 for every other entry, which the fast path
    # then reads whole.  A forwarding lookup needs nothing else of such a
    # route, so the fast path skips its cache line (14 MB over 220k routes,
    # one random line per packet) -- see _fast_words().
    dfast: np.ndarray = None
    nhs: np.ndarray = None
    devs: np.ndarray = None
    addrs: np.ndarray = None
    neighs: np.ndarray = None
    rules: dict = field(default_factory=dict)        # family -> RULE_DTYPE array
    lpms: dict = field(default_factory=dict)         # (family, table) -> Lpm
    slots: dict = field(default_factory=dict)        # family -> [table ids by slot]
    entries: dict = field(default_factory=dict)      # (family, table, network) -> _Entry
    # Routes a strict-interface lookup may return that are not the best
    # route of their prefix (a higher metric, or a second device's
    # automatic route): (family, table, network, metric, devices) -> _Entry
    strict_entries: dict = field(default_factory=dict)
    strict6: np.ndarray = None                       # STRICT_DTYPE rows (see _strict_rows)
    free_dsts: array.array = field(default_factory=lambda: array.array("q"))
    ifnames: dict = field(default_factory=dict)      # ifindex -> name
    ifindex: dict = field(default_factory=dict)      # name -> ifindex
    s6l: np.ndarray = None                           # seg6local parameters (S6L_DTYPE)
    srh_blob: np.ndarray = None                      # SRH templates of End.B6*
    s6l_routes: list = field(default_factory=list)   # s6l index -> Route (None: free)
    hmac_keys: np.ndarray = None                     # HMAC_KEY_DTYPE records
    dst_routes: dict = field(default_factory=dict)   # dst id -> Route (for counters / dumps)
    max_dsts: int = 0                                # fixed capacity (shared memory), 0: grows
    retired: list = field(default_factory=list)      # _Entry objects replaced or removed
    nh_arr: np.ndarray = None                        # NH_DTYPE rows in use (grown), by the pool
    nh_pool: _Pool = None
    # Routes with a single nexthop share its row: (gw, ifindex, weight) ->
    # [row, routes using it].  A row is immutable while used, so the
    # routes of a 220k-prefix table via a handful of neighbours keep a
    # handful of rows (and adjacencies) in cache, not one line per route.
    nh_shared: dict = field(default_factory=dict)
    # Shared rows whose last route went: (gw, ifindex, weight) -> row, oldest
    # first, kept as written (no route points at them) for a nexthop that
    # comes back -- a route flapping between two gateways then writes no
    # row, and a Router need not load its datapath again.  Beyond
    # ``nh_idle_max`` the oldest is zeroed and freed.
    nh_idle: dict = field(default_factory=dict)
    nh_idle_max: int = 64
    throw_tables: set = field(default_factory=set)   # (family, table) holding throw routes
    throw_count: dict = field(default_factory=dict)  # (family, table) -> throw entries
    s6l_recs: dict = field(default_factory=dict)     # s6l index -> record
    s6l_pool: _Pool = None
    s6l_arr: np.ndarray = None                       # S6L_DTYPE records by index (grown); s6l views it
    # uint32 per seg6local index, bumped when the index is given back: a
    # Dataplane worker zeroes the counters of the indexes whose number
    # changed since its last load (the index may serve another route now)
    s6l_gen: np.ndarray = None
    s6l_slots: tuple = None                          # the slots the records' slot6/slot4 were made for
    blob: np.ndarray = None                          # uint8, the SRH templates (grown); srh_blob views it
    blob_pool: _Pool = None
    # Where the arrays readers use are made: None (numpy), or
    # ``alloc(shape, dtype)`` returning a zeroed array -- a Dataplane's
    # shared memory, which its workers read while this process updates
    # them.  ``defer``: the LPMs keep freed groups in limbo until
    # ``release_deferred()`` (after a grace period).
    alloc: object = None
    defer: bool = False
    lpm_pending: list = field(default_factory=list)  # (Lpm, network, dst or 0 to delete), see apply_lpm
    # Bumped whenever a nexthop row or a seg6local record is written: what
    # Datapath.load derives from them (adjacencies, the records' private
    # copy) is then stale, and a Router loads again (see load_key)
    rows_version: int = 0

    def __post_init__(self):
        if self.dsts is None:
            self.dsts = np.zeros(64, dtype=DST_DTYPE)
        if self.dfast is None:
            self.dfast = np.zeros(len(self.dsts), dtype=np.uint32)
        if not self.dsts[DST_IP6_NULL]["refcnt"]:
            for i, (_, fam, typ) in RESERVED_DSTS.items():
                self.dsts[i]["type"] = RTN[typ]
                self.dsts[i]["family"] = fam
                self.dsts[i]["flags"] = DSTF_SHARED
                self.dsts[i]["refcnt"] = 1
        self._init_reserved()
        self.nh_arr = self._zeros(64, NH_DTYPE)
        self.nhs = self.nh_arr[:1]
        self.nh_pool = _Pool(1)                      # row 0: no nexthop
        self.s6l_pool = _Pool(0)
        self.s6l_arr = self._zeros(16, S6L_DTYPE)
        self.s6l_gen = self._zeros(16, np.uint32)
        self.s6l = self.s6l_arr[:0]
        self.blob_pool = _Pool(8)
        self.blob = self._zeros(64, np.uint8)
        self.srh_blob = self.blob[:8]

    def _zeros(self, n: int, dtype) -> np.ndarray:
        if self.alloc is None:
            return np.zeros(n, dtype=dtype)
        return self.alloc((n,), dtype)

    def _grown(self, a: np.ndarray, need: int) -> np.ndarray:
        """``a`` or, when shorter than ``need``, a copy at least twice as
        long (an older array stays as it was: readers of an older snapshot
        keep using it)."""
        if need <= len(a):
            return a
        g = self._zeros(max(2 * len(a), need), a.dtype)
        g[:len(a)] = a                  # (np.concatenate would drop a record's padding)
        return g

    def new_lpm(self, family: int) -> Lpm:
        lpm = Lpm(family, alloc=self.alloc)
        lpm.defer_free = self.defer
        return lpm

    def _init_reserved(self):
        if not self.free_dsts:
            self.free_dsts = _index_stack(len(self.dsts) - 1, DST_FIRST_ROUTE - 1)

    # ------------------------------------------------------------------
    def _alloc_dst(self) -> int:
        if not self.free_dsts:
            if self.max_dsts:
                raise ValueError(f"route table full: {self.max_dsts} route entries "
                                 "(raise max_routes)")
            old = len(self.dsts)
            self.dsts = self._grown(self.dsts, 2 * old)
            self.dfast = self._grown(self.dfast, 2 * old)
            self.free_dsts = _index_stack(2 * old - 1, old - 1)
        return self.free_dsts.pop()

    def mark_dead(self, dsts):
        """Flag retired route entries dead (DSTF_DEAD) for the workers that
        may still reach them (``dsts``: an entry's index, or a sequence of
        them): their fast-path words first, so that a worker that reads a
        word non-zero finds the entry live, as one reading the flags before
        the store."""
        idx = np.asarray(dsts, dtype=np.int64)
        self.dfast[idx] = 0
        self.dsts["flags"][idx] |= DSTF_DEAD

    def reclaim(self, entries) -> list:
        """Give back what retired entries held (the caller knows no packet
        can still reach them): the route entry gets a new generation, its
        nexthop rows, seg6local index and SRH template are freed.  Returns
        the seg6local indexes freed (their counters are to be cleared)."""
        freed = []
        entries = list(entries)
        if 0 < len(entries) <= 8:
            # a few: each record zeroed through one view, its generation
            # bumped (numpy's vectorised stores cost more on so few)
            mv = memoryview(self.dsts.view(np.uint8))
            size = _DST_PACK.size
            for e in entries:
                self.dfast[e.dst] = 0
                off = e.dst * size
                gen = (int.from_bytes(mv[off + 4:off + 8], "little") + 1) & 0xFFFFFFFF
                mv[off:off + size] = _ZERO_DST_BYTES
                mv[off + 4:off + 8] = gen.to_bytes(4, "little")
                self.free_dsts.append(e.dst)
        elif entries:
            # the entries themselves in three vectorised stores
            idx = np.fromiter((e.dst for e in entries), dtype=np.int64, count=len(entries))
            gens = (self.dsts["gen"][idx].astype(np.uint64) + 1) & 0xFFFFFFFF
            self.dfast[idx] = 0
            self.dsts[idx] = _ZERO_DST
            self.dsts["gen"][idx] = gens
            self.free_dsts.extend(idx.tolist())
        for e in entries:
            self._release_nexthops(e)
            if e.s6l >= 0:
                self.s6l_recs.pop(e.s6l, None)
                self.s6l_routes[e.s6l] = None
                self.s6l_pool.release(e.s6l, 1)
                freed.append(e.s6l)
            self.blob_pool.release(*e.blob)
        if freed:
            self.rows_version += 1
            idx = np.asarray(freed, dtype=np.int64)
            self.s6l_arr[idx] = np.zeros(1, dtype=S6L_DTYPE)
            self.s6l_gen[idx] += 1
        return freed

    def _alloc_nexthops(self, sig_nhs) -> int:
        """The first of the rows of a new entry's nexthops (shared with the
        other routes of the same single nexthop); written here when new."""
        key = _nh_key(sig_nhs)
        if key is not None:
            sh = self.nh_shared.get(key)
            if sh is not None:
                sh[1] += 1
                return sh[0]
            row = self.nh_idle.pop(key, None)
            if row is not None:
                self.nh_shared[key] = [row, 1]
                return row
        first = self.nh_pool.alloc(len(sig_nhs))
        self.rows_version += 1
        if key is not None:
            self.nh_shared[key] = [first, 1]
        self.nh_arr = self._grown(self.nh_arr, first + len(sig_nhs))
        bounds = _upper_bounds([w for (_, _, w, _) in sig_nhs]) if sig_nhs else []
        for j, ((gw, dev, weight, ifidx), ub) in enumerate(zip(sig_nhs, bounds)):
            row = self.nh_arr[first + j]
            row["oif"] = ifidx
            row["weight"] = weight
            row["upper_bound"] = ub
            if gw is not None:
                g = ipaddress.ip_address(gw)
                row["gw"] = addr16(g)
                row["family"] = g.version
                row["flags"] = NHF_GATEWAY
        return first

    def _release_nexthops(self, e):
        key = _nh_key(e.sig[2])
        if key is not None:
            self.nh_shared[key][1] -= 1
            if self.nh_shared[key][1]:
                return
            del self.nh_shared[key]
            self.nh_idle[key] = e.nh_first
            while len(self.nh_idle) > self.nh_idle_max:
                self._free_nh_rows(self.nh_idle.pop(next(iter(self.nh_idle))), 1)
            return
        self._free_nh_rows(e.nh_first, e.nh_count)

    def _free_nh_rows(self, first: int, count: int):
        self.nh_arr[first:first + count] = np.zeros(1, dtype=NH_DTYPE)
        self.nh_pool.release(first, count)

    def arrays(self):
        """Arguments of ``Datapath.load`` (the raw uint8 views; the strict
        lookup's rows go as the ``strict6`` keyword, see router.load_kwargs)."""
        lpm6 = [(self.lpms[(6, t)].tbl24, self.lpms[(6, t)].groups) for t in self.slots.get(6, [])]
        lpm4 = [(self.lpms[(4, t)].tbl24, self.lpms[(4, t)].groups) for t in self.slots.get(4, [])]
        return (_raw(self.dsts), _raw(self.nhs), _raw(self.devs), _raw(self.addrs),
                _raw(self.neighs), _raw(self.rules[6]), _raw(self.rules[4]), lpm6, lpm4,
                _raw(self.s6l), self.srh_blob, _raw(self.hmac_keys))


    def load_key(self, state) -> tuple:
        """Everything ``Datapath.load`` reads besides the contents of the
        route entries, their fast-path words and the LPMs, which change in
        place: the arrays themselves (replaced when they grow), the
        versions of the rows it derives state from, the small tables and
        the rows strict lookups and throw routes use.  Equal keys
        (``same_load_key``): a reload would give the datapath what it
        already has, and emptying its route caches is enough.  Two parts:
        objects compared by identity, values compared by value."""
        (interfaces, rules, neighbours, proxies, tunsrc, keys, sysctls,
         vrf_rules) = state.small_tables()
        objs = [self.dsts, self.dfast, self.nh_arr, self.devs, self.addrs, self.neighs,
                self.rules.get(6), self.rules.get(4), self.s6l_arr, self.blob, self.hmac_keys,
                self.strict6, interfaces, rules, neighbours, proxies, keys, sysctls]
        for lp in self.lpms.values():
            objs.append(lp.tbl24)
            objs.append(lp.groups)
        vals = (self.nh_pool.end, self.rows_version, self.s6l_pool.end, self.blob_pool.end,
                tuple(self.lpms), tuple(self.slots.get(6, ())), tuple(self.slots.get(4, ())),
                frozenset(self.throw_tables), tunsrc, vrf_rules)
        return objs, vals


def same_load_key(a, b) -> bool:
    """Whether two ``Tables.load_key`` results are the same."""
    if a is None or b is None:
        return False
    return (len(a[0]) == len(b[0]) and all(map(operator.is_, a[0], b[0]))
            and a[1] == b[1])


def _encap_type(encap) -> int:
    if encap is None:
        return ENCAP_NONE
    return ENCAP_SEG6 if type(encap).__name__ == "Seg6Encap" else ENCAP_SEG6LOCAL


def _nexthop_dev(nh, state):
    """The device of a nexthop: given, or the one whose connected prefix
    holds the gateway."""
    if nh.dev:
        return nh.dev
    return _resolve_dev(state, nh.gw) if nh.gw is not None else None


def _live(nh, state) -> bool:
    """A nexthop through a device that is up (the kernel marks the others
    RTNH_F_DEAD / LINKDOWN and takes them out of the hash)."""
    dev = _nexthop_dev(nh, state)
    return dev is not None and dev in state.interfaces and state.interfaces[dev].up


def _usable(route, state) -> bool:
    """A route all of whose nexthops are dead is skipped by the lookup (the
    kernel flushes or marks such routes); routes without nexthops (local,
    blackhole, ...) always are."""
    nhs = route.nexthops
    if not nhs or route.type == "local":
        return True            # a local route answers whatever its device's state
    if len(nhs) == 1:
        return _live(nhs[0], state)
    return any(_live(nh, state) for nh in nhs)


def _resolve_dev(state, gw):
    """The device of a gateway given without ``dev``: the interface whose
    connected prefix contains it (as the kernel's nexthop validation);
    cached while the State's transaction holds its address cache."""
    c = getattr(state, "_addrc", None)
    if c is not None:
        dev = c.get(("dev", gw), False)
        if dev is not False:
            return dev
    dev = None
    for itf in state.interfaces.values():
        for a in itf.addrs:
            if a.version == gw.version and gw in a.network and itf.up:
                dev = itf.name
                break
        if dev is not None:
            break
    if c is not None:
        c[("dev", gw)] = dev
    return dev


def _best_routes(state):
    """(family, table, network) -> the route the lookup returns: the lowest
    metric among the usable routes of that prefix."""
    best = {}
    for key, r in state.routes.items():
        if not _usable(r, state):
            continue
        k = (r.family, r.table, r.prefix)
        cur = best.get(k)
        if cur is None or r.metric < cur.metric:
            best[k] = r
    return best


_addr_str = functools.lru_cache(maxsize=4096)(str)   # gateways repeat; addresses are immutable


def _route_sig(r, state, cache=None):
    """Everything of a route that its compiled entry depends on; only the
    live nexthops take part in the multipath hash.

    ``cache``: a dict kept by the caller for one pass over one State (the
    devices, their state and addresses, which the nexthops resolve
    against, cannot change during it).  Routes without an encap that share
    their nexthops tuple -- a feed's plain routes through one gateway do,
    config.route._plain_route hands them one -- and their other fields get
    one signature object: computed once, and held once by every entry
    instead of three tuples an entry (measured: ~270 bytes a route)."""
    if cache is not None and r.encap is None:
        ck = (id(r.nexthops), r.type, r.metric, r.src, r.mtu, r.hoplimit)
        hit = cache.get(ck)
        if hit is not None and hit[0] is r.nexthops:
            return hit[1]
        sig = _route_sig(r, state)
        cache[ck] = (r.nexthops, sig)          # (holds the tuple: its id stays its own)
        return sig
    nhs = []
    for nh in r.nexthops:
        if len(r.nexthops) > 1 and not _live(nh, state):
            continue
        dev = _nexthop_dev(nh, state)
        nhs.append((_addr_str(nh.gw) if nh.gw is not None else None, dev, nh.weight,
                    state.interfaces[dev].ifindex if dev in state.interfaces else 0))
    return (r.type, r.metric, tuple(nhs), repr(r.encap), str(r.src) if r.src else None,
            r.mtu, r.hoplimit)


def _nh_key(sig_nhs):
    """The key of a single nexthop's shared row (None: not shared)."""
    if len(sig_nhs) != 1:
        return None
    gw, _dev, weight, ifidx = sig_nhs[0]
    return (gw, ifidx, weight)


def _fast_words(d: np.ndarray) -> np.ndarray:
    """Tables.dfast of complete route entries ``d`` (DST_DTYPE records)."""
    plain = ((d["family"] == 6) & (d["type"] == RTN["unicast"]) & (d["encap_type"] == ENCAP_NONE)
             & (d["nh_count"] == 1) & (d["mtu"] == 0) & ((d["flags"] & DSTF_DEAD) == 0))
    return np.where(plain, d["nh_first"].astype(np.uint32) + 1, 0).astype(np.uint32)


def _compile_small(t: Tables, state) -> None:
    """The small tables, rebuilt whole: devices, local addresses, neighbours."""
    # --- devices -------------------------------------------------------
    maxidx = max(i.ifindex for i in state.interfaces.values())
    devs = np.zeros(maxidx + 1, dtype=DEV_DTYPE)
    devs["l3slot6"] = devs["l3slot4"] = -1
    t.ifnames = {}
    t.ifindex = {}
    for itf in state.interfaces.values():
        d = devs[itf.ifindex]
        d["ifindex"] = itf.ifindex
        d["mtu"] = itf.mtu
        fl = 0
        if itf.up:
            fl |= DEVF_UP
        if state.forwarding(6, itf.name):
            fl |= DEVF_FWD6
        if state.forwarding(4, itf.name):
            fl |= DEVF_FWD4
        if state.seg6_enabled(itf.name):
            fl |= DEVF_SEG6
        if itf.name == "lo":
            fl |= DEVF_LOOPBACK
        if getattr(itf, "kind", None) not in ("tun", "loopback"):
            fl |= DEVF_ETHER
        d["flags"] = fl
        d["seg6_require_hmac"] = state.sysctl(f"net.ipv6.conf.{itf.name}.seg6_require_hmac")
        d["hop_limit"] = state.sysctl(f"net.ipv6.conf.{itf.name}.hop_limit")
        d["mac"] = np.frombuffer(itf.mac, dtype=np.uint8)
        if getattr(itf, "vlan", None) is not None:
            d["vlan_set"] = 1
            d["vlan_tci"] = itf.vlan
        # the VRF (l3mdev) of a VRF device or of a device enslaved to one:
        # its ifindex and table (the LPM slots are _compile_rules')
        if getattr(itf, "kind", None) == "vrf":
            d["l3mdev"] = itf.ifindex
            d["l3table"] = itf.vrf_table
        elif getattr(itf, "master", None) is not None and itf.master in state.interfaces:
            m = state.interfaces[itf.master]
            d["l3mdev"] = m.ifindex
            d["l3table"] = m.vrf_table
        t.ifnames[itf.ifindex] = itf.name
        t.ifindex[itf.name] = itf.ifindex
    t.devs = devs
    # --- local addresses ----------------------------------------------
    alist = []
    for itf in state.interfaces.values():
        if not itf.up:
            continue
        # the kernel keeps each device's addresses newest first within a scope
        for a in reversed(itf.addrs):
            alist.append((itf.ifindex, a))
    addrs = np.zeros(len(alist), dtype=ADDR_DTYPE)
    for k, (ifindex, a) in enumerate(alist):
        addrs[k]["addr"] = addr16(a.ip)
        addrs[k]["ifindex"] = ifindex
        addrs[k]["plen"] = a.network.prefixlen
        addrs[k]["family"] = a.version
        if a.version == 6:
            ip = a.ip
            addrs[k]["scope"] = 2 if (ip.is_link_local or ip.is_loopback) else (5 if ip.is_site_local else 14)
    t.addrs = addrs
    # --- neighbours -----------------------------------------------------
    neighs = np.zeros(len(state.neighbours), dtype=NEIGH_DTYPE)
    for k, ((dev, addr), mac) in enumerate(state.neighbours.items()):
        neighs[k]["addr"] = addr16(addr)
        neighs[k]["ifindex"] = state.interfaces[dev].ifindex
        neighs[k]["family"] = addr.version
        neighs[k]["mac"] = np.frombuffer(mac, dtype=np.uint8)
    t.neighs = neighs


def compile_tables(state, old: Tables | None = None, defer_lpm: bool = False) -> Tables:
    """Build (or update ``old`` into) the tables for ``state``, walking every
    route (the reference ``update_tables`` is tested against).  Raises
    ValueError for a route whose gateway no interface reaches.
    ``defer_lpm``: the LPM changes are left in ``t.lpm_pending`` for
    ``apply_lpm`` (see update_tables)."""
    t = old if old is not None else Tables()
    _compile_small(t, state)
    # --- routes: diff the best route per prefix against what is installed.
    # An entry is never rewritten while installed: a changed route gets a
    # new entry and the old one is retired (workers may still be reading it
    # through an older snapshot; the caller reclaims it when none can).
    best = _best_routes(state)
    new_entries = {}
    changed = []
    t.throw_count = {}
    for k, r in best.items():
        if r.type == "throw":
            t.throw_count[k[:2]] = t.throw_count.get(k[:2], 0) + 1
    t.throw_tables = set(t.throw_count)
    sigs = {}
    for k, r in best.items():
        sig = _route_sig(r, state, sigs)
        cur = t.entries.get(k)
        if cur is not None and cur.sig == sig:
            new_entries[k] = _Entry(cur.dst, r, sig, cur.nh_first, cur.nh_count, cur.s6l, cur.blob)
            continue
        for (gw, dev, weight, ifidx) in sig[2]:
            if r.type == "unicast" and not ifidx:
                raise ValueError(f"route {r.prefix}: gateway {gw} is not reachable from any interface"
                                 " (RTNETLINK answers: Network is unreachable)")
        new_entries[k] = _Entry(-1, r, sig)
        changed.append(k)
    retired = [t.entries[k] for k in t.entries if k not in new_entries or k in changed]
    # the routes only a strict-interface lookup returns get entries of their own
    strict = _strict_routes(state, best.get)
    new_strict, schanged, sretired = _diff_strict(t, state, strict)
    retired += sretired
    if t.max_dsts and len(changed) + len(schanged) > len(t.free_dsts):
        # a fixed capacity (a Dataplane's shared entries; the retired ones
        # are free only after a grace period): refused before any entry
        # changes, the caller compiles its state before back
        raise ValueError(f"route table full: {len(changed) + len(schanged)} new route entries, "
                         f"{len(t.free_dsts)} free of {t.max_dsts} (raise max_routes)")
    _install_all(t, [new_entries[k] for k in changed] + [new_strict[k] for k in schanged])
    t.retired.extend(retired)
    t.nhs = t.nh_arr[:max(t.nh_pool.end, 1)]
    # --- LPMs: removed prefixes first, then the new entries (a replaced
    # prefix is overwritten in place: lookups see the old or the new entry)
    pending = []
    for k in t.entries:
        if k not in new_entries:
            fam, table, net = k
            lpm = t.lpms.get((fam, table))
            if lpm is not None:
                pending.append((lpm, net, 0))
    t.entries = new_entries
    t.strict_entries = new_strict
    t.dst_routes = {e.dst: e.route for e in new_entries.values()}
    t.dst_routes.update((e.dst, e.route) for e in new_strict.values())
    # --- seg6local parameters of the new entries, then the LPMs
    made_entries = [new_entries[k] for k in changed] + [new_strict[k] for k in schanged]
    _compile_seg6local(t, state, made_entries)
    made = np.fromiter((e.dst for e in made_entries), dtype=np.int64, count=len(made_entries))
    t.dfast[made] = _fast_words(t.dsts[made])
    for k in changed:
        fam, table, net = k
        lpm = t.lpms.get((fam, table))
        if lpm is None:
            lpm = t.lpms[(fam, table)] = t.new_lpm(fam)
        pending.append((lpm, net, new_entries[k].dst))
    t.lpm_pending.extend(pending)      # (after what an earlier deferred update left)
    if not defer_lpm:
        apply_lpm(t)
    _compile_rules(t, state)
    t.strict6 = _strict_rows(t, state, strict, new_entries, new_strict)
    _seg6local_slots(t)
    return t


def reserve_lpm(t: Tables) -> bool:
    """Make room in each LPM for the groups its pending adds may take
    (``t.lpm_pending``), so that applying them never replaces a ``groups``
    array readers use.  True when some LPM's ``groups`` was replaced."""
    need = {}
    for lpm, net, value in t.lpm_pending:
        if value:
            n = need.get(id(lpm), (lpm, 0))[1]
            need[id(lpm)] = (lpm, n + lpm.groups_needed(net.prefixlen))
    return any([lpm.reserve(n) for lpm, n in need.values()])


def apply_lpm(t: Tables) -> None:
    """The pending LPM changes, in order (deletes first, then adds): each
    entry a reader can see is written by one atomic store (see _lpm.pyx),
    so a concurrent lookup gets the old or the new route, never a torn
    one; groups freed go to limbo when ``t.defer``."""
    pending, t.lpm_pending = t.lpm_pending, []
    i, n = 0, len(pending)
    while i < n:
        lpm, net, value = pending[i]
        j = i
        while j < n and pending[j][2] and pending[j][0] is lpm:
            j += 1
        if j - i >= 16:
            # a run of adds to one table: one compiled loop (add_many) instead
            # of a Python call and a prefix parse each
            run = pending[i:j]
            addrs, plens = _lpm_keys([x[1] for x in run], lpm.family)
            lpm.add_many(addrs, plens, np.fromiter([x[2] for x in run], np.uint32, len(run)))
            i = j
            continue
        if value:
            lpm.add(net, value)
        else:
            lpm.delete(net)
        i += 1


def _compile_rules(t: Tables, state) -> None:
    """The policy rules of both families (with the LPM slots of their tables)."""
    for fam in (6, 4):
        tables_used = sorted({tb for (f, tb) in t.lpms if f == fam})
        t.slots[fam] = tables_used
        slot_of = {tb: s for s, tb in enumerate(tables_used)}
        rules = state.rules.get(fam, [])
        arr = np.zeros(len(rules), dtype=RULE_DTYPE)
        # l3mdev_fib_table(): the LPM slot of each VRF's table, per device
        l3 = t.devs["l3mdev"] != 0
        if l3.any():
            t.devs[f"l3slot{fam}"][l3] = [slot_of.get(int(tb), -1) for tb in t.devs["l3table"][l3]]
        for k, ru in enumerate(rules):
            arr[k]["pref"] = ru.pref
            arr[k]["table"] = ru.table or 0
            arr[k]["action"] = FR_ACT[ru.action]
            arr[k]["slot"] = slot_of.get(ru.table, -1)
            if getattr(ru, "l3mdev", False):
                # the table is the packet's VRF's (fib_rule_get_table): the
                # datapath reads it from the device (fp_dev.l3slot*)
                arr[k]["slot"] = RULE_SLOT_L3MDEV
                arr[k]["has_iif"] = RULE_HAS_L3MDEV
            if ru.src is not None:
                arr[k]["src"] = addr16(ru.src.network_address)
                arr[k]["src_len"] = ru.src.prefixlen
            if ru.dst is not None:
                arr[k]["dst"] = addr16(ru.dst.network_address)
                arr[k]["dst_len"] = ru.dst.prefixlen
            if ru.iif is not None:
                arr[k]["has_iif"] = 1
                arr[k]["iif"] = t.ifindex.get(ru.iif, 0xFFFFFFFF)
        t.rules[fam] = arr


def _diff_strict(t: Tables, state, strict) -> tuple:
    """The route entries of the strict-interface candidates that are not the
    best route of their prefix (``strict``: _strict_routes), against those
    installed: -> (entries by key, keys of the new ones, entries retired).
    An entry whose route's signature is unchanged is kept."""
    new, made = {}, []
    for r, is_best in strict:
        if is_best:
            continue
        sig = _route_sig(r, state)
        k = (r.family, r.table, r.prefix, r.metric, r.dev)
        cur = t.strict_entries.get(k)
        if cur is not None and cur.sig == sig:
            new[k] = _Entry(cur.dst, r, sig, cur.nh_first, cur.nh_count, cur.s6l, cur.blob)
        else:
            new[k] = _Entry(-1, r, sig)
            made.append(k)
    retired = [t.strict_entries[k] for k in t.strict_entries if k not in new or k in made]
    return new, made, retired


def _install(t: Tables, e: _Entry) -> None:
    """Allocate and write the route entry (and nexthop rows) of a new
    _Entry (the entry's generation kept; its encap index is set by
    _compile_seg6local)."""
    _alloc_entry(t, e)
    _write_entry(e, memoryview(t.dsts.view(np.uint8)))


def _install_all(t: Tables, entries) -> None:
    """_install of each of ``entries``, in order: all allocated first (a
    growth replaces the entries' array), then written through one view of
    it -- not a view and a packed copy per entry.  (The same records as
    _alloc_entry and _write_entry make, one entry after the other, with
    what consecutive entries share -- a feed's routes through one nexthop
    share their signature's nexthops tuple -- looked up once: the shared
    row, the gateway flag; and the generations read in one numpy gather.)"""
    if len(entries) < 16:
        for e in entries:
            _install(t, e)
        return
    free = t.free_dsts
    last = shared = None
    for e in entries:
        nhs = e.sig[2]
        if free:
            e.dst = free.pop()
        else:
            e.dst = t._alloc_dst()           # (grows the arrays: a new free stack)
            free = t.free_dsts
        e.nh_count = len(nhs)
        if nhs is last and shared is not None:
            shared[1] += 1                   # (the single nexthop's shared row, counted)
            e.nh_first = shared[0]
            continue
        e.nh_first = t._alloc_nexthops(nhs)
        last = nhs
        key = _nh_key(nhs)
        shared = t.nh_shared.get(key) if key is not None else None
    idx = np.fromiter([e.dst for e in entries], dtype=np.int64, count=len(entries))
    gens = t.dsts["gen"][idx].tolist()
    mv = memoryview(t.dsts.view(np.uint8))
    last = None
    for e, gen in zip(entries, gens):
        nhs = e.sig[2]
        if nhs is not last:
            last = nhs
            flags = _gw_flags(nhs)
        _pack_entry(e, mv, gen, flags)


def _alloc_entry(t: Tables, e: _Entry) -> None:
    sig_nhs = e.sig[2]
    e.dst = t._alloc_dst()
    e.nh_count = len(sig_nhs)
    e.nh_first = t._alloc_nexthops(sig_nhs)


def _write_entry(e: _Entry, mv: memoryview) -> None:
    """The record of an allocated entry, written into ``mv`` (the bytes of
    Tables.dsts), its generation kept."""
    off = e.dst * _DST_PACK.size
    _pack_entry(e, mv, int.from_bytes(mv[off + 4:off + 8], "little"), _gw_flags(e.sig[2]))


def _gw_flags(sig_nhs) -> int:
    """A route entry's gateway flag, from its signature's nexthops."""
    if len(sig_nhs) == 1:            # (the common case, without a generator)
        return DSTF_GATEWAY if sig_nhs[0][0] else 0
    return DSTF_GATEWAY if any(g for (g, _, _, _) in sig_nhs) else 0


def _pack_entry(e: _Entry, mv: memoryview, gen: int, flags: int) -> None:
    """The record of allocated entry ``e`` packed into ``mv`` (the bytes
    of Tables.dsts) with generation ``gen`` and ``flags``."""
    r = e.route
    enc, src = r.encap, r.src
    _DST_PACK.pack_into(
        mv, e.dst * _DST_PACK.size,
        1,                           # refcnt: the FIB's own reference
        gen, RTN[r.type], r.family, flags, e.nh_count, e.nh_first, r.table, 0,
        ENCAP_NONE if enc is None else _encap_type(enc), r.hoplimit or 0, r.prefix._prefixlen,
        r.mtu or 0, r.metric, _NO_SRC if src is None else src.packed.ljust(16, b"\0"), 0, 0)


_NO_SRC = bytes(16)


def _fast_word(e: _Entry) -> int:
    """_fast_words of one complete new entry, from its route (no dead flag
    on a new entry)."""
    r = e.route
    if (r.family == 6 and r.type == "unicast" and r.encap is None and e.nh_count == 1
            and not r.mtu):
        return e.nh_first + 1
    return 0


# route types a strict-interface lookup can return: the others (blackhole,
# unreachable, prohibit, throw) are reject routes on lo (fib6_is_reject)
_STRICT_TYPES = frozenset(("unicast", "local", "anycast", "multicast"))


def _lpm_keys(nets: list, family: int) -> tuple:
    """(addresses, lengths) of networks as Lpm.add_many takes them: the
    compiled walk (fastpath._prefix.lpm_keys) where it is built, else this,
    the networks' fields (ipaddress's ``_ip`` and ``_prefixlen``), the
    reference it is tested against."""
    if _prefix is not None:
        return _prefix.lpm_keys(nets, family)
    if family == 6:
        addrs = np.frombuffer(b"".join([x.network_address._ip.to_bytes(16, "big") for x in nets]),
                              dtype=np.uint8).reshape(-1, 16)
    else:
        addrs = np.fromiter([x.network_address._ip for x in nets], np.uint32, len(nets))
    return addrs, np.fromiter([x._prefixlen for x in nets], np.uint8, len(nets))


def _holds_strict(net) -> bool:
    """Whether an IPv6 prefix holds an address rt6_need_strict() is true of."""
    a, plen = _net_int(net), net._prefixlen
    if plen >= 8 and (a >> 120) not in (0, 0xFE, 0xFF):
        return False           # (most prefixes: decided by the first byte)
    for s, sl in STRICT_NETS:
        if (a ^ s) >> (128 - min(plen, sl)) == 0:
            return True
    return False


def _strict_routes(state, best_get, cand_keys=None) -> list:
    """The IPv6 routes a strict-interface lookup may return, as (route, is
    the best route of its prefix), in the kernel's order within a prefix:
    by metric, then as inserted.  Besides the configured routes: the
    automatic routes of a second device for a key a first one holds (the
    same link-local address or prefix on two interfaces: the kernel keeps
    both, the configuration one per key).  ``best_get``: (family, table,
    prefix) -> its best route; ``cand_keys``: the route keys to consider
    (None: every key of ``state.routes``)."""
    if cand_keys is None:
        cand = [r for k, r in state.routes.items() if k[0] == 6 and _holds_strict(k[2])]
    else:
        cand = [state.routes[k] for k in cand_keys]
    for itf in state.interfaces.values():
        for k, r in state._auto_for(itf).items():
            cur = state.routes.get(k)
            if (k[0] == 6 and cur is not None and cur != r and cur.proto == "kernel"
                    and cur.dev != r.dev and _holds_strict(k[2])):
                cand.append(r)
    out = []
    for r in cand:
        if r.type in _STRICT_TYPES and _usable(r, state):
            out.append((r, best_get((6, r.table, r.prefix)) is r))
    return out


def _strict_rows(t: Tables, state, strict, entries, strict_entries) -> np.ndarray:
    """Tables.strict6: a row per (route, live device) of ``strict``, by
    table slot, longest prefix first, then metric and insertion order --
    the order in which fib6_table_lookup() with RT6_LOOKUP_F_IFACE
    (rt6_select, then fib6_backtrack) tries them."""
    slot_of = {tb: k for k, tb in enumerate(t.slots.get(6, []))}
    rows = []
    for seq, (r, is_best) in enumerate(strict):
        e = entries[(6, r.table, r.prefix)] if is_best else \
            strict_entries[(6, r.table, r.prefix, r.metric, r.dev)]
        slot = slot_of.get(r.table)
        if slot is None:
            continue
        devs = []
        for (_gw, _dev, _w, ifidx) in e.sig[2]:
            if ifidx and ifidx not in devs:
                devs.append(ifidx)
        for ifidx in devs:
            rows.append(((slot, -r.prefix.prefixlen, r.metric, seq), r, e.dst, ifidx))
    rows.sort(key=lambda x: x[0])
    arr = np.zeros(len(rows), dtype=STRICT_DTYPE)
    for k, ((slot, _, _, _), r, dst, ifidx) in enumerate(rows):
        arr[k]["prefix"] = addr16(r.prefix.network_address)
        arr[k]["plen"] = r.prefix.prefixlen
        arr[k]["slot"] = slot
        arr[k]["dst"] = dst
        arr[k]["oif"] = ifidx
    return arr


def build_srh(segs, hmac_keyid=None, inline=False) -> bytes:
    """The SRH iproute2 builds for ``srh segs A,B,..`` (parse_srh): segments
    stored last to first, segments left = last entry; for an insertion
    (End.B6, seg6 inline) one more slot, segments[0], receives the packet's
    destination at run time; an HMAC TLV (type 5, length 38, key id) when a
    key is given."""
    segs = [ipaddress.IPv6Address(x) for x in segs]
    n = len(segs) + (1 if inline else 0)
    srhlen = 8 + 16 * n + (40 if hmac_keyid is not None else 0)
    b = bytearray(srhlen)
    b[1] = (srhlen >> 3) - 1
    b[2] = 4
    b[3] = b[4] = n - 1
    if hmac_keyid is not None:
        b[5] = 0x08
    for k, a in enumerate(segs):
        i = n - 1 - k
        b[8 + 16 * i: 24 + 16 * i] = a.packed
    if hmac_keyid is not None:
        off = srhlen - 40
        b[off] = 5
        b[off + 1] = 38
        b[off + 4: off + 8] = int(hmac_keyid).to_bytes(4, "big")
    return bytes(b)


def reduce_srh(srh: bytes) -> bytes:
    """seg6_do_srh_encap_red(): the SRH without its first SID (which only
    goes into the outer destination): last entry - 1, hdrlen - 2, segments
    left kept, TLVs kept; no SRH at all for a single SID without HMAC."""
    first = srh[4]
    if first == 0:
        return b"" if not srh[5] & 0x08 else srh
    red = bytearray(srh[:8 + 16 * first]) + srh[8 + 16 * (first + 1):]
    red[4] -= 1
    red[1] -= 2
    return bytes(red)


def _blob_put(t: Tables, e: _Entry, rec, srh: bytes) -> None:
    """An SRH template into the blob, at an offset that stays the entry's."""
    off = t.blob_pool.alloc(len(srh))
    t.blob = t._grown(t.blob, off + len(srh))
    t.blob[off:off + len(srh)] = np.frombuffer(srh, dtype=np.uint8)
    rec["srh_off"] = off
    rec["srh_len"] = len(srh)
    e.blob = (off, len(srh))


def _headend_record(t: Tables, e: _Entry, enc, route, oif: int):
    """The S6L record of an ``encap seg6`` route: mode, the SRH template as
    the datapath pushes it (reduced for encap.red / l2encap.red; one more
    slot, segments[0], for inline), the outer destination (the first SID),
    the route's tunsrc, and its device (``oif``: set_tun_src selects the
    source on it)."""
    rec = np.zeros(1, dtype=S6L_DTYPE)[0]
    rec["action"] = S6_HEADEND
    rec["mode"] = SEG6_MODES[enc.mode]
    rec["oif"] = oif
    srh = build_srh(enc.segs, enc.hmac, inline=(enc.mode == "inline"))
    if enc.mode in ("encap.red", "l2encap.red"):
        srh = reduce_srh(srh)
    rec["nh6"] = addr16(enc.segs[0])
    if route.tunsrc is not None:
        rec["tunsrc"] = addr16(route.tunsrc)
    _blob_put(t, e, rec, srh)
    return rec


def _hmac_key_records(state) -> np.ndarray:
    keys = np.zeros(len(state.hmac_keys), dtype=HMAC_KEY_DTYPE)
    for k, (keyid, (algo, secret)) in enumerate(sorted(state.hmac_keys.items())):
        keys[k]["keyid"] = keyid
        keys[k]["algo"] = HMAC_ALGO_IDS[algo]
        keys[k]["slen"] = len(secret)
        keys[k]["secret"][:len(secret)] = np.frombuffer(secret, np.uint8)
    return keys


def _compile_seg6local(t: Tables, state, entries, keys: bool = True) -> None:
    """One S6L record per new seg6local route entry, and per new ``encap
    seg6`` route (action S6_HEADEND); dst.encap indexes it, at an index that
    stays the entry's until it is reclaimed; SRH templates likewise in the
    blob.  ``keys``: the HMAC key records are made again too (False: the
    keys did not change)."""
    from .config import SEG6LOCAL_ACTIONS
    for e in entries:
        enc = e.route.encap
        et = _encap_type(enc)
        if et == ENCAP_SEG6:
            dev = _nexthop_dev(e.route.nexthops[0], state) if e.route.nexthops else None
            rec = _headend_record(t, e, enc, e.route, t.ifindex.get(dev, 0))
        elif et == ENCAP_SEG6LOCAL:
            rec = np.zeros(1, dtype=S6L_DTYPE)[0]
            rec["action"] = SEG6LOCAL_ACTIONS[enc.action].uapi
            rec["flavors"] = sum(FLAVOR_BITS[f] for f in enc.flavors)
            rec["lblen"] = enc.lblen or 0
            rec["nflen"] = enc.nflen or 0
            rec["oif"] = t.ifindex.get(enc.oif, 0) if enc.oif else 0
            table = enc.table if enc.table is not None else enc.vrftable
            rec["table"] = table or 0
            if enc.nh6 is not None:
                rec["nh6"] = addr16(enc.nh6)
            if enc.nh4 is not None:
                rec["nh4"] = np.frombuffer(enc.nh4.packed, np.uint8)
            if enc.srh_segs:
                _blob_put(t, e, rec, build_srh(enc.srh_segs, enc.srh_hmac,
                                               inline=(enc.action == "End.B6")))
            rec["count"] = 1 if enc.count else 0
        else:
            continue
        e.s6l = t.s6l_pool.alloc(1)
        t.rows_version += 1
        t.dsts[e.dst]["encap"] = e.s6l
        t.s6l_recs[e.s6l] = rec
        t.s6l_arr = t._grown(t.s6l_arr, e.s6l + 1)
        t.s6l_gen = t._grown(t.s6l_gen, e.s6l + 1)
        t.s6l_arr[e.s6l] = rec
        while len(t.s6l_routes) <= e.s6l:
            t.s6l_routes.append(None)
        t.s6l_routes[e.s6l] = e.route
    if keys or t.hmac_keys is None:
        t.hmac_keys = _hmac_key_records(state)


def _seg6local_slots(t: Tables, made=None) -> None:
    """The LPM slots of the tables seg6local records name, written into
    the records of the entries ``made`` (None: all).  Slots are renumbered
    when tables come and go: then every record is rewritten, into a new
    array (a Dataplane's workers on the previous snapshot keep the one
    numbered for it).  ``s6l`` and ``srh_blob`` view the arrays, no copy."""
    slots = (tuple(t.slots.get(6, [])), tuple(t.slots.get(4, [])))
    if slots != t.s6l_slots or made is None:
        if t.s6l_slots is not None and slots != t.s6l_slots:
            t.s6l_arr = _copied(t, t.s6l_arr)
        todo = list(t.s6l_recs)
        t.s6l_slots = slots
    else:
        todo = [e.s6l for e in made if e.s6l >= 0]
    slot6 = {tb: k for k, tb in enumerate(slots[0])}
    slot4 = {tb: k for k, tb in enumerate(slots[1])}
    if todo:
        t.rows_version += 1
    for k in todo:
        enc = t.s6l_routes[k].encap
        if _encap_type(enc) != ENCAP_SEG6LOCAL:
            continue
        table = enc.table if enc.table is not None else enc.vrftable
        t.s6l_arr[k]["slot6"] = slot6.get(table, -1) if table is not None else -1
        t.s6l_arr[k]["slot4"] = slot4.get(table, -1) if table is not None else -1
    t.s6l = t.s6l_arr[:t.s6l_pool.end]
    t.srh_blob = t.blob[:max(t.blob_pool.end, 8)]


def _copied(t: Tables, a: np.ndarray) -> np.ndarray:
    c = t._zeros(len(a), a.dtype)
    c[...] = a
    return c


# ---------------------------------------------------------------------------
# Deltas: a configure that changes routes updates only their prefixes.

def _best_of(state, key):
    """The best usable route of one (family, table, prefix), or None (as
    _best_routes, from the prefix's own routes only)."""
    return _best_among(state.routes.prefix_routes(*key), state)


def _best_among(routes, state):
    """The usable route of least metric of ``routes`` (one prefix's), or None."""
    best = None
    for r in routes:
        if _usable(r, state) and (best is None or r.metric < best.metric):
            best = r
    return best


def plan_delta(t: Tables, state, prefixes, devices_changed: bool = False) -> list:
    """The table operations that bring the entries of ``prefixes`` ((family,
    table, network) keys) in line with ``state``, checked but not applied:
    ("install", key, route, sig) -- a new entry (an installed one is
    retired), ("keep", key, route, sig) -- the installed entry stays, its
    route object is the new one's (same signature), ("remove", key, None,
    None) -- the installed entry is retired and the prefix leaves its LPM.
    Raises ValueError (as compile_tables) and changes nothing.  Valid only
    for the prefixes that may have changed: with ``devices_changed``, those
    of every route through a device (or gateway) whose state or addresses
    changed -- an unchanged route's signature is then computed again."""
    ops = []
    sigs = {}
    pr, eget = state.routes.prefix_routes, t.entries.get
    # (whether a unicast route's nexthops are usable, per nexthops tuple: a
    # feed's routes share theirs, and nothing here changes the devices)
    live = {}
    for k in prefixes:
        rs = pr(*k)
        if len(rs) == 1:
            r = rs[0]
            nhs = r.nexthops
            if nhs and r.type == "unicast":
                h = live.get(id(nhs))
                if h is None or h[0] is not nhs:
                    h = live[id(nhs)] = (nhs, _usable(r, state))
                if not h[1]:
                    r = None
            elif not _usable(r, state):
                r = None
        else:
            r = _best_among(rs, state)
        cur = eget(k)
        if r is None:
            if cur is not None:
                ops.append(("remove", k, None, None))
            continue
        if cur is not None and cur.route is r and not devices_changed:
            continue
        sig = _route_sig(r, state, sigs)
        if cur is not None and cur.sig == sig:
            ops.append(("keep", k, r, sig))
            continue
        for (gw, _dev, _weight, ifidx) in sig[2]:
            if r.type == "unicast" and not ifidx:
                raise ValueError(f"route {r.prefix}: gateway {gw} is not reachable from any interface"
                                 " (RTNETLINK answers: Network is unreachable)")
        ops.append(("install", k, r, sig))
    return ops


def update_tables(t: Tables, state, ops: list, prefixes=None, defer_lpm: bool = False,
                  small: bool = True) -> Tables:
    """Apply ``plan_delta``'s operations to ``t`` in place: the small tables
    (devices, addresses, neighbours, rules, seg6local parameters, strict
    rows) are rebuilt, the route entries, nexthop rows and LPM prefixes of
    the operations only.  As compile_tables: an installed entry is never
    rewritten (a changed route gets a new entry, the old one goes to
    ``t.retired``) and a replaced prefix is overwritten in its LPM.
    ``prefixes``: those ``ops`` were planned for (None: unknown); when none
    of them holds a strict-interface destination and no table appears, the
    strict rows stay as they are.  ``defer_lpm``: the LPM changes are not
    made but left in ``t.lpm_pending`` for ``apply_lpm``, once readers
    elsewhere know the new entries (a Dataplane's order: entries and rows
    written, snapshot published, grace period, then the LPMs).  ``small``
    False: the devices, addresses, neighbours, rules, sysctls and keys did
    not change, their tables stay as they are (unless a table appears).
    ``ops`` is consumed: emptied once read."""
    nlpms = len(t.lpms)
    if small:
        _compile_small(t, state)
    need_strict = (prefixes is None
                   or any(k[0] == 6 and _holds_strict(k[2]) for k in prefixes)
                   or any(op == "install" and k[:2] not in t.lpms for op, k, _r, _s in ops))
    retired, made, gone = [], [], []
    entries, dst_routes = t.entries, t.dst_routes
    for op, k, r, sig in ops:
        cur = entries.get(k)
        if op == "keep":
            entries[k] = _Entry(cur.dst, r, cur.sig, cur.nh_first, cur.nh_count, cur.s6l, cur.blob)
            dst_routes[cur.dst] = r
            continue
        if cur is not None:
            retired.append(cur)
            del entries[k]
            dst_routes.pop(cur.dst, None)
            if cur.route.type == "throw":
                t.throw_count[k[:2]] -= 1
        if op == "install":
            e = entries[k] = _Entry(-1, r, sig)
            made.append((k, e))
            if r.type == "throw":
                t.throw_count[k[:2]] = t.throw_count.get(k[:2], 0) + 1
        else:
            gone.append(k)
    # (read once: a load's a tuple per route, let go before the entries,
    # rows and LPM changes are made)
    ops.clear()
    # the strict-interface candidates: few (prefixes overlapping fe80::/10,
    # ff00::/8, ::1), found through the RouteTable's index, diffed as in
    # compile_tables
    if need_strict:
        keys = state.routes.strict_keys() if hasattr(state.routes, "strict_keys") else None
        strict = _strict_routes(state, lambda p: _best_of(state, p), keys)
        new_strict, schanged, sretired = _diff_strict(t, state, strict)
    else:
        new_strict, schanged, sretired = t.strict_entries, [], []
    for e in sretired:
        t.dst_routes.pop(e.dst, None)
    made_entries = [e for _k, e in made] + [new_strict[k] for k in schanged]
    _install_all(t, made_entries)
    retired += sretired
    t.retired.extend(retired)
    t.strict_entries = new_strict
    for e in made_entries:
        t.dst_routes[e.dst] = e.route
    if need_strict:
        for e in new_strict.values():
            t.dst_routes[e.dst] = e.route
    t.nhs = t.nh_arr[:max(t.nh_pool.end, 1)]
    # --- LPMs: removed prefixes first, then the new entries
    pending = []
    for fam, table, net in gone:
        lpm = t.lpms.get((fam, table))
        if lpm is not None:
            pending.append((lpm, net, 0))
    _compile_seg6local(t, state, made_entries, keys=small)
    if len(made_entries) > 16:
        idx = np.fromiter((e.dst for e in made_entries), dtype=np.int64, count=len(made_entries))
        t.dfast[idx] = _fast_words(t.dsts[idx])
    else:
        for e in made_entries:
            t.dfast[e.dst] = _fast_word(e)
    # (the LPM of the last (family, table) kept: a load's runs share one)
    last = lpm = None
    for (fam, table, net), e in made:
        if last is None or last[0] != fam or last[1] != table:
            last = (fam, table)
            lpm = t.lpms.get(last)
            if lpm is None:
                lpm = t.lpms[last] = t.new_lpm(fam)
        pending.append((lpm, net, e.dst))
    t.lpm_pending.extend(pending)      # (after what an earlier deferred update left)
    if not defer_lpm:
        apply_lpm(t)
    t.throw_tables = {k for k, n in t.throw_count.items() if n}
    if small or len(t.lpms) != nlpms:
        _compile_rules(t, state)
    if need_strict:
        t.strict6 = _strict_rows(t, state, strict, t.entries, new_strict)
    _seg6local_slots(t, made_entries)
    return t

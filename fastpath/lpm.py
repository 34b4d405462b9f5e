"""Longest-prefix match for IPv4 and IPv6: the compiled DIR-24-8 tables.

``Lpm`` owns the numpy arrays of a DIR-24-8 multibit trie (as DPDK
``rte_lpm`` / ``rte_lpm6``; layout and entry encoding in ``pyx/lpm.pxd``) and
the set of installed prefixes, from which it computes the covering route that
replaces a deleted prefix.  Updates run as nogil loops in
``fastpath._lpm``; lookups are batched (``lookup_batch``) or done per packet in
Cython with ``lpm4_lookup`` / ``lpm6_lookup`` from ``lpm.pxd`` on ``tbl24`` and
``groups``.

Values are opaque 23-bit integers 1..2**23-1 (0 means "no route"); the FIB
stores a route id + 1.  The installed prefixes (for ``get``, ``prefixes`` and
the covering route of a deleted prefix) are kept in a compiled hash over numpy
arrays as well, not in Python dicts: 1M prefixes must fit well under 200 MB.

``groups`` is reallocated (doubled) when it fills up: code that keeps the
arrays must re-read ``Lpm.groups`` after any ``add``/``add_many``
(``Lpm.generation`` changes whenever the arrays are replaced).
"""
from __future__ import annotations

import ipaddress
import operator

import numpy as np

from . import _lpm

__all__ = ["Lpm", "MAX_VALUE"]

MAX_VALUE = _lpm.MAX_VALUE          # 2**23 - 1

_NETWORK = {4: ipaddress.IPv4Network, 6: ipaddress.IPv6Network}


class Lpm:
    """Longest-prefix-match table of one address family (4 or 6)."""

    def __init__(self, family: int, alloc=None):
        """``alloc``: None, or ``alloc(shape, dtype)`` returning a zeroed
        array for ``tbl24`` and ``groups`` (the Dataplane's shared memory)."""
        if isinstance(family, bool) or family not in (4, 6):
            raise ValueError(f"family must be 4 or 6, not {family!r}")
        self.family = int(family)
        self.width = 32 if family == 4 else 128
        self._nbytes_addr = self.width // 8
        self._core = _lpm.LpmCore(self.family, alloc=alloc)
        w = self.width
        self._masks = [((1 << d) - 1) << (w - d) for d in range(w + 1)]

    # ------------------------------------------------------------------
    # the arrays (replaced when they grow: re-read after updates)

    @property
    def tbl24(self) -> np.ndarray:
        """uint32[2**24] first-level table."""
        return self._core.tbl24

    @property
    def groups(self) -> np.ndarray:
        """uint32[G, 256] groups (row 0 unused)."""
        return self._core.groups

    @property
    def generation(self) -> int:
        """Incremented whenever an array is replaced by a larger one."""
        return self._core.generation

    @property
    def groups_in_use(self) -> int:
        return self._core.groups_in_use

    # ------------------------------------------------------------------
    # readers in other processes (Dataplane workers): RCU-style updates

    @property
    def defer_free(self) -> bool:
        """Freed groups wait in limbo until ``release_deferred()`` (call it
        after a grace period); setting False releases them at once."""
        return self._core.defer_free

    @defer_free.setter
    def defer_free(self, on: bool) -> None:
        self._core.defer_free = bool(on)

    @property
    def groups_deferred(self) -> int:
        return self._core.groups_deferred

    def release_deferred(self) -> int:
        return self._core.release_deferred()

    def groups_needed(self, depth: int) -> int:
        """Upper bound of the groups one add of a /depth may allocate."""
        return self._core.groups_needed(depth)

    def reserve(self, n: int) -> bool:
        """Grow ``groups`` now if fewer than ``n`` are free (True if it
        did), so that the adds that follow never replace the array."""
        return self._core.reserve(n)

    @property
    def frozen(self) -> bool:
        """While set, a growth of ``groups`` is refused (RuntimeError)."""
        return self._core.frozen

    @frozen.setter
    def frozen(self, on: bool) -> None:
        self._core.frozen = bool(on)

    @property
    def nbytes(self) -> int:
        """Bytes allocated for the tables and the prefix set (tbl24 counted
        at its full size, though only touched pages use memory)."""
        c = self._core
        return sum(a.nbytes for a in (c.tbl24, c.groups, c.free_stack, c.limbo, c.meta,
                                      c.hkeys, c.hdepth, c.hvals, c.dcount))

    # ------------------------------------------------------------------
    # parsing

    def _parse_prefix(self, prefix) -> tuple[bytes, int]:
        """(network address bytes with host bits cleared, prefix length)."""
        if isinstance(prefix, str):
            try:
                net = ipaddress.ip_network(prefix.strip(), strict=False)
            except ValueError as exc:
                raise ValueError(f"invalid prefix {prefix!r}: {exc}") from None
        elif isinstance(prefix, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            net = prefix
        elif isinstance(prefix, (ipaddress.IPv4Interface, ipaddress.IPv6Interface)):
            net = prefix.network
        else:
            raise TypeError(
                f"prefix must be a str or an ipaddress network, not {type(prefix).__name__}")
        if net.version != self.family:
            raise ValueError(f"prefix {prefix!s} is IPv{net.version}, table is IPv{self.family}")
        depth = net.prefixlen
        return net.network_address.packed, depth

    def _parse_address(self, addr) -> int:
        if isinstance(addr, str):
            try:
                a = ipaddress.ip_address(addr.strip())
            except ValueError as exc:
                raise ValueError(f"invalid address {addr!r}: {exc}") from None
        elif isinstance(addr, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
            a = addr
        elif isinstance(addr, (bytes, bytearray, memoryview)):
            b = bytes(addr)
            if len(b) != self._nbytes_addr:
                raise ValueError(
                    f"IPv{self.family} address must be {self._nbytes_addr} bytes, not {len(b)}")
            return int.from_bytes(b, "big")
        elif isinstance(addr, (int, np.integer)) and not isinstance(addr, (bool, np.bool_)):
            a = int(addr)
            if not 0 <= a < (1 << self.width):
                raise ValueError(f"address {a} out of range for IPv{self.family}")
            return a
        else:
            raise TypeError(
                f"address must be a str, an ipaddress address or bytes, not {type(addr).__name__}")
        if a.version != self.family:
            raise ValueError(f"address {a} is IPv{a.version}, table is IPv{self.family}")
        return int(a)

    @staticmethod
    def _check_value(value) -> int:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError("value must be an int, not bool")
        try:
            v = operator.index(value)
        except TypeError:
            raise TypeError(f"value must be an int, not {type(value).__name__}") from None
        if not 1 <= v <= MAX_VALUE:
            raise ValueError(f"value must be in 1..{MAX_VALUE}, not {v}")
        return v

    def _network(self, key: bytes, depth: int):
        return _NETWORK[self.family]((key, depth))

    # ------------------------------------------------------------------
    # updates

    def add(self, prefix, value: int) -> None:
        """Install ``prefix`` -> ``value`` (1..2**23-1), replacing any value."""
        key, depth = self._parse_prefix(prefix)
        self._core.add(key, depth, self._check_value(value))

    def delete(self, prefix) -> int:
        """Remove ``prefix``; returns its value.  KeyError if not installed.

        Its addresses go to the covering route: the longest installed prefix
        strictly shorter that contains it.
        """
        key, depth = self._parse_prefix(prefix)
        old = self._core.delete(key, depth)
        if old == 0:
            raise KeyError(f"prefix {self._network(key, depth)} not installed")
        return old

    def cover(self, prefix) -> tuple[int, int]:
        """(value, prefix length) of the route that takes over ``prefix``'s
        addresses when it is deleted; (0, 0) if none."""
        key, depth = self._parse_prefix(prefix)
        return self._core.cover(key, depth)

    def _address_array(self, addrs, what: str = "addrs") -> np.ndarray:
        """Validated C-contiguous address array (IPv6: uint8[N,16]; IPv4:
        uint32[N] host order, or uint8[N,4] network order)."""
        if not isinstance(addrs, np.ndarray):
            raise TypeError(f"{what} must be a numpy array, not {type(addrs).__name__}")
        if self.family == 6:
            if addrs.dtype != np.uint8:
                raise TypeError(f"IPv6 {what} must be uint8[N, 16], not {addrs.dtype}")
            if addrs.ndim != 2 or addrs.shape[1] != 16:
                raise ValueError(f"IPv6 {what} must have shape (N, 16), not {addrs.shape}")
        elif addrs.dtype == np.uint32:
            if addrs.ndim != 1:
                raise ValueError(f"IPv4 uint32 {what} must have shape (N,), not {addrs.shape}")
        elif addrs.dtype == np.uint8:
            if addrs.ndim != 2 or addrs.shape[1] != 4:
                raise ValueError(f"IPv4 uint8 {what} must have shape (N, 4), not {addrs.shape}")
        else:
            raise TypeError(
                f"IPv4 {what} must be uint32[N] (host order) or uint8[N, 4], not {addrs.dtype}")
        return np.ascontiguousarray(addrs)

    @staticmethod
    def _int_array(x, what: str, n: int, lo: int, hi: int, dtype) -> np.ndarray:
        arr = np.asarray(x)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{what} must be an integer array, not {arr.dtype}")
        if arr.shape != (n,):
            raise ValueError(f"{what} must have shape ({n},), not {arr.shape}")
        if n and (arr.min() < lo or arr.max() > hi):
            raise ValueError(f"{what} must be in {lo}..{hi}")
        return np.ascontiguousarray(arr, dtype=dtype)

    def add_many(self, addrs, depths, values) -> None:
        """Bulk insert; a later duplicate prefix replaces an earlier one.

        addrs: as for ``lookup_batch``; depths: integers 0..32/128 (uint8);
        values: integers 1..2**23-1 (uint32).  Host bits are ignored.  The
        whole input is validated before anything is inserted.
        """
        a = self._address_array(addrs)
        n = a.shape[0]
        depths = self._int_array(depths, "depths", n, 0, self.width, np.uint8)
        values = self._int_array(values, "values", n, 1, MAX_VALUE, np.uint32)
        if n == 0:
            return
        if self.family == 6:
            self._core.add_many6(a, depths, values)
        else:
            if a.dtype == np.uint8:
                a = a.view(">u4").reshape(n).astype(np.uint32)
            self._core.add_many4(a, depths, values)

    # ------------------------------------------------------------------
    # queries

    def get(self, prefix) -> int | None:
        """Exact-match value of ``prefix`` (None if not installed)."""
        key, depth = self._parse_prefix(prefix)
        return self._core.get(key, depth) or None

    def __contains__(self, prefix) -> bool:
        return self.get(prefix) is not None

    def lookup(self, addr) -> int:
        """Value of the longest prefix matching ``addr``; 0 = no match."""
        a = self._parse_address(addr)
        if self.family == 4:
            return self._core.lookup4(a)
        return self._core.lookup6(a.to_bytes(16, "big"))

    def lookup_batch(self, addrs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Longest-prefix match of every address; returns uint32[N] (0 = miss).

        IPv6: uint8[N, 16]; IPv4: uint32[N] (host order) or uint8[N, 4].
        ``out``, if given, must be a writable C-contiguous uint32[N].
        """
        a = self._address_array(addrs)
        n = a.shape[0]
        if out is None:
            out = np.empty(n, dtype=np.uint32)
        else:
            if not isinstance(out, np.ndarray):
                raise TypeError(f"out must be a numpy array, not {type(out).__name__}")
            if out.dtype != np.uint32:
                raise TypeError(f"out must be uint32, not {out.dtype}")
            if out.shape != (n,):
                raise ValueError(f"out must have shape ({n},), not {out.shape}")
            if not out.flags.c_contiguous or not out.flags.writeable:
                raise ValueError("out must be C-contiguous and writable")
        if self.family == 6:
            self._core.lookup6_batch(a, out)
        elif a.dtype == np.uint32:
            self._core.lookup4_batch(a, out)
        else:
            self._core.lookup4b_batch(a, out)
        return out

    def __len__(self) -> int:
        return len(self._core)

    def prefixes(self):
        """Iterate (ipaddress network, value) over the installed prefixes,
        sorted by prefix length, then address."""
        keys, depths, values = self._core.items()
        if self.family == 4:
            addrs = keys[:, 0].tolist()
        else:
            k = keys.astype(">u4")
            addrs = [int.from_bytes(row, "big") for row in
                     (k[i].tobytes() for i in range(len(k)))]
        net = _NETWORK[self.family]
        items = sorted(zip(depths.tolist(), addrs, values.tolist()))
        for d, a, v in items:
            yield net((a, d)), v

    def __iter__(self):
        return (n for n, _ in self.prefixes())

    def __repr__(self) -> str:
        return (f"<Lpm IPv{self.family}: {len(self)} prefixes, "
                f"{self.groups_in_use} groups, {self.nbytes / 2**20:.1f} MiB>")

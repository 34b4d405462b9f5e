# cython: language_level=3
# Compact route prefixes (``fastpath._prefix``).
#
# Every route of the configuration is keyed by its prefix, and a change
# hashes and compares that prefix a dozen or more times (the route dict's
# keys, the per-prefix metric index, the compiled entries' keys).  An
# ``ipaddress`` network does both in Python (~170 ns more per dict lookup
# than a key whose parts hash in C, measured) and costs ~260 bytes: the
# network with its instance values, its address object, the address's
# 128-bit integer and the cached hash.
#
# ``Prefix`` keeps the masked address as two 64-bit words, the length and
# the hash (the one ``ipaddress`` gives: hash(int(address) ^ int(netmask)))
# in C, and answers hash and comparisons in C.  It is the C base of
# fastpath.config.lexer's ``_Net4``/``_Net6``, Python classes that also
# inherit ``ipaddress.IPv4Network``/``IPv6Network``: they are ipaddress
# networks (isinstance, every method and property), whose ``network_address``,
# ``netmask``, ``prefixlen`` and ``_prefixlen`` are this type's properties
# (an address object made when it is read, not stored).  Without this module
# built, those classes are ipaddress networks that cache their hash
# (lexer._HashedOnce), the reference the tests hold this one to.
#
# Why compiled code and not a library: the type sits in the configuration's
# hot path (every key of every route), and what it buys is exactly the C
# slots (tp_hash, tp_richcompare) and the C fields.

from cpython.object cimport PyObject, PyTypeObject
from libc.stdint cimport uint8_t, uint64_t
from libc.stdio cimport snprintf

import numpy as np

cdef extern from "Python.h":
    ctypedef Py_ssize_t Py_hash_t

# Python's hash of a non-negative int is its value modulo 2**61 - 1
# (sys.hash_info.modulus, on every 64-bit build): checked at import below
cdef uint64_t _MOD = (<uint64_t>1 << 61) - 1


cdef inline Py_hash_t _int_hash(uint64_t hi, uint64_t lo) noexcept nogil:
    # (hi * 2**64 + lo) mod (2**61 - 1), and 2**64 = 8 * 2**61 = 8 (mod it)
    cdef uint64_t h = ((hi % _MOD) * 8) % _MOD + lo % _MOD
    if h >= _MOD:
        h -= _MOD
    return <Py_hash_t>h          # (< 2**61: never -1)


cdef inline void _mask(int plen, int bits, uint64_t *mhi, uint64_t *mlo) noexcept nogil:
    # the netmask of ``plen`` in a ``bits``-bit address, as two words (an
    # IPv4 address is the low word)
    cdef uint64_t ones = ~(<uint64_t>0)
    if bits == 32:
        mhi[0] = 0
        mlo[0] = 0 if plen == 0 else ((ones << (32 - plen)) & (ones >> 32))
    elif plen >= 64:
        mhi[0] = ones
        mlo[0] = 0 if plen == 64 else (ones << (128 - plen))
    else:
        mlo[0] = 0
        mhi[0] = 0 if plen == 0 else (ones << (64 - plen))


cdef class Prefix:
    """A masked prefix of IPv4 or IPv6: see the module's comment.  Made by
    ``make`` (or a subclass's ``__init__`` through ``_set``)."""

    cdef uint64_t hi, lo         # the masked address (IPv4: lo), host order
    cdef Py_hash_t h
    cdef uint8_t plen, bits      # bits: 32 or 128; 0 until set

    cdef int _fill(self, object v, int plen, int bits) except -1:
        cdef uint64_t hi, lo, mhi, mlo
        if bits != 32 and bits != 128:
            raise ValueError(f"an address is 32 or 128 bits, not {bits}")
        if plen < 0 or plen > bits:
            raise ValueError(f"prefix length {plen} out of range for a {bits}-bit address")
        if v < 0 or v >> bits:
            raise ValueError(f"address {v!r} out of range for {bits} bits")
        lo = <uint64_t>(v & 0xFFFFFFFFFFFFFFFF)
        hi = <uint64_t>(v >> 64)
        _mask(plen, bits, &mhi, &mlo)
        if (hi & ~mhi) or (lo & ~mlo):
            raise ValueError(f"{v:#x}/{plen} has host bits set")
        self.hi, self.lo, self.plen, self.bits = hi, lo, plen, bits
        self.h = _int_hash(hi ^ mhi, lo ^ mlo)
        return 0

    def _set(self, v, int plen):
        """Set the fields of a new prefix: ``v`` the masked address as an
        int, ``plen`` its length (the family from the class's
        ``_max_prefixlen``).  ValueError for host bits or out of range."""
        if self.bits:
            raise TypeError("a Prefix is immutable")
        self._fill(v, plen, type(self)._max_prefixlen)

    cdef inline object _value(self):
        if self.bits == 32:
            return <object>self.lo
        return (<object>self.hi << 64) | <object>self.lo

    @property
    def _v(self):
        """The masked address as an int (``int(self.network_address)``
        without making the address)."""
        return self._value()

    @property
    def _prefixlen(self):
        return self.plen

    @property
    def prefixlen(self):
        return self.plen

    @property
    def network_address(self):
        return self._address_class(self._value())

    @property
    def netmask(self):
        return type(self)._make_netmask(self.plen)[0]

    def __hash__(self):
        return self.h

    def __str__(self):
        # ipaddress's text, made in C: dotted quad, or the hextets in
        # lowercase hex with the longest run of two or more zero hextets
        # (the first of equal runs) as "::" (ipaddress._compress_hextets,
        # RFC 5952).  IPv4-mapped addresses (::ffff:0:0/96), which Python
        # versions print differently, are left to ipaddress.
        cdef char buf[64]
        cdef int n = 0, k, best = -1, blen = 0, cur = -1, clen = 0
        cdef unsigned int hx[8]
        if self.bits == 32:
            n = snprintf(buf, sizeof(buf), "%u.%u.%u.%u/%u", <unsigned int>((self.lo >> 24) & 255),
                         <unsigned int>((self.lo >> 16) & 255), <unsigned int>((self.lo >> 8) & 255),
                         <unsigned int>(self.lo & 255), <unsigned int>self.plen)
            return buf[:n].decode("ascii")
        if self.hi == 0 and (self.lo >> 32) == 0xFFFF:
            return f"{self.network_address}/{self.plen}"
        for k in range(4):
            hx[k] = <unsigned int>((self.hi >> (48 - 16 * k)) & 0xFFFF)
            hx[4 + k] = <unsigned int>((self.lo >> (48 - 16 * k)) & 0xFFFF)
        for k in range(8):
            if hx[k] == 0:
                if cur < 0:
                    cur = k
                clen += 1
                if clen > blen:
                    blen, best = clen, cur
            else:
                cur, clen = -1, 0
        if blen < 2:
            best, blen = 8, 0
        for k in range(best):
            n += snprintf(buf + n, sizeof(buf) - n, "%x:" if k + 1 < best else "%x", hx[k])
        if blen:
            n += snprintf(buf + n, sizeof(buf) - n, "::")
        for k in range(best + blen, 8):
            n += snprintf(buf + n, sizeof(buf) - n, "%x:" if k < 7 else "%x", hx[k])
        n += snprintf(buf + n, sizeof(buf) - n, "/%u", <unsigned int>self.plen)
        return buf[:n].decode("ascii")

    def __richcmp__(self, other, int op):
        cdef Prefix o
        cdef int c = 0
        cdef bint same
        if isinstance(other, Prefix):
            o = <Prefix>other
            same = o.bits == self.bits
            # ipaddress's order: address, then netmask (the longer prefix after)
            if not same:
                pass
            elif self.hi != o.hi:
                c = -1 if self.hi < o.hi else 1
            elif self.lo != o.lo:
                c = -1 if self.lo < o.lo else 1
            elif self.plen != o.plen:
                c = -1 if self.plen < o.plen else 1
        else:
            # an ipaddress network (or anything else): as ipaddress compares
            try:
                ov, oa, opl = other._version, other.network_address._ip, other._prefixlen
            except AttributeError:
                return NotImplemented
            same = ov == (4 if self.bits == 32 else 6)
            if same:
                sv = self._value()
                c = (-1 if sv < oa else 1) if sv != oa else (
                    0 if self.plen == opl else (-1 if self.plen < opl else 1))
        if not same:
            if op == 2:
                return False
            if op == 3:
                return True
            raise TypeError(f"{self} and {other} are not of the same version")
        if op == 0:
            return c < 0
        if op == 1:
            return c <= 0
        if op == 2:
            return c == 0
        if op == 3:
            return c != 0
        if op == 4:
            return c > 0
        return c >= 0


def make(cls, v, int plen):
    """A new ``cls`` (a Prefix subclass) of masked address ``v`` (an int)
    and length ``plen``: the fields set in C, no ``__init__``.  ValueError
    for host bits or out of range."""
    cdef Prefix p = Prefix.__new__(cls)
    p._fill(v, plen, cls._max_prefixlen)
    return p


def lpm_keys(list nets, int family):
    """(addresses, lengths) of ``nets`` -- any networks, Prefix or
    ipaddress -- as ``Lpm.add_many`` takes them: uint8[n, 16] big-endian
    (IPv6) or uint32[n] (IPv4), and uint8[n]."""
    cdef Py_ssize_t n = len(nets), k, j
    cdef object x
    cdef Prefix p
    cdef uint64_t hi, lo
    cdef uint8_t[::1] pl
    cdef uint8_t[:, ::1] a6
    cdef unsigned int[::1] a4
    lens = np.empty(n, np.uint8)
    pl = lens
    if family == 6:
        addrs = np.empty((n, 16), np.uint8)
        a6 = addrs
    else:
        addrs = np.empty(n, np.uint32)
        a4 = addrs
    for k in range(n):
        x = nets[k]
        if isinstance(x, Prefix):
            p = <Prefix>x
            hi, lo, pl[k] = p.hi, p.lo, p.plen
        else:
            v = x.network_address._ip
            pl[k] = x._prefixlen
            hi, lo = <uint64_t>(v >> 64), <uint64_t>(v & 0xFFFFFFFFFFFFFFFF)
        if family == 6:
            for j in range(8):
                a6[k, j] = <uint8_t>(hi >> (56 - 8 * j))
                a6[k, 8 + j] = <uint8_t>(lo >> (56 - 8 * j))
        else:
            a4[k] = <unsigned int>lo
    return addrs, lens


import sys as _sys
if _sys.hash_info.modulus != (1 << 61) - 1 or _sys.hash_info.width != 64:
    raise ImportError("fastpath._prefix: this Python's int hash is not the 64-bit one")

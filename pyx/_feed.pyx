# A route feed's plain line, split and checked in C (``fastpath._feed``).
#
# ``plain_line(line)`` answers for one line what State._run's dispatch and
# _RouteCommands._plain_route's parse answer in Python -- the words
# (str.split()), the command (``[ip [-4|-6]] route add|replace``), the
# keywords (``via``, ``dev``, ``metric``, ``proto``, each at most once) and
# the prefix (lexer._plain_prefix: IPv4 without host bits, IPv6 masked) --
# without a token list, the keyword loop or the prefix's string operations:
# about 2.5 us of Python a line, a third of a feed line's parse, where a
# full feed has 1.2 million of them.  Why compiled: nothing in a library
# does this split-and-check in one pass over the line's bytes.
#
# It returns (add, family, masked network as an int, prefix length, via,
# dev or None, metric or None, proto or None) -- the proto word unchecked,
# the caller checks it against its protocol names -- or None for any other
# line and for anything it does not take: non-ASCII text, quotes,
# backslashes, a ``#`` (the general splitter's cases), a bad or special
# prefix, a metric that is not 0..2^32-1.  None changes nothing: the
# Python path then answers for the line, as it does without this module.
# tests/test_plain_routes.py holds the two to the same answers.
#
# Nothing is read past the line's bytes (each word is a [start, end) range
# of them; an address is copied, NUL-terminated, into a buffer it fits).

from libc.stdint cimport uint8_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

cdef extern from *:
    """
    #ifdef FASTPATH_DEBUG
    #define FP_FEED_DEBUG_BUILD 1
    #else
    #define FP_FEED_DEBUG_BUILD 0
    #endif
    """
    const int FP_FEED_DEBUG_BUILD

cdef extern from "<arpa/inet.h>" nogil:
    int inet_pton(int af, const char *src, void *dst)

cdef extern from "<sys/socket.h>" nogil:
    enum:
        AF_INET
        AF_INET6

cdef enum:
    MAXTOK = 13        # ip -6 route add P via G dev D metric M proto P


cdef inline bint _ws(uint8_t c) noexcept nogil:
    # the ASCII characters str.split() splits on: \t \n \v \f \r,
    # \x1c-\x1f and the space
    return c == 32 or 9 <= c <= 13 or 28 <= c <= 31


cdef inline bint _is(const uint8_t *s, Py_ssize_t a, Py_ssize_t b, const char *lit) noexcept nogil:
    """Whether the word s[a:b] is the NUL-terminated ``lit``."""
    cdef Py_ssize_t i = 0
    while a + i < b:
        if lit[i] == 0 or <uint8_t>lit[i] != s[a + i]:
            return False
        i += 1
    return lit[i] == 0


# True when built with FASTPATH_DEBUG=1: each line is then read from a heap
# copy that ends where the line ends, so that AddressSanitizer sees a read
# past it (a bytes object's buffer sits inside the allocator's arenas).
DEBUG_BUILD = bool(FP_FEED_DEBUG_BUILD)


def plain_line(str line):
    """See the module's comment."""
    if not line.isascii():
        return None
    cdef bytes raw = line.encode("ascii")
    cdef Py_ssize_t n = len(raw)
    cdef uint8_t *copy = NULL
    if not FP_FEED_DEBUG_BUILD:
        return _read(line, <const uint8_t *><const char *>raw, n)
    copy = <uint8_t *>malloc(n if n else 1)
    if copy == NULL:
        raise MemoryError()
    memcpy(copy, <const char *>raw, n)
    try:
        return _read(line, copy, n)
    finally:
        free(copy)


cdef object _read(str line, const uint8_t *s, Py_ssize_t n):
    """plain_line of ``line``, its ASCII bytes s[0:n]."""
    cdef Py_ssize_t i = 0, j, nt = 0
    cdef Py_ssize_t st[MAXTOK]
    cdef Py_ssize_t en[MAXTOK]
    cdef uint8_t c
    # the words
    while i < n:
        if _ws(s[i]):
            i += 1
            continue
        if nt == MAXTOK:
            return None
        st[nt] = i
        while i < n and not _ws(s[i]):
            c = s[i]
            if c == 39 or c == 34 or c == 92 or c == 35:      # ' " \ #
                return None
            i += 1
        en[nt] = i
        nt += 1
    # the command, as State._run dispatches it
    cdef Py_ssize_t a0 = -1
    cdef int fam = 0
    if nt > 1 and _is(s, st[0], en[0], "route"):
        a0 = 1
    elif nt > 2 and _is(s, st[0], en[0], "ip"):
        if _is(s, st[1], en[1], "route"):
            a0 = 2
        elif nt > 3 and _is(s, st[2], en[2], "route"):
            if _is(s, st[1], en[1], "-6"):
                fam, a0 = 6, 3
            elif _is(s, st[1], en[1], "-4"):
                fam, a0 = 4, 3
    if a0 < 0:
        return None
    cdef bint add
    if _is(s, st[a0], en[a0], "add"):
        add = True
    elif _is(s, st[a0], en[a0], "replace"):
        add = False
    else:
        return None
    # the keywords, as _plain_route reads them
    cdef Py_ssize_t na = nt - a0, k
    if na < 4 or na > 10 or na & 1:
        return None
    cdef Py_ssize_t via = -1, dev = -1, met = -1, proto = -1
    cdef uint64_t metric = 0
    for k in range(a0 + 2, nt, 2):
        if via < 0 and _is(s, st[k], en[k], "via"):
            via = k + 1
        elif dev < 0 and _is(s, st[k], en[k], "dev"):
            dev = k + 1
        elif met < 0 and _is(s, st[k], en[k], "metric"):
            met = k + 1
            for j in range(st[met], en[met]):
                c = s[j]
                if c < 48 or c > 57:
                    return None
                metric = metric * 10 + (c - 48)
                if metric > 0xFFFFFFFF:
                    return None
        elif proto < 0 and _is(s, st[k], en[k], "proto"):
            proto = k + 1
        else:
            return None
    if via < 0:
        return None
    # the prefix, as lexer._plain_prefix reads it
    cdef Py_ssize_t p0 = st[a0 + 1], p1 = en[a0 + 1], sl = -1
    cdef bint colon = False
    for j in range(p0, p1):
        c = s[j]
        if c == 47:
            sl = j
            break
        if c == 58:
            colon = True
        elif c == 0:
            return None                   # (inet_pton would stop at it)
    if sl < 0 or p1 - sl - 1 < 1 or p1 - sl - 1 > 3:
        return None
    cdef int plen = 0
    for j in range(sl + 1, p1):
        c = s[j]
        if c < 48 or c > 57:
            return None
        plen = plen * 10 + (c - 48)
    cdef char buf[64]
    cdef uint8_t a[16]
    cdef Py_ssize_t alen = sl - p0
    if alen > 63:
        return None                       # (longer than any address inet_pton takes)
    memcpy(buf, s + p0, alen)
    buf[alen] = 0
    cdef int dots = 0, rfam
    cdef uint64_t v4
    if colon:
        if fam == 4 or plen > 128:
            return None
        if inet_pton(AF_INET6, buf, a) != 1:
            return None
        for j in range(16):               # the host bits masked
            if 8 * j >= plen:
                a[j] = 0
            elif 8 * j + 8 > plen:
                a[j] &= <uint8_t>(0xFF << (8 * j + 8 - plen))
        rfam = 6
        v = int.from_bytes(a[:16], "big")
    else:
        if fam == 6 or plen > 32:
            return None
        for j in range(alen):
            if buf[j] == 46:
                dots += 1
        if dots != 3 or inet_pton(AF_INET, buf, a) != 1:
            return None
        v4 = (<uint64_t>a[0] << 24) | (<uint64_t>a[1] << 16) | (<uint64_t>a[2] << 8) | a[3]
        if v4 & ((<uint64_t>1 << (32 - plen)) - 1):
            return None                   # host bits: the general path's error
        rfam = 4
        v = v4
    return (add, rfam, v, plen, line[st[via]:en[via]],
            line[st[dev]:en[dev]] if dev >= 0 else None,
            metric if met >= 0 else None,
            line[st[proto]:en[proto]] if proto >= 0 else None)

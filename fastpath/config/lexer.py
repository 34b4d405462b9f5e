"""Lexical helpers: shell-like word splitting and logical lines (comments,
backslash continuations: what a shell or ``ip -batch`` does to a line), the
token cursor, and the parsers of numbers, IPv4/IPv6 addresses, prefixes,
MACs, table ids and interface names as iproute2's lib/utils.c (get_addr,
get_prefix, get_u32, matches) and lib/rt_names.c (rtnl_rttable_a2n) read
them; ``_Net4``/``_Net6``, the prefixes that hash once."""
from __future__ import annotations

import functools
import ipaddress
import itertools
import re
import shlex
import socket
from typing import Iterator, Optional

from .errors import ConfigError, _err
from .objects import IPAddress, TABLE_NAMES, _TABLE_IDS


_INT_RE = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|[0-9]+)")
_MAC_RE = re.compile(r"[0-9a-fA-F]{1,2}(:[0-9a-fA-F]{1,2}){5}")
_V4PART_RE = re.compile(r"[0-9]{1,3}")
_SPECIAL_CHARS = re.compile(r"['\"\\]")


def _split_line(s: str) -> list:
    """Shell-like word splitting with ``#`` comments at the start of a word."""
    if not _SPECIAL_CHARS.search(s):
        toks = s.split()
        if "#" not in s:
            return toks
        for i, t in enumerate(toks):
            if t.startswith("#"):
                return toks[:i]
        return toks
    toks, cur, in_word, i, n = [], [], False, 0, len(s)
    while i < n:
        c = s[i]
        if c.isspace():
            if in_word:
                toks.append("".join(cur))
                cur, in_word = [], False
            i += 1
            continue
        if c == "#" and not in_word:
            break
        in_word = True
        if c == "'":
            j = s.find("'", i + 1)
            if j < 0:
                raise _err(f"unterminated quote: {s[i:]}", s[i:])
            cur.append(s[i + 1:j])
            i = j + 1
        elif c == '"':
            start = i
            i += 1
            while True:
                if i >= n:
                    raise _err(f"unterminated quote: {s[start:]}", s[start:])
                c = s[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n and s[i + 1] in '"\\$`':
                    cur.append(s[i + 1])
                    i += 2
                    continue
                cur.append(c)
                i += 1
        elif c == "\\":
            if i + 1 < n:
                cur.append(s[i + 1])
            i += 2
        else:
            cur.append(c)
            i += 1
    if in_word:
        toks.append("".join(cur))
    return toks


def _logical_lines(text) -> Iterator[tuple]:
    """(first line number, text) per command, joining backslash continuations.
    ``text``: a string, or an iterable of lines (an open text file: read as
    it goes, never whole)."""
    buf, start = None, 0
    lines = text.splitlines() if isinstance(text, str) else (ln.rstrip("\r\n") for ln in text)
    for n, raw in enumerate(lines, start=1):
        line = raw
        stripped = line.rstrip()
        if buf is None:
            if stripped[-1:] != "\\":
                yield n, line            # (the common line: no continuation, either way)
                continue
            start = n
        cont = False
        if not stripped.lstrip().startswith("#"):
            k = len(stripped) - len(stripped.rstrip("\\"))
            if k % 2 == 1:
                cont = True
                line = stripped[:-1]
        buf = line if buf is None else buf + " " + line
        if not cont:
            yield start, buf
            buf = None
    if buf is not None:
        yield start, buf


def _q(s: str) -> str:
    return shlex.quote(s)


class _Cur:
    """A cursor over the tokens of one command."""
    __slots__ = ("toks", "i")

    def __init__(self, toks, i=0):
        self.toks, self.i = toks, i

    def more(self) -> bool:
        return self.i < len(self.toks)

    def peek(self) -> Optional[str]:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        t = self.toks[self.i]
        self.i += 1
        return t

    def arg(self, what: str) -> str:
        """The value after the keyword just taken."""
        if self.i >= len(self.toks):
            kw = self.toks[self.i - 1] if self.i else ""
            raise _err(f"missing {what} after '{kw}'", kw)
        return self.take()


def _int(tok: str, kw: str, lo: int, hi: int) -> int:
    if not _INT_RE.fullmatch(tok):
        raise _err(f"expected a number after '{kw}', got '{tok}'", tok)
    v = int(tok, 0) if "x" in tok.lower() else int(tok, 10)
    if not lo <= v <= hi:
        raise _err(f"'{kw}' value {tok} out of range ({lo}..{hi})", tok)
    return v


def _num(cur: _Cur, kw: str, lo: int, hi: int) -> int:
    return _int(cur.arg("a number"), kw, lo, hi)


def _parse_v4(tok: str) -> Optional[ipaddress.IPv4Address]:
    """iproute2's get_addr_ipv4: 1 to 4 dotted parts, missing ones are 0."""
    if tok.count(".") == 3:
        # the common dotted quad in C: inet_pton refuses leading zeros, which
        # the parts below accept (as decimal)
        try:
            return ipaddress.IPv4Address(socket.inet_pton(socket.AF_INET, tok))
        except (OSError, ValueError):    # (ValueError: an embedded NUL)
            pass
    parts = tok.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    vals = []
    for p in parts:
        if not _V4PART_RE.fullmatch(p) or int(p) > 255:
            return None
        vals.append(int(p))
    vals += [0] * (4 - len(vals))
    return ipaddress.IPv4Address(bytes(vals))


@functools.lru_cache(maxsize=4096)      # addresses are immutable: gateways repeat
def _v6(tok: str) -> ipaddress.IPv6Address:
    """An IPv6 address from text: inet_pton (C, 0.5 us) first, ipaddress's
    parser (6 us) for what it refuses, which raises ValueError or accepts
    the same value (tests/test_config.py compares the two)."""
    try:
        return ipaddress.IPv6Address(socket.inet_pton(socket.AF_INET6, tok))
    except OSError:
        return ipaddress.IPv6Address(tok)


def _fam_name(fam: int) -> str:
    return "inet" if fam == 4 else "inet6"


def _parse_addr(tok: str, fam: Optional[int], what: str = "address") -> IPAddress:
    if ":" in tok:
        a = None
        if "%" not in tok and "/" not in tok:
            try:
                a = _v6(tok)
            except ValueError:
                a = None
        if a is None:
            raise _err(f"invalid {what} '{tok}'", tok)
        if fam == 4:
            raise _err(f"inet {what} is expected rather than '{tok}'", tok)
        return a
    a = _parse_v4(tok)
    if a is None:
        raise _err(f"invalid {what} '{tok}'", tok)
    if fam == 6:
        raise _err(f"inet6 {what} is expected rather than '{tok}'", tok)
    return a


class _Made:
    """What the prefixes fastpath makes without ipaddress's ``__init__``
    share: ``hosts()`` -- that __init__ sets a per-instance ``hosts`` on a
    /31 and a /32 (/127, /128): a closure, a cell and a tuple per host
    route for the garbage collector to walk; this gives the same answers
    as a method -- and ipaddress's repr (of ``_ipaddress_class``)."""

    def __repr__(self):
        return f"{self._ipaddress_class.__name__}('{self}')"

    def hosts(self):
        if self._prefixlen == self._max_prefixlen:
            return [self.network_address]
        if self._prefixlen == self._max_prefixlen - 1:
            return self.__iter__()
        return super().hosts()


class _HashedOnce(_Made):
    """A network that computes its hash once.  A route's prefix is hashed a
    dozen times per change (the keys of the routes, their indexes and the
    compiled entries all hold it) and ipaddress hashes in Python.  Equal
    to, and hashed as, the ipaddress network of the same prefix (mixed in
    before it: _Net4, _Net6 where fastpath._prefix is not built, and the
    reference that compiled type is tested against)."""

    def __hash__(self):
        try:
            return self._h        # (an instance attribute: the common case, cheapest)
        except AttributeError:
            h = self._h = hash(int(self.network_address) ^ int(self.netmask))
            return h

    def __eq__(self, other):
        if type(other) is type(self):
            return (self._prefixlen == other._prefixlen
                    and self.network_address._ip == other.network_address._ip)
        return super().__eq__(other)


class _HashedNet4(_HashedOnce, ipaddress.IPv4Network):
    _ipaddress_class = ipaddress.IPv4Network


class _HashedNet6(_HashedOnce, ipaddress.IPv6Network):
    _ipaddress_class = ipaddress.IPv6Network


def _net_by_fields(cls, v, n):
    """A masked network made of its fields (``v`` the masked integer, ``n``
    the prefix length, both checked by the caller): what ipaddress's
    __init__ sets from ``(v, n)``, without its parsing -- 0.9 us a prefix --
    or its per-instance ``hosts``.  The Python ``_net_of``: this or, where the
    running Python's ipaddress keeps other fields (checked once, at import,
    against __init__), the class itself."""
    net = object.__new__(cls)
    a = object.__new__(cls._address_class)
    a._ip = v
    if issubclass(cls, ipaddress.IPv6Network):
        a._scope_id = None
    net.network_address = a
    net.netmask, net._prefixlen = m = cls._make_netmask(n)
    # (the hash _HashedOnce would compute on first use, here where the
    # integers are at hand: that first use, an AttributeError caught and
    # two int() calls, took 1 us of a feed line)
    net._h = hash(v ^ m[0]._ip)
    return net


def _fields_agree() -> bool:
    try:
        for cls, v, n in ((_HashedNet4, 0x0A000000, 8), (_HashedNet4, 0x0A000001, 32),
                          (_HashedNet6, 0x2001 << 112, 48), (_HashedNet6, 1, 128),
                          (_HashedNet4, 0x0A000002, 31)):
            ref, got = cls((v, n)), _net_by_fields(cls, v, n)
            if (set(vars(ref)) - {"hosts"} != set(vars(got)) - {"_h"}
                    or any(vars(ref)[k] != vars(got)[k] for k in vars(got) if k != "_h")
                    or hash(got) != hash(cls._ipaddress_class((v, n)))
                    or type(ref.network_address).__slots__ != type(got.network_address).__slots__
                    or repr(ref.network_address) != repr(got.network_address)
                    or ref != got or str(ref) != str(got)
                    or list(itertools.islice(ref.hosts(), 3)) != list(itertools.islice(got.hosts(), 3))):
                return False
        return True
    except Exception:
        return False


_py_net_of = _net_by_fields if _fields_agree() else (lambda cls, v, n: cls((v, n)))

try:
    from .. import _prefix
except ImportError:         # (not built: the networks that hash once)
    _prefix = None


if _prefix is not None:
    class _Compact(_Made):
        """An ipaddress network whose fields, hash, comparisons and text are
        fastpath._prefix.Prefix's, in C (pyx/_prefix.pyx says why): ~100
        bytes instead of ~280, and a dict lookup of a key holding it
        without a call into Python.  Made by ``_net_of`` (no __init__);
        the class called as ipaddress's is (``_Net4((v, 32))``) parses as
        ipaddress does."""

        def __init__(self, address, strict=True):
            ref = self._ipaddress_class(address, strict)
            self._set(ref.network_address._ip, ref._prefixlen)

        def __reduce__(self):
            return _net_of, (type(self), self._v, self._prefixlen)

    class _Net4(_prefix.Prefix, _Compact, ipaddress.IPv4Network):
        _ipaddress_class = ipaddress.IPv4Network

    class _Net6(_prefix.Prefix, _Compact, ipaddress.IPv6Network):
        _ipaddress_class = ipaddress.IPv6Network

    _net_of = _prefix.make
    _COMPACT = (_Net4, _Net6)
else:
    _Net4, _Net6, _net_of = _HashedNet4, _HashedNet6, _py_net_of
    _COMPACT = ()


def _net_int(net) -> int:
    """A network's masked address as an int, for any network: a compact
    one's without making its address object."""
    if type(net) in _COMPACT:
        return net._v
    return net.network_address._ip


def _parse_prefix(tok: str, fam: Optional[int], what: str = "prefix"):
    """-> (address, prefix length, masked network), or None for default/all/any."""
    if tok in ("default", "all", "any"):
        return None
    addr, sep, plen = tok.partition("/")
    try:
        a = _parse_addr(addr, fam, what)
    except ConfigError as e:
        if "expected rather" in e.message:
            raise _err(f"{_fam_name(fam)} {what} is expected rather than '{tok}'", tok) from None
        raise _err(f"invalid {what} '{tok}'", tok) from None
    maxlen = 32 if a.version == 4 else 128
    if sep:
        if not re.fullmatch(r"[0-9]{1,3}", plen) or int(plen) > maxlen:
            raise _err(f"invalid {what} '{tok}'", tok)
        n = int(plen)
    else:
        n = maxlen
    # (the family's class: ip_network would first try IPv4Network on an
    # IPv6 address and format the error -- a third of a route line's parse;
    # and the masked integer: an address object with strict=False costs 7x)
    v = int(a) & (((1 << maxlen) - 1) ^ ((1 << (maxlen - n)) - 1))
    return a, n, _net_of(_Net4 if a.version == 4 else _Net6, v, n)


def _plain_prefix_fields(tok: str, fam: Optional[int]):
    """(family, masked network as an int, prefix length) of an
    ``ADDRESS/LENGTH`` token as a route feed writes it -- an IPv4 prefix
    without host bits, an IPv6 one (its host bits masked, as _parse_prefix
    does) -- or None for anything else, which is _parse_prefix's to answer
    (default, no length, a scope, a family other than ``fam``, an error).
    The network _parse_prefix gives (made by _net_of from these fields),
    without its address object, its checks' regular expressions and its
    error handling: a third of a feed line's parse.
    fastpath._feed.plain_line reads a prefix as this does."""
    addr, sep, plen = tok.partition("/")
    if not sep or not plen.isdigit() or not plen.isascii() or len(plen) > 3:
        return None
    n = int(plen)
    if ":" in addr:
        if fam == 4 or n > 128:
            return None
        try:
            b = socket.inet_pton(socket.AF_INET6, addr)
        except (OSError, ValueError):
            return None
        return 6, int.from_bytes(b, "big") & ~((1 << (128 - n)) - 1), n
    if fam == 6 or n > 32 or addr.count(".") != 3:
        return None
    try:
        b = socket.inet_pton(socket.AF_INET, addr)
    except (OSError, ValueError):
        return None
    v = int.from_bytes(b, "big")
    if v & ((1 << (32 - n)) - 1):
        return None                     # host bits: the general path's error
    return 4, v, n


def _parse_mac(tok: str) -> bytes:
    if not _MAC_RE.fullmatch(tok):
        raise _err(f"invalid link-layer address '{tok}'", tok)
    return bytes(int(p, 16) for p in tok.split(":"))


def _mac_str(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def _check_ifname(name: str) -> str:
    if (not name or len(name) > 15 or name in (".", "..")
            or any(c in name for c in "/:") or any(c.isspace() for c in name)):
        raise _err(f"invalid interface name '{name}'", name)
    return name


def _table(tok: str, kw: str = "table") -> int:
    if tok in TABLE_NAMES:
        return TABLE_NAMES[tok]
    if tok == "unspec":
        return 0
    if not _INT_RE.fullmatch(tok):
        raise _err(f"invalid table id '{tok}' after '{kw}' (a number, main, local or default)", tok)
    return _int(tok, kw, 0, 2**32 - 1)


def _table_str(t: int) -> str:
    return _TABLE_IDS.get(t, str(t))


def _matches(tok: str, words) -> Optional[str]:
    """iproute2's matches(): the first word that ``tok`` abbreviates."""
    if not tok:
        return None
    for w in words:
        if w.startswith(tok):
            return w
    return None

"""sysctl: the sysctls fastpath models, their defaults and ranges -- per
device net.ipv4.conf.* (net/ipv4/devinet.c devinet_sysctl) and
net.ipv6.conf.* (net/ipv6/addrconf.c addrconf_sysctl), net.ipv{4,6}.neigh.*
(net/core/neighbour.c neigh_sysctl), the global ones -- and the State
methods that read them (``sysctl``, ``forwarding``, ``seg6_enabled``) and
the ``sysctl -w`` command (procps sysctl; the propagation of
``all.forwarding``: addrconf_fixup_forwarding, inet_forward_change)."""
from __future__ import annotations

from typing import Optional

from .errors import _err, _unsupported
from .lexer import _INT_RE


# sysctls: name -> (value for "all", value for "default", min, max)
_INT_MAX = 2**31 - 1
_CONF6 = {
    "forwarding": (1, 1, 0, 1),
    "seg6_enabled": (0, 0, 0, 1),
    "seg6_require_hmac": (0, 0, -1, 1),
    "hop_limit": (64, 64, 1, 255),
    "mtu": (1280, 1280, 1280, _INT_MAX),       # per device: max = link mtu
    # accepted, no effect on fastpath (kernel-comparison configs set them)
    "accept_ra": (1, 1, 0, 2),
    "router_solicitations": (-1, -1, -1, _INT_MAX),
    "addr_gen_mode": (0, 0, 0, 3),
    "accept_dad": (0, 1, -1, 2),
    "autoconf": (1, 1, 0, 1),
    "dad_transmits": (1, 1, 0, _INT_MAX),
    "accept_redirects": (1, 1, 0, 1),
    "keep_addr_on_down": (0, 0, -1, 1),
    # ndisc_recv_ns: all OR dev (with the device's forwarding and a proxy entry)
    "proxy_ndp": (0, 0, 0, 1),
}
_CONF4 = {
    "forwarding": (1, 1, 0, 1),
    "send_redirects": (1, 1, 0, 1),
    "accept_redirects": (1, 1, 0, 1),
    # arp_process: IN_DEV_PROXY_ARP is all OR dev, IN_DEV_PROXY_ARP_PVLAN too
    # (IN_DEV_ORCONF); see fastpath/wire/neigh.py
    "proxy_arp": (0, 0, 0, 1),
    "proxy_arp_pvlan": (0, 0, 0, 1),
}
_CONF = {4: _CONF4, 6: _CONF6}
# net.ipv{4,6}.neigh.{default,DEV}.KEY (no "all"): (default, min, max); proxy_delay
# in USER_HZ (1/100 s) as /proc shows it, 80 = 0.8 s (neigh_parms: 8 * HZ / 10)
_NEIGH = {"proxy_delay": (80, 0, _INT_MAX), "proxy_qlen": (64, 0, _INT_MAX)}
_GLOBALS = {   # name -> (default, min, max)
    "net.ipv6.seg6_flowlabel": (0, -1, 1),
    "net.ipv6.icmp.ratelimit": (0, 0, _INT_MAX),
    "net.ipv4.icmp_ratelimit": (0, 0, _INT_MAX),
    "net.ipv4.icmp_ratemask": (6168, 0, _INT_MAX),
    "net.ipv4.icmp_msgs_per_sec": (0, 0, _INT_MAX),
    "net.ipv4.icmp_msgs_burst": (50, 0, _INT_MAX),
    # ip_error()'s limiter, in jiffies (HZ 250): off by default (Linux: 250, 1250)
    "net.ipv4.route.error_cost": (0, 0, _INT_MAX),
    "net.ipv4.route.error_burst": (1250, 0, _INT_MAX),
    "net.ipv4.fib_multipath_hash_policy": (0, 0, 3),
    "net.ipv6.fib_multipath_hash_policy": (0, 0, 3),
    "net.ipv4.fib_multipath_hash_fields": (7, 0, 2**32 - 1),
    "net.ipv6.fib_multipath_hash_fields": (7, 0, 2**32 - 1),
    "net.ipv6.auto_flowlabels": (1, 0, 3),
    "net.ipv4.ip_default_ttl": (64, 1, 255),
    # drivers/net/vrf.c: 1 = one VRF per table (End.DT* vrftable needs it)
    "net.vrf.strict_mode": (0, 0, 1),
}
_ALIASES = {"net.ipv4.ip_forward": "net.ipv4.conf.all.forwarding"}


def _sysctl_defaults() -> dict:
    d = {name: v[0] for name, v in _GLOBALS.items()}
    for fam, table in ((4, _CONF4), (6, _CONF6)):
        for key, (a, dflt, _lo, _hi) in table.items():
            d[f"net.ipv{fam}.conf.all.{key}"] = a
            d[f"net.ipv{fam}.conf.default.{key}"] = dflt
        for key, (dflt, _lo, _hi) in _NEIGH.items():
            d[f"net.ipv{fam}.neigh.default.{key}"] = dflt
    return d


#: the global / all / default sysctl values of a fresh State
SYSCTL_DEFAULTS = _sysctl_defaults()


class _SysctlCommands:
    """State's sysctls: reading them and the ``sysctl`` command."""

    def sysctl(self, name: str) -> int:
        """The value of a sysctl (dotted or slash form; ``net.ipv4.ip_forward``
        is an alias).  KeyError for unknown names and devices."""
        canon = self._canon_sysctl(name, strict=False)
        if canon is None or canon not in self.sysctls:
            raise KeyError(name)
        return self.sysctls[canon]

    def seg6_enabled(self, dev: str) -> bool:
        """``ipv6_srh_rcv``: min(all, dev) of net.ipv6.conf.*.seg6_enabled."""
        return min(self.sysctls["net.ipv6.conf.all.seg6_enabled"],
                   self.sysctl(f"net.ipv6.conf.{dev}.seg6_enabled")) > 0

    def forwarding(self, family: int, dev: Optional[str] = None) -> bool:
        """Whether a packet received on ``dev`` may be forwarded: IPv6 looks at
        ``all.forwarding`` (``ip6_forward``), IPv4 at the input device's
        ``forwarding`` (``IN_DEV_FORWARD``; ``all`` when dev is None)."""
        fam = {2: 4, 10: 6}.get(family, family)
        if fam == 6:
            return self.sysctls["net.ipv6.conf.all.forwarding"] > 0
        if fam == 4:
            if dev is None:
                return self.sysctls["net.ipv4.conf.all.forwarding"] > 0
            return self.sysctl(f"net.ipv4.conf.{dev}.forwarding") > 0
        raise ValueError(f"family must be 4 or 6, not {family!r}")

    # -- sysctl ---------------------------------------------------------------------
    def _canon_sysctl(self, name: str, strict: bool = True):
        """-> canonical dotted name, or None / ConfigError for unknown ones."""
        n = name
        if n.startswith("/proc/sys/"):
            n = n[len("/proc/sys/"):]
        if "/" in n:
            parts = n.strip("/").split("/")
            if len(parts) == 5 and parts[2] in ("conf", "neigh"):
                dev, key = parts[3], parts[4]
                head = parts[:3]
            else:
                n = ".".join(parts)
                dev = None
        else:
            dev = None
            parts = n.split(".")
            if len(parts) >= 5 and parts[2] in ("conf", "neigh"):
                head, dev, key = parts[:3], ".".join(parts[3:-1]), parts[-1]
        if dev is not None:
            if head[0] != "net" or head[1] not in ("ipv4", "ipv6"):
                return self._unknown_sysctl(name, strict)
            fam = 4 if head[1] == "ipv4" else 6
            grp = head[2]
            if key not in (_CONF[fam] if grp == "conf" else _NEIGH):
                return self._unknown_sysctl(name, strict)
            if grp == "neigh" and dev == "all":
                return self._unknown_sysctl(name, strict)
            if dev not in ("all", "default") and dev not in self.interfaces:
                if strict:
                    path = f"net/{head[1]}/{grp}/{dev}/{key}"
                    raise _err(f"'{name}': sysctl: cannot stat /proc/sys/{path}: No such file "
                               "or directory", name)
                return None
            return f"net.ipv{fam}.{grp}.{dev}.{key}"
        n = _ALIASES.get(n, n)
        if n in _GLOBALS or n in SYSCTL_DEFAULTS:
            return n
        return self._unknown_sysctl(name, strict)

    @staticmethod
    def _unknown_sysctl(name, strict):
        if not strict:
            return None
        path = name.replace(".", "/") if "/" not in name else name.lstrip("/")
        raise _err(f"unknown sysctl '{name}' (sysctl: cannot stat /proc/sys/{path}: No such "
                   "file or directory)", name)

    def _sysctl(self, args: list):
        i = 0
        while i < len(args) and args[i].startswith("-") and len(args[i]) > 1:
            o = args[i]
            if not all(c in "wqe" for c in o[1:]):
                raise _unsupported(o, "sysctl option (-w, -q, -e)")
            i += 1
        rest = args[i:]
        if not rest:
            raise _err("missing NAME=VALUE after 'sysctl'", "sysctl")
        j = 0
        while j < len(rest):
            t = rest[j]
            if "=" in t:
                name, _, val = t.partition("=")
                if val == "":
                    if j + 1 >= len(rest):
                        raise _err(f"missing value in '{t}'", t)
                    j += 1
                    val = rest[j]
            elif j + 1 < len(rest) and rest[j + 1].startswith("="):
                name, val = t, rest[j + 1][1:]
                j += 1
                if val == "":
                    if j + 1 >= len(rest):
                        raise _err(f"missing value after '{t} ='", t)
                    j += 1
                    val = rest[j]
            else:
                self._canon_sysctl(t)     # a read: validate the name only
                j += 1
                continue
            if not name:
                raise _err(f"missing sysctl name in '{t}'", t)
            self._set_sysctl(name, val)
            j += 1

    def _set_sysctl(self, name: str, val: str):
        canon = self._canon_sysctl(name)
        if not _INT_RE.fullmatch(val):
            raise _err(f"invalid value '{val}' for '{name}' (sysctl: setting key: Invalid "
                       "argument)", val)
        v = int(val, 0) if "x" in val.lower() else int(val, 10)
        parts = canon.split(".")
        if parts[2] == "neigh":
            fam = 4 if parts[1] == "ipv4" else 6
            dev, key = ".".join(parts[3:-1]), parts[-1]
            _d, lo, hi = _NEIGH[key]
        elif parts[2] == "conf":
            fam = 4 if parts[1] == "ipv4" else 6
            dev, key = ".".join(parts[3:-1]), parts[-1]
            _a, _d, lo, hi = _CONF[fam][key]
            if fam == 6 and key == "mtu" and dev not in ("all", "default"):
                hi = self.interfaces[dev].mtu
        else:
            fam = dev = key = None
            _dflt, lo, hi = _GLOBALS[canon]
        if not lo <= v <= hi:
            raise _err(f"value {val} out of range for '{name}' ({lo}..{hi}) (sysctl: setting "
                       "key: Invalid argument)", val)
        if canon == "net.vrf.strict_mode" and v == 1:
            # vrf_strict_mode_change: -EBUSY while two VRFs share a table
            tables = [i.vrf_table for i in self.interfaces.values() if i.kind == "vrf"]
            if len(tables) != len(set(tables)):
                raise _err(f"'{name}={val}': sysctl: setting key \"net.vrf.strict_mode\": Device "
                           "or resource busy (two VRF devices share a table)", name)
        if key == "forwarding" and dev == "all":
            # addrconf_fixup_forwarding / inet_forward_change: all -> default + every device
            if fam == 4 and self.sysctls[canon] == v:
                return
            names = list(self.interfaces)

            def mutate():
                self.sysctls[canon] = v
                self.sysctls[f"net.ipv{fam}.conf.default.forwarding"] = v
                for n in names:
                    self.sysctls[f"net.ipv{fam}.conf.{n}.forwarding"] = v
            self._reconcile(names if fam == 6 else [], mutate)
        elif key == "forwarding" and fam == 6 and dev != "default":
            self._reconcile([dev], lambda: self.sysctls.__setitem__(canon, v))
        else:
            self.sysctls[canon] = v

"""ip address (ip/ipaddress.c: ipaddr_modify) and the automatic (proto
kernel) routes of addresses: IPv4 fib_add_ifaddr / fib_del_ifaddr
(net/ipv4/fib_frontend.c), IPv6 addrconf_prefix_route, addrconf_add_mroute
and the local / anycast routes (net/ipv6/addrconf.c), in the l3mdev table
of a VRF (l3mdev_fib_table)."""
from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Callable, Optional

from .errors import _err, _unsupported
from .objects import Interface, Nexthop, Route, RT_TABLE_LOCAL, RT_TABLE_MAIN
from .lexer import _check_ifname, _Cur, _matches, _parse_prefix


class _AddressCommands:
    """State's addresses: ``ip address`` and the automatic routes an address brings."""

    # -- automatic (proto kernel) routes ------------------------------------------
    def l3mdev_table(self, itf: Interface) -> Optional[int]:
        """l3mdev_fib_table(): a VRF device's table, or its master's for a
        device enslaved to a VRF; None for the others."""
        if itf.kind == "vrf":
            return itf.vrf_table
        if itf.master is not None:
            m = self.interfaces.get(itf.master)
            return m.vrf_table if m is not None else None
        return None

    def _auto_for(self, itf: Interface) -> dict:
        out: dict = {}
        vt = self.l3mdev_table(itf)
        if vt is not None:
            # fib_magic / addrconf_f6i_alloc / addrconf_prefix_route /
            # addrconf_add_mroute: l3mdev_fib_table(dev) ?: local or main
            def add(r):
                r = replace(r, table=vt)
                out.setdefault(r.key, r)
        else:
            def add(r):
                out.setdefault(r.key, r)
        dev = itf.name
        nh = (Nexthop(None, dev),)
        if not itf.up:
            # a down device keeps the 'local' routes of its IPv4 addresses
            # (fib_disable_ip removes the prefix and broadcast routes only);
            # its IPv6 routes go with the link
            for a in itf.addrs:
                if a.version == 4:
                    prim = next((b for b in itf.addrs if b.version == 4 and b.network == a.network), a)
                    add(Route(4, ipaddress.ip_network(a.ip), RT_TABLE_LOCAL, "local", 0, nh,
                              proto="kernel", scope="host", src=prim.ip))
            return out
        is_lo = itf.kind == "loopback"
        if not is_lo and itf.kind != "vrf":
            # addrconf_add_mroute; a VRF device gets none (observed on Linux
            # 6.12: tests/test_kernel_import.py's VRF labs)
            add(Route(6, ipaddress.IPv6Network("ff00::/8"), RT_TABLE_LOCAL, "multicast", 256, nh,
                      proto="kernel"))
        fwd6 = self.sysctls.get(f"net.ipv6.conf.{dev}.forwarding", 0) > 0
        prims = []
        for a in itf.addrs:
            net = a.network
            if a.version == 6:
                add(Route(6, ipaddress.ip_network(a.ip), RT_TABLE_LOCAL, "local", 0, nh,
                          proto="kernel"))
                add(Route(6, net, RT_TABLE_MAIN, "unicast", 256, nh, proto="kernel"))
                if fwd6 and net.prefixlen < 127 and int(net.network_address) != 0:
                    add(Route(6, ipaddress.ip_network(net.network_address), RT_TABLE_LOCAL,
                              "anycast", 0, nh, proto="kernel"))
                continue
            prim = next((p for p in prims if p.network == net), None)
            if prim is None:
                prims.append(a)
            src = a.ip if prim is None else prim.ip
            add(Route(4, ipaddress.ip_network(a.ip), RT_TABLE_LOCAL, "local", 0, nh,
                      proto="kernel", scope="host", src=src))
            if (prim is None and net.network_address.packed[0] != 0
                    and (net.network_address != a.ip or net.prefixlen < 32)):
                if is_lo:
                    add(Route(4, net, RT_TABLE_LOCAL, "local", 0, nh, proto="kernel",
                              scope="host", src=a.ip))
                else:
                    add(Route(4, net, RT_TABLE_MAIN, "unicast", 0, nh, proto="kernel",
                              scope="link", src=a.ip))
                if net.prefixlen < 31:
                    add(Route(4, ipaddress.ip_network(net.broadcast_address), RT_TABLE_LOCAL,
                              "broadcast", 0, nh, proto="kernel", scope="link", src=a.ip))
        return out

    def _reconcile(self, names, mutate: Callable[[], None], new: bool = False):
        """Run ``mutate`` and update the automatic routes of ``names``: routes
        the change removes go (if still as generated), new ones are added
        where their key is free."""
        before = {n: ({} if new else self._auto_for(self.interfaces[n])) for n in names}
        mutate()
        after = {n: self._auto_for(self.interfaces[n]) for n in names}
        removed = set()
        for n in names:
            b, a = before[n], after[n]
            for k, r in b.items():
                if a.get(k) != r and self.routes.get(k) == r:
                    del self.routes[k]
                    removed.add(k)
        for n in names:
            b, a = before[n], after[n]
            for k, r in a.items():
                if b.get(k) != r and k not in self.routes:
                    self.routes[k] = r
        if removed:   # another interface may generate a freed key
            for itf in self.interfaces.values():
                for k, r in self._auto_for(itf).items():
                    if k in removed and k not in self.routes:
                        self.routes[k] = r

    def _is_local_addr(self, a) -> bool:
        c = self.__dict__.get("_addrc")
        if c is not None:
            v = c.get(("local", a))
            if v is not None:
                return v
        v = any(x.ip == a for itf in self.interfaces.values() for x in itf.addrs)
        if c is not None:
            c[("local", a)] = v
        return v

    # -- ip address -----------------------------------------------------------
    def _ip_addr(self, fam, args: list):
        if not args:
            return
        tok = args[0]
        sub = "change" if tok == "chg" else _matches(
            tok, ("add", "change", "replace", "delete", "list", "show", "lst", "flush", "save",
                  "showdump", "restore", "help"))
        if sub in ("list", "show", "lst"):
            return
        if sub in ("add", "replace", "change"):
            self._addr_modify(fam, args[1:], sub)
        elif sub == "delete":
            self._addr_del(fam, args[1:])
        elif sub is None:
            raise _err(f"unknown 'ip address' command '{tok}' (expected add, del, show)", tok)
        else:
            raise _unsupported(f"ip address {sub}")

    _ADDR_UNSUPPORTED = frozenset({"peer", "remote", "label", "scope", "anycast", "metric",
                                   "priority", "noprefixroute", "home", "mngtmpaddr", "optimistic",
                                   "autojoin", "proto", "to", "dynamic"})

    def _parse_addr_cmd(self, fam, args: list):
        cur = _Cur(args)
        addr_tok = dev = None
        brd = False
        while cur.more():
            t = cur.take()
            if t == "dev":
                if dev is not None:
                    raise _err("duplicate 'dev'", t)
                dev = _check_ifname(cur.arg("an interface name"))
            elif t == "local":
                if addr_tok is not None:
                    raise _err("duplicate 'local'", t)
                addr_tok = cur.arg("an address")
            elif t == "nodad":
                pass
            elif t in ("valid_lft", "preferred_lft"):
                v = cur.arg("a lifetime")
                if v != "forever":
                    raise _unsupported(f"{t} {v}", "only 'forever'")
            elif t in ("broadcast", "brd"):
                v = cur.arg("'+'")
                if v != "+":
                    raise _unsupported(f"{t} {v}", "only 'brd +'")
                brd = True
            elif t in self._ADDR_UNSUPPORTED:
                raise _unsupported(t, "address option")
            elif addr_tok is None:
                addr_tok = t
            else:
                raise _err(f"unexpected '{t}' (the address is '{addr_tok}')", t)
        if addr_tok is None:
            raise _err("missing address", args[0] if args else "add")
        p = _parse_prefix(addr_tok, fam, "address")
        if p is None:
            raise _err(f"invalid address '{addr_tok}'", addr_tok)
        a, plen, _net = p
        itf_addr = ipaddress.ip_interface((a, plen))
        if brd and (a.version == 6 or plen >= 31):
            raise _err("Broadcast can be set only for IPv4 addresses with a prefix length < 31"
                       if a.version == 4 else "Broadcast can be set only for IPv4 addresses",
                       "brd")
        if dev is None:
            raise _err(f"Not enough information: \"dev\" argument is required (address "
                       f"'{addr_tok}').", addr_tok)
        return itf_addr, dev, "/" in addr_tok

    def _addr_modify(self, fam, args: list, op: str):
        a, dev, _ = self._parse_addr_cmd(fam, args)
        ip = a.ip
        if a.version == 6 and (int(ip) == 0 or ip.is_multicast or (ip.is_loopback and dev != "lo")):
            raise _err(f"address '{a}': RTNETLINK answers: Cannot assign requested address", str(a))
        itf = self._iface(dev)
        if a.version == 6:
            dup = next((x for x in itf.addrs if x.version == 6 and x.ip == ip), None)
        else:
            dup = next((x for x in itf.addrs if x.version == 4 and x.ip == ip
                        and x.network.prefixlen == a.network.prefixlen), None)
        if dup is not None:
            if op in ("replace", "change") and dup == a:
                return
            if op == "add":
                raise _err(f"address '{a}' on {dev}: RTNETLINK answers: File exists", str(a))
            raise _unsupported(f"ip address {op}", "changing an address's prefix length")
        if op == "change":
            raise _err(f"address '{a}' on {dev}: RTNETLINK answers: No such file or directory",
                       str(a))
        self._reconcile([dev], lambda: itf.addrs.append(a))

    def _addr_del(self, fam, args: list):
        a, dev, explicit_len = self._parse_addr_cmd(fam, args)
        itf = self.interfaces.get(dev)
        found = None
        if itf is not None:
            for x in itf.addrs:
                if x.ip == a.ip and (not explicit_len or x.network.prefixlen == a.network.prefixlen):
                    found = x
                    break
        if found is None:
            raise _err(f"address '{a}' on {dev}: RTNETLINK answers: Cannot assign requested "
                       "address", str(a))
        gone = [found]
        if found.version == 4:
            k = itf.addrs.index(found)
            primary = not any(x.version == 4 and x.network == found.network
                              for x in itf.addrs[:k])
            if primary:   # promote_secondaries = 0: the secondaries go too
                gone += [x for x in itf.addrs[k + 1:] if x.version == 4 and x.network == found.network]

        def mutate():
            itf.addrs[:] = [x for x in itf.addrs if not any(x is g for g in gone)]
        self._reconcile([dev], mutate)

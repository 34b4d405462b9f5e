"""ip neigh (ip/ipneigh.c): permanent neighbours (struct neighbour) and
proxy entries (struct pneigh_entry: ``ip neigh add proxy``, pneigh_lookup,
pneigh_dump_table), net/core/neighbour.c neigh_add / neigh_delete."""
from __future__ import annotations

from typing import Optional

from .errors import _err, _unsupported
from .lexer import _check_ifname, _Cur, _mac_str, _matches, _parse_addr, _parse_mac


class _NeighCommands:
    """State's ``ip neigh`` commands and its proxy entries."""

    def proxy_show(self) -> list:
        """``ip neigh show proxy`` lines (pneigh_dump_table, iproute2's
        print_neigh: ``ADDR dev DEV [router] proxy``), IPv4 first."""
        return [f"{a} dev {d}{' router' if r else ''} proxy"
                for (d, a), r in sorted(self.proxies.items(),
                                        key=lambda kv: (kv[0][1].version, kv[0][1], kv[0][0]))]

    def proxy_entry(self, dev: str, addr) -> Optional[bool]:
        """pneigh_lookup(addr, dev): None without an entry, else its NTF_ROUTER."""
        return self.proxies.get((dev, addr))

    # -- ip neigh ---------------------------------------------------------------
    def _ip_neigh(self, fam, args: list):
        if not args:
            return
        tok = args[0]
        sub = "change" if tok == "chg" else _matches(
            tok, ("add", "change", "replace", "delete", "list", "show", "lst", "get", "flush",
                  "help"))
        if sub in ("list", "show", "lst", "get"):
            return
        if sub not in ("add", "change", "replace", "delete"):
            if sub is None:
                raise _err(f"unknown 'ip neigh' command '{tok}' (expected add, replace, del)", tok)
            raise _unsupported(f"ip neigh {sub}")
        cur = _Cur(args[1:])
        addr = dev = mac = None
        proxy = router = False
        while cur.more():
            t = cur.take()
            if t == "proxy":
                # iproute2: 'proxy ADDR' is the destination, with NTF_PROXY
                t = cur.arg("an address")
                if addr is not None:
                    raise _err(f"duplicate \"address\": \"{t}\" is the second value.", t)
                addr = _parse_addr(t, fam, "address")
                proxy = True
            elif t == "lladdr":
                mac = _parse_mac(cur.arg("a link-layer address"))
            elif t == "dev":
                dev = _check_ifname(cur.arg("an interface name"))
            elif t == "nud":
                s = cur.arg("a state")
                if s not in ("permanent", "noarp", "reachable", "stale"):
                    raise _unsupported(f"nud {s}", "permanent, noarp, reachable, stale")
            elif t == "router":
                router = True
            elif t in ("extern_learn", "managed", "use", "protocol", "vrf"):
                raise _unsupported(t, "neighbour option")
            else:
                if t == "to":
                    t = cur.arg("an address")
                if addr is not None:
                    raise _err(f"unexpected '{t}' (the address is '{addr}')", t)
                addr = _parse_addr(t, fam, "address")
        if addr is None or dev is None:
            raise _err("Device and destination are required arguments.", tok)
        key = (dev, addr)
        if proxy:
            # neigh_add / neigh_delete with NTF_PROXY: pneigh_lookup(creat)
            # sets the flags of a new or existing entry (no EEXIST), pneigh_delete
            # gives ENOENT; iproute2 refuses an unknown device first
            if dev not in self.interfaces:
                raise _err(f'Cannot find device "{dev}"', dev)
            if sub == "delete":
                if key not in self.proxies:
                    raise _err(f"proxy {addr} dev {dev}: RTNETLINK answers: No such file or "
                               "directory", str(addr))
                del self.proxies[key]
            else:
                self.proxies[key] = router
            return
        if sub == "delete":
            if key not in self.neighbours:
                raise _err(f"neighbour {addr} dev {dev}: RTNETLINK answers: No such file or "
                           "directory", str(addr))
            del self.neighbours[key]
            return
        if mac is None:
            raise _err("'lladdr' is required", tok)
        if len(mac) != 6:
            raise _err("link-layer address must be 6 bytes", _mac_str(mac))
        if sub == "add" and key in self.neighbours:
            raise _err(f"neighbour {addr} dev {dev}: RTNETLINK answers: File exists", str(addr))
        if sub == "change" and key not in self.neighbours:
            raise _err(f"neighbour {addr} dev {dev}: RTNETLINK answers: No such file or "
                       "directory", str(addr))
        self._iface(dev)
        self.neighbours[key] = mac

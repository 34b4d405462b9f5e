"""ip link and ip tuntap (ip/iplink.c, ip/iptuntap.c): devices created on
first mention or by ``ip link add`` (dummy, tun/tap, veth, vlan, vrf:
register_netdevice, veth_newlink, vlan_newlink, drivers/net/vrf.c
vrf_newlink and its fib rules), their settings (do_setlink: up/down, mtu,
address, master/nomaster: do_set_master, vrf_add_slave) and the deletion of
VRF devices (vrf_dellink)."""
from __future__ import annotations

from typing import Optional

from .errors import _err, _unsupported
from .objects import Interface, Rule
from .lexer import _check_ifname, _Cur, _mac_str, _matches, _num, _parse_mac, _table
from .lwtunnel import Seg6Local
from .sysctl import _CONF, _NEIGH


class _LinkCommands:
    """State's devices: their creation on first mention and ``ip link`` / ``ip tuntap``."""

    # -- interfaces -----------------------------------------------------------
    def _create(self, name, kind=None, mtu=1500, mac=None, link=None, vlan=None,
                vrf_table=None) -> Interface:
        self._own_small()
        idx = max((i.ifindex for i in self.interfaces.values()), default=0) + 1
        itf = Interface(name, idx, True, mtu, mac, [], vlan, kind, link, vrf_table)
        self.interfaces[name] = itf
        for fam, table in _CONF.items():
            for key in table:
                self.sysctls[f"net.ipv{fam}.conf.{name}.{key}"] = \
                    self.sysctls[f"net.ipv{fam}.conf.default.{key}"]
            for key in _NEIGH:
                self.sysctls[f"net.ipv{fam}.neigh.{name}.{key}"] = \
                    self.sysctls[f"net.ipv{fam}.neigh.default.{key}"]
        if mtu >= 1280:
            self.sysctls[f"net.ipv6.conf.{name}.mtu"] = mtu
        self._reconcile([name], lambda: None, new=True)
        return itf

    def _iface(self, name: str) -> Interface:
        """The interface, created (up) on first mention."""
        itf = self.interfaces.get(name)
        if itf is None:
            itf = self._create(_check_ifname(name))
        return itf

    # -- ip link / tuntap -------------------------------------------------------
    _LINK_UNSUPPORTED = frozenset({"name", "netns", "arp", "multicast",
                                   "allmulticast", "txqueuelen", "txqlen", "qlen", "alias", "vf",
                                   "promisc", "dynamic", "trailers", "group", "state", "mode",
                                   "protodown", "xdp", "xdpgeneric", "xdpdrv", "xdpoffload",
                                   "gso_max_size", "gso_max_segs", "gro_max_size", "addrgenmode",
                                   "macaddr", "carrier", "broadcast", "brd", "peer", "numtxqueues",
                                   "numrxqueues", "index", "alt-name", "altname", "link-netns",
                                   "link-netnsid", "netnsid", "type"})

    def _ip_link(self, args: list):
        if not args:
            return
        sub = _matches(args[0], ("add", "set", "change", "replace", "delete", "show", "lst",
                                 "list", "xstats", "afstats", "property", "help"))
        if sub == "add":
            self._link_add(args[1:])
        elif sub in ("set", "change"):
            self._link_set(args[1:])
        elif sub == "delete":
            self._link_del(args[1:])
        elif sub in ("show", "lst", "list"):
            return
        elif sub is None:
            raise _err(f"unknown 'ip link' command '{args[0]}' (expected add, set, del, show)",
                       args[0])
        else:
            raise _unsupported(f"ip link {sub}")

    def _link_settings(self, cur: _Cur, allow_dev: bool):
        """Parse link settings; -> (device name or None, [(setting, value)])."""
        dev = None
        settings = []
        while cur.more():
            t = cur.take()
            if t == "dev" and allow_dev:
                if dev is not None:
                    raise _err("duplicate 'dev'", t)
                dev = _check_ifname(cur.arg("an interface name"))
            elif t in ("up", "down"):
                settings.append(("up", t == "up"))
            elif t == "mtu":
                tok = cur.peek()
                settings.append(("mtu", _num(cur, "mtu", 68, 65575), tok))
            elif t == "master" and allow_dev:
                settings.append(("master", _check_ifname(cur.arg("a master device"))))
            elif t == "nomaster" and allow_dev:
                settings.append(("master", None))
            elif t in ("address", "addr"):
                mac = _parse_mac(cur.arg("a link-layer address"))
                if mac[0] & 1 or not any(mac):
                    raise _err(f"invalid unicast address '{_mac_str(mac)}' "
                               "(RTNETLINK answers: Cannot assign requested address)", _mac_str(mac))
                settings.append(("mac", mac))
            elif t in self._LINK_UNSUPPORTED:
                raise _unsupported(t, "link setting")
            elif allow_dev and dev is None:
                dev = _check_ifname(t)
            else:
                raise _err(f"unknown link setting '{t}' (expected up, down, mtu, address)", t)
        return dev, settings

    def _apply_link_settings(self, itf: Interface, settings):
        for what, v, *tok in settings:
            if what == "up":
                if itf.up != v:
                    self._reconcile([itf.name], lambda v=v: setattr(itf, "up", v))
            elif what == "mtu":
                # dev_validate_mtu: 68..65536 here (the modelled kinds' ranges
                # vary), a VRF device 1280..65575 (vrf_setup)
                lo, hi = (1280, 65575) if itf.kind == "vrf" else (68, 65536)
                if not lo <= v <= hi:
                    raise _err(f"'mtu' value {v} out of range ({lo}..{hi}) (Error: mtu "
                               f"{'less than device minimum' if v < lo else 'greater than device maximum'}.)",
                               tok[0] if tok else str(v))
                itf.mtu = v
                if v >= 1280:   # NETDEV_CHANGEMTU: idev->cnf.mtu6 = dev->mtu
                    self.sysctls[f"net.ipv6.conf.{itf.name}.mtu"] = v
            elif what == "mac":
                itf.mac = v
            elif what == "master":
                self._set_master(itf, v)

    def _set_master(self, itf: Interface, name: Optional[str]):
        """do_set_master(): release the device from its VRF (nomaster, or
        another master), then enslave it (vrf_add_slave); its automatic
        routes move between the tables.  An up device is cycled (cycle_netdev:
        down, up), and addrconf_ifdown flushes its IPv6 addresses unless
        keep_addr_on_down (all's if set, else the device's) is positive
        (observed on Linux 6.12, tests/test_kernel_vrf.py).  Its IPv4
        addresses stay.  (A plain ``ip link set DEV down`` keeps them all
        here: README, Known differences.)"""
        if name is not None:
            m = self.interfaces.get(name)
            if m is None:
                raise _err(f'Device "{name}" does not exist.', name)
            if itf.master == name:
                return
            if m.kind != "vrf":
                raise _err(f"{itf.name} master {name}: RTNETLINK answers: Operation not "
                           f"supported ({name} is not a VRF device)", name)
            if itf.kind == "loopback":
                raise _err(f"{itf.name} master {name}: Error: Can not enslave loopback device "
                           "to a VRF.", itf.name)
            if itf.kind == "vrf":
                raise _err(f"{itf.name} master {name}: Error: Can not enslave an L3 master "
                           "device to a VRF.", itf.name)
        if itf.master == name:
            return

        def move():
            itf.master = name
            if itf.up and not self._keeps_addrs_on_down(itf.name):
                itf.addrs[:] = [a for a in itf.addrs if a.version != 6]
        self._reconcile([itf.name], move)

    def _keeps_addrs_on_down(self, dev: str) -> bool:
        """addrconf_ifdown(): all.keep_addr_on_down if non-zero, else the
        device's; positive keeps the IPv6 addresses."""
        keep = self.sysctls.get("net.ipv6.conf.all.keep_addr_on_down", 0)
        if not keep:
            keep = self.sysctls.get(f"net.ipv6.conf.{dev}.keep_addr_on_down", 0)
        return keep > 0
    def _link_del(self, args: list):
        """``ip link del [dev] NAME`` of a VRF device (vrf_dellink): its
        devices are released (their routes move back), then the device goes
        with its addresses, its automatic routes, the routes through it
        (fib_sync_down_dev / rt6_sync_down_dev flush them), its neighbours
        and sysctls.  The routes of its table stay, as do the l3mdev rules
        (added once per namespace).  Other device kinds: not supported."""
        cur = _Cur(args)
        name = None
        while cur.more():
            t = cur.take()
            if t == "dev":
                t = cur.arg("an interface name")
            elif t == "type":
                cur.arg("a link type")
                continue
            if name is not None:
                raise _err(f"unexpected '{t}'", t)
            name = _check_ifname(t)
        if name is None:
            raise _err("Not enough information: \"dev\" argument is required.", "delete")
        itf = self.interfaces.get(name)
        if itf is None:
            raise _err(f'Cannot find device "{name}"', name)
        if itf.kind != "vrf":
            raise _unsupported(f"ip link del {name}", "deleting devices other than VRF devices")
        for slave in [i for i in self.interfaces.values() if i.master == name]:
            self._set_master(slave, None)
        self._reconcile([name], lambda: (itf.addrs.clear(), setattr(itf, "up", False)))
        for k, r in self.routes.live_items():
            if any(nh.dev == name for nh in r.nexthops) or (
                    isinstance(r.encap, Seg6Local) and r.encap.oif == name):
                del self.routes[k]
        for k in [k for k in self.neighbours if k[0] == name]:
            del self.neighbours[k]
        for k in [k for k in self.proxies if k[0] == name]:
            del self.proxies[k]          # pneigh_ifdown
        for k in [k for k in self.sysctls if any(
                f".{g}.{name}." in k and k.split(f".{g}.", 1)[1].rsplit(".", 1)[0] == name
                for g in ("conf", "neigh"))]:
            del self.sysctls[k]
        del self.interfaces[name]

    def _vrf_bound(self, table: int) -> list:
        """The VRF devices bound to a table."""
        return [i for i in self.interfaces.values() if i.kind == "vrf" and i.vrf_table == table]

    def _link_set(self, args: list):
        dev, settings = self._link_settings(_Cur(args), allow_dev=True)
        if dev is None:
            raise _err("Not enough information: \"dev\" argument is required.", "set")
        self._apply_link_settings(self._iface(dev), settings)

    def _link_add(self, args: list):
        cur = _Cur(args)
        name = parent = kind = None
        settings = []
        kind_args: list = []
        while cur.more():
            t = cur.take()
            if t in ("name", "dev"):
                if name is not None:
                    raise _err(f"duplicate '{t}'", t)
                name = _check_ifname(cur.arg("an interface name"))
            elif t == "link":
                parent = _check_ifname(cur.arg("an interface name"))
            elif t == "type":
                kind = cur.arg("a link type")
                kind_args = cur.toks[cur.i:]
                break
            elif t in ("up", "down", "mtu", "address"):
                cur.i -= 1
                # only the settings up to 'type'
                stop = cur.toks.index("type", cur.i) if "type" in cur.toks[cur.i:] else len(cur.toks)
                sub = _Cur(cur.toks[cur.i:stop])
                _d, s = self._link_settings(sub, allow_dev=False)
                settings += s
                cur.i = stop
            elif t in self._LINK_UNSUPPORTED:
                raise _unsupported(t, "link setting")
            elif name is None:
                name = _check_ifname(t)
            else:
                raise _err(f"unexpected '{t}'", t)
        if name is None:
            raise _err("Not enough information: \"dev\" argument is required.", "add")
        if kind is None:
            raise _err("Not enough information: \"type\" argument is required.", "add")
        if name in self.interfaces:
            raise _err(f"interface '{name}': RTNETLINK answers: File exists", name)
        if kind in ("dummy", "tun", "tap"):
            if kind_args:
                raise _err(f"unexpected '{kind_args[0]}' after 'type {kind}'", kind_args[0])
            itf = self._create(name, kind=kind)
        elif kind == "vrf":
            kc = _Cur(kind_args)
            table = None
            while kc.more():
                t = kc.take()
                if t == "table":
                    table = _table(kc.arg("a table id"))
                else:
                    raise _err(f"unknown vrf setting '{t}' (expected table)", t)
            if table is None:
                raise _err(f"vrf {name}: Error: VRF table id is missing.", "vrf")
            if table == 0:
                raise _err(f"vrf {name}: Error: Invalid VRF table id.", "0")
            if self.sysctls["net.vrf.strict_mode"] and self._vrf_bound(table):
                raise _err(f"vrf {name} table {table}: Error: Table is used by another VRF.",
                           str(table))
            # vrf_setup: mtu IP6_MAX_MTU
            itf = self._create(name, kind="vrf", mtu=65575, vrf_table=table)
            if not self._vrf_rules_added:
                # vrf_add_fib_rules: 'pref 1000 l3mdev' for both families,
                # once per namespace, when the first VRF device is created
                self._vrf_rules_added = True
                for fam in (4, 6):
                    rule = Rule(fam, 1000, table=0, l3mdev=True)
                    rules = self.rules[fam]
                    if rule not in rules:
                        pos = next((k for k, r in enumerate(rules) if r.pref > 1000), len(rules))
                        rules.insert(pos, rule)
        elif kind == "veth":
            kc = _Cur(kind_args)
            if not kc.more() or kc.take() != "peer":
                raise _unsupported("type veth", "without 'peer name NAME'")
            t = kc.arg("a peer name")
            if t == "name":
                t = kc.arg("a peer name")
            peer = _check_ifname(t)
            if kc.more():
                raise _unsupported(kc.peek(), "veth peer setting")
            if peer == name:
                raise _err(f"veth peer '{peer}': RTNETLINK answers: File exists", peer)
            if peer in self.interfaces:
                raise _err(f"interface '{peer}': RTNETLINK answers: File exists", peer)
            self._create(peer, kind="veth", link=name)      # veth_newlink: peer first
            itf = self._create(name, kind="veth", link=peer)
        elif kind == "vlan":
            kc = _Cur(kind_args)
            vid = None
            while kc.more():
                t = kc.take()
                if t == "id":
                    vid = _num(kc, "id", 0, 4094)
                elif t == "protocol":
                    p = kc.arg("a protocol")
                    if p.lower() not in ("802.1q",):
                        raise _unsupported(f"protocol {p}", "only 802.1Q")
                else:
                    raise _unsupported(t, "vlan setting")
            if vid is None:
                raise _err("vlan requires 'id'", "vlan")
            if parent is None:
                raise _err("vlan requires 'link' (the parent interface)", "vlan")
            self._iface(parent)
            itf = self._create(name, kind="vlan", link=parent, vlan=vid)
        else:
            raise _unsupported(f"type {kind}", "link types: dummy, tun, tap, veth, vlan, vrf")
        if parent is not None and kind != "vlan":
            raise _unsupported("link", f"for type {kind}")
        self._apply_link_settings(itf, settings)

    def _ip_tuntap(self, args: list):
        if not args:
            return
        sub = _matches(args[0], ("add", "delete", "del", "show", "list", "lst", "help"))
        if sub in ("show", "list", "lst"):
            return
        if sub != "add":
            if sub is None:
                raise _err(f"unknown 'ip tuntap' command '{args[0]}'", args[0])
            raise _unsupported(f"ip tuntap {sub}")
        cur = _Cur(args[1:])
        name = mode = None
        while cur.more():
            t = cur.take()
            if t == "mode":
                mode = cur.arg("a mode")
                if mode not in ("tun", "tap"):
                    raise _err(f"invalid tuntap mode '{mode}' (tun or tap)", mode)
            elif t in ("user", "group"):
                cur.arg(f"a {t}")
            elif t in ("one_queue", "pi", "vnet_hdr", "multi_queue"):
                pass
            elif t in ("dev", "name"):
                name = _check_ifname(cur.arg("an interface name"))
            elif name is None:
                name = _check_ifname(t)
            else:
                raise _err(f"unexpected '{t}'", t)
        if mode is None:
            raise _err("You failed to specify a tunnel mode", "mode")
        if name is None:
            raise _err("missing interface name", "tuntap")
        if name in self.interfaces:
            raise _err(f"interface '{name}': ioctl(TUNSETIFF): Device or resource busy", name)
        self._create(name, kind=mode)

"""State.dump(): the state back as iproute2 / sysctl lines that rebuild an
equal State, and the line writers of routes and rules (the arguments
ip/iproute.c and ip/iprule.c read; ``ip route save`` / ``ip rule save`` in
text form)."""
from __future__ import annotations

from .objects import default_mac, Route, RT_TABLE_LOCAL, RT_TABLE_MAIN, Rule, _LOCAL_TABLE_TYPES
from .lexer import _mac_str, _q, _table_str
from .lwtunnel import Seg6Local, _encap_args
from .sysctl import _CONF4, _CONF6, _GLOBALS, _NEIGH
from .route import _default_scope4


class _DumpCommands:
    """State's ``dump``: the lines that rebuild it."""

    def _vrftable_refused(self, r) -> bool:
        """Whether adding route ``r`` now would be refused by the End.DT*
        vrftable checks (VRF devices exist, strict mode off or no VRF bound
        to the table)."""
        e = r.encap
        return (isinstance(e, Seg6Local) and e.vrftable is not None
                and any(i.kind == "vrf" for i in self.interfaces.values())
                and (not self.sysctls["net.vrf.strict_mode"] or not self._vrf_bound(e.vrftable)))

    # -- dump -------------------------------------------------------------------------
    def dump(self) -> str:
        """iproute2/sysctl lines that, applied to a fresh State, give this one.
        Automatic (proto kernel) routes are not written (addresses are), except
        where they differ from what the addresses produce (then as ``ip route
        del``/``add`` lines).  Known limit: an IPv6 route with metric 0 that
        the addresses do not produce cannot be written (a user metric 0 means
        1024, as ``rtm_to_fib6_config``); it only arises when two interfaces
        compete for one automatic route key."""
        from .state import State      # (state.py imports this module)
        lines: list = []
        fresh = State()

        def sysctl_line(name, v):
            for g in ("conf", "neigh"):
                if f".{g}." in name:
                    head, rest = name.split(f".{g}.", 1)
                    dev, key = rest.rsplit(".", 1)
                    if "." in dev:   # a device name with dots: the slash form
                        name = head.replace(".", "/") + f"/{g}/{dev}/{key}"
            return f"sysctl -w {_q(f'{name}={v}')}"

        for name in _GLOBALS:
            if self.sysctls[name] != fresh.sysctls[name]:
                lines.append(sysctl_line(name, self.sysctls[name]))
        for scope in ("all", "default"):
            staged = State().apply("\n".join(lines))
            for fam, table in ((4, _CONF4), (6, _CONF6)):
                for key in table:
                    name = f"net.ipv{fam}.conf.{scope}.{key}"
                    if self.sysctls[name] != staged.sysctls[name]:
                        lines.append(sysctl_line(name, self.sysctls[name]))
                for key in _NEIGH if scope == "default" else ():
                    name = f"net.ipv{fam}.neigh.default.{key}"
                    if self.sysctls[name] != staged.sysctls[name]:
                        lines.append(sysctl_line(name, self.sysctls[name]))
        # interfaces, in ifindex order
        done = set()
        vrf_at = None      # where the first VRF device is created
        for itf in sorted(self.interfaces.values(), key=lambda x: x.ifindex):
            if itf.name in done:
                continue
            n = _q(itf.name)
            if itf.kind == "loopback":
                pass
            elif itf.kind in ("dummy", "tun", "tap") or itf.kind is None:
                if itf.kind == "dummy":
                    lines.append(f"ip link add {n} type dummy")
                elif itf.kind in ("tun", "tap"):
                    lines.append(f"ip tuntap add dev {n} mode {itf.kind}")
                else:
                    lines.append(f"ip link set dev {n} up")
            elif itf.kind == "veth":
                peer = self.interfaces.get(itf.link)
                if (peer is None or peer.kind != "veth" or peer.link != itf.name
                        or peer.ifindex != itf.ifindex + 1):
                    raise ValueError(f"cannot dump veth {itf.name}: peer not created with it")
                lines.append(f"ip link add {_q(peer.name)} type veth peer name {n}")
                done.add(peer.name)
            elif itf.kind == "vlan":
                lines.append(f"ip link add link {_q(itf.link)} name {n} type vlan id {itf.vlan}")
            elif itf.kind == "vrf":
                if vrf_at is None:
                    vrf_at = len(lines)
                lines.append(f"ip link add {n} type vrf table {_table_str(itf.vrf_table)}")
            else:
                raise ValueError(f"cannot dump interface kind {itf.kind!r}")
            for x in [itf] + ([self.interfaces[itf.link]] if itf.kind == "veth" else []):
                settings = []
                dflt_mtu = {"loopback": 65536, "vrf": 65575}.get(x.kind, 1500)
                if x.mtu != dflt_mtu:
                    settings.append(f"mtu {x.mtu}")
                if x.mac != (bytes(6) if x.kind == "loopback" else default_mac(x.ifindex)):
                    settings.append(f"address {_mac_str(x.mac)}")
                if not x.up:
                    settings.append("down")
                if settings:
                    lines.append(f"ip link set dev {_q(x.name)} {' '.join(settings)}")
        # VRF masters, once every device exists
        for itf in sorted(self.interfaces.values(), key=lambda x: x.ifindex):
            if itf.master is not None:
                lines.append(f"ip link set dev {_q(itf.name)} master {_q(itf.master)}")
        # per-device sysctls
        staged = State().apply("\n".join(lines))
        for itf in sorted(self.interfaces.values(), key=lambda x: x.ifindex):
            for fam, table in ((4, _CONF4), (6, _CONF6)):
                for key in table:
                    name = f"net.ipv{fam}.conf.{itf.name}.{key}"
                    if self.sysctls.get(name) != staged.sysctls.get(name):
                        lines.append(sysctl_line(name, self.sysctls[name]))
                for key in _NEIGH:
                    name = f"net.ipv{fam}.neigh.{itf.name}.{key}"
                    if self.sysctls.get(name) != staged.sysctls.get(name):
                        lines.append(sysctl_line(name, self.sysctls[name]))
        # addresses
        for itf in sorted(self.interfaces.values(), key=lambda x: x.ifindex):
            addrs = list(itf.addrs)
            if itf.kind == "loopback":
                dflt = fresh.interfaces["lo"].addrs
                if addrs[:len(dflt)] == dflt:
                    addrs = addrs[len(dflt):]
                else:
                    for a in dflt:
                        lines.append(f"ip -{a.version} addr del {a} dev lo")
            for a in addrs:
                lines.append(f"ip -{a.version} addr add {a} dev {_q(itf.name)}")
        for (dev, addr), mac in self.neighbours.items():
            lines.append(f"ip -{addr.version} neigh add {addr} lladdr {_mac_str(mac)} "
                         f"dev {_q(dev)} nud permanent")
        for (dev, addr), router in self.proxies.items():
            lines.append(f"ip -{addr.version} neigh add proxy {addr} dev {_q(dev)}"
                         + (" router" if router else ""))
        if self.sr_tunsrc is not None:
            lines.append(f"ip sr tunsrc set {self.sr_tunsrc}")
        for keyid, (algo, secret) in self.hmac_keys.items():
            lines.append(f"ip sr hmac set {keyid} {algo} "
                         f"{_q(secret.decode('utf-8', 'surrogateescape'))}")
        # routes and rules: the difference from what the lines so far produce
        staged = State().apply("\n".join(lines))
        for k, r in staged.routes.items():
            if self.routes.get(k) != r:
                lines.append(_route_del_line(r))
        early = []
        for k, r in self.routes.items():
            if staged.routes.get(k) != r:
                if vrf_at is not None and self._vrftable_refused(r):
                    # added while no VRF device existed (or its VRF went
                    # away): written before the first VRF, where it is valid
                    devs = [nh.dev for nh in r.nexthops] + [r.encap.oif]
                    first = min(i.ifindex for i in self.interfaces.values() if i.kind == "vrf")
                    if any(d is not None and (d not in self.interfaces
                                              or self.interfaces[d].ifindex > first)
                           for d in devs):
                        raise ValueError(f"cannot dump route {r.prefix}: {r.encap.action} "
                                         f"vrftable {r.encap.vrftable} has no VRF device bound "
                                         "to its table and its device was created after a VRF")
                    early.append(_route_add_line(r))
                else:
                    lines.append(_route_add_line(r))
        if early:
            lines[vrf_at:vrf_at] = early
        for fam in (4, 6):
            mine, theirs = self.rules.get(fam, []), staged.rules.get(fam, [])
            for pref in sorted({r.pref for r in mine} | {r.pref for r in theirs}):
                m = [r for r in mine if r.pref == pref]
                t = [r for r in theirs if r.pref == pref]
                if m[:len(t)] == t:
                    extra = m[len(t):]
                else:
                    lines += [_rule_line(r, "del") for r in t]
                    extra = m
                lines += [_rule_line(r, "add") for r in extra]
        return "\n".join(lines) + ("\n" if lines else "")


def _route_common(r: Route) -> list:
    a = [] if r.type == "unicast" else [r.type]
    a.append("default" if r.prefix.prefixlen == 0 else str(r.prefix))
    dflt_table = RT_TABLE_LOCAL if r.type in _LOCAL_TABLE_TYPES else RT_TABLE_MAIN
    if r.table != dflt_table:
        a += ["table", _table_str(r.table)]
    return a


def _route_add_line(r: Route) -> str:
    a = [f"ip -{r.family} route add"] + _route_common(r) + _encap_args(r)
    multipath = len(r.nexthops) > 1 or any(nh.weight != 1 for nh in r.nexthops)
    if not multipath:
        for nh in r.nexthops:
            if nh.gw is not None:
                a += ["via", str(nh.gw)]
            if nh.dev is not None:
                a += ["dev", _q(nh.dev)]
    if r.metric != (1024 if r.family == 6 else 0):
        a += ["metric", str(r.metric)]
    if r.proto != "boot":
        a += ["proto", r.proto]
    if r.family == 4 and r.scope != _default_scope4(r.type, r.nexthops, multipath):
        a += ["scope", r.scope]
    if r.src is not None:
        a += ["src", str(r.src)]
    if r.mtu is not None:
        a += ["mtu", str(r.mtu)]
    if r.hoplimit is not None:
        a += ["hoplimit", str(r.hoplimit)]
    if multipath:
        for nh in r.nexthops:
            a.append("nexthop")
            if nh.gw is not None:
                a += ["via", str(nh.gw)]
            if nh.dev is not None:
                a += ["dev", _q(nh.dev)]
            a += ["weight", str(nh.weight)]
    return " ".join(a)


def _route_del_line(r: Route) -> str:
    a = [f"ip -{r.family} route del"] + _route_common(r)
    if "table" not in a:
        a += ["table", _table_str(r.table)]
    if r.metric:
        a += ["metric", str(r.metric)]
    return " ".join(a)


def _rule_line(r: Rule, op: str) -> str:
    a = [f"ip -{r.family} rule {op} pref {r.pref}"]
    if r.src is not None:
        a.append(f"from {r.src}")
    if r.dst is not None:
        a.append(f"to {r.dst}")
    if r.iif is not None:
        a.append(f"iif {_q(r.iif)}")
    if r.l3mdev:
        a.append("l3mdev")
    elif r.action == "lookup":
        a.append(f"table {_table_str(r.table)}")
    else:
        a.append(r.action)
    return " ".join(a)

"""The ``fastpath`` command.

    fastpath check --config FILE                 validate a config, summarise it
    fastpath routes show --config FILE [--all]   the config as iproute2 lines
                                                 (--all: every FIB entry, kernel ones too)
    fastpath process --config FILE --iif DEV [--ethernet] HEXPACKET...
                                                 what the datapath does with packets

Errors are one line on stderr: exit 1 for a bad config or input, 2 for bad
usage.
"""
from __future__ import annotations

import argparse
import binascii
import sys

from .batch import Batch
from .config import ConfigError
from .router import Router


def _load(path: str, mode: str = "noref") -> Router:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SystemExit(_fail(f"cannot read {path}: {e.strerror}"))
    r = Router(mode=mode)
    try:
        r.configure(text)
    except ConfigError as e:
        raise SystemExit(_fail(f"{path}: {e}"))
    return r


def _fail(msg: str, code: int = 1) -> int:
    print(f"fastpath: {msg}", file=sys.stderr)
    return code


def _route_line(route) -> str:
    """One route as `ip route show table all` prints it (close enough to
    paste back)."""
    parts = []
    if route.type != "unicast":
        parts.append(route.type)
    plen = route.prefix.prefixlen
    full = 32 if route.family == 4 else 128
    parts.append(str(route.prefix.network_address) if plen == full else str(route.prefix))
    if len(route.nexthops) == 1:
        nh = route.nexthops[0]
        if nh.gw is not None:
            parts += ["via", str(nh.gw)]
        if nh.dev:
            parts += ["dev", nh.dev]
    names = {255: "local", 254: "main", 253: "default"}
    parts += ["table", names.get(route.table, str(route.table)), "proto", route.proto]
    if route.scope:
        parts += ["scope", route.scope]
    if route.src is not None:
        parts += ["src", str(route.src)]
    parts += ["metric", str(route.metric)]
    if len(route.nexthops) > 1:
        for nh in route.nexthops:
            parts += ["nexthop"] + (["via", str(nh.gw)] if nh.gw is not None else []) + \
                (["dev", nh.dev] if nh.dev else []) + ["weight", str(nh.weight)]
    return " ".join(parts)


def cmd_check(args) -> int:
    r = _load(args.config)
    s = r.state
    nroutes = sum(1 for x in s.routes.values() if x.proto != "kernel")
    print(f"{args.config}: ok: {len(s.interfaces)} interfaces, {nroutes} routes "
          f"({len(s.routes)} with the kernel's own), "
          f"{sum(len(v) for v in s.rules.values())} rules")
    return 0


def cmd_routes(args) -> int:
    r = _load(args.config)
    if args.all:
        for itf in sorted(r.state.interfaces.values(), key=lambda x: x.ifindex):
            if itf.kind == "vrf":
                slaves = [i.name for i in r.state.interfaces.values() if i.master == itf.name]
                print(f"# table {itf.vrf_table}: VRF {itf.name} (the l3mdev rules look it up for "
                      f"{', '.join([itf.name] + slaves)})")
        for fam in (4, 6):
            print(f"# ip -{fam} route show table all")
            for route in sorted((x for x in r.state.routes.values() if x.family == fam),
                                key=lambda x: (-x.table, x.prefix.prefixlen, str(x.prefix))):
                print(_route_line(route))
    else:
        sys.stdout.write(r.dump())
    return 0


def cmd_process(args) -> int:
    r = _load(args.config)
    pkts = []
    for h in args.packets:
        try:
            pkts.append(binascii.unhexlify(h.replace(":", "").replace(" ", "")))
        except (binascii.Error, ValueError):
            return _fail(f"not a hex packet: {h[:40]!r}")
    b = Batch.from_packets(pkts, linktype="ethernet" if args.ethernet else "raw")
    b.set_iif(args.iif)
    try:
        r.process(b)
    except ValueError as e:
        return _fail(str(e))
    for i, res in enumerate(b.results()):
        line = f"{i}: {res.verdict}"
        if res.reason:
            line += f" reason {res.reason}"
        if res.oif:
            line += f" dev {res.oif}"
        if res.nexthop:
            line += f" via {res.nexthop}"
        print(line)
        if res.verdict in ("forward", "icmp"):
            print("   " + res.data.hex())
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fastpath", description="fastpath: a userspace model of the "
                                 "Linux SRv6/IPv6/IPv4 datapath")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("check", help="validate a config file")
    p.add_argument("--config", required=True)
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("routes", help="show the configuration / FIB")
    p.add_argument("action", choices=["show"])
    p.add_argument("--config", required=True)
    p.add_argument("--all", action="store_true", help="every route, the kernel's own too")
    p.set_defaults(func=cmd_routes)
    p = sub.add_parser("process", help="run packets (hex) through the datapath")
    p.add_argument("--config", required=True)
    p.add_argument("--iif", required=True)
    p.add_argument("--ethernet", action="store_true", help="packets are Ethernet frames")
    p.add_argument("packets", nargs="+", metavar="HEXPACKET")
    p.set_defaults(func=cmd_process)
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        return args.func(args)
    except SystemExit as e:
        return int(e.code or 0)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())

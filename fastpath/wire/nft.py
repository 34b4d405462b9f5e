"""The kernel must not route the packets fastpath routes.

On the interfaces fastpath owns, one nftables table of the ``netdev`` family
with a chain per device hooked at ``ingress`` whose policy is ``drop``.  The
netdev ingress hook runs in ``__netif_receive_skb_core`` after the packet
taps (``ptype_all``: fastpath's AF_PACKET sockets have the frame by then) and
before the protocol handlers (``ip_rcv``, ``ipv6_rcv``, ``arp_rcv``), so the
kernel neither forwards, delivers nor answers ARP/ND for those frames.
Frames fastpath transmits do not pass the ingress hook.  With the host
stack on (wire.host), each chain first accepts the frames fastpath hands
the kernel, ARP and neighbour discovery.

The table is named ``fastpath_<pid>_<random>``, unique per run; ``remove``
deletes it and is idempotent.  ``Guard`` removes it on every exit path it
can see: ``with`` / ``finally``, ``atexit``, and the SIGTERM / SIGINT / SIGHUP
handlers the CLI installs (fastpath.run).  A SIGKILL leaves it behind: the
next run removes tables named after a pid that no longer exists
(``sweep_stale``), or by hand: ``nft delete table netdev NAME``.
"""
from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import subprocess

PREFIX = "fastpath_"
_NAME = re.compile(r"^fastpath_(\d+)_[0-9a-f]+$")


class NftError(RuntimeError):
    """nft is missing or refused the table (the message is for a person)."""


def _nft(args, stdin=None, netns=None):
    exe = shutil.which("nft")
    if exe is None:
        raise NftError("nft not found: install nftables (apt-get install nftables)")
    cmd = [exe] + list(args)
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if p.returncode != 0:
        msg = (p.stderr or p.stdout).strip().splitlines()
        raise NftError(f"nft {' '.join(args)}: {msg[0] if msg else 'failed'}")
    return p.stdout


# --host-stack (wire.host): what the kernel still receives on those devices --
# the frames fastpath hands it (marked by the TAP's program), and ARP and
# neighbour discovery (its own neighbours, its answers for its addresses)
def _host_stack_rules():
    from .host import MARK
    return [f"    meta mark {MARK:#x} accept",
            "    ether type arp accept",
            "    ether type ip6 ip6 nexthdr ipv6-icmp icmpv6 type { nd-router-solicit, "
            "nd-router-advert, nd-neighbor-solicit, nd-neighbor-advert, nd-redirect } accept"]


def tables(netns=None) -> list:
    """The names of fastpath's netdev tables in this network namespace."""
    out = _nft(["list", "tables", "netdev"], netns=netns)
    names = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "table" and parts[2].startswith(PREFIX):
            names.append(parts[2])
    return names


def sweep_stale(netns=None) -> list:
    """Delete the tables of fastpath runs whose process is gone (a SIGKILL);
    returns their names."""
    gone = []
    for name in tables(netns):
        m = _NAME.match(name)
        if not m:
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue
        try:
            _nft(["delete", "table", "netdev", name], netns=netns)
            gone.append(name)
        except NftError:
            pass
    return gone


def _quote(dev: str) -> str:
    if not re.match(r"^[A-Za-z0-9_.@:-]{1,15}$", dev):
        raise NftError(f"interface name {dev!r} cannot be used in an nftables rule")
    return '"' + dev + '"'


class Guard:
    """The ingress-drop table over ``devices``; ``install()`` then
    ``remove()`` (or ``with Guard(devs):``)."""

    def __init__(self, devices, netns=None, host_stack=False):
        self.devices = list(devices)
        self.host_stack = host_stack
        self.netns = netns
        self.name = f"{PREFIX}{os.getpid()}_{secrets.token_hex(4)}"
        self.installed = False

    def ruleset(self) -> str:
        lines = [f"table netdev {self.name} {{"]
        for k, dev in enumerate(self.devices):
            lines += [f"  chain ingress_{k} {{",
                      f"    type filter hook ingress device {_quote(dev)} priority 0; policy drop;"]
            if self.host_stack:
                lines += _host_stack_rules()
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def install(self, keep=False) -> "Guard":
        """``keep``: the table outlives this process (not removed at its
        exit, nor by ``remove``): for a namespace whose own end removes it
        (python -m fastpath.kernel lab --control)."""
        text = self.ruleset()
        if keep:
            _nft(["-f", "-"], stdin=text, netns=self.netns)
            return self
        # marked first: a signal that lands while nft runs still removes it
        self.installed = True
        atexit.register(self.remove)
        try:
            _nft(["-f", "-"], stdin=text, netns=self.netns)
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        if not self.installed:
            return
        self.installed = False
        try:
            _nft(["delete", "table", "netdev", self.name], netns=self.netns)
        except NftError:
            # already gone (deleted by hand, or the netns went away)
            pass
        try:
            atexit.unregister(self.remove)
        except Exception:
            pass

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.remove()
        return False

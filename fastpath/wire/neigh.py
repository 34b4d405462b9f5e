"""The neighbour subsystem of fastpath on the wire: ARP (net/ipv4/arp.c) and
IPv6 neighbour discovery (net/ipv6/ndisc.c) over the generic state machine
of net/core/neighbour.c.

Control plane only: it sees ARP and NS/NA frames (sorted out of each
received batch by fastpath.wire.live), the forwarded packets the datapath
left without a destination MAC (l2_build writes zeros when its neighbour
table has no entry; the nexthop is in ``batch.nexthop``), and its timers;
never every packet.  What it learns reaches the datapath's neighbour table
as ``ip neigh replace`` / ``ip neigh del`` lines for ``Router.configure``,
batched once per loop iteration (``take_changes``).

As the kernel (defaults of /proc/sys/net/ipv{4,6}/neigh/default):

* states ``incomplete``, ``reachable``, ``stale``, ``delay``, ``probe``,
  ``failed``; ``permanent`` for the configuration's ``ip neigh`` lines, which
  nothing learned overrides (neigh_update refuses NUD_PERMANENT without
  NEIGH_UPDATE_F_ADMIN);
* a packet for an unknown (or failed) nexthop creates an ``incomplete`` entry
  and sends the first probe at once (__neigh_event_send), then one every
  ``retrans_time`` (1 s); the entry fails when ``mcast_solicit`` (3)
  broadcast / multicast probes went unanswered (neigh_max_probes:
  ucast_solicit + app_solicit + mcast_solicit, probes starting at
  ucast_solicit), and its queued packets are dropped with reason
  ``neigh_failed`` (SKB_DROP_REASON_NEIGH_FAILED);
* up to ``unres_qlen_bytes`` (212992) of packets wait per unresolved entry,
  counted by an estimate of their skb truesize (``_truesize``: the kernel's
  SKB_TRUESIZE of the frame, 2112 bytes for a 1514-byte frame, so 100 of
  them); the oldest are dropped first (``neigh_queuefull``);
* ``reachable`` lasts ``reachable_time``, ``base_reachable_time`` (30 s)
  times a random factor in [0.5, 1.5) (neigh_rand_reach_time), then the
  entry is ``stale`` (forwarded traffic does not confirm reachability); a
  stale entry that is used goes to ``delay``, after
  ``delay_first_probe_time`` (5 s) to ``probe``: ``ucast_solicit`` (3)
  unicast probes ``retrans_time`` apart, then ``failed``; a solicited
  reply (ARP reply addressed to us, NA with S) makes it ``reachable``;
* learning: an ARP request for one of our addresses creates or updates the
  sender's entry as ``stale`` (neigh_event_ns); an ARP reply updates an
  existing entry (``reachable`` if it was addressed to us, else ``stale``);
  an NS with a source link-layer address option creates or updates the
  sender's entry as ``stale``; an NA updates an existing entry
  (``reachable`` with S, else ``stale``; O overrides a different address,
  without O a connected entry becomes ``stale`` and keeps its address).

Replies are the kernel's bytes: ARP replies as arp_process -> arp_send
(op 2, our MAC as sender, the requester's as target, Ethernet to the
requester); NA as ndisc_recv_ns -> ndisc_send_na (hop limit 255, traffic
class and flow label 0, R set since fastpath forwards, S set unless the NS
was a DAD probe, O and the target link-layer address option only for a
multicast NS, source address = the target; DAD probes get their NA at
ff02::1).  Differences: the NS fastpath sends uses the device's link-local
address as its source when the configuration gives one, else the device's
first IPv6 address (the kernel, with no link-local address, sends none);
gc (gc_stale_time, gc_thresh*) is not modelled; ARP/ND in 802.1Q frames are
not handled.
"""
from __future__ import annotations

import ipaddress
import random
import struct
from collections import deque
from dataclasses import dataclass, field

# net/ipv4/neigh/default and net/ipv6/neigh/default
PARAMS = {
    "base_reachable_time": 30.0,
    "retrans_time": 1.0,
    "delay_first_probe_time": 5.0,
    "mcast_solicit": 3,
    "ucast_solicit": 3,
    "app_solicit": 0,
    "mcast_resolicit": 0,
    "unres_qlen_bytes": 212992,
}

INCOMPLETE, REACHABLE, STALE, DELAY, PROBE, FAILED, PERMANENT = (
    "incomplete", "reachable", "stale", "delay", "probe", "failed", "permanent")
VALID = frozenset({REACHABLE, STALE, DELAY, PROBE, PERMANENT})
CONNECTED = frozenset({REACHABLE, PERMANENT})

ETH_P_ARP, ETH_P_IP, ETH_P_IPV6 = 0x0806, 0x0800, 0x86DD
BCAST = b"\xff" * 6


def _truesize(n: int) -> int:
    """SKB_TRUESIZE(n): SKB_DATA_ALIGN(n) + SKB_DATA_ALIGN(sizeof(struct
    sk_buff)) + SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) on x86-64
    (64-byte alignment; 256 and 320 bytes)."""
    return ((n + 63) & ~63) + 256 + 320


def _csum(data: bytes) -> int:
    if len(data) & 1:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def icmp6_checksum(src: bytes, dst: bytes, payload: bytes) -> int:
    pseudo = src + dst + struct.pack("!I3xB", len(payload), 58)
    return ~_csum(pseudo + payload) & 0xFFFF


def solicited_node(addr: bytes) -> bytes:
    return bytes.fromhex("ff0200000000000000000001ff") + addr[13:]


def mcast_mac6(addr: bytes) -> bytes:
    return b"\x33\x33" + addr[12:]


def mac_str(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


@dataclass
class Link:
    """One attached Ethernet interface as the neighbour code sees it."""
    name: str
    ifindex: int                   # the Router's
    mac: bytes
    addrs4: list = field(default_factory=list)     # IPv4Interface
    addrs6: list = field(default_factory=list)     # IPv6Interface


@dataclass
class Entry:
    ifindex: int
    family: int
    addr: bytes                    # 4 or 16 bytes
    state: str = INCOMPLETE
    mac: bytes | None = None
    probes: int = 0
    timer: float | None = None     # when neigh_timer_handler runs next
    confirmed: float = 0.0
    updated: float = 0.0
    used: float = 0.0
    reachable_time: float = 30.0
    queue: deque = field(default_factory=deque)
    queue_bytes: int = 0
    router: bool = False
    owner: object = field(default=None, repr=False, compare=False)

    def __setattr__(self, k, v):
        object.__setattr__(self, k, v)
        if k in ("state", "timer"):
            o = self.__dict__.get("owner")
            if o is not None:
                o._index(self)

    @property
    def ip(self):
        return ipaddress.ip_address(self.addr)


# arp: hardware type Ethernet, protocol IPv4, 6, 4
_ARP_HDR = struct.pack("!HHBB", 1, ETH_P_IP, 6, 4)


def arp_frame(op: int, eth_dst: bytes, src_mac: bytes, sip: bytes, tha: bytes, tip: bytes) -> bytes:
    """arp_create(): Ethernet header, ARP header, sha/sip/tha/tip; no padding
    (the device pads on a real wire; veth does not)."""
    return (eth_dst + src_mac + struct.pack("!H", ETH_P_ARP) + _ARP_HDR + struct.pack("!H", op)
            + src_mac + sip + tha + tip)


def ipv6_frame(eth_dst: bytes, src_mac: bytes, src: bytes, dst: bytes, icmp: bytes) -> bytes:
    """ndisc_send_skb(): ip6_nd_hdr (tclass 0, flow label 0, hop limit 255)
    and the ICMPv6 checksum."""
    icmp = icmp[:2] + struct.pack("!H", icmp6_checksum(src, dst, icmp)) + icmp[4:]
    hdr = struct.pack("!IHBB", 6 << 28, len(icmp), 58, 255) + src + dst
    return eth_dst + src_mac + struct.pack("!H", ETH_P_IPV6) + hdr + icmp


def na_frame(eth_dst, src_mac, src, dst, target, router, solicited, override, tllao) -> bytes:
    flags = (0x80 if router else 0) | (0x40 if solicited else 0) | (0x20 if override else 0)
    icmp = struct.pack("!BBHB3x", 136, 0, 0, flags) + target
    if tllao:
        icmp += struct.pack("!BB", 2, 1) + src_mac
    return ipv6_frame(eth_dst, src_mac, src, dst, icmp)


def ns_frame(eth_dst, src_mac, src, dst, target) -> bytes:
    icmp = struct.pack("!BBH4x", 135, 0, 0) + target
    if any(src):
        icmp += struct.pack("!BB", 1, 1) + src_mac
    return ipv6_frame(eth_dst, src_mac, src, dst, icmp)


allnodes6 = bytes.fromhex("ff020000000000000000000000000001")


def _nd_options(opts: bytes):
    """ndisc_parse_options: {type: value}; None when an option is malformed
    (zero length or running past the packet)."""
    out = {}
    while opts:
        if len(opts) < 2 or opts[1] == 0 or opts[1] * 8 > len(opts):
            return None
        n = opts[1] * 8
        if opts[0] in (1, 2) and opts[0] in out:
            return None           # duplicated SLLAO/TLLAO: ND_PRINTK "duplicated"
        out.setdefault(opts[0], opts[2:n])
        opts = opts[n:]
    return out


class Neighbours:
    """The neighbour tables of the attached links.  ``send(ifindex, frame)``
    transmits one frame; ``clock()`` is the time in seconds (monotonic)."""

    def __init__(self, links, send, clock, static=(), params=None, rng=None, forwarding=True,
                 local4=(), proxy=None):
        self.links = {l.ifindex: l for l in links}
        self.send = send
        self.clock = clock
        self.p = dict(PARAMS, **(params or {}))
        self.rng = rng or random.Random()
        self.forwarding = forwarding
        self.entries: dict = {}
        self.static = dict(static)          # (ifindex, family, addr bytes) -> mac
        # every IPv4 address of the router (arp_process: inet_addr_type ==
        # RTN_LOCAL on any device, arp_ignore 0), loopback ones excepted
        self.local4 = {a for a in local4 if not a[0] == 127}
        self.changes: dict = {}             # key -> mac or None (delete)
        # proxy ARP / NDP: an object with arp(ifindex, sip, tip) -> bool,
        # ndp(ifindex, target) -> None or NTF_ROUTER, delay(family, ifindex)
        # -> seconds, qlen(family, ifindex) (see Proxy in wire.live); None: off
        self.proxy = proxy
        # pneigh_enqueue's proxy_queue: [when, seq, ifindex, family, frame]
        self.proxy_queue: list = []
        self._pq_seq = 0
        # indexes kept by Entry.__setattr__, so that the per-batch questions
        # (any stale entry in use? the next timer?) do not walk every entry
        self.stale: set = set()
        self.timed: set = set()
        self.counters = {"arp_requests_rx": 0, "arp_replies_rx": 0, "arp_replies_tx": 0,
                         "arp_requests_tx": 0, "ns_rx": 0, "na_rx": 0, "na_tx": 0, "ns_tx": 0,
                         "nd_invalid": 0, "queued": 0, "sent_after_resolution": 0,
                         "sent_before_sync": 0,
                         "neigh_failed": 0, "neigh_queuefull": 0, "proxy_arp_tx": 0,
                         "proxy_na_tx": 0, "proxy_delayed": 0, "proxy_qlen_drop": 0}

    # ------------------------------------------------------------------
    # state machine (net/core/neighbour.c)
    def _reach_time(self) -> float:
        b = self.p["base_reachable_time"]
        return b * (0.5 + self.rng.random())     # neigh_rand_reach_time: [b/2, 3b/2)

    def _max_probes(self, e) -> int:
        p = self.p
        return p["ucast_solicit"] + p["app_solicit"] + (
            p["mcast_resolicit"] if e.state == PROBE else p["mcast_solicit"])

    def _lookup(self, ifindex, family, addr, create=False):
        key = (ifindex, family, addr)
        e = self.entries.get(key)
        if e is None and create and key not in self.static:
            e = Entry(ifindex, family, addr, state=None, reachable_time=self._reach_time(),
                      owner=self)
            self.entries[key] = e     # NUD_NONE until resolution or an update
        return e

    def _set_datapath(self, e, mac):
        key = (e.ifindex, e.family, e.addr)
        self.changes[key] = mac

    def update(self, e, lladdr, new, override=False, weak_override=False):
        """neigh_update() for a learned entry."""
        now = self.clock()
        old = e.state
        if e.state == PERMANENT:
            return
        if new not in VALID:
            # to failed/none: the address is forgotten by the datapath
            e.state = new
            e.timer = None
            if old in VALID:
                self._set_datapath(e, None)
            return
        old_valid = old in VALID
        if lladdr is None:
            if not old_valid:
                return
            lladdr = e.mac
        if new in CONNECTED:
            e.confirmed = now
        e.updated = now
        if old_valid:
            if lladdr != e.mac and not override:
                if weak_override and old in CONNECTED:
                    lladdr, new = e.mac, STALE
                else:
                    return
            elif lladdr == e.mac and new == STALE:
                new = old
        if new != old:
            e.state = new
            e.timer = (now + e.reachable_time) if new == REACHABLE else None
            if new == REACHABLE:
                e.reachable_time = self._reach_time()
                e.timer = now + e.reachable_time
        changed = lladdr != e.mac
        e.mac = lladdr
        if changed or not old_valid:
            self._set_datapath(e, lladdr)
        if not old_valid:
            self._flush_queue(e)

    def _flush_queue(self, e):
        while e.queue:
            frame = e.queue.popleft()
            self.send(e.ifindex, e.mac + frame[6:])
            self.counters["sent_after_resolution"] += 1
        e.queue_bytes = 0

    def resolve(self, ifindex, family, addr, frames):
        """Packets the datapath forwarded to ``addr`` on ``ifindex`` without a
        MAC (__neigh_event_send): queue them and start resolution."""
        e = self._lookup(ifindex, family, addr, create=True)
        if e is None:
            return           # a static entry: the datapath had its MAC
        now = self.clock()
        e.used = now
        if e.state in VALID:
            # learned since the batch was processed (or while a reload held
            # the datapath's copy back): send them now
            self.counters["sent_before_sync"] += len(frames)
            for f in frames:
                self.send(ifindex, e.mac + f[6:])
            return
        if e.state != INCOMPLETE:
            e.probes = self.p["ucast_solicit"]
            e.state = INCOMPLETE
            e.updated = now
            e.timer = now + max(self.p["retrans_time"], 0.01)
            self._probe(e)
        for f in frames:
            ts = _truesize(len(f))
            while e.queue and e.queue_bytes + ts > self.p["unres_qlen_bytes"]:
                old = e.queue.popleft()
                e.queue_bytes -= _truesize(len(old))
                self.counters["neigh_queuefull"] += 1
            if e.queue_bytes + ts > self.p["unres_qlen_bytes"]:
                self.counters["neigh_queuefull"] += 1
                continue
            e.queue.append(f)
            e.queue_bytes += ts
            self.counters["queued"] += 1

    def used(self, ifindex, family, addr):
        """A forwarded packet used a learned entry (neigh_event_send on a
        stale one: delay)."""
        e = self.entries.get((ifindex, family, addr))
        if e is None:
            return
        now = self.clock()
        e.used = now
        if e.state == STALE:
            e.state = DELAY
            e.timer = now + self.p["delay_first_probe_time"]

    def _index(self, e):
        key = (e.ifindex, e.family, e.addr)
        if e.state == STALE:
            self.stale.add(key)
        else:
            self.stale.discard(key)
        if e.timer is not None:
            self.timed.add(key)
        else:
            self.timed.discard(key)

    def stale_keys(self):
        return list(self.stale)

    def next_timer(self):
        t = min((self.entries[k].timer for k in self.timed), default=None)
        if self.proxy_queue:
            q = self.proxy_queue[0][0]
            t = q if t is None else min(t, q)
        return t

    def _proxy_enqueue(self, link, family, frame):
        """pneigh_enqueue: the request is answered after a random time below
        proxy_delay (get_random_u32_below, in jiffies: uniform here), by
        running it through arp_process / ndisc_recv_ns again (proxy_redo,
        LOCALLY_ENQUEUED); dropped while the device's queue holds more than
        proxy_qlen."""
        qlen = sum(1 for x in self.proxy_queue if x[2] == link.ifindex and x[3] == family)
        if qlen > self.proxy.qlen(family, link.ifindex):
            self.counters["proxy_qlen_drop"] += 1
            return
        when = self.clock() + self.rng.random() * self.proxy.delay(family, link.ifindex)
        self._pq_seq += 1
        self.proxy_queue.append((when, self._pq_seq, link.ifindex, family, frame))
        self.proxy_queue.sort()
        self.counters["proxy_delayed"] += 1

    def _proxy_process(self, now):
        """neigh_proxy_process: the queued requests that are due."""
        while self.proxy_queue and self.proxy_queue[0][0] <= now:
            _w, _s, ifindex, family, frame = self.proxy_queue.pop(0)
            link = self.links.get(ifindex)
            if link is None:
                continue
            if family == 4:
                self._arp_rcv(link, frame, requeued=True)
            else:
                self._ndisc_rcv(link, frame, requeued=True)

    def tick(self):
        """neigh_timer_handler for every entry whose timer is due (and the
        proxy queue's)."""
        now = self.clock()
        if self.proxy_queue:
            self._proxy_process(now)
        for e in [self.entries[k] for k in self.timed]:
            if e.timer is None or e.timer > now:
                continue
            st = e.state
            nxt = None
            if st == REACHABLE:
                if now <= e.confirmed + e.reachable_time:
                    nxt = e.confirmed + e.reachable_time
                elif now <= e.used + self.p["delay_first_probe_time"]:
                    e.state = DELAY
                    nxt = now + self.p["delay_first_probe_time"]
                else:
                    e.state = STALE
            elif st == DELAY:
                if now <= e.confirmed + self.p["delay_first_probe_time"]:
                    e.state = REACHABLE
                    nxt = e.confirmed + e.reachable_time
                else:
                    e.state = PROBE
                    e.probes = 0
                    nxt = now + max(self.p["retrans_time"], 0.01)
            else:        # incomplete, probe
                nxt = now + max(self.p["retrans_time"], 0.01)
            if e.state in (INCOMPLETE, PROBE) and e.probes >= self._max_probes(e):
                self._fail(e)
                continue
            e.timer = nxt
            if e.state in (INCOMPLETE, PROBE):
                self._probe(e)

    def _fail(self, e):
        """NUD_FAILED and neigh_invalidate: queued packets dropped
        (SKB_DROP_REASON_NEIGH_FAILED)."""
        was_valid = e.state in VALID
        e.state = FAILED
        e.timer = None
        self.counters["neigh_failed"] += len(e.queue)
        e.queue.clear()
        e.queue_bytes = 0
        if was_valid:
            self._set_datapath(e, None)

    def _probe(self, e):
        """neigh_probe: solicit (arp_solicit / ndisc_solicit: unicast to
        the known address while probes < ucast_solicit), then probes + 1."""
        unicast = e.probes - self.p["ucast_solicit"] < 0 and e.mac is not None
        e.probes += 1
        link = self.links.get(e.ifindex)
        if link is None:
            return
        if e.family == 4:
            sip = self._arp_source(link, e.addr)
            if sip is None:
                return
            dst = e.mac if unicast else BCAST
            self.send(e.ifindex, arp_frame(1, dst, link.mac, sip, bytes(6), e.addr))
            self.counters["arp_requests_tx"] += 1
        else:
            src = self._ns_source(link)
            if src is None:
                return
            if unicast:
                frame = ns_frame(e.mac, link.mac, src, e.addr, e.addr)
            else:
                mc = solicited_node(e.addr)
                frame = ns_frame(mcast_mac6(mc), link.mac, src, mc, e.addr)
            self.send(e.ifindex, frame)
            self.counters["ns_tx"] += 1

    @staticmethod
    def _arp_source(link, target: bytes):
        """inet_select_addr(dev, target, RT_SCOPE_LINK): the address of the
        device whose subnet holds the target, else its first."""
        t = ipaddress.IPv4Address(target)
        for a in link.addrs4:
            if t in a.network:
                return a.ip.packed
        return link.addrs4[0].ip.packed if link.addrs4 else None

    @staticmethod
    def _ns_source(link):
        for a in link.addrs6:
            if a.ip.is_link_local:
                return a.ip.packed
        return link.addrs6[0].ip.packed if link.addrs6 else None

    # ------------------------------------------------------------------
    # input
    def input(self, ifindex, frame: bytes, pkttype_host=True):
        """An ARP or ICMPv6 NS/NA frame received on ``ifindex``."""
        link = self.links.get(ifindex)
        if link is None or len(frame) < 14:
            return
        et = struct.unpack_from("!H", frame, 12)[0]
        if et == ETH_P_ARP:
            self._arp_rcv(link, frame)
        elif et == ETH_P_IPV6:
            self._ndisc_rcv(link, frame)

    def _arp_rcv(self, link, f, requeued=False):
        """arp_rcv / arp_process for Ethernet + IPv4 (``requeued``: a proxied
        request out of the proxy queue, LOCALLY_ENQUEUED)."""
        if len(f) < 42:
            return
        hrd, pro, hln, pln, op = struct.unpack_from("!HHBBH", f, 14)
        if hrd != 1 or pro != ETH_P_IP or hln != 6 or pln != 4 or op not in (1, 2):
            return
        sha, sip, tha, tip = f[22:28], f[28:32], f[32:38], f[38:42]
        if sip[0] >= 224 or tip[0] == 127 or tip[0] >= 224 and tip != b"\xff" * 4:
            return            # ipv4_is_multicast(sip), loopback / multicast tip
        if sha[0] & 1:
            return
        dst_is_us = f[0:6] == link.mac            # skb->pkt_type == PACKET_HOST
        if requeued:
            pass
        elif op == 1:
            self.counters["arp_requests_rx"] += 1
        else:
            self.counters["arp_replies_rx"] += 1
        if sip == bytes(4):
            # DAD probe: answered, nothing learned
            if op == 1 and tip in self.local4:
                self.send(link.ifindex, arp_frame(2, sha, link.mac, tip, sha, sip))
                self.counters["arp_replies_tx"] += 1
            return
        if op == 1 and tip in self.local4:
            # neigh_event_ns: the sender becomes stale with its address
            e = self._lookup(link.ifindex, 4, sip, create=True)
            if e is not None:
                self.update(e, sha, STALE, override=True)
            # arp_send_dst: straight to the requester, no neighbour output
            self.send(link.ifindex, arp_frame(2, sha, link.mac, tip, sha, sip))
            self.counters["arp_replies_tx"] += 1
            return
        if op == 1 and self.proxy is not None and sip not in self.local4 \
                and self.proxy.arp(link.ifindex, sip, tip):
            # IN_DEV_FORWARD and a unicast route to tip through another
            # device with proxy_arp (arp_fwd_proxy) or a pneigh entry, or
            # back through this one with proxy_arp_pvlan: neigh_event_ns,
            # then the reply at once for a request to our MAC, one out of
            # the proxy queue or with proxy_delay 0, else pneigh_enqueue
            e = self._lookup(link.ifindex, 4, sip, create=True)
            if e is not None:
                self.update(e, sha, STALE, override=True)
            if requeued or dst_is_us or self.proxy.delay(4, link.ifindex) == 0:
                self.send(link.ifindex, arp_frame(2, sha, link.mac, tip, sha, sip))
                self.counters["arp_replies_tx"] += 1
                self.counters["proxy_arp_tx"] += 1
            else:
                self._proxy_enqueue(link, 4, f)
            return
        if requeued:
            return
        e = self._lookup(link.ifindex, 4, sip)
        if e is not None and e.state != PERMANENT:
            # a reply (or a request for someone else) refreshes what we had;
            # NUD_REACHABLE only for a reply addressed to us
            state = REACHABLE if (op == 2 and dst_is_us) else STALE
            self.update(e, sha, state, override=True)

    def _ndisc_rcv(self, link, f, requeued=False):
        """ndisc_rcv for NS and NA (RFC 4861 7.1 validity checks)."""
        if len(f) < 14 + 40 + 24:
            return
        ip = f[14:54]
        if ip[6] != 58:
            return
        plen = struct.unpack_from("!H", ip, 4)[0]
        icmp = f[54:54 + plen]
        if len(icmp) != plen or len(icmp) < 24:
            self.counters["nd_invalid"] += 1
            return
        src, dst = ip[8:24], ip[24:40]
        typ, code = icmp[0], icmp[1]
        if ip[7] != 255 or code != 0 or icmp6_checksum(src, dst, icmp[:2] + b"\0\0" + icmp[4:]) != \
                struct.unpack_from("!H", icmp, 2)[0]:
            self.counters["nd_invalid"] += 1
            return
        target = icmp[8:24]
        opts = _nd_options(icmp[24:])
        if opts is None or target[0] == 0xFF:
            self.counters["nd_invalid"] += 1
            return
        if typ == 135:
            self._ns_rcv(link, f, src, dst, target, opts, requeued)
        elif typ == 136:
            self._na_rcv(link, f, src, dst, icmp, target, opts)

    def _na_source(self, link, daddr: bytes):
        """ipv6_dev_get_saddr(dev, daddr), simplified: an address of the
        destination's scope (link-local for a link-local or link-scope
        multicast destination, only the device's; else a global one: RFC
        6724 rule 2), the device's first (rule 5, the outgoing interface),
        the longest common prefix next (rule 8); None without one."""
        d = ipaddress.IPv6Address(daddr)
        want_ll = d.is_link_local or (d.is_multicast and (daddr[1] & 0x0F) <= 2)
        links = [link] if want_ll else [link] + [l for l in self.links.values() if l is not link]
        for l in links:
            best, score = None, -1
            for a in l.addrs6:
                if a.ip.is_link_local != want_ll:
                    continue
                common = 128 - (int(a.ip) ^ int(d)).bit_length()
                if common > score:
                    best, score = a.ip.packed, common
            if best is not None:
                return best
        return None

    def _local6(self, addr):
        return any(a.ip.packed == addr for l in self.links.values() for a in l.addrs6)

    def _ours6(self, link, target):
        return any(a.ip.packed == target for a in link.addrs6)

    def _ns_rcv(self, link, f, saddr, daddr, target, opts, requeued=False):
        if not requeued:
            self.counters["ns_rx"] += 1
        dad = not any(saddr)
        inc = daddr[0] == 0xFF
        lladdr = opts.get(1)
        if lladdr is not None and len(lladdr) < 6:
            self.counters["nd_invalid"] += 1
            return
        lladdr = lladdr[:6] if lladdr is not None else None
        if dad and (daddr != solicited_node(target) or lladdr is not None):
            self.counters["nd_invalid"] += 1
            return
        is_router = self.forwarding
        proxied = False
        src = target
        if not self._ours6(link, target):
            # forwarding on the device, proxy_ndp (all or dev) and a pneigh
            # entry (pndisc_is_router: R is the entry's NTF_ROUTER); a
            # multicast NS not from the proxy queue waits a random time
            # below proxy_delay (pneigh_enqueue)
            r = self.proxy.ndp(link.ifindex, target) if self.proxy is not None else None
            if r is None:
                return
            if not inc and not dad and not self._local6(daddr) and \
                    not self.proxy.ip6_forward(link.ifindex, daddr):
                # a unicast NS to an address not ours reaches ndisc_recv_ns
                # only through ip6_forward's proxy check (all.proxy_ndp --
                # not the device's -- and a pneigh entry for the destination);
                # else the kernel forwards it (hop limit 254: the target
                # ignores it) and fastpath drops it
                return
            is_router, proxied = bool(r), True
            if not requeued and f[0:6] != link.mac and inc \
                    and self.proxy.delay(6, link.ifindex) != 0:
                self._proxy_enqueue(link, 6, f)
                return
            # ndisc_send_na: the target is not ours, the source is
            # ipv6_dev_get_saddr(dev, daddr); override only for our own
            src = self._na_source(link, allnodes6 if dad else saddr)
            if src is None:
                return
        if dad:
            allnodes = allnodes6
            self.send(link.ifindex, na_frame(mcast_mac6(allnodes), link.mac, src, allnodes,
                                             target, is_router, False, not proxied, True))
            self.counters["na_tx"] += 1
            self.counters["proxy_na_tx"] += proxied
            return
        # __neigh_lookup(create = !inc || lladdr): the sender stale
        e = self._lookup(link.ifindex, 6, saddr, create=(not inc) or lladdr is not None)
        if e is not None:
            if lladdr is not None:
                self.update(e, lladdr, STALE, override=True, weak_override=True)
        mac = None
        if e is not None and e.state in VALID:
            mac = e.mac
        elif (link.ifindex, 6, saddr) in self.static:
            mac = self.static[(link.ifindex, 6, saddr)]
        if mac is None:
            if e is not None and e.state not in VALID:
                # unicast NS without SLLAO from an unknown host: the NA waits
                # for resolution, as ndisc_send_skb's neighbour output would
                na = na_frame(bytes(6), link.mac, src, saddr, target, is_router, True,
                              inc and not proxied, inc)
                self.resolve(link.ifindex, 6, saddr, [na])
            return
        self.send(link.ifindex, na_frame(mac, link.mac, src, saddr, target, is_router, True,
                                         inc and not proxied, inc))
        self.counters["na_tx"] += 1
        self.counters["proxy_na_tx"] += proxied
        if e is not None:
            self.used(link.ifindex, 6, saddr)

    def _na_rcv(self, link, f, saddr, daddr, icmp, target, opts):
        self.counters["na_rx"] += 1
        flags = icmp[4]
        solicited, override, router = bool(flags & 0x40), bool(flags & 0x20), bool(flags & 0x80)
        if solicited and daddr[0] == 0xFF:
            self.counters["nd_invalid"] += 1
            return
        lladdr = opts.get(2)
        if lladdr is not None:
            if len(lladdr) < 6:
                self.counters["nd_invalid"] += 1
                return
            lladdr = lladdr[:6]
        if self._ours6(link, target):
            return                # someone else claims our address (DAD failure): ignored
        e = self._lookup(link.ifindex, 6, target)
        if e is None or e.state == PERMANENT:
            return
        e.router = router
        self.update(e, lladdr, REACHABLE if solicited else STALE, override=override,
                    weak_override=True)

    # ------------------------------------------------------------------
    # datapath and display
    def take_changes(self):
        """The ``ip neigh`` lines that bring the datapath's table up to date
        (learned entries only; static ones are never touched)."""
        lines = []
        for (ifindex, fam, addr), mac in self.changes.items():
            link = self.links.get(ifindex)
            if link is None:
                continue
            a = ipaddress.ip_address(addr)
            if mac is None:
                lines.append((ifindex, fam, addr, f"ip -{fam} neigh del {a} dev {link.name}"))
            else:
                lines.append((ifindex, fam, addr,
                              f"ip -{fam} neigh replace {a} lladdr {mac_str(mac)} dev {link.name}"))
        self.changes = {}
        return lines

    def dump(self):
        """``ip neigh show`` lines of the learned entries (static ones are in
        the configuration), sorted."""
        out = []
        for (ifindex, fam, addr), e in sorted(self.entries.items(),
                                              key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
            if e.state is None:
                continue
            link = self.links.get(ifindex)
            name = link.name if link else str(ifindex)
            s = f"{ipaddress.ip_address(addr)} dev {name}"
            if e.mac is not None and e.state in VALID:
                s += f" lladdr {mac_str(e.mac)}"
            if e.router:
                s += " router"
            out.append(s + f" {e.state.upper()}")
        return out

"""Tools the wire tests run inside a host namespace (no iputils needed).

``python wire_tool.py ping ADDR [COUNT [TIMEOUT]]``: ICMP / ICMPv6 echo
requests one at a time from a raw socket; prints ``ok N/COUNT``, exit 0 when
every one was answered.

``python wire_tool.py xchg DEV HEXFRAME KIND [TIMEOUT]``: send one Ethernet
frame on DEV from a packet socket and print, in hex, the first frame that
comes back of KIND (``arp-reply``: ARP op 2; ``na``: ICMPv6 type 136;
``echo-reply``: ICMP type 0 or ICMPv6 type 129), or nothing; ``KIND=HEX``
only the ARP reply whose sender IP / the NA whose target is HEX.

``python wire_tool.py udp ADDR PORT COUNT [GAP [FLOWS]]``: COUNT UDP
datagrams to ADDR (GAP seconds apart, from FLOWS sockets in turn);
``udprecv 4|6 PORT COUNT TIMEOUT``: prints ``ready``, then how many arrived;
``send DEV HEX...``: frames out of DEV; ``capture DEV COUNT TIMEOUT``:
prints ``ready``, then the first COUNT UDP / SRv6 frames DEV receives, hex.
"""
import ipaddress
import os
import select
import socket
import struct
import sys
import time


def _csum(b):
    if len(b) & 1:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ping(addr, count=3, timeout=2.0, interval=0.2):
    a = ipaddress.ip_address(addr)
    if a.version == 4:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        req, rep = 8, 0
    else:
        s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
        req, rep = 128, 129
    ident = os.getpid() & 0xFFFF
    ok = 0
    for seq in range(count):
        payload = b"fastpath" * 4
        hdr = struct.pack("!BBHHH", req, 0, 0, ident, seq)
        pkt = hdr + payload
        if a.version == 4:
            pkt = pkt[:2] + struct.pack("!H", _csum(pkt)) + pkt[4:]
        s.sendto(pkt, (str(a), 0))
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([s], [], [], left)[0]:
                break
            data, src = s.recvfrom(4096)
            if a.version == 4:
                data = data[(data[0] & 15) * 4:]
            if len(data) >= 8 and data[0] == rep:
                _t, _c, _k, i, q = struct.unpack_from("!BBHHH", data)
                if i == ident and q == seq:
                    ok += 1
                    break
        time.sleep(interval)
    return ok


def xchg(dev, frame, kind, timeout=2.0):
    kind, _, want = kind.partition("=")
    want = bytes.fromhex(want) if want else None
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind((dev, 0))
    s.send(frame)
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0 or not select.select([s], [], [], left)[0]:
            return None
        data, addr = s.recvfrom(65536)
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        et = struct.unpack_from("!H", data, 12)[0]
        if kind == "arp-reply" and et == 0x0806 and data[20:22] == b"\0\2" and (
                want is None or data[28:32] == want):
            return data
        if kind == "na" and et == 0x86DD and data[20] == 58 and data[54] == 136 and (
                want is None or data[62:78] == want):
            return data
        if kind == "echo-reply" and ((et == 0x0800 and data[23] == 1 and
                                      data[14 + (data[14] & 0x0F) * 4] == 0) or
                                     (et == 0x86DD and data[20] == 58 and data[54] == 129)):
            return data


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "ping":
        n = int(sys.argv[3]) if len(sys.argv) > 3 else 3
        t = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
        got = ping(sys.argv[2], n, t)
        print(f"ok {got}/{n}")
        sys.exit(0 if got == n else 1)
    if cmd == "xchg":
        t = float(sys.argv[5]) if len(sys.argv) > 5 else 2.0
        r = xchg(sys.argv[2], bytes.fromhex(sys.argv[3]), sys.argv[4], t)
        print(r.hex() if r else "")
        sys.exit(0)
    if cmd == "send":
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        s.bind((sys.argv[2], 0))
        for h in sys.argv[3:]:
            s.send(bytes.fromhex(h))
            time.sleep(0.02)
        sys.exit(0)
    if cmd == "capture":
        # IPv4 UDP and TCP, IPv6 UDP and TCP and IPv6 with a routing header or a
        # hop-by-hop one before TCP or UDP, arriving on DEV
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
        s.bind((sys.argv[2], 0))
        print("ready", flush=True)
        want, end, got = int(sys.argv[3]), time.monotonic() + float(sys.argv[4]), []
        while len(got) < want:
            left = end - time.monotonic()
            if left <= 0 or not select.select([s], [], [], left)[0]:
                break
            data, addr = s.recvfrom(65536)
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            et = struct.unpack_from("!H", data, 12)[0]
            if ((et == 0x0800 and data[23] in (6, 17)) or (et == 0x86DD and data[20] in (6, 17, 43))
                    or (et == 0x86DD and data[20] == 0 and data[54] in (6, 17))):   # (not MLD)
                got.append(data.hex())
        print("\n".join(got))
        sys.exit(0)
    if cmd == "udprecv":
        fam = socket.AF_INET6 if sys.argv[2] == "6" else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.bind(("::" if fam == socket.AF_INET6 else "0.0.0.0", int(sys.argv[3])))
        print("ready", flush=True)
        got, end = 0, time.monotonic() + float(sys.argv[5])
        while got < int(sys.argv[4]) and select.select([s], [], [], max(0, end - time.monotonic()))[0]:
            s.recv(65536)
            got += 1
        print(got)
        sys.exit(0)
    if cmd == "udp":
        a = ipaddress.ip_address(sys.argv[2])
        gap = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
        nflows = int(sys.argv[6]) if len(sys.argv) > 6 else 1
        socks = [socket.socket(socket.AF_INET if a.version == 4 else socket.AF_INET6,
                               socket.SOCK_DGRAM) for _ in range(nflows)]
        for k in range(int(sys.argv[4])):
            socks[k % nflows].sendto(b"fastpath %d" % k, (str(a), int(sys.argv[3])))
            if gap:
                time.sleep(gap)
        sys.exit(0)
    sys.exit(f"unknown command {cmd}")

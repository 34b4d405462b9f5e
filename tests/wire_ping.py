"""A ping for the wire tests (no iputils needed): ``python wire_ping.py
ADDR COUNT TIMEOUT`` sends ICMP / ICMPv6 echo requests one at a time from a
raw socket and prints ``ok N/COUNT``; exit status 0 when every one was
answered."""
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


if __name__ == "__main__":
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    t = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    got = ping(sys.argv[1], n, t)
    print(f"ok {got}/{n}")
    sys.exit(0 if got == n else 1)

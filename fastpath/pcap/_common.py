"""Constants, link types, errors and the capture interface record shared by the reader and the writers."""
from __future__ import annotations

from dataclasses import dataclass


MAX_CAPLEN = 262144          # libpcap's MAXIMUM_SNAPLEN: the largest record accepted
MAX_BLOCK = 16 << 20         # largest pcapng block held in memory whole
DEFAULT_BATCH = 4096
DEFAULT_CHUNK = 1 << 20

LINKTYPE_NULL, LINKTYPE_ETHERNET, LINKTYPE_RAW, LINKTYPE_LOOP = 0, 1, 101, 108
LINKTYPE_LINUX_SLL, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL2 = 113, 228, 229, 276
# linktype -> (name, batch linktype, bytes stripped in front; "sll" / "sll2":
# the cooked header, plus an 802.1Q tag when the protocol field says 0x8100)
LINKTYPES = {
    LINKTYPE_ETHERNET: ("Ethernet", "ethernet", 0),
    LINKTYPE_RAW: ("raw IP", "raw", 0),
    LINKTYPE_IPV4: ("raw IPv4", "raw", 0),
    LINKTYPE_IPV6: ("raw IPv6", "raw", 0),
    LINKTYPE_LINUX_SLL: ("Linux cooked (SLL)", "raw", "sll"),
    LINKTYPE_LINUX_SLL2: ("Linux cooked v2 (SLL2)", "raw", "sll2"),
    LINKTYPE_NULL: ("BSD loopback", "raw", 4),
    LINKTYPE_LOOP: ("OpenBSD loopback", "raw", 4),
}
_LT_OUT = {"ethernet": LINKTYPE_ETHERNET, "raw": LINKTYPE_RAW}

# scan status codes (as fastpath._pcapio)
ST_NEED_MORE, ST_FULL, ST_BAD_CAPLEN, ST_BAD_BLOCKLEN, ST_OTHER_BLOCK = 0, 1, 2, 3, 4
ST_BLOCK_TOO_BIG, ST_LEN_MISMATCH, ST_CAPLEN_OVERRUN, ST_BAD_IFID, ST_BAD_LINKTYPE = 5, 6, 7, 8, 9

_SHB, _IDB, _SPB, _EPB, _PB = 0x0A0D0D0A, 1, 3, 6, 2
_PCAP_MAGICS = {  # first four bytes -> (big endian, nanosecond)
    b"\xd4\xc3\xb2\xa1": (False, False), b"\xa1\xb2\xc3\xd4": (True, False),
    b"\x4d\x3c\xb2\xa1": (False, True), b"\xa1\xb2\x3c\x4d": (True, True),
}


class PcapError(ValueError):
    """A capture that cannot be read (further).  ``offset``: the byte offset
    (in the uncompressed stream) of the header or block at fault; ``path``:
    the source's name; ``reason``: the message without them."""

    def __init__(self, reason: str, offset: int, path: str | None = None):
        self.reason = reason
        self.offset = int(offset)
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}byte {self.offset}: {reason}")


@dataclass
class CaptureInterface:
    """An interface of the capture (a pcapng IDB, or the classic file header)."""
    index: int                   # position in reader.interfaces (= batch.capture_if)
    section: int                 # pcapng section number (0 for classic pcap)
    id: int                      # interface id within its section
    linktype: int
    snaplen: int
    name: str | None = None
    description: str | None = None
    tsresol: int = 6             # if_tsresol byte (classic: 6 or 9)
    tsoffset: int = 0            # if_tsoffset, seconds
    fcslen: int = 0              # bytes of FCS at the end of each frame
    offset: int = 0              # byte offset of the IDB / header

    @property
    def batch_linktype(self) -> str | None:
        lt = LINKTYPES.get(self.linktype)
        return lt[1] if lt else None

"""The numpy / struct fallback of the compiled record walks and packers (fastpath._pcapio), and the switch between the two."""
from __future__ import annotations

import struct

import numpy as np
from numpy.lib.stride_tricks import as_strided


try:
    from .. import _pcapio as _cio
except ImportError:          # not built: the numpy fallback below
    _cio = None
from ._common import ST_BAD_BLOCKLEN, ST_BAD_CAPLEN, ST_BAD_IFID, ST_BAD_LINKTYPE, ST_BLOCK_TOO_BIG, ST_CAPLEN_OVERRUN, ST_FULL, ST_LEN_MISMATCH, ST_NEED_MORE, ST_OTHER_BLOCK, _EPB, _PB, _SPB


class _PyIO:
    """Pure numpy/struct versions of the compiled helpers.  Record walks are
    a struct loop that switches to one numpy check per run of equal-length
    records; copies use one fancy-indexing pass per distinct length."""

    @staticmethod
    def scan_pcap(buf, pos, end, big, maxcap, frac_ns, off, cap, wlen, ts, n0, maxrec):
        e = ">" if big else "<"
        hdr = struct.Struct(e + "IIII")
        dt = np.dtype(e + "u4")
        n, status, last, cool = n0, ST_FULL, -1, 0
        while n < maxrec:
            if end - pos < 16:
                status = ST_NEED_MORE
                break
            a, b, c, w = hdr.unpack_from(buf, pos)
            if c > maxcap:
                status = ST_BAD_CAPLEN
                break
            if end - pos - 16 < c:
                status = ST_NEED_MORE
                break
            if c == last and cool <= 0:
                rec = 16 + c
                k = min((end - pos) // rec, maxrec - n)
                if k >= 8:
                    h = np.ndarray((k, 4), dt, buffer=buf, offset=pos, strides=(rec, 4))
                    bad = np.flatnonzero(h[:, 2] != c)
                    m = int(bad[0]) if bad.size else k
                    s = slice(n, n + m)
                    ts[s] = (h[:m, 0].astype(np.int64) * 1_000_000_000
                             + h[:m, 1].astype(np.int64) * frac_ns)
                    cap[s], wlen[s] = c, h[:m, 3]
                    off[s] = pos + 16 + np.arange(m, dtype=np.int64) * rec
                    n += m
                    pos += m * rec
                    if m < 64:
                        cool = 64
                    continue
            cool -= 1
            ts[n], cap[n], wlen[n], off[n] = a * 1_000_000_000 + b * frac_ns, c, w, pos + 16
            n += 1
            pos += 16 + c
            last = c
        return n, pos, status

    @staticmethod
    def scan_pcapng(buf, pos, end, big, if_snap, if_ok, maxcap, maxblock, off, cap, wlen, ifid,
                    ts, kind, n0, maxrec):
        e = ">" if big else "<"
        u32 = struct.Struct(e + "I")
        hdr2 = struct.Struct(e + "II")
        epb = struct.Struct(e + "IIIIIII")
        pb = struct.Struct(e + "IIHHIIII")
        dt = np.dtype(e + "u4")
        nif = len(if_snap)
        n, status, last, cool = n0, ST_FULL, -1, 0
        while n < maxrec:
            if end - pos < 12:
                status = ST_NEED_MORE
                break
            t, blen = hdr2.unpack_from(buf, pos)
            if t not in (_EPB, _SPB, _PB):
                status = ST_OTHER_BLOCK
                break
            if blen < 12 or blen & 3:
                status = ST_BAD_BLOCKLEN
                break
            if blen > maxblock:
                status = ST_BLOCK_TOO_BIG
                break
            if end - pos < blen:
                status = ST_NEED_MORE
                break
            if u32.unpack_from(buf, pos + blen - 4)[0] != blen:
                status = ST_LEN_MISMATCH
                break
            if t == _SPB:
                if blen < 16:
                    status = ST_BAD_BLOCKLEN
                    break
                if nif == 0:
                    status = ST_BAD_IFID
                    break
                if not if_ok[0]:
                    status = ST_BAD_LINKTYPE
                    break
                ol = u32.unpack_from(buf, pos + 8)[0]
                c = min(ol, blen - 16)
                if if_snap[0] and c > if_snap[0]:
                    c = int(if_snap[0])
                if c > maxcap:
                    status = ST_BAD_CAPLEN
                    break
                i, a, b, o = 0, 0, 0, pos + 12
            else:
                if blen < 32:
                    status = ST_BAD_BLOCKLEN
                    break
                if t == _EPB:
                    _, _, i, a, b, c, ol = epb.unpack_from(buf, pos)
                else:
                    _, _, i, _, a, b, c, ol = pb.unpack_from(buf, pos)
                if i >= nif:
                    status = ST_BAD_IFID
                    break
                if not if_ok[i]:
                    status = ST_BAD_LINKTYPE
                    break
                if c > blen - 32:
                    status = ST_CAPLEN_OVERRUN
                    break
                if c > maxcap or (if_snap[i] and c > if_snap[i]):
                    status = ST_BAD_CAPLEN
                    break
                o = pos + 28
                if t == _EPB and blen == last and cool <= 0:
                    # a run of EPBs of this size, same interface and caplen?
                    k = min((end - pos) // blen, maxrec - n)
                    if k >= 8:
                        h = np.ndarray((k, 7), dt, buffer=buf, offset=pos, strides=(blen, 4))
                        tr = np.ndarray((k,), dt, buffer=buf, offset=pos + blen - 4,
                                        strides=(blen,))
                        good = ((h[:, 0] == _EPB) & (h[:, 1] == blen) & (h[:, 2] == i)
                                & (h[:, 5] == c) & (tr == blen))
                        bad = np.flatnonzero(~good)
                        m = int(bad[0]) if bad.size else k
                        s = slice(n, n + m)
                        u = (h[:m, 3].astype(np.uint64) << np.uint64(32)) | h[:m, 4]
                        ts[s], cap[s], wlen[s] = u.view(np.int64), c, h[:m, 6]
                        ifid[s], kind[s] = i, _EPB
                        off[s] = o + np.arange(m, dtype=np.int64) * blen
                        n += m
                        pos += m * blen
                        if m < 64:
                            cool = 64
                        continue
            cool -= 1
            last = blen
            u = (a << 32) | b
            off[n], cap[n], wlen[n], ifid[n], kind[n] = o, c, ol, i, t
            ts[n] = u - (1 << 64) if u >> 63 else u
            n += 1
            pos += blen
        return n, pos, status

    @staticmethod
    def gather(buf, off, length, data, headroom, zero=True):
        n, slot = data.shape
        src = np.frombuffer(buf, np.uint8)
        if n and (length.min() < 0 or off.min() < 0 or (off + length).max() > src.size
                  or headroom + length.max() > slot):
            raise ValueError("gather: packet out of bounds")
        data.fill(0)
        for ln in np.unique(length):
            ln = int(ln)
            if ln == 0:
                continue
            rows = np.flatnonzero(length == ln)
            win = as_strided(src, shape=(src.size - ln + 1, ln), strides=(1, 1), writeable=False)
            data[rows, headroom:headroom + ln] = win[off[rows]]
        return int(length.sum())

    @staticmethod
    def _copy_packets(data, start, length, rows, caps, out, dst):
        """out[dst[k] : dst[k] + caps[k]] = packet rows[k] (its first caps[k] bytes)."""
        n = len(rows)
        if n == 0:
            return
        slot = data.shape[1]
        flat = data.reshape(-1)
        srcpos = rows.astype(np.int64) * slot + start[rows]
        uniq = np.unique(caps)
        if len(uniq) > 64:           # many distinct lengths: one slice copy per packet
            for k in range(n):
                c = int(caps[k])
                s = int(srcpos[k])
                out[int(dst[k]):int(dst[k]) + c] = flat[s:s + c]
            return
        for c in uniq:
            c = int(c)
            if c == 0:
                continue
            sel = np.flatnonzero(caps == c)
            swin = as_strided(flat, shape=(flat.size - c + 1, c), strides=(1, 1), writeable=False)
            dwin = as_strided(out, shape=(out.size - c + 1, c), strides=(1, 1))
            dwin[dst[sel]] = swin[srcpos[sel]]

    @staticmethod
    def _check(data, start, length, rows):
        nrow, slot = data.shape
        if len(start) != nrow or len(length) != nrow:
            raise ValueError("start/length must have one entry per data row")
        if len(rows) and (rows.min() < 0 or rows.max() >= nrow):
            raise ValueError("row out of range")
        s, ln = start[rows].astype(np.int64), length[rows].astype(np.int64)
        if len(rows) and (s.min() < 0 or ln.min() < 0 or (s + ln).max() > slot):
            raise ValueError("packet lies outside its slot")

    @staticmethod
    def select_rows(verdict, lut, rows):
        idx = np.flatnonzero(np.asarray(lut, bool)[verdict])
        rows[:len(idx)] = idx
        return len(idx)

    @staticmethod
    def tally(verdict, oif, reason, v_fwd, v_icmp, v_drop, vcount, ocount, dcount, icount):
        vcount += np.bincount(verdict, minlength=256)[:256]
        out = (verdict == v_fwd) | (verdict == v_icmp)
        o = oif[out].astype(np.int64)
        ok = o < len(ocount)
        miss = int((~ok).sum())
        np.add.at(ocount, o[ok], 1)
        for vid, cnt in ((v_drop, dcount), (v_icmp, icount)):
            rs = reason[verdict == vid].astype(np.int64)
            ok = rs < len(cnt)
            miss += int((~ok).sum())
            np.add.at(cnt, rs[ok], 1)
        return miss

    @staticmethod
    def need_pcap(length, rows, snaplen):
        ln = length[rows].astype(np.int64)
        caps = np.minimum(ln, snaplen) if snaplen else ln
        return int((16 + caps).sum())

    @staticmethod
    def need_epb(length, rows, opt_len, snaplen):
        ln = length[rows].astype(np.int64)
        caps = np.minimum(ln, snaplen) if snaplen else ln
        return int((32 + ((caps + 3) & ~3)).sum()) + int(np.asarray(opt_len, np.int64).sum())

    @staticmethod
    def pack_pcap(data, start, length, rows, ts_ns, nanosecond, snaplen, out):
        _PyIO._check(data, start, length, rows)
        if len(ts_ns) != data.shape[0]:
            raise ValueError("ts_ns must have one entry per data row")
        n = len(rows)
        ln = length[rows].astype(np.int64)
        caps = np.minimum(ln, snaplen) if snaplen else ln
        sizes = 16 + caps
        need = int(sizes.sum())
        if need > out.size:
            raise ValueError("output buffer too small")
        if n == 0:
            return 0
        pos = np.cumsum(sizes) - sizes
        ts = np.maximum(ts_ns[rows], 0)
        hdr = np.empty((n, 4), "<u4")
        hdr[:, 0] = ts // 1_000_000_000
        frac = ts % 1_000_000_000
        hdr[:, 1] = frac if nanosecond else frac // 1000
        hdr[:, 2] = caps
        hdr[:, 3] = ln
        hwin = as_strided(out, shape=(out.size - 15, 16), strides=(1, 1))
        hwin[pos] = hdr.view(np.uint8).reshape(n, 16)
        _PyIO._copy_packets(data, start, length, rows, caps, out, pos + 16)
        return need

    @staticmethod
    def pack_epb(data, start, length, rows, ifx, lut, ts, opts, opt_off, opt_len, snaplen, out,
                 counts):
        _PyIO._check(data, start, length, rows)
        if len(ifx) != data.shape[0] or len(ts) != data.shape[0]:
            raise ValueError("ifx/ts must have one entry per data row")
        n = len(rows)
        keys = ifx[rows].astype(np.int64)
        bad = np.flatnonzero(keys >= len(lut))
        if bad.size:
            return 0, int(keys[bad[0]])
        ids = lut[keys]
        bad = np.flatnonzero(ids < 0)
        if bad.size:
            return 0, int(keys[bad[0]])
        if n and ids.max() >= len(counts):
            raise ValueError("counts shorter than the interface ids")
        if len(opt_len) == 0:
            opt_len, opt_off = np.zeros(n, np.int64), np.zeros(n, np.int64)
        opt_len = np.asarray(opt_len, np.int64)
        if n and (opt_len.min() < 0 or (opt_len & 3).any() or opt_off.min() < 0
                  or (opt_off + opt_len).max() > len(opts)):
            raise ValueError("options out of bounds")
        ln = length[rows].astype(np.int64)
        caps = np.minimum(ln, snaplen) if snaplen else ln
        pcap_ = (caps + 3) & ~3
        sizes = 32 + pcap_ + opt_len
        need = int(sizes.sum())
        if need > out.size:
            raise ValueError("output buffer too small")
        if n == 0:
            return 0, -1
        np.add.at(counts, ids, 1)
        out[:need] = 0
        pos = np.cumsum(sizes) - sizes
        w = out[:need].view("<u4")
        t = np.maximum(ts[rows], 0).astype(np.uint64)
        base = pos // 4
        w[base] = _EPB
        w[base + 1] = sizes
        w[base + 2] = ids
        w[base + 3] = t >> np.uint64(32)
        w[base + 4] = t & np.uint64(0xFFFFFFFF)
        w[base + 5] = caps
        w[base + 6] = ln
        w[(pos + sizes) // 4 - 1] = sizes
        _PyIO._copy_packets(data, start, length, rows, caps, out, pos + 28)
        if (opt_len > 0).any():
            obuf = np.frombuffer(opts, np.uint8)
            for o, L in set(zip(opt_off.tolist(), opt_len.tolist())):
                if L == 0:
                    continue
                sel = np.flatnonzero((opt_off == o) & (opt_len == L))
                dst = pos[sel] + 28 + pcap_[sel]
                dwin = as_strided(out, shape=(out.size - L + 1, L), strides=(1, 1))
                dwin[dst] = obuf[o:o + L]
        return need, -1

    @staticmethod
    def pack_selected(pcapng, verdict, sel, data, start, length, keys, lut, ts, nanosecond,
                      snaplen, out, counts):
        nrow = data.shape[0]
        if len(sel) < 256:
            raise ValueError("sel needs 256 entries")
        if not (len(verdict) == len(start) == len(length) == len(keys) == len(ts) == nrow):
            raise ValueError("verdict/start/length/keys/ts must have one entry per data row")
        rows = np.flatnonzero(np.asarray(sel, bool)[verdict]).astype(np.int64)
        _PyIO._check(data, start, length, rows)
        k = keys[rows].astype(np.int64)
        bad = np.flatnonzero((k >= len(lut)) | (lut[np.minimum(k, max(len(lut) - 1, 0))] < 0)
                            if len(lut) else np.ones(len(k), bool))
        if bad.size:
            return 0, 0, int(k[bad[0]])
        if not len(rows):
            return 0, 0, -1
        need = (_PyIO.need_epb(length, rows, np.zeros(0, np.int32), snaplen) if pcapng
                else _PyIO.need_pcap(length, rows, snaplen))
        if need > out.size:
            return -need, 0, -1
        if pcapng:
            n, _ = _PyIO.pack_epb(data, start, length, rows, keys, lut, ts, b"",
                                  np.zeros(0, np.int64), np.zeros(0, np.int32), snaplen, out,
                                  counts)
        else:
            if lut[k].max() >= len(counts):
                raise ValueError("counts shorter than the interface ids")
            n = _PyIO.pack_pcap(data, start, length, rows, ts, nanosecond, snaplen, out)
            np.add.at(counts, lut[k], 1)
        return n, len(rows), -1


_io = _cio if _cio is not None else _PyIO


def use_compiled(flag: bool = True) -> bool:
    """Select the compiled helpers (default when built) or the numpy
    fallback; returns whether the compiled ones are now in use."""
    global _io
    _io = _cio if (flag and _cio is not None) else _PyIO
    return _io is _cio

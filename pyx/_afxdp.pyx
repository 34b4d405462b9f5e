# AF_XDP packet I/O for fastpath.run --backend af_xdp (``fastpath._afxdp``).
#
# Built only when libxdp is found by pkg-config (setup.py); without it the
# AF_PACKET backend works and ``--backend af_xdp`` says so in one line.
#
# One socket per (interface, RX queue), each with its own UMEM
# (Documentation/networking/af_xdp.rst): 8192 frames of 2048 bytes (4096
# for an MTU above 1774) in
# anonymous memory, the first half given to the kernel through the fill
# ring for RX, the second half a stack of free frames for TX (a frame goes
# back on the stack when the completion ring returns it).  libxdp's
# xsk_socket__create loads its default program (xsk_def_prog, behind the
# libxdp dispatcher) on the interface, which redirects every frame of a
# queue that has a socket bound in its xsks map to that socket; nothing of
# those frames reaches the kernel's stack (ARP and ND included: fastpath's
# neighbour code sees them), so no nftables drop is needed.
# xsk_socket__delete takes the socket out of the map and, for the last
# socket of the interface, detaches the program.
#
# Modes: the program is attached in driver mode (XDP_FLAGS_DRV_MODE, which
# veth supports: the frames a veth's peer transmits run the program in the
# veth's NAPI) and else in generic mode (XDP_FLAGS_SKB_MODE); the socket
# binds zero copy where the driver offers it (XDP_ZEROCOPY) and else in copy
# mode (XDP_COPY; veth: always).
#
# RX: ``rx`` copies each descriptor's frame once into a Batch row at the
# headroom (start, length, l2len, iif, timestamp_ns = CLOCK_REALTIME at the
# call: XDP has no per-frame timestamp here), skips another station's
# unicast (the kernel's PACKET_OTHERHOST, dropped by ip_rcv) and frames
# larger than a row, completes the TCP/UDP checksum a local stack left
# partial (fpxs_csum_partial), and gives the frames straight back on the
# fill ring.
# TX: ``tx`` reaps the completion ring, copies each selected row into a free
# TX frame, posts the descriptors and kicks the kernel (sendto, repeated
# while the kernel reports its per-call budget exhausted: copy mode sends
# at most 32 descriptors a call).  No per-packet Python in either.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, int32_t, int64_t, uint64_t
cimport numpy as cnp
import numpy as np
import os

cnp.import_array()

cdef extern from *:
    """
    #include <errno.h>
    #include <string.h>
    #include <stdlib.h>
    #include <time.h>
    #include <unistd.h>
    #include <poll.h>
    #include <sys/socket.h>
    #include <sys/mman.h>
    #include <net/if.h>
    #include <linux/if_link.h>
    #include <linux/if_xdp.h>
    #include <xdp/xsk.h>
    #include <xdp/libxdp.h>
    #include <bpf/libbpf.h>
    #include "fp_csum.h"
    #ifndef SOL_XDP
    #define SOL_XDP 283
    #endif

    /* 8192 frames of 2048 bytes (4096 when the MTU needs it: the kernel
       keeps XDP_PACKET_HEADROOM, 256 bytes, in front of each frame), half
       of them on the fill ring; rings of 4096 descriptors */
    #define FPXS_NFRAMES 8192u
    #define FPXS_NRX (FPXS_NFRAMES / 2)
    #define FPXS_RING 4096u

    typedef struct {
        struct xsk_umem *umem;
        struct xsk_socket *xsk;
        struct xsk_ring_prod fill;
        struct xsk_ring_cons comp;
        struct xsk_ring_cons rx;
        struct xsk_ring_prod tx;
        uint8_t *area;
        size_t area_len;
        int fd;
        uint64_t free_tx[FPXS_NFRAMES - FPXS_NRX];
        unsigned frame;
        unsigned nfree;
        unsigned tx_inflight;          /* posted, not completed */
        uint8_t mac[6];
        int drv_mode, zerocopy;
        int csum_fix;
        uint64_t rx_n, oversize, otherhost, tx_full, kicks, csum_fixed;
    } fpxs;

    static void fpxs_close(fpxs *x) {
        if (x->xsk) xsk_socket__delete(x->xsk);
        x->xsk = NULL;
        if (x->umem) xsk_umem__delete(x->umem);
        x->umem = NULL;
        if (x->area) munmap(x->area, x->area_len);
        x->area = NULL;
        x->fd = -1;
    }

    /* One attempt: the UMEM, then the socket with these flags.  Returns 0 or
       -errno; *stage: 0 UMEM memory, 1 UMEM registration, 2 socket. */
    static int fpxs_try(fpxs *x, const char *ifname, unsigned queue, unsigned xdp_flags,
                        unsigned bind_flags, unsigned frame, int *stage) {
        struct xsk_umem_config uc;
        struct xsk_socket_config sc;
        unsigned k, idx = 0;
        int rc;
        *stage = 0;
        x->frame = frame;
        x->area_len = (size_t)x->frame * FPXS_NFRAMES;
        x->area = mmap(NULL, x->area_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (x->area == MAP_FAILED) { x->area = NULL; return -errno; }
        memset(&uc, 0, sizeof(uc));
        uc.fill_size = FPXS_RING;
        uc.comp_size = FPXS_RING;
        uc.frame_size = x->frame;
        uc.frame_headroom = 0;
        *stage = 1;
        rc = xsk_umem__create(&x->umem, x->area, x->area_len, &x->fill, &x->comp, &uc);
        if (rc) { x->umem = NULL; fpxs_close(x); return rc < 0 ? rc : -rc; }
        memset(&sc, 0, sizeof(sc));
        sc.rx_size = FPXS_RING;
        sc.tx_size = FPXS_RING;
        sc.libxdp_flags = 0;               /* load libxdp's default program */
        sc.xdp_flags = xdp_flags;
        sc.bind_flags = (uint16_t)(bind_flags | XDP_USE_NEED_WAKEUP);
        *stage = 2;
        rc = xsk_socket__create(&x->xsk, ifname, queue, x->umem, &x->rx, &x->tx, &sc);
        if (rc) { x->xsk = NULL; fpxs_close(x); return rc < 0 ? rc : -rc; }
        x->fd = xsk_socket__fd(x->xsk);
        /* the RX half of the frames to the kernel */
        if (xsk_ring_prod__reserve(&x->fill, FPXS_NRX, &idx) != FPXS_NRX) {
            fpxs_close(x); return -ENOMEM;
        }
        for (k = 0; k < FPXS_NRX; k++)
            *xsk_ring_prod__fill_addr(&x->fill, idx + k) = (uint64_t)k * x->frame;
        xsk_ring_prod__submit(&x->fill, FPXS_NRX);
        x->nfree = 0;
        for (k = FPXS_NRX; k < FPXS_NFRAMES; k++)
            x->free_tx[x->nfree++] = (uint64_t)k * x->frame;
        return 0;
    }

    /* Driver mode, zero copy first; then driver mode with copy; then
       generic (skb) mode with copy.  Returns 0 or -errno of the last try. */
    static int fpxs_open(fpxs *x, const char *ifname, unsigned queue, int mode, unsigned frame,
                         int *stage) {
        static const unsigned xf[3] = { XDP_FLAGS_DRV_MODE, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE };
        static const unsigned bf[3] = { XDP_ZEROCOPY, XDP_COPY, XDP_COPY };
        int k, rc = -EINVAL, first = 0, last = 2;
        struct xdp_options opt;
        socklen_t ol = sizeof(opt);
        memset(x, 0, sizeof(*x));
        x->fd = -1;
        if (mode == 1) { first = 1; last = 1; }        /* drv, copy */
        else if (mode == 2) { first = 2; last = 2; }   /* skb */
        else if (mode == 3) { first = 0; last = 0; }   /* zero copy only */
        for (k = first; k <= last; k++) {
            rc = fpxs_try(x, ifname, queue, xf[k], bf[k], frame, stage);
            if (rc == 0) {
                x->drv_mode = xf[k] == XDP_FLAGS_DRV_MODE;
                x->zerocopy = getsockopt(x->fd, SOL_XDP, XDP_OPTIONS, &opt, &ol) == 0 &&
                              (opt.flags & XDP_OPTIONS_ZEROCOPY);
                return 0;
            }
            if (rc == -EPERM || rc == -EACCES || rc == -ENODEV || rc == -EBUSY) break;
        }
        return rc;
    }

    static inline int fpxs_kick(fpxs *x) {
        /* copy mode: each sendto sends up to the socket's TX budget (32)
           and says EAGAIN while descriptors are left */
        int tries = 0;
        while (tries++ < 256) {
            if (sendto(x->fd, NULL, 0, MSG_DONTWAIT, NULL, 0) >= 0) {
                x->kicks++;
                if (__atomic_load_n(x->tx.consumer, __ATOMIC_ACQUIRE) == *x->tx.producer) return 0;
                continue;
            }
            x->kicks++;
            if (errno == EAGAIN || errno == EBUSY || errno == EINTR) {
                if (__atomic_load_n(x->tx.consumer, __ATOMIC_ACQUIRE) == *x->tx.producer) return 0;
                continue;
            }
            return -errno;
        }
        return 0;
    }

    static inline void fpxs_reap(fpxs *x) {
        unsigned idx = 0, n, k;
        n = xsk_ring_cons__peek(&x->comp, FPXS_RING, &idx);
        for (k = 0; k < n; k++)
            x->free_tx[x->nfree++] = *xsk_ring_cons__comp_addr(&x->comp, idx + k);
        if (n) xsk_ring_cons__release(&x->comp, n);
        x->tx_inflight -= n;
    }

    /* A frame a local stack sent with checksum offload (CHECKSUM_PARTIAL,
       e.g. a host behind a veth): its TCP/UDP checksum field holds the
       folded pseudo-header sum and nothing else, and XDP passes no flag
       saying so (AF_PACKET's TP_STATUS_CSUMNOTREADY).  Such a field is
       recognised by that value and completed (fp_csum.h).  A complete
       checksum that happens to equal the pseudo-header sum (1 in 65536) is
       left as it was: the completion gives the same value back.  Returns 1
       when it completed. */
    static int fpxs_csum_partial(uint8_t *f, unsigned len) {
        fp_l4 x;
        if (!fp_l4_find(f, len, &x) || fp_l4_field(f, &x) != x.pseudo) return 0;
        fp_l4_complete(f, &x);
        return 1;
    }

    static int fpxs_rx(fpxs *x, uint8_t *data, int slot, int headroom, int max,
                       int32_t *start, int32_t *length, uint16_t *l2len, uint32_t *iif,
                       int64_t *ts, uint32_t iifv) {
        unsigned idx = 0, fidx = 0, got, k;
        int n = 0;
        int room = slot - headroom - 64;
        struct timespec now;
        int64_t t;
        if (!x->xsk || max <= 0) return 0;
        got = xsk_ring_cons__peek(&x->rx, (unsigned)max, &idx);
        if (!got) {
            if (xsk_ring_prod__needs_wakeup(&x->fill))
                recvfrom(x->fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
            return 0;
        }
        clock_gettime(CLOCK_REALTIME, &now);
        t = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
        /* as many fill entries as frames consumed: always room (the
           kernel holds the others) */
        while (xsk_ring_prod__reserve(&x->fill, got, &fidx) != got) { }
        for (k = 0; k < got; k++) {
            const struct xdp_desc *d = xsk_ring_cons__rx_desc(&x->rx, idx + k);
            uint64_t addr = d->addr;
            unsigned len = d->len;
            const uint8_t *f = (const uint8_t *)xsk_umem__get_data(x->area, addr);
            *xsk_ring_prod__fill_addr(&x->fill, fidx + k) = addr & ~(uint64_t)(x->frame - 1);
            if (len < 14 || (int)len > room) { x->oversize++; continue; }
            if (!(f[0] & 1) && memcmp(f, x->mac, 6) != 0) { x->otherhost++; continue; }
            {
                uint8_t *row = data + (size_t)n * slot + headroom;
                uint16_t et;
                memcpy(row, f, len);
                if (x->csum_fix && fpxs_csum_partial(row, len)) x->csum_fixed++;
                et = (uint16_t)(row[12] << 8 | row[13]);
                start[n] = headroom;
                length[n] = (int32_t)len;
                l2len[n] = (et == 0x8100 && len >= 18) ? 18 : 14;
                iif[n] = iifv;
                ts[n] = t;
                n++;
            }
        }
        xsk_ring_cons__release(&x->rx, got);
        xsk_ring_prod__submit(&x->fill, got);
        x->rx_n += (uint64_t)n;
        return n;
    }

    /* Post rows idx[0..n) on the TX ring; returns how many were taken
       (the rest: no free TX frame even after reaping, counted tx_full);
       *err: errno of a refused kick. */
    static int fpxs_tx(fpxs *x, const uint8_t *data, int slot, const int32_t *start,
                       const int32_t *length, const int32_t *idx, int n, int *err) {
        int done = 0;
        *err = 0;
        if (!x->xsk) return 0;
        fpxs_reap(x);
        while (done < n) {
            unsigned m = (unsigned)(n - done), k, ti = 0;
            if (m > 64) m = 64;
            if (x->nfree == 0) {
                int e = fpxs_kick(x);
                if (e) *err = -e;
                fpxs_reap(x);
                if (x->nfree == 0) break;
            }
            if (m > x->nfree) m = x->nfree;
            while (m && xsk_ring_prod__reserve(&x->tx, m, &ti) != m) m--;
            if (!m) break;
            for (k = 0; k < m; k++) {
                int i = idx[done + (int)k];
                uint64_t a = x->free_tx[--x->nfree];
                unsigned len = (unsigned)length[i];
                struct xdp_desc *d = xsk_ring_prod__tx_desc(&x->tx, ti + k);
                if (len > x->frame) len = x->frame;
                memcpy(xsk_umem__get_data(x->area, a), data + (size_t)i * slot + start[i], len);
                d->addr = a;
                d->len = len;
                d->options = 0;
            }
            xsk_ring_prod__submit(&x->tx, m);
            x->tx_inflight += m;
            done += (int)m;
        }
        if (done) {
            int e = fpxs_kick(x);
            if (e) *err = -e;
        }
        if (done < n) x->tx_full += (uint64_t)(n - done);
        return done;
    }

    static int fpxs_ready(fpxs *x) {
        if (!x->xsk) return 0;
        return __atomic_load_n(x->rx.producer, __ATOMIC_ACQUIRE) != x->rx.cached_cons;
    }

    static int fpxs_stats(fpxs *x, struct xdp_statistics *st) {
        socklen_t l = sizeof(*st);
        memset(st, 0, sizeof(*st));
        if (x->fd < 0) return -EBADF;
        if (getsockopt(x->fd, SOL_XDP, XDP_STATISTICS, st, &l) < 0) return -errno;
        return 0;
    }

    static int fpxs_poll(const int *fds, int n, int timeout_ms, int *ready) {
        struct pollfd p[64];
        int k, rc;
        if (n > 64) n = 64;
        for (k = 0; k < n; k++) { p[k].fd = fds[k]; p[k].events = POLLIN; p[k].revents = 0; }
        rc = poll(p, n, timeout_ms);
        if (rc < 0) return errno == EINTR ? 0 : -errno;
        for (k = 0; k < n; k++)
            ready[k] = (p[k].revents & POLLIN ? 1 : 0) | (p[k].revents & (POLLERR | POLLHUP | POLLNVAL) ? 2 : 0);
        return rc;
    }

    /* The XDP programs attached to ifindex (driver or generic mode), as
       "name,name" in buf; returns how many (0: none), and *only_xsk = 1
       when every one is libxdp's xsk_def_prog. */
    static int fpxs_progs(int ifindex, char *buf, int len, int *only_xsk) {
        struct xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(ifindex);
        struct xdp_program *p = NULL;
        int n = 0, used = 0;
        *only_xsk = 1;
        buf[0] = 0;
        if (!mp || libxdp_get_error(mp)) { *only_xsk = 0; return 0; }
        if (xdp_multiprog__is_legacy(mp)) {
            p = xdp_multiprog__main_prog(mp);
            if (p) {
                const char *nm = xdp_program__name(p);
                used += snprintf(buf + used, len - used, "%s", nm ? nm : "?");
                if (!nm || strcmp(nm, "xsk_def_prog")) *only_xsk = 0;
                n = 1;
            }
        } else {
            while ((p = xdp_multiprog__next_prog(p, mp)) != NULL) {
                const char *nm = xdp_program__name(p);
                if (used < len)
                    used += snprintf(buf + used, len - used, "%s%s", n ? "," : "", nm ? nm : "?");
                if (!nm || strcmp(nm, "xsk_def_prog")) *only_xsk = 0;
                n++;
            }
        }
        if (n == 0) *only_xsk = 0;
        xdp_multiprog__close(mp);
        return n;
    }

    /* Detach every XDP program of ifindex (only called for a device whose
       programs are all xsk_def_prog: a killed fastpath's leftover). */
    static int fpxs_detach(int ifindex) {
        struct xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(ifindex);
        int rc;
        if (!mp || libxdp_get_error(mp)) return 0;
        rc = xdp_multiprog__detach(mp);
        xdp_multiprog__close(mp);
        return rc;
    }

    static int fpxs_silence(void) {
        /* libxdp/libbpf print their own diagnostics on stderr: fastpath
           says one line instead */
        libxdp_set_print(NULL);
        libbpf_set_print(NULL);
        return 0;
    }
    """
    ctypedef struct fpxs:
        int fd
        int drv_mode, zerocopy
        int csum_fix
        uint8_t mac[6]
        unsigned nfree, tx_inflight
        uint64_t rx_n, oversize, otherhost, tx_full, kicks, csum_fixed
    cdef struct xdp_statistics:
        uint64_t rx_dropped
        uint64_t rx_invalid_descs
        uint64_t tx_invalid_descs
        uint64_t rx_ring_full
        uint64_t rx_fill_ring_empty_descs
        uint64_t tx_ring_empty_descs
    int fpxs_open(fpxs* x, const char* ifname, unsigned queue, int mode, unsigned frame,
                  int* stage) nogil
    void fpxs_close(fpxs* x) nogil
    int fpxs_rx(fpxs* x, uint8_t* data, int slot, int headroom, int max, int32_t* start,
                int32_t* length, uint16_t* l2len, uint32_t* iif, int64_t* ts, uint32_t iifv) nogil
    int fpxs_tx(fpxs* x, const uint8_t* data, int slot, const int32_t* start,
                const int32_t* length, const int32_t* idx, int n, int* err) nogil
    int fpxs_ready(fpxs* x) nogil
    int fpxs_stats(fpxs* x, xdp_statistics* st) nogil
    int fpxs_poll(const int* fds, int n, int timeout_ms, int* ready) nogil
    int fpxs_silence()
    int fpxs_csum_partial(uint8_t* f, unsigned len)
    int fpxs_progs(int ifindex, char* buf, int len, int* only_xsk)
    int fpxs_detach(int ifindex)
    ctypedef unsigned socklen_t
    int getsockopt(int fd, int level, int name, void* val, socklen_t* len) nogil
    int SOL_SOCKET, SO_ERROR

fpxs_silence()

_STAGES = ("UMEM memory", "UMEM registration (xsk_umem__create)",
           "AF_XDP socket / XDP program (xsk_socket__create)")
MODES = {"auto": 0, "drv": 1, "skb": 2, "zerocopy": 3}


class AfXdpError(OSError):
    """An AF_XDP socket could not be set up (the message says why, for a person)."""


def rx_queues(str name):
    """The interface's RX queues (one AF_XDP socket each)."""
    try:
        n = len([q for q in os.listdir(f"/sys/class/net/{name}/queues") if q.startswith("rx-")])
    except OSError:
        n = 1
    return max(n, 1)


def csum_partial(frame):
    """(frame, completed): what ``rx`` does to a frame whose TCP/UDP
    checksum holds only the pseudo-header sum (for tests)."""
    cdef bytearray b = bytearray(frame)
    cdef int done = fpxs_csum_partial(<uint8_t*><char*>b, len(b)) if len(b) >= 14 else 0
    return bytes(b), bool(done)


def programs(int ifindex):
    """(names of the XDP programs attached to ifindex, whether all of
    them are libxdp's xsk_def_prog)."""
    cdef char buf[512]
    cdef int only = 0
    cdef int n = fpxs_progs(ifindex, buf, sizeof(buf), &only)
    if n <= 0:
        return [], False
    return buf.decode().split(","), bool(only)


def detach_leftover(int ifindex):
    """Detach a leftover of libxdp's default AF_XDP program (a fastpath
    run that was SIGKILLed: its sockets are gone, the program stays):
    only when every program there is xsk_def_prog.  Returns whether one
    was detached."""
    names, only = programs(ifindex)
    if not names or not only:
        return False
    return fpxs_detach(ifindex) == 0


cdef class Socket:
    """One AF_XDP socket on (interface, RX queue) with its own UMEM.

    The same calls as fastpath._afpacket.Socket (rx, tx, send, ready,
    fileno, counters, close), so that fastpath.wire.live drives either."""
    cdef fpxs x
    cdef readonly int ifindex
    cdef readonly uint32_t iif
    cdef readonly str name
    cdef readonly unsigned queue
    cdef public uint64_t tx_packets, tx_errors
    cdef public uint64_t errors
    cdef public int last_error
    cdef dict last_stats

    def __cinit__(self):
        self.x.fd = -1

    def __init__(self, str name, int ifindex, uint32_t iif=0, *, bytes mac=b"\0" * 6,
                 unsigned queue=0, str mode="auto", int mtu=1500, bint csum_partial=True):
        """``csum_partial``: complete the TCP/UDP checksums that a local
        stack's checksum offload left partial (fpxs_csum_partial)."""
        cdef int stage = 0, rc
        cdef bytes bname = name.encode()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {sorted(MODES)}")
        # a frame holds the kernel's 256 bytes of XDP headroom, Ethernet,
        # one VLAN tag and the MTU
        rc = fpxs_open(&self.x, bname, queue, MODES[mode], 2048 if mtu + 18 + 256 <= 2048 else 4096,
                       &stage)
        if rc < 0:
            err = -rc
            hint = ""
            if err in (1, 13):
                hint = " (AF_XDP needs root, or CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF)"
            elif err == 19:
                hint = " (no such interface)"
            elif err == 16:
                hint = " (another XDP program or AF_XDP socket holds the interface)"
            elif err in (95, 97, 22):
                hint = " (the kernel or driver refuses AF_XDP here)"
            raise AfXdpError(err, f"{name}: {_STAGES[stage]}: {os.strerror(err)}{hint}")
        for k in range(6):
            self.x.mac[k] = mac[k]
        self.x.csum_fix = csum_partial
        self.name = name
        self.ifindex = ifindex
        self.iif = iif or ifindex
        self.queue = queue
        self.tx_packets = 0
        self.tx_errors = 0
        self.last_stats = None

    def __dealloc__(self):
        fpxs_close(&self.x)

    @property
    def mode(self):
        """'drv' or 'skb' (where the program is attached) and 'zerocopy'
        or 'copy'."""
        return ("drv" if self.x.drv_mode else "skb", "zerocopy" if self.x.zerocopy else "copy")

    cdef _clear_error(self):
        cdef int e = 0
        cdef socklen_t l = sizeof(e)
        if self.x.fd >= 0 and getsockopt(self.x.fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 and e:
            self.errors += 1
            self.last_error = e

    def _stats(self):
        cdef xdp_statistics st
        if fpxs_stats(&self.x, &st) == 0:
            self.last_stats = {"rx_dropped": st.rx_dropped, "rx_invalid_descs": st.rx_invalid_descs,
                               "tx_invalid_descs": st.tx_invalid_descs,
                               "rx_ring_full": st.rx_ring_full,
                               "rx_fill_ring_empty_descs": st.rx_fill_ring_empty_descs,
                               "tx_ring_empty_descs": st.tx_ring_empty_descs}
        return self.last_stats or {}

    def close(self):
        if self.x.fd >= 0:
            self._stats()
        fpxs_close(&self.x)

    def fileno(self):
        return self.x.fd

    @property
    def closed(self):
        return self.x.fd < 0

    def ready(self):
        return self.x.fd >= 0 and bool(fpxs_ready(&self.x))

    def rx(self, batch, int offset=0, int max=-1):
        """Fill rows ``offset``.. of ``batch`` with the frames waiting on
        the RX ring; returns how many."""
        cdef cnp.ndarray data = batch.data
        cdef int n = data.shape[0], slot = data.shape[1]
        cdef cnp.ndarray start = batch.start, length = batch.length, l2len = batch.l2len
        cdef cnp.ndarray iif = batch.iif, ts = batch.timestamp_ns
        if max < 0 or max > n - offset:
            max = n - offset
        if max <= 0 or self.x.fd < 0:
            return 0
        cdef int hr = batch.headroom
        cdef uint8_t* base = <uint8_t*>cnp.PyArray_DATA(data) + <size_t>offset * slot
        return fpxs_rx(&self.x, base, slot, hr, max,
                       <int32_t*>cnp.PyArray_DATA(start) + offset,
                       <int32_t*>cnp.PyArray_DATA(length) + offset,
                       <uint16_t*>cnp.PyArray_DATA(l2len) + offset,
                       <uint32_t*>cnp.PyArray_DATA(iif) + offset,
                       <int64_t*>cnp.PyArray_DATA(ts) + offset, self.iif)

    def tx(self, batch, cnp.ndarray idx):
        """Send rows ``idx`` (int32) of ``batch`` as they stand; returns
        how many were posted."""
        cdef cnp.ndarray data = batch.data
        cdef cnp.ndarray start = batch.start, length = batch.length
        cdef cnp.ndarray ix = np.ascontiguousarray(idx, dtype=np.int32)
        cdef int err = 0, sent
        if self.x.fd < 0 or len(ix) == 0:
            return 0
        sent = fpxs_tx(&self.x, <const uint8_t*>cnp.PyArray_DATA(data), data.shape[1],
                       <const int32_t*>cnp.PyArray_DATA(start),
                       <const int32_t*>cnp.PyArray_DATA(length),
                       <const int32_t*>cnp.PyArray_DATA(ix), len(ix), &err)
        if err:
            self.errors += 1
            self.last_error = err
        self.tx_packets += sent
        return sent

    def send(self, frame):
        """One frame (bytes): the control plane's ARP/ND and queued packets."""
        cdef bytes b = bytes(frame)
        cdef int err = 0, sent
        cdef int32_t st = 0, ln = len(b), ix = 0
        if self.x.fd < 0 or ln > 4096 - 256:
            self.tx_errors += 1
            return 0
        sent = fpxs_tx(&self.x, <const uint8_t*><char*>b, ln, &st, &ln, &ix, 1, &err)
        if not sent:
            self.tx_errors += 1
            return 0
        self.tx_packets += 1
        return 1

    def counters(self):
        """rx, skipped frames by cause, tx, and the kernel's XDP_STATISTICS
        (``ring_drops``: frames the XDP program redirected that found no
        room: rx_dropped, which counts those that found the fill ring
        empty, + rx_ring_full)."""
        st = self._stats() if self.x.fd >= 0 else (self.last_stats or {})
        return {"rx": self.x.rx_n, "rx_otherhost": self.x.otherhost, "rx_oversize": self.x.oversize,
                "rx_csum_completed": self.x.csum_fixed,
                "tx": self.tx_packets, "tx_errors": self.tx_errors, "tx_full": self.x.tx_full,
                "tx_kicks": self.x.kicks, "errors": self.errors,
                "ring_drops": st.get("rx_dropped", 0) + st.get("rx_ring_full", 0),
                "xdp": dict(st)}


def poll(sockets, int timeout_ms, extra=()):
    """Wait until one of ``sockets`` has frames on its RX ring (or
    timeout_ms); returns those that are ready, followed by those of the
    ``extra`` file descriptors (ints: a worker's control connection) that
    are readable or closed, as _afpacket.poll.  A socket with a pending
    error (its device went away) has it read and cleared."""
    cdef int fds[64]
    cdef int ready[64]
    cdef int n = 0, rc
    socks = list(sockets)[:64]
    cdef int ns = len(socks)
    ext = list(extra)[:64 - ns]
    for s in socks:
        fds[n] = s.fileno()
        ready[n] = 0
        n += 1
    for f in ext:
        fds[n] = f
        ready[n] = 0
        n += 1
    with nogil:
        rc = fpxs_poll(fds, n, timeout_ms, ready)
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc))
    for k in range(ns):
        if ready[k] & 2:
            (<Socket>socks[k])._clear_error()
    return [socks[k] for k in range(ns) if ready[k] & 1] + \
        [ext[k - ns] for k in range(ns, n) if ready[k]]

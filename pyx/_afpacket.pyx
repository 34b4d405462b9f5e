# AF_PACKET packet I/O for fastpath.run (``fastpath._afpacket``).
#
# RX: one TPACKET_V3 ring per interface (Documentation/networking/
# packet_mmap.rst, "TPACKET_V3"): the kernel fills fixed-size blocks with
# variable-size frames and hands a whole block over (TP_STATUS_USER in its
# block_status) when it is full or when the block timer (tp_retire_blk_tov)
# retires it; the reader walks the block's frames by tp_next_offset and gives
# the block back (TP_STATUS_KERNEL) when it has read all of them.  ``rx``
# copies each frame once into a Batch row (at the headroom), with its start,
# length, l2len (14, or 18 with one 802.1Q tag), iif and timestamp_ns (the
# tpacket header's tp_sec/tp_nsec); a VLAN tag the kernel stripped into the
# header (TP_STATUS_VLAN_VALID: tp_vlan_tci, tp_vlan_tpid when
# TP_STATUS_VLAN_TPID_VALID) is put back between the MAC addresses and the
# ethertype, so the datapath sees the frame as it was on the wire.  Frames
# the kernel classified PACKET_OTHERHOST (another station's unicast, seen
# because the device is promiscuous) are skipped, as ip_rcv/ipv6_rcv drop
# them; frames longer than a row are skipped and counted.  A frame a local
# stack sent with checksum offload (TP_STATUS_CSUMNOTREADY: its TCP/UDP
# checksum holds only the pseudo-header sum) gets its checksum completed,
# as the kernel's skb_checksum_help would before a device without offload
# (fpap_csum_fix; ``rx_csum_partial`` counts those it could not complete).
# A TCP GSO/GRO super-frame (a local stack's TSO through a veth, GRO on a
# NIC) is cut into MSS-sized segments, one row each, as skb_gso_segment
# would before a device without TSO: its gso_size comes in the
# virtio_net_hdr that PACKET_VNET_HDR puts before each frame
# (fpap_gso_hdr, fpap_gso_seg; ``rx_gso_frames``, ``rx_gso_segments``).
#
# No per-packet Python: one ``rx`` call fills up to ``max`` rows of a Batch
# from every ready block; one ``tx`` call sends the selected rows of a Batch
# with sendmmsg(2) (up to 64 messages a system call).
#
# A Socket is the unit a Dataplane worker could own later (PACKET_FANOUT
# would join one Socket per worker to a group): nothing here is global.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, int32_t, int64_t, uint64_t
cimport numpy as cnp
import numpy as np
import os

cnp.import_array()

cdef extern from *:
    """
    #include <errno.h>
    #include <string.h>
    #include <unistd.h>
    #include <poll.h>
    #include <sys/socket.h>
    #include <sys/mman.h>
    #include <arpa/inet.h>
    #include <net/ethernet.h>
    #include <linux/if_packet.h>
    #include <linux/virtio_net.h>
    #ifndef PACKET_IGNORE_OUTGOING
    #define PACKET_IGNORE_OUTGOING 23
    #endif
    #include <linux/filter.h>
    #include "fp_csum.h"

    /* The frames the neighbour subsystem reads (the control process of
       --workers, beside the workers' fanout sockets): ARP, and ICMPv6
       types 133-137 (router/neighbour solicitations and advertisements,
       redirects) right after the IPv6 header.  cBPF, SO_ATTACH_FILTER
       before bind: no other frame is ever queued on that socket. */
    static struct sock_filter fpap_nd_filter[] = {
        BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0806, 6, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x86DD, 0, 6),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 20),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 58, 0, 4),
        BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 54),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 133, 0, 2),
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 137, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, 0x40000),
        BPF_STMT(BPF_RET | BPF_K, 0),
    };

    typedef struct {
        int fd;
        uint8_t *ring;
        size_t ring_len;
        unsigned block_size, block_nr;
        unsigned cur;                 /* block being read */
        unsigned left;                /* frames left in it (0: not started) */
        uint8_t *pkt;                 /* next frame in it */
        uint64_t rx, oversize, otherhost, truncated, vlan_restored, csum_partial, csum_fixed;
        uint64_t gso_frames, gso_segments;
        int vnet;                     /* PACKET_VNET_HDR: a virtio_net_hdr before each frame */
        int txfd;                     /* fd, or (vnet) a plain socket: with PACKET_VNET_HDR
                                         every sent frame would need a virtio_net_hdr too */
    } fpap_ring;

    static void fpap_close(fpap_ring *r);

    /* Open, ring and bind: returns fd >= 0, or -errno with *stage naming the
       step that failed (0 socket, 1 version, 2 ring, 3 mmap, 4 bind,
       5 ignore-outgoing, 6 qdisc bypass, 7 the TX socket). */
    static int fpap_open(fpap_ring *r, int ifindex, unsigned block_size, unsigned block_nr,
                         unsigned frame_size, int tov_ms, int bypass, int vnet, int nd_only,
                         unsigned fanout, int *stage) {
        struct tpacket_req3 req;
        struct sockaddr_ll sll;
        int one = 1, v = TPACKET_V3, fd, e;
        memset(r, 0, sizeof(*r));
        r->fd = -1;
        r->txfd = -1;
        /* protocol 0 until bound: no frames queue from other devices */
        *stage = 0;
        fd = socket(AF_PACKET, SOCK_RAW, 0);
        if (fd < 0) return -errno;
        *stage = 1;
        if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof(v)) < 0) goto fail;
        *stage = 5;
        if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof(one)) < 0) goto fail;
        if (nd_only) {
            struct sock_fprog prog;
            *stage = 8;
            prog.len = sizeof(fpap_nd_filter) / sizeof(fpap_nd_filter[0]);
            prog.filter = fpap_nd_filter;
            if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0) goto fail;
        }
        /* GSO/GRO super-frames come with their gso_size in a virtio_net_hdr
           (before the ring exists; without it they are dropped as oversize) */
        r->vnet = vnet && setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof(one)) == 0;
        *stage = 6;
        if (bypass && setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) < 0) goto fail;
        *stage = 2;
        memset(&req, 0, sizeof(req));
        req.tp_block_size = block_size;
        req.tp_block_nr = block_nr;
        req.tp_frame_size = frame_size;
        req.tp_frame_nr = (block_size / frame_size) * block_nr;
        req.tp_retire_blk_tov = tov_ms;
        req.tp_feature_req_word = 0;
        if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0) goto fail;
        *stage = 3;
        r->ring_len = (size_t)block_size * block_nr;
        r->ring = mmap(NULL, r->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_LOCKED, fd, 0);
        if (r->ring == MAP_FAILED) {
            r->ring = mmap(NULL, r->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (r->ring == MAP_FAILED) { r->ring = NULL; goto fail; }
        }
        *stage = 4;
        memset(&sll, 0, sizeof(sll));
        sll.sll_family = AF_PACKET;
        sll.sll_protocol = htons(ETH_P_ALL);
        sll.sll_ifindex = ifindex;
        if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0) goto fail;
        /* PACKET_FANOUT: group id | type << 16 (the socket must be bound;
           the frames of the microseconds in between are this socket's) */
        *stage = 9;
        if (fanout && setsockopt(fd, SOL_PACKET, PACKET_FANOUT, &fanout, sizeof(fanout)) < 0)
            goto fail;
        r->fd = fd;
        r->txfd = fd;
        r->block_size = block_size;
        r->block_nr = block_nr;
        if (r->vnet) {
            /* protocol 0: this one receives nothing */
            int t = socket(AF_PACKET, SOCK_RAW, 0);
            *stage = 7;
            if (t < 0) { e = errno; fpap_close(r); return -e; }
            if (bypass) setsockopt(t, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
            sll.sll_protocol = 0;
            if (bind(t, (struct sockaddr *)&sll, sizeof(sll)) < 0) {
                e = errno; close(t); fpap_close(r); return -e;
            }
            r->txfd = t;
        }
        return fd;
    fail:
        e = errno;
        if (r->ring) munmap(r->ring, r->ring_len);
        r->ring = NULL;
        close(fd);
        return -e;
    }

    static void fpap_close(fpap_ring *r) {
        if (r->ring) munmap(r->ring, r->ring_len);
        r->ring = NULL;
        if (r->txfd >= 0 && r->txfd != r->fd) close(r->txfd);
        r->txfd = -1;
        if (r->fd >= 0) close(r->fd);
        r->fd = -1;
    }

    /* A frame the kernel handed over with CHECKSUM_PARTIAL
       (TP_STATUS_CSUMNOTREADY: sent by a local stack, e.g. a host behind a
       veth with checksum offload): its TCP/UDP checksum field holds only the
       pseudo-header sum; completed as skb_checksum_help does (fp_csum.h).
       Returns 0 when it could not. */
    static int fpap_csum_fix(uint8_t *f, unsigned len) {
        fp_l4 x;
        if (!fp_l4_find(f, len, &x)) return 0;
        fp_l4_complete(f, &x);
        return 1;
    }

    static uint32_t fpap_sum(const uint8_t *p, unsigned n, uint32_t sum) {
        unsigned k;
        for (k = 0; k + 1 < n; k += 2) sum += (uint32_t)(p[k] << 8 | p[k + 1]);
        if (k < n) sum += (uint32_t)p[k] << 8;
        return sum;
    }

    static uint16_t fpap_fold(uint32_t sum) {
        while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
        return (uint16_t)~sum;
    }

    /* The headers of a TCP GSO super-frame (VLAN tag restored) into hb;
       returns their length and sets *l3, *l4, *pay (where the payload
       starts in the original frame f), or 0 when it is not TCP over
       IPv4/IPv6 as fastpath segments it. */
    static unsigned fpap_gso_hdr(const uint8_t *f, unsigned len, int vlan, uint16_t tpid,
                                 uint16_t tci, uint8_t *hb, unsigned *l3, unsigned *l4,
                                 unsigned *pay) {
        unsigned add = vlan ? 4 : 0, hlen, i;
        uint16_t et;
        if (len < 14 + 40) return 0;
        memcpy(hb, f, 12);
        if (vlan) { hb[12] = tpid >> 8; hb[13] = tpid & 0xff; hb[14] = tci >> 8; hb[15] = tci & 0xff; }
        /* up to 14 + 60 + 60 bytes of headers */
        i = len < 134 ? len : 134;
        memcpy(hb + 12 + add, f + 12, i - 12);
        *l3 = 14 + add;
        et = (uint16_t)(hb[*l3 - 2] << 8 | hb[*l3 - 1]);
        if (et == 0x8100) { *l3 += 4; et = (uint16_t)(hb[*l3 - 2] << 8 | hb[*l3 - 1]); }
        if (et == 0x0800) {
            if (hb[*l3 + 9] != 6) return 0;
            *l4 = *l3 + (hb[*l3] & 15) * 4;
        } else if (et == 0x86DD) {
            if (hb[*l3 + 6] != 6) return 0;
            *l4 = *l3 + 40;
        } else return 0;
        hlen = *l4 + (hb[*l4 + 12] >> 4) * 4;
        if (hlen > 12 + add + i - 12 || hlen - add >= len || hlen > 200) return 0;
        *pay = hlen - add;
        return hlen;
    }

    /* skb_gso_segment for TCP (tcp_gso_segment, inet_gso_segment /
       ipv6_gso_segment): segments of mss payload bytes, each with the
       headers copied, IPv4 total length / ID (+1 a segment) / header
       checksum or IPv6 payload length, TCP sequence number, FIN and PSH on
       the last segment only, CWR on the first only, full TCP checksum. */
    static void fpap_gso_seg(uint8_t *row, const uint8_t *hb, unsigned hlen, unsigned l3,
                             unsigned l4, const uint8_t *payload, unsigned sl, unsigned k,
                             unsigned mss, int last) {
        uint32_t seq, sum;
        uint8_t fl;
        unsigned tcplen = hlen - l4 + sl;
        memcpy(row, hb, hlen);
        memcpy(row + hlen, payload, sl);
        if ((row[l3] >> 4) == 4) {
            unsigned tot = hlen - l3 + sl, ihl = (row[l3] & 15) * 4;
            uint16_t id = (uint16_t)((row[l3 + 4] << 8 | row[l3 + 5]) + k);
            row[l3 + 2] = tot >> 8; row[l3 + 3] = tot & 0xff;
            row[l3 + 4] = id >> 8; row[l3 + 5] = id & 0xff;
            row[l3 + 10] = row[l3 + 11] = 0;
            sum = fpap_fold(fpap_sum(row + l3, ihl, 0));
            row[l3 + 10] = sum >> 8; row[l3 + 11] = sum & 0xff;
            sum = fpap_sum(row + l3 + 12, 8, 0) + 6 + tcplen;
        } else {
            unsigned plen = hlen - l3 - 40 + sl;
            row[l3 + 4] = plen >> 8; row[l3 + 5] = plen & 0xff;
            sum = fpap_sum(row + l3 + 8, 32, 0) + 6 + tcplen;
        }
        seq = ((uint32_t)row[l4 + 4] << 24 | (uint32_t)row[l4 + 5] << 16 |
               (uint32_t)row[l4 + 6] << 8 | row[l4 + 7]) + k * mss;
        row[l4 + 4] = seq >> 24; row[l4 + 5] = seq >> 16; row[l4 + 6] = seq >> 8; row[l4 + 7] = seq;
        fl = row[l4 + 13];
        if (!last) fl &= (uint8_t)~0x09;       /* FIN, PSH */
        if (k) fl &= (uint8_t)~0x80;           /* CWR */
        row[l4 + 13] = fl;
        row[l4 + 16] = row[l4 + 17] = 0;
        sum = fpap_fold(fpap_sum(row + l4, tcplen, sum));
        row[l4 + 16] = sum >> 8; row[l4 + 17] = sum & 0xff;
    }

    /* Copy up to max frames into rows [0, max) of data (slot bytes each),
       each at offset headroom.  Returns the number of rows filled. */
    static int fpap_rx(fpap_ring *r, uint8_t *data, int slot, int headroom, int max,
                       int32_t *start, int32_t *length, uint16_t *l2len, uint32_t *iif,
                       int64_t *ts, uint32_t iifv) {
        int n = 0;
        int room = slot - headroom - 64;     /* the tailroom Batch slots keep */
        while (n < max && r->ring) {
            struct tpacket_block_desc *bd =
                (struct tpacket_block_desc *)(r->ring + (size_t)r->cur * r->block_size);
            if (r->left == 0) {
                if (!(__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
                    break;
                r->left = bd->hdr.bh1.num_pkts;
                r->pkt = (uint8_t *)bd + bd->hdr.bh1.offset_to_first_pkt;
                if (r->left == 0) goto release;
            }
            while (r->left && n < max) {
                struct tpacket3_hdr *h = (struct tpacket3_hdr *)r->pkt;
                const struct sockaddr_ll *sll =
                    (const struct sockaddr_ll *)(r->pkt + TPACKET_ALIGN(sizeof(struct tpacket3_hdr)));
                const uint8_t *f = r->pkt + h->tp_mac;
                unsigned len = h->tp_snaplen;
                int vlan = (h->tp_status & TP_STATUS_VLAN_VALID) != 0;
                unsigned mss = 0;
                if (r->vnet && sll->sll_pkttype != PACKET_OTHERHOST) {
                    const struct virtio_net_hdr *vh =
                        (const struct virtio_net_hdr *)(f - sizeof(struct virtio_net_hdr));
                    unsigned gt = vh->gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
                    if ((gt == VIRTIO_NET_HDR_GSO_TCPV4 || gt == VIRTIO_NET_HDR_GSO_TCPV6)
                            && vh->gso_size)
                        mss = vh->gso_size;
                }
                if (mss && h->tp_snaplen == h->tp_len) {
                    /* a super-frame: segmented into as many rows as it needs */
                    uint8_t hb[256];
                    uint16_t tpid = (h->tp_status & TP_STATUS_VLAN_TPID_VALID)
                                    ? h->hv1.tp_vlan_tpid : 0x8100;
                    unsigned l3 = 0, l4 = 0, pay = 0, need, k;
                    unsigned hlen = fpap_gso_hdr(f, len, vlan, tpid, (uint16_t)h->hv1.tp_vlan_tci,
                                                 hb, &l3, &l4, &pay);
                    need = hlen ? (len - pay + mss - 1) / mss : 0;
                    if (need > 1 && (int)(hlen + mss) <= room) {
                        if (n + (int)need > max) {
                            if (n) break;               /* next call, in a fresh batch */
                            r->left--; r->pkt += h->tp_next_offset;
                            r->oversize++;
                            continue;
                        }
                        r->left--;
                        r->pkt += h->tp_next_offset;
                        for (k = 0; k < need; k++) {
                            unsigned sl = k + 1 < need ? mss : len - pay - k * mss;
                            uint8_t *row = data + (size_t)(n + k) * slot + headroom;
                            fpap_gso_seg(row, hb, hlen, l3, l4, f + pay + k * mss, sl, k, mss,
                                         k + 1 == need);
                            start[n + k] = headroom;
                            length[n + k] = (int32_t)(hlen + sl);
                            l2len[n + k] = (uint16_t)l3;
                            iif[n + k] = iifv;
                            ts[n + k] = (int64_t)h->tp_sec * 1000000000LL + h->tp_nsec;
                        }
                        n += (int)need;
                        r->rx += need;
                        r->gso_frames++;
                        r->gso_segments += need;
                        if (vlan) r->vlan_restored++;
                        continue;
                    }
                }
                r->left--;
                r->pkt += h->tp_next_offset;
                if (sll->sll_pkttype == PACKET_OTHERHOST || sll->sll_pkttype == PACKET_OUTGOING) {
                    r->otherhost++;
                    continue;
                }
                if (h->tp_snaplen < h->tp_len) { r->truncated++; continue; }
                if ((int)(len + (vlan ? 4 : 0)) > room || len < 14) { r->oversize++; continue; }
                {
                    uint8_t *row = data + (size_t)n * slot + headroom;
                    uint16_t et;
                    if (vlan) {
                        uint16_t tpid = (h->tp_status & TP_STATUS_VLAN_TPID_VALID)
                                        ? h->hv1.tp_vlan_tpid : 0x8100;
                        memcpy(row, f, 12);
                        row[12] = tpid >> 8; row[13] = tpid & 0xff;
                        row[14] = (h->hv1.tp_vlan_tci >> 8) & 0xff; row[15] = h->hv1.tp_vlan_tci & 0xff;
                        memcpy(row + 16, f + 12, len - 12);
                        len += 4;
                        r->vlan_restored++;
                    } else {
                        memcpy(row, f, len);
                    }
                    if (h->tp_status & TP_STATUS_CSUMNOTREADY) {
                        if (fpap_csum_fix(row, len)) r->csum_fixed++; else r->csum_partial++;
                    }
                    et = (uint16_t)(row[12] << 8 | row[13]);
                    start[n] = headroom;
                    length[n] = (int32_t)len;
                    l2len[n] = (et == 0x8100 && len >= 18) ? 18 : 14;
                    iif[n] = iifv;
                    ts[n] = (int64_t)h->tp_sec * 1000000000LL + h->tp_nsec;
                    n++;
                    r->rx++;
                }
            }
            if (r->left)
                break;          /* the batch is full: the rest of this block next time */
        release:
            __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
            r->cur = (r->cur + 1) % r->block_nr;
        }
        return n;
    }

    /* sendmmsg the rows idx[0..n) (start/length per row); returns the number
       the kernel accepted; *err: errno of the first refusal (0 if none). */
    static int fpap_tx(int fd, uint8_t *data, int slot, const int32_t *start,
                       const int32_t *length, const int32_t *idx, int n, int *err) {
        struct mmsghdr msgs[64];
        struct iovec iov[64];
        int done = 0, k, m, rc;
        *err = 0;
        while (done < n) {
            m = n - done < 64 ? n - done : 64;
            for (k = 0; k < m; k++) {
                int i = idx[done + k];
                iov[k].iov_base = data + (size_t)i * slot + start[i];
                iov[k].iov_len = (size_t)length[i];
                memset(&msgs[k].msg_hdr, 0, sizeof(msgs[k].msg_hdr));
                msgs[k].msg_hdr.msg_iov = &iov[k];
                msgs[k].msg_hdr.msg_iovlen = 1;
            }
            rc = sendmmsg(fd, msgs, m, 0);
            if (rc < 0) {
                if (errno == EINTR) continue;
                *err = errno;
                /* skip the message that failed (ENOBUFS, EMSGSIZE, ...) */
                done += 1;
                continue;
            }
            done += rc;
            if (rc < m && rc == 0) done += 1;
        }
        return done;
    }

    /* The same block walk as fpap_rx without the copy: reads each frame's
       header and first bytes (the datapath reads them anyway) and gives the
       blocks back.  Measures what building batches in the ring memory
       itself could save (bench_wire --ring-copy). */
    static long fpap_walk(fpap_ring *r, uint64_t *sum) {
        long n = 0;
        while (r->ring) {
            struct tpacket_block_desc *bd =
                (struct tpacket_block_desc *)(r->ring + (size_t)r->cur * r->block_size);
            uint8_t *pkt;
            unsigned k, np;
            if (r->left) return -1;
            if (!(__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER))
                break;
            np = bd->hdr.bh1.num_pkts;
            pkt = (uint8_t *)bd + bd->hdr.bh1.offset_to_first_pkt;
            for (k = 0; k < np; k++) {
                struct tpacket3_hdr *h = (struct tpacket3_hdr *)pkt;
                const uint8_t *f = pkt + h->tp_mac;
                *sum += f[12] + f[h->tp_snaplen - 1] + h->tp_snaplen + h->tp_sec;
                pkt += h->tp_next_offset;
                n++;
            }
            __atomic_store_n(&bd->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
            r->cur = (r->cur + 1) % r->block_nr;
        }
        return n;
    }

    static int fpap_poll(const int *fds, int n, int timeout_ms, int *ready) {
        struct pollfd p[64];
        int k, rc;
        if (n > 64) n = 64;
        for (k = 0; k < n; k++) { p[k].fd = fds[k]; p[k].events = POLLIN | POLLERR; p[k].revents = 0; }
        rc = poll(p, n, timeout_ms);
        if (rc < 0) return errno == EINTR ? 0 : -errno;
        for (k = 0; k < n; k++)
            ready[k] = (p[k].revents & POLLIN ? 1 : 0) | (p[k].revents & (POLLERR | POLLHUP | POLLNVAL) ? 2 : 0);
        return rc;
    }

    static int fpap_ready(const fpap_ring *r) {
        const struct tpacket_block_desc *bd =
            (const struct tpacket_block_desc *)(r->ring + (size_t)r->cur * r->block_size);
        return r->left || (__atomic_load_n(&bd->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER);
    }

    static int fpap_stats(int fd, unsigned *packets, unsigned *drops, unsigned *freeze) {
        struct tpacket_stats_v3 st;
        socklen_t l = sizeof(st);
        memset(&st, 0, sizeof(st));
        if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &st, &l) < 0) return -errno;
        *packets = st.tp_packets; *drops = st.tp_drops; *freeze = st.tp_freeze_q_cnt;
        return 0;
    }

    /* SO_MARK on the sockets a ring transmits from: 0 or -errno */
    static int fpap_set_mark(const fpap_ring *r, unsigned mark) {
        if (r->fd >= 0 && setsockopt(r->fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) < 0)
            return -errno;
        if (r->txfd >= 0 && r->txfd != r->fd &&
                setsockopt(r->txfd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) < 0)
            return -errno;
        return 0;
    }
    """
    ctypedef struct fpap_ring:
        int fd
        unsigned block_size, block_nr
        uint64_t rx, oversize, otherhost, truncated, vlan_restored, csum_partial, csum_fixed
        uint64_t gso_frames, gso_segments
        int vnet
        int txfd
    int fpap_open(fpap_ring* r, int ifindex, unsigned block_size, unsigned block_nr,
                  unsigned frame_size, int tov_ms, int bypass, int vnet, int nd_only,
                  unsigned fanout, int* stage) nogil
    void fpap_close(fpap_ring* r) nogil
    int fpap_rx(fpap_ring* r, uint8_t* data, int slot, int headroom, int max, int32_t* start,
                int32_t* length, uint16_t* l2len, uint32_t* iif, int64_t* ts, uint32_t iifv) nogil
    int fpap_tx(int fd, uint8_t* data, int slot, const int32_t* start, const int32_t* length,
                const int32_t* idx, int n, int* err) nogil
    long fpap_walk(fpap_ring* r, uint64_t* sum) nogil
    int fpap_poll(const int* fds, int n, int timeout_ms, int* ready) nogil
    int fpap_ready(const fpap_ring* r) nogil
    int fpap_stats(int fd, unsigned* packets, unsigned* drops, unsigned* freeze) nogil
    int fpap_set_mark(const fpap_ring* r, unsigned mark) nogil
    ctypedef unsigned socklen_t
    int getsockopt(int fd, int level, int name, void* val, socklen_t* len) nogil
    int SOL_SOCKET, SO_ERROR


_STAGES = ("socket(AF_PACKET, SOCK_RAW)", "PACKET_VERSION TPACKET_V3", "PACKET_RX_RING",
           "mmap of the ring", "bind", "PACKET_IGNORE_OUTGOING", "PACKET_QDISC_BYPASS",
           "the TX socket", "SO_ATTACH_FILTER (ARP/ND)", "PACKET_FANOUT")

# PACKET_FANOUT types (linux/if_packet.h)
FANOUT_HASH, FANOUT_LB, FANOUT_CPU, FANOUT_QM = 0, 1, 2, 5


class AfPacketError(OSError):
    """An AF_PACKET socket could not be set up (the message says which step
    and why, for a person)."""


cdef class Socket:
    """One interface's AF_PACKET socket: a TPACKET_V3 RX ring bound with
    ETH_P_ALL and PACKET_IGNORE_OUTGOING, and sendmmsg for TX.

    ``ifindex``: the system's; ``iif``: the value ``rx`` writes into the
    batch's iif (the Router's ifindex for the device)."""
    cdef fpap_ring r
    cdef readonly int ifindex
    cdef readonly uint32_t iif
    cdef readonly str name
    cdef readonly bint qdisc_bypass
    cdef public uint64_t tx_packets, tx_errors
    cdef uint64_t ring_packets, ring_drops, ring_freezes
    cdef public uint64_t errors
    cdef public int last_error

    def __cinit__(self):
        self.r.fd = -1
        self.r.txfd = -1

    def __init__(self, str name, int ifindex, uint32_t iif=0, *, unsigned block_size=1 << 18,
                 unsigned block_nr=16, unsigned frame_size=2048, int block_timeout_ms=1,
                 bint qdisc_bypass=False, bint gso=True, bint nd_only=False, int fanout_group=-1,
                 int fanout_type=0):
        """``nd_only``: a cBPF filter lets only ARP and ICMPv6 ND frames in
        (the neighbour subsystem's socket beside fanout workers).
        ``fanout_group`` (0..65535): join that PACKET_FANOUT group with
        ``fanout_type`` (FANOUT_HASH: a flow stays on one socket)."""
        cdef int stage = 0
        cdef unsigned fan = 0
        if fanout_group >= 0:
            fan = (<unsigned>fanout_group & 0xFFFF) | (<unsigned>fanout_type << 16)
        cdef int rc = fpap_open(&self.r, ifindex, block_size, block_nr, frame_size,
                                block_timeout_ms, qdisc_bypass, gso, nd_only, fan, &stage)
        if rc < 0:
            err = -rc
            hint = ""
            if err in (1, 13):   # EPERM, EACCES
                hint = " (AF_PACKET needs root or CAP_NET_RAW)"
            elif err == 19:      # ENODEV
                hint = " (no such interface)"
            raise AfPacketError(err, f"{name}: {_STAGES[stage]}: {os.strerror(err)}{hint}")
        self.name = name
        self.ifindex = ifindex
        self.iif = iif or ifindex
        self.qdisc_bypass = qdisc_bypass
        self.tx_packets = 0
        self.tx_errors = 0

    def __dealloc__(self):
        fpap_close(&self.r)

    cdef _clear_error(self):
        cdef int e = 0
        cdef socklen_t l = sizeof(e)
        if self.r.fd >= 0 and getsockopt(self.r.fd, SOL_SOCKET, SO_ERROR, &e, &l) == 0 and e:
            self.errors += 1
            self.last_error = e

    cdef _read_stats(self):
        # PACKET_STATISTICS resets the kernel's counters: accumulate them
        cdef unsigned p = 0, d = 0, fz = 0
        if self.r.fd >= 0 and fpap_stats(self.r.fd, &p, &d, &fz) == 0:
            self.ring_packets += p
            self.ring_drops += d
            self.ring_freezes += fz

    def close(self):
        self._read_stats()
        fpap_close(&self.r)

    def fileno(self):
        return self.r.fd

    def set_mark(self, unsigned mark):
        """SO_MARK on the sockets this one transmits from (the RX socket and,
        with PACKET_VNET_HDR, the separate TX one): the frames it sends carry
        ``mark`` (fastpath.wire.host tells them from the kernel's own)."""
        cdef int rc = fpap_set_mark(&self.r, mark)
        if rc < 0:
            raise OSError(-rc, f"SO_MARK on {self.name}: {os.strerror(-rc)}")

    @property
    def closed(self):
        return self.r.fd < 0

    def ready(self):
        """Whether a block (or the rest of one) is waiting to be read."""
        return self.r.fd >= 0 and bool(fpap_ready(&self.r))

    def rx(self, batch, int offset=0, int max=-1):
        """Fill rows ``offset``.. of ``batch`` (a fastpath Batch, Ethernet)
        with the frames waiting in the ring; returns how many."""
        cdef cnp.ndarray data = batch.data
        cdef int n = data.shape[0], slot = data.shape[1]
        cdef cnp.ndarray start = batch.start, length = batch.length, l2len = batch.l2len
        cdef cnp.ndarray iif = batch.iif, ts = batch.timestamp_ns
        if max < 0 or max > n - offset:
            max = n - offset
        if max <= 0 or self.r.fd < 0:
            return 0
        cdef int got, hr = batch.headroom
        cdef uint8_t* base = <uint8_t*>cnp.PyArray_DATA(data) + <size_t>offset * slot
        got = fpap_rx(&self.r, base, slot, hr, max,
                      <int32_t*>cnp.PyArray_DATA(start) + offset,
                      <int32_t*>cnp.PyArray_DATA(length) + offset,
                      <uint16_t*>cnp.PyArray_DATA(l2len) + offset,
                      <uint32_t*>cnp.PyArray_DATA(iif) + offset,
                      <int64_t*>cnp.PyArray_DATA(ts) + offset, self.iif)
        return got

    def walk(self):
        """Give back every ready block without copying a frame (reading
        their headers and first bytes only): a measurement aid (see
        fpap_walk).  Returns the number of frames."""
        cdef uint64_t sm = 0
        cdef long n = fpap_walk(&self.r, &sm)
        if n < 0:
            raise RuntimeError("walk() after a partial rx()")
        return n

    def tx(self, batch, cnp.ndarray idx):
        """Send rows ``idx`` (int32 indices) of ``batch`` as they stand
        (data[start:start+length]); returns how many the kernel took."""
        cdef cnp.ndarray data = batch.data
        cdef cnp.ndarray start = batch.start, length = batch.length
        cdef cnp.ndarray ix = np.ascontiguousarray(idx, dtype=np.int32)
        cdef int err = 0, sent
        if self.r.fd < 0 or len(ix) == 0:
            return 0
        sent = fpap_tx(self.r.txfd, <uint8_t*>cnp.PyArray_DATA(data), data.shape[1],
                       <const int32_t*>cnp.PyArray_DATA(start), <const int32_t*>cnp.PyArray_DATA(length),
                       <const int32_t*>cnp.PyArray_DATA(ix), len(ix), &err)
        self.tx_packets += sent
        return sent

    def send(self, frame):
        """One frame (bytes): the control plane's ARP/ND and queued packets."""
        cdef bytes b = bytes(frame)
        if self.r.fd < 0:
            return 0
        try:
            os.write(self.r.txfd, b)
        except OSError:
            self.tx_errors += 1
            return 0
        self.tx_packets += 1
        return 1

    def counters(self):
        """rx, skipped frames by cause, tx, and the kernel's ring statistics
        (PACKET_STATISTICS: packets, drops, and how often the ring was
        full -- the kernel froze it until a block came back -- accumulated
        since the socket was opened, its close included)."""
        self._read_stats()
        return {"rx": self.r.rx, "rx_otherhost": self.r.otherhost, "rx_oversize": self.r.oversize,
                "rx_truncated": self.r.truncated, "rx_vlan_restored": self.r.vlan_restored,
                "rx_gso_frames": self.r.gso_frames, "rx_gso_segments": self.r.gso_segments,
                "rx_csum_completed": self.r.csum_fixed, "rx_csum_partial": self.r.csum_partial,
                "tx": self.tx_packets,
                "tx_errors": self.tx_errors, "errors": self.errors, "ring_packets": self.ring_packets,
                "ring_drops": self.ring_drops, "ring_freezes": self.ring_freezes}


def poll(sockets, int timeout_ms, extra=()):
    """Wait until one of ``sockets`` has a block ready (or timeout_ms):
    returns the list of those that are ready (one poll(2)), followed by
    those of the ``extra`` file descriptors (ints: a worker's control
    connection) that are readable or closed.  A socket with
    a pending error (its device went down or away: ENETDOWN) has the error
    read and cleared (``Socket.errors``, ``Socket.last_error``), so that it
    does not wake every poll again."""
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
        rc = fpap_poll(fds, n, timeout_ms, ready)
    if rc < 0:
        raise OSError(-rc, os.strerror(-rc))
    for k in range(ns):
        if ready[k] & 2:
            (<Socket>socks[k])._clear_error()
    return [socks[k] for k in range(ns) if ready[k] & 1] + \
        [ext[k - ns] for k in range(ns, n) if ready[k]]

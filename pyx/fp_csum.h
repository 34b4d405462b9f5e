/* Completing a TCP/UDP checksum a local stack's checksum offload left
 * partial, as the kernel's skb_checksum_help does before a device without
 * offload: the sum from the L4 header (its checksum field, which holds the
 * pseudo-header sum, included) to the end of the IP payload, folded and
 * complemented.  Shared by the AF_PACKET receive path (which the kernel
 * tells: TP_STATUS_CSUMNOTREADY) and the AF_XDP one (which recognises the
 * field by its value, XDP passing no such flag).
 *
 * IPv4 that is not a fragment, and IPv6 with TCP/UDP right after the fixed
 * header, behind an optional 802.1Q tag; the frame must hold the whole IP
 * payload.
 */
#ifndef FP_CSUM_H
#define FP_CSUM_H
#include <stdint.h>

typedef struct {
    unsigned l4;        /* offset of the TCP/UDP header in the frame */
    unsigned l4len;     /* bytes from there to the end of the IP payload */
    unsigned off;       /* offset of the checksum field in the L4 header */
    uint8_t proto;      /* 6 or 17 */
    uint16_t pseudo;    /* the folded pseudo-header sum (not complemented) */
} fp_l4;

/* Finds the TCP/UDP header of Ethernet frame f (len bytes); 0 when it is
 * not one fp_l4_complete handles. */
static inline int fp_l4_find(const uint8_t *f, unsigned len, fp_l4 *x)
{
    unsigned l3 = 14, k;
    uint32_t ps = 0;
    uint16_t et;
    if (len < 14) return 0;
    et = (uint16_t)(f[12] << 8 | f[13]);
    if (et == 0x8100 && len >= 18) { et = (uint16_t)(f[16] << 8 | f[17]); l3 = 18; }
    if (et == 0x0800) {
        unsigned ihl, tot;
        if (len < l3 + 20) return 0;
        if ((f[l3 + 6] & 0x3f) || f[l3 + 7]) return 0;       /* MF or offset */
        ihl = (f[l3] & 15) * 4u;
        tot = (unsigned)(f[l3 + 2] << 8 | f[l3 + 3]);
        if (ihl < 20 || tot < ihl || l3 + tot > len) return 0;
        x->proto = f[l3 + 9];
        x->l4 = l3 + ihl;
        x->l4len = tot - ihl;
        for (k = 12; k < 20; k += 2) ps += (uint32_t)(f[l3 + k] << 8 | f[l3 + k + 1]);
    } else if (et == 0x86DD) {
        if (len < l3 + 40) return 0;
        x->proto = f[l3 + 6];
        x->l4 = l3 + 40;
        x->l4len = (unsigned)(f[l3 + 4] << 8 | f[l3 + 5]);
        if (x->l4 + x->l4len > len) return 0;
        for (k = 8; k < 40; k += 2) ps += (uint32_t)(f[l3 + k] << 8 | f[l3 + k + 1]);
    } else return 0;
    if (x->proto == 6) x->off = 16; else if (x->proto == 17) x->off = 6; else return 0;
    if (x->l4len < x->off + 2) return 0;
    ps += x->proto + (x->l4len & 0xffff) + (x->l4len >> 16);
    while (ps >> 16) ps = (ps & 0xffff) + (ps >> 16);
    x->pseudo = (uint16_t)ps;
    return 1;
}

/* The checksum field of x's L4 header as it stands. */
static inline unsigned fp_l4_field(const uint8_t *f, const fp_l4 *x)
{
    return (unsigned)(f[x->l4 + x->off] << 8 | f[x->l4 + x->off + 1]);
}

/* Completes the checksum whose field holds the pseudo-header sum. */
static inline void fp_l4_complete(uint8_t *f, const fp_l4 *x)
{
    unsigned k, end = x->l4 + x->l4len;
    uint32_t sum = 0;
    for (k = x->l4; k + 1 < end; k += 2) sum += (uint32_t)(f[k] << 8 | f[k + 1]);
    if (k < end) sum += (uint32_t)f[k] << 8;
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    sum = ~sum & 0xffff;
    if (x->proto == 17 && sum == 0) sum = 0xffff;
    f[x->l4 + x->off] = (uint8_t)(sum >> 8);
    f[x->l4 + x->off + 1] = (uint8_t)sum;
}

#endif

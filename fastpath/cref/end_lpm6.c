/*
 * end_lpm6.c: a plain C End (RFC 8986 4.1, Linux input_action_end) over
 * DPDK's rte_lpm6 -- the yardstick of fastpath's End benchmark.
 *
 * It does, per packet, what the kernel does to forward an End packet and
 * nothing else: the receive checks of ip6_rcv_core, the route of the
 * destination through the rules (local table, then main), the SRH checks
 * of seg6_validate_srh (TLV walk included), the advance to the next
 * segment, the second lookup (local, then main) and the checks of
 * ip6_forward (hop limit, MTU, source scope), the hop limit decrement and
 * the Ethernet header from the route's nexthop.  Every other case (a drop,
 * an ICMP error due, local delivery, any other behaviour) is an exception
 * here: the kernel, and fastpath's general path, would do more.
 *
 * Tables, nexthops and frames come from a file written by
 * ``python -m fastpath.bench_cref`` (which builds this program, checks that
 * its output is fastpath's byte for byte, then times both side by side).
 *
 *   end_lpm6 FILE verify OUT [state]   process each frame once, write the results
 *   end_lpm6 FILE serve [state]        per line of stdin (seconds), one timed
 *                                      run: "ns/packet packets checksum"
 *
 * "state": keep and touch the per-route state as the kernel does (below).
 *
 * Timing is as fastpath's Datapath.run_loop: batches restored from the
 * pool outside the timed region, clock_gettime around each batch.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lpm6.h>
#include <rte_malloc.h>

#define MAGIC "FPCREF1"

enum { NH_NONE = 0, NH_FWD = 1, NH_END = 2, NH_OTHER = 3 };
enum { OUT_EXCEPTION = 0, OUT_FORWARD = 1 };

struct file_hdr {           /* 40 bytes, little-endian */
    char magic[8];
    uint32_t n_routes, n_nh, n_frames, slot, batch, iif;
    uint32_t tbl8s[2];      /* tbl8 groups each table needs (fastpath's LPM count) */
};

struct file_route {         /* 24 bytes */
    uint8_t prefix[16];
    uint8_t depth;
    uint8_t table;          /* 0 local, 1 main */
    uint16_t pad;
    uint32_t nh;
};

struct nexthop {            /* 20 bytes */
    uint8_t kind;           /* NH_* */
    uint8_t pad;
    uint16_t oif;
    uint32_t mtu;           /* IPv6 MTU of the egress device */
    uint8_t eth[12];        /* destination (gateway's neighbour) and source MAC */
};

/* With "state": the per-route state the kernel keeps and fastpath models,
 * touched on each lookup as ip6_pol_route does in noref mode with the lazy
 * __use of seeds/003 -- the route entry (a fib6_info: type and nexthop
 * read, __use and lastuse flushed at most once per tick) and this CPU's
 * copy of it (rt6_get_pcpu_route: __use counted).  The LPM then returns a
 * route, not a nexthop, as fastpath's does. */
struct route_entry {        /* 64 bytes, as fastpath's fp_dst */
    uint32_t nh;
    uint32_t lastuse;
    uint64_t use;
    uint8_t pad[48];
};

struct route_pcpu {         /* 16 bytes, as fastpath's fp_pcpu */
    uint32_t pad;
    uint32_t lastuse;
    uint64_t use;
};

static int with_state;
static struct route_entry *rts;
static struct route_pcpu *pcpu;
static uint32_t jiffies;

static struct rte_lpm6 *tables[2];
static uint32_t table_default[2];       /* depth-0 route of each table, 0: none */
static struct nexthop *nhs;
static uint32_t n_nh;
static uint32_t iif;

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

/* the route's nexthop, with its use statistics ("state") */
static inline uint32_t route_use(uint32_t v)
{
    struct route_entry *r;
    struct route_pcpu *pc;
    if (!with_state)
        return v;
    r = &rts[v];
    pc = &pcpu[v];
    pc->use++;
    if (pc->lastuse != jiffies) {
        r->use += pc->use;
        r->lastuse = jiffies;
        pc->use = 0;
        pc->lastuse = jiffies;
    }
    return r->nh;
}

/* fib6_rule_lookup with the default rules: local, then main */
static inline uint32_t route(const uint8_t *addr)
{
    uint32_t v;
    for (int t = 0; t < 2; t++) {
        if (rte_lpm6_lookup(tables[t], addr, &v) == 0)
            return route_use(v);
        if (table_default[t])
            return route_use(table_default[t]);
    }
    return 0;
}

/* seg6_validate_srh(srh, len, reduced = true), as seg6_local's get_srh */
static inline int validate_srh(const uint8_t *srh, int len)
{
    int first = srh[4], trailing, off;
    if (srh[2] != 4 || ((srh[1] + 1) << 3) != len)
        return 0;
    if (first > srh[1] / 2 - 1 || srh[3] > first + 1)
        return 0;
    off = 8 + ((first + 1) << 4);
    trailing = len - off;
    if (trailing < 0)
        return 0;
    while (trailing) {
        int tlv_len;
        if (trailing < 2)
            return 0;
        tlv_len = 2 + srh[off + 1];
        trailing -= tlv_len;
        if (trailing < 0)
            return 0;
        off += tlv_len;
    }
    return 1;
}

static inline int is_v6_loopback(const uint8_t *a)
{
    static const uint8_t lo[16] = {[15] = 1};
    return memcmp(a, lo, 16) == 0;
}

static inline int is_unspec_or_linklocal(const uint8_t *a)
{
    static const uint8_t zero[16];
    return (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) || memcmp(a, zero, 16) == 0;
}

/* One Ethernet frame in place; its egress device in *oif when forwarded. */
static inline int end_one(uint8_t *f, uint32_t len, uint16_t *oif)
{
    uint8_t *ip6 = f + 14, *srh;
    uint32_t l3len, nh, sl;
    int srhlen;
    const struct nexthop *n;

    /* ip6_rcv_core */
    if (len < 14 + 40 || rd16(f + 12) != 0x86dd || (ip6[0] >> 4) != 6)
        return OUT_EXCEPTION;
    l3len = 40 + rd16(ip6 + 4);
    if (l3len > len - 14)
        return OUT_EXCEPTION;
    if (ip6[8] == 0xff || ip6[24] == 0xff || is_v6_loopback(ip6 + 8) || is_v6_loopback(ip6 + 24))
        return OUT_EXCEPTION;
    /* ip6_route_input: a seg6local End route */
    nh = route(ip6 + 24);
    if (nh >= n_nh || nhs[nh].kind != NH_END)
        return OUT_EXCEPTION;
    /* input_action_end: get_and_validate_srh, no HMAC required */
    if (ip6[6] != 43 || l3len < 40 + 8)
        return OUT_EXCEPTION;
    srh = ip6 + 40;
    srhlen = (srh[1] + 1) << 3;
    if (40 + (uint32_t)srhlen > l3len || !validate_srh(srh, srhlen))
        return OUT_EXCEPTION;
    sl = srh[3];
    if (sl == 0)
        return OUT_EXCEPTION;
    /* advance_nextseg */
    srh[3] = (uint8_t)--sl;
    memcpy(ip6 + 24, srh + 8 + (sl << 4), 16);
    /* seg6_lookup_nexthop -> ip6_forward */
    nh = route(ip6 + 24);
    if (nh >= n_nh || nhs[nh].kind != NH_FWD)
        return OUT_EXCEPTION;
    n = &nhs[nh];
    if (ip6[7] <= 1 || l3len > n->mtu)
        return OUT_EXCEPTION;
    if (n->oif != iif && is_unspec_or_linklocal(ip6 + 8))
        return OUT_EXCEPTION;
    ip6[7]--;
    memcpy(f, n->eth, 12);
    *oif = n->oif;
    return OUT_FORWARD;
}

/* The tables live in an external malloc heap of anonymous memory advised
 * for transparent huge pages, as numpy gives fastpath's tables: without
 * reserved huge pages (--no-huge) EAL's own heap is in 4 KiB pages, and the
 * C program would pay TLB misses that fastpath does not. */
#define HUGE_2M (2u << 20)

static int thp_heap(size_t bytes)
{
    size_t len = (bytes + HUGE_2M - 1) / HUGE_2M * HUGE_2M;
    uint8_t *raw = mmap(NULL, len + HUGE_2M, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *va;
    if (raw == MAP_FAILED)
        return -1;
    va = (uint8_t *)(((uintptr_t)raw + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
    madvise(va, len, MADV_HUGEPAGE);
    if (rte_malloc_heap_create("fastpath-thp") != 0 ||
        rte_malloc_heap_memory_add("fastpath-thp", va, len, NULL, 0, 4096) != 0)
        return -1;
    return rte_malloc_heap_get_socket("fastpath-thp");
}

static void die(const char *what)
{
    fprintf(stderr, "end_lpm6: %s\n", what);
    exit(2);
}

static void *read_all(const char *path, size_t *size)
{
    FILE *fp = fopen(path, "rb");
    long n;
    void *buf;
    if (!fp)
        die(strerror(errno));
    if (fseek(fp, 0, SEEK_END) != 0 || (n = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0)
        die("cannot size the input file");
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, fp) != (size_t)n)
        die("cannot read the input file");
    fclose(fp);
    *size = (size_t)n;
    return buf;
}

static inline int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    char *eal_argv[] = {"end_lpm6", "--no-huge", "--no-pci", "--no-shconf", "--no-telemetry",
                        "-m", "64", "--log-level", "error", NULL};
    size_t heap = 64u << 20;
    int socket;
    struct file_hdr h;
    const struct file_route *routes;
    const uint8_t *frames;
    uint8_t *raw, *bufs;
    uint32_t *lens;
    uint16_t *oifs;
    size_t size, need;
    uint32_t i, b;

    if (argc < 3 || (strcmp(argv[2], "verify") == 0 && argc < 4))
        die("usage: end_lpm6 FILE verify OUT [state] | end_lpm6 FILE serve [state]");
    raw = read_all(argv[1], &size);
    if (size < sizeof h)
        die("input file too short");
    memcpy(&h, raw, sizeof h);
    if (memcmp(h.magic, MAGIC, 8) != 0)
        die("not a fastpath.bench_cref file");
    need = sizeof h + (size_t)h.n_routes * sizeof(struct file_route) + (size_t)h.n_nh * sizeof(struct nexthop)
           + (size_t)h.n_frames * (4 + h.slot);
    if (size != need || h.batch == 0 || h.n_frames < h.batch || h.slot < 64 || h.n_nh == 0)
        die("input file inconsistent");
    routes = (const struct file_route *)(raw + sizeof h);
    nhs = (struct nexthop *)(routes + h.n_routes);
    n_nh = h.n_nh;
    iif = h.iif;
    frames = (const uint8_t *)(nhs + h.n_nh);

    if (rte_eal_init((int)(sizeof eal_argv / sizeof eal_argv[0]) - 1, eal_argv) < 0)
        die("rte_eal_init failed");
    for (int t = 0; t < 2; t++)      /* tbl24 (64 MiB), the groups and their headers, the rules */
        heap += (64u << 20) + (size_t)(h.tbl8s[t] + h.tbl8s[t] / 4 + 1024) * (1024 + 64)
                + (size_t)(h.n_routes + 16) * 128;
    socket = thp_heap(heap);
    if (socket < 0)
        die("cannot make the table heap");
    for (int t = 0; t < 2; t++) {
        struct rte_lpm6_config cfg = {.max_rules = h.n_routes + 16,
                                      .number_tbl8s = h.tbl8s[t] + h.tbl8s[t] / 4 + 1024};
        char name[16];
        snprintf(name, sizeof name, "table%d", t);
        tables[t] = rte_lpm6_create(name, socket, &cfg);
        if (!tables[t])
            die(rte_strerror(rte_errno));
    }
    with_state = argc > 3 && strcmp(argv[argc - 1], "state") == 0;
    if (with_state) {           /* route 0: none; entries on their own lines */
        rts = aligned_alloc(64, (size_t)(h.n_routes + 1) * sizeof *rts);
        pcpu = aligned_alloc(64, ((size_t)(h.n_routes + 1) * sizeof *pcpu + 63) / 64 * 64);
        if (!rts || !pcpu)
            die("out of memory");
        memset(rts, 0, (size_t)(h.n_routes + 1) * sizeof *rts);
        memset(pcpu, 0, (size_t)(h.n_routes + 1) * sizeof *pcpu);
    }
    for (i = 0; i < h.n_routes; i++) {
        const struct file_route *r = &routes[i];
        uint32_t v = with_state ? i + 1 : r->nh;    /* a route, or its nexthop */
        if (r->table > 1 || r->depth > 128 || r->nh >= h.n_nh)
            die("bad route");
        if (with_state)
            rts[i + 1].nh = r->nh;
        if (r->depth == 0)
            table_default[r->table] = v;
        else if (rte_lpm6_add(tables[r->table], r->prefix, r->depth, v) != 0)
            die("rte_lpm6_add failed");
    }

    bufs = aligned_alloc(64, (size_t)h.batch * h.slot);
    lens = calloc(h.batch, sizeof *lens);
    oifs = calloc(h.batch, sizeof *oifs);
    if (!bufs || !lens || !oifs)
        die("out of memory");

    if (strcmp(argv[2], "verify") == 0) {
        FILE *out = fopen(argv[3], "wb");
        if (!out)
            die(strerror(errno));
        for (i = 0; i < h.n_frames; i++) {
            const uint8_t *src = frames + (size_t)i * (4 + h.slot);
            uint8_t rec[5];
            uint16_t oif = 0;
            uint32_t len;
            int v;
            memcpy(&len, src, 4);
            if (len > h.slot)
                die("frame longer than its slot");
            memcpy(bufs, src + 4, h.slot);
            v = end_one(bufs, len, &oif);
            rec[0] = (uint8_t)v;
            memcpy(rec + 1, &oif, 2);
            memcpy(rec + 3, &(uint16_t){(uint16_t)len}, 2);
            if (fwrite(rec, 1, 5, out) != 5 || fwrite(bufs, 1, h.slot, out) != h.slot)
                die("cannot write the results");
        }
        fclose(out);
    } else if (strcmp(argv[2], "serve") == 0) {
        /* one timed run per line of stdin (its length in seconds), so that
         * the driver can alternate our runs with fastpath's */
        char line[64];
        uint32_t pos = 0;
        uint64_t sink = 0;
        printf("ready\n");
        fflush(stdout);
        while (fgets(line, sizeof line, stdin)) {
            double secs = atof(line);
            int64_t busy = 0, npk = 0, end = now_ns() + (int64_t)(secs * 1e9);
            do {
                int64_t t0;
                for (b = 0; b < h.batch; b++) {        /* restore, untimed */
                    const uint8_t *src = frames + (size_t)((pos + b) % h.n_frames) * (4 + h.slot);
                    memcpy(&lens[b], src, 4);
                    memcpy(bufs + (size_t)b * h.slot, src + 4, h.slot);
                }
                pos = (pos + h.batch) % h.n_frames;
                t0 = now_ns();
                jiffies = (uint32_t)(t0 / 4000000);     /* HZ=250, as fastpath's clock */
                for (b = 0; b < h.batch; b++)
                    sink += (uint64_t)end_one(bufs + (size_t)b * h.slot, lens[b], &oifs[b]) + oifs[b];
                busy += now_ns() - t0;
                npk += h.batch;
            } while (now_ns() < end);
            printf("%.4f %lld %llu\n", (double)busy / (double)npk, (long long)npk,
                   (unsigned long long)sink);
            fflush(stdout);
        }
    } else {
        die("unknown command");
    }
    rte_eal_cleanup();
    return 0;
}

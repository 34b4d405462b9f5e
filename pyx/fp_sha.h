/* fp_sha.h -- SHA-1, SHA-256 and their HMAC (RFC 2104), for the SRH HMAC
 * TLV (RFC 8754 section 2.1.2, the kernel's net/ipv6/seg6_hmac.c).
 *
 * Why fastpath carries its own: the datapath validates (and, at headends and
 * End.B6*, computes) an HMAC per packet inside nogil loops over raw
 * pointers.  Python's hmac/hashlib would need the GIL and allocate objects
 * per packet, and OpenSSL's EVP interface allocates contexts; these
 * functions are allocation-free, reentrant, and small.  HMAC keys are
 * prepared once per key (fp_hmac_prepare: the hash states after the inner
 * and outer key pads), so a packet costs only its message blocks plus one
 * outer block.  Where the CPU has the SHA extensions (SHA-NI), SHA-256 and
 * SHA-1 blocks run on them (chosen once, by CPUID); the portable C blocks
 * are the reference and give the same bytes.
 *
 * Algorithm numbers are the kernel's SEG6_HMAC_ALGO_*: 1 SHA-1, 2 SHA-256.
 * All functions are static inline: include this header in one translation
 * unit (the Cython module) and call them with the GIL released.
 */
#ifndef FP_SHA_H
#define FP_SHA_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>

#define FP_HMAC_SHA1 1
#define FP_HMAC_SHA256 2
#define FP_SHA_BLOCK 64

static inline uint32_t fp_rol32(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }
static inline uint32_t fp_ror32(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
static inline uint32_t fp_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline void fp_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static const uint32_t fp_sha1_iv[5] = {
    0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u };
static const uint32_t fp_sha256_iv[8] = {
    0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
    0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u };
static const uint32_t fp_sha256_k[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u };

/* ---- portable blocks (FIPS 180-4) --------------------------------------- */

static inline void fp_sha1_block_c(uint32_t *st, const uint8_t *blk)
{
    uint32_t w[80], a = st[0], b = st[1], c = st[2], d = st[3], e = st[4], f, k, t;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = fp_be32(blk + 4 * i);
    for (i = 16; i < 80; i++)
        w[i] = fp_rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    for (i = 0; i < 80; i++) {
        if (i < 20) { f = (b & c) | (~b & d); k = 0x5A827999u; }
        else if (i < 40) { f = b ^ c ^ d; k = 0x6ED9EBA1u; }
        else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDCu; }
        else { f = b ^ c ^ d; k = 0xCA62C1D6u; }
        t = fp_rol32(a, 5) + f + e + k + w[i];
        e = d; d = c; c = fp_rol32(b, 30); b = a; a = t;
    }
    st[0] += a; st[1] += b; st[2] += c; st[3] += d; st[4] += e;
}

static inline void fp_sha256_block_c(uint32_t *st, const uint8_t *blk)
{
    uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = fp_be32(blk + 4 * i);
    for (i = 16; i < 64; i++) {
        uint32_t s0 = fp_ror32(w[i - 15], 7) ^ fp_ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = fp_ror32(w[i - 2], 17) ^ fp_ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = st[0]; b = st[1]; c = st[2]; d = st[3]; e = st[4]; f = st[5]; g = st[6]; h = st[7];
    for (i = 0; i < 64; i++) {
        t1 = h + (fp_ror32(e, 6) ^ fp_ror32(e, 11) ^ fp_ror32(e, 25)) + ((e & f) ^ (~e & g))
             + fp_sha256_k[i] + w[i];
        t2 = (fp_ror32(a, 2) ^ fp_ror32(a, 13) ^ fp_ror32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    st[0] += a; st[1] += b; st[2] += c; st[3] += d; st[4] += e; st[5] += f; st[6] += g; st[7] += h;
}

/* ---- SHA-NI blocks (x86-64 with the SHA extensions) ---------------------- */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(FP_SHA_PORTABLE)
#include <cpuid.h>
#include <immintrin.h>
#define FP_HAVE_SHANI_CODE 1

__attribute__((target("sha,sse4.1")))
static void fp_sha256_block_ni(uint32_t *st, const uint8_t *blk)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i tmp, s0, s1, msg, m0, m1, m2, m3, abef_save, cdgh_save;
    const __m128i *k = (const __m128i *)fp_sha256_k;

    tmp = _mm_loadu_si128((const __m128i *)&st[0]);     /* DCBA */
    s1 = _mm_loadu_si128((const __m128i *)&st[4]);      /* HGFE */
    tmp = _mm_shuffle_epi32(tmp, 0xB1);                 /* CDAB */
    s1 = _mm_shuffle_epi32(s1, 0x1B);                   /* EFGH */
    s0 = _mm_alignr_epi8(tmp, s1, 8);                   /* ABEF */
    s1 = _mm_blend_epi16(s1, tmp, 0xF0);                /* CDGH */
    abef_save = s0;
    cdgh_save = s1;

#define FP_RND4(mi)                                                         \
    msg = _mm_add_epi32(mi, _mm_loadu_si128(k)); k++;                      \
    s1 = _mm_sha256rnds2_epu32(s1, s0, msg);                               \
    msg = _mm_shuffle_epi32(msg, 0x0E);                                    \
    s0 = _mm_sha256rnds2_epu32(s0, s1, msg);

    m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blk + 0)), bswap);
    m1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blk + 16)), bswap);
    m2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blk + 32)), bswap);
    m3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blk + 48)), bswap);
    /* rounds 0-15: the message words as loaded */
    FP_RND4(m0)
    FP_RND4(m1)
    FP_RND4(m2)
    FP_RND4(m3)
    /* rounds 16-63: schedule w[i] = s1(w[i-2]) + w[i-7] + s0(w[i-15]) + w[i-16] */
    {
        int r;
        for (r = 0; r < 12; r++) {
            __m128i nxt = _mm_sha256msg1_epu32(m0, m1);
            nxt = _mm_add_epi32(nxt, _mm_alignr_epi8(m3, m2, 4));
            nxt = _mm_sha256msg2_epu32(nxt, m3);
            m0 = m1; m1 = m2; m2 = m3; m3 = nxt;
            FP_RND4(m3)
        }
    }
#undef FP_RND4

    s0 = _mm_add_epi32(s0, abef_save);
    s1 = _mm_add_epi32(s1, cdgh_save);
    tmp = _mm_shuffle_epi32(s0, 0x1B);                  /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);                   /* DCHG */
    s0 = _mm_blend_epi16(tmp, s1, 0xF0);                /* DCBA */
    s1 = _mm_alignr_epi8(s1, tmp, 8);                   /* ABEF -> HGFE */
    _mm_storeu_si128((__m128i *)&st[0], s0);
    _mm_storeu_si128((__m128i *)&st[4], s1);
}

__attribute__((target("sha,sse4.1")))
static void fp_sha1_block_ni(uint32_t *st, const uint8_t *blk)
{
    const __m128i bswap = _mm_set_epi64x(0x0001020304050607ULL, 0x08090a0b0c0d0e0fULL);
    __m128i abcd, abcd_save, e_save, m[4], e[2];
    int r, i;

    abcd = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)st), 0x1B);
    e[0] = _mm_set_epi32((int)st[4], 0, 0, 0);
    e[1] = _mm_setzero_si128();
    abcd_save = abcd;
    e_save = e[0];
    for (i = 0; i < 4; i++)
        m[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blk + 16 * i)), bswap);

    /* 20 steps of 4 rounds; step r takes message block m[r % 4], E from
     * e[r % 2], and schedules the blocks of later steps in place */
    for (r = 0; r < 20; r++) {
        int ei = r & 1;
        __m128i cur = m[r & 3];
        if (r == 0)
            e[0] = _mm_add_epi32(e[0], cur);
        else
            e[ei] = _mm_sha1nexte_epu32(e[ei], cur);
        e[ei ^ 1] = abcd;
        if (r >= 3 && r <= 18)
            m[(r + 1) & 3] = _mm_sha1msg2_epu32(m[(r + 1) & 3], cur);
        switch (r / 5) {
        case 0: abcd = _mm_sha1rnds4_epu32(abcd, e[ei], 0); break;
        case 1: abcd = _mm_sha1rnds4_epu32(abcd, e[ei], 1); break;
        case 2: abcd = _mm_sha1rnds4_epu32(abcd, e[ei], 2); break;
        default: abcd = _mm_sha1rnds4_epu32(abcd, e[ei], 3); break;
        }
        if (r >= 1 && r <= 16)
            m[(r + 3) & 3] = _mm_sha1msg1_epu32(m[(r + 3) & 3], cur);
        if (r >= 2 && r <= 17)
            m[(r + 2) & 3] = _mm_xor_si128(m[(r + 2) & 3], cur);
    }
    /* E after the last round */
    e[0] = _mm_sha1nexte_epu32(e[0], e_save);
    abcd = _mm_add_epi32(abcd, abcd_save);

    abcd = _mm_shuffle_epi32(abcd, 0x1B);
    _mm_storeu_si128((__m128i *)st, abcd);
    st[4] = (uint32_t)_mm_extract_epi32(e[0], 3);
}

static inline int fp_cpu_has_shani(void)
{
    static int cached = -1;
    unsigned int a, b, c, d;
    if (cached >= 0)
        return cached;
    cached = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29))) {
        /* SSSE3 (pshufb) and SSE4.1 (pblendw, pextrd) too */
        if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 9)) && (c & (1u << 19)))
            cached = 1;
    }
    return cached;
}
#else
static inline int fp_cpu_has_shani(void) { return 0; }
#endif

/* 0: portable C; 1: SHA-NI where the CPU has it.  fp_sha_use_accel() is
 * called once when the module loads (and by the tests, to compare both). */
static int fp_sha_accel = 0;

static inline int fp_sha_use_accel(int on)
{
    fp_sha_accel = on ? fp_cpu_has_shani() : 0;
    return fp_sha_accel;
}

static inline void fp_sha_block(int algo, uint32_t *st, const uint8_t *blk)
{
#ifdef FP_HAVE_SHANI_CODE
    if (fp_sha_accel) {
        if (algo == FP_HMAC_SHA256)
            fp_sha256_block_ni(st, blk);
        else
            fp_sha1_block_ni(st, blk);
        return;
    }
#endif
    if (algo == FP_HMAC_SHA256)
        fp_sha256_block_c(st, blk);
    else
        fp_sha1_block_c(st, blk);
}

static inline int fp_sha_digest_len(int algo) { return algo == FP_HMAC_SHA256 ? 32 : 20; }

/* Hash ``len`` bytes of ``msg`` from state ``st`` (which has already
 * absorbed ``done`` bytes, a multiple of 64), pad, and write the digest. */
static inline void fp_sha_finish(int algo, uint32_t *st, const uint8_t *msg, size_t len,
                                 uint64_t done, uint8_t *out)
{
    uint8_t last[2 * FP_SHA_BLOCK];
    uint64_t bits = (done + len) * 8;
    size_t rest, n, i;
    while (len >= FP_SHA_BLOCK) {
        fp_sha_block(algo, st, msg);
        msg += FP_SHA_BLOCK;
        len -= FP_SHA_BLOCK;
    }
    rest = len;
    memcpy(last, msg, rest);
    last[rest] = 0x80;
    n = rest + 1 + 8 <= FP_SHA_BLOCK ? FP_SHA_BLOCK : 2 * FP_SHA_BLOCK;
    memset(last + rest + 1, 0, n - rest - 1);
    for (i = 0; i < 8; i++)
        last[n - 1 - i] = (uint8_t)(bits >> (8 * i));
    fp_sha_block(algo, st, last);
    if (n > FP_SHA_BLOCK)
        fp_sha_block(algo, st, last + FP_SHA_BLOCK);
    for (i = 0; i < (size_t)fp_sha_digest_len(algo) / 4; i++)
        fp_put_be32(out + 4 * i, st[i]);
}

static inline void fp_sha_init(int algo, uint32_t *st)
{
    if (algo == FP_HMAC_SHA256)
        memcpy(st, fp_sha256_iv, sizeof(fp_sha256_iv));
    else
        memcpy(st, fp_sha1_iv, sizeof(fp_sha1_iv));
}

/* Plain digest (for the tests and for keys longer than a block). */
static inline int fp_sha(int algo, const uint8_t *msg, size_t len, uint8_t *out)
{
    uint32_t st[8];
    fp_sha_init(algo, st);
    fp_sha_finish(algo, st, msg, len, 0, out);
    return fp_sha_digest_len(algo);
}

/* HMAC key preparation (RFC 2104): the hash states after absorbing
 * key ^ ipad and key ^ opad (a key longer than a block is hashed first). */
static inline void fp_hmac_prepare(int algo, const uint8_t *key, size_t klen,
                                   uint32_t *istate, uint32_t *ostate)
{
    uint8_t k0[FP_SHA_BLOCK], pad[FP_SHA_BLOCK];
    int i;
    memset(k0, 0, sizeof(k0));
    if (klen > FP_SHA_BLOCK)
        fp_sha(algo, key, klen, k0);
    else
        memcpy(k0, key, klen);
    for (i = 0; i < FP_SHA_BLOCK; i++)
        pad[i] = k0[i] ^ 0x36;
    fp_sha_init(algo, istate);
    fp_sha_block(algo, istate, pad);
    for (i = 0; i < FP_SHA_BLOCK; i++)
        pad[i] = k0[i] ^ 0x5c;
    fp_sha_init(algo, ostate);
    fp_sha_block(algo, ostate, pad);
}

/* HMAC of ``msg`` with a prepared key; returns the digest length. */
static inline int fp_hmac_prepared(int algo, const uint32_t *istate, const uint32_t *ostate,
                                   const uint8_t *msg, size_t len, uint8_t *out)
{
    uint32_t st[8];
    uint8_t inner[32];
    int dlen = fp_sha_digest_len(algo);
    memcpy(st, istate, sizeof(st));
    fp_sha_finish(algo, st, msg, len, FP_SHA_BLOCK, inner);
    memcpy(st, ostate, sizeof(st));
    fp_sha_finish(algo, st, inner, (size_t)dlen, FP_SHA_BLOCK, out);
    return dlen;
}

static inline int fp_hmac(int algo, const uint8_t *key, size_t klen, const uint8_t *msg,
                          size_t len, uint8_t *out)
{
    uint32_t is[8], os[8];
    fp_hmac_prepare(algo, key, klen, is, os);
    return fp_hmac_prepared(algo, is, os, msg, len, out);
}

#endif /* FP_SHA_H */

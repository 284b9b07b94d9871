/*
 * rmq/_crc_vpclmul.h: CRC-32 (zlib / java.util.zip.CRC32, reflected polynomial 0xEDB88320)
 * folded with VPCLMULQDQ on 512-bit registers, for rmq/_native.c.
 *
 *   crc32_fold_vpclmul(c, p, len)
 *       Same contract as crc32_fold_pclmul in _native.c:
 *         - c is the UN-inverted CRC state (the caller passes ~crc) and the un-inverted state
 *           after the consumed bytes is returned (the caller inverts it again);
 *         - REQUIRES len >= 256 (one full 4 x 64-byte block is loaded up front);
 *         - consumes len rounded down to a multiple of 16 bytes; the caller finishes the
 *           remaining 0..15 bytes with the table code, exactly as crc32_zlib does.
 *       Must only be called when cpu_has_vpclmul() returned nonzero.
 *
 *   cpu_has_vpclmul()
 *       Nonzero when the CPU has AVX-512F/VL/BW and VPCLMULQDQ (plus PCLMULQDQ, SSE4.1) and the
 *       OS saves the opmask / zmm register state (XCR0 bits 1, 2, 5, 6, 7).
 *
 * Method (Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"): the message
 * is kept as a sum of 128-bit chunks, each multiplied by the power of x that separates it from
 * the message end. A 128-bit chunk with (bit-reflected) 64-bit halves lo (the earlier, higher
 * degree half) and hi is moved D bits further along by
 *     lo * (x^(D+32) mod P)  xor  hi * (x^(D-32) mod P)
 * which is a 96-bit value congruent to the chunk times x^D; it is XORed into the chunk found D
 * bits later. Four zmm accumulators of four 128-bit lanes each cover 256 bytes, so the main loop
 * folds every lane by D = 4 * 512 = 2048 bits.
 *
 * Every constant below is bitrev32(x^n mod P) << 1, i.e. x^n mod P written in the reflected bit
 * order that PCLMULQDQ sees, shifted by one because the carry-less product of two reflected
 * values comes out one bit low; P = 0x104C11DB7 (normal form of 0xEDB88320). They were computed
 * with a small program doing polynomial arithmetic over GF(2); the 512/128/64-bit ones equal
 * those in crc32_fold_pclmul.
 */
#ifndef RMQ_CRC_VPCLMUL_H
#define RMQ_CRC_VPCLMUL_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <stdint.h>
#include <stddef.h>
#include <cpuid.h>
#include <immintrin.h>

#define HAVE_CRC32_VPCLMUL 1

/* Each pair: low qword multiplies the low (earlier) half of a lane, high qword the high half. */
#define RMQ_K_2048_LO 0x11542778aLL  /* x^(2048+32) mod P: fold by 4 x 512 bits (main loop)     */
#define RMQ_K_2048_HI 0x1322d1430LL  /* x^(2048-32) mod P                                        */
#define RMQ_K_1536_LO 0x1821d8bc0LL  /* x^(1536+32) mod P: 1st accumulator onto the 4th          */
#define RMQ_K_1536_HI 0x12e958ac4LL  /* x^(1536-32) mod P                                        */
#define RMQ_K_1024_LO 0x1e88ef372LL  /* x^(1024+32) mod P: 2nd accumulator onto the 4th          */
#define RMQ_K_1024_HI 0x14a7fe880LL  /* x^(1024-32) mod P                                        */
#define RMQ_K_512_LO  0x154442bd4LL  /* x^(512+32) mod P: 3rd onto 4th, single-zmm 64-byte loop  */
#define RMQ_K_512_HI  0x1c6e41596LL  /* x^(512-32) mod P                                         */
#define RMQ_K_384_LO  0x03db1ecdcLL  /* x^(384+32) mod P: zmm lane 0 onto lane 3                 */
#define RMQ_K_384_HI  0x174359406LL  /* x^(384-32) mod P                                         */
#define RMQ_K_256_LO  0x0f1da05aaLL  /* x^(256+32) mod P: zmm lane 1 onto lane 3                 */
#define RMQ_K_256_HI  0x15a546366LL  /* x^(256-32) mod P                                         */
#define RMQ_K_128_LO  0x1751997d0LL  /* x^(128+32) mod P: lane 2 onto lane 3, 16-byte tail loop  */
#define RMQ_K_128_HI  0x0ccaa009eLL  /* x^(128-32) mod P                                         */
/* x^64 mod P (64 -> 32 bits) and the Barrett pair mu = bitrev33(floor(x^64 / P)), P' = bitrev33(P)
 * are the ones crc32_reduce128 in _native.c uses: 0x163cd6124, 0x1f7011641, 0x1db710641. */

/* acc * x^D folded onto next: clmul lo*k_lo, hi*k_hi, then a three-way XOR (ternlog 0x96). */
#define RMQ_FOLD512(acc, k, next) \
    _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128((acc), (k), 0x00), \
                              _mm512_clmulepi64_epi128((acc), (k), 0x11), (next), 0x96)

__attribute__((target("avx512f,avx512vl,avx512bw,vpclmulqdq,pclmul,sse4.1"), unused))
static uint32_t crc32_fold_vpclmul(uint32_t c, const uint8_t *p, size_t len)
{
    const __m512i k2048 = _mm512_set_epi64(RMQ_K_2048_HI, RMQ_K_2048_LO, RMQ_K_2048_HI, RMQ_K_2048_LO,
                                           RMQ_K_2048_HI, RMQ_K_2048_LO, RMQ_K_2048_HI, RMQ_K_2048_LO);
    const __m512i k1536 = _mm512_set_epi64(RMQ_K_1536_HI, RMQ_K_1536_LO, RMQ_K_1536_HI, RMQ_K_1536_LO,
                                           RMQ_K_1536_HI, RMQ_K_1536_LO, RMQ_K_1536_HI, RMQ_K_1536_LO);
    const __m512i k1024 = _mm512_set_epi64(RMQ_K_1024_HI, RMQ_K_1024_LO, RMQ_K_1024_HI, RMQ_K_1024_LO,
                                           RMQ_K_1024_HI, RMQ_K_1024_LO, RMQ_K_1024_HI, RMQ_K_1024_LO);
    const __m512i k512 = _mm512_set_epi64(RMQ_K_512_HI, RMQ_K_512_LO, RMQ_K_512_HI, RMQ_K_512_LO,
                                          RMQ_K_512_HI, RMQ_K_512_LO, RMQ_K_512_HI, RMQ_K_512_LO);
    /* lanes 0, 1, 2 of one zmm moved 384, 256, 128 bits onto lane 3; lane 3 itself is XORed in
     * unchanged, so its constant slot is zero */
    const __m512i klanes = _mm512_set_epi64(0, 0, RMQ_K_128_HI, RMQ_K_128_LO,
                                            RMQ_K_256_HI, RMQ_K_256_LO, RMQ_K_384_HI, RMQ_K_384_LO);
    const __m128i k128 = _mm_set_epi64x(RMQ_K_128_HI, RMQ_K_128_LO);
    __m512i x0, x1, x2, x3;
    __m128i x, t;

    /* first 256 bytes; the incoming state is XORed into the first 32 message bits */
    x0 = _mm512_loadu_si512((const void *)p);
    x1 = _mm512_loadu_si512((const void *)(p + 64));
    x2 = _mm512_loadu_si512((const void *)(p + 128));
    x3 = _mm512_loadu_si512((const void *)(p + 192));
    x0 = _mm512_xor_si512(x0, _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (int)c));
    p += 256;
    len -= 256;

    /* main loop: 256 bytes per round, each accumulator folded 2048 bits ahead */
    while (len >= 256) {
        x0 = RMQ_FOLD512(x0, k2048, _mm512_loadu_si512((const void *)p));
        x1 = RMQ_FOLD512(x1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
        x2 = RMQ_FOLD512(x2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
        x3 = RMQ_FOLD512(x3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        len -= 256;
    }

    /* 4 accumulators -> 1: x0, x1, x2 lie 1536, 1024, 512 bits before x3
     * (only the XORs are chained; the six multiplications are independent) */
    x3 = RMQ_FOLD512(x0, k1536, x3);
    x3 = RMQ_FOLD512(x1, k1024, x3);
    x0 = RMQ_FOLD512(x2, k512, x3);

    /* remaining whole 64-byte blocks */
    while (len >= 64) {
        x0 = RMQ_FOLD512(x0, k512, _mm512_loadu_si512((const void *)p));
        p += 64;
        len -= 64;
    }

    /* 512 -> 128 bits: lanes 0..2 folded onto lane 3, then the four lanes XORed together */
    x1 = _mm512_clmulepi64_epi128(x0, klanes, 0x00);
    x2 = _mm512_clmulepi64_epi128(x0, klanes, 0x11);
    x1 = _mm512_ternarylogic_epi64(x1, x2, _mm512_maskz_mov_epi64(0xC0, x0), 0x96);
    {
        __m256i y = _mm256_xor_si256(_mm512_castsi512_si256(x1), _mm512_extracti64x4_epi64(x1, 1));
        x = _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
    }

    /* remaining whole 16-byte blocks */
    while (len >= 16) {
        t = _mm_clmulepi64_si128(x, k128, 0x11);
        x = _mm_clmulepi64_si128(x, k128, 0x00);
        x = _mm_xor_si128(_mm_xor_si128(x, t), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }

    return crc32_reduce128(x);  /* 128 -> 32 bits, as crc32_fold_pclmul (defined in _native.c) */
}
#undef RMQ_FOLD512

/* XCR0 without needing target("xsave"): only valid after CPUID.1:ECX.OSXSAVE was checked. */
static inline uint64_t rmq_xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

__attribute__((unused))
static int cpu_has_vpclmul(void)
{
    unsigned int a, b, c, d;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("vpclmulqdq") ||
        !__builtin_cpu_supports("pclmul") || !__builtin_cpu_supports("sse4.1"))
        return 0;
    /* libgcc already masks AVX-512 by XCR0, but check directly too: the OS must save XMM (bit 1),
     * YMM (2), opmask (5), ZMM0-15 upper halves (6) and ZMM16-31 (7). */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)))   /* OSXSAVE */
        return 0;
    if ((rmq_xgetbv0() & 0xE6) != 0xE6)
        return 0;
    return 1;
}

#endif /* x86_64 && (GCC || clang) */
#endif /* RMQ_CRC_VPCLMUL_H */

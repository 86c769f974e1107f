/* Matrix products on GGUF weight blocks as the file stores them (engine/layers/gguf_linear.py):
 * y[m, n] = x[m, :] . W[n, :] with W in Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K (ggml-common.h layouts),
 * never dequantised to fp32 in memory. As in the q8_0/q4_1 kernels (cpu_kernels.c), the activations are rounded to Q8_0 blocks of 32
 * (`quantize_rows`), so each 32-weight block's product is an exact integer dot product:
 *   y += sum over blocks b of  dx_b * (s_lo * sum_{j<16} q_j qx_j + s_hi * sum_{j>=16} q_j qx_j) - mn_b * dx_b * sum(qx)
 * where s_lo, s_hi are the block's scales for its two halves (equal except in Q6_K, whose scales cover 16 weights)
 * and mn_b its offset (Q4_K/Q5_K: dmin * m; Q4_1/Q5_1: -m; else 0). Q4_0 and Q5_0 hold q - 8 and q - 16 as signed
 * bytes (offset 0), so their block products are integer dots of the stored values, as llama.cpp's.
 *
 * With `round_x` 0, the activations stay fp32 instead (`gguf_group_f32`): x times exactly the dequantised weights.
 *
 * A "unit" is the span one block header covers: 256 weights (8 blocks of 32) for the K-quants, 32 for the others.
 * Each unit of 4 weight rows is unpacked once (to bytes and per-half fp32 scales) and used by up to MCHUNK
 * activation rows. Each output is one accumulator over the blocks in order, with the same operations whatever M is
 * and whichever thread runs it, so a row's result never depends on the rest of the batch. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#define QK_K 256
#define MCHUNK 64
enum { T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14 };

/* A unit of one weight row: its weights as bytes (signed for Q4_0, Q5_0, Q8_0, Q6_K; unsigned otherwise), a scale
 * per 16 and an offset per 32. */
typedef struct {
    int8_t q[QK_K];
    float s[QK_K / 16];
    float mn[QK_K / 32];
} unit_t;

static inline float f16(const uint8_t *p) {
    const uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
#ifdef __F16C__
    return _cvtsh_ss(h);  /* exact, as the bit manipulation below */
#endif
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  /* subnormal: normalise */
            int e = -1;
            uint32_t m = man;
            do { e++; m <<= 1; } while ((m & 0x400) == 0);
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((m & 0x3FF) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static int64_t unit_weights(int64_t qtype) { return qtype == T_Q4_K || qtype == T_Q5_K || qtype == T_Q6_K ? QK_K : 32; }

static int64_t unit_bytes(int64_t qtype) {
    switch (qtype) {
        case T_Q4_0: return 18;
        case T_Q4_1: return 20;
        case T_Q5_0: return 22;
        case T_Q5_1: return 24;
        case T_Q8_0: return 34;
        case T_Q4_K: return 144;
        case T_Q5_K: return 176;
        case T_Q6_K: return 210;
        default: return 0;
    }
}

static int is_signed(int64_t qtype) {
    return qtype == T_Q4_0 || qtype == T_Q5_0 || qtype == T_Q8_0 || qtype == T_Q6_K;
}

static int has_offset(int64_t qtype) {
    return qtype == T_Q4_1 || qtype == T_Q5_1 || qtype == T_Q4_K || qtype == T_Q5_K;
}

/* The 6-bit (scale, min) of sub-block j of a Q4_K/Q5_K block (llama.cpp's get_scale_min_k4). */
static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Nibbles of 32 bytes: low -> lo[0..31], high -> hi[0..31]. */
static inline void nibbles32(const uint8_t *b, int8_t *lo, int8_t *hi) {
#ifdef __AVX2__
    const __m256i v = _mm256_loadu_si256((const __m256i *)b), mask = _mm256_set1_epi8(0x0F);
    _mm256_storeu_si256((__m256i *)lo, _mm256_and_si256(v, mask));
    _mm256_storeu_si256((__m256i *)hi, _mm256_and_si256(_mm256_srli_epi16(v, 4), mask));
#else
    for (int l = 0; l < 32; l++) { lo[l] = (int8_t)(b[l] & 0xF); hi[l] = (int8_t)(b[l] >> 4); }
#endif
}

/* One block of 32 with 4-bit q at qs (byte j: weight j low, j + 16 high) and, where qh is not NULL, bit 4 of weight j
 * in bit j of the little-endian u32 at qh; `bias` (8 for Q4_0, 16 for Q5_0, 0 for the offset formats) subtracted. */
static inline void unpack32(const uint8_t *qs, const uint8_t *qh, int bias, int8_t *q) {
    uint32_t high = 0;
    if (qh != NULL) memcpy(&high, qh, 4);
#ifdef __AVX2__
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0F);
    __m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    if (qh != NULL) {  /* byte j <- 0xFF where bit j of `high` is set (llama.cpp's bytes_from_bits_32), then bit 4 */
        const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
        __m256i bits = _mm256_shuffle_epi8(_mm256_set1_epi32((int)high), shuf);
        bits = _mm256_or_si256(bits, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
        bits = _mm256_cmpeq_epi8(bits, _mm256_set1_epi64x(-1));
        w = _mm256_or_si256(w, _mm256_and_si256(bits, _mm256_set1_epi8(0x10)));
    }
    _mm256_storeu_si256((__m256i *)q, _mm256_sub_epi8(w, _mm256_set1_epi8((char)bias)));
#else
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0xF) | (((high >> j) & 1) << 4)) - bias);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (((high >> (j + 16)) & 1) << 4)) - bias);
    }
#endif
}

static void unpack_unit(int64_t qtype, const uint8_t *b, unit_t *u) {
    switch (qtype) {
    case T_Q4_0:
    case T_Q5_0: {
        const float d = f16(b);
        if (qtype == T_Q4_0) unpack32(b + 2, NULL, 8, u->q);
        else unpack32(b + 6, b + 2, 16, u->q);
        u->s[0] = u->s[1] = d;
        u->mn[0] = 0.0f;
        break;
    }
    case T_Q5_1: {
        const float d = f16(b), m = f16(b + 2);
        unpack32(b + 8, b + 4, 0, u->q);
        u->s[0] = u->s[1] = d;
        u->mn[0] = -m;
        break;
    }
    case T_Q8_0: {
        const float d = f16(b);
        memcpy(u->q, b + 2, 32);
        u->s[0] = u->s[1] = d;
        u->mn[0] = 0.0f;
        break;
    }
    case T_Q4_1: {
        const float d = f16(b), m = f16(b + 2);
#ifdef __AVX2__
        const __m128i v = _mm_loadu_si128((const __m128i *)(b + 4)), m4 = _mm_set1_epi8(0x0F);
        _mm_storeu_si128((__m128i *)u->q, _mm_and_si128(v, m4));
        _mm_storeu_si128((__m128i *)(u->q + 16), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
#else
        for (int j = 0; j < 16; j++) { u->q[j] = (int8_t)(b[4 + j] & 0xF); u->q[j + 16] = (int8_t)(b[4 + j] >> 4); }
#endif
        u->s[0] = u->s[1] = d;
        u->mn[0] = -m;
        break;
    }
    case T_Q4_K:
    case T_Q5_K: {
        const float d = f16(b), dmin = f16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + (qtype == T_Q4_K ? 16 : 48);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            scale_min_k4(j, scales, &sc, &m);
            u->s[2 * j] = u->s[2 * j + 1] = d * (float)sc;
            u->mn[j] = dmin * (float)m;
        }
        for (int i = 0; i < 4; i++) nibbles32(qs + 32 * i, u->q + 64 * i, u->q + 64 * i + 32);
        if (qtype == T_Q5_K) {
#ifdef __AVX2__
            const __m256i h = _mm256_loadu_si256((const __m256i *)qh), one = _mm256_set1_epi8(1);
            for (int i = 0; i < 8; i++) {  /* bit i of qh[l] is bit 4 of weight 32i + l; bytes stay <= 16 */
                __m256i *dst = (__m256i *)(u->q + 32 * i);
                const __m256i bit = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, i), one), 4);
                _mm256_storeu_si256(dst, _mm256_or_si256(_mm256_loadu_si256(dst), bit));
            }
#else
            for (int i = 0; i < 4; i++)
                for (int l = 0; l < 32; l++) {
                    u->q[64 * i + l] = (int8_t)(u->q[64 * i + l] | (((qh[l] >> (2 * i)) & 1) << 4));
                    u->q[64 * i + 32 + l] = (int8_t)(u->q[64 * i + 32 + l] | (((qh[l] >> (2 * i + 1)) & 1) << 4));
                }
#endif
        }
        break;
    }
    case T_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = f16(b + 208);
        for (int h = 0; h < 2; h++) {
            const uint8_t *l0 = ql + 64 * h, *hh = qh + 32 * h;
            int8_t *o = u->q + 128 * h;
#ifdef __AVX2__
            const __m256i a = _mm256_loadu_si256((const __m256i *)l0), c = _mm256_loadu_si256((const __m256i *)(l0 + 32));
            const __m256i hv = _mm256_loadu_si256((const __m256i *)hh), m4 = _mm256_set1_epi8(0x0F);
            const __m256i m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
            const __m256i lows[4] = {_mm256_and_si256(a, m4), _mm256_and_si256(c, m4),
                                     _mm256_and_si256(_mm256_srli_epi16(a, 4), m4),
                                     _mm256_and_si256(_mm256_srli_epi16(c, 4), m4)};
            for (int k = 0; k < 4; k++) {
                const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2 * k), m2), 4);
                _mm256_storeu_si256((__m256i *)(o + 32 * k), _mm256_sub_epi8(_mm256_or_si256(lows[k], hi), k32));
            }
#else
            for (int l = 0; l < 32; l++) {
                o[l] = (int8_t)(((l0[l] & 0xF) | ((hh[l] & 3) << 4)) - 32);
                o[l + 32] = (int8_t)(((l0[l + 32] & 0xF) | (((hh[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = (int8_t)(((l0[l] >> 4) | (((hh[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = (int8_t)(((l0[l + 32] >> 4) | (((hh[l] >> 6) & 3) << 4)) - 32);
            }
#endif
        }
        for (int i = 0; i < 16; i++) u->s[i] = d * (float)sc[i];
        for (int j = 0; j < 8; j++) u->mn[j] = 0.0f;
        break;
    }
    default:
        break;
    }
}

#ifdef __AVX2__
/* Lanes 0-3 cover weights 0..15 of a block, lanes 4-7 weights 16..31 (dot_u8s8 sums 4 bytes per lane). */
static inline __m256 half_scales(const float *s, float dx) {
    return _mm256_mul_ps(_mm256_setr_ps(s[0], s[0], s[0], s[0], s[1], s[1], s[1], s[1]), _mm256_set1_ps(dx));
}
#endif

/* Outputs n .. n + nr - 1 (nr <= 4) for activation rows m0 .. m1 - 1. */
static void gguf_group(int64_t n, int nr, int64_t m0, int64_t m1, int64_t K, const uint8_t *w, int64_t qtype,
                       const int8_t *xq, const float *dx, const int32_t *xs, float *y, int64_t ys) {
    const int64_t uw = unit_weights(qtype), ub = unit_bytes(qtype), units = K / uw, row = units * ub, nb = K / QK;
    const int64_t bpu = uw / QK, sgn = is_signed(qtype);
    const int64_t rows = m1 - m0;
    unit_t un[4];
#ifdef __AVX2__
    __m256 acc[MCHUNK][4];
#else
    float acc[MCHUNK][4];
#endif
    float off[MCHUNK][4];
    for (int64_t m = 0; m < rows; m++)
        for (int r = 0; r < 4; r++) {
#ifdef __AVX2__
            acc[m][r] = _mm256_setzero_ps();
#else
            acc[m][r] = 0.0f;
#endif
            off[m][r] = 0.0f;
        }
    const int has_min = has_offset(qtype);
#ifdef __AVX2__
    __m256 hs[4][QK_K / 32];
    __m256i wabs[4][QK_K / 32];  /* signed formats: |q| once per unit (the product takes x's sign from q) */
#endif
    for (int64_t t = 0; t < units; t++) {
        for (int r = 0; r < nr; r++) {
            unpack_unit(qtype, w + (n + r) * row + t * ub, &un[r]);
#ifdef __AVX2__
            for (int64_t j = 0; j < bpu; j++) {
                hs[r][j] = half_scales(un[r].s + 2 * j, 1.0f);
                const __m256i wv = _mm256_loadu_si256((const __m256i *)(un[r].q + j * QK));
                wabs[r][j] = sgn ? _mm256_sign_epi8(wv, wv) : wv;
            }
#endif
        }
        for (int64_t m = 0; m < rows; m++) {
            const int64_t mm = m0 + m;
            for (int64_t j = 0; j < bpu; j++) {
                const int64_t b = t * bpu + j;
                const int8_t *xb = xq + mm * K + b * QK;
                const float sx = dx[mm * nb + b];
                const float sum = (float)xs[mm * nb + b];
#ifdef __AVX2__
                const __m256i x = _mm256_loadu_si256((const __m256i *)xb);
                const __m256 vsx = _mm256_set1_ps(sx);
#endif
                for (int r = 0; r < nr; r++) {
                    const int8_t *q = un[r].q + j * QK;
#ifdef __AVX2__
                    const __m256i p = sgn ? dot_u8s8(wabs[r][j], _mm256_sign_epi8(x, _mm256_loadu_si256((const __m256i *)q)))
                                          : dot_u8s8(wabs[r][j], x);
                    acc[m][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(hs[r][j], vsx), acc[m][r]);
#else
                    int32_t lo = 0, hi = 0;
                    for (int l = 0; l < 16; l++) lo += (int32_t)q[l] * xb[l];
                    for (int l = 16; l < 32; l++) hi += (int32_t)q[l] * xb[l];
                    acc[m][r] += (float)lo * (un[r].s[2 * j] * sx) + (float)hi * (un[r].s[2 * j + 1] * sx);
#endif
                    if (has_min) off[m][r] += un[r].mn[j] * sx * sum;
                }
            }
        }
    }
    for (int64_t m = 0; m < rows; m++)
        for (int r = 0; r < nr; r++) {
#ifdef __AVX2__
            y[(m0 + m) * ys + n + r] = hsum(acc[m][r]) - off[m][r];
#else
            y[(m0 + m) * ys + n + r] = acc[m][r] - off[m][r];
#endif
        }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
/* AVX-512 (`gguf_group_f32` on such CPUs): the 4 weight rows of a group are dequantised SEG weights at a time into
 * fp32 scratch (gguf-py's values s * q - mn, as above), and each segment serves the activation rows XB at a time
 * with XB x 4 accumulators held in registers (the scratch and the rows' segments stay in L1). Each output is 16
 * lanes accumulated over the row in order, then `_mm512_reduce_add_ps`: the same operations whatever M is. */
#define SEG 512
#define XB 6

/* The 32 weights of one Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 block at b dequantised to fp32 (the values `unpack_unit` and the
 * loop of `dequant_seg` give: s * q - mn), straight from the block's bytes. */
static inline void block32_f32(int64_t qtype, const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const float d = f16(b);
    float mn = 0.0f;
    __m128i lo, hi;
    if (qtype == T_Q8_0) {
        lo = _mm_loadu_si128((const __m128i *)(b + 2));
        hi = _mm_loadu_si128((const __m128i *)(b + 18));
    } else {
        const int offset = qtype == T_Q4_1 || qtype == T_Q5_1, five = qtype == T_Q5_0 || qtype == T_Q5_1;
        const __m128i v = _mm_loadu_si128((const __m128i *)(b + 2 + 2 * offset + 4 * five));
        lo = _mm_and_si128(v, m4);
        hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
        if (five) {  /* bit j of the u32 after the scales: bit 4 of weight j (added: the nibble is below 16) */
            uint32_t h;
            memcpy(&h, b + 2 + 2 * offset, 4);
            const __m128i bit = _mm_set1_epi8(0x10);
            lo = _mm_mask_add_epi8(lo, (__mmask16)(h & 0xFFFF), lo, bit);
            hi = _mm_mask_add_epi8(hi, (__mmask16)(h >> 16), hi, bit);
        }
        if (offset) {
            mn = -f16(b + 2);
        } else {
            const __m128i bias = _mm_set1_epi8(five ? 16 : 8);
            lo = _mm_sub_epi8(lo, bias);
            hi = _mm_sub_epi8(hi, bias);
        }
    }
    const __m512 vd = _mm512_set1_ps(d);
    *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), vd);
    *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), vd);
    if (qtype == T_Q4_1 || qtype == T_Q5_1) {
        *w0 = _mm512_sub_ps(*w0, _mm512_set1_ps(mn));
        *w1 = _mm512_sub_ps(*w1, _mm512_set1_ps(mn));
    }
}

/* Weights 16i .. 16i + 15 of an unpacked unit in fp32: s * q - mn. */
static inline __m512 unit16_f32(const unit_t *u, int64_t i, int has_min) {
    const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(u->q + 16 * i))));
    const __m512 v = _mm512_mul_ps(q, _mm512_set1_ps(u->s[i]));
    return has_min ? _mm512_sub_ps(v, _mm512_set1_ps(u->mn[i / 2])) : v;
}

static void dequant_seg(int64_t qtype, const uint8_t *row, int64_t k0, int64_t len, float *dst) {
    const int64_t uw = unit_weights(qtype), ub = unit_bytes(qtype);
    if (uw == QK) {
        for (int64_t t = k0 / QK; t < (k0 + len) / QK; t++) {
            __m512 w0, w1;
            block32_f32(qtype, row + t * ub, &w0, &w1);
            _mm512_store_ps(dst + (t * QK - k0), w0);
            _mm512_store_ps(dst + (t * QK - k0) + 16, w1);
        }
        return;
    }
    const int has_min = has_offset(qtype);
    unit_t u;
    for (int64_t t = k0 / uw; t < (k0 + len) / uw; t++) {
        unpack_unit(qtype, row + t * ub, &u);
        float *o = dst + (t * uw - k0);
        for (int64_t i = 0; i < uw / 16; i++) _mm512_store_ps(o + 16 * i, unit16_f32(&u, i, has_min));
    }
}

/* One activation row against a group's rows, the weights dequantised in registers (no scratch): the same values
 * and per-lane order as the segment path, so the same outputs. */
static void row_direct(int nr, int64_t K, const uint8_t *w, int64_t row, int64_t qtype, const float *x, __m512 *acc) {
    const int64_t uw = unit_weights(qtype), ub = unit_bytes(qtype);
    if (uw == QK) {
        for (int64_t t = 0; t < K / QK; t++) {
            const __m512 x0 = _mm512_loadu_ps(x + t * QK), x1 = _mm512_loadu_ps(x + t * QK + 16);
            for (int r = 0; r < nr; r++) {
                __m512 w0, w1;
                block32_f32(qtype, w + r * row + t * ub, &w0, &w1);
                acc[r] = _mm512_fmadd_ps(w1, x1, _mm512_fmadd_ps(w0, x0, acc[r]));
            }
        }
        return;
    }
    const int has_min = has_offset(qtype);
    unit_t u;
    for (int64_t t = 0; t < K / uw; t++)
        for (int r = 0; r < nr; r++) {
            unpack_unit(qtype, w + r * row + t * ub, &u);
            for (int64_t i = 0; i < uw / 16; i++)
                acc[r] = _mm512_fmadd_ps(unit16_f32(&u, i, has_min), _mm512_loadu_ps(x + t * uw + 16 * i), acc[r]);
        }
}

/* acc[m][r] += x rows m0 .. m0 + rows - 1 (rows <= XB; a compile-time count where inlined) times the 4 rows of wd
 * over len weights of the segment at k0. */
static inline __attribute__((always_inline)) void seg_block(int rows, int64_t m0, int64_t K, int64_t k0,
                                                            int64_t len, const float *x, const float (*wd)[SEG],
                                                            __m512 (*acc)[4]) {
    __m512 a[XB][4];
    for (int m = 0; m < rows; m++)
        for (int r = 0; r < 4; r++) a[m][r] = acc[m0 + m][r];
    for (int64_t i = 0; i < len; i += 16) {
        const __m512 w0 = _mm512_load_ps(wd[0] + i), w1 = _mm512_load_ps(wd[1] + i);
        const __m512 w2 = _mm512_load_ps(wd[2] + i), w3 = _mm512_load_ps(wd[3] + i);
        for (int m = 0; m < rows; m++) {
            const __m512 xv = _mm512_loadu_ps(x + (m0 + m) * K + k0 + i);
            a[m][0] = _mm512_fmadd_ps(w0, xv, a[m][0]);
            a[m][1] = _mm512_fmadd_ps(w1, xv, a[m][1]);
            a[m][2] = _mm512_fmadd_ps(w2, xv, a[m][2]);
            a[m][3] = _mm512_fmadd_ps(w3, xv, a[m][3]);
        }
    }
    for (int m = 0; m < rows; m++)
        for (int r = 0; r < 4; r++) acc[m0 + m][r] = a[m][r];
}

static void gguf_group_f32_512(int64_t n, int nr, int64_t m0, int64_t m1, int64_t K, const uint8_t *w,
                               int64_t qtype, const float *x, float *y, int64_t ys, int64_t col) {
    const int64_t row = K / unit_weights(qtype) * unit_bytes(qtype), rows = m1 - m0;
    const float *xm = x + m0 * K;
    if (m0 == 0) {  /* the group two ahead, as the AVX2 kernel asks for it */
        const char *ahead = (const char *)(w + (n + 8) * row);
        for (int64_t off = 0; off < 4 * row; off += 64) __builtin_prefetch(ahead + off, 0, 0);
    }
    if (rows == 1) {
        __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        row_direct(nr, K, w + n * row, row, qtype, xm, a);
        for (int r = 0; r < nr; r++) y[m0 * ys + col + r] = _mm512_reduce_add_ps(a[r]);
        return;
    }
    _Alignas(64) float wd[4][SEG];
    __m512 acc[MCHUNK][4];
    for (int64_t m = 0; m < rows; m++)
        for (int r = 0; r < 4; r++) acc[m][r] = _mm512_setzero_ps();
    for (int r = nr; r < 4; r++) memset(wd[r], 0, sizeof wd[r]);  /* rows past N: zeros, never written out */
    for (int64_t k0 = 0; k0 < K; k0 += SEG) {
        const int64_t len = K - k0 < SEG ? K - k0 : SEG;
        for (int r = 0; r < nr; r++) dequant_seg(qtype, w + (n + r) * row, k0, len, wd[r]);
        int64_t m = 0;
        for (; m + XB <= rows; m += XB) seg_block(XB, m, K, k0, len, xm, wd, acc);
        switch (rows - m) {
            case 5: seg_block(5, m, K, k0, len, xm, wd, acc); break;
            case 4: seg_block(4, m, K, k0, len, xm, wd, acc); break;
            case 3: seg_block(3, m, K, k0, len, xm, wd, acc); break;
            case 2: seg_block(2, m, K, k0, len, xm, wd, acc); break;
            case 1: seg_block(1, m, K, k0, len, xm, wd, acc); break;
            default: break;
        }
    }
    for (int64_t m = 0; m < rows; m++)
        for (int r = 0; r < nr; r++) y[(m0 + m) * ys + col + r] = _mm512_reduce_add_ps(acc[m][r]);
}
#endif

/* fp32 activations: each unit of 4 weight rows is dequantised once into registers/L1 (w = s * q - mn, the values
 * gguf-py's dequantiser gives) and used by up to MCHUNK rows of x as it is, so y is x times exactly the file's
 * dequantised weights: 8 fp32 lanes per output accumulated over the row in order, then `hsum`: the same
 * operations whatever M is. */
#ifdef __AVX2__
static inline __m256 cvt8(const int8_t *q) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)));
}
#endif

static void gguf_group_f32(int64_t n, int nr, int64_t m0, int64_t m1, int64_t K, const uint8_t *w, int64_t qtype,
                           const float *x, float *y, int64_t ys, int64_t col) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    gguf_group_f32_512(n, nr, m0, m1, K, w, qtype, x, y, ys, col);
    return;
#endif
    const int64_t uw = unit_weights(qtype), ub = unit_bytes(qtype), units = K / uw, row = units * ub;
    const int64_t rows = m1 - m0, bpu = uw / QK;
    const int has_min = has_offset(qtype);
    (void)has_min;  /* the scalar path's */
    /* The rows of the group two ahead are asked for now, as `quant_group` does (a prefetch past the end of the
     * weights never faults); once per group: a batch's later chunks find them cached. */
    if (m0 == 0) {
        const char *ahead = (const char *)(w + (n + 8) * row);
        for (int64_t off = 0; off < 4 * row; off += 64) __builtin_prefetch(ahead + off, 0, 0);
    }
    unit_t un[4];
#ifdef __AVX2__
    __m256 acc[MCHUNK][4];
    for (int64_t m = 0; m < rows; m++)
        for (int r = 0; r < 4; r++) acc[m][r] = _mm256_setzero_ps();
#else
    float acc[MCHUNK][4] = {{0}};
#endif
#ifdef __AVX2__
    __m256 wq[4][QK_K / 8];  /* the unit's dequantised weights s * q - mn (gguf-py's values), for all rows of x */
#endif
    for (int64_t t = 0; t < units; t++) {
        for (int r = 0; r < nr; r++) {
            unpack_unit(qtype, w + (n + r) * row + t * ub, &un[r]);
#ifdef __AVX2__
            for (int64_t i = 0; i < uw / 8; i++)
                wq[r][i] = _mm256_sub_ps(_mm256_mul_ps(cvt8(un[r].q + 8 * i), _mm256_set1_ps(un[r].s[i / 2])),
                                         _mm256_set1_ps(un[r].mn[i / 4]));
#endif
        }
        for (int64_t m = 0; m < rows; m++) {
            const float *xm = x + (m0 + m) * K + t * uw;
            for (int64_t j = 0; j < bpu; j++) {
                const float *xb = xm + j * QK;
#ifdef __AVX2__
                const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8);
                const __m256 x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
                for (int r = 0; r < nr; r++) {
                    const __m256 *q = wq[r] + 4 * j;
                    __m256 a = _mm256_fmadd_ps(q[0], x0, acc[m][r]);
                    a = _mm256_fmadd_ps(q[1], x1, a);
                    a = _mm256_fmadd_ps(q[2], x2, a);
                    acc[m][r] = _mm256_fmadd_ps(q[3], x3, a);
                }
#else
                float xsum = 0.0f;
                for (int l = 0; l < QK; l++) xsum += xb[l];
                for (int r = 0; r < nr; r++) {
                    const int8_t *q = un[r].q + j * QK;
                    float lo = 0.0f, hi = 0.0f;
                    for (int l = 0; l < 16; l++) lo += (float)q[l] * xb[l];
                    for (int l = 16; l < 32; l++) hi += (float)q[l] * xb[l];
                    acc[m][r] += lo * un[r].s[2 * j] + hi * un[r].s[2 * j + 1] - (has_min ? xsum * un[r].mn[j] : 0.0f);
                }
#endif
            }
        }
    }
    for (int64_t m = 0; m < rows; m++)
        for (int r = 0; r < nr; r++) {
#ifdef __AVX2__
            y[(m0 + m) * ys + col + r] = hsum(acc[m][r]);
#else
            y[(m0 + m) * ys + col + r] = acc[m][r];
#endif
        }
}

/* The fused decoder's group (llama_decode.c): outputs n .. n + 3 (fewer at the end of N) of all M rows with fp32
 * activations, written to out[m * os + r]; the values `gguf_matmul` gives without `round_x`. */
void gguf_group_rows(int64_t n, int64_t M, int64_t K, int64_t N, const uint8_t *w, int64_t qtype, const float *x,
                     float *out, int64_t os) {
    const int nr = (int)(N - n < 4 ? N - n : 4);
    for (int64_t m0 = 0; m0 < M; m0 += MCHUNK)
        gguf_group_f32(n, nr, m0, m0 + MCHUNK < M ? m0 + MCHUNK : M, K, w, qtype, x, out, os, 0);
}

void gguf_matmul(const float *x, int64_t M, int64_t K, const uint8_t *w, int64_t qtype, int64_t N, float *y,
                 int64_t ys, int64_t round_x) {
    if (unit_bytes(qtype) == 0 || K % unit_weights(qtype) != 0) return;
    const int64_t nb = K / QK, groups = (N + 3) / 4, chunks = (M + MCHUNK - 1) / MCHUNK;
    if (!round_x) {
#pragma omp parallel for schedule(guided, 4) collapse(2) if (N * K * M >= 65536)
        for (int64_t c = 0; c < chunks; c++)
            for (int64_t g = 0; g < groups; g++) {
                const int64_t m0 = c * MCHUNK, m1 = m0 + MCHUNK < M ? m0 + MCHUNK : M;
                const int nr = (int)(N - 4 * g < 4 ? N - 4 * g : 4);
                gguf_group_f32(4 * g, nr, m0, m1, K, w, qtype, x, y, ys, 4 * g);
            }
        return;
    }
    int8_t *xq = (int8_t *)malloc((size_t)(M * K));
    float *dx = (float *)malloc(sizeof(float) * (size_t)(M * nb));
    int32_t *xs = (int32_t *)malloc(sizeof(int32_t) * (size_t)(M * nb));
    if (xq != NULL && dx != NULL && xs != NULL) {
#pragma omp parallel if (N * K * M >= 65536)
        {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) quantize_rows(x + m * K, 1, K, xq + m * K, dx + m * nb, xs + m * nb);
#pragma omp for schedule(guided, 4) collapse(2)
            for (int64_t c = 0; c < chunks; c++)
                for (int64_t g = 0; g < groups; g++) {
                    const int64_t m0 = c * MCHUNK, m1 = m0 + MCHUNK < M ? m0 + MCHUNK : M;
                    const int nr = (int)(N - 4 * g < 4 ? N - 4 * g : 4);
                    gguf_group(4 * g, nr, m0, m1, K, w, qtype, xq, dx, xs, y, ys);
                }
        }
    }
    free(xq);
    free(dx);
    free(xs);
}

/* Recipe's native CPU kernels (built on first use by engine/kernels/native.py; called through ctypes).
 *
 * - Block-quantised matrix products y[M, N] = x[M, K] @ W[N, K]^T (activations rounded to Q8_0 blocks,
 *   integer block dot products, fp32 accumulation):
 *     q8_0: blocks of 32 weights, int8 q and one fp32 scale d per block, w = d * q;
 *     q4_1: blocks of 32 weights, 4-bit q (byte j of a block holds q[j] low, q[j + 16] high) and fp32 d, m,
 *           w = d * q + m.
 *   Each output y[m, n] is computed by the same sequence of operations whatever M is and whichever thread
 *   runs it, so a row's result never depends on the other rows of the batch.
 * - Paged decode attention: one query token per sequence over its K/V read in place through its block table
 *   (no gathered copy), per (sequence, KV head), in chunks of ATT_CHUNK tokens from the sequence's start (each a
 *   partial softmax: maximum, normaliser, unnormalised output) merged in order, again independent of the batch.
 * Threads: OpenMP, linked to the same libgomp as torch so that torch.set_num_threads governs both.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#ifndef PREFETCH_GROUPS
#define PREFETCH_GROUPS 2
#endif
#ifdef __AVX2__
#include <immintrin.h>
#endif

/* Activations are quantised per row in blocks of 32 as llama.cpp does (Q8_0: d = max|x| / 127,
 * q = round-half-even(x * (1 / d))), so that each block's product is an exact integer dot product:
 *   q8_0: y += (dw * dx) * sum(qw * qx)
 *   q4_1: y += (dw * dx) * sum(qw * qx) + (mw * dx) * sum(qx)
 * The torch reference (`engine/layers/block_quant_linear.py`) computes the same values in another order. */
void quantize_rows(const float *x, int64_t M, int64_t K, int8_t *xq, float *dx, int32_t *xs) {
    const int64_t nb = K / QK;
    for (int64_t i = 0; i < M * nb; i++) {
        const float *xb = x + i * QK;
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fabsf(xb[j]) > amax ? fabsf(xb[j]) : amax;
        const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < QK; j++) {
            int32_t v = (int32_t)nearbyintf(xb[j] * id);
            v = v > 127 ? 127 : (v < -127 ? -127 : v);
            xq[i * QK + j] = (int8_t)v;
            sum += v;
        }
        dx[i] = d;
        xs[i] = sum;
    }
}

#ifdef __AVX2__
/* The 32 4-bit q of one q4_1 block as bytes: q[0..15] (low nibbles) in the low 128 bits, q[16..31] above. */
static inline __m256i unpack_q4(const uint8_t *w) {
    const __m256i both = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)w));
    return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

#endif

/* sum(qw * qx) over one block: qw unsigned (q4_1) or signed (q8_0) bytes, qx signed bytes. */
static inline int32_t block_dot_scalar(const int8_t *w8, const uint8_t *w4, const int8_t *x) {
    int32_t s = 0;
    if (w8 != NULL)
        for (int j = 0; j < QK; j++) s += (int32_t)w8[j] * x[j];
    else
        for (int j = 0; j < QK / 2; j++) s += (int32_t)(w4[j] & 0x0F) * x[j] + (int32_t)(w4[j] >> 4) * x[j + QK / 2];
    return s;
}

/* y[r] for one activation row against weight rows r < nr (nr is a literal at each call, so the loops unroll);
 * w8 (q8_0) or w4 + mn (q4_1), rows `wrow` bytes apart. Each output is one accumulator over the blocks in
 * order: the same operations whatever nr, M or the thread. */
static inline __attribute__((always_inline)) void rows_dot(
        const int nr, const int8_t *w8, const uint8_t *w4, int64_t wrow, const float *dw, const float *mn,
        const int8_t *xq, const float *dx, const int32_t *xs, int64_t nb, float *y) {
#ifdef __AVX2__
    __m256 acc[4];
    float off[4];
    for (int r = 0; r < nr; r++) { acc[r] = _mm256_setzero_ps(); off[r] = 0.0f; }
    for (int64_t b = 0; b < nb; b++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + b * QK));
        const float sx = dx[b];
        for (int r = 0; r < nr; r++) {
            __m256i p;
            if (w8 != NULL) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(w8 + r * wrow + b * QK));
                p = dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
            } else {
                p = dot_u8s8(unpack_q4(w4 + r * wrow + b * (QK / 2)), x);
            }
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                                     _mm256_set1_ps(dw[r * nb + b] * sx), acc[r]);
            if (mn != NULL) off[r] += mn[r * nb + b] * sx * (float)xs[b];
        }
    }
    for (int r = 0; r < nr; r++) y[r] = hsum(acc[r]) + off[r];
#else
    for (int r = 0; r < nr; r++) {
        float acc = 0.0f, off = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            int32_t s = block_dot_scalar(w8 ? w8 + r * wrow + b * QK : NULL, w4 ? w4 + r * wrow + b * (QK / 2) : NULL,
                                         xq + b * QK);
            acc += (dw[r * nb + b] * dx[b]) * (float)s;
            if (mn != NULL) off += mn[r * nb + b] * dx[b] * (float)xs[b];
        }
        y[r] = acc + off;
    }
#endif
}

#ifdef __AVX2__
/* y[m, r] for MT activation rows m (xq, dx, xs of row m at m * K, m * nb, m * nb) against 4 weight rows r, outputs
 * ystride apart: `rows_dot(4, ...)` for each m with every weight block unpacked once for the MT rows instead of
 * once per row. Each output is the same accumulator over the blocks in order, with the same operations, so the
 * values are bit for bit those of `rows_dot`. */
#define MT 4
static inline __attribute__((always_inline)) void rows_dot_tile(
        const int8_t *w8, const uint8_t *w4, int64_t wrow, const float *dw, const float *mn, const int8_t *xq,
        int64_t K, const float *dx, const int32_t *xs, int64_t nb, float *y, int64_t ystride) {
    __m256 acc[MT][4];
    __m128 off[4];  /* lane m: row m's minimum term (q4_1), the scalar path's sum with the same operations */
    for (int r = 0; r < 4; r++) {
        off[r] = _mm_setzero_ps();
        for (int m = 0; m < MT; m++) acc[m][r] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        __m256i w[4];
        for (int r = 0; r < 4; r++)
            w[r] = w8 != NULL ? _mm256_loadu_si256((const __m256i *)(w8 + r * wrow + b * QK))
                              : unpack_q4(w4 + r * wrow + b * (QK / 2));
        for (int m = 0; m < MT; m++) {
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + m * K + b * QK));
            const float sx = dx[m * nb + b];
            for (int r = 0; r < 4; r++) {
                const __m256i p = w8 != NULL ? dot_u8s8(_mm256_sign_epi8(w[r], w[r]), _mm256_sign_epi8(x, w[r]))
                                             : dot_u8s8(w[r], x);
                acc[m][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[r * nb + b] * sx), acc[m][r]);
            }
        }
        if (mn != NULL) {
            const __m128 sx = _mm_set_ps(dx[3 * nb + b], dx[2 * nb + b], dx[nb + b], dx[b]);
            const __m128 sums = _mm_cvtepi32_ps(_mm_set_epi32(xs[3 * nb + b], xs[2 * nb + b], xs[nb + b], xs[b]));
            for (int r = 0; r < 4; r++)
                off[r] = _mm_add_ps(off[r], _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(mn[r * nb + b]), sx), sums));
        }
    }
    for (int r = 0; r < 4; r++) {
        float o[4];
        _mm_storeu_ps(o, off[r]);
        for (int m = 0; m < MT; m++) y[m * ystride + r] = hsum(acc[m][r]) + o[m];
    }
}
#endif

/* Outputs n .. n + 3 (fewer at the end of N) of every activation row m < M against weight rows n..n+3, written
 * to y[m * ys + r]: the block-quantised product of one group of 4 weight rows (shared by `quant_matmul` and the
 * fused decoder). */
void quant_group(int64_t n, int64_t M, int64_t K, int64_t N, const int8_t *w8, const uint8_t *w4,
                 const float *d, const float *mn, const int8_t *xq, const float *dx, const int32_t *xs,
                 float *y, int64_t ys) {
    const int64_t nb = K / QK, wrow = w8 != NULL ? K : K / 2;
    const int8_t *a8 = w8 ? w8 + n * wrow : NULL;
    const uint8_t *a4 = w4 ? w4 + n * wrow : NULL;
    const float *an = mn ? mn + n * nb : NULL;
    /* The weights of the groups PREFETCH_GROUPS ahead are asked for now: the hardware prefetcher alone
     * leaves the product waiting on memory about half the time (measured 5 GB/s per thread vs 15 GB/s read). */
    if (n + 4 * (PREFETCH_GROUPS + 1) <= N) {
        const char *wa = (const char *)(w8 ? (const void *)(a8 + 4 * PREFETCH_GROUPS * wrow)
                                           : (const void *)(a4 + 4 * PREFETCH_GROUPS * wrow));
        for (int64_t off = 0; off < 4 * wrow; off += 64) __builtin_prefetch(wa + off, 0, 0);
        const char *da = (const char *)(d + (n + 4 * PREFETCH_GROUPS) * nb);
        for (int64_t off = 0; off < 4 * nb * 4; off += 64) __builtin_prefetch(da + off, 0, 0);
        if (mn != NULL) {
            const char *ma = (const char *)(mn + (n + 4 * PREFETCH_GROUPS) * nb);
            for (int64_t off = 0; off < 4 * nb * 4; off += 64) __builtin_prefetch(ma + off, 0, 0);
        }
    }
    int64_t m = 0;
#ifdef __AVX2__
    /* Whole tiles of MT activation rows share each unpacked weight block (batched decode; same values). */
    if (n + 4 <= N)
        for (; m + MT <= M; m += MT) {
            if (w8 != NULL) rows_dot_tile(a8, NULL, wrow, d + n * nb, NULL, xq + m * K, K, dx + m * nb, xs + m * nb,
                                          nb, y + m * ys, ys);
            else rows_dot_tile(NULL, a4, wrow, d + n * nb, an, xq + m * K, K, dx + m * nb, xs + m * nb, nb,
                               y + m * ys, ys);
        }
#endif
    for (; m < M; m++) {
        float out[4];
        const int8_t *xm = xq + m * K;
        if (n + 4 <= N) {
            if (w8 != NULL) rows_dot(4, a8, NULL, wrow, d + n * nb, NULL, xm, dx + m * nb, xs + m * nb, nb, out);
            else rows_dot(4, NULL, a4, wrow, d + n * nb, an, xm, dx + m * nb, xs + m * nb, nb, out);
            for (int r = 0; r < 4; r++) y[m * ys + r] = out[r];
        } else {
            for (int64_t r = 0; n + r < N; r++) {
                if (w8 != NULL) rows_dot(1, a8 + r * wrow, NULL, wrow, d + (n + r) * nb, NULL, xm, dx + m * nb,
                                         xs + m * nb, nb, out);
                else rows_dot(1, NULL, a4 + r * wrow, wrow, d + (n + r) * nb, an + r * nb, xm, dx + m * nb,
                              xs + m * nb, nb, out);
                y[m * ys + r] = out[0];
            }
        }
    }
}

static void quant_matmul(const float *x, int64_t M, int64_t K, const int8_t *w8, const uint8_t *w4, const float *d,
                         const float *mn, int64_t N, float *y) {
    const int64_t nb = K / QK, groups = (N + 3) / 4;
    int8_t *xq = (int8_t *)malloc((size_t)(M * K));
    float *dx = (float *)malloc(sizeof(float) * (size_t)(M * nb));
    int32_t *xs = (int32_t *)malloc(sizeof(int32_t) * (size_t)(M * nb));
    if (xq != NULL && dx != NULL && xs != NULL) {
#pragma omp parallel if (N * K * M >= 65536)
        {
#pragma omp for schedule(static)
            for (int64_t m = 0; m < M; m++) quantize_rows(x + m * K, 1, K, xq + m * K, dx + m * nb, xs + m * nb);
#pragma omp for schedule(guided, 8)  /* long contiguous runs first (the LM head: 1.15x as fast as chunks of 8) */
            for (int64_t g = 0; g < groups; g++) quant_group(g * 4, M, K, N, w8, w4, d, mn, xq, dx, xs, y + g * 4, N);
        }
    }
    free(xq);
    free(dx);
    free(xs);
}

void q8_0_matmul(const float *x, int64_t M, int64_t K, const int8_t *w, const float *d, int64_t N, float *y) {
    quant_matmul(x, M, K, w, NULL, d, NULL, N, y);
}

void q4_1_matmul(const float *x, int64_t M, int64_t K, const uint8_t *w, const float *d, const float *mn,
                 int64_t N, float *y) {
    quant_matmul(x, M, K, NULL, w, d, mn, N, y);
}

static inline float dot(const float *a, const float *b, int64_t n) {
#ifdef __AVX2__
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float s = hsum(acc);
#else
    float s = 0.0f;
    int64_t i = 0;
#endif
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static inline void axpy(float *y, float a, const float *x, int64_t n) {
    int64_t i = 0;
#ifdef __AVX2__
    __m256 va = _mm256_set1_ps(a);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
    for (; i < n; i++) y[i] += a * x[i];
}

#ifdef __AVX2__
/* e^x for each lane (Cephes' expf: x = n ln2 + r, a degree-6 polynomial in r, 2^n by exponent bits; within ~2 ulp
 * of expf on [-87, 88]; below that 0, as the softmax wants). */
static inline __m256 exp8(__m256 x) {
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
    const __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x), _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}
#endif

/* Partial attention of the `group` query heads qg [group, Dk] of KV head g over tokens t0 .. t1 - 1 (at most
 * ATT_CHUNK) of a sequence's blocks, read in place: into part [group * (Dv + 2)] the unnormalised output
 * o[j] = sum_t e^(s_jt - m_j) v_t, then m[j] = max_t s_jt and l[j] = sum_t e^(s_jt - m_j). A token's terms are the
 * same operations wherever its chunk runs: chunks start at fixed multiples of ATT_CHUNK of the sequence. */
void attend_chunk(const float *qg, const float *k, const float *v, const int64_t *table, int64_t t0, int64_t t1,
                  int64_t group, int64_t g, int64_t Dk, int64_t Dv, int64_t bs, int64_t k_token_stride,
                  int64_t k_head_stride, int64_t v_token_stride, int64_t v_head_stride, float scale, float *part) {
    const int64_t n = t1 - t0;
    float s[group * ATT_CHUNK];
    const float *vt[ATT_CHUNK];
    float *o = part, *m = part + group * Dv, *l = m + group;
    for (int64_t t = 0; t < n; t++) {
        const int64_t pos = t0 + t, slot = table[pos / bs] * bs + pos % bs;
        const float *kt = k + slot * k_token_stride + g * k_head_stride;
        vt[t] = v + slot * v_token_stride + g * v_head_stride;
        if (t + 2 < n) {  /* the next tokens' keys are elsewhere when a block ends */
            const int64_t p2 = pos + 2, s2 = table[p2 / bs] * bs + p2 % bs;
            const float *k2 = k + s2 * k_token_stride + g * k_head_stride;
            for (int64_t off = 0; off < Dk; off += 16) __builtin_prefetch(k2 + off, 0, 3);
        }
        for (int64_t j = 0; j < group; j++) s[j * ATT_CHUNK + t] = dot(qg + j * Dk, kt, Dk) * scale;
    }
    for (int64_t j = 0; j < group; j++) {
        float *sj = s + j * ATT_CHUNK, mx = -INFINITY;
        for (int64_t t = 0; t < n; t++) mx = sj[t] > mx ? sj[t] : mx;
        int64_t t = 0;
#ifdef __AVX2__
        const int64_t n8 = (n + 7) / 8 * 8;
        for (int64_t u = n; u < n8; u++) sj[u] = -INFINITY;  /* whole vectors: every token takes the same path */
        __m256 acc = _mm256_setzero_ps();
        const __m256 vm = _mm256_set1_ps(mx);
        for (; t < n8; t += 8) {
            const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sj + t), vm));
            _mm256_storeu_ps(sj + t, e);
            acc = _mm256_add_ps(acc, e);
        }
        l[j] = hsum(acc);
#else
        float total = 0.0f;
        for (; t < n; t++) { sj[t] = expf(sj[t] - mx); total += sj[t]; }
        l[j] = total;
#endif
        m[j] = mx;
        float *oj = o + j * Dv;
        int64_t d = 0;
#ifdef __AVX2__
        for (; d + 32 <= Dv; d += 32) {  /* four accumulators kept in registers over the chunk's tokens */
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
            for (int64_t u = 0; u < n; u++) {
                const __m256 p = _mm256_set1_ps(sj[u]);
                const float *x = vt[u] + d;
                a0 = _mm256_fmadd_ps(p, _mm256_loadu_ps(x), a0);
                a1 = _mm256_fmadd_ps(p, _mm256_loadu_ps(x + 8), a1);
                a2 = _mm256_fmadd_ps(p, _mm256_loadu_ps(x + 16), a2);
                a3 = _mm256_fmadd_ps(p, _mm256_loadu_ps(x + 24), a3);
            }
            _mm256_storeu_ps(oj + d, a0);
            _mm256_storeu_ps(oj + d + 8, a1);
            _mm256_storeu_ps(oj + d + 16, a2);
            _mm256_storeu_ps(oj + d + 24, a3);
        }
#endif
        for (; d < Dv; d++) {
            float a = 0.0f;
            for (int64_t u = 0; u < n; u++) a += sj[u] * vt[u][d];
            oj[d] = a;
        }
    }
}

/* o [group, Dv] from the parts of a sequence's chunks in order: each rescaled to the largest maximum, summed, and
 * divided by the summed normaliser. One chunk's part gives the same values as it would alone (e^0 = 1). */
void attend_merge(const float *parts, int64_t chunks, int64_t group, int64_t Dv, float *o) {
    const int64_t stride = group * (Dv + 2);
    for (int64_t j = 0; j < group; j++) {
        float mx = -INFINITY, total = 0.0f;
        for (int64_t c = 0; c < chunks; c++) {
            const float mc = parts[c * stride + group * Dv + j];
            mx = mc > mx ? mc : mx;
        }
        float *oj = o + j * Dv;
        memset(oj, 0, sizeof(float) * (size_t)Dv);
        for (int64_t c = 0; c < chunks; c++) {
            const float *p = parts + c * stride;
            const float w = expf(p[group * Dv + j] - mx);
            total += w * p[group * Dv + group + j];
            axpy(oj, w, p + j * Dv, Dv);
        }
        const float inv = 1.0f / total;
        for (int64_t d = 0; d < Dv; d++) oj[d] *= inv;
    }
}

/* One (sequence b, KV head g) item of paged decode attention: the `group` query heads qg [group, Dk] sharing KV
 * head g attend to the first L tokens of the sequence's blocks (`table`), read in place; o [group, Dv]. Chunk by
 * chunk, then merged: the values the fused step's chunk items give. */
void attend_item(const float *qg, const float *k, const float *v, const int64_t *table, int64_t L,
                 int64_t group, int64_t g, int64_t Dk, int64_t Dv, int64_t bs, int64_t k_token_stride,
                 int64_t k_head_stride, int64_t v_token_stride, int64_t v_head_stride, float scale, float *o) {
    const int64_t chunks = att_chunks(L);
    float *parts = (float *)malloc(sizeof(float) * (size_t)(chunks * group * (Dv + 2)));
    if (parts == NULL) return;
    for (int64_t c = 0; c < chunks; c++)
        attend_chunk(qg, k, v, table, c * ATT_CHUNK, att_chunk_end(c, L), group, g, Dk, Dv, bs, k_token_stride,
                     k_head_stride, v_token_stride, v_head_stride, scale, parts + c * group * (Dv + 2));
    attend_merge(parts, chunks, group, Dv, o);
    free(parts);
}

/* q [B, H, Dk] (contiguous), out [B, H, Dv]. Token t of sequence b lives in slot
 * tables[b * table_stride + t / bs] * bs + t % bs; its key for KV head g starts at
 * k + slot * k_token_stride + g * k_head_stride (likewise v). Query head h uses KV head h / (H / Hkv). */
void paged_decode_attention(const float *q, const float *k, const float *v, const int64_t *tables,
                            int64_t table_stride, const int64_t *context_lens, int64_t B, int64_t H, int64_t Hkv,
                            int64_t Dk, int64_t Dv, int64_t bs, int64_t k_token_stride, int64_t k_head_stride,
                            int64_t v_token_stride, int64_t v_head_stride, float scale, float *out) {
    const int64_t group = H / Hkv;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < B * Hkv; item++) {
        const int64_t b = item / Hkv, g = item % Hkv;
        attend_item(q + (b * H + g * group) * Dk, k, v, tables + b * table_stride, context_lens[b], group, g, Dk, Dv,
                    bs, k_token_stride, k_head_stride, v_token_stride, v_head_stride, scale,
                    out + (b * H + g * group) * Dv);
    }
}

/* RMSNorm of one row: out = x * (1 / sqrt(mean(x^2) + eps)) * w. */
void rms_norm_row(const float *xr, const float *w, int64_t H, float eps, float *o) {
    const float inv = 1.0f / sqrtf(dot(xr, xr, H) / (float)H + eps);
    int64_t i = 0;
#ifdef __AVX2__
    const __m256 vi = _mm256_set1_ps(inv);
    for (; i + 8 <= H; i += 8)
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), vi), _mm256_loadu_ps(w + i)));
#endif
    for (; i < H; i++) o[i] = xr[i] * inv * w[i];
}

float dot_f32(const float *a, const float *b, int64_t n) { return dot(a, b, n); }

/* RMSNorm of rows x[M, H], each row alone. */
void rms_norm(const float *x, const float *w, int64_t M, int64_t H, float eps, float *out) {
    for (int64_t m = 0; m < M; m++) rms_norm_row(x + m * H, w, H, eps, out + m * H);
}

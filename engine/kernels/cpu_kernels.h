/* What the fused decoder (llama_decode.c) shares with cpu_kernels.c. */
#ifndef RECIPE_CPU_KERNELS_H
#define RECIPE_CPU_KERNELS_H
#include <stdint.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#define QK 32

#ifdef __AVX2__
/* The sum of an accumulator's 8 lanes, in the one order every output of every kernel finishes with. */
static inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

/* Lane i (of 8) = sum of u[j] * s[j] over bytes j = 4i .. 4i + 3, u unsigned and s signed bytes: exact (no
 * saturation for the values used here: |s| <= 127, u <= 127), so both instruction sets give the same lanes. */
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}
#endif

/* Rows x[M, K] rounded to Q8_0 blocks: int8 q, scale d and sum(q) per block of 32. */
void quantize_rows(const float *x, int64_t M, int64_t K, int8_t *xq, float *dx, int32_t *xs);
/* y[m * ys + r] = output n + r (r < 4, fewer at the end of N) of every activation row m against weight rows
 * n..n+3, q8_0 (w8) or q4_1 (w4 + mn). */
void quant_group(int64_t n, int64_t M, int64_t K, int64_t N, const int8_t *w8, const uint8_t *w4, const float *d,
                 const float *mn, const int8_t *xq, const float *dx, const int32_t *xs, float *y, int64_t ys);
/* Decode attention splits each sequence's context into chunks of ATT_CHUNK tokens from its start: how many a
 * context of L tokens takes, and where chunk c of it ends. */
#define ATT_CHUNK 64
static inline int64_t att_chunks(int64_t L) { return (L + ATT_CHUNK - 1) / ATT_CHUNK; }
static inline int64_t att_chunk_end(int64_t c, int64_t L) { return (c + 1) * ATT_CHUNK < L ? (c + 1) * ATT_CHUNK : L; }
/* One chunk's partial attention [group * (Dv + 2)] and the merge of a sequence's parts in order. */
void attend_chunk(const float *qg, const float *k, const float *v, const int64_t *table, int64_t t0, int64_t t1,
                  int64_t group, int64_t g, int64_t Dk, int64_t Dv, int64_t bs, int64_t k_token_stride,
                  int64_t k_head_stride, int64_t v_token_stride, int64_t v_head_stride, float scale, float *part);
void attend_merge(const float *parts, int64_t chunks, int64_t group, int64_t Dv, float *o);
/* One (sequence, KV head) item of paged decode attention, as `paged_decode_attention` computes it. */
void attend_item(const float *qg, const float *k, const float *v, const int64_t *table, int64_t L, int64_t group,
                 int64_t g, int64_t Dk, int64_t Dv, int64_t bs, int64_t k_token_stride, int64_t k_head_stride,
                 int64_t v_token_stride, int64_t v_head_stride, float scale, float *o);
/* RMSNorm of one row, as `rms_norm` computes it. */
void rms_norm_row(const float *xr, const float *w, int64_t H, float eps, float *o);
float dot_f32(const float *a, const float *b, int64_t n);
/* y[m * ys + n] = x[m, :K] . W[n, :K] for W in one of GGUF's block formats (ggml type ids: 2 Q4_0, 3 Q4_1, 6 Q5_0,
 * 7 Q5_1, 8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K) as stored in the file, rows of whole blocks; x rounded to Q8_0 blocks
 * where `round_x`, else fp32 as given (gguf_kernels.c). */
void gguf_matmul(const float *x, int64_t M, int64_t K, const uint8_t *w, int64_t qtype, int64_t N, float *y,
                 int64_t ys, int64_t round_x);
/* Outputs n .. n + 3 (fewer at the end of N) of M rows of fp32 x against GGUF rows, to out[m * os + r]. */
void gguf_group_rows(int64_t n, int64_t M, int64_t K, int64_t N, const uint8_t *w, int64_t qtype, const float *x,
                     float *out, int64_t os);

#endif

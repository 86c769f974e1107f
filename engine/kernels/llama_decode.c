/* The fused decode step of a Llama-family model (engine/kernels/fused_llama.py): every decoder layer of a
 * decode-only batch in one call, inside one OpenMP parallel region, so that Python issues one call per step
 * instead of a dozen torch ops per layer.
 *
 * Per layer, for B rows of one new token each (the reference path's order of operations):
 *   h = rmsnorm(x, ln1); qkv = h @ Wqkv^T (+ b); RoPE (half-split) on the q and k heads; k, v written to the
 *   token's slot of the paged cache; attention of each row over its context read in place through its block
 *   table, in chunks of ATT_CHUNK tokens per KV head that the threads share, merged per row;
 *   x = x + att @ Wo^T (+ b); h = rmsnorm(x, ln2); [g, u] = h @ Wgu^T (+ b); x = x + (silu(g) * u) @ Wdown^T (+ b).
 * then the final norm. Linears are fp32, q8_0 or q4_1 (the q formats round activations to Q8_0 blocks, as
 * `quant_matmul` does), or a GGUF file's own blocks with fp32 activations, in parts of different formats. Every
 * output element is computed by the same operations whatever B is and whichever thread runs it, so a row's result
 * never depends on the rest of the batch.
 *
 * The threads meet only where a value needs every thread's part: after each linear and after attention (six
 * barriers a layer; a seventh merges the chunks where a row's context is longer than one). What is cheap and needed
 * whole by every thread (the norms, the activations' Q8_0 blocks) each thread computes itself into its own scratch;
 * RoPE and the KV write belong to the attention item of their KV head; residual additions happen where the linear's
 * outputs are written. A barrier costs both threads the slower one's tail and leaves memory idle meanwhile: against
 * the 10 (fp32) or 14 (q formats) of the plain order, SmolLM2's batch-1 decode call ran 1.07x (fp32) and 1.35x
 * (q4_1) as fast (quiet, call by call alternating). The threads meet at a spinning barrier of their own
 * (`team_wait`), and take the groups of a linear in guided runs: with both, the batch-1 call ran 1.22x (q4_1) and
 * 1.04x (fp32) as fast again, same outputs. */
#include <omp.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "cpu_kernels.h"

enum { FMT_F32 = 0, FMT_Q8_0 = 1, FMT_Q4_1 = 2, FMT_GGUF = 3 };

#define MAX_PARTS 3

/* Rows of a FMT_GGUF linear in one ggml block format: rows up to `end` (exclusive, counted over the whole linear),
 * from the previous part's end; the file's blocks at w. */
typedef struct {
    int64_t end, qtype;
    const uint8_t *w;
} GGUFPart;

typedef struct {
    int64_t fmt, n, k;  /* y[M, n] = x[M, k] @ W^T */
    const void *w;      /* fp32 [n, k] | int8 [n, k] (q8_0) | packed uint8 [n, k / 2] (q4_1) */
    const float *d;     /* q formats: scale per block of 32 [n, k / 32] */
    const float *m;     /* q4_1: minimum per block [n, k / 32] */
    const float *bias;  /* [n] or NULL */
    /* FMT_GGUF (fp32 activations, gguf_kernels.c): the rows as parts of one format each (a Q4_K_M file's q/k/v:
     * q, k in one format, v in another), each part but the last a whole number of groups of 4 rows */
    int64_t parts;
    GGUFPart part[MAX_PARTS];
} RLinear;

typedef struct {
    const float *ln1, *ln2;
    RLinear qkv, o, gate_up, down;
    float *k, *v;  /* this layer's caches, [num_blocks * block_size, kv_heads, head_dim] */
} RLayer;

typedef struct {
    int64_t num_layers, hidden, heads, kv_heads, head_dim, inter, block_size;
    float eps, scale;
    const RLayer *layers;
    const float *final_norm;  /* NULL: the output is the last layer's residual stream */
} RModel;

/* y[m * ys + r] = output n + r of fp32 weight rows n..n+3 (fewer at the end): one accumulator per output, in order.
 * Rows of x go two at a time where there are two (a verify step's positions, a decode batch): eight independent
 * accumulators, and each weight vector loaded serves both rows. The first pair's pass streams the group from memory
 * and prefetches rows n+4 and n+6 of the next group as the one-row loop does; without that a second SmolLM2 row cost
 * ~0.28 of a batch-1 step (~7 ms: the core waited on the weights, then computed), with it ~0.02-0.11 (probe steps
 * at contexts 32 and 600, alternating builds). Each output's operations are the same either way, so a row's result
 * never depends on the batch. */
static void f32_group(int64_t n, int64_t M, int64_t K, int64_t N, const float *w, const float *x, float *y, int64_t ys) {
    const int64_t nr = N - n < 4 ? N - n : 4;
    const float *w0 = w + n * K;
    int64_t m = 0;
    if (nr < 4) {
        for (; m < M; m++)
            for (int64_t r = 0; r < nr; r++) y[m * ys + r] = dot_f32(w0 + r * K, x + m * K, K);
        return;
    }
#if defined(__AVX2__) && !defined(__AVX512F__)
    for (; m + 2 <= M; m += 2) {
        const float *xa = x + m * K, *xb = xa + K;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 8 <= K; i += 8) {
            __m256 xva = _mm256_loadu_ps(xa + i), xvb = _mm256_loadu_ps(xb + i);
            if (m == 0) {
                _mm_prefetch((const char *)(w0 + 4 * K + i), _MM_HINT_T0);
                _mm_prefetch((const char *)(w0 + 6 * K + i), _MM_HINT_T0);
            }
            __m256 v0 = _mm256_loadu_ps(w0 + i), v1 = _mm256_loadu_ps(w0 + K + i);
            __m256 v2 = _mm256_loadu_ps(w0 + 2 * K + i), v3 = _mm256_loadu_ps(w0 + 3 * K + i);
            /* all six kept in registers: left to itself the compiler folds either the weight loads or the two rows'
             * loads into the multiply-adds (ten or twelve loads per eight multiply-adds, where six do; Zen 1 loads
             * one 256-bit vector a cycle). With the rows' loads folded, 32 SmolLM2 rows took 190.8 ms a step
             * (fp32, context 64, median of 16 in one process alternating builds), 153.2 ms kept in registers */
            __asm__("" : "+x"(v0), "+x"(v1), "+x"(v2), "+x"(v3), "+x"(xva), "+x"(xvb));
            a0 = _mm256_fmadd_ps(v0, xva, a0);
            b0 = _mm256_fmadd_ps(v0, xvb, b0);
            a1 = _mm256_fmadd_ps(v1, xva, a1);
            b1 = _mm256_fmadd_ps(v1, xvb, b1);
            a2 = _mm256_fmadd_ps(v2, xva, a2);
            b2 = _mm256_fmadd_ps(v2, xvb, b2);
            a3 = _mm256_fmadd_ps(v3, xva, a3);
            b3 = _mm256_fmadd_ps(v3, xvb, b3);
        }
        float s[4] = {hsum(a0), hsum(a1), hsum(a2), hsum(a3)}, t[4] = {hsum(b0), hsum(b1), hsum(b2), hsum(b3)};
        for (; i < K; i++)
            for (int r = 0; r < 4; r++) {
                s[r] += w0[r * K + i] * xa[i];
                t[r] += w0[r * K + i] * xb[i];
            }
        for (int r = 0; r < 4; r++) {
            y[m * ys + r] = s[r];
            y[(m + 1) * ys + r] = t[r];
        }
    }
#endif
    for (; m < M; m++) {
        const float *xm = x + m * K;
        int64_t i = 0;
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#ifdef __AVX512F__
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
        for (; i + 16 <= K; i += 16) {
            const __m512 xv = _mm512_loadu_ps(xm + i);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + i), xv, a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + K + i), xv, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + 2 * K + i), xv, a2);
            a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + 3 * K + i), xv, a3);
        }
        s[0] = _mm512_reduce_add_ps(a0);
        s[1] = _mm512_reduce_add_ps(a1);
        s[2] = _mm512_reduce_add_ps(a2);
        s[3] = _mm512_reduce_add_ps(a3);
#elif defined(__AVX2__)
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (; i + 8 <= K; i += 8) {
            const __m256 xv = _mm256_loadu_ps(xm + i);
            /* the next group's rows n+4 and n+6 (usually this thread's next group under the guided runs): the
             * hardware prefetcher follows the four streams but starts each new row cold. SmolLM2 fp32 batch 1,
             * quiet, alternating builds: 72% -> 75-76% of the read-bandwidth roofline with row n+4 alone; n+6 too
             * took a probe step from ~24.4 to ~23.2 ms (all four next rows, or the current rows further ahead,
             * measured worse in a C probe) */
            _mm_prefetch((const char *)(w0 + 4 * K + i), _MM_HINT_T0);
            _mm_prefetch((const char *)(w0 + 6 * K + i), _MM_HINT_T0);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), xv, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + K + i), xv, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + 2 * K + i), xv, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + 3 * K + i), xv, a3);
        }
        s[0] = hsum(a0);
        s[1] = hsum(a1);
        s[2] = hsum(a2);
        s[3] = hsum(a3);
#endif
        for (; i < K; i++)
            for (int r = 0; r < 4; r++) s[r] += w0[r * K + i] * xm[i];
        for (int r = 0; r < 4; r++) y[m * ys + r] = s[r];
    }
}

/* The team's meeting point: every thread waits, spinning, until all have arrived (sense reversal). OpenMP's
 * own barrier may put a waiting thread to sleep and wake it through the kernel, which costs more than the wait
 * itself at these sizes; past SPIN_LIMIT spins (~0.1 ms of pauses, far past the imbalance of one linear) a waiter
 * yields its core at every spin, so that on a machine with more runnable threads than cores the thread it waits
 * for gets the core instead of a spinner holding it for a whole time slice at each of a step's barriers. */
#define SPIN_LIMIT (1u << 11)
typedef struct {
    atomic_int count, sense;
    int threads;
} SpinBarrier;

static void team_wait(SpinBarrier *b, int *sense) {
    const int s = !*sense;
    *sense = s;
    if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) == b->threads - 1) {
        atomic_store_explicit(&b->count, 0, memory_order_relaxed);
        atomic_store_explicit(&b->sense, s, memory_order_release);
        return;
    }
    for (unsigned spins = 0; atomic_load_explicit(&b->sense, memory_order_acquire) != s; spins++) {
#ifdef __AVX2__
        _mm_pause();
#endif
        if (spins > SPIN_LIMIT) sched_yield();
    }
}

/* One thread's scratch: its own copy of a linear's input where each thread computes it (a norm's output), the
 * input's Q8_0 blocks (q formats), and one group's outputs before they are written. */
typedef struct {
    _Alignas(64) float *h;  /* each thread's struct on cache lines of its own: `sense` is written at every barrier */
    float *group;
    int8_t *xq;
    float *dx;
    int32_t *xs;
    SpinBarrier *team;  /* shared by the team */
    int sense;          /* this thread's side of `team_wait` */
} Scratch;

/* Rounds x [M, K] to Q8_0 blocks into this thread's scratch, where L's format needs it (no barrier: every thread
 * rounds the same rows the same way). */
static void prepare(const RLinear *L, const float *x, int64_t M, const Scratch *S) {
    if (L->fmt == FMT_Q8_0 || L->fmt == FMT_Q4_1) quantize_rows(x, M, L->k, S->xq, S->dx, S->xs);
}

/* Outputs n .. n + 3 of a FMT_GGUF linear (one part's rows: parts end on whole groups), as `gguf_group_rows`. */
static void gguf_part_group(const RLinear *L, int64_t n, int64_t M, const float *x, float *out, int64_t os) {
    int64_t p = 0, start = 0;
    while (p + 1 < L->parts && n >= L->part[p].end) start = L->part[p++].end;
    gguf_group_rows(n - start, M, L->k, L->part[p].end - start, L->part[p].w, L->part[p].qtype, x, out, os);
}

/* y = (res +) x @ W^T (+ bias) for M rows, the groups of 4 outputs work-shared by the threads of the enclosing
 * region (all of them call it, after `prepare`), with the barrier at its end. `res` may be y itself (the
 * residual stream updated in place: each output is read and written by the thread that computes it). */
static void linear(const RLinear *L, const float *x, int64_t M, float *y, const float *res, Scratch *S) {
    const int64_t K = L->k, N = L->n, groups = (N + 3) / 4;
    /* guided: each thread first takes long runs of contiguous groups (about half of what remains), then shorter
     * ones down to 8 for the balance at the end. Fixed chunks of 8 groups restarted the weight stream (and its
     * prefetch) every few kB. SmolLM2's batch-1 q4_1 call, call by call alternating, same outputs: guided ran
     * 1.07x as fast as fixed chunks of 24 (the best fixed size tried, itself 1.07x chunks of 8). */
#pragma omp for schedule(guided, 8) nowait
    for (int64_t g = 0; g < groups; g++) {
        const int64_t n = g * 4, nr = N - n < 4 ? N - n : 4;
        const int direct = L->bias == NULL && res == NULL;  /* outputs go straight to y */
        float *out = direct ? y + n : S->group;
        const int64_t os = direct ? N : 4;
        if (L->fmt == FMT_F32) f32_group(n, M, K, N, (const float *)L->w, x, out, os);
        else if (L->fmt == FMT_GGUF) gguf_part_group(L, n, M, x, out, os);
        else if (L->fmt == FMT_Q8_0)
            quant_group(n, M, K, N, (const int8_t *)L->w, NULL, L->d, NULL, S->xq, S->dx, S->xs, out, os);
        else quant_group(n, M, K, N, NULL, (const uint8_t *)L->w, L->d, L->m, S->xq, S->dx, S->xs, out, os);
        if (direct) continue;
        for (int64_t m = 0; m < M; m++)
            for (int64_t r = 0; r < nr; r++) {
                float v = S->group[m * 4 + r];
                if (L->bias != NULL) v = v + L->bias[n + r];
                y[m * N + n + r] = res != NULL ? res[m * N + n + r] + v : v;
            }
    }
    team_wait(S->team, &S->sense);
}

/* Scratch for `threads` threads of M rows of inputs up to `widest` features and norms of `hidden`; NULL when
 * memory could not be had. One block, freed with `free`. */
static Scratch *scratch_new(int threads, int64_t M, int64_t widest, int64_t hidden) {
    const int64_t nb = widest / QK + 1;
    const size_t per = sizeof(float) * (size_t)(M * hidden + M * 4 + 2 * M * nb) + (size_t)(M * widest) + 64;
    const size_t bytes = sizeof(Scratch) * (size_t)threads + sizeof(SpinBarrier) + per * (size_t)threads;
    Scratch *S = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (S == NULL) return NULL;
    SpinBarrier *team = (SpinBarrier *)(S + threads);
    atomic_init(&team->count, 0);
    atomic_init(&team->sense, 0);
    team->threads = threads;
    char *p = (char *)(team + 1);
    for (int t = 0; t < threads; t++) {
        S[t].team = team;
        S[t].sense = 0;
        S[t].h = (float *)p;
        S[t].group = S[t].h + M * hidden;
        S[t].dx = S[t].group + M * 4;
        S[t].xs = (int32_t *)(S[t].dx + M * nb);
        S[t].xq = (int8_t *)(S[t].xs + M * nb);
        p += per;
    }
    return S;
}

/* This thread's scratch in `S`, called by every thread on entering a parallel region: the team's barrier learns
 * how many threads the region has. */
static Scratch *team_member(Scratch *S) {
    Scratch *me = S + omp_get_thread_num();
#pragma omp single
    me->team->threads = omp_get_num_threads();
    return me;
}

/* y = x @ W^T (+ bias) for M rows of one linear, in a parallel region of its own: the LM head of the fused
 * step. Returns 0, or -1 when scratch memory could not be had (y is not written then). */
int fused_linear(const RLinear *L, const float *x, int64_t M, float *y) {
    const int threads = omp_get_max_threads();
    Scratch *S = scratch_new(threads, M, L->k, 0);
    if (S == NULL) return -1;
#pragma omp parallel num_threads(threads)
    {
        Scratch *mine = team_member(S);
        prepare(L, x, M, mine);
        linear(L, x, M, y, NULL, mine);
    }
    free(S);
    return 0;
}

/* Half-split rotation of one head: (a, b) = (x[i], x[i + D/2]) -> (a c - b s, b c + a s). */
static void rope_head(float *x, const float *c, const float *s, int64_t half) {
    for (int64_t i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
        x[i] = ac - bs;
        x[i + half] = bc + as;
    }
}

/* One step of B rows (one new token each) through every layer. x [B, hidden] (the embeddings; overwritten by
 * the residual stream), cos/sin [B, head_dim / 2], slots [B] (where each row's new K/V goes), tables
 * [B, table_stride] (block ids), context_lens [B] (this token included), out [B, hidden]. `shared`: rows may
 * read each other's new K/V (consecutive positions of one sequence, a speculative verify step or a short
 * prefill: each row's context ends at its own token), so every row's K/V is written before any row attends (one
 * barrier a layer more); 0: a decode batch of distinct sequences. Either way each row's values are computed by
 * the same operations. Returns 0, or -1 when scratch memory could not be had (nothing was written to the cache
 * then). */
int llama_decode(const RModel *md, int64_t B, float *x, const float *cos, const float *sin, const int64_t *slots,
                 const int64_t *tables, int64_t table_stride, const int64_t *context_lens, int64_t shared,
                 float *out) {
    const int64_t H = md->hidden, D = md->head_dim, nh = md->heads, nkv = md->kv_heads, I = md->inter;
    const int64_t qn = nh * D, kvn = nkv * D, qkvn = qn + 2 * kvn, half = D / 2, group = nh / nkv;
    const int64_t widest = H > qn ? (H > I ? H : I) : (qn > I ? qn : I);
    const int threads = omp_get_max_threads();
    float *qkv = malloc(sizeof(float) * (size_t)(B * qkvn)), *att = malloc(sizeof(float) * (size_t)(B * qn));
    float *gu = malloc(sizeof(float) * (size_t)(B * 2 * I)), *act = malloc(sizeof(float) * (size_t)(B * I));
    Scratch *S = scratch_new(threads, B, widest, H);
    int64_t total_chunks = 0, multi = 0;
    int64_t *first_chunk = malloc(sizeof(int64_t) * (size_t)B);
    for (int64_t b = 0; b < B && first_chunk != NULL; b++) {
        first_chunk[b] = total_chunks;
        total_chunks += att_chunks(context_lens[b]);
        multi |= att_chunks(context_lens[b]) > 1;
    }
    int64_t *chunk_row = malloc(sizeof(int64_t) * (size_t)(total_chunks + 1));
    float *parts = malloc(sizeof(float) * (size_t)(total_chunks * nkv * group * (D + 2)));
    for (int64_t b = 0; b < B && first_chunk != NULL && chunk_row != NULL; b++)
        for (int64_t c = 0; c < att_chunks(context_lens[b]); c++) chunk_row[first_chunk[b] + c] = b;
    int status = 0;
    if (!qkv || !att || !gu || !act || !S || !first_chunk || !chunk_row || !parts) {
        status = -1;
        goto done;
    }
#pragma omp parallel num_threads(threads)
    {
        Scratch *me = team_member(S);
        for (int64_t l = 0; l < md->num_layers; l++) {
            const RLayer *ly = md->layers + l;
            for (int64_t b = 0; b < B; b++) rms_norm_row(x + b * H, ly->ln1, H, md->eps, me->h + b * H);
            prepare(&ly->qkv, me->h, B, me);
            linear(&ly->qkv, me->h, B, qkv, NULL, me);
            if (shared) {  /* every row's K/V is in the cache before any row attends */
#pragma omp for schedule(static) nowait
                for (int64_t item = 0; item < B * nkv; item++) {
                    const int64_t b = item / nkv, g = item % nkv;
                    float *k = qkv + b * qkvn + qn + g * D, *v = k + kvn;
                    rope_head(k, cos + b * half, sin + b * half, half);
                    memcpy(ly->k + slots[b] * kvn + g * D, k, sizeof(float) * (size_t)D);
                    memcpy(ly->v + slots[b] * kvn + g * D, v, sizeof(float) * (size_t)D);
                }
                team_wait(me->team, &me->sense);
            }
            /* items of (chunk of a row's context, KV head); a row of one chunk finishes in its item, longer
             * ones are merged once all their chunks are done. One item per (row, KV head) over the whole context,
             * as before, left one thread idle at batch 1 (3 KV heads, 2 threads) and read each context serially:
             * SmolLM2 fp32 batch 1, probe steps, quiet: 51.5 -> 33.6 ms at context 2000, 32.3 -> 27.6 ms at 600;
             * 32 rows at context 300 266.8 -> 222.6 ms (with the chunk kernel's vector exp and register
             * accumulators). Items of (row, chunk) over every KV head, reading K/V rows whole, measured the same. */
#pragma omp for schedule(dynamic, 1) nowait
            for (int64_t item = 0; item < total_chunks * nkv; item++) {
                const int64_t ci = item / nkv, g = item % nkv, b = chunk_row[ci], c = ci - first_chunk[b];
                const int64_t nc = att_chunks(context_lens[b]);
                float *row = qkv + b * qkvn, *k = row + qn + g * D, *v = k + kvn, qr[group * D];
                /* each item rotates its own copy of the queries (a few hundred operations, the same values every
                 * time) rather than waiting at one more barrier for a shared rotation */
                memcpy(qr, row + g * group * D, sizeof(float) * (size_t)(group * D));
                for (int64_t j = 0; j < group; j++) rope_head(qr + j * D, cos + b * half, sin + b * half, half);
                if (!shared && c == nc - 1) {  /* the chunk holding the row's new token writes its K/V first */
                    rope_head(k, cos + b * half, sin + b * half, half);
                    memcpy(ly->k + slots[b] * kvn + g * D, k, sizeof(float) * (size_t)D);
                    memcpy(ly->v + slots[b] * kvn + g * D, v, sizeof(float) * (size_t)D);
                }
                float *part = parts + ((first_chunk[b] * nkv + g * nc + c) * group * (D + 2));
                attend_chunk(qr, ly->k, ly->v, tables + b * table_stride, c * ATT_CHUNK,
                             att_chunk_end(c, context_lens[b]), group, g, D, D, md->block_size, kvn, D, kvn, D,
                             md->scale, part);
                if (nc == 1) attend_merge(part, 1, group, D, att + b * qn + g * group * D);
            }
            team_wait(me->team, &me->sense);
            if (multi) {
#pragma omp for schedule(static) nowait
                for (int64_t item = 0; item < B * nkv; item++) {
                    const int64_t b = item / nkv, g = item % nkv, nc = att_chunks(context_lens[b]);
                    if (nc > 1)
                        attend_merge(parts + (first_chunk[b] * nkv + g * nc) * group * (D + 2), nc, group, D,
                                     att + b * qn + g * group * D);
                }
                team_wait(me->team, &me->sense);
            }
            prepare(&ly->o, att, B, me);
            linear(&ly->o, att, B, x, x, me);
            for (int64_t b = 0; b < B; b++) rms_norm_row(x + b * H, ly->ln2, H, md->eps, me->h + b * H);
            prepare(&ly->gate_up, me->h, B, me);
            linear(&ly->gate_up, me->h, B, gu, NULL, me);
            for (int64_t b = 0; b < B; b++) {
#pragma omp for schedule(static) nowait
                for (int64_t j = 0; j < I; j++) {
                    const float g = gu[b * 2 * I + j], silu = g / (1.0f + expf(-g));
                    act[b * I + j] = silu * gu[b * 2 * I + I + j];
                }
            }
            team_wait(me->team, &me->sense);
            prepare(&ly->down, act, B, me);
            linear(&ly->down, act, B, x, x, me);
        }
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; b++) {
            if (md->final_norm != NULL) rms_norm_row(x + b * H, md->final_norm, H, md->eps, out + b * H);
            else memcpy(out + b * H, x + b * H, sizeof(float) * (size_t)H);
        }
    }
done:
    free(first_chunk);
    free(chunk_row);
    free(parts);
    free(qkv);
    free(att);
    free(gu);
    free(act);
    free(S);
    return status;
}

/* A learned draft head (engine/speculative/draft_head.py) with Q8_0 linears, one chained position for M rows:
 *   x = fuse([h, e]) (+ b); x = x + down(silu(up(x))) (+ b); h_out = layer_norm(x) (affine);
 *   scores = lm @ h_out (the draft vocabulary's LM-head rows); tok = ids[argmax], p = its softmax probability.
 * The products are the `linear` of the fused step (the values of `Q8_0Linear`'s `q8_0_matmul`, bit for bit); as
 * torch modules the same head spent ~1 ms a position in Python and op dispatch around ~0.35 ms of products. */
typedef struct {
    int64_t hidden, inner;
    RLinear fuse, up, down, lm;
    const float *ln_w, *ln_b;
    float eps;
    const int64_t *ids;  /* lm row r scores token ids[r] */
} RDraftHead;

int draft_head_step(const RDraftHead *hd, int64_t M, const float *h, const float *e, float *h_out, float *p_out,
                    int64_t *tok_out) {
    const int64_t H = hd->hidden, I = hd->inner, V = hd->lm.n, widest = 2 * H > I ? 2 * H : I;
    const int threads = omp_get_max_threads();
    float *x = malloc(sizeof(float) * (size_t)(M * H)), *u = malloc(sizeof(float) * (size_t)(M * I));
    float *scores = malloc(sizeof(float) * (size_t)(M * V));
    Scratch *S = scratch_new(threads, M, widest, 2 * H);
    int status = 0;
    if (!x || !u || !scores || !S) {
        status = -1;
        goto done;
    }
#pragma omp parallel num_threads(threads)
    {
        Scratch *me = team_member(S);
        for (int64_t b = 0; b < M; b++) {  /* [h, e]: each thread its own copy, as the norms of the fused step */
            memcpy(me->h + b * 2 * H, h + b * H, sizeof(float) * (size_t)H);
            memcpy(me->h + b * 2 * H + H, e + b * H, sizeof(float) * (size_t)H);
        }
        prepare(&hd->fuse, me->h, M, me);
        linear(&hd->fuse, me->h, M, x, NULL, me);
        prepare(&hd->up, x, M, me);
        linear(&hd->up, x, M, u, NULL, me);
#pragma omp for schedule(static) nowait
        for (int64_t j = 0; j < M * I; j++) u[j] = u[j] / (1.0f + expf(-u[j]));
        team_wait(me->team, &me->sense);
        prepare(&hd->down, u, M, me);
        linear(&hd->down, u, M, x, x, me);
#pragma omp for schedule(static) nowait
        for (int64_t b = 0; b < M; b++) {
            const float *xr = x + b * H;
            float mean = 0.0f, var = 0.0f;
            for (int64_t i = 0; i < H; i++) mean += xr[i];
            mean /= (float)H;
            for (int64_t i = 0; i < H; i++) var += (xr[i] - mean) * (xr[i] - mean);
            const float rstd = 1.0f / sqrtf(var / (float)H + hd->eps);
            for (int64_t i = 0; i < H; i++) h_out[b * H + i] = (xr[i] - mean) * rstd * hd->ln_w[i] + hd->ln_b[i];
        }
        team_wait(me->team, &me->sense);
        prepare(&hd->lm, h_out, M, me);
        linear(&hd->lm, h_out, M, scores, NULL, me);
#pragma omp for schedule(static)
        for (int64_t b = 0; b < M; b++) {
            const float *s = scores + b * V;
            int64_t best = 0;
            for (int64_t r = 1; r < V; r++) best = s[r] > s[best] ? r : best;
            float total = 0.0f;
            for (int64_t r = 0; r < V; r++) total += expf(s[r] - s[best]);
            p_out[b] = 1.0f / total;
            tok_out[b] = hd->ids[best];
        }
    }
done:
    free(x);
    free(u);
    free(scores);
    free(S);
    return status;
}

/* The sampler's decode-step kernels in float32 (see cpu_kernels.py): row_matmul, rms_norm, decode_attention, and
 * decode_layer, which runs a whole decoder layer through them; and the learner's elementwise passes, forward and
 * backward (rms_norm_rows, rotary, silu_product_rows).
 *
 * row_matmul: y[M, N] = x[M, K] @ w[N, K]^T (+ bias[N]) for few rows of x. Each output is one dot product of a row of x with a row of w, accumulated in eight lanes along K and summed at
 * the end, so its value does not depend on M, N or how the work is split. A tile multiplies TILE_N rows of w by up
 * to TILE_M rows of x (12 accumulators, 3 weight registers, 1 for x: the 16 AVX2 registers). While rows of x pass
 * over a tile, the tile PREFETCH_TILES ahead is asked for, so reading the weights overlaps the arithmetic; with
 * several passes (more than TILE_M rows), pass p asks for cache lines p, p + passes, ... of it, so the requests
 * spread over all the tile's arithmetic instead of bunching in its first pass. Rows of x go in chunks of CHUNK_M,
 * so a chunk stays in the caches while the weights stream past it.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>

#define TILE_N 3
#define TILE_M 4
#define PREFETCH_TILES 2
#define CHUNK_M 64
#define LINE_FLOATS 16

static inline float horizontal_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lanes 0..count-1 of a masked load (the last, partial step of a K that is not a multiple of 8). */
static inline __m256i first_lanes(long count) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)count), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#define DEFINE_TILE(ROWS, COLS)                                                                                         \
    static void tile_##ROWS##_##COLS(const float* x, const float* w, const float* bias, float* y, long N, long K,    \
                                     const float* prefetch, long pass, long passes) {                                \
        __m256 acc[ROWS][COLS];                                                                                      \
        _Pragma("GCC unroll 8") for (int i = 0; i < ROWS; i++) _Pragma("GCC unroll 8") for (int j = 0; j < COLS; j++) \
            acc[i][j] = _mm256_setzero_ps();                                                                         \
        long k = 0, line = pass * LINE_FLOATS;                                                                       \
        for (; k + 8 <= K; k += 8) {                                                                                 \
            if (prefetch && k == line) {                                                                             \
                _Pragma("GCC unroll 8") for (int j = 0; j < COLS; j++)                                               \
                    _mm_prefetch((const char*)(prefetch + j * K + k), _MM_HINT_T0);                                   \
                line += passes * LINE_FLOATS;                                                                        \
            }                                                                                                        \
            __m256 wv[COLS];                                                                                         \
            _Pragma("GCC unroll 8") for (int j = 0; j < COLS; j++) wv[j] = _mm256_loadu_ps(w + j * K + k);           \
            _Pragma("GCC unroll 8") for (int i = 0; i < ROWS; i++) {                                                 \
                __m256 xv = _mm256_loadu_ps(x + i * K + k);                                                          \
                _Pragma("GCC unroll 8") for (int j = 0; j < COLS; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]); \
            }                                                                                                        \
        }                                                                                                            \
        if (k < K) {                                                                                                 \
            __m256i mask = first_lanes(K - k);                                                                       \
            __m256 wv[COLS];                                                                                         \
            _Pragma("GCC unroll 8") for (int j = 0; j < COLS; j++) wv[j] = _mm256_maskload_ps(w + j * K + k, mask);  \
            _Pragma("GCC unroll 8") for (int i = 0; i < ROWS; i++) {                                                 \
                __m256 xv = _mm256_maskload_ps(x + i * K + k, mask);                                                 \
                _Pragma("GCC unroll 8") for (int j = 0; j < COLS; j++) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]); \
            }                                                                                                        \
        }                                                                                                            \
        _Pragma("GCC unroll 8") for (int i = 0; i < ROWS; i++) _Pragma("GCC unroll 8") for (int j = 0; j < COLS; j++) \
            y[i * N + j] = horizontal_sum(acc[i][j]) + (bias ? bias[j] : 0.0f);                                      \
    }

DEFINE_TILE(1, 1)
DEFINE_TILE(2, 1)
DEFINE_TILE(3, 1)
DEFINE_TILE(4, 1)
DEFINE_TILE(1, 3)
DEFINE_TILE(2, 3)
DEFINE_TILE(3, 3)
DEFINE_TILE(4, 3)

typedef void (*tile_fn)(const float*, const float*, const float*, float*, long, long, const float*, long, long);
static const tile_fn TILES_ONE[TILE_M + 1] = {0, tile_1_1, tile_2_1, tile_3_1, tile_4_1};
static const tile_fn TILES_FULL[TILE_M + 1] = {0, tile_1_3, tile_2_3, tile_3_3, tile_4_3};

/* Weight rows n..n+cols-1 against rows 0..rows-1 of x (y and bias already offset to the chunk's first row / n). */
static void weight_rows(const float* x, const float* w, const float* bias, float* y, long rows, long N, long K, long n,
                        long cols, const float* prefetch) {
    const tile_fn* tiles = cols == TILE_N ? TILES_FULL : TILES_ONE;
    long passes = (rows + TILE_M - 1) / TILE_M;
    for (long m = 0; m < rows; m += TILE_M) {
        long count = rows - m < TILE_M ? rows - m : TILE_M;
        tiles[count](x + m * K, w + n * K, bias ? bias + n : 0, y + m * N + n, N, K, prefetch, m / TILE_M, passes);
    }
}

void row_matmul(const float* x, const float* w, const float* bias, float* y, long M, long N, long K, int threads) {
    long full_tiles = N / TILE_N, tiles = full_tiles + N % TILE_N;
#pragma omp parallel num_threads(threads)
    for (long m0 = 0; m0 < M; m0 += CHUNK_M) {
        long rows = M - m0 < CHUNK_M ? M - m0 : CHUNK_M;
#pragma omp for schedule(static)
        for (long t = 0; t < tiles; t++) {
            long n = t < full_tiles ? t * TILE_N : full_tiles * TILE_N + (t - full_tiles);
            long cols = t < full_tiles ? TILE_N : 1;
            long ahead = n + PREFETCH_TILES * TILE_N;
            const float* prefetch = cols == TILE_N && ahead + TILE_N <= N ? w + ahead * K : 0;
            weight_rows(x + m0 * K, w, bias, y + m0 * N, rows, N, K, n, cols, prefetch);
        }
    }
}

/* One row of rms_norm; returns its 1 / sqrt(mean(x^2) + eps). */
static inline float rms_row(const float* row, const float* weight, float* out, long K, float eps) {
    __m256 squares = _mm256_setzero_ps();
    long k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 v = _mm256_loadu_ps(row + k);
        squares = _mm256_fmadd_ps(v, v, squares);
    }
    float total = horizontal_sum(squares);
    for (; k < K; k++) total += row[k] * row[k];
    float inverse = 1.0f / sqrtf(total / (float)K + eps);
    __m256 scale = _mm256_set1_ps(inverse);
    for (k = 0; k + 8 <= K; k += 8)
        _mm256_storeu_ps(out + k, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(row + k), scale), _mm256_loadu_ps(weight + k)));
    for (; k < K; k++) out[k] = row[k] * inverse * weight[k];
    return inverse;
}

/* rms_norm: y[m] = x[m] / sqrt(mean(x^2) + eps) * weight, row by row (one thread: a decode step's rows are few). */
void rms_norm(const float* x, const float* weight, float* y, long M, long K, float eps) {
    for (long m = 0; m < M; m++) rms_row(x + m * K, weight, y + m * K, K, eps);
}

/* decode_attention: one query per row against the slots 0..length-1 of its keys and values, where `valid` marks real
 * tokens (the last slot, the query's own, always counts). q [B, H, D] and out [B, H, D] contiguous; keys and values
 * [B, H_kv, S, D] (S >= length); valid [B, S]. Query head h reads key head h / (H / H_kv). One pass over the slots
 * with a running maximum (softmax rescaled as it grows), each key and value read once for its group's query heads. */
/* MAX_GROUP and MAX_HEAD_DIM come from the build (cpu_kernels.py's ATTENTION_LIMITS, passed as -D flags). */
#if !defined(MAX_GROUP) || !defined(MAX_HEAD_DIM)
#error "build with -DMAX_GROUP=... -DMAX_HEAD_DIM=... (cpu_kernels.py passes ATTENTION_LIMITS)"
#endif
void decode_attention(const float* q, const float* keys, const float* values, const unsigned char* valid, float* out,
                      long B, long H, long H_kv, long S, long D, long length, float scale, int threads) {
    long group = H / H_kv;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long item = 0; item < B * H_kv; item++) {
        long b = item / H_kv, g = item % H_kv;
        const float* k_rows = keys + (b * H_kv + g) * S * D;
        const float* v_rows = values + (b * H_kv + g) * S * D;
        const float* queries = q + (b * H + g * group) * D;
        float best[MAX_GROUP], total[MAX_GROUP], acc[MAX_GROUP][MAX_HEAD_DIM];
        for (long h = 0; h < group; h++) {
            best[h] = -INFINITY;
            total[h] = 0.0f;
            for (long d = 0; d < D; d++) acc[h][d] = 0.0f;
        }
        for (long s = 0; s < length; s++) {
            if (!valid[b * S + s] && s != length - 1) continue;
            const float* key = k_rows + s * D;
            const float* value = v_rows + s * D;
            for (long h = 0; h < group; h++) {
                const float* query = queries + h * D;
                __m256 dot = _mm256_setzero_ps();
                long d = 0;
                for (; d + 8 <= D; d += 8) dot = _mm256_fmadd_ps(_mm256_loadu_ps(query + d), _mm256_loadu_ps(key + d), dot);
                float score = horizontal_sum(dot);
                for (; d < D; d++) score += query[d] * key[d];
                score *= scale;
                float weight;
                if (score > best[h]) {
                    float shrink = expf(best[h] - score);
                    total[h] *= shrink;
                    for (d = 0; d < D; d++) acc[h][d] *= shrink;
                    best[h] = score;
                    weight = 1.0f;
                } else {
                    weight = expf(score - best[h]);
                }
                total[h] += weight;
                for (d = 0; d < D; d++) acc[h][d] += weight * value[d];
            }
        }
        for (long h = 0; h < group; h++) {
            float* o = out + (b * H + g * group + h) * D;
            for (long d = 0; d < D; d++) o[d] = acc[h][d] / total[h];
        }
    }
}

/* exp over 8 lanes: 2^n * e^r with n = round(x / ln 2) and |r| <= ln 2 / 2 (ln 2 split in two for exactness), e^r
 * by Cephes' degree-6 polynomial for expf; within 2 ulp of expf over the float range (inputs clamped to it). */
static inline __m256 exp_lanes(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
}

/* out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i]. */
static void silu_product(const float* gate, const float* up, float* out, long count) {
    long i = 0;
    for (; i + 8 <= count; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 denominator = _mm256_add_ps(_mm256_set1_ps(1.0f), exp_lanes(_mm256_sub_ps(_mm256_setzero_ps(), g)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, denominator), _mm256_loadu_ps(up + i)));
    }
    for (; i < count; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* One head's rotary embedding, the halves turned as Llama's rotate_half: out1 = x1 c1 - x2 s1, out2 = x2 c2 + x1 s2. */
static inline void rotate_head(const float* x, float* out, const float* c, const float* s, long half) {
    for (long d = 0; d < half; d++) {
        float low = x[d] * c[d] - x[d + half] * s[d];
        float high = x[d + half] * c[d + half] + x[d] * s[d + half];
        out[d] = low;
        out[d + half] = high;
    }
}

/* decode_layer: one Llama decoder layer for one new token per row, in place on hidden [B, E]:
 *   hidden += o(attention(rotary(q), rotary(k) and v written into the caches at `slot`)) over rms_norm(hidden)
 *   hidden += down(silu(gate) * up) over rms_norm(hidden)
 * with q, k, v from one fused weight [(H + 2 H_kv) D, E] and gate, up from one [2 I, E] (biases may be NULL).
 * cos and sin [B, D] rotate the first and second halves of every head as rotate_half does. scratch holds
 * B x (2E + (3H + 2H_kv) D + 3I) floats. What the kernels above and Llama's ops compute one at a time (up to
 * rounding: exp by polynomial, rotary's products summed in another order), in one call instead of a dozen torch ops
 * and their Python. */
void decode_layer(float* hidden, long B, long E, const float* input_norm, const float* post_norm, float eps,
                  const float* w_qkv, const float* b_qkv, const float* w_o, const float* b_o, const float* w_gate_up,
                  const float* b_gate_up, const float* w_down, const float* b_down, long I, const float* cos,
                  const float* sin, float* keys, float* values, const unsigned char* valid, long H, long H_kv, long S,
                  long D, long slot, float scale, float* scratch, int threads) {
    long qkv_width = (H + 2 * H_kv) * D, half = D / 2;
    float* normed = scratch;
    float* qkv = normed + B * E;
    float* query = qkv + B * qkv_width;
    float* attended = query + B * H * D;
    float* gate_up = attended + B * H * D;
    float* activated = gate_up + B * 2 * I;
    float* projected = activated + B * I;

    rms_norm(hidden, input_norm, normed, B, E, eps);
    row_matmul(normed, w_qkv, b_qkv, qkv, B, qkv_width, E, threads);
    for (long b = 0; b < B; b++) {
        const float* c = cos + b * D;
        const float* s = sin + b * D;
        for (long h = 0; h < H + H_kv; h++) {
            const float* x = qkv + b * qkv_width + h * D;
            rotate_head(x, h < H ? query + (b * H + h) * D : keys + ((b * H_kv + h - H) * S + slot) * D, c, s, half);
        }
        for (long g = 0; g < H_kv; g++) {
            const float* v = qkv + b * qkv_width + (H + H_kv + g) * D;
            float* cached = values + ((b * H_kv + g) * S + slot) * D;
            for (long d = 0; d < D; d++) cached[d] = v[d];
        }
    }
    decode_attention(query, keys, values, valid, attended, B, H, H_kv, S, D, slot + 1, scale, threads);
    row_matmul(attended, w_o, b_o, projected, B, E, H * D, threads);
    for (long i = 0; i < B * E; i++) hidden[i] += projected[i];

    rms_norm(hidden, post_norm, normed, B, E, eps);
    row_matmul(normed, w_gate_up, b_gate_up, gate_up, B, 2 * I, E, threads);
    for (long b = 0; b < B; b++) silu_product(gate_up + b * 2 * I, gate_up + b * 2 * I + I, activated + b * I, I);
    row_matmul(activated, w_down, b_down, projected, B, E, I, threads);
    for (long i = 0; i < B * E; i++) hidden[i] += projected[i];
}

/* The learner's elementwise passes, forward and backward, rows (or elements) split over threads. */

/* rms_norm_rows: rms_norm, keeping each row's 1 / sqrt(mean(x^2) + eps) in inverse[M] for the backward. */
void rms_norm_rows(const float* x, const float* weight, float* y, float* inverse, long M, long K, float eps, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long m = 0; m < M; m++) inverse[m] = rms_row(x + m * K, weight, y + m * K, K, eps);
}

/* rms_norm_backward: with r = inverse[m] and g = grad * weight, d/dx of x r weight is r g - x r^3 mean(g x) (the
 * weight frozen). */
void rms_norm_backward(const float* grad, const float* x, const float* weight, const float* inverse, float* grad_x,
                       long M, long K, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long m = 0; m < M; m++) {
        const float* g = grad + m * K;
        const float* row = x + m * K;
        float* out = grad_x + m * K;
        __m256 dots = _mm256_setzero_ps();
        long k = 0;
        for (; k + 8 <= K; k += 8)
            dots = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(g + k), _mm256_loadu_ps(weight + k)), _mm256_loadu_ps(row + k), dots);
        float dot = horizontal_sum(dots);
        for (; k < K; k++) dot += g[k] * weight[k] * row[k];
        float r = inverse[m], c = r * r * r * dot / (float)K;
        __m256 rs = _mm256_set1_ps(r), cs = _mm256_set1_ps(c);
        for (k = 0; k + 8 <= K; k += 8) {
            __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(g + k), _mm256_loadu_ps(weight + k)), rs);
            _mm256_storeu_ps(out + k, _mm256_fnmadd_ps(cs, _mm256_loadu_ps(row + k), scaled));
        }
        for (; k < K; k++) out[k] = g[k] * weight[k] * r - c * row[k];
    }
}

/* rotary: Llama's rotary embedding of x [B, T, H, D] into out [B, H, T, D] (the layout attention reads):
 * out1 = x1 c1 - x2 s1, out2 = x2 c2 + x1 s2 over the halves of each head, cos and sin [B, T, D]. With `inverse`, its
 * backward: x is a gradient [B, H, T, D], out [B, T, H, D], and the rotation is transposed (x1 c1 + x2 s2,
 * x2 c2 - x1 s1). */
void rotary(const float* x, float* out, const float* cos, const float* sin, long B, long T, long H, long D, int inverse,
            int threads) {
    long half = D / 2;
#pragma omp parallel for collapse(2) num_threads(threads) schedule(static)
    for (long b = 0; b < B; b++)
        for (long t = 0; t < T; t++) {
            const float* c = cos + (b * T + t) * D;
            const float* s = sin + (b * T + t) * D;
            for (long h = 0; h < H; h++) {
                long token_major = ((b * T + t) * H + h) * D, head_major = ((b * H + h) * T + t) * D;
                const float* in = x + (inverse ? head_major : token_major);
                float* o = out + (inverse ? token_major : head_major);
                if (inverse)
                    for (long d = 0; d < half; d++) {
                        o[d] = in[d] * c[d] + in[d + half] * s[d + half];
                        o[d + half] = in[d + half] * c[d + half] - in[d] * s[d];
                    }
                else
                    rotate_head(in, o, c, s, half);
            }
        }
}

#define ELEMENTS_PER_TASK 4096

/* silu_product_rows: out = silu(gate) * up over `count` elements. */
void silu_product_rows(const float* gate, const float* up, float* out, long count, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long start = 0; start < count; start += ELEMENTS_PER_TASK) {
        long n = count - start < ELEMENTS_PER_TASK ? count - start : ELEMENTS_PER_TASK;
        silu_product(gate + start, up + start, out + start, n);
    }
}

/* silu_product_backward: with s = sigmoid(gate), d/dup = grad silu(gate) = grad gate s and
 * d/dgate = grad up s (1 + gate (1 - s)). */
void silu_product_backward(const float* grad, const float* gate, const float* up, float* grad_gate, float* grad_up,
                           long count, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long start = 0; start < count; start += ELEMENTS_PER_TASK) {
        long end = count - start < ELEMENTS_PER_TASK ? count : start + ELEMENTS_PER_TASK, i = start;
        __m256 one = _mm256_set1_ps(1.0f);
        for (; i + 8 <= end; i += 8) {
            __m256 g = _mm256_loadu_ps(gate + i), upstream = _mm256_loadu_ps(grad + i);
            __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp_lanes(_mm256_sub_ps(_mm256_setzero_ps(), g))));
            __m256 slope = _mm256_mul_ps(s, _mm256_fmadd_ps(g, _mm256_sub_ps(one, s), one));
            _mm256_storeu_ps(grad_up + i, _mm256_mul_ps(upstream, _mm256_mul_ps(g, s)));
            _mm256_storeu_ps(grad_gate + i, _mm256_mul_ps(_mm256_mul_ps(upstream, _mm256_loadu_ps(up + i)), slope));
        }
        for (; i < end; i++) {
            float s = 1.0f / (1.0f + expf(-gate[i]));
            grad_up[i] = grad[i] * gate[i] * s;
            grad_gate[i] = grad[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
        }
    }
}

/* log_sum_exp_rows: out[m] = log(sum_v e^x[m, v]) over the rows of x [M, V], shifted by each row's maximum (one pass
 * for the maximum, one for the sum; nothing written but out). */
void log_sum_exp_rows(const float* x, float* out, long M, long V, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long m = 0; m < M; m++) {
        const float* row = x + m * V;
        __m256 maxima = _mm256_set1_ps(-INFINITY);
        long v = 0;
        for (; v + 8 <= V; v += 8) maxima = _mm256_max_ps(maxima, _mm256_loadu_ps(row + v));
        float lanes[8], top = -INFINITY;
        _mm256_storeu_ps(lanes, maxima);
        for (int i = 0; i < 8; i++) top = lanes[i] > top ? lanes[i] : top;
        for (; v < V; v++) top = row[v] > top ? row[v] : top;
        __m256 shift = _mm256_set1_ps(top), sums = _mm256_setzero_ps();
        for (v = 0; v + 8 <= V; v += 8) sums = _mm256_add_ps(sums, exp_lanes(_mm256_sub_ps(_mm256_loadu_ps(row + v), shift)));
        float total = horizontal_sum(sums);
        for (; v < V; v++) total += expf(row[v] - top);
        out[m] = top + logf(total);
    }
}

/* target_logprob_gradient: the gradient of grad[m] (x[m, target[m]] - log_sum_exp(x[m])) for the logits x [M, V]:
 * out[m, v] = grad[m] ((v == target[m]) - e^(x[m, v] - lse[m])), in one pass. */
void target_logprob_gradient(const float* x, const float* lse, const float* grad, const long* targets, float* out,
                             long M, long V, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long m = 0; m < M; m++) {
        const float* row = x + m * V;
        float* o = out + m * V;
        __m256 shift = _mm256_set1_ps(lse[m]), scale = _mm256_set1_ps(-grad[m]);
        long v = 0;
        for (; v + 8 <= V; v += 8)
            _mm256_storeu_ps(o + v, _mm256_mul_ps(scale, exp_lanes(_mm256_sub_ps(_mm256_loadu_ps(row + v), shift))));
        for (; v < V; v++) o[v] = -grad[m] * expf(row[v] - lse[m]);
        o[targets[m]] += grad[m];
    }
}

/* y[M, N] = x[M, K] @ w[N, K]^T (+ bias[N]) in float32 for few rows of x (see row_matmul.py).
 *
 * Each output is one dot product of a row of x with a row of w, accumulated in eight lanes along K and summed at
 * the end, so its value does not depend on M, N or how the work is split. A tile multiplies TILE_N rows of w by up
 * to TILE_M rows of x (12 accumulators, 3 weight registers, 1 for x: the 16 AVX2 registers). While the first rows
 * of x pass over a tile, the tile PREFETCH_TILES ahead is asked for, so reading the weights overlaps the
 * arithmetic. Rows of x go in chunks of CHUNK_M, so a chunk stays in the caches while the weights stream past it.
 */
#include <immintrin.h>
#include <omp.h>

#define TILE_N 3
#define TILE_M 4
#define PREFETCH_TILES 2
#define CHUNK_M 64

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
                                     const float* prefetch) {                                                        \
        __m256 acc[ROWS][COLS];                                                                                      \
        _Pragma("GCC unroll 8") for (int i = 0; i < ROWS; i++) _Pragma("GCC unroll 8") for (int j = 0; j < COLS; j++) \
            acc[i][j] = _mm256_setzero_ps();                                                                         \
        long k = 0;                                                                                                  \
        for (; k + 8 <= K; k += 8) {                                                                                 \
            if (prefetch && (k & 15) == 0) {                                                                         \
                _Pragma("GCC unroll 8") for (int j = 0; j < COLS; j++)                                               \
                    _mm_prefetch((const char*)(prefetch + j * K + k), _MM_HINT_T0);                                   \
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

typedef void (*tile_fn)(const float*, const float*, const float*, float*, long, long, const float*);
static const tile_fn TILES_ONE[TILE_M + 1] = {0, tile_1_1, tile_2_1, tile_3_1, tile_4_1};
static const tile_fn TILES_FULL[TILE_M + 1] = {0, tile_1_3, tile_2_3, tile_3_3, tile_4_3};

/* Weight rows n..n+cols-1 against rows 0..rows-1 of x (y and bias already offset to the chunk's first row / n). */
static void weight_rows(const float* x, const float* w, const float* bias, float* y, long rows, long N, long K, long n,
                        long cols, const float* prefetch) {
    const tile_fn* tiles = cols == TILE_N ? TILES_FULL : TILES_ONE;
    for (long m = 0; m < rows; m += TILE_M) {
        long count = rows - m < TILE_M ? rows - m : TILE_M;
        tiles[count](x + m * K, w + n * K, bias ? bias + n : 0, y + m * N + n, N, K, m == 0 ? prefetch : 0);
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

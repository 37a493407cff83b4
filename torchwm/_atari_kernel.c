/* torchwm._atari_kernel: the fused Atari env's frame after the emulator, in one call.
 *
 * AtariPreprocessing (and torchwm's fused env) ends each step with two array
 * passes: the max over the last two screens, then OpenCV's INTER_AREA resize
 * to screen_size x screen_size. `max_area_resize` does both at once, without
 * the GIL, and gives exactly the bytes cv2.resize gives: it follows OpenCV's
 * area-resize arithmetic (imgproc/src/resize.cpp, resizeArea_ for uchar:
 * float weights from the same table, float accumulation in the same order,
 * rounding half to even at the end). It only handles what the fused env
 * needs and that path covers: shrinking uint8 images with 1 or 3 channels
 * where the scale is not a whole number on both axes (whole-number scales go
 * through OpenCV's integer "fast" path; the caller uses cv2 for those). The
 * resize has three paths, the best the CPU has picked at import (`_set_resize`
 * forces one; torchwm/atari_kernel.py reads the switch): AVX-512, where gray images
 * take 16 lanes at a time (the horizontal pass one destination column a lane,
 * its source pixels picked by a permute) and the vertical pass 16 columns;
 * AVX2, where gray images take 8 rows at a time in the horizontal pass (one
 * row a lane) and the vertical pass 8 columns; and SSE2, 4 gray rows at a time
 * (plain C on builds without SSE2). Every lane does the scalar arithmetic in
 * the scalar order.
 *
 * `palette_lookup` turns ALE's screen of palette indices into gray values
 * through a table the caller learns from ALE's own grayscale screens: what
 * ale.getScreenGrayscale does. Three paths, the best the CPU has picked at
 * import (`_set_lookup` forces one; torchwm/atari_kernel.py reads the switch):
 * AVX-512 VBMI (64 pixels an instruction), AVX2 (vpshufb on 16-entry rows of
 * the table), and a plain loop. `palette_max_area_resize` folds the lookup of
 * a step's last screen with the max-pool and the resize into one call.
 *
 * Built by setup.py as an optional extension: without a C compiler torchwm
 * installs without it and uses cv2 (torchwm/atari_kernel.py says which runs).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__GNUC__) && defined(__x86_64__)
#define HAVE_AVX512_PATHS 1
#include <immintrin.h>
#endif

/* One weight of the area table: destination index di takes alpha x source index si. */
typedef struct {
    int si, di;
    float alpha;
} Tap;

/* OpenCV's computeResizeAreaTab (for one channel): the source cells each destination cell covers,
 * with their share (a partial cell at each end). Same expressions, same double/float conversions. */
static int area_taps(int ssize, int dsize, double scale, Tap *tab)
{
    int k = 0;
    for (int dx = 0; dx < dsize; dx++) {
        double fsx1 = dx * scale;
        double fsx2 = fsx1 + scale;
        double cell_width = scale < ssize - fsx1 ? scale : ssize - fsx1;
        int sx1 = (int)ceil(fsx1), sx2 = (int)floor(fsx2);
        if (sx2 > ssize - 1)
            sx2 = ssize - 1;
        if (sx1 > sx2)
            sx1 = sx2;
        if (sx1 - fsx1 > 1e-3) {
            tab[k].di = dx;
            tab[k].si = sx1 - 1;
            tab[k++].alpha = (float)((sx1 - fsx1) / cell_width);
        }
        for (int sx = sx1; sx < sx2; sx++) {
            tab[k].di = dx;
            tab[k].si = sx;
            tab[k++].alpha = (float)(1.0 / cell_width);
        }
        if (fsx2 - sx2 > 1e-3) {
            double part = fsx2 - sx2 < 1.0 ? fsx2 - sx2 : 1.0;
            part = part < cell_width ? part : cell_width;
            tab[k].di = dx;
            tab[k].si = sx2;
            tab[k++].alpha = (float)(part / cell_width);
        }
    }
    return k;
}

/* saturate_cast<uchar>(float): round half to even (the default rounding mode), then clamp; with SSE2
 * the one instruction OpenCV's cvRound uses, since glibc's lrintf is a call per pixel. */
static inline uint8_t to_u8(float v)
{
#if defined(__SSE2__)
    int r = _mm_cvtss_si32(_mm_set_ss(v));
#else
    long r = lrintf(v);
#endif
    return (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
}

/* The horizontal pass of one source row `s` (sw x cn bytes) into `h` (dw x cn floats). Column dx's
 * taps are xtab[first[dx]] .. xtab[first[dx + 1] - 1], in OpenCV's order; each column sums in a
 * register from 0, which is what OpenCV's buf[di] += s[si] * alpha computes, term by term. */
static void row_pass(const uint8_t *s, const Tap *xtab, const int *first, int dw, int cn, float *h)
{
    for (int dx = 0; dx < dw; dx++)
        for (int ch = 0; ch < cn; ch++) {
            float acc = 0.f;
            for (int k = first[dx]; k < first[dx + 1]; k++)
                acc += (float)s[xtab[k].si * cn + ch] * xtab[k].alpha;
            h[dx * cn + ch] = acc;
        }
}

#if defined(__SSE2__)
/* row_pass for four gray rows at once: each SSE lane is one row and does exactly the scalar
 * arithmetic above (a multiply, then an add, per tap), so the four results are the same bytes;
 * what changes is that one instruction serves four rows. `lanes` holds sw x 4 floats. */
static void row_pass4(const uint8_t *const s[4], int sw, const Tap *xtab, const int *first, int dw,
                      float *lanes, float *const h[4])
{
    const __m128i zero = _mm_setzero_si128();
    int x = 0;
    for (; x + 16 <= sw; x += 16) { /* 16 pixels of each row, as floats, interleaved row by row */
        __m128i r[4];
        for (int i = 0; i < 4; i++)
            r[i] = _mm_loadu_si128((const __m128i *)(s[i] + x));
        /* a 4x16 byte transpose: afterwards each 32-bit group holds one pixel of the four rows */
        __m128i a = _mm_unpacklo_epi8(r[0], r[1]), b = _mm_unpackhi_epi8(r[0], r[1]);
        __m128i c = _mm_unpacklo_epi8(r[2], r[3]), d = _mm_unpackhi_epi8(r[2], r[3]);
        __m128i q[4] = {_mm_unpacklo_epi16(a, c), _mm_unpackhi_epi16(a, c), _mm_unpacklo_epi16(b, d),
                        _mm_unpackhi_epi16(b, d)};
        for (int i = 0; i < 4; i++) {
            __m128i lo = _mm_unpacklo_epi8(q[i], zero), hi = _mm_unpackhi_epi8(q[i], zero);
            float *o = lanes + 4 * (x + 4 * i);
            _mm_storeu_ps(o, _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, zero)));
            _mm_storeu_ps(o + 4, _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, zero)));
            _mm_storeu_ps(o + 8, _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, zero)));
            _mm_storeu_ps(o + 12, _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, zero)));
        }
    }
    for (; x < sw; x++)
        for (int i = 0; i < 4; i++)
            lanes[4 * x + i] = (float)s[i][x];
    for (int dx = 0; dx < dw; dx++) {
        __m128 acc = _mm_setzero_ps();
        for (int k = first[dx]; k < first[dx + 1]; k++)
            acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(lanes + 4 * xtab[k].si),
                                             _mm_set1_ps(xtab[k].alpha)));
        float v[4];
        _mm_storeu_ps(v, acc);
        h[0][dx] = v[0], h[1][dx] = v[1], h[2][dx] = v[2], h[3][dx] = v[3];
    }
}
#endif

/* d[x] = to_u8(sum[x]) for a whole row: with SSE2, 16 at a time (the same rounding, and packing
 * saturates to 0..255 as the clamp does). */
static void store_row(const float *sum, int n, uint8_t *d)
{
    int x = 0;
#if defined(__SSE2__)
    for (; x + 16 <= n; x += 16) {
        __m128i a = _mm_cvtps_epi32(_mm_loadu_ps(sum + x)), b = _mm_cvtps_epi32(_mm_loadu_ps(sum + x + 4));
        __m128i c = _mm_cvtps_epi32(_mm_loadu_ps(sum + x + 8));
        __m128i e = _mm_cvtps_epi32(_mm_loadu_ps(sum + x + 12));
        _mm_storeu_si128((__m128i *)(d + x), _mm_packus_epi16(_mm_packs_epi32(a, b), _mm_packs_epi32(c, e)));
    }
#endif
    for (; x < n; x++)
        d[x] = to_u8(sum[x]);
}

/* a[i] = max(a[i], b[i]) over n bytes, in place, as np.maximum(a, b, out=a): the fused env keeps the
 * pooled frame, which it pools again when an episode ends inside a frame skip. */
static void max_into(uint8_t *a, const uint8_t *b, size_t n)
{
    size_t i = 0;
#if defined(__SSE2__)
    for (; i + 16 <= n; i += 16)
        _mm_storeu_si128((__m128i *)(a + i), _mm_max_epu8(_mm_loadu_si128((const __m128i *)(a + i)),
                                                          _mm_loadu_si128((const __m128i *)(b + i))));
#endif
    for (; i < n; i++)
        a[i] = a[i] > b[i] ? a[i] : b[i];
}

/* The resize paths, best first, named as resize_path() and _set_resize name them. `resize_available` is set
 * at import from the CPU's flags; SSE2 is there on every x86-64, plain C on builds without SSE2. */
enum { RESIZE_AVX512, RESIZE_AVX2, RESIZE_SSE2, RESIZE_PLAIN, N_RESIZE_PATHS };
static const char *const resize_names[N_RESIZE_PATHS] = {"AVX-512", "AVX2", "SSE2", "plain C"};
static int resize_available[N_RESIZE_PATHS];
static int resize_current; /* set at import: the best available */

#if defined(HAVE_AVX512_PATHS)
static int cpu_has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
           && __builtin_cpu_supports("avx512vl");
}

/* Destination columns [start, start + count) whose taps all fall in the 32 source pixels from `base`:
 * one AVX-512 vector of 16 lanes, one column a lane. `slots` is the most taps a column of it has; a
 * column with fewer is padded with weight 0 at its end (acc + x * 0 is acc, so the sums do not change). */
typedef struct {
    int start, count, base, slots;
    size_t first_slot; /* its slots' index and weight vectors in `index` and `weight` (16 each a slot) */
} ColumnGroup;

/* Splits the columns into `ColumnGroup`s and fills their index and weight vectors; returns how many
 * groups, 0 when a column's taps span 32 pixels or more (a shrink by more than 31: the SSE pass then),
 * or -1 when memory ran out. */
static int column_groups(const Tap *xtab, const int *first, int dw, ColumnGroup **groups_out,
                         int32_t **index_out,
                         float **weight_out)
{
    ColumnGroup *groups = malloc(sizeof(ColumnGroup) * (size_t)dw);
    if (!groups)
        return -1;
    int n = 0;
    size_t slots = 0;
    for (int dx = 0; dx < dw;) {
        ColumnGroup g = {dx, 0, xtab[first[dx]].si, 0, slots};
        while (dx < dw && g.count < 16 && xtab[first[dx + 1] - 1].si - g.base < 32) {
            int taps = first[dx + 1] - first[dx];
            g.slots = taps > g.slots ? taps : g.slots;
            g.count++, dx++;
        }
        if (g.count == 0) { /* this column alone spans too much */
            free(groups);
            return 0;
        }
        slots += (size_t)g.slots;
        groups[n++] = g;
    }
    int32_t *index = calloc(slots * 16, sizeof(int32_t));
    float *weight = calloc(slots * 16, sizeof(float));
    if (!index || !weight) {
        free(groups), free(index), free(weight);
        return -1;
    }
    for (int i = 0; i < n; i++)
        for (int lane = 0; lane < groups[i].count; lane++) {
            int dx = groups[i].start + lane;
            for (int k = first[dx]; k < first[dx + 1]; k++) {
                size_t at = (groups[i].first_slot + (size_t)(k - first[dx])) * 16 + (size_t)lane;
                index[at] = xtab[k].si - groups[i].base;
                weight[at] = xtab[k].alpha;
            }
        }
    *groups_out = groups, *index_out = index, *weight_out = weight;
    return n;
}

/* row_pass for one gray row with AVX-512: the row as floats (`row` holds sw + 32 floats, zero past sw),
 * then per group of 16 columns, per tap slot, the 16 source pixels picked from a 32-float window by one
 * permute, multiplied, then added: each lane does the scalar arithmetic of its column, in its order. */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static void row_pass16(const uint8_t *s, int sw, const ColumnGroup *groups, int n, const int32_t *index,
                       const float *weight, float *row, float *h)
{
    int x = 0;
    for (; x + 16 <= sw; x += 16)
        _mm512_storeu_ps(row + x,
                         _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + x)))));
    if (x < sw) { /* the last pixels, without reading past the row */
        __m128i tail = _mm_maskz_loadu_epi8((__mmask16)((1u << (sw - x)) - 1), s + x);
        _mm512_mask_storeu_ps(row + x, (__mmask16)((1u << (sw - x)) - 1),
                              _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(tail)));
    }
    for (int i = 0; i < n; i++) {
        const ColumnGroup *g = &groups[i];
        __m512 lo = _mm512_loadu_ps(row + g->base), hi = _mm512_loadu_ps(row + g->base + 16);
        __m512 acc = _mm512_setzero_ps();
        const int32_t *idx = index + g->first_slot * 16;
        const float *w = weight + g->first_slot * 16;
        for (int t = 0; t < g->slots; t++) {
            __m512 v = _mm512_permutex2var_ps(lo, _mm512_loadu_si512(idx + 16 * t), hi);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(v, _mm512_loadu_ps(w + 16 * t)));
        }
        _mm512_mask_storeu_ps(h + g->start, (__mmask16)((1u << g->count) - 1), acc);
    }
}

/* OpenCV's vertical pass (below, in resize_area) with AVX-512: 16 destination columns at a time, their
 * sums kept in a register over all the vertical taps; the same products and sums per column, in the same
 * order, and the same rounding (round half to even, then clamped to 0..255). */
__attribute__((target("avx512f,avx512bw,avx512vl")))
static void vertical_pass16(const float *h, const Tap *ytab, int ytab_size, int out_len, uint8_t *out)
{
    for (int x = 0; x < out_len; x += 16) {
        __mmask16 mask = (__mmask16)(out_len - x >= 16 ? 0xFFFF : (1u << (out_len - x)) - 1);
        int prev_dy = ytab[0].di;
        __m512 sum = _mm512_setzero_ps();
        for (int j = 0; j < ytab_size; j++) {
            __m512 term = _mm512_mul_ps(_mm512_set1_ps(ytab[j].alpha),
                                        _mm512_maskz_loadu_ps(mask, h + (size_t)ytab[j].si * out_len + x));
            if (ytab[j].di != prev_dy) {
                __m512i rounded = _mm512_max_epi32(_mm512_cvtps_epi32(sum), _mm512_setzero_si512());
                _mm_mask_storeu_epi8(out + (size_t)prev_dy * out_len + x, mask,
                                     _mm512_cvtusepi32_epi8(rounded));
                sum = term;
                prev_dy = ytab[j].di;
            } else {
                sum = _mm512_add_ps(sum, term);
            }
        }
        __m512i rounded = _mm512_max_epi32(_mm512_cvtps_epi32(sum), _mm512_setzero_si512());
        _mm_mask_storeu_epi8(out + (size_t)prev_dy * out_len + x, mask, _mm512_cvtusepi32_epi8(rounded));
    }
}

/* The horizontal pass of a whole gray image with row_pass16; 0 when its columns do not fit (the caller
 * then takes the SSE pass), -1 when memory ran out. */
static int rows_pass16(const uint8_t *a, int sh, int sw, const Tap *xtab, const int *first, int dw, float *h)
{
    ColumnGroup *groups = NULL;
    int32_t *index = NULL;
    float *weight = NULL;
    int n = column_groups(xtab, first, dw, &groups, &index, &weight);
    if (n <= 0)
        return n;
    float *row = calloc((size_t)sw + 32, sizeof(float));
    if (!row) {
        free(groups), free(index), free(weight);
        return -1;
    }
    for (int sy = 0; sy < sh; sy++)
        row_pass16(a + (size_t)sy * sw, sw, groups, n, index, weight, row, h + (size_t)sy * dw);
    free(groups), free(index), free(weight), free(row);
    return 1;
}

/* Transposes 8 x 8 floats in place: m[i] lane j becomes m[j] lane i. Moves values only. */
__attribute__((target("avx2")))
static inline void transpose8(__m256 m[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) { /* pairs of rows interleaved, then groups of four */
        t[2 * i] = _mm256_unpacklo_ps(m[2 * i], m[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(m[2 * i], m[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) { /* the 128-bit halves: lanes 0-3 from u[i], lanes 4-7 from u[i + 4] */
        m[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        m[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* row_pass4 widened to eight gray rows with AVX2: each 32-bit lane is one row and does exactly the scalar
 * arithmetic (from 0, per tap in OpenCV's order a multiply then an add), so the eight results are the same
 * bytes. `lanes` holds sw x 8 floats. Eight columns run side by side on the taps rows_pass8 lays out, then
 * are transposed into the rows of h (the last block's columns past dw are not stored). */
__attribute__((target("avx2")))
static void row_pass8(const uint8_t *const s[8], int sw, int slots, const int32_t *offset,
                      const float *weight, int dw, float *lanes, float *const h[8])
{
    int x = 0;
    for (; x + 16 <= sw; x += 16) { /* 16 pixels of each row, as floats, interleaved row by row */
        __m128i r[8], b[8];
        for (int i = 0; i < 8; i++)
            r[i] = _mm_loadu_si128((const __m128i *)(s[i] + x));
        /* an 8x16 byte transpose: pairs of rows, then fours (c: pixels 4j..4j+3 of rows 0-3 and of 4-7),
         * then eights (d: pixels 4j, 4j + 1 and 4j + 2, 4j + 3, each in 8 bytes, one byte a row) */
        for (int i = 0; i < 4; i++) {
            b[2 * i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
            b[2 * i + 1] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
        }
        __m128i c[8] = {_mm_unpacklo_epi16(b[0], b[2]), _mm_unpackhi_epi16(b[0], b[2]),
                        _mm_unpacklo_epi16(b[1], b[3]), _mm_unpackhi_epi16(b[1], b[3]),
                        _mm_unpacklo_epi16(b[4], b[6]), _mm_unpackhi_epi16(b[4], b[6]),
                        _mm_unpacklo_epi16(b[5], b[7]), _mm_unpackhi_epi16(b[5], b[7])};
        for (int j = 0; j < 4; j++) {
            __m128i d[2] = {_mm_unpacklo_epi32(c[j], c[j + 4]), _mm_unpackhi_epi32(c[j], c[j + 4])};
            for (int t = 0; t < 2; t++) {
                float *o = lanes + 8 * (x + 4 * j + 2 * t);
                _mm256_storeu_ps(o, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(d[t])));
                __m128i next = _mm_unpackhi_epi64(d[t], d[t]); /* the second pixel's 8 bytes */
                _mm256_storeu_ps(o + 8, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(next)));
            }
        }
    }
    for (; x < sw; x++)
        for (int i = 0; i < 8; i++)
            lanes[8 * x + i] = (float)s[i][x];
    for (int dx = 0; dx < dw; dx += 8) {
        const int32_t *o = offset + (size_t)(dx / 8) * slots * 8;
        const float *w = weight + (size_t)(dx / 8) * slots * 8;
        __m256 m[8];
        for (int j = 0; j < 8; j++)
            m[j] = _mm256_setzero_ps();
        for (int t = 0; t < slots; t++, o += 8, w += 8)
            for (int j = 0; j < 8; j++) /* column dx + j, its tap t */
                m[j] = _mm256_add_ps(m[j],
                                     _mm256_mul_ps(_mm256_loadu_ps(lanes + o[j]), _mm256_set1_ps(w[j])));
        transpose8(m);
        for (int i = 0; i < 8; i++) {
            if (dw - dx >= 8) {
                _mm256_storeu_ps(h[i] + dx, m[i]);
            } else {
                float v[8];
                _mm256_storeu_ps(v, m[i]);
                for (int j = 0; j < dw - dx; j++)
                    h[i][dx + j] = v[j];
            }
        }
    }
}

/* The horizontal pass of a gray image in blocks of eight rows with row_pass8 (the last block, when sh % 8 is
 * not 0, overlaps the one before: those rows are computed twice, to the same floats); returns how many rows
 * it did, sh or 0 when the image has fewer than 8 (the caller does those), or -1 when memory ran out. The
 * taps are laid out for row_pass8: block b's tap t of column 8b + j at [(b * slots + t) * 8 + j], `slots`
 * the most taps a column has, as the offset into `lanes` of its pixel and its weight. A column with fewer
 * taps, and the columns past dw that fill the last block, are padded at the end with weight 0 (offset 0):
 * acc + x * 0 is acc, as the pixels are finite and the sums never -0, so every column runs the same loop
 * and gives the same floats. */
static int rows_pass8(const uint8_t *a, int sh, int sw, const Tap *xtab, const int *first, int dw,
                      float *lanes, float *h)
{
    int slots = 0, blocks = (dw + 7) / 8;
    for (int dx = 0; dx < dw; dx++)
        slots = first[dx + 1] - first[dx] > slots ? first[dx + 1] - first[dx] : slots;
    int32_t *offset = calloc((size_t)blocks * slots * 8, sizeof(int32_t));
    float *weight = calloc((size_t)blocks * slots * 8, sizeof(float));
    if (!offset || !weight) {
        free(offset), free(weight);
        return -1;
    }
    for (int dx = 0; dx < dw; dx++)
        for (int k = first[dx]; k < first[dx + 1]; k++) {
            size_t at = ((size_t)(dx / 8) * slots + (size_t)(k - first[dx])) * 8 + (size_t)(dx % 8);
            offset[at] = 8 * xtab[k].si, weight[at] = xtab[k].alpha;
        }
    int done = sh >= 8 ? sh : 0;
    for (int sy = 0; sy < done; sy += 8) {
        int y = sy + 8 <= sh ? sy : sh - 8;
        const uint8_t *rows[8];
        float *hs[8];
        for (int i = 0; i < 8; i++)
            rows[i] = a + (size_t)(y + i) * sw, hs[i] = h + (size_t)(y + i) * dw;
        row_pass8(rows, sw, slots, offset, weight, dw, lanes, hs);
    }
    free(offset), free(weight);
    return done;
}

/* Rounds the eight sums as store_row does (round half to even, then packing saturates to 0..255) and stores
 * the first `count` of them. */
__attribute__((target("avx2")))
static inline void store8(__m256 sum, int count, uint8_t *d)
{
    __m256i r = _mm256_cvtps_epi32(sum);
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    __m128i bytes = _mm_packus_epi16(w, w);
    if (count == 8) {
        _mm_storel_epi64((__m128i *)d, bytes);
    } else {
        uint8_t v[16];
        _mm_storeu_si128((__m128i *)v, bytes);
        for (int i = 0; i < count; i++)
            d[i] = v[i];
    }
}

/* vertical_pass16 with AVX2, one destination row at a time (for colour images too, as vertical_pass16): per
 * 8 columns (the last out_len % 8 by masked loads) the sum over the row's taps in a register, beta * h for
 * the first tap, then sum + beta * h, in OpenCV's order: the same products and sums per column as the
 * scalar pass, and the same rounding. */
__attribute__((target("avx2")))
static void vertical_pass8(const float *h, const Tap *ytab, int ytab_size, int out_len, uint8_t *out)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int j = 0, end = 0; j < ytab_size; j = end) {
        while (end < ytab_size && ytab[end].di == ytab[j].di) /* the taps of destination row ytab[j].di */
            end++;
        for (int x = 0; x < out_len; x += 8) {
            int count = out_len - x < 8 ? out_len - x : 8;
            __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lane);
            __m256 sum = _mm256_mul_ps(_mm256_set1_ps(ytab[j].alpha),
                                       _mm256_maskload_ps(h + (size_t)ytab[j].si * out_len + x, mask));
            for (int k = j + 1; k < end; k++) {
                __m256 v = _mm256_maskload_ps(h + (size_t)ytab[k].si * out_len + x, mask);
                sum = _mm256_add_ps(sum, _mm256_mul_ps(_mm256_set1_ps(ytab[k].alpha), v));
            }
            store8(sum, count, out + (size_t)ytab[j].di * out_len + x);
        }
    }
}
#endif

/* The resize proper: `a` (sh x sw x cn) into `out` (dh x dw x cn). First the horizontal pass of every
 * source row, then the vertical pass over those rows in OpenCV's order: each float is computed as
 * OpenCV computes it, only not interleaved the same way. Returns 0, or -1 when memory ran out.
 * Runs without the GIL. */
static int resize_area(const uint8_t *a, int sh, int sw, int cn, uint8_t *out, int dh, int dw)
{
    int row_len = sw * cn, out_len = dw * cn, failed = -1;
    Tap *xtab = malloc(sizeof(Tap) * ((size_t)sw * 2 + (size_t)sh * 2));
    int *first = malloc(sizeof(int) * ((size_t)dw + 1));
    float *h = malloc(sizeof(float) * ((size_t)sh * out_len + (size_t)out_len + (size_t)sw * 8));
    if (!xtab || !first || !h)
        goto done;
    Tap *ytab = xtab + (size_t)sw * 2;
    float *sum = h + (size_t)sh * out_len, *lanes = sum + out_len;
    /* The scales as OpenCV computes them (1 / (dw / sw), not sw / dw: the last bit may differ). */
    int xtab_size = area_taps(sw, dw, 1.0 / ((double)dw / sw), xtab);
    int ytab_size = area_taps(sh, dh, 1.0 / ((double)dh / sh), ytab);
    for (int k = xtab_size - 1; k >= 0; k--) /* where each destination column's taps begin */
        first[xtab[k].di] = k;
    first[dw] = xtab_size;

    int sy = 0, path = resize_current;
#if defined(HAVE_AVX512_PATHS)
    if (cn == 1 && path == RESIZE_AVX512) {
        int done = rows_pass16(a, sh, sw, xtab, first, dw, h);
        if (done < 0)
            goto done;
        sy = done ? sh : 0;
    }
    if (cn == 1 && path == RESIZE_AVX2) {
        sy = rows_pass8(a, sh, sw, xtab, first, dw, lanes, h);
        if (sy < 0)
            goto done;
    }
#endif
#if defined(__SSE2__)
    for (; cn == 1 && sy + 4 <= sh; sy += 4) {
        const uint8_t *rows[4] = {a + (size_t)sy * sw, a + (size_t)(sy + 1) * sw, a + (size_t)(sy + 2) * sw,
                                  a + (size_t)(sy + 3) * sw};
        float *hs[4] = {h + (size_t)sy * dw, h + (size_t)(sy + 1) * dw, h + (size_t)(sy + 2) * dw,
                        h + (size_t)(sy + 3) * dw};
        row_pass4(rows, sw, xtab, first, dw, lanes, hs);
    }
#endif
    for (; sy < sh; sy++)
        row_pass(a + (size_t)sy * row_len, xtab, first, dw, cn, h + (size_t)sy * out_len);

#if defined(HAVE_AVX512_PATHS)
    if (path == RESIZE_AVX512 || path == RESIZE_AVX2) {
        if (path == RESIZE_AVX512)
            vertical_pass16(h, ytab, ytab_size, out_len, out);
        else
            vertical_pass8(h, ytab, ytab_size, out_len, out);
        failed = 0;
        goto done;
    }
#endif
    int prev_dy = ytab[0].di;
    for (int dx = 0; dx < out_len; dx++)
        sum[dx] = 0.f;
    for (int j = 0; j < ytab_size; j++) {
        float beta = ytab[j].alpha;
        const float *buf = h + (size_t)ytab[j].si * out_len;
        if (ytab[j].di != prev_dy) {
            store_row(sum, out_len, out + (size_t)prev_dy * out_len);
            for (int dx = 0; dx < out_len; dx++)
                sum[dx] = beta * buf[dx];
            prev_dy = ytab[j].di;
        } else {
            for (int dx = 0; dx < out_len; dx++)
                sum[dx] += beta * buf[dx];
        }
    }
    store_row(sum, out_len, out + (size_t)prev_dy * out_len);
    failed = 0;
done:
    free(xtab), free(first), free(h);
    return failed;
}

/* The shape of a uint8 C-contiguous image: (h, w) or (h, w, 3). */
static int image_shape(Py_buffer *view, const char *what, int *h, int *w, int *cn)
{
    if (view->itemsize != 1 || (view->format != NULL && strcmp(view->format, "B") != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: expected a uint8 array, got items of format '%s'", what,
                     view->format ? view->format : "?");
        return -1;
    }
    if (!(view->ndim == 2 || (view->ndim == 3 && view->shape[2] == 3))) {
        PyErr_Format(PyExc_ValueError,
                     "%s: expected an image of shape (height, width) or (height, width, 3), "
                     "got %d dimensions",
                     what, view->ndim);
        return -1;
    }
    if (view->shape[0] < 1 || view->shape[1] < 1 || view->shape[0] > 1 << 20 || view->shape[1] > 1 << 20) {
        PyErr_Format(PyExc_ValueError, "%s: expected between 1 and 2**20 rows and columns, got %zd x %zd",
                     what, view->shape[0], view->shape[1]);
        return -1;
    }
    *h = (int)view->shape[0], *w = (int)view->shape[1], *cn = view->ndim == 3 ? 3 : 1;
    return 0;
}

PyDoc_STRVAR(max_area_resize_doc,
"max_area_resize(frame, other, out) -> None\n\n"
"np.maximum(frame, other, out=frame) (unless other is None), then write\n"
"cv2.resize(frame, out's size, interpolation=cv2.INTER_AREA) into out, byte for byte. uint8\n"
"C-contiguous images of shape (h, w) or (h, w, 3);\n"
"out must be smaller on both axes and not a whole-number scale on both (see handles()).");

static PyObject *max_area_resize(PyObject *self, PyObject *args)
{
    PyObject *frame_obj, *other_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOO:max_area_resize", &frame_obj, &other_obj, &out_obj))
        return NULL;
    Py_buffer frame = {0}, other = {0}, out = {0};
    int have_other = other_obj != Py_None, ok = 0;
    int h, w, cn, oh, ow, ocn, h2, w2, cn2;
    int frame_flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (have_other ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(frame_obj, &frame, frame_flags) < 0)
        goto done;
    if (have_other && PyObject_GetBuffer(other_obj, &other, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        goto done;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        goto done;
    if (image_shape(&frame, "frame", &h, &w, &cn) < 0 || image_shape(&out, "out", &oh, &ow, &ocn) < 0)
        goto done;
    if (have_other) {
        if (image_shape(&other, "other", &h2, &w2, &cn2) < 0)
            goto done;
        if (h2 != h || w2 != w || cn2 != cn) {
            PyErr_Format(PyExc_ValueError, "other: expected the shape of frame (%d, %d, %d channels), "
                         "got (%d, %d, %d channels)", h, w, cn, h2, w2, cn2);
            goto done;
        }
    }
    if (ocn != cn) {
        PyErr_Format(PyExc_ValueError, "out: expected %d channel(s) like frame, got %d", cn, ocn);
        goto done;
    }
    if (oh > h || ow > w || (h % oh == 0 && w % ow == 0)) {
        PyErr_Format(PyExc_ValueError,
                     "the kernel only shrinks by a scale that is not a whole number on both axes; "
                     "got %d x %d -> %d x %d (use cv2.resize)", h, w, oh, ow);
        goto done;
    }
    int failed;
    Py_BEGIN_ALLOW_THREADS
    if (have_other)
        max_into(frame.buf, other.buf, (size_t)frame.len);
    failed = resize_area(frame.buf, h, w, cn, out.buf, oh, ow);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    ok = 1;
done:
    if (frame.obj)
        PyBuffer_Release(&frame);
    if (other.obj)
        PyBuffer_Release(&other);
    if (out.obj)
        PyBuffer_Release(&out);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* -- palette lookup ------------------------------------------------------------------------------ */

/* Every lookup path computes dst[i] = table[src[i]], or max(table[src[i]], other[i]) when `other` is not
 * NULL (the max-pool folded into the lookup), over n bytes. `table` holds 256 gray values, then 256 "known"
 * bytes (0xFF for a palette index whose gray value was learned, 0 otherwise). Returns 1 when every index
 * was known, 0 otherwise (then dst is not to be used). */
typedef int (*lookup_fn)(const uint8_t *src, const uint8_t *other, size_t n, const uint8_t *table,
                         uint8_t *dst);

static int lookup_plain(const uint8_t *src, const uint8_t *other, size_t n, const uint8_t *table,
                        uint8_t *dst)
{
    /* The table in local arrays and four indices read before four bytes are written: the compiler then
     * needs no reload of either after each store (dst may be any buffer, even src). */
    uint8_t gray[256], known[256];
    memcpy(gray, table, 256);
    memcpy(known, table + 256, 256);
    unsigned all_known = 0xFF;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint8_t a = src[i], b = src[i + 1], c = src[i + 2], d = src[i + 3];
        uint8_t ga = gray[a], gb = gray[b], gc = gray[c], gd = gray[d];
        if (other != NULL) {
            uint8_t oa = other[i], ob = other[i + 1], oc = other[i + 2], od = other[i + 3];
            ga = ga > oa ? ga : oa, gb = gb > ob ? gb : ob, gc = gc > oc ? gc : oc, gd = gd > od ? gd : od;
        }
        dst[i] = ga, dst[i + 1] = gb, dst[i + 2] = gc, dst[i + 3] = gd;
        all_known &= (unsigned)(known[a] & known[b] & known[c] & known[d]);
    }
    for (; i < n; i++) {
        uint8_t g = gray[src[i]];
        all_known &= known[src[i]];
        dst[i] = other != NULL && other[i] > g ? other[i] : g;
    }
    return all_known == 0xFF;
}

#if defined(HAVE_AVX512_PATHS)
/* With AVX2, which has no 128-entry byte permute (any index; lookup_avx2 below picks which): vpshufb
 * looks up 32 bytes at once in a 16-entry table (per 128-bit lane). The 256-entry table is two halves
 * of 128 (the index's top bit picks one, through vpblendvb), each half 8 rows of 16. For an index
 * y = 16 h + l (y < 128), y - 16 i is negative for i > h, where vpshufb gives 0, and in 0..127 for
 * i <= h, where it gives row i's entry l: so XOR-ing the lookups of rows D_0 = T_0, D_i = T_i ^ T_(i-1)
 * for i = 0..7 leaves T_h[l] (the sum telescopes). Whether every index is known is a bitset test of
 * 3 more vpshufb: bit h % 8 of byte l of the half's bitmap. */
__attribute__((target("avx2")))
static int lookup_avx2_any(const uint8_t *src, const uint8_t *other, size_t n, const uint8_t *table,
                       uint8_t *dst)
{
    __m256i rows[2][8];
    uint8_t bitmaps[2][16] = {{0}};
    for (int half = 0; half < 2; half++) {
        for (int i = 0; i < 8; i++) {
            __m128i row = _mm_loadu_si128((const __m128i *)(table + 128 * half + 16 * i));
            __m128i previous = i ? _mm_loadu_si128((const __m128i *)(table + 128 * half + 16 * (i - 1)))
                                 : _mm_setzero_si128();
            rows[half][i] = _mm256_broadcastsi128_si256(_mm_xor_si128(row, previous));
        }
        for (int y = 0; y < 128; y++)
            if (table[256 + 128 * half + y])
                bitmaps[half][y & 15] |= (uint8_t)(1u << (y >> 4));
    }
    const __m256i bitmap_lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)bitmaps[0]));
    const __m256i bitmap_hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)bitmaps[1]));
    const __m256i bit_of = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128,
                                            1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    const __m256i low7 = _mm256_set1_epi8(0x7F), low4 = _mm256_set1_epi8(0x0F);
    const __m256i sixteen = _mm256_set1_epi8(16);
    const __m256i zero = _mm256_setzero_si256();
    __m256i unknown = zero;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i y = _mm256_and_si256(x, low7);
        __m256i lo = _mm256_shuffle_epi8(rows[0][0], y), hi = _mm256_shuffle_epi8(rows[1][0], y);
        for (int r = 1; r < 8; r++) {
            y = _mm256_sub_epi8(y, sixteen);
            lo = _mm256_xor_si256(lo, _mm256_shuffle_epi8(rows[0][r], y));
            hi = _mm256_xor_si256(hi, _mm256_shuffle_epi8(rows[1][r], y));
        }
        __m256i gray = _mm256_blendv_epi8(lo, hi, x);
        if (other != NULL)
            gray = _mm256_max_epu8(gray, _mm256_loadu_si256((const __m256i *)(other + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), gray);
        __m256i l = _mm256_and_si256(x, low4), h = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);
        __m256i bits_lo = _mm256_shuffle_epi8(bitmap_lo, l), bits_hi = _mm256_shuffle_epi8(bitmap_hi, l);
        __m256i bits = _mm256_blendv_epi8(bits_lo, bits_hi, x);
        __m256i bit = _mm256_and_si256(bits, _mm256_shuffle_epi8(bit_of, h));
        unknown = _mm256_or_si256(unknown, _mm256_cmpeq_epi8(bit, zero));
    }
    int ok = _mm256_testz_si256(unknown, unknown);
    return lookup_plain(src + i, other ? other + i : NULL, n - i, table, dst + i) && ok;
}

/* lookup_avx2_any for screens of even indices only, which is what ALE gives for most games (Stella keeps
 * colours in the top 7 bits): k = index / 2 looks up a 128-entry table, half the vpshufb. Returns -1,
 * dst then undefined, when an index is odd. */
__attribute__((target("avx2")))
static int lookup_avx2_even(const uint8_t *src, const uint8_t *other, size_t n, const uint8_t *table,
                            uint8_t *dst)
{
    __m256i rows[8];
    uint8_t even[128], bitmap[16] = {0};
    for (int k = 0; k < 128; k++) {
        even[k] = table[2 * k];
        if (table[256 + 2 * k])
            bitmap[k & 15] |= (uint8_t)(1u << (k >> 4));
    }
    for (int i = 0; i < 8; i++) {
        __m128i row = _mm_loadu_si128((const __m128i *)(even + 16 * i));
        __m128i previous = i ? _mm_loadu_si128((const __m128i *)(even + 16 * (i - 1))) : _mm_setzero_si128();
        rows[i] = _mm256_broadcastsi128_si256(_mm_xor_si128(row, previous));
    }
    const __m256i bits = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)bitmap));
    const __m256i bit_of = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0,
                                            1, 2, 4, 8, 16, 32, 64, -128, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i low7 = _mm256_set1_epi8(0x7F), low4 = _mm256_set1_epi8(0x0F);
    const __m256i top3 = _mm256_set1_epi8((char)0xE0), sixteen = _mm256_set1_epi8(16);
    const __m256i zero = _mm256_setzero_si256();
    __m256i unknown = zero, any = zero;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        any = _mm256_or_si256(any, x);
        __m256i k = _mm256_and_si256(_mm256_srli_epi16(x, 1), low7); /* masks the bit shifted in */
        __m256i y = k, gray = _mm256_shuffle_epi8(rows[0], k);
        for (int r = 1; r < 8; r++) {
            y = _mm256_sub_epi8(y, sixteen);
            gray = _mm256_xor_si256(gray, _mm256_shuffle_epi8(rows[r], y));
        }
        if (other != NULL)
            gray = _mm256_max_epu8(gray, _mm256_loadu_si256((const __m256i *)(other + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), gray);
        /* k % 16 and k / 16, the latter from the index's top 3 bits (masked, so no bit crosses bytes) */
        __m256i l = _mm256_and_si256(k, low4), h = _mm256_srli_epi16(_mm256_and_si256(x, top3), 5);
        __m256i bit = _mm256_and_si256(_mm256_shuffle_epi8(bits, l), _mm256_shuffle_epi8(bit_of, h));
        unknown = _mm256_or_si256(unknown, _mm256_cmpeq_epi8(bit, zero));
    }
    if (!_mm256_testz_si256(any, _mm256_set1_epi8(1)))
        return -1;
    for (size_t j = i; j < n; j++)
        if (src[j] & 1)
            return -1;
    int ok = _mm256_testz_si256(unknown, unknown);
    return lookup_plain(src + i, other ? other + i : NULL, n - i, table, dst + i) && ok;
}

/* The AVX2 path: the even-index lookup while the table knows no odd index. An odd index on the screen is
 * then one not known yet: the caller learns it from ALE, and the whole table is looked up from then on
 * (a game that shows odd indices, as Air Raid does). */
__attribute__((target("avx2")))
static int lookup_avx2(const uint8_t *src, const uint8_t *other, size_t n, const uint8_t *table, uint8_t *dst)
{
    uint8_t odd_known = 0;
    for (int k = 1; k < 256; k += 2)
        odd_known |= table[256 + k];
    if (odd_known)
        return lookup_avx2_any(src, other, n, table, dst);
    return lookup_avx2_even(src, other, n, table, dst) > 0;
}

/* The same with AVX-512 VBMI: vpermi2b looks 64 bytes up in a 128-entry table at once, so two of them
 * and a blend on the index's top bit cover the 256 entries. */
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static int lookup_vbmi(const uint8_t *src, const uint8_t *other, size_t n, const uint8_t *table,
                       uint8_t *dst)
{
    const __m512i g0 = _mm512_loadu_si512(table), g1 = _mm512_loadu_si512(table + 64);
    const __m512i g2 = _mm512_loadu_si512(table + 128), g3 = _mm512_loadu_si512(table + 192);
    const __m512i k0 = _mm512_loadu_si512(table + 256), k1 = _mm512_loadu_si512(table + 320);
    const __m512i k2 = _mm512_loadu_si512(table + 384), k3 = _mm512_loadu_si512(table + 448);
    __m512i all_known = _mm512_set1_epi8((char)0xFF);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i x = _mm512_loadu_si512(src + i);
        __mmask64 upper = _mm512_movepi8_mask(x); /* index >= 128 */
        __m512i gray = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(g0, x, g1),
                                              _mm512_permutex2var_epi8(g2, x, g3));
        __m512i known = _mm512_mask_blend_epi8(upper, _mm512_permutex2var_epi8(k0, x, k1),
                                               _mm512_permutex2var_epi8(k2, x, k3));
        if (other != NULL)
            gray = _mm512_max_epu8(gray, _mm512_loadu_si512(other + i));
        _mm512_storeu_si512(dst + i, gray);
        all_known = _mm512_and_si512(all_known, known);
    }
    int ok = _mm512_cmpneq_epi8_mask(all_known, _mm512_set1_epi8((char)0xFF)) == 0;
    return lookup_plain(src + i, other ? other + i : NULL, n - i, table, dst + i) && ok;
}
#endif

/* The lookup paths, best first: `name` for the switch (TORCHWM_ATARI_KERNEL, read by torchwm/atari_kernel.py),
 * `label` for people. `available` is set at import from the CPU's flags. */
typedef struct {
    const char *name, *label;
    lookup_fn fn;
    int available;
} LookupPath;

static LookupPath lookup_paths[] = {
#if defined(HAVE_AVX512_PATHS)
    {"vbmi", "AVX-512 VBMI", lookup_vbmi, 0},
    {"avx2", "AVX2", lookup_avx2, 0},
#endif
    {"plain", "plain C", lookup_plain, 1},
};
#define N_LOOKUP_PATHS ((int)(sizeof(lookup_paths) / sizeof(lookup_paths[0])))
static const LookupPath *lookup_current = NULL; /* set at import: the best available */

/* The path named `name` (NULL or None: the current one); NULL with a ValueError set when this build or
 * CPU does not have it. */
static const LookupPath *find_lookup(PyObject *name)
{
    if (name == NULL || name == Py_None)
        return lookup_current;
    const char *wanted = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (wanted == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "path: expected one of 'vbmi', 'avx2', 'plain' or None, got %R", name);
        return NULL;
    }
    char have[64] = "";
    for (int k = 0; k < N_LOOKUP_PATHS; k++) {
        if (!lookup_paths[k].available)
            continue;
        if (strcmp(lookup_paths[k].name, wanted) == 0)
            return &lookup_paths[k];
        strncat(have, *have ? ", " : "", sizeof(have) - strlen(have) - 1);
        strncat(have, lookup_paths[k].name, sizeof(have) - strlen(have) - 1);
    }
    int known = !strcmp(wanted, "vbmi") || !strcmp(wanted, "avx2") || !strcmp(wanted, "plain");
    if (known)
        PyErr_Format(PyExc_ValueError, "the gray lookup path '%s' is not available on this CPU or build "
                     "(available: %s)", wanted, have);
    else
        PyErr_Format(PyExc_ValueError, "path: expected one of 'vbmi', 'avx2', 'plain', got '%s'", wanted);
    return NULL;
}

/* Gets `obj` as a uint8 C-contiguous buffer; a ValueError naming `what` otherwise. */
static int get_bytes(PyObject *obj, Py_buffer *view, const char *what, int writable)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != 1 || (view->format != NULL && strcmp(view->format, "B") != 0)) {
        PyErr_Format(PyExc_ValueError, "%s: expected a uint8 array, got items of format '%s'", what,
                     view->format ? view->format : "?");
        return -1;
    }
    return 0;
}

/* Releases the buffers of views that were acquired (a view not acquired has no obj). */
static void release_views(Py_buffer **views, int count)
{
    for (int k = 0; k < count; k++)
        if (views[k]->obj)
            PyBuffer_Release(views[k]);
}

PyDoc_STRVAR(palette_lookup_doc,
"palette_lookup(indices, table, out, other=None, path=None) -> bool\n\n"
"out[...] = table[0][indices]: ALE's palette indices (ale.getScreen) to gray values; with other,\n"
"np.maximum(table[0][indices], other). table is a (2, 256) uint8 array: the gray value of each index,\n"
"then 255 where that value is known and 0 where not. Returns False, out then undefined, when a\n"
"pixel's index is not known yet. path: 'vbmi', 'avx2' or 'plain' (one this CPU has; tests and\n"
"benchmarks), None for the current one (lookup_path()).");

static PyObject *palette_lookup(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"indices", "table", "out", "other", "path", NULL};
    PyObject *indices_obj, *table_obj, *out_obj, *other_obj = Py_None, *path_obj = Py_None;
    int ok = 0, all_known = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|OO:palette_lookup", keywords, &indices_obj,
                                     &table_obj, &out_obj, &other_obj, &path_obj))
        return NULL;
    const LookupPath *path = find_lookup(path_obj);
    if (path == NULL)
        return NULL;
    Py_buffer indices = {0}, table = {0}, out = {0}, other = {0};
    Py_buffer *views[4] = {&indices, &table, &out, &other};
    if (get_bytes(indices_obj, &indices, "indices", 0) < 0 || get_bytes(table_obj, &table, "table", 0) < 0
        || get_bytes(out_obj, &out, "out", 1) < 0
        || (other_obj != Py_None && get_bytes(other_obj, &other, "other", 0) < 0))
        goto done;
    if (table.len != 512) {
        PyErr_Format(PyExc_ValueError, "table: expected a (2, 256) uint8 array, got %zd bytes", table.len);
        goto done;
    }
    if (out.len != indices.len) {
        PyErr_Format(PyExc_ValueError, "out: expected %zd bytes like indices, got %zd", indices.len, out.len);
        goto done;
    }
    if (other_obj != Py_None && other.len != indices.len) {
        PyErr_Format(PyExc_ValueError, "other: expected %zd bytes like indices, got %zd", indices.len,
                     other.len);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    all_known = path->fn(indices.buf, other.obj ? other.buf : NULL, (size_t)indices.len, table.buf, out.buf);
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    release_views(views, 4);
    if (!ok)
        return NULL;
    return PyBool_FromLong(all_known);
}

PyDoc_STRVAR(palette_max_area_resize_doc,
"palette_max_area_resize(indices, table, frame, other, out) -> bool\n\n"
"palette_lookup(indices, table, frame, other) (other may be None), then max_area_resize(frame, None,\n"
"out), in one call: the gray frame, pooled with other, is written once and read once. Returns False\n"
"when an index is not known yet: then neither frame nor out is to be used.");

static PyObject *palette_max_area_resize(PyObject *self, PyObject *args)
{
    PyObject *indices_obj, *table_obj, *frame_obj, *other_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOOOO:palette_max_area_resize", &indices_obj, &table_obj, &frame_obj,
                          &other_obj, &out_obj))
        return NULL;
    Py_buffer indices = {0}, table = {0}, frame = {0}, other = {0}, out = {0};
    Py_buffer *views[5] = {&indices, &table, &frame, &other, &out};
    int ok = 0, all_known = 0, failed = 0, h, w, cn, oh, ow, ocn;
    if (get_bytes(indices_obj, &indices, "indices", 0) < 0 || get_bytes(table_obj, &table, "table", 0) < 0
        || get_bytes(frame_obj, &frame, "frame", 1) < 0
        || (other_obj != Py_None && get_bytes(other_obj, &other, "other", 0) < 0)
        || get_bytes(out_obj, &out, "out", 1) < 0)
        goto done;
    if (table.len != 512) {
        PyErr_Format(PyExc_ValueError, "table: expected a (2, 256) uint8 array, got %zd bytes", table.len);
        goto done;
    }
    if (image_shape(&frame, "frame", &h, &w, &cn) < 0 || image_shape(&out, "out", &oh, &ow, &ocn) < 0)
        goto done;
    if (cn != 1 || ocn != 1) {
        PyErr_Format(PyExc_ValueError, "frame and out: expected gray images (height, width), got %d and %d "
                     "channels", cn, ocn);
        goto done;
    }
    if (indices.len != frame.len || (other.obj && other.len != frame.len)) {
        PyErr_Format(PyExc_ValueError, "indices and other: expected %zd bytes like frame, got %zd and %zd",
                     frame.len, indices.len, other.obj ? other.len : frame.len);
        goto done;
    }
    if (oh > h || ow > w || (h % oh == 0 && w % ow == 0)) {
        PyErr_Format(PyExc_ValueError,
                     "the kernel only shrinks by a scale that is not a whole number on both axes; "
                     "got %d x %d -> %d x %d (use cv2.resize)", h, w, oh, ow);
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    all_known = lookup_current->fn(indices.buf, other.obj ? other.buf : NULL, (size_t)frame.len, table.buf,
                                   frame.buf);
    if (all_known)
        failed = resize_area(frame.buf, h, w, 1, out.buf, oh, ow);
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    ok = 1;
done:
    release_views(views, 5);
    if (!ok)
        return NULL;
    return PyBool_FromLong(all_known);
}

static PyObject *get_lookup_path(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("(ss)", lookup_current->name, lookup_current->label);
}

static PyObject *get_lookup_paths(PyObject *self, PyObject *unused)
{
    PyObject *names = PyList_New(0);
    for (int k = 0; names != NULL && k < N_LOOKUP_PATHS; k++) {
        if (!lookup_paths[k].available)
            continue;
        PyObject *name = PyUnicode_FromString(lookup_paths[k].name);
        if (name == NULL || PyList_Append(names, name) < 0)
            Py_CLEAR(names);
        Py_XDECREF(name);
    }
    if (names == NULL)
        return NULL;
    PyObject *result = PyList_AsTuple(names);
    Py_DECREF(names);
    return result;
}

static PyObject *set_lookup(PyObject *self, PyObject *arg)
{
    const LookupPath *path = find_lookup(arg), *previous = lookup_current;
    if (path == NULL)
        return NULL;
    lookup_current = path;
    return PyUnicode_FromString(previous->name);
}

static PyObject *set_resize(PyObject *self, PyObject *arg)
{
    const char *wanted = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    int k = 0;
    if (wanted == NULL)
        PyErr_Clear();
    while (wanted != NULL && k < N_RESIZE_PATHS && strcmp(resize_names[k], wanted) != 0)
        k++;
    if (wanted == NULL || k == N_RESIZE_PATHS) {
        PyErr_Format(PyExc_ValueError, "expected one of 'AVX-512', 'AVX2', 'SSE2', 'plain C', got %R", arg);
        return NULL;
    }
    if (!resize_available[k]) {
        char have[64] = "";
        for (int m = 0; m < N_RESIZE_PATHS; m++) {
            if (!resize_available[m])
                continue;
            strncat(have, *have ? ", " : "", sizeof(have) - strlen(have) - 1);
            strncat(have, resize_names[m], sizeof(have) - strlen(have) - 1);
        }
        PyErr_Format(PyExc_ValueError, "the resize path '%s' is not available on this CPU or build "
                     "(available: %s)", wanted, have);
        return NULL;
    }
    int previous = resize_current;
    resize_current = k;
    return PyUnicode_FromString(resize_names[previous]);
}

static PyObject *get_resize_path(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(resize_names[resize_current]);
}

static PyMethodDef methods[] = {
    {"max_area_resize", max_area_resize, METH_VARARGS, max_area_resize_doc},
    {"palette_lookup", (PyCFunction)(void (*)(void))palette_lookup, METH_VARARGS | METH_KEYWORDS,
     palette_lookup_doc},
    {"palette_max_area_resize", palette_max_area_resize, METH_VARARGS, palette_max_area_resize_doc},
    {"lookup_path", get_lookup_path, METH_NOARGS,
     "lookup_path() -> (name, label): the gray lookup path in use, e.g. ('avx2', 'AVX2')."},
    {"lookup_paths", get_lookup_paths, METH_NOARGS,
     "lookup_paths() -> tuple: the gray lookup paths this CPU and build have, best first."},
    {"resize_path", get_resize_path, METH_NOARGS,
     "resize_path() -> str: the resize path in use: 'AVX-512', 'AVX2', 'SSE2' or 'plain C'."},
    {"_set_lookup", set_lookup, METH_O,
     "_set_lookup(name) -> str: use the gray lookup path `name` from now on; returns the previous one's "
     "name."},
    {"_set_resize", set_resize, METH_O,
     "_set_resize(name) -> str: use the resize path `name` ('AVX-512', 'AVX2', 'SSE2', or 'plain C' on "
     "builds without SSE2; one this CPU has) from now on; returns the previous one's name."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torchwm._atari_kernel",
    "The fused Atari env's gray lookup, max-pool and INTER_AREA resize in C, bit-exact with ALE and "
    "cv2.resize.",
    -1, methods,
};

PyMODINIT_FUNC PyInit__atari_kernel(void)
{
#if defined(HAVE_AVX512_PATHS)
    __builtin_cpu_init();
    resize_available[RESIZE_AVX512] = cpu_has_avx512();
    resize_available[RESIZE_AVX2] = __builtin_cpu_supports("avx2");
    lookup_paths[0].available = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
    lookup_paths[1].available = __builtin_cpu_supports("avx2");
#endif
    for (int k = N_LOOKUP_PATHS - 1; k >= 0; k--)
        if (lookup_paths[k].available)
            lookup_current = &lookup_paths[k];
#if defined(__SSE2__)
    resize_available[RESIZE_SSE2] = 1;
#else
    resize_available[RESIZE_PLAIN] = 1;
#endif
    for (int k = N_RESIZE_PATHS - 1; k >= 0; k--)
        if (resize_available[k])
            resize_current = k;
    return PyModule_Create(&module);
}

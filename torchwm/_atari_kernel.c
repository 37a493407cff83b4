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
 * through OpenCV's integer "fast" path; the caller uses cv2 for those). Gray
 * images take 16 lanes at a time where the CPU has AVX-512 (checked at
 * import): the horizontal pass one destination column a lane, its source
 * pixels picked by a permute, the vertical pass 16 columns at once; SSE2
 * elsewhere. Every lane does the scalar arithmetic in the scalar order.
 *
 * `palette_lookup` turns ALE's screen of palette indices into gray values
 * through a table the caller learns from ALE's own grayscale screens: what
 * ale.getScreenGrayscale does, 64 pixels an instruction where the CPU has
 * AVX-512 VBMI (checked at import; a plain loop elsewhere).
 *
 * Built by setup.py as an optional extension: without a C compiler torchwm
 * installs without it and uses cv2 (torchwm/native.py says which runs).
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
            acc = _mm_add_ps(acc, _mm_mul_ps(_mm_loadu_ps(lanes + 4 * xtab[k].si), _mm_set1_ps(xtab[k].alpha)));
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
        __m128i c = _mm_cvtps_epi32(_mm_loadu_ps(sum + x + 8)), e = _mm_cvtps_epi32(_mm_loadu_ps(sum + x + 12));
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

#if defined(HAVE_AVX512_PATHS)
static int have_avx512; /* set at import: the CPU has AVX-512 F, BW and VL */

static int cpu_has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
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
static int column_groups(const Tap *xtab, const int *first, int dw, ColumnGroup **groups_out, int32_t **index_out,
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
        _mm512_storeu_ps(row + x, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + x)))));
    if (x < sw) { /* the last pixels, without reading past the row */
        __m128i tail = _mm_maskz_loadu_epi8((__mmask16)((1u << (sw - x)) - 1), s + x);
        _mm512_mask_storeu_ps(row + x, (__mmask16)((1u << (sw - x)) - 1), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(tail)));
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
                _mm_mask_storeu_epi8(out + (size_t)prev_dy * out_len + x, mask, _mm512_cvtusepi32_epi8(rounded));
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
    float *h = malloc(sizeof(float) * ((size_t)sh * out_len + (size_t)out_len + (size_t)sw * 4));
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

    int sy = 0;
#if defined(HAVE_AVX512_PATHS)
    if (cn == 1 && have_avx512) {
        int done = rows_pass16(a, sh, sw, xtab, first, dw, h);
        if (done < 0)
            goto done;
        sy = done ? sh : 0;
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
    if (have_avx512) {
        vertical_pass16(h, ytab, ytab_size, out_len, out);
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
        PyErr_Format(PyExc_ValueError, "%s: expected an image of shape (height, width) or (height, width, 3), "
                     "got %d dimensions", what, view->ndim);
        return -1;
    }
    if (view->shape[0] < 1 || view->shape[1] < 1 || view->shape[0] > 1 << 20 || view->shape[1] > 1 << 20) {
        PyErr_Format(PyExc_ValueError, "%s: expected between 1 and 2**20 rows and columns, got %zd x %zd", what,
                     view->shape[0], view->shape[1]);
        return -1;
    }
    *h = (int)view->shape[0], *w = (int)view->shape[1], *cn = view->ndim == 3 ? 3 : 1;
    return 0;
}

PyDoc_STRVAR(max_area_resize_doc,
"max_area_resize(frame, other, out) -> None\n\n"
"np.maximum(frame, other, out=frame) (unless other is None), then write\n"
"cv2.resize(frame, out's size, interpolation=cv2.INTER_AREA) into out, byte for byte. uint8 C-contiguous images of shape (h, w) or (h, w, 3);\n"
"out must be smaller on both axes and not a whole-number scale on both (see handles()).");

static PyObject *max_area_resize(PyObject *self, PyObject *args)
{
    PyObject *frame_obj, *other_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOO:max_area_resize", &frame_obj, &other_obj, &out_obj))
        return NULL;
    Py_buffer frame = {0}, other = {0}, out = {0};
    int have_other = other_obj != Py_None, ok = 0;
    int h, w, cn, oh, ow, ocn, h2, w2, cn2;
    if (PyObject_GetBuffer(frame_obj, &frame, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (have_other ? PyBUF_WRITABLE : 0)) < 0)
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
        PyErr_Format(PyExc_ValueError, "the kernel only shrinks by a scale that is not a whole number on both "
                     "axes; got %d x %d -> %d x %d (use cv2.resize)", h, w, oh, ow);
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

/* dst[i] = table[src[i]] over n bytes; table holds 256 gray values, then 256 "known" bytes (0xFF for a
 * palette index whose gray value was learned, 0 otherwise). Returns 1 when every index was known, 0
 * otherwise (then dst is not to be used). */
static int lookup_plain(const uint8_t *src, size_t n, const uint8_t *table, uint8_t *dst)
{
    const uint8_t *known = table + 256;
    uint8_t all_known = 0xFF;
    for (size_t i = 0; i < n; i++) {
        dst[i] = table[src[i]];
        all_known &= known[src[i]];
    }
    return all_known == 0xFF;
}

#if defined(HAVE_AVX512_PATHS)
/* The same with AVX-512 VBMI: vpermi2b looks 64 bytes up in a 128-entry table at once, so two of them
 * and a blend on the index's top bit cover the 256 entries. */
__attribute__((target("avx512f,avx512bw,avx512vbmi")))
static int lookup_vbmi(const uint8_t *src, size_t n, const uint8_t *table, uint8_t *dst)
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
        _mm512_storeu_si512(dst + i, gray);
        all_known = _mm512_and_si512(all_known, known);
    }
    int ok = _mm512_cmpneq_epi8_mask(all_known, _mm512_set1_epi8((char)0xFF)) == 0;
    return lookup_plain(src + i, n - i, table, dst + i) && ok;
}
#endif

typedef int (*lookup_fn)(const uint8_t *, size_t, const uint8_t *, uint8_t *);
static lookup_fn lookup_fast = lookup_plain; /* set at import: lookup_vbmi where the CPU has it */

PyDoc_STRVAR(palette_lookup_doc,
"palette_lookup(indices, table, out, vectorized=True) -> bool\n\n"
"out[...] = table[0][indices]: ALE's palette indices (ale.getScreen) to gray values. table is a\n"
"(2, 256) uint8 array: the gray value of each index, then 255 where that value is known and 0 where\n"
"not. Returns False, out then undefined, when a pixel's index is not known yet. vectorized=False\n"
"takes the plain loop even where AVX-512 VBMI is there (for tests).");

static PyObject *palette_lookup(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"indices", "table", "out", "vectorized", NULL};
    PyObject *indices_obj, *table_obj, *out_obj;
    int vectorized = 1, ok = 0, all_known = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|p:palette_lookup", keywords, &indices_obj, &table_obj,
                                     &out_obj, &vectorized))
        return NULL;
    Py_buffer indices = {0}, table = {0}, out = {0};
    Py_buffer *views[3] = {&indices, &table, &out};
    const char *names[3] = {"indices", "table", "out"};
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_GetBuffer(indices_obj, &indices, flags) < 0 || PyObject_GetBuffer(table_obj, &table, flags) < 0
        || PyObject_GetBuffer(out_obj, &out, flags | PyBUF_WRITABLE) < 0)
        goto done;
    for (int k = 0; k < 3; k++) {
        if (views[k]->itemsize != 1 || (views[k]->format != NULL && strcmp(views[k]->format, "B") != 0)) {
            PyErr_Format(PyExc_ValueError, "%s: expected a uint8 array, got items of format '%s'", names[k],
                         views[k]->format ? views[k]->format : "?");
            goto done;
        }
    }
    if (table.len != 512) {
        PyErr_Format(PyExc_ValueError, "table: expected a (2, 256) uint8 array, got %zd bytes", table.len);
        goto done;
    }
    if (out.len != indices.len) {
        PyErr_Format(PyExc_ValueError, "out: expected %zd bytes like indices, got %zd", indices.len, out.len);
        goto done;
    }
    lookup_fn lookup = vectorized ? lookup_fast : lookup_plain;
    Py_BEGIN_ALLOW_THREADS
    all_known = lookup(indices.buf, (size_t)indices.len, table.buf, out.buf);
    Py_END_ALLOW_THREADS
    ok = 1;
done:
    for (int k = 0; k < 3; k++)
        if (views[k]->obj)
            PyBuffer_Release(views[k]);
    if (!ok)
        return NULL;
    return PyBool_FromLong(all_known);
}

static PyObject *set_avx512(PyObject *self, PyObject *arg)
{
    int enable = PyObject_IsTrue(arg);
    if (enable < 0)
        return NULL;
#if defined(HAVE_AVX512_PATHS)
    int previous = have_avx512;
    if (enable && !cpu_has_avx512()) {
        PyErr_SetString(PyExc_ValueError, "this CPU has no AVX-512 (F, BW and VL)");
        return NULL;
    }
    have_avx512 = enable;
    return PyBool_FromLong(previous);
#else
    if (enable) {
        PyErr_SetString(PyExc_ValueError, "this build has no AVX-512 path");
        return NULL;
    }
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"max_area_resize", max_area_resize, METH_VARARGS, max_area_resize_doc},
    {"_set_avx512", set_avx512, METH_O,
     "_set_avx512(enabled) -> bool: use the AVX-512 resize or not (tests: both paths give the same bytes); "
     "returns the previous setting."},
    {"palette_lookup", (PyCFunction)(void (*)(void))palette_lookup, METH_VARARGS | METH_KEYWORDS, palette_lookup_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torchwm._atari_kernel",
    "The fused Atari env's gray lookup, max-pool and INTER_AREA resize in C, bit-exact with ALE and cv2.resize.", -1, methods,
};

PyMODINIT_FUNC PyInit__atari_kernel(void)
{
    const char *lookup_path = "plain loop";
#if defined(__SSE2__)
    const char *resize_path = "SSE2";
#else
    const char *resize_path = "plain C";
#endif
#if defined(HAVE_AVX512_PATHS)
    __builtin_cpu_init();
    have_avx512 = cpu_has_avx512();
    if (have_avx512)
        resize_path = "AVX-512";
    if (__builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw")) {
        lookup_fast = lookup_vbmi;
        lookup_path = "AVX-512 VBMI";
    }
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddStringConstant(m, "LOOKUP_PATH", lookup_path) < 0
                      || PyModule_AddStringConstant(m, "RESIZE_PATH", resize_path) < 0))
        Py_CLEAR(m);
    return m;
}

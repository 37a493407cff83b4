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
 * through OpenCV's integer "fast" path; the caller uses cv2 for those).
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

static PyMethodDef methods[] = {
    {"max_area_resize", max_area_resize, METH_VARARGS, max_area_resize_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torchwm._atari_kernel",
    "The fused Atari env's max-pool and INTER_AREA resize in C, bit-exact with cv2.resize.", -1, methods,
};

PyMODINIT_FUNC PyInit__atari_kernel(void) { return PyModule_Create(&module); }

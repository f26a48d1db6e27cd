/* Small drawing helpers for an env's `pixels` hook (see core.h, BUILD.md "The env contract"): the
 * env draws an RGB picture of itself into a buffer the vectorized layer hands it.
 *
 *   static int name_pixels(const Name *env, uint8_t *rgb, int width, int height)
 *       rgb: uint8[height][width][3], row-major, top row first, already cleared to black;
 *       return 0 (or non-zero for "could not draw", which the caller reports)
 *
 * Everything here is `static inline`, writes only into the canvas it is given (no global state, no
 * allocation) and clips to the canvas, so any size from 1 x 1 up is safe. Coordinates are pixels as
 * floats: x grows to the right, y downwards, pixel (i, j) covers [i, i + 1) x [j, j + 1) and is
 * painted when its centre (i + 0.5, j + 0.5) lies inside the shape. Colours are 0xRRGGBB.
 *
 * A view maps a rectangle of the env's world (x to the right, y up, in any unit) onto a box of pixels,
 * keeping the aspect ratio and centring it: cenv_view_fit(canvas box, world box), then
 * cenv_view_x / cenv_view_y / cenv_view_len convert world coordinates and lengths to pixels. */
#ifndef CENV_DRAW_H
#define CENV_DRAW_H

#include <stdint.h>

/* The frame being drawn: rgb is uint8[height][width][3]. */
typedef struct {
    uint8_t *rgb;
    int width;
    int height;
} cenv_canvas;

static inline cenv_canvas cenv_canvas_of(uint8_t *rgb, int width, int height) {
    cenv_canvas c = {rgb, width, height};
    return c;
}

static inline void cenv_draw_pixel(cenv_canvas c, int x, int y, uint32_t color) {
    if (x < 0 || y < 0 || x >= c.width || y >= c.height) return;
    uint8_t *p = c.rgb + ((size_t)y * (size_t)c.width + (size_t)x) * 3;
    p[0] = (uint8_t)(color >> 16);
    p[1] = (uint8_t)(color >> 8);
    p[2] = (uint8_t)color;
}

/* The pixel range [*lo, *hi) whose centres lie in [a, b], clipped to [0, size). */
static inline void cenv_draw_span(float a, float b, int size, int *lo, int *hi) {
    if (!(a <= b)) { /* empty, or NaN: nothing */
        *lo = *hi = 0;
        return;
    }
    float first = a - 0.5f, last = b - 0.5f; /* centres i + 0.5 in [a, b] <=> i in [a - .5, b - .5] */
    int i0 = first <= 0.0f ? 0 : (first >= (float)size ? size : (int)first + (first > (float)(int)first));
    int i1 = last < 0.0f ? -1 : (last >= (float)size ? size - 1 : (int)last);
    *lo = i0;
    *hi = i1 + 1 > i0 ? i1 + 1 : i0;
}

/* Fills the canvas with one colour. */
static inline void cenv_draw_clear(cenv_canvas c, uint32_t color) {
    for (int y = 0; y < c.height; y++) {
        for (int x = 0; x < c.width; x++) cenv_draw_pixel(c, x, y, color);
    }
}

/* A filled axis-aligned rectangle with corners (x0, y0) and (x1, y1), in any order. */
static inline void cenv_draw_rect(cenv_canvas c, float x0, float y0, float x1, float y1, uint32_t color) {
    if (!(x0 <= x1)) { float t = x0; x0 = x1; x1 = t; }
    if (!(y0 <= y1)) { float t = y0; y0 = y1; y1 = t; }
    int xa, xb, ya, yb;
    cenv_draw_span(x0, x1, c.width, &xa, &xb);
    cenv_draw_span(y0, y1, c.height, &ya, &yb);
    for (int y = ya; y < yb; y++) {
        for (int x = xa; x < xb; x++) cenv_draw_pixel(c, x, y, color);
    }
}

/* A filled disc of radius r around (cx, cy); at least the pixel under the centre when r is tiny. */
static inline void cenv_draw_disc(cenv_canvas c, float cx, float cy, float r, uint32_t color) {
    if (!(r >= 0.5f)) r = 0.5f;
    int xa, xb, ya, yb;
    cenv_draw_span(cx - r, cx + r, c.width, &xa, &xb);
    cenv_draw_span(cy - r, cy + r, c.height, &ya, &yb);
    for (int y = ya; y < yb; y++) {
        float dy = (float)y + 0.5f - cy;
        for (int x = xa; x < xb; x++) {
            float dx = (float)x + 0.5f - cx;
            if (dx * dx + dy * dy <= r * r) cenv_draw_pixel(c, x, y, color);
        }
    }
}

/* A ring: the points at distance [r - thickness / 2, r + thickness / 2] from (cx, cy). */
static inline void cenv_draw_ring(cenv_canvas c, float cx, float cy, float r, float thickness, uint32_t color) {
    if (!(thickness >= 1.0f)) thickness = 1.0f;
    float outer = r + 0.5f * thickness, inner = r - 0.5f * thickness;
    if (inner < 0.0f) inner = 0.0f;
    int xa, xb, ya, yb;
    cenv_draw_span(cx - outer, cx + outer, c.width, &xa, &xb);
    cenv_draw_span(cy - outer, cy + outer, c.height, &ya, &yb);
    for (int y = ya; y < yb; y++) {
        float dy = (float)y + 0.5f - cy;
        for (int x = xa; x < xb; x++) {
            float dx = (float)x + 0.5f - cx, d2 = dx * dx + dy * dy;
            if (d2 <= outer * outer && d2 >= inner * inner) cenv_draw_pixel(c, x, y, color);
        }
    }
}

/* A line from (x0, y0) to (x1, y1), `thickness` pixels wide (at least 1), with round ends. */
static inline void cenv_draw_line(cenv_canvas c, float x0, float y0, float x1, float y1, float thickness,
                                  uint32_t color) {
    if (!(thickness >= 1.0f)) thickness = 1.0f;
    float h = 0.5f * thickness;
    float ex = x1 - x0, ey = y1 - y0, len2 = ex * ex + ey * ey;
    int xa, xb, ya, yb;
    cenv_draw_span((x0 < x1 ? x0 : x1) - h, (x0 < x1 ? x1 : x0) + h, c.width, &xa, &xb);
    cenv_draw_span((y0 < y1 ? y0 : y1) - h, (y0 < y1 ? y1 : y0) + h, c.height, &ya, &yb);
    for (int y = ya; y < yb; y++) {
        for (int x = xa; x < xb; x++) {
            float px = (float)x + 0.5f - x0, py = (float)y + 0.5f - y0;
            float t = len2 > 0.0f ? (px * ex + py * ey) / len2 : 0.0f;
            t = t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
            float dx = px - t * ex, dy = py - t * ey;
            if (dx * dx + dy * dy <= h * h) cenv_draw_pixel(c, x, y, color);
        }
    }
}

/* A world-to-pixel mapping (see the top of this file). */
typedef struct {
    float x0, y0; /* pixel position of the world point (wx0, wy1): the top-left of the world box */
    float wx0, wy1;
    float scale;  /* pixels per world unit */
} cenv_view;

/* Fits the world box [wx0, wx1] x [wy0, wy1] (y up) into the pixel box at (px, py) of size pw x ph,
 * as large as it goes with the aspect ratio kept, centred. */
static inline cenv_view cenv_view_fit(float px, float py, float pw, float ph, float wx0, float wy0, float wx1,
                                      float wy1) {
    float ww = wx1 - wx0, wh = wy1 - wy0;
    float sx = ww > 0.0f ? pw / ww : 1.0f, sy = wh > 0.0f ? ph / wh : 1.0f;
    cenv_view v;
    v.scale = sx < sy ? sx : sy;
    v.x0 = px + 0.5f * (pw - v.scale * ww);
    v.y0 = py + 0.5f * (ph - v.scale * wh);
    v.wx0 = wx0;
    v.wy1 = wy1;
    return v;
}

static inline float cenv_view_x(cenv_view v, float x) { return v.x0 + (x - v.wx0) * v.scale; }
static inline float cenv_view_y(cenv_view v, float y) { return v.y0 + (v.wy1 - y) * v.scale; }
static inline float cenv_view_len(cenv_view v, float length) { return length * v.scale; }

#endif

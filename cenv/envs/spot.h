/* Spot: a probe for uint8 (pixel) observations. Every step shows an RGB image of noise with one white
 * pixel, the spot; the action must name the quadrant the spot is in.
 *
 * The image is H x W pixels of 3 channels (uint8, row-major, channels last). Each background channel
 * value is uniform in [0, noise]; the spot is (255, 255, 255) at a uniform random pixel. Actions:
 * Discrete(4), the spot's quadrant: 0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right, where the
 * spot is at the top when its row < H / 2 and at the left when its column < W / 2 (integer division:
 * with an odd size the middle row or column belongs to the bottom or the right). Reward 1 for the
 * right quadrant, 0 otherwise; a new image is drawn every step; the episode terminates after L steps
 * (the best return is L, a uniform random policy scores L / 4 on average).
 *
 * Observation uint8[H, W, 3] (values 0..255; jaxlab's policy scales them to [0, 1]); action
 * Discrete(4).
 *
 * Params (name, default, range):
 *   height  H      8   [2, 64]    image rows
 *   width   W      8   [2, 64]    image columns
 *   noise          64  [0, 254]   largest background channel value (the spot is 255)
 *   length  L      8   [1, 1e6]   steps per episode (then it terminates)
 * Statistics, per episode: episode_return (in [0, L]), episode_length (L), success (the fraction of its
 * steps that named the right quadrant: the success rate).
 * Render: the image as text, one character per pixel ('@' the spot; '.', ':' and '+' for a background
 * pixel whose mean channel value is in the first, second or last third of [0, noise]), then the
 * quadrant to name and the step.
 */
#ifndef CENV_SPOT_H
#define CENV_SPOT_H

#include "../core.h"

#define SPOT_MAX_SIDE 64
#define SPOT_CHANNELS 3

typedef struct {
    float episode_return;
    float episode_length;
    float success;
} SpotLog;

typedef struct {
    uint8_t *observations; /* [H, W, 3] pixels */
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    SpotLog log;
    int height;
    int width;
    int noise;
    int length;
    int row, col; /* the spot */
    int tick;
    int successes;
    cenv_rng rng;
} Spot;

static const cenv_param spot_params[] = {
    {"height", 8, 2, SPOT_MAX_SIDE, 1, "H: image rows"},
    {"width", 8, 2, SPOT_MAX_SIDE, 1, "W: image columns"},
    {"noise", 64, 0, 254, 1, "largest background channel value (the spot is 255)"},
    {"length", 8, 1, 1e6, 1, "L: steps per episode (then it terminates)"},
};
static const char *const spot_log_names[] = {"episode_return", "episode_length", "success"};

static void spot_spaces(const double *params, cenv_spaces *out) {
    out->agents_per_env = 1;
    out->obs_ndim = 3;
    out->obs_shape[0] = (int64_t)params[0];
    out->obs_shape[1] = (int64_t)params[1];
    out->obs_shape[2] = SPOT_CHANNELS;
    out->obs_dtype = CENV_DTYPE_UINT8;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 4;
}

static void spot_init(Spot *env, const double *params) {
    env->height = (int)params[0];
    env->width = (int)params[1];
    env->noise = (int)params[2];
    env->length = (int)params[3];
}

/* The quadrant of the spot: the action that scores. */
static int spot_answer(const Spot *env) {
    return (env->row >= env->height / 2) * 2 + (env->col >= env->width / 2);
}

/* Draws a new image: noise everywhere, then the spot. */
static void spot_draw(Spot *env) {
    uint8_t *pixels = env->observations;
    int n = env->height * env->width * SPOT_CHANNELS;
    for (int i = 0; i < n; i++) pixels[i] = (uint8_t)cenv_rng_below(&env->rng, env->noise + 1);
    env->row = cenv_rng_below(&env->rng, env->height);
    env->col = cenv_rng_below(&env->rng, env->width);
    memset(pixels + (env->row * env->width + env->col) * SPOT_CHANNELS, 255, SPOT_CHANNELS);
}

static void spot_reset(Spot *env) {
    env->tick = 0;
    env->successes = 0;
    spot_draw(env);
}

static int spot_step(Spot *env) {
    int right = env->actions[0] == spot_answer(env);
    env->rewards[0] = (float)right;
    env->successes += right;
    env->tick += 1;
    env->truncations[0] = 0;
    env->terminals[0] = (uint8_t)(env->tick >= env->length);
    spot_draw(env);
    if (!env->terminals[0]) return 0;
    env->log.episode_return = (float)env->successes;
    env->log.episode_length = (float)env->tick;
    env->log.success = (float)env->successes / (float)env->tick;
    return 1;
}

/* One character per pixel (the mean of its channels), rows on lines, then the answer and the step. */
static int spot_render(const Spot *env, char *out, int size) {
    const uint8_t *pixels = env->observations;
    int used = 0;
    for (int r = 0; r < env->height; r++) {
        for (int c = 0; c < env->width; c++) {
            const uint8_t *p = pixels + (r * env->width + c) * SPOT_CHANNELS;
            int v = (p[0] + p[1] + p[2]) / SPOT_CHANNELS;
            char ch = v == 255 ? '@' : (3 * v <= env->noise ? '.' : (3 * v <= 2 * env->noise ? ':' : '+'));
            if (used < size - 1) out[used] = ch;
            used++;
        }
        if (used < size - 1) out[used] = '\n';
        used++;
    }
    if (size > 0) out[used < size ? used : size - 1] = '\0';
    static const char *const names[4] = {"top-left", "top-right", "bottom-left", "bottom-right"};
    int room = used < size ? size - used : 0;
    int w = snprintf(room > 0 ? out + used : NULL, (size_t)room, "spot %s (action %d) | step %d of %d",
                     names[spot_answer(env)], spot_answer(env), env->tick, env->length);
    return used + (w > 0 ? w : 0);
}

CENV_ENV(spot, Spot, SpotLog, "Name the quadrant of a white pixel in a noisy uint8 RGB image", render)

#endif

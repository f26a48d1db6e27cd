/* CartPole: Gymnasium's CartPole-v1 exactly (constants, Euler integration, thresholds, reward 1 per
 * step including the last, initial state uniform in +-0.05), truncated at `max_steps` (500).
 * Observation float32[4] = (x, x_dot, theta, theta_dot); action Discrete(2): 0 pushes left.
 *
 * "Exactly" means bit for bit: from the same state and actions, every observation equals Gymnasium
 * 1.x's float32 observation (tests/test_env_dynamics.py replays long episodes). The state is double,
 * cos/sin are double (libm, as NumPy's float64 cos/sin), and every expression is evaluated in
 * Gymnasium's order of operations (np.square(v) is (v * v), a * b * c is (a * b) * c); the library is
 * built with -ffp-contract=off so that no compiler fuses a multiply-add. One difference in what is
 * reported, not in the dynamics: on the step that reaches `max_steps` with the pole also falling,
 * Gymnasium's TimeLimit reports terminated and truncated; this env reports terminal only (a terminal
 * is never also a truncation here, and a learner must not bootstrap there either way). */
#ifndef CENV_CARTPOLE_H
#define CENV_CARTPOLE_H

#include <math.h>

#include "../core.h"
#include "../draw.h"

#define CARTPOLE_GRAVITY 9.8
#define CARTPOLE_MASSCART 1.0
#define CARTPOLE_MASSPOLE 0.1
#define CARTPOLE_TOTAL_MASS (CARTPOLE_MASSPOLE + CARTPOLE_MASSCART)
#define CARTPOLE_LENGTH 0.5 /* half the pole's length */
#define CARTPOLE_POLEMASS_LENGTH (CARTPOLE_MASSPOLE * CARTPOLE_LENGTH)
#define CARTPOLE_FORCE_MAG 10.0
#define CARTPOLE_TAU 0.02
#define CARTPOLE_THETA_LIMIT (12.0 * 2.0 * 3.14159265358979323846 / 360.0)
#define CARTPOLE_X_LIMIT 2.4

typedef struct {
    float episode_return;
    float episode_length;
} CartpoleLog;

typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    CartpoleLog log;
    int max_steps;
    double x, x_dot, theta, theta_dot;
    int tick;
    cenv_rng rng;
} Cartpole;

static const cenv_param cartpole_params[] = {
    {"max_steps", 500, 1, 1e9, 1, "steps after which an episode is truncated"},
};
static const char *const cartpole_log_names[] = {"episode_return", "episode_length"};

static void cartpole_spaces(const double *params, cenv_spaces *out) {
    (void)params;
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = 4;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 2;
}

static void cartpole_init(Cartpole *env, const double *params) { env->max_steps = (int)params[0]; }

static void cartpole_observe(Cartpole *env) {
    env->observations[0] = (float)env->x;
    env->observations[1] = (float)env->x_dot;
    env->observations[2] = (float)env->theta;
    env->observations[3] = (float)env->theta_dot;
}

static void cartpole_reset(Cartpole *env) {
    env->x = cenv_rng_uniform(&env->rng, -0.05, 0.05);
    env->x_dot = cenv_rng_uniform(&env->rng, -0.05, 0.05);
    env->theta = cenv_rng_uniform(&env->rng, -0.05, 0.05);
    env->theta_dot = cenv_rng_uniform(&env->rng, -0.05, 0.05);
    env->tick = 0;
    cartpole_observe(env);
}

static int cartpole_step(Cartpole *env) {
    double force = env->actions[0] == 1 ? CARTPOLE_FORCE_MAG : -CARTPOLE_FORCE_MAG;
    /* Gymnasium's expressions, parenthesised as Python evaluates them (left to right). */
    double costheta = cos(env->theta);
    double sintheta = sin(env->theta);
    double theta_dot_sq = env->theta_dot * env->theta_dot; /* np.square(theta_dot) */
    double temp = (force + (CARTPOLE_POLEMASS_LENGTH * theta_dot_sq) * sintheta) / CARTPOLE_TOTAL_MASS;
    double costheta_sq = costheta * costheta; /* np.square(costheta) */
    double thetaacc = (CARTPOLE_GRAVITY * sintheta - costheta * temp) /
                      (CARTPOLE_LENGTH * (4.0 / 3.0 - (CARTPOLE_MASSPOLE * costheta_sq) / CARTPOLE_TOTAL_MASS));
    double xacc = temp - ((CARTPOLE_POLEMASS_LENGTH * thetaacc) * costheta) / CARTPOLE_TOTAL_MASS;
    env->x = env->x + CARTPOLE_TAU * env->x_dot;
    env->x_dot = env->x_dot + CARTPOLE_TAU * xacc;
    env->theta = env->theta + CARTPOLE_TAU * env->theta_dot;
    env->theta_dot = env->theta_dot + CARTPOLE_TAU * thetaacc;
    env->tick += 1;
    cartpole_observe(env);

    int terminal = env->x < -CARTPOLE_X_LIMIT || env->x > CARTPOLE_X_LIMIT ||
                   env->theta < -CARTPOLE_THETA_LIMIT || env->theta > CARTPOLE_THETA_LIMIT;
    int truncated = !terminal && env->tick >= env->max_steps;
    env->rewards[0] = 1.0f;
    env->terminals[0] = (uint8_t)terminal;
    env->truncations[0] = (uint8_t)truncated;
    if (!terminal && !truncated) return 0;
    env->log.episode_return = (float)env->tick;
    env->log.episode_length = (float)env->tick;
    return 1;
}

/* Test hook: state = (x, x_dot, theta, theta_dot[, tick]). A NaN or infinite physical value is refused
 * (a NaN x or theta never ends the episode, and its observations stay NaN); so is a tick outside [0, 1e9]
 * (NaN included): converting it to an int could be undefined behaviour, and so could counting on from it. */
static int cartpole_set_state(Cartpole *env, const double *state, int n) {
    if (n != 4 && n != 5) return -1;
    for (int k = 0; k < 4; k++) {
        if (!isfinite(state[k])) return -1;
    }
    if (n == 5 && !(state[4] >= 0.0 && state[4] <= 1e9)) return -1;
    env->x = state[0];
    env->x_dot = state[1];
    env->theta = state[2];
    env->theta_dot = state[3];
    if (n == 5) env->tick = (int)state[4];
    cartpole_observe(env);
    return 0;
}

/* The track from x = -2.4 to 2.4 with the cart [#] where it is, the pole's lean and the state. */
static int cartpole_render(const Cartpole *env, char *out, int size) {
    char track[42];
    memset(track, '-', 41);
    track[41] = '\0';
    if (!isnan(env->x)) { /* a NaN x (set_state takes any double) has no place: no cart on the track */
        double x = env->x < -CARTPOLE_X_LIMIT ? -CARTPOLE_X_LIMIT
                   : (env->x > CARTPOLE_X_LIMIT ? CARTPOLE_X_LIMIT : env->x);
        track[(int)((x + CARTPOLE_X_LIMIT) / (2 * CARTPOLE_X_LIMIT) * 40.0 + 0.5)] = '#';
    }
    char lean = env->theta > 0.02 ? '/' : (env->theta < -0.02 ? '\\' : '|');
    return snprintf(out, (size_t)size, "|%s| pole %c  x %+.2f  v %+.2f  angle %+.3f  spin %+.2f  step %d", track,
                    lean, env->x, env->x_dot, env->theta, env->theta_dot, env->tick);
}

/* A picture as Gymnasium draws it (white ground, black track and cart, brown pole of 1 m, blue axle), the
 * world from x = -2.6 to 2.6 m fitted into the frame; the limits x = +-2.4 are marked in grey. */
static int cartpole_pixels(const Cartpole *env, uint8_t *rgb, int width, int height) {
    cenv_canvas c = cenv_canvas_of(rgb, width, height);
    cenv_draw_clear(c, 0xffffff);
    cenv_view v = cenv_view_fit(2.0f, 2.0f, (float)width - 4.0f, (float)height - 4.0f, -2.6f, -0.5f, 2.6f, 1.3f);
    float x = (float)env->x, theta = (float)env->theta, track = cenv_view_y(v, 0.0f);
    cenv_draw_line(c, cenv_view_x(v, -2.6f), track, cenv_view_x(v, 2.6f), track, 1.0f, 0x000000);
    for (int side = -1; side <= 1; side += 2) {
        float limit = cenv_view_x(v, (float)(side * CARTPOLE_X_LIMIT));
        cenv_draw_line(c, limit, cenv_view_y(v, -0.3f), limit, cenv_view_y(v, 0.3f), 1.0f, 0xb0b0b0);
    }
    float axle_y = 0.12f;
    cenv_draw_rect(c, cenv_view_x(v, x - 0.25f), cenv_view_y(v, 0.0f), cenv_view_x(v, x + 0.25f),
                   cenv_view_y(v, 0.24f), 0x000000);
    float tip_x = x + (float)(2.0 * CARTPOLE_LENGTH) * sinf(theta);
    float tip_y = axle_y + (float)(2.0 * CARTPOLE_LENGTH) * cosf(theta);
    cenv_draw_line(c, cenv_view_x(v, x), cenv_view_y(v, axle_y), cenv_view_x(v, tip_x), cenv_view_y(v, tip_y),
                   cenv_view_len(v, 0.08f), 0xca9865);
    cenv_draw_disc(c, cenv_view_x(v, x), cenv_view_y(v, axle_y), cenv_view_len(v, 0.04f), 0x8184cb);
    return 0;
}

CENV_ENV(cartpole, Cartpole, CartpoleLog, "Gymnasium CartPole-v1: balance a pole on a cart", set_state, render, pixels)

#endif

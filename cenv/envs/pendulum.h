/* Pendulum: Gymnasium's Pendulum-v1 bit for bit (tests/test_env_dynamics.py) (g=10, m=1, l=1, dt=0.05, max speed 8,
 * max torque 2, reward -(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2)), truncated at `max_steps` (200).
 * Observation float32[3] = (cos th, sin th, thdot); action Box(-2, 2, (1,)), clipped here. */
#ifndef CENV_PENDULUM_H
#define CENV_PENDULUM_H

#include <math.h>

#include "../core.h"
#include "../draw.h"

#define PENDULUM_G 10.0
#define PENDULUM_M 1.0
#define PENDULUM_L 1.0
#define PENDULUM_DT 0.05
#define PENDULUM_MAX_SPEED 8.0
#define PENDULUM_MAX_TORQUE 2.0
#define PENDULUM_PI 3.14159265358979323846

typedef struct {
    float episode_return;
    float episode_length;
} PendulumLog;

typedef struct {
    float *observations;
    float *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    PendulumLog log;
    int max_steps;
    double th, thdot;
    double episode_return;
    int tick;
    cenv_rng rng;
} Pendulum;

static const cenv_param pendulum_params[] = {
    {"max_steps", 200, 1, 1e9, 1, "steps after which an episode is truncated"},
};
static const char *const pendulum_log_names[] = {"episode_return", "episode_length"};

static void pendulum_spaces(const double *params, cenv_spaces *out) {
    (void)params;
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = 3;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_CONTINUOUS;
    out->action_ndim = 1;
    out->action_low[0] = (float)-PENDULUM_MAX_TORQUE;
    out->action_high[0] = (float)PENDULUM_MAX_TORQUE;
}

static void pendulum_init(Pendulum *env, const double *params) { env->max_steps = (int)params[0]; }

static void pendulum_observe(Pendulum *env) {
    env->observations[0] = (float)cos(env->th);
    env->observations[1] = (float)sin(env->th);
    env->observations[2] = (float)env->thdot;
}

static void pendulum_reset(Pendulum *env) {
    env->th = cenv_rng_uniform(&env->rng, -PENDULUM_PI, PENDULUM_PI);
    env->thdot = cenv_rng_uniform(&env->rng, -1.0, 1.0);
    env->tick = 0;
    env->episode_return = 0.0;
    pendulum_observe(env);
}

static double pendulum_clip(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }

static double pendulum_angle_normalize(double x) {
    double y = fmod(x + PENDULUM_PI, 2.0 * PENDULUM_PI);
    if (y < 0) y += 2.0 * PENDULUM_PI; /* Python's % takes the sign of the divisor */
    return y - PENDULUM_PI;
}

static int pendulum_step(Pendulum *env) {
    /* As in Gymnasium (NumPy 2 promotion rules), the terms in the float32 torque u are float32. */
    float u = env->actions[0];
    u = u < -(float)PENDULUM_MAX_TORQUE ? -(float)PENDULUM_MAX_TORQUE
                                        : (u > (float)PENDULUM_MAX_TORQUE ? (float)PENDULUM_MAX_TORQUE : u);
    float torque_cost = 0.001f * (u * u);
    float torque_accel = (float)(3.0 / (PENDULUM_M * PENDULUM_L * PENDULUM_L)) * u;
    double an = pendulum_angle_normalize(env->th);
    double cost = an * an + 0.1 * env->thdot * env->thdot + (double)torque_cost;
    double newthdot =
        env->thdot + (3.0 * PENDULUM_G / (2.0 * PENDULUM_L) * sin(env->th) + (double)torque_accel) * PENDULUM_DT;
    newthdot = pendulum_clip(newthdot, -PENDULUM_MAX_SPEED, PENDULUM_MAX_SPEED);
    env->th = env->th + newthdot * PENDULUM_DT;
    env->thdot = newthdot;
    env->tick += 1;
    env->episode_return -= cost;
    pendulum_observe(env);
    env->rewards[0] = (float)-cost;
    env->terminals[0] = 0;
    env->truncations[0] = (uint8_t)(env->tick >= env->max_steps);
    if (env->tick < env->max_steps) return 0;
    env->log.episode_return = (float)env->episode_return;
    env->log.episode_length = (float)env->tick;
    return 1;
}

/* Test hook: state = (th, thdot[, tick]). A NaN or infinite th or thdot is refused (its observations
 * would be NaN for the rest of the episode); so is a tick outside [0, 1e9] (NaN included): converting it
 * to an int could be undefined behaviour, and so could counting on from it. */
static int pendulum_set_state(Pendulum *env, const double *state, int n) {
    if (n != 2 && n != 3) return -1;
    for (int k = 0; k < 2; k++) {
        if (!isfinite(state[k])) return -1;
    }
    if (n == 3 && !(state[2] >= 0.0 && state[2] <= 1e9)) return -1;
    env->th = state[0];
    env->thdot = state[1];
    if (n == 3) env->tick = (int)state[2];
    pendulum_observe(env);
    return 0;
}

/* A picture as Gymnasium draws it: a red rod of length 1 from the pivot (th = 0 points up, the tip at
 * (-sin th, cos th)), a black pivot, on white; the world [-1.2, 1.2]^2 fitted into the frame. */
static int pendulum_pixels(const Pendulum *env, uint8_t *rgb, int width, int height) {
    cenv_canvas c = cenv_canvas_of(rgb, width, height);
    cenv_draw_clear(c, 0xffffff);
    cenv_view v = cenv_view_fit(2.0f, 2.0f, (float)width - 4.0f, (float)height - 4.0f, -1.2f, -1.2f, 1.2f, 1.2f);
    float tip_x = (float)(-sin(env->th) * PENDULUM_L), tip_y = (float)(cos(env->th) * PENDULUM_L);
    float ox = cenv_view_x(v, 0.0f), oy = cenv_view_y(v, 0.0f);
    cenv_draw_line(c, ox, oy, cenv_view_x(v, tip_x), cenv_view_y(v, tip_y), cenv_view_len(v, 0.2f), 0xcc4c4c);
    cenv_draw_disc(c, ox, oy, cenv_view_len(v, 0.05f), 0x000000);
    return 0;
}

CENV_ENV(pendulum, Pendulum, PendulumLog, "Gymnasium Pendulum-v1: swing a pendulum up (continuous)", set_state, pixels)

#endif

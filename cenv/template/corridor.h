/* Corridor: a small example env written with the jaxlab SDK (`jaxlab new-env NAME` copies it under
 * your env's name). Replace its dynamics with yours; keep the shape.
 *
 * The agent walks a line of `length` cells from cell 0 towards the goal at the far end. Actions:
 * Discrete(3), 0 left, 1 stay, 2 right. Reward: +1 on reaching the goal (the episode terminates) and
 * -`step_cost` for every other step. Episodes are truncated at `max_steps`.
 * Observation float32[2]: (position / length, steps taken / max_steps).
 * Statistics: episode_return, episode_length, reached_goal (1 when it terminated at the goal).
 * Hooks: render (a text frame), pixels (a picture, for `jaxlab eval --gif`).
 *
 * Build and train: `jaxlab train path/to/corridor.h` (built on first use, cached, rebuilt when this
 * file or anything it includes changes), or `jaxlab build-env corridor.h -o libcorridor.so`.
 * See BUILD.md ("The env contract") for what each function must do. */
#ifndef CORRIDOR_H
#define CORRIDOR_H

#include "core.h" /* from jaxlab's SDK: `jaxlab sdk --include` prints its folder */
#include "draw.h" /* the SDK's drawing helpers, for the pixels hook */

/* One float per statistic: the SUMS over the agent-episodes that end in a step. */
typedef struct {
    float episode_return;
    float episode_length;
    float reached_goal;
} CorridorLog;

typedef struct {
    /* The borrowed buffers, first and in this order (jaxlab binds them). */
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    /* Then the Log; from here on everything is saved in checkpoints as plain bytes: no pointers. */
    CorridorLog log;
    /* Config, set once from the params. */
    int length;
    int max_steps;
    float step_cost;
    /* State. */
    int position;
    int tick;
    float episode_return;
    cenv_rng rng; /* this env's own random stream, seeded by jaxlab */
} Corridor;

/* Parameters: name, default, min, max, is_int, help (`--env.NAME VALUE` on the command line). */
static const cenv_param corridor_params[] = {
    {"length", 8, 2, 1000, 1, "cells from the start to the goal"},
    {"max_steps", 64, 1, 1e9, 1, "steps after which an episode is truncated"},
    {"step_cost", 0.01, 0, 1, 0, "reward lost per step that does not reach the goal"},
};
static const char *const corridor_log_names[] = {"episode_return", "episode_length", "reached_goal"};

static void corridor_spaces(const double *params, cenv_spaces *out) {
    (void)params;
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = 2;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 3;
}

static void corridor_init(Corridor *env, const double *params) {
    env->length = (int)params[0];
    env->max_steps = (int)params[1];
    env->step_cost = (float)params[2];
}

static void corridor_observe(Corridor *env) {
    env->observations[0] = (float)env->position / (float)env->length;
    env->observations[1] = (float)env->tick / (float)env->max_steps;
}

static void corridor_reset(Corridor *env) {
    env->position = cenv_rng_below(&env->rng, 2); /* start in cell 0 or 1 */
    env->tick = 0;
    env->episode_return = 0.0f;
    corridor_observe(env);
}

static int corridor_step(Corridor *env) {
    int move = env->actions[0] - 1; /* -1, 0, +1 */
    env->position += move;
    if (env->position < 0) env->position = 0;
    env->tick += 1;
    int reached = env->position >= env->length;
    float reward = reached ? 1.0f : -env->step_cost;
    env->episode_return += reward;
    env->rewards[0] = reward;
    env->terminals[0] = (uint8_t)reached;
    env->truncations[0] = (uint8_t)(!reached && env->tick >= env->max_steps);
    corridor_observe(env);
    if (!env->terminals[0] && !env->truncations[0]) return 0;
    env->log.episode_return = env->episode_return; /* sums over the 1 agent that ended */
    env->log.episode_length = (float)env->tick;
    env->log.reached_goal = (float)reached;
    return 1; /* agents whose episode ended in this step */
}

/* A text frame for `jaxlab eval ... --render`: the cells with the agent (@) and the goal (G). */
static int corridor_render(const Corridor *env, char *out, int size) {
    char cells[64];
    int shown = env->length < 60 ? env->length : 60;
    for (int i = 0; i <= shown; i++) cells[i] = i == shown ? 'G' : '.';
    int at = env->position * shown / env->length;
    cells[at] = '@';
    cells[shown + 1] = '\0';
    return snprintf(out, (size_t)size, "|%s|  step %d  return %+.2f", cells, env->tick, env->episode_return);
}

/* A picture for `jaxlab eval ... --gif`: the cells in grey, the goal in green, the agent as a blue disc.
 * rgb is uint8[height][width][3], cleared to black; draw.h's helpers clip to any size. */
static int corridor_pixels(const Corridor *env, uint8_t *rgb, int width, int height) {
    cenv_canvas c = cenv_canvas_of(rgb, width, height);
    cenv_draw_clear(c, 0xffffff);
    /* the world: cells 0 .. length along x, one cell high; fitted into the frame */
    cenv_view v = cenv_view_fit(2.0f, 2.0f, (float)width - 4.0f, (float)height - 4.0f, 0.0f, 0.0f,
                                (float)env->length + 1.0f, 1.0f);
    for (int i = 0; i <= env->length; i++) {
        uint32_t color = i == env->length ? 0x33aa55 : 0xdddddd;
        cenv_draw_rect(c, cenv_view_x(v, (float)i + 0.05f), cenv_view_y(v, 0.05f), cenv_view_x(v, (float)i + 0.95f),
                       cenv_view_y(v, 0.95f), color);
    }
    cenv_draw_disc(c, cenv_view_x(v, (float)env->position + 0.5f), cenv_view_y(v, 0.5f), cenv_view_len(v, 0.35f),
                   0x3366cc);
    return 0;
}

CENV_ENV(corridor, Corridor, CorridorLog, "Walk to the goal at the far end of a line of cells (SDK example)", render,
         pixels)

#endif

/* Multicue: a probe for multi-discrete actions. Every step shows one cue per action component, and
 * each component of the action must name its own cue.
 *
 * Component j (j = 0 .. K-1) has N + j choices, so the components differ in size (a head split at the
 * wrong place, or components swapped, cannot score). Each step draws a new cue c_j uniform in
 * [0, N + j) for every component; the observation is their one-hot codes side by side, component 0
 * first. Reward per step: the fraction of components whose action equals its cue (1 when all match);
 * the episode terminates after L steps, so the best return is L. A uniform random policy matches all
 * components with probability 1 / (N (N+1) ... (N+K-1)): 1/60 with the defaults.
 *
 * Observation float32[K*N + K*(K-1)/2] (the sum of the sizes; 12 with the defaults); action
 * MultiDiscrete([N, N+1, ..., N+K-1]) (MultiDiscrete([3, 4, 5]) with the defaults).
 *
 * Params (name, default, range):
 *   components  K  3  [1, 8]    action components (cues per step)
 *   choices     N  3  [2, 16]   choices of component 0; component j has N + j
 *   length      L  8  [1, 1e6]  steps per episode (then it terminates)
 * Statistics, per episode: episode_return (in [0, L]), episode_length (L), success (the fraction of
 * its steps in which every component matched: the success rate), matched (the fraction of component
 * actions that matched their cue).
 * Render: the cues on show and the last action, e.g. "cues  2 0 4 | last action  2 1 4 (2/3) | step 3 of 8".
 */
#ifndef CENV_MULTICUE_H
#define CENV_MULTICUE_H

#include <stdarg.h>

#include "../core.h"

#define MULTICUE_MAX_COMPONENTS 8
#define MULTICUE_MAX_CHOICES 16

typedef struct {
    float episode_return;
    float episode_length;
    float success;
    float matched;
} MulticueLog;

typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    MulticueLog log;
    int components;
    int choices;
    int length;
    int obs_size;
    int cues[MULTICUE_MAX_COMPONENTS];
    int last_action[MULTICUE_MAX_COMPONENTS]; /* -1 before the first step of an episode */
    int last_matched;
    int tick;
    float episode_return;
    int successes;
    int matches;
    cenv_rng rng;
} Multicue;

static const cenv_param multicue_params[] = {
    {"components", 3, 1, MULTICUE_MAX_COMPONENTS, 1, "K: action components (cues per step)"},
    {"choices", 3, 2, MULTICUE_MAX_CHOICES, 1, "N: choices of component 0; component j has N + j"},
    {"length", 8, 1, 1e6, 1, "L: steps per episode (then it terminates)"},
};
static const char *const multicue_log_names[] = {"episode_return", "episode_length", "success", "matched"};

static void multicue_spaces(const double *params, cenv_spaces *out) {
    int k = (int)params[0], n = (int)params[1];
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = k * n + k * (k - 1) / 2;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_MULTI_DISCRETE;
    out->action_ndim = k;
    for (int j = 0; j < k; j++) out->action_nvec[j] = n + j;
}

static void multicue_init(Multicue *env, const double *params) {
    env->components = (int)params[0];
    env->choices = (int)params[1];
    env->length = (int)params[2];
    env->obs_size = env->components * env->choices + env->components * (env->components - 1) / 2;
}

/* Draws a new cue for every component and writes their one-hot codes. */
static void multicue_draw(Multicue *env) {
    memset(env->observations, 0, sizeof(float) * (size_t)env->obs_size);
    int offset = 0;
    for (int j = 0; j < env->components; j++) {
        int size = env->choices + j;
        env->cues[j] = cenv_rng_below(&env->rng, size);
        env->observations[offset + env->cues[j]] = 1.0f;
        offset += size;
    }
}

static void multicue_reset(Multicue *env) {
    env->tick = 0;
    env->episode_return = 0.0f;
    env->successes = 0;
    env->matches = 0;
    for (int j = 0; j < env->components; j++) env->last_action[j] = -1;
    env->last_matched = 0;
    multicue_draw(env);
}

static int multicue_step(Multicue *env) {
    int matched = 0;
    for (int j = 0; j < env->components; j++) {
        env->last_action[j] = env->actions[j];
        matched += env->actions[j] == env->cues[j];
    }
    float reward = (float)matched / (float)env->components;
    env->rewards[0] = reward;
    env->episode_return += reward;
    env->last_matched = matched;
    env->successes += matched == env->components;
    env->matches += matched;
    env->tick += 1;
    env->truncations[0] = 0;
    env->terminals[0] = (uint8_t)(env->tick >= env->length);
    multicue_draw(env);
    if (!env->terminals[0]) return 0;
    env->log.episode_return = env->episode_return;
    env->log.episode_length = (float)env->tick;
    env->log.success = (float)env->successes / (float)env->tick;
    env->log.matched = (float)env->matches / (float)(env->tick * env->components);
    return 1;
}

/* Appends printf-style text at out + *used, within `size` bytes; *used counts what would be written
 * past the end too (snprintf's convention, which render returns). */
static void multicue_append(char *out, int size, int *used, const char *fmt, ...) {
    int room = *used < size ? size - *used : 0;
    va_list args;
    va_start(args, fmt);
    int w = vsnprintf(room > 0 ? out + *used : NULL, (size_t)room, fmt, args);
    va_end(args);
    if (w > 0) *used += w;
}

/* The cues on show, the last action and how many of its components matched (the cues of that step). */
static int multicue_render(const Multicue *env, char *out, int size) {
    int used = 0;
    if (size > 0) out[0] = '\0';
    multicue_append(out, size, &used, "cues ");
    for (int j = 0; j < env->components; j++) multicue_append(out, size, &used, " %d", env->cues[j]);
    if (env->last_action[0] < 0) {
        multicue_append(out, size, &used, " | no action yet");
    } else {
        multicue_append(out, size, &used, " | last action ");
        for (int j = 0; j < env->components; j++) multicue_append(out, size, &used, " %d", env->last_action[j]);
        multicue_append(out, size, &used, " (%d/%d)", env->last_matched, env->components);
    }
    multicue_append(out, size, &used, " | step %d of %d", env->tick, env->length);
    return used;
}

CENV_ENV(multicue, Multicue, MulticueLog, "Name one cue per action component (MultiDiscrete probe)", render)

#endif

/* Memory: a recall task that only an agent with memory solves.
 * Step 0 shows one of K cues (one-hot in the first K observation entries), the next D observations
 * are blank, then a query observation (last entry 1). The action taken at the query must name the
 * cue: reward 1 if right, 0 otherwise, and the episode terminates (D + 2 steps in all). Actions before
 * the query are ignored. After step 0 nothing in the observation depends on the cue, so a
 * feed-forward policy succeeds with probability 1/K. Observation float32[K + 1]; action Discrete(K). */
#ifndef CENV_MEMORY_H
#define CENV_MEMORY_H

#include "../core.h"

#define MEMORY_MAX_CUES 64

typedef struct {
    float episode_return;
    float episode_length;
    float success;
} MemoryLog;

typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    MemoryLog log;
    int num_cues;
    int delay;
    int cue;
    int tick;
    cenv_rng rng;
} Memory;

static const cenv_param memory_params[] = {
    {"num_cues", 4, 2, MEMORY_MAX_CUES, 1, "K: how many cues there are to tell apart"},
    {"delay", 8, 0, 1e6, 1, "D: blank steps between the cue and the query"},
};
static const char *const memory_log_names[] = {"episode_return", "episode_length", "success"};

static void memory_spaces(const double *params, cenv_spaces *out) {
    int k = (int)params[0];
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = k + 1;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = k;
}

static void memory_init(Memory *env, const double *params) {
    env->num_cues = (int)params[0];
    env->delay = (int)params[1];
}

/* Writes the observation for the current tick: cue at 0, blank until delay, then the query. */
static void memory_observe(Memory *env) {
    memset(env->observations, 0, sizeof(float) * (size_t)(env->num_cues + 1));
    if (env->tick == 0) {
        env->observations[env->cue] = 1.0f;
    } else if (env->tick == env->delay + 1) {
        env->observations[env->num_cues] = 1.0f;
    }
}

static void memory_reset(Memory *env) {
    env->cue = cenv_rng_below(&env->rng, env->num_cues);
    env->tick = 0;
    memory_observe(env);
}

static int memory_step(Memory *env) {
    env->truncations[0] = 0;
    if (env->tick == env->delay + 1) {
        float reward = env->actions[0] == env->cue ? 1.0f : 0.0f;
        env->rewards[0] = reward;
        env->terminals[0] = 1;
        env->tick += 1;
        memory_observe(env); /* blank: the episode is over */
        env->log.episode_return = reward;
        env->log.episode_length = (float)env->tick;
        env->log.success = reward;
        return 1;
    }
    env->tick += 1;
    env->rewards[0] = 0.0f;
    env->terminals[0] = 0;
    memory_observe(env);
    return 0;
}

/* What the agent sees now: the cue, a blank step or the query. */
static int memory_render(const Memory *env, char *out, int size) {
    if (env->tick == 0) return snprintf(out, (size_t)size, "cue %d    (step 0 of %d)", env->cue, env->delay + 2);
    if (env->tick == env->delay + 1) return snprintf(out, (size_t)size, "query?   (step %d: name the cue)", env->tick);
    return snprintf(out, (size_t)size, "blank    (step %d)", env->tick);
}

CENV_ENV(memory, Memory, MemoryLog, "Recall a cue shown D steps before the query (needs memory)", render)

#endif

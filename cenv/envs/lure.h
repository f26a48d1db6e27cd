/* Lure: a probe for action masks. Every step offers N actions with payoffs on show; the richest one
 * is often illegal, and only the mask keeps an agent from taking it.
 *
 * Each step the N actions get the payoffs 0, 1/(N-1), 2/(N-1), ..., 1 in a uniform random order. The
 * richest action (payoff 1), the lure, is illegal with probability p; every other action is always
 * legal. The observation shows the payoffs and which actions are legal; the action mask (option
 * `mask`) holds the same legal bits. Reward: the payoff of the action taken. The best legal return of
 * a step is 1 when the lure is legal and (N-2)/(N-1) when it is not; the episode terminates after L
 * steps. With strict mask checking (jaxlab's default) an illegal action stops the step with an error;
 * with mask_check = "off" it is stepped, pays its payoff like any other (which is what makes the lure
 * attractive) and is counted in the `illegal` statistic.
 *
 * Observation float32[2N]: payoff of action i at i, then 1 at N + i when action i is legal (else 0);
 * action Discrete(N); action mask [N] (1 legal).
 *
 * Params (name, default, range):
 *   actions    N  4    [2, 32]   actions to choose from
 *   lure_prob  p  0.5  [0, 1]    probability that the richest action is illegal in a step
 *   length     L  8    [1, 1e6]  steps per episode (then it terminates)
 * Statistics, per episode: episode_return, episode_length (L), best_return (the episode's best legal
 * return: the sum of its steps' best legal payoffs), success (the fraction of its steps that took the
 * best legal action: the success rate), illegal (illegal actions taken: 0 under strict masks).
 * Render: the payoffs on show, illegal ones marked x, e.g. "payoffs 0.33 1.00x 0.00 0.67 | step 2 of 8".
 */
#ifndef CENV_LURE_H
#define CENV_LURE_H

#include "../core.h"

#define LURE_MAX_ACTIONS 32

typedef struct {
    float episode_return;
    float episode_length;
    float best_return;
    float success;
    float illegal;
} LureLog;

typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    uint8_t *action_mask;
    LureLog log;
    int num_actions;
    double lure_prob;
    int length;
    float payoff[LURE_MAX_ACTIONS];
    uint8_t legal[LURE_MAX_ACTIONS];
    int best_legal; /* the action with the highest legal payoff */
    int tick;
    float episode_return;
    float best_return;
    int successes;
    int illegal;
    cenv_rng rng;
} Lure;

static const cenv_param lure_params[] = {
    {"actions", 4, 2, LURE_MAX_ACTIONS, 1, "N: actions to choose from"},
    {"lure_prob", 0.5, 0, 1, 0, "p: probability that the richest action is illegal in a step"},
    {"length", 8, 1, 1e6, 1, "L: steps per episode (then it terminates)"},
};
static const char *const lure_log_names[] = {"episode_return", "episode_length", "best_return", "success",
                                             "illegal"};

static void lure_spaces(const double *params, cenv_spaces *out) {
    int n = (int)params[0];
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = 2 * n;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = n;
    out->has_mask = 1;
}

static void lure_init(Lure *env, const double *params) {
    env->num_actions = (int)params[0];
    env->lure_prob = params[1];
    env->length = (int)params[2];
}

/* Deals the payoffs of a new step (a random permutation of the levels), decides whether the lure is
 * legal, and writes the observation and the mask. */
static void lure_deal(Lure *env) {
    int n = env->num_actions;
    int order[LURE_MAX_ACTIONS];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) { /* Fisher-Yates */
        int j = cenv_rng_below(&env->rng, i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int lure_legal = cenv_rng_unit(&env->rng) >= env->lure_prob;
    for (int i = 0; i < n; i++) {
        env->payoff[i] = (float)order[i] / (float)(n - 1);
        env->legal[i] = (uint8_t)(order[i] != n - 1 || lure_legal);
        if (order[i] == (lure_legal ? n - 1 : n - 2)) env->best_legal = i;
        env->observations[i] = env->payoff[i];
        env->observations[n + i] = (float)env->legal[i];
        env->action_mask[i] = env->legal[i];
    }
}

static void lure_reset(Lure *env) {
    env->tick = 0;
    env->episode_return = 0.0f;
    env->best_return = 0.0f;
    env->successes = 0;
    env->illegal = 0;
    lure_deal(env);
}

static int lure_step(Lure *env) {
    int a = env->actions[0];
    float reward = env->payoff[a];
    env->rewards[0] = reward;
    env->episode_return += reward;
    env->best_return += env->payoff[env->best_legal];
    env->successes += a == env->best_legal;
    env->illegal += !env->legal[a];
    env->tick += 1;
    env->truncations[0] = 0;
    env->terminals[0] = (uint8_t)(env->tick >= env->length);
    lure_deal(env);
    if (!env->terminals[0]) return 0;
    env->log.episode_return = env->episode_return;
    env->log.episode_length = (float)env->tick;
    env->log.best_return = env->best_return;
    env->log.success = (float)env->successes / (float)env->tick;
    env->log.illegal = (float)env->illegal;
    return 1;
}

/* The payoffs on show, illegal ones marked x. */
static int lure_render(const Lure *env, char *out, int size) {
    int used = snprintf(out, (size_t)size, "payoffs");
    for (int i = 0; i < env->num_actions; i++) {
        int room = used < size ? size - used : 0;
        int w = snprintf(room > 0 ? out + used : NULL, (size_t)room, " %.2f%s", env->payoff[i],
                         env->legal[i] ? "" : "x");
        if (w > 0) used += w;
    }
    int room = used < size ? size - used : 0;
    int w = snprintf(room > 0 ? out + used : NULL, (size_t)room, " | step %d of %d", env->tick, env->length);
    return used + (w > 0 ? w : 0);
}

CENV_ENV(lure, Lure, LureLog, "Take the best legal payoff; the richest action is often illegal (mask probe)",
         mask, render)

#endif

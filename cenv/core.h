/* What every environment header includes (the SDK's contract, versioned by CENV_ABI_VERSION; see
 * BUILD.md "The env contract"): the spec types that describe an environment to the vectorized layer
 * (api.c) and CENV_ENV, which turns an env's functions into its spec.
 *
 * An env is one header:
 *   typedef struct { float episode_return; ... } NameLog;      floats only, one per statistic: the SUMS
 *                                                              over the agent-episodes that end in a step
 *                                                              (cleared before each step: add with +=;
 *                                                              a step that ends no episode writes none);
 *                                                              jaxlab's build refuses a field of another
 *                                                              type (an int would be read as float bits)
 *   typedef struct {
 *       float *observations; int32_t *actions; float *rewards;  the borrowed buffer pointers, first,
 *       uint8_t *terminals; uint8_t *truncations;              in this order (actions may be float *;
 *       uint8_t *action_mask;                                  observations uint8_t *); action_mask only
 *                                                              with the `mask` option
 *       NameLog log;                                           right after the pointers (checked when
 *       ... config, state, cenv_rng rng ...                    it compiles); no other pointer: from `log`
 *   } Name;                                                    on, the struct is what checkpoints save
 *   static const cenv_param name_params[] = {...};             at least one
 *   static const char *const name_log_names[] = {...};         one per Log field, same order
 *   static void name_spaces(const double *params, cenv_spaces *out);
 *   static void name_init(Name *env, const double *params);    memory arrives zeroed
 *   static void name_reset(Name *env);                         a new episode for every agent
 *   static int name_step(Name *env);                           see "The step" below
 *   CENV_ENV(name, Name, NameLog, "one-line description"[, option ...])
 *
 * Options (words after the description, any order):
 *   mask          the env writes action_mask[agent, sum(nvec)] (1 legal, 0 illegal) in reset, step
 *                 (and reset_agent) for the next step; its spaces set has_mask = 1
 *   reset_agent   an agent whose episode ends while others go on respawns at once:
 *                 static void name_reset_agent(Name *env, int agent) starts its new episode (writes
 *                 its observation, and mask row)
 *   agents_wait   an agent whose episode ends while others go on waits for the env's reset: until
 *                 then its rows are ignored (the vectorized layer reports reward 0, terminal 1 and
 *                 active 0 for it, whatever the env writes) and the env must not end it again
 *   render        static int name_render(const Name *env, char *out, int size): a text frame of the
 *                 env (snprintf-style: returns the length it wrote or would write)
 *   set_state     static int name_set_state(Name *env, const double *state, int n): a test hook that
 *                 overwrites the physical state (0 on success)
 *   pixels        static int name_pixels(const Name *env, uint8_t *rgb, int width, int height): an RGB
 *                 picture of the env (for `jaxlab eval --gif`): rgb is uint8[height][width][3], row
 *                 major, top row first, handed over cleared to black; 1 <= width, height <=
 *                 CENV_MAX_FRAME_SIDE; draw what fits any size (draw.h has clipped helpers: rectangle,
 *                 disc, ring, line, a world-to-pixel view); return 0, or non-zero if it cannot draw
 *   error         static int name_error(const Name *env, char *out, int size): the env's own message
 *                 (snprintf-style) for a step that failed, i.e. returned a negative number (below)
 *
 * The step: read `actions` (already validated: in range, not NaN, legal under the mask), write every
 * agent's observation, reward and flags (terminals: the episode ended for good; truncations: a time
 * limit cut it; never both; rewards and flags arrive cleared to 0), and return the number of agents
 * whose episode ended in this step (0 mostly), after adding their statistics to `log` (sums). An env
 * that finds itself broken (its own invariants, a move it cannot execute) returns a negative number
 * instead: the whole cenv_step then fails with CENV_ERR_ENV and the message of its `error` hook, and
 * that env is neither reset nor respawned. Do not reset anything yourself: the vectorized layer
 * records each ending agent's observation as its final observation, then resets the whole env when
 * every agent has ended (or waits), else calls reset_agent for each ending agent (option
 * reset_agent) or lets it wait (option agents_wait); an env with neither option must end all its
 * agents together. A step that breaks this fails with CENV_ERR_ENV and a message.
 */
#ifndef CENV_CORE_H
#define CENV_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "api.h" /* CENV_DTYPE_*, CENV_ACTION_*, CENV_MAX_OBS_DIMS, CENV_MAX_ACTION_DIMS */
#include "rng.h"

/* One env parameter: a number with a default and an inclusive range; is_int forbids fractions. */
typedef struct {
    const char *name;
    double default_value;
    double min_value;
    double max_value;
    int is_int;
    const char *help;
} cenv_param;

/* The spaces of one env for given parameters. Filled by the env's `spaces` function. */
typedef struct {
    int agents_per_env;
    int obs_ndim;
    int64_t obs_shape[CENV_MAX_OBS_DIMS]; /* per agent */
    int obs_dtype;                        /* CENV_DTYPE_* */
    int action_kind;                      /* CENV_ACTION_* */
    int action_ndim;                      /* components per agent: 1 for discrete */
    int64_t action_nvec[CENV_MAX_ACTION_DIMS]; /* discrete sizes per component */
    float action_low[CENV_MAX_ACTION_DIMS];    /* continuous bounds per component */
    float action_high[CENV_MAX_ACTION_DIMS];
    int has_mask;                         /* 1: writes action_mask[agent, sum(nvec)] (option `mask`) */
} cenv_spaces;

/* Everything the vectorized layer needs to know about one env type (made by CENV_ENV). */
typedef struct {
    const char *name;
    const char *description;
    size_t env_size;
    size_t state_offset; /* offsetof(TYPE, log): bytes [state_offset, env_size) are what the env owns */
    int num_pointers;    /* borrowed buffer pointers before `log`: 5, or 6 with option mask */
    int has_mask;
    int agents_wait;
    const cenv_param *params;
    int num_params;
    const char *const *log_names;
    int num_log;
    void (*spaces)(const double *params, cenv_spaces *out);
    void (*init)(void *env, const double *params);
    cenv_rng *(*rng)(void *env);
    float *(*log)(void *env);
    void (*reset)(void *env);
    /* Steps envs [begin, end) of the array `envs` (the env's own step, inlined) and calls
     * after_step(ctx, i, ended) for each env whose step ended agents' episodes, flagged one of its
     * `agents` agents (terminal or truncation: so a step that flags an agent but returns 0 is checked
     * too) or wrote a statistic to its log, or for every env when `every` is set. Returns 0, or the
     * first non-zero after_step returned (the rest of the range is then still stepped). */
    int (*step_range)(void *envs, int64_t begin, int64_t end, int every, int agents,
                      int (*after_step)(void *ctx, int64_t index, int ended), void *ctx);
    void (*reset_agent)(void *env, int agent);                   /* option reset_agent, or NULL */
    int (*render)(const void *env, char *out, int size);         /* option render, or NULL */
    int (*set_state)(void *env, const double *state, int n);     /* option set_state, or NULL */
    int (*pixels)(const void *env, uint8_t *rgb, int width, int height); /* option pixels, or NULL */
    int (*error)(const void *env, char *out, int size);          /* option error, or NULL */
    /* What the env struct's buffer pointers are typed as (CENV_ENV reads them with _Generic), which its
     * spaces must agree with: CENV_DTYPE_FLOAT32 for `float *observations`, CENV_DTYPE_UINT8 for
     * `uint8_t *`, -1 for another type; float_actions 1 for `float *actions`, 0 for `int32_t *`, -1
     * for another type. A mismatch would make the env write past its buffers, or read its actions as
     * the wrong type. */
    int obs_dtype;
    int float_actions;
} cenv_spec;

#define CENV__OBS_DTYPE(TYPE)                                                                        \
    _Generic(((TYPE *)0)->observations, float *: CENV_DTYPE_FLOAT32, uint8_t *: CENV_DTYPE_UINT8, default: -1)
#define CENV__FLOAT_ACTIONS(TYPE) _Generic(((TYPE *)0)->actions, float *: 1, int32_t *: 0, default: -1)

/* A borrowed buffer FIELD of TYPE that must have the pointer type PTR (checked when CENV_ENV compiles):
 * a `double *rewards` or `int *terminals` would write past the buffers the vectorized layer hands over. */
#define CENV__BUFFER_TYPE(TYPE, FIELD, PTR)                                                          \
    _Static_assert(_Generic(((TYPE *)0)->FIELD, PTR: 1, default: 0),                                 \
                   #TYPE "." #FIELD " must be declared " #PTR " (BUILD.md, The env contract)");

#define CENV_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* The index of the first statistic of a Log (`count` floats) that is not 0, which its step wrote, or -1
 * when none is. A step that ends no episode must write none (the Log holds the sums over the episodes that
 * end in that step and is cleared before the next), so the vectorized layer reports such a step (naming
 * that statistic) instead of dropping the values. */
static inline int cenv__first_logged(const float *log, size_t count) {
    for (size_t k = 0; k < count; k++)
        if (log[k] != 0.0f) return (int)k;
    return -1;
}

/* ---- CENV_ENV's machinery: one wrapper and one initializer per option word ---- */

#define CENV__LAYOUT_RULE(TYPE)                                                                   \
    #TYPE " breaks the env struct layout rule (cenv/core.h, BUILD.md): it must start with the "    \
          "borrowed buffer pointers observations, actions, rewards, terminals, truncations (then "  \
          "action_mask, only with the `mask` option), followed immediately by `log`; move every "   \
          "other field after `log` (no pointer may lie in the saved bytes from `log` on)"

/* CENV__MASK_<word> is + 1 for `mask` and nothing for the other words: the option count of `mask`. */
#define CENV__MASK_none(NAME, TYPE)
#define CENV__MASK_mask(NAME, TYPE) +1
#define CENV__MASK_agents_wait(NAME, TYPE)
#define CENV__MASK_reset_agent(NAME, TYPE)
#define CENV__MASK_render(NAME, TYPE)
#define CENV__MASK_set_state(NAME, TYPE)
#define CENV__MASK_pixels(NAME, TYPE)
#define CENV__MASK_error(NAME, TYPE)
#define CENV__WRAP_none(NAME, TYPE)
#define CENV__INIT_none(NAME, TYPE)
#define CENV__WRAP_mask(NAME, TYPE) \
    _Static_assert(offsetof(TYPE, action_mask) == 5 * sizeof(void *), CENV__LAYOUT_RULE(TYPE)); \
    CENV__BUFFER_TYPE(TYPE, action_mask, uint8_t *)
#define CENV__INIT_mask(NAME, TYPE) .has_mask = 1,
#define CENV__WRAP_agents_wait(NAME, TYPE)
#define CENV__INIT_agents_wait(NAME, TYPE) .agents_wait = 1,
#define CENV__WRAP_reset_agent(NAME, TYPE) \
    static void NAME##_reset_agent_v(void *e, int agent) { NAME##_reset_agent((TYPE *)e, agent); }
#define CENV__INIT_reset_agent(NAME, TYPE) .reset_agent = NAME##_reset_agent_v,
#define CENV__WRAP_render(NAME, TYPE)                                        \
    static int NAME##_render_v(const void *e, char *out, int size) {         \
        return NAME##_render((const TYPE *)e, out, size);                    \
    }
#define CENV__INIT_render(NAME, TYPE) .render = NAME##_render_v,
#define CENV__WRAP_set_state(NAME, TYPE)                                     \
    static int NAME##_set_state_v(void *e, const double *state, int n) {     \
        return NAME##_set_state((TYPE *)e, state, n);                        \
    }
#define CENV__INIT_set_state(NAME, TYPE) .set_state = NAME##_set_state_v,
#define CENV__WRAP_pixels(NAME, TYPE)                                                    \
    static int NAME##_pixels_v(const void *e, uint8_t *rgb, int width, int height) {     \
        return NAME##_pixels((const TYPE *)e, rgb, width, height);                       \
    }
#define CENV__INIT_pixels(NAME, TYPE) .pixels = NAME##_pixels_v,
#define CENV__WRAP_error(NAME, TYPE)                                         \
    static int NAME##_error_v(const void *e, char *out, int size) {          \
        return NAME##_error((const TYPE *)e, out, size);                     \
    }
#define CENV__INIT_error(NAME, TYPE) .error = NAME##_error_v,

/* CENV__EACH(M, NAME, TYPE, w1, ..., wk) expands M##_wi(NAME, TYPE) for up to 8 words. */
#define CENV__EACH(M, NAME, TYPE, ...) \
    CENV__EACH_N(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)(M, NAME, TYPE, __VA_ARGS__)
#define CENV__EACH_N(_1, _2, _3, _4, _5, _6, _7, _8, N, ...) CENV__EACH_##N
#define CENV__EACH_1(M, N, T, a) M##_##a(N, T)
#define CENV__EACH_2(M, N, T, a, ...) M##_##a(N, T) CENV__EACH_1(M, N, T, __VA_ARGS__)
#define CENV__EACH_3(M, N, T, a, ...) M##_##a(N, T) CENV__EACH_2(M, N, T, __VA_ARGS__)
#define CENV__EACH_4(M, N, T, a, ...) M##_##a(N, T) CENV__EACH_3(M, N, T, __VA_ARGS__)
#define CENV__EACH_5(M, N, T, a, ...) M##_##a(N, T) CENV__EACH_4(M, N, T, __VA_ARGS__)
#define CENV__EACH_6(M, N, T, a, ...) M##_##a(N, T) CENV__EACH_5(M, N, T, __VA_ARGS__)
#define CENV__EACH_7(M, N, T, a, ...) M##_##a(N, T) CENV__EACH_6(M, N, T, __VA_ARGS__)
#define CENV__EACH_8(M, N, T, a, ...) M##_##a(N, T) CENV__EACH_7(M, N, T, __VA_ARGS__)

/* Defines `<NAME>_spec` from <NAME>_spaces, _init, _reset, _step, the arrays <NAME>_params and
 * <NAME>_log_names, the env struct TYPE and its Log LOGTYPE, and the option words that follow
 * (mask, reset_agent, agents_wait, render, set_state, pixels, error; see the top of this file). */
#define CENV_ENV(NAME, TYPE, LOGTYPE, DESCRIPTION, ...)                                           \
    _Static_assert(CENV_COUNT(NAME##_params) >= 1, #NAME "_params must declare at least one parameter: " \
                   "give it one, e.g. a max_steps for a truncation (BUILD.md, The env contract)");  \
    _Static_assert(sizeof(LOGTYPE) == sizeof(float) * CENV_COUNT(NAME##_log_names),               \
                   #LOGTYPE " must hold exactly one float per name in " #NAME "_log_names");      \
    _Static_assert(offsetof(TYPE, observations) == 0 && offsetof(TYPE, actions) == sizeof(void *) && \
                       offsetof(TYPE, rewards) == 2 * sizeof(void *) &&                           \
                       offsetof(TYPE, terminals) == 3 * sizeof(void *) &&                         \
                       offsetof(TYPE, truncations) == 4 * sizeof(void *),                         \
                   CENV__LAYOUT_RULE(TYPE));                                                      \
    CENV__BUFFER_TYPE(TYPE, rewards, float *)                                                     \
    CENV__BUFFER_TYPE(TYPE, terminals, uint8_t *)                                                 \
    CENV__BUFFER_TYPE(TYPE, truncations, uint8_t *)                                               \
    enum { NAME##_mask_option = 0 CENV__EACH(CENV__MASK, NAME, TYPE, none, ##__VA_ARGS__) };        \
    _Static_assert(offsetof(TYPE, log) == (5 + NAME##_mask_option) * sizeof(void *),             \
                   CENV__LAYOUT_RULE(TYPE));                                                      \
    static void NAME##_init_v(void *e, const double *p) { NAME##_init((TYPE *)e, p); }            \
    static cenv_rng *NAME##_rng_v(void *e) { return &((TYPE *)e)->rng; }                          \
    static float *NAME##_log_v(void *e) { return (float *)&((TYPE *)e)->log; }                    \
    static void NAME##_reset_v(void *e) { NAME##_reset((TYPE *)e); }                              \
    static int NAME##_step_range_v(void *envs, int64_t begin, int64_t end, int every, int agents, \
                                   int (*after_step)(void *, int64_t, int), void *ctx) {          \
        TYPE *env = (TYPE *)envs;                                                                 \
        int failed = 0;                                                                           \
        if (end > begin) { /* rewards 0 and flags clear unless the step sets them: the range's rows, */ \
            size_t rows = (size_t)(end - begin) * (size_t)agents; /* contiguous (cenv_bind), at once */ \
            memset(env[begin].rewards, 0, sizeof(float) * rows);                                  \
            memset(env[begin].terminals, 0, rows);                                                \
            memset(env[begin].truncations, 0, rows);                                              \
        }                                                                                         \
        for (int64_t i = begin; i < end; i++) {                                                   \
            memset(&env[i].log, 0, sizeof(env[i].log)); /* log holds this step's ends alone */    \
            int ended = NAME##_step(&env[i]);                                                     \
            if (ended == 0 && !every) {                                                           \
                int flagged = 0;                                                                  \
                for (int a = 0; a < agents; a++) flagged |= env[i].terminals[a] | env[i].truncations[a]; \
                size_t logs = sizeof(env[i].log) / sizeof(float);                                \
                if (!flagged && cenv__first_logged((const float *)&env[i].log, logs) < 0)         \
                    continue; /* statistics without an end: after_step reports them */            \
            }                                                                                     \
            int rc = after_step(ctx, i, ended);                                                   \
            if (failed == 0) failed = rc;                                                         \
        }                                                                                         \
        return failed;                                                                            \
    }                                                                                             \
    CENV__EACH(CENV__WRAP, NAME, TYPE, none, ##__VA_ARGS__)                                       \
    static const cenv_spec NAME##_spec = {                                                        \
        .name = #NAME, .description = DESCRIPTION, .env_size = sizeof(TYPE),                      \
        .state_offset = offsetof(TYPE, log), .num_pointers = (int)(offsetof(TYPE, log) / sizeof(void *)), \
        .params = NAME##_params,                                                                  \
        .num_params = CENV_COUNT(NAME##_params), .log_names = NAME##_log_names,                   \
        .num_log = CENV_COUNT(NAME##_log_names), .spaces = NAME##_spaces, .init = NAME##_init_v,  \
        .rng = NAME##_rng_v, .log = NAME##_log_v, .reset = NAME##_reset_v,                        \
        .step_range = NAME##_step_range_v, .obs_dtype = CENV__OBS_DTYPE(TYPE),                     \
        .float_actions = CENV__FLOAT_ACTIONS(TYPE),                                               \
        CENV__EACH(CENV__INIT, NAME, TYPE, none, ##__VA_ARGS__)};

#endif

/* What every environment header includes: the spec types that describe an environment to the
 * vectorized layer (api.c), and CENV_DEFINE, which turns an env's functions into its spec.
 *
 * Conventions an environment struct must follow (see BUILD.md, "Adding an environment"):
 *   borrowed buffer pointers first, named observations, actions, rewards, terminals, truncations
 *   (and then action_mask when the env has one: define it with CENV_DEFINE_MASKED); then `log` (a
 *   floats-only struct holding the sums of the statistics of the episodes that ended in the current
 *   step); then config; then state, which includes `cenv_rng rng`. No pointers other than the
 *   borrowed buffers: everything from `log` to the end of the struct is saved and loaded as plain
 *   bytes (cenv_save_state / cenv_load_state). CENV_DEFINE checks at compile time that `log` follows
 *   the buffer pointers immediately, so no pointer lies in the saved bytes.
 * The step contract: a step that returns ended > 0 ends the episode of every agent of the env (each
 *   has its terminal or truncation flag set) and returns ended == agents_per_env; the vectorized
 *   layer then resets the whole env. Anything else fails the step with CENV_ERR_ENV.
 */
#ifndef CENV_CORE_H
#define CENV_CORE_H

#include <stddef.h>
#include <stdint.h>
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
    int has_mask;                         /* 1: writes action_mask[agent, sum(nvec)] */
} cenv_spaces;

/* The buffers of one env (its slice of the vectorized buffers). */
typedef struct {
    void *observations;
    void *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    uint8_t *action_mask;
} cenv_io;

/* Called by an env's step loop for env `index` whose step returned `ended` != 0 (agent-episodes ended,
 * statistics in its log), before it is reset. Returns 0, or non-zero when the env broke the step
 * contract: the env is then not reset (the caller reports the error). */
typedef int (*cenv_on_episode_end)(void *ctx, int64_t index, int ended);

/* Everything the vectorized layer needs to know about one env type. */
typedef struct {
    const char *name;
    const char *description;
    size_t env_size;
    size_t state_offset; /* offsetof(TYPE, log): bytes [state_offset, env_size) are what the env owns */
    int has_mask;        /* defined with CENV_DEFINE_MASKED: binds action_mask */
    const cenv_param *params;
    int num_params;
    const char *const *log_names;
    int num_log;
    /* Fills the spaces for these parameters (in declared order). */
    void (*spaces)(const double *params, cenv_spaces *out);
    /* Zeroes nothing itself: env memory arrives zeroed; stores config from params. */
    void (*init)(void *env, const double *params);
    void (*bind)(void *env, const cenv_io *io);
    cenv_rng *(*rng)(void *env);
    float *(*log)(void *env);
    /* Starts an episode: writes the initial observation (and mask). */
    void (*reset)(void *env);
    /* Steps envs [begin, end) of the array `envs` (the env's own step, inlined): for each, applies the
     * actions and writes observation, rewards, terminals, truncations; an env whose step returns
     * non-zero (agent-episodes ended, statistics summed into its `log`) is reported to on_end and then,
     * unless on_end refuses it, reset in the same call. Returns the number of agent-episodes that
     * ended in the envs that were reset. */
    int64_t (*step_range)(void *envs, int64_t begin, int64_t end, cenv_on_episode_end on_end,
                          void *ctx);
    /* Optional, for tests: overwrite the physical state with n doubles. Returns 0 on success. */
    int (*set_state)(void *env, const double *state, int n);
} cenv_spec;

#define CENV_COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* Binds the standard buffer fields (every env). */
#define CENV_BIND_FIELDS(env, io)                                                      \
    do {                                                                               \
        (env)->observations = (io)->observations;                                      \
        (env)->actions = (io)->actions;                                                \
        (env)->rewards = (io)->rewards;                                                \
        (env)->terminals = (io)->terminals;                                            \
        (env)->truncations = (io)->truncations;                                        \
    } while (0)

/* Binds the action mask (envs defined with CENV_DEFINE_MASKED, whose struct has `action_mask` right
 * after `truncations`). CENV_BIND_MASK_0 / _1 are what CENV_DEFINE_FULL picks for HAS_MASK 0 / 1. */
#define CENV_BIND_MASK(env, io) ((env)->action_mask = (io)->action_mask)
#define CENV_BIND_MASK_0(env, io) ((void)(env), (void)(io))
#define CENV_BIND_MASK_1(env, io) CENV_BIND_MASK(env, io)

#define CENV_LAYOUT_RULE(TYPE)                                                                   \
    #TYPE " breaks the env struct layout rule (cenv/core.h, BUILD.md): it must start with the "   \
          "borrowed buffer pointers observations, actions, rewards, terminals, truncations (then " \
          "action_mask, only with CENV_DEFINE_MASKED), followed immediately by `log`; move every " \
          "other field after `log` (no pointer may lie in the saved bytes from `log` on)"
#define CENV_CHECK_MASK_0(TYPE) _Static_assert(1, "")
#define CENV_CHECK_MASK_1(TYPE) \
    _Static_assert(offsetof(TYPE, action_mask) == 5 * sizeof(void *), CENV_LAYOUT_RULE(TYPE))

/* Defines `<name>_spec` from the functions <name>_spaces, <name>_init, <name>_reset, <name>_step,
 * the arrays <name>_params and <name>_log_names, and the types TYPE (env) and LOGTYPE (its Log).
 * SET_STATE is a function or NULL; HAS_MASK is 0, or 1 for an env that writes an action mask (its
 * struct then has `action_mask` after `truncations`). Use CENV_DEFINE or CENV_DEFINE_MASKED. */
#define CENV_DEFINE_FULL(NAME, TYPE, LOGTYPE, DESCRIPTION, SET_STATE, HAS_MASK)                  \
    _Static_assert(sizeof(LOGTYPE) == sizeof(float) * CENV_COUNT(NAME##_log_names),              \
                   #LOGTYPE " must hold exactly one float per name in " #NAME "_log_names");     \
    _Static_assert(offsetof(TYPE, observations) == 0 && offsetof(TYPE, actions) == sizeof(void *) && \
                       offsetof(TYPE, rewards) == 2 * sizeof(void *) &&                          \
                       offsetof(TYPE, terminals) == 3 * sizeof(void *) &&                        \
                       offsetof(TYPE, truncations) == 4 * sizeof(void *),                        \
                   CENV_LAYOUT_RULE(TYPE));                                                      \
    CENV_CHECK_MASK_##HAS_MASK(TYPE);                                                            \
    _Static_assert(offsetof(TYPE, log) == (5 + HAS_MASK) * sizeof(void *), CENV_LAYOUT_RULE(TYPE)); \
    static void NAME##_init_v(void *e, const double *p) { NAME##_init((TYPE *)e, p); }           \
    static void NAME##_bind_v(void *e, const cenv_io *io) {                                      \
        TYPE *env = (TYPE *)e;                                                                   \
        CENV_BIND_FIELDS(env, io);                                                               \
        CENV_BIND_MASK_##HAS_MASK(env, io);                                                      \
    }                                                                                            \
    static cenv_rng *NAME##_rng_v(void *e) { return &((TYPE *)e)->rng; }                         \
    static float *NAME##_log_v(void *e) { return (float *)&((TYPE *)e)->log; }                   \
    static void NAME##_reset_v(void *e) { NAME##_reset((TYPE *)e); }                             \
    static int64_t NAME##_step_range_v(void *envs, int64_t begin, int64_t end,                   \
                                       cenv_on_episode_end on_end, void *ctx) {                  \
        TYPE *env = (TYPE *)envs;                                                                \
        int64_t episodes = 0;                                                                    \
        for (int64_t i = begin; i < end; i++) {                                                  \
            int ended = NAME##_step(&env[i]);                                                    \
            if (ended == 0) continue;                                                            \
            if (on_end(ctx, i, ended) != 0) continue; /* contract broken: reported, not reset */ \
            NAME##_reset(&env[i]);                                                               \
            episodes += ended;                                                                   \
        }                                                                                        \
        return episodes;                                                                         \
    }                                                                                            \
    static const cenv_spec NAME##_spec = {                                                       \
        #NAME, DESCRIPTION, sizeof(TYPE), offsetof(TYPE, log), HAS_MASK, NAME##_params,          \
        CENV_COUNT(NAME##_params), NAME##_log_names, CENV_COUNT(NAME##_log_names), NAME##_spaces, \
        NAME##_init_v, NAME##_bind_v, NAME##_rng_v, NAME##_log_v, NAME##_reset_v,                \
        NAME##_step_range_v, SET_STATE};

/* An env without an action mask. */
#define CENV_DEFINE(NAME, TYPE, LOGTYPE, DESCRIPTION, SET_STATE) \
    CENV_DEFINE_FULL(NAME, TYPE, LOGTYPE, DESCRIPTION, SET_STATE, 0)

/* An env that writes an action mask (its spaces set has_mask; its struct has `uint8_t *action_mask`
 * right after `truncations`). */
#define CENV_DEFINE_MASKED(NAME, TYPE, LOGTYPE, DESCRIPTION, SET_STATE) \
    CENV_DEFINE_FULL(NAME, TYPE, LOGTYPE, DESCRIPTION, SET_STATE, 1)

#endif

/* The public C API of libcenv: the only exported symbols, all prefixed cenv_.
 *
 * Life of a vectorized env: cenv_create -> (ask for spaces) -> cenv_bind (caller-owned buffers)
 * -> cenv_reset -> cenv_step ... -> cenv_log ... -> cenv_close.
 * Buffers are laid out agent-major: agent a of env e is row e * agents_per_env + a.
 * Errors: functions returning int return 0 (or a count) on success and a negative CENV_ERR_* code on
 * failure; cenv_error(handle) then holds a message. No global state: everything lives in the handle.
 *
 * Every number below is also exported at run time through cenv_num_constants / cenv_constant_name /
 * cenv_constant_value (without the CENV_ prefix), which is where Python reads them: this file is
 * their one source. A test checks that every #define here is in that table and that every
 * CENV_EXPORT prototype matches jaxlab/env/library.py's ctypes SIGNATURES. */
#ifndef CENV_API_H
#define CENV_API_H

#include <stdint.h>

#define CENV_ABI_VERSION 5

#define CENV_ERR_NULL -1       /* NULL handle: closed or never created */
#define CENV_ERR_UNBOUND -2    /* step/reset before cenv_bind */
#define CENV_ERR_ACTION -3     /* an action out of range or NaN; see cenv_bad_action */
#define CENV_ERR_ARGUMENT -4   /* a bad argument; see cenv_error */
#define CENV_ERR_NOT_RESET -5  /* cenv_step before cenv_reset or cenv_load_state */
#define CENV_ERR_BUSY -6       /* the handle is in a call from another thread; no message is written */
#define CENV_ERR_ENV -7        /* an env broke its contract (see BUILD.md); see cenv_error */
#define CENV_ERR_MASK -8       /* an acting agent's action mask allows no action; see cenv_error */

#define CENV_DTYPE_FLOAT32 0   /* observation dtypes */
#define CENV_DTYPE_UINT8 1

#define CENV_ACTION_DISCRETE 0 /* action kinds: int32 actions, one component */
#define CENV_ACTION_MULTI_DISCRETE 1 /* int32 actions, action_ndim components */
#define CENV_ACTION_CONTINUOUS 2     /* float32 actions, action_ndim components */

#define CENV_MAX_CHUNKS 64      /* envs are split into at most this many chunks; threads <= chunks */
#define CENV_ERROR_LEN 512      /* bytes of an error message, NUL included */
#define CENV_MAX_PARAMS 16      /* parameters per env type */
#define CENV_MAX_LOG 32         /* statistics (log fields) per env type */
#define CENV_MAX_OBS_DIMS 4     /* dimensions of an observation (per agent) */
#define CENV_MAX_ACTION_DIMS 16 /* components of an action (per agent) */
#define CENV_MAX_FRAME_SIDE 4096 /* pixels: the widest and tallest picture cenv_pixels draws */

#define CENV_ENV_MASK 1         /* cenv_env_flags bits: the CENV_ENV options of an env type */
#define CENV_ENV_RESET_AGENT 2
#define CENV_ENV_AGENTS_WAIT 4
#define CENV_ENV_RENDER 8
#define CENV_ENV_SET_STATE 16
#define CENV_ENV_PIXELS 32

#define CENV_EXPORT __attribute__((visibility("default")))

typedef struct cenv_vec cenv_vec;

CENV_EXPORT int cenv_abi_version(void);

/* The constants above by index, named without the CENV_ prefix ("ERR_BUSY", "MAX_CHUNKS", ...).
 * cenv_constant_name returns NULL and cenv_constant_value 0 for an index out of range. */
CENV_EXPORT int cenv_num_constants(void);
CENV_EXPORT const char *cenv_constant_name(int index);
CENV_EXPORT int64_t cenv_constant_value(int index);

/* The registry: env types by index. */
CENV_EXPORT int cenv_num_env_types(void);
CENV_EXPORT const char *cenv_env_name(int type);
CENV_EXPORT const char *cenv_env_description(int type);
CENV_EXPORT int cenv_num_params(int type);
/* Fills the parameter's name, help, default, range and is_int. Returns 0, or -4 for a bad index. */
CENV_EXPORT int cenv_param_info(int type, int index, const char **name, const char **help,
                                double *default_value, double *min_value, double *max_value,
                                int *is_int);
CENV_EXPORT int cenv_num_log_fields(int type);
CENV_EXPORT const char *cenv_log_field_name(int type, int index);
/* The CENV_ENV options of env type `type` as CENV_ENV_* bits, or CENV_ERR_ARGUMENT. */
CENV_EXPORT int cenv_env_flags(int type);

/* Creates num_envs envs of registry type `type` with params (num_params doubles in declared order),
 * split across num_threads threads. Returns NULL on failure with a message written into err. */
CENV_EXPORT cenv_vec *cenv_create(int type, int64_t num_envs, uint64_t seed, const double *params,
                                  int num_params, int num_threads, char *err, int64_t err_len);

/* A handle that only describes the spaces of env type `type` with these params: it has no envs and
 * no threads. Only the space accessors below are valid on it; bind, reset, step, log, set_state and
 * the state functions return CENV_ERR_ARGUMENT. Free it with cenv_close. Returns NULL on failure
 * with a message written into err (as cenv_create). */
CENV_EXPORT cenv_vec *cenv_describe(int type, const double *params, int num_params, char *err,
                                    int64_t err_len);

/* Spaces of a created (or described) vector; they depend on the params. Shapes are per agent:
 * obs_shape writes obs_ndim values, action_nvec and action_bounds action_ndim values. */
CENV_EXPORT int cenv_agents_per_env(const cenv_vec *vec);
CENV_EXPORT int cenv_obs_ndim(const cenv_vec *vec);
CENV_EXPORT void cenv_obs_shape(const cenv_vec *vec, int64_t *out);
CENV_EXPORT int cenv_obs_dtype(const cenv_vec *vec);
CENV_EXPORT int cenv_action_kind(const cenv_vec *vec);
CENV_EXPORT int cenv_action_ndim(const cenv_vec *vec);
CENV_EXPORT void cenv_action_nvec(const cenv_vec *vec, int64_t *out);
CENV_EXPORT void cenv_action_bounds(const cenv_vec *vec, float *low, float *high);
CENV_EXPORT int cenv_has_mask(const cenv_vec *vec);
/* Entries per agent of the action mask: sum(nvec) when the env has a mask, else 0. */
CENV_EXPORT int64_t cenv_mask_width(const cenv_vec *vec);

/* Hands the vector its buffers (owned by the caller, alive until close): observations[A, obs...],
 * actions[A, ndim] (int32 or float32), rewards[A] float32, terminals[A] and truncations[A] uint8,
 * action_mask[A, sum(nvec)] uint8 (required when the env has a mask, else ignored),
 * final_observations[A, obs...] or NULL: when given, an agent whose episode ended in a step gets its
 * last observation (the one before its reset or respawn) written there; active[A] uint8 (required
 * for an env with option agents_wait, else ignored): 1 when the agent acts in the step, 0 while it
 * waits for its env's reset (its rows then read reward 0, terminal 1). */
CENV_EXPORT int cenv_bind(cenv_vec *vec, void *observations, void *actions, float *rewards,
                          uint8_t *terminals, uint8_t *truncations, uint8_t *action_mask,
                          void *final_observations, uint8_t *active);

/* Strict masks (the default, strict != 0): cenv_step refuses an action outside its agent's mask
 * (CENV_ERR_ACTION) and a mask row that allows no action (CENV_ERR_MASK), naming the env, the agent,
 * the step and the legal actions, before stepping anything. strict == 0 checks neither. */
CENV_EXPORT int cenv_set_mask_check(cenv_vec *vec, int strict);

/* Writes a text frame of env `index` into out (size bytes, NUL-terminated) when its type has the
 * render option: returns the frame's length (which may exceed size - 1: it was cut), or
 * CENV_ERR_ARGUMENT when it has none or index is out of range, or CENV_ERR_ENV (cenv_error names the env
 * and the value) when its render hook returned a negative number. */
CENV_EXPORT int64_t cenv_render(cenv_vec *vec, int64_t index, char *out, int64_t size);

/* Draws env `index` as an RGB picture into rgb (uint8[height][width][3], row-major, top row first;
 * cleared to black first) when its type has the pixels option: returns 0, or CENV_ERR_ARGUMENT when it
 * has none, index is out of range, rgb is NULL, a side is outside [1, CENV_MAX_FRAME_SIDE] or the env's
 * hook reports that it cannot draw (cenv_error says which). */
CENV_EXPORT int cenv_pixels(cenv_vec *vec, int64_t index, uint8_t *rgb, int width, int height);

/* Calls that touch a vector's envs (bind, reset, step, log, set_state, save/load state) must not
 * overlap: a call made while another thread is inside one returns CENV_ERR_BUSY at once (and writes
 * no message) instead of racing. Serialize them (jaxlab's VecEnv holds a lock).
 * A forked child has a copy of the vector but none of its worker threads: there, cenv_reset and
 * cenv_step of a vector created with num_threads > 1 return CENV_ERR_ARGUMENT (cenv_error says why)
 * instead of waiting for ever. */

/* Optional per-env episode statistics (both buffers, or NULL for both to stop): after each step,
 * env_ended[e] is the number of agent-episodes env e ended in it (0 for most) and, where it is not 0,
 * env_stats[e, :] the sums of its statistics over them (num_log_fields floats, its Log as filled).
 * Costs one clear of env_ended per step while bound. */
CENV_EXPORT int cenv_bind_episode_stats(cenv_vec *vec, float *env_stats, int32_t *env_ended);

/* Starts new episodes in every env. reseed != 0: first seed env i's RNG from (seed, i). */
CENV_EXPORT int cenv_reset(cenv_vec *vec, uint64_t seed, int reseed);

/* Steps every agent of every env with the actions in the actions buffer. Each agent whose episode
 * ends gets its final observation recorded; an env whose agents have all ended is reset, and an agent
 * that ends while others go on respawns (option reset_agent) or waits for that reset (option
 * agents_wait), all in the same call. Validates every action (and strict masks) first and steps
 * nothing if one is bad. Returns the number of agent-episodes that ended, or a negative CENV_ERR_*:
 * CENV_ERR_NOT_RESET before the first cenv_reset or cenv_load_state; CENV_ERR_ACTION / CENV_ERR_MASK
 * for a bad action or mask; CENV_ERR_ENV when an env broke the step contract (core.h; the message
 * names the env; that env is neither reset nor respawned). */
CENV_EXPORT int64_t cenv_step(cenv_vec *vec);

/* After CENV_ERR_ACTION: the offending agent, action component and value. */
CENV_EXPORT void cenv_bad_action(const cenv_vec *vec, int64_t *agent, int *component, double *value);
CENV_EXPORT const char *cenv_error(const cenv_vec *vec);

/* Writes the mean of each statistic (num_log_fields floats) over the agent-episodes ended since the
 * last call, and returns their count (0: out is left zero). Clears the accumulators. */
CENV_EXPORT int64_t cenv_log(cenv_vec *vec, float *out);

/* Test hook: overwrite env `index`'s physical state (env-specific, see its header). */
CENV_EXPORT int cenv_set_state(cenv_vec *vec, int64_t index, const double *state, int n);

/* Saved state: a header (magic "CENVSTAT", ABI version, env name, num_envs, params, per-env state
 * size) followed by each env's owned bytes (its struct from `log` on; no pointers). Statistics not
 * yet collected by cenv_log are not part of it. cenv_state_size gives the bytes needed;
 * cenv_save_state writes them (returns the count, or a negative CENV_ERR_*). cenv_load_state checks
 * the header against this vector (ABI, env, num_envs, params, sizes) and loads every env, or loads
 * nothing and returns CENV_ERR_ARGUMENT with a message in cenv_error. cenv_check_state makes the same
 * checks and loads nothing in any case. */
CENV_EXPORT int64_t cenv_state_size(const cenv_vec *vec);
CENV_EXPORT int64_t cenv_save_state(cenv_vec *vec, void *out, int64_t size);
CENV_EXPORT int cenv_load_state(cenv_vec *vec, const void *in, int64_t size);
CENV_EXPORT int cenv_check_state(cenv_vec *vec, const void *in, int64_t size);

/* Stops and joins the threads and frees everything. NULL is allowed. In a process forked from the one
 * that created the vector (which has none of its threads) it frees the memory only. */
CENV_EXPORT void cenv_close(cenv_vec *vec);

#endif

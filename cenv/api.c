/* The vectorized layer: turns the registry's env specs into the exported cenv_ API (see api.h).
 * Envs are split into at most CENV_MAX_CHUNKS chunks of consecutive envs; episode statistics are
 * summed per chunk and merged in chunk order, and threads take whole chunks, so results are the same
 * for every thread count. */
#ifndef _POSIX_C_SOURCE /* an SDK build defines it first, before the env headers include anything */
#define _POSIX_C_SOURCE 200809L
#endif
#include "api.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core.h"
#ifndef CENV_REGISTRY /* an SDK build (jaxlab build-env) defines its own list before including this file */
#include "registry.h"
#endif

#define CENV_STATE_MAGIC "CENVSTAT"

static const cenv_spec *const cenv_registry[] = CENV_REGISTRY;

/* Every number of api.h, for callers in other languages (see cenv_constant_name). */
typedef struct {
    const char *name;
    int64_t value;
} cenv_constant;

#define CENV_CONSTANT(NAME) {#NAME, CENV_##NAME}
static const cenv_constant cenv_constants[] = {
    CENV_CONSTANT(ABI_VERSION),
    CENV_CONSTANT(ERR_NULL),
    CENV_CONSTANT(ERR_UNBOUND),
    CENV_CONSTANT(ERR_ACTION),
    CENV_CONSTANT(ERR_ARGUMENT),
    CENV_CONSTANT(ERR_NOT_RESET),
    CENV_CONSTANT(ERR_BUSY),
    CENV_CONSTANT(ERR_ENV),
    CENV_CONSTANT(ERR_MASK),
    CENV_CONSTANT(DTYPE_FLOAT32),
    CENV_CONSTANT(DTYPE_UINT8),
    CENV_CONSTANT(ACTION_DISCRETE),
    CENV_CONSTANT(ACTION_MULTI_DISCRETE),
    CENV_CONSTANT(ACTION_CONTINUOUS),
    CENV_CONSTANT(MAX_CHUNKS),
    CENV_CONSTANT(ERROR_LEN),
    CENV_CONSTANT(MAX_PARAMS),
    CENV_CONSTANT(MAX_LOG),
    CENV_CONSTANT(MAX_OBS_DIMS),
    CENV_CONSTANT(MAX_ACTION_DIMS),
    CENV_CONSTANT(MAX_FRAME_SIDE),
    CENV_CONSTANT(ENV_MASK),
    CENV_CONSTANT(ENV_RESET_AGENT),
    CENV_CONSTANT(ENV_AGENTS_WAIT),
    CENV_CONSTANT(ENV_RENDER),
    CENV_CONSTANT(ENV_SET_STATE),
    CENV_CONSTANT(ENV_PIXELS),
};

enum { JOB_STEP = 0, JOB_RESET = 1, JOB_QUIT = 2 };

typedef struct {
    double sums[CENV_MAX_LOG];
    int64_t count;
} cenv_chunk_log;

/* How an env broke the step contract (kind != BREACH_NONE), found while stepping a chunk. */
enum { BREACH_NONE = 0, BREACH_COUNT, BREACH_BOTH_FLAGS, BREACH_PARTIAL_END, BREACH_FAILED, BREACH_LOG_WITHOUT_END };
typedef struct {
    int kind;
    int64_t env;
    int ended;   /* what its step returned */
    int flagged; /* agents with a terminal or truncation flag (or the agent with both, or the Log field
                    written by a step that ended no episode) */
    int waiting_flagged; /* agents waiting for the env's reset (agents_wait) that its step flagged */
} cenv_breach;

typedef struct {
    cenv_vec *vec;
    int index;
    pthread_t thread;
} cenv_worker;

/* A vector of envs, or (envs == NULL) a handle from cenv_describe that only knows the spaces. */
struct cenv_vec {
    const cenv_spec *spec;
    int type;
    double params[CENV_MAX_PARAMS];
    cenv_spaces spaces;
    int64_t num_envs;
    int64_t num_agents;
    int64_t obs_bytes;   /* per agent */
    int64_t mask_width;  /* per agent, sum(nvec) when masked */
    unsigned char *envs; /* num_envs * spec->env_size bytes; NULL for a cenv_describe handle */
    unsigned char *observations; /* bound buffers */
    unsigned char *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    uint8_t *action_mask;        /* NULL: the env has none */
    uint8_t *active;             /* [num_agents], only for option agents_wait: 0 while an agent waits */
    unsigned char *final_obs;    /* NULL: not requested */
    float *env_stats;            /* [num_envs, num_log] or NULL: per-env statistics of this step */
    int32_t *env_ended;          /* [num_envs] or NULL: agent-episodes each env ended in this step */
    int bound;
    int was_reset;               /* cenv_reset or cenv_load_state ran: cenv_step may run */
    int mask_check;              /* 1 (default): refuse an action outside its mask, or a mask with none */
    int64_t steps;               /* cenv_step calls that stepped, for messages */
    pthread_mutex_t call_mutex;  /* held during every call that touches the envs (trylock: BUSY) */
    /* chunks */
    int num_chunks;
    int64_t chunk_begin[CENV_MAX_CHUNKS + 1];
    cenv_chunk_log chunk_log[CENV_MAX_CHUNKS];
    int64_t chunk_episodes[CENV_MAX_CHUNKS];
    cenv_breach chunk_breach[CENV_MAX_CHUNKS]; /* the first env of each chunk that broke the contract */
    /* threads: thread t runs chunks [thread_chunk[t], thread_chunk[t + 1]) */
    int num_threads;
    pid_t pid;                   /* the process that started the worker threads (a fork has none) */
    int thread_chunk[CENV_MAX_CHUNKS + 1];
    cenv_worker *workers;
    pthread_mutex_t mutex;
    pthread_cond_t work_ready;
    pthread_cond_t work_done;
    uint64_t generation;
    int pending;
    int job;
    uint64_t reset_seed;
    int reset_reseed;
    /* errors */
    int64_t bad_agent;
    int bad_component;
    double bad_value;
    char error[CENV_ERROR_LEN];
};

static void set_error(char *buf, int64_t len, const char *fmt, ...) {
    if (buf == NULL || len <= 0) return;
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, (size_t)len, fmt, args);
    va_end(args);
}

static const cenv_spec *spec_at(int type) {
    if (type < 0 || type >= CENV_COUNT(cenv_registry)) return NULL;
    return cenv_registry[type];
}

static void *env_at(const cenv_vec *vec, int64_t i) { return vec->envs + (size_t)i * vec->spec->env_size; }

int cenv_abi_version(void) { return CENV_ABI_VERSION; }
int cenv_num_constants(void) { return CENV_COUNT(cenv_constants); }
const char *cenv_constant_name(int index) {
    return index >= 0 && index < CENV_COUNT(cenv_constants) ? cenv_constants[index].name : NULL;
}
int64_t cenv_constant_value(int index) {
    return index >= 0 && index < CENV_COUNT(cenv_constants) ? cenv_constants[index].value : 0;
}
int cenv_num_env_types(void) { return CENV_COUNT(cenv_registry); }
const char *cenv_env_name(int type) { return spec_at(type) ? spec_at(type)->name : NULL; }
const char *cenv_env_description(int type) { return spec_at(type) ? spec_at(type)->description : NULL; }
int cenv_num_params(int type) { return spec_at(type) ? spec_at(type)->num_params : CENV_ERR_ARGUMENT; }

int cenv_param_info(int type, int index, const char **name, const char **help, double *default_value,
                    double *min_value, double *max_value, int *is_int) {
    const cenv_spec *spec = spec_at(type);
    if (spec == NULL || index < 0 || index >= spec->num_params) return CENV_ERR_ARGUMENT;
    const cenv_param *p = &spec->params[index];
    *name = p->name;
    *help = p->help;
    *default_value = p->default_value;
    *min_value = p->min_value;
    *max_value = p->max_value;
    *is_int = p->is_int;
    return 0;
}

int cenv_num_log_fields(int type) { return spec_at(type) ? spec_at(type)->num_log : CENV_ERR_ARGUMENT; }
const char *cenv_log_field_name(int type, int index) {
    const cenv_spec *spec = spec_at(type);
    if (spec == NULL || index < 0 || index >= spec->num_log) return NULL;
    return spec->log_names[index];
}

/* ---- work on a range of chunks (runs on any thread) ---- */

typedef struct {
    cenv_vec *vec;
    int chunk;
} cenv_end_ctx;

static int breach(cenv_vec *vec, int chunk, int kind, int64_t env, int ended, int flagged, int waiting_flagged) {
    cenv_breach *b = &vec->chunk_breach[chunk];
    if (b->kind == BREACH_NONE) {
        b->kind = kind;
        b->env = env;
        b->ended = ended;
        b->flagged = flagged;
        b->waiting_flagged = waiting_flagged;
    }
    return 1;
}

/* After env `index` stepped (its step returned `ended`): overrides the rows of agents that wait
 * (option agents_wait), checks the step contract, records each ending agent's final observation and
 * the env's statistics, then resets the env (every agent ended or waits), respawns the ending agents
 * (option reset_agent) or lets them wait (option agents_wait). Returns 0, or 1 after recording a
 * breach of the contract (the env is then neither reset nor respawned). */
static int after_step(void *ctx, int64_t index, int ended) {
    cenv_end_ctx *end = (cenv_end_ctx *)ctx;
    cenv_vec *vec = end->vec;
    const cenv_spec *spec = vec->spec;
    int apa = vec->spaces.agents_per_env;
    int64_t a0 = index * apa;
    uint8_t *terminals = vec->terminals + a0, *truncations = vec->truncations + a0;
    uint8_t *active = vec->active == NULL ? NULL : vec->active + a0;
    int flagged = 0, waiting = 0, waiting_flagged = 0;
    if (ended < 0) return breach(vec, end->chunk, BREACH_FAILED, index, ended, 0, 0); /* the env says it broke */
    for (int a = 0; a < apa; a++) {
        if (active != NULL && !active[a]) { /* waits for the env's reset: its rows are not the env's */
            waiting_flagged += (terminals[a] | truncations[a]) != 0; /* cleared before the step: the env's */
            vec->rewards[a0 + a] = 0.0f;
            terminals[a] = 1;
            truncations[a] = 0;
            if (vec->action_mask != NULL)
                memset(vec->action_mask + (a0 + a) * vec->mask_width, 1, (size_t)vec->mask_width);
            waiting++;
            continue;
        }
        if (terminals[a] && truncations[a]) return breach(vec, end->chunk, BREACH_BOTH_FLAGS, index, ended, a, 0);
        flagged += (terminals[a] | truncations[a]) != 0;
    }
    if (flagged != ended) return breach(vec, end->chunk, BREACH_COUNT, index, ended, flagged, waiting_flagged);
    if (ended == 0) {
        int field = cenv__first_logged(spec->log(env_at(vec, index)), (size_t)spec->num_log);
        return field < 0 ? 0 : breach(vec, end->chunk, BREACH_LOG_WITHOUT_END, index, 0, field, 0);
    }
    if (flagged + waiting < apa && spec->reset_agent == NULL && !spec->agents_wait)
        return breach(vec, end->chunk, BREACH_PARTIAL_END, index, ended, flagged, 0);
    if (vec->final_obs != NULL) {
        for (int a = 0; a < apa; a++) {
            if (active != NULL && !active[a]) continue;
            if (!(terminals[a] | truncations[a])) continue;
            size_t at = (size_t)((a0 + a) * vec->obs_bytes);
            memcpy(vec->final_obs + at, vec->observations + at, (size_t)vec->obs_bytes);
        }
    }
    void *env = env_at(vec, index);
    const float *stats = spec->log(env);
    cenv_chunk_log *log = &vec->chunk_log[end->chunk];
    for (int f = 0; f < spec->num_log; f++) log->sums[f] += (double)stats[f];
    log->count += ended;
    vec->chunk_episodes[end->chunk] += ended;
    if (vec->env_ended != NULL) {
        memcpy(vec->env_stats + (size_t)index * (size_t)spec->num_log, stats, sizeof(float) * (size_t)spec->num_log);
        vec->env_ended[index] = ended;
    }
    if (flagged + waiting == apa) {
        spec->reset(env);
        if (active != NULL) memset(active, 1, (size_t)apa);
    } else {
        for (int a = 0; a < apa; a++) {
            if ((active != NULL && !active[a]) || !(terminals[a] | truncations[a])) continue;
            if (spec->reset_agent != NULL) {
                spec->reset_agent(env, a);
            } else {
                active[a] = 0;
            }
        }
    }
    return 0;
}

static void step_chunk(cenv_vec *vec, int c) {
    cenv_end_ctx ctx = {vec, c};
    vec->chunk_breach[c].kind = BREACH_NONE;
    vec->chunk_episodes[c] = 0;
    if (vec->env_ended != NULL) {
        memset(vec->env_ended + vec->chunk_begin[c], 0,
               sizeof(int32_t) * (size_t)(vec->chunk_begin[c + 1] - vec->chunk_begin[c]));
    }
    vec->spec->step_range(vec->envs, vec->chunk_begin[c], vec->chunk_begin[c + 1], vec->spec->agents_wait,
                          vec->spaces.agents_per_env, after_step, &ctx);
}

static void reset_chunk(cenv_vec *vec, int c) {
    int apa = vec->spaces.agents_per_env;
    for (int64_t i = vec->chunk_begin[c]; i < vec->chunk_begin[c + 1]; i++) {
        void *env = env_at(vec, i);
        if (vec->reset_reseed) cenv_rng_seed(vec->spec->rng(env), vec->reset_seed, (uint64_t)i);
        vec->spec->reset(env);
        if (vec->active != NULL) memset(vec->active + i * apa, 1, (size_t)apa);
    }
}

static void run_chunks(cenv_vec *vec, int job, int thread) {
    for (int c = vec->thread_chunk[thread]; c < vec->thread_chunk[thread + 1]; c++) {
        if (job == JOB_STEP) {
            step_chunk(vec, c);
        } else {
            reset_chunk(vec, c);
        }
    }
}

/* ---- the thread pool: workers 1..num_threads-1 wait for a job; the caller is worker 0 ---- */

static void *worker_main(void *arg) {
    cenv_worker *worker = (cenv_worker *)arg;
    cenv_vec *vec = worker->vec;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&vec->mutex);
        while (vec->generation == seen) pthread_cond_wait(&vec->work_ready, &vec->mutex);
        seen = vec->generation;
        int job = vec->job;
        pthread_mutex_unlock(&vec->mutex);
        if (job == JOB_QUIT) return NULL;
        run_chunks(vec, job, worker->index);
        pthread_mutex_lock(&vec->mutex);
        if (--vec->pending == 0) pthread_cond_signal(&vec->work_done);
        pthread_mutex_unlock(&vec->mutex);
    }
}

static void run_job(cenv_vec *vec, int job) {
    if (vec->num_threads > 1) {
        pthread_mutex_lock(&vec->mutex);
        vec->job = job;
        vec->pending = vec->num_threads - 1;
        vec->generation += 1;
        pthread_cond_broadcast(&vec->work_ready);
        pthread_mutex_unlock(&vec->mutex);
    }
    run_chunks(vec, job, 0);
    if (vec->num_threads > 1) {
        pthread_mutex_lock(&vec->mutex);
        while (vec->pending > 0) pthread_cond_wait(&vec->work_done, &vec->mutex);
        pthread_mutex_unlock(&vec->mutex);
    }
}

static void stop_workers(cenv_vec *vec, int started) {
    if (started > 0) {
        pthread_mutex_lock(&vec->mutex);
        vec->job = JOB_QUIT;
        vec->generation += 1;
        pthread_cond_broadcast(&vec->work_ready);
        pthread_mutex_unlock(&vec->mutex);
        for (int t = 1; t <= started; t++) pthread_join(vec->workers[t].thread, NULL);
    }
}

/* ---- lifecycle ---- */

static int check_params(const cenv_spec *spec, const double *params, int num_params, char *err,
                        int64_t err_len) {
    if (num_params != spec->num_params) {
        set_error(err, err_len, "env '%s' takes %d parameters, got %d", spec->name, spec->num_params,
                  num_params);
        return CENV_ERR_ARGUMENT;
    }
    for (int i = 0; i < num_params; i++) {
        const cenv_param *p = &spec->params[i];
        double v = params[i];
        if (!(v >= p->min_value && v <= p->max_value) || (p->is_int && v != floor(v))) {
            set_error(err, err_len, "env '%s' parameter %s=%g must be %s in [%g, %g]", spec->name,
                      p->name, v, p->is_int ? "an integer" : "a number", p->min_value, p->max_value);
            return CENV_ERR_ARGUMENT;
        }
    }
    return 0;
}

/* Whether the spaces an env's `spaces` function wrote are ones the vectorized layer and jaxlab can use:
 * 0, or CENV_ERR_ARGUMENT with a message naming the env, the field, its value and what it must be.
 * Unchecked, a zero or negative size or an unknown code used to surface far from its cause (a
 * ZeroDivisionError or a reshape error in Python), and an ndim beyond the limits overran the
 * caller's arrays. */
static int check_spaces(const cenv_spec *spec, const cenv_spaces *sp, char *err, int64_t err_len) {
    const char *name = spec->name;
#define SPACES_ERROR(...)                                                                                  \
    do {                                                                                                   \
        char what_[256];                                                                                   \
        snprintf(what_, sizeof(what_), __VA_ARGS__);                                                       \
        set_error(err, err_len, "env '%s' declares %s in %s_spaces() with the parameters given; fix that " \
                  "function (BUILD.md, \"The env contract\")", name, what_, name);                      \
        return CENV_ERR_ARGUMENT;                                                                          \
    } while (0)
    if (sp->agents_per_env < 1) SPACES_ERROR("agents_per_env = %d (at least 1)", sp->agents_per_env);
    if (sp->obs_ndim < 1 || sp->obs_ndim > CENV_MAX_OBS_DIMS)
        SPACES_ERROR("obs_ndim = %d (from 1 to CENV_MAX_OBS_DIMS, %d)", sp->obs_ndim, CENV_MAX_OBS_DIMS);
    int64_t items = 1;
    for (int d = 0; d < sp->obs_ndim; d++) {
        if (sp->obs_shape[d] < 1 || sp->obs_shape[d] > INT32_MAX)
            SPACES_ERROR("obs_shape[%d] = %lld (from 1 to %d)", d, (long long)sp->obs_shape[d], INT32_MAX);
        items *= sp->obs_shape[d];
        if (items > INT32_MAX)
            SPACES_ERROR("an observation of more than %d items per agent (obs_shape[0..%d])", INT32_MAX, d);
    }
    if (sp->obs_dtype != CENV_DTYPE_FLOAT32 && sp->obs_dtype != CENV_DTYPE_UINT8)
        SPACES_ERROR("obs_dtype = %d (CENV_DTYPE_FLOAT32 or CENV_DTYPE_UINT8)", sp->obs_dtype);
    int kind = sp->action_kind, ndim = sp->action_ndim;
    if (kind != CENV_ACTION_DISCRETE && kind != CENV_ACTION_MULTI_DISCRETE && kind != CENV_ACTION_CONTINUOUS)
        SPACES_ERROR("action_kind = %d (CENV_ACTION_DISCRETE, CENV_ACTION_MULTI_DISCRETE or "
                     "CENV_ACTION_CONTINUOUS)", kind);
    if (kind == CENV_ACTION_DISCRETE && ndim != 1)
        SPACES_ERROR("action_ndim = %d for a discrete action (1; several components: "
                     "CENV_ACTION_MULTI_DISCRETE)", ndim);
    if (ndim < 1 || ndim > CENV_MAX_ACTION_DIMS)
        SPACES_ERROR("action_ndim = %d (from 1 to CENV_MAX_ACTION_DIMS, %d)", ndim, CENV_MAX_ACTION_DIMS);
    for (int d = 0; d < ndim; d++) {
        if (kind != CENV_ACTION_CONTINUOUS && (sp->action_nvec[d] < 1 || sp->action_nvec[d] > INT32_MAX))
            SPACES_ERROR("action_nvec[%d] = %lld (from 1 to %d choices)", d, (long long)sp->action_nvec[d],
                         INT32_MAX);
        if (kind == CENV_ACTION_CONTINUOUS && !(sp->action_low[d] <= sp->action_high[d]))
            SPACES_ERROR("action bounds [%g, %g] for component %d (low <= high, neither NaN)",
                         (double)sp->action_low[d], (double)sp->action_high[d], d);
    }
    if (spec->obs_dtype != sp->obs_dtype) {
        set_error(err, err_len, "env '%s' declares obs_dtype %s in %s_spaces() but its struct has %s: make them "
                  "agree (float *observations with CENV_DTYPE_FLOAT32, uint8_t *observations with "
                  "CENV_DTYPE_UINT8; BUILD.md, \"The env contract\")", name,
                  sp->obs_dtype == CENV_DTYPE_UINT8 ? "CENV_DTYPE_UINT8" : "CENV_DTYPE_FLOAT32", name,
                  spec->obs_dtype == CENV_DTYPE_UINT8     ? "uint8_t *observations"
                  : spec->obs_dtype == CENV_DTYPE_FLOAT32 ? "float *observations"
                                                          : "observations of another type");
        return CENV_ERR_ARGUMENT;
    }
    if (spec->float_actions != (kind == CENV_ACTION_CONTINUOUS)) {
        set_error(err, err_len, "env '%s' declares %s actions in %s_spaces() but its struct has %s: make them "
                  "agree (int32_t *actions for discrete and multi-discrete actions, float *actions for "
                  "continuous ones; BUILD.md, \"The env contract\")", name,
                  kind == CENV_ACTION_CONTINUOUS ? "continuous" : "discrete", name,
                  spec->float_actions == 1   ? "float *actions"
                  : spec->float_actions == 0 ? "int32_t *actions"
                                             : "actions of another type");
        return CENV_ERR_ARGUMENT;
    }
#undef SPACES_ERROR
    return 0;
}

/* A handle holding the spaces of env type `type` with these params, and no envs: what cenv_describe
 * returns and what cenv_create starts from. NULL with a message in err on failure. */
static cenv_vec *new_vec(int type, const double *params, int num_params, char *err, int64_t err_len) {
    const cenv_spec *spec = spec_at(type);
    if (spec == NULL) {
        set_error(err, err_len, "no env type %d (there are %d)", type, CENV_COUNT(cenv_registry));
        return NULL;
    }
    if (spec->num_params > CENV_MAX_PARAMS) {
        set_error(err, err_len, "env '%s' has more than %d params", spec->name, CENV_MAX_PARAMS);
        return NULL;
    }
    if (spec->num_log > CENV_MAX_LOG) {
        set_error(err, err_len, "env '%s' has more than %d log fields", spec->name, CENV_MAX_LOG);
        return NULL;
    }
    if (check_params(spec, params, num_params, err, err_len) != 0) return NULL;
    cenv_spaces spaces;
    memset(&spaces, 0, sizeof(spaces));
    spec->spaces(params, &spaces);
    if (check_spaces(spec, &spaces, err, err_len) != 0) return NULL;
    if (spaces.has_mask != spec->has_mask || spec->num_pointers != 5 + spec->has_mask) {
        set_error(err, err_len,
                  "env '%s' says has_mask=%d in its spaces, has %d buffer pointers before `log` and %s the "
                  "`mask` option of CENV_ENV: an env with an action mask sets has_mask = 1, has "
                  "`uint8_t *action_mask` after `truncations` and names `mask` in CENV_ENV; one without "
                  "has none of the three",
                  spec->name, spaces.has_mask, spec->num_pointers, spec->has_mask ? "names" : "does not name");
        return NULL;
    }
    if (spec->reset_agent != NULL && spec->agents_wait) {
        set_error(err, err_len, "env '%s' names both reset_agent and agents_wait in CENV_ENV: an agent "
                  "whose episode ends either respawns at once or waits; keep one", spec->name);
        return NULL;
    }
    cenv_vec *vec = (cenv_vec *)calloc(1, sizeof(cenv_vec));
    if (vec == NULL) {
        set_error(err, err_len, "out of memory");
        return NULL;
    }
    vec->spec = spec;
    vec->type = type;
    for (int p = 0; p < spec->num_params; p++) vec->params[p] = params[p];
    vec->spaces = spaces;
    int64_t obs_items = 1;
    for (int d = 0; d < vec->spaces.obs_ndim; d++) obs_items *= vec->spaces.obs_shape[d];
    vec->obs_bytes = obs_items * (vec->spaces.obs_dtype == CENV_DTYPE_UINT8 ? 1 : 4);
    if (vec->spaces.has_mask) {
        for (int d = 0; d < vec->spaces.action_ndim; d++) vec->mask_width += vec->spaces.action_nvec[d];
    }
    vec->mask_check = 1;
    pthread_mutex_init(&vec->call_mutex, NULL);
    return vec;
}

cenv_vec *cenv_describe(int type, const double *params, int num_params, char *err, int64_t err_len) {
    return new_vec(type, params, num_params, err, err_len);
}

cenv_vec *cenv_create(int type, int64_t num_envs, uint64_t seed, const double *params, int num_params,
                      int num_threads, char *err, int64_t err_len) {
    if (spec_at(type) != NULL && num_envs < 1) {
        set_error(err, err_len, "num_envs=%lld must be at least 1", (long long)num_envs);
        return NULL;
    }
    int num_chunks = num_envs < CENV_MAX_CHUNKS ? (int)num_envs : CENV_MAX_CHUNKS;
    if (spec_at(type) != NULL && (num_threads < 1 || num_threads > num_chunks)) {
        set_error(err, err_len,
                  "num_threads=%d must be between 1 and %d (min(num_envs, %d) for num_envs=%lld)",
                  num_threads, num_chunks, CENV_MAX_CHUNKS, (long long)num_envs);
        return NULL;
    }
    cenv_vec *vec = new_vec(type, params, num_params, err, err_len);
    if (vec == NULL) return NULL;
    const cenv_spec *spec = vec->spec;
    vec->num_envs = num_envs;
    vec->num_agents = num_envs * vec->spaces.agents_per_env;
    vec->envs = (unsigned char *)calloc((size_t)num_envs, spec->env_size);
    vec->workers = (cenv_worker *)calloc((size_t)num_threads, sizeof(cenv_worker));
    if (vec->envs == NULL || vec->workers == NULL) {
        set_error(err, err_len, "out of memory for %lld envs of %zu bytes", (long long)num_envs,
                  spec->env_size);
        free(vec->workers);
        vec->workers = NULL;
        free(vec->envs);
        vec->envs = NULL;
        cenv_close(vec);
        return NULL;
    }
    for (int64_t i = 0; i < num_envs; i++) {
        void *env = env_at(vec, i);
        spec->init(env, params);
        cenv_rng_seed(spec->rng(env), seed, (uint64_t)i);
    }
    vec->num_chunks = num_chunks;
    for (int c = 0; c <= num_chunks; c++) vec->chunk_begin[c] = num_envs * c / num_chunks;
    vec->num_threads = num_threads;
    for (int t = 0; t <= num_threads; t++) vec->thread_chunk[t] = num_chunks * t / num_threads;
    vec->pid = getpid();
    pthread_mutex_init(&vec->mutex, NULL);
    pthread_cond_init(&vec->work_ready, NULL);
    pthread_cond_init(&vec->work_done, NULL);
    for (int t = 1; t < num_threads; t++) {
        vec->workers[t].vec = vec;
        vec->workers[t].index = t;
        if (pthread_create(&vec->workers[t].thread, NULL, worker_main, &vec->workers[t]) != 0) {
            set_error(err, err_len, "could not start thread %d of %d", t, num_threads);
            stop_workers(vec, t - 1);
            vec->num_threads = 1;
            cenv_close(vec);
            return NULL;
        }
    }
    return vec;
}

/* Starts a call that touches the envs: 0, or the negative CENV_ERR_* the call must return. A call
 * that gets 0 must end with leave(). */
static int enter(const cenv_vec *vec, const char *what) {
    if (vec == NULL) return CENV_ERR_NULL;
    cenv_vec *v = (cenv_vec *)vec; /* the call mutex and the error buffer are not part of the value */
    if (v->envs == NULL) {
        set_error(v->error, CENV_ERROR_LEN,
                  "%s: this handle only describes env '%s' (it came from cenv_describe and has no "
                  "envs); create envs with cenv_create",
                  what, v->spec->name);
        return CENV_ERR_ARGUMENT;
    }
    if (pthread_mutex_trylock(&v->call_mutex) != 0) return CENV_ERR_BUSY;
    return 0;
}

static void leave(const cenv_vec *vec) { pthread_mutex_unlock(&((cenv_vec *)vec)->call_mutex); }

/* A forked child gets a copy of the vector but not its worker threads: a job handed to them would
 * wait for ever. 1 (with a message) when this process is not the one that started them. */
static int workers_gone(cenv_vec *vec, const char *what) {
    if (vec->num_threads < 2 || getpid() == vec->pid) return 0;
    set_error(vec->error, CENV_ERROR_LEN,
              "%s: this vector of '%s' runs on %d threads, started by process %lld; this process (%lld) is "
              "a fork of it and has none of them. Create the envs in this process (or use num_threads=1)",
              what, vec->spec->name, vec->num_threads, (long long)vec->pid, (long long)getpid());
    return 1;
}

int cenv_agents_per_env(const cenv_vec *vec) { return vec->spaces.agents_per_env; }
int cenv_obs_ndim(const cenv_vec *vec) { return vec->spaces.obs_ndim; }
void cenv_obs_shape(const cenv_vec *vec, int64_t *out) {
    for (int d = 0; d < vec->spaces.obs_ndim; d++) out[d] = vec->spaces.obs_shape[d];
}
int cenv_obs_dtype(const cenv_vec *vec) { return vec->spaces.obs_dtype; }
int cenv_action_kind(const cenv_vec *vec) { return vec->spaces.action_kind; }
int cenv_action_ndim(const cenv_vec *vec) { return vec->spaces.action_ndim; }
void cenv_action_nvec(const cenv_vec *vec, int64_t *out) {
    for (int d = 0; d < vec->spaces.action_ndim; d++) out[d] = vec->spaces.action_nvec[d];
}
void cenv_action_bounds(const cenv_vec *vec, float *low, float *high) {
    for (int d = 0; d < vec->spaces.action_ndim; d++) {
        low[d] = vec->spaces.action_low[d];
        high[d] = vec->spaces.action_high[d];
    }
}
int cenv_has_mask(const cenv_vec *vec) { return vec->spaces.has_mask; }
int64_t cenv_mask_width(const cenv_vec *vec) { return vec->mask_width; }

static int bind_locked(cenv_vec *vec, void *observations, void *actions, float *rewards,
                       uint8_t *terminals, uint8_t *truncations, uint8_t *action_mask,
                       void *final_observations, uint8_t *active) {
    if (observations == NULL || actions == NULL || rewards == NULL || terminals == NULL ||
        truncations == NULL || (vec->spaces.has_mask && action_mask == NULL) ||
        (vec->spec->agents_wait && active == NULL)) {
        set_error(vec->error, CENV_ERROR_LEN, "cenv_bind: a required buffer is NULL (env '%s'%s%s)",
                  vec->spec->name, vec->spaces.has_mask ? " needs action_mask" : "",
                  vec->spec->agents_wait ? " needs active" : "");
        return CENV_ERR_ARGUMENT;
    }
    int apa = vec->spaces.agents_per_env;
    size_t action_bytes = (size_t)vec->spaces.action_ndim * 4;
    vec->observations = (unsigned char *)observations;
    vec->actions = (unsigned char *)actions;
    vec->rewards = rewards;
    vec->terminals = terminals;
    vec->truncations = truncations;
    vec->action_mask = vec->spaces.has_mask ? action_mask : NULL;
    vec->active = vec->spec->agents_wait ? active : NULL;
    vec->final_obs = (unsigned char *)final_observations;
    for (int64_t i = 0; i < vec->num_envs; i++) {
        int64_t a = i * apa;
        /* The env struct starts with its borrowed pointers in this order (checked by CENV_ENV). */
        void *pointers[6] = {(unsigned char *)observations + (size_t)(a * vec->obs_bytes),
                             (unsigned char *)actions + (size_t)a * action_bytes, rewards + a, terminals + a,
                             truncations + a,
                             vec->action_mask == NULL ? NULL : vec->action_mask + (size_t)(a * vec->mask_width)};
        memcpy(env_at(vec, i), pointers, sizeof(void *) * (size_t)vec->spec->num_pointers);
    }
    if (vec->active != NULL) memset(vec->active, 1, (size_t)vec->num_agents);
    vec->bound = 1;
    return 0;
}

int cenv_bind(cenv_vec *vec, void *observations, void *actions, float *rewards, uint8_t *terminals,
              uint8_t *truncations, uint8_t *action_mask, void *final_observations, uint8_t *active) {
    int rc = enter(vec, "cenv_bind");
    if (rc != 0) return rc;
    rc = bind_locked(vec, observations, actions, rewards, terminals, truncations, action_mask,
                     final_observations, active);
    leave(vec);
    return rc;
}

int cenv_bind_episode_stats(cenv_vec *vec, float *env_stats, int32_t *env_ended) {
    int rc = enter(vec, "cenv_bind_episode_stats");
    if (rc != 0) return rc;
    if ((env_stats == NULL) != (env_ended == NULL)) {
        set_error(vec->error, CENV_ERROR_LEN, "cenv_bind_episode_stats: give both buffers or neither");
        rc = CENV_ERR_ARGUMENT;
    } else {
        vec->env_stats = env_stats;
        vec->env_ended = env_ended;
    }
    leave(vec);
    return rc;
}

int cenv_reset(cenv_vec *vec, uint64_t seed, int reseed) {
    int rc = enter(vec, "cenv_reset");
    if (rc != 0) return rc;
    if (workers_gone(vec, "cenv_reset")) {
        rc = CENV_ERR_ARGUMENT;
    } else if (vec->bound) {
        vec->reset_seed = seed;
        vec->reset_reseed = reseed;
        run_job(vec, JOB_RESET);
        vec->was_reset = 1;
    } else {
        rc = CENV_ERR_UNBOUND;
    }
    leave(vec);
    return rc;
}

/* Finds the first bad action; returns 0 if all are valid. */
static int validate_actions(cenv_vec *vec) {
    const cenv_spaces *sp = &vec->spaces;
    int ndim = sp->action_ndim;
    int64_t n = vec->num_agents * ndim;
    if (sp->action_kind == CENV_ACTION_CONTINUOUS) {
        const float *a = (const float *)vec->actions;
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad |= isnan(a[i]) != 0;
        if (!bad) return 0;
        for (int64_t i = 0; i < n; i++) {
            if (isnan(a[i])) {
                vec->bad_agent = i / ndim;
                vec->bad_component = (int)(i % ndim);
                vec->bad_value = (double)a[i];
                return 1;
            }
        }
        return 0;
    }
    const int32_t *a = (const int32_t *)vec->actions;
    if (ndim == 1) {
        uint32_t limit = (uint32_t)sp->action_nvec[0];
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad |= (uint32_t)a[i] >= limit;
        if (!bad) return 0;
    }
    for (int64_t i = 0; i < n; i++) {
        int d = (int)(i % ndim);
        if (a[i] < 0 || a[i] >= sp->action_nvec[d]) {
            vec->bad_agent = i / ndim;
            vec->bad_component = d;
            vec->bad_value = (double)a[i];
            return 1;
        }
    }
    return 0;
}

/* The legal actions of component `d` of a mask row, as "0, 3, 7" (at most about 40 listed). */
static void legal_list(const cenv_vec *vec, const uint8_t *row, int d, char *out, size_t size) {
    int64_t offset = 0;
    for (int k = 0; k < d; k++) offset += vec->spaces.action_nvec[k];
    size_t used = 0;
    int listed = 0;
    out[0] = '\0';
    for (int64_t k = 0; k < vec->spaces.action_nvec[d] && used + 16 < size; k++) {
        if (!row[offset + k]) continue;
        if (listed == 40) {
            snprintf(out + used, size - used, ", ...");
            return;
        }
        int w = snprintf(out + used, size - used, "%s%lld", listed ? ", " : "", (long long)k);
        if (w > 0) used += (size_t)w;
        listed++;
    }
}

/* Strict masks, first half: every acting agent's mask row allows at least one action in each component
 * (checked before the actions' range, so an agent whose mask allows nothing, and whose policy could
 * only pick -1, is told so). Returns 0 or CENV_ERR_MASK with a message naming env, agent and step. */
static int validate_mask_rows(cenv_vec *vec) {
    const cenv_spaces *sp = &vec->spaces;
    int apa = sp->agents_per_env;
    for (int64_t agent = 0; agent < vec->num_agents; agent++) {
        if (vec->active != NULL && !vec->active[agent]) continue;
        const uint8_t *row = vec->action_mask + agent * vec->mask_width;
        int64_t offset = 0;
        for (int d = 0; d < sp->action_ndim; d++) {
            int any = 0;
            for (int64_t k = 0; k < sp->action_nvec[d]; k++) any |= row[offset + k];
            if (!any) {
                char component[32] = "";
                if (sp->action_ndim > 1) snprintf(component, sizeof(component), " for component %d", d);
                vec->bad_agent = agent;
                vec->bad_component = d;
                vec->bad_value = -1.0;
                set_error(vec->error, CENV_ERROR_LEN,
                          "env '%s' #%lld agent %d (row %lld) at step %lld: its action mask allows no action%s "
                          "(the row is all 0); the env must leave every acting agent at least one legal action",
                          vec->spec->name, (long long)(agent / apa), (int)(agent % apa), (long long)agent,
                          (long long)vec->steps, component);
                return CENV_ERR_MASK;
            }
            offset += sp->action_nvec[d];
        }
    }
    return 0;
}

/* Strict masks, second half: every acting agent takes an action its mask allows. Returns 0 or
 * CENV_ERR_ACTION with a message naming the env, the agent, the step and the legal actions. Actions
 * are already in range. */
static int validate_mask(cenv_vec *vec) {
    const cenv_spaces *sp = &vec->spaces;
    int ndim = sp->action_ndim, apa = sp->agents_per_env;
    const int32_t *actions = (const int32_t *)vec->actions;
    for (int64_t agent = 0; agent < vec->num_agents; agent++) {
        if (vec->active != NULL && !vec->active[agent]) continue;
        const uint8_t *row = vec->action_mask + agent * vec->mask_width;
        int64_t offset = 0;
        for (int d = 0; d < ndim; d++) {
            int32_t act = actions[agent * ndim + d];
            if (!row[offset + act]) {
                char legal[256];
                legal_list(vec, row, d, legal, sizeof(legal));
                char component[32] = "";
                if (ndim > 1) snprintf(component, sizeof(component), " component %d", d);
                vec->bad_agent = agent;
                vec->bad_component = d;
                vec->bad_value = (double)act;
                set_error(vec->error, CENV_ERROR_LEN,
                          "env '%s' #%lld agent %d (row %lld) at step %lld: action %d%s is not legal under "
                          "its mask; legal: %s",
                          vec->spec->name, (long long)(agent / apa), (int)(agent % apa), (long long)agent,
                          (long long)vec->steps, act, component, legal);
                return CENV_ERR_ACTION;
            }
            offset += sp->action_nvec[d];
        }
    }
    return 0;
}

/* The message of the first breach of the step contract found in the last step (see after_step). */
static void describe_breach(cenv_vec *vec, const cenv_breach *b) {
    const char *name = vec->spec->name;
    int apa = vec->spaces.agents_per_env;
    if (b->kind == BREACH_FAILED) {
        char why[CENV_ERROR_LEN] = "";
        if (vec->spec->error != NULL) {
            vec->spec->error(env_at(vec, b->env), why, (int)sizeof(why));
        } else {
            snprintf(why, sizeof(why), "its step returned %d (a failure) and it has no `error` option to say "
                     "why; name `error` in CENV_ENV and give it name_error (see BUILD.md)", b->ended);
        }
        set_error(vec->error, CENV_ERROR_LEN, "env '%s' #%lld failed at step %lld: %s", name, (long long)b->env,
                  (long long)vec->steps, why);
    } else if (b->kind == BREACH_LOG_WITHOUT_END) {
        set_error(vec->error, CENV_ERROR_LEN,
                  "env '%s' #%lld broke the step contract at step %lld: its step wrote the statistic %s (%g) "
                  "to its log but ended no agent's episode, and that value would be lost: the log holds the "
                  "sums over the agent-episodes that end in a step and is cleared before each step; keep "
                  "running totals in the env's own fields and add them to the log in the step the episode "
                  "ends (see BUILD.md)",
                  name, (long long)b->env, (long long)vec->steps, vec->spec->log_names[b->flagged],
                  (double)vec->spec->log(env_at(vec, b->env))[b->flagged]);
    } else if (b->kind == BREACH_BOTH_FLAGS) {
        set_error(vec->error, CENV_ERROR_LEN,
                  "env '%s' #%lld broke the step contract at step %lld: agent %d (row %lld) has both "
                  "terminal and truncation set; an ending episode is one or the other (see BUILD.md)",
                  name, (long long)b->env, (long long)vec->steps, b->flagged, (long long)(b->env * apa + b->flagged));
    } else if (b->kind == BREACH_COUNT && b->waiting_flagged > 0) {
        set_error(vec->error, CENV_ERROR_LEN,
                  "env '%s' #%lld broke the step contract at step %lld: its step returned %d but %d of its "
                  "acting agents have a terminal or truncation flag, and %d of its agents that wait for the "
                  "env's reset (option agents_wait) have one too: an agent that ended waits until every agent "
                  "has ended; its step must neither end it again nor count it (skip waiting agents; see "
                  "BUILD.md)",
                  name, (long long)b->env, (long long)vec->steps, b->ended, b->flagged, b->waiting_flagged);
    } else if (b->kind == BREACH_COUNT) {
        set_error(vec->error, CENV_ERROR_LEN,
                  "env '%s' #%lld broke the step contract at step %lld: its step returned %d but %d of its "
                  "acting agents have a terminal or truncation flag; it must set the terminal or truncation "
                  "flag of each agent whose episode ended in this step and return how many (see BUILD.md)",
                  name, (long long)b->env, (long long)vec->steps, b->ended, b->flagged);
    } else {
        set_error(vec->error, CENV_ERROR_LEN,
                  "env '%s' #%lld broke the step contract at step %lld: it ended %d of its %d agents' "
                  "episodes while the others go on, but names neither reset_agent (respawn at once) nor "
                  "agents_wait (wait for the env's reset) in CENV_ENV; end all agents together or name one "
                  "(see BUILD.md)",
                  name, (long long)b->env, (long long)vec->steps, b->flagged, apa);
    }
}

static int64_t step_locked(cenv_vec *vec) {
    if (!vec->bound) return CENV_ERR_UNBOUND;
    if (!vec->was_reset) {
        set_error(vec->error, CENV_ERROR_LEN,
                  "cenv_step before cenv_reset: the envs of '%s' were never reset; call cenv_reset "
                  "(or cenv_load_state) first",
                  vec->spec->name);
        return CENV_ERR_NOT_RESET;
    }
    if (workers_gone(vec, "cenv_step")) return CENV_ERR_ARGUMENT;
    vec->error[0] = '\0';
    int strict = vec->action_mask != NULL && vec->mask_check;
    if (strict && validate_mask_rows(vec) != 0) return CENV_ERR_MASK;
    if (validate_actions(vec)) return CENV_ERR_ACTION;
    if (strict && validate_mask(vec) != 0) return CENV_ERR_ACTION;
    run_job(vec, JOB_STEP);
    vec->steps += 1;
    int64_t episodes = 0;
    for (int c = 0; c < vec->num_chunks; c++) {
        if (vec->chunk_breach[c].kind != BREACH_NONE) {
            describe_breach(vec, &vec->chunk_breach[c]);
            return CENV_ERR_ENV;
        }
        episodes += vec->chunk_episodes[c];
    }
    return episodes;
}

int64_t cenv_step(cenv_vec *vec) {
    int rc = enter(vec, "cenv_step");
    if (rc != 0) return rc;
    int64_t result = step_locked(vec);
    leave(vec);
    return result;
}

void cenv_bad_action(const cenv_vec *vec, int64_t *agent, int *component, double *value) {
    *agent = vec->bad_agent;
    *component = vec->bad_component;
    *value = vec->bad_value;
}

const char *cenv_error(const cenv_vec *vec) { return vec == NULL ? "NULL handle" : vec->error; }

int64_t cenv_log(cenv_vec *vec, float *out) {
    int rc = enter(vec, "cenv_log");
    if (rc != 0) return rc;
    double sums[CENV_MAX_LOG] = {0};
    int64_t count = 0;
    int num_log = vec->spec->num_log;
    for (int c = 0; c < vec->num_chunks; c++) {
        cenv_chunk_log *log = &vec->chunk_log[c];
        for (int f = 0; f < num_log; f++) sums[f] += log->sums[f];
        count += log->count;
        memset(log, 0, sizeof(*log));
    }
    for (int f = 0; f < num_log; f++) out[f] = count > 0 ? (float)(sums[f] / (double)count) : 0.0f;
    leave(vec);
    return count;
}

typedef struct {
    char magic[8];
    int32_t abi_version;
    int32_t num_params;
    char env_name[32];
    int64_t num_envs;
    int64_t env_state_size;
    double params[CENV_MAX_PARAMS];
} cenv_state_header;

static int64_t env_state_size(const cenv_vec *vec) {
    return (int64_t)(vec->spec->env_size - vec->spec->state_offset);
}

int64_t cenv_state_size(const cenv_vec *vec) {
    if (vec == NULL) return CENV_ERR_NULL;
    if (vec->envs == NULL) return CENV_ERR_ARGUMENT; /* a cenv_describe handle */
    return (int64_t)sizeof(cenv_state_header) + vec->num_envs * env_state_size(vec);
}

static int64_t save_state_locked(cenv_vec *vec, void *out, int64_t size) {
    int64_t needed = cenv_state_size(vec);
    if (out == NULL || size < needed) {
        set_error(vec->error, CENV_ERROR_LEN, "cenv_save_state: the buffer has %lld bytes, the state needs %lld",
                  out == NULL ? 0LL : (long long)size, (long long)needed);
        return CENV_ERR_ARGUMENT;
    }
    cenv_state_header header;
    memset(&header, 0, sizeof(header));
    memcpy(header.magic, CENV_STATE_MAGIC, sizeof(header.magic));
    header.abi_version = CENV_ABI_VERSION;
    header.num_params = vec->spec->num_params;
    snprintf(header.env_name, sizeof(header.env_name), "%s", vec->spec->name);
    header.num_envs = vec->num_envs;
    header.env_state_size = env_state_size(vec);
    memcpy(header.params, vec->params, sizeof(header.params));
    unsigned char *dst = (unsigned char *)out;
    memcpy(dst, &header, sizeof(header));
    dst += sizeof(header);
    for (int64_t i = 0; i < vec->num_envs; i++) {
        memcpy(dst, vec->envs + (size_t)i * vec->spec->env_size + vec->spec->state_offset,
               (size_t)header.env_state_size);
        dst += header.env_state_size;
    }
    return needed;
}

int64_t cenv_save_state(cenv_vec *vec, void *out, int64_t size) {
    int rc = enter(vec, "cenv_save_state");
    if (rc != 0) return rc;
    int64_t result = save_state_locked(vec, out, size);
    leave(vec);
    return result;
}

/* Checks a saved state against this vector without loading it: 0, or CENV_ERR_ARGUMENT with the first
 * mismatch in vec->error. */
static int check_state_locked(cenv_vec *vec, const void *in, int64_t size) {
    cenv_state_header header;
    if (in == NULL || size < (int64_t)sizeof(header)) {
        set_error(vec->error, CENV_ERROR_LEN, "state of %lld bytes is too short for its header",
                  (long long)size);
        return CENV_ERR_ARGUMENT;
    }
    memcpy(&header, in, sizeof(header));
    if (memcmp(header.magic, CENV_STATE_MAGIC, sizeof(header.magic)) != 0) {
        set_error(vec->error, CENV_ERROR_LEN, "not a cenv state (bad magic)");
        return CENV_ERR_ARGUMENT;
    }
    if (header.abi_version != CENV_ABI_VERSION) {
        set_error(vec->error, CENV_ERROR_LEN, "state saved by cenv ABI %d, this library is ABI %d",
                  header.abi_version, CENV_ABI_VERSION);
        return CENV_ERR_ARGUMENT;
    }
    header.env_name[sizeof(header.env_name) - 1] = '\0';
    if (strcmp(header.env_name, vec->spec->name) != 0) {
        set_error(vec->error, CENV_ERROR_LEN, "state is of env '%s', not '%s'", header.env_name,
                  vec->spec->name);
        return CENV_ERR_ARGUMENT;
    }
    if (header.num_envs != vec->num_envs || header.env_state_size != env_state_size(vec)) {
        set_error(vec->error, CENV_ERROR_LEN,
                  "state holds %lld envs of %lld bytes, this vector %lld envs of %lld bytes",
                  (long long)header.num_envs, (long long)header.env_state_size,
                  (long long)vec->num_envs, (long long)env_state_size(vec));
        return CENV_ERR_ARGUMENT;
    }
    for (int p = 0; p < vec->spec->num_params; p++) {
        if (header.num_params != vec->spec->num_params || header.params[p] != vec->params[p]) {
            set_error(vec->error, CENV_ERROR_LEN, "state was saved with %s=%g, this vector has %g",
                      vec->spec->params[p].name, header.params[p], vec->params[p]);
            return CENV_ERR_ARGUMENT;
        }
    }
    if (size != cenv_state_size(vec)) {
        set_error(vec->error, CENV_ERROR_LEN, "state is %lld bytes, expected %lld", (long long)size,
                  (long long)cenv_state_size(vec));
        return CENV_ERR_ARGUMENT;
    }
    return 0;
}

static int load_state_locked(cenv_vec *vec, const void *in, int64_t size) {
    int rc = check_state_locked(vec, in, size);
    if (rc != 0) return rc;
    const unsigned char *src = (const unsigned char *)in + sizeof(cenv_state_header);
    int64_t per_env = env_state_size(vec);
    for (int64_t i = 0; i < vec->num_envs; i++) {
        memcpy(vec->envs + (size_t)i * vec->spec->env_size + vec->spec->state_offset, src, (size_t)per_env);
        src += per_env;
    }
    vec->was_reset = 1;
    return 0;
}

int cenv_check_state(cenv_vec *vec, const void *in, int64_t size) {
    int rc = enter(vec, "cenv_check_state");
    if (rc != 0) return rc;
    rc = check_state_locked(vec, in, size);
    leave(vec);
    return rc;
}

int cenv_load_state(cenv_vec *vec, const void *in, int64_t size) {
    int rc = enter(vec, "cenv_load_state");
    if (rc != 0) return rc;
    rc = load_state_locked(vec, in, size);
    leave(vec);
    return rc;
}

static int set_state_locked(cenv_vec *vec, int64_t index, const double *state, int n) {
    if (vec->spec->set_state == NULL) {
        set_error(vec->error, CENV_ERROR_LEN, "env '%s' has no set_state hook", vec->spec->name);
        return CENV_ERR_ARGUMENT;
    }
    if (!vec->bound || index < 0 || index >= vec->num_envs) {
        set_error(vec->error, CENV_ERROR_LEN, "set_state: env index %lld out of range or unbound",
                  (long long)index);
        return CENV_ERR_ARGUMENT;
    }
    if (vec->spec->set_state(env_at(vec, index), state, n) != 0) {
        set_error(vec->error, CENV_ERROR_LEN, "set_state: env '%s' rejects %d values", vec->spec->name, n);
        return CENV_ERR_ARGUMENT;
    }
    return 0;
}

int cenv_set_state(cenv_vec *vec, int64_t index, const double *state, int n) {
    int rc = enter(vec, "cenv_set_state");
    if (rc != 0) return rc;
    rc = set_state_locked(vec, index, state, n);
    leave(vec);
    return rc;
}

int cenv_env_flags(int type) {
    const cenv_spec *spec = spec_at(type);
    if (spec == NULL) return CENV_ERR_ARGUMENT;
    return (spec->has_mask ? CENV_ENV_MASK : 0) | (spec->reset_agent != NULL ? CENV_ENV_RESET_AGENT : 0) |
           (spec->agents_wait ? CENV_ENV_AGENTS_WAIT : 0) | (spec->render != NULL ? CENV_ENV_RENDER : 0) |
           (spec->set_state != NULL ? CENV_ENV_SET_STATE : 0) | (spec->pixels != NULL ? CENV_ENV_PIXELS : 0);
}

int cenv_set_mask_check(cenv_vec *vec, int strict) {
    int rc = enter(vec, "cenv_set_mask_check");
    if (rc != 0) return rc;
    vec->mask_check = strict != 0;
    leave(vec);
    return 0;
}

int64_t cenv_render(cenv_vec *vec, int64_t index, char *out, int64_t size) {
    int rc = enter(vec, "cenv_render");
    if (rc != 0) return rc;
    int64_t written;
    if (vec->spec->render == NULL || index < 0 || index >= vec->num_envs || out == NULL || size < 1 ||
        size > INT32_MAX) {
        set_error(vec->error, CENV_ERROR_LEN, "cenv_render: env '%s' %s", vec->spec->name,
                  vec->spec->render == NULL ? "has no render option" : "index or buffer out of range");
        written = CENV_ERR_ARGUMENT;
    } else {
        written = vec->spec->render(env_at(vec, index), out, (int)size);
        if (written < 0) { /* the hook's own failure: not one of the API's codes, which it would pass for */
            set_error(vec->error, CENV_ERROR_LEN, "cenv_render: env '%s' render hook returned %lld for env %lld, "
                      "a failure (a render hook returns the frame's length, snprintf-style)", vec->spec->name,
                      (long long)written, (long long)index);
            written = CENV_ERR_ENV;
        }
    }
    leave(vec);
    return written;
}

int cenv_pixels(cenv_vec *vec, int64_t index, uint8_t *rgb, int width, int height) {
    int rc = enter(vec, "cenv_pixels");
    if (rc != 0) return rc;
    const char *name = vec->spec->name;
    if (vec->spec->pixels == NULL) {
        set_error(vec->error, CENV_ERROR_LEN, "cenv_pixels: env '%s' has no pixels option (it draws no pictures; "
                  "see BUILD.md to give it a pixels hook)", name);
        rc = CENV_ERR_ARGUMENT;
    } else if (index < 0 || index >= vec->num_envs || rgb == NULL) {
        set_error(vec->error, CENV_ERROR_LEN, "cenv_pixels: env '%s' index %lld is out of range [0, %lld) or "
                  "the buffer is NULL", name, (long long)index, (long long)vec->num_envs);
        rc = CENV_ERR_ARGUMENT;
    } else if (width < 1 || height < 1 || width > CENV_MAX_FRAME_SIDE || height > CENV_MAX_FRAME_SIDE) {
        set_error(vec->error, CENV_ERROR_LEN, "cenv_pixels: a picture of %d x %d pixels; each side must be in "
                  "[1, %d]", width, height, CENV_MAX_FRAME_SIDE);
        rc = CENV_ERR_ARGUMENT;
    } else {
        memset(rgb, 0, (size_t)width * (size_t)height * 3);
        if (vec->spec->pixels(env_at(vec, index), rgb, width, height) != 0) {
            set_error(vec->error, CENV_ERROR_LEN, "cenv_pixels: env '%s' #%lld could not draw a picture of %d x %d "
                      "pixels", name, (long long)index, width, height);
            rc = CENV_ERR_ARGUMENT;
        }
    }
    leave(vec);
    return rc;
}

void cenv_close(cenv_vec *vec) {
    if (vec == NULL) return;
    /* In a forked child the workers (and the waits they were in) stayed in the parent: joining them, or
     * destroying the conditions they wait on, would block for ever. It frees the memory only. */
    int forked = vec->envs != NULL && vec->num_threads > 1 && getpid() != vec->pid;
    if (vec->envs != NULL && !forked) { /* a created vector: it has threads, a pool mutex and conditions */
        stop_workers(vec, vec->num_threads - 1);
        pthread_mutex_destroy(&vec->mutex);
        pthread_cond_destroy(&vec->work_ready);
        pthread_cond_destroy(&vec->work_done);
    }
    if (!forked) pthread_mutex_destroy(&vec->call_mutex);
    free(vec->workers);
    free(vec->envs);
    free(vec);
}

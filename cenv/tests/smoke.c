/* Steps every registered env through the public API, with 1 and 3 threads, random legal (and some
 * out-of-range) actions, and checks the results (observations of either dtype, final observations,
 * rewards, flags, masks, statistics) match across thread counts; also a describe-only
 * handle, step before reset, saved states, and extreme states set by set_state (NaN, infinities,
 * 1e30) rendered, drawn and stepped. Built with
 * -fsanitize=address,undefined,float-cast-overflow by
 * tests/test_build.py::test_sanitizer_build_steps_every_env; exits non-zero on any mismatch.
 * `smoke ENV NAME=VALUE ...` runs env ENV alone with those parameters (jaxlab check-env: each range end). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../api.h"
#include "../rng.h"

#define NUM_ENVS 37
#define STEPS 700
#define CENV_COUNT_OF(array) ((int)(sizeof(array) / sizeof((array)[0])))

typedef struct {
    cenv_vec *vec;
    int64_t agents, obs_items, obs_bytes, action_items; /* obs_bytes: of all agents' observations */
    int continuous;
    void *obs, *actions, *final_obs;
    float *rewards;
    uint8_t *terminals, *truncations, *mask, *active;
} run;

/* Parameters given on the command line (`smoke ENV NAME=VALUE ...`: env ENV alone, these parameters set, the
 * others at their defaults; without arguments every env with its defaults), as jaxlab check-env runs the
 * driver at each parameter's range ends. */
static const char *only_env;
static int num_given;
static const char *given_names[CENV_MAX_PARAMS];
static double given_values[CENV_MAX_PARAMS];

/* The parameters env `type` runs with (its defaults, then those given); returns how many it has. */
static int env_params(int type, double *params) {
    int np = cenv_num_params(type);
    for (int i = 0; i < np; i++) {
        const char *name, *help;
        double lo, hi;
        int is_int;
        cenv_param_info(type, i, &name, &help, &params[i], &lo, &hi, &is_int);
        for (int g = 0; g < num_given; g++) {
            if (strcmp(name, given_names[g]) == 0) params[i] = given_values[g];
        }
    }
    return np;
}

/* Reads `ENV NAME=VALUE ...` into only_env and the given parameters; 0, or 1 (with a message) for bad ones. */
static int read_arguments(int argc, char **argv) {
    if (argc < 2) return 0;
    only_env = argv[1];
    int type = -1;
    for (int t = 0; t < cenv_num_env_types(); t++) {
        if (strcmp(cenv_env_name(t), only_env) == 0) type = t;
    }
    if (type < 0) {
        fprintf(stderr, "smoke: no env %s in this library\n", only_env);
        return 1;
    }
    for (int a = 2; a < argc; a++) {
        char *eq = strchr(argv[a], '='), *end = NULL;
        if (eq == NULL || num_given == CENV_MAX_PARAMS) {
            fprintf(stderr, "smoke: %s is not NAME=VALUE\n", argv[a]);
            return 1;
        }
        *eq = '\0';
        given_names[num_given] = argv[a];
        given_values[num_given] = strtod(eq + 1, &end);
        int known = 0;
        for (int i = 0; i < cenv_num_params(type); i++) {
            const char *name, *help;
            double d, lo, hi;
            int is_int;
            cenv_param_info(type, i, &name, &help, &d, &lo, &hi, &is_int);
            known |= strcmp(name, argv[a]) == 0;
        }
        if (!known || end == eq + 1 || *end != '\0') {
            fprintf(stderr, "smoke: env %s has no parameter %s, or %s is no number\n", only_env, argv[a], eq + 1);
            return 1;
        }
        num_given++;
    }
    return 0;
}

static int open_run(run *r, int type, int threads) {
    double params[CENV_MAX_PARAMS];
    int np = env_params(type, params);
    char err[256];
    r->vec = cenv_create(type, NUM_ENVS, 1234, params, np, threads, err, sizeof(err));
    if (r->vec == NULL) {
        fprintf(stderr, "create failed: %s\n", err);
        return 1;
    }
    int64_t shape[CENV_MAX_OBS_DIMS];
    cenv_obs_shape(r->vec, shape);
    r->obs_items = 1;
    for (int d = 0; d < cenv_obs_ndim(r->vec); d++) r->obs_items *= shape[d];
    r->agents = (int64_t)NUM_ENVS * cenv_agents_per_env(r->vec);
    r->action_items = cenv_action_ndim(r->vec);
    r->continuous = cenv_action_kind(r->vec) == CENV_ACTION_CONTINUOUS;
    r->obs_bytes = r->agents * r->obs_items * (cenv_obs_dtype(r->vec) == CENV_DTYPE_UINT8 ? 1 : 4);
    r->obs = calloc((size_t)r->obs_bytes, 1);
    r->final_obs = calloc((size_t)r->obs_bytes, 1);
    r->actions = calloc((size_t)(r->agents * r->action_items), 4);
    r->rewards = calloc((size_t)r->agents, sizeof(float));
    r->terminals = calloc((size_t)r->agents, 1);
    r->truncations = calloc((size_t)r->agents, 1);
    r->mask = calloc((size_t)(r->agents * cenv_mask_width(r->vec)) + 1, 1);
    r->active = calloc((size_t)r->agents, 1);
    if (cenv_bind(r->vec, r->obs, r->actions, r->rewards, r->terminals, r->truncations, r->mask,
                  r->final_obs, r->active) != 0)
        return 1;
    if (cenv_step(r->vec) != CENV_ERR_NOT_RESET) { /* never reset: refused */
        fprintf(stderr, "step before reset was not refused\n");
        return 1;
    }
    return cenv_reset(r->vec, 99, 1);
}

static void close_run(run *r) {
    cenv_close(r->vec);
    free(r->obs);
    free(r->final_obs);
    free(r->actions);
    free(r->rewards);
    free(r->terminals);
    free(r->truncations);
    free(r->mask);
    free(r->active);
}

/* A describe-only handle has the spaces of a created vector and refuses everything else. */
static int check_describe(const run *r, int type) {
    double params[CENV_MAX_PARAMS];
    int np = env_params(type, params);
    char err[CENV_ERROR_LEN];
    cenv_vec *d = cenv_describe(type, params, np, err, sizeof(err));
    if (d == NULL) return 1;
    int64_t a[CENV_MAX_OBS_DIMS] = {0}, b[CENV_MAX_OBS_DIMS] = {0};
    cenv_obs_shape(d, a);
    cenv_obs_shape(r->vec, b);
    int bad = cenv_agents_per_env(d) != cenv_agents_per_env(r->vec) ||
              cenv_obs_ndim(d) != cenv_obs_ndim(r->vec) || memcmp(a, b, sizeof(a)) != 0 ||
              cenv_action_kind(d) != cenv_action_kind(r->vec) ||
              cenv_action_ndim(d) != cenv_action_ndim(r->vec) ||
              cenv_mask_width(d) != cenv_mask_width(r->vec);
    bad |= cenv_step(d) != CENV_ERR_ARGUMENT || cenv_reset(d, 0, 0) != CENV_ERR_ARGUMENT ||
           cenv_bind(d, r->obs, r->actions, r->rewards, r->terminals, r->truncations, r->mask,
                     NULL, NULL) != CENV_ERR_ARGUMENT ||
           cenv_state_size(d) != CENV_ERR_ARGUMENT || strstr(cenv_error(d), "cenv_describe") == NULL;
    cenv_close(d);
    params[0] = -1e300; /* out of every range */
    if (cenv_describe(type, params, np, err, sizeof(err)) != NULL || strstr(err, "parameter") == NULL)
        bad = 1;
    return bad;
}

static void fill_actions(run *r, cenv_rng *rng) {
    int64_t nvec[CENV_MAX_ACTION_DIMS];
    if (r->continuous) {
        for (int64_t i = 0; i < r->agents * r->action_items; i++)
            ((float *)r->actions)[i] = (float)cenv_rng_uniform(rng, -3.0, 3.0);
        return;
    }
    cenv_action_nvec(r->vec, nvec);
    int64_t width = cenv_mask_width(r->vec);
    for (int64_t agent = 0; agent < r->agents; agent++) {
        int64_t offset = 0;
        for (int d = 0; d < r->action_items; d++) {
            int32_t *act = &((int32_t *)r->actions)[agent * r->action_items + d];
            *act = cenv_rng_below(rng, (int)nvec[d]);
            if (width > 0) { /* strict masks: a random legal action (the mask always allows one) */
                const uint8_t *row = r->mask + agent * width + offset;
                int legal = 0;
                for (int k = 0; k < nvec[d]; k++) legal += row[k] != 0;
                int pick = cenv_rng_below(rng, legal > 0 ? legal : 1);
                for (int k = 0; k < nvec[d]; k++) {
                    if (row[k] && pick-- == 0) *act = k;
                }
            }
            offset += nvec[d];
        }
    }
}

int main(int argc, char **argv) {
    int failures = 0;
    if (read_arguments(argc, argv)) return 2;
    if (cenv_step(NULL) != CENV_ERR_NULL) failures++;
    for (int type = 0; type < cenv_num_env_types(); type++) {
        if (only_env != NULL && strcmp(cenv_env_name(type), only_env) != 0) continue;
        run one, three;
        if (open_run(&one, type, 1) || open_run(&three, type, 3)) {
            fprintf(stderr, "%s: could not open\n", cenv_env_name(type));
            return 1;
        }
        if (check_describe(&one, type)) {
            fprintf(stderr, "%s: describe-only handle wrong\n", cenv_env_name(type));
            failures++;
        }
        cenv_rng rng;
        cenv_rng_seed(&rng, 7, (uint64_t)type);
        int64_t episodes = 0;
        for (int t = 0; t < STEPS; t++) {
            fill_actions(&one, &rng);
            memcpy(three.actions, one.actions, (size_t)(one.agents * one.action_items) * 4);
            int64_t a = cenv_step(one.vec), b = cenv_step(three.vec);
            if (a != b || a < 0) failures++;
            episodes += a;
            if (memcmp(one.obs, three.obs, (size_t)one.obs_bytes) != 0 ||
                memcmp(one.final_obs, three.final_obs, (size_t)one.obs_bytes) != 0 ||
                memcmp(one.rewards, three.rewards, (size_t)one.agents * 4) != 0 ||
                memcmp(one.terminals, three.terminals, (size_t)one.agents) != 0 ||
                memcmp(one.truncations, three.truncations, (size_t)one.agents) != 0 ||
                memcmp(one.mask, three.mask, (size_t)(one.agents * cenv_mask_width(one.vec))) != 0)
                failures++;
        }
        float log1[CENV_MAX_LOG], log3[CENV_MAX_LOG];
        int64_t n1 = cenv_log(one.vec, log1), n3 = cenv_log(three.vec, log3);
        if (n1 != episodes || n3 != episodes ||
            memcmp(log1, log3, sizeof(float) * (size_t)cenv_num_log_fields(type)) != 0)
            failures++;
        /* Saved state loads into the 3-thread vector and saves back to the same bytes; a damaged or
         * short state is refused. */
        int64_t size = cenv_state_size(one.vec);
        unsigned char *blob = malloc((size_t)size), *again = malloc((size_t)size);
        if (blob == NULL || again == NULL) return 1;
        if (cenv_save_state(one.vec, blob, size) != size) failures++;
        if (cenv_load_state(three.vec, blob, size) != 0) failures++;
        if (cenv_save_state(three.vec, again, size) != size || memcmp(blob, again, (size_t)size) != 0)
            failures++;
        blob[0] ^= 1;
        if (cenv_load_state(three.vec, blob, size) != CENV_ERR_ARGUMENT) failures++;
        if (cenv_load_state(three.vec, again, size - 1) != CENV_ERR_ARGUMENT) failures++;
        free(blob);
        free(again);
        /* Pictures (option pixels): any size from 1 x 1 draws inside its buffer (ASan checks); a size
         * out of range, an index out of range or an env without the option is refused. */
        if (cenv_env_flags(type) & CENV_ENV_PIXELS) {
            static const int sizes[][2] = {{1, 1}, {2, 7}, {7, 2}, {33, 17}, {480, 240}, {101, 333}};
            for (int k = 0; k < CENV_COUNT_OF(sizes); k++) {
                int w = sizes[k][0], h = sizes[k][1];
                uint8_t *rgb = malloc((size_t)(w * h * 3));
                if (rgb == NULL) return 1;
                if (cenv_pixels(one.vec, NUM_ENVS - 1, rgb, w, h) != 0) failures++;
                free(rgb);
            }
            uint8_t tiny[3];
            if (cenv_pixels(one.vec, 0, tiny, 0, 1) != CENV_ERR_ARGUMENT ||
                cenv_pixels(one.vec, 0, tiny, 1, CENV_MAX_FRAME_SIDE + 1) != CENV_ERR_ARGUMENT ||
                cenv_pixels(one.vec, NUM_ENVS, tiny, 1, 1) != CENV_ERR_ARGUMENT ||
                cenv_pixels(one.vec, 0, NULL, 1, 1) != CENV_ERR_ARGUMENT)
                failures++;
        } else {
            uint8_t tiny[3];
            if (cenv_pixels(one.vec, 0, tiny, 1, 1) != CENV_ERR_ARGUMENT) failures++;
        }
        /* Extreme states (option set_state): whatever an env accepts of NaN, infinities and values far
         * out of the range of an int, all of them or after a leading 0 (an index, as drone.h's state
         * starts with), it renders, draws and steps without undefined behaviour (the sanitizers
         * check; refusing the state is fine). */
        if (cenv_env_flags(type) & CENV_ENV_SET_STATE) {
            static const double extremes[] = {NAN, INFINITY, -INFINITY, 1e300, -1e300, 1e30, -1e30, 3e9, -3e9};
            double state[32];
            char text[8192];
            static uint8_t rgb[64 * 48 * 3];
            for (int e = 0; e < CENV_COUNT_OF(extremes); e++) {
                for (int lead = 0; lead < 2; lead++) {
                    for (int n = 1; n <= CENV_COUNT_OF(state); n++) {
                        for (int k = 0; k < n; k++) state[k] = k == 0 && lead ? 0.0 : extremes[e];
                        if (cenv_set_state(one.vec, 0, state, n) != 0) continue;
                        if (cenv_env_flags(type) & CENV_ENV_RENDER) cenv_render(one.vec, 0, text, sizeof(text));
                        if (cenv_env_flags(type) & CENV_ENV_PIXELS) cenv_pixels(one.vec, 0, rgb, 64, 48);
                        fill_actions(&one, &rng);
                        cenv_step(one.vec); /* an error (a mask the state broke) is fine */
                    }
                }
            }
            if (cenv_reset(one.vec, 99, 1) != 0) failures++;
        }
        /* A bad action is refused, not stepped. */
        if (one.continuous) {
            ((float *)one.actions)[5] = NAN;
        } else {
            ((int32_t *)one.actions)[5] = -1;
        }
        if (cenv_step(one.vec) != CENV_ERR_ACTION) failures++;
        int64_t agent;
        int comp;
        double value;
        cenv_bad_action(one.vec, &agent, &comp, &value);
        if (agent != 5 / one.action_items) failures++;
        printf("%-10s %lld episodes, %s\n", cenv_env_name(type), (long long)episodes,
               failures ? "MISMATCH" : "ok");
        close_run(&one);
        close_run(&three);
    }
    cenv_close(NULL);
    return failures != 0;
}

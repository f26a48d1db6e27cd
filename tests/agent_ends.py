"""A purpose-built multi-agent env whose agents end at different, known times, in its two variants
(an ending agent respawns at once, or waits for the env's reset), built with the SDK. Shared by
tests/test_agent_ends.py (the env layer) and tests/test_agent_ends_training.py (carries, advantages).

Agent a of an env (a = 0, 1, 2 by default) plays episodes of exactly 2 (a + 1) steps: agent 0 ends at
steps 2, 4, 6, ..., agent 1 at 4, 8, ..., agent 2 at 6, 12, ... (with respawn); reward 1 per step
played. Observation float32[3] per agent: (a + 1, steps into its episode, episodes it has finished).
Action Discrete(2), ignored. With agents_wait, agents 0 and 1 wait after their first end (steps 2
and 4) until agent 2 ends at step 6, when the env resets.
"""

from pathlib import Path

from jaxlab.env.sdk import build_library

TEMPLATE = r"""
#include "core.h"
typedef struct { float episode_return; float episode_length; } NAMELog;
typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    NAMELog log;
    int agents;
    int played[8];   /* steps into the current episode, per agent */
    int finished[8]; /* episodes finished, per agent */
    int alive[8];    /* 0 while waiting for the env's reset (agents_wait) */
    cenv_rng rng;
} NAME;
static const cenv_param name_params[] = {{"agents", 3, 1, 8, 1, "agents per env"}};
static const char *const name_log_names[] = {"episode_return", "episode_length"};
static void name_spaces(const double *params, cenv_spaces *out) {
    out->agents_per_env = (int)params[0];
    out->obs_ndim = 1;
    out->obs_shape[0] = 3;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 2;
}
static void name_init(NAME *env, const double *params) { env->agents = (int)params[0]; }
static void name_observe(NAME *env, int a) {
    env->observations[3 * a] = (float)(a + 1); /* never all zero: a zero input leaves a zero carry */
    env->observations[3 * a + 1] = (float)env->played[a];
    env->observations[3 * a + 2] = (float)env->finished[a];
}
static void name_reset_agent(NAME *env, int a) {
    env->played[a] = 0;
    env->alive[a] = 1;
    name_observe(env, a);
}
static void name_reset(NAME *env) {
    for (int a = 0; a < env->agents; a++) name_reset_agent(env, a);
}
static int name_step(NAME *env) {
    int ended = 0;
    env->log.episode_return = env->log.episode_length = 0.0f;
    for (int a = 0; a < env->agents; a++) {
        env->terminals[a] = env->truncations[a] = 0;
        env->rewards[a] = 0.0f;
        if (!env->alive[a]) continue;
        env->played[a] += 1;
        env->rewards[a] = 1.0f;
        if (env->played[a] == 2 * (a + 1)) {
            env->terminals[a] = 1;
            env->finished[a] += 1;
            env->alive[a] = 0;
            env->log.episode_return += (float)env->played[a];
            env->log.episode_length += (float)env->played[a];
            ended += 1;
        }
        name_observe(env, a);
    }
    return ended;
}
CENV_ENV(name, NAME, NAMELog, "agents end at different, known times", OPTION)
"""

VARIANTS = {"relay_respawn": "reset_agent", "relay_wait": "agents_wait"}


def header(name: str) -> str:
    camel = "".join(part.capitalize() for part in name.split("_"))
    return (TEMPLATE.replace("NAME", camel).replace("name_", f"{name}_").replace("(name,", f"({name},")
            .replace("OPTION", VARIANTS[name]))


def build(folder: Path) -> str:
    """Builds both variants into one library in ``folder``; returns its path."""
    paths = []
    for name in VARIANTS:
        path = folder / f"{name}.h"
        path.write_text(header(name))
        paths.append(path)
    return str(build_library(paths, folder / "librelay.so"))

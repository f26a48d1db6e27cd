"""The env contract the vectorized layer enforces, tested with purpose-built envs compiled into a
library of their own (loaded in a subprocess through $JAXLAB_CENV_LIB):

- a step that reports ended episodes must end every agent of the env (per-agent ends do not exist
  yet): otherwise the step fails with a message naming the env type, the env index and the agents;
- an env with an action mask is defined with CENV_DEFINE_MASKED, which binds `action_mask`.
"""

import pytest
from conftest import compile_cenv_with, run_with_library

# `partial`: `agents` agents per env; env i ends at the tick given to it by set_state (never by
# default), flagging the first `flagged` agents terminal and returning `returned`.
PARTIAL_H = r"""
#include "../core.h"
typedef struct { float episode_length; } PartialLog;
typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    PartialLog log;
    int agents, flagged, returned, end_at, tick;
    cenv_rng rng;
} Partial;
static const cenv_param partial_params[] = {
    {"agents", 3, 1, 8, 1, "agents per env"},
    {"flagged", 1, 0, 8, 1, "agents flagged at the end"},
    {"returned", 1, 0, 8, 1, "what the step returns at the end"},
};
static const char *const partial_log_names[] = {"episode_length"};
static void partial_spaces(const double *params, cenv_spaces *out) {
    out->agents_per_env = (int)params[0];
    out->obs_ndim = 1;
    out->obs_shape[0] = 1;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 2;
}
static void partial_init(Partial *env, const double *params) {
    env->agents = (int)params[0];
    env->flagged = (int)params[1];
    env->returned = (int)params[2];
    env->end_at = -1;
}
static void partial_reset(Partial *env) {
    env->tick = 0;
    for (int a = 0; a < env->agents; a++) env->observations[a] = 0.0f;
}
static int partial_step(Partial *env) {
    env->tick += 1;
    int end = env->tick == env->end_at;
    for (int a = 0; a < env->agents; a++) {
        env->observations[a] = (float)env->tick;
        env->rewards[a] = 1.0f;
        env->terminals[a] = (uint8_t)(end && a < env->flagged);
        env->truncations[a] = 0;
    }
    if (!end) return 0;
    env->log.episode_length = (float)(env->tick * env->returned);
    return env->returned;
}
static int partial_set_state(void *e, const double *state, int n) {
    if (n != 1) return -1;
    ((Partial *)e)->end_at = (int)state[0];
    return 0;
}
CENV_DEFINE(partial, Partial, PartialLog, "ends some of its agents", partial_set_state)
"""

# `masked`: Discrete(3) with a mask that allows action tick % 3 only; reward 1 for that action.
MASKED_H = r"""
#include "../core.h"
typedef struct { float episode_length; } MaskedLog;
typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    uint8_t *action_mask;
    MaskedLog log;
    int tick;
    cenv_rng rng;
} Masked;
static const cenv_param masked_params[] = {{"unused", 0, 0, 1, 1, "nothing"}};
static const char *const masked_log_names[] = {"episode_length"};
static void masked_spaces(const double *params, cenv_spaces *out) {
    (void)params;
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = 1;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 3;
    out->has_mask = 1;
}
static void masked_init(Masked *env, const double *params) { (void)env; (void)params; }
static void masked_observe(Masked *env) {
    env->observations[0] = (float)env->tick;
    for (int i = 0; i < 3; i++) env->action_mask[i] = (uint8_t)(i == env->tick % 3);
}
static void masked_reset(Masked *env) {
    env->tick = 0;
    masked_observe(env);
}
static int masked_step(Masked *env) {
    env->rewards[0] = env->actions[0] == env->tick % 3 ? 1.0f : 0.0f;
    env->tick += 1;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    masked_observe(env);
    return 0;
}
CENV_DEFINE_MASKED(masked, Masked, MaskedLog, "writes an action mask", NULL)
"""

SCRIPT = r"""
import json
import numpy as np
import jaxlab

out = {}
for flagged, returned in [(1, 1), (3, 1), (2, 3), (3, 3)]:
    with jaxlab.make("partial", num_envs=4, num_threads=2, agents=3, flagged=flagged, returned=returned) as env:
        env.reset()
        env.set_state(2, [3])  # env 2 ends at its third step
        try:
            infos = [env.step(np.zeros(12, dtype=np.int32))[4] for _ in range(3)]
            out[f"{flagged},{returned}"] = {"infos": infos}
        except RuntimeError as err:
            out[f"{flagged},{returned}"] = {"error": str(err), "obs": env.observations[6:9].tolist()}
with jaxlab.make("masked", num_envs=2) as env:
    masks = [env.reset().tolist() and env.action_mask.tolist()]
    rewards = []
    for t in range(4):
        allowed = env.action_mask.argmax(axis=1).astype(np.int32)
        _, r, _, _, _ = env.step(allowed)
        rewards.append(r.tolist())
        masks.append(env.action_mask.tolist())
    out["masked"] = {"masks": masks, "rewards": rewards, "spaces": str(jaxlab.env.spaces_of("masked"))}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    result, library = compile_cenv_with(tmp_path_factory.mktemp("contract"),
                                        {"partial": PARTIAL_H, "masked": MASKED_H})
    assert result.returncode == 0, result.stderr
    return run_with_library(library, SCRIPT)


def test_a_step_that_ends_some_agents_but_not_all_fails_naming_env_and_agents(results):
    error = results["1,1"]["error"]
    assert "env 'partial' (type 0) broke the step contract at env index 2" in error
    assert "its step returned ended=1 but agents 1, 2 (of 3; buffer rows from 6) have neither terminal nor truncation set" in error
    assert "every agent of the env" in error and "BUILD.md" in error
    assert results["1,1"]["obs"] == [[3.0]] * 3  # the broken env was not reset


def test_a_step_that_ends_every_agent_must_count_them(results):
    assert "every one of its 3 agents ended but its step returned ended=1; it must return" in results["3,1"]["error"]
    assert "ended=3 but agent 2 (of 3; buffer rows from 6) has neither" in results["2,3"]["error"]


def test_a_step_that_ends_every_agent_is_accepted(results):
    infos = results["3,3"]["infos"]
    assert infos[:2] == [{}, {}] and infos[2] == {"episodes": 3, "episode_length": 3.0}


def test_a_masked_env_gets_its_mask_bound(results):
    masked = results["masked"]
    expected = [[[1, 0, 0]] * 2, [[0, 1, 0]] * 2, [[0, 0, 1]] * 2, [[1, 0, 0]] * 2, [[0, 1, 0]] * 2]
    assert masked["masks"] == [[[bool(v) for v in row] for row in m] for m in expected]
    assert masked["rewards"] == [[1.0, 1.0]] * 4
    assert "has_mask=True, mask_width=3" in masked["spaces"]

"""The env contract the vectorized layer enforces (cenv/core.h, BUILD.md), tested with purpose-built
envs built by the SDK into a library of their own:

- a step returns how many agents' episodes ended, and flags exactly those agents (never both flags);
- an env that ends some of its agents while others go on must name reset_agent or agents_wait;
- an env with an action mask names `mask` and gets its mask bound; strict masks refuse an action
  outside the mask and a mask that allows none, naming the env, agent, step and legal actions.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

import jaxlab
from jaxlab.env.sdk import build_library

# `partial`: `agents` agents per env; env i ends at the tick given to it by set_state (never by
# default), flagging the first `flagged` agents (terminal, or terminal and truncated with `both`)
# and returning `returned`.
PARTIAL_H = r"""
#include "core.h"
typedef struct { float episode_length; } PartialLog;
typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    PartialLog log;
    int agents, flagged, returned, both, end_at, tick;
    cenv_rng rng;
} Partial;
static const cenv_param partial_params[] = {
    {"agents", 3, 1, 8, 1, "agents per env"},
    {"flagged", 1, 0, 8, 1, "agents flagged at the end"},
    {"returned", 1, 0, 8, 1, "what the step returns at the end"},
    {"both", 0, 0, 1, 1, "flag terminal and truncation"},
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
    env->both = (int)params[3];
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
        env->truncations[a] = (uint8_t)(end && a < env->flagged && env->both);
    }
    if (!end) return 0;
    env->log.episode_length = (float)(env->tick * env->returned);
    return env->returned;
}
static int partial_set_state(Partial *env, const double *state, int n) {
    if (n != 1) return -1;
    env->end_at = (int)state[0];
    return 0;
}
CENV_ENV(partial, Partial, PartialLog, "ends some of its agents", set_state)
"""

# `gated`: Discrete(3) with a mask that allows action tick % 3 only (none at all from tick `closed`);
# reward 1 for the allowed action; episodes of `length` steps (0: they never end). It logs only
# episode_length (the contract asks for no episode_return).
GATED_H = r"""
#include "core.h"
typedef struct { float episode_length; } GatedLog;
typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    uint8_t *action_mask;
    GatedLog log;
    int closed, length, tick;
    cenv_rng rng;
} Gated;
static const cenv_param gated_params[] = {{"closed", 1000, 0, 1000, 1, "tick from which nothing is legal"},
                                          {"length", 0, 0, 1000, 1, "steps per episode (0: no end)"}};
static const char *const gated_log_names[] = {"episode_length"};
static void gated_spaces(const double *params, cenv_spaces *out) {
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
static void gated_init(Gated *env, const double *params) {
    env->closed = (int)params[0];
    env->length = (int)params[1];
}
static void gated_observe(Gated *env) {
    env->observations[0] = (float)env->tick;
    for (int i = 0; i < 3; i++) env->action_mask[i] = (uint8_t)(i == env->tick % 3 && env->tick < env->closed);
}
static void gated_reset(Gated *env) {
    env->tick = 0;
    gated_observe(env);
}
static int gated_step(Gated *env) {
    env->rewards[0] = env->actions[0] == env->tick % 3 ? 1.0f : 0.0f;
    env->tick += 1;
    int ended = env->length > 0 && env->tick >= env->length;
    env->terminals[0] = (uint8_t)ended;
    env->truncations[0] = 0;
    gated_observe(env);
    if (ended) env->log.episode_length = (float)env->tick;
    return ended;
}
CENV_ENV(gated, Gated, GatedLog, "writes an action mask", mask)
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    folder = tmp_path_factory.mktemp("contract")
    (folder / "partial.h").write_text(PARTIAL_H)
    (folder / "gated.h").write_text(GATED_H)
    return str(build_library([folder / "partial.h", folder / "gated.h"], folder / "libcontract.so"))


def end_env_2_at_step_3(library, **params):
    """Steps 4 partial envs of 3 agents, env 2 ending at its third step; returns the step infos, or
    the RuntimeError and env 2's observations (not reset when it broke the contract)."""
    with jaxlab.make("partial", num_envs=4, num_threads=2, library=library, agents=3, **params) as env:
        env.reset()
        env.set_state(2, [3])
        try:
            return [env.step(np.zeros(12, dtype=np.int32))[4] for _ in range(3)], None
        except RuntimeError as err:
            return str(err), env.observations[6:9].tolist()


def test_a_step_that_ends_some_agents_needs_reset_agent_or_agents_wait(library):
    error, obs = end_env_2_at_step_3(library, flagged=1, returned=1)
    assert "env 'partial' #2 broke the step contract at step 3: it ended 1 of its 3 agents' episodes" in error
    assert "names neither reset_agent (respawn at once) nor agents_wait" in error and "BUILD.md" in error
    assert obs == [[3.0]] * 3  # the broken env was not reset


def test_a_step_must_return_how_many_agents_it_flagged(library):
    error, _ = end_env_2_at_step_3(library, flagged=3, returned=1)
    assert "its step returned 1 but 3 of its acting agents have a terminal or truncation flag" in error
    assert ("it must set the terminal or truncation flag of each agent whose episode ended in this step and return "
            "how many (see BUILD.md)") in error  # the flags may be what is wrong, not the count
    error, _ = end_env_2_at_step_3(library, flagged=2, returned=3)
    assert "its step returned 3 but 2 of its acting agents" in error
    error, obs = end_env_2_at_step_3(library, flagged=3, returned=0)  # was passed over: 0 looked like "none"
    assert "env 'partial' #2 broke the step contract at step 3: its step returned 0 but 3 of its acting" in error
    assert obs == [[3.0]] * 3  # the broken env was not reset


def test_an_agent_is_never_both_terminal_and_truncated(library):
    error, _ = end_env_2_at_step_3(library, flagged=3, returned=3, both=1)
    assert "agent 0 (row 6) has both terminal and truncation set" in error


def test_a_step_that_ends_every_agent_is_accepted(library):
    infos, _ = end_env_2_at_step_3(library, flagged=3, returned=3)
    assert infos[:2] == [{}, {}] and infos[2] == {"episodes": 3, "episode_length": 3.0}


def test_a_masked_env_gets_its_mask_bound(library):
    with jaxlab.make("gated", num_envs=2, library=library) as env:
        env.reset()
        masks, rewards = [env.action_mask.tolist()], []
        for _ in range(4):
            rewards.append(env.step(env.action_mask.argmax(axis=1).astype(np.int32))[1].tolist())
            masks.append(env.action_mask.tolist())
    expected = [[[1, 0, 0]] * 2, [[0, 1, 0]] * 2, [[0, 0, 1]] * 2, [[1, 0, 0]] * 2, [[0, 1, 0]] * 2]
    assert masks == [[[bool(v) for v in row] for row in m] for m in expected]
    assert rewards == [[1.0, 1.0]] * 4
    assert "has_mask=True, mask_width=3" in str(jaxlab.env.spaces_of("gated", library=library))


def test_strict_masks_refuse_an_illegal_action_and_step_nothing(library):
    with jaxlab.make("gated", num_envs=2, library=library) as env:
        env.reset()
        env.step(np.zeros(2, np.int32))  # tick 0: action 0 is the legal one
        before = env.save_state()["cenv"]
        with pytest.raises(ValueError) as caught:
            env.step(np.array([1, 0], np.int32))  # tick 1: only 1 is legal
        message = str(caught.value)
        assert message == "env 'gated' #1 agent 0 (row 1) at step 1: action 0 is not legal under its mask; legal: 1"
        np.testing.assert_array_equal(env.save_state()["cenv"], before)  # nothing was stepped


def test_strict_masks_refuse_a_mask_that_allows_no_action(library):
    with jaxlab.make("gated", num_envs=1, library=library, closed=2) as env:
        env.reset()
        env.step(np.zeros(1, np.int32))
        env.step(np.ones(1, np.int32))
        with pytest.raises(ValueError, match=r"env 'gated' #0 agent 0 \(row 0\) at step 2: its action mask allows "
                                             r"no action \(the row is all 0\)"):
            env.step(np.zeros(1, np.int32))


def test_mask_check_off_steps_whatever_it_is_given(library):
    with jaxlab.make("gated", num_envs=1, library=library, closed=2, mask_check="off") as env:
        env.reset()
        rewards = [float(env.step(np.full(1, a, np.int32))[1][0]) for a in (2, 2, 2)]
    assert rewards == [0.0, 0.0, 1.0]  # illegal actions stepped (and not rewarded)


def test_with_mask_check_off_the_policys_action_for_an_empty_mask_row_is_named_as_that(library):
    """With mask_check off, an env whose mask row allowed nothing got the policy's action -1 (NO_ACTION)
    for that agent, and the step said 'agent 0 has action -1, out of range for Discrete(3)', as if the
    policy were broken. The message names the empty mask row as the cause."""
    from jaxlab.agent.distributions import NO_ACTION
    with jaxlab.make("gated", num_envs=1, library=library, closed=2, mask_check="off") as env:
        env.reset()
        env.step(np.zeros(1, np.int32))
        env.step(np.ones(1, np.int32))
        assert not env.action_mask.any()
        with pytest.raises(ValueError) as caught:
            env.step(np.full(1, NO_ACTION, np.int32))
        message = str(caught.value)
        assert message.startswith("agent 0 has action -1: its action mask row allows no action (all 0)"), message
        assert "the env 'gated' must leave every acting agent at least one legal action" in message
        with pytest.raises(ValueError, match=r"agent 0 has action 3, out of range for Discrete\(3\)"):
            env.step(np.full(1, 3, np.int32))  # out of range, mask or not: the old message


# `broken`: a step that returns a negative number says the env found itself broken; with the `error`
# option its own message is the error (env 1 breaks at the tick given by set_state). `mute` does the
# same without the option.
BROKEN_H = r"""
#include "core.h"
typedef struct { float episode_length; } BrokenLog;
typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    BrokenLog log;
    int tick, break_at;
    cenv_rng rng;
} Broken;
static const cenv_param broken_params[] = {{"unused", 0, 0, 1, 1, "nothing"}};
static const char *const broken_log_names[] = {"episode_length"};
static void broken_spaces(const double *params, cenv_spaces *out) {
    (void)params;
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = 1;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 2;
}
static void broken_init(Broken *env, const double *params) { (void)params; env->break_at = -1; }
static void broken_reset(Broken *env) { env->tick = 0; env->observations[0] = 0.0f; }
static int broken_step(Broken *env) {
    env->tick += 1;
    env->observations[0] = (float)env->tick;
    env->rewards[0] = 0.0f;
    env->terminals[0] = env->truncations[0] = 0;
    return env->tick == env->break_at ? -1 : 0;
}
static int broken_set_state(Broken *env, const double *state, int n) {
    if (n != 1) return -1;
    env->break_at = (int)state[0];
    return 0;
}
static int broken_error(const Broken *env, char *out, int size) {
    return snprintf(out, (size_t)size, "tick %d: the gears jammed", env->tick);
}
CENV_ENV(broken, Broken, BrokenLog, "breaks when told to", set_state, error)
"""
MUTE_H = (BROKEN_H.replace("broken", "mute").replace("Broken", "Mute").replace(", error)", ")")
          .replace('static int mute_error(const Mute *env, char *out, int size) {\n'
                   '    return snprintf(out, (size_t)size, "tick %d: the gears jammed", env->tick);\n}\n', ""))


@pytest.fixture(scope="module")
def broken_library(tmp_path_factory):
    folder = tmp_path_factory.mktemp("broken")
    (folder / "broken.h").write_text(BROKEN_H)
    (folder / "mute.h").write_text(MUTE_H)
    return str(build_library([folder / "broken.h", folder / "mute.h"], folder / "libbroken.so"))


# `tally`: one agent; each step at an even tick logs a goal, as a PufferLib Ocean env logs an event in the
# step it happens (its Log accumulates until Python reads it); episodes end at `length` (0: never).
TALLY_H = r"""
#include "core.h"
typedef struct { float goals; } TallyLog;
typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    TallyLog log;
    int length, tick;
    cenv_rng rng;
} Tally;
static const cenv_param tally_params[] = {{"length", 0, 0, 1000, 1, "steps per episode (0: no end)"}};
static const char *const tally_log_names[] = {"goals"};
static void tally_spaces(const double *params, cenv_spaces *out) {
    (void)params;
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = 1;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 2;
}
static void tally_init(Tally *env, const double *params) { env->length = (int)params[0]; }
static void tally_reset(Tally *env) {
    env->tick = 0;
    env->observations[0] = 0.0f;
}
static int tally_step(Tally *env) {
    env->tick += 1;
    env->observations[0] = (float)env->tick;
    if (env->tick % 2 == 0) env->log.goals += 1.0f;
    int ended = env->length > 0 && env->tick >= env->length;
    env->truncations[0] = (uint8_t)ended;
    return ended;
}
CENV_ENV(tally, Tally, TallyLog, "logs a statistic in steps that end no episode")
"""


def test_statistics_written_in_a_step_that_ends_no_episode_fail_the_step_instead_of_vanishing(tmp_path):
    """They were dropped without a word (the Log is cleared before each step and read only when an episode
    ends): a PufferLib port that logs events as they happen trained with wrong statistics."""
    (tmp_path / "tally.h").write_text(TALLY_H)
    library = str(build_library([tmp_path / "tally.h"], tmp_path / "libtally.so"))
    with jaxlab.make("tally", num_envs=3, num_threads=2, library=library, length=4) as env:
        env.reset()
        env.step(np.zeros(3, np.int32))
        with pytest.raises(RuntimeError) as caught:
            env.step(np.zeros(3, np.int32))
    assert ("env 'tally' #0 broke the step contract at step 2: its step wrote the statistic goals (1) to its log "
            "but ended no agent's episode") in str(caught.value)
    assert "in the step the episode ends (see BUILD.md)" in str(caught.value)  # whole: not cut at the buffer


@pytest.mark.parametrize("name", ["broken", "mute"])
def test_a_step_that_returns_a_failure_fails_with_the_envs_own_message(broken_library, name):
    with jaxlab.make(name, num_envs=3, num_threads=2, library=broken_library) as env:
        env.reset()
        env.set_state(1, [2])
        env.step(np.zeros(3, np.int32))
        with pytest.raises(RuntimeError) as caught:
            env.step(np.zeros(3, np.int32))
        assert env.observations[:, 0].tolist() == [2.0, 2.0, 2.0]  # every env stepped; none was reset
    if name == "broken":
        assert str(caught.value).endswith(f"env 'broken' #1 failed at step 2: tick 2: the gears jammed")
    else:
        assert "env 'mute' #1 failed at step 2: its step returned -1 (a failure) and it has no `error` option" \
            in str(caught.value)


def test_an_env_without_episode_return_trains_with_no_best_checkpoint_and_a_warning(library, tmp_path):
    """End to end: the default checkpoint.best_metric names a statistic this env does not log (the
    contract does not ask for one); the run trains and saves, with one warning and no best."""

    from jaxlab.config import load_config
    from jaxlab.run.loop import train_run

    config, _ = load_config("gated", flags=["--env.library", library, "--vec.num-envs", "8", "--train.bptt-horizon",
                                            "8", "--train.minibatch-size", "16", "--policy.hidden-size", "16",
                                            "--train.total-timesteps", "128", "--checkpoint.keep", "1"])
    said = []
    result = train_run(config, tmp_path / "run", warn=said.append)
    assert result.error is None and len(result.records) == 2 and result.checkpoint is not None
    warned = [line for line in said if "episode_return" in line]
    assert len(warned) == 1 and warned[0].startswith(
        "this env logs no episode_return, so no checkpoint is kept as the best; pick a metric with "
        "--checkpoint.best-metric NAME (") and "episode_length" in warned[0]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["best"] is None


def test_config_warns_as_train_does_for_the_default_best_metric_of_an_env_without_it(library, capsys):
    """`jaxlab config`, train's dry run, says what train says of the default best_metric on an env that
    logs no episode_return: a warning, not an error (the default was not the user's choice)."""
    from jaxlab import cli

    assert cli.main(["config", "gated", "--env.library", library]) == 0
    out, err = capsys.readouterr()
    assert 'best_metric = "episode_return"' in out
    assert err.startswith("jaxlab: this env logs no episode_return, so no checkpoint is kept as the best; pick a "
                          "metric with --checkpoint.best-metric NAME (global_step, ") and "episode_length" in err


def test_the_done_line_of_an_env_without_episode_return(library, tmp_path):
    """The last line of `jaxlab train` for an env that ends episodes but logs no episode_return: `done: …`,
    not a KeyError after the run had trained and saved."""
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "gated", "--env.library", library,
                             "--env.length", "3", "--vec.num-envs", "8", "--train.bptt-horizon", "8",
                             "--train.minibatch-size", "16", "--policy.hidden-size", "16", "--train.total-timesteps",
                             "128", "--run-dir", str(tmp_path / "run"), "--log.dashboard", "plain"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("done: 128 steps in ") and "no episode return was logged" in last, result.stdout
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["episodes"] > 0 and r["episode_length"] == 3.0 for r in records)  # episodes did end


def test_the_readmes_stepping_snippet_prints_the_episodes_that_end(capsys):
    """README's first snippet under 'Stepping environments from Python' printed nothing: it stepped target
    100 times, and target's episodes last 128 steps, so its `if info: print(...)` never ran. Run as
    written, it prints the episodes that ended (every one of the 4,096 agents' at once, twice in 300 steps)."""
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme.split("## Stepping environments from Python", 1)[1]
    exec(compile(section.split("```python\n", 1)[1].split("\n```", 1)[0], "README.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed and all(line.startswith("4096 ") for line in printed), printed

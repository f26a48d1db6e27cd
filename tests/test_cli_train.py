"""`jaxlab train` end to end in a subprocess: a short run, its run dir, and config errors (exit 2)."""

import json
import subprocess
import sys


def jaxlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_short_training_run_writes_its_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    result = jaxlab("train", "cartpole", "--train.total-timesteps", "2048", "--vec.num-envs=8", "--train.minibatch-size", "64",
                    "--policy.hidden_size", "16", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert "8 envs x 1 agents x horizon 16 = batch 128" in result.stdout
    assert "update    16/16" in result.stdout
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 16 and records[-1]["global_step"] == 2048
    assert "hidden_size = 16" in (run_dir / "config.toml").read_text()


def test_config_errors_exit_2_with_the_rule_and_no_traceback():
    result = jaxlab("train", "cartpole", "--train.total-timesteps", "100")
    assert result.returncode == 2
    assert "train.total_timesteps=100 is less than one batch of 1,024" in result.stderr
    assert "Traceback" not in result.stderr
    result = jaxlab("train", "cartpole", "--policy.lstm", "maybe")
    assert result.returncode == 2 and "policy.lstm='maybe' is not a boolean" in result.stderr
    result = jaxlab("train", "cartpol")
    assert result.returncode == 2 and "Did you mean 'cartpole'" in result.stderr


def test_unwritable_run_dir_is_refused_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = jaxlab("train", "cartpole", "--run-dir", str(blocker / "run"))
    assert result.returncode == 2
    assert f"cannot write '{blocker / 'run'}'" in result.stderr and "--run-dir" in result.stderr


def test_help_describes_every_key():
    result = jaxlab("train", "--help")
    assert result.returncode == 0
    assert "--train.bptt-horizon" in result.stdout and "(default 16)" in result.stdout
    assert "--policy.lstm" in result.stdout and "(default true)" in result.stdout


# `counter`: one agent that sees its tick and ends its episode (terminal) every third step; it logs
# only episode_length (the env contract asks for no episode_return)
COUNTER_H = r"""
#include "core.h"
typedef struct { float episode_length; } CounterLog;
typedef struct {
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    CounterLog log;
    int tick;
    cenv_rng rng;
} Counter;
static const cenv_param counter_params[] = {{"length", 3, 1, 100, 1, "steps per episode"}};
static const char *const counter_log_names[] = {"episode_length"};
static void counter_spaces(const double *params, cenv_spaces *out) {
    (void)params;
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = 1;
    out->obs_dtype = CENV_DTYPE_FLOAT32;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 2;
}
static void counter_init(Counter *env, const double *params) { (void)env; (void)params; }
static void counter_reset(Counter *env) {
    env->tick = 0;
    env->observations[0] = 0.0f;
}
static int counter_step(Counter *env) {
    env->tick += 1;
    env->observations[0] = (float)env->tick;
    env->rewards[0] = (float)env->actions[0];
    env->terminals[0] = (uint8_t)(env->tick >= 3);
    env->truncations[0] = 0;
    if (env->tick < 3) return 0;
    env->log.episode_length = (float)env->tick;
    return 1;
}
CENV_ENV(counter, Counter, CounterLog, "ends every third step; logs no episode_return")
"""


def test_an_env_that_logs_no_episode_return_ends_with_the_done_line(tmp_path):
    """The last line of a run of an env without episode_return (whose episodes end): `done: …`, not a
    KeyError after the run had trained and saved."""
    import os

    header = tmp_path / "counter.h"
    header.write_text(COUNTER_H)
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", str(header), "--vec.num-envs", "8",
                             "--train.bptt-horizon", "8", "--train.minibatch-size", "16", "--policy.hidden-size", "16",
                             "--train.total-timesteps", "128", "--run-dir", str(tmp_path / "run"),
                             "--log.dashboard", "plain"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "JAXLAB_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("done: 128 steps in ") and "no episode return was logged" in last, result.stdout

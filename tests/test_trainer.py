"""Trainer wiring: static shapes (one compile per jitted function), rollout bookkeeping (resets, start
carries, truncation bootstrap), the LR schedule in the metrics, metrics.jsonl."""

import json
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.agent import ppo
from jaxlab.config import ConfigError, load_config
from jaxlab.observe.records import read_metrics
from jaxlab.run.loop import train_loop
from jaxlab.train.trainer import Trainer


def small_config(env="cartpole", *flags):
    config, _ = load_config(env, flags=["--vec.num-envs", "8", "--train.bptt-horizon", "8",
                                        "--train.minibatch-size", "16", "--policy.hidden-size", "16",
                                        "--policy.mlp-layers", "16", "--train.total-timesteps", "640", *flags])
    return config


@pytest.mark.parametrize("flags, epochs_run", [([], {2}), (["--train.target-kl", "1e-9"], {1})])
def test_each_jitted_function_compiles_once(flags, epochs_run):
    # target_kl stops epochs inside the one compiled update (a lax.cond), whichever epochs run
    chex.clear_trace_counter()  # chex counts by function across the parametrised cases
    with Trainer(small_config("cartpole", *flags), max_traces=1) as trainer:  # chex.assert_max_traces: no retrace
        records = []
        for _ in range(trainer.sizes.num_updates):
            trainer.evaluate()
            trainer.train()
            records.append(trainer.mean_and_log())
    assert len(records) == 10
    assert {r["compiles"] for r in records} == {3}  # step, finish, update: traced in the first update only
    assert {r["epochs_run"] for r in records} == epochs_run
    for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance",
                "grad_norm", "learning_rate", "sps", "global_step", "wall_time"):
        assert all(np.isfinite(r[key]) for r in records), key


#: The learning rate 0.01 at optimizer step k of ``total``, worked by hand, and optax's schedule of it.
HAND_WORKED_LR = {"linear": lambda k, total: 0.01 * (1 - k / total),
                  "cosine": lambda k, total: 0.01 * 0.5 * (1 + np.cos(np.pi * k / total))}
OPTAX_LR = {"linear": lambda total: optax.linear_schedule(0.01, 0.0, total),
            "cosine": lambda total: optax.cosine_decay_schedule(0.01, total)}


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_logged_learning_rate_comes_from_the_schedule(kind):
    # each update's logged LR is the mean over its optimizer steps; the schedule's length (the run's
    # optimizer steps) is an input of the update, and gives what optax's schedule with it as a constant gives
    config = small_config("cartpole", "--train.learning-rate", "0.01", "--train.update-epochs", "2",
                          "--train.anneal-lr", kind)
    with Trainer(config) as trainer:
        steps_per_update = 2 * trainer.sizes.num_minibatches  # 2 epochs x 4 minibatches
        total = steps_per_update * trainer.sizes.num_updates
        assert int(trainer.state.total_steps) == total == 80
        lrs = []
        for _ in range(3):
            trainer.evaluate()
            lrs.append(trainer.train()["learning_rate"])
    for u, lr in enumerate(lrs):
        steps = np.arange(u * steps_per_update, (u + 1) * steps_per_update)
        assert lr == pytest.approx(float(np.mean(HAND_WORKED_LR[kind](steps, total))), rel=1e-5)
        assert lr == pytest.approx(float(np.mean([OPTAX_LR[kind](total)(k) for k in steps])), rel=1e-6)


def test_trainers_of_other_lengths_load_one_compiled_update_and_a_resume_takes_the_new_length(tmp_path):
    # train.total_timesteps sets the LR schedule's length and prio beta's (cosine, prioritised here): the
    # update takes it as an input, so a trainer of the same shapes and another length loads every executable,
    # the update's included, from the persistent compile cache ("partial (4 of 5)" when the length was a
    # constant of the update). A checkpoint resumed under a longer run continues its step over the new length.
    flags = ("--train.learning-rate", "0.01", "--train.anneal-lr", "cosine", "--train.prio-alpha", "0.5")
    with Trainer(small_config("cartpole", *flags)) as first:
        first.evaluate()
        first.train()
        first.mean_and_log()
        first.save_checkpoint(tmp_path / "ck")
    longer = small_config("cartpole", *flags, "--train.total-timesteps", "1344")
    with Trainer(longer) as second:
        second.evaluate()
        second.train()
        assert second.mean_and_log()["compile_cache"] == "hit"
        assert second.traces["update"] == 1
    with Trainer(longer) as resumed:
        resumed.load_checkpoint(tmp_path / "ck")
        per_update = longer.train.update_epochs * resumed.sizes.num_minibatches
        total = resumed.sizes.num_updates * per_update
        assert (int(resumed.state.step), int(resumed.state.total_steps)) == (per_update, total)
        resumed.evaluate()
        steps = np.arange(per_update, 2 * per_update)
        assert resumed.train()["learning_rate"] == pytest.approx(
            float(np.mean(HAND_WORKED_LR["cosine"](steps, total))), rel=1e-5)


def test_segment_resets_and_start_carries():
    config = small_config("memory", "--env.delay", "2")  # episodes of 4 steps
    with Trainer(config) as trainer:
        first, _ = trainer.rollout.collect(trainer.acting_params)  # the params and the observation statistics
        first = jax.tree.map(np.asarray, first)  # the batch is the rollout's buffers: valid until the next one
        carry_after_first = trainer.rollout.carry
        second, _ = trainer.rollout.collect(trainer.acting_params)
    assert bool(first.resets[0].all())  # every agent starts an episode
    ended = np.asarray(first.terminals | first.truncations)
    np.testing.assert_array_equal(np.asarray(first.resets[1:]), ended[:-1])
    np.testing.assert_array_equal(np.asarray(second.resets[0]), ended[-1])
    np.testing.assert_array_equal(np.asarray(first.start_carry[1]), 0.0)
    np.testing.assert_array_equal(np.asarray(second.start_carry[1]), np.asarray(carry_after_first[1]))
    assert np.abs(np.asarray(second.start_carry[1])).sum() > 0  # a real carry, not zeros


def numpy_values(params, observations, resets, final_obs_at, lstm: bool):
    """The critic's value of each step's final observation, computed in numpy from the params alone
    (an independent re-implementation of jaxlab.agent.policy): the encoder Dense + GELU (tanh form),
    the LSTM from a zero carry over ``observations`` [T, A, O] with ``resets`` [T, A], then the value of
    ``final_obs_at[t]`` [A, O] with the carry each agent had after step t."""
    p = {k: {n: np.asarray(v, np.float64) for n, v in layer.items()} if isinstance(layer, dict) else layer
         for k, layer in params["params"].items()}

    def encode(x):
        y = x @ p["encoder"]["kernel"] + p["encoder"]["bias"]
        return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))

    def critic(h):
        return (h @ p["critic"]["kernel"] + p["critic"]["bias"])[:, 0]

    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    def cell(c, h, x):
        gates = encode(x) @ p["input_gates"]["kernel"] + p["input_gates"]["bias"] + h @ np.asarray(
            params["params"]["recurrent_kernel"], np.float64)
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        return c, sigmoid(o) * np.tanh(c)

    A = observations.shape[1]
    H = p["encoder"]["kernel"].shape[1]
    c, h = np.zeros((A, H)), np.zeros((A, H))
    values = {}
    for t in range(len(observations)):
        if not lstm:
            values[t] = critic(encode(final_obs_at[t]))
            continue
        keep = ~resets[t][:, None]
        c, h = cell(c * keep, h * keep, observations[t])
        values[t] = critic(cell(c, h, final_obs_at[t])[1])
    return values


class RecordingEnv:
    """Wraps a VecEnv and keeps a copy of final_observations after every step."""

    def __init__(self, env):
        self._env, self.finals = env, []

    def step(self, actions):
        out = self._env.step(actions)
        self.finals.append(self._env.final_observations.copy())
        return out

    def __getattr__(self, name):
        return getattr(self._env, name)


@pytest.fixture
def device_memory(monkeypatch):
    """The rollout's host-to-device copies made real copies, as on an accelerator: on the CPU jax.device_put
    may alias a 64-byte-aligned numpy buffer (the env's are page-aligned) even with may_alias=False, and an
    aliased final-observation buffer would hide a rollout that forgot to copy it after a truncation."""
    from jaxlab.train import rollout

    monkeypatch.setattr(rollout, "to_device", lambda array: jax.device_put(np.array(array, copy=True)))


def cut_cartpole_segment(max_steps: int, lstm: str):
    """One segment (horizon 8, raw observations) of cartpole cut at ``max_steps``, as numpy arrays; the final
    observations its env wrote, [T, A, 4]; and the values numpy_values recomputes from the segment's
    observations and those final observations, [T, A]."""
    config = small_config("cartpole", "--env.max_steps", str(max_steps), "--policy.lstm", lstm,
                          "--train.obs-norm", "false")
    with Trainer(config) as trainer:
        recording = RecordingEnv(trainer.env)
        trainer.rollout.envs[0] = recording
        segment, _ = trainer.rollout.collect(trainer.state.params)
        segment, finals = jax.device_get(segment), np.asarray(recording.finals)
        expected = numpy_values(trainer.state.params, np.asarray(segment.obs, np.float64), np.asarray(segment.resets),
                                finals.astype(np.float64), lstm == "true")
    return segment, finals, expected


@pytest.mark.parametrize("lstm", ["true", "false"])
def test_truncation_bootstrap_is_the_value_of_the_cut_observation(lstm, device_memory):
    # Cartpole cut at 5 steps with horizon 8: every agent that survives is truncated at step 4, in the
    # middle of the segment, and its next observation already belongs to a new episode.
    # raw observations (obs_norm off): numpy_values recomputes the values from them
    segment, finals, expected = cut_cartpole_segment(5, lstm)
    truncated = segment.truncations
    assert truncated[4].sum() >= 6 and not np.delete(truncated, 4, axis=0).any()
    # a truncation ends the episode for the carry too: it is zeroed before the next step
    assert segment.resets[5][truncated[4]].all()
    boot = segment.bootstrap_values
    assert (np.delete(boot, 4, axis=0) == 0).all() and (boot[4][~truncated[4]] == 0).all()
    np.testing.assert_allclose(boot[4][truncated[4]], expected[4][truncated[4]], rtol=1e-4, atol=1e-6)
    assert (np.abs(boot[4][truncated[4]]) > 1e-3).all()
    # the final observation is not the observation after it (a new episode's first)
    assert not np.allclose(finals[4][truncated[4]], segment.obs[5][truncated[4]])


@pytest.mark.parametrize("lstm", ["true", "false"])
def test_a_truncation_at_the_last_step_of_a_batch_bootstraps_from_the_cut_observation(lstm, device_memory):
    # cut at 8 steps with horizon 8: the truncation is in row T - 1, whose flags and bootstrap the batch's
    # finish call writes (not a step call of the next batch)
    segment, _, expected = cut_cartpole_segment(8, lstm)
    truncated = segment.truncations
    assert truncated[7].sum() >= 6 and not truncated[:7].any()
    boot = segment.bootstrap_values
    np.testing.assert_allclose(boot[7][truncated[7]], expected[7][truncated[7]], rtol=1e-4, atol=1e-6)
    assert (boot[:7] == 0).all() and (boot[7][truncated[7]] != 0).all()


def test_values_and_log_probs_in_the_segment_match_the_policy():
    config = small_config("target", "--env.agents_per_env", "2", "--vec.num-envs", "4")
    with Trainer(config) as trainer:
        segment, _ = trainer.rollout.collect(trainer.acting_params)
        acting = trainer.norm.acting_policy(trainer.policy)  # normalises the raw observations first
        _, head, values, _ = acting.apply(trainer.acting_params, segment.start_carry, segment.obs,
                                          segment.resets, method="unroll")
        from jaxlab.agent.distributions import log_prob_entropy

        logp, _ = log_prob_entropy(trainer.spec, head, None, segment.actions)
    np.testing.assert_allclose(values, segment.values, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(logp, segment.logp, rtol=1e-4, atol=1e-5)


def test_run_dir_holds_config_and_metrics(tmp_path):
    config = small_config()
    with Trainer(config, run_dir=tmp_path) as trainer:
        for _ in range(3):
            trainer.evaluate()
            trainer.train()
            trainer.mean_and_log()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in lines] == [64, 128, 192]
    for key in ("global_step", "wall_time", "sps", "episode_return", "episode_length", "compiles"):
        assert key in lines[-1]
    reloaded, _ = load_config("cartpole", config_file=tmp_path / "config.toml")
    assert reloaded == config


def run_files(run) -> dict:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_a_trainer_refuses_a_run_dir_that_holds_a_run_and_changes_nothing(tmp_path):
    """Trainer(config, run_dir=R) from Python appended to R's metrics.jsonl (and rewrote its config.toml)
    when R held a run already, mixing two runs' records; refused now, as `jaxlab train` refuses it, before
    anything is built or written."""
    from jaxlab.run.loop import train

    run = tmp_path / "run"
    with Trainer(small_config(), run_dir=run) as trainer:
        train_loop(trainer, updates=2)
    before = run_files(run)
    other = small_config("cartpole", "--train.seed", "1")
    with pytest.raises(ConfigError) as refused:
        Trainer(other, run_dir=run)
    assert str(refused.value) == (f"run dir {run} already holds a run (metrics.jsonl); a trainer recording there "
                                  "would append its records to that run's: give a new run_dir, or move that run "
                                  "away first")
    with pytest.raises(ConfigError, match="already holds a run"):
        train(other, run)  # jaxlab.run.loop.train goes through Trainer(config, run_dir)
    with Trainer(other) as trainer, pytest.raises(ConfigError, match="already holds a run"):
        trainer.record_to(run)
    assert run_files(run) == before
    (run / "checkpoints" / "2").mkdir(parents=True)  # a run with checkpoints: the hint is train_run's resume
    with pytest.raises(ConfigError) as refused:
        Trainer(other, run_dir=run)
    assert str(refused.value) == (
        f"run dir {run} already holds a run (checkpoints up to update 2); a trainer recording there would append "
        f"its records to that run's: give a new run_dir, continue that run from its checkpoints with "
        f"jaxlab.run.loop.train_run(config, {str(run)!r}, resume={str(run / 'checkpoints')!r}), or move that run "
        "away first")
    empty = tmp_path / "empty"  # an empty metrics.jsonl holds no run (as for `jaxlab train`)
    empty.mkdir()
    (empty / "metrics.jsonl").touch()
    with Trainer(small_config(), run_dir=empty) as trainer:
        train_loop(trainer, updates=1)
    assert [r["update"] for r in read_metrics(empty)] == [1]


def test_a_resumed_trainer_continues_its_run_dir_records(tmp_path):
    """A trainer that loaded a checkpoint of a run continues that run's metrics.jsonl with
    record_to(run_dir, resumed=True) (train_run's resume does); without it the run dir is refused with
    that hint, and records after the checkpoint's update are refused (they would be there twice)."""
    from jaxlab.run.resume import keep_metrics_until

    run = tmp_path / "run"
    config = small_config()
    with Trainer(config, run_dir=run) as first:
        train_loop(first, updates=3)
        first.save_checkpoint(run / "checkpoints" / "3")
        train_loop(first, updates=1)  # update 4: logged after the checkpoint
    with Trainer(config) as resumed:
        resumed.load_checkpoint(run / "checkpoints" / "3")
        with pytest.raises(ConfigError, match=re.escape(
                f"if this trainer continues that run (it is at update 3) say so with "
                f"record_to({str(run)!r}, resumed=True)")):
            resumed.record_to(run)
        with pytest.raises(ConfigError) as refused:
            resumed.record_to(run, resumed=True)
        assert str(refused.value) == (
            f"{run / 'metrics.jsonl'} holds records up to update 4, after update 3 that this trainer continues "
            f"from, so its next updates would be in it twice; drop them first with jaxlab.run.resume."
            f"keep_metrics_until({str(run / 'metrics.jsonl')!r}, 3), or record to a new run dir")
        assert [r["update"] for r in read_metrics(run)] == [1, 2, 3, 4]
        keep_metrics_until(run / "metrics.jsonl", 3)
        resumed.record_to(run, resumed=True)
        train_loop(resumed, updates=2)
    assert [r["update"] for r in read_metrics(run)] == [1, 2, 3, 4, 5]


def test_train_run_resume_still_appends_to_its_run_dir(tmp_path):
    """train_run's resume goes through record_to(resumed=True): the run dir's records go on after the
    checkpoint's update (the later ones cut), in its own run dir and in a new one."""
    from jaxlab.run.loop import train_run

    run, fresh = tmp_path / "run", tmp_path / "fresh"
    with Trainer(small_config(), run_dir=run) as first:
        train_loop(first, updates=2)
        first.save_checkpoint(run / "checkpoints" / "2")
        train_loop(first, updates=1)
    result = train_run(small_config("cartpole", "--train.total-timesteps", "256"), run,
                       resume=run / "checkpoints", warn=lambda line: None)
    assert result.error is None and result.resumed_from == run / "checkpoints" / "2"
    assert [r["update"] for r in read_metrics(run)] == [1, 2, 3, 4]
    train_run(small_config("cartpole", "--train.total-timesteps", "320"), fresh, resume=run / "checkpoints",
              warn=lambda line: None)
    assert [r["update"] for r in read_metrics(fresh)] == [5]


def runs_table(root, capsys) -> dict[str, str]:
    """`jaxlab runs ROOT`'s rows by run name: {name: status}."""
    from jaxlab.cli import main

    assert main(["runs", str(root)]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    status_at = header.index("status")
    return {row.split()[0]: row[status_at:].split("  ")[0].strip() for row in rows}


def test_a_run_through_the_python_api_ends_with_its_summary_and_jaxlab_runs_tells_how_it_ended(tmp_path, capsys):
    """Trainer(config, run_dir) and jaxlab.run.loop.train(config, run_dir) wrote no summary.json and held no
    lock: `jaxlab runs` listed such a run as "running or killed" forever. Now the trainer holds the run dir's
    lock while it trains and close() writes summary.json: done at its last update, stopped when closed before
    it, an error when its `with` block raised."""
    from jaxlab.run.lock import held
    from jaxlab.run.loop import train

    runs = tmp_path / "runs"
    with Trainer(small_config(), run_dir=runs / "trainer") as trainer:
        assert held(runs / "trainer") and (runs / "trainer" / "run.json").is_file()
        train_loop(trainer)
    train(small_config(), runs / "train")
    with Trainer(small_config(), run_dir=runs / "short") as trainer:
        train_loop(trainer, updates=2)
    with pytest.raises(ZeroDivisionError), Trainer(small_config(), run_dir=runs / "failed") as trainer:
        train_loop(trainer, updates=1)
        1 / 0
    for name in ("trainer", "train"):
        summary = json.loads((runs / name / "summary.json").read_text())
        assert (summary["updates"], summary["global_step"]) == (10, 640)
        assert "stopped" not in summary and "error" not in summary
        assert json.loads((runs / name / "run.json").read_text())["env_name"] == "cartpole"
        assert not held(runs / name)
    assert json.loads((runs / "short" / "summary.json").read_text())["stopped"] == "closed at update 2 of 10"
    assert json.loads((runs / "failed" / "summary.json").read_text())["error"] == \
        "ZeroDivisionError: division by zero"
    assert runs_table(runs, capsys) == {"trainer": "done", "train": "done",
                                        "short": "stopped (closed at update 2 of 10)", "failed": "error"}


HOLD_A_RUN_DIR = """
import sys
from jaxlab.config import load_config
from jaxlab.train.trainer import Trainer
config, _ = load_config("cartpole", flags=sys.argv[2:])
with Trainer(config, run_dir=sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_a_second_writer_into_a_run_dir_that_a_trainer_holds_is_refused_naming_it(tmp_path):
    """Two Python processes could record into one run dir (a trainer that had not logged yet left an empty
    metrics.jsonl, which holds no run), mixing their records. Now the first holds the run dir's lock and
    the second is refused, through Trainer, jaxlab.run.loop.train and record_to alike, writing nothing."""
    import subprocess
    import sys

    from jaxlab.run.lock import RunDirInUse
    from jaxlab.run.loop import train

    run = tmp_path / "run"
    flags = ["--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16",
             "--policy.hidden-size", "16", "--policy.mlp-layers", "16", "--train.total-timesteps", "640"]
    holder = subprocess.Popen([sys.executable, "-c", HOLD_A_RUN_DIR, str(run), *flags], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = run_files(run)
        refusal = f"run dir {run} is in use by process {holder.pid} ("
        with pytest.raises(RunDirInUse) as refused:
            Trainer(small_config(), run_dir=run)
        assert str(refused.value).startswith(refusal)
        assert str(refused.value).endswith("); wait for it to end or stop it, or pass another run_dir")
        with pytest.raises(RunDirInUse, match=re.escape(refusal)):
            train(small_config(), run)
        with Trainer(small_config()) as other, pytest.raises(RunDirInUse, match=re.escape(refusal)):
            other.record_to(run, resumed=True)  # a resume skips the check for an earlier run, not this one
        assert run_files(run) == before
    finally:
        holder.communicate("", timeout=120)
    assert holder.returncode == 0
    assert json.loads((run / "summary.json").read_text())["stopped"] == "closed at update 0 of 10"


def test_train_before_evaluate_is_an_error():
    with Trainer(small_config()) as trainer:
        with pytest.raises(RuntimeError, match="call evaluate\\(\\) first"):
            trainer.train()


def test_bad_sizes_are_refused_before_anything_compiles():
    with pytest.raises(ConfigError, match=r"train.minibatch_size=12 must be a multiple of train.bptt_horizon=8"):
        Trainer(small_config("cartpole", "--train.minibatch-size", "12"))
    with pytest.raises(ConfigError, match=r"total_timesteps=10 is less than one batch of 64"):
        Trainer(small_config("cartpole", "--train.total-timesteps", "10"))


def test_continuous_actions_flow_through_the_rollout():
    with Trainer(small_config("pendulum")) as trainer:
        trainer.evaluate()
        metrics = trainer.train()
        assert trainer.segment is None and np.isfinite(metrics["policy_loss"])
        log_std = trainer.state.params["params"]["log_std"]
        assert log_std.shape == (1,) and jax.numpy.all(jnp.isfinite(log_std))


def test_continuous_actions_are_kept_unclipped_with_the_log_prob_of_the_raw_sample():
    # as CleanRL's ppo_continuous_action: the env clips the torque to [-2, 2] itself; the segment keeps the
    # Gaussian's sample and its log-prob (a clipped action's Gaussian log-prob is no probability of the
    # policy's). 512 samples of std 1 around a mean near 0: some lie beyond +-2.
    config = small_config("pendulum", "--vec.num-envs", "32", "--train.bptt-horizon", "16",
                          "--train.minibatch-size", "128")
    with Trainer(config) as trainer:
        segment, _ = trainer.rollout.collect(trainer.acting_params)
        acting = trainer.norm.acting_policy(trainer.policy)
        _, head, _, log_std = acting.apply(trainer.acting_params, segment.start_carry, segment.obs, segment.resets,
                                           method="unroll")
        from jaxlab.agent.distributions import log_prob_entropy

        logp, _ = log_prob_entropy(trainer.spec, head, log_std, segment.actions)
        actions = np.asarray(segment.actions)
    assert actions.shape == (16, 32, 1) and (np.abs(actions) > 2.0).any()
    np.testing.assert_allclose(logp, segment.logp, rtol=1e-4, atol=1e-5)


def test_a_batch_of_several_segments_is_consecutive_segments_side_by_side():
    one = small_config("cartpole", "--train.minibatch-size", "64")
    two = small_config("cartpole", "--train.minibatch-size", "64", "--train.batch-size", "128")
    with Trainer(one) as single, Trainer(two, max_traces=1) as double:
        assert (double.sizes.segments, double.sizes.num_updates, double.sizes.num_minibatches) == (2, 5, 2)
        single.evaluate()
        first = jax.tree.map(np.asarray, single.segment)  # the rollout's buffers: copied before the next batch
        single.evaluate()
        second = single.segment
        double.evaluate()
        both = double.segment
        assert both.obs.shape[:2] == (8, 16) and double.global_step == 128
        for name in ("obs", "actions", "rewards", "resets", "bootstrap_values"):
            np.testing.assert_array_equal(getattr(both, name), np.concatenate(
                [getattr(first, name), getattr(second, name)], axis=1), err_msg=name)
        np.testing.assert_array_equal(both.next_values, np.concatenate([first.next_values, second.next_values]))
        np.testing.assert_array_equal(both.start_carry[1][8:], second.start_carry[1])
        assert np.abs(second.start_carry[1]).sum() > 0  # the second segment continues the first's memory
        double.train()
        double.evaluate()
        double.train()


@pytest.mark.parametrize("obs_norm, groups", [("false", "1"), ("true", "1"), ("false", "2")])
def test_the_update_reruns_each_sequence_from_its_start_carry_and_resets(obs_norm, groups):
    # one minibatch, one epoch: the update's metrics are those of its first forward pass, at the params the
    # rollout acted with, so re-running the sequences (from the carries the rollout had at their first steps,
    # zeroed where the step before ended an episode) must give back the rollout's values and log-probs: the
    # value loss is 0.5 mean((V_rollout - R)^2), no ratio leaves [1 - clip, 1 + clip], the KL estimate is ~0.
    # Memory with delay 2 ends episodes every 4 steps, inside the horizon of 6, so the second batch starts in
    # the middle of episodes, from a carry that is not zeros. A larger actor init makes the log-probs depend
    # on the carry. With obs_norm, the update must normalise the batch with the statistics the rollout acted
    # with (frozen during the batch), not with those it merges the batch into. With 2 groups, each group's
    # carry must be the start carry of its own rows.
    config = small_config("memory", "--env.delay", "2", "--train.bptt-horizon", "6", "--train.minibatch-size",
                          "48", "--train.update-epochs",
                          "1", "--train.obs-norm", obs_norm, "--train.reward-scale", "1",
                          "--policy.actor-init-scale", "1.0", "--vec.groups", groups,
                          "--device.matmul-precision", "highest")  # on a GPU, float32 matmuls without TF32
    t = config.train
    with Trainer(config) as trainer:
        assert trainer.sizes.num_minibatches == 1 and trainer.norm.obs_norm == (obs_norm == "true")
        assert len(trainer.rollout.envs) == int(groups)
        trainer.evaluate()
        trainer.train()
        trainer.evaluate()
        segment = jax.tree.map(np.asarray, trainer.segment)
        metrics = trainer.train()
    assert not segment.resets[0].any() and segment.resets[1:].any()
    assert np.abs(segment.start_carry[1]).sum() > 0
    _, returns = ppo.gae(segment.rewards, segment.values, segment.terminals, segment.truncations,
                         segment.bootstrap_values, segment.next_values, t.gamma, t.gae_lambda)
    expected = 0.5 * np.mean((segment.values - np.asarray(returns)) ** 2)
    assert metrics["value_loss"] == pytest.approx(expected, rel=1e-4)
    assert metrics["clip_fraction"] == 0.0
    assert abs(metrics["approx_kl"]) < 1e-8


def test_only_process_0_of_a_run_over_several_processes_records_through_the_python_api(tmp_path, monkeypatch):
    """Trainer(config, run_dir) in every process of a multi-process run (jax.distributed, from Python) had each
    process write config.toml and append its records to one metrics.jsonl, interleaved. As under `jaxlab train`
    (train_run), a process other than 0 now writes nothing there."""
    from jaxlab.run import distributed

    monkeypatch.setattr(distributed, "is_primary", lambda: False)
    run = tmp_path / "run"
    with Trainer(small_config(), run_dir=run) as trainer:
        train_loop(trainer, updates=2)
        assert trainer.run_dir == run
    assert not run.exists()

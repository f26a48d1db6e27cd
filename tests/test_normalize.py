"""Running observation normalisation and return-based reward scaling (jaxlab.agent.normalize) on values
worked by hand; through the trainer: frozen in eval, saved in checkpoints and resumed bit for bit,
reward_scale as an explicit override, and one compile per jitted function with every option on."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.agent import normalize
from jaxlab.config import load_config
from jaxlab.run.loop import train_loop
from jaxlab.train.trainer import Trainer


def test_running_mean_and_var_by_value():
    stats = normalize.init_stats((2,))
    np.testing.assert_array_equal(stats.mean, [0, 0]) and np.testing.assert_array_equal(stats.var, [1, 1])
    x = jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])  # mean 3, 4; population variance 8/3
    stats = normalize.update(stats, x)
    # the prior count 1e-4 (mean 0, var 1) weighs 1e-4 / 3.0001 against the batch
    n, eps = 3.0, 1e-4
    total = n + eps
    want_mean = np.array([3.0, 4.0]) * n / total
    want_var = (1.0 * eps + 8 / 3 * n + np.array([3.0, 4.0]) ** 2 * eps * n / total) / total
    np.testing.assert_allclose(stats.mean, want_mean, rtol=1e-6)
    np.testing.assert_allclose(stats.var, want_var, rtol=1e-6)
    assert float(stats.count) == pytest.approx(total)
    # two merges are one merge of the union (Chan et al.)
    y = jnp.array([[-1.0, 0.0], [7.0, 2.0]])
    both = normalize.update(normalize.init_stats((2,)), jnp.concatenate([x, y]))
    twice = normalize.update(stats, y)
    np.testing.assert_allclose(twice.mean, both.mean, rtol=1e-5)
    np.testing.assert_allclose(twice.var, both.var, rtol=1e-5)
    # [T, A, features]: every leading axis is a sample
    np.testing.assert_allclose(normalize.update(normalize.init_stats((2,)), x[None]).mean, want_mean, rtol=1e-6)


def test_normalize_divides_by_the_std_and_clips():
    stats = normalize.RunningStats(jnp.array([1.0, -2.0]), jnp.array([4.0, 0.25]), jnp.float32(10))
    out = normalize.normalize(stats, jnp.array([[3.0, -1.0], [1.0, 100.0]]))
    np.testing.assert_allclose(out, [[1.0, 2.0], [0.0, 10.0]], rtol=1e-6)  # (x - mean) / sqrt(var); clip 10


def test_discounted_returns_and_reward_scaling_by_value():
    # gamma 0.5, one agent, rewards 1, 2, 3, its episode ending at the second step:
    # R = 1;  0.5 * 1 + 2 = 2.5 (then zeroed);  3
    rewards = jnp.array([[1.0], [2.0], [3.0]])
    ended = jnp.array([[False], [True], [False]])
    last, each = normalize.discounted_returns(jnp.zeros(1), rewards, ended, 0.5)
    np.testing.assert_allclose(each[:, 0], [1.0, 2.5, 3.0])
    np.testing.assert_allclose(last, [3.0])
    state, scaled = normalize.scale_rewards(normalize.init_return_scale(1), rewards, ended, 0.5)
    var = np.var([1.0, 2.5, 3.0])  # 0.7222...; the prior's 1e-4 count moves it by about 1e-4
    assert float(state.stats.var) == pytest.approx(var, rel=1e-3)
    np.testing.assert_allclose(scaled[:, 0], np.array([1.0, 2.0, 3.0]) / np.sqrt(float(state.stats.var) + 1e-8),
                               rtol=1e-6)
    np.testing.assert_allclose(state.returns, [3.0])
    # the running return carries over to the next segment
    _, each = normalize.discounted_returns(state.returns, jnp.array([[1.0]]), jnp.array([[False]]), 0.5)
    np.testing.assert_allclose(each[:, 0], [2.5])


def test_rows_of_waiting_agents_count_in_neither_statistic():
    # Segment.active 0 (an agent waiting for its env's reset): its observation and return are not its
    # episode's; the statistics are those of the active rows alone, by an independent numpy computation
    from jaxlab.train.learner import Segment
    from jaxlab.train.normalization import Normalization

    T, A, gamma = 4, 3, 0.5
    rng = np.random.default_rng(5)
    obs = rng.normal(2.0, 3.0, (T, A, 2)).astype(np.float32)
    rewards = rng.uniform(0, 2, (T, A)).astype(np.float32)
    active = np.array([[1, 1, 1], [1, 0, 1], [1, 0, 1], [0, 1, 1]], bool)
    terminals = np.array([[0, 1, 0], [0, 1, 0], [1, 1, 0], [1, 0, 0]], bool)  # a waiting row is terminal
    rewards[~active] = 0.0
    norm = Normalization(True, True, (2,), A, gamma)
    segment = Segment(obs=jnp.asarray(obs), resets=None, actions=None, logp=None, values=None,
                      rewards=jnp.asarray(rewards), terminals=jnp.asarray(terminals),
                      truncations=jnp.zeros((T, A), bool), bootstrap_values=None, next_values=None,
                      start_carry=None, active=jnp.asarray(active))
    new, scaled = norm.prepare_batch(norm.state, segment)

    def with_prior(x):  # the prior: mean 0, var 1, count 1e-4 (per feature)
        count = len(x) + 1e-4
        mean = x.sum(0) / count
        return mean, (1e-4 * (1 + mean ** 2) + ((x - mean) ** 2).sum(0)) / count, count

    mean, var, count = with_prior(obs[active].astype(np.float64))
    np.testing.assert_allclose(new["obs"].mean, mean, rtol=1e-5)
    np.testing.assert_allclose(new["obs"].var, var, rtol=1e-5)
    assert float(new["obs"].count) == pytest.approx(count)
    returns, running = [], np.zeros(A)
    for t in range(T):
        running = gamma * running + rewards[t]
        returns += list(running[active[t]])
        running = np.where(terminals[t], 0.0, running)
    _, var, count = with_prior(np.array(returns))
    assert float(new["reward"].stats.count) == pytest.approx(count)
    assert float(new["reward"].stats.var) == pytest.approx(var, rel=1e-5)
    np.testing.assert_allclose(scaled.rewards, rewards / np.sqrt(var + 1e-8), rtol=1e-5)
    # weights that select nothing leave the statistics as they were
    stats = normalize.update(new["obs"], jnp.asarray(obs), jnp.zeros((T, A), bool))
    for x, y in zip(stats, new["obs"]):
        np.testing.assert_array_equal(x, y)
    # weights all set: the unweighted update
    for x, y in zip(normalize.update(new["obs"], jnp.asarray(obs), jnp.ones((T, A), bool)),
                    normalize.update(new["obs"], jnp.asarray(obs))):
        np.testing.assert_allclose(x, y, rtol=1e-5)


def _returns_by_agent(rewards, ended, processes, segments, gamma, start):
    """Independent numpy: each agent's rewards and ends in time order from the batch's rows (process p's
    rows are its segments one after the other, each of its A / P agents), its running discounted return
    R = gamma R + r (zeroed after an end) at every step, and R after the batch, by global agent p*A/P + a."""
    T, N = rewards.shape
    local = N // (processes * segments)
    each, last = {}, np.zeros(processes * local)
    for p in range(processes):
        for a in range(local):
            agent, running, out = p * local + a, start[p * local + a], []
            for s in range(segments):
                row = (p * segments + s) * local + a
                for t in range(T):
                    running = gamma * running + rewards[t, row]
                    out.append((row, t, running))
                    if ended[t, row]:
                        running = 0.0
            each[agent], last[agent] = out, running
    return each, last


@pytest.mark.parametrize("processes, segments", [(1, 2), (2, 1), (2, 2), (2, 3)])
def test_reward_scaling_follows_each_agent_through_the_segments_of_every_process(processes, segments):
    # the update's batch of a P-process run is process 0's S segments, then process 1's (each of A/P
    # agents): an agent's return runs through its own process's segments, and no other row's
    from jaxlab.train.learner import Segment
    from jaxlab.train.normalization import Normalization

    T, local, gamma = 3, 2, 0.9
    A, N = processes * local, processes * segments * local
    rng = np.random.default_rng(processes * 10 + segments)
    rewards = rng.uniform(-1, 3, (T, N)).astype(np.float32)
    terminals, truncations = rng.random((T, N)) < 0.15, rng.random((T, N)) < 0.15
    ended = terminals | truncations
    norm = Normalization(False, True, (1,), A, gamma, processes)
    start = np.arange(1, A + 1, dtype=np.float32)  # a running return per agent from the batch before
    state = {"reward": norm.state["reward"]._replace(returns=jnp.asarray(start))}
    segment = Segment(obs=None, resets=None, actions=None, logp=None, values=None, rewards=jnp.asarray(rewards),
                      terminals=jnp.asarray(terminals), truncations=jnp.asarray(truncations), bootstrap_values=None,
                      next_values=None, start_carry=None)
    new, scaled = norm.prepare_batch(state, segment)
    each, last = _returns_by_agent(rewards.astype(np.float64), ended, processes, segments, gamma, start)
    returns = np.array([r for out in each.values() for _, _, r in out])
    assert returns.size == T * N
    count = returns.size + 1e-4  # the prior: mean 0, var 1, count 1e-4
    mean = returns.sum() / count
    var = (1e-4 * (1 + mean ** 2) + ((returns - mean) ** 2).sum()) / count
    assert float(new["reward"].stats.var) == pytest.approx(var, rel=1e-5)
    np.testing.assert_allclose(new["reward"].returns, last, rtol=1e-5)
    np.testing.assert_allclose(scaled.rewards, np.clip(rewards / np.sqrt(var + 1e-8), -10, 10), rtol=1e-5)


SMALL = ["--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16",
         "--policy.hidden-size", "16", "--policy.mlp-layers", "16"]


def config_of(env="pendulum", updates=6, *flags):
    config, _ = load_config(env, flags=[*SMALL, "--train.total-timesteps", str(64 * updates), *flags])
    return config


def test_pendulum_defaults_normalise_observations_and_scale_rewards_by_the_return():
    config, _ = load_config("pendulum")
    assert config.train.obs_norm == "auto" and config.train.reward_scale == "auto"
    with Trainer(config_of(), max_traces=1) as trainer:
        assert trainer.norm.obs_norm and trainer.norm.reward_norm
        records = train_loop(trainer, updates=3)
        stats = trainer.norm.state["obs"]
        assert float(stats.count) == pytest.approx(3 * 64 + 1e-4, rel=1e-6)
        assert records[-1]["compiles"] == 3 and records[-1]["return_std"] > 0  # normalisation adds no compile
        # pendulum's observations: cos, sin in [-1, 1], angular velocity in [-8, 8]
        assert np.all(np.abs(np.asarray(stats.mean)) < 8) and np.all(np.asarray(stats.var) > 0)


def test_reward_scale_is_an_explicit_override_and_uint8_pixels_are_not_normalised():
    with Trainer(config_of("pendulum", 6, "--train.reward-scale", "0.1", "--train.obs-norm", "false")) as trainer:
        assert not trainer.norm.obs_norm and not trainer.norm.reward_norm and trainer.norm.state == {}
        record = train_loop(trainer, updates=1)[-1]
        assert "return_std" not in record
    with Trainer(config_of("spot", 6, "--train.minibatch-size", "64")) as trainer:  # uint8 pixels: auto is off
        assert not trainer.norm.obs_norm and trainer.norm.reward_norm


def seek_codes(tmp_path) -> str:
    """BUILD.md's seek port ("Coming from PufferLib") with its observations kept as the original's uint8 codes
    (0 empty, 1 agent, 2 goal; uint8[size], one dimension): the header's path."""
    from test_sdk import coming_from_pufferlib_headers

    _, port = coming_from_pufferlib_headers()
    header = tmp_path / "seek.h"
    header.write_text(port.replace("float* observations;", "uint8_t* observations;")
                      .replace("CENV_DTYPE_FLOAT32", "CENV_DTYPE_UINT8")
                      .replace("env->size * sizeof(float)", "env->size"))
    return str(header)


def seek_config(header: str, *flags):
    config, _ = load_config("seek", flags=["--env.library", header, *flags])
    return config


def test_uint8_codes_of_one_dimension_learn_with_the_default_obs_norm(tmp_path):
    """train.obs_norm auto took every uint8 observation for pixels: seek's codes 1 and 2 reached the network
    divided by 255 (0.004, 0.008), not normalised, and with the defaults it found the goal in about half the
    episodes after 16K steps (perf 0.6, its random walk's level). auto now normalises uint8 of one dimension,
    as the trainer and the memory estimate both resolve it, and it finds the goal in nearly every episode."""
    from jaxlab.config.memory import env_shape, obs_norm_on

    config = seek_config(seek_codes(tmp_path), "--env.size", "15", "--train.total-timesteps", "16384")
    assert config.train.obs_norm == "auto" and obs_norm_on(config, env_shape(config))
    with Trainer(config) as trainer:
        assert trainer.norm.obs_norm
        records = train_loop(trainer)
    perf = np.mean([r["perf"] for r in records[-3:] if "perf" in r])
    assert perf >= 0.9, [round(r.get("perf", -1), 2) for r in records]


def test_statistics_are_frozen_in_eval():
    from jaxlab.train.evaluation import play

    with Trainer(config_of()) as trainer:
        train_loop(trainer, updates=2)
        before = jax.tree.map(np.asarray, trainer.norm.state)
        play(trainer, steps=50, num_envs=4)
        for x, y in zip(jax.tree.leaves(before), jax.tree.leaves(trainer.norm.state), strict=True):
            np.testing.assert_array_equal(x, y)


def test_statistics_are_saved_and_resumed_exactly(tmp_path):
    from jaxlab import checkpoint

    config = config_of("pendulum", 6)
    with Trainer(config) as straight:
        train_loop(straight, updates=6)
        reference = jax.tree.map(np.asarray, (straight.state.params, straight.norm.state))
    with Trainer(config) as first:
        train_loop(first, updates=3)
        first.save_checkpoint(tmp_path / "ck")
        saved = jax.tree.map(np.asarray, first.norm.state)
    state, _ = checkpoint.read(tmp_path / "ck", None)
    assert set(state["norm"]) == {"obs", "reward"}
    with Trainer(config) as second:
        second.load_checkpoint(tmp_path / "ck")
        for x, y in zip(jax.tree.leaves(saved), jax.tree.leaves(second.norm.state), strict=True):
            np.testing.assert_array_equal(x, y)
        train_loop(second, updates=3)
        resumed = jax.tree.map(np.asarray, (second.state.params, second.norm.state))
    for x, y in zip(jax.tree.leaves(reference), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(x, y)


def test_resuming_with_normalisation_switched_on_or_off_is_refused():
    from jaxlab.config import ConfigError
    from jaxlab.train.trainer import check_compatible

    saved = config_of("pendulum", 6)
    for flags, key in ((["--train.obs-norm", "false"], "train.obs_norm"),
                       (["--train.reward-scale", "0.1"], "train.reward_scale")):
        with pytest.raises(ConfigError, match=rf'cannot resume: .*{key} was "auto"'):
            check_compatible(saved, config_of("pendulum", 6, *flags))
    constant = config_of("pendulum", 6, "--train.reward-scale", "0.1")
    changes = check_compatible(constant, config_of("pendulum", 6, "--train.reward-scale", "0.2"))
    assert any("train.reward_scale" in str(c) for c in changes)  # a number for a number: allowed, listed
    # auto on float observations is on: true names the same statistics (was refused as a change), and back
    assert check_compatible(saved, config_of("pendulum", 6, "--train.obs-norm", "true")) == [
        'train.obs_norm: "auto" -> true']
    assert check_compatible(config_of("pendulum", 6, "--train.obs-norm", "true"), saved) == [
        'train.obs_norm: true -> "auto"']
    with pytest.raises(ConfigError, match=r'cannot resume: .*train.obs_norm was false, now "auto"'):
        check_compatible(config_of("pendulum", 6, "--train.obs-norm", "false"), saved)


def test_a_checkpoint_of_auto_from_before_the_codes_rule_resumes_and_plays_with_obs_norm_off(tmp_path, monkeypatch,
                                                                                              capsys):
    """A run of train.obs_norm auto on uint8 observations of one dimension trained with obs_norm off before auto
    normalised them, and its checkpoint's meta had no record of it: read by today's rule its resume and its eval
    would build the statistics it never had. Made here by running the old rule (auto_obs_norm_before, and a meta
    without "obs_norm"), it resumes and plays with obs_norm off, saying so in one line; what the resume saves
    records the value."""
    from jaxlab import checkpoint, cli
    from jaxlab.config import memory
    from jaxlab.train.evaluation import load_trainer

    header, run = seek_codes(tmp_path), tmp_path / "run"
    small = ["--env.size", "5", "--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16"]
    before_record = Trainer.checkpoint_meta
    with monkeypatch.context() as old:
        old.setattr(memory, "auto_obs_norm", memory.auto_obs_norm_before)
        old.setattr(Trainer, "checkpoint_meta", lambda self, metadata=None: {
            k: v for k, v in before_record(self, metadata).items() if k != "obs_norm"})
        assert cli.main(["train", header, *small, "--train.total-timesteps", "128", "--run-dir", str(run)]) == 0
    saved = checkpoint.step_dirs(run / "checkpoints")[0]
    old_meta = checkpoint.read_meta(saved)
    assert "obs_norm" not in old_meta and 'obs_norm = "auto"' in old_meta["config"]
    capsys.readouterr()
    note = ("note: this checkpoint of seek was trained before train.obs_norm auto normalised uint8 observations of "
            "one dimension (uint8[5]): it keeps obs_norm off, as it was trained (divided by 255); a new run normalises "
            "them")
    assert cli.main(["eval", header, "--checkpoint", str(run), "--episodes", "2"]) == 0
    assert capsys.readouterr().err.count(note) == 1
    said = []
    with load_trainer(saved, warn=said.append) as played:
        assert not played.norm.obs_norm and said.count(note) == 1
    assert cli.main(["train", header, "--resume", str(run), "--train.total-timesteps", "256"]) == 0
    assert capsys.readouterr().err.count(note) == 1
    resumed = checkpoint.read_meta(checkpoint.step_dirs(run / "checkpoints")[0])
    assert resumed["update"] == 4 and resumed["obs_norm"] is False


EMBED_CODES = '''import flax.linen as nn


class EmbedCodes(nn.Module):
    """Embeds the env's uint8 codes: integers only."""
    action: object
    hidden_size: int = 8

    @nn.compact
    def __call__(self, carry, obs):
        x = nn.Embed(3, 4)(obs).reshape(obs.shape[0], -1)
        return carry, nn.Dense(self.action.head_size)(x), nn.Dense(1)(x)[:, 0]
'''


def test_a_module_that_fails_on_normalised_uint8_codes_is_told_why_and_the_fix(tmp_path):
    """train.obs_norm auto now normalises uint8 observations of one dimension, so a policy.module written for
    the env's uint8 codes (an nn.Embed) gets float32 and fails in its own code: its error says that its obs
    were normalised and gives --train.obs-norm false, with which it trains as before."""
    from jaxlab.config import ConfigError

    (tmp_path / "embed.py").write_text(EMBED_CODES)
    header, module = seek_codes(tmp_path), f"{tmp_path / 'embed.py'}:EmbedCodes"
    small = ["--env.size", "5", "--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16",
             "--policy.module", module]
    with pytest.raises(ConfigError, match=r"Input type must be an integer.* \(its obs were float32, normalised, not "
                                          r"the env's uint8: train.obs_norm is on, auto normalises uint8 of one "
                                          r"dimension; --train.obs-norm false gives"):
        Trainer(seek_config(header, *small))
    with Trainer(seek_config(header, *small, "--train.obs-norm", "false")) as trainer:
        assert not trainer.norm.obs_norm

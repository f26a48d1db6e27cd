"""Config layering, parsing and the invariants checked before anything runs."""

import pytest

from jaxlab.config import ConfigError, derive_sizes, load_config, to_toml


def test_layers_env_file_then_config_file_then_flags(tmp_path):
    config, sources = load_config("cartpole")
    assert config.train.reward_scale == 0.1 and sources["train.reward_scale"] == "configs/envs/cartpole.toml"
    assert sources["train.gamma"] == "configs/default.toml"
    override = tmp_path / "mine.toml"
    override.write_text("[train]\nreward_scale = 0.5\ngamma = 0.9\n")
    config, sources = load_config("cartpole", config_file=override, flags=["--train.gamma=0.95"])
    assert config.train.reward_scale == 0.5 and sources["train.reward_scale"] == str(override)
    assert config.train.gamma == 0.95 and sources["train.gamma"] == "command line"


@pytest.mark.parametrize("text, value", [("true", True), ("False", False), ("1", True), ("0", False),
                                         ("yes", True), ("NO", False)])
def test_booleans(text, value):
    config, _ = load_config("cartpole", flags=["--policy.lstm", text])
    assert config.policy.lstm is value


@pytest.mark.parametrize("text", ["1e6", "1_000_000", "1000000", "1.0e6"])
def test_integers(text):
    config, _ = load_config("cartpole", flags=["--train.total-timesteps", text])
    assert config.train.total_timesteps == 1_000_000


@pytest.mark.parametrize("flags, message", [
    (["--train.total-timesteps", "1.5"], r"train.total_timesteps='1.5' is not an integer"),
    (["--train.gama", "0.9"], r"unknown config key 'train.gama'; did you mean 'train.gamma'"),
    (["--trian.gamma", "0.9"], r"unknown config section \[trian\].*did you mean \[train\]"),
    (["--env.delay", "3"], r"unknown config key 'env.delay'"),
    (["--train.learning-rate", "fast"], r"train.learning_rate='fast' is not a number"),
    (["--train.gamma"], r"flag --train.gamma needs a value"),
])
def test_bad_flags(flags, message):
    with pytest.raises(ConfigError, match=message):
        load_config("cartpole", flags=flags)


@pytest.mark.parametrize("flags, message", [
    (["--train.gamma", "0"], r"train.gamma=0.0 must be in \(0, 1\]"),
    (["--train.gae-lambda", "1.5"], r"train.gae_lambda=1.5 must be in \(0, 1\]"),
    (["--train.learning-rate", "0"], r"train.learning_rate=0.0 must be positive"),
    (["--train.clip-coef", "-0.1"], r"train.clip_coef=-0.1 must be >= 0"),
    (["--train.anneal-lr", "step"], r"train.anneal_lr='step' is not a schedule; use one of linear, cosine, none"),
    (["--train.minibatch-size", "100"], r"minibatch_size=100 must be a multiple of train.bptt_horizon=16"),
    (["--train.minibatch-size", "48"], r"minibatch_size=48 must divide the batch of 1,024"),
    (["--train.total-timesteps", "1000"], r"total_timesteps=1,000 is less than one batch of 1,024"),
    (["--vec.num-threads", "65", "--vec.num-envs", "128"], r"vec.num_threads=65 exceeds min\(vec.num_envs, 64\)=64"),
])
def test_invariants(flags, message):
    config, _ = load_config("cartpole", flags=flags)
    with pytest.raises(ConfigError, match=message):
        derive_sizes(config, agents_per_env=1)


def test_derived_sizes_with_several_agents_per_env():
    config, _ = load_config("target", flags=["--vec.num-envs", "4", "--train.minibatch-size", "256",
                                             "--train.total-timesteps", "10_000"])
    sizes = derive_sizes(config, agents_per_env=8)
    assert (sizes.num_agents, sizes.batch_size, sizes.num_minibatches, sizes.minibatch_agents, sizes.num_updates) \
        == (32, 512, 2, 16, 19)
    assert sizes.describe(config, 8) == ("4 envs x 8 agents x horizon 16 = batch 512; 2 minibatches of 256; "
                                         "19 updates for 10,000 steps")


def test_resolved_config_round_trips(tmp_path):
    config, _ = load_config("memory", flags=["--env.num-cues", "6", "--policy.lstm", "no", "--train.ent-coef", "0.01"])
    path = tmp_path / "config.toml"
    path.write_text(to_toml(config))
    assert load_config("memory", config_file=path)[0] == config

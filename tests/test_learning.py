"""Seeded training runs that must reach a threshold (slow, but run in CI)."""

import numpy as np
import pytest

import jaxlab
from jaxlab.config import load_config
from jaxlab.train.evaluation import play
from jaxlab.run.loop import train, train_loop
from jaxlab.train.trainer import Trainer

pytestmark = pytest.mark.slow


def final_mean(records, key, updates):
    """Episode-weighted mean of ``key`` over the last ``updates`` updates that ended episodes."""
    recent = [r for r in records if r["episodes"]][-updates:]
    return sum(r[key] * r["episodes"] for r in recent) / sum(r["episodes"] for r in recent)


def test_cartpole_is_solved_with_the_default_config():
    config, _ = load_config("cartpole")
    records = train(config)
    assert final_mean(records, "episode_return", 10) >= 475
    assert records[-1]["compiles"] == 3  # the rollout's step and finish, the update


def test_memory_needs_the_lstm():
    lstm, _ = load_config("memory")
    feed_forward, _ = load_config("memory", flags=["--policy.lstm", "false"])
    assert final_mean(train(lstm), "success", 10) >= 0.95
    assert final_mean(train(feed_forward), "success", 10) <= 0.40


def test_pendulum_swings_up():
    config, _ = load_config("pendulum")
    with Trainer(config) as trainer:
        train_loop(trainer)
        result = play(trainer, steps=400, num_envs=64)  # 128 episodes with the mean action
    assert result["episodes"] == 128
    assert result["episode_return"] >= -250


def test_target_beats_the_random_policy():
    config, _ = load_config("target")
    trained = final_mean(train(config), "episode_return", 5)
    rng = np.random.default_rng(0)
    with jaxlab.make("target", num_envs=config.vec.num_envs, seed=1) as env:
        env.reset()
        returns = []
        for _ in range(4 * 128):
            _, _, _, _, info = env.step(env.action_space.sample(rng, env.num_agents))
            if info:
                returns.append(info["episode_return"])
    random_return = float(np.mean(returns))
    assert trained > random_return + 5.0 and trained > 3 * max(random_return, 1.0), (trained, random_return)

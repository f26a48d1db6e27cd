"""The drone swarm learns (slow, but run in CI): with drone.toml's defaults (8 arenas x 64 drones, LSTM-128)
and 500K steps, the trained policy's score (packages moved per episode: (pickups + deliveries) / 2)
beats random motor commands and a scripted hover-in-place controller by a wide margin. About 40 s on
the 2-core CPU this was written on (3 seeds gave 0.44 to 0.54; both baselines are below 0.01)."""

import numpy as np
import pytest
from test_drone import hover_controller

import jaxlab
from jaxlab.config import env_args, load_config
from jaxlab.run.loop import train

pytestmark = pytest.mark.slow


def final_mean(records, key, updates):
    """Episode-weighted mean of ``key`` over the last ``updates`` updates that ended episodes."""
    recent = [r for r in records if r["episodes"]][-updates:]
    return sum(r[key] * r["episodes"] for r in recent) / sum(r["episodes"] for r in recent)


def baseline_score(config, policy, steps: int = 1000, seed: int = 1) -> tuple[float, int]:
    """(episode-weighted mean score, episodes) of ``policy(observations) -> actions`` on the training
    config's envs over ``steps`` steps."""
    with jaxlab.make("drone", num_envs=config.vec.num_envs, seed=seed, **env_args(config)) as env:
        obs = env.reset()
        total, episodes = 0.0, 0
        for _ in range(steps):
            obs, _, _, _, info = env.step(policy(obs))
            if info:
                total += info["score"] * info["episodes"]
                episodes += info["episodes"]
    return total / episodes, episodes


def test_the_swarm_beats_random_commands_and_hovering_in_place_by_a_wide_margin():
    config, _ = load_config("drone", flags=["--train.total-timesteps", "500000"])
    records = train(config)
    trained = final_mean(records, "score", 5)
    rng = np.random.default_rng(0)
    random_score, random_episodes = baseline_score(config, lambda obs: rng.uniform(-1, 1, (len(obs), 4)).astype(np.float32))
    hover_score, hover_episodes = baseline_score(config, hover_controller)
    assert random_episodes > 10_000 and hover_episodes >= 512  # random crashes fast; hovering lasts to max_steps
    assert trained >= 0.25 and trained >= 10 * max(random_score, hover_score), (trained, random_score, hover_score)
    assert final_mean(records, "deliveries", 5) > 0.05  # and packages arrive
    assert records[-1]["compiles"] == 3  # step, finish, update

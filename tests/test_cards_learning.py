"""The card game (examples/envs/cards.h) is learnable: a short seeded run of its default config
(cards.toml: against the random opponent) wins at least 80% of fresh games (slow, run in CI)."""

import pytest

from jaxlab.config import load_config
from jaxlab.run.loop import train_loop
from jaxlab.train.evaluation import play
from jaxlab.train.trainer import Trainer

pytestmark = pytest.mark.slow


def test_the_policy_beats_the_random_opponent():
    config, sources = load_config("cards")
    assert sources["vec.num_envs"].endswith("cards.toml") and config.env.get("opponent", 0) == 0
    with Trainer(config) as trainer:
        records = train_loop(trainer)
        result = play(trainer, episodes=256, num_envs=64, seed=7, deterministic=False)
    assert result["episodes"] == 256 and result["illegal_attempts"] == 0.0
    assert result["win_rate"] >= 0.8, (result, [r.get("win_rate") for r in records])

"""The card game (examples/envs/cards.h) is learnable: a short seeded run of its default config
(cards.toml: against the random opponent) wins at least 80% of fresh games, and `jaxlab eval cards
--render` prints the trained policy's game as a log (slow, run in CI)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import jaxlab
from jaxlab.config import load_config
from jaxlab.run.loop import train_run
from jaxlab.train.evaluation import load_trainer, play

pytestmark = pytest.mark.slow


def test_the_policy_beats_the_random_opponent_and_its_game_renders(tmp_path):
    config, sources = load_config("cards")
    assert sources["vec.num_envs"].endswith("cards.toml") and config.env.get("opponent", 0) == 0
    result = train_run(config, tmp_path / "run", warn=lambda message: None)
    assert result.checkpoint is not None
    with load_trainer(result.checkpoint) as trainer:
        games = play(trainer, episodes=256, num_envs=64, seed=7, deterministic=False)
    assert games["episodes"] == 256 and games["illegal_attempts"] == 0.0
    assert games["win_rate"] >= 0.8, games

    shown = subprocess.run([sys.executable, "-m", "jaxlab.cli", "eval", "cards", "--checkpoint", str(tmp_path / "run"),
                            "--episodes", "1", "--render"], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    assert shown.returncode == 0, shown.stderr
    log = shown.stdout
    assert re.search(r"^\s+0  game 1, turn [12]/40, your move$", log, re.MULTILINE), log
    assert "-- turn 1:" in log and re.search(r"you play \w[\w ]* \(\d mana", log) and "you attack" in log
    assert re.search(r"  you: \d+ life, mana \d+/\d+, deck \d+, hand \d+:", log) and "foe: " in log
    assert re.search(r"you act:  action \d+  reward -?\d.*\(episode ended\)", log)

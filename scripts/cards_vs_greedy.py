"""Trains the card game (examples/envs/cards.h) and reports the policy's win rate against the greedy
opponent over training.

    python scripts/cards_vs_greedy.py [--opponent greedy|random|self] [--steps 5e6] [--evals 10]
                                      [--episodes 512] [--out FILE.json] [-- --train.ent-coef 0.01 ...]

The policy trains against --opponent (greedy by default: env.opponent 1; self: both seats are agents
of the one policy). At --evals evenly spaced points (and before the first update) the current policy
plays --episodes fresh games against the greedy opponent and against the random one, sampling its
actions as in training (jaxlab.train.evaluation.play, seeded), and one line is printed: steps, wall
minutes, the training games' win rate since the last point, and the evaluation win and draw rates
with their standard errors. Flags after `--` go to the config as for `jaxlab train cards`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time

from jaxlab.config import load_config
from jaxlab.run.bench import at_least, positive_number, script_main
from jaxlab.run.loop import train_loop
from jaxlab.train.evaluation import play
from jaxlab.train.trainer import Trainer

OPPONENTS = {"random": 0, "greedy": 1, "self": 2}


class Against:
    """The trainer's current policy, seen by jaxlab.train.evaluation.play as a trainer whose env plays
    another opponent."""

    def __init__(self, trainer, opponent: int):
        self.config = dataclasses.replace(trainer.config, env={**trainer.config.env, "opponent": opponent})
        self._trainer = trainer

    def __getattr__(self, name):
        """Everything but the config is the trainer's (policy, spec, env, state, norm, ...)."""
        return getattr(self._trainer, name)


def evaluate(trainer, opponent: int, episodes: int, seed: int) -> dict:
    result = play(Against(trainer, opponent), episodes=episodes, num_envs=min(episodes, 128), seed=seed,
                  deterministic=False)
    p = result["win_rate"]
    return {"win_rate": p, "draw_rate": result["draw_rate"], "stderr": math.sqrt(p * (1 - p) / result["episodes"]),
            "episodes": result["episodes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opponent", choices=list(OPPONENTS), default="greedy", help="the training opponent")
    parser.add_argument("--steps", type=positive_number, default=5e6, help="agent-steps to train")
    parser.add_argument("--evals", type=at_least(1), default=10, help="evaluation points after the start")
    parser.add_argument("--episodes", type=at_least(1), default=512, help="games per evaluation and opponent")
    parser.add_argument("--out", help="also write every line as JSON to this file")
    parser.add_argument("flags", nargs="*", help="config flags after --, e.g. -- --train.ent-coef 0.01")
    args = parser.parse_args()
    flags = ["--env.opponent", str(OPPONENTS[args.opponent]), "--train.total-timesteps", str(int(args.steps)),
             *args.flags]
    config, _ = load_config("cards", flags=flags)
    rows = []
    with Trainer(config) as trainer:
        sizes = trainer.sizes
        print(f"cards: training against {args.opponent} for {sizes.num_updates * sizes.batch_size:,} steps "
              f"({sizes.describe()}); flags: {' '.join(flags)}", flush=True)
        print(f"{'steps':>10} {'minutes':>8} {'train win':>10} {'vs greedy':>16} {'draws':>6} {'vs random':>16}",
              flush=True)
        points = sorted({round(sizes.num_updates * k / args.evals) for k in range(args.evals + 1)})
        start = time.perf_counter()
        for point in points:
            records = train_loop(trainer, updates=point - trainer.update_index) if point > trainer.update_index else []
            done = [r for r in records if r.get("episodes")]
            train_win = (sum(r["win_rate"] * r["episodes"] for r in done) / sum(r["episodes"] for r in done)
                         if done else float("nan"))
            greedy = evaluate(trainer, 1, args.episodes, seed=1000 + point)
            rand = evaluate(trainer, 0, args.episodes, seed=2000 + point)
            row = {"steps": trainer.update_index * sizes.batch_size, "minutes": (time.perf_counter() - start) / 60,
                   "train_win_rate": train_win, "vs_greedy": greedy, "vs_random": rand}
            rows.append(row)
            print(f"{row['steps']:>10,} {row['minutes']:>8.1f} {train_win:>10.3f} "
                  f"{greedy['win_rate']:>9.3f} ± {greedy['stderr']:.3f} {greedy['draw_rate']:>6.3f} "
                  f"{rand['win_rate']:>9.3f} ± {rand['stderr']:.3f}", flush=True)
            if args.out:
                with open(args.out, "w") as out:
                    json.dump({"flags": flags, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    sys.exit(script_main(main, "cards_vs_greedy.py"))  # a flag the config refuses: one line, exit status 2

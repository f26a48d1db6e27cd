"""Checkpoint save cost: how long the asynchronous save call blocks training against the whole write,
and against one update, for a small and a large LSTM policy on cartpole.

    python scripts/bench_checkpoint.py [--hidden 128 1024] [--saves 3] [--flags --vec.num-envs 128 ...]

Each hidden size trains 2 updates (compiles), times a third, then saves --saves checkpoints into a
temporary folder (removed at the end), timing the save call and the whole write; prints the best of each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from jaxlab.run.bench import at_least, script_main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=at_least(1), nargs="+", default=[128, 1024],
                        help="policy.hidden_size of each measurement (default 128 1024)")
    parser.add_argument("--saves", type=at_least(1), default=3, help="checkpoints saved per hidden size (default 3)")
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="more config flags, last")
    args = parser.parse_args()

    from jaxlab import checkpoint
    from jaxlab.config import load_config
    from jaxlab.run.loop import train_loop
    from jaxlab.train.trainer import Trainer

    for hidden in args.hidden:
        cfg, _ = load_config("cartpole", flags=["--policy.hidden-size", str(hidden), "--train.total-timesteps", "20480",
                                                *args.flags])
        with Trainer(cfg) as t, tempfile.TemporaryDirectory(prefix="bench_checkpoint-") as folder:
            train_loop(t, updates=2)
            tic = time.perf_counter(); train_loop(t, updates=1); update = time.perf_counter() - tic
            saves = checkpoint.RunCheckpoints(Path(folder), 0, 0, args.saves, "")
            blocking, total = [], []
            try:
                for i in range(args.saves):
                    tic = time.perf_counter()
                    saves.save(i + 1, t.checkpoint_state(), t.checkpoint_meta())
                    blocking.append(time.perf_counter() - tic)
                    saves.finish()
                    total.append(time.perf_counter() - tic)
            finally:
                saves.close()  # the writes end before the folder goes
            print(f"hidden {hidden}: {t.num_params:,} params; save call blocks {min(blocking) * 1000:.0f} ms, "
                  f"whole write {min(total) * 1000:.0f} ms; one update {update * 1000:.0f} ms")


if __name__ == "__main__":
    sys.exit(script_main(main, "bench_checkpoint.py"))

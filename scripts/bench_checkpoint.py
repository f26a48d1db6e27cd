"""Checkpoint save cost: how long the asynchronous save call blocks training against the whole write,
and against one update, for a small and a large LSTM policy on cartpole.

    python scripts/bench_checkpoint.py
"""
import tempfile
import time
from pathlib import Path

from jaxlab import checkpoint
from jaxlab.config import load_config
from jaxlab.run.loop import train_loop
from jaxlab.train.trainer import Trainer

for hidden in (128, 1024):
    cfg, _ = load_config("cartpole", flags=["--policy.hidden-size", str(hidden), "--train.total-timesteps", "20480"])
    with Trainer(cfg) as t:
        train_loop(t, updates=2)
        tic = time.perf_counter(); train_loop(t, updates=1); update = time.perf_counter() - tic
        saves = checkpoint.RunCheckpoints(Path(tempfile.mkdtemp()), 0, 0, 3, "")
        blocking, total = [], []
        for i in range(3):
            tic = time.perf_counter(); saves.save(i + 1, t.checkpoint_state(), t.checkpoint_meta()); b = time.perf_counter() - tic
            saves.finish(); total.append(time.perf_counter() - tic); blocking.append(b)
        saves.close()
        print(f"hidden {hidden}: {t.num_params:,} params; save call blocks {min(blocking)*1000:.0f} ms, whole write {min(total)*1000:.0f} ms; one update {update*1000:.0f} ms")

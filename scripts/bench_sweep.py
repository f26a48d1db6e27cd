"""Sweep throughput: trials per hour of `jaxlab sweep` one trial at a time against K in parallel.

    python scripts/bench_sweep.py                       # cartpole, 6 trials, K = 2
    python scripts/bench_sweep.py --parallel 2 4 --trials 8
    python scripts/bench_sweep.py --preset gpu --parallel 2 4 8 --flags --train.total-timesteps 2_000_000

Each mode runs the same number of trials of a search over the learning rate only (every trial costs
the same work) with no pruner, in a fresh study under a temporary folder, and times the whole
command (process start, JAX compilation, training, Optuna). Modes:
  serial       one `jaxlab sweep --parallel 1`
  parallel K   one `jaxlab sweep --parallel K`: K trials at once, the cores split between them
               (each pinned to its share, XLA and C threads set to it; on a GPU 0.9/K of its memory)
  K sweeps     K `jaxlab sweep --parallel 1` processes on the same study (journal file): K trials at
               once, each free to use every core (what running several sweeps by hand gives)
Prints trials per hour and the mean wall time of one trial's training (from its records). Figures,
not asserts: the machine's load (printed) moves them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jaxlab.run.bench import at_least

ROOT = Path(__file__).resolve().parent.parent


def run_mode(name: str, root: Path, processes: int, parallel: int, trials: int, env: str, extra: list[str]) -> dict:
    space = root / "space.toml"
    space.write_text('[sweep]\nmetric = "episode_return"\npruner = "none"\nstartup_trials = 100\n'
                     '"train.learning_rate" = {low = 1e-3, high = 1e-2, log = true}\n')
    command = [sys.executable, "-m", "jaxlab.cli", "sweep", env, "--sweep", str(space), "--study", name, "--root",
               str(root), "--trials", str(trials), "--parallel", str(parallel), "--log.dashboard", "none", *extra]
    environment = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=environment) for _ in range(processes)]
    for child in children:
        out, err = child.communicate()
        if child.returncode != 0:
            sys.exit(f"{name}: `{' '.join(command)}` failed ({child.returncode}):\n{out}\n{err}")
    elapsed = time.perf_counter() - start
    walls = [json.loads((d / "summary.json").read_text())["wall_time"] for d in (root / name).glob("trial-*")]
    return {"mode": name, "seconds": elapsed, "trials": len(walls), "per_hour": len(walls) / elapsed * 3600,
            "trial_wall": sum(walls) / len(walls), "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="cartpole")
    parser.add_argument("--trials", type=at_least(1), default=6, help="trials per mode (default 6)")
    parser.add_argument("--parallel", type=at_least(1), nargs="+", default=[2], help="values of K (default 2)")
    parser.add_argument("--no-k-sweeps", action="store_true", help="skip the K-separate-sweeps modes")
    parser.add_argument("--preset", default="auto")
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=["--train.total-timesteps", "65536"],
                        help="config flags of every trial (default --train.total-timesteps 65536)")
    args = parser.parse_args()
    extra = ["--preset", args.preset, *args.flags]
    print(f"{args.env}, {args.trials} trials per mode, flags {' '.join(args.flags)}; {os.cpu_count()} cores, "
          f"{len(os.sched_getaffinity(0))} usable")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(run_mode("serial", Path(tmp), 1, 1, args.trials, args.env, extra))
        for k in args.parallel:
            results.append(run_mode(f"parallel-{k}", Path(tmp), 1, k, args.trials, args.env, extra))
            if not args.no_k_sweeps:
                results.append(run_mode(f"{k}-sweeps", Path(tmp), k, 1, args.trials, args.env, extra))
    base = results[0]["per_hour"]
    print(f"{'mode':<12} {'trials':>6} {'seconds':>8} {'trials/h':>9} {'vs serial':>9} {'train s/trial':>13} "
          f"{'load':>5}")
    for r in results:
        print(f"{r['mode']:<12} {r['trials']:>6} {r['seconds']:>8.1f} {r['per_hour']:>9.0f} "
              f"{r['per_hour'] / base:>8.2f}x {r['trial_wall']:>13.1f} {r['load']:>5.2f}")


if __name__ == "__main__":
    main()

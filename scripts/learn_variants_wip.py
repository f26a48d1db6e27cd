"""Learning curves over seeds: trains ENV with several seeds (one `jaxlab train` process per seed and
variant) and writes the curves with a 95% confidence band, against steps and against wall time, and a
table of the time to a threshold.

    python scripts/learn.py cartpole --seeds 5 --threshold 475
    python scripts/learn.py pendulum --seeds 3 --steps 400_000 --threshold -200 \\
        --variant "previous=--train.obs-norm false --train.reward-scale 0.1" --variant defaults=

Each --variant NAME=FLAGS is a curve (config flags on top of --flags); without one there is a single
curve, "defaults". Runs go to OUT/runs/VARIANT/seedN (a run whose summary.json says it finished is
reused, so re-running the command only redraws; --fresh trains again). Writes OUT/learn.png (two panels:
the metric against agent-steps and against wall seconds, mean over seeds and its 95% t-interval),
OUT/learn.md (the table) and OUT/learn.json (every curve and time).

The metric of an update is the episode-weighted mean over the last --window updates that ended
episodes (the trainer's records: metrics.jsonl); a run reaches the threshold at the first update where
that mean is >= --threshold (<= with --below). Wall time is the trainer's (from the start of its
training, compile included; imports and env building not).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", help="env name (or header path), as for `jaxlab train`")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per variant: 0 .. N-1 (default 3)")
    parser.add_argument("--steps", type=float, default=None, help="agent-steps per run (default: the env's config)")
    parser.add_argument("--metric", default="episode_return", help="the record key to plot (default episode_return)")
    parser.add_argument("--threshold", type=float, default=None, help="time-to-threshold of the metric")
    parser.add_argument("--below", action="store_true", help="the threshold is reached going below it")
    parser.add_argument("--flags", default="", help="config flags for every run, one string")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                        help="a curve: its name and its config flags (repeat for several)")
    parser.add_argument("--preset", default="cpu", help="--preset for every run (default cpu)")
    parser.add_argument("--window", type=int, default=5, help="updates averaged per point (default 5)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (default 1)")
    parser.add_argument("--out", default=None, help="output folder (default learn/ENV)")
    parser.add_argument("--fresh", action="store_true", help="train again even where a finished run exists")
    parser.add_argument("--title", default=None, help="figure title")
    return parser.parse_args(argv)


def variants(args) -> dict[str, list[str]]:
    """{name: flags} in the order given; "defaults" (no flags) when none."""
    if not args.variant:
        return {"defaults": []}
    result = {}
    for text in args.variant:
        name, sep, flags = text.partition("=")
        if not sep or not name:
            raise SystemExit(f"learn.py: --variant {text!r} must be NAME=FLAGS (FLAGS may be empty)")
        result[name] = shlex.split(flags)
    return result


def run_one(args, name: str, flags: list[str], seed: int, out: Path) -> Path:
    """Trains one seed of one variant (unless a finished run is there); returns its run dir."""
    run_dir = out / "runs" / name / f"seed{seed}"
    summary = run_dir / "summary.json"
    if summary.is_file() and not args.fresh:
        done = json.loads(summary.read_text())
        if not done.get("error") and not done.get("stopped"):
            return run_dir
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    command = [sys.executable, "-m", "jaxlab.cli", "train", args.env, "--preset", args.preset, "--run-dir",
               str(run_dir), "--log.dashboard", "none", "--checkpoint.minutes", "0", "--checkpoint.keep", "1",
               "--train.seed", str(seed), *shlex.split(args.flags), *flags]
    if args.steps is not None:
        command += ["--train.total-timesteps", str(int(args.steps))]
    tic = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"learn.py: {shlex.join(command)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    print(f"  {name} seed {seed}: {time.perf_counter() - tic:.0f} s", flush=True)
    return run_dir


def read_curve(run_dir: Path, metric: str, window: int) -> dict:
    """The run's records as arrays: steps, wall seconds and the metric's windowed episode-weighted mean
    (NaN before the first update that ended an episode)."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = np.array([r["global_step"] for r in records], float)
    wall = np.array([r["wall_time"] for r in records], float)
    values = np.full(len(records), np.nan)
    recent: list[tuple[float, float]] = []
    for i, r in enumerate(records):
        if r.get(metric) is not None and r.get("episodes", 1):
            recent.append((float(r[metric]), float(r.get("episodes", 1))))
            recent = recent[-window:]
        if recent:
            weights = np.array([w for _, w in recent])
            values[i] = float(np.dot([v for v, _ in recent], weights) / weights.sum())
    return {"steps": steps, "wall": wall, "value": values}


def t_quantile(n: int) -> float:
    """The 0.975 quantile of Student's t with n - 1 degrees of freedom (1.96 without scipy)."""
    if n < 2:
        return float("nan")
    try:
        from scipy import stats

        return float(stats.t.ppf(0.975, n - 1))
    except ImportError:
        return 1.96


def band(curves: list[dict], x_key: str, points: int = 200) -> dict:
    """Mean and 95% t-interval over the runs of the metric on a common grid of ``x_key``, from 0 to the
    longest run's end; a run counts from its first point and keeps its final value after its end (a
    run that finished sooner in wall time stays where it ended)."""
    end = max(c[x_key][-1] for c in curves)
    grid = np.linspace(0.0, end, points)
    rows = []
    for c in curves:
        ok = ~np.isnan(c["value"])
        if not ok.any():
            rows.append(np.full(points, np.nan))
            continue
        row = np.interp(grid, c[x_key][ok], c["value"][ok], left=np.nan)
        rows.append(row)
    rows = np.array(rows)
    mean, half = np.full(points, np.nan), np.full(points, np.nan)
    for i in range(points):
        column = rows[:, i][~np.isnan(rows[:, i])]
        if len(column):
            mean[i] = column.mean()
        if len(column) > 1:
            half[i] = t_quantile(len(column)) * column.std(ddof=1) / math.sqrt(len(column))
    return {"x": grid, "mean": mean, "low": mean - half, "high": mean + half}


def reach(curve: dict, threshold: float, below: bool) -> tuple[float, float] | None:
    """(steps, wall seconds) at the first update whose metric reaches the threshold, or None."""
    value = curve["value"]
    hits = np.flatnonzero(value <= threshold if below else value >= threshold)
    if not len(hits):
        return None
    return float(curve["steps"][hits[0]]), float(curve["wall"][hits[0]])


def summarise(args, results: dict[str, list[dict]]) -> tuple[str, dict]:
    """The Markdown table and the JSON summary."""
    lines = [f"| variant | seeds | final {args.metric} (mean ± 95% CI) |"
             + (" reached | steps to threshold (median) | seconds to threshold (median) |" if args.threshold is not None
                else ""),
             "|---|---|---|" + ("---|---|---|" if args.threshold is not None else "")]
    summary = {}
    for name, curves in results.items():
        finals = np.array([c["value"][-1] for c in curves])
        half = t_quantile(len(finals)) * finals.std(ddof=1) / math.sqrt(len(finals)) if len(finals) > 1 else 0.0
        entry = {"final": finals.tolist(), "final_mean": float(finals.mean()), "final_ci": float(half),
                 "wall": [float(c["wall"][-1]) for c in curves], "steps": [float(c["steps"][-1]) for c in curves]}
        row = f"| {name} | {len(curves)} | {finals.mean():.3g} ± {half:.2g} |"
        if args.threshold is not None:
            times = [reach(c, args.threshold, args.below) for c in curves]
            got = [t for t in times if t is not None]
            entry["reached"] = [None if t is None else {"steps": t[0], "seconds": t[1]} for t in times]
            med_steps = f"{np.median([t[0] for t in got]):,.0f}" if got else "–"
            med_secs = f"{np.median([t[1] for t in got]):.1f}" if got else "–"
            row += f" {len(got)}/{len(times)} | {med_steps} | {med_secs} |"
        lines.append(row)
        summary[name] = entry
    return "\n".join(lines) + "\n", summary


def plot(args, results: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in ((axes[0], "steps", "agent-steps"), (axes[1], "wall", "wall seconds")):
        for name, curves in results.items():
            b = band(curves, key)
            line, = ax.plot(b["x"], b["mean"], label=f"{name} (n={len(curves)})")
            ax.fill_between(b["x"], b["low"], b["high"], color=line.get_color(), alpha=0.2)
        if args.threshold is not None:
            ax.axhline(args.threshold, color="gray", linestyle=":", linewidth=1)
        ax.set_xlabel(label)
        ax.set_ylabel(args.metric)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize=8)
    fig.suptitle(args.title or f"{args.env}: {args.metric}, mean and 95% CI over seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out or f"learn/{Path(args.env).stem}")
    out.mkdir(parents=True, exist_ok=True)
    table = variants(args)
    jobs = [(name, flags, seed) for name, flags in table.items() for seed in range(args.seeds)]
    print(f"learn.py {args.env}: {len(table)} variant(s) x {args.seeds} seed(s) -> {out}", flush=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with ThreadPoolExecutor(max_workers=max(args.parallel, 1)) as pool:
        dirs = list(pool.map(lambda job: run_one(args, *job, out), jobs))
    results: dict[str, list[dict]] = {name: [] for name in table}
    for (name, _, _), run_dir in zip(jobs, dirs):
        results[name].append(read_curve(run_dir, args.metric, args.window))
    text, summary = summarise(args, results)
    plot(args, results, out / "learn.png")
    (out / "learn.md").write_text(text)
    (out / "learn.json").write_text(json.dumps({"env": args.env, "metric": args.metric, "threshold": args.threshold,
                                                "seeds": args.seeds, "steps": args.steps, "flags": args.flags,
                                                "variants": {k: shlex.join(v) for k, v in table.items()},
                                                "results": summary}, indent=1))
    print(text, end="")
    print(f"wrote {out / 'learn.png'}, {out / 'learn.md'}, {out / 'learn.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Learning curves across seeds: trains ENV once per seed (each a normal `jaxlab train` run dir), prints
the metric as the runs go, and writes a curve PNG with a confidence band across seeds, a table of
time to a threshold, and the curves as JSON.

    python scripts/learn.py drone                         # deliveries per episode, 3 seeds, drone.toml's steps
    python scripts/learn.py drone --seeds 2 --steps 20e6 --jobs 2
    python scripts/learn.py cartpole --metric episode_return --threshold 475 --flags --vec.num-envs 128
    python scripts/learn.py drone --runs-only --out runs/learn-drone     # re-plot finished runs
    python scripts/learn.py pendulum --seeds 3 --threshold -200 \\
        --variant "previous=--train.obs-norm false --train.reward-scale 0.1" --variant defaults=

Each seed s runs `python -m jaxlab.cli train ENV --train.seed s --run-dir OUT/seed-s [--train.total-timesteps S]
FLAGS...` as its own process (`--jobs J` at a time; 1, the default, runs them one after another, which
is what a 2-core machine wants). Each variant's config is checked first, by `jaxlab config` with the
same env and flags: a flag `jaxlab train` would refuse is one line and exit status 2 before any run.
While they run, every new update's metric is printed: the episode-weighted mean over the last
`--window` updates that ended episodes (per-update statistics come from few episodes and are noisy),
with the step and the run's wall time.

Outputs (default under OUT): `curve.png` (the metric against env steps and against wall time: the mean
across seeds and a band of the 95% confidence interval of that mean, Student t over seeds, or each
run's line when there is one seed; needs matplotlib, the plot extra), `threshold.md` (per seed: the
first step and wall time at which the smoothed metric reached `--threshold`), `curves.json` (the
smoothed per-seed curves: step, wall time, value), and `learn.log` (what was printed).

Variants: each `--variant NAME=FLAGS` (repeatable; FLAGS may be empty, meaning the config as it is) is a
curve of its own, its config flags after `--flags`. Its runs go to OUT/NAME/seed-s; the PNG draws every
variant's mean and band in its own colour, `threshold.md` starts with a comparison table (per variant:
seeds, final value mean ± 95% CI (none for one seed), seeds that reached the threshold, median steps and wall
time to it) followed by each variant's per-seed table, and `curves.json` holds {"variants": {NAME: {"flags",
"curves"}}}. Without --variant there is one curve and the layout above (OUT/seed-s).

Defaults per env (`DEFAULTS`): drone: metric deliveries, threshold 1 delivery per episode; any other
env: episode_return, threshold none (the table then says so). Exit status: 0, 1 when a run failed
(its stderr is in OUT/seed-s.log), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from jaxlab.cli.common import number
from jaxlab.messages import counted, install_extra
from jaxlab.run.bench import at_least, positive_number

DEFAULTS = {"drone": {"metric": "deliveries", "threshold": 1.0}}


@dataclass
class Curve:
    """One run's smoothed metric: steps [n], wall-time seconds [n], values [n] (updates that ended
    episodes only, each the episode-weighted mean over the last `window` of them)."""

    seed: int
    window: int = 1
    steps: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


def read_records(path: Path) -> list[dict]:
    """The complete lines of a metrics.jsonl (a line being written is skipped)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


def smooth(records: list[dict], metric: str, window: int, seed: int = 0) -> Curve:
    """The curve of ``metric`` over ``records``: at each update that ended episodes, the episode-weighted
    mean over the last ``window`` such updates. KeyError naming the metrics there are when the env has
    no ``metric``."""
    curve = Curve(seed, window)
    recent: list[tuple[float, int]] = []
    for record in records:
        if not record.get("episodes") or record.get(metric) is None:
            if record.get("episodes") and metric not in record:
                known = sorted(k for k, v in record.items() if isinstance(v, (int, float)))
                raise KeyError(f"the runs have no metric {metric!r}; they have {', '.join(known)}")
            continue
        recent = (recent + [(float(record[metric]), int(record["episodes"]))])[-window:]
        total = sum(n for _, n in recent)
        curve.steps.append(int(record["global_step"]))
        curve.times.append(float(record["wall_time"]))
        curve.values.append(sum(v * n for v, n in recent) / total)
    return curve


def first_reach(curve: Curve, threshold: float | None) -> tuple[int, float] | None:
    """(step, seconds) at which the curve first reaches ``threshold``, or None."""
    if threshold is None:
        return None
    for step, seconds, value in zip(curve.steps, curve.times, curve.values):
        if value >= threshold:
            return step, seconds
    return None


def t_quantile_975(dof: int) -> float:
    """The 0.975 quantile of Student's t with ``dof`` degrees of freedom (for a 95% interval)."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
             10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}
    if dof in table:
        return table[dof]
    below = max(k for k in table if k <= dof) if dof < 30 else 30
    return table[below] if dof < 30 else 1.96 + 2.4 / dof


def band(curves: list[Curve], axis: str, points: int = 200) -> tuple[list[float], list[float], list[float], list[float]]:
    """(x, mean, low, high) across seeds on a common grid of ``axis`` ("steps" or "times") from 0 to
    the shortest run's end: each curve is interpolated linearly (held before its first point); low and
    high are the 95% confidence interval of the mean (Student t), equal to the mean for one seed."""
    import numpy as np

    usable = [c for c in curves if c.values]
    if not usable:
        return [], [], [], []
    end = min(getattr(c, axis)[-1] for c in usable)
    start = max(getattr(c, axis)[0] for c in usable)
    grid = np.linspace(start, end, points) if end > start else np.array([end])
    values = np.stack([np.interp(grid, getattr(c, axis), c.values) for c in usable])
    mean = values.mean(axis=0)
    if len(usable) < 2:
        return grid.tolist(), mean.tolist(), mean.tolist(), mean.tolist()
    half = t_quantile_975(len(usable) - 1) * values.std(axis=0, ddof=1) / math.sqrt(len(usable))
    return grid.tolist(), mean.tolist(), (mean - half).tolist(), (mean + half).tolist()


def steps_label(value: float, _position=None) -> str:
    """An axis label for a step count: 500K, 1.5M, 20M."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def plot(curves: list[Curve], env: str, metric: str, threshold: float | None, path: Path) -> Path:
    """The PNG: the metric against steps (left) and wall time (right), mean and 95% band across seeds."""
    return plot_variants({"": curves}, env, metric, threshold, path)


def plot_variants(groups: dict[str, list[Curve]], env: str, metric: str, threshold: float | None,
                  path: Path) -> Path:
    """The PNG of one or more variants (name -> its seeds' curves; one unnamed variant: a single curve),
    each in its own colour: every seed's line faint, the mean bold, the 95% band shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray"]
    for ax, axis, label in ((axes[0], "steps", "env steps"), (axes[1], "times", "wall time (s)")):
        for (name, curves), colour in zip(groups.items(), colours * 4):
            for c in curves:
                ax.plot(getattr(c, axis), c.values, color=colour, alpha=0.25, linewidth=0.8)
            x, mean, low, high = band(curves, axis)
            n = f"{len(curves)} seed{'s' * (len(curves) > 1)}"
            if x:
                ax.plot(x, mean, color=colour, linewidth=2, label=f"{name} (mean of {n})" if name else f"mean of {n}")
                if len(curves) > 1:
                    ax.fill_between(x, low, high, color=colour, alpha=0.2,
                                    label=None if len(groups) > 1 else "95% CI of the mean")
        if threshold is not None:
            ax.axhline(threshold, color="tab:red" if len(groups) == 1 else "black", linestyle="--", linewidth=1,
                       label=f"threshold {threshold:g}")
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
        if axis == "steps":
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(steps_label))
    axes[0].set_ylabel(metric)
    axes[0].legend(loc="best", fontsize=8)
    some = next((c for curves in groups.values() for c in curves), None)
    window = f"; each point the mean over {some.window} updates" if some is not None and some.window > 1 else ""
    bands = "; bands: 95% CI of the mean" if len(groups) > 1 else ""
    figure.suptitle(f"{env}: {metric} per episode{window}{bands}")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def threshold_table(curves: list[Curve], metric: str, threshold: float | None) -> str:
    """Markdown: per seed, the step and wall time at which the smoothed metric first reached the
    threshold, its final value, and a summary row."""
    lines = [f"| seed | steps to {metric} >= {threshold if threshold is not None else '-'} | wall time | final {metric} | steps run |",
             "|---|---|---|---|---|"]
    reached = []
    for c in curves:
        hit = first_reach(c, threshold)
        final = f"{c.values[-1]:.3f}" if c.values else "-"
        last = f"{c.steps[-1]:,}" if c.steps else "-"
        if threshold is None:
            cells = "no threshold (--threshold)", "-"
        elif hit is None:
            cells = "not reached", "-"
        else:
            reached.append(hit)
            cells = f"{hit[0]:,}", f"{hit[1]:.0f} s"
        lines.append(f"| {c.seed} | {cells[0]} | {cells[1]} | {final} | {last} |")
    if threshold is not None and curves:
        if reached:
            steps = sorted(s for s, _ in reached)
            seconds = sorted(t for _, t in reached)
            lines.append(f"| median of {len(reached)}/{len(curves)} that reached it | {steps[len(steps) // 2]:,} | "
                         f"{seconds[len(seconds) // 2]:.0f} s | | |")
        else:
            lines.append(f"| none of {len(curves)} reached it | | | | |")
    return "\n".join(lines) + "\n"


def mean_and_interval(finals: list[float]) -> str:
    """'2.000 ± 12.706': the mean of ``finals`` (one value per seed) and the half width of its 95% interval
    (Student t); one seed has no spread to give, so it is its value and 'no CI (1 seed)'."""
    mean = sum(finals) / len(finals)
    if len(finals) == 1:
        return f"{mean:.3f}, no CI (1 seed)"
    std = math.sqrt(sum((v - mean) ** 2 for v in finals) / (len(finals) - 1))
    return f"{mean:.3f} ± {t_quantile_975(len(finals) - 1) * std / math.sqrt(len(finals)):.3f}"


def comparison_table(groups: dict[str, list[Curve]], metric: str, threshold: float | None) -> str:
    """Markdown: per variant, its seeds, the final smoothed value (mean ± 95% CI across seeds, Student t),
    how many seeds reached the threshold and the median step and wall time at which they did."""
    lines = [f"| variant | seeds | final {metric} (mean ± 95% CI) | reached {threshold if threshold is not None else '-'} "
             "| median steps to it | median wall time to it |", "|---|---|---|---|---|---|"]
    for name, curves in groups.items():
        finals = [c.values[-1] for c in curves if c.values]
        if not finals:
            lines.append(f"| {name} | {len(curves)} | - | - | - | - |")
            continue
        hits = [h for h in (first_reach(c, threshold) for c in curves) if h is not None]
        if threshold is None:
            reached, steps, seconds = "-", "-", "-"
        else:
            reached = f"{len(hits)}/{len(curves)}"
            steps = f"{sorted(s for s, _ in hits)[len(hits) // 2]:,}" if hits else "-"
            seconds = f"{sorted(t for _, t in hits)[len(hits) // 2]:.0f} s" if hits else "-"
        lines.append(f"| {name} | {len(finals)} | {mean_and_interval(finals)} | {reached} | {steps} | {seconds} |")
    return "\n".join(lines) + "\n"


def parse_variants(texts: list[str]) -> dict[str, list[str]]:
    """{name: flags} of --variant NAME=FLAGS values (in order); ValueError for a bad or repeated one."""
    table: dict[str, list[str]] = {}
    for text in texts:
        name, sep, flags = text.partition("=")
        name = name.strip()
        if not sep or not name or "/" in name or name in (".", ".."):
            raise ValueError(f"--variant {text!r} must be NAME=FLAGS (a name usable as a folder; FLAGS may be empty)")
        if name in table:
            raise ValueError(f"--variant {name!r} is given twice")
        table[name] = shlex.split(flags)
    return table


def train_command(env: str, seed: int, run_dir: Path | None, steps: int | None, flags: list[str],
                  command: str = "train") -> list[str]:
    cmd = [sys.executable, "-m", "jaxlab.cli", command, env, "--train.seed", str(seed)]
    if run_dir is not None:
        cmd += ["--run-dir", str(run_dir)]
    cmd += ["--log.dashboard", "none"]
    if steps is not None:
        cmd += ["--train.total-timesteps", str(steps)]
    return cmd + flags


def config_problem(env: str, seed: int, steps: int | None, flags: list[str]) -> str | None:
    """Why `jaxlab train` would refuse the config of this run (an unknown key, a bad value, sizes that do
    not fit), or None: `jaxlab config` resolves it as the run would (preset, sizes, memory), in a process
    of its own, so that this one never starts a JAX backend on the devices the runs will use."""
    result = subprocess.run(train_command(env, seed, None, steps, flags, command="config"), capture_output=True,
                            text=True)
    if result.returncode == 0:
        return None
    lines = result.stderr.strip().splitlines() or [f"`jaxlab config` exited with status {result.returncode}"]
    errors = [line for line in lines if line.startswith("jaxlab config: error: ")]
    return errors[-1].removeprefix("jaxlab config: error: ") if errors else lines[-1]


class Printer:
    """Prints to stdout and to the log file at once."""

    def __init__(self, log: Path):
        log.parent.mkdir(parents=True, exist_ok=True)
        self.file = log.open("a")

    def __call__(self, line: str) -> None:
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def run_seeds(env: str, seeds: list[int], out: Path, steps: int | None, flags: list[str], jobs: int, metric: str,
              window: int, say, poll: float = 2.0) -> dict[int, int]:
    """Trains every seed (``jobs`` processes at a time), printing each new update's smoothed metric;
    returns {seed: exit status}. Stopped any way (Ctrl-C, SIGTERM, an error), it stops the training
    processes still running (stop_all): none is left behind."""
    pending, running, status = list(seeds), {}, {}
    shown = {s: 0 for s in seeds}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                seed = pending.pop(0)
                run_dir = out / f"seed-{seed}"
                log = (out / f"seed-{seed}.log").open("w")
                cmd = train_command(env, seed, run_dir, steps, flags)
                say(f"seed {seed}: {' '.join(cmd[1:])}")
                running[seed] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log, run_dir)
            time.sleep(poll)
            for seed, (process, log, run_dir) in list(running.items()):
                records = read_records(run_dir / "metrics.jsonl")
                if len(records) > shown[seed]:
                    try:
                        curve = smooth(records, metric, window, seed)
                    except KeyError as err:
                        raise SystemExit(f"learn.py: {err.args[0]}")
                    record = records[-1]
                    value = f"{curve.values[-1]:.3f}" if curve.values else "-"
                    say(f"seed {seed}  step {record['global_step']:>11,}  {record['wall_time']:7.1f}s  "
                        f"{record['sps']:>9,.0f} SPS  {metric} {value}")
                    shown[seed] = len(records)
                if process.poll() is not None:
                    log.close()
                    status[seed] = process.returncode
                    say(f"seed {seed}: finished with exit status {process.returncode}"
                        + ("" if process.returncode == 0 else f" (see {out / f'seed-{seed}.log'})"))
                    del running[seed]
    finally:
        stop_all([process for process, _, _ in running.values()])
    return status


def stop_all(processes: list[subprocess.Popen], grace: float = 30.0) -> None:
    """SIGTERM to every process still running (each saves a checkpoint and exits), then SIGKILL to any
    still there after ``grace`` seconds."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def plan_line(name: str, seeds: int, variants: int, steps: int | None, jobs: int, metric: str, window: int,
              out: Path) -> str:
    """The line learn.py starts training with: ``seeds`` per variant (``variants``: 0 without --variant),
    ``steps`` each (None: the config's), ``jobs`` at a time, following ``metric`` smoothed over ``window``."""
    times = f" x {counted(variants, 'variant')}" if variants else ""
    each = "the config" if steps is None else f"{steps:,}"
    return (f"learn.py {name}: {counted(seeds, 'seed')}{times}, {each} steps each, {jobs} at a time, following "
            f"{metric} (smoothed over {counted(window, 'update')}); runs in {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env", help="an env name or header (as for `jaxlab train`)")
    parser.add_argument("--seeds", type=at_least(1), default=3, help="number of seeds, 0 .. N-1 (default 3)")
    parser.add_argument("--first-seed", type=at_least(0), default=0, help="first seed (default 0)")
    parser.add_argument("--steps", type=positive_number, default=None,
                        help="env steps per seed, e.g. 20e6 (default: the env's config)")
    parser.add_argument("--metric", default=None, help="statistic to follow (default: drone deliveries, else episode_return)")
    parser.add_argument("--threshold", type=number, default=None, help="value for the time-to-threshold table")
    parser.add_argument("--window", type=at_least(1), default=5,
                        help="updates with episodes averaged per point (default 5)")
    parser.add_argument("--jobs", type=at_least(1), default=1,
                        help="seeds trained at once (default 1: one after another)")
    parser.add_argument("--out", default=None, help="folder of the runs and outputs (default runs/learn-ENV)")
    parser.add_argument("--png", default=None, help="curve PNG (default OUT/curve.png)")
    parser.add_argument("--table", default=None, help="time-to-threshold table, markdown (default OUT/threshold.md)")
    parser.add_argument("--json", default=None, help="smoothed curves, JSON (default OUT/curves.json)")
    parser.add_argument("--runs-only", action="store_true", help="train nothing: plot the runs already in OUT")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FLAGS",
                        help="a curve of its own with these config flags after --flags (repeatable; FLAGS may be "
                        "empty); runs in OUT/NAME/seed-s")
    parser.add_argument("--flags", nargs=argparse.REMAINDER, default=[], help="config flags for every run (last)")
    args = parser.parse_args(argv)
    name = Path(args.env).stem if args.env.endswith(".h") else args.env
    defaults = DEFAULTS.get(name, {"metric": "episode_return", "threshold": None})
    metric = args.metric or defaults["metric"]
    threshold = args.threshold if args.threshold is not None else (defaults["threshold"] if args.metric is None else None)
    steps = None if args.steps is None else int(args.steps)
    if steps is not None and steps < 1:
        parser.error(f"--steps {args.steps:g} is less than one env step; give e.g. --steps 1e6")
    try:
        variants = parse_variants(args.variant)
    except ValueError as err:
        parser.error(str(err))
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if not args.runs_only:  # a config `jaxlab train` refuses: one line now, not every seed failing in its log
        for variant, flags in (variants.items() if variants else [("", [])]):
            problem = config_problem(args.env, seeds[0], steps, list(args.flags) + flags)
            if problem:
                where = f"--variant {shlex.quote(f'{variant}={shlex.join(flags)}')}" if variant else "the runs' config"
                parser.error(f"{where}: {problem}")
    out = Path(args.out or f"runs/learn-{name}")
    out.mkdir(parents=True, exist_ok=True)
    say = Printer(out / "learn.log")
    # (variant name, its folder, its flags); one unnamed variant in OUT itself without --variant
    plan = [(v, out / v, list(args.flags) + flags) for v, flags in variants.items()] or [("", out, list(args.flags))]
    if not args.runs_only:  # a second run into the same folders would mix its records into the first's
        from jaxlab.config import ConfigError
        from jaxlab.run.loop import refuse_an_earlier_run

        for _, folder, _ in plan:
            for seed in seeds:
                try:
                    refuse_an_earlier_run(folder / f"seed-{seed}")
                except ConfigError:
                    parser.error(f"{folder / f'seed-{seed}'} already holds a run; give a new --out, or --runs-only "
                                 f"to plot the runs in {out}")
    failed = []
    # SIGTERM unwinds like Ctrl-C does, so run_seeds stops its training processes on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if not args.runs_only:
        say(plan_line(name, len(seeds), len(variants), steps, args.jobs, metric, args.window, out))
        for variant, folder, flags in plan:
            if variant:
                say(f"variant {variant}: {shlex.join(flags) or '(the config as it is)'}")
                folder.mkdir(parents=True, exist_ok=True)
            status = run_seeds(args.env, seeds, folder, steps, flags, args.jobs, metric, args.window, say)
            failed += [(variant, s) for s, rc in status.items() if rc != 0]
    groups: dict[str, list[Curve]] = {}
    for variant, folder, _ in plan:
        groups[variant] = []
        for seed in seeds:
            records = read_records(folder / f"seed-{seed}" / "metrics.jsonl")
            if records:
                try:
                    groups[variant].append(smooth(records, metric, args.window, seed))
                except KeyError as err:
                    print(f"learn.py: {err.args[0]}", file=sys.stderr)
                    return 2
    if not any(groups.values()):
        print(f"learn.py: no metrics in {out}/{'*/' if variants else ''}seed-*/metrics.jsonl", file=sys.stderr)
        return 1
    if variants:
        table = comparison_table(groups, metric, threshold) + "".join(
            f"\n## {v}: {shlex.join(flags) or '(the config as it is)'}\n\n" + threshold_table(groups[v], metric, threshold)
            for v, _, flags in plan)
    else:
        table = threshold_table(groups[""], metric, threshold)
    Path(args.table or out / "threshold.md").write_text(table)
    say(table.rstrip())
    def as_json(curves):
        return [{"seed": c.seed, "steps": c.steps, "wall_time": c.times, "value": c.values} for c in curves]

    summary = {"env": name, "metric": metric, "threshold": threshold, "window": args.window}
    if variants:
        summary["variants"] = {v: {"flags": shlex.join(flags), "curves": as_json(groups[v])} for v, _, flags in plan}
    else:
        summary["curves"] = as_json(groups[""])
    Path(args.json or out / "curves.json").write_text(json.dumps(summary))
    try:
        png = plot_variants({v: c for v, c in groups.items() if c}, name, metric, threshold,
                            Path(args.png or out / "curve.png"))
        say(f"curve: {png}")
    except ImportError:
        say(f"no curve PNG: matplotlib is missing ({install_extra('plot')})")
    say(f"table: {args.table or out / 'threshold.md'}; curves: {args.json or out / 'curves.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

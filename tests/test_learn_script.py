"""scripts/learn.py: the smoothing, the band across seeds and the time-to-threshold table on records
worked by hand, and one real run of two seeds that writes the curve, the table and the JSON."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxlab

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("learn", ROOT / "scripts" / "learn.py")
learn = importlib.util.module_from_spec(_spec)
sys.modules["learn"] = learn  # its dataclasses look their module up
_spec.loader.exec_module(learn)


def records(values, episodes=None, step=100):
    """metrics.jsonl records: the metric ``x`` per update (None: no episode ended)."""
    out = []
    for k, v in enumerate(values):
        n = 0 if v is None else (episodes[k] if episodes else 1)
        out.append({"global_step": step * (k + 1), "wall_time": 2.0 * (k + 1), "episodes": n, "x": v})
    return out


def test_smoothing_is_episode_weighted_over_the_last_updates_with_episodes():
    curve = learn.smooth(records([1.0, None, 3.0, 5.0], episodes=[1, 0, 3, 1]), "x", window=2)
    assert curve.steps == [100, 300, 400] and curve.times == [2.0, 6.0, 8.0]
    assert curve.values == pytest.approx([1.0, (1 + 9) / 4, (9 + 5) / 4])
    with pytest.raises(KeyError, match="no metric 'y'.*episodes"):
        learn.smooth(records([1.0]), "y", window=2)


def test_the_band_is_the_95_percent_interval_of_the_mean_across_seeds():
    a = learn.smooth(records([0.0, 1.0, 2.0]), "x", 1, seed=0)
    b = learn.smooth(records([2.0, 3.0, 4.0]), "x", 1, seed=1)
    x, mean, low, high = learn.band([a, b], "steps", points=3)
    assert x == [100, 200, 300] and mean == pytest.approx([1.0, 2.0, 3.0])
    half = 12.706 * (2 ** 0.5) / 2 ** 0.5  # t(0.975, 1) * sample std (sqrt 2) / sqrt(2 seeds)
    assert high == pytest.approx([m + half for m in mean]) and low == pytest.approx([m - half for m in mean])
    x, mean, low, high = learn.band([a], "times", points=2)
    assert x == [2.0, 6.0] and low == high == mean


def test_the_threshold_table_gives_the_first_step_and_time_per_seed():
    a = learn.smooth(records([0.0, 0.6, 1.2, 0.4]), "x", 1, seed=0)
    b = learn.smooth(records([0.0, 0.1]), "x", 1, seed=1)
    assert learn.first_reach(a, 1.0) == (300, 6.0) and learn.first_reach(b, 1.0) is None
    table = learn.threshold_table([a, b], "x", 1.0)
    assert "| 0 | 300 | 6 s | 0.400 | 400 |" in table and "| 1 | not reached | - | 0.100 | 200 |" in table
    assert "| median of 1/2 that reached it | 300 | 6 s |" in table


def test_two_seeds_train_and_the_curve_table_and_json_are_written(tmp_path):
    out = tmp_path / "learn"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "learn.py"), "cartpole", "--seeds", "2", "--steps", "6144",
         "--threshold", "20", "--window", "2", "--out", str(out), "--flags", "--vec.num-envs", "16",
         "--policy.hidden-size", "16"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "seed 0  step" in result.stdout and "seed 1  step" in result.stdout and "episode_return" in result.stdout
    for seed in (0, 1):
        assert (out / f"seed-{seed}" / "metrics.jsonl").is_file() and (out / f"seed-{seed}" / "config.toml").is_file()
    assert (out / "curve.png").stat().st_size > 10_000
    table = (out / "threshold.md").read_text()
    assert table.startswith("| seed | steps to episode_return >= 20.0 |") and table.count("\n") == 5
    curves = json.loads((out / "curves.json").read_text())
    assert curves["metric"] == "episode_return" and [c["seed"] for c in curves["curves"]] == [0, 1]
    assert all(len(c["steps"]) == len(c["value"]) > 0 for c in curves["curves"])
    assert "curve: " in (out / "learn.log").read_text()
    again = subprocess.run(result.args, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    assert again.returncode == 2  # the same folders again: refused before training, the runs kept
    assert f"{out / 'seed-0'} already holds a run; give a new --out, or --runs-only to plot the runs in {out}" \
        in again.stderr
    assert json.loads((out / "curves.json").read_text()) == curves


def test_the_plan_line_counts_seeds_variants_and_updates_in_words():
    assert learn.plan_line("cartpole", 1, 0, 6144, 2, "episode_return", 1, Path("out")) == (
        "learn.py cartpole: 1 seed, 6,144 steps each, 2 at a time, following episode_return (smoothed over 1 update); "
        "runs in out")
    assert learn.plan_line("cards", 3, 1, None, 1, "win_rate", 20, Path("o")).startswith(
        "learn.py cards: 3 seeds x 1 variant, the config steps each, 1 at a time, following win_rate (smoothed over "
        "20 updates)")


def test_variants_parse_and_compare_by_hand():
    assert learn.parse_variants(["previous=--train.obs-norm false --train.reward-scale 0.1", "defaults="]) == {
        "previous": ["--train.obs-norm", "false", "--train.reward-scale", "0.1"], "defaults": []}
    for bad in (["noequals"], ["=--x 1"], ["a/b=--x 1"], ["a=", "a=--x 1"]):
        with pytest.raises(ValueError):
            learn.parse_variants(bad)
    a = [learn.smooth(records([0.0, 1.0]), "x", 1, seed=0), learn.smooth(records([0.0, 3.0]), "x", 1, seed=1)]
    b = [learn.smooth(records([0.0, 0.5]), "x", 1, seed=0)]
    table = learn.comparison_table({"fast": a, "slow": b}, "x", 1.0)
    # fast: finals 1 and 3, mean 2, sample std sqrt 2, half width 12.706 * sqrt 2 / sqrt 2; both reach 1 at step 200
    assert "| fast | 2 | 2.000 ± 12.706 | 2/2 | 200 | 4 s |" in table
    # slow: one seed has no spread: it said "± 0.000", a CI of zero width
    assert "| slow | 1 | 0.500, no CI (1 seed) | 0/1 | - | - |" in table


def test_two_variants_each_get_their_runs_a_curve_and_a_row(tmp_path):
    out = tmp_path / "learn"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "learn.py"), "cartpole", "--seeds", "1", "--steps", "4096",
         "--window", "2", "--out", str(out), "--variant", "gae=", "--variant", "vtrace=--train.advantage vtrace",
         "--flags", "--vec.num-envs", "16", "--policy.hidden-size", "16"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    assert result.returncode == 0, result.stdout + result.stderr
    for variant in ("gae", "vtrace"):
        assert (out / variant / "seed-0" / "metrics.jsonl").is_file()
    assert 'advantage = "vtrace"' in (out / "vtrace" / "seed-0" / "config.toml").read_text()
    table = (out / "threshold.md").read_text()
    assert table.startswith("| variant | seeds | final episode_return") and "| gae | 1 |" in table
    assert "## vtrace: --vec.num-envs 16 --policy.hidden-size 16 --train.advantage vtrace" in table
    curves = json.loads((out / "curves.json").read_text())
    assert list(curves["variants"]) == ["gae", "vtrace"] and curves["variants"]["gae"]["curves"][0]["seed"] == 0
    assert (out / "curve.png").stat().st_size > 10_000


def test_sigterm_stops_the_training_processes_too(tmp_path):
    """learn.py stopped by SIGTERM leaves no training process behind: each is sent SIGTERM (it saves a
    checkpoint and exits) and waited for."""
    import signal
    import time

    out = tmp_path / "learn"
    script = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "learn.py"), "cartpole", "--seeds", "2", "--jobs", "2",
         "--steps", "50000000", "--out", str(out), "--flags", "--vec.num-envs", "16", "--policy.hidden-size", "16"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    deadline = time.monotonic() + 300
    def trained(s):  # a first update is done: the compiles are behind it and SIGTERM is handled
        metrics = out / f"seed-{s}" / "metrics.jsonl"
        return metrics.is_file() and metrics.read_text().count("\n") >= 1

    while not all(trained(s) for s in (0, 1)):  # both are training
        assert script.poll() is None and time.monotonic() < deadline, script.stdout.read()
        time.sleep(0.5)
    pids = [(out / f"seed-{s}" / ".lock").read_text().split()[1] for s in (0, 1)]  # "process PID (...)"
    script.send_signal(signal.SIGTERM)
    assert script.wait(timeout=120) == 128 + signal.SIGTERM
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)
    for s in (0, 1):  # each stopped the way SIGTERM stops a run: with a checkpoint
        assert "stopped by SIGTERM" in (out / f"seed-{s}.log").read_text()

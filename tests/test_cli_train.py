"""`jaxlab train` end to end in a subprocess: a short run, its run dir, and config errors (exit 2)."""

import json
import subprocess
import sys


def jaxlab(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_short_training_run_writes_its_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    result = jaxlab("train", "cartpole", "--train.total-timesteps", "2048", "--vec.num-envs=8", "--train.minibatch-size", "64",
                    "--policy.hidden_size", "16", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    assert "8 envs x 1 agent x horizon 16 = batch 128" in result.stdout
    assert "update    16/16" in result.stdout
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 16 and records[-1]["global_step"] == 2048
    assert "hidden_size = 16" in (run_dir / "config.toml").read_text()


def test_config_errors_exit_2_with_the_rule_and_no_traceback():
    result = jaxlab("train", "cartpole", "--train.total-timesteps", "100")
    assert result.returncode == 2
    assert "train.total_timesteps=100 is less than one batch of 1,024" in result.stderr
    assert "Traceback" not in result.stderr
    result = jaxlab("train", "cartpole", "--policy.lstm", "maybe")
    assert result.returncode == 2 and 'policy.lstm="maybe" is not a boolean' in result.stderr
    result = jaxlab("train", "cartpol")
    assert result.returncode == 2 and "Did you mean 'cartpole'" in result.stderr


def test_unwritable_run_dir_is_refused_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = jaxlab("train", "cartpole", "--run-dir", str(blocker / "run"))
    assert result.returncode == 2
    assert f"cannot write '{blocker / 'run'}'" in result.stderr and "--run-dir" in result.stderr


def test_help_describes_every_key():
    result = jaxlab("train", "--help")
    assert result.returncode == 0
    assert "--train.bptt-horizon" in result.stdout and "(default 16)" in result.stdout
    assert "--policy.lstm" in result.stdout and "(default true)" in result.stdout


def test_help_lists_every_config_key_the_env_section_too():
    """README says `jaxlab train --help` lists every config key with its description and default; the
    [env] keys jaxlab reads itself (env.library, env.mask_check) were missing, as they are no section's
    dataclass field. Each key of every section and of ENV_KEYS now has its line."""
    from dataclasses import fields

    from jaxlab.cli.common import config_help
    from jaxlab.config import SECTIONS
    from jaxlab.config.schema import ENV_KEYS

    flags = [line.split()[0] for line in config_help().splitlines() if line.startswith("  --")]
    wanted = [f"--env.{key}" for key in ENV_KEYS]
    wanted += [f"--{section}.{field.name}" for section, cls in SECTIONS.items() for field in fields(cls)]
    assert [flag for flag in wanted if flag.replace("_", "-") not in flags] == []
    assert '  --env.mask-check            strict (refuse an action outside its mask, or a mask with none) or off ' \
           '(default "strict")' in config_help().splitlines()


def test_an_env_whose_episodes_outlast_an_update_trains_without_a_no_episode_warning(tmp_path):
    """pendulum's episodes last 200 steps, 12 updates of horizon 16: every run warned "no episode finished
    in update 1 …" though nothing was wrong. Said only after 1,000 steps per agent without an episode."""
    result = jaxlab("train", "pendulum", "--vec.num-envs", "16", "--train.minibatch-size", "256",
                    "--policy.hidden-size", "16", "--train.total-timesteps", "4096", "--log.dashboard", "plain",
                    "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["episodes"] > 0 for r in records] == [False] * 12 + [True] + [False] * 3  # updates 1-12: none ended
    assert "no episode finished" not in result.stderr, result.stderr  # (another warning may come: SPS fell)


def test_a_resume_that_ends_no_episode_reports_the_runs_last_return(tmp_path):
    """pendulum's first episodes end in update 13 (200 steps, horizon 16). A resume for update 21 alone
    ends none: its last line said "no episode return was logged" of a run whose metrics.jsonl has
    returns; it now gives the run's last return, its update, and that this resume ended no episode."""
    run = tmp_path / "run"
    result = jaxlab("train", "pendulum", "--vec.num-envs", "4", "--train.minibatch-size", "16",
                    "--policy.hidden-size", "16", "--train.total-timesteps", "1280", "--log.dashboard", "none",
                    "--run-dir", str(run))
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    ended = [r for r in records if r["episodes"]]
    assert [r["update"] for r in ended] == [13]
    result = jaxlab("train", "--resume", str(run), "--train.total-timesteps", "1344",  # ENV left out: the run's
                    "--log.dashboard", "none")
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert (f"final mean return {ended[0]['episode_return']:.2f}, logged at update 13 (the 1 update of this "
            "resume ended no episode)") in last, last


def test_runs_started_in_the_same_second_get_a_run_dir_each(tmp_path, monkeypatch, capsys):
    """Seeds launched together (`jaxlab train cartpole --train.seed S &`) all named runs/cartpole-TIMESTAMP: the
    later ones were refused (the run dir in use by the first, or holding its run) instead of training. A default
    run dir is claimed by creating it: the next free one gets -2, -3, ...; one whose run does not start is
    removed again."""
    import time

    from jaxlab import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda form, *when: "20260101-000000")
    earlier = tmp_path / "runs" / "cartpole-20260101-000000"
    earlier.mkdir(parents=True)
    (earlier / "metrics.jsonl").write_text('{"update": 1}\n')  # a run started in the same second
    small = ["--vec.num-envs", "4", "--train.minibatch-size", "64", "--train.total-timesteps", "128",
             "--policy.hidden-size", "8", "--log.dashboard", "none"]
    assert cli.main(["train", "cartpole", *small, "--checkpoint.best-metric", "episode_retrun"]) == 2  # bad input
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["cartpole-20260101-000000"]  # nothing left
    assert cli.main(["train", "cartpole", *small]) == 0, capsys.readouterr().err
    assert "run dir runs/cartpole-20260101-000000-2" in capsys.readouterr().out
    assert len((earlier.parent / "cartpole-20260101-000000-2" / "metrics.jsonl").read_text().splitlines()) == 2
    assert (earlier / "metrics.jsonl").read_text() == '{"update": 1}\n' and sorted(earlier.iterdir()) == [
        earlier / "metrics.jsonl"]


def test_epochs_run_is_written_to_metrics_jsonl_as_a_whole_number(tmp_path):
    """epochs_run (the epochs an update ran; train.target_kl stops it early) was written 1.0, as every metric
    was made a float."""
    run_dir = tmp_path / "run"
    result = jaxlab("train", "cartpole", "--train.total-timesteps", "256", "--vec.num-envs=8", "--train.minibatch-size",
                    "64", "--policy.hidden_size", "16", "--train.update-epochs", "3", "--train.target-kl", "1e-9",
                    "--log.dashboard", "none", "--run-dir", str(run_dir))
    assert result.returncode == 0, result.stderr
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all('"epochs_run": 1,' in line or '"epochs_run": 1}' in line for line in lines), lines
    assert [type(json.loads(line)["epochs_run"]) for line in lines] == [int, int]

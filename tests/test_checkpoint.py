"""Checkpoints: exact resume, damaged and partial checkpoints, incompatible configs, save failures,
stop signals, and eval from a path in a fresh process."""

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from pathlib import Path

import jax
import numpy as np
import pytest

from jaxlab import checkpoint
from jaxlab.config import ConfigError, load_config
from jaxlab.observe.records import read_metrics
from jaxlab.run.loop import train_loop, train_run
from jaxlab.train.trainer import Trainer
from threads_left import threads_left_since

SMALL = ["--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16",
         "--policy.hidden-size", "16"]


def small_config(updates=6, *flags):
    config, _ = load_config("cartpole", flags=[*SMALL, "--train.total-timesteps", str(64 * updates), *flags])
    return config


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def assert_same_params(a, b):
    for x, y in zip(leaves(a), leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def jaxlab(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True,
                          timeout=300, **kwargs)


def test_save_stop_resume_equals_uninterrupted_bit_for_bit(tmp_path):
    config = small_config(7)
    with Trainer(config) as straight:
        train_loop(straight, updates=7)
        reference = straight.state
    with Trainer(config) as first:
        train_loop(first, updates=3)
        first.save_checkpoint(tmp_path / "ck", metadata={"why": "test"})
    with Trainer(config) as second:
        meta = second.load_checkpoint(tmp_path / "ck")
        assert (meta["update"], meta["global_step"], meta["metadata"]) == (3, 192, {"why": "test"})
        train_loop(second, updates=4)
        assert_same_params(second.state.params, reference.params)
        assert_same_params(second.state.opt_state, reference.opt_state)
        assert int(second.state.step) == int(reference.step)


def test_a_checkpoint_records_the_jaxlab_version_and_another_versions_is_loaded_with_one_line(tmp_path):
    """A checkpoint did not say which jaxlab wrote it. Its meta records jaxlab_version; a resume or eval of one
    written by another version loads it and says so in one line naming both versions; one from before the
    record (no field) and one of this version load without a word."""
    from jaxlab import __version__
    from jaxlab.train.evaluation import load_trainer

    with Trainer(small_config(2)) as trainer:
        train_loop(trainer, updates=2)
        path = trainer.save_checkpoint(tmp_path / "ck")
    metadata = path / "meta" / "metadata"
    meta = json.loads(metadata.read_text())
    assert meta["jaxlab_version"] == __version__

    def said_on_load(jaxlab_version):
        """What a resume (load_checkpoint) and an eval (load_trainer) say of the checkpoint with
        ``jaxlab_version`` in its meta (None: without the field, as before the record)."""
        edited = {k: v for k, v in meta.items() if k != "jaxlab_version"}
        if jaxlab_version is not None:
            edited["jaxlab_version"] = jaxlab_version
        metadata.write_text(json.dumps(edited))
        checkpoint.write_manifest(path)  # files.json's CRC of the edited file: not damage
        said = []
        with Trainer(small_config(2)) as resumed:
            assert resumed.load_checkpoint(path, warn=said.append)["update"] == 2
        with load_trainer(path, warn=said.append) as played:
            assert played.update_index == 2
        return said

    line = f"note: the checkpoint was written by jaxlab 0.0.1, this is jaxlab {__version__} (both read checkpoint "
    assert said_on_load("0.0.1") == [line + "format 1)"] * 2
    assert said_on_load(None) == said_on_load(__version__) == []

def test_a_run_stopped_by_a_signal_and_resumed_matches_an_uninterrupted_run(tmp_path):
    config = small_config(8, "--checkpoint.interval", "2")
    straight = train_run(config, tmp_path / "straight")

    def terminate_at_5(record):
        if record["update"] == 5:
            os.kill(os.getpid(), signal.SIGTERM)  # handled by train_run: finish the update, save, return

    cut = train_run(config, tmp_path / "cut", on_log=terminate_at_5)
    assert cut.stopped == "SIGTERM" and cut.checkpoint.name == "5"
    assert [p.name for p in checkpoint.step_dirs(tmp_path / "cut/checkpoints")] == ["5", "4", "2"]
    resumed = train_run(config, tmp_path / "cut", resume=tmp_path / "cut/checkpoints/4")
    assert resumed.resumed_from.name == "4" and [r["update"] for r in resumed.records] == [5, 6, 7, 8]
    a = checkpoint.read(straight.checkpoint, None)[0]["train"]
    b = checkpoint.read(resumed.checkpoint, None)[0]["train"]
    assert_same_params(a, b)  # params, optimizer state and its step
    records = [json.loads(line) for line in (tmp_path / "cut/metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records] == list(range(1, 9))  # update 5 of the cut run was dropped
    straight_returns = [json.loads(line)["episode_return"] for line in
                        (tmp_path / "straight/metrics.jsonl").read_text().splitlines()]
    assert [r["episode_return"] for r in records] == straight_returns


def array_files(step: Path) -> list[Path]:
    """The files holding a checkpoint's array bytes."""
    return [p for p in (step / "state").rglob("*") if p.is_file() and p.parent.name == "d"
            and p.parent.parent.name.startswith("ocdbt")]


def test_damaged_and_partial_checkpoints_fall_back_to_the_newest_good_one(tmp_path):
    run = tmp_path / "run"
    result = jaxlab("train", "cartpole", *SMALL, "--train.total-timesteps", "512", "--checkpoint.interval", "2",
                    "--checkpoint.keep", "4", "--run-dir", str(run))
    assert result.returncode == 0, result.stderr
    steps = run / "checkpoints"
    assert [p.name for p in checkpoint.step_dirs(steps)] == ["8", "6", "4", "2"]
    for data in array_files(steps / "8"):  # one flipped byte per array file: Orbax reads it without a word
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    for data in array_files(steps / "6"):  # truncated, and no files.json (killed before it was written)
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    (steps / "6" / checkpoint.MANIFEST).unlink()
    (steps / "10.orbax-checkpoint-tmp").mkdir()  # what a save killed before its rename leaves
    result = jaxlab("train", "cartpole", "--resume", str(run), "--train.total-timesteps", "640")
    assert result.returncode == 0, result.stderr
    assert f"checkpoint {steps / '8'} is damaged: the bytes of state/ocdbt.process_0/d/" in result.stderr
    assert f"checkpoint {steps / '6'} is unreadable: ValueError: OUT_OF_RANGE" in result.stderr
    assert f"resumed from {steps / '4'} at update 4" in result.stderr
    assert "update    10/10" in result.stdout
    # the failed Orbax read of 6 left TensorStore callbacks on a closed event loop: in run.log, not the terminal
    assert "Traceback" not in result.stderr and "Event loop is closed" not in result.stderr
    assert "WARNING" not in result.stderr


def test_a_tree_that_does_not_match_is_an_error_not_damage(tmp_path):
    with Trainer(small_config(2)) as trainer:
        trainer.save_checkpoint(tmp_path / "ck")
        template = trainer.checkpoint_template()
    assert checkpoint.verify(tmp_path / "ck")
    del template["rollout"]["carry"]  # what a code change that renamed a field would ask for
    with pytest.raises(ValueError) as caught:
        checkpoint.read(tmp_path / "ck", template)
    assert not isinstance(caught.value, checkpoint.CheckpointError)


def test_one_resume_reads_the_checkpoint_meta_once(tmp_path, monkeypatch):
    from jaxlab import cli

    run = tmp_path / "run"
    assert train_run(small_config(2), run).checkpoint is not None
    reads = []
    real = checkpoint.read_meta
    monkeypatch.setattr(checkpoint, "read_meta", lambda path: reads.append(path) or real(path))
    code = cli.main(["train", "cartpole", "--resume", str(run), "--train.total-timesteps", "256",
                     "--log.dashboard", "none"])
    assert code == 0 and reads == [run / "checkpoints" / "2"]


def test_a_damaged_newest_meta_is_reported_once_on_resume(tmp_path, capsys):
    """The newest checkpoint's meta is cut short: the resume warns once that it falls back (the config is
    read from the older one, whose state is then loaded without reading the damaged one again)."""
    from jaxlab import cli

    run = tmp_path / "run"
    assert train_run(small_config(4, "--checkpoint.interval", "2"), run).checkpoint is not None
    meta = run / "checkpoints" / "4" / "meta" / "metadata"
    meta.write_bytes(meta.read_bytes()[:10])
    capsys.readouterr()
    code = cli.main(["train", "cartpole", "--resume", str(run), "--train.total-timesteps", "384",
                     "--log.dashboard", "none"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.count(f"checkpoint {run / 'checkpoints' / '4'} is damaged: meta/metadata has 10 bytes") == 1, err
    assert err.count("falling back to an older checkpoint") == 1, err
    assert f"resumed from {run / 'checkpoints' / '2'} at update 2" in err


def test_kill_during_a_save_leaves_the_previous_checkpoint_intact(tmp_path):
    """SIGKILL lands while Orbax is writing a checkpoint (its temporary directory exists before and after
    the kill, so the save never completed); the newest complete checkpoint is still byte for byte what
    was written (files.json) and the run resumes from it."""
    run = tmp_path / "run"
    args = [sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--vec.num-envs", "64",
            "--policy.hidden-size", "512", "--train.total-timesteps", "10_000_000", "--checkpoint.interval", "1",
            "--log.dashboard", "none", "--run-dir", str(run)]
    for attempt in range(10):
        process = subprocess.Popen(args if attempt == 0 else [*args, "--resume", str(run)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        in_flight = []
        while not in_flight and time.monotonic() < deadline and process.poll() is None:
            if len(checkpoint.step_dirs(run / "checkpoints")) >= 1:
                in_flight = list((run / "checkpoints").glob("*.orbax-checkpoint-tmp*"))
            if not in_flight:
                time.sleep(0.005)
        process.kill()
        _, err = process.communicate()
        assert in_flight, err
        if in_flight[0].exists():  # the kill landed inside the save
            break
    else:
        pytest.fail("no kill landed inside a save in 10 attempts")
    newest = checkpoint.step_dirs(run / "checkpoints")[0]
    assert int(in_flight[0].name.partition(".")[0]) > int(newest.name)
    assert checkpoint.verify(newest)  # every file as written (sizes and CRC-32)
    result = jaxlab("train", "cartpole", "--resume", str(run), "--train.total-timesteps",
                    str((int(newest.name) + 1) * 1024), "--checkpoint.interval", "0", "--log.dashboard", "plain")
    assert result.returncode == 0, result.stderr
    assert f"resumed from {newest} at update {newest.name}" in result.stderr
    assert f"update {int(newest.name) + 1:>5}/" in result.stdout


def test_incompatible_resume_names_every_mismatch_and_allowed_changes_are_applied(tmp_path):
    run = tmp_path / "run"
    assert train_run(small_config(2), run).checkpoint is not None
    result = jaxlab("train", "cartpole", "--resume", str(run), "--vec.num-envs", "16", "--policy.hidden-size", "32")
    assert result.returncode == 2
    assert ("cannot resume: the checkpoint was trained with another vec.num_envs/policy.hidden_size "
            "(vec.num_envs was 8, now 16; policy.hidden_size was 16, now 32)") in result.stderr
    result = jaxlab("train", "memory", "--resume", str(run))
    assert result.returncode == 2
    assert f"--resume {run} is a run of 'cartpole', not 'memory'" in result.stderr
    result = jaxlab("train", "cartpole", "--resume", str(run), "--train.total-timesteps", "256",
                    "--log.interval", "5")
    assert result.returncode == 0, result.stderr
    assert "resume: applying the changed train.total_timesteps: 128 -> 256" in result.stdout
    assert "resume: applying the changed log.interval: 1.0 -> 5.0" in result.stdout
    with Trainer(small_config(2, "--env.max-steps", "100")) as other, pytest.raises(
            ConfigError, match=r"another env.max_steps \(env.max_steps was 500, now 100\)"):
        other.load_checkpoint(checkpoint.step_dirs(run / "checkpoints")[0])
    # a parameter given at its default is no change (it was refused: "env was {}, now {'max_steps': 500}")
    result = jaxlab("train", "cartpole", "--resume", str(run), "--env.max-steps", "500", "--train.total-timesteps",
                    "320", "--log.dashboard", "none")
    assert result.returncode == 0, result.stderr


def run_files(run) -> dict:
    """Every file under ``run`` (the lock file left out) -> its bytes."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def test_a_new_run_into_a_run_dir_that_holds_a_run_is_refused_and_changes_nothing(tmp_path):
    """Without --resume, a run dir with checkpoints (or metrics) is refused before anything is written: a
    second run there would mix its records into the first's and its pruning delete the first's
    checkpoints."""
    from jaxlab import cli

    run = tmp_path / "run"
    assert train_run(small_config(2), run).checkpoint is not None
    before = run_files(run)
    with pytest.raises(ConfigError, match=rf"run dir {run} already holds a run \(checkpoints up to update 2\); "
                                          rf"continue it with --resume {run}, or give a new --run-dir"):
        train_run(small_config(4), run)
    assert cli.main(["train", "cartpole", *SMALL, "--train.total-timesteps", "256", "--run-dir", str(run),
                     "--log.dashboard", "none"]) == 2
    assert run_files(run) == before
    metrics_only = tmp_path / "metrics-only"
    metrics_only.mkdir()
    (metrics_only / "metrics.jsonl").write_text('{"update": 1}\n')
    with pytest.raises(ConfigError) as refused:
        train_run(small_config(2), metrics_only)
    assert str(refused.value) == (f"run dir {metrics_only} already holds a run (metrics.jsonl) but no checkpoint to "
                                  "continue it from (it ended before its first save); give a new --run-dir, or move "
                                  "that run away first")  # not --resume, which refuses a run with no checkpoint


def test_a_run_dir_holding_other_things_than_a_run_is_refused_unless_it_is_the_resumed_runs(tmp_path, capsys):
    """`jaxlab train ENV --run-dir .` in a project (or --run-dir runs, a folder of runs) trained into it, its
    metrics.jsonl and checkpoints/ among the project's files. Refused now with one line naming the folder and
    a new one, before anything is written; an empty folder trains, and a run dir with a file of the user's
    beside its run resumes."""
    from jaxlab import cli

    def train(run_dir, *flags):
        return cli.main(["train", "cartpole", *SMALL, "--train.total-timesteps", "128", "--run-dir", str(run_dir),
                         "--log.dashboard", "none", *flags])

    project, runs = tmp_path / "project", tmp_path / "runs"
    (project / "src").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\n")
    assert train(runs / "a") == 0
    for folder in (project, runs):
        before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
        capsys.readouterr()
        assert train(folder) == 2
        line = capsys.readouterr().err.strip()
        shown = "pyproject.toml, src" if folder == project else "a"
        assert line.startswith(f"jaxlab train: error: --run-dir {folder}: a folder that holds other things than a "
                               f"run ({shown}), which the run's metrics.jsonl and checkpoints/ would be mixed with; "
                               f"give a new (or empty) folder, e.g. --run-dir {folder}/cartpole-"), line
        assert "\n" not in line and sorted(p.relative_to(folder) for p in folder.rglob("*")) == before
    (runs / "a" / "curves.png").write_bytes(b"mine")  # the user's, beside the run: its own resume goes on
    assert train(runs / "a", "--resume", str(runs / "a"), "--train.total-timesteps", "256") == 0
    assert [r["update"] for r in read_metrics(runs / "a")] == [1, 2, 3, 4]
    (tmp_path / "empty").mkdir()
    assert train(tmp_path / "empty") == 0 and read_metrics(tmp_path / "empty")


def test_a_resume_into_another_run_dir_that_holds_a_run_is_refused(tmp_path):
    """--resume A --run-dir B continues A's checkpoint in B: refused when B holds a run of its own (its
    metrics would be cut to A's update and its newer checkpoints moved aside), allowed into a new B,
    and A is left as it was either way."""
    a, b, fresh = tmp_path / "a", tmp_path / "b", tmp_path / "fresh"
    train_run(small_config(2), a)
    train_run(small_config(3), b)
    before_a, before_b = run_files(a), run_files(b)
    with pytest.raises(ConfigError, match=rf"run dir {b} already holds a run \(checkpoints up to update 3\)"):
        train_run(small_config(4), b, resume=a / "checkpoints")
    assert run_files(b) == before_b
    result = train_run(small_config(4), fresh, resume=a / "checkpoints")
    assert result.resumed_from == a / "checkpoints" / "2" and run_files(a) == before_a
    assert [r["update"] for r in read_metrics(fresh)] == [3, 4]
    train_run(small_config(5), a, resume=a / "checkpoints")  # its own run dir: continued as before
    assert [r["update"] for r in read_metrics(a)] == [1, 2, 3, 4, 5]


def test_a_checkpoint_set_aside_by_a_resume_resumes_into_a_run_dir_of_its_own(tmp_path, capsys):
    """A resume back to update 2 moves checkpoint 4 to RUN/checkpoints-replaced/4-STAMP. Resuming that one
    took its folder, checkpoints-replaced/, for the run dir: a run started there (config.toml, metrics,
    its own checkpoints/ among the checkpoints set aside), out of `jaxlab runs`. It is now refused without
    --run-dir, naming the run, and continues in the run dir given."""
    from jaxlab import cli

    run = tmp_path / "run"
    train_run(small_config(4, "--checkpoint.interval", "2"), run)
    train_run(small_config(3), run, resume=run / "checkpoints" / "2")
    (aside,) = (run / "checkpoints-replaced").iterdir()
    assert aside.name.startswith("4-")
    before = run_files(run)
    flags = [*SMALL, "--train.total-timesteps", str(64 * 6), "--log.dashboard", "none"]
    assert cli.main(["train", "cartpole", "--resume", str(aside), *flags]) == 2
    assert (f"this checkpoint (update 4) was set aside by an earlier resume of {run} that went back before it"
            in capsys.readouterr().err)
    assert run_files(run) == before and sorted(p.name for p in aside.parent.iterdir()) == [aside.name]
    branch = tmp_path / "branch"
    assert cli.main(["train", "cartpole", "--resume", str(aside), "--run-dir", str(branch), *flags]) == 0
    assert [r["update"] for r in read_metrics(branch)] == [5, 6] and run_files(run) == before


def test_a_resume_with_nothing_left_to_train_changes_nothing(tmp_path):
    """Resuming an older checkpoint whose update is already the last: no metrics cut, no newer checkpoint
    moved aside, no record rewritten (it cut metrics.jsonl and moved checkpoint 4 aside, then trained
    nothing)."""
    run = tmp_path / "run"
    train_run(small_config(4, "--checkpoint.interval", "2"), run)
    before = run_files(run)
    result = train_run(small_config(2), run, resume=run / "checkpoints" / "2")
    assert result.records == [] and result.resumed_from == run / "checkpoints" / "2"
    assert run_files(run) == before and not (run / "checkpoints-replaced").exists()


def test_a_resume_to_fewer_updates_than_the_checkpoints_says_where_the_checkpoint_is(tmp_path, capsys):
    """A resume with a train.total_timesteps below the checkpoint's update said "the checkpoint is at
    update 2 of 2" of a checkpoint at update 4; it now names both and the total that would continue."""
    from jaxlab import cli

    run = tmp_path / "run"
    train_run(small_config(4), run)
    flags = [*SMALL, "--log.dashboard", "none"]
    assert cli.main(["train", "cartpole", "--resume", str(run), *flags, "--train.total-timesteps", "128"]) == 0
    assert ("nothing to train: the checkpoint is at update 4, past the 2 updates of train.total_timesteps 128; "
            "to continue, raise --train.total-timesteps above 256") in capsys.readouterr().out
    assert cli.main(["train", "cartpole", "--resume", str(run), *flags]) == 0
    out = capsys.readouterr().out
    assert "nothing to train: the checkpoint is at update 4 of 4; raise --train.total-timesteps" in out


def test_an_incompatible_resume_names_the_flags_that_give_the_checkpoints_values():
    """The refusal said 'policy.lstm was True, now False; resume with the checkpoint's values or start a new
    run': Python's spelling, and no flag. It now writes the values as a config file does and names the flags
    that set the saved ones."""
    from jaxlab.train.trainer import check_compatible

    saved = small_config(2, "--policy.mlp-layers", "32,16")
    message = (r"\(policy.mlp_layers was \[32, 16\], now \[8\]; policy.lstm was true, now false; "
               r"train.obs_norm was \"auto\", now false\); resume with the checkpoint's values \(leave those flags "
               r"out, or give --policy.mlp-layers 32,16 --policy.lstm true --train.obs-norm auto\) or start a new "
               r"run \(without --resume, in a new --run-dir\)$")
    with pytest.raises(ConfigError, match=message):
        check_compatible(saved, small_config(2, "--policy.lstm", "false", "--policy.mlp-layers", "8",
                                             "--train.obs-norm", "false"))


def test_a_changed_seed_at_a_resume_is_listed_as_recorded_only():
    """'resume: applying the changed train.seed: 0 -> 7' said the seed was applied, but the checkpoint's random
    keys and env states carry on: the resumed run is the same whatever the seed."""
    from jaxlab.train.trainer import check_compatible

    assert check_compatible(small_config(2), small_config(2, "--train.seed", "7")) == [
        "train.seed: 0 -> 7 (recorded only: the random keys and the C envs' states continue from the checkpoint's; "
        "a Python env's new episodes take it)"]


def test_a_resume_over_another_batch_is_refused_before_it_trains_another_length(tmp_path):
    """A run counts its length in updates of one batch: resumed at update 10 of batches of 64 with batches of 128
    (train.batch_size, or a longer horizon) for 1,280 steps it would have run to update 10 of 10 and stopped,
    or for 2,560 to update 20, 640 + 10 x 128 = 1,920 steps, not 2,560. Refused, in the CLI and in the run
    itself, naming both batches; nothing saved is touched. The same batch resumes."""
    run = tmp_path / "run"
    assert train_run(small_config(10), run).checkpoint is not None
    before = run_files(run)
    for flags, fix in ((["--train.batch-size", "128"], ", or give --train.batch-size 64"),
                       (["--train.bptt-horizon", "16"], "")):  # 64 is not whole segments of horizon 16
        result = jaxlab("train", "cartpole", "--resume", str(run), *flags, "--train.total-timesteps", "2560")
        assert result.returncode == 2, result.stderr
        assert (f"cannot resume: checkpoint {run / 'checkpoints' / '10'} trained batches of 64 steps (update 10 at "
                "step 640), this run's are 128 (") in result.stderr, result.stderr
        assert (f"(leave out the flags that change train.batch_size or train.bptt_horizon{fix}) or start a new "
                "run") in result.stderr, result.stderr
        with pytest.raises(ConfigError, match=r"trained batches of 64 steps \(update 10 at step 640\)"):
            train_run(small_config(20, *flags), run, resume=run / "checkpoints")
        assert run_files(run) == before
    assert train_run(small_config(12), run, resume=run / "checkpoints").checkpoint.name == "12"


def test_a_resume_that_fails_leaves_the_runs_records_as_they_were(tmp_path):
    """Another vec.groups is refused (the checkpoint holds one env state and carry per group), and a
    resume that fails writes nothing: config.toml, run.json and metrics.jsonl stay the run's own."""
    run = tmp_path / "run"
    assert train_run(small_config(2), run).checkpoint is not None
    before = run_files(run)
    result = jaxlab("train", "cartpole", "--resume", str(run), "--vec.groups", "2")
    assert result.returncode == 2
    assert ("cannot resume: the checkpoint was trained with another vec.groups (vec.groups was 1, now 2)"
            in result.stderr), result.stderr
    with pytest.raises(ConfigError, match=r"another vec.groups"):  # the same refusal inside the run itself
        train_run(small_config(4, "--vec.groups", "2"), run, resume=run / "checkpoints")
    assert run_files(run) == before


def test_a_failed_save_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    calls = []

    def fill_the_disk(trainer, saves):
        real = saves.manager.save

        def save(*args, **kwargs):
            calls.append(args[0])
            if len(calls) >= 2:
                raise OSError(28, "No space left on device")
            return real(*args, **kwargs)

        saves.manager.save = save

    threads_before = set(threading.enumerate())
    result = train_run(small_config(6, "--checkpoint.interval", "2"), tmp_path / "run", trainer_hook=fill_the_disk)
    assert calls == [2, 4]
    assert result.error.startswith(f"cannot save checkpoint {tmp_path / 'run/checkpoints/4'} (No space left on "
                                   f"device); the last good checkpoint is {tmp_path / 'run/checkpoints/2'}")
    assert result.checkpoint == tmp_path / "run/checkpoints/2" and len(result.records) == 4
    with Trainer(small_config(6)) as trainer:
        assert trainer.load_checkpoint(result.checkpoint)["update"] == 2
    # the state that could not be saved is handed back and can be written where there is room
    rescued = checkpoint.write(tmp_path / "elsewhere", *result.unsaved)
    with Trainer(small_config(6)) as trainer:
        assert trainer.load_checkpoint(rescued)["update"] == 4
        assert_same_params(trainer.state.params, result.unsaved[0]["train"]["params"])
    assert threads_left_since(threads_before) == []  # Orbax's threads are gone


def test_a_failed_asynchronous_write_stops_the_run_and_is_never_marked_complete(tmp_path):
    """The write of update 2's checkpoint fails in the background; the save after update 4 finds it:
    the run stops there with the error, and checkpoint 2 gets no files.json (not even when the run's
    checkpoints are closed)."""
    def fail_the_first_write(trainer, saves):
        real, waits = saves.wait_for_write, []

        def wait_for_write():
            waits.append(saves.last_saved_update)
            if waits == [None, 2]:
                raise checkpoint.CheckpointError("cannot save checkpoint 2 (Input/output error)")
            return real()

        saves.wait_for_write = wait_for_write

    result = train_run(small_config(6, "--checkpoint.interval", "2"), tmp_path / "run",
                       trainer_hook=fail_the_first_write)
    assert result.error == "cannot save checkpoint 2 (Input/output error)" and len(result.records) == 4
    assert (tmp_path / "run/checkpoints/2").is_dir() and not checkpoint.verify(tmp_path / "run/checkpoints/2")
    assert not (tmp_path / "run/checkpoints/4").exists()


def test_a_failed_write_of_the_last_checkpoint_is_never_marked_complete(tmp_path):
    """The write of the run's last checkpoint (update 6) fails in the background: the run ends with the
    error, and closing the checkpoints afterwards does not write that checkpoint's files.json."""
    def fail_the_last_write_once(trainer, saves):
        real, failed = saves.manager.wait_until_finished, []

        def wait_until_finished():
            if saves.last_saved_update == 6 and not failed:
                failed.append(6)
                raise OSError(5, "Input/output error")
            return real()

        saves.manager.wait_until_finished = wait_until_finished

    result = train_run(small_config(6, "--checkpoint.interval", "2"), tmp_path / "run",
                       trainer_hook=fail_the_last_write_once)
    assert result.error.startswith(f"cannot save checkpoint {tmp_path / 'run/checkpoints/6'} (Input/output error)")
    assert len(result.records) == 6 and checkpoint.verify(tmp_path / "run/checkpoints/4")
    assert not checkpoint.verify(tmp_path / "run/checkpoints/6")  # no files.json


def test_a_disk_full_in_tensorstores_write_is_named_in_a_few_words(tmp_path):
    """A disk that fills while Orbax writes in the background fails in TensorStore, as a ValueError whose
    message holds the whole TensorStore spec (a thousand characters, the reason at its end): the error
    line was that message. It now says the errno's words. (The message below is a real one, shortened.)"""
    message = ('RESOURCE_EXHAUSTED: Error writing "train.params.params.encoder.kernel/0.0" in OCDBT database at '
               'local file "/x/checkpoints/6.orbax-checkpoint-tmp/state.orbax-checkpoint-tmp/ocdbt.process_0/": '
               'Failed to write 75712 bytes to file 11: No space left on device [os_error_code=\'28\'] '
               '[source locations=\'tensorstore/kvstore/file/file_key_value_store.cc:316\'] {"driver":"zarr3"}')

    def fill_the_disk_at_6(trainer, saves):
        real, failed = saves.manager.wait_until_finished, []

        def wait_until_finished():
            if saves.last_saved_update == 6 and not failed:
                failed.append(6)
                raise ValueError(message)
            return real()

        saves.manager.wait_until_finished = wait_until_finished

    result = train_run(small_config(6, "--checkpoint.interval", "2"), tmp_path / "run", trainer_hook=fill_the_disk_at_6)
    assert result.error == (f"cannot save checkpoint {tmp_path / 'run/checkpoints/6'} (No space left on device); the "
                            f"last good checkpoint is {tmp_path / 'run/checkpoints/4'}")


def test_an_unusable_checkpoint_dir_is_a_clear_error(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").write_text("a file where the checkpoints should go")
    result = jaxlab("train", "cartpole", *SMALL, "--train.total-timesteps", "128", "--run-dir", str(run))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == (f"jaxlab train: error: {run / 'checkpoints'} is a file, where the run's checkpoints/ "
                             "folder goes; move it away, or give another --run-dir\n")
    assert (run / "checkpoints").read_text() == "a file where the checkpoints should go"
    assert not (run / "metrics.jsonl").exists()  # refused before training


def test_sigint_during_start_up_saves_after_the_first_update(tmp_path):
    """Ctrl-C while JAX starts and compiles (before the first update) is taken like one during training:
    the first update ends, a checkpoint is saved, exit 130. It was a KeyboardInterrupt out of the
    compile, with nothing saved (or, inside one of JAX's callbacks, ignored: the run went on)."""
    run = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", *SMALL,
                                "--train.total-timesteps", "100_000", "--run-dir", str(run), "--log.dashboard", "none",
                                "--device.compile-cache", "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    header = process.stdout.readline()  # printed once the config is resolved, before the trainer compiles
    assert header.startswith("jaxlab train cartpole:"), header
    assert not (run / "metrics.jsonl").exists()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130, err
    assert "Traceback" not in err and "stopped by SIGINT after update 1; saved checkpoint" in err
    assert [p.name for p in checkpoint.step_dirs(run / "checkpoints")] == ["1"]


def test_a_signal_taken_while_the_config_is_resolved_then_a_bad_config_says_the_run_did_not_start(tmp_path):
    """The first signal's line promises to finish the update; when the config then fails (exit 2), a
    second line says that nothing started, so nothing was finished or saved. The policy module sends the
    signal while it is imported (during resolve) and then fails."""
    module = tmp_path / "signalled.py"
    module.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nraise RuntimeError('broken')\n")
    run = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", *SMALL, "--run-dir", str(run),
                             "--policy.module", f"{module}:Net"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "SIGTERM: finishing this update, then saving a checkpoint"
    assert lines[1].startswith("jaxlab train: error: ") and "broken" in lines[1]
    assert lines[2:] == ["jaxlab train: the SIGTERM taken while starting stopped nothing: the run did not start"]
    assert not run.exists()


def test_sigterm_saves_and_exits_0_with_nothing_left_running(tmp_path):
    run = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--train.total-timesteps",
                                "10_000_000", "--run-dir", str(run)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").read_text().count("\n") >= 3:
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "stopped by SIGTERM after update" in err and "--resume" in err
    newest = checkpoint.step_dirs(run / "checkpoints")[0]
    records = (run / "metrics.jsonl").read_text().splitlines()
    assert int(newest.name) == json.loads(records[-1])["update"]
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)  # no process of its session is left


SIGTERM_AT_EXIT = """
import atexit, os, signal, sys, time
atexit.register(lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(30)))  # runs last, after JAX's
from jaxlab.launch import main
sys.argv = ["jaxlab", *sys.argv[1:]]
sys.exit(main())
"""


def test_a_sigterm_after_the_done_line_during_shutdown_exits_0(tmp_path):
    """A SIGTERM in the second or so of Python's shutdown after a run's "done" line, once StopSignals'
    handlers are gone, met the default handler: exit 143 (-15 here) for a run that had ended and saved,
    where README says 0. It now ends the process with the command's status."""
    run = tmp_path / "run"
    result = subprocess.run([sys.executable, "-c", SIGTERM_AT_EXIT, "train", "cartpole", *SMALL,
                             "--train.total-timesteps", "256", "--run-dir", str(run)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "done: 256 steps" in result.stdout
    assert checkpoint.verify(checkpoint.step_dirs(run / "checkpoints")[0])


def test_a_second_ctrl_c_interrupts_at_once_and_the_run_resumes_from_what_was_saved(tmp_path, monkeypatch, capfd):
    """Ctrl-C twice: the first asks for a graceful stop, the second, before that stop is done, interrupts
    at once: exit 130 with one line, no traceback, no thread of Orbax's left, and the checkpoints saved
    before resume. (In-process, so that the two signals reach Python's handler one after the other: a
    process busy in XLA for longer than between two presses sees them as one, a graceful stop.)"""
    from jaxlab import cli

    run = tmp_path / "run"
    flags = [*SMALL, "--train.total-timesteps", "512", "--checkpoint.interval", "2", "--run-dir", str(run)]
    threads_before = set(threading.enumerate())
    log = Trainer.mean_and_log

    def log_then_ctrl_c_twice_at_5(trainer):
        record = log(trainer)
        if record["update"] == 5:
            os.kill(os.getpid(), signal.SIGINT)  # the first asks for a graceful stop,
            os.kill(os.getpid(), signal.SIGINT)  # the second interrupts at once
        return record

    monkeypatch.setattr(Trainer, "mean_and_log", log_then_ctrl_c_twice_at_5)
    assert cli.main(["train", "cartpole", *flags]) == 130
    err = capfd.readouterr().err
    assert "SIGINT: finishing this update, then saving a checkpoint; Ctrl-C again to stop at once" in err
    assert f"interrupted; the metrics so far are in {run}/metrics.jsonl; the last checkpoint is {run}/checkpoints/4: " \
           f"continue with `jaxlab train cartpole --resume {run}`" in err and "Traceback" not in err
    assert [p.name for p in checkpoint.step_dirs(run / "checkpoints")] == ["4", "2"]
    assert threads_left_since(threads_before) == []
    monkeypatch.undo()
    assert cli.main(["train", "cartpole", "--resume", str(run), *flags]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in records] == list(range(1, 9))  # update 5 of the cut run was dropped
    assert [p.name for p in checkpoint.step_dirs(run / "checkpoints")][0] == "8"


def test_the_command_a_stopped_run_prints_resumes_it_from_a_path_with_spaces(tmp_path, monkeypatch, capfd):
    """The stop line's `jaxlab train ENV --resume RUN_DIR` had the run dir unquoted: pasted into a shell,
    a path with a space became two arguments."""
    from jaxlab import cli

    run = tmp_path / "my runs" / "cart pole"
    flags = [*SMALL, "--train.total-timesteps", "512", "--log.dashboard", "none"]
    log = Trainer.mean_and_log

    def log_then_sigterm_at_2(trainer):
        record = log(trainer)
        if record["update"] == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return record

    monkeypatch.setattr(Trainer, "mean_and_log", log_then_sigterm_at_2)
    assert cli.main(["train", "cartpole", *flags, "--run-dir", str(run)]) == 0
    command = capfd.readouterr().err.split("continue with `")[1].split("`")[0]
    assert shlex.split(command) == ["jaxlab", "train", "cartpole", "--resume", str(run)]
    monkeypatch.undo()
    assert cli.main(shlex.split(command)[1:] + flags) == 0
    assert [r["update"] for r in read_metrics(run)] == list(range(1, 9))


@pytest.mark.parametrize("entry", [["jaxlab.cli"], ["jaxlab.sweep.child", "SWEEP_PID"]], ids=["command", "trial"])
def test_a_second_ctrl_c_during_the_compile_exits_130_not_with_a_segfault(tmp_path, entry):
    """Ctrl-C twice while XLA compiles the update: XLA compiles on a thread of its own, and the
    KeyboardInterrupt ends only JAX's wait for it; Python's finalization (JAX's atexit clean-up) then
    destroyed the backend under that thread, and the process died of SIGSEGV after its last line. It
    now ends at once with 130, as `jaxlab train` and as a sweep's trial (this process for its sweep).
    JAX_LOG_COMPILES puts "Compiling jit(prepare_and_update)" in run.log when that compile (about 20 s
    here: fully unrolled over 32 steps, no cache) starts."""
    run = tmp_path / "run"
    entry = [str(os.getpid()) if part == "SWEEP_PID" else part for part in entry]
    process = subprocess.Popen(
        [sys.executable, "-m", *entry, "train", "cartpole", "--vec.num-envs", "8", "--train.bptt-horizon", "32",
         "--policy.scan-unroll", "32", "--train.minibatch-size", "256", "--train.total-timesteps", "1024",
         "--run-dir", str(run), "--log.dashboard", "none", "--device.compile-cache", "off"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "JAX_LOG_COMPILES": "1"})
    deadline = time.monotonic() + 240
    log = run / "run.log"
    while not (log.is_file() and "Compiling jit(prepare_and_update)" in log.read_text()):
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)  # a graceful stop, after the first update,
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)  # then at once, still inside the compile
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err  # it was -11, SIGSEGV
    assert err.strip().splitlines()[-1] == "interrupted; before the first update ended; nothing was saved"


#: runs `jaxlab ARGS...` (sys.argv[2:]) with Orbax's read of the arrays sending this process sys.argv[1] SIGINTs
#: (0.3 s apart) while its TensorStore reads are in flight, then holding the read open for a minute
CTRL_C_DURING_THE_READ = """
import asyncio, os, signal, sys
from orbax.checkpoint._src.handlers.base_pytree_checkpoint_handler import BasePyTreeCheckpointHandler as Handler
read, presses = Handler._maybe_deserialize, int(sys.argv[1])

async def read_with_ctrl_c(self, *args, **kwargs):
    reading = asyncio.ensure_future(read(self, *args, **kwargs))
    await asyncio.sleep(0.05)
    for _ in range(presses):
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.3)
    await asyncio.sleep(60)
    return await reading

Handler._maybe_deserialize = read_with_ctrl_c
from jaxlab.launch import main
sys.argv = ["jaxlab", *sys.argv[2:]]
sys.exit(main())
"""


def test_ctrl_c_while_a_checkpoint_is_read_is_one_line_and_changes_nothing(tmp_path):
    """Ctrl-C while Orbax reads the checkpoint (eval's one press; a resume's second, the first asking
    for a graceful stop): exit 130 and one line, at once. The KeyboardInterrupt closed Orbax's asyncio
    loop under TensorStore's reads, whose callbacks printed dozens of "RuntimeError: Event loop is
    closed" tracebacks and never-awaited-coroutine warnings; the line said "interrupted; the metrics so
    far are in ..." for a resume, or "interrupted" alone. The checkpoint then resumes."""
    run = tmp_path / "run"
    resume = ["train", "--resume", str(run), "--train.total-timesteps", "256", "--log.dashboard", "none"]
    assert train_run(small_config(2), run).error is None
    before = run_files(run)
    newest = run / "checkpoints" / "2"
    for presses, command, lines in (
            ("1", ["eval", "cartpole", "--checkpoint", str(run), "--episodes", "2"], []),
            ("2", resume, ["SIGINT: finishing this update, then saving a checkpoint; Ctrl-C again to stop at once"])):
        result = subprocess.run([sys.executable, "-c", CTRL_C_DURING_THE_READ, presses, *command], capture_output=True,
                                text=True, timeout=50)  # the read is held open for 60 s: it must not be waited for
        assert result.returncode == 130, result.stderr
        assert result.stderr.splitlines() == lines + [
            f"jaxlab {command[0]}: interrupted while restoring checkpoint {newest}; nothing was changed"]
    assert run_files(run) == before and checkpoint.verify(newest)
    assert jaxlab(*resume).returncode == 0
    assert [r["update"] for r in read_metrics(run)] == [1, 2, 3, 4]


def test_eval_in_a_fresh_process_takes_the_trainers_actions(tmp_path):
    """Deterministic actions (the mode) and sampled ones (same seed) match the trainer's policy."""
    from jaxlab.train.evaluation import play

    def actions_of(trainer, deterministic):
        seen = []
        play(trainer, steps=40, num_envs=3, seed=5, deterministic=deterministic,
             on_step=lambda t, o, a, r, e: seen.append(a.tolist()))
        return seen

    with Trainer(small_config(20, "--train.learning-rate", "0.01")) as trainer:
        train_loop(trainer, updates=20)
        trainer.save_checkpoint(tmp_path / "ck")
        here = {"mode": actions_of(trainer, True), "sampled": actions_of(trainer, False)}
    code = ("import json\nfrom jaxlab.train.evaluation import load_trainer, play\n"
            f"t = load_trainer({str(tmp_path / 'ck')!r})\nout = {{}}\n"
            "for name, det in (('mode', True), ('sampled', False)):\n"
            "    out[name] = []\n"
            "    play(t, steps=40, num_envs=3, seed=5, deterministic=det,\n"
            "         on_step=lambda t_, o, a, r, e: out[name].append(a.tolist()))\n"
            "print(json.dumps(out))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == here
    assert len({a for step in here["mode"] for a in step}) == 2  # the trained mode is not one constant action
    assert here["mode"] != here["sampled"]


def test_eval_command_prints_returns_and_renders(tmp_path):
    run = tmp_path / "run"
    assert train_run(small_config(2), run).checkpoint is not None
    frames = tmp_path / "frames.txt"
    result = jaxlab("eval", "cartpole", "--checkpoint", str(run), "--episodes", "5", "--deterministic",
                    "--save-frames", str(frames))
    assert result.returncode == 0, result.stderr
    assert "5 episodes, deterministic actions" in result.stdout and "return " in result.stdout and " ± " in result.stdout
    lines = frames.read_text().splitlines()
    assert lines[-1].endswith("(episode ended)") and all("|" in line and "pole" in line for line in lines)
    result = jaxlab("eval", "pendulum", "--checkpoint", str(run))
    assert result.returncode == 2 and "is a checkpoint of 'cartpole', not 'pendulum'" in result.stderr
    result = jaxlab("eval", "cartpole", "--checkpoint", str(tmp_path / "nothing"))
    assert result.returncode == 2 and f"--checkpoint {tmp_path / 'nothing'}: no such file or folder" in result.stderr


def test_a_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    held = {}

    def poison_after_update_2(record):
        if record["update"] == 2:
            trainer = held["trainer"]
            params = jax.tree.map(lambda x: x * np.nan, trainer.state.params)
            trainer.state = trainer.state._replace(params=params)

    result = train_run(small_config(6, "--checkpoint.interval", "2"), tmp_path / "run",
                       trainer_hook=lambda trainer, saves: held.update(trainer=trainer), on_log=poison_after_update_2)
    assert result.error.startswith("policy_loss, value_loss, entropy, approx_kl, grad_norm became nan at update 3")
    assert result.checkpoint.name == "2" and [p.name for p in checkpoint.step_dirs(tmp_path / "run/checkpoints")] == ["2"]
    summary = json.loads((tmp_path / "run/summary.json").read_text())
    assert summary["error"] == result.error and summary["updates"] == 3


def test_a_nan_gradient_with_finite_losses_stops_before_its_state_is_saved(tmp_path):
    """Gradients that turn NaN in an update's last minibatch make the params NaN while the update's
    losses (computed before the step) are finite: grad_norm says so, and that update's checkpoint,
    due by the interval, must not be written."""
    held = {}

    def nan_gradient_in_update_2(record):
        if record["update"] == 2:  # what such an update reports and leaves behind
            trainer = held["trainer"]
            trainer.state = trainer.state._replace(params=jax.tree.map(lambda x: x * np.nan, trainer.state.params))
            record["grad_norm"] = float("nan")

    result = train_run(small_config(6, "--checkpoint.interval", "1"), tmp_path / "run",
                       trainer_hook=lambda trainer, saves: held.update(trainer=trainer),
                       on_log=nan_gradient_in_update_2)
    assert result.error.startswith("grad_norm became nan at update 2; stopped without saving this state")
    assert result.checkpoint.name == "1"
    assert [p.name for p in checkpoint.step_dirs(tmp_path / "run/checkpoints")] == ["1"]


def test_resume_targets_latest_run_dir_checkpoints_dir_or_one_checkpoint(tmp_path):
    from jaxlab.run.resume import find_checkpoint

    def fake_run(name, env, steps, mtime):
        run = tmp_path / "runs" / name
        (run / "config.toml").parent.mkdir(parents=True)
        (run / "config.toml").write_text(f'env_name = "{env}"\n')
        for step in steps:
            for item in ("state", "meta"):
                (run / "checkpoints" / str(step) / item).mkdir(parents=True)
            os.utime(run / "checkpoints" / str(step), (mtime, mtime))
        return run

    old = fake_run("old", "cartpole", [5, 10], mtime=1_000)
    new = fake_run("new", "cartpole", [2], mtime=2_000)
    fake_run("other", "memory", [7], mtime=3_000)
    # latest: the run's checkpoints/, whose newest usable checkpoint is taken (a damaged newest one is passed over)
    assert find_checkpoint("latest", "cartpole", tmp_path / "runs") == new / "checkpoints"
    assert find_checkpoint("latest", "memory", tmp_path / "runs").parent.name == "other"
    assert find_checkpoint(str(old), "cartpole") == old / "checkpoints"
    assert find_checkpoint(str(old / "checkpoints"), "cartpole") == old / "checkpoints"
    assert find_checkpoint(str(old / "checkpoints/5"), "cartpole") == old / "checkpoints/5"
    with pytest.raises(checkpoint.CheckpointError, match="--resume latest: no run of pendulum with checkpoints"):
        find_checkpoint("latest", "pendulum", tmp_path / "runs")


POLICY_FILE = '''
import flax.linen as nn


class Small(nn.Module):
    action: object

    @nn.compact
    def __call__(self, carry, obs):
        x = nn.Dense(WIDTH)(obs.reshape(obs.shape[0], -1))
        return carry, nn.Dense(self.action.head_size)(x), nn.Dense(1)(x)[:, 0]
'''


def test_a_checkpoint_whose_policy_file_changed_is_one_line_naming_the_parameter(tmp_path):
    policy, run = tmp_path / "small.py", tmp_path / "run"
    policy.write_text(POLICY_FILE.replace("WIDTH", "16"))
    flags = [*SMALL, "--policy.module", f"{policy}:Small", "--log.dashboard", "none"]
    assert jaxlab("train", "cartpole", *flags, "--train.total-timesteps", "128", "--run-dir", str(run)).returncode == 0
    policy.write_text(POLICY_FILE.replace("WIDTH", "32"))  # edited after the run
    result = jaxlab("train", "cartpole", "--resume", str(run), "--train.total-timesteps", "256")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (f"checkpoint {run}/checkpoints/2 does not fit this policy: ['train']['params']['module']['params']"
            "['Dense_0']['bias'] has shape (16,) there and (32,) here, so the policy's code changed") in result.stderr


def test_best_metric_must_be_a_metric_of_the_run(tmp_path):
    """A mistyped checkpoint.best_metric kept no checkpoint as the best, so keep-1 pruning deleted the best
    one: refused before training. The names it checks against are the records' keys."""
    with pytest.raises(ConfigError, match=r"checkpoint.best_metric='episode_retrn' is not a metric of this run, so "
                                          r"no checkpoint would be kept as the best; did you mean 'episode_return'\?"):
        train_run(small_config(2, "--checkpoint.best-metric", "episode_retrn"), tmp_path / "typo")
    assert not (tmp_path / "typo" / "metrics.jsonl").exists()
    names = []
    result = train_run(small_config(2, "--checkpoint.best-metric", "value_loss"), tmp_path / "run",
                       on_start=lambda trainer: names.extend(trainer.record_names))
    first_only = {"compile_cache", "launch_to_first_update_s"}
    assert set(result.records[0]) - first_only == set(names) == set(result.records[1])


def test_bad_input_refused_once_the_run_dir_exists_leaves_no_run_dir(tmp_path):
    """A config refused after jaxlab train made the run dir (the best metric is checked against the built
    trainer's records) left RUN_DIR with .lock, run.log and checkpoints/: a stray runs/ENV-TIMESTAMP per
    attempt with the default --run-dir. A run dir that existed before, or one with anything else in it,
    is kept."""
    fresh = tmp_path / "fresh"
    refused = jaxlab("train", "cartpole", *SMALL, "--train.total-timesteps", "256", "--checkpoint.best-metric",
                     "episode_retrn", "--run-dir", str(fresh))
    assert refused.returncode == 2 and "is not a metric of this run" in refused.stderr, refused.stderr
    assert not fresh.exists(), sorted(p.name for p in fresh.iterdir())
    kept = tmp_path / "kept"
    (kept / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match="is not a metric of this run"):
        train_run(small_config(2, "--checkpoint.best-metric", "episode_retrn"), kept)
    assert sorted(p.name for p in kept.iterdir()) == [".lock", "checkpoints", "run.log"]
    (kept / "run.log").write_text("mine")  # a run.log with lines in it is not the attempt's: kept
    with pytest.raises(ConfigError, match="is not a metric of this run"):
        train_run(small_config(2, "--checkpoint.best-metric", "episode_retrn"), kept, remove_if_not_started=True)
    assert sorted(p.name for p in kept.iterdir()) == ["run.log"]  # the rest was the attempt's (all empty)
    result = train_run(small_config(2), tmp_path / "ran", remove_if_not_started=True)
    assert result.checkpoint is not None and (tmp_path / "ran" / "metrics.jsonl").is_file()


def test_train_run_refuses_a_run_dir_holding_other_things_than_a_run_and_writes_nothing(tmp_path):
    """As `jaxlab train --run-dir` does: a user's notes.txt (or a project, other runs) in run_dir would be mixed
    with the run's metrics.jsonl and checkpoints/; train_run refused nothing there and trained into it."""
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"run_dir .*: a folder that holds other things than a run \(notes.txt\)"
                                          r".*give a new \(or empty\) folder, e\.g\. run_dir "):
        train_run(small_config(2), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_checkpoints_folder_holding_a_users_step_named_files_is_refused_and_they_are_kept(tmp_path, capsys):
    """Orbax takes every entry of checkpoints/ named like a step for one of its checkpoints: a user's file
    RUN/checkpoints/10 was deleted by a save of update 10 (and a folder 11 would be pruned), without a word.
    Refused now before training, one line naming them and the fix, exit 2, nothing deleted; the same for a
    resume, whose own checkpoints (an empty folder too: nothing lost) go on as before."""
    from jaxlab import cli

    def train(run_dir, *flags):
        return cli.main(["train", "cartpole", *SMALL, "--train.total-timesteps", "768", "--run-dir", str(run_dir),
                         "--checkpoint.interval", "5", "--log.dashboard", "none", *flags])

    checkpoints = tmp_path / "run" / "checkpoints"
    (checkpoints / "11").mkdir(parents=True)
    (checkpoints / "10").write_text("mine")
    (checkpoints / "11" / "notes.txt").write_text("mine too")
    capsys.readouterr()
    assert train(tmp_path / "run") == 2
    line = capsys.readouterr().err.strip()
    assert line == (f"jaxlab train: error: {checkpoints} holds 10, 11, named like checkpoints but none (a file, a "
                    f"link or a folder of other things), which the run's saves would delete or overwrite; move them "
                    f"out of {checkpoints}, or give another --run-dir")
    assert sorted(p.name for p in checkpoints.iterdir()) == ["10", "11"]
    assert (checkpoints / "10").read_text() == "mine" and (checkpoints / "11" / "notes.txt").read_text() == "mine too"
    for stray in ("10", "11/notes.txt", "11"):
        (checkpoints / stray).unlink() if stray != "11" else (checkpoints / stray).rmdir()
    assert train(tmp_path / "run", "--train.total-timesteps", "384") == 0  # saves 5 and 6
    (checkpoints / "1").mkdir()  # empty: Orbax's removal of it loses nothing
    (checkpoints / "2").symlink_to(tmp_path)  # a link to the user's folder
    with pytest.raises(ConfigError, match=rf"{checkpoints} holds 2, named like checkpoints but none"):
        train_run(small_config(12), tmp_path / "run", resume=tmp_path / "run" / "checkpoints")
    assert (checkpoints / "2").is_symlink() and (checkpoints / "1").is_dir()
    (checkpoints / "2").unlink()
    assert train_run(small_config(8), tmp_path / "run", resume=tmp_path / "run" / "checkpoints").error is None


def test_train_run_refuses_a_checkpoints_file_where_its_folder_goes(tmp_path):
    """A file RUN/checkpoints: train_run trained the whole run, then failed its first save ('Not a
    directory'). Refused now before anything is written, and the file kept."""
    (tmp_path / "checkpoints").write_text("mine")
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'checkpoints'} is a file, where the run's checkpoints/ "
                                          r"folder goes; move it away, or give another run_dir$"):
        train_run(small_config(2), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"]
    assert (tmp_path / "checkpoints").read_text() == "mine"


def test_a_run_refused_for_a_run_dir_in_use_leaves_the_other_runs_lock_and_files(tmp_path):
    """Two `jaxlab train` started in the same second get the same default runs/ENV-TIMESTAMP: both find it
    missing (remove_if_not_started), one takes the lock and compiles, the other is refused (RunDirInUse).
    The refused one removed the other's .lock, its empty run.log and checkpoints/, and the run dir itself,
    under the running one: a third run could then take the lock too."""
    from jaxlab.run.lock import RunDirInUse, RunDirLock

    run = tmp_path / "run"
    with RunDirLock(run):  # the other run, still compiling: its lock, its empty run.log and checkpoints/
        (run / "run.log").touch()
        (run / "checkpoints").mkdir()
        with pytest.raises(RunDirInUse, match="is in use by process"):
            train_run(small_config(2), run, remove_if_not_started=True)
        assert sorted(p.name for p in run.iterdir()) == [".lock", "checkpoints", "run.log"]
        assert f"process {os.getpid()}" in (run / ".lock").read_text()


def test_the_default_best_metric_on_an_env_without_it_is_a_warning():
    """The env contract does not require an episode_return statistic: an env without one trains with no
    best checkpoint and a warning (the default was not the user's choice); a name the user gave that
    the run lacks is refused (above)."""
    from jaxlab.run.loop import check_best_metric

    said = []
    names = ("update", "policy_loss", "episodes", "score", "episode_length")
    assert check_best_metric("episode_return", names, said.append) == ""
    assert said == ["this env logs no episode_return, so no checkpoint is kept as the best; pick a metric with "
                    "--checkpoint.best-metric NAME (update, policy_loss, episodes, score, episode_length)"]
    assert check_best_metric("score", names, said.append) == "score" and check_best_metric("", names, None) == ""
    with pytest.raises(ConfigError, match=r"best_metric='scor' is not a metric of this run.*did you mean 'score'"):
        check_best_metric("scor", names, said.append)


def test_a_best_metric_that_never_changes_is_a_warning_at_the_end_of_the_run(tmp_path):
    """In cards self play (zero-sum between two seats of one policy) episode_return is 0 in every update, so
    every checkpoint tied on the default best_metric and the one kept as the best was arbitrary, silently. A
    run whose best metric changes (cartpole's return) says nothing of it."""
    config, _ = load_config("cards", flags=["--env.opponent", "self", *SMALL, "--train.total-timesteps", "1024"])
    said = []
    result = train_run(config, tmp_path / "self_play", warn=said.append)
    ranked = [r["episode_return"] for r in result.records if r.get("episode_return") is not None]
    assert len(ranked) >= 2 and set(ranked) == {0.0}
    assert [line for line in said if "best_metric" in line] == [
        f"checkpoint.best_metric episode_return was 0 in all {len(ranked)} updates that logged it, so every "
        "checkpoint tied and the one kept as the best is arbitrary (a zero-sum self-play game's episode_return is "
        "always 0); pick a metric that ranks the policy with --checkpoint.best-metric NAME, or \"\" for none"]
    said.clear()
    result = train_run(small_config(6), tmp_path / "cartpole", warn=said.append)
    assert len({r["episode_return"] for r in result.records if r.get("episode_return") is not None}) > 1
    assert not [line for line in said if "best_metric" in line]


def test_a_best_metric_that_never_changes_from_a_value_other_than_0_is_not_put_down_to_self_play():
    """A new env whose episodes all ended alike in a short run (every one truncated at the same cost: -0.64)
    got the self-play warning '(a zero-sum self-play game's episode_return is always 0)', which says nothing
    of that run. A value other than 0 names what it is likely to mean instead; 0 keeps the self-play words."""
    from jaxlab.run.loop import SaveCheckpoints

    def warning_of(values):
        saving = SaveCheckpoints(None, None, "episode_return", None)
        for value in values:
            saving._rank(value)
        return saving.unchanging_best_metric()

    line = warning_of([-0.64, -0.64, -0.64, -0.64])
    assert line == ("checkpoint.best_metric episode_return was -0.64 in all 4 updates that logged it, so every "
                    "checkpoint tied and the one kept as the best is arbitrary (the policy's episode_return never "
                    "changed: it may not have learned anything yet); pick a metric that ranks the policy with "
                    "--checkpoint.best-metric NAME, or \"\" for none"), line
    assert "zero-sum self-play" in warning_of([0.0, 0.0])
    assert warning_of([-0.64, -0.5]) is None and warning_of([-0.64]) is None


def test_a_resumed_run_whose_best_metric_sits_at_the_best_it_rose_to_is_not_warned_of(tmp_path):
    """A run resumed once solved (its episode_return at its maximum in every update since the resume) got
    the warning that its best metric never changed. The records before the resume (metrics.jsonl) show the
    metric rose to that value: no warning. A resumed self-play run, 0 before and after, keeps its warning."""
    def self_play(steps):
        config, _ = load_config("cards", flags=["--env.opponent", "self", *SMALL, "--train.total-timesteps",
                                                str(steps)])
        return config

    run = tmp_path / "run"
    train_run(self_play(1024), run, warn=lambda line: None)
    history = (run / "metrics.jsonl").read_text()
    said = []
    train_run(self_play(2048), run, resume=run / "checkpoints", warn=said.append)
    assert [line for line in said if "best_metric episode_return was 0 in all" in line]  # the real case

    records = [json.loads(line) for line in history.splitlines()]
    first = next(r for r in records if r.get("episode_return") is not None)
    assert first["episode_return"] == 0.0
    first["episode_return"] = -1.0  # as if it had learned up to 0, its maximum, before the resume
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    said.clear()
    result = train_run(self_play(2048), run, resume=run / "checkpoints" / str(records[-1]["update"]),
                       warn=said.append)
    assert {r["episode_return"] for r in result.records if r.get("episode_return") is not None} == {0.0}
    assert not [line for line in said if "best_metric" in line], said

def save_all(directory, metrics, best_metric="episode_return", first=1, keep=1):
    """Saves a tiny checkpoint per value of ``metrics`` (updates first, first + 1, ...) through the run's
    RunCheckpoints, then closes; returns the updates left on disk."""
    saves = checkpoint.RunCheckpoints(directory, 0, 0, keep, best_metric)
    try:
        for update, metric in enumerate(metrics, first):
            saves.save(update, {"x": np.full(3, update, np.float32)}, {"format": checkpoint.FORMAT_VERSION}, metric)
    finally:
        saves.close()
    return sorted(int(p.name) for p in checkpoint.step_dirs(directory))


def test_a_nan_metric_never_gets_the_best_checkpoint_pruned(tmp_path):
    """Orbax ranks the checkpoints with sorted(): a NaN among the values scrambled the order, so that
    keep-1 pruning deleted the best checkpoint (5.0) and kept a worse one."""
    nan = float("nan")
    assert save_all(tmp_path / "a", [5.0, nan, 3.0]) == [1, 3]
    assert save_all(tmp_path / "b", [5.0, 3.0, nan]) == [1, 3]
    assert save_all(tmp_path / "c", [nan, 2.0, 1.0]) == [2, 3]


def test_a_resume_that_changes_best_metric_saves_and_keeps_the_best_by_the_new_one(tmp_path):
    """The checkpoints already in the run were saved with another best_metric: the first save after the
    resume failed (KeyError in the ranking), stopping the run; they now rank below any value of the
    new metric."""
    assert save_all(tmp_path, [1.0, 2.0], "episode_return", keep=2) == [1, 2]
    assert save_all(tmp_path, [7.0, 3.0, None], "value_loss", first=3) == [3, 5]


def test_a_damaged_metrics_file_in_an_older_checkpoint_is_one_line_naming_it(tmp_path):
    """Orbax reads every checkpoint's metrics when a run's checkpoints are opened (a resume, too): one
    that is not JSON stopped the run with a JSONDecodeError traceback, naming no checkpoint."""
    assert save_all(tmp_path, [1.0, 2.0], keep=2) == [1, 2]
    (tmp_path / "1" / "metrics" / "metrics").write_text('{"episode_ret')
    with pytest.raises(checkpoint.CheckpointError, match=rf"checkpoint {tmp_path / '1'} is damaged \(its "
                                                         rf"metrics/metrics is not JSON\); move it out of"):
        checkpoint.RunCheckpoints(tmp_path, 0, 0, 2, "episode_return")


def test_a_path_that_names_no_checkpoint_says_why_and_which_to_give(tmp_path, monkeypatch):
    """--checkpoint (or --resume) given a folder inside a checkpoint (its state/), a folder of runs, or a path that
    does not exist said the same "no checkpoint there (expected a run dir ...)" for each; each names what it is
    now, and the checkpoint or run to give where there is one."""
    from jaxlab.checkpoint import CheckpointError
    from jaxlab.run.resume import find_checkpoint

    for part in ("state/d", "meta"):
        (tmp_path / "runs" / "cp" / "checkpoints" / "4" / part).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    checkpoint_4 = Path("runs/cp/checkpoints/4")
    cases = {"runs/cp/checkpoints/4/state/d": f"a part of the checkpoint {checkpoint_4}, not a checkpoint: give the "
                                              f"checkpoint, --checkpoint {checkpoint_4}",
             "runs": f"a folder of runs (cp), not a run: give one of them, e.g. --checkpoint {Path('runs/cp')}",
             "runs/cq": "no such file or folder (expected a run dir"}
    for given, words in cases.items():
        with pytest.raises(CheckpointError) as err:
            find_checkpoint(given, "cartpole", flag="--checkpoint")
        assert str(err.value).startswith(f"--checkpoint {given}: {words}"), str(err.value)
    assert find_checkpoint("runs/cp", "cartpole") == Path("runs/cp/checkpoints")


def ranked_values(checkpoints: Path) -> dict[int, float | None]:
    """{update: the best-metric value each checkpoint under ``checkpoints`` was ranked by (its metrics/metrics)}."""
    def value(step):
        metrics = step / "metrics" / "metrics"
        return json.loads(metrics.read_text()).get("episode_return") if metrics.is_file() else None

    return {int(step.name): value(step) for step in checkpoint.step_dirs(checkpoints)}


def test_a_resumed_run_ranks_its_checkpoints_as_the_uninterrupted_run_does(tmp_path):
    """A save after updates that ended no episode is ranked by the last value logged before it. A resume
    started with no value: its saves before the first episode ended were ranked below every value (no
    metrics/metrics), where the uninterrupted run's held the value, so keep-N pruning kept another best."""
    config, _ = load_config("pendulum", flags=[*SMALL, "--env.max-steps", "16", "--train.total-timesteps", str(64 * 6),
                                               "--checkpoint.interval", "1", "--checkpoint.keep", "10"])
    straight = train_run(config, tmp_path / "straight")
    assert [r["episode_return"] is None for r in straight.records] == [True, False] * 3  # episodes end every 2nd
    resumed = train_run(config, tmp_path / "resumed", resume=tmp_path / "straight/checkpoints/2")
    assert [r["update"] for r in resumed.records] == [3, 4, 5, 6]
    expected = {update: value for update, value in ranked_values(tmp_path / "straight/checkpoints").items()
                if update > 2}
    assert ranked_values(tmp_path / "resumed/checkpoints") == expected
    assert None not in expected.values()


def test_a_signal_during_the_last_update_stops_nothing_the_run_is_done(tmp_path):
    """A SIGTERM that came during a run's last update (or its final save) finished that update and saved, as
    the run's end does, yet the run was recorded as stopped: `stopped by SIGTERM ...; continue with --resume`
    (which had nothing to train), `jaxlab runs` said `stopped (SIGTERM)` instead of done, and a sweep took
    the finished trial for one to continue."""
    config = small_config(4)

    def terminate_at_the_last_update(record):
        if record["update"] == 4:
            os.kill(os.getpid(), signal.SIGTERM)

    result = train_run(config, tmp_path / "run", on_log=terminate_at_the_last_update)
    assert [r["update"] for r in result.records] == [1, 2, 3, 4] and result.checkpoint.name == "4"
    assert result.stopped is None and result.error is None
    assert json.loads((tmp_path / "run/summary.json").read_text())["stopped"] is None


def test_a_save_cut_short_is_named_when_a_resume_passes_over_it(tmp_path):
    """A run killed (kill -9) while Orbax wrote checkpoint 6 left checkpoints/6.orbax-checkpoint-tmp; the resume
    took checkpoint 4 without a word of it, and a run killed during its first save was said to have ended
    before it."""
    from jaxlab.run.resume import find_checkpoint

    run = tmp_path / "run"
    train_run(small_config(4, "--checkpoint.interval", "2"), run)
    cut = run / "checkpoints/6.orbax-checkpoint-tmp"
    (cut / "state").mkdir(parents=True)  # what a save killed before its rename leaves
    said = []
    resumed = train_run(small_config(6, "--checkpoint.interval", "2"), run, resume=run / "checkpoints",
                        warn=said.append)
    assert resumed.resumed_from.name == "4" and [r["update"] for r in resumed.records] == [5, 6]
    assert f"passed over {cut}: a save cut short (its process ended while writing it), which is removed" in said
    assert not cut.exists()
    first = tmp_path / "killed_in_its_first_save"
    (first / "checkpoints/5.orbax-checkpoint-tmp").mkdir(parents=True)
    with pytest.raises(checkpoint.CheckpointError, match=r"no checkpoint there, and no process is running it \(it "
                                                         r"ended while writing its first save, left unfinished as "
                                                         r"5\.orbax-checkpoint-tmp: a run saves one"):
        find_checkpoint(str(first), "cartpole")


def test_the_line_of_a_run_stopped_by_an_error_names_its_last_checkpoint_once(tmp_path):
    """`jaxlab train` added '; checkpoint X' (or '; no checkpoint') after the error, which a failed save's
    error had named already: 'cannot save checkpoint R/checkpoints/5 (...); the last good checkpoint is none;
    no checkpoint'."""
    from jaxlab.cli.train import stopped_by_error

    failed = "cannot save checkpoint r/checkpoints/5 (No space left on device); the last good checkpoint is none"
    assert stopped_by_error(failed, None) == failed
    nan = "policy_loss became nan at update 7; stopped without saving this state (lower train.learning_rate?)"
    assert stopped_by_error(nan, tmp_path / "4") == f"{nan}; the last good checkpoint is {tmp_path / '4'}"
    assert stopped_by_error(nan, None) == f"{nan}; no checkpoint was saved"


def test_a_run_file_that_cannot_be_written_at_a_resume_is_one_line_naming_it(tmp_path):
    """A file of the run dir that a resume rewrites could not be written (here a folder in its place; a disk
    gone full or read-only alike): the resume ended with a traceback (IsADirectoryError from pathlib). It is
    one line naming the file, the cause and the last checkpoint, exit 1, with the traceback in run.log."""
    run = tmp_path / "run"
    assert jaxlab("train", "cartpole", *SMALL, "--train.total-timesteps", "256", "--checkpoint.interval", "2",
                  "--run-dir", str(run)).returncode == 0
    (run / "metrics.jsonl.tmp").mkdir()  # where the resume writes the records it keeps
    result = jaxlab("train", "--resume", str(run / "checkpoints/2"))
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"jaxlab train: error: cannot write {run}/metrics.jsonl.tmp (Is a directory): free space or move what is in "
        f"the way, then continue with --resume {run}; the last checkpoint is {run}/checkpoints/4; the traceback is "
        f"in {run}/run.log"), result.stderr
    assert "Traceback" not in result.stderr and "IsADirectoryError" in (run / "run.log").read_text()
    assert len(read_metrics(run)) == 4 and [p.name for p in checkpoint.step_dirs(run / "checkpoints")] == ["4", "2"]


def test_a_checkpoint_pruned_while_it_is_read_is_no_damage(tmp_path):
    """`jaxlab eval --checkpoint RUN` of a run still training (checkpoint.keep 1, a save every update): the run
    pruned the newest checkpoint while eval read it, which said 'checkpoint RUN/checkpoints/10 is unreadable:
    FileNotFoundError ...; falling back to an older checkpoint', then 'no usable checkpoint' (none older was
    left). The directory is listed again and the newer checkpoint saved since is read."""
    from jaxlab.run.resume import newest_usable

    directory = tmp_path / "checkpoints"
    assert save_all(directory, [1.0], keep=1) == [1]
    said, tried = [], []

    def read_while_the_run_saves_2_and_prunes_1(path):
        tried.append(path.name)
        if path.name == "1":
            save_all(directory, [2.0], first=2, keep=1)  # the running run: saves 2, prunes 1
            assert not path.exists()
            return checkpoint.read_meta(path)  # what a read of a removed checkpoint raises
        return path.name

    assert newest_usable(directory, read_while_the_run_saves_2_and_prunes_1, said.append) == (directory / "2", "2")
    assert tried == ["1", "2"] and said == []

    def read_while_the_run_saves_3_and_is_removing_2(path):  # its removal part way: the folder still there
        tried.append(path.name)
        if path.name == "2":
            save_all(directory, [3.0], first=3, keep=1)
            (path / "state").mkdir(parents=True)
            raise checkpoint.CheckpointError(f"load_trainer {path}: not a whole checkpoint (it lacks state/ or meta/)")
        return path.name

    tried.clear()
    assert newest_usable(directory, read_while_the_run_saves_3_and_is_removing_2, said.append) == (directory / "3", "3")
    assert tried == ["2", "3"] and said == []


def test_an_error_of_the_reader_while_the_run_saves_is_raised_not_taken_for_pruning(tmp_path):
    """`jaxlab eval --checkpoint RUN` of a run still saving whose load failed for a reason of its own (a ConfigError:
    its policy.module moved, another env) while a newer checkpoint appeared took the failure for the run's pruning:
    it loaded each newer one again (PRUNED_RETRIES + 1 loads), then said 'the run saving there removed each of the 6
    newest while it was read', hiding the real error. The error is raised at once; the checkpoint is still there."""
    from jaxlab.run.resume import newest_usable

    directory = tmp_path / "checkpoints"
    assert save_all(directory, [1.0], keep=3) == [1]
    tried = []

    def refuse_while_the_run_saves_the_next(path):
        tried.append(path.name)
        save_all(directory, [1.0], first=int(path.name) + 1, keep=3)  # the running run saves the next, keeps this
        raise ConfigError(f"policy.module='gone.py:Net': no file gone.py (reading {path.name})")

    with pytest.raises(ConfigError, match=r"^policy.module='gone.py:Net': no file gone.py \(reading 1\)$"):
        newest_usable(directory, refuse_while_the_run_saves_the_next, pytest.fail)
    assert tried == ["1"]


def test_checkpoints_pruned_faster_than_they_are_read_is_an_error_that_says_so(tmp_path):
    """A run saving every update with checkpoint.keep 1 removes each checkpoint before a read of it ends: the
    reader said each was 'unreadable' (damage), then 'no usable checkpoint'. It now says why and what to do."""
    from jaxlab.run.resume import PRUNED_RETRIES, newest_usable

    directory = tmp_path / "checkpoints"
    assert save_all(directory, [1.0], keep=1) == [1]
    said = []

    def read_while_the_run_saves_the_next_and_prunes_this(path):
        save_all(directory, [1.0], first=int(path.name) + 1, keep=1)
        return checkpoint.read_meta(path)

    with pytest.raises(checkpoint.CheckpointError, match=rf"no usable checkpoint in {directory}: the run saving there "
                                                         rf"removed each of the {PRUNED_RETRIES + 1} newest while it "
                                                         r"was read \(its checkpoint.keep prunes the older ones\); "
                                                         r"copy one out of it first \(cp -r\), or read it once"):
        newest_usable(directory, read_while_the_run_saves_the_next_and_prunes_this, said.append)
    assert said == []


def test_eval_of_a_damaged_newest_checkpoint_is_one_line_not_dozens_of_tracebacks(tmp_path):
    """`jaxlab eval --checkpoint RUN` whose newest checkpoint was truncated (no files.json: killed before it was
    written) fell back to the older one, but the failed Orbax read's late callbacks printed dozens of
    'RuntimeError: Event loop is closed' tracebacks around its one line (train sends them to run.log)."""
    run = tmp_path / "run"
    result = jaxlab("train", "cartpole", *SMALL, "--train.total-timesteps", "256", "--checkpoint.interval", "2",
                    "--run-dir", str(run))
    assert result.returncode == 0, result.stderr
    steps = run / "checkpoints"
    for data in array_files(steps / "4"):
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    (steps / "4" / checkpoint.MANIFEST).unlink()
    result = jaxlab("eval", "--checkpoint", str(run), "--episodes", "2")
    assert result.returncode == 0, result.stderr
    assert f"checkpoint {steps / '4'} is unreadable: ValueError: OUT_OF_RANGE" in result.stderr
    assert f"cartpole from {steps / '2'}" in result.stdout
    assert "Event loop is closed" not in result.stderr and "Traceback" not in result.stderr, result.stderr


def damaged_newest_run(tmp_path) -> Path:
    """A run with checkpoints 2 and 4, the newest truncated without files.json (killed before it was written)."""
    run = tmp_path / "run"
    assert train_run(small_config(4, "--checkpoint.interval", "2"), run).error is None
    for data in array_files(run / "checkpoints" / "4"):
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    (run / "checkpoints" / "4" / checkpoint.MANIFEST).unlink()
    return run


def late_callbacks_reported(reported: list) -> list:
    """What of a failed read's late 'Event loop is closed' callback and of another unraisable exception reaches
    ``reported`` (the hook that would print them, which the test put in place) now."""
    from types import SimpleNamespace

    reported.clear()  # any that came during the read
    late, other = (SimpleNamespace(exc_type=type(err), exc_value=err, exc_traceback=None, err_msg=None, object=None)
                   for err in (RuntimeError("Event loop is closed"), ValueError("a bug of ours")))
    sys.unraisablehook(late)
    sys.unraisablehook(other)
    return [str(unraisable.exc_value) for unraisable in reported]


def test_load_trainer_of_a_damaged_newest_checkpoint_is_one_warning_not_dozens_of_tracebacks(tmp_path, monkeypatch):
    """load_trainer(RUN) from Python fell back to the older checkpoint with its one warning, but the failed
    Orbax read's late TensorStore callbacks printed up to dozens of 'RuntimeError: Event loop is closed'
    tracebacks (jaxlab eval drops them: test_eval_of_a_damaged_newest_checkpoint_is_one_line_not_dozens_of_tracebacks).
    They come at no set time (none, some runs), so the test sends one itself once load_trainer has returned."""
    from jaxlab.train.evaluation import load_trainer

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)  # what would print them; restored after the test
    run = damaged_newest_run(tmp_path)
    said = []
    with load_trainer(run, warn=said.append) as trainer:
        assert trainer.update_index == 2
    assert len(said) == 1 and said[0].startswith(f"checkpoint {run / 'checkpoints' / '4'} is unreadable: ValueError")
    assert late_callbacks_reported(reported) == ["a bug of ours"]


def test_a_resume_past_a_damaged_checkpoint_drops_its_late_callbacks_noise_once_run_log_is_closed(
        tmp_path, capsys, monkeypatch):
    """`jaxlab train --resume RUN` past a damaged newest checkpoint: the failed read's late 'Event loop is closed'
    callbacks go to run.log while the run holds it, but those that come after (its end, its error line) were
    printed as tracebacks on the terminal. The resume now drops them from the start, as jaxlab eval does."""
    from jaxlab import cli

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)  # what would print them; restored after the test
    run = damaged_newest_run(tmp_path)
    assert cli.main(["train", "cartpole", "--resume", str(run), "--train.total-timesteps", str(64 * 5),
                     "--log.dashboard", "none"]) == 0
    assert f"checkpoint {run / 'checkpoints' / '4'} is unreadable" in capsys.readouterr().err
    assert late_callbacks_reported(reported) == ["a bug of ours"]

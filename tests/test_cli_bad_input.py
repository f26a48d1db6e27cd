"""Bad input to eval, plot, runs, build-env, new-env, sweep and config files: one line naming the value
and a fix (exit 2), checked before the work, and nothing saved damaged."""

import json
import os

import numpy as np
import pytest

from jaxlab import cli
from jaxlab.observe.records import read_metrics, run_rows
from jaxlab.run.lock import RunDirLock
from jaxlab.run.resume import keep_metrics_until


@pytest.mark.parametrize("flags, message", [
    (["--num-envs", "0"], "--num-envs 0 must be at least 1"),
    (["--seed", "-1"], "--seed -1 must be in [0, 2**63)"),
    (["--save-frames", "FOLDER"], "--save-frames FOLDER is a folder; give a file name"),
    (["--save-frames", "FOLDER/missing/f.txt"], "--save-frames FOLDER/missing/f.txt: its folder FOLDER/missing does "
                                                "not exist"),
    (["--gif", "FOLDER/a.png"], "--gif FOLDER/a.png: the file is written as .gif, so its name must end in .gif"),
    (["--gif", ""], "--gif '': an empty name; give a file name, e.g. --gif out.gif"),  # was a ValueError traceback
    (["--save-frames", ""], "--save-frames '': an empty name; give a file name, e.g. --save-frames out.txt"),
    (["--gif", "FOLDER"], "--gif FOLDER is a folder; give a file name, e.g. --gif FOLDER/out.gif"),
    # said "its folder FOLDER/file.txt does not exist" of a file
    (["--gif", "FOLDER/file.txt/sub/a.gif"], "--gif FOLDER/file.txt/sub/a.gif: FOLDER/file.txt is a file, not a "
                                             "folder; give a path in a folder"),
])
def test_eval_refuses_what_it_could_not_finish_before_loading_anything(tmp_path, capsys, flags, message):
    (tmp_path / "file.txt").write_text("")
    flags = [f.replace("FOLDER", str(tmp_path)) for f in flags]
    # no checkpoint exists there: the checks come first
    assert cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "none"), *flags]) == 2
    assert message.replace("FOLDER", str(tmp_path)) in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--resume", ""], "--resume '': an empty value (a shell variable that is not set?), which would start a new run "
                       "instead of continuing one; give a run dir, a checkpoint or latest"),
    (["--resume", " "], "--resume ' ': an empty value"),
    (["--run-dir", ""], "--run-dir '': an empty value (a shell variable that is not set?); give a folder, or leave "
                        "--run-dir out for runs/ENV-TIMESTAMP"),
])
def test_an_empty_resume_or_run_dir_is_refused_not_taken_as_left_out(tmp_path, capsys, monkeypatch, flags, message):
    """--resume "$RUN" with RUN unset trained a new run of the whole train.total_timesteps in runs/ENV-TIMESTAMP
    (an empty --resume read as none); an empty --run-dir wrote there too."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "cartpole", "--train.total-timesteps", "256", "--vec.num-envs", "8",
                     "--log.dashboard", "none", *flags]) == 2
    assert f"jaxlab train: error: {message}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_config_flags_may_come_before_env(capsys):
    """`jaxlab config --train.seed 3 memory` (CleanRL's habit: options anywhere): argparse took 3 for ENV
    ("unknown env '3'")."""
    assert cli.main(["config", "--train.seed", "3", "memory", "--env.delay=2", "--policy.lstm", "false"]) == 0
    out = capsys.readouterr().out
    assert "\nseed = 3 " in out and "\ndelay = 2 " in out and "\nlstm = false " in out
    assert cli.split_config_flags(["train", "--policy.lstm", "--train.seed", "1", "cartpole", "--run-dir", "a.b"]) == \
        (["train", "cartpole", "--run-dir", "a.b"], ["--policy.lstm", "--train.seed", "1"])


def test_a_flags_value_is_not_taken_for_a_missing_env(capsys):
    """`jaxlab config --train.total-timesteps 8192` (ENV left out): argparse took 8192 for ENV."""
    assert cli.main(["config", "--train.total-timesteps", "8192"]) == 2
    assert capsys.readouterr().err == ("jaxlab config: error: ENV is missing: name an env, e.g. `jaxlab config "
                                       "cartpole` (`jaxlab envs` lists them)\n")
    assert cli.main(["train", "--resume", "latest", "--train.total-timesteps", "8192"]) == 2
    assert "--resume latest needs ENV" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    # a space after '=': the value was left over as an argument of its own ("unexpected argument '1e-3'")
    (["cartpole", "--train.learning-rate=", "1e-3"], "flag --train.learning-rate= has a space after '=', which split "
     "it from its value '1e-3'; write --train.learning-rate=1e-3 or --train.learning-rate 1e-3"),
    (["--train.learning-rate=", "1e-3", "cartpole"], "flag --train.learning-rate= has a space after '=', which split "
     "it from its value '1e-3'; write --train.learning-rate=1e-3 or --train.learning-rate 1e-3"),
    (["cartpole", "--train.learning-rate="], "flag --train.learning-rate= has an empty value; give it one, e.g. "
     "--train.learning-rate=0.003 (the default)"),
    (["cartpole", "--policy.lstm", ""], "flag --policy.lstm has an empty value; write --policy.lstm=true or "
     "--policy.lstm=false"),
    (["cartpole", "--env.max-steps="], "flag --env.max-steps= has an empty value; give it a number, e.g. "
     "--env.max-steps=N"),
])
def test_a_flag_split_from_its_value_or_left_empty_is_named(capsys, argv, message):
    assert cli.main(["config", *argv]) == 2
    assert capsys.readouterr().err == f"jaxlab config: error: {message}\n"


def test_empty_values_of_strings_and_lists_still_mean_none(capsys):
    assert cli.main(["config", "cartpole", "--policy.mlp-layers=", "--env.library="]) == 0
    assert "\nmlp_layers = [] " in capsys.readouterr().out


def write_run(folder, lines, notes=None, summary=None):
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text('env_name = "cartpole"\n')
    (folder / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    if notes is not None:
        (folder / "notes.md").write_bytes(notes)
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))


def test_damaged_records_are_read_around_not_a_traceback(tmp_path, capsys):
    good = [json.dumps({"update": u, "global_step": 64 * u, "wall_time": u, "sps": 64.0, "episodes": 1,
                        "episode_return": 10.0 * u}) for u in (1, 2)]
    write_run(tmp_path / "killed", [*good, '{"update": 3, "global_st'])  # killed while writing its last line
    write_run(tmp_path / "edited", [good[0], "garbage not json", good[1]], notes=b"", summary={"final": 5})
    write_run(tmp_path / "latin", good, notes=b"caf\xe9 au lait\n")
    assert [r["update"] for r in read_metrics(tmp_path / "killed")] == [1, 2]
    assert "killed/metrics.jsonl: line 3 is not a JSON record (a run killed" in capsys.readouterr().err
    write_run(tmp_path / "torn", [good[0], *["{"] * 7, good[1]])
    assert [r["update"] for r in read_metrics(tmp_path / "torn")] == [1, 2]
    assert "torn/metrics.jsonl: lines 2, 3, 4, 5, 6 and 2 more are not JSON records" in capsys.readouterr().err
    rows = {r["path"].rsplit("/", 1)[1]: r for r in run_rows(tmp_path)}
    assert rows["killed"]["final_return"] == 20.0 and rows["killed"]["status"] == "running or killed"
    assert rows["edited"]["notes"] == "" and rows["edited"]["final_return"] is None
    assert rows["latin"]["notes"].startswith("caf")
    (tmp_path / "latin" / "summary.json").write_text('{"status": "do')  # cut short while written
    assert {r["path"].rsplit("/", 1)[1]: r for r in run_rows(tmp_path)}["latin"]["status"] == "summary.json unreadable"
    assert cli.main(["plot", str(tmp_path / "killed"), "-o", str(tmp_path / "k.png")]) == 0
    keep_metrics_until(tmp_path / "killed" / "metrics.jsonl", 1)  # a resume from update 1 drops the rest
    assert (tmp_path / "killed" / "metrics.jsonl").read_text() == good[0] + "\n"
    assert not list((tmp_path / "killed").glob("*.tmp"))  # written aside, then renamed over


def test_runs_lists_a_folder_holding_another_programs_records_without_a_traceback(tmp_path, capsys):
    """`jaxlab runs` over a folder that also holds another program's run (its own metrics.jsonl, a
    summary.json with other types) stopped with a KeyError or ValueError traceback and listed nothing;
    that folder is now a row with what could be read, and the jaxlab runs beside it are listed."""
    good = json.dumps({"update": 1, "global_step": 64, "wall_time": 2.0, "sps": 32.0, "episodes": 1,
                       "episode_return": 10.0})
    write_run(tmp_path / "ours", [good])
    other = tmp_path / "other"
    other.mkdir()
    (other / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n')
    write_run(tmp_path / "odd", [good], summary={"global_step": "1k", "sps": "fast", "status": 3,
                                                 "final": {"episode_return": "high"}, "best": {"value": [1]}})
    assert cli.main(["runs", str(tmp_path)]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["ours"][1:5] == ["cartpole", "64", "32", "10.00"]
    assert rows["other"][1:6] == ["?", "0", "0", "-", "-"]  # nothing of it is a jaxlab record
    assert rows["odd"][1:7] == ["cartpole", "0", "0", "-", "-", "3"]  # each field of the wrong type as missing


def test_the_same_update_set_aside_twice_in_one_second_keeps_both(tmp_path):
    """Two quick resumes back to update 1 both set aside a checkpoint 2: the second rename found the
    first's folder (named to the second) and raised OSError."""
    from jaxlab.run.resume import set_aside_after

    checkpoints = tmp_path / "checkpoints"
    moved = []
    for content in ("first", "second", "third"):
        (checkpoints / "2").mkdir(parents=True)
        (checkpoints / "2" / "what").write_text(content)
        moved += set_aside_after(checkpoints, 1)
    assert len(set(moved)) == 3 and [(p / "what").read_text() for p in moved] == ["first", "second", "third"]
    assert all(p.parent == tmp_path / "checkpoints-replaced" and p.name.startswith("2-") for p in moved)


@pytest.mark.parametrize("output, message", [
    ("a.pdf", "--output a.pdf: the file is written as .png, so its name must end in .png, e.g. --output a.png"),
    ("FOLDER/missing/a.png", "its folder FOLDER/missing does not exist"),
    ("", "--output '': an empty name; give a file name, e.g. --output out.png"),  # was a ValueError traceback
    ("/", "--output / is a folder; give a file name, e.g. --output /out.png"),  # so was this
    ("FOLDER", "--output FOLDER is a folder; give a file name, e.g. --output FOLDER/out.png"),
])
def test_plot_checks_its_output_before_drawing(tmp_path, capsys, output, message):
    output = output.replace("FOLDER", str(tmp_path))
    assert cli.main(["plot", str(tmp_path), "-o", output]) == 2
    assert message.replace("FOLDER", str(tmp_path)) in capsys.readouterr().err


def test_build_env_never_overwrites_its_header_or_a_file_that_is_not_a_library(tmp_path, capsys):
    assert cli.main(["new-env", "walker", str(tmp_path)]) == 0
    header = tmp_path / "walker.h"
    source = header.read_bytes()
    assert cli.main(["build-env", str(header), "-o", str(header)]) == 2
    assert "would overwrite its own header; give another name, e.g. -o libwalker.so" in capsys.readouterr().err
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert cli.main(["build-env", str(header), "-o", str(notes)]) == 2
    assert "exists and is not a library (it would be overwritten)" in capsys.readouterr().err
    assert header.read_bytes() == source and notes.read_text() == "mine"
    # a folder was handed to the compiler ("cannot open output file ... Is a directory", as a compile error)
    assert cli.main(["build-env", str(header), "-o", str(tmp_path)]) == 2
    assert f"{tmp_path} is a folder; give the library a file name, e.g. -o {tmp_path / 'libwalker.so'}" \
        in capsys.readouterr().err
    assert cli.main(["build-env", str(header), "-o", str(notes / "libwalker.so")]) == 2
    assert f"cannot write the library {notes / 'libwalker.so'}: {notes} is a file, not a folder; give -o a path" \
        in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "test_walker.py", "walker.h"]


@pytest.mark.parametrize("args, message", [
    (["new-env", "cenv"], "env name 'cenv' would clash with the SDK's own cenv_* names"),
    (["new-env", "walker", "AFILE"], "AFILE is a file, not a folder"),
])
def test_new_env_refuses_a_name_or_folder_it_cannot_use(tmp_path, capsys, args, message):
    (tmp_path / "AFILE").write_text("")
    args = [a.replace("AFILE", str(tmp_path / "AFILE")) for a in args]
    assert cli.main(args) == 2
    assert message.replace("AFILE", str(tmp_path / "AFILE")) in capsys.readouterr().err


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path, capsys):
    path = tmp_path / "bin.toml"
    path.write_bytes(b"\xff\xfe[vec]\n")
    assert cli.main(["config", "cartpole", "--config", str(path)]) == 2
    assert f"{path} is not UTF-8 text (byte 0: b'\\xff'); save it as UTF-8 TOML" in capsys.readouterr().err


def test_a_refused_sweep_leaves_no_study_folder_and_an_unwritable_root_is_one_line(tmp_path, capsys):
    pytest.importorskip("optuna")
    root = tmp_path / "sweeps"
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "c", "--train.gamma", "2"]) == 2
    assert "train.gamma=2.0 must be in (0, 1]" in capsys.readouterr().err
    assert not (root / "c").exists()
    (tmp_path / "afile").write_text("")
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path / "afile"), "--study", "c"]) == 2
    assert f"cannot write the study folder {tmp_path / 'afile' / 'c'}" in capsys.readouterr().err


def test_the_sweeps_follow_up_commands_name_its_root(tmp_path, capsys):
    pytest.importorskip("optuna")
    root = tmp_path / "sweeps"
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "s", "--trials", "0"]) == 0
    assert f"add trials with `jaxlab sweep cartpole --study s --root {root} --trials N`" in capsys.readouterr().out
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "s", "--show"]) == 0
    assert f"no complete trial yet; run `jaxlab sweep cartpole --study s --root {root}`" in capsys.readouterr().out


def test_plot_names_the_runs_it_draws_no_line_for(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    returns = [json.dumps({"update": u, "global_step": 64 * u, "wall_time": u, "episode_return": 1.0 * u})
               for u in (1, 2)]
    write_run(tmp_path / "learning", returns)
    write_run(tmp_path / "silent", [json.dumps({"update": 1, "global_step": 64, "wall_time": 1})])
    assert cli.main(["plot", str(tmp_path / "learning"), str(tmp_path / "silent"), "-o", str(tmp_path / "c.png")]) == 0
    err = capsys.readouterr().err
    assert "silent has no values of 'episode_return': it has no line in the plot" in err
    assert "learning has no values" not in err


def test_plot_refuses_a_metric_that_is_not_a_number(tmp_path, capsys):
    """compile_cache ("hit", "miss") drew a meaningless axis of labels; a record without global_step (a
    hand edit) was a KeyError traceback: it is passed over."""
    pytest.importorskip("matplotlib")
    write_run(tmp_path / "run", [json.dumps({"update": 1, "global_step": 64, "wall_time": 1, "compile_cache": "hit",
                                             "episode_return": 1.0}),
                                 json.dumps({"update": 2, "wall_time": 2, "episode_return": 2.0})])
    png = tmp_path / "c.png"
    assert cli.main(["plot", str(tmp_path / "run"), "--metric", "compile_cache", "-o", str(png)]) == 2
    assert "'compile_cache' is not a number in " in capsys.readouterr().err and not png.exists()
    assert cli.main(["plot", str(tmp_path / "run"), "-o", str(png)]) == 0 and png.is_file()


def test_plot_of_a_metric_null_in_every_update_says_so_and_lists_every_runs_metrics(tmp_path, capsys):
    """A run whose updates ended no episode logs its episode statistics as null: plot said "no run has values
    of 'goals_reached'; metrics in RUN0: ..." naming only the first run's last update's numbers, so neither
    the run that logs it nor the other runs' metrics (nor an episode statistic null at the end) showed."""
    pytest.importorskip("matplotlib")
    short = {"update": 1, "global_step": 64, "wall_time": 1, "episodes": 0, "goals_reached": None}
    write_run(tmp_path / "a", [json.dumps({"update": 1, "global_step": 64, "wall_time": 1, "episode_return": 2.0}),
                               json.dumps({"update": 2, "global_step": 128, "wall_time": 2, "episode_return": None})])
    write_run(tmp_path / "target", [json.dumps(short)])
    png = tmp_path / "c.png"
    assert cli.main(["plot", str(tmp_path / "a"), str(tmp_path / "target"), "--metric", "goals_reached",
                     "-o", str(png)]) == 2
    assert capsys.readouterr().err == (
        f"jaxlab plot: error: no run has values of 'goals_reached': {tmp_path / 'target'} logs it as null in every "
        "update (an episode statistic is null in updates that ended no episode); train longer, or plot another "
        "metric\n")
    assert cli.main(["plot", str(tmp_path / "a"), str(tmp_path / "target"), "--metric", "retrun", "-o", str(png)]) == 2
    assert capsys.readouterr().err == ("jaxlab plot: error: no run has values of 'retrun'; the runs' metrics: "
                                       "episode_return, episodes, global_step, update, wall_time\n")
    assert not png.exists()


def test_plot_of_another_programs_metrics_says_it_holds_no_update_records(tmp_path, capsys):
    """Another program's metrics.jsonl (episode_return per "step", no update, global_step or wall_time):
    plot said "no run has values of 'episode_return'; metrics in …: episode_return, …", the metric listed
    as present yet without values. It now names the file as holding no jaxlab update records."""
    pytest.importorskip("matplotlib")
    write_run(tmp_path / "other", [json.dumps({"step": s, "episode_return": 1.0 * s}) for s in (1, 2)])
    write_run(tmp_path / "ours", [json.dumps({"update": 1, "global_step": 64, "wall_time": 1, "episode_return": 1.0})])
    png = tmp_path / "c.png"
    for runs in (["other"], ["ours", "other"]):
        assert cli.main(["plot", *(str(tmp_path / r) for r in runs), "-o", str(png)]) == 2
        err = capsys.readouterr().err
        assert err == (f"jaxlab plot: error: {tmp_path / 'other' / 'metrics.jsonl'} holds no jaxlab update records "
                       "(none of its 2 records has a numeric update, global_step and wall_time: another program's "
                       "file?); pass run dirs written by `jaxlab train`\n"), err
        assert not png.exists()


def test_runs_names_a_copied_run_by_its_folder(tmp_path):
    write_run(tmp_path / "copy", [json.dumps({"update": 1, "global_step": 64, "wall_time": 1})])
    (tmp_path / "copy" / "run.json").write_text(json.dumps({"run_name": "original", "env_name": "cartpole"}))
    write_run(tmp_path / "same", [json.dumps({"update": 1, "global_step": 64, "wall_time": 1})])
    (tmp_path / "same" / "run.json").write_text(json.dumps({"run_name": "same", "env_name": "cartpole"}))
    assert sorted(r["run"] for r in run_rows(tmp_path)) == ["copy (original)", "same"]


def test_eval_refuses_a_gif_rate_no_gif_can_play(tmp_path, capsys):
    pytest.importorskip("PIL")
    for fps in ("60", "0.001", "nan"):
        assert cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "none"), "--gif", str(tmp_path / "a.gif"),
                         "--gif-fps", fps]) == 2
        err = capsys.readouterr().err
        assert f"--gif-fps {float(fps)} must be in [0.01, 50]" in err
        assert "0.01 shows each for 100 s" in err and "655" not in err  # the bound's own time, not GIF's limit


def test_eval_refuses_a_gif_and_text_frames_written_to_one_file(tmp_path, capsys, monkeypatch):
    """--gif x.gif --save-frames ./x.gif wrote the text frames, then the GIF over them, and printed that
    both were in x.gif: the frames were lost without a word. Refused before the checkpoint is read."""
    pytest.importorskip("PIL")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "none"), "--gif", "x.gif",
                     "--save-frames", "./x.gif"]) == 2
    assert capsys.readouterr().err == ("jaxlab eval: error: --gif and --save-frames both name x.gif: the GIF would "
                                       "overwrite the text frames; give them two files, e.g. --save-frames x.txt\n")


def test_write_gif_refuses_a_rate_slower_than_a_gif_can_hold(tmp_path):
    pytest.importorskip("PIL")
    from jaxlab.observe.gif import write_gif

    frames = [np.zeros((2, 2, 3), np.uint8)] * 2
    with pytest.raises(ValueError, match="at most 655.35 s"):  # Pillow's OverflowError before
        write_gif(frames, tmp_path / "a.gif", fps=0.001)
    assert not (tmp_path / "a.gif").exists()
    assert write_gif(frames, tmp_path / "b.gif", fps=0.01).is_file()  # 100 s a picture


def test_a_config_flag_naming_a_folder_says_so(tmp_path, capsys):
    assert cli.main(["config", "cartpole", "--config", str(tmp_path)]) == 2
    assert f"--config {tmp_path}: is a folder, not a TOML file" in capsys.readouterr().err


def test_a_resume_error_says_the_value_came_from_the_saved_run(tmp_path, capsys):
    import os
    import subprocess
    import sys

    run = tmp_path / "two-devices"
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    saved = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--device.count", "2",
                            "--policy.hidden-size", "16", "--train.total-timesteps", "1024", "--run-dir", str(run),
                            "--log.dashboard", "none"], capture_output=True, text=True, env=env, timeout=600)
    assert saved.returncode == 0, saved.stderr[-2000:]
    # this process sees one device: the saved device.count 2 cannot be used, and the error says where it came from
    assert cli.main(["train", "cartpole", "--resume", str(run), "--train.total-timesteps", "2048"]) == 2
    err = capsys.readouterr().err
    assert "device.count=2 must be between 1 and the 1 local device JAX sees; e.g. --device.count 1 (or auto)" in err
    assert f"(--resume {run}: the values not given as flags are the ones the run was saved with" in err


def test_trials_0_creates_the_study_and_says_it_ran_nothing_and_a_negative_count_is_refused(tmp_path, capsys):
    """--trials N counts the trials the study holds: 0 creates it (its space and base config), e.g. to
    enqueue trials into it, and runs nothing; the last line says so and how to add trials."""
    pytest.importorskip("optuna")
    root = tmp_path / "sweeps"
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "n", "--trials", "-1"]) == 2
    err = capsys.readouterr().err  # it gave no example value, as the other refusals do
    assert "--trials -1 must be at least 0 (0 creates the study and runs nothing), e.g. --trials 20" in err
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "n", "--parallel", "0"]) == 2
    assert "--parallel 0 must be at least 1, e.g. --parallel 1" in capsys.readouterr().err
    assert not (root / "n").exists()
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "z", "--trials", "0"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"done: nothing to run: the study holds 0 trials and --trials is 0; add trials with "
        f"`jaxlab sweep cartpole --study z --root {root} --trials N` (N above 0)")
    assert (root / "z" / "study.journal").is_file()


def test_a_sweep_whose_every_trial_failed_before_it_ran_exits_1_saying_so(tmp_path, capsys):
    """Each key passes alone, no combination fits (minibatches are whole sequences): every trial fails
    before it runs; the sweep's last line says so, and it exits 1, not 0."""
    pytest.importorskip("optuna")
    space = tmp_path / "space.toml"
    space.write_text('[sweep]\n"train.bptt_horizon" = {choices = [64, 128]}\n'
                     '"train.minibatch_size" = {choices = [16, 32]}\n')
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path / "sweeps"), "--study", "f", "--sweep", str(space),
                     "--trials", "2"]) == 1
    captured = capsys.readouterr()
    assert captured.out.count("failed before it ran: train.minibatch_size=") == 2
    assert captured.out.count("must be a multiple of train.bptt_horizon") == 2
    assert captured.err.strip().splitlines() == [
        "all 2 trials of this sweep failed before they ran (2 fail in the study): their values broke a config "
        "rule (errors above); change the sweep file's ranges so that they fit together, and start a new --study"]


def test_parallel_above_the_runs_to_do_says_so_and_warns_of_no_core_sharing_that_cannot_happen(tmp_path, capsys):
    """--parallel K above the usable cores and above the runs a sweep can have (more jobs than trials x seeds):
    it warned that trials would share cores, which one run cannot, and said nothing of the slots that no run
    would take (their share of the cores idle)."""
    pytest.importorskip("optuna")
    space = tmp_path / "space.toml"  # every trial fails before it runs (as above): nothing trains
    space.write_text('[sweep]\n"train.bptt_horizon" = {choices = [64, 128]}\n'
                     '"train.minibatch_size" = {choices = [16, 32]}\n')
    parallel = len(os.sched_getaffinity(0)) + 1
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path / "sweeps"), "--study", "j", "--sweep", str(space),
                     "--trials", "1", "--parallel", str(parallel)]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == (f"jaxlab sweep: --parallel {parallel}, but this sweep has at most 1 "
                                            f"run to do: 1 of its {parallel} slots will run, each with its "
                                            f"1/{parallel} share of the machine; --parallel 1 gives each run more")
    assert "share cores" not in captured.err


def test_a_resume_without_parallel_splits_the_machine_as_the_study_started(tmp_path, capsys):
    """--parallel was not stored with a study: `jaxlab sweep ENV --study NAME` of a study started with --parallel 2
    ran its trials one at a time, each on every core (other arithmetic: the sweep warned of it trial by trial).
    The study keeps the --parallel it was created with; an explicit --parallel still wins, and does not replace it."""
    pytest.importorskip("optuna")
    import optuna

    from jaxlab.sweep import study as study_lib

    root = tmp_path / "sweeps"
    command = ["sweep", "cartpole", "--root", str(root), "--study", "k", "--trials", "0"]
    assert cli.main([*command, "--parallel", "2"]) == 0
    capsys.readouterr()
    assert cli.main(command) == 0
    assert "(resumed): cartpole, 0 trials (0 in the study), 2 at a time (" in capsys.readouterr().out
    assert cli.main([*command, "--parallel", "1"]) == 0
    assert "(resumed): cartpole, 0 trials (0 in the study), 1 at a time (" in capsys.readouterr().out
    assert cli.main(command) == 0
    assert ", 2 at a time (" in capsys.readouterr().out
    storage = study_lib.storage_for(None, root / "k")
    assert optuna.load_study(study_name="k", storage=storage).user_attrs["sweep"]["parallel"] == 2


def test_a_pruner_a_score_cost_study_cannot_use_is_refused_when_asked_for_and_warned_of_when_defaulted(tmp_path,
                                                                                                       capsys):
    """Optuna prunes single-objective studies only: a pruner with --objective score,cost was dropped without a
    word. --pruner given with it is refused (nothing saved); the pruner the env's sweep file sets for its single
    objective, or the default one, is warned of once."""
    pytest.importorskip("optuna")
    from jaxlab.sweep.space import default_sweep_file

    root = tmp_path / "sweeps"
    command = ["sweep", "cartpole", "--root", str(root), "--objective", "score,cost", "--trials", "0"]
    assert cli.main([*command, "--study", "asked", "--pruner", "hyperband"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "jaxlab sweep: error: --pruner hyperband cannot prune --objective score,cost: Optuna prunes single-objective "
        "studies only; leave out --pruner (or give --pruner none), or --objective score to prune"]
    assert not (root / "asked").exists()
    assert cli.main([*command, "--study", "defaulted"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"jaxlab sweep: warning: pruner median (in {default_sweep_file('cartpole')}) is not used with --objective "
        "score,cost: Optuna prunes single-objective studies only, so every trial runs to its end; --pruner none "
        "says so"]
    assert cli.main([*command, "--study", "none", "--pruner", "none"]) == 0
    assert capsys.readouterr().err == ""
    space = tmp_path / "space.toml"
    space.write_text('[sweep]\nobjective = "score,cost"\n"train.gamma" = {low = 0.9, high = 0.99}\n')
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--sweep", str(space), "--study", "file",
                     "--trials", "0"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"jaxlab sweep: warning: the default pruner median is not used with objective score,cost (in {space}): "
        "Optuna prunes single-objective studies only, so every trial runs to its end; --pruner none says so"]


@pytest.mark.parametrize("given, ours", [(["--jobs", "3"], "--parallel, e.g. --parallel 3"),
                                         (["--n-trials=8"], "--trials, e.g. --trials 8")])
def test_another_sweep_tools_option_is_named_with_jaxlabs(tmp_path, capsys, given, ours):
    """--jobs (Optuna's n_jobs) was refused as a config flag ('config flags look like --train.seed 1'),
    which does not say that jaxlab sweep's option is --parallel."""
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path), "--study", "o", *given]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jaxlab sweep: error: unexpected argument {given[0]!r}; jaxlab sweep calls it {ours}"]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("given", [["--dist.num-processes", "2", "--dist.process-id", "0"],
                                   ["--dist.coordinator=localhost:12345"]])
def test_a_sweep_refuses_dist_flags_before_creating_its_study(tmp_path, capsys, given):
    """--dist.* flags were taken into the study's base config, where each trial, given it as a --config file,
    warned that its [dist] was not read and ran as one process: the flags did nothing but look accepted."""
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path), "--study", "d", "--trials", "0", *given]) == 2
    flag = given[0].partition("=")[0]
    assert capsys.readouterr().err.splitlines() == [
        f"jaxlab sweep: error: unexpected argument {flag!r}: jaxlab sweep starts each run of a trial as one "
        "process (--parallel K runs K side by side), so it takes no --dist.* flag; drop it"]
    assert not (tmp_path / "d").exists()


def test_a_sweep_refuses_a_config_file_with_a_dist_table_before_creating_its_study(tmp_path, capsys):
    """A --config file's [dist] went into the study's base config like the --dist.* flags did: every trial warned
    that it was not read and ran as one process. Refused at the start, as the flags are; a file without
    [dist] (or with an empty one) is taken."""
    file = tmp_path / "base.toml"
    file.write_text('[train]\nlearning_rate = 0.001\n\n[dist]\nnum_processes = 2\ncoordinator = "localhost:1234"\n')
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path), "--study", "d", "--trials", "0", "--config",
                     str(file)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jaxlab sweep: error: --config {file} has a [dist] table (num_processes, coordinator): jaxlab sweep starts "
        "each run of a trial as one process (--parallel K runs K side by side), so every trial would ignore it; "
        "remove [dist] from the file, or sweep with a copy without it"]
    assert not (tmp_path / "d").exists()
    pytest.importorskip("optuna")
    file.write_text("[train]\nlearning_rate = 0.001\n\n[dist]\n")
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path), "--study", "e", "--trials", "0", "--config",
                     str(file)]) == 0
    assert (tmp_path / "e" / "base.toml").is_file()


@pytest.mark.parametrize("file, flags", [("envs/cartpole.toml", []), ("presets/cpu.toml", ["--preset", "cpu"])],
                         ids=["env file", "preset"])
def test_a_sweep_leaves_out_a_dist_table_of_an_env_file_or_preset_in_one_line(tmp_path, capsys, monkeypatch, file,
                                                                              flags):
    """An env's config file's or a preset's [dist] reached every trial through the study's base config (only a
    --config file's was refused), with a warning that told the sweep to pass --dist.* flags it refuses. It is left
    out of the base config, said in one line naming the key, its value and its file."""
    pytest.importorskip("optuna")
    import shutil

    from jaxlab.config import config_from_toml, layers
    from jaxlab.config.schema import DistConfig

    configs = tmp_path / "configs"
    shutil.copytree(layers.configs_dir(), configs)
    with open(configs / file, "a") as table:
        table.write("\n[dist]\nnum_processes = 2\n")
    monkeypatch.setattr(layers, "configs_dir", lambda: configs)
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path), "--study", "d", "--trials", "0", *flags]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "dist" in line]
    assert said == [f"jaxlab sweep: note: [dist] num_processes = 2 (from configs/{file}) left out of the study's base "
                    "config: jaxlab sweep starts each run of a trial as one process (--parallel K runs K side by "
                    "side)"], said
    base = (tmp_path / "d" / "base.toml").read_text()
    assert config_from_toml(base.partition("\n")[2]).dist == DistConfig()


def test_a_sweep_takes_a_run_dirs_config_toml_whose_dist_table_holds_the_defaults(tmp_path, capsys):
    """`jaxlab sweep cartpole --config runs/x/config.toml` was refused ('has a [dist] table (coordinator,
    num_processes, process_id) ...'): a run dir's config.toml records every key, [dist] at its defaults (one
    process, as every trial runs). Only a [dist] key set to another value is refused, and only it is named."""
    pytest.importorskip("optuna")
    from jaxlab.config import load_config, to_toml

    file = tmp_path / "config.toml"
    file.write_text(to_toml(load_config("cartpole", flags=["--train.learning-rate", "0.001"])[0]))
    assert '[dist]\ncoordinator = ""\nnum_processes = 0\nprocess_id = -1\n' in file.read_text()
    sweep = ["sweep", "cartpole", "--root", str(tmp_path), "--trials", "0", "--config", str(file)]
    assert cli.main([*sweep, "--study", "a"]) == 0
    assert "has a [dist] table" not in capsys.readouterr().err
    assert (tmp_path / "a" / "base.toml").is_file()
    file.write_text(file.read_text().replace("num_processes = 0", "num_processes = 2"))
    assert cli.main([*sweep, "--study", "b"]) == 2
    assert f"error: --config {file} has a [dist] table (num_processes): jaxlab sweep" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_a_sweep_refuses_a_flag_on_a_key_it_searches_while_a_config_file_may_set_one(tmp_path, capsys):
    """`--train.gamma 0.9` beside a sweep file searching train.gamma went into the base config and every trial's
    sampled gamma replaced it: the flag looked like it fixed gamma and did nothing. Refused, naming the flag, its
    value, the distribution and both fixes; a --config file's value is the base a searched one replaces."""
    pytest.importorskip("optuna")
    space = tmp_path / "space.toml"
    space.write_text('[sweep]\n"train.gamma" = {low = 0.95, high = 0.999}\n"env.max_steps" = {low = 100, high = 500}\n')
    sweep = ["sweep", "cartpole", "--root", str(tmp_path), "--trials", "0", "--sweep", str(space)]
    for flags, flag, short in ((["--train.gamma", "0.9"], "--train.gamma 0.9", "train.gamma (float 0.95..0.999"),
                               (["--env.max-steps=200"], "--env.max-steps 200", "env.max_steps (int 100..500")):
        assert cli.main([*sweep, "--study", "f", *flags]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"jaxlab sweep: error: {flag} would do nothing: the sweep searches {short}, in {space}) and each trial's "
            f"value replaces the flag's; drop the flag to search it, or leave {short.split()[0]} out of the sweep "
            "file to fix it for every trial"]
        assert not (tmp_path / "f").exists()
    base = tmp_path / "base.toml"
    base.write_text("[train]\ngamma = 0.97\n")
    assert cli.main([*sweep, "--study", "c", "--config", str(base), "--train.learning-rate", "0.001"]) == 0
    assert "gamma = 0.97" in (tmp_path / "c" / "base.toml").read_text()


def test_sweep_plot_without_matplotlib_is_one_line_before_show_prints_anything(tmp_path, capsys, monkeypatch):
    """Optuna installed alone (pip install optuna, without the sweep extra) has no matplotlib: --show --plot printed
    the best trials and wrote best.toml, then --plot ended in a ModuleNotFoundError traceback."""
    optuna = pytest.importorskip("optuna")
    import sys

    from jaxlab.config import load_config, to_toml
    from jaxlab.messages import install_extra
    from jaxlab.sweep import study as study_lib
    from jaxlab.sweep.space import parse_spec

    study_lib.quiet_optuna()
    spec = parse_spec({"train.gamma": {"low": 0.9, "high": 0.99}}, "cartpole", "test.toml")
    study = study_lib.open_study("p", study_lib.storage_for(None, tmp_path / "p"), spec,
                                 to_toml(load_config("cartpole")[0]), "cartpole")[0]
    study.add_trial(optuna.trial.create_trial(params={"train.gamma": 0.95}, value=1.0, distributions={
        "train.gamma": optuna.distributions.FloatDistribution(0.9, 0.99)}))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path), "--study", "p", "--show", "--plot"]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"jaxlab sweep: error: --plot needs matplotlib; install it with "
                                         f"{install_extra('sweep')}, or leave out --plot"]
    assert captured.out == "" and not (tmp_path / "p" / "best.toml").exists()


def test_a_study_resumed_with_a_sweep_file_fills_up_to_that_files_trials(tmp_path, capsys, monkeypatch):
    """A study created with --trials 0 and resumed with `--sweep FILE` (trials = 3 there, no --trials) kept the
    stored target: 'nothing to run ... --trials is 0', the file's trials silently ignored, though trials is a setting
    a resume may change and a file's trials is the default of --trials. The trials themselves are not run here."""
    pytest.importorskip("optuna")
    from jaxlab.sweep import supervisor

    class NoTrials:  # the sweep's loop, replaced: only the target the command line chose matters
        told, launched, cut_short, unstarted = {}, False, [], []

        def __init__(self, *args, **kwargs):
            pass

        def run(self):
            return None

    monkeypatch.setattr(supervisor, "Sweep", NoTrials)
    space = tmp_path / "space.toml"
    space.write_text('[sweep]\ntrials = 3\n"train.gamma" = {low = 0.95, high = 0.999}\n')
    sweep = ["sweep", "cartpole", "--root", str(tmp_path), "--study", "t", "--sweep", str(space)]
    assert cli.main([*sweep, "--trials", "0"]) == 0
    assert "sweep t (new): cartpole, 0 trials (0 in the study)" in capsys.readouterr().out
    assert cli.main(sweep) == 0
    assert "sweep t (resumed): cartpole, 3 trials (0 in the study)" in capsys.readouterr().out
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path), "--study", "t"]) == 0  # no file: the study's own
    assert "sweep t (resumed): cartpole, 0 trials (0 in the study)" in capsys.readouterr().out


def test_nothing_to_run_names_trials_as_the_command_line_gave_them(tmp_path, capsys):
    """A resume without --trials that had nothing to run said '--trials is 0', a flag nobody typed."""
    pytest.importorskip("optuna")
    root = tmp_path / "sweeps"
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "z", "--trials", "0"]) == 0
    assert "the study holds 0 trials and --trials is 0; add trials" in capsys.readouterr().out
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "z"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "done: nothing to run: the study holds 0 trials and its target is 0 (no --trials: the sweep file's or the "
        f"study's); add trials with `jaxlab sweep cartpole --study z --root {root} --trials N` (N above 0)")


def test_a_resumes_log_and_checkpoint_flags_reach_the_trials_it_starts(tmp_path, capsys):
    """A resume may change [log] and [checkpoint] (the study's base config is compared without them), but the trials
    it started took the stored base: `--checkpoint.keep 1 --log.wandb-tags foo` on a resume were accepted and
    silently did nothing. The base the trials read (STUDY/base.toml) now takes the values the command sets, and
    keeps the study's where it sets none."""
    pytest.importorskip("optuna")
    sweep = ["sweep", "cartpole", "--root", str(tmp_path), "--study", "b", "--trials", "0"]
    assert cli.main([*sweep, "--log.wandb-tags", "bar"]) == 0
    assert cli.main([*sweep, "--checkpoint.keep", "1", "--log.wandb-tags", "foo"]) == 0
    base = (tmp_path / "b" / "base.toml").read_text()
    assert "\nkeep = 1\n" in base and 'wandb_tags = "foo"' in base
    assert cli.main([*sweep, "--seeds", "1"]) == 0  # a resume that sets neither: the study's own
    base = (tmp_path / "b" / "base.toml").read_text()
    assert "\nkeep = 3\n" in base and 'wandb_tags = "bar"' in base
    capsys.readouterr()


def test_a_sweep_refuses_a_searched_key_that_the_base_config_does_not_use(tmp_path, capsys):
    """pendulum trains without the LSTM (policy.lstm false in configs/envs/pendulum.toml), so a space searching
    policy.hidden_size trained every trial alike whatever its value, silently, while `jaxlab train` warns of such a
    flag. Refused for a new study unless the key that makes it used is searched too; the default spaces pass."""
    pytest.importorskip("optuna")
    from conftest import ENV_NAMES

    from jaxlab.config import load_config
    from jaxlab.sweep.space import default_sweep_file, parse_spec, read_sweep_file, refuse_keys_that_do_nothing

    space = tmp_path / "space.toml"
    space.write_text('[sweep]\n"policy.hidden_size" = {choices = [32, 64]}\n"train.gamma" = {low = 0.9, high = 0.99}\n')
    sweep = ["sweep", "pendulum", "--root", str(tmp_path), "--trials", "0", "--sweep", str(space)]
    assert cli.main([*sweep, "--study", "h"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jaxlab sweep: error: sweep key 'policy.hidden_size' (in {space}) does nothing with policy.lstm false (the "
        "base config's): every trial would train alike whatever its value; search policy.lstm too, set another "
        "policy.lstm for every trial, or leave policy.hidden_size out of the sweep file"]
    assert not (tmp_path / "h").exists()
    assert cli.main([*sweep, "--study", "h", "--policy.lstm", "true"]) == 0
    space.write_text('[sweep]\n"policy.hidden_size" = {choices = [32, 64]}\n"policy.lstm" = {choices = [true, false]}\n')
    assert cli.main([*sweep, "--study", "l"]) == 0
    for env in ENV_NAMES:
        refuse_keys_that_do_nothing(parse_spec(read_sweep_file(default_sweep_file(env)), env, "default"),
                                    load_config(env)[0])


@pytest.mark.parametrize("show", [[], ["--show"]])
def test_a_sweep_with_a_storage_url_checks_its_study_folder_too(tmp_path, capsys, show):
    """With --storage the study folder (its trials' run dirs, base.toml, best.toml) was not checked: a --root under
    a file ended in a NotADirectoryError traceback, for a sweep and for --show."""
    pytest.importorskip("optuna")
    (tmp_path / "afile").write_text("")
    db = f"sqlite:///{tmp_path / 'x.db'}"
    assert cli.main(["sweep", "cartpole", "--storage", db, "--root", str(tmp_path / "afile"), "--study", "c",
                     "--trials", "0", *show]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jaxlab sweep: error: cannot write the study folder {tmp_path / 'afile' / 'c'} ({tmp_path / 'afile'} is a "
        "file, not a folder); pass a --root DIR you can write"]


def test_sweep_help_lists_no_dist_flag_it_refuses(capsys):
    """jaxlab sweep --help listed the --dist.* flags among its config flags, which the sweep refuses."""
    for command, listed in (("sweep", False), ("train", True)):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        text = capsys.readouterr().out
        assert ("--dist.num-processes" in text) is listed, command
        assert "--train.learning-rate" in text, command


def test_a_study_resumed_with_another_space_is_refused_naming_the_command_that_resumes_it(tmp_path, capsys):
    """The refusal said 'or `jaxlab sweep ENV --study NAME` alone', placeholders the user had to fill in (and
    a study under --root needs --root too); it gives this study's command now."""
    pytest.importorskip("optuna")
    root, space = tmp_path / "sweeps", tmp_path / "space.toml"
    space.write_text('[sweep]\n"train.gamma" = {low = 0.9, high = 0.99}\n')
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "r", "--sweep", str(space),
                     "--trials", "0"]) == 0
    space.write_text('[sweep]\n"train.gamma" = {low = 0.9, high = 0.999}\n')
    capsys.readouterr()
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "r", "--sweep", str(space)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "jaxlab sweep: error: study 'r' was created with another search space (train.gamma: float 0.9..0.99, not "
        f"float 0.9..0.999); resume it with the same sweep file (or `jaxlab sweep cartpole --study r --root {root}` "
        "alone), or start a new --study"]


def test_plot_of_a_study_with_no_complete_trial_writes_nothing_and_says_so(tmp_path, capsys):
    pytest.importorskip("optuna")
    root = tmp_path / "sweeps"
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "p", "--trials", "0"]) == 0
    capsys.readouterr()
    assert cli.main(["sweep", "cartpole", "--root", str(root), "--study", "p", "--plot"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"no complete trial yet to plot (nothing written); run `jaxlab sweep cartpole --study p --root {root}`"]
    assert not list((root / "p").glob("*.png"))


def test_the_sweeps_follow_up_commands_give_its_storage_url_with_the_password_masked(tmp_path, capsys):
    pytest.importorskip("optuna")
    from argparse import Namespace

    from jaxlab.cli.sweep import DEFAULT_ROOT, study_command

    url = f"sqlite:///{tmp_path / 'studies.db'}"  # no password: given as it is, ready to paste
    assert cli.main(["sweep", "cartpole", "--storage", url, "--root", str(tmp_path), "--study", "q",
                     "--trials", "0"]) == 0
    out = capsys.readouterr().out
    assert f"storage {url}" in out and f"`jaxlab sweep cartpole --study q --storage {url} --trials N`" in out
    args = Namespace(env="cartpole", storage="postgresql://me:s3cret@db.example/sweeps", root=DEFAULT_ROOT)
    masked = "jaxlab sweep cartpole --study q --storage 'postgresql://me:***@db.example/sweeps'"
    assert study_command(args, "q") == masked
    assert cli.main(["sweep", "cartpole", "--storage", "mongodb://me:s3cret@db.example/sweeps", "--root",
                     str(tmp_path), "--study", "m"]) == 2  # not a database URL: refused without the password
    err = capsys.readouterr().err
    assert "--storage 'mongodb://me:***@db.example/sweeps' is not a database URL" in err and "s3cret" not in err


def test_more_parallel_trials_than_cpu_cores_is_one_warning_line(tmp_path, capsys, monkeypatch):
    """On a CPU the cores are split between the K trials; K above them pins trials round-robin, one core
    each, so that they share cores: allowed, with one warning."""
    pytest.importorskip("optuna")
    import jax

    from jaxlab.config import threads

    monkeypatch.setattr(threads, "usable_cores", lambda: [0])
    assert cli.main(["sweep", "cartpole", "--root", str(tmp_path), "--study", "w", "--parallel", "2",
                     "--trials", "0"]) == 0
    if jax.default_backend() != "cpu":
        pytest.skip("a GPU backend: trials share its memory, not pinned cores")
    assert capsys.readouterr().err.splitlines() == [
        "jaxlab sweep: warning: --parallel 2 on 1 usable CPU core: the trials will share cores (each pinned to "
        "one, round-robin), each slower; --parallel 1 gives each trial a core of its own"]


def test_a_study_resumed_with_only_another_seeds_count_says_so(tmp_path, capsys):
    """The study was made from another sweep file than the env's default: `--seeds 2` alone is checked
    against the study's own space (it was refused as another search space), and refused for its count."""
    pytest.importorskip("optuna")
    root = tmp_path / "sweeps"
    space = tmp_path / "space.toml"
    space.write_text('[sweep]\n"train.learning_rate" = {low = 1e-3, high = 1e-2, log = true}\n')
    study = ["sweep", "cartpole", "--root", str(root), "--study", "r", "--trials", "0"]
    assert cli.main([*study, "--sweep", str(space), "--seeds", "1"]) == 0
    capsys.readouterr()
    assert cli.main([*study, "--seeds", "2"]) == 2
    assert capsys.readouterr().err.strip() == (
        "jaxlab sweep: error: study 'r' was created with 1 seed per trial, not 2 (--seeds 2): its trials' scores "
        "must average as many seeds; resume it with --seeds 1, or start a new --study")
    assert (root / "r" / "study.journal").is_file()
    assert cli.main([*study, "--seeds", "1"]) == 0  # its own count (and space) resumes it
    assert "train.learning_rate float in [0.001, 0.01], log" in capsys.readouterr().out


def test_an_env_that_fails_while_training_is_one_line_naming_it(tmp_path, capsys):
    run = tmp_path / "run"
    # cards' fault 1 plants a mask bug that its strict checks catch at the first step
    assert cli.main(["train", "cards", "--env.fault", "1", "--vec.num-envs", "8", "--train.minibatch-size", "64",
                     "--train.total-timesteps", "256", "--run-dir", str(run), "--log.dashboard", "none"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("jaxlab train: error: env 'cards' failed while stepping: RuntimeError: cenv step failed (-7): env "
            "'cards' #0 failed at step 1") in err
    assert f"the updates before it are in {run}/metrics.jsonl and no checkpoint was saved yet" in err
    assert json.loads((run / "summary.json").read_text())["error"].startswith("EnvStepError: env 'cards' failed")
    assert f"the traceback is in {run / 'run.log'}" in err  # where the env's error was raised, for its author
    assert "Traceback (most recent call last)" in (run / "run.log").read_text()


def test_a_flag_given_twice_with_two_values_is_named_and_the_last_is_used(capsys):
    assert cli.main(["config", "cartpole", "--train.seed", "1", "--train.seed=2", "--train.gamma", "0.99",
                     "--train.gamma", "0.99"]) == 0
    out, err = capsys.readouterr()
    assert "jaxlab: warning: --train.seed given twice (1, then 2); the last, 2, is used" in err
    assert "gamma" not in err  # the same value twice says nothing
    assert cli.main(["config", "cartpole", "--train.total-timesteps", "1e6", "--train.total-timesteps", "1_000_000",
                     "--train.learning-rate", "1e-3", "--train.learning-rate", "0.001"]) == 0
    assert "given twice" not in capsys.readouterr().err  # one value, spelled two ways
    assert any(line.startswith("seed = 2 ") for line in out.splitlines())


def test_an_env_parameter_that_is_not_a_number_suggests_its_default_and_range(capsys):
    assert cli.main(["config", "cartpole", "--env.max-steps", "10.5"]) == 2
    assert ('env.max_steps="10.5" is not an integer; write e.g. --env.max-steps 500 (the default; from 1 to '
            "1,000,000,000)") in capsys.readouterr().err


def test_runs_points_at_the_folders_below_that_hold_runs(tmp_path, capsys):
    write_run(tmp_path / "a", [json.dumps({"update": 1, "global_step": 64, "wall_time": 1})])
    for trial in ("trial-0-seed-0", "trial-1-seed-0"):
        write_run(tmp_path / "sweeps" / "study" / trial, [json.dumps({"update": 1, "global_step": 64, "wall_time": 1})])
    hint = (f"more run dirs in: {tmp_path / 'sweeps' / 'study'} (2); list them with "
            f"`jaxlab runs {tmp_path / 'sweeps' / 'study'}`")
    assert cli.main(["runs", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("a ") and out.splitlines()[-1] == hint
    assert cli.main(["runs", str(tmp_path / "sweeps")]) == 0
    assert capsys.readouterr().out == f"no runs found\n{hint}\n"


def test_flags_the_config_does_not_use_are_named(capsys):
    assert cli.main(["config", "cartpole", "--train.min-lr-ratio", "0.1", "--train.anneal-lr", "none",
                     "--train.vtrace-c-clip", "2", "--train.prio-beta0", "0.5"]) == 0
    assert ("jaxlab: warning: --train.min-lr-ratio does nothing with train.anneal_lr none; --train.vtrace-c-clip "
            "does nothing with train.advantage gae; --train.prio-beta0 does nothing with train.prio_alpha 0"
            ) in capsys.readouterr().err
    assert cli.main(["config", "cartpole", "--train.min-lr-ratio", "0.1", "--train.advantage", "vtrace",
                     "--train.vtrace-c-clip", "2"]) == 0
    assert "does nothing" not in capsys.readouterr().err  # used: the schedule is linear, the advantage V-trace


def test_target_kl_with_one_epoch_an_update_is_named_as_doing_nothing(capsys):
    """train.target_kl is checked after each epoch: with update_epochs 1 there is none left to stop, and the run
    trained without a word."""
    assert cli.main(["config", "cartpole", "--train.target-kl", "0.02", "--train.update-epochs", "1"]) == 0
    assert ("jaxlab: warning: --train.target-kl does nothing with train.update_epochs 1 (it is checked after each "
            "epoch: none is left to stop)") in capsys.readouterr().err
    assert cli.main(["config", "cartpole", "--train.target-kl", "0.02", "--train.update-epochs", "2"]) == 0
    assert "does nothing" not in capsys.readouterr().err


def test_wandb_flags_without_log_wandb_are_named(capsys):
    """--log.wandb-project foo alone trained with no wandb and no word: wandb is opt-in (--log.wandb true)."""
    assert cli.main(["config", "cartpole", "--log.wandb-project", "foo", "--log.wandb-tags", "a,b"]) == 0
    assert ("jaxlab: warning: --log.wandb-project does nothing with log.wandb false; --log.wandb-tags does nothing "
            "with log.wandb false") in capsys.readouterr().err
    assert cli.main(["config", "cartpole", "--log.wandb", "true", "--log.wandb-project", "foo"]) == 0
    assert "does nothing" not in capsys.readouterr().err


def test_network_flags_the_built_in_network_does_not_use_are_named(capsys):
    assert cli.main(["config", "cartpole", "--policy.lstm", "false", "--policy.hidden-size", "64",
                     "--policy.scan-unroll", "4", "--policy.cnn-channels", "[8]"]) == 0
    assert ("jaxlab: warning: --policy.hidden-size does nothing with policy.lstm false; --policy.scan-unroll "
            "does nothing with policy.lstm false; --policy.cnn-channels does nothing with policy.encoder mlp"
            ) in capsys.readouterr().err
    assert cli.main(["config", "cartpole", "--policy.hidden-size", "64", "--policy.scan-unroll", "4"]) == 0
    assert "does nothing" not in capsys.readouterr().err  # used: the LSTM is on


def test_threads_given_for_a_python_env_are_named_as_doing_nothing(capsys):
    """--vec.num-threads 4 with a Python env was taken in silence (its envs step in one thread)."""
    pytest.importorskip("gymnasium")
    assert cli.main(["config", "gymnasium:CartPole-v1", "--vec.num-threads", "4"]) == 0
    assert ("jaxlab: warning: --vec.num-threads does nothing with env gymnasium:CartPole-v1, a Python env (its envs "
            "step one after the other in one thread)") in capsys.readouterr().err
    assert cli.main(["config", "cartpole", "--vec.num-threads", "2"]) == 0
    assert "does nothing" not in capsys.readouterr().err  # a C env's threads


def test_keys_a_config_file_sets_that_the_config_does_not_use_are_named_with_the_file(tmp_path, capsys):
    """min_lr_ratio = 0.3 with anneal_lr = "none" in a --config file did nothing without a word, while
    --train.min-lr-ratio 0.3 got a warning. A file's key now warns too, naming the file and its line; one at
    the value the layers under the file give (a run dir's config.toml records every key) stays quiet."""
    from jaxlab.config import load_config, to_toml

    mine = tmp_path / "mine.toml"
    mine.write_text('[train]\nanneal_lr = "none"\nmin_lr_ratio = 0.3\n[policy]\nlstm = false\nhidden_size = 64\n')
    assert cli.main(["config", "cartpole", "--config", str(mine), "--train.prio-beta0", "0.5"]) == 0
    assert (f"jaxlab: warning: train.min_lr_ratio = 0.3 in {mine} does nothing with train.anneal_lr none; "
            "--train.prio-beta0 does nothing with train.prio_alpha 0; "
            f"policy.hidden_size = 64 in {mine} does nothing with policy.lstm false; "
            f"remove those lines from {mine}\n") in capsys.readouterr().err
    saved = tmp_path / "config.toml"  # pendulum.toml's hidden_size = 64 without the LSTM: the file chose neither
    saved.write_text(to_toml(load_config("pendulum", flags=["--train.anneal-lr", "none"])[0]))
    assert cli.main(["config", "pendulum", "--config", str(saved)]) == 0
    assert "does nothing" not in capsys.readouterr().err


def test_a_run_dirs_config_toml_is_quiet_about_the_keys_its_recorded_presets_set(tmp_path, capsys):
    """A run's config.toml passed back as --config (as README suggests) warned 'policy.hidden_size = 256 in
    config.toml does nothing with policy.lstm false; remove that line' for a pendulum run of --preset heavy,
    and 'device.memory_fraction = 0.3 ...' on a CPU for a run of the gpu preset: values the run's presets
    set, which the file records with its preset line. The presets a file's preset line names lie under the
    file for that comparison (not applied); a key the file sets to another value is still named."""
    from jaxlab.config import load_config, to_toml

    saved = tmp_path / "config.toml"
    for env, preset, flags in (("pendulum", "cpu,heavy", []), ("cartpole", "gpu", ["--train.minibatch-size", "1024"])):
        saved.write_text(to_toml(load_config(env, preset=preset, flags=flags)[0]))
        assert f'preset = "{preset}"' in saved.read_text()
        assert cli.main(["config", env, "--config", str(saved)]) == 0
        assert "does nothing" not in capsys.readouterr().err
    saved.write_text(to_toml(load_config("pendulum", preset="cpu,heavy", flags=["--policy.hidden-size", "32"])[0]))
    assert cli.main(["config", "pendulum", "--config", str(saved)]) == 0
    assert (f"jaxlab: warning: policy.hidden_size = 32 in {saved} does nothing with policy.lstm false; remove that "
            f"line from {saved}\n") in capsys.readouterr().err


def test_a_files_keys_that_a_flag_of_this_command_turns_off_are_not_named(tmp_path, capsys):
    """`jaxlab train cartpole --config RUN/config.toml --log.wandb false` (a run's config without wandb) warned
    'log.wandb_project = "myproj" in config.toml does nothing with log.wandb false; remove that line': the
    user's flag turned the setting off over the file, whose line for it is not wrong. A file's key is named
    only when the key that turns it off is not a flag of this command; a flag's key is named as before."""
    from jaxlab.config import load_config, to_toml

    saved = tmp_path / "config.toml"
    saved.write_text(to_toml(load_config("cartpole", flags=["--log.wandb", "true", "--log.wandb-project", "myproj",
                                                            "--train.min-lr-ratio", "0.1"])[0]))
    assert cli.main(["config", "cartpole", "--config", str(saved), "--log.wandb", "false",
                     "--train.anneal-lr", "none"]) == 0
    assert "does nothing" not in capsys.readouterr().err
    assert cli.main(["config", "cartpole", "--config", str(saved), "--train.anneal-lr", "none",
                     "--log.wandb-group", "g"]) == 0
    assert capsys.readouterr().err == ""  # wandb is on: the group is used
    assert cli.main(["config", "cartpole", "--config", str(saved), "--log.wandb", "false",
                     "--log.wandb-group", "g"]) == 0
    assert capsys.readouterr().err == "jaxlab: warning: --log.wandb-group does nothing with log.wandb false\n"


def test_a_checkpoint_that_is_not_there_names_those_that_are(tmp_path, capsys):
    checkpoints = tmp_path / "run" / "checkpoints"
    for step in ("4", "12"):
        (checkpoints / step).mkdir(parents=True)
    assert cli.main(["eval", "cartpole", "--checkpoint", str(checkpoints / "99")]) == 2
    assert (f"--checkpoint {checkpoints / '99'}: no checkpoint there; {checkpoints} holds 12, 4: "
            f"e.g. --checkpoint {checkpoints / '12'}") in capsys.readouterr().err
    (checkpoints / "12" / "state").mkdir()  # a newest checkpoint without its meta/: not suggested as the way out
    assert cli.main(["eval", "cartpole", "--checkpoint", str(checkpoints / "12")]) == 2
    assert (f"--checkpoint {checkpoints / '12'}: not a whole checkpoint (it lacks state/ or meta/); {checkpoints} "
            f"holds 12, 4: e.g. --checkpoint {checkpoints / '4'}") in capsys.readouterr().err
    (tmp_path / "started" / "checkpoints").mkdir(parents=True)  # a run before its first save
    with RunDirLock(tmp_path / "started"):  # still running: one will come
        assert cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "started")]) == 2
    assert f"--checkpoint {tmp_path / 'started'}: no checkpoint there yet" in capsys.readouterr().err
    # a run that ended (killed) before its first save was told to wait for a checkpoint that never comes
    assert cli.main(["train", "cartpole", "--resume", str(tmp_path / "started" / "checkpoints")]) == 2
    assert (f"--resume {tmp_path / 'started' / 'checkpoints'}: no checkpoint there, and no process is running it "
            "(it ended before its first save: ") in capsys.readouterr().err


def test_command_counts_take_what_config_integers_take(capsys):
    from jaxlab.cli.common import whole_number

    assert [whole_number(text) for text in ("1000", "1_000", "1e3", "2.0", "-3")] == [1000, 1000, 1000, 2, -3]
    with pytest.raises(SystemExit):
        cli.main(["eval", "cartpole", "--checkpoint", "latest", "--episodes", "1.5"])
    assert "argument --episodes: '1.5' is not a whole number; write e.g. 1000, 1_000 or 1e3" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["sweep", "cartpole", "--trials", "ten"])
    assert "argument --trials: 'ten' is not a whole number" in capsys.readouterr().err


@pytest.mark.parametrize("argv, dest", [
    (["train", "cartpole", "--run-dir=~/x"], "run_dir"),
    (["train", "--resume=~/x"], "resume"),
    (["train", "cartpole", "--config=~/x"], "config"),
    (["train", "cartpole", "--profile=~/x"], "profile"),
    (["eval", "--checkpoint=~/x"], "checkpoint"),
    (["eval", "--checkpoint", "x", "--gif=~/x"], "gif"),
    (["plot", "~/x"], "run_dirs"),
    (["sweep", "cartpole", "--root=~/x"], "root"),
    (["build-env", "h.h", "--output=~/x"], "output"),
    (["train", "~/x"], "env"),  # the ENV of train, config, bench and sweep: a header's path (NAME.h)
    (["eval", "~/x", "--checkpoint", "run"], "env"),
    (["envs", "~/x"], "names"),
])
def test_every_path_option_takes_a_tilde_as_the_home_folder(monkeypatch, tmp_path, argv, dest):
    """--run-dir=~/x (the shell expands no ~ after '=', nor a quoted '~/x') was taken as a folder named '~'."""
    monkeypatch.setenv("HOME", str(tmp_path))
    value = getattr(cli.build_parser().parse_args(argv), dest)
    assert (value[0] if isinstance(value, list) else value) == str(tmp_path / "x")


@pytest.mark.parametrize("command", [["train", "--resume", "latest"], ["eval", "--checkpoint", "latest"]])
def test_a_header_env_written_with_a_tilde_is_read_from_the_home_folder(tmp_path, monkeypatch, capsys, command):
    """`jaxlab train '~/envs/walker.h' --resume latest` (a quoted ~, or ENV after '=' in a script) said
    'env header ~/envs/walker.h does not exist': the ENV of train and eval was the one path argument
    whose ~ was not the home folder. It is now, so the header's env is found (here: no run of it yet)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["new-env", "walker", str(tmp_path / "home" / "envs")]) == 0
    capsys.readouterr()
    assert cli.main([command[0], "~/envs/walker.h", *command[1:]]) == 2
    err = capsys.readouterr().err
    assert "no run of walker" in err and "does not exist" not in err, err


def test_a_run_dir_written_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    """`jaxlab train --run-dir=~/x` made ./~/x in the current folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "cartpole", "--train.total-timesteps", "256", "--vec.num-envs", "16",
                     "--log.dashboard", "none", "--run-dir=~/x"]) == 0
    assert (tmp_path / "home" / "x" / "metrics.jsonl").is_file() and not (tmp_path / "~").exists()


def test_eval_names_the_gif_rate_it_cannot_read_with_an_example(tmp_path, capsys):
    """--gif-fps x said only argparse's "invalid float value: 'x'"."""
    with pytest.raises(SystemExit) as end:
        cli.main(["eval", "cartpole", "--checkpoint", str(tmp_path / "none"), "--gif-fps", "x"])
    assert end.value.code == 2
    assert "argument --gif-fps: 'x' is not a number; write e.g. 1, 0.5 or 2e-1" in capsys.readouterr().err


def test_a_memory_fraction_given_on_a_cpu_is_named_once_as_doing_nothing(capsys, no_xla_memory_env):
    """--device.memory-fraction 0.3 on a CPU (it caps GPU memory) did nothing without a word."""
    import jax

    from jaxlab.cli.common import unused_flags_warning
    from jaxlab.config import load_config

    flags = ["--device.memory-fraction", "0.3"]
    assert unused_flags_warning(load_config("cartpole", flags=flags)[0], flags, "gpu") is None
    if jax.default_backend() != "cpu":
        pytest.skip("JAX sees a GPU here")
    assert cli.main(["config", "cartpole", *flags]) == 0
    err = capsys.readouterr().err
    assert err.count("--device.memory-fraction does nothing with JAX's devices cpu (it caps GPU memory)") == 1
    assert len([line for line in err.splitlines() if "memory-fraction" in line]) == 1
    assert cli.main(["config", "cartpole"]) == 0
    assert "memory-fraction" not in capsys.readouterr().err


def test_a_config_file_or_preset_given_twice_is_refused_not_the_first_dropped(tmp_path, capsys):
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text("[vec]\nnum_envs = 16\n")
    second.write_text("[train]\nseed = 7\n")
    with pytest.raises(SystemExit) as end:  # argparse kept the last file and dropped the first's num_envs
        cli.main(["config", "cartpole", "--config", str(first), "--config", str(second)])
    assert end.value.code == 2
    assert (f"jaxlab config: error: argument --config: given twice ({first}, then {second}); jaxlab reads one "
            "--config file: merge them into one") in capsys.readouterr().err
    with pytest.raises(SystemExit) as end:
        cli.main(["config", "cartpole", "--preset", "cpu", "--preset", "heavy"])
    assert end.value.code == 2
    assert "argument --preset: given twice (cpu, then heavy); give one --preset: a card then a workload size, " \
           "comma-separated (e.g. h100,heavy)" in capsys.readouterr().err
    assert cli.main(["config", "cartpole", "--config", str(first), "--config", str(first)]) == 0  # one file
    assert "num_envs = 16 " in capsys.readouterr().out


@pytest.mark.parametrize("argv, switch, given", [
    (["eval", "--checkpoint", "RUN", "--deterministic", "False"], "--deterministic", "False"),  # False was ENV
    (["eval", "cartpole", "--checkpoint", "RUN", "--render=0"], "--render", "0"),
    (["train", "--resume", "RUN", "--resume-any-env", "false"], "--resume-any-env", "false"),
])
def test_a_switch_given_a_boolean_cleanrls_way_is_refused_naming_it(tmp_path, capsys, argv, switch, given):
    """`--deterministic False` turned the switch on and took False for ENV ("a checkpoint of 'cartpole', not
    'False'"); `sweep --show False` showed."""
    run = tmp_path / "run"
    run.mkdir()
    assert cli.main([str(run) if a == "RUN" else a for a in argv]) == 2
    assert capsys.readouterr().err == (f"jaxlab {argv[0]}: error: {switch} takes no value (given {given!r}): write "
                                       f"{switch} alone to turn it on, or leave it out for off\n")
    assert list(run.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--policy.mlp-layers", "64", "64", "32", "--train.seed", "1"], "unexpected argument '64' after "
     "--policy.mlp-layers 64: a config flag takes one value; a list is one value: --policy.mlp-layers 64,64,32 (or "
     "quoted: \"64 64 32\")"),
    (["--policy.mlp-layers=64", "64"], "unexpected argument '64' after --policy.mlp-layers 64: a config flag takes "
     "one value; a list is one value: --policy.mlp-layers 64,64 (or quoted: \"64 64\")"),
    (["--train.learning-rate", "3e-4", "1e-3"], "unexpected argument '1e-3' after --train.learning-rate 3e-4: a "
     "config flag takes one value; give one: --train.learning-rate 3e-4"),
])
def test_numbers_after_a_flags_value_name_the_flag_and_how_to_write_a_list(capsys, argv, message):
    """`--policy.mlp-layers 64 64` (argparse's nargs habit) got "unexpected argument '64'; config flags look like
    --train.seed 1", with no word of the flag it belonged to."""
    assert cli.main(["config", "cartpole", *argv]) == 2
    assert f"jaxlab config: error: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("given, meant", [("charts/episodic_return", "episode_return"), ("losses/clipfrac",
                                          "clip_fraction"), ("charts/SPS", "sps"), ("Explained_Variance",
                                          "explained_variance")])
def test_plot_names_the_metric_a_cleanrl_name_means(tmp_path, capsys, given, meant):
    """CleanRL's TensorBoard names (charts/episodic_return, losses/clipfrac, charts/SPS) got the list of metrics
    alone, with no word of the one they mean."""
    pytest.importorskip("matplotlib")
    write_run(tmp_path / "run", [json.dumps({"update": 1, "global_step": 64, "wall_time": 1, "sps": 9.0,
                                             "clip_fraction": 0.1, "explained_variance": 0.5, "episode_return": 1.0})])
    assert cli.main(["plot", str(tmp_path / "run"), "--metric", given, "-o", str(tmp_path / "c.png")]) == 2
    assert f"no run has values of {given!r}; did you mean {meant!r}? the runs' metrics: " in capsys.readouterr().err


# `codes`: a PufferLib-style grid of small uint8 codes (0 empty, 1 agent), one dimension.
CODES_H = r"""
#include "core.h"
typedef struct { float episode_return; } CodesLog;
typedef struct {
    uint8_t *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    CodesLog log;
    int cells, tick;
    cenv_rng rng;
} Codes;
static const cenv_param codes_params[] = {{"cells", 9, 2, 64, 1, "cells of the line"}};
static const char *const codes_log_names[] = {"episode_return"};
static void codes_spaces(const double *params, cenv_spaces *out) {
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = (int64_t)params[0];
    out->obs_dtype = CENV_DTYPE_UINT8;
    out->action_kind = CENV_ACTION_DISCRETE;
    out->action_ndim = 1;
    out->action_nvec[0] = 2;
}
static void codes_init(Codes *env, const double *params) { env->cells = (int)params[0]; }
static void codes_reset(Codes *env) {
    env->tick = 0;
    memset(env->observations, 0, (size_t)env->cells);
    env->observations[0] = 1;
}
static int codes_step(Codes *env) {
    env->tick += 1;
    env->terminals[0] = (uint8_t)(env->tick >= 4);
    if (env->terminals[0]) env->log.episode_return = 0.0f;
    return env->terminals[0];
}
CENV_ENV(codes, Codes, CodesLog, "small uint8 codes in one dimension")
"""


def test_jaxlab_config_says_what_obs_norm_auto_does_with_uint8_codes_and_pixels(tmp_path, capsys):
    """A PufferLib Ocean grid of uint8 codes (0, 1, 2) trained with train.obs_norm auto, which took uint8 for
    pixels: divided by 255 and not normalised, the codes reached the network as at most 0.008 (a warning said
    so). auto now normalises uint8 of one dimension, and `jaxlab config` says what auto resolved to: on for
    codes, off for an image (spot's [8, 8, 3]), nothing when it is set."""
    header = tmp_path / "codes.h"
    header.write_text(CODES_H)
    assert cli.main(["config", str(header)]) == 0
    out, err = capsys.readouterr()
    assert "# train.obs_norm auto: on: uint8[9], one dimension, are codes, normalised\n" in out, out
    assert "warning" not in err and "pixels" not in out + err, err
    assert cli.main(["config", "spot"]) == 0
    assert "# train.obs_norm auto: off: uint8[8, 8, 3] are pixels, divided by 255" in capsys.readouterr().out
    assert cli.main(["config", str(header), "--train.obs-norm", "false"]) == 0
    assert "train.obs_norm auto" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, option, first, second", [
    (["train", "cartpole", "--run-dir", "A", "--run-dir", "B"], "--run-dir", "A", "B"),
    (["train", "--resume", "A", "--resume=B"], "--resume", "A", "B"),
    (["eval", "--checkpoint", "A", "--checkpoint", "B"], "--checkpoint", "A", "B"),
    (["eval", "--checkpoint", "A", "--episodes", "3", "--episodes", "4"], "--episodes", "3", "4"),
    (["bench", "cartpole", "--updates", "2", "--updates", "5"], "--updates", "2", "5"),
    (["sweep", "cartpole", "--parallel", "2", "--parallel", "3"], "--parallel", "2", "3"),
    (["sweep", "cartpole", "--sweep", "A", "--sweep", "B"], "--sweep", "A", "B"),
])
def test_an_option_of_one_value_given_twice_is_refused_not_the_first_dropped(tmp_path, monkeypatch, capsys, argv,
                                                                            option, first, second):
    """argparse kept the last value in silence (`--run-dir a --run-dir b` trained into b), as it did for
    --config and --preset before they were refused."""
    monkeypatch.chdir(tmp_path)  # what a command would write without the refusal
    with pytest.raises(SystemExit) as end:
        cli.main(argv)
    assert end.value.code == 2
    err = capsys.readouterr().err
    assert (f"error: argument {option}: given twice ({first}, then {second}); give {option} once, with the value "
            "you mean\n") in err


def test_a_path_option_given_twice_as_one_path_written_two_ways_is_taken():
    """`--run-dir runs/a --run-dir ./runs/a/` (a script's path beside a typed one) was refused as two values,
    'given twice (runs/a, then ./runs/a/)': the same folder. Two folders are still refused."""
    parser = cli.build_parser()
    args, _ = parser.parse_known_args(["train", "cartpole", "--run-dir", "runs/a", "--run-dir", "./runs/a/"])
    assert os.path.abspath(args.run_dir) == os.path.abspath("runs/a")
    args, _ = parser.parse_known_args(["eval", "--checkpoint", "runs/a/checkpoints/8", "--checkpoint=runs/a/x/../"
                                       "checkpoints/8"])
    assert args.checkpoint.endswith("8")
    with pytest.raises(SystemExit):
        parser.parse_known_args(["train", "cartpole", "--run-dir", "runs/a", "--run-dir", "runs/b"])
    with pytest.raises(SystemExit):  # not a path option: text compared as written
        parser.parse_known_args(["eval", "--checkpoint", "A", "--gif-size", "64x64", "--gif-size", "64x64 "])


@pytest.mark.parametrize("argv", [["config", "cartpole", "memory"],
                                  ["config", "cartpole", "--train.seed", "1", "memory"],
                                  ["train", "memory", "cartpole", "--run-dir", "R"], ["sweep", "cartpole", "lure"]])
def test_env_given_twice_is_named_as_such(tmp_path, monkeypatch, capsys, argv):
    """`jaxlab config cartpole memory` said 'unexpected argument 'memory'; config flags look like --train.seed 1':
    the second ENV was read as a config flag. It is one line naming both; the same ENV twice is one."""
    monkeypatch.chdir(tmp_path)
    envs = [word for word in argv[1:] if word in ("cartpole", "memory", "lure")]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"jaxlab {argv[0]}: error: ENV given twice ({envs[0]}, then {envs[1]}); a command runs one env: give ENV once"]
    assert not (tmp_path / "R").exists()


def test_env_given_twice_as_one_or_after_an_unknown_option_is_not_a_second_env(capsys):
    assert cli.main(["config", "cartpole", "cartpole", "--vec.num-envs", "16"]) == 0
    assert "num_envs = 16 " in capsys.readouterr().out
    header = os.path.join(os.path.dirname(__file__), "..", "examples", "envs", "drone.h")
    assert cli.main(["config", header, os.path.abspath(header)]) == 0  # one header written two ways
    capsys.readouterr()
    assert cli.main(["config", "cartpole", "--cuda", "False"]) == 2  # CleanRL's flag keeps its own line
    assert "unexpected argument '--cuda'; jaxlab trains on the devices JAX sees" in capsys.readouterr().err


def test_an_option_given_twice_with_one_value_is_taken(capsys):
    assert cli.main(["config", "cartpole", "--vec.num-envs", "16", "--preset", "cpu", "--preset", "cpu"]) == 0
    assert "num_envs = 16 " in capsys.readouterr().out
    args, _ = cli.build_parser().parse_known_args(["eval", "--checkpoint", "A", "--episodes", "3", "--episodes=3"])
    assert args.episodes == 3


def test_a_resumed_sweep_runs_with_the_studys_parallel_and_says_so_when_its_file_sets_another(tmp_path, capsys):
    """A resume with a --sweep FILE whose parallel differs from the study's ran the study's without a word, as if
    the file's were taken: the sweep now says which it runs and how to run the file's."""
    pytest.importorskip("optuna")
    space = tmp_path / "space.toml"
    space.write_text('[sweep]\nparallel = 1\n"train.gamma" = {low = 0.95, high = 0.999}\n')
    sweep = ["sweep", "cartpole", "--root", str(tmp_path), "--study", "p", "--trials", "0", "--sweep", str(space)]
    assert cli.main(sweep) == 0
    capsys.readouterr()
    space.write_text(space.read_text().replace("parallel = 1", "parallel = 2"))
    assert cli.main(sweep) == 0
    out, err = capsys.readouterr()
    assert "sweep p (resumed): cartpole, 0 trials (0 in the study), 1 at a time" in out
    assert (f"jaxlab sweep: the study runs 1 at a time, as it was created; {space}'s parallel = 2 is a new study's "
            "default (--parallel 2 runs 2 at a time on this resume)\n") in err
    assert cli.main([*sweep, "--parallel", "2"]) == 0
    out, err = capsys.readouterr()
    assert "2 at a time" in out and "as it was created" not in err

"""`jaxlab train --profile DIR --profile-updates A:B`: a profiler trace of exactly those updates."""

import re
from types import SimpleNamespace

import jax
import pytest

from jaxlab.config import load_config
from jaxlab.run.loop import train_run
from jaxlab.run.profile import ProfileUpdates, parse_updates


@pytest.mark.parametrize("text, expected", [("2:3", (2, 3)), ("10:12", (10, 12)), ("5", (5, 5)), (" 1 : 1 ", (1, 1))])
def test_parse_updates(text, expected):
    assert parse_updates(text) == expected


@pytest.mark.parametrize("text", ["3:2", "0:1", "a:b", "2:", "-1:2", ""])
def test_bad_update_ranges_name_the_text_and_the_form(text):
    with pytest.raises(ValueError, match=rf"^--profile-updates {text!r} is not A:B with 1 <= A <= B"):
        parse_updates(text)


class FakeTrainer:
    def __init__(self, update_index=0, num_updates=7):
        self.update_index, self.state = update_index, jax.numpy.zeros(())
        self.sizes = SimpleNamespace(num_updates=num_updates)


@pytest.mark.parametrize("first, last, resumed_at, traced", [
    (2, 3, 0, [2, 3]), (1, 1, 0, [1]), (1, 2, 0, [1, 2]), (3, 5, 0, [3, 4, 5]),
    (2, 3, 2, [3]),      # resumed after update 2: update 3 is still traced
    (2, 3, 5, []),       # resumed past the range: nothing (and a warning)
    (7, 9, 0, [7]),      # the run ends at update 7: traced until its end
    (8, 9, 0, []),       # past the run's last update: nothing, no trace started after it (and a warning)
])
def test_the_trace_covers_exactly_the_updates_asked(monkeypatch, tmp_path, first, last, resumed_at, traced):
    events, warnings = [], []
    monkeypatch.setattr(jax.profiler, "start_trace", lambda folder: events.append("start"))
    monkeypatch.setattr(jax.profiler, "stop_trace", lambda: events.append("stop"))
    trainer = FakeTrainer(resumed_at)
    profile = ProfileUpdates(tmp_path, first, last, warn=warnings.append)
    profile.start(trainer)
    inside = []
    for update in range(resumed_at + 1, 8):
        if profile.tracing:  # the trace runs while this update runs
            inside.append(update)
        profile(trainer, {"update": update})
    profile.close(trainer)
    assert inside == traced
    assert events == (["start", "stop"] if traced else [])
    if traced:
        assert warnings == []
    else:
        assert warnings == [f"--profile-updates {first}:{last} is outside this run's updates {resumed_at + 1}..7, so "
                            f"no trace would be written; e.g. --profile-updates {max(resumed_at + 1, 2)}:"
                            f"{max(resumed_at + 1, 2) + 1}"]


@pytest.mark.parametrize("first, last, said", [(2, 3, "updates 2-3"), (7, 9, "update 7"), (3, 3, "update 3")])
def test_the_run_names_the_updates_traced_and_the_folder_jax_wrote(monkeypatch, tmp_path, first, last, said):
    """The run said nothing of its trace: JAX writes it to DIR/plugins/profile/<time>, a folder of its
    choosing beside the traces of earlier runs, and a range past the run's end traces fewer updates."""
    older = tmp_path / "plugins" / "profile" / "2026_01_01_00_00_00"
    older.mkdir(parents=True)
    written = tmp_path / "plugins" / "profile" / "2026_11_24_21_43_08"
    monkeypatch.setattr(jax.profiler, "start_trace", lambda folder: None)
    monkeypatch.setattr(jax.profiler, "stop_trace", lambda: written.mkdir())
    trainer = FakeTrainer()
    profile = ProfileUpdates(tmp_path, first, last)
    profile.start(trainer)
    assert profile.where() is None
    for update in range(1, 8):
        profile(trainer, {"update": update})
    profile.close(trainer)
    assert profile.where() == (f"profile of {said} in {written} (TensorBoard's profile plugin: tensorboard --logdir "
                               f"{tmp_path}; Perfetto: its .trace.json.gz)")


def test_a_trace_that_cannot_start_is_a_warning_and_the_run_goes_on(monkeypatch, tmp_path):
    def refuse(folder):
        raise RuntimeError("a profiler session is already running")

    monkeypatch.setattr(jax.profiler, "start_trace", refuse)
    warnings = []
    profile = ProfileUpdates(tmp_path / "trace", 1, 2, warn=warnings.append)
    trainer = FakeTrainer()
    profile.start(trainer)
    assert profile(trainer, {"update": 1}) is False and not profile.tracing
    profile.close(trainer)
    assert warnings == [f"--profile {tmp_path / 'trace'}: the trace could not start (RuntimeError: a profiler "
                        "session is already running); training goes on without it"]


@pytest.mark.parametrize("flags, message", [
    (["--profile", "AFILE"], r"--profile '.*AFILE': cannot write there \(.*AFILE is a file, not a folder\); pass a "
                               r"folder you can write"),
    (["--profile", "AFILE/sub"], r"--profile '.*AFILE/sub': cannot write there \(.*AFILE is a file, not a folder\)"),
    (["--profile", ""], r"--profile '': cannot write there \(an empty name\)"),
    (["--profile", "TRACE", "--profile-updates", "5:6"],
     r"--profile-updates 5:6 is outside this run's updates 1..4, so no trace would be written; e.g. "
     r"--profile-updates 2:3"),
    (["--profile-updates", "2:3"], r"--profile-updates 2:3 needs --profile DIR"),
    # argparse took a value starting with -1 for an option: "argument --profile-updates: expected one argument"
    (["--profile", "TRACE", "--profile-updates", "-1:2"], r"^jaxlab train: error: --profile-updates '-1:2' is not "
                                                          r"A:B with 1 <= A <= B"),
    # an empty range (a shell variable left unset) traced updates 2:3, the default, without a word
    (["--profile", "TRACE", "--profile-updates", ""],
     r"^jaxlab train: error: --profile-updates '' is not A:B with 1 <= A <= B \(updates counted from 1\), e.g. "
     r"--profile-updates 2:3\n$"),
])
def test_a_profile_the_run_cannot_write_is_refused_before_training(tmp_path, capsys, flags, message):
    from jaxlab import cli

    (tmp_path / "AFILE").write_text("")
    flags = [f.replace("AFILE", str(tmp_path / "AFILE")).replace("TRACE", str(tmp_path / "trace")) for f in flags]
    code = cli.main(["train", "cartpole", "--vec.num-envs", "16", "--train.total-timesteps", "1024",
                     "--log.dashboard", "none", "--run-dir", str(tmp_path / "run"), *flags])
    assert code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "trace").exists()


def test_a_profile_folder_written_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    """--profile=~/traces (the shell expands no ~ after "=", nor a quoted one) wrote the trace to a folder
    named "~" in the current folder, as paths elsewhere in jaxlab (--device.compile-cache, env headers) do not."""
    from jaxlab import cli

    folders = []
    monkeypatch.setattr(jax.profiler, "start_trace", lambda folder: folders.append(folder))
    monkeypatch.setattr(jax.profiler, "stop_trace", lambda: None)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "cartpole", "--vec.num-envs", "16", "--train.total-timesteps", "512",
                     "--log.dashboard", "none", "--run-dir", str(tmp_path / "run"), "--profile=~/traces",
                     "--profile-updates", "1"]) == 0
    assert folders == [str(tmp_path / "home" / "traces")] and not (tmp_path / "~").exists()


@pytest.mark.slow
def test_a_run_with_profile_writes_a_trace(tmp_path):
    config, _ = load_config("cartpole", flags=["--vec.num-envs", "16", "--train.total-timesteps", "1024",
                                               "--log.dashboard", "none"])
    result = train_run(config, tmp_path / "run", profile=ProfileUpdates(tmp_path / "trace", 2, 3))
    assert result.error is None and len(result.records) == 4
    (trace,) = (tmp_path / "trace" / "plugins" / "profile").glob("*/*.xplane.pb")
    assert trace.stat().st_size > 1000


def test_a_resumed_run_with_no_update_left_says_so_instead_of_naming_an_empty_range(tmp_path):
    profile = ProfileUpdates(tmp_path, 2, 3)
    assert profile.missed(8, 7) == f"--profile {tmp_path}: this run has no update left to trace (it is at its last, 7)"
    assert profile.missed(1, 7) is None and profile.missed(3, 7) is None

"""Start-up: the persistent compilation cache (device.compile_cache) and the launch-to-first-update
time in the metrics, the summary and the terminal."""

import json
import os
import subprocess
import sys

import pytest

from jaxlab import __version__
from jaxlab.run.compile_cache import cache_folder, verdict


def test_cache_folder_per_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("JAXLAB_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_folder("auto") == tmp_path / "mine" / "xla" / f"jaxlab-{__version__}"
    monkeypatch.delenv("JAXLAB_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder("auto") == tmp_path / "xdg" / "jaxlab" / "xla" / f"jaxlab-{__version__}"
    assert cache_folder(str(tmp_path / "here")) == tmp_path / "here" / f"jaxlab-{__version__}"
    assert cache_folder("off") is None


def test_verdict_of_hits_and_misses():
    zero = {"hits": 0, "misses": 0}
    assert verdict(zero, zero) == "off"
    assert verdict(zero, {"hits": 3, "misses": 0}) == "hit"
    assert verdict({"hits": 3, "misses": 1}, {"hits": 3, "misses": 4}) == "miss"
    assert verdict(zero, {"hits": 2, "misses": 1}) == "partial (2 of 3)"


def train(tmp_path, name: str, *flags: str) -> tuple[subprocess.CompletedProcess, dict, list[dict]]:
    run_dir = tmp_path / name
    env = {**os.environ, "JAXLAB_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--vec.num-envs", "16",
                             "--train.total-timesteps", "512", "--run-dir", str(run_dir), "--log.dashboard", "plain",
                             *flags], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return result, json.loads((run_dir / "summary.json").read_text()), records


@pytest.mark.slow
def test_a_second_run_of_the_same_shapes_loads_every_executable_from_the_cache(tmp_path):
    first, first_summary, first_records = train(tmp_path, "first")
    assert first_records[0]["compile_cache"] == "miss"
    folder = tmp_path / "cache" / "xla" / f"jaxlab-{__version__}"
    assert any(folder.iterdir())
    second, second_summary, second_records = train(tmp_path, "second")
    assert second_records[0]["compile_cache"] == "hit"
    assert all("compile_cache" not in r for r in second_records[1:])
    assert second_records[-1]["compiles"] == 3  # traced as ever; only XLA's compile is skipped
    for result, summary in ((first, first_summary), (second, second_summary)):
        (start,) = summary["starts"]
        assert start["update"] == 1 and 0 < start["launch_to_first_update_s"] < 300
        assert f"first update {start['launch_to_first_update_s']:.1f} s after launch; compile cache " \
               f"{start['compile_cache']}" in result.stdout
    assert "compile_cache" not in second_summary["final"]
    _, _, off_records = train(tmp_path, "off", "--device.compile-cache", "off")
    assert off_records[0]["compile_cache"] == "off"


def test_a_cache_folder_that_cannot_be_made_is_an_error_when_named_and_a_warning_under_auto(monkeypatch, tmp_path,
                                                                                            capsys):
    import jax

    from jaxlab.config import ConfigError
    from jaxlab.run import compile_cache

    updates = []
    monkeypatch.setattr(jax.config, "update", lambda name, value: updates.append(name))
    monkeypatch.setattr(compile_cache, "_state", {"listening": True, "dir": None, "setting": None})
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ConfigError, match=rf"device.compile_cache='{afile}/sub': cannot create {afile}/sub/jaxlab-"
                                          r".*; give a folder you can write, e.g. --device.compile-cache .*, or off"):
        compile_cache.enable(str(afile / "sub"))
    assert updates == []
    monkeypatch.setenv("JAXLAB_CACHE_DIR", str(afile))
    assert compile_cache.enable("auto") == "compile cache off"  # the run goes on, and says why
    # the folder came from $JAXLAB_CACHE_DIR: the line names it (it named only device.compile_cache)
    assert f"warning: compile cache off: cannot create {afile}/xla/jaxlab-{__version__} (from $JAXLAB_CACHE_DIR) (" \
        in capsys.readouterr().err
    assert updates == []
    assert cache_folder("OFF") is None and cache_folder(" Auto ") == afile / "xla" / f"jaxlab-{__version__}"


def test_an_empty_cache_setting_is_refused():
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "config", "cartpole", "--device.compile-cache", ""],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "device.compile_cache='' is empty; write auto, off or a folder" in result.stderr


COMPILED_NAMES = """
import logging, sys
import jax
jax.config.update("jax_log_compiles", True)
names = []
class Names(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Compiling jit("):
            names.append(message[len("Compiling jit("):message.index(")")])
logging.getLogger("jax._src.interpreters.pxla").addHandler(Names())
from jaxlab.config import load_config
from jaxlab.run.loop import train
config, _ = load_config("cartpole", flags=["--vec.num-envs", "16", "--train.total-timesteps", "512",
                                           "--train.reward-scale", "auto", "--device.compile-cache", "off"])
train(config)
print(sorted(names))
"""


def test_start_up_compiles_the_hot_functions_and_three_small_run_once_ones_only():
    """Nothing at start-up compiles an executable of its own (an eager jnp.zeros, a key split outside
    jit: tens of ms each): only the step, the finish and the update, the run-once init (keys, policy
    and optimizer), the group keys' fold and each update's key split, each once in a 4-update run."""
    result = subprocess.run([sys.executable, "-c", COMPILED_NAMES], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    names = eval(result.stdout.strip().splitlines()[-1])
    assert names == sorted(["init_state", "fold_in", "step", "finish", "<lambda>", "prepare_and_update"])


_INTERRUPTED_IMPORT = """
import builtins, sys
real_import = builtins.__import__
def interrupted(name, *args, **kwargs):
    if name == "jaxlab.cli":  # what a Ctrl-C while Python imports the command line looks like
        raise KeyboardInterrupt
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupted
from jaxlab.launch import main
sys.exit(main())
"""


def test_ctrl_c_while_the_command_line_is_imported_is_one_line_and_exit_130():
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130
    assert done.stderr.strip() == "jaxlab: interrupted"


_INTERRUPTED_JAX_IMPORT = """
import builtins, sys
real_import = builtins.__import__
def interrupted(name, *args, **kwargs):
    if name == "jaxlab.checkpoint" and "jaxlab.cli" in sys.modules and name not in sys.modules:
        raise KeyboardInterrupt  # a Ctrl-C while the command imports JAX, after the command line is imported
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupted
sys.argv = ["jaxlab", "eval", "cartpole", "--checkpoint", "nowhere"]
from jaxlab.launch import main
sys.exit(main())
"""


def test_ctrl_c_while_a_command_imports_jax_is_one_line_and_exit_130():
    """It was a traceback, and death by SIGINT: the command's first import of JAX came before its guard."""
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_JAX_IMPORT], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stderr) == (130, "jaxlab eval: interrupted\n")


def test_ctrl_c_turned_into_another_error_is_an_interrupt_and_other_errors_stay_errors(monkeypatch, capsys):
    """A Ctrl-C during `jaxlab eval` that a library turned into an error of its own (a RuntimeError while
    Orbax was imported, asyncio's "Event loop is closed") was a traceback and exit 1: it is one line and 130,
    as a plain KeyboardInterrupt; an error with no KeyboardInterrupt behind it still propagates."""
    from jaxlab import cli
    from jaxlab.checkpoint import CheckpointError
    from jaxlab.cli import train
    from jaxlab.run import signals

    monkeypatch.setattr(signals, "_interrupted", [False])  # as interrupted() set it: the process would end at once

    def wrapped(error):
        def run(args):
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt:
                raise error  # its __context__ is the KeyboardInterrupt
        return run

    for error in (RuntimeError("Event loop is closed"), CheckpointError("checkpoint x is unreadable: KeyError")):
        monkeypatch.setattr(train, "eval_command", wrapped(error))
        assert cli.main(["eval", "cartpole", "--checkpoint", "x"]) == 130
        assert capsys.readouterr().err == "jaxlab eval: interrupted\n" and signals._interrupted == [True]
        signals._interrupted[0] = False

    def fails(args):
        raise RuntimeError("Event loop is closed")

    monkeypatch.setattr(train, "eval_command", fails)
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        cli.main(["eval", "cartpole", "--checkpoint", "x"])
    assert signals._interrupted == [False]


def test_the_command_entry_imports_nothing_heavy():
    probe = "import sys, jaxlab.launch; print(sorted(m for m in ('numpy', 'jax', 'jaxlab.cli', 'jaxlab.env') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stderr
    import tomllib
    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["scripts"]["jaxlab"] == "jaxlab.launch:main"


def test_python_dash_m_jaxlab_is_the_jaxlab_command():
    """`python -m jaxlab train cartpole` as for other packages with a command (it said "No module named
    jaxlab.__main__")."""
    result = subprocess.run([sys.executable, "-m", "jaxlab", "train", "--help"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: jaxlab train")
    version = subprocess.run([sys.executable, "-m", "jaxlab", "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout == f"jaxlab {__version__}\n", version.stderr


def test_a_later_trainer_of_the_process_counts_its_start_from_when_it_was_built(monkeypatch):
    """A second run from Python (jaxlab.run.loop.train twice) recorded launch_to_first_update_s from the
    process's start, so the time of every run before it: here a process started 1,000 s ago."""
    import jaxlab.run.launch as launch
    from jaxlab.config import load_config
    from jaxlab.run.loop import train

    monkeypatch.setattr(launch, "seconds_since_launch", lambda: 1000.0)
    config, _ = load_config("cartpole", flags=["--vec.num-envs", "8", "--train.minibatch-size", "128",
                                               "--policy.hidden-size", "16", "--train.total-timesteps", "128"])
    monkeypatch.setattr(launch, "_trainers", 0, raising=False)  # as if no trainer had been built yet
    assert train(config)[0]["launch_to_first_update_s"] == 1000.0  # the process's first trainer
    (later,) = train(config)
    assert 0 < later["launch_to_first_update_s"] < 100

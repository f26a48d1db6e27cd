"""A reader of jaxlab's output that exits early (`jaxlab train ENV | head -5`): training stops as on
SIGTERM (the update finishes, a checkpoint is saved, summary.json says stopped, exit 0); other commands
end quietly. Before, the run ended with BrokenPipeError in summary.json and no final checkpoint (or,
with only stdout a pipe, went on to its end with its terminal output off), and a command whose
buffered output met a closed pipe printed "Exception ignored ... BrokenPipeError" and exited 120."""

import json
import os
import subprocess
import sys

import pytest

from jaxlab import checkpoint

SMALL = ["--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16",
         "--policy.hidden-size", "16"]
UPDATES = 2000  # of 64 steps: the reader leaves after the first line, long before the last update


def environment(unbuffered: bool) -> dict:
    """The test's environment with Python's output buffered (as for a user's pipe) or unbuffered."""
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("unbuffered, both", [(False, False), (True, True)], ids=["stdout", "stdout-and-stderr"])
def test_a_reader_that_exits_early_stops_the_run_with_a_checkpoint_as_sigterm_does(tmp_path, unbuffered, both):
    """`jaxlab train ... | head -1` (stdout alone a pipe, buffered) and `2>&1 | head -1` (both streams
    the same pipe, unbuffered): the reader closes the pipe after the first line."""
    run = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", *SMALL, "--run-dir", str(run),
                                "--train.total-timesteps", str(64 * UPDATES), "--log.interval", "0.001",
                                "--log.dashboard", "plain"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT if both else subprocess.PIPE,
                               text=True, env=environment(unbuffered))
    first = process.stdout.readline()
    process.stdout.close()  # the reader exits
    try:
        err = process.communicate(timeout=300)[1] or ""
    finally:
        if process.poll() is None:
            process.kill()
    assert first.startswith("jaxlab train cartpole:"), first
    assert process.returncode == 0, err  # as a run stopped by SIGTERM
    assert "Traceback" not in err and "Exception ignored" not in err, err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "SIGPIPE" and summary["error"] is None, summary
    updates = summary["updates"]
    assert 1 <= updates < UPDATES
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["update"] == updates
    saved = checkpoint.step_dirs(run / "checkpoints")
    assert saved[0].name == str(updates) and summary["checkpoint"] == str(saved[0])
    log = (run / "run.log").read_text()
    reader = "stdout's and stderr's readers" if both else "stdout's reader"
    assert f"{reader} exited (broken pipe): no more output there; finishing this update, then saving a " \
           "checkpoint, as on SIGTERM" in log, log
    if not both:
        assert f"\nSIGPIPE: {reader} exited (broken pipe)" in f"\n{err}", err
        assert f"stopped by SIGPIPE after update {updates}; saved checkpoint {saved[0]}" in err, err


@pytest.mark.parametrize("command", [["config", "cartpole"], ["envs"], ["presets"], ["runs", "EMPTY"], ["--version"]],
                         ids=" ".join)
def test_a_command_whose_reader_exits_early_ends_quietly(command, tmp_path):
    """`jaxlab config cartpole | head -1`, with the reader gone before anything is written: exit 0 and
    nothing on stderr (like `git log | head`)."""
    command = [str(tmp_path) if word == "EMPTY" else word for word in command]
    process = subprocess.Popen([sys.executable, "-m", "jaxlab.cli", *command], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=environment(unbuffered=False))
    process.stdout.close()  # before the command has started: its first write finds the reader gone
    try:
        err = process.communicate(timeout=300)[1]
    finally:
        if process.poll() is None:
            process.kill()
    assert (process.returncode, err) == (0, "")


class ReaderGone:
    """A stream whose reader has left: every write and flush raises BrokenPipeError."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def test_a_pipe_found_broken_when_the_command_ends_stops_nothing(tmp_path, monkeypatch):
    """StopSignals' exit flushes what stdout still holds: a broken pipe found there (after an error, or
    Ctrl-C, ended the command) said 'finishing this update, then saving a checkpoint' and set SIGPIPE,
    though nothing was running any more."""
    from jaxlab.run import signals

    monkeypatch.setattr(signals, "_silence", lambda fd, stream: None)  # leave pytest's own descriptors alone
    monkeypatch.setattr(signals, "reader_gone", lambda fd: False)
    said = []
    monkeypatch.setattr(signals, "_say", said.append)
    monkeypatch.setattr(sys, "stdout", ReaderGone())
    with signals.StopSignals(pipes=True) as stop:
        stop.log_to(tmp_path / "run.log")
    assert stop.received is None and stop.broken == ["stdout"]
    assert said == ["SIGPIPE: stdout's reader exited (broken pipe) after the run ended: no more output there; "
                    "nothing was lost\n"]
    assert "finishing this update" not in (tmp_path / "run.log").read_text()

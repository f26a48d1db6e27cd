"""One process per run dir: a second `jaxlab train` on a run dir in use exits 2 naming the owner, and
the lock of a process that died is taken over."""

import os
import subprocess
import sys
import time

import pytest

from jaxlab import checkpoint
from jaxlab.run.lock import RunDirInUse, RunDirLock

SMALL = ["--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16",
         "--policy.hidden-size", "16", "--log.dashboard", "none"]


def jaxlab(*args):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True, timeout=300)


def test_a_second_run_on_a_run_dir_in_use_exits_2_naming_the_owner(tmp_path):
    run = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", *SMALL,
                              "--train.total-timesteps", "10_000_000", "--checkpoint.interval", "1", "--run-dir", str(run)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not checkpoint.step_dirs(run / "checkpoints"):
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        second = jaxlab("train", "cartpole", *SMALL, "--train.total-timesteps", "640", "--resume", str(run))
        assert second.returncode == 2 and "Traceback" not in second.stderr
        assert f"run dir {run} is in use by process {first.pid} (" in second.stderr
        assert "pass another --run-dir" in second.stderr
        assert first.poll() is None  # the owner goes on
    finally:
        first.kill()
        first.communicate()
    updates = [line for line in (run / "metrics.jsonl").read_text().splitlines() if line]
    assert len(updates) == len(set(updates))  # no record was written twice


def test_the_lock_of_a_dead_process_is_taken_over(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom jaxlab.run.lock import RunDirLock\n"
                               "with RunDirLock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(600)\n",
                               str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunDirInUse, match=f"in use by process {holder.pid}"):
        with RunDirLock(tmp_path):
            pass
    holder.kill()
    holder.wait()
    assert f"process {holder.pid}" in (tmp_path / ".lock").read_text()  # a stale lock file is left
    with RunDirLock(tmp_path):
        assert (tmp_path / ".lock").read_text().startswith(f"process {os.getpid()} ")
    result = jaxlab("train", "cartpole", *SMALL, "--train.total-timesteps", "128", "--run-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr

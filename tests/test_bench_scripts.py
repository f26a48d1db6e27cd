"""The benchmark scripts' and learn.py's argument handling: a bad count or a flag the config refuses is
one line and exit status 2, never a traceback, and nothing is run or written (their figures are speed,
measured by hand, not tested)."""

import json
import os
import runpy
import signal
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.mark.parametrize("script, args, message", [
    ("bench_update.py", ["--repeats", "0"],
     "bench_update.py: error: argument --repeats: '0' is not a whole number >= 1"),
    ("bench_update.py", ["--minibatch", "7", "--unroll", "1"],
     "bench_update.py: error: train.minibatch_size=7 must be a multiple of train.bptt_horizon=16"),
    ("bench_overhead.py", ["--rollouts", "0"],
     "bench_overhead.py: error: argument --rollouts: '0' is not a whole number >= 1"),
    ("bench_overhead.py", ["--env", "target", "--agents", "12"],
     "bench_overhead.py: error: --agents 12: target has 8 agents per env, so the agents must be a multiple of 8, "
     "e.g. --agents 8"),
    ("bench_overhead.py", ["--env", "nosuchenv"], "bench_overhead.py: error: --env nosuchenv: unknown env 'nosuchenv'"),
    ("bench_train.py", ["--window", "0"], "bench_train.py: error: argument --window: '0' is not a whole number >= 1"),
    ("bench_train.py", ["--sps-only", "--agents", "8", "--flags", "--vec.groups", "3"],
     "bench_train.py: error: vec.groups=3 must divide vec.num_envs=8"),
    ("bench_train.py", ["--sps-only", "--env", "target", "--agents", "12"],
     "bench_train.py: error: --agents 12: target has 8 agents per env, so the agents must be a multiple of 8, "
     "e.g. --agents 8"),
    ("bench_train.py", ["--scaling", "--agents", "8", "--flags", "--train.nope", "1"],
     "bench_train.py: error: unknown config key 'train.nope'"),
    ("cards_vs_greedy.py", ["--evals", "0"],
     "cards_vs_greedy.py: error: argument --evals: '0' is not a whole number >= 1"),
    ("cards_vs_greedy.py", ["--episodes", "0"],
     "cards_vs_greedy.py: error: argument --episodes: '0' is not a whole number >= 1"),
    ("cards_vs_greedy.py", ["--steps", "nan"],
     "cards_vs_greedy.py: error: argument --steps: 'nan' is not a finite number > 0"),
    ("cards_vs_greedy.py", ["--", "--vec.num-envs", "8"],
     "cards_vs_greedy.py: error: train.minibatch_size=256 must divide the batch of 128 (8 envs x 1 agent x horizon "
     "16); e.g. --train.minibatch-size 128"),
    ("cards_vs_greedy.py", ["--", "--train.nope", "1"], "cards_vs_greedy.py: error: unknown config key 'train.nope'"),
    ("bench_env.py", ["--seconds", "0"], "bench_env.py: error: argument --seconds: '0' is not a finite number > 0"),
    ("bench_env.py", ["--seconds", "-1"], "bench_env.py: error: argument --seconds: '-1' is not a finite number > 0"),
    ("bench_env.py", ["--agents", "1024", "0"],
     "bench_env.py: error: argument --agents: '0' is not a whole number >= 1"),
    ("bench_env.py", ["--threads", "0"], "bench_env.py: error: argument --threads: '0' is not a whole number >= 1"),
    ("bench_env.py", ["--envs", "cartpole", "cartpol"],
     "bench_env.py: error: --envs cartpol: unknown env 'cartpol'; known envs: cartpole, "),
    ("bench_env.py", ["--drone", "--repeats", "0"],
     "bench_env.py: error: argument --repeats: '0' is not a whole number >= 1"),
    ("bench_sweep.py", ["--trials", "0"], "bench_sweep.py: error: argument --trials: '0' is not a whole number >= 1"),
    ("bench_pufferlib.py", ["--puffer-python", sys.executable, "--rounds", "0"],
     "bench_pufferlib.py: error: argument --rounds: '0' is not a whole number >= 1"),
    ("bench_pufferlib.py", ["--puffer-python", "/nonexistent/bin/python"],
     "bench_pufferlib.py: error: --puffer-python /nonexistent/bin/python: not an executable file; make a Python "
     "with PufferLib, e.g. `python -m venv /tmp/pvenv && /tmp/pvenv/bin/pip install pufferlib-core==3.0.23 "
     "gymnasium`, and pass --puffer-python /tmp/pvenv/bin/python"),
    ("bench_checkpoint.py", ["--saves", "0"],
     "bench_checkpoint.py: error: argument --saves: '0' is not a whole number >= 1"),
    ("bench_checkpoint.py", ["--flags", "--train.nope", "1"],
     "bench_checkpoint.py: error: unknown config key 'train.nope'"),
    ("learn.py", ["cartpole", "--seeds", "x"], "learn.py: error: argument --seeds: 'x' is not a whole number >= 1"),
    ("learn.py", ["cartpole", "--jobs", "0"], "learn.py: error: argument --jobs: '0' is not a whole number >= 1"),
    ("learn.py", ["cartpole", "--threshold", "x"],
     "learn.py: error: argument --threshold: 'x' is not a number; write e.g. 1, 0.5 or 2e-1"),
    ("bench_train.py", ["--threshold", "x"],
     "bench_train.py: error: argument --threshold: 'x' is not a number; write e.g. 1, 0.5 or 2e-1"),
    ("learn.py", ["cartpole", "--steps", "nan"], "learn.py: error: argument --steps: 'nan' is not a finite number > 0"),
    ("learn.py", ["cartpole", "--steps", "inf"], "learn.py: error: argument --steps: 'inf' is not a finite number > 0"),
    ("learn.py", ["cartpole", "--steps", "1e30"],
     "learn.py: error: the runs' config: train.total_timesteps=1,000,000,000,000,000,019,884,624,838,656 makes "),
    ("learn.py", ["cartpole", "--flags", "--train.nope", "1"],
     "learn.py: error: the runs' config: unknown config key 'train.nope'"),
    ("learn.py", ["cartpole", "--variant", "a=", "--variant", "b=--train.gama 0.9"],
     "learn.py: error: --variant 'b=--train.gama 0.9': unknown config key 'train.gama'; did you mean 'train.gamma'?"),
])
def test_a_bad_argument_is_one_line_and_exit_2(script, args, message, tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []  # learn.py's runs/learn-ENV among them: refused before anything ran


def test_bench_env_measures_only_the_envs_named():
    """`bench_env.py --envs cards` (README's card-game figures) measured the drone swarm too, 1,536 agents
    at 1 and all threads and its neighbour search, each the best of 3: --envs now leaves those out unless
    it names drone. (Output only is checked, no figure.)"""
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench_env.py"), "--envs", "cartpole", "--agents", "8",
                             "--seconds", "0.01", "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["env", "cartpole", "per-call"]


def test_learn_help_shows_its_two_line_example_as_a_shell_continuation():
    """learn.py's docstring ended an example line with a lone backslash, which Python read as a line
    continuation: --help printed `--threshold -200         --variant ...` as one line."""
    result = subprocess.run([sys.executable, str(SCRIPTS / "learn.py"), "--help"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "--threshold -200 \\\n        --variant" in result.stdout, result.stdout


def test_bench_pufferlib_refuses_a_python_without_pufferlib_before_any_run(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'pufferlib'\" >&2\nexit 1\n")
    python.chmod(0o755)
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench_pufferlib.py"), "--puffer-python", str(python)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "round 1" not in result.stdout, result.stdout + result.stderr
    assert (f"bench_pufferlib.py: error: --puffer-python {python}: it cannot import pufferlib-core's trainer "
            "(ModuleNotFoundError: No module named 'pufferlib'); make a Python with PufferLib") in result.stderr


def test_bench_checkpoint_has_help_and_removes_its_checkpoints(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench_checkpoint.py"), "--help"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and "Checkpoint save cost" in result.stdout and "--saves" in result.stdout
    assert "params; save call blocks" not in result.stdout  # --help measured nothing
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench_checkpoint.py"), "--hidden", "16", "--saves", "2",
                             "--flags", "--vec.num-envs", "8", "--train.minibatch-size", "128"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("hidden 16: ") and "params; save call blocks " in result.stdout
    assert list(tmp_path.iterdir()) == []  # its temporary checkpoint folder is gone


def test_bench_train_steady_sps_counts_agents_not_envs():
    """--agents N is N agents, N / the env's agents per env envs (a multi-agent env got N envs, and then a
    total steps below one batch), in 4 minibatches of whole sequences, or 2 or 1 when N does not divide
    by 4 (--agents 6 was a minibatch of 24 steps with horizon 16, refused)."""
    sps_config = runpy.run_path(str(SCRIPTS / "bench_train.py"))["sps_config"]
    config = sps_config("target", 16, 3, [])
    assert (config.vec.num_envs, config.train.minibatch_size, config.train.total_timesteps) == (2, 64, 16 * 16 * 4)
    config = sps_config("cartpole", 6, 1, ["--train.bptt-horizon", "8"])
    assert (config.vec.num_envs, config.train.minibatch_size, config.train.total_timesteps) == (6, 24, 6 * 8 * 2)
    from jaxlab.config import ConfigError  # too many updates: named as --updates, not --train.total-timesteps

    with pytest.raises(ConfigError, match=r"^--updates 1000000000 makes 1,000,000,001 updates with the first, "
                                          r"8,000,000,008 optimizer steps .*; use at most --updates 268435454$"):
        sps_config("cartpole", 16, 10**9, [])


def test_run_together_kills_the_other_processes_when_one_fails():
    """bench_train.py --scaling's 2 processes: when one fails the other is killed, not waited for (it
    would wait for its peer in a collective or at the coordinator until JAX's timeouts)."""
    from jaxlab.run.bench import run_together

    failing = [sys.executable, "-c", "import sys; print('bad flag', file=sys.stderr); sys.exit(3)"]
    waiting = [sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(600)"]
    first, second = run_together([waiting, failing])
    assert (first.returncode, second.returncode) == (-signal.SIGKILL, 3)
    assert second.stderr == "bad flag\n"


def test_run_together_kills_its_processes_on_ctrl_c(tmp_path):
    from jaxlab.run.bench import run_together

    pid_file = tmp_path / "pid"
    waiting = [sys.executable, "-c", f"import os, time; open({str(tmp_path / 'pid.tmp')!r}, 'w').write(str(os.getpid())); "
               f"os.replace({str(tmp_path / 'pid.tmp')!r}, {str(pid_file)!r}); time.sleep(600)"]
    interrupting = [sys.executable, "-c", f"import os, signal, time\nwhile not os.path.exists({str(pid_file)!r}): "
                    "time.sleep(0.01)\ntime.sleep(0.1)\nos.kill(os.getppid(), signal.SIGINT)\ntime.sleep(600)"]
    with pytest.raises(KeyboardInterrupt):
        run_together([waiting, interrupting])
    with pytest.raises(ProcessLookupError):  # killed and reaped before the interrupt went on
        os.kill(int(pid_file.read_text()), 0)


def test_bench_update_counts_the_flops_of_the_config_its_flags_make():
    """--flags that change the batch or the epochs: the FLOPs and samples are those of the update that
    ran (they were computed from --agents, --horizon and --epochs alone)."""
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench_update.py"), "--agents", "8", "--minibatch", "64",
                             "--hidden", "8", "--unroll", "1", "--repeats", "1", "--flags", "--train.update-epochs",
                             "2", "--vec.num-envs", "16", "--policy.hidden-size", "12"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "for 512 samples x epochs" in result.stdout, result.stdout  # 16 envs x horizon 16 x 2 epochs
    assert "float32 matmul [4, 24] x [24, 48] peak" in result.stdout  # the gate matmul of hidden 12, not 8


def test_bench_update_counts_the_flops_of_the_epochs_that_target_kl_let_run():
    """train.target_kl stops an update's epochs early, and the epochs it skips cost nothing: bench_update.py
    counted every one of train.update_epochs (4 x the samples, the FLOPs and GFLOP/s), unlike `jaxlab bench`."""
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench_update.py"), "--agents", "8", "--minibatch", "64",
                             "--hidden", "8", "--unroll", "1", "--repeats", "2", "--flags", "--train.update-epochs",
                             "4", "--train.target-kl", "1e-9", "--vec.num-envs", "16"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    # 16 envs x horizon 16 x the 1 epoch that ran
    assert (" ms for 256 samples x epochs (train.target_kl let 1 of its 4 epochs run, in the fastest update); "
            in result.stdout), result.stdout


def test_bench_train_prints_no_steady_sps_for_a_threshold_run_of_one_update():
    """A threshold reached in the first update (the compiles): no steady SPS, not a figure of 0."""
    result = subprocess.run([sys.executable, str(SCRIPTS / "bench_train.py"), "--threshold=-inf", "--window", "1",
                             "--agents", "8", "--updates", "1", "--flags", "--policy.hidden-size", "8",
                             "--vec.num-envs", "8", "--train.minibatch-size", "32"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "  steady SPS: none (the run stopped after its first update, which compiles)\n" in result.stdout
    assert ">= -inf over the last 1 update after " in result.stdout and " SPS over 1 update " in result.stdout


def test_a_benchmark_script_stopped_by_ctrl_c_is_one_line_and_exit_130(capsys):
    from jaxlab.run.bench import script_main

    def interrupted():
        print("figures so far")
        raise KeyboardInterrupt

    assert script_main(interrupted, "bench_x.py") == 130
    out, err = capsys.readouterr()
    assert out == "figures so far\n" and err == "bench_x.py: interrupted\n"


def test_cards_vs_greedy_evaluates_the_policy_it_trains(tmp_path):
    out = tmp_path / "rows.json"
    run = subprocess.run([sys.executable, str(SCRIPTS / "cards_vs_greedy.py"), "--steps", "512", "--evals", "1",
                          "--episodes", "4", "--out", str(out), "--", "--vec.num-envs", "16"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [row["steps"] for row in rows] == [0, 512]
    assert all(row[k]["episodes"] == 4 and 0 <= row[k]["win_rate"] <= 1
               for row in rows for k in ("vs_greedy", "vs_random"))

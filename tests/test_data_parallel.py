"""Data parallelism over local devices (device.count): 1 and 2 devices, same agents and seed, give the
same losses. JAX must see 2 CPU devices, which XLA_FLAGS=--xla_force_host_platform_device_count=2
gives only when set before JAX starts: the runs happen in subprocesses.

Tolerance: on 2 devices each device sums its half of the agents and an all-reduce adds the halves,
so every mean over agents (losses, gradients) is summed in another order than on one device. float32
rounds each order differently (about 1e-7 relative per sum); the differences pass through the Adam
steps into the parameters and the next updates. Over 4 updates they stay below 1e-6 relative for the
value loss and 1e-7 absolute for the policy loss (a mean of terms that nearly cancel, so its relative
difference means nothing): asserted with rtol 1e-4 and atol 1e-6, ten times the differences seen.
The rollouts take the same actions (each agent's policy step is the same arithmetic on its device),
so the episode counts are equal exactly.
"""

import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from jaxlab.config import ConfigError, load_config
from jaxlab.config.validate import check_devices
from jaxlab.observe.records import read_metrics

# The SLURM variables of a task that srun launched, besides SLURM_NTASKS and SLURM_PROCID (JAX's SLURM detection)
SRUN_TASK = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "node[01-02]", "SLURM_LOCALID": "0"}

SCRIPT = r"""
import json, os, sys
import jax
from jaxlab.config import load_config
from jaxlab.run.loop import train_loop
from jaxlab.train.trainer import Trainer

config, _ = load_config("cartpole", flags=sys.argv[2:])
out = {"local_devices": jax.local_device_count()}
with Trainer(config, max_traces=1) as trainer:
    out["devices"] = trainer.sizes.devices
    out["records"] = train_loop(trainer, updates=trainer.sizes.num_updates - 1)
    trainer.save_checkpoint(sys.argv[1])
    out["records"] += train_loop(trainer)
    out["caches"] = [f._cache_size() for f in (trainer._update, trainer.rollout._step, trainer.rollout._finish)]
    shardings = [x.sharding for x in jax.tree.leaves(trainer.state)]
    out["params_replicated_on"] = sorted({len(s.device_set) for s in shardings if s.is_fully_replicated})
    out["params_not_replicated"] = sum(not s.is_fully_replicated for s in shardings)
    out["carry_devices"] = len(trainer.rollout.carries[0][0].sharding.device_set)
with Trainer(config) as resumed:  # (chex counts the traces of every trainer together)
    resumed.load_checkpoint(sys.argv[1])
    out["resumed_carry_devices"] = len(resumed.rollout.carries[0][0].sharding.device_set)
    out["resumed"] = train_loop(resumed, updates=1)
if os.environ.get("OTHER_CHECKPOINT"):  # another run's checkpoint (another device count)
    with Trainer(config) as other:
        other.load_checkpoint(os.environ["OTHER_CHECKPOINT"])
        out["other"] = train_loop(other, updates=1)
print("RESULT " + json.dumps(out))
"""

FLAGS = ["--vec.num-envs", "8", "--train.bptt-horizon", "16", "--train.minibatch-size", "64",
         "--policy.hidden-size", "32", "--train.total-timesteps", "640"]


def run_with_two_cpu_devices(tmp_path, *flags, other_checkpoint="") -> dict:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu",
           "OTHER_CHECKPOINT": str(other_checkpoint)}
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "checkpoint"), *FLAGS, *flags],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("groups", [1, 2])
def test_two_devices_give_the_losses_of_one(tmp_path, groups):
    one = run_with_two_cpu_devices(tmp_path / "one", "--device.count", "1", "--vec.groups", str(groups),
                                   "--train.total-timesteps", str(640 if groups == 1 else 512))
    two = run_with_two_cpu_devices(tmp_path / "two", "--device.count", "auto", "--vec.groups", str(groups),
                                   "--train.total-timesteps", str(640 if groups == 1 else 512),
                                   other_checkpoint=tmp_path / "one" / "checkpoint")
    assert one["local_devices"] == two["local_devices"] == 2
    assert (one["devices"], two["devices"]) == (1, 2)
    assert two["carry_devices"] == two["resumed_carry_devices"] == 2 and one["carry_devices"] == 1
    assert two["params_replicated_on"] == [2] and two["params_not_replicated"] == 0
    for run in (one, two):
        assert [r["compiles"] for r in run["records"]] == [3] * len(run["records"])
        assert run["caches"] == [1, 1, 1]  # no recompile for another placement either
        assert run["resumed"][0]["compiles"] == 3
        for key in ("policy_loss", "value_loss", "episodes"):  # resuming the last update repeats it
            assert run["resumed"][0][key] == run["records"][-1][key], key
    # one device's checkpoint resumed on two devices: its last update again, the same within tolerance
    for a, b in zip(one["records"] + one["records"][-1:], two["records"] + two["other"], strict=True):
        assert a["episodes"] == b["episodes"]
        for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm", "explained_variance"):
            np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-6, err_msg=f"{key} at update {a['update']}")


def config_with(*flags):
    return load_config("cartpole", flags=[*FLAGS, *flags])[0]


def test_device_count_is_checked_against_the_devices_and_the_envs():
    assert check_devices(config_with(), 1, available=2) == 2
    assert check_devices(config_with("--vec.num-envs", "9", "--train.minibatch-size", "48",
                                     "--train.total-timesteps", "2304"), 1, available=2) == 1  # auto: what divides
    assert check_devices(config_with("--device.count", "1"), 1, available=2) == 1
    with pytest.raises(ConfigError, match=r"device.count=3 must be between 1 and the 2 local devices JAX sees; "
                                          r"e.g. --device.count 2"):
        check_devices(config_with("--device.count", "3"), 1, available=2)
    with pytest.raises(ConfigError, match=r"device.count=0 must be between 1"):
        check_devices(config_with("--device.count", "0"), 1, available=2)
    with pytest.raises(ConfigError, match=r"device.count=4 must divide vec.num_envs=6 .*e.g. --vec.num-envs 4"):
        check_devices(config_with("--device.count", "4", "--vec.num-envs", "6"), 1, available=4)
    with pytest.raises(ConfigError, match=r"device.count=2 must divide vec.num_envs=6 / vec.groups=2"):
        check_devices(config_with("--device.count", "2", "--vec.num-envs", "6", "--vec.groups", "2"), 1, available=2)
    with pytest.raises(ConfigError, match=r"device.count=2 must divide the 1 sequences of a minibatch .*"
                                          r"--train.minibatch-size 32"):
        check_devices(config_with("--device.count", "2", "--train.minibatch-size", "16"), 1, available=2)


@pytest.mark.parametrize("flags, processes", [
    (["--device.count", "2", "--vec.num-envs", "6", "--vec.groups", "2", "--train.minibatch-size", "96"], 1),
    (["--device.count", "4", "--vec.num-envs", "10", "--train.batch-size", "320", "--train.total-timesteps", "1e4"], 1),
    (["--device.count", "4", "--vec.num-envs", "12", "--train.batch-size", "384", "--train.minibatch-size", "128",
      "--train.total-timesteps", "1e4"], 2),
])
def test_the_num_envs_a_device_count_error_suggests_passes_every_size_check(monkeypatch, flags, processes):
    """The --vec.num-envs that device.count's error suggested was refused in turn: 4 envs in 2 groups make a
    batch of 64 that the minibatch of 96 does not divide; 8 envs a segment of 128 that the batch of 320 is no
    multiple of; over 2 processes 4 envs, which 4 devices in each process cannot split."""
    from jaxlab.config.validate import derive_sizes

    monkeypatch.setattr(jax, "local_device_count", lambda: 4)
    config = config_with(*flags)
    with pytest.raises(ConfigError, match=r"must divide vec.num_envs") as refused:
        derive_sizes(config, 1, processes=processes)
    suggested = re.search(r"--vec.num-envs (\d+) or --device.count auto", str(refused.value)).group(1)
    sizes = derive_sizes(config_with(*flags, "--vec.num-envs", suggested), 1, processes=processes)
    assert sizes.devices == config.device.count


def test_a_bad_device_count_exits_2_with_one_line():
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--device.count", "2"],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""})
    assert result.returncode == 2
    # README's "Try it on a CPU" needs XLA_FLAGS: the line names it (it named only --device.count 1)
    assert result.stderr == ("jaxlab train: error: device.count=2 must be between 1 and the 1 local device JAX sees; "
                             "e.g. --device.count 1 (or auto); on a CPU, XLA_FLAGS=--xla_force_host_platform_device_"
                             "count=2 set before jaxlab starts gives 2 CPU devices (they share the cores)\n")
    with pytest.raises(ConfigError) as raised:  # on a GPU, no word of the CPU's flag
        check_devices(config_with("--device.count", "3"), 1, available=2, platform="gpu")
    assert str(raised.value) == ("device.count=3 must be between 1 and the 2 local devices JAX sees; e.g. "
                                 "--device.count 2 (or auto)")


PROCESS_SCRIPT = r"""
import json, sys
from jaxlab.config.schema import DistConfig
from jaxlab.run import distributed

coordinator, processes, process = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
distributed.initialize(distributed.resolve(DistConfig(coordinator, processes, process)))
import jax
from jaxlab.config import load_config
from jaxlab.run.loop import train_loop
from jaxlab.train.trainer import Trainer

config, _ = load_config("cartpole", flags=sys.argv[4:])
with Trainer(config, max_traces=1) as trainer:
    out = {"processes": jax.process_count(), "devices": jax.device_count(), "envs": [e.num_envs for e in trainer.envs]}
    out["records"] = train_loop(trainer)
print("RESULT " + json.dumps(out))
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def communicate_all(procs: list, timeout: float) -> list[tuple[str, str]]:
    """(stdout, stderr) of every process, read at once: reading one process to its end while another
    fills its pipe would leave both waiting (it for the reader, the first for it in a collective)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(procs)) as pool:
        return list(pool.map(lambda p: p.communicate(timeout=timeout), procs))


def test_two_processes_of_two_devices_give_the_losses_of_one_process():
    """2 processes on localhost (gloo collectives on the CPU), 2 forced devices and 2 groups of 2 envs each,
    against 1 process with 2 forced devices and the same 4 groups (the same env seeds and sampling keys,
    by global group index): the same losses (tolerance as above) and episode statistics (the records
    sum every process's). Several devices per process (a host of GPUs) died in the first rollout: the
    process's copy of the replicated params put the first device's shard on every device."""
    flags = [*FLAGS, "--train.total-timesteps", "512", "--device.count", "2"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    coordinator = f"localhost:{free_port()}"
    procs = [subprocess.Popen([sys.executable, "-c", PROCESS_SCRIPT, coordinator, "2", str(i), *flags,
                               "--vec.groups", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(2)]
    outputs = []
    for proc, (stdout, stderr) in zip(procs, communicate_all(procs, timeout=600), strict=True):
        assert proc.returncode == 0, stderr[-3000:]
        outputs.append(json.loads(next(l for l in stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):]))
    single = subprocess.run([sys.executable, "-c", PROCESS_SCRIPT, "", "1", "0", *flags, "--vec.groups", "4"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert single.returncode == 0, single.stderr[-3000:]
    one = json.loads(next(l for l in single.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    assert [o["processes"] for o in outputs] == [2, 2] and outputs[0]["devices"] == 4 and one["devices"] == 2
    assert outputs[0]["envs"] == outputs[1]["envs"] == [2, 2] and one["envs"] == [2, 2, 2, 2]
    for a, b, c in zip(one["records"], *[o["records"] for o in outputs], strict=True):
        assert b["compiles"] == c["compiles"] == 3
        assert a["episodes"] == b["episodes"] == c["episodes"]  # every process's episodes in the records
        if a["episodes"]:
            assert b["episode_return"] == c["episode_return"]
            np.testing.assert_allclose(b["episode_return"], a["episode_return"], rtol=1e-6)
        for key in ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm"):
            assert b[key] == c[key], key  # every process computes the same replicated update
            np.testing.assert_allclose(b[key], a[key], rtol=1e-4, atol=1e-6, err_msg=f"{key} at update {a['update']}")


def test_dist_settings_come_from_flags_or_slurm():
    from jaxlab.config.schema import DistConfig
    from jaxlab.run.distributed import Settings, dist_from_flags, resolve

    assert resolve(DistConfig(), {}) == Settings("", 1, 0)
    flags = dist_from_flags(["--vec.groups", "2", "--dist.coordinator", "h:1234", "--dist.num-processes=4",
                             "--dist.process-id", "3"])
    assert resolve(flags, {}) == Settings("h:1234", 4, 3)
    assert resolve(DistConfig(), {"SLURM_NTASKS": "8", "SLURM_PROCID": "5", **SRUN_TASK}) == Settings("", 8, 5)
    assert resolve(DistConfig(), {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "JAXLAB_COORDINATOR": "n0:99"}) == \
        Settings("n0:99", 2, 1)
    with pytest.raises(ConfigError, match=r"dist.num_processes=2 needs process 0's address: --dist.coordinator"):
        resolve(DistConfig(num_processes=2, process_id=1), {})
    with pytest.raises(ConfigError, match=r"dist.coordinator='h' must be HOST:PORT"):
        resolve(DistConfig("h", 2, 0), {})
    for bad in ("h:0", "h:65536", ":1234", "h:x"):
        with pytest.raises(ConfigError, match=rf"dist.coordinator='{bad}' must be HOST:PORT with a port in 1..65535"):
            resolve(DistConfig(bad, 2, 0), {})
    with pytest.raises(ConfigError, match=r"dist.coordinator='h:1' is given but the run has 1 process \(the "
                                          r"default: neither --dist.num-processes nor SLURM_NTASKS is set\); give "
                                          r"every process --dist.num-processes N"):
        resolve(DistConfig("h:1", 0, -1), {})
    with pytest.raises(ConfigError, match=r"dist.process_id=-2 must be -1 \(from SLURM_PROCID, else 0\) or"):
        resolve(DistConfig("h:1", 2, -2), {})
    with pytest.raises(ConfigError, match=r"--dist.num-processes 'x' is not an integer; e.g. --dist.num-processes 2"):
        dist_from_flags(["--dist.num-processes", "x"])
    with pytest.raises(ConfigError, match=r"--dist.process-id '' is not an integer; e.g. --dist.process-id 0"):
        dist_from_flags(["--dist.process-id"])


def test_slurm_variables_of_an_allocation_shell_outside_srun_are_refused_naming_what_is_missing(monkeypatch, capsys):
    """In a shell of a SLURM allocation (salloc, an sbatch script) SLURM_JOB_ID and SLURM_NTASKS are set but
    not the job step's SLURM_STEP_NODELIST and SLURM_LOCALID, which JAX's SLURM detection needs: jaxlab passed
    the check and `jaxlab train` crashed in jax.distributed.initialize with a traceback ('ValueError:
    coordinator_address should be defined'). It is refused in one line now, before JAX starts, naming srun."""
    from jaxlab import cli
    from jaxlab.config.schema import DistConfig
    from jaxlab.run.distributed import resolve

    allocation = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "2"}
    with pytest.raises(ConfigError) as refused:
        resolve(DistConfig(), allocation)
    assert str(refused.value) == (
        "dist.num_processes=2 (from SLURM_NTASKS, as --dist.num-processes is not given) needs process 0's address, "
        "which JAX finds under SLURM only in a task that srun launched (SLURM_STEP_NODELIST, SLURM_PROCID, "
        "SLURM_LOCALID not set here: not a job step); launch it with srun --ntasks 2 jaxlab ..., or give every "
        "process --dist.coordinator HOST:PORT, or --dist.num-processes 1 to run alone")
    assert resolve(DistConfig(num_processes=1), allocation).num_processes == 1
    assert resolve(DistConfig(), {**allocation, "JAXLAB_COORDINATOR": "n0:99"}).coordinator == "n0:99"
    for name, value in allocation.items():
        monkeypatch.setenv(name, value)
    for name in ("SLURM_PROCID", "SLURM_STEP_NODELIST", "SLURM_LOCALID", "JAXLAB_COORDINATOR"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["train", "cartpole", "--dist.num-processes", "2", "--dist.process-id", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxlab train: error: dist.num_processes=2 needs process 0's address, which JAX finds")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_dist_refusals_name_the_slurm_variable_that_gave_the_value():
    """A count from SLURM_NTASKS was refused as 'dist.num_processes=2 needs process 0's address' or
    'dist.num_processes=0 must be at least 1', naming a key the user never set; a bad SLURM_NTASKS gave
    no fix. Each names the variable now, with a fix that fits it."""
    from jaxlab.config.schema import DistConfig
    from jaxlab.run.distributed import resolve

    with pytest.raises(ConfigError, match=r"^dist.num_processes=2 \(from SLURM_NTASKS, as --dist.num-processes is "
                                          r"not given\) needs process 0's address: --dist.coordinator HOST:PORT \(or "
                                          r"JAXLAB_COORDINATOR\), the same for every process \(or "
                                          r"--dist.num-processes 1 to run alone\)$"):
        resolve(DistConfig(), {"SLURM_NTASKS": "2"})
    with pytest.raises(ConfigError, match=r"^dist.num_processes=0 \(from SLURM_NTASKS, as --dist.num-processes is "
                                          r"not given\) must be at least 1; unset SLURM_NTASKS, or give "
                                          r"--dist.num-processes N$"):
        resolve(DistConfig(), {"SLURM_NTASKS": "0"})
    with pytest.raises(ConfigError, match=r"^dist.num_processes=-2 must be at least 1; e.g. --dist.num-processes 2"):
        resolve(DistConfig(num_processes=-2), {})
    with pytest.raises(ConfigError, match=r"^dist.coordinator='h:1' is given but the run has 1 process \(from "
                                          r"SLURM_NTASKS, as --dist.num-processes is not given\); give every process"):
        resolve(DistConfig("h:1", 0, -1), {"SLURM_NTASKS": "1"})
    with pytest.raises(ConfigError, match=r"^SLURM_PROCID='x' is not an integer \(it gives dist.process_id\); unset "
                                          r"it or give --dist.process-id I$"):
        resolve(DistConfig(), {"SLURM_PROCID": "x"})


def test_a_process_id_out_of_range_names_where_it_and_the_count_came_from_and_the_fix():
    """An index not in 0..N-1 said only 'dist.process_id=3 must be in 0..1 for dist.num_processes=2',
    though under SLURM neither number was given as a flag: the line names each value with its source
    (a --dist.* flag, SLURM_PROCID / SLURM_NTASKS, the default) and a fix for that combination."""
    from jaxlab.config.schema import DistConfig
    from jaxlab.run.distributed import resolve

    def refusal(dist, environ) -> str:
        with pytest.raises(ConfigError) as err:
            resolve(dist, environ)
        assert "\n" not in str(err.value)
        return str(err.value)

    assert refusal(DistConfig("h:1", 2, 2), {}) == (
        "dist.process_id=2 is out of range for dist.num_processes=2: the processes are 0..1; give each process its "
        "own --dist.process-id in 0..1, or set --dist.num-processes to the run's process count (above 2)")
    assert refusal(DistConfig("h:1", 2, -1), {"SLURM_PROCID": "3", "SLURM_NTASKS": "4"}) == (
        "dist.process_id=3 (from SLURM_PROCID, as --dist.process-id is not given) is out of range for "
        "dist.num_processes=2: the processes are 0..1; set --dist.num-processes to the job's task count "
        "(SLURM_NTASKS=4) or leave it out, or give --dist.process-id")
    assert refusal(DistConfig("", 0, 5), {"SLURM_NTASKS": "4", "SLURM_JOB_ID": "1"}) == (
        "dist.process_id=5 is out of range for dist.num_processes=4 (from SLURM_NTASKS, as --dist.num-processes is "
        "not given): the processes are 0..3; give --dist.process-id in 0..3, or leave it out to take SLURM_PROCID")
    assert refusal(DistConfig(), {"SLURM_PROCID": "4", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "1"}).endswith(
        "SLURM_PROCID and SLURM_NTASKS disagree: launch each process with srun (which sets both), or give "
        "--dist.num-processes and --dist.process-id")
    assert refusal(DistConfig("", 0, 5), {}) == (
        "dist.process_id=5 is out of range for dist.num_processes=1 (the default: neither --dist.num-processes nor "
        "SLURM_NTASKS is set): its one process is 0; give every process --dist.num-processes N (the run's process "
        "count, above 5) and --dist.coordinator HOST:PORT, or leave out --dist.process-id for a one-process run")
    assert refusal(DistConfig(), {"SLURM_PROCID": "2"}).endswith(
        "set SLURM_NTASKS to the job's task count, or give --dist.num-processes N and --dist.process-id")


def test_a_slurm_procid_out_of_range_exits_2_with_one_line(monkeypatch, capsys):
    from jaxlab import cli

    for name in ("SLURM_NTASKS", "SLURM_JOB_ID", "JAXLAB_COORDINATOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "3")
    assert cli.main(["config", "cartpole", "--dist.num-processes", "2", "--dist.coordinator", "h:1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("jaxlab config: error: dist.process_id=3 (from SLURM_PROCID, as --dist.process-id "
                                 "is not given) is out of range for dist.num_processes=2: the processes are 0..1; "
                                 "set --dist.num-processes to the job's task count or leave it out, or give "
                                 "--dist.process-id\n")


def test_a_process_whose_peers_never_join_stops_with_one_line_after_jaxlab_join_timeout():
    """Process 0 of 2 started alone waited silently for JAX's 5 minutes, then XLA aborted it (exit 134) with
    'Check failure stack trace' and a C stack, naming no fix. It now stops after JAXLAB_JOIN_TIMEOUT seconds
    with exit 2 and one line saying which processes to start."""
    from jaxlab.config.schema import DistConfig
    from jaxlab.run.distributed import resolve

    coordinator = f"localhost:{free_port()}"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "", "JAXLAB_JOIN_TIMEOUT": "2"}
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--dist.coordinator", coordinator,
                             "--dist.num-processes", "2", "--dist.process-id", "0"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"jaxlab train: error: process 0 of 2: the run's processes did not all join at {coordinator} within 2 s "
        f"(JAXLAB_JOIN_TIMEOUT); start the other processes with the same command, --dist.num-processes 2 and "
        f"--dist.process-id 1, where they reach {coordinator}\n")
    assert resolve(DistConfig("h:1", 2, 0), {}).join_timeout_s == 300
    for bad in ("0", "x", "-3", ""):
        with pytest.raises(ConfigError, match=rf"^JAXLAB_JOIN_TIMEOUT='{bad}' must be a whole number of seconds"):
            resolve(DistConfig("h:1", 2, 0), {"JAXLAB_JOIN_TIMEOUT": bad})
    assert resolve(DistConfig(), {"JAXLAB_JOIN_TIMEOUT": "x"}).num_processes == 1  # one process waits for none


def test_process_0_on_a_coordinator_port_in_use_exits_2_with_one_line():
    """A --dist.coordinator port that another program listens on crashed process 0 (exit 139, a segmentation
    fault after gRPC's 'Failed to add port to server'): it is refused before JAX starts, naming another port,
    and the likelier cause on one host, two processes given --dist.process-id 0 (the second was told only to
    change the port, which would have left it waiting for peers that joined the first)."""
    import socket

    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        coordinator = f"localhost:{holder.getsockname()[1]}"
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "", "JAXLAB_JOIN_TIMEOUT": "30"}
        result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--dist.coordinator",
                                 coordinator, "--dist.num-processes", "2", "--dist.process-id", "0"],
                                capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2, result.stderr
    assert re.fullmatch(rf"jaxlab train: error: dist.coordinator='{coordinator}': process 0 cannot start the run's "
                        rf"coordinator on port \d+ of this host \(Address already in use: another program, or "
                        rf"another process given --dist.process-id 0, listens there\); give each process its own "
                        rf"--dist.process-id, or every process another port, e.g. --dist.coordinator "
                        rf"localhost:\d+\n", result.stderr), result.stderr


def test_a_coordinator_host_not_known_here_is_refused_at_once():
    """A --dist.coordinator whose host name does not resolve (a typo) left every process waiting for the join
    timeout (5 minutes by default) before a line that could not say why: it is refused before JAX starts."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "", "JAXLAB_JOIN_TIMEOUT": "30"}
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--dist.coordinator",
                             "no-such-host.invalid:12345", "--dist.num-processes", "2", "--dist.process-id", "1"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith(
        "jaxlab train: error: dist.coordinator='no-such-host.invalid:12345': host 'no-such-host.invalid' is not known "
        "here ("), result.stderr
    from jaxlab.run.distributed import Settings, check_coordinator_host

    for process in (0, 1):
        with pytest.raises(ConfigError) as refused:
            check_coordinator_host(Settings("no-such-host.invalid:12345", 2, process))
        assert re.fullmatch(r"dist.coordinator='no-such-host.invalid:12345': host 'no-such-host.invalid' is not "
                            r"known here \(.+\); give process 0's host name or address, the same for every process "
                            r"\(e.g. --dist.coordinator localhost:12345 when all run on this host\)",
                            str(refused.value)), str(refused.value)
    check_coordinator_host(Settings("localhost:12345", 2, 1))
    check_coordinator_host(Settings("[::1]:12345", 2, 1))
    check_coordinator_host(Settings("", 2, 1))  # SLURM: JAX finds it


def test_under_slurm_process_0_on_a_coordinator_port_in_use_is_refused_naming_jax_coordinator_port():
    """Under SLURM JAX's coordinator listens on JAX_COORDINATOR_PORT, else a port it derives from SLURM_JOB_ID
    (61440 + job % 4096); one that another program holds crashed process 0 (a segmentation fault), and the
    check of a --dist.coordinator port did not look at it. Both are refused now, naming JAX_COORDINATOR_PORT."""
    import socket

    from jaxlab.run.distributed import Settings, check_coordinator_port

    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        slurm = {"SLURM_NTASKS": "2", "SLURM_PROCID": "0", **SRUN_TASK}
        with pytest.raises(ConfigError) as refused:
            check_coordinator_port(Settings("", 2, 0), {**slurm, "JAX_COORDINATOR_PORT": str(port)})
        assert re.fullmatch(rf"process 0 cannot start the run's coordinator on port {port} of this host \(Address "
                            r"already in use; the port is JAX_COORDINATOR_PORT\); set JAX_COORDINATOR_PORT to a free "
                            r"port for every task \(e.g. JAX_COORDINATOR_PORT=\d+\), or give every process "
                            r"--dist.coordinator HOST:PORT", str(refused.value)), str(refused.value)
        if port >= 61440:  # a port JAX derives from a job id
            job = port - 61440
            with pytest.raises(ConfigError, match=rf"on port {port} of this host \(Address already in use; the "
                                                  rf"port is JAX's choice for SLURM_JOB_ID={job}\)"):
                check_coordinator_port(Settings("", 2, 0), {**slurm, "SLURM_JOB_ID": str(port - 61440)})
        check_coordinator_port(Settings("", 2, 1), {**slurm, "JAX_COORDINATOR_PORT": str(port)})  # not process 0
    check_coordinator_port(Settings("", 2, 0), {**slurm, "JAX_COORDINATOR_PORT": str(port)})  # free again


def train_in_processes(*args, processes=2, timeout=600) -> list[subprocess.CompletedProcess]:
    """`jaxlab train cartpole ARGS` in ``processes`` processes on localhost (1 CPU device each, gloo)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    coordinator = f"localhost:{free_port()}"
    commands = [[sys.executable, "-m", "jaxlab.cli", "train", "cartpole", *args, "--dist.coordinator", coordinator,
                 "--dist.num-processes", str(processes), "--dist.process-id", str(i)] for i in range(processes)]
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for c in commands]
    outputs = communicate_all(procs, timeout)
    return [subprocess.CompletedProcess(c, p.returncode, *out) for c, p, out in zip(commands, procs, outputs, strict=True)]


def saved_arrays(path) -> dict:
    """A checkpoint's state as saved (a run over several processes: [P, ...] rows), read in this one
    process as numpy arrays."""
    import orbax.checkpoint as ocp

    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    tree = ocp.StandardCheckpointHandler().metadata(path / "state").tree
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=one), tree)
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
        state = checkpointer.restore(path, ocp.args.Composite(state=ocp.args.StandardRestore(target)))["state"]
    return jax.tree.map(np.asarray, state)


def as_dicts(tree):
    """``tree`` with its named tuples as dicts (as Orbax saves them: leaves in key order)."""
    if hasattr(tree, "_asdict"):
        tree = tree._asdict()
    return {k: as_dicts(v) for k, v in tree.items()} if isinstance(tree, dict) else tree


def test_two_processes_save_checkpoints_and_resume_as_if_uninterrupted(tmp_path):
    """2 processes on localhost (gloo) train 4 updates with a checkpoint every 2; 2 fresh processes
    resume from update 2 and train to 4: the same records (losses, episodes) bit for bit and a final
    checkpoint equal to the uninterrupted one in every array (params, optimizer, keys, each process's
    carries and env state). Resuming it in 1 process is refused with one line naming both counts;
    evaluating it in 1 process loads its policy (params and normalisation statistics)."""
    from jaxlab import checkpoint

    run = tmp_path / "run"
    flags = [*FLAGS, "--train.total-timesteps", "512", "--vec.groups", "2", "--checkpoint.interval", "2",
             "--log.dashboard", "none", "--run-dir", str(run)]
    results = train_in_processes(*flags, "--train.prio-beta0", "0.5")  # a flag that does nothing: a warning
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    warning = "warning: --train.prio-beta0 does nothing with train.prio_alpha 0"
    assert warning in results[0].stderr and warning not in results[1].stderr  # process 0 speaks, once
    straight = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in straight] == [1, 2, 3, 4]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["2", "4"]
    for path in checkpoint.step_dirs(run / "checkpoints"):
        assert checkpoint.verify(path)  # process 0 wrote files.json over every process's files
        assert checkpoint.read_meta(path)["processes"] == 2
    assert {p.name for p in (run / "checkpoints" / "4" / "state").glob("ocdbt.process_*")} == \
        {"ocdbt.process_0", "ocdbt.process_1"}  # each process wrote its own part
    uninterrupted = saved_arrays(run / "checkpoints" / "4")

    results = train_in_processes(*flags, "--resume", str(run / "checkpoints" / "2"))
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from" in results[0].stderr and "resumed from" not in results[1].stderr  # process 0 speaks
    resumed = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(straight, resumed, strict=True):
        for key in ("global_step", "episodes", "episode_return", "policy_loss", "value_loss", "entropy",
                    "approx_kl", "grad_norm", "explained_variance"):
            assert a[key] == b[key], f"{key} at update {a['update']}"
    final = saved_arrays(run / "checkpoints" / "4")
    for a, b in zip(jax.tree.leaves(uninterrupted), jax.tree.leaves(final), strict=True):
        np.testing.assert_array_equal(a, b)

    listing = sorted(str(p) for p in run.rglob("*"))
    one = subprocess.run([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", "--resume", str(run)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""})
    assert one.returncode == 2
    assert one.stderr.count("\n") == 1 and "Traceback" not in one.stderr
    assert (f"checkpoint {run / 'checkpoints' / '4'} was written by a run of 2 processes, this run has 1 process "
            "(the default: neither --dist.num-processes nor SLURM_NTASKS is set); resume it with --dist.num-processes 2"
            ) in one.stderr
    assert sorted(str(p) for p in run.rglob("*")) == listing  # nothing saved was touched

    from jaxlab.train.evaluation import load_trainer  # eval in one process: the policy alone

    with load_trainer(run / "checkpoints" / "4") as trainer:
        assert trainer.update_index == 0  # the counters, envs and carries stay its own
        for saved, mine in ((final["train"]["params"], trainer.state.params), (final["norm"], trainer.norm.state)):
            for a, b in zip(jax.tree.leaves(saved), jax.tree.leaves(as_dicts(mine)), strict=True):
                np.testing.assert_array_equal(a, np.asarray(b))


def test_another_process_count_than_the_checkpoints_is_refused_naming_both():
    from jaxlab.train.trainer import check_processes

    check_processes({"processes": 2}, "ck", 2)
    check_processes({}, "ck", 1)  # a one-process checkpoint records no count
    with pytest.raises(ConfigError, match=r"checkpoint ck was written by a run of 1 process, this run has 2 "
                                          r"processes; resume it in one process"):
        check_processes({}, "ck", 2)
    with pytest.raises(ConfigError, match=r"written by a run of 4 processes, this run has 2 processes; resume it "
                                          r"with --dist.num-processes 4 \(and --dist.coordinator, --dist.process-id "
                                          r"0..3\), or start a new run"):
        check_processes({"processes": 4}, "ck", 2)


def test_a_signal_to_one_process_saves_and_stops_every_process(tmp_path):
    """SIGTERM to process 1 alone: the processes agree after the update, save one checkpoint together
    and both exit 0 (none is left waiting in a collective)."""
    import signal
    import time

    from jaxlab import checkpoint

    run = tmp_path / "run"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    coordinator = f"localhost:{free_port()}"
    flags = [*FLAGS, "--train.total-timesteps", str(128 * 3_000), "--log.dashboard", "none", "--run-dir", str(run)]
    procs = [subprocess.Popen([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", *flags, "--dist.coordinator",
                               coordinator, "--dist.num-processes", "2", "--dist.process-id", str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "the run did not start"
        time.sleep(0.2)
    procs[1].send_signal(signal.SIGTERM)
    outputs = communicate_all(procs, 300)
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "a signal to another process" and summary["updates"] < 3_000
    saved = checkpoint.step_dirs(run / "checkpoints")[0]
    assert int(saved.name) == summary["updates"] and checkpoint.verify(saved)
    assert f"stopped by a signal to another process after update {saved.name}" in outputs[0][1]


ASYNC_SAVE_FAILS_IN_PROCESS_1 = r"""
import json, sys
from jaxlab.run.distributed import start
pid = int(sys.argv[1])
start(["--dist.coordinator", sys.argv[2], "--dist.num-processes", "2", "--dist.process-id", str(pid)])
from jaxlab import checkpoint
from jaxlab.config import load_config
from jaxlab.run.loop import train_run

config, _ = load_config("cartpole", flags=sys.argv[4:])
waits = []

def fail_the_second_write_in_process_1(trainer, saves):
    if pid != 1:
        return
    real = saves.wait_for_write

    def wait_for_write():  # the asynchronous write of update 2's checkpoint fails on this host alone
        waits.append(saves.last_saved_update)
        if len(waits) == 2:
            raise checkpoint.CheckpointError("cannot save checkpoint 2 (No space left on device)")
        return real()

    saves.wait_for_write = wait_for_write

result = train_run(config, sys.argv[3], trainer_hook=fail_the_second_write_in_process_1, warn=lambda m: None)
print("RESULT " + json.dumps({"error": result.error, "updates": len(result.records),
                              "checkpoint": str(result.checkpoint)}))
"""


def start_saving_processes(script: str, run) -> list:
    """Two processes of one run on localhost running ``script`` (its argv: process id, coordinator, run dir,
    config flags): 8 updates of 128 steps, a checkpoint every 2."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    coordinator = f"localhost:{free_port()}"
    flags = [*FLAGS, "--train.total-timesteps", str(128 * 8), "--checkpoint.interval", "2", "--log.dashboard", "none"]
    return [subprocess.Popen([sys.executable, "-c", script, str(i), coordinator, str(run), *flags],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]


def test_a_checkpoint_write_failing_in_one_process_stops_every_process_after_the_same_update(tmp_path):
    """The asynchronous write of a checkpoint fails in process 1 alone (found when the next save waits
    for it): the processes agree before that save, so both stop after update 4 with an error, nobody is
    left waiting in a collective, and the failed checkpoint gets no files.json."""
    from jaxlab import checkpoint

    run = tmp_path / "run"
    procs = start_saving_processes(ASYNC_SAVE_FAILS_IN_PROCESS_1, run)
    outputs = communicate_all(procs, 300)
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    results = [json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
               for out, _ in outputs]
    assert results[1]["error"] == "cannot save checkpoint 2 (No space left on device)"
    assert results[0]["error"] == (f"cannot save checkpoint {run / 'checkpoints' / '2'}: another process of this run "
                                   "could not write its part (its output says why); the last good checkpoint is none")
    assert [r["updates"] for r in results] == [4, 4]  # of 8: both stopped at update 4's save
    assert [r["checkpoint"] for r in results] == ["None", "None"]
    assert (run / "checkpoints" / "2").is_dir() and not checkpoint.verify(run / "checkpoints" / "2")  # no files.json
    summary = json.loads((run / "summary.json").read_text())
    assert summary["error"] == results[0]["error"] and summary["updates"] == 4


MANIFEST_FAILS_IN_PROCESS_0 = r"""
import json, sys
from jaxlab.run.distributed import start
pid = int(sys.argv[1])
start(["--dist.coordinator", sys.argv[2], "--dist.num-processes", "2", "--dist.process-id", str(pid)])
from jaxlab import checkpoint
from jaxlab.config import load_config
from jaxlab.run.loop import train_run

config, _ = load_config("cartpole", flags=sys.argv[4:])

def read_only(path):  # process 0 writes update 2's files.json when the save of update 4 begins: the disk went read-only
    raise OSError(30, "Read-only file system")

checkpoint.write_manifest = read_only
result = train_run(config, sys.argv[3], warn=lambda m: None)
print("RESULT " + json.dumps({"error": result.error, "updates": len(result.records),
                              "checkpoint": str(result.checkpoint)}))
"""


def test_a_files_json_failing_in_process_0_stops_every_process_at_once(tmp_path):
    """Process 0 could not write the files.json of update 2's checkpoint (a disk gone read-only or full).
    It wrote it inside its save call, after the processes had agreed on the write: process 0 stopped with
    the error while process 1 went on into Orbax's save and waited at its first barrier; 5 minutes later
    JAX's shutdown barrier aborted both (SIGABRT, a C++ stack). Both now stop after update 4 with the error
    (their processes end normally), the checkpoint's arrays and the metrics kept."""
    from jaxlab import checkpoint

    run = tmp_path / "run"
    procs = start_saving_processes(MANIFEST_FAILS_IN_PROCESS_0, run)
    try:
        outputs = communicate_all(procs, 150)  # the hang lasted 300 s
    finally:
        for process in procs:
            if process.poll() is None:
                process.kill()
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    results = [json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
               for out, _ in outputs]
    saved = run / "checkpoints" / "2"
    assert results[0]["error"] == (f"cannot save checkpoint {saved} (Read-only file system, writing its files.json); "
                                   "its arrays are complete, so it resumes, unchecked")
    assert results[1]["error"] == (f"cannot save checkpoint {saved}: process 0 could not write its files.json (its "
                                   "output says why); its arrays are complete, so it resumes, unchecked")
    assert [r["updates"] for r in results] == [4, 4]
    assert [r["checkpoint"] for r in results] == [str(saved)] * 2  # not None: `jaxlab train` added "; no checkpoint"
    assert checkpoint.step_dirs(run / "checkpoints") == [saved] and not checkpoint.verify(saved)
    assert [r["update"] for r in read_metrics(run)] == [1, 2, 3, 4]


def test_processes_given_other_flags_are_refused_before_training(tmp_path):
    """Process 1 alone given --train.learning-rate 0.5: both processes trained, silently, each its own
    learning rate, and the 'replicated' params drifted apart; only process 0's config was saved. Every
    process now compares its resolved config with process 0's and stops with exit 2, naming process 1."""
    run = tmp_path / "run"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    coordinator = f"localhost:{free_port()}"
    flags = [*FLAGS, "--log.dashboard", "none", "--run-dir", str(run), "--dist.coordinator", coordinator,
             "--dist.num-processes", "2"]
    procs = [subprocess.Popen([sys.executable, "-m", "jaxlab.cli", "train", "cartpole", *flags, "--dist.process-id",
                               str(i), *(["--train.learning-rate", "0.5", "--vec.num-threads", "1"] if i else [])],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
    outputs = communicate_all(procs, 300)
    assert [p.returncode for p in procs] == [2, 2], [err[-2000:] for _, err in outputs]
    for _, err in outputs:
        assert "Traceback" not in err
        error = err.splitlines()[-1]  # process 1 says first that it joins the coordinator
        assert error.startswith("jaxlab train: error: process 1 resolved another config than process 0 (in "
                                "process 1: train.learning_rate) from other flags")
    assert not (run / "metrics.jsonl").exists()


def test_the_differing_config_message_names_one_process_or_several():
    from jaxlab.cli.train import differing_config_message

    assert differing_config_message({1: ["train.learning_rate"]}).startswith(
        "process 1 resolved another config than process 0 (in process 1: train.learning_rate) from other flags")
    assert differing_config_message({1: ["a"], 3: ["b"]}).startswith(
        "processes 1, 3 resolved another config than process 0 (in process 1: a; in process 3: b)")


def test_two_processes_on_one_host_are_refused_when_together_they_need_more_than_its_memory(tmp_path):
    """2 processes on localhost, each checked alone against the host's memory (here made 1.5 x one
    process's need), both started training though together they need 2 x. Once they have met they
    count the processes on their host and check their need together: both exit 2 before training. Here
    process 0 sees memory enough for both, as another host would: it is refused with the other, not left
    training alone until its next collective times out."""
    from jaxlab.config import derive_sizes, memory

    run = tmp_path / "run"
    config, _ = load_config("cartpole", flags=FLAGS)
    one = memory.estimate(config, derive_sizes(config, 1, processes=2), memory.env_shape(config))
    host = (one.host_total + one.device_total) * 3 // 2  # one CPU device each: JAX's arrays are host memory
    script = (f"import sys; from jaxlab import cli; from jaxlab.config import memory; roomy = sys.argv[-1] == '0'; "
              f"memory.host_available = lambda: {host} * (2 if roomy else 1); sys.exit(cli.main(sys.argv[1:]))")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    flags = [*FLAGS, "--log.dashboard", "none", "--run-dir", str(run), "--dist.coordinator",
             f"localhost:{free_port()}", "--dist.num-processes", "2"]
    procs = [subprocess.Popen([sys.executable, "-c", script, "train", "cartpole", *flags, "--dist.process-id", str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for i in range(2)]
    outputs = communicate_all(procs, 300)
    assert [p.returncode for p in procs] == [2, 2], [err[-2000:] for _, err in outputs]
    for _, err in outputs:
        assert "Traceback" not in err
    roomy, tight = (err.splitlines()[-1] for _, err in outputs)
    assert tight.startswith("jaxlab train: error: this config needs about ")
    assert "of host memory for the 2 processes of this run on this host (" in tight
    assert roomy.startswith("jaxlab train: error: the processes of this run on another host need more host "), roomy
    assert not (run / "metrics.jsonl").exists()


def test_the_processes_on_a_host_are_counted_by_its_digest():
    from jaxlab.run.distributed import same_host_count

    digests = np.array([[1, 2], [1, 2], [3, 4], [1, 2]], np.uint8)  # [P, D]: processes 0, 1, 3 share a host
    assert [same_host_count(digests, p) for p in range(4)] == [3, 3, 1, 3]


def test_the_compared_config_has_the_same_keys_whatever_the_flags_and_leaves_out_what_may_differ():
    """Every process all-gathers one digest per key (a fixed shape): the keys must not depend on the
    values, the env parameters given included; the process index, the coordinator and the C threads
    may differ between processes and are left out."""
    from jaxlab.cli.train import ENV_PARAMETERS, shared_config_values

    plain = shared_config_values(load_config("cartpole")[0])
    other = shared_config_values(load_config("cartpole", flags=["--train.learning-rate", "0.5", "--vec.num-threads",
                                                                "3", "--dist.process-id", "1", "--dist.coordinator",
                                                                "h:1"])[0])
    assert list(plain) == list(other)
    assert [key for key in plain if plain[key] != other[key]] == ["train.learning_rate"]
    assert other["train.learning_rate"] == "0.5"
    target = load_config("target")[0]
    sized = shared_config_values(load_config("target", flags=["--env.agents-per-env", "4"])[0])
    assert list(shared_config_values(target)) == list(sized) == list(plain)
    assert sized[ENV_PARAMETERS] == "agents_per_env = 4"


def test_the_differing_keys_are_named_per_process():
    from jaxlab.run.distributed import differing_keys

    digests = np.zeros((3, 4, 2), np.uint8)  # [P, K, D]
    assert differing_keys(digests, ["a", "b", "c", "d"]) == {}
    digests[1, 2, 1] = 7
    digests[2, 0, 0] = digests[2, 3, 1] = 1
    assert differing_keys(digests, ["a", "b", "c", "d"]) == {1: ["c"], 2: ["a", "d"]}


def test_under_slurm_without_a_coordinator_flags_that_disagree_with_slurm_are_refused():
    """Under SLURM with no coordinator jaxlab called jax.distributed.initialize() bare, so JAX took
    SLURM_NTASKS and SLURM_PROCID whatever --dist.num-processes and --dist.process-id said (checked by
    jaxlab, then ignored). A flag that disagrees with SLURM's variable is refused now, and the resolved
    count and index are what initialize gets."""
    from jaxlab.config.schema import DistConfig
    from jaxlab.run.distributed import resolve

    slurm = {"SLURM_NTASKS": "4", "SLURM_PROCID": "1", **SRUN_TASK}
    with pytest.raises(ConfigError) as refused:
        resolve(DistConfig(num_processes=2), slurm)
    assert str(refused.value) == (
        "dist.num_processes=2 disagrees with SLURM_NTASKS=4: with no --dist.coordinator the run's processes are the "
        "tasks SLURM launched (JAX finds process 0 from the job's nodes); leave out --dist.num-processes, or give "
        "every process --dist.coordinator HOST:PORT to run the processes the flags name")
    with pytest.raises(ConfigError, match=r"^dist.process_id=0 disagrees with SLURM_PROCID=1: .* leave out "
                                          r"--dist.process-id, or give"):
        resolve(DistConfig(process_id=0), slurm)
    assert resolve(DistConfig(num_processes=4, process_id=1), slurm) == resolve(DistConfig(), slurm)
    assert resolve(DistConfig("h:1", 2, 0), slurm).num_processes == 2  # a coordinator: the flags make the run


def test_under_slurm_initialize_gets_the_resolved_count_and_index(monkeypatch):
    from jaxlab.run import distributed

    calls = []
    monkeypatch.setattr(jax.config, "update", lambda *args: None)
    monkeypatch.setattr(jax.distributed, "initialize", lambda *args, **kwargs: calls.append((args, kwargs)))
    assert distributed.initialize(distributed.Settings("", 4, 0))
    assert calls == [((), {"num_processes": 4, "process_id": 0, "initialization_timeout": 360})]


def test_another_process_count_from_slurm_is_told_to_resume_with_srun_not_a_flag():
    """check_processes told a run whose count came from SLURM_NTASKS to resume 'with --dist.num-processes
    4', a flag that under srun does not launch the 4 tasks; the fix now fits the count's source."""
    from jaxlab.config.schema import DistConfig
    from jaxlab.run.distributed import resolve
    from jaxlab.train.trainer import check_processes

    slurm = resolve(DistConfig(), {"SLURM_NTASKS": "2", "SLURM_PROCID": "0", **SRUN_TASK})
    with pytest.raises(ConfigError) as refused:
        check_processes({"processes": 4}, "ck", slurm.num_processes, slurm.count)
    assert str(refused.value) == (
        "cannot resume: checkpoint ck was written by a run of 4 processes, this run has 2 processes (from "
        "SLURM_NTASKS, as --dist.num-processes is not given); resume it in a job step of 4 tasks (srun --ntasks 4, "
        "which sets SLURM_NTASKS), or start a new run")
    with pytest.raises(ConfigError, match=r"resume it in one process: give --dist.num-processes 1 \(SLURM_NTASKS "
                                          r"gives the count otherwise\), or run one task \(srun --ntasks 1\)"):
        check_processes({}, "ck", slurm.num_processes, slurm.count)
    flags = resolve(DistConfig("h:1", 2, 0), {})
    with pytest.raises(ConfigError, match=r"this run has 2 processes; resume it with --dist.num-processes 4 \(and"):
        check_processes({"processes": 4}, "ck", flags.num_processes, flags.count)


def test_the_coordinator_port_check_works_on_a_host_without_ipv6(monkeypatch):
    """The port check probed with an AF_INET6 socket whenever Python was built with IPv6 (socket.has_ipv6), so on a
    host booted with ipv6.disable=1 (no AF_INET6 sockets: EAFNOSUPPORT) every free port was refused as 'Address
    family not supported by protocol' and no run over several processes could start; gRPC listens on IPv4 there.
    The probe falls back to IPv4 as gRPC does, and still finds a port that another program holds."""
    import errno
    import socket

    from jaxlab.run.distributed import port_bind_problem

    real_socket = socket.socket

    def ipv4_only(family=socket.AF_INET, *args, **kwargs):
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, os.strerror(errno.EAFNOSUPPORT))
        return real_socket(family, *args, **kwargs)

    monkeypatch.setattr(socket, "socket", ipv4_only)
    with real_socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        assert port_bind_problem(holder.getsockname()[1]) == "Address already in use"
    with real_socket() as released:
        released.bind(("", 0))
        port = released.getsockname()[1]
    assert port_bind_problem(port) is None

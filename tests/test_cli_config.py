"""`jaxlab config`, `jaxlab presets`, `jaxlab bench` and --help of every command, in subprocesses."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from jaxlab import __version__
from jaxlab.config import load_config


def jaxlab(*args):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True, timeout=300)


def test_config_prints_sources_and_sizes_as_toml_that_round_trips(tmp_path):
    result = jaxlab("config", "target", "--vec.num-envs", "4", "--train.total-timesteps", "1e6",
                    "--train.minibatch-size", "512")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "# target, preset cpu (JAX sees only CPU devices)"
    assert lines[1] == ("# 4 envs x 8 agents x horizon 16 = batch 512; 1 minibatch of 512; 1,953 updates for 1M "
                        "steps (999,936 trained: whole batches)")
    assert any(line.startswith("num_envs = 4 ") and line.endswith("# command line") for line in lines)
    assert any(line.startswith("learning_rate = ") and line.endswith("# configs/default.toml") for line in lines)
    assert any(line.startswith("precision = ") and line.endswith("# configs/presets/cpu.toml") for line in lines)
    assert any(line.startswith("# agents_per_env = 8") for line in lines)
    path = tmp_path / "printed.toml"
    path.write_text(result.stdout)
    tomllib.loads(result.stdout)
    expected, _ = load_config("target", preset="cpu", flags=["--vec.num-envs", "4", "--train.total-timesteps",
                                                             "1e6", "--train.minibatch-size", "512"])
    assert load_config("target", config_file=path)[0] == expected


def test_config_errors_exit_2_for_every_command():
    for command in ("config", "bench", "train"):
        result = jaxlab(command, "cartpole", "--preset", "h100")
        assert result.returncode == 2, command
        assert "preset 'h100' is for gpu/cuda devices but JAX sees only cpu devices" in result.stderr
        assert "Traceback" not in result.stderr
    result = jaxlab("config", "cartpole", "--train.batch-size", "1000")
    assert result.returncode == 2 and "train.batch_size=1,000 must be a positive multiple of 1,024" in result.stderr


@pytest.mark.parametrize("flags", [["--dist.num-processes", "2"], ["--dist.process-id", "5"],
                                   ["--dist.coordinator", "node0:12345"], ["--dist.num-processes", "x"]])
def test_config_refuses_the_dist_flags_train_refuses(flags, capsys, monkeypatch):
    """`jaxlab config` is train's dry run: dist settings train refuses before JAX starts (a count without
    a coordinator, an index out of range, a coordinator for one process) were printed as a config."""
    from jaxlab import cli

    for name in ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_ID", "JAXLAB_COORDINATOR"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["train", "cartpole", *flags]) == 2
    refused = capsys.readouterr().err
    assert refused.startswith("jaxlab train: error: ") and "dist." in refused
    assert cli.main(["config", "cartpole", *flags]) == 2
    assert capsys.readouterr() == ("", refused.replace("jaxlab train:", "jaxlab config:"))


def test_config_checks_each_processs_share_as_train_does(capsys, monkeypatch):
    """`jaxlab config ENV --dist.num-processes 2 ...` checked the sizes as for one process: 6 envs in 2
    groups passed, which `jaxlab train` refuses in each of 2 processes (6 does not split into 2 groups
    of each of 2 processes). It checks them for the --dist.* process count now, with train's message."""
    from jaxlab import cli
    from jaxlab.config import ConfigError, load_config
    from jaxlab.config.validate import check_devices

    for name in ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_ID", "JAXLAB_COORDINATOR"):
        monkeypatch.delenv(name, raising=False)
    sizes = ["--vec.num-envs", "6", "--vec.groups", "2", "--train.minibatch-size", "96", "--train.total-timesteps",
             "1e5"]
    assert cli.main(["config", "cartpole", *sizes]) == 0  # one process: 2 groups of 3
    capsys.readouterr()
    dist = ["--dist.num-processes", "2", "--dist.coordinator", "node0:1234", "--dist.process-id", "1"]
    assert cli.main(["config", "cartpole", *sizes, *dist]) == 2
    out, err = capsys.readouterr()
    with pytest.raises(ConfigError) as trains:  # what train's derive_sizes says in each of 2 processes
        check_devices(load_config("cartpole", flags=sizes)[0], 1, available=1, processes=2)
    assert out == "" and err == f"jaxlab config: error: {trains.value}\n"
    assert "vec.num_envs=6 must divide by vec.groups=2 x 2 processes" in err
    assert cli.main(["config", "cartpole", "--vec.num-envs", "8", "--vec.groups", "2", "--train.minibatch-size", "64",
                     "--train.total-timesteps", "1e5", *dist]) == 0


def test_config_refuses_a_best_metric_train_refuses(capsys):
    """A mistyped --checkpoint.best-metric, refused by `jaxlab train` (no checkpoint would be kept as the
    best), was printed by `jaxlab config`; the metrics are the run's records, which follow the config
    (return_std only with reward scaling)."""
    from jaxlab import cli

    assert cli.main(["config", "cartpole", "--checkpoint.best-metric", "episode_retrn"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("jaxlab config: error: checkpoint.best_metric='episode_retrn' is not a "
                                        "metric of this run, so no checkpoint would be kept as the best; did you "
                                        "mean 'episode_return'? metrics (higher is better): global_step, update, ")
    assert cli.main(["config", "cartpole", "--checkpoint.best-metric", "return_std"]) == 0
    out, err = capsys.readouterr()
    assert 'best_metric = "return_std"' in out and err == ""
    assert cli.main(["config", "cartpole", "--checkpoint.best-metric", "return_std", "--train.reward-scale", "1"]) == 2
    assert "best_metric='return_std' is not a metric of this run" in capsys.readouterr().err


def test_a_compile_cache_folder_that_cannot_be_made_is_refused_by_config_and_bench_before_anything_runs(tmp_path):
    """A --device.compile-cache folder under a file was refused by `jaxlab train` only once its trainer was
    built (after the header line), by `jaxlab bench` after it had stepped the env for --seconds, and not
    at all by `jaxlab config`, the dry run of train; now all three refuse it in one line, exit 2."""
    afile = tmp_path / "afile"
    afile.write_text("")
    cache = str(afile / "cache")
    expected = (f"error: device.compile_cache='{cache}': cannot create {cache}/jaxlab-{__version__} ({afile} is "
                "a file, not a folder); give a folder you can write, e.g. --device.compile-cache ~/.cache/jaxlab/xla, "
                "or off\n")
    for command, extra in (("config", []), ("bench", ["--updates", "1", "--seconds", "0.05"]),
                           ("train", ["--run-dir", str(tmp_path / "run"), "--train.total-timesteps", "2048"])):
        result = jaxlab(command, "cartpole", "--device.compile-cache", cache, *extra)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        assert result.stderr == f"jaxlab {command}: {expected}" and result.stdout == "", command
    assert not (tmp_path / "run").exists() and afile.read_text() == ""


def test_a_dist_table_in_a_config_file_is_named_as_not_read(tmp_path, capsys, monkeypatch):
    """jaxlab train takes a run's processes from --dist.* flags and the environment before it loads any
    config: a [dist] table in a --config file did nothing, silently, while `jaxlab config` printed it as
    the run's. Its non-default values get a warning naming the file and the flags; defaults say nothing."""
    from jaxlab import cli

    for name in ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_ID", "JAXLAB_COORDINATOR"):
        monkeypatch.delenv(name, raising=False)
    two = tmp_path / "two.toml"
    two.write_text('[dist]\nnum_processes = 2\ncoordinator = "node0:1234"\n')
    assert cli.main(["config", "cartpole", "--config", str(two)]) == 0
    assert capsys.readouterr().err == (
        f'jaxlab: warning: [dist] coordinator = "node0:1234" (from {two}), num_processes = 2 (from {two}) are '
        "not read: a run's processes come from the command line or the environment (SLURM, JAXLAB_COORDINATOR), "
        "before any config file; pass --dist.coordinator node0:1234 --dist.num-processes 2\n")
    one = tmp_path / "one.toml"
    one.write_text("[dist]\nnum_processes = 0\nprocess_id = -1\n")  # a one-process run's saved config.toml
    assert cli.main(["config", "cartpole", "--config", str(one)]) == 0
    assert capsys.readouterr().err == ""


def test_a_preset_line_in_a_config_file_is_named_as_not_applied(tmp_path, capsys):
    """`preset = "heavy"` in a --config file (jaxlab config's output has such a line) layered nothing, silently:
    the run was the cpu preset's default network. A line naming presets other than --preset's gets a warning
    naming the preset's keys the file does not set, and the flag; one that names only the presets applied,
    or whose file sets every key of the preset (a run dir's config.toml), says nothing."""
    from jaxlab import cli

    heavy = tmp_path / "heavy.toml"
    heavy.write_text('preset = "heavy"\n')
    assert cli.main(["config", "cartpole", "--config", str(heavy)]) == 0
    out, err = capsys.readouterr()
    assert err == (f'jaxlab: warning: preset = "heavy" in --config {heavy} is not applied: presets come from '
                   "--preset only (here cpu), so the preset's policy.mlp_layers, policy.hidden_size, "
                   "train.update_epochs, train.learning_rate are not set; to layer it, pass --preset heavy\n")
    assert "hidden_size = 128 " in out  # the default network, not heavy's
    assert cli.main(["config", "cartpole", "--config", str(heavy), "--preset", "heavy"]) == 0
    assert capsys.readouterr().err == ""
    assert cli.main(["config", "cartpole", "--preset", "heavy"]) == 0
    saved = tmp_path / "saved.toml"
    saved.write_text(capsys.readouterr().out.replace('preset = "cpu,heavy"', 'preset = "h100,heavy"'))
    assert cli.main(["config", "cartpole", "--config", str(saved)]) == 0  # every key set: nothing is lost
    assert capsys.readouterr().err == ""
    typo = tmp_path / "typo.toml"  # its fix was `pass --preset hevy`, which is refused
    typo.write_text('preset = "hevy"\n')
    assert cli.main(["config", "cartpole", "--config", str(typo)]) == 0
    assert capsys.readouterr().err == (
        f'jaxlab: warning: preset = "hevy" in --config {typo} is not applied: presets come from --preset only '
        "(here cpu), and unknown preset 'hevy'; did you mean 'heavy'? presets: auto, a100, beast, cpu, gpu, h100, "
        "heavy (see `jaxlab presets`); remove the line, or pass a preset as --preset\n")


def test_a_line_of_jaxlabs_own_config_file_given_as_config_is_not_to_be_removed_from_it(capsys):
    """configs/presets/heavy.toml given as --config on pendulum (no LSTM) warned '... remove that line from
    .../configs/presets/heavy.toml': an edit of jaxlab's own preset, which every later --preset heavy reads.
    The fix for a file of jaxlab's configs/ names --preset for a preset's, and a copy for another's."""
    from jaxlab import cli
    from jaxlab.config import configs_dir

    heavy = configs_dir() / "presets" / "heavy.toml"
    assert cli.main(["config", "pendulum", "--config", str(heavy)]) == 0
    assert capsys.readouterr().err == (
        f"jaxlab: warning: policy.hidden_size = 256 in {heavy} does nothing with policy.lstm false; pass --preset "
        f"heavy instead of --config {heavy}, or copy that file (jaxlab's own) and remove that line from the copy\n")
    assert cli.main(["config", "pendulum", "--preset", "heavy"]) == 0
    assert capsys.readouterr().err == ""  # as the fix says
    pendulum = configs_dir() / "envs" / "pendulum.toml"
    assert cli.main(["config", "cartpole", "--config", str(pendulum)]) == 0
    assert capsys.readouterr().err == (
        f"jaxlab: warning: policy.hidden_size = 64 in {pendulum} does nothing with policy.lstm false; copy "
        f"{pendulum} (jaxlab's own file) and remove that line from the copy\n")


def test_a_card_preset_file_given_as_config_names_its_agents_as_not_applied(tmp_path, capsys):
    """configs/presets/gpu.toml given as --config applied its keys but not its [preset] agents = 1024 (the table a
    --config file does not read), silently: the run kept the env file's 64 envs under the preset's minibatch."""
    import jax

    from jaxlab import cli
    from jaxlab.config import configs_dir

    gpu = configs_dir() / "presets" / "gpu.toml"
    assert cli.main(["config", "cartpole", "--config", str(gpu), "--train.minibatch-size", "256"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (
        f"jaxlab: warning: [preset] agents = 1024 in --config {gpu} is not applied (it is a preset file's table, and "
        "vec.num_envs stays as set without it): presets come from --preset only; pass --preset gpu")
    on_cpu = [f"jaxlab: warning: device.memory_fraction = 0.3 in {gpu} does nothing with JAX's devices cpu (it caps "
              f"GPU memory); pass --preset gpu instead of --config {gpu}, or copy that file (jaxlab's own) and "
              "remove that line from the copy"]  # the file's line, as a flag's would be; jaxlab's file is not edited
    assert lines[1:] == (on_cpu if jax.default_backend() == "cpu" else []), lines
    heavy = configs_dir() / "presets" / "heavy.toml"  # a workload size's table sets nothing: every key applies
    assert cli.main(["config", "cartpole", "--config", str(heavy)]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv, message", [
    (["--resume", "runs/cp"], "unexpected argument '--resume': jaxlab config takes no --resume; a run's resolved "
                              "config is RUN/config.toml: `jaxlab config ENV --config RUN/config.toml` shows it"),
    (["--run-dir=runs/x"], "unexpected argument '--run-dir': jaxlab config takes no --run-dir; nothing is written; "
                           "drop it"),
])
def test_config_names_what_to_do_for_an_option_of_train(capsys, argv, message):
    """`jaxlab config cartpole --resume runs/cp` (to see what a resume would run) said only "unexpected argument
    '--resume'; config flags look like --train.seed 1"."""
    from jaxlab import cli

    assert cli.main(["config", "cartpole", *argv]) == 2
    assert message in capsys.readouterr().err


def test_presets_lists_every_preset_and_the_auto_choice():
    result = jaxlab("presets")
    assert result.returncode == 0, result.stderr
    for name in ("cpu", "gpu", "a100", "h100"):
        assert f" {name} " in result.stdout
    assert "* cpu" in result.stdout and "auto picks 'cpu' here: JAX sees only CPU devices" in result.stdout


def test_bench_prints_env_and_training_figures():
    result = jaxlab("bench", "cartpole", "--updates", "1", "--seconds", "0.1", "--vec.num-envs", "8",
                    "--train.minibatch-size", "64", "--policy.hidden-size", "16",
                    "--train.total-timesteps", "64")  # below a batch: not bench's length, so not refused
    assert result.returncode == 0, result.stderr
    assert ("warning: jaxlab bench ignores train.total_timesteps=64 (from --train.total-timesteps): its run is the "
            "first update and --updates 1 more") in result.stderr
    # JAX runs on the CPU here: no line about GPU memory (it said "GPU memory allocated on demand")
    assert result.stdout.splitlines()[0] == "device preset cpu (JAX sees only CPU devices)", result.stdout
    assert "env cartpole: 8 agents, 1 C thread:" in result.stdout and "M agent-steps/s" in result.stdout
    assert "steady" in result.stdout and "SPS over 1 update (" in result.stdout
    # the update's FLOPs by the 6N rule: 6 x params x batch (8 envs x horizon 16) x update_epochs (2)
    params = int(re.search(r"([\d,]+) params", result.stdout).group(1).replace(",", ""))
    gflop = float(re.search(r"update: ([\d.,]+) GFLOP each by the 6N rule, [\d.,]+ GFLOP/s achieved",
                            result.stdout).group(1))
    assert gflop == pytest.approx(6 * params * 8 * 16 * 2 / 1e9, abs=0.006)


SMALL_BENCH = ["--updates", "1", "--seconds", "0.05", "--vec.num-envs", "8", "--train.minibatch-size", "64",
               "--policy.hidden-size", "16"]


def test_bench_neither_refuses_nor_silently_ignores_a_total_it_does_not_use(tmp_path, capsys, monkeypatch):
    """The bench's run is --updates long: a train.total_timesteps it ignores is not refused (0 was: "must
    be at least 1"), and is warned about whichever layer set it, a flag or a --config file (which had no
    warning), naming it; an env's default total says nothing about this command, so no warning."""
    from jaxlab import cli

    assert cli.main(["bench", "cartpole", *SMALL_BENCH, "--train.total-timesteps", "0"]) == 0
    out, err = capsys.readouterr()
    assert err == ("jaxlab: warning: jaxlab bench ignores train.total_timesteps=0 (from --train.total-timesteps): "
                   "its run is the first update and --updates 1 more\n")
    assert "SPS over 1 update (" in out

    import jaxlab.run.bench as bench  # the rest: only the warning, not the figures

    monkeypatch.setattr(bench, "report_env", lambda *args: [])
    monkeypatch.setattr(bench, "report_training", lambda *args: "")
    config = tmp_path / "config.toml"
    config.write_text("[train]\ntotal_timesteps = -5\n")
    assert cli.main(["bench", "cartpole", *SMALL_BENCH, "--config", str(config)]) == 0
    assert capsys.readouterr().err == (f"jaxlab: warning: jaxlab bench ignores train.total_timesteps=-5 (from "
                                       f"--config {config}): its run is the first update and --updates 1 more\n")
    two_updates = ["--updates", "2", *SMALL_BENCH[2:]]  # SMALL_BENCH's --updates 1 swapped (not given twice)
    assert cli.main(["bench", "cartpole", *two_updates, "--config", str(config), "--train.total-timesteps", "1e6"]) \
        == 0  # the flag wins over the file: the flag is named
    assert capsys.readouterr().err == ("jaxlab: warning: jaxlab bench ignores train.total_timesteps=1,000,000 "
                                       "(from --train.total-timesteps): its run is the first update and --updates 2 "
                                       "more\n")
    assert cli.main(["bench", "cartpole", *SMALL_BENCH]) == 0  # configs/envs/cartpole.toml's total: no warning
    assert capsys.readouterr().err == ""


def test_bench_says_nothing_of_a_saved_runs_total_that_is_the_envs_default(tmp_path, capsys, monkeypatch):
    """A run dir's config.toml records every key, the total too: `jaxlab bench ENV --config RUN/config.toml`
    warned that it ignores train.total_timesteps even when the run kept the env's default. Now the file's
    total is named only when it differs from the one the layers under the file give (the env's defaults,
    a header's NAME.toml beside it, the preset)."""
    from jaxlab import cli
    from jaxlab.config import to_toml

    import jaxlab.run.bench as bench

    monkeypatch.setattr(bench, "report_env", lambda *args: [])
    monkeypatch.setattr(bench, "report_training", lambda *args: "")
    for env in ("cartpole", "drone"):  # drone: NAME.h on the env path, its defaults in NAME.toml beside it
        saved = tmp_path / f"{env}.toml"
        saved.write_text(to_toml(load_config(env, preset="cpu")[0]))  # what a run dir's config.toml holds
        assert cli.main(["bench", env, *SMALL_BENCH, "--config", str(saved)]) == 0
        assert capsys.readouterr().err == "", env
    config = load_config("cartpole", preset="cpu", flags=["--train.total-timesteps", "3e5"])[0]
    saved.write_text(to_toml(config))  # a run of another length
    assert cli.main(["bench", "cartpole", *SMALL_BENCH, "--config", str(saved)]) == 0
    assert capsys.readouterr().err == (f"jaxlab: warning: jaxlab bench ignores train.total_timesteps=300,000 (from "
                                       f"--config {saved}): its run is the first update and --updates 1 more\n")


def test_bench_refuses_dist_flags_it_would_ignore(capsys, monkeypatch, tmp_path):
    """`jaxlab bench ENV --dist.num-processes 2 --dist.coordinator H:P --dist.process-id 0` timed one process
    alone and printed its figures as if the flags applied (they were taken as config keys and never read). A
    --dist.* flag is refused now, naming what times several processes; a --config file's [dist] (a run's
    config.toml) gets a warning that does not tell bench to pass the flags it refuses."""
    from jaxlab import cli

    for name in ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_ID", "JAXLAB_COORDINATOR"):
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["bench", "cartpole", *SMALL_BENCH, "--dist.num-processes", "2", "--dist.coordinator",
                     "localhost:12345", "--dist.process-id", "0"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == (
        "jaxlab bench: error: unexpected argument '--dist.num-processes': jaxlab bench runs as one process, so it "
        "takes no --dist.* flag; drop it, and time a run over several processes with `jaxlab train` and the --dist.* "
        "flags (its SPS), or with python scripts/bench_train.py --scaling (1 and 2 devices, 2 processes on this "
        "host)\n")
    saved = tmp_path / "config.toml"
    saved.write_text("[dist]\nnum_processes = 2\n")
    assert cli.main(["bench", "cartpole", *SMALL_BENCH, "--config", str(saved)]) == 0
    assert capsys.readouterr().err == (
        f"jaxlab: warning: [dist] num_processes = 2 (from {saved}) is not read: jaxlab bench times one process; "
        "time a run over several processes with `jaxlab train` and the --dist.* flags (its SPS), or with python "
        "scripts/bench_train.py --scaling (1 and 2 devices, 2 processes on this host)\n")


def test_bench_steps_an_env_given_as_a_header_path():
    """ENV as path/to/NAME.h: the env-stepping figures come from that header's env (it was an unknown-env
    traceback: the header was not passed on to the stepping benchmark)."""
    header = Path(__file__).resolve().parent.parent / "cenv" / "template" / "corridor.h"
    result = jaxlab("bench", str(header), "--updates", "1", "--seconds", "0.05", "--vec.num-envs", "8",
                    "--train.minibatch-size", "64", "--policy.hidden-size", "16")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "env corridor: 8 agents, 1 C thread:" in result.stdout and "train corridor: " in result.stdout


@pytest.mark.parametrize("flags, message", [
    (["--updates", "0"], "--updates 0 must be at least 1 (the timed updates after the first), e.g. --updates 3"),
    (["--seconds", "0"], "--seconds 0.0 must be a finite number > 0 (the env-stepping timing window), e.g. --seconds 1"),
    (["--seconds", "inf"], "--seconds inf must be a finite number > 0 (the env-stepping timing window), e.g. --seconds 1"),
    (["--seconds", "nan"], "--seconds nan must be a finite number > 0 (the env-stepping timing window), e.g. --seconds 1"),
    (["--updates", "100000000000", "--vec.num-envs", "8", "--train.minibatch-size", "64"],
     "--updates 100000000000 makes 100,000,000,001 updates with the first, 400,000,000,004 optimizer steps (2 epochs "
     "x 2 minibatches each), past the 2**31 - 1 their int32 counter holds; use at most --updates 536870910"),
    (["--updates", "536870911", "--vec.num-envs", "8", "--train.minibatch-size", "64"],  # the bound's own value
     "--updates 536870911 makes 536,870,912 updates with the first, 2,147,483,648 optimizer steps (2 epochs x 2 "
     "minibatches each), past the 2**31 - 1 their int32 counter holds; use at most --updates 536870910"),
])
def test_bench_refuses_a_count_it_cannot_time(capsys, flags, message):
    from jaxlab import cli

    assert cli.main(["bench", "cartpole", *flags]) == 2
    assert capsys.readouterr().err == f"jaxlab bench: error: {message}\n"


def test_bench_names_an_example_for_seconds_that_are_not_a_number(capsys):
    """--seconds x said "invalid float value: 'x'" (argparse's float), naming no form to write."""
    from jaxlab import cli

    with pytest.raises(SystemExit) as end:
        cli.main(["bench", "cartpole", "--seconds", "x"])
    assert end.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == ("jaxlab bench: error: argument --seconds: 'x' is not a "
                                                        "number; write e.g. 1, 0.5 or 2e-1")


def test_steady_training_reports_the_updates_that_ran():
    """A config whose total steps end before the updates asked for: the SPS is over the updates that ran,
    and none after the first is an error naming the flag, not a figure divided by a count that never ran."""
    from jaxlab.config import ConfigError, load_config
    from jaxlab.run.bench import steady_training

    flags = ["--vec.num-envs", "8", "--train.minibatch-size", "128", "--policy.hidden-size", "16"]
    config, _ = load_config("cartpole", flags=[*flags, "--train.total-timesteps", str(128 * 3)])
    assert steady_training(config, 5)["updates"] == 2
    config, _ = load_config("cartpole", flags=[*flags, "--train.total-timesteps", "128"])
    with pytest.raises(ConfigError, match=r"train.total_timesteps=128 leaves no update to time after the first"):
        steady_training(config, 5)


def test_bench_counts_the_flops_of_the_epochs_that_target_kl_let_run():
    """`jaxlab bench --train.target-kl` counted every train.update_epochs in the update's FLOPs, while the epochs
    the KL stop skipped (a lax.cond that runs nothing) took no time: GFLOP/s achieved was overstated by
    update_epochs / epochs run (4x with a stop after the first of 4)."""
    from jaxlab.config import load_config
    from jaxlab.run import bench

    flags = ["--vec.num-envs", "8", "--train.minibatch-size", "32", "--policy.hidden-size", "16",
             "--train.update-epochs", "4", "--train.total-timesteps", str(128 * 3)]
    for target_kl, epochs in (("0", 4), ("1e-9", 1)):  # 1e-9: each first epoch's approx_kl (4 minibatches) exceeds it
        config, _ = load_config("cartpole", flags=[*flags, "--train.target-kl", target_kl])
        result = bench.steady_training(config, 2)
        assert result["epochs"] == epochs
        report = bench.report_training(config, 2)
        flops = bench.update_flops(result["num_params"], result["sizes"].batch_size, epochs)
        assert f"update: {flops / 1e9:,.2f} GFLOP each by the 6N rule" in report
        assert ("(train.target_kl let 1 of its 4 epochs run, on average)" in report) == (epochs == 1)


@pytest.mark.parametrize("command", ["train", "eval", "config", "bench", "presets", "envs"])
def test_every_command_has_help(command):
    result = jaxlab(command, "--help")
    assert result.returncode == 0 and "usage: jaxlab " + command in result.stdout
    if command in ("train", "config", "bench"):
        assert "--preset NAME" in result.stdout and "--train.batch-size" in result.stdout
        assert "--device.precision" in result.stdout and "--checkpoint.interval" in result.stdout
        # ENV named only C envs and headers: a Gymnasium or PettingZoo user found no word of their envs
        assert "or a Python env: gymnasium:ID, gymnasium:MODULE:ID (an id MODULE registers) or pettingzoo:MODULE" \
            in " ".join(result.stdout.split())


def test_envs_shows_the_envs_named(capsys):
    """`jaxlab envs cartpole` was 'unrecognized arguments'; now it shows that env alone, and a name it does not
    know is refused with the closest one."""
    from jaxlab import cli

    assert cli.main(["envs", "cartpole", "memory"]) == 0
    shown = [line.split(":")[0] for line in capsys.readouterr().out.splitlines() if not line.startswith(" ")]
    assert shown == ["cartpole", "memory"]
    assert cli.main(["envs", "cartpol"]) == 2
    assert "no env 'cartpol' among jaxlab's envs or on the env path; did you mean 'cartpole'?" in \
        capsys.readouterr().err


def test_an_env_parameter_out_of_range_in_a_config_file_names_the_file(tmp_path):
    """`--config run.toml` with `max_steps = 0` in [env] said "env 'cartpole' parameter max_steps=0 is out
    of range ..." and not where that 0 came from: the error names the file (a flag's needs no file)."""
    config = tmp_path / "run.toml"
    config.write_text("[env]\nmax_steps = 0\n")
    result = jaxlab("config", "cartpole", "--config", str(config))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"jaxlab config: error: env 'cartpole' parameter max_steps=0 in {config} is out of range: it must be in "
        "[1, 1e+09] (default 500); fix it there"], result.stderr
    flag = jaxlab("config", "cartpole", "--env.max-steps", "0")
    assert flag.returncode == 2 and flag.stderr.strip().endswith(
        "env 'cartpole' parameter max_steps=0 is out of range: it must be in [1, 1e+09] (default 500)"), flag.stderr


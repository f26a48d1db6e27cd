"""Preset selection from simulated device lists, platform checks and XLA memory options."""

import re

import numpy as np
import pytest

from jaxlab.config import ConfigError
from jaxlab.config.presets import DeviceInfo, check_preset_fits, describe_presets, prepare_backend, select_preset
from jaxlab.messages import install_extra

GIB = 2**30


@pytest.mark.parametrize("devices, preset", [
    ([], "cpu"),
    ([DeviceInfo("cpu", "cpu", None)], "cpu"),
    ([DeviceInfo("gpu", "NVIDIA H100 80GB HBM3", 80 * GIB)], "h100"),
    ([DeviceInfo("gpu", "NVIDIA H200", 141 * GIB)] * 8, "h100"),
    ([DeviceInfo("cuda", "NVIDIA A100-SXM4-40GB", 40 * GIB)], "a100"),
    ([DeviceInfo("gpu", "NVIDIA GeForce RTX 4090", 24 * GIB)], "gpu"),
    ([DeviceInfo("gpu", "Tesla T4", 15 * GIB)], "gpu"),
    ([DeviceInfo("rocm", "AMD Instinct MI250X", 64 * GIB)], "gpu"),
])
def test_auto_picks_from_the_devices(devices, preset):
    assert select_preset(devices)[0] == preset


def test_reason_names_the_device():
    name, reason = select_preset([DeviceInfo("gpu", "NVIDIA GeForce RTX 3080", 10 * GIB)] * 2)
    assert name == "gpu" and reason.startswith("2 x NVIDIA GeForce RTX 3080 (gpu, 10 GiB)")


def test_gpu_preset_on_a_cpu_is_an_error_not_a_fallback():
    cpu = [DeviceInfo("cpu", "cpu", None)]
    for preset in ("gpu", "a100", "h100"):
        with pytest.raises(ConfigError, match=rf"preset '{preset}' is for gpu.* devices but JAX sees only cpu "
                                              r"devices here; use --preset auto \(it picks 'cpu' here\)"):
            check_preset_fits(preset, cpu)
    check_preset_fits("cpu", cpu)
    check_preset_fits("h100", [DeviceInfo("gpu", "NVIDIA H100", 80 * GIB)])
    with pytest.raises(ConfigError, match="preset 'cpu' is for cpu devices but JAX sees only gpu"):
        check_preset_fits("cpu", [DeviceInfo("gpu", "NVIDIA H100", 80 * GIB)])


def test_a_gpu_preset_on_a_cpu_names_the_cuda_extra_and_the_gpu_jax_does_not_see():
    """--preset h100 on a CPU ended with "or install JAX for your accelerator", naming neither README's
    cuda12 extra nor, on a machine with an NVIDIA driver (JAX installed without its CUDA wheels), the GPU:
    the warning that says so (unused_gpu_warning) never came, since this error comes first."""
    cpu = [DeviceInfo("cpu", "cpu", None)]
    with pytest.raises(ConfigError) as raised:
        check_preset_fits("h100", cpu, present=lambda: "an NVIDIA GPU (driver 550.54)")
    assert str(raised.value) == ("preset 'h100' is for gpu/cuda devices but JAX sees only cpu devices here, though "
                                 "this machine has an NVIDIA GPU (driver 550.54) (JAX installed without its CUDA "
                                 "wheels); use --preset auto (it picks 'cpu' here), or for an NVIDIA GPU, install "
                                 f"JAX's CUDA wheels: {install_extra('cuda12')} (then `jaxlab presets`)")
    with pytest.raises(ConfigError, match=r"is for gpu/cuda/rocm devices but JAX sees only cpu devices here; .*"
                                          + re.escape(install_extra("cuda12"))):
        check_preset_fits("gpu", cpu, present=lambda: None)
    with pytest.raises(ConfigError, match=r"preset 'cpu' is for cpu devices but JAX sees only gpu devices here; use "
                                          r"--preset auto \(it picks 'h100' here\), or JAX_PLATFORMS=cpu makes JAX "
                                          r"use the CPU$"):
        check_preset_fits("cpu", [DeviceInfo("gpu", "NVIDIA H100", 80 * GIB)])


def test_describe_marks_the_auto_choice():
    text = describe_presets([DeviceInfo("gpu", "NVIDIA A100-SXM4-80GB", 80 * GIB)])
    assert "* a100" in text and "  cpu" in text and "auto picks 'a100' here" in text
    # the presets' values as their files write them: a boolean was Python's (policy.shared_trunk=False)
    assert 'device.precision="bfloat16"' in text and "policy.shared_trunk=false" in text


def test_memory_options_are_set_before_the_backend_and_never_override_the_user(no_xla_memory_env):
    monkeypatch = no_xla_memory_env
    import os

    assert prepare_backend(0.3) == "GPU memory capped at 30%"
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.3"
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.9")
    assert prepare_backend(0.3) == "XLA memory options from the environment"
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.9"
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION")
    # the newer name of the same setting: setting the old one beside it would make the CUDA plugin fail
    # to start (jaxlib raises inside it and JAX falls back to the CPU)
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.9")
    assert prepare_backend(0.3) == "XLA memory options from the environment"
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ
    monkeypatch.delenv("XLA_CLIENT_MEM_FRACTION")
    assert prepare_backend(None).startswith("GPU memory allocated on demand")
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def test_a_gpu_that_jax_does_not_see_is_named_with_the_fix():
    from jaxlab.config.presets import unused_gpu_warning

    cpu = [DeviceInfo("cpu", "cpu", None)]
    gpu = [DeviceInfo("gpu", "NVIDIA H100 80GB HBM3", 80 * 2**30)]
    message = unused_gpu_warning(cpu, present=lambda: "an NVIDIA GPU (driver 550.54.15)")
    assert message == ("this machine has an NVIDIA GPU (driver 550.54.15) but JAX sees only the CPU, so jaxlab runs "
                       f"on the CPU; install JAX's CUDA wheels: {install_extra('cuda12')} (or pip install -U "
                       "\"jax[cuda12]\"), then check with `jaxlab presets`")
    assert unused_gpu_warning(gpu, present=lambda: "an NVIDIA GPU") is None  # JAX uses it
    assert unused_gpu_warning(cpu, present=lambda: None) is None             # a CPU-only machine


def test_bfloat16_on_a_cpu_without_bfloat16_instructions_is_named_with_the_fix(tmp_path):
    from jaxlab.config.presets import cpu_flags, emulated_bfloat16_warning

    zen3 = tmp_path / "zen3"
    zen3.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7763\nflags\t\t: fpu sse2 avx avx2 fma\n\n"
                    "processor\t: 1\nflags\t\t: fpu sse2 avx avx2 fma\n")
    zen4 = tmp_path / "zen4"
    zen4.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni\n")
    graviton3 = tmp_path / "graviton3"
    graviton3.write_text("processor\t: 0\nFeatures\t: fp asimd sve i8mm bf16 sve2\n")
    assert cpu_flags(zen3) == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert cpu_flags(tmp_path / "missing") is None
    cpu, gpu = [DeviceInfo("cpu", "cpu", None)], [DeviceInfo("gpu", "NVIDIA H100 80GB HBM3", 80 * 2**30)]
    message = emulated_bfloat16_warning("bfloat16", cpu, flags=lambda: cpu_flags(zen3))
    assert message.startswith("device.precision=bfloat16 on a CPU without bfloat16 matmul instructions (none "
                              "of avx512_bf16, amx_bf16, bf16 in /proc/cpuinfo)")
    assert message.endswith("--device.precision float32 (the cpu preset's) is the better choice on this CPU")
    for quiet in (lambda: cpu_flags(zen4), lambda: cpu_flags(graviton3), lambda: None):
        assert emulated_bfloat16_warning("bfloat16", cpu, flags=quiet) is None
    assert emulated_bfloat16_warning("float32", cpu, flags=lambda: cpu_flags(zen3)) is None
    assert emulated_bfloat16_warning("bfloat16", gpu, flags=lambda: cpu_flags(zen3)) is None


def test_the_nvidia_driver_is_found_by_its_proc_file(monkeypatch, tmp_path):
    from jaxlab.config import presets

    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n")
    real_path = presets.Path
    monkeypatch.setattr(presets, "Path", lambda p: version if p == "/proc/driver/nvidia/version" else
                        (tmp_path / "dev" if p == "/dev" else real_path(p)))
    assert presets.nvidia_gpu_present() == "an NVIDIA GPU (driver 550.54.15)"
    version.unlink()
    (tmp_path / "dev").mkdir()
    assert presets.nvidia_gpu_present() is None
    (tmp_path / "dev" / "nvidia0").touch()
    assert presets.nvidia_gpu_present() == "an NVIDIA GPU"


def test_a_card_preset_sizes_the_agents_so_multi_agent_envs_get_a_batch_that_runs():
    """The card presets give agents, not envs: an env of 8 agents gets an eighth of the envs (before, 8
    times the batch and 9 updates; drone's 64 agents at the gpu preset were more than its total steps),
    rounded down to whole groups and to a batch its minibatches divide; a vec.num_envs given after the
    preset (a --config file, a flag) wins."""
    from jaxlab.config import derive_sizes, load_config
    from jaxlab.config.memory import env_shape

    def sized(*flags, preset="h100"):
        config, sources = load_config("target", preset=preset, flags=list(flags))
        sizes = derive_sizes(config, env_shape(config).agents_per_env)  # raises when the batch cannot run
        return config.vec.num_envs, sizes.batch_size, sizes.num_updates, sources["vec.num_envs"]

    assert sized() == (1024, 131_072, 76, "configs/presets/h100.toml (8,192 agents)")  # 8 agents per env
    assert sized(preset="gpu")[:3] == (128, 16_384, 122)
    # 3 agents per env: 2,730 envs would make batches of 131,040, which minibatches of 32,768 do not
    # divide; 2,048 envs (6,144 agents) give 3 minibatches
    assert sized("--env.agents-per-env", "3")[:3] == (2048, 98_304, 101)
    assert sized("--vec.num-envs", "256")[::3] == (256, "command line")
    # 20 agents per env: no count of envs near 409 makes a batch that 32,768 divides, so the minibatch
    # is the batch in as many whole-sequence minibatches as 32,768 would give (4 of 32,640); a
    # minibatch given after the preset is kept
    config, sources = load_config("target", preset="h100", flags=["--env.agents-per-env", "20"])
    assert (config.vec.num_envs, config.train.minibatch_size) == (408, 32_640)
    assert sources["train.minibatch_size"] == "configs/presets/h100.toml (32,768, made to divide the batch)"
    assert sized("--env.agents-per-env", "20", "--train.minibatch-size", "4096")[:3] == (384, 122_880, 81)
    config, _ = load_config("target", preset="h100,heavy")  # a workload preset after the card keeps it
    assert config.vec.num_envs == 1024


# ---- two axes: the card and the workload size ----------------------------------------------------------

def test_a_card_and_a_workload_size_combine_in_order():
    from jaxlab.config import load_config
    from jaxlab.config.presets import preset_axis, split_presets

    assert [preset_axis(n) for n in ("cpu", "gpu", "a100", "h100", "heavy", "beast")] == ["card"] * 4 + ["workload"] * 2
    assert split_presets("h100,heavy") == ("h100", ["heavy"])
    assert split_presets("heavy") == ("auto", ["heavy"])  # auto's card, then heavy
    assert split_presets("auto,beast") == ("auto", ["beast"])
    assert split_presets("a100") == ("a100", [])
    config, sources = load_config("cartpole", preset="h100,heavy")
    assert config.vec.num_envs == 8192 and sources["vec.num_envs"] == "configs/presets/h100.toml (8,192 agents)"
    assert config.policy.mlp_layers == (1024, 512, 256) and config.train.update_epochs == 4  # the workload's
    assert sources["policy.mlp_layers"] == "configs/presets/heavy.toml" and config.preset == "h100,heavy"
    beast, _ = load_config("cartpole", preset="cpu,beast")
    assert beast.policy.shared_trunk is False and beast.policy.hidden_size == 512


@pytest.mark.parametrize("value, message", [
    ("heavy,h100", r"the card preset 'h100' must come before the workload preset heavy; write --preset h100,heavy"),
    ("heavy,beast,h100", r"must come before the workload presets heavy, beast; write --preset h100,heavy,beast"),
    ("h100,a100", r"names 2 card presets \(h100, a100\)"),
    ("cpu,heavy,beast", r"names 2 workload sizes \(heavy, beast\); name at most one, after the card, e.g. --preset "
                        r"cpu,beast"),
    ("nope,heavy", r"unknown preset 'nope'"),
    ("", r"--preset '' names no preset; name one \(`jaxlab presets` lists them\), e.g. --preset auto, or leave"),
    (" , ", r"--preset ' , ' names no preset"),
])
def test_bad_combinations_are_refused(value, message):
    from jaxlab.config.presets import split_presets

    with pytest.raises(ConfigError, match=message):
        split_presets(value)


def test_a_bad_combination_exits_2_from_the_command_line():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "config", "cartpole", "--preset", "heavy,h100"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "write --preset h100,heavy" in result.stderr
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "config", "cartpole", "--preset", "cpu,heavy"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "mlp_layers = [1024, 512, 256]" in result.stdout


def test_a_multi_agent_env_trains_at_a_card_presets_sizes():
    """End to end at the a100 preset's sizes (on the CPU: the preset's platform check is the CLI's):
    target's 8 agents per env give 512 envs in 2 agent groups, one update of 65,536 steps in bfloat16."""
    from jaxlab.config import load_config
    from jaxlab.run.loop import train_loop
    from jaxlab.train.trainer import Trainer

    config, _ = load_config("target", preset="a100", flags=["--policy.hidden-size", "16", "--train.total-timesteps",
                                                            "65536"])
    assert (config.vec.num_envs, config.vec.groups, config.device.precision) == (512, 2, "bfloat16")
    with Trainer(config) as trainer:
        assert [env.num_envs for env in trainer.envs] == [256, 256]
        [record] = train_loop(trainer)
    assert record["global_step"] == 65_536 and np.isfinite(record["policy_loss"])


def test_a_memory_fraction_the_user_gives_applies_under_preset_auto(tmp_path, no_xla_memory_env):
    """Preset auto starts JAX before it knows the card, so it turns preallocation off instead of taking a
    preset's fraction; a device.memory_fraction the user gave (a flag, a --config file) still reaches XLA
    before JAX starts (before, it was recorded and not applied)."""
    import os

    from jaxlab.cli import build_parser
    from jaxlab.cli.common import resolve

    def memory_variables_after(*argv):
        for var in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE"):
            no_xla_memory_env.delenv(var, raising=False)  # what the call before set
        args, flags = build_parser().parse_known_args(["train", "cartpole", *argv])
        args.flags = flags
        config = resolve(args).config
        return (config.device.memory_fraction, os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION"),
                os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"))

    assert memory_variables_after() == (0.0, None, "false")  # on demand
    assert memory_variables_after("--device.memory-fraction", "0.2") == (0.2, "0.2", None)
    own = tmp_path / "mine.toml"
    own.write_text("[device]\nmemory_fraction = 0.35\n")
    assert memory_variables_after("--config", str(own)) == (0.35, "0.35", None)

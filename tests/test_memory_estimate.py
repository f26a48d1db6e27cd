"""The memory estimate (jaxlab.config.memory): the exact parameter count, the terms for the default
cartpole config, the limits, the one-line refusal with a value that fits, and out-of-memory errors."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxlab
from jaxlab.agent.distributions import ActionSpec
from jaxlab.agent.policy import ActorCritic, zero_carry
from jaxlab.config import ConfigError, derive_sizes, load_config, memory
from jaxlab.config.memory import EnvShape, MemoryLimit, estimate, obs_norm_on, param_count
from jaxlab.config.presets import DeviceInfo
from jaxlab.env import Box, Discrete, MultiDiscrete, spaces_of

from conftest import ENV_NAMES

CARTPOLE = EnvShape(agents_per_env=1, obs_shape=(4,), obs_itemsize=4, action_size=1, head_size=2, log_std=0,
                    mask_width=0)
GIB = 2**30


def initialised_count(spec: ActionSpec, obs_shape, hidden: int, lstm: bool) -> int:
    policy = ActorCritic(spec, hidden, lstm)
    params = policy.init(jax.random.PRNGKey(0), zero_carry(2, hidden), jnp.zeros((2, *obs_shape)), jnp.ones(2, bool))
    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))


def test_param_count_by_hand_for_the_default_cartpole_policy():
    # encoder 4*128 + 128, LSTM 128*512 + 512 + 128*512, actor 128*2 + 2, critic 128 + 1
    assert param_count(4, 128, 2) == 640 + 66048 + 65536 + 258 + 129 == 132611


@pytest.mark.parametrize("space, obs_shape, hidden, lstm", [
    (Discrete(2), (4,), 128, True),
    (MultiDiscrete((3, 4, 5)), (3, 5), 32, False),
    (Box((-1.0,) * 3, (1.0,) * 3, (3,)), (7,), 16, True),
])
def test_param_count_equals_an_initialised_actor_critic(space, obs_shape, hidden, lstm):
    spec = ActionSpec.from_space(space)
    log_std = spec.dim if spec.kind == "continuous" else 0
    assert param_count(int(np.prod(obs_shape)), hidden, spec.head_size, lstm, log_std) == \
        initialised_count(spec, obs_shape, hidden, lstm)


@pytest.mark.parametrize("name", ENV_NAMES)
def test_env_shape_of_every_env_gives_the_real_param_count(name):
    with jaxlab.make(name) as env:
        shape = EnvShape.of(env.spaces)
        assert EnvShape.of(spaces_of(name)) == shape   # the registry's answer, without envs
        spec = ActionSpec.from_space(env.action_space)
        assert shape.agents_per_env == env.agents_per_env
        assert shape.obs_itemsize == env.observations.dtype.itemsize
        assert shape.mask_width == (0 if env.action_mask is None else env.action_mask.shape[1])
        obs_shape = env.observation_space.shape
    assert param_count(shape.obs_size, 8, shape.head_size, True, shape.log_std) == \
        initialised_count(spec, obs_shape, 8, True)


def test_the_default_cartpole_estimate_term_by_term():
    config, _ = load_config("cartpole")
    sizes = derive_sizes(config, 1)   # 64 agents x 16 steps = 1,024 samples, minibatch 256, H 128
    est = estimate(config, sizes, CARTPOLE)
    params = 132611 * 4
    assert (est.device["params"], est.device["optimizer"], est.device["gradients"]) == (params, 2 * params, params)
    # per sample: obs 16 + action 4 + logp, value, reward, bootstrap 16 + 3 flags = 39 bytes;
    # per sequence: next value + carry (1 + 256) x 4; the normalised observations (obs_norm auto: on for
    # float observations) 4 x 4 per sample; twice (the per-step arrays and their stack)
    assert est.device["segment"] == 2 * (1024 * 39 + 64 * 257 * 4 + 1024 * 4 * 4)
    # one minibatch: activations (4 + 16 * 128 + 2 + 1) x 4 and its copy of the segment (39) per sample,
    # and the batch's advantages and returns
    assert est.device["update"] == 256 * ((4 + 2048 + 3) * 4 + 39) + 2 * 1024 * 4
    # env: obs and final obs 32, action 4, reward 4, 2 flags per agent; host segment 2 x 16 x 64 x 7
    assert est.host == {"env": 64 * 42, "host segment": 2 * 16 * 64 * 7}
    assert 2 * 2**20 < est.device_total < 32 * 2**20          # a sane band: a few MiB
    assert est.device_total == int(1.5 * sum(est.device.values()))



def test_the_estimate_sizes_uint8_codes_normalised_as_the_trainer_stores_them():
    """train.obs_norm auto normalises uint8 observations of one dimension (codes), which the trainer then keeps
    as float32 beside the segment; [H, W] pixels of as many elements stay uint8 alone. The estimate resolves
    obs_norm by the trainer's rule, so the codes' segment holds 4 more bytes per element and sample."""
    import dataclasses

    config, _ = load_config("cartpole")
    sizes = derive_sizes(config, 1)   # 1,024 samples
    codes = dataclasses.replace(CARTPOLE, obs_shape=(64,), obs_itemsize=1)
    pixels = dataclasses.replace(CARTPOLE, obs_shape=(8, 8), obs_itemsize=1)
    assert obs_norm_on(config, codes) and not obs_norm_on(config, pixels)
    extra = estimate(config, sizes, codes).device["segment"] - estimate(config, sizes, pixels).device["segment"]
    assert extra == 2 * 1024 * 64 * 4


def test_with_several_devices_each_holds_the_replicated_terms_and_its_share_of_the_samples():
    """2 devices: params, optimizer and gradients on each, the segment and the update halved; a GPU's
    limit is per device, so a config can fit on two cards and not on one; on a CPU every device's
    arrays are host memory, so the replicated terms count twice there."""
    import dataclasses

    config, _ = load_config("cartpole")
    one_sizes = derive_sizes(config, 1)
    one = estimate(config, one_sizes, CARTPOLE)
    two = estimate(config, dataclasses.replace(one_sizes, devices=2), CARTPOLE)
    for term in ("params", "optimizer", "gradients"):
        assert two.device[term] == one.device[term]
    assert (two.device["segment"], two.device["update"]) == (one.device["segment"] // 2, one.device["update"] // 2)
    assert "for JAX on each of 2 devices (params" in two.describe() and "each of" not in one.describe()
    between = MemoryLimit(device=(one.device_total + two.device_total) // 2, host=100 * GIB, device_name="a GPU")
    assert memory.shortfall(one, between)[0] == "device" and memory.shortfall(two, between) is None
    cpu = MemoryLimit(device=None, host=2 * two.device_total + two.host_total)
    assert memory.shortfall(two, cpu) is None
    assert memory.shortfall(two, dataclasses.replace(cpu, host=cpu.host - 1))[0] == "host"


def test_limits_from_simulated_devices():
    cpu = memory.device_limit([DeviceInfo("cpu", "cpu", None)], host=8 * GIB)
    assert (cpu.device, cpu.host) == (None, 8 * GIB)
    gpu = memory.device_limit([DeviceInfo("gpu", "NVIDIA H100 80GB HBM3", 60 * GIB)], host=100 * GIB)
    assert (gpu.device, gpu.host, gpu.device_name) == (60 * GIB, 100 * GIB, "NVIDIA H100 80GB HBM3")
    assert memory.device_limit([], host=None) == MemoryLimit(None, None)


def test_host_memory_readers(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:  1000 kB\nMemFree:  10 kB\nMemAvailable:  500 kB\n")
    assert memory._meminfo_available(str(tmp_path / "meminfo")) == 500 * 1024
    assert memory._meminfo_available(str(tmp_path / "missing")) is None
    (tmp_path / "memory.max").write_text("4096\n")
    (tmp_path / "memory.current").write_text("1024\n")
    assert memory._cgroup_headroom(str(tmp_path)) == 3072
    (tmp_path / "memory.max").write_text("max\n")
    assert memory._cgroup_headroom(str(tmp_path)) is None
    available = memory.host_available()
    assert available is None or available > 0


def refusal(flags, limit):
    config, _ = load_config("cartpole", flags=flags)
    sizes = derive_sizes(config, 1)
    with pytest.raises(ConfigError) as info:
        memory.check_fits(config, sizes, CARTPOLE, limit)
    return config, sizes, str(info.value)


def test_a_big_hidden_size_is_refused_with_a_hidden_size_that_fits():
    limit = MemoryLimit(device=1 * GIB, host=100 * GIB, device_name="a small GPU")
    config, sizes, message = refusal(["--policy.hidden-size", "20000"], limit)
    assert message.startswith("this config needs about ") and "of GPU memory on a small GPU but 1.0 GiB is its limit" \
        in message and "\n" not in message
    assert "most of it is optimizer" in message and "reduce policy.hidden_size (now 20,000) or policy.mlp_layers, " \
        "e.g. --policy.hidden-size 2048" in message
    listed = message.split("optimizer ")[1].split(",")[0]  # the breakdown's figure, before XLA's x1.5
    assert f"most of it is optimizer ({listed})" in message
    # 2048 fits and 4096 does not
    fits = memory.estimate(*memory._with(config, sizes, "policy.hidden_size", 2048), CARTPOLE)
    too_big = memory.estimate(*memory._with(config, sizes, "policy.hidden_size", 4096), CARTPOLE)
    assert fits.device_total <= GIB < too_big.device_total


def test_many_envs_are_refused_on_a_cpu_naming_num_envs():
    limit = MemoryLimit(device=None, host=2 * GIB)
    _, _, message = refusal(["--vec.num-envs", "1000000", "--train.total-timesteps", "1e9"], limit)
    assert "of host memory but 2.0 GiB is available" in message
    assert "most of it is segment" in message and "reduce vec.num_envs (now 1,000,000), train.bptt_horizon or " \
        "train.batch_size, e.g. --vec.num-envs 346336" in message
    assert_largest_valid_fit(["--train.total-timesteps", "1e9"], 346336, 1, limit)


def fits_and_is_valid(flags, envs: int, processes: int, limit) -> bool | None:
    """Whether cartpole with ``flags`` and ``envs`` envs over ``processes`` fits in ``limit``; None when the
    checks refuse it."""
    config, _ = load_config("cartpole", flags=[*flags, "--vec.num-envs", str(envs)])
    try:
        sizes = derive_sizes(config, 1, processes=processes)
    except ConfigError:
        return None
    return memory.shortfall(estimate(config, sizes, CARTPOLE), limit) is None


def assert_largest_valid_fit(flags, envs: int, processes: int, limit):
    """``envs`` is valid and fits, and the next valid value above it does not fit."""
    assert fits_and_is_valid(flags, envs, processes, limit) is True
    above = next(n for n in range(envs + 1, 2 * envs) if fits_and_is_valid(flags, n, processes, limit) is not None)
    assert fits_and_is_valid(flags, above, processes, limit) is False


def test_the_suggested_num_envs_is_the_largest_that_fits_and_that_groups_and_processes_divide():
    """The refusal suggested a power of two, which vec.groups=3 never divides: the suggested flag was
    itself refused. It is now the largest value that fits and that the checks take (a multiple of
    vec.groups x processes whose batch the minibatch divides)."""
    limit = MemoryLimit(device=None, host=2 * GIB)
    flags = ["--train.total-timesteps", "1e9", "--vec.groups", "3"]
    config, _ = load_config("cartpole", flags=[*flags, "--vec.num-envs", "3000000"])
    with pytest.raises(ConfigError) as info:
        memory.check_fits(config, derive_sizes(config, 1, processes=2), CARTPOLE, limit)
    suggested = int(str(info.value).split("e.g. --vec.num-envs ")[1].split()[0])
    assert suggested % 6 == 0
    assert_largest_valid_fit(flags, suggested, 2, limit)


def test_a_fitting_config_returns_its_estimate_and_an_unknown_limit_refuses_nothing():
    config, _ = load_config("cartpole", flags=["--policy.hidden-size", "20000"])
    sizes = derive_sizes(config, 1)
    assert memory.check_fits(config, sizes, CARTPOLE, MemoryLimit(None, None)) == estimate(config, sizes, CARTPOLE)
    config, _ = load_config("cartpole")
    memory.check_fits(config, derive_sizes(config, 1), CARTPOLE, MemoryLimit(1 * GIB, 1 * GIB, "gpu"))


@pytest.mark.parametrize("err", [
    jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4294967296 bytes.\nmore"),
    MemoryError("Unable to allocate 3.7 TiB for an array"),
    RuntimeError("CUDA error: out of memory"),
])
def test_out_of_memory_message_is_one_line_with_the_estimate_and_a_fix(err, monkeypatch):
    config, _ = load_config("cartpole", flags=["--device.memory-fraction", "0.3"])
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.delenv("XLA_CLIENT_MEM_FRACTION", raising=False)
    message = memory.out_of_memory_message(err, config)
    assert message.startswith(f"out of memory ({str(err).splitlines()[0]}); the config needs about ")
    assert "\n" not in message and "for JAX (params" in message and "most of it is " in message
    assert "reduce " in message and "memory_fraction" not in message   # XLA was not given the fraction
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.3")     # as presets.prepare_backend sets it
    assert memory.out_of_memory_message(err, config).endswith("or raise device.memory_fraction (now 0.3)")
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION")
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.3")     # its newer name, set by the user
    assert memory.out_of_memory_message(err, config).endswith("or raise device.memory_fraction (now 0.3)")


def test_out_of_memory_message_ignores_other_errors_and_never_raises():
    config, _ = load_config("cartpole")
    assert memory.out_of_memory_message(ValueError("shapes do not match"), config) is None
    broken = config.__class__(env_name="no-such-env")  # the estimate cannot be made: a generic fix
    assert memory.out_of_memory_message(MemoryError(), broken) == \
        "out of memory (MemoryError); reduce policy.hidden_size, vec.num_envs or train.minibatch_size"


def jaxlab_cli(*args):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("flags, key", [
    (["--policy.hidden-size", "1000000"], "policy.hidden_size (now 1,000,000)"),
    (["--vec.num-envs", "100000000", "--train.total-timesteps", "1e10", "--train.minibatch-size", "4096"],
     "vec.num_envs (now 100,000,000)"),
])
def test_train_refuses_a_config_that_cannot_fit_before_allocating(flags, key, tmp_path):
    result = jaxlab_cli("train", "cartpole", "--run-dir", str(tmp_path / "run"), *flags)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("jaxlab train: error: this config needs about ")
    assert f"reduce {key}" in result.stderr
    assert not (tmp_path / "run").exists()


def test_config_prints_the_estimate_in_its_header():
    result = jaxlab_cli("config", "cartpole")
    assert result.returncode == 0, result.stderr
    line = result.stdout.splitlines()[2]
    assert line.startswith("# memory: about ") and "for JAX (params 518.0 KiB, optimizer 1.0 MiB" in line
    assert "available" in line or "for JAX on" in line


def test_an_out_of_memory_during_training_is_one_line_and_keeps_what_was_saved(tmp_path, monkeypatch, capsys):
    """An allocation failure the estimate did not foresee (XLA's RESOURCE_EXHAUSTED) ends `jaxlab train`
    with exit 1 and one line naming the estimate and a fix, no traceback; the checkpoints written
    before it stay, and summary.json records the error."""
    import json

    from jaxlab import checkpoint, cli
    from jaxlab.train.trainer import Trainer

    real_train = Trainer.train

    def train_then_fail(self):
        if self.update_index == 3:
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 372.53GiB.")
        return real_train(self)

    monkeypatch.setattr(Trainer, "train", train_then_fail)
    run = tmp_path / "run"
    code = cli.main(["train", "cartpole", "--vec.num-envs", "8", "--train.minibatch-size", "64",
                     "--policy.hidden-size", "16", "--train.total-timesteps", "1280", "--checkpoint.interval", "2",
                     "--log.dashboard", "none", "--run-dir", str(run)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    line = next(line for line in err.splitlines() if line.startswith("jaxlab train: error: out of memory"))
    assert "RESOURCE_EXHAUSTED" in line and "the config needs about" in line and f"are in {run}" in line
    assert [p.name for p in checkpoint.step_dirs(run / "checkpoints")] == ["2"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["error"].startswith("RuntimeError: RESOURCE_EXHAUSTED") and summary["updates"] == 3


def test_a_big_module_is_told_to_shrink_itself_not_the_keys_it_ignores(tmp_path):
    """A user's module without a hidden_size field ignores policy.hidden_size and mlp_layers: the fix
    names the module (it said "reduce policy.hidden_size (now 128) or policy.mlp_layers")."""
    (tmp_path / "wide.py").write_text(
        "import flax.linen as nn\n\n\nclass Wide(nn.Module):\n    action: object\n\n    @nn.compact\n"
        "    def __call__(self, carry, obs):\n        x = nn.Dense(20000)(nn.Dense(20000)(obs.reshape(obs.shape[0], -1)))\n"
        "        return carry, nn.Dense(self.action.head_size)(x), nn.Dense(1)(x)[:, 0]\n")
    config, _ = load_config("cartpole", flags=["--policy.module", f"{tmp_path / 'wide.py'}:Wide"])
    with pytest.raises(ConfigError) as info:
        memory.check_fits(config, derive_sizes(config, 1), memory.env_shape(config),
                          MemoryLimit(device=1 * GIB, host=100 * GIB, device_name="a small GPU"))
    message = str(info.value)
    assert message.endswith(f"most of it is optimizer (3.0 GiB): make the network of policy.module="
                            f"'{tmp_path / 'wide.py'}:Wide' smaller") and "hidden_size" not in message


def test_over_several_processes_the_estimate_and_the_check_are_one_processs():
    """A run over 2 processes steps half the envs in each and shards the samples over both processes'
    devices: the estimate (and the check against one host's memory) was the whole run's, so a run that
    fits per host was refused, and the printed need was twice one host's. It is one process's now."""
    import dataclasses

    config, _ = load_config("cartpole", flags=["--vec.num-envs", "1024", "--train.total-timesteps", "1e7"])
    one = estimate(config, derive_sizes(config, 1, processes=1), CARTPOLE)
    two = estimate(config, derive_sizes(config, 1, processes=2), CARTPOLE)
    for term in ("params", "optimizer", "gradients"):
        assert two.device[term] == one.device[term]
    assert (two.device["segment"], two.device["update"]) == (one.device["segment"] // 2, one.device["update"] // 2)
    assert two.host == {term: n // 2 for term, n in one.host.items()}
    assert "per process" not in one.describe()
    assert two.describe().count(" per process") == 2
    on_each = dataclasses.replace(two, devices=2).describe()
    assert "for JAX on each of 2 devices, per process (" in on_each
    between = MemoryLimit(device=(one.device_total + two.device_total) // 2, host=100 * GIB, device_name="a GPU")
    sizes = derive_sizes(config, 1, processes=2)
    assert memory.check_fits(config, sizes, CARTPOLE, between) == two
    with pytest.raises(ConfigError, match="of GPU memory on a GPU but"):
        memory.check_fits(config, derive_sizes(config, 1, processes=1), CARTPOLE, between)
    small = MemoryLimit(device=two.device_total - 1, host=100 * GIB, device_name="a GPU")
    with pytest.raises(ConfigError, match="of GPU memory on a GPU per process but"):
        memory.check_fits(config, sizes, CARTPOLE, small)


def test_config_prints_one_processs_estimate_for_dist_flags(capsys, monkeypatch):
    from jaxlab import cli

    for name in ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_JOB_ID", "JAXLAB_COORDINATOR"):
        monkeypatch.delenv(name, raising=False)
    flags = ["--vec.num-envs", "1024", "--train.total-timesteps", "1e7"]
    assert cli.main(["config", "cartpole", *flags]) == 0
    alone = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("# memory:"))
    assert cli.main(["config", "cartpole", *flags, "--dist.num-processes", "2", "--dist.coordinator", "node0:1234",
                     "--dist.process-id", "1"]) == 0
    shared = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("# memory:"))
    assert "per process" not in alone and "of host buffers per process" in shared
    config, _ = load_config("cartpole", flags=flags)
    assert memory.estimate(config, derive_sizes(config, 1, processes=2), CARTPOLE).describe() in shared


def test_processes_sharing_a_host_are_checked_together_against_its_memory():
    """Two processes of one run on one host were each checked alone against the host's whole memory, so
    together they could need twice what it has. check_fits takes the processes on the host (on_host)
    and checks their need together, saying so; its suggested value fits them together."""
    config, _ = load_config("cartpole", flags=["--vec.num-envs", "1024", "--train.total-timesteps", "1e7"])
    sizes = derive_sizes(config, 1, processes=2)
    one = estimate(config, sizes, CARTPOLE)
    need = one.host_total + one.device_total  # a CPU: JAX's arrays are host memory too
    limit = MemoryLimit(device=None, host=need * 3 // 2)
    assert memory.check_fits(config, sizes, CARTPOLE, limit) == one
    with pytest.raises(ConfigError) as info:
        memory.check_fits(config, sizes, CARTPOLE, limit, on_host=2)
    message = str(info.value)
    assert message.startswith(f"this config needs about {memory.format_bytes(2 * need)} of host memory for the 2 "
                              f"processes of this run on this host ({memory.format_bytes(need)} each) but "
                              f"{memory.format_bytes(limit.host)} is available")
    suggested = int(message.split("--vec.num-envs ")[1].split()[0])
    config, _ = load_config("cartpole", flags=["--vec.num-envs", str(suggested), "--train.total-timesteps", "1e7"])
    memory.check_fits(config, derive_sizes(config, 1, processes=2), CARTPOLE, limit, on_host=2)

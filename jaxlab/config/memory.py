"""The memory a config needs, estimated before anything is allocated, and the memory there is, so that
a config that cannot fit stops with one line (exit 2) instead of a JAX RESOURCE_EXHAUSTED traceback
part of the way in.

Notation: P params, H = policy.hidden_size, O = flattened observation size, k = actor head size,
B = batch samples (S segments x A agents x T steps), M = minibatch samples, C = carry floats per agent
(2H per trunk with the built-in network), K = floats kept per sample for the backward pass (below).
Bytes:

device (what JAX holds; on a CPU that is host memory too)
    params     4 P
    optimizer  8 P                Adam's two moments
    gradients  4 P
    segment    2 x (B x per-sample bytes + S x A x (next value + carry C) x 4): the collected
               segment (obs in the env's dtype, action, logp, value, reward, bootstrap value; reset,
               terminal, truncation flags; action mask) and, while it is being stacked, the per-step
               arrays it is stacked from; with observation normalisation, also the normalised
               observations the learner gets, B x O x 4
    update     M x K x 4 activations kept for one minibatch's backward pass, the minibatch's copy of
               the segment, and the batch's advantages and returns 2 x B x 4. Per sample and trunk, K
               counts the encoder input O, each convolution's and dense layer's pre- and
               post-activation outputs (2 x its size), and with an LSTM its input gates 4H, per step
               gates with their sigmoid and tanh 8H, and c and h 2H; then the heads k + 1. (The
               default network, dense [H] + LSTM-H: O + 16H + k + 1.) A user's module (policy.module)
               is counted exactly for P and C (jax.eval_shape of its init); its K is estimated as the
               default network's
host (numpy buffers besides JAX)
    env        A x (2 x obs + action + reward 4 + 2 flags + mask): observations and final observations
    segment    T x A x (reward 4 + 3 flags) x 2: the rollout's host rewards and flags, and the stacked
               reset flags with their per-step copies

In a run over P processes (dist.num_processes) the estimate is one process's, which is what each host
must hold: the sharded terms (segment, update) are split over every process's devices, and the host terms
take its A / P agents; the replicated terms are whole in every process. Processes of one run on one
host share its memory: once they have met, `jaxlab train` checks their host need together (check_fits'
``on_host``, from jaxlab.run.distributed.processes_on_this_host).

The device total is the sum times SAFETY (1.5) for XLA's temporaries, workspace and allocator rounding.
Only ``current_limit`` and ``out_of_memory_message`` touch JAX (through presets.current_devices).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

from jaxlab.config.presets import MEMORY_FRACTION_VARS
from jaxlab.config.schema import Config, ConfigError, PolicyModuleError
from jaxlab.config.validate import Sizes, derive_sizes, flag_of

SAFETY = 1.5
FLOAT = 4  # bytes of a float32 (params, optimizer state, values, activations) and of an int32 action

#: The config keys that shrink each term, the first one the one a fix suggests a value for.
TERM_KEYS = {"params": ("policy.hidden_size", "policy.mlp_layers"),
             "optimizer": ("policy.hidden_size", "policy.mlp_layers"),
             "gradients": ("policy.hidden_size", "policy.mlp_layers"),
             "segment": ("vec.num_envs", "train.bptt_horizon", "train.batch_size"),
             "update": ("train.minibatch_size", "policy.hidden_size"),
             "env": ("vec.num_envs",), "host segment": ("vec.num_envs", "train.bptt_horizon")}


@dataclass(frozen=True)
class EnvShape:
    """What the estimate needs of an env's spaces, per agent."""

    agents_per_env: int
    obs_shape: tuple[int, ...]
    obs_itemsize: int    # bytes per observation element: 1 for uint8, 4 for float32
    action_size: int     # action elements: 1 for Discrete, len(nvec), or the continuous dim
    head_size: int       # actor outputs: n, sum(nvec) or the continuous dim
    log_std: int         # learned log-std entries: the continuous dim, 0 for discrete actions
    mask_width: int      # action-mask entries, 0 without a mask
    nvec: tuple[int, ...] = ()  # the category counts of a (multi-)discrete action, () for continuous or unknown

    @property
    def obs_size(self) -> int:
        return math.prod(self.obs_shape)

    @classmethod
    def of(cls, spaces) -> EnvShape:
        """From jaxlab.env's EnvSpaces (``spaces_of(name, **params)``, or a VecEnv's ``.spaces``)."""
        from jaxlab.env.spaces import Box, Discrete

        action = spaces.action_space
        if isinstance(action, Discrete):
            size, head, log_std, nvec = 1, action.n, 0, (int(action.n),)
        elif isinstance(action, Box):
            size = head = log_std = math.prod(action.shape)
            nvec = ()
        else:
            size, head, log_std, nvec = len(action.nvec), sum(action.nvec), 0, tuple(int(n) for n in action.nvec)
        obs = spaces.observation_space
        return cls(agents_per_env=int(spaces.agents_per_env), obs_shape=tuple(obs.shape),
                   obs_itemsize=int(obs.dtype.itemsize), action_size=size, head_size=head, log_std=log_std,
                   mask_width=int(spaces.mask_width), nvec=nvec)


def env_shape(config: Config) -> EnvShape:
    """The shape of ``config``'s env with parameters ``config.env``, read from the C registry without
    creating envs (jaxlab.env.spaces_of; a Python env is made once and closed); ConfigError as
    checked_spaces says."""
    return EnvShape.of(checked_spaces(config.env_name, config.env_library or None, **config.env))


def checked_spaces(name: str, library: str | None = None, **params):
    """jaxlab.env.spaces_of(name, library, **params); ConfigError for an env parameter out of range or of
    the wrong type, and for whatever a Python env raises while it is made (its own code, a missing
    dependency: named with the env)."""
    from jaxlab.env import is_python_env, spaces_of

    try:
        return spaces_of(name, library=library, **params)
    except (ValueError, TypeError) as err:
        if is_python_env(name):
            raise python_env_error(name, err) from None
        raise ConfigError(str(err)) from None
    except Exception as err:
        if not is_python_env(name):
            raise
        raise python_env_error(name, err) from None


def python_env_error(name: str, err: Exception) -> ConfigError:
    """The ConfigError for ``err``, raised while the Python env ``name`` was made (or first reset): its
    message when it names the env (the adapters' own checks), else the env, the error's type and it."""
    if name in str(err):
        return ConfigError(str(err))
    return ConfigError(f"env {name!r} failed while being made: {type(err).__name__}: {err}")


def param_count(obs_size: int, hidden_size: int, head_size: int, lstm: bool = True, log_std: int = 0) -> int:
    """Parameters of policy.ActorCritic with one dense layer of H: encoder Dense(O -> H), LSTM input
    projection Dense(H -> 4H) and recurrent kernel [H, 4H] (no bias), actor Dense(H -> k), critic
    Dense(H -> 1), and the log-std."""
    H = hidden_size
    count = obs_size * H + H + H * head_size + head_size + H + 1
    if lstm:
        count += H * 4 * H + 4 * H + H * 4 * H
    return count + log_std


@dataclass(frozen=True)
class NetworkSize:
    """What the estimate needs of a network: params, carry floats per agent, floats kept per sample."""

    params: int
    carry: int
    kept: int


def network_size(policy, shape: EnvShape) -> NetworkSize:
    """The size of the built-in network of ``policy`` (a PolicyConfig) for ``shape``'s observations: per
    trunk (one, or two with shared_trunk false) the convolutions k x k x c_in x c_out + c_out, the dense
    layers d_in x w + w, the LSTM d x 4H + 4H + H x 4H; the actor (F x k + k) and critic (F + 1) heads on
    the trunks' outputs F, and the log-std. A user's module (policy.module) is measured instead."""
    if policy.module:
        return _module_size(policy, shape)
    from jaxlab.config.validate import conv_sizes, image_shape

    H = policy.hidden_size
    params = kept = 0
    size = shape.obs_size
    if policy.encoder == "cnn":
        height, width, channels = image_shape(shape.obs_shape)
        for (h, w), c_out, k in zip(conv_sizes(height, width, policy.cnn_kernels, policy.cnn_strides),
                                    policy.cnn_channels, policy.cnn_kernels):
            params += k * k * channels * c_out + c_out
            kept += 2 * h * w * c_out
            channels, size = c_out, h * w * c_out
    for width in policy.mlp_layers:
        params += size * width + width
        kept += 2 * width
        size = width
    if policy.lstm:
        params += size * 4 * H + 4 * H + H * 4 * H
        kept += 14 * H
        size = H
    trunks = 1 if policy.shared_trunk else 2
    params = trunks * params + size * shape.head_size + shape.head_size + size + 1 + shape.log_std
    kept = shape.obs_size + trunks * kept + shape.head_size + 1
    return NetworkSize(params, trunks * 2 * H, kept)


def _module_size(policy, shape: EnvShape) -> NetworkSize:
    """A user's module, measured by jax.eval_shape of its init (nothing is computed); PolicyModuleError when it
    cannot be loaded or breaks the contract (jaxlab.agent.custom.module_size's checks)."""
    import dataclasses as dc

    from jaxlab.agent.custom import module_size

    try:
        params, carry = module_size(policy.module, shape, policy.hidden_size)
    except ValueError as err:
        raise PolicyModuleError(str(err)) from None
    default = network_size(dc.replace(policy, module="", encoder="mlp", mlp_layers=(policy.hidden_size,)), shape)
    return NetworkSize(params, carry, default.kept)


def obs_norm_on(config: Config, shape: EnvShape) -> bool:
    """train.obs_norm resolved, the one rule the trainer and the estimate use: auto is auto_obs_norm's."""
    value = config.train.obs_norm
    return auto_obs_norm(shape) if value == "auto" else bool(value)


def auto_obs_norm(shape: EnvShape) -> bool:
    """train.obs_norm auto for observations of ``shape``: on for floats and for uint8 of one dimension (codes,
    e.g. a grid's 0 empty, 1 agent, 2 target), off for uint8 of two or more ([H, W] or [H, W, C] pixels, which
    the network divides by 255)."""
    return shape.obs_itemsize != 1 or len(shape.obs_shape) <= 1


def auto_obs_norm_words(shape: EnvShape) -> str:
    """What train.obs_norm auto does with observations of ``shape``, for `jaxlab config`: 'on: uint8[9], one
    dimension, are codes, normalised' (or floats), 'off: uint8[8, 8, 3] are pixels, divided by 255'."""
    dims = ", ".join(map(str, shape.obs_shape))
    if shape.obs_itemsize != 1:
        return f"on: float observations [{dims}], normalised"
    if auto_obs_norm(shape):
        return f"on: uint8[{dims}], one dimension, are codes, normalised"
    return f"off: uint8[{dims}] are pixels, divided by 255 (--train.obs-norm true normalises them)"


def auto_obs_norm_before(shape: EnvShape) -> bool:
    """train.obs_norm auto as it was resolved before auto_obs_norm's rule (checkpoints whose meta has no
    "obs_norm"): on for floats, off for any uint8 observations."""
    return shape.obs_itemsize != 1


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per term (before SAFETY) of one process of a run over ``processes``: device {params,
    optimizer, gradients, segment, update} on each of its ``devices`` devices (params, optimizer and
    gradients replicated, the segment and the update's samples sharded over every process's devices),
    host {env, host segment} for its share of the envs."""

    device: dict
    host: dict
    devices: int = 1
    processes: int = 1

    @property
    def device_total(self) -> int:
        """Bytes JAX needs on each device, SAFETY included."""
        return int(SAFETY * sum(self.device.values()))

    @property
    def host_total(self) -> int:
        return sum(self.host.values())

    def term_bytes(self, term: str) -> int:
        """A term's bytes as describe() lists them (device terms before SAFETY, which the totals add)."""
        return self.device[term] if term in self.device else self.host[term]

    def describe(self) -> str:
        """'about 6.4 MiB for JAX (params 518.0 KiB, ..., update 2.0 MiB; x1.5 for XLA's temporaries)
        and 16.6 KiB of host buffers'; over several processes, each process's: '... for JAX on each of 2
        devices, per process (...) and 8.3 KiB of host buffers per process'."""
        terms = ", ".join(f"{name} {format_bytes(n)}" for name, n in self.device.items())
        each = f" on each of {self.devices} devices" if self.devices > 1 else ""
        per = self.per_process()
        return (f"about {format_bytes(self.device_total)} for JAX{each}{',' * bool(each and per)}{per} ({terms}; "
                f"x{SAFETY:g} for XLA's temporaries) and {format_bytes(self.host_total)} of host buffers{per}")

    def per_process(self) -> str:
        """' per process' when the estimate is one process's of several, else ''."""
        return " per process" if self.processes > 1 else ""


def format_bytes(n: float) -> str:
    """1536 -> '1.5 KiB', 3 * 2**30 -> '3.0 GiB', 12 -> '12 B'."""
    for unit, size in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _segment_sample_bytes(shape: EnvShape) -> int:
    """Bytes of one [T, A] entry of a segment: obs, action, logp, value, reward, bootstrap value,
    3 flags, mask."""
    return shape.obs_size * shape.obs_itemsize + shape.action_size * FLOAT + 4 * FLOAT + 3 + shape.mask_width


def _env_bytes(shape: EnvShape, agents: int) -> int:
    """The host buffers of envs of ``agents`` agents: observations and final observations, action,
    reward, 2 flags, mask."""
    return agents * (2 * shape.obs_size * shape.obs_itemsize + shape.action_size * FLOAT + FLOAT + 2
                     + shape.mask_width)


def estimate(config: Config, sizes: Sizes, shape: EnvShape) -> MemoryEstimate:
    """The memory ``config`` needs in each process, per term, from its derived ``sizes`` (the whole run's:
    its samples are sharded over the ``sizes.devices`` devices of each of ``sizes.processes`` processes,
    and each process steps num_agents / processes agents) and the env's ``shape``."""
    network = network_size(config.policy, shape)
    params = network.params
    sequences = sizes.segments * sizes.num_agents
    segment = sizes.batch_size * _segment_sample_bytes(shape) + sequences * (1 + network.carry) * FLOAT
    if obs_norm_on(config, shape):
        segment += sizes.batch_size * shape.obs_size * FLOAT
    minibatch = sizes.minibatch_size * (network.kept * FLOAT + _segment_sample_bytes(shape))
    A, T = -(-sizes.num_agents // sizes.processes), sizes.horizon  # this process's agents
    env = _env_bytes(shape, A)
    devices = max(1, sizes.devices)
    shares = devices * sizes.processes  # every process's devices hold a share of the samples
    update = minibatch + 2 * sizes.batch_size * FLOAT
    return MemoryEstimate(
        device={"params": params * FLOAT, "optimizer": 2 * params * FLOAT, "gradients": params * FLOAT,
                "segment": -(-2 * segment // shares), "update": -(-update // shares)},  # ceil: sharded
        host={"env": env, "host segment": 2 * T * A * (FLOAT + 3)}, devices=devices, processes=sizes.processes)


# ---- the memory there is ---------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryLimit:
    """What there is: ``device`` bytes JAX may take on the accelerator (None: JAX runs on the CPU and its
    arrays are host memory), ``host`` bytes of host memory available now (None: unknown), and the
    device's name for messages."""

    device: int | None
    host: int | None
    device_name: str = "the CPU"

    def describe(self) -> str:
        host = f"{format_bytes(self.host)} of host memory available" if self.host is not None else \
            "host memory unknown"
        if self.device is None:
            return f"{host} (JAX runs on the CPU: its arrays are host memory too)"
        return f"{format_bytes(self.device)} for JAX on {self.device_name}, {host}"


def host_available() -> int | None:
    """Bytes of host memory available now: MemAvailable of /proc/meminfo (free memory plus the cache
    that can be reclaimed), else os.sysconf SC_AVPHYS_PAGES x SC_PAGE_SIZE; no more than the headroom
    under a cgroup v2 memory limit. None when none of these can be read."""
    available = _meminfo_available()
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            available = None
    headroom = _cgroup_headroom()
    if headroom is not None:
        available = headroom if available is None else min(available, headroom)
    return available


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_headroom(root: str = "/sys/fs/cgroup") -> int | None:
    try:
        with open(f"{root}/memory.max") as f:
            limit = f.read().strip()
        with open(f"{root}/memory.current") as f:
            current = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - current, 0)


def device_limit(devices: list, host: int | None) -> MemoryLimit:
    """The limit for JAX's first device, from presets.DeviceInfo ``devices``: on a GPU its memory_bytes,
    which is ``memory_stats()["bytes_limit"]``, the cap XLA enforces. That cap already applies
    device.memory_fraction when it reached XLA before JAX started (XLA_PYTHON_CLIENT_MEM_FRACTION: an
    explicit --preset, --resume; measured on an H100: 0.3 gives 25.5 GB, the default 0.75 63.8 GB), so
    it is not multiplied again. On a CPU (or without memory stats) JAX takes host memory."""
    if not devices or devices[0].platform == "cpu" or not devices[0].memory_bytes:
        return MemoryLimit(None, host)
    return MemoryLimit(int(devices[0].memory_bytes), host, devices[0].kind)


def current_limit() -> MemoryLimit:
    """The limit on this machine (starts JAX's backend: call it after presets.prepare_backend)."""
    from jaxlab.config.presets import current_devices

    return device_limit(current_devices(), host_available())


# ---- fits or not, and what to reduce ----------------------------------------------------------------

def shortfall(est: MemoryEstimate, limit: MemoryLimit, on_host: int = 1) -> tuple[str, int, int] | None:
    """(where: "device" or "host", bytes needed, bytes there) of the first memory that is too small;
    None when the estimate fits (or the limit is unknown). On a CPU JAX's arrays count as host memory.
    ``on_host``: the run's processes on this host (this one included), which share its memory: each
    needs ``est``'s host bytes (a GPU's limit is each process's own)."""
    if limit.device is not None and est.device_total > limit.device:
        return "device", est.device_total, limit.device
    host_need = on_host * (est.host_total + (est.devices * est.device_total if limit.device is None else 0))
    if limit.host is not None and host_need > limit.host:
        return "host", host_need, limit.host
    return None


def biggest_term(est: MemoryEstimate, where: str, on_cpu: bool) -> str:
    """The term of ``where`` ("device" or "host") that takes the most; on a CPU, of all terms."""
    if on_cpu:
        terms = {**est.device, **est.host}
    else:
        terms = est.device if where == "device" else est.host
    return max(terms, key=terms.get)


def _get(config: Config, key: str):
    section, name = key.split(".")
    return getattr(getattr(config, section), name)


def _with(config: Config, sizes: Sizes, key: str, value: int) -> tuple[Config, Sizes]:
    """``config`` and ``sizes`` with ``key`` (the first key of a TERM_KEYS entry: policy.hidden_size,
    vec.num_envs or train.minibatch_size) set to ``value``: the sizes the estimate reads, not re-checked."""
    section, name = key.split(".")
    config = dataclasses.replace(config, **{section: dataclasses.replace(getattr(config, section), **{name: value})})
    if key == "vec.num_envs":
        agents = value * sizes.agents_per_env
        batch = sizes.segments * agents * sizes.horizon
        sizes = dataclasses.replace(sizes, num_envs=value, num_agents=agents, batch_size=batch,
                                    minibatch_size=min(sizes.minibatch_size, batch))
    elif key == "train.minibatch_size":
        sizes = dataclasses.replace(sizes, minibatch_size=value)
    return config, sizes


#: how many values of vec.num_envs below the largest that may fit suggest() tries at most
NUM_ENVS_TRIES = 10_000


def suggest(config: Config, sizes: Sizes, shape: EnvShape, key: str, fits) -> int | None:
    """The largest value of ``key`` below its current one that the config's checks take (derive_sizes,
    over the run's processes: a flag with it alone makes a valid config) and with which
    ``fits(estimate)`` holds; None when none does. The values tried: for vec.num_envs the multiples of
    vec.groups x processes, which it must divide by; for the other keys the powers of two."""
    for value in _candidates(config, sizes, shape, key, fits):
        checked = _checked(config, sizes, key, value)
        if checked is not None and fits(estimate(*checked, shape)):
            return value
    return None


def _candidates(config: Config, sizes: Sizes, shape: EnvShape, key: str, fits):
    """The values suggest() tries for ``key``, largest first, all below its current value."""
    current = _get(config, key)
    if key != "vec.num_envs":
        value = 2 ** ((current - 1).bit_length() - 1) if current > 1 else 0
        while value >= 1:
            yield value
            value //= 2
        return
    step = config.vec.groups * sizes.processes
    low, high = 0, (current - 1) // step  # the largest k whose k x step envs fit, by _with's sizes: a bound
    while low < high:
        middle = (low + high + 1) // 2
        if fits(estimate(*_with(config, sizes, key, middle * step), shape)):
            low = middle
        else:
            high = middle - 1
    for k in range(low, max(0, low - NUM_ENVS_TRIES), -1):
        yield k * step


def _checked(config: Config, sizes: Sizes, key: str, value: int) -> tuple[Config, Sizes] | None:
    """``config`` with ``key`` set to ``value`` and its sizes as derive_sizes makes them over ``sizes``'
    processes, or None when it refuses them (a num_envs the minibatch does not divide, ...)."""
    from jaxlab.config.validate import derive_sizes

    section, name = key.split(".")
    config = dataclasses.replace(config, **{section: dataclasses.replace(getattr(config, section), **{name: value})})
    try:
        return config, derive_sizes(config, sizes.agents_per_env, processes=sizes.processes)
    except ConfigError:
        return None


def reduce_hint(config: Config, sizes: Sizes, shape: EnvShape, term: str, fits) -> str:
    """'reduce vec.num_envs (now 100,000,000), train.bptt_horizon or train.batch_size, e.g.
    --vec.num-envs 1048560': the keys that shrink ``term``, with a value of the first that fits (suggest)."""
    keys = TERM_KEYS[term]
    if config.policy.module:  # the keys a user's module ignores (jaxlab.agent.custom) shrink nothing
        from jaxlab.agent.custom import ignored_keys, load_module_class

        ignored = ignored_keys(load_module_class(config.policy.module))
        keys = tuple(k for k in keys if k not in ignored)
        if not keys:
            return f"make the network of policy.module={config.policy.module!r} smaller"
    first = f"{keys[0]} (now {_get(config, keys[0]):,})"
    names = first if len(keys) == 1 else f"{', '.join([first, *keys[1:-1]])} or {keys[-1]}"
    value = suggest(config, sizes, shape, keys[0], fits)
    return f"reduce {names}" + (f", e.g. {flag_of(keys[0])} {value}" if value is not None else "")


def check_fits(config: Config, sizes: Sizes, shape: EnvShape, limit: MemoryLimit,
               on_host: int = 1) -> MemoryEstimate:
    """The estimate of ``config``; ConfigError in one line (the estimate, the limit, what to reduce and a
    value that fits) when it cannot fit in ``limit``. ``on_host``: the run's processes on this host,
    which share its memory (jaxlab.run.distributed.processes_on_this_host): their host need together
    is checked."""
    est = estimate(config, sizes, shape)
    short = shortfall(est, limit, on_host)
    if short is None:
        return est
    where, need, have = short
    place = f"GPU memory on {limit.device_name}" if where == "device" else "host memory"
    on_cpu = limit.device is None
    term = biggest_term(est, where, on_cpu)
    hint = reduce_hint(config, sizes, shape, term, lambda e: shortfall(e, limit, on_host) is None)
    verb = "is available" if where == "host" else "is its limit"
    per = est.per_process()
    if where == "host" and on_host > 1:
        per = f" for the {on_host} processes of this run on this host ({format_bytes(need // on_host)} each)"
    raise ConfigError(f"this config needs about {format_bytes(need)} of {place}{per} but "
                      f"{format_bytes(have)} {verb} ({est.describe()}); "
                      f"most of it is {term} ({format_bytes(est.term_bytes(term))}): {hint}")


# ---- `jaxlab eval`: playing a policy on --num-envs envs ----------------------------------------------

def play_estimate(config: Config, shape: EnvShape, num_envs: int) -> MemoryEstimate:
    """The memory `jaxlab eval` needs to play ``config``'s policy on ``num_envs`` envs of ``shape``
    (jaxlab.train.evaluation.play: one step at a time), A = num_envs x agents per env: device {params
    4 P, play step: per agent the observations in the env's dtype and normalised (O x 4), the carry in
    and out (2 C x 4), the activations of one forward pass (K x 4, a bound: nothing is kept for a
    backward pass) and the step's one-step segment twice} and the loaded trainer's (loaded_trainer_terms);
    host {env (as estimate's), play: a copy of the observations and the running return, length and count
    (3 x 8)} and the trainer's envs."""
    network = network_size(config.policy, shape)
    agents = num_envs * shape.agents_per_env
    per_agent = (shape.obs_size * (shape.obs_itemsize + FLOAT) + 2 * network.carry * FLOAT + network.kept * FLOAT
                 + 2 * _segment_sample_bytes(shape))
    trainer_device, trainer_host = loaded_trainer_terms(config, shape)
    return MemoryEstimate(device={"params": network.params * FLOAT, "play step": agents * per_agent,
                                  **trainer_device},
                          host={"env": _env_bytes(shape, agents),
                                "play": agents * (shape.obs_size * shape.obs_itemsize + 3 * 8), **trainer_host})


def loaded_trainer_terms(config: Config, shape: EnvShape) -> tuple[dict, dict]:
    """(device, host) bytes of what the Trainer that `jaxlab eval` loads allocates besides its params, built
    with the saved run's vec.num_envs whatever --num-envs plays: device {trainer optimizer 8 P, trainer
    segment: its rollout's segment buffers B x per-sample bytes (sharded as estimate's) and the carries of
    its A agents, A x C x 4}; host {trainer envs: the envs of its A agents (as estimate's env)}."""
    sizes = derive_sizes(config, shape.agents_per_env)
    network = network_size(config.policy, shape)
    shares = max(1, sizes.devices) * sizes.processes
    segment = -(-sizes.batch_size * _segment_sample_bytes(shape) // shares)
    return ({"trainer optimizer": 2 * network.params * FLOAT,
             "trainer segment": segment + sizes.num_agents * network.carry * FLOAT},
            {"trainer envs": _env_bytes(shape, sizes.num_agents)})


def check_play_fits(config: Config, shape: EnvShape, num_envs: int, limit: MemoryLimit) -> MemoryEstimate:
    """The estimate of playing ``config``'s policy on ``num_envs`` envs (play_estimate); ConfigError in one
    line, as check_fits says it (the estimate, the limit, the biggest term, the largest --num-envs that
    fits), when it cannot fit in ``limit``."""
    est = play_estimate(config, shape, num_envs)
    short = shortfall(est, limit)
    if short is None:
        return est
    where, need, have = short
    place = f"GPU memory on {limit.device_name}" if where == "device" else "host memory"
    term = biggest_term(est, where, limit.device is None)
    low, high = 0, num_envs - 1  # the most envs that fit: the estimate grows with them
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if shortfall(play_estimate(config, shape, middle), limit) is None else \
            (low, middle - 1)
    fix = f"play on fewer envs, e.g. --num-envs {low}" if low else \
        f"no number of envs fits (the trainer eval loads holds the run's vec.num_envs {config.vec.num_envs} envs)"
    verb = "is available" if where == "host" else "is its limit"
    raise ConfigError(f"--num-envs {num_envs} needs about {format_bytes(need)} of {place} but {format_bytes(have)} "
                      f"{verb} ({est.describe()}); most of it is {term} ({format_bytes(est.term_bytes(term))}): {fix}")


# ---- after the fact: an out-of-memory error ---------------------------------------------------------


def is_out_of_memory(err: BaseException) -> bool:
    """A JAX/XLA out-of-memory error (RESOURCE_EXHAUSTED or "out of memory" in its message, as
    XlaRuntimeError says it) or a MemoryError."""
    text = str(err)
    return isinstance(err, MemoryError) or "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def out_of_memory_message(err: BaseException, config: Config) -> str | None:
    """One line for an out-of-memory ``err`` raised while running ``config``: the error's first line,
    the estimate, the limit and what to reduce (a value that halves the estimate's biggest term's side);
    None when ``err`` is not about memory. Never raises."""
    if not is_out_of_memory(err):
        return None
    first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
    try:
        from jaxlab.config.validate import derive_sizes

        shape = env_shape(config)
        sizes = derive_sizes(config, shape.agents_per_env)
        est = estimate(config, sizes, shape)
        limit = current_limit()
        term = biggest_term(est, "device", limit.device is None)
        target = est.device_total / 2
        hint = reduce_hint(config, sizes, shape, term, lambda e: e.device_total <= target)
        detail = (f"the config needs {est.describe()}; {limit.describe()}; most of it is {term} "
                  f"({format_bytes(est.term_bytes(term))}): {hint}")
    except Exception:  # noqa: BLE001 - the message must come out whatever else is wrong
        detail = "reduce policy.hidden_size, vec.num_envs or train.minibatch_size"
    fraction = config.device.memory_fraction
    applied = any(os.environ.get(var) == str(fraction) for var in MEMORY_FRACTION_VARS)  # presets.prepare_backend
    more = f", or raise device.memory_fraction (now {fraction:g})" if applied and 0 < fraction < 1 else ""
    return f"out of memory ({first}); {detail}{more}"

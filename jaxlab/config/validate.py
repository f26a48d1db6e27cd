"""Checks of a config's invariants and the sizes derived from it, before anything is built."""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, fields, replace

from jaxlab.config.schema import (ACTIVATIONS, ADVANTAGES, DASHBOARDS, ENCODERS, MASK_CHECKS, MATMUL_PRECISIONS,
                                  PRECISIONS, SCHEDULES, SECTIONS, Config, ConfigError, PolicyModuleError)
from jaxlab.config.threads import resolve_threads
from jaxlab.env.library import constant
from jaxlab.messages import counted


@dataclass(frozen=True)
class Sizes:
    """Sizes derived from a config and the env's agents_per_env; never typed twice."""

    num_envs: int          # C env instances
    agents_per_env: int
    num_agents: int        # A = num_envs * agents_per_env
    horizon: int           # T
    segments: int          # S: segments of T steps of every agent collected per update
    batch_size: int        # S * A * T samples per update
    minibatch_size: int    # samples per gradient step
    num_minibatches: int   # batch_size / minibatch_size
    minibatch_agents: int  # sequences per minibatch = minibatch_size / T
    num_updates: int       # total_timesteps // batch_size
    total_timesteps: int
    num_threads: int = 1   # C threads per group (vec.num_threads, "auto" resolved)
    threads_reason: str = "set"  # why that many: "set", or what auto saw
    devices: int = 1       # local devices the agents are sharded over (device.count)
    processes: int = 1     # the run's processes, each stepping num_envs / processes of the envs

    def describe(self) -> str:
        """'64 envs x 1 agents x horizon 16 = batch 1,024; 1 minibatch of 1,024; 976 updates for 1M steps';
        over several processes the run's sizes are said to be all processes' ('in all over 2 processes: ...')
        and each process's share follows ('; per process: 32 envs, batch 512, minibatches of 512')."""
        segments = f" x {self.segments} segments" if self.segments > 1 else ""
        in_all = f"in all over {self.processes} processes: " if self.processes > 1 else ""
        return (f"{in_all}{counted(self.num_envs, 'env')} x {counted(self.agents_per_env, 'agent')} x horizon "
                f"{self.horizon}{segments} = "
                f"batch {self.batch_size:,}; {self.num_minibatches} minibatch{'es' * (self.num_minibatches > 1)} "
                f"of {self.minibatch_size:,}; "
                f"{counted(self.num_updates, 'update')} for {_steps(self.total_timesteps)} steps"
                + (f" ({self.num_updates * self.batch_size:,} trained: whole batches)"
                   if self.num_updates * self.batch_size != self.total_timesteps else "")
                + self.per_process()
                + (f"; {'its ' * (self.processes > 1)}agents sharded over {self.devices} devices"
                   if self.devices > 1 else ""))

    def per_process(self) -> str:
        """'; per process: 32 envs, batch 512, minibatches of 512' in a run over several processes, else ''."""
        if self.processes == 1:
            return ""
        P = self.processes
        return (f"; per process: {self.num_envs // P:,} envs, batch {self.batch_size // P:,}, "
                f"minibatches of {self.minibatch_size // P:,}")


def _steps(n: int) -> str:
    """1,000,000 -> 1M, 250,000 -> 250K, 2,048 -> 2,048."""
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size and n % (size // 10 if size > 1000 else size) == 0:
            value = n / size
            return f"{value:g}{unit}"
    return f"{n:,}"


def check_wandb_project(project: str) -> None:
    """ConfigError for a wandb project name wandb refuses (at most 128 characters, none of / \\ # ? % :):
    wandb.init would fail and the run would go on without wandb."""
    bad = [c for c in "/\\#?%:" if c in project]
    if not bad and len(project) <= 128:
        return
    entity, _, name = project.partition("/")
    if bad == ["/"] and entity and name and "/" not in name and len(project) <= 128:  # entity/project
        fix = f"--log.wandb-entity {entity} --log.wandb-project {name}"
    else:
        fix = f"--log.wandb-project {''.join('-' if c in bad else c for c in project)[:128]}"
    why = f"holds {' '.join(bad)}, which wandb refuses in a project name" if bad else \
        f"has {len(project)} characters, wandb takes at most 128"
    cut = "..." if len(project) > 40 else ""
    raise ConfigError(f"log.wandb_project={shown_value(project[:40])}{cut} {why}; e.g. {fix}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        lower = {c.lower(): c for c in choices}
        close = [lower[value.lower()]] if value.lower() in lower else difflib.get_close_matches(value, choices, n=1)
        hint = f"did you mean {shown_value(close[0])}? " if close else ""
        raise ConfigError(f"{name}={shown_value(value)} is not known; {hint}use one of {', '.join(choices)}")


def check_finite(config: Config) -> None:
    """Every float key of every section must be a finite number: NaN and infinity mean nothing to the
    trainer (no key gives them a meaning). ConfigError naming the key, its value and its default."""
    for section, cls in SECTIONS.items():
        for spec in fields(cls):
            value = getattr(getattr(config, section), spec.name)
            if isinstance(value, float) and not math.isfinite(value):
                flag = f"--{section}.{spec.name.replace('_', '-')}"
                raise ConfigError(f"{section}.{spec.name}={value} is not a finite number; "
                                  f"give a number, e.g. {flag} {spec.default!r} (the default)")


def check_advantage(config: Config) -> None:
    """train.advantage and its V-trace clips, and the prioritised sampling's beta."""
    t = config.train
    check_choice("train.advantage", t.advantage, ADVANTAGES)
    for name in ("vtrace_rho_clip", "vtrace_c_clip"):
        if not getattr(t, name) > 0:
            raise ConfigError(f"train.{name}={getattr(t, name)} must be positive, e.g. 1.0 (PufferLib's default)")
    if not 0 <= t.prio_beta0 <= 1:
        raise ConfigError(f"train.prio_beta0={t.prio_beta0} must be in [0, 1] (the importance-weight exponent at "
                          "the start, annealed to 1), e.g. 0.2")


def check_policy(config: Config) -> None:
    """The [policy] keys that need no env: names among the known ones, equal-length cnn lists, init scales."""
    p = config.policy
    check_choice("policy.encoder", p.encoder, ENCODERS)
    check_choice("policy.activation", p.activation, ACTIVATIONS)
    lengths = {name: len(getattr(p, name)) for name in ("cnn_channels", "cnn_kernels", "cnn_strides")}
    if p.encoder == "cnn" and (len(set(lengths.values())) != 1 or not lengths["cnn_channels"]):
        detail = ", ".join(f"{name} has {n}" for name, n in lengths.items())
        raise ConfigError(f"policy.cnn_channels, cnn_kernels and cnn_strides need one entry per convolution, at "
                          f"least one ({detail}); e.g. --policy.cnn-channels 32,64 --policy.cnn-kernels 3,3 "
                          "--policy.cnn-strides 1,1")
    for name in ("actor_init_scale", "critic_init_scale"):
        if getattr(p, name) < 0:
            raise ConfigError(f"policy.{name}={getattr(p, name)} must be >= 0 (an orthogonal-init gain)")
    if p.module and ":" not in p.module:
        raise ConfigError(f"policy.module={p.module!r} must name a class: \"package.module:Class\" or "
                          "\"path/to/file.py:Class\"")


def conv_sizes(height: int, width: int, kernels, strides) -> list[tuple[int, int]]:
    """The (height, width) after each VALID convolution: (size - kernel) // stride + 1; ValueError naming
    the layer where a kernel is larger than its input."""
    sizes = []
    for i, (k, s) in enumerate(zip(kernels, strides)):
        if k > height or k > width:
            raise ValueError(f"convolution {i} (kernel {k}, stride {s}) gets a {height}x{width} input, smaller "
                             "than its kernel")
        height, width = (height - k) // s + 1, (width - k) // s + 1
        sizes.append((height, width))
    return sizes


def image_shape(obs_shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    """(H, W, C) of an image observation: [H, W, C] as is, [H, W] with C = 1; None for other ranks."""
    if len(obs_shape) == 3:
        return tuple(obs_shape)
    if len(obs_shape) == 2:
        return (*obs_shape, 1)
    return None


def check_network(config: Config, obs_shape: tuple[int, ...]) -> None:
    """The network against the env's observation shape: a cnn encoder needs [H, W, C] or [H, W] images its
    convolutions fit in; a policy.module must import (PolicyModuleError). ConfigError naming the values and a fix."""
    p = config.policy
    if p.module:
        from jaxlab.agent.custom import load_module_class

        try:
            load_module_class(p.module)
        except ValueError as err:
            raise PolicyModuleError(str(err)) from None
        return
    if p.encoder != "cnn":
        return
    image = image_shape(obs_shape)
    if image is None:
        raise ConfigError(f"policy.encoder='cnn' needs image observations [H, W, C] or [H, W], but "
                          f"{config.env_name}'s are {list(obs_shape)}; use --policy.encoder mlp")
    try:
        conv_sizes(image[0], image[1], p.cnn_kernels, p.cnn_strides)
    except ValueError as err:
        raise ConfigError(f"policy.cnn_kernels={list(p.cnn_kernels)} with cnn_strides={list(p.cnn_strides)} do not "
                          f"fit {config.env_name}'s {image[0]}x{image[1]} images: {err}; use smaller kernels and "
                          f"strides, e.g. --policy.cnn-kernels 3,3 --policy.cnn-strides 1,1 --policy.cnn-channels "
                          "32,64") from None


def unused_keys(config: Config, platform: str | None = None) -> dict[str, tuple[str, str]]:
    """The keys ``config`` does not use, each with the key (or thing) and value that make it so: [train]'s
    min_lr_ratio without an LR schedule, the V-trace clips with GAE advantages, prio_beta0 without prioritised
    sampling, target_kl with one epoch an update (it is checked after each); the built-in network's hidden_size and
    scan_unroll without its LSTM, its cnn_* keys with the mlp encoder (policy.module's own case:
    cli.common.ignored_flags_warning); vec.num_threads with a Python env, whose envs step one after the other in
    the calling thread; the wandb_* keys without log.wandb; device.memory_fraction when JAX's devices are of
    ``platform`` cpu (it caps XLA's share of GPU memory)."""
    from jaxlab.env import is_python_env

    t, p = config.train, config.policy
    no_lstm = ("policy.lstm", "false") if not p.lstm and not p.module else None
    mlp = ("policy.encoder", "mlp") if p.encoder == "mlp" and not p.module else None
    python_env = (("env", f"{config.env_name}, a Python env (its envs step one after the other in one thread)")
                  if is_python_env(config.env_name) else None)
    unused = {"train.min_lr_ratio": ("train.anneal_lr", "none") if t.anneal_lr == "none" else None,
              "train.vtrace_rho_clip": ("train.advantage", "gae") if t.advantage == "gae" else None,
              "train.vtrace_c_clip": ("train.advantage", "gae") if t.advantage == "gae" else None,
              "train.prio_beta0": ("train.prio_alpha", "0") if t.prio_alpha == 0 else None,
              "train.target_kl": ("train.update_epochs", "1 (it is checked after each epoch: none is left to stop)")
              if t.update_epochs == 1 else None,
              "policy.hidden_size": no_lstm, "policy.scan_unroll": no_lstm,
              "policy.cnn_channels": mlp, "policy.cnn_kernels": mlp, "policy.cnn_strides": mlp,
              "vec.num_threads": python_env,
              "device.memory_fraction": ("JAX's devices", "cpu (it caps GPU memory)") if platform == "cpu" else None}
    no_wandb = None if config.log.wandb else ("log.wandb", "false")
    unused.update({f"log.wandb_{key}": no_wandb for key in ("project", "entity", "group", "tags", "init_timeout")})
    return {key: why for key, why in unused.items() if why is not None}


def nearest_minibatch(wanted: int, batch: int, horizon: int) -> int:
    """The minibatch size nearest ``wanted`` (the smaller on a tie) that the checks take: a multiple of
    ``horizon`` that divides ``batch`` (itself a multiple of ``horizon``)."""
    sequences = batch // horizon
    divisors = {d for i in range(1, math.isqrt(sequences) + 1) if sequences % i == 0 for d in (i, sequences // i)}
    return min((horizon * d for d in divisors), key=lambda size: (abs(size - wanted), size))


def fewer_envs_example(vec, train, agents_per_env: int) -> str:
    """" (e.g. --vec.num-envs N[ --train.minibatch-size M]: a batch of B)": vec.num_envs halved until one
    segment (envs x agents_per_env x horizon) fits train.total_timesteps, with the minibatch size nearest
    train.minibatch_size when it no longer divides that batch; "" when no halving (a count of groups
    dividing it) fits."""
    envs = vec.num_envs
    while envs * agents_per_env * train.bptt_horizon > train.total_timesteps:
        if envs % 2 or (envs // 2) % vec.groups:
            return ""
        envs //= 2
    batch = envs * agents_per_env * train.bptt_horizon
    minibatch = ("" if batch % train.minibatch_size == 0 else
                 f" --train.minibatch-size {nearest_minibatch(train.minibatch_size, batch, train.bptt_horizon)}")
    return f" (e.g. --vec.num-envs {envs}{minibatch}: a batch of {batch:,})"


def derive_sizes(config: Config, agents_per_env: int, updates: int | None = None,
                 processes: int | None = None) -> Sizes:
    """Checks every invariant; ConfigError naming the values, the rule and a fix on the first broken.
    ``updates``: the run's length in updates instead of train.total_timesteps, which is then not checked
    (`jaxlab bench`: the first update and its --updates timed ones; a length past the optimizer's int32
    step count is refused naming --updates). ``processes``: the run's process count, for the checks of
    each process's share (check_devices; default jax.process_count(), `jaxlab config` gives
    --dist.num-processes' without joining them)."""
    check_finite(config)
    if processes is None:
        import jax

        processes = jax.process_count()
    t, v = config.train, config.vec
    if v.num_threads != "auto" and not isinstance(v.num_threads, int):
        raise ConfigError(f"vec.num_threads={shown_value(v.num_threads)} is neither auto nor an integer; "
                          "write auto or e.g. 2")
    positive = [("vec.num_envs", v.num_envs), ("vec.num_threads", 1 if v.num_threads == "auto" else v.num_threads),
                ("policy.hidden_size", config.policy.hidden_size), ("train.bptt_horizon", t.bptt_horizon),
                ("train.minibatch_size", t.minibatch_size), ("train.update_epochs", t.update_epochs),
                ("train.total_timesteps", t.total_timesteps), ("checkpoint.keep", config.checkpoint.keep),
                ("vec.groups", v.groups), ("policy.scan_unroll", config.policy.scan_unroll)]
    for name, value in positive:
        if value < 1 and not (name == "train.total_timesteps" and updates is not None):  # bench: not its length
            raise ConfigError(f"{name}={value} must be at least 1; e.g. {default_flag(name)}")
    if not 0 <= t.seed < 2**63:  # the envs take seeds in [0, 2**64); the JAX keys are made from an int64
        raise ConfigError(f"train.seed={t.seed} must be an integer in [0, 2**63), e.g. --train.seed 0")
    if not t.learning_rate > 0:
        raise ConfigError(f"train.learning_rate={t.learning_rate} must be positive, e.g. 3e-4")
    if not 0 < t.gamma <= 1:
        raise ConfigError(f"train.gamma={t.gamma} must be in (0, 1], e.g. {default_flag('train.gamma')}")
    if not 0 <= t.gae_lambda <= 1:  # 0: one-step TD advantages
        raise ConfigError(f"train.gae_lambda={t.gae_lambda} must be in [0, 1], e.g. {default_flag('train.gae_lambda')}")
    if t.reward_scale != "auto" and not t.reward_scale > 0:
        raise ConfigError(f"train.reward_scale={t.reward_scale} must be positive, e.g. 1.0, or auto (scaled by the "
                          "running std of the discounted return)")
    for name in ("clip_coef", "vf_clip_coef", "vf_coef", "ent_coef", "max_grad_norm", "min_lr_ratio", "prio_alpha"):
        if getattr(t, name) < 0:
            raise ConfigError(f"train.{name}={getattr(t, name)} must be >= 0; e.g. {default_flag(f'train.{name}')}")
    if t.target_kl < 0:
        raise ConfigError(f"train.target_kl={t.target_kl} must be >= 0 (0: no KL early stop); e.g. "
                          "--train.target-kl 0.015, or 0 to run every epoch")
    if t.clip_coef == 0:
        raise ConfigError("train.clip_coef=0 would clip every policy change to nothing (the policy would never "
                          f"learn); give a positive value, e.g. {default_flag('train.clip_coef')}, or a large one "
                          "such as 1e9 for no clipping")
    check_advantage(config)
    check_policy(config)
    if t.min_lr_ratio > 1:
        raise ConfigError(f"train.min_lr_ratio={t.min_lr_ratio} must be in [0, 1] (the LR at the end of the "
                          f"schedule over the LR), e.g. {default_flag('train.min_lr_ratio')}")
    if t.anneal_lr not in SCHEDULES:
        raise ConfigError(f"train.anneal_lr={shown_value(t.anneal_lr)} is not a schedule; use one of "
                          f"{', '.join(SCHEDULES)} (or true for linear, false for none)")
    long_tags = [tag.strip() for tag in config.log.wandb_tags.split(",") if len(tag.strip()) > 64
                 and config.log.wandb]
    if long_tags:  # wandb refuses such a run (a pydantic error) and the run would go on without wandb
        raise ConfigError(f"log.wandb_tags: the tag {long_tags[0][:20]!r}... has {len(long_tags[0])} characters; "
                          "wandb takes at most 64 per tag (tags are comma-separated)")
    if config.log.wandb:
        check_wandb_project(config.log.wandb_project)
    check_choice("device.precision", config.device.precision, PRECISIONS)
    check_choice("device.matmul_precision", config.device.matmul_precision, MATMUL_PRECISIONS)
    check_choice("log.dashboard", config.log.dashboard, DASHBOARDS)
    check_choice("env.mask_check", config.env_mask_check, MASK_CHECKS)
    if not 0 <= config.device.memory_fraction <= 1:
        raise ConfigError(f"device.memory_fraction={config.device.memory_fraction} must be in [0, 1] "
                          "(0 leaves XLA's default), e.g. 0.3 to fit three runs on one GPU")
    if not config.device.compile_cache.strip():
        raise ConfigError("device.compile_cache='' is empty; write auto, off or a folder, e.g. "
                          "--device.compile-cache ~/.cache/jaxlab/xla")
    for name in ("interval",):
        if getattr(config.checkpoint, name) < 0:
            raise ConfigError(f"checkpoint.{name}={getattr(config.checkpoint, name)} must be >= 0 (0: off)")
    if config.checkpoint.minutes < 0:
        raise ConfigError(f"checkpoint.minutes={config.checkpoint.minutes} must be >= 0 (0: off)")
    if not config.log.interval > 0:
        raise ConfigError(f"log.interval={config.log.interval} must be positive (seconds), e.g. 1")
    if not config.log.wandb_init_timeout > 0:
        raise ConfigError(f"log.wandb_init_timeout={config.log.wandb_init_timeout} must be positive (seconds), "
                          f"e.g. {default_flag('log.wandb_init_timeout')}")
    if v.groups < 1 or v.num_envs % v.groups:
        fix = max(g for g in range(1, min(v.groups, v.num_envs) + 1) if v.num_envs % g == 0) if v.groups >= 1 else 1
        raise ConfigError(f"vec.groups={v.groups} must divide vec.num_envs={v.num_envs:,} (each group steps an equal "
                          f"slice of the envs); e.g. --vec.groups {fix}")
    agents = v.num_envs * agents_per_env
    segment = agents * t.bptt_horizon
    shape = f"{counted(v.num_envs, 'env')} x {counted(agents_per_env, 'agent')} x horizon {t.bptt_horizon}"
    if t.batch_size == "auto":
        batch = segment
    else:
        batch = t.batch_size
        if batch < 1 or batch % segment != 0:
            fix = max(1, round(batch / segment)) * segment if batch >= 1 else segment
            raise ConfigError(f"train.batch_size={batch:,} must be a positive multiple of {segment:,} "
                              f"({shape}); use auto or e.g. --train.batch-size {fix}")
    if t.minibatch_size % t.bptt_horizon != 0:
        raise ConfigError(f"train.minibatch_size={t.minibatch_size} must be a multiple of train.bptt_horizon="
                          f"{t.bptt_horizon} (minibatches are whole sequences) and divide the batch of {batch:,}; "
                          f"e.g. --train.minibatch-size {nearest_minibatch(t.minibatch_size, batch, t.bptt_horizon)}")
    if batch % t.minibatch_size != 0:
        raise ConfigError(f"train.minibatch_size={t.minibatch_size} must divide the batch of {batch:,} "
                          f"({shape}); e.g. --train.minibatch-size "
                          f"{nearest_minibatch(t.minibatch_size, batch, t.bptt_horizon)}")
    length_in_updates = updates is not None
    if length_in_updates:  # whatever total_timesteps says (a default below a big batch would be refused)
        t = replace(t, total_timesteps=batch * updates)
    if t.total_timesteps < batch:
        smaller = (f"use fewer envs{fewer_envs_example(v, t, agents_per_env)}" if batch == segment
                   else "use fewer envs and --train.batch-size auto"
                   if t.total_timesteps < segment else
                   f"lower train.batch_size, e.g. --train.batch-size auto (one segment: {segment:,})")
        raise ConfigError(f"train.total_timesteps={t.total_timesteps:,} is less than one batch of {batch:,} "
                          f"({shape}{f' x {batch // segment} segments' * (batch != segment)}); raise it to at "
                          f"least {batch} or {smaller}")
    updates, minibatches = t.total_timesteps // batch, batch // t.minibatch_size
    optimizer_steps = updates * t.update_epochs * minibatches
    if optimizer_steps >= 2**31 and length_in_updates:  # `jaxlab bench`: the first update and --updates timed ones
        fit = (2**31 - 1) // (t.update_epochs * minibatches)
        raise ConfigError(f"--updates {updates - 1} makes {updates:,} updates with the first, {optimizer_steps:,} "
                          f"optimizer steps ({t.update_epochs} epochs x {minibatches} minibatches each), past the "
                          f"2**31 - 1 their int32 counter holds; use at most --updates {fit - 1}")
    if optimizer_steps >= 2**31:  # the optimizer's step count and the schedules' are int32
        largest = ((2**31 - 1) // (t.update_epochs * minibatches) + 1) * batch - 1
        epochs = (2**31 - 1) // (updates * minibatches)
        fix = (f"--train.total-timesteps {largest}" if largest >= batch  # else not one update fits: the epochs
               else f"--train.update-epochs {epochs}" if epochs >= 1 else "a larger --train.minibatch-size")
        subject = f"train.total_timesteps={t.total_timesteps:,}" if largest >= batch else \
            f"train.update_epochs={t.update_epochs:,}"
        raise ConfigError(f"{subject} makes {optimizer_steps:,} optimizer steps "
                          f"({updates:,} updates x {t.update_epochs:,} epochs x {minibatches} minibatches), past the "
                          f"2**31 - 1 their int32 counter holds; use at most {fix}")
    devices = check_devices(config, agents_per_env, processes=processes)
    num_threads, threads_reason = check_threads(config, agents_per_env, processes)
    return Sizes(devices=devices, processes=processes, num_envs=v.num_envs, agents_per_env=agents_per_env,
                 num_agents=agents, horizon=t.bptt_horizon, segments=batch // segment, batch_size=batch,
                 minibatch_size=t.minibatch_size, num_minibatches=batch // t.minibatch_size,
                 minibatch_agents=t.minibatch_size // t.bptt_horizon, num_updates=t.total_timesteps // batch,
                 total_timesteps=t.total_timesteps, num_threads=num_threads,
                 threads_reason=threads_reason)


def check_threads(config: Config, agents_per_env: int, processes: int) -> tuple[int, str]:
    """(threads, why) of vec.num_threads ("auto" resolved) for the envs of one group of one process, the
    ones its threads step (vec.num_envs / (vec.groups x ``processes``), which check_devices has checked
    to divide); ConfigError when a given count exceeds them or MAX_CHUNKS."""
    v = config.vec
    max_chunks = constant("MAX_CHUNKS")
    per_group = v.num_envs // (v.groups * processes)
    num_chunks = min(per_group, max_chunks)
    num_threads, threads_reason = resolve_threads(v.num_threads, per_group, agents_per_env, v.groups, config.preset,
                                                  max_chunks)
    if num_threads > num_chunks:
        where = "vec.num_envs / vec.groups" if v.groups > 1 else "vec.num_envs"
        if processes > 1:
            where = f"vec.num_envs / ({'vec.groups x ' * (v.groups > 1)}{processes} processes)"
        raise ConfigError(f"vec.num_threads={v.num_threads} exceeds min({where}, {max_chunks})={num_chunks}; "
                          f"use at most {num_chunks} threads, e.g. --vec.num-threads {num_chunks} (or auto)")
    return num_threads, threads_reason


def forced_cpu_devices_hint(count: int, available: int, platform: str | None = None) -> str:
    """The end of device.count's error for a ``count`` above the ``available`` devices of a CPU backend
    (``platform``, default JAX's): how to get that many CPU devices (README, Several devices); "" otherwise."""
    if platform is None:
        import jax

        platform = jax.default_backend()
    if platform != "cpu" or count <= available:
        return ""
    return (f"; on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count={count} set before jaxlab starts gives "
            f"{count} CPU devices (they share the cores)")


def check_devices(config: Config, agents_per_env: int, available: int | None = None, processes: int | None = None,
                  platform: str | None = None) -> int:
    """The device count of device.count (auto: the most of the ``available`` local devices, default
    jax.local_device_count(), that each group's envs and each minibatch's sequences divide by).
    ConfigError when a given count is below 1, above the local devices, or does not divide them; on a CPU
    (``platform``, default JAX's backend) a count above the devices names XLA's flag that makes more."""
    if available is None:
        import jax

        available = jax.local_device_count()
    if processes is None:
        import jax

        processes = jax.process_count()
    v, t, setting = config.vec, config.train, config.device.count
    if v.num_envs % (v.groups * processes):
        raise ConfigError(f"vec.num_envs={v.num_envs:,} must divide by vec.groups={v.groups} x {processes} processes "
                          f"(each process steps vec.groups groups of equal envs); e.g. --vec.num-envs "
                          f"{v.groups * processes * max(1, v.num_envs // (v.groups * processes))}")
    per_group = v.num_envs // (v.groups * processes)
    minibatch_agents = t.minibatch_size // t.bptt_horizon

    def fits(n: int) -> bool:
        return per_group % n == 0 and minibatch_agents % (n * processes) == 0

    if setting == "auto":
        fitting = [n for n in range(1, available + 1) if fits(n)]
        if fitting:
            return max(fitting)
        setting = 1  # none fits: the checks below say why
    if setting < 1 or setting > available:
        raise ConfigError(f"device.count={setting} must be between 1 and the {available} local device"
                          f"{'s' * (available > 1)} JAX sees; e.g. --device.count {available} (or auto)"
                          f"{forced_cpu_devices_hint(setting, available, platform)}")
    if per_group % setting:
        where = f"vec.num_envs={v.num_envs:,} / vec.groups={v.groups}" if v.groups > 1 else \
            f"vec.num_envs={v.num_envs:,}"
        fix = num_envs_for_devices(config, agents_per_env, setting, processes)
        suggestion = f"--vec.num-envs {fix} or " if fix is not None else ""
        raise ConfigError(f"device.count={setting} must divide {where} (each device steps whole envs of every "
                          f"group); e.g. {suggestion}--device.count auto")
    devices = setting * processes
    if minibatch_agents % devices:
        what = f"device.count={setting}" + (f" x {processes} processes" if processes > 1 else "")
        raise ConfigError(f"{what} must divide the {minibatch_agents} sequences of a minibatch "
                          f"(train.minibatch_size={t.minibatch_size} / train.bptt_horizon={t.bptt_horizon}); "
                          f"e.g. --train.minibatch-size {devices * max(1, minibatch_agents // devices) * t.bptt_horizon}")
    return setting


#: how many values of vec.num_envs on each side of the current one num_envs_for_devices tries at most
DEVICE_NUM_ENVS_TRIES = 1000


def num_envs_for_devices(config: Config, agents_per_env: int, count: int, processes: int) -> int | None:
    """The vec.num_envs nearest the config's (below it first) that ``count`` devices in each of ``processes``
    divide and that every size check (derive_sizes) takes: the minibatch must still divide the batch, the
    batch fit in train.total_timesteps. None when none does (the minibatch's sequences do not divide by the
    devices, which no vec.num_envs changes)."""
    if (config.train.minibatch_size // config.train.bptt_horizon) % (count * processes):
        return None
    step = count * config.vec.groups * processes
    below = range(config.vec.num_envs // step, max(0, config.vec.num_envs // step - DEVICE_NUM_ENVS_TRIES), -1)
    above = range(config.vec.num_envs // step + 1, config.vec.num_envs // step + 1 + DEVICE_NUM_ENVS_TRIES)
    for k in (*below, *above):
        vec = replace(config.vec, num_envs=k * step)
        candidate = replace(config, vec=vec, device=replace(config.device, count=1))  # count: checked above
        try:
            derive_sizes(candidate, agents_per_env, processes=processes)
        except ConfigError:
            continue
        return k * step
    return None


def toml_value(value) -> str:
    """``value`` as a TOML file writes it: true, "auto", [128, 64], 0.0003, {low = 0.1}."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {toml_value(v)}" for key, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


def shown_value(value) -> str:
    """A value the user gave (a TOML value, a flag's text) or a config holds, for a message, as a config file
    writes it: true rather than True, "abc" rather than 'abc', none rather than None."""
    return "none" if value is None else toml_value(value)


def flag_value(value) -> str:
    """``value`` as a flag's value is typed: true, 128,64, auto (--policy.lstm true)."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(flag_value, value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def flag_of(key: str) -> str:
    """The command-line flag of config key ``key``: "vec.num_envs" -> "--vec.num-envs"."""
    return "--" + key.replace("_", "-")


def default_flag(key: str) -> str:
    """The flag that sets ``key`` ("section.name") to its schema default, for an error's fix:
    "--vec.num-envs 64 (the default)"."""
    section, name = key.split(".", 1)
    default = next(f.default for f in fields(SECTIONS[section]) if f.name == name)
    return f"{flag_of(key)} {flag_value(default)} (the default)"

"""The config schema: one frozen dataclass per section, each field's docstring its --help text, and
the names a few string fields may take. Pure data: no loading, no checks (see layers.py, validate.py).
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field


class ConfigError(ValueError):
    """A configuration the trainer must not start with; the message names the values and a fix."""


@dataclass(frozen=True)
class VecConfig:
    num_envs: int = 64
    """number of C env instances (agents = num_envs x agents_per_env)"""
    num_threads: int | str = "auto"
    """C threads stepping the envs of each group, or auto: the cores JAX does not need, at least 1,024
    agents per thread (results are identical for any count; `jaxlab config` shows the choice)"""
    groups: int = 1
    """G: agent groups, each with its own slice of envs and carries; the policy call of one group runs
    while the C threads step another (results are those of the groups stepped one after the other)"""


@dataclass(frozen=True)
class PolicyConfig:
    hidden_size: int = 128
    """width of the encoder and the LSTM"""
    lstm: bool = True
    """use an LSTM between encoder and heads (false: feed-forward)"""
    actor_init_scale: float = 0.01
    """orthogonal-init scale of the actor head (small: near-uniform initial policy)"""
    scan_unroll: int = 1
    """LSTM time steps per iteration of the training unroll's lax.scan (1: a loop; T: fully unrolled;
    results are the same, speed and compile time differ)"""


@dataclass(frozen=True)
class TrainConfig:
    total_timesteps: int = 1_000_000
    """agent-steps to train for (rounded down to whole updates)"""
    batch_size: int | str = "auto"
    """agent-steps per update: auto = agents x bptt_horizon, or a multiple of it (several segments)"""
    seed: int = 0
    """seed of the envs and of the JAX random keys"""
    bptt_horizon: int = 16
    """T: steps per rollout segment and length of every training sequence"""
    minibatch_size: int = 256
    """samples per gradient step: a multiple of bptt_horizon dividing the batch"""
    update_epochs: int = 2
    """passes over each segment"""
    learning_rate: float = 3e-3
    """Adam learning rate at the start"""
    anneal_lr: str = "linear"
    """learning-rate schedule: linear, cosine or none (true/yes/1 mean linear, false/no/0 none)"""
    min_lr_ratio: float = 0.0
    """floor of the annealed learning rate, as a fraction of learning_rate"""
    gamma: float = 0.99
    """discount factor"""
    reward_scale: float = 1.0
    """rewards are multiplied by this before GAE (keeps values near 1 for the shared trunk)"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    clip_coef: float = 0.2
    """PPO surrogate clip range"""
    vf_coef: float = 0.5
    """value-loss weight"""
    vf_clip_coef: float = 0.0
    """value clip range (0: no value clipping)"""
    ent_coef: float = 0.0
    """entropy-bonus weight"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip (0: no clipping)"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""


@dataclass(frozen=True)
class DeviceConfig:
    precision: str = "float32"
    """matmul input dtype of the network: float32 or bfloat16 (params and the LSTM state stay float32)"""
    matmul_precision: str = "default"
    """XLA matmul precision for float32 inputs: default (TF32 on recent GPUs), high or highest"""
    memory_fraction: float = 0.0
    """share of GPU memory XLA may take, so runs can share a GPU (0: XLA's own default, 0.75)"""
    compile_cache: str = "auto"
    """JAX's persistent compilation cache: auto (under ~/.cache/jaxlab/xla, or $JAXLAB_CACHE_DIR), a
    folder, or off; a second run of the same shapes loads its executables instead of compiling"""
    count: int | str = "auto"
    """local devices to train on, data parallel (agents sharded, parameters replicated): auto = all
    that divide the envs of each group evenly, or a number"""


@dataclass(frozen=True)
class DistConfig:
    coordinator: str = ""
    """HOST:PORT of process 0's coordinator for a run over several processes (hosts); empty: from
    JAXLAB_COORDINATOR, else none (under SLURM, JAX finds it)"""
    num_processes: int = 0
    """processes in the run, each stepping its own envs (0: SLURM_NTASKS when set, else 1)"""
    process_id: int = -1
    """this process's index, 0 to num_processes - 1 (-1: SLURM_PROCID when set, else 0)"""


@dataclass(frozen=True)
class CheckpointConfig:
    interval: int = 0
    """save every this many updates (0: only on time, at the end and on a stop signal)"""
    minutes: float = 10.0
    """also save when this many minutes of wall time passed since the last save (0: never on time)"""
    keep: int = 3
    """how many of the newest checkpoints to keep (the best one is kept besides)"""
    best_metric: str = "episode_return"
    """metric (higher is better) that picks the best checkpoint to keep; empty: none"""


@dataclass(frozen=True)
class LogConfig:
    dashboard: str = "auto"
    """terminal output: auto (rich dashboard on a terminal, plain lines otherwise), rich, plain, none"""
    interval: float = 1.0
    """seconds between plain progress lines"""
    wandb: bool = False
    """log to Weights & Biases (offline when no API key or network)"""
    wandb_project: str = "jaxlab"
    """wandb project"""
    wandb_entity: str = ""
    """wandb entity (empty: your default)"""
    wandb_group: str = ""
    """wandb group (empty: none)"""
    wandb_tags: str = ""
    """wandb tags, comma-separated"""
    run_name: str = ""
    """name of the run in wandb and `jaxlab runs` (empty: the run dir's name)"""


@dataclass(frozen=True)
class Config:
    env_name: str
    env: dict = field(default_factory=dict)  # the env's own (C) parameters
    env_library: str = ""
    """[env] library: where the env comes from: "" jaxlab's built-in envs, else an env header (.h, built
    on first use into a cache) or an env library (.so, from `jaxlab build-env`)"""
    env_mask_check: str = "strict"
    """[env] mask_check: strict (refuse an action outside its mask, or a mask with none) or off"""
    vec: VecConfig = VecConfig()
    policy: PolicyConfig = PolicyConfig()
    train: TrainConfig = TrainConfig()
    device: DeviceConfig = DeviceConfig()
    dist: DistConfig = DistConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    log: LogConfig = LogConfig()
    preset: str = "none"


SECTIONS = {"vec": VecConfig, "policy": PolicyConfig, "train": TrainConfig, "device": DeviceConfig, "dist": DistConfig,
            "checkpoint": CheckpointConfig, "log": LogConfig}
SCHEDULES = ("linear", "cosine", "none")
MASK_CHECKS = ("strict", "off")
#: [env] keys that are not the env's own parameters: key -> Config field.
ENV_KEYS = {"library": "env_library", "mask_check": "env_mask_check"}
#: train.anneal_lr also takes a boolean, as PufferLib writes it (--train.anneal-lr False).
SCHEDULE_ALIASES = {"true": "linear", "yes": "linear", "1": "linear", "false": "none", "no": "none", "0": "none"}
PRECISIONS = ("float32", "bfloat16")
MATMUL_PRECISIONS = ("default", "high", "highest")
DASHBOARDS = ("auto", "rich", "plain", "none")



def field_help(cls) -> dict[str, str]:
    """Field name -> its docstring (the string literal after it in the class body)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    helps = {}
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr) \
                and isinstance(following.value, ast.Constant):
            helps[node.target.id] = following.value.value
    return helps

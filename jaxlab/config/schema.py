"""The config schema: one frozen dataclass per section, each field's docstring its --help text, and
the names a few string fields may take. Pure data: no loading, no checks (see layers.py, validate.py).
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field


class ConfigError(ValueError):
    """A configuration the trainer must not start with; the message names the values and a fix."""


class PolicyModuleError(ConfigError):
    """The policy.module the config names cannot be imported, made or initialised, or breaks the contract
    (jaxlab.agent.custom): an error of the module's code rather than of the config's values."""


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
    encoder: str = "mlp"
    """the observation encoder: mlp (flattened observations through mlp_layers) or cnn (HWC images through
    the cnn_* convolutions, then mlp_layers)"""
    mlp_layers: tuple[int, ...] = (128,)
    """widths of the encoder's dense layers, any depth (e.g. [512, 512]; [] feeds the flattened input on)"""
    activation: str = "gelu"
    """activation after every encoder layer: gelu, relu, silu, tanh or elu"""
    cnn_channels: tuple[int, ...] = (32, 64, 64)
    """cnn encoder: output channels of each convolution (default Nature-DQN's 32, 64, 64)"""
    cnn_kernels: tuple[int, ...] = (8, 4, 3)
    """cnn encoder: square kernel size of each convolution (Nature-DQN: 8, 4, 3)"""
    cnn_strides: tuple[int, ...] = (4, 2, 1)
    """cnn encoder: stride of each convolution (Nature-DQN: 4, 2, 1); VALID padding"""
    hidden_size: int = 128
    """width of the LSTM and its carry"""
    lstm: bool = True
    """use an LSTM between encoder and heads (false: feed-forward)"""
    shared_trunk: bool = True
    """one encoder (and LSTM) for actor and critic; false: separate actor and critic trunks"""
    actor_init_scale: float = 0.01
    """orthogonal-init scale of the actor head (small: near-uniform initial policy)"""
    critic_init_scale: float = 1.0
    """orthogonal-init scale of the critic head"""
    module: str = ""
    """your own Flax module instead of the built-in network: "package.module:Class" or
    "path/to/file.py:Class" (a relative path: from the current directory, or in a --config file from its folder;
    contract: jaxlab/agent/custom.py); empty: the built-in network"""
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
    """T: steps per rollout segment and length of every training sequence (CleanRL's num_steps)"""
    minibatch_size: int = 256
    """samples per gradient step: a multiple of bptt_horizon dividing the batch (CleanRL's batch /
    num_minibatches)"""
    update_epochs: int = 2
    """passes over each segment"""
    target_kl: float = 0.0
    """KL early stop (CleanRL's target_kl): an update runs no more epochs after one whose approx_kl exceeds
    it (metrics.jsonl's epochs_run says how many ran); 0: off, every update runs all update_epochs"""
    learning_rate: float = 3e-3
    """Adam learning rate at the start"""
    anneal_lr: str = "linear"
    """learning-rate schedule: linear, cosine or none (true/yes/1/on mean linear, false/no/0/off none)"""
    min_lr_ratio: float = 0.0
    """floor of the annealed learning rate, as a fraction of learning_rate"""
    gamma: float = 0.99
    """discount factor"""
    reward_scale: float | str = "auto"
    """auto: rewards divided by the running std of the discounted return (SB3's VecNormalize), clipped to
    +-10; a number: rewards multiplied by it before GAE instead (the explicit override)"""
    obs_norm: bool | str = "auto"
    """running per-feature mean/var normalisation of observations (clipped to +-10), updated from
    rollouts, frozen in eval; auto: on for float observations and uint8 of one dimension (codes), off for uint8
    of two or more ([H, W] or [H, W, C] pixels, divided by 255)"""
    gae_lambda: float = 0.95
    """GAE lambda"""
    clip_coef: float = 0.2
    """PPO surrogate clip range"""
    vf_coef: float = 0.5
    """value-loss weight"""
    vf_clip_coef: float = 0.0
    """value clip range (0: no value clipping; CleanRL's clip_vloss is this at its clip_coef, 0.2)"""
    ent_coef: float = 0.0
    """entropy-bonus weight"""
    max_grad_norm: float = 0.5
    """global gradient-norm clip (0: no clipping)"""
    norm_adv: bool = True
    """normalise advantages per minibatch"""
    advantage: str = "gae"
    """advantage estimator: gae, or vtrace (PufferLib 3: GAE with the importance ratio between the rollout
    policy and the current one clipped by vtrace_rho_clip and vtrace_c_clip, recomputed every minibatch)"""
    vtrace_rho_clip: float = 1.0
    """vtrace: clip of the ratio that weighs each TD error"""
    vtrace_c_clip: float = 1.0
    """vtrace: clip of the ratio that carries later TD errors back"""
    prio_alpha: float = 0.0
    """prioritised sampling of sequences by advantage magnitude: probability ~ (sum |A|)^alpha (0: off,
    every sequence once per epoch; PufferLib uses 0.8)"""
    prio_beta0: float = 0.2
    """prioritised sampling: importance-weight exponent at the start, annealed linearly to 1 at the end"""


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
    """local devices to train on, data parallel (agents sharded, parameters replicated): auto = the most
    that divide each group's envs and each minibatch's sequences, or a number (on a CPU, N devices come
    from XLA_FLAGS=--xla_force_host_platform_device_count=N)"""


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
    wandb_init_timeout: float = 20.0
    """seconds wandb.init may wait for the wandb server before the run logs offline instead"""
    run_name: str = ""
    """name of the run in wandb and `jaxlab runs` (empty: the run dir's name)"""


@dataclass(frozen=True)
class Config:
    env_name: str
    env: dict = field(default_factory=dict)  # the env's own (C) parameters
    env_library: str = ""
    """[env] library: where the env comes from: "" jaxlab's built-in envs, else an env header (.h, built
    on first use into a cache) or an env library (.so, from `jaxlab build-env`); a relative path: from the
    current directory, or in a --config file from its folder"""
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
SCHEDULE_ALIASES = {"true": "linear", "yes": "linear", "1": "linear", "on": "linear",
                    "false": "none", "no": "none", "0": "none", "off": "none"}
PRECISIONS = ("float32", "bfloat16")
ENCODERS = ("mlp", "cnn")
ACTIVATIONS = ("gelu", "relu", "silu", "tanh", "elu")
ADVANTAGES = ("gae", "vtrace")
MATMUL_PRECISIONS = ("default", "high", "highest")
DASHBOARDS = ("auto", "rich", "plain", "none")
#: Keys whose value is one of a few names: "section.key" -> the names.
NAMED_CHOICES = {"train.anneal_lr": SCHEDULES, "train.advantage": ADVANTAGES, "policy.encoder": ENCODERS,
                 "policy.activation": ACTIVATIONS, "device.precision": PRECISIONS,
                 "device.matmul_precision": MATMUL_PRECISIONS, "log.dashboard": DASHBOARDS,
                 "env.mask_check": MASK_CHECKS}



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

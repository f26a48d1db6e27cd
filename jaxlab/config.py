"""Typed run configuration: frozen dataclasses, loaded in layers and checked before anything runs.

Layers, later ones winning: configs/default.toml -> configs/envs/<env>.toml ->
configs/presets/<preset>.toml -> --config FILE -> command-line flags ``--section.key value``. Sections:
[env] (the C env's own parameters), [vec], [policy], [train], [device], [checkpoint], [log]. Each field's
docstring below is its --help text.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration the trainer must not start with; the message names the values and a fix."""


@dataclass(frozen=True)
class VecConfig:
    num_envs: int = 64
    """number of C env instances (agents = num_envs x agents_per_env)"""
    num_threads: int = 1
    """C threads stepping the envs (results are identical for any count)"""


@dataclass(frozen=True)
class PolicyConfig:
    hidden_size: int = 128
    """width of the encoder and the LSTM"""
    lstm: bool = True
    """use an LSTM between encoder and heads (false: feed-forward)"""
    actor_init_scale: float = 0.01
    """orthogonal-init scale of the actor head (small: near-uniform initial policy)"""


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
    """learning-rate schedule: linear, cosine or none"""
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
    """global gradient-norm clip"""
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
    env: dict = field(default_factory=dict)
    vec: VecConfig = VecConfig()
    policy: PolicyConfig = PolicyConfig()
    train: TrainConfig = TrainConfig()
    device: DeviceConfig = DeviceConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    log: LogConfig = LogConfig()
    preset: str = "none"


SECTIONS = {"vec": VecConfig, "policy": PolicyConfig, "train": TrainConfig, "device": DeviceConfig,
            "checkpoint": CheckpointConfig, "log": LogConfig}
SCHEDULES = ("linear", "cosine", "none")
PRECISIONS = ("float32", "bfloat16")
MATMUL_PRECISIONS = ("default", "high", "highest")
DASHBOARDS = ("auto", "rich", "plain", "none")


def field_help(cls) -> dict[str, str]:
    """Field name -> its docstring (the string literal after it in the class body)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body
    helps = {}
    for node, following in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr) \
                and isinstance(following.value, ast.Constant):
            helps[node.target.id] = following.value.value
    return helps


def configs_dir() -> Path:
    """The configs/ folder: installed beside the package, or at the root of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "default.toml").is_file():
            return candidate
    raise ConfigError(f"configs/default.toml is missing (looked in {here / 'configs'} and "
                      f"{here.parent / 'configs'}); reinstall jaxlab with `pip install -e .`")


def parse_bool(text: str, where: str) -> bool:
    """true/false in any case, 1/0, yes/no."""
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ConfigError(f"{where}={text!r} is not a boolean; use true or false (also 1/0, yes/no)")


def coerce(value: Any, kind: type | str, where: str) -> Any:
    """``value`` (a TOML value or a command-line string) as ``kind``; ConfigError otherwise.
    ``kind`` "int | str" is an integer or the word auto."""
    if kind == "int | str":
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        try:
            return coerce(value, int, where)
        except ConfigError:
            raise ConfigError(f"{where}={value!r} is neither auto nor an integer; write auto or e.g. 65536") from None
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return parse_bool(value, where)
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        number = value
        if isinstance(value, str):
            try:
                number = float(value.replace("_", "")) if any(c in value.lower() for c in ".e") \
                    else int(value.replace("_", ""))
            except ValueError:
                number = None
        if isinstance(number, float) and math.isfinite(number) and number == int(number):
            return int(number)
        if isinstance(number, int) and not isinstance(number, bool):
            return number
        raise ConfigError(f"{where}={value!r} is not an integer; write e.g. 1000000, 1_000_000 or 1e6")
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.replace("_", ""))
            except ValueError:
                pass
        raise ConfigError(f"{where}={value!r} is not a number; write e.g. 3e-4 or 0.0003")
    elif kind is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{where}={value!r} must be a {kind.__name__}")


def _unknown_key(section: str, key: str, known) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean '{section}.{close[0]}'?" if close else f"; valid keys: {', '.join(known)}"
    return ConfigError(f"unknown config key '{section}.{key}'{hint}")


def apply_layer(values: dict, layer: dict, source: str, sources: dict, env_params: dict) -> None:
    """Merges a {section: {key: value}} layer into ``values``, recording ``source`` per key."""
    for section, entries in layer.items():
        if section == "env":
            if not isinstance(entries, dict):
                raise ConfigError(f"[env] in {source} must be a table of env parameters")
            for key, value in entries.items():
                key = key.replace("-", "_")
                if key not in env_params:
                    raise _unknown_key("env", key, env_params)
                values["env"][key] = value
                sources[f"env.{key}"] = source
            continue
        if section not in SECTIONS:
            close = difflib.get_close_matches(section, ["env", *SECTIONS], n=1)
            hint = f"; did you mean [{close[0]}]?" if close else ""
            raise ConfigError(f"unknown config section [{section}] in {source}{hint}")
        if not isinstance(entries, dict):
            raise ConfigError(f"[{section}] in {source} must be a table")
        types = {f.name: f.type for f in fields(SECTIONS[section])}
        for key, value in entries.items():
            key = key.replace("-", "_")
            if key not in types:
                raise _unknown_key(section, key, types)
            values[section][key] = value
            sources[f"{section}.{key}"] = source


def parse_flags(flags: list[str]) -> dict:
    """``--section.key value`` / ``--section.key=value`` pairs as a layer of strings."""
    layer: dict[str, dict] = {}
    i = 0
    while i < len(flags):
        flag = flags[i]
        if not flag.startswith("--") or "." not in flag:
            raise ConfigError(f"unexpected argument {flag!r}; config flags look like --train.seed 1")
        name, eq, value = flag[2:].partition("=")
        if not eq:
            if i + 1 >= len(flags):
                raise ConfigError(f"flag {flag} needs a value, e.g. {flag} 1")
            value = flags[i + 1]
            i += 1
        section, _, key = name.partition(".")
        layer.setdefault(section.replace("-", "_"), {})[key.replace("-", "_")] = value
        i += 1
    return layer


def read_preset(name: str) -> tuple[dict, dict]:
    """(the [preset] table: description, platform, ...; the config layer) of configs/presets/NAME.toml."""
    path = configs_dir() / "presets" / f"{name}.toml"
    if not path.is_file():
        known = preset_names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(f"unknown preset {name!r}; {hint}presets: auto, {', '.join(known)} (see `jaxlab presets`)")
    layer = read_toml(path)
    return layer.pop("preset", {}), layer


def preset_names() -> list[str]:
    return sorted(p.stem for p in (configs_dir() / "presets").glob("*.toml"))


def load_config(env_name: str, config_file: str | Path | None = None, flags: list[str] | None = None,
                extra_layers: list[tuple[str, dict]] | None = None,
                preset: str | None = None) -> tuple[Config, dict]:
    """Resolves the layers for ``env_name``; returns (config, {"section.key": layer that set it}).
    ``preset`` is a preset's name (``auto`` is resolved by jaxlab.presets before this) or None for none."""
    from jaxlab.env import env_type

    try:
        kind = env_type(env_name)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    env_params = {p.name: p for p in kind.params}
    values: dict[str, dict] = {"env": {}, **{s: {} for s in SECTIONS}}
    sources: dict[str, str] = {}
    base = configs_dir()
    layers = [("configs/default.toml", base / "default.toml"),
              (f"configs/envs/{env_name}.toml", base / "envs" / f"{env_name}.toml")]
    for label, path in layers:
        if path.is_file():
            apply_layer(values, read_toml(path), label, sources, env_params)
    if preset is not None:
        apply_layer(values, read_preset(preset)[1], f"configs/presets/{preset}.toml", sources, env_params)
    for label, layer in extra_layers or []:
        apply_layer(values, layer, label, sources, env_params)
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"--config {path}: no such file")
        layer = read_toml(path)
        file_env = layer.pop("env_name", env_name)
        file_preset = layer.pop("preset", "none")
        preset = preset if preset is not None else file_preset
        if file_env != env_name:
            raise ConfigError(f"--config {path} is a config for env {file_env!r}, not {env_name!r}; "
                              f"run `jaxlab train {file_env} --config {path}` or remove its env_name line")
        apply_layer(values, layer, str(path), sources, env_params)
    apply_layer(values, parse_flags(flags or []), "command line", sources, env_params)
    config = build_config(env_name, values, env_params, preset or "none")
    return config, sources


def config_from_toml(text: str) -> Config:
    """The Config that to_toml wrote (no layers: every value is in the text)."""
    from jaxlab.env import env_type

    try:
        layer = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"a saved config is not valid TOML: {err}") from None
    env_name, preset = layer.pop("env_name"), layer.pop("preset", "none")
    env_params = {p.name: p for p in env_type(env_name).params}
    values: dict[str, dict] = {"env": {}, **{s: {} for s in SECTIONS}}
    apply_layer(values, layer, "saved config", {}, env_params)
    return build_config(env_name, values, env_params, preset)


def read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from None


def build_config(env_name: str, values: dict, env_params: dict, preset: str = "none") -> Config:
    """Typed Config from merged raw values (strings from flags are parsed here)."""
    sections = {}
    for section, cls in SECTIONS.items():
        types = {f.name: f.type for f in fields(cls)}
        kwargs = {k: coerce(v, _type(types[k]), f"{section}.{k}") for k, v in values[section].items()}
        sections[section] = cls(**kwargs)
    env = {}
    for key, value in values["env"].items():
        param = env_params[key]
        env[key] = coerce(value, int if param.is_int else float, f"env.{key}")
    return Config(env_name=env_name, env=env, preset=preset, **sections)


def _type(annotation) -> type | str:
    return {"int": int, "float": float, "bool": bool, "str": str}.get(annotation, annotation)


def as_layer(config: Config) -> dict[str, dict]:
    """The config's values as a layer {section: {key: value}} ([env] first), e.g. to layer flags over a
    saved config or to hand to a logger."""
    return {"env": dict(config.env), **{s: dataclasses.asdict(getattr(config, s)) for s in SECTIONS}}


def to_toml(config: Config) -> str:
    """The resolved config as TOML that --config reads back to the same Config (preset is a record of
    the preset that was applied; --config does not re-apply it)."""
    lines = [f'env_name = "{config.env_name}"', f'preset = "{config.preset}"']
    for section, table in as_layer(config).items():
        lines += ["", f"[{section}]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)


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

    def describe(self) -> str:
        segments = f" x {self.segments} segments" if self.segments > 1 else ""
        return (f"{self.num_envs:,} envs x {self.agents_per_env:,} agents x horizon {self.horizon}{segments} = "
                f"batch {self.batch_size:,}; {self.num_minibatches} minibatch{'es' * (self.num_minibatches > 1)} "
                f"of {self.minibatch_size:,}; "
                f"{self.num_updates:,} updates for {_steps(self.total_timesteps)} steps")


def _steps(n: int) -> str:
    """1,000,000 -> 1M, 250,000 -> 250K, 2,048 -> 2,048."""
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size and n % (size // 10 if size > 1000 else size) == 0:
            value = n / size
            return f"{value:g}{unit}"
    return f"{n:,}"


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        close = difflib.get_close_matches(value, choices, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"{name}={value!r} is not known; {hint}use one of {', '.join(choices)}")


def derive_sizes(config: Config, agents_per_env: int) -> Sizes:
    """Checks every invariant; ConfigError naming the values, the rule and a fix on the first broken."""
    t, v = config.train, config.vec
    positive = [("vec.num_envs", v.num_envs), ("vec.num_threads", v.num_threads),
                ("policy.hidden_size", config.policy.hidden_size), ("train.bptt_horizon", t.bptt_horizon),
                ("train.minibatch_size", t.minibatch_size), ("train.update_epochs", t.update_epochs),
                ("train.total_timesteps", t.total_timesteps), ("checkpoint.keep", config.checkpoint.keep)]
    for name, value in positive:
        if value < 1:
            raise ConfigError(f"{name}={value} must be at least 1")
    if not t.learning_rate > 0:
        raise ConfigError(f"train.learning_rate={t.learning_rate} must be positive, e.g. 3e-4")
    for name in ("gamma", "gae_lambda"):
        value = getattr(t, name)
        if not 0 < value <= 1:
            raise ConfigError(f"train.{name}={value} must be in (0, 1], e.g. 0.99")
    if not t.reward_scale > 0:
        raise ConfigError(f"train.reward_scale={t.reward_scale} must be positive, e.g. 1.0")
    for name in ("clip_coef", "vf_clip_coef", "vf_coef", "ent_coef", "max_grad_norm", "min_lr_ratio"):
        if getattr(t, name) < 0:
            raise ConfigError(f"train.{name}={getattr(t, name)} must be >= 0")
    if t.min_lr_ratio > 1:
        raise ConfigError(f"train.min_lr_ratio={t.min_lr_ratio} must be in [0, 1]")
    if t.anneal_lr not in SCHEDULES:
        raise ConfigError(f"train.anneal_lr={t.anneal_lr!r} is not a schedule; use one of {', '.join(SCHEDULES)}")
    check_choice("device.precision", config.device.precision, PRECISIONS)
    check_choice("device.matmul_precision", config.device.matmul_precision, MATMUL_PRECISIONS)
    check_choice("log.dashboard", config.log.dashboard, DASHBOARDS)
    if not 0 <= config.device.memory_fraction <= 1:
        raise ConfigError(f"device.memory_fraction={config.device.memory_fraction} must be in [0, 1] "
                          "(0 leaves XLA's default), e.g. 0.3 to fit three runs on one GPU")
    for name in ("interval",):
        if getattr(config.checkpoint, name) < 0:
            raise ConfigError(f"checkpoint.{name}={getattr(config.checkpoint, name)} must be >= 0 (0: off)")
    if config.checkpoint.minutes < 0:
        raise ConfigError(f"checkpoint.minutes={config.checkpoint.minutes} must be >= 0 (0: off)")
    if not config.log.interval > 0:
        raise ConfigError(f"log.interval={config.log.interval} must be positive (seconds), e.g. 1")
    num_chunks = min(v.num_envs, 64)
    if v.num_threads > num_chunks:
        raise ConfigError(f"vec.num_threads={v.num_threads} exceeds min(vec.num_envs, 64)={num_chunks}; "
                          f"use at most {num_chunks} threads")
    agents = v.num_envs * agents_per_env
    segment = agents * t.bptt_horizon
    shape = f"{v.num_envs:,} envs x {agents_per_env} agents x horizon {t.bptt_horizon}"
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
                          f"{t.bptt_horizon} (minibatches are whole sequences); e.g. "
                          f"--train.minibatch-size {max(1, t.minibatch_size // t.bptt_horizon) * t.bptt_horizon}")
    if batch % t.minibatch_size != 0:
        raise ConfigError(f"train.minibatch_size={t.minibatch_size} must divide the batch of {batch:,} "
                          f"({shape}); e.g. --train.minibatch-size {batch}")
    if t.total_timesteps < batch:
        raise ConfigError(f"train.total_timesteps={t.total_timesteps:,} is less than one batch of {batch:,} "
                          f"({shape}); raise it to at least {batch} or use fewer envs")
    return Sizes(num_envs=v.num_envs, agents_per_env=agents_per_env, num_agents=agents,
                 horizon=t.bptt_horizon, segments=batch // segment, batch_size=batch,
                 minibatch_size=t.minibatch_size, num_minibatches=batch // t.minibatch_size,
                 minibatch_agents=t.minibatch_size // t.bptt_horizon, num_updates=t.total_timesteps // batch,
                 total_timesteps=t.total_timesteps)

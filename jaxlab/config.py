"""Typed run configuration: frozen dataclasses, loaded in layers and checked before anything runs.

Layers, later ones winning: configs/default.toml -> configs/envs/<env>.toml -> --config FILE ->
command-line flags ``--section.key value``. Sections: [env] (the C env's own parameters), [vec],
[policy], [train]. Each field's comment below is its --help text.
"""

from __future__ import annotations

import dataclasses
import difflib
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
class Config:
    env_name: str
    env: dict = field(default_factory=dict)
    vec: VecConfig = VecConfig()
    policy: PolicyConfig = PolicyConfig()
    train: TrainConfig = TrainConfig()


SECTIONS = {"vec": VecConfig, "policy": PolicyConfig, "train": TrainConfig}
SCHEDULES = ("linear", "cosine", "none")


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


def coerce(value: Any, kind: type, where: str) -> Any:
    """``value`` (a TOML value or a command-line string) as ``kind``; ConfigError otherwise."""
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


def load_config(env_name: str, config_file: str | Path | None = None, flags: list[str] | None = None,
                extra_layers: list[tuple[str, dict]] | None = None) -> tuple[Config, dict]:
    """Resolves the layers for ``env_name``; returns (config, {"section.key": layer that set it})."""
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
    for label, layer in extra_layers or []:
        apply_layer(values, layer, label, sources, env_params)
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"--config {path}: no such file")
        layer = read_toml(path)
        layer.pop("env_name", None)
        apply_layer(values, layer, str(path), sources, env_params)
    apply_layer(values, parse_flags(flags or []), "command line", sources, env_params)
    config = build_config(env_name, values, env_params)
    return config, sources


def read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}") from None


def build_config(env_name: str, values: dict, env_params: dict) -> Config:
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
    config = Config(env_name=env_name, env=env, **sections)
    return config


def _type(annotation) -> type:
    return {"int": int, "float": float, "bool": bool, "str": str}.get(annotation, annotation)


def to_toml(config: Config) -> str:
    """The resolved config as TOML that --config reads back to the same Config."""
    lines = [f'env_name = "{config.env_name}"', "", "[env]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in config.env.items()]
    for section in SECTIONS:
        lines += ["", f"[{section}]"]
        for key, value in dataclasses.asdict(getattr(config, section)).items():
            lines.append(f"{key} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, float):
        return repr(value)
    return str(value)


@dataclass(frozen=True)
class Sizes:
    """Sizes derived from a config and the env's agents_per_env; never typed twice."""

    num_agents: int       # A = num_envs * agents_per_env
    horizon: int          # T
    batch_size: int       # A * T samples per update
    minibatch_size: int   # samples per gradient step
    num_minibatches: int  # batch_size / minibatch_size
    minibatch_agents: int  # sequences per minibatch = minibatch_size / T
    num_updates: int      # total_timesteps // batch_size

    def describe(self, config: Config, agents_per_env: int) -> str:
        return (f"{config.vec.num_envs:,} envs x {agents_per_env:,} agents x horizon {self.horizon} = "
                f"batch {self.batch_size:,}; {self.num_minibatches} minibatches of {self.minibatch_size:,}; "
                f"{self.num_updates:,} updates for {config.train.total_timesteps:,} steps")


def derive_sizes(config: Config, agents_per_env: int) -> Sizes:
    """Checks every invariant; ConfigError naming the values, the rule and a fix on the first broken."""
    t, v = config.train, config.vec
    positive = [("vec.num_envs", v.num_envs), ("vec.num_threads", v.num_threads),
                ("policy.hidden_size", config.policy.hidden_size), ("train.bptt_horizon", t.bptt_horizon),
                ("train.minibatch_size", t.minibatch_size), ("train.update_epochs", t.update_epochs),
                ("train.total_timesteps", t.total_timesteps)]
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
    num_chunks = min(v.num_envs, 64)
    if v.num_threads > num_chunks:
        raise ConfigError(f"vec.num_threads={v.num_threads} exceeds min(vec.num_envs, 64)={num_chunks}; "
                          f"use at most {num_chunks} threads")
    agents = v.num_envs * agents_per_env
    batch = agents * t.bptt_horizon
    if t.minibatch_size % t.bptt_horizon != 0:
        raise ConfigError(f"train.minibatch_size={t.minibatch_size} must be a multiple of train.bptt_horizon="
                          f"{t.bptt_horizon} (minibatches are whole sequences); e.g. "
                          f"--train.minibatch-size {max(1, t.minibatch_size // t.bptt_horizon) * t.bptt_horizon}")
    if batch % t.minibatch_size != 0:
        raise ConfigError(f"train.minibatch_size={t.minibatch_size} must divide the batch of {batch:,} "
                          f"({agents:,} agents x horizon {t.bptt_horizon}); e.g. --train.minibatch-size {batch}")
    if t.total_timesteps < batch:
        raise ConfigError(f"train.total_timesteps={t.total_timesteps:,} is less than one batch of {batch:,} "
                          f"({v.num_envs:,} envs x {agents_per_env} agents x horizon {t.bptt_horizon}); "
                          f"raise it to at least {batch} or use fewer envs")
    return Sizes(num_agents=agents, horizon=t.bptt_horizon, batch_size=batch, minibatch_size=t.minibatch_size,
                 num_minibatches=batch // t.minibatch_size, minibatch_agents=t.minibatch_size // t.bptt_horizon,
                 num_updates=t.total_timesteps // batch)

"""The search space of a sweep: the TOML file format, its parsing, and its checks against the config
schema, all before anything runs. Pure data and config checks: no Optuna, no JAX.

A sweep file holds one ``[sweep]`` table. Keys with a dot are hyperparameters ("section.key" of the
config, or "env.PARAM"); the others are settings::

    [sweep]
    metric = "episode_return"   # a metrics.jsonl key
    direction = "maximize"      # or "minimize"
    average_last = 0.25         # objective = mean of the metric over the updates in the last 25% of
                                # the run's agent-steps (an episode statistic weighted by each update's
                                # episodes: updates that ended none do not count), then the mean of
                                # that over the trial's seeds
    objective = "score"         # or "score,cost": also minimise the run's training time without compiles (s)
    sampler = "tpe"             # tpe or cmaes (cmaes: single objective)
    pruner = "median"           # median, hyperband or none
    reports = 10                # the metric is reported at each tenth of a run (the pruner's steps)
    warmup = 0.3                # the median pruner stops nothing in the first 30% of a run
    startup_trials = 5          # trials sampled at random (and never pruned) before TPE models
    trials = 20                 # trials in the study (--trials)
    seeds = 1                   # seeds per trial (--seeds)
    parallel = 1                # runs at once (--parallel): stored with the study, a plain resume keeps it
    "train.learning_rate" = {low = 1e-4, high = 1e-2, log = true}   # a float, log-uniform
    "train.update_epochs" = {low = 1, high = 4}                     # an int (the schema's type)
    "train.bptt_horizon" = {low = 8, high = 32, step = 8}           # an int with a step
    "policy.hidden_size" = {choices = [64, 128, 256]}               # categorical
"""

from __future__ import annotations

import decimal
import difflib
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from jaxlab.config import (SECTIONS, Config, ConfigError, check_network, coerce, coerce_key, derive_sizes,
                           with_layer)
from jaxlab.config.layers import cleanrl_hint, read_toml
from jaxlab.config.validate import flag_of, flag_value, shown_value, toml_value
from jaxlab.observe.records import metric_meant

#: Keys that are not hyperparameters: set per trial by the sweep, or by --seeds, or bookkeeping.
NOT_SWEPT = {"train.seed": "seeds are --seeds S (each trial runs S seeds and averages them)",
             "vec.num_threads": "the sweep sets it per trial from --parallel (it never changes results)",
             "device.memory_fraction": "the sweep sets it per trial from --parallel (about 0.9/K on a GPU)"}
NOT_SWEPT_SECTIONS = ("checkpoint", "log")
#: [dist] is read before a config loads and says how a run's processes meet: a trial's value would only make it
#: wait for processes the sweep never starts.
NOT_SWEPT_DIST = ("[dist] says how a run's processes meet, not a hyperparameter: the sweep starts each run of a "
                  "trial as one process, which a searched process count or coordinator would only make fail")
#: metrics.jsonl keys that a trainer writes for every env (the env's statistics come on top).
TRAINER_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "old_approx_kl", "clip_fraction",
                   "explained_variance", "grad_norm", "epochs_run", "sps")
#: The schema type of a list key (policy.mlp_layers): searched as choices of lists, each kept as its TOML text.
LIST_KIND = "tuple[int, ...]"
#: Keys of a distribution as PufferLib's and W&B's sweep files write it ({min, max, distribution}, {values}).
OTHER_TOOLS_DISTRIBUTION = {"min", "max", "values", "distribution"}
#: Settings of PufferLib's and W&B's sweep files and what jaxlab calls them.
OTHER_TOOLS_SETTINGS = {"goal": "direction", "method": "sampler", "count": "trials"}
SAMPLERS = ("tpe", "cmaes")
PRUNERS = ("median", "hyperband", "none")
OBJECTIVES = ("score", "score,cost")
DIRECTIONS = ("maximize", "minimize")


@dataclass(frozen=True)
class Param:
    """One hyperparameter: "section.key" and its distribution (float, int or categorical)."""

    name: str
    kind: str                     # "float", "int" or "categorical"
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()

    def describe(self) -> str:
        if self.kind == "categorical":
            return f"{self.name} in {list(self.choices)}"
        scale = ", log" if self.log else ""
        step = f", step {self.step}" if self.step is not None else ""
        return f"{self.name} {self.kind} in [{self.low}, {self.high}]{scale}{step}"

    def short(self) -> str:
        """The distribution alone, compactly: "float 0.0003..0.01 log", "int 8..32 step 8", "one of [32, 64]"."""
        if self.kind == "categorical":
            return f"one of {list(self.choices)}"
        return (f"{self.kind} {self.low}..{self.high}{' log' if self.log else ''}"
                f"{f' step {self.step}' if self.step is not None else ''}")


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file: the hyperparameters and how trials are scored, sampled and pruned."""

    params: tuple[Param, ...]
    metric: str = "episode_return"
    direction: str = "maximize"
    average_last: float = 0.25
    objective: str = "score"
    sampler: str = "tpe"
    pruner: str = "median"
    reports: int = 10
    warmup: float = 0.3
    startup_trials: int = 5
    trials: int = 20
    seeds: int = 1
    parallel: int = 1  # runs at once (--parallel); a study created before it was stored reads 1, the old default
    source: str = field(default="", compare=False)
    flags: frozenset = field(default=frozenset(), compare=False)  # settings the command line gave (--seeds ...)

    @property
    def multi_objective(self) -> bool:
        return self.objective == "score,cost"

    @property
    def directions(self) -> list[str]:
        """Optuna's directions: the metric's, then "minimize" for the cost (training seconds, run_cost) when multi."""
        return [self.direction, "minimize"] if self.multi_objective else [self.direction]

    def to_dict(self) -> dict:
        """JSON-able form, stored with the study so that a resumed sweep uses the same space."""
        data = asdict(self)
        data["params"] = [{**asdict(p), "choices": list(p.choices)} for p in self.params]
        data.pop("source")
        data.pop("flags")
        return data

    @classmethod
    def from_dict(cls, data: dict) -> SweepSpec:
        params = tuple(Param(**{**p, "choices": tuple(p["choices"])}) for p in data["params"])
        return cls(**{**data, "params": params}, source="the study")


#: Settings: name -> (type, default); the defaults are SweepSpec's.
SETTINGS = {f.name: f.type for f in fields(SweepSpec) if f.name not in ("params", "source", "flags")}


def default_sweep_file(env_name: str) -> Path:
    """configs/sweeps/ENV.toml; for a Python env with a C twin (gymnasium:CartPole-v1) its twin's, whose config
    defaults it takes (load_config)."""
    from jaxlab.config import configs_dir
    from jaxlab.env.python_envs import C_TWINS

    return configs_dir() / "sweeps" / f"{C_TWINS.get(env_name, env_name)}.toml"


def default_space(env_name: str) -> Path:
    """default_sweep_file of ``env_name``; ConfigError naming the envs that have one and the fix when it has none
    (an example env, a Python env without a twin, an env header)."""
    path = default_sweep_file(env_name)
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem for p in path.parent.glob("*.toml")))
        raise ConfigError(f"{env_name} has no default search space (configs/sweeps/ holds {shipped}); write one and "
                          "pass --sweep FILE, e.g. a copy of configs/sweeps/cartpole.toml (format in README.md, "
                          "'Sweeps')")
    return path


def read_sweep_file(path: str | Path) -> dict:
    """The [sweep] table of ``path``, hyperparameter keys flattened to "section.key" (a quoted key
    "train.learning_rate" and a dotted one train.learning_rate both work)."""
    path = Path(path)
    if not path.is_file():
        what = "is a folder, not a TOML file" if path.is_dir() else "does not exist"
        raise ConfigError(f"sweep file {path} {what}; pass --sweep FILE (see configs/sweeps/ for examples)")
    try:
        data = read_toml(path)
    except ConfigError as err:
        raise ConfigError(f"sweep file {err}") from None
    if set(data) != {"sweep"}:
        extra = ", ".join(sorted(set(data) - {"sweep"})) or "nothing"
        raise ConfigError(f"sweep file {path} must hold one [sweep] table (found {extra}); put every key under [sweep]")
    table: dict = {}
    for name, value in _flatten(data["sweep"]):
        if name in table:
            raise ConfigError(f"sweep file {path} gives {name!r} twice (once quoted, once as a dotted key or a "
                              "table); keep one")
        table[name] = value
    return table


def _flatten(table: dict, prefix: str = ""):
    for key, value in table.items():
        name = f"{prefix}{key}"
        # PufferLib's or W&B's {min, max, distribution}: a distribution too (their values are no tables, as a
        # [sweep.env] table's hyperparameters named so would be)
        is_distribution = isinstance(value, dict) and bool({"low", "high", "choices"} & set(value) or any(
            k in OTHER_TOOLS_DISTRIBUTION and not isinstance(v, dict) for k, v in value.items()))
        if isinstance(value, dict) and not is_distribution:
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value


def parse_spec(table: dict, env_name: str, source: str, overrides: dict | None = None,
               library: str | None = None) -> SweepSpec:
    """A SweepSpec from a flattened [sweep] table (settings from ``overrides``, e.g. the command line's
    --trials, win); ConfigError naming the key, the value and a fix for anything malformed. The
    config schema is consulted for the keys and types; ``check_space`` checks values against a config.
    ``library``: the config's env.library, where ``env_name`` comes from (see sweep_env)."""
    settings: dict[str, Any] = {}
    params = []
    for key, value in table.items():
        if "." in key:
            param = parse_param(key, value, env_name, source, library)
            same = next((p for p in params if p.name == param.name), None)
            if same is not None:
                raise ConfigError(f"sweep key {key!r} (in {source}) names {param.name}, which the file gives "
                                  f"already ({same.short()}); keep one")
            params.append(param)
        elif key in SETTINGS:
            settings[key] = value
        else:
            close = difflib.get_close_matches(key, list(SETTINGS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            if key in OTHER_TOOLS_SETTINGS:
                hint = f"jaxlab calls {key!r} of PufferLib's and W&B's sweeps {OTHER_TOOLS_SETTINGS[key]!r}; "
            raise ConfigError(f"unknown sweep setting {key!r} in {source}; {hint}settings: {', '.join(SETTINGS)}; "
                              "hyperparameters are written \"section.key\"")
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    settings.update(flags)
    if not params:
        raise ConfigError(f"{source} has no hyperparameter to search; add one, e.g. "
                          "\"train.learning_rate\" = {low = 1e-4, high = 1e-2, log = true}")
    spec = SweepSpec(params=tuple(params), source=source, flags=frozenset(flags),
                     **{k: _setting(k, v, source) for k, v in settings.items()})
    spec = check_settings(spec, env_name, library)
    if spec.multi_objective and spec.pruner != "none" and {"objective", "pruner"} <= set(table) - set(flags):
        raise ConfigError(f"sweep setting pruner={spec.pruner} (in {source}) cannot prune objective score,cost: "
                          "Optuna prunes single-objective studies only; set pruner = \"none\" there, or "
                          "objective = \"score\"")
    return spec


def with_settings(spec: SweepSpec, env_name: str, overrides: dict, library: str | None = None) -> SweepSpec:
    """A resumed study's stored ``spec`` with the command line's settings (``overrides``, None where not
    given) in place of its own, checked as parse_spec checks a file's."""
    flags = {k: v for k, v in overrides.items() if v is not None}
    settings = {k: _setting(k, v, "the command line") for k, v in flags.items()}
    return check_settings(replace(spec, flags=frozenset(flags), **settings), env_name, library)


def _setting(key: str, value: Any, source: str) -> Any:
    kind = SETTINGS[key]
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"sweep setting {key}={shown_value(value)} in {source} must be an integer")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"sweep setting {key}={shown_value(value)} in {source} must be a number")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"sweep setting {key}={shown_value(value)} in {source} must be a string")
    return value.strip().lower().replace(" ", "")


def check_settings(spec: SweepSpec, env_name: str, library: str | None = None) -> SweepSpec:
    """ConfigError for a setting out of its range or not among its names (naming it, as its flag when the
    command line gave it, and a fix)."""
    where = spec.source
    for key, names in (("direction", DIRECTIONS), ("objective", OBJECTIVES), ("sampler", SAMPLERS),
                       ("pruner", PRUNERS)):
        _check_name(spec, key, names)
    known = (*sweep_env(env_name, library).log_names, *TRAINER_METRICS)
    if spec.metric not in known:
        meant = metric_meant(spec.metric, known)  # CleanRL's names too: charts/episodic_return
        hint = f"did you mean {meant!r}? " if meant else ""
        raise ConfigError(f"sweep metric {spec.metric!r} (in {where}) is not a metric of {env_name} runs; "
                          f"{hint}use one of {', '.join(known)}")
    if not 0 < spec.average_last <= 1:
        raise ConfigError(f"sweep setting average_last={spec.average_last} (in {where}) must be in (0, 1], "
                          "e.g. 0.25 for the last quarter of the run")
    if not 0 <= spec.warmup < 1:
        raise ConfigError(f"sweep setting warmup={spec.warmup} (in {where}) must be in [0, 1), e.g. 0.3")
    for key, low in (("reports", 1), ("seeds", 1), ("parallel", 1), ("trials", 0), ("startup_trials", 0)):
        if getattr(spec, key) < low:
            raise ConfigError(f"{_named(spec, key)} must be at least {low}")
    if spec.multi_objective and spec.sampler == "cmaes":
        flag = "sampler" in spec.flags or "objective" in spec.flags
        sampler = "--sampler cmaes" if "sampler" in spec.flags else f"sampler cmaes (in {where})"
        objective = "--objective score,cost" if "objective" in spec.flags else "score,cost"
        raise ConfigError(f"{sampler} optimises one objective, not {objective}; use {'--' if flag else ''}sampler "
                          f"tpe for the Pareto front, or {'--' if flag else ''}objective score")
    if spec.multi_objective and spec.pruner != "none" and "pruner" in spec.flags:
        objective = "--objective score,cost" if "objective" in spec.flags else f"objective score,cost (in {where})"
        raise ConfigError(f"--pruner {spec.pruner} cannot prune {objective}: Optuna prunes single-objective studies "
                          "only; leave out --pruner (or give --pruner none), or --objective score to prune")
    return spec


def unused_pruner(spec: SweepSpec, pruner_in_file: bool) -> str | None:
    """The warning for a multi-objective ``spec``'s pruner, which Optuna cannot use (it prunes single-objective
    studies only), when nobody chose it for this objective: the default, or a sweep file's (``pruner_in_file``:
    e.g. configs/sweeps/ENV.toml's median) under --objective score,cost; None for no pruner or one objective.
    check_settings and parse_spec refuse a pruner that --pruner, or the file that sets score,cost, gives."""
    if not spec.multi_objective or spec.pruner == "none":
        return None
    pruner = f"pruner {spec.pruner} (in {spec.source})" if pruner_in_file else f"the default pruner {spec.pruner}"
    objective = "--objective score,cost" if "objective" in spec.flags else f"objective score,cost (in {spec.source})"
    return (f"{pruner} is not used with {objective}: Optuna prunes single-objective studies only, so every trial "
            "runs to its end; --pruner none says so")


def _named(spec: SweepSpec, key: str) -> str:
    """Setting ``key`` and its value as a message names them: "--seeds 0" when the command line gave it,
    else "sweep setting seeds=0 (in FILE)"."""
    value = getattr(spec, key)
    return f"--{key} {value}" if key in spec.flags else f"sweep setting {key}={value} (in {spec.source})"


def _check_name(spec: SweepSpec, key: str, names: tuple[str, ...]) -> None:
    """ConfigError when setting ``key`` is not one of ``names`` (with the closest one)."""
    value = getattr(spec, key)
    if value not in names:
        close = difflib.get_close_matches(value, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(f"{_named(spec, key)} is not known; {hint}use one of {', '.join(names)}")


def sweep_env(env_name: str, library: str | None = None):
    """The env type whose parameters a sweep of ``env_name`` searches and whose statistics it scores: a built-in
    env, the env of ``library`` (an env header or library: the config's env.library), or a Python env
    (gymnasium:ID, pettingzoo:MODULE: no parameters). ConfigError when it cannot be had."""
    from jaxlab.config.layers import env_kind

    return env_kind(env_name, library)


def schema_type(name: str, env_name: str, library: str | None = None) -> type | str:
    """The type of config key ``name`` ("section.key" or "env.PARAM") for env ``env_name`` of ``library``;
    ConfigError for an unknown key or one that is not a hyperparameter (naming why and what to do)."""
    section, _, key = name.partition(".")
    key = key.replace("-", "_")
    if section == "env":
        params = {p.name: p for p in sweep_env(env_name, library).params}
        if key not in params:
            close = difflib.get_close_matches(key, list(params), n=1)
            hint = f"did you mean 'env.{close[0]}'? " if close else ""
            raise ConfigError(f"unknown sweep key {name!r}: {env_name} has no parameter {key!r}; {hint}"
                              f"its parameters: {', '.join(params) or 'none'}")
        return int if params[key].is_int else float
    if section not in SECTIONS:
        close = difflib.get_close_matches(section, ["env", *SECTIONS], n=1)
        hint = f"did you mean '{close[0]}.{key}'? " if close else ""
        raise ConfigError(f"unknown sweep key {name!r}: no config section {section!r}; {hint}"
                          f"sections: env, {', '.join(SECTIONS)}")
    types = {f.name: f.type for f in fields(SECTIONS[section])}
    if key not in types:
        close = difflib.get_close_matches(key, list(types), n=1)
        hint = f"did you mean '{section}.{close[0]}'? " if close else ""
        if cleanrl_hint(key):  # a close name would mislead: num_minibatches is no minibatch_size
            hint = f"{cleanrl_hint(key)}; "
        raise ConfigError(f"unknown sweep key {name!r}; {hint}keys of [{section}]: {', '.join(types)}")
    full = f"{section}.{key}"
    if full in NOT_SWEPT:
        raise ConfigError(f"sweep key {full!r} cannot be searched: {NOT_SWEPT[full]}; remove it from the sweep file")
    if section == "dist":
        raise ConfigError(f"sweep key {full!r} cannot be searched: {NOT_SWEPT_DIST}; remove it from the sweep file")
    if section in NOT_SWEPT_SECTIONS:
        raise ConfigError(f"sweep key {full!r} cannot be searched: [{section}] is bookkeeping, not a hyperparameter; "
                          "set it with a flag (--{section}.KEY VALUE) for every trial instead")
    return {"int": int, "float": float, "bool": bool, "str": str}.get(types[key], types[key])


def param_name(key: str) -> str:
    """The config key "section.key" that sweep file key ``key`` searches (dashes as underscores)."""
    section, _, name = key.partition(".")
    return f"{section}.{name.replace('-', '_')}"


def searched_names(table: dict) -> frozenset[str]:
    """The config keys a read_sweep_file ``table`` searches (its keys with a dot; the others are settings),
    before parse_spec checks them."""
    return frozenset(param_name(key) for key in table if "." in key)


def parse_param(name: str, value: Any, env_name: str, source: str, library: str | None = None) -> Param:
    """One hyperparameter from its TOML value; ConfigError naming it for anything malformed."""
    kind = schema_type(name, env_name, library)
    name = param_name(name)
    section, _, key = name.partition(".")
    where = f"sweep key {name!r} (in {source})"
    if not isinstance(value, dict):
        raise ConfigError(f"{where} = {shown_value(value)} must be a table: {{low = ..., high = ...}} or "
                          "{choices = [...]}")
    allowed = {"choices"} if "choices" in value else {"low", "high", "log", "step"}
    extra = set(value) - allowed
    if extra & OTHER_TOOLS_DISTRIBUTION:
        raise ConfigError(f"{where} is written as PufferLib or W&B sweeps write a distribution "
                          f"({', '.join(sorted(extra))}); {jaxlab_distribution(value)}")
    if extra:
        raise ConfigError(f"{where} has {', '.join(sorted(extra))}, which goes not with "
                          f"{'choices' if 'choices' in value else 'low/high'}; use {{low, high, log, step}} or "
                          "{choices = [...]}")
    if "choices" in value:
        choices = value["choices"]
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{where}: choices = {shown_value(choices)} must be a non-empty list, e.g. "
                              "choices = [64, 128]")
        coerced = []
        for choice in choices:
            if isinstance(choice, dict) or (isinstance(choice, list) and kind != LIST_KIND):
                raise ConfigError(f"{where}: choice {shown_value(choice)} must be a number, a string or a boolean")
            coerced.append(coerce(choice, kind, name) if section == "env" else coerce_key(section, key, choice, kind))
        if len(set(map(repr, coerced))) != len(coerced):
            raise ConfigError(f"{where}: choices {shown_value(choices)} repeat a value; list each once")
        if len(coerced) == 1:
            raise ConfigError(f"{where}: choices = {shown_value(choices)} hold one value, so every trial gets it and "
                              f"nothing is searched; list two or more, or set it for every trial with {flag_of(name)} "
                              f"{flag_value(coerced[0])} "
                              "and leave it out of the sweep file")
        if kind == LIST_KIND:  # Optuna's choices are scalars: a list as the text a flag or TOML takes, "[128, 128]"
            coerced = [toml_value(list(choice)) for choice in coerced]
        return Param(name, "categorical", choices=tuple(coerced))
    # a number or auto (train.reward_scale, train.batch_size, device.count): a range searches the numbers
    kind = {"float | str": float, "int | str": int}.get(kind, kind)
    if kind not in (int, float):
        raise ConfigError(f"{where}: {name} is a {getattr(kind, '__name__', kind)} key, not a number; "
                          "give {choices = [...]} instead of low/high")
    if "low" not in value or "high" not in value:
        raise ConfigError(f"{where} needs both low and high, e.g. {{low = 1e-4, high = 1e-2}}")
    low, high, log, step = value["low"], value["high"], value.get("log", False), value.get("step")
    if not isinstance(log, bool):
        raise ConfigError(f"{where}: log = {shown_value(log)} must be true or false")
    for label, number in (("low", low), ("high", high), ("step", step)):
        if number is None:
            continue
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            raise ConfigError(f"{where}: {label} = {shown_value(number)} must be a finite number")
        if kind is int and not isinstance(number, int):
            raise ConfigError(f"{where}: {label} = {shown_value(number)} must be an integer ({name} is an integer key)")
    if not low < high:
        raise ConfigError(f"{where}: low = {low} must be less than high = {high}")
    if log and low <= 0:
        raise ConfigError(f"{where}: log = true needs low > 0 (low = {low}); raise low, e.g. {high / 100:g}")
    if step is not None:
        if step <= 0:
            raise ConfigError(f"{where}: step = {step} must be positive")
        if log and not (kind is int and step == 1):
            raise ConfigError(f"{where}: step and log = true do not go together; drop one")
        fitting = highest_on_step(low, high, step)
        if fitting != high:
            raise ConfigError(f"{where}: high - low = {high - low:.12g} must be a multiple of step = {step}, "
                              f"e.g. high = {fitting if fitting > low else low + step:.12g}")
    return Param(name, "int" if kind is int else "float", low=kind(low), high=kind(high), log=log,
                 step=None if step is None else kind(step))


def jaxlab_distribution(value: dict) -> str:
    """How jaxlab writes the distribution ``value`` that PufferLib's or W&B's keys give (min and max are low and
    high, a log distribution is log = true, values are choices), with its own numbers where it has them."""
    if "values" in value:
        return f"write it {{choices = {shown_value(value['values'])}}} (W&B's values are jaxlab's choices)"
    log = "log" in str(value.get("distribution", "")).lower()
    bounds = (f"low = {shown_value(value['min'])}, high = {shown_value(value['max'])}" if {"min", "max"} <= set(value)
              else "low = ..., high = ...")
    return (f"write it {{{bounds}{', log = true' if log else ''}}} (min and max are low and high; a log distribution "
            "is log = true)")


def highest_on_step(low: float, high: float, step: float) -> float:
    """The largest low + n * step that is at most ``high``, in decimal arithmetic as Optuna computes it (it
    replaces the high of a range that ``step`` does not divide by this value, with only a warning)."""
    d_low, d_high, d_step = (decimal.Decimal(str(x)) for x in (low, high, step))
    return float((d_high - d_low) // d_step * d_step + d_low)


def refuse_flags_on_searched_keys(spec: SweepSpec, config: Config, sources: dict) -> None:
    """ConfigError for a config flag that sets a key the space searches: each trial's value replaces it, so the
    flag would change nothing while it looks like it fixes the key (``sources``: load_config's, "command line"
    for a flag). A --config file or preset may set one: it is the base that a searched value replaces."""
    for param in spec.params:
        if sources.get(param.name) != "command line":
            continue
        section, _, key = param.name.partition(".")
        value = config.env[key] if section == "env" else getattr(getattr(config, section), key)
        raise ConfigError(f"{flag_of(param.name)} {flag_value(value)} would do nothing: the sweep searches "
                          f"{param.name} ({param.short()}, in {spec.source}) and each trial's value replaces the "
                          f"flag's; drop the flag to search it, or leave {param.name} out of the sweep file to fix "
                          "it for every trial")


def refuse_keys_that_do_nothing(spec: SweepSpec, base: Config) -> None:
    """ConfigError for a searched key that ``base`` does not use (config.validate.unused_keys: policy.hidden_size
    without the LSTM, train.min_lr_ratio without an LR schedule, ...) while the key that makes it so is not searched
    too: every trial would train alike whatever its value, and the sampler would model noise."""
    from jaxlab.config.validate import unused_keys

    searched = {p.name for p in spec.params}
    unused = unused_keys(base)
    for param in spec.params:
        why = unused.get(param.name)
        if why is not None and why[0] not in searched:
            raise ConfigError(f"sweep key {param.name!r} (in {spec.source}) does nothing with {why[0]} {why[1]} (the "
                              "base config's): every trial would train alike whatever its value; search "
                              f"{why[0]} too, set another {why[0]} for every trial, or leave {param.name} out of the "
                              "sweep file")


def apply_params(base: Config, params: dict[str, Any], seed: int | None = None) -> Config:
    """``base`` with the hyperparameter values ``params`` ({"section.key": value}) and ``train.seed``."""
    layer: dict[str, dict] = {}
    for name, value in params.items():
        section, _, key = name.partition(".")
        layer.setdefault(section, {})[key] = value
    if seed is not None:
        layer.setdefault("train", {})["seed"] = seed
    return with_layer(base, layer, "sweep")


def check_config(config: Config):
    """The config's sizes (ConfigError when it breaks an invariant or an env parameter's range, or when its
    network does not fit the env's observations: a cnn encoder on vector observations)."""
    from jaxlab.config import memory

    shape = memory.env_shape(config)
    sizes = derive_sizes(config, shape.agents_per_env)
    check_network(config, shape.obs_shape)
    return sizes


def corners(param: Param) -> list:
    """The values of ``param`` that its checks try: both ends, or every choice."""
    return list(param.choices) if param.kind == "categorical" else [param.low, param.high]


def check_space(spec: SweepSpec, base: Config) -> None:
    """Each end of each range and each choice, set alone on ``base``, must give a config that passes
    the config's own checks; ConfigError naming the sweep key, the value and the broken rule. So must the
    last of the train seeds every trial runs (base, base + 1, ... for ``spec.seeds``)."""
    last = base.train.seed + spec.seeds - 1
    try:
        check_config(apply_params(base, {}, seed=last))
    except ConfigError as err:
        raise ConfigError(f"{_named(spec, 'seeds')} runs each trial with train seeds {base.train.seed} to {last}, "
                          f"and the last cannot run: {err.args[0].partition(', e.g.')[0]}; lower --train.seed or "
                          "the seeds") from None
    for param in spec.params:
        for value in corners(param):
            try:
                check_config(apply_params(base, {param.name: value}))
            except ConfigError as err:
                raise ConfigError(f"sweep key {param.name!r} = {shown_value(value)} (in {spec.source}) gives a "
                                  f"config that cannot run: {err}") from None

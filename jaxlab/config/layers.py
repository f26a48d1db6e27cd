"""Loading a config in layers and coercing values: configs/default.toml -> configs/envs/<env>.toml ->
configs/presets/<preset>.toml -> --config FILE -> command-line flags ``--section.key value``; and
writing a resolved config back as TOML.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

from jaxlab.config.schema import ENV_KEYS, NAMED_CHOICES, SCHEDULE_ALIASES, SECTIONS, Config, ConfigError
from jaxlab.config.validate import flag_of, flag_value, shown_value, toml_value


def configs_dir() -> Path:
    """The configs/ folder: installed beside the package, or at the root of a source checkout."""
    here = Path(__file__).resolve().parent.parent  # the jaxlab package
    for candidate in (here / "configs", here.parent / "configs"):
        if (candidate / "default.toml").is_file():
            return candidate
    raise ConfigError(f"configs/default.toml is missing (looked in {here / 'configs'} and "
                      f"{here.parent / 'configs'}); reinstall jaxlab with `pip install -e .`")


def parse_bool(text: str, where: str) -> bool:
    """true/false in any case, 1/0, yes/no, on/off."""
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{where}={shown_value(text)} is not a boolean; use true or false (also 1/0, yes/no, "
                      "on/off)")


AUTO_EXAMPLES = {"train.batch_size": 65536, "vec.num_threads": 2}  # an integer to suggest per "int | str" key


def coerce(value: Any, kind: type | str, where: str) -> Any:
    """``value`` (a TOML value or a command-line string) as ``kind``; ConfigError otherwise.
    ``kind`` "int | str" is an integer or the word auto, "float | str" a number or auto, "bool | str" a
    boolean or auto, "tuple[int, ...]" a list of positive integers (a TOML array, or on the command line
    512,512 or [512, 512]; [] or an empty string for none)."""
    if kind in ("float | str", "bool | str"):
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        try:
            return coerce(value, float if kind == "float | str" else bool, where)
        except ConfigError:
            fix = ("write auto, or a number that multiplies the rewards (1.0: as they are, no scaling)"
                   if kind == "float | str" else "write auto or e.g. true")  # none/off mean 1.0 here, not 0
            what = "number" if kind == "float | str" else "boolean"
            raise ConfigError(f"{where}={shown_value(value)} is neither auto nor a {what}; {fix}") from None
    if kind == "tuple[int, ...]":
        return coerce_int_list(value, where)
    if kind == "int | str":
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        try:
            return coerce(value, int, where)
        except ConfigError:
            example = AUTO_EXAMPLES.get(where, 2)
            raise ConfigError(f"{where}={shown_value(value)} is neither auto nor an integer; "
                              f"write auto or e.g. {example}") from None
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
        number = parse_integer(value) if isinstance(value, str) else value
        if isinstance(number, float) and math.isfinite(number) and number == int(number):
            return int(number)
        if isinstance(number, int) and not isinstance(number, bool):
            return number
        example = _example(where, "e.g. 1000000, 1_000_000 or 1e6")
        raise ConfigError(f"{where}={shown_value(value)} is not an integer; write {example}")
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.replace("_", ""))
            except ValueError:
                pass
        example = _example(where, "e.g. 3e-4 or 0.0003")
        raise ConfigError(f"{where}={shown_value(value)} is not a number; write {example}")
    elif kind is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{where}={shown_value(value)} {_wrong_kind_fix(kind, value, where)}")


def parse_integer(text: str) -> int | None:
    """The whole number ``text`` writes, as a config integer takes it (1000, 1_000, 1e3, 2.0), or None."""
    try:
        number = float(text.replace("_", "")) if any(c in text.lower() for c in ".e") else int(text.replace("_", ""))
    except ValueError:
        return None
    if isinstance(number, float):
        return int(number) if math.isfinite(number) and number.is_integer() else None
    return number


def _wrong_kind_fix(kind: type, value: Any, where: str) -> str:
    """What is wrong with ``value`` for key ``where`` of type ``kind`` (bool or str), and the fix."""
    name = where.rpartition(".")[2]
    if kind is bool:
        return f"is not a boolean; write {name} = true or false in TOML (or {flag_of(where)} true)"
    if where in NAMED_CHOICES:  # quoting the value would not make it one of the names
        choices = NAMED_CHOICES[where]
        also = " (or true for linear, false for none)" if where == "train.anneal_lr" else ""
        return f'is not one of {", ".join(choices)}; write one in quotes in TOML, e.g. {name} = "{choices[0]}"{also}'
    if isinstance(value, (int, float)):  # a TOML value written without its quotes
        return f'is not a string; write it in quotes in TOML: {name} = "{shown_value(value)}"'
    return f'is not a string; write one in quotes in TOML, e.g. {name} = "..."'


def _example(where: str, generic: str) -> str:
    """An example value for key ``where``: its default as a flag when it is a schema key, else ``generic``."""
    from jaxlab.config.validate import default_flag

    try:
        return f"e.g. {default_flag(where)}"
    except (KeyError, StopIteration, ValueError):  # not "section.name" of the schema (an env parameter, ...)
        return generic


def coerce_int_list(value: Any, where: str) -> tuple[int, ...]:
    """A list of positive integers from a TOML array or a string "512,512" / "[512, 512]" / "512 512" / "" / "[]"
    (commas or spaces between the items: "64 64" is two layers, not 6464)."""
    items = value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1]
        items = [part for part in re.split(r"[,\s]+", text) if part]
    if not isinstance(items, (list, tuple)):
        raise ConfigError(f"{where}={shown_value(value)} is not a list of integers; write e.g. [512, 512] in TOML or "
                          f"--{where.replace('_', '-')} 512,512")
    try:
        numbers = tuple(coerce(item, int, f"{where}[{i}]") for i, item in enumerate(items))
    except ConfigError as err:  # the integer's own fix (1e6, ...) does not fit a list
        raise ConfigError(f"{str(err).partition(';')[0]}; write a list of integers, e.g. [512, 512] in TOML or "
                          f"--{where.replace('_', '-')} 512,512") from None
    for i, number in enumerate(numbers):
        if number < 1:
            raise ConfigError(f"{where}[{i}]={number} must be at least 1 (a width, a size or a stride)")
    return numbers


def coerce_schedule(value: Any, where: str) -> str:
    """train.anneal_lr: a schedule name in any case, or a boolean as PufferLib users write it (a TOML
    boolean, or true/yes/1/on and false/no/0/off in any case): true means "linear", false "none"."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return "linear" if value else "none"
    name = coerce(value, str, where).strip().lower()
    return SCHEDULE_ALIASES.get(name, name)


#: Keys coerced by their own function(value, where) instead of by their type.
SPECIAL_KEYS = {"train.anneal_lr": coerce_schedule}


def coerce_key(section: str, key: str, value: Any, kind: type | str) -> Any:
    """The value of config key ``section.key`` (of type ``kind``) from a raw TOML or flag value."""
    where = f"{section}.{key}"
    special = SPECIAL_KEYS.get(where)
    return special(value, where) if special else coerce(value, kind, where)


def close_names(name: str, known: list[str]) -> list[str]:
    """The one name of ``known`` closest to ``name``, in a list (empty when none is close), ignoring case:
    TRAIN is train, LEARNING_RATE learning_rate."""
    by_lower = {k.lower(): k for k in known}
    return [by_lower[lower] for lower in difflib.get_close_matches(name.lower(), list(by_lower), n=1)]


def _key_elsewhere(key: str, section: str = "") -> str | None:
    """The config key ("section.key") that a key written in the wrong section means: the same name in
    another section (train.num_envs: vec.num_envs), or a section's key written with its section as a
    prefix (train.checkpoint_interval, PufferLib's: checkpoint.interval); None when there is none."""
    for other, cls in SECTIONS.items():
        if other != section and any(f.name == key for f in fields(cls)):
            return f"{other}.{key}"
    for other, cls in SECTIONS.items():
        rest = key.removeprefix(f"{other}_")
        if rest != key and any(f.name == rest for f in fields(cls)):
            return f"{other}.{rest}"
    return None


_REMOVE = "; remove it"
#: PufferLib config keys that jaxlab has under no name, or under another meaning: "section.key" -> what jaxlab
#: does instead (a close jaxlab name would suggest the wrong key: vec.batch_size is not train.batch_size).
PUFFERLIB_KEYS = {
    **dict.fromkeys(("vec.backend", "vec.zero_copy"), "jaxlab steps C envs in threads of its own process "
                    "(vec.num_threads), with no backend to pick" + _REMOVE),
    "vec.batch_size": "PufferLib's vec.batch_size, the envs stepped at a time, is vec.num_envs / vec.groups here "
                      "(e.g. --vec.groups 2 steps half of the envs while the policy acts for the other half); the "
                      "samples per update are train.batch_size",
    **dict.fromkeys(("train.compile", "train.compile_mode", "train.compile_fullgraph"),
                    "XLA always compiles jaxlab's rollout and update" + _REMOVE),
    **dict.fromkeys(("train.optimizer", "train.adam_beta1", "train.adam_beta2", "train.adam_eps"),
                    "jaxlab's optimizer is Adam (betas 0.9 and 0.999, eps 1e-5), which no config key changes"
                    + _REMOVE),
    "train.max_minibatch_size": "jaxlab takes each train.minibatch_size in one gradient step, with no "
                                "accumulation" + _REMOVE,
    "train.cpu_offload": "jaxlab keeps the collected segment on the device" + _REMOVE,
    "train.torch_deterministic": "a train.seed gives the same run on a CPU (on a GPU, XLA_FLAGS="
                                 "--xla_gpu_deterministic_ops=true asks for deterministic ops)" + _REMOVE,
    "train.data_dir": "a run's files go to --run-dir DIR (default runs/ENV-TIMESTAMP)" + _REMOVE,
    "train.project": "did you mean 'log.wandb_project'?",
    "train.use_rnn": "did you mean 'policy.lstm'?",
}
#: PufferLib config sections with no jaxlab section: name -> where their contents go.
PUFFERLIB_SECTIONS = {
    "base": "PufferLib's [base] has no jaxlab section: the env is ENV on the command line "
            "(`jaxlab train ENV`) and the network is [policy]",
    "sweep": "a sweep's search space is a file of its own: `jaxlab sweep ENV --sweep FILE` (see README, Sweeps)",
}


#: CleanRL's (and PureJaxRL's, in lower case) PPO arguments that jaxlab has under another name or meaning, or
#: not at all, in whatever section they are written: name -> what to write instead (README, "From CleanRL or
#: PureJaxRL").
CLEANRL_NAMES = {
    "num_steps": "CleanRL's num_steps, the steps per env in a rollout, is train.bptt_horizon here",
    "num_minibatches": "CleanRL's num_minibatches is a count; jaxlab sets each minibatch's size: train.minibatch_size "
                       "= batch / num_minibatches (the batch, vec.num_envs x agents per env x train.bptt_horizon, is "
                       "in `jaxlab config ENV`'s second line), a multiple of train.bptt_horizon (whole sequences)",
    "clip_vloss": "CleanRL's clip_vloss clips the value change by clip_coef; here train.vf_clip_coef is that "
                  "range itself (0: no value clipping), e.g. --train.vf-clip-coef 0.2 for CleanRL's clip_vloss true",
    "target_kl": "CleanRL's target_kl is train.target_kl here (e.g. --train.target-kl 0.015; 0: off), checked "
                 "after each epoch against the epoch's approx_kl",
    "env_id": "the env is ENV on the command line (`jaxlab train cartpole`); remove it",
    "track": "CleanRL's track is log.wandb here (--log.wandb true; project: log.wandb_project)",
    "wandb_project_name": "CleanRL's wandb_project_name is log.wandb_project here",
    "exp_name": "CleanRL's exp_name is log.run_name here (default: the run dir's name)",
    "cuda": "jaxlab trains on the devices JAX sees: --preset cpu keeps a run on the CPU (see `jaxlab presets`)",
    "torch_deterministic": PUFFERLIB_KEYS["train.torch_deterministic"],
    "capture_video": "`jaxlab eval ENV --checkpoint RUN --gif FILE.gif` draws an episode of a saved policy "
                     "(envs with a pixels hook); remove it",
}


def cleanrl_hint(key: str) -> str | None:
    """What jaxlab has for CleanRL's argument ``key`` (dashes or underscores, any case), or None."""
    return CLEANRL_NAMES.get(key.replace("-", "_").lower())


def unknown_key_error(section: str, key: str, known, env_name: str = "", source: str = "",
                      listing: str = "") -> ConfigError:
    """The error for key ``section.key`` that is none of ``known``: the close name, or the key of another
    section it means, or the names ``known`` (for [env], of the env ``env_name``), or ``listing`` in their
    stead where given; a ``source`` other than the command line (a --config file, a preset) is named after
    the key."""
    from jaxlab.env.python_envs import is_python_env

    close = close_names(key, list(known))
    elsewhere = _key_elsewhere(key, section)
    hint = (f"; did you mean '{section}.{close[0]}'?" if close else f"; did you mean '{elsewhere}'?" if elsewhere
            else f"; {listing or 'valid keys: ' + ', '.join(known)}")
    if key == "device" and not close:  # PufferLib's train.device
        hint = ("; jaxlab trains on the devices JAX sees: pick them with --preset (see `jaxlab presets`) and "
                "--device.count")
    if f"{section}.{key}" in PUFFERLIB_KEYS:
        hint = f"; {PUFFERLIB_KEYS[f'{section}.{key}']}"
    elif cleanrl_hint(key) and section != "env":  # a close name would mislead: num_minibatches is no minibatch_size
        hint = f"; {cleanrl_hint(key)}"
    if section == "env" and not close and is_python_env(env_name):
        if env_name.startswith("gymnasium:"):
            args = "its constructor's keyword arguments (and gymnasium.make's, e.g. max_episode_steps)"
            own = ("register an id with them in a module of yours (gymnasium.register('MyEnv-v0', entry_point=..., "
                   "kwargs={...}, max_episode_steps=...)) and train gymnasium:MODULE:MyEnv-v0")
        else:
            args = "its parallel_env()'s keyword arguments"
            own = "write a module of yours whose parallel_env() passes them on and train pettingzoo:MODULE"
        hint = (f": {env_name!r} is a Python env, which takes no env parameters from flags or config files ([env] "
                f"keys: {', '.join(known)}); pass {args} to jaxlab.make({env_name!r}, ...) in Python, or, to train "
                f"from the command line, {own}")
    where = f" in {source}" if source and source != "command line" else ""  # a flag names itself
    return ConfigError(f"unknown config key '{section}.{key}'{where}{hint}")


def _key_outside_sections(key: str, value, source: str, env_params: dict) -> ConfigError:
    """The error for ``key = value`` written in ``source`` before any [section] header (a flat file): where
    the key belongs, when some section has it."""
    written = shown_value(value)
    name = key.replace("-", "_")
    where = f"env.{name}" if name in env_params else _key_elsewhere(name)
    if where is None and cleanrl_hint(name):
        return ConfigError(f"{key} = {written} in {source} is outside any [section]; {cleanrl_hint(name)}")
    if where is None:
        fix = "put each key under its section's header, e.g. [policy] for hidden_size (see `jaxlab train --help`)"
    else:
        section, _, name = where.partition(".")
        fix = f"put it under [{section}] as {name} = {written} ({where})"
    return ConfigError(f"{key} = {written} in {source} is outside any [section]; {fix}")


def apply_layer(values: dict, layer: dict, source: str, sources: dict, env_params: dict, env_name: str = "") -> None:
    """Merges a {section: {key: value}} layer into ``values``, recording ``source`` per key. In [env],
    ``library`` and ``mask_check`` (ENV_KEYS) go to values["env_keys"], the rest are env parameters
    (``env_name``, when given, names the env in the message for an unknown one)."""
    for section, entries in layer.items():
        if section == "env":
            if not isinstance(entries, dict):
                raise ConfigError(f"[env] in {source} must be a table of env parameters")
            for key, value in entries.items():
                key = key.replace("-", "_")
                if key in ENV_KEYS:
                    values.setdefault("env_keys", {})[key] = value
                elif key not in env_params:
                    raise unknown_key_error("env", key, [*env_params, *ENV_KEYS], env_name, source)
                else:
                    values["env"][key] = value
                sources[f"env.{key}"] = source
            continue
        if section not in SECTIONS and not isinstance(entries, dict):  # `lstm = true` above every [section]
            raise _key_outside_sections(section, entries, source, env_params)
        if section not in SECTIONS:
            close = close_names(section, ["env", *SECTIONS])
            elsewhere = next(filter(None, (_key_elsewhere(str(k).replace("-", "_")) for k in entries)), None) \
                if isinstance(entries, dict) else None  # [rnn] hidden_size: policy.hidden_size
            hint = (f"; did you mean [{close[0]}]?" if close else f"; did you mean '{elsewhere}'?" if elsewhere
                    else f"; the sections are {', '.join(['env', *SECTIONS])}")
            if section in PUFFERLIB_SECTIONS:
                hint = f"; {PUFFERLIB_SECTIONS[section]}"
            raise ConfigError(f"unknown config section [{section}] in {source}{hint}")
        if not isinstance(entries, dict):
            raise ConfigError(f"[{section}] in {source} must be a table")
        types = {f.name: f.type for f in fields(SECTIONS[section])}
        for key, value in entries.items():
            key = key.replace("-", "_")
            if key not in types:
                raise unknown_key_error(section, key, types, source=source)
            values[section][key] = value
            sources[f"{section}.{key}"] = source


def flags_library(flags: list[str] | None, config_file: str | Path | None = None) -> str | None:
    """The env library that command-line flags name (--env.library), else the --config file, or None."""
    layers = [(str(config_file), read_config_file(Path(config_file)))] \
        if config_file and Path(config_file).is_file() else []
    return _env_library([*layers, ("command line", parse_flags(flags or []))], None)


def _env_library(layers: list[tuple[str, dict]], library: str | None) -> str | None:
    """The env library the layers name (their last [env] library), else ``library``; "" is none."""
    for _, layer in layers:
        entries = layer.get("env")
        if isinstance(entries, dict):
            for key, value in entries.items():
                if key.replace("-", "_") == "library":
                    library = coerce(value, str, "env.library")
    return library or None


def _header_on_env_path(env_name: str) -> Path | None:
    """NAME.h on the env path when NAME is not a built-in env (jaxlab.env.sdk.find_header)."""
    from jaxlab.env import env_types
    from jaxlab.env.sdk import find_header

    return None if env_name in env_types() else find_header(env_name)


def env_kind(env_name: str, library: str | None):
    """The env type ``env_name`` of ``library`` (jaxlab.env.registry), as a ConfigError when it
    cannot be had (an unknown env, a missing or unusable library, a header that does not compile).
    A Python env (gymnasium:ID, pettingzoo:MODULE) is checked without the C registry and has no params."""
    from jaxlab.env import env_type, python_envs
    from jaxlab.env.library import LibraryError
    from jaxlab.env.sdk import BuildError

    if python_envs.is_python_env(env_name):
        if library:
            raise ConfigError(f"env.library={library!r} names a C env library; {env_name!r} is a Python env "
                              "and takes none: remove env.library")
        try:
            return python_envs.python_env_type(env_name)
        except (ValueError, ImportError) as err:
            raise ConfigError(str(err)) from None
    try:
        return env_type(env_name, library)
    except (ValueError, LibraryError, BuildError) as err:
        raise ConfigError(str(err)) from None


def repeated_flags(flags: list[str]) -> list[str]:
    """One line per config flag that ``flags`` give more than once with different values: "--train.seed
    given twice (1, then 2); the last, 2, is used". The last one wins (parse_flags); a script that
    appends its own flags after the user's relies on it."""
    seen: dict[str, list[str]] = {}
    try:
        pairs = _flag_pairs(flags)
    except ConfigError:
        return []  # parse_flags reports it
    for name, value in pairs:
        seen.setdefault(name, []).append(value)
    def meaning(value: str):  # 1e6 and 1_000_000, 1e-3 and 0.001, True and true are one value
        try:
            return float(value.replace("_", ""))
        except ValueError:
            return value.strip().lower()

    lines = []
    for name, values in seen.items():
        if len({meaning(v) for v in values}) > 1:
            count = {2: "twice"}.get(len(values), f"{len(values)} times")
            lines.append(f"--{name} given {count} ({', then '.join(values)}); the last, {values[-1]}, is used")
    return lines


def _flag_without_section(flag: str, after: str) -> ConfigError:
    """The error for ``flag``, an argument that is no --section.key flag (``after``: the argument after it, "" for
    none): the key it means, when some section has it (--seed: --train.seed), with the value the user gave
    (--norm-adv False: --train.norm-adv False), or for a boolean given none, true (--wandb: --log.wandb true);
    a boolean negated as tyro's flags (CleanRL's) are, false (--no-anneal-lr: --train.anneal-lr false)."""
    name, eq, given = flag[2:].partition("=")
    elsewhere = _key_elsewhere(name.replace("-", "_")) if flag.startswith("--") else None
    negated = _negated_boolean(name) if flag.startswith("--") and not eq and not elsewhere else None
    if negated:
        return ConfigError(f"unexpected argument {flag!r}; did you mean {flag_of(negated)} false? config flags "
                           "look like --section.key value")
    if not elsewhere and flag.startswith("--") and name[:3] in ("no-", "no_") and cleanrl_hint(name[3:]):
        name = name[3:]  # --no-clip-vloss: what clip_vloss is here
    if not elsewhere and flag.startswith("--") and cleanrl_hint(name):
        return ConfigError(f"unexpected argument {flag!r}; {cleanrl_hint(name)}; config flags look like "
                           "--section.key value")
    if not elsewhere:
        return ConfigError(f"unexpected argument {flag!r}; config flags look like --train.seed 1")
    if not eq and not after.startswith("--"):
        given = after
    refused = _refused_value(elsewhere, given) if given else None
    if refused:  # the hint with that value would be refused in turn: the key, and a value it takes
        return ConfigError(f"unexpected argument {flag!r}; it is {flag_of(elsewhere)}, but {refused}")
    value = f" {given}" if given else " true" if _is_bool(_schema_field(elsewhere)) else ""
    return ConfigError(f"unexpected argument {flag!r}; did you mean {flag_of(elsewhere)}{value}? config flags "
                       "look like --section.key value")


def _refused_value(key: str, value: str) -> str | None:
    """Why config key ``key`` ("section.name") refuses the flag value ``value`` (None 'is not a number; write e.g.
    --train.target-kl 0.0 (the default)'), or None when it takes it (its range is checked later, on its own)."""
    field = _schema_field(key)
    if field is None:
        return None
    section, _, name = key.partition(".")
    try:
        coerce_key(section, name, value, _type(field.type))
    except ConfigError as err:
        return str(err)
    return None


def is_a_number(text: str) -> bool:
    """Whether ``text`` is written as a number (64, -1, 3e-4, 1_000): a value, never an ENV or a flag."""
    return re.fullmatch(r"[+-]?\d[\d_]*(\.\d*)?(e[+-]?\d+)?", text.lower()) is not None


def _values_after_a_flag(name: str, value: str, more: list[str]) -> ConfigError:
    """The error for the numbers ``more`` given after ``--name value`` (argparse's nargs habit): a list key takes
    them as one value, joined by commas; any other key takes one."""
    field = _schema_field(name.replace("-", "_"))
    if field is not None and field.type in (tuple[int, ...], "tuple[int, ...]"):
        fix = f"a list is one value: --{name} {','.join([value, *more])} (or quoted: \"{' '.join([value, *more])}\")"
    else:
        fix = f"give one: --{name} {value}"
    return ConfigError(f"unexpected argument {more[0]!r} after --{name} {value}: a config flag takes one value; {fix}")


def _negated_boolean(name: str) -> str | None:
    """The boolean config key ("section.key") that flag name ``name`` negates as tyro writes false (no-anneal-lr:
    train.anneal_lr, which takes booleans too), or None."""
    if name[:3] not in ("no-", "no_"):
        return None
    key = _key_elsewhere(name[3:].replace("-", "_"))
    return key if key and (_is_bool(_schema_field(key)) or key in SPECIAL_KEYS) else None


def _flag_pairs(flags: list[str]) -> list[tuple[str, str]]:
    """(section.key with dashes, value) of each config flag in order; ConfigError for a malformed one."""
    pairs = []
    i = 0
    while i < len(flags):
        flag = flags[i]
        if pairs and is_a_number(flag):  # --policy.mlp-layers 64 64, argparse's habit
            raise _values_after_a_flag(*pairs[-1], list(itertools.takewhile(is_a_number, flags[i:])))
        if not flag.startswith("--") or "." not in flag.partition("=")[0]:  # --num-envs=8.5: no section
            raise _flag_without_section(flag, flags[i + 1] if i + 1 < len(flags) else "")
        name, eq, value = flag[2:].partition("=")
        follows_a_value = i + 1 < len(flags) and not flags[i + 1].startswith("--")
        if eq and not value and follows_a_value:  # --train.learning-rate= 1e-3: the shell split them
            raise ConfigError(f"flag {flag} has a space after '=', which split it from its value {flags[i + 1]!r}; "
                              f"write --{name}={flags[i + 1]} or --{name} {flags[i + 1]}")
        if not eq:
            if not follows_a_value:  # not a value: the next flag
                raise ConfigError(_needs_a_value(flag, name))
            value = flags[i + 1]
            i += 1
        if not value.strip() and not _takes_empty(name.replace("-", "_")):
            raise ConfigError(_empty_value(flag, name))
        pairs.append((name.replace("_", "-"), value))
        i += 1
    return pairs


def _schema_field(key: str) -> dataclasses.Field | None:
    """The schema's field of config key ``key`` ("section.name"), or None when there is none."""
    section, _, name = key.partition(".")
    return next((f for f in fields(SECTIONS[section]) if f.name == name), None) if section in SECTIONS else None


def _is_bool(field: dataclasses.Field | None) -> bool:
    return field is not None and field.type in (bool, "bool")


def _takes_empty(key: str) -> bool:
    """Whether config key ``key`` ("section.name") means something by an empty value: a string (none) or a
    list (no items); an env parameter, a number, a boolean or auto does not. An unknown key does, here: its
    own error comes later."""
    section, _, name = key.partition(".")
    if section == "env":
        return name in ENV_KEYS
    field = _schema_field(key)
    return field is None or field.type in (str, "str", "tuple[int, ...]")


def _empty_value(flag: str, name: str) -> str:
    """The error for a flag whose value is empty (--train.learning-rate= or --train.learning-rate ""), with
    an example of the key's type."""
    field = _schema_field(name.replace("-", "_"))
    flag_name = f"--{name}"
    if _is_bool(field):
        return f"flag {flag} has an empty value; write {flag_name}=true or {flag_name}=false"
    if field is None:  # an env parameter
        return f"flag {flag} has an empty value; give it a number, e.g. {flag_name}=N"
    return f"flag {flag} has an empty value; give it one, e.g. {flag_name}={flag_value(field.default)} (the default)"


def _needs_a_value(flag: str, name: str) -> str:
    """The error for a flag given without a value, with an example of the key's type: a boolean flag
    alone is not read as true (write --policy.lstm true)."""
    field = _schema_field(name.replace("-", "_"))
    if _is_bool(field):
        return f"flag {flag} needs a value: {flag} true or {flag} false (a flag alone is not read as true)"
    default = flag_value(field.default) if field is not None else ""
    return f"flag {flag} needs a value" + (f", e.g. {flag} {default} (the default)" if default != "" else "")


def parse_flags(flags: list[str]) -> dict:
    """``--section.key value`` / ``--section.key=value`` pairs as a layer of strings (the last of a key
    given twice wins)."""
    layer: dict[str, dict] = {}
    for name, value in _flag_pairs(flags):
        section, _, key = name.partition(".")
        layer.setdefault(section.replace("-", "_"), {})[key.replace("-", "_")] = value
    return layer


def read_preset(name: str) -> tuple[dict, dict]:
    """(the [preset] table: description, platform, ...; the config layer) of configs/presets/NAME.toml."""
    path = configs_dir() / "presets" / f"{name}.toml"
    if not path.is_file():
        known = preset_names()
        close = close_names(name, ["auto", *known])  # in any case: --preset H100 means h100
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ConfigError(f"unknown preset {name!r}; {hint}presets: auto, {', '.join(known)} (see `jaxlab presets`)")
    layer = read_toml(path)
    return layer.pop("preset", {}), layer


def preset_list(preset: str | None) -> list[str]:
    """The preset names of a --preset value: "h100,heavy" -> ["h100", "heavy"]; None or "none" -> []."""
    if preset is None or preset == "none":
        return []
    return [name.strip() for name in preset.split(",") if name.strip()]


def preset_names() -> list[str]:
    return sorted(p.stem for p in (configs_dir() / "presets").glob("*.toml"))


def load_config(env_name: str, config_file: str | Path | None = None, flags: list[str] | None = None,
                extra_layers: list[tuple[str, dict]] | None = None,
                preset: str | None = None, file_choices: dict | None = None) -> tuple[Config, dict]:
    """Resolves the layers for ``env_name``; returns (config, {"section.key": layer that set it}).
    ``env_name`` is a built-in env's name, an env of the library the layers name (``--env.library``),
    the path of an env header (path/to/NAME.h: its env, the header as env.library), or a Python env
    (gymnasium:ID, pettingzoo:MODULE: no env parameters; gymnasium:CartPole-v1 and Pendulum-v1 take the
    defaults of the built-in C env that steps like them, configs/envs/cartpole.toml and pendulum.toml).
    ``preset`` is a preset's name, or several joined by commas (a card preset and workload presets,
    layered in that order: "h100,heavy"; ``auto`` is resolved by jaxlab.presets before this), or None
    for none. ``file_choices``, when given, is filled with {"section.key": the user's file} for each key
    outside [env] that the user's ``config_file`` (not the env's own defaults: configs/envs/, the NAME.toml
    beside a header) sets, and no later layer does, to another value than the layers under it give
    (chosen_in_files)."""
    from jaxlab.env.python_envs import C_TWINS, is_python_env

    header = None
    if env_name.endswith(".h"):
        from jaxlab.env.sdk import BuildError, header_env

        header = str(Path(env_name).expanduser().absolute())
        try:
            env_name = header_env(header)
        except BuildError as err:
            raise ConfigError(str(err)) from None
    base = configs_dir()
    layers = [("configs/default.toml", read_toml(base / "default.toml"))]
    defaults = C_TWINS.get(env_name) if is_python_env(env_name) else env_name  # Python env: its C twin's
    env_file = base / "envs" / f"{defaults}.toml"
    if header is None and defaults is not None and env_file.is_file():
        layers.append((f"configs/envs/{defaults}.toml", read_toml(env_file)))
    if header is not None:  # a header's own defaults sit beside it: path/to/NAME.toml
        layers.append(("header", {"env": {"library": header}}))
        layers += header_toml_layers(header, env_name)
    env_defaults_end = len(layers)  # the env's own layers end here: a header named by a file or a flag adds its own
    preset_agents = None  # (agents, the preset's label): a card preset sizes the agents, not the envs
    for name in preset_list(preset):  # "h100,heavy": each preset's layer in order
        info, layer = read_preset(name)
        layers.append((f"configs/presets/{name}.toml", layer))
        if "agents" in info:
            preset_agents = (info["agents"], f"configs/presets/{name}.toml")
    layers += list(extra_layers or [])
    file_preset = "none"  # the --config file's preset line: not layered (presets come from --preset alone)
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            what = "is a folder, not a TOML file" if path.is_dir() else "no such file"
            raise ConfigError(f"--config {path}: {what}; give a TOML file such as a run dir's config.toml")
        layer = read_config_file(path)
        file_env = layer.pop("env_name", env_name)
        file_preset = layer.pop("preset", "none")
        preset = preset if preset is not None else file_preset
        if file_env != env_name:
            raise ConfigError(f"--config {path} is a config for env {file_env!r}, not {env_name!r}; "
                              f"run `jaxlab train {file_env} --config {path}` or remove its env_name line")
        layers.append((str(path), layer))
    layers.append(("command line", parse_flags(flags or [])))
    library = _env_library(layers, None)
    if library is None and header is None:  # not a built-in env: NAME.h on the env path, if any
        found = _header_on_env_path(env_name)
        if found is not None:
            layers[1:1] = [("env path", {"env": {"library": str(found)}}), *header_toml_layers(found, env_name)]
            library = str(found)
    elif header is None and library is not None:  # --env.library or a --config file names it: a header's NAME.toml
        layers[env_defaults_end:env_defaults_end] = header_toml_layers(library, env_name)
    kind = env_kind(env_name, library)
    env_params = {p.name: p for p in kind.params}
    values: dict[str, dict] = {"env": {}, **{s: {} for s in SECTIONS}}
    sources: dict[str, str] = {}
    set_after_preset = set()  # of vec.num_envs and train.minibatch_size: set by a layer after the card preset
    for label, layer in layers:
        apply_layer(values, layer, label, sources, env_params, env_name)
        if preset_agents is not None and label == preset_agents[1]:
            set_after_preset.clear()
            continue
        for section, key in (("vec", "num_envs"), ("train", "minibatch_size")):
            if any(k.replace("-", "_") == key for k in layer.get(section, {})):
                set_after_preset.add(key)
    config = build_config(env_name, values, env_params, preset or "none")
    check_env_ranges(config, env_params, sources)
    if file_choices is not None:
        # --config alone: a header's NAME.toml, like configs/envs/NAME.toml, holds the env's defaults, also for
        # settings a user may turn on (hidden_size = 64 beside lstm = false sizes the LSTM of --policy.lstm true)
        users = {str(Path(config_file))} if config_file is not None else set()
        chosen = chosen_in_files(layers, users)
        if config_file is not None:  # nor a key at the value of a preset the file's preset line records
            recorded = chosen_in_files(with_recorded_presets(layers, str(Path(config_file)), file_preset), users)
            chosen = {key: label for key, label in chosen.items() if key in recorded}
        file_choices.update(chosen)
    if preset_agents is not None and "num_envs" not in set_after_preset:
        minibatch = config.train.minibatch_size
        config = with_agents(config, *preset_agents, keep_minibatch="minibatch_size" in set_after_preset)
        sources["vec.num_envs"] = f"{preset_agents[1]} ({preset_agents[0]:,} agents)"
        if config.train.minibatch_size != minibatch:
            sources["train.minibatch_size"] = f"{preset_agents[1]} ({minibatch:,}, made to divide the batch)"
    return config, sources


def chosen_in_files(layers: list[tuple[str, dict]], files: set[str]) -> dict[str, str]:
    """{"section.key": the label of the layer in ``files`` that set it} for the keys outside [env] whose last
    setting in ``layers`` ([(label, layer)], first to last) is one of ``files`` with a value other than the
    layers under it give (the schema default when none does): a run dir's config.toml, which records
    every key, chooses only what differs from the defaults, env files and presets it is layered on."""
    merged: dict[str, Any] = {}  # "section.key": the raw value the layers so far give
    chosen: dict[str, str] = {}
    for label, layer in layers:
        for section, entries in layer.items():
            if section not in SECTIONS or not isinstance(entries, dict):  # [env], or refused by apply_layer
                continue
            for key, value in entries.items():
                name = f"{section}.{key.replace('-', '_')}"
                chosen.pop(name, None)
                if label in files and _differs(name, value, merged.get(name, _UNSET)):
                    chosen[name] = label
                merged[name] = value
    return chosen


def with_recorded_presets(layers: list[tuple[str, dict]], file_label: str, written) -> list[tuple[str, dict]]:
    """``layers`` with the layers of the presets that the --config file's ``preset = "..."`` line names
    (``written``; a run dir's config.toml records its run's: "cpu,heavy") right under the file's layer
    (labelled ``file_label``), for chosen_in_files alone: they are not applied (presets come from --preset
    alone), but a key the file holds at its recorded preset's value is that preset's, not the file's choice
    (nor is one at the value of the layers applied under it). A name that is no preset is left out
    (file_preset_warning names it)."""
    if not isinstance(written, str):  # a preset file's [preset] table
        return layers
    recorded = []
    for name in preset_list(written):
        try:
            recorded.append((f"configs/presets/{name}.toml (recorded by {file_label})", read_preset(name)[1]))
        except ConfigError:
            continue
    at = max(i for i, (label, _) in enumerate(layers) if label == file_label)
    return [*layers[:at], *recorded, *layers[at:]]


_UNSET = object()


def _differs(name: str, value: Any, beneath: Any) -> bool:
    """Whether raw value ``value`` of key ``name`` ("section.key") means another value than ``beneath`` (a
    raw value, or _UNSET: the schema default); a value that cannot be read differs."""
    section, _, key = name.partition(".")
    kind = _type(next(f.type for f in fields(SECTIONS[section]) if f.name == key))
    try:
        ours = coerce_key(section, key, value, kind)
        theirs = getattr(SECTIONS[section](), key) if beneath is _UNSET else coerce_key(section, key, beneath, kind)
    except ConfigError:
        return True
    return ours != theirs


def header_toml_layers(library: str | Path, env_name: str) -> list[tuple[str, dict]]:
    """[(its path, its layer)] for the NAME.toml beside ``library`` when ``library`` is an env header
    (path/to/NAME.h: path/to/NAME.toml, the env's config layer, read_config_file's) and ``env_name`` is the env
    that `jaxlab train path/to/NAME.h` trains (sdk.header_env: its only env, or the one named like the file);
    else [] (an env library, no such file, another env of a header that defines several)."""
    header = Path(library).expanduser().absolute()
    beside = header.with_suffix(".toml")
    if header.suffix != ".h" or not beside.is_file() or header_trained_env(header) != env_name:
        return []
    return [(str(beside), read_config_file(beside))]


def header_trained_env(header: str | Path) -> str | None:
    """The env that `jaxlab train HEADER` trains (sdk.header_env), or None when it names none (no such
    file, no env, several and none named like the file)."""
    from jaxlab.env.sdk import BuildError, header_env

    try:
        return header_env(header)
    except BuildError:
        return None


def check_env_ranges(config: Config, env_params: dict, sources: dict) -> None:
    """ConfigError for an env parameter of ``config`` outside its range, naming the layer that set it (an
    X.toml beside the header, a --config file, a preset; ``sources``: load_config's) unless it was the
    command line, whose flag the value already shows."""
    from jaxlab.env.registry import out_of_range_problem

    for key, value in config.env.items():
        source = sources.get(f"env.{key}", "")
        problem = out_of_range_problem(config.env_name, env_params[key], value,
                                       "" if source == "command line" else source)
        if problem:
            raise ConfigError(problem)


def with_agents(config: Config, agents: int, source: str, keep_minibatch: bool = False) -> Config:
    """``config`` sized for a card preset's ``agents`` (from ``source``): vec.num_envs = agents / the env's
    agents per env, rounded down to whole groups (at least one env per group), and where such a count is
    at least a tenth of that, to one whose batch train.minibatch_size divides, so that a multi-agent env
    gets about as many agents and samples per update as a single-agent one. When none is, the minibatch
    becomes the batch over as many minibatches as the preset's would give, in whole sequences (unless
    ``keep_minibatch``: it was set after the preset, and the config's check names a fix)."""
    from jaxlab.config.memory import env_shape

    if not isinstance(agents, int) or isinstance(agents, bool) or agents < 1:
        raise ConfigError(f"agents = {shown_value(agents)} in the [preset] table of {source} must be a positive "
                          "integer, e.g. agents = 8192")
    per_env = env_shape(config).agents_per_env
    groups, horizon, minibatch = max(1, config.vec.groups), config.train.bptt_horizon, config.train.minibatch_size
    most = max(groups, agents // per_env // groups * groups)
    fitting = [n for n in range(most, max(groups, most // 10) - 1, -groups)
               if minibatch and n * per_env * horizon % minibatch == 0]
    num_envs = fitting[0] if fitting else most
    train = config.train
    if not fitting and not keep_minibatch and minibatch > 0 and horizon > 0:
        sequences = num_envs * per_env
        count = max(1, round(sequences * horizon / minibatch))
        count = next(k for k in range(count, sequences + 1) if sequences % k == 0)
        train = dataclasses.replace(train, minibatch_size=sequences // count * horizon)
    return dataclasses.replace(config, vec=dataclasses.replace(config.vec, num_envs=num_envs), train=train)


def config_from_toml(text: str, library: str | None = None) -> Config:
    """The Config that to_toml wrote (no layers: every value is in the text); ``library`` instead of
    the saved env library when given (the env's source moved since)."""
    try:
        layer = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"a saved config is not valid TOML: {err}") from None
    env_name, preset = layer.pop("env_name"), layer.pop("preset", "none")
    if library:
        layer.setdefault("env", {})["library"] = library
    env_params = {p.name: p for p in env_kind(env_name, _env_library([("saved", layer)], None)).params}
    values: dict[str, dict] = {"env": {}, **{s: {} for s in SECTIONS}}
    apply_layer(values, legacy_defaults(layer), "saved config", {}, env_params, env_name)
    return build_config(env_name, values, env_params, preset)


def checkpoint_config(meta: dict, library: str | None = None, warn=None) -> Config:
    """The config the checkpoint of ``meta`` (checkpoint.read_meta's) was trained with: its saved config
    (config_from_toml, ``library`` as there), with a train.obs_norm auto that meant obs_norm off set to false.
    A checkpoint whose meta has no "obs_norm" (the value it trained with, recorded since) was trained by
    auto_obs_norm_before's rule, which took uint8 observations of one dimension for pixels; ``warn`` gets one
    line when that keeps its obs_norm off where auto now turns it on."""
    from jaxlab.config.memory import auto_obs_norm, auto_obs_norm_before, env_shape

    config = config_from_toml(meta["config"], library=library)
    if config.train.obs_norm != "auto" or "obs_norm" in meta:
        return config
    shape = env_shape(config)
    trained_with = auto_obs_norm_before(shape)
    if trained_with == auto_obs_norm(shape):
        return config
    if warn is not None:
        dims = ", ".join(map(str, shape.obs_shape))
        warn(f"note: this checkpoint of {config.env_name} was trained before train.obs_norm auto normalised "
             f"uint8 observations of one dimension (uint8[{dims}]): it keeps obs_norm off, as it "
             "was trained (divided by 255); a new run normalises them")
    return dataclasses.replace(config, train=dataclasses.replace(config.train, obs_norm=trained_with))


def legacy_defaults(layer: dict) -> dict:
    """A saved config ``layer`` with the keys added since it was written set to the behaviour it was trained
    with (a checkpoint from before them resumes and plays as it was trained): the encoder was one dense
    layer of policy.hidden_size, and observations were not normalised. (Its train.reward_scale is a
    number, which keeps the constant scaling it had.)"""
    policy, train = dict(layer.get("policy", {})), dict(layer.get("train", {}))
    if "mlp_layers" not in policy:
        policy["mlp_layers"] = [policy.get("hidden_size", 128)]
    if "obs_norm" not in train:
        train["obs_norm"] = False
    return {**layer, "policy": policy, "train": train}


def _toml_error_fix(text: str, error: str) -> str:
    """The fix for the TOML ``error`` (tomllib's message, "... (at line L, column C)") in ``text`` when its line
    holds a mistake a Python user makes: a Python True/False/None as a value, an unquoted string, a key given
    twice; "" for any other."""
    at = re.search(r"\(at line (\d+), column \d+\)$", error)
    lines = text.splitlines()
    if not at or int(at[1]) > len(lines):
        return ""
    written = re.fullmatch(r"\s*([\w.\"'-]+)\s*=\s*(.*?)\s*(#.*)?", lines[int(at[1]) - 1])
    if not written:
        return ""
    key, value = written[1], written[2]
    if error.startswith("Cannot overwrite a value"):
        return f"; {key} is given twice in its table: keep one line of it"
    if not error.startswith("Invalid value"):
        return ""
    if value in ("True", "False"):
        return f"; TOML's booleans are lower case: {key} = {value.lower()}"
    if value in ("None", "null", "nil"):
        return f"; TOML has no {value}: leave {key} out to keep its default"
    if re.fullmatch(r"[A-Za-z_][\w.-]*", value):
        return f'; a string needs quotes: {key} = "{value}"'
    return ""


def read_toml(path: Path) -> dict:
    """The TOML file ``path`` as a dict; ConfigError naming the file when it is not UTF-8 TOML or cannot
    be read (with the fix for a Python value such as True or None, or a key given twice: _toml_error_fix)."""
    try:
        text = path.read_text(encoding="utf-8")
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path} is not valid TOML: {err}{_toml_error_fix(text, str(err))}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path} is not UTF-8 text (byte {err.start}: {err.object[err.start:err.start + 1]!r}); "
                          "save it as UTF-8 TOML") from None
    except OSError as err:
        raise ConfigError(f"cannot read {path} ({err.strerror})") from None


def read_config_file(path: Path) -> dict:
    """The layer of a user's config file ``path`` (--config FILE, an env header's NAME.toml): read_toml's,
    with a relative env.library ("envs/walker.h") and a relative policy.module file path
    ("policies/gru.py:GRUPolicy") taken against the file's folder, not the current directory, so that the file
    means the same from wherever it is given. (A flag's relative path stays against the current directory;
    build_config makes either absolute, as a run's config saves it.)"""
    layer = read_toml(path)
    folder = path.absolute().parent
    env, policy = layer.get("env"), layer.get("policy")
    library = env.get("library") if isinstance(env, dict) else None
    if isinstance(library, str) and library and not Path(library).expanduser().is_absolute():  # "": none
        layer = {**layer, "env": {**env, "library": str(folder / library)}}
    module = policy.get("module") if isinstance(policy, dict) else None
    if not isinstance(module, str):  # none, or not a string: coerce names it
        return layer
    file, colon, name = module.partition(":")
    if not file.endswith(".py") or Path(file).expanduser().is_absolute():  # a package's module, or absolute
        return layer
    return {**layer, "policy": {**policy, "module": f"{folder / file}{colon}{name}"}}


def build_config(env_name: str, values: dict, env_params: dict, preset: str = "none") -> Config:
    """Typed Config from merged raw values (strings from flags are parsed here)."""
    sections = {}
    for section, cls in SECTIONS.items():
        types = {f.name: f.type for f in fields(cls)}
        kwargs = {k: coerce_key(section, k, v, _type(types[k])) for k, v in values[section].items()}
        sections[section] = cls(**kwargs)
    env = {}
    for key, value in values["env"].items():
        param = env_params[key]
        value = param.value_of(value)  # a named value ("--env.opponent self") as its number
        try:
            env[key] = coerce(value, int if param.is_int else float, f"env.{key}")
        except ConfigError:
            if not param.names:
                kind = "an integer" if param.is_int else "a number"
                shown = lambda v: f"{int(v):,}" if param.is_int else f"{v:g}"  # noqa: E731
                raise ConfigError(f"env.{key}={shown_value(value)} is not {kind}; write e.g. "
                                  f"--env.{key.replace('_', '-')} {param.default_value:g} (the default; from "
                                  f"{shown(param.low)} to {shown(param.high)})") from None
            raise ConfigError(f"env.{key}={shown_value(value)} is neither an integer nor one of its names: "
                              f"{', '.join(param.names)}; e.g. --env.{key.replace('_', '-')} {param.names[-1]}") from None
    env_keys = {ENV_KEYS[k]: coerce(v, str, f"env.{k}") for k, v in values.get("env_keys", {}).items()}
    if env_keys.get("env_library"):
        env_keys["env_library"] = str(Path(env_keys["env_library"]).expanduser().absolute())
    module = sections["policy"].module
    if module.partition(":")[0].endswith(".py"):  # a file: absolute, so that a checkpoint loads from anywhere
        path, colon, name = module.partition(":")  # no colon: refused by check_policy as the user wrote it
        sections["policy"] = dataclasses.replace(sections["policy"],
                                                 module=f"{Path(path).expanduser().absolute()}{colon}{name}")
    return Config(env_name=env_name, env=env, preset=preset, **env_keys, **sections)


def _type(annotation) -> type | str:
    return {"int": int, "float": float, "bool": bool, "str": str}.get(annotation, annotation)


def as_layer(config: Config) -> dict[str, dict]:
    """The config's values as a layer {section: {key: value}} ([env] first: library and mask_check, then
    the env's parameters), e.g. to layer flags over a saved config or to hand to a logger."""
    env = {key: getattr(config, field_name) for key, field_name in ENV_KEYS.items()}
    return {"env": {**env, **config.env}, **{s: dataclasses.asdict(getattr(config, s)) for s in SECTIONS}}


def with_layer(config: Config, layer: dict, source: str = "override") -> Config:
    """``config`` with a layer {section: {key: value}} on top (values coerced and checked like flags)."""
    env_params = {p.name: p for p in env_kind(config.env_name, config.env_library or None).params}
    values: dict[str, dict] = {"env": {}, **{s: {} for s in SECTIONS}}
    apply_layer(values, as_layer(config), "config", {}, env_params)
    apply_layer(values, layer, source, {}, env_params, config.env_name)
    return build_config(config.env_name, values, env_params, config.preset)


def env_args(config: Config) -> dict:
    """What jaxlab.make needs besides the name, num_envs, seed and threads: the library, the mask
    check and the env's parameters."""
    return {"library": config.env_library or None, "mask_check": config.env_mask_check, **config.env}


def to_toml(config: Config) -> str:
    """The resolved config as TOML that --config reads back to the same Config (preset is a record of
    the preset that was applied; --config does not re-apply it)."""
    lines = [f'env_name = "{config.env_name}"', f'preset = "{config.preset}"']
    for section, table in as_layer(config).items():
        lines += ["", f"[{section}]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
    return "\n".join(lines) + "\n"

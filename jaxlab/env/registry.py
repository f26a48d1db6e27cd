"""What an env library's C registry holds: env names, descriptions, parameters, statistic names and
options, read from C once per library. Also turns user keyword parameters into the C parameter
vector, with clear errors, and tells the spaces of an env type for given parameters without
creating envs (``spaces_of``).

``library`` everywhere: None for jaxlab's built-in envs, the path of an env library (.so, built with
`jaxlab build-env`), or the path of an env header (.h), which is built on first use into a cache
(jaxlab.env.sdk.cached_library)."""

from __future__ import annotations

import ctypes
import difflib
import re
import functools
import math
from dataclasses import dataclass

from pathlib import Path

from jaxlab.env import library as library_module
from jaxlab.env.library import LibraryError, load
from jaxlab.env.spaces import EnvSpaces, describe_handle, handle_observation


@dataclass(frozen=True)
class Param:
    """One env parameter as declared in its C header."""

    name: str
    default: float
    low: float
    high: float
    is_int: bool
    help: str

    @property
    def default_value(self) -> int | float:
        """The default as the Python type users pass (int or float)."""
        return int(self.default) if self.is_int else self.default

    @property
    def names(self) -> tuple[str, ...]:
        """Names of an integer parameter's values, when its help begins by naming each value of its
        range in order ("0 random, 1 greedy, 2 self ..."): then the names are accepted for the numbers
        (``opponent="self"``, ``--env.opponent self``). Empty otherwise."""
        if not self.is_int or self.high - self.low > 63:
            return ()
        low, high = int(self.low), int(self.high)
        found = re.match(r"\s*" + r",\s*".join(rf"{v}\s+([A-Za-z_][A-Za-z0-9_-]*)" for v in range(low, high + 1)),
                         self.help)
        return tuple(found.groups()) if found and high > low else ()

    def value_of(self, value):
        """``value``, or the number a name of ``names`` stands for, in any case when that names one alone
        ("Greedy": greedy); a str that is no name is returned as it is, for the caller's type error."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text in self.names:
            return int(self.low) + self.names.index(text)
        folded = [i for i, name in enumerate(self.names) if name.lower() == text.lower()]
        return int(self.low) + folded[0] if len(folded) == 1 else value


@dataclass(frozen=True)
class EnvType:
    """One registered env type of a library (``library``: the .so file, None for the built-in one)."""

    index: int
    name: str
    description: str
    params: tuple[Param, ...]
    log_names: tuple[str, ...]
    flags: int = 0
    library: str | None = None

    def has(self, option: str) -> bool:
        """Whether its CENV_ENV names ``option``: mask, reset_agent, agents_wait, render, set_state,
        pixels."""
        return bool(self.flags & library_module.constant("ENV_" + option.upper()))


def library_file(library: str | Path | None) -> str | None:
    """The env library file that ``library`` names (see the module docstring), absolute; None for the
    built-in one. A header is built into the cache first (when it changed)."""
    if library is None or str(library) == "":
        return None
    path = Path(library).expanduser().absolute()
    if path.suffix == ".h":
        from jaxlab.env.sdk import cached_library

        return str(cached_library(path))
    return str(path)


def env_types(library: str | Path | None = None) -> dict[str, EnvType]:
    """Every env type of ``library`` (default: the built-in envs), by name, in registry order.
    LibraryError for a library that cannot be used, or one whose env has a built-in env's name (naming the
    header that ``library`` names, if it is one, rather than the library built from it into the cache)."""
    file = library_file(library)
    types = _env_types(file)
    if file is not None:
        header = str(Path(library).expanduser().absolute()) if Path(library).suffix == ".h" else None
        refuse_built_in_names(types, f"env header {header}" if header else f"env library {file}",
                              "" if header else " and rebuild")
    return types


def refuse_built_in_names(names, source: str, fix: str = "") -> None:
    """LibraryError when one of the env ``names`` that ``source`` ("env header PATH", "env library PATH")
    defines is a built-in env's, whose name would hide it; ``fix``: what to do after renaming it."""
    clash = sorted(set(names) & set(_env_types(None)))
    if clash:
        raise LibraryError(f"{source} defines {', '.join(map(repr, clash))}, the name of a built-in env; rename it "
                           f"(the first argument of CENV_ENV){fix}")


@functools.lru_cache(maxsize=None)
def _env_types(file: str | None) -> dict[str, EnvType]:
    lib = load(file)
    types = {}
    for t in range(lib.cenv_num_env_types()):
        params = []
        for i in range(lib.cenv_num_params(t)):
            name, help_ = ctypes.c_char_p(), ctypes.c_char_p()
            default, low, high = ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
            is_int = ctypes.c_int()
            lib.cenv_param_info(t, i, ctypes.byref(name), ctypes.byref(help_), ctypes.byref(default),
                                ctypes.byref(low), ctypes.byref(high), ctypes.byref(is_int))
            params.append(Param(name.value.decode(), default.value, low.value, high.value,
                                bool(is_int.value), help_.value.decode()))
        log_names = tuple(lib.cenv_log_field_name(t, i).decode() for i in range(lib.cenv_num_log_fields(t)))
        name = lib.cenv_env_name(t).decode()
        problem = param_table_problem(name, params) or log_names_problem(name, log_names)
        if problem:
            raise LibraryError(problem)
        types[name] = EnvType(t, name, lib.cenv_env_description(t).decode(), tuple(params), log_names,
                              int(lib.cenv_env_flags(t)), file)
    return types


#: Names no env parameter may have: jaxlab.make's own arguments, and the [env] keys that are not
#: parameters (config.schema.ENV_KEYS): a parameter so named could never be set.
#: The range of a C int: an integer parameter's value must lie in it, whatever its header's bounds (an env
#: reads it with `(int)params[i]`, undefined for a double beyond it).
INT_MIN, INT_MAX = -2**31, 2**31 - 1
RESERVED_PARAM_NAMES = ("name", "num_envs", "seed", "num_threads", "library", "mask_check")
_PARAM_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def param_table_problem(env: str, params: list[Param]) -> str | None:
    """What is wrong with the parameter table (``<env>_params[]`` of its header) of env ``env``, as an
    error message with the fix, or None: a name that is no lower-case identifier (no --env.NAME flag
    could set it), reserved or given twice, min > max or NaN, a default outside [min, max], a
    non-integer default or bound of an integer parameter."""
    where = f"env '{env}' parameter"
    fix = f"fix {env}_params[] in its header ({{name, default, min, max, is_int, help}})"
    seen = set()
    for p in params:
        if not _PARAM_NAME.match(p.name):
            return f"{where} {p.name!r} is not a lower-case identifier (letters, digits, _): {fix}"
        if p.name in RESERVED_PARAM_NAMES:
            return (f"{where} {p.name!r} has a name jaxlab keeps for itself ({', '.join(RESERVED_PARAM_NAMES)}): "
                    f"rename it in {env}_params[]")
        if p.name in seen:
            return f"{where} {p.name!r} is declared twice: {fix}"
        seen.add(p.name)
        if not p.low <= p.high:
            return f"{where} {p.name} has min {p.low:g} > max {p.high:g}: {fix}"
        if not p.low <= p.default <= p.high:
            return f"{where} {p.name} has default {p.default:g} outside its range [{p.low:g}, {p.high:g}]: {fix}"
        if p.is_int and any(v != int(v) for v in (p.default, p.low, p.high) if abs(v) != float("inf")):
            return (f"{where} {p.name} is an integer (is_int 1) with default {p.default:g}, min {p.low:g}, "
                    f"max {p.high:g}: all three must be whole numbers; {fix}")
    return None


#: The keys a training record or an evaluation result holds besides the env's statistics (the trainer's
#: record_names, the first record's extras, device memory, jaxlab eval's): a statistic so named would
#: overwrite one of them or be overwritten (tests/test_sdk.py checks that record_names stays inside).
RESERVED_LOG_NAMES = (
    "global_step", "update", "wall_time", "sps", "compiles", "policy_loss", "value_loss", "entropy", "approx_kl",
    "old_approx_kl", "clip_fraction", "grad_norm", "learning_rate", "explained_variance", "epochs_run", "return_std",
    "episodes", "time_env", "time_policy", "time_copy", "time_learn", "time_other", "compile_cache",
    "launch_to_first_update_s", "device_memory_gib", "device_memory_peak_gib", "device_memory_limit_gib", "returns",
    "lengths", "stat_episodes", "agents_per_env")


def log_names_problem(env: str, log_names: tuple[str, ...]) -> str | None:
    """What is wrong with the statistic names (``<env>_log_names[]`` of its header) of env ``env``, as an
    error message with the fix, or None: one that is no identifier, given twice (their values would be
    merged into one), or one of RESERVED_LOG_NAMES."""
    fix = f"rename it in {env}_log_names[] in its header (one name per field of its Log struct)"
    seen = set()
    for name in log_names:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            return f"env '{env}' statistic {name!r} is not an identifier (letters, digits, _): {fix}"
        if name in RESERVED_LOG_NAMES:
            return f"env '{env}' statistic {name!r} has the name of one of jaxlab's own metrics: {fix}"
        if name in seen:
            return f"env '{env}' statistic {name!r} is named twice: {fix}"
        seen.add(name)
    return None


def env_type(name: str, library: str | Path | None = None) -> EnvType:
    """The env type called ``name`` in ``library``; without a library, a built-in env or else the env of
    NAME.h on the env path (jaxlab.env.sdk.find_header: $JAXLAB_ENV_PATH, jaxlab's example envs).
    ValueError listing the known ones otherwise."""
    if library is None and name not in env_types():
        from jaxlab.env.sdk import find_header

        library = find_header(name)
    types = env_types(library)
    if name not in types:
        known = list(types)
        if library is not None and Path(library).suffix == ".h" and Path(library).stem == name:
            raise ValueError(header_named_otherwise_problem(name, Path(library), known))
        if library is None:  # the headers on the env path are names too (drone, cards, the user's own)
            from jaxlab.env.sdk import header_names, misnamed_header_problem, misnamed_headers

            misnamed = [h for h in misnamed_headers() if h.stem == name]
            if misnamed:  # NAME.h is there, under a name find_header does not look up
                raise ValueError(f"unknown env {name!r}: {misnamed_header_problem(misnamed[0])}")
            known += [h for h in header_names() if h not in types]
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        if library is None:
            from jaxlab.env.sdk import env_path_problems

            hint += "".join(f" Note: {problem}." for problem in env_path_problems())
            hint += (" A Gymnasium or PettingZoo env is named with its prefix: gymnasium:ID (gymnasium:MODULE:ID "
                     "for an id your module registers) or pettingzoo:MODULE.")
        where = "known envs" if library is None else f"envs in {library}"
        raise ValueError(f"unknown env {name!r}; {where}: {', '.join(known)}.{hint}")
    return types[name]


def header_named_otherwise_problem(name: str, header: Path, defined: list[str]) -> str:
    """Why env ``name`` is not in ``header`` (NAME.h, e.g. found on the env path for it), whose CENV_ENV
    names the envs ``defined``, and the fixes."""
    env = defined[0] if defined else "NAME"
    return (f"unknown env {name!r}: {header} defines {', '.join(map(repr, defined))}, not {name!r} (NAME.h is "
            f"looked up for env NAME); rename the header to {env}.h, or the env to {name} (the first argument of "
            f"CENV_ENV), or give its path as ENV (`jaxlab train {header}`)")


def resolve_params(kind: EnvType, params: dict) -> list[float]:
    """The C parameter vector (declared order, defaults filled) for keyword ``params``.

    Raises TypeError for an unknown name or a value of the wrong type, ValueError for one out of range.
    """
    by_name = {p.name: p for p in kind.params}
    valid = ", ".join(f"{p.name} (default {p.default_value:g})" for p in kind.params)
    for key in params:
        if key not in by_name:
            close = difflib.get_close_matches(key, by_name, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise TypeError(f"env '{kind.name}' has no parameter {key!r}; valid parameters: {valid}.{hint}")
    values = []
    for p in kind.params:
        value = p.value_of(params.get(p.name, p.default_value))
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if hasattr(value, "item") and not isinstance(value, bool):  # numpy scalars
            value = value.item()
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not is_number or (p.is_int and not isinstance(value, int)):
            want = "an integer" if p.is_int else "a number"
            if p.names:
                want += f" or one of {', '.join(p.names)}"
            raise TypeError(f"env '{kind.name}' parameter {p.name}={value!r} ({type(value).__name__}) "
                            f"must be {want}, e.g. {p.name}={p.default_value:g}")
        problem = out_of_range_problem(kind.name, p, value)
        if problem:
            raise ValueError(problem)
        values.append(float(value))
    return values


def with_param_values(message: str, kind: EnvType, values: list[float]) -> str:
    """The C library's ``message`` with "the parameters given" (its words for a spaces function that
    declared something impossible) followed by the parameter ``values`` (resolve_params' vector), so
    the user sees which value led there: "(n=0, speed=0.1)"."""
    given = ", ".join(f"{p.name}={int(v) if p.is_int else v:g}" for p, v in zip(kind.params, values))
    return message.replace("with the parameters given", f"with the parameters given ({given})", 1)


def out_of_range_problem(env: str, param: Param, value: int | float, source: str = "") -> str | None:
    """Why ``value`` of parameter ``param`` of env ``env`` cannot be taken (outside the range its header
    declares, or, for an integer parameter, outside a C int's range: the env converts it with `(int)`, which
    is undefined beyond it and gave INT_MIN here), naming ``source`` (the file that set it) when given; None
    when it is in range."""
    low, high = param.low, param.high
    if param.is_int:
        low, high = max(low, INT_MIN), min(high, INT_MAX)
    if low <= value <= high:
        return None
    where, fix = (f" in {source}", "; fix it there") if source else ("", "")
    as_int = "; an integer parameter is a C int" if (low, high) != (param.low, param.high) else ""
    low_text = f"{low:g}" if low == param.low else str(low)  # a C int's bound in full, not 2.14748e+09
    high_text = f"{high:g}" if high == param.high else str(high)
    return (f"env '{env}' parameter {param.name}={value}{where} is out of range: it must be in "
            f"[{low_text}, {high_text}] (default {param.default_value:g}{as_int}){fix}")


def name_and_library(name: str, library: str | Path | None) -> tuple[str, str | Path | None]:
    """``name`` and ``library`` as env_type takes them: the path of an env header ("~/my_envs/drone.h",
    no library given) becomes its env's name and the header as library; anything else is unchanged."""
    if library is not None or not str(name).endswith(".h"):
        return name, library
    from jaxlab.env.sdk import header_env

    header = Path(name).expanduser()  # "~/my_envs/drone.h", as on the command line
    return header_env(header), str(header)


def spaces_of(name: str, library: str | Path | None = None, **params) -> EnvSpaces:
    """The spaces of env ``name`` of ``library`` (or of the header whose path ``name`` is, as jaxlab.make
    takes it) with env parameters ``params`` (defaults filled),
    without creating envs or threads: agents_per_env, observation_space, action_space, has_mask,
    mask_width (see EnvSpaces). Raises like ``jaxlab.make``: ValueError for an unknown env or a value
    out of range, TypeError for an unknown parameter or one of the wrong type."""
    return _described(name, library, params, describe_handle)


def observation_bytes(name: str, library: str | Path | None = None, **params) -> int:
    """Bytes of one env's observation rows (agents_per_env x the observation's size x its item size) of env
    ``name`` with ``params``, as spaces_of reads them but without building the spaces (their bounds are
    two tuples as long as the observation); raises as spaces_of."""
    def read(lib, handle, kind) -> int:
        shape, dtype = handle_observation(lib, handle)
        return int(lib.cenv_agents_per_env(handle)) * math.prod(shape) * dtype.itemsize

    return _described(name, library, params, read)


def _described(name: str, library: str | Path | None, params: dict, read):
    """``read(lib, handle, kind)`` of a describe handle (cenv_describe: no env, no threads) of env ``name``
    with ``params`` (see spaces_of), closed after it."""
    name, library = name_and_library(name, library)
    kind = env_type(name, library)
    values = resolve_params(kind, params)
    lib = load(kind.library)
    c_params = (ctypes.c_double * max(1, len(values)))(*values)
    err = ctypes.create_string_buffer(library_module.constant("ERROR_LEN"))
    handle = lib.cenv_describe(kind.index, c_params, len(values), err, len(err))
    if not handle:
        raise ValueError(f"cannot describe env '{name}': {with_param_values(err.value.decode(), kind, values)}")
    try:
        return read(lib, handle, kind)
    finally:
        lib.cenv_close(handle)

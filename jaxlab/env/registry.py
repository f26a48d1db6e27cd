"""What the C registry holds: env names, descriptions, parameters and statistic names, read from C
once. Also turns user keyword parameters into the C parameter vector, with clear errors, and tells
the spaces of an env type for given parameters without creating envs (``spaces_of``)."""

from __future__ import annotations

import ctypes
import difflib
import functools
from dataclasses import dataclass

from jaxlab.env import library
from jaxlab.env.library import load
from jaxlab.env.spaces import EnvSpaces, describe_handle


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


@dataclass(frozen=True)
class EnvType:
    """One registered env type."""

    index: int
    name: str
    description: str
    params: tuple[Param, ...]
    log_names: tuple[str, ...]


@functools.lru_cache(maxsize=None)
def env_types() -> dict[str, EnvType]:
    """Every registered env type, by name, in registry order."""
    lib = load()
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
        types[name] = EnvType(t, name, lib.cenv_env_description(t).decode(), tuple(params), log_names)
    return types


def env_type(name: str) -> EnvType:
    """The env type called ``name``; ValueError listing the known ones otherwise."""
    types = env_types()
    if name not in types:
        close = difflib.get_close_matches(str(name), types, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"unknown env {name!r}; known envs: {', '.join(types)}.{hint}")
    return types[name]


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
        value = params.get(p.name, p.default_value)
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if hasattr(value, "item") and not isinstance(value, bool):  # numpy scalars
            value = value.item()
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not is_number or (p.is_int and not isinstance(value, int)):
            want = "an integer" if p.is_int else "a number"
            raise TypeError(f"env '{kind.name}' parameter {p.name}={value!r} ({type(value).__name__}) "
                            f"must be {want}, e.g. {p.name}={p.default_value:g}")
        if not p.low <= value <= p.high:
            raise ValueError(f"env '{kind.name}' parameter {p.name}={value} is out of range: it must be "
                             f"in [{p.low:g}, {p.high:g}] (default {p.default_value:g})")
        values.append(float(value))
    return values


def spaces_of(name: str, **params) -> EnvSpaces:
    """The spaces of env ``name`` with env parameters ``params`` (defaults filled), without creating
    envs or threads: agents_per_env, observation_space, action_space, has_mask, mask_width (see
    EnvSpaces). Raises like ``jaxlab.make``: ValueError for an unknown env or a value out of range,
    TypeError for an unknown parameter or one of the wrong type."""
    kind = env_type(name)
    values = resolve_params(kind, params)
    lib = load()
    c_params = (ctypes.c_double * max(1, len(values)))(*values)
    err = ctypes.create_string_buffer(library.constant("ERROR_LEN"))
    handle = lib.cenv_describe(kind.index, c_params, len(values), err, len(err))
    if not handle:
        raise ValueError(f"cannot describe env '{name}': {err.value.decode()}")
    try:
        return describe_handle(handle)
    finally:
        lib.cenv_close(handle)

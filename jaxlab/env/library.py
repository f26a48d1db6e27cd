"""Loads env libraries with ctypes and declares every exported function's signature. The only module
that touches ctypes' loader; everything else goes through ``load()`` and ``constants()``.

The built-in library (``load()``, path None) is found at $JAXLAB_CENV_LIB if set (the tests point it
at a sanitizer build), else next to the package as ``jaxlab/_cenv*.so`` (built by ``pip install``).
``load(path)`` loads a user's library (built with `jaxlab build-env`) that exports the same API;
it is refused with LibraryError when it is missing, exports another ABI version or lacks a function.

One source of truth: every number the C API defines (error codes, dtype and action-kind codes, limits
such as MAX_CHUNKS) is read from the library's constant table by ``constants()``, never typed here.
The only number typed here is ``ABI_VERSION``, the C ABI this Python code was written for, which must
be checked before anything else is trusted. ``SIGNATURES`` mirrors the CENV_EXPORT prototypes of
cenv/api.h; tests/test_build.py parses that header and fails on any difference.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import os
import re
from pathlib import Path

ABI_VERSION = 5

c_int, c_int64, c_uint64, c_double = ctypes.c_int, ctypes.c_int64, ctypes.c_uint64, ctypes.c_double
c_float, c_uint8, c_int32 = ctypes.c_float, ctypes.c_uint8, ctypes.c_int32
c_char_p, c_void_p = ctypes.c_char_p, ctypes.c_void_p
P = ctypes.POINTER

# name: (restype, argtypes), as cenv/api.h declares them (const dropped; cenv_vec * is c_void_p)
SIGNATURES = {
    "cenv_abi_version": (c_int, []),
    "cenv_num_constants": (c_int, []),
    "cenv_constant_name": (c_char_p, [c_int]),
    "cenv_constant_value": (c_int64, [c_int]),
    "cenv_num_env_types": (c_int, []),
    "cenv_env_name": (c_char_p, [c_int]),
    "cenv_env_description": (c_char_p, [c_int]),
    "cenv_num_params": (c_int, [c_int]),
    "cenv_param_info": (c_int, [c_int, c_int, P(c_char_p), P(c_char_p), P(c_double), P(c_double),
                                P(c_double), P(c_int)]),
    "cenv_num_log_fields": (c_int, [c_int]),
    "cenv_log_field_name": (c_char_p, [c_int, c_int]),
    "cenv_env_flags": (c_int, [c_int]),
    "cenv_create": (c_void_p, [c_int, c_int64, c_uint64, P(c_double), c_int, c_int, c_char_p, c_int64]),
    "cenv_describe": (c_void_p, [c_int, P(c_double), c_int, c_char_p, c_int64]),
    "cenv_agents_per_env": (c_int, [c_void_p]),
    "cenv_obs_ndim": (c_int, [c_void_p]),
    "cenv_obs_shape": (None, [c_void_p, P(c_int64)]),
    "cenv_obs_dtype": (c_int, [c_void_p]),
    "cenv_action_kind": (c_int, [c_void_p]),
    "cenv_action_ndim": (c_int, [c_void_p]),
    "cenv_action_nvec": (None, [c_void_p, P(c_int64)]),
    "cenv_action_bounds": (None, [c_void_p, P(c_float), P(c_float)]),
    "cenv_has_mask": (c_int, [c_void_p]),
    "cenv_mask_width": (c_int64, [c_void_p]),
    "cenv_bind": (c_int, [c_void_p, c_void_p, c_void_p, P(c_float), P(c_uint8), P(c_uint8), P(c_uint8),
                          c_void_p, P(c_uint8)]),
    "cenv_set_mask_check": (c_int, [c_void_p, c_int]),
    "cenv_render": (c_int64, [c_void_p, c_int64, c_char_p, c_int64]),
    "cenv_pixels": (c_int, [c_void_p, c_int64, P(c_uint8), c_int, c_int]),
    "cenv_bind_episode_stats": (c_int, [c_void_p, P(c_float), P(c_int32)]),
    "cenv_reset": (c_int, [c_void_p, c_uint64, c_int]),
    "cenv_step": (c_int64, [c_void_p]),
    "cenv_bad_action": (None, [c_void_p, P(c_int64), P(c_int), P(c_double)]),
    "cenv_error": (c_char_p, [c_void_p]),
    "cenv_log": (c_int64, [c_void_p, P(c_float)]),
    "cenv_set_state": (c_int, [c_void_p, c_int64, P(c_double), c_int]),
    "cenv_state_size": (c_int64, [c_void_p]),
    "cenv_save_state": (c_int64, [c_void_p, c_void_p, c_int64]),
    "cenv_load_state": (c_int, [c_void_p, c_void_p, c_int64]),
    "cenv_check_state": (c_int, [c_void_p, c_void_p, c_int64]),
    "cenv_close": (None, [c_void_p]),
}


def library_path() -> Path:
    """Where libcenv is: $JAXLAB_CENV_LIB, or jaxlab/_cenv<suffix> beside this package."""
    override = os.environ.get("JAXLAB_CENV_LIB")
    if override:
        return Path(override)
    package_dir = Path(__file__).resolve().parent.parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = package_dir / f"_cenv{suffix}"
        if candidate.exists():
            return candidate
    raise ImportError(
        f"jaxlab's C environment library (_cenv*.so) is not in {package_dir}: the package was not "
        "built. Install it with `pip install -e .` from the repository root (needs a C compiler), "
        "or set JAXLAB_CENV_LIB to a library built with `python cenv/build.py OUT.so`."
    )


class LibraryError(ImportError):
    """An env library that cannot be used: missing, of another ABI version, or not a jaxlab env
    library. The message names the file and the fix."""


def load(path: str | Path | None = None) -> ctypes.CDLL:
    """The library at ``path`` (None: the built-in one) with every signature declared; its ABI version
    is checked when it is first loaded. Each file is loaded once per process."""
    return _load(None if path is None else str(Path(path).absolute()))


def _unloadable(file: Path, err: OSError) -> str:
    """Why the dynamic loader refused ``file``, with the fix. A library built from a header that calls a
    function of a library jaxlab does not link (a graphics library's, say) builds, and fails here."""
    missing = re.search(r"undefined symbol: (\S+)", str(err))
    if missing:
        return (f"cannot load env library {file}: its env calls {missing.group(1)}, which no library jaxlab links "
                f"provides (libc, libm and pthreads alone); an env header may use only those: remove the call (a "
                f"graphics library has no place in an env: draw its pictures in the `pixels` hook with the SDK's "
                f"draw.h) and build it again")
    return (f"cannot load env library {file}: {err}; an env library is a shared library built by "
            "`jaxlab build-env HEADER.h -o LIB.so` (or give the env header NAME.h itself)")


@functools.lru_cache(maxsize=None)
def _load(path: str | None) -> ctypes.CDLL:
    builtin = path is None
    file = library_path() if builtin else Path(path)
    rebuild = ("the library is stale. Rebuild it with `pip install -e .`" if builtin else
               "rebuild it with `jaxlab build-env HEADER.h -o " + str(file) + "` (or train from the header: "
               "`jaxlab train HEADER.h` builds and caches it)")
    if file.is_dir():
        raise LibraryError(f"env library {file} is a folder; give an env library file (LIB.so, built by `jaxlab "
                           "build-env HEADER.h -o LIB.so`) or an env header (NAME.h)")
    if not file.is_file():
        raise LibraryError(f"env library {file} does not exist; build one with `jaxlab build-env HEADER.h -o {file}`")
    try:
        lib = ctypes.CDLL(str(file))
    except OSError as err:
        raise LibraryError(_unloadable(file, err)) from None
    try:
        lib.cenv_abi_version.restype = c_int
        lib.cenv_abi_version.argtypes = []
    except AttributeError:
        raise LibraryError(f"{file} is not a jaxlab env library: it exports no cenv_abi_version; build "
                           "one with `jaxlab build-env HEADER.h`") from None
    found = lib.cenv_abi_version()
    if found != ABI_VERSION:
        raise LibraryError(f"{file} has C ABI version {found} but this jaxlab expects {ABI_VERSION}: {rebuild}.")
    for name, (restype, argtypes) in SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryError(f"{file} does not export {name} although it says ABI {found}: it is not a "
                               f"complete jaxlab env library; {rebuild}") from None
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


@functools.lru_cache(maxsize=None)
def _constants() -> tuple[tuple[str, int], ...]:
    lib = load()
    return tuple((lib.cenv_constant_name(i).decode(), int(lib.cenv_constant_value(i)))
                 for i in range(lib.cenv_num_constants()))


def constants() -> dict[str, int]:
    """Every number of cenv/api.h, read from the library once, by name without the CENV_ prefix:
    ABI_VERSION, the error codes ERR_* (negative), DTYPE_*, ACTION_*, and the limits MAX_CHUNKS (envs
    are split into at most this many chunks, so num_threads <= min(num_envs, MAX_CHUNKS)),
    ERROR_LEN, MAX_PARAMS, MAX_LOG, MAX_OBS_DIMS, MAX_ACTION_DIMS. A new dict on every call."""
    return dict(_constants())


def constant(name: str) -> int:
    """One of ``constants()``, e.g. ``constant("MAX_CHUNKS")``; KeyError naming the known ones."""
    table = dict(_constants())
    if name not in table:
        raise KeyError(f"cenv has no constant {name!r}; it has {', '.join(table)}")
    return table[name]


def dtypes() -> dict[int, str]:
    """Observation dtype code -> numpy dtype name ("float32", "uint8"), from the DTYPE_* constants."""
    return {value: name[len("DTYPE_"):].lower() for name, value in _constants() if name.startswith("DTYPE_")}

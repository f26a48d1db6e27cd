"""JAX's persistent compilation cache, on by default (``device.compile_cache``), and its hits and misses.

A second run of the same shapes on the same device loads its three executables (the rollout's step
and finish, the update) from disk instead of compiling them. JAX keys each entry by the computation
(every shape and dtype in it), the device, the JAX/XLA version and the compile options; jaxlab adds
its own version as a subfolder, so an upgrade never reads another version's entries. The update takes
the learning-rate schedule's length (the run's optimizer steps) as an input, not a constant: a resume
that changes train.total_timesteps loads the same update; the profiler (--profile) compiles nothing of
its own.

``device.compile_cache``: "auto" (``$JAXLAB_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxlab``, else
``~/.cache/jaxlab``; then ``xla/jaxlab-<version>``), a folder (``<folder>/jaxlab-<version>``), or
"off" (auto and off in any case). The cache is set up once per process, before the first compile: a
later Trainer with another setting in the same process keeps the first one (JAX reads the option once).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jaxlab.config.schema import ConfigError

_EVENTS = {"/jax/compilation_cache/cache_hits": "hits", "/jax/compilation_cache/cache_misses": "misses"}
_counts = {"hits": 0, "misses": 0}
_state: dict = {"listening": False, "dir": None, "setting": None}


def cache_folder(setting: str) -> Path | None:
    """The folder for ``setting`` ("auto", "off" or a path), with jaxlab's version as its last part;
    None for "off"."""
    from jaxlab import __version__

    if setting.strip().lower() == "off":
        return None
    if setting.strip().lower() == "auto":
        root = os.environ.get("JAXLAB_CACHE_DIR")
        if root:
            base = Path(root)
        else:
            base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jaxlab"
        base = base / "xla"
    else:
        base = Path(setting).expanduser()
    return base / f"jaxlab-{__version__}"


def unusable_folder(setting: str, folder: Path, reason: str) -> ConfigError:
    """The error for a named ``setting`` whose ``folder`` cannot be created or written, for ``reason``."""
    return ConfigError(f"device.compile_cache={setting!r}: cannot create {folder} ({reason}); give a folder you "
                       "can write, e.g. --device.compile-cache ~/.cache/jaxlab/xla, or off")


def _listen(event: str, *args, **kwargs) -> None:
    name = _EVENTS.get(event)
    if name is not None:
        _counts[name] += 1


def enable(setting: str) -> str:
    """Turns JAX's persistent cache on at ``setting``'s folder (or leaves it off); returns a short
    description for the log. Safe to call again: only the first call of a process changes JAX. A folder
    that cannot be created is a ConfigError when the user named it, and a warning (the run goes on
    without the cache) under "auto"."""
    import jax

    if not _state["listening"]:
        jax.monitoring.register_event_listener(_listen)
        _state["listening"] = True
    if _state["setting"] is None:
        _state["setting"] = setting
        folder = cache_folder(setting)
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                _state["dir"] = None
                if setting.strip().lower() != "auto":
                    _state["setting"] = None  # a later call with a usable setting may still turn it on
                    raise unusable_folder(setting, folder, err.strerror) from None
                source = next((f" (from ${name})" for name in ("JAXLAB_CACHE_DIR", "XDG_CACHE_HOME")
                               if os.environ.get(name)), "")  # the variable to fix, when one chose the folder
                print(f"warning: compile cache off: cannot create {folder}{source} ({err.strerror}); set "
                      "device.compile_cache to a folder you can write, or off", file=sys.stderr)
                return describe()
            jax.config.update("jax_compilation_cache_dir", str(folder))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
            _state["dir"] = folder
    return describe()


def describe() -> str:
    """"compile cache DIR" or "compile cache off"."""
    return f"compile cache {_state['dir']}" if _state["dir"] is not None else "compile cache off"


def counts() -> dict[str, int]:
    """Persistent-cache hits and misses of this process so far (a miss is a compile that was then
    written to the cache)."""
    return dict(_counts)


def verdict(before: dict[str, int], after: dict[str, int]) -> str:
    """What happened between two ``counts()``: "hit" (every executable loaded), "miss" (all compiled),
    "partial (H of N)", or "off" when nothing was looked up."""
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    if hits + misses == 0:
        return "off"
    if misses == 0:
        return "hit"
    if hits == 0:
        return "miss"
    return f"partial ({hits} of {hits + misses})"

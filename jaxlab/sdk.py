"""The env SDK, public: see jaxlab.env.sdk (include_dir, build_library, cached_library, header_env,
header_envs, new_env, source_hash, cache_dir, BuildError) and jaxlab.env.overrun (check_overruns,
parameter_extremes, OverrunError)."""

from jaxlab.env.sdk import (BuildError, build_library, cache_dir, cached_library, header_env, header_envs,
                            include_dir, new_env, source_hash)
from jaxlab.env.overrun import OverrunError, check_overruns, parameter_extremes

__all__ = ["BuildError", "OverrunError", "build_library", "cache_dir", "cached_library", "check_overruns",
           "header_env", "header_envs", "include_dir", "new_env", "parameter_extremes", "source_hash"]

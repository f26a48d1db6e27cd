"""The env SDK, public: see jaxlab.env.sdk (include_dir, build_library, cached_library, header_env,
header_envs, new_env, source_hash, cache_dir, BuildError)."""

from jaxlab.env.sdk import (BuildError, build_library, cache_dir, cached_library, header_env, header_envs,
                            include_dir, new_env, source_hash)

__all__ = ["BuildError", "build_library", "cache_dir", "cached_library", "header_env", "header_envs",
           "include_dir", "new_env", "source_hash"]

"""The C environments: batched stepping through ctypes into preallocated buffers; Python envs
(Gymnasium, PettingZoo) behind the same interface (jaxlab.env.python_envs)."""

from jaxlab.env.library import constants
from jaxlab.env.python_envs import is_python_env, spaces_of  # spaces_of: C and Python envs
from jaxlab.env.registry import EnvType, Param, env_type, env_types
from jaxlab.env.spaces import Box, Discrete, EnvSpaces, MultiDiscrete
from jaxlab.env.vecenv import VecEnv, aligned_empty, make

__all__ = ["Box", "Discrete", "EnvSpaces", "EnvType", "MultiDiscrete", "Param", "VecEnv", "aligned_empty",
           "constants", "env_type", "env_types", "is_python_env", "make", "spaces_of"]

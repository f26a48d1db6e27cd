"""The C environments: batched stepping through ctypes into preallocated buffers."""

from jaxlab.env.library import constants
from jaxlab.env.registry import EnvType, Param, env_type, env_types, spaces_of
from jaxlab.env.spaces import Box, Discrete, EnvSpaces, MultiDiscrete
from jaxlab.env.vecenv import VecEnv, aligned_empty, make

__all__ = ["Box", "Discrete", "EnvSpaces", "EnvType", "MultiDiscrete", "Param", "VecEnv", "aligned_empty",
           "constants", "env_type", "env_types", "make", "spaces_of"]

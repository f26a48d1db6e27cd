"""The C environments: batched stepping through ctypes into preallocated buffers."""

from jaxlab.env.registry import EnvType, Param, env_type, env_types
from jaxlab.env.spaces import Box, Discrete, MultiDiscrete
from jaxlab.env.vecenv import VecEnv, aligned_empty, make

__all__ = ["Box", "Discrete", "EnvType", "MultiDiscrete", "Param", "VecEnv", "aligned_empty",
           "env_type", "env_types", "make"]

"""Action and observation spaces, as the C side describes them. Plain frozen dataclasses, and
``describe_handle``, the one reader of a C handle's spaces (used by VecEnv and registry.spaces_of)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from jaxlab.env import library


@dataclass(frozen=True)
class Discrete:
    """One integer action in [0, n)."""

    n: int
    dtype = np.dtype(np.int32)

    @property
    def shape(self) -> tuple[int, ...]:
        return ()

    def sample(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        """Uniform random actions, int32[batch]."""
        return rng.integers(0, self.n, size=batch, dtype=np.int32)

    def __str__(self) -> str:
        return f"Discrete({self.n})"


@dataclass(frozen=True)
class MultiDiscrete:
    """Several integer actions, component i in [0, nvec[i])."""

    nvec: tuple[int, ...]
    dtype = np.dtype(np.int32)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.nvec),)

    def sample(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        """Uniform random actions, int32[batch, len(nvec)]."""
        return (rng.random((batch, len(self.nvec))) * np.array(self.nvec)).astype(np.int32)

    def __str__(self) -> str:
        return f"MultiDiscrete({list(self.nvec)})"


@dataclass(frozen=True, repr=False)
class Box:
    """A float array of ``shape`` with per-component bounds ``low``/``high`` (tuples, flattened)."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    shape: tuple[int, ...]
    dtype: np.dtype = np.dtype(np.float32)

    def sample(self, rng: np.random.Generator, batch: int) -> np.ndarray:
        """Uniform random values within the bounds, float32[batch, *shape]."""
        low = np.asarray(self.low, dtype=np.float32).reshape(self.shape)
        high = np.asarray(self.high, dtype=np.float32).reshape(self.shape)
        u = rng.random((batch, *self.shape), dtype=np.float32)
        return (low + u * (high - low)).astype(self.dtype)

    def clip(self, values: np.ndarray) -> np.ndarray:
        """``values`` [..., *shape] clipped to the bounds, as an env applies an action (float32, same shape)."""
        low = np.asarray(self.low, dtype=np.float32).reshape(self.shape)
        high = np.asarray(self.high, dtype=np.float32).reshape(self.shape)
        return np.clip(np.asarray(values, dtype=np.float32), low, high)

    def __str__(self) -> str:
        if len(set(self.low)) == 1 and len(set(self.high)) == 1:
            return f"Box({self.low[0]:g}, {self.high[0]:g}, {self.shape}, {np.dtype(self.dtype).name})"
        return f"Box({list(self.low)}, {list(self.high)}, {self.shape}, {np.dtype(self.dtype).name})"

    __repr__ = __str__  # a REPL shows Box(-inf, inf, (334,), float32), not 334 bounds twice (as Gymnasium's)


Space = Discrete | MultiDiscrete | Box


def legal_argmax(action_space: Discrete | MultiDiscrete, mask: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Per agent and component, the legal action of highest score: ``mask`` [A, sum(nvec)] (nonzero:
    legal), ``scores`` [A, sum(nvec)] (random bytes from 1 give random legal actions). Returns int32 [A]
    for Discrete, [A, k] for MultiDiscrete (a component with no legal action gets 0)."""
    nvec = (action_space.n,) if isinstance(action_space, Discrete) else tuple(action_space.nvec)
    ends = np.cumsum((0, *nvec))
    masked = scores * mask
    actions = np.stack([masked[:, a:b].argmax(axis=1) for a, b in zip(ends[:-1], ends[1:])], axis=1)
    return actions.astype(np.int32).reshape((len(mask), *action_space.shape))


@dataclass(frozen=True)
class EnvSpaces:
    """What one env of a type with given params looks like, per agent.

    agents_per_env: agents in one env (rows per env in every buffer)
    observation_space: Box of the per-agent observation shape and dtype
    action_space: Discrete, MultiDiscrete or Box (per agent)
    has_mask: whether the env writes an action mask
    mask_width: entries of the per-agent action mask, sum(nvec) (0 without a mask)
    agents_wait: whether an agent whose episode ends waits for its env's reset (option agents_wait:
        the env has an ``active`` buffer; the rows of waiting agents are not to be learned from)
    """

    agents_per_env: int
    observation_space: Box
    action_space: Space
    has_mask: bool
    mask_width: int
    agents_wait: bool = False


def handle_observation(lib, handle) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) of one agent's observation of a C handle of library ``lib``, read through its
    accessors (describe_handle's observation space without its bounds)."""
    ndim = lib.cenv_obs_ndim(handle)
    shape = (ctypes.c_int64 * library.constants()["MAX_OBS_DIMS"])()
    lib.cenv_obs_shape(handle, shape)
    return tuple(int(n) for n in shape[:ndim]), np.dtype(library.dtypes()[lib.cenv_obs_dtype(handle)])


def describe_handle(lib, handle, env_type) -> EnvSpaces:
    """The spaces of a C handle of library ``lib`` (from cenv_create or cenv_describe) of ``env_type``
    (registry.EnvType), read through its accessors."""
    limits = library.constants()
    obs_shape, obs_dtype = handle_observation(lib, handle)
    high = 255.0 if obs_dtype == np.uint8 else np.inf
    low = 0.0 if obs_dtype == np.uint8 else -np.inf
    size = int(np.prod(obs_shape))
    observation_space = Box((low,) * size, (high,) * size, obs_shape, obs_dtype)
    kind = lib.cenv_action_kind(handle)
    k = lib.cenv_action_ndim(handle)
    if kind == limits["ACTION_CONTINUOUS"]:
        low_c = (ctypes.c_float * limits["MAX_ACTION_DIMS"])()
        high_c = (ctypes.c_float * limits["MAX_ACTION_DIMS"])()
        lib.cenv_action_bounds(handle, low_c, high_c)
        action_space = Box(tuple(low_c[:k]), tuple(high_c[:k]), (k,), np.dtype(np.float32))
    else:
        nvec = (ctypes.c_int64 * limits["MAX_ACTION_DIMS"])()
        lib.cenv_action_nvec(handle, nvec)
        if kind == limits["ACTION_DISCRETE"]:
            action_space = Discrete(int(nvec[0]))
        elif kind == limits["ACTION_MULTI_DISCRETE"]:
            action_space = MultiDiscrete(tuple(int(n) for n in nvec[:k]))
        else:
            raise ValueError(f"cenv reports action kind {kind}, which this jaxlab does not know; "
                             "rebuild the library with `pip install -e .`")
    return EnvSpaces(int(lib.cenv_agents_per_env(handle)), observation_space, action_space,
                     bool(lib.cenv_has_mask(handle)), int(lib.cenv_mask_width(handle)), env_type.has("agents_wait"))

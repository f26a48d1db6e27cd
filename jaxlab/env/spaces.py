"""Action and observation spaces, as the C side describes them. Plain frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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


@dataclass(frozen=True)
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

    def __str__(self) -> str:
        if len(set(self.low)) == 1 and len(set(self.high)) == 1:
            return f"Box({self.low[0]:g}, {self.high[0]:g}, {self.shape}, {np.dtype(self.dtype).name})"
        return f"Box({list(self.low)}, {list(self.high)}, {self.shape}, {np.dtype(self.dtype).name})"


Space = Discrete | MultiDiscrete | Box

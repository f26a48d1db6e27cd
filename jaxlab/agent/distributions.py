"""Action distributions for the policy heads, as pure functions of the head outputs.

Shapes (B = any batch shape, e.g. [A] or [T, A]):
    discrete        logits [B, n]          actions [B] int32
    multi-discrete  logits [B, sum(nvec)]  actions [B, len(nvec)] int32 (factorised categoricals)
    continuous      mean [B, d], log_std [d]  actions [B, d] float32 (Gaussian, unclipped)
Masks [B, n or sum(nvec)] bool replace illegal logits by MASKED_LOGIT (finite, so no NaN when a
whole factor is masked by mistake).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

MASKED_LOGIT = -1e9


@dataclass(frozen=True)
class ActionSpec:
    """Static description of the action space: kind in {discrete, multi_discrete, continuous},
    nvec (category counts) or dim (continuous components)."""

    kind: str
    nvec: tuple[int, ...] = ()
    dim: int = 0

    @property
    def head_size(self) -> int:
        return sum(self.nvec) if self.kind != "continuous" else self.dim

    @classmethod
    def from_space(cls, space) -> "ActionSpec":
        from jaxlab.env.spaces import Box, Discrete

        if isinstance(space, Discrete):
            return cls("discrete", (space.n,))
        if isinstance(space, Box):
            return cls("continuous", dim=int(math.prod(space.shape)))
        return cls("multi_discrete", tuple(space.nvec))


def masked(logits: jax.Array, mask: jax.Array | None) -> jax.Array:
    return logits if mask is None else jnp.where(mask, logits, MASKED_LOGIT)


def _split(logits: jax.Array, nvec: tuple[int, ...]) -> list[jax.Array]:
    bounds = [sum(nvec[:i]) for i in range(1, len(nvec))]
    return jnp.split(logits, bounds, axis=-1)


def sample(spec: ActionSpec, head: jax.Array, log_std: jax.Array | None, key: jax.Array,
           mask: jax.Array | None = None) -> jax.Array:
    """Draws actions from the head outputs."""
    if spec.kind == "continuous":
        return head + jnp.exp(log_std) * jax.random.normal(key, head.shape, head.dtype)
    parts = _split(masked(head, mask), spec.nvec)
    keys = jax.random.split(key, len(parts))
    actions = [jax.random.categorical(k, p, axis=-1).astype(jnp.int32) for k, p in zip(keys, parts)]
    return actions[0] if spec.kind == "discrete" else jnp.stack(actions, axis=-1)


def log_prob_entropy(spec: ActionSpec, head: jax.Array, log_std: jax.Array | None, actions: jax.Array,
                     mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """(log-probability [B], entropy [B]) of ``actions`` under the head outputs."""
    if spec.kind == "continuous":
        log_std = jnp.broadcast_to(log_std, head.shape)
        z = (actions - head) * jnp.exp(-log_std)
        logp = jnp.sum(-0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi), axis=-1)
        entropy = jnp.sum(log_std + 0.5 * (1.0 + math.log(2 * math.pi)), axis=-1)
        return logp, entropy
    parts = _split(masked(head, mask), spec.nvec)
    if spec.kind == "discrete":
        actions = actions[..., None]
    logp = jnp.zeros(head.shape[:-1], jnp.float32)
    entropy = jnp.zeros(head.shape[:-1], jnp.float32)
    for i, part in enumerate(parts):
        log_probs = jax.nn.log_softmax(part.astype(jnp.float32), axis=-1)
        logp += jnp.take_along_axis(log_probs, actions[..., i:i + 1], axis=-1)[..., 0]
        entropy -= jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
    return logp, entropy


def deterministic(spec: ActionSpec, head: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """The mode: argmax per factor, or the Gaussian mean."""
    if spec.kind == "continuous":
        return head
    actions = [jnp.argmax(p, axis=-1).astype(jnp.int32) for p in _split(masked(head, mask), spec.nvec)]
    return actions[0] if spec.kind == "discrete" else jnp.stack(actions, axis=-1)

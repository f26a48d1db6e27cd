"""Action distributions for the policy heads, as pure functions of the head outputs.

Shapes (B = any batch shape, e.g. [A] or [T, A]):
    discrete        logits [B, n]          actions [B] int32
    multi-discrete  logits [B, sum(nvec)]  actions [B, len(nvec)] int32 (factorised categoricals: one
                                           categorical per component, log-probs and entropies summed)
    continuous      mean [B, d], log_std [d]  actions [B, d] float32 (Gaussian, unclipped)

Masks [B, n or sum(nvec)] bool (True: legal), laid out like the logits, apply to the discrete kinds:
illegal logits are replaced by MASKED_LOGIT, so an illegal action is never sampled nor chosen and gets
no gradient. A factor whose mask row allows nothing (all False) has no action to take, and that is
never hidden: for such a row ``sample`` and ``deterministic`` return action -1 in that component
(which a VecEnv refuses before stepping anything, with an out-of-range error naming the agent), and
``log_prob_entropy`` returns NaN log-prob and NaN entropy for that batch entry (so the loss is NaN and
the training loop stops on it). With strict mask checking the C env already refuses such a mask on
the step before; this covers masks built in Python and ``mask_check = "off"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

MASKED_LOGIT = -1e9
NO_ACTION = -1  # the action of a factor whose mask row allows nothing


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
    """logits [B, k] with the entries where ``mask`` [B, k] is False replaced by MASKED_LOGIT."""
    return logits if mask is None else jnp.where(mask, logits, MASKED_LOGIT)


def _split(x: jax.Array, nvec: tuple[int, ...]) -> list[jax.Array]:
    """[B, sum(nvec)] -> one [B, nvec[i]] per factor."""
    bounds = [sum(nvec[:i]) for i in range(1, len(nvec))]
    return jnp.split(x, bounds, axis=-1)


def _factors(spec: ActionSpec, head: jax.Array, mask: jax.Array | None):
    """Per factor: (masked logits [B, n_i], whether its mask row allows some action [B] bool, or None
    without a mask)."""
    parts = _split(masked(head, mask), spec.nvec)
    if mask is None:
        return [(p, None) for p in parts]
    return [(p, jnp.any(m, axis=-1)) for p, m in zip(parts, _split(mask, spec.nvec))]


def _no_action_where_none_legal(action: jax.Array, any_legal: jax.Array | None) -> jax.Array:
    return action if any_legal is None else jnp.where(any_legal, action, NO_ACTION)


def sample(spec: ActionSpec, head: jax.Array, log_std: jax.Array | None, key: jax.Array,
           mask: jax.Array | None = None) -> jax.Array:
    """Draws actions [B] / [B, k] from the head outputs [B, head_size] (-1 in a factor whose mask row
    allows nothing)."""
    if spec.kind == "continuous":
        return head + jnp.exp(log_std) * jax.random.normal(key, head.shape, head.dtype)
    factors = _factors(spec, head, mask)
    keys = jax.random.split(key, len(factors))
    actions = [_no_action_where_none_legal(jax.random.categorical(k, p, axis=-1).astype(jnp.int32), legal)
               for k, (p, legal) in zip(keys, factors)]
    return actions[0] if spec.kind == "discrete" else jnp.stack(actions, axis=-1)


def log_prob_entropy(spec: ActionSpec, head: jax.Array, log_std: jax.Array | None, actions: jax.Array,
                     mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """(log-probability [B], entropy [B]) of ``actions`` under the head outputs; both NaN for a batch
    entry with a factor whose mask row allows nothing."""
    if spec.kind == "continuous":
        log_std = jnp.broadcast_to(log_std, head.shape)
        z = (actions - head) * jnp.exp(-log_std)
        logp = jnp.sum(-0.5 * z * z - log_std - 0.5 * math.log(2 * math.pi), axis=-1)
        entropy = jnp.sum(log_std + 0.5 * (1.0 + math.log(2 * math.pi)), axis=-1)
        return logp, entropy
    if spec.kind == "discrete":
        actions = actions[..., None]
    logp = jnp.zeros(head.shape[:-1], jnp.float32)
    entropy = jnp.zeros(head.shape[:-1], jnp.float32)
    for i, (part, legal) in enumerate(_factors(spec, head, mask)):
        log_probs = jax.nn.log_softmax(part.astype(jnp.float32), axis=-1)
        factor_logp = jnp.take_along_axis(log_probs, actions[..., i:i + 1], axis=-1)[..., 0]
        factor_entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
        if legal is not None:
            factor_logp = jnp.where(legal, factor_logp, jnp.nan)
            factor_entropy = jnp.where(legal, factor_entropy, jnp.nan)
        logp += factor_logp
        entropy += factor_entropy
    return logp, entropy


def deterministic(spec: ActionSpec, head: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """The mode [B] / [B, k]: argmax per factor (-1 where its mask row allows nothing), or the Gaussian
    mean."""
    if spec.kind == "continuous":
        return head
    actions = [_no_action_where_none_legal(jnp.argmax(p, axis=-1).astype(jnp.int32), legal)
               for p, legal in _factors(spec, head, mask)]
    return actions[0] if spec.kind == "discrete" else jnp.stack(actions, axis=-1)

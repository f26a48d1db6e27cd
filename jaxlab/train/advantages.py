"""The advantage estimator inside the update: GAE once per update, or V-trace recomputed before every
minibatch from each sample's latest importance ratio; and which sequences a minibatch trains on: every
sequence once per epoch (a permutation), or drawn by advantage magnitude (prioritised, with importance
weights). The math is in jaxlab.agent.ppo and jaxlab.agent.vtrace; this holds the per-update state.

Shapes: T = horizon, N = sequences of the batch, B = sequences per minibatch.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxlab.agent import ppo, vtrace


class AdvantageState(NamedTuple):
    advantages: jax.Array  # [T, N]: GAE's, or V-trace's as last computed
    returns: jax.Array     # [T, N]: advantages + values
    ratio: Any             # [T, N] float32: each sample's ratio when last trained on (1 before); None for GAE


class Advantages:
    """``kind`` "gae" or "vtrace"; rewards are multiplied by ``reward_scale`` first. ``prio_alpha`` > 0
    draws each minibatch's B sequences with replacement by advantage magnitude (jaxlab.agent.vtrace),
    their advantages weighted by (N p)^-beta, beta annealed from ``prio_beta0`` to 1 over the run's
    optimizer steps (minibatch's ``total_steps``); 0 trains on every sequence once per epoch, unweighted."""

    def __init__(self, kind: str, gamma: float, lam: float, reward_scale: float = 1.0, rho_clip: float = 1.0,
                 c_clip: float = 1.0, prio_alpha: float = 0.0, prio_beta0: float = 0.2):
        self.kind, self.gamma, self.lam, self.reward_scale = kind, gamma, lam, reward_scale
        self.rho_clip, self.c_clip = rho_clip, c_clip
        self.prio_alpha, self.prio_beta0 = prio_alpha, prio_beta0

    def _estimate(self, segment, ratio):
        s = segment
        if ratio is None:
            return ppo.gae(s.rewards * self.reward_scale, s.values, s.terminals, s.truncations, s.bootstrap_values,
                           s.next_values, self.gamma, self.lam)
        return vtrace.vtrace(s.rewards * self.reward_scale, s.values, s.terminals, s.truncations, s.bootstrap_values,
                             s.next_values, ratio, self.gamma, self.lam, self.rho_clip, self.c_clip)

    def start(self, segment) -> AdvantageState:
        """The state at the start of an update: the advantages with every ratio 1 (GAE's)."""
        advantages, returns = self._estimate(segment, None)
        ratio = jnp.ones_like(segment.values) if self.kind == "vtrace" else None
        return AdvantageState(advantages, returns, ratio)

    def minibatch(self, state: AdvantageState, segment, index: jax.Array, key: jax.Array, step: jax.Array,
                  total_steps: jax.Array):
        """(index [B], advantages [T, B], returns [T, B], importance weights [B] or None) of one minibatch:
        ``index`` is the permutation's slice (kept unless prioritised), ``key`` draws a prioritised one,
        ``step`` (int32 []: optimizer steps so far) of ``total_steps`` (int32 []: the run's, at least 1 counted)
        anneals beta."""
        advantages, returns = state.advantages, state.returns
        if state.ratio is not None:
            advantages, returns = self._estimate(segment, state.ratio)
        weights = None
        if self.prio_alpha > 0:
            probs = vtrace.priorities(advantages, self.prio_alpha, segment.active)
            index = vtrace.sample(key, probs, index.shape[0])
            beta = vtrace.annealed_beta(self.prio_beta0, step / jnp.maximum(total_steps, 1))
            weights = vtrace.importance_weights(probs, index, beta)
        return index, advantages[:, index], returns[:, index], weights

    def observe(self, state: AdvantageState, index: jax.Array, log_ratio: jax.Array) -> AdvantageState:
        """After a minibatch: V-trace keeps the ratio exp(log_ratio) [T, B] its sequences ``index`` had
        (before the step); GAE keeps nothing."""
        if state.ratio is None:
            return state
        return state._replace(ratio=state.ratio.at[:, index].set(jax.lax.stop_gradient(jnp.exp(log_ratio))))

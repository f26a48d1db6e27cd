"""PPO as pure functions of arrays and plain numbers (no config objects).

Shapes: T = horizon, A = agents (or the agents of one minibatch).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


def gae(rewards, values, terminals, truncations, bootstrap_values, next_values, gamma: float, lam: float):
    """Generalised advantage estimates by a reverse lax.scan.

    rewards, values, bootstrap_values [T, A] float32; terminals, truncations [T, A] bool;
    next_values [A]: the value of the observation after the last step.
    Step t ended the episode if terminals[t] or truncations[t]; then the next observation belongs to a
    new episode and is not bootstrapped from. A termination adds nothing; a truncation (time limit)
    bootstraps from bootstrap_values[t], the value of the observation the episode was cut at:
        delta_t = r_t + gamma * (not ended_t) * V_{t+1} + gamma * truncated_t * Vboot_t - V_t
        A_t     = delta_t + gamma * lam * (not ended_t) * A_{t+1}
    Returns (advantages [T, A], returns = advantages + values [T, A]).
    """
    ended = jnp.logical_or(terminals, truncations)
    continuing = 1.0 - ended.astype(jnp.float32)
    truncated = truncations.astype(jnp.float32) * (1.0 - terminals.astype(jnp.float32))
    following = jnp.concatenate([values[1:], next_values[None]], axis=0)
    deltas = rewards + gamma * (continuing * following + truncated * bootstrap_values) - values

    def backward(advantage, inputs):
        delta, cont = inputs
        advantage = delta + gamma * lam * cont * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(next_values), (deltas, continuing), reverse=True)
    return advantages, advantages + values


class LossTerms(NamedTuple):
    total: jax.Array
    policy: jax.Array
    value: jax.Array
    entropy: jax.Array
    approx_kl: jax.Array      # mean((ratio - 1) - log ratio): CleanRL's approx_kl (Schulman's k3 estimator)
    clip_fraction: jax.Array
    old_approx_kl: jax.Array  # mean(-log ratio): CleanRL's old_approx_kl (k1, noisier)


def _mean(x, weights):
    """The mean of x, or its weighted mean (weights 0/1: over the entries that count) when given."""
    if weights is None:
        return x.mean()
    return (x * weights).sum() / jnp.maximum(weights.sum(), 1.0)


def _normalised(advantages, weights):
    """``advantages`` (any shape) less their mean, over their std, both over the entries that count (all,
    or those of weight 1 in ``weights``, same shape); as they are when a single entry counts: it is its
    own mean, and normalised it would be 0 (the count is traced: the active steps vary per minibatch)."""
    mean = _mean(advantages, weights)
    std = jnp.sqrt(_mean((advantages - mean) ** 2, weights))
    count = advantages.size if weights is None else weights.sum()
    return jnp.where(count > 1, (advantages - mean) / (std + 1e-8), advantages)


def ppo_loss(new_logp, entropy, new_values, old_logp, old_values, advantages, returns, *, clip_coef: float,
             vf_coef: float, vf_clip_coef: float, ent_coef: float, norm_adv: bool, weights=None,
             adv_weights=None) -> LossTerms:
    """The clipped PPO objective on one minibatch; every input has the same shape (e.g. [T, B]).

    policy = mean(max(-adv * ratio, -adv * clip(ratio, 1 - c, 1 + c)))
    value  = 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -vc, vc) - R)^2))  (unclipped if vc = 0)
    total  = policy + vf_coef * value - ent_coef * mean(entropy)
    With norm_adv the advantages are normalised over this minibatch first, unless it holds a single
    sample that counts (minibatch_size 1: bptt_horizon 1, one sequence; or one step of weight 1 among
    waiting agents' steps), as Stable-Baselines3 does for one sample: its normalised advantage would be
    0, and the policy would learn nothing from it. ``weights`` (same shape, 1.0 or 0.0): every mean,
    the normalisation's included, is over the entries of weight 1 only (the steps in which an agent
    acted; see Segment.active). ``adv_weights`` [B] (the minibatch's B sequences,
    inputs [T, B]): prioritised sampling's importance weights, multiplying each sequence's advantages
    after the normalisation (as PufferLib 3 does).
    """
    w = None if weights is None else weights.astype(jnp.float32)
    if norm_adv:
        advantages = _normalised(advantages, w)
    if adv_weights is not None:
        advantages = advantages * adv_weights
    log_ratio = new_logp - old_logp
    ratio = jnp.exp(log_ratio)
    policy = _mean(jnp.maximum(-advantages * ratio, -advantages * jnp.clip(ratio, 1 - clip_coef, 1 + clip_coef)), w)
    value_error = (new_values - returns) ** 2
    if vf_clip_coef > 0:
        clipped = old_values + jnp.clip(new_values - old_values, -vf_clip_coef, vf_clip_coef)
        value_error = jnp.maximum(value_error, (clipped - returns) ** 2)
    value = 0.5 * _mean(value_error, w)
    mean_entropy = _mean(entropy, w)
    total = policy + vf_coef * value - ent_coef * mean_entropy
    approx_kl = _mean((ratio - 1) - log_ratio, w)
    clip_fraction = _mean((jnp.abs(ratio - 1) > clip_coef).astype(jnp.float32), w)
    return LossTerms(total, policy, value, mean_entropy, approx_kl, clip_fraction, _mean(-log_ratio, w))


def explained_variance(values, returns, weights=None):
    """1 - Var(returns - values) / Var(returns); 0 when returns are constant. ``weights`` as in ppo_loss."""
    w = None if weights is None else weights.astype(jnp.float32)

    def var(x):
        return _mean((x - _mean(x, w)) ** 2, w)

    var_returns = var(returns)
    return jnp.where(var_returns > 0, 1.0 - var(returns - values) / jnp.maximum(var_returns, 1e-12), 0.0)

"""PufferLib 3's advantage as pure functions: V-trace-clipped GAE and prioritised sampling of sequences by
advantage magnitude.

Shapes: T = horizon, N = sequences (segments x agents), B = sequences drawn for one minibatch.

V-trace (Espeholt et al. 2018, with GAE's lambda, as PufferLib 3's compute_puff_advantage): with
rho_t = min(ratio_t, rho_clip), c_t = min(ratio_t, c_clip), where ratio_t = pi(a_t|s_t) / mu(a_t|s_t) is
the ratio of the current policy to the rollout policy,
    delta_t = rho_t * (r_t + gamma * (not ended_t) * V_{t+1} + gamma * truncated_t * Vboot_t - V_t)
    A_t     = delta_t + gamma * lam * c_t * (not ended_t) * A_{t+1}
Terminations and truncations are those of jaxlab.agent.ppo.gae, and with every ratio 1 (and clips >= 1)
this is GAE exactly. PufferLib keeps each sample's ratio from the last time it was trained on and
recomputes the advantages of the whole batch before every minibatch (jaxlab.train.advantages does).

Prioritised sampling (Schaul et al. 2016, as PufferLib 3): sequence i is drawn with probability
    p_i = w_i / sum_j w_j,   w_i = (sum_t |A_t,i|)^alpha         (uniform when every w_i is 0)
with replacement, and its (normalised) advantages are multiplied by the importance weight
    (N p_i)^(-beta),  beta annealed from beta0 to 1 over training (PufferLib anneals it to
    beta0 + (1 - beta0) * alpha instead; to 1 is Schaul et al.'s schedule, which makes the weights
    undo the sampling's bias by the end).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def vtrace(rewards, values, terminals, truncations, bootstrap_values, next_values, ratio, gamma: float, lam: float,
           rho_clip: float, c_clip: float):
    """V-trace advantages by a reverse lax.scan (see the module docstring).

    rewards, values, bootstrap_values, ratio [T, A] float32; terminals, truncations [T, A] bool;
    next_values [A]. Returns (advantages [T, A], returns = advantages + values [T, A])."""
    ended = jnp.logical_or(terminals, truncations)
    continuing = 1.0 - ended.astype(jnp.float32)
    truncated = truncations.astype(jnp.float32) * (1.0 - terminals.astype(jnp.float32))
    following = jnp.concatenate([values[1:], next_values[None]], axis=0)
    rho = jnp.minimum(ratio, rho_clip)
    c = jnp.minimum(ratio, c_clip)
    deltas = rho * (rewards + gamma * (continuing * following + truncated * bootstrap_values) - values)

    def backward(advantage, inputs):
        delta, cont, c_t = inputs
        advantage = delta + gamma * lam * c_t * cont * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(next_values), (deltas, continuing, c), reverse=True)
    return advantages, advantages + values


def priorities(advantages: jax.Array, alpha: float, weights=None) -> jax.Array:
    """Sampling probabilities [N] of the sequences of advantages [T, N]: (sum_t |A_t|)^alpha normalised
    (NaN advantages count 0; uniform when all are 0). ``weights`` [T, N] (0/1, optional): only the steps
    of weight 1 count (see Segment.active)."""
    magnitude = jnp.abs(jnp.nan_to_num(advantages))
    if weights is not None:
        magnitude = magnitude * weights.astype(jnp.float32)
    m = magnitude.sum(axis=0)
    w = (m / jnp.maximum(m.max(), 1e-30)) ** alpha  # scaled by the largest first: m ** alpha overflows float32
    total = w.sum()
    uniform = jnp.full_like(w, 1.0 / w.shape[0])
    return jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), uniform)


def importance_weights(probs: jax.Array, index: jax.Array, beta) -> jax.Array:
    """(N p_i)^(-beta) [B] of the drawn sequences ``index`` [B], for probabilities ``probs`` [N]."""
    return (probs.shape[0] * probs[index]) ** (-beta)


def annealed_beta(beta0: float, progress) -> jax.Array:
    """beta0 + (1 - beta0) * progress, progress in [0, 1] (clipped)."""
    return beta0 + (1.0 - beta0) * jnp.clip(progress, 0.0, 1.0)


def sample(key: jax.Array, probs: jax.Array, size: int) -> jax.Array:
    """``size`` sequence indices [B] int32 drawn with replacement with probabilities ``probs`` [N]."""
    return jax.random.choice(key, probs.shape[0], (size,), replace=True, p=probs).astype(jnp.int32)

"""Running normalisation as pure functions: observations by their running per-feature mean and variance,
rewards by the running std of the discounted return (Stable-Baselines3's VecNormalize, done here on a
whole segment at once).

Shapes (T = time, A = agents, S = the feature shape of one observation, e.g. [4] or [8, 8, 3]):
    RunningStats   mean [*S], var [*S], count [] float32 (count starts at EPSILON_COUNT, as SB3's)
    ReturnScale    returns [A]: each agent's discounted return so far in its episode; stats: RunningStats
                   of shape [] over those returns

Batches are merged with Chan et al.'s parallel algorithm, so one merge of N values gives the mean and
variance that N single-value updates would (up to float32 rounding).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

EPSILON = 1e-8        # added to the variance before the square root
EPSILON_COUNT = 1e-4  # the count stats start from (SB3's), so the first merge takes the batch's moments
CLIP = 10.0           # normalised observations and scaled rewards are clipped to [-CLIP, CLIP] (SB3's)


class RunningStats(NamedTuple):
    mean: jax.Array
    var: jax.Array
    count: jax.Array


class ReturnScale(NamedTuple):
    returns: jax.Array
    stats: RunningStats


def init_stats(shape: tuple[int, ...] = ()) -> RunningStats:
    """Mean 0, variance 1, count EPSILON_COUNT (copied from numpy: jnp.zeros would compile at start-up)."""
    return RunningStats(*(jax.device_put(np.full(s, v, np.float32), may_alias=False)
                          for s, v in ((shape, 0.0), (shape, 1.0), ((), EPSILON_COUNT))))


def merge(stats: RunningStats, batch_mean: jax.Array, batch_var: jax.Array, batch_count) -> RunningStats:
    """Chan et al.: the moments of the union of what ``stats`` saw and a batch of ``batch_count`` values
    with mean ``batch_mean`` and (population) variance ``batch_var``."""
    total = stats.count + batch_count
    delta = batch_mean - stats.mean
    mean = stats.mean + delta * (batch_count / total)
    m2 = stats.var * stats.count + batch_var * batch_count + delta ** 2 * (stats.count * batch_count / total)
    return RunningStats(mean, m2 / total, total)


def update(stats: RunningStats, x: jax.Array, weights: jax.Array | None = None) -> RunningStats:
    """``stats`` updated with every entry of x [*batch, *S] (the leading axes beyond stats' rank), or with
    only those where ``weights`` [*batch] (bool or 0/1) is set (none set: ``stats`` unchanged)."""
    axes = tuple(range(x.ndim - stats.mean.ndim))
    x = x.astype(jnp.float32)
    if weights is None:
        count = 1
        for axis in axes:
            count *= x.shape[axis]
        return merge(stats, x.mean(axis=axes), x.var(axis=axes), jnp.float32(count))
    w = weights.astype(jnp.float32).reshape(weights.shape + (1,) * stats.mean.ndim)
    count = w.sum()
    share = w / jnp.maximum(count, 1.0)
    mean = (x * share).sum(axis=axes)
    return merge(stats, mean, ((x - mean) ** 2 * share).sum(axis=axes), count)


def normalize(stats: RunningStats, x: jax.Array, clip: float = CLIP) -> jax.Array:
    """(x - mean) / sqrt(var + EPSILON), clipped to [-clip, clip]; float32, x [*batch, *S]."""
    return jnp.clip((x.astype(jnp.float32) - stats.mean) / jnp.sqrt(stats.var + EPSILON), -clip, clip)


def init_return_scale(num_agents: int) -> ReturnScale:
    return ReturnScale(jax.device_put(np.zeros(num_agents, np.float32), may_alias=False), init_stats(()))


def discounted_returns(returns: jax.Array, rewards: jax.Array, ended: jax.Array, gamma: float):
    """The running discounted return of each agent after each step, as SB3's VecNormalize keeps it:
    R_t = gamma * R_{t-1} + r_t, and R is zeroed after a step that ended the agent's episode.
    returns [A] (R before step 0), rewards [T, A] float32, ended [T, A] bool (terminal or truncated)
    -> (R after the last step, zeroed where it ended [A]; R_t for every step [T, A])."""

    def step(running, inputs):
        reward, end = inputs
        running = gamma * running + reward
        return jnp.where(end, 0.0, running), running

    return jax.lax.scan(step, returns, (rewards, ended))


def scale_rewards(state: ReturnScale, rewards: jax.Array, ended: jax.Array, gamma: float,
                  clip: float = CLIP, active: jax.Array | None = None) -> tuple[ReturnScale, jax.Array]:
    """Updates the return statistics with the T x A discounted returns of this segment (only those of
    the steps where ``active`` [T, A] is set, when given: a waiting agent's rows are not its episode's),
    then divides the rewards [T, A] by the updated std of the return sqrt(var + EPSILON) and clips them
    to [-clip, clip]. Returns (the new state, the scaled rewards [T, A])."""
    returns, each = discounted_returns(state.returns, rewards, ended, gamma)
    stats = update(state.stats, each, active)
    scaled = jnp.clip(rewards / jnp.sqrt(stats.var + EPSILON), -clip, clip)
    return ReturnScale(returns, stats), scaled

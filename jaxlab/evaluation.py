"""Plays a trained policy on fresh envs and reports the mean episode statistics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxlab
from jaxlab.policy import zero_carry
from jaxlab.rollout import EpisodeStats, device_mask, make_act, to_device


def play(trainer, steps: int, num_envs: int | None = None, seed: int = 12345,
         deterministic: bool = True) -> dict:
    """Runs ``trainer``'s current policy for ``steps`` steps on ``num_envs`` new envs (default: as many
    as in training) seeded with ``seed``; returns {"episodes": n, statistic: mean, ...} over the
    episodes that ended. ``deterministic`` takes the mode of each action distribution."""
    config = trainer.config
    act = jax.jit(make_act(trainer.policy, trainer.spec, deterministic=deterministic))
    stats = EpisodeStats(trainer.env.kind.log_names)
    with jaxlab.make(config.env_name, num_envs=num_envs or config.vec.num_envs, seed=seed, **config.env) as env:
        carry = zero_carry(env.num_agents, config.policy.hidden_size)
        obs = env.reset()
        reset = np.ones(env.num_agents, bool)
        no_truncation = jnp.zeros(env.num_agents, bool)
        key = jax.random.PRNGKey(seed)
        for t in range(steps):
            device_obs = to_device(obs)  # also the (unused) final observation: nothing is truncated here
            carry, action, _, _, _ = act(trainer.state.params, carry, device_obs, reset, device_obs,
                                         no_truncation, key, t, device_mask(env))
            obs, _, terminals, truncations, info = env.step(np.asarray(action))
            reset = terminals | truncations
            if info:
                stats.add(info)
    return stats.take()

"""Plays a trained policy on fresh envs: episode returns and lengths, the env's statistics, and an
optional per-step callback (text rendering)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxlab
from jaxlab.agent.policy import zero_carry
from jaxlab.train.rollout import EpisodeStats, device_mask, make_act, to_device


def load_trainer(path: str | Path):
    """A Trainer built from the config saved in the checkpoint at ``path`` with its state loaded: the
    policy can be played from the path alone."""
    from jaxlab import checkpoint
    from jaxlab.config import config_from_toml
    from jaxlab.train.trainer import Trainer

    meta = checkpoint.read_meta(Path(path))
    trainer = Trainer(config_from_toml(meta["config"]))
    try:
        trainer.load_checkpoint(path, meta)
    except BaseException:
        trainer.close()
        raise
    return trainer


def play(trainer, steps: int | None = None, num_envs: int | None = None, seed: int = 12345,
         deterministic: bool = True, episodes: int | None = None,
         on_step: Callable[..., None] | None = None) -> dict:
    """Runs ``trainer``'s current policy on ``num_envs`` new envs (default: as many as in training)
    seeded with ``seed``, for ``steps`` steps or until ``episodes`` agent-episodes ended (whichever is
    given; with both, whichever comes first). ``deterministic`` takes the mode of each action
    distribution. ``on_step(t, observations [A, ...], actions [A, ...], rewards [A], ended [A] bool)``
    sees every step (the observations the actions were taken on).

    Returns {"episodes": n, statistic: mean, ...} (the env's statistics over the episodes that ended)
    and "returns", "lengths": float64 [n] per agent-episode in the order they ended (agent index
    breaking ties), cut to the first ``episodes`` when given."""
    if steps is None and episodes is None:
        raise ValueError("play needs steps or episodes")
    config = trainer.config
    act = jax.jit(make_act(trainer.policy, trainer.spec, deterministic=deterministic))
    stats = EpisodeStats(trainer.env.kind.log_names)
    returns, lengths = [], []
    with jaxlab.make(config.env_name, num_envs=num_envs or config.vec.num_envs, seed=seed, **config.env) as env:
        carry = zero_carry(env.num_agents, config.policy.hidden_size)
        obs = env.reset()
        reset = np.ones(env.num_agents, bool)
        no_truncation = jnp.zeros(env.num_agents, bool)
        running_return = np.zeros(env.num_agents)
        running_length = np.zeros(env.num_agents, np.int64)
        key = jax.random.PRNGKey(seed)
        t = 0
        while (steps is None or t < steps) and (episodes is None or len(returns) < episodes):
            device_obs = to_device(obs)  # also the (unused) final observation: nothing is truncated here
            carry, action, _, _, _ = act(trainer.state.params, carry, device_obs, reset, device_obs,
                                         no_truncation, key, t, device_mask(env))
            host_action = np.asarray(action)
            seen = obs.copy() if on_step is not None else None
            obs, rewards, terminals, truncations, info = env.step(host_action)
            reset = terminals | truncations
            if on_step is not None:
                on_step(t, seen, host_action, rewards, reset)
            running_return += rewards
            running_length += 1
            for agent in np.flatnonzero(reset):
                returns.append(running_return[agent])
                lengths.append(running_length[agent])
            running_return[reset] = 0.0
            running_length[reset] = 0
            if info:
                stats.add(info)
            t += 1
    result = stats.take()
    cut = episodes if episodes is not None else len(returns)
    result["returns"] = np.asarray(returns[:cut], np.float64)
    result["lengths"] = np.asarray(lengths[:cut], np.float64)
    return result

"""Shared test helpers."""

import numpy as np

import jaxlab

ENV_NAMES = ("cartpole", "pendulum", "memory", "target")


def rollout(name: str, steps: int, num_envs: int = 8, seed: int = 0, num_threads: int = 1,
            action_seed: int = 0, **params):
    """Steps ``name`` with seeded random actions; returns stacked copies of every output and the infos."""
    rng = np.random.default_rng(action_seed)
    with jaxlab.make(name, num_envs=num_envs, seed=seed, num_threads=num_threads, **params) as env:
        record = {"obs": [env.reset().copy()], "rewards": [], "terminals": [], "truncations": []}
        infos = []
        for _ in range(steps):
            obs, rewards, terminals, truncations, info = env.step(env.action_space.sample(rng, env.num_agents))
            record["obs"].append(obs.copy())
            record["rewards"].append(rewards.copy())
            record["terminals"].append(terminals.copy())
            record["truncations"].append(truncations.copy())
            infos.append(info)
    return {k: np.stack(v) for k, v in record.items()}, infos

"""Benchmarks that print figures (never asserted): C env stepping and steady training SPS.

`jaxlab bench ENV` runs both for one env with the resolved config; scripts/bench_env.py sweeps every
env and agent count, scripts/bench_train.py adds time-to-threshold.
"""

from __future__ import annotations

import time

import numpy as np

import jaxlab
from jaxlab.env import spaces_of
from jaxlab.env.library import constant


def env_steps_per_second(name: str, agents: int, seconds: float, threads: int = 1,
                         params: dict | None = None, library: str | None = None) -> tuple[float, float]:
    """(agent-steps/s, seconds per step call) of ``name`` with about ``agents`` agents and random
    actions through the Python API. Actions come from a pool of 64 batches drawn before timing, so the
    figure is the bridge and the env, not numpy's RNG. An env with an action mask gets random legal
    actions, drawn from each step's mask between the timed step calls."""
    params = params or {}
    num_envs = max(1, agents // spaces_of(name, library=library, **params).agents_per_env)
    threads = min(threads, num_envs, constant("MAX_CHUNKS"))
    with jaxlab.make(name, num_envs=num_envs, seed=0, num_threads=threads, library=library, **params) as env:
        rng = np.random.default_rng(0)
        if env.has_mask:
            return _masked_steps_per_second(env, rng, seconds)
        pool = [env.action_space.sample(rng, env.num_agents) for _ in range(64)]
        env.reset()
        for actions in pool:
            env.step(actions)
        calls = 0
        start = time.perf_counter()
        while True:
            for actions in pool:
                env.step(actions)
            calls += len(pool)
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return calls * env.num_agents / elapsed, elapsed / calls


def _masked_steps_per_second(env, rng: np.random.Generator, seconds: float) -> tuple[float, float]:
    """env_steps_per_second for an env with an action mask: each step's actions are uniform-ish random
    legal ones (the argmax of random bytes over the legal entries of each component), drawn untimed."""
    nvec = (env.action_space.n,) if env.action_space.shape == () else tuple(env.action_space.nvec)
    ends = np.cumsum((0, *nvec))
    pool = [rng.integers(1, 256, env.action_mask.shape, dtype=np.uint8) for _ in range(8)]

    def legal(i: int) -> np.ndarray:
        scores = pool[i % len(pool)] * env.action_mask
        actions = np.stack([scores[:, a:b].argmax(axis=1) for a, b in zip(ends[:-1], ends[1:])], axis=1)
        return actions.astype(np.int32).reshape(env.actions.shape)

    env.reset()
    for i in range(64):
        env.step(legal(i))
    calls, elapsed = 0, 0.0
    while elapsed < seconds:
        actions = legal(calls)
        tic = time.perf_counter()
        env.step(actions)
        elapsed += time.perf_counter() - tic
        calls += 1
    return calls * env.num_agents / elapsed, elapsed / calls


def steady_training(config, updates: int) -> dict:
    """Trains ``config`` for 1 + ``updates`` updates; returns the first update's seconds (compiles
    included), the steady SPS of the rest and their time split {env, policy, copy, learn, other} in
    seconds."""
    from jaxlab.run.loop import train_loop
    from jaxlab.train.trainer import Trainer

    with Trainer(config) as trainer:
        tic = time.perf_counter()
        train_loop(trainer, updates=1)
        first = time.perf_counter() - tic
        before = dict(trainer.timing)
        tic = time.perf_counter()
        train_loop(trainer, updates=updates)
        elapsed = time.perf_counter() - tic
        split = {k: trainer.timing[k] - before[k] for k in trainer.timing}
        split["other"] = elapsed - sum(split.values())
        return {"first_update_s": first, "sps": updates * trainer.sizes.batch_size / elapsed,
                "elapsed_s": elapsed, "split": split, "sizes": trainer.sizes, "num_params": trainer.num_params}


def report_training(config, updates: int) -> str:
    result = steady_training(config, updates)
    split = ", ".join(f"{k} {v:.2f} s" for k, v in result["split"].items())
    return (f"train {config.env_name}: {result['sizes'].describe()}; {result['num_params']:,} params, "
            f"lstm={config.policy.lstm}, precision {config.device.precision}\n"
            f"  first update (compiles included) {result['first_update_s']:.2f} s; steady "
            f"{result['sps']:,.0f} SPS over {updates} updates ({split} of {result['elapsed_s']:.2f} s)")

"""Agent-steps per second of every C env with random actions, through the Python API (the ctypes
call, action copy and checks included), and the per-call overhead at one agent.

    python scripts/bench_env.py [--seconds 1.0] [--agents 1024 16384] [--threads 1]

Actions are drawn once per env before timing (a pool of 64 batches cycled), so the figure is the
bridge and the env, not numpy's RNG.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import jaxlab
from jaxlab.env import env_types


def steps_per_second(name: str, agents: int, seconds: float, threads: int = 1) -> tuple[float, float]:
    """(agent-steps/s, seconds per step call) for ``name`` with about ``agents`` agents."""
    probe = jaxlab.make(name, num_envs=1)
    num_envs = max(1, agents // probe.agents_per_env)
    probe.close()
    with jaxlab.make(name, num_envs=num_envs, seed=0, num_threads=threads) as env:
        rng = np.random.default_rng(0)
        pool = [env.action_space.sample(rng, env.num_agents) for _ in range(64)]
        env.reset()
        for i in range(64):
            env.step(pool[i])
        calls = 0
        start = time.perf_counter()
        while True:
            for i in range(64):
                env.step(pool[i])
            calls += 64
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        return calls * env.num_agents / elapsed, elapsed / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="timing window per measurement")
    parser.add_argument("--agents", type=int, nargs="+", default=[1024, 16384])
    parser.add_argument("--threads", type=int, default=1, help="C threads per VecEnv")
    parser.add_argument("--envs", nargs="+", default=list(env_types()))
    args = parser.parse_args()
    print(f"{'env':10} {'agents':>8} {'agent-steps/s':>15} {'us/call':>9}")
    for name in args.envs:
        for agents in args.agents:
            sps, per_call = steps_per_second(name, agents, args.seconds, args.threads)
            print(f"{name:10} {agents:>8} {sps / 1e6:>13.2f}M {per_call * 1e6:>9.2f}")
    for name in args.envs:
        probe = jaxlab.make(name)
        apa = probe.agents_per_env
        probe.close()
        _, per_call = steps_per_second(name, apa, args.seconds)
        print(f"per-call overhead, {name} with 1 env ({apa} agent{'s' * (apa > 1)}): "
              f"{per_call * 1e6:.2f} us/step")


if __name__ == "__main__":
    main()

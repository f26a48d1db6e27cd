"""Agent-steps per second of every C env with random actions, through the Python API (the ctypes
call, action copy and checks included), and the per-call overhead at one agent.

    python scripts/bench_env.py [--seconds 1.0] [--agents 1024 16384] [--threads 1]

A sweep over every env and agent count of what `jaxlab bench ENV` measures for one (see
jaxlab.run.bench.env_steps_per_second).
"""

from __future__ import annotations

import argparse

from jaxlab.env import env_types, spaces_of
from jaxlab.run.bench import env_steps_per_second


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
            sps, per_call = env_steps_per_second(name, agents, args.seconds, args.threads)
            print(f"{name:10} {agents:>8} {sps / 1e6:>13.2f}M {per_call * 1e6:>9.2f}")
    for name in args.envs:
        apa = spaces_of(name).agents_per_env
        _, per_call = env_steps_per_second(name, apa, args.seconds)
        print(f"per-call overhead, {name} with 1 env ({apa} agent{'s' * (apa > 1)}): "
              f"{per_call * 1e6:.2f} us/step")


if __name__ == "__main__":
    main()

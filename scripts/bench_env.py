"""Agent-steps per second of every C env with random actions, through the Python API (the ctypes
call, action copy and checks included), and the per-call overhead at one agent.

    python scripts/bench_env.py [--seconds 1.0] [--agents 1024 16384] [--threads 1]
    python scripts/bench_env.py --sdk              # each built-in header also built as a user's env
    python scripts/bench_env.py --drone            # only the drone swarm (examples/envs/drone.h)

A sweep over every env and agent count of what `jaxlab bench ENV` measures for one (see
jaxlab.run.bench.env_steps_per_second). With --sdk, each env's header is also built the way a user's
env is (`jaxlab build-env`, renamed NAME_sdk) and both are measured, alternating, side by side.

The drone swarm (an example env on the env path, built from its header on first use) is measured as
the drone lab runs it: 1,536 agents = 24 arenas x 64 drones, random motor commands (so about 4% of
the drones crash and respawn in every step), on one core and on all cores (C threads); each figure
both per wall-clock second and per CPU-second of the process (the one to quote on a shared machine:
other jobs' load does not count), the best of --repeats. Then its neighbour search, the uniform grid
against all pairs, at 64 drones per arena and at 256 (a 32 m arena: the same density).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path

from jaxlab.env import env_type, env_types, is_python_env, spaces_of
from jaxlab.env.sdk import build_library, include_dir
from jaxlab.run.bench import at_least, env_steps_per_second, positive_number


def sdk_copy(name: str, folder: Path) -> str:
    """The built-in env ``name``'s header built as a user's env called NAME_sdk; the library's path."""
    text = re.sub(r'#include "\.\./(\w+\.h)"', r'#include "\1"', (include_dir() / "envs" / f"{name}.h").read_text())
    camel = name.capitalize()
    text = re.sub(rf"\b{name}_", f"{name}_sdk_", text)
    text = re.sub(rf"\b{camel}(\w*)", rf"{camel}Sdk\1", text).replace(f"CENV_ENV({name},", f"CENV_ENV({name}_sdk,")
    header = folder / f"{name}_sdk.h"
    header.write_text(text)
    return str(build_library([header], folder / f"lib{name}_sdk.so"))


def compare_sdk(names: list[str], agents: list[int], seconds: float) -> None:
    """In-tree and SDK-built speed of each env, alternating three times; the best of each."""
    with tempfile.TemporaryDirectory() as folder:
        print(f"{'env':10} {'agents':>8} {'in-tree':>10} {'SDK-built':>10} {'ratio':>6}")
        for name in names:
            library = sdk_copy(name, Path(folder))
            for n in agents:
                best = {"tree": 0.0, "sdk": 0.0}
                for _ in range(3):
                    best["tree"] = max(best["tree"], env_steps_per_second(name, n, seconds)[0])
                    best["sdk"] = max(best["sdk"], env_steps_per_second(f"{name}_sdk", n, seconds, library=library)[0])
                print(f"{name:10} {n:>8} {best['tree'] / 1e6:>9.2f}M {best['sdk'] / 1e6:>9.2f}M "
                      f"{best['sdk'] / best['tree']:>6.2f}")


def best_of(repeats: int, name: str, agents: int, seconds: float, threads: int = 1, params: dict | None = None,
            clock=time.perf_counter) -> float:
    """The best agent-steps/s of ``repeats`` measurements."""
    return max(env_steps_per_second(name, agents, seconds, threads, params=params, clock=clock)[0]
               for _ in range(repeats))


def drone_figures(seconds: float, repeats: int) -> None:
    """The drone swarm at the lab's 1,536 agents on one core and on all cores, and its neighbour search."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    print(f"drone swarm, 24 arenas x 64 drones = 1,536 agents, random motor commands ({cores} cores here):")
    print(f"  {'threads':>8} {'per wall second':>17} {'per CPU-second':>16}")
    for threads in sorted({1, cores}):
        wall = best_of(repeats, "drone", 1536, seconds, threads)
        cpu = best_of(repeats, "drone", 1536, seconds, threads, clock=time.process_time)
        print(f"  {threads:>8} {wall / 1e6:>16.2f}M {cpu / 1e6:>15.2f}M")
    print("  neighbour search, one core, per CPU-second (same results either way):")
    print(f"  {'drones per arena':>17} {'arena':>6} {'grid':>8} {'all pairs':>10}")
    for drones, arena in ((64, 16.0), (256, 32.0)):
        agents = 1536 if drones == 64 else 1536 * 2
        figures = [best_of(repeats, "drone", agents, seconds, 1, clock=time.process_time,
                           params={"num_drones": drones, "arena_size": arena, "neighbor_grid": grid}) for grid in (1, 0)]
        print(f"  {drones:>17} {arena:>5g}m {figures[0] / 1e6:>7.2f}M {figures[1] / 1e6:>9.2f}M")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=positive_number, default=1.0, help="timing window per measurement")
    parser.add_argument("--agents", type=at_least(1), nargs="+", default=[1024, 16384])
    parser.add_argument("--threads", type=at_least(1), default=1, help="C threads per VecEnv")
    parser.add_argument("--envs", nargs="+", help="envs to measure (default: every built-in env, then the drone "
                        "swarm's figures, which --envs leaves out unless it names drone)")
    parser.add_argument("--sdk", action="store_true", help="compare each env built in-tree and built as a user's env")
    parser.add_argument("--drone", action="store_true", help="only the drone swarm's figures")
    parser.add_argument("--repeats", type=at_least(1), default=3, help="drone figures: best of this many measurements")
    args = parser.parse_args()
    with_drone_figures = args.envs is None or "drone" in args.envs
    args.envs = args.envs or list(env_types())
    for name in (n for n in args.envs if not is_python_env(n)):
        try:
            env_type(name)  # a built-in env or a header on the env path
        except ValueError as err:  # unknown: the known ones and the closest name
            parser.error(f"--envs {name}: {err}")
    if args.sdk:
        compare_sdk(args.envs, args.agents, args.seconds)
        return
    if args.drone:
        drone_figures(args.seconds, args.repeats)
        return
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
    if with_drone_figures:
        drone_figures(args.seconds, args.repeats)


if __name__ == "__main__":
    main()

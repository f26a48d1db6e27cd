"""Agent-steps per second of every C env with random actions, through the Python API (the ctypes
call, action copy and checks included), and the per-call overhead at one agent.

    python scripts/bench_env.py [--seconds 1.0] [--agents 1024 16384] [--threads 1]
    python scripts/bench_env.py --sdk              # each built-in header also built as a user's env

A sweep over every env and agent count of what `jaxlab bench ENV` measures for one (see
jaxlab.run.bench.env_steps_per_second). With --sdk, each env's header is also built the way a user's
env is (`jaxlab build-env`, renamed NAME_sdk) and both are measured, alternating, side by side.
"""

from __future__ import annotations

import argparse

import re
import tempfile
from pathlib import Path

from jaxlab.env import env_types, spaces_of
from jaxlab.env.sdk import build_library, include_dir
from jaxlab.run.bench import env_steps_per_second


def sdk_copy(name: str, folder: Path) -> str:
    """The built-in env ``name``'s header built as a user's env called NAME_sdk; the library's path."""
    text = (include_dir() / "envs" / f"{name}.h").read_text().replace('#include "../core.h"', '#include "core.h"')
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="timing window per measurement")
    parser.add_argument("--agents", type=int, nargs="+", default=[1024, 16384])
    parser.add_argument("--threads", type=int, default=1, help="C threads per VecEnv")
    parser.add_argument("--envs", nargs="+", default=list(env_types()))
    parser.add_argument("--sdk", action="store_true", help="compare each env built in-tree and built as a user's env")
    args = parser.parse_args()
    if args.sdk:
        compare_sdk(args.envs, args.agents, args.seconds)
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


if __name__ == "__main__":
    main()

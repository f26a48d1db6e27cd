"""`jaxlab bench ENV`: C env stepping and steady training speed for the resolved config."""

from __future__ import annotations

import argparse
from dataclasses import replace

from jaxlab.cli.common import LAYERS, resolve


def bench_command(args: argparse.Namespace) -> int:
    """C env stepping and steady training SPS for ENV with the resolved config."""
    from jaxlab.run.bench import env_steps_per_second, report_training

    resolved = resolve(args)
    config, sizes = resolved.config, resolved.sizes
    print(f"device preset {config.preset} ({resolved.preset_reason}); {resolved.backend}")
    for threads in sorted({1, config.vec.num_threads}):
        sps, per_call = env_steps_per_second(config.env_name, sizes.num_agents, args.seconds, threads, config.env)
        print(f"env {config.env_name}: {sizes.num_agents:,} agents, {threads} C thread(s): "
              f"{sps / 1e6:,.2f}M agent-steps/s, {per_call * 1e6:,.1f} us per step call (random actions)")
    timed = replace(config, train=replace(config.train, total_timesteps=sizes.batch_size * (args.updates + 1)))
    print(report_training(timed, args.updates))
    return 0



def add_commands(add) -> None:
    """Registers `jaxlab bench` with ``add`` (see common.command_adder)."""
    bench = add("bench", "measure env stepping and training speed",
                f"Measure C env agent-steps/s and steady training SPS (first update excluded) for ENV "
                f"with the resolved config; prints figures, asserts nothing. {LAYERS}",
                bench_command, with_config=True)
    bench.add_argument("--updates", type=int, default=3, help="timed updates after the first (default 3)")
    bench.add_argument("--seconds", type=float, default=1.0, help="env-stepping timing window (default 1)")

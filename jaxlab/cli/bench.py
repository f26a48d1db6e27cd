"""`jaxlab bench ENV`: C env stepping and steady training speed for the resolved config."""

from __future__ import annotations

import argparse
import math

from jaxlab.cli.common import (BENCH_SEVERAL, LAYERS, config_help, fail, number, refuse_dist_flags, resolve,
                               whole_number)


#: the end of the line refusing a --dist.* flag (bench times one process; it used to run alone with one, silently)
BENCH_DIST_REFUSAL = f"jaxlab bench runs as one process, so it takes no --dist.* flag; drop it, and {BENCH_SEVERAL}"


def bench_command(args: argparse.Namespace) -> int:
    """C env stepping and steady training SPS for ENV with the resolved config."""
    from jaxlab.config import ConfigError
    from jaxlab.run.bench import report_env, report_training

    if args.updates < 1:
        return fail("bench", ConfigError(f"--updates {args.updates} must be at least 1 (the timed updates after "
                                         "the first), e.g. --updates 3"))
    if not (math.isfinite(args.seconds) and args.seconds > 0):  # inf stepped the env for ever
        return fail("bench", ConfigError(f"--seconds {args.seconds} must be a finite number > 0 (the env-stepping "
                                         "timing window), e.g. --seconds 1"))
    refuse_dist_flags(args.flags, BENCH_DIST_REFUSAL)
    # the run's length: --updates after the compiling one (train.total_timesteps: ignored, with a warning)
    resolved = resolve(args, updates=args.updates + 1)
    config, sizes = resolved.config, resolved.sizes
    import jax

    memory = f"; {resolved.backend}" if jax.default_backend() != "cpu" else ""  # XLA's GPU memory options
    print(f"device preset {config.preset} ({resolved.preset_reason}){memory}")
    for line in report_env(config.env_name, sizes.num_agents, args.seconds, sizes.num_threads, config.env,
                           config.env_library or None):
        print(line)
    print(report_training(config, args.updates))
    return 0


def add_commands(add) -> None:
    """Registers `jaxlab bench` with ``add`` (see common.command_adder)."""
    bench = add("bench", "measure env stepping and training speed",
                f"Measure C env agent-steps/s and steady training SPS (first update excluded) for ENV "
                f"with the resolved config; prints figures, asserts nothing. {LAYERS}",
                bench_command, with_config=True)
    bench.add_argument("--updates", type=whole_number, default=3, help="timed updates after the first (default 3): the "
                       "run's length, whatever train.total_timesteps says")
    bench.add_argument("--seconds", type=number, default=1.0, help="env-stepping timing window (default 1)")
    bench.epilog = config_help(without=("dist",))  # refuse_dist_flags

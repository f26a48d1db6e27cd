"""The `jaxlab` command: one module per command family (train.py: train/eval; inspect.py: envs, config,
presets, runs, plot; bench.py: bench; sdk.py: sdk, new-env, build-env; sweep.py: sweep), common.py for
what they share."""

from __future__ import annotations

import argparse
import os
import sys

from jaxlab.cli import bench, inspect, sdk, sweep, train
from jaxlab.cli.common import command_adder, fail

FAMILIES = (inspect, train, bench, sdk, sweep)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxlab", description="JAX LSTM-PPO over batched C environments.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add = command_adder(commands)
    for family in FAMILIES:
        family.add_commands(add)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if not args.takes_flags and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.flags = rest
    from jaxlab.checkpoint import CheckpointError
    from jaxlab.config import ConfigError

    try:
        return args.run(args)
    except (ConfigError, CheckpointError) as err:  # bad config or input: one line, no traceback
        return fail(args.command, err)
    except KeyboardInterrupt:  # Ctrl-C outside a run's own handling (imports, a command without one)
        print(f"jaxlab {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `jaxlab config ENV | head`: the reader left; not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 0


"""The `jaxlab` command: one module per command family (train.py: train/eval; inspect.py: envs, config,
presets, runs, plot; bench.py: bench; sdk.py: sdk, new-env, build-env; sweep.py: sweep), common.py for
what they share."""

from __future__ import annotations

import argparse
import os
import re
import sys

from jaxlab.cli import bench, inspect, sdk, sweep, train
from jaxlab.cli.common import command_adder, fail

FAMILIES = (inspect, train, bench, sdk, sweep)


def build_parser() -> argparse.ArgumentParser:
    from jaxlab import __version__

    parser = argparse.ArgumentParser(prog="jaxlab", description="JAX LSTM-PPO over batched C environments.")
    parser.add_argument("--version", action="version", version=f"jaxlab {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add = command_adder(commands)
    for family in FAMILIES:
        family.add_commands(add)
    return parser


CONFIG_FLAG = re.compile(r"--[A-Za-z_][\w-]*\.[\w.-]+(=.*)?", re.DOTALL)


def config_flags_last(argv: list[str]) -> list[str]:
    """``argv`` with the config flags (``--section.key value`` or ``--section.key=value``) moved after
    everything else, in their order: ``jaxlab train --train.seed 3 memory`` is ``jaxlab train memory
    --train.seed 3`` (argparse would take the flag's value for ENV). A flag followed by another option
    keeps no value (parse_flags says it needs one)."""
    flags, others = [], []
    i = 0
    while i < len(argv):
        token = argv[i]
        if CONFIG_FLAG.fullmatch(token):
            flags.append(token)
            if "=" not in token and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                flags.append(argv[i + 1])
                i += 1
        else:
            others.append(token)
        i += 1
    return others + flags


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(config_flags_last(sys.argv[1:] if argv is None else list(argv)))
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


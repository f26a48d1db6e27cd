"""The `jaxlab` command: `jaxlab envs`, `jaxlab train ENV`, ... (one function per subcommand)."""

from __future__ import annotations

import argparse
import sys


def envs_command(args: argparse.Namespace) -> int:
    """Prints every C env with its spaces, parameters and episode statistics."""
    import jaxlab
    from jaxlab.env import env_types

    for kind in env_types().values():
        with jaxlab.make(kind.name) as env:
            agents = f", {env.agents_per_env} agents per env by default" if env.agents_per_env > 1 else ""
            print(f"{kind.name}: {kind.description}")
            print(f"  observation {env.observation_space}  action {env.action_space}{agents}"
                  f"{'  (action mask)' if env.has_mask else ''}")
        for p in kind.params:
            kind_name = "int" if p.is_int else "float"
            print(f"  --env.{p.name} {kind_name} = {p.default_value:g}  in [{p.low:g}, {p.high:g}]  {p.help}")
        print(f"  statistics: {', '.join(kind.log_names)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxlab", description="JAX LSTM-PPO over batched C environments.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    envs = commands.add_parser("envs", help="list the environments, their spaces and parameters",
                               description="List the C environments, their spaces and parameters.")
    envs.set_defaults(run=envs_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

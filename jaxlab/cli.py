"""The `jaxlab` command: `jaxlab envs`, `jaxlab train ENV`, ... (one function per subcommand)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


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


def config_help() -> str:
    """Every config key with its default (from configs/default.toml) and description, for --help."""
    from jaxlab.config import SECTIONS, configs_dir, field_help, read_toml, toml_value

    defaults = read_toml(configs_dir() / "default.toml")
    lines = ["config flags (--section.key value; dashes or underscores; env defaults in configs/envs/):",
             "  --env.NAME VALUE            a parameter of the env (see `jaxlab envs`)"]
    for section, cls in SECTIONS.items():
        for name, text in field_help(cls).items():
            default = defaults.get(section, {}).get(name, getattr(cls(), name))
            flag = f"--{section}.{name.replace('_', '-')}"
            lines.append(f"  {flag:<27} {text} (default {toml_value(default)})")
    return "\n".join(lines)


def train_command(args: argparse.Namespace) -> int:
    """Trains ARGS.env with the layered config; prints one line per second and a summary."""
    from jaxlab.config import ConfigError, derive_sizes, load_config

    try:
        config, _ = load_config(args.env, config_file=args.config, flags=args.flags)
        import jaxlab

        with jaxlab.make(config.env_name, **config.env) as probe:
            agents_per_env = probe.agents_per_env
        sizes = derive_sizes(config, agents_per_env)
    except (ConfigError, ValueError, TypeError) as err:
        print(f"jaxlab train: error: {err}", file=sys.stderr)
        return 2
    from jaxlab.trainer import train

    run_dir = args.run_dir or f"runs/{config.env_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        (Path(run_dir) / ".write-test").touch()
        (Path(run_dir) / ".write-test").unlink()
    except OSError as err:
        print(f"jaxlab train: error: cannot write the run dir {run_dir!r} ({err.strerror}); "
              "pass a writable --run-dir DIR", file=sys.stderr)
        return 2
    print(f"jaxlab train {config.env_name}: {sizes.describe(config, agents_per_env)}; run dir {run_dir}")
    last_print = [0.0]

    def show(record: dict) -> None:
        final = record["update"] == sizes.num_updates
        if not final and record["wall_time"] - last_print[0] < 1.0:
            return
        last_print[0] = record["wall_time"]
        episode = (f"return {record['episode_return']:8.2f}  length {record['episode_length']:7.1f}"
                   if record["episodes"] else "no episode ended")
        print(f"update {record['update']:>5}/{sizes.num_updates}  step {record['global_step']:>10,}  "
              f"{record['wall_time']:6.1f}s  {record['sps']:>9,.0f} SPS  {episode}  "
              f"entropy {record['entropy']:.3f}  kl {record['approx_kl']:.4f}", flush=True)

    try:
        records = train(config, run_dir=run_dir, on_log=show)
    except KeyboardInterrupt:
        print(f"interrupted; the metrics so far are in {run_dir}/metrics.jsonl", file=sys.stderr)
        return 130
    ended = [r for r in records if r["episodes"]]
    if ended:
        print(f"done: {records[-1]['global_step']:,} steps in {records[-1]['wall_time']:.1f}s; "
              f"final mean return {ended[-1]['episode_return']:.2f}; metrics in {run_dir}/metrics.jsonl")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxlab", description="JAX LSTM-PPO over batched C environments.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    envs = commands.add_parser("envs", help="list the environments, their spaces and parameters",
                               description="List the C environments, their spaces and parameters.")
    envs.set_defaults(run=envs_command)
    train = commands.add_parser("train", help="train a policy on an env",
                                description="Train an LSTM-PPO policy on ENV. Config layers: "
                                "configs/default.toml, configs/envs/ENV.toml, --config FILE, then flags.",
                                epilog=config_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("env", metavar="ENV", help="environment name (see `jaxlab envs`)")
    train.add_argument("--config", metavar="FILE", help="a TOML file layered over the env's defaults")
    train.add_argument("--run-dir", metavar="DIR", help="where config.toml and metrics.jsonl go "
                       "(default runs/ENV-TIMESTAMP)")
    train.set_defaults(run=train_command)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command != "train" and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.flags = rest
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

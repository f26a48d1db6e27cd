"""The `jaxlab` command: `jaxlab envs`, `jaxlab train ENV`, ... (one function per subcommand)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple


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


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """ENV, --preset and --config, shared by every command that resolves a config."""
    parser.add_argument("env", metavar="ENV", help="environment name (see `jaxlab envs`)")
    parser.add_argument("--preset", default="auto", metavar="NAME",
                        help="accelerator preset: auto (default: picked from the devices), "
                        "cpu, gpu, a100, h100 (see `jaxlab presets`)")
    parser.add_argument("--config", metavar="FILE", help="a TOML file layered over the env's defaults and preset")


class Resolved(NamedTuple):
    config: Any
    sources: dict
    sizes: Any
    preset_reason: str
    backend: str


def resolve(args: argparse.Namespace) -> Resolved:
    """The config of ARGS (preset, --config, flags) with its sizes checked; ConfigError otherwise.
    Nothing is compiled; JAX's backend is started (to see the devices) with its memory options set."""
    import jaxlab
    from jaxlab import presets
    from jaxlab.config import derive_sizes, load_config, read_preset

    if args.preset == "auto":
        backend = presets.prepare_backend(None)
        name, reason = presets.select_preset(presets.current_devices())
        config, sources = load_config(args.env, config_file=args.config, flags=args.flags, preset=name)
    else:
        read_preset(args.preset)  # an unknown name fails here, before JAX starts
        config, sources = load_config(args.env, config_file=args.config, flags=args.flags, preset=args.preset)
        backend = presets.prepare_backend(config.device.memory_fraction)
        presets.check_preset_fits(args.preset, presets.current_devices())
        reason = "chosen with --preset"
    with jaxlab.make(config.env_name, **config.env) as probe:
        agents_per_env = probe.agents_per_env
    return Resolved(config, sources, derive_sizes(config, agents_per_env), reason, backend)


def fail(command: str, err: Exception) -> int:
    print(f"jaxlab {command}: error: {err}", file=sys.stderr)
    return 2


def config_command(args: argparse.Namespace) -> int:
    """Prints the resolved config as TOML, each value with the layer that set it, and the sizes."""
    from jaxlab.config import ConfigError, to_toml
    from jaxlab.env import env_type

    try:
        resolved = resolve(args)
    except (ConfigError, ValueError, TypeError) as err:
        return fail("config", err)
    print(f"# {resolved.config.env_name}, preset {resolved.config.preset} ({resolved.preset_reason})")
    print(f"# {resolved.sizes.describe()}")
    section = ""
    for line in to_toml(resolved.config).splitlines():
        if line == "[env]":
            print(line)
            for param in env_type(resolved.config.env_name).params:
                if param.name not in resolved.config.env:
                    print(f"# {param.name} = {param.default_value:g}".ljust(40) + " # the env's C default")
            section = "env"
            continue
        if line.startswith("["):
            section = line.strip("[]")
        key = line.partition(" = ")[0]
        source = resolved.sources.get(f"{section}.{key}") if section and " = " in line else None
        if section and " = " in line:
            source = source or "built-in default"
            print(f"{line:<40} # {source}")
        else:
            print(line)
    return 0


def presets_command(args: argparse.Namespace) -> int:
    """Lists the presets and the one `auto` picks on this machine."""
    from jaxlab import presets

    presets.prepare_backend(None)
    print(presets.describe_presets(presets.current_devices()))
    return 0


def bench_command(args: argparse.Namespace) -> int:
    """C env stepping and steady training SPS for ENV with the resolved config."""
    from jaxlab.bench import env_steps_per_second, report_training
    from jaxlab.config import ConfigError

    try:
        resolved = resolve(args)
    except (ConfigError, ValueError, TypeError) as err:
        return fail("bench", err)
    config, sizes = resolved.config, resolved.sizes
    print(f"device preset {config.preset} ({resolved.preset_reason}); {resolved.backend}")
    for threads in sorted({1, config.vec.num_threads}):
        sps, per_call = env_steps_per_second(config.env_name, sizes.num_agents, args.seconds, threads, config.env)
        print(f"env {config.env_name}: {sizes.num_agents:,} agents, {threads} C thread(s): "
              f"{sps / 1e6:,.2f}M agent-steps/s, {per_call * 1e6:,.1f} us per step call (random actions)")
    timed = replace(config, train=replace(config.train, total_timesteps=sizes.batch_size * (args.updates + 1)))
    print(report_training(timed, args.updates))
    return 0


def train_command(args: argparse.Namespace) -> int:
    """Trains ARGS.env with the layered config; prints one line per second and a summary."""
    from jaxlab.config import ConfigError

    try:
        resolved = resolve(args)
    except (ConfigError, ValueError, TypeError) as err:
        return fail("train", err)
    config, sizes = resolved.config, resolved.sizes
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
    print(f"jaxlab train {config.env_name}: {sizes.describe()}; preset {config.preset} "
          f"({resolved.preset_reason}); run dir {run_dir}")
    if sizes.num_updates < 10:
        print(f"note: only {sizes.num_updates} update(s) of {sizes.batch_size:,} steps; PPO needs tens of "
              f"updates: raise --train.total-timesteps (e.g. {50 * sizes.batch_size}) or use fewer envs")
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
    layers = ("Config layers, later ones winning: configs/default.toml, configs/envs/ENV.toml, "
              "configs/presets/PRESET.toml, --config FILE, then flags.")

    def command(name: str, summary: str, description: str, run, with_config: bool = False):
        sub = commands.add_parser(name, help=summary, description=description,
                                  epilog=config_help() if with_config else None,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.set_defaults(run=run, takes_flags=with_config)
        if with_config:
            add_config_arguments(sub)
        return sub

    command("envs", "list the environments, their spaces and parameters",
            "List the C environments, their spaces and parameters.", envs_command)
    train = command("train", "train a policy on an env", f"Train an LSTM-PPO policy on ENV. {layers}",
                    train_command, with_config=True)
    train.add_argument("--run-dir", metavar="DIR", help="where config.toml and metrics.jsonl go "
                       "(default runs/ENV-TIMESTAMP)")
    command("config", "print the resolved config, where each value came from, and the sizes",
            f"Print the resolved config of ENV as TOML (usable with --config), each value commented "
            f"with the layer that set it, and the derived sizes. {layers}", config_command, with_config=True)
    command("presets", "list the accelerator presets and the one auto picks here",
            "List the presets in configs/presets/ and the one `--preset auto` picks on this machine.",
            presets_command)
    bench = command("bench", "measure env stepping and training speed",
                    f"Measure C env agent-steps/s and steady training SPS (first update excluded) for ENV "
                    f"with the resolved config; prints figures, asserts nothing. {layers}",
                    bench_command, with_config=True)
    bench.add_argument("--updates", type=int, default=3, help="timed updates after the first (default 3)")
    bench.add_argument("--seconds", type=float, default=1.0, help="env-stepping timing window (default 1)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if not args.takes_flags and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.flags = rest
    try:
        return args.run(args)
    except BrokenPipeError:  # `jaxlab config ENV | head`: the reader left; not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 0


if __name__ == "__main__":
    sys.exit(main())

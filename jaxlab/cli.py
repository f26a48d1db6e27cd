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
    resume: Path | None = None   # a checkpoint, or a checkpoints/ directory to take the newest good one of
    changes: tuple = ()          # allowed config changes against the checkpoint ("key: old -> new")


def warn(message: str) -> None:
    print(f"jaxlab: {message}", file=sys.stderr, flush=True)


def resolve(args: argparse.Namespace) -> Resolved:
    """The config of ARGS (preset, --config, flags) with its sizes checked; ConfigError (or
    CheckpointError for --resume) otherwise, which main() reports with exit status 2.
    Nothing is compiled; JAX's backend is started (to see the devices) with its memory options set."""
    import jaxlab
    from jaxlab import presets
    from jaxlab.config import ConfigError, derive_sizes, load_config, read_preset

    resume, changes = None, ()
    if getattr(args, "resume", None):
        from jaxlab.checkpoint import read_meta
        from jaxlab.run import find_checkpoint, newest_usable, resume_config

        if args.preset != "auto":
            raise ConfigError("--preset cannot be combined with --resume (the checkpoint's config is the base); "
                              "pass the values you want to change as flags")
        resume = find_checkpoint(args.resume, args.env)
        first, _ = newest_usable(resume, read_meta, warn)
        config, changes = resume_config(first, args.config, args.flags)
        if config.env_name != args.env:
            raise ConfigError(f"--resume {args.resume} is a run of {config.env_name!r}, not {args.env!r}; "
                              f"run `jaxlab train {config.env_name} --resume {args.resume}`")
        backend = presets.prepare_backend(config.device.memory_fraction)
        reason, sources = "as saved in the checkpoint", {}
    elif args.preset == "auto":
        backend = presets.prepare_backend(None)
        name, reason = presets.select_preset(presets.current_devices())
        config, sources = load_config(args.env, config_file=args.config, flags=args.flags, preset=name)
    else:
        read_preset(args.preset)  # an unknown name fails here, before JAX starts
        config, sources = load_config(args.env, config_file=args.config, flags=args.flags, preset=args.preset)
        backend = presets.prepare_backend(config.device.memory_fraction)
        presets.check_preset_fits(args.preset, presets.current_devices())
        reason = "chosen with --preset"
    try:
        with jaxlab.make(config.env_name, **config.env) as probe:
            agents_per_env = probe.agents_per_env
    except (ValueError, TypeError) as err:  # an env parameter out of range or of the wrong type
        raise ConfigError(str(err)) from None
    return Resolved(config, sources, derive_sizes(config, agents_per_env), reason, backend, resume, tuple(changes))


def fail(command: str, err: Exception) -> int:
    print(f"jaxlab {command}: error: {err}", file=sys.stderr)
    return 2


def config_command(args: argparse.Namespace) -> int:
    """Prints the resolved config as TOML, each value with the layer that set it, and the sizes."""
    from jaxlab.config import to_toml
    from jaxlab.env import env_type

    resolved = resolve(args)
    print(f"# {resolved.config.env_name}, preset {resolved.config.preset} ({resolved.preset_reason})")
    print(f"# {resolved.sizes.describe()}")
    section = ""
    for line in to_toml(resolved.config).splitlines():
        if line.startswith("["):
            section = line.strip("[]")
            print(line)
            if section == "env":
                for param in env_type(resolved.config.env_name).params:
                    if param.name not in resolved.config.env:
                        print(f"# {param.name} = {param.default_value:g}".ljust(40) + " # the env's C default")
        elif section and " = " in line:
            source = resolved.sources.get(f"{section}.{line.partition(' = ')[0]}", "built-in default")
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


def train_command(args: argparse.Namespace) -> int:
    """Trains ARGS.env (or resumes a run) with checkpoints; prints progress and where things went.
    Exit status: 0 done or stopped by SIGTERM after saving, 130 stopped by SIGINT after saving, 1 the
    run stopped on an error (a checkpoint that cannot be written, a NaN loss), 2 bad config or input."""
    from jaxlab.checkpoint import CheckpointError
    from jaxlab.config import ConfigError

    resolved = resolve(args)
    config, sizes = resolved.config, resolved.sizes
    if resolved.resume is not None:
        run_dir = args.run_dir or str(resume_run_dir(resolved.resume))
    else:
        run_dir = args.run_dir or f"runs/{config.env_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    for directory in (Path(run_dir), Path(run_dir) / "checkpoints"):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / ".write-test").touch()
            (directory / ".write-test").unlink()
        except OSError as err:
            print(f"jaxlab train: error: cannot write {str(directory)!r} ({err.strerror}); "
                  "pass a writable --run-dir DIR", file=sys.stderr)
            return 2
    print(f"jaxlab train {config.env_name}: {sizes.describe()}; preset {config.preset} "
          f"({resolved.preset_reason}); run dir {run_dir}")
    for change in resolved.changes:
        print(f"resume: applying the changed {change}")
    if sizes.num_updates < 10:
        print(f"note: only {sizes.num_updates} update(s) of {sizes.batch_size:,} steps; PPO needs tens of "
              f"updates: raise --train.total-timesteps (e.g. {50 * sizes.batch_size}) or use fewer envs")
    from jaxlab.run import train_run

    observers = RunObservers(config, sizes, run_dir)
    try:
        result = train_run(config, run_dir, resume=resolved.resume, on_log=observers, warn=warn,
                           notes=args.notes, on_start=observers.start)
    except KeyboardInterrupt:
        observers.close()
        print(f"interrupted; the metrics so far are in {run_dir}/metrics.jsonl", file=sys.stderr)
        return 130
    except (ConfigError, CheckpointError) as err:
        observers.close()
        return fail("train", err)
    observers.close()
    where = f"checkpoint {result.checkpoint}" if result.checkpoint else "no checkpoint"
    if result.error:
        print(f"jaxlab train: error: {result.error}; {where}", file=sys.stderr)
        return 1
    if result.stopped:
        print(f"stopped by {result.stopped} after update {result.records[-1]['update'] if result.records else 0}; "
              f"saved {where}; continue with `jaxlab train {config.env_name} --resume {run_dir}`", file=sys.stderr)
        return 130 if result.stopped == "SIGINT" else 0
    ended = [r for r in result.records if r["episodes"]]
    if ended:
        print(f"done: {result.records[-1]['global_step']:,} steps in {result.records[-1]['wall_time']:.1f}s; "
              f"final mean return {ended[-1]['episode_return']:.2f}; metrics in {run_dir}/metrics.jsonl; {where}")
    elif not result.records:
        print(f"nothing to train: the checkpoint is at update {sizes.num_updates} of {sizes.num_updates}; "
              "raise --train.total-timesteps to continue")
    return 0


def resume_run_dir(location: Path) -> Path:
    """The run dir a checkpoint (RUN/checkpoints/N) or a checkpoints/ directory belongs to."""
    from jaxlab.checkpoint import is_checkpoint

    checkpoints = location.parent if is_checkpoint(location) else location
    return checkpoints.parent if checkpoints.name == "checkpoints" else checkpoints


class RunObservers:
    """The on_log of `jaxlab train`: warnings (jaxlab.alerts), the terminal reporter and wandb. An error
    in a reporter or logger is reported once and that one is dropped; training goes on."""

    def __init__(self, config, sizes, run_dir: str):
        self.config, self.sizes, self.run_dir = config, sizes, run_dir
        self.outputs: list = []
        self.reporter = None
        self.alerts = None

    def start(self, trainer) -> None:
        from jaxlab.alerts import Alerts
        from jaxlab.dashboard import RunInfo, make_reporter

        import jax

        device = jax.devices()[0]
        info = RunInfo(self.config.env_name, trainer.num_params, f"{device.platform}:{device.device_kind}",
                       self.config.preset, self.run_dir, self.sizes.num_updates,
                       self.sizes.num_updates * self.sizes.batch_size, trainer.env.kind.log_names)
        self.alerts = Alerts()
        self.reporter = make_reporter(self.config.log.dashboard, info, self.config.log.interval)
        self.outputs = [("terminal", self.reporter.update)]
        if self.config.log.wandb:
            from jaxlab.wandb_logger import WandbLogger

            self.wandb = WandbLogger(self.config, Path(self.run_dir), self.warn)
            self.outputs.append(("wandb", self.wandb.log))

    def warn(self, message: str) -> None:
        if self.reporter is not None:
            self.reporter.warn(message)
        else:
            warn(message)

    def __call__(self, record: dict) -> None:
        for message in self.alerts.check(record):
            self.warn(message)
        for name, output in list(self.outputs):
            try:
                output(record)
            except Exception as err:  # noqa: BLE001 - a logger must not stop training
                self.outputs.remove((name, output))
                self.warn(f"the {name} logger failed ({type(err).__name__}: {err}) and is off for this run")

    def close(self) -> None:
        if self.reporter is not None:
            self.reporter.close()
        wandb = getattr(self, "wandb", None)
        if wandb is not None:
            line = wandb.close()
            if line:
                print(line, file=sys.stderr)


def eval_command(args: argparse.Namespace) -> int:
    """Plays the policy of a checkpoint (its config is read from the checkpoint) and prints mean ± std
    of return and length and the env's statistics; --render / --save-frames show agent 0's first
    episode as text."""
    from jaxlab.config import ConfigError
    from jaxlab.evaluation import load_trainer, play
    from jaxlab.render import RENDERERS
    from jaxlab.run import find_checkpoint, newest_usable

    if args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes} must be at least 1")
    path, trainer = newest_usable(find_checkpoint(args.checkpoint, args.env), load_trainer, warn)
    if trainer.config.env_name != args.env:
        trainer.close()
        raise ConfigError(f"{path} is a checkpoint of {trainer.config.env_name!r}, not {args.env!r}; "
                          f"run `jaxlab eval {trainer.config.env_name} --checkpoint {args.checkpoint}`")
    renderer = RENDERERS.get(args.env)
    if (args.render or args.save_frames) and renderer is None:
        trainer.close()
        raise ConfigError(f"env {args.env!r} has no text rendering; envs with one: {', '.join(RENDERERS)}")
    frames: list[str] = []

    def record_frame(t, observations, actions, rewards, ended):
        """Agent 0's first episode, one line per step."""
        if frames and frames[-1].endswith("(episode ended)"):
            return
        frame = f"{t:5d}  {renderer(observations[0], actions[0], float(rewards[0]))}"
        frames.append(frame + ("  (episode ended)" if ended[0] else ""))
        if args.render:
            print(frames[-1], flush=True)

    watching = renderer is not None and (args.render or args.save_frames)
    with trainer:
        result = play(trainer, num_envs=args.num_envs or min(args.episodes, 64), seed=args.seed,
                      deterministic=args.deterministic, episodes=args.episodes,
                      on_step=record_frame if watching else None)
    if args.save_frames:
        Path(args.save_frames).write_text("\n".join(frames) + "\n")
    returns, lengths = result["returns"], result["lengths"]
    mode = "deterministic" if args.deterministic else "sampled"
    print(f"{args.env} from {path}: {len(returns)} episodes, {mode} actions, seed {args.seed}")
    print(f"  return {returns.mean():.2f} ± {returns.std():.2f}   length {lengths.mean():.1f} ± {lengths.std():.1f}")
    stats = {k: v for k, v in result.items() if k not in ("returns", "lengths", "episodes") and v is not None}
    if stats:
        print("  " + "   ".join(f"{k} {v:.3f}" for k, v in stats.items()) +
              f"   (the env's statistics over {result['episodes']} episodes)")
    if args.save_frames:
        print(f"  {len(frames)} frames of agent 0's first episode in {args.save_frames}")
    return 0


def runs_command(args: argparse.Namespace) -> int:
    """Prints a table of the runs under DIR (default runs/)."""
    from jaxlab.records import format_runs, run_rows

    root = Path(args.dir)
    if not root.is_dir():
        return fail("runs", NotADirectoryError(f"{root} is not a directory; pass the folder that holds your run dirs"))
    print(format_runs(run_rows(root)))
    return 0


def plot_command(args: argparse.Namespace) -> int:
    """Draws learning curves of RUN_DIRs into a PNG."""
    from jaxlab.plot import PlotError, plot

    try:
        out = plot([Path(r) for r in args.run_dirs], Path(args.output), args.metric, args.x)
    except PlotError as err:
        return fail("plot", err)
    print(f"wrote {out}")
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
    train.add_argument("--run-dir", metavar="DIR", help="where config.toml, metrics.jsonl and checkpoints/ "
                       "go (default runs/ENV-TIMESTAMP; with --resume, the resumed run's dir)")
    train.add_argument("--notes", metavar="TEXT", help="the run's hypothesis, saved as notes.md in the run dir "
                       "and shown by `jaxlab runs`")
    train.add_argument("--resume", metavar="WHAT", help="continue a run: latest (the newest run of ENV "
                       "under runs/), a run dir, or one checkpoint directory; flags change allowed values")
    command("config", "print the resolved config, where each value came from, and the sizes",
            f"Print the resolved config of ENV as TOML (usable with --config), each value commented "
            f"with the layer that set it, and the derived sizes. {layers}", config_command, with_config=True)
    evaluate = command("eval", "play a checkpoint's policy and report returns",
                       "Play the policy saved in a checkpoint (its config is read from the checkpoint) on new "
                       "envs and print mean ± std of return and length and the env's statistics.", eval_command)
    evaluate.add_argument("env", metavar="ENV", help="environment name (must match the checkpoint)")
    evaluate.add_argument("--checkpoint", required=True, metavar="PATH",
                          help="a checkpoint directory, a run dir or its checkpoints/ (the newest good one), or latest")
    evaluate.add_argument("--episodes", type=int, default=10, help="agent-episodes to play (default 10)")
    evaluate.add_argument("--deterministic", action="store_true", help="take the most likely action (default: sample)")
    evaluate.add_argument("--num-envs", type=int, default=0, help="envs played at once (default min(episodes, 64))")
    evaluate.add_argument("--seed", type=int, default=12345, help="seed of the new envs and of sampling")
    evaluate.add_argument("--render", action="store_true", help="print agent 0's first episode as text "
                          "(cartpole, memory)")
    evaluate.add_argument("--save-frames", metavar="FILE", help="write agent 0's first episode as text to FILE")
    runs = command("runs", "list runs with env, steps, SPS, final and best return and notes",
                   "Print a table of the run dirs under DIR: env, steps, SPS, final and best episode return, "
                   "status and the first line of notes.md.", runs_command)
    runs.add_argument("dir", nargs="?", default="runs", metavar="DIR", help="folder of run dirs (default runs)")
    plot = command("plot", "draw learning curves of runs into a PNG",
                   "Draw a metric of several runs against agent-steps or wall time into a PNG (needs "
                   "matplotlib: pip install 'jaxlab[plot]').", plot_command)
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run dirs holding metrics.jsonl")
    plot.add_argument("--metric", default="episode_return", help="metrics.jsonl key (default episode_return)")
    plot.add_argument("--x", choices=("step", "time"), default="step", help="x axis: agent-steps or wall time")
    plot.add_argument("-o", "--output", default="curves.png", metavar="PNG", help="output file (default curves.png)")
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
    from jaxlab.checkpoint import CheckpointError
    from jaxlab.config import ConfigError

    try:
        return args.run(args)
    except (ConfigError, CheckpointError) as err:  # bad config or input: one line, no traceback
        return fail(args.command, err)
    except BrokenPipeError:  # `jaxlab config ENV | head`: the reader left; not an error
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""Commands that look without training: `jaxlab envs`, `config`, `presets`, `runs`, `plot`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from jaxlab.cli.common import LAYERS, fail, output_file_problem, resolve, user_path, warn
from jaxlab.messages import counted, install_extra


def envs_command(args: argparse.Namespace) -> int:
    """Prints the envs (jaxlab's, or those of --library LIB.so / HEADER.h; only those named when names are
    given) with their spaces, options, parameters and episode statistics."""
    import difflib

    from jaxlab.config import ConfigError
    from jaxlab.env import env_types, is_python_env, spaces_of
    from jaxlab.env.library import LibraryError
    from jaxlab.env.sdk import (BuildError, env_path_problems, headers_on_path, misnamed_header_problem,
                                misnamed_headers)

    python_names = [name for name in dict.fromkeys(args.names) if is_python_env(name)]
    for name in python_names:
        print_python_env(name)
    if python_names and len(python_names) == len(set(args.names)):
        return 0
    try:
        kinds = env_types(args.library)
    except (LibraryError, BuildError) as err:
        raise ConfigError(str(err)) from None
    on_path = {} if args.library is not None else headers_on_path()  # the headers `jaxlab train NAME` finds
    misnamed: dict = {}  # the headers it does not find (NAME.h with NAME not sdk.is_env_name), first folder first
    for header in misnamed_headers() if args.library is None else ():
        misnamed.setdefault(header.stem, header)
    wanted = [name for name in dict.fromkeys(args.names) if name not in python_names]
    for name in wanted:
        if name in misnamed and name not in kinds:
            raise ConfigError(misnamed_header_problem(misnamed[name]))
        if name not in kinds and name not in on_path:
            known = sorted({*kinds, *on_path})
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            where = f"in {args.library}" if args.library is not None else "among jaxlab's envs or on the env path"
            notes = "".join(f" Note: {problem}." for problem in env_path_problems()) if args.library is None else ""
            raise ConfigError(f"no env {name!r} {where}; {hint}envs: {', '.join(known)}{notes}")
    if not wanted:
        for header in misnamed.values():
            warn(f"warning: {misnamed_header_problem(header)}")
    for kind in kinds.values():
        if wanted and kind.name not in wanted:
            continue
        values, sources = training_env_values(kind.name, args.library)
        options = [o for o in ("mask", "reset_agent", "agents_wait", "render", "pixels") if kind.has(o)]
        print(f"{kind.name}: {kind.description}")
        spaces = spaces_of(kind.name, library=kind.library, **values)  # as training makes them
        line = spaces_line(spaces, spaces_of(kind.name, library=kind.library), sources)
        print(f"  {line}{'  options: ' + ', '.join(options) if options else ''}")
        for p in kind.params:
            kind_name = ("int or " + "|".join(p.names) if p.names else "int") if p.is_int else "float"
            value = f"{values.get(p.name, p.default_value):g}"
            if f"env.{p.name}" in sources:  # a config file beside the header (or configs/envs/NAME.toml) sets it
                value += f" (from {sources[f'env.{p.name}']}; default {p.default_value:g})"
            print(f"  --env.{p.name} {kind_name} = {value}  in [{p.low:g}, {p.high:g}]  {p.help}")
        print(f"  statistics: {', '.join(kind.log_names)}")
    if args.library is None:
        for name, header in sorted(on_path.items()):
            if name not in kinds and (not wanted or name in wanted):
                print(f"{name}: {header} (on the env path: `jaxlab train {name}` builds it; "
                      f"`jaxlab envs --library {header}` for its spaces)")
    return 0


def spaces_line(spaces, defaults, sources: dict) -> str:
    """`jaxlab envs`'s line of an env's ``spaces`` as training makes them (with the env parameters that config files
    set: ``sources``, training_env_values's), each of observation, action and agents per env that differs from
    the env's ``defaults`` (its spaces with its C defaults) naming those files and the default."""
    files = ", ".join(dict.fromkeys(sources.values()))

    def noted(text: str, default: str) -> str:
        return text if text == default else f"{text} (from {files}; default {default})"

    line = (f"observation {noted(str(spaces.observation_space), str(defaults.observation_space))}  "
            f"action {noted(str(spaces.action_space), str(defaults.action_space))}")
    agents, default_agents = spaces.agents_per_env, defaults.agents_per_env
    if agents == default_agents:
        return line + (f", {agents} agents per env by default" if agents > 1 else "")
    plural = "s" if agents != 1 else ""
    return line + ", " + noted(f"{agents} agent{plural} per env", str(default_agents))


def training_env_values(name: str, library: str | None) -> tuple[dict, dict]:
    """The env parameters `jaxlab train` gives env ``name`` of ``library`` (None: jaxlab's envs and the env
    path) when no flag, --config or preset sets them: ({param: value}, {"env.PARAM": the file that set it})
    from the config layers (configs/envs/NAME.toml; for a header, the NAME.toml beside it, when ``name`` is
    the env it trains: load_config's header_toml_layers). Empty for an env library's envs (no file)."""
    from jaxlab.config import load_config

    config, sources = load_config(name, flags=["--env.library", str(library)] if library is not None else [])
    return config.env, {key: source for key, source in sources.items() if key.startswith("env.")
                        and source not in ("configs/default.toml", "header", "env path", "command line")}


def print_python_env(name: str) -> None:
    """Prints the Python env ``name`` (gymnasium:ID, pettingzoo:MODULE) as envs_command prints a C env:
    the spaces jaxlab reads from one env made and reset (ConfigError, as for train, when it cannot be
    made or what it returns does not fit), its options and statistics; it has no --env parameters."""
    from jaxlab.config import ConfigError
    from jaxlab.config.memory import checked_spaces
    from jaxlab.env.python_envs import python_env_type

    try:
        kind = python_env_type(name)  # an unknown id or module, a missing package: its own message
    except (ValueError, ImportError) as err:
        raise ConfigError(str(err)) from None
    spaces = checked_spaces(name)
    agents = f", {spaces.agents_per_env} agents per env" if spaces.agents_per_env > 1 else ""
    options = [o for o, on in (("mask", spaces.has_mask), ("agents_wait", spaces.agents_wait)) if on]
    print(f"{name}: {kind.description}")
    print(f"  observation {spaces.observation_space}  action {spaces.action_space}{agents}"
          f"{'  options: ' + ', '.join(options) if options else ''}")
    print("  no --env parameters: a Python env takes its arguments from jaxlab.make, or from an id or a "
          "parallel_env() of yours that passes them")
    print(f"  statistics: {', '.join(kind.log_names)}")


#: `jaxlab train`'s options that `jaxlab config` does not take -> what to do instead.
TRAIN_ONLY_OPTIONS = {
    "--resume": "a run's resolved config is RUN/config.toml: `jaxlab config ENV --config RUN/config.toml` shows it, "
                "with your flags on top as a resume takes them",
    "--resume-any-env": "it is a resume's option: `jaxlab config ENV --config RUN/config.toml` shows a run's config",
    "--run-dir": "nothing is written; drop it",
}


def check_train_only_options(flags: list[str]) -> None:
    """ConfigError for an option of `jaxlab train` among ``flags`` (the arguments that are not jaxlab config's,
    read as config flags, which would say only that config flags look like --train.seed 1)."""
    from jaxlab.config import ConfigError

    for flag in flags:
        name = flag.partition("=")[0]
        if name in TRAIN_ONLY_OPTIONS:
            raise ConfigError(f"unexpected argument {name!r}: jaxlab config takes no {name}; "
                              f"{TRAIN_ONLY_OPTIONS[name]}")


def config_command(args: argparse.Namespace) -> int:
    """Prints the resolved config as TOML, each value with the layer that set it, the sizes and the
    memory estimate. A dry run of `jaxlab train`: what it refuses before training (the --dist.* flags,
    the config, checkpoint.best_metric) is refused here too, with the same message."""
    from jaxlab.config import env_kind, to_toml
    from jaxlab.config.memory import auto_obs_norm_words
    from jaxlab.run.distributed import settings_from_flags

    check_train_only_options(args.flags)
    settings = settings_from_flags(args.flags)  # as jaxlab train checks them, first; nothing is joined
    resolved = resolve(args, processes=settings.num_processes)  # each process's share checked as train does
    kind = env_kind(resolved.config.env_name, resolved.config.env_library or None)
    check_best_metric(resolved.config, kind.log_names)
    print(f"# {resolved.config.env_name}, preset {resolved.config.preset} ({resolved.preset_reason})")
    print(f"# {resolved.sizes.describe()}")
    print(f"# memory: {resolved.memory.describe()}; {resolved.memory_limit.describe()}")
    threads = resolved.sizes
    if resolved.config.vec.num_threads == "auto":
        print(f"# vec.num_threads auto: {counted(threads.num_threads, 'C thread')} per group "
              f"({threads.threads_reason})")
    if resolved.config.train.obs_norm == "auto":
        print(f"# train.obs_norm auto: {auto_obs_norm_words(resolved.shape)}")
    section = ""
    for line in to_toml(resolved.config).splitlines():
        if line.startswith("["):
            section = line.strip("[]")
            print(line)
            if section == "env":
                for param in kind.params:
                    if param.name not in resolved.config.env:
                        print(f"# {param.name} = {param.default_value:g}".ljust(40) + " # the env's C default")
        elif section and " = " in line:
            source = resolved.sources.get(f"{section}.{line.partition(' = ')[0]}", "built-in default")
            print(f"{line:<40} # {source}")
        else:
            print(line)
    return 0


def check_best_metric(config, log_names) -> None:
    """`jaxlab train`'s check of checkpoint.best_metric (jaxlab.run.loop.check_best_metric) against the
    records a run of ``config`` on an env with statistics ``log_names`` writes: ConfigError for a name
    they lack, a warning for the default on an env without it."""
    from jaxlab.run.loop import check_best_metric as check
    from jaxlab.train.trainer import record_names

    check(config.checkpoint.best_metric, record_names(config, log_names), warn)


def presets_command(args: argparse.Namespace) -> int:
    """Lists the presets and the one `auto` picks on this machine."""
    from jaxlab.config import presets

    presets.prepare_backend(None)
    devices = presets.current_devices()
    print(presets.describe_presets(devices))
    unused_gpu = presets.unused_gpu_warning(devices)
    if unused_gpu is not None:
        print(f"warning: {unused_gpu}", file=sys.stderr)
    return 0



def runs_command(args: argparse.Namespace) -> int:
    """Prints a table of the runs under DIR (default runs/)."""
    from jaxlab.observe.records import format_runs, is_run, nested_run_folders, run_rows

    root = Path(args.dir)
    if not root.is_dir():
        return fail("runs", NotADirectoryError(f"{root} is not a directory; pass the folder that holds your run dirs"))
    print(format_runs(run_rows(root)))
    nested = [] if is_run(root) else nested_run_folders(root)
    if nested:
        folders = ", ".join(f"{folder} ({runs})" for folder, runs in nested)
        print(f"more run dirs in: {folders}; list them with `jaxlab runs {nested[0][0]}`")
    return 0


def plot_command(args: argparse.Namespace) -> int:
    """Draws learning curves of RUN_DIRs into a PNG."""
    from jaxlab.observe.plot import PlotError, plot

    problem = output_file_problem("--output", args.output, ".png")
    if problem:
        return fail("plot", PlotError(problem))
    try:
        out = plot([Path(r) for r in args.run_dirs], Path(args.output), args.metric, args.x, warn=warn)
    except PlotError as err:
        return fail("plot", err)
    print(f"wrote {out}")
    return 0


def add_commands(add) -> None:
    """Registers this family's subcommands with ``add`` (see common.command_adder)."""
    envs = add("envs", "list the environments, their spaces and parameters",
               "List the C environments (jaxlab's, or those of an env library or header; only the ENV names "
               "given, if any), their spaces, options, parameters (the values training uses: a value set by "
               "the env's config file, NAME.toml beside its header or configs/envs/NAME.toml, names that file "
               "and the default) and statistics; a Python env named (gymnasium:ID, gymnasium:MODULE:ID, "
               "pettingzoo:MODULE) is made once to show the spaces jaxlab reads from it.", envs_command)
    envs.add_argument("names", nargs="*", metavar="ENV", type=user_path,
                      help="only these envs (default: all C envs)")
    envs.add_argument("--library", type=user_path, metavar="LIB",
                      help="an env library (.so from `jaxlab build-env`) or an env "
                      "header (.h, built on first use): list its envs instead of jaxlab's")
    add("config", "print the resolved config, where each value came from, and the sizes",
        f"Print the resolved config of ENV as TOML (usable with --config), each value commented "
        f"with the layer that set it, and the derived sizes. A dry run of `jaxlab train` with the same "
        f"arguments: what train refuses before training (the config, the --dist.* flags, "
        f"checkpoint.best_metric) is refused here too. {LAYERS}", config_command, with_config=True)
    runs = add("runs", "list runs with env, steps, SPS, final and best return and notes",
               "Print a table of the run dirs under DIR: env, steps, SPS, final and best episode return, "
               "status and the first line of notes.md.", runs_command)
    runs.add_argument("dir", nargs="?", default="runs", type=user_path, metavar="DIR",
                      help="folder of run dirs (default runs)")
    plot = add("plot", "draw learning curves of runs into a PNG",
               "Draw a metric of several runs against agent-steps or wall time into a PNG (needs "
               f"matplotlib: {install_extra('plot')}).", plot_command)
    plot.add_argument("run_dirs", nargs="+", type=user_path, metavar="RUN_DIR", help="run dirs holding metrics.jsonl")
    plot.add_argument("--metric", default="episode_return", help="metrics.jsonl key (default episode_return)")
    plot.add_argument("--x", choices=("step", "time"), default="step", help="x axis: agent-steps or wall time")
    plot.add_argument("-o", "--output", default="curves.png", type=user_path, metavar="PNG",
                      help="output file (default curves.png)")
    add("presets", "list the accelerator presets and the one auto picks here",
        "List the presets in configs/presets/ and the one `--preset auto` picks on this machine.",
        presets_command)

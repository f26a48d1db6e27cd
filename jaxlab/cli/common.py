"""What every command shares: the config arguments, resolving and checking a config (preset, --config,
flags, --resume), and one-line errors."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

LAYERS = ("Config layers, later ones winning: configs/default.toml, configs/envs/ENV.toml, "
          "configs/presets/PRESET.toml, --config FILE, then flags.")


def command_adder(commands):
    """add(name, summary, description, run, with_config=False) -> the subparser: a subcommand that runs
    ``run(args)``; ``with_config`` gives it ENV, --preset, --config and config flags (listed in its help)."""

    def add(name: str, summary: str, description: str, run, with_config: bool = False):
        sub = commands.add_parser(name, help=summary, description=description,
                                  epilog=config_help() if with_config else None,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.set_defaults(run=run, takes_flags=with_config)
        sub.register("action", None, GivenOnce)  # every option of one value: a second, different one is refused
        if with_config:
            add_config_arguments(sub)
        return sub

    return add


def config_help(without: tuple[str, ...] = ()) -> str:
    """Every config key with its default (from configs/default.toml) and description, for --help; none of the
    sections named in ``without`` (jaxlab sweep refuses --dist.*)."""
    from jaxlab.config import SECTIONS, Config, configs_dir, field_help, read_toml, toml_value
    from jaxlab.config.schema import ENV_KEYS

    defaults = read_toml(configs_dir() / "default.toml")
    lines = ["config flags (--section.key value; dashes or underscores; env defaults in configs/envs/):",
             "  --env.NAME VALUE            a parameter of the env (see `jaxlab envs`)"]
    env_help = field_help(Config)  # the [env] keys jaxlab reads itself: "[env] KEY: what it does"
    for key, field_name in ENV_KEYS.items():
        text = env_help[field_name].removeprefix(f"[env] {key}: ")
        flag = f"--env.{key.replace('_', '-')}"
        lines.append(f"  {flag:<27} {text} (default {toml_value(getattr(Config, field_name))})")
    for section, cls in SECTIONS.items():
        if section in without:
            continue
        for name, text in field_help(cls).items():
            default = defaults.get(section, {}).get(name, getattr(cls(), name))
            flag = f"--{section}.{name.replace('_', '-')}"
            lines.append(f"  {flag:<27} {text} (default {toml_value(default)})")
    return "\n".join(lines)


def required_env(args: argparse.Namespace) -> None:
    """ConfigError when ARGS has no ENV, except for `jaxlab train --resume RUN` and `jaxlab eval --checkpoint
    RUN` (not latest), which take the run's (resolve, eval_command)."""
    from jaxlab.config import ConfigError

    if args.env is not None:
        return
    checkpoint = getattr(args, "checkpoint", None)
    if checkpoint == "latest":
        raise ConfigError("--checkpoint latest needs ENV, the env whose newest run to play: e.g. `jaxlab eval "
                          "cartpole --checkpoint latest` (or --checkpoint RUN_DIR, whose env is its own)")
    if checkpoint is not None:
        return
    resume = getattr(args, "resume", None)
    if resume and resume != "latest":
        return
    if resume == "latest":
        raise ConfigError("--resume latest needs ENV, the env whose newest run to continue: e.g. "
                          "`jaxlab train cartpole --resume latest` (or --resume RUN_DIR, whose env is its own)")
    raise ConfigError(f"ENV is missing: name an env, e.g. `jaxlab {args.command} cartpole` (`jaxlab envs` "
                      "lists them)")


def whole_number(text: str) -> int:
    """An argparse type for a count given as a config integer is: 1000, 1_000 or 1e3 (argparse's own int
    refuses the last two, which every config key takes)."""
    from jaxlab.config.layers import parse_integer

    number = parse_integer(text)
    if number is not None:
        return number
    raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; write e.g. 1000, 1_000 or 1e3")


def number(text: str) -> float:
    """An argparse type for a number of seconds or a rate: what float() reads (argparse's own float type says
    only "invalid float value", with no example); its range is the command's to check."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; write e.g. 1, 0.5 or 2e-1") from None


def user_path(text: str) -> str:
    """An argparse type for every path option: ``text`` with a leading ~ (or ~USER) made the home folder, as
    the shell would. The shell expands no ~ after '=' (--run-dir=~/x) nor a quoted one ('~/x'), which made a
    folder named '~' in the current one; other text ("latest", "") stays as it is."""
    import os

    return os.path.expanduser(text)


class GivenOnce(argparse.Action):
    """An option's action that refuses a second, different value (argparse keeps the last in silence, which for
    `--config a.toml --config b.toml` dropped a.toml's whole layer, for `--preset h100 --preset heavy` the card,
    and for `--run-dir a --run-dir b` the first folder): the error names both values and what to do instead
    (``instead``; by default, to give the option once). Every command's options of one value take it
    (command_adder); a positional argument is stored as argparse's own store action does."""

    def __init__(self, *args, instead: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.instead = instead or (f"give {self.option_strings[-1] if self.option_strings else self.dest} once, "
                                   "with the value you mean")

    def __call__(self, parser, namespace, values, option_string=None):
        given = f"_{self.dest}_given"
        before = getattr(namespace, given, None)
        if self.option_strings and before is not None and not self.same(before, values):
            raise argparse.ArgumentError(self, f"given twice ({before}, then {values}); {self.instead}")
        setattr(namespace, given, values)
        setattr(namespace, self.dest, values)

    def same(self, before, values) -> bool:
        """Whether two values of this option mean one: equal, or for a path option (user_path) one folder or
        file written two ways (same_path)."""
        return before == values or (self.type is user_path and same_path(before, values))


def same_path(first: str, second: str) -> bool:
    """Whether two path arguments name one folder or file written two ways (runs/a and ./runs/a/, as `jaxlab
    plot` takes a run given twice): their absolute paths, ./, .. and a trailing slash normalised, are equal."""
    import os

    return os.path.abspath(first) == os.path.abspath(second)


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """ENV, --preset and --config, shared by every command that resolves a config. ENV is optional to
    argparse (a missing one is None) so that `jaxlab train --resume RUN` can take the run's: a command
    that needs it calls required_env."""
    parser.add_argument("env", metavar="ENV", nargs="?", type=user_path,
                        help="an env name (see `jaxlab envs`), the path of "
                        "an env header (path/to/NAME.h or ~/NAME.h: built on first use and cached), or a Python env: "
                        "gymnasium:ID, gymnasium:MODULE:ID (an id MODULE registers) or pettingzoo:MODULE (a "
                        "module with parallel_env())")
    parser.add_argument("--preset", default="auto", metavar="NAME", action=GivenOnce,
                        instead="give one --preset: a card then a workload size, comma-separated (e.g. h100,heavy)",
                        help="presets, layered in order: a card (auto, the default: picked from the devices; "
                        "cpu, gpu, a100, h100) then workload sizes (heavy, beast), e.g. h100,heavy or heavy "
                        "(see `jaxlab presets`)")
    parser.add_argument("--config", type=user_path, metavar="FILE", action=GivenOnce,
                        instead="jaxlab reads one --config file: merge them into one, or give the second's keys "
                        "as flags (--section.key value)",
                        help="a TOML file layered over the env's defaults and preset")


class Resolved(NamedTuple):
    config: Any
    sources: dict
    sizes: Any
    preset_reason: str
    backend: str
    resume: Path | None = None   # a checkpoint, or a checkpoints/ directory to take the newest good one of
    changes: tuple = ()          # allowed config changes against the checkpoint ("key: old -> new")
    memory: Any = None           # config.memory.MemoryEstimate: what the config needs
    memory_limit: Any = None     # config.memory.MemoryLimit: what there is
    resume_meta: dict = {}       # {checkpoint path: its meta} for those read already
    shape: Any = None            # config.memory.EnvShape: the env's, which the estimate read


def env_name_of(env: str) -> str:
    """The env name an ENV argument means: itself, or for a header path (path/to/NAME.h) the env that
    header defines; ConfigError when the header has none or cannot be read."""
    if not env.endswith(".h"):
        return env
    from jaxlab.config import ConfigError
    from jaxlab.env.sdk import BuildError, header_env

    try:
        return header_env(env)
    except BuildError as err:
        raise ConfigError(str(err)) from None


def check_saved_header(meta: dict, command: str, rest: str) -> None:
    """ConfigError when the env header that a checkpoint's env was built from (its meta's env_source)
    is gone: restore it, or give its new path as ENV (`jaxlab COMMAND path/to/NAME.h REST`)."""
    from jaxlab.config import ConfigError

    from jaxlab.env.sdk import find_header

    header = (meta.get("env_source") or {}).get("library")
    if header and header.endswith(".h") and not Path(header).is_file():
        found = find_header(Path(header).stem)  # e.g. jaxlab's own example env, installed elsewhere since
        new_path = f"path/to/{Path(header).name}" if found is None else str(found)
        where = "" if found is None else f" (the {Path(header).name} on the env path)"
        raise ConfigError(f"the checkpoint's env header {header} does not exist (moved or deleted); restore it "
                          f"there, or pass its new path as ENV: `jaxlab {command} {new_path} {rest}`{where}")


def check_saved_module(spec: str, command: str, rest: str, flag: str) -> None:
    """ConfigError when the policy.module file ``spec`` (a checkpoint's) is gone: restore it, or give
    its new path with ``flag`` (`jaxlab COMMAND ENV REST FLAG path/to/FILE.py:Class`)."""
    from jaxlab.agent.custom import gone_file_words
    from jaxlab.config import ConfigError

    gone = gone_file_words(spec, lambda new: f"`jaxlab {command} {rest} {flag} {new}`")
    if gone:
        raise ConfigError(gone)


def warn(message: str) -> None:
    print(f"jaxlab: {message}", file=sys.stderr, flush=True)


def users_memory_fraction(args: argparse.Namespace) -> float | None:
    """device.memory_fraction when ARGS set it (a flag or the --config file, not a preset or a default),
    else None; read before JAX starts, which is when XLA takes it."""
    from jaxlab.config import load_config, presets

    workloads = presets.split_presets(args.preset)[1]
    config, sources = load_config(args.env, config_file=args.config, flags=args.flags,
                                  preset=",".join(workloads) or None)
    users = {"command line", *([str(Path(args.config))] if args.config else [])}  # load_config's layer labels
    return config.device.memory_fraction if sources.get("device.memory_fraction") in users else None


def given_keys(flags: list[str], file_choices: dict[str, str] | None = None) -> dict[str, str]:
    """{"section.key": where the user gave it} for the keys this command's config ``flags`` set ("command
    line") and those ``file_choices`` names (load_config's: a user's file that set a key to another value
    than the layers under it give; the file's path); a flag wins over a file."""
    from jaxlab.config.layers import parse_flags

    flagged = {f"{section}.{key}": "command line" for section, keys in parse_flags(flags).items() for key in keys}
    return {**(file_choices or {}), **flagged}


def given_as(config, key: str, where: str) -> str:
    """Config key ``key`` as the user gave it, for a warning: its flag (--train.min-lr-ratio) when ``where``
    is the command line, else its line in the file ``where`` (train.min_lr_ratio = 0.1 in my.toml)."""
    from jaxlab.config.validate import flag_of, shown_value

    if where == "command line":
        return flag_of(key)
    section, _, name = key.partition(".")
    return f"{key} = {shown_value(getattr(getattr(config, section), name))} in {where}"


def switched_off_by_flag(given: dict[str, str], key: str, switch: str) -> bool:
    """Whether ``key``, which a user's file set (given_keys' ``given``), does nothing because of config key
    ``switch`` that a flag of this command set: the flag turns a setting off over the file (--log.wandb false
    on a run's config.toml, which records its wandb project), and the file's lines for it are not wrong."""
    return given[key] != "command line" and given.get(switch) == "command line"


def lines_fix(given: dict[str, str], keys) -> str:
    """The fix for the file lines among ``keys`` (given_keys' ``given``): "remove that line from FILE", or ""
    when flags set them all; for a file of jaxlab's own configs/ (a preset's given as --config), which is
    not the user's to edit, "copy FILE and remove that line from the copy" (a preset's: "pass --preset NAME
    instead of --config FILE, or ...")."""
    files = sorted({given[key] for key in keys if given[key] != "command line"})
    if not files:
        return ""
    count = sum(given[key] != "command line" for key in keys)
    lines = "that line" if count == 1 else "those lines"
    return "; ".join(shipped_file_fix(Path(file), lines) or f"remove {lines} from {file}" for file in files)


def shipped_file_fix(path: Path, lines: str) -> str | None:
    """The fix for ``lines`` of ``path`` when it is a file of jaxlab's own configs/ folder (None otherwise): a
    preset's is passed as --preset (whose keys are not named), another is copied and the copy edited."""
    from jaxlab.config import ConfigError, configs_dir

    try:
        shipped = configs_dir().resolve()
    except ConfigError:
        return None
    folder = path.resolve().parent
    if folder == shipped / "presets":
        return (f"pass --preset {path.stem} instead of --config {path}, or copy that file (jaxlab's own) and "
                f"remove {lines} from the copy")
    if folder == shipped or shipped in folder.parents:
        return f"copy {path} (jaxlab's own file) and remove {lines} from the copy"
    return None


def ignored_flags_warning(config, flags: list[str], file_choices: dict[str, str] | None = None) -> str | None:
    """The warning for the [policy] keys that ``flags`` (this command's config flags) or a user's file
    (``file_choices``: load_config's) set and that ``config``'s policy.module ignores (the built-in
    network's), or None. Presets and defaults say nothing about intent, nor a file's key at the value the
    layers under it give (a run dir's config.toml records every key), nor a file's key when a flag gave the
    module (switched_off_by_flag)."""
    from jaxlab.agent.custom import ignored_keys, load_module_class

    module = config.policy.module
    if not module:
        return None
    cls = load_module_class(module)  # imported already by check_network
    given = given_keys(flags, file_choices)
    ignored = [key for key in ignored_keys(cls)
               if key in given and not switched_off_by_flag(given, key, "policy.module")]
    if not ignored:
        return None
    why = "".join(f"; {cls.__name__} {what}" for key, what in (("policy.hidden_size", "declares no hidden_size field"),
                                                               ("policy.scan_unroll", "has its own unroll"))
                  if key in ignored)
    them = "it" if len(ignored) == 1 else "them"
    named = ", ".join(given_as(config, key, given[key]) for key in ignored)
    fix = lines_fix(given, ignored)
    return (f"warning: {named} {'does' if len(ignored) == 1 else 'do'} nothing with "
            f"policy.module={module!r} (it replaces the built-in network{why}); drop {them}"
            f"{f' ({fix})' if fix else ''}")


def unused_flags_warning(config, flags: list[str], platform: str | None = None,
                         file_choices: dict[str, str] | None = None,
                         searched: frozenset[str] = frozenset()) -> str | None:
    """The warning for keys that ``flags`` or a user's file (``file_choices``: load_config's, a key set to
    another value than the layers under the file give) set and that ``config`` does not use
    (config.validate.unused_keys: the keys and why), or None. A file's key is not named when a flag set the key
    that turns it off (switched_off_by_flag), nor when a sweep searches that key (``searched``: its trials set
    it, so the key does something in some of them)."""
    from jaxlab.config.validate import unused_keys

    unused = unused_keys(config, platform)
    given = given_keys(flags, file_choices)
    named = [key for key, why in unused.items() if key in given and why[0] not in searched
             and not switched_off_by_flag(given, key, why[0])]
    lines = [f"{given_as(config, key, given[key])} does nothing with {unused[key][0]} {unused[key][1]}"
             for key in named]
    fix = lines_fix(given, named)
    return f"warning: {'; '.join([*lines, *([fix] if fix else [])])}" if lines else None


#: how to time a run over several processes, for jaxlab bench's refusal of --dist.* and its [dist] warning
BENCH_SEVERAL = ("time a run over several processes with `jaxlab train` and the --dist.* flags (its SPS), or with "
                 "python scripts/bench_train.py --scaling (1 and 2 devices, 2 processes on this host)")


def refuse_dist_flags(flags: list[str], why: str) -> None:
    """ConfigError for a --dist.* flag among ``flags`` in a command that runs as one process (sweep, bench),
    which would otherwise take it as a config key and run alone; ``why`` ends the line (the reason, the fix)."""
    from jaxlab.config import ConfigError

    for flag in flags:
        if flag.startswith("--dist."):
            raise ConfigError(f"unexpected argument {flag.partition('=')[0]!r}: {why}")


def dist_from_files(config, sources: dict) -> list[tuple[str, str]]:
    """[(key, the file that set it)] for the [dist] keys that a file (a --config file, an env's TOML, a
    preset) set to other than their defaults. ``sources``: load_config's {key: layer that set it}."""
    from jaxlab.config.schema import DistConfig

    default = DistConfig()
    return [(key, sources[f"dist.{key}"]) for key in ("coordinator", "num_processes", "process_id")
            if sources.get(f"dist.{key}", "command line") != "command line"
            and getattr(config.dist, key) != getattr(default, key)]


def named_dist_values(config, keys: list[tuple[str, str]]) -> str:
    """'num_processes = 2 (from FILE), ...' for dist_from_files's ``keys``."""
    from jaxlab.config.validate import shown_value

    return ", ".join(f"{key} = {shown_value(getattr(config.dist, key))} (from {source})" for key, source in keys)


def dist_in_file_warning(config, sources: dict, command: str = "train") -> str | None:
    """The warning for [dist] keys that a file (a --config file, an env's TOML, a preset) set to other
    than their defaults, or None: the processes of a run come from the --dist.* flags and the
    environment only (they meet in jax.distributed.initialize before the config is loaded), so a file's
    [dist] does nothing. ``sources``: load_config's {key: layer that set it}; ``command`` "bench": the fix is
    not the flags, which bench refuses (it times one process)."""
    from jaxlab.config.validate import flag_of

    ignored = dist_from_files(config, sources)
    if not ignored:
        return None
    named = named_dist_values(config, ignored)
    flags = " ".join(f"{flag_of('dist.' + key)} {getattr(config.dist, key)}" for key, _ in ignored)
    verb = "is" if len(ignored) == 1 else "are"
    if command == "bench":
        return f"warning: [dist] {named} {verb} not read: jaxlab bench times one process; {BENCH_SEVERAL}"
    return (f"warning: [dist] {named} {verb} not read: a run's processes come from the command line or the "
            f"environment (SLURM, JAXLAB_COORDINATOR), before any config file; pass {flags}")


def unread_header_toml_warning(config) -> str | None:
    """The warning for the NAME.toml beside ``config``'s env header that ``config``'s env does not read, or
    None: it is the config layer of the env `jaxlab train path/to/NAME.h` trains (its only env, or the one
    named like the file), not of another env that the header defines too."""
    from jaxlab.config.layers import header_trained_env

    header = Path(config.env_library) if config.env_library else None
    if header is None or header.suffix != ".h" or not header.with_suffix(".toml").is_file():
        return None
    trained = header_trained_env(header)
    if trained == config.env_name:
        return None
    whose = f"env {trained!r}" if trained else f"an env named {header.stem!r}, which it does not define"
    return (f"warning: {header.with_suffix('.toml')} is not read for env {config.env_name!r}: the NAME.toml beside "
            f"a header is the config layer of the env `jaxlab train {header}` trains ({whose}); give "
            f"{config.env_name}'s values in a --config file")


def unplayed_header_toml_warning(played) -> str | None:
    """`jaxlab eval`'s warning for the env parameters that the NAME.toml beside ``played``'s env header sets to
    other values than ``played`` (the checkpoint's config, with eval's --env flags) plays, or None: eval
    plays the values the run trained with, which hold the file's as it was then, and does not read it."""
    from jaxlab.config import ConfigError, env_kind, load_config
    from jaxlab.config.layers import header_toml_layers

    files = header_toml_layers(played.env_library, played.env_name) if played.env_library else []
    if not files:
        return None
    try:
        config, sources = load_config(played.env_name, flags=["--env.library", played.env_library])
    except ConfigError:  # a file training would refuse: it says so there
        return None
    defaults = {p.name: p.default_value for p in env_kind(played.env_name, played.env_library).params}
    differ = {key: value for key, value in config.env.items()
              if sources.get(f"env.{key}") == files[0][0] and played.env.get(key, defaults[key]) != value}
    if not differ:
        return None
    written = ", ".join(f"env.{key} = {value:g} (played: {played.env.get(key, defaults[key]):g})"
                        for key, value in differ.items())
    flags = " ".join(f"--env.{key.replace('_', '-')} {value:g}" for key, value in differ.items())
    return (f"warning: {files[0][0]} sets {written}: eval plays the env parameters the checkpoint was trained "
            f"with, not the file's; to play the file's, pass {flags}")


def file_preset_warning(config_file, preset: str) -> str | None:
    """The warning for a ``preset = "..."`` line of the --config file ``config_file`` naming presets other
    than ``preset`` (those applied: --preset's) that set keys the file does not, or None: presets come
    from --preset alone, so such a line layers nothing (a run dir's config.toml, which records its run's
    presets and every key, loses nothing by it)."""
    from jaxlab.config import ConfigError
    from jaxlab.config.layers import preset_list, preset_names, read_preset, read_toml
    from jaxlab.config.validate import shown_value

    if config_file is None:
        return None
    layer = read_toml(Path(config_file))
    written = layer.get("preset", "none")
    if isinstance(written, dict) and "agents" in written:  # a card preset's file given as --config
        name = Path(config_file).stem
        fix = f"pass --preset {name}" if name in preset_names() else \
            "put the file in configs/presets/ and pass --preset NAME, or set vec.num_envs in it"
        return (f"warning: [preset] agents = {shown_value(written['agents'])} in --config {config_file} is not "
                "applied (it is a preset file's table, and vec.num_envs stays as set without it): presets come from "
                f"--preset only; {fix}")
    if not isinstance(written, str):
        return None
    unset = []
    for name in [name for name in preset_list(written) if name not in preset_list(preset)]:
        try:
            info, keys = read_preset(name)
        except ConfigError as err:  # an unknown name: passing it as --preset would be refused
            return (f"warning: preset = {shown_value(written)} in --config {config_file} is not applied: presets "
                    f"come from --preset only (here {preset}), and {err}; remove the line, or pass a preset as "
                    "--preset")
        keys = {**keys, "vec": {**keys.get("vec", {}), **({"num_envs": 0} if "agents" in info else {})}}
        unset += [f"{section}.{key}" for section, table in keys.items() for key in table
                  if key not in layer.get(section, {}) and f"{section}.{key}" not in unset]
    if not unset:
        return None
    return (f"warning: preset = {shown_value(written)} in --config {config_file} is not applied: presets come "
            f"from --preset only (here {preset}), so the preset's {', '.join(unset)} are not set; to layer it, pass "
            f"--preset {written}")


def ignored_total_warning(config, sources: dict, config_file, updates: int,
                          total_below_file: Callable[[], int | None] = lambda: None) -> str | None:
    """`jaxlab bench`'s warning that its run of ``updates`` (the first and --updates more) ignores the
    config's train.total_timesteps, naming the layer that set it: a flag, or the --config file
    ``config_file`` when its value differs from ``total_below_file()`` (the total the layers under the
    file give, None if unknown: a run dir's config.toml records every key, the defaults' total too);
    None when an env's defaults or a preset set it (they say nothing about this command)."""
    source = sources.get("train.total_timesteps")
    if source == "command line":
        where = "--train.total-timesteps"
    elif config_file is not None and source == str(Path(config_file)):
        if total_below_file() == config.train.total_timesteps:  # the file repeats the default: no choice made
            return None
        where = f"--config {config_file}"
    else:
        return None
    return (f"warning: jaxlab bench ignores train.total_timesteps={config.train.total_timesteps:,} (from {where}): "
            f"its run is the first update and --updates {updates - 1} more")


def total_without_file(args: argparse.Namespace, preset: str, config) -> int | None:
    """train.total_timesteps as the layers under ARGS's --config file give it (configs/default.toml, the
    env's defaults, ``preset``) for ``config``'s env: ENV alone when it finds the same env.library (a
    built-in env, a header path, NAME.h on the env path, with its NAME.toml), else with that library
    (the file or a flag named it); None when neither resolves."""
    from jaxlab.config import ConfigError, load_config

    for flags in ([], ["--env.library", config.env_library]):
        try:
            below = load_config(args.env, flags=flags, preset=preset)[0]
        except ConfigError:
            continue
        if below.env_library == config.env_library:
            return below.train.total_timesteps
    return None


def resolve(args: argparse.Namespace, warn: Callable[[str], None] = warn, updates: int | None = None,
            processes: int | None = None, warn_file_dist: bool = True,
            searched: frozenset[str] = frozenset()) -> Resolved:
    """The config of ARGS (preset, --config, flags) with its sizes checked and its memory estimate
    checked against the device's and the host's; ConfigError (or CheckpointError for --resume)
    otherwise, which main() reports with exit status 2. Warnings go to ``warn`` (a run over several
    processes passes one that prints in process 0 only). ``updates``: the run's length in updates, set
    in the config's train.total_timesteps, instead of that key, which is then not checked and, when a
    flag set it or a --config file changed it, gets a warning (`jaxlab bench`: ignored_total_warning).
    ``processes``: the run's process count for the sizes' per-process checks (default: the processes JAX
    has joined; `jaxlab config` passes the --dist.* count it does not join). ``warn_file_dist`` False: no
    dist_in_file_warning (jaxlab sweep says what it does with a file's [dist] itself). ``searched``: the
    "section.key" names a sweep searches, whose trials set them: a key they turn off is no key that does
    nothing.
    Nothing is compiled; JAX's backend is started (to see the devices) with its memory options set."""
    from jaxlab.config import ConfigError, check_network, derive_sizes, load_config, memory, presets
    from jaxlab.config.layers import flags_library, repeated_flags
    from jaxlab.config.schema import PolicyModuleError

    resume, changes, resume_meta = None, (), {}
    choices: dict[str, str] = {}  # {key: the user's file that chose its value}, for the unused keys' warnings
    if getattr(args, "resume", None):
        from jaxlab.checkpoint import read_meta
        from jaxlab.run.resume import find_checkpoint, newest_usable, resume_config

        if args.preset != "auto":
            raise ConfigError("--preset cannot be combined with --resume (the checkpoint's config is the base); "
                              "pass the values you want to change as flags")
        name = env_name_of(args.env) if args.env is not None else None  # None: the run's (required_env)
        resume = find_checkpoint(args.resume, name)
        first, meta = newest_usable(resume, read_meta, warn)
        resume_meta = {first: meta}
        saved_env = meta.get("env_name", name)
        if args.env is None:
            if saved_env is None:
                raise ConfigError(f"--resume {args.resume}: its checkpoint does not name its env; "
                                  f"run `jaxlab train ENV --resume {args.resume}`")
            args.env = name = saved_env
        if saved_env != name:  # before ENV's header is built: it may not even hold the checkpoint's env
            raise ConfigError(f"--resume {args.resume} is a run of {saved_env!r}, not {name!r}; "
                              f"run `jaxlab train {saved_env} --resume {args.resume}`")
        flags = list(args.flags)
        if args.env.endswith(".h"):  # the header named on the command line is the env's source now
            flags = ["--env.library", str(Path(args.env).expanduser().absolute()), *flags]
        elif flags_library(flags, args.config) is None:
            check_saved_header(meta, "train", f"--resume {args.resume}")
        config, changes = resume_config(first, args.config, flags, meta, file_choices=choices, warn=warn)
        if not any(change.startswith("policy.module:") for change in changes):  # the saved file: still there?
            check_saved_module(config.policy.module, "train", f"{args.env} --resume {args.resume}", "--policy.module")
        if config.env_name != name:
            raise ConfigError(f"--resume {args.resume} is a run of {config.env_name!r}, not {name!r}; "
                              f"run `jaxlab train {config.env_name} --resume {args.resume}`")
        backend = presets.prepare_backend(config.device.memory_fraction)
        reason, sources = "as saved in the checkpoint", {}
    else:
        card, workloads = presets.split_presets(args.preset)  # an unknown name fails here, before JAX starts
        auto = card == "auto"
        if auto:  # the card is known once JAX sees the devices; a fraction the user gave applies before
            backend = presets.prepare_backend(users_memory_fraction(args))
            card, reason = presets.select_preset(presets.current_devices())
        preset = ",".join([card, *workloads])
        config, sources = load_config(args.env, config_file=args.config, flags=args.flags, preset=preset,
                                      file_choices=choices)
        if not auto:
            backend = presets.prepare_backend(config.device.memory_fraction)
            presets.check_preset_fits(card, presets.current_devices())
            reason = "chosen with --preset"
        if workloads:
            reason += f"; workload size {', '.join(workloads)}"
    for line in repeated_flags(args.flags):
        warn(f"warning: {line}")
    for line in (dist_in_file_warning(config, sources, getattr(args, "command", "train")) if warn_file_dist else None,
                 None if resume else file_preset_warning(args.config, preset),
                 unread_header_toml_warning(config)):
        if line is not None:
            warn(line)
    if updates is not None:
        line = ignored_total_warning(config, sources, args.config, updates,
                                     lambda: None if resume else total_without_file(args, preset, config))
        if line is not None:
            warn(line)
    devices = presets.current_devices()
    for line in (presets.unused_gpu_warning(devices),
                 presets.emulated_bfloat16_warning(config.device.precision, devices)):
        if line is not None:
            warn(f"warning: {line}")
    try:
        shape = memory.env_shape(config)  # ConfigError for an env parameter out of range or of the wrong type
        sizes = derive_sizes(config, shape.agents_per_env, updates, processes)
        if updates is not None:
            config = replace(config, train=replace(config.train, total_timesteps=sizes.total_timesteps))
        check_network(config, shape.obs_shape)
        limit = memory.current_limit()
        estimate = memory.check_fits(config, sizes, shape, limit)  # before anything is allocated
        check_compile_cache(config.device.compile_cache)
    except ConfigError as err:
        if resume is None or isinstance(err, PolicyModuleError):  # the module's own code: no value to blame
            raise
        raise ConfigError(f"{err} (--resume {args.resume}: the values not given as flags are the ones the run "
                          "was saved with; a flag on this command overrides them)") from None
    for line in (ignored_flags_warning(config, args.flags, choices),  # after the checks: a broken module's comes alone
                 unused_flags_warning(config, args.flags, devices[0].platform if devices else None, choices,
                                      searched)):
        if line is not None:
            warn(line)
    return Resolved(config, sources, sizes, reason, backend, resume, tuple(changes), estimate, limit, resume_meta,
                    shape)


def check_compile_cache(setting: str) -> None:
    """ConfigError when ``setting`` (device.compile_cache) names a folder this process cannot create and
    write in: found here, before anything runs (train, bench and config alike), not when the trainer
    turns the cache on. "auto" and "off" are not checked: auto's unusable folder is a warning then."""
    from jaxlab.run import compile_cache

    if setting.strip().lower() in ("auto", "off"):
        return
    folder = compile_cache.cache_folder(setting)
    reason = cannot_write(folder)
    if reason is not None:
        raise compile_cache.unusable_folder(setting, folder, reason)


def cannot_write(directory: Path) -> str | None:
    """Why this process cannot create ``directory`` (parents too) and write a file in it, or None."""
    import os

    blocker = next((folder for folder in (directory, *directory.parents) if folder.is_file()), None)
    if blocker is not None:  # mkdir would say only "File exists" or "Not a directory"
        return f"{blocker} is a file, not a folder"
    probe = directory / f".write-test-{os.getpid()}"  # one per process: processes may share the directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe.touch()
        probe.unlink()
    except OSError as err:
        return err.strerror or str(err)
    return None


def empty_path_problem(args: argparse.Namespace) -> str | None:
    """Why ARGS's --resume or --run-dir cannot be taken, when given an empty value (an unset shell variable:
    --resume "$RUN"), or None. Taken as not given, an empty --resume started a new run of the whole
    train.total_timesteps, and an empty --run-dir wrote to runs/ENV-TIMESTAMP, without a word."""
    if getattr(args, "resume", None) is not None and not args.resume.strip():
        return (f"--resume {args.resume!r}: an empty value (a shell variable that is not set?), which would start a "
                "new run instead of continuing one; give a run dir, a checkpoint or latest")
    if getattr(args, "run_dir", None) is not None and not args.run_dir.strip():
        return (f"--run-dir {args.run_dir!r}: an empty value (a shell variable that is not set?); give a folder, or "
                "leave --run-dir out for runs/ENV-TIMESTAMP")
    return None


def output_file_problem(flag: str, name: str, suffix: str | None = None) -> str | None:
    """Why ``name`` (given with ``flag``) cannot be written as a file (ending in ``suffix`` when given),
    or None: checked before the work that produces it, so that the work is not lost at the end."""
    path = Path(name)
    folder = path.parent if str(path.parent) else Path(".")
    example = "out" + (suffix or ".txt")
    if not name.strip():  # Path("") is the current folder, whose name with_suffix cannot change
        return f"{flag} {name!r}: an empty name; give a file name, e.g. {flag} {example}"
    if path.is_dir():  # before the suffix: ".", ".." and "/" have no name to put one on
        return f"{flag} {name} is a folder; give a file name, e.g. {flag} {path / example}"
    if suffix is not None and path.suffix.lower() != suffix:
        return f"{flag} {name}: the file is written as {suffix}, so its name must end in {suffix}, e.g. {flag} " \
               f"{path.with_suffix(suffix).name}"
    if not folder.is_dir():
        above = next((f for f in (folder, *folder.parents) if f.exists()), None)  # a file in the way, e.g. x.txt/
        if above is not None and not above.is_dir():
            return f"{flag} {name}: {above} is a file, not a folder; give a path in a folder"
        return f"{flag} {name}: its folder {folder} does not exist; create it or give another path"
    if path.exists():
        try:
            with open(path, "ab"):  # appends nothing to the existing file
                pass
            unwritable = None
        except OSError as err:
            unwritable = err.strerror
    else:
        unwritable = cannot_write(folder)
    return unwritable and f"{flag} {name}: cannot write there ({unwritable}); give a path you can write"


def fail(command: str, err: Exception) -> int:
    print(f"jaxlab {command}: error: {err}", file=sys.stderr)
    return 2

"""`jaxlab sweep ENV`: hyperparameter sweeps on Optuna (jaxlab/sweep/), and their results (--show, --plot)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from jaxlab.cli.common import LAYERS, cannot_write, config_help, refuse_dist_flags, resolve, user_path, whole_number
from jaxlab.observe.records import folder_name
from jaxlab.messages import counted, install_extra
from jaxlab.sweep.study import shown_storage

DEFAULT_ROOT = "runs/sweeps"  # --root: the folder of the study dirs
#: options of other sweep tools (Optuna's n_jobs and n_trials, wandb agent's --count) and what jaxlab calls them
OTHER_TOOLS_OPTIONS = {"jobs": "parallel", "n-jobs": "parallel", "n_jobs": "parallel", "n-trials": "trials",
                       "n_trials": "trials", "count": "trials", "study-name": "study", "study_name": "study"}


def sweep_command(args: argparse.Namespace) -> int:
    """Runs (or resumes) a sweep, or shows / plots its results. Exit status: 0 done or stopped by
    SIGTERM (every trial saved), 1 every trial it ended failed, 130 stopped by SIGINT, 2 bad input
    (sweep file, config, storage)."""
    environment = dict(os.environ)  # what trials start from: before JAX is set up in this process
    from jaxlab.config import ConfigError

    check_other_tools_options(args.flags)
    refuse_dist_flags(args.flags, "jaxlab sweep starts each run of a trial as one process (--parallel K runs K side "
                                  "by side), so it takes no --dist.* flag; drop it")
    refuse_dist_in_config_file(args.config)
    try:
        import optuna
    except ImportError:
        raise ConfigError(f"jaxlab sweep needs Optuna; install it with {install_extra('sweep')}") from None
    if args.plot:
        refuse_plot_without_matplotlib()
    from jaxlab.sweep import study as study_lib

    study_lib.quiet_optuna()
    if args.parallel is not None and args.parallel < 1:
        raise ConfigError(f"--parallel {args.parallel} must be at least 1, e.g. --parallel 1")
    if args.trials is not None and args.trials < 0:
        raise ConfigError(f"--trials {args.trials} must be at least 0 (0 creates the study and runs nothing), "
                          "e.g. --trials 20")
    name = args.study or f"{folder_name(args.env)}-{time.strftime('%Y%m%d-%H%M%S')}"
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(f"--study {name!r} must be letters, digits, '.', '_' or '-' (it names a folder), "
                          "e.g. --study cartpole-lr")
    study_dir = Path(args.root) / name
    if (args.show or args.plot) and args.storage is None and not (study_dir / study_lib.JOURNAL).is_file():
        raise ConfigError(f"no study {name!r} in {args.root} (no {study_dir / study_lib.JOURNAL}); pass the "
                          "--study NAME (and --root DIR or --storage URL) of a sweep that ran")
    new_dir = not study_dir.exists()
    problem = cannot_write(study_dir)  # with --storage too: its run dirs, base.toml and best.toml go there
    if problem:
        raise ConfigError(f"cannot write the study folder {study_dir} ({problem}); pass a --root DIR you can write")
    storage = study_lib.storage_for(args.storage, study_dir)
    exists = name in optuna.study.get_all_study_names(storage)
    if args.show or args.plot:
        return show_results(args, name, storage, study_dir)
    overrides = {"trials": args.trials, "seeds": args.seeds, "sampler": args.sampler, "pruner": args.pruner,
                 "objective": args.objective, "parallel": args.parallel}
    try:
        return prepare_and_run(args, name, storage, study_dir, exists, overrides, environment)
    except KeyboardInterrupt:  # before the sweep's own signal handling started: nothing runs yet
        print("jaxlab sweep: interrupted before any trial started", file=sys.stderr)
        return 130
    except ConfigError:  # refused before any trial: a study folder made for it holds only an empty journal
        if new_dir and all(p.name.startswith(study_lib.JOURNAL) for p in study_dir.iterdir()):
            shutil.rmtree(study_dir, ignore_errors=True)
        raise


def check_other_tools_options(flags: list[str]) -> None:
    """ConfigError naming jaxlab's option for an option of another sweep tool among ``flags`` (the arguments
    that are not jaxlab sweep's, which would be read as config flags): --jobs 2 is --parallel 2."""
    from jaxlab.config import ConfigError

    for i, flag in enumerate(flags):
        name, _, value = flag[2:].partition("=")
        ours = OTHER_TOOLS_OPTIONS.get(name) if flag.startswith("--") else None
        if ours:
            following = flags[i + 1] if i + 1 < len(flags) and not flags[i + 1].startswith("-") else "2"
            example = value or following
            raise ConfigError(f"unexpected argument {flag!r}; jaxlab sweep calls it --{ours}, e.g. --{ours} {example}")


def refuse_dist_in_config_file(config_file: str | None) -> None:
    """ConfigError for a [dist] table with keys other than their defaults in the --config file ``config_file``, as
    refuse_dist_flags for the flags: it would reach every trial in the study's base config, and each would warn
    that it is not read. A run dir's config.toml records [dist] at its defaults (one process), which every
    trial is anyway: taken. A file that cannot be read is left to the config's own checks, which name what is
    wrong."""
    from jaxlab.config import ConfigError
    from jaxlab.config.layers import read_toml
    from jaxlab.config.schema import DistConfig

    if not config_file:
        return
    try:
        dist = read_toml(Path(config_file)).get("dist")
    except ConfigError:
        return
    if not isinstance(dist, dict):
        return
    default = DistConfig()
    set_keys = [key for key, value in dist.items() if getattr(default, key, None) != value]
    if set_keys:
        raise ConfigError(f"--config {config_file} has a [dist] table ({', '.join(set_keys)}): jaxlab sweep starts "
                          "each run of a trial as one process (--parallel K runs K side by side), so every trial "
                          "would ignore it; remove [dist] from the file, or sweep with a copy without it")


def without_file_dist(resolved):
    """``resolved`` (common.Resolved) with the [dist] keys that an env's config file or a preset set (a --config
    file's are refused, refuse_dist_in_config_file: the sweep's own input) back at their defaults, said in one
    line on stderr: every trial runs as one process, so they would reach each trial's config and do nothing."""
    from jaxlab.cli.common import dist_from_files, named_dist_values
    from jaxlab.config.schema import DistConfig

    keys = dist_from_files(resolved.config, resolved.sources)
    if not keys:
        return resolved
    print(f"jaxlab sweep: note: [dist] {named_dist_values(resolved.config, keys)} left out of the study's base "
          "config: jaxlab sweep starts each run of a trial as one process (--parallel K runs K side by side)",
          file=sys.stderr, flush=True)
    sources = {k: v for k, v in resolved.sources.items() if not k.startswith("dist.")}
    return resolved._replace(config=replace(resolved.config, dist=DistConfig()), sources=sources)


def refuse_plot_without_matplotlib() -> None:
    """ConfigError naming the install command when --plot cannot import matplotlib (Optuna alone, installed
    without the sweep extra, has no matplotlib): before --show prints or anything is written."""
    from jaxlab.config import ConfigError

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(f"--plot needs matplotlib; install it with {install_extra('sweep')}, or "
                          "leave out --plot") from None


def prepare_and_run(args, name: str, storage, study_dir: Path, exists: bool, overrides: dict,
                    environment: dict) -> int:
    """Opens (or creates) the study, then runs the sweep."""
    from jaxlab.sweep import study as study_lib

    explicit = bool(args.sweep or args.config or args.flags or args.preset != "auto" or
                    any(v is not None for k, v in overrides.items() if k not in ("trials", "parallel")))
    if exists and not explicit:
        from jaxlab.config import presets

        study, spec, base_toml = study_lib.open_study(name, storage, None, None, args.env)
        presets.prepare_backend(None)
        platform = presets.current_devices()[0].platform
    else:
        study, spec, base_toml, platform = create_or_check(args, name, storage, overrides, exists)
    return run_sweep(args, study, storage, spec, base_toml, study_dir, platform, environment, existed=exists)


def create_or_check(args, name: str, storage, overrides: dict, exists: bool = False):
    """Resolves the base config (preset, --config, flags) and the sweep file, checks the search space
    against the config, and creates the study or checks them against the one stored in it. A study that
    ``exists`` resumed without --sweep keeps its own search space, with the command line's settings."""
    from jaxlab.config import presets, to_toml
    from jaxlab.sweep import study as study_lib
    from jaxlab.sweep.space import (check_space, default_space, parse_spec, read_sweep_file,
                                    refuse_flags_on_searched_keys, refuse_keys_that_do_nothing, searched_names,
                                    unused_pruner, with_settings)

    resumed = exists and not args.sweep  # not the default file: the study may come from another one
    if resumed:
        stored_spec = study_lib.open_study(name, storage, None, None, args.env)[1]
        searched = frozenset(p.name for p in stored_spec.params)
    else:
        path = Path(args.sweep) if args.sweep else default_space(args.env)
        table = read_sweep_file(path)  # before JAX starts: a bad file fails fast
        searched = searched_names(table)
    # this process only supervises: on a GPU it takes memory as needed (next to nothing) instead of the
    # card preset's share, which its trials get (each its own, set in its environment)
    presets.prepare_backend(None)
    # a key that a searched key turns off does something in a trial
    resolved = without_file_dist(resolve(args, warn_file_dist=False, searched=searched))
    env_name, library = resolved.config.env_name, resolved.config.env_library or None  # path/NAME.h: NAME, the .h
    if resumed:
        spec = with_settings(stored_spec, env_name, overrides, library)
    else:
        spec = parse_spec(table, env_name, str(path), overrides, library)
    refuse_flags_on_searched_keys(spec, resolved.config, resolved.sources)
    if not exists:  # a study made before this check resumes as it is
        refuse_keys_that_do_nothing(spec, resolved.config)
    check_space(spec, resolved.config)
    study, stored, base_toml = study_lib.open_study(name, storage, spec, to_toml(resolved.config), args.env,
                                                    again=study_command(args, name))
    base_toml = with_commands_bookkeeping(base_toml, resolved.config, resolved.sources, args.config)
    warning = None if resumed else unused_pruner(spec, "pruner" in table)
    if warning:
        print(f"jaxlab sweep: warning: {warning}", file=sys.stderr, flush=True)
    note = None if resumed or not exists else stored_parallel_note(table, path, stored.parallel, args.parallel)
    if note:
        print(f"jaxlab sweep: {note}", file=sys.stderr, flush=True)
    # trials may change on a resume (study.RUN_SETTINGS): a --sweep FILE's trials is this command's default of --trials
    return study, replace(stored, trials=spec.trials), base_toml, presets.current_devices()[0].platform


def stored_parallel_note(table: dict, path: Path, stored: int, given: int | None) -> str | None:
    """The line for a resume whose sweep file (``table``, read from ``path``) sets another parallel than the
    study's own (``stored``, which it runs with, as with no file), or None: --parallel (``given``) chose, or the
    file agrees or sets none."""
    wanted = table.get("parallel")
    if given is not None or wanted is None or wanted == stored:
        return None
    return (f"the study runs {stored} at a time, as it was created; {path}'s parallel = {wanted} is a new study's "
            f"default (--parallel {wanted} runs {wanted} at a time on this resume)")


def with_commands_bookkeeping(stored_base: str, config, sources: dict, config_file: str | None) -> str:
    """The study's base config (TOML) with the [log] and [checkpoint] values that this command sets (its flags or
    its --config file; ``config`` and ``sources`` are what it resolved): a resume may change them (study.check_same
    lets them differ), and the trials it starts take their config from this base. Unchanged for a new study."""
    from jaxlab.config import config_from_toml, to_toml, with_layer

    given = ("command line", str(Path(config_file))) if config_file else ("command line",)
    layer: dict[str, dict] = {}
    for key, source in sources.items():
        section, _, name = key.partition(".")
        if section in ("log", "checkpoint") and source in given:
            layer.setdefault(section, {})[name] = getattr(getattr(config, section), name)
    if not layer:
        return stored_base
    return to_toml(with_layer(config_from_toml(stored_base), layer, "command line"))


def run_sweep(args, study, storage, spec, base_toml: str, study_dir: Path, platform: str, environment: dict,
              existed: bool) -> int:
    """Runs the sweep in K slots until the study holds its trials or a signal stops it."""
    from jaxlab.config import config_from_toml
    from jaxlab.config.presets import GPU_PLATFORMS
    from jaxlab.sweep.supervisor import Sweep
    from jaxlab.config.threads import usable_cores
    from jaxlab.sweep.trials import plan_slots

    base = config_from_toml(base_toml)
    study_dir.mkdir(parents=True, exist_ok=True)
    base_path = study_dir / "base.toml"
    base_path.write_text(f"# the fixed part of every trial of sweep {study.study_name}\n{base_toml}")
    on_gpu = platform in GPU_PLATFORMS
    base_threads = base.vec.num_threads if isinstance(base.vec.num_threads, int) else len(usable_cores())
    target = args.trials if args.trials is not None else spec.trials
    parallel = args.parallel if args.parallel is not None else spec.parallel  # the study's, stored at its creation
    todo = runs_to_do(study, target, spec.seeds)
    slots = plan_slots(parallel, on_gpu, usable_cores(), base_threads)
    used = min(parallel, todo) if todo else parallel  # runs fill the slots from the first
    if used < parallel:  # the split stays K ways: a resumed trial keeps the share it started with
        print(f"jaxlab sweep: --parallel {parallel}, but this sweep has at most {counted(used, 'run')} to do: "
              f"{used} of "
              f"its {parallel} slots will run, each with its 1/{parallel} share of the machine; "
              f"--parallel {used} gives each run more", file=sys.stderr, flush=True)
    if not on_gpu and used > len(usable_cores()):
        print(f"jaxlab sweep: warning: --parallel {parallel} on {counted(len(usable_cores()), 'usable CPU core')}: the "
              "trials will share cores (each pinned to one, round-robin), each slower; --parallel "
              f"{len(usable_cores())} gives each trial a core of its own", file=sys.stderr, flush=True)
    held = len(study.get_trials(deepcopy=False))
    print(f"sweep {study.study_name} ({'resumed' if existed else 'new'}): {args.env}, {target} trials "
          f"({held} in the study), {parallel} at a time ({'; '.join(s.describe() for s in slots)}); "
          f"{counted(spec.seeds, 'seed')} per trial; {spec.sampler} sampler, "
          f"{'no' if spec.multi_objective or spec.pruner == 'none' else spec.pruner} pruner; "
          f"{'maximise' if spec.direction == 'maximize' else 'minimise'} {spec.metric} (mean over the last "
          f"{spec.average_last:.0%} of each run){' and minimise training time' if spec.multi_objective else ''}",
          flush=True)
    print("  " + "; ".join(p.describe() for p in spec.params), flush=True)
    print(f"  run dirs in {study_dir}/ (`jaxlab runs {study_dir}`); storage "
          f"{shown_storage(args.storage) if args.storage else study_dir / 'study.journal'}", flush=True)
    sweep = Sweep(study, storage, spec, base, base_path, study_dir, slots, environment, target,
                  say=lambda line: print(line, flush=True))
    stopped = sweep.run()
    trials = study.get_trials(deepcopy=False)
    counts = {}
    for t in trials:
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    again = study_command(args, study.study_name)
    if stopped:
        print(stopped_line(stopped, summary, sweep.cut_short, again, sweep.unstarted), file=sys.stderr)
        return 130 if stopped == "SIGINT" else 0
    if sweep.told and set(sweep.told.values()) == {"failed"}:
        print(all_failed(summary, [t for t in trials if t.number in sweep.told]), file=sys.stderr)
        return 1
    if not sweep.launched and len(trials) == held:
        print(nothing_to_run(len(trials), summary, target, again, args.trials is not None))
        return 0
    print(f"done: {summary}; results: `{again} --show`")
    return 0


def runs_to_do(study, target: int, seeds: int) -> int:
    """At most how many runs a sweep of ``study`` up to ``target`` trials can have at once: ``seeds`` for each
    trial it may still ask for and for each RUNNING one (which it may adopt)."""
    import optuna

    states = [t.state for t in study.get_trials(deepcopy=False)]
    asked = sum(state != optuna.trial.TrialState.WAITING for state in states)
    running = states.count(optuna.trial.TrialState.RUNNING)
    return seeds * (max(0, target - asked) + running)


def all_trials(count: int) -> str:
    """'the 1 trial' or 'all 3 trials', for a line about every trial of a sweep."""
    return "the 1 trial" if count == 1 else f"all {counted(count, 'trial')}"


def all_failed(summary: str, failed: list) -> str:
    """The last line of a sweep whose every trial failed (``failed``: their FrozenTrials): where their
    errors and output are."""
    dirs = [Path(d) for t in failed for d in t.user_attrs.get("run_dirs", [])]
    if not dirs:
        return (f"{all_trials(len(failed))} of this sweep failed before they ran ({summary} in the study): their "
                "values broke a config rule (errors above); change the sweep file's ranges so that they fit "
                "together, and start a new --study")
    logs = [d / "train-output.log" for d in dirs]
    log = next((f for f in logs if f.is_file()), logs[0])
    return (f"{all_trials(len(failed))} of this sweep failed ({summary} in the study; errors above); each run's "
            f"output is in train-output.log in its run dir, e.g. {os.path.relpath(log)}")


def stopped_line(stopped: str, summary: str, cut_short: list[str], again: str, unstarted: list[str] = ()) -> str:
    """The last line of a sweep that ``stopped`` (the signal) ended: the trials' states (``summary``), what
    its running trials saved, and the command that continues it (``again``). ``cut_short``: the runs that a
    second Ctrl-C stopped at once, which saved no checkpoint at their stop; ``unstarted``: the runs the stop
    caught before their first update, which saved nothing and start again."""
    unsaved = []
    if cut_short:
        unsaved.append(f"{', '.join(cut_short)} stopped at once (a second Ctrl-C) without a checkpoint at the "
                       "stop: continued from its newest checkpoint, or started again")
    if unstarted:
        unsaved.append(f"{', '.join(unstarted)} stopped before its first update, with nothing to save: started "
                       "again")
    saved = "; ".join(unsaved) + "; the other running trials saved one" if unsaved else \
        "every running trial saved a checkpoint"
    return f"stopped by {stopped}: {summary}; {saved}; continue with `{again}`"


def nothing_to_run(held: int, summary: str, target: int, again: str, given: bool = True) -> str:
    """The last line of a sweep whose study held --trials N trials already (N = 0 creates the study, or
    checks a resumed one, and runs nothing): how to add trials. ``given``: whether the command line gave
    --trials (else ``target`` is the sweep file's trials or the study's own)."""
    target_is = f"--trials is {target}" if given else f"its target is {target} (no --trials: the sweep file's or the " \
                                                       "study's)"
    line = (f"done: nothing to run: the study holds {counted(held, 'trial')}{f' ({summary})' if summary else ''} and "
            f"{target_is}; add trials with `{again} --trials N` (N above {held})")
    return line + (f"; results: `{again} --show`" if held else "")


def study_command(args, name: str) -> str:
    """The command that continues study ``name``: its --root when not the default, or its --storage
    with the password masked (see shown_storage)."""
    if args.storage:
        where = f" --storage {shlex.quote(shown_storage(args.storage))}"
    else:
        where = "" if args.root == DEFAULT_ROOT else f" --root {args.root}"
    return f"jaxlab sweep {args.env} --study {name}{where}"


def show_results(args, name: str, storage, study_dir: Path) -> int:
    from jaxlab.sweep import results
    from jaxlab.sweep import study as study_lib

    study, spec, base_toml = study_lib.open_study(name, storage, None, None, args.env)
    study_dir.mkdir(parents=True, exist_ok=True)
    if args.show:
        print(results.show(study, spec, base_toml, study_dir, args.env, study_command(args, name)))
    if args.plot:
        for line in results.plot(study, spec, study_dir, study_command(args, name)):
            print(line)
    return 0


def add_commands(add) -> None:
    """Registers `jaxlab sweep` with ``add`` (see common.command_adder)."""
    sweep = add("sweep", "search hyperparameters with Optuna (parallel trials, pruning, resume)",
                "Search hyperparameters of ENV with Optuna. Every trial is an ordinary `jaxlab train` run "
                "(runs/sweeps/STUDY/trial-N-seed-S); --parallel K runs K at a time as child processes "
                "sharing the machine. The search space is a TOML file (default configs/sweeps/ENV.toml; "
                "format in README.md, 'Sweeps'); --preset, --config and flags set the fixed part of the "
                f"config. Ctrl-C or SIGTERM stops every trial with a checkpoint; --study NAME resumes. {LAYERS}",
                sweep_command, with_config=True)
    sweep.epilog = config_help(without=("dist",))  # refuse_dist_flags
    sweep.add_argument("--sweep", type=user_path, metavar="FILE",
                       help="search-space file (default configs/sweeps/ENV.toml)")
    sweep.add_argument("--trials", type=whole_number, metavar="N", help="trials the study should hold when done, counting "
                       "those it has (default: the --sweep file's trials, else a resumed study's own, else the "
                       "default file's); 0 creates the study and runs nothing")
    sweep.add_argument("--parallel", type=whole_number, metavar="K", help="trials run at once on this "
                       "machine (CPU: the cores are split between them; GPU: about 0.9/K of its memory each); "
                       "default: the file's parallel (1) for a new study, the study's own for a resumed one")
    sweep.add_argument("--study", metavar="NAME", help="study name: a new one, or one to resume or show "
                       "(default ENV-TIMESTAMP)")
    sweep.add_argument("--storage", metavar="URL", help="postgresql://... or mysql+pymysql://... to share the "
                       "study between machines, or sqlite:///PATH.db (default: the journal file "
                       "runs/sweeps/STUDY/study.journal)")
    sweep.add_argument("--root", default=DEFAULT_ROOT, type=user_path, metavar="DIR", help="folder of the study dirs "
                       "(default runs/sweeps)")
    sweep.add_argument("--seeds", type=whole_number, metavar="S", help="seeds per trial, averaged (default: the file's)")
    sweep.add_argument("--objective", metavar="WHAT", help="score, or score,cost: also minimise training time "
                       "without compiles (Pareto front)")
    sweep.add_argument("--sampler", metavar="NAME", help="tpe (default) or cmaes")
    sweep.add_argument("--pruner", metavar="NAME", help="median (default), hyperband or none")
    sweep.add_argument("--show", action="store_true", help="print the best trials (or the Pareto front) with their "
                       "run dirs and write the best config to runs/sweeps/STUDY/best.toml; runs nothing")
    sweep.add_argument("--plot", action="store_true", help="write history.png, importances.png (and pareto.png) "
                       "into the study dir; runs nothing")

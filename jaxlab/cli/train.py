"""`jaxlab train ENV` (with resume) and `jaxlab eval ENV --checkpoint PATH`."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from jaxlab.cli.common import (LAYERS, cannot_write, check_saved_header, check_saved_module, empty_path_problem,
                               env_name_of, fail, number, output_file_problem, resolve,
                               unplayed_header_toml_warning, user_path, warn, whole_number)
from jaxlab.observe.records import folder_name
from jaxlab.messages import counted, install_extra, plural


def claim_new_folder(base: Path) -> tuple[str, bool]:
    """(the first of ``base``, base-2, base-3, ... that this process could create, True), made at once so that
    runs started in the same second (`jaxlab train ENV --train.seed S &` for several seeds) each get their own
    instead of the later ones being refused as "in use"; (``base``, False) when none can be created (its
    write check then says why)."""
    for index in range(1, 1000):
        folder = base if index == 1 else base.with_name(f"{base.name}-{index}")
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError:
            break
        return str(folder), True
    return str(base), False


def train_command(args: argparse.Namespace) -> int:
    """Trains ARGS.env (or resumes a run) with checkpoints; prints progress and where things went.
    Exit status: 0 done or stopped by SIGTERM or a broken pipe after saving (the reader of stdout or
    stderr exited: `jaxlab train ENV | head`; see StopSignals), 130 stopped by SIGINT after saving, 1 the
    run stopped on an error (a checkpoint that cannot be written, a NaN loss), 2 bad config or input.
    In a run over several processes (--dist.*, jaxlab.run.distributed) every process runs this; process
    0 prints and writes the records, and every process saves and resumes its part of each checkpoint.
    SIGINT and SIGTERM are taken once the processes have met (jax.distributed.initialize blocks in C,
    where a handler of ours would never run, so there they still stop the process at once; and it
    installs a C SIGTERM handler of its own, its preemption notifier, which ours must replace: set
    before it, a SIGTERM to one process of a run stopped nothing) through JAX's start and the compile:
    one arriving before the first update is acted on after it, with a checkpoint, like one during
    training."""
    from jaxlab.checkpoint import CheckpointError
    from jaxlab.config import ConfigError
    from jaxlab.run import distributed
    from jaxlab.run.signals import StopSignals

    empty = empty_path_problem(args)
    if empty:
        return fail("train", ConfigError(empty))
    try:
        settings = distributed.start(args.flags, command="jaxlab train")  # before anything uses JAX
    except ConfigError as err:
        return fail("train", err)
    with StopSignals(pipes=True) as stop:  # a broken stdout/stderr pipe stops the run as SIGTERM does
        try:
            code = _train(args, stop, settings)
        except (ConfigError, CheckpointError) as err:
            code = fail("train", err)
        if code == 2 and stop.received:  # its line said the update would finish: there was none
            print(f"jaxlab train: the {stop.received} taken while starting stopped nothing: the run did not start",
                  file=sys.stderr)
        return code


#: shared_config_values' one key for all the env's own parameters (--env.NAME)
ENV_PARAMETERS = "env.* (the env's parameters)"


def shared_config_values(config) -> dict[str, str]:
    """``config``'s values as {key: its TOML value} ("train.learning_rate": "0.0003"; the env's own
    parameters as one entry, ENV_PARAMETERS, since which of them are set may vary), the same keys in the
    same order for every config, without what may differ between a run's processes:
    dist.process_id, the coordinator's address (process 0 may name itself otherwise than the others
    name it) and the C threads (sized to each host's cores; they change no result)."""
    from dataclasses import replace

    from jaxlab.config.layers import as_layer, toml_value
    from jaxlab.config.schema import ENV_KEYS

    dist = replace(config.dist, process_id=0, coordinator="")
    layer = as_layer(replace(config, dist=dist, vec=replace(config.vec, num_threads=0)))
    values = {"env_name": toml_value(config.env_name), "preset": toml_value(config.preset)}
    env = layer.pop("env")
    values.update({f"env.{key}": toml_value(env.pop(key)) for key in ENV_KEYS})
    values[ENV_PARAMETERS] = ", ".join(f"{key} = {toml_value(value)}" for key, value in sorted(env.items()))
    values.update({f"{section}.{key}": toml_value(value) for section, table in layer.items()
                   for key, value in table.items()})
    return values


def differing_config_message(differ: dict[int, list[str]]) -> str:
    """The refusal of a run whose processes resolved other configs than process 0 (``differ``: {process:
    the keys that differ}, from jaxlab.run.distributed.keys_that_differ)."""
    where = "; ".join(f"in process {p}: {', '.join(keys)}" for p, keys in differ.items())
    processes = f"{plural(len(differ), 'process', 'processes')} {', '.join(map(str, differ))}"
    return (f"{processes} resolved another config than process 0 ({where}) from other "
            "flags, --config file, env file or preset; give every process the same command but --dist.process-id, "
            "and compare with `jaxlab config ENV ...` in each")


def check_shared_host(resolved, processes: int) -> None:
    """In a run over several ``processes``, the memory check of ``resolved`` (cli.common.Resolved) again
    for the run's processes on this host together, which share its memory (each was checked alone
    before they met); ConfigError naming them. Every process must call it, in step (two all-gathers): hosts
    differ in memory and in processes, so a process whose host fits is refused too when another's does not
    (it would otherwise train on and wait for the others at its next collective until the 5-minute timeout)."""
    if processes == 1:
        return
    from jaxlab.config import ConfigError, memory
    from jaxlab.run.distributed import any_process, processes_on_this_host

    on_host = processes_on_this_host()
    refusal = None
    if on_host > 1:
        try:
            memory.check_fits(resolved.config, resolved.sizes, resolved.shape, resolved.memory_limit, on_host)
        except ConfigError as err:
            refusal = err
    (refused_somewhere,) = any_process(refusal is not None)
    if refusal is not None:
        raise refusal
    if refused_somewhere:
        raise ConfigError("the processes of this run on another host need more host memory together than it has "
                          "(that process's error names the sizes and what to reduce); this host's share fits")


def _train(args: argparse.Namespace, stop, settings) -> int:
    """train_command's work once the processes have met (``settings``: jaxlab.run.distributed.Settings),
    with ``stop`` (StopSignals) active."""
    import jax

    from jaxlab.checkpoint import CheckpointError
    from jaxlab.config import ConfigError
    from jaxlab.run import distributed
    from jaxlab.train.trainer import check_batch, check_processes

    processes = settings.num_processes
    searched = frozenset(filter(None, getattr(args, "sweep_searched", "").split(",")))  # a sweep trial's
    resolved = resolve(args, warn if settings.process_id == 0 else quiet, searched=searched)  # JAX's backend starts
    config, sizes = resolved.config, resolved.sizes
    differ = distributed.keys_that_differ(shared_config_values(config)) if processes > 1 else {}
    if differ:  # each process resolves its own flags: one given another value would train apart, silently
        raise ConfigError(differing_config_message(differ))
    check_shared_host(resolved, processes)
    for path, meta in resolved.resume_meta.items():  # before anything is built or loaded
        check_processes(meta, path, processes, settings.count)
        check_batch(meta, path, sizes)
    primary = distributed.is_primary()
    say = print if primary else quiet
    profile = None
    if args.profile is not None:
        from jaxlab.run.profile import ProfileUpdates, parse_updates

        try:
            updates = "2:3" if args.profile_updates is None else args.profile_updates  # "" is refused, not the default
            folder = Path(args.profile)  # ~ expanded by its argparse type (user_path)
            profile = ProfileUpdates(folder, *parse_updates(updates))
        except ValueError as err:
            print(f"jaxlab train: error: {err}", file=sys.stderr)
            return 2
        # a resumed run's range is checked once its update is known (a warning)
        problem = None if resolved.resume is not None else profile.missed(1, sizes.num_updates)
        if problem is None:
            unwritable = cannot_write(folder) if args.profile.strip() else "an empty name"
            problem = unwritable and f"--profile {args.profile!r}: cannot write there ({unwritable}); pass a " \
                                     "folder you can write"
        if problem:
            print(f"jaxlab train: error: {problem}", file=sys.stderr)
            return 2
        profile = profile if primary else None  # several processes: process 0's updates are traced
    elif args.profile_updates is not None:
        print(f"jaxlab train: error: --profile-updates {args.profile_updates} needs --profile DIR, the folder the "
              "trace goes to", file=sys.stderr)
        return 2
    claimed = False  # whether this process made the default run dir (claim_new_folder)
    if resolved.resume is not None:
        from jaxlab.observe.logfile import drop_closed_loop_noise
        from jaxlab.run.resume import resume_run_dir, set_aside_from

        drop_closed_loop_noise()  # a damaged checkpoint's failed read, after run.log closed: its line says it all

        aside = set_aside_from(resolved.resume)
        if aside is not None and args.run_dir is None:  # its run dir's records after it are another resume's
            update = resolved.resume_meta[resolved.resume]["update"]
            raise ConfigError(f"--resume {args.resume}: this checkpoint (update {update}) was set aside by an earlier "
                              f"resume of {aside} that went back before it, and {aside}'s records from there on are "
                              f"that resume's; continue it in a run dir of its own: --run-dir DIR (e.g. --run-dir "
                              f"{aside}-{resolved.resume.name})")
        run_dir = args.run_dir or str(resume_run_dir(resolved.resume))
    else:  # several processes: process 0's clock names the one run dir of them all
        stamp = distributed.from_process_0(time.strftime("%Y%m%d-%H%M%S"))
        run_dir = args.run_dir or f"runs/{folder_name(config.env_name)}-{stamp}"
        if args.run_dir is None and processes == 1:  # runs started in one second (seeds launched together)
            run_dir, claimed = claim_new_folder(Path(run_dir))
    from jaxlab.run.loop import other_things_problem

    problem = other_things_problem(Path(run_dir), resolved.resume, config.env_name)
    if problem:  # before the write check, which makes RUN_DIR/checkpoints
        print(f"jaxlab train: error: {problem}", file=sys.stderr)
        return 2
    new_run_dir = claimed or not Path(run_dir).exists()  # removed again if the run does not start (bad input)
    for directory in (Path(run_dir), Path(run_dir) / "checkpoints"):
        problem = cannot_write(directory)
        if problem:
            print(f"jaxlab train: error: cannot write {str(directory)!r} ({problem}); "
                  "pass a writable --run-dir DIR", file=sys.stderr)
            return 2
    where_from = (f"process 0 of {processes} ({jax.device_count()} devices in all)" if processes > 1
                  else f"preset {config.preset} ({resolved.preset_reason})")
    say(f"jaxlab train {config.env_name}: {sizes.describe()}; {where_from}; run dir {run_dir}")
    for change in resolved.changes:
        say(f"resume: applying the changed {change}")
    if sizes.num_updates < 10:
        say(f"note: only {counted(sizes.num_updates, 'update')} of {sizes.batch_size:,} steps; PPO needs tens of "
            f"updates: raise --train.total-timesteps (e.g. {50 * sizes.batch_size}) or use fewer envs")
    from jaxlab import checkpoint
    from jaxlab.config.memory import out_of_memory_message
    from jaxlab.run.lock import RunDirInUse
    from jaxlab.run.loop import train_run
    from jaxlab.train.rollout import EnvStepError

    observers = RunObservers(config, sizes, run_dir, stop) if primary else None
    try:
        result = train_run(config, run_dir, resume=resolved.resume, on_log=observers, warn=warn if primary else quiet,
                           notes=args.notes, on_start=observers.start if observers else None,
                           resume_meta=resolved.resume_meta, resume_any_env=args.resume_any_env, profile=profile,
                           stop=stop, remove_if_not_started=new_run_dir)
        stop.ended = True  # a pipe that breaks at the lines below stops nothing
    except KeyboardInterrupt as err:
        from jaxlab.run.signals import interrupted

        interrupted()  # the process ends at once (launch.main): the interrupt may have cut JAX's wait for a compile
        close(observers)
        if isinstance(err, checkpoint.RestoreInterrupted):  # in the resume's read: before the run dir was touched
            print(f"jaxlab train: {err}", file=sys.stderr)
            return 130
        metrics = Path(run_dir) / "metrics.jsonl"
        where = (f"the metrics so far are in {metrics}" if metrics.is_file() and metrics.stat().st_size
                 else "before the first update ended; nothing was saved")
        saved = checkpoint.step_dirs(Path(run_dir) / "checkpoints")
        if saved:  # saved before the interrupt (its own save was cut short)
            where += (f"; the last checkpoint is {saved[0]}: continue with `jaxlab train {config.env_name} --resume "
                      f"{shlex.quote(str(run_dir))}`")
        print(f"interrupted; {where}", file=sys.stderr)
        return 130
    except (ConfigError, CheckpointError, RunDirInUse) as err:
        close(observers, 1)
        return fail("train", err)
    except EnvStepError as err:  # the env's code failed: one line naming it and what was kept
        close(observers, 1)
        kept = checkpoint_words(Path(run_dir))
        print(f"jaxlab train: error: {err}; the updates before it are in {run_dir}/metrics.jsonl and {kept} "
              f"(--checkpoint.interval N saves every N updates); the traceback is in {log_traceback(err, run_dir)}",
              file=sys.stderr)
        return 1
    except Exception as err:  # an out-of-memory the estimate did not foresee: one line; the rest propagates
        close(observers, 1)
        unwritable = run_file_unwritable(err, Path(run_dir)) if isinstance(err, OSError) else None
        if unwritable is not None:  # a file of the run dir's own: one line, the traceback in run.log
            print(f"jaxlab train: error: {unwritable}; the traceback is in {log_traceback(err, run_dir)}",
                  file=sys.stderr)
            return 1
        message = out_of_memory_message(err, config)
        if message is None:
            raise
        print(f"jaxlab train: error: {message}; the run's records and checkpoints are in {run_dir}", file=sys.stderr)
        return 1
    close(observers, 1 if result.error else 0)
    if profile is not None and profile.where():
        say(profile.where())
    where = f"checkpoint {result.checkpoint}" if result.checkpoint else "no checkpoint"
    if result.error:
        print(f"jaxlab train: error: {stopped_by_error(result.error, result.checkpoint)}", file=sys.stderr)
        return 1
    if result.stopped:
        if primary:
            print(f"stopped by {result.stopped} after update "
                  f"{result.records[-1]['update'] if result.records else 0}; saved {where}; continue with "
                  f"`jaxlab train {config.env_name} --resume {shlex.quote(str(run_dir))}`", file=sys.stderr)
        return 130 if result.stopped == "SIGINT" else 0  # SIGTERM, or SIGPIPE: a broken pipe (StopSignals)
    if result.records:
        final = final_return(result, run_dir) if primary else ""
        say(f"done: {result.records[-1]['global_step']:,} steps in {result.records[-1]['wall_time']:.1f}s; "
            f"{final}; metrics in {run_dir}/metrics.jsonl; {where}")
    else:
        say(nothing_to_train(result.resumed_from, sizes))
    return 0


def stopped_by_error(error: str, saved: Path | None) -> str:
    """The error line's words for a run that ``error`` stopped (a failed save, a NaN loss), with its newest complete
    checkpoint ``saved`` (None: none), unless the error names it already (a failed save names the last good
    one; the line said it twice: `...; the last good checkpoint is none; no checkpoint`)."""
    if "last good checkpoint" in error or "so it resumes" in error:
        return error
    return f"{error}; " + (f"the last good checkpoint is {saved}" if saved else "no checkpoint was saved")


def final_return(result, run_dir: str) -> str:
    """The end-of-run line's word on the return: the last mean episode return this run logged. A resume
    that ended no episode gives the run's last from its whole metrics.jsonl (which keeps the records
    before the checkpoint), saying so; an env that logs no episode_return (the contract asks for none),
    or a run that ended no episode, has none."""
    from jaxlab.observe.records import last_return, read_metrics

    found = last_return(result.records)
    if found is not None:
        return f"final mean return {found[1]:.2f}"
    if result.resumed_from is None:
        return "no episode return was logged"
    found = last_return(read_metrics(Path(run_dir)))
    stretch = f"the {counted(len(result.records), 'update')} of this resume ended no episode"
    if found is None:
        return f"no episode return was logged in the run ({stretch})"
    return f"final mean return {found[1]:.2f}, logged at update {found[0]} ({stretch})"


def nothing_to_train(resumed_from: Path, sizes) -> str:
    """The line of a resume whose checkpoint is at or past the run's last update (``sizes``: the resumed
    config's): a lower train.total_timesteps than the checkpoint's (it said "update 78 of 78" of a
    checkpoint at update 160) is named as such."""
    from jaxlab.checkpoint import read_meta

    at = read_meta(resumed_from)["update"]
    if at <= sizes.num_updates:
        return (f"nothing to train: the checkpoint is at update {at} of {sizes.num_updates}; raise "
                "--train.total-timesteps to continue")
    return (f"nothing to train: the checkpoint is at update {at}, past the {counted(sizes.num_updates, 'update')} "
            f"of train.total_timesteps {sizes.total_timesteps:,}; to continue, raise --train.total-timesteps "
            f"above {at * sizes.batch_size:,}")


def quiet(*args, **kwargs) -> None:
    """What another process than 0 of a run over several does with a message: nothing."""


def run_file_unwritable(err: OSError, run_dir: Path) -> str | None:
    """The words for ``err``, an OSError on a file of the run dir's own (its records, .lock, run.log, the
    files a resume rewrites: a disk gone full or read-only, a folder where the file goes), naming the file and
    what was kept; None for another file's error (a bug: its traceback)."""
    name = Path(err.filename) if err.filename else None
    if name is None or run_dir.resolve() not in (name.resolve(), *name.resolve().parents):
        return None
    saved = checkpoint_words(run_dir)
    return (f"cannot write {name} ({err.strerror or err}): free space or move what is in the way, then continue "
            f"with --resume {shlex.quote(str(run_dir))}; {saved}")


def checkpoint_words(run_dir: Path) -> str:
    """'the last checkpoint is RUN/checkpoints/N' (the newest complete one), or that none was saved."""
    from jaxlab import checkpoint

    saved = checkpoint.step_dirs(run_dir / "checkpoints")
    return f"the last checkpoint is {saved[0]}" if saved else "no checkpoint was saved yet"


def log_traceback(err: BaseException, run_dir: str) -> str:
    """Appends ``err``'s whole traceback (its cause's too) to RUN_DIR/run.log; returns where it went."""
    import traceback

    log = Path(run_dir) / "run.log"
    try:
        with open(log, "a") as file:
            file.write("".join(traceback.format_exception(err)))
    except OSError:
        return "nowhere (run.log cannot be written)"
    return str(log)


def close(observers, exit_code: int = 0) -> None:
    """Closes the run's observers; ``exit_code`` 1 marks the run as failed in wandb."""
    if observers is not None:
        observers.close(exit_code)


class RunObservers:
    """The on_log of `jaxlab train`: warnings (jaxlab.alerts), the terminal reporter and wandb. An error
    in a reporter or logger is reported once and that one is dropped; training goes on."""

    def __init__(self, config, sizes, run_dir: str, stop=None):
        self.config, self.sizes, self.run_dir, self.stop = config, sizes, run_dir, stop  # stop: StopSignals
        self.outputs: list = []
        self.reporter = None
        self.alerts = None

    def start(self, trainer) -> None:
        from jaxlab.observe.alerts import Alerts
        from jaxlab.observe.dashboard import RunInfo, make_reporter

        import jax

        device = jax.devices()[0]
        info = RunInfo(self.config.env_name, trainer.num_params, f"{device.platform}:{device.device_kind}",
                       self.config.preset, self.run_dir, self.sizes.num_updates,
                       self.sizes.num_updates * self.sizes.batch_size, trainer.env.kind.log_names)
        self.alerts = Alerts(self.sizes.segments * self.sizes.horizon)  # each agent's steps per update
        self.reporter = make_reporter(self.config.log.dashboard, info, self.config.log.interval)
        self.outputs = [("terminal", self.reporter.update)]
        if self.stop is not None and hasattr(self.reporter, "say_status"):  # the live dashboard: a stop signal's
            self.stop.say_through(self.reporter.say_status)  # line is its last line, not written across it
        if self.config.log.wandb:
            from jaxlab.observe.wandb_logger import WandbLogger

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

    def close(self, exit_code: int = 0) -> None:
        if self.reporter is not None:
            self.reporter.close()
        wandb = getattr(self, "wandb", None)
        if wandb is not None:
            line = wandb.close(exit_code)
            if line:
                print(line, file=sys.stderr)


#: eval's --gif-* options and their defaults (None on the command line: not given, which --gif needs to know)
GIF_DEFAULTS = {"gif_size": "480x240", "gif_frames": 500, "gif_every": 1, "gif_fps": 25.0}


def gif_size(text: str) -> tuple[int, int]:
    """--gif-size WxH as (width, height); ConfigError naming the value otherwise."""
    from jaxlab.config import ConfigError
    from jaxlab.env.library import constant

    width, _, height = text.lower().partition("x")
    limit = constant("MAX_FRAME_SIDE")
    if not (width.isdigit() and height.isdigit() and 1 <= int(width) <= limit and 1 <= int(height) <= limit):
        raise ConfigError(f"--gif-size {text!r} must be WIDTHxHEIGHT in pixels, each in [1, {limit}], e.g. 480x240")
    return int(width), int(height)


EVAL_ENV_FLAGS = """env flags (as `jaxlab train` takes them; `jaxlab envs` lists each env's parameters):
  --env.NAME VALUE            play on another value of an env parameter than the run's, e.g. a harder
                              setting or the drone env's --env.num-drones 16; one that changes the
                              observation or action shape the policy was trained on is refused"""


def eval_env_flags(flags: list[str]) -> dict[str, str]:
    """The env parameters that eval's ``--env.KEY VALUE`` flags set, {key: value as written}; ConfigError for
    a flag of another section: eval plays the policy with the rest of the checkpoint's config."""
    from jaxlab.config import ConfigError, parse_flags
    from jaxlab.config.validate import flag_of

    layer = parse_flags(flags)
    others = [flag_of(f"{section}.{key}") for section, keys in layer.items() if section != "env" for key in keys]
    if others:
        raise ConfigError(f"{' '.join(others)}: jaxlab eval takes env parameters only (--env.KEY VALUE, see `jaxlab "
                          "envs`), the rest of the config is the checkpoint's; eval's own --seed, --num-envs, "
                          "--episodes and --deterministic set how it plays")
    return layer.get("env", {})


#: The steps `jaxlab eval` plays at most (--max-steps): without a cap, an env whose episodes never end (a step that
#: never sets a terminal or truncation flag) played for ever, printing nothing.
EVAL_MAX_STEPS = 100_000


def short_of_episodes(played: int, asked: int, max_steps: int) -> str:
    """What eval says when its envs played ``max_steps`` steps and only ``played`` of the ``asked`` episodes
    ended."""
    return (f"only {counted(played, 'episode')} of the {asked:,} asked for ended in --max-steps {max_steps:,} steps: "
            "the env's episodes may never end (a step that never sets a terminal or truncation flag, such as a "
            "missing time limit), or last longer; raise --max-steps for longer ones")


def eval_command(args: argparse.Namespace) -> int:
    """Plays the policy of a checkpoint (its config is read from the checkpoint, with ARGS's --env.KEY VALUE
    flags changing env parameters that keep the policy's observations and actions) and prints mean ± std
    of return and length and the env's statistics; --render / --save-frames show the first episode
    of env 0 as text (the env's render hook), --gif draws it as an animated GIF (its pixels hook)."""
    from jaxlab.agent.custom import missing_file_words, moved_module
    from jaxlab.checkpoint import read_meta
    from jaxlab.config import ConfigError, checkpoint_config, memory, presets
    from jaxlab.config.layers import repeated_flags
    from jaxlab.env.python_envs import is_python_env
    from jaxlab.env.spaces import Box
    from jaxlab.observe.logfile import drop_closed_loop_noise
    from jaxlab.run.resume import find_checkpoint, newest_usable
    from jaxlab.train.evaluation import load_trainer, play, settings_for_here, with_env_params, with_module

    overrides = eval_env_flags(args.flags)
    for line in repeated_flags(args.flags):
        warn(f"warning: {line}")
    if args.episodes < 1:
        raise ConfigError(f"--episodes {args.episodes} must be at least 1, e.g. --episodes 10")
    if args.max_steps < 1:
        raise ConfigError(f"--max-steps {args.max_steps} must be at least 1, e.g. --max-steps {EVAL_MAX_STEPS}")
    if args.num_envs is not None and args.num_envs < 1:
        raise ConfigError(f"--num-envs {args.num_envs} must be at least 1, e.g. --num-envs 16 (or leave it out: "
                          f"min(episodes, 64))")
    if not 0 <= args.seed < 2**63:
        raise ConfigError(f"--seed {args.seed} must be in [0, 2**63), e.g. --seed 12345")
    for flag, name, suffix in (("--save-frames", args.save_frames, None), ("--gif", args.gif, ".gif")):
        problem = name is not None and output_file_problem(flag, name, suffix)
        if problem:  # before the checkpoint is loaded and played
            raise ConfigError(problem)
    if args.gif and args.save_frames and Path(args.gif).resolve() == Path(args.save_frames).resolve():
        raise ConfigError(f"--gif and --save-frames both name {args.gif}: the GIF would overwrite the text frames; "
                          f"give them two files, e.g. --save-frames {Path(args.gif).with_suffix('.txt')}")
    given = [f"--{key.replace('_', '-')}" for key in GIF_DEFAULTS if getattr(args, key) is not None]
    if given and not args.gif:
        one = len(given) == 1
        raise ConfigError(f"{' and '.join(given)} only shape{'s' if one else ''} a GIF: add --gif FILE "
                          f"(e.g. --gif episode.gif) or leave {'it' if one else 'them'} out")
    for key, default in GIF_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    size = None
    if args.gif:
        from jaxlab.observe.gif import PillowMissing, require_pillow

        size = gif_size(args.gif_size)
        for flag, value in (("--gif-frames", args.gif_frames), ("--gif-every", args.gif_every)):
            if value < 1:
                raise ConfigError(f"{flag} {value} must be at least 1")
        if not 0.01 <= args.gif_fps <= 50:
            raise ConfigError(f"--gif-fps {args.gif_fps} must be in [0.01, 50]: a GIF shows a picture for at "
                              "least 20 ms, so 50 is the most it plays; 0.01 shows each for 100 s; e.g. --gif-fps 25")
        try:
            require_pillow()  # before anything is loaded: a missing extra is one line
        except PillowMissing as err:
            raise ConfigError(str(err)) from None
    said: set[str] = set()

    def warn_once(message: str) -> None:  # the same warning for each damaged checkpoint passed over: once
        if message not in said:
            said.add(message)
            warn(message)

    if args.env is None:  # the checkpoint's env (required_env refused --checkpoint latest without ENV)
        found = find_checkpoint(args.checkpoint, "", flag="--checkpoint")
        args.env = newest_usable(found, read_meta, warn_once)[1]["env_name"]  # load passes over them again, quietly
    name = env_name_of(args.env)
    if (args.render or args.save_frames or args.gif) and is_python_env(name):  # before anything is loaded
        raise ConfigError(f"env {name!r} is a Python env: jaxlab draws no text or pictures of it (Gymnasium and "
                          "PettingZoo envs render through their own render_mode); drop --render/--save-frames/--gif")
    # a header named as ENV is the env's source (as for train --resume), else the one the checkpoint records
    library = str(Path(args.env).expanduser().absolute()) if args.env.endswith(".h") else None

    num_envs = args.num_envs or min(args.episodes, 64)

    def load(checkpoint):
        meta = read_meta(checkpoint)
        if meta["env_name"] != name:  # before the env is built: ENV's header may not have the checkpoint's env
            raise ConfigError(f"{checkpoint} is a checkpoint of {meta['env_name']!r}, not {name!r}; "
                              f"run `jaxlab eval {meta['env_name']} --checkpoint {args.checkpoint}`")
        if library is None:
            check_saved_header(meta, "eval", f"--checkpoint {args.checkpoint}")
        saved_config = checkpoint_config(meta, library=library)
        presets.prepare_backend(saved_config.device.memory_fraction)  # before JAX starts, as train --resume does
        played = with_env_params(saved_config, overrides)  # refused before anything is built
        unplayed = unplayed_header_toml_warning(played)
        if unplayed is not None:
            warn_once(unplayed)
        saved = saved_config.policy.module
        if args.policy_module is None:
            check_saved_module(saved, "eval", f"{args.env} --checkpoint {args.checkpoint}", "--policy-module")
        else:
            if missing := missing_file_words(args.policy_module):
                raise ConfigError(f"--policy-module {args.policy_module}: {missing}; give the run's policy file")
            if not moved_module(saved, args.policy_module):
                raise ConfigError(f"--policy-module {args.policy_module} is not the checkpoint's policy.module "
                                  f"({saved or 'none: the built-in network'}) at a new path: it must name the same "
                                  "class in a file of the same contents (or the saved file must be gone)")
        played = with_module(played, args.policy_module)  # the module checked: the estimate builds it
        limit = memory.current_limit()  # JAX starts here
        here = settings_for_here(played, warn_once)  # the config load_trainer builds (its device count)
        memory.check_play_fits(here, memory.env_shape(here), num_envs, limit)
        return load_trainer(checkpoint, warn=warn_once, library=library, module=args.policy_module)

    drop_closed_loop_noise()  # a damaged checkpoint's failed read: its "unreadable" line says it all
    path, trainer = newest_usable(find_checkpoint(args.checkpoint, name, flag="--checkpoint"), load, warn_once)
    watching = bool(args.render or args.save_frames)
    if watching and not trainer.env.kind.has("render"):
        trainer.close()
        raise ConfigError(f"env {name!r} has no text rendering (no `render` option in its CENV_ENV); "
                          "drop --render/--save-frames, or give the env a render hook (see BUILD.md)")
    if args.gif and not trainer.env.kind.has("pixels"):
        trainer.close()
        hint = (" (it has a text log instead: --render or --save-frames FILE)" if trainer.env.kind.has("render")
                else "")
        raise ConfigError(f"env {name!r} draws no pictures (no `pixels` option in its CENV_ENV), so --gif cannot "
                          f"draw it: drop --gif{hint}, or give the env a pixels hook (see BUILD.md)")
    frames: list[str] = []
    space = trainer.env.action_space
    pictures: list[np.ndarray] = []
    gif_done = [False]

    def record_frame(t, observations, actions, rewards, ended, frame=None, picture=None):
        """The first episode of env 0's first agent, one frame per step with the action as the env applied it
        (a Box action clipped to its bounds) and the reward."""
        if picture is not None and not gif_done[0]:
            if t % args.gif_every == 0:
                pictures.append(picture)
            gif_done[0] = bool(ended[0]) or len(pictures) >= args.gif_frames
        if not watching or (frames and frames[-1].endswith("(episode ended)")):
            return
        applied = space.clip(actions[0]) if isinstance(space, Box) else actions[0]  # the env clips what it gets
        action = " ".join(str(a) for a in np.asarray(applied).reshape(-1))
        line = f"{t:5d}  {frame}  action {action}  reward {float(rewards[0]):g}"
        frames.append(line + ("  (episode ended)" if ended[0] else ""))
        if args.render:
            print(frames[-1], flush=True)

    drawing = None if size is None else (lambda: None if gif_done[0] else size)
    try:
        with trainer:
            played = with_env_params(trainer.config, overrides)
            result = play(trainer, num_envs=num_envs, seed=args.seed, deterministic=args.deterministic,
                          episodes=args.episodes, steps=args.max_steps,
                          on_step=record_frame if watching or drawing else None,
                          render=watching, picture=drawing, config=played)
    except (ValueError, MemoryError) as err:  # the envs cannot be made (out of memory): one line
        if is_python_env(trainer.config.env_name) and trainer.config.env_name in str(err):
            raise ConfigError(str(err)) from None  # the adapters' own words (a seed its reset refuses): one line
        if not isinstance(err, MemoryError) and not str(err).startswith("cannot create env"):
            raise
        raise ConfigError(f"--num-envs {num_envs}: {str(err) or 'out of memory'}; play on fewer envs, e.g. "
                          f"--num-envs {min(num_envs // 16 or 1, 64)}") from None
    if args.save_frames:
        Path(args.save_frames).write_text("\n".join(frames) + "\n")
    if args.gif:
        from jaxlab.observe.gif import write_gif

        write_gif(pictures, args.gif, fps=args.gif_fps)
    returns, lengths = result["returns"], result["lengths"]
    if len(returns) == 0:
        raise ConfigError(short_of_episodes(0, args.episodes, args.max_steps))
    if len(returns) < args.episodes:
        warn(f"note: {short_of_episodes(len(returns), args.episodes, args.max_steps)}")
    mode = "deterministic" if args.deterministic else "sampled"
    changed = "".join(f", env.{key} = {value}" for key, value in overrides.items())
    rounded = (f" (--episodes {args.episodes} rounded up to whole envs of {result['agents_per_env']} agents)"
               if len(returns) > args.episodes else "")
    print(f"{name} from {path}: {counted(len(returns), 'episode')}{rounded}, {mode} actions, seed {args.seed}{changed}")
    print(f"  return {returns.mean():.2f} ± {returns.std():.2f}   length {lengths.mean():.1f} ± {lengths.std():.1f}")
    stats = {k: v for k, v in result.items()
             if k not in ("returns", "lengths", "episodes", "stat_episodes", "agents_per_env") and v is not None}
    if stats:
        stat_episodes = result["stat_episodes"]
        over = (f"over {counted(stat_episodes, 'episode')}" if stat_episodes == result["episodes"] else
                f"over {stat_episodes} of the {counted(result['episodes'], 'episode')}: those that ended in steps "
                "where every agent ending in the same env was one of the kept episodes, which favours short ones")
        print("  " + "   ".join(f"{k} {v:.3f}" for k, v in stats.items()) + f"   (the env's statistics {over})")
    if args.save_frames:
        print(f"  {len(frames)} frames of env 0's first episode in {args.save_frames}")
    if args.gif:
        from jaxlab.observe.gif import frame_count

        print(picture_line(len(pictures), frame_count(args.gif), size, args.gif))
    return 0


def picture_line(pictures: int, frames: int, size: tuple[int, int], path: str) -> str:
    """eval's line on its GIF at ``path``: ``pictures`` of ``size`` (width, height) drawn, and, when fewer,
    the ``frames`` the GIF holds (identical pictures in a row are one frame)."""
    line = f"  {counted(pictures, 'picture')} of env 0's first episode ({size[0]}x{size[1]}) in {path}"
    if frames < pictures:
        line += (f", as {counted(frames, 'GIF frame')} (identical pictures in a row are one frame, shown as long as "
                 "they all were)")
    return line


def add_commands(add) -> None:
    """Registers `jaxlab train` and `jaxlab eval` with ``add`` (see common.command_adder)."""
    train = add("train", "train a policy on an env", f"Train an LSTM-PPO policy on ENV. {LAYERS}",
                train_command, with_config=True)
    train.add_argument("--run-dir", type=user_path, metavar="DIR",
                       help="where config.toml, metrics.jsonl and checkpoints/ "
                       "go (default runs/ENV-TIMESTAMP; with --resume, the resumed run's dir; needed to resume a "
                       "checkpoint from a run's checkpoints-replaced/): a new or empty folder, or a run dir; one "
                       "holding other things (other runs, a project) is refused")
    # a sweep trial's searched keys (sweep.trials.train_command): a key they turn off is named in no warning
    train.add_argument("--sweep-searched", default="", help=argparse.SUPPRESS)
    train.add_argument("--notes", metavar="TEXT", help="the run's hypothesis, saved as notes.md in the run dir "
                       "and shown by `jaxlab runs`")
    train.add_argument("--resume", type=user_path, metavar="WHAT", help="continue a run: latest (the newest run of ENV "
                       "under runs/), a run dir, its checkpoints/ directory or one checkpoint directory (ENV may "
                       "then be left out: the run's); flags change allowed values")
    train.add_argument("--resume-any-env", action="store_true", help="resume even when the env's source (its "
                       "header or library) changed since the checkpoint")
    train.add_argument("--profile", type=user_path, metavar="DIR",
                       help="write a JAX profiler trace of some updates to DIR "
                       "(TensorBoard's profile plugin or Perfetto open it; process 0's in a run over several processes)")
    train.add_argument("--profile-updates", metavar="A:B", help="the updates the trace covers, "
                       "counted from 1, both included (default 2:3: update 1 compiles)")
    evaluate = add("eval", "play a checkpoint's policy and report returns",
                   "Play the policy saved in a checkpoint (its config is read from the checkpoint) on new "
                   "envs and print mean ± std of return and length and the env's statistics.", eval_command)
    evaluate.set_defaults(takes_flags="env")  # --env.KEY VALUE flags only (eval_env_flags)
    evaluate.epilog = EVAL_ENV_FLAGS
    evaluate.add_argument("env", metavar="ENV", nargs="?", type=user_path,
                          help="the checkpoint's env: its name, or the path of its "
                          "header (path/to/NAME.h: played from that source, e.g. after the header moved); left out: "
                          "the checkpoint's own (but for --checkpoint latest)")
    evaluate.add_argument("--checkpoint", required=True, type=user_path, metavar="PATH",
                          help="a checkpoint directory, a run dir or its checkpoints/ (the newest good one), or latest")
    evaluate.add_argument("--policy-module", type=user_path, metavar="FILE.py:CLASS",
                          help="the run's policy.module file at its "
                          "new path, when it moved since the run (the same class)")
    evaluate.add_argument("--episodes", type=whole_number, default=10, help="agent-episodes to play (default 10)")
    evaluate.add_argument("--max-steps", type=whole_number, default=EVAL_MAX_STEPS, metavar="N",
                          help=f"steps each env plays at most (default {EVAL_MAX_STEPS:,}): an env whose episodes "
                          "never end stops there, with the episodes that ended by then")
    evaluate.add_argument("--deterministic", action="store_true", help="take the most likely action (default: sample)")
    evaluate.add_argument("--num-envs", type=whole_number, help="envs played at once (default min(episodes, 64))")
    evaluate.add_argument("--seed", type=whole_number, default=12345,
                          help="seed of the new envs and of sampling (default 12345)")
    evaluate.add_argument("--render", action="store_true", help="print env 0's first episode as text (envs "
                          "with a render hook: `jaxlab envs` lists their options)")
    evaluate.add_argument("--save-frames", type=user_path, metavar="FILE",
                          help="write env 0's first episode as text to FILE")
    evaluate.add_argument("--gif", type=user_path, metavar="FILE",
                          help="draw env 0's first episode (of its first agent) as an "
                          f"animated GIF (envs with a pixels hook; needs Pillow: {install_extra('gif')})")
    evaluate.add_argument("--gif-size", metavar="WxH", help="picture size in pixels (default 480x240)")
    evaluate.add_argument("--gif-frames", type=whole_number, metavar="N", help="at most N pictures (default 500)")
    evaluate.add_argument("--gif-every", type=whole_number, metavar="K", help="draw every K-th step (default 1)")
    evaluate.add_argument("--gif-fps", type=number, metavar="FPS", help="pictures per second of the GIF (default 25)")

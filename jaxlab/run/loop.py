"""The one training loop (``train_loop``: evaluate, train, log, then hooks) and the runs built on it:
``train`` (updates and records, nothing saved) and ``train_run`` (a whole run: checkpoints, resume,
run records, a lock on the run dir and a graceful stop on SIGINT/SIGTERM).

    records = train(config)                                  # train, return the metrics records
    result = train_run(config, run_dir)                      # a new run
    result = train_run(config, run_dir, resume=CHECKPOINTS)  # continue one (a run's checkpoints/ or one
                                                              # checkpoint directory)
A stop signal lets the current update finish, then saves a checkpoint and returns (result.stopped
names the signal); a second SIGINT interrupts at once. In a run over several processes every process
calls ``train_run``; see its docstring. A checkpoint that cannot be written stops the
run with result.error set; the last good checkpoint stays on disk and the trainer's state as it was
is returned in result.unsaved, to be written elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from jaxlab import checkpoint
from jaxlab import config as config_lib
from jaxlab.observe.alerts import nonfinite_losses
from jaxlab.observe.records import earlier_run, read_metrics
from jaxlab.run.distributed import any_process, is_primary, sync_processes
from jaxlab.run.resume import keep_metrics_until, newest_usable, resume_run_dir, set_aside_after
from jaxlab.run.lock import RunDirLock
from jaxlab.run.signals import StopSignals


@dataclass
class RunResult:
    records: list[dict] = field(default_factory=list)
    stopped: str | None = None        # "SIGINT" / "SIGTERM" when a signal stopped the run, "SIGPIPE" a
    # broken stdout/stderr pipe (with StopSignals(pipes=True))
    checkpoint: Path | None = None    # the newest complete checkpoint when the run ended
    error: str | None = None          # why the run stopped early (a failed save, a NaN loss)
    resumed_from: Path | None = None
    unsaved: tuple | None = None      # after a failed save: (state, meta) of the trainer as it was, which
    # jaxlab.checkpoint.write(other_path, *result.unsaved) can put somewhere that has room


#: A hook sees the trainer and the record of every update, in order; returning True stops the loop
#: after that update (the hooks after it are not called for that update).
Hook = Callable[["Trainer", dict], bool]  # noqa: F821 - jaxlab.train.trainer.Trainer, imported lazily


def train_loop(trainer, hooks: Sequence[Hook] = (), updates: int | None = None) -> list[dict]:
    """Runs updates of ``trainer`` (collect a batch, one PPO update, the metrics record) until its last
    update, or ``updates`` more when given, or until a hook returns True; returns the records."""
    end = trainer.sizes.num_updates if updates is None else min(trainer.update_index + updates,
                                                                trainer.sizes.num_updates)
    records = []
    while trainer.update_index < end:
        trainer.evaluate()
        trainer.train()
        record = trainer.mean_and_log()
        records.append(record)
        if any(hook(trainer, record) for hook in hooks):
            break
    return records


def log_to(on_log: Callable[[dict], None]) -> Hook:
    """A hook that hands every record to ``on_log`` and never stops the loop."""
    def hook(trainer, record) -> bool:
        on_log(record)
        return False

    return hook


def train(config: config_lib.Config, run_dir: str | Path | None = None,
          on_log: Callable[[dict], None] | None = None) -> list[dict]:
    """Runs every update of ``config`` (metrics.jsonl in ``run_dir`` when given, which must not hold a
    run already: ConfigError, nor be in use by another process: RunDirInUse; its lock held throughout,
    config.toml, run.json and at the end summary.json written as Trainer.record_to does; no checkpoints);
    returns the records. ``on_log(record)`` per update."""
    from jaxlab.train.trainer import Trainer

    with Trainer(config, run_dir=run_dir) as trainer:
        return train_loop(trainer, [log_to(on_log)] if on_log is not None else [])


class NonfiniteStop:
    """A hook that stops the loop, before anything saves that state, when a loss is NaN or infinite."""

    def __init__(self, result: RunResult):
        self.result = result

    def __call__(self, trainer, record) -> bool:
        bad = nonfinite_losses(record)
        if bad:
            became = f"{', '.join(bad)} became {record[bad[0]]} at update {record['update']}"
            env_fault = trainer.nonfinite_env_outputs()
            if env_fault:  # the env's fault: no learning rate would help
                self.result.error = (f"{became}: env '{trainer.env.name}' returned {env_fault} in this update's "
                                     "batch; stopped without saving this state. Fix the env so that its "
                                     "rewards and observations are finite numbers")
            elif policy_fault := trainer.nonfinite_policy_outputs():  # broken before this update's learning
                self.result.error = (f"{became}: the policy gave {policy_fault} while it acted in this update's "
                                     "batch, with the parameters the update started from; stopped without saving "
                                     "this state. At a run's first update that is the network as initialised (a "
                                     "policy.module's step returning NaN: check it); later, lower "
                                     "train.learning_rate")
            else:
                self.result.error = f"{became}; stopped without saving this state (lower train.learning_rate?)"
        return bool(bad)


class SaveCheckpoints:
    """A hook that saves when the checkpoint rules ask, after the last update, and on a stop signal,
    after which it stops the loop (result.stopped names the signal). It tracks the best metric.
    In a run over several processes the processes agree after every update (any_process): a signal
    to any of them, or a wall-time save due in any of them, saves and stops in every one. Before a save
    they also agree on the previous save's asynchronous write, before process 0 marks it complete
    (files.json): an error of it in one process (a disk failing on one host) is a CheckpointError in
    every process, so all of them stop after the same update instead of waiting for the one that
    left, and that checkpoint gets no files.json. (An error raised by the save call itself in one
    process is not agreed: Orbax's save runs collectives of its own, which an agreement there would
    be matched against.)"""

    def __init__(self, saves: checkpoint.RunCheckpoints, stop: StopSignals, best_metric: str, result: RunResult,
                 earlier: list[float] = ()):
        self.saves, self.stop, self.best_metric, self.result = saves, stop, best_metric, result
        self.earlier = list(earlier)  # the best metric's values before a resume (earlier_metric_values)
        # the value the next saves are ranked by until an update logs one: after a resume, the last before it (from
        # none, its first saves ranked below every value, unlike the uninterrupted run's)
        self.best = self.earlier[-1] if self.earlier else None
        self.ranked_updates = 0  # the updates whose record held a finite best metric
        self.ranked_values: set[float] = set()  # their values, at most two kept: enough to tell whether it changed

    def __call__(self, trainer, record) -> bool:
        if record.get(self.best_metric) is not None:
            self.best = record[self.best_metric]
            self._rank(self.best)
        last = trainer.update_index == trainer.sizes.num_updates
        stop, due = any_process(self.stop.received is not None, self.saves.due(trainer.update_index))
        if stop or last or due:
            self._previous_write_in_every_process()
            self.saves.save(trainer.update_index, trainer.checkpoint_state(), trainer.checkpoint_meta(), self.best)
        self.result.stopped = self.stop.received or ("a signal to another process" if stop else None)
        return stop

    def _rank(self, value) -> None:
        if isinstance(value, (int, float)) and math.isfinite(value):
            self.ranked_updates += 1
            if len(self.ranked_values) < 2:
                self.ranked_values.add(float(value))

    def unchanging_best_metric(self) -> str | None:
        """A warning when the best metric had the same value in every update (two or more) that logged it,
        as a zero-sum self-play game's episode_return does (always 0): every checkpoint ties, so the one
        kept as the best is arbitrary; else None. None too for a resumed run whose metric sat at its best
        throughout, a best it rose to before the resume (``earlier``: a run resumed once solved, at its maximum)."""
        if self.ranked_updates < 2 or len(self.ranked_values) != 1:
            return None
        (value,) = self.ranked_values
        if self.earlier and min(self.earlier) < value and value >= max(self.earlier):  # it rose to its best
            return None
        if value == 0:
            why = "a zero-sum self-play game's episode_return is always 0"
        else:  # an env whose episodes all end alike, e.g. every one truncated with the same cost: nothing learned
            why = f"the policy's {self.best_metric} never changed: it may not have learned anything yet"
        return (f"checkpoint.best_metric {self.best_metric} was {value:g} in all {self.ranked_updates} updates "
                f"that logged it, so every checkpoint tied and the one kept as the best is arbitrary ({why}); pick "
                f"a metric that ranks the policy with --checkpoint.best-metric NAME, or \"\" for none")

    def _previous_write_in_every_process(self) -> None:
        """Finishes the previous save in every process, agreeing on each step with the other processes
        (one small all-gather each; nothing in a one-process run; nothing in them runs collectives): its
        asynchronous write, then process 0's files.json for it. A CheckpointError in any process is
        raised in every process, the others' naming the checkpoint and the last good one, and the
        failed checkpoint is not marked complete. Both come before the next save: a process that stopped
        alone would leave the others waiting at the first barrier of Orbax's save (5 minutes, then JAX
        aborts every process)."""
        saves = self.saves
        self._in_every_process(saves.wait_for_write, lambda path, last_good: (
            f"cannot save checkpoint {path}: another process of this run could not write its part (its output "
            f"says why); the last good checkpoint is {last_good or 'none'}"))
        self._in_every_process(saves.finish, lambda path, last_good: (
            f"cannot save checkpoint {path}: process 0 could not write its {checkpoint.MANIFEST} (its output says "
            "why); its arrays are complete, so it resumes, unchecked"))

    def _in_every_process(self, step: Callable[[], object], others_say: Callable[[Path, Path | None], str]) -> None:
        """Runs ``step`` (a part of finishing the previous save), then agrees on its outcome (see
        _previous_write_in_every_process); ``others_say(the checkpoint, the last good one)``: the error of
        the processes where ``step`` did not fail."""
        saves, failure = self.saves, None
        try:
            step()
        except checkpoint.CheckpointError as err:
            failure = err
        (failed,) = any_process(failure is not None)
        if failed:
            saves.abandon_pending()
        if failure is not None:
            raise failure
        if failed:
            failed_checkpoint = saves.directory / str(saves.last_saved_update)
            raise checkpoint.CheckpointError(others_say(failed_checkpoint, saves.last_good))


def earlier_metric_values(resume: Path, update: int, best_metric: str) -> list[float]:
    """The finite values of ``best_metric`` in the records (metrics.jsonl) of the run that ``resume`` (a
    checkpoint, checkpoints/ or run dir) belongs to, up to ``update``, the update it resumed at: the
    metric's history before the resume ([] without records or metric)."""
    if not best_metric:
        return []
    values = (record.get(best_metric) for record in read_metrics(resume_run_dir(Path(resume)))
              if isinstance(record.get("update"), int) and record["update"] <= update)
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def other_things_problem(run_dir: Path, resume: Path | None, env_name: str,
                         named: str = "--run-dir") -> str | None:
    """Why the run cannot go into ``run_dir``: its checkpoints/ is a file or holds what Orbax would delete
    (checkpoints_problem), or it is a folder that holds other things than a run's files (other runs, a
    project: `--run-dir .`), which its metrics.jsonl and checkpoints/ would be mixed with; None for a
    new or empty folder, a run dir (refuse_an_earlier_run refuses an earlier run there) and the run dir of
    the checkpoint ``resume`` continues. ``named``: what the message calls the folder (the CLI's flag, or
    train_run's argument)."""
    import time

    from jaxlab.observe.records import folder_name
    from jaxlab.observe.records import other_entries

    problem = checkpoints_problem(run_dir / "checkpoints", named)
    if problem:
        return problem
    if resume is not None and resume_run_dir(Path(resume)).resolve() == run_dir.resolve():
        return None
    others = other_entries(run_dir)
    if not others:
        return None
    shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    new = run_dir / f"{folder_name(env_name)}-{time.strftime('%Y%m%d-%H%M%S')}"
    return (f"{named} {run_dir}: a folder that holds other things than a run ({shown}), which the run's "
            f"metrics.jsonl and checkpoints/ would be mixed with; give a new (or empty) folder, e.g. {named} {new}")


def checkpoints_problem(checkpoints: Path, named: str = "--run-dir") -> str | None:
    """Why a run cannot save into ``checkpoints`` (RUN_DIR/checkpoints), or None: it is a file, or it holds
    entries named like a step that are no checkpoint (checkpoint.not_checkpoints), which Orbax's saves would
    delete or overwrite without a word. ``named``: what the message calls the run dir."""
    if checkpoints.is_file() or checkpoints.is_symlink() and not checkpoints.is_dir():
        return (f"{checkpoints} is a file, where the run's checkpoints/ folder goes; move it away, or give "
                f"another {named}")
    strays = checkpoint.not_checkpoints(checkpoints)
    if not strays:
        return None
    shown = ", ".join(p.name for p in strays[:3]) + (f" and {len(strays) - 3} more" if len(strays) > 3 else "")
    return (f"{checkpoints} holds {shown}, named like checkpoints but none (a file, a link or a folder of "
            f"other things), which the run's saves would delete or overwrite; move them out of {checkpoints}, or "
            f"give another {named}")


def refuse_an_earlier_run(run_dir: Path) -> None:
    """ConfigError when ``run_dir`` already holds a run's checkpoints or metrics: a new run there would
    mix its records into that run's and its checkpoint pruning would delete that run's checkpoints. Only a
    run with checkpoints is pointed at --resume: one killed before its first save has none to resume."""
    what = earlier_run(run_dir)
    if what is None:
        return
    if what.startswith("checkpoints"):
        raise config_lib.ConfigError(f"run dir {run_dir} already holds a run ({what}); continue it with "
                                     f"--resume {run_dir}, or give a new --run-dir")
    raise config_lib.ConfigError(f"run dir {run_dir} already holds a run ({what}) but no checkpoint to continue it "
                                 "from (it ended before its first save); give a new --run-dir, or move that run "
                                 "away first")


class RemovedIfNotStarted:
    """Context manager for a run dir this run created (``remove`` True): on exit, if the run never
    started (``started()`` was not called: a config refused once the trainer was built, a resume that
    found nothing usable, an interrupt while compiling), the run dir is removed again when it holds
    nothing but what that attempt left (RUN_DIR/.lock, an empty run.log, an empty checkpoints/), so that
    bad input leaves no stray run dir (a default --run-dir is a new runs/ENV-TIMESTAMP every time). A
    non-empty run.log, or anything else in it, is kept. Enter it while holding the run dir's lock (so
    that a run refused because another process holds it never removes that run's .lock and files)."""

    def __init__(self, run_dir: Path, remove: bool):
        self.run_dir, self.remove, self._started = Path(run_dir), remove, False

    def started(self) -> None:
        self._started = True

    def __enter__(self) -> RemovedIfNotStarted:
        return self

    def __exit__(self, *exc) -> None:
        if not self.remove or self._started:
            return
        log = self.run_dir / "run.log"
        try:
            if log.is_file() and log.stat().st_size == 0:
                log.unlink()
            (self.run_dir / ".lock").unlink(missing_ok=True)
            (self.run_dir / "checkpoints").rmdir()  # each rmdir fails when the folder holds anything
            self.run_dir.rmdir()
        except OSError:
            pass  # something else is in it: kept


def check_best_metric(name: str, names: Sequence[str], warn: Callable[[str], None]) -> str:
    """The checkpoint.best_metric to use: ``name`` when it is one of the run's record keys ``names`` (or
    "", none). The default, episode_return, for an env that logs none (the env contract does not
    require it): "" with a warning. Another name that is not a record key: ConfigError, since no record
    would hold it, no checkpoint would be kept as the best and keep-N pruning would delete the one that
    was."""
    if not name or name in names:
        return name
    if name == config_lib.schema.CheckpointConfig.best_metric:
        warn(f"this env logs no {name}, so no checkpoint is kept as the best; pick a metric with "
             f"--checkpoint.best-metric NAME ({', '.join(names)})")
        return ""
    import difflib

    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise config_lib.ConfigError(
        f"checkpoint.best_metric={name!r} is not a metric of this run, so no checkpoint would be kept as the best; "
        f"{hint}metrics (higher is better): {', '.join(names)}; or \"\" for none")


def report_unfinished_saves(resumed_from: Path, checkpoints: Path, warn: Callable[[str], None]) -> None:
    """Names each save cut short in ``resumed_from`` (the checkpoints/ directory of the checkpoint a resume
    took), which the resume passed over: its N.orbax-checkpoint-tmp is removed when that is this run's
    ``checkpoints`` (the run's saves there clear it)."""
    removed = resumed_from.resolve() == checkpoints.resolve()
    for unfinished in checkpoint.unfinished_saves(resumed_from):
        warn(f"passed over {unfinished}: a save cut short (its process ended while writing it)"
             + (", which is removed" if removed else ""))


def first_known(location: Path, known: dict) -> Path | None:
    """The newest checkpoint under ``location`` among ``known`` ({path: meta} that a caller has read, as
    newest_usable found them: the damaged ones newer than it were reported then), else None."""
    return next((path for path in checkpoint.step_dirs(location) if path in known), None)


def train_run(config: config_lib.Config, run_dir: str | Path, resume: Path | None = None,
              on_log: Callable[[dict], None] | None = None, warn: Callable[[str], None] = print,
              trainer_hook: Callable | None = None, notes: str | None = None,
              on_start: Callable | None = None, resume_meta: dict | None = None,
              resume_any_env: bool = False, profile=None, stop: StopSignals | None = None,
              remove_if_not_started: bool = False) -> RunResult:
    """Trains ``config`` to its last update in ``run_dir`` with checkpoints; see the module docstring.
    Without ``resume``, ``run_dir`` must not hold a run already, and no ``run_dir`` may hold other things
    than a run's files (a user's files, other runs; see other_things_problem) (ConfigError). Holds the run dir's lock
    for the whole run (RunDirInUse when another process holds it), sends library log lines (absl,
    Orbax) to RUN_DIR/run.log, writes config.toml and run.json (and notes.md from ``notes``) once the
    trainer is built and any resume has loaded, and summary.json at the end (see
    jaxlab.observe.records). ``on_start(trainer)`` is called once the trainer is built and restored;
    ``trainer_hook(trainer, saves)`` once the checkpoints are set up too (tests inject faults with it).
    ``resume_meta``: {checkpoint path: its meta} for checkpoints whose meta the caller has read already
    (each is read once; the damaged checkpoints newer than the newest of them, which the caller passed
    over and reported, are passed over without a second warning);
    ``resume_any_env`` resumes even when the env's source changed since the checkpoint (a warning);
    ``profile``: a jaxlab.run.profile.ProfileUpdates that traces some updates; ``stop``: the caller's
    StopSignals, already active (a signal it took before this call stops the run after its first
    update), else one of its own for the run; ``remove_if_not_started``: the caller created ``run_dir``
    for this run, so it is removed again if the run does not start (RemovedIfNotStarted).

    In a run over several processes (jaxlab.run.distributed) every process calls it, in step, with the
    same arguments (``warn``, ``on_log``, ``on_start`` and ``profile`` may differ): process 0 alone
    holds the lock and writes the run dir's files (records, config, run.log, files.json); every
    process takes part in each checkpoint's save and in the resume (Orbax multi-host: each saves and
    restores its own envs, carries and keys), and a stop signal to any process stops them all after
    the same update, with a checkpoint. The run dir must be one directory that every process sees."""
    import jax

    from jaxlab.observe import records
    from jaxlab.observe.logfile import library_logs_to
    from jaxlab.train.trainer import Trainer

    run_dir = Path(run_dir)
    result = RunResult()
    c = config.checkpoint
    primary = is_primary()
    lock = RunDirLock(run_dir) if primary else nullcontext()
    logs = library_logs_to(run_dir / "run.log") if primary else nullcontext()
    problem = other_things_problem(run_dir, resume, config.env_name, named="run_dir")
    if problem:  # its metrics.jsonl and checkpoints/ would be mixed with them (as `jaxlab train` refuses)
        raise config_lib.ConfigError(problem)
    if resume is None or resume_run_dir(Path(resume)).resolve() != run_dir.resolve():
        refuse_an_earlier_run(run_dir)  # a resume into another run dir starts that dir's records
    unstarted = RemovedIfNotStarted(run_dir, remove_if_not_started and primary)
    # unstarted inside the lock: a run refused for a run dir in use (RunDirInUse) removes nothing of its owner's
    with lock, unstarted, logs, Trainer(config) as trainer, \
            (nullcontext(stop) if stop is not None else StopSignals()) as stop:
        if primary:
            stop.log_to(run_dir / "run.log")  # its lines about a broken output pipe
        best_metric = check_best_metric(c.best_metric, trainer.record_names, warn)
        if resume is not None:
            known = resume_meta or {}
            result.resumed_from, _ = newest_usable(
                Path(resume), lambda path: trainer.load_checkpoint(path, known.get(path), resume_any_env, warn), warn,
                start=first_known(Path(resume), known))
            sync_processes("resumed")  # every process has read before process 0 tidies the run dir
            if trainer.update_index >= trainer.sizes.num_updates:
                return result  # nothing to train: the run dir is left as it is (no records, nothing set aside)
            if primary:
                keep_metrics_until(run_dir / "metrics.jsonl", trainer.update_index)
                for path in set_aside_after(run_dir / "checkpoints", trainer.update_index):
                    warn(f"moved {path.name} aside to {path} (newer than the checkpoint resumed from)")
            report_unfinished_saves(result.resumed_from.parent, run_dir / "checkpoints", warn)
            warn(f"resumed from {result.resumed_from} at update {trainer.update_index}, "
                 f"step {trainer.global_step:,}")
        if primary:  # only now: a resume that fails leaves the run's records as they were
            # refused without a resume: checked above; the lock and summary.json are this function's
            trainer.record_to(run_dir, resumed=resume is not None, owner=False)
            unstarted.started()
            (run_dir / "summary.json").unlink(missing_ok=True)  # a resumed run's is stale until this one ends
            records.write_run_info(run_dir, config, [f"{d.platform}:{d.device_kind}" for d in jax.devices()], notes)
        if on_start is not None:
            on_start(trainer)
        if profile is not None:
            profile.start(trainer)
        saves = checkpoint.RunCheckpoints(run_dir / "checkpoints", c.interval, c.minutes, c.keep, best_metric)
        try:
            if trainer_hook is not None:
                trainer_hook(trainer, saves)
            hooks = [log_to(result.records.append)] + ([log_to(on_log)] if on_log is not None else [])
            hooks += [profile] if profile is not None else []
            earlier = earlier_metric_values(resume, trainer.update_index, best_metric) if resume and primary else []
            saving = SaveCheckpoints(saves, stop, best_metric, result, earlier)
            hooks += [NonfiniteStop(result), saving]
            train_loop(trainer, hooks)
            if primary and (unchanging := saving.unchanging_best_metric()):
                warn(unchanging)
            result.checkpoint = saves.finish()
        except checkpoint.CheckpointError as err:
            result.error = str(err)
            result.checkpoint = saves.last_good
            result.unsaved = (checkpoint.host_copy(trainer.checkpoint_state()), trainer.checkpoint_meta())
        except BaseException as err:  # recorded in summary.json, then raised to the caller
            result.error = f"{type(err).__name__}: {err}".splitlines()[0]
            raise
        finally:
            if profile is not None:
                profile.close()
            try:
                saves.close()
            except checkpoint.CheckpointError as err:
                result.error = result.error or str(err)
            result.stopped = result.stopped or stop.received  # a signal during the last update or the saves
            if result.error is None and trainer.update_index >= trainer.sizes.num_updates:
                result.stopped = None  # it trained to its end and saved: a signal in its last update stopped nothing
            if primary:
                records.write_summary(run_dir, best_metric or "episode_return", stopped=result.stopped,
                                      error=result.error, checkpoint=result.checkpoint,
                                      resumed_from=result.resumed_from and result.resumed_from.absolute())
    return result

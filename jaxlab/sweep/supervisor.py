"""The sweep loop: asks Optuna for trials, runs each trial's seeds as `jaxlab train` child processes in
K slots, follows their metrics to report to the pruner, stops pruned ones, tells Optuna the results,
and on SIGINT/SIGTERM stops every child with a checkpoint and waits for it.

Who owns a trial: the sweep process that asked for it (or adopted it) holds an exclusive lock on
STUDY_DIR/locks/trial-N.lock for as long as it works on it, and records its host and study dir in the
trial. A trial left RUNNING by a sweep that stopped (its lock is free: the kernel drops the lock of a
process that ends) is adopted by the next sweep on the same host and study: finished seeds are kept,
stopped ones resume from their checkpoint, and none is run twice. ``trials`` counts every trial of
the study (any state, any process), so a resumed sweep runs only what is missing.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from jaxlab.config import Config, ConfigError
from jaxlab.messages import counted
from jaxlab.observe.records import interrupted_at_once
from jaxlab.sweep import study as study_lib
from jaxlab.sweep.space import SweepSpec, apply_params, check_config
from jaxlab.sweep.trials import (MetricsFollower, Slot, child_environment, last_line, start, train_command,
                                 wandb_group_flags)

POLL_SECONDS = 0.25


@dataclass
class SeedRun:
    """One run (one seed) of a trial: a `jaxlab train` run dir and, while it trains, its process."""

    seed: int
    run_dir: Path
    state: str = "pending"          # pending, running, done, pruned, failed, stopped, cancelled
    resume: bool = False            # continue the run dir from its newest checkpoint
    process: object = None          # subprocess.Popen while running
    slot: Slot | None = None
    stop_reason: str | None = None  # why the sweep stopped it: prune, sweep, trial failed
    score: float | None = None
    wall_time: float | None = None  # seconds (the trainer's wall_time of its last update)
    cost: float | None = None  # seconds of its updates without JAX's compiles (study.run_cost)
    error: str | None = None
    follower: MetricsFollower = field(init=False)

    def __post_init__(self):
        self.follower = MetricsFollower(self.run_dir / "metrics.jsonl")

    @property
    def log_path(self) -> Path:
        return self.run_dir / "train-output.log"


@dataclass
class TrialRun:
    """A trial this sweep process owns: its Optuna trial, values, runs and what it reported."""

    trial: object                   # optuna.trial.Trial
    number: int
    params: dict
    total_steps: int                # agent-steps of each run (updates x batch)
    runs: list[SeedRun]
    lock_fd: int
    reported: set = field(default_factory=set)
    pruned_at: int | None = None
    failed: str | None = None

    def active(self) -> bool:
        return any(r.state in ("pending", "running") for r in self.runs)


def describe_params(params: dict) -> str:
    return " ".join(f"{k}={_value(v)}" for k, v in params.items())


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def param_flags(params: dict) -> list[str]:
    """The trial's values as `jaxlab train` flags (floats written exactly, with repr)."""
    flags = []
    for name, value in params.items():
        text = ("true" if value else "false") if isinstance(value, bool) else repr(value) if isinstance(value, float) \
            else str(value)
        flags += [f"--{name}", text]
    return flags


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


class StopRequests:
    """SIGINT and SIGTERM, while active, are queued in ``pending`` (the loop forwards each to the trials)
    instead of stopping the sweep at once; ``first`` names the first one."""

    def __init__(self):
        self.pending: list[int] = []
        self.first: str | None = None
        self._previous: dict = {}

    def __enter__(self) -> StopRequests:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.pending.append(signum)
        self.first = self.first or signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class Sweep:
    """Runs study ``study`` until it holds ``target`` trials (or a stop signal), ``len(slots)`` trials'
    runs at a time. ``base`` is the study's base config and ``base_path`` its TOML file (what every
    trial's `jaxlab train --config` reads); ``env`` the environment the children start from;
    ``storage`` the study's storage as study.storage_for made it (for the ask lock)."""

    def __init__(self, study, storage, spec: SweepSpec, base: Config, base_path: Path, study_dir: Path,
                 slots: list[Slot], env: dict, target: int, say: Callable[[str], None] = print):
        self.study, self.storage, self.spec, self.base, self.base_path = study, storage, spec, base, base_path
        self.study_dir, self.slots, self.env, self.target, self.say = study_dir.resolve(), slots, env, target, say
        self.free = list(slots)
        self.trials: list[TrialRun] = []
        self.host = socket.gethostname()
        self.locks = self.study_dir / "locks"
        self.locks.mkdir(parents=True, exist_ok=True)
        self.exhausted = False
        self.launched = 0  # runs this process started (or resumed)
        self.told: dict[int, str] = {}  # trial number -> how this process ended it: failed, pruned, complete
        self.cut_short: list[str] = []  # the runs a second Ctrl-C stopped at once (no checkpoint saved at the stop)
        self.unstarted: list[str] = []  # the runs a stop caught before their first update (nothing saved)

    # ---- ownership ----

    def _lock_trial(self, number: int) -> int | None:
        fd = os.open(self.locks / f"trial-{number}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on {self.host}\n".encode())
        return fd

    def _new_trial_run(self, trial, number: int, params: dict, fd: int) -> TrialRun | None:
        config = apply_params(self.base, params)
        try:
            sizes = check_config(config)
        except ConfigError as err:
            os.close(fd)
            trial.set_user_attr("error", str(err))
            self.study.tell(trial, state=_state("FAIL"))
            self.told[number] = "failed"
            self.say(f"trial {number} failed before it ran: {err} ({describe_params(params)})")
            return None
        seeds = [self.base.train.seed + i for i in range(self.spec.seeds)]
        runs = [SeedRun(s, self.study_dir / f"trial-{number}-seed-{s}") for s in seeds]
        return TrialRun(trial, number, params, sizes.num_updates * sizes.batch_size, runs, fd)

    def adopt(self) -> None:
        """Takes over this host's RUNNING trials of the study whose sweep process has ended."""
        import optuna

        for frozen in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            attrs = frozen.user_attrs
            if attrs.get("host") != self.host or attrs.get("study_dir") != str(self.study_dir):
                continue
            fd = self._lock_trial(frozen.number)
            if fd is None:  # a live sweep process works on it
                continue
            trial = optuna.trial.Trial(self.study, frozen._trial_id)
            run = self._new_trial_run(trial, frozen.number, dict(frozen.params), fd)
            if run is None:
                continue
            run.reported = set(frozen.intermediate_values)
            for seed_run in run.runs:
                self._classify(seed_run, run.total_steps)
            kept = {r.seed: r.state + (" (resumes from its checkpoint)" if r.resume else "") for r in run.runs}
            self.say(f"trial {run.number} adopted (its sweep stopped): "
                     + ", ".join(f"seed {s} {state}" for s, state in kept.items()))
            self._fail_if_a_seed_failed(run)
            if run.active():
                self.trials.append(run)
            else:  # finished here, once: step() finishes only the trials in self.trials
                self._finish(run)

    def _fail_if_a_seed_failed(self, run: TrialRun) -> None:
        """A trial one of whose runs failed fails, its pending runs cancelled (as reap does for a live one)."""
        failed = next((r for r in run.runs if r.state == "failed"), None)
        if failed is None:
            return
        run.failed = f"seed {failed.seed}: {failed.error}"
        for other in run.runs:
            if other.state == "pending":
                other.state = "cancelled"

    def _classify(self, seed_run: SeedRun, total_steps: int) -> None:
        """The state of a run dir a stopped sweep left: finished, pruned, failed, or to continue (from
        its newest checkpoint, or afresh when it has none)."""
        from jaxlab import checkpoint

        if not seed_run.run_dir.exists():
            return
        summary = read_json(seed_run.run_dir / "summary.json")
        seed_run.follower.poll()
        if summary.get("status") == "pruned":
            seed_run.state = "pruned"
        elif summary and summary.get("error") and not interrupted_at_once(summary):
            seed_run.state, seed_run.error = "failed", summary["error"]
        elif summary and not summary.get("stopped"):
            self._score(seed_run, total_steps)
        elif checkpoint.step_dirs(seed_run.run_dir / "checkpoints"):
            seed_run.resume = True
        else:  # killed before its first checkpoint: nothing to continue from
            aside = self.study_dir / "discarded" / f"{seed_run.run_dir.name}-{int(time.time())}"
            aside.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(seed_run.run_dir), aside)
            seed_run.follower = MetricsFollower(seed_run.run_dir / "metrics.jsonl")
            self.say(f"{seed_run.run_dir.name} had no checkpoint; moved aside to {aside}, it starts again")

    def ask(self) -> tuple[bool, TrialRun | None]:
        """(True, a new trial (an enqueued one first)), or (True, None) when its values fail the config's
        checks (it is told failed at once), or (False, None) when the study holds ``target`` trials
        already. The count and the ask happen under study.ask_lock, shared by every sweep of the study."""
        import optuna

        with study_lib.ask_lock(self.storage, self.study.study_name, self.locks):
            trials = self.study.get_trials(deepcopy=False)
            if sum(t.state != optuna.trial.TrialState.WAITING for t in trials) >= self.target:
                return False, None
            trial = self.study.ask()
            fd = self._lock_trial(trial.number)  # before the marks that let a sweep of this host adopt it
            trial.set_user_attr("host", self.host)
            trial.set_user_attr("study_dir", str(self.study_dir))
        with warnings.catch_warnings(record=True) as caught:  # Optuna's, e.g. an enqueued value outside the space
            warnings.simplefilter("always")
            params = study_lib.suggest(trial, self.spec)
        for note in dict.fromkeys(str(w.message).splitlines()[0] for w in caught):
            self.say(f"warning: trial {trial.number}: {note} (Optuna runs it with that value)")
        run = self._new_trial_run(trial, trial.number, params, fd)
        if run is not None:
            trial.set_user_attr("seeds", [r.seed for r in run.runs])
            trial.set_user_attr("run_dirs", [str(r.run_dir) for r in run.runs])
        return True, run

    # ---- processes ----

    def launch(self, run: TrialRun, seed_run: SeedRun, slot: Slot) -> None:
        short = " ".join(f"{k.split('.', 1)[1]}={_value(v)}" for k, v in run.params.items())
        notes = f"{short} (sweep {self.study.study_name} trial {run.number} seed {seed_run.seed})"
        flags = param_flags(run.params) + wandb_group_flags(self.base, self.study.study_name)
        args = train_command(self.base.env_name, seed_run.run_dir, self.base_path, flags, seed_run.seed, slot, notes,
                             seed_run.resume, frozenset(param.name for param in self.spec.params))
        seed_run.run_dir.mkdir(parents=True, exist_ok=True)
        seed_run.process = start(args, slot, child_environment(slot, self.env), seed_run.log_path)
        seed_run.state, seed_run.slot = "running", slot
        self.launched += 1
        cores = len(slot.cores) if slot.cores else len(os.sched_getaffinity(0))
        first = run.trial.user_attrs.get("cpu_cores")
        if first is None:
            run.trial.set_user_attr("cpu_cores", cores)
        how = "resumes" if seed_run.resume else "starts"
        self.say(f"trial {run.number} seed {seed_run.seed} {how} on {slot.describe()}: {describe_params(run.params)}")
        if first is not None and first != cores and slot.memory_fraction is None:
            self.say(f"warning: trial {run.number} started on {counted(first, 'CPU core')} and continues on "
                     f"{cores}: XLA's "
                     "results depend on the cores it sees, so `--show`'s command will not reproduce this trial "
                     "exactly; continue a study with the --parallel it started with")

    def _stop(self, seed_run: SeedRun, reason: str, sig: int = signal.SIGTERM) -> None:
        if seed_run.state == "running" and seed_run.process.poll() is None:
            seed_run.stop_reason = seed_run.stop_reason if seed_run.stop_reason == "prune" else reason
            try:
                seed_run.process.send_signal(sig)
            except ProcessLookupError:
                pass

    def _score(self, seed_run: SeedRun, total_steps: int) -> None:
        """Scores a finished run (window mean of the metric over the last average_last of its steps)."""
        records = seed_run.follower.ordered()
        seed_run.score = study_lib.run_score(records, self.spec, total_steps)
        seed_run.wall_time = records[-1]["wall_time"] if records else None
        seed_run.cost = study_lib.run_cost(records)
        if seed_run.score is None:
            seed_run.state = "failed"
            seed_run.error = (f"no {self.spec.metric} in the last {self.spec.average_last:.0%} of the run (no "
                              "episode ended there); raise average_last or train.total_timesteps")
        else:
            seed_run.state = "done"

    def reap(self, run: TrialRun, seed_run: SeedRun) -> None:
        """Handles a child that exited: done, pruned, stopped by the sweep, or failed."""
        from jaxlab import checkpoint

        code = seed_run.process.returncode
        seed_run.follower.poll()
        summary = read_json(seed_run.run_dir / "summary.json")
        self.free.append(seed_run.slot)
        self.free.sort(key=lambda s: s.index)
        seed_run.process = None
        if seed_run.stop_reason == "prune":
            if summary:
                summary.update(status="pruned", pruned_at_report=run.pruned_at, reports=self.spec.reports)
                (seed_run.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            seed_run.state = "pruned"
        elif seed_run.stop_reason == "trial failed":
            seed_run.state = "cancelled"
        elif summary and not summary.get("stopped") and not summary.get("error"):
            self._score(seed_run, run.total_steps)  # it trained to the end (a stop that came after is moot)
        elif seed_run.stop_reason == "sweep" or (summary.get("stopped") and code in (0, 130)):
            seed_run.state = "stopped"
            seed_run.resume = bool(summary)  # it saved a checkpoint; without a summary it was still starting
            if interrupted_at_once(summary):  # it saved none at its stop: its newest, or it starts again
                self.cut_short.append(seed_run.run_dir.name)
                seed_run.resume = False
                self._classify(seed_run, run.total_steps)
            elif not checkpoint.step_dirs(seed_run.run_dir / "checkpoints"):  # stopped before its first update
                self.unstarted.append(seed_run.run_dir.name)
            if seed_run.stop_reason != "sweep":  # stopped from outside the sweep: continue it
                seed_run.state = "pending"
        else:
            seed_run.state = "failed"
            seed_run.error = last_line(seed_run.log_path) or f"`jaxlab train` exited with status {code}"
        if seed_run.state == "failed":
            run.failed = f"seed {seed_run.seed}: {seed_run.error}"
            for other in run.runs:
                self._stop(other, "trial failed")
                if other.state == "pending":
                    other.state = "cancelled"

    # ---- reports and pruning ----

    def report(self, run: TrialRun) -> None:
        """Reports the trial's metric at each report point all its runs have passed (the mean over
        seeds of each run's window mean there), then asks the pruner; prunes when it says so."""
        if self.spec.multi_objective or run.pruned_at is not None or run.failed:
            return
        width = self.spec.average_last * run.total_steps
        step = max(run.reported, default=0) + 1
        records = {id(r): r.follower.ordered() for r in run.runs if r.state != "cancelled"}
        # every run trained to its end already (a short run outpaces the sweep's polls): its score is known,
        # and a prune now would stop nothing, only throw the score away
        trained = all(rs and study_lib.report_step(rs[-1], run.total_steps, self.spec.reports) >= self.spec.reports
                      for rs in records.values())
        while step <= self.spec.reports:
            values = []
            for seed_run in run.runs:
                if seed_run.state == "cancelled":
                    continue
                record = next((r for r in records[id(seed_run)]
                               if study_lib.report_step(r, run.total_steps, self.spec.reports) >= step), None)
                if record is None:
                    return
                value = study_lib.window_mean(records[id(seed_run)], self.spec.metric, record["global_step"], width)
                if value is not None:
                    values.append(value)
            if values:
                run.trial.report(sum(values) / len(values), step)
            run.reported.add(step)
            if values and step < self.spec.reports and not trained and run.trial.should_prune():
                run.pruned_at = step
                self.say(f"trial {run.number} pruned at report {step}/{self.spec.reports}: {self.spec.metric} "
                         f"{sum(values) / len(values):.4g}")
                for seed_run in run.runs:
                    self._stop(seed_run, "prune")
                    if seed_run.state == "pending":
                        seed_run.state = "cancelled"
                return
            step += 1

    def _finish(self, run: TrialRun) -> None:
        """Tells Optuna how a trial ended (unless the sweep stopped it: then it stays RUNNING, to be
        adopted by the next sweep) and releases it."""
        runs = run.runs
        dirs = ", ".join(os.path.relpath(r.run_dir) for r in runs)
        if run.failed:
            run.trial.set_user_attr("error", run.failed)
            self.study.tell(run.trial, state=_state("FAIL"))
            self.told[run.number] = "failed"
            self.say(f"trial {run.number} failed: {run.failed}")
        elif run.pruned_at is not None or any(r.state == "pruned" for r in runs):
            self.study.tell(run.trial, state=_state("PRUNED"))
            self.told[run.number] = "pruned"
        elif all(r.state == "done" for r in runs):
            score = sum(r.score for r in runs) / len(runs)
            cost = sum(r.cost for r in runs) / len(runs)
            run.trial.set_user_attr("scores", [r.score for r in runs])
            run.trial.set_user_attr("wall_times", [r.wall_time for r in runs])
            run.trial.set_user_attr("costs", [r.cost for r in runs])
            self.study.tell(run.trial, [score, cost] if self.spec.multi_objective else score)
            self.told[run.number] = "complete"
            seeds = f" (seeds {', '.join(f'{r.score:.4g}' for r in runs)})" if len(runs) > 1 else ""
            wall = sum(r.wall_time for r in runs) / len(runs)
            costs = f" (cost {cost:.1f} s without compiles)" if self.spec.multi_objective else ""
            self.say(f"trial {run.number} done: {self.spec.metric} {score:.4g}{seeds}, {wall:.1f} s{costs}; {dirs}")
        else:
            self.say(f"trial {run.number} stopped; it continues with the next `jaxlab sweep ... --study "
                     f"{self.study.study_name}` ({dirs})")
        os.close(run.lock_fd)
        run.lock_fd = -1

    # ---- the loop ----

    def running(self) -> list[tuple[TrialRun, SeedRun]]:
        return [(t, r) for t in self.trials for r in t.runs if r.state == "running"]

    def step(self, stopping: bool) -> bool:
        """One pass: follow, report, reap, finish, launch. False when there is nothing left to do."""
        for run, seed_run in self.running():
            seed_run.follower.poll()
            if seed_run.process.poll() is not None:
                self.reap(run, seed_run)
        for run in list(self.trials):
            self.report(run)
            if not run.active():
                self._finish(run)
                self.trials.remove(run)
        while not stopping and self.free:
            pending = next(((t, r) for t in self.trials for r in t.runs if r.state == "pending"), None)
            if pending is None:
                if self.exhausted:
                    break
                more, new = self.ask()
                if not more:
                    self.exhausted = True
                    break
                if new is not None:
                    self.trials.append(new)
                continue
            self.launch(*pending, self.free.pop(0))
        return bool(self.running()) or (not stopping and any(t.active() for t in self.trials))

    def run(self) -> str | None:
        """Runs until the study holds ``target`` trials and every trial of this process ended, or a
        stop signal; returns the name of the signal that stopped it (None when it completed). Every
        child has exited when it returns."""
        with StopRequests() as stops:
            try:
                self.adopt()
                stopping = False
                while True:
                    while stops.pending:
                        sig = stops.pending.pop(0)
                        if not stopping:
                            running = counted(len(self.running()), "running trial")
                            self.say(f"{signal.Signals(sig).name}: stopping {running}; "
                                     "each finishes its update and saves a checkpoint")
                        stopping = True
                        for _, seed_run in self.running():
                            self._stop(seed_run, "sweep", sig)
                    if not self.step(stopping):
                        break
                    time.sleep(POLL_SECONDS)
                for run in list(self.trials):  # trials whose runs the stop left pending or stopped
                    self._finish(run)
                self.trials.clear()
                return stops.first
            finally:  # an error in the sweep itself: its trials stop with a checkpoint before it goes
                for _, seed_run in self.running():
                    self._stop(seed_run, "sweep")
                for _, seed_run in self.running():
                    seed_run.process.wait()


def _state(name: str):
    import optuna

    return getattr(optuna.trial.TrialState, name)

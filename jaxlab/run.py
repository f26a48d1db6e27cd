"""A whole training run: the update loop with checkpoints, resume, and a graceful stop on SIGINT/SIGTERM.

    result = train_run(config, run_dir)                      # a new run
    result = train_run(config, run_dir, resume=CHECKPOINTS)  # continue one (a run's checkpoints/ or one
                                                              # checkpoint directory)
A stop signal lets the current update finish, then saves a checkpoint and returns (result.stopped
names the signal); a second SIGINT interrupts at once. A checkpoint that cannot be written stops the
run with result.error set; the last good checkpoint stays on disk and the trainer's state as it was
is returned in result.unsaved, to be written elsewhere.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import threading
import time
from collections.abc import Callable
from typing import TypeVar
from dataclasses import dataclass, field
from pathlib import Path

from jaxlab import checkpoint
from jaxlab.alerts import nonfinite_losses
from jaxlab import config as config_lib

T = TypeVar("T")


@dataclass
class RunResult:
    records: list[dict] = field(default_factory=list)
    stopped: str | None = None        # "SIGINT" / "SIGTERM" when a signal stopped the run
    checkpoint: Path | None = None    # the newest complete checkpoint when the run ended
    error: str | None = None          # why the run stopped early (a failed save, a NaN loss)
    resumed_from: Path | None = None
    unsaved: tuple | None = None      # after a failed save: (state, meta) of the trainer as it was, which
    # jaxlab.checkpoint.write(other_path, *result.unsaved) can put somewhere that has room


class StopSignals:
    """While active, SIGINT and SIGTERM set ``received`` instead of killing the process; a second
    SIGINT raises KeyboardInterrupt. Does nothing outside the main thread."""

    def __init__(self):
        self.received: str | None = None
        self._previous: dict = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.received == "SIGINT" and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def resume_config(checkpoint_path: Path, config_file=None, flags=None) -> tuple[config_lib.Config, list[str]]:
    """The config to resume with: the checkpoint's saved config, then ``config_file`` and ``flags`` on
    top; returns it with the list of allowed changes ("key: old -> new"). ConfigError for a change the
    checkpoint cannot take."""
    from jaxlab.trainer import check_compatible

    saved = config_lib.config_from_toml(checkpoint.read_meta(checkpoint_path)["config"])
    config, _ = config_lib.load_config(saved.env_name, config_file=config_file, flags=flags, preset=None,
                                       extra_layers=[(f"checkpoint {checkpoint_path}", config_lib.as_layer(saved))])
    config = dataclasses.replace(config, preset=saved.preset)
    return config, check_compatible(saved, config)


def find_checkpoint(target: str, env_name: str, runs_root: Path = Path("runs")) -> Path:
    """The checkpoint a ``--resume`` value names: ``latest`` (the newest checkpoint of ENV under
    runs/), a run dir (its newest checkpoint), a run's checkpoints/ directory, or one checkpoint.
    CheckpointError when nothing usable is there."""
    if target == "latest":
        candidates = []
        for run in runs_root.glob("*/checkpoints"):
            steps = checkpoint.step_dirs(run)
            config = run.parent / "config.toml"
            if steps and config.is_file() and f'env_name = "{env_name}"' in config.read_text():
                candidates.append(steps[0])
        if not candidates:
            raise checkpoint.CheckpointError(f"--resume latest: no run of {env_name} with checkpoints under "
                                             f"{runs_root.absolute()}; pass a run dir instead")
        return max(candidates, key=lambda p: p.stat().st_mtime)
    path = Path(target)
    if checkpoint.is_checkpoint(path):
        return path
    for directory in (path / "checkpoints", path):
        steps = checkpoint.step_dirs(directory)
        if steps:
            return directory
    raise checkpoint.CheckpointError(f"--resume {target}: no checkpoint there (expected a run dir with "
                                     "checkpoints/, a checkpoints/ directory or one checkpoint directory)")


def newest_usable(location: Path, use: Callable[[Path], T], warn: Callable[[str], None]) -> tuple[Path, T]:
    """(path, use(path)) for ``location`` when it is one checkpoint; else for the newest checkpoint under
    it for which ``use`` raises no CheckpointError, reporting by path each damaged one passed over."""
    location = Path(location)
    if checkpoint.is_checkpoint(location):
        return location, use(location)
    for path in checkpoint.step_dirs(location):
        try:
            return path, use(path)
        except checkpoint.CheckpointError as err:
            warn(f"{err}; falling back to an older checkpoint")
    raise checkpoint.CheckpointError(f"no usable checkpoint in {location}")


def keep_metrics_until(path: Path, update: int) -> None:
    """Drops records after ``update`` from metrics.jsonl (they were logged after the checkpoint that a
    resume goes back to, and will be logged again)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines()
            if line.strip() and json.loads(line).get("update", 0) <= update]
    path.write_text("".join(line + "\n" for line in kept))


def set_aside_after(directory: Path, update: int) -> list[Path]:
    """Moves checkpoints of updates after ``update`` (damaged ones passed over, or a future the resumed
    run will write again) from ``directory`` into ``directory``-replaced/; returns their new paths."""
    moved = []
    for path in checkpoint.step_dirs(directory):
        if int(path.name) > update:
            target = directory.with_name(directory.name + "-replaced") / f"{path.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            target.parent.mkdir(exist_ok=True)
            path.rename(target)
            moved.append(target)
    return moved


def train_run(config: config_lib.Config, run_dir: str | Path, resume: Path | None = None,
              on_log: Callable[[dict], None] | None = None, warn: Callable[[str], None] = print,
              trainer_hook: Callable | None = None, notes: str | None = None,
              on_start: Callable | None = None) -> RunResult:
    """Trains ``config`` to its last update in ``run_dir`` with checkpoints; see the module docstring.
    Writes run.json (and notes.md from ``notes``) at the start and summary.json at the end (see
    jaxlab.records). ``on_start(trainer)`` is called once the trainer is built and restored;
    ``trainer_hook(trainer, saves)`` once the checkpoints are set up too (tests inject faults with it)."""
    import jax

    from jaxlab import records
    from jaxlab.trainer import Trainer

    run_dir = Path(run_dir)
    result = RunResult()
    c = config.checkpoint
    with Trainer(config, run_dir=run_dir) as trainer, StopSignals() as stop:
        records.write_run_info(run_dir, config, [f"{d.platform}:{d.device_kind}" for d in jax.devices()], notes)
        if resume is not None:
            result.resumed_from, _ = newest_usable(Path(resume), trainer.load_checkpoint, warn)
            keep_metrics_until(run_dir / "metrics.jsonl", trainer.update_index)
            for path in set_aside_after(run_dir / "checkpoints", trainer.update_index):
                warn(f"moved {path.name} aside to {path} (newer than the checkpoint resumed from)")
            warn(f"resumed from {result.resumed_from} at update {trainer.update_index}, "
                 f"step {trainer.global_step:,}")
        if on_start is not None:
            on_start(trainer)
        saves = checkpoint.RunCheckpoints(run_dir / "checkpoints", c.interval, c.minutes, c.keep, c.best_metric)
        try:
            if trainer_hook is not None:
                trainer_hook(trainer, saves)
            best = None
            while trainer.update_index < trainer.sizes.num_updates:
                trainer.evaluate()
                trainer.train()
                record = trainer.mean_and_log()
                result.records.append(record)
                if on_log is not None:
                    on_log(record)
                bad = nonfinite_losses(record)
                if bad:
                    result.error = (f"{', '.join(bad)} became {record[bad[0]]} at update {record['update']}; "
                                    f"stopped without saving this state (lower train.learning_rate?)")
                    break
                if record.get(c.best_metric) is not None:
                    best = record[c.best_metric]
                last = trainer.update_index == trainer.sizes.num_updates
                if stop.received or last or saves.due(trainer.update_index):
                    saves.save(trainer.update_index, trainer.checkpoint_state(), trainer.checkpoint_meta(), best)
                if stop.received:
                    result.stopped = stop.received
                    break
            result.checkpoint = saves.finish()
        except checkpoint.CheckpointError as err:
            result.error = str(err)
            result.checkpoint = saves.last_good
            result.unsaved = (checkpoint.host_copy(trainer.checkpoint_state()), trainer.checkpoint_meta())
        finally:
            try:
                saves.close()
            except checkpoint.CheckpointError as err:
                result.error = result.error or str(err)
            records.write_summary(run_dir, c.best_metric or "episode_return", stopped=result.stopped,
                                  error=result.error, checkpoint=result.checkpoint,
                                  resumed_from=result.resumed_from)
    return result

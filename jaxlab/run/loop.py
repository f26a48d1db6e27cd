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

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from jaxlab import checkpoint
from jaxlab import config as config_lib
from jaxlab.observe.alerts import nonfinite_losses
from jaxlab.run.resume import keep_metrics_until, newest_usable, set_aside_after
from jaxlab.run.signals import StopSignals


@dataclass
class RunResult:
    records: list[dict] = field(default_factory=list)
    stopped: str | None = None        # "SIGINT" / "SIGTERM" when a signal stopped the run
    checkpoint: Path | None = None    # the newest complete checkpoint when the run ended
    error: str | None = None          # why the run stopped early (a failed save, a NaN loss)
    resumed_from: Path | None = None
    unsaved: tuple | None = None      # after a failed save: (state, meta) of the trainer as it was, which
    # jaxlab.checkpoint.write(other_path, *result.unsaved) can put somewhere that has room


def train_run(config: config_lib.Config, run_dir: str | Path, resume: Path | None = None,
              on_log: Callable[[dict], None] | None = None, warn: Callable[[str], None] = print,
              trainer_hook: Callable | None = None, notes: str | None = None,
              on_start: Callable | None = None) -> RunResult:
    """Trains ``config`` to its last update in ``run_dir`` with checkpoints; see the module docstring.
    Writes run.json (and notes.md from ``notes``) at the start and summary.json at the end (see
    jaxlab.observe.records). ``on_start(trainer)`` is called once the trainer is built and restored;
    ``trainer_hook(trainer, saves)`` once the checkpoints are set up too (tests inject faults with it)."""
    import jax

    from jaxlab.observe import records
    from jaxlab.train.trainer import Trainer

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

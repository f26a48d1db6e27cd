"""Checkpoints with Orbax: what one holds, writing and reading one, and a run's set of them.

A checkpoint is a directory with two Orbax items:
    state/  the arrays (a pytree of numpy arrays, see Trainer.checkpoint_state): params, optimizer
            state and its step (the LR-schedule position), the update RNG key, the rollout's key,
            LSTM carry, current observations, reset and truncation flags and final observations, and
            the C envs' state (VecEnv.save_state).
    meta/   JSON: format version, env name, the resolved config as TOML, global step, update index,
            the rollout's step count, wall time and time split so far, and the caller's metadata.
A run keeps its checkpoints in RUN_DIR/checkpoints/<update>/ through an Orbax CheckpointManager:
saves are asynchronous (arrays are copied to host memory first, then written by a background
thread), written to a temporary directory and renamed when complete, so a process killed mid-save
leaves the previous checkpoints as they were. The newest ``keep`` are kept, plus the best by a metric.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import json

import jax
import numpy as np

FORMAT_VERSION = 1
ITEMS = ("state", "meta")


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message names the path and the cause."""


def host_copy(tree: Any) -> Any:
    """Every array leaf as an owned numpy copy (the trainer may donate or overwrite the originals while
    an asynchronous save is still writing)."""
    return jax.tree.map(lambda x: np.array(x, copy=True), tree)


def _save_args(state: Any, meta: dict):
    import orbax.checkpoint as ocp

    return ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))


def _restore_args(target: Any):
    import orbax.checkpoint as ocp

    return ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())


def is_checkpoint(path: Path) -> bool:
    return (path / "state").is_dir() and (path / "meta").is_dir()


def write(path: Path, state: Any, meta: dict) -> Path:
    """Writes one checkpoint at ``path`` synchronously (Trainer.save_checkpoint); returns the path."""
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    if path.exists():
        raise CheckpointError(f"{path} already exists; choose a new path for the checkpoint")
    try:
        with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
            checkpointer.save(path, _save_args(host_copy(state), meta))
    except OSError as err:
        raise CheckpointError(f"cannot write the checkpoint {path}: {err.strerror or err}") from err
    return path


def read_meta(path: Path) -> dict:
    """The JSON half of the checkpoint at ``path``, read as the plain JSON file Orbax's JsonSave wrote
    (meta/metadata), so that no array and no Orbax import is needed."""
    path = Path(path).absolute()
    try:
        meta = json.loads((path / "meta" / "metadata").read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path} is unreadable: {type(err).__name__}: {err}") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path} has format {meta.get('format') if isinstance(meta, dict) else '?'}"
                              f", this jaxlab reads format {FORMAT_VERSION}")
    return meta


def read(path: Path, target: Any) -> tuple[Any, dict]:
    """(state shaped like ``target``, meta) of the checkpoint at ``path``; CheckpointError when it is
    missing, partial or damaged. ``target`` None reads the arrays as saved (for inspection)."""
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    read_meta(path)
    try:
        with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
            restored = checkpointer.restore(path, _restore_args(target))
        state = restored["state"]
        for got, want in zip(jax.tree.leaves(state), jax.tree.leaves(target) if target is not None
                             else jax.tree.leaves(state), strict=True):
            if np.shape(got) != np.shape(want):
                raise ValueError(f"an array has shape {np.shape(got)}, expected {np.shape(want)}")
    except Exception as err:  # noqa: BLE001
        raise CheckpointError(f"checkpoint {path} is unreadable: {type(err).__name__}: {err}") from err
    return state, restored["meta"]


def step_dirs(directory: Path) -> list[Path]:
    """Completed checkpoints in a run's checkpoints/ directory, newest first (Orbax's temporary
    directories of unfinished saves are not among them)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    steps = [p for p in directory.iterdir() if p.name.isdigit() and p.is_dir()]
    return sorted(steps, key=lambda p: int(p.name), reverse=True)


class RunCheckpoints:
    """A run's checkpoints: saves every ``interval`` updates and every ``minutes`` of wall time (both 0:
    neither), on request (end of run, stop signal), keeping the newest ``keep`` and the best by
    ``best_metric`` (higher is better; "" for none)."""

    def __init__(self, directory: Path, interval: int, minutes: float, keep: int, best_metric: str):
        import orbax.checkpoint as ocp
        from orbax.checkpoint import checkpoint_managers

        self.directory = Path(directory).absolute()
        self.interval, self.minutes, self.best_metric = interval, minutes, best_metric
        policies = [checkpoint_managers.LatestN(n=keep)]
        metric_of = None
        if best_metric:
            def metric_of(metrics):
                return metrics[best_metric]

            policies.append(checkpoint_managers.BestN(get_metric_fn=metric_of, n=1,
                                                      keep_checkpoints_without_metrics=False))
        options = ocp.CheckpointManagerOptions(
            best_fn=metric_of, best_mode="max",  # best_fn makes Orbax write each step's metrics
            preservation_policy=checkpoint_managers.AnyPreservationPolicy(policies),
            enable_async_checkpointing=True, cleanup_tmp_directories=True, create=True)
        try:
            self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=ITEMS)
        except OSError as err:
            raise CheckpointError(f"cannot use {self.directory} for checkpoints: {err.strerror or err}") from err
        self.last_save_time = time.monotonic()
        self.last_saved_update: int | None = None
        self.last_good: Path | None = None

    def due(self, update: int) -> bool:
        """Whether the interval or the wall-time rule asks for a save after ``update``."""
        if self.interval and update % self.interval == 0:
            return True
        return bool(self.minutes) and time.monotonic() - self.last_save_time >= self.minutes * 60

    def save(self, update: int, state: Any, meta: dict, metric: float | None = None) -> Path:
        """Starts an asynchronous save of ``update`` (the previous save is finished first); returns the
        directory it will have. CheckpointError (nothing lost in memory) when it cannot be written."""
        if self.last_saved_update == update:
            return self.directory / str(update)
        metrics = {self.best_metric: metric} if self.best_metric and metric is not None else None
        try:
            self.manager.wait_until_finished()  # surfaces an error of the previous asynchronous write
            self.last_good = self._latest_path()
            self.manager.save(update, args=_save_args(host_copy(state), meta), metrics=metrics, force=True)
        except Exception as err:  # noqa: BLE001 - OSError, or Orbax wrapping it
            raise CheckpointError(self._failure(update, err)) from err
        self.last_save_time = time.monotonic()
        self.last_saved_update = update
        return self.directory / str(update)

    def finish(self) -> Path | None:
        """Waits for the pending save; returns the newest complete checkpoint."""
        try:
            self.manager.wait_until_finished()
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(self._failure(self.last_saved_update, err)) from err
        self.last_good = self._latest_path()
        return self.last_good

    def close(self) -> None:
        """Finishes the pending save and stops Orbax's threads. Safe to call twice."""
        try:
            self.finish()
        finally:
            self.manager.close()

    def _latest_path(self) -> Path | None:
        steps = step_dirs(self.directory)
        return steps[0] if steps else None

    def _failure(self, update, err: Exception) -> str:
        cause = err
        while cause.__cause__ is not None and not isinstance(cause, OSError):
            cause = cause.__cause__
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else f"{type(err).__name__}: {err}"
        last = self._latest_path()
        return (f"cannot save checkpoint {self.directory / str(update)} ({reason}); the last good checkpoint "
                f"is {last or 'none'}")

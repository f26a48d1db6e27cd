"""Checkpoints with Orbax: what one holds, writing and reading one, and a run's set of them.

A checkpoint is a directory with two Orbax items:
    state/  the arrays (a pytree of numpy arrays, see Trainer.checkpoint_state): params, optimizer
            state and its step (the LR-schedule position), the update RNG key, the rollout's key,
            LSTM carry, current observations, reset and truncation flags and final observations, and
            the C envs' state (VecEnv.save_state).
    meta/   JSON: format version, the jaxlab version that wrote it (jaxlab_version), env name, the resolved
            config as TOML, global step, update index, the rollout's step count, wall time and time split
            so far, and the caller's metadata.
A run keeps its checkpoints in RUN_DIR/checkpoints/<update>/ through an Orbax CheckpointManager:
saves are asynchronous (arrays are copied to host memory first, then written by a background
thread), written to a temporary directory and renamed when complete, so a process killed mid-save
leaves the previous checkpoints as they were. The newest ``keep`` are kept, plus the best by a metric.

Once a checkpoint is complete, jaxlab adds files.json: the size and CRC-32 of every file in it. A read
checks them first, so damage (a truncated, missing or altered file; Orbax itself detects none of an
altered array's bytes) is reported as a damaged checkpoint before Orbax is asked, and any other error
while reading (a code bug, a tree that does not match) propagates instead of passing for damage.
A checkpoint without files.json (its process was killed between Orbax's rename and that write) is
read as is, and only I/O and format errors count as damage.

A run over several processes writes one checkpoint together (Orbax's multi-host save: every process
calls the save, in step, into the same directory, which every process must see, e.g. a shared file
system): the state's arrays are global jax.Arrays, the replicated ones written once and each process's
own rows (its envs, carries, keys) by that process (see jaxlab.train.process_state); the meta (process
0's) holds the process count, and process 0 writes files.json once every process's files are complete.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxlab.run.distributed import is_primary, sync_processes

FORMAT_VERSION = 1
ITEMS = ("state", "meta")
MANIFEST = "files.json"
#: TensorStore status codes that mean the bytes on disk are missing or broken (ValueError messages).
DAMAGE_CODES = re.compile(r"^(DATA_LOSS|OUT_OF_RANGE|NOT_FOUND|FAILED_PRECONDITION): ")
#: the name of Orbax's temporary directory of a save in progress (or cut short): N.orbax-checkpoint-tmp[-STAMP]
UNFINISHED_SAVE = re.compile(r"\d+\.orbax-checkpoint-tmp.*")
#: the errno in a TensorStore error's message (a ValueError: "... No space left on device [os_error_code='28']")
OS_ERROR_CODE = re.compile(r"\[os_error_code='(\d+)'\]")
#: the names Orbax takes for a step in a checkpoints/ directory, whatever each is (a file too): it prunes them
#: (checkpoint.keep) and overwrites the one of a step it saves
ORBAX_STEP_NAME = re.compile(r"0|[1-9]\d*")
#: what a checkpoint directory holds at its top (Orbax's files and items, jaxlab's files.json)
CHECKPOINT_ENTRIES = frozenset({*ITEMS, "metrics", "_CHECKPOINT_METADATA", "commit_success.txt", MANIFEST})


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read; the message names the path and the cause."""


class RestoreInterrupted(KeyboardInterrupt):
    """A Ctrl-C while Orbax read a checkpoint: reading writes nothing, so nothing was changed. Its message
    is the line for the user."""


def host_copy(tree: Any) -> Any:
    """Every array leaf as an owned numpy copy (the trainer may donate or overwrite the originals while
    an asynchronous save is still writing); the global arrays of a run over several processes, made
    for the save (process_state.ProcessState.to_global), as they are."""
    def copy(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return x
        return np.array(x, copy=True)

    return jax.tree.map(copy, tree)


def _save_args(state: Any, meta: dict):
    import orbax.checkpoint as ocp

    return ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta))


def is_checkpoint(path: Path) -> bool:
    return (path / "state").is_dir() and (path / "meta").is_dir()


def write(path: Path, state: Any, meta: dict) -> Path:
    """Writes one checkpoint at ``path`` synchronously (Trainer.save_checkpoint); returns the path."""
    import orbax.checkpoint as ocp

    path = Path(path).absolute()
    exists = path.exists()
    sync_processes(f"write {path}")  # every process has looked before any creates it
    if exists:
        raise CheckpointError(f"{path} already exists; choose a new path for the checkpoint")
    try:
        with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
            checkpointer.save(path, _save_args(host_copy(state), meta))
        if is_primary():
            write_manifest(path)
    except OSError as err:
        raise CheckpointError(f"cannot write the checkpoint {path}: {err.strerror or err}") from err
    sync_processes(f"wrote {path}")  # complete with its files.json when any process returns
    return path


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            crc = zlib.crc32(chunk, crc)
    return crc


def _files(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(path: Path) -> None:
    """Writes files.json into the complete checkpoint at ``path``: {relative path: [bytes, crc32]}."""
    files = {str(p.relative_to(path)): [p.stat().st_size, _crc32(p)] for p in _files(path)}
    temporary = path / (MANIFEST + ".tmp")
    with open(temporary, "w") as out:
        out.write(json.dumps(files, indent=0, sort_keys=True))
        out.flush()
        os.fsync(out.fileno())  # on disk before the rename: after a power loss an empty files.json would
    temporary.rename(path / MANIFEST)  # mark a good checkpoint as damaged


def verify(path: Path) -> bool:
    """Checks the files of the checkpoint at ``path`` against its files.json: True when they match,
    False when it has none (it cannot be checked); CheckpointError naming the first damaged file."""
    try:
        expected = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path} is damaged: its {MANIFEST} is unreadable ({err})") from err
    for name, (size, crc) in expected.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint {path} is damaged: {name} is missing")
        if file.stat().st_size != size:
            raise CheckpointError(f"checkpoint {path} is damaged: {name} has {file.stat().st_size:,} bytes, "
                                  f"{size:,} were written")
        if _crc32(file) != crc:
            raise CheckpointError(f"checkpoint {path} is damaged: the bytes of {name} changed since it was "
                                  "written (CRC-32 mismatch)")
    return True


def is_damage(err: BaseException) -> bool:
    """Whether an exception from reading an unverified checkpoint means broken or missing bytes (I/O,
    JSON, TensorStore's data-loss codes) rather than a bug or a tree that does not match."""
    return isinstance(err, (OSError, json.JSONDecodeError)) or (
        isinstance(err, ValueError) and DAMAGE_CODES.match(str(err)) is not None)


def read_meta(path: Path) -> dict:
    """The JSON half of the checkpoint at ``path``, read as the plain JSON file Orbax's JsonSave wrote
    (meta/metadata), so that no array and no Orbax import is needed."""
    path = Path(path).absolute()
    try:
        meta = json.loads((path / "meta" / "metadata").read_text())
    except (OSError, ValueError) as err:
        verify(path)  # its files.json names the damaged file (meta/metadata cut short or altered) where it has one
        raise CheckpointError(f"checkpoint {path} is unreadable: {type(err).__name__}: {err}") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path} has format {meta.get('format') if isinstance(meta, dict) else '?'}"
                              f", this jaxlab reads format {FORMAT_VERSION}")
    return meta


def version_note(meta: dict) -> str | None:
    """One line naming the jaxlab version that wrote a checkpoint (its meta's jaxlab_version) and this one's
    when they differ; None when they match or the checkpoint predates the record. Not refused: the format
    (FORMAT_VERSION, checked by read_meta) is what decides whether a checkpoint can be read."""
    import jaxlab

    written = meta.get("jaxlab_version")
    if written is None or written == jaxlab.__version__:
        return None
    return (f"note: the checkpoint was written by jaxlab {written}, this is jaxlab {jaxlab.__version__} "
            f"(both read checkpoint format {FORMAT_VERSION})")


def read(path: Path, target: Any, meta: dict | None = None) -> tuple[Any, dict]:
    """(state shaped like ``target``, meta) of the checkpoint at ``path``; CheckpointError when it is
    missing, partial or damaged (see the module docstring). ``target``: a tree of arrays or
    jax.ShapeDtypeStruct giving the shapes and dtypes; None reads the arrays as saved (for inspection).
    ``meta``: the checkpoint's meta when the caller has read it already (read_meta)."""
    state, meta = _restore(Path(path).absolute(), lambda path: target, meta)
    if target is not None:
        wanted = jax.tree_util.tree_leaves_with_path(target)
        misfits = [(jax.tree_util.keystr(where), np.shape(got), tuple(want.shape))
                   for got, (where, want) in zip(jax.tree.leaves(state), wanted, strict=True)
                   if np.shape(got) != tuple(want.shape)]
        if misfits:  # name a parameter rather than its optimizer moments where one is among them
            where, got, want = min(misfits, key=lambda m: "opt_state" in m[0])
            from jaxlab.config import ConfigError

            raise ConfigError(
                f"checkpoint {path} does not fit this policy: {where} has shape {got} there and {want} here, "
                "so the policy's code changed since it was saved (a policy.module file edited, or another "
                "jaxlab version); load it with the code it was trained with, or start a new run")
    return state, meta


def read_parts(path: Path, parts: dict[str, Any], meta: dict | None = None) -> tuple[dict, dict]:
    """({name: part shaped like parts[name]}, meta): some top-level parts of the checkpoint's state
    (e.g. "train" and "norm", the policy), from a checkpoint of any process count: every array is
    read onto this process's first device, the other parts as saved (then dropped). ``parts``: trees
    of jax.ShapeDtypeStruct; CheckpointError as for read."""
    import orbax.checkpoint as ocp

    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])

    def on_device(x):
        return jax.ShapeDtypeStruct(tuple(x.shape), x.dtype, sharding=device)

    def target(path: Path) -> dict:
        saved = ocp.StandardCheckpointHandler().metadata(path / "state").tree
        return {name: jax.tree.map(on_device, parts.get(name, tree)) for name, tree in saved.items()}

    state, meta = _restore(Path(path).absolute(), target, meta)
    return {name: jax.tree.map(np.asarray, state[name]) for name in parts}, meta


def _restore(path: Path, target, meta: dict | None) -> tuple[Any, dict]:
    """(state, meta) of the checkpoint at ``path`` restored with the target ``target(path)`` (made once
    its files are checked); see read."""
    import orbax.checkpoint as ocp

    meta = read_meta(path) if meta is None else meta
    verified = verify(path)

    def restore():
        with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
            return checkpointer.restore(path, ocp.args.Composite(state=ocp.args.StandardRestore(target(path))))

    try:
        restored = _interruptible(restore, f"interrupted while restoring checkpoint {path}; nothing was changed")
    except Exception as err:  # noqa: BLE001 - sorted into damage (CheckpointError) and the rest (re-raised)
        if (verified and not isinstance(err, OSError)) or not is_damage(err):
            raise
        raise CheckpointError(f"checkpoint {path} is unreadable: {type(err).__name__}: {err}") from err
    return restored["state"], meta


def _interruptible(work, interrupted: str):
    """``work()``'s result, run on a thread of its own while this one waits, so that a Ctrl-C raises
    RestoreInterrupted(``interrupted``) here at once and leaves ``work`` as it was. Run on this thread, Orbax
    read with an asyncio loop that the KeyboardInterrupt closed under TensorStore's reads still in flight:
    their callbacks then printed dozens of "RuntimeError: Event loop is closed" tracebacks and
    never-awaited-coroutine warnings before the process ended. ``work`` must write nothing (a read: the
    process may end while it runs)."""
    outcome = {}

    def run():
        try:
            outcome["result"] = work()
        except BaseException as err:  # noqa: BLE001 - raised again on the waiting thread
            outcome["error"] = err

    worker = threading.Thread(target=run, name="jaxlab-checkpoint-read", daemon=True)
    worker.start()
    try:
        worker.join()
    except KeyboardInterrupt as err:
        raise RestoreInterrupted(interrupted) from err
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _json_readable(path: Path) -> bool:
    """Whether ``path`` is missing or holds JSON."""
    try:
        json.loads(path.read_bytes())
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return True


def step_dirs(directory: Path) -> list[Path]:
    """Completed checkpoints in a run's checkpoints/ directory, newest first (Orbax's temporary
    directories of unfinished saves are not among them)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    steps = [p for p in directory.iterdir() if p.name.isdigit() and p.is_dir()]
    return sorted(steps, key=lambda p: int(p.name), reverse=True)


def not_checkpoints(directory: Path) -> list[Path]:
    """The entries of a checkpoints/ directory that Orbax takes for steps (named like 10) and would delete or
    overwrite, but that are no checkpoint: a file, a link, a folder whose entries are none of a checkpoint's
    (an empty folder, or one part way through Orbax's removal, loses nothing); oldest step first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if ORBAX_STEP_NAME.fullmatch(p.name) and not _checkpoint_like(p)),
                  key=lambda p: int(p.name))


def _checkpoint_like(path: Path) -> bool:
    """Whether ``path`` is a folder (not a link) that is empty or holds any of a checkpoint's entries."""
    if path.is_symlink() or not path.is_dir():
        return False
    names = {p.name for p in path.iterdir()}
    return not names or bool(names & CHECKPOINT_ENTRIES)


def unfinished_saves(directory: Path) -> list[Path]:
    """Orbax's temporary directories in a run's checkpoints/ directory (N.orbax-checkpoint-tmp...): saves cut
    short by the end of their process (kill -9, a second Ctrl-C), which no read takes and the next
    RunCheckpoints there removes; newest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    saves = [p for p in directory.iterdir() if UNFINISHED_SAVE.fullmatch(p.name) and p.is_dir()]
    return sorted(saves, key=lambda p: int(p.name.split(".")[0]), reverse=True)


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
                # a checkpoint saved under another best_metric (a resume that changed it: a KeyError here
                # failed that run's first save) or with a NaN value (which scrambles the sort, so that
                # the best one could be pruned) ranks below every number
                value = metrics.get(best_metric) if isinstance(metrics, dict) else None
                return value if isinstance(value, (int, float)) and not math.isnan(value) else -math.inf

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
        except ValueError as err:  # Orbax reads every checkpoint's metrics: a damaged file stopped it with a traceback
            damaged = [p for p in step_dirs(self.directory) if not _json_readable(p / "metrics" / "metrics")]
            if not damaged:
                raise
            raise CheckpointError(f"cannot use {self.directory} for checkpoints: checkpoint {damaged[0]} is damaged "
                                  f"(its metrics/metrics is not JSON); move it out of {self.directory} and run "
                                  "again") from err
        self.last_save_time = time.monotonic()
        self.last_saved_update: int | None = None
        self.last_good: Path | None = None
        self._pending: Path | None = None  # the save in flight, whose files.json is not written yet

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
            self._finish_pending()  # surfaces an error of the previous asynchronous write
            self.manager.save(update, args=_save_args(host_copy(state), meta), metrics=metrics, force=True)
        except CheckpointError:  # the previous checkpoint's files.json
            raise
        except Exception as err:  # noqa: BLE001 - OSError, or Orbax wrapping it
            raise CheckpointError(self._failure(update, err)) from err
        self.last_save_time = time.monotonic()
        self.last_saved_update = update
        self._pending = self.directory / str(update)
        return self._pending

    def finish(self) -> Path | None:
        """Waits for the pending save; returns the newest complete checkpoint."""
        try:
            self._finish_pending()
        except CheckpointError:
            raise
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(self._failure(self.last_saved_update, err)) from err
        return self.last_good

    def wait_for_write(self) -> None:
        """Waits for the asynchronous save in flight without marking it complete (no files.json yet);
        CheckpointError naming it when its write failed."""
        try:
            self._wait()
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(self._failure(self.last_saved_update, err)) from err

    def abandon_pending(self) -> None:
        """The save in flight failed (in this process or another): it will not be marked complete."""
        self._pending = None

    def _wait(self) -> None:
        """Orbax's wait for the save in flight; when its write failed, the save is abandoned (a later
        finish or close must not mark it complete) and the error raised."""
        try:
            self.manager.wait_until_finished()
        except Exception:
            self.abandon_pending()
            raise

    def _finish_pending(self) -> None:
        """Waits for the asynchronous save in flight, then writes its files.json (process 0: Orbax's
        save returns in every process only once every process's files are written and renamed)."""
        self._wait()
        if self._pending is not None and self._pending.is_dir() and is_primary():
            try:
                write_manifest(self._pending)
            except OSError as err:
                self.last_good = self._pending  # complete but for files.json: it resumes, and the run's end names it
                raise CheckpointError(f"cannot save checkpoint {self._pending} ({err.strerror or err}, writing its "
                                      f"{MANIFEST}); its arrays are complete, so it resumes, unchecked") from err
        self._pending = None
        self.last_good = self._latest_path()

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
        last = self._latest_path()
        return (f"cannot save checkpoint {self.directory / str(update)} ({failure_reason(err)}); the last good "
                f"checkpoint is {last or 'none'}")


def failure_reason(err: Exception) -> str:
    """Why a write failed, in a few words: the strerror of an OSError in ``err``'s causes, or of the errno in
    a TensorStore error's message (whose text, the whole TensorStore spec, ran to a thousand characters),
    else the error itself."""
    cause = err
    while cause.__cause__ is not None and not isinstance(cause, OSError):
        cause = cause.__cause__
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    code = OS_ERROR_CODE.search(str(err))
    return os.strerror(int(code.group(1))) if code else f"{type(err).__name__}: {err}"

"""Resuming a run: which checkpoint a --resume value names, the newest usable one under a directory,
the config to resume with, and tidying the run dir past the checkpoint resumed from."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from jaxlab import checkpoint
from jaxlab import config as config_lib
from jaxlab.config.layers import flags_library
from jaxlab.observe.records import metric_lines, run_env_name
from jaxlab.run import lock

T = TypeVar("T")


def resume_config(checkpoint_path: Path, config_file=None, flags=None, meta: dict | None = None,
                  file_choices: dict | None = None, warn=None) -> tuple[config_lib.Config, list[str]]:
    """The config to resume with: the checkpoint's saved config, then ``config_file`` and ``flags`` on
    top, except [dist], which is this launch's own (its --dist flags: the coordinator and the process's
    index are not the saved run's; the process count is checked apart, see check_processes); returns
    it with the list of allowed changes ("key: old -> new"). ConfigError for a change the checkpoint
    cannot take. ``meta``: the checkpoint's meta when the caller has read it already. ``file_choices``: as
    load_config's (a ``config_file`` key at another value than the checkpoint's). ``warn``: for
    config_lib.checkpoint_config's line (an old checkpoint's obs_norm kept off)."""
    from jaxlab.run.distributed import dist_from_flags
    from jaxlab.train.trainer import check_compatible

    meta = checkpoint.read_meta(checkpoint_path) if meta is None else meta
    saved = config_lib.checkpoint_config(meta, library=flags_library(flags, config_file), warn=warn)
    config, sources = config_lib.load_config(saved.env_name, config_file=config_file, flags=flags, preset=None,
                                             extra_layers=[(f"checkpoint {checkpoint_path}",
                                                            config_lib.as_layer(saved))], file_choices=file_choices)
    config = dataclasses.replace(config, preset=saved.preset, dist=dist_from_flags(flags or []))
    return config, check_compatible(saved, config, sources)


def find_checkpoint(target: str, env_name: str, runs_root: Path = Path("runs"), flag: str = "--resume") -> Path:
    """The checkpoint a ``--resume`` value (or another ``flag``'s: eval's --checkpoint) names: ``latest``
    (the checkpoints/ directory of the run of ENV under runs/ with the newest checkpoint), a run dir
    (its checkpoints/), a run's checkpoints/ directory, or one checkpoint. A directory stands for its
    newest usable checkpoint (newest_usable), so a damaged newest one is passed over. CheckpointError
    naming ``flag`` when nothing usable is there."""
    if target == "latest":
        candidates = []
        for run in runs_root.glob("*/checkpoints"):
            steps = checkpoint.step_dirs(run)
            if steps and run_env_name(run.parent) == env_name:
                candidates.append(steps[0])
        if not candidates:
            raise checkpoint.CheckpointError(f"{flag} latest: no run of {env_name} with checkpoints under "
                                             f"{runs_root.absolute()}; pass a run dir instead")
        return max(candidates, key=lambda p: p.stat().st_mtime).parent  # damaged ones are passed over there
    path = Path(target)
    if checkpoint.is_checkpoint(path):
        return path
    for directory in (path / "checkpoints", path):
        steps = checkpoint.step_dirs(directory)
        if steps:
            return directory
    siblings = checkpoint.step_dirs(path.parent)  # a checkpoint number that is not there: the ones that are
    if siblings:
        why = ("not a whole checkpoint (it lacks state/ or meta/)" if path in siblings  # not one to suggest
               else "no checkpoint there")
        others = [p for p in siblings if p != path]
        hint = f": e.g. {flag} {others[0]}" if others else ""
        raise checkpoint.CheckpointError(f"{flag} {target}: {why}; {path.parent} holds "
                                         f"{', '.join(p.name for p in siblings)}{hint}")
    if (path / "checkpoints").is_dir() or (path.name == "checkpoints" and path.is_dir()):
        saves = ("a run saves one every checkpoint.minutes, every checkpoint.interval updates, at its end and on "
                 "Ctrl-C")
        if lock.held(path if path.name != "checkpoints" else path.parent):
            raise checkpoint.CheckpointError(f"{flag} {target}: no checkpoint there yet ({saves}); wait for one, "
                                             f"or pass another run")
        checkpoints = path if path.name == "checkpoints" else path / "checkpoints"
        cut = checkpoint.unfinished_saves(checkpoints)
        ended = (f"it ended while writing its first save, left unfinished as {cut[0].name}" if cut
                 else "it ended before its first save")
        raise checkpoint.CheckpointError(f"{flag} {target}: no checkpoint there, and no process is running it "
                                         f"({ended}: {saves}); pass another run, or train again")
    raise checkpoint.CheckpointError(f"{flag} {target}: {not_a_checkpoint_words(path, flag)}")


def not_a_checkpoint_words(path: Path, flag: str) -> str:
    """Why ``path`` (neither a checkpoint nor a run dir, nor a checkpoints/ directory) names no checkpoint, with
    the fix where one is plain: a path that does not exist, a folder inside a checkpoint (its state/ or meta/),
    a folder of runs."""
    expected = "expected a run dir with checkpoints/, a checkpoints/ directory or one checkpoint directory"
    if not path.exists():
        return f"no such file or folder ({expected})"
    inside = next((p for p in path.parents if checkpoint.is_checkpoint(p)), None)
    if inside is not None:
        return f"a part of the checkpoint {inside}, not a checkpoint: give the checkpoint, {flag} {inside}"
    runs = sorted(run for run in path.glob("*/checkpoints") if checkpoint.step_dirs(run)) if path.is_dir() else []
    if runs:
        names = ", ".join(run.parent.name for run in runs[:5]) + (", ..." if len(runs) > 5 else "")
        return f"a folder of runs ({names}), not a run: give one of them, e.g. {flag} {runs[0].parent}"
    return f"no checkpoint there ({expected})"


#: how many times newest_usable lists a directory again for checkpoints pruned while it read them (a run that saves
#: every update with checkpoint.keep 1 prunes each one before a read ends: then an error that says so)
PRUNED_RETRIES = 5


def _read_error(err: Exception) -> bool:
    """Whether ``err`` is what a read of a checkpoint's files raises (a CheckpointError, or an OSError such as
    FileNotFoundError), as files removed under the read do; not an error of what the reader does with them."""
    return isinstance(err, (checkpoint.CheckpointError, OSError))


def newest_usable(location: Path, use: Callable[[Path], T], warn: Callable[[str], None],
                  start: Path | None = None) -> tuple[Path, T]:
    """(path, use(path)) for ``location`` when it is one checkpoint; else for the newest checkpoint under
    it for which ``use`` raises no CheckpointError, reporting by path each damaged one passed over.
    ``start``: a checkpoint under ``location`` to begin with, when the caller has passed over (and
    reported) the newer ones already; they are passed over again without a second warning. A checkpoint
    removed while it was read, or whose read failed (_read_error) while newer ones appeared (the run writing
    there pruned it: keep-N, the newer saved since; its removal may be part way) is no damage: the directory is
    listed again (at most PRUNED_RETRIES times) and its newest checkpoint not tried yet is taken."""
    location = Path(location)
    if checkpoint.is_checkpoint(location):
        return location, use(location)
    steps = checkpoint.step_dirs(location)
    tried = set(steps[:steps.index(start)]) if start in steps else set()
    relists = 0
    while (path := next((step for step in steps if step not in tried), None)) is not None:
        tried.add(path)
        try:
            return path, use(path)
        except Exception as err:  # noqa: BLE001 - whatever a read of files that vanished raises
            now = checkpoint.step_dirs(location)
            # removed by a run saving there, or a read failing while newer ones appeared (its removal part way); an
            # error of another kind (the run's config, its policy.module) is the reader's, whoever saves there
            pruned = path not in now or (int(now[0].name) > int(steps[0].name) and _read_error(err))
            if pruned and relists == PRUNED_RETRIES:
                raise checkpoint.CheckpointError(
                    f"no usable checkpoint in {location}: the run saving there removed each of the {relists + 1} "
                    "newest while it was read (its checkpoint.keep prunes the older ones); copy one out of it "
                    "first (cp -r), or read it once that run has ended") from err
            if pruned:
                steps, relists = now, relists + 1
                continue
            if not isinstance(err, checkpoint.CheckpointError):
                raise
            warn(f"{err}; falling back to an older checkpoint")
    raise checkpoint.CheckpointError(f"no usable checkpoint in {location}")


def resume_run_dir(location: Path) -> Path:
    """The run dir a checkpoint (RUN/checkpoints/N) or a checkpoints/ directory belongs to."""
    checkpoints = location.parent if checkpoint.is_checkpoint(location) else location
    return checkpoints.parent if checkpoints.name == "checkpoints" else checkpoints


def set_aside_from(location: Path) -> Path | None:
    """The run dir whose checkpoints-replaced/ (set_aside_after) holds the checkpoint ``location``, else
    None. Its run dir is not the folder around it (a run started in RUN/checkpoints-replaced/ mixed its
    files with the checkpoints set aside there), and RUN's records after the update it was set aside at
    are those of the resume that set it aside, not its own."""
    location = Path(location)
    parent = location.parent
    if not checkpoint.is_checkpoint(location) or not parent.name.endswith("-replaced"):
        return None
    run = parent.parent
    return run if (run / parent.name.removesuffix("-replaced")).is_dir() else None


def keep_metrics_until(path: Path, update: int) -> None:
    """Drops records after ``update`` from metrics.jsonl (they were logged after the checkpoint that a
    resume goes back to, and will be logged again)."""
    if not path.is_file():
        return
    kept = [line for line, record in metric_lines(path) if record.get("update", 0) <= update]
    temporary = path.with_name(path.name + ".tmp")  # a rename: a stop part way leaves the whole old file
    temporary.write_text("".join(line + "\n" for line in kept))
    temporary.replace(path)


def set_aside_after(directory: Path, update: int) -> list[Path]:
    """Moves checkpoints of updates after ``update`` (damaged ones passed over, or a future the resumed
    run will write again) from ``directory`` into ``directory``-replaced/; returns their new paths."""
    moved = []
    for path in checkpoint.step_dirs(directory):
        if int(path.name) > update:
            target = directory.with_name(directory.name + "-replaced") / f"{path.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            target.parent.mkdir(exist_ok=True)
            n = 1
            while target.exists():  # the same update set aside twice within a second (two quick resumes)
                n += 1
                target = target.with_name(f"{target.name.split('~')[0]}~{n}")
            path.rename(target)
            moved.append(target)
    return moved

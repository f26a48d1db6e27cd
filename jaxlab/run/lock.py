"""One process per run dir: an exclusive lock held for the whole run.

The lock is ``flock`` on RUN_DIR/.lock, which also holds the owner's pid and command line. The kernel
drops the lock when its process ends, however it ends, so the lock of a dead process (a stale .lock
file) is simply taken over; a second live process is refused with a message naming the owner.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
from pathlib import Path


class RunDirInUse(RuntimeError):
    """Another live process holds the run dir's lock; the message names it."""


def in_use(run_dir: Path, fd: int, named: str) -> RunDirInUse:
    """The refusal of ``run_dir``, whose .lock (open as ``fd``) another process holds: naming that owner,
    and ``named`` (how the caller gives a run dir: the CLI's --run-dir, the Python API's run_dir) as the
    way out."""
    owner = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
    return RunDirInUse(f"run dir {run_dir} is in use by {owner}; wait for it to end or stop it, or pass another "
                       f"{named}")


class RunDirLock:
    """Context manager holding the exclusive lock of ``run_dir`` (created if missing); ``named``: what the
    refusal calls the run dir (see in_use)."""

    def __init__(self, run_dir: str | Path, named: str = "--run-dir"):
        self.path = Path(run_dir) / ".lock"
        self.named = named
        self._fd: int | None = None

    def __enter__(self) -> RunDirLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            refusal = in_use(self.path.parent, fd, self.named)
            os.close(fd)
            raise refusal from None
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} ({' '.join(sys.argv)[:200]})\n".encode())
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def held(run_dir: str | Path) -> bool:
    """Whether a live process holds ``run_dir``'s lock (the run is going on); False for a run dir without
    .lock or whose .lock a process that ended left behind."""
    try:
        refuse_if_in_use(run_dir)
    except RunDirInUse:
        return True
    return False


def refuse_if_in_use(run_dir: str | Path, named: str = "--run-dir") -> None:
    """RunDirInUse (see in_use) when a live process holds ``run_dir``'s lock; creates and takes nothing (a
    check before the work that RunDirLock then guards)."""
    path = Path(run_dir) / ".lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released by the close below
    except BlockingIOError:
        raise in_use(path.parent, fd, named) from None
    finally:
        os.close(fd)


def owner_pid(run_dir: str | Path) -> int | None:
    """The pid that ``run_dir``'s .lock names ("process PID (command)"), or None: no .lock, or an empty one
    (its process ended and released it)."""
    try:
        text = (Path(run_dir) / ".lock").read_text(errors="replace")
    except OSError:
        return None
    match = re.match(r"process (\d+) ", text)
    return int(match.group(1)) if match else None


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

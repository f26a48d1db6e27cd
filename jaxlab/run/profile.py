"""`jaxlab train ... --profile DIR [--profile-updates A:B]`: a JAX profiler trace of updates A to B.

The trace covers whole updates (the rollout's policy calls, the C steps between them, the host-device
copies and the update's XLA work), from the start of update A to the end of update B, both counted
from 1 as in the metrics; it is written under DIR in the TensorBoard profile plugin's layout
(DIR/plugins/profile/<time>/*.xplane.pb, also readable by Perfetto via `jax.profiler`'s tools).
Update 1 compiles, so the default 2:3 skips it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path


def parse_updates(text: str) -> tuple[int, int]:
    """"A:B" (1 <= A <= B) or "A" (= A:A) -> (A, B); ValueError naming the text and the form."""
    match = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", text)
    first, last = (int(match.group(1)), int(match.group(2) or match.group(1))) if match else (0, 0)
    if not match or not 1 <= first <= last:
        raise ValueError(f"--profile-updates {text!r} is not A:B with 1 <= A <= B (updates counted from 1), "
                         f"e.g. --profile-updates 2:3")
    return first, last


def to_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


class ProfileUpdates:
    """A train_loop hook (with ``start(trainer)`` before the first update and ``close()`` at the end)
    that traces updates ``first`` to ``last`` into ``folder``. A trace that cannot start (the profiler
    fails) is reported with ``warn`` and the run goes on untraced; so is a range the run never reaches."""

    def __init__(self, folder: str | Path, first: int, last: int, warn: Callable[[str], None] = to_stderr):
        self.folder, self.first, self.last, self.warn = Path(folder), first, last, warn
        self.tracing = False
        self.done = False
        self.traced: tuple[int, int] | None = None  # (first, last) update of the trace written, once it is
        self.written: Path | None = None  # the folder JAX wrote it to (DIR/plugins/profile/<time>), once found
        self._started_at = self._last_update = 0  # the update the trace started before; the last one done
        self._folders_before: set[Path] = set()

    def trace_folders(self) -> set[Path]:
        """The folders of the traces under DIR (DIR/plugins/profile/<time>, one per trace JAX wrote)."""
        root = self.folder / "plugins" / "profile"
        return {p for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()

    def missed(self, first_update: int, last_update: int) -> str | None:
        """Why a run of updates ``first_update``..``last_update`` would write no trace, or None."""
        if first_update > last_update:
            return f"--profile {self.folder}: this run has no update left to trace (it is at its last, {last_update})"
        if self.first <= last_update and self.last >= first_update:
            return None
        example = max(first_update, min(2, last_update))
        return (f"--profile-updates {self.first}:{self.last} is outside this run's updates "
                f"{first_update}..{last_update}, so no trace would be written; e.g. --profile-updates "
                f"{example}:{min(example + 1, last_update)}")

    def _start(self, update: int) -> None:
        """Starts the trace before ``update``."""
        import jax

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._folders_before = self.trace_folders()
            jax.profiler.start_trace(str(self.folder))
        except Exception as err:  # noqa: BLE001 - a profiler that cannot start must not end the run
            self.warn(f"--profile {self.folder}: the trace could not start ({type(err).__name__}: {err}); "
                      "training goes on without it")
            self.done = True
            return
        self.tracing, self._started_at = True, update

    def start(self, trainer) -> None:
        """Before the run's first update (a resumed run starts after update trainer.update_index)."""
        missed = self.missed(trainer.update_index + 1, trainer.sizes.num_updates)
        if missed:
            self.warn(missed)
            self.done = True
        elif trainer.update_index + 1 >= self.first:
            self._start(trainer.update_index + 1)

    def __call__(self, trainer, record) -> bool:
        update = record["update"]
        if self.tracing:  # this update was traced
            self._last_update = update
        if self.tracing and update >= self.last:
            self.close(trainer)
        elif not (self.tracing or self.done) and update + 1 == self.first:
            self._start(update + 1)
        return False

    def close(self, trainer=None) -> None:
        """Ends the trace (after the device finished the traced work) if one is running."""
        if not self.tracing:
            return
        import jax

        if trainer is not None:
            jax.block_until_ready(trainer.state)
        jax.profiler.stop_trace()
        self.tracing, self.done = False, True
        self.traced = (self._started_at, max(self._last_update, self._started_at))
        new = sorted(self.trace_folders() - self._folders_before)
        self.written = new[-1] if new else None

    def where(self) -> str | None:
        """The line saying which updates the trace holds and where it went (None before one was written)."""
        if self.traced is None:
            return None
        first, last = self.traced
        updates = f"update {first}" if first == last else f"updates {first}-{last}"
        place = self.written or self.folder / "plugins" / "profile"
        return (f"profile of {updates} in {place} (TensorBoard's profile plugin: tensorboard --logdir "
                f"{self.folder}; Perfetto: its .trace.json.gz)")

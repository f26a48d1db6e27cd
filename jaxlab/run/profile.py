"""`jaxlab train ... --profile DIR [--profile-updates A:B]`: a JAX profiler trace of updates A to B.

The trace covers whole updates (the rollout's policy calls, the C steps between them, the host-device
copies and the update's XLA work), from the start of update A to the end of update B, both counted
from 1 as in the metrics; it is written under DIR in the TensorBoard profile plugin's layout
(DIR/plugins/profile/<time>/*.xplane.pb, also readable by Perfetto via `jax.profiler`'s tools).
Update 1 compiles, so the default 2:3 skips it.
"""

from __future__ import annotations

import re
from pathlib import Path


def parse_updates(text: str) -> tuple[int, int]:
    """"A:B" (1 <= A <= B) or "A" (= A:A) -> (A, B); ValueError naming the text and the form."""
    match = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", text)
    first, last = (int(match.group(1)), int(match.group(2) or match.group(1))) if match else (0, 0)
    if not match or not 1 <= first <= last:
        raise ValueError(f"--profile-updates {text!r} is not A:B with 1 <= A <= B (updates counted from 1), "
                         f"e.g. --profile-updates 2:3")
    return first, last


class ProfileUpdates:
    """A train_loop hook (with ``start(trainer)`` before the first update and ``close()`` at the end)
    that traces updates ``first`` to ``last`` into ``folder``."""

    def __init__(self, folder: str | Path, first: int, last: int):
        self.folder, self.first, self.last = Path(folder), first, last
        self.tracing = False
        self.done = False

    def _start(self) -> None:
        import jax

        self.folder.mkdir(parents=True, exist_ok=True)
        jax.profiler.start_trace(str(self.folder))
        self.tracing = True

    def start(self, trainer) -> None:
        """Before the run's first update (a resumed run starts after update trainer.update_index)."""
        if trainer.update_index + 1 >= self.first and trainer.update_index < self.last:
            self._start()

    def __call__(self, trainer, record) -> bool:
        update = record["update"]
        if self.tracing and update >= self.last:
            self.close(trainer)
        elif not self.tracing and not self.done and update + 1 == self.first:
            self._start()
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

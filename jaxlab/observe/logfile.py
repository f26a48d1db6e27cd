"""Library log lines go to the run's log file, not the user's terminal.

absl (used by Orbax) logs warnings such as "Requested `tracked_metric`; did not provide metrics" through
Python's logging, and a failed Orbax read leaves TensorStore callbacks that later hit a closed asyncio
loop ("RuntimeError: Event loop is closed", reported through sys.unraisablehook) or tasks whose
exception nobody read (asyncio's "Task exception was never retrieved", logged by the "asyncio" logger).
While ``library_logs_to(path)`` is active, all of them are written to ``path`` with their tracebacks;
jaxlab's own messages are unaffected.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from pathlib import Path

LIBRARY_LOGGERS = ("absl", "orbax", "jax", "tensorstore", "asyncio")


def _is_closed_loop_callback(unraisable) -> bool:
    """A late asyncio callback from a read that already failed: harmless, and only noise."""
    value = unraisable.exc_value
    return isinstance(value, RuntimeError) and str(value) == "Event loop is closed"


def drop_closed_loop_noise() -> None:
    """Drops, for the rest of the process, the "Event loop is closed" tracebacks that the late TensorStore
    callbacks of a failed Orbax read print (dozens, between the command's own lines), in a command that has
    no run.log to send them to (`jaxlab eval` of a run whose newest checkpoint is damaged, load_trainer, and
    `jaxlab train --resume` once its run.log is closed); any other unraisable exception is reported as before.
    Installed once: a second call changes nothing."""
    previous_hook = sys.unraisablehook
    if getattr(previous_hook, "drops_closed_loop_noise", False):
        return

    def unraisable_hook(unraisable) -> None:
        if not _is_closed_loop_callback(unraisable):
            previous_hook(unraisable)

    unraisable_hook.drops_closed_loop_noise = True
    sys.unraisablehook = unraisable_hook


@contextlib.contextmanager
def library_logs_to(path: str | Path):
    """Routes library loggers and closed-event-loop noise to ``path`` (appended) while active."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved = []
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate, list(logger.handlers)))
        logger.handlers = [handler]
        logger.propagate = False
    previous_hook = sys.unraisablehook

    def unraisable_hook(unraisable) -> None:
        if _is_closed_loop_callback(unraisable):
            text = "".join(traceback.format_exception(unraisable.exc_type, unraisable.exc_value,
                                                      unraisable.exc_traceback))
            logging.getLogger("orbax").warning("ignored after a failed checkpoint read:\n%s", text.rstrip())
        else:
            previous_hook(unraisable)

    sys.unraisablehook = unraisable_hook
    try:
        yield path
    finally:
        sys.unraisablehook = previous_hook
        for logger, propagate, handlers in saved:
            logger.handlers = handlers
            logger.propagate = propagate
        handler.close()

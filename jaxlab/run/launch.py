"""When this process started, for the launch-to-first-update time in the metrics and the summary."""

from __future__ import annotations

import os
import time

_IMPORTED = time.time()  # the fallback: when jaxlab.run.launch was first imported
_trainers = 0  # how many trainers this process has built (start_clock)


def seconds_since_launch() -> float:
    """Seconds since this process started: on Linux from its start time in /proc/self/stat (clock
    ticks since boot, 10 ms) against CLOCK_BOOTTIME; elsewhere since this module was first imported."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat(5), after the name's ")"
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time() - _IMPORTED


def start_clock() -> float | None:
    """What a new trainer's launch_to_first_update_s counts from (seconds_since): None, the process's
    start, for the first trainer of this process; for a later one (a second run from Python), now
    (time.monotonic()), when it was built: the process's start would count the runs before it."""
    global _trainers
    _trainers += 1
    return None if _trainers == 1 else time.monotonic()


def seconds_since(clock: float | None) -> float:
    """Seconds since ``clock`` (from start_clock): since the process's start when it is None."""
    return seconds_since_launch() if clock is None else time.monotonic() - clock

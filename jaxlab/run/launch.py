"""When this process started, for the launch-to-first-update time in the metrics and the summary."""

from __future__ import annotations

import os
import time

_IMPORTED = time.time()  # the fallback: when jaxlab.run.launch was first imported


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

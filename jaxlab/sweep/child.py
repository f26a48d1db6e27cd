"""``python -m jaxlab.sweep.child SWEEP_PID ARGS...``: runs ``jaxlab ARGS`` (a trial's `jaxlab train`) in
this process after asking Linux to send it SIGTERM when the sweep process dies, so that a trial never
outlives its sweep: even a sweep killed with SIGKILL leaves its trials saving a checkpoint and exiting.
The run records ``jaxlab ARGS`` as its command line."""

from __future__ import annotations

import os
import signal
import sys


def main(argv: list[str]) -> int:
    from jaxlab.run.signals import catch_early_stops, end_with_parent

    catch_early_stops()  # a stop forwarded while this trial still imports JAX is not lost
    sweep_pid, args = int(argv[0]), argv[1:]
    if not end_with_parent(sweep_pid, signal.SIGTERM):  # the sweep died before the request took effect
        print(f"jaxlab sweep: the sweep process {sweep_pid} is gone; not starting `jaxlab {' '.join(args)}`",
              file=sys.stderr)
        return 1
    sys.argv = ["jaxlab", *args]
    from jaxlab.cli import main as jaxlab_main
    from jaxlab.run.signals import end_at_once

    return end_at_once(jaxlab_main(args))  # as the jaxlab command does (jaxlab.launch): a second Ctrl-C in a compile


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

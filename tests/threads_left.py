"""Which threads a run left behind, for the tests that check a run stops every thread it started."""

import threading
import time


def threads_left_since(before: set, within_s: float = 10.0) -> list:
    """Threads started since ``before`` that are still alive after up to ``within_s`` seconds. Orbax closes
    the event loops of its synchronous calls without joining their executors' threads (asyncio_N): they
    end a moment after the call returns, later still on a loaded machine, so they are joined first."""
    deadline = time.monotonic() + within_s
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in set(threading.enumerate()) - before]

"""Graceful stop: SIGINT/SIGTERM ask the run to finish its update and save, instead of killing it."""

from __future__ import annotations

import os
import signal
import threading


class StopSignals:
    """While active, SIGINT and SIGTERM set ``received`` instead of killing the process, and the first
    one says so on stderr at once; a second SIGINT raises KeyboardInterrupt. Does nothing outside the
    main thread."""

    def __init__(self):
        self.received: str | None = None
        self._previous: dict = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.received == "SIGINT" and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.received is None:
            again = "; Ctrl-C again to stop at once" if signum == signal.SIGINT else ""
            _say(f"{signal.Signals(signum).name}: finishing this update, then saving a checkpoint{again}\n")
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def _say(text: str) -> None:
    """Writes ``text`` to stderr's file descriptor: unbuffered, so safe however the interrupted code was
    using sys.stderr; a closed stderr is not an error here."""
    try:
        os.write(2, text.encode())
    except OSError:
        pass

"""Graceful stop: SIGINT/SIGTERM ask the run to finish its update and save, instead of killing it; so
does a broken pipe on stdout or stderr (``StopSignals(pipes=True)``: the reader of the run's output
exited, as in `jaxlab train ENV | head`). ``silence_broken_pipes`` quiets a command's broken output
streams so that it can end without a traceback."""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

#: the standard output streams by name: their file descriptors
STREAMS = {"stdout": 1, "stderr": 2}

#: whether a Ctrl-C interrupted this process's command at once (see interrupted and end_at_once)
_interrupted = [False]


#: a SIGINT that came before a StopSignals was active, held by catch_early_stops for the first StopSignals
_early: list[int] = []


#: prctl's option that asks Linux to send a signal to this process when its parent ends
PR_SET_PDEATHSIG = 1


def end_with_parent(parent_pid: int, signum: int) -> bool:
    """Asks Linux to send this process ``signum`` when its parent ends, however it ends (kill -9 too:
    PR_SET_PDEATHSIG); nothing where there is no prctl (not Linux). False when the parent ``parent_pid``
    has ended already (before the request took effect), else True."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signum)
    except (OSError, AttributeError):
        pass
    return os.getppid() == parent_pid


def catch_early_stops() -> None:
    """Holds a SIGINT that comes before the command's StopSignals is active (a sweep's trial still importing
    JAX when its sweep forwards a Ctrl-C) for the first StopSignals, which takes it as its own: the run then
    stops after its first update with a checkpoint. Without it the KeyboardInterrupt could be raised inside
    a callback whose exceptions Python ignores (JAX's garbage-collection callback: 'Exception ignored in
    <function _xla_gc_callback>'), and the trial trained to its end as if never told to stop. A second
    SIGINT before then interrupts at once."""
    def hold(signum, frame) -> None:
        if _early:
            raise KeyboardInterrupt
        _early.append(signum)

    signal.signal(signal.SIGINT, hold)


def interrupted() -> None:
    """Records that a Ctrl-C interrupted the command at once (a KeyboardInterrupt that it caught): the
    process must then end without Python's finalization (end_at_once)."""
    _interrupted[0] = True


def end_at_once(code: int) -> int:
    """``code``, or, after a Ctrl-C that interrupted the command (``interrupted``), the end of the process
    with ``code`` at once, its output flushed first. The interrupt may have left XLA working on a thread of
    its own: a compile runs on XLA's thread pool, and a KeyboardInterrupt ends JAX's wait for it, not the
    compile; Python's finalization (JAX's atexit clean-up destroys its backend) then pulled the objects from
    under that thread, and the process died of SIGSEGV (exit 139) after its last line, not with 130."""
    if not _interrupted[0]:
        return code
    _flush_outputs()
    os._exit(code)


def end_on_late_sigterm(code: int) -> None:
    """After the command returned ``code``: a SIGTERM during Python's shutdown ends the process at once with
    ``code``, its output flushed. StopSignals' handlers are gone by then, and JAX's clean-up takes most of a
    second after a run's "done" line: the default handler made a SIGTERM there exit 143 although the run
    had ended and saved (README: 0 for SIGTERM). Only the clean-up is cut short, as that handler cut it.
    Does nothing outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return

    def end(signum, frame) -> None:
        _flush_outputs()
        os._exit(code)

    signal.signal(signal.SIGTERM, end)


def _flush_outputs() -> None:
    """Flushes sys.stdout and sys.stderr; a closed or broken stream is not an error here."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


class StopSignals:
    """While active, SIGINT and SIGTERM set ``received`` instead of killing the process, and the first
    one says so on stderr at once; a second SIGINT raises KeyboardInterrupt. Does nothing outside the
    main thread.

    With ``pipes``, sys.stdout and sys.stderr are wrapped too (BrokenPipeGuard): a write that finds its
    pipe's reader gone points that file descriptor (and the other one's, when its reader is gone too)
    at /dev/null, so that no later print and not the interpreter's final flush raise, and acts as a
    signal named "SIGPIPE": ``received`` is set (unless a signal came first, or ``ended`` says that the
    run is over), a line says so on stderr (when it still has a reader) and one goes to the run's log
    (``log_to``). ``broken`` lists the streams found broken. Leaving it sets ``ended``."""

    def __init__(self, pipes: bool = False):
        self.received: str | None = None
        self.pipes = pipes
        self.broken: list[str] = []
        self.ended = False  # set once the run has ended: a broken pipe then stops nothing
        self._previous: dict = {}
        self._streams: dict = {}  # name: the stream a BrokenPipeGuard of ours replaced
        self._run_log: Path | None = None
        self._notes: list[str] = []  # lines for the run's log that came before log_to
        self._say_through: Callable[[str], bool] | None = None  # say_through's

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
            if _early:  # a Ctrl-C that came before (catch_early_stops): this run stops at its first update
                self._handle(_early.pop(), None)
        if self.pipes:
            for name in STREAMS:
                stream = getattr(sys, name)
                if stream is not None and not isinstance(stream, BrokenPipeGuard):
                    self._streams[name] = stream
                    setattr(sys, name, BrokenPipeGuard(stream, name, self.pipe_broke))
        return self

    def _handle(self, signum, frame) -> None:
        if self.received == "SIGINT" and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if self.received is None:
            again = "; Ctrl-C again to stop at once" if signum == signal.SIGINT else ""
            self._say_stop(f"{signal.Signals(signum).name}: finishing this update, then saving a checkpoint{again}")
        self.received = signal.Signals(signum).name

    def say_through(self, show: Callable[[str], bool] | None) -> None:
        """Where the first signal's line goes: ``show(line)`` (the live dashboard's say_status, which keeps it
        on a line of its own: written to stderr it joined the end of the dashboard's last line and the next
        redraw wiped it), which returns False when it cannot show it; None: stderr again."""
        self._say_through = show

    def _say_stop(self, line: str) -> None:
        try:
            shown = self._say_through is not None and self._say_through(line)
        except Exception:  # noqa: BLE001 - the line must not be lost to a dashboard's error
            shown = False
        if not shown:
            _say(f"{line}\n")

    def pipe_broke(self, name: str) -> None:
        """Stream ``name`` ("stdout" or "stderr") found its pipe's reader gone: see the class docstring."""
        if name in self.broken:
            return
        names = [other for other, fd in STREAMS.items()
                 if other == name or (other not in self.broken and reader_gone(fd))]
        for each in names:
            _silence(STREAMS[each], self._streams.get(each))
        self.broken += names
        what = "'s and ".join(names) + ("'s reader" if len(names) == 1 else "'s readers")
        if self.ended:
            note = f"{what} exited (broken pipe) after the run ended: no more output there; nothing was lost"
        else:
            note = (f"{what} exited (broken pipe): no more output there; finishing this update, then saving "
                    "a checkpoint, as on SIGTERM")
            if self.received is None:
                self.received = "SIGPIPE"
        if "stderr" not in self.broken:
            _say(f"SIGPIPE: {note}\n")
        self._notes.append(note)
        self._write_notes()

    def log_to(self, run_log: Path) -> None:
        """Where the lines about broken pipes go (the run's run.log), those before this call too."""
        self._run_log = Path(run_log)
        self._write_notes()

    def _write_notes(self) -> None:
        if self._run_log is None or not self._notes:
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            with open(self._run_log, "a") as file:
                file.writelines(f"{stamp} jaxlab WARNING {note}\n" for note in self._notes)
        except OSError:
            pass  # the run's records say it stopped; run.log is a convenience
        self._notes.clear()

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        self.ended = True  # what it guarded is over: a pipe found broken by the flush below stops nothing
        for name, stream in self._streams.items():
            guard = getattr(sys, name)
            if isinstance(guard, BrokenPipeGuard):
                guard.flush()  # a pipe broken at the last lines is found here, not at the interpreter's exit
                setattr(sys, name, stream)
        self._streams.clear()


class BrokenPipeGuard:
    """A text stream that passes everything to ``stream``, except that a BrokenPipeError of a write or
    flush calls ``on_broken(name)`` instead of raising."""

    def __init__(self, stream, name: str, on_broken):
        self._stream, self._name, self._on_broken = stream, name, on_broken

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._on_broken(self._name)
            return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._on_broken(self._name)

    def __getattr__(self, attribute):
        return getattr(self._stream, attribute)


def reader_gone(fd: int) -> bool:
    """Whether writing to ``fd`` would raise BrokenPipeError: a pipe whose reader closed it (poll's
    POLLERR on its write end)."""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def silence_broken_pipes() -> list[str]:
    """After a BrokenPipeError of a command's output: points stdout and stderr at /dev/null where their
    readers are gone (stdout when neither looks gone) and drops what their buffers still
    hold, so that the interpreter's final flush is quiet (no "Exception ignored ... BrokenPipeError").
    Returns the names of the streams silenced."""
    names = [name for name, fd in STREAMS.items() if reader_gone(fd)] or ["stdout"]
    for name in names:
        _silence(STREAMS[name], getattr(sys, name))
    return names


def _silence(fd: int, stream) -> None:
    """Points ``fd`` at /dev/null, then flushes ``stream`` (the Python stream over it) there."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, fd)
        finally:
            os.close(null)
    except OSError:
        return
    if isinstance(stream, BrokenPipeGuard):
        stream = stream._stream
    try:
        if stream is not None:
            stream.flush()
    except (OSError, ValueError):
        pass


def _say(text: str) -> None:
    """Writes ``text`` to stderr's file descriptor: unbuffered, so safe however the interrupted code was
    using sys.stderr; a closed stderr is not an error here."""
    try:
        os.write(2, text.encode())
    except OSError:
        pass

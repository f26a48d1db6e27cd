"""The `jaxlab` console script's entry: imports the command line inside a guard, so that a Ctrl-C while
Python is still importing it (a fraction of a second) ends with one line and exit 130, not a traceback.
Importing this module imports nothing but `sys` (`jaxlab/__init__.py` is lazy). A command that a Ctrl-C
interrupted at once ends the process without Python's finalization (jaxlab.run.signals.end_at_once); a
SIGTERM during the finalization of a command that returned ends it with the command's status
(end_on_late_sigterm)."""

import sys


def main() -> int:
    try:
        from jaxlab.cli import main as cli_main
    except KeyboardInterrupt:
        print("jaxlab: interrupted", file=sys.stderr)
        return 130
    code = cli_main()
    from jaxlab.run.signals import end_at_once, end_on_late_sigterm

    end_on_late_sigterm(code)  # the command is done: a SIGTERM in Python's shutdown ends it with its status
    return end_at_once(code)  # after a Ctrl-C that interrupted the command: without Python's finalization

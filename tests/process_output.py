"""A child process's output for a failing test's message, without waiting on a child that still runs."""

import subprocess


def output_of(process: subprocess.Popen) -> tuple:
    """(stdout, stderr) of ``process``, killed first when it is still running (a test that gave up on it
    must fail with its output, not wait for it to end)."""
    if process.poll() is None:
        process.kill()
    return process.communicate(timeout=30)

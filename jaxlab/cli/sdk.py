"""Bringing your own env: `jaxlab sdk --include`, `jaxlab new-env NAME [DIR]`, `jaxlab build-env HEADER.h`,
`jaxlab check-env HEADER.h`."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from jaxlab.cli.common import user_path, whole_number


def _sdk_errors(run):
    """Runs ``run`` with the SDK's errors turned into config errors (one line, exit 2)."""
    from jaxlab.config import ConfigError
    from jaxlab.env.library import LibraryError
    from jaxlab.env.sdk import BuildError

    try:
        return run()
    except (BuildError, LibraryError) as err:
        raise ConfigError(str(err)) from None


def sdk_command(args: argparse.Namespace) -> int:
    """Prints the SDK's header folder (for -I), or the flags jaxlab compiles envs with."""
    from jaxlab.env import sdk

    if args.cflags:
        print(" ".join(sdk.compile_flags()))
    else:
        print(sdk.include_dir())
    return 0


def new_env_command(args: argparse.Namespace) -> int:
    """Writes DIR/NAME.h (a documented example env) and DIR/test_NAME.py."""
    from jaxlab.env.sdk import new_env

    header, test = _sdk_errors(lambda: new_env(args.name, args.dir))
    print(f"wrote {header} and {test}\n"
          f"  try it:   jaxlab train {header} --train.total-timesteps 100_000\n"
          f"  test it:  python -m pytest {test}\n"
          f"  check it: jaxlab check-env {header}\n"
          f"  build it: jaxlab build-env {header} -o lib{args.name}.so")
    return 0


def build_env_command(args: argparse.Namespace) -> int:
    """Compiles env headers into one env library and lists its envs; refuses a header whose env has a built-in
    env's name before compiling (the library was left behind, unusable, by the refusal after it)."""
    from jaxlab.env.registry import env_types, refuse_built_in_names
    from jaxlab.env.sdk import build_library, header_env, header_envs

    output = args.output or f"lib{_sdk_errors(lambda: header_env(args.headers[0]))}.so"
    for header in args.headers:
        _sdk_errors(lambda: refuse_built_in_names(header_envs(header), f"env header {Path(header).absolute()}"))
    library = _sdk_errors(lambda: build_library(args.headers, output, sanitize=args.sanitize, verbose=True))
    if args.sanitize:
        print(f"built {library} with AddressSanitizer and UBSan; load it with "
              f"LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0", file=sys.stderr)
        return 0
    names = list(_sdk_errors(lambda: env_types(library)))
    print(f"built {library}: {', '.join(names)}\n  train: jaxlab train {names[0]} --env.library {library}")
    return 0


class CheckFailed(Exception):
    """A check of `jaxlab check-env` that failed; the message says what it found."""


#: What each check of `jaxlab check-env` checks, as its PASS line says.
CHECKS = {
    "build": "compiles with jaxlab's flags (warnings are errors), its Log fields are floats, no libc rand()",
    "registry": "its parameter table, statistic names and spaces (default parameters) are valid",
    "overruns": "writes only its own rows of each buffer, never its actions, and finite rewards and observations, "
                "at each parameter's ends",
    "sanitizers": "stepped (1 and 3 threads), saved, loaded and drawn under AddressSanitizer and UBSan at each "
                  "parameter's ends, its step never reaching its reset",
}


def check_env_command(args: argparse.Namespace) -> int:
    """Runs the SDK's checks on an env header (see CHECKS), one PASS / FAIL / SKIP line each; 1 when one
    failed, 2 for bad input (no header, no env in it, a bad --param)."""
    from jaxlab.env.sdk import header_envs

    from jaxlab.config import ConfigError

    for option, value in (("--seeds", args.seeds), ("--steps", args.steps)):
        if value < 1:
            raise ConfigError(f"{option} {value} must be at least 1; e.g. {option} 3")
    header = Path(args.header)
    names = _sdk_errors(lambda: _envs_to_check(header, header_envs))
    held = _held_params(args.param)
    state = {"names": names}
    outcomes = [_run_check(name, check, args, header, held, state) for name, check in (
        ("build", _check_build), ("registry", _check_registry), ("overruns", _check_overruns),
        ("sanitizers", _check_sanitizers))]
    failed = outcomes.count("FAIL")
    verdict = f"{failed} of {len(outcomes)} checks failed" if failed else "every check passed"
    print(f"check-env {header}: {verdict}")
    return 1 if failed else 0


def _envs_to_check(header: Path, header_envs) -> list[str]:
    """The envs ``header`` defines; BuildError (bad input) for a missing file, another file than a .h or a
    header without CENV_ENV."""
    from jaxlab.env.sdk import BuildError, missing_header_problem

    if header.suffix == ".h" and not header.exists():
        raise BuildError(missing_header_problem(header))
    if header.suffix != ".h" or not header.is_file():
        raise BuildError(f"{header} is not an env header file (NAME.h); create one with `jaxlab new-env NAME`")
    names = header_envs(header)
    if not names:
        raise BuildError(f"{header} defines no env: an env header ends with CENV_ENV(name, Type, TypeLog, "
                         "\"description\", ...) (see `jaxlab new-env`)")
    return names


def _held_params(pairs: list[str]) -> dict:
    """--param NAME=VALUE as {NAME: VALUE} (a number, or a value's name as the parameter's help gives it);
    ConfigError for one without '='."""
    from jaxlab.config import ConfigError

    held = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise ConfigError(f"--param {pair!r} is not NAME=VALUE; e.g. --param length=4")
        held[name.strip()] = _number_or_text(text.strip())
    return held


def _number_or_text(text: str):
    """``text`` as an int, else a float, else itself (the name of a parameter's value)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _run_check(name: str, check, args, header: Path, held: dict, state: dict) -> str:
    """Runs ``check`` (skipped when the build or registry check failed: the others need the library) and
    prints its line; returns "PASS", "FAIL" or "SKIP"."""
    if state.get("failed"):
        outcome, detail = "SKIP", f"(not run: the {state['failed']} check failed)"
    else:
        try:
            detail = check(args, header, held, state) or CHECKS[name]
            outcome = "SKIP" if detail.startswith("(") else "PASS"
        except CheckFailed as failure:
            outcome, detail = "FAIL", str(failure)
            if name in ("build", "registry"):
                state["failed"] = name
    lines = detail.splitlines() or [""]
    print(f"{outcome}  {name:<10}  {lines[0]}" + "".join(f"\n{'':16}{line}" for line in lines[1:]), flush=True)
    return outcome


def _check_build(args, header: Path, held: dict, state: dict) -> None:
    from jaxlab.env.sdk import BuildError, cached_library

    try:
        state["library"] = str(cached_library(header))
    except BuildError as err:
        raise CheckFailed(str(err)) from None


def _check_registry(args, header: Path, held: dict, state: dict) -> None:
    """The library's env types (jaxlab refuses a bad parameter table or statistic names as it loads
    them) and each env's spaces with its default parameters; then ``held`` against its parameters
    (ConfigError: bad input)."""
    from jaxlab.config import ConfigError
    from jaxlab.env.library import LibraryError
    from jaxlab.env.registry import env_types, resolve_params, spaces_of

    try:
        kinds = env_types(state["library"])
        for name in state["names"]:
            spaces_of(name, state["library"])
    except (LibraryError, ValueError) as err:
        raise CheckFailed(str(err)) from None
    for name in state["names"]:
        try:
            resolve_params(kinds[name], held)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"--param: {err}") from None


def _check_overruns(args, header: Path, held: dict, state: dict) -> str | None:
    """check_overruns for each env of the header, one parameter setting at a time (overrun_settings), so
    that an error of the env itself names the setting it came with; the PASS line names the range ends
    left out (an observation too large to step)."""
    from jaxlab.env.overrun import OverrunError, check_overruns, overrun_settings

    left_out = []
    for name in state["names"]:
        settings, too_large = overrun_settings(name, state["library"], **held)
        left_out += [f"{name}'s {setting}" if len(state["names"]) > 1 else setting for setting in too_large]
        for setting in settings:
            def check(setting=setting, name=name):
                check_overruns(name, seeds=tuple(range(args.seeds)), steps=args.steps, library=state["library"],
                               settings=[setting])

            try:
                _isolated(check, OVERRUN_SETTING_TIMEOUT_S, OVERRUN_MEMORY_BYTES)
            except OverrunError as err:
                raise CheckFailed(str(err)) from None
            except (RuntimeError, ValueError, MemoryError) as err:
                raise CheckFailed(_failed_while_checked(name, state["library"], setting, held, err)) from None
    if not left_out:
        return None
    return (f"{CHECKS['overruns']}\nnot stepped with {', '.join(left_out)}: too large to check; --param NAME=VALUE "
            "checks a value of your choice")


#: The most seconds the overrun check of one parameter setting may take (its env's init, reset and steps; a longer
#: one is stopped and fails, named), and the memory it may take beyond what check-env holds already.
OVERRUN_SETTING_TIMEOUT_S = 120.0
OVERRUN_MEMORY_BYTES = 4 << 30


def _isolated(function, timeout_s: float, memory_bytes: int) -> None:
    """Runs ``function()`` in a forked process whose address space may grow by ``memory_bytes`` at most
    (RLIMIT_AS), so that a C env that hangs, crashes or takes the machine's memory in its init (a parameter at an
    end of its range that sizes a loop) fails instead of stopping check-env. Raises what ``function`` raised
    (an OverrunError, RuntimeError, ValueError or MemoryError, as the same type with its message), a
    RuntimeError for a crash (the signal named) or past ``timeout_s`` (the process killed). Interrupted while it
    waits (Ctrl-C), it kills the child first: an env hung in its init ignores the Ctrl-C it gets too."""
    import multiprocessing
    import os
    import signal

    from jaxlab.env.overrun import OverrunError

    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_run_limited, args=(function, memory_bytes, sender, os.getpid()),
                            daemon=True)
    child.start()
    sender.close()
    try:
        child.join(timeout_s)
    except BaseException:  # a Ctrl-C: check-env then ends at once (os._exit), which would leave a hung child running
        child.kill()
        child.join()
        raise
    if child.is_alive():
        child.kill()
        child.join()
        raise RuntimeError(f"it did not finish within {timeout_s:.0f} s and was stopped: its init, reset or step "
                           f"hangs there, or is too slow to check")
    try:
        outcome = receiver.recv() if receiver.poll() else None
    except EOFError:  # it died before sending anything
        outcome = None
    receiver.close()
    if outcome is not None:
        kinds = {"OverrunError": OverrunError, "RuntimeError": RuntimeError, "ValueError": ValueError,
                 "MemoryError": MemoryError}
        raise kinds[outcome[0]](outcome[1])
    if child.exitcode != 0:
        crash = (f"signal {signal.Signals(-child.exitcode).name}" if child.exitcode < 0 else
                 f"exit status {child.exitcode}")
        raise RuntimeError(f"its process crashed ({crash}; its memory was limited to {memory_bytes >> 30} GiB more "
                           f"than check-env's own): its init, reset or step writes out of bounds or allocates "
                           f"too much there")


def _run_limited(function, memory_bytes: int, sender, parent: int) -> None:
    """In _isolated's child (of process ``parent``): ends with its parent (an env hung there would outlive a
    check-env killed with SIGTERM or kill -9, spinning on a core), limits its address space to its current size
    plus ``memory_bytes``, runs ``function`` and sends None, or (the error's type name, its message). A crash there
    is the parent's to report (one FAIL line), so the child prints no fault dump of its own (pytest's faulthandler,
    or PYTHONFAULTHANDLER's, inherited through the fork)."""
    import faulthandler
    import os
    import resource
    import signal

    faulthandler.disable()

    from jaxlab.run.signals import end_with_parent

    if not end_with_parent(parent, signal.SIGKILL):  # check-env killed (SIGTERM, kill -9): its child goes too
        os._exit(1)
    try:
        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + memory_bytes, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (OSError, ValueError):
        pass  # no /proc (not Linux) or a hard limit below: the time limit alone
    from jaxlab.env.overrun import OverrunError

    try:
        function()
    except (OverrunError, RuntimeError, ValueError, MemoryError) as err:
        kind = next(k for k in (OverrunError, MemoryError, ValueError, RuntimeError) if isinstance(err, k))
        sender.send((kind.__name__, str(err)))
    else:
        sender.send(None)
    sender.close()


def _failed_while_checked(name: str, library: str, setting: dict, held: dict, err: Exception) -> str:
    """The FAIL line of an error env ``name`` raised itself (not an overrun) while stepped with ``setting``:
    a parameter the check moved to an end of its range (not in ``held``) is named, with the --param that
    holds it at its default when that end is not a value the env is meant to take (a test hook's)."""
    from jaxlab.env.registry import env_type

    defaults = {p.name: p.default_value for p in env_type(name, library).params}
    moved = {key: value for key, value in setting.items() if key not in held}
    if not moved:
        return f"env '{name}' failed while checked (not an overrun): {err}"
    shown = ", ".join(f"{key}={value}" for key, value in moved.items())
    hold = " ".join(f"--param {key}={defaults[key]}" for key in moved)
    return (f"env '{name}' failed while checked with {shown}, an end of its range (not an overrun): {err}\n"
            f"fix the env for {shown}, narrow the range in its parameter table, or hold it with {hold}")


#: The most seconds one run of the sanitizer build may take (a longer one fails, as hung), and the most all of a
#: header's runs may take together (settings not started by then are left out and named).
SANITIZER_RUN_TIMEOUT_S = 120.0
SANITIZER_BUDGET_S = 600.0


def _check_sanitizers(args, header: Path, held: dict, state: dict) -> str | None:
    """The sanitizer build of the header (built once) run for each env at each parameter setting of the overrun
    check (sanitizer_settings: ``held``, then each other parameter at both ends of its range), each run within
    SANITIZER_RUN_TIMEOUT_S and all within SANITIZER_BUDGET_S; a failure names the setting. The PASS line names
    the settings left out (too large, or past the budget)."""
    from jaxlab.env.overrun import sanitizer_settings
    from jaxlab.env.sdk import BuildError, sanitizer_driver

    if args.no_sanitize:
        return "(--no-sanitize)"
    started, left_out = time.monotonic(), []
    try:
        with sanitizer_driver(header) as run:
            for name in state["names"]:
                settings, too_large = sanitizer_settings(name, state["library"], **held)
                left_out += [f"{name}'s {s}" if len(state["names"]) > 1 else s for s in too_large]
                for setting in settings:
                    if time.monotonic() - started > SANITIZER_BUDGET_S:
                        left_out.append(f"{_setting_text(name, setting, held, state)} (past the check's "
                                        f"{SANITIZER_BUDGET_S:.0f} s)")
                        continue
                    _sanitizer_run(run, name, setting, header, held, state)
    except BuildError as err:
        raise CheckFailed(str(err)) from None
    if not left_out:
        return None
    return f"{CHECKS['sanitizers']}\nnot run with {', '.join(left_out)}; --param NAME=VALUE runs a value of your choice"


def _setting_text(name: str, setting: dict, held: dict, state: dict) -> str:
    """``setting`` as a sanitizer line names it: the parameters moved from ``held`` (`length=1000`), else "the
    default parameters" (or those held); the env's name too when the header has several."""
    moved = ", ".join(f"{key}={value}" for key, value in setting.items() if key not in held)
    text = moved or ("the parameters given" if held else "the default parameters")
    return f"{name}'s {text}" if len(state["names"]) > 1 else text


def _sanitizer_run(run, name: str, setting: dict, header: Path, held: dict, state: dict) -> None:
    """One run of the sanitizer build (``run``, see sanitizer_driver) of env ``name`` with ``setting``; CheckFailed
    naming the setting when it fails or does not finish within SANITIZER_RUN_TIMEOUT_S."""
    from jaxlab.env.registry import env_type, resolve_params

    kind = env_type(name, state["library"])
    params = dict(zip((p.name for p in kind.params), resolve_params(kind, setting)))
    shown = _setting_text(name, setting, held, state)
    try:
        result = run(name, params, timeout_s=SANITIZER_RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"the sanitizer run of {header} with {shown} did not finish within "
                          f"{SANITIZER_RUN_TIMEOUT_S:.0f} s (stopped): it hangs there, or is too slow to check; fix "
                          f"the env for it or narrow the range in its parameter table") from None
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-20:]
        raise CheckFailed("\n".join([f"the sanitizer run of {header} with {shown} failed (exit {result.returncode}):",
                                     *tail]))


def add_commands(add) -> None:
    """Registers `jaxlab sdk`, `jaxlab new-env`, `jaxlab build-env` and `jaxlab check-env` with ``add``."""
    sdk = add("sdk", "where the env SDK's headers are", "Print the folder of the env SDK's headers (core.h, "
              "rng.h, draw.h, api.h) for -I, or with --cflags the flags jaxlab compiles envs with.", sdk_command)
    sdk.add_argument("--include", action="store_true", help="print the header folder (the default)")
    sdk.add_argument("--cflags", action="store_true", help="print the compiler flags, -I included")
    new = add("new-env", "write a new env header and its tests", "Write DIR/NAME.h, a small documented env "
              "(params, statistics, render and pixels hooks) to turn into yours, and DIR/test_NAME.py (pytest).",
              new_env_command)
    new.add_argument("name", metavar="NAME", help="the env's name: a lower-case C identifier")
    new.add_argument("dir", nargs="?", default=".", type=user_path, metavar="DIR", help="where to write (default .)")
    build = add("build-env", "compile env headers into an env library", "Compile env headers (each ending "
                "with CENV_ENV) into one env library that jaxlab loads with --env.library, with jaxlab's own "
                "flags (warnings are errors). `jaxlab train HEADER.h` builds and caches one by itself.",
                build_env_command)
    build.add_argument("headers", nargs="+", type=user_path, metavar="HEADER.h", help="env headers")
    build.add_argument("-o", "--output", type=user_path, metavar="LIB.so",
                       help="the library to write (default libNAME.so)")
    build.add_argument("--sanitize", action="store_true",
                       help="build with -fsanitize=address,undefined,float-cast-overflow")
    check = add("check-env", "run the SDK's checks on an env header", "Run the env SDK's checks on an env header, "
                "one PASS, FAIL or SKIP line each: build (jaxlab's flags, warnings as errors, float Log fields, "
                "no libc rand()), registry (parameter table, statistic names, spaces), overruns "
                "(jaxlab.sdk.check_overruns: guard bytes around every buffer, the actions never written, with "
                "each parameter at both ends of its range, each setting in a process of its own stopped after 120 s "
                "or at 4 GiB more memory) and sanitizers (the header stepped by the SDK's C "
                "driver under AddressSanitizer and UBSan at the same parameter settings, each run within 120 s, "
                "stopped when a step reaches the env's own reset). When "
                "the build or registry check fails, the others are skipped. Exit 1 when a check failed, 2 for bad "
                "input.", check_env_command)
    check.add_argument("header", type=user_path, metavar="HEADER.h", help="the env header to check")
    check.add_argument("--seeds", type=whole_number, default=3, metavar="N",
                       help="seeds of the overrun check, 0..N-1 (default 3)")
    check.add_argument("--steps", type=whole_number, default=300, metavar="N",
                       help="steps per seed and parameter setting of the overrun check (default 300)")
    check.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                       help="hold an env parameter at VALUE in the overrun and sanitizer checks (the others still go "
                       "to both ends of their ranges); repeat for more")
    check.add_argument("--no-sanitize", action="store_true", help="skip the sanitizer check")

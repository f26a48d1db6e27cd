"""Compiles cenv/ into one shared library. Used by setup.py (the package build), by the SDK
(jaxlab.env.sdk: `jaxlab build-env`, which ships this file inside the package) and by the tests (the
sanitizer build); run it directly to build by hand: ``python cenv/build.py OUT.so [--sanitize]``.

Needs only a C compiler and libc/libm/pthreads; it downloads nothing.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

CENV_DIR = Path(__file__).resolve().parent
SOURCES = [CENV_DIR / "api.c"]
WARNINGS = ["-Wall", "-Wextra", "-Werror"]
# -ffp-contract=off: no fused multiply-add, so envs that match a Python reference bit for bit (cartpole)
# still do with -march=native or with clang, whose default would fuse a * b + c.
RELEASE_FLAGS = ["-O3", "-std=c11", "-fPIC", "-fvisibility=hidden", "-pthread", "-ffp-contract=off",
                 *WARNINGS]
# float-cast-overflow: a float converted to an int out of its range (NaN, inf, 1e30) is undefined
# behaviour, which GCC's -fsanitize=undefined does not check by itself.
SANITIZE_FLAGS = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined,float-cast-overflow",
                  "-fno-sanitize-recover=all"]


class CompilerNotFound(RuntimeError):
    """No C compiler on PATH."""


def find_compiler() -> str:
    """The C compiler: $CC if set, else the first of cc, gcc, clang on PATH."""
    candidates = [os.environ["CC"]] if os.environ.get("CC") else ["cc", "gcc", "clang"]
    for name in candidates:
        path = shutil.which(shlex.split(name)[0])
        if path:
            return name
    raise CompilerNotFound(
        "jaxlab needs a C compiler to build its environments (cenv/), and found none "
        f"(looked for {', '.join(candidates)}). Install one, e.g. `apt-get install gcc` or "
        "`xcode-select --install`, or point CC at it, then install again."
    )


def extra_flags() -> list[str]:
    """Flags appended from $CENV_CFLAGS, e.g. CENV_CFLAGS="-march=native" or "-Wno-error"."""
    return shlex.split(os.environ.get("CENV_CFLAGS", ""))


def compile_flags(sanitize: bool = False) -> list[str]:
    """The flags every cenv build uses (release, or the sanitizer's), $CENV_CFLAGS included."""
    flags = list(RELEASE_FLAGS)
    if sanitize:
        flags = [f for f in flags if not f.startswith("-O")] + SANITIZE_FLAGS
    return [*flags, *extra_flags()]


def compile_command(output: Path, sanitize: bool = False, shared: bool = True,
                    sources: list[Path] | None = None, include: list[Path] | None = None,
                    extra: list[str] | None = None) -> list[str]:
    """The compiler command line that builds ``sources`` (default: the library) into ``output``, with
    ``include`` directories on the header search path and the ``extra`` flags of one build."""
    cmd = [*shlex.split(find_compiler()), *compile_flags(sanitize), *(extra or [])]
    cmd += [f"-I{directory}" for directory in include or []]
    if shared:
        cmd.append("-shared")
    cmd += [str(s) for s in (sources or SOURCES)]
    cmd += ["-o", str(output), "-lm"]
    return cmd


def build(output: Path, sanitize: bool = False, shared: bool = True, sources: list[Path] | None = None,
          verbose: bool = True, include: list[Path] | None = None, extra: list[str] | None = None) -> Path:
    """Compiles into ``output`` (``extra``: flags of this build alone); raises RuntimeError with the command
    and the compiler's messages on failure."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    cmd = compile_command(output, sanitize=sanitize, shared=shared, sources=sources, include=include, extra=extra)
    if verbose:
        print(" ".join(cmd), file=sys.stderr)
    result = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if result.returncode < 0 and -result.returncode in (signal.SIGINT, signal.SIGTERM):
        raise KeyboardInterrupt  # the compiler was stopped (Ctrl-C reaches it too): not a compile error
    if result.returncode != 0:
        raise RuntimeError(f"compiling cenv failed:\n{' '.join(cmd)}\n{result.stdout}{result.stderr}")
    return output


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print("usage: python cenv/build.py OUTPUT.so [--sanitize]", file=sys.stderr)
        sys.exit(2)
    build(Path(args[0]), sanitize="--sanitize" in args)

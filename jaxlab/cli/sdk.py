"""Bringing your own env: `jaxlab sdk --include`, `jaxlab new-env NAME [DIR]`, `jaxlab build-env HEADER.h`."""

from __future__ import annotations

import argparse
import sys

from jaxlab.cli.common import user_path


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
          f"  build it: jaxlab build-env {header} -o lib{args.name}.so")
    return 0


def build_env_command(args: argparse.Namespace) -> int:
    """Compiles env headers into one env library and lists its envs."""
    from jaxlab.env.registry import env_types
    from jaxlab.env.sdk import build_library, header_env

    output = args.output or f"lib{_sdk_errors(lambda: header_env(args.headers[0]))}.so"
    library = _sdk_errors(lambda: build_library(args.headers, output, sanitize=args.sanitize, verbose=True))
    if args.sanitize:
        print(f"built {library} with AddressSanitizer and UBSan; load it with "
              f"LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0", file=sys.stderr)
        return 0
    names = list(_sdk_errors(lambda: env_types(library)))
    print(f"built {library}: {', '.join(names)}\n  train: jaxlab train {names[0]} --env.library {library}")
    return 0


def add_commands(add) -> None:
    """Registers `jaxlab sdk`, `jaxlab new-env` and `jaxlab build-env` with ``add``."""
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

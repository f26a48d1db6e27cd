"""The `jaxlab` command: one module per command family (train.py: train/eval; inspect.py: envs, config,
presets, runs, plot; bench.py: bench; sdk.py: sdk, new-env, build-env, check-env; sweep.py: sweep),
common.py for what they share."""

from __future__ import annotations

import argparse
import re
import sys

from jaxlab.cli import bench, inspect, sdk, sweep, train
from jaxlab.cli.common import command_adder, fail

FAMILIES = (inspect, train, bench, sdk, sweep)


def build_parser() -> argparse.ArgumentParser:
    from jaxlab import __version__

    parser = argparse.ArgumentParser(prog="jaxlab", description="JAX LSTM-PPO over batched C environments.")
    parser.add_argument("--version", action="version", version=f"jaxlab {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add = command_adder(commands)
    for family in FAMILIES:
        family.add_commands(add)
    return parser


CONFIG_FLAG = re.compile(r"--[A-Za-z_][\w-]*\.[\w.-]+(=.*)?", re.DOTALL)


def split_config_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """``argv`` as (the rest, its config flags: ``--section.key value`` or ``--section.key=value``), each in
    its order: ``jaxlab train --train.seed 3 memory`` is ``jaxlab train memory`` and ``--train.seed 3``, and
    argparse, given the rest alone, never takes a flag's value for ENV. A flag followed by another option
    keeps no value (parse_flags says it needs one); a ``--section.key=`` followed by a space keeps the next
    token (parse_flags says the value came apart from it)."""
    flags, others = [], []
    i = 0
    while i < len(argv):
        token = argv[i]
        if CONFIG_FLAG.fullmatch(token):
            flags.append(token)
            takes_next = "=" not in token or token.endswith("=")  # `--key= value`: parse_flags says it is split
            if takes_next and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                flags.append(argv[i + 1])
                i += 1
            from jaxlab.config.layers import is_a_number

            while i + 1 < len(argv) and is_a_number(argv[i + 1]):  # --policy.mlp-layers 64 64: no ENV is a number;
                flags.append(argv[i + 1])                           # parse_flags says what to write
                i += 1
        else:
            others.append(token)
        i += 1
    return others, flags


#: Options whose value may start with "-" and a digit without being a number argparse knows ("-1:2"):
#: argparse took such a value for an option and said only "expected one argument".
DASH_VALUE_OPTIONS = ("--profile-updates",)


def join_dash_values(argv: list[str]) -> list[str]:
    """``argv`` with each option of DASH_VALUE_OPTIONS followed by a "-<digit>..." value written as
    ``--option=VALUE``, so that the command's own check names the value ("--profile-updates '-1:2' is not
    A:B ...")."""
    joined, i = [], 0
    while i < len(argv):
        if argv[i] in DASH_VALUE_OPTIONS and i + 1 < len(argv) and re.match(r"-\d", argv[i + 1]):
            joined.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            joined.append(argv[i])
            i += 1
    return joined


#: Words that say a boolean (config booleans take them): given after a switch, CleanRL's way.
BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0"})


def command_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """{command: its parser} of the `jaxlab` parser."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


def switch_given_a_value(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[str, str] | None:
    """(command, error) for a switch of the command in ``argv`` (an option that takes no value: eval's
    --deterministic, train's --resume-any-env) followed by a boolean word, as CleanRL's flags take one
    (`--deterministic False`): argparse turned the switch on whatever the word said and took the word for ENV
    (eval: "a checkpoint of 'cartpole', not 'False'"), or ignored it (sweep --show False); None when none is."""
    command = next((token for token in argv if not token.startswith("-")), None)
    sub = command_parsers(parser).get(command)
    if sub is None:
        return None
    switches = {option for action in sub._actions if action.nargs == 0 and not isinstance(action, argparse._HelpAction)
                for option in action.option_strings}
    for token, after in zip(argv, [*argv[1:], ""]):
        name, eq, value = token.partition("=")
        given = value if eq else after
        if name in switches and given.lower() in BOOLEAN_WORDS:
            return command, (f"{name} takes no value (given {given!r}): write {name} alone to turn it on, or leave "
                             "it out for off")
    return None


def env_given_twice(args: argparse.Namespace, leftovers: list[str]) -> tuple[list[str], str | None]:
    """(``leftovers`` without a repeat of ENV, the error for a second, different ENV or None): argparse's
    leftovers of a command with ENV (``args.env``) hold a word of their own, not the value of an option
    argparse does not know (`--cuda False`), only when ENV was given already (`jaxlab train cartpole
    memory`), which parse_flags took for a config flag ('config flags look like --train.seed 1'). The same
    ENV twice is one, as an option's same value twice is (common.GivenOnce; a header's path written two ways
    too)."""
    from jaxlab.cli.common import same_path, user_path

    env = getattr(args, "env", None)
    for i, word in enumerate(leftovers):
        if env is None or word.startswith("-") or (i and leftovers[i - 1].startswith("-")):
            continue
        if user_path(word) == env or same_path(user_path(word), env):
            return [*leftovers[:i], *leftovers[i + 1:]], None
        return leftovers, f"ENV given twice ({env}, then {word}); a command runs one env: give ENV once"
    return leftovers, None


def main(argv: list[str] | None = None) -> int:
    """Runs the command of ``argv`` (default sys.argv[1:]); returns its exit status. A reader of its
    output that exits early (`jaxlab runs | head`) ends it quietly with status 0, as the reader asked:
    `jaxlab train` stops its run with a checkpoint (jaxlab.run.signals.StopSignals), other commands
    just stop."""
    from jaxlab.run.signals import silence_broken_pipes

    try:
        code = _main(argv)
    except SystemExit as end:  # argparse's --help, --version and usage errors: after the flush below
        code = end
    except BrokenPipeError:
        silence_broken_pipes()  # so that the interpreter's final flush is quiet too
        return 0
    try:
        for stream in (sys.stdout, sys.stderr):  # what a buffer still holds for a pipe: its error comes here
            if stream is not None:
                stream.flush()
    except BrokenPipeError:
        silence_broken_pipes()  # the command's own status stands
    if isinstance(code, SystemExit):
        raise code
    return code


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    others, flags = split_config_flags(sys.argv[1:] if argv is None else list(argv))
    switch_problem = switch_given_a_value(parser, others)
    if switch_problem:
        return fail(*switch_problem)
    args, rest = parser.parse_known_args(join_dash_values(others))  # a flag's value is never taken for ENV
    rest, second_env = env_given_twice(args, rest) if args.takes_flags else (rest, None)
    if second_env:
        return fail(args.command, second_env)
    if args.takes_flags == "env" and rest:  # eval: its own options and --env.KEY flags, nothing for parse_flags
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    rest += flags
    if not args.takes_flags and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.flags = rest
    try:
        return _run(args)
    except KeyboardInterrupt as err:  # Ctrl-C outside a run's own handling (imports, a command without one)
        return _interrupted(args.command, err)
    except Exception as err:  # a Ctrl-C that a library turned into an error of its own: an interrupt too
        if not from_an_interrupt(err):
            raise
        return _interrupted(args.command, err)


def _run(args: argparse.Namespace) -> int:
    """The command's exit status; bad config or input is one line (exit 2), not a traceback."""
    from jaxlab.checkpoint import CheckpointError  # imports JAX: a Ctrl-C here is the caller's to handle
    from jaxlab.config import ConfigError

    from jaxlab.cli.common import required_env

    try:
        if args.takes_flags:  # the commands with ENV
            required_env(args)
        return args.run(args)
    except (ConfigError, CheckpointError) as err:
        if from_an_interrupt(err):
            raise
        return fail(args.command, err)


def from_an_interrupt(err: BaseException) -> bool:
    """Whether ``err`` was raised from a KeyboardInterrupt or while one was handled: a KeyboardInterrupt is
    in its chain of causes and contexts (e.g. Orbax's import or asyncio turning a Ctrl-C into a
    RuntimeError). An error that merely came after a Ctrl-C, with none in its chain, is not."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def _interrupted(command: str, err: BaseException) -> int:
    """One line for a command a Ctrl-C interrupted (``err``: the KeyboardInterrupt or an error raised from
    one); 130. The process ends at once (launch.main): JAX may be compiling, or Orbax reading a checkpoint,
    on a thread of its own."""
    from jaxlab.run.signals import interrupted

    interrupted()
    print(f"jaxlab {command}: {interrupt_line(err)}", file=sys.stderr)
    return 130


def interrupt_line(err: BaseException | None) -> str:
    """What a Ctrl-C that raised ``err`` interrupted: the checkpoint read's own line
    (jaxlab.checkpoint.RestoreInterrupted) where one is in its chain, else "interrupted". Imports nothing:
    the Ctrl-C may have cut an import short."""
    checkpoint = sys.modules.get("jaxlab.checkpoint")  # not imported: no checkpoint was read
    seen = set()
    while checkpoint is not None and err is not None and id(err) not in seen:
        if isinstance(err, getattr(checkpoint, "RestoreInterrupted", ())):
            return str(err)
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return "interrupted"


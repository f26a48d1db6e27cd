"""The env SDK: the headers an env author includes, building an env header into a library that jaxlab
loads (no rebuild of jaxlab), the build cache, and the skeleton of a new env.

    include_dir()                        the folder of core.h, rng.h, api.h (`jaxlab sdk --include`)
    build_library([h, ...], out)         compile headers into one env library (`jaxlab build-env`)
    cached_library(h)                    the library of header h, built on first use into the cache and
                                         rebuilt when h or anything it includes changes
    header_env(h)                        the env a header defines (for `jaxlab train path/to/NAME.h`)
    source_hash(library)                 what a checkpoint records of where its env came from (of
                                         the contents alone, not where they are)
    new_env(name, folder)                write NAME.h and test_NAME.py (`jaxlab new-env`)
    find_header(name)                    NAME.h on the env path: $JAXLAB_ENV_PATH's folders, then
                                         jaxlab's example envs (examples/envs: drone, cards), so
                                         that `jaxlab train drone` builds and trains that header

The cache lives in $JAXLAB_CACHE_DIR, else $XDG_CACHE_HOME/jaxlab, else ~/.cache/jaxlab, under envs/;
a library there is keyed by the contents of the header and of every file it includes, of the SDK's
api.c (compiled into every library), the compiler (its --version), the whole compile command (flags,
$CENV_CFLAGS, link options), the C file jaxlab generates around the header (its refusal checks
included) and the C ABI version (and by the files' paths: a moved header is built again).
"""

from __future__ import annotations

import difflib
import errno
import fcntl
import glob
import hashlib
import importlib.util
import keyword
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import ExitStack, contextmanager
from functools import lru_cache
from pathlib import Path

from jaxlab.env.library import ABI_VERSION

#: CENV_ENV(name, ... as it starts an env definition in a header.
_ENV_DEFINITION = re.compile(r"^\s*CENV_ENV\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,", re.MULTILINE)
#: CENV_ENV(name, Type, TypeLog, ...: the third argument is the env's Log type.
_LOG_TYPE = re.compile(r"^\s*CENV_ENV\(\s*\w+\s*,\s*\w+\s*,\s*([A-Za-z_]\w*)\s*,", re.MULTILINE)
#: CENV_ENV(name, Type, ...: the second argument is the env's struct type.
_ENV_TYPE = re.compile(r"^\s*CENV_ENV\(\s*\w+\s*,\s*([A-Za-z_]\w*)\s*,", re.MULTILINE)
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class BuildError(ValueError):
    """An env header that cannot be built, or bad SDK input; the message says what and how to fix it
    (for a compile error: the command and the compiler's own messages)."""


def include_dir() -> Path:
    """The SDK's header folder: installed inside the package (jaxlab/cenv), or the source checkout's
    cenv/."""
    here = Path(__file__).resolve().parent.parent  # the jaxlab package
    for candidate in (here / "cenv", here.parent / "cenv"):
        if (candidate / "core.h").is_file() and (candidate / "api.c").is_file():
            return candidate
    raise BuildError(f"jaxlab's env SDK headers are missing (looked for core.h in {here / 'cenv'} and "
                     f"{here.parent / 'cenv'}); reinstall jaxlab")


@lru_cache(maxsize=1)
def _builder():
    """cenv/build.py (compiler discovery and flags), the one build recipe, loaded from the SDK."""
    spec = importlib.util.spec_from_file_location("jaxlab_cenv_build", include_dir() / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compile_flags(sanitize: bool = False) -> list[str]:
    """The flags jaxlab compiles env libraries with ($CENV_CFLAGS included), -I of the SDK included."""
    return [*_builder().compile_flags(sanitize), f"-I{include_dir()}"]


def missing_header_problem(header: Path) -> str:
    """Why ``header`` (no file) cannot be built, and the fix: the closest NAME.h in its folder (a typo),
    else `jaxlab new-env`."""
    folder = header.parent
    siblings = sorted(h.name for h in folder.glob("*.h")) if folder.is_dir() else []
    close = difflib.get_close_matches(header.name, siblings, n=1)
    fix = f"did you mean {folder / close[0]}?" if close else "create one with `jaxlab new-env NAME`"
    return f"env header {header} does not exist; {fix}"


#: What _code_of reads past: a comment (taken out), or a string or character literal (emptied, so that a `{`, a
#: `//` or a call's name inside one is not read as code); one pass, so a `//` in a string starts no comment.
_COMMENT_OR_LITERAL = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.DOTALL)


def _without_comment(match: re.Match) -> str:
    """A comment as nothing (a block comment as its line breaks), a literal as its quotes alone."""
    text = match.group(0)
    if text.startswith("/"):
        return "\n" * text.count("\n")
    return text[0] * 2


def _code_of(header: str | Path) -> str:
    """The text of ``header`` without its comments, and with its string and character literals emptied
    (``"..."`` -> ``""``, ``'}'`` -> ``''``)."""
    path = Path(header)
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        raise BuildError(missing_header_problem(path)) from None
    except OSError as err:
        raise BuildError(f"cannot read env header {path}: {err.strerror or err}") from None
    return _COMMENT_OR_LITERAL.sub(_without_comment, text)


def header_envs(header: str | Path) -> list[str]:
    """The names of the envs a header defines with CENV_ENV, in order."""
    return _ENV_DEFINITION.findall(_code_of(header))


def header_env(header: str | Path) -> str:
    """The env of a header: its only one, or the one named like the file (drone.h -> drone)."""
    names = header_envs(header)
    if not names:
        ported = (" (a PufferLib Ocean header, with c_reset and c_step: BUILD.md, \"Coming from PufferLib\", maps "
                  "it step by step)" if re.search(r"\bc_step\s*\(", _code_of(header)) else "")
        raise BuildError(f"{header} defines no env: an env header ends with "
                         f"CENV_ENV(name, Type, TypeLog, \"description\", ...) (see `jaxlab new-env`){ported}")
    stem = Path(header).stem
    if len(names) == 1 or stem in names:
        return names[0] if len(names) == 1 else stem
    raise BuildError(f"{header} defines {', '.join(names)}; name one: build it with `jaxlab build-env` "
                     f"and use `--env.library LIB.so` with the env's name")


def _translation_unit(headers: list[Path], folder: Path) -> Path:
    """A C file that includes the headers, lists their envs as the registry and includes api.c."""
    names = []
    for header in headers:
        found = header_envs(header)
        if not found:
            header_env(header)  # raises the "defines no env" message
        names += found
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BuildError(f"env name{'s' * (len(duplicates) > 1)} {', '.join(duplicates)} defined twice in "
                         f"{', '.join(map(str, headers))}; each env needs its own name")
    source = folder / "jaxlab_envs.c"
    lines = ["/* Generated by jaxlab build-env: the envs of these headers as one library. */",
             "#define _POSIX_C_SOURCE 200809L /* api.c's threads; before any system header */",
             *_SHARED_RANDOM_REFUSAL]
    lines += [f'#include "{header}"' for header in headers]
    source.write_text("\n".join(lines) + "\n")
    lines += _struct_checks(headers, source) + _self_reset_checks(headers)
    lines += [f"#define CENV_REGISTRY {{{', '.join(f'&{n}_spec' for n in names)}}}", '#include "api.c"', ""]
    source.write_text("\n".join(lines))
    return source


# libc's random number functions share one hidden state between every env and thread: an env that calls
# them ignores its seed, gives each thread count other results and resumes from a checkpoint differently.
# The generated C file declares them (stdlib.h) and then defines each as a function-like macro that
# expands to an undeclared name saying so (`rand_is_refused_in_env_headers_use_cenv_rng`), so a header
# that calls one does not compile while a variable named `random` still does; build_library adds
# SHARED_RANDOM_HINT to the compiler's message.
SHARED_RANDOM_FUNCTIONS = ("rand", "srand", "rand_r", "random", "srandom", "drand48", "erand48", "lrand48",
                           "nrand48", "mrand48", "jrand48", "srand48", "seed48", "lcong48")
REFUSED_CALL = "_is_refused_in_env_headers_use_cenv_rng"
_SHARED_RANDOM_REFUSAL = ["#include <stdlib.h> /* declared here; calls from the env headers are refused: */",
                          *(f"#define {f}(...) {f}{REFUSED_CALL}" for f in SHARED_RANDOM_FUNCTIONS)]
SHARED_RANDOM_HINT = ("an env may not call libc's rand(), srand(), random() or drand48(): they share one state "
                      "between all envs and threads, so the env would ignore its seed and its checkpoints; draw "
                      "from the env's own stream instead: cenv_rng_below(&env->rng, n), cenv_rng_unit(&env->rng) "
                      "or cenv_rng_uniform(&env->rng, lo, hi) (cenv/rng.h, BUILD.md \"The env contract\")")


WARNING_AS_ERROR_HINT = ("jaxlab builds env headers with -Wall -Wextra -Werror, so each warning above stops the "
                         "build: fix what it names (CENV_CFLAGS=-Wno-error builds anyway, as warnings)")


def cenv_env_options() -> list[str]:
    """The option words CENV_ENV takes (mask, reset_agent, …), read from the SDK's core.h, where each
    has a CENV__INIT_<word> macro."""
    words = re.findall(r"#define CENV__INIT_(\w+)\(", (include_dir() / "core.h").read_text())
    return [w for w in words if w != "none"]


#: What CENV_ENV(name, …) takes from a header besides its types, in the order a header defines them.
ENV_DEFINITIONS = ("params", "log_names", "spaces", "init", "reset", "step")
#: A compiler's word that one of them is missing (gcc quotes with ‘’, clang with '').
_MISSING_DEFINITION = re.compile(rf"[‘'](\w+?)_({'|'.join(ENV_DEFINITIONS)})[’'] undeclared|"
                                 rf"implicit declaration of function [‘'](\w+?)_({'|'.join(ENV_DEFINITIONS)})[’']")


def _missing_definitions_hint(messages: str) -> list[str]:
    """One line naming what CENV_ENV needs that the compiler ``messages`` say a header lacks (a PufferLib
    Ocean header has c_reset and c_step and no params, log names, spaces or init), else none."""
    missing: dict[str, list[str]] = {}
    for match in _MISSING_DEFINITION.finditer(messages):
        env, part = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
        missing.setdefault(env, []).append(part)
    return [f"CENV_ENV({env}, …) needs {', '.join(f'{env}_{d}' for d in ENV_DEFINITIONS)}; the header lacks "
            f"{', '.join(f'{env}_{d}' for d in ENV_DEFINITIONS if d in parts)} (`jaxlab new-env {env}` writes an "
            f"example of each; BUILD.md, \"The env contract\"; a PufferLib Ocean env's c_reset and c_step are "
            f"{env}_reset and {env}_step: BUILD.md, \"Coming from PufferLib\")" for env, parts in missing.items()]


#: A compiler's word that a void function's value was used (gcc, clang), as CENV_ENV uses what NAME_step returns.
_VOID_VALUE_USED = re.compile(r"error: (?:void value not ignored|initializing 'int' with an expression of "
                              r"incompatible type 'void')[^\n]*\n[^\n]*\bCENV_ENV\(\s*(\w+)")


def _void_step_hint(messages: str) -> list[str]:
    """One line for each env whose step the compiler ``messages`` say returns nothing (a PufferLib Ocean
    c_step is void), else none: CENV_ENV's own line, where the compiler points, says nothing of it."""
    return [f"{env}_step must return int: the number of agents whose episode ended in this step (0 mostly), after "
            f"adding their statistics to the log; a PufferLib Ocean c_step returns nothing (BUILD.md, \"The env "
            f"contract\")" for env in dict.fromkeys(_VOID_VALUE_USED.findall(messages))]


#: A compiler's word that a name is defined twice (gcc quotes with ‘’, clang with '').
_DEFINED_TWICE = re.compile(r"(?:redefinition of|conflicting types for|redeclaration of) [‘'](\w+)[’']")


def _clash_hint(messages: str, headers: list[Path]) -> list[str]:
    """One line when ``headers`` (two or more, built into one library) define a name twice, as the compiler
    ``messages`` say: they share one C file, so each header's own types, functions and tables need names of
    their own. None for a single header (a name it defines twice is its own mistake, which the compiler names)."""
    names = list(dict.fromkeys(_DEFINED_TWICE.findall(messages)))
    if len(headers) < 2 or not names:
        return []
    envs = [h.stem for h in headers]
    return [f"the headers of one library are compiled together as one C file, so a name two of them define "
            f"({', '.join(names)}) clashes: prefix each header's own types, functions and tables with its env's "
            f"name ({envs[0]}_{names[0]}, {envs[1]}_{names[0]}), or build each header into a library of its own"]


def _build_hints(messages: str) -> list[str]:
    """Lines that explain what jaxlab itself adds to a failed build's compiler ``messages``: its refused
    random functions, the definitions CENV_ENV needs that a header lacks, a step that returns nothing, an
    unknown CENV_ENV option word, and a build stopped by warnings alone, made errors (gcc marks them
    [-Werror=…], clang [-Werror,…]), unless the warnings are those of missing definitions (an implicit
    declaration), which -Wno-error cannot mend."""
    hints = [SHARED_RANDOM_HINT] if REFUSED_CALL in messages else []
    missing = _missing_definitions_hint(messages)
    hints += missing + _void_step_hint(messages)
    unknown = sorted(set(re.findall(r"CENV__(?:MASK|WRAP|INIT)_(\w+)", messages)) - set(cenv_env_options()))
    if unknown:  # CENV_ENV pastes each option word into a macro name: an unknown word is a syntax error
        hints.append(f"CENV_ENV has no option {', '.join(map(repr, unknown))}: its options are "
                     f"{', '.join(cenv_env_options())} (BUILD.md, \"The env contract\")")
    errors = [line for line in messages.splitlines() if "error:" in line]
    if errors and all("[-Werror" in line for line in errors) and not missing:  # warnings alone stopped it
        hints.append(WARNING_AS_ERROR_HINT)
    return hints


def _c_string(text: str) -> str:
    """``text`` as a C string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _struct_checks(headers: list[Path], source: Path) -> list[str]:
    """The _Static_asserts of the headers' Log and env structs, read from the preprocessed ``source`` (the
    headers' includes alone): nothing when it does not preprocess (the build then shows the compiler's
    messages)."""
    text = _preprocessed(source)
    if text is None:
        return []
    pointers = _saved_pointer_checks_from_debug_info(headers, source)
    if pointers is None:
        pointers = _saved_pointer_checks(headers, text)
    return _log_field_checks(headers, text) + pointers


def _log_field_checks(headers: list[Path], text: str) -> list[str]:
    """One _Static_assert per field of each header's Log type that it is a float: CENV_ENV checks only the
    Log's size, so an `int` (same size) passed and its bits were read as a float. The fields are read from
    the preprocessed C ``text``; the compiler checks their types. Nothing for a Log type not declared as
    `typedef struct [Tag] {...} Type;` or `typedef struct Tag Type;`."""
    checks = []
    for header in headers:
        for log_type in dict.fromkeys(_LOG_TYPE.findall(_code_of(header))):
            body = _struct_body(text, log_type)
            if body is not None:
                checks += [_float_field_check(header, log_type, declaration)
                           for declaration in _split_top_level(body, ";") if declaration.strip()]
    return checks


def _saved_pointer_checks_from_debug_info(headers: list[Path], source: Path) -> list[str] | None:
    """A failing _Static_assert for each pointer that an env struct (CENV_ENV's type) holds from its `log` on, as the
    compiler itself lays the struct out: ``source`` (the headers' includes) is compiled with -g and the env types'
    debug information (DWARF, read with readelf) walked through typedefs, qualifiers, arrays, nested structs and
    unions, so `typedef float *fptr; fptr x;`, `float *p[4]` and a pointer inside a member struct are seen. See
    _saved_pointer_checks for why a pointer there is refused. [] when the headers do not compile (the build then
    shows the compiler's messages); None when there is no readelf or its dump does not show an env struct with its
    `log` (debug information of another form): the caller falls back to reading the text. CENV_CFLAGS' flags that
    move the debug information out of the object's .debug_info (_DEBUG_INFO_ELSEWHERE) are left out."""
    readelf = shutil.which("readelf")  # binutils' (llvm-readelf has no --debug-dump)
    if readelf is None:
        return None
    env_types = {env_type: header for header in headers for env_type in _ENV_TYPE.findall(_code_of(header))}
    if not env_types:
        return []
    probe = source.with_name("jaxlab_struct_probe.c")
    probe.write_text(source.read_text() + "".join(f"{t} *jaxlab_struct_probe_{i};\n" for i, t in enumerate(env_types)))
    obj = probe.with_suffix(".o")
    compiler = shlex.split(_builder().find_compiler())
    flags = [flag for flag in compile_flags() if not flag.startswith(_DEBUG_INFO_ELSEWHERE)]
    cmd = [*compiler, *flags, "-O0", "-g", "-w", "-c", str(probe), "-o", str(obj)]
    if _run_tool(cmd) is None:
        return []
    dump = _run_tool([readelf, "--debug-dump=info", str(obj)])
    if dump is None:
        return None
    dies = _debug_entries(dump)
    checks = []
    for env_type, header in env_types.items():
        struct = _typedef_target(dies, env_type)
        if not _has_log_member(dies, struct):  # CENV_ENV's struct always has `log`: debug information not read
            return None
        for member in _saved_members(dies, struct):
            for path, leaf, pointer in _pointers_in(dies, member["type"], member.get("name", "")):
                checks.append(_debug_pointer_check(header, env_type, (path, leaf, pointer), dies, member["type"]))
    return checks


def _run_tool(cmd: list[str]) -> str | None:
    """The stdout of ``cmd``, or None when it fails (or cannot start)."""
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    except OSError:
        return None
    if result.returncode < 0 and -result.returncode in (signal.SIGINT, signal.SIGTERM):
        raise KeyboardInterrupt
    return result.stdout if result.returncode == 0 else None


#: A debugging information entry as `readelf --debug-dump=info` prints it: ` <1><2d>: Abbrev Number: 5 (DW_TAG_x)`.
_DIE = re.compile(r"^\s*<(\d+)><([0-9a-f]+)>: Abbrev Number: \d+ \(DW_TAG_(\w+)\)")
#: One of its attributes: `    <2e>   DW_AT_name        : (indirect string, offset: 0x74): fptr`.
_ATTRIBUTE = re.compile(r"^\s*<[0-9a-f]+>\s+DW_AT_(\w+)\s*:\s*(.*)$")


def _debug_entries(dump: str) -> dict[int, dict]:
    """The entries of a `readelf --debug-dump=info` ``dump`` by offset: {"tag", "name", "type" (an offset),
    "location" (a member's byte offset), "children" (offsets, in order)}."""
    dies: dict[int, dict] = {}
    parents: list[int] = []
    current = None
    for line in dump.splitlines():
        entry = _DIE.match(line)
        if entry:
            depth, offset = int(entry.group(1)), int(entry.group(2), 16)
            current = dies[offset] = {"tag": entry.group(3), "children": []}
            del parents[depth:]
            if parents:
                dies[parents[-1]]["children"].append(offset)
            parents.append(offset)
            continue
        attribute = _ATTRIBUTE.match(line)
        if attribute and current is not None:
            key, value = attribute.groups()
            if key == "name":
                current["name"] = value.rsplit("): ", 1)[-1].strip()
            elif key == "type":
                found = re.search(r"<0x([0-9a-f]+)>", value)
                current["type"] = int(found.group(1), 16) if found else None
            elif key == "data_member_location":
                found = re.findall(r"\d+", value)
                current["location"] = int(found[-1]) if found else 0
    return dies


def _typedef_target(dies: dict[int, dict], name: str) -> int | None:
    """The offset of the type that the typedef ``name`` names (its struct), through typedefs and qualifiers
    (`typedef struct {...} env_s; typedef env_s Env;`), or None."""
    target = next((die.get("type") for die in dies.values() if die["tag"] == "typedef" and die.get("name") == name),
                  None)
    while target is not None and dies.get(target, {}).get("tag") in _QUALIFIERS:
        target = dies[target].get("type")
    return target


#: Compiler flags (of CENV_CFLAGS) that put a struct's debug information where `readelf --debug-dump=info` of the
#: object does not show it whole: LTO sections, a .dwo file (whose names it misreads), type units. The probe
#: compile leaves them out.
_DEBUG_INFO_ELSEWHERE = ("-flto", "-gsplit-dwarf", "-fdebug-types-section")


def _has_log_member(dies: dict[int, dict], struct: int | None) -> bool:
    """Whether the debug entry at ``struct`` is a struct with a member named `log` (as every env struct has)."""
    entry = dies.get(struct) if struct is not None else None
    return entry is not None and entry["tag"] == "structure_type" and any(
        dies[c]["tag"] == "member" and dies[c].get("name") == "log" for c in entry["children"])


def _saved_members(dies: dict[int, dict], struct: int) -> list[dict]:
    """The members of the struct at ``struct`` from its `log` on (the saved part), without `log` itself and the
    borrowed buffer pointers (CENV_ENV's layout assertion names those when they follow `log`)."""
    members = [dies[c] for c in dies[struct]["children"] if dies[c]["tag"] == "member"]
    start = next((i for i, m in enumerate(members) if m.get("name") == "log"), len(members))
    return [m for m in members[start + 1:] if m.get("name") not in _BORROWED_BUFFERS and m.get("type") is not None]


#: Debug entry tags that name their type again with a qualifier (the walk looks through them).
_QUALIFIERS = {"typedef", "const_type", "volatile_type", "restrict_type", "atomic_type"}


def _pointers_in(dies: dict[int, dict], type_offset: int | None, path: str) -> list[tuple[str, int, int]]:
    """[(the member path, its declared type's offset, the pointer type's offset)] for every pointer that a value of
    the type at ``type_offset`` holds (through typedefs, qualifiers, arrays, nested structs and unions); ``path``
    names the value (`grid.cells`, `slots[]`; "" for an anonymous member of the env struct, whose own members
    the env reaches by their names alone)."""
    declared = type_offset
    die = dies.get(type_offset) if type_offset is not None else None
    while die is not None and die["tag"] in _QUALIFIERS:
        type_offset = die.get("type")
        die = dies.get(type_offset) if type_offset is not None else None
    if die is None:
        return []
    if die["tag"] == "pointer_type":
        return [(path, declared, type_offset)]
    if die["tag"] == "array_type":
        return _pointers_in(dies, die.get("type"), f"{path}[]")
    if die["tag"] in ("structure_type", "union_type"):
        found = []
        for child in (dies[c] for c in die["children"] if dies[c]["tag"] == "member"):
            inner = ".".join(filter(None, (path, child.get("name"))))  # an anonymous struct's members: path
            found += _pointers_in(dies, child.get("type"), inner)
        return found
    return []


def _type_name(dies: dict[int, dict], type_offset: int | None) -> str:
    """The C spelling of the type at ``type_offset`` (`fptr`, `float *`, `struct Node *`), as far as it matters
    for a message."""
    die = dies.get(type_offset) if type_offset is not None else None
    if die is None:
        return "void"
    tag, name = die["tag"], die.get("name")
    if tag in ("typedef", "base_type") and name:
        return name
    if tag in ("structure_type", "union_type"):
        return f"{tag.split('_')[0].replace('structure', 'struct')} {name or '{...}'}"
    if tag == "pointer_type" and dies.get(die.get("type"), {}).get("tag") == "subroutine_type":
        return "a function pointer"
    if tag == "pointer_type":
        return f"{_type_name(dies, die.get('type')).rstrip()} *"
    if tag in _QUALIFIERS:
        return f"{tag.split('_')[0]} {_type_name(dies, die.get('type'))}"
    if tag == "array_type":
        return f"{_type_name(dies, die.get('type'))}[]"
    return name or tag


def _debug_pointer_check(header: Path, env_type: str, found: tuple[str, int, int], dies: dict[int, dict],
                         declared: int) -> str:
    """The failing _Static_assert that names the pointer ``found`` (its path, declared type's and pointer type's
    offsets: see _pointers_in) of ``env_type`` (whose member holding it is declared as the type at ``declared``)."""
    path, leaf_type, pointer = found
    target = dies[pointer].get("type")
    while target is not None and dies.get(target, {}).get("tag") in _QUALIFIERS - {"typedef"}:
        target = dies[target].get("type")
    function = target is not None and dies.get(target, {}).get("tag") == "subroutine_type"
    leaf, member = path.split(".")[-1].rstrip("[]"), path.split(".")[0].rstrip("[]")
    shown, spelled = _type_name(dies, leaf_type), _type_name(dies, pointer)
    declaration = shown if shown == spelled else f"{shown}: {spelled}"
    where = f", inside member {member}: {_type_name(dies, declared)}" if path != member else ""
    fix = ("store an int that selects the function instead" if function else
           f"make it an array of fixed size, e.g. `{_type_name(dies, target)} {leaf}[MAX_{leaf.upper()}]` with a "
           f"#define")
    message = (f"{header}: {env_type}.{path} is a pointer ({declaration}{where}), but from `log` on the env struct is "
               f"saved in checkpoints as plain bytes and loaded into other processes, where a pointer points nowhere "
               f"(a resume crashes), and nothing frees what it points at; {fix} (BUILD.md, The env contract)")
    return f"_Static_assert(0, {_c_string(message)});"


def _saved_pointer_checks(headers: list[Path], text: str) -> list[str]:
    """A failing _Static_assert for each pointer member that an env struct (CENV_ENV's type, read from the
    preprocessed C ``text``) declares after its `log`: from `log` on the struct is saved in checkpoints as
    plain bytes and loaded into other processes, where the pointer points nowhere (a resume crashed with a
    segmentation fault), and nothing frees what it points at. A PufferLib env callocs its arrays in init;
    here they are arrays of fixed size. Read from the text, without the compiler's help: the fallback of
    _saved_pointer_checks_from_debug_info where there is no readelf (a pointer behind a typedef or inside a nested
    struct is not seen)."""
    checks = []
    for header in headers:
        for env_type in dict.fromkeys(_ENV_TYPE.findall(_code_of(header))):
            body = _struct_body(text, env_type)
            members = [m for m in _split_top_level(body or "", ";") if m.strip()]
            names = [_member_names(m) for m in members]
            saved = next((i for i, found in enumerate(names) if "log" in found), len(members))
            for declaration in members[saved + 1:]:
                checks += [_saved_pointer_check(header, env_type, declaration, declarator)
                           for declarator in _split_top_level(_flattened(declaration), ",")
                           if "*" in declarator and not set(_member_names(declarator)) & _BORROWED_BUFFERS]
    return checks


#: The env struct's borrowed buffer pointers: after `log` (a PufferLib env's order) they break the layout rule,
#: which CENV_ENV's own assertion names, so the pointer check leaves them to it.
_BORROWED_BUFFERS = {"observations", "actions", "rewards", "terminals", "truncations", "action_mask"}


def _flattened(declaration: str) -> str:
    """A member ``declaration`` with nested braces emptied and array sizes dropped."""
    return re.sub(r"\[[^\]]*\]", "[]", re.sub(r"\{.*\}", " {} ", declaration, flags=re.DOTALL))


def _member_names(declaration: str) -> list[str]:
    """The names a struct member ``declaration`` declares (`int x, y[4]` -> x, y)."""
    found = []
    for declarator in _split_top_level(_flattened(declaration), ","):
        function = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)", declarator)  # (*name)(args): a function pointer
        names = re.findall(r"[A-Za-z_]\w*", declarator.split(":")[0].split("[")[0].split("{")[-1])
        found += [function.group(1)] if function else names[-1:]
    return found


def _saved_pointer_check(header: Path, env_type: str, declaration: str, declarator: str) -> str:
    """The failing _Static_assert that names pointer ``declarator`` of ``env_type``'s member ``declaration``."""
    name = (_member_names(declarator) or ["?"])[0]
    element = _split_top_level(_flattened(declaration), ",")[0].split("*")[0].strip()
    fix = ("store an int that selects the function instead" if "(" in declarator else
           f"make it an array of fixed size, e.g. `{element} {name}[MAX_{name.upper()}]` with a #define")
    message = (f"{header}: {env_type}.{name} is a pointer ({' '.join(declaration.split())}), but from `log` on the "
               f"env struct is saved in checkpoints as plain bytes and loaded into other processes, where a pointer "
               f"points nowhere (a resume crashes), and nothing frees what it points at; {fix} "
               f"(BUILD.md, The env contract)")
    return f"_Static_assert(0, {_c_string(message)});"


def _self_reset_checks(headers: list[Path]) -> list[str]:
    """A failing _Static_assert for each env whose step function reaches its own reset (or reset_agent) hook, as a
    PufferLib Ocean env's c_step calls c_reset: jaxlab records each ending agent's final observation after the
    step and then resets, so the final observation was the next episode's first (a truncated episode's value
    bootstrapped from it) and the env was reset twice, with no error. The calls are read from the functions the
    header defines (without comments), through helpers it defines too (step -> finish -> reset); a call through a
    function pointer or a function of another file is left to the sanitizer run's watch (_reset_in_step_watch)."""
    checks = []
    for header in headers:
        bodies = _function_bodies(_code_of(header))
        for name in header_envs(header):
            path = _call_path(bodies, f"{name}_step", {f"{name}_reset", f"{name}_reset_agent"})
            if path:
                through = f" through {' -> '.join(path[1:-1])}" if len(path) > 2 else ""
                message = (f"{header}: {name}_step calls {path[-1]}{through}, but jaxlab resets the env itself after "
                           f"the step that ends its agents' episodes, once it has recorded each one's final "
                           f"observation: reset inside the step, the final observation would be the next episode's "
                           f"first; flag the agents that ended and return how many instead (BUILD.md, The env "
                           f"contract)")
                checks.append(f"_Static_assert(0, {_c_string(message)});")
    return checks


#: A function definition's head in C code: `name(parameters) {` (one level of parentheses inside, as in
#: `int (*cmp)(int)`).
_FUNCTION_HEAD = re.compile(r"\b([A-Za-z_]\w*)\s*\(([^;{}()]|\([^;{}()]*\))*\)\s*\{")


def _function_bodies(code: str) -> dict[str, str]:
    """{name: body} of the functions C ``code`` defines at its top level (a head inside a body taken already, an
    `if (…) {`, is not one)."""
    bodies: dict[str, str] = {}
    taken = 0
    for match in _FUNCTION_HEAD.finditer(code):
        if match.start() < taken or match.group(1) in _C_KEYWORDS:
            continue
        taken = _closing_brace(code, match.end() - 1)
        bodies.setdefault(match.group(1), code[match.end():taken])
    return bodies


def _call_path(bodies: dict[str, str], start: str, targets: set[str]) -> list[str]:
    """The shortest chain of calls [start, …, target] from function ``start`` to one of ``targets`` through the
    functions of ``bodies`` (see _function_bodies), direct calls first; [] when none reaches one."""
    paths, queue = {start: [start]}, [start]
    for function in queue:
        calls = re.findall(r"\b([A-Za-z_]\w*)\s*\(", bodies.get(function, ""))
        for called in calls:
            if called in targets:
                return [*paths[function], called]
        for called in calls:
            if called in bodies and called not in paths:
                paths[called] = [*paths[function], called]
                queue.append(called)
    return []


def _preprocessed(source: Path) -> str | None:
    """``source`` through the C preprocessor with jaxlab's flags (no line markers), or None when it fails."""
    builder = _builder()
    cmd = [*shlex.split(builder.find_compiler()), *compile_flags(), "-E", "-P", str(source)]
    result = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if result.returncode < 0 and -result.returncode in (signal.SIGINT, signal.SIGTERM):
        raise KeyboardInterrupt
    return result.stdout if result.returncode == 0 else None


def _struct_body(text: str, type_name: str) -> str | None:
    """The text between the braces of the struct that C ``text`` typedefs as ``type_name``, or None."""
    for match in re.finditer(r"\btypedef\s+struct\s*\w*\s*\{", text):
        end = _closing_brace(text, match.end() - 1)
        declarators = text[end + 1:text.find(";", end)]
        if type_name in re.findall(r"\w+", declarators):
            return text[match.end():end]
    tagged = re.search(rf"\btypedef\s+struct\s+(\w+)\s+{type_name}\s*;", text)
    definition = tagged and re.search(rf"\bstruct\s+{tagged.group(1)}\s*\{{", text)
    return text[definition.end():_closing_brace(text, definition.end() - 1)] if definition else None


def _closing_brace(text: str, start: int) -> int:
    """The index of the } that closes the { at ``text[start]`` (len(text) when none does)."""
    depth = 0
    for index in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return index
    return len(text)


def _split_top_level(text: str, separator: str) -> list[str]:
    """``text`` split at each ``separator`` outside braces, brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += (char in "{[(") - (char in "}])")
        if char == separator and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    return [*parts, text[start:]]


def _float_field_check(header: Path, log_type: str, declaration: str) -> str:
    """The _Static_assert(s) that the fields of one member ``declaration`` of ``log_type`` are floats (an
    array: its elements); one that fails for a member it cannot name (a function pointer, an anonymous
    struct)."""
    declaration = re.sub(r"\[[^\]]*\]", "[]", re.sub(r"\{.*\}", " {} ", declaration, flags=re.DOTALL))
    fix = "declare it float (one float per statistic, read as a float; BUILD.md, The env contract)"
    checks = []
    for declarator in _split_top_level(declaration, ","):
        names = re.findall(r"[A-Za-z_]\w*", declarator.split(":")[0].split("[")[0].split("{")[-1])
        if "(" in declarator or not names or names[-1] in _C_KEYWORDS:
            message = f"{header}: {log_type} has a member that is not a float ({' '.join(declaration.split())}); {fix}"
            return f"_Static_assert(0, {_c_string(message)});"
        field = names[-1] + "[0]" * declarator.count("[]")
        message = f"{header}: {log_type}.{names[-1]} is not a float; {fix}"
        checks.append(f"_Static_assert(_Generic((({log_type} *)0)->{field}, float: 1, default: 0), "
                      f"{_c_string(message)});")
    return " ".join(checks)


def build_library(headers: list[str | Path], output: str | Path, sanitize: bool = False,
                  verbose: bool = False) -> Path:
    """Compiles env headers into the env library ``output`` with jaxlab's own flags (warnings as
    errors; the sanitizer's with ``sanitize``). BuildError with the command and the compiler's
    messages when it does not compile."""
    headers = [Path(h).expanduser().absolute() for h in headers]
    for header in headers:
        if header.suffix == ".h" and not header.exists():
            raise BuildError(missing_header_problem(header))
        if header.suffix != ".h" or not header.is_file():
            raise BuildError(f"{header} is not an env header file (NAME.h); create one with `jaxlab new-env NAME`")
    output = Path(output).expanduser().absolute()
    if output.resolve() in {h.resolve() for h in headers}:
        raise BuildError(f"the library {output} would overwrite its own header; give another name, e.g. "
                         f"-o lib{output.stem}.so")
    if output.is_file() and output.read_bytes()[:4] != b"\x7fELF":
        raise BuildError(f"{output} exists and is not a library (it would be overwritten); give another name, "
                         f"e.g. -o lib{headers[0].stem}.so, or remove it")
    if output.is_dir():
        raise BuildError(f"{output} is a folder; give the library a file name, e.g. "
                         f"-o {output / f'lib{headers[0].stem}.so'}")
    builder = _builder()
    # The compiler writes into a folder of this build beside the output (the linker writes its file in
    # place, and deletes it when it fails), which is then renamed over the output: a failed or
    # interrupted build leaves an existing library as it was, and a process that has it loaded keeps
    # its file. Through a symlink, the file it points at is replaced.
    target = Path(os.path.realpath(output))
    temp = Path(tempfile.gettempdir())
    # the jaxlab-build-* folders of builds killed before they could remove them: see _scratch
    _remove_stale_scratch(temp, "jaxlab-build-*", min_age_s=BUILD_FOLDER_GRACE_S)
    with _scratch(temp, "jaxlab-build-") as folder, ExitStack() as stack:
        source = _translation_unit(headers, folder)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _remove_stale_scratch(target.parent, f".{glob.escape(target.name)}.*.tmp", by_age=False)
            scratch = stack.enter_context(_scratch(target.parent, f".{target.name}.", ".tmp"))
        except OSError as err:
            raise _unwritable(output, err) from None
        try:
            builder.build(scratch / target.name, sanitize=sanitize, sources=[source], include=[include_dir()],
                          verbose=verbose)
        except builder.CompilerNotFound as err:
            raise BuildError(str(err)) from None
        except RuntimeError as err:
            hints = "".join(f"\n{hint}" for hint in _build_hints(str(err)) + _clash_hint(str(err), headers))
            raise BuildError(f"{', '.join(map(str, headers))} does not compile:\n{err}{hints}") from None
        try:
            (scratch / target.name).replace(target)
        except OSError as err:
            raise _unwritable(output, err) from None
    return output


#: The sanitizers' settings for the smoke run (a leak is a failure; the report names the line).
SANITIZER_ENVIRONMENT = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0", "UBSAN_OPTIONS": "print_stacktrace=1"}


def run_under_sanitizers(header: str | Path, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """Builds ``header`` as build_library does (its refusal checks included) with cenv/tests/smoke.c, the
    SDK's C driver, under AddressSanitizer and UBSan (build_library's sanitize flags), and runs it: every
    env of the header with its default parameters, stepped with 1 and 3 threads and compared, its states
    saved and loaded, its pictures drawn. The finished run (returncode 0: no failure and no sanitizer
    report; its stdout has a line "NAME N episodes, ok" per env). BuildError when it does not compile."""
    with sanitizer_driver(header) as run:
        return run(timeout_s=timeout_s)


@contextmanager
def sanitizer_driver(header: str | Path):
    """The sanitizer build of ``header`` (see run_under_sanitizers), built once, as a function
    ``run(env=None, params=None, timeout_s=600) -> CompletedProcess`` that runs it: every env with its defaults,
    or env ``env`` alone with ``params`` ({NAME: number}, the rest at their defaults). subprocess.TimeoutExpired
    (the run killed) past ``timeout_s``. BuildError when it does not compile."""
    header = Path(header).expanduser().absolute()
    builder = _builder()
    with _scratch(Path(tempfile.gettempdir()), "jaxlab-sanitize-") as folder:
        source = _translation_unit([header], folder)
        source.write_text(source.read_text() + "\n".join(_reset_in_step_watch(header)) + "\n")
        try:
            binary = builder.build(folder / "smoke", sanitize=True, shared=False,
                                   sources=[source, include_dir() / "tests" / "smoke.c"], include=[include_dir()],
                                   verbose=False, extra=["-finstrument-functions"])
        except builder.CompilerNotFound as err:
            raise BuildError(str(err)) from None
        except RuntimeError as err:
            raise BuildError(f"{header} does not compile with the sanitizers:\n{err}") from None

        def run(env: str | None = None, params: dict | None = None, timeout_s: float = 600):
            given = [f"{key}={float(value).hex()}" for key, value in (params or {}).items()]  # exact for strtod
            return subprocess.run([str(binary), *([env, *given] if env else [])], capture_output=True, text=True,
                                  errors="replace", timeout=timeout_s, env={**os.environ, **SANITIZER_ENVIRONMENT})

        yield run


#: The exit status of a sanitizer run stopped because an env's step reached its own reset (_reset_in_step_watch).
RESET_IN_STEP_EXIT = 86


def _reset_in_step_watch(header: Path) -> list[str]:
    """C lines for the sanitizer build (compiled with -finstrument-functions, whose hooks the compiler calls on
    entering and leaving every function, inlined ones included) that stop the run, naming the env and the hook,
    when an env's reset or reset_agent is entered while its step runs: through a helper function or a function
    pointer too, which the build's text check (_self_reset_checks) does not see. The vectorized layer resets
    after the step returns, which the watch lets be."""
    code = _code_of(header)
    hooks = []
    for name in header_envs(header):
        hooks += [(name, f"{name}_reset")]
        if re.search(rf"\b{name}_reset_agent\s*\(", code):
            hooks += [(name, f"{name}_reset_agent")]
    message = ("%s: %s_step reached %s (through a function it calls): jaxlab resets the env itself after the step "
               "that ends its agents' episodes, once it has recorded each one's final observation; reset inside the "
               "step, the final observation is the next episode's first. Flag the agents that ended and return how "
               "many instead (BUILD.md, The env contract)")
    lines = ["/* jaxlab check-env: an env's step must not reach its own reset (see _reset_in_step_watch). */",
             "static _Thread_local const char *jaxlab__stepping; /* the env whose step runs on this thread */",
             "__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *fn, void *caller);",
             "__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *fn, void *caller);",
             "__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *fn, void *caller) {",
             "    (void)caller;"]
    for name in header_envs(header):
        lines.append(f'    if (fn == (void *){name}_step) {{ jaxlab__stepping = "{name}"; return; }}')
    for name, hook in hooks:
        stepping = f'jaxlab__stepping != NULL && strcmp(jaxlab__stepping, "{name}") == 0'
        lines += [f"    if (fn == (void *){hook} && {stepping}) {{",
                  f'        fprintf(stderr, {_c_string(message)} "\\n", {_c_string(str(header))}, "{name}", "{hook}");',
                  f"        _Exit({RESET_IN_STEP_EXIT});",
                  "    }"]
    lines += ["}", "__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *fn, void *caller) {",
              "    (void)caller;"]
    lines += [f"    if (fn == (void *){name}_step) jaxlab__stepping = NULL;" for name in header_envs(header)]
    return [*lines, "}"]


def _unwritable(output: Path, err: OSError) -> BuildError:
    """The error for a library that cannot be written where ``output`` says (``err``: why)."""
    blocker = next((folder for folder in Path(output).parents if folder.is_file()), None)
    if isinstance(err, (FileExistsError, NotADirectoryError)) and blocker is not None:
        why = f"{blocker} is a file, not a folder"
    else:
        why = f"{err.strerror or err}{f' ({err.filename})' if err.filename else ''}"
    return BuildError(f"cannot write the library {output}: {why}; give -o a path in a folder you can write")


def env_path() -> list[Path]:
    """The folders searched for NAME.h when NAME is not a built-in env: $JAXLAB_ENV_PATH (separated
    by os.pathsep), then jaxlab's example envs (installed in the package, or the checkout's
    examples/envs)."""
    folders = [Path(f).expanduser() for f in os.environ.get("JAXLAB_ENV_PATH", "").split(os.pathsep) if f]
    here = Path(__file__).resolve().parent.parent  # the jaxlab package
    folders += [d for d in (here / "examples" / "envs", here.parent / "examples" / "envs") if d.is_dir()]
    return folders


def env_path_problems() -> list[str]:
    """What is wrong with the entries of $JAXLAB_ENV_PATH that are not folders (a header's own path
    given instead of its folder, a folder that does not exist), each with the fix; nothing is searched
    in them."""
    problems = []
    for entry in filter(None, os.environ.get("JAXLAB_ENV_PATH", "").split(os.pathsep)):
        folder = Path(entry).expanduser()
        if folder.is_file():
            problems.append(f"JAXLAB_ENV_PATH holds {entry}, a file: it takes folders (separated by "
                            f"{os.pathsep!r}), e.g. JAXLAB_ENV_PATH={folder.parent}")
        elif not folder.is_dir():
            problems.append(f"JAXLAB_ENV_PATH holds {entry}, which is no folder (it does not exist)")
    return problems


def is_env_name(name: str) -> bool:
    """Whether NAME.h on the env path can be found by NAME: lower-case letters, digits and _, starting
    with a letter. The one rule of find_header, header_names and `jaxlab envs`."""
    return bool(_NAME.match(name))


def find_header(name: str) -> Path | None:
    """The first NAME.h on the env path (see env_path), or None (always for a name not is_env_name)."""
    if not is_env_name(name):
        return None
    for folder in env_path():
        if (folder / f"{name}.h").is_file():
            return (folder / f"{name}.h").absolute()
    return None


def headers_on_path() -> dict[str, Path]:
    """{NAME: the NAME.h find_header(NAME) finds} for every header on the env path named by is_env_name's
    rule, first folder first."""
    found: dict[str, Path] = {}
    for folder in env_path():
        for header in sorted(folder.glob("*.h")):
            if is_env_name(header.stem) and header.stem not in found:
                found[header.stem] = header.absolute()
    return found


def header_names() -> list[str]:
    """The env names of the NAME.h headers on the env path (see env_path), first folder first, each
    once."""
    return list(headers_on_path())


def misnamed_headers() -> list[Path]:
    """The .h files on the env path whose name breaks is_env_name's rule: find_header never finds them."""
    return [header.absolute() for folder in env_path() for header in sorted(folder.glob("*.h"))
            if not is_env_name(header.stem)]


def misnamed_header_problem(header: Path) -> str:
    """Why the header ``header`` (one of misnamed_headers) is not an env name, and the fixes."""
    try:
        fixed = header_env(header)  # the env it defines: NAME.h is looked up for env NAME
    except BuildError:
        fixed = re.sub(r"[^a-z0-9_]", "_", header.stem.lower())
    fixed = fixed if is_env_name(fixed) else "my_env"
    return (f"{header} on the env path is not found by name: NAME.h is found for env NAME only when NAME is "
            f"lower-case letters, digits and _, starting with a letter; rename it (e.g. {fixed}.h) or give "
            f"its path as ENV (`jaxlab train {header}`, `jaxlab envs --library {header}`)")


def cache_dir() -> Path:
    """Where built env libraries are kept (see the module docstring)."""
    if os.environ.get("JAXLAB_CACHE_DIR"):
        return Path(os.environ["JAXLAB_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "jaxlab"


def dependencies(header: Path) -> list[Path]:
    """The header and every file it includes (the compiler's own list, from -M), sorted."""
    builder = _builder()
    cmd = [*shlex.split(builder.find_compiler()), f"-I{include_dir()}", "-M", "-MT", "deps", "-x", "c", str(header)]
    result = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    if result.returncode < 0 and -result.returncode in (signal.SIGINT, signal.SIGTERM):
        raise KeyboardInterrupt  # the compiler was stopped (Ctrl-C reaches it too): not a compile error
    if result.returncode != 0:
        raise BuildError(f"{header} does not compile (its includes could not be resolved):\n{' '.join(cmd)}\n"
                         f"{result.stderr.strip()}")
    return sorted({Path(n).absolute() for n in _make_prerequisites(result.stdout)})


def _make_prerequisites(rule: str) -> list[str]:
    """The file names of a make rule ``deps: a b \\\n c`` as the compiler's -M writes it: a space or a
    # in a name is escaped with a backslash, a $ doubled."""
    body = rule.replace("\\\n", " ").partition("deps:")[2]
    tokens = re.findall(r"(?:\\.|[^\s\\])+", body)
    return [re.sub(r"\\([ #\t])", r"\1", token).replace("$$", "$") for token in tokens]


@lru_cache(maxsize=1)
def _compiler_identity() -> str:
    builder = _builder()
    compiler = shlex.split(builder.find_compiler())
    version = subprocess.run([*compiler, "--version"], capture_output=True, text=True, errors="replace").stdout
    return " ".join(compiler) + "\n" + version


def _digest(files: list[Path], *extra: str) -> str:
    h = hashlib.sha256()
    for text in extra:
        h.update(text.encode() + b"\0")
    for file in files:
        h.update(str(file).encode() + b"\0" + file.read_bytes() + b"\0")
    return h.hexdigest()


# header -> (deps with mtimes, compile recipe, library)
_built: dict[str, tuple[tuple[tuple[str, int], ...], str, Path]] = {}


def _compile_recipe() -> str:
    """The command build_library compiles a library with (compiler, flags with $CENV_CFLAGS, link options),
    with placeholders for the paths of one build."""
    command = _builder().compile_command(Path("LIBRARY"), sources=[Path("SOURCE")], include=[include_dir()])
    return shlex.join(command)


def _generated_source(headers: list[Path]) -> str:
    """The text of the C file build_library compiles for ``headers`` (see _translation_unit)."""
    with _scratch(Path(tempfile.gettempdir()), "jaxlab-build-") as folder:
        return _translation_unit(headers, folder).read_text()


#: The file in a build's temporary folder that its build holds an exclusive flock on while it runs: the
#: kernel lets go of it when the process ends, however it ends (SIGKILL too).
_OWNER_LOCK = "owner.lock"
#: A temporary build folder whose owner cannot be told (no owner.lock: made by an older jaxlab, or a
#: file system without locks) is stale once it has not changed for this long.
STALE_BUILD_S = 3600.0
#: A build's jaxlab-build-* folder in the shared temp folder whose build is gone is removed only once it has
#: not changed for this long as well: a margin against a lock that reads free while its build runs (a temp
#: folder shared by hosts over a file system that keeps locks per host).
BUILD_FOLDER_GRACE_S = 300.0


@contextmanager
def _scratch(parent: Path, prefix: str, suffix: str = ""):
    """A new folder ``parent/PREFIXXXXXXXXXSUFFIX`` for one build alone (mkdtemp: unique per process and
    thread, and per host sharing the folder), held while the build runs (see _OWNER_LOCK) and removed
    after it, whether it succeeded, failed or was interrupted."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=parent))
    owner = None
    try:
        # locked before it gets its name, so that no cleaner ever finds an owner.lock nobody holds yet
        owner = open(folder / f".{_OWNER_LOCK}.new", "w")
        try:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.replace(folder / f".{_OWNER_LOCK}.new", folder / _OWNER_LOCK)
        except OSError:
            pass  # no locks on this file system: only the folder's age tells that it is stale
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if owner is not None:
            owner.close()


def _scratch_is_stale(folder: Path, by_age: bool, min_age_s: float = 0.0) -> bool:
    """Whether nothing uses the temporary build folder ``folder`` any more: its owner.lock is held by no
    process (its build was killed) and it has not changed for ``min_age_s``, or, when that cannot be told
    and ``by_age``, it has not changed for STALE_BUILD_S. A folder a live build holds is never stale,
    however old."""
    try:
        fd = os.open(folder / _OWNER_LOCK, os.O_RDONLY)
    except OSError:
        fd = None  # none: a build between mkdtemp and its lock, an older jaxlab's, or unreadable
    if fd is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return _unchanged_for(folder, min_age_s)  # taken at once: the build that held it has ended
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False  # a live build holds it
        finally:
            os.close(fd)
    return by_age and _unchanged_for(folder, STALE_BUILD_S)


def _unchanged_for(folder: Path, seconds: float) -> bool:
    """Whether ``folder`` has not changed (its mtime) for more than ``seconds``; False when it cannot be read."""
    try:
        return time.time() - folder.stat().st_mtime > seconds
    except OSError:
        return False


def _remove_stale_scratch(parent: Path, pattern: str, by_age: bool = True, min_age_s: float = 0.0) -> None:
    """Removes the temporary build folders ``parent/PATTERN`` that no build uses any more (see
    _scratch_is_stale): a build killed with SIGKILL (or a lost machine) leaves its folder behind."""
    try:
        candidates = list(parent.glob(pattern))
    except OSError:
        return
    for folder in candidates:
        if folder.is_dir() and not folder.is_symlink() and _scratch_is_stale(folder, by_age, min_age_s):
            shutil.rmtree(folder, ignore_errors=True)


def cached_library(header: str | Path) -> Path:
    """The library of ``header`` in the cache, built now when it is not there (BuildError with the
    compiler's messages when it does not compile)."""
    header = Path(header).expanduser().absolute()
    if not header.is_file():
        raise BuildError(missing_header_problem(header))
    command = _compile_recipe()
    known = _built.get(str(header))
    if known is not None and all(Path(f).is_file() and Path(f).stat().st_mtime_ns == t for f, t in known[0]) \
            and known[1] == command and known[2].is_file():
        return known[2]
    # api.c is compiled into every env library (see _translation_unit) but no header includes it: a
    # jaxlab whose api.c changed within one ABI version must not reuse a library built from the old one
    deps = sorted({*dependencies(header), include_dir() / "api.c"})
    # the C file jaxlab generates around the header and the command it compiles it with are the rest of
    # what the library is made of: a jaxlab that builds otherwise must not reuse one built the old way
    key = _digest(deps, _compiler_identity(), command, _generated_source([header]), f"ABI {ABI_VERSION}")
    folder = cache_dir() / "envs" / f"{header.stem}-{key[:16]}"
    library = folder / f"lib{header.stem}.so"
    # the folders of builds killed before they could remove them (of any header): see _scratch
    _remove_stale_scratch(cache_dir() / "envs", "*/.lib*.tmp")
    if not library.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        # Built in a folder of this build alone, so two builds of one header at once never write or
        # move each other's file; then renamed into place (atomic: a build racing us sees the whole
        # file or none).
        with _scratch(folder, f".{library.stem}.", ".tmp") as scratch:
            partial = scratch / library.name
            build_library([header], partial)
            partial.replace(library)
    _built[str(header)] = (tuple((str(f), f.stat().st_mtime_ns) for f in deps), command, library)
    return library


#: What source_hash hashes (a checkpoint records it beside the hash): 2, the contents alone; before, 1,
#: the files' absolute paths too.
SOURCE_HASH_VERSION = 2


def _contents_digest(source: Path, files: list[Path]) -> str:
    """The SHA-256 of ``source``'s bytes and of each other file's bytes with its name: its path
    relative to the SDK's folder or to ``source``'s when it lies in one, else its file name (a system
    header). No absolute path: the same files moved or copied elsewhere give the same digest."""
    h = hashlib.sha256(source.read_bytes() + b"\0")
    named = []
    for file in files:
        if file == source:
            continue
        for root, tag in ((include_dir(), "sdk"), (source.parent, "env")):
            if file.is_relative_to(root):
                named.append((f"{tag}/{file.relative_to(root)}", file.read_bytes()))
                break
        else:
            named.append((file.name, file.read_bytes()))
    for name, data in sorted(named):
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def legacy_source_hash(library: str | Path | None) -> str | None:
    """source_hash as hash_version 1 took it (before contents alone): over the files' absolute paths
    too, so it matches a checkpoint saved then only where the files have not moved."""
    if library is None or str(library) == "":
        return None
    path = Path(library).expanduser().absolute()
    return _digest(dependencies(path) if path.suffix == ".h" else [path])


def source_hash(library: str | Path | None) -> str | None:
    """What identifies the env's source: for a header, the SHA-256 of it and every file it includes;
    for a library, of its bytes; None for the built-in envs (they come with jaxlab's version). Only
    contents count (see _contents_digest): a header moved with its includes keeps its hash."""
    if library is None or str(library) == "":
        return None
    path = Path(library).expanduser().absolute()
    if path.suffix == ".h":
        return _contents_digest(path, dependencies(path))
    return _contents_digest(path, [])


def new_env(name: str, folder: str | Path = ".") -> tuple[Path, Path]:
    """Writes ``folder``/NAME.h (the SDK's example env under this name) and ``folder``/test_NAME.py;
    returns their paths. BuildError for a name that is not a lower-case C identifier, one of a
    built-in env, or files that exist already."""
    from jaxlab.env.registry import env_types

    if not _NAME.match(name) or keyword.iskeyword(name) or name in _C_KEYWORDS:
        raise BuildError(f"env name {name!r} must be a lower-case C identifier (letters, digits, _), "
                         "e.g. drone or card_game")
    if name in env_types():
        raise BuildError(f"{name!r} is a built-in env; choose another name")
    if name == "cenv" or name.startswith("cenv_"):
        raise BuildError(f"env name {name!r} would clash with the SDK's own cenv_* names; choose another name")
    folder = Path(folder).expanduser()
    if folder.exists() and not folder.is_dir():
        raise BuildError(f"{folder} is a file, not a folder; give the folder to write into (nothing was written)")
    header, test = folder / f"{name}.h", folder / f"test_{name}.py"
    for path in (header, test):
        if path.exists():
            raise BuildError(f"{path} exists already; choose another folder or name (nothing was written)")
    camel = "".join(part.capitalize() for part in name.split("_"))
    template = include_dir() / "template"

    def rename(text: str) -> str:
        return text.replace("CORRIDOR", name.upper()).replace("Corridor", camel).replace("corridor", name)

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise BuildError(f"cannot create {folder} ({err.strerror}); give a folder you can write "
                         "(nothing was written)") from None
    header.write_text(rename((template / "corridor.h").read_text()))
    test.write_text(rename((template / "test_corridor.py").read_text()))
    return header, test


_C_KEYWORDS = {"auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
               "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict",
               "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union",
               "unsigned", "void", "volatile", "while"}

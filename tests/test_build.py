"""The C build: warning-clean under -Werror, a sanitizer (ASan + UBSan) build that steps every env
through the public API, exported symbols, a clear message when no compiler exists, and the C boundary
having one source of truth (cenv/api.h) that the Python side is checked against."""

import ctypes
import os
import re
import subprocess
import sys

import pytest
from conftest import ENV_NAMES, ROOT, cenv_build, compile_cenv_with

from jaxlab.env import library

API_H = (ROOT / "cenv" / "api.h").read_text()


def test_sanitizer_build_steps_every_env(tmp_path):
    binary = cenv_build.build(tmp_path / "smoke", sanitize=True, shared=False, verbose=False,
                              sources=[ROOT / "cenv" / "api.c", ROOT / "cenv" / "tests" / "smoke.c"])
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300,
                            env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
                                 "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ENV_NAMES:
        assert re.search(rf"^{name} +\d+ episodes, ok$", result.stdout, re.MULTILINE), result.stdout
    assert "MISMATCH" not in result.stdout and "ERROR" not in result.stderr


def test_sanitizer_build_catches_a_float_converted_to_an_int_out_of_range(tmp_path):
    """(int) of NaN, an infinity or 1e30 is undefined behaviour that GCC's -fsanitize=undefined leaves
    unchecked: the sanitizer build adds float-cast-overflow, so an env that renders such a position
    (a state set by set_state) fails the sanitizer tests."""
    source = tmp_path / "cast.c"
    source.write_text("#include <stdio.h>\n"
                      "int main(int argc, char **argv) {\n"
                      "    (void)argv;\n"
                      "    volatile float far = (float)argc * 1e30f;\n"
                      "    printf(\"%d\\n\", (int)far);\n"
                      "    return 0;\n"
                      "}\n")
    binary = cenv_build.build(tmp_path / "cast", sanitize=True, shared=False, verbose=False, sources=[source])
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0, result.stdout
    assert "runtime error" in result.stderr and "outside the range" in result.stderr, result.stderr


def test_release_build_is_warning_clean_and_exports_only_cenv_symbols(tmp_path):
    assert "-Werror" in cenv_build.compile_command(tmp_path / "x.so")
    library = cenv_build.build(tmp_path / "libcenv.so", verbose=False)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                             text=True, check=True).stdout.split()
    exported = [s for s in symbols if s.startswith("cenv_")]
    others = [s for s in symbols[2::3] if not s.startswith("cenv_") and not s.startswith("_")]
    assert "cenv_step" in exported and "cenv_abi_version" in exported
    assert others == []


def test_the_c_sources_keep_lines_within_120_columns():
    """cenv/api.c, examples/envs/cards.h and tests/cards_fuzz.c had lines of up to 139 columns, past the house
    limit of 120. Every C file of the repository: the library, its envs, the examples and the tests' harnesses."""
    sources = [path for folder in ("cenv", "examples", "tests") for path in (ROOT / folder).rglob("*.[ch]")]
    long_lines = [f"{path.relative_to(ROOT)}:{number}" for path in sources
                  for number, line in enumerate(path.read_text().splitlines(), 1) if len(line) > 120]
    assert len(sources) > 5 and long_lines == []


def test_missing_compiler_gives_a_clear_message(monkeypatch):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(cenv_build.CompilerNotFound, match=r"needs a C compiler.*apt-get install gcc"):
        cenv_build.find_compiler()


def test_stale_library_abi_is_refused(tmp_path):
    source = tmp_path / "old.c"
    source.write_text("int cenv_abi_version(void) { return 0; }\n")
    old = tmp_path / "old.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(source), "-o", str(old)], check=True)
    code = ("import jaxlab.env.library as l\ntry:\n    l.load()\nexcept ImportError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "JAXLAB_CENV_LIB": str(old)})
    from jaxlab.env.library import ABI_VERSION
    assert f"has C ABI version 0 but this jaxlab expects {ABI_VERSION}" in result.stdout, result.stderr
    assert "Rebuild it with `pip install -e .`" in result.stdout


# ---- one source of truth across the C boundary ----

_SCALARS = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "uint64_t": ctypes.c_uint64,
            "double": ctypes.c_double, "float": ctypes.c_float, "uint8_t": ctypes.c_uint8,
            "int32_t": ctypes.c_int32}


def _to_ctypes(c_type: str):
    """The ctypes type for a C type of cenv/api.h: const dropped, char * -> c_char_p, void * and
    cenv_vec * -> c_void_p, T * -> POINTER(T), void -> None."""
    words = c_type.replace("*", " * ").split()
    stars = words.count("*")
    base = " ".join(w for w in words if w not in ("*", "const"))
    if base == "char" and stars:
        result, stars = ctypes.c_char_p, stars - 1
    elif base in ("void", "cenv_vec") and stars:
        result, stars = ctypes.c_void_p, stars - 1
    elif base == "void":
        return None
    else:
        result = _SCALARS[base]
    for _ in range(stars):
        result = ctypes.POINTER(result)
    return result


def _exported_prototypes() -> dict[str, tuple[str, list[str]]]:
    """{name: (return C type, [argument C types])} of every CENV_EXPORT prototype in cenv/api.h."""
    prototypes = {}
    for ret, name, args in re.findall(r"CENV_EXPORT\s+([^;(]*?)\b(cenv_\w+)\s*\(([^)]*)\)\s*;", API_H):
        arg_types = []
        for arg in " ".join(args.split()).split(","):
            arg = arg.strip()
            if arg in ("void", ""):
                continue
            arg_types.append(re.sub(r"\b\w+$", "", arg).strip())  # drop the parameter name
        prototypes[name] = (ret.strip(), arg_types)
    return prototypes


def test_every_exported_prototype_matches_the_ctypes_signatures():
    prototypes = _exported_prototypes()
    assert len(prototypes) == len(re.findall(r"^CENV_EXPORT ", API_H, re.MULTILINE))  # every one was parsed
    assert set(prototypes) == set(library.SIGNATURES), (
        f"only in cenv/api.h: {sorted(set(prototypes) - set(library.SIGNATURES))}; "
        f"only in library.SIGNATURES: {sorted(set(library.SIGNATURES) - set(prototypes))}")
    for name, (ret, args) in prototypes.items():
        restype, argtypes = library.SIGNATURES[name]
        assert restype == _to_ctypes(ret), f"{name} returns {ret} in cenv/api.h but {restype} in SIGNATURES"
        assert list(argtypes) == [_to_ctypes(a) for a in args], (
            f"{name}({', '.join(args)}) in cenv/api.h but {argtypes} in SIGNATURES")


def test_every_number_of_api_h_is_exported_and_python_reads_them():
    defined = {name: int(value) for name, value in re.findall(r"^#define CENV_(\w+)\s+(-?\d+)\b", API_H, re.MULTILINE)}
    assert {"ABI_VERSION", "ERR_BUSY", "ERR_NOT_RESET", "ERR_ENV", "MAX_CHUNKS", "ERROR_LEN"} <= set(defined)
    assert library.constants() == defined
    assert library.constant("MAX_CHUNKS") == 64
    errors = [value for name, value in defined.items() if name.startswith("ERR_")]
    assert len(set(errors)) == len(errors)  # error codes are distinct
    assert library.dtypes() == {defined["DTYPE_FLOAT32"]: "float32", defined["DTYPE_UINT8"]: "uint8"}
    with pytest.raises(KeyError, match="no constant 'MAX_CHUNK'.*MAX_CHUNKS"):
        library.constant("MAX_CHUNK")


def test_python_expects_the_abi_version_of_api_h():
    assert library.ABI_VERSION == library.constant("ABI_VERSION") == 5
    assert re.search(rf"^#define CENV_ABI_VERSION {library.ABI_VERSION}$", API_H, re.MULTILINE)


_LAYOUT_HEADER = """
#include "../core.h"
typedef struct {{ float episode_length; }} BadLog;
typedef struct {{
    float *observations;
    int32_t *actions;
    float *rewards;
    uint8_t *terminals;
    uint8_t *truncations;
    {before_log}
    BadLog log;
    int tick;
    cenv_rng rng;
}} Bad;
static const cenv_param bad_params[] = {{{{"x", 1, 0, 2, 1, "unused"}}}};
static const char *const bad_log_names[] = {{"episode_length"}};
static void bad_spaces(const double *params, cenv_spaces *out) {{
    (void)params;
    out->agents_per_env = 1;
    out->obs_ndim = 1;
    out->obs_shape[0] = 1;
    out->action_ndim = 1;
    out->action_nvec[0] = 2;
}}
static void bad_init(Bad *env, const double *params) {{ (void)env; (void)params; }}
static void bad_reset(Bad *env) {{ env->tick = 0; env->observations[0] = 0.0f; }}
static int bad_step(Bad *env) {{
    env->tick += 1;
    env->rewards[0] = 0.0f;
    env->terminals[0] = 0;
    env->truncations[0] = 0;
    return 0;
}}
CENV_ENV(bad, Bad, BadLog, "breaks the layout rule")
"""


@pytest.mark.parametrize("before_log", ["int max_steps;", "float *scratch;"])
def test_an_env_struct_with_a_field_before_log_does_not_compile(tmp_path, before_log):
    result, _ = compile_cenv_with(tmp_path, {"bad": _LAYOUT_HEADER.format(before_log=before_log)})
    assert result.returncode != 0
    assert "Bad breaks the env struct layout rule" in result.stderr, result.stderr
    assert "followed immediately by `log`" in result.stderr


def test_the_layout_rule_accepts_a_well_formed_struct(tmp_path):
    result, library_path = compile_cenv_with(tmp_path, {"bad": _LAYOUT_HEADER.format(before_log="")})
    assert result.returncode == 0, result.stderr
    assert library_path.exists()


def test_a_compiler_stopped_by_a_signal_is_an_interrupt_not_a_compile_error(tmp_path, monkeypatch):
    """Ctrl-C reaches the compiler too (one process group): its death by SIGINT was reported as code that
    does not compile; it is the user's interrupt."""
    import signal

    stopped = subprocess.CompletedProcess([], -signal.SIGINT, "", "")
    monkeypatch.setattr(cenv_build.subprocess, "run", lambda *a, **k: stopped)
    with pytest.raises(KeyboardInterrupt):
        cenv_build.build(tmp_path / "x.so", verbose=False)
    monkeypatch.setattr(cenv_build.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess([], 1, "", "error: this is not C"))
    with pytest.raises(RuntimeError, match="compiling cenv failed"):
        cenv_build.build(tmp_path / "x.so", verbose=False)


#: Every env header jaxlab ships: the built-in envs that setup.py compiles into jaxlab/_cenv (through
#: cenv/registry.h, without the SDK's refusal checks) and the example envs.
BUILT_IN_HEADERS = sorted((ROOT / "cenv" / "envs").glob("*.h"))
SHIPPED_HEADERS = BUILT_IN_HEADERS + sorted((ROOT / "examples" / "envs").glob("*.h"))


def test_every_built_in_env_the_registry_includes_is_a_header_checked_below():
    included = re.findall(r'^#include "envs/(\w+\.h)"', (ROOT / "cenv" / "registry.h").read_text(), re.MULTILINE)
    assert included and set(included) == {h.name for h in BUILT_IN_HEADERS}


@pytest.mark.parametrize("header", SHIPPED_HEADERS, ids=lambda h: f"{h.parent.parent.name}/{h.parent.name}/{h.name}")
def test_every_shipped_env_header_passes_the_sdks_build_checks(header, tmp_path):
    """The SDK refuses a header whose Log has a field that is not a float, or that calls libc's rand()
    (jaxlab.env.sdk: _log_field_checks, SHARED_RANDOM_FUNCTIONS), but setup.py builds the built-in envs
    without those checks: a built-in env could use either unseen. Each shipped header is built here as
    the SDK builds a user's (`jaxlab build-env`), checks included."""
    from jaxlab.env import sdk

    assert sdk.build_library([header], tmp_path / f"lib{header.stem}.so").is_file()


def test_the_sdks_build_checks_refuse_a_built_in_header_calling_rand(tmp_path):
    """The check above can fail: a copy of a built-in header that calls rand() is refused."""
    from jaxlab.env import sdk

    text = (ROOT / "cenv" / "envs" / "memory.h").read_text().replace('#include "../core.h"',
                                                                    f'#include "{ROOT / "cenv" / "core.h"}"')
    assert "cenv_rng_below(&env->rng, " in text
    header = tmp_path / "memory.h"
    header.write_text(text.replace("cenv_rng_below(&env->rng, ", "rand() % (", 1))
    with pytest.raises(sdk.BuildError, match=sdk.REFUSED_CALL):
        sdk.build_library([header], tmp_path / "libmemory.so")

"""The C build: warning-clean under -Werror, a sanitizer (ASan + UBSan) build that steps every env
through the public API, exported symbols, and a clear message when no compiler exists."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("cenv_build", ROOT / "cenv" / "build.py")
cenv_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cenv_build)


def test_sanitizer_build_steps_every_env(tmp_path):
    binary = cenv_build.build(tmp_path / "smoke", sanitize=True, shared=False, verbose=False,
                              sources=[ROOT / "cenv" / "api.c", ROOT / "cenv" / "tests" / "smoke.c"])
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300,
                            env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
                                 "UBSAN_OPTIONS": "print_stacktrace=1"})
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("cartpole", "pendulum", "memory", "target"):
        assert f"{name}" in result.stdout
    assert "MISMATCH" not in result.stdout and "ERROR" not in result.stderr


def test_release_build_is_warning_clean_and_exports_only_cenv_symbols(tmp_path):
    assert "-Werror" in cenv_build.compile_command(tmp_path / "x.so")
    library = cenv_build.build(tmp_path / "libcenv.so", verbose=False)
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True,
                             text=True, check=True).stdout.split()
    exported = [s for s in symbols if s.startswith("cenv_")]
    others = [s for s in symbols[2::3] if not s.startswith("cenv_") and not s.startswith("_")]
    assert "cenv_step" in exported and "cenv_abi_version" in exported
    assert others == []


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

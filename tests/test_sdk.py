"""The full life of a user's env outside the repo: `jaxlab new-env`, its own tests, `jaxlab build-env`,
training from the header on the command line, a checkpoint and a bit-exact resume, evaluation with a
render; the build cache; and every bad input of the SDK with its one clear line."""

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import jaxlab
import jaxlab.sdk
from jaxlab import checkpoint
from jaxlab.env import sdk

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "envs"
SMALL = ["--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "32",
         "--policy.hidden-size", "16", "--log.dashboard", "plain"]


def jaxlab_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "jaxlab.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})


@pytest.fixture(scope="module")
def user_env(tmp_path_factory):
    """A user's env written by `jaxlab new-env` in a folder outside the repo."""
    folder = tmp_path_factory.mktemp("my_env")
    result = jaxlab_cli("new-env", "stroll", str(folder))
    assert result.returncode == 0, result.stderr
    assert (folder / "stroll.h").is_file() and (folder / "test_stroll.py").is_file()
    return folder


def test_the_skeleton_passes_its_own_tests(user_env):
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_stroll.py"],
                            capture_output=True, text=True, cwd=user_env, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "5 passed" in result.stdout


def test_build_env_makes_a_library_that_lists_and_steps_like_the_header(user_env, tmp_path):
    library = tmp_path / "libstroll.so"
    result = jaxlab_cli("build-env", str(user_env / "stroll.h"), "-o", str(library))
    assert result.returncode == 0, result.stderr
    assert f"built {library}: stroll\n  train: jaxlab train stroll --env.library {library}" in result.stdout
    listing = jaxlab_cli("envs", "--library", str(library))
    assert listing.returncode == 0 and listing.stdout.startswith("stroll: ") and "options: render, pixels" in listing.stdout
    rng = np.random.default_rng(0)
    with jaxlab.make("stroll", num_envs=5, seed=2, library=str(library)) as built, \
            jaxlab.make(str(user_env / "stroll.h"), num_envs=5, seed=2) as cached:
        built.reset()
        cached.reset()
        for _ in range(100):
            actions = built.action_space.sample(rng, 5)
            for x, y in zip(built.step(actions)[:4], cached.step(actions)[:4]):
                np.testing.assert_array_equal(x, y)


def test_train_checkpoint_resume_bit_exactly_and_evaluate_from_the_header(user_env, tmp_path):
    header = str(user_env / "stroll.h")
    steps = ["--checkpoint.interval", "3", "--train.anneal-lr", "false"]  # the same LR in a shorter run
    straight = jaxlab_cli("train", header, *SMALL, *steps, "--train.total-timesteps", "1536", "--run-dir",
                          str(tmp_path / "straight"))
    assert straight.returncode == 0, straight.stderr
    cut = jaxlab_cli("train", header, *SMALL, *steps, "--train.total-timesteps", "768", "--run-dir", str(tmp_path / "cut"))
    assert cut.returncode == 0, cut.stderr
    resumed = jaxlab_cli("train", header, "--resume", str(tmp_path / "cut"), "--train.total-timesteps", "1536")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {tmp_path / 'cut/checkpoints/12'} at update 12" in resumed.stderr
    a = checkpoint.read(tmp_path / "straight/checkpoints/24", None)[0]
    b = checkpoint.read(tmp_path / "cut/checkpoints/24", None)[0]
    for x, y in zip(jax_leaves(a), jax_leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)  # params, optimizer, env state: bit for bit
    meta = checkpoint.read_meta(tmp_path / "cut/checkpoints/24")
    assert meta["env_source"] == {"library": header, "source_hash": sdk.source_hash(header),
                                  "hash_version": sdk.SOURCE_HASH_VERSION}
    frames = tmp_path / "frames.txt"
    evaluated = jaxlab_cli("eval", header, "--checkpoint", str(tmp_path / "cut"), "--episodes", "4",
                           "--save-frames", str(frames))
    assert evaluated.returncode == 0, evaluated.stderr
    assert "stroll from" in evaluated.stdout and "reached_goal" in evaluated.stdout
    lines = frames.read_text().splitlines()
    assert lines and all("@" in line and "G|" in line for line in lines)
    assert lines[-1].endswith("(episode ended)")


def jax_leaves(tree):
    import jax

    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_a_changed_header_is_rebuilt_and_refused_on_resume_unless_asked(user_env, tmp_path):
    folder = tmp_path / "env"
    stroll_with_an_include(user_env, folder)
    first = sdk.cached_library(folder / "stroll.h")
    assert sdk.cached_library(folder / "stroll.h") == first  # cached
    run = tmp_path / "run"
    result = jaxlab_cli("train", str(folder / "stroll.h"), *SMALL, "--train.total-timesteps", "256",
                        "--run-dir", str(run))
    assert result.returncode == 0, result.stderr
    (folder / "costs.h").write_text("#define STROLL_COST 0.01 /* the same cost, another source */\n")
    second = sdk.cached_library(folder / "stroll.h")
    assert second != first and second.is_file()  # an included file changed: rebuilt
    refused = jaxlab_cli("train", str(folder / "stroll.h"), "--resume", str(run), "--train.total-timesteps", "512")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "cannot resume: the env's source changed since the checkpoint" in refused.stderr
    assert "--resume-any-env" in refused.stderr
    accepted = jaxlab_cli("train", str(folder / "stroll.h"), "--resume", str(run), "--train.total-timesteps", "512",
                          "--resume-any-env")
    assert accepted.returncode == 0, accepted.stderr
    assert "resuming with a changed env" in accepted.stderr


def stroll_with_an_include(user_env: Path, folder: Path, include: str = "costs.h") -> Path:
    """stroll.h in ``folder`` with its step cost in an included ``include`` beside it; returns the header."""
    folder.mkdir(parents=True)
    (folder / "stroll.h").write_text((user_env / "stroll.h").read_text()
                                     .replace('#include "core.h"', f'#include "core.h"\n#include "{include}"')
                                     .replace('{"step_cost", 0.01,', '{"step_cost", STROLL_COST,'))
    (folder / include).write_text("#define STROLL_COST 0.01\n")
    return folder / "stroll.h"


def test_a_header_in_a_folder_with_spaces_and_unicode_builds_caches_and_hashes(user_env, tmp_path):
    """The compiler's -M list escapes a space in a file name ("my\\ envs/"): the cache key and the source
    hash read every file it names, so each must be split where make splits it."""
    folder = tmp_path / "my envs ü"
    stroll_with_an_include(user_env, folder, "step costs.h")
    assert {folder / "stroll.h", folder / "step costs.h"} <= set(sdk.dependencies(folder / "stroll.h"))
    first = sdk.cached_library(folder / "stroll.h")
    digest = sdk.source_hash(folder / "stroll.h")
    with jaxlab.make(str(folder / "stroll.h"), num_envs=2) as env:
        env.reset()
        env.step()
    (folder / "step costs.h").write_text("#define STROLL_COST 0.02\n")
    assert sdk.cached_library(folder / "stroll.h") != first  # the included file changed: rebuilt
    assert sdk.source_hash(folder / "stroll.h") != digest


def test_make_takes_a_header_path_under_the_home_folder(user_env, monkeypatch):
    """jaxlab.make("~/my_envs/drone.h"), as the README writes it: the ~ is the user's home (the shell
    expands it on the command line; from Python nothing did)."""
    monkeypatch.setenv("HOME", str(user_env.parent))
    with jaxlab.make(f"~/{user_env.name}/stroll.h", num_envs=2) as env:
        assert env.name == "stroll"
        env.reset()
        env.step()


def test_a_changed_sdk_api_c_rebuilds_a_cached_library(user_env, tmp_path, monkeypatch):
    """api.c is compiled into every env library though no header includes it: a jaxlab whose api.c
    changed (a fix within one ABI version) must not load a library built from the old one."""
    sdk_copy = tmp_path / "sdk"
    shutil.copytree(sdk.include_dir(), sdk_copy)
    monkeypatch.setattr(sdk, "include_dir", lambda: sdk_copy)
    header = stroll_with_an_include(user_env, tmp_path / "env")
    first = sdk.cached_library(header)
    with open(sdk_copy / "api.c", "a") as source:
        source.write("/* a fix in the vectorized layer */\n")
    second = sdk.cached_library(header)
    assert second != first and second.is_file()


@pytest.mark.parametrize("change", ["generated source", "compile command"])
def test_a_changed_build_recipe_rebuilds_a_cached_library(user_env, tmp_path, monkeypatch, change):
    """A library is made of the header, the C file jaxlab generates around it and the command it compiles
    that with: a jaxlab that generates or compiles otherwise must not load a library the old recipe built."""
    header = stroll_with_an_include(user_env, tmp_path / "env")
    first = sdk.cached_library(header)
    if change == "generated source":
        checks = sdk._log_field_checks
        monkeypatch.setattr(sdk, "_log_field_checks", lambda *a: [*checks(*a), '_Static_assert(1, "a new check");'])
    else:
        builder = sdk._builder()
        command = builder.compile_command
        monkeypatch.setattr(builder, "compile_command", lambda *a, **k: [*command(*a, **k), "-DJAXLAB_NEW_RECIPE"])
    monkeypatch.setattr(sdk, "_built", {})  # as the next process to use the header
    second = sdk.cached_library(header)
    assert second != first and second.is_file()


def test_two_threads_building_one_header_at_once_both_get_a_working_library(user_env, tmp_path, monkeypatch):
    """Two threads of one process build the same header into a fresh cache at the same time: neither
    may write, move or load the other's half-built file (they shared one temporary name per process).
    A barrier holds each build until both have compiled, so they overlap every time."""
    monkeypatch.setenv("JAXLAB_CACHE_DIR", str(tmp_path / "cache"))
    header = stroll_with_an_include(user_env, tmp_path / "env")
    both_built = threading.Barrier(2, timeout=120)
    real_build = sdk.build_library

    def build_then_wait(headers, output, **kwargs):
        built = real_build(headers, output, **kwargs)
        both_built.wait()  # the other thread has compiled too before either renames its library
        return built

    monkeypatch.setattr(sdk, "build_library", build_then_wait)
    results, errors = [None, None], []

    def build(i):
        try:
            results[i] = sdk.cached_library(header)
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)
            both_built.abort()

    threads = [threading.Thread(target=build, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert results[0] == results[1] and results[0].is_file()
    assert [p.name for p in results[0].parent.iterdir()] == ["libstroll.so"]  # no temporary left
    with jaxlab.make("stroll", num_envs=2, seed=0, library=str(results[0])) as env:
        env.reset()
        env.step()


def test_a_failed_build_leaves_no_temporary_file_in_the_cache(user_env, tmp_path, monkeypatch):
    """A build that fails (or is interrupted) after the compiler began writing its output leaves
    nothing in the cache: no half-written library under a temporary name."""
    monkeypatch.setenv("JAXLAB_CACHE_DIR", str(tmp_path / "cache"))
    header = stroll_with_an_include(user_env, tmp_path / "env")

    def half_write_then_fail(headers, output, **kwargs):
        Path(output).write_bytes(b"\x7fELF half a library")
        raise sdk.BuildError("the linker was stopped")

    monkeypatch.setattr(sdk, "build_library", half_write_then_fail)
    with pytest.raises(sdk.BuildError, match="the linker was stopped"):
        sdk.cached_library(header)
    left = [p.relative_to(tmp_path / "cache") for p in (tmp_path / "cache").rglob("*") if not p.is_dir()]
    assert left == []


def build_waiting_at_its_link(tmp_path: Path, call: str, **env: str) -> subprocess.Popen:
    """A process (a session of its own) running ``sdk.CALL`` with the real compiler whose link waits until the
    test kills it; returned once the build is linking."""
    ready = Path(tempfile.mkdtemp(dir=tmp_path)) / "linking"
    slow_cc = ready.with_name("slow-cc")
    slow_cc.write_text(f'#!/bin/sh\ncase " $* " in *" -shared "*) touch "{ready}"; exec sleep 300;; esac\n'
                       f'exec {sdk._builder().find_compiler()} "$@"\n')
    slow_cc.chmod(0o755)
    build = subprocess.Popen([sys.executable, "-c", f"from jaxlab.env import sdk; {call}"], start_new_session=True,
                             stderr=subprocess.PIPE, env={**os.environ, "CC": str(slow_cc), **env,
                                                          "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    for _ in range(1200):
        if ready.exists() or build.poll() is not None:
            break
        threading.Event().wait(0.1)
    assert ready.exists(), build.communicate(timeout=60)[1]
    return build


def kill_build(build: subprocess.Popen) -> None:
    """SIGKILL to the build and its compiler, as the OOM killer or kill -9 would."""
    try:
        os.killpg(build.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it ended by itself (the test failed)
    build.wait(timeout=60)


def test_a_killed_builds_temp_folder_is_removed_by_the_next_build_but_never_a_live_builds(user_env, tmp_path,
                                                                                          monkeypatch):
    """A build killed with SIGKILL cannot remove its jaxlab-build-* folder in the temp folder, which stayed
    there for ever. The next build removes it once the build that held it is gone and it is a few minutes
    old (sdk.BUILD_FOLDER_GRACE_S), while a build still running keeps its folder, however old it is."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    old = time.time() - 2 * sdk.BUILD_FOLDER_GRACE_S

    def build_one() -> None:
        sdk.build_library([user_env / "stroll.h"], tmp_path / "libstroll.so")

    def age(folder: Path) -> None:
        os.utime(folder, (old, old))

    killed = build_waiting_at_its_link(tmp_path, "sdk.build_library(['{}'], '{}')".format(
        user_env / "stroll.h", tmp_path / "killed.so"), TMPDIR=str(temp))
    [dead] = temp.glob("jaxlab-build-*")
    kill_build(killed)
    live_build = build_waiting_at_its_link(tmp_path, "sdk.build_library(['{}'], '{}')".format(
        user_env / "stroll.h", tmp_path / "live.so"), TMPDIR=str(temp))
    try:
        [live] = set(temp.glob("jaxlab-build-*")) - {dead}
        age(live)
        build_one()
        assert sorted(temp.iterdir()) == sorted([dead, live])  # its build is gone, but it is new: kept
        age(dead)
        build_one()
        assert list(temp.iterdir()) == [live]  # old and its build is gone: removed; the live one's is kept
    finally:
        kill_build(live_build)


def test_a_killed_build_leaves_a_folder_that_the_next_use_removes_but_never_a_live_builds(user_env, tmp_path,
                                                                                           monkeypatch):
    """A build killed with SIGKILL cannot remove its temporary folder (.libNAME.XXXX.tmp beside the
    cached library), which stayed in the cache for ever. The next use of a header removes it once the
    build that held it is gone, while a build still running keeps its folder, however old it is."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("JAXLAB_CACHE_DIR", str(cache))
    header = stroll_with_an_include(user_env, tmp_path / "env")
    build = build_waiting_at_its_link(tmp_path, f"sdk.cached_library({str(header)!r})")
    try:
        [live] = cache.glob("envs/*/.libstroll.*.tmp")
        old = live.stat().st_mtime - 7200  # two hours: past sdk.STALE_BUILD_S
        os.utime(live, (old, old))  # old, but its build is alive: kept
        unknown = live.parent / ".libstroll.ab12cd34.tmp"  # an older jaxlab's: no owner.lock; fresh: kept
        unknown.mkdir()
        ancient = live.parent / ".libstroll.ef56gh78.tmp"  # an older jaxlab's, untouched for two hours
        ancient.mkdir()
        (ancient / "libstroll.so").write_bytes(b"\x7fELF half")
        os.utime(ancient, (old, old))
        library = sdk.cached_library(header)  # the real compiler (another cache key): builds, and cleans
        assert library.is_file() and live.is_dir() and unknown.is_dir() and not ancient.exists()
    finally:
        kill_build(build)
    assert live.is_dir()  # nothing could remove it when the build died
    assert sdk.cached_library(header) == library  # known to this process: nothing looked at
    monkeypatch.setattr(sdk, "_built", {})  # as the next process to use the header
    assert sdk.cached_library(header) == library
    assert not live.exists() and unknown.is_dir()
    assert sorted(p.name for p in library.parent.iterdir()) == ["libstroll.so"]


def test_a_failed_or_interrupted_build_env_leaves_an_existing_library_as_it_was(user_env, tmp_path, monkeypatch):
    """`jaxlab build-env A.h -o LIB.so` had the compiler write LIB.so in place: a link error deleted a
    good old library (the linker removes its output when it fails) and an interrupted link left half of
    one. The build now goes to a temporary folder beside LIB.so and is renamed over it when whole. (A
    compile error never reached the linker, so it left LIB.so alone before too.)"""
    library = tmp_path / "libstroll.so"
    sdk.build_library([user_env / "stroll.h"], library)
    good = library.read_bytes()

    def unchanged():
        assert library.read_bytes() == good
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # no temporary left

    broken = tmp_path / "broken.h"
    broken.write_text(BROKEN_H + 'CENV_ENV(broken, Broken, BrokenLog, "x")\n')
    unlinked = tmp_path / "unlinked.h"  # compiles, but calls a function no library has
    unlinked.write_text((user_env / "stroll.h").read_text().replace(
        "CENV_ENV(", "void stroll_nowhere(void);\n__attribute__((used)) static void stroll_call(void) "
                     "{ stroll_nowhere(); }\nCENV_ENV(", 1))
    names = ["libstroll.so", "broken.h", "unlinked.h"]
    with pytest.raises(sdk.BuildError, match="broken.h does not compile"):
        sdk.build_library([broken], library)
    unchanged()
    monkeypatch.setenv("CENV_CFLAGS", "-Wl,-z,defs")  # an undefined symbol is a link error
    link_error = "(?s)unlinked.h does not compile.*undefined (reference to|symbol).{,3}stroll_nowhere"
    with pytest.raises(sdk.BuildError, match=link_error):
        sdk.build_library([unlinked], library)
    unchanged()
    monkeypatch.delenv("CENV_CFLAGS")

    def half_write_then_stop(output, **kwargs):
        Path(output).write_bytes(b"\x7fELF half a library")
        raise KeyboardInterrupt  # Ctrl-C while the linker was writing

    monkeypatch.setattr(sdk._builder(), "build", half_write_then_stop)
    with pytest.raises(KeyboardInterrupt):
        sdk.build_library([user_env / "stroll.h"], library)
    unchanged()
    monkeypatch.undo()
    (tmp_path / "libnew.so").symlink_to(library)  # a library replaced through a link: the link stays
    names.append("libnew.so")
    edited = tmp_path / "edited" / "stroll.h"
    edited.parent.mkdir()
    edited.write_text((user_env / "stroll.h").read_text().replace("0.01", "0.02"))
    assert sdk.build_library([edited], tmp_path / "libnew.so") == tmp_path / "libnew.so"
    assert (tmp_path / "libnew.so").is_symlink() and library.read_bytes() != good
    names.append("edited")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    with jaxlab.make("stroll", num_envs=2, library=str(library)) as env:
        assert env.params["step_cost"] == pytest.approx(0.02)


def test_the_source_hash_is_of_the_contents_not_of_where_they_are(user_env, tmp_path):
    """A header and its includes copied elsewhere (a moved folder, a clone) keep their hash; an
    included file's contents still count."""
    here = stroll_with_an_include(user_env, tmp_path / "here")
    there = stroll_with_an_include(user_env, tmp_path / "elsewhere" / "deeper")
    assert sdk.source_hash(here) == sdk.source_hash(there)
    (there.parent / "costs.h").write_text("#define STROLL_COST 0.02\n")
    assert sdk.source_hash(here) != sdk.source_hash(there)


@pytest.fixture
def trained(user_env, tmp_path):
    """(header, run dir): a short run of stroll.h (with an include) in a folder of its own."""
    header = stroll_with_an_include(user_env, tmp_path / "project" / "envs")
    run = tmp_path / "run"
    result = jaxlab_cli("train", str(header), *SMALL, "--train.total-timesteps", "256", "--run-dir", str(run))
    assert result.returncode == 0, result.stderr
    return header, run


def test_a_resume_refused_for_a_value_of_the_headers_toml_names_that_file_not_a_flag(trained):
    """env.length set in the NAME.toml beside the header (no flag given) differs from the checkpoint's: the
    refusal names the file's line and the saved value's flag, not flags the user never gave; nothing saved
    is touched. A flag given as well is still called a flag."""
    header, run = trained
    saved = checkpoint.step_dirs(run / "checkpoints")
    beside = header.with_suffix(".toml")
    beside.write_text("[env]\nlength = 5\n")
    try:
        for command in (["train", str(header), "--resume", str(run)], ["train", "--resume", str(run)],
                        ["train", "stroll", "--env.library", str(header), "--resume", str(run)]):
            refused = jaxlab_cli(*command)
            assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
            assert f"edit or remove the env.length line of {beside}, or give --env.length 8" in refused.stderr
            assert "flags" not in refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
        both = jaxlab_cli("train", str(header), "--resume", str(run), "--env.max-steps", "9")
        assert both.returncode == 2, both.stderr
        assert (f"leave those flags out, edit or remove the env.length line of {beside}, or give --env.length 8 "
                "--env.max-steps 64") in both.stderr, both.stderr
    finally:
        beside.unlink()
    assert checkpoint.step_dirs(run / "checkpoints") == saved


def test_a_moved_header_resumes_and_evaluates_from_its_new_path(trained, tmp_path):
    """Moving the env's folder is no edit: resume from the new path takes the checkpoint; the old
    path, now missing, is reported with the way to pass the new one, and eval uses a header ENV."""
    header, run = trained
    (tmp_path / "project").rename(tmp_path / "moved")
    moved = tmp_path / "moved" / "envs" / "stroll.h"
    for command, again in ((["eval", "stroll", "--checkpoint", str(run)],
                            f"jaxlab eval path/to/stroll.h --checkpoint {run}"),
                           (["train", "stroll", "--resume", str(run)],
                            f"jaxlab train path/to/stroll.h --resume {run}")):
        missing = jaxlab_cli(*command)
        assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
        assert f"the checkpoint's env header {header} does not exist" in missing.stderr, missing.stderr
        assert again in missing.stderr and "new-env" not in missing.stderr
    resumed = jaxlab_cli("train", str(moved), "--resume", str(run), "--train.total-timesteps", "512")
    assert resumed.returncode == 0, resumed.stderr
    assert "changed" not in resumed.stderr
    config = tmp_path / "moved.toml"  # the new path given in a --config file counts too
    config.write_text(f'[env]\nlibrary = "{moved}"\n')
    again = jaxlab_cli("train", "stroll", "--resume", str(run), "--config", str(config), "--train.total-timesteps",
                       "768")
    assert again.returncode == 0 and "does not exist" not in again.stderr, again.stderr
    evaluated = jaxlab_cli("eval", str(moved), "--checkpoint", str(run), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "stroll from" in evaluated.stdout and "changed" not in evaluated.stderr


def test_an_old_policy_evaluates_on_an_edited_header_with_a_warning(trained):
    """eval plays on new envs and never loads the saved env state: an edited env plays the old
    policy, with one warning line (resume is still refused, see above)."""
    header, run = trained
    (header.parent / "costs.h").write_text("#define STROLL_COST 0.02\n")
    saved = checkpoint.step_dirs(run / "checkpoints")[0]
    damaged = saved.parent / str(int(saved.name) + 1)  # a newer, damaged checkpoint is passed over: the
    shutil.copytree(saved, damaged)                    # warning still comes once
    data = max((p for p in (damaged / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    evaluated = jaxlab_cli("eval", str(header), "--checkpoint", str(run), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr
    assert f"stroll from {saved}" in evaluated.stdout and "falling back to an older checkpoint" in evaluated.stderr
    warnings = [line for line in evaluated.stderr.splitlines() if "source changed" in line]
    assert len(warnings) == 1 and "the policy plays on the edited env" in warnings[0], evaluated.stderr
    assert "resume" not in warnings[0]


def test_a_checkpoint_hashed_with_paths_by_an_older_jaxlab_says_why_it_differs():
    from jaxlab.config import ConfigError
    from jaxlab.train.trainer import check_env_source

    now = {"library": "/a/stroll.h", "source_hash": "1" * 64, "hash_version": sdk.SOURCE_HASH_VERSION}
    assert check_env_source(dict(now), now) is None
    with pytest.raises(ConfigError, match="cannot resume: the env's source changed since the checkpoint: "
                       "it came from /a/stroll.h .source 000000000000., now from /a/stroll.h .source 111111111111. "):
        check_env_source({**now, "source_hash": "0" * 64}, now)
    with pytest.raises(ConfigError, match=r"\(the checkpoint's hash is an older jaxlab's, taken over the files' "
                       r"paths too: the env changed or moved\)"):
        check_env_source({"library": "/a/stroll.h", "source_hash": "0" * 64}, now)


def test_a_header_at_the_same_path_with_another_hash_names_the_sdk_headers_as_a_cause():
    """The source hash covers every file a header includes, jaxlab's SDK headers (core.h) too, so after a
    jaxlab upgrade that changed them a resume was refused with "it came from X.h (source a), now from
    X.h (source b)", the same path, the user having changed nothing. The refusal says that the header
    or an included file changed and that the SDK's headers count; another path gets no such note."""
    from jaxlab.config import ConfigError
    from jaxlab.train.trainer import check_env_source

    now = {"library": "/a/stroll.h", "source_hash": "1" * 64, "hash_version": sdk.SOURCE_HASH_VERSION}
    with pytest.raises(ConfigError) as err:
        check_env_source({**now, "source_hash": "0" * 64}, now)
    assert (f"now from /a/stroll.h (source 111111111111) (the header or a file it includes changed; jaxlab's SDK "
            f"headers in {sdk.include_dir()} count too, so a jaxlab upgrade that changed them reads as a change of "
            "the env); resume anyway with --resume-any-env") in str(err.value)
    with pytest.raises(ConfigError) as err:
        check_env_source({**now, "library": "/b/stroll.h", "source_hash": "0" * 64}, now)
    assert "SDK headers" not in str(err.value)


def test_a_checkpoint_hashed_by_an_older_jaxlab_resumes_while_its_header_is_where_it_was(user_env, tmp_path):
    """Before content-only hashes a checkpoint recorded the hash over the files' paths too (no
    hash_version): compared the same way, an unchanged header in its place is no change."""
    from jaxlab.train.trainer import env_source_change

    header = stroll_with_an_include(user_env, tmp_path / "envs")
    now = {"library": str(header), "source_hash": sdk.source_hash(header), "hash_version": sdk.SOURCE_HASH_VERSION}
    saved = {"library": str(header), "source_hash": sdk.legacy_source_hash(header)}
    assert saved["source_hash"] != now["source_hash"] and env_source_change(saved, now) is None
    (header.parent / "costs.h").write_text("#define STROLL_COST 0.02\n")  # an include edited since
    edited = {**now, "source_hash": sdk.source_hash(header)}
    assert "the env changed or moved" in env_source_change(saved, edited)


BROKEN_H = """
#include "core.h"
typedef struct { float episode_return; } BrokenLog;
this is not C;
"""


def test_a_header_that_does_not_compile_shows_the_compiler_and_the_command(tmp_path):
    (tmp_path / "broken.h").write_text(BROKEN_H + 'CENV_ENV(broken, Broken, BrokenLog, "x")\n')
    result = jaxlab_cli("train", str(tmp_path / "broken.h"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{tmp_path / 'broken.h'} does not compile" in result.stderr
    assert "-Werror" in result.stderr and "error:" in result.stderr  # the command and the compiler's message


def tiny_library(folder: Path, abi: int, exports_step: bool) -> Path:
    """A shared library that says ABI ``abi`` and maybe little else."""
    source = folder / "fake.c"
    source.write_text("int cenv_abi_version(void) { return %d; }\n" % abi
                      + ("long cenv_step(void *v) { (void)v; return 0; }\n" if exports_step else ""))
    library = folder / f"libfake{abi}.so"
    subprocess.run(["cc", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)
    return library


def test_a_header_that_defines_a_built_in_envs_name_is_named_not_its_cached_library(tmp_path, user_env):
    """`jaxlab train path/to/target.h` of a header whose env is named like a built-in one (a port of PufferLib's
    Target) was refused naming the library built from it deep in the cache and saying to rebuild it, which
    jaxlab does by itself: the refusal names the header."""
    header = tmp_path / "cartpole.h"
    header.write_text((user_env / "stroll.h").read_text().replace("stroll", "cartpole").replace("Stroll", "Cartpole2"))
    result = jaxlab_cli("train", str(header), "--train.total-timesteps", "256")
    assert result.returncode == 2, result.stderr
    assert (f"jaxlab train: error: env header {header} defines 'cartpole', the name of a built-in env; rename it "
            "(the first argument of CENV_ENV)\n") in result.stderr, result.stderr


def test_build_env_refuses_a_built_in_envs_name_before_writing_the_library(tmp_path, user_env):
    """`jaxlab build-env cartpole.h -o LIB.so` compiled, wrote LIB.so, then refused it: the library, which no
    command can load, was left behind."""
    header = tmp_path / "cartpole.h"
    header.write_text((user_env / "stroll.h").read_text().replace("stroll", "cartpole").replace("Stroll", "Cartpole2"))
    result = jaxlab_cli("build-env", str(header), "-o", str(tmp_path / "libclash.so"))
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"jaxlab build-env: error: env header {header} defines 'cartpole', the name of a "
                             "built-in env; rename it (the first argument of CENV_ENV)\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cartpole.h"]


@pytest.mark.parametrize("case", ["other abi", "missing symbol", "no such env", "built-in name", "no such file",
                                  "a folder", "not a library"])
def test_bad_libraries_get_one_clear_line_and_exit_2(case, tmp_path, user_env):
    if case == "other abi":
        library, expect = tiny_library(tmp_path, 2, True), "has C ABI version 2 but this jaxlab expects"
    elif case == "missing symbol":
        library, expect = tiny_library(tmp_path, jaxlab.env.library.ABI_VERSION, False), "does not export cenv_"
    elif case == "no such env":
        library, expect = sdk.cached_library(user_env / "stroll.h"), "unknown env 'strol'"
    elif case == "built-in name":
        (tmp_path / "cartpole.h").write_text((user_env / "stroll.h").read_text().replace("stroll", "cartpole")
                                             .replace("Stroll", "Cartpole2"))
        library, expect = sdk.build_library([tmp_path / "cartpole.h"], tmp_path / "libclash.so"), \
            "defines 'cartpole', the name of a built-in env; rename it"
    elif case == "a folder":  # said 'does not exist'
        library, expect = tmp_path, f"env library {tmp_path} is a folder; give an env library file (LIB.so"
    elif case == "not a library":  # said only what dlopen says
        (tmp_path / "notes.so").write_text("not a library\n")
        library, expect = tmp_path / "notes.so", "; an env library is a shared library built by `jaxlab build-env"
    else:
        library, expect = tmp_path / "nothing.so", "does not exist"
    env = "strol" if case == "no such env" else "stroll"
    result = jaxlab_cli("train", env, "--env.library", str(library), "--train.total-timesteps", "256")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and expect in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_new_env_refuses_bad_names_and_existing_files(tmp_path, user_env):
    for name, message in [("Bad-Name", "must be a lower-case C identifier"), ("int", "lower-case C identifier"),
                          ("cartpole", "is a built-in env")]:
        result = jaxlab_cli("new-env", name, str(tmp_path))
        assert result.returncode == 2 and message in result.stderr, result.stderr
    result = jaxlab_cli("new-env", "stroll", str(user_env))
    assert result.returncode == 2 and "exists already" in result.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_sdk_include_points_at_the_headers():
    result = jaxlab_cli("sdk", "--include")
    folder = Path(result.stdout.strip())
    assert result.returncode == 0 and (folder / "core.h").is_file() and folder == sdk.include_dir()
    flags = jaxlab_cli("sdk", "--cflags").stdout.split()
    assert "-Werror" in flags and f"-I{folder}" in flags


def test_an_env_library_holds_several_envs(tmp_path, user_env):
    for name in ("amble", "saunter"):
        assert jaxlab_cli("new-env", name, str(tmp_path)).returncode == 0
    result = jaxlab_cli("build-env", str(tmp_path / "amble.h"), str(tmp_path / "saunter.h"), "-o",
                        str(tmp_path / "libwalks.so"))
    assert result.returncode == 0, result.stderr
    assert list(jaxlab.env.env_types(tmp_path / "libwalks.so")) == ["amble", "saunter"]


def test_headers_that_define_the_same_helper_name_are_told_to_prefix_them(tmp_path, user_env):
    """Two headers that build alone (each with its own `Agent` type and `inside` helper) failed to build into
    one library with the compiler's redefinition errors alone, and nothing said that the headers of a library
    share one C file. The build error now ends with a line naming the clashing names and the fix."""
    stroll = (user_env / "stroll.h").read_text()
    for name in ("amble", "saunter"):
        text = stroll.replace("stroll", name).replace("Stroll", name.title()).replace("STROLL", name.upper())
        (tmp_path / f"{name}.h").write_text(text.replace('#include "draw.h"', '#include "draw.h"\n'
                                                         'typedef struct { int x; } Agent;\n'
                                                         'static int inside(int x) { return x > 0; }'))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([tmp_path / "amble.h", tmp_path / "saunter.h"], tmp_path / "libwalks.so")
    assert str(err.value).splitlines()[-1] == (
        "the headers of one library are compiled together as one C file, so a name two of them define (Agent, "
        "inside) clashes: prefix each header's own types, functions and tables with its env's name (amble_Agent, "
        "saunter_Agent), or build each header into a library of its own"), str(err.value)


def test_an_env_on_the_env_path_trains_by_name(user_env, tmp_path, monkeypatch):
    """NAME.h in a folder of $JAXLAB_ENV_PATH is found by name (jaxlab's example envs are on the path
    the same way), and the resolved config records the header."""
    from jaxlab.config import load_config

    monkeypatch.setenv("JAXLAB_ENV_PATH", str(user_env))
    config, sources = load_config("stroll")
    assert config.env_library == str(user_env / "stroll.h") and sources["env.library"] == "env path"
    with jaxlab.make("stroll", num_envs=2) as env:
        assert env.kind.library == str(sdk.cached_library(user_env / "stroll.h"))
    listing = subprocess.run([sys.executable, "-m", "jaxlab.cli", "envs"], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "JAXLAB_ENV_PATH": str(user_env),
                                               "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    assert f"stroll: {user_env / 'stroll.h'} (on the env path" in listing.stdout


def test_a_header_on_the_env_path_named_otherwise_than_its_env_says_so(user_env, tmp_path, monkeypatch):
    """wander.h on the env path whose CENV_ENV defines stroll (a copied header not renamed inside, a typo
    in the file's name) is listed by `jaxlab envs` as wander, but `jaxlab train wander` said only "unknown
    env 'wander'; envs in .../wander.h: stroll." with no fix: it names both and the three fixes."""
    (tmp_path / "wander.h").write_text((user_env / "stroll.h").read_text())
    monkeypatch.setenv("JAXLAB_ENV_PATH", str(tmp_path))
    result = jaxlab_cli("train", "wander", "--train.total-timesteps", "256")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"jaxlab train: error: unknown env 'wander': {tmp_path / 'wander.h'} defines 'stroll', not 'wander' (NAME.h "
        "is looked up for env NAME); rename the header to stroll.h, or the env to wander (the first argument of "
        f"CENV_ENV), or give its path as ENV (`jaxlab train {tmp_path / 'wander.h'}`)"], result.stderr
    with pytest.raises(ValueError, match="rename the header to stroll.h"):
        jaxlab.make("wander")


def test_resuming_with_another_envs_header_names_the_checkpoints_env(trained, tmp_path):
    """`jaxlab train other.h --resume RUN` where RUN trained stroll: it said "unknown env 'stroll'; envs in
    other.h: other" (the checkpoint's env looked up in ENV's header)."""
    _, run = trained
    assert jaxlab_cli("new-env", "other", str(tmp_path / "other")).returncode == 0
    result = jaxlab_cli("train", str(tmp_path / "other" / "other.h"), "--resume", str(run))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"--resume {run} is a run of 'stroll', not 'other'; run `jaxlab train stroll --resume {run}`" \
        in result.stderr


#: (env name, the line of stroll.h's spaces function replaced, its replacement, what the error says)
BAD_SPACES = [
    ("no_agents", "out->agents_per_env = 1;", "out->agents_per_env = 0;", "agents_per_env = 0 (at least 1)"),
    ("empty_obs", "out->obs_shape[0] = 2;", "out->obs_shape[0] = 0;", "obs_shape[0] = 0 (from 1 to"),
    ("negative_obs", "out->obs_shape[0] = 2;", "out->obs_shape[0] = -3;", "obs_shape[0] = -3 (from 1 to"),
    ("deep_obs", "out->obs_ndim = 1;", "out->obs_ndim = (int)params[0];", "obs_ndim = 8 (from 1 to CENV_MAX_OBS"),
    ("odd_dtype", "out->obs_dtype = CENV_DTYPE_FLOAT32;", "out->obs_dtype = 7;", "obs_dtype = 7 (CENV_DTYPE_FLOAT32"),
    ("odd_kind", "out->action_kind = CENV_ACTION_DISCRETE;", "out->action_kind = 9;", "action_kind = 9 (CENV_ACTION"),
    ("no_choices", "out->action_nvec[0] = 3;", "out->action_nvec[0] = 0;", "action_nvec[0] = 0 (from 1 to"),
    ("no_components", "    out->action_ndim = 1;", "    out->action_ndim = 0;",
     "action_ndim = 0 for a discrete action"),
    ("nan_bounds", "out->action_kind = CENV_ACTION_DISCRETE;",
     "out->action_kind = CENV_ACTION_CONTINUOUS; out->action_low[0] = 1; out->action_high[0] = __builtin_nanf(\"\");",
     "action bounds [1, nan] for component 0 (low <= high, neither NaN)"),
    # the struct's buffer types against the spaces: a uint8 observation written as floats overran its buffer
    ("bytes_as_floats", "out->obs_dtype = CENV_DTYPE_FLOAT32;", "out->obs_dtype = CENV_DTYPE_UINT8;",
     "obs_dtype CENV_DTYPE_UINT8 in bytes_as_floats_spaces() but its struct has float *observations: make them"),
    ("ints_as_floats", "out->action_kind = CENV_ACTION_DISCRETE;",
     "out->action_kind = CENV_ACTION_CONTINUOUS; out->action_low[0] = -1; out->action_high[0] = 1;",
     "continuous actions in ints_as_floats_spaces() but its struct has int32_t *actions: make them agree"),
    ("double_actions", "    int32_t *actions;", "    double *actions;",
     "discrete actions in double_actions_spaces() but its struct has actions of another type"),
]


def test_an_env_that_declares_impossible_spaces_is_refused_naming_the_field(user_env, tmp_path):
    """Spaces a header's spaces function gets wrong (a size of 0 or less, an unknown dtype or action kind,
    more dimensions than the limits, NaN bounds) are refused by the C layer when the env is described
    or created, naming the env, the field and its value, instead of a ZeroDivisionError or reshape
    error from deep inside jaxlab (or, past the limits, writes beyond the caller's arrays). So are spaces
    that disagree with the env struct's buffer types (float observations declared uint8 wrote 4 bytes
    per 1-byte item, past the buffer; int32 actions declared continuous read float bits as ints)."""
    stroll = (user_env / "stroll.h").read_text()
    headers = []
    for name, line, replacement, _ in BAD_SPACES:
        assert line in stroll
        camel = "".join(part.capitalize() for part in name.split("_"))
        text = stroll.replace(line, replacement).replace("STROLL", name.upper()).replace("Stroll", camel)
        (tmp_path / f"{name}.h").write_text(text.replace("stroll", name))
        headers.append(tmp_path / f"{name}.h")
    library = sdk.build_library(headers, tmp_path / "libbad.so")
    for name, _, _, expect in BAD_SPACES:
        with pytest.raises(ValueError, match="declares") as err:
            jaxlab.env.spaces_of(name, library=library)
        assert f"env '{name}' declares {expect}" in str(err.value) and f"{name}_spaces()" in str(err.value)
        with pytest.raises(ValueError, match="declares"):
            jaxlab.make(name, library=library, num_envs=2)
    result = jaxlab_cli("train", str(tmp_path / "no_agents.h"), "--train.total-timesteps", "256")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "env 'no_agents' declares agents_per_env = 0" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_an_env_returning_nan_rewards_is_named_as_the_cause_not_the_learning_rate(user_env, tmp_path):
    """NaN rewards from an env make every loss NaN in the first update; the run's error says that the
    env returned them (how many), not to lower the learning rate, which cannot help."""
    stroll = (user_env / "stroll.h").read_text()
    line = "float reward = reached ? 1.0f : -env->step_cost;"
    assert line in stroll
    header = tmp_path / "stroll.h"
    header.write_text(stroll.replace(line, "float reward = reached ? 1.0f : __builtin_nanf(\"\");"))
    result = jaxlab_cli("train", str(header), *SMALL, "--train.total-timesteps", "256",
                        "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 1, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert "became nan at update 1: env 'stroll' returned non-finite rewards (" in error, error
    assert "of 64 values) in this update's batch" in error and "learning_rate" not in error, error


def stroll_variant(user_env, tmp_path, name: str, old: str, new: str) -> Path:
    """tmp_path/NAME.h: the stroll example header with ``old`` (which it must hold) replaced by ``new``
    and the env renamed NAME."""
    stroll = (user_env / "stroll.h").read_text()
    assert old in stroll
    header = tmp_path / f"{name}.h"
    header.write_text(stroll.replace(old, new).replace("stroll", name).replace("Stroll", name.title()))
    return header


def test_a_header_whose_parameter_table_cannot_work_is_refused_naming_the_entry(user_env, tmp_path):
    """A parameter named like one of jaxlab.make's own arguments (seed) could never be set (make takes
    seed= itself), and one with a default outside its own range made every use fail with a message
    that blamed the user's value: the env's library is refused, naming the entry and the fix."""
    entry = '{"length", 8, 2, 1000, 1,'
    for name, replacement, expect in [
        ("seeded", '{"seed", 8, 2, 1000, 1,', "env 'seeded' parameter 'seed' has a name jaxlab keeps for itself"),
        ("offrange", '{"length", 1, 2, 1000, 1,', "env 'offrange' parameter length has default 1 outside its range "
                                                  "[2, 1000]: fix offrange_params[] in its header"),
    ]:
        header = stroll_variant(user_env, tmp_path, name, entry, replacement)
        result = jaxlab_cli("train", str(header), *SMALL, "--train.total-timesteps", "256")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert expect in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("entry, expect", [
    (("num cells", 8, 2, 10, True), "'num cells' is not a lower-case identifier"),
    (("mask_check", 8, 2, 10, True), "'mask_check' has a name jaxlab keeps for itself"),
    (("length", 8, 10, 2, True), "length has min 10 > max 2"),
    (("length", 8.5, 2, 10, True), "length is an integer (is_int 1) with default 8.5, min 2, max 10: all three"),
    (("cost", float("nan"), 0, 1, False), "cost has default nan outside its range [0, 1]"),
])
def test_param_table_problems(entry, expect):
    from jaxlab.env.registry import Param, param_table_problem

    params = [Param("speed", 1.0, 0.0, 2.0, False, "ok"), Param(*entry, "help")]
    assert expect in param_table_problem("walker", params)
    assert "is declared twice" in param_table_problem("walker", [params[0], params[0]])
    assert param_table_problem("walker", [params[0], Param("steps", 5, 1, 1e9, True, "x")]) is None


def test_a_statistic_named_like_a_metric_of_jaxlab_or_twice_is_refused(user_env, tmp_path):
    """A statistic named sps overwrote the SPS of every training record (the run said '1 SPS'), one
    named episodes died with a KeyError traceback, and one named twice merged two fields silently:
    the env's library is refused with one line naming the statistic and the fix."""
    header = stroll_variant(user_env, tmp_path, "speedy", '{"episode_return", "episode_length", "reached_goal"}',
                            '{"episode_return", "episode_length", "sps"}')
    result = jaxlab_cli("train", str(header), *SMALL, "--train.total-timesteps", "256")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [
        "jaxlab train: error: env 'speedy' statistic 'sps' has the name of one of jaxlab's own metrics: rename it "
        "in speedy_log_names[] in its header (one name per field of its Log struct)"], result.stderr


def test_log_names_problems_and_every_record_key_is_reserved():
    from jaxlab.config import load_config
    from jaxlab.env.registry import RESERVED_LOG_NAMES, log_names_problem
    from jaxlab.train.trainer import record_names

    assert "is named twice" in log_names_problem("walker", ("steps", "falls", "steps"))
    assert "'episodes' has the name of one of jaxlab's own metrics" in log_names_problem("walker", ("episodes",))
    assert "'bad name' is not an identifier" in log_names_problem("walker", ("bad name",))
    assert log_names_problem("walker", ("episode_return", "falls")) is None
    config, _ = load_config("cartpole", flags=["--train.reward-scale", "auto"])
    assert set(record_names(config, ())) <= set(RESERVED_LOG_NAMES)


def test_an_env_path_entry_that_is_no_folder_is_named_when_the_env_is_not_found(user_env, tmp_path, monkeypatch):
    """JAXLAB_ENV_PATH=path/to/stroll.h (the header, not its folder) found nothing, and the unknown env's
    error said nothing of why: it names the entry and gives its folder."""
    monkeypatch.setenv("JAXLAB_ENV_PATH", f"{user_env / 'stroll.h'}:{tmp_path / 'missing'}")
    with pytest.raises(ValueError) as err:
        jaxlab.env.env_type("stroll")
    assert str(err.value).startswith("unknown env 'stroll'; known envs: ")
    assert (f"Note: JAXLAB_ENV_PATH holds {user_env / 'stroll.h'}, a file: it takes folders (separated by ':'), "
            f"e.g. JAXLAB_ENV_PATH={user_env}. Note: JAXLAB_ENV_PATH holds {tmp_path / 'missing'}, which is no "
            "folder (it does not exist).") in str(err.value)
    monkeypatch.setenv("JAXLAB_ENV_PATH", str(user_env))
    assert jaxlab.env.env_type("stroll").name == "stroll"


#: stroll.h's render hook's return line (the render tests replace it)
RENDER_LINE = ('return snprintf(out, (size_t)size, "|%s|  step %d  return %+.2f", cells, env->tick, '
               'env->episode_return);')


def test_a_text_frame_longer_than_4_kib_is_rendered_whole(user_env, tmp_path):
    """VecEnv.render read a render hook's frame into a 4,096-byte buffer and cut anything longer without a
    word (a 60 x 80 grid is 4.9 KB); the hook is snprintf-style, so its return tells the frame's length
    and the frame is drawn again into a buffer that holds it."""
    header = stroll_variant(user_env, tmp_path, "tall", RENDER_LINE,
                            'return snprintf(out, (size_t)size, "|%s|%6000d|end", cells, env->tick);')
    with jaxlab.make(str(header), num_envs=2) as env:
        env.reset()
        frame = env.render(1)
    assert frame.endswith(f"{0:6000d}|end") and len(frame) == len("|@.......G|") + 6000 + len("|end"), frame[-50:]


def test_a_render_hook_that_fails_is_named_not_taken_for_a_closed_env(user_env, tmp_path):
    """A render hook returning -1 (its failure) came back as CENV_ERR_NULL, and VecEnv.render said the
    env was closed; -7 gave 'cenv render failed (-7): ' with no message. cenv_render turns a negative
    return into CENV_ERR_ENV with a message naming the env and the value."""
    header = stroll_variant(user_env, tmp_path, "shy", RENDER_LINE,
                            '(void)snprintf(out, (size_t)size, "|%s|", cells); return -1;')
    with jaxlab.make(str(header), num_envs=2) as env:
        env.reset()
        with pytest.raises(RuntimeError, match=r"cenv_render: env 'shy' render hook returned -1 for env 1, a failure "
                                               r"\(a render hook returns the frame's length, snprintf-style\)"):
            env.render(1)
        assert not env.closed


def test_statistics_added_up_with_plus_equals_count_each_episode_once(user_env, tmp_path):
    """The Log holds the sums over the agent-episodes that end in the current step, and the vectorized
    layer read it after every ending step without clearing it: a header that added its statistics with
    `+=` (as with several agents, or as PufferLib's logs do) reported every earlier episode again, so the
    mean episode_length of 3-step episodes grew 3, 6, 9, … with no error. CENV_ENV clears `log` before
    each step."""
    header = stroll_variant(user_env, tmp_path, "summing", "env->log.episode_length = (float)env->tick;",
                            "env->log.episode_length += (float)env->tick;")
    with jaxlab.make(str(header), num_envs=2, max_steps=3) as env:
        env.reset()
        infos = [env.step(np.ones(2, np.int32))[4] for _ in range(9)]  # action 1: stay, truncated at 3
    ended = [(info["episodes"], info["episode_length"]) for info in infos if info]
    assert ended == [(2, 3.0)] * 3, ended


@pytest.mark.parametrize("field, wrong, right", [
    ("rewards", "double *rewards;", "float *"),
    ("terminals", "int *terminals;", "uint8_t *"),
    ("truncations", "float *truncations;", "uint8_t *"),
])
def test_a_buffer_pointer_of_the_wrong_type_does_not_compile(user_env, tmp_path, field, wrong, right):
    """Only the observation and action pointers' types were checked: `double *rewards` (or `int
    *terminals`) compiled, trained and wrote 8 (or 4) bytes per agent into a buffer of 4 (or 1), past
    its end, with no word. CENV_ENV refuses such a struct when the header compiles, naming the field
    and its type."""
    declared = {"rewards": "float *rewards;", "terminals": "uint8_t *terminals;",
                "truncations": "uint8_t *truncations;"}[field]
    header = stroll_variant(user_env, tmp_path, "typed", declared, wrong)
    with pytest.raises(sdk.BuildError, match=rf"Typed\.{field} must be declared {re.escape(right)} \(BUILD.md"):
        sdk.build_library([header], tmp_path / "libtyped.so")


@pytest.mark.parametrize("owned", ["float *trail;", "int steps_left, *visits;", "float (*shape)(float);"])
def test_a_pointer_after_log_in_the_env_struct_does_not_compile(user_env, tmp_path, owned):
    """A pointer in the saved part of the env struct (a PufferLib env callocs its arrays in init) built and
    trained, but checkpoints saved its bytes, and a resume in a new process loaded an address that points
    nowhere there: a segmentation fault. The build refuses it, naming the member and the fix; a pointer
    before `log` (the borrowed buffers) stays fine."""
    header = stroll_variant(user_env, tmp_path, "owning", "    cenv_rng rng;", f"    {owned}\n    cenv_rng rng;")
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libowning.so")
    name = {"float *trail;": "trail", "int steps_left, *visits;": "visits", "float (*shape)(float);": "shape"}[owned]
    first = next(line for line in str(err.value).splitlines() if "error:" in line)
    fix = "store an int that selects the function" if name == "shape" else "make it an array of fixed size"
    assert f"{header}: Owning.{name} is a pointer" in first and fix in first, first


def test_a_pointer_behind_a_typedef_in_an_array_or_inside_a_member_struct_does_not_compile(user_env, tmp_path):
    """The refusal of a pointer after `log` read the struct's text and saw a `*` alone: a pointer behind a typedef
    (`fptr x;`), an array of such pointers and a pointer inside a struct or union member built and trained, and a
    resume crashed on them all the same. The build asks the compiler (the struct's debug information) and names
    each, with the member that holds it; arrays and structs of plain values (`cenv_rng rng`) still build."""
    types = "} HiddenLog;\ntypedef float *fptr;\ntypedef struct { int count; fptr cells; } Grid;\n"
    header = stroll_variant(user_env, tmp_path, "hidden", "    cenv_rng rng;",
                            "    fptr trail;\n    fptr marks[2];\n    Grid grid[3];\n"
                            "    union { int i; void *p; } u;\n    int plain[4];\n    cenv_rng rng;")
    header.write_text(header.read_text().replace("} HiddenLog;\n", types, 1))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libhidden.so")
    errors = [line for line in str(err.value).splitlines() if "error:" in line]
    expected = ["Hidden.trail is a pointer (fptr: float *)",
                "Hidden.marks[] is a pointer (fptr: float *, inside member marks: fptr[])",
                "Hidden.grid[].cells is a pointer (fptr: float *, inside member grid: Grid[])",
                "Hidden.u.p is a pointer (void *, inside member u: union {...})"]
    assert len(errors) == len(expected), errors
    for line, expect in zip(errors, expected):
        assert f"{header}: {expect}, but from `log` on" in line and "make it an array of fixed size" in line, line


def test_an_anonymous_union_after_log_builds_and_a_pointer_inside_one_is_named(user_env, tmp_path):
    """The debug-information walk read each member's name, and an anonymous union or struct member has none:
    a header with `union { int i; float f; };` after `log` (plain values, C11) crashed the build with
    KeyError: 'name'. It builds now, and a pointer inside an anonymous union is named as the env reaches it."""
    plain = stroll_variant(user_env, tmp_path, "plainunion", "    cenv_rng rng;",
                           "    union { int i; float f; };\n    struct { int u; float v; };\n    cenv_rng rng;")
    sdk.build_library([plain], tmp_path / "libplainunion.so")
    pointer = stroll_variant(user_env, tmp_path, "ptrunion", "    cenv_rng rng;",
                             "    union { int j; void *q; };\n    cenv_rng rng;")
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([pointer], tmp_path / "libptrunion.so")
    errors = [line for line in str(err.value).splitlines() if "error:" in line]
    assert len(errors) == 1 and f"{pointer}: Ptrunion.q is a pointer (void *), but from `log` on" in errors[0], errors


def test_a_pointer_after_log_of_an_env_type_named_through_a_second_typedef_does_not_compile(user_env, tmp_path):
    """The debug-information check took the struct that CENV_ENV's type names from its typedef alone: an env type
    declared as `typedef struct {...} chain_s; typedef chain_s Chain;` led to the typedef chain_s, which has no
    members, so a pointer after `log` built without a word (and a resume crashed on it)."""
    header = stroll_variant(user_env, tmp_path, "chain", "    cenv_rng rng;", "    float *trail;\n    cenv_rng rng;")
    text = header.read_text()
    assert text.count("} Chain;") == 1
    header.write_text(text.replace("} Chain;", "} chain_s;\ntypedef chain_s Chain;"))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libchain.so")
    errors = [line for line in str(err.value).splitlines() if "error:" in line]
    assert len(errors) == 1 and f"{header}: Chain.trail is a pointer (float *), but from `log` on" in errors[0], errors


@pytest.mark.parametrize("flag", ["-flto", "-gsplit-dwarf", "-fdebug-types-section"])
def test_a_pointer_after_log_is_refused_whatever_debug_information_cenv_cflags_asks_for(user_env, tmp_path,
                                                                                        monkeypatch, flag):
    """The debug-information check read the env struct from the probe object's .debug_info; with CENV_CFLAGS
    -flto (LTO sections), -gsplit-dwarf (a .dwo file, whose names readelf misreads) or -fdebug-types-section (type
    units) the struct is not there whole, so it found no pointer (nor did the text check, which it replaces): a
    `float *trail` after `log` built without a word. The probe compile leaves those flags out."""
    monkeypatch.setenv("CENV_CFLAGS", flag)
    header = stroll_variant(user_env, tmp_path, "lto", "    cenv_rng rng;", "    float *trail;\n    cenv_rng rng;")
    refusals = [line for line in sdk._generated_source([header]).splitlines() if line.startswith("_Static_assert(0")]
    assert len(refusals) == 1 and f"{header}: Lto.trail is a pointer (float *), but from `log` on" in refusals[0], \
        refusals
    if flag == "-gsplit-dwarf":
        return  # readelf shows the .dwo's entries with misread names: only leaving the flag out helps
    monkeypatch.setattr(sdk, "_DEBUG_INFO_ELSEWHERE", ())  # an env struct not in the dump: the text check reads it
    refusals = [line for line in sdk._generated_source([header]).splitlines() if line.startswith("_Static_assert(0")]
    assert len(refusals) == 1 and "trail" in refusals[0], refusals


def test_a_header_with_pufferlibs_function_names_is_told_which_definitions_cenv_env_needs(user_env, tmp_path):
    """A PufferLib Ocean header's c_reset and c_step made the compiler print a screenful about implicit
    declarations inside CENV_ENV's expansion and nothing else: a last line names the definitions CENV_ENV
    needs, those the header lacks, and what c_reset and c_step become."""
    header = stroll_variant(user_env, tmp_path, "ported", "static void stroll_reset(Stroll *env) {",
                            "static void c_reset(Stroll *env) {")
    header.write_text(header.read_text().replace("static int ported_step(Ported *env) {",
                                                 "static int c_step(Ported *env) {"))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libported.so")
    last = str(err.value).splitlines()[-1]
    assert last.startswith("CENV_ENV(ported, …) needs ported_params, ported_log_names, ported_spaces, ported_init, "
                           "ported_reset, ported_step; the header lacks ported_reset, ported_step (`jaxlab new-env"), last
    assert "c_reset and c_step are ported_reset and ported_step" in last
    assert "CENV_CFLAGS=-Wno-error" not in str(err.value)  # implicit declarations are warnings; no flag mends them


@pytest.mark.parametrize("call", ["resetting_reset(env);", "resetting_reset_agent (env, 0);"])
def test_a_step_that_resets_its_own_env_does_not_compile(user_env, tmp_path, call):
    """A PufferLib Ocean env's c_step ends by calling c_reset: ported so, the step reset the env before jaxlab
    recorded the final observation, which was then the next episode's first (a truncated episode's value
    bootstrapped from the wrong state), and jaxlab reset it again, all without a word. The build refuses a
    step that calls the env's reset or reset_agent, naming it and the fix."""
    header = stroll_variant(user_env, tmp_path, "resetting", "    return 1; /* agents whose",
                            f"    {call.replace('resetting', 'stroll')}\n    return 1; /* agents whose")
    text = header.read_text()
    if "reset_agent" in call:  # the hook it calls must exist
        header.write_text(text.replace("static int resetting_step(", "static void resetting_reset_agent(Resetting "
                                       "*env, int agent) { (void)agent; resetting_reset(env); }\n"
                                       "static int resetting_step("))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libresetting.so")
    called = call.split("(")[0].strip()
    first = next(line for line in str(err.value).splitlines() if "error:" in line)
    assert f"{header}: resetting_step calls {called}, but jaxlab resets the env itself" in first, first
    assert "return how many instead" in first


def test_a_step_that_resets_its_env_through_a_helper_does_not_compile(user_env, tmp_path):
    """The refusal above saw a call of the env's reset in the step's own body alone: a step that called a helper
    that reset (`finish(env)` -> `NAME_reset(env)`) built and trained with every final observation wrong. The
    build follows the calls through the functions the header defines and names the chain."""
    header = stroll_variant(user_env, tmp_path, "relayed", "    return 1; /* agents whose",
                            "    stroll_finish(env);\n    return 1; /* agents whose")
    header.write_text(header.read_text().replace("static int relayed_step(", "static void relayed_finish(Relayed *env) "
                                                 "{ relayed_reset(env); }\nstatic int relayed_step(", 1))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "librelayed.so")
    first = next(line for line in str(err.value).splitlines() if "error:" in line)
    assert (f"{header}: relayed_step calls relayed_reset through relayed_finish, but jaxlab resets the env "
            "itself") in first, first


def test_the_reset_check_reads_past_braces_and_slashes_in_literals(user_env, tmp_path):
    """The header is read as code without its comments: a `'}'` in the step ended the step's body there for the
    check (a reset after it was not seen), and a `"//"` in a string cut its line (a reset after it on that line
    was not seen). String and character literals are now emptied in the same pass that takes comments out."""
    for name, before in (("braced", "    char closing = '}'; (void)closing;\n"),
                         ("slashed", '    const char *url = "http://x"; (void)url; ')):
        header = stroll_variant(user_env, tmp_path, name, "    return 1; /* agents whose",
                                f"{before}{name}_reset(env);\n    return 1; /* agents whose")
        assert [f"{name}_step calls {name}_reset, but" in check for check in sdk._self_reset_checks([header])] == \
            [True], name
    quiet = stroll_variant(user_env, tmp_path, "quoted", "    return 1; /* agents whose",
                           '    const char *says = "quoted_reset(env) {"; (void)says;\n    return 1; /* agents whose')
    assert sdk._self_reset_checks([quiet]) == []


def test_check_env_stops_a_step_that_reaches_its_reset_through_a_function_pointer(user_env, tmp_path, capsys):
    """No reading of the text sees a reset called through a function pointer (or a function of another file):
    the sanitizer run watches every function the step enters (-finstrument-functions) and fails, naming the env
    and its reset, when the step reaches it."""
    header = stroll_variant(user_env, tmp_path, "pointed", "    return 1; /* agents whose",
                            "    pointed_restart(env);\n    return 1; /* agents whose")
    header.write_text(header.read_text().replace("static int pointed_step(", "static void (*const pointed_restart)"
                                                 "(Pointed *) = pointed_reset;\nstatic int pointed_step(", 1))
    code, lines, err = check_env(capsys, header, "--seeds", "1", "--steps", "30")
    output = "\n".join(lines)
    assert code == 1 and "PASS  build" in output, output + err
    assert "FAIL  sanitizers  the sanitizer run of " in output, output
    assert (f"{header}: pointed_step reached pointed_reset (through a function it calls): jaxlab resets the env "
            "itself") in output, output


def test_a_step_that_returns_nothing_is_told_to_return_the_count(user_env, tmp_path):
    """A step declared void (a PufferLib Ocean c_step is) failed with `void value not ignored as it ought to
    be`, pointing at CENV_ENV's line: a last line now says what the step must return."""
    header = stroll_variant(user_env, tmp_path, "quiet", "static int stroll_step(Stroll *env) {",
                            "static void stroll_step(Stroll *env) {")
    header.write_text(header.read_text().replace("    if (!env->terminals[0] && !env->truncations[0]) return 0;",
                                                 "    if (!env->terminals[0] && !env->truncations[0]) return;")
                      .replace("    return 1; /* agents whose episode ended in this step */", ""))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libquiet.so")
    assert str(err.value).splitlines()[-1].startswith("quiet_step must return int: the number of agents whose "
                                                      "episode ended in this step"), str(err.value)


def test_a_struct_with_log_first_is_told_the_layout_rule_not_that_its_buffers_are_pointers(user_env, tmp_path):
    """PufferLib's order (the Log first, then the buffers) breaks the layout rule, which CENV_ENV names;
    the pointer check must not add advice to make the borrowed buffers arrays."""
    header = stroll_variant(user_env, tmp_path, "first", "    StrollLog log;\n", "")
    header.write_text(header.read_text().replace("    float *observations;", "    FirstLog log;\n    float *observations;"))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libfirst.so")
    assert "First breaks the env struct layout rule" in str(err.value) and "is a pointer" not in str(err.value)


@pytest.mark.parametrize("wrong", ["int reached_goal;", "uint32_t reached_goal;",
                                   "float episode_length; int32_t reached_goal;"])
def test_a_log_field_that_is_not_a_float_does_not_compile(user_env, tmp_path, wrong):
    """CENV_ENV checked only the Log's size: an `int reached_goal` (as big as a float) compiled, and its
    bits were read as a float, a wrong statistic with no word. The build asserts that each Log field is
    a float, naming the field and the fix."""
    header = stroll_variant(user_env, tmp_path, "counted", "float episode_length;\n    float reached_goal;",
                            "float episode_length;\n    " + wrong.removeprefix("float episode_length; "))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libcounted.so")
    first = next(line for line in str(err.value).splitlines() if "error:" in line)
    assert f"{header}: CountedLog.reached_goal is not a float; declare it float" in first, str(err.value)


def test_log_fields_named_otherwise_than_their_statistics_still_build_and_count(user_env, tmp_path):
    """The Log's fields need not be named like the statistics (only their order counts), nor be declared
    one per line, nor typedef'd by tag: such a Log of floats builds and its statistic reads right."""
    header = stroll_variant(user_env, tmp_path, "renamed", "    float episode_length;\n    float reached_goal;\n} "
                            "StrollLog;", "    float length, goal;\n};\ntypedef struct renamed_log StrollLog;")
    text = header.read_text().replace("typedef struct {\n    float episode_return;\n    float length",
                                      "struct renamed_log {\n    float episode_return;\n    float length")
    header.write_text(text.replace("log.episode_length", "log.length").replace("log.reached_goal", "log.goal"))
    with jaxlab.make(str(header), num_envs=2, length=2) as env:
        env.reset()
        infos = [env.step(np.full(2, 2, np.int32))[4] for _ in range(3)]  # action 2: right, the goal 1-2 away
    assert any(info and info["reached_goal"] == 1.0 for info in infos), infos


@pytest.mark.parametrize("wrong, right, expect", [
    ("stroll_observe(env);\n    if (!env->terminals[0]",
     "stroll_observe(env);\n    if (env->tick == 3) env->observations[2] = 0.25f;\n    if (!env->terminals[0]",
     "wrote 1 float32 value (4 bytes) past the end of its observation rows (observations: 1 agent x 2 float32) "
     "in step 3: in a vector that lands in another env's rows; write only observations[0 .. 2)"),
    ("env->rewards[0] = reward;", "env->rewards[-1] = reward;",
     "wrote 1 float32 value (4 bytes) before the start of its reward rows (rewards: 1 agent float32) in step 1"),
])
def test_an_env_writing_outside_its_rows_is_named_by_the_overrun_check(user_env, tmp_path, wrong, right, expect):
    """An env that wrote past its observation rows wrote into the next env's rows (the last env's past
    the buffer), and nothing said so: not its tests, not the sanitizer build. check_overruns steps each
    env alone with guard bytes around its rows and names the env, the call, the buffer and how far."""
    header = stroll_variant(user_env, tmp_path, "spilling", wrong, right)
    with pytest.raises(jaxlab.sdk.OverrunError) as err:
        jaxlab.sdk.check_overruns(str(header))
    assert str(err.value).startswith("env 'spilling' (seed 0, alone in its vector) "), str(err.value)
    assert expect in str(err.value), str(err.value)


@pytest.mark.parametrize("wrong, right, expect", [
    ("int move = env->actions[0] - 1;",
     "if (env->actions[0] > 1) env->actions[0] = 1; /* clamped in place */\n    int move = env->actions[0] - 1;",
     "wrote into its actions (actions[0], int32 [1]) in step "),
    ("int move = env->actions[0] - 1;", "int move = env->actions[0] - 1;\n    env->actions[1] = 0;",
     "wrote 1 int32 value (4 bytes) past the end of its action rows (actions: 1 agent int32) in step 1"),
])
def test_an_env_writing_into_its_actions_is_named_by_the_overrun_check(user_env, tmp_path, wrong, right, expect):
    """The overrun check guarded only the buffers of the step's outputs: an env that clamped its action in
    place, or wrote past its action row, changed the trainer's input (in a vector, the next env's action)
    and passed. It now checks that the actions are as given after each call, with guards around them."""
    header = stroll_variant(user_env, tmp_path, "clamping", wrong, right)
    with pytest.raises(jaxlab.sdk.OverrunError) as err:
        jaxlab.sdk.check_overruns(str(header), seeds=(0,), settings=[{}])
    assert str(err.value).startswith("env 'clamping' (seed 0, alone in its vector) "), str(err.value)
    assert expect in str(err.value), str(err.value)


@pytest.mark.parametrize("wrong, right, expect", [
    ("float reward = reached ? 1.0f : -env->step_cost;",
     "float reward = env->tick == 3 ? __builtin_nanf(\"\") : reached ? 1.0f : -env->step_cost;",
     "wrote a non-finite reward (nan) for agent 0 in step 3: training stops at the first update"),
    ("stroll_observe(env);\n    if (!env->terminals[0]",
     "stroll_observe(env);\n    if (env->tick == 2) env->observations[1] = __builtin_inff();\n"
     "    if (!env->terminals[0]",
     "wrote a non-finite observation (inf) for agent 0 (observation element 1, flat) in step 2"),
])
def test_a_non_finite_reward_or_observation_fails_the_overrun_check(user_env, tmp_path, wrong, right, expect):
    """An env whose step wrote a NaN reward passed `jaxlab check-env` (every check PASS), and its first
    training update stopped on a NaN loss. The overrun check, which steps every env anyway, now names the
    first non-finite reward or float observation with the agent and the step."""
    header = stroll_variant(user_env, tmp_path, "unbounded", wrong, right)
    with pytest.raises(ValueError) as err:
        jaxlab.sdk.check_overruns(str(header), seeds=(0,), steps=10, settings=[{}])
    assert str(err.value).startswith("env 'unbounded' (seed 0, alone in its vector) "), str(err.value)
    assert expect in str(err.value), str(err.value)


def test_a_mask_row_the_reset_leaves_partly_unwritten_fails_the_overrun_check(tmp_path):
    """A mask written with the wrong row length (action_mask + agent * 4 for 5 actions) left the end of the
    last row unwritten: the zeroed or stale entries there passed the overrun check, and training failed later
    by chance ("its action mask allows no action") or learned under a wrong mask. The check now fills the mask
    with a value no env writes before the first reset and names the entries the reset left so."""
    lure = (Path(jaxlab.__file__).parent.parent / "cenv" / "envs" / "lure.h").read_text()
    line = "env->action_mask[i] = env->legal[i];"
    assert line in lure
    header = tmp_path / "fence.h"
    fenced = lure.replace(line, "if (i < n - 1) " + line)  # one action short of the row
    fenced = fenced.replace('#include "../core.h"', '#include "core.h"')
    header.write_text(fenced.replace("lure", "fence").replace("Lure", "Fence").replace("LURE", "FENCE"))
    with pytest.raises(ValueError) as err:
        jaxlab.sdk.check_overruns(str(header), seeds=(0,), steps=10, settings=[{}])
    assert str(err.value).startswith("env 'fence' (seed 0, alone in its vector) left entry 3 of agent 0's action "
                                     "mask row unwritten in its reset (action_mask: 1 agent x 4 uint8)"), str(err.value)


def test_a_write_past_the_final_observation_rows_is_named_by_the_overrun_check(user_env, monkeypatch):
    """The final observations (a buffer of their own, which the C side fills when an episode ends) had no
    guards: a write one row past them went unseen. An env header cannot reach that buffer itself (api.c
    copies the rows), so the C side's write is played here: one byte past the end after each step."""
    real_step = jaxlab.env.vecenv.VecEnv.step

    def step_writing_past_the_final_observations(vec, actions=None):
        result = real_step(vec, actions)
        final = vec.final_observations
        ctypes.memset(final.ctypes.data + final.nbytes, 0, 1)  # into the guard: no numpy view reaches it
        return result

    monkeypatch.setattr(jaxlab.env.vecenv.VecEnv, "step", step_writing_past_the_final_observations)
    with pytest.raises(jaxlab.sdk.OverrunError) as err:
        jaxlab.sdk.check_overruns(str(user_env / "stroll.h"), seeds=(0,), steps=5, settings=[{}])
    assert ("wrote 1 float32 value (1 byte) past the end of its final observation rows (final_observations: "
            "1 agent x 2 float32) in step 1") in str(err.value), str(err.value)


def test_an_overrun_only_at_a_parameters_end_of_range_is_named_with_the_value(user_env, tmp_path):
    """check_overruns stepped an env with its default parameters alone: a header that wrote past its rows
    only for the shortest corridor (length=2) passed. It now steps each parameter at both ends of its
    declared range too (parameter_extremes), and the message names the value."""
    header = stroll_variant(user_env, tmp_path, "narrow", "stroll_observe(env);\n    if (!env->terminals[0]",
                            "stroll_observe(env);\n    if (env->length == 2) env->observations[2] = 0.25f;\n"
                            "    if (!env->terminals[0]")
    jaxlab.sdk.check_overruns(str(header), seeds=(0,), steps=20, settings=[{}])  # the defaults alone pass
    assert {"length": 2} in jaxlab.sdk.parameter_extremes(str(header))
    with pytest.raises(jaxlab.sdk.OverrunError) as err:
        jaxlab.sdk.check_overruns(str(header), seeds=(0,), steps=20)
    assert str(err.value).startswith("env 'narrow' (seed 0, alone in its vector, length=2) wrote 1 float32 value "
                                     "(4 bytes) past the end of its observation rows"), str(err.value)


def test_parameter_extremes_move_one_parameter_at_a_time_and_keep_the_given_ones(user_env):
    header = str(user_env / "stroll.h")
    assert jaxlab.sdk.parameter_extremes(header, max_steps=10) == [
        {"max_steps": 10}, {"max_steps": 10, "length": 2}, {"max_steps": 10, "length": 1000},
        {"max_steps": 10, "step_cost": 0.0}, {"max_steps": 10, "step_cost": 1.0}]


#: Parameters held for the overrun check of an env: cards' test hook `fault` plants a mask bug at its ends.
HELD = {str(EXAMPLES / "cards.h"): {"fault": 0}}


@pytest.mark.parametrize("env", [*jaxlab.env.env_types(), str(EXAMPLES / "drone.h"), str(EXAMPLES / "cards.h")])
def test_the_built_in_and_example_envs_write_only_their_own_rows(env):
    jaxlab.sdk.check_overruns(env, seeds=(0,), steps=200, **HELD.get(env, {}))


def test_the_tests_new_env_writes_catch_an_env_writing_past_its_rows(user_env, tmp_path):
    """`jaxlab new-env`'s tests, what the README tells a user to run on a new header, passed for a header
    that writes one float past its observation row; they now fail, with the overrun check's message."""
    spilling = (user_env / "stroll.h").read_text().replace(
        "stroll_observe(env);\n    if (!env->terminals[0]",
        "stroll_observe(env);\n    env->observations[2] = 0.25f;\n    if (!env->terminals[0]")
    (tmp_path / "stroll.h").write_text(spilling)
    shutil.copy(user_env / "test_stroll.py", tmp_path)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_stroll.py"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    assert result.returncode == 1 and "1 failed, 4 passed" in result.stdout, result.stdout + result.stderr
    assert "OverrunError: env 'stroll' (seed 0, alone in its vector) wrote 1 float32 value (4 bytes) past the end " \
           "of its observation rows" in result.stdout, result.stdout


def test_envs_of_a_header_show_the_parameters_its_toml_gives_training_and_name_the_file(user_env, tmp_path, capsys):
    """`jaxlab envs --library X.h` showed each parameter's default (length = 8) while `jaxlab train X.h`
    trained with X.toml's (12): it shows the value training uses, the file that set it and the default."""
    from jaxlab.cli import main
    from jaxlab.config import load_config

    header = tmp_path / "stroll.h"
    shutil.copy(user_env / "stroll.h", header)
    (tmp_path / "stroll.toml").write_text("[env]\nlength = 12\n")
    assert load_config(str(header))[0].env == {"length": 12}  # what training uses
    assert main(["envs", "--library", str(header)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"  --env.length int = 12 (from {tmp_path / 'stroll.toml'}; default 8)  in [2, 1000]  cells from the " \
           "start to the goal" in lines, lines
    assert any(line.startswith("  --env.max_steps int = 64  in [1, 1e+09]") for line in lines), lines


def test_a_parameter_out_of_range_in_the_toml_beside_a_header_names_that_toml(user_env, tmp_path):
    """`jaxlab train X.h` with `length = 5000` in X.toml (range [2, 1000]) said "parameter length=5000 is
    out of range" without naming X.toml, which the user may not know is read at all: it names the file."""
    header = tmp_path / "stroll.h"
    shutil.copy(user_env / "stroll.h", header)
    (tmp_path / "stroll.toml").write_text("[env]\nlength = 5000\n")
    result = jaxlab_cli("train", str(header), *SMALL, "--train.total-timesteps", "256", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"jaxlab train: error: env 'stroll' parameter length=5000 in {tmp_path / 'stroll.toml'} is out of range: "
        "it must be in [2, 1000] (default 8); fix it there"), result.stderr
    assert not (tmp_path / "runs").exists()


def test_flags_set_only_when_an_episode_ends_are_cleared_for_the_next_step(user_env, tmp_path):
    """terminals and truncations kept their last values between steps, so a header that set a flag only
    when an episode ended (`if (reached) env->terminals[0] = 1;`, never writing 0) ended every episode
    after the first one at its first step (episode_length 1, no error), or broke the step contract with
    a count it could not explain (the trainer starts with every flag set). CENV_ENV clears an env's flags
    before each step."""
    flags = ("env->terminals[0] = (uint8_t)reached;\n"
             "    env->truncations[0] = (uint8_t)(!reached && env->tick >= env->max_steps);")
    header = stroll_variant(user_env, tmp_path, "flagging", flags,
                            "if (reached) env->terminals[0] = 1;\n"
                            "    else if (env->tick >= env->max_steps) env->truncations[0] = 1;")
    with jaxlab.make(str(header), num_envs=2, max_steps=3) as env:
        env.reset()
        env.terminals.fill(True)  # as the trainer starts a run
        steps = [env.step(np.ones(2, np.int32)) for _ in range(9)]  # action 1: stay, truncated at 3
    ended = [(info["episodes"], info["episode_length"]) for *_, info in steps if info]
    assert ended == [(2, 3.0)] * 3, ended


def test_a_mistyped_header_path_names_the_header_it_meant(user_env, tmp_path):
    """`jaxlab train strol.h` said "cannot read env header strol.h: No such file or directory" (eval the
    same, build-env "is not an env header file", jaxlab.make "does not exist") and named no fix: each
    says the header does not exist and names the closest header in its folder, or `jaxlab new-env`."""
    typo = user_env / "strol.h"
    for command in (["train", str(typo)], ["build-env", str(typo), "-o", str(tmp_path / "lib.so")],
                    ["eval", str(typo), "--checkpoint", str(tmp_path)]):
        result = jaxlab_cli(*command)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().endswith(f"env header {typo} does not exist; did you mean "
                                              f"{user_env / 'stroll.h'}?"), result.stderr
    with pytest.raises(sdk.BuildError, match=r"does not exist; create one with `jaxlab new-env NAME`"):
        jaxlab.make(str(tmp_path / "walker.h"))


def test_a_header_without_parameters_is_told_to_declare_one(user_env, tmp_path):
    """The contract asks for at least one parameter; an empty table failed to compile with GCC's
    'array subscript 0 is outside array bounds of const cenv_param[0]' pointing into the SDK's api.c.
    CENV_ENV says what is missing first."""
    stroll = (user_env / "stroll.h").read_text()
    table = re.search(r"static const cenv_param stroll_params\[\] = \{\n(.*?)\n\};", stroll, re.DOTALL)
    header = stroll_variant(user_env, tmp_path, "bare", table.group(1), "")
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libbare.so")
    first = next(line for line in str(err.value).splitlines() if "error:" in line)
    assert "bare_params must declare at least one parameter" in first, str(err.value)


def test_a_reward_written_only_when_earned_is_zero_in_the_next_step(user_env, tmp_path):
    """rewards kept their last values between steps like the flags did: a header that wrote a reward only
    when one was earned (`if (reached) env->rewards[0] = 1;`) paid that reward again at every later
    step of the next episode, with no error. CENV_ENV clears an env's rewards before each step."""
    header = stroll_variant(user_env, tmp_path, "paying", "env->rewards[0] = reward;",
                            "if (reached) env->rewards[0] = reward;")
    with jaxlab.make(str(header), num_envs=8, seed=3, length=3) as env:
        env.reset()
        going_on = 0
        for _ in range(12):  # action 2: right, the goal 2 or 3 steps away
            _, rewards, terminals, _, _ = env.step(np.full(8, 2, np.int32))
            np.testing.assert_array_equal(rewards, terminals.astype(np.float32))
            going_on += int((~terminals).sum())
    assert going_on > 0  # steps that earned nothing came after ones that did


def test_a_config_files_relative_env_library_is_taken_against_the_files_folder(user_env, tmp_path, monkeypatch):
    """`library = "envs/stroll.h"` in a --config file was taken against the current directory: the same file
    trained from its own folder and said the header does not exist from anywhere else. It is the file's folder's
    path now, wherever env.library is read (load_config, flags_library for --resume's checks), a flag's stays
    against the current directory, and the run's saved config holds it absolute, so a run trained from one
    directory resumes with the same --config from another."""
    from jaxlab.cli import main
    from jaxlab.config import config_from_toml, load_config
    from jaxlab.config.layers import flags_library

    project = tmp_path / "project"
    (project / "envs").mkdir(parents=True)
    shutil.copy(user_env / "stroll.h", project / "envs" / "stroll.h")
    conf = project / "small.toml"
    conf.write_text('[env]\nlibrary = "envs/stroll.h"\n\n[vec]\nnum_envs = 8\n\n[policy]\nhidden_size = 16\n\n'
                    '[train]\nbptt_horizon = 8\nminibatch_size = 32\ntotal_timesteps = 256\n\n'
                    '[log]\ndashboard = "none"\n')
    header = project / "envs" / "stroll.h"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "envs").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    assert load_config("stroll", config_file=conf)[0].env_library == str(header)
    assert flags_library([], conf) == str(header)
    shutil.copy(user_env / "stroll.h", elsewhere / "envs" / "stroll.h")  # a flag's relative path: the cwd's
    flag = load_config("stroll", config_file=conf, flags=["--env.library", "envs/stroll.h"])[0]
    assert flag.env_library == str(elsewhere / "envs" / "stroll.h")
    monkeypatch.chdir(tmp_path)  # a relative --config path: its folder is the file's, not the current one
    run = tmp_path / "run"
    assert main(["train", "stroll", "--config", "project/small.toml", "--run-dir", str(run)]) == 0
    assert config_from_toml((run / "config.toml").read_text()).env_library == str(header)
    monkeypatch.chdir(elsewhere)
    assert main(["train", "stroll", "--resume", str(run), "--config", str(conf),
                 "--train.total-timesteps", "512"]) == 0
    assert [p.name for p in checkpoint.step_dirs(run / "checkpoints")][0] == "8"
    project.rename(tmp_path / "moved")  # the file names the header's new place: no "does not exist"
    assert main(["train", "stroll", "--resume", str(run), "--config", str(tmp_path / "moved" / "small.toml"),
                 "--train.total-timesteps", "768"]) == 0
    assert config_from_toml((run / "config.toml").read_text()).env_library == str(tmp_path / "moved/envs/stroll.h")


def test_the_toml_beside_a_header_is_the_envs_defaults_and_names_no_key_as_doing_nothing(user_env, tmp_path, capsys):
    """A stroll.toml beside stroll.h written like configs/envs/pendulum.toml (lstm = false, hidden_size = 64:
    the LSTM's size for --policy.lstm true) warned on every run of the header 'policy.hidden_size = 64 in
    stroll.toml does nothing with policy.lstm false; remove that line', while pendulum.toml's same lines
    are quiet. The file is the env's defaults (BUILD.md: like configs/envs/NAME.toml), so it names nothing;
    the same lines in a --config file, the user's choice for this run, are still named."""
    from jaxlab.cli import main

    header = tmp_path / "stroll.h"
    shutil.copy(user_env / "stroll.h", header)
    beside = tmp_path / "stroll.toml"
    beside.write_text('[policy]\nlstm = false\nhidden_size = 64\n[train]\nanneal_lr = "none"\nmin_lr_ratio = 0.3\n')
    assert main(["config", str(header)]) == 0
    out, err = capsys.readouterr()
    assert "hidden_size = 64 " in out and "does nothing" not in err, err
    mine = tmp_path / "mine.toml"
    mine.write_text('[train]\nmin_lr_ratio = 0.5\n')
    assert main(["config", str(header), "--config", str(mine)]) == 0
    assert (f"jaxlab: warning: train.min_lr_ratio = 0.5 in {mine} does nothing with train.anneal_lr none; "
            f"remove that line from {mine}\n") in capsys.readouterr().err


def test_every_form_that_names_a_header_reads_its_toml(user_env, tmp_path, capsys):
    """The stroll.toml beside stroll.h was read by `jaxlab train stroll.h` but not by `jaxlab train stroll
    --env.library stroll.h`, nor when a --config file named the header (nor by config, sweep or bench, which
    resolve alike): the same header trained with other values. Each form reads it now, under the file and the
    flags; a NAME.toml that its env does not read (another env of a header that defines several) gets a
    warning, and eval, which plays the checkpoint's values, warns when the file now sets others."""
    from types import SimpleNamespace

    from jaxlab.cli import main
    from jaxlab.cli.common import unread_header_toml_warning
    from jaxlab.config import load_config

    header = tmp_path / "stroll.h"
    shutil.copy(user_env / "stroll.h", header)
    beside = tmp_path / "stroll.toml"
    beside.write_text("[env]\nlength = 12\n")
    conf = tmp_path / "run.toml"
    conf.write_text('[env]\nlibrary = "stroll.h"\n')
    for config, sources in (load_config(str(header)), load_config("stroll", flags=["--env.library", str(header)]),
                            load_config("stroll", config_file=conf)):
        assert config.env == {"length": 12} and sources["env.length"] == str(beside), sources
    assert load_config("stroll", config_file=conf, flags=["--env.length", "20"])[0].env == {"length": 20}
    assert main(["config", "stroll", "--env.library", str(header)]) == 0
    assert any(line.startswith("length = 12 ") and line.endswith(f"# {beside}")
               for line in capsys.readouterr().out.splitlines())

    two = tmp_path / "amble.h"  # two envs: amble.toml is amble's layer, not saunter's
    two.write_text("CENV_ENV(amble, Amble, AmbleLog, \"a\")\nCENV_ENV(saunter, Saunter, SaunterLog, \"s\")\n")
    two.with_suffix(".toml").write_text("[env]\nlength = 12\n")
    assert unread_header_toml_warning(SimpleNamespace(env_library=str(two), env_name="amble")) is None
    assert unread_header_toml_warning(SimpleNamespace(env_library=str(two), env_name="saunter")) == (
        f"warning: {tmp_path / 'amble.toml'} is not read for env 'saunter': the NAME.toml beside a header is the "
        f"config layer of the env `jaxlab train {two}` trains (env 'amble'); give saunter's values in a --config file")

    run = tmp_path / "run"
    assert main(["train", str(header), *SMALL, "--train.total-timesteps", "128", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["eval", str(header), "--checkpoint", str(run), "--episodes", "1"]) == 0
    assert "stroll.toml" not in capsys.readouterr().err  # the values it trained with
    beside.write_text("[env]\nlength = 10\n")
    assert main(["eval", str(header), "--checkpoint", str(run), "--episodes", "1"]) == 0
    assert (f"jaxlab: warning: {beside} sets env.length = 10 (played: 12): eval plays the env parameters the "
            "checkpoint was trained with, not the file's; to play the file's, pass --env.length 10"
            ) in capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("call", ["rand() % 2", "(int)(random() % 2)"])
def test_a_header_calling_libcs_shared_random_functions_is_refused_naming_the_envs_own_stream(user_env, tmp_path,
                                                                                             call):
    """rand() compiled and trained: every env and thread drew from libc's one hidden state, so the env
    ignored its seed, differed between thread counts and resumed from a checkpoint otherwise, with no
    word. The build refuses a header that calls one of libc's shared random functions, naming the fix."""
    header = stroll_variant(user_env, tmp_path, "dicey", "cenv_rng_below(&env->rng, 2)", call)
    header.write_text(header.read_text().replace('#include "core.h"', '#include "core.h"\n#include <stdlib.h>', 1))
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libdicey.so")
    assert "_is_refused_in_env_headers_use_cenv_rng" in str(err.value), str(err.value)
    assert sdk.SHARED_RANDOM_HINT in str(err.value).splitlines()[-2:]
    assert "cenv_rng_below(&env->rng, n)" in sdk.SHARED_RANDOM_HINT


def test_a_variable_named_like_a_libc_random_function_still_builds(user_env, tmp_path):
    """The refusal of rand() and random() is of calls: a variable named `random` is no call of libc's."""
    header = stroll_variant(user_env, tmp_path, "named", "env->position = cenv_rng_below(&env->rng, 2);",
                            "int random = cenv_rng_below(&env->rng, 2);\n    env->position = random;")
    assert sdk.build_library([header], tmp_path / "libnamed.so").is_file()


def test_a_header_calling_a_function_of_an_unlinked_library_names_the_function_and_the_fix(user_env, tmp_path):
    """A header that calls a graphics library's function (declared by its header, here by hand) compiles
    and links (a shared library may leave symbols undefined), then failed to load with 'an env library is
    a shared library built by `jaxlab build-env HEADER.h -o LIB.so`', which it was. The message names the
    function and says an env may use libc, libm and pthreads alone."""
    header = stroll_variant(user_env, tmp_path, "windowed", "static void stroll_init(", "void InitWindow(int w, int h, "
                            "const char *title);\nstatic void stroll_init(")
    header.write_text(header.read_text().replace("env->length = (int)params[0];",
                                                 "env->length = (int)params[0];\n    if (env->length < 0) "
                                                 "InitWindow(1, 1, \"x\");", 1))
    with pytest.raises(jaxlab.env.library.LibraryError) as err:
        jaxlab.make(str(header))
    message = str(err.value)
    assert "its env calls InitWindow, which no library jaxlab links provides (libc, libm and pthreads alone)" in message
    assert "build-env HEADER.h -o LIB.so" not in message
    result = jaxlab_cli("envs", "--library", str(header))
    assert result.returncode == 2 and "its env calls InitWindow" in result.stderr, result.stderr


def test_a_header_that_only_warns_is_told_that_jaxlab_makes_warnings_errors_and_how_to_build_anyway(user_env,
                                                                                                   tmp_path):
    """A header with an unused variable failed with the compiler's 'all warnings being treated as errors'
    and nothing from jaxlab: the user saw no error of theirs and no word of the -Werror jaxlab adds. The
    BuildError ends with a line saying so, with the fix and CENV_CFLAGS=-Wno-error; CENV_CFLAGS=-Wno-error
    then builds it."""
    header = stroll_variant(user_env, tmp_path, "loose", "env->length = (int)params[0];",
                            "int unused_count;\n    env->length = (int)params[0];")
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libloose.so")
    assert "unused" in str(err.value) and str(err.value).splitlines()[-1] == sdk.WARNING_AS_ERROR_HINT
    assert "CENV_CFLAGS=-Wno-error" in sdk.WARNING_AS_ERROR_HINT
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CENV_CFLAGS", "-Wno-error")
        assert sdk.build_library([header], tmp_path / "libloose.so").is_file()


def test_an_integer_parameter_beyond_a_c_int_is_refused_even_when_its_range_allows_it(user_env, tmp_path):
    """An integer parameter declared up to INFINITY took max_steps=2**40: the env's `(int)params[1]` is
    undefined beyond a C int and gave INT_MIN here, so every episode was truncated at its first step with
    no word. A value of an integer parameter outside a C int's range is refused, naming the range."""
    header = stroll_variant(user_env, tmp_path, "endless", '{"max_steps", 64, 1, 1e9, 1,',
                            '{"max_steps", 64, 1, 1e300, 1,')
    with pytest.raises(ValueError, match=r"endless' parameter max_steps=1099511627776 is out of range: it must be in "
                                         r"\[1, 2147483647\] \(default 64; an integer parameter is a C int\)"):
        jaxlab.make(str(header), max_steps=2**40)
    with jaxlab.make(str(header), num_envs=1, max_steps=2**31 - 1) as env:  # the largest C int works
        env.reset()
        assert not env.step(np.ones(1, np.int32))[3].any()
    result = jaxlab_cli("train", str(header), "--env.max-steps", str(2**40), "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and "an integer parameter is a C int" in result.stderr, result.stderr


def test_spaces_that_a_parameter_makes_impossible_name_the_parameter_values(user_env, tmp_path):
    """A spaces function whose agent count is a parameter (agents_per_env = (int)params[0]) with a range
    that lets it be 0 was refused 'with the parameters given', which did not say which values those
    were; the message now lists them, so the parameter at fault (and the range to fix) shows."""
    header = stroll_variant(user_env, tmp_path, "crowd", "out->agents_per_env = 1;",
                            "out->agents_per_env = (int)params[0] - 2;")
    expect = "crowd_spaces() with the parameters given (length=2, max_steps=64, step_cost=0.01); fix that"
    with pytest.raises(ValueError) as err:
        jaxlab.env.spaces_of("crowd", library=str(header), length=2)
    assert "declares agents_per_env = 0 (at least 1) in " + expect in str(err.value), str(err.value)
    with pytest.raises(ValueError) as err:
        jaxlab.make(str(header), length=2)
    assert expect in str(err.value), str(err.value)


def test_spaces_of_takes_a_header_path_as_make_does(user_env, tmp_path):
    """jaxlab.make("path/NAME.h") creates the header's env, but jaxlab.env.spaces_of("path/NAME.h")
    said "unknown env '/…/NAME.h'; known envs: cartpole, …" of a header that was there. Both now resolve
    a header path the same way (registry.name_and_library)."""
    header = stroll_variant(user_env, tmp_path, "pair", "out->agents_per_env = 1;", "out->agents_per_env = 2;")
    spaces = jaxlab.env.spaces_of(str(header), length=3)
    assert spaces.agents_per_env == 2 and spaces.action_space.n == 3
    with jaxlab.make(str(header), num_envs=1, length=3) as env:
        assert env.num_agents == spaces.agents_per_env and env.name == "pair"


def test_a_misspelt_cenv_env_option_is_named_with_the_options(user_env, tmp_path):
    """CENV_ENV(..., agent_wait) (for agents_wait) failed with GCC's "expected ',' or '}' before
    'CENV__MASK_agent_wait'" from inside core.h and a screen of errors that follow from it. The
    BuildError ends with a line naming the word and the options CENV_ENV takes (read from core.h)."""
    header = stroll_variant(user_env, tmp_path, "typo", "render,\n         pixels)", "render, agent_wait)")
    with pytest.raises(sdk.BuildError) as err:
        sdk.build_library([header], tmp_path / "libtypo.so")
    last = str(err.value).splitlines()[-1]
    assert last.startswith("CENV_ENV has no option 'agent_wait': its options are mask, "), last
    assert {"agents_wait", "reset_agent", "error", "pixels"} <= set(sdk.cenv_env_options())
    assert sdk.WARNING_AS_ERROR_HINT not in str(err.value)  # its warnings follow from the error


def test_an_overrun_in_the_reset_agent_hook_names_the_hook_with_the_step(tmp_path):
    """A reset_agent hook that wrote past its rows was reported 'in step 2' alone, so the user looked for
    it in the step function, which was right; the hook runs in the same C call when agents end. The
    message names the hook with the step when agents ended in it."""
    import agent_ends
    text = agent_ends.header("relay_respawn").replace(
        "    env->alive[a] = 1;\n",
        "    env->alive[a] = 1;\n    if (env->finished[a] > 0) env->rewards[env->agents] = 0.5f; /* past */\n")
    (tmp_path / "relay_respawn.h").write_text(text)
    with pytest.raises(jaxlab.sdk.OverrunError) as err:
        jaxlab.sdk.check_overruns(str(tmp_path / "relay_respawn.h"), seeds=(0,), steps=10)
    message = str(err.value)
    assert "past the end of its reward rows" in message, message
    assert ("in step 2 (its step, or its reset_agent hook, which ran in the same step for the agents that "
            "ended)") in message, message


def check_env(capsys, *args) -> tuple[int, list[str], str]:
    """`jaxlab check-env ARGS` in this process: (exit status, its stdout lines, its stderr)."""
    from jaxlab.cli import main

    code = main(["check-env", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


QUICK = ["--seeds", "1", "--steps", "30", "--no-sanitize"]


def test_check_env_passes_a_good_header_with_a_line_per_check(user_env, capsys):
    """There was no `jaxlab` command for the SDK's checks (the overrun check was Python alone): check-env
    builds the header, checks its registry and runs check_overruns, a PASS line each."""
    code, lines, err = check_env(capsys, user_env / "stroll.h", *QUICK)
    assert code == 0, lines + [err]
    assert [line.split()[:2] for line in lines[:4]] == [["PASS", "build"], ["PASS", "registry"],
                                                       ["PASS", "overruns"], ["SKIP", "sanitizers"]], lines
    assert lines[-1] == f"check-env {user_env / 'stroll.h'}: every check passed"


@pytest.mark.parametrize("name, old, new, failed, expect", [
    ("clamping", "int move = env->actions[0] - 1;",
     "if (env->actions[0] > 1) env->actions[0] = 1;\n    int move = env->actions[0] - 1;",
     "overruns", "env 'clamping' (seed 0, alone in its vector) wrote into its actions (actions[0], int32 [1])"),
    ("narrow", "stroll_observe(env);\n    if (!env->terminals[0]",
     "stroll_observe(env);\n    if (env->length == 2) env->observations[2] = 0.25f;\n    if (!env->terminals[0]",
     "overruns", "env 'narrow' (seed 0, alone in its vector, length=2) wrote 1 float32 value (4 bytes) past the end"),
    ("dicey", "cenv_rng_below(&env->rng, 2)", "rand() % 2", "build", "_is_refused_in_env_headers_use_cenv_rng"),
    ("counted", "float reached_goal;", "int reached_goal;", "build", "CountedLog.reached_goal is not a float"),
])
def test_check_env_fails_a_broken_header_naming_the_check_and_exits_1(user_env, tmp_path, capsys, name, old, new,
                                                                      failed, expect):
    header = stroll_variant(user_env, tmp_path, name, old, new)
    if name == "dicey":
        header.write_text(header.read_text().replace('#include "core.h"', '#include "core.h"\n#include <stdlib.h>', 1))
    code, lines, err = check_env(capsys, header, *QUICK)
    output = "\n".join(lines)
    assert code == 1 and err == "", output + err
    assert f"FAIL  {failed:<10}  " in output and expect in output, output
    if failed == "build":
        assert "SKIP  registry    (not run: the build check failed)" in output, output
    assert lines[-1] == f"check-env {header}: 1 of 4 checks failed", output


def test_check_env_names_the_parameter_end_an_env_failed_at_and_the_param_that_holds_it(capsys):
    """The shipped cards.h failed check-env with 'env 'cards' failed while checked (not an overrun): ... its
    action mask allows no action', a failure of its test hook `fault` at the high end of its range that the
    line did not name, so it read as a bug of cards' defaults. The line names the setting and the --param
    that holds it; with it held, cards passes."""
    code, lines, err = check_env(capsys, EXAMPLES / "cards.h", *QUICK)
    output = "\n".join(lines)
    assert code == 1 and err == "", output + err
    assert ("FAIL  overruns    env 'cards' failed while checked with fault=2, an end of its range (not an overrun): "
            "env 'cards' #0 agent 0 (row 0) at step 0: its action mask allows no action") in output, output
    assert "or hold it with --param fault=0" in output, output
    code, lines, err = check_env(capsys, EXAMPLES / "cards.h", *QUICK, "--param", "fault=0")
    assert code == 0 and "PASS  overruns" in "\n".join(lines), lines + [err]


def test_check_env_leaves_out_a_range_end_whose_observation_is_too_large_and_names_it(user_env, tmp_path, capsys,
                                                                                       monkeypatch):
    """An int parameter that sizes the observation, declared up to 1e9 (a header's 'no limit'), made the overrun
    check build that env at the high end: a MemoryError traceback (or the machine out of memory) instead of a
    line. A range end whose one env's observation rows pass overrun.MAX_OBSERVATION_BYTES (here made small,
    so that a 10,000-wide observation passes it) is left out and named on the PASS line; --param checks a value
    of one's choice."""
    from jaxlab.env import overrun
    from jaxlab.env.registry import observation_bytes

    header = stroll_variant(user_env, tmp_path, "wide", '"reward lost per step that does not reach the goal"},',
                            '"reward lost per step that does not reach the goal"},\n'
                            '    {"width", 2, 2, 10000, 1, "observation size"},')
    header.write_text(header.read_text().replace("    (void)params;\n", "", 1)
                      .replace("out->obs_shape[0] = 2;", "out->obs_shape[0] = (int)params[3];", 1))
    assert observation_bytes(str(header), width=10000) == 40000  # 1 agent x 10,000 float32
    monkeypatch.setattr(overrun, "MAX_OBSERVATION_BYTES", 4096, raising=False)
    code, lines, err = check_env(capsys, header, *QUICK)
    assert code == 0, lines + [err]
    assert lines[2].startswith("PASS  overruns    ") and lines[3].strip() == (
        "not stepped with width=10000 (its observation rows would take 39.1 KiB): too large to check; "
        "--param NAME=VALUE checks a value of your choice"), lines
    code, lines, err = check_env(capsys, header, *QUICK, "--param", "width=1000")
    assert code == 0 and lines[2].startswith("PASS  overruns") and lines[3].startswith("SKIP  sanitizers"), lines
    header.write_text(header.read_text().replace("= (int)params[3];", "= 10000 - (int)params[3];", 1))
    code, lines, err = check_env(capsys, header, *QUICK)  # spaces it cannot describe at an end: stepped, named
    assert code == 1 and lines[2].startswith("FAIL  overruns    env 'wide' failed while checked with width=10000, "
                                             "an end of its range (not an overrun): cannot create env 'wide'"), lines


def test_check_env_runs_the_header_under_the_sanitizers(user_env, tmp_path, capsys):
    """A signed overflow passes the release build and the overrun check (it wraps); the sanitizer check
    steps the header with the SDK's C driver under UBSan, which stops at it."""
    header = stroll_variant(user_env, tmp_path, "wrapping", "env->tick += 1;",
                            "env->tick += 1;\n    env->episode_return += 0.0f * (float)(env->tick + 2147483647);")
    code, lines, err = check_env(capsys, header, "--seeds", "1", "--steps", "30")
    output = "\n".join(lines)
    assert code == 1, output + err
    assert "PASS  overruns" in output and "FAIL  sanitizers  the sanitizer run of " in output, output
    assert "runtime error: signed integer overflow" in output, output
    code, lines, err = check_env(capsys, user_env / "stroll.h", "--seeds", "1", "--steps", "30")
    assert code == 0 and "PASS  sanitizers" in "\n".join(lines), lines + [err]


def test_check_env_runs_the_sanitizer_build_at_each_parameters_range_ends_and_names_the_one_that_fails(
        user_env, tmp_path, capsys):
    """The overrun check stepped each parameter at both ends of its range but the sanitizer run used the defaults
    alone: undefined behaviour only at an end (here a signed overflow with length=1000, which the release build
    wraps) passed every check. The sanitizer build runs at the same settings and names the one that failed."""
    header = stroll_variant(user_env, tmp_path, "edgy", "env->tick += 1;",
                            "env->tick += 1;\n    if (env->length == 1000) env->episode_return += "
                            "0.0f * (float)(env->tick + 2147483647);")
    code, lines, err = check_env(capsys, header, "--seeds", "1", "--steps", "30")
    output = "\n".join(lines)
    assert code == 1 and "PASS  overruns" in output, output + err
    assert f"FAIL  sanitizers  the sanitizer run of {header} with length=1000 failed (exit 1):" in output, output
    assert "runtime error: signed integer overflow" in output, output


def test_check_env_fails_an_env_that_crashes_or_hangs_in_init_at_a_range_end_naming_the_value(user_env, tmp_path,
                                                                                            capsys, monkeypatch):
    """An int parameter declared up to 1e9 that sizes a loop in init (marks cells of a fixed array, or counts) made
    the overrun check, which creates the env at each range end in check-env's own process, crash it with a
    segmentation fault or hang it for ever. Each setting is checked in a forked process with a time and memory
    limit: the FAIL line names the parameter and value, and the --param that holds it."""
    from jaxlab.cli import sdk as cli_sdk

    header = stroll_variant(user_env, tmp_path, "marking", '"reward lost per step that does not reach the goal"},',
                            '"reward lost per step that does not reach the goal"},\n'
                            '    {"cells", 4, 1, 1e9, 1, "cells marked at init"},\n'
                            '    {"rounds", 1, 1, 1e9, 1, "rounds of warm-up at init"},')
    header.write_text(header.read_text().replace("    cenv_rng rng;", "    int marks[16];\n    cenv_rng rng;", 1)
                      .replace("    env->step_cost = (float)params[2];\n",
                               "    env->step_cost = (float)params[2];\n"
                               "    volatile int *marks = env->marks;\n"
                               "    for (long i = 0; i < (long)params[3]; i++) marks[i] = 1;\n"
                               "    for (volatile long i = 0; i < (long)params[4] * 1000000000L; i++) {}\n", 1))
    code, lines, err = check_env(capsys, header, *QUICK)
    output = "\n".join(lines)
    assert code == 1 and "PASS  registry" in output, output + err
    assert ("FAIL  overruns    env 'marking' failed while checked with cells=1000000000, an end of its range (not "
            "an overrun): its process crashed (signal SIGSEGV;") in output, output
    assert "or hold it with --param cells=4" in output, output
    monkeypatch.setattr(cli_sdk, "OVERRUN_SETTING_TIMEOUT_S", 3.0)
    code, lines, err = check_env(capsys, header, *QUICK, "--param", "cells=4")
    output = "\n".join(lines)
    assert code == 1, output + err
    assert ("FAIL  overruns    env 'marking' failed while checked with rounds=1000000000, an end of its range (not "
            "an overrun): it did not finish within 3 s and was stopped") in output, output
    assert "or hold it with --param rounds=1" in output, output


@pytest.mark.parametrize("args, expect", [
    (["{dir}/strol.h"], "env header {dir}/strol.h does not exist; did you mean {dir}/stroll.h?"),
    (["{dir}/test_stroll.py"], "{dir}/test_stroll.py is not an env header file (NAME.h)"),
    (["{tmp}/plain.h"], "{tmp}/plain.h defines no env: an env header ends with CENV_ENV("),
    (["{dir}/stroll.h", "--param", "length"], "--param 'length' is not NAME=VALUE; e.g. --param length=4"),
    (["{dir}/stroll.h", "--param", "lenth=3"], "--param: env 'stroll' has no parameter 'lenth'"),
    (["{dir}/stroll.h", "--steps", "0"], "--steps 0 must be at least 1"),
])
def test_check_env_refuses_bad_input_with_one_line_and_exit_2(user_env, tmp_path, capsys, args, expect):
    (tmp_path / "plain.h").write_text("/* no env here */\n")
    code, _, err = check_env(capsys, *[a.format(dir=user_env, tmp=tmp_path) for a in args], "--no-sanitize")
    assert code == 2, err
    assert err.startswith(f"jaxlab check-env: error: {expect.format(dir=user_env, tmp=tmp_path)}"), err
    assert err.count("\n") == 1, err


def coming_from_pufferlib_headers() -> tuple[str, str]:
    """The PufferLib-style header and its jaxlab port, read from the ```diff block of BUILD.md's "Coming from
    PufferLib": the lines without `+`, and the lines without `-` (each without its first column)."""
    build = (Path(__file__).parent.parent / "BUILD.md").read_text()
    section = build.split("\n## Coming from PufferLib\n", 1)[1].split("\n## ", 1)[0]
    lines = section.split("```diff\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert all(line[:1] in (" ", "-", "+", "") for line in lines), "a line of the diff without its mark"
    before = "\n".join(line[1:] for line in lines if line[:1] in (" ", "-", ""))
    after = "\n".join(line[1:] for line in lines if line[:1] in (" ", "+", ""))
    return before + "\n", after + "\n"


def test_the_coming_from_pufferlib_port_in_build_md_builds_steps_and_logs_its_statistics(tmp_path):
    """BUILD.md's worked port stays true: its original is a PufferLib Ocean header (a Log with n, c_reset,
    c_step, rand()) that jaxlab cannot build, and its port builds, writes only its own rows, and logs the
    statistics the original logged, summed per ending episode."""
    before, after = coming_from_pufferlib_headers()
    assert "float n;" in before and "void c_step(Seek* env)" in before and "rand() %" in before
    (tmp_path / "pufferlib").mkdir()
    (tmp_path / "pufferlib" / "seek.h").write_text(before)
    with pytest.raises(sdk.BuildError, match="defines no env") as err:
        sdk.build_library([tmp_path / "pufferlib" / "seek.h"], tmp_path / "libpuffer.so")
    # the refusal of a header without CENV_ENV points a PufferLib header (its c_step) here
    assert str(err.value).endswith('(a PufferLib Ocean header, with c_reset and c_step: BUILD.md, "Coming from '
                                   'PufferLib", maps it step by step)'), str(err.value)
    header = tmp_path / "seek.h"
    header.write_text(after)
    jaxlab.sdk.check_overruns(str(header))
    with jaxlab.make(str(header), num_envs=4, size=5) as env:
        env.reset(seed=0)
        infos = [env.step(np.full(4, 2, np.int32))[4] for _ in range(10)]  # always right: goal or the edge
    ended = [info for info in infos if info]
    assert ended and set(ended[0]) == {"episodes", "perf", "score", "episode_return", "episode_length"}
    for info in ended:
        assert info["perf"] == info["score"] and info["episode_return"] == pytest.approx(2 * info["perf"] - 1)


def test_a_ctrl_c_while_check_env_waits_for_a_setting_kills_its_process():
    """check-env's overrun check waits for each setting's forked process; a Ctrl-C there ended check-env at once
    (os._exit after 'interrupted', no atexit clean-up) and left the child running on its own: an env hung in its
    init at a range end (which ignores the Ctrl-C in its C loop) spun on a core for ever. The child is killed
    and reaped before the KeyboardInterrupt goes on."""
    import multiprocessing
    import signal
    import time

    from jaxlab.cli import sdk as cli_sdk

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)  # the Ctrl-C, while _isolated waits for the child
    try:
        with pytest.raises(KeyboardInterrupt):
            cli_sdk._isolated(lambda: time.sleep(600), 600, 1 << 30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    left = multiprocessing.active_children()
    for child in left:
        child.kill()
        child.join()
    assert left == []


def test_check_env_killed_while_a_setting_runs_takes_its_process_with_it(tmp_path):
    """A check-env ended by SIGTERM or kill -9 (a CI job's time limit) while a setting's forked process ran left that
    process behind: an env hung in its init at a range end spun on a core for ever, as nothing else stops it. The
    child asks Linux to kill it when its parent ends (PR_SET_PDEATHSIG)."""
    pid_file = tmp_path / "child.pid"
    script = (f"import os, time\nfrom jaxlab.cli import sdk\n"
              f"def hang():\n    open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n    time.sleep(600)\n"
              f"sdk._isolated(hang, 600, 1 << 30)\n")
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        while not pid_file.exists() or not pid_file.read_text():  # the child has started
            assert parent.poll() is None, parent.returncode
            time.sleep(0.1)
        child = int(pid_file.read_text())
    finally:
        parent.kill()
        parent.wait()
    for _ in range(100):  # Linux sends the child its signal as the parent ends; let it be delivered and reaped
        if not _running(child):
            break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child of a killed check-env is still running")


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie, ended but not reaped, has)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False

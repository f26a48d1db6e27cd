"""Shared test helpers."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxlab
from jaxlab.env import env_types

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("cenv_build", ROOT / "cenv" / "build.py")
cenv_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cenv_build)

# JAX's persistent compilation cache (on by default) goes to a folder of this test session, which its
# subprocesses inherit: the suite neither reads nor fills the user's cache.
if "JAXLAB_CACHE_DIR" not in os.environ:
    import atexit
    import tempfile

    os.environ["JAXLAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxlab-test-cache-")
    atexit.register(shutil.rmtree, os.environ["JAXLAB_CACHE_DIR"], True)

# Every registered env, in registry order: a new env is picked up by the tests that use this.
ENV_NAMES = tuple(env_types())


def random_actions(env, rng: np.random.Generator) -> np.ndarray:
    """Uniform random actions for every agent of ``env``: ``env.action_space.sample`` for an env without
    a mask, else a uniform choice among each agent's legal actions (per component), so that strict
    mask checking accepts them."""
    if env.action_mask is None:
        return env.action_space.sample(rng, env.num_agents)
    nvec = getattr(env.action_space, "nvec", None) or (env.action_space.n,)
    noise = np.where(env.action_mask, rng.random(env.action_mask.shape), -1.0)
    bounds = np.cumsum(nvec)[:-1]
    actions = np.stack([part.argmax(axis=1) for part in np.split(noise, bounds, axis=1)], axis=1)
    return actions.astype(np.int32).reshape(env.actions.shape)


def rollout(name: str, steps: int, num_envs: int = 8, seed: int = 0, num_threads: int = 1,
            action_seed: int = 0, **params):
    """Steps ``name`` with seeded random (legal) actions; returns stacked copies of every output and the
    infos."""
    rng = np.random.default_rng(action_seed)
    with jaxlab.make(name, num_envs=num_envs, seed=seed, num_threads=num_threads, **params) as env:
        record = {"obs": [env.reset().copy()], "rewards": [], "terminals": [], "truncations": []}
        infos = []
        for _ in range(steps):
            obs, rewards, terminals, truncations, info = env.step(random_actions(env, rng))
            record["obs"].append(obs.copy())
            record["rewards"].append(rewards.copy())
            record["terminals"].append(terminals.copy())
            record["truncations"].append(truncations.copy())
            infos.append(info)
    return {k: np.stack(v) for k, v in record.items()}, infos


def compile_cenv_with(directory: Path, headers: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    """Compiles cenv/api.c into ``directory``/libcenv.so with a registry of only ``headers``
    ({env name: text of cenv/envs/<name>.h}, each defining ``<name>_spec``), using cenv/build.py's
    compile_command. Returns the compiler's result (check returncode, stderr) and the library path."""
    source = directory / "cenv"
    (source / "envs").mkdir(parents=True)
    for name in ("api.c", "api.h", "core.h", "rng.h"):
        shutil.copy(ROOT / "cenv" / name, source / name)
    for name, text in headers.items():
        (source / "envs" / f"{name}.h").write_text(text)
    includes = "".join(f'#include "envs/{name}.h"\n' for name in headers)
    specs = ", ".join(f"&{name}_spec" for name in headers)
    (source / "registry.h").write_text(f"{includes}#define CENV_REGISTRY {{{specs}}}\n")
    library = directory / "libcenv.so"
    cmd = cenv_build.compile_command(library, sources=[source / "api.c"])
    return subprocess.run(cmd, capture_output=True, text=True), library


def run_with_library(library: Path, code: str, timeout: float = 120) -> object:
    """Runs ``code`` in a fresh Python whose jaxlab loads ``library`` ($JAXLAB_CENV_LIB); the code
    prints one JSON value on its last line, which is returned."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, "JAXLAB_CENV_LIB": str(library)})
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def no_xla_memory_env(monkeypatch):
    """None of XLA's GPU memory variables is set during the test, and whatever jaxlab sets of them is
    undone after it (monkeypatch puts back only what it recorded, so each is recorded first)."""
    for var in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE",
                "XLA_PYTHON_CLIENT_ALLOCATOR"):
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    return monkeypatch

"""vec.num_threads = "auto": the cores JAX does not need, with enough agents per thread."""

import subprocess
import sys

import pytest

from jaxlab.config import ConfigError, derive_sizes, load_config
from jaxlab.config.threads import MIN_AGENTS_PER_THREAD, auto_threads


@pytest.mark.parametrize("envs, agents_per_env, groups, cores, on_cpu, expected", [
    (64, 1, 1, 2, True, 1),          # cartpole's defaults: 64 agents are too few for a second thread
    (4096, 1, 1, 8, True, 4),        # 4,096 agents: 4 threads of 1,024 although 8 cores are free
    (16384, 1, 1, 8, True, 8),       # one group: the C step may take every core (XLA waits)
    (16384, 1, 2, 8, True, 4),       # groups overlap on the CPU: half the cores stay with XLA
    (16384, 1, 2, 8, False, 8),      # on a GPU the overlap needs no CPU cores for XLA
    (2, 4096, 1, 16, False, 2),      # never more threads than envs
    (100_000, 1, 1, 128, False, 64),  # never more than MAX_CHUNKS
    (24, 64, 1, 1, True, 1),         # one core: one thread
])
def test_auto_threads_by_value(envs, agents_per_env, groups, cores, on_cpu, expected):
    threads, why = auto_threads(envs, agents_per_env, groups, cores, on_cpu, max_chunks=64)
    assert threads == expected
    assert (f"{cores} usable cores" if cores > 1 else "1 usable core;") in why
    assert f"{envs * agents_per_env:,} agents per group" in why
    assert ("half left to XLA" in why) == (groups > 1 and on_cpu)
    assert MIN_AGENTS_PER_THREAD == 1024


def test_auto_is_the_default_and_an_integer_is_kept():
    config, sources = load_config("cartpole")
    assert config.vec.num_threads == "auto" and sources["vec.num_threads"] == "configs/default.toml"
    sizes = derive_sizes(config, 1)
    assert sizes.num_threads == 1 and "64 agents per group" in sizes.threads_reason
    config, _ = load_config("cartpole", flags=["--vec.num-threads", "3"])
    sizes = derive_sizes(config, 1)
    assert (sizes.num_threads, sizes.threads_reason) == (3, "set")


def test_a_word_other_than_auto_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r'^vec.num_threads="many" is neither auto nor an integer; write auto or '
                                          r"e.g. 2$"):
        load_config("cartpole", flags=["--vec.num-threads", "many"])


def test_jaxlab_config_prints_the_choice():
    result = subprocess.run([sys.executable, "-m", "jaxlab.cli", "config", "cartpole", "--vec.num-envs", "512"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "# vec.num_threads auto: 1 C thread per group (" in result.stdout
    assert 'num_threads = "auto"' in result.stdout


def test_threads_are_checked_and_chosen_for_one_processs_envs(monkeypatch):
    """Each of N processes steps vec.num_envs / N of the envs: a given vec.num_threads was checked
    against the whole run's envs per group (and make_group_envs then quietly capped it), and auto
    counted the whole run's agents. Both take one process's share now."""
    from jaxlab.config import threads

    monkeypatch.setattr(threads, "usable_cores", lambda: list(range(64)))
    given = ["--vec.num-envs", "8", "--vec.num-threads", "8", "--train.minibatch-size", "64"]
    config, _ = load_config("cartpole", flags=given)
    assert derive_sizes(config, 1, processes=1).num_threads == 8
    with pytest.raises(ConfigError) as refused:
        derive_sizes(config, 1, processes=2)
    assert str(refused.value) == ("vec.num_threads=8 exceeds min(vec.num_envs / (2 processes), 64)=4; use at most 4 "
                                  "threads, e.g. --vec.num-threads 4 (or auto)")
    config, _ = load_config("cartpole", flags=[*given[:2], "--vec.groups", "2", "--vec.num-threads", "4",
                                               "--train.minibatch-size", "64"])
    with pytest.raises(ConfigError, match=r"exceeds min\(vec.num_envs / \(vec.groups x 2 processes\), 64\)=2;"):
        derive_sizes(config, 1, processes=2)
    config, _ = load_config("cartpole", flags=["--vec.num-envs", "8192", "--train.total-timesteps", "1e7"])
    alone, shared = derive_sizes(config, 1, processes=1), derive_sizes(config, 1, processes=2)
    assert (alone.num_threads, shared.num_threads) == (8, 4)  # at least 1,024 agents per thread
    assert "4,096 agents per group" in shared.threads_reason

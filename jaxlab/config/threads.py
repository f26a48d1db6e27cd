"""vec.num_threads = "auto": how many C threads step each group's envs.

The C side keeps one pool of threads per VecEnv, started once and reused for every step (the caller is
worker 0), and splits the envs into at most MAX_CHUNKS chunks. "auto" gives the pool the cores that
JAX does not need while the envs step:

- with one group (vec.groups 1) the rollout alternates: the policy call, then the C step, so the C
  step may take every core this process may run on (its CPU affinity); XLA's own pool is idle then;
- with several groups on a CPU backend, XLA computes one group's policy call while the C threads step
  another, so they share the cores: half each (the "thread storm" of many-core boxes comes from both
  taking all of them);
- a thread costs a wake-up per step (microseconds), so each thread gets at least
  MIN_AGENTS_PER_THREAD agents: a small env runs in the caller's thread alone.

The result is also capped by the envs of a group and by MAX_CHUNKS. An integer is used as given.
"""

from __future__ import annotations

import os

from jaxlab.messages import counted

MIN_AGENTS_PER_THREAD = 1024
CPU_PRESETS = ("cpu", "none")  # presets under which JAX computes on the CPU (none: the Python API's)


def usable_cores() -> list[int]:
    """The cores this process may run on (its affinity), sorted; 0..os.cpu_count()-1 where the
    affinity is unknown."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def auto_threads(envs_per_group: int, agents_per_env: int, groups: int, cores: int, jax_on_cpu: bool,
                 max_chunks: int) -> tuple[int, str]:
    """(threads, why) for "auto" (see the module docstring); a pure function of its arguments."""
    shared = groups > 1 and jax_on_cpu
    spare = max(1, cores // 2) if shared else cores
    agents = envs_per_group * agents_per_env
    by_work = max(1, agents // MIN_AGENTS_PER_THREAD)
    threads = max(1, min(spare, by_work, envs_per_group, max_chunks))
    why = (f"{counted(cores, 'usable core')}{', half left to XLA (groups overlap on the CPU)' if shared else ''}; "
           f"{agents:,} agents per group, at least {MIN_AGENTS_PER_THREAD:,} per thread")
    return threads, why


def resolve_threads(num_threads: int | str, envs_per_group: int, agents_per_env: int, groups: int, preset: str,
                    max_chunks: int) -> tuple[int, str]:
    """(threads, why) for the config value ``num_threads`` ("auto" or an int)."""
    if num_threads != "auto":
        return int(num_threads), "set"
    return auto_threads(envs_per_group, agents_per_env, groups, len(usable_cores()), preset in CPU_PRESETS, max_chunks)

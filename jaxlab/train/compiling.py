"""How jaxlab's functions are compiled, per kind, and device arrays made without a compile.

    jit_step(fn)   the rollout's step and finish: run every step; on a CPU backend XLA's
                   memory-optimised scheduler (CPU_STEP_OPTIONS)
    jit_once(fn)   what runs once per run (the keys, the policy's and the optimizer's init): on a CPU
                   backend XLA's backend optimisations off (CPU_ONCE_OPTIONS), which compile faster
    to_device      a device copy of a numpy array, never aliasing it: no executable to compile,
                   where jnp.array compiles one per shape and dtype (tens of ms each at start-up)
    host_zeros     a zeroed device array the same way (jnp.zeros compiles one too)
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np

# XLA:CPU's default scheduler runs independent parts of a program side by side; in the step that put
# the truncation bootstrap's lax.cond beside the policy's matmuls, which then ran on one core of two:
# 16 against 8 ms a step at 4,096 agents, 31 against 16 at 8,192 (scripts/bench_overhead.py). The
# memory-optimised scheduler keeps them in sequence, each on every core. The update is as fast with
# either (0.63 s, scripts/bench_update.py), so only the step and the finish take this.
CPU_STEP_OPTIONS = {"xla_cpu_scheduler_type": "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"}

# The init runs once, on a few hundred kilobytes: its compile (0.95 s for cartpole's LSTM-128 policy,
# QR decompositions of the orthogonal initialisers included) is its whole cost, and 0.6 s without
# XLA's backend optimisations, where it then runs in 20 ms instead of 9.
CPU_ONCE_OPTIONS = {"xla_backend_optimization_level": 0}


def _on_cpu(options: dict) -> dict | None:
    return options if jax.default_backend() == "cpu" else None


def jit_step(fn: Callable) -> Callable:
    """``fn`` (a step or finish of make_step) jitted with its segment buffers (argument 2) donated, and
    XLA's memory-optimised scheduler on a CPU backend (CPU_STEP_OPTIONS)."""
    return jax.jit(fn, donate_argnums=(2,), compiler_options=_on_cpu(CPU_STEP_OPTIONS))


def jit_once(fn: Callable) -> Callable:
    """``fn``, run once per run, jitted with XLA's backend optimisations off on a CPU backend."""
    return jax.jit(fn, compiler_options=_on_cpu(CPU_ONCE_OPTIONS))


def to_device(array: np.ndarray) -> jax.Array:
    """The array on the device, asked for as a copy (may_alias=False). On an accelerator it is one. On
    the CPU, jax (seen with 0.10.2) still aliases a 64-byte-aligned numpy buffer, and the env's buffers
    are page-aligned: the result then changes when the env writes the buffer. The rollout's use is safe
    all the same: an env does not step again before the step call that reads the buffer has finished
    (tests/test_trainer.py's device_memory fixture makes the copies real to test what an accelerator does)."""
    return jax.device_put(array, may_alias=False)


def host_zeros(shape: tuple[int, ...], dtype) -> jax.Array:
    """A zeroed device array of ``shape`` and ``dtype``, copied from numpy."""
    return to_device(np.zeros(shape, dtype))

"""A checkpoint's arrays in a run over several processes: one tree of global jax.Arrays, which Orbax
saves and restores as a multi-host checkpoint (every process takes part; each writes and reads its own
part of the files, process 0 the rest).

The tree is Trainer.checkpoint_state's, with its leaves placed on a mesh of one device per process
(axis "processes", P = jax.process_count()):

    replicated   "train" (params, optimizer state, step), "update_key", "norm": the same values in
                 every process, a global array of the leaf's own shape; Orbax writes it once
    per process  "rollout" (the sampling key, the LSTM carry [A_p, H] of this process's agents) and
                 "env" (each group's C env state and last outputs, see VecEnv.save_state): this
                 process's leaf of shape S becomes row p of a global array [P, *S], of which process p
                 holds (and writes, and reads back) row p alone

The rows have the same shapes in every process: each process has vec.groups groups of the same size.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "processes"
#: checkpoint_state's parts that differ between processes (the rest is replicated).
PER_PROCESS = ("rollout", "env")


def host_value(x) -> np.ndarray:
    """This process's value of a leaf as an owned numpy copy: a local array (possibly sharded over
    this process's devices) whole, a global one replicated over every process from its first local
    shard."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        if not x.is_fully_replicated:
            raise ValueError(f"a checkpoint leaf of shape {x.shape} spans other processes' devices without "
                             "being replicated; only replicated global arrays can be saved by each process")
        x = x.addressable_data(0)
    return np.array(x, copy=True)


class ProcessState:
    """The placements of a checkpoint's tree in a run over several processes (see the module
    docstring): ``to_global`` for a save, ``template`` and ``own_rows`` for a restore."""

    def __init__(self):
        self.processes = jax.process_count()
        devices = [min((d for d in jax.devices() if d.process_index == p), key=lambda d: d.id)
                   for p in range(self.processes)]
        self.device = devices[jax.process_index()]
        self.mesh = Mesh(np.array(devices), (AXIS,))
        self.rows = NamedSharding(self.mesh, P(AXIS))
        self.replicated = NamedSharding(self.mesh, P())

    def _put(self, value: np.ndarray, per_process: bool) -> jax.Array:
        local = jax.device_put(value[None] if per_process else value, self.device)
        shape = (self.processes, *value.shape) if per_process else value.shape
        return jax.make_array_from_single_device_arrays(shape, self.rows if per_process else self.replicated,
                                                        [local])

    def to_global(self, state: dict) -> dict:
        """``state`` (checkpoint_state's tree of this process's values) as global arrays: the replicated
        parts with their own shapes, each per-process leaf [*S] as row p of a [P, *S] array. The
        arrays are fresh copies: the trainer may donate or overwrite its own while Orbax writes."""
        return {part: jax.tree.map(lambda x, rows=part in PER_PROCESS: self._put(host_value(x), rows), tree)
                for part, tree in state.items()}

    def template(self, template: dict) -> dict:
        """The restore target of a checkpoint_template (jax.ShapeDtypeStruct leaves of this process's
        shapes): the same tree with the global shapes and shardings of to_global."""
        def target(x, per_process: bool):
            if per_process:
                return jax.ShapeDtypeStruct((self.processes, *x.shape), x.dtype, sharding=self.rows)
            return jax.ShapeDtypeStruct(tuple(x.shape), x.dtype, sharding=self.replicated)

        return {part: jax.tree.map(lambda x, rows=part in PER_PROCESS: target(x, rows), tree)
                for part, tree in template.items()}

    def own_rows(self, state: dict) -> dict:
        """A restored tree of global arrays as this process's numpy values (the checkpoint_state tree
        that Trainer.restore_state takes): its row of each per-process leaf, the replicated leaves whole."""
        def own(x, per_process: bool) -> np.ndarray:
            value = np.asarray(x.addressable_data(0))
            return value[0] if per_process else value

        return {part: jax.tree.map(lambda x, rows=part in PER_PROCESS: own(x, rows), tree)
                for part, tree in state.items()}


def is_global(tree: Any) -> bool:
    """Whether ``tree`` holds arrays that span other processes' devices (a to_global tree)."""
    return any(isinstance(x, jax.Array) and not x.is_fully_addressable for x in jax.tree.leaves(tree))

"""Data parallelism over the local devices (device.count): one program, agents sharded, parameters
replicated, with jax.sharding (a Mesh with one axis, "agents", and NamedSharding); no pmap.

The functions keep their global meaning: the rollout's step and the update are the same jitted
functions as on one device, given inputs placed with these shardings; XLA's SPMD partitioner splits
the work along the agent axis and sums the gradients' partial sums across devices (an all-reduce),
so results equal those on one device up to the order of float reductions. Where the sharding goes:

    agent axis sharded: the rollout's carries [A/G, H] (axis 0), the segment buffers [T, N, ...] (axis 1),
                        the observations the policy sees in a step (axis 0) and in a training
                        minibatch (axis 1 of [T, mb, ...]; the minibatch's start carry on axis 0)
    replicated:         parameters, optimizer state, RNG keys, the env outputs block (one host
                        block per group, each device decodes it and keeps its agents)

Each device thus holds a contiguous slice of every group's agents, which are whole C envs (the
config checks that each group's envs divide by the device count). The minibatches are the same as
on one device (one permutation of all agents); the minibatch's rows are gathered onto the devices
that compute them, which is what makes 1 and D devices give the same losses.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "agents"


class ShardedPolicy:
    """``policy`` whose inputs are constrained to the agent sharding before each apply: one step's
    carry, obs and reset on axis 0; the training unroll's obs and reset ([T, A, ...]) on axis 1 and its
    carry on axis 0. Everything else passes through (init, attributes)."""

    def __init__(self, policy, mesh: Mesh):
        self._policy, self._mesh = policy, mesh

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not set yet (copies, pickling): no recursion through _policy
            raise AttributeError(name)
        return getattr(self._policy, name)

    def _on(self, tree, axis: int):
        spec = P(*([None] * axis), AXIS)
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, NamedSharding(self._mesh, spec)), tree)

    def apply(self, params, carry, obs, reset, method=None, **kwargs):
        time_axis = 1 if method == "unroll" else 0
        carry, obs, reset = self._on(carry, 0), self._on(obs, time_axis), self._on(reset, time_axis)
        if method is None:
            return self._policy.apply(params, carry, obs, reset, **kwargs)
        return self._policy.apply(params, carry, obs, reset, method=method, **kwargs)


class DataParallel:
    """The meshes of ``count`` devices per process and the placements of the trainer's arrays on them.

    ``mesh``: this process's devices, where its rollout runs; ``global_mesh``: every process's devices
    (the same as ``mesh`` in a one-process run), where the update runs. In a run over several
    processes the rollout's segment (local rows) becomes one global array for the update, process
    after process, and the updated (replicated) parameters come back as a local array."""

    def __init__(self, count: int):
        import numpy as np

        self.count = count
        self.processes = jax.process_count()
        self.mesh = Mesh(jax.local_devices()[:count], (AXIS,))
        by_process = [[d for d in jax.devices() if d.process_index == p][:count] for p in range(self.processes)]
        self.global_mesh = self.mesh if self.processes == 1 else Mesh(np.array([d for devices in by_process for d in devices]), (AXIS,))
        self.replicated = NamedSharding(self.mesh, P())

    def agents(self, axis: int = 0, mesh: Mesh | None = None) -> NamedSharding:
        """The sharding of an array whose axis ``axis`` is the agent axis."""
        return NamedSharding(mesh or self.mesh, P(*([None] * axis), AXIS))

    def wrap(self, policy, training: bool = False) -> ShardedPolicy:
        """``policy`` constrained to the agent sharding of the rollout's mesh, or with ``training`` the
        update's."""
        return ShardedPolicy(policy, self.global_mesh if training else self.mesh)

    def replicate(self, tree):
        return jax.device_put(tree, self.replicated)

    def keep_replicated(self, tree):
        """Inside the update: ``tree`` constrained to be replicated over the update's devices, so that
        an output fed back as the next call's input (the normalisation statistics) keeps the input's
        sharding and the update compiles once."""
        return jax.lax.with_sharding_constraint(tree, NamedSharding(self.global_mesh, P()))

    def shard(self, tree, axis: int = 0):
        return jax.tree.map(lambda x: jax.device_put(x, self.agents(axis)), tree)

    def replicate_global(self, tree):
        """``tree`` (the same values in every process) replicated over every process's devices."""
        if self.processes == 1:
            return self.replicate(tree)
        import numpy as np

        sharding = NamedSharding(self.global_mesh, P())

        def put(x):
            value = np.asarray(x)
            return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

        return jax.tree.map(put, tree)

    def local(self, tree):
        """A replicated global tree as an array of this process's devices (no copy). Each shard's own data:
        addressable_data(i) of a replicated array is the first device's for every i."""
        if self.processes == 1:
            return tree
        return jax.tree.map(lambda x: jax.make_array_from_single_device_arrays(
            x.shape, self.replicated, [shard.data for shard in x.addressable_shards]), tree)

    def global_segment(self, segment):
        """The rollout's segment (this process's rows) as the rows of every process, in process order:
        axis 1 of the [T, N, ...] arrays, axis 0 of next_values and the start carry."""
        if self.processes == 1:
            return segment

        def join(x, axis):
            x = jax.device_put(x, self.agents(axis))
            shape = list(x.shape)
            shape[axis] *= self.processes
            shards = sorted(x.addressable_shards, key=lambda s: s.index[axis].start or 0)
            return jax.make_array_from_single_device_arrays(tuple(shape), self.agents(axis, self.global_mesh),
                                                            [s.data for s in shards])

        fields = {k: jax.tree.map(lambda x: join(x, 1), getattr(segment, k)) for k in segment._fields
                  if k not in ("next_values", "start_carry")}
        return segment._replace(**fields, next_values=join(segment.next_values, 0),
                                start_carry=jax.tree.map(lambda x: join(x, 0), segment.start_carry))

    def wrap_update(self, update):
        """The jitted ``update`` taking this process's segment and key, returning its metrics as local
        arrays (the state stays global); ``update`` itself in a one-process run."""
        if self.processes == 1:
            return update

        def wrapped(state, norm_state, segment, key):
            state, norm_state, metrics = update(state, norm_state, self.global_segment(segment),
                                                self.replicate_global(key))
            return state, norm_state, jax.tree.map(lambda x: x.addressable_data(0), metrics)

        wrapped.jitted = update
        return wrapped

    def sum_episode_stats(self, stats) -> None:
        """Adds every process's episode statistics (a rollout.EpisodeStats) into each process's, so the
        records count the episodes of every process's envs; every process must call it, in step."""
        if self.processes == 1:
            return
        import numpy as np
        from jax.experimental import multihost_utils

        # float32 (JAX without x64): episode counts are exact up to 2**24 per record
        mine = np.array([stats.episodes, *(stats.sums.get(name, 0.0) for name in stats.names)], np.float32)
        total = np.asarray(multihost_utils.process_allgather(mine)).reshape(self.processes, -1).sum(0)
        stats.episodes = round(float(total[0]))
        stats.sums = dict(zip(stats.names, total[1:].tolist()))

    def place(self, trainer) -> None:
        """Puts the trainer's state on the meshes: train state replicated over every process's devices,
        the keys over this process's, the rollout's carries and segment buffers sharded on the agent
        axis."""
        trainer.state = self.replicate_global(jax.device_get(trainer.state) if self.processes > 1 else trainer.state)
        trainer.update_key = self.replicate(trainer.update_key)
        if trainer.norm.state:  # the normalisation statistics, global like the train state
            trainer.norm.state = self.replicate_global(jax.device_get(trainer.norm.state) if self.processes > 1
                                                       else trainer.norm.state)
        r = trainer.rollout
        r.key = self.replicate(r.key)
        r.carries = [self.shard(carry, 0) for carry in r.carries]
        r.buffers = self.shard(r.buffers, 1)



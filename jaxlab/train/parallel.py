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
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXIS = "agents"


class ShardedPolicy:
    """``policy`` whose inputs are constrained to the agent sharding before each apply: one step's
    carry, obs and reset on axis 0; the training unroll's obs and reset ([T, A, ...]) on axis 1 and its
    carry on axis 0. Everything else passes through (init, attributes)."""

    def __init__(self, policy, mesh: Mesh):
        self._policy, self._mesh = policy, mesh

    def __getattr__(self, name: str) -> Any:
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
    """The mesh of ``count`` local devices and the placements of the trainer's arrays on it."""

    def __init__(self, count: int):
        self.count = count
        self.mesh = Mesh(jax.local_devices()[:count], (AXIS,))
        self.replicated = NamedSharding(self.mesh, P())

    def agents(self, axis: int = 0) -> NamedSharding:
        """The sharding of an array whose axis ``axis`` is the agent axis."""
        return NamedSharding(self.mesh, P(*([None] * axis), AXIS))

    def wrap(self, policy) -> ShardedPolicy:
        return ShardedPolicy(policy, self.mesh)

    def replicate(self, tree):
        return jax.device_put(tree, self.replicated)

    def shard(self, tree, axis: int = 0):
        return jax.tree.map(lambda x: jax.device_put(x, self.agents(axis)), tree)

    def place(self, trainer) -> None:
        """Puts the trainer's state on the mesh: train state and keys replicated, the rollout's carries
        and segment buffers sharded on the agent axis."""
        trainer.state = self.replicate(trainer.state)
        trainer.update_key = self.replicate(trainer.update_key)
        r = trainer.rollout
        r.key = self.replicate(r.key)
        r.carries = [self.shard(carry, 0) for carry in r.carries]
        r.buffers = self.shard(r.buffers, 1)


def device_count(setting: int | str) -> int:
    """The device count of ``device.count`` (auto: every local device); not checked (see
    jaxlab.config.validate.check_devices)."""
    return jax.local_device_count() if setting == "auto" else int(setting)


def data_parallel(setting: int | str) -> DataParallel | None:
    """The DataParallel of ``device.count``, or None for one device (everything as without it)."""
    count = device_count(setting)
    return DataParallel(count) if count > 1 else None

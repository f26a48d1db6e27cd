"""Collects a batch: T steps of all agents, one jitted policy call and one C call per step and group,
written straight into segment buffers on the device.

The agents are split into G groups (vec.groups), each with its own VecEnv (its slice of the envs)
and its own LSTM carry. The segment buffers ([T, N, ...] device arrays, N = segments x agents) are
allocated once and threaded through every step call, donated, so each call writes its rows in place.
Per step t of group g (offset = the group's first row in N):

    packed  = the env's outputs of the step before (observations, rewards, flags, mask, active: one
              host block, jaxlab.env.buffers), moved to the device in one transfer
    step(params, carry, seg, packed, final_obs, t, offset, key, n)
        -> carry, action, seg    writes obs/resets/actions/logp/values/masks/active at row t, and
                                 rewards/terminals/truncations/bootstrap of the step before at t - 1
    action -> host -> one C call steps the group's envs, writing their next outputs block

where reset (the carry is zeroed first) is the step before's terminal or truncation flag, and the
bootstrap value is that of the observation an episode was truncated at in the step before, computed
with the carry the agent had then (only when some agent was truncated). After the T steps,
``finish`` writes the last step's rewards, flags and bootstrap and returns the values of the
observations after it (next_values). With overlap, the policy call of one group runs (JAX dispatch
is asynchronous) while the C threads step another group: the calls are the same, in the same order,
so results are bit for bit those of the groups stepped one after the other.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.agent import distributions
from jaxlab.env.buffers import decode
from jaxlab.train.compiling import host_zeros, jit_once, to_device
from jaxlab.train.learner import Segment

#: What Rollout.timing splits its seconds into: C env steps, waiting for policy calls, host<->device copies
#: (actions out, env outputs in).
TIMING = ("env", "policy", "copy")


class EnvStepError(RuntimeError):
    """An env raised while the rollout stepped it (a C env's error, a Python env's exception): its
    message names the env and the step, then the env's own error."""


def nonfinite_observations_note(env) -> str:
    """Words to add to a failed step's error when the observations the policy acted on (the env's
    buffer: a refused step changes nothing) held NaN or infinities: a policy fed those acts NaN (a
    continuous action the env then refuses), so the env's observations are the cause. "" when finite."""
    obs = env.observations
    if obs.dtype.kind != "f":
        return ""
    bad = int(np.count_nonzero(~np.isfinite(obs)))
    if not bad:
        return ""
    return (f"; the observations the policy acted on held {bad:,} NaN or infinite values (of {obs.size:,}), "
            f"returned by env '{env.name}': fix the env so that its observations are finite numbers")


def nan_action_note(action: np.ndarray) -> str:
    """Words to add to a failed step's error when the policy's ``action`` (host, [N, ...]) holds NaN though
    the observations it acted on were finite (nonfinite_observations_note said nothing): the policy's own
    output was NaN. "" otherwise."""
    if action.dtype.kind != "f" or np.isfinite(action).all():
        return ""
    return ("; the observations it acted on were finite, so the policy itself gave the NaN (its Gaussian mean or "
            "log-std): a policy.module's step returning NaN, or parameters a too-high train.learning_rate broke")


class SegmentBuffers(NamedTuple):
    """The device rows of a batch, N = segments x agents: obs [T, N, ...] (the env's dtype), resets,
    terminals, truncations [T, N] bool, actions [T, N, ...], logp, values, rewards, bootstrap_values
    [T, N] float32, masks [T, N, n] bool or None, active [T, N] bool or None."""

    obs: jax.Array
    resets: jax.Array
    actions: jax.Array
    logp: jax.Array
    values: jax.Array
    rewards: jax.Array
    terminals: jax.Array
    truncations: jax.Array
    bootstrap_values: jax.Array
    masks: Any = None
    active: Any = None


def segment_buffers(horizon: int, rows: int, env) -> SegmentBuffers:
    """Zeroed segment buffers of ``horizon`` x ``rows`` for the spaces of ``env``."""
    obs_space, act = env.observation_space, env.action_space
    zeros = lambda *shape, dtype=np.float32: host_zeros((horizon, rows, *shape), dtype)  # noqa: E731
    flags = lambda: zeros(dtype=bool)  # noqa: E731
    return SegmentBuffers(
        obs=zeros(*obs_space.shape, dtype=obs_space.dtype), resets=flags(),
        actions=zeros(*act.shape, dtype=act.dtype), logp=zeros(), values=zeros(), rewards=zeros(),
        terminals=flags(), truncations=flags(), bootstrap_values=zeros(),
        masks=None if env.action_mask is None else zeros(env.action_mask.shape[1], dtype=bool),
        active=None if env.active is None else flags())


def _write(buffer: jax.Array, row: jax.Array, t, offset) -> jax.Array:
    """``buffer`` [T, N, ...] with ``row`` [n, ...] written at time t, rows offset..offset+n."""
    index = (t, offset) + (0,) * (buffer.ndim - 2)
    return jax.lax.dynamic_update_slice(buffer, row[None].astype(buffer.dtype), index)


def make_step(policy, spec: distributions.ActionSpec, layout, deterministic: bool = False,
              on_trace: Callable[[], None] = lambda: None) -> tuple[Callable, Callable]:
    """(step, finish) for envs whose outputs block has ``layout`` (see the module docstring); not yet
    jitted. ``key``: the group's sampling key, into which ``n``, the global step count, is folded."""

    def previous(params, carry, seg: SegmentBuffers, out: dict, final_obs, t, offset) -> SegmentBuffers:
        """Writes the step before's rewards, flags and truncation bootstrap at row t - 1."""
        truncated = out["truncations"] & ~out["terminals"]

        def bootstrap():
            _, _, value, _ = policy.apply(params, carry, final_obs, jnp.zeros_like(truncated))
            return jnp.where(truncated, value, 0.0)

        boot = jax.lax.cond(jnp.any(truncated), bootstrap, lambda: jnp.zeros(truncated.shape, jnp.float32))
        before = jnp.maximum(t - 1, 0)  # at t = 0 the step before belongs to the last batch: row 0 is rewritten
        return seg._replace(rewards=_write(seg.rewards, out["rewards"], before, offset),
                            terminals=_write(seg.terminals, out["terminals"], before, offset),
                            truncations=_write(seg.truncations, out["truncations"], before, offset),
                            bootstrap_values=_write(seg.bootstrap_values, boot, before, offset))

    def step(params, carry, seg: SegmentBuffers, packed, final_obs, t, offset, key, n):
        on_trace()
        out = decode(packed, layout)
        seg = previous(params, carry, seg, out, final_obs, t, offset)
        obs, mask = out["observations"], out.get("action_mask")
        reset = out["terminals"] | out["truncations"]
        carry, head, value, log_std = policy.apply(params, carry, obs, reset)
        if deterministic:
            action = distributions.deterministic(spec, head, mask)
        else:
            action = distributions.sample(spec, head, log_std, jax.random.fold_in(key, n), mask)
        logp, _ = distributions.log_prob_entropy(spec, head, log_std, action, mask)
        seg = seg._replace(obs=_write(seg.obs, obs, t, offset), resets=_write(seg.resets, reset, t, offset),
                           actions=_write(seg.actions, action, t, offset), logp=_write(seg.logp, logp, t, offset),
                           values=_write(seg.values, value, t, offset))
        if mask is not None:
            seg = seg._replace(masks=_write(seg.masks, mask, t, offset))
        if "active" in out:
            seg = seg._replace(active=_write(seg.active, out["active"], t, offset))
        return carry, action, seg

    def finish(params, carry, seg: SegmentBuffers, packed, final_obs, t, offset):
        on_trace()
        out = decode(packed, layout)
        seg = previous(params, carry, seg, out, final_obs, t, offset)
        _, _, value, _ = policy.apply(params, carry, out["observations"], out["terminals"] | out["truncations"])
        return seg, value

    return step, finish


class EpisodeStats:
    """Episode-weighted means of the env's statistics ``names`` over the step infos added since the last
    take()."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.sums: dict[str, float] = {}
        self.episodes = 0

    def add(self, info: dict) -> None:
        n = info.get("episodes", 0)
        self.episodes += n
        for name, value in info.items():
            if name != "episodes":
                self.sums[name] = self.sums.get(name, 0.0) + value * n

    def take(self) -> dict:
        """{"episodes": n, statistic: mean or None when n is 0, ...}, and starts over."""
        result = {"episodes": self.episodes,
                  **{k: self.sums[k] / self.episodes if self.episodes else None for k in self.names}}
        self.sums, self.episodes = {}, 0
        return result


class Rollout:
    """Steps the groups' envs with the jitted ``step`` / ``finish`` (see the module docstring) and holds
    what runs on between batches: each group's carry, the sampling key, the step count.

    ``envs``: one VecEnv per group (the same spaces, the same agent count); ``carries``: one per group;
    ``segments``: segments per batch (the batch's rows are segments x agents); ``overlap``: dispatch a
    group's policy call before stepping the group before it in C (False: one group after the other)."""

    def __init__(self, envs: list, step: Callable, finish: Callable, horizon: int, carries: list, key: jax.Array,
                 segments: int = 1, overlap: bool = True):
        self.envs, self._step, self._finish = envs, step, finish
        self.horizon, self.segments, self.overlap = horizon, segments, overlap
        # on an accelerator each action starts its copy to the host as soon as it is computed (so that
        # the wait for it is the wait for the policy call alone); on a CPU there is no copy to start
        self.prefetch_actions = jax.default_backend() != "cpu"
        self.carries = list(carries)
        self.key = key  # each group samples with fold_in(key, group), then the step count
        self._group_keys = (None, 0, [])  # (the key and first group they were folded from, the keys)
        self._fold_in = jit_once(jax.random.fold_in)
        self.step_count = 0
        self.first_group = 0  # the index of the first group among every process's (keys fold it in)
        self.group_size = envs[0].num_agents
        self.rows = segments * len(envs) * self.group_size
        self.buffers = segment_buffers(horizon, self.rows, envs[0])
        for env in envs:
            env.reset()
            env.terminals.fill(True)  # every agent starts an episode: its carry is reset at the first step
        self.timing = dict.fromkeys(TIMING, 0.0)  # seconds
        self._final = [to_device(env.final_observations) for env in envs]

    def group_keys(self) -> list:
        """fold_in(self.key, first_group + g) per group, folded once per key (a fold_in outside jit costs far more
        than a step's other Python work; the key changes only on a restore)."""
        if self._group_keys[0] is not self.key or self._group_keys[1] != self.first_group:
            keys = [self._fold_in(self.key, np.uint32(self.first_group + g)) for g in range(len(self.envs))]
            self._group_keys = (self.key, self.first_group, keys)
        return self._group_keys[2]

    @property
    def carry(self):
        """The carry of every agent, groups in order: (c [A, H], h [A, H])."""
        return jax.tree.map(lambda *parts: jnp.concatenate(parts), *self.carries) if len(self.carries) > 1 \
            else self.carries[0]

    def set_carry(self, carry) -> None:
        """Splits ``carry`` (c [A, H], h [A, H]) into the groups' carries."""
        size = self.group_size
        self.carries = [jax.tree.map(lambda x, g=g: x[g * size:(g + 1) * size], carry) for g in range(len(self.envs))]

    def _inputs(self, g: int, ended: bool = True) -> tuple[np.ndarray, jax.Array]:
        """Group g's last outputs block (the host array itself: the jitted step's call transfers it,
        one transfer, on jit's C++ path, which costs less than a device_put of its own; the env does
        not step again before the step's action, and with it the whole step, is ready) and its final
        observations on the device (copied only after a truncation). ``ended`` False: the last step
        ended no episode (its info was empty), so no agent was truncated and the flags are not read."""
        env = self.envs[g]
        tic = time.perf_counter()
        packed = env.buffers.outputs
        if ended and env.truncations.any():
            self._final[g] = to_device(env.final_observations)
        self.timing["copy"] += time.perf_counter() - tic
        return packed, self._final[g]

    def _env_step(self, g: int, action: jax.Array) -> dict:
        """Waits for group g's action, steps its envs in C; returns the step's info."""
        tic = time.perf_counter()
        action.block_until_ready()
        toc = time.perf_counter()
        self.timing["policy"] += toc - tic
        host = np.asarray(action)
        tic = time.perf_counter()
        self.timing["copy"] += tic - toc
        try:
            info = self.envs[g].step(host)[4]
        except Exception as err:  # the env's code (C or Python): named, not a bare traceback from here
            raise EnvStepError(f"env '{self.envs[g].name}' failed while stepping: {type(err).__name__}: "
                               f"{err}{nonfinite_observations_note(self.envs[g]) or nan_action_note(host)}") from err
        self.timing["env"] += time.perf_counter() - tic
        return info

    def step_once(self, params) -> tuple[np.ndarray, dict]:
        """One step of the first group into row 0 (evaluation: the segment is not kept); returns the
        action taken (host) and the step's info. The env's buffers then hold the step's outputs."""
        packed, final = self._inputs(0)
        self.carries[0], action, self.buffers = self._step(params, self.carries[0], self.buffers, packed, final,
                                                           np.int32(0), np.int32(0), self.group_keys()[0],
                                                           np.int32(self.step_count))
        info = self._env_step(0, action)
        self.step_count += 1
        return np.asarray(action), info

    def collect(self, params, segment: int = 0) -> tuple[Segment | None, list[dict]]:
        """Runs T steps of every group with ``params`` into segment ``segment`` of the batch's rows; after
        the last segment (``segment`` = segments - 1) returns the batch as a learner Segment (start
        carries and next values of every segment included), else None; and the env infos."""
        G, T, size = len(self.envs), self.horizon, self.group_size
        # step arguments as numpy scalars: jit takes them on its fast path (a jnp scalar is a device
        # transfer of its own, tens of microseconds per step)
        offsets = [np.int32((segment * G + g) * size) for g in range(G)]
        if segment == 0:
            self._start, self._next = [], []
        self._start.append(self.carry)
        infos, actions = [], [None] * G
        inputs = [self._inputs(g) for g in range(G)]
        group_keys = self.group_keys()
        first_step = self.step_count

        def dispatch(g: int, t: int) -> None:
            tic = time.perf_counter()
            packed, final = inputs[g]
            self.carries[g], actions[g], self.buffers = self._step(
                params, self.carries[g], self.buffers, packed, final, np.int32(t), offsets[g], group_keys[g],
                np.int32(first_step + t))
            if self.prefetch_actions:
                actions[g].copy_to_host_async()
            self.timing["policy"] += time.perf_counter() - tic

        if self.overlap:
            for g in range(G):
                dispatch(g, 0)
        for t in range(T):
            for g in range(G):
                if not self.overlap:
                    dispatch(g, t)
                info = self._env_step(g, actions[g])
                if info:
                    infos.append(info)
                # an empty info: no agent-episode ended (every env's step says so: VecEnv.step), so none
                # was truncated; reading the flags after a large policy call costs a cache refill
                inputs[g] = self._inputs(g, ended=bool(info))
                if self.overlap and t + 1 < T:
                    dispatch(g, t + 1)  # runs on the device while the next group steps in C
        self.step_count += T
        values = []
        tic = time.perf_counter()
        for g in range(G):
            packed, final = inputs[g]
            self.buffers, value = self._finish(params, self.carries[g], self.buffers, packed, final, np.int32(T),
                                               offsets[g])
            values.append(value)
        self.timing["policy"] += time.perf_counter() - tic  # the dispatch; a small call may run in it
        self._next.append(jnp.concatenate(values) if G > 1 else values[0])
        if segment < self.segments - 1:
            return None, infos
        b = self.buffers
        start = self._start[0] if len(self._start) == 1 else \
            jax.tree.map(lambda *parts: jnp.concatenate(parts), *self._start)
        next_values = self._next[0] if len(self._next) == 1 else jnp.concatenate(self._next)
        batch = Segment(obs=b.obs, resets=b.resets, actions=b.actions, logp=b.logp, values=b.values,
                        rewards=b.rewards, terminals=b.terminals, truncations=b.truncations,
                        bootstrap_values=b.bootstrap_values, next_values=next_values, start_carry=start,
                        masks=b.masks, active=b.active)
        return batch, infos

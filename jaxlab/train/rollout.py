"""Collects one segment: T steps of all A agents, one jitted policy call and one C call per step.

Per step t (see learner.Segment for shapes):
    act(params, carry, obs_t, reset_t, final_obs_{t-1}, truncated_{t-1}, key, t)
        -> carry, action_t, logp_t, value_t, bootstrap_{t-1}
where reset_t = the env step before ended the episode (the carry is zeroed first) and bootstrap_{t-1}
is the value of the observation an episode was truncated at in step t-1, computed with the carry the
agent had then (only when some agent was truncated; zeros otherwise). After the T steps one more act
call gives next_values and the last step's bootstrap; its action is discarded, so the next segment
starts with the new parameters.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.agent import distributions
from jaxlab.train.learner import Segment


def make_act(policy, spec: distributions.ActionSpec, deterministic: bool = False,
             on_trace: Callable[[], None] = lambda: None) -> Callable:
    """The per-step policy function (not yet jitted)."""

    def act(params, carry, obs, reset, final_obs, truncated, key, t, mask=None):
        on_trace()

        def bootstrap():
            _, _, value, _ = policy.apply(params, carry, final_obs, jnp.zeros_like(reset))
            return jnp.where(truncated, value, 0.0)

        boot = jax.lax.cond(jnp.any(truncated), bootstrap, lambda: jnp.zeros(reset.shape, jnp.float32))
        carry, head, value, log_std = policy.apply(params, carry, obs, reset)
        if deterministic:
            action = distributions.deterministic(spec, head, mask)
        else:
            action = distributions.sample(spec, head, log_std, jax.random.fold_in(key, t), mask)
        logp, _ = distributions.log_prob_entropy(spec, head, log_std, action, mask)
        return carry, action, logp, value, boot

    return act


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


def to_device(array: np.ndarray) -> jax.Array:
    """A device copy. jax.device_put may alias a numpy buffer on the CPU, and the env overwrites its
    buffers every step, so the copy is explicit."""
    return jnp.array(array, copy=True)


def device_mask(env) -> jax.Array | None:
    """The env's action mask as a device copy, or None when the env has no mask."""
    return None if env.action_mask is None else to_device(env.action_mask)


class StepOutput(NamedTuple):
    """What one step of the protocol produced (A = agents). Device arrays: ``obs`` [A, ...] (the
    observation the action was taken on), ``action`` [A, ...], ``logp`` and ``value`` [A], ``boot`` [A]
    (the value of the observation an episode was truncated at in the step before; zeros elsewhere) and
    ``mask`` [A, n] or None. Host arrays: ``reset`` [A] bool (the carry was zeroed before this step),
    ``active`` [A] bool or None (whether the agent acted in this step, for envs with waiting agents),
    ``host_action``, and the env's ``rewards``, ``terminals``, ``truncations`` [A] (views of its
    buffers, overwritten by the next step) and ``info`` (episode statistics, empty when none ended)."""

    obs: jax.Array
    reset: np.ndarray
    action: jax.Array
    logp: jax.Array
    value: jax.Array
    boot: jax.Array
    mask: jax.Array | None
    active: np.ndarray | None
    host_action: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    truncations: np.ndarray
    info: dict


class Rollout:
    """The per-step protocol over one VecEnv, and the recurrent state it carries between steps and
    segments. Training (``collect``) and evaluation (jaxlab.train.evaluation.play) both step with it.

    One step: the env's mask to the device, one jitted policy call (act) on the current observation
    with the carry zeroed where the previous step ended an episode (and, when some agent was truncated
    in the previous step, the value of its cut observation), the action to the host, one C step, the
    new observation (and final observations after a truncation) to the device."""

    def __init__(self, env, act: Callable, horizon: int, carry, key: jax.Array):
        self.env = env
        self.act = act
        self.horizon = horizon
        self.carry = carry
        self.key = key
        self.step_count = 0
        A = env.num_agents
        self.rewards = np.zeros((horizon, A), np.float32)
        self.terminals = np.zeros((horizon, A), bool)
        self.truncations = np.zeros((horizon, A), bool)
        self.obs = to_device(env.reset())
        self.reset_flags = np.ones(A, bool)           # every agent starts an episode
        self.final_obs = to_device(env.final_observations)
        self.truncated = np.zeros(A, bool)
        self.timing = {"env": 0.0, "policy": 0.0, "copy": 0.0}  # seconds: C env steps, policy calls,
        # host<->device copies (actions out, observations in, the segment's arrays)

    def _policy(self, params):
        """The policy call on the current state: (carry, action, logp, value, boot, mask)."""
        mask = device_mask(self.env)
        return (*self.act(params, self.carry, self.obs, self.reset_flags, self.final_obs, self.truncated,
                          self.key, self.step_count, mask), mask)

    def step(self, params) -> StepOutput:
        """One step of every agent with ``params`` (see the class docstring)."""
        env = self.env
        tic = time.perf_counter()
        carry, action, logp, value, boot, mask = self._policy(params)
        action.block_until_ready()
        toc = time.perf_counter()
        self.timing["policy"] += toc - tic
        host_action = np.asarray(action)
        tic = time.perf_counter()
        self.timing["copy"] += tic - toc
        obs, reset = self.obs, self.reset_flags
        active = None if env.active is None else env.active.copy()  # who acts in this step
        _, rewards, terminals, truncations, info = env.step(host_action)
        self.carry = carry
        self.step_count += 1
        self.reset_flags = terminals | truncations
        self.truncated = truncations.copy()
        toc = time.perf_counter()
        self.timing["env"] += toc - tic
        self.obs = to_device(env.observations)
        if self.truncated.any():
            self.final_obs = to_device(env.final_observations)
        self.timing["copy"] += time.perf_counter() - toc
        return StepOutput(obs, reset, action, logp, value, boot, mask, active, host_action, rewards, terminals,
                          truncations, info)

    def bootstrap(self, params) -> tuple[jax.Array, jax.Array]:
        """The policy call after a segment's last step, stepping nothing: (next_values [A], boot [A] of
        the last step's truncations). Its action is discarded, so the next segment starts afresh."""
        tic = time.perf_counter()
        _, _, _, value, boot, _ = self._policy(params)
        self.timing["policy"] += time.perf_counter() - tic
        return value, boot

    def collect(self, params) -> tuple[Segment, list[dict]]:
        """Runs T steps with ``params``; returns the segment (device arrays) and the env infos."""
        start_carry = self.carry
        steps, infos = [], []
        for t in range(self.horizon):
            out = self.step(params)
            steps.append(out)
            self.rewards[t] = out.rewards
            self.terminals[t] = out.terminals
            self.truncations[t] = out.truncations
            if out.info:
                infos.append(out.info)
        next_values, last_boot = self.bootstrap(params)
        tic = time.perf_counter()
        segment = Segment(
            obs=jnp.stack([s.obs for s in steps]), resets=jnp.asarray(np.stack([s.reset for s in steps])),
            actions=jnp.stack([s.action for s in steps]), logp=jnp.stack([s.logp for s in steps]),
            values=jnp.stack([s.value for s in steps]), rewards=to_device(self.rewards),
            terminals=to_device(self.terminals), truncations=to_device(self.truncations),
            bootstrap_values=jnp.stack([s.boot for s in steps[1:]] + [last_boot]), next_values=next_values,
            start_carry=start_carry,
            masks=None if steps[0].mask is None else jnp.stack([s.mask for s in steps]),
            active=None if steps[0].active is None else jnp.asarray(np.stack([s.active for s in steps])))
        self.timing["copy"] += time.perf_counter() - tic
        return segment, infos

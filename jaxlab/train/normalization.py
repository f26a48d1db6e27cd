"""Observation normalisation and reward scaling in training (the math is jaxlab.agent.normalize).

Per update, the rollout acts on observations normalised by the running statistics as they were when the
update's batch started (frozen during the batch); then ``prepare_batch`` (a pure function, traced inside
the trainer's jitted update, so it adds no compile) hands the learner the batch with
    obs      normalised with those same statistics (so the update's first ratios are 1), float32
    rewards  divided by the running std of the discounted return, the return statistics first updated
             with this batch's T x N returns (SB3's VecNormalize, per batch rather than per step)
and updates the observation statistics with the batch's raw observations, for the next batch. Rows
where an agent waits (Segment.active 0: not its episode's) count in neither statistic. The
state ({"obs": RunningStats, "reward": ReturnScale}, only the parts that are on) is saved in checkpoints
and restored, so a resumed run goes on bit for bit; evaluation uses the statistics as they are (frozen).

Shapes: T = horizon, N = rows = S segments x A agents (segment s holds rows s*A .. (s+1)*A - 1, one step
of segment s + 1 following the last of segment s for the same agent).
"""

from __future__ import annotations

import numpy as np

from jaxlab.agent import normalize

#: The record key of the std the rewards were last divided by (reward scaling on).
RETURN_STD = "return_std"


class NormalizedPolicy:
    """``policy`` (ActorCritic or ModulePolicy) whose observations are normalised first: apply(variables,
    carry, obs, reset, method) with variables = {"params": the policy's params, "obs_stats": RunningStats}."""

    def __init__(self, policy):
        self.policy = policy

    def initial_carry(self, num_agents: int):
        return self.policy.initial_carry(num_agents)

    def apply(self, variables, carry, obs, reset, method=None):
        return self.policy.apply(variables["params"], carry, normalize.normalize(variables["obs_stats"], obs), reset,
                                 method=method)


class Normalization:
    """What the trainer keeps for ``obs_norm`` (observations of shape ``obs_shape``) and ``reward_norm``
    (``num_agents`` running returns, the agents of every one of ``processes`` processes, discount ``gamma``);
    with both off it does nothing and compiles nothing."""

    def __init__(self, obs_norm: bool, reward_norm: bool, obs_shape: tuple[int, ...], num_agents: int, gamma: float,
                 processes: int = 1):
        self.obs_norm, self.reward_norm = obs_norm, reward_norm
        self.num_agents, self.gamma, self.processes = num_agents, gamma, processes
        self.state: dict = {}
        if obs_norm:
            self.state["obs"] = normalize.init_stats(tuple(obs_shape))
        if reward_norm:
            self.state["reward"] = normalize.init_return_scale(num_agents)

    def acting_policy(self, policy):
        """The policy the rollout and evaluation step with."""
        return NormalizedPolicy(policy) if self.obs_norm else policy

    def acting_params(self, params):
        """What the acting policy takes: ``params`` with the current observation statistics."""
        return {"params": params, "obs_stats": self.state["obs"]} if self.obs_norm else params

    def prepare_batch(self, state: dict, segment):
        """(the new state, the learner's batch) from ``state`` (self.state's structure) and the rollout's
        raw ``segment`` (see the module docstring); pure, to trace inside a jitted function. With both
        options off it returns them as they are."""
        new = dict(state)
        if "obs" in state:
            new["obs"] = normalize.update(state["obs"], segment.obs, segment.active)
            segment = segment._replace(obs=normalize.normalize(state["obs"], segment.obs))
        if "reward" in state:
            T, N = segment.rewards.shape
            P, S, A = self.processes, N // self.num_agents, self.num_agents

            def in_time_order(x):  # [T, P * S * A/P] -> [S * T, A]: segment s's steps after segment s - 1's
                return x.reshape(T, P, S, A // P).transpose(2, 0, 1, 3).reshape(S * T, A)

            ended = segment.terminals | segment.truncations
            active = None if segment.active is None else in_time_order(segment.active)
            new["reward"], scaled = normalize.scale_rewards(state["reward"], in_time_order(segment.rewards),
                                                            in_time_order(ended), self.gamma, active=active)
            segment = segment._replace(rewards=scaled.reshape(S, T, P, A // P).transpose(1, 2, 0, 3).reshape(T, N))
        return new, segment

    def metrics(self) -> dict:
        """The std the rewards were last divided by (reward scaling on), for the records."""
        if "reward" not in self.state:
            return {}
        stats = self.state["reward"].stats
        return {RETURN_STD: float(np.sqrt(np.asarray(stats.var) + normalize.EPSILON))}

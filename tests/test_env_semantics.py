"""What each env promises: episode statistics, the memory task's hidden cue, multi-agent layout,
final observations before the automatic reset."""

import numpy as np
from conftest import rollout

import jaxlab


def test_cartpole_episode_statistics_count_the_steps():
    records, infos = rollout("cartpole", 400, num_envs=6, seed=1)
    ended = records["terminals"] | records["truncations"]
    lengths, current = [], np.zeros(6, dtype=int)
    for t in range(len(ended)):
        current += 1
        lengths.extend(current[ended[t]].tolist())
        current[ended[t]] = 0
    assert sum(i.get("episodes", 0) for i in infos) == len(lengths) > 50
    mean = sum(i["episode_length"] * i["episodes"] for i in infos if i) / len(lengths)
    assert abs(mean - np.mean(lengths)) < 1e-3
    assert all(i["episode_return"] == i["episode_length"] for i in infos if i)


def test_memory_observation_reveals_the_cue_only_at_step_0():
    K, D = 4, 8
    with jaxlab.make("memory", num_envs=256, seed=0, num_cues=K, delay=D) as env:
        obs = env.reset()
        cues = obs[:, :K].argmax(axis=1)
        np.testing.assert_array_equal(obs[:, :K].sum(axis=1), 1.0)
        assert obs[:, K].sum() == 0 and len(set(cues.tolist())) == K
        for t in range(1, D + 2):
            obs, rewards, terminals, _, _ = env.step(np.zeros(256, dtype=np.int32))
            expected = np.zeros(K + 1, dtype=np.float32)
            if t == D + 1:
                expected[K] = 1.0  # the query
            np.testing.assert_array_equal(obs, np.broadcast_to(expected, obs.shape))  # same for every cue
            assert not terminals.any() and not rewards.any()
        _, rewards, terminals, truncations, info = env.step(cues.astype(np.int32))  # answer right
        assert terminals.all() and not truncations.any()
        np.testing.assert_array_equal(rewards, 1.0)
        assert info == {"episodes": 256, "episode_return": 1.0, "episode_length": D + 2.0, "success": 1.0}
        np.testing.assert_array_equal(env.observations[:, :K].sum(axis=1), 1.0)  # next episode's cue


def test_memory_constant_answer_scores_one_in_k():
    """A policy that always answers the same cue (what a memoryless policy can at best do) succeeds
    once in K. The cues do not depend on the actions, so over the K constant answers the successes
    add up to every episode exactly once."""
    K, steps, num_envs = 5, 600, 64
    rates = []
    for answer in range(K):
        with jaxlab.make("memory", num_envs=num_envs, seed=0, num_cues=K, delay=3) as env:
            env.reset()
            actions = np.full(num_envs, answer, dtype=np.int32)
            successes = episodes = 0.0
            for _ in range(steps):
                info = env.step(actions)[4]
                if info:
                    successes += info["success"] * info["episodes"]
                    episodes += info["episodes"]
                    assert info["episode_return"] == info["success"]  # reward 1 exactly when right
        assert episodes == num_envs * (steps // 5)  # D + 2 = 5 steps per episode
        rates.append(successes / episodes)
    assert all(abs(rate - 1 / K) < 0.03 for rate in rates), rates  # ~7,700 episodes each: sd 0.005
    assert abs(sum(rates) - 1.0) < 1e-4, rates


def test_target_multi_agent_layout_and_greedy_beats_random():
    apa = 5
    with jaxlab.make("target", num_envs=16, seed=0, agents_per_env=apa, max_steps=64) as env:
        assert (env.agents_per_env, env.num_agents) == (apa, 80)
        assert env.observations.shape == (80, 10) and env.rewards.shape == (80,)
        obs = env.reset()
        # Agents of one env see each other: agent 0's nearest-neighbour offset points at another agent.
        positions = (obs[:apa, 2:4] + 1) / 2
        offset = obs[0, 4:6]
        assert np.min(np.abs(positions[1:] - positions[0] - offset).sum(axis=1)) < 1e-5
        returns = {}
        for policy in ("random", "greedy"):
            env.reset(seed=1)
            rng = np.random.default_rng(0)
            total = []
            for _ in range(64):
                if policy == "random":
                    actions = rng.integers(0, 5, size=80, dtype=np.int32)
                else:
                    dx, dy = env.observations[:, 0], env.observations[:, 1]
                    actions = np.where(np.abs(dx) > np.abs(dy), np.where(dx > 0, 1, 2), np.where(dy > 0, 3, 4))
                    actions = actions.astype(np.int32)
                _, _, _, truncations, info = env.step(actions)
                if info:
                    total.append(info["episode_return"])
            assert truncations.all() and len(total) == 1
            returns[policy] = total[0]
        assert returns["greedy"] > returns["random"] + 2.0


def test_final_observations_hold_the_observation_before_reset():
    actions = np.zeros(3, dtype=np.int32)
    with jaxlab.make("cartpole", num_envs=3, seed=4, max_steps=5) as short, \
            jaxlab.make("cartpole", num_envs=3, seed=4) as long:
        short.reset()
        long.reset()
        for t in range(5):
            _, _, _, truncations, _ = short.step(actions)
            long.step(actions)
        assert truncations.all()
        np.testing.assert_array_equal(short.final_observations, long.observations)
        assert not np.array_equal(short.observations, long.observations)  # short was reset
        np.testing.assert_array_less(np.abs(short.observations), 0.0500001)

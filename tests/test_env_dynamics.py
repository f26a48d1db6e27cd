"""The C CartPole and Pendulum step exactly like Gymnasium's CartPole-v1 and Pendulum-v1."""

import numpy as np
import pytest

import jaxlab

gym = pytest.importorskip("gymnasium")


def test_cartpole_matches_gymnasium_for_1000_random_steps():
    reference = gym.make("CartPole-v1").unwrapped  # time limit handled below, as TimeLimit would
    rng = np.random.default_rng(0)
    ref_obs, _ = reference.reset(seed=0)
    with jaxlab.make("cartpole", num_envs=1, seed=0) as env:
        env.reset()
        env.set_state(0, np.append(reference.state, 0))
        np.testing.assert_array_equal(env.observations[0], ref_obs)
        episodes, tick = 0, 0
        for _ in range(1000):
            action = int(rng.integers(2))
            ref_obs, ref_reward, ref_terminated, _, _ = reference.step(action)
            tick += 1
            ref_truncated = tick >= 500 and not ref_terminated
            obs, reward, terminal, truncation, info = env.step(np.array([action], dtype=np.int32))
            assert reward[0] == ref_reward
            assert bool(terminal[0]) == ref_terminated
            assert bool(truncation[0]) == ref_truncated
            if ref_terminated or ref_truncated:
                np.testing.assert_allclose(env.final_observations[0], ref_obs, rtol=1e-5, atol=1e-6)
                assert info["episode_length"] == tick
                episodes += 1
                ref_obs, _ = reference.reset()
                tick = 0
                env.set_state(0, np.append(reference.state, 0))
            np.testing.assert_allclose(obs[0], ref_obs, rtol=1e-5, atol=1e-6)
        assert episodes > 20  # random actions end episodes every ~22 steps: resets were exercised


def test_cartpole_truncates_at_500_without_terminating():
    with jaxlab.make("cartpole", num_envs=1, seed=0) as env:
        env.reset()
        env.set_state(0, [0.0, 0.0, 0.0, 0.0, 499])  # upright and still: cannot fail in one step
        _, reward, terminal, truncation, info = env.step(np.zeros(1, dtype=np.int32))
        assert (reward[0], bool(terminal[0]), bool(truncation[0])) == (1.0, False, True)
        assert info == {"episodes": 1, "episode_return": 500.0, "episode_length": 500.0}


def test_cartpole_initial_state_is_uniform_within_005():
    with jaxlab.make("cartpole", num_envs=4096, seed=3) as env:
        obs = env.reset()
        assert np.all(np.abs(obs) <= 0.05)
        assert np.all(np.abs(obs).max(axis=0) > 0.049)  # spans the range in every component
        assert abs(float(obs.mean())) < 0.002


def test_pendulum_matches_gymnasium_for_1000_random_steps():
    reference = gym.make("Pendulum-v1").unwrapped
    rng = np.random.default_rng(1)
    ref_obs, _ = reference.reset(seed=1)
    with jaxlab.make("pendulum", num_envs=1, seed=0) as env:
        env.reset()
        env.set_state(0, np.append(reference.state, 0))
        np.testing.assert_allclose(env.observations[0], ref_obs, rtol=1e-6, atol=1e-6)
        tick = 0
        for step in range(1000):
            torque = rng.uniform(-3.0, 3.0, size=(1,)).astype(np.float32)  # beyond the bounds: clipped
            ref_obs, ref_reward, ref_terminated, _, _ = reference.step(torque)
            tick += 1
            obs, reward, terminal, truncation, info = env.step(torque.reshape(1, 1))
            assert not terminal[0] and not ref_terminated
            np.testing.assert_allclose(reward[0], ref_reward, rtol=1e-5, atol=1e-5)
            if tick == 200:
                assert truncation[0] and info["episodes"] == 1
                np.testing.assert_allclose(env.final_observations[0], ref_obs, rtol=1e-4, atol=1e-5)
                ref_obs, _ = reference.reset()
                tick = 0
                env.set_state(0, np.append(reference.state, 0))
            else:
                assert not truncation[0]
            np.testing.assert_allclose(obs[0], ref_obs, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")


def test_pendulum_initial_state_ranges():
    with jaxlab.make("pendulum", num_envs=4096, seed=3) as env:
        obs = env.reset()
        np.testing.assert_allclose(obs[:, 0] ** 2 + obs[:, 1] ** 2, 1.0, rtol=1e-5)
        assert np.all(np.abs(obs[:, 2]) <= 1.0) and np.abs(obs[:, 2]).max() > 0.99
        theta = np.arctan2(obs[:, 1], obs[:, 0])
        assert theta.min() < -3.0 and theta.max() > 3.0

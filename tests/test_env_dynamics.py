"""The C CartPole steps bit for bit like Gymnasium's CartPole-v1; Pendulum like Pendulum-v1 (to float32
tolerance)."""

import numpy as np
import pytest

import jaxlab

gym = pytest.importorskip("gymnasium")


def _same_float32(a, b) -> bool:
    """Bit-identical float32 arrays."""
    return np.asarray(a, np.float32).tobytes() == np.asarray(b, np.float32).tobytes()


def _balance(obs, rng, noise: float) -> int:
    """A noisy balancing controller: push toward where the pole leans, plus Gaussian noise (larger
    noise: earlier falls)."""
    x, x_dot, theta, theta_dot = (float(v) for v in obs)
    drive = theta + 0.5 * theta_dot + 0.01 * x + 0.05 * x_dot + noise * rng.standard_normal()
    return int(drive > 0)


def test_cartpole_is_gymnasium_bit_for_bit_over_long_episodes():
    """20 episodes from Gymnasium's own reset states, actions from a noisy balancing controller, up to
    the 500-step limit: every float32 observation is bit-identical, and every episode ends on the same
    step the same way (on the limit step where the pole also falls, Gymnasium's TimeLimit says
    terminated and truncated, jaxlab terminal only)."""
    reference = gym.make("CartPole-v1")  # with its TimeLimit(500)
    rng = np.random.default_rng(0)
    ends = []
    with jaxlab.make("cartpole", num_envs=1, seed=0) as env:
        env.reset()
        for episode in range(20):
            ref_obs, _ = reference.reset(seed=1000 + episode)
            env.set_state(0, np.append(reference.unwrapped.state, 0))
            assert _same_float32(env.observations[0], ref_obs)
            noise = (0.0, 0.2, 0.3, 0.3, 0.4)[episode % 5]
            for t in range(1, 501):
                action = _balance(ref_obs, rng, noise)
                ref_obs, ref_reward, ref_terminated, ref_truncated, _ = reference.step(action)
                obs, reward, terminal, truncation, info = env.step(np.array([action], dtype=np.int32))
                ended = bool(terminal[0] or truncation[0])
                last = env.final_observations[0] if ended else obs[0]
                assert _same_float32(last, ref_obs), (
                    f"episode {episode} step {t}: jaxlab {last.tolist()} gymnasium {ref_obs.tolist()}")
                assert reward[0] == ref_reward
                assert bool(terminal[0]) == ref_terminated, f"episode {episode} step {t}"
                assert bool(truncation[0]) == (ref_truncated and not ref_terminated), f"episode {episode} step {t}"
                if ref_terminated or ref_truncated:
                    assert info["episode_length"] == t
                    ends.append((t, "terminal" if ref_terminated else "truncated"))
                    break
    lengths = [t for t, _ in ends]
    assert len(ends) == 20 and sum(kind == "truncated" for _, kind in ends) >= 4  # full 500-step episodes
    assert sum(kind == "terminal" and t >= 150 for t, kind in ends) >= 3, ends  # long, then fell
    assert sum(lengths) > 5000, ends


def test_cartpole_matches_gymnasium_bit_for_bit_for_1000_random_steps():
    reference = gym.make("CartPole-v1").unwrapped  # time limit handled below, as TimeLimit would
    rng = np.random.default_rng(0)
    ref_obs, _ = reference.reset(seed=0)
    with jaxlab.make("cartpole", num_envs=1, seed=0) as env:
        env.reset()
        env.set_state(0, np.append(reference.state, 0))
        assert _same_float32(env.observations[0], ref_obs)
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
                assert _same_float32(env.final_observations[0], ref_obs)
                assert info["episode_length"] == tick
                episodes += 1
                ref_obs, _ = reference.reset()
                tick = 0
                env.set_state(0, np.append(reference.state, 0))
            assert _same_float32(obs[0], ref_obs)
        assert episodes > 20  # random actions end episodes every ~22 steps: resets were exercised


def test_cartpole_truncates_at_500_without_terminating():
    with jaxlab.make("cartpole", num_envs=1, seed=0) as env:
        env.reset()
        env.set_state(0, [0.0, 0.0, 0.0, 0.0, 499])  # upright and still: cannot fail in one step
        _, reward, terminal, truncation, info = env.step(np.zeros(1, dtype=np.int32))
        assert (reward[0], bool(terminal[0]), bool(truncation[0])) == (1.0, False, True)
        assert info == {"episodes": 1, "episode_return": 500.0, "episode_length": 500.0}


def test_cartpole_fall_on_the_limit_step_is_terminal_only():
    """Gymnasium's TimeLimit reports terminated and truncated when the pole falls on step 500; jaxlab
    reports terminal only (never both; a learner must not bootstrap there either way)."""
    state = [0.0, 0.0, 0.2, 1.0]  # leaning and falling: past 12 degrees after one step
    reference = gym.make("CartPole-v1")
    reference.reset(seed=0)
    reference.unwrapped.state = np.array(state)
    reference._elapsed_steps = 499  # the TimeLimit wrapper's step counter
    _, _, ref_terminated, ref_truncated, _ = reference.step(1)
    assert ref_terminated and ref_truncated
    with jaxlab.make("cartpole", num_envs=1, seed=0) as env:
        env.reset()
        env.set_state(0, [*state, 499])
        _, _, terminal, truncation, info = env.step(np.ones(1, dtype=np.int32))
        assert (bool(terminal[0]), bool(truncation[0])) == (True, False) and info["episode_length"] == 500


def test_cartpole_initial_state_is_uniform_within_005():
    with jaxlab.make("cartpole", num_envs=4096, seed=3) as env:
        obs = env.reset()
        assert np.all(np.abs(obs) <= 0.05)
        assert np.all(np.abs(obs).max(axis=0) > 0.049)  # spans the range in every component
        assert abs(float(obs.mean())) < 0.002


def test_pendulum_matches_gymnasium_bit_for_bit_for_1000_random_steps():
    """Observations and rewards (Gymnasium's float64 reward as float32) bit for bit, torques beyond the
    bounds included (clipped as Gymnasium clips them), across five truncations."""
    reference = gym.make("Pendulum-v1").unwrapped
    rng = np.random.default_rng(1)
    ref_obs, _ = reference.reset(seed=1)
    with jaxlab.make("pendulum", num_envs=1, seed=0) as env:
        env.reset()
        env.set_state(0, np.append(reference.state, 0))
        assert _same_float32(env.observations[0], ref_obs)
        tick = 0
        for step in range(1000):
            torque = rng.uniform(-3.0, 3.0, size=(1,)).astype(np.float32)  # beyond the bounds: clipped
            ref_obs, ref_reward, ref_terminated, _, _ = reference.step(torque)
            tick += 1
            obs, reward, terminal, truncation, info = env.step(torque.reshape(1, 1))
            assert not terminal[0] and not ref_terminated
            assert reward[0] == np.float32(ref_reward), f"step {step}"
            if tick == 200:
                assert truncation[0] and info["episodes"] == 1
                assert _same_float32(env.final_observations[0], ref_obs)
                ref_obs, _ = reference.reset()
                tick = 0
                env.set_state(0, np.append(reference.state, 0))
            else:
                assert not truncation[0]
            assert _same_float32(obs[0], ref_obs), f"step {step}"


def test_pendulum_initial_state_ranges():
    with jaxlab.make("pendulum", num_envs=4096, seed=3) as env:
        obs = env.reset()
        np.testing.assert_allclose(obs[:, 0] ** 2 + obs[:, 1] ** 2, 1.0, rtol=1e-5)
        assert np.all(np.abs(obs[:, 2]) <= 1.0) and np.abs(obs[:, 2]).max() > 0.99
        theta = np.arctan2(obs[:, 1], obs[:, 0])
        assert theta.min() < -3.0 and theta.max() > 3.0

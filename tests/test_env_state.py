"""Saving and loading the C envs' state: a plain byte copy that continues the same trajectories."""

import numpy as np
import pytest

import jaxlab
from conftest import random_actions
from jaxlab.env import env_types


@pytest.mark.parametrize("name", list(env_types()))
def test_loaded_state_continues_exactly_in_another_vector(name):
    rng = np.random.default_rng(0)
    with jaxlab.make(name, num_envs=5, seed=3) as env, jaxlab.make(name, num_envs=5, seed=99, num_threads=2) as other:
        env.reset()
        for _ in range(137):  # past some episode ends
            env.step(random_actions(env, rng))
        state = env.save_state()
        other.reset()
        other.load_state(state)
        np.testing.assert_array_equal(other.observations, env.observations)
        for _ in range(300):
            actions = random_actions(env, rng)
            a = [x.copy() if isinstance(x, np.ndarray) else x for x in env.step(actions)]
            b = other.step(actions.copy())
            for x, y in zip(a[:4], b[:4], strict=True):
                np.testing.assert_array_equal(x, y)
            assert a[4] == b[4]
            np.testing.assert_array_equal(env.final_observations, other.final_observations)


def test_state_is_checked_before_anything_is_loaded():
    with jaxlab.make("target", num_envs=4, seed=1) as env:
        env.reset()
        state = env.save_state()
        mismatches = [
            (jaxlab.make("target", num_envs=3), r"state holds 4 envs of \d+ bytes, this vector 3 envs"),
            (jaxlab.make("target", num_envs=4, agents_per_env=4), r"saved with agents_per_env=8, this vector has 4"),
            (jaxlab.make("cartpole", num_envs=4), r"state is of env 'target', not 'cartpole'"),
        ]
        for other, message in mismatches:
            with other:
                other.reset()
                before = other.save_state()["cenv"]
                with pytest.raises(ValueError, match=message):
                    other.load_state(state)
                np.testing.assert_array_equal(other.save_state()["cenv"], before)  # nothing was loaded
        damaged = dict(state, cenv=state["cenv"].copy())
        damaged["cenv"][8] += 1  # the ABI version field
        with pytest.raises(ValueError, match=r"state saved by cenv ABI \d+, this library is ABI"):
            env.load_state(damaged)
        with pytest.raises(ValueError, match=r"bad magic"):
            env.load_state(dict(state, cenv=np.zeros(300, np.uint8)))
        with pytest.raises(ValueError, match=r"state is \d+ bytes, expected"):
            env.load_state(dict(state, cenv=state["cenv"][:-1]))


def test_a_state_with_wrong_buffers_changes_nothing():
    """The C state is checked (cenv_check_state) and the buffers' shapes too before anything loads."""
    with jaxlab.make("cartpole", num_envs=4, seed=1) as env, jaxlab.make("cartpole", num_envs=4, seed=2) as other:
        env.reset()
        other.reset()
        state = env.save_state()
        before = other.save_state()
        with pytest.raises(ValueError, match=r"final_observations has shape \(3, 4\), this env \(4, 4\)"):
            other.load_state(dict(state, final_observations=state["final_observations"][:3]))
        after = other.save_state()
        for name in before:
            np.testing.assert_array_equal(after[name], before[name])


def test_saving_into_a_short_buffer_says_how_many_bytes_it_needs():
    import ctypes

    with jaxlab.make("cartpole", num_envs=2) as env:
        env.reset()
        lib, handle = env._lib, env._handle
        needed = lib.cenv_state_size(handle)
        buffer = (ctypes.c_uint8 * 8)()
        assert lib.cenv_save_state(handle, buffer, 8) < 0
        assert lib.cenv_error(handle).decode() == f"cenv_save_state: the buffer has 8 bytes, the state needs {needed}"

"""Bad input stops at the Python boundary with a clear exception, never a crash."""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxlab


def test_unknown_env_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown env 'cartpol'.*cartpole, pendulum, memory, target.*Did you mean 'cartpole'"):
        jaxlab.make("cartpol")


def test_unknown_env_suggests_the_headers_on_the_env_path(tmp_path, monkeypatch):
    (tmp_path / "walker.h").write_text("/* a user's env */\n")
    monkeypatch.setenv("JAXLAB_ENV_PATH", str(tmp_path))
    with pytest.raises(ValueError, match=r"unknown env 'dron'; known envs: cartpole, .*lure, walker, cards, drone\. "
                                         r"Did you mean 'drone'\?"):
        jaxlab.make("dron")
    with pytest.raises(ValueError, match=r"Did you mean 'walker'\?"):
        jaxlab.make("walkr")


def test_unknown_env_says_how_python_envs_are_named():
    """A Gymnasium user's first try, `jaxlab train CartPole-v1` or MODULE:ID without the prefix, was told the
    C envs' names and nothing of the gymnasium:/pettingzoo: prefixes."""
    for name in ("CartPole-v1", "myenvs:Corridor-v0"):
        with pytest.raises(ValueError, match=re.escape(
                "A Gymnasium or PettingZoo env is named with its prefix: gymnasium:ID (gymnasium:MODULE:ID for an "
                "id your module registers) or pettingzoo:MODULE.")):
            jaxlab.make(name)


def test_unknown_parameter_lists_the_valid_ones():
    with pytest.raises(TypeError, match=r"no parameter 'cues'.*num_cues \(default 4\), delay \(default 8\)"):
        jaxlab.make("memory", cues=3)


@pytest.mark.parametrize("value", ["4", 4.5, 4.0, True, None])
def test_ill_typed_parameter(value):
    with pytest.raises(TypeError, match=r"parameter num_cues=.* must be an integer, e.g. num_cues=4"):
        jaxlab.make("memory", num_cues=value)


def test_out_of_range_parameter_names_the_range():
    with pytest.raises(ValueError, match=r"agents_per_env=65 is out of range: it must be in \[1, 64\]"):
        jaxlab.make("target", agents_per_env=65)


@pytest.mark.parametrize("kwargs, message", [
    ({"num_envs": 0}, r"num_envs=0 must be an integer >= 1"),
    ({"num_envs": 2.0}, r"num_envs=2.0 must be an integer"),
    ({"num_threads": 0}, r"num_threads=0 must be an integer >= 1"),
    ({"num_envs": 3, "num_threads": 4}, r"num_threads=4 must be between 1 and 3"),
    ({"seed": -1}, r"seed=-1 must be an integer in \[0, 2\*\*64\)"),
])
def test_bad_vector_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        jaxlab.make("cartpole", **kwargs)


def test_wrong_action_dtype_says_how_to_convert():
    with jaxlab.make("cartpole", num_envs=4) as env:
        env.reset()
        with pytest.raises(TypeError, match=r"must have dtype int32, got int64; convert with actions.astype\(np.int32\)"):
            env.step(np.zeros(4, dtype=np.int64))


def test_wrong_action_shape():
    with jaxlab.make("cartpole", num_envs=4) as env:
        env.reset()
        with pytest.raises(ValueError, match=r"must have shape \(4,\) \(4 agents\), got \(3,\)"):
            env.step(np.zeros(3, dtype=np.int32))


def test_non_contiguous_actions():
    with jaxlab.make("pendulum", num_envs=4) as env:
        env.reset()
        strided = np.zeros((4, 2), dtype=np.float32)[:, :1]
        with pytest.raises(ValueError, match=r"must be C-contiguous.*np.ascontiguousarray"):
            env.step(strided)


@pytest.mark.parametrize("bad", [2, -1, 2**31 - 1])
def test_out_of_range_discrete_action_names_agent_and_value(bad):
    with jaxlab.make("cartpole", num_envs=8) as env:
        env.reset()
        before = env.observations.copy()
        actions = np.zeros(8, dtype=np.int32)
        actions[6] = bad
        with pytest.raises(ValueError, match=rf"agent 6 has action {bad}, out of range for Discrete\(2\): it must be in \[0, 1\]"):
            env.step(actions)
        np.testing.assert_array_equal(env.observations, before)  # nothing was stepped


def test_target_action_error_names_the_flat_agent_index():
    with jaxlab.make("target", num_envs=2, agents_per_env=3) as env:
        env.reset()
        actions = np.zeros(6, dtype=np.int32)
        actions[4] = 5
        with pytest.raises(ValueError, match=r"agent 4 has action 5, out of range for Discrete\(5\)"):
            env.step(actions)


def test_nan_continuous_action():
    with jaxlab.make("pendulum", num_envs=3) as env:
        env.reset()
        actions = np.zeros((3, 1), dtype=np.float32)
        actions[2, 0] = np.nan
        with pytest.raises(ValueError, match=r"agent 2 component 0 has a NaN action; actions for .pendulum. must be finite"):
            env.step(actions)


def test_use_after_close():
    env = jaxlab.make("cartpole", num_envs=2)
    env.reset()
    env.close()
    env.close()  # twice is fine
    assert env.closed
    for call in (lambda: env.step(np.zeros(2, dtype=np.int32)), env.reset):
        with pytest.raises(RuntimeError, match=r"VecEnv 'cartpole' is closed; create a new one"):
            call()


def test_context_manager_closes():
    with jaxlab.make("memory") as env:
        env.reset()
    assert env.closed


def test_lists_and_jax_arrays_are_accepted_when_well_typed():
    import jax.numpy as jnp

    with jaxlab.make("cartpole", num_envs=2) as env:
        env.reset()
        env.step(jnp.zeros(2, dtype=jnp.int32))
        with pytest.raises(TypeError, match="must have dtype int32, got int64"):
            env.step([0, 1])


def test_step_before_any_reset_says_to_reset_first():
    with jaxlab.make("cartpole", num_envs=2) as env:
        with pytest.raises(RuntimeError, match=r"VecEnv 'cartpole' was stepped before any reset: .*call reset\(\) first"):
            env.step(np.zeros(2, dtype=np.int32))
        np.testing.assert_array_equal(env.observations, 0.0)  # nothing was stepped
        env.reset()
        env.step(np.zeros(2, dtype=np.int32))


def test_loading_a_saved_state_counts_as_a_reset():
    with jaxlab.make("memory", num_envs=3, seed=1) as env, jaxlab.make("memory", num_envs=3, seed=2) as other:
        env.reset()
        env.step(np.zeros(3, dtype=np.int32))
        other.load_state(env.save_state())
        np.testing.assert_array_equal(other.step(np.zeros(3, dtype=np.int32))[0],
                                      env.step(np.zeros(3, dtype=np.int32))[0])


def test_render_and_load_state_name_a_bad_argument():
    with jaxlab.make("cartpole", num_envs=3, seed=1) as env:
        env.reset()
        for index in (1.5, 3, -1, True):  # 1.5 was rendered as env 1; 3 was a bare "out of range"
            with pytest.raises(ValueError, match=r"render index=.* must be an env index in \[0, 3\)"):
                env.render(index)
        assert env.render(np.int64(2)).startswith("|")
        saved = env.save_state()
        with pytest.raises(ValueError, match=r"it has no cenv, outputs, final_observations; pass what save_state"):
            env.load_state({})  # was a bare KeyError: 'cenv'
        with pytest.raises(ValueError, match=r"it has no outputs, final_observations"):
            env.load_state({"cenv": saved["cenv"]})
        env.load_state(saved)


@pytest.mark.parametrize("name, physical", [("cartpole", [0.0, 0.0, 0.0, 0.0]), ("pendulum", [0.0, 0.0])])
def test_set_state_refuses_a_tick_that_is_not_a_count_of_steps(name, physical):
    """The tick (the last value) was converted to an int unchecked: NaN, an infinity or 1e300 is
    undefined behaviour there, and a tick near INT_MAX overflowed on the next step."""
    with jaxlab.make(name, num_envs=1) as env:
        env.reset()
        for tick in (np.nan, np.inf, -1.0, 1e300, 2.0**31 - 1):
            with pytest.raises(RuntimeError, match=f"env '{name}' rejects"):
                env.set_state(0, [*physical, tick])
        env.set_state(0, [*physical, 7])
        env.set_state(0, [*physical, 1e9])


@pytest.mark.parametrize("name, physical", [("cartpole", [0.0, 0.0, 0.0, 0.0]), ("pendulum", [0.0, 0.0])])
def test_set_state_refuses_a_physical_value_that_is_not_finite_and_names_it(name, physical):
    """A NaN or infinite x, velocity, angle or spin was taken: a NaN cartpole never ended its episode
    (every comparison with the limits is false) and stepped NaN observations to its time limit, and a
    pendulum's observations stayed NaN. The hook refused 'N values' without saying which one was bad."""
    with jaxlab.make(name, num_envs=2) as env:
        env.reset()
        for k in range(len(physical)):
            for bad in (np.nan, np.inf, -np.inf):
                state = list(physical)
                state[k] = bad
                with pytest.raises(RuntimeError, match=rf"env '{name}' rejects {len(physical)} values: "
                                                       rf"state\[{k}\] = {bad} is not finite; pass finite numbers"):
                    env.set_state(1, state)
                with pytest.raises(RuntimeError, match=rf"state\[{k}\] = {bad} is not finite"):
                    env.set_state(0, [*state, 3])  # with a tick too
        with pytest.raises(RuntimeError, match=r"state\[0\] = nan, state\[1\] = inf are not finite"):
            env.set_state(0, [np.nan, np.inf, *physical[2:]])
        with pytest.raises(RuntimeError, match=rf"rejects {len(physical) - 1} values$"):  # none to name
            env.set_state(0, physical[1:])
        with pytest.raises(RuntimeError, match=r"env index 2 out of range or unbound$"):  # not the values
            env.set_state(2, [np.nan, *physical[1:]])
        env.set_state(1, [1e300, *physical[1:]])  # far, but a number
        assert np.isfinite(env.observations[0]).all()


def test_cartpole_renders_a_far_or_nan_position_without_writing_outside_the_track():
    """A far x is drawn at the track's end; a NaN one (set_state refuses it, but a saved state can hold
    one: here written into the bytes of x) was converted to the cart's column unchecked, which wrote
    outside the track (a crash: hence a child process)."""
    code = ("import jaxlab, numpy as np\n"
            "with jaxlab.make('cartpole', num_envs=1) as env:\n"
            "    env.reset()\n"
            "    env.set_state(0, [0.0, 0.0, 0.0, 0.0])\n"
            "    zero = env.save_state()\n"
            "    env.set_state(0, [2.0, 0.0, 0.0, 0.0])\n"
            "    at = np.flatnonzero(zero['cenv'] != env.save_state()['cenv'])\n"
            "    at = at[0] - at[0] % 8\n"  # the first byte of x that differs; x is an aligned double
            "    zero['cenv'][at:at + 8] = np.frombuffer(np.float64(np.nan).tobytes(), np.uint8)\n"
            "    env.load_state(zero)\n"
            "    print(env.render(0))\n"
            "    for x in (-1e300, 1e300, 0.0):\n"
            "        env.set_state(0, [x, 0.0, 0.0, 0.0])\n"
            "        print(env.render(0))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(Path(jaxlab.__file__).parents[1])})
    assert result.returncode == 0, result.stderr
    assert "nan" in result.stdout.splitlines()[0], result.stdout  # the NaN state was loaded and drawn
    tracks = [line.split("|")[1] for line in result.stdout.splitlines()]
    assert tracks == ["-" * 41, "#" + "-" * 40, "-" * 40 + "#", "-" * 20 + "#" + "-" * 20], result.stdout

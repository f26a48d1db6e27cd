"""spaces_of: an env type's spaces for given parameters, from a C handle that has no envs
(cenv_describe), read by the same code that describes a VecEnv."""

import numpy as np
import pytest
from conftest import ENV_NAMES

import jaxlab
from jaxlab.env import EnvSpaces, library, spaces_of


@pytest.mark.parametrize("name", ENV_NAMES)
def test_spaces_of_matches_a_created_vecenv(name):
    spaces = spaces_of(name)
    assert isinstance(spaces, EnvSpaces)
    with jaxlab.make(name, num_envs=3) as env:
        assert spaces == env.spaces
        assert (spaces.agents_per_env, spaces.observation_space, spaces.action_space, spaces.has_mask) == (
            env.agents_per_env, env.observation_space, env.action_space, env.has_mask)


def test_spaces_of_follows_the_parameters():
    target = spaces_of("target", agents_per_env=5)
    assert target.agents_per_env == 5 and target.observation_space.shape == (10,)
    memory = spaces_of("memory", num_cues=6)
    assert str(memory.action_space) == "Discrete(6)" and memory.observation_space.shape == (7,)
    assert memory.observation_space.dtype == np.float32 and not memory.has_mask and memory.mask_width == 0
    assert str(spaces_of("pendulum").action_space) == "Box(-2, 2, (1,), float32)"


def test_a_box_shows_as_its_bounds_and_shape_in_a_repl():
    """repr (what a REPL and an EnvSpaces show) is the short form, not every bound of a 334-wide
    observation twice, as the dataclass wrote it."""
    spot = spaces_of("spot")
    assert repr(spot.observation_space) == "Box(0, 255, (8, 8, 3), uint8)"
    assert "observation_space=Box(-inf, inf, (10,), float32)" in repr(spaces_of("target"))


@pytest.mark.parametrize("name, params, error, message", [
    ("cartpol", {}, ValueError, r"unknown env 'cartpol'"),
    ("target", {"agents_per_env": 65}, ValueError, r"agents_per_env=65 is out of range"),
    ("memory", {"cues": 3}, TypeError, r"no parameter 'cues'"),
])
def test_spaces_of_rejects_what_make_rejects(name, params, error, message):
    with pytest.raises(error, match=message):
        spaces_of(name, **params)


def test_a_describe_handle_refuses_everything_but_the_space_accessors():
    lib = library.load()
    codes = library.constants()
    kind = jaxlab.env.env_type("cartpole")
    params = (library.c_double * 1)(500.0)
    err = library.ctypes.create_string_buffer(codes["ERROR_LEN"])
    handle = lib.cenv_describe(kind.index, params, 1, err, len(err))
    assert handle
    try:
        assert lib.cenv_agents_per_env(handle) == 1 and lib.cenv_obs_ndim(handle) == 1
        assert lib.cenv_step(handle) == codes["ERR_ARGUMENT"]
        assert b"only describes env 'cartpole'" in lib.cenv_error(handle)
        assert lib.cenv_reset(handle, 0, 0) == codes["ERR_ARGUMENT"]
        assert lib.cenv_state_size(handle) == codes["ERR_ARGUMENT"]
    finally:
        lib.cenv_close(handle)
    params[0] = 0.5
    assert not lib.cenv_describe(kind.index, params, 1, err, len(err))
    assert b"max_steps=0.5 must be an integer" in err.value

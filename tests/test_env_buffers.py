"""Buffers are allocated once, page-aligned, and returned as views."""

import mmap

import numpy as np

import jaxlab
from jaxlab.env import aligned_empty


def test_buffers_are_page_aligned_views_that_never_move():
    with jaxlab.make("target", num_envs=3, seed=0) as env:
        buffers = [env.observations, env.actions, env.rewards, env.terminals, env.truncations,
                   env.final_observations]
        addresses = [b.ctypes.data for b in buffers]
        # the step's outputs are blocks of one page-aligned buffer (one transfer to the device);
        # actions and final observations are buffers of their own
        for b in (env.buffers.outputs, env.actions, env.final_observations):
            assert b.ctypes.data % mmap.PAGESIZE == 0
        start = env.buffers.outputs.ctypes.data
        blocks = {name: offset for name, offset, _, _ in env.buffers.layout}
        for name in ("observations", "rewards", "terminals", "truncations"):
            assert getattr(env, name).ctypes.data == start + blocks[name] and blocks[name] % 64 == 0
        assert all(b.flags.c_contiguous for b in buffers)
        obs = env.reset()
        assert obs is env.observations
        rng = np.random.default_rng(0)
        for _ in range(200):
            obs, rewards, terminals, truncations, _ = env.step(env.action_space.sample(rng, env.num_agents))
        assert (obs, rewards, terminals, truncations) == (env.observations, env.rewards, env.terminals,
                                                          env.truncations)
        assert [b.ctypes.data for b in buffers] == addresses


def test_writing_the_action_buffer_in_place_then_step_without_arguments():
    with jaxlab.make("cartpole", num_envs=2, seed=0) as a, jaxlab.make("cartpole", num_envs=2, seed=0) as b:
        a.reset()
        b.reset()
        a.actions[:] = [1, 0]
        a.step()
        b.step(np.array([1, 0], dtype=np.int32))
        np.testing.assert_array_equal(a.observations, b.observations)


def test_spaces_and_dtypes():
    with jaxlab.make("pendulum", num_envs=2) as env:
        assert str(env.action_space) == "Box(-2, 2, (1,), float32)"
        assert env.actions.dtype == np.float32 and env.actions.shape == (2, 1)
        assert env.observation_space.shape == (3,)
        assert env.terminals.dtype == np.bool_ and env.rewards.dtype == np.float32
    with jaxlab.make("memory", num_cues=6) as env:
        assert str(env.action_space) == "Discrete(6)" and env.observation_space.shape == (7,)


def test_aligned_empty_alignment_and_shape():
    a = aligned_empty((3, 5), np.float32, alignment=256)
    assert a.shape == (3, 5) and a.ctypes.data % 256 == 0 and a.flags.c_contiguous

"""Tests of the corridor env (written by `jaxlab new-env`; run them with `pytest test_corridor.py`).
They build corridor.h from this folder with jaxlab's SDK; edit them as your env grows."""

from pathlib import Path

import numpy as np

import jaxlab
from jaxlab.sdk import check_overruns

HEADER = Path(__file__).with_name("corridor.h")


def test_walking_right_reaches_the_goal_and_terminates():
    with jaxlab.make(str(HEADER), num_envs=4, seed=0, length=5) as env:
        env.reset()
        right = np.full(env.num_agents, 2, dtype=np.int32)
        reached = np.zeros(env.num_agents, bool)
        for _ in range(5):  # every agent starts in cell 0 or 1: at most 5 steps to the goal
            _, rewards, terminals, truncations, info = env.step(right)
            assert (rewards[terminals] == 1.0).all() and not truncations.any()
            if info:
                assert info["reached_goal"] == 1.0
            reached |= terminals
        assert reached.all()


def test_standing_still_is_truncated_at_max_steps():
    with jaxlab.make(str(HEADER), num_envs=2, seed=0, max_steps=10) as env:
        env.reset()
        stay = np.ones(env.num_agents, dtype=np.int32)
        for _ in range(9):
            assert not env.step(stay)[3].any()
        _, _, terminals, truncations, info = env.step(stay)
        assert truncations.all() and not terminals.any() and info["reached_goal"] == 0.0


def test_the_same_seed_gives_the_same_trajectory_and_state_round_trips():
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 3, 8, dtype=np.int32) for _ in range(50)]
    with jaxlab.make(str(HEADER), num_envs=8, seed=3) as a, jaxlab.make(str(HEADER), num_envs=8, seed=3) as b:
        a.reset()
        b.reset()
        for step, act in enumerate(actions):
            if step == 25:
                b.load_state(a.save_state())  # a checkpoint of the env, restored exactly
            np.testing.assert_array_equal(a.step(act)[0], b.step(act)[0])


def test_render_and_pixels_draw_the_agent_and_the_goal():
    with jaxlab.make(str(HEADER), num_envs=1) as env:
        env.reset()
        frame = env.render(0)
        assert "@" in frame and frame.count("G") == 1
        picture = env.pixels(0, 240, 60)  # uint8[60, 240, 3]
        blue = (picture == [0x33, 0x66, 0xcc]).all(axis=2).sum()
        assert picture.shape == (60, 240, 3) and blue > 10


def test_it_writes_only_its_own_rows_of_each_buffer():
    """In a vector an env's rows lie before the next env's: a write past them (an index off by one) lands
    there without a word. This steps the env alone with guard bytes around each buffer it writes and its
    actions (which it must only read), with its default parameters and each at either end of its range."""
    check_overruns(str(HEADER))

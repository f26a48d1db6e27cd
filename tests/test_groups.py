"""Agent groups (vec.groups): the policy call of one group overlaps the C step of another, with the
same calls in the same order as stepping the groups one after the other, so results are bit for bit
equal; every group's env slice, carry and checkpointed state is its own."""

import jax
import numpy as np
import pytest

from jaxlab.config import ConfigError, load_config
from jaxlab.run.loop import train_loop
from jaxlab.train.trainer import Trainer


def config_with(*flags):
    config, _ = load_config("target", flags=["--vec.num-envs", "8", "--env.agents-per-env", "2",
                                             "--train.bptt-horizon", "8", "--train.minibatch-size", "32",
                                             "--policy.hidden-size", "16", "--train.total-timesteps", "640",
                                             "--vec.groups", "2", *flags])
    return config


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def test_overlapped_groups_give_bit_for_bit_the_results_of_serial_groups():
    config = config_with()
    with Trainer(config) as overlapped, Trainer(config) as serial:
        serial.rollout.overlap = False
        assert overlapped.rollout.overlap and len(overlapped.envs) == 2 and overlapped.env.num_envs == 4
        assert not overlapped.rollout.prefetch_actions  # a CPU backend: nothing to prefetch
        overlapped.rollout.prefetch_actions = True  # as on an accelerator: each action's copy starts early
        for _ in range(3):
            records = [train_loop(t, updates=1)[0] for t in (overlapped, serial)]
            for key in ("policy_loss", "value_loss", "episode_return", "episodes"):
                assert records[0][key] == records[1][key], key
        for a, b in zip(leaves(overlapped.checkpoint_state()), leaves(serial.checkpoint_state()), strict=True):
            np.testing.assert_array_equal(a, b)


def test_each_group_steps_its_own_slice_of_envs():
    with Trainer(config_with("--vec.groups", "4")) as trainer:
        assert [env.num_envs for env in trainer.envs] == [2, 2, 2, 2]
        trainer.evaluate()
        segment = trainer.segment
        assert segment.obs.shape[:2] == (8, 16) and segment.start_carry[0].shape == (16, 16)
        observations = [env.observations.copy() for env in trainer.envs]
        assert not any(np.array_equal(observations[0], o) for o in observations[1:])  # own seeds


def test_groups_must_divide_the_envs():
    with pytest.raises(ConfigError, match=r"vec.groups=3 must divide vec.num_envs=8 .*e.g. --vec.groups 2"):
        Trainer(config_with("--vec.groups", "3"))


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_no_two_envs_of_any_groups_share_a_random_stream(seed):
    """cenv seeds env i of a VecEnv seeded s from s ^ (0xD1B54A32D192ED03 * (i + 1)): group seeds that
    were multiples of that constant (seed 0: group g's was g * it) gave env g - 1 of every group g the
    same stream, hence the same episode starts."""
    import jaxlab
    from jaxlab.train.trainer import group_seed

    rows = []
    for group in range(6):
        with jaxlab.make("cartpole", num_envs=8, seed=group_seed(seed, group)) as env:
            rows += [tuple(row) for row in env.reset().tolist()]
    assert len(set(rows)) == len(rows)

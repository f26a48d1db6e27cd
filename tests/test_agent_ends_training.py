"""Per-agent episode ends in training, by value (the env is tests/agent_ends.py): the LSTM carry is reset
for the agent that ended and no other, GAE is cut for that agent only, and with waiting agents the
update does not learn from their rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_ends import build
from jaxlab.agent import ppo
from jaxlab.agent.policy import zero_carry
from jaxlab.config import load_config
from jaxlab.train.trainer import Trainer


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return build(tmp_path_factory.mktemp("relay"))


def trainer_for(name, library, *flags):
    config, _ = load_config(name, flags=["--env.library", library, "--vec.num-envs", "2", "--train.bptt-horizon",
                                         "12", "--train.minibatch-size", "24", "--policy.hidden-size", "8",
                                         "--train.total-timesteps", "720", "--train.gamma", "0.9",
                                         "--train.gae-lambda", "0.8",
                                         # raw observations and rewards: these tests check them by value
                                         "--train.obs-norm", "false", "--train.reward-scale", "1", *flags])
    return Trainer(config)


def test_the_carry_is_reset_for_the_agent_that_ended_and_no_other(library):
    with trainer_for("relay_respawn", library) as trainer:
        segment, _ = trainer.rollout.collect(trainer.state.params)
        terminals, resets = np.asarray(segment.terminals), np.asarray(segment.resets)
        step = np.arange(1, 13)[:, None]
        ends = step % (2 * (np.arange(6) % 3 + 1)) == 0  # [T, A]: agent a ends every 2(a + 1) steps
        np.testing.assert_array_equal(terminals, ends)
        np.testing.assert_array_equal(resets[1:], ends[:-1])  # the carry is zeroed after the agent's own end
        A, H = 6, 8
        for t in range(1, 12):  # the value each agent would have with a fresh carry at step t
            _, _, fresh, _ = trainer.policy.apply(trainer.state.params, zero_carry(A, H), segment.obs[t],
                                                  jnp.ones(A, bool))
            values = np.asarray(segment.values[t])
            np.testing.assert_allclose(values[resets[t]], np.asarray(fresh)[resets[t]], rtol=1e-5, atol=1e-6)
            assert (np.abs(values[~resets[t]] - np.asarray(fresh)[~resets[t]]) > 1e-6).all(), t


def test_gae_is_cut_for_the_agent_that_ended_only(library):
    with trainer_for("relay_respawn", library) as trainer:
        segment, _ = trainer.rollout.collect(trainer.state.params)
    gamma, lam = 0.9, 0.8
    advantages, _ = ppo.gae(segment.rewards, segment.values, segment.terminals, segment.truncations,
                            segment.bootstrap_values, segment.next_values, gamma, lam)
    advantages, values = np.asarray(advantages, np.float64), np.asarray(segment.values, np.float64)
    following = np.concatenate([values[1:], np.asarray(segment.next_values)[None]])
    # at step 2 (t = 1) agent 0 ends: its advantage is r - V, nothing after it counts
    assert advantages[1, 0] == pytest.approx(1.0 - values[1, 0], abs=1e-5)
    # the other agents of that env go on: delta plus the discounted advantage of their next step
    for a in (1, 2):
        delta = 1.0 + gamma * following[1, a] - values[1, a]
        assert advantages[1, a] == pytest.approx(delta + gamma * lam * advantages[2, a], abs=1e-5)
    # agent 2 ends at step 6 (t = 5) and step 12 (t = 11): cut there, nowhere else
    assert advantages[5, 2] == pytest.approx(1.0 - values[5, 2], abs=1e-5)
    delta = 1.0 + gamma * following[4, 2] - values[4, 2]
    assert advantages[4, 2] == pytest.approx(delta + gamma * lam * advantages[5, 2], abs=1e-5)


@pytest.mark.parametrize("norm", [[], ["--train.obs-norm", "true", "--train.reward-scale", "auto"]],
                         ids=["raw", "normalised"])
def test_an_update_does_not_learn_from_the_rows_of_waiting_agents(library, norm):
    # normalised: nor do the observation and return statistics the update merges the batch into
    with trainer_for("relay_wait", library, *norm) as trainer:
        segment, _ = trainer.rollout.collect(trainer.acting_params)
        active = np.asarray(segment.active)
        expected = np.array([[c <= 2 * (a + 1) for a in range(3)] * 2 for c in (np.arange(12) % 6 + 1)])
        np.testing.assert_array_equal(active, expected)
        rng = np.random.default_rng(0)

        def changed(where):
            """The segment with random observations, log-probs, values and rewards where ``where``."""
            noise = lambda x: jnp.where(where.reshape(where.shape + (1,) * (x.ndim - 2)),  # noqa: E731
                                        jnp.asarray(rng.normal(size=x.shape), x.dtype), x)
            return segment._replace(obs=noise(segment.obs), logp=noise(segment.logp), values=noise(segment.values),
                                    rewards=noise(segment.rewards))

        def update(seg):
            state = jax.tree.map(jnp.copy, trainer.state)
            new_state, norm_state, metrics = trainer._update(state, trainer.norm.state, seg, jax.random.PRNGKey(1))
            return jax.tree.leaves((new_state.params, norm_state)), metrics

        params, metrics = update(segment)
        waiting_changed, waiting_metrics = update(changed(~active))
        for x, y in zip(params, waiting_changed):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
        assert float(metrics["value_loss"]) == pytest.approx(float(waiting_metrics["value_loss"]), rel=1e-5)
        acting = np.zeros_like(active)
        acting[3, 1] = True  # one step in which agent 1 acts
        active_changed, _ = update(changed(acting))
        assert any(not np.allclose(x, y, rtol=1e-6, atol=1e-7) for x, y in zip(params, active_changed))

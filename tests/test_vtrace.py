"""PufferLib 3's advantage (jaxlab.agent.vtrace) on cases worked by hand: V-trace's rho and c clipping,
V-trace equal to GAE when every ratio is 1, prioritised sampling's probabilities (alpha 0: uniform),
importance weights and beta's annealing; and the learner's Advantages state across minibatches."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.agent import ppo, vtrace


def one_agent(*rows):
    return tuple(jnp.asarray(np.array(r, np.float32)[:, None]) for r in rows)


def test_vtrace_clips_rho_and_c_on_a_three_step_case_worked_by_hand():
    # gamma 0.5, lambda 1; rewards 1, 0, 2; values 0.5, 1.0, 0.5; the value after the last step 1.0
    # TD errors r_t + gamma V_{t+1} - V_t:  1 + 0.5 - 0.5 = 1,  0 + 0.25 - 1 = -0.75,  2 + 0.5 - 0.5 = 2
    rewards, values, ratio = one_agent([1, 0, 2], [0.5, 1.0, 0.5], [2.0, 0.5, 1.5])
    no = jnp.zeros((3, 1), bool)
    zeros = jnp.zeros((3, 1), jnp.float32)
    nxt = jnp.array([1.0])
    # clips 1: rho = c = min(ratio, 1) = 1, 0.5, 1
    #   A2 = 1 * 2 = 2;  A1 = 0.5 * -0.75 + 0.5 * 1 * 0.5 * A2 = 0.125;  A0 = 1 * 1 + 0.5 * 1 * 1 * A1 = 1.0625
    adv, ret = vtrace.vtrace(rewards, values, no, no, zeros, nxt, ratio, 0.5, 1.0, rho_clip=1.0, c_clip=1.0)
    np.testing.assert_allclose(adv[:, 0], [1.0625, 0.125, 2.0], rtol=1e-6)
    np.testing.assert_allclose(ret[:, 0], [1.5625, 1.125, 2.5], rtol=1e-6)
    # rho clip 10 (rho = ratio = 2, 0.5, 1.5), c clip 1 (c = 1, 0.5, 1):
    #   A2 = 1.5 * 2 = 3;  A1 = -0.375 + 0.5 * 0.5 * 3 = 0.375;  A0 = 2 * 1 + 0.5 * 1 * 0.375 = 2.1875
    adv, _ = vtrace.vtrace(rewards, values, no, no, zeros, nxt, ratio, 0.5, 1.0, rho_clip=10.0, c_clip=1.0)
    np.testing.assert_allclose(adv[:, 0], [2.1875, 0.375, 3.0], rtol=1e-6)
    # every ratio 1: GAE's  A2 = 2;  A1 = -0.75 + 0.5 * 2 = 0.25;  A0 = 1 + 0.5 * 0.25 = 1.125
    ones = jnp.ones((3, 1), jnp.float32)
    adv, _ = vtrace.vtrace(rewards, values, no, no, zeros, nxt, ones, 0.5, 1.0, rho_clip=1.0, c_clip=1.0)
    np.testing.assert_allclose(adv[:, 0], [1.125, 0.25, 2.0], rtol=1e-6)
    gae, _ = ppo.gae(rewards, values, no, no, zeros, nxt, 0.5, 1.0)
    np.testing.assert_allclose(adv, gae, rtol=1e-6)


def test_vtrace_with_ratios_1_is_gae_with_terminations_and_truncations():
    rng = np.random.default_rng(0)
    T, A = 16, 5
    rewards = jnp.asarray(rng.normal(size=(T, A)), jnp.float32)
    values = jnp.asarray(rng.normal(size=(T, A)), jnp.float32)
    terminals = jnp.asarray(rng.random((T, A)) < 0.1)
    truncations = jnp.asarray(rng.random((T, A)) < 0.1) & ~terminals
    boot = jnp.where(truncations, jnp.asarray(rng.normal(size=(T, A)), jnp.float32), 0.0)
    nxt = jnp.asarray(rng.normal(size=A), jnp.float32)
    ones = jnp.ones((T, A), jnp.float32)
    for lam in (0.95, 1.0):
        want = ppo.gae(rewards, values, terminals, truncations, boot, nxt, 0.99, lam)
        got = vtrace.vtrace(rewards, values, terminals, truncations, boot, nxt, ones, 0.99, lam, 1.0, 1.0)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    # a terminal cuts the trace whatever the ratio: after it nothing flows back
    big = jnp.full((T, A), 5.0)
    got, _ = vtrace.vtrace(rewards, values, terminals, truncations, boot, nxt, big, 0.99, 1.0, 1.0, 1.0)
    t, a = np.argwhere(np.asarray(terminals))[0]
    assert float(got[t, a]) == pytest.approx(float(rewards[t, a] - values[t, a]), abs=1e-5)


def test_priorities_by_advantage_magnitude_and_alpha_0_is_uniform():
    adv = jnp.array([[1.0, -1.0, 0.0], [2.0, 0.0, 0.5]])  # [T 2, N 3]: sum |A| = 3, 1, 0.5
    np.testing.assert_allclose(vtrace.priorities(adv, 1.0), [3 / 4.5, 1 / 4.5, 0.5 / 4.5], rtol=1e-6)
    w = np.sqrt([3.0, 1.0, 0.5])
    np.testing.assert_allclose(vtrace.priorities(adv, 0.5), w / w.sum(), rtol=1e-6)
    np.testing.assert_allclose(vtrace.priorities(adv, 0.0), [1 / 3] * 3, rtol=1e-6)
    np.testing.assert_allclose(vtrace.priorities(jnp.zeros((2, 4)), 1.0), [0.25] * 4)  # all 0: uniform
    # large magnitudes and alpha: 2e4 ** 100 overflows float32 (the probabilities were NaN); (1/2) ** 100 by hand
    big = vtrace.priorities(jnp.array([[1e4, 2e4, 0.0]]), 100.0)
    np.testing.assert_allclose(big, [0.5 ** 100 / (1 + 0.5 ** 100), 1 / (1 + 0.5 ** 100), 0.0], rtol=1e-6)
    # only the steps of weight 1 count: the second row of sequence 0 drops out (sums 1, 1, 0.5)
    weights = jnp.array([[1, 1, 1], [0, 1, 1]])
    np.testing.assert_allclose(vtrace.priorities(adv, 1.0, weights), [1 / 2.5, 1 / 2.5, 0.5 / 2.5], rtol=1e-6)


def test_importance_weights_are_annealed_by_beta():
    probs = jnp.array([2 / 3, 2 / 9, 1 / 9])  # N p = 2, 2/3, 1/3
    index = jnp.array([0, 1, 2, 0])
    np.testing.assert_allclose(vtrace.importance_weights(probs, index, 1.0), [0.5, 1.5, 3.0, 0.5], rtol=1e-6)
    np.testing.assert_allclose(vtrace.importance_weights(probs, index, 0.5), np.sqrt([0.5, 1.5, 3.0, 0.5]), rtol=1e-6)
    np.testing.assert_allclose(vtrace.importance_weights(probs, index, 0.0), [1.0] * 4)
    assert float(vtrace.annealed_beta(0.2, 0.0)) == pytest.approx(0.2)
    assert float(vtrace.annealed_beta(0.2, 0.5)) == pytest.approx(0.6)
    assert float(vtrace.annealed_beta(0.2, 1.0)) == pytest.approx(1.0)
    assert float(vtrace.annealed_beta(0.2, 3.0)) == pytest.approx(1.0)  # clipped


def test_sampling_draws_by_the_probabilities():
    probs = jnp.array([0.7, 0.2, 0.1, 0.0])
    drawn = np.asarray(vtrace.sample(jax.random.PRNGKey(0), probs, 20_000))
    assert drawn.dtype == np.int32 and drawn.shape == (20_000,)
    np.testing.assert_allclose(np.bincount(drawn, minlength=4) / 20_000, probs, atol=0.01)
    assert not (drawn == 3).any()


def test_the_advantages_state_keeps_each_sequences_latest_ratio():
    from jaxlab.train.advantages import Advantages
    from jaxlab.train.learner import Segment

    T, N = 3, 4
    rng = np.random.default_rng(1)
    f = lambda: jnp.asarray(rng.normal(size=(T, N)), jnp.float32)  # noqa: E731
    no = jnp.zeros((T, N), bool)
    segment = Segment(obs=f(), resets=no, actions=no, logp=f(), values=f(), rewards=f(), terminals=no,
                      truncations=no, bootstrap_values=jnp.zeros((T, N)), next_values=jnp.zeros(N),
                      start_carry=None, masks=None, active=None)
    est = Advantages("vtrace", 0.9, 0.95)
    state = est.start(segment)
    gae = ppo.gae(segment.rewards, segment.values, no, no, segment.bootstrap_values, segment.next_values, 0.9, 0.95)
    np.testing.assert_allclose(state.advantages, gae[0], rtol=1e-6)
    np.testing.assert_array_equal(state.ratio, 1.0)
    log_ratio = jnp.log(jnp.full((T, 2), 0.5))
    state = est.observe(state, jnp.array([1, 3]), log_ratio)
    np.testing.assert_allclose(state.ratio, np.array([[1, 0.5, 1, 0.5]] * T), rtol=1e-6)
    index, adv, ret, weights = est.minibatch(state, segment, jnp.array([0, 1]), jax.random.PRNGKey(0), jnp.int32(0),
                                               jnp.int32(1))
    want = vtrace.vtrace(segment.rewards, segment.values, no, no, segment.bootstrap_values, segment.next_values,
                         state.ratio, 0.9, 0.95, 1.0, 1.0)
    np.testing.assert_allclose(adv, want[0][:, [0, 1]], rtol=1e-6)
    assert weights is None and index.tolist() == [0, 1]
    assert Advantages("gae", 0.9, 0.95).start(segment).ratio is None
    prio = Advantages("gae", 0.9, 0.95, prio_alpha=1.0, prio_beta0=0.5)
    state = prio.start(segment)
    index, adv, _, weights = prio.minibatch(state, segment, jnp.array([0, 1]), jax.random.PRNGKey(3), jnp.int32(5),
                                            jnp.int32(10))
    probs = vtrace.priorities(state.advantages, 1.0)
    np.testing.assert_allclose(weights, (N * probs[index]) ** -0.75, rtol=1e-6)  # beta 0.5 -> 0.75 halfway
    np.testing.assert_allclose(adv, state.advantages[:, index], rtol=1e-6)

"""GAE and the PPO loss against hand-worked values and a plain Python loop."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.agent import ppo

GAMMA, LAM = 0.9, 0.8


def hand_case(truncate: bool):
    """2 agents x 3 steps. Agent 0 terminates at t=1; agent 1 is cut at t=1 (truncated, or terminated
    when ``truncate`` is False), where the cut observation is worth 4.0."""
    rewards = jnp.array([[1.0, 0.0], [2.0, 1.0], [3.0, 0.0]])
    values = jnp.array([[0.5, 1.0], [1.0, 2.0], [1.5, 0.5]])
    terminals = jnp.array([[False, False], [True, not truncate], [False, False]])
    truncations = jnp.array([[False, False], [False, truncate], [False, False]])
    bootstrap = jnp.array([[0.0, 0.0], [0.0, 4.0], [0.0, 0.0]])
    next_values = jnp.array([2.0, 1.0])
    return ppo.gae(rewards, values, terminals, truncations, bootstrap, next_values, GAMMA, LAM)


def test_gae_hand_worked_2_agents_3_steps():
    advantages, returns = hand_case(truncate=True)
    # agent 0: A2 = 3 + .9*2 - 1.5 = 3.3; A1 = 2 - 1 = 1 (terminal); A0 = (1 + .9*1 - .5) + .72*1 = 2.12
    # agent 1: A2 = 0 + .9*1 - .5 = 0.4; A1 = 1 + .9*4 - 2 = 2.6 (truncated: bootstrap from the cut obs)
    #          A0 = (0 + .9*2 - 1) + .72*2.6 = 2.672
    expected = np.array([[2.12, 2.672], [1.0, 2.6], [3.3, 0.4]])
    np.testing.assert_allclose(advantages, expected, rtol=1e-6)
    np.testing.assert_allclose(returns, expected + np.array([[0.5, 1.0], [1.0, 2.0], [1.5, 0.5]]), rtol=1e-6)


def test_truncation_changes_the_advantage_exactly_where_it_should():
    truncated, _ = hand_case(truncate=True)
    terminated, _ = hand_case(truncate=False)
    difference = np.asarray(truncated - terminated)
    # Only agent 1 at and before the cut: gamma * V(cut) = 3.6 at t=1, (gamma*lam) * 3.6 at t=0.
    np.testing.assert_allclose(difference, [[0.0, 0.72 * 3.6], [0.0, 3.6], [0.0, 0.0]], atol=1e-6)


def python_gae(rewards, values, terminals, truncations, bootstrap, next_values, gamma, lam):
    T, A = rewards.shape
    advantages = np.zeros((T, A))
    for a in range(A):
        running = 0.0
        for t in reversed(range(T)):
            ended = terminals[t, a] or truncations[t, a]
            following = next_values[a] if t == T - 1 else values[t + 1, a]
            target = rewards[t, a]
            if not ended:
                target += gamma * following
            elif truncations[t, a] and not terminals[t, a]:
                target += gamma * bootstrap[t, a]
            delta = target - values[t, a]
            running = delta + (0.0 if ended else gamma * lam * running)
            advantages[t, a] = running
    return advantages


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gae_scan_equals_python_loop_on_random_data(seed):
    rng = np.random.default_rng(seed)
    T, A = 17, 5
    rewards, values, bootstrap = (rng.normal(size=(T, A)).astype(np.float32) for _ in range(3))
    terminals = rng.random((T, A)) < 0.1
    truncations = rng.random((T, A)) < 0.1  # some steps are both: termination wins
    next_values = rng.normal(size=A).astype(np.float32)
    advantages, returns = ppo.gae(jnp.array(rewards), jnp.array(values), jnp.array(terminals),
                                  jnp.array(truncations), jnp.array(bootstrap), jnp.array(next_values), 0.97, 0.9)
    expected = python_gae(rewards, values, terminals, truncations, bootstrap, next_values, 0.97, 0.9)
    np.testing.assert_allclose(advantages, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(returns, expected + values, rtol=1e-4, atol=1e-5)


def test_ppo_loss_on_a_hand_checked_batch():
    # ratios 1.5 and 0.5 against advantages +1 and -1, clip 0.2
    terms = ppo.ppo_loss(new_logp=jnp.log(jnp.array([1.5, 0.5])), entropy=jnp.array([0.6, 0.4]),
                         new_values=jnp.array([1.0, 3.0]), old_logp=jnp.zeros(2), old_values=jnp.array([0.5, 2.0]),
                         advantages=jnp.array([1.0, -1.0]), returns=jnp.array([2.0, 2.0]), clip_coef=0.2,
                         vf_coef=0.5, vf_clip_coef=0.2, ent_coef=0.01, norm_adv=False)
    assert float(terms.policy) == pytest.approx((-1.2 + 0.8) / 2)           # max(-A r, -A clip(r))
    assert float(terms.value) == pytest.approx(0.5 * (1.69 + 1.0) / 2)      # clipped 0.7 -> 1.69; 1 vs 0.04
    assert float(terms.entropy) == pytest.approx(0.5)
    assert float(terms.total) == pytest.approx(-0.2 + 0.5 * 0.6725 - 0.01 * 0.5)
    kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2
    assert float(terms.approx_kl) == pytest.approx(kl, rel=1e-5)
    assert float(terms.clip_fraction) == 1.0


def test_ppo_loss_unclipped_value_and_normalised_advantages():
    # advantages 1..4: mean 2.5, std (ddof 0) sqrt(1.25), so the normalised advantages are
    # k * [-3, -1, 1, 3] with k = 0.5 / (sqrt(1.25) + 1e-8) (ddof 1 would give 0.5 / sqrt(5/3) instead)
    ratios = jnp.array([1.5, 0.9, 1.1, 0.5])
    terms = ppo.ppo_loss(new_logp=jnp.log(ratios), entropy=jnp.zeros(4), new_values=jnp.array([1.0, 3.0, 0.0, 0.0]),
                         old_logp=jnp.zeros(4), old_values=jnp.array([0.5, 2.0, 0.0, 0.0]),
                         advantages=jnp.array([1.0, 2.0, 3.0, 4.0]), returns=jnp.array([2.0, 2.0, 0.0, 0.0]),
                         clip_coef=0.2, vf_coef=0.5, vf_clip_coef=0.0, ent_coef=0.0, norm_adv=True)
    assert float(terms.value) == pytest.approx(0.5 * (1 + 1) / 4)
    k = 0.5 / (math.sqrt(1.25) + 1e-8)
    # max(-A r, -A clip(r, 0.8, 1.2)) per sample:
    #   A = -3k, r = 1.5: max(4.5k, 3.6k) = 4.5k      A = -k, r = 0.9: 0.9k (inside the clip range)
    #   A =   k, r = 1.1: -1.1k                       A = 3k, r = 0.5: max(-1.5k, -2.4k) = -1.5k
    expected = (4.5 + 0.9 - 1.1 - 1.5) * k / 4
    assert float(terms.policy) == pytest.approx(expected, rel=1e-6)
    assert float(terms.policy) != pytest.approx((4.5 + 0.9 - 1.1 - 1.5) * 0.5 / math.sqrt(5 / 3) / 4, rel=1e-3)
    assert float(terms.total) == pytest.approx(expected + 0.5 * 0.25, rel=1e-6)
    assert float(terms.clip_fraction) == 0.5  # ratios 1.5 and 0.5 lie outside [0.8, 1.2]


def test_a_minibatch_of_one_sample_is_not_normalised():
    # minibatch_size 1 (bptt_horizon 1, one sequence): its own mean, normalised it would be 0 in every
    # minibatch and the policy would get no gradient at all; as Stable-Baselines3, it is taken as it is
    def policy_loss(new_logp, advantage, norm_adv):
        return ppo.ppo_loss(new_logp, jnp.zeros((1, 1)), jnp.zeros((1, 1)), jnp.zeros((1, 1)), jnp.zeros((1, 1)),
                            jnp.full((1, 1), advantage), jnp.zeros((1, 1)), clip_coef=0.2, vf_coef=0.5,
                            vf_clip_coef=0.0, ent_coef=0.0, norm_adv=norm_adv, weights=jnp.ones((1, 1), bool)).policy

    for norm_adv in (True, False):
        assert float(policy_loss(jnp.log(jnp.full((1, 1), 1.1)), 3.0, norm_adv)) == pytest.approx(-3.3)
        grad = jax.grad(lambda lp, n=norm_adv: policy_loss(lp, 3.0, n))(jnp.zeros((1, 1)))
        assert float(grad[0, 0]) == pytest.approx(-3.0)


def test_a_minibatch_of_one_active_sample_among_waiting_ones_is_not_normalised():
    # [T=2, B=2], only step 0 of sequence 0 acted (weight 1); the waiting steps' advantages (100, -50, 7)
    # count for nothing. The guard counted 4 samples and normalised: (3 - 3) / (0 + 1e-8) = 0, no gradient.
    # Counted by weight, the one active advantage, 3, is kept: policy max(-3 * 1.1, -3 * clip(1.1)) = -3.3
    # over 1 active sample, and d policy / d new_logp = -3 * ratio = -3 at new_logp 0.
    advantages = jnp.array([[3.0, 100.0], [-50.0, 7.0]])
    one_active = jnp.array([[1, 0], [0, 0]], bool)

    def policy_loss(new_logp, weights):
        return ppo.ppo_loss(new_logp, jnp.zeros((2, 2)), jnp.zeros((2, 2)), jnp.zeros((2, 2)), jnp.zeros((2, 2)),
                            advantages, jnp.zeros((2, 2)), clip_coef=0.2, vf_coef=0.5, vf_clip_coef=0.0,
                            ent_coef=0.0, norm_adv=True, weights=weights).policy

    assert float(policy_loss(jnp.full((2, 2), jnp.log(1.1)), one_active)) == pytest.approx(-3.3)
    grad = jax.grad(policy_loss)(jnp.zeros((2, 2)), one_active)
    np.testing.assert_allclose(np.asarray(grad), [[-3.0, 0.0], [0.0, 0.0]], rtol=1e-6)
    # two active samples (3 and 100) are normalised over those two: mean 51.5, std 48.5, so -k and k with
    # k = 48.5 / (48.5 + 1e-8); ratios 1.1 and 0.9: max(1.1k, 1.1k) and max(-0.9k, -0.9k), mean 0.1k
    two_active = jnp.array([[1, 1], [0, 0]], bool)
    new_logp = jnp.log(jnp.array([[1.1, 0.9], [1.0, 1.0]]))
    assert float(policy_loss(new_logp, two_active)) == pytest.approx(0.1, rel=1e-5)


def test_explained_variance():
    returns = jnp.array([1.0, 2.0, 3.0, 4.0])
    assert float(ppo.explained_variance(returns, returns)) == 1.0
    assert float(ppo.explained_variance(jnp.full(4, 2.5), returns)) == pytest.approx(0.0)
    assert float(ppo.explained_variance(returns, jnp.ones(4))) == 0.0


def test_values_are_clipped_by_vf_clip_coef_and_importance_weights_scale_the_normalised_advantages():
    # [T = 2, B = 2]; every ratio 1. clip_coef 0.2 and vf_clip_coef 1.0 differ, so a value clip by the
    # policy's clip_coef (CleanRL's choice, not jaxlab's) shows.
    #   values: V - V_old = 0.5 (inside +-1): max((0.5 - 2)^2, same) = 2.25; V - V_old = 2 (clipped to 1):
    #   max((2 - 3)^2, (1 - 3)^2) = 4; the other two are 0: value = 0.5 * 6.25 / 4 (by 0.2: 0.5 * 11.08 / 4)
    #   advantages [[1, 2], [3, 4]] normalised: k [[-3, -1], [1, 3]], k = 0.5 / sqrt(1.25); then times the
    #   sequences' importance weights [2, 0.5]: k [[-6, -0.5], [2, 1.5]], policy = -mean = 0.75 k (weighting
    #   before the normalisation would give a mean-0 advantage: policy 0)
    terms = ppo.ppo_loss(new_logp=jnp.zeros((2, 2)), entropy=jnp.zeros((2, 2)),
                         new_values=jnp.array([[0.5, 2.0], [0.0, 0.0]]), old_logp=jnp.zeros((2, 2)),
                         old_values=jnp.zeros((2, 2)), advantages=jnp.array([[1.0, 2.0], [3.0, 4.0]]),
                         returns=jnp.array([[2.0, 3.0], [0.0, 0.0]]), clip_coef=0.2, vf_coef=0.5, vf_clip_coef=1.0,
                         ent_coef=0.0, norm_adv=True, adv_weights=jnp.array([2.0, 0.5]))
    assert float(terms.value) == pytest.approx(0.5 * 6.25 / 4, rel=1e-6)
    assert float(terms.policy) == pytest.approx(0.75 * 0.5 / (math.sqrt(1.25) + 1e-8), rel=1e-6)

"""The learner's pieces against hand-worked values: the optimizer (max_grad_norm 0 = no clipping), the
learning-rate schedules, minibatch slicing along the agent axis, reward_scale before GAE, that V-trace's
ratios and prioritised sampling's weights reach the loss, and that the loss falls when the update is run on
one fixed segment."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.agent import ppo, vtrace
from jaxlab.agent.distributions import ActionSpec
from jaxlab.agent.policy import ActorCritic, zero_carry
from jaxlab.train.learner import Segment, TrainState, _take_agents, lr_schedule, make_optimizer, make_update, \
    optimizer_over

DISCRETE2 = ActionSpec("discrete", (2,))


def train_state(params, schedule, total_steps: int = 1) -> TrainState:
    """A fresh TrainState of ``params`` for a run of ``total_steps`` optimizer steps under ``schedule``."""
    optimizer = optimizer_over(schedule, total_steps, 0.5)
    return TrainState(params, optimizer.init(params), jnp.zeros((), jnp.int32), jnp.asarray(total_steps, jnp.int32))


# ---- optimizer -----------------------------------------------------------------------------------

def run_optimizer(max_grad_norm: float, grads_seq) -> list[np.ndarray]:
    """The updates of make_optimizer (constant LR 1) for successive gradients of one parameter [2]."""
    optimizer = make_optimizer(optax.constant_schedule(1.0), max_grad_norm)
    params = {"w": jnp.zeros(2)}
    state = optimizer.init(params)
    updates = []
    for g in grads_seq:
        update, state = optimizer.update({"w": jnp.array(g)}, state, params)
        updates.append(np.asarray(update["w"]))
    return updates


def test_max_grad_norm_zero_means_no_clipping():
    grads = [[3.0, 4.0], [30.0, 40.0], [-1.0, 2.0]]
    unclipped = run_optimizer(0.0, grads)
    # Adam's first step is -lr * g / (|g| + eps) = -3 / 3.00001, -4 / 4.00001: about -1 per component, not
    # the zero that clip_by_global_norm(0) gives (1e-4: a GPU's float32 division and sqrt differ a little)
    np.testing.assert_allclose(unclipped[0], [-3 / 3.00001, -4 / 4.00001], rtol=1e-4)
    adam = optax.adam(1.0, eps=1e-5)
    state = adam.init({"w": jnp.zeros(2)})
    for g, got in zip(grads, unclipped):
        expected, state = adam.update({"w": jnp.array(g)}, state)
        np.testing.assert_allclose(got, expected["w"], rtol=1e-6)
    # a positive bound does clip: the second gradient (norm 50) is scaled to norm 1 and Adam's moments
    # differ from then on
    clipped = run_optimizer(1.0, grads)
    assert not np.allclose(clipped[1], unclipped[1])
    # and it clips the global norm (every gradient scaled by one factor, min(1, 1 / |g|)), not each component
    # (optax.clip), which turns the third gradient [-1, 2] into [-1, 1] instead of [-1, 2] / sqrt(5)
    state = adam.init({"w": jnp.zeros(2)})
    for g, got in zip(grads, clipped):
        g = np.array(g) / max(1.0, float(np.linalg.norm(g)))
        expected, state = adam.update({"w": jnp.array(g, jnp.float32)}, state)
        np.testing.assert_allclose(got, expected["w"], rtol=1e-5)


def test_max_grad_norm_zero_keeps_the_optimizer_state_structure():
    params = {"w": jnp.zeros(2)}
    schedule = optax.constant_schedule(1e-3)
    assert jax.tree.structure(make_optimizer(schedule, 0.0).init(params)) == \
        jax.tree.structure(make_optimizer(schedule, 0.5).init(params))


def test_each_optimizer_step_applies_the_scheduled_learning_rate():
    # the logged learning rate is schedule(step); the step must apply it too. With a constant gradient Adam's
    # bias-corrected step is -lr_k * g / (|g| + eps), so with g = 1 the steps are minus the schedule:
    # linear 1.0 -> 0.1 over 4 steps gives 1, 0.775, 0.55, 0.325, then 0.1 (the clip to norm 0.5 changes nothing
    # here: Adam divides by |g|)
    optimizer = optimizer_over(lr_schedule(1.0, "linear", 0.1), 4, 0.5)
    params = {"w": jnp.zeros(1)}
    state = optimizer.init(params)
    steps = []
    for _ in range(5):
        update, state = optimizer.update({"w": jnp.ones(1)}, state, params)
        steps.append(-float(update["w"][0]))
    np.testing.assert_allclose(steps, [1.0, 0.775, 0.55, 0.325, 0.1], rtol=1e-4)  # float32 Adam: ~2e-5 off


# ---- learning-rate schedules ---------------------------------------------------------------------

@pytest.mark.parametrize("step, value", [(0, 1.0), (5, 0.55), (8, 0.28), (10, 0.1), (25, 0.1)])
def test_linear_schedule_to_its_floor(step, value):
    # 1.0 -> 0.1 over 10 steps: 1 - 0.9 * step / 10, then the floor
    assert float(lr_schedule(1.0, "linear", 0.1)(step, 10)) == pytest.approx(value, rel=1e-6)


@pytest.mark.parametrize("step, value", [
    (0, 2.0),
    (2, 2.0 * (0.9 * 0.5 * (1 + math.cos(math.pi / 4)) + 0.1)),   # 1.7364
    (4, 2.0 * 0.55),                                               # cos(pi/2) = 0: halfway
    (8, 0.2), (20, 0.2)])                                          # the floor 2.0 * 0.1, and after
def test_cosine_schedule_to_its_floor(step, value):
    # lr * ((1 - r) * (1 + cos(pi * step / total)) / 2 + r) with lr 2, total 8, r = min_lr_ratio 0.1
    assert float(lr_schedule(2.0, "cosine", 0.1)(step, 8)) == pytest.approx(value, rel=1e-6)


def test_cosine_without_floor_reaches_zero_and_none_is_constant():
    assert float(lr_schedule(1.0, "cosine", 0.0)(8, 8)) == pytest.approx(0.0, abs=1e-7)
    assert float(lr_schedule(1.0, "linear", 0.0)(4, 8)) == pytest.approx(0.5)
    schedule = lr_schedule(3e-3, "none", 0.5)
    assert [float(schedule(s, 8)) for s in (0, 4, 100)] == pytest.approx([3e-3] * 3)


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_a_traced_schedule_length_gives_optaxs_values_from_one_trace(kind):
    # the length is an argument of the jitted function: runs of 10 and 37 steps share its one trace, and
    # each gives what optax's schedule with that length as a constant gives, step by step
    traces = []

    def at(step, total_steps):
        traces.append(1)
        return lr_schedule(2.0, kind, 0.1)(step, total_steps)

    jitted = jax.jit(at)
    for total in (10, 37):
        reference = (optax.linear_schedule(2.0, 0.2, total) if kind == "linear"
                     else optax.cosine_decay_schedule(2.0, total, alpha=0.1))
        for step in range(total + 3):
            assert float(jitted(jnp.int32(step), jnp.int32(total))) == pytest.approx(
                float(reference(jnp.int32(step))), rel=1e-6, abs=1e-7), (total, step)
    assert len(traces) == 1


# ---- minibatch slicing ---------------------------------------------------------------------------

def numbered_segment(T: int, A: int, H: int, with_masks: bool) -> Segment:
    """A segment whose every entry says where it sits: [T, A, ...] fields hold 100 t + a (+ k for a
    trailing axis), next_values [A] and the carry (c, h) [A, H] hold the agent index a (c) and -a (h)."""
    t = jnp.arange(T)[:, None]
    a = jnp.arange(A)[None, :]
    number = (100 * t + a).astype(jnp.float32)   # [T, A]
    return Segment(obs=number[..., None] + jnp.arange(3), resets=(number % 2 == 0), actions=number.astype(jnp.int32),
                   logp=number + 0.1, values=number + 0.2, rewards=number + 0.3, terminals=(number % 3 == 0),
                   truncations=(number % 5 == 0), bootstrap_values=number + 0.4,
                   next_values=jnp.arange(A, dtype=jnp.float32) + 0.5,
                   start_carry=(jnp.tile(jnp.arange(A, dtype=jnp.float32)[:, None], (1, H)),
                                -jnp.tile(jnp.arange(A, dtype=jnp.float32)[:, None], (1, H))),
                   masks=(number[..., None] + jnp.arange(2)) % 4 != 0 if with_masks else None)


@pytest.mark.parametrize("with_masks", [False, True])
def test_take_agents_slices_axis_1_of_time_major_fields_and_axis_0_of_the_rest(with_masks):
    T, A, H = 3, 5, 2
    segment = numbered_segment(T, A, H, with_masks)
    index = jnp.array([4, 1])
    mb = _take_agents(segment, index)
    assert mb.obs.shape == (T, 2, 3) and mb.start_carry[0].shape == (2, H) and mb.next_values.shape == (2,)
    # agent 4 then agent 1, every step: 100 t + a
    np.testing.assert_array_equal(mb.obs[..., 0], [[4, 1], [104, 101], [204, 201]])
    np.testing.assert_array_equal(mb.obs[0, 0], [4, 5, 6])
    for name in ("resets", "actions", "logp", "values", "rewards", "terminals", "truncations", "bootstrap_values"):
        np.testing.assert_array_equal(getattr(mb, name), np.asarray(getattr(segment, name))[:, [4, 1]], err_msg=name)
    np.testing.assert_array_equal(mb.next_values, [4.5, 1.5])
    np.testing.assert_array_equal(mb.start_carry[0], [[4, 4], [1, 1]])
    np.testing.assert_array_equal(mb.start_carry[1], [[-4, -4], [-1, -1]])
    if with_masks:
        assert mb.masks.shape == (T, 2, 2)
        np.testing.assert_array_equal(mb.masks, np.asarray(segment.masks)[:, [4, 1]])
    else:
        assert mb.masks is None


# ---- reward_scale --------------------------------------------------------------------------------

class ConstantPolicy:
    """Stands in for ActorCritic in make_update: uniform logits over 2 actions and the value params["v"]
    for every step and agent (unroll: head [T, A, 2], value [T, A])."""

    def apply(self, params, carry, obs, resets, method=None):
        T, A = resets.shape
        return carry, jnp.zeros((T, A, 2)), jnp.broadcast_to(params["v"], (T, A)), None


def constant_value_segment(rewards) -> Segment:
    """T = 2 steps of A = 2 agents, no episode end, old values 1 everywhere and next values 1."""
    rewards = jnp.array(rewards, jnp.float32)
    T, A = rewards.shape
    ones, false = jnp.ones((T, A)), jnp.zeros((T, A), bool)
    return Segment(obs=jnp.zeros((T, A, 1)), resets=false, actions=jnp.zeros((T, A), jnp.int32),
                   logp=jnp.full((T, A), math.log(0.5)), values=ones, rewards=rewards, terminals=false,
                   truncations=false, bootstrap_values=jnp.zeros((T, A)), next_values=jnp.ones(A),
                   start_carry=(jnp.zeros((A, 1)), jnp.zeros((A, 1))))


def first_value_loss(segment: Segment, reward_scale: float) -> float:
    """The value loss make_update reports for one epoch of one minibatch: that of the params before
    their first step, i.e. 0.5 * mean(returns^2) for the value 0."""
    schedule = lr_schedule(1e-3, "none", 0.0)
    params = {"v": jnp.zeros(())}
    update = make_update(ConstantPolicy(), DISCRETE2, schedule, max_grad_norm=0.5, num_minibatches=1,
                         update_epochs=1, gamma=0.5, lam=0.5, reward_scale=reward_scale, clip_coef=0.2, vf_coef=0.5,
                         vf_clip_coef=0.0, ent_coef=0.0, norm_adv=True)
    _, metrics = jax.jit(update)(train_state(params, schedule), segment, jax.random.PRNGKey(0))
    return float(metrics["value_loss"])


def test_reward_scale_multiplies_rewards_before_gae():
    segment = constant_value_segment([[1.0, 0.0], [2.0, 1.0]])   # [t, agent]
    # gamma 0.5, lambda 0.5, V = 1 everywhere: delta_t = 2 r_t + 0.5 * 1 - 1 = 2 r_t - 0.5
    #   t = 1: deltas 3.5, 1.5 = A_1;  t = 0: deltas 1.5, -0.5; A_0 = delta_0 + 0.25 A_1 = 2.375, -0.125
    #   returns = A + 1: [[3.375, 0.875], [4.5, 2.5]]
    returns = np.array([[3.375, 0.875], [4.5, 2.5]])
    assert first_value_loss(segment, 2.0) == pytest.approx(0.5 * np.mean(returns ** 2), rel=1e-6)
    # scaling the returns after GAE instead would give 2 * (returns with scale 1) = 2 * [[1.875, 0.625], [2.5, 1.5]]
    after = 2 * np.array([[1.875, 0.625], [2.5, 1.5]])
    assert first_value_loss(segment, 2.0) != pytest.approx(0.5 * np.mean(after ** 2), rel=1e-3)
    assert first_value_loss(segment, 1.0) == pytest.approx(0.5 * np.mean(after ** 2 / 4), rel=1e-6)


# ---- V-trace's ratios and prioritised sampling's weights reach the loss ---------------------------

def frozen_update_metrics(segment: Segment, total_steps: int = 1, **options) -> dict:
    """make_update's metrics with ConstantPolicy (value 0) at learning rate 0: every minibatch sees the same
    params; ``options`` are make_update's advantage and sampling settings, ``total_steps`` the run's length."""
    schedule = lr_schedule(0.0, "none", 0.0)
    params = {"v": jnp.zeros(())}
    update = make_update(ConstantPolicy(), DISCRETE2, schedule, max_grad_norm=0.5, num_minibatches=2, gamma=0.9,
                         lam=0.8, reward_scale=1.0, clip_coef=0.2, vf_coef=0.5, vf_clip_coef=0.0, ent_coef=0.0,
                         norm_adv=True, **options)
    _, metrics = jax.jit(update)(train_state(params, schedule, total_steps), segment, jax.random.PRNGKey(0))
    return {k: float(v) for k, v in metrics.items()}


REWARDS = [[1.0, 0.0, 2.0, -1.0], [0.5, 1.0, 0.0, 3.0], [2.0, -2.0, 1.0, 0.0]]  # [T = 3, A = 4]


def test_vtrace_recomputes_the_advantages_from_the_ratios_the_last_epoch_trained_with():
    # the rollout's log-prob 0 (probability 1) against the policy's log 0.5: every ratio pi / mu is 0.5.
    # Epoch 1 trains on GAE's advantages (no ratio seen yet) and keeps ratio 0.5 for every sample; epoch 2 on
    # V-trace's with rho = c = 0.5. The value loss (value 0) is 0.5 mean(R^2) over both epochs' minibatches.
    # A ratio kept upside down (mu / pi = 2, clipped to 1) would train epoch 2 on GAE's advantages again.
    segment = constant_value_segment(REWARDS)
    segment = segment._replace(logp=jnp.zeros_like(segment.logp))
    s = segment
    _, gae_returns = ppo.gae(s.rewards, s.values, s.terminals, s.truncations, s.bootstrap_values, s.next_values,
                             0.9, 0.8)
    _, vtrace_returns = vtrace.vtrace(s.rewards, s.values, s.terminals, s.truncations, s.bootstrap_values,
                                      s.next_values, jnp.full(s.values.shape, 0.5), 0.9, 0.8, 1.0, 1.0)
    expected = 0.5 * (np.mean(np.square(gae_returns)) + np.mean(np.square(vtrace_returns))) / 2
    assert np.mean(np.square(gae_returns)) != pytest.approx(np.mean(np.square(vtrace_returns)), rel=1e-2)
    metrics = frozen_update_metrics(segment, update_epochs=2, advantage="vtrace")
    assert metrics["value_loss"] == pytest.approx(expected, rel=1e-5)


def test_prioritised_sampling_weights_the_advantages_in_the_policy_loss():
    # every ratio 1: the policy loss is -mean(normalised advantage x importance weight), 0 without weights
    # (the normalised advantages have mean 0), and not 0 once the drawn sequences' weights (N p)^-beta differ
    segment = constant_value_segment(REWARDS)
    assert abs(frozen_update_metrics(segment, update_epochs=1)["policy_loss"]) < 1e-6
    metrics = frozen_update_metrics(segment, update_epochs=1, prio_alpha=1.0, prio_beta0=0.5, total_steps=4)
    assert abs(metrics["policy_loss"]) > 1e-2


def test_the_logged_policy_metrics_average_over_the_steps_agents_acted_in_not_over_minibatches():
    # A = 4 agents in 2 minibatches of 2; only agent 0 acts, in one step (the others wait: Segment.active 0).
    # Uniform logits over 2 actions: entropy ln 2 in every step; rollout log-prob 0 against log 0.5: ratio 0.5,
    # approx_kl (0.5 - 1) - ln 0.5 = ln 2 - 0.5, clipped (|0.5 - 1| > 0.2). The minibatch without agent 0 has no
    # active step (its means are 0): averaging the two minibatches' means would log half of each.
    segment = constant_value_segment(REWARDS)
    active = np.zeros((3, 4), bool)
    active[1, 0] = True
    segment = segment._replace(logp=jnp.zeros_like(segment.logp), active=jnp.asarray(active))
    metrics = frozen_update_metrics(segment, update_epochs=1)
    assert metrics["entropy"] == pytest.approx(math.log(2), rel=1e-5)
    assert metrics["approx_kl"] == pytest.approx(math.log(2) - 0.5, rel=1e-5)
    assert metrics["clip_fraction"] == pytest.approx(1.0)
    every_step = frozen_update_metrics(segment._replace(active=None), update_epochs=1)
    assert every_step["entropy"] == pytest.approx(math.log(2), rel=1e-5)  # no active: every step counts


def test_the_logged_grad_norm_is_the_mean_over_the_minibatches_in_which_an_agent_acted():
    # A = 4 agents in 2 minibatches of 2; only agent 0 acts, in step 1. The loss's only parameter is the value v
    # (0): its gradient is vf_coef * mean over active steps of (v - R) = -0.5 R[1, 0]. Agent 0's GAE (values 1,
    # next value 1, gamma 0.9, lambda 0.8; deltas r - 0.1 = 0.9, 0.4, 1.9): A[1] = 0.4 + 0.72 * 1.9 = 1.768,
    # R[1] = 2.768, so grad_norm 1.384. The other minibatch has no active step (gradient 0): a plain mean of
    # the two minibatches would log 0.692.
    segment = constant_value_segment(REWARDS)
    active = np.zeros((3, 4), bool)
    active[1, 0] = True
    metrics = frozen_update_metrics(segment._replace(active=jnp.asarray(active)), update_epochs=1)
    assert metrics["grad_norm"] == pytest.approx(0.5 * 2.768, rel=1e-5)
    nobody = frozen_update_metrics(segment._replace(active=jnp.zeros((3, 4), bool)), update_epochs=1)
    assert nobody["grad_norm"] == 0.0


# ---- the loss falls on a fixed batch -------------------------------------------------------------

def synthetic_segment(T: int, A: int, obs_size: int, seed: int) -> Segment:
    """A fixed segment of random observations and actions, where the reward is 1 when the action
    matches the sign of the first observation component (learnable by both heads)."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(T, A, obs_size)).astype(np.float32)
    actions = rng.integers(0, 2, size=(T, A)).astype(np.int32)
    rewards = (actions == (obs[..., 0] > 0)).astype(np.float32)
    terminals = np.zeros((T, A), bool)
    terminals[T // 2] = True
    resets = np.zeros((T, A), bool)
    resets[T // 2 + 1] = True
    return Segment(obs=jnp.array(obs), resets=jnp.array(resets), actions=jnp.array(actions),
                   logp=jnp.full((T, A), math.log(0.5)), values=jnp.zeros((T, A)), rewards=jnp.array(rewards),
                   terminals=jnp.array(terminals), truncations=jnp.zeros((T, A), bool),
                   bootstrap_values=jnp.zeros((T, A)), next_values=jnp.zeros(A), start_carry=zero_carry(A, 16))


def test_the_loss_falls_when_training_on_one_fixed_segment():
    T, A, O, H = 8, 16, 4, 16
    policy = ActorCritic(DISCRETE2, hidden_size=H)
    params = policy.init(jax.random.PRNGKey(0), zero_carry(A, H), jnp.zeros((A, O)), jnp.ones(A, bool))
    schedule = lr_schedule(1e-2, "none", 0.0)
    update = jax.jit(make_update(policy, DISCRETE2, schedule, max_grad_norm=0.5, num_minibatches=2, update_epochs=1,
                                 gamma=0.9, lam=0.95, reward_scale=1.0, clip_coef=0.2, vf_coef=0.5,
                                 vf_clip_coef=0.0, ent_coef=0.0, norm_adv=True))
    state = train_state(params, schedule)
    segment = synthetic_segment(T, A, O, seed=0)
    losses = []
    for i in range(60):
        state, metrics = update(state, segment, jax.random.PRNGKey(i))
        losses.append(float(metrics["policy_loss"]) + 0.5 * float(metrics["value_loss"]))
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.5 * losses[0], losses


# ---- target_kl: the KL early stop ----------------------------------------------------------------

def actor_critic_update(update_epochs: int, state: TrainState = None, **options):
    """(state after one jitted make_update of an ActorCritic on synthetic_segment, its metrics as floats):
    2 minibatches, learning rate 1e-2 linear over 6 optimizer steps; ``options``: make_update's target_kl."""
    T, A, O, H = 8, 16, 4, 16
    policy = ActorCritic(DISCRETE2, hidden_size=H)
    params = policy.init(jax.random.PRNGKey(0), zero_carry(A, H), jnp.zeros((A, O)), jnp.ones(A, bool))
    schedule = lr_schedule(1e-2, "linear", 0.0)
    update = jax.jit(make_update(policy, DISCRETE2, schedule, max_grad_norm=0.5, num_minibatches=2,
                                 update_epochs=update_epochs, gamma=0.9, lam=0.95, reward_scale=1.0, clip_coef=0.2,
                                 vf_coef=0.5, vf_clip_coef=0.0, ent_coef=0.0, norm_adv=True, **options))
    state, metrics = update(train_state(params, schedule, total_steps=6), synthetic_segment(T, A, O, seed=0),
                            jax.random.PRNGKey(3))
    return state, {k: float(v) for k, v in metrics.items()}


def assert_same_state(a: TrainState, b: TrainState):
    """Params, optimizer state and step equal bit for bit."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_target_kl_stops_the_update_after_the_first_epoch_whose_approx_kl_exceeds_it():
    # the first epoch's approx_kl (5e-5) exceeds 1e-9: epochs 2 and 3 must change nothing, so the
    # state is that of update_epochs 1 (the same first epoch key), and the logged metrics are its minibatches'
    # only (zeros of the skipped epochs counted in would halve or third them, their learning rates lower it)
    stopped_state, stopped = actor_critic_update(3, target_kl=1e-9)
    one_state, one = actor_critic_update(1)
    assert stopped["epochs_run"] == 1 and one["epochs_run"] == 1
    assert_same_state(stopped_state, one_state)
    assert int(stopped_state.step) == 2  # the skipped epochs take no optimizer step
    assert stopped == pytest.approx(one, rel=1e-6, abs=1e-9)
    assert stopped["approx_kl"] > 1e-6


def test_a_target_kl_never_reached_gives_the_update_without_it():
    off_state, off = actor_critic_update(3)
    never_state, never = actor_critic_update(3, target_kl=1e9)
    assert off["epochs_run"] == never["epochs_run"] == 3
    assert_same_state(never_state, off_state)
    assert never == pytest.approx(off, rel=1e-6)  # learning_rate may differ in its last bit
    # and one that the second epoch reaches runs 2 epochs: between the first epoch's approx_kl and the second's
    _, two = actor_critic_update(2)
    _, first = actor_critic_update(1)
    second_epoch_kl = 2 * two["approx_kl"] - first["approx_kl"]  # equal active steps in every minibatch
    assert second_epoch_kl > first["approx_kl"]
    _, stopped = actor_critic_update(3, target_kl=(first["approx_kl"] + second_epoch_kl) / 2)
    assert stopped["epochs_run"] == 2
    assert stopped == pytest.approx(two, rel=1e-5)


def test_target_kl_averages_the_logged_metrics_over_the_epochs_that_ran():
    # as test_vtrace_recomputes...: every ratio is 0.5 at learning rate 0, so each epoch's approx_kl is
    # (0.5 - 1) - ln 0.5 = ln 2 - 0.5 (0.193) and old_approx_kl -ln 0.5 = ln 2. Epoch 1 trains on GAE's returns,
    # epoch 2 on V-trace's. target_kl 0.1 stops after epoch 1: the value loss is epoch 1's, 0.5 mean(R_gae^2),
    # not half of it (the skipped epoch's zeros counted) nor the mean with V-trace's; 0.2 is never exceeded.
    segment = constant_value_segment(REWARDS)
    s = segment = segment._replace(logp=jnp.zeros_like(segment.logp))
    _, gae_returns = ppo.gae(s.rewards, s.values, s.terminals, s.truncations, s.bootstrap_values, s.next_values,
                             0.9, 0.8)
    stopped = frozen_update_metrics(segment, update_epochs=2, advantage="vtrace", target_kl=0.1)
    assert stopped["epochs_run"] == 1
    assert stopped["value_loss"] == pytest.approx(0.5 * np.mean(np.square(gae_returns)), rel=1e-5)
    assert stopped["approx_kl"] == pytest.approx(math.log(2) - 0.5, rel=1e-5)
    assert stopped["old_approx_kl"] == pytest.approx(math.log(2), rel=1e-5)
    both = frozen_update_metrics(segment, update_epochs=2, advantage="vtrace", target_kl=0.2)
    assert both["epochs_run"] == 2
    assert both == pytest.approx(frozen_update_metrics(segment, update_epochs=2, advantage="vtrace"), rel=1e-6)
    assert both["value_loss"] != pytest.approx(stopped["value_loss"], rel=1e-2)

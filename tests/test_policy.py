"""The actor-critic and the action distributions."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.agent import distributions
from jaxlab.agent.distributions import ActionSpec
from jaxlab.agent.policy import ActorCritic, zero_carry

KEY = jax.random.PRNGKey(0)


def make(spec=ActionSpec("discrete", (3,)), lstm=True, obs_dim=5, hidden=8, agents=4):
    policy = ActorCritic(spec, hidden_size=hidden, lstm=lstm)
    params = policy.init(KEY, zero_carry(agents, hidden), jnp.zeros((agents, obs_dim)), jnp.ones(agents, bool))
    return policy, params


def test_reset_zeroes_the_carry_only_for_flagged_agents():
    policy, params = make(agents=2)
    obs = jax.random.normal(jax.random.PRNGKey(1), (2, 5))
    carry = (jnp.ones((2, 8)), jnp.ones((2, 8)))
    (c, h), _, _, _ = policy.apply(params, carry, obs, jnp.array([True, False]))
    (c0, h0), _, _, _ = policy.apply(params, zero_carry(2, 8), obs, jnp.zeros(2, bool))
    (c1, h1), _, _, _ = policy.apply(params, carry, obs, jnp.zeros(2, bool))
    np.testing.assert_allclose(c[0], c0[0], rtol=1e-6)
    np.testing.assert_allclose(h[1], h1[1], rtol=1e-6)
    assert not np.allclose(h[0], h1[0])


def test_unroll_equals_stepping_with_resets():
    policy, params = make()
    T, A = 6, 4
    obs = jax.random.normal(jax.random.PRNGKey(2), (T, A, 5))
    resets = jnp.zeros((T, A), bool).at[3, 1].set(True).at[0].set(True)
    start = (jax.random.normal(KEY, (A, 8)), jax.random.normal(jax.random.PRNGKey(3), (A, 8)))
    carry_u, head_u, value_u, _ = policy.apply(params, start, obs, resets, method="unroll")
    carry = start
    for t in range(T):
        carry, head, value, _ = policy.apply(params, carry, obs[t], resets[t])
        np.testing.assert_allclose(head_u[t], head, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value_u[t], value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(carry_u[1], carry[1], rtol=1e-5, atol=1e-6)


def test_the_lstm_remembers_and_the_feed_forward_policy_does_not():
    T, A = 4, 2
    obs = jnp.zeros((T, A, 5)).at[0, 0, 0].set(1.0)  # agents differ only at t=0
    for lstm, differs in ((True, True), (False, False)):
        policy, params = make(lstm=lstm, agents=A)
        _, head, _, _ = policy.apply(params, zero_carry(A, 8), obs, jnp.zeros((T, A), bool), method="unroll")
        assert (not np.allclose(head[-1, 0], head[-1, 1])) == differs


def test_initial_policy_is_near_uniform():
    policy, params = make(spec=ActionSpec("discrete", (5,)))
    _, head, _, _ = policy.apply(params, zero_carry(4, 8), jax.random.normal(KEY, (4, 5)), jnp.ones(4, bool))
    _, entropy = distributions.log_prob_entropy(ActionSpec("discrete", (5,)), head, None, jnp.zeros(4, jnp.int32))
    np.testing.assert_allclose(entropy, math.log(5), rtol=1e-3)


def test_discrete_log_prob_and_masking():
    spec = ActionSpec("discrete", (3,))
    logits = jnp.array([[1.0, 2.0, 3.0]])
    logp, entropy = distributions.log_prob_entropy(spec, logits, None, jnp.array([2]))
    p = np.exp([1.0, 2.0, 3.0]) / np.exp([1.0, 2.0, 3.0]).sum()
    assert float(logp[0]) == pytest.approx(math.log(p[2]), rel=1e-6)
    assert float(entropy[0]) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-5)
    mask = jnp.array([[True, True, False]])
    samples = jax.vmap(lambda k: distributions.sample(spec, logits, None, k, mask))(jax.random.split(KEY, 500))
    assert set(np.unique(samples).tolist()) == {0, 1}
    logp_masked, _ = distributions.log_prob_entropy(spec, logits, None, jnp.array([1]), mask)
    assert float(logp_masked[0]) == pytest.approx(math.log(math.e**2 / (math.e + math.e**2)), rel=1e-5)
    assert np.isfinite(distributions.log_prob_entropy(spec, logits, None, jnp.array([2]), mask)[0]).all()
    assert int(distributions.deterministic(spec, logits, mask)[0]) == 1


def test_a_mask_leaves_illegal_actions_out_of_the_entropy_and_of_every_gradient():
    # logits [1, 2, 3] with action 2 illegal: the policy is [e, e^2] / (e + e^2) over actions 0 and 1, so the
    # entropy bonus is that of this two-action distribution, and neither it nor the log-prob moves the
    # illegal logit (an entropy of the unmasked logits would reward spreading mass onto action 2)
    spec = ActionSpec("discrete", (3,))
    logits, mask = jnp.array([[1.0, 2.0, 3.0]]), jnp.array([[True, True, False]])
    p = np.array([1.0, math.e]) / (1.0 + math.e)
    _, entropy = distributions.log_prob_entropy(spec, logits, None, jnp.array([1]), mask)
    assert float(entropy[0]) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-5)

    def objective(x):
        logp, ent = distributions.log_prob_entropy(spec, x, None, jnp.array([1]), mask)
        return (logp + ent).sum()

    grad = np.asarray(jax.grad(objective)(logits))
    assert grad[0, 2] == 0.0 and np.all(np.isfinite(grad)) and abs(grad[0, 0]) > 0.05


def test_multi_discrete_factorises():
    spec = ActionSpec("multi_discrete", (2, 3))
    logits = jnp.array([[0.0, 1.0, 0.0, 0.0, 2.0]])
    logp, entropy = distributions.log_prob_entropy(spec, logits, None, jnp.array([[1, 2]]))
    a = distributions.log_prob_entropy(ActionSpec("discrete", (2,)), logits[:, :2], None, jnp.array([1]))
    b = distributions.log_prob_entropy(ActionSpec("discrete", (3,)), logits[:, 2:], None, jnp.array([2]))
    assert float(logp[0]) == pytest.approx(float(a[0][0] + b[0][0]), rel=1e-6)
    assert float(entropy[0]) == pytest.approx(float(a[1][0] + b[1][0]), rel=1e-6)
    sample = distributions.sample(spec, logits, None, KEY)
    assert sample.shape == (1, 2) and sample.dtype == jnp.int32


def test_gaussian_log_prob_and_entropy():
    spec = ActionSpec("continuous", dim=2)
    mean, log_std = jnp.array([[0.5, -1.0]]), jnp.array([0.0, math.log(2.0)])
    logp, entropy = distributions.log_prob_entropy(spec, mean, log_std, jnp.array([[1.5, 1.0]]))
    expected = (-0.5 * 1.0 - 0.5 * math.log(2 * math.pi)) + (-0.5 * 1.0 - math.log(2.0) - 0.5 * math.log(2 * math.pi))
    assert float(logp[0]) == pytest.approx(expected, rel=1e-6)
    assert float(entropy[0]) == pytest.approx(math.log(2.0) + 2 * 0.5 * (1 + math.log(2 * math.pi)), rel=1e-6)
    draws = jax.vmap(lambda k: distributions.sample(spec, mean, log_std, k))(jax.random.split(KEY, 4000))
    np.testing.assert_allclose(draws.std(axis=0)[0], [1.0, 2.0], rtol=0.05)


def test_bfloat16_matmuls_keep_float32_params_and_outputs_close_to_float32():
    spec, hidden, A, T = ActionSpec("discrete", (3,)), 32, 16, 6
    full = ActorCritic(spec, hidden_size=hidden)
    half = ActorCritic(spec, hidden_size=hidden, dtype="bfloat16")
    params = full.init(KEY, zero_carry(A, hidden), jnp.zeros((A, 5)), jnp.ones(A, bool))
    assert {x.dtype for x in jax.tree.leaves(half.init(KEY, zero_carry(A, hidden), jnp.zeros((A, 5)),
                                                          jnp.ones(A, bool)))} == {jnp.dtype("float32")}
    obs = jax.random.normal(jax.random.PRNGKey(3), (T, A, 5))
    resets = jnp.zeros((T, A), bool).at[0].set(True)
    carry_f, head_f, value_f, _ = full.apply(params, zero_carry(A, hidden), obs, resets, method="unroll")
    carry_h, head_h, value_h, _ = half.apply(params, zero_carry(A, hidden), obs, resets, method="unroll")
    assert head_h.dtype == value_h.dtype == carry_h[0].dtype == jnp.float32
    # bfloat16 keeps 8 bits of mantissa: errors near 1e-2 of the activations, not 1e-6 and not 1
    err = float(jnp.max(jnp.abs(carry_h[1] - carry_f[1])))
    assert 1e-5 < err < 5e-2
    np.testing.assert_allclose(value_h, value_f, atol=5e-2)


def all_equations(jaxpr):
    """Every equation of a jaxpr, those inside scans, conds and other sub-jaxprs included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from all_equations(inner)


@pytest.mark.parametrize("method", ["__call__", "unroll"])
def test_bfloat16_only_feeds_matmuls_which_accumulate_and_return_float32(method):
    """With precision bfloat16, the only bfloat16 values are matmul inputs: every bfloat16 value is made
    by a cast and read only by a dot_general, and every dot_general returns float32 (so bias adds,
    gates, the carry and the heads are float32)."""
    spec, hidden, A, T = ActionSpec("discrete", (3,)), 16, 4, 3
    half = ActorCritic(spec, hidden_size=hidden, dtype="bfloat16")
    params = half.init(KEY, zero_carry(A, hidden), jnp.zeros((A, 5)), jnp.ones(A, bool))
    shape = (A, 5) if method == "__call__" else (T, A, 5)
    resets = jnp.zeros(shape[:-1], bool)
    jaxpr = jax.make_jaxpr(lambda p, o: half.apply(p, zero_carry(A, hidden), o, resets, method=method))(
        params, jnp.ones(shape)).jaxpr
    equations = list(all_equations(jaxpr))
    readers = {}
    for eqn in equations:
        for var in eqn.invars:
            if hasattr(var, "aval"):
                readers.setdefault(id(var), []).append(eqn.primitive.name)
    bf16_inputs = 0
    for eqn in equations:
        if eqn.primitive.name == "dot_general":
            assert all(v.aval.dtype == jnp.float32 for v in eqn.outvars)
            if any(v.aval.dtype == jnp.bfloat16 for v in eqn.invars):
                assert eqn.params["preferred_element_type"] == jnp.float32
                bf16_inputs += 1
        for var in eqn.outvars:
            if var.aval.dtype == jnp.bfloat16:
                assert eqn.primitive.name == "convert_element_type", eqn
                assert set(readers.get(id(var), [])) <= {"dot_general"}, (eqn, readers.get(id(var)))
    # the encoder, then the LSTM's gates: one matmul of [x, h] by [W_x; W_h], in a step and in the unroll
    assert bf16_inputs == 2


def test_bfloat16_gradients_take_bfloat16_matmul_inputs_too_and_stay_close_to_float32():
    """In bfloat16 the backward's matmuls (the gradients of the encoder's and the LSTM's inputs and
    weights) take bfloat16 inputs as well; only the float32 heads' matmuls take float32. The gradients
    are float32 and within bfloat16's rounding of the float32 ones."""
    spec, hidden, A, T = ActionSpec("discrete", (3,)), 16, 4, 6
    full = ActorCritic(spec, hidden_size=hidden)
    half = ActorCritic(spec, hidden_size=hidden, dtype="bfloat16")
    params = full.init(KEY, zero_carry(A, hidden), jnp.zeros((A, 5)), jnp.ones(A, bool))
    obs = jax.random.normal(jax.random.PRNGKey(3), (T, A, 5))
    resets = jnp.zeros((T, A), bool).at[0].set(True)

    def loss(model):
        def of(p):
            _, head, value, _ = model.apply(p, zero_carry(A, hidden), obs, resets, method="unroll")
            return jnp.sum(jnp.sin(head)) + jnp.sum(value ** 2)
        return of

    jaxpr = jax.make_jaxpr(jax.grad(loss(half)))(params).jaxpr
    kinds = {"bfloat16": 0, "float32": 0}
    for eqn in all_equations(jaxpr):
        if eqn.primitive.name == "dot_general":
            dtypes = {v.aval.dtype for v in eqn.invars}
            assert len(dtypes) == 1 and all(v.aval.dtype == jnp.float32 for v in eqn.outvars), eqn
            kinds[str(dtypes.pop())] += 1
            if jnp.float32 in {v.aval.dtype for v in eqn.invars}:  # a head's: an operand has 3 or 1 features
                assert any(3 in v.aval.shape or 1 in v.aval.shape for v in eqn.invars), eqn
    assert kinds["bfloat16"] >= 6  # encoder and LSTM: forward, gradient of the input, gradient of the weights
    grads_f, grads_h = jax.grad(loss(full))(params), jax.grad(loss(half))(params)
    for (path, gf), gh in zip(jax.tree_util.tree_leaves_with_path(grads_f), jax.tree.leaves(grads_h)):
        assert gh.dtype == jnp.float32
        scale = float(jnp.max(jnp.abs(gf)))
        err = float(jnp.max(jnp.abs(gh - gf)))
        assert err < 0.05 * scale + 1e-6, (jax.tree_util.keystr(path), err, scale)


# ---- a mask row that allows nothing: never a silent action ---------------------------------------

def test_a_discrete_mask_row_that_allows_nothing_gives_action_minus_one_and_nan():
    spec = ActionSpec("discrete", (3,))
    logits = jnp.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    mask = jnp.array([[True, True, False], [False, False, False]])
    draws = jax.vmap(lambda k: distributions.sample(spec, logits, None, k, mask))(jax.random.split(KEY, 200))
    assert set(np.unique(draws[:, 0]).tolist()) == {0, 1} and set(draws[:, 1].tolist()) == {-1}
    np.testing.assert_array_equal(distributions.deterministic(spec, logits, mask), [1, -1])
    logp, entropy = distributions.log_prob_entropy(spec, logits, None, jnp.array([1, 0]), mask)
    assert float(logp[0]) == pytest.approx(math.log(math.e**2 / (math.e + math.e**2)), rel=1e-5)
    assert np.isfinite(entropy[0]) and np.isnan(logp[1]) and np.isnan(entropy[1])
    # whatever action is asked about, -1 included: the row has no distribution to score it under
    assert np.isnan(distributions.log_prob_entropy(spec, logits, None, jnp.array([1, -1]), mask)[0][1])


def test_a_multi_discrete_factor_that_allows_nothing_gives_minus_one_in_that_component_only():
    spec = ActionSpec("multi_discrete", (2, 3))
    logits = jnp.zeros((2, 5)).at[:, 1].set(5.0).at[:, 4].set(5.0)
    mask = jnp.array([[True, True, True, True, True],
                      [True, True, False, False, False]])  # agent 1: component 1 has no legal action
    jitted = jax.jit(lambda h, k, m: distributions.sample(spec, h, None, k, m))
    draws = np.stack([jitted(logits, k, mask) for k in jax.random.split(KEY, 50)])
    assert set(draws[:, 1, 1].tolist()) == {-1} and set(draws[:, 1, 0].tolist()) <= {0, 1}
    assert (draws[:, 0] >= 0).all() and set(draws[:, 0, 1].tolist()) <= {0, 1, 2}
    np.testing.assert_array_equal(distributions.deterministic(spec, logits, mask), [[1, 2], [1, -1]])
    logp, entropy = jax.jit(lambda h, a, m: distributions.log_prob_entropy(spec, h, None, a, m))(
        logits, jnp.array([[1, 2], [1, 0]]), mask)
    assert np.isfinite(logp[0]) and np.isfinite(entropy[0]) and np.isnan(logp[1]) and np.isnan(entropy[1])


def test_without_a_mask_or_with_a_full_one_nothing_is_nan():
    spec = ActionSpec("multi_discrete", (2, 3))
    logits = jax.random.normal(KEY, (4, 5))
    actions = distributions.sample(spec, logits, None, KEY)
    full = jnp.ones((4, 5), bool)
    np.testing.assert_array_equal(actions, distributions.sample(spec, logits, None, KEY, full))
    a, b = (distributions.log_prob_entropy(spec, logits, None, actions, m) for m in (None, full))
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
    assert np.isfinite(a[0]).all() and np.isfinite(a[1]).all()


@pytest.mark.parametrize("name, mask_check", [("lure", "strict"), ("lure", "off"), ("multicue", "strict")])
def test_a_python_mask_that_allows_nothing_is_refused_at_the_vecenv_step(name, mask_check):
    """A mask built in Python (lure's own with one row cleared; a made-up one for multicue, which has
    none) gives agent 1 action -1, which the VecEnv refuses naming the agent, stepping nothing."""
    import jaxlab

    with jaxlab.make(name, num_envs=3, seed=0, mask_check=mask_check) as env:
        env.reset()
        spec = ActionSpec.from_space(env.action_space)
        if env.action_mask is not None:
            mask = env.action_mask.copy()
            mask[1] = False
        else:
            mask = np.ones((3, spec.head_size), bool)
            mask[1, spec.nvec[0] + spec.nvec[1]:] = False  # component 2 of agent 1
        head = jnp.zeros((3, spec.head_size))
        actions = np.asarray(distributions.sample(spec, head, None, KEY, jnp.asarray(mask)))
        assert (actions[1] == -1).any() and (actions[[0, 2]] >= 0).all()
        before = env.save_state()["cenv"]
        component = " component 2" if name == "multicue" else ""
        with pytest.raises(ValueError, match=rf"^agent 1{component} has action -1, out of range for "):
            env.step(actions)
        np.testing.assert_array_equal(env.save_state()["cenv"], before)


def test_an_all_false_mask_row_stops_the_rollout_and_makes_the_loss_nan():
    """Through the trainer: a segment whose mask has a row that allows nothing makes the PPO losses NaN,
    which the training loop's non-finite check stops on; a rollout step with such a row is refused."""
    from jaxlab.config import load_config
    from jaxlab.observe.alerts import nonfinite_losses
    from jaxlab.train.rollout import EnvStepError
    from jaxlab.train.trainer import Trainer

    config, _ = load_config("lure", flags=["--vec.num-envs", "8", "--train.bptt-horizon", "8",
                                           "--train.minibatch-size", "16", "--policy.hidden-size", "16",
                                           "--train.total-timesteps", "128"])
    with Trainer(config) as trainer:
        row = trainer.env.action_mask[6].copy()
        trainer.env.action_mask[6] = False  # what the first policy call sees for agent 6
        with pytest.raises(EnvStepError, match=r"^env 'lure' failed while stepping: ValueError: env 'lure' #6 agent 0 "
                                               r"\(row 6\) at step 0: its action mask allows no action \(the row is "
                                               r"all 0\)"):
            trainer.rollout.step_once(trainer.acting_params)
        trainer.env.action_mask[6] = row  # nothing was stepped: the env goes on from where it was
        trainer.evaluate()
        good = trainer.segment
        assert good.masks is not None and good.masks.shape == (8, 8, 4) and bool(good.masks.any(-1).all())
        trainer.segment = good._replace(masks=good.masks.at[3, 5].set(False))
        record = {**trainer.train(), "update": 1}
        assert np.isnan(record["policy_loss"]) and "policy_loss" in nonfinite_losses(record)


# ---- uint8 observations ----------------------------------------------------------------------------

def test_uint8_observations_enter_the_encoder_divided_by_255():
    policy, params = make(obs_dim=24)
    pixels = jax.random.randint(KEY, (3, 4, 2, 6, 2), 0, 256).astype(jnp.uint8)  # [T, A, 2, 6, 2] images
    resets = jnp.zeros((3, 4), bool).at[0].set(True)
    scaled = pixels.astype(jnp.float32) / 255.0
    as_u8 = policy.apply(params, zero_carry(4, 8), pixels, resets, method="unroll")
    as_f32 = policy.apply(params, zero_carry(4, 8), scaled, resets, method="unroll")
    raw = policy.apply(params, zero_carry(4, 8), pixels.astype(jnp.float32), resets, method="unroll")
    np.testing.assert_array_equal(as_u8[1], as_f32[1])
    np.testing.assert_array_equal(as_u8[2], as_f32[2])
    assert not np.allclose(as_u8[1], raw[1], atol=1e-3)  # float32 observations are not scaled
    _, head, value, _ = policy.apply(params, zero_carry(4, 8), pixels[0], resets[0])
    np.testing.assert_allclose(head, as_f32[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, as_f32[2][0], rtol=1e-5, atol=1e-6)

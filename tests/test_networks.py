"""The [policy] network options: mlp_layers of any depth, the activation, separate actor and critic
trunks, the cnn encoder on uint8 HWC images (Nature-DQN-like default), the config checks, and a few
updates through the trainer with each (one compile per jitted function)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.agent.distributions import ActionSpec
from jaxlab.agent.policy import ActorCritic
from jaxlab.config import ConfigError, check_network, derive_sizes, load_config
from jaxlab.run.loop import train_loop
from jaxlab.train.trainer import Trainer

KEY = jax.random.PRNGKey(0)
SPEC = ActionSpec("discrete", (3,))


def init(policy, obs):
    A = obs.shape[0]
    return policy.init(KEY, policy.initial_carry(A), obs, jnp.ones(A, bool))


def shapes(params):
    return jax.tree.map(lambda x: tuple(x.shape), params["params"])


def test_mlp_layers_of_any_depth():
    policy = ActorCritic(SPEC, hidden_size=8, mlp_layers=(32, 16, 4))
    s = shapes(init(policy, jnp.zeros((2, 5))))
    assert s["encoder"]["kernel"] == (5, 32) and s["encoder_1"]["kernel"] == (32, 16)
    assert s["encoder_2"]["kernel"] == (16, 4) and s["input_gates"]["kernel"] == (4, 32)
    assert s["recurrent_kernel"] == (8, 32) and s["actor"]["kernel"] == (8, 3) and s["critic"]["kernel"] == (8, 1)
    flat = ActorCritic(SPEC, hidden_size=8, mlp_layers=(), lstm=False)  # no encoder layer: obs to the heads
    s = shapes(init(flat, jnp.zeros((2, 5))))
    assert set(s) == {"actor", "critic"} and s["actor"]["kernel"] == (5, 3)


def test_the_activation_is_applied_after_every_encoder_layer():
    obs = jax.random.normal(KEY, (4, 5))
    outputs = {}
    for name in ("gelu", "relu", "tanh"):
        policy = ActorCritic(SPEC, hidden_size=8, lstm=False, mlp_layers=(16, 16), activation=name)
        params = init(policy, obs)  # same key, same params whatever the activation
        _, head, value, _ = policy.apply(params, policy.initial_carry(4), obs, jnp.ones(4, bool))
        outputs[name] = np.asarray(value)
        if name == "relu":  # by hand: relu(relu(x W0 + b0) W1 + b1) Wc + bc
            p = params["params"]
            x = np.maximum(np.asarray(obs) @ p["encoder"]["kernel"] + p["encoder"]["bias"], 0)
            x = np.maximum(x @ p["encoder_1"]["kernel"] + p["encoder_1"]["bias"], 0)
            np.testing.assert_allclose(value, (x @ p["critic"]["kernel"] + p["critic"]["bias"])[:, 0], rtol=1e-4,
                                       atol=1e-5)
    assert not np.allclose(outputs["gelu"], outputs["relu"]) and not np.allclose(outputs["relu"], outputs["tanh"])


def test_separate_trunks_give_separate_actor_and_critic_parameter_trees():
    policy = ActorCritic(SPEC, hidden_size=8, mlp_layers=(16, 16), shared_trunk=False)
    params = init(policy, jnp.zeros((4, 5)))
    names = set(params["params"])
    assert {"actor_encoder", "actor_encoder_1", "actor_input_gates", "actor_recurrent_kernel", "critic_encoder",
            "critic_encoder_1", "critic_input_gates", "critic_recurrent_kernel", "actor", "critic"} == names
    carry = policy.initial_carry(4)
    assert len(carry) == 2 and all(c[0].shape == (4, 8) for c in carry)  # ((c, h) actor, (c, h) critic)
    obs = jax.random.normal(KEY, (6, 4, 5))
    resets = jnp.zeros((6, 4), bool).at[0].set(True)

    def value_sum(p):
        return policy.apply(p, carry, obs, resets, method="unroll")[2].sum()

    def head_sum(p):
        return policy.apply(p, carry, obs, resets, method="unroll")[1].sum()

    g_value, g_head = jax.grad(value_sum)(params)["params"], jax.grad(head_sum)(params)["params"]
    for name in names:
        value_moves = any(np.abs(x).sum() > 0 for x in jax.tree.leaves(g_value[name]))
        head_moves = any(np.abs(x).sum() > 0 for x in jax.tree.leaves(g_head[name]))
        assert value_moves == (name.startswith("critic")), name
        assert head_moves == (name.startswith("actor")), name
    # unroll equals stepping, with the two carries
    c, heads, values = carry, [], []
    for t in range(6):
        c, h, v, _ = policy.apply(params, c, obs[t], resets[t])
        heads.append(h), values.append(v)
    _, head, value, _ = policy.apply(params, carry, obs, resets, method="unroll")
    np.testing.assert_allclose(head, jnp.stack(heads), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, jnp.stack(values), rtol=1e-5, atol=1e-6)


def test_the_default_cnn_is_nature_dqns_on_uint8_hwc_images():
    policy = ActorCritic(SPEC, hidden_size=8, encoder_type="cnn", mlp_layers=(512,))
    pixels = jax.random.randint(KEY, (2, 84, 84, 4), 0, 256).astype(jnp.uint8)
    params = init(policy, pixels)
    s = shapes(params)
    # Nature DQN: 32 8x8 stride 4 -> 20x20, 64 4x4 stride 2 -> 9x9, 64 3x3 stride 1 -> 7x7; 7*7*64 = 3136
    assert s["conv_0"]["kernel"] == (8, 8, 4, 32) and s["conv_1"]["kernel"] == (4, 4, 32, 64)
    assert s["conv_2"]["kernel"] == (3, 3, 64, 64) and s["encoder"]["kernel"] == (3136, 512)
    _, head, value, _ = policy.apply(params, policy.initial_carry(2), pixels, jnp.ones(2, bool))
    scaled = pixels.astype(jnp.float32) / 255.0  # uint8 enters divided by 255
    _, head_f, value_f, _ = policy.apply(params, policy.initial_carry(2), scaled, jnp.ones(2, bool))
    np.testing.assert_allclose(head, head_f, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, value_f, rtol=1e-5, atol=1e-6)
    small = ActorCritic(SPEC, hidden_size=8, encoder_type="cnn", cnn_channels=(4, 8), cnn_kernels=(3, 2),
                        cnn_strides=(1, 2), mlp_layers=(16,))
    s = shapes(init(small, jnp.zeros((2, 8, 8, 3), jnp.uint8)))  # 8 -> 6 -> 3: 3*3*8 = 72
    assert s["conv_0"]["kernel"] == (3, 3, 3, 4) and s["conv_1"]["kernel"] == (2, 2, 4, 8)
    assert s["encoder"]["kernel"] == (72, 16)


def test_network_config_checks_name_the_values_and_a_fix():
    config, _ = load_config("cartpole", flags=["--policy.encoder", "cnn"])
    with pytest.raises(ConfigError, match=r"policy.encoder='cnn' needs image observations .* \[4\]; use "
                                          r"--policy.encoder mlp"):
        check_network(config, (4,))
    config, _ = load_config("spot", flags=["--policy.encoder", "cnn"])  # 8x8 images: 8x8 stride 4 -> 1x1, 4x4 no
    with pytest.raises(ConfigError, match=r"do not fit spot's 8x8 images: convolution 1 \(kernel 4, stride 2\)"):
        check_network(config, (8, 8, 3))
    config, _ = load_config("spot", flags=["--policy.encoder", "cnn", "--policy.cnn-channels", "8,8"])
    with pytest.raises(ConfigError, match="one entry per convolution"):
        derive_sizes(config, 1)  # every invariant, before anything is built
    config, _ = load_config("cartpole", flags=["--policy.activation", "swish"])
    with pytest.raises(ConfigError, match="policy.activation"):
        derive_sizes(config, 1)
    with pytest.raises(ConfigError, match=r"policy.mlp_layers\[1\]=0 must be at least 1"):
        load_config("cartpole", flags=["--policy.mlp-layers", "64,0"])
    config, _ = load_config("cartpole", flags=["--policy.mlp-layers", "[512, 256]"])
    assert config.policy.mlp_layers == (512, 256)


SMALL = ["--vec.num-envs", "8", "--train.bptt-horizon", "8", "--train.minibatch-size", "16",
         "--policy.hidden-size", "16", "--train.total-timesteps", "640"]


@pytest.mark.parametrize("env,flags", [
    ("cartpole", ["--policy.mlp-layers", "32,16", "--policy.activation", "relu", "--policy.shared-trunk", "false"]),
    ("spot", ["--policy.encoder", "cnn", "--policy.cnn-channels", "8,8", "--policy.cnn-kernels", "3,3",
              "--policy.cnn-strides", "1,1", "--policy.mlp-layers", "32"]),
    ("cartpole", ["--train.advantage", "vtrace", "--train.prio-alpha", "0.8"]),
    ("pendulum", ["--train.advantage", "vtrace", "--policy.shared-trunk", "false"]),
])
def test_every_option_trains_with_one_compile_per_jitted_function(env, flags):
    import chex

    chex.clear_trace_counter()  # chex counts by function across the parametrised cases
    config, _ = load_config(env, flags=[*SMALL, *flags])
    with Trainer(config, max_traces=1) as trainer:
        records = train_loop(trainer, updates=3)
    assert records[-1]["compiles"] == 3
    assert all(np.isfinite(r["policy_loss"]) and np.isfinite(r["value_loss"]) for r in records)

"""The built-in actor-critic: a trunk (encoder -> LSTM, or no LSTM when feed-forward) -> actor and critic
heads; one trunk shared by both heads, or one trunk each (``shared_trunk`` False).

Shapes (A = agents, T = time, H = hidden_size, O = flattened observation size, k = head size):
    carry   (c [A, H], h [A, H])    the LSTM state, zeros at the start of every episode; with separate
                                    trunks a pair of them: (actor (c, h), critic (c, h)). initial_carry(A)
                                    makes it.
    reset   [A] bool                the previous step ended this agent's episode: zero its carry first
    step:   obs [A, ...]            -> carry, head [A, k], value [A], log_std [k] or None
    unroll: obs [T, A, ...], reset [T, A] from a start carry -> carry, head [T, A, k], value [T, A], log_std
Every policy jaxlab trains (this one, or a user's module through jaxlab.agent.custom.ModulePolicy) has
this interface: init(key, carry, obs, reset) -> params, apply(params, carry, obs, reset, method=None or
"unroll"), initial_carry(num_agents).

Encoders (``encoder_type``, the config's policy.encoder), each followed by the dense layers ``mlp_layers`` (widths, any depth; each
layer Dense + ``activation``):
    mlp  observations [*batch, ...] of any shape flattened to [*batch, O]
    cnn  image observations [*batch, H, W, C] (or [H, W]: C = 1) through VALID convolutions
         (``cnn_channels``, ``cnn_kernels``, ``cnn_strides``; the default is Nature-DQN's 32x8/4, 64x4/2,
         64x3/1, for 84x84 frames), each + ``activation``, then flattened
uint8 observations (pixels, 0..255) are cast to float32 and divided by 255 so they enter in [0, 1];
float observations enter as they are (normalised before the policy when train.obs_norm is on, as uint8 codes of
one dimension are with its auto).
``mlp_layers`` None means one layer of ``hidden_size`` (the network before mlp_layers existed).
Init: orthogonal, gain sqrt 2 for encoder layers, 1 for the LSTM, ``actor_init_scale`` (small: a near
uniform first policy) and ``critic_init_scale`` for the heads; zero biases except the LSTM's forget gate (1).

Parameter names: the shared trunk's layers are conv_0.., encoder, encoder_1.., input_gates and
recurrent_kernel; separate trunks prefix them with actor_ and critic_; then actor, critic, log_std.
Every LSTM step, the rollout's call and each step of the training unroll's lax.scan alike, computes its
gates in one matmul, [x, h] [A, F + H] by [W_x; W_h] [F + H, 4H]: no [T, A, 4H] input projection of
all T steps is materialised, which on a CPU keeps each step's operands in cache (README, "The rollout
step on a CPU" and "The update on a CPU"). ``dtype`` (float32 or bfloat16) is the input dtype of every
encoder and LSTM matmul and convolution; each accumulates and returns float32
(``preferred_element_type``), so bias adds, activations, the carry, the heads and all outputs are
float32, as are the params.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.agent.distributions import ActionSpec
from jaxlab.agent.networks import ACTIVATIONS, Conv, as_float, dense, image_dims, matmul, matmul_in  # noqa: F401

Carry = tuple[jax.Array, jax.Array]


def zero_carry(num_agents: int, hidden_size: int) -> Carry:
    """Zeros (c [A, H], h [A, H]), float32, copied from numpy: jnp.zeros would compile at start-up."""
    zeros = np.zeros((num_agents, hidden_size), np.float32)
    return jax.device_put(zeros, may_alias=False), jax.device_put(zeros, may_alias=False)


def reset_carry(carry: Carry, reset: jax.Array) -> Carry:
    """(c [A, H], h [A, H]) with the rows of agents whose ``reset`` [A] is set zeroed."""
    keep = (~reset)[:, None].astype(carry[0].dtype)
    return carry[0] * keep, carry[1] * keep


def lstm_gates(carry: Carry, gates: jax.Array) -> Carry:
    """The new carry from the old (c [A, H], h [A, H]) and the gates [A, 4H] (i, f, g, o)."""
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    c = jax.nn.sigmoid(f) * carry[0] + jax.nn.sigmoid(i) * jnp.tanh(g)
    return c, jax.nn.sigmoid(o) * jnp.tanh(c)


class ActorCritic(nn.Module):
    action: ActionSpec
    hidden_size: int = 128
    lstm: bool = True
    actor_init_scale: float = 0.01
    dtype: str = "float32"
    scan_unroll: int = 1  # time steps per iteration of unroll()'s lax.scan
    encoder_type: str = "mlp"  # policy.encoder: mlp or cnn
    mlp_layers: tuple[int, ...] | None = None  # None: (hidden_size,)
    activation: str = "gelu"
    shared_trunk: bool = True
    critic_init_scale: float = 1.0
    cnn_channels: tuple[int, ...] = (32, 64, 64)
    cnn_kernels: tuple[int, ...] = (8, 4, 3)
    cnn_strides: tuple[int, ...] = (4, 2, 1)

    @property
    def trunks(self) -> tuple[str, ...]:
        """The parameter-name prefix of each trunk: one shared, or the actor's and the critic's."""
        return ("",) if self.shared_trunk else ("actor_", "critic_")

    @property
    def widths(self) -> tuple[int, ...]:
        return (self.hidden_size,) if self.mlp_layers is None else tuple(self.mlp_layers)

    def initial_carry(self, num_agents: int):
        """The carry an episode starts from: zeros, (c, h) per trunk."""
        carries = tuple(zero_carry(num_agents, self.hidden_size) for _ in self.trunks)
        return carries[0] if self.shared_trunk else carries

    def setup(self):
        H = self.hidden_size
        for prefix in self.trunks:
            if self.encoder_type == "cnn":
                for i, (channels, kernel, stride) in enumerate(zip(self.cnn_channels, self.cnn_kernels,
                                                                   self.cnn_strides)):
                    setattr(self, f"{prefix}conv_{i}", Conv(channels, kernel, stride, self.dtype))
            for i, width in enumerate(self.widths):
                setattr(self, f"{prefix}encoder" + (f"_{i}" if i else ""), dense(width, self.dtype))
            if self.lstm:
                setattr(self, f"{prefix}input_gates",
                        nn.Dense(4 * H, kernel_init=nn.initializers.orthogonal(1.0), bias_init=self._forget_bias_init,
                                 dtype=jnp.float32, dot_general=matmul_in(self.dtype)))
                setattr(self, f"{prefix}recurrent_kernel",
                        self.param(f"{prefix}recurrent_kernel", nn.initializers.orthogonal(1.0), (H, 4 * H)))
        self.actor = nn.Dense(self.action.head_size, kernel_init=nn.initializers.orthogonal(self.actor_init_scale))
        self.critic = nn.Dense(1, kernel_init=nn.initializers.orthogonal(self.critic_init_scale))
        if self.action.kind == "continuous":
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action.dim,))

    def _forget_bias_init(self, key, shape, dtype=jnp.float32):
        """Forget-gate bias 1 so that memory persists from the start."""
        H = self.hidden_size
        return jnp.zeros(shape, dtype).at[H:2 * H].set(1.0)

    def _encode(self, prefix: str, obs: jax.Array, batch_dims: int) -> jax.Array:
        """obs [*batch, ...] (``batch_dims`` leading axes) -> features [*batch, F] of one trunk."""
        act = ACTIVATIONS[self.activation]
        batch = obs.shape[:batch_dims]
        x = as_float(obs)
        if self.encoder_type == "cnn":
            x = x.reshape((-1, *image_dims(obs.shape[batch_dims:])))
            for i in range(len(self.cnn_channels)):
                x = act(getattr(self, f"{prefix}conv_{i}")(x))
        x = x.reshape(batch + (-1,))
        for i in range(len(self.widths)):
            x = act(getattr(self, f"{prefix}encoder" + (f"_{i}" if i else ""))(x))
        return x

    def _split(self, carry):
        return (carry,) if self.shared_trunk else carry

    def _join(self, carries):
        return carries[0] if self.shared_trunk else tuple(carries)

    def _heads(self, actor_x: jax.Array, critic_x: jax.Array):
        log_std = self.log_std if self.action.kind == "continuous" else None
        return self.actor(actor_x.astype(jnp.float32)), self.critic(critic_x.astype(jnp.float32))[..., 0], log_std

    def _gate_weights(self, prefix: str, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The LSTM's gate weights of one trunk as one matmul: ([W_x; W_h] [F + H, 4H], b [4H]), float32,
        of the params input_gates (kernel, bias) and recurrent_kernel. x [..., F] is only used to create the
        params at init."""
        dense = getattr(self, f"{prefix}input_gates")
        if self.is_initializing():
            dense(x)  # creates its params
        p = dense.variables["params"]
        return jnp.concatenate([p["kernel"], getattr(self, f"{prefix}recurrent_kernel")]), p["bias"]

    def _lstm_step(self, weights: tuple[jax.Array, jax.Array], carry: Carry, x: jax.Array, reset: jax.Array) -> Carry:
        """One LSTM step from features x [A, F]: the carry is reset, then the gates W_x x + W_h h + b
        [A, 4H] are one matmul, [x, h] [A, F + H] by [W_x; W_h]."""
        kernel, bias = weights
        c, h = reset_carry(carry, reset)
        inputs = jnp.concatenate([x, h], axis=-1)
        gates = matmul(inputs, kernel, self.dtype) + bias
        return lstm_gates((c, h), gates)

    def __call__(self, carry, obs: jax.Array, reset: jax.Array):
        """One step for all agents: (carry, head [A, k], value [A], log_std or None)."""
        features, carries = [], []
        for prefix, c in zip(self.trunks, self._split(carry)):
            x = self._encode(prefix, obs, 1)
            if self.lstm:
                c = self._lstm_step(self._gate_weights(prefix, x), c, x, reset)
                x = c[1]
            features.append(x)
            carries.append(c)
        return (self._join(carries), *self._heads(features[0], features[-1]))

    def unroll(self, carry, obs: jax.Array, reset: jax.Array):
        """T steps from ``carry``: (carry, head [T, A, k], value [T, A], log_std or None)."""
        features, carries = [], []
        for prefix, c in zip(self.trunks, self._split(carry)):
            x = self._encode(prefix, obs, 2)
            if self.lstm:
                weights = self._gate_weights(prefix, x)

                # the backward pass keeps each step's gate matmul output and recomputes the step's
                # elementwise ops instead of storing them (prevent_cse is not needed inside a scan)
                @functools.partial(jax.checkpoint, policy=jax.checkpoint_policies.dots_saveable,
                                   prevent_cse=False)
                def step(c, inputs, weights=weights):
                    c = self._lstm_step(weights, c, *inputs)
                    return c, c[1]

                c, x = jax.lax.scan(step, c, (x, reset), unroll=self.scan_unroll)
            features.append(x)
            carries.append(c)
        return (self._join(carries), *self._heads(features[0], features[-1]))

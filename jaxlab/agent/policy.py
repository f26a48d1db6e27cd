"""The actor-critic: encoder MLP -> LSTM (or nothing, when feed-forward) -> actor and critic heads.

Shapes (A = agents, T = time, H = hidden_size, O = flattened observation size):
    carry   (c [A, H], h [A, H])    the LSTM state; zeros at the start of every episode
    reset   [A] bool                the previous step ended this agent's episode: zero its carry first
    step:   obs [A, ...]            -> carry, head [A, head_size], value [A]
    unroll: obs [T, A, ...], reset [T, A] from a start carry -> carry, head [T, A, head_size], value [T, A]
Observations [*batch, ...] of any shape are flattened to [*batch, O] and cast to float32; uint8 ones
(pixels, 0..255) are also divided by 255, so they enter the encoder in [0, 1]; float32 ones enter as
they are. The encoder is one Dense layer over the flattened values, images included.
The input projection of the LSTM is applied to all T steps at once; only the recurrent matmul is
inside the lax.scan. ``dtype`` (float32 or bfloat16) is the input dtype of the encoder and LSTM
matmuls (the encoder, the LSTM's input projection and its recurrent matmul); every one of them
accumulates and returns float32 (``preferred_element_type``), so bias adds, activations, the carry,
the heads and all outputs are float32, as are the params.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlab.agent.distributions import ActionSpec

Carry = tuple[jax.Array, jax.Array]


def zero_carry(num_agents: int, hidden_size: int) -> Carry:
    return (jnp.zeros((num_agents, hidden_size), jnp.float32), jnp.zeros((num_agents, hidden_size), jnp.float32))


def matmul_in(dtype):
    """A dot_general for flax's Dense that casts both operands to ``dtype`` and accumulates and returns
    float32, whatever ``dtype`` is."""

    def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
        return jax.lax.dot_general(lhs.astype(dtype), rhs.astype(dtype), dimension_numbers, precision=precision,
                                   preferred_element_type=jnp.float32)

    return dot_general


def lstm_cell(recurrent_kernel: jax.Array, carry: Carry, input_gates: jax.Array, reset: jax.Array,
              dtype=jnp.float32) -> Carry:
    """One LSTM step. input_gates [A, 4H] = W_x x + b (precomputed, float32); reset [A] zeroes the carry
    first; the recurrent matmul takes ``dtype`` inputs and accumulates in float32."""
    c, h = carry
    keep = (~reset)[:, None].astype(c.dtype)
    c, h = c * keep, h * keep
    gates = input_gates + jnp.dot(h.astype(dtype), recurrent_kernel.astype(dtype),
                                  preferred_element_type=jnp.float32)
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    return c, h


class ActorCritic(nn.Module):
    action: ActionSpec
    hidden_size: int = 128
    lstm: bool = True
    actor_init_scale: float = 0.01
    dtype: str = "float32"
    scan_unroll: int = 1  # time steps per iteration of unroll()'s lax.scan

    def setup(self):
        H = self.hidden_size
        matmul = matmul_in(self.dtype)  # params and results float32; only the matmul inputs take dtype
        self.encoder = nn.Dense(H, kernel_init=nn.initializers.orthogonal(math.sqrt(2)), dtype=jnp.float32,
                                dot_general=matmul)
        if self.lstm:
            self.input_gates = nn.Dense(4 * H, kernel_init=nn.initializers.orthogonal(1.0),
                                        bias_init=self._forget_bias_init, dtype=jnp.float32, dot_general=matmul)
            self.recurrent_kernel = self.param("recurrent_kernel", nn.initializers.orthogonal(1.0), (H, 4 * H))
        self.actor = nn.Dense(self.action.head_size, kernel_init=nn.initializers.orthogonal(self.actor_init_scale))
        self.critic = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))
        if self.action.kind == "continuous":
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action.dim,))

    def _forget_bias_init(self, key, shape, dtype=jnp.float32):
        """Forget-gate bias 1 so that memory persists from the start."""
        H = self.hidden_size
        return jnp.zeros(shape, dtype).at[H:2 * H].set(1.0)

    def _encode(self, obs: jax.Array, batch_dims: int) -> jax.Array:
        """obs [*batch, ...] (``batch_dims`` leading axes) -> features [*batch, H]; uint8 obs / 255."""
        x = obs.reshape(obs.shape[:batch_dims] + (-1,)).astype(jnp.float32)
        if obs.dtype == jnp.uint8:
            x = x / 255.0
        return nn.gelu(self.encoder(x))

    def _heads(self, x: jax.Array):
        x = x.astype(jnp.float32)
        log_std = self.log_std if self.action.kind == "continuous" else None
        return self.actor(x), self.critic(x)[..., 0], log_std

    def __call__(self, carry: Carry, obs: jax.Array, reset: jax.Array):
        """One step for all agents: (carry, head [A, k], value [A], log_std or None)."""
        x = self._encode(obs, 1)
        if self.lstm:
            gates = self.input_gates(x)
            carry = lstm_cell(self.recurrent_kernel, carry, gates, reset, self.dtype)
            x = carry[1]
        return (carry, *self._heads(x))

    def unroll(self, carry: Carry, obs: jax.Array, reset: jax.Array):
        """T steps from ``carry``: (carry, head [T, A, k], value [T, A], log_std or None)."""
        x = self._encode(obs, 2)
        if self.lstm:
            kernel = self.recurrent_kernel

            def step(c, inputs):
                gates, r = inputs
                c = lstm_cell(kernel, c, gates, r, self.dtype)
                return c, c[1]

            gates = self.input_gates(x)
            carry, x = jax.lax.scan(step, carry, (gates, reset), unroll=self.scan_unroll)
        return (carry, *self._heads(x))

"""An example of your own policy module (the contract: jaxlab/agent/custom.py): a GRU actor-critic.

    jaxlab train memory --policy.module examples/policies/gru.py:GRUPolicy
    jaxlab train memory --policy.module gru:GRUPolicy        # with examples/policies on PYTHONPATH

Dense + ReLU encoder layers, a GRU cell of policy.hidden_size (its carry is one array h [A, H], where
the built-in LSTM has two), and two linear heads. jaxlab fills ``action`` and ``hidden_size`` (declared
below), resets the carry to initial_carry's at every episode start, unrolls __call__ over the training
sequences, and adds the Gaussian log-std for continuous actions.
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from jaxlab.agent.distributions import ActionSpec


class GRUPolicy(nn.Module):
    action: ActionSpec
    hidden_size: int = 64
    layers: tuple[int, ...] = (64,)

    def initial_carry(self, num_agents: int):
        """h [num_agents, hidden_size]: zeros, what every episode starts from."""
        return jnp.zeros((num_agents, self.hidden_size), jnp.float32)

    @nn.compact
    def __call__(self, carry, obs):
        """carry h [A, H], obs [A, ...] -> (h [A, H], head [A, action.head_size], value [A])."""
        x = obs.reshape(obs.shape[0], -1).astype(jnp.float32)
        if obs.dtype == jnp.uint8:
            x = x / 255.0
        for width in self.layers:
            x = nn.relu(nn.Dense(width, kernel_init=nn.initializers.orthogonal(2 ** 0.5))(x))
        h, _ = nn.GRUCell(self.hidden_size)(carry, x)
        head = nn.Dense(self.action.head_size, kernel_init=nn.initializers.orthogonal(0.01))(h)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0))(h)[:, 0]
        return h, head, value

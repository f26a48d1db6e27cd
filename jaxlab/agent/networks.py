"""The building blocks of the built-in actor-critic's encoders: activations, a convolution whose matmul
takes ``dtype`` inputs and accumulates and returns float32, and the observation preprocessing.

Shapes (B = any batch shape, e.g. [A] or [T, A]):
    dense layer   [B, n]  -> [B, width]
    conv layer    [N, H, W, C] -> [N, (H - k) // s + 1, (W - k) // s + 1, channels]  (VALID padding, NHWC)
    as_float      obs [B, ...] of any dtype -> float32 [B, ...]; uint8 (pixels, 0..255) divided by 255

Every matmul and convolution takes ``dtype`` (float32 or bfloat16) inputs and returns float32
(``preferred_element_type``); params, bias adds and activations are float32.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

#: policy.activation -> the function applied after every encoder layer.
ACTIVATIONS = {"gelu": nn.gelu, "relu": nn.relu, "silu": nn.silu, "tanh": jnp.tanh, "elu": nn.elu}

#: Orthogonal-init gain of the encoder's layers (sqrt 2, for ReLU-like activations, as CleanRL and PufferLib).
HIDDEN_GAIN = math.sqrt(2)


def matmul_in(dtype):
    """A dot_general for flax's Dense that casts both operands to ``dtype`` and accumulates and returns
    float32, whatever ``dtype`` is."""

    def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
        return jax.lax.dot_general(lhs.astype(dtype), rhs.astype(dtype), dimension_numbers, precision=precision,
                                   preferred_element_type=jnp.float32)

    return dot_general


def dense(width: int, dtype: str, gain: float = HIDDEN_GAIN) -> nn.Dense:
    """Dense(width), orthogonal init with ``gain``, zero bias, float32 params and outputs, ``dtype`` inputs."""
    return nn.Dense(width, kernel_init=nn.initializers.orthogonal(gain), dtype=jnp.float32,
                    dot_general=matmul_in(dtype))


class Conv(nn.Module):
    """A square convolution, VALID padding, NHWC: x [N, H, W, C] float32 -> [N, H', W', features] float32.
    The kernel [k, k, C, features] (orthogonal init, gain sqrt 2) and x are cast to ``dtype``; the
    convolution accumulates and returns float32, then the float32 bias is added."""

    features: int
    kernel: int
    stride: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.orthogonal(HIDDEN_GAIN),
                            (self.kernel, self.kernel, x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        y = jax.lax.conv_general_dilated(x.astype(self.dtype), kernel.astype(self.dtype),
                                         (self.stride, self.stride), "VALID",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                         preferred_element_type=jnp.float32)
        return y + bias


def as_float(obs: jax.Array) -> jax.Array:
    """obs as float32; uint8 observations (pixels 0..255) are divided by 255 so they lie in [0, 1]."""
    x = obs.astype(jnp.float32)
    return x / 255.0 if obs.dtype == jnp.uint8 else x


def image_dims(obs_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(H, W, C) of an image observation [H, W, C] or [H, W] (C = 1)."""
    if len(obs_shape) == 2:
        return (*obs_shape, 1)
    if len(obs_shape) == 3:
        return tuple(obs_shape)
    raise ValueError(f"the cnn encoder needs [H, W, C] or [H, W] observations, not {list(obs_shape)}")

"""The building blocks of the built-in actor-critic's encoders: activations, a convolution whose matmul
takes ``dtype`` inputs and accumulates and returns float32, and the observation preprocessing.

Shapes (B = any batch shape, e.g. [A] or [T, A]):
    dense layer   [B, n]  -> [B, width]
    conv layer    [N, H, W, C] -> [N, (H - k) // s + 1, (W - k) // s + 1, channels]  (VALID padding, NHWC)
    as_float      obs [B, ...] of any dtype -> float32 [B, ...]; uint8 (pixels, 0..255) divided by 255

Every matmul and convolution takes ``dtype`` (float32 or bfloat16) inputs and returns float32
(``preferred_element_type``); params, bias adds and activations are float32. In bfloat16 a matmul's
backward takes bfloat16 inputs too (the incoming gradient is cast), as mixed precision does on GPUs and
TPUs: otherwise two thirds of the update's matmul work would run in float32.
"""

from __future__ import annotations

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

#: policy.activation -> the function applied after every encoder layer.
ACTIVATIONS = {"gelu": nn.gelu, "relu": nn.relu, "silu": nn.silu, "tanh": jnp.tanh, "elu": nn.elu}

#: Orthogonal-init gain of the encoder's layers (sqrt 2, for ReLU-like activations, as CleanRL and PufferLib).
HIDDEN_GAIN = math.sqrt(2)


def matmul(x: jax.Array, w: jax.Array, dtype) -> jax.Array:
    """x [..., k] by w [k, n] -> float32 [..., n] with ``dtype`` inputs, through a VJP of our own
    (``_matmul``): in bfloat16 the backward's two matmuls (gradients of x and w) take bfloat16 inputs
    as well and accumulate and return float32; on a CPU, in either dtype, the weight gradient
    contracts a transposed copy of x (``_transposed``). float32 elsewhere: one plain dot."""
    if jnp.dtype(dtype) == jnp.float32 and jax.default_backend() != "cpu":
        return jnp.dot(x.astype(jnp.float32), w.astype(jnp.float32), preferred_element_type=jnp.float32)
    return _matmul(x, w, jnp.dtype(dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _matmul(x, w, dtype):
    return jnp.dot(x.astype(dtype), w.astype(dtype), preferred_element_type=jnp.float32)


def _matmul_fwd(x, w, dtype):
    low_x, low_w = x.astype(dtype), w.astype(dtype)
    # the zero-size arrays carry the primal dtypes to the backward (residuals must be arrays)
    return (jnp.dot(low_x, low_w, preferred_element_type=jnp.float32),
            (low_x, low_w, jnp.zeros((0,), x.dtype), jnp.zeros((0,), w.dtype)))


def _matmul_bwd(dtype, residuals, g):
    low_x, low_w, x_kind, w_kind = residuals
    low_g = g.astype(dtype)
    dx = jax.lax.dot_general(low_g, low_w, (((g.ndim - 1,), (1,)), ((), ())), preferred_element_type=jnp.float32)
    rows_x, rows_g = low_x.reshape(-1, low_x.shape[-1]), low_g.reshape(-1, g.shape[-1])
    dw = jnp.dot(_transposed(rows_x), rows_g, preferred_element_type=jnp.float32)
    return dx.astype(x_kind.dtype), dw.astype(w_kind.dtype)


def _transposed(a: jax.Array) -> jax.Array:
    """a [M, k] -> a.T [k, M], on a CPU as a copy XLA keeps: a dot whose operand is a plain transpose
    is rewritten to contract over the operand's first dimension, which XLA's CPU backend runs slowly:
    a bfloat16 dot in float32 (at half the speed), and in float32 the encoder's weight gradient,
    [16384, 4] by [16384, 128] contracted over the 16,384 rows, at about 6 GFLOP/s (2.9 ms; a float32
    update at the benchmark's sizes took 389 to 399 ms through the copy against 414 to 424 ms without,
    README, "The update on a CPU"). The transposes of two column halves, concatenated, stay a copy and
    the dot a plain [k, M] by [M, n]. Elsewhere a.T."""
    k = a.shape[1]
    if jax.default_backend() != "cpu" or k < 2:
        return a.T
    return jnp.concatenate([a[:, :k // 2].T, a[:, k // 2:].T])


_matmul.defvjp(_matmul_fwd, _matmul_bwd)


def matmul_in(dtype):
    """A dot_general for flax's Dense that casts both operands to ``dtype`` and accumulates and returns
    float32, whatever ``dtype`` is (Dense's [..., k] by [k, n] goes through ``matmul``)."""

    def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
        if rhs.ndim == 2 and dimension_numbers == (((lhs.ndim - 1,), (0,)), ((), ())):
            return matmul(lhs, rhs, dtype)
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

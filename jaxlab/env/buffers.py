"""The host buffers of a vectorized env, and the one block that carries a step's outputs to the device.

Everything an env writes in a step (observations, rewards, terminal and truncation flags, and the
action mask and active flags when it has them) lives in ONE page-aligned uint8 buffer, ``outputs``,
as consecutive blocks (each 64-byte aligned, each C-contiguous): the C side gets a pointer into each
block, numpy sees each block as a typed view, and the rollout moves the whole step to the device in a
single transfer, where ``decode`` cuts it back into typed arrays. Actions (written by the trainer)
and final observations (needed only after a truncation) are buffers of their own.

Shapes (A = agents): observations [A, *obs_shape] (float32 or uint8), rewards [A] float32,
terminals [A] bool, truncations [A] bool, action_mask [A, mask_width] bool or None, active [A] bool or
None; final_observations like observations; actions [A] int32, [A, k] int32 or [A, k] float32.
"""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass

import numpy as np

PAGE = mmap.PAGESIZE
BLOCK_ALIGN = 64

#: One block of ``outputs``: (name, byte offset, shape, numpy dtype name).
Block = tuple[str, int, tuple[int, ...], str]


def aligned_empty(shape: tuple[int, ...], dtype, alignment: int = PAGE) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``alignment`` boundary (page-aligned
    by default, so that it can be registered as pinned host memory)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    offset = (-raw.ctypes.data) % alignment
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


@dataclass
class StepBuffers:
    """The buffers of one vectorized env (see the module docstring); allocated once, never moved."""

    outputs: np.ndarray                # uint8 [bytes]: every block below, one transfer
    layout: tuple[Block, ...]          # how to cut ``outputs`` into its blocks (static, hashable)
    observations: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    truncations: np.ndarray
    action_mask: np.ndarray | None
    active: np.ndarray | None
    final_observations: np.ndarray
    actions: np.ndarray
    guard: int = 0                     # bytes of canary before and after each block (see allocate)
    apart: tuple[tuple[str, np.ndarray, int], ...] = ()  # guarded buffers outside ``outputs``: (name,
    #                                    uint8 [bytes] holding it and its guards, its byte offset there)


def allocate(num_agents: int, obs_shape: tuple[int, ...], obs_dtype, action_shape: tuple[int, ...], action_dtype,
             mask_width: int = 0, with_active: bool = False, guard: int = 0) -> StepBuffers:
    """Zeroed buffers for ``num_agents`` agents (mask rows all legal, every agent active). ``guard``: bytes
    of canary (see guard_pattern) before and after each block of ``outputs`` and around the final
    observations and the actions, which no write may touch (see damaged_guards)."""
    A = num_agents
    specs = [("observations", (A, *obs_shape), np.dtype(obs_dtype).name), ("rewards", (A,), "float32"),
             ("terminals", (A,), "bool"), ("truncations", (A,), "bool")]
    if mask_width:
        specs.append(("action_mask", (A, mask_width), "bool"))
    if with_active:
        specs.append(("active", (A,), "bool"))
    layout, offset = [], 0
    for name, shape, dtype in specs:
        offset = -(-(offset + guard) // BLOCK_ALIGN) * BLOCK_ALIGN
        layout.append((name, offset, shape, dtype))
        offset += math.prod(shape) * np.dtype(dtype).itemsize + guard
    outputs = aligned_empty((max(offset, 1),), np.uint8)
    outputs[:] = guard_pattern(outputs.size) if guard else 0
    for name, at, shape, dtype in layout:
        outputs[at:at + math.prod(shape) * np.dtype(dtype).itemsize] = 0
    views = {name: outputs[at:at + math.prod(shape) * np.dtype(dtype).itemsize].view(dtype).reshape(shape)
             for name, at, shape, dtype in layout}
    if mask_width:
        views["action_mask"].fill(1)
    if with_active:
        views["active"].fill(1)
    final, final_raw = _guarded_zeros((A, *obs_shape), obs_dtype, guard)
    actions, actions_raw = _guarded_zeros((A, *action_shape), action_dtype, guard)
    apart = (("final_observations", *final_raw), ("actions", *actions_raw)) if guard else ()
    return StepBuffers(outputs, tuple(layout), views["observations"], views["rewards"], views["terminals"],
                       views["truncations"], views.get("action_mask"), views.get("active"), final, actions, guard,
                       apart)


def _guarded_zeros(shape: tuple[int, ...], dtype, guard: int) -> tuple[np.ndarray, tuple[np.ndarray, int]]:
    """A zeroed page-aligned array of ``shape`` (a buffer of its own, like the final observations), with
    ``guard`` bytes of canary before and after it when ``guard``: (the array, (uint8 [bytes] holding it and
    its guards, the array's byte offset there))."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    start = -(-guard // PAGE) * PAGE  # the array stays page-aligned
    raw = aligned_empty((start + nbytes + guard,), np.uint8)
    raw[:] = guard_pattern(raw.size) if guard else 0
    raw[start:start + nbytes] = 0
    return raw[start:start + nbytes].view(dtype).reshape(shape), (raw, start)


def guard_pattern(size: int) -> np.ndarray:
    """The canary bytes of guard regions: uint8[size], none 0 or 1 (what flags, masks and most zeroed
    values write), varying so that a repeated value written over them still differs somewhere."""
    return (np.arange(size, dtype=np.int64) * 7 % 251 + 2).astype(np.uint8)


def damaged_guards(buffers: StepBuffers) -> list[tuple[str, int, int]]:
    """The guard bytes (see allocate's ``guard``) that something wrote over: (buffer name, bytes written
    before its start, bytes written past its end), to the farthest changed byte of its guards, for each
    block of ``outputs`` and each buffer apart (final_observations, actions) whose guards changed. Empty
    when every guard is whole (or there are none)."""
    guard = buffers.guard
    written = buffers.outputs != guard_pattern(buffers.outputs.size)
    spans = [(name, written, start, math.prod(shape) * np.dtype(dtype).itemsize)
             for name, start, shape, dtype in buffers.layout]
    spans += [(name, raw != guard_pattern(raw.size), start, raw.size - start - guard)
              for name, raw, start in buffers.apart]
    damage = []
    for name, changed, start, nbytes in spans:
        reach = _guard_reach(changed, start, start + nbytes, guard)
        if any(reach):
            damage.append((name, *reach))
    return damage


def _guard_reach(changed: np.ndarray, start: int, end: int, guard: int) -> tuple[int, int]:
    """How far something wrote over the guards of the buffer at bytes [start, end) (``changed``: bool
    [bytes], which bytes differ from the canary): (bytes before ``start``, bytes past ``end``), to the
    farthest changed byte."""
    before = np.flatnonzero(changed[max(start - guard, 0):start])
    after = np.flatnonzero(changed[end:end + guard])
    return (min(start, guard) - int(before[0]) if before.size else 0, int(after[-1]) + 1 if after.size else 0)


def decode(packed, layout: tuple[Block, ...]) -> dict:
    """Cuts a device copy of ``outputs`` (uint8 [bytes]) back into its typed arrays, by ``layout``
    (inside a jitted function: ``layout`` is static)."""
    import jax
    import jax.numpy as jnp

    arrays = {}
    for name, offset, shape, dtype in layout:
        dtype = np.dtype(dtype)
        raw = packed[offset:offset + math.prod(shape) * dtype.itemsize]
        if dtype == np.bool_:
            arrays[name] = raw.reshape(shape) != 0
        elif dtype.itemsize == 1:
            arrays[name] = raw.reshape(shape).view(dtype) if dtype != np.uint8 else raw.reshape(shape)
        else:
            arrays[name] = jax.lax.bitcast_convert_type(raw.reshape(*shape, dtype.itemsize), jnp.dtype(dtype))
    return arrays

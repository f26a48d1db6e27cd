"""VecEnv: thousands of agents of one C env type stepped per ctypes call into preallocated buffers.

Shapes (A = num_agents = num_envs * agents_per_env):
    observations       [A, *obs_shape]  obs dtype (float32 or uint8)
    actions            [A] int32 (discrete), [A, k] int32 (multi-discrete), [A, k] float32 (continuous)
    rewards            [A] float32
    terminals          [A] bool   the episode ended for good in this step (no bootstrap)
    truncations        [A] bool   the episode was cut by a time limit in this step (bootstrap)
    final_observations [A, *obs_shape]  for agents whose episode ended this step: the observation
                       before the automatic reset (observations already holds the next episode's first)
    action_mask        [A, sum(nvec)] bool, or None when the env has no mask
    active             [A] bool, or None unless the env lets agents wait (option agents_wait): 0 while
                       an agent waits for its env's reset
Everything the env writes in a step lives in one block, ``outputs`` (see jaxlab.env.buffers), which
the rollout moves to the device in one transfer.

A VecEnv may be shared between Python threads: every call into C that touches the envs holds the
VecEnv's lock, so concurrent calls take turns (the arrays they return are still the shared buffers).
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import numpy as np

from jaxlab.env import library as libcenv
from jaxlab.env.buffers import aligned_empty, allocate
from jaxlab.env.registry import env_type, name_and_library, resolve_params, with_param_values
from jaxlab.env.spaces import Box, Discrete, describe_handle



class VecEnv:
    """``num_envs`` copies of the C env ``name`` of ``library`` (None: the built-in envs; or an env
    library .so or an env header .h, see jaxlab.env.registry), each seeded from (seed, env index).

    The arrays returned by ``reset`` and ``step`` are views of buffers that the next call overwrites:
    copy them if you keep them. Use it as a context manager, or call ``close()``.
    ``mask_check``: "strict" (the default) refuses an action outside its agent's action mask and a
    mask that allows no action, naming the env, agent, step and mask, before stepping anything;
    "off" checks neither (envs without a mask ignore it).
    """

    has_state = True  # save_state / load_state hold the envs' whole state (a Python env's cannot)

    def __init__(self, name: str, num_envs: int = 1, seed: int = 0, num_threads: int = 1,
                 library: str | None = None, mask_check: str = "strict", **params):
        self._handle = None
        self._lock = threading.Lock()  # held around every C call that touches the envs
        if mask_check not in ("strict", "off"):
            raise ValueError(f"mask_check={mask_check!r} must be 'strict' or 'off'")
        kind = env_type(name, library)
        values = resolve_params(kind, params)
        for label, value, low in (("num_envs", num_envs, 1), ("num_threads", num_threads, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{label}={value!r} must be an integer >= {low}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
            raise ValueError(f"seed={seed!r} must be an integer in [0, 2**64)")
        self._lib = lib = libcenv.load(kind.library)
        self._codes = libcenv.constants()
        self.name = name
        self.kind = kind
        self.params = {p.name: (int(v) if p.is_int else v) for p, v in zip(kind.params, values)}
        self.num_envs = int(num_envs)
        self.num_threads = int(num_threads)
        self.seed = int(seed)
        c_params = (ctypes.c_double * len(values))(*values)
        err = ctypes.create_string_buffer(self._codes["ERROR_LEN"])
        handle = lib.cenv_create(kind.index, self.num_envs, self.seed, c_params, len(values),
                                 self.num_threads, err, len(err))
        if not handle:
            raise ValueError(f"cannot create env '{name}': {with_param_values(err.value.decode(), kind, values)}")
        self._handle = handle
        try:
            self._describe()
            self._allocate()
            self._check(lib.cenv_set_mask_check(handle, int(mask_check == "strict")), "set_mask_check")
        except BaseException:
            self.close()
            raise
        self._log_buffer = np.zeros(max(1, len(kind.log_names)), dtype=np.float32)
        self._log_ptr = self._log_buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        self._step_fn = lib.cenv_step

    # ---- set-up ----

    def _describe(self) -> None:
        self.spaces = spaces = describe_handle(self._lib, self._handle, self.kind)
        self.agents_per_env = spaces.agents_per_env
        self.num_agents = self.num_envs * self.agents_per_env
        self.observation_space = spaces.observation_space
        self.action_space = spaces.action_space
        self.has_mask = spaces.has_mask

    def _allocate(self, guard: int = 0) -> None:
        obs, act = self.observation_space, self.action_space
        self.buffers = b = allocate(self.num_agents, obs.shape, obs.dtype, act.shape, act.dtype,
                                    self.spaces.mask_width if self.has_mask else 0, self.spaces.agents_wait, guard)
        self.observations, self.rewards, self.terminals, self.truncations = (
            b.observations, b.rewards, b.terminals, b.truncations)
        self.action_mask, self.active = b.action_mask, b.active
        self.final_observations, self.actions = b.final_observations, b.actions
        as_float, as_u8 = ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_uint8)
        optional = lambda a: None if a is None else a.ctypes.data_as(as_u8)  # noqa: E731
        with self._lock:
            rc = self._lib.cenv_bind(self._handle, self.observations.ctypes.data, self.actions.ctypes.data,
                                     self.rewards.ctypes.data_as(as_float),
                                     self.terminals.ctypes.data_as(as_u8),
                                     self.truncations.ctypes.data_as(as_u8), optional(self.action_mask),
                                     self.final_observations.ctypes.data, optional(self.active))
        self._check(rc, "bind")
        self._action_shape = self.actions.shape
        self._action_dtype = self.actions.dtype

    def guard_buffers(self, guard: int) -> None:
        """Test hook (the overrun check, jaxlab.env.overrun): hands the envs new zeroed buffers with
        ``guard`` bytes of canary before and after each block of ``outputs`` (observations, rewards, flags,
        mask, active), the final observations and the actions, which
        jaxlab.env.buffers.damaged_guards(self.buffers) checks. Reset afterwards."""
        self._allocate(guard)

    def track_episodes(self) -> None:
        """From now on, after every step ``episode_ends`` [num_envs] int32 holds how many agent-episodes
        each env ended in it and, where that is not 0, ``episode_stats`` [num_envs, num_stats] float32
        the sums of that env's statistics over them (evaluation uses this to count exactly the episodes
        it keeps). Costs a clear of num_envs ints per step."""
        if getattr(self, "episode_ends", None) is not None:
            return
        self.episode_stats = aligned_empty((self.num_envs, max(1, len(self.kind.log_names))), np.float32)
        self.episode_ends = aligned_empty((self.num_envs,), np.int32)
        self.episode_stats.fill(0)
        self.episode_ends.fill(0)
        with self._lock:
            rc = self._lib.cenv_bind_episode_stats(
                self._handle, self.episode_stats.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                self.episode_ends.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)))
        self._check(rc, "bind_episode_stats")

    # ---- stepping ----

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Starts a new episode in every env and returns observations [A, *obs_shape] (a view).

        ``seed``: reseed env i from (seed, i) first; None continues each env's random stream."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                                 or not 0 <= seed < 2**64):
            raise ValueError(f"seed={seed!r} must be None or an integer in [0, 2**64)")
        with self._lock:
            self._check(self._lib.cenv_reset(self._handle, 0 if seed is None else int(seed),
                                              0 if seed is None else 1), "reset")
            self.terminals.fill(0)
            self.truncations.fill(0)
            self.rewards.fill(0)
        return self.observations

    def step(self, actions=None):
        """Steps every agent once; envs whose episode ended are reset within the same call.

        ``actions``: [A] int32 / [A, k] int32 / [A, k] float32, C-contiguous (see the module docstring);
        None means the ``actions`` buffer as already written. Returns (observations, rewards, terminals,
        truncations, info), the arrays being views overwritten by the next step. ``info`` is empty
        unless episodes ended: then it holds ``episodes`` (how many agent-episodes ended) and the mean
        of each of the env's statistics over them. RuntimeError before the first ``reset()``.
        """
        lock = self._lock
        lock.acquire()  # not `with`: acquire/try/finally costs ~0.1 us less per call on CPython 3.11
        try:
            if actions is not None and actions is not self.actions:
                if (type(actions) is not np.ndarray or actions.dtype != self._action_dtype
                        or actions.shape != self._action_shape or not actions.flags.c_contiguous):
                    actions = self._check_actions(actions)
                np.copyto(self.actions, actions)
            n = self._step_fn(self._handle)
            if n == 0:
                return self.observations, self.rewards, self.terminals, self.truncations, {}
            if n < 0:
                self._check(n, "step")
            info = self._drain_log()
        finally:
            lock.release()
        return self.observations, self.rewards, self.terminals, self.truncations, info

    def _drain_log(self) -> dict:
        count = self._lib.cenv_log(self._handle, self._log_ptr)
        if count < 0:
            self._check(count, "log")
        info = {"episodes": int(count)}
        for name, value in zip(self.kind.log_names, self._log_buffer):
            info[name] = float(value)
        return info

    def _check_actions(self, actions) -> np.ndarray:
        """Raises a clear error for actions of the wrong type, dtype, shape or layout."""
        if not isinstance(actions, np.ndarray):
            try:
                actions = np.asarray(actions)
            except Exception as err:  # noqa: BLE001
                raise TypeError(f"actions must be a numpy array, got {type(actions).__name__}") from err
        want = f"{self._action_dtype.name}{list(self._action_shape)}"
        if actions.dtype != self._action_dtype:
            raise TypeError(f"actions for '{self.name}' ({self.action_space}) must have dtype "
                            f"{self._action_dtype.name}, got {actions.dtype.name}; convert with "
                            f"actions.astype(np.{self._action_dtype.name})")
        if actions.shape != self._action_shape:
            raise ValueError(f"actions for '{self.name}' must have shape {self._action_shape} "
                             f"({self.num_agents} agents), got {actions.shape}; expected {want}")
        if not actions.flags.c_contiguous:
            raise ValueError(f"actions for '{self.name}' must be C-contiguous, got a strided view; "
                             "pass np.ascontiguousarray(actions)")
        return actions

    def _check(self, rc: int, what: str) -> None:
        if rc >= 0:
            return
        codes = self._codes
        if rc == codes["ERR_NULL"]:
            raise RuntimeError(f"VecEnv '{self.name}' is closed; create a new one with "
                               f"jaxlab.make('{self.name}', ...)")
        if rc == codes["ERR_NOT_RESET"]:
            raise RuntimeError(f"VecEnv '{self.name}' was stepped before any reset: its envs have no "
                               "episode yet; call reset() first (or load_state())")
        if rc == codes["ERR_BUSY"]:
            raise RuntimeError(f"cenv {what} failed: VecEnv '{self.name}''s C handle was used from two "
                               "threads at once; go through the VecEnv's methods, which take turns")
        if rc in (codes["ERR_ACTION"], codes["ERR_MASK"]) and self._lib.cenv_error(self._handle):
            raise ValueError(self._lib.cenv_error(self._handle).decode())  # strict masks: C names it all
        if rc == codes["ERR_ACTION"]:
            agent, comp, value = ctypes.c_int64(), ctypes.c_int(), ctypes.c_double()
            self._lib.cenv_bad_action(self._handle, ctypes.byref(agent), ctypes.byref(comp),
                                      ctypes.byref(value))
            where = f"agent {agent.value}" + (f" component {comp.value}" if self.actions.ndim > 1 else "")
            if isinstance(self.action_space, Box):
                raise ValueError(f"{where} has a NaN action; actions for '{self.name}' must be finite "
                                 f"numbers (they are clipped to {self.action_space})")
            n = (self.action_space.n if isinstance(self.action_space, Discrete)
                 else self.action_space.nvec[comp.value])
            if value.value == -1 and self._mask_row_is_empty(agent.value, comp.value):  # the policy's NO_ACTION
                raise ValueError(f"{where} has action {int(value.value)}: its action mask row allows no action "
                                 f"(all 0), so the policy had none to choose; the env '{self.name}' must leave "
                                 f"every acting agent at least one legal action (with mask_check 'strict', the "
                                 f"default, the step names such a row itself)")
            raise ValueError(f"{where} has action {int(value.value)}, out of range for "
                             f"{self.action_space}: it must be in [0, {n - 1}]")
        raise RuntimeError(f"cenv {what} failed ({rc}): {self._lib.cenv_error(self._handle).decode()}")

    def _mask_row_is_empty(self, agent: int, component: int) -> bool:
        """Whether ``agent``'s action mask allows nothing in ``component`` (its slice of the [A, sum(nvec)]
        mask); False without a mask. A policy acts -1 there (jaxlab.agent.distributions.NO_ACTION)."""
        if self.action_mask is None:
            return False
        nvec = [self.action_space.n] if isinstance(self.action_space, Discrete) else list(self.action_space.nvec)
        start = int(sum(nvec[:component]))
        return not self.action_mask[agent, start:start + int(nvec[component])].any()

    def render(self, index: int = 0) -> str | None:
        """A text frame of env ``index`` as its C render hook draws it, or None when the env has no
        render option."""
        if not self.kind.has("render"):
            return None
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self.num_envs:
            raise ValueError(f"render index={index!r} must be an env index in [0, {self.num_envs})")
        size = 4096
        while True:
            buffer = ctypes.create_string_buffer(size)
            with self._lock:
                n = self._lib.cenv_render(self._handle, int(index), buffer, len(buffer))
            self._check(n, "render")
            if n < size or size >= MAX_RENDER_BYTES:  # the hook is snprintf-style: n is the frame's length
                return buffer.value.decode(errors="replace")
            size = min(int(n) + 1, MAX_RENDER_BYTES)  # a longer frame than the buffer held: draw it again

    def pixels(self, index: int = 0, width: int = 480, height: int = 240) -> np.ndarray | None:
        """An RGB picture of env ``index`` as its C pixels hook draws it: uint8 [height, width, 3] (a new
        array), or None when the env has no pixels option. ValueError for an index or a size out of
        range (each side in [1, MAX_FRAME_SIDE])."""
        if not self.kind.has("pixels"):
            return None
        limit = self._codes["MAX_FRAME_SIDE"]
        for label, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= limit:
                raise ValueError(f"pixels {label}={value!r} must be an integer in [1, {limit}]")
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self.num_envs:
            raise ValueError(f"pixels index={index!r} must be an env index in [0, {self.num_envs})")
        frame = np.empty((int(height), int(width), 3), np.uint8)
        with self._lock:
            rc = self._lib.cenv_pixels(self._handle, int(index), frame.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)),
                                       int(width), int(height))
        self._check(rc, "pixels")
        return frame

    # ---- test hook and lifecycle ----

    def set_state(self, index: int, state) -> None:
        """Test hook: overwrite env ``index``'s physical state (see the env's C header for the layout)
        and rewrite its observation. RuntimeError when the env's hook refuses the values; the message
        names a NaN or infinite one among them (the C hook only says that it refused)."""
        values = np.ascontiguousarray(state, dtype=np.float64)
        c_values = values.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        with self._lock:
            rc = self._lib.cenv_set_state(self._handle, index, c_values, values.size)
            if rc == self._codes["ERR_ARGUMENT"] and self.kind.has("set_state") and not isinstance(index, bool) \
                    and isinstance(index, (int, np.integer)) and 0 <= index < self.num_envs:
                flat = values.reshape(-1)
                bad = np.flatnonzero(~np.isfinite(flat))
                if bad.size:  # the hook got the values (not a bad index): a non-finite one is the likely cause
                    named = ", ".join(f"state[{k}] = {flat[k]}" for k in bad[:4]) + (", ..." if bad.size > 4 else "")
                    raise RuntimeError(f"cenv set_state failed ({rc}): {self._lib.cenv_error(self._handle).decode()}: "
                                       f"{named} {'is' if bad.size == 1 else 'are'} not finite; pass finite numbers "
                                       "(the env's C header documents the state's layout)")
            self._check(rc, "set_state")

    def _state_buffers(self) -> dict[str, np.ndarray]:
        """The buffers the C side wrote last that a saved state holds besides the C bytes: the step's
        outputs block (observations, rewards, flags, mask, active) and the final observations."""
        return {"outputs": self.buffers.outputs, "final_observations": self.final_observations}

    def save_state(self) -> dict[str, np.ndarray]:
        """Everything that shapes the envs' future, as copies: "cenv" (uint8, the C envs' own bytes
        with a header, see cenv_save_state) and the buffers the C side wrote last ("outputs": the
        step's outputs block, see jaxlab.env.buffers; "final_observations")."""
        with self._lock:
            size = self._lib.cenv_state_size(self._handle)
            self._check(size, "state_size")
            blob = np.empty(size, np.uint8)
            self._check(self._lib.cenv_save_state(self._handle, blob.ctypes.data, size), "save_state")
            state = {"cenv": blob, **{name: buffer.copy() for name, buffer in self._state_buffers().items()}}
        return state

    def state_shapes(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """{name: (shape, dtype)} of what save_state returns, without copying anything."""
        size = self._lib.cenv_state_size(self._handle)
        self._check(size, "state_size")
        return {"cenv": ((size,), np.dtype(np.uint8)),
                **{name: (buffer.shape, buffer.dtype) for name, buffer in self._state_buffers().items()}}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Restores what save_state returned, from a VecEnv of the same env, num_envs and params;
        ValueError naming the mismatch otherwise (and nothing is changed)."""
        with self._lock:
            self._load_state(state)

    def _load_state(self, state: dict[str, np.ndarray]) -> None:
        self._check(self._lib.cenv_state_size(self._handle), "load_state")  # a closed env raises here
        buffers = self._state_buffers()
        missing = [name for name in ("cenv", *buffers) if not isinstance(state, dict) or name not in state]
        if missing:
            raise ValueError(f"cannot load the saved {self.name} env state: it has no {', '.join(missing)}; "
                             "pass what save_state() returned")
        blob = np.ascontiguousarray(state["cenv"], dtype=np.uint8)
        rc = self._lib.cenv_check_state(self._handle, blob.ctypes.data, blob.size)  # every check first
        if rc == self._codes["ERR_ARGUMENT"]:
            raise ValueError(f"cannot load the saved {self.name} env state: "
                             f"{self._lib.cenv_error(self._handle).decode()}")
        self._check(rc, "load_state")
        for name, buffer in buffers.items():
            saved = np.asarray(state[name])
            if saved.shape != buffer.shape:
                raise ValueError(f"saved env state: {name} has shape {saved.shape}, this env {buffer.shape}")
        self._check(self._lib.cenv_load_state(self._handle, blob.ctypes.data, blob.size), "load_state")
        for name, buffer in buffers.items():
            buffer[...] = state[name]

    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Stops the env's C threads and frees its C memory. Safe to call twice (and from another
        thread while one steps: it waits for that step)."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before anything was created
            return
        with lock:
            handle, self._handle = self._handle, None
            if handle:
                self._lib.cenv_close(handle)

    def __enter__(self) -> "VecEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass

    def __repr__(self) -> str:
        return (f"VecEnv('{self.name}', num_envs={self.num_envs}, agents={self.num_agents}, "
                f"obs={self.observation_space}, action={self.action_space})")


#: The longest text frame VecEnv.render returns (a render hook's frame is cut there).
MAX_RENDER_BYTES = 1 << 24


def make(name: str, num_envs: int = 1, seed: int = 0, num_threads: int = 1, library: str | None = None,
         mask_check: str = "strict", **params) -> VecEnv:
    """Creates a VecEnv of ``num_envs`` copies of the env ``name`` with env parameters ``params`` (see
    ``jaxlab envs``), split over ``num_threads`` C threads. ``name`` is a built-in env, an env of
    ``library`` (an env library .so built with `jaxlab build-env`, or an env header .h, built on first
    use into a cache), or the path of an env header itself ("path/to/drone.h": its env).
    ``gymnasium:ID`` and ``pettingzoo:MODULE`` wrap Python envs in the same interface (``params`` go to
    their constructor; see jaxlab.env.python_envs)."""
    from jaxlab.env import python_envs  # imports this module: not at the top

    if python_envs.is_python_env(name):
        return python_envs.make_python_env(name, num_envs=num_envs, seed=seed, num_threads=num_threads,
                                           library=library, mask_check=mask_check, **params)
    name, library = name_and_library(name, library)
    return VecEnv(name, num_envs=num_envs, seed=seed, num_threads=num_threads, library=library,
                  mask_check=mask_check, **params)

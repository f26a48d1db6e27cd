"""The overrun check of an env (`jaxlab.sdk.check_overruns`, run by the tests `jaxlab new-env` writes): does
its C code write only its own rows of the buffers it is handed, and never into its actions?

In a vector, env i's rows lie right before env i+1's: an env that writes past its observation rows (an
index off by one, a wrong row size) writes into the next env's, and the last env's lands past the buffer,
where neither a test of values nor the sanitizer build sees it. The check steps each env alone (a vector of
one env) with guard bytes of canary (jaxlab.env.buffers.guard_pattern) before and after each buffer the C
side writes (the final observations included) and around the actions, and names the first write it finds
on them, or in the actions (the trainer's input, which the C side only reads). It does so with the env's
default parameters and with each parameter at either end of its declared range (parameter_extremes): an
index that overruns only for a short corridor or many agents shows too.
"""

from __future__ import annotations

import math

import numpy as np

from jaxlab.env.buffers import damaged_guards
from jaxlab.env.spaces import Box, legal_argmax

#: What each block of a step's outputs holds, per agent row, as an overrun message names it.
ROWS = {"observations": "observation", "rewards": "reward", "terminals": "terminal flag",
        "truncations": "truncation flag", "action_mask": "action mask", "active": "active flag",
        "final_observations": "final observation", "actions": "action"}


class OverrunError(AssertionError):
    """An env wrote outside its own rows of a buffer; the message names the env, the seed, the call, the
    buffer and how far it wrote (an AssertionError, so that pytest shows it as a failed check)."""


#: The most bytes of one env's observation rows the check steps an env with at a parameter's range end: the
#: guards double each buffer, and an int parameter declared up to 1e9 that sizes the observation would ask
#: for gigabytes (such a setting is left out and named, see check_overruns).
MAX_OBSERVATION_BYTES = 64 << 20


def check_overruns(env: str, seeds: tuple[int, ...] = (0, 1, 2), steps: int = 300, library: str | None = None,
                   settings: list[dict] | None = None, **params) -> list[str]:
    """Steps the C env ``env`` (a name, or a header "path/NAME.h", as jaxlab.make takes it) alone in a vector,
    once per seed in ``seeds`` and parameter setting: a reset, then ``steps`` steps of random legal actions,
    with guard bytes before and after each buffer the C side writes (observations, rewards, terminals,
    truncations, action_mask, active: the rows of its agents_per_env agents; final_observations) and the
    actions. ``settings``: the env parameters to step it with, each a dict (the rest at their defaults);
    None: ``params``, then each declared parameter at the low and at the high end of its range
    (parameter_extremes), except a range end whose observation rows would take more than
    MAX_OBSERVATION_BYTES. OverrunError at the first call after which a guard byte or an action changed; the
    env's own errors (a broken step contract, a value it refuses) come through as they are, and a NaN or infinite
    reward or float observation is a ValueError naming the agent and the step. Returns the
    settings left out, each as "NAME=VALUE (its observation rows would take SIZE)"."""
    from jaxlab.env.vecenv import VecEnv, make

    settings, left_out = overrun_settings(env, library, **params) if settings is None else (settings, [])
    for setting in settings:
        for seed in seeds:
            with make(env, num_envs=1, seed=seed, library=library, **setting) as vec:
                if not isinstance(vec, VecEnv):
                    raise ValueError(f"{env!r} is a Python env: the overrun check is for C envs")
                _check_one(vec, seed, steps)
    return left_out


#: The most bytes of one env's observation rows `jaxlab check-env`'s sanitizer run steps an env with at a range
#: end: the SDK's C driver holds 37 envs in each of two vectors, final observations too, under AddressSanitizer.
SANITIZER_MAX_OBSERVATION_BYTES = 1 << 20


def overrun_settings(env: str, library: str | None = None, **params) -> tuple[list[dict], list[str]]:
    """(the parameter settings check_overruns steps ``env`` with by default: parameter_extremes' within
    MAX_OBSERVATION_BYTES, the ones left out as "NAME=VALUE (its observation rows would take SIZE)")."""
    return _within_memory(env, library, parameter_extremes(env, library, **params), params)


def sanitizer_settings(env: str, library: str | None = None, **params) -> tuple[list[dict], list[str]]:
    """As overrun_settings, for the sanitizer run of `jaxlab check-env` (the same range ends, within
    SANITIZER_MAX_OBSERVATION_BYTES)."""
    return _within_memory(env, library, parameter_extremes(env, library, **params), params,
                          SANITIZER_MAX_OBSERVATION_BYTES)


def _within_memory(env: str, library: str | None, settings: list[dict], given: dict,
                   limit: int | None = None) -> tuple[list[dict], list[str]]:
    """(the ``settings`` whose one env's observation rows take at most ``limit`` bytes (None:
    MAX_OBSERVATION_BYTES), the others as "NAME=VALUE (its observation rows would take SIZE)"); the first setting
    (``given``, the rest at their defaults) is always kept."""
    from jaxlab.config.memory import format_bytes
    from jaxlab.env.registry import observation_bytes

    limit = MAX_OBSERVATION_BYTES if limit is None else limit
    kept, left_out = settings[:1], []
    for setting in settings[1:]:
        try:
            size = observation_bytes(env, library, **setting)
        except (ValueError, TypeError):  # spaces it cannot describe: stepping it says so, naming the setting
            size = 0
        if size <= limit:
            kept.append(setting)
        else:
            moved = ", ".join(f"{key}={value}" for key, value in setting.items() if key not in given)
            left_out.append(f"{moved} (its observation rows would take {format_bytes(size)})")
    return kept, left_out


def parameter_extremes(env: str, library: str | None = None, **params) -> list[dict]:
    """The parameter settings check_overruns steps ``env`` with by default: ``params`` (the rest at their
    defaults), then each other declared parameter at the low and at the high end of its range (one
    parameter moved at a time, the others as in ``params``), each setting once."""
    from jaxlab.env.registry import env_type, name_and_library

    settings = [dict(params)]
    for param in env_type(*name_and_library(env, library)).params:
        if param.name in params:
            continue
        for end in (param.low, param.high):
            value = int(end) if param.is_int else end
            if value != param.default and {**params, param.name: value} not in settings:
                settings.append({**params, param.name: value})
    return settings


def _check_one(vec, seed: int, steps: int) -> None:
    """The check of one vector of one env (see check_overruns): its reset, then ``steps`` steps."""
    vec.guard_buffers(_guard_bytes(vec))
    rng = np.random.default_rng(seed)
    if vec.has_mask:
        vec.action_mask.view(np.uint8)[:] = UNWRITTEN_MASK  # no env writes it: an entry left so, the reset did not
    _checked(vec, "its reset", vec.reset, vec.actions.copy())
    if vec.has_mask:
        _check_mask_written(vec)
    for step in range(1, steps + 1):
        actions = _random_actions(vec, rng)
        _checked(vec, lambda: _step_call(vec, step), lambda: vec.step(actions), actions)


#: What the mask holds before the env's first reset in the check: neither 0 nor 1, so a mask entry its reset did
#: not write shows (a mask row written with the wrong length leaves the last agent's row partly unwritten).
UNWRITTEN_MASK = 0xA5


def _check_mask_written(vec) -> None:
    """ValueError naming the first agent of ``vec`` whose mask row (action_mask [A, sum(nvec)] uint8) its reset
    left partly unwritten (still UNWRITTEN_MASK): a reset writes every agent's whole row, 0 or 1 each entry."""
    unwritten = vec.action_mask.view(np.uint8) == UNWRITTEN_MASK  # (the mask's dtype is bool)
    if not unwritten.any():
        return
    agent = int(np.flatnonzero(unwritten.any(axis=1))[0])
    entries = np.flatnonzero(unwritten[agent])
    width = vec.action_mask.shape[1]
    which = (f"entry {entries[0]}" if entries.size == 1 else f"{entries.size} entries ({entries[0]} .. "
             f"{entries[-1]})")
    agents = f"{vec.agents_per_env} agent{'s' * (vec.agents_per_env > 1)}"
    raise ValueError(f"{_who(vec)} left {which} of agent {agent}'s action mask row unwritten in its reset "
                     f"(action_mask: {agents} x {width} uint8): the reset writes every agent's whole row, "
                     f"action_mask[agent * {width} + k] for each of its {width} entries, 0 or 1 "
                     "(check the row length against its spaces)")


def _guard_bytes(vec) -> int:
    """How many guard bytes each buffer gets: as many as its largest block, 4 KiB at least, rounded up to
    whole 64-byte lines (an overrun farther than that is seen as one before the next buffer's start)."""
    largest = max(math.prod(shape) * np.dtype(dtype).itemsize for _, _, shape, dtype in vec.buffers.layout)
    return -(-max(largest, 4096) // 64) * 64


def _random_actions(vec, rng: np.random.Generator) -> np.ndarray:
    """Random actions for every agent of ``vec``, legal under its mask when it has one ([A] or [A, k])."""
    if vec.has_mask and not isinstance(vec.action_space, Box):
        scores = rng.integers(1, 256, vec.action_mask.shape, dtype=np.uint8)
        return legal_argmax(vec.action_space, vec.action_mask, scores)
    return vec.action_space.sample(rng, vec.num_agents)


def _step_call(vec, step: int) -> str:
    """What ran in step ``step`` of ``vec``, just stepped: the env's step, and when agents ended in it, the
    hook the vectorized layer called for them in the same C call (an overrun there shows in this step)."""
    ended = vec.terminals | vec.truncations
    if vec.active is not None:
        ended = ended & vec.active  # a waiting agent reports terminal 1 without ending again
    if not ended.any():  # (an agent that ended and now waits is inactive: nothing ran for it)
        return f"step {step}"
    hook = "its reset_agent hook" if vec.kind.has("reset_agent") else "its reset"
    return f"step {step} (its step, or {hook}, which ran in the same step for the agents that ended)"


def _checked(vec, call, run, actions: np.ndarray) -> None:
    """Runs ``run`` (a reset or step of ``vec``), then raises OverrunError when a guard changed or the
    actions buffer no longer holds ``actions`` (what the call was given: [A] or [A, k]), naming ``call``
    (a string, or a function giving one after the run); an error of the call itself is raised after that
    check (an overrun explains it better)."""
    try:
        run()
    except (RuntimeError, ValueError) as err:
        failure = err
    else:
        failure = None
    damage = damaged_guards(vec.buffers)
    if damage:
        raise OverrunError(_overrun_message(vec, _call_name(call), *damage[0])) from failure
    written = np.flatnonzero(vec.actions.view(np.uint8) != np.ascontiguousarray(actions).view(np.uint8))
    if written.size:
        raise OverrunError(_action_write_message(vec, _call_name(call), written)) from failure
    if failure is not None:
        raise failure
    _check_finite(vec, _call_name(call))


def _check_finite(vec, call: str) -> None:
    """ValueError naming the first agent of ``vec`` whose reward ([A] float32) or float observation
    ([A, *obs_shape]) ``call`` left NaN or infinite: training would stop on it at its first update."""
    for block, values in (("reward", vec.rewards), ("observation", vec.observations)):
        if values.dtype.kind != "f":
            continue
        bad = ~np.isfinite(values.reshape(vec.num_agents, -1))
        if bad.any():
            agent, index = (int(i[0]) for i in np.nonzero(bad))
            value = values.reshape(vec.num_agents, -1)[agent, index]
            where = "" if bad.shape[1] == 1 else f" (observation element {index}, flat)"
            raise ValueError(f"{_who(vec)} wrote a non-finite {block} ({value}) for agent {agent}{where} in {call}: "
                             f"training stops at the first update that sees one; make every {block} a finite "
                             "number (check for a division by zero, or a log or sqrt of a value out of range)")


def _call_name(call) -> str:
    """``call`` as a string (``call`` may be a function giving one)."""
    return call if isinstance(call, str) else call()


def _who(vec) -> str:
    """The env of ``vec`` as an overrun message names it: its name, seed, and parameters not at their
    defaults."""
    moved = [f"{p.name}={vec.params[p.name]}" for p in vec.kind.params if vec.params[p.name] != p.default]
    return f"env '{vec.name}' (seed {vec.seed}, alone in its vector{''.join(', ' + m for m in moved)})"


def _action_write_message(vec, call: str, written: np.ndarray) -> str:
    """What the env ``vec`` wrote into its actions in ``call`` (``written``: the byte offsets that changed,
    ascending), and the fix."""
    itemsize = vec.actions.dtype.itemsize
    first, last = int(written[0]) // itemsize, int(written[-1]) // itemsize
    where = f"actions[{first}]" if first == last else f"actions[{first} .. {last}] (flat)"
    return (f"{_who(vec)} wrote into its actions ({where}, {vec.actions.dtype.name} {list(vec.actions.shape)}) "
            f"in {call}: the actions are the trainer's input, which the env only reads (the trainer reuses the "
            f"buffer); keep what you change in the env's own state instead of writing env->actions")


def _overrun_message(vec, call: str, block: str, before: int, after: int) -> str:
    """What the env ``vec`` wrote outside its rows of ``block`` in ``call`` (``before`` / ``after``: bytes
    written before the block's start / past its end), and the fix."""
    array = getattr(vec.buffers, block)
    shape, dtype = array.shape, array.dtype
    reach, where = (after, "past the end") if after else (before, "before the start")
    values = -(-reach // dtype.itemsize)
    row = math.prod(shape[1:])
    rows = f"{vec.agents_per_env} agent{'s' * (vec.agents_per_env > 1)} x {row}" if row > 1 else \
        f"{vec.agents_per_env} agent{'s' * (vec.agents_per_env > 1)}"
    return (f"{_who(vec)} wrote {values} {dtype.name} value{'s' * (values > 1)} ({reach} "
            f"byte{'s' * (reach > 1)}) {where} of its {ROWS[block]} rows ({block}: {rows} {dtype.name}) in "
            f"{call}: in a vector that lands in another env's rows; write only {block}[0 .. "
            f"{vec.agents_per_env * row}) (check the indices and row sizes against its spaces)")

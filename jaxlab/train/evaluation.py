"""Plays a trained policy on fresh envs: episode returns and lengths, the env's statistics, and an
optional per-step callback (text rendering)."""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

import jaxlab
from jaxlab.config import env_args
from jaxlab.train.compiling import jit_step
from jaxlab.train.rollout import Rollout, make_step


def load_trainer(path: str | Path, warn: Callable[[str], None] = print, library: str | None = None,
                 module: str | None = None):
    """A Trainer built from the config saved in the checkpoint at ``path`` with its state loaded; ``path``
    may be a run dir or its checkpoints/ too, as `jaxlab eval --checkpoint` takes it: its newest usable
    checkpoint (a damaged newer one is passed over with a warning; trainer.update_index says which). The
    late "Event loop is closed" tracebacks of a damaged checkpoint's failed read are dropped from then on
    (jaxlab.observe.logfile.drop_closed_loop_noise): its warning says it all."""
    from jaxlab import checkpoint
    from jaxlab.observe.logfile import drop_closed_loop_noise
    from jaxlab.run.resume import find_checkpoint, newest_usable

    drop_closed_loop_noise()
    path = Path(path)
    if checkpoint.is_checkpoint(path):
        return load_one_trainer(path, warn, library, module)
    location = find_checkpoint(str(path.absolute()), "", flag="load_trainer")  # a CheckpointError saying why not
    return newest_usable(location, lambda one: load_one_trainer(one, warn, library, module), warn)[1]


def load_one_trainer(path: str | Path, warn: Callable[[str], None] = print, library: str | None = None,
                     module: str | None = None):
    """A Trainer built from the config saved in the checkpoint at ``path`` with its state loaded: the
    policy can be played from the path alone (``library``: the env's header or library to build it
    from instead of the saved one, e.g. a header moved since). A checkpoint of a run over another
    number of processes (several, read in one) gives its policy alone (Trainer.load_policy): its envs
    and carries were other processes'. So does one whose env's source changed since (an edited
    header): playing needs no saved env state, so the old policy plays on the edited env, with a
    warning through ``warn``. ``module``: the policy.module ("path/to/file.py:Class") to build instead
    of the saved one, e.g. its file moved since (the same class; its arrays must fit the checkpoint's).
    The saved machine settings that this machine cannot take are replaced
    (settings_for_here)."""
    from jaxlab import checkpoint
    from jaxlab.agent.custom import gone_file_words
    from jaxlab.config import checkpoint_config
    from jaxlab.config.schema import PolicyModuleError
    from jaxlab.train.trainer import Trainer, checkpoint_processes, env_source_change, policy_source_change

    meta = checkpoint.read_meta(Path(path))
    config = checkpoint_config(meta, library=library, warn=warn)
    gone = None if module else gone_file_words(config.policy.module,
                                               lambda new: f"load_trainer({str(path)!r}, module={new!r})")
    if gone:
        raise PolicyModuleError(gone)
    trainer = Trainer(settings_for_here(with_module(config, module), warn))
    try:
        changed = env_source_change(meta.get("env_source"), trainer.env_source)
        if changed:
            warn(f"warning: the env's source changed since the checkpoint: {changed}; the policy plays on the "
                 "edited env (the checkpoint's env state is not loaded)")
        if changed or checkpoint_processes(meta) != jax.process_count():
            trainer.load_policy(path, meta)
            edited = policy_source_change(meta.get("policy_source"), trainer.policy_source)
            if edited:  # load_checkpoint warns of it itself
                warn(f"warning: {edited}")
            note = checkpoint.version_note(meta)  # load_checkpoint says it itself too
            if note:
                warn(note)
        else:
            trainer.load_checkpoint(path, meta, warn=warn)
    except BaseException:
        trainer.close()
        raise
    return trainer


def with_module(config, module: str | None):
    """``config`` with policy.module ``module`` ("path/to/file.py:Class", a relative file taken against the
    current directory, or "package.module:Class") instead of its own; ``config`` itself for None."""
    if module is None:
        return config
    where, _, name = module.partition(":")
    where = str(Path(where).expanduser().absolute()) if where.endswith(".py") else where
    return dataclasses.replace(config, policy=dataclasses.replace(config.policy, module=f"{where}:{name}"))


def with_env_params(config, params: dict):
    """``config`` (a checkpoint's) with the env parameters ``params`` ({name: value as a flag or TOML writes
    it}) changed, to play its policy on other env settings (a harder one, another number of drones: the
    agents per env may change, the policy acts per agent). ConfigError for a name that is not a parameter
    of the env (env.mask_check is taken too; env.library is not: eval takes another source as ENV), a value
    the env refuses, or a change of the per-agent observation (shape, dtype) or action (kind and sizes)
    that the policy was trained on."""
    from jaxlab.agent.distributions import ActionSpec
    from jaxlab.config import ConfigError, env_kind, with_layer
    from jaxlab.config.layers import unknown_key_error
    from jaxlab.config.validate import flag_of

    if not params:
        return config
    names = [p.name for p in env_kind(config.env_name, config.env_library or None).params]
    for key in params:
        if key == "library":
            raise ConfigError("--env.library: eval plays the checkpoint's env; to play it from another source, give "
                              "its header as ENV (jaxlab eval path/to/NAME.h --checkpoint ...)")
        if key not in (*names, "mask_check"):
            listing = (f"{config.env_name}'s parameters: {', '.join(names)}" if names
                       else f"{config.env_name} has no parameters")
            raise unknown_key_error("env", key, [*names, "mask_check"], config.env_name,
                                    listing=f"{listing} (eval also takes --env.mask-check)")
    played = with_layer(config, {"env": params}, "command line")
    (trained_obs, trained_action), (played_obs, played_action) = policy_spaces(config), policy_spaces(played)
    changes = [f"the observation from {trained_obs} to {played_obs}"] if trained_obs != played_obs else []
    if ActionSpec.from_space(trained_action) != ActionSpec.from_space(played_action):
        changes.append(f"the action from {trained_action} to {played_action}")
    if changes:
        given = " ".join(f"{flag_of('env.' + key)} {value}" for key, value in params.items())
        raise ConfigError(f"{given} changes {' and '.join(changes)}, which the policy was not trained on; eval "
                          "takes env parameters that keep the observation and action shapes (see `jaxlab envs`)")
    return played


def policy_spaces(config) -> tuple[str, object]:
    """The per-agent observation ("(40,) float32": shape and dtype) and action space (Discrete, MultiDiscrete
    or Box) of ``config``'s env with its parameters, read without creating envs; ConfigError for parameters
    the env refuses (out of range)."""
    from jaxlab.config import ConfigError
    from jaxlab.env import spaces_of

    try:
        spaces = spaces_of(config.env_name, library=config.env_library or None, **config.env)
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from None
    observation = spaces.observation_space
    return f"{observation.shape} {np.dtype(observation.dtype).name}", spaces.action_space


def settings_for_here(config, warn: Callable[[str], None] = print):
    """A checkpoint's ``config`` with the settings of the machine it was trained on that this one may not
    take, and that playing does not need, replaced: a device.count above the local devices JAX sees
    (one device; a checkpoint's arrays do not depend on the count) and a device.compile_cache folder
    that cannot be created here (the default cache, with a warning through ``warn``)."""
    from jaxlab.run.compile_cache import cache_folder

    device = config.device
    if isinstance(device.count, int) and device.count > jax.local_device_count():
        device = dataclasses.replace(device, count=1)
    if device.compile_cache.strip().lower() not in ("auto", "off"):
        folder = cache_folder(device.compile_cache)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            warn(f"warning: the checkpoint's device.compile_cache folder {folder} cannot be created here "
                 f"({err.strerror}); using the default cache")
            device = dataclasses.replace(device, compile_cache="auto")
    return dataclasses.replace(config, device=device)


def play(trainer, steps: int | None = None, num_envs: int | None = None, seed: int = 12345,
         deterministic: bool = True, episodes: int | None = None,
         on_step: Callable[..., None] | None = None, render: bool = False,
         picture: tuple[int, int] | Callable[[], tuple[int, int] | None] | None = None, config=None) -> dict:
    """Runs ``trainer``'s current policy on ``num_envs`` new envs (default: as many as in training)
    seeded with ``seed``, stepping with the rollout's own per-step protocol. The envs are ``config``'s
    (default ``trainer.config``'s): e.g. the trainer's with other env parameters (with_env_params, which
    checks that the policy's observations and actions stay as trained). ``deterministic`` takes
    the mode of each action distribution. ``on_step(t, observations [A, ...], actions [A, ...],
    rewards [A], ended [A] bool)`` sees every step (the observations the actions were taken on); with
    ``render``, also ``frame=``: env 0's text frame (its C render hook) before the step; with
    ``picture`` = (width, height), also ``picture=``: env 0's RGB picture (its C pixels hook, uint8
    [height, width, 3]) before the step. ``picture`` may be a callable asked before every step, whose
    None means no picture this step (so a caller that has what it needs stops the drawing).

    ``episodes`` = N: an unbiased estimate. Every agent starts an episode at step 0 and plays
    k = ceil(N / agents) complete episodes; only those count (later ones are not recorded), so long
    episodes weigh as much as short ones, which taking the first N episodes to end would not do. All
    agents' first k - 1 episodes are kept, and the k-th of the agents of the first whole envs that
    make at least N in all (so the result holds N episodes, or a few more when N is not a multiple of
    the agents per env). ``steps`` = S (alone, or as a cap with ``episodes``): stop after S steps and
    keep the episodes complete by then.

    Returns "returns" and "lengths" (float64 [n]) per kept agent-episode, in order of (round, agent),
    "episodes" = n, "agents_per_env" of the envs played, and the mean of each of the env's statistics over
    exactly those n episodes (None when n is 0; the env reports statistics per env and step, so an env whose
    agents end at different steps contributes only the steps in which every ending agent's episode is kept:
    then the statistics cover "stat_episodes" < n of them, which favours short episodes)."""
    if steps is None and episodes is None:
        raise ValueError("play needs steps or episodes")
    for name, value in (("episodes", episodes), ("steps", steps), ("num_envs", num_envs)):
        if value is not None and not value >= 1:  # 0 played nothing and returned 0 episodes, silently
            raise ValueError(f"play: {name}={value} must be at least 1")
    config = config or trainer.config
    names = trainer.env.kind.log_names
    with jaxlab.make(config.env_name, num_envs=num_envs or config.vec.num_envs, seed=seed,
                     **env_args(config)) as env:
        A, per_env = env.num_agents, env.agents_per_env
        # the trainer's policy with its observation statistics as they are (frozen: nothing updates them here)
        step, finish = make_step(trainer.norm.acting_policy(trainer.policy), trainer.spec, env.buffers.layout,
                                 deterministic=deterministic)
        rounds = None if episodes is None else -(-episodes // A)
        # agents kept in the last round: those of the first whole envs that bring the total to N
        last_round_agents = None if episodes is None else -(-(episodes - (rounds - 1) * A) // per_env) * per_env
        quota = None if rounds is None else np.where(np.arange(A) < last_round_agents, rounds, rounds - 1)
        env.track_episodes()
        rollout = Rollout([env], jit_step(step), jit_step(finish),
                          horizon=1, carries=[trainer.policy.initial_carry(A)], key=jax.random.PRNGKey(seed))
        running_return = np.zeros(A)
        running_length = np.zeros(A, np.int64)
        finished = np.zeros(A, np.int64)          # complete episodes per agent
        kept = []                                  # (round, agent, return, length) per kept episode
        stat_sums, stat_count = np.zeros(len(names)), 0
        t = 0
        while (steps is None or t < steps) and (quota is None or (finished < quota).any()):
            seen = env.observations.copy() if on_step is not None else None
            frame = env.render(0) if render else None
            active = None if env.active is None else env.active.copy()  # who acts in this step
            size = picture() if callable(picture) else picture
            image = env.pixels(0, *size) if size is not None else None
            host_action, _ = rollout.step_once(trainer.acting_params)
            rewards = env.rewards
            ended = env.terminals | env.truncations
            if active is not None:  # a waiting agent's rows are not episodes
                ended &= active
            if on_step is not None:
                extra = {"frame": frame} if render else {}
                if picture is not None:
                    extra["picture"] = image
                on_step(t, seen, host_action, rewards, ended, **extra)
            running_return += rewards
            running_length += 1 if active is None else active
            keep = ended if quota is None else ended & (finished < quota)
            for agent in np.flatnonzero(keep):
                kept.append((finished[agent], agent, running_return[agent], running_length[agent]))
            for e in np.flatnonzero(env.episode_ends):
                ending = keep[e * per_env:(e + 1) * per_env][ended[e * per_env:(e + 1) * per_env]]
                if ending.all():
                    stat_sums += env.episode_stats[e, :len(names)]
                    stat_count += int(env.episode_ends[e])
            finished += ended
            running_return[ended] = 0.0
            running_length[ended] = 0
            t += 1
    kept.sort(key=lambda episode: episode[:2])
    result = {"episodes": len(kept), "returns": np.asarray([e[2] for e in kept], np.float64),
              "lengths": np.asarray([e[3] for e in kept], np.float64), "stat_episodes": stat_count,
              "agents_per_env": per_env}
    for name, total in zip(names, stat_sums):
        result[name] = float(total / stat_count) if stat_count else None
    return result


class Actor:
    """``trainer``'s policy acting in a loop of your own: ``actor(observations, ended, mask)`` -> actions, for
    ``num_agents`` agents whose LSTM carry it keeps between calls (frozen observation statistics, as in play).

    ``ended`` [A] bool: which agents' previous step ended their episode (the step's terminals | truncations),
    so the carry of those agents starts over before they act, as in training; all True on the first call
    (a new Actor's carry is the initial one either way). ``observations`` [A, *obs_shape] of the env's
    dtype, ``mask`` [A, sum(nvec)] bool for an env with action masks. Returns numpy actions [A] int32
    (discrete), [A, k] int32 (multi-discrete) or [A, k] float32 (continuous, the Gaussian's mean or a draw,
    unclipped: the env clips). ``deterministic``: the most likely action, else a draw from ``seed``'s key.

    ``active`` [A] bool, for an env whose agents wait for their env's reset (option agents_wait; pass
    env.active, None otherwise): a waiting agent (False) still gets an action, which the env ignores, and its
    carry starts over while it waits and again when it acts next, as in play and training (where the env's
    rows of a waiting agent are flagged terminal), so ``ended`` may name each agent's own ends only.

    A mask row that allows no action (all False) for an acting agent is a ValueError naming the agent (and
    component), before the policy acts: play and training act -1 there (distributions.NO_ACTION), which a
    VecEnv refuses naming the agent, but a loop of one's own may take -1 for the last action. A waiting
    agent's empty row gets -1, which the env ignores."""

    def __init__(self, trainer, num_agents: int, deterministic: bool = True, seed: int = 0):
        from jaxlab.agent import distributions

        if isinstance(num_agents, bool) or not isinstance(num_agents, numbers.Integral) or num_agents < 1:
            raise ValueError(f"Actor: num_agents={num_agents!r} must be a whole number, at least 1 (the rows of "
                             "each call's observations, e.g. env.num_agents)")
        num_agents = int(num_agents)
        space = trainer.env.observation_space
        self.num_agents, self.obs_shape, self.obs_dtype = num_agents, tuple(space.shape), np.dtype(space.dtype)
        self.has_mask, self.params = trainer.env.has_mask, trainer.acting_params
        self.mask_shape = (num_agents, trainer.env.action_mask.shape[1]) if self.has_mask else None
        self.nvec = trainer.spec.nvec  # the mask's components: [sum(nvec)] columns, one block per component
        policy, spec = trainer.norm.acting_policy(trainer.policy), trainer.spec
        self.carry = policy.initial_carry(num_agents)
        self.waited = np.zeros(num_agents, bool)  # [A]: the agents that were waiting in the previous call
        self.key = jax.random.PRNGKey(seed)

        def act(params, carry, obs, reset, mask, key):
            carry, head, _, log_std = policy.apply(params, carry, obs, reset)
            if deterministic:
                return carry, distributions.deterministic(spec, head, mask)
            return carry, distributions.sample(spec, head, log_std, key, mask)

        self._act = jax.jit(act)

    def __call__(self, observations: np.ndarray, ended: np.ndarray, mask: np.ndarray | None = None,
                 active: np.ndarray | None = None) -> np.ndarray:
        observations, ended = np.asarray(observations), np.asarray(ended, bool)
        want = (self.num_agents, *self.obs_shape)
        if observations.shape != want or observations.dtype != self.obs_dtype:
            raise ValueError(f"Actor: observations of shape {observations.shape} {observations.dtype}, the policy "
                             f"takes {want} {self.obs_dtype} (num_agents {self.num_agents}, the env's observation)")
        if ended.shape != (self.num_agents,):
            raise ValueError(f"Actor: ended of shape {ended.shape}, must be ({self.num_agents},): which agents' "
                             "previous step ended their episode (terminals | truncations)")
        if (mask is None) == self.has_mask:
            raise ValueError("Actor: the env has action masks: pass mask=env.action_mask" if self.has_mask
                             else "Actor: the env has no action mask: leave mask out")
        if mask is not None and np.shape(mask) != self.mask_shape:
            raise ValueError(f"Actor: mask of shape {np.shape(mask)}, must be {self.mask_shape}: one row of legal "
                             "actions per agent, as env.action_mask")
        mask = None if mask is None else np.asarray(mask, bool)
        reset = ended | self.waited
        if active is not None:
            if np.shape(active) != (self.num_agents,):
                raise ValueError(f"Actor: active of shape {np.shape(active)}, must be ({self.num_agents},): which "
                                 "agents act in this step (env.active), or leave it out for an env without waiting")
            self.waited = ~np.asarray(active, bool)
            reset = reset | self.waited
        if mask is not None:
            self._refuse_empty_rows(mask, ~self.waited if active is not None else np.ones(self.num_agents, bool))
        self.key, key = jax.random.split(self.key)
        self.carry, actions = self._act(self.params, self.carry, observations, reset, mask, key)
        return np.asarray(actions)

    def _refuse_empty_rows(self, mask: np.ndarray, acting: np.ndarray) -> None:
        """ValueError naming the first acting agent whose ``mask`` [A, sum(nvec)] row allows no action in a
        component (``acting`` [A] bool)."""
        offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
        for component, (offset, n) in enumerate(zip(offsets, self.nvec)):
            empty = np.flatnonzero(acting & ~mask[:, offset:offset + n].any(axis=1))
            if empty.size:
                part = f" in component {component}" if len(self.nvec) > 1 else ""
                raise ValueError(f"Actor: agent {int(empty[0])}'s mask row allows no action{part} (all False), so "
                                 "the policy has none to choose; give every acting agent at least one legal action "
                                 "(a waiting agent's row may be empty: pass active=env.active)")
